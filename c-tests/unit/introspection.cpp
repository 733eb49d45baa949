// Introspection and live budgets through kreplay.hpp: inventory_foreach takes a callable (a capturing lambda
// sees every live region once, with the generation generation_of reports), generation_of is 0 for an
// untracked base, and policy_t sets device_budget_percent.
#include "test_util.h"

#include <cstdint>
#include <map>

#include "kreplay.hpp"

namespace {

void a_lambda_visits_every_live_region_once_with_its_generation() {
  const kreplay_agent_t agent = test_agent(0xD1);
  void* a = test_alloc(agent, 4096);
  void* b = test_alloc(agent, 8192);
  void* c = test_alloc(agent, 12288);
  test_free(b);
  std::map<const void*, std::pair<std::size_t, std::uint64_t>> seen;
  int calls = 0;
  CHECK_OK(kreplay::inventory_foreach(agent, [&](const void* base, std::size_t bytes, std::uint64_t generation) {
    ++calls;
    seen[base] = {bytes, generation};
  }));
  CHECK_EQ(2, calls);
  CHECK_EQ(2, seen.size());
  CHECK_EQ(4096, seen.at(a).first);
  CHECK_EQ(12288, seen.at(c).first);
  CHECK(seen.at(a).second == kreplay::generation_of(a) && seen.at(a).second != 0);
  CHECK(seen.at(c).second == kreplay::generation_of(c) && seen.at(c).second != 0);
  CHECK(kreplay::generation_of(b) == 0);
  // A const callable works too.
  const auto count = [&calls](const void*, std::size_t, std::uint64_t) { ++calls; };
  CHECK_OK(kreplay::inventory_foreach(agent, count));
  CHECK_EQ(4, calls);
  test_free(a);
  test_free(c);
}

void policy_t_sets_the_percent_and_refuses_one_above_100() {
  CHECK_OK(kreplay::policy_t().device_budget_bytes(1 << 20).device_budget_percent(50).apply());
  CHECK(kreplay::policy_t().device_budget_percent(50).get().device_budget_percent == 50);
  test_log_capture(KREPLAY_LOG_WARNING);
  CHECK_STATUS(KREPLAY_STATUS_INVALID_ARGUMENT, kreplay::policy_t().device_budget_percent(101).apply());
  test_log_stop();
  CHECK_OK(kreplay::policy_t().apply());
}

}  // namespace

int main() {
  test_configure_sim();
  RUN_TEST(a_lambda_visits_every_live_region_once_with_its_generation);
  RUN_TEST(policy_t_sets_the_percent_and_refuses_one_above_100);
  return 0;
}
