// Hardware counters for the replay loop (issue 30): what a source of counters must do so that the loop can run
// the passes it needs, one range per launch, with kreplay's restores between them. The source decides the pass
// count when a launch is about to be replayed (CUPTI's Range Profiler in user replay says how many passes its
// metrics need); the loop then runs at least that many, brackets each counted pass with begin_pass / end_pass
// (passes 1 to k; the program's own launch is pass N >= k, counted when N == k), and collects the values after
// the last counted pass. A source that fails never changes what the program computes: the launch is then
// replayed without counters, with the reason in its row (or, when it cannot be counted at all, run once).
#ifndef KREPLAY_CUDA_INJECT_REPLAY_COUNTERS_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_COUNTERS_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda.h>

namespace kreplay::cuda::inject {

// The counting of one launch, from its first counted pass to its values. Destroyed before collect (a pass
// failed, the launch's context is gone), it drops what it gathered.
class counter_session {
 public:
  virtual ~counter_session() = default;
  // Around one counted pass: before its launch is submitted, and after it has completed.
  virtual bool begin_pass(std::string* why) = 0;
  virtual bool end_pass(std::string* why) = 0;
  // After the last counted pass: one value per metric, in the source's order.
  virtual bool collect(std::vector<double>* values, std::string* why) = 0;
};

// Where sessions come from. Windows on two devices may open and run sessions at the same time, from two threads:
// a source keeps what it shares (a context's set-up) safe for that.
class counter_source {
 public:
  virtual ~counter_source() = default;
  // The metrics, in the order collect() gives their values (the report's columns).
  virtual const std::vector<std::string>& metrics() const = 0;
  // The counting of a launch in `context`; `*passes`: the passes the metrics need, at least 1. Null, with why,
  // when this launch cannot be counted.
  virtual std::unique_ptr<counter_session> open(CUcontext context, uint32_t* passes, std::string* why) = 0;
  // `context` was destroyed: whatever the source keeps for it goes, without a call into it.
  virtual void context_gone(CUcontext context) { (void)context; }
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_COUNTERS_HPP
