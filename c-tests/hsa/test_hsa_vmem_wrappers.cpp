// The vmem wrappers in the AMD extension table: install() puts them in front of hsa_amd_vmem_map/unmap, a map
// of a GPU's coarse-grained memory through the live table is tracked (its owner found through the captured
// table's hsa_amd_vmem_get_alloc_properties_from_handle), an unmap is recorded before the runtime's runs, and a
// refused one is recorded again.
//
// Built only where the adapter has the wrappers compiled in: against headers that declare the vmem API, or
// against the test-only overlay of older headers (vmem-overlay/), which is how it runs on Debian's 5.2.3.
#include "fake_hsa.hpp"

#include <cstring>

#if !KREPLAY_HSA_HAVE_VMEM
#error "this test needs an adapter built with the vmem wrappers"
#endif

namespace {

CoreApiTable live_core;
AmdExtTable live_amd;

struct mapping_t {
  void* va;
  std::size_t size;
  std::uint64_t handle;
};
std::vector<mapping_t> mappings;
int map_calls = 0;
int unmap_calls = 0;
int releases = 0;
bool fail_unmap = false;
std::size_t regions_during_unmap = 99;

hsa_status_t fake_vmem_map(void* va, std::size_t size, std::size_t /*in_offset*/, hsa_amd_vmem_alloc_handle_t handle,
                           std::uint64_t /*flags*/) {
  ++map_calls;
  mappings.push_back({va, size, handle.handle});
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_vmem_unmap(void* va, std::size_t /*size*/) {
  ++unmap_calls;
  kreplay_inventory_stats_t stats{};
  regions_during_unmap =
      kreplay_inventory_stats(fake::k(fake::agents.gpu), &stats) == KREPLAY_STATUS_SUCCESS ? stats.regions : 99;
  if (fail_unmap) return HSA_STATUS_ERROR;
  for (auto it = mappings.begin(); it != mappings.end(); ++it) {
    if (it->va == va) {
      mappings.erase(it);
      return HSA_STATUS_SUCCESS;
    }
  }
  return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

// Handle 1: the first GPU's coarse-grained pool; 2: its fine-grained pool.
hsa_status_t fake_get_alloc_properties(hsa_amd_vmem_alloc_handle_t handle, hsa_amd_memory_pool_t* pool,
                                       hsa_amd_memory_type_t* type) {
  if (handle.handle != 1 && handle.handle != 2) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  *pool = handle.handle == 1 ? fake::pools.gpu_coarse : fake::pools.gpu_fine;
  *type = MEMORY_TYPE_NONE;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_retain_alloc_handle(hsa_amd_vmem_alloc_handle_t* handle, void* va) {
  for (const auto& m : mappings) {
    if (m.va == va) {
      handle->handle = m.handle;
      return HSA_STATUS_SUCCESS;
    }
  }
  return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

hsa_status_t fake_handle_release(hsa_amd_vmem_alloc_handle_t /*handle*/) {
  ++releases;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t map(void* va, std::size_t size, std::uint64_t handle) {
  hsa_amd_vmem_alloc_handle_t h{};
  h.handle = handle;
  return live_amd.hsa_amd_vmem_map_fn(va, size, 0, h, 0);
}

}  // namespace

int main() {
  fake::reset(0x56000000);
  fake::fill_tables(&live_core, &live_amd);
  live_amd.hsa_amd_vmem_map_fn = &fake_vmem_map;
  live_amd.hsa_amd_vmem_unmap_fn = &fake_vmem_unmap;
  live_amd.hsa_amd_vmem_get_alloc_properties_from_handle_fn = &fake_get_alloc_properties;
  live_amd.hsa_amd_vmem_retain_alloc_handle_fn = &fake_retain_alloc_handle;
  live_amd.hsa_amd_vmem_handle_release_fn = &fake_handle_release;
  const CoreApiTable captured_core = live_core;
  const AmdExtTable captured_amd = live_amd;
  const hsa_agent_t gpu = fake::agents.gpu;

  HSA_TEST_CHECK(kreplay::hsa::vmem_wrappers_compiled());
  HSA_TEST_CHECK(kreplay::hsa::install(&live_core, &live_amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  HSA_TEST_CHECK(kreplay::hsa::vmem_wrappers_installed());
  HSA_TEST_CHECK(live_amd.hsa_amd_vmem_map_fn != &fake_vmem_map);
  HSA_TEST_CHECK(live_amd.hsa_amd_vmem_unmap_fn != &fake_vmem_unmap);
  // Only map and unmap are wrapped; the queries stay the runtime's.
  HSA_TEST_CHECK(live_amd.hsa_amd_vmem_get_alloc_properties_from_handle_fn == &fake_get_alloc_properties);
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  const std::size_t page = 4096;
  std::vector<unsigned char> arena(4 * page);
  unsigned char* va = arena.data();

  HSA_TEST_CHECK(map(va, 2 * page, 1) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(map_calls == 1);  // through the wrapper, to the runtime once
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1 && fake::stats(gpu).bytes == 2 * page);
  HSA_TEST_CHECK(map(va + 2 * page, page, 2) == HSA_STATUS_SUCCESS);  // fine-grained: not tracked
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1);

  std::memset(va, 0x3C, 2 * page);
  kreplay_snapshot_t* snapshot = nullptr;
  HSA_TEST_CHECK(kreplay_snap(fake::k(gpu), &snapshot, nullptr) == KREPLAY_STATUS_SUCCESS);
  std::memset(va, 0, 2 * page);
  HSA_TEST_CHECK(kreplay_restore(snapshot, nullptr) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(va[0] == 0x3C && va[2 * page - 1] == 0x3C);
  kreplay_snapshot_free(snapshot);

  fail_unmap = true;
  HSA_TEST_CHECK(live_amd.hsa_amd_vmem_unmap_fn(va, 2 * page) == HSA_STATUS_ERROR);
  HSA_TEST_CHECK(regions_during_unmap == 0);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1 && releases == 1);
  fail_unmap = false;
  HSA_TEST_CHECK(live_amd.hsa_amd_vmem_unmap_fn(va, 2 * page) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(regions_during_unmap == 0 && unmap_calls == 2);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 0);
  HSA_TEST_CHECK(live_amd.hsa_amd_vmem_unmap_fn(va + 2 * page, page) == HSA_STATUS_SUCCESS);

  // Configured from a runtime whose table ends before the vmem entries: mappings cannot be attributed and
  // stay untracked (with a warning), while the map itself still works.
  AmdExtTable old_amd = captured_amd;
  old_amd.version.minor_id = static_cast<std::uint32_t>(offsetof(AmdExtTable, hsa_amd_vmem_map_fn));
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &old_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(map(va, page, 1) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 0);
  HSA_TEST_CHECK(live_amd.hsa_amd_vmem_unmap_fn(va, page) == HSA_STATUS_SUCCESS);

  kreplay::hsa::finalize();
  std::printf("hsa vmem wrappers: installed in the table, mappings tracked and unmaps ordered\n");
  return 0;
}
