/* Frees racing snapshots and restores. Two threads free regions (record_free first, then the real free, as a
 * host's wrapper does) while a third records new allocations and the main thread snapshots and restores in a
 * loop. After a region's record_free has returned, no copy may touch it: the simulated device counts any copy
 * into or out of freed memory as a violation, and each freer overwrites its region with a tombstone between
 * record_free and the real free and checks that no restore wrote over it. */
#include "test_util.h"

#include <sched.h>

enum { REGIONS = 1024, FREERS = 2, NEW_REGIONS = 256, TOMBSTONE = 0xEE };

static const uint64_t AGENT = 0x701;

static void* regions[REGIONS];
static size_t sizes[REGIONS];
static void* new_regions[NEW_REGIONS];

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static int workers_done;

static bool all_workers_done(void) {
  bool done;
  pthread_mutex_lock(&done_lock);
  done = workers_done == FREERS + 1;
  pthread_mutex_unlock(&done_lock);
  return done;
}

static void worker_finished(void) {
  pthread_mutex_lock(&done_lock);
  ++workers_done;
  pthread_mutex_unlock(&done_lock);
}

static void* free_regions(void* arg) {
  size_t first = (size_t)(uintptr_t)arg;
  size_t i;
  for (i = first; i < REGIONS; i += FREERS) {
    int spin;
    CHECK_OK(kreplay_record_free(regions[i]));
    /* From here the memory is no longer the application's: a restore that wrote now would clobber this. */
    memset(regions[i], TOMBSTONE, sizes[i]);
    for (spin = 0; spin < 20; ++spin) {
      sched_yield();
    }
    CHECK(test_all_bytes(regions[i], sizes[i], TOMBSTONE));
    CHECK_OK(kreplay_sim_free(regions[i]));
  }
  worker_finished();
  return NULL;
}

static void* allocate_regions(void* arg) {
  size_t i;
  (void)arg;
  for (i = 0; i < NEW_REGIONS; ++i) {
    /* Filled before it is recorded, so that every snapshot that captures it holds these bytes. */
    CHECK_OK(kreplay_sim_alloc(test_agent(AGENT), 512, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED,
                               &new_regions[i]));
    test_fill(new_regions[i], 512, 7);
    CHECK_OK(kreplay_record_alloc(new_regions[i], 512, 0));
    sched_yield();
  }
  worker_finished();
  return NULL;
}

static void a_thread_freeing_regions_never_sees_a_copy_after_its_record_free(void) {
  const kreplay_agent_t agent = test_agent(AGENT);
  unsigned char* variable = (unsigned char*)test_module_variable(agent, "state", 64, false);
  pthread_t freers[FREERS];
  pthread_t allocator;
  size_t snapshots = 0;
  size_t skipped = 0;
  size_t violations = test_counters().violations;
  size_t i;
  kreplay_inventory_stats_t stats;

  for (i = 0; i < REGIONS; ++i) {
    sizes[i] = 256 + (i % 16) * 256;
    regions[i] = test_alloc(agent, sizes[i]);
    test_fill(regions[i], sizes[i], (unsigned)i);
  }
  test_fill(variable, 64, 3);
  /* Skips are logged as warnings by design; errors (a failed copy, a bad handle) must not appear. */
  test_log_capture(KREPLAY_LOG_WARNING);

  for (i = 0; i < FREERS; ++i) {
    CHECK(pthread_create(&freers[i], NULL, free_regions, (void*)(uintptr_t)i) == 0);
  }
  CHECK(pthread_create(&allocator, NULL, allocate_regions, NULL) == 0);

  while (!all_workers_done() || snapshots < 3) {
    kreplay_snapshot_t* snapshot = NULL;
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    kreplay_snapshot_info_t info;
    int pass;
    /* Nothing is ever lost here, so a snapshot must never be declined. */
    CHECK_OK(kreplay_snap(agent, &snapshot, &reason));
    memset(&info, 0, sizeof info);
    CHECK_OK(kreplay_snapshot_info(snapshot, &info));
    CHECK_EQ(1, info.module_variables);
    for (pass = 0; pass < 2; ++pass) {
      kreplay_restore_report_t report;
      CHECK_OK(kreplay_restore(snapshot, &report));
      CHECK_EQ(0, report.failed);
      /* Every captured region was either written back or skipped as freed. */
      CHECK_EQ(info.regions + info.module_variables, report.restored + report.skipped);
      skipped += report.skipped;
    }
    kreplay_snapshot_free(snapshot);
    ++snapshots;
  }
  for (i = 0; i < FREERS; ++i) {
    CHECK(pthread_join(freers[i], NULL) == 0);
  }
  CHECK(pthread_join(allocator, NULL) == 0);

  CHECK_EQ(violations, test_counters().violations);
  CHECK_EQ(0, test_log_count(KREPLAY_LOG_ERROR, NULL));
  test_log_stop();
  for (i = 0; i < REGIONS; ++i) {
    CHECK(test_all_bytes(regions[i], sizes[i], 0xDD));
  }
  CHECK(test_has_pattern(variable, 64, 3));
  stats = test_inventory(agent);
  CHECK_EQ(NEW_REGIONS, stats.regions);
  CHECK_EQ(NEW_REGIONS * 512, stats.bytes);
  for (i = 0; i < NEW_REGIONS; ++i) {
    CHECK(test_has_pattern(new_regions[i], 512, 7));
    test_free(new_regions[i]);
  }
  CHECK_EQ(0, test_inventory(agent).regions);
  kreplay_staging_trim(agent);
  CHECK_EQ(0, test_host_memory().mapped_bytes);
  printf("  %zu snapshots, %zu region restores skipped as freed\n", snapshots, skipped);
}

int main(void) {
  test_configure_sim();
  RUN_TEST(a_thread_freeing_regions_never_sees_a_copy_after_its_record_free);
  return 0;
}
