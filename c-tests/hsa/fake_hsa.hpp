// A fake ROCr for the HSA adapter's tests: CoreApiTable / AmdExtTable instances whose entries allocate host
// memory standing in for device memory, answer hsa_amd_pointer_info from that bookkeeping, copy with memcpy,
// and expose executables with variable symbols. No GPU, no libhsa-runtime64.
//
// Topology: one CPU agent and two GPU agents, with handles chosen by each test (the kreplay library is a
// process-wide singleton, and every test executable gets its own handles). Pools: a coarse-grained and a
// fine-grained pool per GPU, a kernarg pool and a fine-grained pool on the CPU; one hsa_region_t for
// hsa_memory_allocate on the first GPU (coarse-grained). The first GPU also has, listed first, a coarse-grained
// pool that does not allow runtime allocation (as ROCr reports for some partitions), which kreplay's device
// storage must pass over.
//
// Signals and hsa_amd_memory_async_copy behave as ROCr's SDMA path without platform atomics: a copy is queued
// at submission with the completion signal's value read then, and completes (in submission order) only when a
// thread waits on a signal, storing that captured value minus one -- so copies that shared one signal would
// never bring it to zero. A copy with pageable host memory on either side is refused, as ROCr's engines
// cannot reach it.
//
// The program's own copies (through the live tables and the adapter's fence wrappers) are the same queued copies,
// plus hsa_amd_memory_async_copy_rect (and _on_engine where the headers declare it); a test completes them
// when it chooses (complete_async_copies, complete_async_copy_with_signal), and hsa_amd_signal_async_handler
// registrations run on the completing thread as soon as their signal meets the condition.
#ifndef KREPLAY_C_TESTS_HSA_FAKE_HSA_HPP
#define KREPLAY_C_TESTS_HSA_FAKE_HSA_HPP

#include "hsa_test.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fake {

struct agents_t {
  hsa_agent_t cpu;
  hsa_agent_t gpu;
  hsa_agent_t gpu2;
};

struct pools_t {
  hsa_amd_memory_pool_t gpu_coarse_fixed;  // coarse-grained, no runtime allocation
  hsa_amd_memory_pool_t gpu_coarse;
  hsa_amd_memory_pool_t gpu_fine;
  hsa_amd_memory_pool_t gpu2_coarse;
  hsa_amd_memory_pool_t cpu_kernarg;
  hsa_amd_memory_pool_t cpu_fine;
};

struct symbol_t {
  std::uint64_t handle;
  hsa_symbol_kind_t kind;
  std::string name;
  void* address;  // owned by the fake (NULL for the zero-size one)
  std::uint32_t size;
  hsa_variable_segment_t segment;
  bool is_const;
  hsa_agent_t agent;
  // When it equals the attribute queried, hsa_executable_symbol_get_info fails for this symbol.
  int fail_attribute;
};

struct executable_t {
  std::uint64_t handle;  // 0: a destroyed executable's slot, as ROCr's loader reports it
  std::vector<symbol_t> symbols;
  bool fail_iteration;   // hsa_executable_iterate_agent_symbols fails
};

// The arguments of the last async copy that reached the fake.
struct async_call_t {
  const void* dst;
  const void* src;
  std::size_t bytes;  // rect: range.x
  std::uint64_t signal;
};

// Counters and fault knobs; tests read and set them directly.
struct state_t {
  // calls that reached the fake (through whatever wrappers sit in front)
  int memory_allocate_calls = 0;
  int memory_free_calls = 0;
  int pool_allocate_calls = 0;
  int pool_free_calls = 0;
  int pointer_info_calls = 0;
  int copy_calls = 0;
  int lock_calls = 0;
  int lock_calls_with_agents = 0;  // lock calls that named agents (the adapter should name none)
  int unlock_calls = 0;
  int locked_ranges = 0;           // locked now
  int loader_table_requests = 0;
  int null_executables_reported = 0;
  int symbol_queries = 0;             // hsa_executable_symbol_get_info calls
  int symbol_walks = 0;               // hsa_executable_iterate_agent_symbols calls
  int executable_calls = 0;           // calls of the entries that load, define, freeze or destroy
  // signals and async copies
  int signals_live = 0;
  int signal_create_calls = 0;
  int async_copy_calls = 0;           // submissions that reached the fake (refused ones included)
  int async_copies_done = 0;          // completed, successfully or not
  int max_in_flight = 0;
  int signal_misuse = 0;              // a signal re-armed, re-used or destroyed while its copy was in flight
  int async_bad_agent = 0;            // an agent argument that does not match the memory it names
  int async_pageable = 0;             // submissions refused because a side was pageable host memory
  int allow_access_calls = 0;
  int async_copy_rect_calls = 0;       // also counted in async_copy_calls
  int async_copy_on_engine_calls = 0;  // also counted in async_copy_calls
  async_call_t last_async_copy{};
  int signal_load_calls = 0;           // hsa_signal_load_relaxed
  int async_handler_calls = 0;         // hsa_amd_signal_async_handler registrations (refused ones included)
  int async_handlers_fired = 0;
  bool fail_async_handler = false;     // hsa_amd_signal_async_handler refuses every registration
  // faults
  int signal_create_budget = -1;      // successful hsa_signal_create calls left; -1: unlimited
  // Submissions are numbered by async_copy_calls after the call's own increment; to hit the k-th from now, set
  // the knob to async_copy_calls + k.
  int fail_async_submit_at = 0;       // that submission is refused (0: none)
  int fault_async_copy_at = 0;        // that submission completes with a negative value, copying nothing
  int oom_next_pool_allocations = 0;  // the next n pool allocations fail with HSA_STATUS_ERROR_OUT_OF_RESOURCES
  std::size_t gpu_capacity = 0;       // bytes each GPU's coarse pool can hold (0: unlimited)
  // HSA_AMD_AGENT_INFO_MEMORY_AVAIL of a GPU: gpu_capacity less what its coarse pool holds (UINT64_MAX when
  // unlimited); the query fails when fail_memory_avail is set. Counted in memory_avail_queries.
  bool fail_memory_avail = false;
  int memory_avail_queries = 0;
  bool gpu2_access_disallowed = false;  // gpu2's access to its coarse pool is DISALLOWED_BY_DEFAULT
  // faults
  int fail_next_frees = 0;            // the next n frees (either API) fail and free nothing
  bool fail_pointer_info = false;      // every hsa_amd_pointer_info fails
  bool short_pointer_info = false;     // act as a runtime whose pointer-info struct ends before global_flags
  bool fail_loader_table = false;      // hsa_system_get_major_extension_table fails
  // called inside a free, before the memory is given back (the allocation is still live)
  void (*on_free)(void* ptr) = nullptr;
};

extern state_t state;
extern agents_t agents;
extern pools_t pools;
extern hsa_region_t gpu_region;
extern std::vector<executable_t> executables;

// Sets the agent handles (pools, regions and symbol handles are derived from base) and clears everything.
void reset(std::uint64_t base);

// Fills tables as a runtime would: every entry the adapter may use points at the fake, version.minor_id is
// sizeof(table).
void fill_tables(CoreApiTable* core, AmdExtTable* amd_ext);

// Adds a loaded executable with the standard set of symbols for agent (see fake_hsa.cpp), returns its index.
std::size_t add_standard_executable(hsa_agent_t agent, const std::string& suffix);

// The symbol named name in executable index (aborts when absent).
symbol_t& symbol(std::size_t executable, const std::string& name);

// An executable iterator for configure_options_t that walks executables (host-registry style); counts calls.
hsa_status_t host_iterate_executables(void* user_data, kreplay::hsa::executable_visitor_t visit, void* visit_data);
extern int host_iterator_calls;
extern hsa_status_t host_iterator_result;  // returned instead of walking when not HSA_STATUS_SUCCESS
extern bool host_iterator_ignores_visit;   // a careless registry: walks on past a visitor's error, reports success

// Adds an executable for agent with n variables of size bytes each (no kernels), returns its index.
std::size_t add_executable_with_variables(hsa_agent_t agent, std::size_t n, std::uint32_t size);

// Whether the memory of every executable destroyed since reset still holds the fill the destroy left there
// (0xDD): false once anything wrote into a destroyed executable's symbols.
bool destroyed_memory_intact();

// Live allocations of the fake, for checks.
std::size_t live_allocations();

// Bytes live in pool.
std::size_t pool_bytes(hsa_amd_memory_pool_t pool);

// Whether ptr lies in an allocation of pool.
bool in_pool(const void* ptr, hsa_amd_memory_pool_t pool);

// A copy of state taken under the fake's lock: for reading counters while other threads call the fake.
state_t state_now();

// Async copies queued and not yet completed.
std::size_t pending_async_copies();

// Completes the first n queued copies in submission order (their handlers run now, on this thread); returns
// how many there were.
std::size_t complete_async_copies(std::size_t n);

// Completes the queued copy whose completion signal is signal; false when there is none.
bool complete_async_copy_with_signal(hsa_signal_t signal);

// hsa_amd_signal_async_handler registrations waiting for their condition.
std::size_t pending_async_handlers();

// A live signal's value now.
hsa_signal_value_t signal_value(hsa_signal_t signal);

// kreplay_inventory_stats for agent, asserting success.
kreplay_inventory_stats_t stats(hsa_agent_t agent);

inline kreplay_agent_t k(hsa_agent_t agent) { return kreplay_agent_t{agent.handle}; }

}  // namespace fake

#endif  // KREPLAY_C_TESTS_HSA_FAKE_HSA_HPP
