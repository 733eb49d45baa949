// The finalize rule of API.md, "Concurrency, lifetimes and re-entry", in a process of its own (finalize cannot
// be undone): after kreplay_finalize returns, no device op and no logger is called again, although a snapshot
// and a restore were in flight on other threads when it was called, and although calls keep coming.
// With the argument `inside`, finalize is called from inside a device op instead (re-entry): it must return
// without waiting for its own thread, and the call it was made from must end (a watchdog fails a hang).
#include "reliability.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace {

kreplay_device_ops_t sim_ops;
std::atomic<bool> finalize_returned{false};
std::atomic<std::size_t> ops_calls{0}, ops_after{0}, log_calls{0}, log_after{0};

void count_op() {
  ops_calls.fetch_add(1);
  if (finalize_returned.load()) {
    ops_after.fetch_add(1);
  }
}

kreplay_status_t slow_copy(void*, void* dst, const void* src, std::size_t bytes) {
  count_op();
  // Slow copies keep captures and restores in flight when finalize is called.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kreplay_status_t status = sim_ops.copy(sim_ops.user_data, dst, src, bytes);
  count_op();
  return status;
}

kreplay_status_t counted_pointer_info(void*, const void* ptr, kreplay_pointer_info_t* info) {
  count_op();
  return sim_ops.pointer_info(sim_ops.user_data, ptr, info);
}

kreplay_status_t counted_iterate(void*, kreplay_agent_t agent, kreplay_module_variable_visitor_t visit, void* data) {
  count_op();
  return sim_ops.iterate_module_variables(sim_ops.user_data, agent, visit, data);
}

void counting_logger(void*, kreplay_log_level_t, const char*, std::size_t) {
  log_calls.fetch_add(1);
  if (finalize_returned.load()) {
    log_after.fetch_add(1);
  }
}

std::atomic<int> inner_finalize_state{0};  // 1: called, 2: returned

kreplay_status_t finalizing_copy(void*, void* dst, const void* src, std::size_t bytes) {
  int expected = 0;
  if (inner_finalize_state.compare_exchange_strong(expected, 1)) {
    kreplay_finalize();
    inner_finalize_state.store(2);
  }
  count_op();
  return sim_ops.copy(sim_ops.user_data, dst, src, bytes);
}

int finalize_from_inside_a_copy() {
  kreplay_set_logger(counting_logger, nullptr, KREPLAY_LOG_TRACE);
  REL_REQUIRE(kreplay_sim_device_ops(&sim_ops) == KREPLAY_STATUS_SUCCESS);
  kreplay_device_ops_t ops = sim_ops;
  ops.copy = finalizing_copy;
  ops.copy_batch = nullptr;
  REL_REQUIRE(kreplay_configure(&ops) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);
  kreplay_agent_t who = {0x53};
  for (int i = 0; i < 4; ++i) {
    void* region = nullptr;
    REL_REQUIRE(kreplay_sim_alloc(who, 4096, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &region) ==
                KREPLAY_STATUS_SUCCESS);
    REL_REQUIRE(kreplay_record_alloc(region, 4096, 0) == KREPLAY_STATUS_SUCCESS);
  }
  std::atomic<bool> done{false};
  kreplay_status_t status = KREPLAY_STATUS_INTERNAL_ERROR;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  std::thread caller([&] {
    kreplay_snapshot_t* snapshot = nullptr;
    status = kreplay_snap(who, &snapshot, &reason);
    kreplay_snapshot_free(snapshot);
    done.store(true);
  });
  auto start = std::chrono::steady_clock::now();
  while (!done.load()) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) {
      std::fprintf(stderr, "kreplay_finalize from inside a copy: still running after 20 s: a hang\n");
      std::fflush(stderr);
      std::_Exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  caller.join();
  finalize_returned.store(true);
  std::printf("finalize from inside a copy: returned (%d); the snapshot it was called from: %s (%s); %zu ops "
              "before\n",
              inner_finalize_state.load(), kreplay_status_string(status), kreplay_decline_reason_string(reason),
              ops_calls.load());
  REL_CHECK(inner_finalize_state.load() == 2);
  REL_CHECK(status == KREPLAY_STATUS_SUCCESS || status == KREPLAY_STATUS_DECLINED);
  kreplay_snapshot_t* snapshot = nullptr;
  REL_CHECK_STATUS(kreplay_snap(who, &snapshot, &reason), KREPLAY_STATUS_DECLINED);
  REL_CHECK(reason == KREPLAY_DECLINE_FINALIZED);
  (void)kreplay_staging_acquire(nullptr, who, 64);
  REL_CHECK_EQ(ops_after.load(), 0);
  REL_CHECK_EQ(log_after.load(), 0);
  return rel_finish("kreplay_reliability_rules_finalize inside");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "inside") == 0) {
    return finalize_from_inside_a_copy();
  }
  kreplay_set_logger(counting_logger, nullptr, KREPLAY_LOG_TRACE);
  REL_REQUIRE(kreplay_sim_device_ops(&sim_ops) == KREPLAY_STATUS_SUCCESS);
  kreplay_device_ops_t ops;
  std::memset(&ops, 0, sizeof ops);
  ops.struct_size = sizeof ops;
  ops.copy = slow_copy;
  ops.pointer_info = counted_pointer_info;
  ops.iterate_module_variables = counted_iterate;
  REL_REQUIRE(kreplay_configure(&ops) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  kreplay_agent_t agents[2] = {{0x51}, {0x52}};
  std::vector<void*> regions;
  for (kreplay_agent_t who : agents) {
    for (int i = 0; i < 16; ++i) {
      void* region = nullptr;
      REL_REQUIRE(kreplay_sim_alloc(who, 4096, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &region) ==
                  KREPLAY_STATUS_SUCCESS);
      REL_REQUIRE(kreplay_record_alloc(region, 4096, 0) == KREPLAY_STATUS_SUCCESS);
      regions.push_back(region);
    }
  }
  kreplay_snapshot_t* restored = nullptr;
  REL_REQUIRE(kreplay_snap(agents[1], &restored, nullptr) == KREPLAY_STATUS_SUCCESS);

  std::atomic<bool> stop{false};
  std::atomic<std::size_t> snaps{0}, restores{0};
  // One thread snapshots agent 0 over and over, one restores agent 1's snapshot, one records allocations and
  // logs: at any moment a call is in flight, with 16 copies of 5 ms each ahead of it.
  std::thread snapper([&] {
    while (!stop.load()) {
      kreplay_snapshot_t* snapshot = nullptr;
      if (kreplay_snap(agents[0], &snapshot, nullptr) == KREPLAY_STATUS_SUCCESS) {
        snaps.fetch_add(1);
      }
      kreplay_snapshot_free(snapshot);
    }
  });
  std::thread restorer([&] {
    while (!stop.load()) {
      if (kreplay_restore(restored, nullptr) == KREPLAY_STATUS_SUCCESS) {
        restores.fetch_add(1);
      }
    }
  });
  std::thread recorder([&] {
    while (!stop.load()) {
      (void)kreplay_record_alloc(regions[0], 4096, 0);  // a warning: replaces a tracked region
      (void)kreplay_staging_acquire(nullptr, agents[0], 64);  // a warning from the C boundary itself
      kreplay_snapshot_free(reinterpret_cast<kreplay_snapshot_t*>(0x1234));  // an error from the C boundary
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  std::size_t ops_before = ops_calls.load();
  auto start = std::chrono::steady_clock::now();
  kreplay_finalize();
  double waited = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  finalize_returned.store(true);
  // Calls keep coming for a while after finalize: they must do nothing.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stop.store(true);
  snapper.join();
  restorer.join();
  recorder.join();
  kreplay_snapshot_free(restored);
  kreplay_set_logger(counting_logger, nullptr, KREPLAY_LOG_TRACE);
  (void)kreplay_staging_acquire(nullptr, agents[0], 64);
  std::printf("finalize waited %.1f ms; before it: %zu device op calls, %zu snapshots, %zu restores, %zu log lines; "
              "after it returned: %zu device op calls, %zu log lines\n",
              waited, ops_before, snaps.load(), restores.load(), log_calls.load() - log_after.load(),
              ops_after.load(), log_after.load());
  REL_CHECK(ops_before > 0);
  REL_CHECK(snaps.load() > 0 || restores.load() > 0);
  REL_CHECK_EQ(ops_after.load(), 0);
  REL_CHECK_EQ(log_after.load(), 0);
  return rel_finish("kreplay_reliability_rules_finalize");
}
