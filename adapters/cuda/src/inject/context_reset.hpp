// A context destroyed (cuCtxDestroy, cuDevicePrimaryCtxReset, cudaDeviceReset; CUPTI's CONTEXT_DESTROY_STARTING
// for any of them) takes with it everything made in it. The runtime ops and kreplay's device storage live in the
// device's primary context: when that one goes, the ops forget their streams, events, scratch, registrations and
// storage ranges (forget_device, through `forget_ops`), and kreplay forgets its device storage, page-locking
// and module scans for the device's agent and never restores a snapshot taken before (kreplay_agent_reset).
// Nothing calls into the dead context; all of it is made anew in the next one. A non-primary context takes only
// what was made in it (the tracker forgets its allocations and modules).
#ifndef KREPLAY_CUDA_INJECT_CONTEXT_RESET_HPP
#define KREPLAY_CUDA_INJECT_CONTEXT_RESET_HPP

#include <functional>

#include "switchboard.hpp"
#include "tracker.hpp"

namespace kreplay::cuda::inject {

// Forgets what a set of ops made on `device` without calling CUDA.
using forget_ops_t = std::function<void(int device)>;

// An optional consumer that only listens (the tracker enables the callbacks). Register it before the tracker, so
// that it reads the context's device and whether it is primary before the tracker forgets them. `t` outlives
// the board.
switchboard::consumer_id register_context_reset(switchboard& board, tracker& t, forget_ops_t forget_ops);

// What the handler does for `context` on `device` (-1: unknown): exposed for the tests.
void on_context_destroyed(tracker& t, const forget_ops_t& forget_ops, CUcontext context, int device);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_CONTEXT_RESET_HPP
