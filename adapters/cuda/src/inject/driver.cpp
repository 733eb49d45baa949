#include "driver.hpp"

#include <dlfcn.h>

namespace kreplay::cuda::inject {
namespace {

template <typename F>
void find(void* library, const char* name, F& out) {
  // SAFETY-equivalent note for C++: dlsym returns the address of the function named `name` whose prototype cuda.h
  // declares; F is that prototype, so the conversion is the one POSIX documents for dlsym.
  out = reinterpret_cast<F>(dlsym(library, name));
}

}  // namespace

bool resolve_driver(driver_api_t& out) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (cuda == nullptr) {
    return false;
  }
  find(cuda, "cuCtxGetDevice", out.ctx_get_device);
  find(cuda, "cuCtxGetDevice_v2", out.ctx_get_device_of);
  find(cuda, "cuCtxPushCurrent_v2", out.ctx_push);
  find(cuda, "cuCtxPopCurrent_v2", out.ctx_pop);
  find(cuda, "cuModuleGetGlobal_v2", out.module_get_global);
  find(cuda, "cuLibraryGetModule", out.library_get_module);
  find(cuda, "cuKernelGetLibrary", out.kernel_get_library);
  find(cuda, "cuFuncGetModule", out.func_get_module);
  find(cuda, "cuFuncGetName", out.func_get_name);
  find(cuda, "cuKernelGetFunction", out.kernel_get_function);
  find(cuda, "cuLibraryGetKernelCount", out.library_get_kernel_count);
  find(cuda, "cuLibraryEnumerateKernels", out.library_enumerate_kernels);
  find(cuda, "cuKernelGetName", out.kernel_get_name);
  find(cuda, "cuLibraryGetGlobal", out.library_get_global);
  find(cuda, "cuMemGetInfo_v2", out.mem_get_info);
  // The handle stays open for the life of the process, like the driver itself.
  return true;
}

}  // namespace kreplay::cuda::inject
