/* kreplay_agent_reset on the simulated device: the agent's device context is gone (a CUDA device reset), so a
 * live snapshot's restore writes nothing and counts everything skipped, its release never calls device_free
 * for storage of the old context, page-locking is forgotten without host_unlock and redone on next use, and a
 * snapshot taken afterwards works. The control without the reset shows the same restore writing. Each test
 * uses an agent of its own. */
#include "test_util.h"

#define REGION ((size_t)64 * 1024)

static void configure(void) {
  kreplay_sim_options_t options;
  kreplay_device_ops_t ops;
  memset(&options, 0, sizeof options);
  options.copy_batch = true;
  options.device_alloc = true;
  kreplay_sim_set_options(&options);
  memset(&ops, 0, sizeof ops);
  CHECK_OK(kreplay_sim_device_ops(&ops));
  CHECK_OK(kreplay_configure(&ops));
  kreplay_tracking_enable(true);
}

static void set_policy(size_t device_budget_bytes) {
  kreplay_policy_t policy;
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.device_budget_bytes = device_budget_bytes;
  policy.pin_staging = true;
  CHECK_OK(kreplay_set_policy(&policy));
}

static kreplay_sim_counters_t counters(void) {
  kreplay_sim_counters_t out;
  CHECK_OK(kreplay_sim_counters(&out));
  return out;
}

static bool filled_with(const void* ptr, unsigned char byte) {
  const unsigned char* bytes = (const unsigned char*)ptr;
  size_t i;
  for (i = 0; i < REGION; ++i) {
    if (bytes[i] != byte) {
      return false;
    }
  }
  return true;
}

/* A device-tier snapshot of one region, the region overwritten, then (with `reset`) the agent reset, then the
 * restore and the release. Returns the restore's report. */
static kreplay_restore_report_t restore_after(uint64_t handle, bool reset) {
  kreplay_agent_t agent = test_agent(handle);
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_snapshot_info_t info;
  kreplay_restore_report_t report;
  kreplay_sim_counters_t before;
  void* region = test_alloc(agent, REGION);
  memset(region, 0x11, REGION);
  set_policy((size_t)1 << 20);
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  memset(&info, 0, sizeof info);
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  CHECK_EQ(REGION, info.device_bytes);
  memset(region, 0xEE, REGION);
  if (reset) {
    kreplay_agent_reset(agent);
  }
  before = counters();
  memset(&report, 0, sizeof report);
  CHECK_OK(kreplay_restore(snapshot, &report));
  kreplay_snapshot_free(snapshot);
  if (reset) {
    CHECK(filled_with(region, 0xEE));
    CHECK_EQ(before.batch_copies, counters().batch_copies);
    CHECK_EQ(before.copies, counters().copies);
    CHECK_EQ(before.device_frees, counters().device_frees);
    CHECK_EQ(0, kreplay_retained_device_bytes(agent));
  } else {
    CHECK(filled_with(region, 0x11));
  }
  CHECK_EQ(0, counters().violations);
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
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_restore_report_t report;
  size_t allocs;
  void* region = test_alloc(agent, REGION);
  memset(region, 0x22, REGION);
  set_policy((size_t)1 << 20);
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  kreplay_agent_reset(agent);
  allocs = counters().device_allocs;
  kreplay_snapshot_free(snapshot);
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  CHECK_EQ(allocs + 1, counters().device_allocs);
  memset(region, 0xEE, REGION);
  memset(&report, 0, sizeof report);
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK_EQ(1, report.restored);
  CHECK(filled_with(region, 0x22));
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(0, counters().violations);
  test_free(region);
  kreplay_device_trim(agent);
}

static void page_locking_is_forgotten_without_unlocking_and_redone_on_next_use(void) {
  kreplay_agent_t agent = test_agent(4);
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_sim_counters_t before;
  void* region = test_alloc(agent, REGION);
  set_policy(0);
  before = counters();
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(before.host_locks + 1, counters().host_locks);
  kreplay_agent_reset(agent);
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(before.host_locks + 2, counters().host_locks);
  CHECK_EQ(before.host_unlocks, counters().host_unlocks);
  /* Control: without a reset the retained block stays locked and is not locked again. */
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(before.host_locks + 2, counters().host_locks);
  test_free(region);
}

int main(void) {
  configure();
  RUN_TEST(a_restore_after_an_agent_reset_skips_everything_and_writes_nothing);
  RUN_TEST(control_without_the_reset_the_same_restore_writes);
  RUN_TEST(a_snapshot_after_an_agent_reset_takes_new_storage_and_restores);
  RUN_TEST(page_locking_is_forgotten_without_unlocking_and_redone_on_next_use);
  return 0;
}
