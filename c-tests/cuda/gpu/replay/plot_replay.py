"""The per-kernel plot of docs/performance.md from run_replay.sh's perf.pairs.csv: for every launch of the
ResNet-18 run (2 steps, every kernel at 5 passes) that both backends replayed, the cost of one extra pass
(restore + relaunch + wait, less the kernel's own time) against the footprint captured, kreplay (host tier,
dirty-only, the write set learned) and CUPTI's Checkpoint API side by side; with a third argument, kreplay at 20
passes (run_replay.sh's perf.kreplay20.csv) as well.

  python3 plot_replay.py perf.pairs.csv out.png [perf.kreplay20.csv]      (needs matplotlib)"""
import csv
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.DictReader(open(sys.argv[1])))
gib = [int(r["footprint_bytes"]) / 2**30 for r in rows]
k = [float(r["kreplay_extra_pass_ms"]) for r in rows]
c = [float(r["cupti_extra_pass_ms"]) for r in rows]
fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
ax.scatter(gib, c, s=6, alpha=0.5, label=f"CUPTI Checkpoint API (median {statistics.median(c):.2f} ms)")
ax.scatter(gib, k, s=6, alpha=0.5, label=f"kreplay, host tier, dirty-only (median {statistics.median(k):.2f} ms)")
if len(sys.argv) > 3:
    more = [r for r in csv.DictReader(open(sys.argv[3])) if r["replayed"] == "1"]
    g20 = [int(r["footprint_bytes"]) / 2**30 for r in more]
    k20 = [float(r["extra_pass_ms"]) for r in more]
    ax.scatter(g20, k20, s=6, alpha=0.5, label=f"kreplay at 20 passes (median {statistics.median(k20):.2f} ms)")
ax.set_yscale("log")
ax.set_xlabel("footprint captured for the launch (GiB)")
ax.set_ylabel("cost per extra pass (ms, log)")
ax.set_title(f"ResNet-18, every kernel at 5 passes (and 20): {len(rows)} launches, H200")
ax.grid(True, which="both", alpha=0.3)
ax.legend(loc="upper left")
fig.tight_layout()
fig.savefig(sys.argv[2])
