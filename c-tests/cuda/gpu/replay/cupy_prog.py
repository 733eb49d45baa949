"""Program 3 of run_replay.sh: CuPy on about 1 GiB, in place: elementwise kernels, a reduction, a cuBLAS matmul
and cuRAND, with fixed seeds. KREPLAY_PROG_STEPS (default 3) rounds; prints "STEP_MS" per round and
"CHECKSUM <hex>" over the final arrays."""
import hashlib
import os
import time

import cupy as cp

steps = int(os.environ.get("KREPLAY_PROG_STEPS", "3"))
cp.random.seed(7)
n = 64 << 20                                       # 3 x 256 MiB of float32, plus the matrices
a = cp.random.random(n, dtype=cp.float32)          # cuRAND
b = cp.random.random(n, dtype=cp.float32)
c = cp.zeros(n, dtype=cp.float32)
m = cp.random.random((4096, 4096), dtype=cp.float32)
acc = cp.zeros(1, dtype=cp.float32)
axpy = cp.ElementwiseKernel("float32 x, float32 s", "float32 y", "y = y * 0.5f + s * x", "kreplay_axpy")

cp.cuda.Device().synchronize()
for i in range(steps):
    start = time.perf_counter()
    axpy(a, cp.float32(0.25), b)                   # elementwise, in place
    cp.multiply(a, 1.0001, out=a)
    c += cp.sqrt(b)                                # in place
    acc += c[: 1 << 20].sum()                      # a reduction
    m[:] = m @ m * (1.0 / 4096)                    # cuBLAS, in place
    a += cp.random.standard_normal(n, dtype=cp.float32) * 1e-3   # cuRAND
    cp.cuda.Device().synchronize()
    print(f"STEP_MS {i} {(time.perf_counter() - start) * 1e3:.3f}", flush=True)

h = hashlib.sha256()
for array in (a, b, c, m, acc):
    h.update(cp.asnumpy(array).tobytes())
print(f"RESULT cupy bytes={sum(x.nbytes for x in (a, b, c, m, acc))}", flush=True)
print(f"CHECKSUM {h.hexdigest()[:16]}", flush=True)
