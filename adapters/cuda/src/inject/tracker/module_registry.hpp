// The module registry: the modules loaded in each context with what their cubins define (variables, entry
// kernels), the libraries loaded, and the resolution of each module's variables to addresses, which answers
// kreplay's iterate_module_variables.
//
// It makes no CUDA call while it records (the CUPTI layer feeds it from inside driver callbacks) and never calls
// kreplay (the tracker says kreplay_modules_changed). Module handles are resolved, through driver_api_t, only in
// list_variables, which runs outside any callback (at snapshot time): a module by the handle of the call it was
// loaded in, or, loaded outside any followed call, by pairing it with a library by its kernels (pairing.hpp).
//
// Locking: mutex_ over the tables, never held while the driver is called; each module's resolve_mutex over its
// resolution. A module's resolution may take mutex_, never the other way round.
#ifndef KREPLAY_CUDA_INJECT_TRACKER_MODULE_REGISTRY_HPP
#define KREPLAY_CUDA_INJECT_TRACKER_MODULE_REGISTRY_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <cuda.h>

#include "cubin.hpp"
#include "driver.hpp"
#include "kreplay.h"
#include "tracker/counts.hpp"

namespace kreplay::cuda::inject {

struct pairing_input_t;  // pairing.hpp

// Which driver call was in progress on the loading thread when a module was loaded: the handle it carried is
// how the module's CUmodule is found later (module_registry::locate).
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

// One module-scope variable, resolved (list_variables).
struct resolved_variable_t {
  uint32_t module_id;
  const char* name;  // valid during the visit
  uint64_t address;
  size_t size;
  bool is_constant;
};
using variable_visitor_t = bool (*)(void* data, const resolved_variable_t& variable);

class module_registry {
 public:
  // `driver` is used only to resolve modules; it may hold nulls.
  explicit module_registry(const driver_api_t& driver) : driver_(driver) {}
  module_registry(const module_registry&) = delete;
  module_registry& operator=(const module_registry&) = delete;

  // ---- Events ---------------------------------------------------------------------------------------------
  // Parses the cubin now (the image may not outlive the callback) and keeps its variables and kernels.
  void module_loaded(CUcontext context, int ordinal, uint32_t module_id, const void* cubin, size_t cubin_size,
                     const origin_t& origin);
  void module_bound(uint32_t module_id, const origin_t& origin);
  // True when the module was known.
  bool module_unloading(uint32_t module_id);
  // Forgets the context's modules; true when there were any.
  bool context_destroyed(CUcontext context);
  void library_loaded(CUlibrary library);
  void library_unloading(CUlibrary library);
  void set_eager_loading(bool eager) { eager_loading_.store(eager, std::memory_order_relaxed); }

  // ---- Resolution and introspection -----------------------------------------------------------------------
  // Resolves and visits every variable of `ordinal`; the first failure's text goes to `detail`.
  kreplay_status_t list_variables(int ordinal, variable_visitor_t visit, void* data, std::string* detail);
  void module_counts(int ordinal, size_t* modules, size_t* variables);
  // Its own fields only: modules_loaded, modules_unloaded.
  tracker_counts_t counts();
  // Logs `text` as a warning, keeps it as the last error, and gives it to *detail if that is empty: a snapshot
  // of the device is declined (the answer is DEVICE_ERROR).
  kreplay_status_t fail(const std::string& text, std::string* detail);
  std::string last_error();

 private:
  struct module_t {
    uint32_t id = 0;
    CUcontext context = nullptr;
    int ordinal = -1;
    origin_t origin;
    cubin::error_t error = cubin::error_t::none;
    std::string detail;
    std::vector<cubin::variable_t> variables;
    std::vector<std::string> functions;  // kept only for modules with variables (to check a resolved handle)
    // Its entry kernels (the cubin's STO_CUDA_ENTRY functions), kept for every module: what associates a module
    // loaded outside any followed call with its library, and what shows two cubins claiming one library.
    std::vector<std::string> kernels;
    // Resolution, done once outside any callback; guarded by resolve_mutex.
    std::mutex resolve_mutex;
    bool resolved = false;
    std::vector<uint64_t> addresses;  // of variables, in order
    // Found by its kernels (library_by_kernels), with the pairing of that generation: redone once modules or
    // libraries came or went since.
    bool paired = false;
    uint64_t paired_generation = 0;
  };
  struct library_t {
    bool named = false;               // names read (at the first snapshot that needs them)
    bool unreadable = false;          // the driver could not enumerate its kernels
    std::vector<std::string> names;   // its kernels' names, sorted
  };
  // How the modules of one context with one set of entry kernels, loaded outside any followed call, pair with
  // the known libraries that have those kernels.
  struct pairing_t {
    uint64_t generation = 0;                // generation_ when it was computed
    std::map<uint32_t, CUlibrary> library;  // module id -> the library whose module in the context it is
    std::string why;                        // for the modules not paired: the reason, in figures
  };
  // The CUmodule found for a module, or why none is (module_resolution.cpp).
  struct located_t {
    CUmodule handle = nullptr;
    const char* function = nullptr;  // a kernel known to be in the module, to check against its cubin
    std::string why;
  };

  // ---- module_resolution.cpp ----
  // The module's variables' addresses, found once; runs with its context pushed, outside any callback.
  kreplay_status_t resolve(module_t& module, std::string* detail);
  located_t locate(module_t& module);
  located_t locate_launched(CUfunction function);
  // Reads the kernel names of the libraries not read yet (context-independent queries).
  void name_libraries();
  // The known library whose module in the module's context is `module`, found by its entry kernels, or null
  // with the reason in *why. Sets module.paired_generation. Runs with the module's context current.
  CUlibrary library_by_kernels(module_t& module, std::string* why);
  pairing_t pair_group(const module_t& module);
  pairing_input_t pairing_input_locked(const module_t& module);

  // ---- module_registry.cpp ----
  // A module or library came or went: every pairing is computed afresh at the next resolution. With mutex_ held.
  void regroup_locked() {
    generation_.fetch_add(1, std::memory_order_relaxed);
    pairings_.clear();
  }
  // *stop is set when the visitor asked to stop the walk.
  kreplay_status_t visit_module(module_t& module, variable_visitor_t visit, void* data, std::string* detail,
                                bool* stop);

  driver_api_t driver_;
  std::mutex mutex_;
  std::map<uint32_t, std::shared_ptr<module_t>> modules_;
  std::map<CUlibrary, library_t> libraries_;
  tracker_counts_t counts_{};
  std::atomic<uint64_t> generation_{0};  // changed (under mutex_) whenever a module or library comes or goes
  std::map<std::pair<CUcontext, std::vector<std::string>>, pairing_t> pairings_;  // by context and kernels
  std::string last_error_;
  std::atomic<bool> eager_loading_{false};
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_TRACKER_MODULE_REGISTRY_HPP
