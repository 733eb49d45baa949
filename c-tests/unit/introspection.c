/* Introspection through the C API on the simulated device: kreplay_inventory_foreach visits exactly an
 * agent's live tracked regions (allocations, then mappings), with generations that kreplay_generation_of
 * confirms; freed regions and memory that classification leaves untracked are not visited; a reused address
 * gets a new generation; NULL arguments are INVALID_ARGUMENT. Each test uses an agent of its own. */
#include "test_util.h"

#define MAX_SEEN 32

typedef struct seen_t {
  size_t count;
  const void* base[MAX_SEEN];
  size_t bytes[MAX_SEEN];
  uint64_t generation[MAX_SEEN];
} seen_t;

static void remember(void* user_data, const void* base, size_t bytes, uint64_t generation) {
  seen_t* seen = (seen_t*)user_data;
  if (seen->count < MAX_SEEN) {
    seen->base[seen->count] = base;
    seen->bytes[seen->count] = bytes;
    seen->generation[seen->count] = generation;
  }
  ++seen->count;
}

static seen_t visit_all(kreplay_agent_t agent) {
  seen_t seen;
  memset(&seen, 0, sizeof seen);
  CHECK_OK(kreplay_inventory_foreach(agent, remember, &seen));
  CHECK(seen.count <= MAX_SEEN);
  return seen;
}

/* Where `base` was visited, or -1. */
static int find(const seen_t* seen, const void* base) {
  size_t i;
  for (i = 0; i < seen->count; ++i) {
    if (seen->base[i] == base) {
      return (int)i;
    }
  }
  return -1;
}

static uint64_t generation(const void* base) {
  uint64_t value = 0;
  CHECK_OK(kreplay_generation_of(base, &value));
  CHECK(value != 0);
  return value;
}

static void foreach_visits_exactly_the_live_regions_with_the_generations_generation_of_confirms(void) {
  const kreplay_agent_t agent = test_agent(0xC1);
  void* ptrs[6];
  void* other;
  void* fine;
  seen_t seen;
  size_t i;
  uint64_t value = 0;
  for (i = 0; i < 6; ++i) {
    ptrs[i] = test_alloc(agent, 4096 * (i + 1));
  }
  /* Another agent's region, and memory of this agent that is not tracked (fine-grained). */
  other = test_alloc(test_agent(0xC2), 4096);
  fine = test_alloc_kind(agent, 4096, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_FINE_GRAINED);
  test_free(ptrs[1]);
  test_free(ptrs[4]);

  seen = visit_all(agent);
  CHECK_EQ(4, seen.count);
  CHECK_EQ(4, test_inventory(agent).regions);
  for (i = 0; i < 6; ++i) {
    const int at = find(&seen, ptrs[i]);
    if (i == 1 || i == 4) {
      CHECK(at < 0);
      CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_generation_of(ptrs[i], &value));
      continue;
    }
    CHECK(at >= 0);
    CHECK_EQ(4096 * (i + 1), seen.bytes[at]);
    CHECK(seen.generation[at] == generation(ptrs[i]));
  }
  CHECK(find(&seen, fine) < 0);
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_generation_of(fine, &value));
  /* Generations are distinct. */
  for (i = 1; i < seen.count; ++i) {
    CHECK(seen.generation[i] != seen.generation[0]);
  }
  /* Table order is stable while nothing changes. */
  {
    const seen_t again = visit_all(agent);
    CHECK_EQ(seen.count, again.count);
    CHECK(memcmp(seen.base, again.base, sizeof seen.base) == 0);
  }
  for (i = 0; i < 6; ++i) {
    if (i != 1 && i != 4) {
      test_free(ptrs[i]);
    }
  }
  test_free(other);
  /* Untracked, so its free may find nothing to take out; the real free follows either way. */
  (void)kreplay_record_free(fine);
  CHECK_OK(kreplay_sim_free(fine));
  CHECK_EQ(0, visit_all(agent).count);
}

static void a_reused_address_is_visited_with_a_new_generation(void) {
  const kreplay_agent_t agent = test_agent(0xC3);
  void* ptr = test_alloc(agent, 8192);
  void* again = NULL;
  const uint64_t first = generation(ptr);
  uint64_t second;
  seen_t seen;
  test_free(ptr);
  CHECK_EQ(0, visit_all(agent).count);
  CHECK_OK(kreplay_sim_alloc_at(ptr, agent, 8192, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &again));
  CHECK(again == ptr);
  CHECK_OK(kreplay_record_alloc(again, 8192, 0));
  second = generation(again);
  CHECK(second != first);
  seen = visit_all(agent);
  CHECK_EQ(1, seen.count);
  CHECK(seen.base[0] == ptr && seen.generation[0] == second);
  test_free(again);
}

static void mappings_are_visited_after_allocations_and_answer_by_base(void) {
  const kreplay_agent_t agent = test_agent(0xC4);
  void* region = test_alloc(agent, 4096);
  void* backing = NULL;
  uint64_t value = 0;
  seen_t seen;
  /* Address space for the mapping; the mapping itself is what is recorded. */
  CHECK_OK(kreplay_sim_alloc(agent, 3 * 4096, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &backing));
  CHECK_OK(kreplay_record_vmem_map(backing, 3 * 4096, agent));
  seen = visit_all(agent);
  CHECK_EQ(2, seen.count);
  CHECK(seen.base[0] == region && seen.base[1] == backing);
  CHECK_EQ(3 * 4096, seen.bytes[1]);
  CHECK(seen.generation[1] == generation(backing));
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_generation_of((char*)backing + 4096, &value));
  CHECK_OK(kreplay_record_vmem_unmap(backing, 3 * 4096));
  CHECK_EQ(1, visit_all(agent).count);
  test_free(region);
  CHECK_OK(kreplay_sim_free(backing));
}

static void tracking_turned_off_leaves_nothing_to_visit(void) {
  const kreplay_agent_t agent = test_agent(0xC5);
  void* ptr = test_alloc(agent, 4096);
  uint64_t value = 0;
  CHECK_EQ(1, visit_all(agent).count);
  kreplay_tracking_enable(false);
  CHECK_EQ(0, visit_all(agent).count);
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_generation_of(ptr, &value));
  kreplay_tracking_enable(true);
  CHECK_OK(kreplay_sim_free(ptr));
}

static void null_arguments_are_invalid_argument_and_write_nothing(void) {
  const kreplay_agent_t agent = test_agent(0xC6);
  void* ptr = test_alloc(agent, 4096);
  uint64_t value = 77;
  test_log_capture(KREPLAY_LOG_WARNING);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_inventory_foreach(agent, NULL, NULL));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_generation_of(ptr, NULL));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "visit is NULL"));
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_WARNING, "generation_out is NULL"));
  test_log_stop();
  /* An untracked base is NOT_FOUND, and the output is left alone. */
  CHECK_STATUS(KREPLAY_STATUS_NOT_FOUND, kreplay_generation_of(NULL, &value));
  CHECK_EQ(77, value);
  /* A NULL user_data is passed through as is. */
  CHECK_OK(kreplay_inventory_foreach(test_agent(0xC7), remember, NULL));
  test_free(ptr);
}

int main(void) {
  test_configure_sim();
  RUN_TEST(foreach_visits_exactly_the_live_regions_with_the_generations_generation_of_confirms);
  RUN_TEST(a_reused_address_is_visited_with_a_new_generation);
  RUN_TEST(mappings_are_visited_after_allocations_and_answer_by_base);
  RUN_TEST(tracking_turned_off_leaves_nothing_to_visit);
  RUN_TEST(null_arguments_are_invalid_argument_and_write_nothing);
  return 0;
}
