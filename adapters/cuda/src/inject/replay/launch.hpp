// A kernel launch as its CUPTI callback describes it (cuLaunchKernel, cuLaunchKernelEx, the cooperative launch,
// their per-thread-stream _ptsz forms, and graph launches), and relaunching it: the same function and
// configuration, with a private copy of its arguments; or the same executable graph on the same stream.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_LAUNCH_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_LAUNCH_HPP

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda.h>
#include <cupti.h>

#include "driver.hpp"
#include "kreplay.h"

namespace kreplay::cuda::inject {

enum class launch_kind : uint8_t { kernel, kernel_ex, cooperative, graph };

struct launch_t {
  launch_kind kind = launch_kind::kernel;
  CUfunction function = nullptr;   // as the program passed it (a CUfunction, or a CUkernel passed as one)
  CUfunction loaded = nullptr;     // a CUfunction of it in the launch's context, for the queries
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  unsigned shared_bytes = 0;
  CUstream stream = nullptr;       // the per-thread forms' 0 already mapped to CU_STREAM_PER_THREAD
  CUgraphExec graph = nullptr;     // a graph launch's executable
  void** kernel_params = nullptr;  // the program's, valid until the launch call returns
  void** extra = nullptr;
  CUlaunchConfig config{};         // cuLaunchKernelEx: its attributes point into `attributes`
  std::vector<CUlaunchAttribute> attributes;
  // The private copy of the arguments (when the driver can say where each one is, or a buffer holds them).
  std::vector<unsigned char> argument_bytes;
  std::vector<void*> argument_pointers;
  std::vector<void*> extra_copy;
  size_t extra_size = 0;

  launch_t() = default;
  launch_t(const launch_t&) = delete;  // config.attrs and extra_copy point into the object itself
  launch_t& operator=(const launch_t&) = delete;
};

// Fills `out` from a launch callback (kernel_launch_ids, or a graph launch) at its entry.
void decode_launch(CUpti_CallbackId cbid, const CUpti_CallbackData& data, launch_t& out);

// The launched function's name (null when the driver has none), and `loaded` set to a CUfunction of it in the
// current context (null when there is none). A lazily loaded function is loaded now, outside the re-entry
// guard, so that the module it loads is tracked before the snapshot.
const char* resolve_function(launch_t& launch, const driver_api_t& driver);

// Whether the driver says a stream capture is in progress on the launch's stream (or cannot say).
bool stream_capturing(const launch_t& launch, const driver_api_t& driver);

// The private copy of the arguments: the driver says where each one is and its size; else the
// CU_LAUNCH_PARAM_BUFFER_POINTER buffer of `extra`. Without either, a relaunch passes the program's own.
void copy_arguments(launch_t& launch, const driver_api_t& driver);

// The dynamic shared memory the launch was made with.
unsigned dynamic_shared_bytes(const launch_t& launch);

// The launch again, as the program made it, under the function's attributes as they are now: kreplay never sets
// a function's attributes (cuFuncSetAttribute's values override the runtime's later cuKernelSetAttribute ones, so
// one put back would freeze the program's own later settings). A range ends before its thread lowers a limit its
// launches need (ranges.cpp); a kernel node, or a range whose function another thread changed meanwhile, may be
// refused, and its pass stops with the CUresult.
CUresult relaunch(const launch_t& launch, const driver_api_t& driver);

// A kernel's time by two events on its stream; every call a no-op when the events could not be made.
class kernel_timer {
 public:
  explicit kernel_timer(const driver_api_t& driver) : driver_(driver) {}
  ~kernel_timer();
  kernel_timer(const kernel_timer&) = delete;
  kernel_timer& operator=(const kernel_timer&) = delete;

  void create();
  void start(CUstream stream);
  void stop(CUstream stream);
  float elapsed_ms() const;  // 0 when not measured
  // The events' context was destroyed: they are dropped without a driver call.
  void forget() {
    start_ = end_ = nullptr;
    ready_ = false;
  }

 private:
  const driver_api_t& driver_;
  CUevent start_ = nullptr;
  CUevent end_ = nullptr;
  bool ready_ = false;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_LAUNCH_HPP
