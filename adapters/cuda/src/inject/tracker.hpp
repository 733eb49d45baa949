// The tracker: a state machine fed with what the intercepted driver calls said (allocations and frees of each
// kind, virtual-memory handles and mappings, contexts, modules with their cubin images), which keeps kreplay's
// inventory in step through its C API and answers kreplay's pointer_info and iterate_module_variables ops.
//
// It makes no CUDA call while it records (the CUPTI layer calls it from inside driver callbacks); module
// handles are resolved, through driver_api_t, only in iterate_module_variables and list_variables, which run
// outside any callback (at snapshot time). The CUPTI translation is cupti_layer.cpp; tests feed the tracker
// directly or through that layer with fabricated callback data.
//
// Locking: one mutex over the tables. It is never held while kreplay is called (kreplay calls pointer_info,
// which takes it) nor while the driver is called.
#ifndef KREPLAY_CUDA_INJECT_TRACKER_HPP
#define KREPLAY_CUDA_INJECT_TRACKER_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda.h>

#include "driver.hpp"
#include "kreplay.h"

namespace kreplay::cuda::inject {

// What an allocation call made.
enum class memory_kind : uint8_t {
  device,        // cuMemAlloc*, cuMemAllocPitch: captured
  pool,          // cuMemAllocAsync, cuMemAllocFromPoolAsync (stream-ordered): captured
  managed,       // cuMemAllocManaged: counted, not captured
  host_pinned,   // cuMemAllocHost, cuMemHostAlloc, cuMemHostRegister without DEVICEMAP: counted
  host_mapped,   // the same with CU_MEMHOSTALLOC_DEVICEMAP / CU_MEMHOSTREGISTER_DEVICEMAP: counted
};
constexpr size_t untracked_kind_count = 3;  // managed, host_pinned, host_mapped (index = kind - managed)

// Memory a snapshot cannot cover, live now, per device.
struct untracked_t {
  size_t count[untracked_kind_count];
  size_t bytes[untracked_kind_count];
};

// Which driver call was in progress on the loading thread when a module was loaded: the handle it carried is
// how the module's CUmodule is found later (resolve_module in tracker.cpp).
enum class origin_kind : uint8_t {
  none,       // no call the injection follows (a lazy load inside a launch, an eager one inside
              // cuDevicePrimaryCtxRetain): found at snapshot time by its kernels (library_by_kernels)
  module,     // cuModuleLoad*: handle is the CUmodule the call returned
  library,    // cuLibraryLoad*, cuLibraryGet*: handle is the CUlibrary
  kernel,     // cuKernelGetFunction: handle is the CUkernel (the CUPTI layer no longer follows it)
  function,   // a launch: handle is the CUfunction (or a CUkernel passed as one); for the launcher (issue 22),
              // whose launch callbacks are enabled only for a replay
};
struct origin_t {
  origin_kind kind = origin_kind::none;
  void* handle = nullptr;
  const char* call = "none";  // the driver function's name, for messages (static storage)
};

// One access descriptor of cuMemSetAccess, reduced to what matters here.
struct access_t {
  bool device;       // location is a device (not host memory)
  int ordinal;       // that device
  bool read_write;   // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
};

// One module-scope variable, resolved (list_variables).
struct resolved_variable_t {
  uint32_t module_id;
  const char* name;  // valid during the visit
  uint64_t address;
  size_t size;
  bool is_constant;
};

struct tracker_counts_t {
  uint64_t allocations;     // allocation calls seen (every kind)
  uint64_t frees;           // free calls seen
  uint64_t unknown_frees;   // frees of pointers the tracker never saw
  uint64_t record_errors;   // kreplay_record_* answers other than SUCCESS / NOT_FOUND
  uint64_t modules_loaded;
  uint64_t modules_unloaded;
  uint64_t contexts_forgotten;
};

class tracker {
 public:
  // `driver` is used only for module resolution and the device of an unknown context; it may hold nulls.
  explicit tracker(const driver_api_t& driver);
  tracker(const tracker&) = delete;
  tracker& operator=(const tracker&) = delete;

  // ---- Contexts -------------------------------------------------------------------------------------------
  // A context and its device, from cuCtxCreate / cuDevicePrimaryCtxRetain parameters (no query needed).
  void context_device(CUcontext context, int ordinal, bool primary);
  // The device of `context`: the cached answer, else one read-only query (cached), else -1.
  int device_of(CUcontext context);
  // The context is going away (cuCtxDestroy, CONTEXT_DESTROY_STARTING, a primary-context reset): its
  // allocations are recorded freed and its modules forgotten.
  void context_destroyed(CUcontext context);
  // cuDevicePrimaryCtxReset / cudaDeviceReset: the device's primary context and everything in it.
  void primary_context_reset(int ordinal);

  // ---- Allocations ----------------------------------------------------------------------------------------
  void allocated(CUcontext context, uint64_t address, size_t size, memory_kind kind);
  // Before the real free (kreplay must never restore into memory already given back).
  void freeing(uint64_t address);
  // The real free failed after freeing(): the allocation is live again.
  void free_failed(uint64_t address);

  // ---- Virtual memory -------------------------------------------------------------------------------------
  void vmem_created(uint64_t handle, size_t size, bool device, int ordinal);
  void vmem_released(uint64_t handle);
  void vmem_mapped(uint64_t address, size_t size, uint64_t handle);
  // Only pages mapped and made read-write for their own device count: those are recorded here.
  void vmem_access(uint64_t address, size_t size, const access_t* access, size_t count);
  void vmem_unmapping(uint64_t address, size_t size);

  // ---- Modules --------------------------------------------------------------------------------------------
  // MODULE_LOADED: parses the cubin now (the image may not outlive the callback) and keeps its variables.
  void module_loaded(CUcontext context, uint32_t module_id, const void* cubin, size_t cubin_size,
                     const origin_t& origin);
  // The CUmodule / CUlibrary the load call returned, for the modules loaded inside it.
  void module_bound(uint32_t module_id, const origin_t& origin);
  void module_unloading(uint32_t module_id);
  // cuLibraryLoadData / cuLibraryLoadFromFile returned `library`; cuLibraryUnload is about to unload it. The
  // libraries known are the candidates for a module loaded where no handle was known (resolve in tracker.cpp).
  void library_loaded(CUlibrary library);
  void library_unloading(CUlibrary library);
  // CUDA_MODULE_LOADING=EAGER in the process: modules loaded outside any followed call may then be told apart
  // by their variables' names even where more libraries than modules have their kernels (pair_group).
  void set_eager_loading(bool eager) { eager_loading_.store(eager, std::memory_order_relaxed); }

  // ---- kreplay's ops --------------------------------------------------------------------------------------
  kreplay_status_t pointer_info(const void* ptr, kreplay_pointer_info_t* info_out);
  kreplay_status_t iterate_module_variables(kreplay_agent_t agent, kreplay_module_variable_visitor_t visit,
                                            void* visit_data);

  // ---- Introspection (the injection's C API and tests) ----------------------------------------------------
  untracked_t untracked(int ordinal);
  // The captured bytes of `ordinal` live by the tracker's own tables (device and pool allocations, minus their
  // frees, plus the vmem pages recorded mapped), counted apart from kreplay's inventory so the two can be
  // compared.
  size_t live_bytes(int ordinal);
  // Modules of `ordinal` (-1: every device) and the variables their cubins define.
  void module_counts(int ordinal, size_t* modules, size_t* variables);
  // Resolves and visits every variable of `ordinal`; the first failure's text goes to `detail`.
  kreplay_status_t list_variables(int ordinal, bool (*visit)(void*, const resolved_variable_t&), void* data,
                                  std::string* detail);
  tracker_counts_t counts();
  // An intercepted event could not be recorded (the host ran out of memory inside a callback): from now on every
  // snapshot is declined, since the tables may miss an allocation or a module. Lock-free; allocates nothing.
  void event_lost() noexcept { lost_events_.fetch_add(1, std::memory_order_relaxed); }
  // The text of the last module-resolution failure ("" if none).
  std::string last_error();

  struct module_t;  // tracker.cpp

 private:
  struct allocation_t {
    size_t size;
    memory_kind kind;
    int ordinal;
    CUcontext context;
  };
  struct handle_t {
    size_t size;
    bool device;
    int ordinal;
  };
  struct mapping_t {
    size_t size;
    uint64_t handle;
    bool known;    // the handle's cuMemCreate was seen (else: imported, or made before the injection)
    bool device;
    int ordinal;
    std::vector<std::pair<uint64_t, size_t>> recorded;  // ranges given to kreplay_record_vmem_map
  };

  struct library_t {
    bool named = false;               // names read (at the first snapshot that needs them)
    bool unreadable = false;          // the driver could not enumerate its kernels
    std::vector<std::string> names;   // its kernels' names, sorted
  };

  kreplay_status_t resolve(module_t& module, std::string* detail);
  // Reads the kernel names of the libraries not read yet (outside callbacks; context-independent queries).
  void name_libraries();
  // How the modules of one context with one set of entry kernels, loaded outside any followed call, pair with
  // the known libraries that have those kernels (tracker.cpp says when a pairing is exact).
  struct pairing_t {
    uint64_t generation = 0;                // generation_ when it was computed
    std::map<uint32_t, CUlibrary> library;  // module id -> the library whose module in the context it is
    std::string why;                        // for the modules not paired: the reason, in figures
  };
  // The known library whose module in the module's context is `module`, found by its entry kernels, or null
  // with the reason in *why. Sets module.paired_generation. Runs with the module's context current.
  CUlibrary library_by_kernels(module_t& module, std::string* why);
  pairing_t pair_group(const module_t& module);
  // A module or library came or went: every pairing is computed afresh at the next resolution. With mutex_ held.
  void regroup_locked() {
    generation_.fetch_add(1, std::memory_order_relaxed);
    pairings_.clear();
  }
  // *stop is set when the visitor asked to stop the walk.
  kreplay_status_t visit_module(module_t& module, bool (*visit)(void*, const resolved_variable_t&), void* data,
                                std::string* detail, bool* stop);
  void forget(std::vector<uint64_t> addresses);
  void note_error(const std::string& text);

  driver_api_t driver_;
  std::mutex mutex_;
  std::map<CUcontext, int> contexts_;
  std::map<int, CUcontext> primary_;
  std::map<uint64_t, allocation_t> allocations_;
  std::map<uint64_t, handle_t> handles_;
  std::map<uint64_t, mapping_t> mappings_;
  std::map<uint32_t, std::shared_ptr<module_t>> modules_;
  std::map<CUlibrary, library_t> libraries_;
  tracker_counts_t counts_{};
  std::atomic<uint64_t> generation_{0};  // changed (under mutex_) whenever a module or library comes or goes
  std::map<std::pair<CUcontext, std::vector<std::string>>, pairing_t> pairings_;  // by context and kernels
  std::string last_error_;
  std::atomic<uint64_t> lost_events_{0};
  std::atomic<bool> eager_loading_{false};
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_TRACKER_HPP
