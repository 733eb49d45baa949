// The CUDA adapter's public functions, as the injection uses them. The adapter's namespace is being renamed
// from kreplay_cuda to kreplay::cuda; this alias is the one line that follows the rename.
#ifndef KREPLAY_CUDA_INJECT_ADAPTER_HPP
#define KREPLAY_CUDA_INJECT_ADAPTER_HPP

#include "kreplay/cuda.hpp"

namespace kreplay::cuda::inject {
namespace adapter = ::kreplay_cuda;
}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_ADAPTER_HPP
