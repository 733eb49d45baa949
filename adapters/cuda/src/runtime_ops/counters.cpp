// kreplay::cuda::stats(): the counts of every set of runtime ops, live or released, and of the calls made outside
// any set, added up. Each set counts into its own context; this file keeps the list of live sets, the totals of the
// released ones and the counts of the calls outside any set.
#include "counters.hpp"

#include <algorithm>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

namespace kreplay::cuda::detail {
namespace {

// Constant-initialised and trivially destructible, like the plain atomics it replaces: kreplay::cuda::copy reaches
// it without a guard check, and it outlives static destructors.
counters g_loose;
static_assert(std::is_trivially_destructible<counters>::value, "the loose counters must outlive static destructors");

class record {
 public:
  bool enroll(const counters& set) {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      live_.push_back(&set);
    } catch (const std::bad_alloc&) {
      return false;
    }
    return true;
  }

  void retire(const counters& set) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.erase(std::remove(live_.begin(), live_.end(), &set), live_.end());
    set.add_to(released_);
    ++released_.releases;
  }

  stats_t total() const {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_t total = released_;
    for (const counters* set : live_) {
      set->add_to(total);
    }
    g_loose.add_to(total);
    return total;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<const counters*> live_;
  stats_t released_{};
};

record& the_record() {
  // Built in place and never destroyed: a set of ops may be released (kreplay_finalize) from an exit handler that
  // runs after static destructors, and the counts were plain atomics that outlived everything before.
  alignas(record) static unsigned char storage[sizeof(record)];
  static record* const instance = new (storage) record();
  return *instance;
}

}  // namespace

void counters::add_to(stats_t& total) const {
  const auto add = [](uint64_t& sum, const std::atomic<uint64_t>& counter) {
    sum += counter.load(std::memory_order_relaxed);
  };
  add(total.copies, copies);
  add(total.copy_bytes, copy_bytes);
  add(total.copy_failures, copy_failures);
  add(total.batches, batches);
  add(total.batch_copies, batch_copies);
  add(total.batch_bytes, batch_bytes);
  add(total.batch_failures, batch_failures);
  add(total.host_locks, host_locks);
  add(total.host_unlocks, host_unlocks);
  add(total.locked_bytes, locked_bytes);
  add(total.module_scans, module_scans);
  add(total.digests, digests);
  add(total.digest_bytes, digest_bytes);
  add(total.digest_failures, digest_failures);
  add(total.device_allocs, device_allocs);
  add(total.device_frees, device_frees);
  add(total.device_bytes, device_bytes);
  add(total.device_alloc_failures, device_alloc_failures);
  add(total.oom_retries, oom_retries);
}

counters& loose_counters() { return g_loose; }

bool enroll(const counters& set) { return the_record().enroll(set); }

void retire(const counters& set) { the_record().retire(set); }

}  // namespace kreplay::cuda::detail

namespace kreplay::cuda {

stats_t stats() { return detail::the_record().total(); }

}  // namespace kreplay::cuda
