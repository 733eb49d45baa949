/* Learned write sets under threads: one thread hints writes into a snapshot's write set while another
 * restores it (partial restores and full checks) and runs the "kernel" between restores. The write set is
 * shared state of the snapshot, behind its mutex; ThreadSanitizer runs this (label `concurrency`). After the
 * last restore, a full check, the footprint equals the snapshot whatever the hints did. */
#include "test_util.h"

#include <sched.h>

enum { BLOCK = 4096, REGIONS = 8, REGION_BYTES = 4 * BLOCK, RESTORES = 200, HINTS = 400 };

static unsigned char* regions[REGIONS];
static kreplay_snapshot_t* snapshot;

static void* hint_writes(void* arg) {
  int i;
  (void)arg;
  for (i = 0; i < HINTS; ++i) {
    kreplay_write_hint_t hint;
    kreplay_snapshot_info_t info;
    hint.address = regions[i % REGIONS] + (size_t)(i % 4) * BLOCK + 7;
    hint.bytes = (i % 5 == 0) ? 0 : 1;
    CHECK_OK(kreplay_snapshot_hint_writes(snapshot, &hint, 1, NULL));
    CHECK_OK(kreplay_snapshot_info(snapshot, &info));
    CHECK_EQ(REGIONS, info.regions);
    sched_yield();
  }
  return NULL;
}

static void a_hinting_thread_and_a_restoring_thread_leave_the_footprint_exact(void) {
  const kreplay_agent_t agent = test_agent(0x2790);
  kreplay_policy_t policy = test_policy();
  pthread_t hinter;
  int i;
  int partial_restores = 0;
  policy.dirty_only = true;
  policy.digest_block_bytes = BLOCK;
  policy.learn_write_set = true;
  CHECK_OK(kreplay_set_policy(&policy));
  for (i = 0; i < REGIONS; ++i) {
    regions[i] = (unsigned char*)test_alloc(agent, REGION_BYTES);
    test_fill(regions[i], REGION_BYTES, (unsigned)i + 1);
  }
  CHECK_OK(kreplay_snap(agent, &snapshot, NULL));
  CHECK(pthread_create(&hinter, NULL, hint_writes, NULL) == 0);
  for (i = 0; i < RESTORES; ++i) {
    kreplay_restore_options_t options;
    kreplay_restore_report_ex_t report;
    /* The kernel: the same block every pass, and now and then one elsewhere. */
    memset(regions[0] + BLOCK, (unsigned char)i, 64);
    if (i % 7 == 3) {
      memset(regions[(i / 7) % REGIONS] + 3 * BLOCK, 0x5a, 8);
    }
    memset(&options, 0, sizeof options);
    options.struct_size = sizeof options;
    options.flags = (i % 10 == 9 || i == RESTORES - 1) ? KREPLAY_RESTORE_FULL_CHECK : 0;
    memset(&report, 0, sizeof report);
    report.struct_size = sizeof report;
    CHECK_OK(kreplay_restore_ex(snapshot, &options, &report));
    partial_restores += report.partial ? 1 : 0;
    if (options.flags != 0) {
      int r;
      for (r = 0; r < REGIONS; ++r) {
        CHECK(test_has_pattern(regions[r], REGION_BYTES, (unsigned)r + 1));
      }
    }
  }
  CHECK(pthread_join(hinter, NULL) == 0);
  /* Without partial restores the full checks would hold whatever the write set did. */
  CHECK(partial_restores > 0);
  CHECK_EQ(0, test_counters().violations);
  kreplay_snapshot_free(snapshot);
  for (i = 0; i < REGIONS; ++i) {
    test_free(regions[i]);
  }
  kreplay_staging_trim(agent);
}

int main(void) {
  test_configure_sim_digesting();
  RUN_TEST(a_hinting_thread_and_a_restoring_thread_leave_the_footprint_exact);
  return 0;
}
