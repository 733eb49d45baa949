// Benchmark of kreplay's snapshot and restore on a CUDA GPU, side by side with the reference design, the link and
// device limits and CUPTI's Checkpoint API (needs an NVIDIA GPU). Prints figures; asserts nothing about speed.
//
// For each footprint (bytes in regions of one size) every row runs D dispatches of P passes: one snapshot, then
// P - 1 times a kernel that writes to the footprint followed by a restore. Only the snapshot, the restores and the
// per-dispatch release are timed (host monotonic clock, after cudaDeviceSynchronize); the kernel between passes
// runs and is synchronised outside the timed spans. It changes one word per region ("touch"), or, in the rows
// with a written fraction, rewrites that fraction of the footprint's 64 KiB blocks, chosen at random each pass.
// After every restore a kernel compares a checksum of every 64 KiB block with the one taken before the snapshot
// (untimed), so a row that does not really restore shows up in the `verified` column.
//
// Rows (see docs/performance.md, "Real GPU (H200)"):
//   1  kreplay_pinned        kreplay_snap / kreplay_restore, host tier, retained staging page-locked (pin_staging)
//   1n kreplay_pinned_nosync row 1 with the adapter's wait after each single copy turned off (diagnostic)
//   2  kreplay_pageable      the same, staging left pageable
//   6  kreplay_host_dirty    row 1 with dirty_only (the adapter's digest op), per written fraction
//   7  kreplay_device        device tier: device_budget_bytes covers the footprint
//   8  kreplay_device_dirty  row 7 with dirty_only, per written fraction
//   9  kreplay_spill         a device budget of half the footprint: the rest spills to pinned host staging
//   3  reference_per_dispatch a zero-filled std::vector<char> per region per dispatch, pageable copies through
//                            the adapter's copy op, freed at the end of the dispatch (the design before retention)
//   4  raw_pinned            cudaMemcpy per region from and to one cudaMallocHost buffer
//   4b raw_registered        the same into mmap'd memory page-locked with cudaHostRegister (diagnostic)
//   4c raw_pinned_one_copy   the whole footprint as one cudaMemcpy each way, to and from cudaMallocHost memory:
//                            the link limit
//   4d raw_d2d_one_copy      the whole footprint as one device-to-device cudaMemcpy each way: the device limit
//   4r raw_pinned_repeat     row 4 again after the kreplay rows, for the run-to-run spread
//   5a cupti_device          cuptiCheckpointSave / cuptiCheckpointRestore, checkpoint allowed in device memory
//   5b cupti_host            the same with the checkpoint kept out of device memory: reserveDeviceMB set to the
//                            device's whole memory in MiB (--cupti-host-reserve total, the default) or to -1
//                            (--cupti-host-reserve minus1, what cupti_checkpoint.h documents; refused by CUPTI 13.0)
//   5c cupti_device_transfer 5a with CUPTI_CHECKPOINT_OPT_TRANSFER (restores only what changed), per fraction
//   5d cupti_host_transfer   5b with CUPTI_CHECKPOINT_OPT_TRANSFER, per fraction
// Per row: first dispatch, steady-state snapshot, restore and dispatch (medians of dispatches 2..D), device and
// host memory held while the snapshot exists (cudaMemGetInfo of the row's device and the process's resident set,
// against the same readings before the row; with several devices at once the resident set is all of theirs). Also: the adapter's digest of the 1 GiB footprints (row D).
// CUPTI's context (--cupti-context): "null" leaves CUpti_Checkpoint::ctx NULL (the current context), "explicit"
// names the current (primary) context, "created" runs the CUPTI rows on a fresh allocation of the same footprint
// in a context made with cuCtxCreate, as NVIDIA's sample does. cupti_probe tells which one this driver accepts.
// With several devices, one thread per device runs every row at the same time as the others (one agent each);
// --devices 1 runs one. --rows and --fractions select a subset (so a run fits a time limit); --help lists all.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#if defined(KREPLAY_HAVE_CUPTI_CHECKPOINT)
#include <cupti_checkpoint.h>
#endif

#include "cuda_check.hpp"
#include "driver_api.hpp"
#include "kreplay.h"
#include "kreplay/cuda.hpp"

// Module-scope variables, so the module scan and its copies are part of every kreplay snapshot as they would be
// for a real application.
__device__ unsigned long long g_bench_epoch;
__constant__ unsigned int c_bench_salt[16];

namespace {

const kreplay::cuda::symbol_t kSymbols[] = {
    {"g_bench_epoch", &g_bench_epoch, false},
    {"c_bench_salt", &c_bench_salt, true},
};

__device__ __host__ unsigned int word_hash(unsigned long long x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<unsigned int>(x) | 1u;  // never zero: zeros hide unwritten memory
}

__global__ void fill_region(unsigned int* x, size_t n, unsigned long long seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    x[i] = word_hash(seed + i);
  }
}

__global__ void touch_first_words(unsigned int* const* regions, size_t count) {
  size_t r = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (r < count) {
    regions[r][0] = regions[r][0] * 2654435761u + 1u;
  }
  if (r == 0) {
    g_bench_epoch += 1;
  }
}

constexpr size_t kBlockBytes = 64u << 10;  // the unit of the written fractions and of the verification
constexpr unsigned kBlockWords = kBlockBytes / sizeof(unsigned int);

__device__ unsigned long long block_sum_warp(unsigned long long v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

// One position-weighted checksum per 64 KiB block (one thread block per footprint block), into `out`; with
// `compare`, counts the blocks whose checksum differs from it instead.
__global__ void block_checksums(unsigned int* const* regions, size_t blocks_per_region, size_t region_words,
                                unsigned long long* out, const unsigned long long* compare, unsigned int* mismatches) {
  __shared__ unsigned long long partial[8];
  const size_t block = blockIdx.x;
  const unsigned int* base = regions[block / blocks_per_region] + (block % blocks_per_region) * kBlockWords;
  const size_t words = region_words - (block % blocks_per_region) * kBlockWords < kBlockWords
                           ? region_words - (block % blocks_per_region) * kBlockWords
                           : kBlockWords;
  unsigned long long local = 0;
  for (size_t i = threadIdx.x; i < words; i += blockDim.x) {
    local += static_cast<unsigned long long>(base[i]) * (i * 2 + 1);
  }
  local = block_sum_warp(local);
  if ((threadIdx.x & 31) == 0) {
    partial[threadIdx.x / 32] = local;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long sum = 0;
    for (int w = 0; w < 8; ++w) {
      sum += partial[w];
    }
    if (compare == nullptr) {
      out[block] = sum;
    } else if (compare[block] != sum) {
      atomicAdd(mismatches, 1u);
    }
  }
}

// Rewrites whole 64 KiB blocks of the footprint: `list` holds the global block numbers to write.
__global__ void write_blocks(unsigned int* const* regions, size_t blocks_per_region, size_t region_words,
                             const unsigned int* list, unsigned int salt) {
  const size_t block = list[blockIdx.x];
  unsigned int* base = regions[block / blocks_per_region] + (block % blocks_per_region) * kBlockWords;
  const size_t words = region_words - (block % blocks_per_region) * kBlockWords < kBlockWords
                           ? region_words - (block % blocks_per_region) * kBlockWords
                           : kBlockWords;
  for (size_t i = threadIdx.x; i < words; i += blockDim.x) {
    base[i] = base[i] * 2654435761u + salt;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    g_bench_epoch += 1;
  }
}

double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

double median(std::vector<double> values) {
  if (values.empty()) {
    return NAN;
  }
  std::sort(values.begin(), values.end());
  size_t mid = values.size() / 2;
  return values.size() % 2 != 0 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// kreplay's INFO lines (one per snapshot and per restore, with phase timings) go to a file, tagged with the row
// that produced them.
std::mutex g_info_mutex;
FILE* g_info_file = nullptr;
std::string g_info_tag;

// The last replay-window outcome line kreplay logged on this thread (a row's thread closes its own windows).
thread_local std::string t_window_line;

void log_line(void*, kreplay_log_level_t level, const char* message, size_t) {
  if (std::strncmp(message, "kreplay window ", 15) == 0) {
    t_window_line = message;
  }
  std::lock_guard<std::mutex> lock(g_info_mutex);
  if (level <= KREPLAY_LOG_WARNING) {
    std::fprintf(stderr, "kreplay %s: %s\n", level == KREPLAY_LOG_ERROR ? "ERROR" : "WARNING", message);
  }
  if (g_info_file != nullptr) {
    std::fprintf(g_info_file, "[%s] %s\n", g_info_tag.c_str(), message);
  }
}

void set_info_tag(const std::string& tag) {
  std::lock_guard<std::mutex> lock(g_info_mutex);
  g_info_tag = tag;
}

// Keeps the devices' threads in step, so every device runs the same row (and the process-wide policy fits all).
class barrier {
 public:
  explicit barrier(int parties) : parties_(parties) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const unsigned long generation = generation_;
    if (++waiting_ == parties_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation != generation_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int parties_;
  int waiting_ = 0;
  unsigned long generation_ = 0;
};

struct footprint_t {
  size_t total;
  size_t region;
};

struct config_t {
  int dispatches = 5;
  int passes = 5;
  int devices = 0;  // 0: all
  std::vector<footprint_t> footprints = {
      {64ull << 20, 64ull << 20}, {1ull << 30, 64ull << 20}, {4ull << 30, 64ull << 20}, {1ull << 30, 64ull << 10}};
  std::vector<double> fractions = {0.001, 0.01, 0.1, 1.0};
  std::vector<std::string> rows;  // empty: all
  std::vector<std::string> excluded_rows;
  bool cupti_transfer_fresh = false;
  std::string csv = "h200-replay-benchmark.csv";
  std::string info_log = "kreplay-info.log";
  std::string cupti_context = "explicit";
  std::string cupti_host_reserve = "total";

  bool wants(const std::string& id) const {
    return (rows.empty() || std::find(rows.begin(), rows.end(), id) != rows.end()) &&
           std::find(excluded_rows.begin(), excluded_rows.end(), id) == excluded_rows.end();
  }
};

// Timings of one row on one device for one footprint.
struct row_result {
  int device = 0;
  footprint_t footprint{};
  std::string row;
  std::string id;
  double fraction = 0;  // of the 64 KiB blocks written per pass; 0: one word per region
  std::vector<double> snap_ms, release_ms, dispatch_ms;
  std::vector<std::vector<double>> restore_ms;  // per dispatch
  std::vector<double> staging_ms, copy_ms;      // kreplay's own phase timings, per snapshot
  std::vector<double> digest_ms, copied_mib, on_device_mib;  // kreplay v2 snapshot info, per snapshot
  std::vector<double> clean_mib;                // kreplay restore reports, per restore
  std::vector<double> projected_ms, window_ms;  // kreplay rows: each window's projection and its measured
                                                // snapshot + restores (the outcome's snapshot_ns + restore_ns)
  std::string window_line;                      // the last window's outcome line
  double checkpoint_device_mib = NAN;
  double device_held_mib = NAN;  // while the last dispatch's snapshot exists, against before the row
  double host_held_mib = NAN;
  uint64_t mismatches = 0;
  uint64_t checks = 0;
  std::string status = "ok";

  double first_dispatch() const { return dispatch_ms.empty() ? NAN : dispatch_ms[0]; }
  double first_staging() const { return staging_ms.empty() ? NAN : staging_ms[0]; }
  // Dispatches 2..D (all of them when there is only one). Built element by element: GCC 13 at -O3 reports a
  // false -Warray-bounds for the iterator-range constructor here.
  static std::vector<double> steady(const std::vector<double>& all) {
    std::vector<double> out;
    for (size_t i = all.size() > 1 ? 1 : 0; i < all.size(); ++i) {
      out.push_back(all[i]);
    }
    return out;
  }
  double snap() const { return median(steady(snap_ms)); }
  double release() const { return median(steady(release_ms)); }
  double dispatch() const { return median(steady(dispatch_ms)); }
  double restore() const {
    std::vector<double> all;
    for (size_t d = restore_ms.size() > 1 ? 1 : 0; d < restore_ms.size(); ++d) {
      all.insert(all.end(), restore_ms[d].begin(), restore_ms[d].end());
    }
    return median(all);
  }
};

// What a row does per dispatch; the driver times each call.
struct row_ops {
  std::function<bool()> snap;     // false: the row failed (status says why)
  std::function<bool()> restore;
  std::function<void()> release;  // end of the dispatch
  std::function<void()> finish;   // after the last dispatch, untimed
  bool verify = true;             // false: the row restores no region (the one-copy limits)
};

// The process's resident set, in bytes (page-locked and pageable host memory alike).
double resident_bytes() {
  FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) {
    return NAN;
  }
  char line[256];
  double kib = NAN;
  while (std::fgets(line, sizeof(line), status) != nullptr) {
    if (std::strncmp(line, "VmRSS:", 6) == 0) {
      kib = std::strtod(line + 6, nullptr);
      break;
    }
  }
  std::fclose(status);
  return kib * 1024.0;
}

double device_free_bytes() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<double>(free_bytes);
}

struct device_footprint {
  int device = 0;
  kreplay_agent_t agent{};
  footprint_t footprint{};
  std::vector<void*> regions;
  unsigned int** region_table = nullptr;  // device copy of `regions`, for the kernels
  unsigned long long* expected = nullptr;  // a checksum per 64 KiB block, taken before each snapshot
  unsigned int* mismatches = nullptr;
  unsigned int* write_list = nullptr;      // blocks the next pass writes
  std::vector<unsigned int> all_blocks;
  uint64_t rng = 0;
  unsigned int salt = 1;
  bool own_context = false;  // working in a context made for this thread: cudaSetDevice would leave it

  size_t count() const { return regions.size(); }
  unsigned blocks() const { return static_cast<unsigned>((count() + 255) / 256); }
  size_t blocks_per_region() const { return (footprint.region + kBlockBytes - 1) / kBlockBytes; }
  size_t total_blocks() const { return blocks_per_region() * count(); }

  void allocate(int ordinal, footprint_t fp) {
    device = ordinal;
    agent = kreplay::cuda::agent_of_device(ordinal);
    footprint = fp;
    rng = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(ordinal + 1);
    if (!own_context) {
      CUDA_CHECK(cudaSetDevice(device));
    }
    const size_t n = fp.total / fp.region;
    for (size_t r = 0; r < n; ++r) {
      void* ptr = nullptr;
      kreplay_status_t record = KREPLAY_STATUS_INTERNAL_ERROR;
      CUDA_CHECK(kreplay::cuda::malloc_tracked(&ptr, fp.region, &record));
      KREPLAY_CHECK(record);
      regions.push_back(ptr);
      const size_t words = fp.region / sizeof(unsigned int);
      const unsigned grid = static_cast<unsigned>(std::min<size_t>(1024, (words + 255) / 256));
      fill_region<<<grid, 256>>>(static_cast<unsigned int*>(ptr), words,
                                 (static_cast<unsigned long long>(device) << 48) ^ (r << 32));
      CUDA_CHECK_LAUNCH();
    }
    // Untracked bookkeeping: cudaMalloc directly, so kreplay never sees it.
    CUDA_CHECK(cudaMalloc(&region_table, sizeof(unsigned int*) * n));
    CUDA_CHECK(cudaMemcpy(region_table, regions.data(), sizeof(void*) * n, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc(&expected, sizeof(unsigned long long) * total_blocks()));
    CUDA_CHECK(cudaMalloc(&mismatches, sizeof(unsigned int)));
    CUDA_CHECK(cudaMalloc(&write_list, sizeof(unsigned int) * total_blocks()));
    all_blocks.resize(total_blocks());
    for (size_t b = 0; b < all_blocks.size(); ++b) {
      all_blocks[b] = static_cast<unsigned int>(b);
    }
    unsigned int salt_table[16];
    for (unsigned i = 0; i < 16; ++i) {
      salt_table[i] = word_hash(i + 77);
    }
    CUDA_CHECK(cudaMemcpyToSymbol(c_bench_salt, salt_table, sizeof(salt_table)));
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  void release_all() {
    if (!own_context) {
      CUDA_CHECK(cudaSetDevice(device));
    }
    for (void* ptr : regions) {
      kreplay_status_t record = KREPLAY_STATUS_INTERNAL_ERROR;
      CUDA_CHECK(kreplay::cuda::free_tracked(ptr, &record));
      KREPLAY_CHECK(record);
    }
    regions.clear();
    CUDA_CHECK(cudaFree(region_table));
    CUDA_CHECK(cudaFree(expected));
    CUDA_CHECK(cudaFree(mismatches));
    CUDA_CHECK(cudaFree(write_list));
  }

  void checksums(const unsigned long long* compare) {
    block_checksums<<<static_cast<unsigned>(total_blocks()), 256>>>(
        region_table, blocks_per_region(), footprint.region / sizeof(unsigned int), expected, compare, mismatches);
    CUDA_CHECK_LAUNCH();
  }

  void record_expected() {
    checksums(nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  // One word per region (fraction 0), or `fraction` of the 64 KiB blocks, drawn at random without repetition.
  void touch(double fraction) {
    if (fraction <= 0) {
      touch_first_words<<<blocks(), 256>>>(region_table, count());
      CUDA_CHECK_LAUNCH();
      CUDA_CHECK(cudaDeviceSynchronize());
      return;
    }
    size_t n = static_cast<size_t>(std::llround(fraction * static_cast<double>(all_blocks.size())));
    n = std::max<size_t>(1, std::min(n, all_blocks.size()));
    for (size_t i = 0; i < n && n < all_blocks.size(); ++i) {  // a partial Fisher-Yates shuffle
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      std::swap(all_blocks[i], all_blocks[i + rng % (all_blocks.size() - i)]);
    }
    CUDA_CHECK(cudaMemcpy(write_list, all_blocks.data(), sizeof(unsigned int) * n, cudaMemcpyHostToDevice));
    write_blocks<<<static_cast<unsigned>(n), 256>>>(region_table, blocks_per_region(),
                                                    footprint.region / sizeof(unsigned int), write_list, ++salt);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  // Blocks whose checksum differs from the one taken before the snapshot.
  unsigned int check() {
    unsigned int found = 0;
    CUDA_CHECK(cudaMemset(mismatches, 0, sizeof(unsigned int)));
    checksums(expected);
    CUDA_CHECK(cudaMemcpy(&found, mismatches, sizeof(found), cudaMemcpyDeviceToHost));
    return found;
  }
};

// `baseline_*`: readings before the row took anything (its own buffers included).
void run_row(const config_t& config, device_footprint& fp, row_result& result, row_ops ops, double baseline_free,
             double baseline_resident) {
  result.device = fp.device;
  result.footprint = fp.footprint;
  for (int d = 0; d < config.dispatches; ++d) {
    fp.record_expected();
    CUDA_CHECK(cudaDeviceSynchronize());
    double t0 = now_ms();
    bool ok = ops.snap();
    CUDA_CHECK(cudaDeviceSynchronize());
    const double snap = now_ms() - t0;
    if (!ok) {
      break;
    }
    if (d == config.dispatches - 1) {
      result.device_held_mib = (baseline_free - device_free_bytes()) / (1 << 20);
      result.host_held_mib = (resident_bytes() - baseline_resident) / (1 << 20);
    }
    // The snapshot must leave the footprint as it was: checked, untimed. (It also gives every pass the same calls
    // before its restore, a check then the pass's writes, which CUPTI's OPT_TRANSFER is documented to need; its
    // rows still fail at the second restore on driver 580.159.04, see docs/performance.md.)
    if (ops.verify) {
      result.mismatches += fp.check();
      result.checks += fp.total_blocks();
    }
    double dispatch = snap;
    std::vector<double> restores;
    for (int p = 1; p < config.passes; ++p) {
      fp.touch(result.fraction);
      t0 = now_ms();
      ok = ops.restore();
      CUDA_CHECK(cudaDeviceSynchronize());
      const double restore = now_ms() - t0;
      if (!ok) {
        break;
      }
      restores.push_back(restore);
      dispatch += restore;
      if (ops.verify) {
        result.mismatches += fp.check();
        result.checks += fp.total_blocks();
      }
    }
    if (!ok) {
      break;
    }
    fp.touch(result.fraction);  // the last pass
    t0 = now_ms();
    ops.release();
    const double release = now_ms() - t0;
    dispatch += release;
    result.snap_ms.push_back(snap);
    result.restore_ms.push_back(restores);
    result.release_ms.push_back(release);
    result.dispatch_ms.push_back(dispatch);
  }
  if (ops.finish) {
    ops.finish();
  }
}

// The process-wide policy of a kreplay row (set by device 0's thread while the others wait).
struct kreplay_mode {
  const char* id;
  const char* row;
  bool pin;
  bool sync_after_copy;
  int budget;  // 0: host only; 1: the footprint and headroom; 2: half the footprint
  bool dirty;
};

void set_policy(const kreplay_mode& mode, size_t footprint) {
  kreplay_policy_t policy = kreplay::cuda::recommended_policy();
  policy.pin_staging = mode.pin;
  policy.dirty_only = mode.dirty;
  policy.device_budget_bytes = mode.budget == 0 ? 0 : mode.budget == 1 ? footprint + (16u << 20) : footprint / 2;
  KREPLAY_CHECK(kreplay_set_policy(&policy));
}

// Closes the row's window of one dispatch and keeps what its outcome says.
void close_window(kreplay_window_t*& window, row_result& result) {
  if (window == nullptr) {
    return;
  }
  kreplay_window_outcome_t outcome{};
  outcome.struct_size = sizeof(outcome);
  KREPLAY_CHECK(kreplay_window_close(window, &outcome));
  window = nullptr;
  result.projected_ms.push_back(static_cast<double>(outcome.projected_ns) / 1e6);
  result.window_ms.push_back(static_cast<double>(outcome.snapshot_ns + outcome.restore_ns) / 1e6);
  result.window_line = t_window_line;
}

// Every kreplay dispatch is one replay window (API version 3), opened before the snapshot and closed at the end of
// the dispatch, as a profiler runs it.
row_ops kreplay_row(device_footprint& fp, row_result& result, kreplay_snapshot_t*& snapshot, bool dirty,
                    kreplay_window_t*& window, uint32_t passes) {
  row_ops ops;
  ops.snap = [&fp, &result, &snapshot, &window, passes] {
    kreplay_window_options_t options{};
    options.struct_size = sizeof(options);
    options.passes = passes;
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    kreplay_status_t status = kreplay_window_open(fp.agent, &options, &window, &reason);
    if (status != KREPLAY_STATUS_SUCCESS) {
      result.status = std::string("window_open: ") + kreplay_status_string(status) + " (" +
                      kreplay_decline_reason_string(reason) + ")";
      return false;
    }
    status = kreplay_snap(fp.agent, &snapshot, &reason);
    if (status != KREPLAY_STATUS_SUCCESS) {
      result.status = std::string("snap: ") + kreplay_status_string(status) + " (" +
                      kreplay_decline_reason_string(reason) + ")";
      return false;
    }
    kreplay_snapshot_info_t info{};
    KREPLAY_CHECK(kreplay_snapshot_info(snapshot, &info));
    if (info.regions != fp.count()) {
      result.status = "snapshot holds " + std::to_string(info.regions) + " regions";
      return false;
    }
    result.staging_ms.push_back(static_cast<double>(info.staging_ns) / 1e6);
    result.copy_ms.push_back(static_cast<double>(info.copy_ns) / 1e6);
    result.digest_ms.push_back(static_cast<double>(info.digest_ns) / 1e6);
    result.copied_mib.push_back(static_cast<double>(info.copied_bytes) / (1 << 20));
    result.on_device_mib.push_back(static_cast<double>(info.device_bytes) / (1 << 20));
    return true;
  };
  ops.restore = [&fp, &result, &snapshot, dirty] {
    kreplay_restore_report_t report{};
    kreplay_status_t status = kreplay_restore(snapshot, &report);
    // A dirty-only restore writes back what changed; the others every region and the 2 module variables.
    if (status != KREPLAY_STATUS_SUCCESS || report.skipped != 0 || report.failed != 0 ||
        (!dirty && report.restored != fp.count() + 2)) {
      result.status = std::string("restore: ") + kreplay_status_string(status) + ", restored " +
                      std::to_string(report.restored) + ", skipped " + std::to_string(report.skipped) +
                      ", failed " + std::to_string(report.failed);
      return false;
    }
    result.clean_mib.push_back(static_cast<double>(report.clean_bytes) / (1 << 20));
    return true;
  };
  ops.release = [&snapshot, &window, &result] {
    kreplay_snapshot_free(snapshot);
    snapshot = nullptr;
    close_window(window, result);
  };
  ops.finish = [&snapshot, &window, &result] {
    kreplay_snapshot_free(snapshot);  // after a failed restore; NULL otherwise
    snapshot = nullptr;
    close_window(window, result);
  };
  return ops;
}

// Per-region copies between the footprint and one host buffer, in the same split as kreplay's.
row_ops raw_row(device_footprint& fp, unsigned char* host) {
  row_ops ops;
  ops.snap = [&fp, host] {
    for (size_t r = 0; r < fp.count(); ++r) {
      CUDA_CHECK(cudaMemcpy(host + r * fp.footprint.region, fp.regions[r], fp.footprint.region,
                            cudaMemcpyDeviceToHost));
    }
    return true;
  };
  ops.restore = [&fp, host] {
    for (size_t r = 0; r < fp.count(); ++r) {
      CUDA_CHECK(cudaMemcpy(fp.regions[r], host + r * fp.footprint.region, fp.footprint.region,
                            cudaMemcpyHostToDevice));
    }
    return true;
  };
  ops.release = [] {};
  return ops;
}

// The whole footprint's bytes as one copy each way, between a contiguous device buffer of that size and `other`
// (page-locked host memory or another device buffer): the limit that any split into regions can only approach.
// It copies no region, so the row verifies nothing.
row_ops one_copy_row(size_t bytes, unsigned char* contiguous, unsigned char* other) {
  row_ops ops;
  ops.verify = false;
  ops.snap = [bytes, contiguous, other] {
    CUDA_CHECK(cudaMemcpy(other, contiguous, bytes, cudaMemcpyDefault));
    CUDA_CHECK(cudaDeviceSynchronize());  // a device-to-device cudaMemcpy returns before it completes
    return true;
  };
  ops.restore = [bytes, contiguous, other] {
    CUDA_CHECK(cudaMemcpy(contiguous, other, bytes, cudaMemcpyDefault));
    CUDA_CHECK(cudaDeviceSynchronize());
    return true;
  };
  ops.release = [] {};
  return ops;
}

row_ops reference_row(device_footprint& fp, row_result& result, std::vector<std::vector<char>>& buffers) {
  row_ops ops;
  ops.snap = [&fp, &result, &buffers] {
    buffers.clear();
    buffers.reserve(fp.count());
    for (size_t r = 0; r < fp.count(); ++r) {
      buffers.emplace_back(fp.footprint.region);  // zero-filled, as resize() did
      if (kreplay::cuda::copy(buffers.back().data(), fp.regions[r], fp.footprint.region) != KREPLAY_STATUS_SUCCESS) {
        result.status = std::string("copy: ") + kreplay::cuda::last_op_error();
        return false;
      }
    }
    return true;
  };
  ops.restore = [&fp, &result, &buffers] {
    for (size_t r = 0; r < fp.count(); ++r) {
      if (kreplay::cuda::copy(fp.regions[r], buffers[r].data(), fp.footprint.region) != KREPLAY_STATUS_SUCCESS) {
        result.status = std::string("copy: ") + kreplay::cuda::last_op_error();
        return false;
      }
    }
    return true;
  };
  ops.release = [&buffers] {
    buffers.clear();
    buffers.shrink_to_fit();
  };
  ops.finish = [&buffers] {
    buffers.clear();
    buffers.shrink_to_fit();
  };
  return ops;
}

#if defined(KREPLAY_HAVE_CUPTI_CHECKPOINT)
using NV::Cupti::Checkpoint::CUpti_Checkpoint;
using NV::Cupti::Checkpoint::cuptiCheckpointFree;
using NV::Cupti::Checkpoint::cuptiCheckpointRestore;
using NV::Cupti::Checkpoint::cuptiCheckpointSave;

size_t device_used_bytes() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes - free_bytes;
}

// One handle for the whole row, saved over with allowOverwrite: CUPTI's counterpart of retained staging.
// transfer: CUPTI_CHECKPOINT_OPT_TRANSFER (1 in cupti_checkpoint.h), CUPTI's own "restore only what changed".
// fresh: a new checkpoint per dispatch, freed at the dispatch's end (timed as its release), instead of one saved
// over with allowOverwrite (--cupti-transfer-fresh; run_gpu.sh falls back to it if the OPT_TRANSFER rows crash).
row_ops cupti_row(row_result& result, CUpti_Checkpoint& checkpoint, bool& saved, bool device_memory, CUcontext ctx,
                  const std::string& host_reserve, bool transfer, bool fresh) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // Reserving the last N MiB of device memory for the application, N = all of it, leaves the checkpoint none.
  const size_t no_device = host_reserve == "minus1" ? static_cast<size_t>(-1) : total_bytes >> 20;
  auto init = [&checkpoint, ctx, device_memory, no_device, transfer, fresh] {
    std::memset(&checkpoint, 0, sizeof(checkpoint));
    checkpoint.structSize = CUpti_Checkpoint_STRUCT_SIZE;
    checkpoint.ctx = ctx;  // the context that holds the footprint (NULL: the current one)
    checkpoint.reserveDeviceMB = device_memory ? 0 : no_device;
    checkpoint.reserveHostMB = 0;
    checkpoint.allowOverwrite = fresh ? 0 : 1;
    checkpoint.optimizations = transfer ? 1 : 0;
    checkpoint.pPriv = nullptr;
  };
  init();
  saved = false;
  auto measured = std::make_shared<bool>(false);
  row_ops ops;
  ops.snap = [&result, &checkpoint, &saved, measured] {
    // Where the first save put the checkpoint: device memory it took, read around that save only.
    const double before = *measured ? 0.0 : static_cast<double>(device_used_bytes());
    CUptiResult status = cuptiCheckpointSave(&checkpoint);
    if (status != CUPTI_SUCCESS) {
      result.status = "cuptiCheckpointSave: CUptiResult " + std::to_string(static_cast<int>(status));
      return false;
    }
    if (!*measured) {
      CUDA_CHECK(cudaDeviceSynchronize());
      result.checkpoint_device_mib = (static_cast<double>(device_used_bytes()) - before) / (1 << 20);
      *measured = true;
    }
    saved = true;
    return true;
  };
  auto restores = std::make_shared<int>(0);
  ops.restore = [&result, &checkpoint, restores] {
    CUptiResult status = cuptiCheckpointRestore(&checkpoint);
    ++*restores;
    if (status != CUPTI_SUCCESS) {
      result.status = "cuptiCheckpointRestore (restore " + std::to_string(*restores) +
                      " of the row): CUptiResult " + std::to_string(static_cast<int>(status));
      return false;
    }
    return true;
  };
  auto free_checkpoint = [&result, &checkpoint, &saved] {
    if (saved) {
      CUptiResult status = cuptiCheckpointFree(&checkpoint);
      if (status != CUPTI_SUCCESS && result.status == "ok") {
        result.status = "cuptiCheckpointFree: CUptiResult " + std::to_string(static_cast<int>(status));
      }
    }
    saved = false;
  };
  if (fresh) {
    ops.release = [free_checkpoint, init] {
      free_checkpoint();
      init();
    };
  } else {
    ops.release = [] {};
  }
  ops.finish = free_checkpoint;
  return ops;
}
#endif

std::string size_label(size_t bytes) {
  char text[32];
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) {
    std::snprintf(text, sizeof(text), "%zuG", bytes >> 30);
  } else if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) {
    std::snprintf(text, sizeof(text), "%zuM", bytes >> 20);
  } else {
    std::snprintf(text, sizeof(text), "%zuK", bytes >> 10);
  }
  return text;
}

// All rows for one footprint on one device; `sync` keeps the devices' threads on the same row.
void run_footprint(const config_t& config, int device, footprint_t footprint, barrier& sync,
                   std::vector<row_result>& out) {
  device_footprint fp;
  fp.allocate(device, footprint);
  const std::string label = size_label(footprint.total) + " in " + std::to_string(footprint.total / footprint.region) +
                            " x " + size_label(footprint.region);
  double baseline_free = 0;
  double baseline_resident = 0;
  double row_started = 0;
  auto start_row = [&](const std::string& id, const std::string& row, double fraction) {
    sync.wait();
    row_started = now_ms();
    const std::string name = fraction > 0 ? row + " @" + std::to_string(fraction * 100) + "%" : row;
    if (device == 0) {
      set_info_tag(label + " / " + name);
    }
    say("device %d: %s: row %s %s\n", device, label.c_str(), id.c_str(), name.c_str());
    row_result result;
    result.id = id;
    result.row = row;
    result.fraction = fraction;
    baseline_free = device_free_bytes();
    baseline_resident = resident_bytes();
    return result;
  };
  auto finish_row = [&](row_result& result) {
    say("device %d: %s: row %s done in %.1f s\n", device, label.c_str(), result.id.c_str(),
        (now_ms() - row_started) / 1e3);
    sync.wait();
    out.push_back(result);
  };
  auto run = [&](row_result& result, row_ops ops) {
    run_row(config, fp, result, std::move(ops), baseline_free, baseline_resident);
  };

  auto raw_pinned = [&](const char* id, const char* name) {
    row_result result = start_row(id, name, 0);
    unsigned char* host = nullptr;
    CUDA_CHECK(cudaMallocHost(&host, footprint.total));
    run(result, raw_row(fp, host));
    CUDA_CHECK(cudaFreeHost(host));
    finish_row(result);
  };
  if (config.wants("4")) {
    raw_pinned("4", "raw_pinned");
  }
  if (config.wants("4b")) {
    row_result result = start_row("4b", "raw_registered", 0);
    void* map = mmap(nullptr, footprint.total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
      std::fprintf(stderr, "mmap of %zu bytes failed\n", footprint.total);
      std::exit(2);
    }
    (void)madvise(map, footprint.total, MADV_HUGEPAGE);  // as kreplay advises its large staging
    CUDA_CHECK(cudaHostRegister(map, footprint.total, cudaHostRegisterPortable));
    run(result, raw_row(fp, static_cast<unsigned char*>(map)));
    CUDA_CHECK(cudaHostUnregister(map));
    munmap(map, footprint.total);
    finish_row(result);
  }
  for (bool on_device : {false, true}) {
    const char* id = on_device ? "4d" : "4c";
    if (!config.wants(id)) {
      continue;
    }
    row_result result = start_row(id, on_device ? "raw_d2d_one_copy" : "raw_pinned_one_copy", 0);
    unsigned char* contiguous = nullptr;
    unsigned char* other = nullptr;
    CUDA_CHECK(cudaMalloc(&contiguous, footprint.total));
    CUDA_CHECK(cudaMemset(contiguous, 0x5a, footprint.total));
    if (on_device) {
      CUDA_CHECK(cudaMalloc(&other, footprint.total));
    } else {
      CUDA_CHECK(cudaMallocHost(&other, footprint.total));
    }
    run(result, one_copy_row(footprint.total, contiguous, other));
    CUDA_CHECK(cudaFree(contiguous));
    CUDA_CHECK(on_device ? cudaFree(other) : cudaFreeHost(other));
    result.status = "limit: copies no region";
    finish_row(result);
  }

  auto kreplay_rows = [&](const kreplay_mode& mode, double fraction) {
    if (!config.wants(mode.id)) {
      return;
    }
    row_result result = start_row(mode.id, mode.row, fraction);
    // An empty pool, so the first dispatch pays for mapping (and locking) its storage as a fresh process would.
    kreplay_staging_trim(fp.agent);
    kreplay_device_trim(fp.agent);
    baseline_free = device_free_bytes();
    baseline_resident = resident_bytes();
    if (device == 0) {
      set_policy(mode, footprint.total);
      kreplay::cuda::set_sync_after_copy(mode.sync_after_copy);
    }
    sync.wait();
    kreplay_snapshot_t* snapshot = nullptr;
    kreplay_window_t* window = nullptr;
    run(result, kreplay_row(fp, result, snapshot, mode.dirty, window, static_cast<uint32_t>(config.passes)));
    sync.wait();
    if (device == 0) {
      kreplay::cuda::set_sync_after_copy(true);
    }
    kreplay_staging_trim(fp.agent);  // nothing stays pinned for the rows below (CUPTI would capture it)
    kreplay_device_trim(fp.agent);
    finish_row(result);
  };
  for (const kreplay_mode& mode : {kreplay_mode{"1", "kreplay_pinned", true, true, 0, false},
                                   kreplay_mode{"1n", "kreplay_pinned_nosync", true, false, 0, false},
                                   kreplay_mode{"2", "kreplay_pageable", false, true, 0, false},
                                   kreplay_mode{"7", "kreplay_device", true, true, 1, false},
                                   kreplay_mode{"9", "kreplay_spill", true, true, 2, false}}) {
    kreplay_rows(mode, 0);
  }
  for (double fraction : config.fractions) {
    kreplay_rows(kreplay_mode{"6", "kreplay_host_dirty", true, true, 0, true}, fraction);
    kreplay_rows(kreplay_mode{"8", "kreplay_device_dirty", true, true, 1, true}, fraction);
  }
  if (device == 0) {
    set_policy(kreplay_mode{"-", "-", true, true, 0, false}, footprint.total);
  }

  if (config.wants("3")) {
    row_result result = start_row("3", "reference_per_dispatch", 0);
    std::vector<std::vector<char>> buffers;
    run(result, reference_row(fp, result, buffers));
    finish_row(result);
  }
  if (config.wants("4r")) {
    raw_pinned("4r", "raw_pinned_repeat");
  }

  // The adapter's digest of the footprint in 64 KiB blocks (the work of a dirty-only restore's first step).
  if (config.wants("D")) {
    row_result result = start_row("D", "digest_64k_blocks", 0);
    kreplay_device_ops_t ops{};
    KREPLAY_CHECK(kreplay::cuda::make_runtime_ops(&ops));
    std::vector<kreplay_digest_t> digests(fp.total_blocks());
    std::vector<kreplay_digest_job_t> jobs;
    for (size_t r = 0; r < fp.count(); ++r) {
      jobs.push_back({fp.regions[r], footprint.region, digests.data() + r * fp.blocks_per_region()});
    }
    result.device = device;
    result.footprint = footprint;
    for (int i = 0; i < 11; ++i) {
      const double t0 = now_ms();
      const kreplay_status_t status = ops.digest(ops.user_data, fp.agent, jobs.data(), jobs.size(), kBlockBytes);
      const double ms = now_ms() - t0;
      if (status != KREPLAY_STATUS_SUCCESS) {
        result.status = std::string("digest: ") + kreplay_status_string(status);
        break;
      }
      result.snap_ms.push_back(ms);
    }
    ops.release(ops.user_data);
    if (result.status == "ok") {
      result.status = "snapshot_ms = one digest of the footprint (host clock, read-back included)";
    }
    finish_row(result);
  }

  CUcontext created = nullptr;
  const bool any_cupti = config.wants("5a") || config.wants("5b") || config.wants("5c") || config.wants("5d");
  if (any_cupti && config.cupti_context == "created") {
    // The same footprint again, allocated and filled inside a context of its own.
    fp.release_all();
    created = driver_api::create_context(device);
    fp.own_context = true;
    fp.allocate(device, footprint);
  }
  auto cupti_rows = [&](bool device_memory, bool transfer, double fraction) {
    const char* id = device_memory ? (transfer ? "5c" : "5a") : (transfer ? "5d" : "5b");
    if (!config.wants(id)) {
      return;
    }
    const char* name = device_memory ? (transfer ? "cupti_device_transfer" : "cupti_device")
                                     : (transfer ? "cupti_host_transfer" : "cupti_host");
    row_result result = start_row(id, name, fraction);
#if defined(KREPLAY_HAVE_CUPTI_CHECKPOINT)
    CUpti_Checkpoint checkpoint;
    bool saved = false;
    const CUcontext ctx = config.cupti_context == "null" ? nullptr : driver_api::current_context();
    run(result, cupti_row(result, checkpoint, saved, device_memory, ctx, config.cupti_host_reserve, transfer,
                          transfer && config.cupti_transfer_fresh));
    if (transfer && config.cupti_transfer_fresh) {
      result.status += " (a new checkpoint per dispatch)";
    }
    if (created != nullptr) {
      result.status += " (own context)";
    }
#else
    (void)transfer;
    result.device = device;
    result.footprint = footprint;
    result.status = "not built (no cupti_checkpoint.h / libcheckpoint)";
#endif
    finish_row(result);
  };
  cupti_rows(true, false, 0);
  cupti_rows(false, false, 0);
  for (double fraction : config.fractions) {
    cupti_rows(true, true, fraction);
    cupti_rows(false, true, fraction);
  }
  fp.release_all();
  if (created != nullptr) {
    driver_api::destroy_context(created);
    CUDA_CHECK(cudaSetDevice(device));
  }
}

const row_result* find_row(const std::vector<row_result>& rows, const row_result& like, const char* id,
                           double fraction = 0) {
  const row_result* found = nullptr;
  for (const row_result& c : rows) {
    if (c.id == id && c.device == like.device && c.footprint.total == like.footprint.total &&
        c.footprint.region == like.footprint.region && std::fabs(c.fraction - fraction) < 1e-9) {
      found = &c;
    }
  }
  return found;
}

void write_csv(const config_t& config, const std::vector<row_result>& rows) {
  FILE* csv = std::fopen(config.csv.c_str(), "w");
  if (csv == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", config.csv.c_str());
    std::exit(2);
  }
  std::fprintf(csv,
               "device,devices_at_once,footprint_bytes,region_bytes,regions,row_id,row,written_fraction,dispatches,"
               "passes,first_dispatch_ms,snapshot_ms,restore_ms,release_ms,dispatch_ms,snapshot_gbps,restore_gbps,"
               "dispatch_gbps,snapshot_vs_raw,restore_vs_raw,dispatch_vs_raw,snapshot_vs_link,restore_vs_link,"
               "snapshot_vs_device,restore_vs_device,kreplay_staging_ms,kreplay_first_staging_ms,kreplay_copy_ms,"
               "kreplay_digest_ms,kreplay_copied_mib,kreplay_on_device_mib,kreplay_clean_mib,device_held_mib,"
               "host_held_mib,checkpoint_device_mib,blocks_checked,mismatches,status\n");
  int devices_at_once = 0;
  for (const row_result& r : rows) {
    devices_at_once = std::max(devices_at_once, r.device + 1);
  }
  auto ratio = [](double a, const row_result* b, double (row_result::*f)() const) {
    return b != nullptr ? a / (b->*f)() : NAN;
  };
  for (const row_result& r : rows) {
    const row_result* raw = find_row(rows, r, "4");
    const row_result* link = find_row(rows, r, "4c");
    const row_result* dev = find_row(rows, r, "4d");
    const double gb = static_cast<double>(r.footprint.total) / 1e9;
    std::fprintf(csv,
                 "%d,%d,%zu,%zu,%zu,%s,%s,%g,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f,%.2f,%.2f,%.3f,%.3f,%.3f,%.3f,%.3f,"
                 "%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%" PRIu64 ",%" PRIu64 ",\"%s\"\n",
                 r.device, devices_at_once, r.footprint.total, r.footprint.region, r.footprint.total / r.footprint.region,
                 r.id.c_str(), r.row.c_str(), r.fraction, config.dispatches, config.passes, r.first_dispatch(),
                 r.snap(), r.restore(), r.release(), r.dispatch(), gb / (r.snap() / 1e3), gb / (r.restore() / 1e3),
                 gb * config.passes / (r.dispatch() / 1e3), ratio(r.snap(), raw, &row_result::snap),
                 ratio(r.restore(), raw, &row_result::restore), ratio(r.dispatch(), raw, &row_result::dispatch),
                 ratio(r.snap(), link, &row_result::snap), ratio(r.restore(), link, &row_result::restore),
                 ratio(r.snap(), dev, &row_result::snap), ratio(r.restore(), dev, &row_result::restore),
                 median(row_result::steady(r.staging_ms)), r.first_staging(), median(row_result::steady(r.copy_ms)),
                 median(row_result::steady(r.digest_ms)), median(row_result::steady(r.copied_mib)),
                 median(row_result::steady(r.on_device_mib)), median(r.clean_mib), r.device_held_mib,
                 r.host_held_mib, r.checkpoint_device_mib, r.checks, r.mismatches, r.status.c_str());
  }
  std::fclose(csv);
}

void print_table(const config_t& config, const std::vector<row_result>& rows) {
  std::printf("\n%-3s %-10s %-4s %-22s %6s %9s %9s %9s %9s %7s %7s %8s %8s %s\n", "dev", "footprint", "id", "row",
              "write%", "first_ms", "snap_ms", "rest_ms", "disp_ms", "snap/r", "rest/r", "devMiB", "hostMiB",
              "verified/status");
  for (const row_result& r : rows) {
    const row_result* raw = find_row(rows, r, "4");
    const std::string fp = size_label(r.footprint.total) + "/" + size_label(r.footprint.region);
    std::printf("%-3d %-10s %-4s %-22s %6.1f %9.2f %9.3f %9.3f %9.2f %7.3f %7.3f %8.0f %8.0f %s%s\n", r.device,
                fp.c_str(), r.id.c_str(), r.row.c_str(), r.fraction * 100, r.first_dispatch(), r.snap(), r.restore(),
                r.dispatch(), raw ? r.snap() / raw->snap() : NAN, raw ? r.restore() / raw->restore() : NAN,
                r.device_held_mib, r.host_held_mib,
                r.mismatches == 0 && r.checks > 0 ? "yes " : (r.checks == 0 ? "- " : "NO "), r.status.c_str());
  }

  // Every kreplay dispatch ran in a replay window: how close admission's projection came, and each row's last
  // outcome line as kreplay logged it.
  std::printf("\nreplay windows: admission's projection against the outcome's snapshot + restores (median of "
              "dispatches 2..D)\n%-3s %-10s %-4s %6s %13s %12s %7s\n", "dev", "footprint", "id", "write%",
              "projected_ms", "measured_ms", "ratio");
  for (const row_result& r : rows) {
    if (r.window_ms.empty()) {
      continue;
    }
    const std::string fp = size_label(r.footprint.total) + "/" + size_label(r.footprint.region);
    const double projected = median(row_result::steady(r.projected_ms));
    const double measured = median(row_result::steady(r.window_ms));
    std::printf("%-3d %-10s %-4s %6.1f %13.3f %12.3f %7.2f\n", r.device, fp.c_str(), r.id.c_str(), r.fraction * 100,
                projected, measured, projected / measured);
    std::printf("    %s\n", r.window_line.c_str());
  }

  // The bars of issues 11 to 14, each on the rows of this run.
  int devices = 0;
  for (const row_result& r : rows) {
    devices = std::max(devices, r.device + 1);
  }
  bool kreplay_rows = false;
  for (const row_result& r : rows) {
    kreplay_rows = kreplay_rows || r.id == "1" || r.id == "6" || r.id == "7" || r.id == "8" || r.id == "D";
  }
  if (!kreplay_rows) {
    return;  // e.g. the CUPTI OPT_TRANSFER rows' own process
  }
  std::printf("\nBars (%d device%s replaying at once):\n", devices, devices == 1 ? "" : "s");
  auto verdict = [](bool measured, bool met) { return !measured ? "not measured" : (met ? "met" : "NOT met"); };
  for (int d = 0; d < devices; ++d) {
    row_result at{};
    at.device = d;
    auto get = [&](size_t total, size_t region, const char* id, double fraction = 0) {
      at.footprint = {total, region};
      const row_result* r = find_row(rows, at, id, fraction);
      return r != nullptr && !r->snap_ms.empty() && r->mismatches == 0 ? r : nullptr;
    };
    const size_t G = 1ull << 30;
    const size_t M64 = 64ull << 20;
    const size_t K64 = 64ull << 10;
    {
      const row_result* k = get(G, K64, "1");
      const row_result* l = get(G, K64, "4c");
      const bool m = k && l;
      const double s = m ? k->snap() / l->snap() : NAN;
      const double t = m ? k->restore() / l->restore() : NAN;
      std::printf("  dev %d  1 GiB in 16,384 x 64 KiB, pinned snapshot / restore vs one 1 GiB pinned copy <= 1.15x: "
                  "%.3fx / %.3fx: %s\n", d, s, t, verdict(m, s <= 1.15 && t <= 1.15));
    }
    {
      const row_result* k = get(G, M64, "1");
      const row_result* l = get(G, M64, "4");
      const bool m = k && l;
      const double s = m ? k->snap() / l->snap() : NAN;
      const double t = m ? k->restore() / l->restore() : NAN;
      std::printf("  dev %d  1 GiB in 16 x 64 MiB, pinned snapshot / restore vs raw pinned (row 4) <= 1.05x: "
                  "%.3fx / %.3fx: %s\n", d, s, t, verdict(m, s <= 1.05 && t <= 1.05));
    }
    {
      const row_result* k = get(G, M64, "7");
      const row_result* l = get(G, M64, "4d");
      const row_result* c = get(G, M64, "5a");
      const bool m = k && l;
      const double s = m ? k->snap() / l->snap() : NAN;
      const double t = m ? k->restore() / l->restore() : NAN;
      std::printf("  dev %d  device tier 1 GiB, snapshot / restore vs one 1 GiB device-to-device copy <= 1.2x: "
                  "%.3fx / %.3fx: %s\n", d, s, t, verdict(m, s <= 1.2 && t <= 1.2));
      std::printf("  dev %d  device tier 1 GiB, per dispatch <= CUPTI device tier's: %.3f vs %.3f ms: %s\n", d,
                  k ? k->dispatch() : NAN, c ? c->dispatch() : NAN,
                  verdict(k && c, k && c && k->dispatch() <= c->dispatch()));
      const row_result* sp = get(G, M64, "9");
      const row_result* h = get(G, M64, "1");
      std::printf("  dev %d  spill (half budget) per dispatch between device tier and host tier: %.3f < %.3f < %.3f "
                  "ms: %s\n", d, k ? k->dispatch() : NAN, sp ? sp->dispatch() : NAN, h ? h->dispatch() : NAN,
                  verdict(k && sp && h, k && sp && h && k->dispatch() <= sp->dispatch() &&
                                            sp->dispatch() <= h->dispatch()));
    }
    {
      const row_result* hd = get(G, M64, "6", 0.01);
      const row_result* dd = get(G, M64, "8", 0.01);
      const row_result* c = get(G, M64, "5a");
      const row_result* full = get(G, M64, "1");
      const row_result* all = get(G, M64, "6", 1.0);
      std::printf("  dev %d  host-tier dirty restore, 1 %% written, <= 1.0 ms: %.3f ms: %s\n", d,
                  hd ? hd->restore() : NAN, verdict(hd != nullptr, hd && hd->restore() <= 1.0));
      std::printf("  dev %d  host-tier dirty per dispatch <= CUPTI device tier's, no device memory for the snapshot: "
                  "%.3f vs %.3f ms, %.0f MiB on the device: %s\n", d, hd ? hd->dispatch() : NAN,
                  c ? c->dispatch() : NAN, hd ? median(row_result::steady(hd->on_device_mib)) : NAN,
                  verdict(hd && c, hd && c && hd->dispatch() <= c->dispatch() &&
                                       median(row_result::steady(hd->on_device_mib)) == 0));
      std::printf("  dev %d  device-tier dirty per dispatch <= half CUPTI device tier's: %.3f vs %.3f ms: %s\n", d,
                  dd ? dd->dispatch() : NAN, c ? c->dispatch() / 2 : NAN,
                  verdict(dd && c, dd && c && dd->dispatch() <= c->dispatch() / 2));
      std::printf("  dev %d  dirty with 100 %% written, restore <= 1.1x the full restore: %.3f vs %.3f ms: %s\n", d,
                  all ? all->restore() : NAN, full ? full->restore() : NAN,
                  verdict(all && full, all && full && all->restore() <= 1.1 * full->restore()));
    }
    {
      const row_result* k = get(M64, M64, "1");
      const row_result* l = get(M64, M64, "4");
      const bool m = k && l;
      const double s = m ? k->snap() / l->snap() : NAN;
      const double t = m ? k->restore() / l->restore() : NAN;
      std::printf("  dev %d  64 MiB in one region + 2 module variables, pinned snapshot / restore vs raw pinned "
                  "<= 1.02x: %.3fx / %.3fx: %s\n", d, s, t, verdict(m, s <= 1.02 && t <= 1.02));
      const row_result* f = get(G, M64, "1");
      const double limit = devices == 1 ? 100.0 : 150.0;
      std::printf("  dev %d  first dispatch of 1 GiB pinned, staging phase <= %.0f ms: %.1f ms: %s\n", d, limit,
                  f ? f->first_staging() : NAN, verdict(f != nullptr, f && f->first_staging() <= limit));
    }
    {
      const row_result* dg = get(G, M64, "D");
      const row_result* ds = get(G, K64, "D");
      std::printf("  dev %d  digest of 1 GiB in 64 KiB blocks >= 2.5 TB/s: %.0f GB/s (16 x 64 MiB), %.0f GB/s "
                  "(16,384 x 64 KiB)\n", d, dg ? 1.073741824 / (dg->snap() / 1e3) : NAN,
                  ds ? 1.073741824 / (ds->snap() / 1e3) : NAN);
    }
  }
  (void)config;
}

size_t parse_size(const std::string& text) {
  char* end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  switch (*end) {
    case 'G': return value << 30;
    case 'M': return value << 20;
    case 'K': return value << 10;
    default: return value;
  }
}

config_t parse_args(int argc, char** argv) {
  config_t config;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--csv") {
      config.csv = value();
    } else if (arg == "--info-log") {
      config.info_log = value();
    } else if (arg == "--dispatches") {
      config.dispatches = std::atoi(value().c_str());
    } else if (arg == "--passes") {
      config.passes = std::atoi(value().c_str());
    } else if (arg == "--cupti-context") {
      config.cupti_context = value();
      if (config.cupti_context != "null" && config.cupti_context != "explicit" && config.cupti_context != "created") {
        std::fprintf(stderr, "--cupti-context takes null, explicit or created\n");
        std::exit(2);
      }
    } else if (arg == "--cupti-host-reserve") {
      config.cupti_host_reserve = value();
      if (config.cupti_host_reserve != "total" && config.cupti_host_reserve != "minus1") {
        std::fprintf(stderr, "--cupti-host-reserve takes total or minus1\n");
        std::exit(2);
      }
    } else if (arg == "--rows" || arg == "--exclude-rows") {
      // Row ids, comma-separated (see the list at the top of this file).
      std::vector<std::string>& ids = arg == "--rows" ? config.rows : config.excluded_rows;
      ids.clear();
      std::string list = value();
      for (size_t start = 0; start < list.size();) {
        size_t comma = list.find(',', start);
        ids.push_back(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        start = comma == std::string::npos ? list.size() : comma + 1;
      }
    } else if (arg == "--cupti-transfer-fresh") {
      config.cupti_transfer_fresh = true;
    } else if (arg == "--fractions") {
      // Written fractions of the 64 KiB blocks per pass, in percent, comma-separated.
      config.fractions.clear();
      std::string list = value();
      for (size_t start = 0; start < list.size();) {
        size_t comma = list.find(',', start);
        const double percent = std::atof(list.substr(start, comma == std::string::npos ? std::string::npos
                                                                                         : comma - start).c_str());
        if (!(percent > 0 && percent <= 100)) {
          std::fprintf(stderr, "bad fraction in %s (percent, above 0 and at most 100)\n", list.c_str());
          std::exit(2);
        }
        config.fractions.push_back(percent / 100);
        start = comma == std::string::npos ? list.size() : comma + 1;
      }
    } else if (arg == "--devices") {
      config.devices = std::atoi(value().c_str());
    } else if (arg == "--footprints") {
      // TOTAL:REGION[,TOTAL:REGION...], sizes with K, M or G suffixes (binary).
      config.footprints.clear();
      std::string list = value();
      size_t start = 0;
      while (start < list.size()) {
        size_t comma = list.find(',', start);
        std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        size_t colon = item.find(':');
        footprint_t fp{parse_size(item.substr(0, colon)), parse_size(item.substr(colon + 1))};
        if (colon == std::string::npos || fp.region == 0 || fp.total % fp.region != 0) {
          std::fprintf(stderr, "bad footprint %s\n", item.c_str());
          std::exit(2);
        }
        config.footprints.push_back(fp);
        start = comma == std::string::npos ? list.size() : comma + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--footprints 64M:64M,1G:64M,4G:64M,1G:64K] [--dispatches 5] [--passes 5] "
                   "[--rows 4,4b,4c,4d,1,1n,2,7,9,6,8,3,4r,D,5a,5b,5c,5d] [--exclude-rows IDS] "
                   "[--fractions 0.1,1,10,100] [--cupti-transfer-fresh] "
                   "[--devices N] [--cupti-context null|explicit|created] [--cupti-host-reserve total|minus1] "
                   "[--csv FILE] [--info-log FILE]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  if (config.dispatches < 2 || config.passes < 2) {
    std::fprintf(stderr, "need at least 2 dispatches and 2 passes\n");
    std::exit(2);
  }
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  config_t config = parse_args(argc, argv);
  int available = 0;
  CUDA_CHECK(cudaGetDeviceCount(&available));
  const int devices = config.devices > 0 ? std::min(config.devices, available) : available;
  if (devices < 1) {
    std::fprintf(stderr, "no CUDA device\n");
    return 2;
  }
  for (int d = 0; d < devices; ++d) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    say("device %d: %s, cc %d.%d, %.1f GiB, PCI %04x:%02x:%02x\n", d, prop.name, prop.major, prop.minor,
        static_cast<double>(prop.totalGlobalMem) / (1u << 30), prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    CUDA_CHECK(cudaSetDevice(d));
    CUDA_CHECK(cudaFree(nullptr));  // create the context outside every timed span
  }
  say("kreplay %s; %d dispatches of %d passes; CUPTI checkpoint rows %s (context: %s, host reserve: %s)\n",
      kreplay_version(), config.dispatches, config.passes,
#if defined(KREPLAY_HAVE_CUPTI_CHECKPOINT)
      "built",
#else
      "not built",
#endif
      config.cupti_context.c_str(), config.cupti_host_reserve.c_str());
  g_info_file = std::fopen(config.info_log.c_str(), "w");
  kreplay_set_logger(log_line, nullptr, KREPLAY_LOG_INFO);
  KREPLAY_CHECK(kreplay::cuda::install(kSymbols, sizeof(kSymbols) / sizeof(kSymbols[0])));
  kreplay_tracking_enable(true);

  std::vector<row_result> rows;
  for (const footprint_t& footprint : config.footprints) {
    barrier sync(devices);
    std::vector<std::vector<row_result>> per_device(devices);
    std::vector<std::thread> threads;
    for (int d = 0; d < devices; ++d) {
      threads.emplace_back([&, d] {
        CUDA_CHECK(cudaSetDevice(d));
        run_footprint(config, d, footprint, sync, per_device[d]);
      });
    }
    for (std::thread& thread : threads) {
      thread.join();
    }
    for (const std::vector<row_result>& device_rows : per_device) {
      rows.insert(rows.end(), device_rows.begin(), device_rows.end());
    }
    write_csv(config, rows);  // after every footprint, so a run cut short still leaves its figures
  }
  print_table(config, rows);
  const kreplay::cuda::stats_t stats = kreplay::cuda::stats();
  say("\nadapter: %" PRIu64 " copies, %.1f GB, %" PRIu64 " failed; %" PRIu64 " batches of %" PRIu64
      " copies, %.1f GB, %" PRIu64 " failed; %" PRIu64 " digests, %.1f GB, %" PRIu64 " failed; %" PRIu64
      " host locks, %" PRIu64 " unlocks, %" PRIu64 " bytes still locked; %" PRIu64 " device allocations, %" PRIu64
      " bytes still allocated; %" PRIu64 " module scans\n",
      stats.copies, static_cast<double>(stats.copy_bytes) / 1e9, stats.copy_failures, stats.batches,
      stats.batch_copies, static_cast<double>(stats.batch_bytes) / 1e9, stats.batch_failures, stats.digests,
      static_cast<double>(stats.digest_bytes) / 1e9, stats.digest_failures, stats.host_locks, stats.host_unlocks,
      stats.locked_bytes, stats.device_allocs, stats.device_bytes, stats.module_scans);
  kreplay_set_logger(nullptr, nullptr, KREPLAY_LOG_WARNING);
  if (g_info_file != nullptr) {
    std::fclose(g_info_file);
  }
  uint64_t mismatches = 0;
  for (const row_result& r : rows) {
    mismatches += r.mismatches;
  }
  say("CSV: %s; kreplay INFO lines: %s\n", config.csv.c_str(), config.info_log.c_str());
  // A row that did not restore what it captured makes its timings meaningless: say so in the exit status. A
  // CUPTI row that CUPTI refused is told apart (3), so that run_gpu.sh can try its OPT_TRANSFER rows another way.
  bool cupti_refused = false;
  for (const row_result& r : rows) {
    cupti_refused = cupti_refused || r.status.rfind("cupti", 0) == 0;
  }
  return mismatches != 0 ? 1 : (cupti_refused ? 3 : 0);
}
