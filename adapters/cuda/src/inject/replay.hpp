// The replay loop of kreplay-cuda-replay, inside the injection library: for each selected kernel launch of an
// unmodified program (driver API: cuLaunchKernel, cuLaunchKernelEx, cooperative launches, and their per-thread
// stream forms), at the launch's entry: open a replay window (other threads' work now waits), drain the context,
// snapshot, then for passes 1 to N - 1 relaunch the same function with the same configuration and a private
// copy of its arguments, wait, and restore. The program's own launch is pass N; its exit closes the window. What
// the program sees afterwards is the last pass's memory, and a relaunch that fails leaves the snapshot's
// memory for the program's own launch, so its result never depends on kreplay's passes.
//
// Launches that are never replayed run once, each with its reason in the report: not selected, an excluded
// communication kernel, a stream capture in progress, a graph launch, a window or snapshot that declined. While
// a window is open, the program's launches, copies and memsets from other threads wait for it (kreplay's
// async-copy fence). One CSV row per launch, a progress line and a closing summary on stderr.
//
// Everything here runs inside CUPTI driver callbacks (the launch's own ENTER and EXIT), where the driver
// allows synchronisation, copies and launches. kreplay's passes, copies and digests run under the re-entry guard,
// so they are neither tracked nor replayed; the one driver call made outside it on purpose is the loading of the
// launched function at the entry, so that the module it loads is tracked before the snapshot.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_HPP

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda.h>
#include <cupti.h>

#include "kreplay.h"
#include "driver.hpp"
#include "replay_config.hpp"
#include "switchboard.hpp"
#include "tracker.hpp"

namespace kreplay::cuda::inject {

// CUPTI's Checkpoint API (libcheckpoint.so, beside libcupti), for --backend cupti.
struct checkpoint_api_t {
  CUptiResult (*save)(void*) = nullptr;     // cuptiCheckpointSave(CUpti_Checkpoint*)
  CUptiResult (*restore)(void*) = nullptr;  // cuptiCheckpointRestore
  CUptiResult (*free)(void*) = nullptr;     // cuptiCheckpointFree
};
// libcheckpoint.so from KREPLAY_CHECKPOINT_PATH, else beside the libcupti that `cupti_symbol` lives in, else
// by the loader's search. `where` says which, or why none.
bool resolve_checkpoint(checkpoint_api_t& out, const void* cupti_symbol, std::string* where);

// Which callback ids a replay adds to the tracker's (besides every memcpy and memset).
extern const CUpti_CallbackId replay_launch_ids[];
extern const size_t replay_launch_id_count;
extern const CUpti_CallbackId replay_capture_ids[];
extern const size_t replay_capture_id_count;

// One row of the report.
struct launch_row_t {
  uint64_t index = 0;
  std::string kernel;
  int device = -1;
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  uint32_t passes_asked = 0;
  uint32_t passes_run = 0;
  size_t footprint_bytes = 0;
  size_t bytes_moved = 0;
  double snapshot_ms = 0;
  double restore_ms = 0;        // every restore of the launch
  double kernel_ms = 0;         // pass 1, by events around it
  double extra_pass_ms = 0;     // median over passes 2..N of restore + relaunch + wait, minus the kernel's time
  bool replayed = false;
  std::string reason;           // why it ran once ("" when replayed)
  std::string verify = "off";   // "same", or "differs: pass P, B blocks"
};
// The CSV header and one row, as written to --output (RFC 4180 quoting of the kernel name and texts).
std::string csv_header();
std::string csv_row(const launch_row_t& row);

class replayer {
 public:
  replayer(tracker& tracker, const replay_config_t& config, const kreplay_device_ops_t& ops,
           const driver_api_t& driver);
  replayer(const replayer&) = delete;
  replayer& operator=(const replayer&) = delete;

  // Opens the report, resolves the backend. False (with why) when the replay cannot run: the library then
  // tracks only, and the launcher's summary says so.
  bool start(const void* cupti_symbol, std::string* why);

  // --backend cupti: CUPTI's runtime and resource domains enabled whole.
  std::vector<CUpti_CallbackDomain> whole_domains() const;

  // From the CUPTI layer, for the ids above and for every memcpy / memset id.
  void on_launch(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  void on_capture(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  void on_copy(const CUpti_CallbackData& data);

  // The closing summary on stderr and the report's last flush (atexit). Idempotent.
  void finish();

  struct pending_t;  // replay.cpp: a launch between its ENTER and EXIT on one thread

 private:
  void enter(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  void exit(const CUpti_CallbackData& data);
  void run_once_fenced(pending_t& p, const std::string& reason);
  bool open_window(pending_t& p);
  bool take_snapshot(pending_t& p);
  bool restore(pending_t& p);
  void close_window(pending_t& p);
  void run_own_passes(pending_t& p);
  CUresult relaunch(pending_t& p);
  float elapsed_ms(const pending_t& p);
  void verify_pass(pending_t& p, uint32_t pass);
  bool load_checkpoint(std::string* why);
  bool digest_footprint(pending_t& p, std::vector<kreplay_digest_t>* out);
  void report(launch_row_t& row, double replay_ms);
  void progress_locked(std::chrono::steady_clock::time_point now);

  tracker& tracker_;
  replay_config_t config_;
  kreplay_device_ops_t ops_;
  driver_api_t driver_;
  checkpoint_api_t checkpoint_;
  const void* cupti_symbol_ = nullptr;  // a libcupti function: libcheckpoint.so is looked for beside it
  std::once_flag checkpoint_once_;
  bool checkpoint_loaded_ = false;  // written inside checkpoint_once_, read after it
  launch_selector selector_;
  std::atomic<int> captures_{0};          // stream captures in progress, process-wide
  std::atomic<uint64_t> launches_{0};
  std::atomic<int64_t> in_flight_{0};    // launches between their ENTER and EXIT now

  std::mutex mutex_;                      // the selector, the counts, the report file
  FILE* csv_ = nullptr;
  std::map<std::string, uint64_t> declined_;
  uint64_t replayed_ = 0;
  uint64_t differed_ = 0;
  double replay_ms_ = 0;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_progress_;
  bool finished_ = false;
};

struct cupti_api_t;
// The replay as an optional consumer of the CUPTI layer: its launches, stream captures and every memcpy and
// memset (found by name with `api`). If CUPTI refuses any of them, nothing is replayed and one line says so.
switchboard::consumer_id register_replay_callbacks(switchboard& board, replayer& replay, const cupti_api_t& api);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_HPP
