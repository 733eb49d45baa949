// What a replay reports: one CSV row per launch (--output), a progress line every --progress seconds, and the
// closing summary on stderr.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_REPORT_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_REPORT_HPP

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kreplay.h"
#include "replay_config.hpp"

namespace kreplay::cuda::inject {

using replay_clock = std::chrono::steady_clock;
double ms_between(replay_clock::time_point a, replay_clock::time_point b);
// The median of the passes' costs: for an even count the mean of the two middle ones (with a learned write set, a
// window of 5 passes has two full restores, the learning one and the last check, and two partial ones). 0 for none.
double median(std::vector<double> values);

// A replayed launch's time by phase, for the log at info (KREPLAY_INJECT_LOG=info): where the time of a launch
// goes outside its passes' columns. Marks are taken only when the log will print them.
class phase_marks {
 public:
  // Starts the timeline at `begun` (the launch's entry) when info lines are on.
  void start(replay_clock::time_point begun);
  // The phase that ends now, named by a literal.
  void mark(const char* phase);
  // "window 0.01, drain 0.20, ..." (ms each), or empty when not started.
  std::string text() const;

 private:
  bool on_ = false;
  replay_clock::time_point last_;
  std::vector<std::pair<const char*, double>> phases_;
};

// One row of the report.
struct launch_row_t {
  uint64_t index = 0;
  std::string kernel;
  int device = -1;
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  uint32_t passes_asked = 0;
  uint32_t passes_run = 0;
  size_t footprint_bytes = 0;
  size_t bytes_moved = 0;
  double snapshot_ms = 0;
  double restore_ms = 0;        // every restore of the launch
  double kernel_ms = 0;         // pass 1, by events around it
  double extra_pass_ms = 0;     // median over passes 2..N of restore + relaunch + wait, minus the kernel's time
  double counter_pass_ms = 0;   // median over counted passes of the profiler's calls that begin and end the pass
  double counter_setup_ms = 0;  // the counting's time outside its passes: opening, configuring, flushing, collecting
  bool replayed = false;
  std::string reason;           // why it ran once ("" when replayed)
  std::string verify = "off";   // "same", "differs: pass P, B blocks", or "differs: write set missed ..."
  size_t digested_bytes = 0;     // device memory all restores of the launch digested
  size_t write_set_misses = 0;   // blocks the last full check found changed outside the learned write set
  uint32_t write_set_miss_pass = 0;  // the first pass that may have started from such a state
  std::vector<double> metrics;   // one value per counted metric, empty when the launch was not counted
  std::string counters;          // with counters: "" when counted, else why not
  // Graphs: "graph" (the whole graph replayed as one window), "node" (a kernel node, or the launch of a graph whose
  // kernel nodes were replayed), "graph: <why node mode could not run it>"; "" for a stream launch.
  std::string graph_mode;
  int64_t graph_launch = -1;     // the graph launch's index (a graph launch's own, or a node's graph's); -1: none
  int64_t graph_node = -1;       // a kernel node's place among its graph's kernel nodes, from 0; -1: none
  bool holds_nodes = false;      // the program's launch of a graph whose kernel nodes have rows of their own
};
// A decline's C name and its text: "HOST_BUDGET (the snapshot would exceed ...)".
std::string decline_text(kreplay_decline_reason_t reason);
// The verdict of a launch whose full check found write-set misses: "differs: write set missed N blocks from
// pass P" (the passes from P on may have started from a state that was not the snapshot).
std::string write_set_verdict(const launch_row_t& row);
// The CSV header and one row, as written to --output (RFC 4180 quoting of the kernel name and texts).
// With counters, `metrics` adds a column per metric (its name) and a `counters` column (why a launch has no values).
std::string csv_header(const std::vector<std::string>& metrics = {});
std::string csv_row(const launch_row_t& row, size_t metrics = 0, double replay_ms = 0);

// The report a process writes: `output` itself for the launcher's program, `output` with ".<pid>" before its
// extension for a child of it (which inherited the launcher's environment), so that none overwrites another's.
std::string report_path(const std::string& output, uint64_t launcher_pid, uint64_t pid);

class counter_summary;

class replay_report {
 public:
  // `metrics`: the counted metrics, one CSV column each (empty: replay only).
  replay_report(const replay_config_t& config, const char* backend, std::vector<std::string> metrics = {});
  ~replay_report();
  replay_report(const replay_report&) = delete;
  replay_report& operator=(const replay_report&) = delete;

  // Opens --output (report_path: a child of the program writes its own) and writes the header. False (with why) when it cannot be written.
  bool open(std::string* why);
  // One launch: its row, the counts, and the progress line when one is due. `replay_ms`: its time replaying.
  void add(const launch_row_t& row, double replay_ms);
  // --replay-mode range: a range of `launches` launches ended, and why (its length's reason or the call that
  // ended it), replayed or not (one ended inside a stream capture runs no pass); the summary counts them by why.
  // A range dropped with its context is counted as "its context was destroyed".
  void range_ended(const std::string& why, size_t launches);
  // The closing summary on stderr and the report's last flush. Idempotent. `in_flight`: launches between their
  // entry and exit now (they get no row).
  void finish(int64_t in_flight);

 private:
  void progress_locked(replay_clock::time_point now);
  uint64_t declined_locked() const;

  replay_config_t config_;
  const char* backend_;
  std::vector<std::string> metrics_;
  uint64_t counted_ = 0;  // launches whose counters were collected
  std::unique_ptr<counter_summary> summary_;  // with metrics: the kernels with the most time, at finish
  std::mutex mutex_;
  FILE* csv_ = nullptr;
  std::map<std::string, uint64_t> declined_;  // by the reason's text before its first ':'
  std::map<std::string, uint64_t> ranges_ended_;  // range mode: ranges by why they ended
  uint64_t range_launches_ = 0;                   // and the launches they held
  uint64_t replayed_ = 0;
  uint64_t graphs_by_node_ = 0;  // graph launches whose kernel nodes were replayed one by one
  uint64_t differed_ = 0;
  uint64_t write_set_missed_ = 0;  // launches whose last full check found write-set misses
  double replay_ms_ = 0;
  replay_clock::time_point started_;
  replay_clock::time_point last_progress_;
  bool finished_ = false;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_REPORT_HPP
