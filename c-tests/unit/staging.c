/* Staging pools through the C API: sizing, reuse, best fit, per-agent isolation, the edge cases of
 * kreplay_staging_acquire/release, host mapping failures, tiny-region steady state and trim. Needs no device
 * ops: staging is host memory only. Built against the simulated device for its host-mapping fault. */
#include "test_util.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

static kreplay_staging_buffer_t empty_buffer(void) {
  kreplay_staging_buffer_t buffer;
  memset(&buffer, 0, sizeof buffer);
  return buffer;
}

static void a_fresh_buffer_is_sized_to_the_request_writable_and_nothing_is_retained(void) {
  const kreplay_agent_t agent = test_agent(0x101);
  kreplay_staging_buffer_t buffer = empty_buffer();
  CHECK_OK(kreplay_staging_acquire(&buffer, agent, 100 * KIB));
  CHECK(buffer.data != NULL);
  CHECK_EQ(100 * KIB, buffer.size);
  CHECK(buffer.capacity >= buffer.size);
  CHECK_EQ(agent.handle, buffer.agent.handle);
  test_fill(buffer.data, buffer.capacity, 1);
  CHECK(test_has_pattern(buffer.data, buffer.capacity, 1));
  CHECK_EQ(0, kreplay_retained_staging_bytes(agent));

  kreplay_staging_release(&buffer);
  CHECK(buffer.data == NULL);
  CHECK_EQ(0, buffer.size);
  CHECK_EQ(0, buffer.capacity);
  kreplay_staging_trim(agent);
}

static void released_storage_is_reused_by_the_next_acquire_of_that_footprint(void) {
  const kreplay_agent_t agent = test_agent(0x102);
  kreplay_staging_buffer_t buffer = empty_buffer();
  void* first;
  size_t capacity;
  kreplay_host_memory_stats_t before;
  CHECK_OK(kreplay_staging_acquire(&buffer, agent, MIB));
  first = buffer.data;
  capacity = buffer.capacity;
  kreplay_staging_release(&buffer);
  CHECK_EQ(capacity, kreplay_retained_staging_bytes(agent));

  before = test_host_memory();
  CHECK_OK(kreplay_staging_acquire(&buffer, agent, MIB));
  CHECK(buffer.data == first);
  CHECK_EQ(before.maps, test_host_memory().maps);
  CHECK_EQ(0, kreplay_retained_staging_bytes(agent));
  kreplay_staging_release(&buffer);
  kreplay_staging_trim(agent);
}

static void acquiring_into_a_holding_buffer_returns_its_storage_to_the_pool_first(void) {
  const kreplay_agent_t agent = test_agent(0x103);
  kreplay_staging_buffer_t buffer = empty_buffer();
  void* first;
  size_t first_capacity;
  CHECK_OK(kreplay_staging_acquire(&buffer, agent, 4 * MIB));
  first = buffer.data;
  first_capacity = buffer.capacity;
  /* 1 MiB cannot take a 4 MiB buffer (more than twice the request), so the old one must be retained. */
  CHECK_OK(kreplay_staging_acquire(&buffer, agent, MIB));
  CHECK(buffer.data != first);
  CHECK_EQ(first_capacity, kreplay_retained_staging_bytes(agent));
  kreplay_staging_release(&buffer);
  kreplay_staging_trim(agent);
}

static void reuse_is_best_fit_within_twice_the_request(void) {
  const kreplay_agent_t agent = test_agent(0x104);
  kreplay_staging_buffer_t big = empty_buffer();
  kreplay_staging_buffer_t small = empty_buffer();
  kreplay_staging_buffer_t fits = empty_buffer();
  void* big_data;
  CHECK_OK(kreplay_staging_acquire(&big, agent, 100 * KIB));
  big_data = big.data;
  kreplay_staging_release(&big);

  CHECK_OK(kreplay_staging_acquire(&small, agent, 40 * KIB));
  CHECK(small.data != big_data);
  CHECK_OK(kreplay_staging_acquire(&fits, agent, 60 * KIB));
  CHECK(fits.data == big_data);

  kreplay_staging_release(&small);
  kreplay_staging_release(&fits);
  kreplay_staging_trim(agent);
}

static void the_smallest_fitting_buffer_is_taken(void) {
  const kreplay_agent_t agent = test_agent(0x105);
  kreplay_staging_buffer_t a = empty_buffer();
  kreplay_staging_buffer_t b = empty_buffer();
  kreplay_staging_buffer_t c = empty_buffer();
  void* medium;
  CHECK_OK(kreplay_staging_acquire(&a, agent, 190 * KIB));
  CHECK_OK(kreplay_staging_acquire(&b, agent, 120 * KIB));
  medium = b.data;
  kreplay_staging_release(&a);
  kreplay_staging_release(&b);
  /* Both fit within [100, 200] KiB; the 120 KiB one wastes less. */
  CHECK_OK(kreplay_staging_acquire(&c, agent, 100 * KIB));
  CHECK(c.data == medium);
  kreplay_staging_release(&c);
  kreplay_staging_trim(agent);
}

static void pools_are_per_agent(void) {
  const kreplay_agent_t a = test_agent(0x106);
  const kreplay_agent_t b = test_agent(0x107);
  kreplay_staging_buffer_t buffer = empty_buffer();
  kreplay_staging_buffer_t other = empty_buffer();
  void* first;
  size_t capacity;
  CHECK_OK(kreplay_staging_acquire(&buffer, a, MIB));
  first = buffer.data;
  capacity = buffer.capacity;
  kreplay_staging_release(&buffer);

  CHECK_OK(kreplay_staging_acquire(&other, b, MIB));
  CHECK(other.data != first);
  CHECK_EQ(b.handle, other.agent.handle);
  CHECK_EQ(capacity, kreplay_retained_staging_bytes(a));
  CHECK_EQ(0, kreplay_retained_staging_bytes(b));

  kreplay_staging_release(&other);
  kreplay_staging_trim(a);
  kreplay_staging_trim(b);
}

static void zero_and_unmappable_sizes_are_invalid_and_leave_the_buffer_unchanged(void) {
  const kreplay_agent_t agent = test_agent(0x108);
  kreplay_staging_buffer_t buffer = empty_buffer();
  kreplay_staging_buffer_t held;
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_staging_acquire(&buffer, agent, 0));
  CHECK(buffer.data == NULL);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_staging_acquire(&buffer, agent, SIZE_MAX));
  CHECK(buffer.data == NULL);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_staging_acquire(&buffer, agent, SIZE_MAX / 2 + 1));

  CHECK_OK(kreplay_staging_acquire(&buffer, agent, 64 * KIB));
  held = buffer;
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_staging_acquire(&buffer, agent, 0));
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_staging_acquire(&buffer, agent, SIZE_MAX));
  CHECK(memcmp(&held, &buffer, sizeof buffer) == 0);
  kreplay_staging_release(&buffer);
  kreplay_staging_trim(agent);
}

static void a_null_buffer_is_invalid(void) {
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_staging_acquire(NULL, test_agent(0x109), 64));
}

static void releasing_null_or_an_empty_buffer_does_nothing(void) {
  const kreplay_agent_t agent = test_agent(0x10A);
  kreplay_staging_buffer_t buffer = empty_buffer();
  kreplay_host_memory_stats_t before = test_host_memory();
  test_log_capture(KREPLAY_LOG_TRACE);
  kreplay_staging_release(NULL);
  kreplay_staging_release(&buffer);
  kreplay_staging_release(&buffer);
  CHECK(buffer.data == NULL);
  CHECK_EQ(0, kreplay_retained_staging_bytes(agent));
  CHECK_EQ(before.maps, test_host_memory().maps);
  CHECK_EQ(before.unmaps, test_host_memory().unmaps);
  CHECK_EQ(0, test_log_count(KREPLAY_LOG_ERROR, NULL));
  test_log_stop();
}

static void releasing_a_copy_of_a_released_buffer_is_refused_and_logged(void) {
  const kreplay_agent_t agent = test_agent(0x10B);
  kreplay_staging_buffer_t buffer = empty_buffer();
  kreplay_staging_buffer_t stale;
  size_t retained;
  CHECK_OK(kreplay_staging_acquire(&buffer, agent, 256 * KIB));
  stale = buffer;
  kreplay_staging_release(&buffer);
  retained = kreplay_retained_staging_bytes(agent);

  test_log_capture(KREPLAY_LOG_WARNING);
  kreplay_staging_release(&stale);
  CHECK(stale.data != NULL); /* left untouched */
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_ERROR, "released already"));
  CHECK_EQ(retained, kreplay_retained_staging_bytes(agent));

  /* The same for a small buffer, which lives in a shared slab. */
  CHECK_OK(kreplay_staging_acquire(&buffer, agent, 24));
  stale = buffer;
  kreplay_staging_release(&buffer);
  test_log_clear();
  kreplay_staging_release(&stale);
  CHECK(stale.data != NULL);
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_ERROR, "released already"));

  test_log_stop();
  kreplay_staging_trim(agent);
}

static void releasing_a_stale_copy_leaves_storage_lent_again_to_its_new_owner(void) {
  const kreplay_agent_t agent = test_agent(0x10C);
  kreplay_staging_buffer_t buffer = empty_buffer();
  kreplay_staging_buffer_t stale;
  kreplay_staging_buffer_t owner = empty_buffer();
  kreplay_staging_buffer_t thief = empty_buffer();
  CHECK_OK(kreplay_staging_acquire(&buffer, agent, 256 * KIB));
  stale = buffer;
  kreplay_staging_release(&buffer);
  CHECK_OK(kreplay_staging_acquire(&owner, agent, 256 * KIB));
  CHECK(owner.data == stale.data);

  /* The stale copy names storage that `owner` holds now. Accepting it would put owner's storage back in the
   * pool, and the next acquire would hand the same bytes to a second owner. */
  test_log_capture(KREPLAY_LOG_WARNING);
  kreplay_staging_release(&stale);
  CHECK_OK(kreplay_staging_acquire(&thief, agent, 256 * KIB));
  CHECK(thief.data != owner.data);

  test_log_stop();
  kreplay_staging_release(&thief);
  kreplay_staging_release(&owner);
  kreplay_staging_trim(agent);
}

static void a_failed_host_mapping_is_out_of_host_memory_and_leaves_the_buffer_empty(void) {
  const kreplay_agent_t agent = test_agent(0x111);
  kreplay_staging_buffer_t buffer = empty_buffer();
  kreplay_sim_faults_t faults = test_no_faults();
  size_t held_capacity;

  faults.fail_host_map_at = 1;
  kreplay_sim_set_faults(&faults);
  CHECK_STATUS(KREPLAY_STATUS_OUT_OF_HOST_MEMORY, kreplay_staging_acquire(&buffer, agent, 3 * MIB));
  CHECK(buffer.data == NULL);
  CHECK_EQ(0, buffer.size);
  CHECK_EQ(0, buffer.capacity);

  /* A holding buffer gives its storage back first, so a failure leaves it empty, not holding stale storage. */
  CHECK_OK(kreplay_staging_acquire(&buffer, agent, 64 * KIB));
  held_capacity = buffer.capacity;
  kreplay_sim_set_faults(&faults);
  CHECK_STATUS(KREPLAY_STATUS_OUT_OF_HOST_MEMORY, kreplay_staging_acquire(&buffer, agent, 3 * MIB));
  CHECK(buffer.data == NULL);
  CHECK_EQ(held_capacity, kreplay_retained_staging_bytes(agent));

  /* The fault fired once: the next acquire maps normally. */
  CHECK_OK(kreplay_staging_acquire(&buffer, agent, 3 * MIB));
  kreplay_staging_release(&buffer);
  test_disarm_faults();
  kreplay_staging_trim(agent);
}

static void a_failed_slab_mapping_is_out_of_host_memory_too(void) {
  const kreplay_agent_t agent = test_agent(0x10D);
  kreplay_staging_buffer_t buffer = empty_buffer();
  kreplay_sim_faults_t faults = test_no_faults();
  faults.fail_host_map_at = 1;
  kreplay_sim_set_faults(&faults);
  CHECK_STATUS(KREPLAY_STATUS_OUT_OF_HOST_MEMORY, kreplay_staging_acquire(&buffer, agent, 100));
  CHECK(buffer.data == NULL);
  test_disarm_faults();
  CHECK_OK(kreplay_staging_acquire(&buffer, agent, 100));
  kreplay_staging_release(&buffer);
  kreplay_staging_trim(agent);
}

static void tiny_acquire_release_cycles_make_no_host_mapping_in_steady_state(void) {
  enum { CYCLES = 10000, LIVE = 64 };
  const kreplay_agent_t agent = test_agent(0x10E);
  kreplay_staging_buffer_t buffers[LIVE];
  kreplay_host_memory_stats_t before;
  kreplay_host_memory_stats_t after;
  size_t i;
  memset(buffers, 0, sizeof buffers);
  /* Warm-up: one round of every size from 1 to 256 bytes, with LIVE of them held at once as a snapshot's
   * module variables would be. */
  for (i = 0; i < 256; ++i) {
    CHECK_OK(kreplay_staging_acquire(&buffers[i % LIVE], agent, i + 1));
  }
  for (i = 0; i < LIVE; ++i) {
    kreplay_staging_release(&buffers[i]);
  }

  before = test_host_memory();
  for (i = 0; i < CYCLES; ++i) {
    kreplay_staging_buffer_t* buffer = &buffers[i % LIVE];
    size_t size = i % 256 + 1;
    CHECK_OK(kreplay_staging_acquire(buffer, agent, size));
    CHECK(buffer->capacity >= size);
    ((unsigned char*)buffer->data)[size - 1] = (unsigned char)i;
  }
  for (i = 0; i < LIVE; ++i) {
    kreplay_staging_release(&buffers[i]);
  }
  after = test_host_memory();
  CHECK_EQ(before.maps, after.maps);
  CHECK_EQ(before.unmaps, after.unmaps);
  CHECK_EQ(before.mapped_bytes, after.mapped_bytes);
  kreplay_staging_trim(agent);
}

static void tiny_buffers_share_pages(void) {
  enum { COUNT = 200 };
  const kreplay_agent_t agent = test_agent(0x10F);
  kreplay_staging_buffer_t buffers[COUNT];
  kreplay_host_memory_stats_t before = test_host_memory();
  size_t i;
  memset(buffers, 0, sizeof buffers);
  for (i = 0; i < COUNT; ++i) {
    CHECK_OK(kreplay_staging_acquire(&buffers[i], agent, 48));
  }
  /* 200 regions of 48 bytes must not cost a mapping (or a page) each. */
  CHECK(test_host_memory().maps - before.maps <= 2);
  for (i = 0; i < COUNT; ++i) {
    kreplay_staging_release(&buffers[i]);
  }
  kreplay_staging_trim(agent);
}

static void trim_unmaps_idle_storage(void) {
  const kreplay_agent_t agent = test_agent(0x110);
  kreplay_staging_buffer_t big = empty_buffer();
  kreplay_staging_buffer_t tiny = empty_buffer();
  kreplay_staging_buffer_t kept = empty_buffer();
  kreplay_host_memory_stats_t before;
  kreplay_host_memory_stats_t after;
  CHECK_OK(kreplay_staging_acquire(&big, agent, 2 * MIB));
  CHECK_OK(kreplay_staging_acquire(&tiny, agent, 16));
  CHECK_OK(kreplay_staging_acquire(&kept, agent, 8 * MIB));
  kreplay_staging_release(&big);
  kreplay_staging_release(&tiny);
  CHECK(kreplay_retained_staging_bytes(agent) >= 2 * MIB);

  before = test_host_memory();
  kreplay_staging_trim(agent);
  after = test_host_memory();
  CHECK_EQ(0, kreplay_retained_staging_bytes(agent));
  CHECK(after.unmaps >= before.unmaps + 2);
  CHECK(after.mapped_bytes < before.mapped_bytes);

  /* Lent storage survives a trim and is still usable and returnable. */
  test_fill(kept.data, kept.size, 9);
  CHECK(test_has_pattern(kept.data, kept.size, 9));
  kreplay_staging_release(&kept);
  CHECK(kreplay_retained_staging_bytes(agent) >= 8 * MIB);
  kreplay_staging_trim(agent);
  CHECK_EQ(0, kreplay_retained_staging_bytes(agent));
}

static void trim_and_retained_bytes_of_an_unknown_agent_are_harmless(void) {
  const kreplay_agent_t agent = test_agent(0x1FF);
  kreplay_host_memory_stats_t before = test_host_memory();
  kreplay_staging_trim(agent);
  CHECK_EQ(0, kreplay_retained_staging_bytes(agent));
  CHECK_EQ(before.unmaps, test_host_memory().unmaps);
}

static void nothing_stays_mapped_once_every_pool_is_trimmed(void) {
  /* Every test above trims its own agent: if the library kept or leaked a mapping, it shows here. */
  CHECK_EQ(0, test_host_memory().mapped_bytes);
}

int main(void) {
  RUN_TEST(a_fresh_buffer_is_sized_to_the_request_writable_and_nothing_is_retained);
  RUN_TEST(released_storage_is_reused_by_the_next_acquire_of_that_footprint);
  RUN_TEST(acquiring_into_a_holding_buffer_returns_its_storage_to_the_pool_first);
  RUN_TEST(reuse_is_best_fit_within_twice_the_request);
  RUN_TEST(the_smallest_fitting_buffer_is_taken);
  RUN_TEST(pools_are_per_agent);
  RUN_TEST(zero_and_unmappable_sizes_are_invalid_and_leave_the_buffer_unchanged);
  RUN_TEST(a_null_buffer_is_invalid);
  RUN_TEST(releasing_null_or_an_empty_buffer_does_nothing);
  RUN_TEST(releasing_a_copy_of_a_released_buffer_is_refused_and_logged);
  RUN_TEST(a_failed_host_mapping_is_out_of_host_memory_and_leaves_the_buffer_empty);
  RUN_TEST(a_failed_slab_mapping_is_out_of_host_memory_too);
  RUN_TEST(tiny_acquire_release_cycles_make_no_host_mapping_in_steady_state);
  RUN_TEST(tiny_buffers_share_pages);
  RUN_TEST(trim_unmaps_idle_storage);
  RUN_TEST(trim_and_retained_bytes_of_an_unknown_agent_are_harmless);
  RUN_TEST(nothing_stays_mapped_once_every_pool_is_trimmed);
  /* Last: it fails against the current library (see the report on issue 2), and a failed check ends the run. */
  RUN_TEST(releasing_a_stale_copy_leaves_storage_lent_again_to_its_new_owner);
  return 0;
}
