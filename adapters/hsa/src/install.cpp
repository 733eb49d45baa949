// install(): the allocation wrappers in the host's live API tables, and finalize().
#include "internal.hpp"
#include "table.hpp"
#include "vmem.hpp"

#include <kreplay/hsa.hpp>

#include <cstddef>
#include <cstring>

namespace kreplay::hsa {

std::atomic<bool> detail::finalized{false};

namespace {

// The saved entries. Atomics, constant-initialised and trivially destructible: the wrappers stay in the
// tables for the life of the process and are called during other libraries' teardown. Written once by
// install() before the tables point at the wrappers (release), read by the wrappers (acquire).
std::atomic<decltype(hsa_memory_allocate)*> g_next_memory_allocate{nullptr};
std::atomic<decltype(hsa_memory_free)*> g_next_memory_free{nullptr};
std::atomic<decltype(hsa_amd_memory_pool_allocate)*> g_next_pool_allocate{nullptr};
std::atomic<decltype(hsa_amd_memory_pool_free)*> g_next_pool_free{nullptr};
std::atomic<bool> g_installed{false};
std::atomic<bool> g_vmem_installed{false};

bool forwarding_only() { return detail::finalized.load(std::memory_order_acquire); }

void record_alloc(void* ptr, std::size_t size, std::uint32_t flags) {
  if (ptr == nullptr || size == 0 || forwarding_only()) return;
  // CAPACITY_EXCEEDED and DEVICE_ERROR leave the allocation remembered as lost (snapshots of its agent are
  // declined) and kreplay has logged them; the runtime's allocation itself succeeded, so nothing else to do.
  kreplay_record_alloc(ptr, size, flags);
}

// After the runtime refused to free ptr, which kreplay_record_free had already taken out of the inventory: the
// allocation is still live, so kreplay puts it back as it was, generation included (a snapshot taken before
// the free still restores it). kreplay remembers the last few hundred frees for this; should this one have been
// forgotten (that many frees on other threads in between), it is recorded as a new allocation from what the
// runtime says about it, or held as lost if even that fails: never left untracked while live.
void record_again_after_failed_free(void* ptr, hsa_status_t free_status) {
  const kreplay_status_t undone = kreplay_record_free_undo(ptr);
  if (undone == KREPLAY_STATUS_SUCCESS || undone == KREPLAY_STATUS_FINALIZED) {
    detail::logf(KREPLAY_LOG_INFO, "free of %p failed (status %#x); put back in kreplay's inventory (%s)", ptr,
                 static_cast<unsigned>(free_status), kreplay_status_string(undone));
    return;
  }
  // The size comes from the runtime; a placeholder of one byte when it cannot say makes kreplay_record_alloc
  // ask the same question, fail the same way and hold the pointer as lost (snapshots declined until freed).
  std::size_t size = 1;
  if (auto* pointer_info = detail::runtime.pointer_info.load(std::memory_order_acquire)) {
    hsa_amd_pointer_info_t info{};
    info.size = sizeof info;
    if (pointer_info(ptr, &info, nullptr, nullptr, nullptr) == HSA_STATUS_SUCCESS &&
        info.type != HSA_EXT_POINTER_TYPE_UNKNOWN && info.sizeInBytes != 0) {
      const auto base = reinterpret_cast<std::uintptr_t>(info.agentBaseAddress);
      const auto at = reinterpret_cast<std::uintptr_t>(ptr);
      if (at >= base && at - base < info.sizeInBytes) size = info.sizeInBytes - (at - base);
    }
  }
  const kreplay_status_t status = kreplay_record_alloc(ptr, size, 0);
  detail::logf(KREPLAY_LOG_WARNING,
               "free of %p failed (status %#x) and kreplay no longer remembered that free (%s): recorded as a new "
               "allocation (%s)",
               ptr, static_cast<unsigned>(free_status), kreplay_status_string(undone), kreplay_status_string(status));
}

// An allocation the runtime refused for lack of memory may fit once kreplay gives back the device memory it
// holds idle for snapshots: trim, then try once more. kreplay's own storage is allocated through the captured
// table, never through this wrapper, so this cannot recurse.
template <typename Allocate>
hsa_status_t allocate_with_trim(Allocate allocate) {
  hsa_status_t status = allocate();
  if (status != HSA_STATUS_ERROR_OUT_OF_RESOURCES || forwarding_only()) return status;
  kreplay_device_trim_all();
  status = allocate();
  detail::logf(KREPLAY_LOG_INFO, "an allocation refused for lack of memory was retried after kreplay gave back its "
               "idle device storage: %s", status == HSA_STATUS_SUCCESS ? "it succeeded" : "refused again");
  return status;
}

hsa_status_t wrap_memory_allocate(hsa_region_t region, std::size_t size, void** ptr) {
  auto* next = g_next_memory_allocate.load(std::memory_order_acquire);
  hsa_status_t status = allocate_with_trim([&] { return next(region, size, ptr); });
  // hsa_memory_allocate takes no allocation flags: nothing to filter before kreplay's query.
  if (status == HSA_STATUS_SUCCESS && ptr != nullptr) record_alloc(*ptr, size, 0);
  return status;
}

// Both free entry points: record the free first, so that from here on no restore can write into this memory,
// which the runtime may hand out again the moment the free returns; record the allocation again if the runtime
// refuses the free.
hsa_status_t free_recorded(hsa_status_t (*next)(void*), void* ptr) {
  if (ptr == nullptr || forwarding_only()) return next(ptr);
  const kreplay_status_t recorded = kreplay_record_free(ptr);
  hsa_status_t status = next(ptr);
  if (status != HSA_STATUS_SUCCESS && recorded == KREPLAY_STATUS_SUCCESS) record_again_after_failed_free(ptr, status);
  return status;
}

hsa_status_t wrap_memory_free(void* ptr) {
  return free_recorded(g_next_memory_free.load(std::memory_order_acquire), ptr);
}

hsa_status_t wrap_pool_allocate(hsa_amd_memory_pool_t pool, std::size_t size, std::uint32_t flags, void** ptr) {
  auto* next = g_next_pool_allocate.load(std::memory_order_acquire);
  hsa_status_t status = allocate_with_trim([&] { return next(pool, size, flags, ptr); });
  // The flags go to kreplay unchanged: it drops executable allocations (runtime kernarg pools, tool buffers)
  // before querying anything.
  if (status == HSA_STATUS_SUCCESS && ptr != nullptr) record_alloc(*ptr, size, flags);
  return status;
}

hsa_status_t wrap_pool_free(void* ptr) {
  return free_recorded(g_next_pool_free.load(std::memory_order_acquire), ptr);
}

#if KREPLAY_HSA_HAVE_VMEM
std::atomic<decltype(hsa_amd_vmem_map)*> g_next_vmem_map{nullptr};
std::atomic<decltype(hsa_amd_vmem_unmap)*> g_next_vmem_unmap{nullptr};

// Thunks from vmem.hpp's plain signatures to the runtime's, which pass the handle as a struct.
hsa_status_t thunk_map(void* va, std::size_t size, std::size_t in_offset, std::uint64_t handle, std::uint64_t flags) {
  hsa_amd_vmem_alloc_handle_t memory_handle{};
  memory_handle.handle = handle;
  return g_next_vmem_map.load(std::memory_order_acquire)(va, size, in_offset, memory_handle, flags);
}

hsa_status_t thunk_unmap(void* va, std::size_t size) {
  return g_next_vmem_unmap.load(std::memory_order_acquire)(va, size);
}

hsa_status_t thunk_handle_pool(std::uint64_t handle, hsa_amd_memory_pool_t* pool_out) {
  auto* get_properties = detail::runtime.vmem_get_alloc_properties.load(std::memory_order_acquire);
  if (get_properties == nullptr) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  hsa_amd_vmem_alloc_handle_t memory_handle{};
  memory_handle.handle = handle;
  hsa_amd_memory_type_t type{};
  return get_properties(memory_handle, pool_out, &type);
}

hsa_status_t thunk_retain_handle(std::uint64_t* handle_out, void* va) {
  auto* retain = detail::runtime.vmem_retain_alloc_handle.load(std::memory_order_acquire);
  if (retain == nullptr) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  hsa_amd_vmem_alloc_handle_t memory_handle{};
  hsa_status_t status = retain(&memory_handle, va);
  if (status == HSA_STATUS_SUCCESS) *handle_out = memory_handle.handle;
  return status;
}

hsa_status_t thunk_release_handle(std::uint64_t handle) {
  auto* release = detail::runtime.vmem_handle_release.load(std::memory_order_acquire);
  if (release == nullptr) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  hsa_amd_vmem_alloc_handle_t memory_handle{};
  memory_handle.handle = handle;
  return release(memory_handle);
}

detail::vmem_functions vmem_functions_now() {
  detail::vmem_functions fns{};
  fns.map = &thunk_map;
  fns.unmap = &thunk_unmap;
  fns.handle_pool = &thunk_handle_pool;
  fns.retain_handle = &thunk_retain_handle;
  fns.release_handle = &thunk_release_handle;
  fns.iterate_agents = detail::runtime.iterate_agents.load(std::memory_order_acquire);
  fns.agent_get_info = detail::runtime.agent_get_info.load(std::memory_order_acquire);
  fns.agent_iterate_memory_pools = detail::runtime.agent_iterate_memory_pools.load(std::memory_order_acquire);
  fns.memory_pool_get_info = detail::runtime.memory_pool_get_info.load(std::memory_order_acquire);
  return fns;
}

hsa_status_t wrap_vmem_map(void* va, std::size_t size, std::size_t in_offset, hsa_amd_vmem_alloc_handle_t handle,
                           std::uint64_t flags) {
  if (forwarding_only()) return g_next_vmem_map.load(std::memory_order_acquire)(va, size, in_offset, handle, flags);
  return detail::vmem_map(vmem_functions_now(), va, size, in_offset, handle.handle, flags);
}

hsa_status_t wrap_vmem_unmap(void* va, std::size_t size) {
  if (forwarding_only()) return g_next_vmem_unmap.load(std::memory_order_acquire)(va, size);
  return detail::vmem_unmap(vmem_functions_now(), va, size);
}

// Wraps map and unmap when the runtime's table holds them; a runtime older than these headers simply gets no
// vmem wrappers.
void install_vmem(AmdExtTable* amd_ext) {
  auto map = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_vmem_map_fn);
  auto unmap = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_vmem_unmap_fn);
  if (map == nullptr || unmap == nullptr) {
    detail::logf(KREPLAY_LOG_INFO, "the runtime's table has no hsa_amd_vmem_map/unmap: mappings are not tracked");
    return;
  }
  g_next_vmem_map.store(map, std::memory_order_release);
  g_next_vmem_unmap.store(unmap, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_release);
  amd_ext->hsa_amd_vmem_map_fn = &wrap_vmem_map;
  amd_ext->hsa_amd_vmem_unmap_fn = &wrap_vmem_unmap;
  g_vmem_installed.store(true, std::memory_order_release);
}
#else
void install_vmem(AmdExtTable* /*amd_ext*/) {
  detail::logf(KREPLAY_LOG_INFO,
               "built against ROCr headers without hsa_amd_vmem_map/unmap: mappings are not tracked");
}
#endif

// ---- Entries that change which code objects are loaded ---------------------------------------------------
//
// kreplay may reuse an agent's module scan (policy cache_module_scan) only while no code object is loaded or
// unloaded. In ROCr's 1.1 core table these change what a scan finds: loading a code object (the three load
// entries: the load, not the freeze, is where ROCr's loader places the code object's variables, and the loader
// iteration already reports an executable that is not frozen yet), defining an external variable (the three
// define entries), freezing (after which the executable's kernels can run), and destroying an executable (its
// variables' memory goes back). Each wrapper drops kreplay's cached scans after
// the saved entry returns, whatever it returned: a call that failed may still have changed something, and
// dropping costs only the next scan. Destroy drops them before as well, so that no snapshot starting during
// the call takes a list that names memory about to be freed. Loads are rare (library loads, JIT): the wrappers
// cost nothing that matters.
std::atomic<decltype(hsa_executable_destroy)*> g_next_executable_destroy{nullptr};
std::atomic<decltype(hsa_executable_freeze)*> g_next_executable_freeze{nullptr};
std::atomic<decltype(hsa_executable_load_code_object)*> g_next_load_code_object{nullptr};
std::atomic<decltype(hsa_executable_load_program_code_object)*> g_next_load_program_code_object{nullptr};
std::atomic<decltype(hsa_executable_load_agent_code_object)*> g_next_load_agent_code_object{nullptr};
std::atomic<decltype(hsa_executable_global_variable_define)*> g_next_global_variable_define{nullptr};
std::atomic<decltype(hsa_executable_agent_global_variable_define)*> g_next_agent_global_variable_define{nullptr};
std::atomic<decltype(hsa_executable_readonly_variable_define)*> g_next_readonly_variable_define{nullptr};
std::atomic<bool> g_module_wrappers_installed{false};

void modules_changed() {
  if (!forwarding_only()) kreplay_modules_changed();
}

// Calls the runtime's entry, then tells kreplay that the module variables may have changed.
template <typename Fn, typename... Args>
hsa_status_t forward_then_changed(const std::atomic<Fn*>& next, Args... args) {
  hsa_status_t status = next.load(std::memory_order_acquire)(args...);
  modules_changed();
  return status;
}

hsa_status_t wrap_executable_destroy(hsa_executable_t executable) {
  modules_changed();
  return forward_then_changed(g_next_executable_destroy, executable);
}

hsa_status_t wrap_executable_freeze(hsa_executable_t executable, const char* options) {
  return forward_then_changed(g_next_executable_freeze, executable, options);
}

hsa_status_t wrap_load_code_object(hsa_executable_t executable, hsa_agent_t agent, hsa_code_object_t code_object,
                                   const char* options) {
  return forward_then_changed(g_next_load_code_object, executable, agent, code_object, options);
}

hsa_status_t wrap_load_program_code_object(hsa_executable_t executable, hsa_code_object_reader_t reader,
                                           const char* options, hsa_loaded_code_object_t* loaded) {
  return forward_then_changed(g_next_load_program_code_object, executable, reader, options, loaded);
}

hsa_status_t wrap_load_agent_code_object(hsa_executable_t executable, hsa_agent_t agent,
                                         hsa_code_object_reader_t reader, const char* options,
                                         hsa_loaded_code_object_t* loaded) {
  return forward_then_changed(g_next_load_agent_code_object, executable, agent, reader, options, loaded);
}

hsa_status_t wrap_global_variable_define(hsa_executable_t executable, const char* name, void* address) {
  return forward_then_changed(g_next_global_variable_define, executable, name, address);
}

hsa_status_t wrap_agent_global_variable_define(hsa_executable_t executable, hsa_agent_t agent, const char* name,
                                               void* address) {
  return forward_then_changed(g_next_agent_global_variable_define, executable, agent, name, address);
}

hsa_status_t wrap_readonly_variable_define(hsa_executable_t executable, hsa_agent_t agent, const char* name,
                                           void* address) {
  return forward_then_changed(g_next_readonly_variable_define, executable, agent, name, address);
}

// Saves and replaces one entry when the runtime's table holds it; false when it does not.
template <typename Fn>
bool wrap_entry(Fn*& entry, std::atomic<Fn*>& saved, Fn* wrapper) {
  if (entry == nullptr) return false;
  saved.store(entry, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_release);
  entry = wrapper;
  return true;
}

// Wraps every entry of the table that the table holds; the module-scan cache is turned on only when all of
// them were, since a load through an unwrapped entry would leave a stale list in the cache.
void install_module_wrappers(CoreApiTable* core) {
  const bool in_table =
      KREPLAY_HSA_ENTRY(core, hsa_executable_destroy_fn) != nullptr &&
      KREPLAY_HSA_ENTRY(core, hsa_executable_freeze_fn) != nullptr &&
      KREPLAY_HSA_ENTRY(core, hsa_executable_load_code_object_fn) != nullptr &&
      KREPLAY_HSA_ENTRY(core, hsa_executable_load_program_code_object_fn) != nullptr &&
      KREPLAY_HSA_ENTRY(core, hsa_executable_load_agent_code_object_fn) != nullptr &&
      KREPLAY_HSA_ENTRY(core, hsa_executable_global_variable_define_fn) != nullptr &&
      KREPLAY_HSA_ENTRY(core, hsa_executable_agent_global_variable_define_fn) != nullptr &&
      KREPLAY_HSA_ENTRY(core, hsa_executable_readonly_variable_define_fn) != nullptr;
  if (!in_table) {
    detail::logf(KREPLAY_LOG_INFO,
                 "the core table lacks an entry that loads or unloads code objects: module scans are not cached");
    return;
  }
  wrap_entry(core->hsa_executable_destroy_fn, g_next_executable_destroy, &wrap_executable_destroy);
  wrap_entry(core->hsa_executable_freeze_fn, g_next_executable_freeze, &wrap_executable_freeze);
  wrap_entry(core->hsa_executable_load_code_object_fn, g_next_load_code_object, &wrap_load_code_object);
  wrap_entry(core->hsa_executable_load_program_code_object_fn, g_next_load_program_code_object,
             &wrap_load_program_code_object);
  wrap_entry(core->hsa_executable_load_agent_code_object_fn, g_next_load_agent_code_object,
             &wrap_load_agent_code_object);
  wrap_entry(core->hsa_executable_global_variable_define_fn, g_next_global_variable_define,
             &wrap_global_variable_define);
  wrap_entry(core->hsa_executable_agent_global_variable_define_fn, g_next_agent_global_variable_define,
             &wrap_agent_global_variable_define);
  wrap_entry(core->hsa_executable_readonly_variable_define_fn, g_next_readonly_variable_define,
             &wrap_readonly_variable_define);
  g_module_wrappers_installed.store(true, std::memory_order_release);
  // Every change is seen now, so the cache is safe: turn it on, with kreplay's defaults for the rest (nothing
  // else has set a policy this early in a host's life; one that sets its own later uses set_policy()).
  kreplay_policy_t policy{};
  policy.struct_size = sizeof policy;
  policy.cache_module_scan = true;
  const kreplay_status_t status = kreplay_set_policy(&policy);
  detail::logf(status == KREPLAY_STATUS_SUCCESS ? KREPLAY_LOG_INFO : KREPLAY_LOG_WARNING,
               "code-object loads and unloads are wrapped: module scans cached (%s)", kreplay_status_string(status));
}

}  // namespace

const char* install_status_string(install_status_t status) {
  switch (status) {
    case INSTALL_SUCCESS: return "installed";
    case INSTALL_REFUSED_NOT_FIRST_INSTANCE: return "refused: not library instance 0";
    case INSTALL_REFUSED_ALREADY_INSTALLED: return "refused: already installed in this process";
    case INSTALL_REFUSED_INVALID_TABLE: return "refused: a table is NULL, too short or lacks an entry";
  }
  return "unknown install status";
}

install_status_t install(CoreApiTable* core, AmdExtTable* amd_ext, std::uint64_t library_instance) {
  if (library_instance != 0) {
    detail::logf(KREPLAY_LOG_INFO, "install: library instance %llu does not install (only instance 0 does)",
                 static_cast<unsigned long long>(library_instance));
    return INSTALL_REFUSED_NOT_FIRST_INSTANCE;
  }
  if (core == nullptr || amd_ext == nullptr) {
    detail::logf(KREPLAY_LOG_ERROR, "install: the core or AMD extension table is NULL; nothing installed");
    return INSTALL_REFUSED_INVALID_TABLE;
  }
  auto memory_allocate = KREPLAY_HSA_ENTRY(core, hsa_memory_allocate_fn);
  auto memory_free = KREPLAY_HSA_ENTRY(core, hsa_memory_free_fn);
  auto pool_allocate = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_pool_allocate_fn);
  auto pool_free = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_pool_free_fn);
  if (memory_allocate == nullptr || memory_free == nullptr || pool_allocate == nullptr || pool_free == nullptr) {
    detail::logf(KREPLAY_LOG_ERROR, "install: a table lacks an allocation entry; nothing installed");
    return INSTALL_REFUSED_INVALID_TABLE;
  }
  // Once per process, even across threads: a second install would save the first one's wrappers as its
  // "next" entries and every allocation would call itself until the stack ran out.
  bool expected = false;
  if (!g_installed.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
    detail::logf(KREPLAY_LOG_WARNING, "install: the wrappers are installed already; nothing installed");
    return INSTALL_REFUSED_ALREADY_INSTALLED;
  }
  g_next_memory_allocate.store(memory_allocate, std::memory_order_release);
  g_next_memory_free.store(memory_free, std::memory_order_release);
  g_next_pool_allocate.store(pool_allocate, std::memory_order_release);
  g_next_pool_free.store(pool_free, std::memory_order_release);
  // The tables are plain memory: order the saved entries before the first write that can route a call to a
  // wrapper. Registration normally runs before other threads use the tables; the fence is for when it does not.
  std::atomic_thread_fence(std::memory_order_release);
  core->hsa_memory_allocate_fn = &wrap_memory_allocate;
  core->hsa_memory_free_fn = &wrap_memory_free;
  amd_ext->hsa_amd_memory_pool_allocate_fn = &wrap_pool_allocate;
  amd_ext->hsa_amd_memory_pool_free_fn = &wrap_pool_free;
  install_vmem(amd_ext);
  install_module_wrappers(core);
  detail::install_copy_wrappers(core, amd_ext);
  return INSTALL_SUCCESS;
}

bool module_wrappers_installed() { return g_module_wrappers_installed.load(std::memory_order_acquire); }

kreplay_policy_t recommended_policy() {
  kreplay_policy_t policy{};
  policy.struct_size = sizeof policy;
  policy.host_budget_percent = 50;
  policy.cache_module_scan = module_wrappers_installed();
  return policy;
}

kreplay_status_t set_policy(const kreplay_policy_t* policy) {
  constexpr std::size_t v1_size = offsetof(kreplay_policy_t, max_snapshot_bytes) + sizeof(std::size_t);
  if (policy == nullptr || policy->struct_size < v1_size) {
    detail::logf(KREPLAY_LOG_ERROR, "set_policy: NULL policy or a struct_size below the version-1 fields");
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  // Fields past the caller's struct_size keep kreplay's defaults, which are all zero.
  kreplay_policy_t full{};
  std::memcpy(&full, policy, policy->struct_size < sizeof full ? policy->struct_size : sizeof full);
  full.struct_size = sizeof full;
  full.cache_module_scan = module_wrappers_installed();
  return kreplay_set_policy(&full);
}

bool vmem_wrappers_compiled() { return KREPLAY_HSA_HAVE_VMEM != 0; }

bool vmem_wrappers_installed() { return g_vmem_installed.load(std::memory_order_acquire); }

void finalize() {
  detail::finalized.store(true, std::memory_order_release);
  kreplay_finalize();
}

}  // namespace kreplay::hsa
