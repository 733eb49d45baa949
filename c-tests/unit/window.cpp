// kreplay.hpp's window_t (issue 20) on the simulated device: the destructor closes the window exactly once,
// moves hand it over, and the outcome is kept after the close.
#include "test_util.h"

#include <utility>

#include "kreplay.hpp"

namespace {

void test_the_destructor_closes_the_window_and_a_new_one_opens() {
  const kreplay_agent_t agent = test_agent(0x1100);
  {
    kreplay::window_t window = kreplay::window_t::open(agent, 3);
    CHECK(window.is_open());
    CHECK_EQ(KREPLAY_STATUS_SUCCESS, window.status());
    kreplay::window_t nested = kreplay::window_t::open(agent, 3);
    CHECK(!nested.is_open());
    CHECK_EQ(KREPLAY_STATUS_DECLINED, nested.status());
    CHECK_EQ(KREPLAY_DECLINE_WINDOW_NESTED, nested.reason());
    CHECK_EQ(KREPLAY_DECLINE_WINDOW_NESTED, nested.outcome().reason);
  }
  kreplay::window_t again = kreplay::window_t::open(agent, 1);
  CHECK(again.is_open());
  CHECK_EQ(KREPLAY_STATUS_SUCCESS, again.close());
  // A window over a range of four dispatches says so in its outcome.
  kreplay::window_t range = kreplay::window_t::open(agent, 2, 0, 4);
  CHECK(range.is_open());
  CHECK_EQ(KREPLAY_STATUS_SUCCESS, range.close());
  CHECK_EQ(4, range.outcome().dispatches);
}

void test_close_keeps_the_outcome_of_the_windows_snapshot_and_restores() {
  const kreplay_agent_t agent = test_agent(0x1200);
  void* region = test_alloc(agent, 8192);
  kreplay::window_t window = kreplay::window_t::open(agent, 2);
  {
    kreplay::device_snapshot_t snapshot = kreplay::snap(agent);
    CHECK(snapshot.ok);
    CHECK_EQ(0, kreplay::restore(snapshot).failed);
  }
  CHECK_EQ(KREPLAY_STATUS_SUCCESS, window.close());
  CHECK(!window.is_open());
  CHECK_EQ(KREPLAY_STATUS_SUCCESS, window.close());  // nothing left to close
  CHECK_EQ(agent.handle, window.outcome().agent.handle);
  CHECK_EQ(2, window.outcome().passes_run);
  CHECK_EQ(1, window.outcome().dispatches);  // one dispatch unless the host names a range
  CHECK_EQ(8192, window.outcome().footprint_bytes);
  CHECK_EQ(2 * 8192, window.outcome().bytes_moved);
  test_free(region);
}

void test_a_moved_window_is_closed_once_by_its_last_owner() {
  const kreplay_agent_t agent = test_agent(0x1300);
  kreplay::window_t target;
  CHECK(!target.is_open());
  test_log_capture(KREPLAY_LOG_INFO);
  {
    kreplay::window_t source = kreplay::window_t::open(agent, 1);
    kreplay::window_t middle(std::move(source));
    CHECK(!source.is_open());  // NOLINT(bugprone-use-after-move): moved-from state is specified
    CHECK(middle.is_open());
    target = std::move(middle);
  }
  CHECK(target.is_open());
  CHECK_EQ(0, test_log_count(KREPLAY_LOG_INFO, "kreplay window agent=0x1300 "));
  target = kreplay::window_t();
  CHECK_EQ(1, test_log_count(KREPLAY_LOG_INFO, "kreplay window agent=0x1300 "));
  test_log_stop();
}

void test_the_policy_builder_sets_the_window_fields() {
  kreplay::policy_t policy;
  policy.untracked_decline_mask(1u << KREPLAY_UNTRACKED_HOST).max_window_ns(5).warn_window_ns(7);
  const kreplay_policy_t& raw = policy.get();
  CHECK_EQ(1u << KREPLAY_UNTRACKED_HOST, raw.untracked_decline_mask);
  CHECK_EQ(5, raw.max_window_ns);
  CHECK_EQ(7, raw.warn_window_ns);
  CHECK_EQ(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay::policy_t().untracked_decline_mask(1u << 6).apply());
}

}  // namespace

int main() {
  test_configure_sim();
  RUN_TEST(test_the_destructor_closes_the_window_and_a_new_one_opens);
  RUN_TEST(test_close_keeps_the_outcome_of_the_windows_snapshot_and_restores);
  RUN_TEST(test_a_moved_window_is_closed_once_by_its_last_owner);
  RUN_TEST(test_the_policy_builder_sets_the_window_fields);
  return 0;
}
