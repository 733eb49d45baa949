// Check (c) of run_inject.sh: run with the injection library (CUDA_INJECTION64_PATH) and tracking on. Every
// __device__ / __constant__ variable of this program (three translation units, -rdc) and of a module
// JIT-loaded with cuModuleLoadData must be listed by the injection with the address and size the runtime
// (cudaGetSymbolAddress / cudaGetSymbolSize) or the driver (cuModuleGetGlobal) gives, without any symbol table
// handed over; and a snapshot of the device must succeed. Prints "RESULT ..." lines and exits non-zero on a
// failed check.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "kreplay/kreplay_inject.h"

struct pair_t {
  double x;
  int n;
};
extern __device__ int a_counter;
extern __device__ float a_table[100];
extern __constant__ int a_const[16];
extern __device__ double b_values[33];
extern __device__ pair_t b_pair;
extern __device__ char b_flag;
extern __constant__ float b_coeffs[7];
template <int N>
extern __device__ int b_scaled[N];
extern template __device__ int b_scaled<12>[12];
__device__ void a_touch(int i);
__device__ void b_touch(int i);

__device__ short main_local[3];

__global__ void touch_all() {
  a_touch(threadIdx.x);
  b_touch(threadIdx.x);
  main_local[threadIdx.x % 3] = 1;
}

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  g_failures += ok ? 0 : 1;
}

struct listed_t {
  uint64_t address;
  size_t size;
  bool is_constant;
  uint32_t module_id;
};

#define CUDA_OK(call)                                                                        \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      std::printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_));                           \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)
#define CU_OK(call)                                                                          \
  do {                                                                                       \
    CUresult r_ = (call);                                                                    \
    if (r_ != CUDA_SUCCESS) {                                                                \
      std::printf("FAIL %s: %d\n", #call, static_cast<int>(r_));                             \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

}  // namespace

int main() {
  touch_all<<<1, 64>>>();
  CUDA_OK(cudaDeviceSynchronize());

  // The JIT-loaded module, in the primary context the runtime made current.
  std::ifstream in(KREPLAY_JIT_PTX);
  std::string ptx((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check(!ptx.empty(), "the JIT module's PTX is readable");
  CUmodule jit = nullptr;
  CU_OK(cuModuleLoadData(&jit, ptx.c_str()));
  CUfunction jit_kernel = nullptr;
  CU_OK(cuModuleGetFunction(&jit_kernel, jit, "jit_kernel"));
  CU_OK(cuLaunchKernel(jit_kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
  CU_OK(cuCtxSynchronize());

  const char* path = std::getenv("CUDA_INJECTION64_PATH");
  void* library = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  check(library != nullptr, "the injection library is in the process");
  if (library == nullptr) {
    return 1;
  }
  auto state = reinterpret_cast<decltype(&kreplay_inject_state)>(dlsym(library, "kreplay_inject_state"));
  auto list =
      reinterpret_cast<decltype(&kreplay_inject_list_variables)>(dlsym(library, "kreplay_inject_list_variables"));
  auto counts =
      reinterpret_cast<decltype(&kreplay_inject_module_counts)>(dlsym(library, "kreplay_inject_module_counts"));
  auto snapshot = reinterpret_cast<decltype(&kreplay_inject_snapshot)>(dlsym(library, "kreplay_inject_snapshot"));
  kreplay_inject_state_t s{};
  check(state(&s) == KREPLAY_STATUS_SUCCESS && s.subscribed, "the injection is subscribed");

  std::map<std::string, listed_t> listed;
  char detail[512] = "";
  kreplay_status_t status = list(
      0,
      [](void* data, const kreplay_inject_variable_t* v) {
        (*static_cast<std::map<std::string, listed_t>*>(data))[v->name] = {v->address, v->size, v->is_constant,
                                                                           v->module_id};
        return true;
      },
      &listed, detail, sizeof(detail));
  check(status == KREPLAY_STATUS_SUCCESS, std::string("every module's variables resolve (") + detail + ")");
  size_t modules = 0, variables = 0;
  counts(0, &modules, &variables);
  std::printf("RESULT vars modules=%zu variables=%zu listed=%zu\n", modules, variables, listed.size());

  // The program's own variables, against the runtime.
  struct expected_t {
    const char* name;  // the cubin's (mangled) name
    const void* symbol;
    bool is_constant;
  };
  const expected_t expected[] = {
      {"a_counter", &a_counter, false},        {"a_table", &a_table, false},   {"a_const", &a_const, true},
      {"b_values", &b_values, false},          {"b_pair", &b_pair, false},     {"b_flag", &b_flag, false},
      {"b_coeffs", &b_coeffs, true},           {"_Z8b_scaledILi12EE", &b_scaled<12>, false},
      {"main_local", &main_local, false},
  };
  int matched = 0;
  for (const expected_t& e : expected) {
    void* address = nullptr;
    size_t size = 0;
    CUDA_OK(cudaGetSymbolAddress(&address, e.symbol));
    CUDA_OK(cudaGetSymbolSize(&size, e.symbol));
    auto found = listed.find(e.name);
    const bool ok = found != listed.end() && found->second.address == reinterpret_cast<uint64_t>(address) &&
                    found->second.size == size && found->second.is_constant == e.is_constant;
    check(ok, std::string("program variable ") + e.name + " (" + std::to_string(size) + " bytes)");
    matched += ok ? 1 : 0;
  }
  // The JIT module's, against the driver.
  for (const char* name : {"jit_hits", "jit_buffer", "jit_params"}) {
    CUdeviceptr address = 0;
    size_t size = 0;
    CU_OK(cuModuleGetGlobal(&address, &size, jit, name));
    auto found = listed.find(name);
    const bool ok = found != listed.end() && found->second.address == address && found->second.size == size;
    check(ok, std::string("JIT module variable ") + name + " (" + std::to_string(size) + " bytes)");
    matched += ok ? 1 : 0;
  }
  std::printf("RESULT vars matched=%d of 12\n", matched);

  kreplay_inject_snapshot_result_t result{};
  snapshot(0, &result);
  check(result.snap_status == KREPLAY_STATUS_SUCCESS && result.restore_status == KREPLAY_STATUS_SUCCESS,
        "snapshot and restore of device 0 (reason " + std::to_string(static_cast<int>(result.reason)) + ": " +
            result.detail + ")");
  std::printf("RESULT vars snapshot=%d regions=%zu module_variables=%zu bytes=%zu\n",
              static_cast<int>(result.snap_status), result.regions, result.module_variables, result.bytes);

  CU_OK(cuModuleUnload(jit));
  size_t after = 0;
  counts(0, &after, &variables);
  check(after + 1 == modules, "cuModuleUnload removes the JIT module");
  std::printf("RESULT vars failures=%d\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
