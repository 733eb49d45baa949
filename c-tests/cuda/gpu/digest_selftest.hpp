// Self-test of the CUDA adapter's digest op (needs a GPU), shared by kreplay_cuda_test and kreplay_cuda_ops_bench.
// It checks what kreplay relies on when it restores only the blocks whose digest changed:
//   - the device agrees with the host definition (kreplay::cuda::digest_on_host) for every block size, for jobs of
//     odd length and at unaligned addresses;
//   - any single bit flipped anywhere in a block changes that block's digest and no other (random trials);
//   - swapping two different words of a block changes its digest (position dependence);
//   - equal bytes give equal digests, at another address and on every call.
#ifndef KREPLAY_CUDA_DIGEST_SELFTEST_HPP
#define KREPLAY_CUDA_DIGEST_SELFTEST_HPP

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda_check.hpp"
#include "kreplay.h"
#include "kreplay/cuda.hpp"

namespace digest_selftest {

struct result {
  uint64_t trials = 0;
  uint64_t failures = 0;
  std::string first_failure;

  void fail(const std::string& what) {
    if (failures++ == 0) {
      first_failure = what;
    }
  }
};

inline uint64_t next(uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

inline bool same(const kreplay_digest_t& a, const kreplay_digest_t& b) { return a.lo == b.lo && a.hi == b.hi; }

// Digests [device, device + bytes) through the ops into `out` (resized).
inline kreplay_status_t digest(const kreplay_device_ops_t& ops, kreplay_agent_t agent, const void* device,
                               size_t bytes, size_t block_bytes, std::vector<kreplay_digest_t>& out) {
  out.assign((bytes + block_bytes - 1) / block_bytes, kreplay_digest_t{0, 0});
  kreplay_digest_job_t job{device, bytes, out.data()};
  return ops.digest(ops.user_data, agent, &job, 1, block_bytes);
}

// Runs every check on the current device (agent `agent`), about `bit_trials` single-bit flips in all.
inline result run(const kreplay_device_ops_t& ops, kreplay_agent_t agent, uint64_t bit_trials, uint64_t seed) {
  result r;
  uint64_t state = seed | 1;
  struct shape {
    size_t block;
    size_t bytes;  // odd lengths: a short last block and a partial last word
  };
  const shape shapes[] = {{4096, (1u << 20) + 4100}, {64u << 10, (4u << 20) + 40}, {1u << 20, (8u << 20) + 17},
                          {16u << 20, (40u << 20) + 3}};
  size_t largest = 0;
  for (const shape& s : shapes) {
    largest = s.bytes > largest ? s.bytes : largest;
  }
  unsigned char* buffer = nullptr;
  unsigned char* twin = nullptr;
  CUDA_CHECK(cudaMalloc(&buffer, largest + 64));
  CUDA_CHECK(cudaMalloc(&twin, largest + 64));
  std::vector<unsigned char> host(largest + 64);
  std::vector<kreplay_digest_t> before, after, reference;

  for (const shape& s : shapes) {
    for (size_t i = 0; i < host.size(); ++i) {
      host[i] = static_cast<unsigned char>(next(state));
    }
    CUDA_CHECK(cudaMemcpy(buffer, host.data(), host.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::string tag = "block " + std::to_string(s.block) + ", " + std::to_string(s.bytes) + " bytes";

    // The device computes the documented function, aligned and at an address 4 bytes off.
    for (size_t shift : {size_t{0}, size_t{4}}) {
      ++r.trials;
      if (digest(ops, agent, buffer + shift, s.bytes, s.block, before) != KREPLAY_STATUS_SUCCESS) {
        r.fail(tag + ": digest failed (" + kreplay::cuda::last_op_error() + ")");
        continue;
      }
      reference.assign(before.size(), kreplay_digest_t{0, 0});
      kreplay::cuda::digest_on_host(host.data() + shift, s.bytes, s.block, reference.data());
      for (size_t b = 0; b < before.size(); ++b) {
        if (!same(before[b], reference[b])) {
          r.fail(tag + ": device and host disagree at block " + std::to_string(b) + " (shift " +
                 std::to_string(shift) + ")");
          break;
        }
      }
    }

    // Equal bytes elsewhere, and again: equal digests.
    CUDA_CHECK(cudaMemcpy(twin + 16, buffer, s.bytes, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<kreplay_digest_t> again;
    ++r.trials;
    if (digest(ops, agent, buffer, s.bytes, s.block, before) != KREPLAY_STATUS_SUCCESS ||
        digest(ops, agent, twin + 16, s.bytes, s.block, after) != KREPLAY_STATUS_SUCCESS ||
        digest(ops, agent, buffer, s.bytes, s.block, again) != KREPLAY_STATUS_SUCCESS) {
      r.fail(tag + ": digest failed");
      continue;
    }
    for (size_t b = 0; b < before.size(); ++b) {
      if (!same(before[b], after[b]) || !same(before[b], again[b])) {
        r.fail(tag + ": equal bytes gave different digests at block " + std::to_string(b));
        break;
      }
    }

    // Single bit flips, one at a time, anywhere: that block changes, no other does.
    const uint64_t flips = bit_trials / (sizeof(shapes) / sizeof(shapes[0]));
    for (uint64_t t = 0; t < flips; ++t) {
      ++r.trials;
      const size_t byte = next(state) % s.bytes;
      const unsigned char bit = static_cast<unsigned char>(1u << (next(state) % 8));
      const unsigned char flipped = static_cast<unsigned char>(host[byte] ^ bit);
      CUDA_CHECK(cudaMemcpy(buffer + byte, &flipped, 1, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaDeviceSynchronize());  // a pageable copy may return before it lands: drain, as a host does
      if (digest(ops, agent, buffer, s.bytes, s.block, after) != KREPLAY_STATUS_SUCCESS) {
        r.fail(tag + ": digest failed");
      } else {
        for (size_t b = 0; b < after.size(); ++b) {
          const bool changed = !same(before[b], after[b]);
          if (changed != (b == byte / s.block)) {
            r.fail(tag + ": flipping bit of byte " + std::to_string(byte) + (changed ? " changed block " :
                   " left its block unchanged: ") + std::to_string(b));
            break;
          }
        }
      }
      CUDA_CHECK(cudaMemcpy(buffer + byte, &host[byte], 1, cudaMemcpyHostToDevice));
    }

    // Two different 16-byte words of one block swapped (and two 4-byte words): the block's digest changes.
    const uint64_t swaps = 64;
    for (uint64_t t = 0; t < swaps; ++t) {
      const size_t width = t % 2 == 0 ? 16 : 4;
      const size_t block = next(state) % (s.bytes / s.block);
      const size_t words = s.block / width;
      size_t i = next(state) % words;
      size_t j = next(state) % words;
      if (i == j) {
        j = (i + 1) % words;
      }
      unsigned char* a = host.data() + block * s.block + i * width;
      unsigned char* b = host.data() + block * s.block + j * width;
      if (std::memcmp(a, b, width) == 0) {
        continue;  // equal words: swapping them changes nothing
      }
      ++r.trials;
      std::vector<unsigned char> swapped(host.begin() + static_cast<std::ptrdiff_t>(block * s.block),
                                         host.begin() + static_cast<std::ptrdiff_t>((block + 1) * s.block));
      std::memcpy(swapped.data() + i * width, b, width);
      std::memcpy(swapped.data() + j * width, a, width);
      CUDA_CHECK(cudaMemcpy(buffer + block * s.block, swapped.data(), s.block, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaDeviceSynchronize());
      if (digest(ops, agent, buffer, s.bytes, s.block, after) != KREPLAY_STATUS_SUCCESS) {
        r.fail(tag + ": digest failed");
      } else if (same(before[block], after[block])) {
        r.fail(tag + ": swapping words " + std::to_string(i) + " and " + std::to_string(j) + " (" +
               std::to_string(width) + " bytes) of block " + std::to_string(block) + " left its digest unchanged");
      }
      CUDA_CHECK(cudaMemcpy(buffer + block * s.block, host.data() + block * s.block, s.block,
                            cudaMemcpyHostToDevice));
    }
  }
  CUDA_CHECK(cudaFree(buffer));
  CUDA_CHECK(cudaFree(twin));
  return r;
}

}  // namespace digest_selftest

#endif  // KREPLAY_CUDA_DIGEST_SELFTEST_HPP
