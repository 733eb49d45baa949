// The replay loop of kreplay-cuda-replay, inside the injection library: for each selected kernel launch of an
// unmodified program (driver API: cuLaunchKernel, cuLaunchKernelEx, cooperative launches, and their per-thread
// stream forms), at the launch's entry: open a replay window (other threads' work now waits), drain the context,
// snapshot, then for passes 1 to N - 1 relaunch the same function with the same configuration and a private
// copy of its arguments, wait, and restore. The program's own launch is pass N; its exit closes the window. What
// the program sees afterwards is the last pass's memory, and a relaunch that fails leaves the snapshot's
// memory for the program's own launch, so its result never depends on kreplay's passes.
//
// Launches that are never replayed run once, each with its reason in the report: not selected, an excluded
// communication kernel, a stream capture in progress, a graph that cannot be replayed whole, a window or snapshot
// that declined. While a window is open, the program's launches, copies and memsets from other threads wait for
// it (kreplay's async-copy fence). One CSV row per launch, a progress line and a closing summary on stderr.
//
// Everything here runs inside CUPTI driver callbacks (the launch's own ENTER and EXIT), where the driver
// allows synchronisation, copies and launches. kreplay's passes, copies and digests run under the re-entry guard,
// so they are neither tracked nor replayed; the one driver call made outside it on purpose is the loading of the
// launched function at the entry, so that the module it loads is tracked before the snapshot.
//
// A graph launch (--graph-profiling graph, the default) is one window: every pass launches the whole executable
// graph on the launch's stream, with restores between, and its row lists the graph's kernels. Whether a graph can
// be replayed that way is decided when it is instantiated (graphs.hpp); one that cannot runs once, with why.
//
// The folder: launch (decoding a launch callback, relaunching), backend (kreplay's snapshots or CUPTI's
// Checkpoint API), verify (--verify), report (CSV, progress, summary), loop.cpp and passes.cpp (the protocol),
// graphs (what an executable graph holds) and graph_launches.cpp (following the graph calls, deciding a graph
// launch), callbacks.cpp (the replay as a consumer of the CUPTI layer's switchboard).
#ifndef KREPLAY_CUDA_INJECT_REPLAY_REPLAY_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_REPLAY_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cuda.h>
#include <cupti.h>

#include "driver.hpp"
#include "kreplay.h"
#include "replay/cache_flush.hpp"
#include "replay/counters.hpp"
#include "replay/graphs.hpp"
#include "replay/report.hpp"
#include "replay_config.hpp"
#include "switchboard.hpp"
#include "tracker.hpp"

namespace kreplay::cuda::inject {

class snapshot_backend;
struct cupti_api_t;
struct launch_t;

// Which callback ids a replay adds to the tracker's, besides every memcpy and memset: the launches (kernels and
// graphs) and the stream captures.
inline constexpr CUpti_CallbackId replay_launch_ids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,         CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,            CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};
inline constexpr size_t replay_launch_id_count = std::size(replay_launch_ids);
inline constexpr CUpti_CallbackId replay_capture_ids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture,
    CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz,
};
inline constexpr size_t replay_capture_id_count = std::size(replay_capture_ids);
// With --replay-mode range: the calls that end the calling thread's range at their entry (the program waits on or
// frees what the range's launches wrote, or destroys what they name), besides every memcpy and memset.
inline constexpr CUpti_CallbackId replay_range_end_ids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,       CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
    CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz, CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,           CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,    CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,
    // Handles a relaunch would name: a stream, a module or library, an event, a texture, mapped memory.
    CUPTI_DRIVER_TRACE_CBID_cuStreamDestroy_v2,     CUPTI_DRIVER_TRACE_CBID_cuModuleUnload,
    CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload,        CUPTI_DRIVER_TRACE_CBID_cuEventDestroy_v2,
    CUPTI_DRIVER_TRACE_CBID_cuTexObjectDestroy,     CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
    CUPTI_DRIVER_TRACE_CBID_cuMemRelease,
};
// With --replay-mode range: the program's calls that set a function's attributes (the runtime's
// cudaFuncSetAttribute makes one of them).
inline constexpr CUpti_CallbackId replay_attribute_ids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuFuncSetAttribute,
    CUPTI_DRIVER_TRACE_CBID_cuKernelSetAttribute,
};
// With --graph-profiling node or graph: the calls that make, change and destroy executable graphs
// (graph_launches.cpp).
inline constexpr CUpti_CallbackId replay_graph_ids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemcpyNodeSetParams,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemsetNodeSetParams,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams_v2,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecNodeSetParams,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecChildGraphNodeSetParams,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecEventRecordNodeSetEvent,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecEventWaitNodeSetEvent,
    CUPTI_DRIVER_TRACE_CBID_cuGraphNodeSetEnabled,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy,
    CUPTI_DRIVER_TRACE_CBID_cuGraphConditionalHandleCreate,
    CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode,
    CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2,
};

class replayer {
 public:
  // `counters`: a source of hardware counters for every replayed launch (null: replay only).
  replayer(tracker& tracker, const replay_config_t& config, const kreplay_device_ops_t& ops,
           const driver_api_t& driver, std::unique_ptr<counter_source> counters = nullptr);
  ~replayer();
  replayer(const replayer&) = delete;
  replayer& operator=(const replayer&) = delete;

  // Opens the report, readies the backend. False (with why) when the replay cannot run: the library then
  // tracks only, and the launcher's summary says so.
  bool start(const void* cupti_symbol, std::string* why);

  // What the backend wants of CUPTI besides the replay's callbacks (--backend cupti: whole domains).
  std::vector<CUpti_CallbackDomain> whole_domains() const;

  // From the CUPTI layer: the launch and capture ids above, and every memcpy / memset id.
  void on_launch(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  void on_capture(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  void on_copy(const CUpti_CallbackData& data);
  // The replay_range_end_ids, at their entry: the calling thread's range ends (ranges.cpp).
  void on_range_end_call(const CUpti_CallbackData& data);
  // The replay_attribute_ids, at their entry: an attribute set that a relaunch of the calling thread's range
  // could not run under (its shared-memory limit lowered, a cluster attribute) ends the range first (ranges.cpp).
  void on_function_attribute(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  bool replays_ranges() const { return config_.mode == replay_mode::range; }
  // The replay_graph_ids, at their exit: what each executable graph holds (replay/graphs.hpp).
  void on_graph_built(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  // Whether graph launches are replayed, so that the graph calls are worth following.
  bool replays_graphs() const { return config_.graphs != graph_profiling::off; }
  // CONTEXT_DESTROY_STARTING: a launch of that context between its entry and its exit (on another thread)
  // makes no driver call with its handles any more (events, saved memory) and is reported as cut short.
  void on_context_destroyed(CUcontext context);

  // The closing summary on stderr and the report's last flush (atexit). Idempotent.
  void finish();

  struct pending_t;  // pending.hpp: a launch between its ENTER and EXIT on one thread
  struct range_t;    // ranges.cpp: a thread's launches gathered for one range window
  // A range's passes, per launch: each pass after the first without the profiler's calls, and those calls (the
  // begin and end of each counted pass).
  struct range_pass_costs {
    std::vector<double> extra_ms;
    std::vector<double> counter_ms;
    double setup_ms = 0;  // the counting's time outside the passes (opening, configuring, flushing, collecting)
    bool counting_lost = false;  // a pass's ranges could not be pushed or popped: counting stopped, replay goes on
  };

 private:
  // At the launch's entry: describe -> select -> window -> drain -> snapshot -> passes (loop.cpp).
  void enter(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  void describe(pending_t& p, CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  std::string why_run_once(pending_t& p);
  std::string why_graph_runs_once(pending_t& p);  // graph_launches.cpp
  // This launch's pass count: --passes, or more when its counters need more (false, with the row's reason, when
  // the counters cannot count it).
  bool plan_passes(pending_t& p);
  graph_facts inspect(CUgraph graph, unsigned long long flags, CUcontext context) const;
  // Tracked device memory of `context`'s device, for the graphs' memcpy and memset nodes.
  tracked_memory_t tracked_memory(CUcontext context) const;
  void node_changed(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  void graph_updated(const cuGraphExecUpdate_v2_params& update, CUcontext context);
  void node_added(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  void child_changed(CUgraphExec exec, CUgraph child, CUcontext context);
  void generic_node_changed(CUgraphExec exec, CUgraphNode node, const CUgraphNodeParams& params, CUcontext context,
                            const tracked_memory_t& tracked);
  void kernel_set(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v2& params);
  void memcpy_set(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D& copy, const tracked_memory_t& tracked);
  void memset_set(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS& set,
                  const tracked_memory_t& tracked);
  void event_set(CUgraphExec exec, CUgraphNode node, CUevent event);
  std::string node_mode_problem(const graph_facts& graph) const;
  // Node mode (graph_nodes.cpp): at a graph launch's entry, inside its window and after its snapshot, the plan
  // run on the launch's stream, each selected kernel node replayed, then the memory before the graph put back.
  void run_graph_nodes(pending_t& p);
  bool run_planned(pending_t& p, const planned_node& node, uint32_t kernel_index);
  bool replay_kernel_node(pending_t& graph, const kernel_node_t& kernel, uint32_t kernel_index);
  bool run_node_passes(pending_t& n);
  bool open_window(pending_t& p);
  bool drain(pending_t& p);
  bool take_snapshot(pending_t& p);
  void run_once_fenced(pending_t& p, const std::string& reason);
  // passes.cpp: kreplay's passes at the entry; the program's own pass and the close at its exit.
  void run_own_passes(pending_t& p);
  bool run_pass(pending_t& p, uint32_t pass, double* restore_ms);
  // `last`: the restore before the program's own launch, checked whole (the backend's `checked`).
  bool restore(pending_t& p, bool last);
  // The launch's argument copy scanned for device addresses in tracked regions: the backend's write hints.
  // Only with a learned write set (kreplay's backend, restores, dirty-only, --write-set on).
  void hint_arguments(pending_t& p);
  void verify_pass(pending_t& p, uint32_t pass);
  // Around a pass that carries counters (passes.cpp): nothing for the others, or when counting has stopped.
  void configure_counting(pending_t& p);
  // begin_counted_pass returns the time the profiler's begin of the pass took, for end_counted_pass to add to its end.
  double begin_counted_pass(pending_t& p, uint32_t pass);
  void end_counted_pass(pending_t& p, uint32_t pass, bool ran, double begin_ms);
  void stop_counting(pending_t& p, const std::string& why);
  // --cache-control all: the L2 flushed on `stream` before a counted pass (kernel or range mode); its time, and
  // *why set when it could not be (a note for the rows, not a lost pass).
  double flush_caches(CUcontext context, CUstream stream, std::string* why);
  // ranges.cpp (--replay-mode range): a launch joins its thread's range at its entry (the range begun with the
  // snapshot of the memory before it), is handed over at its exit, and the range ends when full or at a boundary.
  void join_range(pending_t& p);
  bool begin_range(pending_t& p);
  void launched_in_range(std::unique_ptr<pending_t> p, CUresult result);
  void end_range(const std::string& why_ended);
  // The context of the calling thread's range when one of its launches passes `test` (null: none, or no range).
  CUcontext range_holding(const std::function<bool(const launch_t&)>& test);
  void drop_ranges_of(CUcontext context);
  void replay_range(range_t& range);
  std::unique_ptr<counter_session> range_counting(range_t& range, uint32_t* counted, double* setup_ms);
  uint32_t run_range_passes(range_t& range, uint32_t passes, counter_session* counting, uint32_t counted,
                            range_pass_costs* costs);
  void collect_range(range_t& range, counter_session& counting, bool complete);
  void finish_range_rows(range_t& range, uint32_t passes, uint32_t ran, bool back, const range_pass_costs& costs);
  bool run_range_pass(range_t& range, uint32_t pass, counter_session* counting, double* counter_ms,
                      double* flush_ms, bool* counting_lost);
  double flush_before_range_pass(range_t& range);
  void begin_cupti_kernel_replay(pending_t& p);
  void end_cupti_kernel_replay(pending_t& p, const CUpti_CallbackData& data);
  void exit(const CUpti_CallbackData& data);
  void log_phases(const pending_t& p);
  void finish_program_pass(pending_t& p, const CUpti_CallbackData& data);
  void close_window(pending_t& p);
  void let_go_after_context_gone(pending_t& p);
  // Whether the launch's context was destroyed since its entry.
  bool context_gone(const pending_t& p);

  tracker& tracker_;
  replay_config_t config_;
  kreplay_device_ops_t ops_;
  driver_api_t driver_;
  std::unique_ptr<snapshot_backend> backend_;
  std::unique_ptr<counter_source> counters_;
  std::mutex selector_mutex_;
  launch_selector selector_;
  std::atomic<int> captures_{0};          // stream captures in progress, process-wide
  std::atomic<uint64_t> launches_{0};
  std::atomic<int64_t> in_flight_{0};    // launches between their ENTER and EXIT now
  replay_report report_;
  graph_registry graphs_;
  cache_flusher caches_{driver_};  // --cache-control all
  // Contexts destroyed, each with its number in contexts_destroyed_ (the last few: a launch in flight through
  // more resets than that takes its context for gone).
  static constexpr size_t gone_kept = 64;
  std::mutex gone_mutex_;
  std::vector<std::pair<CUcontext, uint64_t>> gone_;
  std::atomic<uint64_t> contexts_destroyed_{0};
  // Range mode: each thread's open range (its launches are in flight until it ends).
  std::mutex ranges_mutex_;
  std::unordered_map<std::thread::id, std::unique_ptr<range_t>> ranges_;
};

// The replay as an optional consumer of the CUPTI layer: its launches, stream captures and every memcpy and
// memset (found by name with `api`). If CUPTI refuses any of them, nothing is replayed and one line says so.
switchboard::consumer_id register_replay_callbacks(switchboard& board, replayer& replay, const cupti_api_t& api);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_REPLAY_HPP
