// The vmem wrappers' logic, kept apart from the table wiring.
//
// The ROCr headers this adapter is often built against (Debian's 5.2.3) predate hsa_amd_vmem_*, so the wrappers
// that sit in the AmdExtTable are compiled only when the headers declare those functions. Everything they do
// beyond calling the saved entry lives here, written against plain function pointers with the memory handle as
// its uint64_t payload (hsa_amd_vmem_alloc_handle_t is a struct of one uint64_t). That keeps the logic compiled
// and tested on every build; the table wiring that is compiled out is a handful of thunks.
//
// Not installed; the adapter's tests include it to drive the logic with fake functions.
#ifndef KREPLAY_HSA_VMEM_HPP
#define KREPLAY_HSA_VMEM_HPP

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

#include <cstddef>
#include <cstdint>

namespace kreplay::hsa::detail {

struct vmem_functions {
  // The saved (next) hsa_amd_vmem_map and hsa_amd_vmem_unmap.
  hsa_status_t (*map)(void* va, std::size_t size, std::size_t in_offset, std::uint64_t handle, std::uint64_t flags);
  hsa_status_t (*unmap)(void* va, std::size_t size);
  // hsa_amd_vmem_get_alloc_properties_from_handle, reduced to the pool the handle's memory came from.
  hsa_status_t (*handle_pool)(std::uint64_t handle, hsa_amd_memory_pool_t* pool_out);
  // hsa_amd_vmem_retain_alloc_handle and hsa_amd_vmem_handle_release: the handle mapped at an address, used
  // only after a failed unmap. May be NULL.
  hsa_status_t (*retain_handle)(std::uint64_t* handle_out, void* va);
  hsa_status_t (*release_handle)(std::uint64_t handle);
  // From the host's captured core and AMD extension tables: which agent owns a pool, and what kind it is.
  // NULL when kreplay::hsa::configure has not run; mappings are then not attributed (and not tracked).
  decltype(hsa_iterate_agents)* iterate_agents;
  decltype(hsa_agent_get_info)* agent_get_info;
  decltype(hsa_amd_agent_iterate_memory_pools)* agent_iterate_memory_pools;
  decltype(hsa_amd_memory_pool_get_info)* memory_pool_get_info;
};

// What a mapping of a handle's memory is to kreplay.
enum class vmem_owner_result {
  tracked,      // coarse-grained, non-kernarg memory of a GPU's pool: owner is set
  not_tracked,  // a CPU's pool, fine-grained or kernarg memory: out of scope, as for allocations
  unknown,      // a query failed: the mapping cannot be attributed
};

// Finds the agent whose pools include the pool that handle's memory came from, and classifies the memory the
// way kreplay classifies allocations.
vmem_owner_result vmem_owner(const vmem_functions& fns, std::uint64_t handle, hsa_agent_t* owner_out);

// The body of the hsa_amd_vmem_map wrapper: the saved map, then, if it succeeded and tracking is on,
// kreplay_record_vmem_map with the owner of the handle's pool.
hsa_status_t vmem_map(const vmem_functions& fns, void* va, std::size_t size, std::size_t in_offset,
                      std::uint64_t handle, std::uint64_t flags);

// The body of the hsa_amd_vmem_unmap wrapper: kreplay_record_vmem_unmap first (no restore may write into a
// range being unmapped), then the saved unmap; if that fails, the range is still mapped and is recorded again.
hsa_status_t vmem_unmap(const vmem_functions& fns, void* va, std::size_t size);

}  // namespace kreplay::hsa::detail

#endif  // KREPLAY_HSA_VMEM_HPP
