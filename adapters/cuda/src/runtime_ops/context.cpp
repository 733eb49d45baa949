// What every runtime op leans on: switching the calling thread to the agent's device, the per-device streams and
// scratch buffers (made on first use, grown to the largest batch or digest seen), and the record of the last error.
#include "context.hpp"

#include "kreplay/cuda.hpp"

namespace kreplay::cuda {
namespace detail {
namespace {

thread_local const char* t_last_error = "";

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

// The device's two streams and two events, once; the device is current.
cudaError_t make_streams(device_state& state, int device) {
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
  return cudaSuccess;
}

// Replaces a scratch buffer smaller than `needed` by one of grow_size(needed) bytes from `allocate`, after
// `free_buffer` gave the old one back.
template <typename Allocate, typename Free>
cudaError_t grow(void*& buffer, size_t& buffer_bytes, size_t needed, Allocate allocate, Free free_buffer) {
  if (needed <= buffer_bytes) {
    return cudaSuccess;
  }
  if (buffer != nullptr) {
    (void)free_buffer(buffer);
    buffer = nullptr;
    buffer_bytes = 0;
  }
  const size_t size = grow_size(needed);
  cudaError_t error = allocate(&buffer, size);
  if (error != cudaSuccess) {
    return error;
  }
  buffer_bytes = size;
  return cudaSuccess;
}

}  // namespace

kreplay_status_t fail(cudaError_t error) {
  t_last_error = cudaGetErrorName(error);
  (void)cudaGetLastError();
  return KREPLAY_STATUS_DEVICE_ERROR;
}

kreplay_status_t fail(const char* what) {
  t_last_error = what;
  return KREPLAY_STATUS_DEVICE_ERROR;
}

device_switch::device_switch(int device) {
  int current = -1;
  error_ = cudaGetDevice(&current);
  if (error_ == cudaSuccess && current != device) {
    error_ = cudaSetDevice(device);
    if (error_ == cudaSuccess) {
      previous_ = current;
    }
  }
}

device_switch::~device_switch() {
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) {
    (void)cudaGetLastError();
  }
}

int device_in(const context& ctx, kreplay_agent_t agent) {
  const int device = device_of_agent(agent);
  return device >= 0 && static_cast<size_t>(device) < ctx.devices.size() ? device : -1;
}

cudaError_t prepare(device_state& state, int device, size_t device_bytes, size_t host_bytes) {
  if (!state.ready) {
    cudaError_t error = make_streams(state, device);
    if (error != cudaSuccess) {
      return error;
    }
  }
  // kreplay's own device memory: a plain cudaMalloc, never tracked.
  cudaError_t error = grow(
      state.device_scratch, state.device_scratch_bytes, device_bytes,
      [](void** ptr, size_t size) { return cudaMalloc(ptr, size); }, [](void* ptr) { return cudaFree(ptr); });
  if (error != cudaSuccess) {
    return error;
  }
  return grow(
      state.host_scratch, state.host_scratch_bytes, host_bytes,
      [](void** ptr, size_t size) { return cudaMallocHost(ptr, size); }, [](void* ptr) { return cudaFreeHost(ptr); });
}

void forget(device_state& state) {
  std::lock_guard<std::mutex> lock(state.mutex);
  state.ready = false;
  state.stream = nullptr;
  state.side = nullptr;
  state.forked = nullptr;
  state.joined = nullptr;
  state.device_scratch = nullptr;
  state.device_scratch_bytes = 0;
  state.host_scratch = nullptr;
  state.host_scratch_bytes = 0;
  state.storage.clear();
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

}  // namespace detail

const char* last_op_error() { return detail::t_last_error; }

}  // namespace kreplay::cuda
