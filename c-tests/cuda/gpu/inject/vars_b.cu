// Translation unit B of kreplay_inject_vars: a struct, a one-byte flag, a constant bank array, a template's.
struct pair_t {
  double x;
  int n;
};
__device__ double b_values[33];
__device__ pair_t b_pair = {1.5, 2};
__device__ char b_flag;
__constant__ float b_coeffs[7] = {0.5f, 0.25f};
template <int N>
__device__ int b_scaled[N];
template __device__ int b_scaled<12>[12];

__device__ void b_touch(int i) {
  b_values[i % 33] += b_coeffs[i % 7] + b_pair.x;
  b_flag = 1;
  b_scaled<12>[i % 12] += b_pair.n;
}
