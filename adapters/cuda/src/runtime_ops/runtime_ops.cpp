// A set of runtime ops from birth to release: make_runtime_ops builds its context (one device_state per device,
// filled on first use; whether the devices may address registered host memory) and enrolls its counters in
// stats(); release frees what the devices made and retires the counters. install and recommended_policy are the
// one-call way in for a host.
#include <memory>
#include <new>

#include "context.hpp"
#include "kreplay/cuda.hpp"
#include "ops_table.hpp"

namespace kreplay::cuda {
namespace detail {
namespace {

// One device_state per device, and whether every device can use a registered host pointer as its own address
// for it. False when there was no memory for the states.
bool add_devices(context& ctx, int devices) {
  bool usable = devices > 0;
  try {
    for (int d = 0; d < devices; ++d) {
      ctx.devices.push_back(std::make_unique<device_state>());
      int value = 0;
      if (cudaDeviceGetAttribute(&value, cudaDevAttrCanUseHostPointerForRegisteredMem, d) != cudaSuccess) {
        (void)cudaGetLastError();
        value = 0;
      }
      usable = usable && value != 0;
    }
  } catch (const std::bad_alloc&) {
    return false;
  }
  ctx.host_pointers_usable = usable;
  return true;
}

}  // namespace

void runtime_ops::release(void* user_data) {
  context* ctx = static_cast<context*>(user_data);
  if (ctx == nullptr) {
    return;
  }
  for (size_t d = 0; d < ctx->devices.size(); ++d) {
    destroy(*ctx->devices[d], static_cast<int>(d));
  }
  retire(ctx->stats);
  delete ctx;
}

}  // namespace detail

void forget_device(const kreplay_device_ops_t& ops, int device) {
  if (ops.release != &detail::runtime_ops::release || ops.user_data == nullptr) {
    return;  // not a set of runtime ops
  }
  detail::context& ctx = detail::context_of(ops.user_data);
  if (device >= 0 && static_cast<size_t>(device) < ctx.devices.size()) {
    detail::forget(*ctx.devices[static_cast<size_t>(device)]);
  }
  // Registrations are not told apart by device (host_lock names none): all are forgotten, so no batch hands the
  // kernel a pointer that may no longer be addressable. Those of other devices then take the copy engines' path,
  // which needs none.
  ctx.locked.clear();
}

kreplay_status_t make_runtime_ops(kreplay_device_ops_t* ops_out) {
  if (ops_out == nullptr) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  int devices = 0;
  cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess) {
    return detail::fail(error);
  }
  std::unique_ptr<detail::context> ctx(new (std::nothrow) detail::context);
  if (ctx == nullptr || !detail::add_devices(*ctx, devices) || !detail::enroll(ctx->stats)) {
    return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
  }
  *ops_out = detail::ops_table<detail::runtime_ops>(ctx.release());
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t install(const symbol_t* symbols, size_t count) {
  kreplay_status_t status = register_symbols(symbols, count);
  if (status != KREPLAY_STATUS_SUCCESS) {
    return status;
  }
  kreplay_device_ops_t ops{};
  status = make_runtime_ops(&ops);
  if (status != KREPLAY_STATUS_SUCCESS) {
    return status;
  }
  status = kreplay_configure(&ops);
  if (status == KREPLAY_STATUS_INVALID_ARGUMENT) {
    // Refused before kreplay took the set. Any later failure (CAPACITY_EXCEEDED, FINALIZED) happens after it
    // took the set, and kreplay itself calls release then: releasing here too would free the context twice.
    detail::runtime_ops::release(ops.user_data);
  }
  return status;
}

kreplay_policy_t recommended_policy() {
  kreplay_policy_t policy{};
  policy.struct_size = sizeof(policy);
  policy.pin_staging = true;
  policy.max_snapshot_bytes = 0;
  policy.device_budget_bytes = 0;
  policy.dirty_only = false;
  policy.digest_block_bytes = 64u << 10;
  policy.cache_module_scan = true;
  policy.host_budget_percent = 50;
  return policy;
}

}  // namespace kreplay::cuda
