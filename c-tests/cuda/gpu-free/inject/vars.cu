// Module-scope variables of every kind the cubin reader knows, for the injection's GPU-free tests (compiled to a
// cubin at build time; never run). Compiled twice: as is, and with KREPLAY_MORE_VARIABLES, which gives a cubin
// with the same kernel and a set of variables that includes the first one's.
__device__ int counter;                                  // .nv.global
__device__ float table[64] = {1.0f, 2.0f, 3.0f};         // .nv.global.init
__constant__ double coeffs[4] = {1.0, 2.0, 3.0, 4.0};    // .nv.constant
#ifdef KREPLAY_MORE_VARIABLES
__device__ int more[8];
#endif

extern "C" __global__ void bump(float* x) {
  atomicAdd(&counter, 1);
  x[threadIdx.x] = table[threadIdx.x % 64] * static_cast<float>(coeffs[threadIdx.x % 4]);
}
