// Several threads allocate and free through the wrapped tables while another snapshots and restores the same
// GPU. Because the wrappers record a free before the runtime's free runs, and kreplay copies a tracked region
// only while it is still recorded, no copy may touch memory the fake runtime has given back: the fake poisons
// and really frees it, so under AddressSanitizer any such copy is a use-after-free. At the end the inventory
// must be empty again.
#include "fake_hsa.hpp"

#include <atomic>
#include <thread>

namespace {

CoreApiTable live_core;
AmdExtTable live_amd;
std::atomic<bool> stop{false};
std::atomic<int> failures{0};
std::atomic<std::size_t> snapshots{0};
constexpr std::size_t kSnapshots = 50;

// Runs at least `iterations` rounds, and on until the snapshot thread has taken kSnapshots snapshots (with a
// bound, so a stuck snapshot thread fails the checks instead of hanging the test).
void allocator(unsigned seed, int iterations) {
  std::vector<void*> held;
  for (int i = 0; i < 1000000 && (i < iterations || snapshots.load() < kSnapshots); ++i) {
    seed = seed * 1103515245u + 12345u;
    const std::size_t size = 64 + (seed >> 8) % 4096;
    void* ptr = nullptr;
    hsa_status_t status = (seed & 1) != 0
                              ? live_amd.hsa_amd_memory_pool_allocate_fn(fake::pools.gpu_coarse, size, 0, &ptr)
                              : live_core.hsa_memory_allocate_fn(fake::gpu_region, size, &ptr);
    if (status != HSA_STATUS_SUCCESS) ++failures;
    held.push_back(ptr);
    // Keep a few live, free the oldest: frees race with the snapshot thread's copies.
    if (held.size() > 4) {
      void* victim = held.front();
      held.erase(held.begin());
      if (((seed >> 4) & 1) != 0 ? live_amd.hsa_amd_memory_pool_free_fn(victim) != HSA_STATUS_SUCCESS
                                  : live_core.hsa_memory_free_fn(victim) != HSA_STATUS_SUCCESS) {
        ++failures;
      }
    }
  }
  for (void* ptr : held) {
    if (live_amd.hsa_amd_memory_pool_free_fn(ptr) != HSA_STATUS_SUCCESS) ++failures;
  }
}

}  // namespace

int main() {
  fake::reset(0x58000000);
  fake::fill_tables(&live_core, &live_amd);
  const CoreApiTable captured_core = live_core;
  const AmdExtTable captured_amd = live_amd;
  const hsa_agent_t gpu = fake::agents.gpu;
  fake::add_standard_executable(gpu, "_c");
  HSA_TEST_CHECK(kreplay::hsa::install(&live_core, &live_amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  std::size_t skipped = 0;
  std::thread snapper([&] {
    while (!stop.load()) {
      kreplay_snapshot_t* snapshot = nullptr;
      if (kreplay_snap(fake::k(gpu), &snapshot, nullptr) != KREPLAY_STATUS_SUCCESS) {
        ++failures;
        continue;
      }
      ++snapshots;
      kreplay_snapshot_info_t info{};
      if (kreplay_snapshot_info(snapshot, &info) != KREPLAY_STATUS_SUCCESS || info.module_variables != 3) {
        ++failures;
      }
      for (int pass = 0; pass < 2; ++pass) {
        std::this_thread::yield();  // let frees land between the capture and the restores
        kreplay_restore_report_t report{};
        if (kreplay_restore(snapshot, &report) != KREPLAY_STATUS_SUCCESS) ++failures;
        if (report.restored + report.skipped != info.regions + info.module_variables) ++failures;
        skipped += report.skipped;
      }
      kreplay_snapshot_free(snapshot);
    }
  });
  std::vector<std::thread> allocators;
  for (unsigned t = 0; t < 3; ++t) allocators.emplace_back(allocator, 17u + t, 400);
  for (auto& thread : allocators) thread.join();
  stop.store(true);
  snapper.join();

  HSA_TEST_CHECK(failures.load() == 0);
  HSA_TEST_CHECK(snapshots.load() >= kSnapshots);
  HSA_TEST_CHECK(fake::live_allocations() == 0);
  const kreplay_inventory_stats_t stats = fake::stats(gpu);
  HSA_TEST_CHECK(stats.regions == 0 && stats.bytes == 0 && stats.overflowed == 0);
  std::printf("hsa concurrency: %zu snapshots, %zu regions skipped at restore as freed meanwhile\n",
              snapshots.load(), skipped);
  kreplay::hsa::finalize();
  return 0;
}
