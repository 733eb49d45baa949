/* The replay window (issue 20) on the simulated device: the async-copy fence, declines at open, the outcome
 * record and its log line, untracked memory by kind, admission, and every INVALID_ARGUMENT case of API.md.
 * One process: the first test must run before any window is opened (the fence is armed for good by the first
 * one). Each test uses agents of its own. */
#include "test_util.h"

#include <time.h>

static kreplay_window_options_t window_options(uint32_t passes, uint32_t copy_timeout_ms) {
  kreplay_window_options_t options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.passes = passes;
  options.copy_timeout_ms = copy_timeout_ms;
  return options;
}

static kreplay_window_outcome_t empty_outcome(void) {
  kreplay_window_outcome_t outcome;
  memset(&outcome, 0, sizeof outcome);
  outcome.struct_size = sizeof outcome;
  return outcome;
}

static kreplay_window_t* open_window(kreplay_agent_t agent, uint32_t passes) {
  kreplay_window_options_t options = window_options(passes, 0);
  kreplay_window_t* window = NULL;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_HOST_BUDGET;
  CHECK_OK(kreplay_window_open(agent, &options, &window, &reason));
  CHECK(window != NULL);
  CHECK_EQ(KREPLAY_DECLINE_NONE, reason);
  return window;
}

static kreplay_window_outcome_t close_window(kreplay_window_t* window) {
  kreplay_window_outcome_t outcome = empty_outcome();
  CHECK_OK(kreplay_window_close(window, &outcome));
  return outcome;
}

/* Opens a window that must decline, and returns the reason. */
static kreplay_decline_reason_t declined_open(kreplay_agent_t agent, uint32_t passes, uint32_t copy_timeout_ms) {
  kreplay_window_options_t options = window_options(passes, copy_timeout_ms);
  kreplay_window_t* window = (kreplay_window_t*)&options;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_window_open(agent, &options, &window, &reason));
  CHECK(window == NULL);
  return reason;
}

static uint64_t copy_begin(kreplay_agent_t agent) {
  uint64_t token = 0;
  CHECK_OK(kreplay_copy_begin(&agent, 1, &token));
  return token;
}

static void sleep_ms(long ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The log line of the last window of `agent`, at `level`, copied into `out`; false when there is none. */
static bool find_outcome_line(int level, uint64_t agent, char* out, size_t out_size) {
  char prefix[64];
  size_t i;
  bool found = false;
  snprintf(prefix, sizeof prefix, "kreplay window agent=0x%llx ", (unsigned long long)agent);
  pthread_mutex_lock(&test_log_lock);
  for (i = 0; i < test_log_total && i < TEST_LOG_MAX_LINES; ++i) {
    if ((int)test_log_lines[i].level == level && strncmp(test_log_lines[i].text, prefix, strlen(prefix)) == 0) {
      snprintf(out, out_size, "%s", test_log_lines[i].text);
      found = true;
    }
  }
  pthread_mutex_unlock(&test_log_lock);
  return found;
}

/* ---- The fence ------------------------------------------------------------------------------------------- */

static void test_before_any_window_a_copy_is_not_counted(void) {
  kreplay_agent_t agent = test_agent(0x100);
  uint64_t token = 99;
  CHECK_OK(kreplay_copy_begin(&agent, 1, &token));
  CHECK_EQ(0, token);
  test_log_capture(KREPLAY_LOG_TRACE);
  kreplay_copy_end(token);
  CHECK_EQ(0, test_log_count(-1, NULL));
  test_log_stop();
}

static void test_a_copy_in_flight_makes_open_decline_after_its_timeout_and_later_copies_go_through(void) {
  kreplay_agent_t agent = test_agent(0x200);
  uint64_t stuck, later;
  double start;
  /* Arm the fence (the first window), then start a copy that never ends on its own. */
  close_window(open_window(agent, 1));
  stuck = copy_begin(agent);
  CHECK(stuck != 0);
  test_log_capture(KREPLAY_LOG_WARNING);
  start = now_ms();
  CHECK_EQ(KREPLAY_DECLINE_COPIES_IN_FLIGHT, declined_open(agent, 2, 40));
  CHECK(now_ms() - start >= 39.0);
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "reason=copies_in_flight"));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "copies_waited=1 "));
  test_log_stop();
  /* Nothing is left fenced: another copy of the agent goes straight through, and ends. */
  later = copy_begin(agent);
  kreplay_copy_end(later);
  kreplay_copy_end(stuck);
  close_window(open_window(agent, 1));
}

typedef struct copier_t {
  kreplay_agent_t agents[2];
  size_t count;
  long end_after_ms; /* for a copy begun before the thread starts: end it after this long */
  uint64_t token;
  volatile int began;
} copier_t;

static void* copy_in_thread(void* arg) {
  copier_t* copier = (copier_t*)arg;
  uint64_t token = 0;
  CHECK_OK(kreplay_copy_begin(copier->agents, copier->count, &token));
  __atomic_store_n(&copier->began, 1, __ATOMIC_SEQ_CST);
  kreplay_copy_end(token);
  return NULL;
}

static void* end_copy_later(void* arg) {
  copier_t* copier = (copier_t*)arg;
  sleep_ms(copier->end_after_ms);
  kreplay_copy_end(copier->token);
  return NULL;
}

static void test_a_copy_in_flight_holds_the_window_until_it_ends(void) {
  kreplay_agent_t agent = test_agent(0x300);
  copier_t copier;
  pthread_t thread;
  kreplay_window_options_t options = window_options(1, 5000);
  kreplay_window_t* window = NULL;
  kreplay_window_outcome_t outcome;
  double start;
  memset(&copier, 0, sizeof copier);
  copier.token = copy_begin(agent);
  copier.end_after_ms = 50;
  CHECK(pthread_create(&thread, NULL, end_copy_later, &copier) == 0);
  start = now_ms();
  CHECK_OK(kreplay_window_open(agent, &options, &window, NULL));
  CHECK(now_ms() - start >= 40.0);
  CHECK(pthread_join(thread, NULL) == 0);
  outcome = close_window(window);
  CHECK_EQ(1, outcome.copies_waited);
  CHECK_EQ(KREPLAY_DECLINE_NONE, outcome.reason);
}

static void test_a_copy_begun_during_a_window_waits_and_runs_after_close(void) {
  kreplay_agent_t agent = test_agent(0x400);
  kreplay_window_t* window = open_window(agent, 2);
  copier_t copier;
  pthread_t thread;
  memset(&copier, 0, sizeof copier);
  copier.agents[0] = test_agent(0x401);
  copier.agents[1] = agent;
  copier.count = 2;
  CHECK(pthread_create(&thread, NULL, copy_in_thread, &copier) == 0);
  sleep_ms(60);
  CHECK(__atomic_load_n(&copier.began, __ATOMIC_SEQ_CST) == 0);
  close_window(window);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(copier.began == 1);
}

static void test_the_window_threads_own_copies_never_wait(void) {
  kreplay_agent_t agent = test_agent(0x500);
  kreplay_window_t* window = open_window(agent, 2);
  uint64_t token = copy_begin(agent);
  CHECK(token != 0);
  kreplay_copy_end(token);
  close_window(window);
}

static void test_a_token_ended_twice_or_never_issued_is_ignored_and_logged(void) {
  kreplay_agent_t agent = test_agent(0x600);
  uint64_t token = copy_begin(agent);
  uint64_t held = copy_begin(agent);
  kreplay_copy_end(token);
  test_log_capture(KREPLAY_LOG_WARNING);
  kreplay_copy_end(token);
  kreplay_copy_end(0xFFFFFFFFFFFFull);
  CHECK_EQ(2, test_log_count(KREPLAY_LOG_WARNING, "no copy in flight has this token"));
  test_log_stop();
  /* The copy still held keeps the window out; ending it lets the window in. */
  CHECK_EQ(KREPLAY_DECLINE_COPIES_IN_FLIGHT, declined_open(agent, 1, 10));
  kreplay_copy_end(held);
  close_window(open_window(agent, 1));
}

/* ---- Windows --------------------------------------------------------------------------------------------- */

static void test_a_nested_window_is_declined_and_two_agents_from_one_thread_are_allowed(void) {
  kreplay_agent_t a = test_agent(0x700), b = test_agent(0x701);
  kreplay_window_t* first = open_window(a, 2);
  kreplay_window_t* other;
  double start = now_ms();
  CHECK_EQ(KREPLAY_DECLINE_WINDOW_NESTED, declined_open(a, 2, 5000));
  CHECK(now_ms() - start < 1000.0);
  other = open_window(b, 2);
  CHECK_EQ(b.handle, close_window(other).agent.handle);
  CHECK_EQ(a.handle, close_window(first).agent.handle);
}

static void test_the_outcome_counts_the_windows_snapshot_and_restores_and_its_line_parses(void) {
  kreplay_agent_t agent = test_agent(0x800);
  void* region = test_alloc(agent, 4096);
  void* other = test_alloc(agent, 8192);
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_window_t* window;
  kreplay_window_outcome_t outcome;
  kreplay_restore_report_t report;
  char line[TEST_LOG_LINE_BYTES];
  char reason[32], untracked[200];
  unsigned long long handle = 0, footprint = 0, moved = 0, clean = 0, snapshot_us = 0, restore_us = 0;
  unsigned long long projected_us = 0, waited = 0;
  unsigned run = 0, requested = 0, reentry = 9;
  int i;
  test_log_capture(KREPLAY_LOG_INFO);
  window = open_window(agent, 3);
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  for (i = 0; i < 2; ++i) {
    test_fill(region, 4096, (unsigned)i + 7);
    CHECK_OK(kreplay_restore(snapshot, &report));
  }
  kreplay_window_note_reentry(agent);
  outcome = close_window(window);
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(sizeof outcome, outcome.struct_size);
  CHECK_EQ(agent.handle, outcome.agent.handle);
  CHECK_EQ(KREPLAY_DECLINE_NONE, outcome.reason);
  CHECK_EQ(3, outcome.passes_requested);
  CHECK_EQ(3, outcome.passes_run);
  CHECK_EQ(4096 + 8192, outcome.footprint_bytes);
  CHECK_EQ(2, outcome.footprint_regions);
  CHECK_EQ(3 * (4096 + 8192), outcome.bytes_moved);
  CHECK_EQ(0, outcome.clean_bytes);
  CHECK(outcome.projected_ns > 0);
  CHECK(outcome.reentry_observed);

  CHECK(find_outcome_line(KREPLAY_LOG_INFO, agent.handle, line, sizeof line));
  CHECK_EQ(13, sscanf(line,
                      "kreplay window agent=0x%llx reason=%31s passes=%u/%u footprint=%llu moved=%llu clean=%llu "
                      "snapshot_us=%llu restore_us=%llu projected_us=%llu copies_waited=%llu untracked=%199s "
                      "reentry=%u",
                      &handle, reason, &run, &requested, &footprint, &moved, &clean, &snapshot_us, &restore_us,
                      &projected_us, &waited, untracked, &reentry));
  CHECK_EQ(agent.handle, handle);
  CHECK(strcmp(reason, "none") == 0);
  CHECK_EQ(3, run);
  CHECK_EQ(3, requested);
  CHECK_EQ(outcome.footprint_bytes, footprint);
  CHECK_EQ(outcome.bytes_moved, moved);
  CHECK_EQ(outcome.projected_ns / 1000, projected_us);
  CHECK_EQ(outcome.snapshot_ns / 1000, snapshot_us);
  CHECK_EQ(outcome.restore_ns / 1000, restore_us);
  CHECK_EQ(1, reentry);
  CHECK(strncmp(untracked, "fine:", 5) == 0 && strstr(untracked, ",host:") && strstr(untracked, ",managed:") &&
        strstr(untracked, ",kernarg:") && strstr(untracked, ",exec:") && strstr(untracked, ",vmem:"));
  test_log_stop();
  test_free(region);
  test_free(other);
}

static void test_a_failed_snapshot_leaves_the_window_open_with_its_reason(void) {
  kreplay_agent_t agent = test_agent(0x900);
  void* region = test_alloc(agent, 4096);
  kreplay_policy_t policy;
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  kreplay_window_t* window;
  kreplay_window_outcome_t outcome;
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.max_snapshot_bytes = 16;
  CHECK_OK(kreplay_set_policy(&policy));
  window = open_window(agent, 4);
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(agent, &snapshot, &reason));
  CHECK_EQ(KREPLAY_DECLINE_HOST_BUDGET, reason);
  test_log_capture(KREPLAY_LOG_WARNING);
  outcome = close_window(window);
  CHECK_EQ(KREPLAY_DECLINE_HOST_BUDGET, outcome.reason);
  CHECK_EQ(1, outcome.passes_run);
  CHECK_EQ(0, outcome.footprint_bytes);
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "reason=host_budget passes=1/4 "));
  test_log_stop();
  policy.max_snapshot_bytes = 0;
  CHECK_OK(kreplay_set_policy(&policy));
  test_free(region);
}

/* ---- Untracked memory and admission ---------------------------------------------------------------------- */

static void* sim_memory(kreplay_agent_t agent, size_t size, kreplay_pointer_type_t type, uint32_t flags) {
  void* ptr = NULL;
  CHECK_OK(kreplay_sim_alloc(agent, size, type, flags, &ptr));
  return ptr;
}

static void test_untracked_memory_is_counted_per_kind_until_freed(void) {
  kreplay_agent_t agent = test_agent(0xA00);
  kreplay_untracked_t stats, other;
  void* fine = sim_memory(agent, 100, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_FINE_GRAINED);
  void* host = sim_memory(agent, 8192, KREPLAY_POINTER_LOCKED, KREPLAY_GLOBAL_FLAG_FINE_GRAINED);
  void* managed = sim_memory(agent, 3000, KREPLAY_POINTER_MANAGED, KREPLAY_GLOBAL_FLAG_FINE_GRAINED);
  void* kernarg = sim_memory(agent, 256, KREPLAY_POINTER_DEVICE,
                             KREPLAY_GLOBAL_FLAG_KERNARG | KREPLAY_GLOBAL_FLAG_FINE_GRAINED);
  void* code = sim_memory(agent, 512, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED);
  void* tracked = test_alloc(agent, 64);
  void* mapping = (void*)(uintptr_t)0x7a0000000000ull;
  void* ptrs[5];
  size_t i;
  ptrs[0] = fine, ptrs[1] = host, ptrs[2] = managed, ptrs[3] = kernarg, ptrs[4] = code;
  CHECK_OK(kreplay_record_alloc(fine, 100, 0));
  CHECK_OK(kreplay_record_alloc(host, 8192, 0));
  CHECK_OK(kreplay_record_alloc(managed, 3000, 0));
  CHECK_OK(kreplay_record_alloc(kernarg, 256, 0));
  CHECK_OK(kreplay_record_alloc(code, 512, KREPLAY_ALLOC_FLAG_EXECUTABLE));
  CHECK_OK(kreplay_record_vmem_map_unknown_owner(mapping, 1 << 20));
  CHECK_OK(kreplay_untracked_stats(agent, &stats));
  CHECK_EQ(1, stats.count[KREPLAY_UNTRACKED_FINE_GRAINED]);
  CHECK_EQ(100, stats.bytes[KREPLAY_UNTRACKED_FINE_GRAINED]);
  CHECK_EQ(1, stats.count[KREPLAY_UNTRACKED_HOST]);
  CHECK_EQ(8192, stats.bytes[KREPLAY_UNTRACKED_HOST]);
  CHECK_EQ(1, stats.count[KREPLAY_UNTRACKED_MANAGED]);
  CHECK_EQ(3000, stats.bytes[KREPLAY_UNTRACKED_MANAGED]);
  CHECK_EQ(1, stats.count[KREPLAY_UNTRACKED_KERNARG]);
  CHECK_EQ(256, stats.bytes[KREPLAY_UNTRACKED_KERNARG]);
  CHECK_EQ(1, stats.count[KREPLAY_UNTRACKED_EXECUTABLE]);
  CHECK_EQ(512, stats.bytes[KREPLAY_UNTRACKED_EXECUTABLE]);
  CHECK_EQ(1, stats.count[KREPLAY_UNTRACKED_VMEM_UNKNOWN]);
  CHECK_EQ(1 << 20, stats.bytes[KREPLAY_UNTRACKED_VMEM_UNKNOWN]);
  /* Another agent sees only what has no known owner. */
  CHECK_OK(kreplay_untracked_stats(test_agent(0xA01), &other));
  CHECK_EQ(0, other.count[KREPLAY_UNTRACKED_HOST]);
  CHECK_EQ(1, other.count[KREPLAY_UNTRACKED_EXECUTABLE]);
  CHECK_EQ(1, other.count[KREPLAY_UNTRACKED_VMEM_UNKNOWN]);
  /* Frees of untracked memory are still NOT_FOUND, and take it out of the count. */
  for (i = 0; i < 5; ++i) {
    CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free(ptrs[i]));
    CHECK_OK(kreplay_sim_free(ptrs[i]));
  }
  CHECK_OK(kreplay_record_vmem_unmap(mapping, 1 << 20));
  CHECK_OK(kreplay_untracked_stats(agent, &stats));
  for (i = 0; i < KREPLAY_UNTRACKED_KIND_COUNT; ++i) {
    CHECK_EQ(0, stats.count[i]);
    CHECK_EQ(0, stats.bytes[i]);
  }
  test_free(tracked);
}

static void test_untracked_memory_of_a_declined_kind_declines_the_window(void) {
  kreplay_agent_t agent = test_agent(0xB00);
  void* host = sim_memory(agent, 4096, KREPLAY_POINTER_LOCKED, KREPLAY_GLOBAL_FLAG_FINE_GRAINED);
  kreplay_policy_t policy;
  CHECK_OK(kreplay_record_alloc(host, 4096, 0));
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.untracked_decline_mask = 1u << KREPLAY_UNTRACKED_MANAGED;
  CHECK_OK(kreplay_set_policy(&policy));
  close_window(open_window(agent, 2)); /* host memory is not a declined kind */
  policy.untracked_decline_mask = 1u << KREPLAY_UNTRACKED_HOST;
  CHECK_OK(kreplay_set_policy(&policy));
  test_log_capture(KREPLAY_LOG_WARNING);
  CHECK_EQ(KREPLAY_DECLINE_UNTRACKED_MEMORY, declined_open(agent, 2, 0));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "reason=untracked_memory "));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, ",host:1/4096,"));
  test_log_stop();
  policy.untracked_decline_mask = 1u << KREPLAY_UNTRACKED_KIND_COUNT;
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_set_policy(&policy));
  policy.untracked_decline_mask = 0;
  CHECK_OK(kreplay_set_policy(&policy));
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_record_free(host));
  CHECK_OK(kreplay_sim_free(host));
}

static void test_admission_warns_above_warn_window_ns_and_declines_above_max_window_ns(void) {
  kreplay_agent_t agent = test_agent(0xC00);
  void* region = test_alloc(agent, 1 << 20);
  kreplay_policy_t policy;
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  policy.warn_window_ns = 1;
  CHECK_OK(kreplay_set_policy(&policy));
  test_log_capture(KREPLAY_LOG_WARNING);
  close_window(open_window(agent, 5));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "above warn_window_ns"));
  CHECK_EQ(0, test_log_count(KREPLAY_LOG_WARNING, "kreplay window "));
  policy.warn_window_ns = 0;
  policy.max_window_ns = 1;
  CHECK_OK(kreplay_set_policy(&policy));
  test_log_clear();
  CHECK_EQ(KREPLAY_DECLINE_OVER_COST, declined_open(agent, 5, 0));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "reason=over_cost "));
  CHECK_EQ(0, test_log_count(KREPLAY_LOG_WARNING, "above warn_window_ns"));
  test_log_stop();
  policy.max_window_ns = 0;
  CHECK_OK(kreplay_set_policy(&policy));
  test_free(region);
}

/* Version 4: passes 0 is an open-ended window (it was INVALID_ARGUMENT in version 3). */
static void test_an_open_ended_window_is_checked_per_pass_and_warned_about_once_per_limit(void) {
  kreplay_agent_t agent = test_agent(0xC80);
  void* region = test_alloc(agent, 64 * 1024);
  kreplay_window_t* window;
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_window_outcome_t outcome;
  kreplay_policy_t policy;
  char line[TEST_LOG_LINE_BYTES];
  int pass;
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  CHECK_OK(kreplay_set_policy(&policy));
  test_log_capture(KREPLAY_LOG_INFO);
  window = open_window(agent, 0); /* admitted on its first pass, the snapshot */
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  CHECK_OK(kreplay_restore(snapshot, NULL));
  CHECK_EQ(0, test_log_count(KREPLAY_LOG_WARNING, "open-ended window projected"));
  /* Limits lowered while it runs: each further pass is checked against them, each crossing warned about
   * once; an open window is never declined, so every restore still runs. */
  policy.warn_window_ns = 1;
  CHECK_OK(kreplay_set_policy(&policy));
  for (pass = 0; pass < 2; ++pass) {
    CHECK_OK(kreplay_restore(snapshot, NULL));
  }
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "open-ended window projected"));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "above warn_window_ns"));
  policy.max_window_ns = 1;
  CHECK_OK(kreplay_set_policy(&policy));
  for (pass = 0; pass < 2; ++pass) {
    CHECK_OK(kreplay_restore(snapshot, NULL));
  }
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "above max_window_ns"));
  CHECK_EQ(2, test_log_count(KREPLAY_LOG_WARNING, "open-ended window projected"));
  outcome = close_window(window);
  kreplay_snapshot_free(snapshot);
  CHECK_EQ(KREPLAY_DECLINE_NONE, outcome.reason);
  CHECK_EQ(0, outcome.passes_requested);
  CHECK_EQ(6, outcome.passes_run);
  CHECK(outcome.projected_ns >= outcome.snapshot_ns + outcome.restore_ns);
  CHECK(find_outcome_line(KREPLAY_LOG_INFO, agent.handle, line, sizeof line));
  CHECK(strstr(line, " passes=6/open ") != NULL);
  /* Control: a window with a known count still reports it as a number. */
  memset(&policy, 0, sizeof policy);
  policy.struct_size = sizeof policy;
  CHECK_OK(kreplay_set_policy(&policy));
  close_window(open_window(agent, 3));
  CHECK(find_outcome_line(KREPLAY_LOG_INFO, agent.handle, line, sizeof line));
  CHECK(strstr(line, " passes=1/3 ") != NULL);
  test_log_stop();
  test_free(region);
  kreplay_staging_trim(agent);
}

/* ---- Bad input ------------------------------------------------------------------------------------------- */

static void test_every_invalid_argument_of_the_contract_changes_nothing(void) {
  kreplay_agent_t agent = test_agent(0xD00);
  kreplay_window_options_t options = window_options(2, 0);
  kreplay_window_t* window = NULL;
  kreplay_window_t* open;
  kreplay_window_outcome_t outcome = empty_outcome();
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  uint64_t token = 77;
  int local = 0;
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_window_open(agent, NULL, &window, &reason));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_window_open(agent, &options, NULL, &reason));
  options.struct_size = sizeof(size_t) + sizeof(uint32_t);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_window_open(agent, &options, &window, &reason));
  CHECK(window == NULL);
  CHECK_EQ(KREPLAY_DECLINE_NONE, reason);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_copy_begin(NULL, 1, &token));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_copy_begin(&agent, 0, &token));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_copy_begin(&agent, 1, NULL));
  CHECK_EQ(77, token);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_window_close(NULL, &outcome));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_window_close((kreplay_window_t*)&local, &outcome));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_window_close((kreplay_window_t*)(uintptr_t)0x1234, NULL));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_untracked_stats(agent, NULL));
  /* Nothing was fenced: the agent's window opens. An older, shorter outcome still closes the window and gets only
   * the fields it has; a double close is refused; an outcome too short to hold struct_size closes the window and
   * is not written. */
  open = open_window(agent, 1);
  CHECK_EQ(KREPLAY_DECLINE_WINDOW_NESTED, declined_open(agent, 1, 0));
  memset(&outcome, 0x5a, sizeof outcome);
  outcome.struct_size = offsetof(kreplay_window_outcome_t, passes_requested);
  CHECK_OK(kreplay_window_close(open, &outcome));
  CHECK_EQ(offsetof(kreplay_window_outcome_t, passes_requested), outcome.struct_size);
  CHECK_EQ(agent.handle, outcome.agent.handle);
  CHECK_EQ(0x5a5a5a5au, outcome.passes_requested);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_window_close(open, NULL));
  open = open_window(agent, 1);
  outcome.struct_size = 4;
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_window_close(open, &outcome));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_window_close(open, NULL));
  /* reason_out may be NULL. */
  options = window_options(1, 0);
  CHECK_OK(kreplay_window_open(agent, &options, &window, NULL));
  close_window(window);
}

int main(void) {
  test_configure_sim();
  RUN_TEST(test_before_any_window_a_copy_is_not_counted);
  RUN_TEST(test_a_copy_in_flight_makes_open_decline_after_its_timeout_and_later_copies_go_through);
  RUN_TEST(test_a_copy_in_flight_holds_the_window_until_it_ends);
  RUN_TEST(test_a_copy_begun_during_a_window_waits_and_runs_after_close);
  RUN_TEST(test_the_window_threads_own_copies_never_wait);
  RUN_TEST(test_a_token_ended_twice_or_never_issued_is_ignored_and_logged);
  RUN_TEST(test_a_nested_window_is_declined_and_two_agents_from_one_thread_are_allowed);
  RUN_TEST(test_the_outcome_counts_the_windows_snapshot_and_restores_and_its_line_parses);
  RUN_TEST(test_a_failed_snapshot_leaves_the_window_open_with_its_reason);
  RUN_TEST(test_untracked_memory_is_counted_per_kind_until_freed);
  RUN_TEST(test_untracked_memory_of_a_declined_kind_declines_the_window);
  RUN_TEST(test_admission_warns_above_warn_window_ns_and_declines_above_max_window_ns);
  RUN_TEST(test_an_open_ended_window_is_checked_per_pass_and_warned_about_once_per_limit);
  RUN_TEST(test_every_invalid_argument_of_the_contract_changes_nothing);
  return 0;
}
