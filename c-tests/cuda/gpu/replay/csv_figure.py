"""One figure from kreplay-cuda-replay's CSV report, for the GPU run scripts (run_replay.sh, run_graphs_counters.sh):

  python3 csv_figure.py REPORT WHAT [KERNEL]

WHAT: rows, replayed, max_footprint, declined (snapshot or window declined), declined_other (declined for anything
but the host budget), graphs (graph launches), graphs_replayed, first_graph (the first graph launch's number),
graph_reasons (why graph launches ran once), graph_modes (how graph launches were replayed, with counts), nodes
(kernel-node rows of node mode), nodes_replayed, node_extra / stream_extra / graph_extra (the median extra_pass_ms
of replayed kernel nodes, stream launches, whole graphs), twin_extra (of the stream launch right after each graph
launch, torch_prog.py's KREPLAY_PROG_TWIN_MB kernel; none unless every one was replayed), graph_moved /
twin_moved (their median bytes_moved, snapshot and restores, in MB), graph_footprint / twin_footprint (their median
footprint_bytes, in MB), twin_kernel_ms (the median time of that stream kernel itself), twin_pairs (for each graph
launch replayed in graph mode, its extra_pass_ms over that of the stream kernel right after it, space-separated:
pairs adjacent in time, which the machine's drift over a run does not separate; none unless twin_extra has its
rows), graph_kernel_ms (the median time of a graph launch),
reasons (why launches ran once), differs (launches whose passes differed under --verify, and up to five of their
kernels), pass_share (over counted rows, the median extra_pass_ms, kreplay's share of a pass, and counter_pass_ms,
the profiler's; and counter_setup_ms), uncounted (rows with metrics asked that were not counted, by what their
counters or reason column says, with counts; the first launch of each), node_ratio (kernel by kernel: for each kernel replayed both as a kernel node
and as a stream launch, its nodes' median extra_pass_ms over its stream launches'; the median and the quartiles of
those ratios, the same two medians pooled over those kernels, and the median footprints; stream launches after the
last kernel node when there are such), node_same_footprint (a restore digests the whole footprint, so the cost grows
with it: for each kernel launched on a stream both before the first kernel node and after the last, its stream cost
interpolated linearly to its nodes' footprint; the median and quartiles of node over that), replay_s (the seconds
spent replaying, the sum of replay_ms), replayed_kinds (replayed rows by kind: "graphs=G nodes=N stream=S"),
graph_work:node / graph_work:graph (a control that relaunches the first graph launch's work alone, in that
--graph-profiling mode, in node mode with --kernel-name KERNEL when KERNEL is given: "SKIP COUNT expected", its
--launch-skip and --launch-count in the selection's units and the replayed_kinds it should then give; "0 0 none"
when no such selection can be given). A missing report counts as empty."""
import collections
import csv
import re
import statistics
import sys


def median_of(rows, column):
    values = [float(r[column]) for r in rows]
    return f"{statistics.median(values):.4f}" if values else "none"


def by_kernel(replayed):
    """(footprint, extra_pass_ms) of each replayed kernel, by kernel name, in three sides: as a kernel node, as a
    stream launch before the first node, and as a stream launch after the last."""
    node_launches = [int(r["launch"]) for r in replayed if r.get("graph_node", "") != ""]
    first, last = min(node_launches or [0]), max(node_launches or [0])
    sides = {side: collections.defaultdict(list) for side in ("node", "before", "after")}
    for r in replayed:
        if r.get("graph_node", "") != "":
            side = "node"
        elif r.get("graph_mode", ""):
            continue  # a graph launch itself
        else:
            side = "before" if int(r["launch"]) < first else "after" if int(r["launch"]) > last else None
        if side:
            sides[side][r["kernel"]].append((int(r["footprint_bytes"]), float(r["extra_pass_ms"])))
    return sides


def medians(points):
    return statistics.median(f for f, _ in points), statistics.median(e for _, e in points)


def quartiles(ratios):
    q1, q2, q3 = statistics.quantiles(ratios, n=4)
    return f"median {q2:.2f} (quartiles {q1:.2f}, {q3:.2f})"


def node_ratio(replayed):
    sides = by_kernel(replayed)
    stream, when = sides["after"], "stream launches after the last graph launch"
    if not set(stream) & set(sides["node"]):
        stream, when = {k: sides["before"].get(k, []) + sides["after"].get(k, [])
                        for k in set(sides["before"]) | set(sides["after"])}, "all stream launches"
    both = sorted(k for k in set(sides["node"]) & set(stream) if medians(stream[k])[1] > 0)
    if len(both) < 2:
        return "none"
    ratios = [medians(sides["node"][k])[1] / medians(stream[k])[1] for k in both]
    node_points = [p for k in both for p in sides["node"][k]]
    stream_points = [p for k in both for p in stream[k]]
    (node_fp, node_ms), (stream_fp, stream_ms) = medians(node_points), medians(stream_points)
    return (f"{len(ratios)} kernels in both ({when}): {quartiles(ratios)}; pooled median extra pass "
            f"{node_ms:.4f} ms as nodes, {stream_ms:.4f} ms as stream launches; median footprint "
            f"{node_fp / 1e6:.0f} MB as nodes, {stream_fp / 1e6:.0f} MB as stream launches")


def node_same_footprint(replayed):
    sides = by_kernel(replayed)
    ratios = []
    for kernel, points in sides["node"].items():
        if kernel not in sides["before"] or kernel not in sides["after"]:
            continue
        (f1, e1), (f2, e2), (fn, en) = medians(sides["before"][kernel]), medians(sides["after"][kernel]), medians(points)
        stream = e1 + (e2 - e1) * (fn - f1) / (f2 - f1) if f2 != f1 else 0.0
        if stream > 0:
            ratios.append(en / stream)
    return f"{len(ratios)} kernels: {quartiles(ratios)}" if len(ratios) >= 2 else "none"


def is_node(row):
    return row.get("graph_node", "") != ""


def twin_rows(rows, graph):
    """The stream launch right after each graph launch (torch_prog.py's KREPLAY_PROG_TWIN_MB kernel), or none
    unless every graph launch has one and all were replayed."""
    after = {int(r["launch"]) + 1 for r in graph}
    twin = [r for r in rows if int(r["launch"]) in after and r not in graph and not is_node(r)]
    return twin if graph and len(twin) == len(graph) and all(r["replayed"] == "1" for r in twin) else []


def replayed_whole(graph):
    """The graph launches replayed as one window (graph mode, or node mode's fallback to it)."""
    return [g for g in graph if g["replayed"] == "1" and g.get("graph_mode", "").startswith("graph")]


def twin_pairs(rows, graph):
    """Each graph launch replayed whole, its extra_pass_ms over that of the stream kernel right after it."""
    twin = {int(r["launch"]): r for r in twin_rows(rows, graph)}
    pairs = [(g, twin[int(g["launch"]) + 1]) for g in replayed_whole(graph) if int(g["launch"]) + 1 in twin]
    return " ".join(f"{float(g['extra_pass_ms']) / float(t['extra_pass_ms']):.4f}" for g, t in pairs) or "none"


def named(row, kernel):
    """The row's kernel matches --kernel-name `kernel` (a search, as the launcher's; "" matches all)."""
    return re.search(kernel, row["kernel"]) is not None


def first_graph_work(rows, graph, mode, kernel):
    """The first graph launch's work: in graph mode its row; in node mode the kernel nodes `kernel` names of the
    first graph launch that has such nodes or, without a filter, the row of a graph launch node mode replayed whole
    (it could not run it node by node), whichever comes first. A graph row names only its first kernels, so graph
    mode takes no filter and no filter selects a graph row."""
    if mode == "graph":
        if kernel:
            raise SystemExit("csv_figure.py: graph_work:graph takes no KERNEL (a graph row names only its first)")
        return graph[:1]
    whole = replayed_whole(graph)
    for r in rows:
        if is_node(r) and named(r, kernel):
            return [n for n in rows if is_node(n) and named(n, kernel) and n["graph_launch"] == r["graph_launch"]]
        if not kernel and r in whole:
            return [r]
    return []


def graph_work(rows, graph, mode, kernel):
    """--launch-skip and --launch-count that select the first graph launch's work alone, counted as the launcher's
    selection counts: each stream launch that matches the filter is one, and each graph launch (graph mode) or
    matching kernel node (node mode); in node mode a graph launch replayed whole (node mode could not run it) is
    one too, so with a filter, which its row cannot be matched against, no selection is given after one. No stream
    launch lies inside a graph launch's work, so none is selected. "0 0 none" when there is no such work."""
    work = first_graph_work(rows, graph, mode, kernel)
    if not work:
        return "0 0 none"
    first = int(work[0]["launch"])
    before = [r for r in rows if int(r["launch"]) < first]
    whole = [r for r in replayed_whole(graph) if int(r["launch"]) < first] if mode == "node" else []
    if whole and kernel:
        return "0 0 none"
    skip = len(whole) + sum(named(r, kernel) for r in before if r not in graph and not is_node(r))
    nodes = sum(is_node(r) for r in work)
    return f"{skip} {len(work)} graphs={len(work) - nodes} nodes={nodes} stream=0"


def replayed_of(rows):
    return [r for r in rows if r["replayed"] == "1"]


class Report:
    """A report's rows and the kinds of rows its figures are taken over."""

    def __init__(self, rows):
        self.rows = rows
        self.graph = [r for r in rows if r["kernel"].startswith(("graph:", "(graph launch)"))]
        self.nodes = [r for r in rows if is_node(r)]
        self.replayed = replayed_of(rows)
        self.declined = [r for r in rows if r["reason"].startswith(("snapshot declined", "window declined"))]


def graph_modes(graph):
    counts = collections.Counter(r.get("graph_mode", "")[:100] or "(run once)" for r in graph)
    return "; ".join(f"{n} x {mode}" for mode, n in sorted(counts.items())) or "none"


def median_mb(rows, column):
    values = [float(r[column]) / 2**20 for r in rows]
    return f"{statistics.median(values):.1f}" if values else "none"


def reasons(rows):
    return "; ".join(sorted({r["reason"][:80] for r in rows if r["replayed"] != "1"}))[:400] or "none"


def differs(rows):
    names = [r["kernel"][:60] for r in rows if r["verify"].startswith("differs")]
    return f"{len(names)} " + "; ".join(sorted(set(names))[:5])


def pass_share(replayed):
    counted = [r for r in replayed if r.get("counters", "x") == ""]
    setup = median_of(counted, "counter_setup_ms") if counted and "counter_setup_ms" in counted[0] else "none"
    return (f"{len(counted)} counted rows, median ms per pass (range mode: per launch of a pass): kreplay "
            f"{median_of(counted, 'extra_pass_ms')}, "
            f"profiler {median_of(counted, 'counter_pass_ms')}; the counting's set-up per launch {setup}")


def uncounted(rows):
    first, counts = {}, collections.Counter()
    for r in rows:
        if r["replayed"] == "1" and r.get("counters", "x") == "":
            continue
        why = (r.get("counters", "") or r["reason"])[:150]
        counts[why] += 1
        first.setdefault(why, r["launch"])
    return "; ".join(f"{n} x {why} (first: launch {first[why]})" for why, n in counts.most_common()) or "none"


def replayed_kinds(replayed, graph):
    # A graph launch whose kernel nodes were replayed (graph_mode "node") was not relaunched itself.
    own = [r for r in replayed if r in graph and r.get("graph_mode", "") == "node"]
    graphs = sum(r in graph for r in replayed) - len(own)
    kernel_nodes = sum(is_node(r) for r in replayed)
    return f"graphs={graphs} nodes={kernel_nodes} stream={len(replayed) - len(own) - graphs - kernel_nodes}"


# Each figure of a Report, by the name the scripts ask for (the module's docstring says what each is).
FIGURES = {
    "rows": lambda rep: len(rep.rows),
    "replayed": lambda rep: len(rep.replayed),
    "max_footprint": lambda rep: max([int(r["footprint_bytes"]) for r in rep.rows] or [0]),
    "declined": lambda rep: len(rep.declined),
    "declined_other": lambda rep: sum("HOST_BUDGET" not in r["reason"] for r in rep.declined),
    "graphs": lambda rep: len(rep.graph),
    "graphs_replayed": lambda rep: len(replayed_of(rep.graph)),
    "first_graph": lambda rep: min([int(r["launch"]) for r in rep.graph] or [0]),
    "graph_reasons": lambda rep: "; ".join(sorted({r["reason"] for r in rep.graph if r["replayed"] != "1"})) or "none",
    "graph_modes": lambda rep: graph_modes(rep.graph),
    "nodes": lambda rep: len(rep.nodes),
    "nodes_replayed": lambda rep: len(replayed_of(rep.nodes)),
    "node_extra": lambda rep: median_of(replayed_of(rep.nodes), "extra_pass_ms"),
    "stream_extra": lambda rep: median_of([r for r in rep.replayed if not r.get("graph_mode", "")], "extra_pass_ms"),
    "twin_extra": lambda rep: median_of(twin_rows(rep.rows, rep.graph), "extra_pass_ms"),
    "twin_kernel_ms": lambda rep: median_of(twin_rows(rep.rows, rep.graph), "kernel_ms"),
    "twin_moved": lambda rep: median_mb(twin_rows(rep.rows, rep.graph), "bytes_moved"),
    "twin_footprint": lambda rep: median_mb(twin_rows(rep.rows, rep.graph), "footprint_bytes"),
    "graph_moved": lambda rep: median_mb(replayed_of(rep.graph), "bytes_moved"),
    "graph_footprint": lambda rep: median_mb(replayed_of(rep.graph), "footprint_bytes"),
    "twin_pairs": lambda rep: twin_pairs(rep.rows, rep.graph),
    "graph_extra": lambda rep: median_of(replayed_whole(rep.graph), "extra_pass_ms"),
    "graph_kernel_ms": lambda rep: median_of(replayed_of(rep.graph), "kernel_ms"),
    "reasons": lambda rep: reasons(rep.rows),
    "differs": lambda rep: differs(rep.rows),
    "pass_share": lambda rep: pass_share(rep.replayed),
    "uncounted": lambda rep: uncounted(rep.rows),
    "node_ratio": lambda rep: node_ratio(rep.replayed),
    "node_same_footprint": lambda rep: node_same_footprint(rep.replayed),
    "replayed_kinds": lambda rep: replayed_kinds(rep.replayed, rep.graph),
    "graph_work:node": lambda rep, kernel: graph_work(rep.rows, rep.graph, "node", kernel),
    "graph_work:graph": lambda rep, kernel: graph_work(rep.rows, rep.graph, "graph", kernel),
    "replay_s": lambda rep: f"{sum(float(r['replay_ms']) for r in rep.rows) / 1000:.1f}",
}


def figure(rows, what, kernel=""):
    if what not in FIGURES:
        raise SystemExit(f"csv_figure.py: unknown figure {what!r}")
    report = Report(rows)
    return FIGURES[what](report, kernel) if what.startswith("graph_work:") else FIGURES[what](report)


if __name__ == "__main__":
    try:
        report = list(csv.DictReader(open(sys.argv[1])))
    except OSError:
        report = []
    print(figure(report, sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""))
