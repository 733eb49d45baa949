// kreplay device ops over the CUDA runtime. See include/kreplay/cuda.hpp for the conventions and README.md for
// why each op is built the way it is.
#include "kreplay/cuda.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <vector>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "kernels.hpp"
#include "populate.hpp"

namespace kreplay_cuda {
namespace {

std::atomic<uint64_t> g_copies{0};
std::atomic<uint64_t> g_copy_bytes{0};
std::atomic<uint64_t> g_copy_failures{0};
std::atomic<uint64_t> g_batches{0};
std::atomic<uint64_t> g_batch_copies{0};
std::atomic<uint64_t> g_batch_bytes{0};
std::atomic<uint64_t> g_batch_failures{0};
std::atomic<uint64_t> g_host_locks{0};
std::atomic<uint64_t> g_host_unlocks{0};
std::atomic<uint64_t> g_locked_bytes{0};
std::atomic<uint64_t> g_module_scans{0};
std::atomic<uint64_t> g_digests{0};
std::atomic<uint64_t> g_digest_bytes{0};
std::atomic<uint64_t> g_digest_failures{0};
std::atomic<uint64_t> g_device_allocs{0};
std::atomic<uint64_t> g_device_frees{0};
std::atomic<uint64_t> g_device_bytes{0};
std::atomic<uint64_t> g_device_alloc_failures{0};
std::atomic<uint64_t> g_oom_retries{0};
std::atomic<uint64_t> g_releases{0};
std::atomic<bool> g_sync_after_copy{true};
std::atomic<int> g_copy_method{static_cast<int>(copy_method::automatic)};

// The module-variable table: replaced whole by register_symbols, read whole by a scan.
std::mutex g_symbols_mutex;
const symbol_t* g_symbols = nullptr;
size_t g_symbol_count = 0;

thread_local const char* t_last_error = "";

constexpr size_t kMinDigestBlock = 4096;
constexpr size_t kMaxDigestBlock = 16u << 20;
// copy_batch's automatic method hands copies of at least this size to cudaMemcpyAsync, smaller ones to its kernel.
constexpr size_t kDmaCopyBytes = 1u << 20;

// Records a failed CUDA call and clears the runtime's (non-sticky) last error, so that a later, unrelated
// cudaGetLastError check in the host does not trip over an error the ops already reported.
kreplay_status_t fail(cudaError_t error) {
  t_last_error = cudaGetErrorName(error);
  (void)cudaGetLastError();
  return KREPLAY_STATUS_DEVICE_ERROR;
}

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

// Makes `device` the calling thread's current device for the guard's lifetime, and restores the previous one.
class device_switch {
 public:
  explicit device_switch(int device) {
    int current = -1;
    error_ = cudaGetDevice(&current);
    if (error_ == cudaSuccess && current != device) {
      error_ = cudaSetDevice(device);
      if (error_ == cudaSuccess) {
        previous_ = current;
      }
    }
  }
  ~device_switch() {
    if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) {
      (void)cudaGetLastError();
    }
  }
  device_switch(const device_switch&) = delete;
  device_switch& operator=(const device_switch&) = delete;
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

// Address ranges of one kind (host memory page-locked through host_lock, or device storage from device_alloc):
// how copy_batch tells, without a driver query per pointer, which copies its kernel may do.
class range_set {
 public:
  bool add(const void* ptr, size_t bytes) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    try {
      ranges_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
    } catch (const std::bad_alloc&) {
      return false;
    }
    return true;
  }
  void remove(const void* ptr) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    ranges_.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  std::shared_mutex& mutex() const { return mutex_; }
  // With mutex() held shared. `hint` is the range found last, checked first: a batch's copies usually come in
  // address order from a few large staging mappings.
  bool contains_locked(const void* ptr, size_t bytes, std::pair<uintptr_t, size_t>& hint) const {
    const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
    if (p >= hint.first && p - hint.first <= hint.second && bytes <= hint.second - (p - hint.first)) {
      return true;
    }
    auto it = ranges_.upper_bound(p);
    if (it == ranges_.begin()) {
      return false;
    }
    --it;
    if (p - it->first <= it->second && bytes <= it->second - (p - it->first)) {
      hint = *it;
      return true;
    }
    return false;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, size_t> ranges_;
};

// What one device needs for batches and digests: streams of its own and scratch buffers that grow to the
// largest batch seen. One batch or digest at a time per device and set of ops.
struct device_state {
  std::mutex mutex;
  bool ready = false;
  int sm_count = 0;
  cudaStream_t stream = nullptr;
  // copy_batch's copy-engine copies run here while its kernel runs on `stream`, so a batch of one large region and
  // a few small module variables costs the large copy alone; `stream` waits for `joined` before the batch ends.
  cudaStream_t side = nullptr;
  cudaEvent_t forked = nullptr;
  cudaEvent_t joined = nullptr;
  void* device_scratch = nullptr;
  size_t device_scratch_bytes = 0;
  void* host_scratch = nullptr;  // page-locked
  size_t host_scratch_bytes = 0;
};

// The user_data of one set of ops.
struct context {
  std::vector<std::unique_ptr<device_state>> devices;
  range_set locked;
  range_set storage;
  // Every device can use a registered host pointer as its own address for it
  // (cudaDevAttrCanUseHostPointerForRegisteredMem); otherwise the kernel leaves host copies to cudaMemcpyAsync.
  bool host_pointers_usable = false;
};

context* context_of(void* user_data) { return static_cast<context*>(user_data); }

size_t grow_size(size_t needed) {
  size_t size = 1u << 16;
  while (size < needed) {
    size *= 2;
  }
  return size;
}

// Destroys the device's streams and events (after their work), whichever were made; the device is current.
void release_streams(device_state& state) {
  for (cudaStream_t* stream : {&state.stream, &state.side}) {
    if (*stream != nullptr) {
      (void)cudaStreamSynchronize(*stream);
      (void)cudaStreamDestroy(*stream);
      *stream = nullptr;
    }
  }
  for (cudaEvent_t* event : {&state.forked, &state.joined}) {
    if (*event != nullptr) {
      (void)cudaEventDestroy(*event);
      *event = nullptr;
    }
  }
  (void)cudaGetLastError();
}

// Makes the device's streams, and scratch of at least the given sizes; the device is current.
cudaError_t prepare(device_state& state, int device, size_t device_bytes, size_t host_bytes) {
  if (!state.ready) {
    cudaError_t error = cudaDeviceGetAttribute(&state.sm_count, cudaDevAttrMultiProcessorCount, device);
    if (error == cudaSuccess) {
      // A blocking stream: its work is ordered after the host's work on the legacy default stream and before
      // what the host submits there next, as the single copies (cudaMemcpy) always were. (A pageable cudaMemcpy
      // to the device may return before its bytes land; a batch or digest must not overtake it.)
      error = cudaStreamCreateWithFlags(&state.stream, cudaStreamDefault);
    }
    if (error == cudaSuccess) {
      error = cudaStreamCreateWithFlags(&state.side, cudaStreamDefault);
    }
    if (error == cudaSuccess) {
      error = cudaEventCreateWithFlags(&state.forked, cudaEventDisableTiming);
    }
    if (error == cudaSuccess) {
      error = cudaEventCreateWithFlags(&state.joined, cudaEventDisableTiming);
    }
    if (error != cudaSuccess) {
      release_streams(state);
      return error;
    }
    state.ready = true;
  }
  if (device_bytes > state.device_scratch_bytes) {
    if (state.device_scratch != nullptr) {
      (void)cudaFree(state.device_scratch);
      state.device_scratch = nullptr;
      state.device_scratch_bytes = 0;
    }
    const size_t size = grow_size(device_bytes);
    cudaError_t error = cudaMalloc(&state.device_scratch, size);  // kreplay's own: never tracked
    if (error != cudaSuccess) {
      return error;
    }
    state.device_scratch_bytes = size;
  }
  if (host_bytes > state.host_scratch_bytes) {
    if (state.host_scratch != nullptr) {
      (void)cudaFreeHost(state.host_scratch);
      state.host_scratch = nullptr;
      state.host_scratch_bytes = 0;
    }
    const size_t size = grow_size(host_bytes);
    cudaError_t error = cudaMallocHost(&state.host_scratch, size);
    if (error != cudaSuccess) {
      return error;
    }
    state.host_scratch_bytes = size;
  }
  return cudaSuccess;
}

void destroy(device_state& state, int device) {
  if (!state.ready) {
    return;
  }
  device_switch on_device(device);
  if (on_device.error() != cudaSuccess) {
    (void)cudaGetLastError();
    return;  // the device is gone; its resources went with it
  }
  release_streams(state);
  (void)cudaFree(state.device_scratch);
  (void)cudaFreeHost(state.host_scratch);
  (void)cudaGetLastError();
  state.ready = false;
  state.device_scratch = nullptr;
  state.device_scratch_bytes = 0;
  state.host_scratch = nullptr;
  state.host_scratch_bytes = 0;
}

// The device of `agent` within this set of ops, or -1.
int device_in(const context& ctx, kreplay_agent_t agent) {
  const int device = device_of_agent(agent);
  return device >= 0 && static_cast<size_t>(device) < ctx.devices.size() ? device : -1;
}

// ---- The ops ---------------------------------------------------------------------------------------------

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
      // The extent lets kreplay clamp a recorded size that overruns the allocation (one query per recorded
      // allocation; frees make none).
      if (PFN_cuMemGetAddressRange_v3020 range = address_range_fn()) {
        CUdeviceptr base = 0;
        size_t size = 0;
        if (range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
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
      // Migrates on access from host and device alike: not the coarse-grained device memory a snapshot takes,
      // but counted by a replay window as untracked managed memory.
      info.type = KREPLAY_POINTER_MANAGED;
      info.global_flags = KREPLAY_GLOBAL_FLAG_FINE_GRAINED;
      info.owner = agent_of_device(attributes.device);
      break;
    case cudaMemoryTypeUnregistered:
    default:
      break;
  }
  *info_out = info;
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t op_iterate_module_variables(void*, kreplay_agent_t agent, kreplay_module_variable_visitor_t visit,
                                             void* visit_data) {
  g_module_scans.fetch_add(1, std::memory_order_relaxed);
  const int device = device_of_agent(agent);
  if (device < 0) {
    return KREPLAY_STATUS_SUCCESS;  // not a CUDA device: it has no module variables
  }
  // Each device has its own instance of every module variable: resolve them on the agent's device, whichever
  // thread snapshots it.
  device_switch on_device(device);
  if (on_device.error() != cudaSuccess) {
    return fail(on_device.error());
  }
  const symbol_t* symbols = nullptr;
  size_t count = 0;
  {
    std::lock_guard<std::mutex> lock(g_symbols_mutex);
    symbols = g_symbols;
    count = g_symbol_count;
  }
  for (size_t i = 0; i < count; ++i) {
    const symbol_t& symbol = symbols[i];
    void* address = nullptr;
    size_t size = 0;
    cudaError_t error = cudaGetSymbolAddress(&address, symbol.symbol);
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

kreplay_status_t op_host_lock(void* user_data, void* host_ptr, size_t bytes) {
  if (host_ptr == nullptr || bytes == 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  // Faulted in first, in parallel, with huge pages advised: see adapters/common/populate.hpp.
  kreplay_adapter::populate(host_ptr, bytes);
  // Portable: staging is locked from whichever thread snapshots, and with several devices the registration
  // must count as pinned for every device's context. Mapped: the gather kernel reads and writes it directly.
  cudaError_t error = cudaHostRegister(host_ptr, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (error != cudaSuccess) {
    return fail(error);
  }
  if (!context_of(user_data)->locked.add(host_ptr, bytes)) {
    (void)cudaHostUnregister(host_ptr);
    (void)cudaGetLastError();
    return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
  }
  g_host_locks.fetch_add(1, std::memory_order_relaxed);
  g_locked_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t op_host_unlock(void* user_data, void* host_ptr, size_t bytes) {
  // Forgotten first: no batch may hand the kernel memory that is about to stop being addressable.
  context_of(user_data)->locked.remove(host_ptr);
  cudaError_t error = cudaHostUnregister(host_ptr);
  if (error != cudaSuccess) {
    return fail(error);
  }
  g_host_unlocks.fetch_add(1, std::memory_order_relaxed);
  g_locked_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  return KREPLAY_STATUS_SUCCESS;
}

// Makes `waiter`'s later work wait for what `producer` has been given so far, through `event`.
cudaError_t wait_for(cudaStream_t waiter, cudaStream_t producer, cudaEvent_t event) {
  cudaError_t error = cudaEventRecord(event, producer);
  return error == cudaSuccess ? cudaStreamWaitEvent(waiter, event, 0) : error;
}

// Copies by kernel, and by cudaMemcpyAsync where the kernel may not or (large_to_dma) should not do them.
// The copies the kernel may do: at least one side is memory this set of ops knows (staging it page-locked, or
// device storage it allocated). kreplay's copies always have device memory on at least one side, so the other
// side is device memory (a tracked region or a module variable). Copies between two unknown pointers (pageable
// staging and a region) go to cudaMemcpyAsync, which handles any memory.
cudaError_t copy_with_kernel(context& ctx, device_state& state, int device, const kreplay_copy_t* copies,
                             size_t count, bool large_to_dma) {
  std::vector<unsigned char> by_kernel;
  try {
    by_kernel.assign(count, 0);
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  size_t chunks = 0;
  {
    std::shared_lock<std::shared_mutex> locked_lock(ctx.locked.mutex());
    std::shared_lock<std::shared_mutex> storage_lock(ctx.storage.mutex());
    std::pair<uintptr_t, size_t> locked_hint{0, 0};
    std::pair<uintptr_t, size_t> storage_hint{0, 0};
    for (size_t i = 0; i < count; ++i) {
      const kreplay_copy_t& c = copies[i];
      if (c.bytes == 0) {
        continue;
      }
      const bool known = (ctx.host_pointers_usable && (ctx.locked.contains_locked(c.dst, c.bytes, locked_hint) ||
                                                       ctx.locked.contains_locked(c.src, c.bytes, locked_hint))) ||
                         ctx.storage.contains_locked(c.dst, c.bytes, storage_hint) ||
                         ctx.storage.contains_locked(c.src, c.bytes, storage_hint);
      // Large copies go to the copy engines: measured on an H200, a 64 MiB cudaMemcpyAsync runs at the link's
      // 55 GB/s where the kernel reaches 51-52 GB/s, and below about 1 MiB each copy's submission costs more
      // than its transfer, which one kernel launch for all of them avoids (README.md, "copy_batch").
      if (known && (c.bytes < kDmaCopyBytes || !large_to_dma)) {
        by_kernel[i] = 1;
        chunks += (c.bytes + detail::kCopyChunkBytes - 1) / detail::kCopyChunkBytes;
      }
    }
  }
  const size_t table_bytes = chunks * sizeof(detail::copy_chunk);
  cudaError_t error = prepare(state, device, table_bytes, table_bytes);
  if (error != cudaSuccess) {
    return error;
  }
  // With both kinds of copies, the copy engines' copies run on the side stream, at the same time as the kernel.
  bool dma = false;
  for (size_t i = 0; i < count && !dma; ++i) {
    dma = by_kernel[i] == 0 && copies[i].bytes != 0;
  }
  const bool fork = chunks != 0 && dma;
  cudaStream_t dma_stream = fork ? state.side : state.stream;
  error = fork ? wait_for(state.side, state.stream, state.forked) : cudaSuccess;
  if (error != cudaSuccess) {
    return error;
  }
  for (size_t i = 0; i < count; ++i) {
    if (by_kernel[i] == 0 && copies[i].bytes != 0) {
      error = cudaMemcpyAsync(copies[i].dst, copies[i].src, copies[i].bytes, cudaMemcpyDefault, dma_stream);
      if (error != cudaSuccess) {
        return error;
      }
    }
  }
  if (chunks != 0) {
    detail::copy_chunk* table = static_cast<detail::copy_chunk*>(state.host_scratch);
    size_t n = 0;
    for (size_t i = 0; i < count; ++i) {
      if (by_kernel[i] == 0) {
        continue;
      }
      const kreplay_copy_t& c = copies[i];
      for (size_t offset = 0; offset < c.bytes; offset += detail::kCopyChunkBytes) {
        const size_t bytes = c.bytes - offset < detail::kCopyChunkBytes ? c.bytes - offset : detail::kCopyChunkBytes;
        table[n++] = {reinterpret_cast<uint64_t>(c.dst) + offset, reinterpret_cast<uint64_t>(c.src) + offset, bytes};
      }
    }
    error = cudaMemcpyAsync(state.device_scratch, table, table_bytes, cudaMemcpyHostToDevice, state.stream);
    if (error == cudaSuccess) {
      error = detail::launch_gather(static_cast<const detail::copy_chunk*>(state.device_scratch), chunks,
                                    state.sm_count, state.stream);
    }
    if (error != cudaSuccess) {
      return error;
    }
  }
  // Joined after the kernel was submitted, so that the two run at once; the batch's wait on `stream` covers both.
  return fork ? wait_for(state.stream, state.side, state.joined) : cudaSuccess;
}

cudaError_t copy_each_async(device_state& state, const kreplay_copy_t* copies, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (copies[i].bytes == 0) {
      continue;
    }
    cudaError_t error = cudaMemcpyAsync(copies[i].dst, copies[i].src, copies[i].bytes, cudaMemcpyDefault,
                                        state.stream);
    if (error != cudaSuccess) {
      return error;
    }
  }
  return cudaSuccess;
}

cudaError_t copy_with_memcpy_batch(device_state& state, const kreplay_copy_t* copies, size_t count) {
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12080
  std::vector<void*> dsts;
  std::vector<void*> srcs;
  std::vector<size_t> sizes;
  try {
    dsts.reserve(count);
    srcs.reserve(count);
    sizes.reserve(count);
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  for (size_t i = 0; i < count; ++i) {
    if (copies[i].bytes != 0) {
      dsts.push_back(copies[i].dst);
      srcs.push_back(const_cast<void*>(copies[i].src));
      sizes.push_back(copies[i].bytes);
    }
  }
  if (dsts.empty()) {
    return cudaSuccess;
  }
  cudaMemcpyAttributes attributes{};
  attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t attribute_index = 0;
#if CUDART_VERSION >= 13000
  return cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attributes, &attribute_index, 1,
                              state.stream);
#else
  size_t failed_index = SIZE_MAX;  // which copy failed: not needed, kreplay redoes the whole batch singly
  return cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attributes, &attribute_index, 1,
                              &failed_index, state.stream);
#endif
#else
  return copy_each_async(state, copies, count);
#endif
}

kreplay_status_t op_copy_batch(void* user_data, kreplay_agent_t agent, const kreplay_copy_t* copies, size_t count) {
  if (count == 0) {
    return KREPLAY_STATUS_SUCCESS;
  }
  context& ctx = *context_of(user_data);
  const int device = device_in(ctx, agent);
  if (copies == nullptr || device < 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  device_switch on_device(device);
  if (on_device.error() != cudaSuccess) {
    g_batch_failures.fetch_add(1, std::memory_order_relaxed);
    return fail(on_device.error());
  }
  device_state& state = *ctx.devices[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(state.mutex);
  cudaError_t error = prepare(state, device, 0, 0);
  if (error == cudaSuccess) {
    switch (static_cast<copy_method>(g_copy_method.load(std::memory_order_relaxed))) {
      case copy_method::memcpy_batch:
        error = copy_with_memcpy_batch(state, copies, count);
        break;
      case copy_method::memcpy_async:
        error = copy_each_async(state, copies, count);
        break;
      case copy_method::kernel:
        error = copy_with_kernel(ctx, state, device, copies, count, false);
        break;
      case copy_method::automatic:
      default:
        error = copy_with_kernel(ctx, state, device, copies, count, true);
        break;
    }
  }
  // Whatever was submitted must finish before the batch reports, failed or not: kreplay redoes a failed batch
  // copy by copy and must not race copies still in flight.
  if (state.ready) {
    cudaError_t wait = cudaStreamSynchronize(state.stream);
    if (error == cudaSuccess) {
      error = wait;
    }
    if (error != cudaSuccess) {
      // A failure may have come before the side stream's work was joined to `stream`.
      (void)cudaStreamSynchronize(state.side);
    }
  }
  if (error != cudaSuccess) {
    g_batch_failures.fetch_add(1, std::memory_order_relaxed);
    return fail(error);
  }
  size_t bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    bytes += copies[i].bytes;
  }
  g_batches.fetch_add(1, std::memory_order_relaxed);
  g_batch_copies.fetch_add(count, std::memory_order_relaxed);
  g_batch_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t op_device_alloc(void* user_data, kreplay_agent_t agent, size_t bytes, void** ptr_out) {
  context& ctx = *context_of(user_data);
  const int device = device_in(ctx, agent);
  if (ptr_out == nullptr || bytes == 0 || device < 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  device_switch on_device(device);
  if (on_device.error() != cudaSuccess) {
    g_device_alloc_failures.fetch_add(1, std::memory_order_relaxed);
    return fail(on_device.error());
  }
  void* ptr = nullptr;
  // The plain cudaMalloc, not malloc_tracked: kreplay's own storage never enters the inventory.
  cudaError_t error = cudaMalloc(&ptr, bytes);
  if (error != cudaSuccess) {
    g_device_alloc_failures.fetch_add(1, std::memory_order_relaxed);
    return fail(error);
  }
  if (!ctx.storage.add(ptr, bytes)) {
    (void)cudaFree(ptr);
    g_device_alloc_failures.fetch_add(1, std::memory_order_relaxed);
    return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
  }
  g_device_allocs.fetch_add(1, std::memory_order_relaxed);
  g_device_bytes.fetch_add(bytes, std::memory_order_relaxed);
  *ptr_out = ptr;
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t op_device_free(void* user_data, kreplay_agent_t agent, void* ptr, size_t bytes) {
  context& ctx = *context_of(user_data);
  const int device = device_in(ctx, agent);
  if (ptr == nullptr || device < 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  device_switch on_device(device);
  if (on_device.error() != cudaSuccess) {
    return fail(on_device.error());
  }
  ctx.storage.remove(ptr);
  cudaError_t error = cudaFree(ptr);
  if (error != cudaSuccess) {
    return fail(error);
  }
  g_device_frees.fetch_add(1, std::memory_order_relaxed);
  g_device_bytes.fetch_sub(bytes, std::memory_order_relaxed);
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t op_digest(void* user_data, kreplay_agent_t agent, const kreplay_digest_job_t* jobs, size_t count,
                           size_t block_bytes) {
  if (count == 0) {
    return KREPLAY_STATUS_SUCCESS;
  }
  context& ctx = *context_of(user_data);
  const int device = device_in(ctx, agent);
  if (jobs == nullptr || device < 0 || block_bytes < kMinDigestBlock || block_bytes > kMaxDigestBlock ||
      (block_bytes & (block_bytes - 1)) != 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  const unsigned block_shift = detail::log2_of(block_bytes);
  uint64_t segments = 0;
  uint64_t blocks = 0;
  size_t live_jobs = 0;
  size_t bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    if (jobs[i].bytes == 0) {
      continue;
    }
    if (jobs[i].address == nullptr || jobs[i].digests_out == nullptr) {
      return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    ++live_jobs;
    bytes += jobs[i].bytes;
    segments += detail::digest_segments(jobs[i].bytes, block_shift);
    blocks += detail::digest_blocks(jobs[i].bytes, block_shift);
  }
  if (live_jobs == 0) {
    return KREPLAY_STATUS_SUCCESS;
  }
  device_switch on_device(device);
  if (on_device.error() != cudaSuccess) {
    g_digest_failures.fetch_add(1, std::memory_order_relaxed);
    return fail(on_device.error());
  }
  device_state& state = *ctx.devices[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(state.mutex);
  // Device scratch: [job table | accumulators | digests]; host scratch: [job table | digests].
  const size_t table_bytes = (live_jobs * sizeof(detail::digest_job_desc) + 255) / 256 * 256;
  const size_t digest_bytes = static_cast<size_t>(blocks) * 2 * sizeof(uint64_t);
  const bool split = block_bytes > detail::kDigestSegmentBytes;
  const size_t accumulator_bytes = split ? digest_bytes : 0;
  cudaError_t error = prepare(state, device, table_bytes + accumulator_bytes + digest_bytes, table_bytes + digest_bytes);
  if (error == cudaSuccess) {
    detail::digest_job_desc* table = static_cast<detail::digest_job_desc*>(state.host_scratch);
    uint64_t segment = 0;
    uint64_t block = 0;
    size_t n = 0;
    for (size_t i = 0; i < count; ++i) {
      if (jobs[i].bytes == 0) {
        continue;
      }
      table[n++] = {reinterpret_cast<uint64_t>(jobs[i].address), jobs[i].bytes, block, segment};
      segment += detail::digest_segments(jobs[i].bytes, block_shift);
      block += detail::digest_blocks(jobs[i].bytes, block_shift);
    }
    unsigned char* device_base = static_cast<unsigned char*>(state.device_scratch);
    auto* device_table = reinterpret_cast<detail::digest_job_desc*>(device_base);
    auto* accumulators = reinterpret_cast<uint64_t*>(device_base + table_bytes);
    auto* device_digests = reinterpret_cast<uint64_t*>(device_base + table_bytes + accumulator_bytes);
    unsigned char* host_digests = static_cast<unsigned char*>(state.host_scratch) + table_bytes;
    error = cudaMemcpyAsync(device_table, table, live_jobs * sizeof(detail::digest_job_desc),
                            cudaMemcpyHostToDevice, state.stream);
    if (error == cudaSuccess) {
      error = detail::launch_digest(device_table, live_jobs, segments, blocks, block_bytes,
                                    split ? accumulators : nullptr, device_digests, state.sm_count, state.stream);
    }
    if (error == cudaSuccess) {
      error = cudaMemcpyAsync(host_digests, device_digests, digest_bytes, cudaMemcpyDeviceToHost, state.stream);
    }
    cudaError_t wait = cudaStreamSynchronize(state.stream);
    if (error == cudaSuccess) {
      error = wait;
    }
    if (error == cudaSuccess) {
      // digests_out is the caller's host memory, possibly pageable: filled from the page-locked copy.
      // Jobs whose outputs follow one another in the caller's memory (kreplay's usually do) are one memcpy.
      size_t offset = 0;
      unsigned char* run_dst = nullptr;
      size_t run_offset = 0;
      size_t run_bytes = 0;
      for (size_t i = 0; i < count; ++i) {
        if (jobs[i].bytes == 0) {
          continue;
        }
        const size_t job_bytes = detail::digest_blocks(jobs[i].bytes, block_shift) * sizeof(kreplay_digest_t);
        unsigned char* dst = reinterpret_cast<unsigned char*>(jobs[i].digests_out);
        if (run_dst != nullptr && dst == run_dst + run_bytes) {
          run_bytes += job_bytes;
        } else {
          if (run_dst != nullptr) {
            std::memcpy(run_dst, host_digests + run_offset, run_bytes);
          }
          run_dst = dst;
          run_offset = offset;
          run_bytes = job_bytes;
        }
        offset += job_bytes;
      }
      if (run_dst != nullptr) {
        std::memcpy(run_dst, host_digests + run_offset, run_bytes);
      }
    }
  }
  if (error != cudaSuccess) {
    g_digest_failures.fetch_add(1, std::memory_order_relaxed);
    return fail(error);
  }
  g_digests.fetch_add(1, std::memory_order_relaxed);
  g_digest_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return KREPLAY_STATUS_SUCCESS;
}

void op_release(void* user_data) {
  context* ctx = context_of(user_data);
  if (ctx == nullptr) {
    return;
  }
  for (size_t d = 0; d < ctx->devices.size(); ++d) {
    destroy(*ctx->devices[d], static_cast<int>(d));
  }
  delete ctx;
  g_releases.fetch_add(1, std::memory_order_relaxed);
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

kreplay_status_t register_symbols(const symbol_t* symbols, size_t count) {
  if (count != 0 && symbols == nullptr) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  {
    std::lock_guard<std::mutex> lock(g_symbols_mutex);
    g_symbols = symbols;
    g_symbol_count = count;
  }
  // After the swap: a scan that starts from here on sees the new table, and none cached before survives.
  kreplay_modules_changed();
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t make_ops(kreplay_device_ops_t* ops_out) {
  if (ops_out == nullptr) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  int devices = 0;
  cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess) {
    return fail(error);
  }
  std::unique_ptr<context> ctx(new (std::nothrow) context);
  if (ctx == nullptr) {
    return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
  }
  bool usable = devices > 0;
  try {
    for (int d = 0; d < devices; ++d) {
      ctx->devices.push_back(std::make_unique<device_state>());
      int value = 0;
      if (cudaDeviceGetAttribute(&value, cudaDevAttrCanUseHostPointerForRegisteredMem, d) != cudaSuccess) {
        (void)cudaGetLastError();
        value = 0;
      }
      usable = usable && value != 0;
    }
  } catch (const std::bad_alloc&) {
    return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
  }
  ctx->host_pointers_usable = usable;
  kreplay_device_ops_t ops{};
  ops.struct_size = sizeof(ops);
  ops.user_data = ctx.release();
  ops.copy = op_copy;
  ops.pointer_info = op_pointer_info;
  ops.iterate_module_variables = op_iterate_module_variables;
  ops.host_lock = op_host_lock;
  ops.host_unlock = op_host_unlock;
  ops.copy_batch = op_copy_batch;
  ops.device_alloc = op_device_alloc;
  ops.device_free = op_device_free;
  ops.digest = op_digest;
  ops.release = op_release;
  *ops_out = ops;
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t install(const symbol_t* symbols, size_t count) {
  kreplay_status_t status = register_symbols(symbols, count);
  if (status != KREPLAY_STATUS_SUCCESS) {
    return status;
  }
  kreplay_device_ops_t ops{};
  status = make_ops(&ops);
  if (status != KREPLAY_STATUS_SUCCESS) {
    return status;
  }
  status = kreplay_configure(&ops);
  if (status == KREPLAY_STATUS_INVALID_ARGUMENT) {
    // Refused before kreplay took the set. Any later failure (CAPACITY_EXCEEDED, FINALIZED) happens after it
    // took the set, and kreplay itself calls release then: releasing here too would free the context twice.
    op_release(ops.user_data);
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
  return policy;
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
  if (error == cudaErrorMemoryAllocation) {
    // kreplay may hold idle device storage for snapshots: the application comes first. The failed cudaMalloc
    // left its error as the runtime's last error; clear it so the retry's result is the one the host sees.
    (void)cudaGetLastError();
    kreplay_device_trim_all();
    g_oom_retries.fetch_add(1, std::memory_order_relaxed);
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

stats_t stats() {
  stats_t s{};
  s.copies = g_copies.load(std::memory_order_relaxed);
  s.copy_bytes = g_copy_bytes.load(std::memory_order_relaxed);
  s.copy_failures = g_copy_failures.load(std::memory_order_relaxed);
  s.batches = g_batches.load(std::memory_order_relaxed);
  s.batch_copies = g_batch_copies.load(std::memory_order_relaxed);
  s.batch_bytes = g_batch_bytes.load(std::memory_order_relaxed);
  s.batch_failures = g_batch_failures.load(std::memory_order_relaxed);
  s.host_locks = g_host_locks.load(std::memory_order_relaxed);
  s.host_unlocks = g_host_unlocks.load(std::memory_order_relaxed);
  s.locked_bytes = g_locked_bytes.load(std::memory_order_relaxed);
  s.module_scans = g_module_scans.load(std::memory_order_relaxed);
  s.digests = g_digests.load(std::memory_order_relaxed);
  s.digest_bytes = g_digest_bytes.load(std::memory_order_relaxed);
  s.digest_failures = g_digest_failures.load(std::memory_order_relaxed);
  s.device_allocs = g_device_allocs.load(std::memory_order_relaxed);
  s.device_frees = g_device_frees.load(std::memory_order_relaxed);
  s.device_bytes = g_device_bytes.load(std::memory_order_relaxed);
  s.device_alloc_failures = g_device_alloc_failures.load(std::memory_order_relaxed);
  s.oom_retries = g_oom_retries.load(std::memory_order_relaxed);
  s.releases = g_releases.load(std::memory_order_relaxed);
  return s;
}

void set_copy_method(copy_method method) { g_copy_method.store(static_cast<int>(method), std::memory_order_relaxed); }

copy_method get_copy_method() { return static_cast<copy_method>(g_copy_method.load(std::memory_order_relaxed)); }

const char* copy_method_name(copy_method method) {
  switch (method) {
    case copy_method::automatic: return "automatic";
    case copy_method::kernel: return "kernel";
    case copy_method::memcpy_batch: return "memcpy_batch";
    case copy_method::memcpy_async: return "memcpy_async";
  }
  return "?";
}

const char* last_op_error() { return t_last_error; }

void set_sync_after_copy(bool enabled) { g_sync_after_copy.store(enabled, std::memory_order_relaxed); }

void digest_on_host(const void* data, size_t bytes, size_t block_bytes, kreplay_digest_t* out) {
  static_assert(sizeof(kreplay_digest_t) == 2 * sizeof(uint64_t), "a digest is two 64-bit words, lo then hi");
  detail::digest_on_host(data, bytes, block_bytes, reinterpret_cast<uint64_t*>(out));
}

}  // namespace kreplay_cuda
