// A runtime whose core table lacks one of the entries that load code objects: install() still wraps the
// allocation entries, but it cannot see every load, so it leaves kreplay's module-scan cache off (and
// set_policy keeps it off): every capture scans. Its own process, since install() succeeds once per process.
#include "fake_hsa.hpp"

int main() {
  fake::reset(0x5D000000);
  CoreApiTable live_core;
  AmdExtTable live_amd;
  fake::fill_tables(&live_core, &live_amd);
  live_core.hsa_executable_load_program_code_object_fn = nullptr;
  const CoreApiTable captured_core = live_core;
  const AmdExtTable captured_amd = live_amd;
  const hsa_agent_t gpu = fake::agents.gpu;
  fake::add_standard_executable(gpu, "_c");

  HSA_TEST_CHECK(kreplay::hsa::install(&live_core, &live_amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  HSA_TEST_CHECK(!kreplay::hsa::module_wrappers_installed());
  HSA_TEST_CHECK(live_core.hsa_executable_freeze_fn == captured_core.hsa_executable_freeze_fn);
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_allocate_fn != captured_amd.hsa_amd_memory_pool_allocate_fn);
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  kreplay_policy_t policy{};
  policy.struct_size = sizeof policy;
  policy.cache_module_scan = true;  // asked for, but set_policy knows a load could go unseen
  HSA_TEST_CHECK(kreplay::hsa::set_policy(&policy) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  for (int i = 0; i < 3; ++i) {
    const int queries = fake::state.symbol_queries;
    kreplay_snapshot_t* snapshot = nullptr;
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    HSA_TEST_CHECK(kreplay_snap(fake::k(gpu), &snapshot, &reason) == KREPLAY_STATUS_SUCCESS);
    HSA_TEST_CHECK(fake::state.symbol_queries > queries);
    kreplay_snapshot_free(snapshot);
  }
  kreplay::hsa::finalize();
  std::printf("hsa module cache off: a table without every load entry leaves every capture scanning\n");
  return 0;
}
