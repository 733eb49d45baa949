// The device tier through the adapter and kreplay's engine: snapshots held in device storage from the agent's
// coarse-grained pool (never recorded in the inventory), a budget that spills to host staging, a refused
// device allocation that falls back to the host, and an application allocation that fails for lack of memory
// until the wrapper has kreplay give back its idle device storage.
//
// Depends on the engine's device tier (device_alloc / device_free, device_budget_bytes, kreplay_device_trim_all).
#include "fake_hsa.hpp"

#include <cstring>
#include <vector>

namespace {

CoreApiTable live_core;
AmdExtTable live_amd;

constexpr std::size_t region_bytes = 64 << 10;
constexpr std::size_t region_count = 4;
constexpr std::size_t footprint = region_bytes * region_count;

void* pool_alloc(std::size_t size) {
  void* ptr = nullptr;
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_allocate_fn(fake::pools.gpu_coarse, size, 0, &ptr) == HSA_STATUS_SUCCESS);
  return ptr;
}

void set_budget(std::size_t budget) {
  kreplay_policy_t policy{};
  policy.struct_size = sizeof policy;
  policy.pin_staging = true;
  policy.device_budget_bytes = budget;
  HSA_TEST_CHECK(kreplay::hsa::set_policy(&policy) == KREPLAY_STATUS_SUCCESS);
}

void fill(const std::vector<void*>& regions, unsigned seed) {
  for (std::size_t r = 0; r < regions.size(); ++r) {
    auto* bytes = static_cast<unsigned char*>(regions[r]);
    for (std::size_t i = 0; i < region_bytes; ++i) bytes[i] = static_cast<unsigned char>(seed + r * 5 + i * 3);
  }
}

bool hold(const std::vector<void*>& regions, unsigned seed) {
  for (std::size_t r = 0; r < regions.size(); ++r) {
    const auto* bytes = static_cast<const unsigned char*>(regions[r]);
    for (std::size_t i = 0; i < region_bytes; ++i) {
      if (bytes[i] != static_cast<unsigned char>(seed + r * 5 + i * 3)) return false;
    }
  }
  return true;
}

// Captures, scribbles, restores; returns the capture's device_bytes.
std::size_t round_trip(const std::vector<void*>& regions, unsigned seed) {
  fill(regions, seed);
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  HSA_TEST_CHECK(kreplay_snap(fake::k(fake::agents.gpu), &snapshot, &reason) == KREPLAY_STATUS_SUCCESS);
  kreplay_snapshot_info_t info{};
  HSA_TEST_CHECK(kreplay_snapshot_info(snapshot, &info) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(info.regions == region_count && info.bytes == footprint);
  fill(regions, seed + 100);
  kreplay_restore_report_t report{};
  HSA_TEST_CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(report.restored == region_count && report.failed == 0);
  HSA_TEST_CHECK(hold(regions, seed));
  kreplay_snapshot_free(snapshot);
  HSA_TEST_CHECK(fake::state.signal_misuse == 0 && fake::state.async_bad_agent == 0);
  HSA_TEST_CHECK(fake::state.async_pageable == 0 && fake::pending_async_copies() == 0);
  return info.device_bytes;
}

}  // namespace

int main() {
  fake::reset(0x5C000000);
  fake::fill_tables(&live_core, &live_amd);
  const CoreApiTable captured_core = live_core;
  const AmdExtTable captured_amd = live_amd;
  const hsa_agent_t gpu = fake::agents.gpu;
  HSA_TEST_CHECK(kreplay::hsa::install(&live_core, &live_amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);
  std::vector<void*> regions;
  for (std::size_t i = 0; i < region_count; ++i) regions.push_back(pool_alloc(region_bytes));

  // The whole footprint on the device; the storage comes from the coarse pool and stays out of the inventory.
  set_budget(footprint * 2);
  const int async_before = fake::state.async_copy_calls;
  HSA_TEST_CHECK(round_trip(regions, 1) == footprint);
  HSA_TEST_CHECK(fake::state.async_copy_calls - async_before >= static_cast<int>(2 * region_count));
  HSA_TEST_CHECK(fake::stats(gpu).regions == region_count && fake::stats(gpu).bytes == footprint);
  const std::size_t retained = kreplay_retained_device_bytes(fake::k(gpu));
  HSA_TEST_CHECK(retained >= footprint);
  HSA_TEST_CHECK(fake::pool_bytes(fake::pools.gpu_coarse) == footprint + retained);

  // The application runs out of memory that kreplay holds idle: its allocation fails once, the wrapper has
  // kreplay give the storage back, and the retry succeeds.
  fake::state.gpu_capacity = fake::pool_bytes(fake::pools.gpu_coarse) + region_bytes / 2;
  const int calls = fake::state.pool_allocate_calls;
  void* needed = pool_alloc(region_bytes);
  HSA_TEST_CHECK(fake::state.pool_allocate_calls == calls + 2);
  HSA_TEST_CHECK(kreplay_retained_device_bytes(fake::k(gpu)) == 0);
  HSA_TEST_CHECK(fake::pool_bytes(fake::pools.gpu_coarse) == footprint + region_bytes);
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(needed) == HSA_STATUS_SUCCESS);
  fake::state.gpu_capacity = 0;

  // Half the footprint as budget: the rest spills to host staging, contents intact either way.
  set_budget(footprint / 2);
  const std::size_t on_device = round_trip(regions, 2);
  HSA_TEST_CHECK(on_device > 0 && on_device <= footprint / 2);

  // No device memory to be had: the capture stays on the host, never declined.
  kreplay_device_trim_all();
  set_budget(footprint * 2);
  fake::state.gpu_capacity = fake::pool_bytes(fake::pools.gpu_coarse);
  HSA_TEST_CHECK(round_trip(regions, 3) == 0);
  fake::state.gpu_capacity = 0;
  HSA_TEST_CHECK(round_trip(regions, 4) == footprint);

  for (void* region : regions) HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(region) == HSA_STATUS_SUCCESS);
  kreplay_device_trim_all();
  kreplay_staging_trim(fake::k(gpu));
  HSA_TEST_CHECK(fake::live_allocations() == 0);
  HSA_TEST_CHECK(fake::state.locked_ranges == 0);
  kreplay::hsa::finalize();
  std::printf("hsa device tier: storage on the coarse pool, spill at half budget, out-of-memory retry after trim\n");
  return 0;
}
