/* Snapshot and restore through the C API on the simulated device: exact restores across passes, the
 * module-variable rules, freed and reallocated regions, every decline reason (with device memory untouched),
 * partial restores, the host budget, pinning, vmem ranges, staging trims, the replay gate, logging, and the
 * handle rules. The FINALIZED decline is in finalize.c; concurrent frees are in concurrency.c. */
#include "test_util.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)
#define MAX_REGIONS 8

/* Tracked regions of one agent and the seed their original contents were written with. */
typedef struct footprint_t {
  kreplay_agent_t agent;
  size_t count;
  void* ptrs[MAX_REGIONS];
  size_t sizes[MAX_REGIONS];
  size_t bytes;
} footprint_t;

static footprint_t footprint_make(uint64_t agent, const size_t* sizes, size_t count, unsigned seed) {
  footprint_t f;
  size_t i;
  memset(&f, 0, sizeof f);
  CHECK(count <= MAX_REGIONS);
  f.agent = test_agent(agent);
  f.count = count;
  for (i = 0; i < count; ++i) {
    f.sizes[i] = sizes[i];
    f.ptrs[i] = test_alloc(f.agent, sizes[i]);
    test_fill(f.ptrs[i], sizes[i], seed + (unsigned)i);
    f.bytes += sizes[i];
  }
  return f;
}

static void footprint_fill(const footprint_t* f, unsigned seed) {
  size_t i;
  for (i = 0; i < f->count; ++i) {
    if (f->ptrs[i] != NULL) {
      test_fill(f->ptrs[i], f->sizes[i], seed + (unsigned)i);
    }
  }
}

static bool footprint_has(const footprint_t* f, unsigned seed) {
  size_t i;
  for (i = 0; i < f->count; ++i) {
    if (f->ptrs[i] != NULL && !test_has_pattern(f->ptrs[i], f->sizes[i], seed + (unsigned)i)) {
      return false;
    }
  }
  return true;
}

static void footprint_free(footprint_t* f) {
  size_t i;
  for (i = 0; i < f->count; ++i) {
    if (f->ptrs[i] != NULL) {
      test_free(f->ptrs[i]);
      f->ptrs[i] = NULL;
    }
  }
  kreplay_staging_trim(f->agent);
}

static kreplay_snapshot_info_t info_of(const kreplay_snapshot_t* snapshot) {
  kreplay_snapshot_info_t info;
  memset(&info, 0, sizeof info);
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  return info;
}

static kreplay_policy_t policy_of(bool pin_staging, size_t max_snapshot_bytes) {
  kreplay_policy_t policy;
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.pin_staging = pin_staging;
  policy.max_snapshot_bytes = max_snapshot_bytes;
  return policy;
}

static void set_default_policy(void) {
  kreplay_policy_t policy = policy_of(false, 0);
  CHECK_OK(kreplay_set_policy(&policy));
}

/* A declined snap: no snapshot, the reason, no write into device memory, and no idle staging left behind. */
static void expect_declined(const footprint_t* f, unsigned seed, kreplay_decline_reason_t expected) {
  kreplay_snapshot_t* snapshot = (kreplay_snapshot_t*)&snapshot; /* must be overwritten with NULL */
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  size_t writes = test_counters().copies_to_device;
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(f->agent, &snapshot, &reason));
  CHECK(snapshot == NULL);
  CHECK_EQ(expected, reason);
  CHECK_EQ(writes, test_counters().copies_to_device);
  CHECK(footprint_has(f, seed));
  CHECK_EQ(0, kreplay_retained_staging_bytes(f->agent));
}

/* ---- Runs first: nothing is configured yet ---------------------------------------------------------------- */

static void a_snap_before_configure_is_declined_not_configured(void) {
  const kreplay_agent_t agent = test_agent(0x500);
  kreplay_snapshot_t* snapshot = (kreplay_snapshot_t*)&snapshot;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  void* ptr = NULL;
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(agent, &snapshot, &reason));
  CHECK(snapshot == NULL);
  CHECK_EQ(KREPLAY_DECLINE_NOT_CONFIGURED, reason);

  /* Tracking on but still no device ops: recording cannot classify, and snapshots still decline. */
  kreplay_tracking_enable(true);
  CHECK_OK(kreplay_sim_alloc(agent, 4 * KIB, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &ptr));
  CHECK_STATUS(KREPLAY_STATUS_NOT_CONFIGURED, kreplay_record_alloc(ptr, 4 * KIB, 0));
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(agent, &snapshot, NULL));
  CHECK(snapshot == NULL);
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(agent, &snapshot, &reason));
  CHECK_EQ(KREPLAY_DECLINE_NOT_CONFIGURED, reason);

  /* That allocation could not be classified, so it is remembered as lost: once configured, every agent's
   * snapshots decline until it is freed. */
  test_configure_sim();
  CHECK_EQ(1, test_inventory(agent).overflowed);
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(test_agent(0x5FF), &snapshot, &reason));
  CHECK_EQ(KREPLAY_DECLINE_INVENTORY_OVERFLOW, reason);
  CHECK_OK(kreplay_record_free(ptr));
  CHECK_OK(kreplay_sim_free(ptr));
  CHECK_EQ(0, test_inventory(agent).overflowed);
  CHECK_OK(kreplay_snap(agent, &snapshot, &reason));
  kreplay_snapshot_free(snapshot);
}

/* ---- Capture and restore ------------------------------------------------------------------------------- */

static void every_pass_is_restored_exactly(void) {
  enum { PASSES = 5 };
  static const size_t sizes[] = {1, 100, 4096, 64 * KIB + 3, MIB + 7, 3 * MIB};
  footprint_t f = footprint_make(0x501, sizes, 6, 10);
  unsigned char* counter = (unsigned char*)test_module_variable(f.agent, "counter", 256, false);
  unsigned char* table = (unsigned char*)test_module_variable(f.agent, "table", 64, true);
  kreplay_snapshot_t* snapshot;
  kreplay_snapshot_info_t info;
  size_t violations = test_counters().violations;
  unsigned pass;
  test_fill(counter, 256, 40);
  test_fill(table, 64, 41);

  snapshot = test_snap_ok(f.agent);
  info = info_of(snapshot);
  CHECK_EQ(6, info.regions);
  CHECK_EQ(2, info.module_variables);
  CHECK_EQ(f.bytes + 256 + 64, info.bytes);

  for (pass = 1; pass <= PASSES; ++pass) {
    kreplay_restore_report_t report;
    /* The "kernel" rewrites every input, a little differently each pass. */
    footprint_fill(&f, 100 * pass);
    test_fill(counter, 256, 200 + pass);
    test_fill(table, 64, 300 + pass);
    CHECK(!footprint_has(&f, 10));

    CHECK_OK(kreplay_restore(snapshot, &report));
    CHECK_EQ(8, report.restored);
    CHECK_EQ(0, report.skipped);
    CHECK_EQ(0, report.failed);
    CHECK_EQ(info.bytes, report.bytes);
    CHECK(footprint_has(&f, 10));
    CHECK(test_has_pattern(counter, 256, 40));
    CHECK(test_has_pattern(table, 64, 41));
  }
  CHECK_EQ(violations, test_counters().violations);
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
}

static void module_variables_follow_the_skip_rules(void) {
  const kreplay_agent_t agent = test_agent(0x502);
  unsigned char* marker = (unsigned char*)test_module_variable(agent, "__hip_cuid_5f3a", 1, false);
  unsigned char* two_byte = (unsigned char*)test_module_variable(agent, "__hip_cuid_wide", 2, false);
  unsigned char* flag = (unsigned char*)test_module_variable(agent, "flag", 1, false);
  unsigned char* unnamed = (unsigned char*)test_module_variable(agent, NULL, 8, false);
  unsigned char* constant = (unsigned char*)test_module_variable(agent, "lut", 128, true);
  unsigned char* device = (unsigned char*)test_module_variable(agent, "acc", 128, false);
  kreplay_snapshot_t* snapshot;
  kreplay_snapshot_info_t info;
  kreplay_restore_report_t report;

  /* Zero-sized, and above the 1 GiB cap: the simulated arena only reserves the latter, and since it is never
   * captured nor restored its pages are never touched. */
  (void)test_module_variable(agent, "empty", 0, false);
  (void)test_module_variable(agent, "huge", (1u << 30) + 4096u, false);

  *marker = 0x11;
  test_fill(two_byte, 2, 1);
  *flag = 0x22;
  test_fill(unnamed, 8, 2);
  test_fill(constant, 128, 3);
  test_fill(device, 128, 4);

  test_log_capture(KREPLAY_LOG_WARNING);
  snapshot = test_snap_ok(agent);
  info = info_of(snapshot);
  CHECK_EQ(0, info.regions);
  CHECK_EQ(5, info.module_variables); /* two_byte, flag, unnamed, constant, device */
  CHECK_EQ(2 + 1 + 8 + 128 + 128, info.bytes);
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "huge"));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "leak"));
  test_log_stop();

  *marker = 0x99;
  test_fill(two_byte, 2, 9);
  *flag = 0x99;
  test_fill(unnamed, 8, 9);
  test_fill(constant, 128, 9);
  test_fill(device, 128, 9);
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK_EQ(5, report.restored);
  CHECK_EQ(0x99, *marker); /* skipped: not captured, not written */
  CHECK(test_has_pattern(two_byte, 2, 1));
  CHECK_EQ(0x22, *flag);
  CHECK(test_has_pattern(unnamed, 8, 2));
  CHECK(test_has_pattern(constant, 128, 3));
  CHECK(test_has_pattern(device, 128, 4));
  kreplay_snapshot_free(snapshot);
  kreplay_staging_trim(agent);
}

static void module_variables_are_discovered_at_snapshot_time(void) {
  const kreplay_agent_t agent = test_agent(0x503);
  kreplay_snapshot_t* snapshot;
  unsigned char* late;
  (void)test_module_variable(agent, "early", 32, true);
  snapshot = test_snap_ok(agent);
  CHECK_EQ(1, info_of(snapshot).module_variables);
  kreplay_snapshot_free(snapshot);

  /* E.g. constant memory filled after the executable was loaded. */
  late = (unsigned char*)test_module_variable(agent, "late", 48, true);
  test_fill(late, 48, 7);
  snapshot = test_snap_ok(agent);
  CHECK_EQ(2, info_of(snapshot).module_variables);
  test_fill(late, 48, 8);
  CHECK_OK(kreplay_restore(snapshot, NULL));
  CHECK(test_has_pattern(late, 48, 7));
  kreplay_snapshot_free(snapshot);
  kreplay_staging_trim(agent);
}

static void snapshot_info_reports_what_was_captured(void) {
  static const size_t sizes[] = {1000, 5000};
  footprint_t f = footprint_make(0x504, sizes, 2, 1);
  void* mapped = NULL;
  kreplay_snapshot_t* snapshot;
  kreplay_snapshot_info_t info;
  CHECK_OK(kreplay_sim_alloc(f.agent, 8 * KIB, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &mapped));
  CHECK_OK(kreplay_record_vmem_map(mapped, 8 * KIB, f.agent));
  (void)test_module_variable(f.agent, "v", 24, false);

  snapshot = test_snap_ok(f.agent);
  info = info_of(snapshot);
  CHECK_EQ(f.agent.handle, info.agent.handle);
  CHECK_EQ(3, info.regions); /* two allocations and one mapping */
  CHECK_EQ(1, info.module_variables);
  CHECK_EQ(1000 + 5000 + 8 * KIB + 24, info.bytes);

  memset(&info, 0xAB, sizeof info);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_snapshot_info(NULL, &info));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_snapshot_info(snapshot, NULL));
  kreplay_snapshot_free(snapshot);
  CHECK_OK(kreplay_record_vmem_unmap(mapped, 8 * KIB));
  CHECK_OK(kreplay_sim_free(mapped));
  footprint_free(&f);
}

static void an_agent_with_nothing_tracked_gets_an_empty_snapshot(void) {
  const kreplay_agent_t agent = test_agent(0x505);
  kreplay_snapshot_t* snapshot = test_snap_ok(agent);
  kreplay_snapshot_info_t info = info_of(snapshot);
  kreplay_restore_report_t report;
  CHECK_EQ(0, info.regions + info.module_variables + info.bytes);
  memset(&report, 0xAB, sizeof report);
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK_EQ(0, report.restored + report.skipped + report.failed + report.bytes);
  kreplay_snapshot_free(snapshot);
}

static void a_snapshot_holds_only_its_agents_regions(void) {
  static const size_t sizes[] = {4096, 8192};
  footprint_t a = footprint_make(0x506, sizes, 2, 1);
  footprint_t b = footprint_make(0x507, sizes, 2, 50);
  kreplay_snapshot_t* snapshot = test_snap_ok(a.agent);
  kreplay_restore_report_t report;
  CHECK_EQ(2, info_of(snapshot).regions);
  footprint_fill(&a, 2);
  footprint_fill(&b, 60);
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK_EQ(2, report.restored);
  CHECK(footprint_has(&a, 1));
  CHECK(footprint_has(&b, 60)); /* the other agent's memory is not part of it */
  kreplay_snapshot_free(snapshot);
  footprint_free(&a);
  footprint_free(&b);
}

/* ---- Regions that change during the replay window ------------------------------------------------------ */

static void a_region_freed_during_the_window_is_skipped_and_not_written(void) {
  static const size_t sizes[] = {4096, 12288, 4096};
  footprint_t f = footprint_make(0x508, sizes, 3, 1);
  unsigned char* freed = (unsigned char*)f.ptrs[1];
  size_t violations = test_counters().violations;
  kreplay_snapshot_t* snapshot = test_snap_ok(f.agent);
  kreplay_restore_report_t report;
  int round;

  footprint_fill(&f, 7);
  test_free(freed);
  f.ptrs[1] = NULL;
  CHECK(test_all_bytes(freed, 12288, 0xDD));
  for (round = 0; round < 2; ++round) {
    CHECK_OK(kreplay_restore(snapshot, &report));
    CHECK_EQ(2, report.restored);
    CHECK_EQ(1, report.skipped);
    CHECK_EQ(0, report.failed);
    CHECK_EQ(2 * 4096, report.bytes);
    CHECK(footprint_has(&f, 1));
    CHECK(test_all_bytes(freed, 12288, 0xDD));
  }
  CHECK_EQ(violations, test_counters().violations);
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
}

static void a_region_reallocated_at_the_same_address_is_not_overwritten(void) {
  static const size_t sizes[] = {16 * KIB, 4096};
  footprint_t f = footprint_make(0x509, sizes, 2, 1);
  size_t violations = test_counters().violations;
  kreplay_snapshot_t* snapshot = test_snap_ok(f.agent);
  kreplay_restore_report_t report;
  void* same = NULL;
  void* smaller = NULL;

  /* The same size at the same address: only the generation differs. */
  test_free(f.ptrs[0]);
  CHECK_OK(kreplay_sim_alloc_at(f.ptrs[0], f.agent, 16 * KIB, KREPLAY_POINTER_DEVICE,
                                KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &same));
  CHECK_OK(kreplay_record_alloc(same, 16 * KIB, 0));
  test_fill(same, 16 * KIB, 77);
  /* A smaller allocation at the other address. */
  test_free(f.ptrs[1]);
  CHECK_OK(kreplay_sim_alloc_at(f.ptrs[1], f.agent, 1024, KREPLAY_POINTER_DEVICE,
                                KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &smaller));
  CHECK_OK(kreplay_record_alloc(smaller, 1024, 0));
  test_fill(smaller, 1024, 78);

  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK_EQ(0, report.restored);
  CHECK_EQ(2, report.skipped);
  CHECK(test_has_pattern(same, 16 * KIB, 77));
  CHECK(test_has_pattern(smaller, 1024, 78));
  CHECK_EQ(violations, test_counters().violations);
  kreplay_snapshot_free(snapshot);
  f.ptrs[0] = same;
  f.ptrs[1] = smaller;
  f.sizes[1] = 1024;
  footprint_free(&f);
}

static void vmem_ranges_are_captured_and_restored(void) {
  const kreplay_agent_t agent = test_agent(0x50A);
  static unsigned char pass_image[64 * KIB];
  unsigned char* base = NULL;
  kreplay_snapshot_t* snapshot;
  kreplay_restore_report_t report;
  CHECK_OK(kreplay_sim_alloc(agent, 64 * KIB, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED,
                             (void**)&base));
  /* Two mappings into one reserved range, the way a stream-ordered pool maps its memory. */
  CHECK_OK(kreplay_record_vmem_map(base, 32 * KIB, agent));
  CHECK_OK(kreplay_record_vmem_map(base + 32 * KIB, 32 * KIB, agent));
  test_fill(base, 64 * KIB, 5);

  snapshot = test_snap_ok(agent);
  CHECK_EQ(2, info_of(snapshot).regions);
  CHECK_EQ(64 * KIB, info_of(snapshot).bytes);
  test_fill(base, 64 * KIB, 6);
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK_EQ(2, report.restored);
  CHECK(test_has_pattern(base, 64 * KIB, 5));

  /* A mapping cut short since the snapshot is skipped whole, the intact one still restored. */
  CHECK_OK(kreplay_record_vmem_unmap(base + 48 * KIB, 16 * KIB));
  test_fill(base, 64 * KIB, 6);
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK_EQ(1, report.restored);
  CHECK_EQ(1, report.skipped);
  CHECK(test_has_pattern(base, 32 * KIB, 5));
  test_fill(pass_image, sizeof pass_image, 6);
  CHECK(memcmp(base + 32 * KIB, pass_image + 32 * KIB, 32 * KIB) == 0);
  kreplay_snapshot_free(snapshot);
  CHECK_OK(kreplay_record_vmem_unmap(base, 48 * KIB));
  CHECK_EQ(0, test_inventory(agent).regions);
  CHECK_OK(kreplay_sim_free(base));
  kreplay_staging_trim(agent);
}

/* ---- Declines ------------------------------------------------------------------------------------------ */

static void turning_tracking_off_declines_snapshots_and_forgets_regions(void) {
  static const size_t sizes[] = {4096};
  footprint_t f = footprint_make(0x50B, sizes, 1, 1);
  kreplay_tracking_enable(false);
  expect_declined(&f, 1, KREPLAY_DECLINE_NOT_CONFIGURED);
  kreplay_tracking_enable(true);
  CHECK_EQ(0, test_inventory(f.agent).regions);
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free(f.ptrs[0]));
  CHECK_OK(kreplay_sim_free(f.ptrs[0]));
}

static void staging_that_cannot_be_mapped_declines_staging_memory(void) {
  static const size_t sizes[] = {3 * MIB + 5, 4096};
  footprint_t f = footprint_make(0x50C, sizes, 2, 1);
  kreplay_sim_faults_t faults = test_no_faults();
  kreplay_snapshot_t* snapshot;
  faults.fail_host_map_at = 1;
  kreplay_sim_set_faults(&faults);
  expect_declined(&f, 1, KREPLAY_DECLINE_STAGING_MEMORY);
  test_disarm_faults();
  snapshot = test_snap_ok(f.agent);
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
}

static void a_failed_device_copy_declines_copy_failed(void) {
  static const size_t sizes[] = {4096, 8192, 4096};
  footprint_t f = footprint_make(0x50D, sizes, 3, 1);
  kreplay_sim_faults_t faults = test_no_faults();
  kreplay_snapshot_t* snapshot;
  faults.fail_copy_at = 2;
  kreplay_sim_set_faults(&faults);
  expect_declined(&f, 1, KREPLAY_DECLINE_COPY_FAILED);
  test_disarm_faults();
  snapshot = test_snap_ok(f.agent);
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
}

static void an_incomplete_module_scan_declines_module_scan_incomplete(void) {
  static const size_t sizes[] = {4096};
  footprint_t f = footprint_make(0x50E, sizes, 1, 1);
  unsigned char* first = (unsigned char*)test_module_variable(f.agent, "first", 16, false);
  kreplay_sim_faults_t faults = test_no_faults();
  kreplay_snapshot_t* snapshot;
  (void)test_module_variable(f.agent, "second", 16, true);
  test_fill(first, 16, 3);
  faults.fail_module_scan_at = 2;
  kreplay_sim_set_faults(&faults);
  expect_declined(&f, 1, KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE);
  CHECK(test_has_pattern(first, 16, 3));
  test_disarm_faults();
  snapshot = test_snap_ok(f.agent);
  CHECK_EQ(2, info_of(snapshot).module_variables);
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
}

static void a_lost_allocation_declines_inventory_overflow(void) {
  static const size_t sizes[] = {4096};
  footprint_t f = footprint_make(0x50F, sizes, 1, 1);
  kreplay_sim_faults_t faults = test_no_faults();
  kreplay_snapshot_t* snapshot;
  void* lost = NULL;
  CHECK_OK(kreplay_sim_alloc(f.agent, 4096, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &lost));
  faults.fail_pointer_info = true;
  kreplay_sim_set_faults(&faults);
  CHECK_STATUS(KREPLAY_STATUS_DEVICE_ERROR, kreplay_record_alloc(lost, 4096, 0));
  test_disarm_faults();
  expect_declined(&f, 1, KREPLAY_DECLINE_INVENTORY_OVERFLOW);
  CHECK_OK(kreplay_record_free(lost));
  CHECK_OK(kreplay_sim_free(lost));
  snapshot = test_snap_ok(f.agent);
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
}

static void a_snapshot_above_the_host_budget_declines_host_budget(void) {
  /* Regions are packed at 64-byte alignment: 4096 + 4096 + a 64-byte variable need exactly 8256 bytes. */
  static const size_t sizes[] = {4096, 4096};
  footprint_t f = footprint_make(0x510, sizes, 2, 1);
  kreplay_policy_t policy = policy_of(false, 8256 - 1);
  kreplay_snapshot_t* snapshot;
  (void)test_module_variable(f.agent, "budgeted", 64, false);

  CHECK_OK(kreplay_set_policy(&policy));
  test_log_capture(KREPLAY_LOG_WARNING);
  expect_declined(&f, 1, KREPLAY_DECLINE_HOST_BUDGET);
  CHECK(test_log_count(KREPLAY_LOG_WARNING, "max_snapshot_bytes") >= 1);
  test_log_stop();

  policy.max_snapshot_bytes = 8256;
  CHECK_OK(kreplay_set_policy(&policy));
  snapshot = test_snap_ok(f.agent);
  kreplay_snapshot_free(snapshot);

  set_default_policy(); /* 0: unlimited */
  snapshot = test_snap_ok(f.agent);
  kreplay_snapshot_free(snapshot);

  /* A version-1 struct (up to max_snapshot_bytes) is accepted; anything shorter is not. */
  policy.struct_size = offsetof(kreplay_policy_t, max_snapshot_bytes) + sizeof policy.max_snapshot_bytes;
  policy.max_snapshot_bytes = 0;
  CHECK_OK(kreplay_set_policy(&policy));
  policy.struct_size -= 1;
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_set_policy(&policy));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_set_policy(NULL));
  footprint_free(&f);
}

/* ---- Partial restore ----------------------------------------------------------------------------------- */

static void a_failed_restore_copy_is_partial_restore_and_the_others_are_still_written(void) {
  static const size_t sizes[] = {4096, 8192, 12288};
  footprint_t f = footprint_make(0x511, sizes, 3, 1);
  unsigned char* variable = (unsigned char*)test_module_variable(f.agent, "v", 32, false);
  kreplay_sim_faults_t faults = test_no_faults();
  kreplay_snapshot_t* snapshot;
  kreplay_restore_report_t report;
  size_t unrestored = 0;
  size_t unrestored_bytes = 0;
  size_t i;
  test_fill(variable, 32, 9);
  snapshot = test_snap_ok(f.agent);

  footprint_fill(&f, 5);
  test_fill(variable, 32, 10);
  faults.fail_copy_at = 2;
  kreplay_sim_set_faults(&faults);
  CHECK_STATUS(KREPLAY_STATUS_PARTIAL_RESTORE, kreplay_restore(snapshot, &report));
  test_disarm_faults();
  CHECK_EQ(3, report.restored);
  CHECK_EQ(1, report.failed);
  CHECK_EQ(0, report.skipped);

  /* Which entry was second is the library's business; exactly one must have kept the pass's writes. */
  for (i = 0; i < f.count; ++i) {
    if (!test_has_pattern(f.ptrs[i], f.sizes[i], 1 + (unsigned)i)) {
      CHECK(test_has_pattern(f.ptrs[i], f.sizes[i], 5 + (unsigned)i));
      ++unrestored;
      unrestored_bytes += f.sizes[i];
    }
  }
  if (!test_has_pattern(variable, 32, 9)) {
    ++unrestored;
    unrestored_bytes += 32;
  }
  CHECK_EQ(1, unrestored);
  CHECK_EQ(f.bytes + 32 - unrestored_bytes, report.bytes);

  /* The snapshot itself is intact: a later restore without the fault writes everything. */
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK_EQ(4, report.restored);
  CHECK(footprint_has(&f, 1));
  CHECK(test_has_pattern(variable, 32, 9));
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
}

/* ---- Staging: pinning and trims ------------------------------------------------------------------------ */

static void pinned_staging_is_locked_once_and_reused_across_dispatches(void) {
  enum { DISPATCHES = 5 };
  static const size_t sizes[] = {MIB, 4096};
  footprint_t f = footprint_make(0x512, sizes, 2, 1);
  kreplay_policy_t policy = policy_of(true, 0);
  kreplay_sim_counters_t before = test_counters();
  kreplay_sim_counters_t after;
  int dispatch;
  CHECK_EQ(0, before.locked_bytes);
  CHECK_OK(kreplay_set_policy(&policy));

  for (dispatch = 0; dispatch < DISPATCHES; ++dispatch) {
    kreplay_snapshot_t* snapshot = test_snap_ok(f.agent);
    footprint_fill(&f, 20);
    CHECK_OK(kreplay_restore(snapshot, NULL));
    CHECK(footprint_has(&f, 1));
    kreplay_snapshot_free(snapshot);
  }
  after = test_counters();
  CHECK_EQ(before.host_locks + 1, after.host_locks);
  CHECK_EQ(before.host_unlocks, after.host_unlocks);
  CHECK(after.locked_bytes >= f.bytes);

  kreplay_staging_trim(f.agent);
  after = test_counters();
  CHECK_EQ(after.host_locks - before.host_locks, after.host_unlocks - before.host_unlocks);
  CHECK_EQ(0, after.locked_bytes);
  CHECK_EQ(before.violations, after.violations);
  set_default_policy();
  footprint_free(&f);
}

static void pinned_staging_of_an_old_footprint_is_unlocked_before_it_is_unmapped(void) {
  static const size_t small[] = {64 * KIB};
  static const size_t large[] = {4 * MIB};
  footprint_t a = footprint_make(0x513, small, 1, 1);
  footprint_t b;
  kreplay_policy_t policy = policy_of(true, 0);
  kreplay_sim_counters_t before = test_counters();
  kreplay_snapshot_t* snapshot;
  CHECK_OK(kreplay_set_policy(&policy));

  snapshot = test_snap_ok(a.agent);
  kreplay_snapshot_free(snapshot);
  /* The footprint grows past twice the retained block: a new block is locked, the old one unlocked and
   * unmapped by the snap's trim. */
  b = footprint_make(0x513, large, 1, 2);
  snapshot = test_snap_ok(a.agent);
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(before.host_locks + 2, test_counters().host_locks);
  CHECK_EQ(before.host_unlocks + 1, test_counters().host_unlocks);

  footprint_free(&a);
  footprint_free(&b);
  CHECK_EQ(before.host_unlocks + 2, test_counters().host_unlocks);
  CHECK_EQ(0, test_counters().locked_bytes);
  CHECK_EQ(before.violations, test_counters().violations);
  set_default_policy();
}

static void a_refused_page_lock_still_gives_a_working_snapshot(void) {
  static const size_t sizes[] = {256 * KIB};
  footprint_t f = footprint_make(0x514, sizes, 1, 1);
  kreplay_policy_t policy = policy_of(true, 0);
  kreplay_sim_faults_t faults = test_no_faults();
  size_t locks = test_counters().host_locks;
  kreplay_snapshot_t* snapshot;
  CHECK_OK(kreplay_set_policy(&policy));
  faults.refuse_host_lock = true;
  kreplay_sim_set_faults(&faults);
  test_log_capture(KREPLAY_LOG_WARNING);
  snapshot = test_snap_ok(f.agent);
  CHECK(test_log_count(KREPLAY_LOG_WARNING, "page-locking") >= 1);
  test_log_stop();
  test_disarm_faults();
  footprint_fill(&f, 3);
  CHECK_OK(kreplay_restore(snapshot, NULL));
  CHECK(footprint_has(&f, 1));
  CHECK_EQ(locks, test_counters().host_locks);
  kreplay_snapshot_free(snapshot);
  set_default_policy();
  footprint_free(&f);
  CHECK_EQ(0, test_counters().locked_bytes);
}

static void a_declined_snap_trims_retained_staging(void) {
  static const size_t sizes[] = {MIB};
  footprint_t f = footprint_make(0x515, sizes, 1, 1);
  kreplay_sim_faults_t faults = test_no_faults();
  kreplay_snapshot_t* snapshot = test_snap_ok(f.agent);
  size_t unmaps;
  kreplay_snapshot_free(snapshot);
  CHECK(kreplay_retained_staging_bytes(f.agent) >= MIB);
  unmaps = test_host_memory().unmaps;

  faults.fail_copy_at = 1;
  kreplay_sim_set_faults(&faults);
  expect_declined(&f, 1, KREPLAY_DECLINE_COPY_FAILED); /* checks retained bytes are 0 */
  test_disarm_faults();
  CHECK(test_host_memory().unmaps > unmaps);
  footprint_free(&f);
}

static void a_snap_unmaps_idle_staging_it_did_not_take(void) {
  static const size_t large[] = {4 * MIB};
  static const size_t small[] = {64 * KIB};
  footprint_t big = footprint_make(0x516, large, 1, 1);
  footprint_t little;
  kreplay_snapshot_t* snapshot = test_snap_ok(big.agent);
  kreplay_snapshot_free(snapshot);
  CHECK(kreplay_retained_staging_bytes(big.agent) >= 4 * MIB);
  test_free(big.ptrs[0]);
  big.ptrs[0] = NULL;

  /* The footprint shrank: a 64 KiB snapshot cannot take the 4 MiB block (more than twice its size), so the
   * block is let go and host memory held between dispatches follows the footprint down. */
  little = footprint_make(0x516, small, 1, 2);
  snapshot = test_snap_ok(little.agent);
  CHECK_EQ(0, kreplay_retained_staging_bytes(little.agent));
  kreplay_snapshot_free(snapshot);
  CHECK(kreplay_retained_staging_bytes(little.agent) >= 64 * KIB);
  CHECK(kreplay_retained_staging_bytes(little.agent) < MIB);
  footprint_free(&little);
}

/* ---- Gate, logging and handles ------------------------------------------------------------------------- */

static void the_gate_replays_only_single_dispatches_and_warns_once_about_graphs(void) {
  test_log_capture(KREPLAY_LOG_WARNING);
  CHECK(kreplay_replay_gate(1, 1, false) == KREPLAY_GATE_REPLAY);
  CHECK(kreplay_replay_gate(2, 1, false) == KREPLAY_GATE_MULTI_PACKET);
  CHECK(kreplay_replay_gate(0, 0, false) == KREPLAY_GATE_MULTI_PACKET);
  CHECK(kreplay_replay_gate(1, 0, false) == KREPLAY_GATE_NOT_A_DISPATCH);
  CHECK(kreplay_replay_gate(1, 2, false) == KREPLAY_GATE_NOT_A_DISPATCH);
  CHECK_EQ(0, test_log_count(-1, NULL));

  CHECK(kreplay_replay_gate(1, 1, true) == KREPLAY_GATE_GRAPH_LAUNCH);
  CHECK(kreplay_replay_gate(1, 1, true) == KREPLAY_GATE_GRAPH_LAUNCH);
  CHECK(kreplay_replay_gate(3, 2, true) == KREPLAY_GATE_GRAPH_LAUNCH);
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, NULL));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "graph"));
  test_log_stop();
}

static void a_snapshot_and_a_restore_log_one_info_line_each(void) {
  static const size_t sizes[] = {4096};
  footprint_t f = footprint_make(0x517, sizes, 1, 1);
  kreplay_snapshot_t* snapshot;
  char agent_text[32];
  snprintf(agent_text, sizeof agent_text, "agent 0x%llx", (unsigned long long)f.agent.handle);
  test_log_capture(KREPLAY_LOG_INFO);
  snapshot = test_snap_ok(f.agent);
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_INFO, NULL));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_INFO, agent_text));
  test_log_clear();
  CHECK_OK(kreplay_restore(snapshot, NULL));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_INFO, NULL));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_INFO, "4096 bytes"));
  test_log_stop();
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
}

static void a_skipped_region_is_logged_with_its_address_and_size(void) {
  static const size_t sizes[] = {12345};
  footprint_t f = footprint_make(0x518, sizes, 1, 1);
  kreplay_snapshot_t* snapshot = test_snap_ok(f.agent);
  char address_text[32];
  snprintf(address_text, sizeof address_text, "%#llx", (unsigned long long)(uintptr_t)f.ptrs[0]);
  test_free(f.ptrs[0]);
  f.ptrs[0] = NULL;
  test_log_capture(KREPLAY_LOG_WARNING);
  CHECK_OK(kreplay_restore(snapshot, NULL));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, address_text));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "12345 bytes"));
  test_log_stop();
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
}

static void handles_null_and_stale_are_refused_safely(void) {
  static const size_t sizes[] = {4096};
  footprint_t f = footprint_make(0x519, sizes, 1, 1);
  kreplay_snapshot_t* snapshot;
  kreplay_restore_report_t report;
  kreplay_snapshot_info_t info;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_HOST_BUDGET;

  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_snap(f.agent, NULL, &reason));

  memset(&report, 0xAB, sizeof report);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_restore(NULL, &report));
  CHECK_EQ(0, report.restored + report.skipped + report.failed + report.bytes);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_restore(NULL, NULL));

  test_log_capture(KREPLAY_LOG_WARNING);
  kreplay_snapshot_free(NULL);
  CHECK_EQ(0, test_log_count(-1, NULL));

  snapshot = test_snap_ok(f.agent);
  kreplay_snapshot_free(snapshot);
  kreplay_snapshot_free(snapshot); /* a double free is logged and ignored */
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_ERROR, "not a live snapshot"));

  /* The freed handle is refused everywhere, and nothing is written through it. */
  footprint_fill(&f, 2);
  memset(&report, 0xAB, sizeof report);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_restore(snapshot, &report));
  CHECK_EQ(0, report.restored + report.skipped + report.failed + report.bytes);
  CHECK(footprint_has(&f, 2));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_snapshot_info(snapshot, &info));
  test_log_stop();
  footprint_free(&f);
}

static void nothing_is_left_mapped_or_locked(void) {
  /* Every test above freed its snapshots and trimmed its agents. */
  CHECK_EQ(0, test_host_memory().mapped_bytes);
  CHECK_EQ(0, test_counters().locked_bytes);
  CHECK_EQ(0, test_counters().violations);
}

int main(void) {
  /* First: nothing may be configured before it runs; it configures the simulated device when it is done. */
  RUN_TEST(a_snap_before_configure_is_declined_not_configured);
  /* Early: the graph warning is once per process, so nothing before it may trigger it. */
  RUN_TEST(the_gate_replays_only_single_dispatches_and_warns_once_about_graphs);
  RUN_TEST(every_pass_is_restored_exactly);
  RUN_TEST(module_variables_follow_the_skip_rules);
  RUN_TEST(module_variables_are_discovered_at_snapshot_time);
  RUN_TEST(snapshot_info_reports_what_was_captured);
  RUN_TEST(an_agent_with_nothing_tracked_gets_an_empty_snapshot);
  RUN_TEST(a_snapshot_holds_only_its_agents_regions);
  RUN_TEST(a_region_freed_during_the_window_is_skipped_and_not_written);
  RUN_TEST(a_region_reallocated_at_the_same_address_is_not_overwritten);
  RUN_TEST(vmem_ranges_are_captured_and_restored);
  RUN_TEST(turning_tracking_off_declines_snapshots_and_forgets_regions);
  RUN_TEST(staging_that_cannot_be_mapped_declines_staging_memory);
  RUN_TEST(a_failed_device_copy_declines_copy_failed);
  RUN_TEST(an_incomplete_module_scan_declines_module_scan_incomplete);
  RUN_TEST(a_lost_allocation_declines_inventory_overflow);
  RUN_TEST(a_snapshot_above_the_host_budget_declines_host_budget);
  RUN_TEST(a_failed_restore_copy_is_partial_restore_and_the_others_are_still_written);
  RUN_TEST(pinned_staging_is_locked_once_and_reused_across_dispatches);
  RUN_TEST(pinned_staging_of_an_old_footprint_is_unlocked_before_it_is_unmapped);
  RUN_TEST(a_refused_page_lock_still_gives_a_working_snapshot);
  RUN_TEST(a_declined_snap_trims_retained_staging);
  RUN_TEST(a_snap_unmaps_idle_staging_it_did_not_take);
  RUN_TEST(a_snapshot_and_a_restore_log_one_info_line_each);
  RUN_TEST(a_skipped_region_is_logged_with_its_address_and_size);
  RUN_TEST(handles_null_and_stale_are_refused_safely);
  RUN_TEST(nothing_is_left_mapped_or_locked);
  return 0;
}
