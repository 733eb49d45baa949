// Allocations made through the wrapped tables reach kreplay's inventory: coarse-grained device memory is
// tracked, fine-grained, kernarg and executable allocations are not; a free takes the region out before the
// runtime frees it, and a free the runtime refuses leaves it tracked with its generation; an allocation refused
// for lack of memory is retried once after kreplay gives back its idle device storage.
#include "fake_hsa.hpp"

namespace {

CoreApiTable live_core;
AmdExtTable live_amd;

// Inside the fake's free: what kreplay's inventory held for the GPU at that moment.
bool free_hook_ran = false;
std::size_t regions_during_free = 0;
void observe_free(void* /*ptr*/) {
  free_hook_ran = true;
  regions_during_free = fake::stats(fake::agents.gpu).regions;
}

void* pool_alloc(hsa_amd_memory_pool_t pool, std::size_t size, std::uint32_t flags = 0) {
  void* ptr = nullptr;
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_allocate_fn(pool, size, flags, &ptr) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(ptr != nullptr);
  return ptr;
}

kreplay_decline_reason_t snap_outcome(hsa_agent_t agent) {
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  kreplay_status_t status = kreplay_snap(fake::k(agent), &snapshot, &reason);
  HSA_TEST_CHECK((status == KREPLAY_STATUS_SUCCESS) == (snapshot != nullptr));
  kreplay_snapshot_free(snapshot);
  return reason;
}

}  // namespace

int main() {
  fake::reset(0x52000000);
  fake::fill_tables(&live_core, &live_amd);
  // The host keeps a copy of the tables as the runtime gave them, before any tool wraps them.
  const CoreApiTable captured_core = live_core;
  const AmdExtTable captured_amd = live_amd;
  HSA_TEST_CHECK(kreplay::hsa::install(&live_core, &live_amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  const hsa_agent_t gpu = fake::agents.gpu;
  const hsa_agent_t cpu = fake::agents.cpu;

  // While tracking is off, the wrappers record nothing and ask the runtime nothing.
  void* before = pool_alloc(fake::pools.gpu_coarse, 128);
  HSA_TEST_CHECK(fake::state.pointer_info_calls == 0);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 0);
  kreplay_tracking_enable(true);

  // Classification.
  void* coarse = pool_alloc(fake::pools.gpu_coarse, 4096);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1 && fake::stats(gpu).bytes == 4096);
  void* fine = pool_alloc(fake::pools.gpu_fine, 1024);
  void* kernarg = pool_alloc(fake::pools.cpu_kernarg, 256);
  void* host_fine = pool_alloc(fake::pools.cpu_fine, 256);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1);
  HSA_TEST_CHECK(fake::stats(cpu).regions == 0);
  const int queries_before_executable = fake::state.pointer_info_calls;
  void* executable = pool_alloc(fake::pools.gpu_coarse, 8192, KREPLAY_ALLOC_FLAG_EXECUTABLE);
  HSA_TEST_CHECK(fake::state.pointer_info_calls == queries_before_executable);  // filtered before any query
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1);
  void* region_alloc = nullptr;  // hsa_memory_allocate: no flags, classified like the rest
  HSA_TEST_CHECK(live_core.hsa_memory_allocate_fn(fake::gpu_region, 2048, &region_alloc) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 2 && fake::stats(gpu).bytes == 4096 + 2048);

  // A free removes the region before the runtime's free runs.
  fake::state.on_free = &observe_free;
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(coarse) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(free_hook_ran && regions_during_free == 1);
  free_hook_ran = false;
  HSA_TEST_CHECK(live_core.hsa_memory_free_fn(region_alloc) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(free_hook_ran && regions_during_free == 0);
  fake::state.on_free = nullptr;
  HSA_TEST_CHECK(fake::stats(gpu).regions == 0 && fake::stats(gpu).bytes == 0);

  // A free the runtime refuses leaves the allocation tracked, with its size.
  void* kept = pool_alloc(fake::pools.gpu_coarse, 512);
  fake::state.fail_next_frees = 1;
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(kept) == HSA_STATUS_ERROR);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1 && fake::stats(gpu).bytes == 512);
  void* kept_region = nullptr;
  HSA_TEST_CHECK(live_core.hsa_memory_allocate_fn(fake::gpu_region, 300, &kept_region) == HSA_STATUS_SUCCESS);
  fake::state.fail_next_frees = 1;
  HSA_TEST_CHECK(live_core.hsa_memory_free_fn(kept_region) == HSA_STATUS_ERROR);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 2 && fake::stats(gpu).bytes == 812);
  HSA_TEST_CHECK(snap_outcome(gpu) == KREPLAY_DECLINE_NONE);
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(kept) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(live_core.hsa_memory_free_fn(kept_region) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 0);

  // A refused free puts the allocation back with the generation it had (kreplay_record_free_undo), without
  // asking the runtime anything: a snapshot taken before the free still restores it afterwards (a region
  // recorded anew would carry a new generation and be skipped), even when the runtime could not describe it.
  void* kept_again = pool_alloc(fake::pools.gpu_coarse, 64);
  static_cast<unsigned char*>(kept_again)[0] = 0x5A;
  kreplay_snapshot_t* before_free = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  HSA_TEST_CHECK(kreplay_snap(fake::k(gpu), &before_free, &reason) == KREPLAY_STATUS_SUCCESS);
  fake::state.fail_next_frees = 1;
  fake::state.fail_pointer_info = true;
  const int queries = fake::state.pointer_info_calls;
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(kept_again) == HSA_STATUS_ERROR);
  fake::state.fail_pointer_info = false;
  HSA_TEST_CHECK(fake::state.pointer_info_calls == queries);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1 && fake::stats(gpu).bytes == 64 && fake::stats(gpu).overflowed == 0);
  static_cast<unsigned char*>(kept_again)[0] = 0xA5;
  kreplay_restore_report_t report{};
  HSA_TEST_CHECK(kreplay_restore(before_free, &report) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(report.skipped == 0 && report.restored == 1);
  HSA_TEST_CHECK(static_cast<unsigned char*>(kept_again)[0] == 0x5A);
  kreplay_snapshot_free(before_free);
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(kept_again) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 0);
  HSA_TEST_CHECK(snap_outcome(gpu) == KREPLAY_DECLINE_NONE);

  // A runtime whose pointer-info struct ends before global_flags: the grain comes from the owner's device type,
  // so GPU memory counts as coarse (even the fine-grained pool's, the documented approximation) and the CPU's
  // kernarg pool stays out.
  fake::state.short_pointer_info = true;
  void* old_fine = pool_alloc(fake::pools.gpu_fine, 96);
  void* old_kernarg = pool_alloc(fake::pools.cpu_kernarg, 96);
  fake::state.short_pointer_info = false;
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1 && fake::stats(gpu).bytes == 96);
  HSA_TEST_CHECK(fake::stats(cpu).regions == 0);
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(old_fine) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(old_kernarg) == HSA_STATUS_SUCCESS);

  // Out of memory: retried exactly once, after kreplay_device_trim_all; the second refusal is returned as is,
  // and other errors are not retried.
  int calls = fake::state.pool_allocate_calls;
  fake::state.oom_next_pool_allocations = 1;
  void* retried = pool_alloc(fake::pools.gpu_coarse, 256);
  HSA_TEST_CHECK(fake::state.pool_allocate_calls == calls + 2);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 1);  // recorded once, after the retry
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(retried) == HSA_STATUS_SUCCESS);
  calls = fake::state.pool_allocate_calls;
  fake::state.oom_next_pool_allocations = 2;
  void* refused = nullptr;
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_allocate_fn(fake::pools.gpu_coarse, 256, 0, &refused) ==
                 HSA_STATUS_ERROR_OUT_OF_RESOURCES);
  HSA_TEST_CHECK(fake::state.pool_allocate_calls == calls + 2 && fake::state.oom_next_pool_allocations == 0);
  calls = fake::state.pool_allocate_calls;
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_allocate_fn(fake::pools.gpu_coarse_fixed, 256, 0, &refused) ==
                 HSA_STATUS_ERROR_INVALID_ARGUMENT);
  HSA_TEST_CHECK(fake::state.pool_allocate_calls == calls + 1);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 0);

  // Untracked allocations free normally.
  for (void* ptr : {before, fine, kernarg, host_fine, executable}) {
    HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(ptr) == HSA_STATUS_SUCCESS);
  }
  HSA_TEST_CHECK(fake::live_allocations() == 0);
  HSA_TEST_CHECK(fake::stats(gpu).regions == 0);

  // After finalize the wrappers only forward.
  kreplay::hsa::finalize();
  calls = fake::state.pool_allocate_calls;
  void* late = pool_alloc(fake::pools.gpu_coarse, 32);
  HSA_TEST_CHECK(fake::state.pool_allocate_calls == calls + 1);
  kreplay_inventory_stats_t ignored{};
  HSA_TEST_CHECK(kreplay_inventory_stats(fake::k(gpu), &ignored) == KREPLAY_STATUS_FINALIZED);
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_free_fn(late) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::live_allocations() == 0);
  std::printf("hsa tracking: classification, free ordering and refused frees behave\n");
  return 0;
}
