// GPU correctness test of kreplay through the CUDA adapter (needs an NVIDIA GPU; not part of the GPU-free
// suite). One thread per visible device, each its own agent, all running each phase at the same time.
//
// A "pass" is a dispatch that reads and rewrites every tracked region, a __device__ counter and a __device__
// table (and reads a __constant__ array), and yields a checksum of what it wrote. The behaviours checked:
//   restore_makes_passes_identical       P passes with a restore before each but the first: equal checksums,
//                                         and device memory byte-equal to the pre-snapshot state after each
//                                         restore (regions and module variables);
//   passes_differ_without_restore        the same P passes without restores: pairwise different checksums,
//                                         the first equal to the restored runs' (so the test above can fail);
//   freed_region_is_skipped              a region freed (record_free + cudaFree) between snapshot and
//                                         restore is not written: skipped == 1, SUCCESS, the others restored,
//                                         and a new allocation (often at the same address) keeps its contents;
// each under pageable and page-locked (pin_staging) staging, plus steady_state_maps_nothing (a second
// snapshot reuses the retained staging) and staging_pinned_as_policy_says (host_lock used or not).
// Closing line: "N passed, M failed"; the exit status is non-zero on any failure.
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "kreplay.h"
#include "kreplay/cuda.hpp"

namespace {

constexpr int kPasses = 5;
constexpr unsigned kTableSize = 256;
constexpr unsigned kMultiplier = 2654435761u;  // odd, so x -> x * a + c permutes and never sticks
// Varied sizes, two of them not multiples of a page, so packing and odd tails are exercised.
constexpr size_t kRegionBytes[] = {4u << 20, (64u << 10) + 4, 1u << 20, (16u << 20) + 256, 4096};
constexpr size_t kRegions = sizeof(kRegionBytes) / sizeof(kRegionBytes[0]);
constexpr size_t kVictim = 1;  // the region freed in freed_region_is_skipped

}  // namespace

__device__ unsigned int g_counter;
__device__ unsigned int g_table[kTableSize];
__constant__ unsigned int c_coeffs[4];

namespace {

const kreplay_cuda::symbol_t kSymbols[] = {
    {"g_counter", &g_counter, false},
    {"g_table", &g_table, false},
    {"c_coeffs", &c_coeffs, true},
};
constexpr size_t kModuleVariables = sizeof(kSymbols) / sizeof(kSymbols[0]);
constexpr size_t kModuleBytes = sizeof(unsigned int) * (1 + kTableSize + 4);

__device__ unsigned long long warp_sum(unsigned long long value) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Every pass reads the counter before the bump kernel changes it, so all blocks see one value.
__global__ void rewrite_region(unsigned int* x, size_t n, unsigned long long* sum) {
  const unsigned int counter = g_counter;
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const unsigned int v = x[i] * kMultiplier + counter + c_coeffs[i & 3];
    x[i] = v;
    local += static_cast<unsigned long long>(v) * (i + 1);
  }
  local = warp_sum(local);
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(sum, local);
  }
}

__global__ void rewrite_table(unsigned long long* sum) {
  const unsigned int t = threadIdx.x;
  const unsigned int v = g_table[t] * kMultiplier + g_counter;
  g_table[t] = v;
  unsigned long long local = warp_sum(static_cast<unsigned long long>(v) * (t + 1));
  if ((t & 31) == 0) {
    atomicAdd(sum, local);
  }
}

__global__ void bump_counter(unsigned long long* sum) {
  g_counter += 1;
  atomicAdd(sum, static_cast<unsigned long long>(g_counter));
}

void log_to_stdout(void*, kreplay_log_level_t level, const char* message, size_t) {
  static const char* const names[] = {"ERROR", "WARNING", "INFO", "TRACE"};
  say("  kreplay %s: %s\n", level <= KREPLAY_LOG_TRACE ? names[level] : "?", message);
}

uint64_t xorshift(uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

// One named behaviour on one device: passes when no expectation in it failed.
struct test_case {
  std::string name;
  int failures = 0;

  void expect(bool condition, const char* format, ...) {
    if (condition) {
      return;
    }
    ++failures;
    std::lock_guard<std::mutex> lock(print_mutex());
    std::printf("  FAIL %s: ", name.c_str());
    va_list args;
    va_start(args, format);
    std::vprintf(format, args);
    va_end(args);
    std::printf("\n");
    std::fflush(stdout);
  }
};

// Device state that a snapshot must capture: the tracked regions and the module variables.
struct state_image {
  std::vector<std::vector<unsigned char>> regions;
  std::vector<unsigned char> module;
};

struct device_harness {
  int device = 0;
  kreplay_agent_t agent{};
  std::vector<void*> regions;
  std::vector<size_t> bytes;
  unsigned long long* sums = nullptr;  // untracked: one per region, one for the table, one for the counter
  size_t tracked_bytes = 0;

  void setup(int ordinal, test_case& t) {
    device = ordinal;
    agent = kreplay_cuda::agent_of_device(ordinal);
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaMalloc(&sums, sizeof(unsigned long long) * (kRegions + 2)));
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(ordinal + 1) << 32);
    for (size_t r = 0; r < kRegions; ++r) {
      void* ptr = nullptr;
      kreplay_status_t record = KREPLAY_STATUS_INTERNAL_ERROR;
      CUDA_CHECK(kreplay_cuda::malloc_tracked(&ptr, kRegionBytes[r], &record));
      t.expect(record == KREPLAY_STATUS_SUCCESS, "record_alloc of region %zu: %s", r, kreplay_status_string(record));
      regions.push_back(ptr);
      bytes.push_back(kRegionBytes[r]);
      tracked_bytes += kRegionBytes[r];
      std::vector<unsigned int> fill(kRegionBytes[r] / sizeof(unsigned int));
      for (unsigned int& word : fill) {
        word = static_cast<unsigned int>(xorshift(seed));
      }
      CUDA_CHECK(cudaMemcpy(ptr, fill.data(), fill.size() * sizeof(unsigned int), cudaMemcpyHostToDevice));
    }
    unsigned int counter = 7;
    std::vector<unsigned int> table(kTableSize);
    for (unsigned int& word : table) {
      word = static_cast<unsigned int>(xorshift(seed));
    }
    const unsigned int coeffs[4] = {3u + static_cast<unsigned>(ordinal), 5u, 11u, 13u};
    CUDA_CHECK(cudaMemcpyToSymbol(g_counter, &counter, sizeof(counter)));
    CUDA_CHECK(cudaMemcpyToSymbol(g_table, table.data(), sizeof(unsigned int) * kTableSize));
    CUDA_CHECK(cudaMemcpyToSymbol(c_coeffs, coeffs, sizeof(coeffs)));
    CUDA_CHECK(cudaDeviceSynchronize());

    kreplay_inventory_stats_t stats{};
    t.expect(kreplay_inventory_stats(agent, &stats) == KREPLAY_STATUS_SUCCESS, "inventory_stats failed");
    t.expect(stats.regions == kRegions && stats.bytes == tracked_bytes,
             "inventory holds %zu regions / %zu bytes, expected %zu / %zu", stats.regions, stats.bytes, kRegions,
             tracked_bytes);
  }

  uint64_t run_pass() {
    CUDA_CHECK(cudaMemset(sums, 0, sizeof(unsigned long long) * (kRegions + 2)));
    for (size_t r = 0; r < regions.size(); ++r) {
      rewrite_region<<<264, 256>>>(static_cast<unsigned int*>(regions[r]), bytes[r] / sizeof(unsigned int),
                                   sums + r);
      CUDA_CHECK_LAUNCH();
    }
    rewrite_table<<<1, kTableSize>>>(sums + kRegions);
    CUDA_CHECK_LAUNCH();
    bump_counter<<<1, 1>>>(sums + kRegions + 1);
    CUDA_CHECK_LAUNCH();
    std::vector<unsigned long long> host(kRegions + 2);
    CUDA_CHECK(cudaMemcpy(host.data(), sums, sizeof(unsigned long long) * host.size(), cudaMemcpyDeviceToHost));
    uint64_t checksum = 1469598103934665603ull;
    for (unsigned long long value : host) {
      checksum = (checksum ^ value) * 1099511628211ull;
    }
    return checksum;
  }

  state_image capture() const {
    state_image image;
    for (size_t r = 0; r < regions.size(); ++r) {
      image.regions.emplace_back(bytes[r]);
      CUDA_CHECK(cudaMemcpy(image.regions.back().data(), regions[r], bytes[r], cudaMemcpyDeviceToHost));
    }
    image.module.resize(kModuleBytes);
    unsigned char* out = image.module.data();
    CUDA_CHECK(cudaMemcpyFromSymbol(out, g_counter, sizeof(unsigned int)));
    CUDA_CHECK(cudaMemcpyFromSymbol(out + sizeof(unsigned int), g_table, sizeof(unsigned int) * kTableSize));
    CUDA_CHECK(cudaMemcpyFromSymbol(out + sizeof(unsigned int) * (1 + kTableSize), c_coeffs,
                                    sizeof(unsigned int) * 4));
    return image;
  }

  // Regions listed in `skip` are not compared (their reference no longer applies).
  void expect_state(test_case& t, const state_image& reference, const char* when, size_t skip = SIZE_MAX) const {
    state_image now = capture();
    for (size_t r = 0; r < regions.size(); ++r) {
      if (r == skip) {
        continue;
      }
      t.expect(now.regions[r] == reference.regions[r], "%s: region %zu (%zu bytes) differs from the snapshot", when,
               r, bytes[r]);
    }
    t.expect(now.module == reference.module, "%s: module variables differ from the snapshot", when);
  }

  kreplay_snapshot_t* snap(test_case& t, kreplay_snapshot_info_t* info_out) {
    kreplay_snapshot_t* snapshot = nullptr;
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    kreplay_status_t status = kreplay_snap(agent, &snapshot, &reason);
    t.expect(status == KREPLAY_STATUS_SUCCESS && snapshot != nullptr, "snap: %s (%s)", kreplay_status_string(status),
             kreplay_decline_reason_string(reason));
    if (snapshot == nullptr) {
      return nullptr;
    }
    kreplay_snapshot_info_t info{};
    t.expect(kreplay_snapshot_info(snapshot, &info) == KREPLAY_STATUS_SUCCESS, "snapshot_info failed");
    t.expect(info.regions == regions.size() && info.module_variables == kModuleVariables &&
                 info.bytes == tracked_bytes + kModuleBytes,
             "snapshot holds %zu regions, %zu module variables, %zu bytes; expected %zu, %zu, %zu", info.regions,
             info.module_variables, info.bytes, regions.size(), kModuleVariables, tracked_bytes + kModuleBytes);
    if (info_out != nullptr) {
      *info_out = info;
    }
    return snapshot;
  }

  void restore(test_case& t, const kreplay_snapshot_t* snapshot, size_t expect_skipped) {
    kreplay_restore_report_t report{};
    kreplay_status_t status = kreplay_restore(snapshot, &report);
    const size_t expect_restored = regions.size() - expect_skipped + kModuleVariables;
    t.expect(status == KREPLAY_STATUS_SUCCESS, "restore: %s", kreplay_status_string(status));
    t.expect(report.restored == expect_restored && report.skipped == expect_skipped && report.failed == 0,
             "restore report: restored %zu, skipped %zu, failed %zu; expected %zu, %zu, 0", report.restored,
             report.skipped, report.failed, expect_restored, expect_skipped);
  }

  state_image reference;
  uint64_t first_checksum = 0;

  // The state is back at the start when it returns.
  void restore_makes_passes_identical(test_case& t) {
    CUDA_CHECK(cudaSetDevice(device));
    reference = capture();
    kreplay_snapshot_t* snapshot = snap(t, nullptr);
    if (snapshot == nullptr) {
      return;
    }
    uint64_t checksums[kPasses];
    checksums[0] = run_pass();
    for (int p = 1; p < kPasses; ++p) {
      restore(t, snapshot, 0);
      expect_state(t, reference, "after a restore");
      checksums[p] = run_pass();
    }
    for (int p = 1; p < kPasses; ++p) {
      t.expect(checksums[p] == checksums[0], "pass %d checksum %016" PRIx64 " != pass 0 %016" PRIx64, p,
               checksums[p], checksums[0]);
    }
    first_checksum = checksums[0];
    restore(t, snapshot, 0);
    expect_state(t, reference, "after the final restore");
    kreplay_snapshot_free(snapshot);
  }

  // Runs right after restore_makes_passes_identical, from the same state; leaves it as it found it.
  void passes_differ_without_restore(test_case& t) {
    CUDA_CHECK(cudaSetDevice(device));
    kreplay_snapshot_t* snapshot = snap(t, nullptr);
    if (snapshot == nullptr) {
      return;
    }
    uint64_t checksums[kPasses];
    for (int p = 0; p < kPasses; ++p) {
      checksums[p] = run_pass();
    }
    t.expect(checksums[0] == first_checksum,
             "first pass from the same state gave %016" PRIx64 ", the restored runs %016" PRIx64, checksums[0],
             first_checksum);
    for (int p = 0; p < kPasses; ++p) {
      for (int q = p + 1; q < kPasses; ++q) {
        t.expect(checksums[p] != checksums[q], "passes %d and %d agree (%016" PRIx64 ") without restore", p, q,
                 checksums[p]);
      }
    }
    restore(t, snapshot, 0);
    expect_state(t, reference, "restore after free-running passes");
    kreplay_snapshot_free(snapshot);
  }

  void freed_region_is_skipped(test_case& t) {
    CUDA_CHECK(cudaSetDevice(device));
    const state_image reference = capture();
    kreplay_snapshot_t* snapshot = snap(t, nullptr);
    if (snapshot == nullptr) {
      return;
    }
    (void)run_pass();
    void* victim = regions[kVictim];
    kreplay_status_t record = KREPLAY_STATUS_INTERNAL_ERROR;
    CUDA_CHECK(kreplay_cuda::free_tracked(victim, &record));
    t.expect(record == KREPLAY_STATUS_SUCCESS, "record_free: %s", kreplay_status_string(record));
    // A runtime hands freed addresses out again; when it does here, the restore must tell the new allocation
    // (another generation) from the one captured.
    void* replacement = nullptr;
    CUDA_CHECK(kreplay_cuda::malloc_tracked(&replacement, bytes[kVictim], &record));
    t.expect(record == KREPLAY_STATUS_SUCCESS, "record_alloc of the replacement: %s", kreplay_status_string(record));
    CUDA_CHECK(cudaMemset(replacement, 0xA5, bytes[kVictim]));
    CUDA_CHECK(cudaDeviceSynchronize());
    say("  device %d: freed region at %p, new allocation at %p (%s address)\n", device, victim, replacement,
        victim == replacement ? "same" : "another");
    regions[kVictim] = replacement;

    restore(t, snapshot, 1);
    expect_state(t, reference, "restore after a free", kVictim);
    std::vector<unsigned char> now(bytes[kVictim]);
    CUDA_CHECK(cudaMemcpy(now.data(), replacement, now.size(), cudaMemcpyDeviceToHost));
    size_t changed = 0;
    for (unsigned char byte : now) {
      changed += byte != 0xA5;
    }
    t.expect(changed == 0, "%zu bytes of the allocation made after the free were overwritten", changed);
    kreplay_snapshot_free(snapshot);
  }

  void teardown() {
    CUDA_CHECK(cudaSetDevice(device));
    for (void* ptr : regions) {
      kreplay_status_t record = KREPLAY_STATUS_INTERNAL_ERROR;
      CUDA_CHECK(kreplay_cuda::free_tracked(ptr, &record));
      KREPLAY_CHECK(record);
    }
    CUDA_CHECK(cudaFree(sums));
  }
};

struct results {
  int passed = 0;
  int failed = 0;

  void add(const test_case& t) {
    say("%s %s\n", t.failures == 0 ? "PASS" : "FAIL", t.name.c_str());
    (t.failures == 0 ? passed : failed) += 1;
  }
};

template <typename F>
void on_every_device(int devices, F&& body) {
  std::vector<std::thread> threads;
  for (int d = 0; d < devices; ++d) {
    threads.emplace_back([&body, d] { body(d); });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
}

void set_pinning(bool pin) {
  kreplay_policy_t policy{};
  policy.struct_size = sizeof(policy);
  policy.pin_staging = pin;
  policy.max_snapshot_bytes = 0;
  KREPLAY_CHECK(kreplay_set_policy(&policy));
}

}  // namespace

int main() {
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 1) {
    std::fprintf(stderr, "no CUDA device\n");
    return 2;
  }
  for (int d = 0; d < devices; ++d) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    say("device %d: %s, cc %d.%d, %.1f GiB\n", d, prop.name, prop.major, prop.minor,
        static_cast<double>(prop.totalGlobalMem) / (1u << 30));
  }
  kreplay_set_logger(log_to_stdout, nullptr, KREPLAY_LOG_INFO);
  KREPLAY_CHECK(kreplay_cuda::install(kSymbols, kModuleVariables));
  kreplay_tracking_enable(true);

  results totals;
  std::vector<device_harness> harness(devices);
  std::vector<test_case> setup(devices);
  on_every_device(devices, [&](int d) {
    setup[d].name = "device " + std::to_string(d) + ": allocations_are_tracked";
    harness[d].setup(d, setup[d]);
  });
  for (const test_case& t : setup) {
    totals.add(t);
  }

  for (bool pin : {false, true}) {
    const char* mode = pin ? "pinned" : "pageable";
    // Start each mode from an empty pool, so pageable staging is really pageable and pinned staging is
    // locked by this mode's first snapshot.
    for (int d = 0; d < devices; ++d) {
      kreplay_staging_trim(kreplay_cuda::agent_of_device(d));
    }
    test_case pinning{std::string("staging_pinned_as_policy_says (") + mode + ")"};
    pinning.expect(kreplay_cuda::stats().locked_bytes == 0, "%" PRIu64 " bytes still locked after trimming",
                   kreplay_cuda::stats().locked_bytes);
    set_pinning(pin);
    const kreplay_cuda::stats_t before = kreplay_cuda::stats();

    std::vector<test_case> same(devices), differ(devices);
    on_every_device(devices, [&](int d) {
      same[d].name = "device " + std::to_string(d) + ": restore_makes_passes_identical (" + mode + ")";
      harness[d].restore_makes_passes_identical(same[d]);
    });
    // Every agent's staging is idle in its pool now; the next snapshots must take it, mapping nothing. (Host
    // mappings are counted process-wide, so this is checked across all agents at once.)
    test_case steady{std::string("steady_state_maps_nothing (") + mode + ")"};
    kreplay_host_memory_stats_t maps_before{};
    kreplay_host_memory_stats_t maps_after{};
    steady.expect(kreplay_host_memory_stats(&maps_before) == KREPLAY_STATUS_SUCCESS, "host_memory_stats failed");
    on_every_device(devices, [&](int d) {
      differ[d].name = "device " + std::to_string(d) + ": passes_differ_without_restore (" + mode + ")";
      harness[d].passes_differ_without_restore(differ[d]);
    });
    steady.expect(kreplay_host_memory_stats(&maps_after) == KREPLAY_STATUS_SUCCESS, "host_memory_stats failed");
    steady.expect(maps_after.maps == maps_before.maps, "the second snapshots made %zu new host mappings",
                  maps_after.maps - maps_before.maps);
    const kreplay_cuda::stats_t after = kreplay_cuda::stats();
    if (pin) {
      pinning.expect(after.host_locks - before.host_locks == static_cast<uint64_t>(devices),
                     "%" PRIu64 " host_lock calls for %d agents", after.host_locks - before.host_locks, devices);
      pinning.expect(after.locked_bytes > 0, "no bytes locked while pinned staging is retained");
    } else {
      pinning.expect(after.host_locks == before.host_locks, "host_lock called %" PRIu64 " times with pinning off",
                     after.host_locks - before.host_locks);
    }
    pinning.expect(after.copy_failures == 0, "%" PRIu64 " failed copies (last: %s)", after.copy_failures,
                   kreplay_cuda::last_op_error());
    for (int d = 0; d < devices; ++d) {
      totals.add(same[d]);
      totals.add(differ[d]);
    }
    totals.add(steady);
    totals.add(pinning);

    std::vector<test_case> freed(devices);
    on_every_device(devices, [&](int d) {
      freed[d].name = "device " + std::to_string(d) + ": freed_region_is_skipped (" + mode + ")";
      harness[d].freed_region_is_skipped(freed[d]);
    });
    for (const test_case& t : freed) {
      totals.add(t);
    }
  }

  on_every_device(devices, [&](int d) { harness[d].teardown(); });
  for (int d = 0; d < devices; ++d) {
    kreplay_staging_trim(kreplay_cuda::agent_of_device(d));
  }
  test_case clean{"nothing_left_locked_or_tracked"};
  clean.expect(kreplay_cuda::stats().locked_bytes == 0, "%" PRIu64 " bytes still locked",
               kreplay_cuda::stats().locked_bytes);
  for (int d = 0; d < devices; ++d) {
    kreplay_inventory_stats_t stats{};
    clean.expect(kreplay_inventory_stats(kreplay_cuda::agent_of_device(d), &stats) == KREPLAY_STATUS_SUCCESS &&
                     stats.regions == 0,
                 "device %d still has %zu tracked regions", d, stats.regions);
  }
  totals.add(clean);

  std::printf("%d passed, %d failed\n", totals.passed, totals.failed);
  return totals.failed == 0 ? 0 : 1;
}
