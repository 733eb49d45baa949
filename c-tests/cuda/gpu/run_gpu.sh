#!/usr/bin/env bash
# Builds the CUDA adapter, test and benchmarks against a prebuilt libkreplay.a and runs them, all in one go, on a
# machine with NVIDIA GPUs (and, typically, no Rust toolchain). Run from the repository root:
#
#   c-tests/cuda/gpu/run_gpu.sh PREBUILT_DIR OUT_DIR [kreplay_cuda_bench arguments...]
#
# PREBUILT_DIR holds libkreplay.a or libkreplay.a.gz (c-tests/cuda/README.md: how to make it), and may hold
# fallbacks made on another machine: bin/kreplay_{cuda_test,cuda_ops_bench,cuda_bench,cupti_probe} (used only if
# the build here fails) and cupti/{include,lib} (used only if no CUPTI Checkpoint headers and library are found
# here).
#
# Steps, chosen with KREPLAY_GPU_STEPS (comma-separated; default all, in this order):
#   test   kreplay_cuda_test (correctness, every visible GPU at once), then kreplay_cuda_window_test (the replay
#          window on GPU 0: a copy from a second thread fenced, and the window's cost), appended to test.log
#   ops    kreplay_cuda_ops_bench (copy_batch candidates, digest throughput and self-test; GPU 0), with the
#          arguments in KREPLAY_OPS_ARGS (e.g. "--no-digests --copy-layout 96:2048")
#   bench  the CUPTI probe, then kreplay_cuda_bench with the arguments given here (every visible GPU at once
#          unless --devices says otherwise): all rows but CUPTI's OPT_TRANSFER ones, then those in a second
#          process (KREPLAY_CUPTI_TRANSFER_ROWS=0 leaves them out), their CSV rows appended to the first's; then
#          the plots when python3 has matplotlib
# OUT_DIR receives at most 8 files (the device tool's limit): env.log (machine, build, CUPTI probe), test.log,
# ops.log, bench.log, h200-replay-benchmark.csv, kreplay-info.log, h200-per-dispatch-vs-fraction.png,
# h200-per-dispatch-vs-footprint.png. The exit status is the first failing step's.
set -u -o pipefail

# c-tests/cuda, the standalone build's source tree (this script is in its gpu/ folder).
src=$(cd "$(dirname "$0")/.." && pwd)
source "$src/gpu/setup.sh"
kreplay_gpu_args "run_gpu.sh PREBUILT_DIR OUT_DIR [bench args]" "$@"
shift 2
build=${KREPLAY_CUDA_BUILD_DIR:-/tmp/kreplay-cuda-build}
kreplay_gpu_archive
steps=",${KREPLAY_GPU_STEPS:-test,ops,bench},"
status=0

{
  kreplay_gpu_describe index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,clocks.sm,clocks.mem
  nvidia-smi topo -m || true
  ninja --version
  nproc; grep MemTotal /proc/meminfo
  cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
  echo "libkreplay.a: $(stat -c %s "$archive") bytes"
  echo "steps: $steps; bench arguments: $*"
} >"$out/env.log" 2>&1

# CUPTI's Checkpoint API: the toolkit's own copy first, then a pip wheel's, then the carried fallback.
cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")
cupti_header=$(find -L "$cuda_root" /usr/local/cuda* /opt /usr/lib/python3*/ /usr/local/lib/python3*/ \
                 -name cupti_checkpoint.h 2>/dev/null | head -1)
cupti_lib=$(find -L "$cuda_root" /usr/local/cuda* /opt /usr/lib/python3*/ /usr/local/lib/python3*/ \
              -name 'libcheckpoint.so*' 2>/dev/null | head -1)
if [[ -z "$cupti_header" || -z "$cupti_lib" ]] && [[ -d "$prebuilt/cupti" ]]; then
  echo "CUPTI Checkpoint not found on this machine; using the carried copy" >>"$out/env.log"
  cupti_header="$prebuilt/cupti/include/cupti_checkpoint.h"
  cupti_lib="$prebuilt/cupti/lib/libcheckpoint.so"
fi
{
  echo "cupti_checkpoint.h: ${cupti_header:-none}"
  echo "libcheckpoint: ${cupti_lib:-none}"
} >>"$out/env.log" 2>&1

cupti_args=()
if [[ -n "$cupti_header" && -n "$cupti_lib" ]]; then
  cupti_args=(-DKREPLAY_CUPTI_INCLUDE_DIR="$(dirname "$cupti_header")" -DKREPLAY_CUPTI_CHECKPOINT_LIBRARY="$cupti_lib")
  export LD_LIBRARY_PATH="$(dirname "$cupti_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

bin="$build"
echo "== build" >>"$out/env.log"
if ! kreplay_gpu_build "$src" "$build" "" "${cupti_args[@]}" >>"$out/env.log" 2>&1; then
  echo "BUILD FAILED here; falling back to the binaries built elsewhere" | tee -a "$out/env.log"
  bin="$prebuilt/bin"
fi
tail -3 "$out/env.log"

record() {  # the first failure decides the exit status
  if [[ $status -eq 0 && $1 -ne 0 ]]; then
    status=$1
  fi
}

if [[ $steps == *,test,* ]]; then
  timeout 300 "$bin/kreplay_cuda_test" 2>&1 | tee "$out/test.log"
  rc=${PIPESTATUS[0]}
  echo "test exit status: $rc"
  record "$rc"
  if [[ -x "$bin/kreplay_cuda_window_test" ]]; then
    timeout 120 "$bin/kreplay_cuda_window_test" 2>&1 | tee -a "$out/test.log"
    rc=${PIPESTATUS[0]}
    echo "window test exit status: $rc"
    record "$rc"
  fi
fi

if [[ $steps == *,ops,* ]]; then
  # shellcheck disable=SC2086  # KREPLAY_OPS_ARGS is split on purpose
  timeout 300 "$bin/kreplay_cuda_ops_bench" --csv /tmp/kreplay-cuda-ops.csv ${KREPLAY_OPS_ARGS:-} 2>&1 | tee "$out/ops.log"
  rc=${PIPESTATUS[0]}
  echo "ops bench exit status: $rc"
  record "$rc"
  if [[ -x "$bin/kreplay_host_lock_bench" ]]; then
    echo "== kreplay_host_lock_bench" >>"$out/ops.log"
    timeout 120 "$bin/kreplay_host_lock_bench" 2>&1 | tee -a "$out/ops.log"
    record "${PIPESTATUS[0]}"
  fi
fi

if [[ $steps == *,bench,* ]]; then
  # Which way of naming the context CUPTI's Checkpoint API accepts on this driver (see cupti_probe.cu).
  cupti_context=explicit
  cupti_host_reserve=total
  if [[ -x "$bin/kreplay_cupti_probe" ]]; then
    echo "== CUPTI probe" >>"$out/env.log"
    "$bin/kreplay_cupti_probe" >/tmp/kreplay-cupti-probe.log 2>&1
    cat /tmp/kreplay-cupti-probe.log >>"$out/env.log"
    probed=$(sed -n 's/^CUPTI_CONTEXT=//p' /tmp/kreplay-cupti-probe.log)
    [[ -n "$probed" && "$probed" != none ]] && cupti_context=$probed
    probed=$(sed -n 's/^CUPTI_HOST_RESERVE=//p' /tmp/kreplay-cupti-probe.log)
    [[ -n "$probed" && "$probed" != none ]] && cupti_host_reserve=$probed
  fi
  bench=("$bin/kreplay_cuda_bench" --cupti-context "$cupti_context" --cupti-host-reserve "$cupti_host_reserve")
  # Every row but CUPTI's OPT_TRANSFER ones first; those run in a process of their own afterwards, so that a
  # crash inside CUPTI (one was seen on this driver) costs only them. If they crash, or CUPTI refuses them, with
  # one checkpoint saved over per row, they run again with a new checkpoint per dispatch.
  "${bench[@]}" --csv "$out/h200-replay-benchmark.csv" --info-log "$out/kreplay-info.log" "$@" \
    --exclude-rows 5c,5d 2>&1 | tee "$out/bench.log"
  rc=${PIPESTATUS[0]}
  echo "bench exit status: $rc"
  record "$rc"
  if [[ ${KREPLAY_CUPTI_TRANSFER_ROWS:-1} != 0 && -x "$bin/kreplay_cupti_probe" ]]; then
    for extra in "" --cupti-transfer-fresh; do
      echo "== CUPTI OPT_TRANSFER rows ${extra:-(one checkpoint per row)}" | tee -a "$out/bench.log"
      "${bench[@]}" --csv /tmp/kreplay-cupti-transfer.csv --info-log /tmp/kreplay-cupti-transfer.log "$@" \
        --rows 5c,5d $extra 2>&1 | tee -a "$out/bench.log"
      rc=${PIPESTATUS[0]}
      echo "CUPTI OPT_TRANSFER rows exit status: $rc" | tee -a "$out/bench.log"
      if [[ -s /tmp/kreplay-cupti-transfer.csv ]]; then
        tail -n +2 /tmp/kreplay-cupti-transfer.csv >>"$out/h200-replay-benchmark.csv"
      fi
      rm -f /tmp/kreplay-cupti-transfer.csv
      # Only a crash, or CUPTI refusing a row (3), is worth the second way.
      [[ $rc -ne 139 && $rc -ne 134 && $rc -ne 3 ]] && break
    done
  fi
  if python3 -c 'import matplotlib' 2>/dev/null && [[ -s "$out/h200-replay-benchmark.csv" ]]; then
    python3 "$src/bench/plot_benchmark.py" "$out/h200-replay-benchmark.csv" "$out/h200-per-dispatch-vs-footprint.png" \
      --fraction-png "$out/h200-per-dispatch-vs-fraction.png" >>"$out/env.log" 2>&1 ||
      echo "plot failed (see env.log)"
  fi
fi
nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$out/env.log" 2>&1
exit "$status"
