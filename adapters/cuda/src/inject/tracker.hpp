// The tracker: a state machine fed with what the intercepted driver calls said (allocations and frees of each
// kind, virtual-memory handles and mappings, contexts, modules with their cubin images), which keeps kreplay's
// inventory in step through its C API and answers kreplay's pointer_info and iterate_module_variables ops.
//
// A facade over two tables that share nothing (tracker/): the memory table (contexts, allocations, virtual
// memory) and the module registry (modules, libraries, their resolution to variables, with the pairing of
// modules and libraries as a pure function in tracker/pairing.hpp). The CUPTI translation is cupti_layer.cpp;
// tests feed the tracker directly or through that layer with fabricated callback data.
//
// It makes no CUDA call while it records (the CUPTI layer calls it from inside driver callbacks); module handles
// are resolved, through driver_api_t, only in iterate_module_variables and list_variables, which run outside any
// callback (at snapshot time). No lock of either table is held while kreplay or the driver is called.
#ifndef KREPLAY_CUDA_INJECT_TRACKER_HPP
#define KREPLAY_CUDA_INJECT_TRACKER_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda.h>

#include "driver.hpp"
#include "kreplay.h"
#include "tracker/counts.hpp"
#include "tracker/memory_table.hpp"
#include "tracker/module_registry.hpp"

namespace kreplay::cuda::inject {

class tracker {
 public:
  // `driver` is used only for module resolution and the device of an unknown context; it may hold nulls.
  explicit tracker(const driver_api_t& driver) : memory_(driver), modules_(driver) {}
  tracker(const tracker&) = delete;
  tracker& operator=(const tracker&) = delete;

  // ---- Contexts -------------------------------------------------------------------------------------------
  // A context and its device, from cuCtxCreate / cuDevicePrimaryCtxRetain parameters (no query needed).
  void context_device(CUcontext context, int ordinal, bool primary) {
    memory_.context_device(context, ordinal, primary);
  }
  // The device of `context`: the cached answer, else one read-only query (cached), else -1.
  int device_of(CUcontext context) { return memory_.device_of(context); }
  // The device's primary context as last retained, or null when none is known.
  CUcontext primary_context(int ordinal) { return memory_.primary_context(ordinal); }
  // The context is going away (cuCtxDestroy, CONTEXT_DESTROY_STARTING, a primary-context reset): its
  // allocations are recorded freed and its modules forgotten.
  void context_destroyed(CUcontext context);
  // cuDevicePrimaryCtxReset / cudaDeviceReset: the device's primary context and everything in it.
  void primary_context_reset(int ordinal);

  // ---- Allocations ----------------------------------------------------------------------------------------
  void allocated(CUcontext context, uint64_t address, size_t size, memory_kind kind) {
    memory_.allocated(context, address, size, kind);
  }
  // Before the real free (kreplay must never restore into memory already given back).
  void freeing(uint64_t address) { memory_.freeing(address); }
  // The real free failed after freeing(): the allocation is live again.
  void free_failed(uint64_t address) { memory_.free_failed(address); }

  // ---- Virtual memory -------------------------------------------------------------------------------------
  void vmem_created(uint64_t handle, size_t size, bool device, int ordinal) {
    memory_.vmem_created(handle, size, device, ordinal);
  }
  void vmem_released(uint64_t handle) { memory_.vmem_released(handle); }
  void vmem_mapped(uint64_t address, size_t size, uint64_t handle) { memory_.vmem_mapped(address, size, handle); }
  // Only pages mapped and made read-write for their own device count: those are recorded here.
  void vmem_access(uint64_t address, size_t size, const access_t* access, size_t count) {
    memory_.vmem_access(address, size, access, count);
  }
  void vmem_unmapping(uint64_t address, size_t size) { memory_.vmem_unmapping(address, size); }

  // ---- Modules --------------------------------------------------------------------------------------------
  // MODULE_LOADED: parses the cubin now (the image may not outlive the callback) and keeps its variables.
  void module_loaded(CUcontext context, uint32_t module_id, const void* cubin, size_t cubin_size,
                     const origin_t& origin);
  // The CUmodule / CUlibrary the load call returned, for the modules loaded inside it.
  void module_bound(uint32_t module_id, const origin_t& origin) { modules_.module_bound(module_id, origin); }
  void module_unloading(uint32_t module_id);
  // cuLibraryLoadData / cuLibraryLoadFromFile returned `library`; cuLibraryUnload is about to unload it. The
  // libraries known are the candidates for a module loaded where no handle was known (tracker/pairing.hpp).
  void library_loaded(CUlibrary library) { modules_.library_loaded(library); }
  void library_unloading(CUlibrary library) { modules_.library_unloading(library); }
  // CUDA_MODULE_LOADING=EAGER in the process: modules loaded outside any followed call may then be told apart
  // by their variables' names even where more libraries than modules have their kernels (tracker/pairing.hpp).
  void set_eager_loading(bool eager) { modules_.set_eager_loading(eager); }

  // ---- kreplay's ops --------------------------------------------------------------------------------------
  kreplay_status_t pointer_info(const void* ptr, kreplay_pointer_info_t* info_out) {
    return memory_.pointer_info(ptr, info_out);
  }
  kreplay_status_t iterate_module_variables(kreplay_agent_t agent, kreplay_module_variable_visitor_t visit,
                                            void* visit_data);

  // ---- Introspection (the injection's C API and tests) ----------------------------------------------------
  untracked_t untracked(int ordinal) { return memory_.untracked(ordinal); }
  // The captured bytes of `ordinal` live by the tracker's own tables (device and pool allocations, minus their
  // frees, plus the vmem pages recorded mapped), counted apart from kreplay's inventory so the two can be
  // compared.
  size_t live_bytes(int ordinal) { return memory_.live_bytes(ordinal); }
  // Modules of `ordinal` (-1: every device) and the variables their cubins define.
  void module_counts(int ordinal, size_t* modules, size_t* variables) {
    modules_.module_counts(ordinal, modules, variables);
  }
  // Resolves and visits every variable of `ordinal`; the first failure's text goes to `detail`.
  kreplay_status_t list_variables(int ordinal, bool (*visit)(void*, const resolved_variable_t&), void* data,
                                  std::string* detail);
  tracker_counts_t counts();
  // An intercepted event could not be recorded (the host ran out of memory inside a callback): from now on every
  // snapshot is declined, since the tables may miss an allocation or a module. Lock-free; allocates nothing.
  void event_lost() noexcept { lost_events_.fetch_add(1, std::memory_order_relaxed); }
  // The text of the last module-resolution failure ("" if none).
  std::string last_error() { return modules_.last_error(); }

 private:
  memory_table memory_;
  module_registry modules_;
  std::atomic<uint64_t> lost_events_{0};
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_TRACKER_HPP
