// One test per rule of API.md, "Concurrency, lifetimes and re-entry" (version 2), through the C API only, on
// the simulated device wrapped in ops of our own that can sleep inside a copy, call back into kreplay from
// inside an op, or report what the simulated device would not. docs/reliability.md lists what each one tries.
// The finalize rule runs in its own process (rules_finalize.cpp): finalize cannot be undone.
// Any call that could hang runs under a watchdog that fails the test instead.
#include "reliability.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> thread_failed{false};

// Threads report through this rather than REL_CHECK, whose counter is not atomic.
#define RULE_CHECK(condition)                                                              \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);  \
      thread_failed.store(true);                                                           \
    }                                                                                      \
  } while (0)

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Runs `body` on a thread of its own and fails the whole test (exit 1) if it has not returned within
// `seconds`: a hang must fail, not stall ctest until its timeout.
void within(const char* what, double seconds, const std::function<void()>& body) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([done, &body] {
    body();
    done->store(true);
  }).detach();
  Clock::time_point start = Clock::now();
  while (!done->load()) {
    if (ms_since(start) > seconds * 1000.0) {
      std::fprintf(stderr, "%s: still running after %.0f s: a hang (deadlock)\n", what, seconds);
      std::fflush(stderr);
      std::_Exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ---- A thread-safe logger that keeps the last lines ----------------------------------------------------

// Keeps the last lines; marks count every line ever logged, so a mark survives dropping old lines.
struct Log {
  std::mutex mutex;
  std::size_t dropped = 0;
  std::vector<std::pair<int, std::string>> lines;
  std::atomic<std::size_t> per_level[4] = {};

  std::size_t mark() {
    std::lock_guard<std::mutex> lock(mutex);
    return dropped + lines.size();
  }
  std::size_t count_since(std::size_t mark, kreplay_log_level_t level, const char* needle) {
    std::lock_guard<std::mutex> lock(mutex);
    std::size_t found = 0;
    for (std::size_t i = mark > dropped ? mark - dropped : 0; i < lines.size(); ++i) {
      if (lines[i].first <= static_cast<int>(level) && lines[i].second.find(needle) != std::string::npos) {
        ++found;
      }
    }
    return found;
  }
};

Log main_log;

void log_sink(void* user_data, kreplay_log_level_t level, const char* message, std::size_t length) {
  Log* log = static_cast<Log*>(user_data);
  if (static_cast<unsigned>(level) <= 3u) {
    log->per_level[level].fetch_add(1);
  }
  std::lock_guard<std::mutex> lock(log->mutex);
  if (log->lines.size() == 4096) {
    log->dropped += log->lines.size();
    log->lines.clear();
  }
  log->lines.emplace_back(static_cast<int>(level), std::string(message, length));
}

void install_main_log() { kreplay_set_logger(log_sink, &main_log, KREPLAY_LOG_TRACE); }

#define RULE_CHECK_LOGGED(mark_, level_, needle_)                                                      \
  do {                                                                                                 \
    if (main_log.count_since((mark_), (level_), (needle_)) == 0) {                                     \
      std::fprintf(stderr, "%s:%d: nothing at level <= %d containing \"%s\" was logged\n", __FILE__,   \
                   __LINE__, static_cast<int>(level_), (needle_));                                     \
      thread_failed.store(true);                                                                       \
    }                                                                                                  \
  } while (0)

// ---- Ops wrapping the simulated device ------------------------------------------------------------------

kreplay_device_ops_t sim_ops;

// What the wrapper does besides forwarding. Set by the test thread before the call it concerns.
struct Hooks {
  // A copy whose destination or source is `slow_region` sleeps `slow_us` first.
  std::atomic<void*> slow_region{nullptr};
  std::atomic<long> slow_us{0};
  std::atomic<bool> in_slow_copy{false};
  std::atomic<std::int64_t> slow_copy_end_ns{0};
  // The first copy that touches `reenter_region` runs `reenter` (once) before forwarding.
  std::atomic<void*> reenter_region{nullptr};
  std::function<void()> reenter;
  // pointer_info turns tracking off before answering.
  std::atomic<bool> tracking_off_in_pointer_info{false};
  // The module scan also reports a variable at `extra_variable_address` of `extra_variable_size` bytes.
  std::atomic<bool> extra_variable{false};
  std::uintptr_t extra_variable_address = 0;
  std::size_t extra_variable_size = 0;
  // Copies that touched [watch_lo, watch_hi).
  std::atomic<std::uintptr_t> watch_lo{0}, watch_hi{0};
  std::atomic<std::size_t> watched_copies{0};
};

Hooks hooks;

// One set of ops handed to kreplay_configure: which calls went through it, and its release.
struct OpsSet {
  int id = 0;
  std::atomic<std::size_t> locks{0}, unlocks{0}, releases{0};
  std::atomic<std::size_t> last_unlock_seq{0}, release_seq{0};
};

std::atomic<std::size_t> sequence{0};

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

bool touches(const void* p, std::size_t bytes, std::uintptr_t lo, std::uintptr_t hi) {
  std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
  return lo < hi && a < hi && (bytes == 0 || a + bytes > lo);
}

kreplay_status_t wrap_copy(void*, void* dst, const void* src, std::size_t bytes) {
  std::uintptr_t lo = hooks.watch_lo.load(), hi = hooks.watch_hi.load();
  if (touches(dst, bytes, lo, hi) || touches(src, bytes, lo, hi)) {
    hooks.watched_copies.fetch_add(1);
  }
  void* again = hooks.reenter_region.load();
  if (again != nullptr && (dst == again || src == again) && hooks.reenter_region.compare_exchange_strong(again, nullptr)) {
    hooks.reenter();
  }
  void* slow = hooks.slow_region.load();
  if (slow != nullptr && (dst == slow || src == slow)) {
    hooks.in_slow_copy.store(true);
    std::this_thread::sleep_for(std::chrono::microseconds(hooks.slow_us.load()));
    kreplay_status_t status = sim_ops.copy(sim_ops.user_data, dst, src, bytes);
    hooks.slow_copy_end_ns.store(now_ns());
    hooks.in_slow_copy.store(false);
    return status;
  }
  return sim_ops.copy(sim_ops.user_data, dst, src, bytes);
}

kreplay_status_t wrap_pointer_info(void*, const void* ptr, kreplay_pointer_info_t* info) {
  if (hooks.tracking_off_in_pointer_info.exchange(false)) {
    kreplay_tracking_enable(false);
  }
  return sim_ops.pointer_info(sim_ops.user_data, ptr, info);
}

kreplay_status_t wrap_iterate(void*, kreplay_agent_t agent, kreplay_module_variable_visitor_t visit, void* data) {
  kreplay_status_t status = sim_ops.iterate_module_variables(sim_ops.user_data, agent, visit, data);
  if (status == KREPLAY_STATUS_SUCCESS && hooks.extra_variable.load()) {
    kreplay_module_variable_t variable;
    std::memset(&variable, 0, sizeof variable);
    variable.name = "wrapping";
    variable.name_length = 8;
    variable.address = reinterpret_cast<void*>(hooks.extra_variable_address);
    variable.size = hooks.extra_variable_size;
    visit(data, &variable);
  }
  return status;
}

kreplay_status_t wrap_host_lock(void* user_data, void* ptr, std::size_t bytes) {
  kreplay_status_t status = sim_ops.host_lock(sim_ops.user_data, ptr, bytes);
  if (status == KREPLAY_STATUS_SUCCESS) {
    static_cast<OpsSet*>(user_data)->locks.fetch_add(1);
  }
  return status;
}

kreplay_status_t wrap_host_unlock(void* user_data, void* ptr, std::size_t bytes) {
  OpsSet* set = static_cast<OpsSet*>(user_data);
  set->unlocks.fetch_add(1);
  set->last_unlock_seq.store(sequence.fetch_add(1) + 1);
  return sim_ops.host_unlock(sim_ops.user_data, ptr, bytes);
}

void wrap_release(void* user_data) {
  OpsSet* set = static_cast<OpsSet*>(user_data);
  set->releases.fetch_add(1);
  set->release_seq.store(sequence.fetch_add(1) + 1);
}

// Sets live until the process ends: the test checks their counters after kreplay released them.
std::vector<std::unique_ptr<OpsSet>> ops_sets;

OpsSet* configure_wrapped(int id) {
  ops_sets.emplace_back(new OpsSet);
  OpsSet* set = ops_sets.back().get();
  set->id = id;
  kreplay_device_ops_t ops;
  std::memset(&ops, 0, sizeof ops);
  ops.struct_size = sizeof ops;
  ops.user_data = set;
  ops.copy = wrap_copy;
  ops.pointer_info = wrap_pointer_info;
  ops.iterate_module_variables = wrap_iterate;
  if (sim_ops.host_lock != nullptr) {
    ops.host_lock = wrap_host_lock;
    ops.host_unlock = wrap_host_unlock;
  }
  ops.release = wrap_release;
  REL_REQUIRE(kreplay_configure(&ops) == KREPLAY_STATUS_SUCCESS);
  return set;
}

kreplay_agent_t agent(std::uint64_t handle) {
  kreplay_agent_t a;
  a.handle = handle;
  return a;
}

void* device_region(kreplay_agent_t owner, std::size_t size) {
  void* region = nullptr;
  REL_REQUIRE(kreplay_sim_alloc(owner, size, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &region) ==
              KREPLAY_STATUS_SUCCESS);
  return region;
}

void* tracked_region(kreplay_agent_t owner, std::size_t size) {
  void* region = device_region(owner, size);
  REL_REQUIRE(kreplay_record_alloc(region, size, 0) == KREPLAY_STATUS_SUCCESS);
  return region;
}

void untrack_and_free(void* region) {
  kreplay_status_t status = kreplay_record_free(region);
  RULE_CHECK(status == KREPLAY_STATUS_SUCCESS || status == KREPLAY_STATUS_NOT_FOUND);
  RULE_CHECK(kreplay_sim_free(region) == KREPLAY_STATUS_SUCCESS);
}

std::size_t tracked_regions(kreplay_agent_t who) {
  kreplay_inventory_stats_t stats;
  std::memset(&stats, 0, sizeof stats);
  REL_REQUIRE(kreplay_inventory_stats(who, &stats) == KREPLAY_STATUS_SUCCESS);
  return stats.regions;
}

void trim(kreplay_agent_t who) {
  kreplay_staging_trim(who);
  kreplay_device_trim(who);
}

// ---- (a) Frees wait only for their own region ---------------------------------------------------------------

void frees_wait_only_for_their_own_region() {
  const kreplay_agent_t a = agent(0xA1), b = agent(0xB1), c = agent(0xC1);
  void* copied = tracked_region(a, 64 << 10);
  void* other = tracked_region(b, 4096);
  void* third = device_region(c, 4096);
  kreplay_snapshot_t* snapshot = nullptr;
  REL_REQUIRE(kreplay_snap(a, &snapshot, nullptr) == KREPLAY_STATUS_SUCCESS);

  hooks.slow_us.store(500000);
  hooks.slow_region.store(copied);
  kreplay_status_t restored = KREPLAY_STATUS_INTERNAL_ERROR;
  std::thread restore([&] { restored = kreplay_restore(snapshot, nullptr); });
  Clock::time_point waiting = Clock::now();
  while (!hooks.in_slow_copy.load()) {
    REL_REQUIRE(ms_since(waiting) < 10000.0);
    std::this_thread::yield();
  }
  Clock::time_point start = Clock::now();
  REL_CHECK_STATUS(kreplay_record_free(other), KREPLAY_STATUS_SUCCESS);
  double free_ms = ms_since(start);
  start = Clock::now();
  REL_CHECK_STATUS(kreplay_record_alloc(third, 4096, 0), KREPLAY_STATUS_SUCCESS);
  double alloc_ms = ms_since(start);
  std::printf("unrelated record_free latency: %.0f us (while another agent's restore copies for 500 ms)\n",
              free_ms * 1000.0);
  std::printf("unrelated record_alloc latency: %.0f us\n", alloc_ms * 1000.0);
  // The bar is 1 ms (the printed figure); the assertion leaves room for a loaded CI machine.
  REL_CHECK(free_ms < 50.0);
  REL_CHECK(alloc_ms < 50.0);

  // A free of the region being copied waits until that copy is over.
  REL_CHECK(hooks.in_slow_copy.load());
  start = Clock::now();
  REL_CHECK_STATUS(kreplay_record_free(copied), KREPLAY_STATUS_SUCCESS);
  std::int64_t returned_ns = now_ns();
  double own_ms = ms_since(start);
  std::printf("record_free of the region being copied waited %.0f ms\n", own_ms);
  REL_CHECK(hooks.slow_copy_end_ns.load() != 0 && returned_ns >= hooks.slow_copy_end_ns.load());
  restore.join();
  hooks.slow_region.store(nullptr);
  REL_CHECK_STATUS(restored, KREPLAY_STATUS_SUCCESS);
  kreplay_snapshot_free(snapshot);
  REL_CHECK_STATUS(kreplay_record_free(third), KREPLAY_STATUS_SUCCESS);
  for (void* region : {copied, other, third}) {
    REL_CHECK_STATUS(kreplay_sim_free(region), KREPLAY_STATUS_SUCCESS);
  }
  trim(a);
}

// ---- (b) Tracking off means off -------------------------------------------------------------------------------

void tracking_off_during_record_alloc_inserts_nothing() {
  const kreplay_agent_t who = agent(0xB2);
  void* region = device_region(who, 8192);
  hooks.tracking_off_in_pointer_info.store(true);
  kreplay_status_t status = kreplay_record_alloc(region, 8192, 0);
  REL_CHECK(status == KREPLAY_STATUS_SUCCESS);
  REL_CHECK(!kreplay_tracking_is_enabled());
  kreplay_tracking_enable(true);
  REL_CHECK_EQ(tracked_regions(who), 0);
  // The memory is freed behind kreplay's back (tracking was off): the next snapshot must not read it.
  REL_CHECK_STATUS(kreplay_sim_free(region), KREPLAY_STATUS_SUCCESS);
  hooks.watched_copies.store(0);
  hooks.watch_lo.store(reinterpret_cast<std::uintptr_t>(region));
  hooks.watch_hi.store(reinterpret_cast<std::uintptr_t>(region) + 8192);
  kreplay_snapshot_t* snapshot = nullptr;
  REL_CHECK_STATUS(kreplay_snap(who, &snapshot, nullptr), KREPLAY_STATUS_SUCCESS);
  kreplay_snapshot_info_t info;
  std::memset(&info, 0, sizeof info);
  if (snapshot != nullptr) {
    REL_CHECK_STATUS(kreplay_snapshot_info(snapshot, &info), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_EQ(info.regions, 0);
  }
  REL_CHECK_EQ(hooks.watched_copies.load(), 0);
  hooks.watch_hi.store(0);
  kreplay_snapshot_free(snapshot);
  trim(who);
}

// ---- (c) Snapshot handles are safe across threads -------------------------------------------------------------

void snapshot_info_and_free_race_restores() {
  const kreplay_agent_t who = agent(0xC3);
  const kreplay_host_memory_stats_t start = rel_host_memory();
  std::vector<void*> regions;
  for (int i = 0; i < 4; ++i) {
    regions.push_back(tracked_region(who, 16384));
  }
  hooks.slow_us.store(100);
  hooks.slow_region.store(regions[0]);
  std::atomic<kreplay_snapshot_t*> current{nullptr};
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> restores_ok{0}, restores_refused{0}, infos_ok{0}, infos_refused{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&] {
      while (!stop.load()) {
        kreplay_snapshot_t* handle = current.load();
        if (handle == nullptr) {
          continue;
        }
        kreplay_restore_report_t report;
        kreplay_status_t status = kreplay_restore(handle, &report);
        RULE_CHECK(status == KREPLAY_STATUS_SUCCESS || status == KREPLAY_STATUS_INVALID_ARGUMENT);
        (status == KREPLAY_STATUS_SUCCESS ? restores_ok : restores_refused).fetch_add(1);
      }
    });
    workers.emplace_back([&] {
      while (!stop.load()) {
        kreplay_snapshot_t* handle = current.load();
        if (handle == nullptr) {
          continue;
        }
        kreplay_snapshot_info_t info;
        kreplay_status_t status = kreplay_snapshot_info(handle, &info);
        RULE_CHECK(status == KREPLAY_STATUS_SUCCESS || status == KREPLAY_STATUS_INVALID_ARGUMENT);
        if (status == KREPLAY_STATUS_SUCCESS) {
          RULE_CHECK(info.regions == 4 && info.bytes == 4 * 16384);
          infos_ok.fetch_add(1);
        } else {
          infos_refused.fetch_add(1);
        }
      }
    });
  }
  std::uint64_t rng = 0x9E3779B97F4A7C15ull;
  const int rounds = 300;
  for (int round = 0; round < rounds; ++round) {
    kreplay_snapshot_t* snapshot = nullptr;
    REL_REQUIRE(kreplay_snap(who, &snapshot, nullptr) == KREPLAY_STATUS_SUCCESS);
    current.store(snapshot);
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    std::this_thread::sleep_for(std::chrono::microseconds(rng % 600));
    // Freed while the workers may be restoring or reading it; they keep trying the dead handle for a while.
    kreplay_snapshot_free(snapshot);
    std::this_thread::sleep_for(std::chrono::microseconds(rng % 200));
  }
  stop.store(true);
  for (std::thread& worker : workers) {
    worker.join();
  }
  hooks.slow_region.store(nullptr);
  std::printf("snapshot handles: %d snapshots freed while in use; restores %zu done, %zu refused; infos %zu done, "
              "%zu refused\n",
              rounds, restores_ok.load(), restores_refused.load(), infos_ok.load(), infos_refused.load());
  REL_CHECK(restores_ok.load() > 0);
  REL_CHECK(infos_ok.load() > 0);
  for (void* region : regions) {
    untrack_and_free(region);
  }
  // Every snapshot was freed in the end, also those whose free came during a restore.
  REL_CHECK_NO_LEAKS(start, &who, 1);
}

// ---- (d) Re-entry never deadlocks ----------------------------------------------------------------------------

void restore_reentering(kreplay_agent_t who, void* copied, const char* what, const std::function<void()>& reenter) {
  kreplay_snapshot_t* snapshot = nullptr;
  REL_REQUIRE(kreplay_snap(who, &snapshot, nullptr) == KREPLAY_STATUS_SUCCESS);
  hooks.reenter = reenter;
  hooks.reenter_region.store(copied);
  within(what, 20.0, [&] {
    kreplay_restore_report_t report;
    kreplay_status_t status = kreplay_restore(snapshot, &report);
    RULE_CHECK(status == KREPLAY_STATUS_SUCCESS);
  });
  RULE_CHECK(hooks.reenter_region.load() == nullptr);  // the op did call back
  hooks.reenter_region.store(nullptr);
  kreplay_snapshot_free(snapshot);
}

std::atomic<int> staging_logger_calls{0};

void staging_logger(void*, kreplay_log_level_t, const char*, std::size_t) {
  // Told anything (here: that no pool is left), it takes staging of an agent that has a pool.
  kreplay_staging_buffer_t buffer;
  std::memset(&buffer, 0, sizeof buffer);
  if (kreplay_staging_acquire(&buffer, agent(0xD500), 64) == KREPLAY_STATUS_SUCCESS) {
    staging_logger_calls.fetch_add(1);
  }
  kreplay_staging_release(&buffer);
}

std::atomic<int> swapping_logger_calls{0};

void swapping_logger(void*, kreplay_log_level_t, const char*, std::size_t) {
  if (swapping_logger_calls.fetch_add(1) == 0) {
    kreplay_set_logger(log_sink, &main_log, KREPLAY_LOG_TRACE);
  }
}

void reentry_never_deadlocks() {
  const kreplay_agent_t who = agent(0xD4);
  void* copied = tracked_region(who, 16384);
  void* other = tracked_region(who, 4096);
  void* mapping = device_region(who, 8192);
  REL_REQUIRE(kreplay_record_vmem_map(mapping, 8192, who) == KREPLAY_STATUS_SUCCESS);

  std::size_t mark = main_log.mark();
  kreplay_status_t same = KREPLAY_STATUS_SUCCESS, different = KREPLAY_STATUS_INTERNAL_ERROR;
  restore_reentering(who, copied, "record_free from inside copy", [&] {
    same = kreplay_record_free(copied);
    different = kreplay_record_free(other);
  });
  REL_CHECK_STATUS(same, KREPLAY_STATUS_IN_USE);
  RULE_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "record_free");
  REL_CHECK_STATUS(different, KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(tracked_regions(who), 2);  // `copied` and the mapping

  void* fresh = device_region(who, 4096);
  kreplay_status_t allocated = KREPLAY_STATUS_INTERNAL_ERROR;
  restore_reentering(who, copied, "record_alloc from inside copy",
                     [&] { allocated = kreplay_record_alloc(fresh, 4096, 0); });
  REL_CHECK_STATUS(allocated, KREPLAY_STATUS_SUCCESS);

  kreplay_status_t unmapped = KREPLAY_STATUS_SUCCESS;
  restore_reentering(who, mapping, "record_vmem_unmap from inside copy",
                     [&] { unmapped = kreplay_record_vmem_unmap(mapping, 8192); });
  REL_CHECK_STATUS(unmapped, KREPLAY_STATUS_IN_USE);
  REL_CHECK_STATUS(kreplay_record_vmem_unmap(mapping, 8192), KREPLAY_STATUS_SUCCESS);

  // A logger that swaps loggers from inside itself, called from inside a copy.
  swapping_logger_calls.store(0);
  kreplay_set_logger(swapping_logger, nullptr, KREPLAY_LOG_TRACE);
  restore_reentering(who, copied, "set_logger from inside a logger", [&] {
    REL_CHECK_STATUS(kreplay_record_free(copied), KREPLAY_STATUS_IN_USE);  // logs an error
  });
  REL_CHECK(swapping_logger_calls.load() >= 1);
  install_main_log();

  restore_reentering(who, copied, "tracking_enable(false) from inside copy", [&] { kreplay_tracking_enable(false); });
  REL_CHECK(!kreplay_tracking_is_enabled());
  kreplay_tracking_enable(true);
  REL_CHECK_EQ(tracked_regions(who), 0);
  for (void* region : {copied, other, mapping, fresh}) {
    REL_CHECK_STATUS(kreplay_sim_free(region), KREPLAY_STATUS_SUCCESS);
  }
  trim(who);

  // A logger that takes staging when told that no pool is left: every pool slot is held by an agent with
  // storage, one of them 0xD500, and one more agent asks.
  std::vector<kreplay_staging_buffer_t> held;
  kreplay_staging_buffer_t buffer;
  std::memset(&buffer, 0, sizeof buffer);
  REL_REQUIRE(kreplay_staging_acquire(&buffer, agent(0xD500), 64) == KREPLAY_STATUS_SUCCESS);
  held.push_back(buffer);
  kreplay_status_t refused = KREPLAY_STATUS_SUCCESS;
  for (std::uint64_t i = 1; i <= 4096 && refused == KREPLAY_STATUS_SUCCESS; ++i) {
    std::memset(&buffer, 0, sizeof buffer);
    refused = kreplay_staging_acquire(&buffer, agent(0xD500 + i), 64);
    if (refused == KREPLAY_STATUS_SUCCESS) {
      held.push_back(buffer);
    }
  }
  REL_CHECK_STATUS(refused, KREPLAY_STATUS_CAPACITY_EXCEEDED);
  staging_logger_calls.store(0);
  kreplay_set_logger(staging_logger, nullptr, KREPLAY_LOG_TRACE);
  within("a logger that takes staging when no pool is left", 20.0, [&] {
    kreplay_staging_buffer_t late;
    std::memset(&late, 0, sizeof late);
    RULE_CHECK(kreplay_staging_acquire(&late, agent(0xDFFFF), 64) == KREPLAY_STATUS_CAPACITY_EXCEEDED);
  });
  install_main_log();
  REL_CHECK(staging_logger_calls.load() >= 1);
  for (kreplay_staging_buffer_t& lent : held) {
    kreplay_agent_t owner = lent.agent;
    kreplay_staging_release(&lent);
    trim(owner);
  }
}

// ---- (f) After set_logger returns, the previous logger is never called again ---------------------------------

struct SwapLogger {
  std::atomic<bool> retired{false};
  std::atomic<std::size_t> calls{0}, calls_after_retired{0};
  std::atomic<std::size_t> per_level[4] = {};
};

void swap_logger_sink(void* user_data, kreplay_log_level_t level, const char*, std::size_t) {
  SwapLogger* logger = static_cast<SwapLogger*>(user_data);
  logger->calls.fetch_add(1);
  if (logger->retired.load()) {
    logger->calls_after_retired.fetch_add(1);
  }
  if (static_cast<unsigned>(level) <= 3u) {
    logger->per_level[level].fetch_add(1);
  }
  // A slow logger keeps deliveries in progress while the swap happens (every 16th call, so that most of the
  // talkers' time goes to the window between the level check and the delivery).
  if (logger->calls.load() % 16 == 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void logger_swap_is_complete_when_it_returns() {
  const kreplay_agent_t who = agent(0xF6);
  void* region = tracked_region(who, 4096);
  enum { kRounds = 200 };
  // Each round has loggers of its own, as a host that frees a logger's user_data after replacing it would.
  std::vector<std::unique_ptr<SwapLogger>> firsts, seconds;
  for (int i = 0; i < kRounds; ++i) {
    firsts.emplace_back(new SwapLogger);
    seconds.emplace_back(new SwapLogger);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> talkers;
  for (int t = 0; t < 4; ++t) {
    talkers.emplace_back([&, t] {
      while (!stop.load()) {
        if (t % 2 == 0) {
          (void)kreplay_staging_acquire(nullptr, who, 64);  // a WARNING
        } else {
          kreplay_snapshot_t* snapshot = nullptr;  // INFO lines
          if (kreplay_snap(who, &snapshot, nullptr) == KREPLAY_STATUS_SUCCESS) {
            (void)kreplay_restore(snapshot, nullptr);
          }
          kreplay_snapshot_free(snapshot);
        }
      }
    });
  }
  for (int i = 0; i < kRounds; ++i) {
    kreplay_set_logger(swap_logger_sink, firsts[i].get(), KREPLAY_LOG_TRACE);
    std::this_thread::sleep_for(std::chrono::microseconds(1000));
    kreplay_set_logger(swap_logger_sink, seconds[i].get(), KREPLAY_LOG_ERROR);
    firsts[i]->retired.store(true);
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  stop.store(true);
  for (std::thread& talker : talkers) {
    talker.join();
  }
  install_main_log();
  std::size_t first_warnings = 0, first_after = 0, second_warnings = 0, second_info = 0, second_trace = 0;
  for (int i = 0; i < kRounds; ++i) {
    first_warnings += firsts[i]->per_level[KREPLAY_LOG_WARNING].load();
    first_after += firsts[i]->calls_after_retired.load();
    second_warnings += seconds[i]->per_level[KREPLAY_LOG_WARNING].load();
    second_info += seconds[i]->per_level[KREPLAY_LOG_INFO].load();
    second_trace += seconds[i]->per_level[KREPLAY_LOG_TRACE].load();
  }
  std::printf("logger swap, %d rounds: the first loggers got %zu warnings, %zu lines after their swap returned; the "
              "second ones (ERROR) got %zu warnings and %zu info lines\n",
              kRounds, first_warnings, first_after, second_warnings, second_info);
  REL_CHECK(first_warnings > 0);
  REL_CHECK_EQ(first_after, 0);
  REL_CHECK_EQ(second_warnings, 0);
  REL_CHECK_EQ(second_info, 0);
  REL_CHECK_EQ(second_trace, 0);
  untrack_and_free(region);
  trim(who);
}

// ---- (g) Pools come back ------------------------------------------------------------------------------------

void pools_of_many_agents_come_back() {
  std::size_t failures = 0;
  for (std::uint64_t i = 0; i < 200; ++i) {
    const kreplay_agent_t who = agent(0x6000 + i);
    void* region = tracked_region(who, 4096);
    kreplay_staging_buffer_t buffer;
    std::memset(&buffer, 0, sizeof buffer);
    if (kreplay_staging_acquire(&buffer, who, 4096) != KREPLAY_STATUS_SUCCESS) {
      ++failures;
    }
    kreplay_staging_release(&buffer);
    kreplay_snapshot_t* snapshot = nullptr;
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    if (kreplay_snap(who, &snapshot, &reason) != KREPLAY_STATUS_SUCCESS) {
      if (failures++ < 3) {
        std::fprintf(stderr, "agent %llu: snapshot declined: %s\n", static_cast<unsigned long long>(i),
                     kreplay_decline_reason_string(reason));
      }
    }
    kreplay_snapshot_free(snapshot);
    untrack_and_free(region);
    trim(who);
  }
  std::printf("pools: 200 distinct agents in turn, %zu failures\n", failures);
  REL_CHECK_EQ(failures, 0);
}

// ---- (h) An acquire refused as INVALID_ARGUMENT leaves the buffer unchanged ---------------------------------

void refused_acquire_leaves_the_buffer_unchanged() {
  const kreplay_agent_t who = agent(0x88);
  kreplay_staging_buffer_t buffer, before;
  std::memset(&buffer, 0, sizeof buffer);
  REL_REQUIRE(kreplay_staging_acquire(&buffer, who, 100000) == KREPLAY_STATUS_SUCCESS);
  std::memset(buffer.data, 0x5A, buffer.size);
  before = buffer;
  // Sizes refused as INVALID_ARGUMENT: zero, and sizes whose mapping would exceed SIZE_MAX / 2 once rounded.
  const std::size_t sizes[] = {0, SIZE_MAX / 2, SIZE_MAX / 2 - 1, SIZE_MAX / 2 + 1, SIZE_MAX};
  for (std::size_t size : sizes) {
    REL_CHECK_STATUS(kreplay_staging_acquire(&buffer, who, size), KREPLAY_STATUS_INVALID_ARGUMENT);
    REL_CHECK(std::memcmp(&buffer, &before, sizeof buffer) == 0);
  }
  // Still lent: nothing went back to the pool, the bytes are ours, and it can be released once.
  REL_CHECK_EQ(kreplay_retained_staging_bytes(who), 0);
  REL_CHECK(static_cast<unsigned char*>(buffer.data)[buffer.size - 1] == 0x5A);
  kreplay_staging_release(&buffer);
  REL_CHECK(buffer.data == nullptr);
  REL_CHECK(kreplay_retained_staging_bytes(who) >= 100000);
  trim(who);
}

// ---- (i) Sizes are checked ----------------------------------------------------------------------------------

void sizes_are_checked() {
  const kreplay_agent_t who = agent(0x99);
  void* region = device_region(who, 4096);
  std::size_t mark = main_log.mark();
  REL_CHECK_STATUS(kreplay_record_alloc(region, 3 * 4096, 0), KREPLAY_STATUS_SUCCESS);
  RULE_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "only those are tracked");
  kreplay_inventory_stats_t stats;
  REL_REQUIRE(kreplay_inventory_stats(who, &stats) == KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats.bytes, 4096);
  kreplay_snapshot_t* snapshot = nullptr;
  REL_CHECK_STATUS(kreplay_snap(who, &snapshot, nullptr), KREPLAY_STATUS_SUCCESS);
  kreplay_snapshot_info_t info;
  std::memset(&info, 0, sizeof info);
  if (snapshot != nullptr) {
    REL_CHECK_STATUS(kreplay_snapshot_info(snapshot, &info), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_EQ(info.bytes, 4096);
    kreplay_restore_report_t report;
    REL_CHECK_STATUS(kreplay_restore(snapshot, &report), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_EQ(report.bytes, 4096);
  }
  kreplay_snapshot_free(snapshot);
  REL_CHECK_EQ(rel_counters().violations, 0);

  // A module variable whose address + size wraps: declined, and never handed to copy.
  hooks.extra_variable_address = UINTPTR_MAX - 4095;
  hooks.extra_variable_size = 8192;
  hooks.extra_variable.store(true);
  hooks.watched_copies.store(0);
  hooks.watch_lo.store(UINTPTR_MAX - 4095);
  hooks.watch_hi.store(UINTPTR_MAX);
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  snapshot = nullptr;
  REL_CHECK_STATUS(kreplay_snap(who, &snapshot, &reason), KREPLAY_STATUS_DECLINED);
  REL_CHECK(reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE);
  REL_CHECK(snapshot == nullptr);
  REL_CHECK_EQ(hooks.watched_copies.load(), 0);
  hooks.extra_variable.store(false);
  hooks.watch_hi.store(0);
  REL_CHECK_EQ(kreplay_retained_staging_bytes(who), 0);
  untrack_and_free(region);
  trim(who);
}

// ---- (j) A decline at the live-snapshot limit leaves nothing retained ---------------------------------------

void decline_at_the_snapshot_limit_retains_nothing() {
  enum { kAgents = 16, kLimit = 1024 };
  std::vector<void*> regions;
  std::vector<kreplay_snapshot_t*> live;
  for (int a = 0; a < kAgents; ++a) {
    regions.push_back(tracked_region(agent(0x7000 + a), 256));
  }
  kreplay_status_t status = KREPLAY_STATUS_SUCCESS;
  for (int i = 0; i < 2 * kLimit && status == KREPLAY_STATUS_SUCCESS; ++i) {
    kreplay_snapshot_t* snapshot = nullptr;
    status = kreplay_snap(agent(0x7000 + i % kAgents), &snapshot, nullptr);
    if (status == KREPLAY_STATUS_SUCCESS) {
      live.push_back(snapshot);
    }
  }
  std::printf("live snapshots: %zu before the limit declined one\n", live.size());
  REL_CHECK_EQ(live.size(), kLimit);
  // One more, of an agent whose pool held nothing before.
  const kreplay_agent_t late = agent(0x7FFF);
  void* region = tracked_region(late, 64 << 10);
  std::size_t mark = main_log.mark();
  kreplay_snapshot_t* snapshot = nullptr;
  REL_CHECK_STATUS(kreplay_snap(late, &snapshot, nullptr), KREPLAY_STATUS_DECLINED);
  RULE_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "snapshots are alive already");
  REL_CHECK_EQ(kreplay_retained_staging_bytes(late), 0);
  REL_CHECK_EQ(kreplay_retained_device_bytes(late), 0);
  for (kreplay_snapshot_t* handle : live) {
    kreplay_snapshot_free(handle);
  }
  untrack_and_free(region);
  trim(late);
  for (int a = 0; a < kAgents; ++a) {
    untrack_and_free(regions[a]);
    trim(agent(0x7000 + a));
  }
}

// ---- (k) Ops lifetime: storage locked through one set is unlocked through it ---------------------------------

void storage_is_unlocked_through_the_ops_that_locked_it() {
  if (sim_ops.host_lock == nullptr) {
    std::printf("reconfigure: the simulated device has no host_lock; skipped\n");
    return;
  }
  const kreplay_agent_t who = agent(0xE7);
  kreplay_policy_t policy;
  std::memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.pin_staging = true;
  REL_REQUIRE(kreplay_set_policy(&policy) == KREPLAY_STATUS_SUCCESS);
  OpsSet* first = configure_wrapped(1);
  void* region = tracked_region(who, 256 << 10);
  kreplay_snapshot_t* snapshot = nullptr;
  REL_CHECK_STATUS(kreplay_snap(who, &snapshot, nullptr), KREPLAY_STATUS_SUCCESS);
  kreplay_snapshot_free(snapshot);  // its staging stays retained, page-locked through set 1
  REL_CHECK(first->locks.load() > 0);
  REL_CHECK(kreplay_retained_staging_bytes(who) > 0);
  OpsSet* second = configure_wrapped(2);
  REL_CHECK_EQ(first->releases.load(), 0);  // still used by locked storage
  kreplay_staging_trim(who);
  std::printf("reconfigure: set 1 locked %zu and unlocked %zu ranges, set 2 unlocked %zu; set 1 released %zu time(s)\n",
              first->locks.load(), first->unlocks.load(), second->unlocks.load(), first->releases.load());
  REL_CHECK_EQ(first->unlocks.load(), first->locks.load());
  REL_CHECK_EQ(second->unlocks.load(), 0);
  REL_CHECK_EQ(first->releases.load(), 1);
  REL_CHECK(first->release_seq.load() > first->last_unlock_seq.load());
  REL_CHECK_EQ(second->releases.load(), 0);
  policy.pin_staging = false;
  REL_REQUIRE(kreplay_set_policy(&policy) == KREPLAY_STATUS_SUCCESS);
  untrack_and_free(region);
  trim(who);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  install_main_log();
  REL_REQUIRE(kreplay_sim_device_ops(&sim_ops) == KREPLAY_STATUS_SUCCESS);
  const kreplay_host_memory_stats_t start = rel_host_memory();
  configure_wrapped(0);
  kreplay_tracking_enable(true);

  // Usage: kreplay_reliability_rules [letter...]: only the rules named (a b c d f g h i j k), in that order.
  const struct {
    char letter;
    void (*run)();
  } rules[] = {
      {'a', frees_wait_only_for_their_own_region},
      {'b', tracking_off_during_record_alloc_inserts_nothing},
      {'c', snapshot_info_and_free_race_restores},
      {'d', reentry_never_deadlocks},
      {'f', logger_swap_is_complete_when_it_returns},
      {'g', pools_of_many_agents_come_back},
      {'h', refused_acquire_leaves_the_buffer_unchanged},
      {'i', sizes_are_checked},
      {'j', decline_at_the_snapshot_limit_retains_nothing},
      {'k', storage_is_unlocked_through_the_ops_that_locked_it},
  };
  for (const auto& rule : rules) {
    bool wanted = argc < 2;
    for (int i = 1; i < argc; ++i) {
      wanted = wanted || argv[i][0] == rule.letter;
    }
    if (wanted) {
      int before = rel_failures;
      rule.run();
      std::printf("rule (%c): %s\n", rule.letter, rel_failures == before && !thread_failed.load() ? "passed" : "FAILED");
    }
  }

  const kreplay_agent_t none = agent(0);
  REL_CHECK_NO_LEAKS(start, &none, 1);
  if (thread_failed.load()) {
    ++rel_failures;
  }
  return rel_finish("kreplay_reliability_rules");
}
