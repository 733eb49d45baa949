// The host_lock and host_unlock ops: kreplay's staging blocks page-locked (cudaHostRegister) once each, populated
// first, and remembered in the context so that copy_batch's kernel may read and write them directly.
#include "context.hpp"
#include "populate.hpp"

namespace kreplay::cuda::detail {

kreplay_status_t runtime_ops::host_lock(void* user_data, void* host_ptr, size_t bytes) {
  if (host_ptr == nullptr || bytes == 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  // Faulted in first, in parallel, with huge pages advised: see adapters/common/populate.hpp.
  kreplay::adapter::populate(host_ptr, bytes);
  // Portable: staging is locked from whichever thread snapshots, and with several devices the registration
  // must count as pinned for every device's context. Mapped: the gather kernel reads and writes it directly.
  cudaError_t error = cudaHostRegister(host_ptr, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (error != cudaSuccess) {
    return fail(error);
  }
  context& ctx = context_of(user_data);
  if (!ctx.locked.add(host_ptr, bytes)) {
    (void)cudaHostUnregister(host_ptr);
    (void)cudaGetLastError();
    return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
  }
  increase(ctx.stats.host_locks);
  increase(ctx.stats.locked_bytes, bytes);
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t runtime_ops::host_unlock(void* user_data, void* host_ptr, size_t bytes) {
  context& ctx = context_of(user_data);
  // Forgotten first: no batch may hand the kernel memory that is about to stop being addressable.
  ctx.locked.remove(host_ptr);
  cudaError_t error = cudaHostUnregister(host_ptr);
  if (error != cudaSuccess) {
    return fail(error);
  }
  increase(ctx.stats.host_unlocks);
  decrease(ctx.stats.locked_bytes, bytes);
  return KREPLAY_STATUS_SUCCESS;
}

}  // namespace kreplay::cuda::detail
