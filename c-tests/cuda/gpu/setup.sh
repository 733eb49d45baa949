# The set-up the GPU run scripts share (gpu/run_gpu.sh, gpu/inject/run_inject.sh, gpu/replay/run_replay.sh):
# their two arguments, the prebuilt archive, the machine's description and the standalone CMake build. Sourced
# by them after `set -u -o pipefail`, never run on its own; it only defines functions.
#
#   source "$(dirname "$0")/setup.sh"          # from gpu/; "$(dirname "$0")/../setup.sh" from its subfolders
#   kreplay_gpu_args "run_x.sh PREBUILT_DIR OUT_DIR" "$@"    # sets prebuilt and out (absolute paths)
#   kreplay_gpu_archive                        # sets archive: libkreplay.a, unpacked first if only .gz is there
#   kreplay_gpu_describe FIELDS >log           # date, kernel, nvidia-smi --query-gpu=FIELDS, nvcc, CMake
#   kreplay_gpu_build SRC BUILD "TARGETS" [CMAKE_ARGS...] >>log 2>&1   # status: configure's, else build's
#   kreplay_replay_begin NAME                   # the replay scripts' state: work=$out/NAME, summary, failures, ...
#   kreplay_replay_launcher TARGETS             # build, set launcher; on failure: FAIL row, archive, exit 1
#   kreplay_replay_end                          # archive $work as $out/NAME.tar.gz, the failures row, exit status
#   row TEXT; verdict WHAT CONDITION...; run LOG CMD...   # the replay scripts' checks (below)
#   csv_figure REPORT WHAT                      # one figure of a kreplay-cuda-replay report (replay/csv_figure.py)
kreplay_gpu_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  echo "setup.sh is sourced by the GPU run scripts, not run" >&2
  exit 2
fi

# Both arguments are required: a script run without them stops here (status 2) instead of writing its logs to /.
# OUT_DIR is created here: run_inject.sh and run_gpu.sh write into it directly, and a missing one lost every log.
kreplay_gpu_args() {
  local usage=$1
  shift
  if [[ $# -lt 2 || -z $1 || -z $2 ]]; then
    echo "usage: $usage" >&2
    exit 2
  fi
  mkdir -p "$2" || exit 2
  prebuilt=$(realpath "$1")
  out=$(realpath "$2")
}

# The archive may travel gzipped (a release libkreplay.a is about 57 MB, the device tool carries 64 MiB in all,
# gzip makes it about 5 MB). An archive that is in neither form is left for the build to report.
kreplay_gpu_archive() {
  archive="$prebuilt/libkreplay.a"
  if [[ ! -f "$archive" && -f "$archive.gz" ]]; then
    mkdir -p /tmp/kreplay-prebuilt
    gunzip -c "$archive.gz" >/tmp/kreplay-prebuilt/libkreplay.a
    archive=/tmp/kreplay-prebuilt/libkreplay.a
  fi
}

# The first lines of every script's env.log. A missing nvidia-smi or nvcc is recorded, not fatal.
kreplay_gpu_describe() {
  echo "== $(date -u +%FT%TZ) $(uname -a)"
  nvidia-smi --query-gpu="$1" --format=csv || true
  command -v nvcc && nvcc --version | tail -2
  cmake --version | head -1
}

# Configures SRC (a standalone CMake project under c-tests/cuda) into BUILD against the archive, in Release with
# Ninja, then builds TARGETS (space-separated; empty: everything) on every core.
kreplay_gpu_build() {
  local src=$1 build=$2 targets=$3
  shift 3
  local target_args=()
  if [[ -n $targets ]]; then
    # shellcheck disable=SC2206  # the list is split on purpose
    target_args=(--target $targets)
  fi
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKREPLAY_PREBUILT_LIB="$archive" "$@" &&
    cmake --build "$build" "${target_args[@]}" -j "$(nproc)"
}

# The replay scripts' checks (replay/run_replay.sh, replay/run_graphs_counters.sh), which set summary, failures
# and timeout_s first. row: a line on stdout and in $summary. verdict: PASS or FAIL by the condition's status,
# a failure counted in $failures. run: the command under ${run_timeout:-$timeout_s} seconds, its output in LOG,
# its exit status and time appended; prints the program's checksum (its last "CHECKSUM" line), or nothing.
row() { echo "$*" | tee -a "$summary"; }
verdict() {
  local what=$1
  shift
  if "$@"; then row "PASS $what"; else row "FAIL $what"; failures=$((failures + 1)); fi
}
run() {
  local log=$1
  shift
  local start=$SECONDS
  timeout -k 10 "${run_timeout:-$timeout_s}" "$@" >"$log" 2>&1
  echo "== exit $? after $((SECONDS - start)) s" >>"$log"
  sed -n 's/^CHECKSUM //p' "$log" | tail -1
}
csv_figure() {
  python3 "$kreplay_gpu_dir/replay/csv_figure.py" "$@"
}

# The replay scripts' frame (replay/run_replay.sh, replay/run_graphs_counters.sh), after kreplay_gpu_args: the
# build folder, the per-run timeout, the work folder $out/NAME with its logs, the summary and the failure count.
kreplay_replay_begin() {
  replay_name=$1
  build=${KREPLAY_RUN_BUILD_DIR:-/tmp/kreplay-replay-build}
  timeout_s=${KREPLAY_RUN_TIMEOUT:-300}
  work="$out/$replay_name"
  mkdir -p "$work"
  kreplay_gpu_archive
  summary="$out/summary.txt"
  : >"$summary"
  failures=0
}

# Builds TARGETS (the launcher and its library among them) from $src into $build, logging into $work/env.log, and
# sets launcher; a failed build ends the script (status 1) with its log's tail and the archive.
kreplay_replay_launcher() {
  kreplay_gpu_build "$src" "$build" "$1" >>"$work/env.log" 2>&1
  local build_rc=$?
  launcher=$(find "$build" -name kreplay-cuda-replay -type f | head -1)
  if [[ $build_rc -ne 0 || -z "$launcher" ]]; then
    tail -40 "$work/env.log"
    row "FAIL build ($build_rc)"
    tar -C "$out" -czf "$out/$replay_name.tar.gz" "$replay_name"
    exit 1
  fi
}

# Archives the logs and reports, writes the failure count, and exits 1 when a check failed.
kreplay_replay_end() {
  tar -C "$out" -czf "$out/$replay_name.tar.gz" "$replay_name"
  row "failures: $failures"
  exit $((failures != 0))
}
