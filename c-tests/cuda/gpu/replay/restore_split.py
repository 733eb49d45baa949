"""Where graph mode's restores spend their time against a stream kernel's, from one kreplay-cuda-replay run taken
with KREPLAY_INJECT_LOG=info (the engine then logs each restore: bytes written, regions, time, digest time):

  python3 restore_split.py REPORT LOG PASSES

The program must be single-threaded, so that restores are logged in the order of the report's replayed rows, each
of which has PASSES - 1 of them. Printed, for the graph launches and for torch_prog.py's stream kernel after each
(KREPLAY_PROG_TWIN_MB): the medians of a restore's time, its digest's, the rest (copies and the engine's own work),
and the bytes written back; "regions" counts every region the restore went over (written or verified unchanged).
From the injection's lines since the previous restore or snapshot: how the restore's copy batch fell into the
automatic copy method's classes (copies below 1 MiB and from 1 to 32 MiB go to the gather kernel within the device,
from 32 MiB to the copy engines), and the time of its device ops from submission to the end of their wait (the
digest ops, the copy batch) and what is left of the restore without them (the engine's own work on the host)."""
import csv
import re
import statistics
import sys

import csv_figure

RESTORE = re.compile(r"restore of (\d+) bytes \((\d+) verified unchanged\) in (\d+) regions .* took (\d+) us "
                     r"\(digest (\d+) us of (\d+) bytes")


BATCH = re.compile(r"copy batch: (\d+) copies, \d+ bytes; below 1 MiB (\d+) \((\d+) bytes\), 1 to 32 MiB (\d+) "
                   r"\((\d+) bytes\), from 32 MiB (\d+) \((\d+) bytes\); (\d+) us")
NO_BATCH = {"copies": 0, "small": 0, "small_bytes": 0, "middle": 0, "middle_bytes": 0, "large": 0, "large_bytes": 0,
            "copy_op_us": 0}
DIGEST_OP = re.compile(r"digest: \d+ jobs, \d+ bytes; (\d+) us")
SNAPSHOT = re.compile(r"agent 0x[0-9a-f]+: snapshot of ")


def restores_of(log_path):
    found = []
    batch, digest_op_us = NO_BATCH, 0
    with open(log_path, errors="replace") as log:
        for line in log:
            match = BATCH.search(line)
            if match:
                batch = dict(zip(NO_BATCH, (int(v) for v in match.groups())))
                continue
            match = DIGEST_OP.search(line)
            if match:
                digest_op_us += int(match.group(1))
                continue
            if SNAPSHOT.search(line):
                batch, digest_op_us = NO_BATCH, 0  # the snapshot's own ops
                continue
            match = RESTORE.search(line)
            if match:
                written, _, regions, took, digest, _ = (int(v) for v in match.groups())
                found.append({"us": took, "digest_us": digest, "rest_us": took - digest, "written": written,
                              "regions": regions, **batch, "digest_op_us": digest_op_us,
                              "engine_us": took - digest_op_us - batch["copy_op_us"]})
                batch, digest_op_us = NO_BATCH, 0
    return found


def summary(name, restores):
    if not restores:
        return f"{name}: none"
    med = {key: statistics.median(r[key] for r in restores) for key in restores[0]}
    return (f"{name}: {len(restores)} restores, median {med['us']:.0f} us (digest {med['digest_us']:.0f}, the rest "
            f"{med['rest_us']:.0f}), {med['written'] / 2**20:.1f} MB written back in {med['regions']:.0f} regions; "
            f"copies {med['copies']:.0f}: below 1 MiB {med['small']:.0f} ({med['small_bytes'] / 2**20:.1f} MB), "
            f"1 to 32 MiB {med['middle']:.0f} ({med['middle_bytes'] / 2**20:.1f} MB), from 32 MiB {med['large']:.0f} "
            f"({med['large_bytes'] / 2**20:.1f} MB); the device ops: digest {med['digest_op_us']:.0f} us, copy batch "
            f"{med['copy_op_us']:.0f} us, the rest of the restore {med['engine_us']:.0f} us")


def main():
    report = list(csv.DictReader(open(sys.argv[1])))
    restores = restores_of(sys.argv[2])
    per_row = int(sys.argv[3]) - 1
    replayed = sorted((r for r in report if r["replayed"] == "1"), key=lambda r: int(r["launch"]))
    if len(restores) != per_row * len(replayed):
        print(f"restore_split: {len(restores)} restores logged for {len(replayed)} replayed rows of "
              f"{per_row} each: the log and the report do not pair")
        return 1
    by_launch = {r["launch"]: restores[i * per_row:(i + 1) * per_row] for i, r in enumerate(replayed)}
    graph = [r for r in replayed if r["kernel"].startswith(("graph:", "(graph launch)"))]
    twin = csv_figure.twin_rows(report, graph)
    print(summary("graph launches", [x for r in graph for x in by_launch[r["launch"]]]))
    print(summary("stream kernel", [x for r in twin for x in by_launch[r["launch"]]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
