"""Check (b) of run_inject.sh: a small CuPy program with the injection (tracking on): the memory pool's bytes
in kreplay's inventory, an ElementwiseKernel, and a RawModule JIT-compiled by NVRTC with a __device__ global,
which the injection must list at the address CuPy's get_global gives; then a snapshot of the device.
Without CUDA_INJECTION64_PATH it only runs the program (the runner's warm-up, so that a first run's cold start
is not mistaken for the library's). Prints "RESULT cupy ..." lines; exits 1 when a check fails."""
import os
import sys

import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inject_ctypes import Injection  # noqa: E402

failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    failures += 0 if ok else 1


pool = cp.get_default_memory_pool()
a = cp.arange(1 << 22, dtype=cp.float32)
b = cp.ones(1 << 20, dtype=cp.float64)
saxpy = cp.ElementwiseKernel("float32 x, float32 k", "float32 y", "y = k * x + y", "kreplay_saxpy")
c = cp.zeros_like(a)
saxpy(a, cp.float32(2.0), c)
module = cp.RawModule(code=r'''
__device__ int kreplay_hits;
__device__ float kreplay_scale[33];
extern "C" __global__ void kreplay_count(const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] > 0.f) atomicAdd(&kreplay_hits, 1);
  if (i < 33) kreplay_scale[i] = 1.0f;
}''')
count = module.get_function("kreplay_count")
count(((1 << 22) // 256,), (256,), (a, cp.int32(1 << 22)))
s = float(c.sum())
cp.cuda.runtime.deviceSynchronize()
if "CUDA_INJECTION64_PATH" not in os.environ:
    print(f"RESULT cupy warm_up_sum={s}", flush=True)  # the run without the library: caches warmed, nothing checked
    sys.exit(0)

inj = Injection()
state = inj.state()
check(state.subscribed, "the injection is subscribed")
rc, stats = inj.inventory(0)
check(rc == 0 and stats.bytes == pool.total_bytes(),
      f"inventory bytes {stats.bytes} == pool.total_bytes() {pool.total_bytes()} ({stats.regions} regions)")
rc, variables, detail = inj.variables(0)
check(rc == 0, f"every module's variables resolve ({detail})")
listed = {name: (address, size) for _, name, address, size, _ in variables}
for name, size in (("kreplay_hits", 4), ("kreplay_scale", 132)):
    address = module.get_global(name).ptr
    got = listed.get(name)
    check(got == (address, size), f"RawModule global {name}: listed {got}, CuPy says ({address}, {size})")
_, modules, cubin_variables = inj.module_counts(0)
r = inj.snapshot(0)
check(r.snap_status == 0 and r.restore_status == 0,
      f"snapshot + restore: status {r.snap_status} reason {r.reason} ({r.detail.decode(errors='replace')})")
check(float(c.sum()) == s, "the program's data is unchanged by the snapshot and restore")
print(f"RESULT cupy inventory_bytes={stats.bytes} pool_total={pool.total_bytes()} modules={modules} "
      f"cubin_variables={cubin_variables} resolved={len(variables)} snapshot={r.snap_status} "
      f"regions={r.regions} module_variables={r.module_variables} bytes={r.bytes}", flush=True)
sys.exit(1 if failures else 0)
