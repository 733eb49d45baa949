// The CUDA adapter's public functions, as the injection uses them (kreplay/cuda.hpp).
#ifndef KREPLAY_CUDA_INJECT_ADAPTER_HPP
#define KREPLAY_CUDA_INJECT_ADAPTER_HPP

#include "kreplay/cuda.hpp"

namespace kreplay::cuda::inject {
namespace adapter = ::kreplay::cuda;
}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_ADAPTER_HPP
