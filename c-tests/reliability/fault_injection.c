/* Fault injection on the simulated device: every device operation of a snapshot and of a restore is made to
 * fail at every position in turn. A snapshot must come out complete or declined with the right reason,
 * a declined one must leave device memory exactly as it was, a failed restore must say so and still write
 * every other region, retained staging must stay within the last footprint, and no host mapping or page
 * lock may outlive the test. */
#include "reliability.h"

#include <stdbool.h>

#define REGIONS 5
#define VARIABLES 3
#define RANGES (REGIONS + VARIABLES)

/* Sizes that cross the staging layout's cases: one byte, odd sizes, a page, more than a page. The simulated device
 * places variables 256 bytes apart, so none of these lies right after another: each is a copy of its own (the
 * engine copies back-to-back variables as one span; core/src/snapshot/v2_tests.rs tests spans and their faults). */
static const size_t region_sizes[REGIONS] = {1, 100, 3000, 4096, 70000};
static const size_t variable_sizes[VARIABLES] = {8, 250, 20};
static const char* const variable_names[VARIABLES] = {"counter", "table", "flags"};

/* One agent with REGIONS tracked allocations and VARIABLES module variables; ranges lists regions first. */
typedef struct world_t {
  kreplay_agent_t agent;
  rel_range_t ranges[RANGES];
  size_t bytes;
} world_t;

static world_t world_create(uint64_t handle) {
  world_t world;
  size_t i;
  memset(&world, 0, sizeof world);
  world.agent.handle = handle;
  for (i = 0; i < REGIONS; ++i) {
    void* ptr = NULL;
    REL_REQUIRE(kreplay_sim_alloc(world.agent, region_sizes[i], KREPLAY_POINTER_DEVICE,
                                  KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &ptr) == KREPLAY_STATUS_SUCCESS);
    REL_REQUIRE(kreplay_record_alloc(ptr, region_sizes[i], 0) == KREPLAY_STATUS_SUCCESS);
    world.ranges[i].address = (unsigned char*)ptr;
    world.ranges[i].size = region_sizes[i];
    world.bytes += region_sizes[i];
  }
  for (i = 0; i < VARIABLES; ++i) {
    void* ptr = NULL;
    REL_REQUIRE(kreplay_sim_add_module_variable(world.agent, variable_names[i], variable_sizes[i], i == 1, &ptr) ==
                KREPLAY_STATUS_SUCCESS);
    world.ranges[REGIONS + i].address = (unsigned char*)ptr;
    world.ranges[REGIONS + i].size = variable_sizes[i];
    world.bytes += variable_sizes[i];
  }
  return world;
}

/* Module variables stay registered with the simulated device: each test uses its own agent. */
static void world_destroy(world_t* world) {
  size_t i;
  for (i = 0; i < REGIONS; ++i) {
    REL_CHECK_STATUS(kreplay_record_free(world->ranges[i].address), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_STATUS(kreplay_sim_free(world->ranges[i].address), KREPLAY_STATUS_SUCCESS);
  }
}

/* What staging a snapshot of the world may keep once freed: its packed contents (each range starts on a
 * 64-byte boundary), the pool's 1/8 headroom, and rounding to whole pages. */
static size_t footprint_bound(const world_t* world) {
  size_t packed = world->bytes + 64 * RANGES;
  return packed + packed / 8 + 4096;
}

static void disarm(void) { kreplay_sim_set_faults(NULL); }

/* A successful snapshot must capture everything and give it back exactly, then be freed. */
static void check_complete_snapshot(const world_t* world, kreplay_snapshot_t* snapshot, unsigned scribble_seed) {
  kreplay_snapshot_info_t info;
  kreplay_restore_report_t report;
  unsigned char* captured = rel_image_take(world->ranges, RANGES);
  size_t retained;
  REL_CHECK_STATUS(kreplay_snapshot_info(snapshot, &info), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(info.regions, REGIONS);
  REL_CHECK_EQ(info.module_variables, VARIABLES);
  REL_CHECK_EQ(info.bytes, world->bytes);
  REL_CHECK(info.agent.handle == world->agent.handle);
  rel_fill(world->ranges, RANGES, scribble_seed);
  REL_CHECK_STATUS(kreplay_restore(snapshot, &report), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(report.restored, RANGES);
  REL_CHECK_EQ(report.failed, 0);
  REL_CHECK_EQ(report.skipped, 0);
  REL_CHECK_EQ(report.bytes, world->bytes);
  REL_CHECK_EQ(rel_image_first_difference(world->ranges, RANGES, captured), RANGES);
  kreplay_snapshot_free(snapshot);
  retained = kreplay_retained_staging_bytes(world->agent);
  REL_CHECK(retained >= world->bytes);
  REL_CHECK(retained <= footprint_bound(world));
  free(captured);
}

/* The k-th device-to-host copy of a snapshot fails, for every k, with and without page-locked staging. */
static void snapshot_copy_fails_at_each_position(uint64_t handle, bool pin) {
  const kreplay_host_memory_stats_t start = rel_host_memory();
  world_t world = world_create(handle);
  kreplay_policy_t policy;
  size_t k;
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.pin_staging = pin;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_SUCCESS);

  for (k = 1; k <= RANGES + 1; ++k) {
    kreplay_sim_faults_t faults;
    kreplay_snapshot_t* snapshot = (kreplay_snapshot_t*)&world; /* must be overwritten with NULL */
    kreplay_decline_reason_t reason = (kreplay_decline_reason_t)99;
    kreplay_sim_counters_t before, after;
    unsigned char* image;
    size_t mark = rel_log.total;
    kreplay_status_t status;

    rel_fill(world.ranges, RANGES, (unsigned)k);
    image = rel_image_take(world.ranges, RANGES);
    memset(&faults, 0, sizeof faults);
    faults.fail_copy_at = k;
    before = rel_counters();
    kreplay_sim_set_faults(&faults);
    status = kreplay_snap(world.agent, &snapshot, &reason);
    disarm();
    after = rel_counters();

    if (k <= RANGES) {
      REL_CHECK_STATUS(status, KREPLAY_STATUS_DECLINED);
      REL_CHECK(snapshot == NULL);
      REL_CHECK(reason == KREPLAY_DECLINE_COPY_FAILED);
      REL_CHECK_EQ(after.failed_copies - before.failed_copies, 1);
      /* Capture stops at the failure: nothing after it is even read. */
      REL_CHECK_EQ(after.copies - before.copies, k - 1);
      REL_CHECK_EQ(after.copies_to_device - before.copies_to_device, 0);
      REL_CHECK_EQ(rel_image_first_difference(world.ranges, RANGES, image), RANGES);
      REL_CHECK_EQ(kreplay_retained_staging_bytes(world.agent), 0);
      REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "declined");
    } else {
      REL_CHECK_STATUS(status, KREPLAY_STATUS_SUCCESS);
      REL_CHECK(reason == KREPLAY_DECLINE_NONE);
      REL_CHECK(snapshot != NULL);
      REL_CHECK_EQ(after.copies - before.copies, RANGES);
      if (status == KREPLAY_STATUS_SUCCESS && snapshot != NULL) {
        check_complete_snapshot(&world, snapshot, 1000u + (unsigned)k);
      }
    }
    /* A declined snapshot keeps no staging (the trim at the end of capture), so nothing is left locked. */
    if (pin) {
      kreplay_sim_counters_t locks = rel_counters();
      if (k <= RANGES) {
        REL_CHECK_EQ(locks.host_locks, locks.host_unlocks);
        REL_CHECK_EQ(locks.locked_bytes, 0);
      }
    }
    free(image);
  }

  policy.pin_staging = false;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_SUCCESS);
  world_destroy(&world);
  REL_CHECK_NO_LEAKS(start, &world.agent, 1);
}

/* The k-th host-to-device copy of a restore fails, for every k: reported, and every other range written. */
static void restore_copy_fails_at_each_position(uint64_t handle) {
  const kreplay_host_memory_stats_t start = rel_host_memory();
  world_t world = world_create(handle);
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_restore_report_t report;
  unsigned char* captured;
  size_t k;

  rel_fill(world.ranges, RANGES, 7);
  captured = rel_image_take(world.ranges, RANGES);
  REL_REQUIRE(kreplay_snap(world.agent, &snapshot, NULL) == KREPLAY_STATUS_SUCCESS && snapshot != NULL);

  for (k = 1; k <= RANGES; ++k) {
    kreplay_sim_faults_t faults;
    unsigned char* scribbled;
    size_t mark = rel_log.total, failed_range, at = 0, i;

    rel_fill(world.ranges, RANGES, 50u + (unsigned)k);
    scribbled = rel_image_take(world.ranges, RANGES);
    memset(&faults, 0, sizeof faults);
    faults.fail_copy_at = k;
    kreplay_sim_set_faults(&faults);
    memset(&report, 0xAB, sizeof report);
    REL_CHECK_STATUS(kreplay_restore(snapshot, &report), KREPLAY_STATUS_PARTIAL_RESTORE);
    disarm();
    REL_CHECK_EQ(report.failed, 1);
    REL_CHECK_EQ(report.restored, RANGES - 1);
    REL_CHECK_EQ(report.skipped, 0);
    /* The failed copy is a warning naming it; the partial restore is an error. */
    REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "failed");
    REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "could not be restored");
    /* Exactly one range was not written back, and it still holds what it held before the restore. */
    REL_CHECK_EQ(rel_image_differences(world.ranges, RANGES, captured), 1);
    failed_range = rel_image_first_difference(world.ranges, RANGES, captured);
    if (failed_range < RANGES) {
      for (i = 0; i < failed_range; ++i) {
        at += world.ranges[i].size;
      }
      REL_CHECK(memcmp(world.ranges[failed_range].address, scribbled + at, world.ranges[failed_range].size) == 0);
      REL_CHECK_EQ(report.bytes, world.bytes - world.ranges[failed_range].size);
    }
    free(scribbled);

    /* The snapshot itself is intact: the next restore without a fault writes everything. */
    REL_CHECK_STATUS(kreplay_restore(snapshot, &report), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_EQ(report.restored, RANGES);
    REL_CHECK_EQ(rel_image_first_difference(world.ranges, RANGES, captured), RANGES);
  }

  /* Every copy from the k-th on fails: the earlier ones are still written. */
  for (k = 1; k <= RANGES; ++k) {
    kreplay_sim_faults_t faults;
    unsigned char* scribbled;
    rel_fill(world.ranges, RANGES, 90u + (unsigned)k);
    scribbled = rel_image_take(world.ranges, RANGES);
    memset(&faults, 0, sizeof faults);
    faults.fail_copies_from = k;
    kreplay_sim_set_faults(&faults);
    REL_CHECK_STATUS(kreplay_restore(snapshot, &report), KREPLAY_STATUS_PARTIAL_RESTORE);
    disarm();
    REL_CHECK_EQ(report.failed, RANGES - k + 1);
    REL_CHECK_EQ(report.restored, k - 1);
    REL_CHECK_EQ(rel_image_differences(world.ranges, RANGES, captured), RANGES - k + 1);
    if (k == 1) {
      REL_CHECK_EQ(rel_image_first_difference(world.ranges, RANGES, scribbled), RANGES);
      REL_CHECK_EQ(report.bytes, 0);
    }
    free(scribbled);
  }

  kreplay_snapshot_free(snapshot);
  free(captured);
  world_destroy(&world);
  REL_CHECK_NO_LEAKS(start, &world.agent, 1);
}

/* The pointer query of each region's record_alloc fails in turn: the allocation is remembered as lost, every
 * agent's snapshots are declined until it is freed, and recording it again makes snapshots whole again. */
static void pointer_query_fails_for_each_region(uint64_t handle, uint64_t other_handle) {
  const kreplay_host_memory_stats_t start = rel_host_memory();
  world_t world = world_create(handle);
  world_t other = world_create(other_handle);
  kreplay_agent_t agents[2];
  size_t i;
  agents[0] = world.agent;
  agents[1] = other.agent;

  for (i = 0; i < REGIONS; ++i) {
    kreplay_sim_faults_t faults;
    kreplay_inventory_stats_t stats;
    kreplay_snapshot_t* snapshot = NULL;
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    unsigned char* image;
    size_t mark, queries;
    void* address = world.ranges[i].address;
    size_t size = world.ranges[i].size;

    REL_CHECK_STATUS(kreplay_record_free(address), KREPLAY_STATUS_SUCCESS);
    memset(&faults, 0, sizeof faults);
    faults.fail_pointer_info = true;
    kreplay_sim_set_faults(&faults);
    mark = rel_log.total;
    queries = rel_counters().pointer_queries;
    REL_CHECK_STATUS(kreplay_record_alloc(address, size, 0), KREPLAY_STATUS_DEVICE_ERROR);
    disarm();
    REL_CHECK_EQ(rel_counters().pointer_queries, queries);
    REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "pointer query");

    /* The owner is unknown, so every agent is declined. */
    REL_CHECK_STATUS(kreplay_inventory_stats(world.agent, &stats), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_EQ(stats.overflowed, 1);
    REL_CHECK_EQ(stats.regions, REGIONS - 1);
    REL_CHECK_STATUS(kreplay_inventory_stats(other.agent, &stats), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_EQ(stats.overflowed, 1);
    rel_fill(world.ranges, RANGES, 200u + (unsigned)i);
    image = rel_image_take(world.ranges, RANGES);
    mark = rel_log.total;
    REL_CHECK_STATUS(kreplay_snap(world.agent, &snapshot, &reason), KREPLAY_STATUS_DECLINED);
    REL_CHECK(snapshot == NULL && reason == KREPLAY_DECLINE_INVENTORY_OVERFLOW);
    REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "KREPLAY_MAX_TRACKED_REGIONS");
    REL_CHECK_STATUS(kreplay_snap(other.agent, &snapshot, &reason), KREPLAY_STATUS_DECLINED);
    REL_CHECK(snapshot == NULL && reason == KREPLAY_DECLINE_INVENTORY_OVERFLOW);
    REL_CHECK_EQ(rel_image_first_difference(world.ranges, RANGES, image), RANGES);
    REL_CHECK_EQ(kreplay_retained_staging_bytes(world.agent), 0);
    free(image);

    /* The host frees the lost allocation (or its free is recorded): snapshots are whole again. */
    REL_CHECK_STATUS(kreplay_record_free(address), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_STATUS(kreplay_inventory_stats(world.agent, &stats), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_EQ(stats.overflowed, 0);
    REL_CHECK_STATUS(kreplay_record_alloc(address, size, 0), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_STATUS(kreplay_snap(world.agent, &snapshot, &reason), KREPLAY_STATUS_SUCCESS);
    if (snapshot != NULL) {
      check_complete_snapshot(&world, snapshot, 300u + (unsigned)i);
    }
  }

  world_destroy(&world);
  world_destroy(&other);
  REL_CHECK_NO_LEAKS(start, agents, 2);
}

/* The module scan fails when it reaches each variable in turn: declined before any copy or mapping. */
static void module_scan_fails_at_each_variable(uint64_t handle) {
  const kreplay_host_memory_stats_t start = rel_host_memory();
  world_t world = world_create(handle);
  size_t k;
  for (k = 1; k <= VARIABLES + 1; ++k) {
    kreplay_sim_faults_t faults;
    kreplay_snapshot_t* snapshot = NULL;
    kreplay_decline_reason_t reason = (kreplay_decline_reason_t)99;
    kreplay_sim_counters_t before, after;
    kreplay_host_memory_stats_t maps_before;
    unsigned char* image;
    size_t mark = rel_log.total;
    kreplay_status_t status;

    rel_fill(world.ranges, RANGES, 400u + (unsigned)k);
    image = rel_image_take(world.ranges, RANGES);
    memset(&faults, 0, sizeof faults);
    faults.fail_module_scan_at = k;
    before = rel_counters();
    maps_before = rel_host_memory();
    kreplay_sim_set_faults(&faults);
    status = kreplay_snap(world.agent, &snapshot, &reason);
    disarm();
    after = rel_counters();
    if (k <= VARIABLES) {
      REL_CHECK_STATUS(status, KREPLAY_STATUS_DECLINED);
      REL_CHECK(snapshot == NULL && reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE);
      REL_CHECK_EQ(after.copies - before.copies, 0);
      REL_CHECK_EQ(rel_host_memory().maps - maps_before.maps, 0);
      REL_CHECK_EQ(rel_image_first_difference(world.ranges, RANGES, image), RANGES);
      REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "module scan");
      REL_CHECK_EQ(kreplay_retained_staging_bytes(world.agent), 0);
    } else {
      REL_CHECK_STATUS(status, KREPLAY_STATUS_SUCCESS);
      if (snapshot != NULL) {
        check_complete_snapshot(&world, snapshot, 500u + (unsigned)k);
      }
    }
    REL_CHECK_EQ(after.module_scans - before.module_scans, 1);
    free(image);
  }
  world_destroy(&world);
  REL_CHECK_NO_LEAKS(start, &world.agent, 1);
}

/* ---- Host mappings refused ------------------------------------------------------------------------------ */

enum { WORKLOAD_STEPS = 6 };

/* What one run of the mapping workload did. */
typedef struct workload_t {
  kreplay_status_t status[WORKLOAD_STEPS];
  kreplay_decline_reason_t reason[2];
  kreplay_snapshot_t* snapshot[2];
  kreplay_staging_buffer_t buffer[4];
} workload_t;

/* Two snapshots and four staging buffers (slab-sized and page-backed) on two agents, from trimmed pools, so
 * that every step has to map. */
static void workload_run(workload_t* run, world_t* a, world_t* b) {
  static const size_t sizes[4] = {100, 1u << 20, 3000, 16};
  size_t i;
  memset(run, 0, sizeof *run);
  run->status[0] = kreplay_snap(a->agent, &run->snapshot[0], &run->reason[0]);
  run->status[1] = kreplay_snap(b->agent, &run->snapshot[1], &run->reason[1]);
  for (i = 0; i < 4; ++i) {
    run->status[2 + i] = kreplay_staging_acquire(&run->buffer[i], i < 2 ? a->agent : b->agent, sizes[i]);
    if (run->status[2 + i] == KREPLAY_STATUS_SUCCESS) {
      REL_CHECK(run->buffer[i].data != NULL && run->buffer[i].size == sizes[i]);
      /* The storage is the caller's to write, all of it. */
      memset(run->buffer[i].data, 0x5C, run->buffer[i].capacity);
    }
  }
}

static void workload_undo(workload_t* run, world_t* a, world_t* b) {
  size_t i;
  for (i = 0; i < 2; ++i) {
    kreplay_snapshot_free(run->snapshot[i]);
  }
  for (i = 0; i < 4; ++i) {
    kreplay_staging_release(&run->buffer[i]);
    REL_CHECK(run->buffer[i].data == NULL);
  }
  kreplay_staging_trim(a->agent);
  kreplay_staging_trim(b->agent);
}

static void host_map_refused_at_each_position(uint64_t handle_a, uint64_t handle_b) {
  const kreplay_host_memory_stats_t start = rel_host_memory();
  world_t a = world_create(handle_a);
  world_t b = world_create(handle_b);
  kreplay_agent_t agents[2];
  workload_t run;
  size_t maps, k, i;
  kreplay_host_memory_stats_t before;
  agents[0] = a.agent;
  agents[1] = b.agent;

  /* A dry run counts the mappings the workload makes. */
  before = rel_host_memory();
  workload_run(&run, &a, &b);
  for (i = 0; i < WORKLOAD_STEPS; ++i) {
    REL_CHECK_STATUS(run.status[i], KREPLAY_STATUS_SUCCESS);
  }
  maps = rel_host_memory().maps - before.maps;
  REL_CHECK(maps >= WORKLOAD_STEPS);
  workload_undo(&run, &a, &b);
  printf("host mapping workload: %zu mappings\n", maps);

  for (k = 1; k <= maps + 1; ++k) {
    kreplay_sim_faults_t faults;
    unsigned char* image_a;
    unsigned char* image_b;
    size_t failed = 0, mark = rel_log.total;

    rel_fill(a.ranges, RANGES, 600u + (unsigned)k);
    rel_fill(b.ranges, RANGES, 700u + (unsigned)k);
    image_a = rel_image_take(a.ranges, RANGES);
    image_b = rel_image_take(b.ranges, RANGES);
    memset(&faults, 0, sizeof faults);
    faults.fail_host_map_at = k;
    kreplay_sim_set_faults(&faults);
    workload_run(&run, &a, &b);
    disarm();

    for (i = 0; i < 2; ++i) {
      if (run.status[i] != KREPLAY_STATUS_SUCCESS) {
        ++failed;
        REL_CHECK_STATUS(run.status[i], KREPLAY_STATUS_DECLINED);
        REL_CHECK(run.snapshot[i] == NULL && run.reason[i] == KREPLAY_DECLINE_STAGING_MEMORY);
        REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "declined");
      }
    }
    for (i = 0; i < 4; ++i) {
      if (run.status[2 + i] != KREPLAY_STATUS_SUCCESS) {
        ++failed;
        REL_CHECK_STATUS(run.status[2 + i], KREPLAY_STATUS_OUT_OF_HOST_MEMORY);
        REL_CHECK(run.buffer[i].data == NULL && run.buffer[i].size == 0 && run.buffer[i].capacity == 0);
        REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_staging_acquire");
      }
    }
    REL_CHECK_EQ(failed, k <= maps ? 1 : 0);
    /* Declined or not, nothing was written to the device; the snapshots that were taken restore exactly. */
    REL_CHECK_EQ(rel_image_first_difference(a.ranges, RANGES, image_a), RANGES);
    REL_CHECK_EQ(rel_image_first_difference(b.ranges, RANGES, image_b), RANGES);
    if (run.snapshot[0] != NULL) {
      kreplay_restore_report_t report;
      rel_fill(a.ranges, RANGES, 1u);
      REL_CHECK_STATUS(kreplay_restore(run.snapshot[0], &report), KREPLAY_STATUS_SUCCESS);
      REL_CHECK_EQ(rel_image_first_difference(a.ranges, RANGES, image_a), RANGES);
    }
    workload_undo(&run, &a, &b);
    REL_CHECK_EQ(rel_host_memory().mapped_bytes, start.mapped_bytes);
    free(image_a);
    free(image_b);
  }

  /* Steady state maps nothing: with the next mapping armed to fail, a snapshot that reuses retained staging
   * still succeeds. */
  {
    kreplay_snapshot_t* snapshot = NULL;
    kreplay_sim_faults_t faults;
    REL_CHECK_STATUS(kreplay_snap(a.agent, &snapshot, NULL), KREPLAY_STATUS_SUCCESS);
    kreplay_snapshot_free(snapshot);
    memset(&faults, 0, sizeof faults);
    faults.fail_host_map_at = 1;
    before = rel_host_memory();
    kreplay_sim_set_faults(&faults);
    snapshot = NULL;
    REL_CHECK_STATUS(kreplay_snap(a.agent, &snapshot, NULL), KREPLAY_STATUS_SUCCESS);
    disarm();
    REL_CHECK_EQ(rel_host_memory().maps, before.maps);
    if (snapshot != NULL) {
      check_complete_snapshot(&a, snapshot, 800u);
    }
  }

  world_destroy(&a);
  world_destroy(&b);
  REL_CHECK_NO_LEAKS(start, agents, 2);
}

/* page-locking refused: the snapshot still completes on pageable staging, with a warning; once locking works
 * the retained block is locked once and unlocked exactly once, before it is unmapped. */
static void page_lock_refused(uint64_t handle) {
  const kreplay_host_memory_stats_t start = rel_host_memory();
  world_t world = world_create(handle);
  kreplay_policy_t policy;
  kreplay_sim_faults_t faults;
  kreplay_sim_counters_t before, after;
  kreplay_snapshot_t* snapshot = NULL;
  size_t mark, round;

  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.pin_staging = true;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_SUCCESS);

  memset(&faults, 0, sizeof faults);
  faults.refuse_host_lock = true;
  before = rel_counters();
  mark = rel_log.total;
  kreplay_sim_set_faults(&faults);
  rel_fill(world.ranges, RANGES, 900u);
  REL_CHECK_STATUS(kreplay_snap(world.agent, &snapshot, NULL), KREPLAY_STATUS_SUCCESS);
  after = rel_counters();
  REL_CHECK_EQ(after.host_locks - before.host_locks, 0);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "page-locking");
  if (snapshot != NULL) {
    check_complete_snapshot(&world, snapshot, 901u);
  }
  /* Still refused: the retained, unlocked block is reused and locking is tried again (and refused again). */
  snapshot = NULL;
  REL_CHECK_STATUS(kreplay_snap(world.agent, &snapshot, NULL), KREPLAY_STATUS_SUCCESS);
  kreplay_snapshot_free(snapshot);
  disarm();

  /* Locking works now: the unlocked retained block gets locked once and stays so across snapshots. */
  before = rel_counters();
  for (round = 0; round < 3; ++round) {
    snapshot = NULL;
    REL_CHECK_STATUS(kreplay_snap(world.agent, &snapshot, NULL), KREPLAY_STATUS_SUCCESS);
    if (snapshot != NULL) {
      check_complete_snapshot(&world, snapshot, 910u + (unsigned)round);
    }
  }
  after = rel_counters();
  REL_CHECK_EQ(after.host_locks - before.host_locks, 1);
  REL_CHECK(after.locked_bytes > 0);
  kreplay_staging_trim(world.agent);
  after = rel_counters();
  REL_CHECK_EQ(after.host_unlocks - before.host_unlocks, 1);
  REL_CHECK_EQ(after.locked_bytes, 0);

  policy.pin_staging = false;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_SUCCESS);
  world_destroy(&world);
  REL_CHECK_NO_LEAKS(start, &world.agent, 1);
}

int main(void) {
  kreplay_sim_reset();
  rel_log_install(KREPLAY_LOG_TRACE);
  rel_configure_sim();
  kreplay_tracking_enable(true);

  snapshot_copy_fails_at_each_position(0xF1, false);
  snapshot_copy_fails_at_each_position(0xF2, true);
  restore_copy_fails_at_each_position(0xF3);
  pointer_query_fails_for_each_region(0xF4, 0xF5);
  module_scan_fails_at_each_variable(0xF6);
  host_map_refused_at_each_position(0xF7, 0xF8);
  page_lock_refused(0xF9);

  REL_CHECK_EQ(rel_log.bad_length, 0);
  REL_CHECK_EQ(rel_log.invalid_level, 0);
  return rel_finish("kreplay_reliability_fault_injection");
}
