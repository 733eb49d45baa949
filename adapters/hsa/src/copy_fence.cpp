// The async-copy fence: wrappers around the program's hsa_amd_memory_async_copy, _on_engine and _rect that
// count each copy as in flight on the agents it touches (kreplay_copy_begin) until its completion signal
// fires (kreplay_copy_end from an async signal handler), so that no replay window snapshots or restores memory
// a DMA engine is still writing, and no copy starts inside a window.
//
// Which agents a copy touches: the agents the call names (dst_agent and src_agent; the rect variant's
// copy_agent), and, once a window has ever been opened, the owners of its two pointers as
// hsa_amd_pointer_info reports them. The owners matter because ROCr lets a call name any agent that can reach
// both buffers (a peer copy may name one GPU for both sides), and the rect variant names only the engine's GPU.
// Before any window they are not looked up: kreplay_copy_begin then returns the uncounted token without
// counting anything, and the wrapper costs that one relaxed load and nothing else on the way to the runtime.
//
// When the copy is done: ROCr decrements the completion signal by one when the copy finishes (or makes it
// negative on an error). The wrapper reads the signal's value v just before forwarding and registers a
// handler for "value < v", which any completion satisfies. A program that shares one signal between copies in
// flight at once ends each copy's count at the first completion among them: the fence is exact for the usual
// one-signal-per-copy (HIP) and only as good as the signal for the rest. A signal the program resets before
// the runtime's handler thread sees the decrement leaves the count up; windows on its agents then decline with
// COPIES_IN_FLIGHT after their timeout instead of replaying, which costs the replay, never the program's data.
#include "internal.hpp"
#include "table.hpp"

#include <kreplay/hsa.hpp>

#include <cstddef>
#include <cstdint>

namespace kreplay::hsa {
namespace {

// Saved by install() before the tables point at the wrappers (release), read by the wrappers (acquire); see
// install.cpp for why these are atomics. The signal and pointer entries are the ones the live tables held at
// install, the same runtime the forwarded copies reach.
std::atomic<decltype(hsa_amd_memory_async_copy)*> g_next_async_copy{nullptr};
std::atomic<decltype(hsa_amd_memory_async_copy_rect)*> g_next_async_copy_rect{nullptr};
#if KREPLAY_HSA_HAVE_COPY_ON_ENGINE
std::atomic<decltype(hsa_amd_memory_async_copy_on_engine)*> g_next_async_copy_on_engine{nullptr};
#endif
std::atomic<decltype(hsa_signal_load_relaxed)*> g_signal_load{nullptr};
std::atomic<decltype(hsa_amd_signal_async_handler)*> g_signal_async_handler{nullptr};
std::atomic<decltype(hsa_amd_pointer_info)*> g_pointer_info{nullptr};
std::atomic<bool> g_copy_wrappers_installed{false};
// Said once: a runtime that refuses async handlers refuses them for every copy.
std::atomic<bool> g_warned_handler{false};

// kreplay_copy_begin's token for a copy it did not count (no window ever opened): nothing to end.
constexpr std::uint64_t uncounted_token = 0;

// Tokens travel to the signal handler as its void* argument.
static_assert(sizeof(std::uintptr_t) >= sizeof(std::uint64_t), "a copy token must fit in a pointer");

// A copy names at most two agents and has two pointers.
constexpr std::size_t max_touched = 4;

struct touched_agents {
  kreplay_agent_t agents[max_touched];
  std::size_t count = 0;

  // Adds agent unless it is the zero handle (ROCr's "none") or already there.
  void add(hsa_agent_t agent) {
    if (agent.handle == 0 || count == max_touched) return;
    for (std::size_t i = 0; i < count; ++i) {
      if (agents[i].handle == agent.handle) return;
    }
    agents[count++] = detail::to_kreplay(agent);
  }
};

// The owner of the allocation ptr lies in, when the runtime knows one. The captured table's pointer_info
// (configure) is preferred over the live one: the host's own tracing of the live table should not see
// kreplay's queries.
void add_owner(touched_agents& touched, const void* ptr) {
  if (ptr == nullptr) return;
  auto* pointer_info = detail::runtime.pointer_info.load(std::memory_order_acquire);
  if (pointer_info == nullptr) pointer_info = g_pointer_info.load(std::memory_order_acquire);
  if (pointer_info == nullptr) return;
  hsa_amd_pointer_info_t info{};
  info.size = sizeof info;
  if (pointer_info(ptr, &info, nullptr, nullptr, nullptr) != HSA_STATUS_SUCCESS) return;
  if (info.type == HSA_EXT_POINTER_TYPE_UNKNOWN) return;
  touched.add(info.agentOwner);
}

bool on_copy_done(hsa_signal_value_t /*value*/, void* arg) {
  kreplay_copy_end(static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(arg)));
  return false;  // one completion per registration
}

// Counts the copy on the agents it touches, forwards it with submit(), and arranges the end of the count for
// when completion_signal fires. named holds the agents the call names; dst and src are its pointers.
template <typename Submit>
hsa_status_t fenced(touched_agents named, const void* dst, const void* src, hsa_signal_t completion_signal,
                    Submit submit) {
  // A call the runtime refuses before doing anything (no signal) or one that moves nothing need no fence. A
  // zero-byte copy in particular may never touch its signal, which would leave the count up for good.
  if (detail::finalized.load(std::memory_order_acquire) || completion_signal.handle == 0 || named.count == 0) {
    return submit();
  }
  std::uint64_t token = uncounted_token;
  if (kreplay_copy_begin(named.agents, named.count, &token) != KREPLAY_STATUS_SUCCESS) {
    return submit();  // not fenced; kreplay said why
  }
  if (token == uncounted_token) return submit();
  // A window has been opened at some point: count the copy on its memory's owners too. When they add agents,
  // count again with all of them (the copy has not started, so nothing is lost in between).
  touched_agents all = named;
  add_owner(all, dst);
  add_owner(all, src);
  if (all.count != named.count) {
    kreplay_copy_end(token);
    token = uncounted_token;
    if (kreplay_copy_begin(all.agents, all.count, &token) != KREPLAY_STATUS_SUCCESS) return submit();
    if (token == uncounted_token) return submit();
  }
  // Read before the copy exists: once submitted it may complete at any moment.
  const hsa_signal_value_t before = g_signal_load.load(std::memory_order_acquire)(completion_signal);
  const hsa_status_t status = submit();
  if (status != HSA_STATUS_SUCCESS) {
    kreplay_copy_end(token);  // no copy, nothing will signal
    return status;
  }
  const hsa_status_t armed = g_signal_async_handler.load(std::memory_order_acquire)(
      completion_signal, HSA_SIGNAL_CONDITION_LT, before, &on_copy_done,
      reinterpret_cast<void*>(static_cast<std::uintptr_t>(token)));
  if (armed != HSA_STATUS_SUCCESS) {
    // Nothing will tell kreplay when the copy is done, and waiting here would block the program: stop
    // counting it. A window opened while it runs may snapshot memory it is still writing.
    kreplay_copy_end(token);
    if (!g_warned_handler.exchange(true, std::memory_order_relaxed)) {
      detail::logf(KREPLAY_LOG_WARNING,
                   "hsa_amd_signal_async_handler failed (status %#x): async copies whose completion cannot be "
                   "watched are not fenced against replay windows (said once)",
                   static_cast<unsigned>(armed));
    }
  }
  return status;
}

touched_agents named_agents(hsa_agent_t dst_agent, hsa_agent_t src_agent) {
  touched_agents named;
  named.add(dst_agent);
  named.add(src_agent);
  return named;
}

hsa_status_t wrap_async_copy(void* dst, hsa_agent_t dst_agent, const void* src, hsa_agent_t src_agent,
                             std::size_t size, std::uint32_t num_dep_signals, const hsa_signal_t* dep_signals,
                             hsa_signal_t completion_signal) {
  auto* next = g_next_async_copy.load(std::memory_order_acquire);
  auto submit = [&] {
    return next(dst, dst_agent, src, src_agent, size, num_dep_signals, dep_signals, completion_signal);
  };
  if (size == 0) return submit();
  return fenced(named_agents(dst_agent, src_agent), dst, src, completion_signal, submit);
}

#if KREPLAY_HSA_HAVE_COPY_ON_ENGINE
hsa_status_t wrap_async_copy_on_engine(void* dst, hsa_agent_t dst_agent, const void* src, hsa_agent_t src_agent,
                                       std::size_t size, std::uint32_t num_dep_signals,
                                       const hsa_signal_t* dep_signals, hsa_signal_t completion_signal,
                                       hsa_amd_sdma_engine_id_t engine_id, bool force_copy_on_sdma) {
  auto* next = g_next_async_copy_on_engine.load(std::memory_order_acquire);
  auto submit = [&] {
    return next(dst, dst_agent, src, src_agent, size, num_dep_signals, dep_signals, completion_signal, engine_id,
                force_copy_on_sdma);
  };
  if (size == 0) return submit();
  return fenced(named_agents(dst_agent, src_agent), dst, src, completion_signal, submit);
}
#endif

hsa_status_t wrap_async_copy_rect(const hsa_pitched_ptr_t* dst, const hsa_dim3_t* dst_offset,
                                  const hsa_pitched_ptr_t* src, const hsa_dim3_t* src_offset, const hsa_dim3_t* range,
                                  hsa_agent_t copy_agent, hsa_amd_copy_direction_t dir, std::uint32_t num_dep_signals,
                                  const hsa_signal_t* dep_signals, hsa_signal_t completion_signal) {
  auto* next = g_next_async_copy_rect.load(std::memory_order_acquire);
  auto submit = [&] {
    return next(dst, dst_offset, src, src_offset, range, copy_agent, dir, num_dep_signals, dep_signals,
                completion_signal);
  };
  // The runtime refuses what is malformed; forward it unfenced and let it.
  if (dst == nullptr || src == nullptr || range == nullptr) return submit();
  if (range->x == 0 || range->y == 0 || range->z == 0) return submit();
  touched_agents named;
  named.add(copy_agent);
  return fenced(named, dst->base, src->base, completion_signal, submit);
}

}  // namespace

namespace detail {

void install_copy_wrappers(CoreApiTable* core, AmdExtTable* amd_ext) {
  auto load = KREPLAY_HSA_ENTRY(core, hsa_signal_load_relaxed_fn);
  auto async_handler = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_signal_async_handler_fn);
  auto copy = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_async_copy_fn);
  auto copy_rect = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_async_copy_rect_fn);
#if KREPLAY_HSA_HAVE_COPY_ON_ENGINE
  auto copy_on_engine = KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_memory_async_copy_on_engine_fn);
#endif
  if (load == nullptr || async_handler == nullptr) {
    logf(KREPLAY_LOG_WARNING, "the tables lack hsa_signal_load_relaxed or hsa_amd_signal_async_handler: async "
         "copies are not fenced against replay windows");
    return;
  }
  g_signal_load.store(load, std::memory_order_release);
  g_signal_async_handler.store(async_handler, std::memory_order_release);
  g_pointer_info.store(KREPLAY_HSA_ENTRY(amd_ext, hsa_amd_pointer_info_fn), std::memory_order_release);
  g_next_async_copy.store(copy, std::memory_order_release);
  g_next_async_copy_rect.store(copy_rect, std::memory_order_release);
#if KREPLAY_HSA_HAVE_COPY_ON_ENGINE
  g_next_async_copy_on_engine.store(copy_on_engine, std::memory_order_release);
#endif
  // As in install(): the saved entries before the first table write that can route a call to a wrapper.
  std::atomic_thread_fence(std::memory_order_release);
  if (copy != nullptr) amd_ext->hsa_amd_memory_async_copy_fn = &wrap_async_copy;
  if (copy_rect != nullptr) amd_ext->hsa_amd_memory_async_copy_rect_fn = &wrap_async_copy_rect;
#if KREPLAY_HSA_HAVE_COPY_ON_ENGINE
  if (copy_on_engine != nullptr) amd_ext->hsa_amd_memory_async_copy_on_engine_fn = &wrap_async_copy_on_engine;
  const bool on_engine = copy_on_engine != nullptr;
#else
  const bool on_engine = false;
#endif
  g_copy_wrappers_installed.store(copy != nullptr || copy_rect != nullptr || on_engine, std::memory_order_release);
  logf(KREPLAY_LOG_INFO, "async copies fenced against replay windows: async_copy %s, async_copy_rect %s, "
       "async_copy_on_engine %s", copy != nullptr ? "wrapped" : "not in the table",
       copy_rect != nullptr ? "wrapped" : "not in the table",
       on_engine ? "wrapped" : (KREPLAY_HSA_HAVE_COPY_ON_ENGINE ? "not in the table" : "not in these headers"));
}

}  // namespace detail

bool copy_wrappers_installed() { return g_copy_wrappers_installed.load(std::memory_order_acquire); }

}  // namespace kreplay::hsa
