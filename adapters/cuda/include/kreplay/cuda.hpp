// kreplay::cuda -- kreplay's device operations over the CUDA runtime, and the allocation wrapper a CUDA host puts
// around cudaMalloc / cudaFree.
//
// Agents: the agent of CUDA device ordinal d has handle d + 1. Handle 0 is what a zero-initialised
// kreplay_staging_buffer_t carries, so keeping real agents away from it makes a mix-up visible.
//
// Module variables: CUDA gives a tool no public way to walk a loaded module's globals, so the host names the
// ones it owns (its own __device__ and __constant__ symbols) in a table, and the scan resolves each one with
// cudaGetSymbolAddress / cudaGetSymbolSize on the agent's device. Registering a table tells kreplay that the
// module variables changed (kreplay_modules_changed), so a host may turn on the policy's cache_module_scan.
//
// The ops (README.md beside this folder has the details and the measurements behind each choice):
//   copy                      cudaMemcpy, complete on return
//   copy_batch                one gather/scatter kernel for the copies between device memory and host memory
//                             page-locked through host_lock under 1 MiB, and between device memory and device
//                             storage under 32 MiB; cudaMemcpyAsync for larger copies and for pageable memory;
//                             one wait
//   device_alloc/device_free  cudaMalloc / cudaFree on the agent's device, never through the tracking wrapper
//   digest                    a kernel: one 128-bit digest per block (README.md: the function, the collision odds)
//   release                   frees the streams and scratch buffers of one set of ops
//
// Thread safety: every function here may be called from any thread. The ops switch the calling thread's current
// device to the agent's and restore it before they return.
#ifndef KREPLAY_CUDA_HPP
#define KREPLAY_CUDA_HPP

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kreplay.h"

namespace kreplay::cuda {

// One module-scope variable of the host program: `symbol` is the address of the __device__ / __constant__
// variable as host code sees it (the argument cudaGetSymbolAddress takes).
struct symbol_t {
  const char* name;
  const void* symbol;
  bool is_constant;
};

// What the ops have done, process-wide (for tests and the benchmark's notes): the sum over every set of ops, live
// or released, and the calls made outside a set (copy, malloc_tracked).
struct stats_t {
  uint64_t copies;          // single copies (the copy op)
  uint64_t copy_bytes;
  uint64_t copy_failures;
  uint64_t batches;         // copy_batch calls that succeeded
  uint64_t batch_copies;    // copies in them
  uint64_t batch_bytes;
  uint64_t batch_failures;  // copy_batch calls that returned an error
  uint64_t host_locks;
  uint64_t host_unlocks;
  uint64_t locked_bytes;    // page-locked by host_lock and not yet unlocked
  uint64_t module_scans;
  uint64_t digests;         // digest calls that succeeded
  uint64_t digest_bytes;
  uint64_t digest_failures;
  uint64_t device_allocs;   // device_alloc calls that succeeded
  uint64_t device_frees;
  uint64_t device_bytes;    // allocated by device_alloc and not yet freed
  uint64_t device_alloc_failures;
  uint64_t oom_retries;     // malloc_tracked calls that trimmed kreplay's device storage and tried again
  uint64_t releases;        // sets of ops released
};

// Inline, so that code which links neither this adapter nor the CUDA runtime (the injection's tracker and its
// GPU-free tests) numbers agents the same way. A negative ordinal (no device) gives handle 0.
inline kreplay_agent_t agent_of_device(int ordinal) {
  kreplay_agent_t agent{};
  agent.handle = ordinal >= 0 ? static_cast<uint64_t>(ordinal) + 1 : 0;
  return agent;
}
// -1 for a handle that names no device.
inline int device_of_agent(kreplay_agent_t agent) {
  if (agent.handle == 0 || agent.handle > 1u << 16) {
    return -1;
  }
  return static_cast<int>(agent.handle - 1);
}

// Makes the module-variable table `symbols` (NULL when count is 0) the one the scan resolves, and calls
// kreplay_modules_changed() so that no cached scan outlives it. The table is not copied: it must stay valid
// until another table replaces it or kreplay stops using the ops.
kreplay_status_t register_symbols(const symbol_t* symbols, size_t count);

// Fills *ops_out with a new set of ops over the CUDA runtime (its own streams and scratch buffers, made on first
// use) without installing it. The caller hands it to kreplay_configure, which takes it over unless it answers
// INVALID_ARGUMENT (kreplay then calls release itself, once, when it stops using the set); a set that kreplay
// never took, the caller releases with ops_out->release(ops_out->user_data), once.
kreplay_status_t make_runtime_ops(kreplay_device_ops_t* ops_out);

// The device's context was destroyed (cudaDeviceReset, cuDevicePrimaryCtxReset, cuCtxDestroy of the context the
// set worked in): the set forgets the streams, events and scratch it made there and which host memory it had
// page-locked and which device storage it handed out, without calling CUDA (all of it went with the context),
// and makes what it needs anew on its next use. The host also tells kreplay (kreplay_agent_reset), which forgets
// its own device storage and page-locking for the agent. Not thread-safe against ops running on the device.
// A set of ops not made by make_runtime_ops is left as it is.
void forget_device(const kreplay_device_ops_t& ops, int device);

// register_symbols, then make_runtime_ops and kreplay_configure. The policy stays the host's: recommended_policy() is the
// one this adapter is measured with.
kreplay_status_t install(const symbol_t* symbols, size_t count);

// pin_staging on (the gather kernel reads and writes page-locked staging directly), cache_module_scan on (the
// adapter reports every change of its symbol table), digest_block_bytes 64 KiB, host_budget_percent 50 (a
// snapshot may hold at most half of the host memory available at its capture, upstream's default);
// device_budget_bytes 0 and dirty_only off (the host chooses those: docs/integration.md).
kreplay_policy_t recommended_policy();

// The copy op itself, for harness modes that must move bytes exactly as kreplay does.
kreplay_status_t copy(void* dst, const void* src, size_t bytes);

// cudaMalloc, then kreplay_record_alloc. On cudaErrorMemoryAllocation it gives back the device storage kreplay
// holds idle (kreplay_device_trim_all) and tries once more. The allocation's result is returned; what kreplay
// said about it goes to *record_out when non-NULL (SUCCESS when the allocation failed and nothing was recorded).
cudaError_t malloc_tracked(void** ptr_out, size_t bytes, kreplay_status_t* record_out = nullptr);
// kreplay_record_free before cudaFree, so no restore can write into memory already given back; when cudaFree
// fails the allocation is still live, and kreplay_record_free_undo puts it back with its generation.
cudaError_t free_tracked(void* ptr, kreplay_status_t* record_out = nullptr);

stats_t stats();

// How copy_batch moves its copies. `automatic` is the shipped choice; the others exist so that the benchmark can
// measure the candidates side by side (process-wide; read at the start of each batch).
enum class copy_method : int {
  automatic = 0,      // by the gather/scatter kernel copies under 1 MiB to or from page-locked host memory and
                      // under 32 MiB within the device, larger ones and pageable memory by
                      // cudaMemcpyAsync (the copy engines)
  kernel = 1,         // every copy the kernel may do by the kernel; pageable memory by cudaMemcpyAsync
  memcpy_batch = 2,   // one cudaMemcpyBatchAsync (CUDA 12.8+; elsewhere: memcpy_async)
  memcpy_async = 3,   // cudaMemcpyAsync per copy on one stream, one wait
};
void set_copy_method(copy_method method);
copy_method get_copy_method();
const char* copy_method_name(copy_method method);
// The method copy_method_name calls `name`; false (and `*method_out` untouched) for any other text or NULL.
bool copy_method_from_name(const char* name, copy_method* method_out);

// The digest op's function computed on the host, for `bytes` of host memory: ceil(bytes / block_bytes) digests to
// `out`. Tests compare the device's digests with it; README.md defines the function.
void digest_on_host(const void* data, size_t bytes, size_t block_bytes, kreplay_digest_t* out);

// Diagnostic knob (on by default): whether the copy op waits for the legacy stream after each cudaMemcpy. The
// wait is what makes a pageable host-to-device copy complete on return; with page-locked host memory
// cudaMemcpy is synchronous anyway, so turning it off there measures what the wait itself costs per copy.
void set_sync_after_copy(bool enabled);

// The last CUDA error an op saw, as text ("" when none); for messages only.
const char* last_op_error();

// cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream) inside kreplay's async-copy fence (version 3): the
// copy names the agents of the devices its pointers are on. While a replay window is open on one of them it waits
// (kreplay_copy_begin) until the window closes; once issued it counts as in flight on them until the stream
// reaches it, so a window opened meanwhile waits for its bytes instead of capturing them half-written. Host-only
// copies are not fenced. Returns the copy's error.
cudaError_t memcpy_async_fenced(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace kreplay::cuda

#endif  // KREPLAY_CUDA_HPP
