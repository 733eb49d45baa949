/* Bad input at every exported function: NULLs, zero and overflowing sizes, pointers never recorded, double
 * frees and releases, stale and garbage handles, unknown enum values, malformed device ops and policies.
 * Each call must return its documented status, log a line where the library promises one, and leave the
 * library working: the test ends with a snapshot and restore that must still be exact, and a leak check. */
#include "reliability.h"

#include <stdbool.h>
#include <stddef.h>

static const kreplay_agent_t agent = {0xB1};
static const kreplay_agent_t other_agent = {0xB2};

/* ---- Device ops that must never be called ------------------------------------------------------------- */

static size_t forbidden_calls = 0;

static kreplay_status_t forbidden_lock(void* user_data, void* ptr, size_t bytes) {
  (void)user_data;
  (void)ptr;
  (void)bytes;
  ++forbidden_calls;
  return KREPLAY_STATUS_DEVICE_ERROR;
}

static void configure_bad_ops(void) {
  kreplay_device_ops_t good, ops;
  size_t mark;
  REL_REQUIRE(kreplay_sim_device_ops(&good) == KREPLAY_STATUS_SUCCESS);

  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_configure(NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_configure");

  /* struct_size from zero up to just short of the three required ops. */
  {
    size_t size;
    for (size = 0; size < offsetof(kreplay_device_ops_t, host_lock); size += sizeof(void*) / 2) {
      ops = good;
      ops.struct_size = size;
      mark = rel_log.total;
      REL_CHECK_STATUS(kreplay_configure(&ops), KREPLAY_STATUS_INVALID_ARGUMENT);
      REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "struct_size");
    }
  }

  /* Each required op missing in turn. */
  ops = good;
  ops.copy = NULL;
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_configure(&ops), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "required");
  ops = good;
  ops.pointer_info = NULL;
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_configure(&ops), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "required");
  ops = good;
  ops.iterate_module_variables = NULL;
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_configure(&ops), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "required");

  /* host_lock without host_unlock, and the reverse. */
  ops = good;
  ops.host_unlock = NULL;
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_configure(&ops), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "host_lock");
  ops = good;
  ops.host_lock = NULL;
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_configure(&ops), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "host_lock");
}

/* A version-1 caller's struct ends before copy_batch: the version-2 ops that happen to follow it in memory are
 * never called, even with a policy that asks for the device tier and dirty-only, and device_alloc without
 * device_free is refused. */
static void configure_version_one_struct_gets_version_one_behaviour(void) {
  kreplay_device_ops_t ops;
  kreplay_sim_options_t options;
  kreplay_sim_counters_t before, after;
  kreplay_policy_t policy;
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_restore_report_t report;
  void* region = NULL;
  size_t mark;
  memset(&options, 0, sizeof options);
  options.copy_batch = true;
  options.device_alloc = true;
  options.digest = true;
  kreplay_sim_set_options(&options);
  REL_REQUIRE(kreplay_sim_device_ops(&ops) == KREPLAY_STATUS_SUCCESS);
  REL_CHECK(ops.copy_batch != NULL && ops.device_alloc != NULL && ops.digest != NULL);

  /* Both or neither. */
  {
    kreplay_device_ops_t half = ops;
    half.device_free = NULL;
    mark = rel_log.total;
    REL_CHECK_STATUS(kreplay_configure(&half), KREPLAY_STATUS_INVALID_ARGUMENT);
    REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "device_alloc");
  }

  ops.struct_size = offsetof(kreplay_device_ops_t, copy_batch);
  REL_CHECK_STATUS(kreplay_configure(&ops), KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.device_budget_bytes = (size_t)1 << 30;
  policy.dirty_only = true;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_SUCCESS);
  REL_REQUIRE(kreplay_sim_alloc(agent, 8192, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &region) ==
              KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_alloc(region, 8192, 0), KREPLAY_STATUS_SUCCESS);
  before = rel_counters();
  REL_CHECK_STATUS(kreplay_snap(agent, &snapshot, NULL), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_restore(snapshot, &report), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(report.clean_bytes, 0);
  kreplay_snapshot_free(snapshot);
  after = rel_counters();
  REL_CHECK_EQ(after.batches - before.batches, 0);
  REL_CHECK_EQ(after.device_allocs - before.device_allocs, 0);
  REL_CHECK_EQ(after.digests - before.digests, 0);
  REL_CHECK_EQ(kreplay_retained_device_bytes(agent), 0);

  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_free(region), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_sim_free(region), KREPLAY_STATUS_SUCCESS);
  kreplay_staging_trim(agent);
  memset(&options, 0, sizeof options);
  kreplay_sim_set_options(&options);
  REL_REQUIRE(kreplay_sim_device_ops(&ops) == KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_configure(&ops), KREPLAY_STATUS_SUCCESS);
}

/* An older caller's struct ends before host_lock: the bytes after it are not the library's to read, so the
 * optional ops must count as absent even though this copy happens to hold a function there. */
static void configure_short_struct_ignores_trailing_ops(void) {
  kreplay_device_ops_t ops;
  kreplay_policy_t policy;
  kreplay_snapshot_t* snapshot = NULL;
  void* region = NULL;
  REL_REQUIRE(kreplay_sim_device_ops(&ops) == KREPLAY_STATUS_SUCCESS);
  ops.struct_size = offsetof(kreplay_device_ops_t, host_lock);
  ops.host_lock = forbidden_lock;
  ops.host_unlock = forbidden_lock;
  REL_CHECK_STATUS(kreplay_configure(&ops), KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.pin_staging = true;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_SUCCESS);
  REL_REQUIRE(kreplay_sim_alloc(agent, 8192, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &region) ==
              KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_alloc(region, 8192, 0), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_snap(agent, &snapshot, NULL), KREPLAY_STATUS_SUCCESS);
  kreplay_snapshot_free(snapshot);
  kreplay_staging_trim(agent);
  REL_CHECK_EQ(forbidden_calls, 0);
  policy.pin_staging = false;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_free(region), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_sim_free(region), KREPLAY_STATUS_SUCCESS);

  /* A newer caller's larger struct is accepted. */
  REL_REQUIRE(kreplay_sim_device_ops(&ops) == KREPLAY_STATUS_SUCCESS);
  ops.struct_size = sizeof ops + 64;
  {
    /* The library may read struct_size bytes: give it that many. */
    unsigned char larger[sizeof(kreplay_device_ops_t) + 64];
    memset(larger, 0, sizeof larger);
    memcpy(larger, &ops, sizeof ops);
    REL_CHECK_STATUS(kreplay_configure((const kreplay_device_ops_t*)(const void*)larger), KREPLAY_STATUS_SUCCESS);
  }
}

static void policy_bad_input(void) {
  kreplay_policy_t policy;
  size_t mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_set_policy(NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_set_policy");
  memset(&policy, 0, sizeof policy);
  /* Shorter than the version-1 fields (struct_size, pin_staging, max_snapshot_bytes). */
  policy.struct_size = offsetof(kreplay_policy_t, max_snapshot_bytes) + sizeof policy.max_snapshot_bytes - 1;
  policy.max_snapshot_bytes = 1; /* would decline everything if it were taken */
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "struct_size");
  policy.struct_size = 0;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_INVALID_ARGUMENT);
  /* A digest block that is not a power of two from 4 KiB to 16 MiB. */
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.digest_block_bytes = 3u << 12;
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "digest_block_bytes");
  policy.digest_block_bytes = 2048;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_INVALID_ARGUMENT);
  policy.digest_block_bytes = 32u << 20;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_INVALID_ARGUMENT);
  policy.digest_block_bytes = 0; /* the default */
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_SUCCESS);
}

/* ---- Before configure --------------------------------------------------------------------------------- */

static void unconfigured_calls(void) {
  kreplay_snapshot_t* snapshot = (kreplay_snapshot_t*)&forbidden_calls;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  kreplay_inventory_stats_t stats;
  int local = 0;

  /* Tracking off: record_* succeed doing nothing, and snapshots are declined. */
  REL_CHECK(!kreplay_tracking_is_enabled());
  REL_CHECK_STATUS(kreplay_record_alloc(&local, sizeof local, 0), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_free(&local), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_snap(agent, &snapshot, &reason), KREPLAY_STATUS_DECLINED);
  REL_CHECK(snapshot == NULL && reason == KREPLAY_DECLINE_NOT_CONFIGURED);

  /* Tracking on, still no ops. */
  kreplay_tracking_enable(true);
  snapshot = (kreplay_snapshot_t*)&forbidden_calls;
  REL_CHECK_STATUS(kreplay_snap(agent, &snapshot, &reason), KREPLAY_STATUS_DECLINED);
  REL_CHECK(snapshot == NULL && reason == KREPLAY_DECLINE_NOT_CONFIGURED);
  REL_CHECK_STATUS(kreplay_inventory_stats(agent, &stats), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats.regions, 0);
  kreplay_tracking_enable(false);
}

/* ---- Tracking ------------------------------------------------------------------------------------------ */

static void tracking_bad_input(void) {
  kreplay_inventory_stats_t stats;
  void* region = NULL;
  size_t mark;
  int host_local = 0;
  kreplay_sim_counters_t before;

  REL_REQUIRE(kreplay_sim_alloc(agent, 4096, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &region) ==
              KREPLAY_STATUS_SUCCESS);

  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_alloc(NULL, 4096, 0), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "record_alloc");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_alloc(region, 0, 0), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "record_alloc");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_alloc(region, SIZE_MAX, 0), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "overflowing");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_alloc((void*)(uintptr_t)(UINTPTR_MAX - 15), 32, 0), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "overflowing");
  REL_CHECK_STATUS(kreplay_inventory_stats(agent, &stats), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats.regions, 0);
  REL_CHECK_EQ(stats.overflowed, 0);

  /* Memory the device does not know (host stack) is classified and left untracked: SUCCESS. */
  REL_CHECK_STATUS(kreplay_record_alloc(&host_local, sizeof host_local, 0), KREPLAY_STATUS_SUCCESS);
  /* An executable allocation is filtered before any query; unknown flag bits are ignored. */
  before = rel_counters();
  REL_CHECK_STATUS(kreplay_record_alloc(region, 4096, KREPLAY_ALLOC_FLAG_EXECUTABLE | 0xFFFF0000u),
                   KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(rel_counters().pointer_queries, before.pointer_queries);
  REL_CHECK_STATUS(kreplay_inventory_stats(agent, &stats), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats.regions, 0);
  REL_CHECK_STATUS(kreplay_record_alloc(region, 4096, 0xFFFF0000u), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_inventory_stats(agent, &stats), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats.regions, 1);
  REL_CHECK_EQ(stats.bytes, 4096);

  /* Frees of what is not tracked: never recorded, NULL (hipFree(NULL) is legal, so no message is promised
   * for it), a double free, an interior pointer. */
  REL_CHECK_STATUS(kreplay_record_free(&host_local), KREPLAY_STATUS_NOT_FOUND);
  REL_CHECK_STATUS(kreplay_record_free(NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_STATUS(kreplay_record_free((unsigned char*)region + 64), KREPLAY_STATUS_NOT_FOUND);
  REL_CHECK_STATUS(kreplay_record_free(region), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_free(region), KREPLAY_STATUS_NOT_FOUND);
  REL_CHECK_STATUS(kreplay_inventory_stats(agent, &stats), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats.regions, 0);
  REL_CHECK_EQ(stats.bytes, 0);

  /* vmem: NULL, zero and overflowing ranges, and unmaps of what was never mapped. */
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_vmem_map(NULL, 4096, agent), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "record_vmem_map");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_vmem_map(region, 0, agent), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "record_vmem_map");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_vmem_map(region, SIZE_MAX, agent), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "overflowing");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_vmem_unmap(NULL, 4096), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "record_vmem_unmap");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_vmem_unmap(region, 0), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "record_vmem_unmap");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_vmem_unmap(region, SIZE_MAX), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "overflowing");
  REL_CHECK_STATUS(kreplay_record_vmem_unmap(region, 4096), KREPLAY_STATUS_NOT_FOUND);
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_vmem_map_unknown_owner(NULL, 4096), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "record_vmem_map_unknown");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_vmem_map_unknown_owner(region, 0), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "record_vmem_map_unknown");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_record_vmem_map_unknown_owner(region, SIZE_MAX), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "overflowing");
  REL_CHECK_STATUS(kreplay_inventory_stats(agent, &stats), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats.overflowed, 0);
  /* A double unmap. */
  REL_CHECK_STATUS(kreplay_record_vmem_map(region, 4096, agent), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_vmem_unmap(region, 4096), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_vmem_unmap(region, 4096), KREPLAY_STATUS_NOT_FOUND);

  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_inventory_stats(agent, NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_inventory_stats");
  /* An agent never seen has nothing tracked. */
  {
    const kreplay_agent_t unknown = {0xDEADBEEFull};
    REL_CHECK_STATUS(kreplay_inventory_stats(unknown, &stats), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_EQ(stats.regions, 0);
    REL_CHECK(stats.capacity > 0);
  }
  REL_CHECK_STATUS(kreplay_sim_free(region), KREPLAY_STATUS_SUCCESS);
}

/* ---- Staging -------------------------------------------------------------------------------------------- */

static void staging_bad_input(void) {
  kreplay_staging_buffer_t buffer, copy, garbage;
  kreplay_host_memory_stats_t stats;
  size_t mark, retained;
  unsigned char not_lent[64];

  memset(&buffer, 0, sizeof buffer);
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_staging_acquire(NULL, agent, 64), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_staging_acquire");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_staging_acquire(&buffer, agent, 0), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_staging_acquire");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_staging_acquire(&buffer, agent, SIZE_MAX), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_staging_acquire");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_staging_acquire(&buffer, agent, SIZE_MAX / 2), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_staging_acquire");
  REL_CHECK(buffer.data == NULL && buffer.size == 0 && buffer.capacity == 0);

  /* Far more than the machine has: the mapping fails and the buffer stays empty. */
  stats = rel_host_memory();
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_staging_acquire(&buffer, agent, (size_t)1 << 50), KREPLAY_STATUS_OUT_OF_HOST_MEMORY);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_staging_acquire");
  REL_CHECK(buffer.data == NULL && buffer.size == 0);
  REL_CHECK_EQ(rel_host_memory().mapped_bytes, stats.mapped_bytes);

  /* An invalid size leaves a held buffer as it was (API.md: "buffer is unchanged"). */
  REL_CHECK_STATUS(kreplay_staging_acquire(&buffer, agent, 5000), KREPLAY_STATUS_SUCCESS);
  copy = buffer;
  REL_CHECK_STATUS(kreplay_staging_acquire(&buffer, agent, 0), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK(buffer.data == copy.data && buffer.size == copy.size && buffer.capacity == copy.capacity);

  /* Release: NULL and empty do nothing, silently. */
  mark = rel_log.total;
  kreplay_staging_release(NULL);
  {
    kreplay_staging_buffer_t empty;
    memset(&empty, 0, sizeof empty);
    kreplay_staging_release(&empty);
    REL_CHECK(empty.data == NULL);
  }
  REL_CHECK_EQ(rel_log.total, mark);

  /* A copy of a released struct: refused and logged, and the pool keeps one entry for the storage. */
  kreplay_staging_release(&buffer);
  REL_CHECK(buffer.data == NULL && buffer.size == 0 && buffer.capacity == 0);
  retained = kreplay_retained_staging_bytes(agent);
  REL_CHECK(retained >= copy.capacity);
  mark = rel_log.total;
  kreplay_staging_release(&copy);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "released already");
  REL_CHECK(copy.data != NULL); /* left untouched */
  REL_CHECK_EQ(kreplay_retained_staging_bytes(agent), retained);
  /* The same copy as the first argument of an acquire: refused, nothing taken. */
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_staging_acquire(&copy, agent, 64), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "released already");
  REL_CHECK_EQ(kreplay_retained_staging_bytes(agent), retained);

  /* A stale copy released after its storage was lent again to a new owner: refused (the loan differs), and the
   * new owner keeps its storage and its contents. */
  {
    kreplay_staging_buffer_t first, second, stale;
    memset(&first, 0, sizeof first);
    memset(&second, 0, sizeof second);
    REL_CHECK_STATUS(kreplay_staging_acquire(&first, agent, 1u << 20), KREPLAY_STATUS_SUCCESS);
    stale = first;
    kreplay_staging_release(&first);
    REL_CHECK_STATUS(kreplay_staging_acquire(&second, agent, 1u << 20), KREPLAY_STATUS_SUCCESS);
    REL_CHECK(second.data == stale.data); /* the retained block is reused: the case that matters */
    if (second.data != NULL) {
      memset(second.data, 0x6B, second.size);
    }
    retained = kreplay_retained_staging_bytes(agent);
    mark = rel_log.total;
    kreplay_staging_release(&stale);
    REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "kreplay_staging_release");
    REL_CHECK_EQ(kreplay_retained_staging_bytes(agent), retained);
    /* Had the stale release been taken, this acquire would get the same storage while `second` holds it. */
    REL_CHECK_STATUS(kreplay_staging_acquire(&first, agent, 1u << 20), KREPLAY_STATUS_SUCCESS);
    REL_CHECK(first.data != second.data);
    REL_CHECK(second.data != NULL && ((unsigned char*)second.data)[second.size - 1] == 0x6B);
    kreplay_staging_release(&first);
    kreplay_staging_release(&second);
  }

  /* Storage the library never lent, and lent storage released to another agent's pool. */
  memset(&garbage, 0, sizeof garbage);
  garbage.data = not_lent;
  garbage.size = sizeof not_lent;
  garbage.capacity = sizeof not_lent;
  garbage.agent = agent;
  mark = rel_log.total;
  kreplay_staging_release(&garbage);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "not lent");
  REL_CHECK(garbage.data == not_lent);
  garbage.capacity = 16; /* a slab class size, pointing at no slab */
  mark = rel_log.total;
  kreplay_staging_release(&garbage);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "not lent");

  REL_CHECK_STATUS(kreplay_staging_acquire(&buffer, agent, 100), KREPLAY_STATUS_SUCCESS);
  copy = buffer;
  copy.agent = other_agent;
  mark = rel_log.total;
  kreplay_staging_release(&copy);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "not lent");
  /* A capacity that lies: the slot must not be given back as another size class. */
  copy = buffer;
  copy.capacity = 32;
  mark = rel_log.total;
  kreplay_staging_release(&copy);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "not lent");
  kreplay_staging_release(&buffer);
  REL_CHECK(buffer.data == NULL);

  /* Idle figures and trims of agents with no pool. */
  {
    const kreplay_agent_t unknown = {0xC0FFEEull};
    REL_CHECK_EQ(kreplay_retained_staging_bytes(unknown), 0);
    kreplay_staging_trim(unknown);
  }

  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_host_memory_stats(NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_host_memory_stats");
  kreplay_staging_trim(agent);
  kreplay_staging_trim(other_agent);
}

/* ---- Snapshots ------------------------------------------------------------------------------------------ */

static void snapshot_bad_input(void) {
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_snapshot_t* stale;
  kreplay_snapshot_info_t info;
  kreplay_restore_report_t report;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  unsigned char garbage[256];
  void* region = NULL;
  size_t mark;
  kreplay_sim_counters_t before;

  memset(garbage, 0x42, sizeof garbage);
  REL_REQUIRE(kreplay_sim_alloc(agent, 512, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &region) ==
              KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_alloc(region, 512, 0), KREPLAY_STATUS_SUCCESS);
  memset(region, 0x17, 512);

  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_snap(agent, NULL, &reason), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "snapshot_out");
  /* reason_out is optional. */
  REL_CHECK_STATUS(kreplay_snap(agent, &snapshot, NULL), KREPLAY_STATUS_SUCCESS);

  /* restore: NULL and garbage handles; the report is zeroed even so. */
  memset(&report, 0xAB, sizeof report);
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_restore(NULL, &report), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_restore");
  REL_CHECK(report.restored == 0 && report.skipped == 0 && report.failed == 0 && report.bytes == 0);
  before = rel_counters();
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_restore((const kreplay_snapshot_t*)(const void*)garbage, &report),
                   KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "not a live snapshot");
  REL_CHECK_STATUS(kreplay_restore((const kreplay_snapshot_t*)(uintptr_t)0x1000, NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_STATUS(kreplay_restore((const kreplay_snapshot_t*)(uintptr_t)UINTPTR_MAX, NULL),
                   KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_EQ(rel_counters().copies, before.copies);
  /* A valid restore with no report. */
  REL_CHECK_STATUS(kreplay_restore(snapshot, NULL), KREPLAY_STATUS_SUCCESS);

  /* info: NULL output, NULL and garbage handles. */
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_snapshot_info(snapshot, NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_snapshot_info");
  memset(&info, 0x5A, sizeof info);
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_snapshot_info(NULL, &info), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_snapshot_info");
  REL_CHECK_STATUS(kreplay_snapshot_info((const kreplay_snapshot_t*)(const void*)garbage, &info),
                   KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK(info.regions == (size_t)0x5A5A5A5A5A5A5A5Aull); /* written only on success */

  /* Freed handles: restore, info and a second free are refused and logged, and write nothing. */
  stale = snapshot;
  kreplay_snapshot_free(snapshot);
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_restore(stale, &report), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "not a live snapshot");
  mark = rel_log.total;
  REL_CHECK_STATUS(kreplay_snapshot_info(stale, &info), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_WARNING, "kreplay_snapshot_info");
  mark = rel_log.total;
  kreplay_snapshot_free(stale);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "freed twice");
  /* A stale handle stays refused after a new snapshot has taken its memory (and perhaps its slot): the new
   * one must survive the stale free and still restore. */
  {
    kreplay_snapshot_t* fresh = NULL;
    REL_CHECK_STATUS(kreplay_snap(agent, &fresh, NULL), KREPLAY_STATUS_SUCCESS);
    mark = rel_log.total;
    kreplay_snapshot_free(stale);
    REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "not a live snapshot");
    REL_CHECK_STATUS(kreplay_restore(stale, NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
    REL_CHECK_STATUS(kreplay_restore(fresh, &report), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_EQ(report.restored, 1);
    kreplay_snapshot_free(fresh);
  }
  mark = rel_log.total;
  kreplay_snapshot_free((kreplay_snapshot_t*)(void*)garbage);
  REL_CHECK_LOGGED(mark, KREPLAY_LOG_ERROR, "not a live snapshot");
  mark = rel_log.total;
  kreplay_snapshot_free(NULL);
  REL_CHECK_EQ(rel_log.total, mark);
  REL_CHECK_EQ(rel_counters().copies_to_device, before.copies_to_device + 2);

  /* A snapshot of an agent never seen is complete and empty. */
  {
    const kreplay_agent_t unknown = {0xABCDEFull};
    kreplay_snapshot_t* empty = NULL;
    REL_CHECK_STATUS(kreplay_snap(unknown, &empty, &reason), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_STATUS(kreplay_snapshot_info(empty, &info), KREPLAY_STATUS_SUCCESS);
    REL_CHECK(info.regions == 0 && info.module_variables == 0 && info.bytes == 0);
    REL_CHECK_STATUS(kreplay_restore(empty, &report), KREPLAY_STATUS_SUCCESS);
    REL_CHECK(report.restored == 0 && report.bytes == 0);
    kreplay_snapshot_free(empty);
  }
  REL_CHECK_STATUS(kreplay_record_free(region), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_sim_free(region), KREPLAY_STATUS_SUCCESS);
}

/* ---- Strings, logger, gate ----------------------------------------------------------------------------- */

static void strings_and_enums(void) {
  static const unsigned statuses[] = {12u, 99u, 0x7FFFFFFFu, 0xFFFFFFFFu};
  /* Version 3 made 9 to 12 decline reasons (the replay window). */
  static const unsigned reasons[] = {13u, 99u, 0x7FFFFFFFu, 0xFFFFFFFFu};
  size_t i;
  const char* unknown_status = kreplay_status_string((kreplay_status_t)12);
  const char* unknown_reason = kreplay_decline_reason_string((kreplay_decline_reason_t)13);
  REL_CHECK(unknown_status != NULL && strstr(unknown_status, "unknown") != NULL);
  REL_CHECK(unknown_reason != NULL && strstr(unknown_reason, "unknown") != NULL);
  for (i = 0; i < sizeof statuses / sizeof statuses[0]; ++i) {
    const char* s = kreplay_status_string((kreplay_status_t)statuses[i]);
    const char* r = kreplay_decline_reason_string((kreplay_decline_reason_t)reasons[i]);
    REL_CHECK(s != NULL && strcmp(s, unknown_status) == 0);
    REL_CHECK(r != NULL && strcmp(r, unknown_reason) == 0);
  }
  /* Every known value has its own text, distinct from the unknown one and from each other. */
  for (i = 0; i <= 10; ++i) {
    const char* s = kreplay_status_string((kreplay_status_t)i);
    size_t j;
    REL_CHECK(s != NULL && s[0] != '\0' && strcmp(s, unknown_status) != 0);
    for (j = 0; j < i; ++j) REL_CHECK(strcmp(s, kreplay_status_string((kreplay_status_t)j)) != 0);
  }
  for (i = 0; i <= 12; ++i) {
    const char* r = kreplay_decline_reason_string((kreplay_decline_reason_t)i);
    size_t j;
    REL_CHECK(r != NULL && r[0] != '\0' && strcmp(r, unknown_reason) != 0);
    for (j = 0; j < i; ++j) REL_CHECK(strcmp(r, kreplay_decline_reason_string((kreplay_decline_reason_t)j)) != 0);
  }
  REL_CHECK(kreplay_version() != NULL && strchr(kreplay_version(), '.') != NULL);

  /* The gate with counts no submission has. */
  REL_CHECK(kreplay_replay_gate(0, 0, false) == KREPLAY_GATE_MULTI_PACKET);
  REL_CHECK(kreplay_replay_gate(UINT32_MAX, UINT32_MAX, false) == KREPLAY_GATE_MULTI_PACKET);
  REL_CHECK(kreplay_replay_gate(1, 0, false) == KREPLAY_GATE_NOT_A_DISPATCH);
  REL_CHECK(kreplay_replay_gate(1, UINT32_MAX, false) == KREPLAY_GATE_NOT_A_DISPATCH);
  REL_CHECK(kreplay_replay_gate(1, 1, true) == KREPLAY_GATE_GRAPH_LAUNCH);
}

/* Unknown logger levels mean "everything"; a NULL function restores the default (stderr) without crashing. */
static void logger_levels(void) {
  static const unsigned levels[] = {4u, 99u, 0xFFFFFFFFu};
  size_t i;
  for (i = 0; i < sizeof levels / sizeof levels[0]; ++i) {
    size_t mark;
    kreplay_snapshot_t* snapshot = NULL;
    kreplay_set_logger(rel_log_sink, &rel_log, (kreplay_log_level_t)levels[i]);
    mark = rel_log.total;
    /* An INFO line per snapshot: delivered, since an unknown maximum admits everything. */
    REL_CHECK_STATUS(kreplay_snap(agent, &snapshot, NULL), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_LOGGED(mark, KREPLAY_LOG_INFO, "snapshot of");
    kreplay_snapshot_free(snapshot);
  }
  /* ERROR only: a warning is filtered out. */
  {
    size_t mark;
    kreplay_set_logger(rel_log_sink, &rel_log, KREPLAY_LOG_ERROR);
    mark = rel_log.total;
    REL_CHECK_STATUS(kreplay_set_policy(NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
    REL_CHECK_EQ(rel_log.total, mark);
  }
  kreplay_set_logger(NULL, NULL, (kreplay_log_level_t)77);
  /* This warning goes to stderr now; nothing reaches the captured log. */
  {
    size_t mark = rel_log.total;
    REL_CHECK_STATUS(kreplay_set_policy(NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
    REL_CHECK_EQ(rel_log.total, mark);
  }
  kreplay_set_logger(rel_log_sink, &rel_log, KREPLAY_LOG_TRACE);
}

/* The simulated device's own entry points refuse NULLs too (the fuzzer and the other tests rely on it). */
static void sim_bad_input(void) {
  void* ptr = NULL;
  REL_CHECK_STATUS(kreplay_sim_device_ops(NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_STATUS(kreplay_sim_alloc(agent, 64, KREPLAY_POINTER_DEVICE, 0, NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_STATUS(kreplay_sim_alloc(agent, 0, KREPLAY_POINTER_DEVICE, 0, &ptr), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_STATUS(kreplay_sim_alloc(agent, SIZE_MAX, KREPLAY_POINTER_DEVICE, 0, &ptr),
                   KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_STATUS(kreplay_sim_free(NULL), KREPLAY_STATUS_NOT_FOUND);
  REL_CHECK_STATUS(kreplay_sim_add_module_variable(agent, "x", 4, false, NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_STATUS(kreplay_sim_counters(NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  kreplay_sim_set_faults(NULL);
}

/* After all of the above the library still works exactly. */
static void still_works(void) {
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_restore_report_t report;
  void* region = NULL;
  void* variable = NULL;
  unsigned char expected[3000];
  size_t i;
  REL_REQUIRE(kreplay_sim_alloc(agent, sizeof expected, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED,
                                &region) == KREPLAY_STATUS_SUCCESS);
  REL_REQUIRE(kreplay_sim_add_module_variable(agent, "still", 24, false, &variable) == KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_alloc(region, sizeof expected, 0), KREPLAY_STATUS_SUCCESS);
  for (i = 0; i < sizeof expected; ++i) {
    expected[i] = (unsigned char)(i * 13u);
  }
  memcpy(region, expected, sizeof expected);
  memset(variable, 0x21, 24);
  REL_CHECK_STATUS(kreplay_snap(agent, &snapshot, NULL), KREPLAY_STATUS_SUCCESS);
  memset(region, 0, sizeof expected);
  memset(variable, 0, 24);
  REL_CHECK_STATUS(kreplay_restore(snapshot, &report), KREPLAY_STATUS_SUCCESS);
  REL_CHECK(memcmp(region, expected, sizeof expected) == 0);
  REL_CHECK(((unsigned char*)variable)[23] == 0x21);
  REL_CHECK_EQ(report.restored, 2);
  kreplay_snapshot_free(snapshot);
  REL_CHECK_STATUS(kreplay_record_free(region), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_sim_free(region), KREPLAY_STATUS_SUCCESS);
}

int main(void) {
  kreplay_agent_t agents[2];
  kreplay_host_memory_stats_t start;
  agents[0] = agent;
  agents[1] = other_agent;
  kreplay_sim_reset();
  rel_log_install(KREPLAY_LOG_TRACE);
  start = rel_host_memory();

  strings_and_enums();
  unconfigured_calls();
  configure_bad_ops();
  policy_bad_input();
  configure_short_struct_ignores_trailing_ops();
  configure_version_one_struct_gets_version_one_behaviour();
  rel_configure_sim();
  kreplay_tracking_enable(true);
  tracking_bad_input();
  staging_bad_input();
  snapshot_bad_input();
  logger_levels();
  sim_bad_input();
  still_works();

  REL_CHECK_NO_LEAKS(start, agents, 2);
  REL_CHECK_EQ(rel_log.bad_length, 0);
  REL_CHECK_EQ(rel_log.invalid_level, 0);
  return rel_finish("kreplay_reliability_bad_input");
}
