"""Check (d2) of run_inject.sh: what tracking costs a PyTorch training step, measured inside one process, so that
the process-to-process spread (6 % between two plain workers in lockstep, H200 run of 2026-12-02) drops out.

  CUDA_INJECTION64_PATH=... KREPLAY_INJECT_TRACKING=1 python3 torch_ab.py [--pairs 100]

The library is injected with tracking on. Between steps, kreplay_inject_set_subscribed switches CUPTI off
(unsubscribed: the program's calls raise no callback, as with KREPLAY_INJECT_TRACKING=0) and on (subscribed with
the tracker's callbacks, as in a tracked run). Each pair times one step each way, in an order that alternates,
and the cost is the median of the pairs' differences, with a bootstrap 95 % interval. The callbacks the
program's calls raised during the subscribed steps are counted (kreplay_inject_state). Library loaded with
tracking off against no library at all differs by nothing the program runs: InitializeInjection returns at once
and no code of the library runs again (check (d) measures that pair across processes).
Prints "RESULT ab ..." and a PASS or FAIL line for the 3 % bar; exits 1 on failure."""
import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_training import TrainingStep  # noqa: E402
import torch  # noqa: E402
from inject_ctypes import Injection  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--pairs", type=int, default=100)
parser.add_argument("--warmup", type=int, default=10)
args = parser.parse_args()

step = TrainingStep()
inj = Injection()
if not inj.state().subscribed:
    print("FAIL ab: the injection is not subscribed (tracking on expected)", flush=True)
    sys.exit(1)
for _ in range(args.warmup):
    step()
torch.cuda.synchronize()


def timed(subscribed):
    if inj.set_subscribed(subscribed) != 0:
        raise RuntimeError(f"kreplay_inject_set_subscribed({subscribed}) failed")
    torch.cuda.synchronize()
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


on, off, diffs = [], [], []
raised = 0
for i in range(args.pairs):
    order = (True, False) if i % 2 == 0 else (False, True)
    times = {}
    for subscribed in order:
        before = inj.state().callbacks_raised
        times[subscribed] = timed(subscribed)
        if subscribed:
            raised += inj.state().callbacks_raised - before
    on.append(times[True])
    off.append(times[False])
    diffs.append(100.0 * (times[True] - times[False]) / times[False])
inj.set_subscribed(True)
rng = random.Random(5)
draws = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
low, high = draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws))]
cost = statistics.median(diffs)
print(f"RESULT ab model={step.name} pairs={args.pairs} subscribed_ms={statistics.median(on):.3f} "
      f"unsubscribed_ms={statistics.median(off):.3f} cost_pct={cost:+.2f} ci95=[{low:+.2f},{high:+.2f}] "
      f"callbacks_in_subscribed_steps={raised} per_step={raised / args.pairs:.2f}", flush=True)
ok = high <= 3.0
print(f"{'PASS' if ok else 'FAIL'} ab: tracking on costs {cost:+.2f} % of the step (95 % interval "
      f"[{low:+.2f}, {high:+.2f}] %; bar 3 %), {raised / args.pairs:.2f} callbacks a step", flush=True)
sys.exit(0 if ok else 1)
