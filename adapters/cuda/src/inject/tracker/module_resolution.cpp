// The module registry's resolution: each module's CUmodule from what was known when it was loaded, then every
// variable's address. Runs outside any callback (at snapshot time), with the module's context pushed.
#include <algorithm>

#include "tracker/module_registry.hpp"
#include "tracker/pairing.hpp"

namespace kreplay::cuda::inject {

namespace {

// Pops the context resolve pushed, however it returns.
struct pop_t {
  const driver_api_t& driver;
  ~pop_t() {
    CUcontext ignored = nullptr;
    (void)driver.ctx_pop(&ignored);
  }
};

bool module_of_library(const driver_api_t& driver, CUlibrary library, CUmodule* handle) {
  return driver.library_get_module != nullptr && driver.library_get_module(handle, library) == CUDA_SUCCESS;
}

// The module of the kernel's library in the current context, and the kernel's name where it can be read.
bool module_of_kernel(const driver_api_t& driver, CUkernel kernel, CUmodule* handle, const char** name) {
  CUlibrary library = nullptr;
  if (driver.kernel_get_library == nullptr || driver.kernel_get_library(&library, kernel) != CUDA_SUCCESS) {
    return false;
  }
  if (driver.kernel_get_name != nullptr && driver.kernel_get_name(name, kernel) != CUDA_SUCCESS) {
    *name = nullptr;
  }
  return module_of_library(driver, library, handle);
}

}  // namespace

kreplay_status_t module_registry::resolve(module_t& module, std::string* detail) {
  auto refuse = [&](const std::string& why) {
    return fail("module " + std::to_string(module.id) + " (device " + std::to_string(module.ordinal) + ", " +
                    std::to_string(module.variables.size()) + " variables, loaded inside " + module.origin.call +
                    "): " + why + "; snapshots of this device are declined",
                detail);
  };
  if (module.error != cubin::error_t::none) {
    return refuse(std::string("its cubin cannot be read: ") + cubin::error_string(module.error) + " (" +
                  module.detail + ")");
  }
  if (module.resolved || module.variables.empty()) {
    module.resolved = true;
    return KREPLAY_STATUS_SUCCESS;
  }
  if (driver_.ctx_push == nullptr || driver_.ctx_pop == nullptr || driver_.module_get_global == nullptr) {
    return refuse("the driver lacks cuCtxPushCurrent / cuModuleGetGlobal");
  }
  if (driver_.ctx_push(module.context) != CUDA_SUCCESS) {
    return refuse("its context cannot be made current");
  }
  const pop_t pop{driver_};
  const located_t found = locate(module);
  if (!found.why.empty()) {
    return refuse(found.why);
  }
  if (found.function != nullptr &&
      !std::binary_search(module.functions.begin(), module.functions.end(), std::string(found.function))) {
    return refuse(std::string("the function it was loaded for (") + found.function + ") is not in its cubin");
  }
  std::vector<uint64_t> addresses;
  addresses.reserve(module.variables.size());
  for (const cubin::variable_t& variable : module.variables) {
    CUdeviceptr address = 0;
    size_t bytes = 0;
    if (driver_.module_get_global(&address, &bytes, found.handle, variable.name.c_str()) != CUDA_SUCCESS) {
      return refuse("cuModuleGetGlobal(" + variable.name + ") failed");
    }
    if (bytes != variable.size) {
      return refuse("cuModuleGetGlobal(" + variable.name + ") gives " + std::to_string(bytes) + " bytes, the cubin " +
                    std::to_string(variable.size));
    }
    addresses.push_back(static_cast<uint64_t>(address));
  }
  module.addresses = std::move(addresses);
  module.resolved = true;
  return KREPLAY_STATUS_SUCCESS;
}

module_registry::located_t module_registry::locate(module_t& module) {
  located_t out;
  switch (module.origin.kind) {
    case origin_kind::module:
      out.handle = static_cast<CUmodule>(module.origin.handle);
      break;
    case origin_kind::library:
      if (!module_of_library(driver_, static_cast<CUlibrary>(module.origin.handle), &out.handle)) {
        out.why = "cuLibraryGetModule failed for the library it was loaded from";
      }
      break;
    case origin_kind::kernel:
      if (!module_of_kernel(driver_, static_cast<CUkernel>(module.origin.handle), &out.handle, &out.function)) {
        out.why = "the library of the kernel it was loaded for cannot be found";
      }
      break;
    case origin_kind::function:
      out = locate_launched(static_cast<CUfunction>(module.origin.handle));
      break;
    case origin_kind::none: {
      // Loaded inside a call the CUPTI layer does not follow: a launch (lazy loading; launches are not
      // followed, for the overhead) or cuDevicePrimaryCtxRetain / cuCtxCreate (eager loading: every library
      // loaded before the context). Paired with a library by its entry kernels where that is exact
      // (library_by_kernels); cuLibraryGetModule in this context is then this module, or one interchangeable
      // with it (checked in resolve by every variable's address and size).
      CUlibrary library = library_by_kernels(module, &out.why);
      if (library != nullptr && !module_of_library(driver_, library, &out.handle)) {
        out.why = "cuLibraryGetModule failed for the library with its kernels";
      }
      break;
    }
  }
  if (out.why.empty() && out.handle == nullptr) {
    out.why = "no CUmodule handle";
  }
  return out;
}

// A launch takes a CUfunction, or a CUkernel passed as one (what cudart does): both are tried.
module_registry::located_t module_registry::locate_launched(CUfunction function) {
  located_t out;
  if (driver_.func_get_module != nullptr && driver_.func_get_module(&out.handle, function) == CUDA_SUCCESS) {
    if (driver_.func_get_name == nullptr || driver_.func_get_name(&out.function, function) != CUDA_SUCCESS) {
      out.function = nullptr;
    }
  } else if (!module_of_kernel(driver_, reinterpret_cast<CUkernel>(function), &out.handle, &out.function)) {
    out.why = "the launched function's module cannot be found";
    return out;
  }
  if (out.function == nullptr) {
    out.why = "the launched function's name cannot be read to check the association";
  }
  return out;
}

void module_registry::name_libraries() {
  std::vector<CUlibrary> unnamed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [library, entry] : libraries_) {
      if (!entry.named) {
        unnamed.push_back(library);
      }
    }
  }
  for (CUlibrary library : unnamed) {
    library_t entry;
    entry.named = true;
    unsigned int count = 0;
    std::vector<CUkernel> kernels;
    if (driver_.library_get_kernel_count(&count, library) == CUDA_SUCCESS) {
      kernels.resize(count);
    } else {
      entry.unreadable = true;
    }
    if (!entry.unreadable && count > 0 &&
        driver_.library_enumerate_kernels(kernels.data(), count, library) != CUDA_SUCCESS) {
      entry.unreadable = true;
    }
    for (size_t i = 0; !entry.unreadable && i < kernels.size(); ++i) {
      const char* name = nullptr;
      if (driver_.kernel_get_name(&name, kernels[i]) != CUDA_SUCCESS || name == nullptr) {
        entry.unreadable = true;
      } else {
        entry.names.emplace_back(name);
      }
    }
    std::sort(entry.names.begin(), entry.names.end());
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = libraries_.find(library);
    if (found != libraries_.end()) {
      found->second = std::move(entry);
    }
  }
}

}  // namespace kreplay::cuda::inject
