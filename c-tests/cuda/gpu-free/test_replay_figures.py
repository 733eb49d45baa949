"""GPU-free tests of the figures the GPU scripts check their verdicts with (c-tests/cuda/gpu/replay): csv_figure.py's
graph-launch pairs, control selection and replayed kinds, and restore_split.py's pairing of the injection's lines
with restores. Run by ctest (label cuda): python3 test_replay_figures.py."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu", "replay"))
import csv_figure  # noqa: E402
import restore_split  # noqa: E402


def row(launch, kernel, replayed="1", extra="0.1", kernel_ms="0.5", graph_mode="", graph_launch="", graph_node="",
        reason=""):
    return {"launch": str(launch), "kernel": kernel, "replayed": replayed, "extra_pass_ms": extra,
            "kernel_ms": kernel_ms, "graph_mode": graph_mode, "graph_launch": graph_launch, "graph_node": graph_node,
            "reason": reason, "verify": "", "footprint_bytes": "1048576", "bytes_moved": "1048576"}


def graph_row(launch, extra, mode="graph"):
    return row(launch, "graph: 3 kernels, 3 nodes (k)", extra=extra, graph_mode=mode)


class TwinPairs(unittest.TestCase):
    def test_each_graph_launch_against_the_stream_kernel_right_after_it(self):
        rows = [row(1, "warmup"), graph_row(2, "0.3"), row(3, "add", extra="0.25"), graph_row(4, "0.2"),
                row(5, "add", extra="0.2")]
        self.assertEqual(csv_figure.figure(rows, "twin_pairs"), "1.2000 1.0000")
        self.assertEqual(csv_figure.figure(rows, "twin_extra"), "0.2250")
        self.assertEqual(csv_figure.figure(rows, "graph_extra"), "0.2500")

    def test_no_pairs_unless_every_graph_launch_has_a_replayed_stream_kernel_after_it(self):
        rows = [graph_row(2, "0.3"), row(3, "add", extra="0.25"), graph_row(4, "0.2"),
                row(5, "add", replayed="0", reason="run once")]
        self.assertEqual(csv_figure.figure(rows, "twin_pairs"), "none")
        self.assertEqual(csv_figure.figure(rows, "twin_extra"), "none")

    def test_a_graph_launch_node_mode_replays_whole_is_paired(self):
        rows = [graph_row(2, "0.3", mode="graph: a conditional node"), row(3, "add", extra="0.2")]
        self.assertEqual(csv_figure.figure(rows, "twin_pairs"), "1.5000")

    def test_a_graph_launch_replayed_node_by_node_is_no_pair(self):
        rows = [graph_row(2, "0.3", mode="node"), row(3, "add", extra="0.25")]
        self.assertEqual(csv_figure.figure(rows, "twin_pairs"), "none")


class GraphWork(unittest.TestCase):
    def rows(self):
        # Stream launches 0 to 3 (two elementwise), graph launch 4 replayed node by node (its nodes 5 to 7, two
        # elementwise), then graph launch 8 and a stream launch.
        return [row(0, "elementwise_a"), row(1, "gemm"), row(2, "elementwise_b"), row(3, "gemm"),
                graph_row(4, "0.3", mode="node"),
                row(5, "elementwise_c", graph_launch="4", graph_node="0"),
                row(6, "gemm", graph_launch="4", graph_node="1"),
                row(7, "elementwise_d", graph_launch="4", graph_node="2"),
                graph_row(8, "0.3", mode="node"), row(9, "elementwise_e")]

    def test_node_mode_counts_in_the_filter_s_units(self):
        self.assertEqual(csv_figure.figure(self.rows(), "graph_work:node", "elementwise"),
                         "2 2 graphs=0 nodes=2 stream=0")
        self.assertEqual(csv_figure.figure(self.rows(), "graph_work:node"), "4 3 graphs=0 nodes=3 stream=0")

    def test_graph_mode_selects_the_first_graph_launch(self):
        rows = [row(0, "a"), row(1, "b"), graph_row(2, "0.3"), graph_row(3, "0.3")]
        self.assertEqual(csv_figure.figure(rows, "graph_work:graph"), "2 1 graphs=1 nodes=0 stream=0")

    def test_no_selection_with_a_filter_after_a_graph_replayed_whole(self):
        rows = [graph_row(0, "0.3", mode="graph: a conditional node")] + self.rows()[1:]
        self.assertEqual(csv_figure.figure(rows, "graph_work:node", "elementwise"), "0 0 none")

    def test_node_mode_selects_a_graph_launch_it_replayed_whole(self):
        # Every graph launch replayed whole (a conditional node): the control relaunches the first, counted as one.
        rows = [row(0, "a"), graph_row(1, "0.3", mode="graph: a conditional node"), row(2, "b"),
                graph_row(3, "0.3", mode="graph: a conditional node")]
        self.assertEqual(csv_figure.figure(rows, "graph_work:node"), "1 1 graphs=1 nodes=0 stream=0")
        self.assertEqual(csv_figure.figure(rows, "graph_work:node", "a"), "0 0 none")

    def test_node_mode_passes_over_a_graph_launch_run_once(self):
        # A graph launch run once (here: its executable not seen instantiated) is neither the work nor counted.
        rows = [row(0, "a"), row(1, "graph: (executable not seen)", replayed="0", reason="run once")] + \
            self.rows()[2:]
        self.assertEqual(csv_figure.figure(rows, "graph_work:node"), "3 3 graphs=0 nodes=3 stream=0")

    def test_replayed_kinds_leave_out_graph_launches_replayed_node_by_node(self):
        self.assertEqual(csv_figure.figure(self.rows(), "replayed_kinds"), "graphs=0 nodes=3 stream=5")


class RestoreSplit(unittest.TestCase):
    LOG = """kreplay-inject: digest: 4 jobs, 100 bytes; 30 us
kreplay-inject: copy batch: 3 copies, 300 bytes; below 1 MiB 3 (300 bytes), 1 to 32 MiB 0 (0 bytes), from 32 MiB 0 (0 bytes); 20 us
kreplay-inject: kreplay: agent 0x1: snapshot of 2 regions and 1 module variables, 300 bytes
kreplay-inject: digest: 4 jobs, 100 bytes; 40 us
kreplay-inject: copy batch: 2 copies, 2097152 bytes; below 1 MiB 1 (4096 bytes), 1 to 32 MiB 1 (2093056 bytes), from 32 MiB 0 (0 bytes); 50 us
kreplay-inject: kreplay: agent 0x1: restore of 2097152 bytes (0 verified unchanged) in 3 regions (0 skipped, 0 failed) took 120 us (digest 45 us of 100 bytes, 1.00 GB/s)
kreplay-inject: kreplay: agent 0x1: restore of 0 bytes (100 verified unchanged) in 3 regions (0 skipped, 0 failed) took 60 us (digest 45 us of 100 bytes, 1.00 GB/s)
"""

    def test_a_restore_gets_the_ops_logged_since_the_last_snapshot_or_restore(self):
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as log:
            log.write(self.LOG)
        try:
            first, second = restore_split.restores_of(log.name)
        finally:
            os.unlink(log.name)
        # The snapshot's digest and batch are not the restore's.
        self.assertEqual((first["digest_op_us"], first["copy_op_us"], first["engine_us"]), (40, 50, 30))
        self.assertEqual((first["copies"], first["small"], first["middle"], first["large"]), (2, 1, 1, 0))
        self.assertEqual((first["us"], first["digest_us"], first["rest_us"]), (120, 45, 75))
        # A restore that copied nothing has no batch: none is carried over from the one before.
        self.assertEqual((second["copies"], second["copy_op_us"], second["engine_us"]), (0, 0, 60))


if __name__ == "__main__":
    unittest.main()
