// Copies: the copy op (single copies, complete on return; also kreplay::cuda::copy, for harnesses that move bytes
// as kreplay does) and the copy_batch op: the copies that touch memory this set of ops knows go to one
// gather/scatter kernel (over the link those under 1 MiB, within the device those under 32 MiB), the rest to
// cudaMemcpyAsync on a side stream at the same time, and the batch waits once (README.md, "copy_batch", has the
// measurements). The other copy methods exist for the benchmark to compare (and KREPLAY_INJECT_COPY_METHOD).
#include <atomic>
#include <new>
#include <shared_mutex>
#include <vector>

#include "context.hpp"
#include "kernels.hpp"
#include "kreplay/cuda.hpp"

namespace kreplay::cuda {
namespace detail {
namespace {

// Process-wide by contract (kreplay/cuda.hpp: set_sync_after_copy, set_copy_method), not statistics.
std::atomic<bool> g_sync_after_copy{true};
std::atomic<int> g_copy_method{static_cast<int>(copy_method::automatic)};

kreplay_status_t copy_counted(counters& stats, void* dst, const void* src, size_t bytes) {
  // With cudaMemcpyDefault the direction comes from the unified address space, as with hsa_memory_copy. A copy
  // from pageable memory to the device may return once the bytes sit in the driver's DMA buffer, before they
  // land; the ops' contract is "complete on return", so wait for the legacy stream, which that copy is on (a
  // no-op wait in every other case).
  cudaError_t error = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  if (error == cudaSuccess && g_sync_after_copy.load(std::memory_order_relaxed)) {
    error = cudaStreamSynchronize(cudaStreamLegacy);
  }
  if (error != cudaSuccess) {
    increase(stats.copy_failures);
    return fail(error);
  }
  increase(stats.copies);
  increase(stats.copy_bytes, bytes);
  return KREPLAY_STATUS_SUCCESS;
}

// Makes `waiter`'s later work wait for what `producer` has been given so far, through `event`.
cudaError_t wait_for(cudaStream_t waiter, cudaStream_t producer, cudaEvent_t event) {
  cudaError_t error = cudaEventRecord(event, producer);
  return error == cudaSuccess ? cudaStreamWaitEvent(waiter, event, 0) : error;
}

// Marks in `by_kernel` the copies the kernel may do, and returns how many chunks they make. The copies the kernel
// may do: at least one side is memory this set of ops knows (staging it page-locked, or device storage it
// allocated on the batch's device). kreplay's copies always have device memory on at least one side, so the other
// side is device memory (a tracked region or a module variable). Copies between two unknown pointers (pageable
// staging and a region) go to cudaMemcpyAsync, which handles any memory.
size_t plan_kernel_copies(const context& ctx, const device_state& state, const kreplay_copy_t* copies, size_t count,
                          bool large_to_dma, std::vector<unsigned char>& by_kernel) {
  size_t chunks = 0;
  std::shared_lock<std::shared_mutex> locked_lock(ctx.locked.mutex());
  std::shared_lock<std::shared_mutex> storage_lock(state.storage.mutex());
  range_set::hint_t locked_hint{0, 0};
  range_set::hint_t storage_hint{0, 0};
  for (size_t i = 0; i < count; ++i) {
    const kreplay_copy_t& c = copies[i];
    if (c.bytes == 0) {
      continue;
    }
    const bool on_device = state.storage.contains_locked(c.dst, c.bytes, storage_hint) ||
                           state.storage.contains_locked(c.src, c.bytes, storage_hint);
    const bool known = on_device ||
                       (ctx.host_pointers_usable && (ctx.locked.contains_locked(c.dst, c.bytes, locked_hint) ||
                                                     ctx.locked.contains_locked(c.src, c.bytes, locked_hint)));
    // Large copies go to the copy engines, measured on an H200 (README.md, "copy_batch"): over the link a 64 MiB
    // cudaMemcpyAsync runs at the link's 55 GB/s where the kernel reaches 51-52 GB/s, and below about 1 MiB each
    // copy's submission costs more than its transfer, which one kernel launch for all of them avoids. Within the
    // device each copy's submission (about 4 us) outweighs what the engines gain over the kernel below 32 MiB.
    if (known && (c.bytes < (on_device ? kDmaCopyBytesOnDevice : kDmaCopyBytes) || !large_to_dma)) {
      by_kernel[i] = 1;
      chunks += (c.bytes + kCopyChunkBytes - 1) / kCopyChunkBytes;
    }
  }
  return chunks;
}

// cudaMemcpyAsync on `stream` for every copy with bytes that the kernel does not take (`by_kernel` NULL: all).
cudaError_t copy_by_engines(const kreplay_copy_t* copies, size_t count, const unsigned char* by_kernel,
                            cudaStream_t stream) {
  for (size_t i = 0; i < count; ++i) {
    if ((by_kernel == nullptr || by_kernel[i] == 0) && copies[i].bytes != 0) {
      cudaError_t error = cudaMemcpyAsync(copies[i].dst, copies[i].src, copies[i].bytes, cudaMemcpyDefault, stream);
      if (error != cudaSuccess) {
        return error;
      }
    }
  }
  return cudaSuccess;
}

// The kernel's copies cut into `chunks` chunks, their table sent to the device, and the kernel launched on
// `stream`; the scratch buffers are large enough for the table.
cudaError_t submit_kernel_copies(device_state& state, const kreplay_copy_t* copies, size_t count,
                                 const std::vector<unsigned char>& by_kernel, size_t chunks) {
  copy_chunk* table = static_cast<copy_chunk*>(state.host_scratch);
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) {
    if (by_kernel[i] == 0) {
      continue;
    }
    const kreplay_copy_t& c = copies[i];
    for (size_t offset = 0; offset < c.bytes; offset += kCopyChunkBytes) {
      const size_t bytes = c.bytes - offset < kCopyChunkBytes ? c.bytes - offset : kCopyChunkBytes;
      table[n++] = {reinterpret_cast<uint64_t>(c.dst) + offset, reinterpret_cast<uint64_t>(c.src) + offset, bytes};
    }
  }
  cudaError_t error =
      cudaMemcpyAsync(state.device_scratch, table, chunks * sizeof(copy_chunk), cudaMemcpyHostToDevice, state.stream);
  if (error == cudaSuccess) {
    error = launch_gather(static_cast<const copy_chunk*>(state.device_scratch), chunks, state.sm_count, state.stream);
  }
  return error;
}

// Copies by kernel, and by cudaMemcpyAsync where the kernel may not or (large_to_dma) should not do them.
cudaError_t copy_with_kernel(context& ctx, device_state& state, int device, const kreplay_copy_t* copies,
                             size_t count, bool large_to_dma) {
  std::vector<unsigned char> by_kernel;
  try {
    by_kernel.assign(count, 0);
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  const size_t chunks = plan_kernel_copies(ctx, state, copies, count, large_to_dma, by_kernel);
  const size_t table_bytes = chunks * sizeof(copy_chunk);
  cudaError_t error = prepare(state, device, table_bytes, table_bytes);
  if (error != cudaSuccess) {
    return error;
  }
  // With both kinds of copies, the copy engines' copies run on the side stream, at the same time as the kernel.
  bool engines = false;
  for (size_t i = 0; i < count && !engines; ++i) {
    engines = by_kernel[i] == 0 && copies[i].bytes != 0;
  }
  const bool fork = chunks != 0 && engines;
  error = fork ? wait_for(state.side, state.stream, state.forked) : cudaSuccess;
  if (error == cudaSuccess) {
    error = copy_by_engines(copies, count, by_kernel.data(), fork ? state.side : state.stream);
  }
  if (error == cudaSuccess && chunks != 0) {
    error = submit_kernel_copies(state, copies, count, by_kernel, chunks);
  }
  if (error != cudaSuccess) {
    return error;
  }
  // Joined after the kernel was submitted, so that the two run at once; the batch's wait on `stream` covers both.
  return fork ? wait_for(state.stream, state.side, state.joined) : cudaSuccess;
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
  return copy_by_engines(copies, count, nullptr, state.stream);
#endif
}

// Submits the batch by the process's copy method; the device is current and `state` locked.
cudaError_t submit_batch(context& ctx, device_state& state, int device, const kreplay_copy_t* copies, size_t count) {
  cudaError_t error = prepare(state, device, 0, 0);
  if (error != cudaSuccess) {
    return error;
  }
  switch (static_cast<copy_method>(g_copy_method.load(std::memory_order_relaxed))) {
    case copy_method::memcpy_batch: return copy_with_memcpy_batch(state, copies, count);
    case copy_method::memcpy_async: return copy_by_engines(copies, count, nullptr, state.stream);
    case copy_method::kernel: return copy_with_kernel(ctx, state, device, copies, count, false);
    case copy_method::automatic:
    default: return copy_with_kernel(ctx, state, device, copies, count, true);
  }
}

// Whatever was submitted must finish before the batch reports, failed or not: kreplay redoes a failed batch
// copy by copy and must not race copies still in flight. Returns the batch's error, else the wait's.
cudaError_t finish_batch(device_state& state, cudaError_t error) {
  if (!state.ready) {
    return error;
  }
  cudaError_t wait = cudaStreamSynchronize(state.stream);
  if (error == cudaSuccess) {
    error = wait;
  }
  if (error != cudaSuccess) {
    // A failure may have come before the side stream's work was joined to `stream`.
    (void)cudaStreamSynchronize(state.side);
  }
  return error;
}

}  // namespace

kreplay_status_t runtime_ops::copy(void* user_data, void* dst, const void* src, size_t bytes) {
  return copy_counted(counters_of(user_data), dst, src, bytes);
}

kreplay_status_t runtime_ops::copy_batch(void* user_data, kreplay_agent_t agent, const kreplay_copy_t* copies,
                                         size_t count) {
  if (count == 0) {
    return KREPLAY_STATUS_SUCCESS;
  }
  context& ctx = context_of(user_data);
  const int device = device_in(ctx, agent);
  if (copies == nullptr || device < 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  device_switch on_device(device);
  if (on_device.error() != cudaSuccess) {
    increase(ctx.stats.batch_failures);
    return fail(on_device.error());
  }
  device_state& state = *ctx.devices[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(state.mutex);
  const cudaError_t error = finish_batch(state, submit_batch(ctx, state, device, copies, count));
  if (error != cudaSuccess) {
    increase(ctx.stats.batch_failures);
    return fail(error);
  }
  size_t bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    bytes += copies[i].bytes;
  }
  increase(ctx.stats.batches);
  increase(ctx.stats.batch_copies, count);
  increase(ctx.stats.batch_bytes, bytes);
  return KREPLAY_STATUS_SUCCESS;
}

}  // namespace detail

kreplay_status_t copy(void* dst, const void* src, size_t bytes) {
  return detail::copy_counted(detail::loose_counters(), dst, src, bytes);
}

void set_sync_after_copy(bool enabled) { detail::g_sync_after_copy.store(enabled, std::memory_order_relaxed); }

void set_copy_method(copy_method method) {
  detail::g_copy_method.store(static_cast<int>(method), std::memory_order_relaxed);
}

copy_method get_copy_method() {
  return static_cast<copy_method>(detail::g_copy_method.load(std::memory_order_relaxed));
}

}  // namespace kreplay::cuda
