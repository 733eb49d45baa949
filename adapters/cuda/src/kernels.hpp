// The adapter's kernels (kernels.cu) as the host code (runtime_ops/) sees them. Internal: not installed.
#ifndef KREPLAY_CUDA_KERNELS_HPP
#define KREPLAY_CUDA_KERNELS_HPP

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace kreplay::cuda {
namespace detail {

// One piece of a copy, at most kCopyChunkBytes long: the gather/scatter kernel gives each thread block whole
// chunks, so a 64 MiB copy spreads over the whole device and a 64 KiB one costs one block.
struct copy_chunk {
  uint64_t dst;
  uint64_t src;
  uint64_t bytes;
};
constexpr size_t kCopyChunkBytes = 256u << 10;

// copy_batch's automatic method hands copies of at least this size to cudaMemcpyAsync, smaller ones to the kernel:
// over the link (page-locked host staging) from 1 MiB, within the device (device storage) from 32 MiB
// (runtime_ops/copy.cpp; README.md beside this folder, "copy_batch", has the measurements).
constexpr size_t kDmaCopyBytes = 1u << 20;
constexpr size_t kDmaCopyBytesOnDevice = 32u << 20;

// Copies every chunk (device addresses: device memory, or host memory the device can address). Asynchronous on
// `stream`.
cudaError_t launch_gather(const copy_chunk* chunks, size_t count, int sm_count, cudaStream_t stream);

// One digest job as the kernel reads it: `first_segment` is the job's first segment in the launch's numbering and
// `first_block` its first digest in the output.
struct digest_job_desc {
  uint64_t address;
  uint64_t bytes;
  uint64_t first_block;
  uint64_t first_segment;
};
// Blocks up to this size are digested by one warp each; larger ones in segments of this size, one thread block
// per segment, whose partial sums are added into the block's accumulator.
constexpr size_t kDigestSegmentBytes = 64u << 10;
constexpr size_t kDigestWarpBlockBytes = 16u << 10;

// Segments of the launch for `bytes` of one job, and its blocks, for a power-of-two block size given as its
// log2: shifts, not divisions, since a call may carry tens of thousands of jobs and a 64-bit division costs
// tens of cycles.
inline unsigned log2_of(size_t power_of_two) {
  unsigned shift = 0;
  while ((size_t{1} << shift) < power_of_two) {
    ++shift;
  }
  return shift;
}
inline uint64_t digest_segments(uint64_t bytes, unsigned block_shift) {
  const unsigned segment_shift = block_shift < log2_of(kDigestSegmentBytes) ? block_shift : log2_of(kDigestSegmentBytes);
  return (bytes + (uint64_t{1} << segment_shift) - 1) >> segment_shift;
}
inline uint64_t digest_blocks(uint64_t bytes, unsigned block_shift) {
  return (bytes + (uint64_t{1} << block_shift) - 1) >> block_shift;
}

// Writes 2 x uint64_t (lo, hi) per block to `out` (device memory). `accumulators` (2 x uint64_t per block, device
// memory) is used, and zeroed first, when block_bytes > kDigestSegmentBytes; otherwise it may be NULL.
cudaError_t launch_digest(const digest_job_desc* jobs, size_t job_count, uint64_t segments, uint64_t blocks,
                          size_t block_bytes, uint64_t* accumulators, uint64_t* out, int sm_count,
                          cudaStream_t stream);

// The same function on the host, block by block (for the tests: the device kernel must agree with it).
void digest_on_host(const void* data, size_t bytes, size_t block_bytes, uint64_t* out);

}  // namespace detail
}  // namespace kreplay::cuda

#endif  // KREPLAY_CUDA_KERNELS_HPP
