// The tracker as a consumer of the CUPTI layer's switchboard: its handlers decode the driver and resource
// callbacks into calls of the tracker's public methods (allocations, frees, virtual memory, contexts, modules and
// libraries, and where each module was loaded from).
#ifndef KREPLAY_CUDA_INJECT_TRACKER_CALLBACKS_HPP
#define KREPLAY_CUDA_INJECT_TRACKER_CALLBACKS_HPP

#include "switchboard.hpp"
#include "tracker.hpp"

namespace kreplay::cuda::inject {

// A required consumer: CUPTI must raise every one of these callbacks, or the layer stays inert. Register it
// before any consumer that launches kernels at a launch's entry (the replay), so that a module loaded there is
// bound to the launched function. `t` outlives the board.
switchboard::consumer_id register_tracker_callbacks(switchboard& board, tracker& t);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_TRACKER_CALLBACKS_HPP
