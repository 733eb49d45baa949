// Live device budgets through the HSA adapter: its device_free_bytes answers from
// HSA_AMD_AGENT_INFO_MEMORY_AVAIL, so with device_budget_percent each capture's device storage is that percent
// of what the GPU has free (kreplay's own idle storage counted back in), the rest spills to host staging, and
// a failing query keeps that capture whole on the host.
#include "fake_hsa.hpp"

#include <vector>

namespace {

CoreApiTable live_core;
AmdExtTable live_amd;

constexpr std::size_t region_bytes = 64 << 10;
constexpr std::size_t region_count = 8;
constexpr std::size_t footprint = region_bytes * region_count;

void set_policy(std::size_t budget_bytes, std::uint32_t percent) {
  kreplay_policy_t policy{};
  policy.struct_size = sizeof policy;
  policy.pin_staging = true;
  policy.device_budget_bytes = budget_bytes;
  policy.device_budget_percent = percent;
  HSA_TEST_CHECK(kreplay::hsa::set_policy(&policy) == KREPLAY_STATUS_SUCCESS);
}

unsigned char pattern(unsigned seed, std::size_t r, std::size_t i) {
  return static_cast<unsigned char>(seed + r * 7 + i * 5);
}

void fill(const std::vector<void*>& regions, unsigned seed) {
  for (std::size_t r = 0; r < regions.size(); ++r) {
    auto* bytes = static_cast<unsigned char*>(regions[r]);
    for (std::size_t i = 0; i < region_bytes; ++i) bytes[i] = pattern(seed, r, i);
  }
}

bool hold(const std::vector<void*>& regions, unsigned seed) {
  for (std::size_t r = 0; r < regions.size(); ++r) {
    const auto* bytes = static_cast<const unsigned char*>(regions[r]);
    for (std::size_t i = 0; i < region_bytes; ++i) {
      if (bytes[i] != pattern(seed, r, i)) return false;
    }
  }
  return true;
}

// Captures, scribbles, restores, checks; returns the capture's device_bytes.
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
  return info.device_bytes;
}

}  // namespace

int main() {
  fake::reset(0x5D000000);
  fake::fill_tables(&live_core, &live_amd);
  const CoreApiTable captured_core = live_core;
  const AmdExtTable captured_amd = live_amd;
  const hsa_agent_t gpu = fake::agents.gpu;
  HSA_TEST_CHECK(kreplay::hsa::install(&live_core, &live_amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  kreplay_device_ops_t ops{};
  HSA_TEST_CHECK(kreplay::hsa::make_device_ops(&captured_core, &captured_amd, nullptr, &ops) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(ops.device_free_bytes != nullptr);
  // The op answers the runtime's figure for the agent, and refuses a NULL output.
  fake::state.gpu_capacity = 3 * region_bytes;
  std::size_t free_now = 0;
  HSA_TEST_CHECK(ops.device_free_bytes(ops.user_data, fake::k(gpu), &free_now) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(free_now == 3 * region_bytes);
  HSA_TEST_CHECK(ops.device_free_bytes(ops.user_data, fake::k(gpu), nullptr) == KREPLAY_STATUS_INVALID_ARGUMENT);
  fake::state.fail_memory_avail = true;
  HSA_TEST_CHECK(ops.device_free_bytes(ops.user_data, fake::k(gpu), &free_now) == KREPLAY_STATUS_DEVICE_ERROR);
  fake::state.fail_memory_avail = false;
  fake::state.gpu_capacity = 0;
  ops.release(ops.user_data);

  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);
  std::vector<void*> regions;
  for (std::size_t i = 0; i < region_count; ++i) {
    void* ptr = nullptr;
    HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_allocate_fn(fake::pools.gpu_coarse, region_bytes, 0, &ptr) ==
                   HSA_STATUS_SUCCESS);
    regions.push_back(ptr);
  }

  // The GPU has half a footprint free besides the program's regions: half of it is the budget, dispatch after
  // dispatch (the storage kreplay retains counts as free again).
  fake::state.gpu_capacity = footprint + footprint / 2;
  set_policy(0, 50);
  for (unsigned dispatch = 0; dispatch < 3; ++dispatch) {
    const int queries = fake::state.memory_avail_queries;
    const std::size_t on_device = round_trip(regions, 10 + dispatch);
    HSA_TEST_CHECK(on_device > 0 && on_device <= footprint / 4);
    HSA_TEST_CHECK(fake::pool_bytes(fake::pools.gpu_coarse) <= footprint + footprint / 4);
    HSA_TEST_CHECK(fake::state.memory_avail_queries == queries + 1);
  }

  // A fixed budget smaller than the live one wins.
  kreplay_device_trim_all();
  fake::state.gpu_capacity = 0;
  set_policy(footprint / 8, 50);
  HSA_TEST_CHECK(round_trip(regions, 20) <= footprint / 8);

  // A failing query: this capture stays on the host, whole; the next one asks again.
  kreplay_device_trim_all();
  set_policy(0, 100);
  fake::state.fail_memory_avail = true;
  HSA_TEST_CHECK(round_trip(regions, 30) == 0);
  HSA_TEST_CHECK(fake::pool_bytes(fake::pools.gpu_coarse) == footprint);
  fake::state.fail_memory_avail = false;
  HSA_TEST_CHECK(round_trip(regions, 31) == footprint);
  HSA_TEST_CHECK(fake::state.signal_misuse == 0 && fake::state.async_bad_agent == 0);

  for (void* region : regions) HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(region) == HSA_STATUS_SUCCESS);
  kreplay_device_trim_all();
  kreplay_staging_trim(fake::k(gpu));
  HSA_TEST_CHECK(fake::live_allocations() == 0);
  kreplay::hsa::finalize();
  std::printf("hsa live budget: percent of MEMORY_AVAIL on the device, spill, fixed budget wins, failed query\n");
  return 0;
}
