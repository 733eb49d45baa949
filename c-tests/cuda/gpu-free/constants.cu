// __constant__ variables: scalars, arrays and structs, with and without an initialiser.
#include "cubin_layout.hpp"

__constant__ float c_scale;
__constant__ int c_lut[64];
__constant__ config_t c_config;
__constant__ particle_t c_origin = {{1, 2, 3}, {0, 0, 0}, 7};

__global__ void k_constants(float* out) {
  out[threadIdx.x] = c_scale * static_cast<float>(c_lut[threadIdx.x % 64]) +
                     static_cast<float>(c_config.steps) + c_origin.position[threadIdx.x % 3];
}
