/* Module liveness (API.md, version 4) through the C API on the simulated device: a module variable whose code
 * object was unloaded since the snapshot is never written by a restore; it is skipped, counted with the freed
 * regions and named in the log. The controls show the test can tell: without the unload the variable is
 * written back, and a host that does not report the unload gets the write that the device counts as a
 * violation. */
#include "test_util.h"

static kreplay_restore_report_t restore(const kreplay_snapshot_t* snapshot, kreplay_status_t expected) {
  kreplay_restore_report_t report;
  memset(&report, 0xFF, sizeof report);
  CHECK_STATUS(expected, kreplay_restore(snapshot, &report));
  return report;
}

/* A code object with one variable, `name`, filled with `seed`; its id goes to *code_object_out. */
static unsigned char* load_module(kreplay_agent_t agent, const char* name, size_t size, unsigned seed,
                                  size_t* code_object_out) {
  unsigned char* variable;
  *code_object_out = kreplay_sim_new_code_object();
  variable = (unsigned char*)test_module_variable(agent, name, size, false);
  test_fill(variable, size, seed);
  kreplay_modules_changed();
  return variable;
}

/* The end of a test: the code object it left loaded goes, and the agent's staging is given back. */
static void unload_and_trim(kreplay_agent_t agent, size_t code_object) {
  (void)kreplay_sim_unload_code_object(code_object);
  kreplay_modules_changed();
  kreplay_staging_trim(agent);
}

static void a_variable_of_an_unloaded_module_is_skipped_counted_and_named(void) {
  const kreplay_agent_t agent = test_agent(0x4401);
  size_t gone_module, kept_module;
  unsigned char* gone = load_module(agent, "gone_counter", 256, 1, &gone_module);
  unsigned char* kept = load_module(agent, "kept_counter", 128, 2, &kept_module);
  void* region = test_alloc(agent, 4096);
  kreplay_snapshot_t* snapshot;
  kreplay_restore_report_t report;
  size_t violations = test_counters().violations;

  test_fill(region, 4096, 3);
  snapshot = test_snap_ok(agent);
  test_fill(kept, 128, 9);
  test_fill(region, 4096, 9);

  CHECK_EQ(1, kreplay_sim_unload_code_object(gone_module));
  kreplay_modules_changed();
  test_log_capture(KREPLAY_LOG_WARNING);
  report = restore(snapshot, KREPLAY_STATUS_SUCCESS);
  CHECK_EQ(2, report.restored); /* the region and kept_counter */
  CHECK_EQ(1, report.skipped);  /* gone_counter */
  CHECK_EQ(0, report.failed);
  CHECK_EQ(4096 + 128, report.bytes);
  CHECK(test_has_pattern(kept, 128, 2));
  CHECK(test_has_pattern(region, 4096, 3));
  CHECK(test_all_bytes(gone, 256, 0xDD)); /* the unloaded segment as the device left it */
  CHECK_EQ(violations, test_counters().violations);
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "variable gone_counter "));
  CHECK_EQ(0, test_log_count(-1, "kept_counter"));
  test_log_stop();

  /* A second restore of the same snapshot skips it again. */
  report = restore(snapshot, KREPLAY_STATUS_SUCCESS);
  CHECK_EQ(2, report.restored);
  CHECK_EQ(1, report.skipped);
  CHECK_EQ(violations, test_counters().violations);
  kreplay_snapshot_free(snapshot);
  test_free(region);
  unload_and_trim(agent, kept_module);
}

static void variables_of_one_span_are_written_one_by_one_around_the_unloaded_ones(void) {
  /* a0 and a1 lie back to back in one code object's segment and b_table right after them in another's: the
   * capture copies them as one span (or one by one where the device refuses the crossing). Module A goes. */
  const kreplay_agent_t agent = test_agent(0x4402);
  size_t module_a, module_b;
  unsigned char* a0;
  unsigned char* a1;
  unsigned char* b;
  kreplay_snapshot_t* snapshot;
  kreplay_restore_report_t report;
  size_t violations = test_counters().violations;

  module_a = kreplay_sim_new_code_object();
  a0 = (unsigned char*)test_module_variable(agent, "a0", 256, false);
  a1 = (unsigned char*)test_module_variable(agent, "a1", 256, false);
  module_b = kreplay_sim_new_code_object();
  b = (unsigned char*)test_module_variable(agent, "b_table", 256, true);
  test_fill(a0, 256, 1);
  test_fill(a1, 256, 2);
  test_fill(b, 256, 3);
  kreplay_modules_changed();
  snapshot = test_snap_ok(agent);
  test_fill(a0, 256, 9);
  test_fill(a1, 256, 9);

  CHECK_EQ(2, kreplay_sim_unload_code_object(module_a));
  kreplay_modules_changed();
  test_log_capture(KREPLAY_LOG_WARNING);
  report = restore(snapshot, KREPLAY_STATUS_SUCCESS);
  CHECK_EQ(1, report.restored);
  CHECK_EQ(2, report.skipped);
  CHECK_EQ(violations, test_counters().violations);
  CHECK(test_has_pattern(b, 256, 3));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "variable a0 "));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "variable a1 "));
  test_log_stop();
  kreplay_snapshot_free(snapshot);
  unload_and_trim(agent, module_b);
}

static void control_a_module_loaded_meanwhile_leaves_every_variable_written(void) {
  const kreplay_agent_t agent = test_agent(0x4403);
  size_t module, other;
  unsigned char* variable = load_module(agent, "still_loaded", 64, 4, &module);
  kreplay_snapshot_t* snapshot = test_snap_ok(agent);
  kreplay_restore_report_t report;
  test_fill(variable, 64, 9);
  (void)load_module(agent, "loaded_later", 64, 5, &other); /* modules changed, none of the snapshot's gone */
  report = restore(snapshot, KREPLAY_STATUS_SUCCESS);
  CHECK_EQ(1, report.restored);
  CHECK_EQ(0, report.skipped);
  CHECK(test_has_pattern(variable, 64, 4));
  kreplay_snapshot_free(snapshot);
  (void)kreplay_sim_unload_code_object(module);
  unload_and_trim(agent, other);
}

static void control_an_unreported_unload_is_written_and_the_device_counts_it(void) {
  /* What the library cannot know it cannot skip: this shows the device's check would catch the write the
   * first test proves does not happen. */
  const kreplay_agent_t agent = test_agent(0x4404);
  size_t module;
  (void)load_module(agent, "unreported", 64, 6, &module);
  {
    kreplay_snapshot_t* snapshot = test_snap_ok(agent);
    kreplay_restore_report_t report;
    size_t violations = test_counters().violations;
    CHECK_EQ(1, kreplay_sim_unload_code_object(module)); /* no kreplay_modules_changed() */
    report = restore(snapshot, KREPLAY_STATUS_PARTIAL_RESTORE);
    CHECK_EQ(0, report.restored);
    CHECK_EQ(1, report.failed);
    CHECK_EQ(violations + 1, test_counters().violations);
    kreplay_snapshot_free(snapshot);
  }
  kreplay_modules_changed();
  kreplay_staging_trim(agent);
}

static void a_failed_liveness_scan_writes_no_variable_and_is_a_partial_restore(void) {
  const kreplay_agent_t agent = test_agent(0x4405);
  size_t module;
  unsigned char* variable = load_module(agent, "unverified", 64, 7, &module);
  void* region = test_alloc(agent, 1024);
  kreplay_snapshot_t* snapshot;
  kreplay_restore_report_t report;
  kreplay_sim_faults_t faults = test_no_faults();
  test_fill(region, 1024, 8);
  snapshot = test_snap_ok(agent);
  test_fill(variable, 64, 9);
  test_fill(region, 1024, 9);
  kreplay_modules_changed();
  faults.fail_module_scan_at = 1;
  kreplay_sim_set_faults(&faults);
  test_log_capture(KREPLAY_LOG_WARNING);
  report = restore(snapshot, KREPLAY_STATUS_PARTIAL_RESTORE);
  test_disarm_faults();
  CHECK_EQ(1, report.restored); /* the region */
  CHECK_EQ(1, report.failed);   /* the variable: not known to be loaded, so not written */
  CHECK(test_has_pattern(region, 1024, 8));
  CHECK(test_has_pattern(variable, 64, 9));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_ERROR, "could not be listed again"));
  test_log_stop();
  kreplay_snapshot_free(snapshot);
  test_free(region);
  unload_and_trim(agent, module);
}

int main(void) {
  test_configure_sim();
  RUN_TEST(a_variable_of_an_unloaded_module_is_skipped_counted_and_named);
  RUN_TEST(variables_of_one_span_are_written_one_by_one_around_the_unloaded_ones);
  RUN_TEST(control_a_module_loaded_meanwhile_leaves_every_variable_written);
  RUN_TEST(control_an_unreported_unload_is_written_and_the_device_counts_it);
  RUN_TEST(a_failed_liveness_scan_writes_no_variable_and_is_a_partial_restore);
  return 0;
}
