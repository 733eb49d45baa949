// Snapshot and restore end to end through the adapter: allocations made through the wrapped tables and the
// module-scope variables of the loaded executables (found through the AMD loader extension) are captured (with
// copy_batch on the DMA engines where kreplay batches, else hsa_memory_copy), mutated as a kernel would, and
// written back; pinned staging goes through hsa_amd_memory_lock/unlock for all agents and is unlocked again.
#include "fake_hsa.hpp"

#include <cstring>

namespace {

CoreApiTable live_core;
AmdExtTable live_amd;

void* pool_alloc(hsa_amd_memory_pool_t pool, std::size_t size) {
  void* ptr = nullptr;
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_allocate_fn(pool, size, 0, &ptr) == HSA_STATUS_SUCCESS);
  return ptr;
}

void fill(void* ptr, std::size_t size, unsigned char seed) {
  auto* bytes = static_cast<unsigned char*>(ptr);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(seed + i * 7);
}

bool holds(const void* ptr, std::size_t size, unsigned char seed) {
  const auto* bytes = static_cast<const unsigned char*>(ptr);
  for (std::size_t i = 0; i < size; ++i) {
    if (bytes[i] != static_cast<unsigned char>(seed + i * 7)) return false;
  }
  return true;
}

kreplay_snapshot_t* snap(hsa_agent_t agent) {
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NOT_CONFIGURED;
  HSA_TEST_CHECK(kreplay_snap(fake::k(agent), &snapshot, &reason) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(snapshot != nullptr && reason == KREPLAY_DECLINE_NONE);
  return snapshot;
}

}  // namespace

int main() {
  fake::reset(0x53000000);
  fake::fill_tables(&live_core, &live_amd);
  const CoreApiTable captured_core = live_core;
  const AmdExtTable captured_amd = live_amd;
  const hsa_agent_t gpu = fake::agents.gpu;
  const hsa_agent_t gpu2 = fake::agents.gpu2;
  const std::size_t exe = fake::add_standard_executable(gpu, "_a");
  const std::size_t exe2 = fake::add_standard_executable(gpu2, "_b");

  HSA_TEST_CHECK(kreplay::hsa::install(&live_core, &live_amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  // No options: the executables come from the loader extension, through the captured core table.
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  kreplay_policy_t policy{};
  policy.struct_size = sizeof policy;
  policy.pin_staging = true;
  HSA_TEST_CHECK(kreplay_set_policy(&policy) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  void* input = pool_alloc(fake::pools.gpu_coarse, 4096);
  void* output = nullptr;
  HSA_TEST_CHECK(live_core.hsa_memory_allocate_fn(fake::gpu_region, 1000, &output) == HSA_STATUS_SUCCESS);
  void* scratch_fine = pool_alloc(fake::pools.gpu_fine, 256);  // not tracked: not restored
  fill(input, 4096, 1);
  fill(output, 1000, 2);
  fill(scratch_fine, 256, 3);
  fake::symbol_t& counter = fake::symbol(exe, "counter_a");
  fake::symbol_t& lut = fake::symbol(exe, "lut_a");
  fake::symbol_t& cuid = fake::symbol(exe, "__hip_cuid__a");
  fake::symbol_t& flaky = fake::symbol(exe, "flaky_a");
  fill(counter.address, counter.size, 4);
  fill(lut.address, lut.size, 5);  // constant memory, filled after load
  fill(cuid.address, 1, 6);
  fill(flaky.address, flaky.size, 7);

  const int copies_before = fake::state.copy_calls + fake::state.async_copies_done;
  kreplay_snapshot_t* snapshot = snap(gpu);
  kreplay_snapshot_info_t info{};
  HSA_TEST_CHECK(kreplay_snapshot_info(snapshot, &info) == KREPLAY_STATUS_SUCCESS);
  // Two tracked allocations; counter, lut and flaky (the kernel symbol, the __hip_cuid_ marker, the zero-size
  // variable and the other GPU's executable are left out).
  HSA_TEST_CHECK(info.regions == 2);
  HSA_TEST_CHECK(info.module_variables == 3);
  HSA_TEST_CHECK(info.bytes == 4096 + 1000 + 64 + 32 + 16);
  // One copy per range, on the DMA engines (copy_batch, staging pinned) or through hsa_memory_copy; never a
  // signal shared in flight, an agent that does not own its side, or pageable memory handed to the engines.
  HSA_TEST_CHECK(fake::state.copy_calls + fake::state.async_copies_done - copies_before == 5);
  HSA_TEST_CHECK(fake::state.signal_misuse == 0 && fake::state.async_bad_agent == 0);
  HSA_TEST_CHECK(fake::state.async_pageable == 0 && fake::pending_async_copies() == 0);
  // The destroyed executable's zero handle was reported by the loader and skipped, not fatal.
  HSA_TEST_CHECK(fake::state.null_executables_reported >= 1);
  HSA_TEST_CHECK(fake::state.loader_table_requests == 1);
  // Staging was pinned, for every agent (no agent list).
  HSA_TEST_CHECK(fake::state.lock_calls > 0 && fake::state.lock_calls_with_agents == 0);

  // Pass 1 runs: the kernel writes everything it can reach.
  for (int pass = 0; pass < 3; ++pass) {
    std::memset(input, 0xA0 + pass, 4096);
    std::memset(output, 0xB0 + pass, 1000);
    std::memset(scratch_fine, 0xC0 + pass, 256);
    std::memset(counter.address, 0xD0 + pass, counter.size);
    std::memset(lut.address, 0xE0 + pass, lut.size);
    std::memset(cuid.address, 0xF0 + pass, 1);
    std::memset(flaky.address, 0x90 + pass, flaky.size);
    kreplay_restore_report_t report{};
    HSA_TEST_CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS);
    HSA_TEST_CHECK(report.restored == 5 && report.skipped == 0 && report.failed == 0);
    HSA_TEST_CHECK(report.bytes == info.bytes);
    HSA_TEST_CHECK(holds(input, 4096, 1) && holds(output, 1000, 2));
    HSA_TEST_CHECK(holds(counter.address, counter.size, 4) && holds(lut.address, lut.size, 5));
    HSA_TEST_CHECK(holds(flaky.address, flaky.size, 7));
    // Not captured, so the pass's writes stay.
    HSA_TEST_CHECK(static_cast<unsigned char*>(scratch_fine)[0] == 0xC0 + pass);
    HSA_TEST_CHECK(*static_cast<unsigned char*>(cuid.address) == 0xF0 + pass);
  }

  // A region freed since the snapshot is skipped, never written.
  HSA_TEST_CHECK(live_core.hsa_memory_free_fn(output) == HSA_STATUS_SUCCESS);
  kreplay_restore_report_t report{};
  HSA_TEST_CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(report.restored == 4 && report.skipped == 1);
  kreplay_snapshot_free(snapshot);

  // The other GPU sees its own executable's variables only.
  kreplay_snapshot_t* other = snap(gpu2);
  HSA_TEST_CHECK(kreplay_snapshot_info(other, &info) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(info.regions == 0 && info.module_variables == 3 && info.bytes == 64 + 32 + 16);
  HSA_TEST_CHECK(fake::symbol(exe2, "counter_b").size == 64);
  kreplay_snapshot_free(other);

  // Retained pinned staging is unlocked before it is unmapped.
  kreplay_staging_trim(fake::k(gpu));
  kreplay_staging_trim(fake::k(gpu2));
  HSA_TEST_CHECK(fake::state.locked_ranges == 0);
  HSA_TEST_CHECK(fake::state.unlock_calls == fake::state.lock_calls);

  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(input) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(scratch_fine) == HSA_STATUS_SUCCESS);
  kreplay::hsa::finalize();
  std::printf("hsa snapshot: %d lock calls, restore round trips intact\n", fake::state.lock_calls);
  return 0;
}
