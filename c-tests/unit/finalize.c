/* kreplay_finalize, the teardown guard. It is irreversible for the process, so it has an executable of its own:
 * the first test builds up live state (a tracked region, a snapshot, lent and retained staging), the second
 * finalizes and checks that every call then returns FINALIZED or does nothing, touching nothing. */
#include "test_util.h"

#define KIB ((size_t)1024)

static const uint64_t AGENT = 0x401;

static void* region;
static void* mapping;
static kreplay_snapshot_t* snapshot;
static kreplay_staging_buffer_t lent;

static void before_finalize_every_call_works(void) {
  const kreplay_agent_t agent = test_agent(AGENT);
  kreplay_staging_buffer_t idle;
  kreplay_policy_t policy;
  test_configure_sim();
  region = test_alloc(agent, 64 * KIB);
  test_fill(region, 64 * KIB, 4);
  CHECK_OK(kreplay_sim_alloc(agent, 16 * KIB, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &mapping));
  CHECK_OK(kreplay_record_vmem_map(mapping, 16 * KIB, agent));
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));

  memset(&lent, 0, sizeof lent);
  memset(&idle, 0, sizeof idle);
  CHECK_OK(kreplay_staging_acquire(&lent, agent, 128 * KIB));
  CHECK_OK(kreplay_staging_acquire(&idle, agent, 2048 * KIB));
  kreplay_staging_release(&idle);
  CHECK(kreplay_retained_staging_bytes(agent) > 0);

  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  CHECK_OK(kreplay_set_policy(&policy));
  CHECK_EQ(2, test_inventory(agent).regions);
}

static void after_finalize_every_call_returns_finalized_or_does_nothing(void) {
  const kreplay_agent_t agent = test_agent(AGENT);
  kreplay_sim_counters_t before;
  kreplay_host_memory_stats_t host_before;
  kreplay_snapshot_t* declined = (kreplay_snapshot_t*)&lent; /* any non-NULL value: it must be overwritten */
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  kreplay_restore_report_t report;
  kreplay_staging_buffer_t buffer;
  kreplay_staging_buffer_t lent_before = lent;
  kreplay_inventory_stats_t stats;
  kreplay_policy_t policy;
  kreplay_device_ops_t ops;
  void* other = NULL;

  test_fill(region, 64 * KIB, 5);
  CHECK_OK(kreplay_sim_alloc(agent, 4 * KIB, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &other));

  kreplay_finalize();
  kreplay_finalize(); /* idempotent */
  before = test_counters();
  host_before = test_host_memory();

  /* Tracking. */
  CHECK_STATUS(KREPLAY_STATUS_FINALIZED, kreplay_record_alloc(other, 4 * KIB, 0));
  CHECK_STATUS(KREPLAY_STATUS_FINALIZED, kreplay_record_free(region));
  CHECK_STATUS(KREPLAY_STATUS_FINALIZED, kreplay_record_vmem_map(other, 4 * KIB, agent));
  CHECK_STATUS(KREPLAY_STATUS_FINALIZED, kreplay_record_vmem_unmap(mapping, 16 * KIB));
  memset(&stats, 0xAB, sizeof stats);
  CHECK_STATUS(KREPLAY_STATUS_FINALIZED, kreplay_inventory_stats(agent, &stats));
  kreplay_tracking_enable(false); /* does nothing: the tables stay as they were */
  CHECK(kreplay_tracking_is_enabled());

  /* Snapshot and restore. */
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(agent, &declined, &reason));
  CHECK(declined == NULL);
  CHECK_EQ(KREPLAY_DECLINE_FINALIZED, reason);
  memset(&report, 0xAB, sizeof report);
  CHECK_STATUS(KREPLAY_STATUS_FINALIZED, kreplay_restore(snapshot, &report));
  CHECK_EQ(0, report.restored + report.skipped + report.failed + report.bytes);
  CHECK(test_has_pattern(region, 64 * KIB, 5)); /* the snapshot's contents were not written back */

  /* Staging. */
  memset(&buffer, 0, sizeof buffer);
  CHECK_STATUS(KREPLAY_STATUS_FINALIZED, kreplay_staging_acquire(&buffer, agent, 64));
  CHECK(buffer.data == NULL);
  kreplay_staging_release(&lent);
  CHECK(memcmp(&lent, &lent_before, sizeof lent) == 0);
  CHECK_EQ(0, kreplay_retained_staging_bytes(agent));
  kreplay_staging_trim(agent);

  /* Configuration. */
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  CHECK_STATUS(KREPLAY_STATUS_FINALIZED, kreplay_set_policy(&policy));
  memset(&ops, 0, sizeof ops);
  CHECK_OK(kreplay_sim_device_ops(&ops));
  CHECK_STATUS(KREPLAY_STATUS_FINALIZED, kreplay_configure(&ops));

  /* A snapshot freed during the host's teardown must not crash (its pool is a static that is never destroyed). */
  kreplay_snapshot_free(snapshot);
  snapshot = NULL;

  /* Nothing above reached the device or mapped or unmapped host memory. */
  CHECK_EQ(before.copies, test_counters().copies);
  CHECK_EQ(before.pointer_queries, test_counters().pointer_queries);
  CHECK_EQ(before.module_scans, test_counters().module_scans);
  CHECK_EQ(host_before.maps, test_host_memory().maps);
  CHECK_EQ(host_before.unmaps, test_host_memory().unmaps);

  /* The gate is pure and still answers. */
  CHECK(kreplay_replay_gate(1, 1, false) == KREPLAY_GATE_REPLAY);
}

int main(void) {
  RUN_TEST(before_finalize_every_call_works);
  RUN_TEST(after_finalize_every_call_returns_finalized_or_does_nothing);
  return 0;
}
