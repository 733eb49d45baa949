// --cache-control all (the default with counters): the device's L2 flushed before every counted pass, as Nsight
// Compute does by default, so that cache-dependent metrics (DRAM and L2 traffic, time, cycles) of every pass start
// from a cold cache, not from what the pass before (or kreplay's restore) left there. The flush writes a scratch
// buffer of twice the L2's size (cuDeviceGetAttribute L2_CACHE_SIZE) on the launch's stream and waits for it, before
// the range starts, so it is never counted. One buffer per context, made at the first counted pass there (about
// 100 MB on an H200) and kept until the context goes (at exit the driver may already be gone, so it is left to the
// process's end). kreplay makes it under the re-entry guard: the tracker does not see it, no snapshot holds it.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_CACHE_FLUSH_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_CACHE_FLUSH_HPP

#include <mutex>
#include <string>
#include <unordered_map>

#include <cuda.h>

#include "driver.hpp"

namespace kreplay::cuda::inject {

class cache_flusher {
 public:
  explicit cache_flusher(const driver_api_t& driver) : driver_(driver) {}
  cache_flusher(const cache_flusher&) = delete;
  cache_flusher& operator=(const cache_flusher&) = delete;

  // Evicts the L2 of `context`'s device (the current context) and waits. False, with why, when it cannot (no L2
  // size, no memory for the buffer, a failed write): the pass is then counted from a warm cache, and the row says so.
  bool flush(CUcontext context, CUstream stream, std::string* why);
  // `context` was destroyed: its buffer went with it.
  void context_gone(CUcontext context);

 private:
  struct scratch {
    CUdeviceptr address = 0;
    size_t bytes = 0;
    std::string why_not;  // set once when it could not be made: every later flush there says the same
  };
  scratch& scratch_of(CUcontext context);

  const driver_api_t& driver_;
  std::mutex mutex_;
  std::unordered_map<CUcontext, scratch> scratch_;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_CACHE_FLUSH_HPP
