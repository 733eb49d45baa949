/* Learned write sets (issue 27) through the C API on the simulated device: partial restores digest only what
 * pass 1 wrote (and the hints), the last full check catches a pass that wrote elsewhere and the outcome names
 * it, a control without that check ends wrong, and every INVALID_ARGUMENT case of the new calls. One process;
 * each test uses an agent of its own. */
#include "test_util.h"

#define BLOCK 4096u
#define REGIONS 3
#define REGION_BYTES (3 * BLOCK)
#define FOOTPRINT (REGIONS * REGION_BYTES)

typedef struct footprint_t {
  kreplay_agent_t agent;
  unsigned char* regions[REGIONS];
} footprint_t;

static footprint_t footprint_new(uint64_t agent) {
  footprint_t f;
  size_t i;
  f.agent = test_agent(agent);
  for (i = 0; i < REGIONS; ++i) {
    f.regions[i] = (unsigned char*)test_alloc(f.agent, REGION_BYTES);
    test_fill(f.regions[i], REGION_BYTES, (unsigned)i + 1);
  }
  return f;
}

static bool footprint_exact(const footprint_t* f) {
  size_t i;
  for (i = 0; i < REGIONS; ++i) {
    if (!test_has_pattern(f->regions[i], REGION_BYTES, (unsigned)i + 1)) {
      return false;
    }
  }
  return true;
}

static void footprint_free(footprint_t* f) {
  size_t i;
  for (i = 0; i < REGIONS; ++i) {
    test_free(f->regions[i]);
  }
  kreplay_staging_trim(f->agent);
}

/* A pass of the kernel: 16 bytes of `value` in block 1 of region 0 and block 2 of region 2 (pass 1's write
 * set), and, when `stray`, in block 0 of region 1. */
static void run_pass(const footprint_t* f, unsigned char value, bool stray) {
  memset(f->regions[0] + 1 * BLOCK + 100, value, 16);
  memset(f->regions[2] + 2 * BLOCK + 100, value, 16);
  if (stray) {
    memset(f->regions[1] + 0 * BLOCK + 100, 0x5a, 16);
  }
}

static void set_policy(bool learn) {
  kreplay_policy_t policy = test_policy();
  policy.dirty_only = true;
  policy.digest_block_bytes = BLOCK;
  policy.learn_write_set = learn;
  CHECK_OK(kreplay_set_policy(&policy));
}

static kreplay_restore_report_ex_t restore(kreplay_snapshot_t* snapshot, uint32_t flags) {
  kreplay_restore_options_t options;
  kreplay_restore_report_ex_t report;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.flags = flags;
  memset(&report, 0, sizeof report);
  report.struct_size = sizeof report;
  CHECK_OK(kreplay_restore_ex(snapshot, &options, &report));
  CHECK_EQ(sizeof report, report.struct_size);
  return report;
}

static void later_passes_that_write_pass_ones_blocks_are_restored_exactly_by_partial_digests(void) {
  footprint_t f = footprint_new(0x2701);
  kreplay_snapshot_t* snapshot = NULL;
  unsigned char restore_index;
  CHECK_OK(kreplay_snap(f.agent, &snapshot, NULL));
  for (restore_index = 1; restore_index <= 5; ++restore_index) {
    const bool last = restore_index == 5;
    const bool partial = restore_index != 1 && !last;
    size_t blocks_before = test_counters().digest_blocks;
    kreplay_restore_report_ex_t report;
    run_pass(&f, (unsigned char)(0xe0 + restore_index), false);
    report = restore(snapshot, last ? KREPLAY_RESTORE_FULL_CHECK : 0);
    CHECK(footprint_exact(&f));
    /* What the report says was digested is what the device digested: the whole footprint, or two blocks. */
    CHECK_EQ((test_counters().digest_blocks - blocks_before) * BLOCK, report.digested_bytes);
    CHECK_EQ(partial ? 2 * BLOCK : FOOTPRINT, report.digested_bytes);
    CHECK_EQ(partial, report.partial);
    CHECK_EQ(2 * BLOCK, report.bytes);
    CHECK_EQ(report.digested_bytes - 2 * BLOCK, report.clean_bytes);
    CHECK_EQ(REGIONS, report.restored);
    CHECK_EQ(2, report.write_set_blocks);
    CHECK_EQ(0, report.write_set_misses);
  }
  CHECK_EQ(0, test_counters().violations);
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
}

/* Five passes of a kernel that also writes a stray block in pass 3, in a window of 5 passes when `window`,
 * the fourth restore marked as the last when `mark_last`. Returns whether the footprint ended exact; the
 * outcome (zeroed without a window) goes to `outcome_out`. */
static bool stray_in_pass_three(uint64_t agent_handle, bool window, bool mark_last,
                                kreplay_window_outcome_t* outcome_out) {
  footprint_t f = footprint_new(agent_handle);
  kreplay_window_t* handle = NULL;
  kreplay_snapshot_t* snapshot = NULL;
  unsigned char restore_index;
  bool exact;
  memset(outcome_out, 0, sizeof *outcome_out);
  outcome_out->struct_size = sizeof *outcome_out;
  if (window) {
    kreplay_window_options_t options;
    memset(&options, 0, sizeof options);
    options.struct_size = sizeof options;
    options.passes = 5;
    CHECK_OK(kreplay_window_open(f.agent, &options, &handle, NULL));
  }
  CHECK_OK(kreplay_snap(f.agent, &snapshot, NULL));
  for (restore_index = 1; restore_index <= 4; ++restore_index) {
    kreplay_restore_report_ex_t report;
    run_pass(&f, (unsigned char)(0xe0 + restore_index), restore_index == 3);
    report = restore(snapshot, restore_index == 4 && mark_last ? KREPLAY_RESTORE_FULL_CHECK : 0);
    if (restore_index == 3) {
      /* The partial restore cannot see the stray block: pass 4 starts from a state that is not the snapshot. */
      CHECK(report.partial);
      CHECK(!footprint_exact(&f));
    }
    if (restore_index == 4 && (mark_last || window)) {
      CHECK(!report.partial);
      CHECK_EQ(FOOTPRINT, report.digested_bytes);
      CHECK_EQ(1, report.write_set_misses);
      CHECK_EQ(3, report.write_set_miss_pass);
      CHECK_EQ(3, report.write_set_blocks);
    }
  }
  exact = footprint_exact(&f);
  if (window) {
    CHECK_OK(kreplay_window_close(handle, outcome_out));
  }
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
  return exact;
}

static void a_stray_write_in_pass_three_is_caught_by_the_last_full_check_and_the_outcome_names_it(void) {
  kreplay_window_outcome_t outcome;
  char needle[96];
  test_log_capture(KREPLAY_LOG_INFO);
  CHECK(stray_in_pass_three(0x2702, true, true, &outcome));
  CHECK_EQ(5, outcome.passes_run);
  CHECK_EQ(1, outcome.write_set_misses);
  CHECK_EQ(3, outcome.write_set_miss_pass);
  /* Two full restores and two partial ones of pass 1's two blocks. */
  CHECK_EQ(2 * FOOTPRINT + 4 * BLOCK, outcome.digested_bytes);
  snprintf(needle, sizeof needle, "reentry=0 digested=%zu write_set_misses=1 miss_pass=3",
           (size_t)(2 * FOOTPRINT + 4 * BLOCK));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_INFO, needle));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "outside the learned write set"));
  test_log_stop();
}

static void a_window_of_known_passes_checks_its_last_restore_unmarked(void) {
  kreplay_window_outcome_t outcome;
  CHECK(stray_in_pass_three(0x2703, true, false, &outcome));
  CHECK_EQ(1, outcome.write_set_misses);
}

static void control_without_the_last_full_check_the_stray_write_survives(void) {
  kreplay_window_outcome_t outcome;
  CHECK(!stray_in_pass_three(0x2704, false, false, &outcome));
}

static void control_with_the_flag_off_every_restore_is_full(void) {
  footprint_t f = footprint_new(0x2705);
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_restore_report_t plain;
  unsigned char restore_index;
  set_policy(false);
  CHECK_OK(kreplay_snap(f.agent, &snapshot, NULL));
  for (restore_index = 1; restore_index <= 4; ++restore_index) {
    kreplay_restore_report_ex_t report;
    run_pass(&f, (unsigned char)(0xe0 + restore_index), restore_index == 3);
    report = restore(snapshot, 0);
    CHECK(!report.partial);
    CHECK_EQ(FOOTPRINT, report.digested_bytes);
    CHECK_EQ(0, report.write_set_blocks);
    CHECK(footprint_exact(&f));
  }
  /* The version-1 call is unchanged. */
  run_pass(&f, 0x11, true);
  CHECK_OK(kreplay_restore(snapshot, &plain));
  CHECK_EQ(3 * BLOCK, plain.bytes);
  CHECK(footprint_exact(&f));
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
  set_policy(true);
}

static void a_hinted_block_is_digested_by_partial_restores(void) {
  footprint_t f = footprint_new(0x2706);
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_write_hint_t hints[2];
  size_t added = 99;
  unsigned char restore_index;
  CHECK_OK(kreplay_snap(f.agent, &snapshot, NULL));
  hints[0].address = f.regions[1] + 10;
  hints[0].bytes = 1;
  hints[1].address = (const void*)(uintptr_t)16; /* outside every region: adds nothing */
  hints[1].bytes = 16;
  CHECK_OK(kreplay_snapshot_hint_writes(snapshot, hints, 2, &added));
  CHECK_EQ(1, added);
  for (restore_index = 1; restore_index <= 4; ++restore_index) {
    kreplay_restore_report_ex_t report;
    run_pass(&f, (unsigned char)(0xe0 + restore_index), restore_index == 3);
    report = restore(snapshot, 0);
    CHECK(footprint_exact(&f));
    CHECK_EQ(restore_index == 1 ? FOOTPRINT : 3 * BLOCK, report.digested_bytes);
    CHECK_EQ(0, report.write_set_misses);
  }
  /* bytes 0: the whole region that holds the address. */
  hints[0].address = f.regions[1] + 5000;
  hints[0].bytes = 0;
  CHECK_OK(kreplay_snapshot_hint_writes(snapshot, hints, 1, NULL));
  CHECK_OK(kreplay_snapshot_hint_writes(snapshot, NULL, 0, &added));
  CHECK_EQ(0, added);
  kreplay_snapshot_free(snapshot);
  footprint_free(&f);
}

static void bad_input_is_invalid_argument_and_restores_nothing(void) {
  footprint_t f = footprint_new(0x2707);
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_restore_options_t options;
  kreplay_restore_report_ex_t report;
  kreplay_write_hint_t wraps;
  size_t copies;
  CHECK_OK(kreplay_snap(f.agent, &snapshot, NULL));
  run_pass(&f, 0x77, false);
  copies = test_counters().copy_bytes;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.flags = 2; /* unknown bit */
  memset(&report, 0, sizeof report);
  report.struct_size = sizeof report;
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_restore_ex(snapshot, &options, &report));
  options.flags = 0;
  options.struct_size = sizeof(size_t);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_restore_ex(snapshot, &options, &report));
  report.struct_size = 4;
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_restore_ex(snapshot, NULL, &report));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_restore_ex(NULL, NULL, NULL));
  CHECK_EQ(copies, test_counters().copy_bytes);
  CHECK(!footprint_exact(&f));
  /* A caller of an older, shorter report gets the fields it has, its struct_size unchanged. */
  memset(&report, 0x5a, sizeof report);
  report.struct_size = offsetof(kreplay_restore_report_ex_t, digested_bytes);
  CHECK_OK(kreplay_restore_ex(snapshot, NULL, &report));
  CHECK_EQ(offsetof(kreplay_restore_report_ex_t, digested_bytes), report.struct_size);
  CHECK_EQ(REGIONS, report.restored);
  CHECK(report.digested_bytes != FOOTPRINT);
  CHECK(footprint_exact(&f));
  CHECK_OK(kreplay_restore_ex(snapshot, NULL, NULL));
  /* Hints. */
  wraps.address = (const void*)(uintptr_t)(SIZE_MAX - 8);
  wraps.bytes = 64;
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_snapshot_hint_writes(snapshot, &wraps, 1, NULL));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_snapshot_hint_writes(snapshot, NULL, 1, NULL));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_snapshot_hint_writes(NULL, &wraps, 0, NULL));
  kreplay_snapshot_free(snapshot);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_restore_ex(snapshot, NULL, NULL));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_snapshot_hint_writes(snapshot, NULL, 0, NULL));
  footprint_free(&f);
}

int main(void) {
  test_configure_sim_digesting();
  set_policy(true);

  RUN_TEST(later_passes_that_write_pass_ones_blocks_are_restored_exactly_by_partial_digests);
  RUN_TEST(a_stray_write_in_pass_three_is_caught_by_the_last_full_check_and_the_outcome_names_it);
  RUN_TEST(a_window_of_known_passes_checks_its_last_restore_unmarked);
  RUN_TEST(control_without_the_last_full_check_the_stray_write_survives);
  RUN_TEST(control_with_the_flag_off_every_restore_is_full);
  RUN_TEST(a_hinted_block_is_digested_by_partial_restores);
  RUN_TEST(bad_input_is_invalid_argument_and_restores_nothing);
  return 0;
}
