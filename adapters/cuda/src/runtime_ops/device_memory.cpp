// Device memory, both kinds: kreplay's own device storage (the device_alloc, device_free and device_free_bytes
// ops: plain cudaMalloc / cudaFree on the agent's device, never tracked, remembered so that copy_batch's kernel may
// use it), and the host's tracked allocations (malloc_tracked / free_tracked, the wrapper a CUDA host puts around
// cudaMalloc / cudaFree).
#include "context.hpp"
#include "kreplay/cuda.hpp"

namespace kreplay::cuda {
namespace detail {

kreplay_status_t runtime_ops::device_alloc(void* user_data, kreplay_agent_t agent, size_t bytes, void** ptr_out) {
  context& ctx = context_of(user_data);
  const int device = device_in(ctx, agent);
  if (ptr_out == nullptr || bytes == 0 || device < 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  device_switch on_device(device);
  if (on_device.error() != cudaSuccess) {
    increase(ctx.stats.device_alloc_failures);
    return fail(on_device.error());
  }
  void* ptr = nullptr;
  // The plain cudaMalloc, not malloc_tracked: kreplay's own storage never enters the inventory.
  cudaError_t error = cudaMalloc(&ptr, bytes);
  if (error != cudaSuccess) {
    increase(ctx.stats.device_alloc_failures);
    return fail(error);
  }
  if (!ctx.devices[static_cast<size_t>(device)]->storage.add(ptr, bytes)) {
    (void)cudaFree(ptr);
    increase(ctx.stats.device_alloc_failures);
    return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
  }
  increase(ctx.stats.device_allocs);
  increase(ctx.stats.device_bytes, bytes);
  *ptr_out = ptr;
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t runtime_ops::device_free(void* user_data, kreplay_agent_t agent, void* ptr, size_t bytes) {
  context& ctx = context_of(user_data);
  const int device = device_in(ctx, agent);
  if (ptr == nullptr || device < 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  device_switch on_device(device);
  if (on_device.error() != cudaSuccess) {
    return fail(on_device.error());
  }
  ctx.devices[static_cast<size_t>(device)]->storage.remove(ptr);
  cudaError_t error = cudaFree(ptr);
  if (error != cudaSuccess) {
    return fail(error);
  }
  increase(ctx.stats.device_frees);
  decrease(ctx.stats.device_bytes, bytes);
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t runtime_ops::device_free_bytes(void* user_data, kreplay_agent_t agent, size_t* bytes_out) {
  context& ctx = context_of(user_data);
  const int device = device_in(ctx, agent);
  if (bytes_out == nullptr || device < 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  // cudaMemGetInfo answers for the current device: switch to the agent's for the call.
  device_switch on_device(device);
  if (on_device.error() != cudaSuccess) {
    return fail(on_device.error());
  }
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  cudaError_t error = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (error != cudaSuccess) {
    return fail(error);
  }
  *bytes_out = free_bytes;
  return KREPLAY_STATUS_SUCCESS;
}

}  // namespace detail

cudaError_t malloc_tracked(void** ptr_out, size_t bytes, kreplay_status_t* record_out) {
  kreplay_status_t record = KREPLAY_STATUS_SUCCESS;
  cudaError_t error = cudaMalloc(ptr_out, bytes);
  if (error == cudaErrorMemoryAllocation) {
    // kreplay may hold idle device storage for snapshots: the application comes first. The failed cudaMalloc
    // left its error as the runtime's last error; clear it so the retry's result is the one the host sees.
    (void)cudaGetLastError();
    kreplay_device_trim_all();
    detail::increase(detail::loose_counters().oom_retries);
    error = cudaMalloc(ptr_out, bytes);
  }
  if (error == cudaSuccess) {
    record = kreplay_record_alloc(*ptr_out, bytes, 0);
  }
  if (record_out != nullptr) {
    *record_out = record;
  }
  return error;
}

cudaError_t free_tracked(void* ptr, kreplay_status_t* record_out) {
  if (ptr == nullptr) {
    if (record_out != nullptr) {
      *record_out = KREPLAY_STATUS_SUCCESS;
    }
    return cudaFree(ptr);
  }
  kreplay_status_t record = kreplay_record_free(ptr);
  cudaError_t error = cudaFree(ptr);
  if (error != cudaSuccess && record == KREPLAY_STATUS_SUCCESS) {
    // Still allocated, so still a region a kernel may write: put it back as it was (same generation).
    record = kreplay_record_free_undo(ptr);
  }
  if (record_out != nullptr) {
    *record_out = record;
  }
  return error;
}

}  // namespace kreplay::cuda
