// configure(): kreplay's device operations from the host's captured, un-wrapped HSA tables.
#include "internal.hpp"
#include "table.hpp"

#include <kreplay/hsa.hpp>

#include <cstring>
#include <new>

#include "populate.hpp"

namespace kreplay::hsa {
namespace detail {

runtime_functions runtime;

namespace {

// kreplay's pointer types carry hsa_amd_pointer_type_t's values, so the type converts by value.
static_assert(KREPLAY_POINTER_UNKNOWN == static_cast<int>(HSA_EXT_POINTER_TYPE_UNKNOWN), "pointer type values");
static_assert(KREPLAY_POINTER_DEVICE == static_cast<int>(HSA_EXT_POINTER_TYPE_HSA), "pointer type values");
static_assert(KREPLAY_POINTER_LOCKED == static_cast<int>(HSA_EXT_POINTER_TYPE_LOCKED), "pointer type values");
static_assert(KREPLAY_POINTER_GRAPHICS == static_cast<int>(HSA_EXT_POINTER_TYPE_GRAPHICS), "pointer type values");
static_assert(KREPLAY_POINTER_IPC == static_cast<int>(HSA_EXT_POINTER_TYPE_IPC), "pointer type values");
static_assert(KREPLAY_GLOBAL_FLAG_KERNARG == HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT, "global flag values");
static_assert(KREPLAY_GLOBAL_FLAG_FINE_GRAINED == HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, "global flag values");
static_assert(KREPLAY_GLOBAL_FLAG_COARSE_GRAINED == HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
              "global flag values");
static_assert(sizeof(kreplay_agent_t) == sizeof(hsa_agent_t), "kreplay_agent_t has the layout of hsa_agent_t");

kreplay_status_t op_copy(void* user_data, void* dst, const void* src, std::size_t bytes) {
  const auto* ctx = static_cast<const context*>(user_data);
  hsa_status_t status = ctx->memory_copy(dst, src, bytes);
  if (status == HSA_STATUS_SUCCESS) return KREPLAY_STATUS_SUCCESS;
  logf(KREPLAY_LOG_TRACE, "hsa_memory_copy(%p, %p, %zu) failed (status %#x)", dst, src, bytes,
       static_cast<unsigned>(status));
  return KREPLAY_STATUS_DEVICE_ERROR;
}

kreplay_status_t op_pointer_info(void* user_data, const void* ptr, kreplay_pointer_info_t* info_out) {
  const auto* ctx = static_cast<const context*>(user_data);
  hsa_amd_pointer_info_t info{};
  info.size = sizeof info;
  hsa_status_t status = ctx->pointer_info(ptr, &info, nullptr, nullptr, nullptr);
  if (status != HSA_STATUS_SUCCESS) {
    logf(KREPLAY_LOG_TRACE, "hsa_amd_pointer_info(%p) failed (status %#x)", ptr, static_cast<unsigned>(status));
    return KREPLAY_STATUS_DEVICE_ERROR;
  }
  kreplay_pointer_info_t out{};
  out.type = static_cast<kreplay_pointer_type_t>(info.type);
  out.owner = to_kreplay(info.agentOwner);
  out.base = info.agentBaseAddress;
  out.size = info.sizeInBytes;
  if (info.type == HSA_EXT_POINTER_TYPE_UNKNOWN) {
    *info_out = out;
    return KREPLAY_STATUS_SUCCESS;
  }
#if KREPLAY_HSA_POINTER_INFO_HAS_GLOBAL_FLAGS
  // The runtime shrinks info.size to the struct it knows; a field past it was not written.
  const bool have_flags = info.size >= offsetof(hsa_amd_pointer_info_t, global_flags) + sizeof info.global_flags;
  if (have_flags) out.global_flags = info.global_flags;
#else
  const bool have_flags = false;
#endif
  if (!have_flags) {
    // No global flags: derive the grain from the owner. Device allocations owned by a GPU are coarse-grained
    // unless asked otherwise, and system memory (kernarg and fine-grained pools) is owned by a CPU, so this
    // keeps kernarg and host memory out. It does count fine-grained memory of a GPU's own pool as coarse (and
    // so snapshots it); a runtime that old offers nothing finer. A failed query declines, never guesses.
    hsa_device_type_t device = HSA_DEVICE_TYPE_CPU;
    status = ctx->agent_get_info(info.agentOwner, HSA_AGENT_INFO_DEVICE, &device);
    if (status != HSA_STATUS_SUCCESS) {
      logf(KREPLAY_LOG_TRACE, "hsa_agent_get_info(%#llx, DEVICE) failed (status %#x)",
           static_cast<unsigned long long>(info.agentOwner.handle), static_cast<unsigned>(status));
      return KREPLAY_STATUS_DEVICE_ERROR;
    }
    out.global_flags = device == HSA_DEVICE_TYPE_GPU ? KREPLAY_GLOBAL_FLAG_COARSE_GRAINED
                                                     : KREPLAY_GLOBAL_FLAG_FINE_GRAINED;
  }
  *info_out = out;
  return KREPLAY_STATUS_SUCCESS;
}

// kreplay's host_lock names no agent, and staging serves copies to and from any GPU: lock for every agent,
// which hsa_amd_memory_lock does when given no agent list. The range and its agent pointer are remembered for
// copy_batch, which hands the agent pointer to the DMA engines.
kreplay_status_t op_host_lock(void* user_data, void* host_ptr, std::size_t bytes) {
  if (host_ptr == nullptr || bytes == 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  const auto* ctx = static_cast<const context*>(user_data);
  // kreplay locks each staging block once, fresh from mmap: fault it in first, in parallel, with huge pages
  // advised, rather than letting the lock fault it page by page (adapters/common/populate.hpp has the figures,
  // measured with cudaHostRegister; hsa_amd_memory_lock likewise pins pages, and finds them present).
  kreplay::adapter::populate(host_ptr, bytes);
  void* agent_ptr = nullptr;
  hsa_status_t status = ctx->memory_lock(host_ptr, bytes, nullptr, 0, &agent_ptr);
  if (status != HSA_STATUS_SUCCESS) {
    logf(KREPLAY_LOG_TRACE, "hsa_amd_memory_lock(%p, %zu) failed (status %#x)", host_ptr, bytes,
         static_cast<unsigned>(status));
    return KREPLAY_STATUS_DEVICE_ERROR;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(host_ptr);
  const auto agent_base = agent_ptr != nullptr ? reinterpret_cast<std::uintptr_t>(agent_ptr) : base;
  if (!ranges_add(memory_ranges::range{base, bytes, agent_base, memory_ranges::locked_host, 0})) {
    // Still locked and still correct: its batched copies simply go through hsa_memory_copy.
    logf(KREPLAY_LOG_TRACE, "locked range %p (%zu bytes) not remembered: no host memory for the bookkeeping",
         host_ptr, bytes);
  }
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t op_host_unlock(void* user_data, void* host_ptr, std::size_t /*bytes*/) {
  const auto* ctx = static_cast<const context*>(user_data);
  // Forgotten first: from here on no batch hands this range to the DMA engines as locked memory.
  ranges_remove(reinterpret_cast<std::uintptr_t>(host_ptr));
  hsa_status_t status = ctx->memory_unlock(host_ptr);
  return status == HSA_STATUS_SUCCESS ? KREPLAY_STATUS_SUCCESS : KREPLAY_STATUS_DEVICE_ERROR;
}

// ---- The device tier -------------------------------------------------------------------------------------

struct pool_search {
  const context* ctx;
  hsa_agent_t agent;
  hsa_amd_memory_pool_t pool;
  bool found;
  bool needs_access;   // the agent's access to the found pool is not allowed by default
  hsa_status_t error;  // a query that failed: the answer is not known (and not remembered)
};

// A pool for snapshot storage: global, coarse-grained (what kreplay tracks, and the fastest for the agent's
// engines), not kernarg, open to hsa_amd_memory_pool_allocate, and one the agent can be allowed to access.
hsa_status_t consider_pool(hsa_amd_memory_pool_t pool, void* data) {
  auto* search = static_cast<pool_search*>(data);
  const context* ctx = search->ctx;
  hsa_amd_segment_t segment = HSA_AMD_SEGMENT_PRIVATE;
  std::uint32_t flags = 0;
  bool runtime_alloc = false;
  hsa_status_t status = ctx->memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment);
  if (status == HSA_STATUS_SUCCESS && segment == HSA_AMD_SEGMENT_GLOBAL) {
    status = ctx->memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags);
  }
  if (status == HSA_STATUS_SUCCESS && segment == HSA_AMD_SEGMENT_GLOBAL) {
    status = ctx->memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, &runtime_alloc);
  }
  if (status != HSA_STATUS_SUCCESS) {
    search->error = status;
    return status;
  }
  const bool coarse = (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) != 0;
  const bool kernarg = (flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) != 0;
  if (segment != HSA_AMD_SEGMENT_GLOBAL || !coarse || kernarg || !runtime_alloc) return HSA_STATUS_SUCCESS;
  hsa_amd_memory_pool_access_t access = HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT;
  if (ctx->agent_memory_pool_get_info != nullptr) {
    status = ctx->agent_memory_pool_get_info(search->agent, pool, HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS, &access);
    if (status != HSA_STATUS_SUCCESS) {
      search->error = status;
      return status;
    }
  }
  if (access == HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED) return HSA_STATUS_SUCCESS;
  if (access == HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT && ctx->agents_allow_access == nullptr) {
    return HSA_STATUS_SUCCESS;
  }
  search->pool = pool;
  search->found = true;
  search->needs_access = access == HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT;
  return HSA_STATUS_INFO_BREAK;
}

// The agent's pool for device storage, searched once per agent and context. False when the agent has none or
// the search failed (logged).
bool storage_pool(context* ctx, hsa_agent_t agent, hsa_amd_memory_pool_t* pool_out, bool* needs_access_out) {
  {
    std::lock_guard<std::mutex> lock(ctx->pool_mutex);
    for (std::size_t i = 0; i < ctx->agent_pool_count; ++i) {
      const context::agent_pool& known = ctx->agent_pools[i];
      if (known.agent != agent.handle) continue;
      *pool_out = known.pool;
      *needs_access_out = known.needs_access;
      return known.usable;
    }
  }
  pool_search search{ctx, agent, hsa_amd_memory_pool_t{0}, false, false, HSA_STATUS_SUCCESS};
  const hsa_status_t status = ctx->agent_iterate_memory_pools(agent, &consider_pool, &search);
  if (!search.found && (search.error != HSA_STATUS_SUCCESS || status != HSA_STATUS_SUCCESS)) {
    logf(KREPLAY_LOG_INFO, "agent %#llx: querying its memory pools failed (status %#x); no device storage now",
         static_cast<unsigned long long>(agent.handle),
         static_cast<unsigned>(search.error != HSA_STATUS_SUCCESS ? search.error : status));
    return false;
  }
  if (!search.found) {
    logf(KREPLAY_LOG_INFO,
         "agent %#llx has no coarse-grained global pool that allows runtime allocation: snapshots of it stay on the "
         "host",
         static_cast<unsigned long long>(agent.handle));
  }
  std::lock_guard<std::mutex> lock(ctx->pool_mutex);
  if (ctx->agent_pool_count < context::max_agent_pools) {
    ctx->agent_pools[ctx->agent_pool_count++] =
        context::agent_pool{agent.handle, search.pool, search.needs_access, search.found};
  }
  *pool_out = search.pool;
  *needs_access_out = search.needs_access;
  return search.found;
}

kreplay_status_t op_device_alloc(void* user_data, kreplay_agent_t agent, std::size_t bytes, void** ptr_out) {
  auto* ctx = static_cast<context*>(user_data);
  if (ctx == nullptr || ptr_out == nullptr || bytes == 0) return KREPLAY_STATUS_INVALID_ARGUMENT;
  hsa_amd_memory_pool_t pool{0};
  bool needs_access = false;
  if (!storage_pool(ctx, to_hsa(agent), &pool, &needs_access)) return KREPLAY_STATUS_DEVICE_ERROR;
  void* ptr = nullptr;
  // The captured entry, not the wrapper: kreplay's own storage must not enter its inventory, and a refusal here
  // must not trim kreplay's storage to make room for more of it.
  hsa_status_t status = ctx->pool_allocate(pool, bytes, 0, &ptr);
  if (status != HSA_STATUS_SUCCESS || ptr == nullptr) {
    logf(KREPLAY_LOG_TRACE, "agent %#llx: hsa_amd_memory_pool_allocate(%zu) for device storage failed (status %#x)",
         static_cast<unsigned long long>(agent.handle), bytes, static_cast<unsigned>(status));
    return KREPLAY_STATUS_DEVICE_ERROR;
  }
  if (needs_access) {
    const hsa_agent_t agents[1] = {to_hsa(agent)};
    status = ctx->agents_allow_access(1, agents, nullptr, ptr);
    if (status != HSA_STATUS_SUCCESS) {
      logf(KREPLAY_LOG_INFO, "agent %#llx: hsa_amd_agents_allow_access for its device storage failed (status %#x)",
           static_cast<unsigned long long>(agent.handle), static_cast<unsigned>(status));
      ctx->pool_free(ptr);
      return KREPLAY_STATUS_DEVICE_ERROR;
    }
  }
  const auto base = reinterpret_cast<std::uintptr_t>(ptr);
  if (!ranges_add(memory_ranges::range{base, bytes, base, memory_ranges::device, agent.handle})) {
    logf(KREPLAY_LOG_TRACE, "device storage %p (%zu bytes) not remembered: its copies go through hsa_memory_copy",
         ptr, bytes);
  }
  *ptr_out = ptr;
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t op_device_free(void* user_data, kreplay_agent_t agent, void* ptr, std::size_t bytes) {
  auto* ctx = static_cast<context*>(user_data);
  if (ctx == nullptr || ptr == nullptr) return KREPLAY_STATUS_INVALID_ARGUMENT;
  ranges_remove(reinterpret_cast<std::uintptr_t>(ptr));
  const hsa_status_t status = ctx->pool_free(ptr);
  if (status == HSA_STATUS_SUCCESS) return KREPLAY_STATUS_SUCCESS;
  logf(KREPLAY_LOG_WARNING, "agent %#llx: hsa_amd_memory_pool_free(%p, %zu bytes of device storage) failed (status %#x)",
       static_cast<unsigned long long>(agent.handle), ptr, bytes, static_cast<unsigned>(status));
  return KREPLAY_STATUS_DEVICE_ERROR;
}

// HSA_AMD_AGENT_INFO_MEMORY_AVAIL (uint64_t): the bytes free across the global pools the agent owns. ROCr
// headers before 5.x (Debian's 5.2.3 among them) stop before it, so its value is spelled out; it is part of
// ROCr's ABI and passed through hsa_agent_get_info the way every extension attribute is. A runtime that does
// not know it refuses the query, which kreplay takes as "no device storage for this capture".
constexpr unsigned agent_info_memory_avail = 0xA015;

kreplay_status_t op_device_free_bytes(void* user_data, kreplay_agent_t agent, std::size_t* bytes_out) {
  const auto* ctx = static_cast<const context*>(user_data);
  if (ctx == nullptr || bytes_out == nullptr) return KREPLAY_STATUS_INVALID_ARGUMENT;
  std::uint64_t avail = 0;
  const hsa_status_t status =
      ctx->agent_get_info(to_hsa(agent), static_cast<hsa_agent_info_t>(agent_info_memory_avail), &avail);
  if (status != HSA_STATUS_SUCCESS) {
    logf(KREPLAY_LOG_TRACE, "agent %#llx: hsa_agent_get_info(MEMORY_AVAIL) failed (status %#x)",
         static_cast<unsigned long long>(agent.handle), static_cast<unsigned>(status));
    return KREPLAY_STATUS_DEVICE_ERROR;
  }
  *bytes_out = avail > SIZE_MAX ? SIZE_MAX : static_cast<std::size_t>(avail);
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t op_digest(void* user_data, kreplay_agent_t agent, const kreplay_digest_job_t* jobs, std::size_t count,
                           std::size_t block_bytes) {
  const auto* ctx = static_cast<const context*>(user_data);
  return ctx->digest(ctx->digest_data, agent, jobs, count, block_bytes);
}

void op_release(void* user_data) {
  auto* ctx = static_cast<context*>(user_data);
  if (ctx == nullptr) return;
  destroy_signal_pool(ctx);
  delete ctx;
}

// The caller's options over the defaults; false when the struct is older than version 1.
bool read_options(const configure_options_t* options, configure_options_t& opts) {
  opts = configure_options_t{};
  opts.struct_size = sizeof opts;
  if (options == nullptr) return true;
  // The version-1 struct ended after iterate_executables_data; later fields keep their defaults.
  constexpr std::size_t v1_size = offsetof(configure_options_t, iterate_executables_data) + sizeof(void*);
  if (options->struct_size < v1_size) return false;
  std::memcpy(&opts, options, options->struct_size < sizeof opts ? options->struct_size : sizeof opts);
  opts.struct_size = sizeof opts;
  return true;
}

// Fills ctx with the runtime's entries and the caller's callbacks.
void take_entries(context* ctx, const CoreApiTable* core, const AmdExtTable* amd_ext,
                  const configure_options_t& opts) {
  ctx->memory_copy = KREPLAY_HSA_ENTRY(core, hsa_memory_copy_fn);
  ctx->agent_get_info = KREPLAY_HSA_ENTRY(core, hsa_agent_get_info_fn);
  ctx->iterate_agent_symbols = KREPLAY_HSA_ENTRY(core, hsa_executable_iterate_agent_symbols_fn);
  ctx->symbol_get_info = KREPLAY_HSA_ENTRY(core, hsa_executable_symbol_get_info_fn);
  ctx->get_major_extension_table = KREPLAY_HSA_ENTRY(core, hsa_system_get_major_extension_table_fn);
  ctx->iterate_agents = KREPLAY_HSA_ENTRY(core, hsa_iterate_agents_fn);
  ctx->signal_create = KREPLAY_HSA_ENTRY(core, hsa_signal_create_fn);
  ctx->signal_destroy = KREPLAY_HSA_ENTRY(core, hsa_signal_destroy_fn);
  ctx->signal_store_relaxed = KREPLAY_HSA_ENTRY(core, hsa_signal_store_relaxed_fn);
  ctx->signal_load_scacquire = KREPLAY_HSA_ENTRY(core, hsa_signal_load_scacquire_fn);
  ctx->signal_wait_scacquire = KREPLAY_HSA_ENTRY(core, hsa_signal_wait_scacquire_fn);
  ctx->pointer_info = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_pointer_info_fn);
  ctx->memory_lock = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_lock_fn);
  ctx->memory_unlock = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_unlock_fn);
  ctx->agent_iterate_memory_pools = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_agent_iterate_memory_pools_fn);
  ctx->memory_pool_get_info = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_pool_get_info_fn);
  ctx->agent_memory_pool_get_info = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_agent_memory_pool_get_info_fn);
  ctx->pool_allocate = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_pool_allocate_fn);
  ctx->pool_free = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_pool_free_fn);
  ctx->agents_allow_access = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_agents_allow_access_fn);
  ctx->async_copy = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_async_copy_fn);
  ctx->iterate_executables = opts.iterate_executables;
  ctx->iterate_executables_data = opts.iterate_executables_data;
  ctx->digest = opts.digest;
  ctx->digest_data = opts.digest_data;
}

// The entries without which kreplay cannot work at all.
bool has_required_entries(const context* ctx) {
  return ctx->memory_copy != nullptr && ctx->pointer_info != nullptr && ctx->agent_get_info != nullptr &&
         ctx->iterate_agent_symbols != nullptr && ctx->symbol_get_info != nullptr &&
         (ctx->iterate_executables != nullptr || ctx->get_major_extension_table != nullptr);
}

// The wrappers' view of the runtime (see runtime_functions).
void publish_runtime(const context* ctx, const AmdExtTable* amd_ext) {
  runtime.pointer_info.store(ctx->pointer_info, std::memory_order_release);
  runtime.iterate_agents.store(ctx->iterate_agents, std::memory_order_release);
  runtime.agent_get_info.store(ctx->agent_get_info, std::memory_order_release);
  runtime.agent_iterate_memory_pools.store(ctx->agent_iterate_memory_pools, std::memory_order_release);
  runtime.memory_pool_get_info.store(ctx->memory_pool_get_info, std::memory_order_release);
#if KREPLAY_HSA_HAVE_VMEM
  runtime.vmem_get_alloc_properties.store(KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_vmem_get_alloc_properties_from_handle_fn),
                                          std::memory_order_release);
  runtime.vmem_retain_alloc_handle.store(KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_vmem_retain_alloc_handle_fn),
                                         std::memory_order_release);
  runtime.vmem_handle_release.store(KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_vmem_handle_release_fn),
                                    std::memory_order_release);
#else
  (void)amd_ext;
#endif
}

// The ops over ctx. Each optional op needs all of its entries; without them kreplay does without that op.
kreplay_device_ops_t ops_over(context* ctx) {
  const bool can_pin = ctx->memory_lock != nullptr && ctx->memory_unlock != nullptr;
  const bool can_batch = ctx->async_copy != nullptr && ctx->signal_create != nullptr &&
                         ctx->signal_destroy != nullptr && ctx->signal_store_relaxed != nullptr &&
                         ctx->signal_load_scacquire != nullptr && ctx->signal_wait_scacquire != nullptr &&
                         ctx->iterate_agents != nullptr;
  const bool can_store = ctx->pool_allocate != nullptr && ctx->pool_free != nullptr &&
                         ctx->agent_iterate_memory_pools != nullptr && ctx->memory_pool_get_info != nullptr;
  kreplay_device_ops_t ops{};
  ops.struct_size = sizeof ops;
  ops.user_data = ctx;
  ops.copy = &op_copy;
  ops.pointer_info = &op_pointer_info;
  ops.iterate_module_variables = &op_iterate_module_variables;
  ops.host_lock = can_pin ? &op_host_lock : nullptr;
  ops.host_unlock = can_pin ? &op_host_unlock : nullptr;
  ops.copy_batch = can_batch ? &op_copy_batch : nullptr;
  ops.device_alloc = can_store ? &op_device_alloc : nullptr;
  ops.device_free = can_store ? &op_device_free : nullptr;
  ops.digest = ctx->digest != nullptr ? &op_digest : nullptr;
  ops.release = &op_release;
  // Only where there is device storage to size: the answer sizes nothing else.
  ops.device_free_bytes = can_store ? &op_device_free_bytes : nullptr;
  return ops;
}

}  // namespace
}  // namespace detail

kreplay_status_t make_device_ops(const CoreApiTable* core, const AmdExtTable* amd_ext,
                                 const configure_options_t* options, kreplay_device_ops_t* ops_out) {
  using detail::context;
  if (core == nullptr || amd_ext == nullptr || ops_out == nullptr) return KREPLAY_STATUS_INVALID_ARGUMENT;
  configure_options_t opts{};
  if (!detail::read_options(options, opts)) return KREPLAY_STATUS_INVALID_ARGUMENT;

  auto* ctx = new (std::nothrow) context{};
  if (ctx == nullptr) return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
  detail::take_entries(ctx, core, amd_ext, opts);
  if (!detail::has_required_entries(ctx)) {
    detail::logf(KREPLAY_LOG_ERROR, "configure: a table lacks an entry kreplay needs; kreplay is not configured");
    delete ctx;
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  detail::publish_runtime(ctx, amd_ext);
  *ops_out = detail::ops_over(ctx);
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t configure(const CoreApiTable* core, const AmdExtTable* amd_ext, const configure_options_t* options) {
  kreplay_device_ops_t ops{};
  kreplay_status_t status = make_device_ops(core, amd_ext, options, &ops);
  if (status != KREPLAY_STATUS_SUCCESS) return status;
  status = kreplay_configure(&ops);
  if (status != KREPLAY_STATUS_SUCCESS) {
    detail::logf(KREPLAY_LOG_ERROR, "configure: kreplay_configure refused the ops (%s)",
                 kreplay_status_string(status));
    // kreplay_configure takes the set (and calls release when it drops it, refused or not) once the ops have
    // passed its argument checks; only an INVALID_ARGUMENT refusal leaves the context with us to free.
    if (status == KREPLAY_STATUS_INVALID_ARGUMENT) ops.release(ops.user_data);
    return status;
  }
  return KREPLAY_STATUS_SUCCESS;
}

}  // namespace kreplay::hsa
