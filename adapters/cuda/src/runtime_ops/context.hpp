// The runtime ops' shared parts: one set's context (per device: streams and scratch; the memory the set knows; its
// counters), the ops' entry points as one class (ops_table.hpp fills the kreplay_device_ops_t from it), and the
// helpers every op uses. Internal: not installed.
//
// Where each op lives:
//   copy.cpp             copy, copy_batch; the copy-method and sync knobs
//   digest.cpp           digest
//   device_memory.cpp    device_alloc, device_free, device_free_bytes; malloc_tracked, free_tracked
//   host_lock.cpp        host_lock, host_unlock
//   pointer_info.cpp     pointer_info, agents
//   module_variables.cpp iterate_module_variables, register_symbols
//   runtime_ops.cpp      make_runtime_ops, release, install, recommended_policy
//   context.cpp          device switching, per-device streams and scratch, errors
//   counters.cpp         stats()
#ifndef KREPLAY_CUDA_RUNTIME_OPS_CONTEXT_HPP
#define KREPLAY_CUDA_RUNTIME_OPS_CONTEXT_HPP

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>

#include "counters.hpp"
#include "kreplay.h"
#include "range_set.hpp"

namespace kreplay::cuda::detail {

// The ops as kreplay calls them; `user_data` is the set's context. Each is defined in the file the table above
// names.
struct runtime_ops {
  static kreplay_status_t copy(void* user_data, void* dst, const void* src, size_t bytes);
  static kreplay_status_t pointer_info(void* user_data, const void* ptr, kreplay_pointer_info_t* info_out);
  static kreplay_status_t iterate_module_variables(void* user_data, kreplay_agent_t agent,
                                                   kreplay_module_variable_visitor_t visit, void* visit_data);
  static kreplay_status_t host_lock(void* user_data, void* host_ptr, size_t bytes);
  static kreplay_status_t host_unlock(void* user_data, void* host_ptr, size_t bytes);
  static kreplay_status_t copy_batch(void* user_data, kreplay_agent_t agent, const kreplay_copy_t* copies,
                                     size_t count);
  static kreplay_status_t device_alloc(void* user_data, kreplay_agent_t agent, size_t bytes, void** ptr_out);
  static kreplay_status_t device_free(void* user_data, kreplay_agent_t agent, void* ptr, size_t bytes);
  static kreplay_status_t digest(void* user_data, kreplay_agent_t agent, const kreplay_digest_job_t* jobs,
                                 size_t count, size_t block_bytes);
  static void release(void* user_data);
  static kreplay_status_t device_free_bytes(void* user_data, kreplay_agent_t agent, size_t* bytes_out);
};

// Makes `device` the calling thread's current device for the guard's lifetime, and restores the previous one.
class device_switch {
 public:
  explicit device_switch(int device);
  ~device_switch();
  device_switch(const device_switch&) = delete;
  device_switch& operator=(const device_switch&) = delete;
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

// What one device needs for batches and digests: streams of its own and scratch buffers that grow to the
// largest batch seen, and the device storage the set handed out there. One batch or digest at a time per device and
// set of ops.
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
  // device_alloc's storage on this device (its own lock: device_alloc and device_free do not take `mutex`).
  range_set storage;
};

// The user_data of one set of ops.
struct context {
  std::vector<std::unique_ptr<device_state>> devices;
  // Not per device: host_lock names no agent, and a registration is made in whichever context is current.
  range_set locked;
  // Every device can use a registered host pointer as its own address for it
  // (cudaDevAttrCanUseHostPointerForRegisteredMem); otherwise the kernel leaves host copies to cudaMemcpyAsync.
  bool host_pointers_usable = false;
  counters stats;
};

inline context& context_of(void* user_data) { return *static_cast<context*>(user_data); }

// The set's counters; the process's loose ones for a call without a set (user_data NULL).
inline counters& counters_of(void* user_data) {
  return user_data != nullptr ? context_of(user_data).stats : loose_counters();
}

// Records a failed CUDA call and clears the runtime's (non-sticky) last error, so that a later, unrelated
// cudaGetLastError check in the host does not trip over an error the ops already reported.
kreplay_status_t fail(cudaError_t error);
// Records a failure that is not a runtime error (last_op_error() returns `what`, a string literal).
kreplay_status_t fail(const char* what);

// The device of `agent` within this set of ops, or -1.
int device_in(const context& ctx, kreplay_agent_t agent);

// Makes the device's streams, and scratch of at least the given sizes; the device is current.
cudaError_t prepare(device_state& state, int device, size_t device_bytes, size_t host_bytes);
// Frees what prepare made, on the device's own context.
void destroy(device_state& state, int device);
// Forgets what prepare made and the device's storage, without a CUDA call: the device's context is gone, and its
// streams, events, scratch and storage went with it. The next prepare makes them anew in the device's next context.
void forget(device_state& state);

}  // namespace kreplay::cuda::detail

#endif  // KREPLAY_CUDA_RUNTIME_OPS_CONTEXT_HPP
