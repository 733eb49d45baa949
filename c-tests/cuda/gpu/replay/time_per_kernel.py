"""Time per kernel against footprint, from one run of run_graphs_counters.sh's side section (KREPLAY_RUN_SIDE):

  python3 time_per_kernel.py WORK_DIR [PLOT.png]

WORK_DIR holds side.kreplay.csv (kernel mode), side.range.csv (range mode) and side.cupti.csv (CUPTI's kernel
replay), the reports of the same launches and metrics, and summary.txt's "ncu --replay-mode kernel: exit E, S s"
and "plain run ... S s" rows (Nsight Compute gives no time per kernel: its extra time over the plain run, spread
evenly over the launches kreplay counted, is drawn as a line; CUPTI's kernel replay reports no footprint, so its
launches take the kernel-mode report's for the same launch). Prints, per footprint band, the launches and the
median replay_ms of each backend, then draws the plot when matplotlib is there."""
import csv
import math
import re
import statistics
import sys
from pathlib import Path

BACKENDS = [("side.kreplay.csv", "kreplay, kernel mode"), ("side.range.csv", "kreplay, range mode (share)"),
            ("side.cupti.csv", "CUPTI's kernel replay")]


def counted_rows(path):
    try:
        rows = list(csv.DictReader(open(path)))
    except OSError:
        return []
    return [r for r in rows if r["replayed"] == "1" and r.get("counters", "x") == ""]


def seconds(summary, pattern):
    found = re.findall(pattern, summary)
    return float(found[-1]) if found else math.nan


def bands(rows):
    """Footprints in powers of 4 MiB: [0, 4 MiB), [4, 16), [16, 64), ..."""
    out = {}
    for r in rows:
        mib = int(r["footprint_bytes"]) / 2**20
        band = 0 if mib < 4 else int(math.log(mib / 4, 4)) + 1
        out.setdefault(band, []).append(float(r["replay_ms"]))
    return out


def band_name(band):
    return "< 4 MiB" if band == 0 else f"{4 * 4 ** (band - 1)}-{4 * 4 ** band} MiB"


def main():
    work = Path(sys.argv[1])
    summary = (work / "summary.txt").read_text() if (work / "summary.txt").exists() else ""
    data = {label: counted_rows(work / name) for name, label in BACKENDS}
    kernel_rows = data[BACKENDS[0][1]]
    footprint_of = {r["launch"]: r["footprint_bytes"] for r in kernel_rows}
    for r in data[BACKENDS[2][1]]:
        r["footprint_bytes"] = footprint_of.get(r["launch"], r["footprint_bytes"])
    ncu_s = seconds(summary, r"side: ncu --replay-mode kernel: exit \d+, (\d+) s")
    plain_s = seconds(summary, r"side: plain run, \d+ steps: (\d+) s")
    ncu_ms = (ncu_s - plain_s) * 1000 / len(kernel_rows) if kernel_rows else math.nan
    print(f"ncu: {ncu_s:.0f} s against the plain run's {plain_s:.0f} s: {ncu_ms:.1f} ms per counted launch")
    by_band = {label: bands(rows) for label, rows in data.items()}
    all_bands = sorted({b for v in by_band.values() for b in v})
    print("| footprint | launches | " + " | ".join(f"{label}: median ms" for label in by_band) + " |")
    print("|---|---:|" + "---:|" * len(by_band))
    for band in all_bands:
        cells = []
        for values in by_band.values():
            times = values.get(band, [])
            cells.append(f"{statistics.median(times):.1f}" if times else "-")
        print(f"| {band_name(band)} | {len(by_band[BACKENDS[0][1]].get(band, []))} | " + " | ".join(cells) + " |")
    if len(sys.argv) < 3:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("time_per_kernel.py: no matplotlib, no plot")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (label, rows), marker in zip(data.items(), ["o", "^", "s"]):
        ax.scatter([int(r["footprint_bytes"]) / 2**20 for r in rows], [float(r["replay_ms"]) for r in rows], s=10,
                   marker=marker, alpha=0.6, label=f"{label} ({len(rows)} launches)")
    if not math.isnan(ncu_ms):
        ax.axhline(ncu_ms, color="black", linestyle="--", label=f"Nsight Compute, mean per launch ({ncu_ms:.0f} ms)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("footprint (MiB)")
    ax.set_ylabel("time to profile the launch (ms)")
    ax.set_title("ResNet-18 on an H200, 15 metrics (10 counted passes), every launch, 1 step")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"plot: {sys.argv[2]}")


if __name__ == "__main__":
    main()
