"""Checks (a) and (e) of run_inject.sh on a PyTorch training step (torchvision ResNet-18 when torchvision is
there, else a small CNN; fixed seed, deterministic algorithms).

  python3 torch_step.py check   with the injection: memory_reserved <= inventory <= the cuMemGetInfo difference,
                                the inventory equal to the tracker's own allocated-minus-freed count, module
                                variables in PyTorch's modules and (eager loading: CUDA_MODULE_LOADING=EAGER;
                                reported only with lazy loading) in cuBLAS's, a snapshot (snap + restore) of
                                the device in the middle of training, and the final weights' digest (compared
                                by the runner with a run without the library: bit-identical)
  python3 torch_step.py time    the median of 10 steps after warm-up (the step (e) runs; (d) is torch_lockstep.py)
  python3 torch_step.py digest  no checks: the final weights' digest only (the run without the library)
Prints "RESULT torch ..." lines; exits 1 when a check fails."""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_training import TrainingStep  # noqa: E402  (sets CUBLAS_WORKSPACE_CONFIG before torch loads)
import torch  # noqa: E402

mode = sys.argv[1] if len(sys.argv) > 1 else "check"
failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    failures += 0 if ok else 1


free_before = 0


def read_free_before():
    global free_before
    free_before, _ = torch.cuda.mem_get_info()


step = TrainingStep(before_cuda=read_free_before if mode == "check" else None)
name, generator = step.name, step.generator


def digest():
    return step.digest()


if mode == "time":
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    print(f"RESULT torch model={name} median_ms={statistics.median(times):.3f} "
          f"min_ms={min(times):.3f} max_ms={max(times):.3f}", flush=True)
    sys.exit(0)

for _ in range(3):
    step()
torch.cuda.synchronize()

if mode == "check":
    from inject_ctypes import Injection

    inj = Injection()
    state = inj.state()
    check(state.subscribed, f"the injection is subscribed ({state.callbacks_enabled} callbacks)")
    rc, stats = inj.inventory(0)
    reserved = torch.cuda.memory_reserved()
    free_now, _ = torch.cuda.mem_get_info()
    driver_used = free_before - free_now
    # PyTorch's caching allocator holds memory_reserved; cuBLAS, cuDNN and the CUDA runtime allocate beside it
    # with cudaMalloc of their own, which the injection sees too. The driver's cuMemGetInfo difference also
    # counts what no allocation call names (module images, the context's own storage), so it bounds from above.
    check(rc == 0 and reserved <= stats.bytes <= driver_used,
          f"memory_reserved {reserved} <= inventory bytes {stats.bytes} <= cuMemGetInfo difference {driver_used} "
          f"({stats.regions} regions)")
    live_rc, live = inj.live_bytes(0)
    check(live_rc == 0 and live == stats.bytes,
          f"inventory bytes {stats.bytes} == bytes the tracker saw allocated minus freed {live}")
    print(f"RESULT torch model={name} inventory_bytes={stats.bytes} memory_reserved={reserved} "
          f"tracker_live_bytes={live} mem_get_info_used_since_start={driver_used} "
          f"above_driver={driver_used - stats.bytes} allocations={state.allocations} frees={state.frees} "
          f"unknown_frees={state.unknown_frees}", flush=True)
    print(f"RESULT torch outside_caching_allocator={stats.bytes - reserved} (inventory - memory_reserved: the "
          f"allocations outside PyTorch's caching allocator, cuBLAS/cuDNN/runtime cudaMalloc)", flush=True)
    _, untracked = inj.untracked(0)
    print(f"RESULT torch untracked managed={untracked.managed_bytes} host_pinned={untracked.host_pinned_bytes} "
          f"host_mapped={untracked.host_mapped_bytes}", flush=True)
    _, held = inj.untracked_stats(0)
    print(f"RESULT torch kreplay_untracked host={held.of('host')[1]} managed={held.of('managed')[1]} (bytes kreplay "
          f"holds as untracked: host = pinned + mapped above)", flush=True)

    rc, before, detail = inj.variables(0)
    modules_before = {m for m, *_ in before}
    check(rc == 0, f"every module's variables resolve after the training step ({detail})")
    check(len(before) > 0, f"PyTorch's modules: {len(before)} variables in {len(modules_before)} modules")
    # cuBLAS: modules first loaded by a GEMM the step never ran (fp64: the step's own GEMMs are fp32).
    a = torch.randn(1536, 1536, device="cuda", generator=generator, dtype=torch.float64)
    b = (a @ a.t()).sum().item()
    del b
    rc, after, detail = inj.variables(0)
    new_modules = {m for m, *_ in after} - modules_before
    _, module_count, variable_count = inj.module_counts(0)
    check(rc == 0, f"every module's variables resolve after the matmul ({detail})")
    # Lazy loading loads no cuBLAS module with variables for this GEMM (the last H200 run: 0 of them); eager
    # loading loads the modules of the cuBLAS library the GEMM brings in, all at once (the same run: 15), so the
    # check is made with eager loading and only reported with lazy loading.
    eager = os.environ.get("CUDA_MODULE_LOADING", "").upper() == "EAGER"
    cublas_what = (f"cuBLAS's modules: variables in {len(new_modules)} modules first loaded by the matmul "
                   f"({'eager' if eager else 'lazy'} loading)")
    if eager:
        check(len(new_modules) > 0, cublas_what)
    else:
        print("INFO " + cublas_what + ": reported, checked with eager loading only", flush=True)
    print(f"RESULT torch modules={module_count} cubin_variables={variable_count} resolved={len(after)} "
          f"cublas_modules_with_variables={len(new_modules)} loading={'eager' if eager else 'lazy'}", flush=True)
    sample = sorted(after, key=lambda v: -v[3])[:3]
    print("RESULT torch largest_variables=" + ",".join(f"{n}:{s}" for _, n, _, s, _ in sample), flush=True)

    torch.cuda.synchronize()
    r = inj.snapshot(0)
    check(r.snap_status == 0 and r.restore_status == 0,
          f"snapshot + restore of device 0: status {r.snap_status} reason {r.reason} "
          f"({r.detail.decode(errors='replace')})")
    print(f"RESULT torch snapshot={r.snap_status} reason={r.reason} regions={r.regions} "
          f"module_variables={r.module_variables} bytes={r.bytes} restored={r.report.restored} "
          f"restore_failed={r.report.failed}", flush=True)

for _ in range(3):
    step()
torch.cuda.synchronize()
print(f"RESULT torch digest={digest()}", flush=True)
sys.exit(1 if failures else 0)
