// The module kreplay_inject_vars loads at run time with cuModuleLoadData from PTX (the driver JIT-compiles it).
__device__ unsigned long long jit_hits;
__device__ float jit_buffer[257];
__constant__ int jit_params[5] = {7, 7, 7, 7, 7};

extern "C" __global__ void jit_kernel() {
  atomicAdd(&jit_hits, 1ull);
  jit_buffer[threadIdx.x % 257] = static_cast<float>(jit_params[threadIdx.x % 5]);
}
