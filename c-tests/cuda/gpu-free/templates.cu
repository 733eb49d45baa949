// Variable templates and kernel templates: each instance is its own (mangled) symbol.
#include "cubin_layout.hpp"

template <typename T>
__device__ T t_buffer[16];
template <typename T>
__constant__ T t_coeff[4];
__device__ vec_t<5> g_vec5;

template <typename T>
__global__ void k_fill(T* out) {
  out[threadIdx.x] = t_buffer<T>[threadIdx.x % 16] + t_coeff<T>[0] + static_cast<T>(g_vec5.v[0]);
}

template __global__ void k_fill<float>(float*);
template __global__ void k_fill<double>(double*);
template __global__ void k_fill<int>(int*);
