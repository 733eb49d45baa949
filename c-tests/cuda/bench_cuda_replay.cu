// Benchmark of kreplay's snapshot and restore on a CUDA GPU, side by side with the reference design, the link
// limit and CUPTI's Checkpoint API (needs an NVIDIA GPU). Prints figures; asserts nothing about speed.
//
// For each footprint (bytes in regions of one size) every row runs D dispatches of P passes: one snapshot, then
// P - 1 times a kernel that changes every region followed by a restore. Only the snapshot, the restores and the
// per-dispatch release are timed (host monotonic clock, after cudaDeviceSynchronize); the kernel between
// passes is a one-word touch per region, run and synchronised outside the timed spans. After every restore a
// kernel checks that each region's first word is back to its captured value (untimed), so a row that does not
// really restore shows up in the `verified` column.
//
// Rows (see docs/performance.md, "Real GPU (H200)"):
//   1  kreplay_pinned        kreplay_snap / kreplay_restore, retained staging page-locked (pin_staging)
//   1n kreplay_pinned_nosync row 1 with the adapter's wait after each copy turned off (diagnostic: with page-locked
//                            staging cudaMemcpy is synchronous anyway, so the difference is that wait's cost)
//   2  kreplay_pageable      the same, staging left pageable
//   3  reference_per_dispatch a zero-filled std::vector<char> per region per dispatch, pageable copies through
//                            the adapter's copy op, freed at the end of the dispatch (the design before retention)
//   4  raw_pinned            cudaMemcpy per region from and to one cudaMallocHost buffer: the link limit
//   4b raw_registered        the same into mmap'd memory page-locked with cudaHostRegister (what kreplay's
//                            pinned staging is), to tell memory kind from library overhead
//   4r raw_pinned_repeat     row 4 again after rows 1-3, for the run-to-run spread
//   5a cupti_device          cuptiCheckpointSave / cuptiCheckpointRestore, checkpoint allowed in device memory
//   5b cupti_host            the same with the checkpoint kept out of device memory: reserveDeviceMB set to the
//                            device's whole memory in MiB (--cupti-host-reserve total, the default) or to -1
//                            (--cupti-host-reserve minus1, what cupti_checkpoint.h documents; refused by CUPTI 13.0)
// CUPTI's context (--cupti-context): "null" leaves CUpti_Checkpoint::ctx NULL (the current context), "explicit"
// names the current (primary) context, "created" runs the CUPTI rows on a fresh allocation of the same footprint
// in a context made with cuCtxCreate, as NVIDIA's sample does. cupti_probe tells which one this driver accepts.
// With several devices, one thread per device runs every row at the same time as the others (one agent each).
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

const kreplay_cuda::symbol_t kSymbols[] = {
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

__global__ void record_first_words(unsigned int* const* regions, size_t count, unsigned int* expected) {
  size_t r = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (r < count) {
    expected[r] = regions[r][0];
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

__global__ void check_first_words(unsigned int* const* regions, size_t count, const unsigned int* expected,
                                  unsigned int* mismatches) {
  size_t r = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (r < count && regions[r][0] != expected[r]) {
    atomicAdd(mismatches, 1u);
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

void log_line(void*, kreplay_log_level_t level, const char* message, size_t) {
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
  std::string csv = "h200-replay-benchmark.csv";
  std::string info_log = "kreplay-info.log";
  std::string cupti_context = "explicit";
  std::string cupti_host_reserve = "total";
};

// Timings of one row on one device for one footprint.
struct row_result {
  int device = 0;
  footprint_t footprint{};
  std::string row;
  std::string id;
  std::vector<double> snap_ms, release_ms, dispatch_ms;
  std::vector<std::vector<double>> restore_ms;  // per dispatch
  std::vector<double> staging_ms, copy_ms;      // kreplay's own phase timings, per snapshot
  double checkpoint_device_mib = NAN;
  uint64_t mismatches = 0;
  uint64_t checks = 0;
  std::string status = "ok";

  double first_dispatch() const { return dispatch_ms.empty() ? NAN : dispatch_ms[0]; }
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
};

struct device_footprint {
  int device = 0;
  kreplay_agent_t agent{};
  footprint_t footprint{};
  std::vector<void*> regions;
  unsigned int** region_table = nullptr;  // device copy of `regions`, for the touch and check kernels
  unsigned int* expected = nullptr;
  unsigned int* mismatches = nullptr;
  bool own_context = false;  // working in a context made for this thread: cudaSetDevice would leave it

  size_t count() const { return regions.size(); }
  unsigned blocks() const { return static_cast<unsigned>((count() + 255) / 256); }

  void allocate(int ordinal, footprint_t fp) {
    device = ordinal;
    agent = kreplay_cuda::agent_of_device(ordinal);
    footprint = fp;
    if (!own_context) {
      CUDA_CHECK(cudaSetDevice(device));
    }
    const size_t n = fp.total / fp.region;
    for (size_t r = 0; r < n; ++r) {
      void* ptr = nullptr;
      kreplay_status_t record = KREPLAY_STATUS_INTERNAL_ERROR;
      CUDA_CHECK(kreplay_cuda::malloc_tracked(&ptr, fp.region, &record));
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
    CUDA_CHECK(cudaMalloc(&expected, sizeof(unsigned int) * n));
    CUDA_CHECK(cudaMalloc(&mismatches, sizeof(unsigned int)));
    unsigned int salt[16];
    for (unsigned i = 0; i < 16; ++i) {
      salt[i] = word_hash(i + 77);
    }
    CUDA_CHECK(cudaMemcpyToSymbol(c_bench_salt, salt, sizeof(salt)));
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  void release_all() {
    if (!own_context) {
      CUDA_CHECK(cudaSetDevice(device));
    }
    for (void* ptr : regions) {
      kreplay_status_t record = KREPLAY_STATUS_INTERNAL_ERROR;
      CUDA_CHECK(kreplay_cuda::free_tracked(ptr, &record));
      KREPLAY_CHECK(record);
    }
    regions.clear();
    CUDA_CHECK(cudaFree(region_table));
    CUDA_CHECK(cudaFree(expected));
    CUDA_CHECK(cudaFree(mismatches));
  }

  void record_expected() {
    record_first_words<<<blocks(), 256>>>(region_table, count(), expected);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  void touch() {
    touch_first_words<<<blocks(), 256>>>(region_table, count());
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  unsigned int check() {
    unsigned int found = 0;
    CUDA_CHECK(cudaMemset(mismatches, 0, sizeof(unsigned int)));
    check_first_words<<<blocks(), 256>>>(region_table, count(), expected, mismatches);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(&found, mismatches, sizeof(found), cudaMemcpyDeviceToHost));
    return found;
  }
};

void run_row(const config_t& config, device_footprint& fp, row_result& result, row_ops ops) {
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
    double dispatch = snap;
    std::vector<double> restores;
    for (int p = 1; p < config.passes; ++p) {
      fp.touch();
      t0 = now_ms();
      ok = ops.restore();
      CUDA_CHECK(cudaDeviceSynchronize());
      const double restore = now_ms() - t0;
      if (!ok) {
        break;
      }
      restores.push_back(restore);
      dispatch += restore;
      result.mismatches += fp.check();
      result.checks += fp.count();
    }
    if (!ok) {
      break;
    }
    fp.touch();  // the last pass
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

void set_pinning(bool pin) {
  kreplay_policy_t policy{};
  policy.struct_size = sizeof(policy);
  policy.pin_staging = pin;
  KREPLAY_CHECK(kreplay_set_policy(&policy));
}

row_ops kreplay_row(device_footprint& fp, row_result& result, kreplay_snapshot_t*& snapshot) {
  row_ops ops;
  ops.snap = [&fp, &result, &snapshot] {
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    kreplay_status_t status = kreplay_snap(fp.agent, &snapshot, &reason);
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
    return true;
  };
  ops.restore = [&fp, &result, &snapshot] {
    kreplay_restore_report_t report{};
    kreplay_status_t status = kreplay_restore(snapshot, &report);
    if (status != KREPLAY_STATUS_SUCCESS || report.skipped != 0 || report.restored != fp.count() + 2) {
      result.status = std::string("restore: ") + kreplay_status_string(status) + ", restored " +
                      std::to_string(report.restored) + ", skipped " + std::to_string(report.skipped);
      return false;
    }
    return true;
  };
  ops.release = [&snapshot] {
    kreplay_snapshot_free(snapshot);
    snapshot = nullptr;
  };
  ops.finish = [&snapshot] {
    kreplay_snapshot_free(snapshot);  // after a failed restore; NULL otherwise
    snapshot = nullptr;
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

row_ops reference_row(device_footprint& fp, row_result& result, std::vector<std::vector<char>>& buffers) {
  row_ops ops;
  ops.snap = [&fp, &result, &buffers] {
    buffers.clear();
    buffers.reserve(fp.count());
    for (size_t r = 0; r < fp.count(); ++r) {
      buffers.emplace_back(fp.footprint.region);  // zero-filled, as resize() did
      if (kreplay_cuda::copy(buffers.back().data(), fp.regions[r], fp.footprint.region) != KREPLAY_STATUS_SUCCESS) {
        result.status = std::string("copy: ") + kreplay_cuda::last_op_error();
        return false;
      }
    }
    return true;
  };
  ops.restore = [&fp, &result, &buffers] {
    for (size_t r = 0; r < fp.count(); ++r) {
      if (kreplay_cuda::copy(fp.regions[r], buffers[r].data(), fp.footprint.region) != KREPLAY_STATUS_SUCCESS) {
        result.status = std::string("copy: ") + kreplay_cuda::last_op_error();
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
row_ops cupti_row(row_result& result, CUpti_Checkpoint& checkpoint, bool& saved, bool device_memory, CUcontext ctx,
                  const std::string& host_reserve) {
  std::memset(&checkpoint, 0, sizeof(checkpoint));
  checkpoint.structSize = CUpti_Checkpoint_STRUCT_SIZE;
  checkpoint.ctx = ctx;  // the context that holds the footprint (NULL: the current one)
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // Reserving the last N MiB of device memory for the application, N = all of it, leaves the checkpoint none.
  const size_t no_device = host_reserve == "minus1" ? static_cast<size_t>(-1) : total_bytes >> 20;
  checkpoint.reserveDeviceMB = device_memory ? 0 : no_device;
  checkpoint.reserveHostMB = 0;
  checkpoint.allowOverwrite = 1;
  checkpoint.optimizations = 0;  // no dirty-block tracking: every restore writes everything, as kreplay does
  checkpoint.pPriv = nullptr;
  saved = false;
  row_ops ops;
  ops.snap = [&result, &checkpoint, &saved] {
    // Where the first save put the checkpoint: device memory it took, read around that save only.
    const double before = saved ? 0.0 : static_cast<double>(device_used_bytes());
    CUptiResult status = cuptiCheckpointSave(&checkpoint);
    if (status != CUPTI_SUCCESS) {
      result.status = "cuptiCheckpointSave: CUptiResult " + std::to_string(static_cast<int>(status));
      return false;
    }
    if (!saved) {
      CUDA_CHECK(cudaDeviceSynchronize());
      result.checkpoint_device_mib = (static_cast<double>(device_used_bytes()) - before) / (1 << 20);
    }
    saved = true;
    return true;
  };
  ops.restore = [&result, &checkpoint] {
    CUptiResult status = cuptiCheckpointRestore(&checkpoint);
    if (status != CUPTI_SUCCESS) {
      result.status = "cuptiCheckpointRestore: CUptiResult " + std::to_string(static_cast<int>(status));
      return false;
    }
    return true;
  };
  ops.release = [] {};
  ops.finish = [&result, &checkpoint, &saved] {
    if (saved) {
      CUptiResult status = cuptiCheckpointFree(&checkpoint);
      if (status != CUPTI_SUCCESS && result.status == "ok") {
        result.status = "cuptiCheckpointFree: CUptiResult " + std::to_string(static_cast<int>(status));
      }
    }
    saved = false;
  };
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
  auto start_row = [&](const char* id, const char* row) {
    sync.wait();
    if (device == 0) {
      set_info_tag(label + " / " + row);
    }
    say("device %d: %s: row %s %s\n", device, label.c_str(), id, row);
    row_result result;
    result.id = id;
    result.row = row;
    return result;
  };
  auto finish_row = [&](row_result& result) {
    sync.wait();
    out.push_back(result);
  };

  {
    row_result result = start_row("4", "raw_pinned");
    unsigned char* host = nullptr;
    CUDA_CHECK(cudaMallocHost(&host, footprint.total));
    run_row(config, fp, result, raw_row(fp, host));
    CUDA_CHECK(cudaFreeHost(host));
    finish_row(result);
  }
  {
    row_result result = start_row("4b", "raw_registered");
    void* map = mmap(nullptr, footprint.total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
      std::fprintf(stderr, "mmap of %zu bytes failed\n", footprint.total);
      std::exit(2);
    }
    (void)madvise(map, footprint.total, MADV_HUGEPAGE);  // as kreplay advises its large staging
    CUDA_CHECK(cudaHostRegister(map, footprint.total, cudaHostRegisterPortable));
    run_row(config, fp, result, raw_row(fp, static_cast<unsigned char*>(map)));
    CUDA_CHECK(cudaHostUnregister(map));
    munmap(map, footprint.total);
    finish_row(result);
  }
  struct kreplay_mode {
    const char* id;
    const char* row;
    bool pin;
    bool sync_after_copy;
  };
  for (const kreplay_mode& mode : {kreplay_mode{"1", "kreplay_pinned", true, true},
                                   kreplay_mode{"1n", "kreplay_pinned_nosync", true, false},
                                   kreplay_mode{"2", "kreplay_pageable", false, true}}) {
    const bool pin = mode.pin;
    row_result result = start_row(mode.id, mode.row);
    // An empty pool, so the first dispatch pays for mapping (and locking) its staging as a fresh process would.
    kreplay_staging_trim(fp.agent);
    if (device == 0) {
      set_pinning(pin);
      kreplay_cuda::set_sync_after_copy(mode.sync_after_copy);
    }
    sync.wait();
    kreplay_snapshot_t* snapshot = nullptr;
    run_row(config, fp, result, kreplay_row(fp, result, snapshot));
    sync.wait();
    if (device == 0) {
      kreplay_cuda::set_sync_after_copy(true);
    }
    kreplay_staging_trim(fp.agent);  // nothing stays pinned for the rows below (CUPTI would capture it)
    finish_row(result);
  }
  {
    row_result result = start_row("3", "reference_per_dispatch");
    std::vector<std::vector<char>> buffers;
    run_row(config, fp, result, reference_row(fp, result, buffers));
    finish_row(result);
  }
  {
    row_result result = start_row("4r", "raw_pinned_repeat");
    unsigned char* host = nullptr;
    CUDA_CHECK(cudaMallocHost(&host, footprint.total));
    run_row(config, fp, result, raw_row(fp, host));
    CUDA_CHECK(cudaFreeHost(host));
    finish_row(result);
  }
  CUcontext created = nullptr;
  if (config.cupti_context == "created") {
    // The same footprint again, allocated and filled inside a context of its own.
    fp.release_all();
    created = driver_api::create_context(device);
    fp.own_context = true;
    fp.allocate(device, footprint);
  }
  for (bool device_memory : {true, false}) {
    row_result result = start_row(device_memory ? "5a" : "5b", device_memory ? "cupti_device" : "cupti_host");
#if defined(KREPLAY_HAVE_CUPTI_CHECKPOINT)
    CUpti_Checkpoint checkpoint;
    bool saved = false;
    const CUcontext ctx = config.cupti_context == "null" ? nullptr : driver_api::current_context();
    run_row(config, fp, result, cupti_row(result, checkpoint, saved, device_memory, ctx, config.cupti_host_reserve));
    if (created != nullptr) {
      result.status += " (own context)";
    }
#else
    result.device = device;
    result.footprint = footprint;
    result.status = "not built (no cupti_checkpoint.h / libcheckpoint)";
#endif
    finish_row(result);
  }
  fp.release_all();
  if (created != nullptr) {
    driver_api::destroy_context(created);
    CUDA_CHECK(cudaSetDevice(device));
  }
}

void write_csv(const config_t& config, const std::vector<row_result>& rows) {
  FILE* csv = std::fopen(config.csv.c_str(), "w");
  if (csv == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", config.csv.c_str());
    std::exit(2);
  }
  std::fprintf(csv,
               "device,footprint_bytes,region_bytes,regions,row_id,row,dispatches,passes,first_dispatch_ms,"
               "snapshot_ms,restore_ms,release_ms,dispatch_ms,snapshot_gbps,restore_gbps,dispatch_gbps,"
               "snapshot_vs_raw,restore_vs_raw,dispatch_vs_raw,kreplay_staging_ms,kreplay_copy_ms,"
               "checkpoint_device_mib,restores_checked,mismatches,status\n");
  for (const row_result& r : rows) {
    const row_result* raw = nullptr;
    for (const row_result& candidate : rows) {
      if (candidate.id == "4" && candidate.device == r.device && candidate.footprint.total == r.footprint.total &&
          candidate.footprint.region == r.footprint.region) {
        raw = &candidate;
      }
    }
    const double bytes = static_cast<double>(r.footprint.total);
    const double gb = bytes / 1e9;
    std::fprintf(csv, "%d,%zu,%zu,%zu,%s,%s,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f,%.2f,%.2f,%.3f,%.3f,%.3f,%.3f,%.3f,"
                      "%.1f,%" PRIu64 ",%" PRIu64 ",\"%s\"\n",
                 r.device, r.footprint.total, r.footprint.region, r.footprint.total / r.footprint.region, r.id.c_str(),
                 r.row.c_str(), config.dispatches, config.passes, r.first_dispatch(), r.snap(), r.restore(),
                 r.release(), r.dispatch(), gb / (r.snap() / 1e3), gb / (r.restore() / 1e3),
                 gb * config.passes / (r.dispatch() / 1e3), raw ? r.snap() / raw->snap() : NAN,
                 raw ? r.restore() / raw->restore() : NAN, raw ? r.dispatch() / raw->dispatch() : NAN,
                 median(row_result::steady(r.staging_ms)), median(row_result::steady(r.copy_ms)),
                 r.checkpoint_device_mib, r.checks, r.mismatches, r.status.c_str());
  }
  std::fclose(csv);
}

void print_table(const config_t& config, const std::vector<row_result>& rows) {
  std::printf("\n%-3s %-12s %-4s %-23s %9s %9s %9s %9s %8s %8s %7s %7s %7s %s\n", "dev", "footprint", "id", "row",
              "first_ms", "snap_ms", "rest_ms", "disp_ms", "snapGB/s", "restGB/s", "snap/r", "rest/r", "disp/r",
              "verified/status");
  for (const row_result& r : rows) {
    const row_result* raw = nullptr;
    for (const row_result& c : rows) {
      if (c.id == "4" && c.device == r.device && c.footprint.total == r.footprint.total &&
          c.footprint.region == r.footprint.region) {
        raw = &c;
      }
    }
    const double gb = static_cast<double>(r.footprint.total) / 1e9;
    const std::string fp = size_label(r.footprint.total) + "/" + size_label(r.footprint.region);
    std::printf("%-3d %-12s %-4s %-23s %9.2f %9.2f %9.2f %9.2f %8.2f %8.2f %7.3f %7.3f %7.3f %s%s\n", r.device,
                fp.c_str(), r.id.c_str(), r.row.c_str(), r.first_dispatch(), r.snap(), r.restore(), r.dispatch(),
                gb / (r.snap() / 1e3), gb / (r.restore() / 1e3), raw ? r.snap() / raw->snap() : NAN,
                raw ? r.restore() / raw->restore() : NAN, raw ? r.dispatch() / raw->dispatch() : NAN,
                r.mismatches == 0 && r.checks > 0 ? "yes " : (r.checks == 0 ? "- " : "NO "), r.status.c_str());
  }
  (void)config;
  std::printf("\nBar: steady-state pinned snapshot and restore within 1.1x of raw pinned copies (1 GiB, 4 GiB):\n");
  for (const row_result& r : rows) {
    if (r.id != "1" || r.footprint.region != (64ull << 20) || r.footprint.total < (1ull << 30)) {
      continue;
    }
    for (const row_result& raw : rows) {
      if (raw.id == "4" && raw.device == r.device && raw.footprint.total == r.footprint.total &&
          raw.footprint.region == r.footprint.region) {
        const double s = r.snap() / raw.snap();
        const double t = r.restore() / raw.restore();
        std::printf("  device %d %s: snapshot %.3fx, restore %.3fx: %s\n", r.device,
                    size_label(r.footprint.total).c_str(), s, t, s <= 1.1 && t <= 1.1 ? "met" : "NOT met");
      }
    }
  }
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
  KREPLAY_CHECK(kreplay_cuda::install(kSymbols, sizeof(kSymbols) / sizeof(kSymbols[0])));
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
  const kreplay_cuda::stats_t stats = kreplay_cuda::stats();
  say("\nadapter: %" PRIu64 " copies, %.1f GB, %" PRIu64 " failed; %" PRIu64 " host locks, %" PRIu64
      " unlocks, %" PRIu64 " bytes still locked; %" PRIu64 " module scans\n",
      stats.copies, static_cast<double>(stats.copy_bytes) / 1e9, stats.copy_failures, stats.host_locks,
      stats.host_unlocks, stats.locked_bytes, stats.module_scans);
  kreplay_set_logger(nullptr, nullptr, KREPLAY_LOG_WARNING);
  if (g_info_file != nullptr) {
    std::fclose(g_info_file);
  }
  uint64_t mismatches = 0;
  for (const row_result& r : rows) {
    mismatches += r.mismatches;
  }
  say("CSV: %s; kreplay INFO lines: %s\n", config.csv.c_str(), config.info_log.c_str());
  // A row that did not restore what it captured makes its timings meaningless: say so in the exit status.
  return mismatches == 0 ? 0 : 1;
}
