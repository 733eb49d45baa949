// Shared between the adapter's translation units; not installed, not part of the API.
#ifndef KREPLAY_HSA_INTERNAL_HPP
#define KREPLAY_HSA_INTERNAL_HPP

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <kreplay.h>

#include <kreplay/hsa.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

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

// The runtime functions the table wrappers need besides their own saved entries, from the last successful
// configure(). Kept apart from the ops' context because kreplay frees a replaced context (release) while a
// wrapper on another thread may still be running; these are plain function pointers into the runtime, valid for
// the life of the process, so the wrappers read them from process-wide atomics instead.
struct runtime_functions {
  std::atomic<decltype(hsa_amd_pointer_info)*> pointer_info{nullptr};
  std::atomic<decltype(hsa_iterate_agents)*> iterate_agents{nullptr};
  std::atomic<decltype(hsa_agent_get_info)*> agent_get_info{nullptr};
  std::atomic<decltype(hsa_amd_agent_iterate_memory_pools)*> agent_iterate_memory_pools{nullptr};
  std::atomic<decltype(hsa_amd_memory_pool_get_info)*> memory_pool_get_info{nullptr};
#if KREPLAY_HSA_HAVE_VMEM
  std::atomic<decltype(hsa_amd_vmem_get_alloc_properties_from_handle)*> vmem_get_alloc_properties{nullptr};
  std::atomic<decltype(hsa_amd_vmem_retain_alloc_handle)*> vmem_retain_alloc_handle{nullptr};
  std::atomic<decltype(hsa_amd_vmem_handle_release)*> vmem_handle_release{nullptr};
#endif
};
// Constant-initialised and trivially destructible: the wrappers run during other libraries' teardown.
extern runtime_functions runtime;

// Host ranges locked through host_lock and device storage from device_alloc, process-wide: copy_batch looks up
// both sides of every copy here to know whether the DMA engines can take it (and with which agents and
// addresses), without a runtime query per copy. Process-wide rather than per context, because storage locked
// or allocated through one set of ops is still used by copies of the next set after a configure.
// Trivially destructible (no destructor frees the array: it stays reachable from this object at exit).
struct memory_ranges {
  enum kind_t : std::uint8_t { locked_host, device };
  struct range {
    std::uintptr_t base;
    std::size_t size;
    std::uintptr_t agent_base;  // locked_host: the agent pointer hsa_amd_memory_lock returned; device: base
    kind_t kind;
    std::uint64_t agent;  // device: the owner
  };
  std::mutex mutex;
  range* ranges;  // sorted by base, none overlapping; malloc'd
  std::size_t count;
  std::size_t capacity;
};
extern memory_ranges ranges;

// Remembers [base, base + size); false when the bookkeeping could not grow (the range then simply stays
// unknown, and its copies go through hsa_memory_copy).
bool ranges_add(const memory_ranges::range& range);
// Forgets the range that starts at base, if any.
void ranges_remove(std::uintptr_t base);

// What configure() copied out of the host's captured tables, plus the state of the ops. One per configure();
// kreplay frees it through the release op once no call and no storage uses that set of ops any more.
struct context {
  decltype(hsa_memory_copy)* memory_copy;
  decltype(hsa_amd_pointer_info)* pointer_info;
  decltype(hsa_agent_get_info)* agent_get_info;
  decltype(hsa_executable_iterate_agent_symbols)* iterate_agent_symbols;
  decltype(hsa_executable_symbol_get_info)* symbol_get_info;
  // Optional: NULL when the table lacks them (then kreplay gets no host_lock/host_unlock).
  decltype(hsa_amd_memory_lock)* memory_lock;
  decltype(hsa_amd_memory_unlock)* memory_unlock;
  // Optional: agents and pools, for attributing vmem mappings and choosing the device tier's pool.
  decltype(hsa_iterate_agents)* iterate_agents;
  decltype(hsa_amd_agent_iterate_memory_pools)* agent_iterate_memory_pools;
  decltype(hsa_amd_memory_pool_get_info)* memory_pool_get_info;
  decltype(hsa_amd_agent_memory_pool_get_info)* agent_memory_pool_get_info;
  // Optional: the device tier (device_alloc / device_free). Both come from the captured table, never the
  // wrappers, so kreplay's own storage is not recorded.
  decltype(hsa_amd_memory_pool_allocate)* pool_allocate;
  decltype(hsa_amd_memory_pool_free)* pool_free;
  decltype(hsa_amd_agents_allow_access)* agents_allow_access;
  // Optional: copy_batch.
  decltype(hsa_amd_memory_async_copy)* async_copy;
  decltype(hsa_signal_create)* signal_create;
  decltype(hsa_signal_destroy)* signal_destroy;
  decltype(hsa_signal_store_relaxed)* signal_store_relaxed;
  decltype(hsa_signal_load_scacquire)* signal_load_scacquire;
  decltype(hsa_signal_wait_scacquire)* signal_wait_scacquire;
  // Needed only when the host supplies no executable iterator.
  decltype(hsa_system_get_major_extension_table)* get_major_extension_table;
  hsa_status_t (*iterate_executables)(void* user_data, hsa_status_t (*visit)(hsa_executable_t, void*), void* data);
  void* iterate_executables_data;
  // The host's digest, when it supplied one.
  digest_fn_t digest;
  void* digest_data;
  // The loader extension's iterator, looked up on first use (the runtime is initialised by then).
  mutable std::atomic<loader_iterate_executables_t> loader_iterate_executables;

  // A CPU agent: the agent of page-locked host memory in an async copy. 0 until looked up; looked up again
  // while not found (the runtime may not have been up).
  std::atomic<std::uint64_t> cpu_agent;

  // Completion signals between batches. A batch takes what it needs (creating more when the pool is short)
  // and gives them back when all its copies are done; release destroys them.
  static constexpr std::size_t max_pooled_signals = 128;
  std::mutex signal_mutex;
  hsa_signal_t pooled_signals[max_pooled_signals];
  std::size_t pooled_count;
  // Said once per context, not once per batch.
  std::atomic<bool> warned_no_signal;

  // The device tier's pool of each agent, found on first use.
  static constexpr std::size_t max_agent_pools = 64;
  struct agent_pool {
    std::uint64_t agent;
    hsa_amd_memory_pool_t pool;
    bool needs_access;  // allocations need hsa_amd_agents_allow_access for the agent
    bool usable;        // false: the agent has no pool kreplay may use (remembered, so not searched again)
  };
  std::mutex pool_mutex;
  agent_pool agent_pools[max_agent_pools];
  std::size_t agent_pool_count;
};

// The ops kreplay_configure receives; user_data is a context*.
kreplay_status_t op_iterate_module_variables(void* user_data, kreplay_agent_t agent,
                                             kreplay_module_variable_visitor_t visit, void* visit_data);
kreplay_status_t op_copy_batch(void* user_data, kreplay_agent_t agent, const kreplay_copy_t* copies,
                               std::size_t count);
// Destroys the pooled signals (copy_batch.cpp); part of release.
void destroy_signal_pool(context* ctx);

// Wraps the program's async copies with the replay-window fence (copy_fence.cpp); part of install().
void install_copy_wrappers(CoreApiTable* core, AmdExtTable* amd_ext);

// Converts between the two agent types, which share their layout by kreplay's contract.
inline kreplay_agent_t to_kreplay(hsa_agent_t agent) { return kreplay_agent_t{agent.handle}; }
inline hsa_agent_t to_hsa(kreplay_agent_t agent) { return hsa_agent_t{agent.handle}; }

}  // namespace kreplay::hsa::detail

#endif  // KREPLAY_HSA_INTERNAL_HPP
