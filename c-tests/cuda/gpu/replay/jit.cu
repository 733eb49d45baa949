// The module replay_globals JIT-loads from PTX: its kernel mutates the module's own globals and the data.
__device__ unsigned long long jit_counter;
__device__ unsigned int jit_table[4096];

extern "C" __global__ void jit_mix(unsigned int* data, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const unsigned int v = data[i] ^ (data[i] >> 7);
    data[i] = v + 1u;
    atomicAdd(&jit_table[v & 4095], 1u);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    jit_counter = jit_counter * 31ull + 7ull;  // a read-modify-write of a module global: not idempotent
  }
}
