// configure(): kreplay's device operations from the host's captured, un-wrapped HSA tables.
#include "internal.hpp"
#include "table.hpp"

#include <kreplay/hsa.hpp>

#include <new>

namespace kreplay::hsa {
namespace detail {

std::atomic<const context*> configured{nullptr};

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
// which hsa_amd_memory_lock does when given no agent list. The agent pointer it returns is not needed:
// hsa_memory_copy finds a locked range from its host address.
kreplay_status_t op_host_lock(void* user_data, void* host_ptr, std::size_t bytes) {
  const auto* ctx = static_cast<const context*>(user_data);
  void* agent_ptr = nullptr;
  hsa_status_t status = ctx->memory_lock(host_ptr, bytes, nullptr, 0, &agent_ptr);
  if (status == HSA_STATUS_SUCCESS) return KREPLAY_STATUS_SUCCESS;
  logf(KREPLAY_LOG_TRACE, "hsa_amd_memory_lock(%p, %zu) failed (status %#x)", host_ptr, bytes,
       static_cast<unsigned>(status));
  return KREPLAY_STATUS_DEVICE_ERROR;
}

kreplay_status_t op_host_unlock(void* user_data, void* host_ptr, std::size_t /*bytes*/) {
  const auto* ctx = static_cast<const context*>(user_data);
  hsa_status_t status = ctx->memory_unlock(host_ptr);
  return status == HSA_STATUS_SUCCESS ? KREPLAY_STATUS_SUCCESS : KREPLAY_STATUS_DEVICE_ERROR;
}

}  // namespace
}  // namespace detail

kreplay_status_t configure(const CoreApiTable* core, const AmdExtTable* amd_ext, const configure_options_t* options) {
  using detail::context;
  if (core == nullptr || amd_ext == nullptr) return KREPLAY_STATUS_INVALID_ARGUMENT;
  configure_options_t opts{sizeof(configure_options_t), nullptr, nullptr};
  if (options != nullptr) {
    if (options->struct_size < sizeof(configure_options_t)) return KREPLAY_STATUS_INVALID_ARGUMENT;
    opts = *options;
  }

  auto* ctx = new (std::nothrow) context{};
  if (ctx == nullptr) return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
  ctx->memory_copy = KREPLAY_HSA_ENTRY(core, hsa_memory_copy_fn);
  ctx->agent_get_info = KREPLAY_HSA_ENTRY(core, hsa_agent_get_info_fn);
  ctx->iterate_agent_symbols = KREPLAY_HSA_ENTRY(core, hsa_executable_iterate_agent_symbols_fn);
  ctx->symbol_get_info = KREPLAY_HSA_ENTRY(core, hsa_executable_symbol_get_info_fn);
  ctx->get_major_extension_table = KREPLAY_HSA_ENTRY(core, hsa_system_get_major_extension_table_fn);
  ctx->iterate_agents = KREPLAY_HSA_ENTRY(core, hsa_iterate_agents_fn);
  ctx->pointer_info = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_pointer_info_fn);
  ctx->memory_lock = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_lock_fn);
  ctx->memory_unlock = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_unlock_fn);
  ctx->agent_iterate_memory_pools = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_agent_iterate_memory_pools_fn);
  ctx->memory_pool_get_info = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_pool_get_info_fn);
#if KREPLAY_HSA_HAVE_VMEM
  ctx->vmem_get_alloc_properties = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_vmem_get_alloc_properties_from_handle_fn);
  ctx->vmem_retain_alloc_handle = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_vmem_retain_alloc_handle_fn);
  ctx->vmem_handle_release = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_vmem_handle_release_fn);
#endif
  ctx->iterate_executables = opts.iterate_executables;
  ctx->iterate_executables_data = opts.iterate_executables_data;

  const bool complete = ctx->memory_copy != nullptr && ctx->pointer_info != nullptr &&
                        ctx->agent_get_info != nullptr && ctx->iterate_agent_symbols != nullptr &&
                        ctx->symbol_get_info != nullptr &&
                        (ctx->iterate_executables != nullptr || ctx->get_major_extension_table != nullptr);
  if (!complete) {
    detail::logf(KREPLAY_LOG_ERROR, "configure: a table lacks an entry kreplay needs; kreplay is not configured");
    delete ctx;
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  // Pinning needs both halves; without them kreplay simply keeps staging unpinned.
  const bool can_pin = ctx->memory_lock != nullptr && ctx->memory_unlock != nullptr;

  kreplay_device_ops_t ops{};
  ops.struct_size = sizeof ops;
  ops.user_data = ctx;
  ops.copy = &detail::op_copy;
  ops.pointer_info = &detail::op_pointer_info;
  ops.iterate_module_variables = &detail::op_iterate_module_variables;
  ops.host_lock = can_pin ? &detail::op_host_lock : nullptr;
  ops.host_unlock = can_pin ? &detail::op_host_unlock : nullptr;
  kreplay_status_t status = kreplay_configure(&ops);
  if (status != KREPLAY_STATUS_SUCCESS) {
    detail::logf(KREPLAY_LOG_ERROR, "configure: kreplay_configure refused the ops (%s)",
                 kreplay_status_string(status));
    delete ctx;
    return status;
  }
  // The previous context is deliberately not freed (see detail::context): chain it.
  ctx->previous = detail::configured.exchange(ctx, std::memory_order_acq_rel);
  return KREPLAY_STATUS_SUCCESS;
}

}  // namespace kreplay::hsa
