// Translation unit A of kreplay_inject_vars: zero-initialised, initialised and constant variables.
__device__ int a_counter;
__device__ float a_table[100] = {1.0f, 2.0f};
__constant__ int a_const[16] = {3, 1, 4, 1, 5, 9, 2, 6};

__device__ void a_touch(int i) {
  atomicAdd(&a_counter, a_const[i % 16]);
  a_table[i % 100] += 1.0f;
}
