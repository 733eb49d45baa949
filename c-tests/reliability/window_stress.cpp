// Concurrency stress of the replay window (issue 20) on two agents for a bounded time: copier threads begin
// and end fenced async copies that write a tracked region of every agent they name, while one thread per
// agent opens windows, snapshots, runs passes that scribble over the region, restores and closes, and one
// thread opens windows on both agents at once. Checked throughout and at the end:
// - no other thread's copy runs inside a window: after every restore the region holds exactly what the
//   window's snapshot captured, and the count of copies between begin and end of the agent is zero;
// - a second window on an agent with one open is WINDOW_NESTED, never a wait;
// - every window's outcome counts its passes (1 + the restores);
// - at the end every copy begun was ended: a window opens on each agent without waiting for any copy.
// Usage: kreplay_reliability_window_stress [seconds] (default 2).
#include "reliability.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kRegionBytes = 64 << 10;
constexpr std::size_t kCopiers = 3;
constexpr std::uint32_t kPasses = 3;

std::atomic<bool> failed{false};

#define STRESS_CHECK(condition)                                                            \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);  \
      failed.store(true);                                                                  \
    }                                                                                      \
  } while (0)

struct Agent {
  kreplay_agent_t handle{};
  unsigned char* region = nullptr;
  std::atomic<std::uint32_t> copying{0};  // copies of this agent between their begin and end
};

struct Figures {
  std::atomic<std::size_t> copies{0};
  std::atomic<std::size_t> windows{0};
  std::atomic<std::size_t> declines{0};
  std::atomic<std::size_t> nested{0};
  std::atomic<std::size_t> pairs{0};
};

Agent agents[2];
Figures figures;

void copier(Clock::time_point deadline, std::uint64_t seed) {
  std::uint64_t state = seed;
  while (Clock::now() < deadline) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const std::size_t pick = static_cast<std::size_t>(state % 3);  // agent 0, agent 1, or both
    kreplay_agent_t named[2];
    std::size_t count = 0;
    for (std::size_t a = 0; a < 2; ++a) {
      if (pick == 2 || pick == a) {
        named[count++] = agents[a].handle;
      }
    }
    std::uint64_t token = 0;
    STRESS_CHECK(kreplay_copy_begin(named, count, &token) == KREPLAY_STATUS_SUCCESS);
    const unsigned char value = static_cast<unsigned char>(state >> 32);
    for (std::size_t a = 0; a < 2; ++a) {
      if (pick == 2 || pick == a) {
        agents[a].copying.fetch_add(1);
        // The "DMA": the whole region, as one async copy into device memory would deliver it.
        std::memset(agents[a].region, value, kRegionBytes);
        agents[a].copying.fetch_sub(1);
      }
    }
    kreplay_copy_end(token);
    figures.copies.fetch_add(1);
  }
}

kreplay_window_t* try_open(const Agent& agent, std::uint32_t timeout_ms, kreplay_decline_reason_t* reason) {
  kreplay_window_options_t options{};
  options.struct_size = sizeof options;
  options.passes = kPasses;
  options.copy_timeout_ms = timeout_ms;
  kreplay_window_t* window = nullptr;
  const kreplay_status_t status = kreplay_window_open(agent.handle, &options, &window, reason);
  STRESS_CHECK(status == KREPLAY_STATUS_SUCCESS || status == KREPLAY_STATUS_DECLINED);
  STRESS_CHECK((status == KREPLAY_STATUS_SUCCESS) == (window != nullptr));
  return window;
}

void replayer(Agent& agent, Clock::time_point deadline, unsigned char junk) {
  std::vector<unsigned char> buffer(kRegionBytes);
  unsigned char* image = buffer.data();
  while (Clock::now() < deadline) {
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    kreplay_window_t* window = try_open(agent, 500, &reason);
    if (window == nullptr) {
      // Only the pair thread may hold this agent's window now.
      STRESS_CHECK(reason == KREPLAY_DECLINE_WINDOW_NESTED || reason == KREPLAY_DECLINE_COPIES_IN_FLIGHT);
      figures.declines.fetch_add(1);
      std::this_thread::yield();
      continue;
    }
    STRESS_CHECK(agent.copying.load() == 0);
    kreplay_decline_reason_t inner = KREPLAY_DECLINE_NONE;
    STRESS_CHECK(try_open(agent, 500, &inner) == nullptr && inner == KREPLAY_DECLINE_WINDOW_NESTED);
    figures.nested.fetch_add(1);
    kreplay_snapshot_t* snapshot = nullptr;
    STRESS_CHECK(kreplay_snap(agent.handle, &snapshot, nullptr) == KREPLAY_STATUS_SUCCESS);
    // Copies of several copiers may have overlapped before the window, so the image need not be uniform.
    std::memcpy(image, agent.region, kRegionBytes);
    for (std::uint32_t pass = 1; pass < kPasses && snapshot != nullptr; ++pass) {
      std::memset(agent.region, junk, kRegionBytes / 2);  // the kernel's writes
      kreplay_restore_report_t report{};
      STRESS_CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS);
      STRESS_CHECK(std::memcmp(agent.region, image, kRegionBytes) == 0);
      STRESS_CHECK(agent.copying.load() == 0);
    }
    kreplay_snapshot_free(snapshot);
    kreplay_window_outcome_t outcome{};
    outcome.struct_size = sizeof outcome;
    STRESS_CHECK(kreplay_window_close(window, &outcome) == KREPLAY_STATUS_SUCCESS);
    STRESS_CHECK(outcome.reason == KREPLAY_DECLINE_NONE && outcome.passes_run == kPasses);
    STRESS_CHECK(outcome.footprint_bytes == kRegionBytes && outcome.bytes_moved == kPasses * kRegionBytes);
    figures.windows.fetch_add(1);
  }
}

// Windows on both agents from one thread (a tool callback that launches on another GPU).
void pair_opener(Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    kreplay_decline_reason_t reasons[2] = {KREPLAY_DECLINE_NONE, KREPLAY_DECLINE_NONE};
    kreplay_window_t* first = try_open(agents[0], 100, &reasons[0]);
    kreplay_window_t* second = try_open(agents[1], 100, &reasons[1]);
    if (first != nullptr && second != nullptr) {
      STRESS_CHECK(agents[0].copying.load() == 0 && agents[1].copying.load() == 0);
      figures.pairs.fetch_add(1);
    }
    for (kreplay_window_t* window : {second, first}) {
      if (window != nullptr) {
        STRESS_CHECK(kreplay_window_close(window, nullptr) == KREPLAY_STATUS_SUCCESS);
      }
    }
    std::this_thread::yield();
  }
}

void count_nothing(void*, kreplay_log_level_t, const char*, std::size_t) {}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  kreplay_sim_reset();
  // Declines are expected here; the checks say what matters.
  kreplay_set_logger(count_nothing, nullptr, KREPLAY_LOG_ERROR);
  rel_configure_sim();
  kreplay_tracking_enable(true);
  for (std::size_t a = 0; a < 2; ++a) {
    agents[a].handle.handle = 0x61 + a;
    void* region = nullptr;
    REL_REQUIRE(kreplay_sim_alloc(agents[a].handle, kRegionBytes, KREPLAY_POINTER_DEVICE,
                                  KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &region) == KREPLAY_STATUS_SUCCESS);
    REL_REQUIRE(kreplay_record_alloc(region, kRegionBytes, 0) == KREPLAY_STATUS_SUCCESS);
    agents[a].region = static_cast<unsigned char*>(region);
    std::memset(region, 0x11, kRegionBytes);
  }

  // Arm the fence before any copier starts: a copy begun before the first window ever opened is not counted
  // (API.md: one relaxed load until then), so the first window could not see it.
  for (Agent& agent : agents) {
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    kreplay_window_t* window = try_open(agent, 0, &reason);
    REL_REQUIRE(window != nullptr);
    REL_REQUIRE(kreplay_window_close(window, nullptr) == KREPLAY_STATUS_SUCCESS);
  }
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (std::size_t c = 0; c < kCopiers; ++c) {
    threads.emplace_back(copier, deadline, 0x9E3779B97F4A7C15ull * (c + 1));
  }
  threads.emplace_back(replayer, std::ref(agents[0]), deadline, static_cast<unsigned char>(0xA0));
  threads.emplace_back(replayer, std::ref(agents[1]), deadline, static_cast<unsigned char>(0xB0));
  threads.emplace_back(pair_opener, deadline);
  for (std::thread& thread : threads) {
    thread.join();
  }
  if (failed.load()) {
    ++rel_failures;
  }
  std::printf("%zu threads for %.1f s: %zu fenced copies, %zu windows replayed, %zu declined, %zu nested opens "
              "refused, %zu pairs of windows from one thread\n",
              threads.size(), seconds, figures.copies.load(), figures.windows.load(), figures.declines.load(),
              figures.nested.load(), figures.pairs.load());
  REL_CHECK(figures.copies.load() > 0);
  REL_CHECK(figures.windows.load() > 0);

  // Every copy begun was ended: each agent's window opens at once, with no copy to wait for.
  for (Agent& agent : agents) {
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_HOST_BUDGET;
    kreplay_window_t* window = try_open(agent, 1, &reason);
    REL_CHECK(window != nullptr);
    REL_CHECK_EQ(reason, KREPLAY_DECLINE_NONE);
    kreplay_window_outcome_t outcome{};
    outcome.struct_size = sizeof outcome;
    REL_CHECK_STATUS(kreplay_window_close(window, &outcome), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_EQ(outcome.copies_waited, 0);
    REL_CHECK_STATUS(kreplay_record_free(agent.region), KREPLAY_STATUS_SUCCESS);
    REL_CHECK_STATUS(kreplay_sim_free(agent.region), KREPLAY_STATUS_SUCCESS);
  }
  kreplay_set_logger(nullptr, nullptr, KREPLAY_LOG_WARNING);
  return rel_finish("kreplay_reliability_window_stress");
}
