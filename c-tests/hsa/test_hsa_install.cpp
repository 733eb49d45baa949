// install() chains to the entries it replaced, and refuses every later install (another library instance, a
// second call, a broken table) without touching the table -- so a call through the live table reaches the
// runtime exactly once, never the wrapper again.
#include "fake_hsa.hpp"

#include <cstring>

namespace {

bool same_entries(const CoreApiTable& a, const CoreApiTable& b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_entries(const AmdExtTable& a, const AmdExtTable& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

int main() {
  using namespace kreplay::hsa;
  fake::reset(0x51000000);

  CoreApiTable core;
  AmdExtTable amd;
  fake::fill_tables(&core, &amd);
  const CoreApiTable original_core = core;
  const AmdExtTable original_amd = amd;

  // Refusals that come before any install leave the tables as they were.
  HSA_TEST_CHECK(install(&core, &amd, 1) == INSTALL_REFUSED_NOT_FIRST_INSTANCE);
  HSA_TEST_CHECK(install(nullptr, &amd, 0) == INSTALL_REFUSED_INVALID_TABLE);
  HSA_TEST_CHECK(install(&core, nullptr, 0) == INSTALL_REFUSED_INVALID_TABLE);
  CoreApiTable short_core = core;  // a runtime whose table ends before hsa_memory_free
  short_core.version.minor_id = static_cast<std::uint32_t>(offsetof(CoreApiTable, hsa_memory_free_fn));
  HSA_TEST_CHECK(install(&short_core, &amd, 0) == INSTALL_REFUSED_INVALID_TABLE);
  AmdExtTable holed_amd = amd;  // an entry missing
  holed_amd.hsa_amd_memory_pool_free_fn = nullptr;
  HSA_TEST_CHECK(install(&core, &holed_amd, 0) == INSTALL_REFUSED_INVALID_TABLE);
  HSA_TEST_CHECK(same_entries(core, original_core));
  HSA_TEST_CHECK(same_entries(amd, original_amd));

  HSA_TEST_CHECK(install(&core, &amd, 0) == INSTALL_SUCCESS);
  HSA_TEST_CHECK(core.hsa_memory_allocate_fn != original_core.hsa_memory_allocate_fn);
  HSA_TEST_CHECK(core.hsa_memory_free_fn != original_core.hsa_memory_free_fn);
  HSA_TEST_CHECK(amd.hsa_amd_memory_pool_allocate_fn != original_amd.hsa_amd_memory_pool_allocate_fn);
  HSA_TEST_CHECK(amd.hsa_amd_memory_pool_free_fn != original_amd.hsa_amd_memory_pool_free_fn);
  // Nothing else changes (this build's headers may lack vmem; then those entries are not even declared).
  HSA_TEST_CHECK(core.hsa_memory_copy_fn == original_core.hsa_memory_copy_fn);
  HSA_TEST_CHECK(amd.hsa_amd_pointer_info_fn == original_amd.hsa_amd_pointer_info_fn);
  HSA_TEST_CHECK(vmem_wrappers_installed() == vmem_wrappers_compiled());

  // The tables as a later library instance receives them: already holding our wrappers.
  CoreApiTable instance1_core = core;
  AmdExtTable instance1_amd = amd;
  HSA_TEST_CHECK(install(&instance1_core, &instance1_amd, 1) == INSTALL_REFUSED_NOT_FIRST_INSTANCE);
  HSA_TEST_CHECK(install(&instance1_core, &instance1_amd, 0) == INSTALL_REFUSED_ALREADY_INSTALLED);
  HSA_TEST_CHECK(install(&core, &amd, 0) == INSTALL_REFUSED_ALREADY_INSTALLED);
  CoreApiTable fresh_core;
  AmdExtTable fresh_amd;
  fake::fill_tables(&fresh_core, &fresh_amd);
  HSA_TEST_CHECK(install(&fresh_core, &fresh_amd, 0) == INSTALL_REFUSED_ALREADY_INSTALLED);
  HSA_TEST_CHECK(same_entries(fresh_core, original_core));
  HSA_TEST_CHECK(same_entries(instance1_core, core));
  HSA_TEST_CHECK(same_entries(instance1_amd, amd));

  // Each call through the live table reaches the runtime exactly once: the wrapper chained to the saved entry,
  // not to itself (a recursive chain would never return, or reach the fake more than once).
  void* a = nullptr;
  HSA_TEST_CHECK(core.hsa_memory_allocate_fn(fake::gpu_region, 256, &a) == HSA_STATUS_SUCCESS && a != nullptr);
  HSA_TEST_CHECK(fake::state.memory_allocate_calls == 1);
  void* b = nullptr;
  HSA_TEST_CHECK(amd.hsa_amd_memory_pool_allocate_fn(fake::pools.gpu_coarse, 512, 0, &b) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.pool_allocate_calls == 1);
  HSA_TEST_CHECK(fake::live_allocations() == 2);
  HSA_TEST_CHECK(core.hsa_memory_free_fn(a) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.memory_free_calls == 1);
  HSA_TEST_CHECK(amd.hsa_amd_memory_pool_free_fn(b) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.pool_free_calls == 1);
  HSA_TEST_CHECK(fake::live_allocations() == 0);
  // The runtime's errors come back unchanged.
  HSA_TEST_CHECK(core.hsa_memory_allocate_fn(hsa_region_t{1}, 16, &a) == HSA_STATUS_ERROR_INVALID_REGION);
  HSA_TEST_CHECK(amd.hsa_amd_memory_pool_free_fn(&a) == HSA_STATUS_ERROR_INVALID_ALLOCATION);
  // A later instance calling through its copy (our wrappers) also reaches the runtime once.
  HSA_TEST_CHECK(instance1_amd.hsa_amd_memory_pool_allocate_fn(fake::pools.gpu_fine, 64, 0, &b) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.pool_allocate_calls == 2);
  HSA_TEST_CHECK(instance1_amd.hsa_amd_memory_pool_free_fn(b) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.pool_free_calls == 3);

  // Tracking was never enabled: nothing was recorded.
  HSA_TEST_CHECK(fake::stats(fake::agents.gpu).regions == 0);

  HSA_TEST_CHECK(std::strlen(install_status_string(INSTALL_REFUSED_ALREADY_INSTALLED)) > 0);
  HSA_TEST_CHECK(std::strlen(install_status_string(static_cast<install_status_t>(99))) > 0);
  std::printf("hsa install: chained once, later installs refused; vmem wrappers compiled: %s\n",
              vmem_wrappers_compiled() ? "yes" : "no");
  finalize();
  return 0;
}
