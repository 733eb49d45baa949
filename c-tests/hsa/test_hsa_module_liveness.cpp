// Module liveness through the adapter on the fake ROCr (API.md, version 4): a snapshot captures the variables
// of two executables, one is destroyed through the wrapped core table (which reports it with
// kreplay_modules_changed), and every restore after that skips and counts the destroyed executable's
// variables and never writes into its memory. The control destroys one through the captured, un-wrapped
// table, so kreplay is not told: the restore writes it, and the fake's poison check fails, which shows the
// check would catch the write the first part proves does not happen.
#include "fake_hsa.hpp"

#include <cstring>

namespace {

CoreApiTable live_core;
AmdExtTable live_amd;

kreplay_snapshot_t* snap(hsa_agent_t agent, std::size_t variables) {
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NOT_CONFIGURED;
  HSA_TEST_CHECK(kreplay_snap(fake::k(agent), &snapshot, &reason) == KREPLAY_STATUS_SUCCESS);
  kreplay_snapshot_info_t info{};
  HSA_TEST_CHECK(kreplay_snapshot_info(snapshot, &info) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(info.module_variables == variables);
  return snapshot;
}

}  // namespace

int main() {
  fake::reset(0x5C000000);
  fake::fill_tables(&live_core, &live_amd);
  const CoreApiTable captured_core = live_core;
  const AmdExtTable captured_amd = live_amd;
  const hsa_agent_t gpu = fake::agents.gpu;
  const std::size_t kept = fake::add_standard_executable(gpu, "_kept");
  const std::size_t gone = fake::add_standard_executable(gpu, "_gone");

  HSA_TEST_CHECK(kreplay::hsa::install(&live_core, &live_amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  // Each standard executable has three variables that are captured (counter, lut, flaky).
  fake::symbol_t& counter = fake::symbol(kept, "counter_kept");
  std::memset(counter.address, 0x11, counter.size);
  kreplay_snapshot_t* snapshot = snap(gpu, 6);
  HSA_TEST_CHECK(live_core.hsa_executable_destroy_fn(hsa_executable_t{fake::executables[gone].handle}) ==
                 HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::destroyed_memory_intact());
  for (int pass = 0; pass < 2; ++pass) {
    std::memset(counter.address, 0x22, counter.size);
    kreplay_restore_report_t report{};
    HSA_TEST_CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS);
    HSA_TEST_CHECK(report.restored == 3 && report.skipped == 3 && report.failed == 0);
    HSA_TEST_CHECK(static_cast<unsigned char*>(counter.address)[0] == 0x11);
    HSA_TEST_CHECK(fake::destroyed_memory_intact());
  }
  kreplay_snapshot_free(snapshot);

  // Control: an executable destroyed behind kreplay's back is written, and the poison check sees it.
  const std::size_t hidden = fake::add_standard_executable(gpu, "_hidden");
  kreplay_modules_changed();  // as the load wrappers would have
  snapshot = snap(gpu, 6);
  HSA_TEST_CHECK(captured_core.hsa_executable_destroy_fn(hsa_executable_t{fake::executables[hidden].handle}) ==
                 HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::destroyed_memory_intact());
  kreplay_restore_report_t report{};
  HSA_TEST_CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(report.restored == 6 && report.skipped == 0);
  HSA_TEST_CHECK(!fake::destroyed_memory_intact());
  kreplay_snapshot_free(snapshot);

  // The recommended policy turns the live host budget on, at half of what is available.
  const kreplay_policy_t recommended = kreplay::hsa::recommended_policy();
  HSA_TEST_CHECK(recommended.host_budget_percent == 50);
  HSA_TEST_CHECK(recommended.cache_module_scan == kreplay::hsa::module_wrappers_installed());
  HSA_TEST_CHECK(kreplay::hsa::set_policy(&recommended) == KREPLAY_STATUS_SUCCESS);
  kreplay_modules_changed();  // the control's destroy, which kreplay was never told of
  snapshot = snap(gpu, 3);
  kreplay_snapshot_free(snapshot);

  kreplay_staging_trim(fake::k(gpu));
  kreplay::hsa::finalize();
  std::printf("hsa module liveness: a destroyed executable's variables skipped; the control caught the write\n");
  return 0;
}
