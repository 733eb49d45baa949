// install(): the allocation wrappers in the host's live API tables, and finalize().
#include "internal.hpp"
#include "table.hpp"
#include "vmem.hpp"

#include <kreplay/hsa.hpp>

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

// After the runtime refused to free ptr, which kreplay_record_free had already taken out of the inventory.
//
// kreplay_record_alloc needs the size, and kreplay keeps it but offers no lookup. A failed free leaves the
// allocation exactly as it was, so the runtime still describes it: ask hsa_amd_pointer_info now, on this
// rare path, instead of paying a pointer query before every free. The flags are 0 because whatever kreplay
// tracked (or held as lost) was never an executable allocation: those are dropped before anything is kept.
// If the query fails, a placeholder size of one byte is passed on purpose: kreplay_record_alloc then makes the
// same query through the same function (a second query, paid only on this rare path), and when that fails too it
// keeps the pointer as lost, which declines snapshots until the allocation is freed -- the safe outcome when its
// size is unknown. If the runtime answers that the pointer is not memory it knows, kreplay's own query answers
// the same and the pointer is not tracked, exactly as when it was first allocated.
void record_again_after_failed_free(void* ptr, hsa_status_t free_status) {
  if (!kreplay_tracking_is_enabled()) return;
  std::size_t size = 1;
  if (const detail::context* ctx = detail::configured.load(std::memory_order_acquire)) {
    hsa_amd_pointer_info_t info{};
    info.size = sizeof info;
    if (ctx->pointer_info(ptr, &info, nullptr, nullptr, nullptr) == HSA_STATUS_SUCCESS &&
        info.type != HSA_EXT_POINTER_TYPE_UNKNOWN && info.sizeInBytes != 0) {
      const auto base = reinterpret_cast<std::uintptr_t>(info.agentBaseAddress);
      const auto at = reinterpret_cast<std::uintptr_t>(ptr);
      if (at >= base && at - base < info.sizeInBytes) size = info.sizeInBytes - (at - base);
    }
  }
  const kreplay_status_t status = kreplay_record_alloc(ptr, size, 0);
  detail::logf(KREPLAY_LOG_INFO, "free of %p failed (status %#x); recorded again (%s)", ptr,
               static_cast<unsigned>(free_status), kreplay_status_string(status));
}

hsa_status_t wrap_memory_allocate(hsa_region_t region, std::size_t size, void** ptr) {
  hsa_status_t status = g_next_memory_allocate.load(std::memory_order_acquire)(region, size, ptr);
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
  hsa_status_t status = g_next_pool_allocate.load(std::memory_order_acquire)(pool, size, flags, ptr);
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
  const detail::context* ctx = detail::configured.load(std::memory_order_acquire);
  if (ctx == nullptr || ctx->vmem_get_alloc_properties == nullptr) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  hsa_amd_vmem_alloc_handle_t memory_handle{};
  memory_handle.handle = handle;
  hsa_amd_memory_type_t type{};
  return ctx->vmem_get_alloc_properties(memory_handle, pool_out, &type);
}

hsa_status_t thunk_retain_handle(std::uint64_t* handle_out, void* va) {
  const detail::context* ctx = detail::configured.load(std::memory_order_acquire);
  if (ctx == nullptr || ctx->vmem_retain_alloc_handle == nullptr) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  hsa_amd_vmem_alloc_handle_t memory_handle{};
  hsa_status_t status = ctx->vmem_retain_alloc_handle(&memory_handle, va);
  if (status == HSA_STATUS_SUCCESS) *handle_out = memory_handle.handle;
  return status;
}

hsa_status_t thunk_release_handle(std::uint64_t handle) {
  const detail::context* ctx = detail::configured.load(std::memory_order_acquire);
  if (ctx == nullptr || ctx->vmem_handle_release == nullptr) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  hsa_amd_vmem_alloc_handle_t memory_handle{};
  memory_handle.handle = handle;
  return ctx->vmem_handle_release(memory_handle);
}

detail::vmem_functions vmem_functions_now() {
  detail::vmem_functions fns{};
  fns.map = &thunk_map;
  fns.unmap = &thunk_unmap;
  fns.handle_pool = &thunk_handle_pool;
  fns.retain_handle = &thunk_retain_handle;
  fns.release_handle = &thunk_release_handle;
  if (const detail::context* ctx = detail::configured.load(std::memory_order_acquire)) {
    fns.iterate_agents = ctx->iterate_agents;
    fns.agent_get_info = ctx->agent_get_info;
    fns.agent_iterate_memory_pools = ctx->agent_iterate_memory_pools;
    fns.memory_pool_get_info = ctx->memory_pool_get_info;
  }
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
  return INSTALL_SUCCESS;
}

bool vmem_wrappers_compiled() { return KREPLAY_HSA_HAVE_VMEM != 0; }

bool vmem_wrappers_installed() { return g_vmem_installed.load(std::memory_order_acquire); }

void finalize() {
  detail::finalized.store(true, std::memory_order_release);
  kreplay_finalize();
}

}  // namespace kreplay::hsa
