// Hardware counters for the replay loop (issue 30): what a source of counters must do so that the loop can run
// the passes it needs, one range per stream launch, with kreplay's restores between them. The source says how
// many passes its metrics need (k) when a launch is about to be replayed; the loop then runs the larger of k and
// --passes, the program's own launch the last of them, configures the session inside the launch's window, brackets
// passes 1 to k with begin_pass / end_pass (the program's launch too, when it is pass k: its range begins at the
// launch's entry and ends at its exit), and collects the values after pass k. Range mode's counted passes all
// follow the program's own run of its launches, which is not counted (k + 1 passes). A source that fails
// never changes what the program computes: the launch is then replayed without counters, with the reason in its
// row's `counters` column (or, when its context cannot be counted at all, run once). A graph's kernel nodes are
// counted in node mode, each as a stream launch; a graph replayed whole is not counted.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_COUNTERS_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_COUNTERS_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda.h>

namespace kreplay::cuda::inject {

// The counting of one launch, from its configuration to its values. Destroyed before collect (a pass failed, the
// launch's context is gone), it ends a pass it began (unless the source let go of the context: then it makes no
// call) and drops what it gathered.
class counter_session {
 public:
  virtual ~counter_session() = default;
  // Inside the launch's window (other threads' launches on the device wait), before its first counted pass.
  virtual bool configure(std::string* why) = 0;
  // Around one counted pass: before its launch is submitted, and after it has completed (or failed).
  virtual bool begin_pass(std::string* why) = 0;
  virtual bool end_pass(std::string* why) = 0;
  // Inside a counted pass, around each launch's relaunch (one in kernel mode, a range's in range mode), so that
  // each is a range of its own where the source makes user ranges.
  virtual bool begin_range(std::string*) { return true; }
  virtual bool end_range(std::string*) { return true; }
  // After the last counted pass: one value per metric, in the source's order.
  virtual bool collect(std::vector<double>* values, std::string* why) = 0;
  // Range mode: the values of the `index`-th launch of the pass (from 0); collect() is range 0's.
  virtual bool collect_range(size_t index, std::vector<double>* values, std::string* why) {
    if (index != 0) {
      *why = "this source counts one launch per pass";
      return false;
    }
    return collect(values, why);
  }
};

// Where sessions come from. Windows on two devices may open and run sessions at the same time, from two threads:
// a source keeps what it shares (a context's set-up) safe for that.
class counter_source {
 public:
  virtual ~counter_source() = default;
  // The metrics, in the order collect() gives their values (the report's columns).
  virtual const std::vector<std::string>& metrics() const = 0;
  // The counting of a launch in `context`, not yet configured; `*passes`: the passes the metrics need, at least
  // 1. Null, with why, when launches in this context cannot be counted.
  virtual std::unique_ptr<counter_session> open(CUcontext context, uint32_t* passes, std::string* why) = 0;
  // Range mode (--replay-mode range): a session whose every pass runs `ranges` launches, each a range of its own
  // (begin_range / end_range around it), so that the profiler's cost per pass is paid once for all of them.
  virtual std::unique_ptr<counter_session> open_ranges(CUcontext context, uint32_t ranges, uint32_t* passes,
                                                       std::string* why) {
    if (ranges == 1) {
      return open(context, passes, why);
    }
    *why = "this source counts one launch per pass";
    return nullptr;
  }
  // `context` was destroyed: whatever the source keeps for it goes, without a call into it.
  virtual void context_gone(CUcontext context) { (void)context; }
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_COUNTERS_HPP
