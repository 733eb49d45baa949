#!/usr/bin/env python3
"""Plots the CUDA replay benchmark's CSV (bench_cuda_replay.cu): per-dispatch time against footprint.

Usage: plot_benchmark.py CSV PNG [--title TEXT]

Left: footprints in 64 MiB regions, steady-state per-dispatch time (one snapshot and P - 1 restores; median of
dispatches 2..D) as solid lines, the first dispatch as dotted lines. Right: 1 GiB in 64 KiB regions against
1 GiB in 64 MiB regions, steady state. Device 0 only (one GPU was measured). Needs matplotlib.
"""
import argparse
import csv
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

# Rows drawn, with their legend text; the diagnostic rows (1n, 4b, 4r) stay in the CSV only.
ROWS = [
    ("4", "raw cudaMemcpy, pinned (link limit)", "black", "4 raw\npinned"),
    ("1", "kreplay, retained staging, pinned (lies on row 4)", "tab:blue", "1 kreplay\npinned"),
    ("2", "kreplay, retained staging, pageable", "tab:cyan", "2 kreplay\npageable"),
    ("3", "reference: buffers per dispatch, pageable", "tab:red", "3 reference\nper dispatch"),
    ("5a", "CUPTI Checkpoint, device memory", "tab:green", "5a CUPTI\ndevice"),
    ("5b", "CUPTI Checkpoint, host memory", "tab:olive", "5b CUPTI\nhost"),
]
MIB = 1 << 20


def number(text):
    try:
        return float(text)
    except ValueError:
        return math.nan


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("png")
    parser.add_argument("--title", default="kreplay snapshot and restore on one NVIDIA H200")
    args = parser.parse_args()

    with open(args.csv, newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["device"] == "0"]
    passes = int(rows[0]["passes"])
    dispatches = int(rows[0]["dispatches"])

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.6), gridspec_kw={"width_ratios": [1.35, 1]})

    for row_id, label, color, _ in ROWS:
        points = sorted(
            (int(r["footprint_bytes"]), number(r["dispatch_ms"]), number(r["first_dispatch_ms"]))
            for r in rows
            if r["row_id"] == row_id and int(r["region_bytes"]) == 64 * MIB
        )
        points = [p for p in points if not math.isnan(p[1])]
        if not points:
            continue
        xs = [p[0] / MIB for p in points]
        left.plot(xs, [p[1] for p in points], marker="o", color=color, label=label)
        left.plot(xs, [p[2] for p in points], linestyle=":", marker=".", color=color, alpha=0.6)
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xticks([64, 1024, 4096], ["64 MiB\n(1 region)", "1 GiB\n(16 regions)", "4 GiB\n(64 regions)"])
    left.set_xlabel("footprint, in 64 MiB regions")
    left.set_ylabel(f"time per dispatch (1 snapshot + {passes - 1} restores), ms")
    left.set_title(f"steady state (median of dispatches 2..{dispatches}, solid); first dispatch (dotted)", fontsize=9)
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8, loc="upper left")

    width = 0.38
    for i, (row_id, _, color, _) in enumerate(ROWS):
        values = {}
        for r in rows:
            if r["row_id"] == row_id and int(r["footprint_bytes"]) == 1024 * MIB:
                values[int(r["region_bytes"])] = number(r["dispatch_ms"])
        big = values.get(64 * MIB, math.nan)
        small = values.get(64 * 1024, math.nan)
        right.bar(i - width / 2, big, width, color=color, alpha=0.45, edgecolor=color)
        right.bar(i + width / 2, small, width, color=color, edgecolor="black", hatch="//")
        for x, value in ((i - width / 2, big), (i + width / 2, small)):
            if not math.isnan(value):
                right.text(x, value * 1.08, f"{value:.0f}" if value >= 10 else f"{value:.1f}", ha="center",
                           fontsize=7)
    right.set_yscale("log")
    right.set_xticks(range(len(ROWS)), [short for _, _, _, short in ROWS], fontsize=8)
    right.set_ylabel("time per dispatch, ms (steady state)")
    right.set_title("1 GiB: 16 x 64 MiB regions (plain) vs 16,384 x 64 KiB regions (hatched)", fontsize=9)
    right.grid(True, axis="y", which="both", alpha=0.3)

    fig.suptitle(args.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
