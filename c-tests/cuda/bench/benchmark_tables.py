#!/usr/bin/env python3
"""Prints docs/performance.md's per-dispatch tables (markdown) from a kreplay_cuda_bench CSV.

Usage: benchmark_tables.py CSV [--devices-at-once N] [--device D]

One table per footprint found, in the order of docs/performance.md: 1 GiB in 64 MiB regions (every written
fraction), then 64 MiB, 4 GiB and 1 GiB in 64 KiB regions (dirty-only rows at 1 % written). Figures are the CSV's
steady-state medians in ms; numbers of 10 or more get one decimal, smaller ones three.
"""
import argparse
import csv
import math

MODES = [
    ("4c", "one pinned copy (link limit)"),
    ("4d", "one device-to-device copy (device limit)"),
    ("1", "kreplay host tier, full (pinned)"),
    ("6", "kreplay host tier, dirty-only"),
    ("7", "kreplay device tier, full"),
    ("8", "kreplay device tier, dirty-only"),
    ("9", "kreplay, budget = half (spill)"),
    ("2", "kreplay host tier, pageable"),
    ("3", "reference design (staging per dispatch)"),
    ("5a", "CUPTI checkpoint, device memory"),
    ("5b", "CUPTI checkpoint, host memory"),
]
DIRTY = {"6", "8"}
MIB = 1 << 20


def number(text):
    value = float(text)
    if math.isnan(value):
        return "-"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3f}"


def fraction(text):
    percent = float(text) * 100
    return f"{percent:g} %"


def size(b):
    return f"{b // (1 << 30)} GiB" if b >= 1 << 30 else f"{b // MIB} MiB" if b >= MIB else f"{b >> 10} KiB"


def title(total, region, count, devices):
    where = "one GPU" if devices == 1 else f"{devices} GPUs at once"
    if count == 1:
        return f"{size(total)} in 1 region, {where}"
    return f"{size(total)} in {count:,} x {size(region)}, {where}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--devices-at-once", type=int, default=1)
    parser.add_argument("--device", default="0")
    args = parser.parse_args()
    with open(args.csv, newline="") as f:
        rows = [r for r in csv.DictReader(f)
                if int(r["devices_at_once"]) == args.devices_at_once and r["device"] == args.device]
    footprints = []
    for r in rows:
        key = (int(r["footprint_bytes"]), int(r["region_bytes"]), int(r["regions"]))
        if key not in footprints:
            footprints.append(key)
    order = {(1 << 30, 64 * MIB): 0, (64 * MIB, 64 * MIB): 1, (4 << 30, 64 * MIB): 2, (1 << 30, 64 << 10): 3}
    footprints.sort(key=lambda k: order.get(k[:2], 9))
    for total, region, count in footprints:
        all_fractions = (total, region) == (1 << 30, 64 * MIB)
        print(f"#### {title(total, region, count, args.devices_at_once)}\n")
        print("| mode | written | first dispatch | snapshot | restore | per dispatch | device MiB | host MiB |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        mine = [r for r in rows if (int(r["footprint_bytes"]), int(r["region_bytes"])) == (total, region)]
        for row_id, label in MODES:
            for r in mine:
                if r["row_id"] != row_id or not (r["status"] == "ok" or r["status"].startswith("limit")):
                    continue
                if row_id in DIRTY and not all_fractions and abs(float(r["written_fraction"]) - 0.01) > 1e-9:
                    continue
                written = fraction(r["written_fraction"]) if row_id in DIRTY else ""
                cells = [r[c] for c in ("first_dispatch_ms", "snapshot_ms", "restore_ms", "dispatch_ms",
                                        "device_held_mib", "host_held_mib")]
                print(f"| {label} | {written} | " + " | ".join(number(c) for c in cells) + " |")
        print()


if __name__ == "__main__":
    main()
