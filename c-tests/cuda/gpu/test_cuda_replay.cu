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
// snapshot reuses the retained staging) and staging_pinned_as_policy_says (host_lock used or not). Then the
// version-2 behaviours:
//   batch_copies_are_exact               the adapter's copy_batch, many small (4,096 x 64 KiB plus odd sizes and
//                                         addresses), few large (4 x 64 MiB) and both in one batch (64 MiB and
//                                         small pieces), device <-> page-locked host, device <-> device, device
//                                         <-> pageable host: every byte arrives;
//   digest_self_test                     digest_selftest.hpp (host agreement, 10,000 single-bit flips, swapped
//                                         words, equal bytes);
//   device_tier_whole_footprint          device_budget_bytes = the footprint: the snapshot is on the device,
//                                         restores are exact, the storage is retained idle and device_trim gives
//                                         it back;
//   device_tier_spill                    a budget of half the footprint: part on the device, within the budget,
//                                         the rest in host staging, restores exact;
//   live_budget_whole_footprint          device_budget_percent = 100 and no fixed budget: the adapter's
//                                         device_free_bytes (cudaMemGetInfo) leaves room for the whole footprint;
//   live_budget_fixed_wins               the same with a fixed budget of half the footprint: that one holds;
//   dirty_only_restores_exactly          dirty_only with the digest op, host tier and device tier: a kernel
//                                         writes 1 % of the 64 KiB blocks at random before every restore; after
//                                         each, memory equals the original byte for byte and clean_bytes > 0; a
//                                         second dispatch re-captures only what changed (copied_bytes < bytes);
//   module_scan_cached_until_symbols_change  cache_module_scan: a second snapshot scans nothing, a new symbol
//                                         table (register_symbols) makes the next one scan;
//   ops_released_when_replaced           install again: the old set of ops is released once unused;
//   oom_retry_trims_device_storage       device 0: with kreplay's retained device storage filling the device, a
//                                         cudaMalloc through malloc_tracked fails, trims, and succeeds.
// Closing line: "N passed, M failed"; the exit status is non-zero on any failure.
#include <sys/mman.h>

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
#include "digest_selftest.hpp"
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

const kreplay::cuda::symbol_t kSymbols[] = {
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
    agent = kreplay::cuda::agent_of_device(ordinal);
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaMalloc(&sums, sizeof(unsigned long long) * (kRegions + 2)));
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(ordinal + 1) << 32);
    for (size_t r = 0; r < kRegions; ++r) {
      void* ptr = nullptr;
      kreplay_status_t record = KREPLAY_STATUS_INTERNAL_ERROR;
      CUDA_CHECK(kreplay::cuda::malloc_tracked(&ptr, kRegionBytes[r], &record));
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
    CUDA_CHECK(kreplay::cuda::free_tracked(victim, &record));
    t.expect(record == KREPLAY_STATUS_SUCCESS, "record_free: %s", kreplay_status_string(record));
    // A runtime hands freed addresses out again; when it does here, the restore must tell the new allocation
    // (another generation) from the one captured.
    void* replacement = nullptr;
    CUDA_CHECK(kreplay::cuda::malloc_tracked(&replacement, bytes[kVictim], &record));
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

  // ---- Version 2 ----------------------------------------------------------------------------------------

  // P passes from `snapshot`, each but the first after a restore that must bring back `start` exactly.
  void passes_with_restores(test_case& t, const kreplay_snapshot_t* snapshot, const state_image& start) {
    (void)run_pass();
    for (int p = 1; p < kPasses; ++p) {
      restore(t, snapshot, 0);
      expect_state(t, start, "after a restore");
      (void)run_pass();
    }
    restore(t, snapshot, 0);
    expect_state(t, start, "after the final restore");
  }

  // Device tier: `budget` bytes of device storage for this agent's snapshots (the policy is set by the caller).
  void device_tier(test_case& t, size_t budget, bool whole) {
    CUDA_CHECK(cudaSetDevice(device));
    const state_image start = capture();
    kreplay_snapshot_info_t info{};
    kreplay_snapshot_t* snapshot = snap(t, &info);
    if (snapshot == nullptr) {
      return;
    }
    t.expect(info.device_bytes > 0 && info.device_bytes <= budget,
             "%zu bytes of the snapshot on the device with a budget of %zu", info.device_bytes, budget);
    if (whole) {
      t.expect(info.device_bytes >= tracked_bytes, "only %zu of the %zu tracked bytes on the device",
               info.device_bytes, tracked_bytes);
    } else {
      t.expect(info.device_bytes < info.bytes, "a budget of %zu held the whole snapshot (%zu bytes) on the device",
               budget, info.bytes);
    }
    passes_with_restores(t, snapshot, start);
    kreplay_snapshot_free(snapshot);
    const size_t retained = kreplay_retained_device_bytes(agent);
    t.expect(retained > 0, "no device storage retained after the snapshot was freed");
    kreplay_device_trim(agent);
    t.expect(kreplay_retained_device_bytes(agent) == 0, "%zu bytes of device storage retained after device_trim",
             kreplay_retained_device_bytes(agent));
    say("  device %d: device tier, budget %zu: %zu of %zu bytes on the device, %zu retained idle before the trim\n",
        device, budget, info.device_bytes, info.bytes, retained);
  }

  // Writes `fraction` of the footprint's 64 KiB blocks (at least one), chosen at random, and the module variables,
  // as a kernel that writes a little of what it can reach would.
  void write_some_blocks(uint64_t& seed, double fraction) {
    constexpr size_t kBlock = 64u << 10;
    std::vector<std::pair<size_t, size_t>> blocks;  // region, block
    for (size_t r = 0; r < regions.size(); ++r) {
      for (size_t b = 0; b * kBlock < bytes[r]; ++b) {
        blocks.emplace_back(r, b);
      }
    }
    size_t count = static_cast<size_t>(static_cast<double>(blocks.size()) * fraction);
    count = count == 0 ? 1 : count;
    CUDA_CHECK(cudaMemset(sums, 0, sizeof(unsigned long long) * (kRegions + 2)));
    for (size_t i = 0; i < count; ++i) {
      const std::pair<size_t, size_t> pick = blocks[xorshift(seed) % blocks.size()];
      const size_t offset = pick.second * kBlock;
      const size_t n = (bytes[pick.first] - offset < kBlock ? bytes[pick.first] - offset : kBlock) / sizeof(unsigned);
      rewrite_region<<<16, 256>>>(static_cast<unsigned int*>(regions[pick.first]) + offset / sizeof(unsigned), n,
                                  sums + pick.first);
      CUDA_CHECK_LAUNCH();
    }
    rewrite_table<<<1, kTableSize>>>(sums + kRegions);
    CUDA_CHECK_LAUNCH();
    bump_counter<<<1, 1>>>(sums + kRegions + 1);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  // dirty_only is on (the caller set the policy). Two dispatches; between them 1 % of the blocks change.
  void dirty_only_restores_exactly(test_case& t) {
    CUDA_CHECK(cudaSetDevice(device));
    uint64_t seed = 0x2545F4914F6CDD1Dull ^ static_cast<uint64_t>(device + 1);
    for (int dispatch = 0; dispatch < 2; ++dispatch) {
      const state_image start = capture();
      kreplay_snapshot_info_t info{};
      kreplay_snapshot_t* snapshot = snap(t, &info);
      if (snapshot == nullptr) {
        return;
      }
      if (dispatch == 1) {
        t.expect(info.copied_bytes < info.bytes,
                 "the second dispatch re-captured %zu of %zu bytes with 1 %% of the blocks changed",
                 info.copied_bytes, info.bytes);
      }
      size_t clean = 0;
      for (int p = 1; p < kPasses; ++p) {
        write_some_blocks(seed, 0.01);
        kreplay_restore_report_t report{};
        const kreplay_status_t status = kreplay_restore(snapshot, &report);
        t.expect(status == KREPLAY_STATUS_SUCCESS && report.failed == 0 && report.skipped == 0,
                 "dirty restore: %s, failed %zu, skipped %zu", kreplay_status_string(status), report.failed,
                 report.skipped);
        clean += report.clean_bytes;
        expect_state(t, start, "after a dirty-only restore");
      }
      t.expect(clean > 0, "no restore of dispatch %d found a clean block", dispatch);
      say("  device %d: dirty-only dispatch %d: captured %zu bytes, copied %zu, digest %.3f ms; restores skipped "
          "%zu clean bytes in all\n",
          device, dispatch, info.bytes, info.copied_bytes, static_cast<double>(info.digest_ns) / 1e6, clean);
      kreplay_snapshot_free(snapshot);
      write_some_blocks(seed, 0.01);  // what the application does between two replayed dispatches
    }
  }

  // One snapshot taken and freed (for the module-scan and ops-lifetime checks).
  void snap_and_free(test_case& t) {
    CUDA_CHECK(cudaSetDevice(device));
    kreplay_snapshot_t* snapshot = snap(t, nullptr);
    kreplay_snapshot_free(snapshot);
  }

  void teardown() {
    CUDA_CHECK(cudaSetDevice(device));
    for (void* ptr : regions) {
      kreplay_status_t record = KREPLAY_STATUS_INTERNAL_ERROR;
      CUDA_CHECK(kreplay::cuda::free_tracked(ptr, &record));
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

// The adapter's recommended policy (pinned staging, module-scan cache, 64 KiB digest blocks) with a device
// budget and dirty-only as given.
void set_v2_policy(size_t device_budget, bool dirty_only) {
  kreplay_policy_t policy = kreplay::cuda::recommended_policy();
  policy.device_budget_bytes = device_budget;
  policy.dirty_only = dirty_only;
  KREPLAY_CHECK(kreplay_set_policy(&policy));
}

// ---- Adapter-only checks: a set of ops of its own, not installed ----------------------------------------

void expect_equal(test_case& t, const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                  const char* what) {
  size_t first = SIZE_MAX;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (got[i] != want[i]) {
      first = i;
      break;
    }
  }
  t.expect(got.size() == want.size() && first == SIZE_MAX, "%s: bytes differ from offset %zu", what, first);
}

// copy_batch moves every byte of many small and few large copies, in every direction kreplay uses, with odd
// sizes and addresses among them.
void batch_copies_are_exact(int device, test_case& t) {
  CUDA_CHECK(cudaSetDevice(device));
  const kreplay_agent_t agent = kreplay::cuda::agent_of_device(device);
  kreplay_device_ops_t ops{};
  KREPLAY_CHECK(kreplay::cuda::make_runtime_ops(&ops));
  uint64_t seed = 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(device);
  struct piece {
    size_t device_offset;
    size_t host_offset;
    size_t bytes;
  };
  struct layout {
    const char* name;
    std::vector<piece> pieces;
    size_t span;
  };
  std::vector<layout> layouts(4);
  layouts[0].name = "4,096 x 64 KiB and odd pieces";
  size_t offset = 0;
  for (size_t i = 0; i < 4096; ++i, offset += 64u << 10) {
    layouts[0].pieces.push_back({offset, offset, 64u << 10});
  }
  // A module variable's 13 bytes at an odd address, a region with a 4-byte tail, and a piece whose two sides are
  // misaligned differently.
  layouts[0].pieces.push_back({offset + 4, offset + 4, 13});
  layouts[0].pieces.push_back({offset + 256, offset + 256, (64u << 10) + 4});
  layouts[0].pieces.push_back({offset + (128u << 10) + 1, offset + (128u << 10) + 3, 100000});
  layouts[0].span = offset + (256u << 10);
  layouts[1].name = "4 x 64 MiB";
  for (size_t i = 0; i < 4; ++i) {
    layouts[1].pieces.push_back({i * (64u << 20), i * (64u << 20), 64u << 20});
  }
  layouts[1].span = 256u << 20;
  // Both kinds in one batch: the 64 MiB copy on the copy engines (a side stream) while the kernel copies the
  // small pieces, as for a region and its module variables.
  layouts[2].name = "64 MiB with small pieces";
  layouts[2].pieces.push_back({0, 0, 64u << 20});
  layouts[2].pieces.push_back({(64u << 20) + 4, (64u << 20) + 4, 13});
  layouts[2].pieces.push_back({(64u << 20) + 257, (64u << 20) + 259, 100000});
  layouts[2].span = (64u << 20) + (256u << 10);
  // Within the device the kernel takes copies below 32 MiB: eight 4 MiB pieces by the kernel while a 40 MiB one
  // goes to the copy engines, with an odd piece; over the link the 4 MiB pieces go to the engines.
  layouts[3].name = "8 x 4 MiB, 40 MiB and an odd piece";
  for (size_t i = 0; i < 8; ++i) {
    layouts[3].pieces.push_back({i * (4u << 20), i * (4u << 20), 4u << 20});
  }
  layouts[3].pieces.push_back({32u << 20, 32u << 20, 40u << 20});
  layouts[3].pieces.push_back({(72u << 20) + 4, (72u << 20) + 4, 13});
  layouts[3].span = (72u << 20) + (256u << 10);

  kreplay_copy_t bad{nullptr, nullptr, 1};
  t.expect(ops.copy_batch(ops.user_data, kreplay_agent_t{0}, &bad, 1) == KREPLAY_STATUS_INVALID_ARGUMENT,
           "copy_batch for agent 0 was not refused");
  kreplay_digest_t digest_out{};
  kreplay_digest_job_t job{&bad, 1, &digest_out};
  t.expect(ops.digest(ops.user_data, agent, &job, 1, 3000) == KREPLAY_STATUS_INVALID_ARGUMENT,
           "digest with 3000-byte blocks was not refused");

  for (const layout& l : layouts) {
    std::vector<unsigned char> pattern(l.span);
    for (unsigned char& byte : pattern) {
      byte = static_cast<unsigned char>(xorshift(seed));
    }
    unsigned char* dev = nullptr;
    CUDA_CHECK(cudaMalloc(&dev, l.span));
    void* storage = nullptr;
    KREPLAY_CHECK(ops.device_alloc(ops.user_data, agent, l.span, &storage));
    void* map = mmap(nullptr, l.span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
      t.expect(false, "mmap of %zu bytes failed", l.span);
      return;
    }
    unsigned char* host = static_cast<unsigned char*>(map);
    // Only the pieces' bytes are compared; the rest of each buffer is whatever it held.
    auto from_device = [&](const void* ptr) {
      std::vector<unsigned char> all(l.span);
      CUDA_CHECK(cudaMemcpy(all.data(), ptr, l.span, cudaMemcpyDeviceToHost));
      return all;
    };
    auto masked = [&](const std::vector<unsigned char>& all, bool by_host) {
      std::vector<unsigned char> got(l.span, 0);
      std::vector<unsigned char> want(l.span, 0);
      for (const piece& p : l.pieces) {
        const size_t at = by_host ? p.host_offset : p.device_offset;
        std::memcpy(got.data() + at, all.data() + at, p.bytes);
        std::memcpy(want.data() + at, pattern.data() + p.device_offset, p.bytes);
      }
      return std::make_pair(got, want);
    };
    for (bool pinned : {true, false}) {
      if (pinned) {
        KREPLAY_CHECK(ops.host_lock(ops.user_data, host, l.span));
      }
      std::vector<kreplay_copy_t> down, up, to_storage, from_storage;
      for (const piece& p : l.pieces) {
        down.push_back({host + p.host_offset, dev + p.device_offset, p.bytes});
        up.push_back({dev + p.device_offset, host + p.host_offset, p.bytes});
        to_storage.push_back({static_cast<unsigned char*>(storage) + p.host_offset, dev + p.device_offset, p.bytes});
        from_storage.push_back({dev + p.device_offset, static_cast<unsigned char*>(storage) + p.host_offset, p.bytes});
      }
      const std::string tag = std::string(l.name) + (pinned ? ", page-locked" : ", pageable");
      CUDA_CHECK(cudaMemcpy(dev, pattern.data(), l.span, cudaMemcpyHostToDevice));
      std::memset(host, 0, l.span);
      t.expect(ops.copy_batch(ops.user_data, agent, down.data(), down.size()) == KREPLAY_STATUS_SUCCESS,
               "%s: device to host batch failed (%s)", tag.c_str(), kreplay::cuda::last_op_error());
      auto r = masked(std::vector<unsigned char>(host, host + l.span), true);
      expect_equal(t, r.first, r.second, (tag + ", device to host").c_str());

      CUDA_CHECK(cudaMemset(dev, 0, l.span));
      t.expect(ops.copy_batch(ops.user_data, agent, up.data(), up.size()) == KREPLAY_STATUS_SUCCESS,
               "%s: host to device batch failed (%s)", tag.c_str(), kreplay::cuda::last_op_error());
      r = masked(from_device(dev), false);
      expect_equal(t, r.first, r.second, (tag + ", host to device").c_str());

      if (pinned) {
        CUDA_CHECK(cudaMemset(storage, 0, l.span));
        t.expect(ops.copy_batch(ops.user_data, agent, to_storage.data(), to_storage.size()) == KREPLAY_STATUS_SUCCESS,
                 "%s: device to storage batch failed", tag.c_str());
        r = masked(from_device(storage), true);
        expect_equal(t, r.first, r.second, (std::string(l.name) + ", device to device storage").c_str());
        CUDA_CHECK(cudaMemset(dev, 0, l.span));
        t.expect(
            ops.copy_batch(ops.user_data, agent, from_storage.data(), from_storage.size()) == KREPLAY_STATUS_SUCCESS,
            "%s: storage to device batch failed", tag.c_str());
        r = masked(from_device(dev), false);
        expect_equal(t, r.first, r.second, (std::string(l.name) + ", device storage to device").c_str());
        KREPLAY_CHECK(ops.host_unlock(ops.user_data, host, l.span));
      }
    }
    munmap(map, l.span);
    KREPLAY_CHECK(ops.device_free(ops.user_data, agent, storage, l.span));
    CUDA_CHECK(cudaFree(dev));
  }
  const uint64_t releases = kreplay::cuda::stats().releases;
  ops.release(ops.user_data);
  // At least: the other devices' threads release their own sets at the same time.
  t.expect(kreplay::cuda::stats().releases >= releases + 1, "release did not run");
}

void digest_self_test(int device, test_case& t) {
  CUDA_CHECK(cudaSetDevice(device));
  kreplay_device_ops_t ops{};
  KREPLAY_CHECK(kreplay::cuda::make_runtime_ops(&ops));
  const digest_selftest::result r =
      digest_selftest::run(ops, kreplay::cuda::agent_of_device(device), 10000, 0xD1CE5EEDull + device);
  ops.release(ops.user_data);
  t.expect(r.failures == 0, "%" PRIu64 " of %" PRIu64 " trials failed; first: %s", r.failures, r.trials,
           r.first_failure.c_str());
  t.expect(r.trials >= 10000, "only %" PRIu64 " trials ran", r.trials);
  say("  device %d: digest self-test, %" PRIu64 " trials, %" PRIu64 " failures\n", device, r.trials, r.failures);
}

// With kreplay holding idle device storage that the application needs, malloc_tracked's first cudaMalloc fails,
// it trims kreplay's storage and its second succeeds. Device 0 only: it fills the device.
void oom_retry_trims_device_storage(device_harness& h, test_case& t) {
  CUDA_CHECK(cudaSetDevice(h.device));
  constexpr size_t kGiB = 1ull << 30;
  set_v2_policy(8 * kGiB, false);
  std::vector<void*> tracked;
  for (int i = 0; i < 8; ++i) {
    void* p = nullptr;
    kreplay_status_t record = KREPLAY_STATUS_INTERNAL_ERROR;
    CUDA_CHECK(kreplay::cuda::malloc_tracked(&p, 256u << 20, &record));
    tracked.push_back(p);
  }
  kreplay_snapshot_info_t info{};
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  t.expect(kreplay_snap(h.agent, &snapshot, &reason) == KREPLAY_STATUS_SUCCESS, "snap declined: %s",
           kreplay_decline_reason_string(reason));
  if (snapshot != nullptr) {
    KREPLAY_CHECK(kreplay_snapshot_info(snapshot, &info));
  }
  kreplay_snapshot_free(snapshot);
  for (void* p : tracked) {
    CUDA_CHECK(kreplay::cuda::free_tracked(p));
  }
  const size_t retained = kreplay_retained_device_bytes(h.agent);
  t.expect(retained >= 2 * kGiB, "only %zu bytes of device storage retained (snapshot: %zu on the device)", retained,
           info.device_bytes);
  // Take everything but 1 GiB, so that a 1.5 GiB allocation fits only once kreplay's 2 GiB are given back.
  std::vector<void*> hog;
  size_t free_bytes = 0;
  size_t total = 0;
  for (;;) {
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    if (free_bytes <= kGiB + (64u << 20)) {
      break;
    }
    void* p = nullptr;
    const size_t take = free_bytes - kGiB > kGiB ? kGiB : free_bytes - kGiB;
    if (cudaMalloc(&p, take) != cudaSuccess) {
      (void)cudaGetLastError();
      break;
    }
    hog.push_back(p);
  }
  const uint64_t retries = kreplay::cuda::stats().oom_retries;
  void* wanted = nullptr;
  kreplay_status_t record = KREPLAY_STATUS_INTERNAL_ERROR;
  const cudaError_t error = kreplay::cuda::malloc_tracked(&wanted, 3 * kGiB / 2, &record);
  t.expect(error == cudaSuccess && record == KREPLAY_STATUS_SUCCESS,
           "malloc_tracked of 1.5 GiB with %zu bytes free and %zu retained: %s / %s", free_bytes, retained,
           cudaGetErrorName(error), kreplay_status_string(record));
  t.expect(kreplay::cuda::stats().oom_retries == retries + 1, "%" PRIu64 " retries, expected 1",
           kreplay::cuda::stats().oom_retries - retries);
  t.expect(kreplay_retained_device_bytes(h.agent) == 0, "%zu bytes still retained after the trim",
           kreplay_retained_device_bytes(h.agent));
  t.expect(cudaGetLastError() == cudaSuccess, "the failed first cudaMalloc left its error behind");
  say("  device %d: %zu bytes retained, %zu free before malloc_tracked(1.5 GiB): %s after %" PRIu64 " retry\n",
      h.device, retained, free_bytes, cudaGetErrorName(error), kreplay::cuda::stats().oom_retries - retries);
  if (error == cudaSuccess) {
    CUDA_CHECK(kreplay::cuda::free_tracked(wanted));
  }
  for (void* p : hog) {
    CUDA_CHECK(cudaFree(p));
  }
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
  KREPLAY_CHECK(kreplay::cuda::install(kSymbols, kModuleVariables));
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
      kreplay_staging_trim(kreplay::cuda::agent_of_device(d));
    }
    test_case pinning{std::string("staging_pinned_as_policy_says (") + mode + ")"};
    pinning.expect(kreplay::cuda::stats().locked_bytes == 0, "%" PRIu64 " bytes still locked after trimming",
                   kreplay::cuda::stats().locked_bytes);
    set_pinning(pin);
    const kreplay::cuda::stats_t before = kreplay::cuda::stats();

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
    const kreplay::cuda::stats_t after = kreplay::cuda::stats();
    if (pin) {
      pinning.expect(after.host_locks - before.host_locks == static_cast<uint64_t>(devices),
                     "%" PRIu64 " host_lock calls for %d agents", after.host_locks - before.host_locks, devices);
      pinning.expect(after.locked_bytes > 0, "no bytes locked while pinned staging is retained");
    } else {
      pinning.expect(after.host_locks == before.host_locks, "host_lock called %" PRIu64 " times with pinning off",
                     after.host_locks - before.host_locks);
    }
    pinning.expect(after.copy_failures == 0, "%" PRIu64 " failed copies (last: %s)", after.copy_failures,
                   kreplay::cuda::last_op_error());
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

  // ---- Version 2 --------------------------------------------------------------------------------------------
  {
    std::vector<test_case> batch(devices), digest(devices);
    on_every_device(devices, [&](int d) {
      batch[d].name = "device " + std::to_string(d) + ": batch_copies_are_exact";
      batch_copies_are_exact(d, batch[d]);
      digest[d].name = "device " + std::to_string(d) + ": digest_self_test";
      digest_self_test(d, digest[d]);
    });
    for (int d = 0; d < devices; ++d) {
      totals.add(batch[d]);
      totals.add(digest[d]);
    }
  }

  const size_t footprint = harness[0].tracked_bytes + kModuleBytes;
  for (bool whole : {true, false}) {
    const size_t budget = whole ? footprint : footprint / 2;
    set_v2_policy(budget, false);
    std::vector<test_case> tier(devices);
    on_every_device(devices, [&](int d) {
      tier[d].name = "device " + std::to_string(d) + (whole ? ": device_tier_whole_footprint" : ": device_tier_spill");
      harness[d].device_tier(tier[d], budget, whole);
    });
    for (const test_case& t : tier) {
      totals.add(t);
    }
  }
  // Live budgets: the adapter's device_free_bytes (cudaMemGetInfo) sizes the device tier. 100 percent of a
  // mostly free GPU holds the whole footprint; with a fixed budget of half the footprint, the fixed one wins.
  for (bool whole : {true, false}) {
    kreplay_policy_t policy = kreplay::cuda::recommended_policy();
    policy.device_budget_bytes = whole ? 0 : footprint / 2;
    policy.device_budget_percent = 100;
    KREPLAY_CHECK(kreplay_set_policy(&policy));
    std::vector<test_case> live(devices);
    on_every_device(devices, [&](int d) {
      live[d].name =
          "device " + std::to_string(d) + (whole ? ": live_budget_whole_footprint" : ": live_budget_fixed_wins");
      harness[d].device_tier(live[d], whole ? SIZE_MAX : footprint / 2, whole);
    });
    for (const test_case& t : live) {
      totals.add(t);
    }
  }
  set_v2_policy(0, false);
  {
    test_case given_back{"device_storage_given_back_by_trim"};
    given_back.expect(kreplay::cuda::stats().device_bytes == 0, "%" PRIu64 " bytes of device storage still allocated",
                      kreplay::cuda::stats().device_bytes);
    totals.add(given_back);
  }

  for (bool on_device : {false, true}) {
    set_v2_policy(on_device ? footprint : 0, true);
    std::vector<test_case> dirty(devices);
    on_every_device(devices, [&](int d) {
      dirty[d].name = "device " + std::to_string(d) + ": dirty_only_restores_exactly (" +
                      (on_device ? "device tier)" : "host tier)");
      harness[d].dirty_only_restores_exactly(dirty[d]);
      kreplay_device_trim(harness[d].agent);
    });
    for (const test_case& t : dirty) {
      totals.add(t);
    }
  }

  {
    set_v2_policy(0, false);
    test_case cache{"module_scan_cached_until_symbols_change"};
    std::vector<test_case> rounds(devices);
    auto round = [&] {
      on_every_device(devices, [&](int d) {
        rounds[d].name = "snapshot round";
        harness[d].snap_and_free(rounds[d]);
      });
      for (const test_case& t : rounds) {
        cache.failures += t.failures;
      }
      return kreplay::cuda::stats().module_scans;
    };
    const uint64_t first = round();
    const uint64_t second = round();
    cache.expect(second == first, "a second snapshot of each agent scanned %" PRIu64 " times with the cache on",
                 second - first);
    KREPLAY_CHECK(kreplay::cuda::register_symbols(kSymbols, kModuleVariables));
    const uint64_t third = round();
    cache.expect(third - second == static_cast<uint64_t>(devices),
                 "after a new symbol table %" PRIu64 " scans for %d agents", third - second, devices);
    totals.add(cache);

    test_case released{"ops_released_when_replaced"};
    const uint64_t before = kreplay::cuda::stats().releases;
    KREPLAY_CHECK(kreplay::cuda::install(kSymbols, kModuleVariables));
    // The old ops page-locked the retained staging: they stay in use until it is gone.
    for (int d = 0; d < devices; ++d) {
      kreplay_staging_trim(kreplay::cuda::agent_of_device(d));
      kreplay_device_trim(kreplay::cuda::agent_of_device(d));
    }
    (void)round();
    released.expect(kreplay::cuda::stats().releases == before + 1, "%" PRIu64 " releases after replacing the ops once",
                    kreplay::cuda::stats().releases - before);
    totals.add(released);
  }

  {
    test_case oom{"device 0: oom_retry_trims_device_storage"};
    oom_retry_trims_device_storage(harness[0], oom);
    totals.add(oom);
    set_v2_policy(0, false);
  }

  on_every_device(devices, [&](int d) { harness[d].teardown(); });
  for (int d = 0; d < devices; ++d) {
    kreplay_staging_trim(kreplay::cuda::agent_of_device(d));
  }
  kreplay_device_trim_all();
  test_case clean{"nothing_left_locked_or_tracked"};
  clean.expect(kreplay::cuda::stats().device_bytes == 0, "%" PRIu64 " bytes of device storage still allocated",
               kreplay::cuda::stats().device_bytes);
  clean.expect(kreplay::cuda::stats().locked_bytes == 0, "%" PRIu64 " bytes still locked",
               kreplay::cuda::stats().locked_bytes);
  for (int d = 0; d < devices; ++d) {
    kreplay_inventory_stats_t stats{};
    clean.expect(kreplay_inventory_stats(kreplay::cuda::agent_of_device(d), &stats) == KREPLAY_STATUS_SUCCESS &&
                     stats.regions == 0,
                 "device %d still has %zu tracked regions", d, stats.regions);
  }
  totals.add(clean);

  std::printf("%d passed, %d failed\n", totals.passed, totals.failed);
  return totals.failed == 0 ? 0 : 1;
}
