#!/usr/bin/env bash
# The CUDA injection library's GPU checks, built and run in one go on a machine with an NVIDIA GPU (and,
# typically, no Rust), from the repository root:
#
#   c-tests/cuda/gpu/inject/run_inject.sh PREBUILT_DIR OUT_DIR
#
# PREBUILT_DIR holds libkreplay.a or libkreplay.a.gz (c-tests/cuda/README.md: how to make it). Needs nvcc,
# CMake, Ninja, and python3 with torch (torchvision optional) and cupy. Checks:
#   (c) vars      kreplay_inject_vars: our own __device__/__constant__ variables (3 TUs, -rdc) and a JIT module
#   (a) torch     a training step: memory_reserved <= inventory <= the cuMemGetInfo difference, inventory == the
#                 tracker's own allocated-minus-freed count, variables in PyTorch's modules and (eager loading)
#                 cuBLAS's, a snapshot; weights bit-identical to a run without the library
#   (b) cupy      pool, ElementwiseKernel, RawModule with a __device__ global; a snapshot
#   (d2) overhead tracking on against off inside one process (torch_ab.py: CUPTI unsubscribed between steps)
#   (d) overhead  the step without the library, injected with tracking off, and on, in lockstep
#                 (torch_lockstep.py: 2 workers per configuration, KREPLAY_INJECT_ROUNDS rounds, default 30, of
#                 one step each in a shuffled order): medians, % against plain, the noise floor (plain against
#                 plain), the tracker's events during the timed steps; PASS/FAIL against the 1 % and 3 % bars
#   (e) sanitizer the Compute Sanitizer API's view of the same step (when its headers are there)
#   (f) conflict  CUPTI already held: one line, the program unharmed
#   (g) untracked kreplay_inject_untracked: managed, pinned and mapped host memory of known sizes counted by the
#                 tracker and held by kreplay as untracked memory (kreplay_inject_untracked_stats), both back to
#                 their values before after the frees; the inventory holds only the device block
# (a), (b) and (c) run with lazy module loading (the driver's default) and again with CUDA_MODULE_LOADING=EAGER.
# OUT_DIR receives 9 files: env.log, vars.log, untracked.log, torch.log, cupy.log, overhead.log, sanitizer.log,
# conflict.log, summary.txt (the table printed last). The exit status is 1 when any check failed (a missed
# overhead bar too).
set -u -o pipefail

src=$(cd "$(dirname "$0")" && pwd)
source "$src/../setup.sh"
kreplay_gpu_args "run_inject.sh PREBUILT_DIR OUT_DIR" "$@"
build=${KREPLAY_INJECT_BUILD_DIR:-/tmp/kreplay-inject-build}
step_timeout=${KREPLAY_INJECT_STEP_TIMEOUT:-180}
kreplay_gpu_archive

{
  kreplay_gpu_describe index,name,driver_version,memory.total
  python3 -c 'import torch; print("torch", torch.__version__)' 2>&1
  python3 -c 'import torchvision; print("torchvision", torchvision.__version__)' 2>&1
  python3 -c 'import cupy; print("cupy", cupy.__version__)' 2>&1
  echo "== build"
} >"$out/env.log" 2>&1

kreplay_gpu_build "$src" "$build" "kreplay_cuda_inject kreplay_inject_vars kreplay_inject_untracked" >>"$out/env.log" 2>&1
build_rc=$?
cmake --build "$build" --target kreplay_sanitizer_probe -j "$(nproc)" >>"$out/env.log" 2>&1
probe_rc=$?
lib=$(find "$build" -name libkreplay_cuda_inject.so | head -1)
probe=$(find "$build" -name libkreplay_sanitizer_probe.so | head -1)
echo "build: $build_rc ($lib); sanitizer probe: $probe_rc (${probe:-none})" | tee -a "$out/env.log"
nm -D --defined-only "$lib" >>"$out/env.log" 2>&1
if [[ $build_rc -ne 0 || -z "$lib" ]]; then
  tail -30 "$out/env.log"
  exit 1
fi

injected() {  # injected TRACKING cmd...: the command with the library loaded by the driver
  local tracking=$1
  shift
  CUDA_INJECTION64_PATH="$lib" KREPLAY_INJECT_TRACKING="$tracking" KREPLAY_INJECT_LOG=${KREPLAY_INJECT_LOG:-warning} \
    timeout "$step_timeout" "$@"
}
run_step() {  # run_step LOG LABEL cmd...: appends to LOG, prints the exit status line
  local log=$1 label=$2
  shift 2
  echo "== $label" >>"$log"
  local start=$SECONDS
  "$@" >>"$log" 2>&1
  local rc=$?
  echo "== $label: exit $rc after $((SECONDS - start)) s" >>"$log"
  return $rc
}

# (c) our variables
: >"$out/vars.log"
run_step "$out/vars.log" "vars lazy" injected 1 "$build/kreplay_inject_vars"
run_step "$out/vars.log" "vars eager" env CUDA_MODULE_LOADING=EAGER CUDA_INJECTION64_PATH="$lib" \
  timeout "$step_timeout" "$build/kreplay_inject_vars"

# (g) managed, pinned and mapped host memory: counted, held by kreplay as untracked, forgotten at the frees
: >"$out/untracked.log"
run_step "$out/untracked.log" "untracked" injected 1 "$build/kreplay_inject_untracked"

# (a) PyTorch. The run without the library goes first: it takes a fresh machine's cold start (a probe's first
# lazy-loading runs, PyTorch and CuPy alike, did not finish in 100 s; the eager runs after them did).
: >"$out/torch.log"
run_step "$out/torch.log" "torch digest, no library" timeout "$step_timeout" python3 "$src/torch_step.py" digest
run_step "$out/torch.log" "torch check lazy" injected 1 python3 "$src/torch_step.py" check
run_step "$out/torch.log" "torch check eager" env CUDA_MODULE_LOADING=EAGER CUDA_INJECTION64_PATH="$lib" \
  timeout "$step_timeout" python3 "$src/torch_step.py" check
digests=$(sed -n 's/^RESULT torch digest=//p' "$out/torch.log" | sort -u | wc -l)
echo "RESULT torch distinct_final_digests=$digests (1: bit-identical with and without the library)" >>"$out/torch.log"

# (b) CuPy
: >"$out/cupy.log"
run_step "$out/cupy.log" "cupy warm-up, no library" timeout "$step_timeout" python3 "$src/cupy_prog.py"
run_step "$out/cupy.log" "cupy lazy" injected 1 python3 "$src/cupy_prog.py"
run_step "$out/cupy.log" "cupy eager" env CUDA_MODULE_LOADING=EAGER CUDA_INJECTION64_PATH="$lib" \
  timeout "$step_timeout" python3 "$src/cupy_prog.py"

# (d) overhead, in lockstep: two worker processes per configuration (plain, tracking off, tracking on) take turns,
# one step each per round in a shuffled order, so that all meet the same clocks and drift (torch_lockstep.py).
: >"$out/overhead.log"
rounds=${KREPLAY_INJECT_ROUNDS:-30}
run_step "$out/overhead.log" "overhead lockstep" timeout "$step_timeout" python3 "$src/torch_lockstep.py" \
  --library "$lib" --rounds "$rounds"
# (d2) tracking on against off within one process: CUPTI unsubscribed and subscribed again between steps
# (torch_ab.py), which takes the process-to-process spread out of the tracking-on figure.
run_step "$out/overhead.log" "overhead in one process" injected 1 python3 "$src/torch_ab.py" --pairs 100

# (e) the Compute Sanitizer API on the same step
: >"$out/sanitizer.log"
if [[ -n "$probe" ]]; then
  sanitizer_dir=$(dirname "$(find -L /usr/local/cuda*/compute-sanitizer -name 'libsanitizer-public.so*' | head -1)")
  run_step "$out/sanitizer.log" "sanitizer probe" env LD_LIBRARY_PATH="$sanitizer_dir:${LD_LIBRARY_PATH:-}" \
    CUDA_INJECTION64_PATH="$probe" timeout "$step_timeout" python3 "$src/torch_step.py" time
else
  echo "RESULT sanitizer not_built=1" >>"$out/sanitizer.log"
fi

# (f) CUPTI already held
: >"$out/conflict.log"
run_step "$out/conflict.log" "conflict" injected 1 python3 "$src/conflict.py"
conflict_lines=$(grep -c '^kreplay-inject:' "$out/conflict.log")
held=$(grep -c 'already has a subscriber' "$out/conflict.log")
echo "RESULT conflict injection_lines=$conflict_lines held_line=$held" >>"$out/conflict.log"

# ---- Summary ------------------------------------------------------------------------------------------------
overhead() {  # overhead KEY: a figure of torch_lockstep.py's summary line
  sed -n "s/^RESULT overhead summary .*\<$1=\([^ ]*\).*/\1/p" "$out/overhead.log" | tail -1
}
count() { grep -c "^$1 " "$2"; }
{
  echo "| check | PASS | FAIL | figures |"
  echo "| --- | --- | --- | --- |"
  for name in vars untracked torch cupy; do
    figures=$(grep "^RESULT $name " "$out/$name.log" | sed "s/^RESULT $name //" | tr '\n' ';' | cut -c1-900)
    echo "| ($name) | $(count PASS "$out/$name.log") | $(count FAIL "$out/$name.log") | $figures |"
  done
  echo "| (d) overhead | $(count PASS "$out/overhead.log") | $(count FAIL "$out/overhead.log") |" \
       "lockstep, $rounds rounds x 2 workers: plain $(overhead plain_ms) ms, tracking off $(overhead off_ms) ms" \
       "($(overhead off_pct) %, bar 1 %), tracking on $(overhead on_ms) ms ($(overhead on_pct) %, bar 3 %);" \
       "noise floor $(overhead noise_floor_pct) %; tracker events in the timed steps $(overhead tracking_on_events);" \
       "$(grep -E '^(PASS|FAIL|INFO) overhead' "$out/overhead.log" | sed 's/ overhead / /' | tr '\n' ';')" \
       "in one process (d2): $(grep '^RESULT ab ' "$out/overhead.log" | sed 's/^RESULT ab //'); $(grep -E '^(PASS|FAIL) ab' "$out/overhead.log") |"
  echo "| (e) sanitizer | | | $(grep '^RESULT sanitizer' "$out/sanitizer.log" | sed 's/^RESULT sanitizer //' | tr '\n' ';') |"
  echo "| (f) conflict | | | $(grep '^RESULT conflict' "$out/conflict.log" | sed 's/^RESULT conflict //' | tr '\n' ';') (want 1 line, held_line=1, program_ran=1) |"
  echo "| exits | | | $(grep -h '^== .*: exit' "$out"/{vars,untracked,torch,cupy,overhead,sanitizer,conflict}.log | sed 's/^== //' | tr '\n' ';') |"
} | tee "$out/summary.txt"

failed=$(cat "$out"/{vars,untracked,torch,cupy,overhead}.log | grep -c '^FAIL ')
[[ $failed -eq 0 && $digests -eq 1 && $conflict_lines -eq 1 ]] && exit 0
exit 1
