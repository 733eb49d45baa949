// The few CUDA driver calls the benchmark and the CUPTI probe need, taken through the runtime's entry-point
// query so that nothing links against libcuda directly (the runtime finds the driver the same way).
#ifndef KREPLAY_CUDA_DRIVER_API_HPP
#define KREPLAY_CUDA_DRIVER_API_HPP

#include <cstdio>
#include <cstdlib>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

namespace driver_api {

template <typename F>
F entry(const char* symbol, unsigned version) {
  void* raw = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &raw, version, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || raw == nullptr) {
    std::fprintf(stderr, "driver entry point %s (version %u) not found\n", symbol, version);
    std::exit(2);
  }
  return reinterpret_cast<F>(raw);
}

inline void check(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s failed: CUresult %d\n", what, static_cast<int>(result));
    std::exit(2);
  }
}

inline CUcontext current_context() {
  static const auto get = entry<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent", 4000);
  CUcontext ctx = nullptr;
  check(get(&ctx), "cuCtxGetCurrent");
  return ctx;
}

inline void set_current_context(CUcontext ctx) {
  static const auto set = entry<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent", 4000);
  check(set(ctx), "cuCtxSetCurrent");
}

// A context of its own on `device` (not the primary one), made current for the calling thread; the runtime
// then works in it until another context is made current.
inline CUcontext create_context(int device) {
  static const auto create = entry<PFN_cuCtxCreate_v12050>("cuCtxCreate", 12050);
  CUcontext ctx = nullptr;
  check(create(&ctx, nullptr, 0, static_cast<CUdevice>(device)), "cuCtxCreate");
  return ctx;
}

inline void destroy_context(CUcontext ctx) {
  static const auto destroy = entry<PFN_cuCtxDestroy_v4000>("cuCtxDestroy", 4000);
  check(destroy(ctx), "cuCtxDestroy");
}

}  // namespace driver_api

#endif  // KREPLAY_CUDA_DRIVER_API_HPP
