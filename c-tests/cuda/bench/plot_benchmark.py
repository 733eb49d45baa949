#!/usr/bin/env python3
"""Plots the CUDA replay benchmark's CSV (bench_cuda_replay.cu): per-dispatch cost against footprint and
against the fraction of the footprint a pass writes.

Usage: plot_benchmark.py CSV PNG [--fraction-png PNG2] [--device N] [--title TEXT]

PNG: left, footprints in 64 MiB regions, steady-state per-dispatch time (one snapshot and P - 1 restores; median
of dispatches 2..D) per mode, log scale (dirty-only and CUPTI OPT_TRANSFER rows at 1 % written); right, 1 GiB
in 16 x 64 MiB against 16,384 x 64 KiB regions.
PNG2: per-dispatch time against the written fraction (0.1 % to 100 % of the 64 KiB blocks, log scales), one panel
per footprint; the modes that restore everything whatever was written are horizontal lines.
One device's rows (device 0 unless --device). Needs matplotlib.
"""
import argparse
import csv
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

MIB = 1 << 20
# Modes whose cost does not depend on what a pass writes: (row id, legend, colour, style).
FULL = [
    ("4c", "one pinned copy of the footprint (link limit)", "black", ":"),
    ("4d", "one device-to-device copy (device limit)", "grey", ":"),
    ("1", "kreplay host tier, pinned", "tab:blue", "-"),
    ("7", "kreplay device tier", "tab:purple", "-"),
    ("9", "kreplay, half the footprint's budget (spill)", "tab:pink", "-"),
    ("2", "kreplay host tier, pageable", "tab:cyan", "-"),
    ("3", "reference: buffers per dispatch", "tab:red", "-"),
    ("5a", "CUPTI checkpoint, device memory", "tab:green", "--"),
    ("5b", "CUPTI checkpoint, host memory", "tab:olive", "--"),
]
# Modes whose cost depends on it: (row id, legend, colour, marker).
DIRTY = [
    ("6", "kreplay host tier, dirty-only", "tab:blue", "o"),
    ("8", "kreplay device tier, dirty-only", "tab:purple", "s"),
    ("5c", "CUPTI device memory, OPT_TRANSFER", "tab:green", "^"),
    ("5d", "CUPTI host memory, OPT_TRANSFER", "tab:olive", "v"),
]


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def footprint_label(total, region):
    def size(b):
        return f"{b // (1 << 30)} GiB" if b >= 1 << 30 else (f"{b // MIB} MiB" if b >= MIB else f"{b >> 10} KiB")

    return f"{size(total)} = {total // region:,} x {size(region)}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("png")
    parser.add_argument("--fraction-png")
    parser.add_argument("--device", default="0")
    parser.add_argument("--title", default="kreplay snapshot and restore on an NVIDIA H200")
    args = parser.parse_args()

    with open(args.csv, newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["device"] == args.device]
    if not rows:
        raise SystemExit(f"no rows for device {args.device} in {args.csv}")
    passes = int(rows[0]["passes"])
    at_once = rows[0].get("devices_at_once", "1")
    title = f"{args.title} ({at_once} GPU{'s' if at_once != '1' else ''} replaying at once, device {args.device})"

    def cost(row_id, total, region, fraction=0.0):
        for r in rows:
            if (r["row_id"] == row_id and int(r["footprint_bytes"]) == total and int(r["region_bytes"]) == region
                    and abs(number(r["written_fraction"]) - fraction) < 1e-9 and int(r["blocks_checked"] or 0) >= 0):
                value = number(r["dispatch_ms"])
                if not math.isnan(value) and (r["row_id"] in ("4c", "4d") or r["mismatches"] == "0"):
                    return value
        return math.nan

    # ---- Against footprint ----
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 6), gridspec_kw={"width_ratios": [1.4, 1]})
    totals = sorted({int(r["footprint_bytes"]) for r in rows if int(r["region_bytes"]) == 64 * MIB})
    series = [(i, label, color, style, 0.0) for i, label, color, style in FULL]
    series += [(i, label + " (1 % written)", color, "-.", 0.01) for i, label, color, _ in DIRTY]
    for row_id, label, color, style, fraction in series:
        xs, ys = [], []
        for total in totals:
            value = cost(row_id, total, 64 * MIB, fraction)
            if not math.isnan(value):
                xs.append(total / MIB)
                ys.append(value)
        if xs:
            left.plot(xs, ys, linestyle=style, marker="o", color=color, label=label)
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xticks([t / MIB for t in totals], [footprint_label(t, 64 * MIB).replace(" = ", "\n") for t in totals])
    left.set_xlabel("footprint, in 64 MiB regions")
    left.set_ylabel(f"time per dispatch (1 snapshot + {passes - 1} restores), ms")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7, loc="upper left")

    bars = [(i, label, color) for i, label, color, _ in FULL if i not in ("4d",)]
    width = 0.38
    for i, (row_id, _, color) in enumerate(bars):
        for x, region, hatch in ((i - width / 2, 64 * MIB, None), (i + width / 2, 64 << 10, "//")):
            value = cost(row_id, 1 << 30, region)
            if math.isnan(value):
                continue
            right.bar(x, value, width, color=color, alpha=0.45 if hatch is None else 0.9, edgecolor="black",
                      hatch=hatch)
            right.text(x, value * 1.08, f"{value:.0f}" if value >= 10 else f"{value:.1f}", ha="center", fontsize=6)
    right.set_yscale("log")
    right.set_xticks(range(len(bars)), [row_id for row_id, _, _ in bars], fontsize=8)
    right.set_ylabel("time per dispatch, ms")
    right.set_title("1 GiB: 16 x 64 MiB (plain) vs 16,384 x 64 KiB (hatched); ids as in the left legend",
                    fontsize=8)
    right.grid(True, axis="y", which="both", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)

    # ---- Against written fraction ----
    if args.fraction_png:
        shapes = sorted({(int(r["footprint_bytes"]), int(r["region_bytes"])) for r in rows
                         if number(r["written_fraction"]) > 0})
        if not shapes:
            return
        fig, axes = plt.subplots(1, len(shapes), figsize=(5.2 * len(shapes), 5.2), squeeze=False)
        for ax, (total, region) in zip(axes[0], shapes):
            fractions = sorted({number(r["written_fraction"]) for r in rows if number(r["written_fraction"]) > 0})
            xs = [f * 100 for f in fractions]
            for row_id, label, color, marker in DIRTY:
                ys = [cost(row_id, total, region, f) for f in fractions]
                if any(not math.isnan(y) for y in ys):
                    ax.plot(xs, ys, marker=marker, color=color, label=label)
            for row_id, label, color, style in FULL:
                value = cost(row_id, total, region)
                if not math.isnan(value):
                    ax.axhline(value, linestyle=style if style != "-" else "--", color=color, alpha=0.7,
                               linewidth=1, label=label)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xticks(xs, [f"{x:g} %" for x in xs])
            ax.set_xlabel("64 KiB blocks written per pass (at random)")
            ax.set_ylabel(f"time per dispatch (1 snapshot + {passes - 1} restores), ms")
            ax.set_title(footprint_label(total, region), fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].legend(fontsize=6, loc="upper left")
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(args.fraction_png, dpi=110)


if __name__ == "__main__":
    main()
