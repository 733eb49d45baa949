// The pointer_info op (what kind of memory a pointer is, whose, and the allocation's extent) and the numbering of
// agents: the agent of CUDA device ordinal d has handle d + 1 (kreplay/cuda.hpp says why).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdio>

#include "context.hpp"
#include "kreplay/cuda.hpp"

namespace kreplay::cuda {
namespace detail {
namespace {

// The runtime API has no call for an allocation's base and size; the driver's cuMemGetAddressRange does.
// Taking it through the runtime's entry-point query keeps the adapter free of a link against libcuda.
PFN_cuMemGetAddressRange_v3020 address_range_fn() {
  static PFN_cuMemGetAddressRange_v3020 fn = [] {
    void* raw = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &raw, 3020, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      std::fprintf(stderr, "kreplay_cuda: cuMemGetAddressRange is unavailable; pointer_info reports base = ptr, "
                           "size = 0\n");
      return static_cast<PFN_cuMemGetAddressRange_v3020>(nullptr);
    }
    return reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(raw);
  }();
  return fn;
}

// The kind of memory the runtime says `attributes` describe, as kreplay names it, and its owner; false for memory
// the runtime does not know (left UNKNOWN, with no owner).
bool classify(const cudaPointerAttributes& attributes, kreplay_pointer_info_t& info) {
  const auto kind = [&info](kreplay_pointer_type_t type, uint32_t flags) {
    info.type = type;
    info.global_flags = flags;
  };
  switch (attributes.type) {
    // cudaMalloc memory is only coherent at kernel boundaries, which is what the HSA coarse-grained flag means and
    // what makes a snapshot between dispatches valid.
    case cudaMemoryTypeDevice: kind(KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED); break;
    // Page-locked host memory: what HSA calls locked. Never snapshotted.
    case cudaMemoryTypeHost: kind(KREPLAY_POINTER_LOCKED, KREPLAY_GLOBAL_FLAG_FINE_GRAINED); break;
    // Migrates on access from host and device alike: not the coarse-grained device memory a snapshot takes, but
    // counted by a replay window as untracked managed memory.
    case cudaMemoryTypeManaged: kind(KREPLAY_POINTER_MANAGED, KREPLAY_GLOBAL_FLAG_FINE_GRAINED); break;
    case cudaMemoryTypeUnregistered:
    default: return false;
  }
  info.owner = agent_of_device(attributes.device);
  return true;
}

// The extent lets kreplay clamp a recorded size that overruns the allocation (one query per recorded allocation;
// frees make none). Without the driver's query, base = ptr and size = 0.
kreplay_status_t find_extent(const void* ptr, kreplay_pointer_info_t& info) {
  PFN_cuMemGetAddressRange_v3020 range = address_range_fn();
  if (range == nullptr) {
    return KREPLAY_STATUS_SUCCESS;
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  if (range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
    return fail("cuMemGetAddressRange failed");
  }
  info.base = reinterpret_cast<void*>(base);
  info.size = size;
  return KREPLAY_STATUS_SUCCESS;
}

}  // namespace

kreplay_status_t runtime_ops::pointer_info(void*, const void* ptr, kreplay_pointer_info_t* info_out) {
  cudaPointerAttributes attributes{};
  cudaError_t error = cudaPointerGetAttributes(&attributes, ptr);
  if (error != cudaSuccess) {
    return fail(error);
  }
  kreplay_pointer_info_t info{};
  info.type = KREPLAY_POINTER_UNKNOWN;
  info.base = const_cast<void*>(ptr);
  if (classify(attributes, info) && info.type == KREPLAY_POINTER_DEVICE) {
    const kreplay_status_t status = find_extent(ptr, info);
    if (status != KREPLAY_STATUS_SUCCESS) {
      return status;
    }
  }
  *info_out = info;
  return KREPLAY_STATUS_SUCCESS;
}

}  // namespace detail

}  // namespace kreplay::cuda
