// GPU-free test of how kreplay::cuda::stats() adds up the runtime ops' counters (adapters/cuda/src/runtime_ops/
// counters.cpp): each set of ops counts in its own context, and stats() is the process-wide sum of the live sets,
// the released ones and the calls made outside any set. Compiles the source itself, so that a sanitizer preset
// instruments it (the kreplay_cuda archive is not).
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <thread>
#include <vector>

#include "counters.hpp"

namespace {

using kreplay::cuda::stats;
using kreplay::cuda::stats_t;
namespace detail = kreplay::cuda::detail;

int failures = 0;

#define CHECK(condition)                                                                 \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      ++failures;                                                                        \
    }                                                                                    \
  } while (0)

void a_set_counts_from_enrollment_on() {
  const stats_t before = stats();
  detail::counters set;
  detail::increase(set.copies, 2);
  detail::increase(set.copy_bytes, 100);
  // Control: a set that is not enrolled is not in the sum.
  CHECK(stats().copies == before.copies);
  CHECK(detail::enroll(set));
  CHECK(stats().copies == before.copies + 2);
  CHECK(stats().copy_bytes == before.copy_bytes + 100);
  detail::increase(set.digests);
  CHECK(stats().digests == before.digests + 1);
  detail::retire(set);
}

void a_released_set_keeps_its_counts_and_counts_the_release() {
  const stats_t before = stats();
  detail::counters set;
  CHECK(detail::enroll(set));
  detail::increase(set.batches, 3);
  detail::increase(set.device_allocs);
  CHECK(stats().releases == before.releases);
  detail::retire(set);
  const stats_t after = stats();
  CHECK(after.releases == before.releases + 1);
  CHECK(after.batches == before.batches + 3);
  CHECK(after.device_allocs == before.device_allocs + 1);
  // Retired: what the object counts afterwards is no longer read.
  detail::increase(set.batches);
  CHECK(stats().batches == after.batches);
}

void gauges_add_up_across_sets_as_one_counter_would() {
  const stats_t before = stats();
  detail::counters locker;
  detail::counters unlocker;
  CHECK(detail::enroll(locker));
  CHECK(detail::enroll(unlocker));
  detail::increase(locker.locked_bytes, 4096);
  detail::decrease(unlocker.locked_bytes, 4096);  // below zero in this set alone: wraps, and the sum does not
  CHECK(stats().locked_bytes == before.locked_bytes);
  detail::retire(locker);
  CHECK(stats().locked_bytes == before.locked_bytes);
  detail::retire(unlocker);
  CHECK(stats().locked_bytes == before.locked_bytes);
}

void calls_outside_any_set_count_too() {
  const stats_t before = stats();
  detail::increase(detail::loose_counters().oom_retries);
  detail::increase(detail::loose_counters().copies, 5);
  CHECK(stats().oom_retries == before.oom_retries + 1);
  CHECK(stats().copies == before.copies + 5);
}

void sets_made_and_released_on_many_threads_all_count() {
  constexpr int kThreads = 4;
  constexpr int kSets = 500;
  const stats_t before = stats();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kSets; ++i) {
        detail::counters set;
        if (detail::enroll(set)) {
          detail::increase(set.host_locks);
          (void)stats();
          detail::retire(set);
        }
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  const stats_t after = stats();
  CHECK(after.releases == before.releases + kThreads * kSets);
  CHECK(after.host_locks == before.host_locks + kThreads * kSets);
}

// KREPLAY_INJECT_COPY_METHOD's names: each method by the name copy_method_name gives it, anything else refused.
void copy_methods_are_found_by_their_names() {
  using kreplay::cuda::copy_method;
  for (copy_method method :
       {copy_method::automatic, copy_method::kernel, copy_method::memcpy_batch, copy_method::memcpy_async}) {
    copy_method found = method == copy_method::kernel ? copy_method::automatic : copy_method::kernel;
    CHECK(kreplay::cuda::copy_method_from_name(kreplay::cuda::copy_method_name(method), &found));
    CHECK(found == method);
  }
  copy_method untouched = copy_method::memcpy_async;
  CHECK(!kreplay::cuda::copy_method_from_name("Kernel", &untouched));
  CHECK(!kreplay::cuda::copy_method_from_name("", &untouched));
  CHECK(!kreplay::cuda::copy_method_from_name(nullptr, &untouched));
  CHECK(!kreplay::cuda::copy_method_from_name("kernel", nullptr));
  CHECK(untouched == copy_method::memcpy_async);
}

}  // namespace

int main() {
  copy_methods_are_found_by_their_names();
  a_set_counts_from_enrollment_on();
  a_released_set_keeps_its_counts_and_counts_the_release();
  gauges_add_up_across_sets_as_one_counter_would();
  calls_outside_any_set_count_too();
  sets_made_and_released_on_many_threads_all_count();
  if (failures != 0) {
    std::fprintf(stderr, "test_runtime_ops_counters: %d checks failed\n", failures);
    return 1;
  }
  std::printf("test_runtime_ops_counters: all checks passed\n");
  return 0;
}
