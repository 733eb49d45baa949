// Snapshot and restore through kreplay.hpp: device_snapshot_t owns its snapshot exactly once across moves,
// reports declines, and restore / restore_with_status carry the report and the status.
#include "test_util.h"

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kreplay.hpp"

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

using kreplay::device_snapshot_t;

static_assert(std::is_nothrow_default_constructible<device_snapshot_t>::value, "no snapshot costs nothing");
static_assert(!std::is_copy_constructible<device_snapshot_t>::value, "a copy would free the snapshot twice");
static_assert(!std::is_copy_assignable<device_snapshot_t>::value, "a copy would free the snapshot twice");
static_assert(std::is_nothrow_move_constructible<device_snapshot_t>::value, "moves cannot fail");
static_assert(std::is_nothrow_move_assignable<device_snapshot_t>::value, "moves cannot fail");
static_assert(std::is_nothrow_destructible<device_snapshot_t>::value, "the destructor cannot fail");
static_assert(noexcept(kreplay::snap(kreplay_agent_t{})), "the C API never throws");
static_assert(noexcept(kreplay::restore(std::declval<const device_snapshot_t&>())), "the C API never throws");
static_assert(noexcept(kreplay::restore_with_status(std::declval<const device_snapshot_t&>())), "never throws");
static_assert(std::is_same<decltype(kreplay::restore(std::declval<const device_snapshot_t&>())),
                           kreplay_restore_report_t>::value,
              "restore returns the C report, as the contract says");

// One tracked region of `size` bytes filled with `seed`'s pattern.
void* region(kreplay_agent_t agent, std::size_t size, unsigned seed) {
  void* ptr = test_alloc(agent, size);
  test_fill(ptr, size, seed);
  return ptr;
}

void set_budget(std::size_t max_snapshot_bytes) {
  kreplay_policy_t policy{};
  policy.struct_size = sizeof policy;
  policy.max_snapshot_bytes = max_snapshot_bytes;
  CHECK_OK(kreplay_set_policy(&policy));
}

// A snapshot freed twice, or a handle used after its free, makes the library log an error.
void expect_no_handle_errors() { CHECK_EQ(0, test_log_count(KREPLAY_LOG_ERROR, nullptr)); }

void a_default_snapshot_holds_nothing() {
  const device_snapshot_t snapshot;
  CHECK(!snapshot.ok);
  CHECK(snapshot.empty());
  CHECK(snapshot.get() == nullptr);
  CHECK_EQ(KREPLAY_DECLINE_NONE, snapshot.reason);
  CHECK_EQ(0, snapshot.info().bytes);
}

void snap_gives_an_ok_snapshot_that_restores_every_pass() {
  const kreplay_agent_t agent = test_agent(0x601);
  void* a = region(agent, 4 * KiB, 1);
  void* b = region(agent, MiB + 3, 2);
  auto* variable = static_cast<unsigned char*>(test_module_variable(agent, "scale", 16, true));
  test_fill(variable, 16, 3);
  {
    const device_snapshot_t snapshot = kreplay::snap(agent);
    CHECK(snapshot.ok);
    CHECK_EQ(KREPLAY_DECLINE_NONE, snapshot.reason);
    CHECK_EQ(KREPLAY_STATUS_SUCCESS, snapshot.status);
    CHECK(!snapshot.empty());
    CHECK(snapshot.get() != nullptr);
    const kreplay_snapshot_info_t info = snapshot.info();
    CHECK_EQ(agent.handle, info.agent.handle);
    CHECK_EQ(2, info.regions);
    CHECK_EQ(1, info.module_variables);
    CHECK_EQ(4 * KiB + MiB + 3 + 16, info.bytes);

    for (unsigned pass = 1; pass <= 3; ++pass) {
      test_fill(a, 4 * KiB, 10 + pass);
      test_fill(b, MiB + 3, 20 + pass);
      test_fill(variable, 16, 30 + pass);
      const kreplay_restore_report_t report = kreplay::restore(snapshot);
      CHECK_EQ(3, report.restored);
      CHECK_EQ(0, report.skipped + report.failed);
      CHECK_EQ(info.bytes, report.bytes);
      CHECK(test_has_pattern(a, 4 * KiB, 1));
      CHECK(test_has_pattern(b, MiB + 3, 2));
      CHECK(test_has_pattern(variable, 16, 3));
    }
  }
  test_free(a);
  test_free(b);
  kreplay_staging_trim(agent);
}

void a_declined_snap_is_not_ok_and_says_why() {
  const kreplay_agent_t agent = test_agent(0x602);
  void* ptr = region(agent, 8 * KiB, 1);
  set_budget(4 * KiB);
  const device_snapshot_t snapshot = kreplay::snap(agent);
  set_budget(0);
  CHECK(!snapshot.ok);
  CHECK_EQ(KREPLAY_DECLINE_HOST_BUDGET, snapshot.reason);
  CHECK_EQ(KREPLAY_STATUS_DECLINED, snapshot.status);
  CHECK(snapshot.empty());
  CHECK(snapshot.get() == nullptr);

  // Restoring nothing writes nothing and says so.
  test_fill(ptr, 8 * KiB, 2);
  const kreplay::restore_result_t result = kreplay::restore_with_status(snapshot);
  CHECK(!result.ok());
  CHECK_EQ(KREPLAY_STATUS_INVALID_ARGUMENT, result.status);
  CHECK_EQ(0, result.report.restored + result.report.bytes);
  CHECK_EQ(0, kreplay::restore(snapshot).restored);
  CHECK(test_has_pattern(ptr, 8 * KiB, 2));
  test_free(ptr);
}

void a_snapshot_of_nothing_is_ok_and_empty() {
  const device_snapshot_t snapshot = kreplay::snap(test_agent(0x603));
  CHECK(snapshot.ok);
  CHECK(snapshot.empty());
  CHECK(snapshot.get() != nullptr);
  const kreplay::restore_result_t result = kreplay::restore_with_status(snapshot);
  CHECK(result.ok());
  CHECK_EQ(0, result.report.restored);
}

void moving_a_snapshot_hands_it_over_and_it_is_freed_once() {
  const kreplay_agent_t a = test_agent(0x604);
  const kreplay_agent_t b = test_agent(0x605);
  void* pa = region(a, 256 * KiB, 1);
  void* pb = region(b, 512 * KiB, 2);
  test_log_capture(KREPLAY_LOG_WARNING);
  const kreplay_snapshot_t* raw_a = nullptr;
  const kreplay_snapshot_t* raw_b = nullptr;
  {
    device_snapshot_t first = kreplay::snap(a);
    raw_a = first.get();
    CHECK(first.ok && raw_a != nullptr);

    device_snapshot_t second(std::move(first));
    CHECK(!first.ok);  // NOLINT(bugprone-use-after-move): the moved-from state is what is tested
    CHECK(first.get() == nullptr);
    CHECK(first.empty());
    CHECK(second.ok);
    CHECK(second.get() == raw_a);

    device_snapshot_t third = kreplay::snap(b);
    raw_b = third.get();
    CHECK_EQ(0, kreplay::retained_staging_bytes(b));
    // Assigning over a held snapshot frees it: its staging goes back to b's pool.
    third = std::move(second);
    CHECK(!second.ok);  // NOLINT(bugprone-use-after-move)
    CHECK(third.get() == raw_a);
    CHECK(kreplay::retained_staging_bytes(b) >= 512 * KiB);
    CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_restore(raw_b, nullptr));
    test_log_clear();  // that refusal logged a warning on purpose

    // The snapshot still works from its new owner.
    test_fill(pa, 256 * KiB, 9);
    CHECK_EQ(1, kreplay::restore(third).restored);
    CHECK(test_has_pattern(pa, 256 * KiB, 1));
    CHECK_EQ(0, kreplay::retained_staging_bytes(a));
  }
  // Only `third` held it at the end; it was freed once, and the two moved-from objects freed nothing.
  CHECK(kreplay::retained_staging_bytes(a) >= 256 * KiB);
  expect_no_handle_errors();
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay_restore(raw_a, nullptr));
  test_log_stop();
  test_free(pa);
  test_free(pb);
  kreplay_staging_trim(a);
  kreplay_staging_trim(b);
}

void moving_a_snapshot_onto_itself_keeps_it() {
  const kreplay_agent_t agent = test_agent(0x606);
  void* ptr = region(agent, 4 * KiB, 1);
  device_snapshot_t snapshot = kreplay::snap(agent);
  const kreplay_snapshot_t* raw = snapshot.get();
  device_snapshot_t& alias = snapshot;
  snapshot = std::move(alias);
  CHECK(snapshot.ok);
  CHECK(snapshot.get() == raw);
  CHECK_EQ(1, kreplay::restore(snapshot).restored);
  snapshot.reset();
  CHECK(!snapshot.ok);
  CHECK(snapshot.get() == nullptr);
  test_free(ptr);
  kreplay_staging_trim(agent);
}

void the_destructor_returns_the_staging_to_the_pool() {
  const kreplay_agent_t agent = test_agent(0x607);
  void* ptr = region(agent, 2 * MiB, 1);
  {
    const device_snapshot_t snapshot = kreplay::snap(agent);
    CHECK(snapshot.ok);
    CHECK_EQ(0, kreplay::retained_staging_bytes(agent));
  }
  CHECK(kreplay::retained_staging_bytes(agent) >= 2 * MiB);
  test_free(ptr);
  kreplay_staging_trim(agent);
}

void release_gives_up_ownership_to_the_caller() {
  const kreplay_agent_t agent = test_agent(0x608);
  void* ptr = region(agent, 4 * KiB, 1);
  test_log_capture(KREPLAY_LOG_WARNING);
  kreplay_snapshot_t* raw = nullptr;
  {
    device_snapshot_t snapshot = kreplay::snap(agent);
    raw = snapshot.release();
    CHECK(raw != nullptr);
    CHECK(!snapshot.ok);
    CHECK(snapshot.get() == nullptr);
  }
  // Still alive after the object died; the caller frees it, and that is its one free.
  CHECK_OK(kreplay_restore(raw, nullptr));
  kreplay_snapshot_free(raw);
  expect_no_handle_errors();

  // Adopting a raw snapshot works the other way round.
  kreplay_snapshot_t* adopted = nullptr;
  CHECK_OK(kreplay_snap(agent, &adopted, nullptr));
  {
    const device_snapshot_t owner(adopted);
    CHECK(owner.ok);
    CHECK_EQ(KREPLAY_STATUS_SUCCESS, owner.status);
    CHECK(owner.get() == adopted);
  }
  expect_no_handle_errors();
  test_log_stop();
  test_free(ptr);
  kreplay_staging_trim(agent);
}

void a_failed_restore_copy_is_reported_as_partial_restore() {
  const kreplay_agent_t agent = test_agent(0x609);
  void* a = region(agent, 4 * KiB, 1);
  void* b = region(agent, 4 * KiB, 2);
  const device_snapshot_t snapshot = kreplay::snap(agent);
  CHECK(snapshot.ok);
  kreplay_sim_faults_t faults = test_no_faults();
  faults.fail_copy_at = 1;

  kreplay_sim_set_faults(&faults);
  const kreplay::restore_result_t result = kreplay::restore_with_status(snapshot);
  CHECK(!result.ok());
  CHECK_EQ(KREPLAY_STATUS_PARTIAL_RESTORE, result.status);
  CHECK_EQ(1, result.report.failed);
  CHECK_EQ(1, result.report.restored);

  // The plain restore drops the status, but its report still shows the failure.
  kreplay_sim_set_faults(&faults);
  const kreplay_restore_report_t report = kreplay::restore(snapshot);
  test_disarm_faults();
  CHECK_EQ(1, report.failed);

  const kreplay::restore_result_t clean = kreplay::restore_with_status(snapshot);
  CHECK(clean.ok());
  CHECK_EQ(2, clean.report.restored);
  test_free(a);
  test_free(b);
}

void nothing_is_left_mapped() {
  for (std::uint64_t handle = 0x601; handle <= 0x609; ++handle) {
    kreplay_staging_trim(test_agent(handle));
  }
  CHECK_EQ(0, test_host_memory().mapped_bytes);
  CHECK_EQ(0, test_counters().violations);
}

}  // namespace

// The version-4 wrappers: restore_ex reports through the versioned report, unknown flags are refused, and a
// snapshot without digests has no write set for hints to join (the write-set behaviour itself is in
// write_set.c, on a device that digests).
void restore_ex_and_hints_go_through_the_versioned_calls() {
  const kreplay_agent_t agent = test_agent(0x60b);
  void* a = region(agent, 8 * KiB, 3);
  // The host budget's setter reaches the C field, and kreplay checks its range.
  CHECK_EQ(50u, kreplay::policy_t().host_budget_percent(50).get().host_budget_percent);
  CHECK_EQ(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay::policy_t().host_budget_percent(101).apply());
  CHECK_OK(kreplay::policy_t().learn_write_set(true).apply());
  device_snapshot_t snapshot = kreplay::snap(agent);
  CHECK(snapshot.ok);
  test_fill(a, 8 * KiB, 4);
  const kreplay::restore_ex_result_t full = kreplay::restore_ex(snapshot, KREPLAY_RESTORE_FULL_CHECK);
  CHECK(full.ok());
  CHECK(test_has_pattern(a, 8 * KiB, 3));
  CHECK_EQ(sizeof(kreplay_restore_report_ex_t), full.report.struct_size);
  CHECK_EQ(8 * KiB, full.report.bytes);
  CHECK_EQ(0, full.report.digested_bytes);
  CHECK(!full.report.partial);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay::restore_ex(snapshot, 0x80).status);
  const kreplay_write_hint_t hint{a, 0};
  std::size_t added = 7;
  CHECK_OK(kreplay::hint_writes(snapshot, &hint, 1, &added));
  CHECK_EQ(0, added);
  snapshot.reset();
  CHECK_OK(kreplay::policy_t().apply());
  test_free(a);
  kreplay_staging_trim(agent);
}

int main() {
  test_configure_sim();
  RUN_TEST(a_default_snapshot_holds_nothing);
  RUN_TEST(snap_gives_an_ok_snapshot_that_restores_every_pass);
  RUN_TEST(a_declined_snap_is_not_ok_and_says_why);
  RUN_TEST(a_snapshot_of_nothing_is_ok_and_empty);
  RUN_TEST(moving_a_snapshot_hands_it_over_and_it_is_freed_once);
  RUN_TEST(moving_a_snapshot_onto_itself_keeps_it);
  RUN_TEST(the_destructor_returns_the_staging_to_the_pool);
  RUN_TEST(release_gives_up_ownership_to_the_caller);
  RUN_TEST(a_failed_restore_copy_is_reported_as_partial_restore);
  RUN_TEST(restore_ex_and_hints_go_through_the_versioned_calls);
  RUN_TEST(nothing_is_left_mapped);
  return 0;
}
