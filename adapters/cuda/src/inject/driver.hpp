// The driver API functions the tracker's module resolution needs, resolved with dlsym from the libcuda the
// process already loaded (never linked: the library must not pull a second driver or runtime into the host).
// Tests fill the table with fakes. Every entry may be null (an older driver): what needs it then fails.
#ifndef KREPLAY_CUDA_INJECT_DRIVER_HPP
#define KREPLAY_CUDA_INJECT_DRIVER_HPP

#include <cuda.h>

namespace kreplay::cuda::inject {

struct driver_api_t {
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;                    // cuCtxGetDevice (the current context)
  CUresult (*ctx_get_device_of)(CUdevice*, CUcontext) = nullptr;      // cuCtxGetDevice_v2 (CUDA 13)
  CUresult (*ctx_push)(CUcontext) = nullptr;                          // cuCtxPushCurrent_v2
  CUresult (*ctx_pop)(CUcontext*) = nullptr;                          // cuCtxPopCurrent_v2
  CUresult (*module_get_global)(CUdeviceptr*, size_t*, CUmodule, const char*) = nullptr;  // cuModuleGetGlobal_v2
  CUresult (*library_get_module)(CUmodule*, CUlibrary) = nullptr;     // cuLibraryGetModule
  CUresult (*kernel_get_library)(CUlibrary*, CUkernel) = nullptr;     // cuKernelGetLibrary
  CUresult (*func_get_module)(CUmodule*, CUfunction) = nullptr;       // cuFuncGetModule
  CUresult (*func_get_name)(const char**, CUfunction) = nullptr;      // cuFuncGetName
  CUresult (*kernel_get_function)(CUfunction*, CUkernel) = nullptr;   // cuKernelGetFunction
  CUresult (*library_get_kernel_count)(unsigned int*, CUlibrary) = nullptr;                // cuLibraryGetKernelCount
  CUresult (*library_enumerate_kernels)(CUkernel*, unsigned int, CUlibrary) = nullptr;     // cuLibraryEnumerateKernels
  CUresult (*kernel_get_name)(const char**, CUkernel) = nullptr;      // cuKernelGetName
  // cuLibraryGetGlobal: a library's variable in the current context, by name (no module handle needed)
  CUresult (*library_get_global)(CUdeviceptr*, size_t*, CUlibrary, const char*) = nullptr;
  CUresult (*mem_get_info)(size_t*, size_t*) = nullptr;               // cuMemGetInfo_v2
};

// Resolves the table from the libcuda.so.1 already in the process (RTLD_NOLOAD). False when there is none.
bool resolve_driver(driver_api_t& out);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_DRIVER_HPP
