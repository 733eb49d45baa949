// Shared between the adapter's translation units; not installed, not part of the API.
#ifndef KREPLAY_HSA_INTERNAL_HPP
#define KREPLAY_HSA_INTERNAL_HPP

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <kreplay.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

// Set by CMake from what the ROCr headers declare (adapters/hsa/CMakeLists.txt).
#if !defined(KREPLAY_HSA_HAVE_VMEM) || !defined(KREPLAY_HSA_POINTER_INFO_HAS_GLOBAL_FLAGS)
#error "build the HSA adapter through its CMakeLists.txt, which detects the header features"
#endif

namespace kreplay::hsa::detail {

// printf-style message to the host's sink (or stderr for ERROR/WARNING when there is none). Formats into a
// stack buffer: usable on the allocation path and from any thread; long messages are truncated.
void logf(kreplay_log_level_t level, const char* format, ...) __attribute__((format(printf, 2, 3)));

// Set by finalize(): the wrappers then forward without touching kreplay.
extern std::atomic<bool> finalized;

using loader_iterate_executables_t = hsa_status_t (*)(hsa_status_t (*callback)(hsa_executable_t, void*), void* data);

// What configure() copied out of the host's captured tables. Allocated once per configure() and never freed:
// kreplay may still be calling ops with an older context when a new one is installed, and the object is small.
// Only trivially destructible members, since ops may run during other libraries' teardown.
struct context {
  decltype(hsa_memory_copy)* memory_copy;
  decltype(hsa_amd_pointer_info)* pointer_info;
  decltype(hsa_agent_get_info)* agent_get_info;
  decltype(hsa_executable_iterate_agent_symbols)* iterate_agent_symbols;
  decltype(hsa_executable_symbol_get_info)* symbol_get_info;
  // Optional: NULL when the table lacks them (then kreplay gets no host_lock/host_unlock).
  decltype(hsa_amd_memory_lock)* memory_lock;
  decltype(hsa_amd_memory_unlock)* memory_unlock;
  // Optional: for attributing vmem mappings to agents.
  decltype(hsa_iterate_agents)* iterate_agents;
  decltype(hsa_amd_agent_iterate_memory_pools)* agent_iterate_memory_pools;
  decltype(hsa_amd_memory_pool_get_info)* memory_pool_get_info;
  // Needed only when the host supplies no executable iterator.
  decltype(hsa_system_get_major_extension_table)* get_major_extension_table;
  hsa_status_t (*iterate_executables)(void* user_data, hsa_status_t (*visit)(hsa_executable_t, void*), void* data);
  void* iterate_executables_data;
  // The loader extension's iterator, looked up on first use (the runtime is initialised by then).
  mutable std::atomic<loader_iterate_executables_t> loader_iterate_executables;
  // The context this one replaced, kept reachable (and alive) on purpose; see above.
  const context* previous;
#if KREPLAY_HSA_HAVE_VMEM
  decltype(hsa_amd_vmem_get_alloc_properties_from_handle)* vmem_get_alloc_properties;
  decltype(hsa_amd_vmem_retain_alloc_handle)* vmem_retain_alloc_handle;
  decltype(hsa_amd_vmem_handle_release)* vmem_handle_release;
#endif
};

// The context of the last successful configure(); NULL before.
extern std::atomic<const context*> configured;

// The ops kreplay_configure receives; user_data is a context*.
kreplay_status_t op_iterate_module_variables(void* user_data, kreplay_agent_t agent,
                                             kreplay_module_variable_visitor_t visit, void* visit_data);

// Converts between the two agent types, which share their layout by kreplay's contract.
inline kreplay_agent_t to_kreplay(hsa_agent_t agent) { return kreplay_agent_t{agent.handle}; }
inline hsa_agent_t to_hsa(kreplay_agent_t agent) { return hsa_agent_t{agent.handle}; }

}  // namespace kreplay::hsa::detail

#endif  // KREPLAY_HSA_INTERNAL_HPP
