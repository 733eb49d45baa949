#include "replay.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include <cupti_checkpoint.h>

#include "callback_data.hpp"
#include "guard.hpp"
#include "log.hpp"
#include "symbols.hpp"

namespace kreplay::cuda::inject {

// cupti_checkpoint.h declares its C++ names in a namespace of its own.
using NV::Cupti::Checkpoint::CUpti_Checkpoint;

const CUpti_CallbackId replay_launch_ids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,         CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,            CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};
const size_t replay_launch_id_count = std::size(replay_launch_ids);
const CUpti_CallbackId replay_capture_ids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture,         CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2,      CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph,  CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture,           CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz,
};
const size_t replay_capture_id_count = std::size(replay_capture_ids);


namespace {

using clock_type = std::chrono::steady_clock;
double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

enum class launch_kind : uint8_t { kernel, kernel_ex, cooperative, graph };

// More than a kernel can take (4 KiB of parameters, at least a byte each, as of CUDA 12.1: 32 KiB): the query
// loop's bound, whatever the driver answers.
constexpr size_t max_parameters = 32768;

// The stream a replayed pass uses: the per-thread forms name the per-thread default stream with 0.
CUstream stream_for(CUstream stream, bool per_thread) {
  return stream == nullptr && per_thread ? CU_STREAM_PER_THREAD : stream;
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  }
  return out + "\"";
}

}  // namespace

// One launch between its ENTER and its EXIT on the calling thread.
struct replayer::pending_t {
  launch_kind kind = launch_kind::kernel;
  CUfunction function = nullptr;   // as the program passed it (a CUfunction, or a CUkernel passed as one)
  CUfunction loaded = nullptr;     // a CUfunction of it in the launch's context, for the queries
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  unsigned shared_bytes = 0;
  CUstream stream = nullptr;       // already mapped by stream_for
  void** kernel_params = nullptr;  // the program's, valid until the launch call returns
  void** extra = nullptr;
  CUlaunchConfig config{};
  std::vector<CUlaunchAttribute> attributes;
  // The private copy of the arguments (when the driver can say where each one is).
  std::vector<unsigned char> argument_bytes;
  std::vector<void*> argument_pointers;
  std::vector<void*> extra_copy;
  size_t extra_size = 0;

  int device = -1;
  CUcontext context = nullptr;     // the launch's
  kreplay_agent_t agent{0};
  bool replaying = false;          // window and snapshot held, kreplay's passes run: EXIT closes the window
  uint32_t own_passes_run = 0;     // the passes kreplay ran at the entry (the program's launch is the last)
  uint64_t fence_token = 0;        // a launch run once: it waited for other threads' windows
  kreplay_window_t* window = nullptr;
  kreplay_snapshot_t* snapshot = nullptr;
  CUpti_Checkpoint checkpoint{};
  CUptiResult (*checkpoint_free)(void*) = nullptr;  // set once the checkpoint is saved
  CUresult (*event_destroy)(CUevent) = nullptr;
  CUevent start_event = nullptr;
  CUevent end_event = nullptr;
  clock_type::time_point entered;
  clock_type::time_point program_pass_begun;       // the program's own launch (the last pass) begins
  double restore_before_program_ms = 0;            // the restore that prepared it
  std::vector<double> extra_ms;                    // cost of each pass after the first
  std::vector<std::pair<const void*, size_t>> footprint;  // --verify: the regions digested
  std::vector<kreplay_digest_t> first_digests;            // --verify: after pass 1
  bool verifying = false;
  launch_row_t row;

  pending_t() = default;
  pending_t(const pending_t&) = delete;
  pending_t& operator=(const pending_t&) = delete;
  // Whatever the normal path did not release (an exception on the way): nothing stays open or held, so no
  // other thread waits on this launch's window for ever.
  ~pending_t() {
    if (snapshot != nullptr) {
      kreplay_snapshot_free(snapshot);
    }
    if (window != nullptr) {
      (void)kreplay_window_close(window, nullptr);
    }
    if (checkpoint_free != nullptr) {
      own_call_scope own;
      (void)checkpoint_free(&checkpoint);
    }
    if (fence_token != 0) {
      kreplay_copy_end(fence_token);
    }
    if (event_destroy != nullptr) {
      own_call_scope own;
      if (start_event != nullptr) {
        (void)event_destroy(start_event);
      }
      if (end_event != nullptr) {
        (void)event_destroy(end_event);
      }
    }
  }
};

namespace {
thread_local replayer::pending_t* t_pending = nullptr;
thread_local int t_launch_depth = 0;  // launch callbacks in progress on this thread (another tool's may nest)
thread_local uint64_t t_copy_token = 0;
}  // namespace

bool resolve_checkpoint(checkpoint_api_t& out, const void* cupti_symbol, std::string* where) {
  auto from = [&](void* library) {
    if (library == nullptr) {
      return false;
    }
    checkpoint_api_t found;  // published whole or not at all
    find_symbol(library, "cuptiCheckpointSave", found.save);
    find_symbol(library, "cuptiCheckpointRestore", found.restore);
    find_symbol(library, "cuptiCheckpointFree", found.free);
    if (found.save == nullptr || found.restore == nullptr || found.free == nullptr) {
      return false;
    }
    out = found;
    return true;
  };
  if (const char* path = std::getenv("KREPLAY_CHECKPOINT_PATH"); path != nullptr && *path != '\0') {
    *where = std::string("KREPLAY_CHECKPOINT_PATH=") + path;
    return from(dlopen(path, RTLD_NOW | RTLD_GLOBAL));
  }
  Dl_info info{};
  if (cupti_symbol != nullptr && dladdr(cupti_symbol, &info) != 0 && info.dli_fname != nullptr) {
    std::string beside = info.dli_fname;
    beside = beside.substr(0, beside.rfind('/') + 1) + "libcheckpoint.so";
    if (from(dlopen(beside.c_str(), RTLD_NOW | RTLD_GLOBAL))) {
      *where = beside;
      return true;
    }
  }
  *where = "libcheckpoint.so by the loader's search";
  if (from(dlopen("libcheckpoint.so", RTLD_NOW | RTLD_GLOBAL))) {
    return true;
  }
  *where = "no libcheckpoint.so beside libcupti or on the loader's path (set KREPLAY_CHECKPOINT_PATH)";
  return false;
}

std::string csv_header() {
  return "launch,kernel,device,grid,block,passes_asked,passes_run,footprint_bytes,bytes_moved,snapshot_ms,"
         "restore_ms,kernel_ms,extra_pass_ms,replayed,reason,verify\n";
}

// Milliseconds with four decimals, written with integers: "%.4f" follows the program's LC_NUMERIC, and a
// decimal comma would break the CSV.
std::string fixed4(double ms) {
  const long long tenths_of_us = std::llround(ms * 1e4);
  const unsigned long long magnitude = static_cast<unsigned long long>(tenths_of_us < 0 ? -tenths_of_us : tenths_of_us);
  char text[48];
  std::snprintf(text, sizeof(text), "%s%llu.%04llu", tenths_of_us < 0 ? "-" : "", magnitude / 10000, magnitude % 10000);
  return text;
}

std::string csv_row(const launch_row_t& r) {
  char shape[160];
  std::snprintf(shape, sizeof(shape), "%d,%ux%ux%u,%ux%ux%u,%" PRIu32 ",%" PRIu32 ",%zu,%zu,", r.device, r.grid[0],
                r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2], r.passes_asked, r.passes_run,
                r.footprint_bytes, r.bytes_moved);
  return std::to_string(r.index) + "," + quoted(r.kernel) + "," + shape + fixed4(r.snapshot_ms) + "," +
         fixed4(r.restore_ms) + "," + fixed4(r.kernel_ms) + "," + fixed4(r.extra_pass_ms) + "," +
         (r.replayed ? "1," : "0,") + quoted(r.reason) + "," + quoted(r.verify) + "\n";
}

bool replayer::load_checkpoint(std::string* why) {
  std::string where;
  if (!resolve_checkpoint(checkpoint_, cupti_symbol_, &where)) {
    *why = "--backend cupti: " + where;
    return false;
  }
  std::fprintf(stderr, "kreplay-cuda-replay: --backend cupti: CUPTI's Checkpoint API from %s\n", where.c_str());
  return true;
}

replayer::replayer(tracker& tracker, const replay_config_t& config, const kreplay_device_ops_t& ops,
                   const driver_api_t& driver)
    : tracker_(tracker), config_(config), ops_(ops), driver_(driver), selector_(config) {
  started_ = clock_type::now();
  last_progress_ = started_;
}

std::vector<CUpti_CallbackDomain> replayer::whole_domains() const {
  if (config_.backend == replay_backend::cupti) {
    // --backend cupti ran on the H200 (run 5, docs/performance.md) with the runtime and resource domains
    // enabled whole, as in the reference measurement of CUPTI's Checkpoint API; the callbacks they add are
    // ignored, and their cost is the backend's.
    return {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_RESOURCE};
  }
  return {};
}

bool replayer::start(const void* cupti_symbol, std::string* why) {
  // --backend cupti: libcheckpoint.so is loaded at the first save, in the process CUDA has set up by then.
  cupti_symbol_ = cupti_symbol;
  if (!config_.output.empty() && config_.launcher_pid != 0 &&
      config_.launcher_pid != static_cast<uint64_t>(getpid())) {
    // A child of the program (it inherited the environment): a report of its own, beside the program's.
    const size_t dot = config_.output.rfind('.');
    const size_t slash = config_.output.rfind('/');
    const std::string pid = "." + std::to_string(getpid());
    config_.output = dot != std::string::npos && (slash == std::string::npos || dot > slash)
                         ? config_.output.substr(0, dot) + pid + config_.output.substr(dot)
                         : config_.output + pid;
  }
  if (!config_.output.empty()) {
    csv_ = std::fopen(config_.output.c_str(), "w");
    if (csv_ == nullptr) {
      *why = "cannot write the report " + config_.output + ": " + std::strerror(errno);
      return false;
    }
    std::fputs(csv_header().c_str(), csv_);
    std::fflush(csv_);
  }
  return true;
}

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
    const int device = tracker_.device_of(data.context);
    if (device >= 0) {
      const kreplay_agent_t agent{static_cast<uint64_t>(device) + 1};
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
      // Out of host memory on the way: the launch runs once, from the snapshot's memory if passes ran.
      if (t_pending != nullptr && t_pending->snapshot != nullptr) {
        (void)kreplay_restore(t_pending->snapshot, nullptr);
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
  auto* p = new (std::nothrow) pending_t;
  if (p == nullptr) {
    return;
  }
  t_pending = p;
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  p->entered = clock_type::now();
  p->row.index = launches_.fetch_add(1, std::memory_order_relaxed);
  p->row.passes_asked = config_.passes;
  p->row.passes_run = 1;  // a launch run once; a replayed one's count is set at its exit
  const bool per_thread = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
                          cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz ||
                          cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz ||
                          cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz;
  auto dims = [&](const auto& q) {
    p->function = q.f;
    p->grid[0] = q.gridDimX, p->grid[1] = q.gridDimY, p->grid[2] = q.gridDimZ;
    p->block[0] = q.blockDimX, p->block[1] = q.blockDimY, p->block[2] = q.blockDimZ;
    p->shared_bytes = q.sharedMemBytes;
    p->stream = stream_for(q.hStream, per_thread);
    p->kernel_params = q.kernelParams;
  };
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
      dims(params<cuLaunchKernel_params>(data));
      p->extra = params<cuLaunchKernel_params>(data).extra;
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      dims(params<cuLaunchKernel_ptsz_params>(data));
      p->extra = params<cuLaunchKernel_ptsz_params>(data).extra;
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
      p->kind = launch_kind::cooperative;
      dims(params<cuLaunchCooperativeKernel_params>(data));
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      p->kind = launch_kind::cooperative;
      dims(params<cuLaunchCooperativeKernel_ptsz_params>(data));
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
      // The two parameter structs are laid out alike.
      const auto& q = params<cuLaunchKernelEx_params>(data);
      p->kind = launch_kind::kernel_ex;
      p->function = q.f;
      p->kernel_params = q.kernelParams;
      p->extra = q.extra;
      if (q.config != nullptr) {
        p->config = *q.config;
        p->attributes.assign(q.config->attrs, q.config->attrs + (q.config->attrs != nullptr ? q.config->numAttrs : 0));
        p->config.attrs = p->attributes.empty() ? nullptr : p->attributes.data();
        p->config.hStream = stream_for(q.config->hStream, per_thread);
        p->grid[0] = q.config->gridDimX, p->grid[1] = q.config->gridDimY, p->grid[2] = q.config->gridDimZ;
        p->block[0] = q.config->blockDimX, p->block[1] = q.config->blockDimY, p->block[2] = q.config->blockDimZ;
        p->stream = p->config.hStream;
      }
      break;
    }
    default:
      p->kind = launch_kind::graph;
      p->stream = stream_for(params<cuGraphLaunch_params>(data).hStream, per_thread);
      break;
  }
  std::copy(std::begin(p->grid), std::end(p->grid), std::begin(p->row.grid));
  std::copy(std::begin(p->block), std::end(p->block), std::begin(p->row.block));
  p->context = data.context;
  p->device = tracker_.device_of(data.context);
  p->row.device = p->device;
  p->agent = kreplay_agent_t{static_cast<uint64_t>(p->device < 0 ? 0 : p->device) + 1};

  // The function's name, and a CUfunction of it loaded in this context: a lazily loaded module is loaded now,
  // before the snapshot, so that its variables are captured (the CUPTI layer follows the load).
  const char* name = nullptr;
  if (p->kind == launch_kind::graph) {
    p->row.kernel = "(graph launch)";
  } else {
    CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_LOADED;
    if (driver_.func_get_name != nullptr && driver_.func_get_name(&name, p->function) == CUDA_SUCCESS) {
      p->loaded = p->function;
    } else if (driver_.kernel_get_name != nullptr &&
               driver_.kernel_get_name(&name, reinterpret_cast<CUkernel>(p->function)) == CUDA_SUCCESS &&
               driver_.kernel_get_function != nullptr) {
      if (driver_.kernel_get_function(&p->loaded, reinterpret_cast<CUkernel>(p->function)) != CUDA_SUCCESS) {
        p->loaded = nullptr;
      }
    }
    if (p->loaded != nullptr && driver_.func_is_loaded != nullptr && driver_.func_load != nullptr &&
        driver_.func_is_loaded(&state, p->loaded) == CUDA_SUCCESS && state != CU_FUNCTION_LOADING_STATE_LOADED) {
      (void)driver_.func_load(p->loaded);
    }
    p->row.kernel = name != nullptr ? name : "(unnamed)";
  }

  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const launch_selector::verdict verdict =
        p->kind == launch_kind::graph ? launch_selector::verdict::replay : selector_.classify(name);
    if (verdict != launch_selector::verdict::replay) {
      reason = launch_selector::text(verdict);
    }
  }
  if (reason.empty() && p->kind == launch_kind::graph) {
    reason = "graph launch: its kernels raise no launch callback, run once";
  }
  if (reason.empty() && captures_.load(std::memory_order_relaxed) > 0) {
    reason = "a stream capture is in progress: the launch may not execute, run once";
  }
  if (reason.empty() && driver_.stream_is_capturing != nullptr) {
    // Also a capture begun before the injection saw it, or on this very stream: asked of the driver.
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (driver_.stream_is_capturing(p->stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE) {
      reason = "a stream capture is in progress: the launch may not execute, run once";
    }
  }
  if (reason.empty() && p->device < 0) {
    reason = "the launch's device is unknown";
  }
  if (reason.empty() && p->loaded == nullptr) {
    reason = "the function cannot be queried in the launch's context";
  }
  if (!reason.empty()) {
    run_once_fenced(*p, reason);
    return;
  }

  // The private copy of the arguments: the driver says where each one is and its size.
  if (p->kernel_params != nullptr && driver_.func_get_param_info != nullptr) {
    std::vector<std::pair<size_t, size_t>> layout;
    for (size_t i = 0; i < max_parameters; ++i) {
      size_t offset = 0;
      size_t size = 0;
      if (driver_.func_get_param_info(p->loaded, i, &offset, &size) != CUDA_SUCCESS) {
        break;
      }
      layout.emplace_back(offset, size);
    }
    size_t total = 0;
    for (const auto& [offset, size] : layout) {
      total = std::max(total, offset + size);
    }
    p->argument_bytes.assign(total, 0);
    p->argument_pointers.resize(layout.size());
    for (size_t i = 0; i < layout.size(); ++i) {
      std::memcpy(p->argument_bytes.data() + layout[i].first, p->kernel_params[i], layout[i].second);
      p->argument_pointers[i] = p->argument_bytes.data() + layout[i].first;
    }
  } else if (p->extra != nullptr) {
    // CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE: one buffer holds every argument.
    const void* buffer = nullptr;
    for (size_t i = 0; p->extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buffer = p->extra[i + 1];
      } else if (p->extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        p->extra_size = *static_cast<const size_t*>(p->extra[i + 1]);
      }
    }
    if (buffer != nullptr) {
      p->argument_bytes.assign(static_cast<const unsigned char*>(buffer),
                               static_cast<const unsigned char*>(buffer) + p->extra_size);
      p->extra_copy = {CU_LAUNCH_PARAM_BUFFER_POINTER, p->argument_bytes.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                       &p->extra_size, CU_LAUNCH_PARAM_END};
    }
  }

  // The window first: from here on other threads' launches, copies and memsets wait (the fence), so the
  // synchronise that follows drains everything the snapshot must see, and nothing slips in after it.
  if (!open_window(*p)) {
    run_once_fenced(*p, p->row.reason);
    return;
  }
  if (driver_.ctx_synchronize() != CUDA_SUCCESS) {
    close_window(*p);
    run_once_fenced(*p, "the context could not be synchronised before the launch");
    return;
  }
  if (!take_snapshot(*p)) {
    const std::string why = p->row.reason;
    close_window(*p);
    run_once_fenced(*p, why);
    return;
  }
  p->replaying = true;
  run_own_passes(*p);
}

void replayer::run_once_fenced(pending_t& p, const std::string& reason) {
  p.row.reason = reason;
  // After any other thread's window on the device has closed (the fence); counted until the EXIT.
  if (p.device >= 0 && kreplay_copy_begin(&p.agent, 1, &p.fence_token) != KREPLAY_STATUS_SUCCESS) {
    p.fence_token = 0;
  }
}

bool replayer::open_window(pending_t& p) {
  kreplay_window_options_t options{};
  options.struct_size = sizeof(options);
  options.passes = config_.passes;
  for (int attempt = 0;; ++attempt) {
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    if (kreplay_window_open(p.agent, &options, &p.window, &reason) == KREPLAY_STATUS_SUCCESS) {
      return true;
    }
    p.window = nullptr;
    if (reason != KREPLAY_DECLINE_WINDOW_NESTED || attempt == 3) {
      p.row.reason = std::string("window declined: ") + kreplay_decline_reason_string(reason);
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

bool replayer::take_snapshot(pending_t& p) {
  const auto begun = clock_type::now();
  if (config_.backend == replay_backend::cupti) {
    std::string why;
    std::call_once(checkpoint_once_, [&] { checkpoint_loaded_ = load_checkpoint(&why); });
    if (!checkpoint_loaded_) {
      p.row.reason = "CUPTI's Checkpoint API is not available (libcheckpoint.so)";
      return false;
    }
    p.checkpoint.structSize = CUpti_Checkpoint_STRUCT_SIZE;
    // The launch's context, named: with NULL (the current one) and libcheckpoint loaded RTLD_LOCAL every save
    // inside the launch callback answered CUPTI_ERROR_NOT_INITIALIZED on the H200, while checkpoint_probe.cu,
    // naming its context, saved in every setting; with both changed (run 5) every save succeeded. Which of the
    // two mattered was not measured apart, so both stay.
    p.checkpoint.ctx = p.context;
    p.checkpoint.allowOverwrite = 1;
    own_call_scope own;
    const CUptiResult saved = checkpoint_.save(&p.checkpoint);
    p.row.snapshot_ms = ms_between(begun, clock_type::now());
    p.checkpoint_free = checkpoint_.free;  // also after a failed save: whatever it set up is freed
    if (saved != CUPTI_SUCCESS) {
      p.row.reason = "cuptiCheckpointSave failed (CUptiResult " + std::to_string(static_cast<int>(saved)) + ")";
      return false;
    }
    kreplay_inventory_stats_t stats{};
    if (kreplay_inventory_stats(p.agent, &stats) == KREPLAY_STATUS_SUCCESS) {
      p.row.footprint_bytes = stats.bytes;
    }
    return true;
  }
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  if (kreplay_snap(p.agent, &p.snapshot, &reason) != KREPLAY_STATUS_SUCCESS) {
    p.snapshot = nullptr;
    p.row.reason = std::string("snapshot declined: ") + kreplay_decline_reason_string(reason);
    if (reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE) {
      p.row.reason += " (" + tracker_.last_error() + ")";
    }
    return false;
  }
  return true;
}

bool replayer::restore(pending_t& p) {
  if (!config_.restore) {
    return true;
  }
  if (config_.backend == replay_backend::cupti) {
    const auto begun = clock_type::now();
    own_call_scope own;
    const bool restored = checkpoint_.restore(&p.checkpoint) == CUPTI_SUCCESS;
    p.row.restore_ms += ms_between(begun, clock_type::now());
    return restored;
  }
  kreplay_restore_report_t report{};
  return kreplay_restore(p.snapshot, &report) == KREPLAY_STATUS_SUCCESS;
}

void replayer::close_window(pending_t& p) {
  if (p.checkpoint_free != nullptr) {
    own_call_scope own;
    (void)p.checkpoint_free(&p.checkpoint);
    p.checkpoint_free = nullptr;
  }
  if (p.snapshot != nullptr) {
    kreplay_snapshot_free(p.snapshot);
    p.snapshot = nullptr;
  }
  if (p.window != nullptr) {
    kreplay_window_outcome_t outcome{};
    outcome.struct_size = sizeof(outcome);
    if (kreplay_window_close(p.window, &outcome) == KREPLAY_STATUS_SUCCESS &&
        config_.backend == replay_backend::kreplay) {
      p.row.footprint_bytes = outcome.footprint_bytes;
      p.row.bytes_moved = outcome.bytes_moved;
      p.row.snapshot_ms = static_cast<double>(outcome.snapshot_ns) / 1e6;
      p.row.restore_ms = static_cast<double>(outcome.restore_ns) / 1e6;
    }
    p.window = nullptr;
  }
}

bool replayer::digest_footprint(pending_t& p, std::vector<kreplay_digest_t>* out) {
  constexpr size_t block = 64 * 1024;
  if (ops_.digest == nullptr) {
    return false;
  }
  if (p.footprint.empty()) {
    struct list_t {
      std::vector<std::pair<const void*, size_t>> regions;
      bool failed = false;
    } list;
    kreplay_inventory_stats_t stats{};
    if (kreplay_inventory_stats(p.agent, &stats) == KREPLAY_STATUS_SUCCESS) {
      list.regions.reserve(stats.regions);
    }
    // Called from Rust through the C ABI: nothing may unwind out of it.
    auto visit = [](void* data, const void* base, size_t bytes, uint64_t) noexcept {
      auto* to = static_cast<list_t*>(data);
      try {
        to->regions.emplace_back(base, bytes);
      } catch (...) {
        to->failed = true;
      }
    };
    if (kreplay_inventory_foreach(p.agent, visit, &list) != KREPLAY_STATUS_SUCCESS || list.failed) {
      return false;
    }
    p.footprint = std::move(list.regions);
  }
  size_t total = 0;
  for (const auto& [base, bytes] : p.footprint) {
    total += (bytes + block - 1) / block;
  }
  out->assign(total, kreplay_digest_t{});
  std::vector<kreplay_digest_job_t> jobs;
  jobs.reserve(p.footprint.size());
  size_t at = 0;
  for (const auto& [base, bytes] : p.footprint) {
    jobs.push_back({base, bytes, out->data() + at});
    at += (bytes + block - 1) / block;
  }
  return jobs.empty() ||
         ops_.digest(ops_.user_data, p.agent, jobs.data(), jobs.size(), block) == KREPLAY_STATUS_SUCCESS;
}

void replayer::verify_pass(pending_t& p, uint32_t pass) {
  if (!config_.verify) {
    return;
  }
  if (pass == 1) {
    p.verifying = digest_footprint(p, &p.first_digests);
    p.row.verify = p.verifying ? "same" : "not possible (no digest)";
    return;
  }
  std::vector<kreplay_digest_t> again;
  if (!p.verifying || p.row.verify != "same" || !digest_footprint(p, &again)) {
    return;
  }
  size_t differ = 0;
  for (size_t i = 0; i < p.first_digests.size() && i < again.size(); ++i) {
    differ += std::memcmp(&p.first_digests[i], &again[i], sizeof(kreplay_digest_t)) != 0 ? 1 : 0;
  }
  if (differ != 0) {
    p.row.verify = "differs: pass " + std::to_string(pass) + ", " + std::to_string(differ) + " blocks of 64 KiB";
  }
}

CUresult replayer::relaunch(pending_t& p) {
  void** arguments = p.argument_pointers.empty() ? p.kernel_params : p.argument_pointers.data();
  void** extra_arguments = p.argument_pointers.empty() ? (p.extra_copy.empty() ? p.extra : p.extra_copy.data())
                                                       : nullptr;
  switch (p.kind) {
    case launch_kind::kernel:
      return driver_.launch_kernel(p.function, p.grid[0], p.grid[1], p.grid[2], p.block[0], p.block[1],
                                   p.block[2], p.shared_bytes, p.stream, arguments, extra_arguments);
    case launch_kind::kernel_ex:
      return driver_.launch_kernel_ex(&p.config, p.function, arguments, extra_arguments);
    case launch_kind::cooperative:
      return driver_.launch_cooperative(p.function, p.grid[0], p.grid[1], p.grid[2], p.block[0], p.block[1],
                                        p.block[2], p.shared_bytes, p.stream, arguments);
    case launch_kind::graph:
      break;
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

float replayer::elapsed_ms(const pending_t& p) {
  float ms = 0;
  if (p.end_event == nullptr || driver_.event_elapsed(&ms, p.start_event, p.end_event) != CUDA_SUCCESS) {
    return 0;
  }
  return ms;
}

// Passes 1 to N - 1, at the launch's entry: relaunch, wait, digest (--verify), back to the snapshot. The
// program's own launch is then pass N: if a relaunch fails, the memory is the snapshot again and the program's
// launch computes what it would have without kreplay.
void replayer::run_own_passes(pending_t& p) {
  own_call_scope own;  // the relaunches and their callbacks are kreplay's, not the program's
  if (driver_.event_create != nullptr && driver_.event_create(&p.start_event, CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
      driver_.event_create(&p.end_event, CU_EVENT_DEFAULT) == CUDA_SUCCESS) {
    p.event_destroy = driver_.event_destroy;
  } else {
    p.end_event = nullptr;
  }
  double restore_ms = 0;  // the restore that prepared the pass about to run
  for (uint32_t pass = 1; pass < config_.passes; ++pass) {
    const auto begun = clock_type::now();
    if (p.end_event != nullptr) {
      (void)driver_.event_record(p.start_event, p.stream);
    }
    const CUresult launched = relaunch(p);
    if (p.end_event != nullptr) {
      (void)driver_.event_record(p.end_event, p.stream);
    }
    const bool ran = launched == CUDA_SUCCESS && driver_.ctx_synchronize() == CUDA_SUCCESS;
    const auto done = clock_type::now();
    if (!ran) {
      p.row.reason = "relaunch failed: pass " + std::to_string(pass) + ", CUresult " +
                     std::to_string(static_cast<int>(launched)) +
                     "; the program's own launch runs from the snapshot";
      (void)driver_.ctx_synchronize();
      (void)restore(p);
      return;
    }
    ++p.own_passes_run;
    const float kernel_ms = elapsed_ms(p);
    if (pass == 1) {
      p.row.kernel_ms = kernel_ms;
    } else {
      p.extra_ms.push_back(restore_ms + ms_between(begun, done) - kernel_ms);
    }
    verify_pass(p, pass);
    const auto restoring = clock_type::now();
    if (!restore(p)) {
      p.row.reason = "restore failed: after pass " + std::to_string(pass) +
                     ", the program's own launch may see that pass's writes";
      return;
    }
    restore_ms = ms_between(restoring, clock_type::now());
  }
  p.restore_before_program_ms = restore_ms;
  if (p.end_event != nullptr) {
    (void)driver_.event_record(p.start_event, p.stream);
  }
  p.program_pass_begun = clock_type::now();
}

void replayer::exit(const CUpti_CallbackData& data) {
  std::unique_ptr<pending_t> p(t_pending);
  t_pending = nullptr;
  if (p == nullptr) {
    return;
  }
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  if (p->replaying) {
    const uint32_t pass = p->own_passes_run + 1;  // the program's own launch
    if (!succeeded(data)) {
      if (p->row.reason.empty()) {
        p->row.reason = "the program's launch failed: CUresult " +
                        std::to_string(static_cast<int>(*static_cast<const CUresult*>(data.functionReturnValue)));
      }
    } else {
      own_call_scope own;
      if (p->end_event != nullptr) {
        (void)driver_.event_record(p->end_event, p->stream);
      }
      if (driver_.ctx_synchronize() != CUDA_SUCCESS && p->row.reason.empty()) {
        p->row.reason = "the program's launch failed on the device";
      }
      const float kernel_ms = elapsed_ms(*p);
      if (pass == 1) {
        p->row.kernel_ms = kernel_ms;
      } else if (p->row.reason.empty()) {
        p->extra_ms.push_back(p->restore_before_program_ms +
                              ms_between(p->program_pass_begun, clock_type::now()) - kernel_ms);
      }
      if (p->row.reason.empty()) {
        verify_pass(*p, pass);
      }
      p->row.passes_run = pass;
    }
    close_window(*p);
    if (!p->extra_ms.empty()) {
      std::sort(p->extra_ms.begin(), p->extra_ms.end());
      p->row.extra_pass_ms = p->extra_ms[p->extra_ms.size() / 2];
    }
  }
  p->row.replayed = p->row.reason.empty() && p->row.passes_run == p->row.passes_asked;
  if (p->row.reason.empty() && !p->row.replayed) {
    p->row.reason = "fewer passes than asked";
  }
  report(p->row, p->replaying ? ms_between(p->entered, clock_type::now()) : 0.0);
}

void replayer::report(launch_row_t& row, double replay_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (row.replayed) {
    ++replayed_;
  } else {
    ++declined_[row.reason.substr(0, row.reason.find(':'))];
  }
  if (row.verify.rfind("differs", 0) == 0) {
    ++differed_;
    log(KREPLAY_LOG_WARNING, "launch %" PRIu64 " (%s): %s", row.index, row.kernel.c_str(), row.verify.c_str());
  }
  replay_ms_ += replay_ms;
  if (csv_ != nullptr && !finished_) {
    std::fputs(csv_row(row).c_str(), csv_);
    std::fflush(csv_);
  }
  progress_locked(clock_type::now());
}

void replayer::progress_locked(clock_type::time_point now) {
  if (config_.progress_seconds <= 0 || ms_between(last_progress_, now) < config_.progress_seconds * 1e3) {
    return;
  }
  last_progress_ = now;
  uint64_t declined = 0;
  for (const auto& [why, count] : declined_) {
    declined += count;
  }
  std::fprintf(stderr, "kreplay-cuda-replay: %.1f s: %" PRIu64 " launches, %" PRIu64 " replayed, %" PRIu64
               " run once, %.1f s replaying\n",
               ms_between(started_, now) / 1e3, replayed_ + declined, replayed_, declined, replay_ms_ / 1e3);
}

void replayer::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) {
    return;
  }
  finished_ = true;
  const double total_ms = ms_between(started_, clock_type::now());
  uint64_t declined = 0;
  for (const auto& [why, count] : declined_) {
    declined += count;
  }
  std::fprintf(stderr,
               "kreplay-cuda-replay: %" PRIu64 " launches: %" PRIu64 " replayed (%u passes, backend %s), %" PRIu64
               " run once; %.3f s replaying, %.3f s the program's own (of %.3f s)",
               replayed_ + declined, replayed_, config_.passes,
               config_.backend == replay_backend::cupti ? "cupti" : "kreplay", declined, replay_ms_ / 1e3,
               (total_ms - replay_ms_) / 1e3, total_ms / 1e3);
  if (config_.verify) {
    std::fprintf(stderr, "; verify: %" PRIu64 " launches whose passes differed", differed_);
  }
  if (const int64_t open = in_flight_.load(std::memory_order_relaxed); open > 0) {
    // The program ended while other threads were inside launches: those have no row.
    std::fprintf(stderr, "; %" PRId64 " launches still in progress at exit (no row)", open);
  }
  std::fputs("\n", stderr);
  for (const auto& [why, count] : declined_) {
    std::fprintf(stderr, "kreplay-cuda-replay:   run once: %" PRIu64 " x %s\n", count, why.c_str());
  }
  if (csv_ != nullptr) {
    std::fclose(csv_);
    csv_ = nullptr;
  }
}

}  // namespace kreplay::cuda::inject
