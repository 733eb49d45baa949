// Program 4 of run_replay.sh: __device__ globals that its kernels mutate in place, __constant__ globals the
// host rewrites between kernels, device buffers updated in place, and one module JIT-compiled from PTX at run
// time (cuModuleLoadData) whose kernel, launched through the driver API, mutates that module's own globals.
// Deterministic (integer arithmetic only); prints "CHECKSUM <hex>" over every byte of its final state.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "program_check.hpp"

constexpr int kStateWords = 1 << 20;
__device__ unsigned long long g_sum;
__device__ unsigned int g_hist[256];
__device__ unsigned int g_state[kStateWords];
__constant__ unsigned int c_mul[4];

// Every write is either the thread's own element or an atomic whose result does not depend on the order
// (integer add, xor), so a pass is deterministic; and none is idempotent, so a pass that starts from the
// previous pass's memory gives other values.
__global__ void step(unsigned int* data, int n, int round) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) {
    return;
  }
  const unsigned int v = data[i] * c_mul[round & 3] + static_cast<unsigned>(round);
  data[i] = v;                                        // in place
  atomicXor(&g_state[i % kStateWords], v >> 3);       // a __device__ global, read-modify-written
  atomicAdd(&g_sum, static_cast<unsigned long long>(v & 0xffff));
  atomicAdd(&g_hist[v & 255], 1u);
}

// Reads the global state the previous kernel left (never written here).
__global__ void fold(unsigned int* data, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    data[i] += g_state[i % kStateWords] ^ g_hist[i & 255];
  }
}

uint64_t fnv(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

int main() {
  constexpr int n = 16 << 20;  // 64 MiB of data
  unsigned int* data = nullptr;
  CHECK(cudaMalloc(&data, n * sizeof(unsigned int)));
  std::vector<unsigned int> host(n);
  for (int i = 0; i < n; ++i) {
    host[i] = static_cast<unsigned int>(i * 2654435761u);
  }
  CHECK(cudaMemcpy(data, host.data(), n * sizeof(unsigned int), cudaMemcpyHostToDevice));

  // The JIT module (PTX from jit.cu, compiled by the driver now).
  std::ifstream in(KREPLAY_REPLAY_JIT_PTX);
  std::string ptx((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CUmodule module = nullptr;
  CHECK(cuModuleLoadData(&module, ptx.c_str()));
  CUfunction jit = nullptr;
  CHECK(cuModuleGetFunction(&jit, module, "jit_mix"));
  CUdeviceptr jit_counter = 0;
  CUdeviceptr jit_table = 0;
  size_t bytes = 0;
  CHECK(cuModuleGetGlobal(&jit_counter, &bytes, module, "jit_counter"));
  CHECK(cuModuleGetGlobal(&jit_table, &bytes, module, "jit_table"));

  for (int round = 0; round < 12; ++round) {
    const unsigned int mul[4] = {3u + round, 5u, 7u + 2u * round, 11u};
    CHECK(cudaMemcpyToSymbol(c_mul, mul, sizeof(mul)));  // __constant__, rewritten between kernels
    step<<<(n + 255) / 256, 256>>>(data, n, round);
    CHECK(cudaGetLastError());
    fold<<<(n + 255) / 256, 256>>>(data, n);
    CHECK(cudaGetLastError());
    int words = n;
    void* args[] = {&data, &words};
    CHECK(cuLaunchKernel(jit, 1024, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
  }
  CHECK(cudaDeviceSynchronize());

  uint64_t h = 1469598103934665603ull;
  CHECK(cudaMemcpy(host.data(), data, n * sizeof(unsigned int), cudaMemcpyDeviceToHost));
  h = fnv(h, host.data(), n * sizeof(unsigned int));
  unsigned long long sum = 0;
  CHECK(cudaMemcpyFromSymbol(&sum, g_sum, sizeof(sum)));
  h = fnv(h, &sum, sizeof(sum));
  std::vector<unsigned int> hist(256);
  CHECK(cudaMemcpyFromSymbol(hist.data(), g_hist, 256 * sizeof(unsigned int)));
  h = fnv(h, hist.data(), 256 * sizeof(unsigned int));
  std::vector<unsigned int> state(kStateWords);
  CHECK(cudaMemcpyFromSymbol(state.data(), g_state, kStateWords * sizeof(unsigned int)));
  h = fnv(h, state.data(), kStateWords * sizeof(unsigned int));
  unsigned long long counter = 0;
  std::vector<unsigned int> table(4096);
  CHECK(cuMemcpyDtoH(&counter, jit_counter, sizeof(counter)));
  CHECK(cuMemcpyDtoH(table.data(), jit_table, table.size() * sizeof(unsigned int)));
  h = fnv(h, &counter, sizeof(counter));
  h = fnv(h, table.data(), table.size() * sizeof(unsigned int));
  std::printf("RESULT globals sum=%llu jit_counter=%llu\n", sum, counter);
  std::printf("CHECKSUM %016llx\n", static_cast<unsigned long long>(h));
  CHECK(cuModuleUnload(module));
  CHECK(cudaFree(data));
  return 0;
}
