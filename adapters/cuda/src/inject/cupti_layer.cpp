#include "cupti_layer.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>


#include "guard.hpp"
#include "log.hpp"
#include "replay.hpp"

namespace kreplay::cuda::inject {
namespace {

// ---- Where the loading thread is ----------------------------------------------------------------------------
// The driver calls in progress on this thread that can load modules, innermost last. A MODULE_LOADED callback
// takes its origin from the innermost one; a load call binds the modules loaded inside it to the handle it
// returns. Plain data, so a thread's first access allocates nothing but the module's TLS block.
constexpr int max_depth = 8;
constexpr int max_pending = 16;
struct frame_t {
  origin_t origin;
  int pending;                     // modules loaded inside this call, waiting for its returned handle
  uint32_t pending_ids[max_pending];
};
thread_local frame_t t_frames[max_depth];
thread_local int t_depth = 0;

bool succeeded(const CUpti_CallbackData& data) {
  return data.functionReturnValue != nullptr &&
         *static_cast<const CUresult*>(data.functionReturnValue) == CUDA_SUCCESS;
}

bool out_of_memory(const CUpti_CallbackData& data) {
  return data.functionReturnValue != nullptr &&
         *static_cast<const CUresult*>(data.functionReturnValue) == CUDA_ERROR_OUT_OF_MEMORY;
}

bool is_device_allocation(CUpti_CallbackId cbid) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate:
      return true;
    default:
      return false;
  }
}

template <typename P>
const P& params(const CUpti_CallbackData& data) {
  return *static_cast<const P*>(data.functionParams);
}

uint64_t address_of(const CUdeviceptr* out) { return out == nullptr ? 0 : static_cast<uint64_t>(*out); }
uint64_t address_of(void* const* out) { return out == nullptr ? 0 : reinterpret_cast<uint64_t>(*out); }

// The callback ids the layer enables, per domain. Nothing else is enabled, and none of these is made per kernel:
// no launch (cuLaunchKernel*, cooperative launches), no cuLibraryGetKernel / cuKernelGetFunction. The cost of
// tracking is one callback on each allocation, free, vmem, context and module-loading call. A module loaded
// inside a call not listed here (a lazy load inside a launch, an eager one inside cuDevicePrimaryCtxRetain) is
// found at snapshot time by its kernels (tracker::library_by_kernels). The launcher (issue 22) enables launch
// callbacks of its own, only when a replay is asked for.
constexpr CUpti_CallbackId driver_ids[] = {
    // Allocations and frees.
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz, CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister,
    // Virtual memory.
    CUPTI_DRIVER_TRACE_CBID_cuMemCreate, CUPTI_DRIVER_TRACE_CBID_cuMemRelease, CUPTI_DRIVER_TRACE_CBID_cuMemMap,
    CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
    // Contexts.
    CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRetain, CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2,
    CUPTI_DRIVER_TRACE_CBID_cuCtxCreate_v2, CUPTI_DRIVER_TRACE_CBID_cuCtxCreate_v3,
    CUPTI_DRIVER_TRACE_CBID_cuCtxCreate_v4, CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2,
    // Module and library loads and unloads, and the library calls inside which a lazy module may be loaded:
    // their handles say which module it is.
    CUPTI_DRIVER_TRACE_CBID_cuModuleLoad, CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData,
    CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx, CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary,
    CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile,
    CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload, CUPTI_DRIVER_TRACE_CBID_cuLibraryGetModule,
    CUPTI_DRIVER_TRACE_CBID_cuLibraryGetGlobal, CUPTI_DRIVER_TRACE_CBID_cuLibraryGetManaged,
};
// (CONTEXT_CREATED is not needed: a context's device comes from its creation call's parameters, or from one
// cuCtxGetDevice_v2 when it is first seen.)
constexpr CUpti_CallbackId resource_ids[] = {
    CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
    CUPTI_CBID_RESOURCE_MODULE_LOADED,
    CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING,
};

// The origin a module-loading call gives at its entry (load calls learn their handle only at exit).
bool origin_at_entry(CUpti_CallbackId cbid, const CUpti_CallbackData& data, origin_t* out) {
  out->call = data.functionName != nullptr ? data.functionName : "?";
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoad:
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData:
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx:
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary:
      out->kind = origin_kind::module;
      out->handle = nullptr;
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData:
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile:
      out->kind = origin_kind::library;
      out->handle = nullptr;
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryGetModule:
      *out = {origin_kind::library, params<cuLibraryGetModule_params>(data).library, out->call};
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryGetGlobal:
      *out = {origin_kind::library, params<cuLibraryGetGlobal_params>(data).library, out->call};
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryGetManaged:
      *out = {origin_kind::library, params<cuLibraryGetManaged_params>(data).library, out->call};
      return true;
    default:
      return false;
  }
}

// The handle a load call returned (its exit), for the modules loaded inside it.
void* handle_at_exit(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoad: return *params<cuModuleLoad_params>(data).module;
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData: return *params<cuModuleLoadData_params>(data).module;
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx: return *params<cuModuleLoadDataEx_params>(data).module;
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary: return *params<cuModuleLoadFatBinary_params>(data).module;
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData: return *params<cuLibraryLoadData_params>(data).library;
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile: return *params<cuLibraryLoadFromFile_params>(data).library;
    default: return nullptr;
  }
}

template <typename F>
bool find(void* library, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(library, name));
  return out != nullptr;
}

// The functions only a replay uses: their absence is reported by what needs them.
bool optional(void* library, cupti_api_t& out) {
  find(library, "cuptiGetCallbackName", out.get_callback_name);
  find(library, "cuptiEnableDomain", out.enable_domain);
  return true;
}

bool from(void* library, cupti_api_t& out) {
  return library != nullptr && find(library, "cuptiSubscribe", out.subscribe) &&
         find(library, "cuptiUnsubscribe", out.unsubscribe) &&
         find(library, "cuptiEnableCallback", out.enable_callback) &&
         find(library, "cuptiGetResultString", out.get_result_string) && optional(library, out);
}

}  // namespace

bool resolve_cupti(cupti_api_t& out, std::string* where) {
  if (from(dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD), out)) {
    *where = "the libcupti.so.13 already loaded in the process";
    return true;
  }
  if (const char* path = std::getenv("KREPLAY_CUPTI_PATH"); path != nullptr && *path != '\0') {
    if (from(dlopen(path, RTLD_NOW | RTLD_LOCAL), out)) {
      *where = std::string("KREPLAY_CUPTI_PATH=") + path;
      return true;
    }
    *where = std::string("KREPLAY_CUPTI_PATH=") + path + " does not load as CUPTI (" +
             (dlerror() != nullptr ? "dlopen failed" : "functions missing") + ")";
    return false;
  }
  if (from(dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL), out)) {
    *where = "libcupti.so.13 found by the loader's search";
    return true;
  }
  *where = "no libcupti.so.13 in the process or on the loader's path (set KREPLAY_CUPTI_PATH)";
  return false;
}

cupti_layer::cupti_layer(tracker& tracker, const cupti_api_t& api) : tracker_(tracker), api_(api) {}

bool cupti_layer::start() {
  if (api_.subscribe == nullptr || api_.enable_callback == nullptr) {
    std::fprintf(stderr, "kreplay-inject: CUPTI is incomplete; the injection stays inert (nothing is tracked)\n");
    return false;
  }
  CUptiResult result = api_.subscribe(&subscriber_, &cupti_layer::callback, this);
  if (result != CUPTI_SUCCESS) {
    const char* text = nullptr;
    if (api_.get_result_string == nullptr || api_.get_result_string(result, &text) != CUPTI_SUCCESS) {
      text = nullptr;
    }
    if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      std::fprintf(stderr,
                   "kreplay-inject: CUPTI already has a subscriber (another tool: Nsight Compute, Nsight Systems, "
                   "a profiler) and allows only one (cuptiSubscribe: %s, %d); kreplay's injection stays inert: "
                   "no allocation or module variable is tracked and snapshots are declined\n",
                   text != nullptr ? text : "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED", static_cast<int>(result));
    } else {
      std::fprintf(stderr,
                   "kreplay-inject: cuptiSubscribe failed (%s, %d); kreplay's injection stays inert: no allocation "
                   "or module variable is tracked and snapshots are declined\n",
                   text != nullptr ? text : "?", static_cast<int>(result));
    }
    subscriber_ = nullptr;
    return false;
  }
  size_t enabled = 0;
  bool all = true;
  auto enable = [&](CUpti_CallbackDomain domain, CUpti_CallbackId id) {
    const CUptiResult answer = api_.enable_callback(1, subscriber_, domain, id);
    if (answer == CUPTI_SUCCESS) {
      enabled_ids_.emplace_back(domain, id);
    }
    if (answer != CUPTI_SUCCESS) {
      log(KREPLAY_LOG_WARNING, "cuptiEnableCallback(domain %d, id %u) answered %d", static_cast<int>(domain),
          static_cast<unsigned>(id), static_cast<int>(answer));
    }
    enabled += answer == CUPTI_SUCCESS ? 1 : 0;
    all = all && answer == CUPTI_SUCCESS;
  };
  for (CUpti_CallbackId id : driver_ids) {
    enable(CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  for (CUpti_CallbackId id : resource_ids) {
    enable(CUPTI_CB_DOMAIN_RESOURCE, id);
  }
  const size_t wanted = std::size(driver_ids) + std::size(resource_ids);
  if (replay_ != nullptr && all) {
    enable_replay();
  }
  enabled_ = enabled;
  if (!all) {
    // A callback left off would be an allocation or a module missed: better nothing than a wrong inventory.
    std::fprintf(stderr, "kreplay-inject: CUPTI refused %zu of %zu callbacks; the injection stays inert\n",
                 wanted - enabled, wanted);
    if (api_.unsubscribe != nullptr) {
      (void)api_.unsubscribe(subscriber_);
    }
    subscriber_ = nullptr;
    enabled_ = 0;
    return false;
  }
  active_.store(true, std::memory_order_release);
  log(KREPLAY_LOG_INFO, "subscribed to CUPTI: %zu callbacks enabled", enabled);
  return true;
}

// A replay: the launches, the stream captures (no replay while one is in progress) and every memcpy and memset
// (they wait while a window of another thread is open), found by name. If CUPTI refuses any of them (an older
// CUPTI the program brought), nothing is replayed but tracking goes on: one line says so.
void cupti_layer::enable_replay() {
  std::vector<CUpti_CallbackId> ids(replay_launch_ids, replay_launch_ids + replay_launch_id_count);
  ids.insert(ids.end(), replay_capture_ids, replay_capture_ids + replay_capture_id_count);
  copy_ids_.assign(CUPTI_DRIVER_TRACE_CBID_SIZE, false);
  for (uint32_t id = 1; api_.get_callback_name != nullptr && id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id) {
    const char* name = nullptr;
    if (api_.get_callback_name(CUPTI_CB_DOMAIN_DRIVER_API, id, &name) == CUPTI_SUCCESS && name != nullptr &&
        (std::strncmp(name, "cuMemcpy", 8) == 0 || std::strncmp(name, "cuMemset", 8) == 0)) {
      copy_ids_[id] = true;
      ids.push_back(id);
    }
  }
  std::vector<CUpti_CallbackId> enabled;
  for (CUpti_CallbackId id : ids) {
    if (api_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_DRIVER_API, id) == CUPTI_SUCCESS) {
      enabled.push_back(id);
    }
  }
  if (enabled.size() != ids.size() || api_.get_callback_name == nullptr) {
    for (CUpti_CallbackId id : enabled) {
      (void)api_.enable_callback(0, subscriber_, CUPTI_CB_DOMAIN_DRIVER_API, id);
    }
    std::fprintf(stderr,
                 "kreplay-cuda-replay: CUPTI refused %zu of the replay's %zu callbacks%s; nothing is replayed "
                 "(allocations and modules are still tracked)\n",
                 ids.size() - enabled.size(), ids.size(),
                 api_.get_callback_name == nullptr ? " and has no cuptiGetCallbackName" : "");
    replay_ = nullptr;
    copy_ids_.clear();
    return;
  }
  for (CUpti_CallbackId id : enabled) {
    enabled_ids_.emplace_back(CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  if (replay_->wants_whole_domains() && api_.enable_domain != nullptr) {
    // --backend cupti ran on the H200 (run 5, docs/performance.md) with the runtime and resource domains
    // enabled whole, as in the reference measurement of CUPTI's Checkpoint API; the callbacks they add are
    // ignored here, and their cost is the backend's.
    (void)api_.enable_domain(1, subscriber_, CUPTI_CB_DOMAIN_RUNTIME_API);
    (void)api_.enable_domain(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE);
  }
}

bool cupti_layer::set_subscribed(bool subscribed) {
  std::lock_guard<std::mutex> lock(pause_mutex_);
  if (!active() || subscribed == !paused_) {
    return active();
  }
  if (!subscribed) {
    // Whatever the program allocates or loads from now on is missed: every later snapshot declines.
    tracker_.event_lost();
    if (api_.unsubscribe == nullptr || api_.unsubscribe(subscriber_) != CUPTI_SUCCESS) {
      return false;
    }
    paused_ = true;
    return true;
  }
  if (api_.subscribe(&subscriber_, &cupti_layer::callback, this) != CUPTI_SUCCESS) {
    return false;
  }
  for (const auto& [domain, id] : enabled_ids_) {
    (void)api_.enable_callback(1, subscriber_, domain, id);
  }
  paused_ = false;
  return true;
}

void CUPTIAPI cupti_layer::callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                    const void* data) {
  // kreplay's own driver calls (its copies, device storage, module queries) are never the program's.
  if (inside_own_call() || userdata == nullptr || data == nullptr) {
    return;
  }
  auto* layer = static_cast<cupti_layer*>(userdata);
  layer->raised_.fetch_add(1, std::memory_order_relaxed);
  // No exception may unwind through CUPTI's C frames into the program: that would end the process. The tables
  // allocate, so an out-of-memory is possible here; the event is then lost and every snapshot declines.
  try {
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
      layer->on_driver(cbid, *static_cast<const CUpti_CallbackData*>(data));
    } else if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
      layer->on_resource(cbid, *static_cast<const CUpti_ResourceData*>(data));
    }
  } catch (...) {
    layer->tracker_.event_lost();
  }
}

void cupti_layer::on_replay(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (is_capture_callback(cbid)) {
    replay_->on_capture(cbid, data);
    return;
  }
  if (cbid < copy_ids_.size() && copy_ids_[cbid]) {
    replay_->on_copy(data);
    return;
  }
  // A launch: a module the replayer loads at its entry (the launched function's, lazily loaded) is bound to
  // the launched function through a frame of its own, so its variables are located exactly.
  const bool graph =
      cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch || cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz;
  if (data.callbackSite == CUPTI_API_ENTER) {
    if (!graph) {
      // cuLaunchKernel, _ptsz and the cooperative forms have the function first; cuLaunchKernelEx second.
      const bool ex = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx ||
                      cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz;
      CUfunction function = ex ? params<cuLaunchKernelEx_params>(data).f : params<cuLaunchKernel_params>(data).f;
      if (t_depth < max_depth) {
        t_frames[t_depth].origin = {origin_kind::function, function,
                                    data.functionName != nullptr ? data.functionName : "launch"};
        t_frames[t_depth].pending = 0;
      }
      ++t_depth;
    }
    replay_->on_launch(cbid, data);
    return;
  }
  replay_->on_launch(cbid, data);
  if (!graph && t_depth > 0) {
    --t_depth;
  }
}

void cupti_layer::on_driver(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  const bool enter = data.callbackSite == CUPTI_API_ENTER;
  tracker& t = tracker_;
  if (replay_ != nullptr && (is_launch_callback(cbid) || is_capture_callback(cbid) ||
                             (cbid < copy_ids_.size() && copy_ids_[cbid]))) {
    on_replay(cbid, data);
    return;
  }

  // Module-loading calls: a frame per call on this thread.
  origin_t origin;
  if (origin_at_entry(cbid, data, &origin)) {
    if (enter) {
      if (t_depth < max_depth) {
        t_frames[t_depth].origin = origin;
        t_frames[t_depth].pending = 0;
      }
      ++t_depth;
      return;
    }
    if (t_depth > 0) {
      --t_depth;
    }
    if (origin.kind == origin_kind::library && origin.handle == nullptr && succeeded(data)) {
      t.library_loaded(static_cast<CUlibrary>(handle_at_exit(cbid, data)));
    }
    if (t_depth < max_depth) {
      frame_t& frame = t_frames[t_depth];
      if (frame.pending > 0) {
        origin_t bound = frame.origin;
        bound.handle = succeeded(data) ? handle_at_exit(cbid, data) : nullptr;
        if (bound.handle == nullptr) {
          bound.kind = origin_kind::none;
        }
        for (int i = 0; i < frame.pending && i < max_pending; ++i) {
          t.module_bound(frame.pending_ids[i], bound);
        }
      }
    }
    return;
  }

  if (enter) {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
        t.freeing(params<cuMemFree_v2_params>(data).dptr);
        return;
      case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
        t.freeing(params<cuMemFreeAsync_params>(data).dptr);
        return;
      case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
        t.freeing(params<cuMemFreeAsync_ptsz_params>(data).dptr);
        return;
      case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
        t.freeing(reinterpret_cast<uint64_t>(params<cuMemFreeHost_params>(data).p));
        return;
      case CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister:
        t.freeing(reinterpret_cast<uint64_t>(params<cuMemHostUnregister_params>(data).p));
        return;
      case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: {
        const auto& p = params<cuMemUnmap_params>(data);
        t.vmem_unmapping(p.ptr, p.size);
        return;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload:
        t.library_unloading(params<cuLibraryUnload_params>(data).library);
        return;
      case CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2:
        t.context_destroyed(params<cuCtxDestroy_v2_params>(data).ctx);
        return;
      case CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2:
        t.primary_context_reset(params<cuDevicePrimaryCtxReset_v2_params>(data).dev);
        return;
      default:
        return;
    }
  }

  if (!succeeded(data)) {
    if (out_of_memory(data) && is_device_allocation(cbid)) {
      // The program's device allocation failed: kreplay's idle device storage goes back now, so that the
      // program's own retry (PyTorch's caching allocator frees its cache and tries again) finds it.
      own_call_scope own;
      kreplay_device_trim_all();
      return;
    }
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
        t.free_failed(params<cuMemFree_v2_params>(data).dptr);
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
        t.free_failed(params<cuMemFreeAsync_params>(data).dptr);
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
        t.free_failed(params<cuMemFreeAsync_ptsz_params>(data).dptr);
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
        t.free_failed(reinterpret_cast<uint64_t>(params<cuMemFreeHost_params>(data).p));
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister:
        t.free_failed(reinterpret_cast<uint64_t>(params<cuMemHostUnregister_params>(data).p));
        break;
      default:
        break;
    }
    return;
  }
  CUcontext context = data.context;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
      const auto& p = params<cuMemAlloc_v2_params>(data);
      t.allocated(context, address_of(p.dptr), p.bytesize, memory_kind::device);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      const auto& p = params<cuMemAllocPitch_v2_params>(data);
      t.allocated(context, address_of(p.dptr), (p.pPitch != nullptr ? *p.pPitch : 0) * p.Height, memory_kind::device);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync: {
      const auto& p = params<cuMemAllocAsync_params>(data);
      t.allocated(context, address_of(p.dptr), p.bytesize, memory_kind::pool);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
      const auto& p = params<cuMemAllocAsync_ptsz_params>(data);
      t.allocated(context, address_of(p.dptr), p.bytesize, memory_kind::pool);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync: {
      const auto& p = params<cuMemAllocFromPoolAsync_params>(data);
      t.allocated(context, address_of(p.dptr), p.bytesize, memory_kind::pool);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
      const auto& p = params<cuMemAllocFromPoolAsync_ptsz_params>(data);
      t.allocated(context, address_of(p.dptr), p.bytesize, memory_kind::pool);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
      const auto& p = params<cuMemAllocManaged_params>(data);
      t.allocated(context, address_of(p.dptr), p.bytesize, memory_kind::managed);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
      const auto& p = params<cuMemAllocHost_v2_params>(data);
      t.allocated(context, address_of(p.pp), p.bytesize, memory_kind::host_pinned);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
      const auto& p = params<cuMemHostAlloc_params>(data);
      t.allocated(context, address_of(p.pp), p.bytesize,
                  (p.Flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0 ? memory_kind::host_mapped : memory_kind::host_pinned);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2: {
      const auto& p = params<cuMemHostRegister_v2_params>(data);
      t.allocated(context, reinterpret_cast<uint64_t>(p.p), p.bytesize,
                  (p.Flags & CU_MEMHOSTREGISTER_DEVICEMAP) != 0 ? memory_kind::host_mapped
                                                                 : memory_kind::host_pinned);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate: {
      const auto& p = params<cuMemCreate_params>(data);
      if (p.handle != nullptr && p.prop != nullptr) {
        t.vmem_created(*p.handle, p.size, p.prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE, p.prop->location.id);
      }
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease:
      t.vmem_released(params<cuMemRelease_params>(data).handle);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap: {
      const auto& p = params<cuMemMap_params>(data);
      t.vmem_mapped(p.ptr, p.size, p.handle);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess: {
      const auto& p = params<cuMemSetAccess_params>(data);
      access_t access[8];
      const size_t count = p.desc == nullptr ? 0 : std::min<size_t>(p.count, std::size(access));
      for (size_t i = 0; i < count; ++i) {
        access[i] = {p.desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE, p.desc[i].location.id,
                     p.desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
      }
      t.vmem_access(p.ptr, p.size, access, count);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRetain: {
      const auto& p = params<cuDevicePrimaryCtxRetain_params>(data);
      if (p.pctx != nullptr) {
        t.context_device(*p.pctx, p.dev, true);
      }
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuCtxCreate_v2: {
      const auto& p = params<cuCtxCreate_v2_params>(data);
      if (p.pctx != nullptr) {
        t.context_device(*p.pctx, p.dev, false);
      }
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuCtxCreate_v3: {
      const auto& p = params<cuCtxCreate_v3_params>(data);
      if (p.pctx != nullptr) {
        t.context_device(*p.pctx, p.dev, false);
      }
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuCtxCreate_v4: {
      const auto& p = params<cuCtxCreate_v4_params>(data);
      if (p.pctx != nullptr) {
        t.context_device(*p.pctx, p.dev, false);
      }
      break;
    }
    default:
      break;
  }
}

void cupti_layer::on_resource(CUpti_CallbackId cbid, const CUpti_ResourceData& data) {
  switch (cbid) {
    case CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING:
      tracker_.context_destroyed(data.context);
      return;
    case CUPTI_CBID_RESOURCE_MODULE_LOADED: {
      const auto* module = static_cast<const CUpti_ModuleResourceData*>(data.resourceDescriptor);
      if (module == nullptr) {
        return;
      }
      origin_t origin;
      frame_t* frame = nullptr;
      if (t_depth > 0 && t_depth <= max_depth) {
        frame = &t_frames[t_depth - 1];
        origin = frame->origin;
      }
      tracker_.module_loaded(data.context, module->moduleId, module->pCubin, module->cubinSize, origin);
      // A load call learns its handle at exit: the module waits in its frame until then.
      if (frame != nullptr && frame->origin.handle == nullptr) {
        if (frame->pending < max_pending) {
          frame->pending_ids[frame->pending++] = module->moduleId;
        } else {
          log(KREPLAY_LOG_WARNING, "more than %d modules loaded inside one %s: module %u keeps no handle",
              max_pending, frame->origin.call, module->moduleId);
        }
      }
      return;
    }
    case CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING: {
      const auto* module = static_cast<const CUpti_ModuleResourceData*>(data.resourceDescriptor);
      if (module != nullptr) {
        tracker_.module_unloading(module->moduleId);
      }
      return;
    }
    default:
      return;
  }
}

}  // namespace kreplay::cuda::inject
