// Error checks shared by the CUDA test and benchmark: every runtime call's result is checked, and a failure
// ends the process with a message naming the call, since nothing measured or asserted after it can be trusted.
#ifndef KREPLAY_CUDA_CHECK_HPP
#define KREPLAY_CUDA_CHECK_HPP

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime_api.h>

#include "kreplay.h"

#define CUDA_CHECK(expr)                                                                                   \
  do {                                                                                                     \
    cudaError_t cuda_check_error_ = (expr);                                                                \
    if (cuda_check_error_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #expr,                       \
                   cudaGetErrorName(cuda_check_error_), cudaGetErrorString(cuda_check_error_));            \
      std::exit(2);                                                                                        \
    }                                                                                                      \
  } while (0)

// After a kernel launch: launch-configuration errors show up here, faults at the next synchronisation.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define KREPLAY_CHECK(expr)                                                                                \
  do {                                                                                                     \
    kreplay_status_t kreplay_check_status_ = (expr);                                                       \
    if (kreplay_check_status_ != KREPLAY_STATUS_SUCCESS) {                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,                           \
                   kreplay_status_string(kreplay_check_status_));                                          \
      std::exit(2);                                                                                        \
    }                                                                                                      \
  } while (0)

#endif  // KREPLAY_CUDA_CHECK_HPP
