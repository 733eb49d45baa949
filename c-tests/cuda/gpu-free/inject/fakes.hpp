// Fakes for the injection's GPU-free tests: "device memory" is host memory, kreplay's copies are memcpy, and
// the driver functions the tracker resolves modules with answer from tables the test fills.
#ifndef KREPLAY_INJECT_TEST_FAKES_HPP
#define KREPLAY_INJECT_TEST_FAKES_HPP

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <cupti.h>

#include "../../../unit/test_util.h"
#include "driver.hpp"
#include "kreplay.h"

namespace fake {

// Runs `call` with stderr in a file and gives back what it wrote there.
template <typename F>
inline std::string stderr_of(F&& call) {
  const std::string path = "/tmp/kreplay_stderr_of_" + std::to_string(getpid());
  std::fflush(stderr);
  const int saved = dup(2);
  FILE* file = std::fopen(path.c_str(), "w");
  CHECK(saved >= 0 && file != nullptr && dup2(fileno(file), 2) >= 0);
  call();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fclose(file);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return text;
}

// ---- Driver -------------------------------------------------------------------------------------------------
struct global_t {
  CUdeviceptr address;
  size_t size;
};
inline std::map<CUmodule, std::map<std::string, global_t>> g_globals;
inline std::map<CUlibrary, CUmodule> g_library_modules;
inline std::map<CUfunction, std::pair<CUmodule, std::string>> g_functions;
inline std::map<CUcontext, int> g_context_devices;
inline std::map<CUlibrary, std::vector<std::string>> g_library_kernels;  // a CUkernel is (library, index + 1)
inline std::map<CUkernel, std::string> g_kernel_names;
inline std::vector<CUcontext> g_current;  // the pushed contexts
inline int g_pushes = 0;

inline CUresult ctx_get_device_of(CUdevice* device, CUcontext context) {
  auto found = g_context_devices.find(context);
  if (found == g_context_devices.end()) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *device = found->second;
  return CUDA_SUCCESS;
}
inline CUresult ctx_push(CUcontext context) {
  g_current.push_back(context);
  ++g_pushes;
  return CUDA_SUCCESS;
}
inline CUresult ctx_pop(CUcontext* context) {
  if (g_current.empty()) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *context = g_current.back();
  g_current.pop_back();
  return CUDA_SUCCESS;
}
inline CUresult module_get_global(CUdeviceptr* address, size_t* bytes, CUmodule module, const char* name) {
  auto found = g_globals.find(module);
  if (found == g_globals.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  auto variable = found->second.find(name);
  if (variable == found->second.end()) {
    return CUDA_ERROR_NOT_FOUND;
  }
  *address = variable->second.address;
  *bytes = variable->second.size;
  return CUDA_SUCCESS;
}
inline CUresult library_get_module(CUmodule* module, CUlibrary library) {
  auto found = g_library_modules.find(library);
  if (found == g_library_modules.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *module = found->second;
  return CUDA_SUCCESS;
}
inline CUresult func_get_module(CUmodule* module, CUfunction function) {
  auto found = g_functions.find(function);
  if (found == g_functions.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *module = found->second.first;
  return CUDA_SUCCESS;
}
inline CUresult func_get_name(const char** name, CUfunction function) {
  auto found = g_functions.find(function);
  if (found == g_functions.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *name = found->second.second.c_str();
  return CUDA_SUCCESS;
}

inline CUresult library_get_kernel_count(unsigned int* count, CUlibrary library) {
  auto found = g_library_kernels.find(library);
  if (found == g_library_kernels.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *count = static_cast<unsigned int>(found->second.size());
  return CUDA_SUCCESS;
}
inline CUresult library_enumerate_kernels(CUkernel* kernels, unsigned int count, CUlibrary library) {
  auto found = g_library_kernels.find(library);
  if (found == g_library_kernels.end() || count != found->second.size()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned int i = 0; i < count; ++i) {
    kernels[i] = reinterpret_cast<CUkernel>(reinterpret_cast<uintptr_t>(library) * 1000 + i + 1);
    g_kernel_names[kernels[i]] = found->second[i];
  }
  return CUDA_SUCCESS;
}
inline CUresult kernel_get_name(const char** name, CUkernel kernel) {
  auto found = g_kernel_names.find(kernel);
  if (found == g_kernel_names.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *name = found->second.c_str();
  return CUDA_SUCCESS;
}

// A library's variable in the current context: the variable of the library's module (one context in these tests).
inline int g_library_global_calls = 0;
inline CUresult library_get_global(CUdeviceptr* address, size_t* bytes, CUlibrary library, const char* name) {
  ++g_library_global_calls;
  auto found = g_library_modules.find(library);
  if (found == g_library_modules.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return module_get_global(address, bytes, found->second, name);
}

inline kreplay::cuda::inject::driver_api_t driver() {
  kreplay::cuda::inject::driver_api_t api;
  api.ctx_get_device_of = ctx_get_device_of;
  api.ctx_push = ctx_push;
  api.ctx_pop = ctx_pop;
  api.module_get_global = module_get_global;
  api.library_get_module = library_get_module;
  api.func_get_module = func_get_module;
  api.func_get_name = func_get_name;
  api.library_get_kernel_count = library_get_kernel_count;
  api.library_enumerate_kernels = library_enumerate_kernels;
  api.kernel_get_name = kernel_get_name;
  api.library_get_global = library_get_global;
  return api;
}

// ---- The base ops: copies are memcpy ----------------------------------------------------------------------
inline int g_base_made = 0;
inline int g_base_released = 0;
// Copy calls (copy and copy_batch) so far, and the first that fails with every one after it (0: none fails).
inline int g_copy_calls = 0;
inline int g_copies_fail_from = 0;
inline bool copy_fails() { return ++g_copy_calls >= g_copies_fail_from && g_copies_fail_from != 0; }
inline kreplay_status_t copy(void*, void* dst, const void* src, size_t bytes) {
  if (copy_fails()) {
    return KREPLAY_STATUS_DEVICE_ERROR;
  }
  std::memcpy(dst, src, bytes);
  return KREPLAY_STATUS_SUCCESS;
}
inline kreplay_status_t copy_batch(void*, kreplay_agent_t, const kreplay_copy_t* copies, size_t count) {
  if (copy_fails()) {
    return KREPLAY_STATUS_DEVICE_ERROR;
  }
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(copies[i].dst, copies[i].src, copies[i].bytes);
  }
  return KREPLAY_STATUS_SUCCESS;
}
inline kreplay_status_t unused_pointer_info(void*, const void*, kreplay_pointer_info_t*) {
  return KREPLAY_STATUS_DEVICE_ERROR;  // the injection answers pointer_info itself
}
inline kreplay_status_t unused_iterate(void*, kreplay_agent_t, kreplay_module_variable_visitor_t, void*) {
  return KREPLAY_STATUS_DEVICE_ERROR;
}
inline constexpr size_t kFreeBytes = 12345;
inline kreplay_status_t free_bytes(void*, kreplay_agent_t, size_t* bytes_out) {
  *bytes_out = kFreeBytes;
  return KREPLAY_STATUS_SUCCESS;
}
inline void release(void*) { ++g_base_released; }
inline kreplay_status_t make_base(kreplay_device_ops_t* out) {
  ++g_base_made;
  kreplay_device_ops_t ops{};
  ops.struct_size = sizeof(ops);
  ops.copy = copy;
  ops.pointer_info = unused_pointer_info;
  ops.iterate_module_variables = unused_iterate;
  ops.copy_batch = copy_batch;
  ops.release = release;
  ops.device_free_bytes = free_bytes;
  *out = ops;
  return KREPLAY_STATUS_SUCCESS;
}

// Fake handles: distinct non-null values that are never dereferenced.
template <typename T>
T handle(uintptr_t value) {
  return reinterpret_cast<T>(value);
}

// A driver callback as CUPTI raises it: its site, the call's parameters and result, the calling context.
inline CUpti_CallbackData callback_data(CUpti_ApiCallbackSite site, void* params, CUresult* result, CUcontext context,
                                        const char* function) {
  CUpti_CallbackData data{};
  data.callbackSite = site;
  data.functionName = function;
  data.functionParams = params;
  data.functionReturnValue = result;
  data.context = context;
  return data;
}

}  // namespace fake

#endif  // KREPLAY_INJECT_TEST_FAKES_HPP
