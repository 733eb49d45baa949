// The L2 flush of --cache-control all (cache_flush.hpp says why and when).
#include "replay/cache_flush.hpp"

#include "guard.hpp"

namespace kreplay::cuda::inject {

cache_flusher::scratch& cache_flusher::scratch_of(CUcontext context) {
  scratch& buffer = scratch_[context];
  if (buffer.address != 0 || !buffer.why_not.empty()) {
    return buffer;
  }
  CUdevice device = 0;
  int l2_bytes = 0;
  if (driver_.ctx_get_device_of == nullptr || driver_.device_get_attribute == nullptr ||
      driver_.mem_alloc == nullptr || driver_.memset_d2d32_async == nullptr ||
      driver_.ctx_get_device_of(&device, context) != CUDA_SUCCESS ||
      driver_.device_get_attribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device) != CUDA_SUCCESS ||
      l2_bytes <= 0) {
    buffer.why_not = "the device's L2 size is unknown";
    return buffer;
  }
  const size_t bytes = 2 * static_cast<size_t>(l2_bytes);
  if (driver_.mem_alloc(&buffer.address, bytes) != CUDA_SUCCESS) {
    buffer.address = 0;
    buffer.why_not = "no device memory for the " + std::to_string(bytes) + "-byte flush buffer";
    return buffer;
  }
  buffer.bytes = bytes;
  return buffer;
}

bool cache_flusher::flush(CUcontext context, CUstream stream, std::string* why) {
  own_call_scope own;  // kreplay's allocation and write: the tracker and the replay never see them
  std::lock_guard<std::mutex> lock(mutex_);
  const scratch& buffer = scratch_of(context);
  if (buffer.address == 0) {
    *why = "caches not flushed: " + buffer.why_not;
    return false;
  }
  static unsigned value = 0;  // a new value each time: every line of the buffer is written
  const size_t words = buffer.bytes / sizeof(unsigned);
  if (driver_.memset_d2d32_async(buffer.address, buffer.bytes, ++value, words, 1, stream) != CUDA_SUCCESS ||
      driver_.ctx_synchronize() != CUDA_SUCCESS) {
    *why = "caches not flushed: the write of the flush buffer failed";
    return false;
  }
  return true;
}

void cache_flusher::context_gone(CUcontext context) {
  std::lock_guard<std::mutex> lock(mutex_);
  scratch_.erase(context);
}

}  // namespace kreplay::cuda::inject
