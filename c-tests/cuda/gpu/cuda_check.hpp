// Error checks shared by the CUDA test and benchmark: every runtime call's result is checked, and a failure
// ends the process with a message naming the call, since nothing measured or asserted after it can be trusted.
#ifndef KREPLAY_CUDA_CHECK_HPP
#define KREPLAY_CUDA_CHECK_HPP

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

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

// Held while a line of output is written, so the threads (one per GPU) never interleave their lines.
inline std::mutex& print_mutex() {
  static std::mutex mutex;
  return mutex;
}

// printf for those threads: one line at a time, flushed at once so that a run cut short by its time limit still
// shows how far it got.
inline void say(const char* format, ...) {
  std::lock_guard<std::mutex> lock(print_mutex());
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
  std::fflush(stdout);
}

#endif  // KREPLAY_CUDA_CHECK_HPP
