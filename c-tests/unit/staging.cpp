// Staging pools through kreplay.hpp: the RAII buffer returns its storage exactly once, whoever holds it last,
// and keeps the C API's sizing, reuse, best-fit and per-agent rules.
#include "test_util.h"

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kreplay.hpp"

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

using kreplay::staging_buffer_t;

static_assert(std::is_nothrow_default_constructible<staging_buffer_t>::value, "default construction cannot fail");
static_assert(!std::is_copy_constructible<staging_buffer_t>::value, "a copy would return the storage twice");
static_assert(!std::is_copy_assignable<staging_buffer_t>::value, "a copy would return the storage twice");
static_assert(std::is_nothrow_move_constructible<staging_buffer_t>::value, "moves cannot fail");
static_assert(std::is_nothrow_move_assignable<staging_buffer_t>::value, "moves cannot fail");
static_assert(std::is_nothrow_destructible<staging_buffer_t>::value, "the destructor cannot fail");
static_assert(noexcept(std::declval<staging_buffer_t&>().acquire(kreplay_agent_t{}, 1)), "acquire cannot throw");
static_assert(noexcept(kreplay::retained_staging_bytes(kreplay_agent_t{})), "the C API never throws");

// The library logs an error when storage comes back twice; every test below asserts there was none.
void expect_no_double_release() { CHECK_EQ(0, test_log_count(KREPLAY_LOG_ERROR, nullptr)); }

void a_default_buffer_is_empty() {
  const staging_buffer_t buffer;
  CHECK(buffer.data() == nullptr);
  CHECK(buffer.empty());
  CHECK_EQ(0, buffer.size());
  CHECK_EQ(0, buffer.capacity());
}

void a_fresh_buffer_is_sized_to_the_request_writable_and_nothing_is_retained() {
  const kreplay_agent_t agent = test_agent(0x201);
  {
    staging_buffer_t buffer;
    CHECK(buffer.acquire(agent, 100 * KiB));
    CHECK(buffer.data() != nullptr);
    CHECK(!buffer.empty());
    CHECK_EQ(100 * KiB, buffer.size());
    CHECK(buffer.capacity() >= buffer.size());
    CHECK_EQ(agent.handle, buffer.agent().handle);
    test_fill(buffer.data(), buffer.size(), 3);
    const staging_buffer_t& view = buffer;
    CHECK(test_has_pattern(view.data(), view.size(), 3));
    CHECK_EQ(0, kreplay::retained_staging_bytes(agent));
  }
  CHECK(kreplay::retained_staging_bytes(agent) >= 100 * KiB);
  kreplay_staging_trim(agent);
}

void destroyed_storage_is_reused_by_the_next_acquire_of_that_footprint() {
  const kreplay_agent_t agent = test_agent(0x202);
  const char* first = nullptr;
  {
    staging_buffer_t buffer;
    CHECK(buffer.acquire(agent, MiB));
    first = buffer.data();
  }
  const std::size_t maps = test_host_memory().maps;
  staging_buffer_t again;
  CHECK(again.acquire(agent, MiB));
  CHECK(again.data() == first);
  CHECK_EQ(maps, test_host_memory().maps);
  again.release();
  CHECK(again.empty());
  kreplay_staging_trim(agent);
}

void reuse_is_best_fit_within_twice_the_request() {
  const kreplay_agent_t agent = test_agent(0x203);
  const char* big_data = nullptr;
  {
    staging_buffer_t big;
    CHECK(big.acquire(agent, 100 * KiB));
    big_data = big.data();
  }
  staging_buffer_t small;
  CHECK(small.acquire(agent, 40 * KiB));
  CHECK(small.data() != big_data);
  staging_buffer_t fits;
  CHECK(fits.acquire(agent, 60 * KiB));
  CHECK(fits.data() == big_data);
}

void pools_are_per_agent() {
  const kreplay_agent_t a = test_agent(0x204);
  const kreplay_agent_t b = test_agent(0x205);
  const char* first = nullptr;
  {
    staging_buffer_t buffer;
    CHECK(buffer.acquire(a, MiB));
    first = buffer.data();
  }
  const std::size_t retained_a = kreplay::retained_staging_bytes(a);
  CHECK(retained_a >= MiB);
  {
    staging_buffer_t other;
    CHECK(other.acquire(b, MiB));
    CHECK(other.data() != first);
    CHECK_EQ(retained_a, kreplay::retained_staging_bytes(a));
    CHECK_EQ(0, kreplay::retained_staging_bytes(b));
  }
  kreplay_staging_trim(a);
  kreplay_staging_trim(b);
}

void move_construction_hands_over_the_storage_and_only_the_final_owner_returns_it() {
  const kreplay_agent_t agent = test_agent(0x206);
  test_log_capture(KREPLAY_LOG_WARNING);
  const char* data = nullptr;
  std::size_t capacity = 0;
  {
    staging_buffer_t first;
    CHECK(first.acquire(agent, 512 * KiB));
    data = first.data();
    capacity = first.capacity();
    first.data()[0] = 'k';
    {
      staging_buffer_t second(std::move(first));
      CHECK(first.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is what is tested
      CHECK_EQ(0, first.size());
      CHECK(second.data() == data);
      CHECK_EQ(512 * KiB, second.size());
      CHECK_EQ('k', second.data()[0]);
      staging_buffer_t third(std::move(second));
      CHECK(second.empty());
      CHECK(third.data() == data);
      CHECK_EQ(0, kreplay::retained_staging_bytes(agent));
    }
    // `third` is gone; the two moved-from buffers returned nothing.
    CHECK_EQ(capacity, kreplay::retained_staging_bytes(agent));
  }
  // `first` was destroyed empty: the storage is in the pool once, not twice.
  CHECK_EQ(capacity, kreplay::retained_staging_bytes(agent));
  staging_buffer_t a;
  staging_buffer_t b;
  CHECK(a.acquire(agent, 512 * KiB));
  CHECK(b.acquire(agent, 512 * KiB));
  CHECK(a.data() == data);
  CHECK(b.data() != data);
  expect_no_double_release();
  test_log_stop();
}

void move_assignment_over_a_holding_buffer_returns_its_old_storage_once() {
  const kreplay_agent_t agent = test_agent(0x207);
  test_log_capture(KREPLAY_LOG_WARNING);
  staging_buffer_t target;
  staging_buffer_t source;
  CHECK(target.acquire(agent, 256 * KiB));
  CHECK(source.acquire(agent, 2 * MiB));
  const char* old_data = target.data();
  const std::size_t old_capacity = target.capacity();
  const char* new_data = source.data();

  target = std::move(source);
  CHECK(source.empty());  // NOLINT(bugprone-use-after-move)
  CHECK(target.data() == new_data);
  CHECK_EQ(2 * MiB, target.size());
  CHECK_EQ(old_capacity, kreplay::retained_staging_bytes(agent));

  // Assigning an empty buffer returns the storage too.
  target = staging_buffer_t();
  CHECK(target.empty());
  CHECK(kreplay::retained_staging_bytes(agent) >= old_capacity + 2 * MiB);

  staging_buffer_t again;
  CHECK(again.acquire(agent, 256 * KiB));
  CHECK(again.data() == old_data);
  expect_no_double_release();
  test_log_stop();
  again.release();
  kreplay_staging_trim(agent);
}

void moving_a_buffer_onto_itself_keeps_its_storage() {
  const kreplay_agent_t agent = test_agent(0x208);
  staging_buffer_t buffer;
  CHECK(buffer.acquire(agent, 64 * KiB));
  const char* data = buffer.data();
  staging_buffer_t& alias = buffer;
  buffer = std::move(alias);
  CHECK(buffer.data() == data);
  CHECK_EQ(64 * KiB, buffer.size());
  CHECK_EQ(0, kreplay::retained_staging_bytes(agent));
}

void a_moved_from_buffer_can_acquire_again() {
  const kreplay_agent_t agent = test_agent(0x209);
  staging_buffer_t first;
  CHECK(first.acquire(agent, 32 * KiB));
  staging_buffer_t second(std::move(first));
  CHECK(first.acquire(agent, 32 * KiB));  // NOLINT(bugprone-use-after-move)
  CHECK(first.data() != second.data());
  CHECK_EQ(0, kreplay::retained_staging_bytes(agent));
}

void reacquiring_returns_the_old_storage_first() {
  const kreplay_agent_t agent = test_agent(0x20A);
  staging_buffer_t buffer;
  CHECK(buffer.acquire(agent, 4 * MiB));
  const std::size_t first_capacity = buffer.capacity();
  CHECK(buffer.acquire(agent, MiB));
  CHECK_EQ(MiB, buffer.size());
  CHECK_EQ(first_capacity, kreplay::retained_staging_bytes(agent));
}

void invalid_sizes_fail_and_say_why() {
  const kreplay_agent_t agent = test_agent(0x20B);
  staging_buffer_t buffer;
  CHECK(!buffer.acquire(agent, 0));
  CHECK(buffer.empty());
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, buffer.acquire_status(agent, SIZE_MAX));
  CHECK(buffer.acquire(agent, 100));
  const char* data = buffer.data();
  CHECK(!buffer.acquire(agent, 0));
  CHECK(buffer.data() == data);  // an invalid request leaves the buffer as it was
}

void a_failed_mapping_leaves_the_buffer_empty() {
  const kreplay_agent_t agent = test_agent(0x20C);
  staging_buffer_t buffer;
  CHECK(buffer.acquire(agent, 64 * KiB));
  kreplay_sim_faults_t faults = test_no_faults();
  faults.fail_host_map_at = 1;
  kreplay_sim_set_faults(&faults);
  CHECK_STATUS(KREPLAY_STATUS_OUT_OF_HOST_MEMORY, buffer.acquire_status(agent, 5 * MiB));
  test_disarm_faults();
  CHECK(buffer.empty());
  CHECK_EQ(0, buffer.size());
  CHECK(kreplay::retained_staging_bytes(agent) >= 64 * KiB);
  kreplay_staging_trim(agent);
}

void the_raw_view_matches_the_accessors() {
  const kreplay_agent_t agent = test_agent(0x20D);
  staging_buffer_t buffer;
  CHECK(buffer.acquire(agent, 777));
  const kreplay_staging_buffer_t& raw = buffer.raw();
  CHECK(raw.data == buffer.data());
  CHECK_EQ(raw.size, buffer.size());
  CHECK_EQ(raw.capacity, buffer.capacity());
  CHECK_EQ(raw.agent.handle, agent.handle);
}

void nothing_stays_mapped_once_every_pool_is_trimmed() {
  for (std::uint64_t handle = 0x201; handle <= 0x20D; ++handle) {
    kreplay_staging_trim(test_agent(handle));
  }
  CHECK_EQ(0, test_host_memory().mapped_bytes);
}

}  // namespace

int main() {
  RUN_TEST(a_default_buffer_is_empty);
  RUN_TEST(a_fresh_buffer_is_sized_to_the_request_writable_and_nothing_is_retained);
  RUN_TEST(destroyed_storage_is_reused_by_the_next_acquire_of_that_footprint);
  RUN_TEST(reuse_is_best_fit_within_twice_the_request);
  RUN_TEST(pools_are_per_agent);
  RUN_TEST(move_construction_hands_over_the_storage_and_only_the_final_owner_returns_it);
  RUN_TEST(move_assignment_over_a_holding_buffer_returns_its_old_storage_once);
  RUN_TEST(moving_a_buffer_onto_itself_keeps_its_storage);
  RUN_TEST(a_moved_from_buffer_can_acquire_again);
  RUN_TEST(reacquiring_returns_the_old_storage_first);
  RUN_TEST(invalid_sizes_fail_and_say_why);
  RUN_TEST(a_failed_mapping_leaves_the_buffer_empty);
  RUN_TEST(the_raw_view_matches_the_accessors);
  RUN_TEST(nothing_stays_mapped_once_every_pool_is_trimmed);
  return 0;
}
