#include "tracker_callbacks.hpp"

#include <algorithm>
#include <iterator>

#include "callback_data.hpp"
#include "guard.hpp"
#include "log.hpp"

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

void push_frame(const origin_t& origin) {
  if (t_depth < max_depth) {
    t_frames[t_depth].origin = origin;
    t_frames[t_depth].pending = 0;
  }
  ++t_depth;
}

void pop_frame() {
  if (t_depth > 0) {
    --t_depth;
  }
}

bool out_of_memory(const CUpti_CallbackData& data) {
  return result_of(data) == CUDA_ERROR_OUT_OF_MEMORY;
}

uint64_t address_of(const CUdeviceptr* out) { return out == nullptr ? 0 : static_cast<uint64_t>(*out); }
uint64_t address_of(void* const* out) { return out == nullptr ? 0 : reinterpret_cast<uint64_t>(*out); }
uint64_t address_of(const void* pointer) { return reinterpret_cast<uint64_t>(pointer); }

// The program's device allocation failed: kreplay's idle device storage goes back now, so that the program's
// own retry (PyTorch's caching allocator frees its cache and tries again) finds it.
void give_device_storage_back_after(const CUpti_CallbackData& data) {
  if (out_of_memory(data)) {
    own_call_scope own;
    kreplay_device_trim_all();
  }
}

// ---- Allocations and frees ------------------------------------------------------------------------------------
struct allocation_t {
  uint64_t address = 0;
  size_t bytes = 0;
  memory_kind kind = memory_kind::device;
};

allocation_t allocation_of(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
      const auto& p = params<cuMemAlloc_v2_params>(data);
      return {address_of(p.dptr), p.bytesize, memory_kind::device};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      const auto& p = params<cuMemAllocPitch_v2_params>(data);
      return {address_of(p.dptr), (p.pPitch != nullptr ? *p.pPitch : 0) * p.Height, memory_kind::device};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {  // the two parameter structs are laid out alike
      const auto& p = params<cuMemAllocAsync_params>(data);
      return {address_of(p.dptr), p.bytesize, memory_kind::pool};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
      const auto& p = params<cuMemAllocFromPoolAsync_params>(data);
      return {address_of(p.dptr), p.bytesize, memory_kind::pool};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
      const auto& p = params<cuMemAllocManaged_params>(data);
      return {address_of(p.dptr), p.bytesize, memory_kind::managed};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
      const auto& p = params<cuMemAllocHost_v2_params>(data);
      return {address_of(p.pp), p.bytesize, memory_kind::host_pinned};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
      const auto& p = params<cuMemHostAlloc_params>(data);
      const bool mapped = (p.Flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0;
      return {address_of(p.pp), p.bytesize, mapped ? memory_kind::host_mapped : memory_kind::host_pinned};
    }
    default: {  // cuMemHostRegister_v2
      const auto& p = params<cuMemHostRegister_v2_params>(data);
      const bool mapped = (p.Flags & CU_MEMHOSTREGISTER_DEVICEMAP) != 0;
      return {address_of(p.p), p.bytesize, mapped ? memory_kind::host_mapped : memory_kind::host_pinned};
    }
  }
}

bool is_device_allocation(CUpti_CallbackId cbid) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz:
      return true;
    default:
      return false;
  }
}

void on_allocation(tracker& t, CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (data.callbackSite == CUPTI_API_ENTER) {
    return;
  }
  if (!succeeded(data)) {
    if (is_device_allocation(cbid)) {
      give_device_storage_back_after(data);
    }
    return;
  }
  const allocation_t a = allocation_of(cbid, data);
  t.allocated(data.context, a.address, a.bytes, a.kind);
}

uint64_t freed_address(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2: return params<cuMemFree_v2_params>(data).dptr;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync: return params<cuMemFreeAsync_params>(data).dptr;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz: return params<cuMemFreeAsync_ptsz_params>(data).dptr;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost: return address_of(params<cuMemFreeHost_params>(data).p);
    default: return address_of(params<cuMemHostUnregister_params>(data).p);  // cuMemHostUnregister
  }
}

// Forgotten at the entry (the address may be reused as soon as the call returns), remembered again if it failed.
void on_free(tracker& t, CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (data.callbackSite == CUPTI_API_ENTER) {
    t.freeing(freed_address(cbid, data));
  } else if (!succeeded(data)) {
    t.free_failed(freed_address(cbid, data));
  }
}

// ---- Virtual memory -------------------------------------------------------------------------------------------
void on_vmem_access(tracker& t, const cuMemSetAccess_params& p) {
  access_t access[8];
  const size_t count = p.desc == nullptr ? 0 : std::min<size_t>(p.count, std::size(access));
  for (size_t i = 0; i < count; ++i) {
    access[i] = {p.desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE, p.desc[i].location.id,
                 p.desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  }
  t.vmem_access(p.ptr, p.size, access, count);
}

void on_vmem(tracker& t, CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (data.callbackSite == CUPTI_API_ENTER) {
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemUnmap) {
      t.vmem_unmapping(params<cuMemUnmap_params>(data).ptr, params<cuMemUnmap_params>(data).size);
    }
    return;
  }
  if (!succeeded(data)) {
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuMemCreate) {  // a device allocation too
      give_device_storage_back_after(data);
    }
    return;
  }
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate: {
      const auto& p = params<cuMemCreate_params>(data);
      if (p.handle != nullptr && p.prop != nullptr) {
        t.vmem_created(*p.handle, p.size, p.prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE, p.prop->location.id);
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease:
      t.vmem_released(params<cuMemRelease_params>(data).handle);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap:
      t.vmem_mapped(params<cuMemMap_params>(data).ptr, params<cuMemMap_params>(data).size,
                    params<cuMemMap_params>(data).handle);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess:
      on_vmem_access(t, params<cuMemSetAccess_params>(data));
      return;
    default:
      return;
  }
}

// ---- Contexts -------------------------------------------------------------------------------------------------
// A created context's device, from its creation call (the three cuCtxCreate structs begin alike: pctx, ..., dev
// at different places, so each is read as itself).
void on_context_created(tracker& t, CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (data.callbackSite == CUPTI_API_ENTER || !succeeded(data)) {
    return;
  }
  auto known = [&](CUcontext* context, CUdevice device, bool primary) {
    if (context != nullptr) {
      t.context_device(*context, device, primary);
    }
  };
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRetain:
      known(params<cuDevicePrimaryCtxRetain_params>(data).pctx, params<cuDevicePrimaryCtxRetain_params>(data).dev,
            true);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuCtxCreate_v2:
      known(params<cuCtxCreate_v2_params>(data).pctx, params<cuCtxCreate_v2_params>(data).dev, false);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuCtxCreate_v3:
      known(params<cuCtxCreate_v3_params>(data).pctx, params<cuCtxCreate_v3_params>(data).dev, false);
      return;
    default:  // cuCtxCreate_v4
      known(params<cuCtxCreate_v4_params>(data).pctx, params<cuCtxCreate_v4_params>(data).dev, false);
      return;
  }
}

void on_context_gone(tracker& t, CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (data.callbackSite != CUPTI_API_ENTER) {
    return;
  }
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2) {
    t.context_destroyed(params<cuCtxDestroy_v2_params>(data).ctx);
  } else {
    t.primary_context_reset(params<cuDevicePrimaryCtxReset_v2_params>(data).dev);
  }
}

void on_library_unload(tracker& t, CUpti_CallbackId, const CUpti_CallbackData& data) {
  if (data.callbackSite == CUPTI_API_ENTER) {
    t.library_unloading(params<cuLibraryUnload_params>(data).library);
  }
}

// ---- Module-loading calls: a frame per call on this thread ------------------------------------------------------
// The origin a module-loading call gives at its entry (load calls learn their handle only at exit).
origin_t origin_at_entry(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  const char* call = data.functionName != nullptr ? data.functionName : "?";
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryGetModule:
      return {origin_kind::library, params<cuLibraryGetModule_params>(data).library, call};
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryGetGlobal:
      return {origin_kind::library, params<cuLibraryGetGlobal_params>(data).library, call};
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryGetManaged:
      return {origin_kind::library, params<cuLibraryGetManaged_params>(data).library, call};
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData:
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile:
      return {origin_kind::library, nullptr, call};
    default:  // the cuModuleLoad calls
      return {origin_kind::module, nullptr, call};
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

// At the exit: a library loaded is the tracker's, and the modules loaded inside the call are bound to the handle
// it returned (none when it failed).
void on_module_call(tracker& t, CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  const origin_t origin = origin_at_entry(cbid, data);
  if (data.callbackSite == CUPTI_API_ENTER) {
    push_frame(origin);
    return;
  }
  pop_frame();
  if (origin.kind == origin_kind::library && origin.handle == nullptr && succeeded(data)) {
    t.library_loaded(static_cast<CUlibrary>(handle_at_exit(cbid, data)));
  }
  if (t_depth >= max_depth || t_frames[t_depth].pending == 0) {
    return;
  }
  const frame_t& frame = t_frames[t_depth];
  origin_t bound = frame.origin;
  bound.handle = succeeded(data) ? handle_at_exit(cbid, data) : nullptr;
  if (bound.handle == nullptr) {
    bound.kind = origin_kind::none;
  }
  for (int i = 0; i < frame.pending && i < max_pending; ++i) {
    t.module_bound(frame.pending_ids[i], bound);
  }
}

// A kernel launch, when another consumer enables its callbacks (the replay): a module loaded inside it (the
// launched function's, lazily loaded at the launch's entry) is bound to the launched function, so that its
// variables are located exactly.
void on_launch(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (data.callbackSite == CUPTI_API_ENTER) {
    push_frame({origin_kind::function, launched_function(cbid, data),
                data.functionName != nullptr ? data.functionName : "launch"});
  } else {
    pop_frame();
  }
}

// ---- Resources ------------------------------------------------------------------------------------------------
void on_module_loaded(tracker& t, const CUpti_ResourceData& data) {
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
  t.module_loaded(data.context, module->moduleId, module->pCubin, module->cubinSize, origin);
  // A load call learns its handle at exit: the module waits in its frame until then.
  if (frame == nullptr || frame->origin.handle != nullptr) {
    return;
  }
  if (frame->pending < max_pending) {
    frame->pending_ids[frame->pending++] = module->moduleId;
  } else {
    log(KREPLAY_LOG_WARNING, "more than %d modules loaded inside one %s: module %u keeps no handle", max_pending,
        frame->origin.call, module->moduleId);
  }
}

void on_resource(tracker& t, CUpti_CallbackId cbid, const CUpti_ResourceData& data) {
  if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
    t.context_destroyed(data.context);
  } else if (cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED) {
    on_module_loaded(t, data);
  } else if (const auto* module = static_cast<const CUpti_ModuleResourceData*>(data.resourceDescriptor);
             module != nullptr) {  // MODULE_UNLOAD_STARTING
    t.module_unloading(module->moduleId);
  }
}


using driver_handler = void (*)(tracker&, CUpti_CallbackId, const CUpti_CallbackData&);
struct driver_route_t {
  CUpti_CallbackId cbid;
  driver_handler handler;
};

// The driver callbacks the tracker enables. None of them is made per kernel: no launch (cuLaunchKernel*,
// cooperative launches), no cuLibraryGetKernel / cuKernelGetFunction. The cost of tracking is one callback on each
// allocation, free, vmem, context and module-loading call. A module loaded inside a call not listed here (a lazy
// load inside a launch, an eager one inside cuDevicePrimaryCtxRetain) is found at snapshot time by its kernels
// (tracker::library_by_kernels). (CONTEXT_CREATED is not needed: a context's device comes from its creation
// call's parameters, or from one cuCtxGetDevice_v2 when it is first seen.)
constexpr driver_route_t driver_routes[] = {
    // Allocations and frees.
    {CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, on_allocation},
    {CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, on_allocation},
    {CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, on_allocation},
    {CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz, on_allocation},
    {CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, on_allocation},
    {CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz, on_allocation},
    {CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, on_allocation},
    {CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2, on_allocation},
    {CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, on_allocation},
    {CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2, on_allocation},
    {CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, on_free},
    {CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, on_free},
    {CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz, on_free},
    {CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, on_free},
    {CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister, on_free},
    // Virtual memory.
    {CUPTI_DRIVER_TRACE_CBID_cuMemCreate, on_vmem},
    {CUPTI_DRIVER_TRACE_CBID_cuMemRelease, on_vmem},
    {CUPTI_DRIVER_TRACE_CBID_cuMemMap, on_vmem},
    {CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess, on_vmem},
    {CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, on_vmem},
    // Contexts.
    {CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRetain, on_context_created},
    {CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2, on_context_gone},
    {CUPTI_DRIVER_TRACE_CBID_cuCtxCreate_v2, on_context_created},
    {CUPTI_DRIVER_TRACE_CBID_cuCtxCreate_v3, on_context_created},
    {CUPTI_DRIVER_TRACE_CBID_cuCtxCreate_v4, on_context_created},
    {CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2, on_context_gone},
    // Module and library loads and unloads, and the library calls inside which a lazy module may be loaded:
    // their handles say which module it is.
    {CUPTI_DRIVER_TRACE_CBID_cuModuleLoad, on_module_call},
    {CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData, on_module_call},
    {CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx, on_module_call},
    {CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary, on_module_call},
    {CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, on_module_call},
    {CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile, on_module_call},
    {CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload, on_library_unload},
    {CUPTI_DRIVER_TRACE_CBID_cuLibraryGetModule, on_module_call},
    {CUPTI_DRIVER_TRACE_CBID_cuLibraryGetGlobal, on_module_call},
    {CUPTI_DRIVER_TRACE_CBID_cuLibraryGetManaged, on_module_call},
};

constexpr CUpti_CallbackId resource_ids[] = {
    CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
    CUPTI_CBID_RESOURCE_MODULE_LOADED,
    CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING,
};

}  // namespace

switchboard::consumer_id register_tracker_callbacks(switchboard& board, tracker& t) {
  consumer_spec spec;
  spec.name = "tracker";
  spec.required = true;
  spec.lost = [&t] { t.event_lost(); };
  const switchboard::consumer_id me = board.add_consumer(std::move(spec));
  for (const driver_route_t& route : driver_routes) {
    const driver_handler handler = route.handler;
    board.route(me, CUPTI_CB_DOMAIN_DRIVER_API, route.cbid, [&t, handler](CUpti_CallbackId cbid, const void* data) {
      handler(t, cbid, *static_cast<const CUpti_CallbackData*>(data));
    });
  }
  for (CUpti_CallbackId cbid : resource_ids) {
    board.route(me, CUPTI_CB_DOMAIN_RESOURCE, cbid, [&t](CUpti_CallbackId id, const void* data) {
      on_resource(t, id, *static_cast<const CUpti_ResourceData*>(data));
    });
  }
  for (CUpti_CallbackId cbid : kernel_launch_ids) {
    board.route(
        me, CUPTI_CB_DOMAIN_DRIVER_API, cbid,
        [](CUpti_CallbackId id, const void* data) { on_launch(id, *static_cast<const CUpti_CallbackData*>(data)); },
        false);
  }
  return me;
}

}  // namespace kreplay::cuda::inject
