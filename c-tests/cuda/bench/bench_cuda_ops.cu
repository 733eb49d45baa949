// The CUDA adapter's ops on their own, without kreplay's engine (needs an NVIDIA GPU): the candidates for
// copy_batch side by side, the digest kernel's throughput, and the digest self-test. Prints figures and writes a
// CSV; its exit status is non-zero only when a copy or digest came out wrong.
//
// copy_batch candidates, for 1 GiB as 16,384 x 64 KiB and as 16 x 64 MiB, each direction kreplay uses:
//   kernel        one gather/scatter kernel (page-locked staging is read and written in place)
//   memcpy_batch  one cudaMemcpyBatchAsync
//   memcpy_async  cudaMemcpyAsync per copy, one wait
//   single        the copy op per copy (what kreplay does without copy_batch)
// against one cudaMemcpy of the same bytes in one piece (the link or device limit). Staging is mmap'd and
// page-locked through the ops' host_lock (as kreplay's pinned staging is), or left pageable; device storage comes
// from the ops' device_alloc. Every candidate's result is checked word by word on the device.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "digest_selftest.hpp"
#include "kreplay.h"
#include "kreplay/cuda.hpp"

namespace {

__device__ __host__ unsigned int pattern(unsigned long long x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<unsigned int>(x) | 1u;
}

__global__ void fill_words(unsigned int* x, size_t n, unsigned long long seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    x[i] = pattern(seed + i);
  }
}

__global__ void count_wrong(const unsigned int* x, size_t n, unsigned long long seed, unsigned long long* wrong) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    local += x[i] != pattern(seed + i);
  }
  if (local != 0) {
    atomicAdd(wrong, local);
  }
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

struct options {
  int reps = 5;
  uint64_t bit_trials = 10000;
  bool copies = true;
  bool digests = true;
  std::string csv = "cuda-ops-benchmark.csv";
  // The copy layouts: bytes in all and bytes a region (--copy-layout; default 1 GiB in 64 KiB and in 64 MiB).
  std::vector<std::pair<size_t, size_t>> layouts;
};

FILE* g_csv = nullptr;
int g_wrong = 0;

void row(const char* group, const std::string& layout, const char* direction, const char* method, double ms,
         double bytes, const std::string& note) {
  const double gbps = bytes / 1e9 / (ms / 1e3);
  say("%-8s %-16s %-14s %-13s %9.3f ms %9.1f GB/s %s\n", group, layout.c_str(), direction, method, ms, gbps,
      note.c_str());
  if (g_csv != nullptr) {
    std::fprintf(g_csv, "%s,%s,%s,%s,%.4f,%.2f,\"%s\"\n", group, layout.c_str(), direction, method, ms, gbps,
                 note.c_str());
    std::fflush(g_csv);
  }
}

// 1 GiB (or `total`) on the device (the "regions"), in host staging and in device storage, all in one order.
struct copy_bench {
  const kreplay_device_ops_t& ops;
  kreplay_agent_t agent;
  size_t total;
  size_t region;
  std::vector<void*> regions;
  unsigned char* staging = nullptr;  // mmap'd
  bool locked = false;
  unsigned char* storage = nullptr;  // ops.device_alloc
  unsigned char* check = nullptr;    // contiguous, for checking host staging on the device

  copy_bench(const kreplay_device_ops_t& o, kreplay_agent_t a, size_t t, size_t r)
      : ops(o), agent(a), total(t), region(r) {
    for (size_t i = 0; i < total / region; ++i) {
      void* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, region));
      regions.push_back(p);
    }
    void* map = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
      std::fprintf(stderr, "mmap failed\n");
      std::exit(2);
    }
    staging = static_cast<unsigned char*>(map);
    std::memset(staging, 0, total);
    void* s = nullptr;
    KREPLAY_CHECK(ops.device_alloc(ops.user_data, agent, total, &s));
    storage = static_cast<unsigned char*>(s);
    CUDA_CHECK(cudaMalloc(&check, total));
  }
  ~copy_bench() {
    if (locked) {
      KREPLAY_CHECK(ops.host_unlock(ops.user_data, staging, total));
    }
    munmap(staging, total);
    KREPLAY_CHECK(ops.device_free(ops.user_data, agent, storage, total));
    CUDA_CHECK(cudaFree(check));
    for (void* p : regions) {
      CUDA_CHECK(cudaFree(p));
    }
  }

  void lock(bool on) {
    if (on && !locked) {
      KREPLAY_CHECK(ops.host_lock(ops.user_data, staging, total));
    } else if (!on && locked) {
      KREPLAY_CHECK(ops.host_unlock(ops.user_data, staging, total));
    }
    locked = on;
  }

  void fill_regions(unsigned long long seed) {
    for (size_t r = 0; r < regions.size(); ++r) {
      fill_words<<<264, 256>>>(static_cast<unsigned int*>(regions[r]), region / 4, seed + r * (region / 4));
      CUDA_CHECK_LAUNCH();
    }
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  void poison_regions() {
    for (void* p : regions) {
      CUDA_CHECK(cudaMemset(p, 0, region));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  uint64_t wrong_words(const void* contiguous_or_null, unsigned long long seed) {
    unsigned long long* wrong = nullptr;
    CUDA_CHECK(cudaMalloc(&wrong, sizeof(*wrong)));
    CUDA_CHECK(cudaMemset(wrong, 0, sizeof(*wrong)));
    if (contiguous_or_null != nullptr) {
      count_wrong<<<1024, 256>>>(static_cast<const unsigned int*>(contiguous_or_null), total / 4, seed, wrong);
    } else {
      for (size_t r = 0; r < regions.size(); ++r) {
        count_wrong<<<264, 256>>>(static_cast<const unsigned int*>(regions[r]), region / 4, seed + r * (region / 4),
                                  wrong);
      }
    }
    CUDA_CHECK_LAUNCH();
    unsigned long long found = 0;
    CUDA_CHECK(cudaMemcpy(&found, wrong, sizeof(found), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(wrong));
    return found;
  }
  uint64_t wrong_in_staging(unsigned long long seed) {
    CUDA_CHECK(cudaMemcpy(check, staging, total, cudaMemcpyHostToDevice));
    return wrong_words(check, seed);
  }

  std::vector<kreplay_copy_t> list(bool to_device, bool via_storage) {
    std::vector<kreplay_copy_t> copies;
    unsigned char* other = via_storage ? storage : staging;
    for (size_t r = 0; r < regions.size(); ++r) {
      if (to_device) {
        copies.push_back({regions[r], other + r * region, region});
      } else {
        copies.push_back({other + r * region, regions[r], region});
      }
    }
    return copies;
  }

  // Times `method` on `copies` (median of reps, after one untimed run); false when a copy failed.
  double time(const std::function<kreplay_status_t()>& run, int reps) {
    if (run() != KREPLAY_STATUS_SUCCESS) {
      return NAN;
    }
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
      const double t0 = now_ms();
      if (run() != KREPLAY_STATUS_SUCCESS) {
        return NAN;
      }
      ms.push_back(now_ms() - t0);
    }
    return median(ms);
  }
};

struct layout {
  size_t total;
  size_t region;
};

// --copy-layout's layouts, or the default ones: 1 GiB in 64 KiB and in 64 MiB regions.
std::vector<layout> copy_layouts(const options& opt) {
  std::vector<layout> layouts;
  for (const auto& [total, region] : opt.layouts) {
    layouts.push_back({total, region});
  }
  if (layouts.empty()) {
    layouts = {layout{1ull << 30, 64ull << 10}, layout{1ull << 30, 64ull << 20}};
  }
  return layouts;
}

void copy_candidates(const kreplay_device_ops_t& ops, kreplay_agent_t agent, const options& opt) {
  for (const layout& l : copy_layouts(opt)) {
    copy_bench bench(ops, agent, l.total, l.region);
    const std::string name = std::to_string(l.total / l.region) + "x" + std::to_string(l.region >> 10) + "K";
    const double bytes = static_cast<double>(l.total);
    const unsigned long long seed = 0x1234567ull;
    struct direction {
      const char* name;
      bool to_device;
      bool storage;
      bool pinned;
    };
    for (const direction& d : {direction{"d2h_pinned", false, false, true}, direction{"h2d_pinned", true, false, true},
                               direction{"d2d_storage", false, true, false}, direction{"d2d_restore", true, true, false},
                               direction{"d2h_pageable", false, false, false},
                               direction{"h2d_pageable", true, false, false}}) {
      bench.lock(d.pinned);
      // The limit: the same bytes as one copy.
      {
        unsigned char* other = d.storage ? bench.storage : bench.staging;
        void* contiguous = bench.check;
        const double ms = bench.time(
            [&] {
              cudaError_t e = d.to_device ? cudaMemcpy(contiguous, other, l.total, cudaMemcpyDefault)
                                          : cudaMemcpy(other, contiguous, l.total, cudaMemcpyDefault);
              if (e == cudaSuccess) {
                e = cudaDeviceSynchronize();  // a device-to-device cudaMemcpy returns before it completes
              }
              return e == cudaSuccess ? KREPLAY_STATUS_SUCCESS : KREPLAY_STATUS_DEVICE_ERROR;
            },
            opt.reps);
        row("copy", name, d.name, "one_memcpy", ms, bytes, "limit: one cudaMemcpy of the whole footprint");
      }
      std::vector<kreplay_copy_t> copies = bench.list(d.to_device, d.storage);
      struct method {
        const char* name;
        kreplay::cuda::copy_method m;
        bool single;
      };
      for (const method& m : {method{"automatic", kreplay::cuda::copy_method::automatic, false},
                              method{"kernel", kreplay::cuda::copy_method::kernel, false},
                              method{"memcpy_batch", kreplay::cuda::copy_method::memcpy_batch, false},
                              method{"memcpy_async", kreplay::cuda::copy_method::memcpy_async, false},
                              method{"single", kreplay::cuda::copy_method::automatic, true}}) {
        kreplay::cuda::set_copy_method(m.m);
        // Source holds the pattern, destination is poisoned, then the copy runs and the result is checked.
        if (d.to_device) {
          bench.fill_regions(seed);
          unsigned char* other = d.storage ? bench.storage : bench.staging;
          for (size_t r = 0; r < bench.regions.size(); ++r) {
            CUDA_CHECK(cudaMemcpy(other + r * l.region, bench.regions[r], l.region, cudaMemcpyDefault));
          }
          bench.poison_regions();
        } else {
          bench.fill_regions(seed);
          if (d.storage) {
            CUDA_CHECK(cudaMemset(bench.storage, 0, l.total));
          } else {
            std::memset(bench.staging, 0, l.total);
          }
        }
        const int reps = m.single && l.region < (1u << 20) ? 2 : opt.reps;
        const double ms = bench.time(
            [&] {
              if (!m.single) {
                return ops.copy_batch(ops.user_data, agent, copies.data(), copies.size());
              }
              for (const kreplay_copy_t& c : copies) {
                kreplay_status_t s = ops.copy(ops.user_data, c.dst, c.src, c.bytes);
                if (s != KREPLAY_STATUS_SUCCESS) {
                  return s;
                }
              }
              return KREPLAY_STATUS_SUCCESS;
            },
            reps);
        uint64_t wrong = 0;
        if (std::isnan(ms)) {
          wrong = 1;
        } else if (d.to_device) {
          wrong = bench.wrong_words(nullptr, seed);
        } else if (d.storage) {
          wrong = bench.wrong_words(bench.storage, seed);
        } else {
          wrong = bench.wrong_in_staging(seed);
        }
        g_wrong += wrong != 0;
        row("copy", name, d.name, m.name, ms, bytes,
            std::isnan(ms) ? std::string("FAILED: ") + kreplay::cuda::last_op_error()
                           : (wrong == 0 ? "verified" : "WRONG: " + std::to_string(wrong) + " words"));
      }
      kreplay::cuda::set_copy_method(kreplay::cuda::copy_method::automatic);
    }
    bench.lock(false);
    // What a driver query per pointer would cost a batch of this many copies (the adapter makes none).
    const double t0 = now_ms();
    for (void* p : bench.regions) {
      cudaPointerAttributes attributes{};
      CUDA_CHECK(cudaPointerGetAttributes(&attributes, p));
    }
    row("query", name, "-", "pointer_attrs", now_ms() - t0, 0, "cudaPointerGetAttributes once per region");
  }
}

void digest_throughput(const kreplay_device_ops_t& ops, kreplay_agent_t agent, const options& opt) {
  const size_t total = 1ull << 30;
  unsigned char* data = nullptr;
  CUDA_CHECK(cudaMalloc(&data, total));
  fill_words<<<1024, 256>>>(reinterpret_cast<unsigned int*>(data), total / 4, 99);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  struct shape {
    size_t job;
    size_t block;
  };
  for (const shape& s : {shape{64ull << 20, 64ull << 10}, shape{64ull << 10, 64ull << 10}, shape{64ull << 20, 4096},
                         shape{64ull << 20, 1ull << 20}, shape{64ull << 20, 16ull << 20}}) {
    const size_t jobs = total / s.job;
    std::vector<kreplay_digest_t> out(total / s.block);
    std::vector<kreplay_digest_job_t> list;
    for (size_t j = 0; j < jobs; ++j) {
      list.push_back({data + j * s.job, s.job, out.data() + j * (s.job / s.block)});
    }
    std::vector<double> ms;
    for (int i = 0; i < opt.reps + 5; ++i) {
      const double t0 = now_ms();
      KREPLAY_CHECK(ops.digest(ops.user_data, agent, list.data(), list.size(), s.block));
      if (i > 0) {
        ms.push_back(now_ms() - t0);
      }
    }
    const std::string layout = std::to_string(jobs) + "x" + std::to_string(s.job >> 10) + "K";
    row("digest", layout, ("block_" + std::to_string(s.block >> 10) + "K").c_str(), "digest_op", median(ms),
        static_cast<double>(total), "1 GiB, host clock around ops.digest (read-back included)");
  }
  CUDA_CHECK(cudaFree(data));
}

// "TOTAL_MIB:REGION_KIB", a whole number of regions of at least 4 KiB: appended to `layouts`.
bool parse_layout(const char* text, std::vector<std::pair<size_t, size_t>>& layouts) {
  unsigned long long mib = 0;
  unsigned long long kib = 0;
  char end = 0;
  if (std::sscanf(text, "%llu:%llu%c", &mib, &kib, &end) != 2 || kib < 4 || mib == 0 || (mib << 10) % kib != 0) {
    return false;
  }
  layouts.emplace_back(static_cast<size_t>(mib) << 20, static_cast<size_t>(kib) << 10);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      opt.reps = std::atoi(argv[++i]);
    } else if (arg == "--bit-trials" && i + 1 < argc) {
      opt.bit_trials = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--csv" && i + 1 < argc) {
      opt.csv = argv[++i];
    } else if (arg == "--no-copies") {
      opt.copies = false;
    } else if (arg == "--no-digests") {
      opt.digests = false;
    } else if (arg == "--copy-layout" && i + 1 < argc && parse_layout(argv[i + 1], opt.layouts)) {
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--bit-trials N] [--csv FILE] [--no-copies] [--no-digests]\n"
                   "          [--copy-layout TOTAL_MIB:REGION_KIB]...  (default: 1024:64 and 1024:65536)\n",
                   argv[0]);
      return 2;
    }
  }
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int runtime = 0;
  int driver = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  say("device 0: %s, %d SMs; runtime %d, driver %d\n", prop.name, prop.multiProcessorCount, runtime, driver);
  const kreplay_agent_t agent = kreplay::cuda::agent_of_device(0);
  kreplay_device_ops_t ops{};
  KREPLAY_CHECK(kreplay::cuda::make_runtime_ops(&ops));
  g_csv = std::fopen(opt.csv.c_str(), "w");
  if (g_csv != nullptr) {
    std::fprintf(g_csv, "group,layout,direction,method,ms,gbps,note\n");
  }
  if (opt.digests) {
    const double t0 = now_ms();
    digest_selftest::result r = digest_selftest::run(ops, agent, opt.bit_trials, 0x5eed);
    say("digest self-test: %" PRIu64 " trials, %" PRIu64 " failures%s%s (%.1f s)\n", r.trials, r.failures,
        r.failures ? "; first: " : "", r.first_failure.c_str(), (now_ms() - t0) / 1e3);
    g_wrong += r.failures != 0;
    digest_throughput(ops, agent, opt);
  }
  if (opt.copies) {
    copy_candidates(ops, agent, opt);
  }
  const kreplay::cuda::stats_t s = kreplay::cuda::stats();
  ops.release(ops.user_data);
  say("adapter: %" PRIu64 " batches (%" PRIu64 " failed), %" PRIu64 " digests, %" PRIu64
      " device allocs, %" PRIu64 " bytes still allocated, releases %" PRIu64 "\n",
      s.batches, s.batch_failures, s.digests, s.device_allocs, kreplay::cuda::stats().device_bytes,
      kreplay::cuda::stats().releases);
  if (g_csv != nullptr) {
    std::fclose(g_csv);
  }
  say("%s\n", g_wrong == 0 ? "all results verified" : "SOME RESULTS WRONG");
  return g_wrong == 0 ? 0 : 1;
}
