// Where a replayed launch's memory is saved between passes: kreplay's snapshots, or CUPTI's Checkpoint API
// (--backend cupti). The replay loop reaches either through this interface only: capture, restore, release (the
// saved memory's destructor), name.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_BACKEND_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_BACKEND_HPP

#include <memory>
#include <string>
#include <vector>

#include <cuda.h>
#include <cupti.h>

#include "kreplay.h"
#include "replay/report.hpp"
#include "replay_config.hpp"
#include "tracker.hpp"

namespace kreplay::cuda::inject {

// One launch's saved memory. Destroying it releases it.
class saved_memory {
 public:
  virtual ~saved_memory() = default;
  // Puts the saved memory back; the time it took goes to `row` where the backend measures it itself.
  // `checked`: the restore before the program's own launch, the whole footprint checked against the snapshot
  // whatever was learned of the write set (a backend without write sets restores as it always does).
  virtual bool restore(launch_row_t& row, bool checked) = 0;
  // Device addresses the launch's arguments hold: where its passes may write. Only a backend with write sets
  // uses them.
  virtual void hint_writes(const std::vector<const void*>& pointers) { (void)pointers; }
  // The context it was saved in was destroyed: its destructor must not call into that context.
  virtual void context_gone() {}
  // A snapshot outside its window's account (a graph's kernel node in node mode, inside the graph's window): its
  // footprint, bytes moved, times, digests and write-set misses into `row`. False when the backend keeps none.
  virtual bool account(launch_row_t& row) const {
    (void)row;
    return false;
  }
};

class snapshot_backend {
 public:
  virtual ~snapshot_backend() = default;
  virtual const char* name() const = 0;
  // CUPTI domains the backend wants enabled whole (their callbacks are ignored; their cost is the backend's).
  virtual std::vector<CUpti_CallbackDomain> whole_domains() const = 0;
  // Readies the backend in this process; `cupti_symbol` (a libcupti function, or null) says where CUPTI's
  // libraries are. False, with why, when the replay cannot run.
  virtual bool start(const void* cupti_symbol, std::string* why) = 0;
  // Saves the memory of `agent` (the launch's device) inside the open window; `context` is the launch's. Null,
  // with `row.reason` set, when it declines.
  virtual std::unique_ptr<saved_memory> capture(kreplay_agent_t agent, CUcontext context, launch_row_t& row) = 0;
  // The window closed with `outcome`: the figures it has that the backend did not measure itself.
  virtual void window_closed(const kreplay_window_outcome_t& outcome, launch_row_t& row) const = 0;
};

std::unique_ptr<snapshot_backend> make_kreplay_backend(tracker& tracker);
std::unique_ptr<snapshot_backend> make_cupti_backend();
// The one --backend names.
std::unique_ptr<snapshot_backend> make_backend(replay_backend which, tracker& tracker);

// CUPTI's Checkpoint API (libcheckpoint.so, beside libcupti), for --backend cupti.
struct checkpoint_api_t {
  CUptiResult (*save)(void*) = nullptr;     // cuptiCheckpointSave(CUpti_Checkpoint*)
  CUptiResult (*restore)(void*) = nullptr;  // cuptiCheckpointRestore
  CUptiResult (*free)(void*) = nullptr;     // cuptiCheckpointFree
};
// libcheckpoint.so from KREPLAY_CHECKPOINT_PATH, else beside the libcupti that `cupti_symbol` lives in, else
// by the loader's search. `where` says which, or why none.
bool resolve_checkpoint(checkpoint_api_t& out, const void* cupti_symbol, std::string* where);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_BACKEND_HPP
