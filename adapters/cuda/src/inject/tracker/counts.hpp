// What the tracker has seen, for the injection's C API (kreplay_inject_state). The memory table counts the
// allocations, frees, record errors and contexts; the module registry the modules.
#ifndef KREPLAY_CUDA_INJECT_TRACKER_COUNTS_HPP
#define KREPLAY_CUDA_INJECT_TRACKER_COUNTS_HPP

#include <cstdint>

namespace kreplay::cuda::inject {

struct tracker_counts_t {
  uint64_t allocations;     // allocation calls seen (every kind)
  uint64_t frees;           // free calls seen
  uint64_t unknown_frees;   // frees of pointers the tracker never saw
  uint64_t record_errors;   // kreplay_record_* answers other than SUCCESS / NOT_FOUND
  uint64_t modules_loaded;
  uint64_t modules_unloaded;
  uint64_t contexts_forgotten;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_TRACKER_COUNTS_HPP
