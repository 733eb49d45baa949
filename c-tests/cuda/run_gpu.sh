#!/usr/bin/env bash
# Builds the CUDA adapter, test and benchmark against a prebuilt libkreplay.a and runs them, all in one go, on a
# machine with an NVIDIA GPU (and, typically, no Rust toolchain). Run from the repository root:
#
#   c-tests/cuda/run_gpu.sh PREBUILT_DIR OUT_DIR [benchmark arguments...]
#
# PREBUILT_DIR holds libkreplay.a (cargo build --release -p kreplay-capi), and may hold fallbacks made on
# another machine: bin/kreplay_{cuda_test,cuda_bench,cupti_probe} (used only if the build here fails) and
# cupti/{include,lib} (used only if no CUPTI Checkpoint headers and library are found here). OUT_DIR receives
# env.log, build.log, test.log, cupti-probe.log, bench.log, the benchmark's CSV and kreplay's INFO lines. The
# exit status is the test's, or the benchmark's when the test passed.
set -u -o pipefail

prebuilt=$(realpath "${1:?usage: run_gpu.sh PREBUILT_DIR OUT_DIR [bench args]}")
out=$(realpath "${2:?usage: run_gpu.sh PREBUILT_DIR OUT_DIR [bench args]}")
shift 2
src=$(cd "$(dirname "$0")" && pwd)
build=${KREPLAY_CUDA_BUILD_DIR:-/tmp/kreplay-cuda-build}

{
  echo "== $(date -u +%FT%TZ) $(uname -a)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,clocks.sm,clocks.mem --format=csv || true
  nvidia-smi topo -m || true
  command -v nvcc && nvcc --version | tail -2
  cmake --version | head -1
  ninja --version
  nproc; grep MemTotal /proc/meminfo
  cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
  echo "libkreplay.a: $(stat -c %s "$prebuilt/libkreplay.a") bytes"
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
  [[ -n "$cupti_header" ]] && grep -n "reserveDeviceMB\|reserveHostMB\|allowOverwrite\|CUPTI_CHECKPOINT_OPT" "$cupti_header"
} >>"$out/env.log" 2>&1

cupti_args=()
if [[ -n "$cupti_header" && -n "$cupti_lib" ]]; then
  cupti_args=(-DKREPLAY_CUPTI_INCLUDE_DIR="$(dirname "$cupti_header")" -DKREPLAY_CUPTI_CHECKPOINT_LIBRARY="$cupti_lib")
  export LD_LIBRARY_PATH="$(dirname "$cupti_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

bin="$build"
if ! { cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DKREPLAY_PREBUILT_LIB="$prebuilt/libkreplay.a" "${cupti_args[@]}" &&
       cmake --build "$build" -j "$(nproc)"; } >"$out/build.log" 2>&1; then
  echo "BUILD FAILED here; falling back to the binaries built elsewhere" | tee -a "$out/build.log"
  bin="$prebuilt/bin"
fi
tail -3 "$out/build.log"

"$bin/kreplay_cuda_test" 2>&1 | tee "$out/test.log"
test_status=${PIPESTATUS[0]}
echo "test exit status: $test_status"

# Which way of naming the context CUPTI's Checkpoint API accepts on this driver (see cupti_probe.cu).
cupti_context=explicit
cupti_host_reserve=total
if [[ -x "$bin/kreplay_cupti_probe" ]]; then
  "$bin/kreplay_cupti_probe" 2>&1 | tee "$out/cupti-probe.log"
  probed=$(sed -n 's/^CUPTI_CONTEXT=//p' "$out/cupti-probe.log")
  [[ -n "$probed" && "$probed" != none ]] && cupti_context=$probed
  probed=$(sed -n 's/^CUPTI_HOST_RESERVE=//p' "$out/cupti-probe.log")
  [[ -n "$probed" && "$probed" != none ]] && cupti_host_reserve=$probed
fi

"$bin/kreplay_cuda_bench" --csv "$out/h200-replay-benchmark.csv" --info-log "$out/kreplay-info.log" \
  --cupti-context "$cupti_context" --cupti-host-reserve "$cupti_host_reserve" "$@" 2>&1 |
  tee "$out/bench.log"
bench_status=${PIPESTATUS[0]}
echo "bench exit status: $bench_status"
nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$out/env.log" 2>&1

if [[ $test_status -ne 0 ]]; then
  exit "$test_status"
fi
exit "$bench_status"
