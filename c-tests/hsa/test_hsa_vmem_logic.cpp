// The vmem wrappers' logic (adapters/hsa/src/vmem.cpp), driven with fake map/unmap entries: a mapping of a GPU's
// coarse-grained memory is recorded with that GPU as owner and snapshotted; mappings of other memory are not; an
// unmap is recorded before the runtime's unmap runs, and an unmap the runtime refuses leaves the mapping
// tracked. This logic is compiled on every build; the table wiring around it needs headers that declare the vmem
// API (see kreplay_hsa_vmem_wrappers).
#include "fake_hsa.hpp"

// A private header of the adapter (adapters/hsa/src, not installed), through the target kreplay_hsa_internal.
#include "vmem.hpp"

#include <cstring>

namespace {

using kreplay::hsa::detail::vmem_functions;
using kreplay::hsa::detail::vmem_owner_result;

CoreApiTable core;
AmdExtTable amd;

struct mapping_t {
  void* va;
  std::size_t size;
  std::uint64_t handle;
};
std::vector<mapping_t> mappings;
int map_calls = 0;
int unmap_calls = 0;
int handle_queries = 0;
int releases = 0;
bool fail_map = false;
bool fail_unmap = false;
bool fail_retain = false;
std::size_t regions_during_unmap = 99;

// Handles: 1 a GPU's coarse pool, 2 its fine-grained pool, 3 the CPU's, 4 a pool nobody owns, 5 unqueryable.
hsa_status_t handle_pool(std::uint64_t handle, hsa_amd_memory_pool_t* pool) {
  ++handle_queries;
  switch (handle) {
    case 1: *pool = fake::pools.gpu_coarse; return HSA_STATUS_SUCCESS;
    case 2: *pool = fake::pools.gpu_fine; return HSA_STATUS_SUCCESS;
    case 3: *pool = fake::pools.cpu_fine; return HSA_STATUS_SUCCESS;
    case 4: *pool = hsa_amd_memory_pool_t{0x4444}; return HSA_STATUS_SUCCESS;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
}

hsa_status_t map(void* va, std::size_t size, std::size_t /*in_offset*/, std::uint64_t handle, std::uint64_t /*flags*/) {
  ++map_calls;
  if (fail_map) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  mappings.push_back({va, size, handle});
  return HSA_STATUS_SUCCESS;
}

hsa_status_t unmap(void* va, std::size_t /*size*/) {
  ++unmap_calls;
  kreplay_inventory_stats_t stats{};  // FINALIZED once the test has called finalize
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

hsa_status_t retain_handle(std::uint64_t* handle, void* va) {
  if (fail_retain) return HSA_STATUS_ERROR;
  for (const auto& m : mappings) {
    if (m.va == va) {
      *handle = m.handle;
      return HSA_STATUS_SUCCESS;
    }
  }
  return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

hsa_status_t release_handle(std::uint64_t /*handle*/) {
  ++releases;
  return HSA_STATUS_SUCCESS;
}

vmem_functions functions() {
  vmem_functions fns{};
  fns.map = &map;
  fns.unmap = &unmap;
  fns.handle_pool = &handle_pool;
  fns.retain_handle = &retain_handle;
  fns.release_handle = &release_handle;
  fns.iterate_agents = core.hsa_iterate_agents_fn;
  fns.agent_get_info = core.hsa_agent_get_info_fn;
  fns.agent_iterate_memory_pools = amd.hsa_amd_agent_iterate_memory_pools_fn;
  fns.memory_pool_get_info = amd.hsa_amd_memory_pool_get_info_fn;
  return fns;
}

}  // namespace

int main() {
  fake::reset(0x55000000);
  fake::fill_tables(&core, &amd);
  const hsa_agent_t gpu = fake::agents.gpu;
  const vmem_functions fns = functions();
  const std::size_t page = 4096;
  std::vector<unsigned char> arena(8 * page);  // stands in for a reserved virtual range
  unsigned char* va = arena.data();

  // Owner lookup on its own: a pool's owner is found by walking the agents' pools.
  hsa_agent_t owner{0};
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_owner(fns, 1, &owner) == vmem_owner_result::tracked);
  HSA_TEST_CHECK(owner.handle == gpu.handle);
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_owner(fns, 2, &owner) == vmem_owner_result::not_tracked);
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_owner(fns, 3, &owner) == vmem_owner_result::not_tracked);
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_owner(fns, 4, &owner) == vmem_owner_result::unknown);
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_owner(fns, 5, &owner) == vmem_owner_result::unknown);
  vmem_functions unconfigured = fns;  // what the wrappers have before kreplay::hsa::configure
  unconfigured.iterate_agents = nullptr;
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_owner(unconfigured, 1, &owner) == vmem_owner_result::unknown);

  const CoreApiTable captured_core = core;
  const AmdExtTable captured_amd = amd;
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);

  // Tracking off: the map is forwarded and nothing is asked.
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_map(fns, va, page, 0, 1, 0) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(map_calls == 1 && handle_queries == 5);
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_unmap(fns, va, page) == HSA_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  // A GPU coarse-grained mapping is tracked, captured and restored.
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_map(fns, va, 2 * page, 0, 1, 0) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1 && fake::stats(gpu).bytes == 2 * page);
  std::memset(va, 0x5A, 2 * page);
  kreplay_snapshot_t* snapshot = nullptr;
  HSA_TEST_CHECK(kreplay_snap(fake::k(gpu), &snapshot, nullptr) == KREPLAY_STATUS_SUCCESS);
  std::memset(va, 0x11, 2 * page);
  kreplay_restore_report_t report{};
  HSA_TEST_CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS && report.restored == 1);
  HSA_TEST_CHECK(va[0] == 0x5A && va[2 * page - 1] == 0x5A);
  kreplay_snapshot_free(snapshot);

  // Other memory is not tracked; memory whose owner cannot be found is held against every snapshot until it is
  // unmapped, so a kernel's writes to it cannot leak across passes unnoticed.
  for (std::uint64_t handle : {2, 3, 4, 5}) {
    const bool unknown = handle >= 4;
    unsigned char* at = va + 4 * page;
    HSA_TEST_CHECK(kreplay::hsa::detail::vmem_map(fns, at, page, 0, handle, 0) == HSA_STATUS_SUCCESS);
    HSA_TEST_CHECK(fake::stats(gpu).regions == 1);
    HSA_TEST_CHECK(fake::stats(gpu).overflowed == (unknown ? 1u : 0u));
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    const kreplay_status_t snapped = kreplay_snap(fake::k(gpu), &snapshot, &reason);
    HSA_TEST_CHECK(unknown ? (snapped == KREPLAY_STATUS_DECLINED && reason == KREPLAY_DECLINE_INVENTORY_OVERFLOW)
                           : snapped == KREPLAY_STATUS_SUCCESS);
    kreplay_snapshot_free(snapshot);
    HSA_TEST_CHECK(kreplay::hsa::detail::vmem_unmap(fns, at, page) == HSA_STATUS_SUCCESS);
    HSA_TEST_CHECK(fake::stats(gpu).overflowed == 0);
  }
  // A map the runtime refuses is not recorded.
  fail_map = true;
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_map(fns, va + 4 * page, page, 0, 1, 0) == HSA_STATUS_ERROR_OUT_OF_RESOURCES);
  fail_map = false;
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1);

  // The unmap is recorded before the runtime's unmap runs.
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_unmap(fns, va, 2 * page) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(regions_during_unmap == 0);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 0);

  // A refused unmap leaves the mapping tracked: its owner is found again from the handle mapped there.
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_map(fns, va, page, 0, 1, 0) == HSA_STATUS_SUCCESS);
  fail_unmap = true;
  const int releases_before = releases;
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_unmap(fns, va, page) == HSA_STATUS_ERROR);
  HSA_TEST_CHECK(regions_during_unmap == 0);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1 && fake::stats(gpu).bytes == page);
  HSA_TEST_CHECK(releases == releases_before + 1);  // the retained handle was released
  // ... and when even that fails, the mapping is held as one of unknown owner until a later unmap succeeds.
  fail_retain = true;
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_unmap(fns, va, page) == HSA_STATUS_ERROR);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 0 && fake::stats(gpu).overflowed == 1);
  fail_retain = false;
  fail_unmap = false;
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_unmap(fns, va, page) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::stats(gpu).overflowed == 0);

  // An unmap of part of a mapping leaves the rest tracked.
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_map(fns, va, 3 * page, 0, 1, 0) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(kreplay_record_vmem_unmap(va + page, page) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 2 && fake::stats(gpu).bytes == 2 * page);

  // After finalize the logic only forwards.
  kreplay::hsa::finalize();
  const int unmaps = unmap_calls;
  HSA_TEST_CHECK(kreplay::hsa::detail::vmem_unmap(fns, va, 3 * page) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(unmap_calls == unmaps + 1);
  std::printf("hsa vmem logic: owner lookup, ordering and refused unmaps behave; the table wrappers are %s in "
              "this build\n",
              kreplay::hsa::vmem_wrappers_compiled() ? "compiled" : "compiled out (headers lack the vmem API)");
  return 0;
}
