// The replay loop's callbacks and the protocol at a launch's entry: describe the launch, decide whether it is
// replayed, then window -> drain -> snapshot -> passes (passes.cpp). A launch that is not replayed runs once,
// fenced, with its reason.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <iterator>
#include <new>

#include "callback_data.hpp"
#include "guard.hpp"
#include "log.hpp"
#include "kreplay/cuda.hpp"
#include "replay/pending.hpp"

namespace kreplay::cuda::inject {
namespace {

thread_local replayer::pending_t* t_pending = nullptr;
thread_local int t_launch_depth = 0;  // launch callbacks in progress on this thread (another tool's may nest)
thread_local uint64_t t_copy_token = 0;
}  // namespace

replayer::replayer(tracker& tracker, const replay_config_t& config, const kreplay_device_ops_t& ops,
                   const driver_api_t& driver, std::unique_ptr<counter_source> counters)
    : tracker_(tracker),
      config_(config),
      ops_(ops),
      driver_(driver),
      backend_(make_backend(config.backend, tracker)),
      counters_(std::move(counters)),
      selector_(config),
      report_(config, config.backend == replay_backend::cupti_kernel_replay ? "cupti-kernel-replay" : backend_->name(),
              counters_ != nullptr ? counters_->metrics() : std::vector<std::string>{}) {}

replayer::~replayer() = default;

bool replayer::start(const void* cupti_symbol, std::string* why) {
  return backend_->start(cupti_symbol, why) && report_.open(why);
}

std::vector<CUpti_CallbackDomain> replayer::whole_domains() const { return backend_->whole_domains(); }

void replayer::finish() { report_.finish(in_flight_.load(std::memory_order_relaxed)); }

void replayer::on_capture(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (data.callbackSite != CUPTI_API_EXIT || !succeeded(data)) {
    return;
  }
  const bool ends = cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture ||
                    cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz;
  if (!ends) {
    captures_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Never below zero, also when two threads end captures at once.
  int now = captures_.load(std::memory_order_relaxed);
  while (now > 0 && !captures_.compare_exchange_weak(now, now - 1, std::memory_order_relaxed)) {
  }
}

void replayer::on_copy(const CUpti_CallbackData& data) {
  // A copy or memset of the program: while a window of another thread is open on its device, it waits for
  // the window's close (kreplay's fence), then counts as in flight until its call returns. An asynchronous
  // copy still queued when a later window opens is drained by that window's synchronisation.
  if (data.callbackSite == CUPTI_API_ENTER) {
    if (config_.mode == replay_mode::range) {
      end_range("a copy or memset");  // before it changes what the range's launches read or wrote
    }
    const int device = tracker_.device_of(data.context);
    if (device >= 0) {
      const kreplay_agent_t agent = agent_of_device(device);
      if (kreplay_copy_begin(&agent, 1, &t_copy_token) != KREPLAY_STATUS_SUCCESS) {
        t_copy_token = 0;
      }
    }
  } else if (t_copy_token != 0) {
    kreplay_copy_end(t_copy_token);
    t_copy_token = 0;
  }
}

void replayer::on_launch(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  // Only the outermost launch of a thread is the program's: one made inside its callbacks (another tool's)
  // runs as it is, and its EXIT must not take the outer launch's state.
  if (data.callbackSite == CUPTI_API_ENTER) {
    if (++t_launch_depth != 1) {
      return;
    }
    try {
      enter(cbid, data);
    } catch (...) {
      // Out of host memory on the way: the launch runs once, from the saved memory if passes ran.
      if (t_pending != nullptr && t_pending->saved != nullptr) {
        (void)t_pending->saved->restore(t_pending->row, true);
      }
      if (t_pending != nullptr) {
        t_pending->replaying = false;
        t_pending->row.reason = "internal error (out of host memory): run once";
      }
    }
    return;
  }
  if (t_launch_depth == 0 || --t_launch_depth != 0) {
    return;
  }
  try {
    exit(data);
  } catch (...) {
    // exit() owns the launch's state from its first line: its destructor has closed what was open.
  }
}

void replayer::enter(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  auto* p = new (std::nothrow) pending_t(driver_);
  if (p == nullptr) {
    return;
  }
  t_pending = p;
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  describe(*p, cbid, data);
  const std::string reason = why_run_once(*p);
  if (config_.mode == replay_mode::range) {
    if (reason.empty() && p->launch.kind != launch_kind::graph && config_.backend == replay_backend::kreplay) {
      join_range(*p);
      return;
    }
    end_range(reason.empty() ? "a graph launch" : "a launch run once");
  }
  if (!reason.empty()) {
    run_once_fenced(*p, reason);
    return;
  }
  if (config_.backend == replay_backend::cupti_kernel_replay) {
    begin_cupti_kernel_replay(*p);
    return;
  }
  if (!plan_passes(*p)) {
    run_once_fenced(*p, p->row.reason);
    return;
  }
  p->phases.start(p->entered);
  p->phases.mark("entry");
  copy_arguments(p->launch, driver_);
  // The window first: from here on other threads' launches, copies and memsets wait (the fence), so the
  // synchronise that follows drains everything the snapshot must see, and nothing slips in after it.
  if (!open_window(*p)) {
    run_once_fenced(*p, p->row.reason);
    return;
  }
  p->phases.mark("window");
  const bool drained = drain(*p);
  p->phases.mark("drain");
  if (!drained || !take_snapshot(*p)) {
    const std::string why = p->row.reason;
    close_window(*p);
    run_once_fenced(*p, why);
    return;
  }
  p->phases.mark("snapshot");
  p->replaying = true;
  if (p->row.holds_nodes) {
    run_graph_nodes(*p);  // node mode: the graph's kernel nodes replayed, then the memory before it put back
    return;
  }
  configure_counting(*p);
  p->phases.mark("configure");
  run_own_passes(*p);
  p->phases.mark("passes");
}

// The launch and its row: what it launches, where, and the function's name. A lazily loaded function is loaded
// here, before the snapshot, so that its module's variables are captured (the tracker follows the load).
void replayer::describe(pending_t& p, CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  p.entered = replay_clock::now();
  p.row.index = launches_.fetch_add(1, std::memory_order_relaxed);
  p.row.passes_asked = config_.passes;
  p.row.passes_run = 1;  // a launch run once; a replayed one's count is set at its exit
  decode_launch(cbid, data, p.launch);
  std::copy(std::begin(p.launch.grid), std::end(p.launch.grid), std::begin(p.row.grid));
  std::copy(std::begin(p.launch.block), std::end(p.launch.block), std::begin(p.row.block));
  p.context = data.context;
  p.destroyed_at_entry = contexts_destroyed_.load(std::memory_order_acquire);
  p.device = tracker_.device_of(data.context);
  p.row.device = p.device;
  // A context the tracker never saw is taken for device 0's, as it always was.
  p.agent = agent_of_device(p.device < 0 ? 0 : p.device);
  if (p.launch.kind == launch_kind::graph) {
    p.row.kernel = "(graph launch)";  // its kernels once why_graph_runs_once has found them
    return;
  }
  p.name = resolve_function(p.launch, driver_);
  p.row.kernel = p.name != nullptr ? p.name : "(unnamed)";
}

// Empty when the launch is replayed, else why it runs once.
std::string replayer::why_run_once(pending_t& p) {
  const bool graph = p.launch.kind == launch_kind::graph;
  if (graph) {
    if (std::string why = why_graph_runs_once(p); !why.empty()) {
      return why;
    }
  } else {
    std::lock_guard<std::mutex> lock(selector_mutex_);
    const launch_selector::verdict verdict = selector_.classify(p.name);
    if (verdict != launch_selector::verdict::replay) {
      return launch_selector::text(verdict);
    }
  }
  // Also a capture begun before the injection saw it, or on this very stream: asked of the driver.
  if (captures_.load(std::memory_order_relaxed) > 0 || stream_capturing(p.launch, driver_)) {
    return "a stream capture is in progress: the launch may not execute, run once";
  }
  if (p.device < 0) {
    return "the launch's device is unknown";
  }
  if (!graph && p.launch.loaded == nullptr) {
    return "the function cannot be queried in the launch's context";
  }
  return "";
}

bool replayer::open_window(pending_t& p) {
  kreplay_window_options_t options{};
  options.struct_size = sizeof(options);
  options.passes = p.passes;
  // A graph: one window over its kernels (at least one, why_graph_runs_once checked). In node mode at least two,
  // so that the nodes' own snapshots inside it are the host's per-dispatch snapshots (kreplay_window_options_t).
  const auto kernels = static_cast<uint32_t>(p.graph.kernels.size());
  options.dispatches = p.launch.kind != launch_kind::graph ? 1 : p.row.holds_nodes ? std::max(kernels, 2U) : kernels;
  for (int attempt = 0;; ++attempt) {
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    if (kreplay_window_open(p.agent, &options, &p.window, &reason) == KREPLAY_STATUS_SUCCESS) {
      return true;
    }
    p.window = nullptr;
    if (reason != KREPLAY_DECLINE_WINDOW_NESTED || attempt == 3) {
      p.row.reason = "window declined: " + decline_text(reason);
      return false;
    }
    // Another thread's window on this device: wait until it closes (the fence holds this thread back until
    // then), and try again.
    uint64_t token = 0;
    if (kreplay_copy_begin(&p.agent, 1, &token) == KREPLAY_STATUS_SUCCESS) {
      kreplay_copy_end(token);
    }
  }
}

bool replayer::plan_passes(pending_t& p) {
  p.passes = config_.passes;
  if (p.row.holds_nodes) {
    // Node mode: the program's launch of the graph is its one pass; its kernel nodes have passes of their own.
    p.passes = 1;
    p.row.passes_asked = 1;
    return true;
  }
  if (counters_ == nullptr) {
    return true;
  }
  if (p.launch.kind == launch_kind::graph) {
    p.row.counters = "not counted: a graph launch in graph mode (its kernels are counted in node mode)";
    return true;
  }
  uint32_t needed = 0;
  std::string why;
  const auto opening = replay_clock::now();
  p.counting = counters_->open(p.context, &needed, &why);
  p.row.counter_setup_ms += ms_between(opening, replay_clock::now());
  if (p.counting == nullptr) {
    p.row.reason = "counters: " + why + ", run once";
    return false;
  }
  // Passes 1 to k are counted. The program's own launch is the last pass, so it is pass k (and counted) when the
  // metrics' k passes are all the launch gets; with more passes asked, the ones after k run without counters.
  p.counted_passes = std::max<uint32_t>(needed, 1);
  p.passes = std::max(p.passes, p.counted_passes);
  p.row.passes_asked = p.passes;
  return true;
}

void replayer::configure_counting(pending_t& p) {
  const auto configuring = replay_clock::now();
  if (std::string why; p.counting != nullptr && !p.counting->configure(&why)) {
    stop_counting(p, "not configured: " + why);
  }
  p.row.counter_setup_ms += ms_between(configuring, replay_clock::now());
}

bool replayer::drain(pending_t& p) {
  if (driver_.ctx_synchronize() != CUDA_SUCCESS) {
    p.row.reason = "the context could not be synchronised before the launch";
    return false;
  }
  return true;
}

bool replayer::take_snapshot(pending_t& p) {
  p.saved = backend_->capture(p.agent, p.context, p.row);
  if (p.saved == nullptr) {
    return false;
  }
  hint_arguments(p);
  return true;
}

void replayer::run_once_fenced(pending_t& p, const std::string& reason) {
  p.row.reason = reason;
  // After any other thread's window on the device has closed (the fence); counted until the EXIT.
  if (p.device >= 0 && kreplay_copy_begin(&p.agent, 1, &p.fence_token) != KREPLAY_STATUS_SUCCESS) {
    p.fence_token = 0;
  }
}

// ---- --backend cupti-kernel-replay: CUPTI runs the passes ----------------------------------------------------

// The range started before the program's launch: CUPTI replays that launch itself, inside the call, as often as
// the metrics need (saving and restoring memory its own way). kreplay runs no pass and takes no snapshot.
void replayer::begin_cupti_kernel_replay(pending_t& p) {
  uint32_t needed = 0;
  std::string why;
  p.counting = counters_ != nullptr ? counters_->open(p.context, &needed, &why) : nullptr;
  if (p.counting == nullptr) {
    run_once_fenced(p, "counters: " + (counters_ != nullptr ? why : std::string("no metrics")) + ", run once");
    return;
  }
  p.row.passes_asked = std::max<uint32_t>(needed, 1);
  own_call_scope own;
  if (!p.counting->configure(&why) || !p.counting->begin_pass(&why)) {
    p.counting.reset();
    run_once_fenced(p, "counters: " + why + ", run once");
    return;
  }
  p.cupti_replaying = true;
  p.timer.create();
  p.timer.start(p.launch.stream);
}

void replayer::end_cupti_kernel_replay(pending_t& p, const CUpti_CallbackData& data) {
  own_call_scope own;
  p.timer.stop(p.launch.stream);
  const bool ran = succeeded(data) && driver_.ctx_synchronize() == CUDA_SUCCESS;
  std::string why;
  const bool stopped = p.counting->end_pass(&why);
  if (!ran) {
    p.row.reason = "the program's launch failed: CUresult " + std::to_string(static_cast<int>(result_of(data)));
  } else if (!stopped || !p.counting->collect(&p.row.metrics, &why)) {
    p.row.metrics.clear();
    p.row.counters = "not collected: " + why;
  } else {
    p.row.passes_run = p.row.passes_asked;  // CUPTI's passes, all inside the one launch
  }
  p.counting.reset();
  p.row.kernel_ms = p.timer.elapsed_ms();  // the launch with every pass CUPTI ran inside it
}

// ---- Contexts destroyed -------------------------------------------------------------------------------------

// Recorded first, so that a launch's exit on another thread sees the context gone before its sources let go.
void replayer::on_context_destroyed(CUcontext context) {
  {
    std::lock_guard<std::mutex> lock(gone_mutex_);
    const uint64_t number = contexts_destroyed_.load(std::memory_order_relaxed) + 1;
    if (gone_.size() >= gone_kept) {
      gone_.erase(gone_.begin());
    }
    gone_.emplace_back(context, number);
    contexts_destroyed_.store(number, std::memory_order_release);
  }
  if (counters_ != nullptr) {
    counters_->context_gone(context);
  }
  caches_.context_gone(context);
  drop_ranges_of(context);
}

bool replayer::context_gone(const pending_t& p) {
  const uint64_t now = contexts_destroyed_.load(std::memory_order_acquire);
  if (now == p.destroyed_at_entry) {
    return false;
  }
  std::lock_guard<std::mutex> lock(gone_mutex_);
  if (gone_.empty() || gone_.front().second > p.destroyed_at_entry + 1) {
    return true;  // more resets since its entry than are kept
  }
  for (const auto& [context, number] : gone_) {
    if (number > p.destroyed_at_entry && context == p.context) {
      return true;
    }
  }
  return false;
}

// ---- The launch's exit ------------------------------------------------------------------------------------------

// KREPLAY_INJECT_LOG=info: where a replayed stream launch's time went in kernel mode, phase by phase (ms), with its
// passes' parts. When the program's launch is a counted pass, its profiler time and the collection are among those
// parts but fall in the `program` and `program pass` phases, not in `passes`. (Range mode's launches and node mode's
// kernel nodes are not logged.)
void replayer::log_phases(const pending_t& p) {
  const std::string phases = p.phases.text();
  if (phases.empty()) {
    return;
  }
  double profiler_ms = 0;
  std::string by_pass;
  char number[32];
  for (const double ms : p.counter_ms) {
    profiler_ms += ms;
    std::snprintf(number, sizeof(number), " %.3f", ms);
    by_pass += number;
  }
  // The kernel's name last and cut short: a log line holds 1,024 bytes, and the figures must not be the part lost.
  log(KREPLAY_LOG_INFO,
      "launch %" PRIu64 ": %s; in the passes: profiler %.3f, cache flushes %.3f, collect %.3f, restores %.3f; "
      "profiler by pass:%s; kernel %.80s",
      p.row.index, phases.c_str(), profiler_ms, p.flush_ms, p.collect_ms, p.row.restore_ms, by_pass.c_str(),
      p.row.kernel.c_str());
}

// Its events and saved memory went with the context: let go of them without calling into it. A counted pass begun
// at the entry (kernel mode's last, or CUPTI's kernel replay) ends with its session, which calls into the profiler
// only while the source still holds the context.
void replayer::let_go_after_context_gone(pending_t& p) {
  p.timer.forget();
  if (p.saved != nullptr) {
    p.saved->context_gone();
  }
  stop_counting(p, "the launch's context was destroyed");  // the source disabled its object: no Stop
  p.row.reason = "the launch's context was destroyed before its exit";
  close_window(p);
}

void replayer::exit(const CUpti_CallbackData& data) {
  std::unique_ptr<pending_t> p(t_pending);
  t_pending = nullptr;
  if (p == nullptr) {
    return;
  }
  if (p->in_range) {
    return launched_in_range(std::move(p), result_of(data));  // its row comes when the range ends
  }
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  if ((p->replaying || p->cupti_replaying) && context_gone(*p)) {
    let_go_after_context_gone(*p);
  } else if (p->cupti_replaying) {
    end_cupti_kernel_replay(*p, data);
  } else if (p->replaying) {
    p->phases.mark("program");
    finish_program_pass(*p, data);
    p->phases.mark("program pass");
    close_window(*p);
    p->phases.mark("close");
    if (!p->extra_ms.empty()) {
      p->row.extra_pass_ms = median(p->extra_ms);
    }
    p->row.counter_pass_ms = median(p->counter_ms);
    log_phases(*p);
  }
  p->row.replayed = p->row.reason.empty() && p->row.passes_run == p->row.passes_asked;
  if (p->row.reason.empty() && !p->row.replayed) {
    p->row.reason = "fewer passes than asked";
  }
  report_.add(p->row, p->replaying || p->cupti_replaying ? ms_between(p->entered, replay_clock::now()) : 0.0);
}

}  // namespace kreplay::cuda::inject
