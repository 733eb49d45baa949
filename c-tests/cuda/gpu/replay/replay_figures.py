"""The cost figures of run_replay.sh's last part, from its logs and reports (WORK_DIR: perf.plain.log,
perf.kreplay.{log,csv}, perf.cupti.{log,csv}, perf.kreplay20.{log,csv}): ResNet-18, 2 steps, every kernel at 5
passes (kreplay and CUPTI) and at 20 (kreplay). Prints one line a figure and PASS/FAIL lines for the bars; writes perf.pairs.csv (per kernel launch: footprint, kreplay's and
CUPTI's cost per extra pass) for the plot in docs/performance.md."""
import csv
import os
import re
import statistics
import sys

work = sys.argv[1]


def step_ms(log, step=1):
    try:
        with open(os.path.join(work, log)) as f:
            for line in f:
                m = re.match(r"STEP_MS (\d+) ([0-9.]+)", line)
                if m and int(m.group(1)) == step:
                    return float(m.group(2))
    except OSError:
        pass
    return None


def rows(name):
    try:
        with open(os.path.join(work, name)) as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def median(values):
    return statistics.median(values) if values else float("nan")


plain = step_ms("perf.plain.log")
k_step, c_step = step_ms("perf.kreplay.log"), step_ms("perf.cupti.log")
kr, cu = rows("perf.kreplay.csv"), rows("perf.cupti.csv")
k_rep = [r for r in kr if r["replayed"] == "1"]
c_rep = [r for r in cu if r["replayed"] == "1"]
print(f"INFO perf: plain step {plain} ms; kreplay step {k_step} ms; cupti step {c_step} ms")
print(f"INFO perf: kreplay {len(k_rep)} of {len(kr)} launches replayed, cupti {len(c_rep)} of {len(cu)}")
# The same launches in both runs: pair them by index and name (both runs make the same launches in order).
cupti_by = {(r["launch"], r["kernel"]): r for r in c_rep}
pairs = [(r, cupti_by[(r["launch"], r["kernel"])]) for r in k_rep if (r["launch"], r["kernel"]) in cupti_by]
k_extra = [float(r["extra_pass_ms"]) for r, _ in pairs]
c_extra = [float(c["extra_pass_ms"]) for _, c in pairs]
k_all = [float(r["extra_pass_ms"]) for r in k_rep]
for label, data in (("kreplay", k_rep), ("cupti", c_rep)):
    if data:
        print(f"INFO perf {label}: median snapshot {median([float(r['snapshot_ms']) for r in data]):.3f} ms, "
              f"restore (all passes) {median([float(r['restore_ms']) for r in data]):.3f} ms, extra pass "
              f"{median([float(r['extra_pass_ms']) for r in data]):.3f} ms (p90 "
              f"{sorted(float(r['extra_pass_ms']) for r in data)[int(len(data) * 0.9)]:.3f}), kernel "
              f"{median([float(r['kernel_ms']) for r in data]):.3f} ms, footprint "
              f"{median([int(r['footprint_bytes']) for r in data])} bytes")
print(f"INFO perf: {len(pairs)} launches replayed by both; median extra pass kreplay {median(k_extra):.3f} ms, "
      f"cupti {median(c_extra):.3f} ms")
ok = lambda c: "PASS" if c else "FAIL"  # noqa: E731
print(f"{ok(len(k_all) > 0 and median(k_all) <= 0.40)} perf: kreplay's median cost per extra pass at 5 passes "
      f"{median(k_all):.3f} ms <= 0.40 ms (host tier, dirty-only, write set learned, no device memory for snapshots)")
k20 = [r for r in rows("perf.kreplay20.csv") if r["replayed"] == "1"]
k20_all = [float(r["extra_pass_ms"]) for r in k20]
k20_step = step_ms("perf.kreplay20.log")
misses = sum(int(r.get("write_set_misses") or 0) for r in kr + rows("perf.kreplay20.csv"))
print(f"INFO perf kreplay at 20 passes: {len(k20)} launches replayed, step {k20_step} ms, write-set misses found by "
      f"the last full checks at 5 and 20 passes: {misses}")
print(f"{ok(len(k20_all) > 0 and median(k20_all) <= 0.15)} perf: kreplay's median cost per extra pass at 20 passes "
      f"{median(k20_all):.3f} ms <= 0.15 ms")
print(f"{ok(len(pairs) > 0 and median(k_extra) <= 0.5 * median(c_extra))} perf: kreplay {median(k_extra):.3f} ms "
      f"<= half of CUPTI's {median(c_extra):.3f} ms on the same {len(pairs)} launches")
ratio = k_step / plain if k_step and plain else float("nan")
print(f"{ok(ratio <= 150)} perf: the step at 5 passes {k_step} ms = {ratio:.1f} x the plain step {plain} ms "
      f"(bar 150 x; CUPTI {c_step} ms = {(c_step or float('nan')) / (plain or float('nan')):.1f} x)")
with open(os.path.join(work, "perf.pairs.csv"), "w") as f:
    f.write("launch,kernel,footprint_bytes,kreplay_extra_pass_ms,cupti_extra_pass_ms\n")
    for r, c in pairs:
        f.write(f"{r['launch']},\"{r['kernel'][:80]}\",{r['footprint_bytes']},{r['extra_pass_ms']},"
                f"{c['extra_pass_ms']}\n")
