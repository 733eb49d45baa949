// The driver API functions the injection calls, resolved with dlsym from the libcuda the process already loaded
// (never linked: the library must not pull a second driver or runtime into the host): the tracker's module
// resolution, and the replay's launches, synchronisation, events and function queries. Tests fill the table
// with fakes. Every entry may be null (an older driver): what needs it then fails.
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

  // The replay's (kreplay-cuda-replay): the four below are what can_relaunch asks for.
  CUresult (*ctx_synchronize)() = nullptr;                            // cuCtxSynchronize
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void**, void**) = nullptr;      // cuLaunchKernel
  CUresult (*launch_kernel_ex)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;  // cuLaunchKernelEx
  CUresult (*launch_cooperative)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 CUstream, void**) = nullptr;         // cuLaunchCooperativeKernel
  CUresult (*func_get_param_info)(CUfunction, size_t, size_t*, size_t*) = nullptr;  // cuFuncGetParamInfo
  CUresult (*func_is_loaded)(CUfunctionLoadingState*, CUfunction) = nullptr;        // cuFuncIsLoaded
  CUresult (*func_load)(CUfunction) = nullptr;                        // cuFuncLoad
  CUresult (*event_create)(CUevent*, unsigned) = nullptr;             // cuEventCreate
  CUresult (*event_record)(CUevent, CUstream) = nullptr;              // cuEventRecord
  CUresult (*event_elapsed)(float*, CUevent, CUevent) = nullptr;      // cuEventElapsedTime_v2, else cuEventElapsedTime
  CUresult (*event_destroy)(CUevent) = nullptr;                       // cuEventDestroy_v2
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;  // cuStreamIsCapturing

  // Graph replay (--graph-profiling graph): relaunching an executable graph, and reading a graph's nodes when it
  // is instantiated (replay/graphs.hpp).
  CUresult (*graph_launch)(CUgraphExec, CUstream) = nullptr;                      // cuGraphLaunch
  CUresult (*graph_get_nodes)(CUgraph, CUgraphNode*, size_t*) = nullptr;         // cuGraphGetNodes
  CUresult (*graph_node_get_type)(CUgraphNode, CUgraphNodeType*) = nullptr;      // cuGraphNodeGetType
  // cuGraphKernelNodeGetParams_v2
  CUresult (*graph_kernel_node_get_params)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*) = nullptr;
  CUresult (*graph_child_get_graph)(CUgraphNode, CUgraph*) = nullptr;            // cuGraphChildGraphNodeGetGraph
  CUresult (*graph_memcpy_node_get_params)(CUgraphNode, CUDA_MEMCPY3D*) = nullptr;  // cuGraphMemcpyNodeGetParams
  CUresult (*graph_memset_node_get_params)(CUgraphNode, CUDA_MEMSET_NODE_PARAMS*) = nullptr;  // ...MemsetNode...
  // cuGraphMemAllocNodeGetParams, cuGraphMemFreeNodeGetParams
  CUresult (*graph_mem_alloc_node_get_params)(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS*) = nullptr;
  CUresult (*graph_mem_free_node_get_params)(CUgraphNode, CUdeviceptr*) = nullptr;

  // Node mode (--graph-profiling node): the edges, the rest of a node's parameters, and running the nodes that are
  // not kernels on the launch's stream.
  // cuGraphGetEdges_v2 (CUDA 12.3; the edge data may be null)
  CUresult (*graph_get_edges)(CUgraph, CUgraphNode*, CUgraphNode*, CUgraphEdgeData*, size_t*) = nullptr;
  // cuGraphKernelNodeGetAttribute
  CUresult (*graph_kernel_node_get_attribute)(CUgraphNode, CUkernelNodeAttrID, CUkernelNodeAttrValue*) = nullptr;
  CUresult (*graph_event_record_node_get_event)(CUgraphNode, CUevent*) = nullptr;  // cuGraphEventRecordNodeGetEvent
  CUresult (*graph_event_wait_node_get_event)(CUgraphNode, CUevent*) = nullptr;    // cuGraphEventWaitNodeGetEvent
  CUresult (*memcpy_3d_async)(const CUDA_MEMCPY3D*, CUstream) = nullptr;           // cuMemcpy3DAsync_v2
  CUresult (*memset_d2d8_async)(CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream) = nullptr;
  CUresult (*memset_d2d16_async)(CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream) = nullptr;
  CUresult (*memset_d2d32_async)(CUdeviceptr, size_t, unsigned int, size_t, size_t, CUstream) = nullptr;
  CUresult (*stream_wait_event)(CUstream, CUevent, unsigned) = nullptr;            // cuStreamWaitEvent
  CUresult (*graph_node_get_params)(CUgraphNode, CUgraphNodeParams*) = nullptr;    // cuGraphNodeGetParams (13.1)

  // --cache-control all: the L2's size and a buffer to flush it with (replay/cache_flush.hpp).
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;  // cuDeviceGetAttribute
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;                           // cuMemAlloc_v2
  CUresult (*mem_free)(CUdeviceptr) = nullptr;                                     // cuMemFree_v2
  // cuPointerGetAttributes: what the driver says of memory kreplay does not track (a reason's text only)
  CUresult (*pointer_get_attributes)(unsigned, CUpointer_attribute*, void**, CUdeviceptr) = nullptr;
};

// Resolves the table from the libcuda.so.1 already in the process (RTLD_NOLOAD). False when there is none.
bool resolve_driver(driver_api_t& out);

// Whether the table has what a replay cannot do without: synchronising and the three launch forms.
bool can_relaunch(const driver_api_t& driver);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_DRIVER_HPP
