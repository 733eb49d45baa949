// The adapter and the library against the real libhsa-runtime64 on a machine without a GPU: hsa_init fails,
// and everything after reports that cleanly -- no table can be installed or configured from nothing,
// snapshots are declined, calls through tables assembled from the runtime's exported entry points return the
// runtime's "not initialised" status, and nothing crashes. Where hsa_init succeeds (a machine with a GPU), the
// runtime is shut down again first, so the same checks hold.
#include "hsa_test.hpp"

#include <cstring>

namespace {

const char* describe(hsa_status_t status) {
  const char* text = nullptr;
  // hsa_status_string works without hsa_init.
  if (hsa_status_string(status, &text) != HSA_STATUS_SUCCESS || text == nullptr) return "(no description)";
  return text;
}

kreplay_decline_reason_t snap_reason(kreplay_agent_t agent) {
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  HSA_TEST_CHECK(kreplay_snap(agent, &snapshot, &reason) == KREPLAY_STATUS_DECLINED);
  HSA_TEST_CHECK(snapshot == nullptr);
  return reason;
}

}  // namespace

int main() {
  const kreplay_agent_t agent{0x57000200};

  // Nothing configured yet: declined, for that reason.
  kreplay_tracking_enable(true);
  HSA_TEST_CHECK(snap_reason(agent) == KREPLAY_DECLINE_NOT_CONFIGURED);

  hsa_status_t init = hsa_init();
  if (init == HSA_STATUS_SUCCESS) {
    std::printf("hsa real runtime: hsa_init succeeded (a GPU is present); shutting down and checking the "
                "uninitialised behaviour\n");
    HSA_TEST_CHECK(hsa_shut_down() == HSA_STATUS_SUCCESS);
  } else {
    std::printf("hsa real runtime: hsa_init failed as expected without a GPU: %#x %s\n",
                static_cast<unsigned>(init), describe(init));
  }

  // Without hsa_init there are no tables to hand in; the entry points refuse what they are given.
  HSA_TEST_CHECK(kreplay::hsa::install(nullptr, nullptr, 0) == kreplay::hsa::INSTALL_REFUSED_INVALID_TABLE);
  HSA_TEST_CHECK(kreplay::hsa::configure(nullptr, nullptr, nullptr) == KREPLAY_STATUS_INVALID_ARGUMENT);
  CoreApiTable empty_core;
  AmdExtTable empty_amd;
  std::memset(&empty_core, 0, sizeof empty_core);  // what a host holds when the runtime never gave it tables
  std::memset(&empty_amd, 0, sizeof empty_amd);
  HSA_TEST_CHECK(kreplay::hsa::install(&empty_core, &empty_amd, 0) == kreplay::hsa::INSTALL_REFUSED_INVALID_TABLE);
  HSA_TEST_CHECK(kreplay::hsa::configure(&empty_core, &empty_amd, nullptr) == KREPLAY_STATUS_INVALID_ARGUMENT);
  HSA_TEST_CHECK(snap_reason(agent) == KREPLAY_DECLINE_NOT_CONFIGURED);

  // Tables assembled from the runtime's exported functions, as a tool would receive them, while the runtime
  // is not initialised.
  CoreApiTable core;
  AmdExtTable amd;
  std::memset(&core, 0, sizeof core);
  std::memset(&amd, 0, sizeof amd);
  core.version.major_id = HSA_CORE_API_TABLE_MAJOR_VERSION;
  core.version.minor_id = sizeof core;
  amd.version.major_id = HSA_AMD_EXT_API_TABLE_MAJOR_VERSION;
  amd.version.minor_id = sizeof amd;
  core.hsa_memory_allocate_fn = &hsa_memory_allocate;
  core.hsa_memory_free_fn = &hsa_memory_free;
  core.hsa_memory_copy_fn = &hsa_memory_copy;
  core.hsa_agent_get_info_fn = &hsa_agent_get_info;
  core.hsa_iterate_agents_fn = &hsa_iterate_agents;
  core.hsa_executable_iterate_agent_symbols_fn = &hsa_executable_iterate_agent_symbols;
  core.hsa_executable_symbol_get_info_fn = &hsa_executable_symbol_get_info;
  core.hsa_system_get_major_extension_table_fn = &hsa_system_get_major_extension_table;
  amd.hsa_amd_memory_pool_allocate_fn = &hsa_amd_memory_pool_allocate;
  amd.hsa_amd_memory_pool_free_fn = &hsa_amd_memory_pool_free;
  amd.hsa_amd_pointer_info_fn = &hsa_amd_pointer_info;
  amd.hsa_amd_memory_lock_fn = &hsa_amd_memory_lock;
  amd.hsa_amd_memory_unlock_fn = &hsa_amd_memory_unlock;
  amd.hsa_amd_agent_iterate_memory_pools_fn = &hsa_amd_agent_iterate_memory_pools;
  amd.hsa_amd_memory_pool_get_info_fn = &hsa_amd_memory_pool_get_info;
  const CoreApiTable captured_core = core;
  const AmdExtTable captured_amd = amd;

  HSA_TEST_CHECK(kreplay::hsa::install(&core, &amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);

  // Calls through the wrappers return the runtime's own status and record nothing.
  void* ptr = nullptr;
  hsa_status_t status = core.hsa_memory_allocate_fn(hsa_region_t{1}, 4096, &ptr);
  std::printf("hsa real runtime: hsa_memory_allocate through the wrapper: %#x %s\n", static_cast<unsigned>(status),
              describe(status));
  HSA_TEST_CHECK(status == HSA_STATUS_ERROR_NOT_INITIALIZED);
  status = amd.hsa_amd_memory_pool_allocate_fn(hsa_amd_memory_pool_t{1}, 4096, 0, &ptr);
  HSA_TEST_CHECK(status == HSA_STATUS_ERROR_NOT_INITIALIZED);
  int not_device_memory = 0;
  HSA_TEST_CHECK(amd.hsa_amd_memory_pool_free_fn(&not_device_memory) == HSA_STATUS_ERROR_NOT_INITIALIZED);
  HSA_TEST_CHECK(core.hsa_memory_free_fn(&not_device_memory) == HSA_STATUS_ERROR_NOT_INITIALIZED);
  kreplay_inventory_stats_t stats{};
  HSA_TEST_CHECK(kreplay_inventory_stats(agent, &stats) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(stats.regions == 0 && stats.overflowed == 0);

  // A snapshot now gets as far as the module scan, whose loader-extension lookup the uninitialised runtime
  // refuses: declined, never partial.
  HSA_TEST_CHECK(snap_reason(agent) == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE);

  // A pointer the runtime cannot describe, recorded as if allocated: held as lost, so snapshots decline until
  // it is freed.
  HSA_TEST_CHECK(kreplay_record_alloc(&not_device_memory, sizeof not_device_memory, 0) == KREPLAY_STATUS_DEVICE_ERROR);
  HSA_TEST_CHECK(snap_reason(agent) == KREPLAY_DECLINE_INVENTORY_OVERFLOW);
  HSA_TEST_CHECK(kreplay_record_free(&not_device_memory) == KREPLAY_STATUS_SUCCESS);

  kreplay::hsa::finalize();
  HSA_TEST_CHECK(snap_reason(agent) == KREPLAY_DECLINE_FINALIZED);
  std::printf("hsa real runtime: every path declined or refused cleanly\n");
  return 0;
}
