#include "driver.hpp"

#include <dlfcn.h>

#include "symbols.hpp"

namespace kreplay::cuda::inject {

bool resolve_driver(driver_api_t& out) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (cuda == nullptr) {
    return false;
  }
  find_symbol(cuda, "cuCtxGetDevice", out.ctx_get_device);
  find_symbol(cuda, "cuCtxGetDevice_v2", out.ctx_get_device_of);
  find_symbol(cuda, "cuCtxPushCurrent_v2", out.ctx_push);
  find_symbol(cuda, "cuCtxPopCurrent_v2", out.ctx_pop);
  find_symbol(cuda, "cuModuleGetGlobal_v2", out.module_get_global);
  find_symbol(cuda, "cuLibraryGetModule", out.library_get_module);
  find_symbol(cuda, "cuKernelGetLibrary", out.kernel_get_library);
  find_symbol(cuda, "cuFuncGetModule", out.func_get_module);
  find_symbol(cuda, "cuFuncGetName", out.func_get_name);
  find_symbol(cuda, "cuKernelGetFunction", out.kernel_get_function);
  find_symbol(cuda, "cuLibraryGetKernelCount", out.library_get_kernel_count);
  find_symbol(cuda, "cuLibraryEnumerateKernels", out.library_enumerate_kernels);
  find_symbol(cuda, "cuKernelGetName", out.kernel_get_name);
  find_symbol(cuda, "cuLibraryGetGlobal", out.library_get_global);
  find_symbol(cuda, "cuMemGetInfo_v2", out.mem_get_info);
  find_symbol(cuda, "cuCtxSynchronize", out.ctx_synchronize);
  find_symbol(cuda, "cuLaunchKernel", out.launch_kernel);
  find_symbol(cuda, "cuLaunchKernelEx", out.launch_kernel_ex);
  find_symbol(cuda, "cuLaunchCooperativeKernel", out.launch_cooperative);
  find_symbol(cuda, "cuFuncGetParamInfo", out.func_get_param_info);
  find_symbol(cuda, "cuFuncIsLoaded", out.func_is_loaded);
  find_symbol(cuda, "cuFuncLoad", out.func_load);
  find_symbol(cuda, "cuEventCreate", out.event_create);
  find_symbol(cuda, "cuEventRecord", out.event_record);
  if (!find_symbol(cuda, "cuEventElapsedTime_v2", out.event_elapsed)) {
    find_symbol(cuda, "cuEventElapsedTime", out.event_elapsed);
  }
  find_symbol(cuda, "cuEventDestroy_v2", out.event_destroy);
  find_symbol(cuda, "cuStreamIsCapturing", out.stream_is_capturing);
  find_symbol(cuda, "cuGraphLaunch", out.graph_launch);
  find_symbol(cuda, "cuGraphGetNodes", out.graph_get_nodes);
  find_symbol(cuda, "cuGraphNodeGetType", out.graph_node_get_type);
  find_symbol(cuda, "cuGraphKernelNodeGetParams_v2", out.graph_kernel_node_get_params);
  find_symbol(cuda, "cuGraphChildGraphNodeGetGraph", out.graph_child_get_graph);
  find_symbol(cuda, "cuGraphMemcpyNodeGetParams", out.graph_memcpy_node_get_params);
  find_symbol(cuda, "cuGraphMemsetNodeGetParams", out.graph_memset_node_get_params);
  find_symbol(cuda, "cuGraphMemAllocNodeGetParams", out.graph_mem_alloc_node_get_params);
  find_symbol(cuda, "cuGraphMemFreeNodeGetParams", out.graph_mem_free_node_get_params);
  find_symbol(cuda, "cuGraphGetEdges_v2", out.graph_get_edges);
  find_symbol(cuda, "cuGraphKernelNodeGetAttribute", out.graph_kernel_node_get_attribute);
  find_symbol(cuda, "cuGraphEventRecordNodeGetEvent", out.graph_event_record_node_get_event);
  find_symbol(cuda, "cuGraphEventWaitNodeGetEvent", out.graph_event_wait_node_get_event);
  find_symbol(cuda, "cuMemcpy3DAsync_v2", out.memcpy_3d_async);
  find_symbol(cuda, "cuMemsetD2D8Async", out.memset_d2d8_async);
  find_symbol(cuda, "cuMemsetD2D16Async", out.memset_d2d16_async);
  find_symbol(cuda, "cuMemsetD2D32Async", out.memset_d2d32_async);
  find_symbol(cuda, "cuStreamWaitEvent", out.stream_wait_event);
  find_symbol(cuda, "cuGraphNodeGetParams", out.graph_node_get_params);
  find_symbol(cuda, "cuDeviceGetAttribute", out.device_get_attribute);
  find_symbol(cuda, "cuMemAlloc_v2", out.mem_alloc);
  find_symbol(cuda, "cuMemFree_v2", out.mem_free);
  find_symbol(cuda, "cuPointerGetAttributes", out.pointer_get_attributes);
  // The handle stays open for the life of the process, like the driver itself.
  return true;
}

bool can_relaunch(const driver_api_t& driver) {
  return driver.ctx_synchronize != nullptr && driver.launch_kernel != nullptr &&
         driver.launch_kernel_ex != nullptr && driver.launch_cooperative != nullptr;
}

}  // namespace kreplay::cuda::inject
