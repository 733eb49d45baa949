/* Windows over several dispatches (issue 29, API version 4) on the simulated device: one snapshot before a range
 * of three dependent dispatches, restores between repetitions of the whole range, every repetition computing
 * what one run computes, the outcome and its line naming the range; a control without restores ends elsewhere;
 * the range gate's verdicts; a version-3 caller (no `dispatches` field) gets one dispatch. */
#include "test_util.h"

#define BLOCK 4096u
#define BYTES (4 * BLOCK)
#define PASSES 4

typedef struct buffers_t {
  kreplay_agent_t agent;
  unsigned char* input;   /* read by dispatch 1, overwritten by dispatch 3 */
  unsigned char* middle;  /* written by dispatch 1, read by dispatch 2 */
  unsigned char* output;  /* accumulated into by dispatch 2 */
} buffers_t;

static buffers_t buffers_new(uint64_t agent) {
  buffers_t b;
  b.agent = test_agent(agent);
  b.input = (unsigned char*)test_alloc(b.agent, BYTES);
  b.middle = (unsigned char*)test_alloc(b.agent, BYTES);
  b.output = (unsigned char*)test_alloc(b.agent, BYTES);
  test_fill(b.input, BYTES, 3);
  memset(b.middle, 0, BYTES);
  test_fill(b.output, BYTES, 5);
  return b;
}

static void buffers_free(buffers_t* b) {
  test_free(b->input);
  test_free(b->middle);
  test_free(b->output);
  kreplay_staging_trim(b->agent);
}

/* The range: dispatch 1 writes blocks 0 and 1 of `middle` from blocks 0 and 1 of `input`; dispatch 2 adds
 * middle's block 0 into block 2 of `output` (a block only it writes); dispatch 3 changes input's block 1, which
 * dispatch 1 reads. So 4 of the 12 blocks change, and a repetition that starts from anything but the snapshot
 * computes something else. */
static void run_range(const buffers_t* b) {
  size_t i;
  for (i = 0; i < 2 * BLOCK; ++i) {
    b->middle[i] = (unsigned char)(b->input[i] * 3u + 1u);
  }
  for (i = 0; i < BLOCK; i += 7) {
    b->output[2 * BLOCK + i] = (unsigned char)(b->output[2 * BLOCK + i] + b->middle[i] + 1u);
  }
  for (i = BLOCK; i < 2 * BLOCK; i += 512) {
    b->input[i] ^= 0xa5;
  }
}

/* What one run of the range leaves, computed on a host copy of the same starting state. */
static void expected_after_one_run(const buffers_t* b, unsigned char* input, unsigned char* middle,
                                   unsigned char* output) {
  buffers_t copy = *b;
  memcpy(input, b->input, BYTES);
  memcpy(middle, b->middle, BYTES);
  memcpy(output, b->output, BYTES);
  copy.input = input;
  copy.middle = middle;
  copy.output = output;
  run_range(&copy);
}

static bool equals_expected(const buffers_t* b, const unsigned char* input, const unsigned char* middle,
                            const unsigned char* output) {
  return memcmp(b->input, input, BYTES) == 0 && memcmp(b->middle, middle, BYTES) == 0 &&
         memcmp(b->output, output, BYTES) == 0;
}

static kreplay_window_t* open_range(kreplay_agent_t agent, uint32_t passes, uint32_t dispatches) {
  kreplay_window_options_t options;
  kreplay_window_t* window = NULL;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_HOST_BUDGET;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.passes = passes;
  options.dispatches = dispatches;
  CHECK_OK(kreplay_window_open(agent, &options, &window, &reason));
  CHECK(window != NULL);
  CHECK_EQ(KREPLAY_DECLINE_NONE, reason);
  return window;
}

static kreplay_window_outcome_t close_range(kreplay_window_t* window) {
  kreplay_window_outcome_t outcome;
  memset(&outcome, 0, sizeof outcome);
  outcome.struct_size = sizeof outcome;
  CHECK_OK(kreplay_window_close(window, &outcome));
  return outcome;
}

/* Runs PASSES repetitions of the range in a window over its three dispatches, restoring between them when
 * `restore` (the last restore a full check); returns how many repetitions ended exactly as one run does. */
static int repetitions_equal_to_one_run(uint64_t agent_handle, bool restore, kreplay_window_outcome_t* outcome) {
  static unsigned char input[BYTES], middle[BYTES], output[BYTES];
  buffers_t b = buffers_new(agent_handle);
  kreplay_policy_t policy = test_policy();
  kreplay_snapshot_t* snapshot = NULL;
  kreplay_window_t* window;
  int pass, exact = 0;
  policy.dirty_only = true;
  policy.digest_block_bytes = BLOCK;
  policy.learn_write_set = true;
  CHECK_OK(kreplay_set_policy(&policy));
  expected_after_one_run(&b, input, middle, output);

  window = open_range(b.agent, PASSES, 3);
  CHECK_OK(kreplay_snap(b.agent, &snapshot, NULL));
  for (pass = 1; pass <= PASSES; ++pass) {
    if (pass > 1 && restore) {
      kreplay_restore_options_t options;
      kreplay_restore_report_ex_t report;
      memset(&options, 0, sizeof options);
      options.struct_size = sizeof options;
      options.flags = pass == PASSES ? KREPLAY_RESTORE_FULL_CHECK : 0;
      memset(&report, 0, sizeof report);
      report.struct_size = sizeof report;
      CHECK_OK(kreplay_restore_ex(snapshot, &options, &report));
    }
    run_range(&b);
    exact += equals_expected(&b, input, middle, output) ? 1 : 0;
  }
  *outcome = close_range(window);
  kreplay_snapshot_free(snapshot);
  buffers_free(&b);
  return exact;
}

static void test_every_repetition_of_a_range_computes_what_one_run_does(void) {
  kreplay_window_outcome_t outcome;
  char needle[64];
  test_log_capture(KREPLAY_LOG_INFO);
  CHECK_EQ(PASSES, repetitions_equal_to_one_run(0x2901, true, &outcome));
  CHECK_EQ(KREPLAY_DECLINE_NONE, outcome.reason);
  CHECK_EQ(PASSES, outcome.passes_run);
  CHECK_EQ(3, outcome.dispatches);
  CHECK_EQ(3 * BYTES, outcome.footprint_bytes);
  CHECK_EQ(0, outcome.write_set_misses);
  /* The first restore and the last (the full check) digest all 12 blocks; the one between only the 4 blocks the
   * range's three dispatches wrote together (their union: the learned write set). */
  CHECK_EQ((12 + 4 + 12) * (size_t)BLOCK, outcome.digested_bytes);
  snprintf(needle, sizeof needle, "passes=%u/%u", PASSES, PASSES);
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_INFO, needle));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_INFO, "miss_pass=0 dispatches=3"));
  test_log_stop();
}

/* The control: the same range without restores ends right only on its first repetition. */
static void test_a_control_without_restores_computes_something_else(void) {
  kreplay_window_outcome_t outcome;
  CHECK_EQ(1, repetitions_equal_to_one_run(0x2902, false, &outcome));
  CHECK_EQ(1, outcome.passes_run);
  CHECK_EQ(3, outcome.dispatches);
}

/* A version-3 caller's options end before `dispatches`: its window covers one dispatch. */
static void test_a_version_3_caller_gets_one_dispatch(void) {
  kreplay_agent_t agent = test_agent(0x2903);
  kreplay_window_options_t options;
  kreplay_window_t* window = NULL;
  kreplay_window_outcome_t outcome;
  memset(&options, 0, sizeof options);
  options.struct_size = offsetof(kreplay_window_options_t, copy_timeout_ms) + sizeof(uint32_t);
  options.passes = 2;
  options.dispatches = 7; /* beyond the caller's struct_size: never read */
  CHECK_OK(kreplay_window_open(agent, &options, &window, NULL));
  outcome = close_range(window);
  CHECK_EQ(1, outcome.dispatches);
  window = open_range(agent, 2, 0);
  outcome = close_range(window);
  CHECK_EQ(1, outcome.dispatches);
}

static void test_the_range_gate_replays_multi_packet_submissions_that_dispatch(void) {
  CHECK_EQ(KREPLAY_GATE_REPLAY, kreplay_replay_gate_range(1, 1, false));
  CHECK_EQ(KREPLAY_GATE_REPLAY_RANGE, kreplay_replay_gate_range(4, 3, false));
  CHECK_EQ(KREPLAY_GATE_NOT_A_DISPATCH, kreplay_replay_gate_range(4, 0, false));
  CHECK_EQ(KREPLAY_GATE_MULTI_PACKET, kreplay_replay_gate_range(0, 0, false));
  CHECK_EQ(KREPLAY_GATE_GRAPH_LAUNCH, kreplay_replay_gate_range(4, 3, true));
  /* A version-3 host's gate is unchanged. */
  CHECK_EQ(KREPLAY_GATE_MULTI_PACKET, kreplay_replay_gate(4, 3, false));
}

int main(void) {
  test_configure_sim_digesting();
  RUN_TEST(test_every_repetition_of_a_range_computes_what_one_run_does);
  RUN_TEST(test_a_control_without_restores_computes_something_else);
  RUN_TEST(test_a_version_3_caller_gets_one_dispatch);
  RUN_TEST(test_the_range_gate_replays_multi_packet_submissions_that_dispatch);
  return 0;
}
