// --replay-mode range: up to --range-size consecutive stream launches of one thread replayed as one window.
//
// A launch cannot be held back from a launch callback, and the launches after it are not known at its entry, so a
// range runs the other way round from a kernel-mode window: the program's own launches run first, as the program
// makes them, and kreplay's passes come after the last.
//
//   1. The first launch of a range, at its entry: a window (other threads wait), drain, the snapshot of the
//      memory before the range; the window closes, the snapshot stays. Each launch of the range then has its
//      arguments copied at its entry and runs as the program made it.
//   2. The range ends when it is full (at the exit of its last launch) or at a boundary on its thread: a copy or
//      memset, a synchronisation or a free the program makes (it waits on, reads or frees what the launches
//      wrote), a launch the range does not take (a graph, one run once), another context, an attribute set on
//      a function of the range that its relaunch could not run under (on_function_attribute).
//   3. At the end: a window, drain, a second snapshot (the memory after the range: what the program computed),
//      then the memory before the range put back, and every pass runs the range's launches in order, with the
//      memory before the range restored between passes. With counters, each pass is one Start and Stop of the
//      profiler around all the launches, each launch a user range of its own: the profiler's cost per pass is
//      paid once for the range. Last, the memory after the range is put back (checked whole) and the window
//      closes: what the program sees is what its own launches computed, never kreplay's passes.
//
// One row per launch, written when its range ends; a range still open when the process exits has no rows (the
// summary counts its launches as in progress). Other threads' copies are not held back between the range's
// launches (a window held open across the program's launches could wait on a thread that waits on this one): a
// copy of another thread into the range's memory meanwhile changes what kreplay's passes start from, not what
// the program computes. --verify and graph launches are kernel mode's.
#include <algorithm>

#include "callback_data.hpp"
#include "guard.hpp"
#include "replay/pending.hpp"

namespace kreplay::cuda::inject {

namespace {

// Opens a window on `agent` over `dispatches`, retrying a nested one a few times (another thread's window).
kreplay_window_t* open_range_window(kreplay_agent_t agent, uint32_t dispatches, uint32_t passes, std::string* why) {
  kreplay_window_options_t options{};
  options.struct_size = sizeof(options);
  options.passes = passes;
  options.dispatches = std::max<uint32_t>(dispatches, 2);  // the range's two snapshots are the host's (kreplay.h)
  for (int attempt = 0;; ++attempt) {
    kreplay_window_t* window = nullptr;
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    if (kreplay_window_open(agent, &options, &window, &reason) == KREPLAY_STATUS_SUCCESS) {
      return window;
    }
    if (reason != KREPLAY_DECLINE_WINDOW_NESTED || attempt == 3) {
      *why = "window declined: " + decline_text(reason);
      return nullptr;
    }
    uint64_t token = 0;
    if (kreplay_copy_begin(&agent, 1, &token) == KREPLAY_STATUS_SUCCESS) {
      kreplay_copy_end(token);
    }
  }
}

// Closes a window when it goes (also on an exception), so that no other thread waits on it for ever.
struct window_guard {
  kreplay_window_t* handle;
  explicit window_guard(kreplay_window_t* window) : handle(window) {}
  ~window_guard() {
    if (handle != nullptr) {
      (void)kreplay_window_close(handle, nullptr);
    }
  }
  window_guard(const window_guard&) = delete;
  window_guard& operator=(const window_guard&) = delete;
};

// Every row of the range gets `field` set to `text`.
void for_rows(std::vector<std::unique_ptr<replayer::pending_t>>& launches, std::string launch_row_t::*field,
              const std::string& text) {
  for (auto& p : launches) {
    p->row.*field = text;
  }
}

}  // namespace

// A context destroyed: its ranges end without passes (their snapshots went with it); the launches ran once.
void replayer::drop_ranges_of(CUcontext context) {
  std::vector<std::unique_ptr<range_t>> dropped;
  {
    std::lock_guard<std::mutex> lock(ranges_mutex_);
    for (auto at = ranges_.begin(); at != ranges_.end();) {
      if (at->second->context == context) {
        dropped.push_back(std::move(at->second));
        at = ranges_.erase(at);
      } else {
        ++at;
      }
    }
  }
  for (auto& range : dropped) {
    if (!range->launches.empty()) {
      report_.range_ended("its context was destroyed", range->launches.size());
    }
    range->before->context_gone();
    for (auto& p : range->launches) {
      p->row.reason = "range: its context was destroyed before it ended, its launches ran once";
      in_flight_.fetch_sub(1, std::memory_order_relaxed);
      report_.add(p->row, 0.0);
    }
  }
}

// Whether a relaunch after the program's call has returned has arguments of its own: the private copy, or none
// needed (a kernel without parameters).
static bool arguments_kept(const launch_t& launch, const driver_api_t& driver) {
  if (!launch.argument_pointers.empty() || !launch.extra_copy.empty()) {
    return true;
  }
  size_t offset = 0;
  size_t size = 0;
  return driver.func_get_param_info != nullptr
             ? driver.func_get_param_info(launch.loaded, 0, &offset, &size) != CUDA_SUCCESS
             : launch.kernel_params == nullptr && launch.extra == nullptr;
}

// At a launch's entry: the thread's range (begun here when there is none, or when the open one is of another
// context), the launch's arguments copied, and the fence taken as a launch run once takes it (so that no other
// thread's window is open while it runs). The launch then runs as the program made it.
void replayer::join_range(pending_t& p) {
  copy_arguments(p.launch, driver_);
  if (!arguments_kept(p.launch, driver_)) {
    end_range("a launch whose arguments cannot be copied");
    return run_once_fenced(p, "range: its arguments cannot be copied, run once");
  }
  bool joined = false;
  {
    std::lock_guard<std::mutex> lock(ranges_mutex_);
    auto found = ranges_.find(std::this_thread::get_id());
    if (found != ranges_.end() && found->second->context == p.context) {
      found->second->entering = &p;
      joined = true;
    }
  }
  if (!joined && !begin_range(p)) {
    return;
  }
  p.in_range = true;
  run_once_fenced(p, "");
}

// A new range for the calling thread, from `p`: the memory before it saved inside a window. False (the launch
// then runs once, with the reason) when the snapshot declined.
bool replayer::begin_range(pending_t& p) {
  end_range("a launch in another context");
  auto range = std::make_unique<range_t>();
  range->context = p.context;
  range->device = p.device;
  range->agent = p.agent;
  std::string why;
  kreplay_window_t* window = open_range_window(p.agent, 2, 1, &why);
  if (window == nullptr) {
    run_once_fenced(p, why);
    return false;
  }
  if (driver_.ctx_synchronize() != CUDA_SUCCESS) {
    why = "the context could not be synchronised before the range";
  } else {
    range->before = backend_->capture(p.agent, p.context, p.row);
  }
  (void)kreplay_window_close(window, nullptr);
  if (range->before == nullptr) {
    run_once_fenced(p, why.empty() ? p.row.reason : why);
    return false;
  }
  range->entering = &p;
  std::lock_guard<std::mutex> lock(ranges_mutex_);
  ranges_[std::this_thread::get_id()] = std::move(range);
  return true;
}

// At a range launch's exit: the fence released, the launch handed to its range (one that failed runs once, with
// why); a full range ends now.
void replayer::launched_in_range(std::unique_ptr<pending_t> p, CUresult result) {
  const bool launched = result == CUDA_SUCCESS;
  if (p->fence_token != 0) {
    kreplay_copy_end(p->fence_token);
    p->fence_token = 0;
  }
  bool full = false;
  {
    std::lock_guard<std::mutex> lock(ranges_mutex_);
    auto found = ranges_.find(std::this_thread::get_id());
    if (found != ranges_.end()) {
      range_t& range = *found->second;
      range.entering = nullptr;
      if (launched) {
        range.launches.push_back(std::move(p));
        full = range.launches.size() >= config_.range_size;
      }
    }
  }
  if (p != nullptr) {  // its call failed, or its range is gone (its context was destroyed): it ran once
    p->row.reason = launched ? "range: its context was destroyed before the launch returned, run once"
                             : "the program's launch failed: CUresult " + std::to_string(static_cast<int>(result));
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    report_.add(p->row, 0.0);
    return;
  }
  if (full) {
    end_range("full");
  }
}

void replayer::on_range_end_call(const CUpti_CallbackData& data) {
  if (data.callbackSite == CUPTI_API_ENTER && !inside_own_call()) {
    end_range(data.functionName != nullptr ? data.functionName : "a synchronisation or free");
  }
}

namespace {

// A call that sets a function's attribute: the function as a launch would name it (the call's handle; for a
// CUkernel, also its function in the range's context, resolved only when needed), the attribute and its value.
struct attribute_call {
  CUfunction named = nullptr;
  CUkernel kernel = nullptr;  // cuKernelSetAttribute's
  CUfunction_attribute attribute{};
  int value = 0;
};

attribute_call decode_attribute_call(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  attribute_call out;
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuKernelSetAttribute) {
    const auto& call = params<cuKernelSetAttribute_params>(data);
    out.named = reinterpret_cast<CUfunction>(call.kernel);
    out.kernel = call.kernel;
    out.attribute = call.attrib;
    out.value = call.val;
  } else {
    const auto& call = params<cuFuncSetAttribute_params>(data);
    out.named = call.hfunc;
    out.attribute = call.attrib;
    out.value = call.value;
  }
  return out;
}

// Whether the call can make a relaunch of `l` fail that its launch did not: its dynamic shared-memory limit set
// below what `l` was made with, or another attribute set (the cluster ones: what cluster dimensions a launch may
// use), whatever the value; not the shared-memory carve-out, a hint. The function is not compared here.
bool could_refuse(const launch_t& l, const attribute_call& call) {
  switch (call.attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      return call.value < 0 || static_cast<unsigned>(call.value) < dynamic_shared_bytes(l);
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      return false;
    default:
      return true;
  }
}

// A CUkernel's function in `context` (null when there is none).
CUfunction function_in(const driver_api_t& driver, CUkernel kernel, CUcontext context) {
  CUfunction function = nullptr;
  if (driver.kernel_get_function == nullptr || driver.ctx_push == nullptr || driver.ctx_push(context) != CUDA_SUCCESS) {
    return nullptr;
  }
  if (driver.kernel_get_function(&function, kernel) != CUDA_SUCCESS) {
    function = nullptr;
  }
  CUcontext popped = nullptr;
  (void)driver.ctx_pop(&popped);
  return function;
}

bool same_function(const launch_t& l, const attribute_call& call, CUfunction in_context) {
  return call.named != nullptr &&
         (l.function == call.named || l.loaded == call.named || (in_context != nullptr && l.loaded == in_context));
}

}  // namespace

// The program sets a function's attribute while its thread has a range. Its dynamic shared-memory limit (which a
// library may set before each launch to that launch's need, lower as well as higher) set below what a launch of
// the range of that function was made with, or another attribute of such a function set (the cluster ones), could
// make the relaunch fail where the launch did not: the range ends before the call, while the attributes are those
// its launches had. The function is named by a CUfunction (cuFuncSetAttribute) or a CUkernel (cuKernelSetAttribute,
// which the runtime's cudaFuncSetAttribute calls), matched with the handle the launch was made with or with the
// kernel's function in the range's context. Only the calling thread's range is covered: another thread's call
// meanwhile makes the relaunch fail, and the pass stops with the CUresult in the rows (kernel nodes, relaunched
// after the program's calls too, the same).
void replayer::on_function_attribute(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (data.callbackSite != CUPTI_API_ENTER || inside_own_call()) {
    return;
  }
  const attribute_call call = decode_attribute_call(cbid, data);
  const CUcontext context = range_holding([&](const launch_t& l) { return could_refuse(l, call); });
  if (context == nullptr) {
    return;  // no range, or none of its launches could be refused whatever the function
  }
  const CUfunction in_context = call.kernel != nullptr ? function_in(driver_, call.kernel, context) : nullptr;
  if (range_holding([&](const launch_t& l) { return could_refuse(l, call) && same_function(l, call, in_context); }) !=
      nullptr) {
    end_range(call.attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                  ? "a function's shared-memory limit lowered below a launch of the range"
                  : "an attribute of a function of the range set");
  }
}

CUcontext replayer::range_holding(const std::function<bool(const launch_t&)>& test) {
  std::lock_guard<std::mutex> lock(ranges_mutex_);
  auto found = ranges_.find(std::this_thread::get_id());
  if (found == ranges_.end()) {
    return nullptr;
  }
  const range_t& range = *found->second;
  const bool holds = std::any_of(range.launches.begin(), range.launches.end(),
                                 [&](const std::unique_ptr<pending_t>& p) { return test(p->launch); });
  return holds ? range.context : nullptr;
}

// The calling thread's range, if it has one with launches handed over: its passes, its rows.
void replayer::end_range(const std::string& why_ended) {
  std::unique_ptr<range_t> range;
  {
    std::lock_guard<std::mutex> lock(ranges_mutex_);
    auto found = ranges_.find(std::this_thread::get_id());
    if (found == ranges_.end() || found->second->entering != nullptr) {
      return;  // none, or a launch of it is still in its call (the boundary is inside another tool's callback)
    }
    range = std::move(found->second);
    ranges_.erase(found);
  }
  if (!range->launches.empty()) {
    report_.range_ended(why_ended, range->launches.size());
  }
  const auto begun = replay_clock::now();
  if (range->launches.empty()) {
    // nothing to replay (its first launch failed): the snapshot goes
  } else if (captures_.load(std::memory_order_relaxed) > 0) {
    // A synchronisation now would invalidate the capture: the launches ran once, as the program made them.
    for_rows(range->launches, &launch_row_t::reason, "range: ended inside a stream capture, its launches ran once");
  } else {
    CUcontext popped = nullptr;
    const bool pushed = driver_.ctx_push != nullptr && driver_.ctx_push(range->context) == CUDA_SUCCESS;
    try {
      replay_range(*range);
    } catch (...) {  // out of host memory on the way: the window guard closed the window
      for_rows(range->launches, &launch_row_t::reason,
               "range: internal error (out of host memory); the program's results may include kreplay's passes");
    }
    if (pushed) {
      (void)driver_.ctx_pop(&popped);
    }
  }
  // Each launch's share of the range's replay.
  const double share = ms_between(begun, replay_clock::now()) / static_cast<double>(std::max<size_t>(1, range->launches.size()));
  for (auto& p : range->launches) {
    p->row.replayed = p->row.reason.empty() && p->row.passes_run == p->row.passes_asked;
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    report_.add(p->row, share);
  }
}

// The range's counting, not yet configured: one session for all its launches (null, with the rows' `counters`
// saying why, without).
std::unique_ptr<counter_session> replayer::range_counting(range_t& range, uint32_t* counted, double* setup_ms) {
  *counted = 0;
  if (counters_ == nullptr) {
    return nullptr;
  }
  std::string why;
  const auto n = static_cast<uint32_t>(range.launches.size());
  const auto opening = replay_clock::now();
  std::unique_ptr<counter_session> counting = counters_->open_ranges(range.context, n, counted, &why);
  *setup_ms += ms_between(opening, replay_clock::now());
  if (counting == nullptr) {
    for_rows(range.launches, &launch_row_t::counters, "not counted: " + why);
    *counted = 0;
  }
  return counting;
}

// The passes, inside a window, between the snapshot of the memory after the range and its restore.
void replayer::replay_range(range_t& range) {
  own_call_scope own;  // the relaunches and their callbacks are kreplay's
  auto& launches = range.launches;
  launch_row_t& first = launches.front()->row;
  uint32_t counted = 0;
  range_pass_costs costs;
  std::unique_ptr<counter_session> counting = range_counting(range, &counted, &costs.setup_ms);
  // kreplay's passes come after the program's own run of the range: --passes counts that one too.
  const uint32_t passes = std::max<uint32_t>({config_.passes > 1 ? config_.passes - 1 : 1, counted, 1});
  std::string why;
  const window_guard window(open_range_window(range.agent, static_cast<uint32_t>(launches.size()), passes + 1, &why));
  if (window.handle == nullptr) {
    return for_rows(launches, &launch_row_t::reason, "range: " + why + ", its launches ran once");
  }
  std::unique_ptr<saved_memory> after;
  if (driver_.ctx_synchronize() == CUDA_SUCCESS) {
    after = backend_->capture(range.agent, range.context, first);
  }
  if (after == nullptr) {
    return for_rows(launches, &launch_row_t::reason,
                    "range: the memory after it was not saved (" + first.reason + "), its launches ran once");
  }
  // Configured inside the window: the context's profiler and images are shared with other launches' sessions.
  auto setting_up = replay_clock::now();
  if (counting != nullptr && !counting->configure(&why)) {
    for_rows(launches, &launch_row_t::counters, "not configured: " + why);
    counting.reset();
    counted = 0;
  }
  costs.setup_ms += ms_between(setting_up, replay_clock::now());
  const uint32_t ran = run_range_passes(range, passes, counting.get(), counted, &costs);
  setting_up = replay_clock::now();
  if (counting != nullptr && !costs.counting_lost) {
    collect_range(range, *counting, ran >= counted);
  }
  costs.setup_ms += ms_between(setting_up, replay_clock::now());
  // What the program's own launches computed, whatever the passes did (the control restores nothing).
  const bool back = !config_.restore || after->restore(first, true);
  after.reset();
  finish_range_rows(range, passes, ran, back, costs);
}

// Passes 1 to `passes` (the first `counted` of them counted), the memory before the range restored before each
// (--debug-no-restore, the control: never). Returns the passes that ran; `costs`: per launch, each pass after the
// first without the profiler's calls, and the profiler's calls of each counted pass.
uint32_t replayer::run_range_passes(range_t& range, uint32_t passes, counter_session* counting, uint32_t counted,
                                    range_pass_costs* costs) {
  launch_row_t& first = range.launches.front()->row;
  const bool restores = config_.restore;
  const auto n = static_cast<double>(range.launches.size());
  uint32_t ran = 0;
  bool restored = !restores || range.before->restore(first, true);
  for (uint32_t pass = 1; restored && pass <= passes; ++pass) {
    const auto begun = replay_clock::now();
    double counter_ms = 0;
    double flush_ms = 0;
    counter_session* const counts = pass <= counted && !costs->counting_lost ? counting : nullptr;
    const bool ran_pass = run_range_pass(range, pass, counts, &counter_ms, &flush_ms, &costs->counting_lost);
    costs->setup_ms += flush_ms;
    if (!ran_pass) {
      break;
    }
    ++ran;
    restored = pass == passes || !restores || range.before->restore(first, false);
    if (counts != nullptr) {
      costs->counter_ms.push_back(counter_ms / n);
    }
    if (pass > 1) {
      costs->extra_ms.push_back((ms_between(begun, replay_clock::now()) - counter_ms - flush_ms) / n);
    }
  }
  return ran;
}

// Each launch's values, when every counted pass ran.
void replayer::collect_range(range_t& range, counter_session& counting, bool complete) {
  if (!complete) {
    return for_rows(range.launches, &launch_row_t::counters, "stopped: a pass of the range did not run");
  }
  std::string why;
  for (size_t i = 0; i < range.launches.size(); ++i) {
    launch_row_t& row = range.launches[i]->row;
    if (!counting.collect_range(i, &row.metrics, &why)) {
      row.metrics.clear();
      row.counters = "not collected: " + why;
    }
  }
}

void replayer::finish_range_rows(range_t& range, uint32_t passes, uint32_t ran, bool back,
                                 const range_pass_costs& costs) {
  launch_row_t figures;  // the range's snapshot and restores, shared by its rows
  const bool accounted = range.before->account(figures);
  const auto n = static_cast<double>(range.launches.size());
  for (auto& p : range.launches) {
    launch_row_t& row = p->row;
    row.passes_asked = passes + 1;
    row.passes_run = ran + 1;
    row.extra_pass_ms = median(costs.extra_ms);
    row.counter_pass_ms = median(costs.counter_ms);
    row.counter_setup_ms = costs.setup_ms / n;
    if (accounted) {
      row.footprint_bytes = figures.footprint_bytes;
      row.digested_bytes = static_cast<size_t>(static_cast<double>(figures.digested_bytes) / n);
      row.restore_ms = figures.restore_ms / n;
    }
    if (!back) {
      row.reason = "range: the memory after it could not be put back; the program may see kreplay's passes";
    } else if (ran < passes) {
      row.reason = "range: pass " + std::to_string(ran + 1) + " of " + std::to_string(passes) + " did not run" +
                   (range.pass_failure.empty() ? "" : " (" + range.pass_failure + ")");
    }
  }
}

// The caches flushed before a counted pass of the range, a failure's note in its rows; the flush's time.
double replayer::flush_before_range_pass(range_t& range) {
  std::string why;
  const double ms = flush_caches(range.context, range.launches.front()->launch.stream, &why);
  if (!why.empty() && range.launches.front()->row.counters.empty()) {
    for_rows(range.launches, &launch_row_t::counters, why);
  }
  return ms;
}

// One pass over the range's launches, from the memory before it: with `counting`, one Start and Stop around them
// all (each launch a range of its own: begin_range / end_range around it, in *counter_ms with them), the caches
// flushed before. False when a launch or the wait failed.
bool replayer::run_range_pass(range_t& range, uint32_t pass, counter_session* counting, double* counter_ms,
                              double* flush_ms, bool* counting_lost) {
  *flush_ms = counting != nullptr ? flush_before_range_pass(range) : 0.0;
  std::string why;
  auto profiler = replay_clock::now();
  const bool counted = counting != nullptr && counting->begin_pass(&why);
  *counter_ms = ms_between(profiler, replay_clock::now());
  bool ran = true;
  bool ranged = counted;  // each launch its own user range while the profiler takes them
  for (size_t i = 0; i < range.launches.size(); ++i) {
    pending_t& p = *range.launches[i];
    profiler = replay_clock::now();
    ranged = ranged && counting->begin_range(&why);
    *counter_ms += ms_between(profiler, replay_clock::now());
    const CUresult launched = relaunch(p.launch, driver_);
    ran = launched == CUDA_SUCCESS;
    profiler = replay_clock::now();
    ranged = ranged && counting->end_range(&why);
    *counter_ms += ms_between(profiler, replay_clock::now());
    if (!ran) {
      range.pass_failure = "its launch " + std::to_string(i + 1) + ", " + p.row.kernel.substr(0, 80) + ": CUresult " +
                           std::to_string(static_cast<int>(launched));
      break;  // the pass is lost: no more launches, and no empty ranges after it
    }
  }
  const CUresult waited = driver_.ctx_synchronize();  // also after a failed relaunch
  if (ran && waited != CUDA_SUCCESS) {
    range.pass_failure = "the wait for its launches: CUresult " + std::to_string(static_cast<int>(waited));
  }
  ran = ran && waited == CUDA_SUCCESS;
  profiler = replay_clock::now();
  const bool ended = !counted || counting->end_pass(&why);
  *counter_ms += ms_between(profiler, replay_clock::now());
  if (counting != nullptr && !(counted && ranged && ended)) {
    // The profiler did not take this pass as the launches' ranges: no later pass is counted, nothing is collected,
    // and the rows keep the first reason; the replay goes on.
    for_rows(range.launches, &launch_row_t::counters, "stopped: pass " + std::to_string(pass) + ": " + why);
    *counting_lost = true;
  }
  return ran;
}

}  // namespace kreplay::cuda::inject
