"""Compares kreplay-cuda-replay's --metrics columns with Nsight Compute's values for the same launches.

  python3 counters_compare.py KREPLAY_CSV NCU_RAW_CSV
  python3 counters_compare.py KREPLAY_CSV OTHER_KREPLAY_CSV
  python3 counters_compare.py KREPLAY_CSV NCU_RAW_CSV THIRD_KREPLAY_CSV

KREPLAY_CSV: the launcher's report; NCU_RAW_CSV: `ncu --csv --page raw --log-file` of the same program, metrics
and launches; or another report of the launcher (--backend cupti-kernel-replay: CUPTI's own kernel replay, or
range mode's). Launches pair in order by kernel name against Nsight Compute, skipping a launch one side lacks; two
reports of the launcher pair by launch number (the launcher numbers a program's launches alike in every run). A metric agrees on a launch when the values are equal (instruction and warp counts) or
within 1 % (the others). Prints one line per metric and exits 1 unless every metric agrees on at least 95 % of
the paired launches for the four count metrics of issue 30's bar (BAR); the others are reported as INFO. With a
third report of the same launches (--backend cupti-kernel-replay's), each exact metric also gets a NOISE line: on
how many launches the two references agree with each other, and kreplay's agreement on those (kernels whose counts
vary from run to run, spin-waiting GEMMs, disagree whatever measures them)."""
import csv
import re
import sys

BAR = ("smsp__inst_executed.sum", "sm__warps_launched.sum", "smsp__sass_inst_executed_op_global_ld.sum",
       "l1tex__t_bytes.sum")
EXACT = ("smsp__inst_executed.sum", "sm__warps_launched.sum", "smsp__sass_inst_executed_op_global_ld.sum",
         "smsp__sass_inst_executed_op_global_st.sum", "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum")


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def kreplay_rows(path, metrics_from):
    rows = list(csv.DictReader(open(path)))
    header = list(rows[0].keys()) if rows else []
    metrics = header[header.index(metrics_from) + 1:] if metrics_from in header else []
    counted = [r for r in rows if r["replayed"] == "1" and all(r[m] != "" for m in metrics)]
    return metrics, rows, counted


def ncu_rows(path):
    lines = open(path, errors="replace").read().splitlines()
    if lines and lines[0].startswith("launch,kernel,"):  # another kreplay report: its counted rows, ncu's keys
        metrics, _, counted = kreplay_rows(path, "counters")
        return [dict({m: r[m] for m in metrics}, **{"Kernel Name": r["kernel"], "launch": r["launch"]})
                for r in counted]
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    table = list(csv.DictReader(lines[start:]))
    return [r for r in table if number(r.get("ID", "")) is not None]  # the units row has no ID


def short_name(ncu_name):
    """The kernel's own name: the last component before template or parameter lists."""
    base = re.split(r"[<(]", ncu_name, maxsplit=1)[0].strip()
    words = base.split("::")[-1].split()
    return words[-1] if words else ncu_name


def pair_in_order(mine, theirs, lookahead=8):
    """Pairs launches in order by kernel name; a launch one side has and the other lacks (a decline, a launch
    the other counted differently) is skipped, looking at most `lookahead` launches ahead."""
    pairs = []
    i = j = 0
    while i < len(mine) and j < len(theirs):
        same = lambda a, b: short_name(b["Kernel Name"]) in a["kernel"]  # noqa: E731
        if same(mine[i], theirs[j]):
            pairs.append((mine[i], theirs[j]))
            i, j = i + 1, j + 1
            continue
        ahead = next((k for k in range(1, lookahead) if j + k < len(theirs) and same(mine[i], theirs[j + k])), None)
        if ahead is not None:
            j += ahead
        else:
            i += 1
    return pairs


def pair_by_launch(mine, theirs):
    """Two reports of the launcher on the same program number its launches alike: pairs by launch number, where
    both counted the launch and name the same kernel."""
    by_launch = {r["launch"]: r for r in theirs}
    return [(r, by_launch[r["launch"]]) for r in mine
            if r["launch"] in by_launch and by_launch[r["launch"]]["Kernel Name"] == r["kernel"]]


def main():
    try:
        metrics, rows, counted = kreplay_rows(sys.argv[1], "counters")
        ncu = ncu_rows(sys.argv[2])
        third = {r["launch"]: r for r in kreplay_rows(sys.argv[3], "counters")[2]} if len(sys.argv) > 3 else {}
    except OSError as error:
        print(f"FAIL a report is missing: {error}")
        return 1
    print(f"kreplay: {len(rows)} rows, {len(counted)} counted, {len(metrics)} metrics; ncu: {len(ncu)} launches")
    not_counted = sorted({r["counters"][:100] for r in rows if r not in counted})
    if not_counted:
        print("kreplay rows not counted:", "; ".join(not_counted)[:600])
    if not metrics or not counted or not ncu:
        print("FAIL nothing to compare")
        return 1
    if "launch" in ncu[0]:
        pairs, how = pair_by_launch(counted, ncu), "by launch number"
    else:
        pairs, how = pair_in_order(counted, ncu), "in order by kernel name"
    print(f"paired {len(pairs)} launches {how} ({len(counted)} counted by kreplay, {len(ncu)} by the other)")
    ok = bool(pairs)
    for metric in metrics:
        if metric not in ncu[0]:
            print(f"{'FAIL' if metric in BAR else 'INFO'} {metric}: not in ncu's output")
            ok &= metric not in BAR
            continue
        agree = 0
        worst = 0.0
        for mine, theirs in pairs:
            a, b = number(mine[metric]), number(theirs[metric])
            if a is None or b is None:
                continue
            diff = abs(a - b) / max(abs(b), 1.0)
            worst = max(worst, diff)
            agree += (a == b) if metric in EXACT else (diff <= 0.01)
        share = agree / len(pairs) if pairs else 0.0
        rule = "equal" if metric in EXACT else "within 1 %"
        verdict = ("PASS" if share >= 0.95 else "FAIL") if metric in BAR else "INFO"
        ok &= share >= 0.95 or metric not in BAR
        print(f"{verdict} {metric}: {rule} on {agree} of {len(pairs)} launches ({share:.1%}); largest difference "
              f"{worst:.2%}")
        if third and metric in EXACT:
            # The third report is the same program's launches, numbered alike (the launcher's order).
            steady = [(mine, theirs) for mine, theirs in pairs if mine["launch"] in third
                      and number(theirs[metric]) is not None
                      and number(third[mine["launch"]][metric]) == number(theirs[metric])]
            same = sum(number(mine[metric]) == number(theirs[metric]) for mine, theirs in steady)
            print(f"NOISE {metric}: the references agree on {len(steady)} of {len(pairs)} launches; kreplay equals "
                  f"them on {same} of those ({same / max(len(steady), 1):.1%})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
