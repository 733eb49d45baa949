// Issue 28's program for run_replay.sh: a device reset twice mid-run and a module loaded, unloaded and loaded
// again, with kernels that mutate the globals of both kinds (the program's own __device__ globals and the JIT
// module's) and device buffers in place. Three phases, each: allocate, run, load the JIT module twice side by
// side (two instances of one image, each with its own globals), unload one, load it again, run, fold the
// results into the checksum, then cudaDeviceReset() with the allocations and modules still live (the reset
// destroys them; the next phase's allocations typically get the same addresses back). Deterministic (integer
// arithmetic, order-independent atomics); prints "CHECKSUM <hex>" over everything it read back.
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

__device__ unsigned long long g_total;
__device__ unsigned int g_mix[4096];

// Not idempotent: a pass that starts from the previous pass's memory gives other values.
__global__ void churn(unsigned int* data, int n, unsigned int salt) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) {
    return;
  }
  const unsigned int v = data[i] * 2654435761u + salt;
  data[i] = v;
  atomicAdd(&g_total, static_cast<unsigned long long>(v & 0xfff));
  atomicXor(&g_mix[i & 4095], v >> 5);
}

uint64_t fnv(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

struct jit_module {
  CUmodule module = nullptr;
  CUfunction mix = nullptr;
  CUdeviceptr counter = 0;
  CUdeviceptr table = 0;

  void load(const std::string& ptx) {
    size_t bytes = 0;
    CHECK(cuModuleLoadData(&module, ptx.c_str()));
    CHECK(cuModuleGetFunction(&mix, module, "jit_mix"));
    CHECK(cuModuleGetGlobal(&counter, &bytes, module, "jit_counter"));
    CHECK(cuModuleGetGlobal(&table, &bytes, module, "jit_table"));
  }
  void run(CUdeviceptr data, int words) {
    void* args[] = {&data, &words};
    CHECK(cuLaunchKernel(mix, 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
  }
  uint64_t fold(uint64_t h) {
    unsigned long long value = 0;
    std::vector<unsigned int> words(4096);
    CHECK(cuMemcpyDtoH(&value, counter, sizeof(value)));
    CHECK(cuMemcpyDtoH(words.data(), table, words.size() * sizeof(unsigned int)));
    h = fnv(h, &value, sizeof(value));
    return fnv(h, words.data(), words.size() * sizeof(unsigned int));
  }
};

uint64_t phase(int index, const std::string& ptx, uint64_t h) {
  constexpr int n = 4 << 20;  // 16 MiB
  unsigned int* data = nullptr;
  CHECK(cudaMalloc(&data, n * sizeof(unsigned int)));
  std::printf("PHASE %d data=%p\n", index, static_cast<void*>(data));
  std::vector<unsigned int> host(n);
  for (int i = 0; i < n; ++i) {
    host[i] = static_cast<unsigned int>(i) * 40503u + static_cast<unsigned int>(index);
  }
  CHECK(cudaMemcpy(data, host.data(), n * sizeof(unsigned int), cudaMemcpyHostToDevice));
  for (int round = 0; round < 4; ++round) {
    churn<<<(n + 255) / 256, 256>>>(data, n, static_cast<unsigned int>(round + 16 * index));
    CHECK(cudaGetLastError());
  }

  // Two instances of one image side by side, each with its own globals; the first unloaded and loaded again.
  jit_module a;
  jit_module b;
  a.load(ptx);
  b.load(ptx);
  const auto words = reinterpret_cast<CUdeviceptr>(data);
  a.run(words, n);
  b.run(words, n);
  CHECK(cudaDeviceSynchronize());
  h = a.fold(h);
  CHECK(cuModuleUnload(a.module));
  a.load(ptx);
  a.run(words, n);
  b.run(words, n);
  churn<<<(n + 255) / 256, 256>>>(data, n, 99u);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  h = b.fold(a.fold(h));

  CHECK(cudaMemcpy(host.data(), data, n * sizeof(unsigned int), cudaMemcpyDeviceToHost));
  h = fnv(h, host.data(), n * sizeof(unsigned int));
  unsigned long long total = 0;
  std::vector<unsigned int> mix(4096);
  CHECK(cudaMemcpyFromSymbol(&total, g_total, sizeof(total)));
  CHECK(cudaMemcpyFromSymbol(mix.data(), g_mix, mix.size() * sizeof(unsigned int)));
  h = fnv(fnv(h, &total, sizeof(total)), mix.data(), mix.size() * sizeof(unsigned int));
  std::printf("PHASE %d total=%llu\n", index, total);
  return h;  // data, a and b stay live: the reset destroys them
}

int main() {
  std::ifstream in(KREPLAY_REPLAY_JIT_PTX);
  const std::string ptx((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (ptx.empty()) {
    std::fprintf(stderr, "no PTX at %s\n", KREPLAY_REPLAY_JIT_PTX);
    return 1;
  }
  uint64_t h = 1469598103934665603ull;
  for (int index = 0; index < 3; ++index) {
    h = phase(index, ptx, h);
    if (index < 2) {
      CHECK(cudaDeviceReset());
    }
  }
  std::printf("CHECKSUM %016llx\n", static_cast<unsigned long long>(h));
  return 0;
}
