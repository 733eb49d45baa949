// kreplay::cuda::memcpy_async_fenced: a host program's (or a tool's) cudaMemcpyAsync inside kreplay's async-copy
// fence (API.md, "Replay window (version 3)"). The copy names the agents of the devices its pointers live on; while
// a replay window is open on one of them, kreplay_copy_begin holds the copy back until the window closes, and once
// issued it counts as in flight on those agents until the stream reaches it (a host function enqueued after it
// ends the token), so a window opened meanwhile waits for its bytes to land instead of capturing them half-written.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kreplay.h"
#include "kreplay/cuda.hpp"

namespace kreplay::cuda {
namespace {

// The agent of the device `ptr` lives on, or false for host memory and pointers the runtime does not know.
bool agent_of_pointer(const void* ptr, kreplay_agent_t* agent_out) {
  // An error the program has not read yet stays its own: ours is cleared only when there was none before.
  const bool clean = cudaPeekAtLastError() == cudaSuccess;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    if (clean) {
      static_cast<void>(cudaGetLastError());  // a pointer the runtime never saw: not an error of the copy's
    }
    return false;
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    return false;
  }
  *agent_out = agent_of_device(attributes.device);
  return true;
}

void CUDART_CB end_token(void* token) { kreplay_copy_end(reinterpret_cast<uintptr_t>(token)); }

}  // namespace

cudaError_t memcpy_async_fenced(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  // A copy captured into a graph does not run now, and its host function would run at each graph launch: no
  // token could end at the right time, so a captured copy is not fenced (a graph launch is its own matter).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
  }
  kreplay_agent_t agents[2];
  size_t count = 0;
  if (agent_of_pointer(dst, &agents[count])) {
    ++count;
  }
  if (agent_of_pointer(src, &agents[count]) && (count == 0 || agents[0].handle != agents[count].handle)) {
    ++count;
  }
  uint64_t token = 0;
  // Token 0: no window was ever opened, so nothing is counted and nothing needs ending.
  const bool fenced =
      count > 0 && kreplay_copy_begin(agents, count, &token) == KREPLAY_STATUS_SUCCESS && token != 0;
  const cudaError_t error = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
  if (!fenced) {
    return error;
  }
  if (error != cudaSuccess) {
    kreplay_copy_end(token);
    return error;
  }
  static_assert(sizeof(uintptr_t) >= sizeof(uint64_t), "a token travels as the host function's argument");
  if (cudaLaunchHostFunc(stream, end_token, reinterpret_cast<void*>(static_cast<uintptr_t>(token))) != cudaSuccess) {
    // No host function: wait for the copy here, so the token still ends only after its bytes land. The failure is
    // the fence's, not the program's.
    static_cast<void>(cudaGetLastError());
    const cudaError_t waited = cudaStreamSynchronize(stream);
    kreplay_copy_end(token);
    return waited;
  }
  return cudaSuccess;
}

}  // namespace kreplay::cuda
