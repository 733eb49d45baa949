// What a set of runtime ops has done: stats_t's counts, owned by the set's context (context.hpp), and how
// kreplay::cuda::stats() adds them up for the whole process (counters.cpp).
#ifndef KREPLAY_CUDA_RUNTIME_OPS_COUNTERS_HPP
#define KREPLAY_CUDA_RUNTIME_OPS_COUNTERS_HPP

#include <atomic>
#include <cstdint>

#include "kreplay/cuda.hpp"

namespace kreplay::cuda::detail {

// stats_t's fields, one atomic each (relaxed: they are counts, ordered with nothing). The gauges (locked_bytes,
// device_bytes) go down as well as up, in uint64_t's modular arithmetic, so sums over sets are what one
// process-wide counter would read.
struct counters {
  std::atomic<uint64_t> copies{0};
  std::atomic<uint64_t> copy_bytes{0};
  std::atomic<uint64_t> copy_failures{0};
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> batch_copies{0};
  std::atomic<uint64_t> batch_bytes{0};
  std::atomic<uint64_t> batch_failures{0};
  std::atomic<uint64_t> host_locks{0};
  std::atomic<uint64_t> host_unlocks{0};
  std::atomic<uint64_t> locked_bytes{0};
  std::atomic<uint64_t> module_scans{0};
  std::atomic<uint64_t> digests{0};
  std::atomic<uint64_t> digest_bytes{0};
  std::atomic<uint64_t> digest_failures{0};
  std::atomic<uint64_t> device_allocs{0};
  std::atomic<uint64_t> device_frees{0};
  std::atomic<uint64_t> device_bytes{0};
  std::atomic<uint64_t> device_alloc_failures{0};
  std::atomic<uint64_t> oom_retries{0};

  // Adds these counts to `total`.
  void add_to(stats_t& total) const;
};

inline void increase(std::atomic<uint64_t>& counter, uint64_t n = 1) {
  counter.fetch_add(n, std::memory_order_relaxed);
}
inline void decrease(std::atomic<uint64_t>& counter, uint64_t n) { counter.fetch_sub(n, std::memory_order_relaxed); }

// The process's record (all thread-safe): stats() is the sum of the counters of every live set, of the sets
// already released, and of the calls made outside any set.

// The counters of calls outside any set of ops: kreplay::cuda::copy from a harness, malloc_tracked's retries.
counters& loose_counters();

// From make_runtime_ops on, until retire: `set` counts in stats(). False when there was no memory to record it.
bool enroll(const counters& set);

// From release: folds `set` into the released sets' totals and counts the release; `set` may then be destroyed.
void retire(const counters& set);

}  // namespace kreplay::cuda::detail

#endif  // KREPLAY_CUDA_RUNTIME_OPS_COUNTERS_HPP
