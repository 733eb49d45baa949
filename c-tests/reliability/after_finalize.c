/* Calls after kreplay_finalize(), as a host's static destructors would make them: every recording, snapshot,
 * restore and staging call returns FINALIZED (or does nothing), device memory is not touched, and nothing
 * crashes. Its own executable, since finalize cannot be undone. */
#include "reliability.h"

#include <stdbool.h>

static const kreplay_agent_t agent = {0xE1};

int main(void) {
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_snapshot_t* late = (kreplay_snapshot_t*)&agent;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  kreplay_restore_report_t report;
  kreplay_inventory_stats_t stats;
  kreplay_staging_buffer_t held, fresh;
  kreplay_device_ops_t ops;
  kreplay_policy_t policy;
  kreplay_sim_counters_t before;
  kreplay_host_memory_stats_t memory;
  unsigned char* region = NULL;
  unsigned char* other = NULL;
  size_t i, mark;
  kreplay_window_options_t window_options;
  kreplay_window_t* window = NULL;
  kreplay_window_t* late_window = (kreplay_window_t*)&agent;
  kreplay_window_outcome_t outcome;
  kreplay_untracked_t untracked;
  const kreplay_agent_t copy_agent = {0xE2};
  uint64_t token = 0, late_token = 7;

  kreplay_sim_reset();
  rel_log_install(KREPLAY_LOG_TRACE);
  rel_configure_sim();
  kreplay_tracking_enable(true);
  REL_REQUIRE(kreplay_sim_alloc(agent, 4096, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED,
                                (void**)&region) == KREPLAY_STATUS_SUCCESS);
  REL_REQUIRE(kreplay_sim_alloc(agent, 4096, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED,
                                (void**)&other) == KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_record_alloc(region, 4096, 0), KREPLAY_STATUS_SUCCESS);
  memset(region, 0x11, 4096);
  REL_CHECK_STATUS(kreplay_snap(agent, &snapshot, NULL), KREPLAY_STATUS_SUCCESS);
  memset(&held, 0, sizeof held);
  REL_CHECK_STATUS(kreplay_staging_acquire(&held, agent, 10000), KREPLAY_STATUS_SUCCESS);
  memset(region, 0x22, 4096);
  /* A replay window open across finalize, and an async copy in flight on another agent. */
  memset(&window_options, 0, sizeof window_options);
  window_options.struct_size = sizeof window_options;
  window_options.passes = 2;
  REL_CHECK_STATUS(kreplay_window_open(agent, &window_options, &window, NULL), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_copy_begin(&copy_agent, 1, &token), KREPLAY_STATUS_SUCCESS);

  kreplay_finalize();
  kreplay_finalize(); /* twice is harmless */
  before = rel_counters();
  mark = rel_log.total;

  /* Tracking. */
  REL_CHECK_STATUS(kreplay_record_alloc(other, 4096, 0), KREPLAY_STATUS_FINALIZED);
  REL_CHECK_STATUS(kreplay_record_free(region), KREPLAY_STATUS_FINALIZED);
  REL_CHECK_STATUS(kreplay_record_free(NULL), KREPLAY_STATUS_FINALIZED);
  REL_CHECK_STATUS(kreplay_record_vmem_map(other, 4096, agent), KREPLAY_STATUS_FINALIZED);
  REL_CHECK_STATUS(kreplay_record_vmem_unmap(other, 4096), KREPLAY_STATUS_FINALIZED);
  REL_CHECK_STATUS(kreplay_inventory_stats(agent, &stats), KREPLAY_STATUS_FINALIZED);
  kreplay_tracking_enable(false); /* does nothing */
  kreplay_tracking_enable(true);

  /* Configuration. */
  REL_REQUIRE(kreplay_sim_device_ops(&ops) == KREPLAY_STATUS_SUCCESS);
  REL_CHECK_STATUS(kreplay_configure(&ops), KREPLAY_STATUS_FINALIZED);
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_FINALIZED);

  /* Snapshots: a new one is declined; one taken before restores nothing and is refused. */
  REL_CHECK_STATUS(kreplay_snap(agent, &late, &reason), KREPLAY_STATUS_DECLINED);
  REL_CHECK(late == NULL && reason == KREPLAY_DECLINE_FINALIZED);
  memset(&report, 0xAB, sizeof report);
  REL_CHECK_STATUS(kreplay_restore(snapshot, &report), KREPLAY_STATUS_FINALIZED);
  REL_CHECK(report.restored == 0 && report.failed == 0 && report.skipped == 0 && report.bytes == 0);
  for (i = 0; i < 4096; ++i) {
    if (region[i] != 0x22) {
      REL_CHECK(region[i] == 0x22);
      break;
    }
  }
  REL_CHECK_EQ(rel_counters().copies, before.copies);
  REL_CHECK_EQ(rel_counters().pointer_queries, before.pointer_queries);
  REL_CHECK_EQ(rel_counters().module_scans, before.module_scans);

  /* Staging: no new storage, and a release leaves the buffer as it was (the pool is not touched). */
  memset(&fresh, 0, sizeof fresh);
  memory = rel_host_memory();
  REL_CHECK_STATUS(kreplay_staging_acquire(&fresh, agent, 64), KREPLAY_STATUS_FINALIZED);
  REL_CHECK(fresh.data == NULL);
  REL_CHECK_STATUS(kreplay_staging_acquire(&held, agent, 64), KREPLAY_STATUS_FINALIZED);
  REL_CHECK(held.data != NULL && held.size == 10000);
  kreplay_staging_release(&held);
  REL_CHECK(held.data != NULL);
  REL_CHECK_EQ(kreplay_retained_staging_bytes(agent), 0);
  kreplay_staging_trim(agent);
  REL_CHECK_EQ(rel_host_memory().maps, memory.maps);
  REL_CHECK_EQ(rel_host_memory().unmaps, memory.unmaps);
  /* Its contents are still the host's to use: the storage was not unmapped. */
  memset(held.data, 0x33, held.capacity);

  /* The replay window: no new one and no new fenced copy; the one open still closes (no fence stays closed), and
   * the copy in flight still ends. */
  REL_CHECK_STATUS(kreplay_window_open(agent, &window_options, &late_window, NULL), KREPLAY_STATUS_FINALIZED);
  REL_CHECK(late_window == (kreplay_window_t*)&agent);
  REL_CHECK_STATUS(kreplay_copy_begin(&agent, 1, &late_token), KREPLAY_STATUS_FINALIZED);
  REL_CHECK_EQ(late_token, 7);
  kreplay_copy_end(token);
  kreplay_window_note_reentry(agent);
  memset(&outcome, 0, sizeof outcome);
  outcome.struct_size = sizeof outcome;
  REL_CHECK_STATUS(kreplay_window_close(window, &outcome), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(outcome.agent.handle, agent.handle);
  REL_CHECK_STATUS(kreplay_window_close(window, NULL), KREPLAY_STATUS_INVALID_ARGUMENT);
  REL_CHECK_STATUS(kreplay_untracked_stats(agent, &untracked), KREPLAY_STATUS_FINALIZED);

  /* Freeing the old snapshot (a static destructor may do it) must not crash. */
  kreplay_snapshot_free(snapshot);
  kreplay_snapshot_free(NULL);

  /* What never depended on state still answers. */
  REL_CHECK(kreplay_status_string(KREPLAY_STATUS_FINALIZED) != NULL);
  REL_CHECK(kreplay_decline_reason_string(KREPLAY_DECLINE_FINALIZED) != NULL);
  REL_CHECK(kreplay_version() != NULL);
  REL_CHECK(kreplay_replay_gate(1, 1, false) == KREPLAY_GATE_REPLAY);
  REL_CHECK_STATUS(kreplay_host_memory_stats(&memory), KREPLAY_STATUS_SUCCESS);

  /* Nothing above is an error worth a message: a host's teardown must not flood its log. */
  REL_CHECK_EQ(rel_log_count_since(mark, KREPLAY_LOG_WARNING, ""), 0);
  REL_CHECK_EQ(rel_counters().violations, 0);
  REL_CHECK_EQ(rel_log.bad_length, 0);
  return rel_finish("kreplay_reliability_after_finalize");
}
