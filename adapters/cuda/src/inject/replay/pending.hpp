// A launch between its ENTER and its EXIT on the calling thread: what the loop holds for it (private to the
// replay's loop.cpp and passes.cpp).
#ifndef KREPLAY_CUDA_INJECT_REPLAY_PENDING_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_PENDING_HPP

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "replay/backend.hpp"
#include "replay/counters.hpp"
#include "replay/graphs.hpp"
#include "replay/launch.hpp"
#include "replay/replay.hpp"
#include "replay/report.hpp"
#include "replay/verify.hpp"

namespace kreplay::cuda::inject {

struct replayer::pending_t {
  launch_t launch;
  const char* name = nullptr;      // the launched function's, when the driver has one
  graph_facts graph;               // a graph launch's executable, as instantiated
  int device = -1;
  CUcontext context = nullptr;     // the launch's
  uint64_t destroyed_at_entry = 0; // contexts destroyed before its entry (replayer::contexts_destroyed_)
  kreplay_agent_t agent{0};
  bool replaying = false;          // window and snapshot held, kreplay's passes run: EXIT closes the window
  bool cupti_replaying = false;    // --backend cupti-kernel-replay: a range started, CUPTI runs the passes
  bool in_range = false;           // --replay-mode range: handed to its thread's range at the exit
  uint32_t own_passes_run = 0;     // the passes kreplay ran at the entry (the program's launch is the last)
  // The passes that ran, for the row, once the last pass (own_passes_run + 1) has run or failed.
  uint32_t passes_that_ran(bool last_ran) const { return last_ran ? own_passes_run + 1 : std::max(1u, own_passes_run); }
  uint32_t passes = 0;             // the launch's passes: --passes, or more when its counters need more
  uint32_t counted_passes = 0;     // passes 1 to counted_passes carry counters (0: none)
  std::unique_ptr<counter_session> counting;  // its counters, while they are still being gathered
  uint64_t fence_token = 0;        // a launch run once: it waited for other threads' windows
  kreplay_window_t* window = nullptr;
  std::unique_ptr<saved_memory> saved;
  kernel_timer timer;
  replay_clock::time_point entered;
  replay_clock::time_point program_pass_begun;    // the program's own launch (the last pass) begins
  double restore_before_program_ms = 0;           // the restore that prepared it
  double program_counter_begin_ms = 0;            // the profiler's begin of its pass, when it is counted
  std::vector<double> extra_ms;                   // cost of each pass after the first
  std::vector<double> counter_ms;                 // the profiler's begin and end of each counted pass
  double flush_ms = 0;                            // the cache flushes before its counted passes
  double collect_ms = 0;                          // the profiler's decode and evaluation after them
  phase_marks phases;                             // KREPLAY_INJECT_LOG=info: its time by phase
  pass_verifier verifier;
  launch_row_t row;

  explicit pending_t(const driver_api_t& driver) : timer(driver) {}
  pending_t(const pending_t&) = delete;
  pending_t& operator=(const pending_t&) = delete;
  // Whatever the normal path did not release (an exception on the way): nothing stays open or held, so no
  // other thread waits on this launch's window for ever.
  ~pending_t() {
    saved.reset();
    if (window != nullptr) {
      (void)kreplay_window_close(window, nullptr);
    }
    if (fence_token != 0) {
      kreplay_copy_end(fence_token);
    }
  }
};

// --replay-mode range: one thread's launches gathered for one range window (ranges.cpp).
struct replayer::range_t {
  CUcontext context = nullptr;
  int device = -1;
  kreplay_agent_t agent{0};
  std::unique_ptr<saved_memory> before;              // the memory before the range's first launch
  std::vector<std::unique_ptr<pending_t>> launches;  // handed over at their exits, in order
  pending_t* entering = nullptr;                     // a launch between its entry and its exit
  std::string pass_failure;  // what stopped a pass: the launch that failed to relaunch, or the wait, with the CUresult
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_PENDING_HPP
