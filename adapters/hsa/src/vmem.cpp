// Recording of virtual-memory mappings (see vmem.hpp for why this is apart from the table wiring).
#include "vmem.hpp"

#include "internal.hpp"

namespace kreplay::hsa::detail {
namespace {

struct pool_search {
  const vmem_functions* fns;
  hsa_amd_memory_pool_t pool;
  hsa_agent_t owner;
  bool found;
  hsa_status_t error;  // of a nested pool walk, which hsa_iterate_agents would otherwise hide
};

hsa_status_t match_pool(hsa_amd_memory_pool_t pool, void* data) {
  auto* search = static_cast<pool_search*>(data);
  if (pool.handle != search->pool.handle) return HSA_STATUS_SUCCESS;
  search->found = true;
  return HSA_STATUS_INFO_BREAK;
}

hsa_status_t search_agent(hsa_agent_t agent, void* data) {
  auto* search = static_cast<pool_search*>(data);
  hsa_status_t status = search->fns->agent_iterate_memory_pools(agent, &match_pool, search);
  if (search->found) {
    search->owner = agent;
    return HSA_STATUS_INFO_BREAK;
  }
  if (status != HSA_STATUS_SUCCESS) {
    search->error = status;
    return status;
  }
  return HSA_STATUS_SUCCESS;
}

}  // namespace

vmem_owner_result vmem_owner(const vmem_functions& fns, std::uint64_t handle, hsa_agent_t* owner_out) {
  if (fns.handle_pool == nullptr || fns.iterate_agents == nullptr || fns.agent_get_info == nullptr ||
      fns.agent_iterate_memory_pools == nullptr || fns.memory_pool_get_info == nullptr) {
    logf(KREPLAY_LOG_WARNING, "vmem handle %#llx: the adapter is not configured, so its owner cannot be found",
         static_cast<unsigned long long>(handle));
    return vmem_owner_result::unknown;
  }
  hsa_amd_memory_pool_t pool{};
  hsa_status_t status = fns.handle_pool(handle, &pool);
  if (status != HSA_STATUS_SUCCESS) {
    logf(KREPLAY_LOG_WARNING, "vmem handle %#llx: querying its allocation properties failed (status %#x)",
         static_cast<unsigned long long>(handle), static_cast<unsigned>(status));
    return vmem_owner_result::unknown;
  }
  // ROCr has no pool-to-agent query: walk the agents' pools. Mappings are rare (a stream-ordered allocator
  // growing or trimming its pool), so the walk is not cached.
  pool_search search{&fns, pool, hsa_agent_t{0}, false, HSA_STATUS_SUCCESS};
  status = fns.iterate_agents(&search_agent, &search);
  if (!search.found) {
    logf(KREPLAY_LOG_WARNING, "vmem handle %#llx: no agent owns its pool %#llx (status %#x)",
         static_cast<unsigned long long>(handle), static_cast<unsigned long long>(pool.handle),
         static_cast<unsigned>(search.error != HSA_STATUS_SUCCESS ? search.error : status));
    return vmem_owner_result::unknown;
  }
  hsa_device_type_t device = HSA_DEVICE_TYPE_CPU;
  std::uint32_t global_flags = 0;
  if (fns.agent_get_info(search.owner, HSA_AGENT_INFO_DEVICE, &device) != HSA_STATUS_SUCCESS ||
      fns.memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &global_flags) != HSA_STATUS_SUCCESS) {
    logf(KREPLAY_LOG_WARNING, "vmem handle %#llx: querying its pool %#llx or owner %#llx failed",
         static_cast<unsigned long long>(handle), static_cast<unsigned long long>(pool.handle),
         static_cast<unsigned long long>(search.owner.handle));
    return vmem_owner_result::unknown;
  }
  // The same rule kreplay applies to allocations: only coarse-grained device memory that is not kernarg.
  const bool coarse = (global_flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) != 0;
  const bool kernarg = (global_flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) != 0;
  if (device != HSA_DEVICE_TYPE_GPU || !coarse || kernarg) return vmem_owner_result::not_tracked;
  *owner_out = search.owner;
  return vmem_owner_result::tracked;
}

hsa_status_t vmem_map(const vmem_functions& fns, void* va, std::size_t size, std::size_t in_offset,
                      std::uint64_t handle, std::uint64_t flags) {
  hsa_status_t status = fns.map(va, size, in_offset, handle, flags);
  if (status != HSA_STATUS_SUCCESS || finalized.load(std::memory_order_acquire) || !kreplay_tracking_is_enabled()) {
    return status;
  }
  hsa_agent_t owner{0};
  switch (vmem_owner(fns, handle, &owner)) {
    case vmem_owner_result::tracked:
      kreplay_record_vmem_map(va, size, to_kreplay(owner));
      break;
    case vmem_owner_result::not_tracked:
      break;
    case vmem_owner_result::unknown:
      // Whether it is coarse-grained device memory, and whose, is unknown: kreplay holds it against every
      // agent's snapshots until it is unmapped, rather than let a kernel's writes to it leak across passes.
      kreplay_record_vmem_map_unknown_owner(va, size);
      break;
  }
  return status;
}

hsa_status_t vmem_unmap(const vmem_functions& fns, void* va, std::size_t size) {
  if (finalized.load(std::memory_order_acquire)) return fns.unmap(va, size);
  const kreplay_status_t recorded = kreplay_record_vmem_unmap(va, size);
  hsa_status_t status = fns.unmap(va, size);
  // kreplay took the range out (CAPACITY_EXCEEDED too: it removed the range and only failed to keep a split's
  // tail), yet the runtime kept it mapped: record it again.
  const bool taken_out = recorded == KREPLAY_STATUS_SUCCESS || recorded == KREPLAY_STATUS_CAPACITY_EXCEEDED;
  if (status == HSA_STATUS_SUCCESS || !taken_out || !kreplay_tracking_is_enabled()) {
    return status;
  }
  // The range was tracked and is still mapped. Its owner was not kept (kreplay's inventory has it but offers
  // no lookup), so find it again from the handle mapped there; failures are rare enough that paying the walk
  // only here is the right trade.
  hsa_agent_t owner{0};
  std::uint64_t handle = 0;
  vmem_owner_result result = vmem_owner_result::unknown;
  if (fns.retain_handle != nullptr && fns.retain_handle(&handle, va) == HSA_STATUS_SUCCESS) {
    result = vmem_owner(fns, handle, &owner);
    if (fns.release_handle != nullptr) fns.release_handle(handle);
  }
  if (result == vmem_owner_result::tracked) {
    kreplay_record_vmem_map(va, size, to_kreplay(owner));
  } else {
    logf(KREPLAY_LOG_WARNING,
         "unmap of %p (%zu bytes) failed (status %#x) and the mapping's owner could not be found again: every "
         "agent's snapshots are declined until it is unmapped",
         va, size, static_cast<unsigned>(status));
    kreplay_record_vmem_map_unknown_owner(va, size);
  }
  return status;
}

}  // namespace kreplay::hsa::detail
