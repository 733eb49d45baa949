// One of KREPLAY_MANY_MODULES modules, compiled with -DKREPLAY_MODULE=<i>: module i defines
// module_<i>_bytes ((i + 1) * 16 bytes), module_<i>_gain ((i + 1) ints, constant) and module_<i>_kernel.
#include "cubin_layout.hpp"

#define KREPLAY_JOIN3(a, b, c) a##b##c
#define KREPLAY_NAME(i, suffix) KREPLAY_JOIN3(module_, i, suffix)

__device__ char KREPLAY_NAME(KREPLAY_MODULE, _bytes)[(KREPLAY_MODULE + 1) * 16];
__constant__ int KREPLAY_NAME(KREPLAY_MODULE, _gain)[KREPLAY_MODULE + 1];

extern "C" __global__ void KREPLAY_NAME(KREPLAY_MODULE, _kernel)(int* out) {
  out[threadIdx.x] = KREPLAY_NAME(KREPLAY_MODULE, _bytes)[threadIdx.x % 16] + KREPLAY_NAME(KREPLAY_MODULE, _gain)[0];
}
