// Relocatable device code, first unit: defines shared_counter, uses two variables that rdc_b.cu defines.
#include "cubin_layout.hpp"

__device__ int shared_counter = 1;
extern __constant__ float shared_gain[8];
extern __device__ config_t shared_config;

// Internal linkage in both units: device linking keeps both, each under a name of its own unit.
static __device__ int unit_state;

__global__ void k_rdc_a(float* out) {
  const int sum = shared_config.steps + shared_counter + unit_state;
  out[threadIdx.x] = shared_gain[threadIdx.x % 8] * static_cast<float>(sum);
  unit_state = 1;
}
