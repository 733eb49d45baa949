#include "launch.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "callback_data.hpp"
#include "guard.hpp"

namespace kreplay::cuda::inject {
namespace {

// More than a kernel can take (4 KiB of parameters, at least a byte each, as of CUDA 12.1: 32 KiB): the query
// loop's bound, whatever the driver answers.
constexpr size_t max_parameters = 32768;

// The stream a replayed pass uses: the per-thread forms name the per-thread default stream with 0.
CUstream stream_for(CUstream stream, bool per_thread) {
  return stream == nullptr && per_thread ? CU_STREAM_PER_THREAD : stream;
}

bool is_per_thread(CUpti_CallbackId cbid) {
  return cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz;
}

// cuLaunchKernel, the cooperative launch and their _ptsz forms: the configuration as separate parameters.
template <typename P>
void decode_dims(const P& q, bool per_thread, launch_t& out) {
  out.function = q.f;
  out.grid[0] = q.gridDimX, out.grid[1] = q.gridDimY, out.grid[2] = q.gridDimZ;
  out.block[0] = q.blockDimX, out.block[1] = q.blockDimY, out.block[2] = q.blockDimZ;
  out.shared_bytes = q.sharedMemBytes;
  out.stream = stream_for(q.hStream, per_thread);
  out.kernel_params = q.kernelParams;
}

// cuLaunchKernelEx and its _ptsz form (their parameter structs are laid out alike): the configuration as a struct,
// copied with its attributes.
void decode_ex(const cuLaunchKernelEx_params& q, bool per_thread, launch_t& out) {
  out.kind = launch_kind::kernel_ex;
  out.function = q.f;
  out.kernel_params = q.kernelParams;
  out.extra = q.extra;
  if (q.config == nullptr) {
    return;
  }
  const CUlaunchConfig& c = *q.config;
  out.config = c;
  out.attributes.assign(c.attrs, c.attrs + (c.attrs != nullptr ? c.numAttrs : 0));
  out.config.attrs = out.attributes.empty() ? nullptr : out.attributes.data();
  out.config.hStream = stream_for(c.hStream, per_thread);
  out.grid[0] = c.gridDimX, out.grid[1] = c.gridDimY, out.grid[2] = c.gridDimZ;
  out.block[0] = c.blockDimX, out.block[1] = c.blockDimY, out.block[2] = c.blockDimZ;
  out.stream = out.config.hStream;
}

void copy_laid_out(launch_t& launch, const driver_api_t& driver) {
  std::vector<std::pair<size_t, size_t>> layout;  // (offset, size) of each parameter
  for (size_t i = 0; i < max_parameters; ++i) {
    size_t offset = 0;
    size_t size = 0;
    if (driver.func_get_param_info(launch.loaded, i, &offset, &size) != CUDA_SUCCESS) {
      break;
    }
    layout.emplace_back(offset, size);
  }
  size_t total = 0;
  for (const auto& [offset, size] : layout) {
    total = std::max(total, offset + size);
  }
  launch.argument_bytes.assign(total, 0);
  launch.argument_pointers.resize(layout.size());
  for (size_t i = 0; i < layout.size(); ++i) {
    std::memcpy(launch.argument_bytes.data() + layout[i].first, launch.kernel_params[i], layout[i].second);
    launch.argument_pointers[i] = launch.argument_bytes.data() + layout[i].first;
  }
}

// CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE: one buffer holds every argument.
void copy_buffer(launch_t& launch) {
  const void* buffer = nullptr;
  for (size_t i = 0; launch.extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (launch.extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = launch.extra[i + 1];
    } else if (launch.extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      launch.extra_size = *static_cast<const size_t*>(launch.extra[i + 1]);
    }
  }
  if (buffer == nullptr) {
    return;
  }
  launch.argument_bytes.assign(static_cast<const unsigned char*>(buffer),
                               static_cast<const unsigned char*>(buffer) + launch.extra_size);
  launch.extra_copy = {CU_LAUNCH_PARAM_BUFFER_POINTER, launch.argument_bytes.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                       &launch.extra_size, CU_LAUNCH_PARAM_END};
}

}  // namespace

void decode_launch(CUpti_CallbackId cbid, const CUpti_CallbackData& data, launch_t& out) {
  const bool per_thread = is_per_thread(cbid);
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
      decode_dims(params<cuLaunchKernel_params>(data), per_thread, out);
      out.extra = params<cuLaunchKernel_params>(data).extra;
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
      decode_dims(params<cuLaunchKernel_ptsz_params>(data), per_thread, out);
      out.extra = params<cuLaunchKernel_ptsz_params>(data).extra;
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
      out.kind = launch_kind::cooperative;
      decode_dims(params<cuLaunchCooperativeKernel_params>(data), per_thread, out);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
      out.kind = launch_kind::cooperative;
      decode_dims(params<cuLaunchCooperativeKernel_ptsz_params>(data), per_thread, out);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
      decode_ex(params<cuLaunchKernelEx_params>(data), per_thread, out);
      return;
    default:
      out.kind = launch_kind::graph;
      out.graph = params<cuGraphLaunch_params>(data).hGraph;
      out.stream = stream_for(params<cuGraphLaunch_params>(data).hStream, per_thread);
      return;
  }
}

const char* resolve_function(launch_t& launch, const driver_api_t& driver) {
  const char* name = nullptr;
  const auto kernel = reinterpret_cast<CUkernel>(launch.function);
  if (driver.func_get_name != nullptr && driver.func_get_name(&name, launch.function) == CUDA_SUCCESS) {
    launch.loaded = launch.function;
  } else if (driver.kernel_get_name != nullptr && driver.kernel_get_name(&name, kernel) == CUDA_SUCCESS &&
             driver.kernel_get_function != nullptr) {
    if (driver.kernel_get_function(&launch.loaded, kernel) != CUDA_SUCCESS) {
      launch.loaded = nullptr;
    }
  }
  CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_LOADED;
  if (launch.loaded != nullptr && driver.func_is_loaded != nullptr && driver.func_load != nullptr &&
      driver.func_is_loaded(&state, launch.loaded) == CUDA_SUCCESS && state != CU_FUNCTION_LOADING_STATE_LOADED) {
    (void)driver.func_load(launch.loaded);
  }
  return name;
}

bool stream_capturing(const launch_t& launch, const driver_api_t& driver) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return driver.stream_is_capturing != nullptr &&
         (driver.stream_is_capturing(launch.stream, &status) != CUDA_SUCCESS ||
          status != CU_STREAM_CAPTURE_STATUS_NONE);
}

void copy_arguments(launch_t& launch, const driver_api_t& driver) {
  if (launch.kernel_params != nullptr && driver.func_get_param_info != nullptr) {
    copy_laid_out(launch, driver);
  } else if (launch.extra != nullptr) {
    copy_buffer(launch);
  }
}

unsigned dynamic_shared_bytes(const launch_t& launch) {
  return launch.kind == launch_kind::kernel_ex ? launch.config.sharedMemBytes : launch.shared_bytes;
}

CUresult relaunch(const launch_t& l, const driver_api_t& driver) {
  void** arguments = l.argument_pointers.empty() ? l.kernel_params : const_cast<void**>(l.argument_pointers.data());
  void** extra = l.argument_pointers.empty()
                     ? (l.extra_copy.empty() ? l.extra : const_cast<void**>(l.extra_copy.data()))
                     : nullptr;
  switch (l.kind) {
    case launch_kind::kernel:
      return driver.launch_kernel(l.function, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2],
                                  l.shared_bytes, l.stream, arguments, extra);
    case launch_kind::kernel_ex:
      return driver.launch_kernel_ex(&l.config, l.function, arguments, extra);
    case launch_kind::cooperative:
      return driver.launch_cooperative(l.function, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
                                       l.block[2], l.shared_bytes, l.stream, arguments);
    case launch_kind::graph:
      return driver.graph_launch != nullptr ? driver.graph_launch(l.graph, l.stream) : CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

// ---- kernel_timer ---------------------------------------------------------------------------------------------
kernel_timer::~kernel_timer() {
  own_call_scope own;
  for (CUevent event : {start_, end_}) {
    if (event != nullptr && driver_.event_destroy != nullptr) {
      (void)driver_.event_destroy(event);
    }
  }
}

void kernel_timer::create() {
  if (driver_.event_create == nullptr) {
    return;
  }
  if (driver_.event_create(&start_, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    start_ = nullptr;
    return;
  }
  if (driver_.event_create(&end_, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    end_ = nullptr;
    return;
  }
  ready_ = driver_.event_record != nullptr && driver_.event_elapsed != nullptr;
}

void kernel_timer::start(CUstream stream) {
  if (ready_) {
    (void)driver_.event_record(start_, stream);
  }
}

void kernel_timer::stop(CUstream stream) {
  if (ready_) {
    (void)driver_.event_record(end_, stream);
  }
}

float kernel_timer::elapsed_ms() const {
  float ms = 0;
  if (!ready_ || driver_.event_elapsed(&ms, start_, end_) != CUDA_SUCCESS) {
    return 0;
  }
  return ms;
}

}  // namespace kreplay::cuda::inject
