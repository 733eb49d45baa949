// Fault injection through the HSA adapter, on the fake ROCr of c-tests/hsa (reused, not copied): every
// hsa_memory_copy of a snapshot and of a restore fails in turn, every symbol query of the module scan fails in
// turn, each executable's symbol iteration fails, pointer queries fail during allocation, a free fails, and
// page-locking is refused -- first with ops that have no copy_batch (a table without
// hsa_amd_memory_async_copy), so that every copy is one hsa_memory_copy. Then with copy_batch: every async copy
// fails in turn (at submission and at completion), alone (kreplay redoes the batch copy by copy: nothing is
// lost) and together with the first copy of that redo (declined, or exactly one range reported failed), and
// completion signals cannot be created. The same promises as on the simulated device: complete or declined
// (never a snapshot missing a variable), device memory untouched by a declined snapshot, restore failures
// reported with every other range written, nothing locked, mapped or signalled left behind.
#include "fake_hsa.hpp"

#include <cstring>
#include <vector>

namespace {

int failures = 0;

#define CHECK(condition)                                                                   \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);   \
      ++failures;                                                                          \
    }                                                                                      \
  } while (0)

CoreApiTable live_core;
AmdExtTable live_amd;

// The fake's own entries, wrapped by the faults below in the copies handed to configure().
decltype(CoreApiTable::hsa_memory_copy_fn) real_copy;
decltype(AmdExtTable::hsa_amd_memory_lock_fn) real_lock;

int warnings_logged = 0;
int errors_logged = 0;

// Counts instead of printing: this test provokes hundreds of warnings on purpose.
void count_messages(kreplay_log_level_t level, const char* /*message*/, std::size_t /*length*/) {
  if (level == KREPLAY_LOG_ERROR) ++errors_logged;
  if (level == KREPLAY_LOG_WARNING) ++warnings_logged;
}

int copies_since_armed = 0;
int fail_copy_at = 0;     // the k-th hsa_memory_copy from arming fails (0: none)
bool refuse_lock = false;

hsa_status_t faulty_copy(void* dst, const void* src, std::size_t size) {
  if (fail_copy_at != 0 && ++copies_since_armed == fail_copy_at) {
    return HSA_STATUS_ERROR;
  }
  return real_copy(dst, src, size);
}

hsa_status_t faulty_lock(void* host_ptr, std::size_t size, hsa_agent_t* agents, int num_agent, void** agent_ptr) {
  if (refuse_lock) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  return real_lock(host_ptr, size, agents, num_agent, agent_ptr);
}

void arm_copy_fault(int k) {
  copies_since_armed = 0;
  fail_copy_at = k;
}

struct range_t {
  unsigned char* address;
  std::size_t size;
};

std::vector<std::vector<unsigned char>> image(const std::vector<range_t>& ranges) {
  std::vector<std::vector<unsigned char>> bytes;
  for (const range_t& r : ranges) bytes.emplace_back(r.address, r.address + r.size);
  return bytes;
}

std::size_t differences(const std::vector<range_t>& ranges, const std::vector<std::vector<unsigned char>>& bytes) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (std::memcmp(ranges[i].address, bytes[i].data(), ranges[i].size) != 0) ++n;
  }
  return n;
}

void fill(const std::vector<range_t>& ranges, unsigned seed) {
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    for (std::size_t j = 0; j < ranges[i].size; ++j) {
      ranges[i].address[j] = static_cast<unsigned char>(seed * 131u + i * 31u + j * 7u);
    }
  }
}

kreplay_status_t snap(hsa_agent_t agent, kreplay_snapshot_t** snapshot, kreplay_decline_reason_t* reason) {
  *snapshot = nullptr;
  *reason = KREPLAY_DECLINE_NONE;
  return kreplay_snap(fake::k(agent), snapshot, reason);
}

}  // namespace

int main() {
  fake::reset(0x7E000000);
  fake::fill_tables(&live_core, &live_amd);
  CoreApiTable captured_core = live_core;
  AmdExtTable captured_amd = live_amd;
  real_copy = captured_core.hsa_memory_copy_fn;
  real_lock = captured_amd.hsa_amd_memory_lock_fn;
  captured_core.hsa_memory_copy_fn = &faulty_copy;
  captured_amd.hsa_amd_memory_lock_fn = &faulty_lock;
  AmdExtTable unbatched_amd = captured_amd;
  unbatched_amd.hsa_amd_memory_async_copy_fn = nullptr;
  const hsa_agent_t gpu = fake::agents.gpu;
  const std::size_t exe = fake::add_standard_executable(gpu, "_x");
  const std::size_t exe2 = fake::add_standard_executable(gpu, "_y");

  kreplay_host_memory_stats_t start{};
  CHECK(kreplay_host_memory_stats(&start) == KREPLAY_STATUS_SUCCESS);
  kreplay::hsa::set_log_sink(count_messages, KREPLAY_LOG_WARNING);
  HSA_TEST_CHECK(kreplay::hsa::install(&live_core, &live_amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &unbatched_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  // Three tracked allocations and, per executable, counter (64), lut (32) and flaky (16).
  std::vector<range_t> ranges;
  for (std::size_t size : {std::size_t{4096}, std::size_t{100}, std::size_t{70000}}) {
    void* ptr = nullptr;
    HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_allocate_fn(fake::pools.gpu_coarse, size, 0, &ptr) ==
                   HSA_STATUS_SUCCESS);
    ranges.push_back({static_cast<unsigned char*>(ptr), size});
  }
  for (std::size_t e : {exe, exe2}) {
    for (const char* name : {"counter", "lut", "flaky"}) {
      fake::symbol_t& s = fake::symbol(e, std::string(name) + (e == exe ? "_x" : "_y"));
      ranges.push_back({static_cast<unsigned char*>(s.address), s.size});
    }
  }
  const int n = static_cast<int>(ranges.size());
  std::size_t total = 0;
  for (const range_t& r : ranges) total += r.size;

  // ---- Each copy of a snapshot fails in turn, with pinned staging. ----
  kreplay_policy_t policy{};
  policy.struct_size = sizeof policy;
  policy.pin_staging = true;
  CHECK(kreplay_set_policy(&policy) == KREPLAY_STATUS_SUCCESS);
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  for (int k = 1; k <= n + 1; ++k) {
    fill(ranges, static_cast<unsigned>(k));
    const auto before = image(ranges);
    arm_copy_fault(k);
    const kreplay_status_t status = snap(gpu, &snapshot, &reason);
    arm_copy_fault(0);
    CHECK(differences(ranges, before) == 0);
    CHECK(kreplay_retained_staging_bytes(fake::k(gpu)) == 0);
    if (k <= n) {
      CHECK(status == KREPLAY_STATUS_DECLINED && snapshot == nullptr && reason == KREPLAY_DECLINE_COPY_FAILED);
      CHECK(fake::state.locked_ranges == 0);  // the declined snapshot's pinned staging was unlocked and unmapped
    } else {
      CHECK(status == KREPLAY_STATUS_SUCCESS && snapshot != nullptr);
    }
  }
  kreplay_snapshot_info_t info{};
  CHECK(kreplay_snapshot_info(snapshot, &info) == KREPLAY_STATUS_SUCCESS);
  CHECK(info.regions == 3 && info.module_variables == 6 && info.bytes == total);
  const auto captured = image(ranges);

  // ---- Each copy of a restore fails in turn: reported, and every other range written. ----
  for (int k = 1; k <= n; ++k) {
    fill(ranges, 100u + static_cast<unsigned>(k));
    const auto scribbled = image(ranges);
    arm_copy_fault(k);
    kreplay_restore_report_t report{};
    CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_PARTIAL_RESTORE);
    arm_copy_fault(0);
    CHECK(report.failed == 1 && report.restored == static_cast<std::size_t>(n - 1) && report.skipped == 0);
    CHECK(errors_logged >= k);
    CHECK(differences(ranges, captured) == 1);
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      if (std::memcmp(ranges[i].address, captured[i].data(), ranges[i].size) != 0) {
        CHECK(std::memcmp(ranges[i].address, scribbled[i].data(), ranges[i].size) == 0);
      }
    }
  }
  kreplay_restore_report_t report{};
  CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS);
  CHECK(differences(ranges, captured) == 0);
  kreplay_snapshot_free(snapshot);

  // ---- Each symbol query of the module scan fails in turn: declined, or complete; never short a variable. ----
  static const hsa_executable_symbol_info_t attributes[] = {
      HSA_EXECUTABLE_SYMBOL_INFO_TYPE,          HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH,
      HSA_EXECUTABLE_SYMBOL_INFO_NAME,          HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
      HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SEGMENT,
      HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST};
  int scan_declines = 0, scan_completes = 0;
  for (std::size_t e : {exe, exe2}) {
    for (fake::symbol_t& symbol : fake::executables[e].symbols) {
      for (hsa_executable_symbol_info_t attribute : attributes) {
        symbol.fail_attribute = static_cast<int>(attribute);
        fill(ranges, 7u);
        const auto before = image(ranges);
        const int copies = fake::state.copy_calls;
        const kreplay_status_t status = snap(gpu, &snapshot, &reason);
        symbol.fail_attribute = -1;
        if (status == KREPLAY_STATUS_SUCCESS) {
          ++scan_completes;
          CHECK(kreplay_snapshot_info(snapshot, &info) == KREPLAY_STATUS_SUCCESS);
          CHECK(info.module_variables == 6 && info.regions == 3);
          kreplay_snapshot_free(snapshot);
        } else {
          ++scan_declines;
          CHECK(status == KREPLAY_STATUS_DECLINED && reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE);
          CHECK(fake::state.copy_calls == copies);  // declined before any copy
          CHECK(differences(ranges, before) == 0);
        }
        // The queries a captured variable cannot do without.
        const bool needed = symbol.kind == HSA_SYMBOL_KIND_VARIABLE && symbol.size > 1 &&
                            (attribute == HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS ||
                             attribute == HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE);
        if (needed) CHECK(status == KREPLAY_STATUS_DECLINED);
      }
    }
    fake::executables[e].fail_iteration = true;
    CHECK(snap(gpu, &snapshot, &reason) == KREPLAY_STATUS_DECLINED);
    CHECK(reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE);
    fake::executables[e].fail_iteration = false;
  }
  std::printf("module scan faults: %d declined, %d complete (queries the adapter does not make)\n", scan_declines,
              scan_completes);
  CHECK(warnings_logged >= scan_declines);
  // The fake's 12 symbols (10 variables, 2 kernels) answer 7 queries each; every failed query of a variable
  // declines (10 x 7 = 70, plus the kind query of the 2 kernels), and the 12 variable-only queries of the
  // kernels are never made, so those snapshots complete.
  CHECK(scan_declines == 72);
  CHECK(scan_completes == 12);

  // ---- Pointer queries fail while allocating: declined until that allocation is freed. ----
  fake::state.fail_pointer_info = true;
  void* lost = nullptr;
  CHECK(live_amd.hsa_amd_memory_pool_allocate_fn(fake::pools.gpu_coarse, 512, 0, &lost) == HSA_STATUS_SUCCESS);
  fake::state.fail_pointer_info = false;
  CHECK(snap(gpu, &snapshot, &reason) == KREPLAY_STATUS_DECLINED);
  CHECK(reason == KREPLAY_DECLINE_INVENTORY_OVERFLOW);
  CHECK(snap(fake::agents.gpu2, &snapshot, &reason) == KREPLAY_STATUS_DECLINED);  // owner unknown: every agent
  CHECK(live_amd.hsa_amd_memory_pool_free_fn(lost) == HSA_STATUS_SUCCESS);
  CHECK(snap(gpu, &snapshot, &reason) == KREPLAY_STATUS_SUCCESS);
  kreplay_snapshot_free(snapshot);

  // ---- A free fails: the allocation is still live, so it stays tracked and snapshotted. ----
  const kreplay_inventory_stats_t tracked_before = fake::stats(gpu);
  fake::state.fail_next_frees = 1;
  CHECK(live_amd.hsa_amd_memory_pool_free_fn(ranges[1].address) != HSA_STATUS_SUCCESS);
  CHECK(fake::stats(gpu).regions == tracked_before.regions);
  fill(ranges, 9u);
  const auto again = image(ranges);
  CHECK(snap(gpu, &snapshot, &reason) == KREPLAY_STATUS_SUCCESS);
  CHECK(kreplay_snapshot_info(snapshot, &info) == KREPLAY_STATUS_SUCCESS);
  CHECK(info.regions == 3);
  fill(ranges, 10u);
  CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS);
  CHECK(report.restored == static_cast<std::size_t>(n) && differences(ranges, again) == 0);
  kreplay_snapshot_free(snapshot);

  // ---- Page-locking refused: still complete, on pageable staging; then locked once, unlocked once. ----
  kreplay_staging_trim(fake::k(gpu));
  refuse_lock = true;
  const int locks_before = fake::state.lock_calls;
  CHECK(snap(gpu, &snapshot, &reason) == KREPLAY_STATUS_SUCCESS);
  CHECK(fake::state.lock_calls == locks_before);
  kreplay_snapshot_free(snapshot);
  refuse_lock = false;
  CHECK(snap(gpu, &snapshot, &reason) == KREPLAY_STATUS_SUCCESS);
  CHECK(fake::state.lock_calls == locks_before + 1 && fake::state.locked_ranges == 1);
  kreplay_snapshot_free(snapshot);
  kreplay_staging_trim(fake::k(gpu));
  kreplay_staging_trim(fake::k(fake::agents.gpu2));
  CHECK(fake::state.locked_ranges == 0);
  CHECK(fake::state.unlock_calls == fake::state.lock_calls);

  // ---- With copy_batch (hsa_amd_memory_async_copy) and pinned staging. ----
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  CHECK(kreplay_set_policy(&policy) == KREPLAY_STATUS_SUCCESS);
  fill(ranges, 20u);
  const int async_start = fake::state.async_copy_calls;
  CHECK(snap(gpu, &snapshot, &reason) == KREPLAY_STATUS_SUCCESS);
  const auto batched = image(ranges);
  kreplay_snapshot_free(snapshot);
  const int async_per_capture = fake::state.async_copy_calls - async_start;
  CHECK(async_per_capture == n);  // every copy on the engines once the staging is pinned
  // Each async copy of a capture fails in turn, refused at submission or completed with an error: kreplay
  // redoes the batch with hsa_memory_copy and the capture is complete; when the redo's first copy fails too,
  // it is declined with nothing written to device memory.
  int redone = 0;
  for (int k = 1; k <= n; ++k) {
    for (int at_completion = 0; at_completion < 2; ++at_completion) {
      for (int redo_fails = 0; redo_fails < 2; ++redo_fails) {
        fill(ranges, 30u + static_cast<unsigned>(k));
        const auto before = image(ranges);
        (at_completion != 0 ? fake::state.fault_async_copy_at : fake::state.fail_async_submit_at) =
            fake::state.async_copy_calls + k;
        const int sync_before = fake::state.copy_calls;
        arm_copy_fault(redo_fails != 0 ? 1 : 0);
        const kreplay_status_t status = snap(gpu, &snapshot, &reason);
        arm_copy_fault(0);
        fake::state.fault_async_copy_at = 0;
        fake::state.fail_async_submit_at = 0;
        CHECK(differences(ranges, before) == 0);
        CHECK(fake::state.signal_misuse == 0 && fake::pending_async_copies() == 0);
        if (fake::state.copy_calls > sync_before) ++redone;
        if (redo_fails != 0) {
          CHECK(status == KREPLAY_STATUS_DECLINED && reason == KREPLAY_DECLINE_COPY_FAILED);
          continue;
        }
        CHECK(status == KREPLAY_STATUS_SUCCESS);
        if (status != KREPLAY_STATUS_SUCCESS) continue;
        // Complete: its restore brings back exactly what was there at capture.
        fill(ranges, 60u);
        kreplay_restore_report_t complete{};
        CHECK(kreplay_restore(snapshot, &complete) == KREPLAY_STATUS_SUCCESS);
        CHECK(differences(ranges, before) == 0);
        kreplay_snapshot_free(snapshot);
      }
    }
  }
  CHECK(redone == 4 * n);  // every fault was followed by a redo through hsa_memory_copy
  // Each async copy of a restore fails in turn: redone, nothing lost; with the redo's first copy failing as
  // well, exactly one range is reported failed and every other is written.
  fill(ranges, 20u);
  CHECK(snap(gpu, &snapshot, &reason) == KREPLAY_STATUS_SUCCESS);
  for (int k = 1; k <= n; ++k) {
    for (int redo_fails = 0; redo_fails < 2; ++redo_fails) {
      fill(ranges, 70u + static_cast<unsigned>(k));
      fake::state.fault_async_copy_at = fake::state.async_copy_calls + k;
      arm_copy_fault(redo_fails != 0 ? 1 : 0);
      kreplay_restore_report_t partial{};
      const kreplay_status_t status = kreplay_restore(snapshot, &partial);
      arm_copy_fault(0);
      fake::state.fault_async_copy_at = 0;
      CHECK(fake::state.signal_misuse == 0 && fake::pending_async_copies() == 0);
      if (redo_fails != 0) {
        CHECK(status == KREPLAY_STATUS_PARTIAL_RESTORE);
        CHECK(partial.failed == 1 && partial.restored == static_cast<std::size_t>(n - 1));
        // The range whose redo failed may already hold its contents from the batch (copies before the faulty
        // one completed): at most that one differs.
        CHECK(differences(ranges, batched) <= 1);
      } else {
        CHECK(status == KREPLAY_STATUS_SUCCESS && partial.failed == 0);
        CHECK(differences(ranges, batched) == 0);
      }
    }
  }
  kreplay_snapshot_free(snapshot);
  // No completion signal to be had (a fresh set of ops, whose pool is empty): every copy through
  // hsa_memory_copy, nothing lost.
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  fake::state.signal_create_budget = 0;
  fill(ranges, 80u);
  const auto unsignalled = image(ranges);
  const int async_before_refusal = fake::state.async_copy_calls;
  CHECK(snap(gpu, &snapshot, &reason) == KREPLAY_STATUS_SUCCESS);
  fill(ranges, 81u);
  CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS);
  CHECK(differences(ranges, unsignalled) == 0);
  CHECK(fake::state.async_copy_calls == async_before_refusal);
  kreplay_snapshot_free(snapshot);
  fake::state.signal_create_budget = -1;
  std::printf("batched copy faults: %d redone through hsa_memory_copy\n", redone);
  kreplay_staging_trim(fake::k(gpu));
  CHECK(fake::state.locked_ranges == 0);
  CHECK(fake::state.unlock_calls == fake::state.lock_calls);

  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(live_amd.hsa_amd_memory_pool_free_fn(ranges[i].address) == HSA_STATUS_SUCCESS);
  }
  CHECK(fake::stats(gpu).regions == 0);
  kreplay_host_memory_stats_t end{};
  CHECK(kreplay_host_memory_stats(&end) == KREPLAY_STATUS_SUCCESS);
  CHECK(end.mapped_bytes == start.mapped_bytes);
  CHECK(end.maps - start.maps == end.unmaps - start.unmaps);
  kreplay::hsa::finalize();
  if (failures != 0) {
    std::fprintf(stderr, "kreplay_reliability_hsa_fault_injection: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("kreplay_reliability_hsa_fault_injection: all checks passed\n");
  return 0;
}
