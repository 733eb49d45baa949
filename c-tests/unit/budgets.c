/* Live device budgets through the C API on the simulated device: with device_budget_percent and the
 * device_free_bytes op, each capture holds at most that percent of the free device memory in device storage
 * and the rest in host staging; the smaller of the percent and device_budget_bytes wins; a failing query
 * keeps that capture on the host, complete; and a policy or a set of ops too short to carry the new fields
 * keeps the version-2 behaviour. Each test uses an agent of its own. */
#include "test_util.h"

#define KIB ((size_t)1024)
#define REGION (64 * KIB)
#define REGIONS 16
#define FOOTPRINT (REGIONS * REGION)

typedef struct footprint_t {
  kreplay_agent_t agent;
  void* ptrs[REGIONS];
} footprint_t;

static footprint_t footprint_make(uint64_t agent) {
  footprint_t f;
  size_t i;
  f.agent = test_agent(agent);
  for (i = 0; i < REGIONS; ++i) {
    f.ptrs[i] = test_alloc(f.agent, REGION);
    test_fill(f.ptrs[i], REGION, (unsigned)(agent + i));
  }
  return f;
}

static void footprint_free(footprint_t* f) {
  size_t i;
  for (i = 0; i < REGIONS; ++i) {
    test_free(f->ptrs[i]);
  }
  kreplay_device_trim(f->agent);
  kreplay_staging_trim(f->agent);
}

/* The simulated device with device storage and (when offered) the free-memory query, `free` bytes free. */
static void configure(bool offer_query, size_t free, size_t ops_size) {
  kreplay_sim_options_t options;
  kreplay_device_ops_t ops;
  memset(&options, 0, sizeof options);
  options.copy_batch = true;
  options.device_alloc = true;
  options.device_free_bytes = offer_query;
  options.free_bytes = free;
  kreplay_sim_set_options(&options);
  memset(&ops, 0, sizeof ops);
  CHECK_OK(kreplay_sim_device_ops(&ops));
  CHECK(offer_query == (ops.device_free_bytes != NULL));
  ops.struct_size = ops_size;
  CHECK_OK(kreplay_configure(&ops));
  kreplay_tracking_enable(true);
}

static kreplay_status_t set_policy(size_t budget_bytes, uint32_t percent, size_t struct_size) {
  kreplay_policy_t policy;
  memset(&policy, 0, sizeof policy);
  policy.struct_size = struct_size;
  policy.device_budget_bytes = budget_bytes;
  policy.device_budget_percent = percent;
  return kreplay_set_policy(&policy);
}

/* Captures, scribbles over every region, restores and checks each came back; returns the capture's info. */
static kreplay_snapshot_info_t round_trip(const footprint_t* f) {
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_HOST_BUDGET;
  kreplay_snapshot_info_t info;
  kreplay_restore_report_t report;
  size_t i;
  CHECK_OK(kreplay_snap(f->agent, &snapshot, &reason));
  CHECK_EQ(KREPLAY_DECLINE_NONE, reason);
  memset(&info, 0, sizeof info);
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  CHECK_EQ(REGIONS, info.regions);
  CHECK_EQ(FOOTPRINT, info.bytes);
  for (i = 0; i < REGIONS; ++i) {
    test_fill(f->ptrs[i], REGION, 0xEEu);
  }
  memset(&report, 0, sizeof report);
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK_EQ(REGIONS, report.restored);
  for (i = 0; i < REGIONS; ++i) {
    CHECK(test_has_pattern(f->ptrs[i], REGION, (unsigned)(f->agent.handle + i)));
  }
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(0, test_counters().violations);
  return info;
}

static void percent_50_holds_at_most_half_the_free_memory_on_the_device_and_spills_the_rest(void) {
  const size_t free = FOOTPRINT;
  footprint_t f;
  kreplay_snapshot_info_t info;
  int dispatch;
  configure(true, free, sizeof(kreplay_device_ops_t));
  f = footprint_make(0xB1);
  CHECK_OK(set_policy(0, 50, sizeof(kreplay_policy_t)));
  for (dispatch = 0; dispatch < 3; ++dispatch) {
    const size_t queries = test_counters().device_free_queries;
    info = round_trip(&f);
    CHECK(info.device_bytes > 0);
    CHECK(info.device_bytes <= free / 2);
    CHECK(info.bytes - info.device_bytes >= FOOTPRINT - free / 2);
    CHECK(kreplay_sim_device_bytes(f.agent) <= free / 2);
    CHECK_EQ(queries + 1, test_counters().device_free_queries);
  }
  CHECK(test_counters().device_peak_bytes <= free / 2);
  footprint_free(&f);
}

static void the_smaller_of_the_percent_and_device_budget_bytes_wins(void) {
  const size_t free = FOOTPRINT;
  footprint_t f;
  kreplay_snapshot_info_t info;
  configure(true, free, sizeof(kreplay_device_ops_t));
  f = footprint_make(0xB2);
  /* The fixed budget is the smaller. */
  CHECK_OK(set_policy(free / 4, 50, sizeof(kreplay_policy_t)));
  info = round_trip(&f);
  CHECK(info.device_bytes > 0 && info.device_bytes <= free / 4);
  CHECK(kreplay_sim_device_bytes(f.agent) <= free / 4);
  /* The percent is the smaller. */
  kreplay_device_trim(f.agent);
  CHECK_OK(set_policy(4 * free, 50, sizeof(kreplay_policy_t)));
  info = round_trip(&f);
  CHECK(info.device_bytes > free / 4 && info.device_bytes <= free / 2);
  CHECK(kreplay_sim_device_bytes(f.agent) <= free / 2);
  /* With no fixed budget and 100 percent of a device with room, everything goes to the device. */
  kreplay_device_trim(f.agent);
  CHECK_OK(set_policy(0, 100, sizeof(kreplay_policy_t)));
  CHECK_EQ(FOOTPRINT, round_trip(&f).device_bytes);
  footprint_free(&f);
}

static void a_failing_device_free_bytes_keeps_that_capture_complete_in_host_staging(void) {
  kreplay_sim_faults_t faults = test_no_faults();
  footprint_t f;
  kreplay_snapshot_info_t info;
  configure(true, 4 * FOOTPRINT, sizeof(kreplay_device_ops_t));
  f = footprint_make(0xB3);
  CHECK_OK(set_policy(4 * FOOTPRINT, 50, sizeof(kreplay_policy_t)));
  faults.fail_device_free_bytes = true;
  kreplay_sim_set_faults(&faults);
  test_log_capture(KREPLAY_LOG_INFO);
  info = round_trip(&f);
  CHECK_EQ(0, info.device_bytes);
  CHECK_EQ(0, kreplay_sim_device_bytes(f.agent));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_INFO, "free device memory could not be queried"));
  CHECK_EQ(0, test_log_count(KREPLAY_LOG_WARNING, NULL));
  test_log_stop();
  /* The next capture asks again. */
  test_disarm_faults();
  CHECK_EQ(FOOTPRINT, round_trip(&f).device_bytes);
  footprint_free(&f);
}

static void a_percent_above_100_is_invalid_argument_and_changes_nothing(void) {
  footprint_t f;
  configure(true, FOOTPRINT, sizeof(kreplay_device_ops_t));
  f = footprint_make(0xB4);
  CHECK_OK(set_policy(0, 25, sizeof(kreplay_policy_t)));
  test_log_capture(KREPLAY_LOG_WARNING);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, set_policy(0, 101, sizeof(kreplay_policy_t)));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "device_budget_percent"));
  test_log_stop();
  CHECK(round_trip(&f).device_bytes <= FOOTPRINT / 4);
  footprint_free(&f);
}

static void a_version_2_policy_or_set_of_ops_keeps_the_fixed_budget_alone(void) {
  footprint_t f;
  kreplay_snapshot_info_t info;
  size_t queries;
  configure(true, FOOTPRINT, sizeof(kreplay_device_ops_t));
  f = footprint_make(0xB5);
  /* The percent lies past the caller's struct_size: it takes its default, off. */
  CHECK_OK(set_policy(FOOTPRINT, 10, offsetof(kreplay_policy_t, untracked_decline_mask)));
  queries = test_counters().device_free_queries;
  info = round_trip(&f);
  CHECK_EQ(FOOTPRINT, info.device_bytes);
  CHECK_EQ(queries, test_counters().device_free_queries);
  /* The op lies past the ops' struct_size: the percent has nothing to work from. */
  kreplay_device_trim(f.agent);
  configure(true, FOOTPRINT, offsetof(kreplay_device_ops_t, device_free_bytes));
  CHECK_OK(set_policy(FOOTPRINT, 10, sizeof(kreplay_policy_t)));
  info = round_trip(&f);
  CHECK_EQ(FOOTPRINT, info.device_bytes);
  CHECK_EQ(queries, test_counters().device_free_queries);
  footprint_free(&f);
}

int main(void) {
  RUN_TEST(percent_50_holds_at_most_half_the_free_memory_on_the_device_and_spills_the_rest);
  RUN_TEST(the_smaller_of_the_percent_and_device_budget_bytes_wins);
  RUN_TEST(a_failing_device_free_bytes_keeps_that_capture_complete_in_host_staging);
  RUN_TEST(a_percent_above_100_is_invalid_argument_and_changes_nothing);
  RUN_TEST(a_version_2_policy_or_set_of_ops_keeps_the_fixed_budget_alone);
  return 0;
}
