// kreplay device ops over the CUDA runtime. See kreplay_cuda.hpp for the agent and module-variable conventions.
#include "kreplay_cuda.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>

#include <cuda.h>
#include <cudaTypedefs.h>

namespace kreplay_cuda {
namespace {

std::atomic<uint64_t> g_copies{0};
std::atomic<uint64_t> g_copy_bytes{0};
std::atomic<uint64_t> g_copy_failures{0};
std::atomic<uint64_t> g_host_locks{0};
std::atomic<uint64_t> g_host_unlocks{0};
std::atomic<uint64_t> g_locked_bytes{0};
std::atomic<uint64_t> g_module_scans{0};
std::atomic<bool> g_sync_after_copy{true};

const symbol_t* g_symbols = nullptr;
size_t g_symbol_count = 0;

thread_local const char* t_last_error = "";

// Records a failed CUDA call and clears the runtime's (non-sticky) last error, so that a later, unrelated
// cudaGetLastError check in the host does not trip over an error the ops already reported.
kreplay_status_t fail(cudaError_t error) {
  t_last_error = cudaGetErrorName(error);
  (void)cudaGetLastError();
  return KREPLAY_STATUS_DEVICE_ERROR;
}

// The runtime API has no call for an allocation's base and size; the driver's cuMemGetAddressRange does.
// Taking it through the runtime's entry-point query keeps the harness free of a link against libcuda.
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

kreplay_status_t op_copy(void*, void* dst, const void* src, size_t bytes) { return copy(dst, src, bytes); }

kreplay_status_t op_pointer_info(void*, const void* ptr, kreplay_pointer_info_t* info_out) {
  cudaPointerAttributes attributes{};
  cudaError_t error = cudaPointerGetAttributes(&attributes, ptr);
  if (error != cudaSuccess) {
    return fail(error);
  }
  kreplay_pointer_info_t info{};
  info.type = KREPLAY_POINTER_UNKNOWN;
  info.base = const_cast<void*>(ptr);
  switch (attributes.type) {
    case cudaMemoryTypeDevice: {
      info.type = KREPLAY_POINTER_DEVICE;
      // cudaMalloc memory is only coherent at kernel boundaries, which is what the HSA coarse-grained flag
      // means and what makes a snapshot between dispatches valid.
      info.global_flags = KREPLAY_GLOBAL_FLAG_COARSE_GRAINED;
      info.owner = agent_of_device(attributes.device);
      if (PFN_cuMemGetAddressRange_v3020 range = address_range_fn()) {
        CUdeviceptr base = 0;
        size_t size = 0;
        CUresult result = range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr));
        if (result != CUDA_SUCCESS) {
          t_last_error = "cuMemGetAddressRange failed";
          return KREPLAY_STATUS_DEVICE_ERROR;
        }
        info.base = reinterpret_cast<void*>(base);
        info.size = size;
      }
      break;
    }
    case cudaMemoryTypeHost:
      // Page-locked host memory: what HSA calls locked. Never snapshotted.
      info.type = KREPLAY_POINTER_LOCKED;
      info.global_flags = KREPLAY_GLOBAL_FLAG_FINE_GRAINED;
      info.owner = agent_of_device(attributes.device);
      break;
    case cudaMemoryTypeManaged:
      // Migrates on access from host and device alike: not the coarse-grained device memory a snapshot takes.
      info.type = KREPLAY_POINTER_UNKNOWN;
      info.global_flags = KREPLAY_GLOBAL_FLAG_FINE_GRAINED;
      break;
    case cudaMemoryTypeUnregistered:
    default:
      break;
  }
  *info_out = info;
  return KREPLAY_STATUS_SUCCESS;
}

// Restores the calling thread's current device when the scan returns.
class device_guard {
 public:
  explicit device_guard(int previous) : previous_(previous) {}
  ~device_guard() {
    if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) {
      (void)cudaGetLastError();
    }
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_;
};

kreplay_status_t op_iterate_module_variables(void*, kreplay_agent_t agent, kreplay_module_variable_visitor_t visit,
                                             void* visit_data) {
  g_module_scans.fetch_add(1, std::memory_order_relaxed);
  int device = device_of_agent(agent);
  if (device < 0) {
    return KREPLAY_STATUS_SUCCESS;  // not a CUDA device: it has no module variables
  }
  int current = -1;
  cudaError_t error = cudaGetDevice(&current);
  if (error != cudaSuccess) {
    return fail(error);
  }
  // Each device has its own instance of every module variable: resolve them on the agent's device, whichever
  // thread snapshots it.
  int previous = -1;
  if (current != device) {
    error = cudaSetDevice(device);
    if (error != cudaSuccess) {
      return fail(error);
    }
    previous = current;
  }
  device_guard guard(previous);
  for (size_t i = 0; i < g_symbol_count; ++i) {
    const symbol_t& symbol = g_symbols[i];
    void* address = nullptr;
    size_t size = 0;
    error = cudaGetSymbolAddress(&address, symbol.symbol);
    if (error == cudaSuccess) {
      error = cudaGetSymbolSize(&size, symbol.symbol);
    }
    if (error != cudaSuccess) {
      return fail(error);  // a variable that cannot be resolved makes the scan incomplete: decline
    }
    kreplay_module_variable_t variable{};
    variable.name = symbol.name;
    variable.name_length = symbol.name != nullptr ? std::strlen(symbol.name) : 0;
    variable.address = address;
    variable.size = size;
    variable.is_constant = symbol.is_constant;
    if (!visit(visit_data, &variable)) {
      break;
    }
  }
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t op_host_lock(void*, void* host_ptr, size_t bytes) {
  // Portable: staging is locked from whichever thread snapshots, and with several devices the registration
  // must count as pinned for every device's context, not only the one current at the time.
  cudaError_t error = cudaHostRegister(host_ptr, bytes, cudaHostRegisterPortable);
  if (error != cudaSuccess) {
    return fail(error);
  }
  g_host_locks.fetch_add(1, std::memory_order_relaxed);
  g_locked_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t op_host_unlock(void*, void* host_ptr, size_t bytes) {
  cudaError_t error = cudaHostUnregister(host_ptr);
  if (error != cudaSuccess) {
    return fail(error);
  }
  g_host_unlocks.fetch_add(1, std::memory_order_relaxed);
  g_locked_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  return KREPLAY_STATUS_SUCCESS;
}

// The allocation's size, for recording it again when cudaFree fails; 0 when it cannot be known.
size_t allocation_size(void* ptr) {
  PFN_cuMemGetAddressRange_v3020 range = address_range_fn();
  if (range == nullptr) {
    return 0;
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  if (range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS ||
      base != reinterpret_cast<CUdeviceptr>(ptr)) {
    return 0;
  }
  return size;
}

}  // namespace

kreplay_agent_t agent_of_device(int ordinal) {
  kreplay_agent_t agent{};
  agent.handle = ordinal >= 0 ? static_cast<uint64_t>(ordinal) + 1 : 0;
  return agent;
}

int device_of_agent(kreplay_agent_t agent) {
  if (agent.handle == 0 || agent.handle > 1u << 16) {
    return -1;
  }
  return static_cast<int>(agent.handle - 1);
}

kreplay_status_t install(const symbol_t* symbols, size_t count) {
  if (count != 0 && symbols == nullptr) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  g_symbols = symbols;
  g_symbol_count = count;
  kreplay_device_ops_t ops{};
  ops.struct_size = sizeof(ops);
  ops.user_data = nullptr;
  ops.copy = op_copy;
  ops.pointer_info = op_pointer_info;
  ops.iterate_module_variables = op_iterate_module_variables;
  ops.host_lock = op_host_lock;
  ops.host_unlock = op_host_unlock;
  return kreplay_configure(&ops);
}

kreplay_status_t copy(void* dst, const void* src, size_t bytes) {
  // With cudaMemcpyDefault the direction comes from the unified address space, as with hsa_memory_copy. A copy
  // from pageable memory to the device may return once the bytes sit in the driver's DMA buffer, before they
  // land; the ops' contract is "complete on return", so wait for the legacy stream, which that copy is on (a
  // no-op wait in every other case).
  cudaError_t error = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (error == cudaSuccess && g_sync_after_copy.load(std::memory_order_relaxed)) {
    error = cudaStreamSynchronize(cudaStreamLegacy);
  }
  if (error != cudaSuccess) {
    g_copy_failures.fetch_add(1, std::memory_order_relaxed);
    return fail(error);
  }
  g_copies.fetch_add(1, std::memory_order_relaxed);
  g_copy_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return KREPLAY_STATUS_SUCCESS;
}

cudaError_t malloc_tracked(void** ptr_out, size_t bytes, kreplay_status_t* record_out) {
  kreplay_status_t record = KREPLAY_STATUS_SUCCESS;
  cudaError_t error = cudaMalloc(ptr_out, bytes);
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
  size_t size = allocation_size(ptr);
  kreplay_status_t record = kreplay_record_free(ptr);
  cudaError_t error = cudaFree(ptr);
  if (error != cudaSuccess && record == KREPLAY_STATUS_SUCCESS && size != 0) {
    // Still allocated, so still a region a kernel may write: track it again.
    record = kreplay_record_alloc(ptr, size, 0);
  }
  if (record_out != nullptr) {
    *record_out = record;
  }
  return error;
}

stats_t stats() {
  stats_t s{};
  s.copies = g_copies.load(std::memory_order_relaxed);
  s.copy_bytes = g_copy_bytes.load(std::memory_order_relaxed);
  s.copy_failures = g_copy_failures.load(std::memory_order_relaxed);
  s.host_locks = g_host_locks.load(std::memory_order_relaxed);
  s.host_unlocks = g_host_unlocks.load(std::memory_order_relaxed);
  s.locked_bytes = g_locked_bytes.load(std::memory_order_relaxed);
  s.module_scans = g_module_scans.load(std::memory_order_relaxed);
  return s;
}

const char* last_op_error() { return t_last_error; }

void set_sync_after_copy(bool enabled) { g_sync_after_copy.store(enabled, std::memory_order_relaxed); }

}  // namespace kreplay_cuda
