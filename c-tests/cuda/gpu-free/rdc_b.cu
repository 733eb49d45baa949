// Relocatable device code, second unit: defines what rdc_a.cu declares extern, uses its shared_counter.
#include "cubin_layout.hpp"

extern __device__ int shared_counter;
__constant__ float shared_gain[8];
__device__ config_t shared_config;
__device__ int b_only[3];

// Internal linkage in both units: device linking keeps both, each under a name of its own unit.
static __device__ int unit_state;

__global__ void k_rdc_b(int* out) {
  out[threadIdx.x] = shared_counter + b_only[threadIdx.x % 3] + unit_state;
  unit_state = 2;
}
