// The adapter's kernels: the gather/scatter copy behind copy_batch and the block digest behind digest.
// README.md beside this folder defines the digest function and gives its collision arithmetic.
#include "kernels.hpp"

#include <cstring>

namespace kreplay::cuda {
namespace detail {
namespace {

constexpr unsigned kGatherThreads = 512;
constexpr unsigned kDigestThreads = 256;

// ---- Copy ------------------------------------------------------------------------------------------------

__global__ void __launch_bounds__(kGatherThreads) gather_kernel(const copy_chunk* chunks, size_t count) {
  for (size_t c = blockIdx.x; c < count; c += gridDim.x) {
    const copy_chunk chunk = chunks[c];
    unsigned char* dst = reinterpret_cast<unsigned char*>(chunk.dst);
    const unsigned char* src = reinterpret_cast<const unsigned char*>(chunk.src);
    size_t done = 0;
    if (((chunk.dst | chunk.src) & 15u) == 0) {
      // 16-byte accesses, four loads in flight per thread before the first store: reads of host memory across
      // the link take microseconds each, so the kernel needs many outstanding to fill it.
      const size_t words = chunk.bytes / 16;
      uint4* d = reinterpret_cast<uint4*>(dst);
      const uint4* s = reinterpret_cast<const uint4*>(src);
      size_t w = threadIdx.x;
      for (; w + 3 * kGatherThreads < words; w += 4 * kGatherThreads) {
        const uint4 v0 = s[w];
        const uint4 v1 = s[w + kGatherThreads];
        const uint4 v2 = s[w + 2 * kGatherThreads];
        const uint4 v3 = s[w + 3 * kGatherThreads];
        d[w] = v0;
        d[w + kGatherThreads] = v1;
        d[w + 2 * kGatherThreads] = v2;
        d[w + 3 * kGatherThreads] = v3;
      }
      for (; w < words; w += kGatherThreads) {
        d[w] = s[w];
      }
      done = words * 16;
    }
    // Unaligned copies (module variables of odd size or address) and the tail: byte by byte. They are small.
    for (size_t i = done + threadIdx.x; i < chunk.bytes; i += kGatherThreads) {
      dst[i] = src[i];
    }
  }
}

// ---- Digest ----------------------------------------------------------------------------------------------

// One 16-byte word (two little-endian 64-bit halves) at word `index` of its block, mixed and added into the
// block's sums. For a fixed index the map (lo, hi) -> (a, b) is a bijection (each step is invertible given the
// other half), so changing any one word always changes the sums; the index enters before the multiplications,
// so the same word at another position contributes an unrelated value.
__host__ __device__ inline void mix_word(uint64_t lo, uint64_t hi, uint64_t index, uint64_t& s0, uint64_t& s1) {
  uint64_t a = lo ^ (index * 0x9E3779B97F4A7C15ull + 0x243F6A8885A308D3ull);
  uint64_t b = hi ^ (index * 0xC2B2AE3D27D4EB4Full + 0x13198A2E03707344ull);
  a *= 0xBF58476D1CE4E5B9ull;
  a ^= a >> 31;
  b += a;
  b *= 0x94D049BB133111EBull;
  b ^= b >> 29;
  a += b;
  a *= 0xD6E8FEB86659FD93ull;
  a ^= a >> 32;
  s0 += a;
  s1 += b;
}

// The block's sums and length to its digest; a bijection of (s0, s1) for a given length.
__host__ __device__ inline void finish_block(uint64_t s0, uint64_t s1, uint64_t bytes, uint64_t* out) {
  uint64_t a = s0 ^ (bytes * 0xFF51AFD7ED558CCDull);
  uint64_t b = s1 + bytes;
  a ^= a >> 33;
  a *= 0xC4CEB9FE1A85EC53ull;
  b += a;
  b ^= b >> 29;
  b *= 0xFF51AFD7ED558CCDull;
  a += b;
  a ^= a >> 32;
  a *= 0x9E3779B97F4A7C15ull;
  b += a;
  b ^= b >> 33;
  out[0] = a;
  out[1] = b;
}

// Bytes [0, n) of a word (n <= 16), zero-padded, as the two halves mix_word takes.
__host__ __device__ inline void load_partial(const unsigned char* p, size_t n, uint64_t& lo, uint64_t& hi) {
  lo = 0;
  hi = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t byte = p[i];
    if (i < 8) {
      lo |= byte << (8 * i);
    } else {
      hi |= byte << (8 * (i - 8));
    }
  }
}

// Adds the words of [base, base + bytes) -- word `first_word` of its block onwards -- that fall to `lane` of
// `lanes` into (s0, s1). `bytes` may end in a partial word only at the end of the block.
__device__ inline void accumulate(const unsigned char* base, uint64_t bytes, uint64_t first_word, unsigned lane,
                                  unsigned lanes, uint64_t& s0, uint64_t& s1) {
  const uint64_t words = bytes / 16;
  if ((reinterpret_cast<uintptr_t>(base) & 15u) == 0) {
    const uint4* p = reinterpret_cast<const uint4*>(base);
    uint64_t w = lane;
    for (; w + 3ull * lanes < words; w += 4ull * lanes) {
      const uint4 v0 = __ldg(p + w);
      const uint4 v1 = __ldg(p + w + lanes);
      const uint4 v2 = __ldg(p + w + 2ull * lanes);
      const uint4 v3 = __ldg(p + w + 3ull * lanes);
      mix_word(v0.x | (uint64_t{v0.y} << 32), v0.z | (uint64_t{v0.w} << 32), first_word + w, s0, s1);
      mix_word(v1.x | (uint64_t{v1.y} << 32), v1.z | (uint64_t{v1.w} << 32), first_word + w + lanes, s0, s1);
      mix_word(v2.x | (uint64_t{v2.y} << 32), v2.z | (uint64_t{v2.w} << 32), first_word + w + 2ull * lanes, s0, s1);
      mix_word(v3.x | (uint64_t{v3.y} << 32), v3.z | (uint64_t{v3.w} << 32), first_word + w + 3ull * lanes, s0, s1);
    }
    for (; w < words; w += lanes) {
      const uint4 v = __ldg(p + w);
      mix_word(v.x | (uint64_t{v.y} << 32), v.z | (uint64_t{v.w} << 32), first_word + w, s0, s1);
    }
  } else {
    for (uint64_t w = lane; w < words; w += lanes) {
      uint64_t lo = 0;
      uint64_t hi = 0;
      load_partial(base + 16 * w, 16, lo, hi);
      mix_word(lo, hi, first_word + w, s0, s1);
    }
  }
  if (lane == 0 && bytes % 16 != 0) {
    uint64_t lo = 0;
    uint64_t hi = 0;
    load_partial(base + 16 * words, bytes % 16, lo, hi);
    mix_word(lo, hi, first_word + words, s0, s1);
  }
}

__device__ inline uint64_t warp_sum(uint64_t value) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// The index of the job holding segment `segment`: the last whose first_segment is at most it (jobs are in that
// order).
__device__ inline size_t find_job(const digest_job_desc* jobs, size_t count, uint64_t segment) {
  size_t low = 0;
  size_t high = count;
  while (high - low > 1) {
    const size_t mid = (low + high) / 2;
    if (jobs[mid].first_segment <= segment) {
      low = mid;
    } else {
      high = mid;
    }
  }
  return low;
}

// Each worker (a warp, or a thread block) takes a contiguous run of segments: one search for its first job, then a
// walk forward, instead of a search per segment (with 16,384 jobs of 64 KiB a search per segment cost as much as
// reading the data).
struct segment_run {
  uint64_t begin;
  uint64_t end;
};
__device__ inline segment_run run_of(uint64_t worker, uint64_t workers, uint64_t segments) {
  const uint64_t per = (segments + workers - 1) / workers;
  const uint64_t begin = worker * per < segments ? worker * per : segments;
  const uint64_t end = begin + per < segments ? begin + per : segments;
  return {begin, end};
}
__device__ inline void advance(const digest_job_desc* jobs, size_t count, uint64_t segment, size_t& job) {
  while (job + 1 < count && jobs[job + 1].first_segment <= segment) {
    ++job;
  }
}

// A segment of a worker's run, found from the job the previous segment was in (job, moved forward here).
struct segment_piece {
  const digest_job_desc* job;
  uint64_t local;   // the segment's index within its job
  uint64_t offset;  // its first byte within the job
  uint64_t bytes;   // its length: segment_bytes, or what is left of the job
};
__device__ inline segment_piece piece_of(const digest_job_desc* jobs, size_t count, uint64_t segment,
                                         uint64_t segment_bytes, size_t& job) {
  advance(jobs, count, segment, job);
  const digest_job_desc& found = jobs[job];
  const uint64_t local = segment - found.first_segment;
  const uint64_t offset = local * segment_bytes;
  const uint64_t bytes = found.bytes - offset < segment_bytes ? found.bytes - offset : segment_bytes;
  return {&found, local, offset, bytes};
}

// Blocks up to kDigestWarpBlockBytes: one warp per block, no shared memory, no block-wide barrier.
__global__ void __launch_bounds__(kDigestThreads) digest_small_kernel(const digest_job_desc* jobs, size_t job_count,
                                                                      uint64_t segments, uint64_t block_bytes,
                                                                      uint64_t* out) {
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t warps = uint64_t{gridDim.x} * (kDigestThreads / 32);
  const segment_run run = run_of(uint64_t{blockIdx.x} * (kDigestThreads / 32) + threadIdx.x / 32, warps, segments);
  if (run.begin >= run.end) {
    return;
  }
  size_t j = find_job(jobs, job_count, run.begin);
  for (uint64_t segment = run.begin; segment < run.end; ++segment) {
    const segment_piece piece = piece_of(jobs, job_count, segment, block_bytes, j);
    uint64_t s0 = 0;
    uint64_t s1 = 0;
    accumulate(reinterpret_cast<const unsigned char*>(piece.job->address) + piece.offset, piece.bytes, 0, lane, 32,
               s0, s1);
    s0 = warp_sum(s0);
    s1 = warp_sum(s1);
    if (lane == 0) {
      finish_block(s0, s1, piece.bytes, out + 2 * (piece.job->first_block + piece.local));
    }
  }
}

// Larger blocks: one thread block per segment of min(block, kDigestSegmentBytes). When a block is one segment it
// is finished here; otherwise the segment's sums are added to the block's accumulators (addition modulo 2^64 is
// exact, so the order in which segments land does not matter) and finish_kernel finishes the blocks.
__global__ void __launch_bounds__(kDigestThreads) digest_segment_kernel(const digest_job_desc* jobs,
                                                                        size_t job_count, uint64_t segments,
                                                                        uint64_t block_bytes, uint64_t* accumulators,
                                                                        uint64_t* out) {
  __shared__ uint64_t partial[2][kDigestThreads / 32];
  const uint64_t segment_bytes = block_bytes < kDigestSegmentBytes ? block_bytes : kDigestSegmentBytes;
  const unsigned lane = threadIdx.x & 31u;
  const unsigned warp = threadIdx.x / 32;
  const segment_run run = run_of(blockIdx.x, gridDim.x, segments);
  if (run.begin >= run.end) {
    return;
  }
  size_t j = find_job(jobs, job_count, run.begin);
  for (uint64_t segment = run.begin; segment < run.end; ++segment) {
    const segment_piece piece = piece_of(jobs, job_count, segment, segment_bytes, j);
    const digest_job_desc& job = *piece.job;
    const uint64_t offset = piece.offset;
    const uint64_t bytes = piece.bytes;
    const uint64_t block = offset / block_bytes;
    const uint64_t first_word = (offset % block_bytes) / 16;
    uint64_t s0 = 0;
    uint64_t s1 = 0;
    accumulate(reinterpret_cast<const unsigned char*>(job.address) + offset, bytes, first_word, threadIdx.x,
               kDigestThreads, s0, s1);
    s0 = warp_sum(s0);
    s1 = warp_sum(s1);
    if (lane == 0) {
      partial[0][warp] = s0;
      partial[1][warp] = s1;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      s0 = 0;
      s1 = 0;
      for (unsigned i = 0; i < kDigestThreads / 32; ++i) {
        s0 += partial[0][i];
        s1 += partial[1][i];
      }
      if (accumulators == nullptr) {
        finish_block(s0, s1, bytes, out + 2 * (job.first_block + block));
      } else {
        unsigned long long* slot =
            reinterpret_cast<unsigned long long*>(accumulators + 2 * (job.first_block + block));
        atomicAdd(slot, static_cast<unsigned long long>(s0));
        atomicAdd(slot + 1, static_cast<unsigned long long>(s1));
      }
    }
    __syncthreads();  // `partial` is reused by the next segment
  }
}

__global__ void finish_kernel(const digest_job_desc* jobs, size_t job_count, uint64_t block_bytes,
                              const uint64_t* accumulators, uint64_t* out) {
  const size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (j >= job_count) {
    return;
  }
  const digest_job_desc& job = jobs[j];
  const uint64_t blocks = (job.bytes + block_bytes - 1) / block_bytes;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t bytes = job.bytes - b * block_bytes < block_bytes ? job.bytes - b * block_bytes : block_bytes;
    const uint64_t slot = 2 * (job.first_block + b);
    finish_block(accumulators[slot], accumulators[slot + 1], bytes, out + slot);
  }
}

unsigned grid_for(const void* kernel, unsigned threads, int sm_count, uint64_t work_items) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, static_cast<int>(threads), 0) != cudaSuccess ||
      per_sm < 1) {
    (void)cudaGetLastError();
    per_sm = 1;
  }
  const uint64_t full = static_cast<uint64_t>(per_sm) * static_cast<uint64_t>(sm_count > 0 ? sm_count : 1);
  return static_cast<unsigned>(work_items < full ? (work_items > 0 ? work_items : 1) : full);
}

}  // namespace

cudaError_t launch_gather(const copy_chunk* chunks, size_t count, int sm_count, cudaStream_t stream) {
  if (count == 0) {
    return cudaSuccess;
  }
  const unsigned grid = grid_for(reinterpret_cast<const void*>(gather_kernel), kGatherThreads, sm_count, count);
  gather_kernel<<<grid, kGatherThreads, 0, stream>>>(chunks, count);
  return cudaGetLastError();
}

cudaError_t launch_digest(const digest_job_desc* jobs, size_t job_count, uint64_t segments, uint64_t blocks,
                          size_t block_bytes, uint64_t* accumulators, uint64_t* out, int sm_count,
                          cudaStream_t stream) {
  if (segments == 0) {
    return cudaSuccess;
  }
  if (block_bytes <= kDigestWarpBlockBytes) {
    const uint64_t groups = (segments + kDigestThreads / 32 - 1) / (kDigestThreads / 32);
    const unsigned grid =
        grid_for(reinterpret_cast<const void*>(digest_small_kernel), kDigestThreads, sm_count, groups);
    digest_small_kernel<<<grid, kDigestThreads, 0, stream>>>(jobs, job_count, segments, block_bytes, out);
    return cudaGetLastError();
  }
  const bool split = block_bytes > kDigestSegmentBytes;
  if (split) {
    cudaError_t error = cudaMemsetAsync(accumulators, 0, 2 * sizeof(uint64_t) * blocks, stream);
    if (error != cudaSuccess) {
      return error;
    }
  }
  const unsigned grid =
      grid_for(reinterpret_cast<const void*>(digest_segment_kernel), kDigestThreads, sm_count, segments);
  digest_segment_kernel<<<grid, kDigestThreads, 0, stream>>>(jobs, job_count, segments, block_bytes,
                                                             split ? accumulators : nullptr, out);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess || !split) {
    return error;
  }
  const unsigned finish_grid = static_cast<unsigned>((job_count + 127) / 128);
  finish_kernel<<<finish_grid, 128, 0, stream>>>(jobs, job_count, block_bytes, accumulators, out);
  return cudaGetLastError();
}

void digest_on_host(const void* data, size_t bytes, size_t block_bytes, uint64_t* out) {
  const unsigned char* base = static_cast<const unsigned char*>(data);
  for (size_t offset = 0, block = 0; offset < bytes; offset += block_bytes, ++block) {
    const size_t n = bytes - offset < block_bytes ? bytes - offset : block_bytes;
    uint64_t s0 = 0;
    uint64_t s1 = 0;
    for (size_t w = 0; 16 * w < n; ++w) {
      const size_t left = n - 16 * w;
      uint64_t lo = 0;
      uint64_t hi = 0;
      if (left >= 16) {
        std::memcpy(&lo, base + offset + 16 * w, 8);  // little-endian, as the device reads it
        std::memcpy(&hi, base + offset + 16 * w + 8, 8);
      } else {
        load_partial(base + offset + 16 * w, left, lo, hi);
      }
      mix_word(lo, hi, w, s0, s1);
    }
    finish_block(s0, s1, n, out + 2 * block);
  }
}

}  // namespace detail
}  // namespace kreplay::cuda
