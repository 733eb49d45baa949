// What every consumer of a CUPTI driver callback reads from it: the call's parameters and whether it succeeded.
#ifndef KREPLAY_CUDA_INJECT_CALLBACK_DATA_HPP
#define KREPLAY_CUDA_INJECT_CALLBACK_DATA_HPP

#include <cuda.h>
#include <cupti.h>

namespace kreplay::cuda::inject {

// The call's return value; meaningful at the callback's exit only (CUDA_ERROR_UNKNOWN when CUPTI gave none).
inline CUresult result_of(const CUpti_CallbackData& data) {
  return data.functionReturnValue != nullptr ? *static_cast<const CUresult*>(data.functionReturnValue)
                                             : CUDA_ERROR_UNKNOWN;
}

inline bool succeeded(const CUpti_CallbackData& data) {
  return result_of(data) == CUDA_SUCCESS;
}

// The call's parameter struct: P is the <function>_params struct of generated_cuda_meta.h (cupti.h) for the callback id.
template <typename P>
const P& params(const CUpti_CallbackData& data) {
  return *static_cast<const P*>(data.functionParams);
}

// The callbacks of the kernel launches that take a function (graph launches are not among them).
inline constexpr CUpti_CallbackId kernel_launch_ids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,         CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
};

// The function a kernel launch's callback names, as the program passed it (a CUfunction, or a CUkernel passed
// as one). cuLaunchKernel, the cooperative launch and their _ptsz forms have it first, cuLaunchKernelEx second.
inline CUfunction launched_function(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  const bool ex = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz;
  return ex ? params<cuLaunchKernelEx_params>(data).f : params<cuLaunchKernel_params>(data).f;
}

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_CALLBACK_DATA_HPP
