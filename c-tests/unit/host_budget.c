/* The live host budget (API.md, version 4) through the C API on the simulated device, whose
 * host_available_bytes op feeds the available memory each capture sees: a capture whose host staging would
 * take what kreplay holds above host_budget_percent of (available + held) declines with HOST_BUDGET and a log
 * line with the figures, one under it succeeds, and the budget follows the available memory from one capture
 * to the next; the device tier's spill counts, what stays on the device does not; an unreadable figure means
 * nothing available; 0 turns it off; above 100 is refused; and without the op the operating system's figure
 * is read. Each test uses an agent of its own and leaves nothing mapped. */
#include "test_util.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

static void configure(bool offer_query, size_t available, bool device_tier) {
  kreplay_sim_options_t options;
  memset(&options, 0, sizeof options);
  options.copy_batch = true;
  options.device_alloc = device_tier;
  options.host_available_bytes = offer_query;
  options.host_available = available;
  CHECK(offer_query == (test_configure_sim_with(&options).host_available_bytes != NULL));
}

/* Only the available figure changes; the ops stay as configured. */
static void set_available(size_t available) {
  kreplay_sim_options_t options;
  memset(&options, 0, sizeof options);
  options.copy_batch = true;
  options.host_available_bytes = true;
  options.host_available = available;
  kreplay_sim_set_options(&options);
}

static void set_policy(uint32_t host_percent, size_t device_budget_bytes) {
  kreplay_policy_t policy = test_policy();
  policy.host_budget_percent = host_percent;
  policy.device_budget_bytes = device_budget_bytes;
  CHECK_OK(kreplay_set_policy(&policy));
}

/* Snaps `agent`: the status, and on success the snapshot's info; the snapshot is freed. */
static kreplay_decline_reason_t snap_reason(kreplay_agent_t agent, kreplay_snapshot_info_t* info_out) {
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  kreplay_status_t status = kreplay_snap(agent, &snapshot, &reason);
  CHECK(status == KREPLAY_STATUS_SUCCESS || status == KREPLAY_STATUS_DECLINED);
  CHECK((status == KREPLAY_STATUS_SUCCESS) == (snapshot != NULL));
  if (snapshot != NULL) {
    if (info_out != NULL) {
      CHECK_OK(kreplay_snapshot_info(snapshot, info_out));
    }
    kreplay_snapshot_free(snapshot);
  }
  return reason;
}

static void a_capture_over_the_budget_declines_and_the_budget_follows_the_available_memory(void) {
  const kreplay_agent_t agent = test_agent(0x4501);
  void* region = test_alloc(agent, 256 * KIB);
  size_t queries = test_counters().host_available_queries;
  CHECK_EQ(0, test_host_memory().mapped_bytes);
  set_policy(50, 0);

  set_available(1 * MIB); /* 50 % of 1 MiB: 512 KiB */
  CHECK_EQ(KREPLAY_DECLINE_NONE, snap_reason(agent, NULL));
  CHECK(kreplay_retained_staging_bytes(agent) >= 256 * KIB); /* idle now, held by kreplay */

  /* 50 % of (100 KiB + what kreplay holds, about 288 KiB) is below the 256 KiB the snapshot needs. */
  set_available(100 * KIB);
  test_log_capture(KREPLAY_LOG_WARNING);
  CHECK_EQ(KREPLAY_DECLINE_HOST_BUDGET, snap_reason(agent, NULL));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "host budget: the snapshot needs"));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "102400 bytes available"));
  CHECK_EQ(0, kreplay_retained_staging_bytes(agent)); /* a decline keeps nothing */
  test_log_stop();

  /* The same capture again once memory is available again: each capture asks. */
  set_available(1 * MIB);
  CHECK_EQ(KREPLAY_DECLINE_NONE, snap_reason(agent, NULL));
  /* Its idle staging counts as available to it: with 300 KiB available and about 288 KiB held it fits. */
  set_available(300 * KIB);
  CHECK_EQ(KREPLAY_DECLINE_NONE, snap_reason(agent, NULL));
  CHECK(test_counters().host_available_queries >= queries + 4);

  /* 0 turns it off, whatever is available. */
  set_policy(0, 0);
  set_available(0);
  CHECK_EQ(KREPLAY_DECLINE_NONE, snap_reason(agent, NULL));
  test_free(region);
  kreplay_staging_trim(agent);
}

static void staging_another_snapshot_holds_counts_against_the_budget(void) {
  const kreplay_agent_t a = test_agent(0x4502);
  const kreplay_agent_t b = test_agent(0x4503);
  void* region_a = test_alloc(a, 256 * KIB);
  void* region_b = test_alloc(b, 256 * KIB);
  kreplay_snapshot_t* held = NULL;
  set_policy(50, 0);
  set_available(700 * KIB);
  CHECK_OK(kreplay_snap(a, &held, NULL));
  /* 50 % of (700 KiB + about 288 KiB) is about 494 KiB: a's 288 KiB lent plus b's 256 KiB is above it. */
  CHECK_EQ(KREPLAY_DECLINE_HOST_BUDGET, snap_reason(b, NULL));
  kreplay_snapshot_free(held);
  kreplay_staging_trim(a);
  /* Control: with a's staging gone, b fits. */
  CHECK_EQ(KREPLAY_DECLINE_NONE, snap_reason(b, NULL));
  test_free(region_a);
  test_free(region_b);
  kreplay_staging_trim(b);
}

static void an_unreadable_figure_means_nothing_available(void) {
  const kreplay_agent_t agent = test_agent(0x4504);
  void* region = test_alloc(agent, 64 * KIB);
  kreplay_sim_faults_t faults = test_no_faults();
  set_policy(50, 0);
  set_available(1 * MIB);
  faults.fail_host_available_bytes = true;
  kreplay_sim_set_faults(&faults);
  test_log_capture(KREPLAY_LOG_WARNING);
  CHECK_EQ(KREPLAY_DECLINE_HOST_BUDGET, snap_reason(agent, NULL));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "could not be read"));
  test_log_stop();
  test_disarm_faults();
  CHECK_EQ(KREPLAY_DECLINE_NONE, snap_reason(agent, NULL));
  test_free(region);
  kreplay_staging_trim(agent);
}

static void the_device_tier_spill_counts_and_device_storage_does_not(void) {
  const kreplay_agent_t agent = test_agent(0x4505);
  void* small = test_alloc(agent, 32 * KIB);
  void* large = test_alloc(agent, 256 * KIB);
  kreplay_snapshot_info_t info;
  configure(true, 540 * KIB, true);
  /* 50 % of 540 KiB is 270 KiB: the 256 KiB that spill to the host fit, all 288 KiB would not. */
  set_policy(50, 64 * KIB);
  memset(&info, 0, sizeof info);
  CHECK_EQ(KREPLAY_DECLINE_NONE, snap_reason(agent, &info));
  CHECK_EQ(32 * KIB, info.device_bytes);
  kreplay_staging_trim(agent);
  kreplay_device_trim(agent);
  /* Control: with no device tier, all of it is host staging, above the budget. */
  set_policy(50, 0);
  CHECK_EQ(KREPLAY_DECLINE_HOST_BUDGET, snap_reason(agent, NULL));
  test_free(small);
  test_free(large);
  kreplay_staging_trim(agent);
  kreplay_device_trim(agent);
  configure(true, 1 * MIB, false);
}

static void a_percent_above_100_is_refused(void) {
  kreplay_policy_t policy;
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.host_budget_percent = 101;
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_set_policy(&policy));
  policy.host_budget_percent = 100;
  CHECK_OK(kreplay_set_policy(&policy));
}

static void without_the_op_the_operating_systems_figure_is_read(void) {
  const kreplay_agent_t agent = test_agent(0x4506);
  void* region = test_alloc(agent, 64 * KIB);
  configure(false, 0, false);
  set_policy(50, 0);
  /* Any Linux host has 128 KiB available; the op is not there to say otherwise. */
  CHECK_EQ(KREPLAY_DECLINE_NONE, snap_reason(agent, NULL));
  test_free(region);
  kreplay_staging_trim(agent);
  configure(true, 1 * MIB, false);
}

int main(void) {
  configure(true, 1 * MIB, false);
  RUN_TEST(a_capture_over_the_budget_declines_and_the_budget_follows_the_available_memory);
  RUN_TEST(staging_another_snapshot_holds_counts_against_the_budget);
  RUN_TEST(an_unreadable_figure_means_nothing_available);
  RUN_TEST(the_device_tier_spill_counts_and_device_storage_does_not);
  RUN_TEST(a_percent_above_100_is_refused);
  RUN_TEST(without_the_op_the_operating_systems_figure_is_read);
  return 0;
}
