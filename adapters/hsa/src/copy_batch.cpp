// copy_batch: many copies on the DMA engines at once (hsa_amd_memory_async_copy), and the bookkeeping of
// locked host ranges and device storage that tells which copies the engines can take.
#include "internal.hpp"

#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace kreplay::hsa::detail {

static_assert(std::is_trivially_destructible<memory_ranges>::value,
              "the range bookkeeping is used during other libraries' teardown: no destructor may run");
memory_ranges ranges{};

namespace {

using range = memory_ranges::range;

// Index of the first range whose base is above address (ranges are sorted by base). Caller holds the mutex.
std::size_t upper_bound(std::uintptr_t address) {
  std::size_t low = 0;
  std::size_t high = ranges.count;
  while (low < high) {
    const std::size_t mid = low + (high - low) / 2;
    if (ranges.ranges[mid].base <= address) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

void erase_at(std::size_t at) {
  std::memmove(&ranges.ranges[at], &ranges.ranges[at + 1], (ranges.count - at - 1) * sizeof(range));
  --ranges.count;
}

// The remembered range holding all of [address, address + bytes), or NULL. Caller holds the mutex.
const range* find(std::uintptr_t address, std::size_t bytes) {
  const std::size_t after = upper_bound(address);
  if (after == 0) return nullptr;
  const range& candidate = ranges.ranges[after - 1];
  const std::uintptr_t offset = address - candidate.base;
  if (offset >= candidate.size || bytes > candidate.size - offset) return nullptr;
  return &candidate;
}

}  // namespace

bool ranges_add(const range& added) {
  if (added.size == 0) return false;
  std::lock_guard<std::mutex> lock(ranges.mutex);
  // A range that overlaps the new one is stale (memory cannot be locked or allocated twice at once): drop it.
  std::size_t at = upper_bound(added.base);
  while (at > 0 && ranges.ranges[at - 1].base + ranges.ranges[at - 1].size > added.base) {
    erase_at(--at);
  }
  while (at < ranges.count && ranges.ranges[at].base < added.base + added.size) erase_at(at);
  if (ranges.count == ranges.capacity) {
    const std::size_t capacity = ranges.capacity == 0 ? 64 : ranges.capacity * 2;
    auto* grown = static_cast<range*>(std::realloc(ranges.ranges, capacity * sizeof(range)));
    if (grown == nullptr) return false;
    ranges.ranges = grown;
    ranges.capacity = capacity;
  }
  std::memmove(&ranges.ranges[at + 1], &ranges.ranges[at], (ranges.count - at) * sizeof(range));
  ranges.ranges[at] = added;
  ++ranges.count;
  return true;
}

void ranges_remove(std::uintptr_t base) {
  std::lock_guard<std::mutex> lock(ranges.mutex);
  const std::size_t after = upper_bound(base);
  if (after != 0 && ranges.ranges[after - 1].base == base) erase_at(after - 1);
}

namespace {

// Copies in flight at once, each with its own signal. Enough to keep an SDMA queue busy while the thread waits
// for the oldest one; few enough that a pool of them costs little (each is a kernel event in ROCr).
constexpr std::size_t window = 32;
// Copies classified per take of the range mutex, so that locking and unlocking staging on other threads is
// never held up for a whole batch.
constexpr std::size_t chunk = 256;

// One copy as the engines see it.
struct planned {
  void* dst;
  const void* src;
  std::size_t bytes;
  hsa_agent_t dst_agent;
  hsa_agent_t src_agent;
  bool async;  // false: hsa_memory_copy (pageable host memory, or nothing tells what the memory is)
};

hsa_status_t find_cpu(hsa_agent_t agent, void* data) {
  auto* ctx = static_cast<context*>(data);
  hsa_device_type_t type = HSA_DEVICE_TYPE_GPU;
  if (ctx->agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS) return HSA_STATUS_SUCCESS;
  if (type != HSA_DEVICE_TYPE_CPU) return HSA_STATUS_SUCCESS;
  ctx->cpu_agent.store(agent.handle, std::memory_order_release);
  return HSA_STATUS_INFO_BREAK;
}

// The agent of page-locked host memory in an async copy: ROCr picks the copy engine from whichever side is a
// GPU, and needs the other side's agent to be the CPU that owns system memory. 0 when none was found.
std::uint64_t cpu_agent(context* ctx) {
  std::uint64_t cpu = ctx->cpu_agent.load(std::memory_order_acquire);
  if (cpu == 0) {
    ctx->iterate_agents(&find_cpu, ctx);
    cpu = ctx->cpu_agent.load(std::memory_order_acquire);
  }
  return cpu;
}

// Fills plan[i] for copies[i]. A side inside a range that host_lock locked is host memory, addressed through
// the agent pointer ROCr returned, with the CPU agent; a side inside device storage is device memory of its
// owner. The other side of such a copy is the live range kreplay captures or restores: device memory of agent
// (a tracked allocation or a module variable). A copy with neither side known (pageable staging) goes through
// hsa_memory_copy, which handles pageable memory.
void classify(const kreplay_copy_t* copies, std::size_t n, planned* plan, hsa_agent_t agent, std::uint64_t cpu) {
  std::lock_guard<std::mutex> lock(ranges.mutex);
  for (std::size_t i = 0; i < n; ++i) {
    const kreplay_copy_t& copy = copies[i];
    planned& p = plan[i];
    p = planned{copy.dst, copy.src, copy.bytes, agent, agent, false};
    const range* dst = find(reinterpret_cast<std::uintptr_t>(copy.dst), copy.bytes);
    const range* src = find(reinterpret_cast<std::uintptr_t>(copy.src), copy.bytes);
    if (dst == nullptr && src == nullptr) continue;
    const bool dst_host = dst != nullptr && dst->kind == memory_ranges::locked_host;
    const bool src_host = src != nullptr && src->kind == memory_ranges::locked_host;
    if (dst_host && src_host) continue;  // host to host: nothing for a DMA engine
    if ((dst_host || src_host) && cpu == 0) continue;
    if (dst != nullptr) {
      p.dst = reinterpret_cast<void*>(dst->agent_base + (reinterpret_cast<std::uintptr_t>(copy.dst) - dst->base));
      p.dst_agent = hsa_agent_t{dst_host ? cpu : dst->agent};
    }
    if (src != nullptr) {
      p.src = reinterpret_cast<const void*>(src->agent_base +
                                            (reinterpret_cast<std::uintptr_t>(copy.src) - src->base));
      p.src_agent = hsa_agent_t{src_host ? cpu : src->agent};
    }
    p.async = true;
  }
}

// Takes up to want signals from the pool, creating more when it runs short; returns how many it got.
std::size_t take_signals(context* ctx, std::size_t want, hsa_signal_t* out) {
  std::size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(ctx->signal_mutex);
    while (n < want && ctx->pooled_count > 0) out[n++] = ctx->pooled_signals[--ctx->pooled_count];
  }
  while (n < want) {
    hsa_signal_t signal{0};
    const hsa_status_t status = ctx->signal_create(1, 0, nullptr, &signal);
    if (status != HSA_STATUS_SUCCESS || signal.handle == 0) {
      if (n == 0 && !ctx->warned_no_signal.exchange(true, std::memory_order_relaxed)) {
        logf(KREPLAY_LOG_WARNING,
             "hsa_signal_create failed (status %#x): batched copies go through hsa_memory_copy one at a time "
             "until a completion signal can be created",
             static_cast<unsigned>(status));
      } else {
        logf(KREPLAY_LOG_TRACE, "hsa_signal_create failed (status %#x) with %zu signals in hand",
             static_cast<unsigned>(status), n);
      }
      break;
    }
    out[n++] = signal;
  }
  return n;
}

void give_back_signals(context* ctx, const hsa_signal_t* signals, std::size_t n) {
  std::size_t kept = 0;
  {
    std::lock_guard<std::mutex> lock(ctx->signal_mutex);
    while (kept < n && ctx->pooled_count < context::max_pooled_signals) {
      ctx->pooled_signals[ctx->pooled_count++] = signals[kept++];
    }
  }
  for (std::size_t i = kept; i < n; ++i) ctx->signal_destroy(signals[i]);
}

// Waits until the copy that signal tracks is complete; true when it succeeded. ROCr decrements the signal
// from 1 to 0 on completion and makes it negative on an error; a wait may return early, so it loops.
bool wait_copy(const context* ctx, hsa_signal_t signal) {
  hsa_signal_value_t value = ctx->signal_load_scacquire(signal);
  while (value >= 1) {
    value = ctx->signal_wait_scacquire(signal, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX, HSA_WAIT_STATE_BLOCKED);
  }
  if (value == 0) return true;
  logf(KREPLAY_LOG_TRACE, "an async copy completed with signal value %lld (an error)", static_cast<long long>(value));
  return false;
}

// A copy the engines cannot take, done at once; true when it succeeded.
bool copy_now(const context* ctx, const planned& p) {
  const hsa_status_t status = ctx->memory_copy(p.dst, p.src, p.bytes);
  if (status != HSA_STATUS_SUCCESS) {
    logf(KREPLAY_LOG_TRACE, "hsa_memory_copy(%p, %p, %zu) in a batch failed (status %#x)", p.dst, p.src, p.bytes,
         static_cast<unsigned>(status));
    return false;
  }
  return true;
}

// The copies in flight: one signal per slot, the slots reused round robin.
struct copy_window {
  context* ctx;
  hsa_signal_t signals[window];
  bool busy[window] = {};
  std::size_t signal_count;
  std::size_t next = 0;

  copy_window(context* c, std::size_t want) : ctx(c), signal_count(take_signals(c, want, signals)) {}

  // Hands p to the engines in the next slot; false when the slot's previous copy or this one failed.
  bool submit(const planned& p) {
    // The slot's previous copy must be complete before its signal is armed again.
    const std::size_t slot = next;
    next = (next + 1) % signal_count;
    if (busy[slot]) {
      busy[slot] = false;
      if (!wait_copy(ctx, signals[slot])) return false;
    }
    ctx->signal_store_relaxed(signals[slot], 1);
    const hsa_status_t status =
        ctx->async_copy(p.dst, p.dst_agent, p.src, p.src_agent, p.bytes, 0, nullptr, signals[slot]);
    if (status != HSA_STATUS_SUCCESS) {
      logf(KREPLAY_LOG_TRACE, "hsa_amd_memory_async_copy(%p, %p, %zu) was refused (status %#x)", p.dst, p.src,
           p.bytes, static_cast<unsigned>(status));
      return false;
    }
    busy[slot] = true;
    return true;
  }

  // Waits for every copy submitted, also after a failure: until then the engines may still write.
  bool drain() {
    bool ok = true;
    for (std::size_t slot = 0; slot < signal_count; ++slot) {
      if (busy[slot] && !wait_copy(ctx, signals[slot])) ok = false;
    }
    return ok;
  }

  void release() { give_back_signals(ctx, signals, signal_count); }
};

// One planned copy: through the engines where it can go, else at once.
bool run_copy(const context* ctx, copy_window& in_flight, const planned& p) {
  if (p.bytes == 0) return true;
  if (!p.async || in_flight.signal_count == 0) return copy_now(ctx, p);
  return in_flight.submit(p);
}

}  // namespace

kreplay_status_t op_copy_batch(void* user_data, kreplay_agent_t agent, const kreplay_copy_t* copies,
                               std::size_t count) {
  auto* ctx = static_cast<context*>(user_data);
  if (ctx == nullptr || (copies == nullptr && count != 0)) return KREPLAY_STATUS_INVALID_ARGUMENT;
  if (count == 0) return KREPLAY_STATUS_SUCCESS;

  const std::uint64_t cpu = cpu_agent(ctx);
  copy_window in_flight(ctx, count < window ? count : window);
  bool failed = false;
  planned plan[chunk];
  for (std::size_t first = 0; first < count && !failed; first += chunk) {
    const std::size_t n = count - first < chunk ? count - first : chunk;
    classify(copies + first, n, plan, to_hsa(agent), cpu);
    for (std::size_t i = 0; i < n && !failed; ++i) failed = !run_copy(ctx, in_flight, plan[i]);
  }
  if (!in_flight.drain()) failed = true;
  in_flight.release();
  if (failed) {
    logf(KREPLAY_LOG_TRACE, "a batch of %zu copies for agent %#llx failed", count,
         static_cast<unsigned long long>(agent.handle));
    return KREPLAY_STATUS_DEVICE_ERROR;
  }
  return KREPLAY_STATUS_SUCCESS;
}

void destroy_signal_pool(context* ctx) {
  std::lock_guard<std::mutex> lock(ctx->signal_mutex);
  for (std::size_t i = 0; i < ctx->pooled_count; ++i) ctx->signal_destroy(ctx->pooled_signals[i]);
  ctx->pooled_count = 0;
}

}  // namespace kreplay::hsa::detail
