/* kreplay_agent_reset on the simulated device: the agent's device context is gone (a CUDA device reset), so a
 * live snapshot's restore writes nothing and counts everything skipped, its release never calls device_free
 * for storage of the old context, page-locking is forgotten without host_unlock and redone on next use, and a
 * snapshot taken afterwards works. The control without the reset shows the same restore writing. Each test
 * uses an agent of its own. */
#include "test_util.h"

#define REGION ((size_t)64 * 1024)

static void set_policy(size_t device_budget_bytes) {
  kreplay_policy_t policy = test_policy();
  policy.device_budget_bytes = device_budget_bytes;
  policy.pin_staging = true;
  CHECK_OK(kreplay_set_policy(&policy));
}

/* One region of `agent`, filled with `byte`, captured in device storage. */
static kreplay_snapshot_t* snap_one_region(kreplay_agent_t agent, unsigned char byte, void** region_out) {
  void* region = test_alloc(agent, REGION);
  memset(region, byte, REGION);
  set_policy((size_t)1 << 20);
  *region_out = region;
  return test_snap_ok(agent);
}

/* A device-tier snapshot of one region, the region overwritten, then (with `reset`) the agent reset, then the
 * restore and the release. Returns the restore's report. */
static kreplay_restore_report_t restore_after(uint64_t handle, bool reset) {
  kreplay_agent_t agent = test_agent(handle);
  void* region = NULL;
  kreplay_snapshot_t* snapshot = snap_one_region(agent, 0x11, &region);
  kreplay_snapshot_info_t info;
  kreplay_restore_report_t report;
  kreplay_sim_counters_t before;
  memset(&info, 0, sizeof info);
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  CHECK_EQ(REGION, info.device_bytes);
  memset(region, 0xEE, REGION);
  if (reset) {
    kreplay_agent_reset(agent);
  }
  before = test_counters();
  memset(&report, 0, sizeof report);
  CHECK_OK(kreplay_restore(snapshot, &report));
  kreplay_snapshot_free(snapshot);
  if (reset) {
    CHECK(test_all_bytes(region, REGION, 0xEE));
    CHECK_EQ(before.batch_copies, test_counters().batch_copies);
    CHECK_EQ(before.copies, test_counters().copies);
    CHECK_EQ(before.device_frees, test_counters().device_frees);
    CHECK_EQ(0, kreplay_retained_device_bytes(agent));
  } else {
    CHECK(test_all_bytes(region, REGION, 0x11));
  }
  CHECK_EQ(0, test_counters().violations);
  test_free(region);
  kreplay_device_trim(agent);
  kreplay_staging_trim(agent);
  return report;
}

static void a_restore_after_an_agent_reset_skips_everything_and_writes_nothing(void) {
  kreplay_restore_report_t report = restore_after(1, true);
  CHECK_EQ(0, report.restored);
  CHECK_EQ(1, report.skipped);
  CHECK_EQ(0, report.bytes);
}

static void control_without_the_reset_the_same_restore_writes(void) {
  kreplay_restore_report_t report = restore_after(2, false);
  CHECK_EQ(1, report.restored);
  CHECK_EQ(0, report.skipped);
  CHECK_EQ(REGION, report.bytes);
}

static void a_snapshot_after_an_agent_reset_takes_new_storage_and_restores(void) {
  kreplay_agent_t agent = test_agent(3);
  void* region = NULL;
  kreplay_snapshot_t* snapshot = snap_one_region(agent, 0x22, &region);
  kreplay_restore_report_t report;
  size_t allocs;
  kreplay_agent_reset(agent);
  allocs = test_counters().device_allocs;
  kreplay_snapshot_free(snapshot);
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  CHECK_EQ(allocs + 1, test_counters().device_allocs);
  memset(region, 0xEE, REGION);
  memset(&report, 0, sizeof report);
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK_EQ(1, report.restored);
  CHECK(test_all_bytes(region, REGION, 0x22));
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(0, test_counters().violations);
  test_free(region);
  kreplay_device_trim(agent);
}

static void page_locking_is_forgotten_without_unlocking_and_redone_on_next_use(void) {
  kreplay_agent_t agent = test_agent(4);
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_sim_counters_t before;
  void* region = test_alloc(agent, REGION);
  set_policy(0);
  before = test_counters();
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(before.host_locks + 1, test_counters().host_locks);
  kreplay_agent_reset(agent);
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(before.host_locks + 2, test_counters().host_locks);
  CHECK_EQ(before.host_unlocks, test_counters().host_unlocks);
  /* Control: without a reset the retained block stays locked and is not locked again. */
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(before.host_locks + 2, test_counters().host_locks);
  test_free(region);
}

int main(void) {
  kreplay_sim_options_t options;
  memset(&options, 0, sizeof options);
  options.copy_batch = true;
  options.device_alloc = true;
  (void)test_configure_sim_with(&options);
  RUN_TEST(a_restore_after_an_agent_reset_skips_everything_and_writes_nothing);
  RUN_TEST(control_without_the_reset_the_same_restore_writes);
  RUN_TEST(a_snapshot_after_an_agent_reset_takes_new_storage_and_restores);
  RUN_TEST(page_locking_is_forgotten_without_unlocking_and_redone_on_next_use);
  return 0;
}
