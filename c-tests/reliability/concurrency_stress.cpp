// Concurrency stress on two agents for a bounded time: threads allocate, free and reallocate at the same
// addresses, map and unmap virtual ranges, and hold staging buffers, while one thread per agent snapshots
// and restores over and over. Checked throughout and at the end:
// - no restore writes into memory after its record_free (or vmem unmap) returned: the simulated device
//   refuses and counts such copies (violations == 0), freed regions keep their 0xDD poison, unmapped ranges
//   keep a poison of our own;
// - no pass writes another generation's data: every allocation holds exactly its own generation's bytes
//   when it is freed, although restores of older snapshots ran over its address all along;
// - staging lent to a caller is never written by anyone else;
// - the inventory's counts per agent match the model, and nothing is leaked;
// - version 2 (API.md, "Concurrency, lifetimes and re-entry"): one thread swaps between a WARNING and an ERROR
//   logger (a retired logger is never called, the ERROR one never gets a warning), one reads and restores the
//   snapshots the replayer of agent 0 publishes while that replayer frees them, and one brings short-lived
//   agents through staging (every one gets a pool).
// Usage: kreplay_reliability_concurrency [seconds] (default 3).
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

constexpr std::size_t kSlotsPerAgent = 48;
constexpr std::size_t kAllocatorsPerAgent = 2;
constexpr std::size_t kSlices = 16;
constexpr std::size_t kSliceBytes = 4096;
constexpr unsigned char kFreedPoison = 0xDD;  // what the simulated device fills freed regions with
constexpr unsigned char kUnmappedPoison = 0xEE;

std::atomic<std::size_t> errors_logged{0};
std::atomic<std::size_t> warnings_logged{0};
std::atomic<bool> failed{false};

void count_messages(void*, kreplay_log_level_t level, const char* message, std::size_t) {
  if (level == KREPLAY_LOG_ERROR) {
    if (errors_logged.fetch_add(1) < 5) {
      std::fprintf(stderr, "kreplay error: %s\n", message);
    }
  } else if (level == KREPLAY_LOG_WARNING) {
    warnings_logged.fetch_add(1);
  }
}

// Threads report through this rather than REL_CHECK, whose counter is not atomic.
#define STRESS_CHECK(condition)                                                            \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);  \
      failed.store(true);                                                                  \
    }                                                                                      \
  } while (0)

struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
};

// The bytes generation `generation` writes: its number first, then a sequence that depends on it.
void fill_generation(unsigned char* p, std::size_t size, std::uint64_t generation) {
  std::memcpy(p, &generation, sizeof generation);
  for (std::size_t i = sizeof generation; i < size; ++i) {
    p[i] = static_cast<unsigned char>(generation * 0x9Du + i * 0x3Bu + (i >> 7));
  }
}

bool holds_generation(const unsigned char* p, std::size_t size, std::uint64_t generation) {
  std::uint64_t stored;
  std::memcpy(&stored, p, sizeof stored);
  if (stored != generation) {
    std::fprintf(stderr, "generation %llu found generation %llu's data\n", static_cast<unsigned long long>(generation),
                 static_cast<unsigned long long>(stored));
    return false;
  }
  for (std::size_t i = sizeof generation; i < size; ++i) {
    if (p[i] != static_cast<unsigned char>(generation * 0x9Du + i * 0x3Bu + (i >> 7))) {
      return false;
    }
  }
  return true;
}

bool all_bytes(const unsigned char* p, std::size_t size, unsigned char value) {
  for (std::size_t i = 0; i < size; ++i) {
    if (p[i] != value) {
      return false;
    }
  }
  return true;
}

struct Slot {
  unsigned char* address = nullptr;
  std::size_t size = 0;
  bool live = false;
  std::uint64_t generation = 0;
};

struct Slice {
  unsigned char* address = nullptr;
  bool mapped = false;
  std::uint64_t generation = 0;
};

struct Agent {
  kreplay_agent_t handle;
  std::vector<Slot> slots;
  std::vector<Slice> slices;
  unsigned char* vmem_area = nullptr;
  unsigned char* variables[2] = {nullptr, nullptr};
  std::size_t variable_sizes[2] = {24, 300};
};

std::atomic<std::uint64_t> next_generation{1};

struct Figures {
  std::atomic<std::size_t> snapshots{0}, restores{0}, restored{0}, skipped{0}, reallocations{0}, vmem_changes{0},
      staging_rounds{0}, logger_swaps{0}, inspections{0}, inspections_refused{0}, short_agents{0};
};
Figures figures;

using Clock = std::chrono::steady_clock;

// Frees and reallocates the slots `first, first + stride, ...` of one agent: record_free before the real free,
// record_alloc after the new allocation is filled, as a host's wrappers (and the kernel that first writes it)
// would order them.
void allocator(Agent& agent, std::size_t first, std::size_t stride, Clock::time_point deadline, std::uint64_t seed) {
  Rng rng{seed};
  std::vector<std::size_t> owned;
  for (std::size_t i = first; i < agent.slots.size(); i += stride) {
    owned.push_back(i);
  }
  while (Clock::now() < deadline && !failed.load()) {
    Slot& slot = agent.slots[owned[rng.below(owned.size())]];
    if (slot.live) {
      STRESS_CHECK(kreplay_record_free(slot.address) == KREPLAY_STATUS_SUCCESS);
      // From here on no restore may write: the bytes are exactly this generation's.
      STRESS_CHECK(holds_generation(slot.address, slot.size, slot.generation));
      STRESS_CHECK(kreplay_sim_free(slot.address) == KREPLAY_STATUS_SUCCESS);
      slot.live = false;
    } else {
      STRESS_CHECK(all_bytes(slot.address, slot.size, kFreedPoison));
      void* again = nullptr;
      STRESS_CHECK(kreplay_sim_alloc_at(slot.address, agent.handle, slot.size, KREPLAY_POINTER_DEVICE,
                                        KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &again) == KREPLAY_STATUS_SUCCESS);
      STRESS_CHECK(again == slot.address);
      slot.generation = next_generation.fetch_add(1);
      fill_generation(slot.address, slot.size, slot.generation);
      STRESS_CHECK(kreplay_record_alloc(slot.address, slot.size, 0) == KREPLAY_STATUS_SUCCESS);
      slot.live = true;
      figures.reallocations.fetch_add(1);
    }
    if (rng.below(4) == 0) {
      std::this_thread::yield();
    }
  }
}

// Maps and unmaps slices of one agent's virtual range.
void mapper(Agent& agent, Clock::time_point deadline, std::uint64_t seed) {
  Rng rng{seed};
  while (Clock::now() < deadline && !failed.load()) {
    Slice& slice = agent.slices[rng.below(agent.slices.size())];
    if (slice.mapped) {
      STRESS_CHECK(kreplay_record_vmem_unmap(slice.address, kSliceBytes) == KREPLAY_STATUS_SUCCESS);
      STRESS_CHECK(holds_generation(slice.address, kSliceBytes, slice.generation));
      std::memset(slice.address, kUnmappedPoison, kSliceBytes);
      slice.mapped = false;
    } else {
      STRESS_CHECK(all_bytes(slice.address, kSliceBytes, kUnmappedPoison));
      slice.generation = next_generation.fetch_add(1);
      fill_generation(slice.address, kSliceBytes, slice.generation);
      STRESS_CHECK(kreplay_record_vmem_map(slice.address, kSliceBytes, agent.handle) == KREPLAY_STATUS_SUCCESS);
      slice.mapped = true;
    }
    figures.vmem_changes.fetch_add(1);
    if (rng.below(2) == 0) {
      std::this_thread::yield();
    }
  }
}

// The snapshot agent 0's replayer is using, for the inspector; it stays published after the free on purpose.
std::atomic<kreplay_snapshot_t*> published{nullptr};

// Snapshots one agent and restores each snapshot a few times.
void replayer(const Agent& agent, Clock::time_point deadline, bool publish) {
  while (Clock::now() < deadline && !failed.load()) {
    kreplay_snapshot_t* snapshot = nullptr;
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    kreplay_status_t status = kreplay_snap(agent.handle, &snapshot, &reason);
    STRESS_CHECK(status == KREPLAY_STATUS_SUCCESS);
    if (status != KREPLAY_STATUS_SUCCESS) {
      std::fprintf(stderr, "snapshot declined: %s\n", kreplay_decline_reason_string(reason));
      continue;
    }
    figures.snapshots.fetch_add(1);
    if (publish) {
      published.store(snapshot);
    }
    kreplay_snapshot_info_t info{};
    STRESS_CHECK(kreplay_snapshot_info(snapshot, &info) == KREPLAY_STATUS_SUCCESS);
    STRESS_CHECK(info.module_variables == 2);
    for (int pass = 0; pass < 3; ++pass) {
      kreplay_restore_report_t report{};
      STRESS_CHECK(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS);
      STRESS_CHECK(report.failed == 0);
      STRESS_CHECK(report.restored + report.skipped == info.regions + info.module_variables);
      figures.restores.fetch_add(1);
      figures.restored.fetch_add(report.restored);
      figures.skipped.fetch_add(report.skipped);
      std::this_thread::yield();
    }
    kreplay_snapshot_free(snapshot);
  }
}

// Holds staging buffers of both agents while snapshots take and return theirs: what a caller was lent must
// stay exactly as the caller wrote it.
// Reads and restores whatever agent 0's replayer published, freed or not: SUCCESS or INVALID_ARGUMENT, never a
// crash (the replayer's free takes effect when a restore in progress here ends).
void inspector(Clock::time_point deadline) {
  while (Clock::now() < deadline && !failed.load()) {
    kreplay_snapshot_t* snapshot = published.load();
    if (snapshot == nullptr) {
      std::this_thread::yield();
      continue;
    }
    kreplay_snapshot_info_t info{};
    kreplay_status_t status = kreplay_snapshot_info(snapshot, &info);
    STRESS_CHECK(status == KREPLAY_STATUS_SUCCESS || status == KREPLAY_STATUS_INVALID_ARGUMENT);
    if (status == KREPLAY_STATUS_SUCCESS) {
      STRESS_CHECK(info.module_variables == 2);
      kreplay_restore_report_t report{};
      status = kreplay_restore(snapshot, &report);
      STRESS_CHECK(status == KREPLAY_STATUS_SUCCESS || status == KREPLAY_STATUS_INVALID_ARGUMENT);
      STRESS_CHECK(report.failed == 0);
    }
    (status == KREPLAY_STATUS_SUCCESS ? figures.inspections : figures.inspections_refused).fetch_add(1);
    if (status != KREPLAY_STATUS_SUCCESS) {
      std::this_thread::yield();
    }
  }
}

// Two loggers swapped in turn: one at WARNING, one at ERROR. A logger is retired once the swap away from it
// returned, and made current again only by the next swap to it.
struct SwapLogger {
  kreplay_log_level_t level;
  std::atomic<bool> retired{true};
};
SwapLogger swap_loggers[2] = {{KREPLAY_LOG_WARNING, {}}, {KREPLAY_LOG_ERROR, {}}};

void swapped_logger(void* user_data, kreplay_log_level_t level, const char* message, std::size_t length) {
  SwapLogger* logger = static_cast<SwapLogger*>(user_data);
  STRESS_CHECK(!logger->retired.load());
  STRESS_CHECK(static_cast<unsigned>(level) <= static_cast<unsigned>(logger->level));
  count_messages(nullptr, level, message, length);
}

void logger_swapper(Clock::time_point deadline) {
  std::size_t current = 0;
  while (Clock::now() < deadline && !failed.load()) {
    const std::size_t next = 1 - current;
    swap_loggers[next].retired.store(false);
    kreplay_set_logger(swapped_logger, &swap_loggers[next], swap_loggers[next].level);
    swap_loggers[current].retired.store(true);
    current = next;
    figures.logger_swaps.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  kreplay_set_logger(count_messages, nullptr, KREPLAY_LOG_WARNING);
  swap_loggers[current].retired.store(true);
}

// Agents seen once each, as a process whose partitions come and go: each gets a pool, which is reclaimed.
void short_lived_agents(Clock::time_point deadline) {
  std::uint64_t handle = 0x90000;
  while (Clock::now() < deadline && !failed.load()) {
    kreplay_agent_t agent{handle++};
    kreplay_staging_buffer_t buffer{};
    STRESS_CHECK(kreplay_staging_acquire(&buffer, agent, 512) == KREPLAY_STATUS_SUCCESS);
    kreplay_staging_release(&buffer);
    kreplay_staging_trim(agent);
    STRESS_CHECK(kreplay_retained_staging_bytes(agent) == 0);
    figures.short_agents.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void stager(const Agent& a, const Agent& b, Clock::time_point deadline, std::uint64_t seed) {
  Rng rng{seed};
  while (Clock::now() < deadline && !failed.load()) {
    kreplay_staging_buffer_t buffers[4];
    std::memset(buffers, 0, sizeof buffers);
    for (std::size_t i = 0; i < 4; ++i) {
      const std::size_t size = 1 + rng.below(i % 2 == 0 ? 2048 : 256 * 1024);
      STRESS_CHECK(kreplay_staging_acquire(&buffers[i], i < 2 ? a.handle : b.handle, size) == KREPLAY_STATUS_SUCCESS);
      if (buffers[i].data != nullptr) {
        std::memset(buffers[i].data, static_cast<int>(0x40 + i), buffers[i].size);
      }
    }
    std::this_thread::yield();
    for (std::size_t i = 0; i < 4; ++i) {
      if (buffers[i].data != nullptr) {
        STRESS_CHECK(all_bytes(static_cast<unsigned char*>(buffers[i].data), buffers[i].size,
                               static_cast<unsigned char>(0x40 + i)));
      }
      kreplay_staging_release(&buffers[i]);
    }
    figures.staging_rounds.fetch_add(1);
  }
}

void set_up(Agent& agent, std::uint64_t handle, Rng& rng) {
  agent.handle.handle = handle;
  agent.slots.resize(kSlotsPerAgent);
  for (Slot& slot : agent.slots) {
    slot.size = 64 + rng.below(8192);
    void* p = nullptr;
    REL_REQUIRE(kreplay_sim_alloc(agent.handle, slot.size, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED,
                                  &p) == KREPLAY_STATUS_SUCCESS);
    slot.address = static_cast<unsigned char*>(p);
    slot.generation = next_generation.fetch_add(1);
    fill_generation(slot.address, slot.size, slot.generation);
    REL_REQUIRE(kreplay_record_alloc(slot.address, slot.size, 0) == KREPLAY_STATUS_SUCCESS);
    slot.live = true;
  }
  // The virtual range is simulated device memory that is only ever recorded as mappings.
  void* area = nullptr;
  REL_REQUIRE(kreplay_sim_alloc(agent.handle, kSlices * kSliceBytes, KREPLAY_POINTER_DEVICE,
                                KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, &area) == KREPLAY_STATUS_SUCCESS);
  agent.vmem_area = static_cast<unsigned char*>(area);
  std::memset(agent.vmem_area, kUnmappedPoison, kSlices * kSliceBytes);
  agent.slices.resize(kSlices);
  for (std::size_t i = 0; i < kSlices; ++i) {
    agent.slices[i].address = agent.vmem_area + i * kSliceBytes;
  }
  for (std::size_t i = 0; i < 2; ++i) {
    void* p = nullptr;
    REL_REQUIRE(kreplay_sim_add_module_variable(agent.handle, i == 0 ? "flags" : "table", agent.variable_sizes[i],
                                                i == 1, &p) == KREPLAY_STATUS_SUCCESS);
    agent.variables[i] = static_cast<unsigned char*>(p);
    std::memset(p, static_cast<int>(0x70 + i), agent.variable_sizes[i]);
  }
}

// The model's counts against the inventory's.
void check_inventory(const Agent& agent) {
  std::size_t regions = 0, bytes = 0;
  for (const Slot& slot : agent.slots) {
    if (slot.live) {
      ++regions;
      bytes += slot.size;
    }
  }
  for (const Slice& slice : agent.slices) {
    if (slice.mapped) {
      ++regions;
      bytes += kSliceBytes;
    }
  }
  kreplay_inventory_stats_t stats{};
  REL_CHECK_STATUS(kreplay_inventory_stats(agent.handle, &stats), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats.regions, regions);
  REL_CHECK_EQ(stats.bytes, bytes);
  REL_CHECK_EQ(stats.overflowed, 0);
  for (std::size_t i = 0; i < 2; ++i) {
    REL_CHECK(all_bytes(agent.variables[i], agent.variable_sizes[i], static_cast<unsigned char>(0x70 + i)));
  }
}

void tear_down(Agent& agent) {
  for (Slot& slot : agent.slots) {
    if (slot.live) {
      REL_CHECK_STATUS(kreplay_record_free(slot.address), KREPLAY_STATUS_SUCCESS);
      REL_CHECK(holds_generation(slot.address, slot.size, slot.generation));
    } else {
      REL_CHECK(all_bytes(slot.address, slot.size, kFreedPoison));
    }
    kreplay_sim_free(slot.address);
  }
  for (Slice& slice : agent.slices) {
    if (slice.mapped) {
      REL_CHECK_STATUS(kreplay_record_vmem_unmap(slice.address, kSliceBytes), KREPLAY_STATUS_SUCCESS);
      REL_CHECK(holds_generation(slice.address, kSliceBytes, slice.generation));
    } else {
      REL_CHECK(all_bytes(slice.address, kSliceBytes, kUnmappedPoison));
    }
  }
  REL_CHECK_STATUS(kreplay_sim_free(agent.vmem_area), KREPLAY_STATUS_SUCCESS);
  kreplay_inventory_stats_t stats{};
  REL_CHECK_STATUS(kreplay_inventory_stats(agent.handle, &stats), KREPLAY_STATUS_SUCCESS);
  REL_CHECK_EQ(stats.regions, 0);
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  kreplay_sim_reset();
  kreplay_set_logger(count_messages, nullptr, KREPLAY_LOG_WARNING);
  rel_configure_sim();
  kreplay_tracking_enable(true);
  // Page-locked staging, so that locks and unlocks race with snapshots too.
  kreplay_policy_t policy{};
  policy.struct_size = sizeof policy;
  policy.pin_staging = true;
  REL_REQUIRE(kreplay_set_policy(&policy) == KREPLAY_STATUS_SUCCESS);
  const kreplay_host_memory_stats_t start = rel_host_memory();

  Rng rng{0x5EED1234ABCDull};
  Agent agents[2];
  set_up(agents[0], 0x51, rng);
  set_up(agents[1], 0x52, rng);

  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (std::size_t a = 0; a < 2; ++a) {
    for (std::size_t t = 0; t < kAllocatorsPerAgent; ++t) {
      threads.emplace_back(allocator, std::ref(agents[a]), t, kAllocatorsPerAgent, deadline, 0x1000 + a * 16 + t);
    }
    threads.emplace_back(mapper, std::ref(agents[a]), deadline, 0x2000 + a);
    threads.emplace_back(replayer, std::cref(agents[a]), deadline, a == 0);
  }
  threads.emplace_back(stager, std::cref(agents[0]), std::cref(agents[1]), deadline, 0x3000);
  threads.emplace_back(inspector, deadline);
  threads.emplace_back(logger_swapper, deadline);
  threads.emplace_back(short_lived_agents, deadline);
  for (std::thread& thread : threads) {
    thread.join();
  }
  if (failed.load()) {
    ++rel_failures;
  }

  std::printf("%zu threads for %.1f s: %zu snapshots, %zu restores (%zu ranges written, %zu skipped), %zu "
              "reallocations, %zu vmem changes, %zu staging rounds, %zu warnings; %zu logger swaps, %zu inspections "
              "of published snapshots (%zu refused: freed), %zu short-lived agents\n",
              threads.size(), seconds, figures.snapshots.load(), figures.restores.load(), figures.restored.load(),
              figures.skipped.load(), figures.reallocations.load(), figures.vmem_changes.load(),
              figures.staging_rounds.load(), warnings_logged.load(), figures.logger_swaps.load(),
              figures.inspections.load(), figures.inspections_refused.load(), figures.short_agents.load());
  // The run must have raced something: restores that had to skip a region freed or reallocated meanwhile.
  REL_CHECK(figures.snapshots.load() > 0);
  REL_CHECK(figures.skipped.load() > 0);
  REL_CHECK(figures.logger_swaps.load() > 0);
  REL_CHECK(figures.short_agents.load() > 0);

  for (const Agent& agent : agents) {
    check_inventory(agent);
  }
  for (Agent& agent : agents) {
    tear_down(agent);
  }
  policy.pin_staging = false;
  REL_CHECK_STATUS(kreplay_set_policy(&policy), KREPLAY_STATUS_SUCCESS);
  const kreplay_agent_t handles[2] = {agents[0].handle, agents[1].handle};
  REL_CHECK_NO_LEAKS(start, handles, 2);
  REL_CHECK_EQ(errors_logged.load(), 0);
  return rel_finish("kreplay_reliability_concurrency");
}
