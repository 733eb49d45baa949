// __device__ variables of every shape: scalars, arrays and structs, zero-initialised (.nv.global) and
// initialised (.nv.global.init), in a namespace and with internal linkage.
#include "cubin_layout.hpp"

__device__ int g_counter;
__device__ int g_seed = 42;
__device__ double g_table[256];
__device__ float g_weights[7] = {1, 2, 3, 4, 5, 6, 7};
__device__ particle_t g_particles[10];
__device__ config_t g_config = {1.5, 3, "config"};
namespace physics {
__device__ unsigned long long step_count;
}
static __device__ int g_hidden;

// Kept out of line: an STT_FUNC without the entry bit, which is not one of the module's kernels.
__device__ __noinline__ double g_sum_weights(int i) { return g_weights[i % 7] + g_weights[(i + 1) % 7]; }

__global__ void k_globals(double* out) {
  __shared__ double scratch[32];  // per-block storage: .nv.shared, never a module variable
  scratch[threadIdx.x % 32] = g_table[threadIdx.x % 256];
  __syncthreads();
  out[threadIdx.x] = scratch[0] + g_counter + g_seed + g_weights[threadIdx.x % 7] +
                     g_particles[threadIdx.x % 10].velocity[1] + g_config.scale +
                     static_cast<double>(physics::step_count) + g_hidden + g_sum_weights(threadIdx.x);
  g_hidden = static_cast<int>(threadIdx.x);
}
