/* Allocation tracking through the public header and the simulated device: the gate, classification, frees,
 * reused addresses, virtual-memory mappings, overflow that is never silent, failed pointer queries, invalid
 * arguments, and several threads recording at once. kreplay_finalize has its own executable (finalize.c). */
#include "test_util.h"

#define KIB ((size_t)1024)

static void* sim_memory(kreplay_agent_t agent, size_t size, kreplay_pointer_type_t type, uint32_t flags) {
  void* ptr = NULL;
  CHECK_OK(kreplay_sim_alloc(agent, size, type, flags, &ptr));
  return ptr;
}

static void* coarse_memory(kreplay_agent_t agent, size_t size) {
  return sim_memory(agent, size, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED);
}

/* Runs first, before tracking is ever turned on. */
static void recording_is_off_until_enabled_and_records_nothing_meanwhile(void) {
  const kreplay_agent_t agent = test_agent(0x301);
  kreplay_device_ops_t ops;
  void* ptr;
  size_t queries;
  memset(&ops, 0, sizeof ops);
  CHECK_OK(kreplay_sim_device_ops(&ops));
  CHECK_OK(kreplay_configure(&ops));
  CHECK(!kreplay_tracking_is_enabled());

  ptr = coarse_memory(agent, 4 * KIB);
  queries = test_counters().pointer_queries;
  CHECK_OK(kreplay_record_alloc(ptr, 4 * KIB, 0));
  CHECK_OK(kreplay_record_vmem_map(ptr, 4 * KIB, agent));
  CHECK_EQ(0, test_inventory(agent).regions);
  CHECK_EQ(queries, test_counters().pointer_queries);
  CHECK_OK(kreplay_record_free(ptr)); /* untracked, but the gate answers before looking */

  /* Turning tracking on is not retroactive. */
  kreplay_tracking_enable(true);
  CHECK(kreplay_tracking_is_enabled());
  CHECK_EQ(0, test_inventory(agent).regions);
  CHECK_OK(kreplay_record_alloc(ptr, 4 * KIB, 0));
  CHECK_EQ(1, test_inventory(agent).regions);

  /* Turning it off forgets what was tracked: frees made while off could not be seen. */
  kreplay_tracking_enable(false);
  CHECK_EQ(0, test_inventory(agent).regions);
  kreplay_tracking_enable(true);
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free(ptr));
  CHECK_OK(kreplay_sim_free(ptr));
}

static void coarse_grained_device_memory_is_tracked_for_its_owner(void) {
  const kreplay_agent_t agent = test_agent(0x302);
  const kreplay_agent_t other = test_agent(0x303);
  void* ptr = coarse_memory(agent, 10000);
  size_t queries = test_counters().pointer_queries;
  kreplay_inventory_stats_t stats;
  CHECK_OK(kreplay_record_alloc(ptr, 10000, 0));
  CHECK_EQ(queries + 1, test_counters().pointer_queries);
  stats = test_inventory(agent);
  CHECK_EQ(1, stats.regions);
  CHECK_EQ(10000, stats.bytes);
  CHECK_EQ(0, stats.overflowed);
  CHECK_EQ(0, test_inventory(other).regions);
  test_free(ptr);
  CHECK_EQ(0, test_inventory(agent).regions);
  CHECK_EQ(0, test_inventory(agent).bytes);
}

/* Records memory that must not be tracked and checks that it was not, and that its free is NOT_FOUND. */
static void expect_untracked(kreplay_agent_t agent, kreplay_pointer_type_t type, uint32_t flags) {
  void* ptr = sim_memory(agent, 4 * KIB, type, flags);
  CHECK_OK(kreplay_record_alloc(ptr, 4 * KIB, 0));
  CHECK_EQ(0, test_inventory(agent).regions);
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free(ptr));
  CHECK_OK(kreplay_sim_free(ptr));
}

static void fine_grained_device_memory_is_not_tracked(void) {
  expect_untracked(test_agent(0x304), KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_FINE_GRAINED);
}

static void kernarg_memory_is_not_tracked_even_when_coarse_grained(void) {
  expect_untracked(test_agent(0x305), KREPLAY_POINTER_DEVICE,
                   KREPLAY_GLOBAL_FLAG_KERNARG | KREPLAY_GLOBAL_FLAG_COARSE_GRAINED);
  expect_untracked(test_agent(0x305), KREPLAY_POINTER_DEVICE,
                   KREPLAY_GLOBAL_FLAG_KERNARG | KREPLAY_GLOBAL_FLAG_FINE_GRAINED);
}

static void host_unknown_graphics_and_ipc_memory_is_not_tracked(void) {
  const kreplay_agent_t agent = test_agent(0x306);
  unsigned char host[64];
  expect_untracked(agent, KREPLAY_POINTER_UNKNOWN, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED);
  expect_untracked(agent, KREPLAY_POINTER_GRAPHICS, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED);
  expect_untracked(agent, KREPLAY_POINTER_IPC, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED);
  /* Plain host memory: the device knows nothing about it. */
  CHECK_OK(kreplay_record_alloc(host, sizeof host, 0));
  CHECK_EQ(0, test_inventory(agent).regions);
  CHECK_EQ(0, test_inventory(test_agent(0)).regions);
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free(host));
}

static void locked_host_memory_is_not_tracked(void) {
  expect_untracked(test_agent(0x307), KREPLAY_POINTER_LOCKED, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED);
}

static void an_executable_allocation_is_not_tracked_and_never_queried(void) {
  const kreplay_agent_t agent = test_agent(0x308);
  void* ptr = coarse_memory(agent, 4 * KIB);
  size_t queries = test_counters().pointer_queries;
  CHECK_OK(kreplay_record_alloc(ptr, 4 * KIB, KREPLAY_ALLOC_FLAG_EXECUTABLE));
  CHECK_OK(kreplay_record_alloc(ptr, 4 * KIB, KREPLAY_ALLOC_FLAG_EXECUTABLE | 1u | 0x100u));
  CHECK_EQ(queries, test_counters().pointer_queries);
  CHECK_EQ(0, test_inventory(agent).regions);
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free(ptr));
  CHECK_OK(kreplay_sim_free(ptr));
}

static void allocation_flags_other_than_executable_are_ignored(void) {
  const kreplay_agent_t agent = test_agent(0x309);
  void* ptr = coarse_memory(agent, 4 * KIB);
  CHECK_OK(kreplay_record_alloc(ptr, 4 * KIB, 1u | 2u | 8u | 0x80000000u));
  CHECK_EQ(1, test_inventory(agent).regions);
  test_free(ptr);
}

static void freeing_an_untracked_pointer_is_not_found(void) {
  const kreplay_agent_t agent = test_agent(0x30A);
  void* ptr = coarse_memory(agent, 4 * KIB);
  int on_stack = 0;
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free(&on_stack));
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free(ptr));
  CHECK_OK(kreplay_record_alloc(ptr, 4 * KIB, 0));
  /* Only the base names an allocation. */
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free((unsigned char*)ptr + 16));
  CHECK_OK(kreplay_record_free(ptr));
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free(ptr));
  CHECK_OK(kreplay_sim_free(ptr));
}

static void null_zero_and_overflowing_sizes_are_invalid(void) {
  const kreplay_agent_t agent = test_agent(0x30B);
  void* ptr = coarse_memory(agent, 4 * KIB);
  void* high = (void*)(uintptr_t)(UINTPTR_MAX - 4095u);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_record_alloc(NULL, 4 * KIB, 0));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_record_alloc(ptr, 0, 0));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_record_alloc(ptr, SIZE_MAX, 0));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_record_alloc(high, 8192, 0));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_record_free(NULL));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_record_vmem_map(NULL, 4 * KIB, agent));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_record_vmem_map(ptr, 0, agent));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_record_vmem_map(ptr, SIZE_MAX, agent));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_record_vmem_unmap(NULL, 4 * KIB));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_record_vmem_unmap(ptr, 0));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_record_vmem_unmap(ptr, SIZE_MAX));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_inventory_stats(agent, NULL));
  CHECK_EQ(0, test_inventory(agent).regions);
  CHECK_EQ(0, test_inventory(agent).overflowed);
  CHECK_OK(kreplay_sim_free(ptr));
}

static void recording_an_allocation_again_replaces_the_one_whose_free_was_missed(void) {
  const kreplay_agent_t agent = test_agent(0x30C);
  void* ptr = coarse_memory(agent, 8 * KIB);
  test_log_capture(KREPLAY_LOG_WARNING);
  CHECK_OK(kreplay_record_alloc(ptr, 4 * KIB, 0));
  CHECK_OK(kreplay_record_alloc(ptr, 8 * KIB, 0));
  CHECK_EQ(1, test_inventory(agent).regions);
  CHECK_EQ(8 * KIB, test_inventory(agent).bytes);
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "never recorded"));
  test_log_stop();
  test_free(ptr);
}

static void an_allocation_whose_real_free_failed_is_recorded_again(void) {
  /* The documented host sequence: record_free, the runtime's free fails, record_alloc again. */
  const kreplay_agent_t agent = test_agent(0x30D);
  void* ptr = test_alloc(agent, 4 * KIB);
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_snapshot_info_t info;
  CHECK_OK(kreplay_record_free(ptr));
  CHECK_EQ(0, test_inventory(agent).regions);
  CHECK_OK(kreplay_record_alloc(ptr, 4 * KIB, 0));
  CHECK_EQ(1, test_inventory(agent).regions);
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  CHECK_EQ(1, info.regions);
  kreplay_snapshot_free(snapshot);
  test_free(ptr);
}

static void a_reused_address_gets_a_new_generation_so_restore_skips_it(void) {
  const kreplay_agent_t agent = test_agent(0x30E);
  void* ptr = test_alloc(agent, 4 * KIB);
  void* again = NULL;
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_restore_report_t report;
  size_t violations = test_counters().violations;
  test_fill(ptr, 4 * KIB, 1);
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));

  test_free(ptr);
  CHECK_OK(kreplay_sim_alloc_at(ptr, agent, 4 * KIB, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED,
                                &again));
  CHECK(again == ptr);
  CHECK_OK(kreplay_record_alloc(again, 4 * KIB, 0));
  test_fill(again, 4 * KIB, 2);

  /* Same base, same size, same agent: only the generation tells the two allocations apart. */
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK_EQ(1, report.skipped);
  CHECK_EQ(0, report.restored);
  CHECK_EQ(0, report.bytes);
  CHECK(test_has_pattern(again, 4 * KIB, 2));
  CHECK_EQ(violations, test_counters().violations);
  kreplay_snapshot_free(snapshot);
  test_free(again);
}

static void a_vmem_mapping_is_tracked_and_partial_unmaps_trim_or_split_it(void) {
  const kreplay_agent_t agent = test_agent(0x30F);
  unsigned char* base = (unsigned char*)coarse_memory(agent, 64 * KIB);
  kreplay_inventory_stats_t stats;
  CHECK_OK(kreplay_record_vmem_map(base, 64 * KIB, agent));
  stats = test_inventory(agent);
  CHECK_EQ(1, stats.regions);
  CHECK_EQ(64 * KIB, stats.bytes);

  CHECK_OK(kreplay_record_vmem_unmap(base, 4 * KIB)); /* head */
  stats = test_inventory(agent);
  CHECK_EQ(1, stats.regions);
  CHECK_EQ(60 * KIB, stats.bytes);

  CHECK_OK(kreplay_record_vmem_unmap(base + 60 * KIB, 4 * KIB)); /* tail */
  stats = test_inventory(agent);
  CHECK_EQ(1, stats.regions);
  CHECK_EQ(56 * KIB, stats.bytes);

  CHECK_OK(kreplay_record_vmem_unmap(base + 28 * KIB, 8 * KIB)); /* middle: two pieces remain */
  stats = test_inventory(agent);
  CHECK_EQ(2, stats.regions);
  CHECK_EQ(48 * KIB, stats.bytes);

  /* A range that reaches over an end unmaps only what it overlaps. */
  CHECK_OK(kreplay_record_vmem_unmap(base + 24 * KIB, 12 * KIB));
  stats = test_inventory(agent);
  CHECK_EQ(2, stats.regions);
  CHECK_EQ(44 * KIB, stats.bytes);

  /* Ranges already unmapped, or never mapped, touch nothing. */
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_vmem_unmap(base, 4 * KIB));
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_vmem_unmap(base + 28 * KIB, 8 * KIB));
  CHECK_EQ(44 * KIB, test_inventory(agent).bytes);

  CHECK_OK(kreplay_record_vmem_unmap(base, 64 * KIB));
  stats = test_inventory(agent);
  CHECK_EQ(0, stats.regions);
  CHECK_EQ(0, stats.bytes);
  CHECK_OK(kreplay_sim_free(base));
}

static void a_vmem_mapping_over_part_of_another_replaces_that_part(void) {
  const kreplay_agent_t agent = test_agent(0x310);
  unsigned char* base = (unsigned char*)coarse_memory(agent, 64 * KIB);
  CHECK_OK(kreplay_record_vmem_map(base, 64 * KIB, agent));
  CHECK_OK(kreplay_record_vmem_map(base + 16 * KIB, 16 * KIB, agent));
  CHECK_EQ(3, test_inventory(agent).regions);
  CHECK_EQ(64 * KIB, test_inventory(agent).bytes);
  CHECK_OK(kreplay_record_vmem_unmap(base, 64 * KIB));
  CHECK_EQ(0, test_inventory(agent).regions);
  CHECK_OK(kreplay_sim_free(base));
}

static void vmem_mappings_belong_to_the_owner_they_were_recorded_with(void) {
  const kreplay_agent_t a = test_agent(0x311);
  const kreplay_agent_t b = test_agent(0x312);
  unsigned char* base = (unsigned char*)coarse_memory(a, 32 * KIB);
  CHECK_OK(kreplay_record_vmem_map(base, 16 * KIB, a));
  CHECK_OK(kreplay_record_vmem_map(base + 16 * KIB, 16 * KIB, b));
  CHECK_EQ(1, test_inventory(a).regions);
  CHECK_EQ(1, test_inventory(b).regions);
  CHECK_EQ(16 * KIB, test_inventory(b).bytes);
  CHECK_OK(kreplay_record_vmem_unmap(base, 32 * KIB));
  CHECK_EQ(0, test_inventory(a).regions + test_inventory(b).regions);
  CHECK_OK(kreplay_sim_free(base));
}

static void a_full_inventory_reports_overflow_and_never_loses_an_allocation_silently(void) {
  const kreplay_agent_t agent = test_agent(0x313);
  const kreplay_agent_t other = test_agent(0x314);
  const size_t capacity = test_inventory(agent).capacity;
  void** ptrs;
  void* other_ptr;
  void* lost;
  size_t recorded = 0;
  size_t i;
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  kreplay_snapshot_info_t info;
  kreplay_inventory_stats_t stats;

  CHECK(capacity >= 65536);
  ptrs = (void**)calloc(capacity, sizeof *ptrs);
  CHECK(ptrs != NULL);
  /* The table is process-wide: every earlier test freed what it recorded, so `other`'s one region and
   * `agent`'s fill account for all of it. */
  other_ptr = test_alloc(other, 64);
  for (i = 0; i + 1 < capacity; ++i) {
    ptrs[i] = test_alloc(agent, 16);
    ++recorded;
  }
  CHECK_EQ(capacity - 1, test_inventory(agent).regions);
  CHECK_EQ(0, test_inventory(agent).overflowed);

  test_log_capture(KREPLAY_LOG_WARNING);
  lost = coarse_memory(agent, 16);
  CHECK_STATUS(KREPLAY_STATUS_CAPACITY_EXCEEDED, kreplay_record_alloc(lost, 16, 0));
  stats = test_inventory(agent);
  CHECK_EQ(capacity - 1, stats.regions);
  CHECK_EQ(1, stats.overflowed);
  CHECK_EQ(0, test_inventory(other).overflowed);

  test_log_clear();
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(agent, &snapshot, &reason));
  CHECK(snapshot == NULL);
  CHECK_EQ(KREPLAY_DECLINE_INVENTORY_OVERFLOW, reason);
  CHECK(test_log_count(KREPLAY_LOG_WARNING, "KREPLAY_MAX_TRACKED_REGIONS") >= 1);

  /* Another agent's allocations were all recorded: its snapshots go on. */
  CHECK_OK(kreplay_snap(other, &snapshot, &reason));
  CHECK_EQ(KREPLAY_DECLINE_NONE, reason);
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  CHECK_EQ(1, info.regions);
  kreplay_snapshot_free(snapshot);
  test_log_stop();

  /* Freeing the lost allocation is no error, and once it is gone nothing is missing any more. */
  CHECK_OK(kreplay_record_free(lost));
  CHECK_OK(kreplay_sim_free(lost));
  CHECK_EQ(0, test_inventory(agent).overflowed);
  snapshot = NULL;
  CHECK_OK(kreplay_snap(agent, &snapshot, &reason));
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  CHECK_EQ(capacity - 1, info.regions);
  kreplay_snapshot_free(snapshot);

  for (i = 0; i < recorded; ++i) {
    test_free(ptrs[i]);
  }
  test_free(other_ptr);
  free(ptrs);
  CHECK_EQ(0, test_inventory(agent).regions);
  kreplay_staging_trim(agent);
  kreplay_staging_trim(other);
}

static void a_failed_pointer_query_declines_every_agent_until_that_pointer_is_freed(void) {
  const kreplay_agent_t a = test_agent(0x315);
  const kreplay_agent_t b = test_agent(0x316);
  void* ptr = coarse_memory(a, 4 * KIB);
  kreplay_sim_faults_t faults = test_no_faults();
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;

  faults.fail_pointer_info = true;
  kreplay_sim_set_faults(&faults);
  CHECK_STATUS(KREPLAY_STATUS_DEVICE_ERROR, kreplay_record_alloc(ptr, 4 * KIB, 0));
  test_disarm_faults();

  /* Whose memory it is cannot be known, so no agent's snapshot can be trusted to be complete. */
  CHECK_EQ(1, test_inventory(a).overflowed);
  CHECK_EQ(1, test_inventory(b).overflowed);
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(a, &snapshot, &reason));
  CHECK_EQ(KREPLAY_DECLINE_INVENTORY_OVERFLOW, reason);
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(b, &snapshot, &reason));
  CHECK_EQ(KREPLAY_DECLINE_INVENTORY_OVERFLOW, reason);
  CHECK(snapshot == NULL);

  CHECK_OK(kreplay_record_free(ptr));
  CHECK_OK(kreplay_sim_free(ptr));
  CHECK_EQ(0, test_inventory(a).overflowed);
  CHECK_OK(kreplay_snap(a, &snapshot, &reason));
  kreplay_snapshot_free(snapshot);
  CHECK_OK(kreplay_snap(b, &snapshot, &reason));
  kreplay_snapshot_free(snapshot);
}

/* ---- Several threads ------------------------------------------------------------------------------------- */

enum { THREADS = 4, PER_THREAD = 512, ROUNDS = 40 };

typedef struct worker_t {
  kreplay_agent_t agent;
  void* ptrs[PER_THREAD];
  size_t sizes[PER_THREAD];
} worker_t;

static void* record_and_free(void* arg) {
  worker_t* worker = (worker_t*)arg;
  size_t round;
  size_t i;
  for (i = 0; i < PER_THREAD; ++i) {
    worker->sizes[i] = 64 + (i % 7) * 128 + (size_t)(worker->agent.handle & 0xF);
    worker->ptrs[i] = coarse_memory(worker->agent, worker->sizes[i]);
  }
  for (round = 0; round < ROUNDS; ++round) {
    for (i = 0; i < PER_THREAD; ++i) {
      CHECK_OK(kreplay_record_alloc(worker->ptrs[i], worker->sizes[i], 0));
    }
    for (i = 0; i < PER_THREAD; i += 2) {
      CHECK_OK(kreplay_record_free(worker->ptrs[i]));
    }
    for (i = 0; i < PER_THREAD; i += 2) {
      CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free(worker->ptrs[i]));
    }
    if (round + 1 < ROUNDS) {
      for (i = 1; i < PER_THREAD; i += 2) {
        CHECK_OK(kreplay_record_free(worker->ptrs[i]));
      }
    }
  }
  return NULL;
}

static void threads_recording_and_freeing_at_once_leave_exact_counts(void) {
  static worker_t workers[THREADS];
  pthread_t threads[THREADS];
  size_t t;
  size_t i;
  for (t = 0; t < THREADS; ++t) {
    workers[t].agent = test_agent(0x320 + t);
    CHECK(pthread_create(&threads[t], NULL, record_and_free, &workers[t]) == 0);
  }
  for (t = 0; t < THREADS; ++t) {
    CHECK(pthread_join(threads[t], NULL) == 0);
  }
  /* Each thread ends with its odd-numbered allocations live. */
  for (t = 0; t < THREADS; ++t) {
    kreplay_inventory_stats_t stats = test_inventory(workers[t].agent);
    size_t bytes = 0;
    for (i = 1; i < PER_THREAD; i += 2) {
      bytes += workers[t].sizes[i];
    }
    CHECK_EQ(PER_THREAD / 2, stats.regions);
    CHECK_EQ(bytes, stats.bytes);
    CHECK_EQ(0, stats.overflowed);
  }
  for (t = 0; t < THREADS; ++t) {
    for (i = 0; i < PER_THREAD; ++i) {
      if (i % 2 == 1) {
        CHECK_OK(kreplay_record_free(workers[t].ptrs[i]));
      }
      CHECK_OK(kreplay_sim_free(workers[t].ptrs[i]));
    }
    CHECK_EQ(0, test_inventory(workers[t].agent).regions);
  }
}

int main(void) {
  /* First: it checks the state before tracking was ever enabled, and configures the simulated device. */
  RUN_TEST(recording_is_off_until_enabled_and_records_nothing_meanwhile);
  RUN_TEST(coarse_grained_device_memory_is_tracked_for_its_owner);
  RUN_TEST(fine_grained_device_memory_is_not_tracked);
  RUN_TEST(kernarg_memory_is_not_tracked_even_when_coarse_grained);
  RUN_TEST(host_unknown_graphics_and_ipc_memory_is_not_tracked);
  RUN_TEST(locked_host_memory_is_not_tracked);
  RUN_TEST(an_executable_allocation_is_not_tracked_and_never_queried);
  RUN_TEST(allocation_flags_other_than_executable_are_ignored);
  RUN_TEST(freeing_an_untracked_pointer_is_not_found);
  RUN_TEST(null_zero_and_overflowing_sizes_are_invalid);
  RUN_TEST(recording_an_allocation_again_replaces_the_one_whose_free_was_missed);
  RUN_TEST(an_allocation_whose_real_free_failed_is_recorded_again);
  RUN_TEST(a_reused_address_gets_a_new_generation_so_restore_skips_it);
  RUN_TEST(a_vmem_mapping_is_tracked_and_partial_unmaps_trim_or_split_it);
  RUN_TEST(a_vmem_mapping_over_part_of_another_replaces_that_part);
  RUN_TEST(vmem_mappings_belong_to_the_owner_they_were_recorded_with);
  RUN_TEST(a_full_inventory_reports_overflow_and_never_loses_an_allocation_silently);
  RUN_TEST(a_failed_pointer_query_declines_every_agent_until_that_pointer_is_freed);
  RUN_TEST(threads_recording_and_freeing_at_once_leave_exact_counts);
  return 0;
}
