// The version-2 ops of the adapter, called directly (kreplay::hsa::make_device_ops), so that they are tested
// apart from the engine: copy_batch on hsa_amd_memory_async_copy with a pool of signals, its fallbacks and
// failures, device_alloc / device_free on the agent's coarse-grained pool from the captured table, and a
// host-supplied digest.
#include "fake_hsa.hpp"

#include <cstddef>
#include <cstring>
#include <vector>

namespace {

CoreApiTable live_core;
AmdExtTable live_amd;
CoreApiTable captured_core;
AmdExtTable captured_amd;

void* device_alloc(hsa_amd_memory_pool_t pool, std::size_t size) {
  void* ptr = nullptr;
  HSA_TEST_CHECK(captured_amd.hsa_amd_memory_pool_allocate_fn(pool, size, 0, &ptr) == HSA_STATUS_SUCCESS);
  return ptr;
}

void fill(void* ptr, std::size_t size, unsigned seed) {
  auto* bytes = static_cast<unsigned char*>(ptr);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<unsigned char>(seed * 29u + i * 13u);
}

bool holds(const void* ptr, std::size_t size, unsigned seed) {
  const auto* bytes = static_cast<const unsigned char*>(ptr);
  for (std::size_t i = 0; i < size; ++i) {
    if (bytes[i] != static_cast<unsigned char>(seed * 29u + i * 13u)) return false;
  }
  return true;
}

// Device regions and where their copies go in a staging buffer (at 64-byte offsets, as kreplay places them).
struct layout_t {
  std::vector<void*> regions;
  std::vector<std::size_t> sizes;
  std::vector<std::size_t> offsets;
  std::size_t staging_bytes = 0;
};

layout_t make_layout(std::size_t n) {
  layout_t layout;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t size = 100 + i * 37;
    layout.regions.push_back(device_alloc(fake::pools.gpu_coarse, size));
    layout.sizes.push_back(size);
    layout.offsets.push_back(layout.staging_bytes);
    layout.staging_bytes += (size + 63) / 64 * 64;
  }
  return layout;
}

std::vector<kreplay_copy_t> to_staging(const layout_t& layout, unsigned char* staging) {
  std::vector<kreplay_copy_t> copies;
  for (std::size_t i = 0; i < layout.regions.size(); ++i) {
    copies.push_back(kreplay_copy_t{staging + layout.offsets[i], layout.regions[i], layout.sizes[i]});
  }
  return copies;
}

std::vector<kreplay_copy_t> from_staging(const layout_t& layout, unsigned char* staging) {
  std::vector<kreplay_copy_t> copies;
  for (std::size_t i = 0; i < layout.regions.size(); ++i) {
    copies.push_back(kreplay_copy_t{layout.regions[i], staging + layout.offsets[i], layout.sizes[i]});
  }
  return copies;
}

void fill_regions(const layout_t& layout, unsigned seed) {
  for (std::size_t i = 0; i < layout.regions.size(); ++i) fill(layout.regions[i], layout.sizes[i], seed + unsigned(i));
}

bool regions_hold(const layout_t& layout, unsigned seed) {
  for (std::size_t i = 0; i < layout.regions.size(); ++i) {
    if (!holds(layout.regions[i], layout.sizes[i], seed + unsigned(i))) return false;
  }
  return true;
}

kreplay_status_t batch(const kreplay_device_ops_t& ops, hsa_agent_t agent, const std::vector<kreplay_copy_t>& copies) {
  return ops.copy_batch(ops.user_data, fake::k(agent), copies.data(), copies.size());
}

// Nothing the fake saw was wrong: no signal shared or re-armed while in flight, every agent argument matched
// its memory, no pageable memory handed to the engines, nothing left in flight.
bool clean() {
  return fake::state.signal_misuse == 0 && fake::state.async_bad_agent == 0 && fake::state.async_pageable == 0 &&
         fake::pending_async_copies() == 0;
}

void batch_copies_through_the_engines_and_falls_back_for_pageable_memory(const kreplay_device_ops_t& ops) {
  const hsa_agent_t gpu = fake::agents.gpu;
  layout_t layout = make_layout(8);
  std::vector<unsigned char> locked_staging(layout.staging_bytes);
  // Nothing to lock is refused before anything is touched.
  HSA_TEST_CHECK(ops.host_lock(ops.user_data, nullptr, 4096) == KREPLAY_STATUS_INVALID_ARGUMENT);
  HSA_TEST_CHECK(ops.host_lock(ops.user_data, locked_staging.data(), 0) == KREPLAY_STATUS_INVALID_ARGUMENT);
  HSA_TEST_CHECK(ops.host_lock(ops.user_data, locked_staging.data(), locked_staging.size()) == KREPLAY_STATUS_SUCCESS);

  // Device to locked host and back: every copy on the engines, none through hsa_memory_copy.
  fill_regions(layout, 1);
  int async_before = fake::state.async_copy_calls;
  int sync_before = fake::state.copy_calls;
  HSA_TEST_CHECK(batch(ops, gpu, to_staging(layout, locked_staging.data())) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.async_copy_calls == async_before + 8 && fake::state.copy_calls == sync_before);
  HSA_TEST_CHECK(clean());
  fill_regions(layout, 50);
  HSA_TEST_CHECK(batch(ops, gpu, from_staging(layout, locked_staging.data())) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(regions_hold(layout, 1));
  HSA_TEST_CHECK(clean());

  // Pageable staging: hsa_memory_copy, never the engines.
  std::vector<unsigned char> pageable(layout.staging_bytes);
  async_before = fake::state.async_copy_calls;
  sync_before = fake::state.copy_calls;
  HSA_TEST_CHECK(batch(ops, gpu, to_staging(layout, pageable.data())) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.async_copy_calls == async_before && fake::state.copy_calls == sync_before + 8);
  fill_regions(layout, 90);
  HSA_TEST_CHECK(batch(ops, gpu, from_staging(layout, pageable.data())) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(regions_hold(layout, 1));

  // Mixed in one batch: each copy where it can go.
  std::vector<kreplay_copy_t> mixed = to_staging(layout, locked_staging.data());
  for (std::size_t i = 0; i < mixed.size(); i += 2) mixed[i].dst = pageable.data() + layout.offsets[i];
  async_before = fake::state.async_copy_calls;
  sync_before = fake::state.copy_calls;
  HSA_TEST_CHECK(batch(ops, gpu, mixed) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.async_copy_calls == async_before + 4 && fake::state.copy_calls == sync_before + 4);
  HSA_TEST_CHECK(clean());

  // Once unlocked, the range is pageable again for the adapter too.
  HSA_TEST_CHECK(ops.host_unlock(ops.user_data, locked_staging.data(), locked_staging.size()) == KREPLAY_STATUS_SUCCESS);
  async_before = fake::state.async_copy_calls;
  HSA_TEST_CHECK(batch(ops, gpu, to_staging(layout, locked_staging.data())) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.async_copy_calls == async_before);
  HSA_TEST_CHECK(clean());

  // Empty batch, zero-byte copies and bad arguments.
  HSA_TEST_CHECK(ops.copy_batch(ops.user_data, fake::k(gpu), nullptr, 0) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(ops.copy_batch(ops.user_data, fake::k(gpu), nullptr, 3) == KREPLAY_STATUS_INVALID_ARGUMENT);
  const kreplay_copy_t nothing{locked_staging.data(), layout.regions[0], 0};
  HSA_TEST_CHECK(ops.copy_batch(ops.user_data, fake::k(gpu), &nothing, 1) == KREPLAY_STATUS_SUCCESS);
  for (void* region : layout.regions) HSA_TEST_CHECK(captured_amd.hsa_amd_memory_pool_free_fn(region) == HSA_STATUS_SUCCESS);
}

void many_copies_never_share_a_signal_in_flight(const kreplay_device_ops_t& ops) {
  const hsa_agent_t gpu = fake::agents.gpu;
  layout_t layout = make_layout(100);
  std::vector<unsigned char> staging(layout.staging_bytes);
  HSA_TEST_CHECK(ops.host_lock(ops.user_data, staging.data(), staging.size()) == KREPLAY_STATUS_SUCCESS);
  fill_regions(layout, 7);
  fake::state.max_in_flight = 0;
  const int created_before = fake::state.signal_create_calls;
  HSA_TEST_CHECK(batch(ops, gpu, to_staging(layout, staging.data())) == KREPLAY_STATUS_SUCCESS);
  fill_regions(layout, 8);
  HSA_TEST_CHECK(batch(ops, gpu, from_staging(layout, staging.data())) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(regions_hold(layout, 7));
  HSA_TEST_CHECK(clean());
  // A window of copies in flight, each with its own signal; the signals are kept for the next batch.
  HSA_TEST_CHECK(fake::state.max_in_flight > 1 && fake::state.max_in_flight <= 32);
  HSA_TEST_CHECK(fake::state.signal_create_calls - created_before <= 32);
  HSA_TEST_CHECK(ops.host_unlock(ops.user_data, staging.data(), staging.size()) == KREPLAY_STATUS_SUCCESS);
  for (void* region : layout.regions) HSA_TEST_CHECK(captured_amd.hsa_amd_memory_pool_free_fn(region) == HSA_STATUS_SUCCESS);
}

void a_failed_copy_fails_the_batch_after_every_submitted_copy_is_done(const kreplay_device_ops_t& ops) {
  const hsa_agent_t gpu = fake::agents.gpu;
  layout_t layout = make_layout(8);
  std::vector<unsigned char> staging(layout.staging_bytes);
  HSA_TEST_CHECK(ops.host_lock(ops.user_data, staging.data(), staging.size()) == KREPLAY_STATUS_SUCCESS);
  for (int k = 1; k <= 8; ++k) {
    // Refused at submission: the batch stops submitting, waits for what it submitted, and fails.
    fake::state.fail_async_submit_at = fake::state.async_copy_calls + k;
    const int before = fake::state.async_copy_calls;
    HSA_TEST_CHECK(batch(ops, gpu, to_staging(layout, staging.data())) == KREPLAY_STATUS_DEVICE_ERROR);
    HSA_TEST_CHECK(fake::state.async_copy_calls == before + k);
    HSA_TEST_CHECK(clean());
    // Completed with an error value (negative signal): fails too, and nothing stays in flight.
    fake::state.fail_async_submit_at = 0;
    fake::state.fault_async_copy_at = fake::state.async_copy_calls + k;
    HSA_TEST_CHECK(batch(ops, gpu, to_staging(layout, staging.data())) == KREPLAY_STATUS_DEVICE_ERROR);
    HSA_TEST_CHECK(clean());
    fake::state.fault_async_copy_at = 0;
  }
  // The signals that carried an error are armed again before their next use: the next batch succeeds.
  fill_regions(layout, 3);
  HSA_TEST_CHECK(batch(ops, gpu, to_staging(layout, staging.data())) == KREPLAY_STATUS_SUCCESS);
  fill_regions(layout, 4);
  HSA_TEST_CHECK(batch(ops, gpu, from_staging(layout, staging.data())) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(regions_hold(layout, 3));
  HSA_TEST_CHECK(clean());
  HSA_TEST_CHECK(ops.host_unlock(ops.user_data, staging.data(), staging.size()) == KREPLAY_STATUS_SUCCESS);
  for (void* region : layout.regions) HSA_TEST_CHECK(captured_amd.hsa_amd_memory_pool_free_fn(region) == HSA_STATUS_SUCCESS);
}

// A fresh set of ops has no pooled signals, so its first batch must create them.
void without_signals_every_copy_goes_through_hsa_memory_copy() {
  const hsa_agent_t gpu = fake::agents.gpu;
  kreplay_device_ops_t ops{};
  HSA_TEST_CHECK(kreplay::hsa::make_device_ops(&captured_core, &captured_amd, nullptr, &ops) == KREPLAY_STATUS_SUCCESS);
  layout_t layout = make_layout(8);
  std::vector<unsigned char> staging(layout.staging_bytes);
  HSA_TEST_CHECK(ops.host_lock(ops.user_data, staging.data(), staging.size()) == KREPLAY_STATUS_SUCCESS);
  const int live_before = fake::state.signals_live;

  fake::state.signal_create_budget = 0;
  fill_regions(layout, 11);
  int async_before = fake::state.async_copy_calls;
  int sync_before = fake::state.copy_calls;
  HSA_TEST_CHECK(batch(ops, gpu, to_staging(layout, staging.data())) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.async_copy_calls == async_before && fake::state.copy_calls == sync_before + 8);
  fill_regions(layout, 12);
  HSA_TEST_CHECK(batch(ops, gpu, from_staging(layout, staging.data())) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(regions_hold(layout, 11));
  // A failing hsa_memory_copy on that path fails the batch as well.
  std::vector<kreplay_copy_t> broken = to_staging(layout, staging.data());
  broken[3].src = nullptr;  // the fake's hsa_memory_copy refuses NULL
  HSA_TEST_CHECK(batch(ops, gpu, broken) == KREPLAY_STATUS_DEVICE_ERROR);

  // Two signals to be had: a window of two.
  fake::state.signal_create_budget = 2;
  fake::state.max_in_flight = 0;
  async_before = fake::state.async_copy_calls;
  HSA_TEST_CHECK(batch(ops, gpu, to_staging(layout, staging.data())) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.async_copy_calls == async_before + 8);
  HSA_TEST_CHECK(fake::state.max_in_flight <= 2);
  HSA_TEST_CHECK(fake::state.signals_live == live_before + 2);
  HSA_TEST_CHECK(clean());
  fake::state.signal_create_budget = -1;

  HSA_TEST_CHECK(ops.host_unlock(ops.user_data, staging.data(), staging.size()) == KREPLAY_STATUS_SUCCESS);
  // release destroys the set's pooled signals.
  ops.release(ops.user_data);
  HSA_TEST_CHECK(fake::state.signals_live == live_before);
  for (void* region : layout.regions) HSA_TEST_CHECK(captured_amd.hsa_amd_memory_pool_free_fn(region) == HSA_STATUS_SUCCESS);
}

void device_storage_comes_from_the_captured_tables_coarse_pool(const kreplay_device_ops_t& ops) {
  const hsa_agent_t gpu = fake::agents.gpu;
  const hsa_agent_t gpu2 = fake::agents.gpu2;
  const kreplay_inventory_stats_t tracked = fake::stats(gpu);
  const int live_pool_calls = fake::state.pool_allocate_calls;

  void* storage = nullptr;
  HSA_TEST_CHECK(ops.device_alloc(ops.user_data, fake::k(gpu), 4096, &storage) == KREPLAY_STATUS_SUCCESS);
  // The pool that allows runtime allocation (the fixed one is listed first and passed over), one call of the
  // captured entry (no retry, no wrapper), nothing recorded in kreplay's inventory.
  HSA_TEST_CHECK(fake::in_pool(storage, fake::pools.gpu_coarse));
  HSA_TEST_CHECK(fake::state.pool_allocate_calls == live_pool_calls + 1);
  HSA_TEST_CHECK(fake::stats(gpu).regions == tracked.regions && fake::stats(gpu).bytes == tracked.bytes);
  HSA_TEST_CHECK(fake::state.allow_access_calls == 0);  // the owner's access is allowed by default

  // Device to device, between a region and the storage: on the engines, with the GPU on both sides.
  void* region = device_alloc(fake::pools.gpu_coarse, 4096);
  fill(region, 4096, 21);
  const int async_before = fake::state.async_copy_calls;
  const kreplay_copy_t save{storage, region, 4096};
  HSA_TEST_CHECK(ops.copy_batch(ops.user_data, fake::k(gpu), &save, 1) == KREPLAY_STATUS_SUCCESS);
  fill(region, 4096, 22);
  const kreplay_copy_t back{region, storage, 4096};
  HSA_TEST_CHECK(ops.copy_batch(ops.user_data, fake::k(gpu), &back, 1) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.async_copy_calls == async_before + 2);
  HSA_TEST_CHECK(holds(region, 4096, 21));
  HSA_TEST_CHECK(clean());

  const std::size_t pool_bytes = fake::pool_bytes(fake::pools.gpu_coarse);
  HSA_TEST_CHECK(ops.device_free(ops.user_data, fake::k(gpu), storage, 4096) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::pool_bytes(fake::pools.gpu_coarse) == pool_bytes - 4096);
  HSA_TEST_CHECK(captured_amd.hsa_amd_memory_pool_free_fn(region) == HSA_STATUS_SUCCESS);

  // Refused: reported, nothing written, no retry and no trim through the wrapper.
  fake::state.gpu_capacity = 1024;
  void* untouched = &storage;
  void* refused = untouched;
  const int calls = fake::state.pool_allocate_calls;
  HSA_TEST_CHECK(ops.device_alloc(ops.user_data, fake::k(gpu), 1 << 20, &refused) == KREPLAY_STATUS_DEVICE_ERROR);
  HSA_TEST_CHECK(refused == untouched);
  HSA_TEST_CHECK(fake::state.pool_allocate_calls == calls + 1);
  fake::state.gpu_capacity = 0;

  // An agent whose access to its pool is not allowed by default gets access granted for the storage.
  fake::state.gpu2_access_disallowed = true;
  kreplay_device_ops_t fresh{};
  HSA_TEST_CHECK(kreplay::hsa::make_device_ops(&captured_core, &captured_amd, nullptr, &fresh) == KREPLAY_STATUS_SUCCESS);
  void* storage2 = nullptr;
  HSA_TEST_CHECK(fresh.device_alloc(fresh.user_data, fake::k(gpu2), 512, &storage2) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::in_pool(storage2, fake::pools.gpu2_coarse));
  HSA_TEST_CHECK(fake::state.allow_access_calls == 1);
  HSA_TEST_CHECK(fresh.device_free(fresh.user_data, fake::k(gpu2), storage2, 512) == KREPLAY_STATUS_SUCCESS);
  fake::state.gpu2_access_disallowed = false;
  // A CPU has no coarse-grained pool: no device storage for it.
  void* none = nullptr;
  HSA_TEST_CHECK(fresh.device_alloc(fresh.user_data, fake::k(fake::agents.cpu), 512, &none) ==
                 KREPLAY_STATUS_DEVICE_ERROR);
  HSA_TEST_CHECK(none == nullptr);
  // Bad arguments.
  HSA_TEST_CHECK(fresh.device_alloc(fresh.user_data, fake::k(gpu), 0, &none) == KREPLAY_STATUS_INVALID_ARGUMENT);
  HSA_TEST_CHECK(fresh.device_alloc(fresh.user_data, fake::k(gpu), 64, nullptr) == KREPLAY_STATUS_INVALID_ARGUMENT);
  HSA_TEST_CHECK(fresh.device_free(fresh.user_data, fake::k(gpu), nullptr, 64) == KREPLAY_STATUS_INVALID_ARGUMENT);
  fresh.release(fresh.user_data);
}

int digest_calls = 0;
kreplay_status_t host_digest(void* digest_data, kreplay_agent_t agent, const kreplay_digest_job_t* jobs,
                             std::size_t count, std::size_t block_bytes) {
  ++digest_calls;
  HSA_TEST_CHECK(digest_data == &digest_calls && agent.handle == fake::agents.gpu.handle);
  HSA_TEST_CHECK(jobs != nullptr && count == 1 && block_bytes == 4096);
  jobs[0].digests_out[0] = kreplay_digest_t{1, 2};
  return KREPLAY_STATUS_SUCCESS;
}

// The digest a host supplies reaches kreplay's op unchanged; a version-1 options struct (without the digest
// fields) is accepted and gives no digest.
void a_host_digest_is_forwarded() {
  kreplay::hsa::configure_options_t options{};
  options.struct_size = sizeof options;
  options.digest = &host_digest;
  options.digest_data = &digest_calls;
  kreplay_device_ops_t ops{};
  HSA_TEST_CHECK(kreplay::hsa::make_device_ops(&captured_core, &captured_amd, &options, &ops) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(ops.digest != nullptr);
  kreplay_digest_t digest{};
  unsigned char block[64] = {};
  const kreplay_digest_job_t job{block, sizeof block, &digest};
  HSA_TEST_CHECK(ops.digest(ops.user_data, fake::k(fake::agents.gpu), &job, 1, 4096) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(digest_calls == 1 && digest.lo == 1 && digest.hi == 2);
  ops.release(ops.user_data);

  options.struct_size = offsetof(kreplay::hsa::configure_options_t, digest);
  HSA_TEST_CHECK(kreplay::hsa::make_device_ops(&captured_core, &captured_amd, &options, &ops) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(ops.digest == nullptr);
  ops.release(ops.user_data);
  options.struct_size = offsetof(kreplay::hsa::configure_options_t, iterate_executables_data);
  HSA_TEST_CHECK(kreplay::hsa::make_device_ops(&captured_core, &captured_amd, &options, &ops) ==
                 KREPLAY_STATUS_INVALID_ARGUMENT);
}

}  // namespace

int main() {
  fake::reset(0x5A000000);
  fake::fill_tables(&live_core, &live_amd);
  captured_core = live_core;
  captured_amd = live_amd;
  // The wrappers in the live tables and tracking on, so that anything of kreplay's own storage reaching them
  // would show in the inventory.
  HSA_TEST_CHECK(kreplay::hsa::install(&live_core, &live_amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  kreplay_device_ops_t ops{};
  HSA_TEST_CHECK(kreplay::hsa::make_device_ops(nullptr, &captured_amd, nullptr, &ops) == KREPLAY_STATUS_INVALID_ARGUMENT);
  HSA_TEST_CHECK(kreplay::hsa::make_device_ops(&captured_core, &captured_amd, nullptr, nullptr) ==
                 KREPLAY_STATUS_INVALID_ARGUMENT);
  HSA_TEST_CHECK(kreplay::hsa::make_device_ops(&captured_core, &captured_amd, nullptr, &ops) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(ops.struct_size == sizeof ops);
  HSA_TEST_CHECK(ops.copy_batch != nullptr && ops.device_alloc != nullptr && ops.device_free != nullptr);
  HSA_TEST_CHECK(ops.release != nullptr);
  HSA_TEST_CHECK(ops.digest == nullptr);  // needs a GPU code object: only when the host supplies one

  // A table without async copy or signals: no copy_batch, the rest as before.
  CoreApiTable no_signals = captured_core;
  no_signals.hsa_signal_wait_scacquire_fn = nullptr;
  kreplay_device_ops_t plain{};
  HSA_TEST_CHECK(kreplay::hsa::make_device_ops(&no_signals, &captured_amd, nullptr, &plain) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(plain.copy_batch == nullptr && plain.copy != nullptr && plain.device_alloc != nullptr);
  plain.release(plain.user_data);

  const int live_signals_at_start = fake::state.signals_live;
  batch_copies_through_the_engines_and_falls_back_for_pageable_memory(ops);
  many_copies_never_share_a_signal_in_flight(ops);
  a_failed_copy_fails_the_batch_after_every_submitted_copy_is_done(ops);
  without_signals_every_copy_goes_through_hsa_memory_copy();
  device_storage_comes_from_the_captured_tables_coarse_pool(ops);
  a_host_digest_is_forwarded();

  // Everything the set created goes with it.
  HSA_TEST_CHECK(fake::state.signals_live > live_signals_at_start);
  ops.release(ops.user_data);
  HSA_TEST_CHECK(fake::state.signals_live == live_signals_at_start);
  HSA_TEST_CHECK(fake::state.locked_ranges == 0);
  HSA_TEST_CHECK(fake::live_allocations() == 0);
  kreplay::hsa::finalize();
  // Refused by the engine after finalize: kreplay took the set and released it (a second release here would be
  // a double free, none a leak: the sanitizer builds see either).
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_FINALIZED);
  std::printf("hsa copy_batch and device storage: engines, fallbacks, failures and signals behave\n");
  return 0;
}
