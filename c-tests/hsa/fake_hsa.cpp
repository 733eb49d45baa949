// The fake ROCr behind the HSA adapter's tests (see fake_hsa.hpp).
#include "fake_hsa.hpp"

#include <hsa/hsa_ven_amd_loader.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace fake {

state_t state;
agents_t agents;
pools_t pools;
hsa_region_t gpu_region;
std::vector<executable_t> executables;

namespace {
// The memory of destroyed executables' symbols, poisoned with kDestroyedFill.
struct destroyed_t {
  void* address;
  std::size_t size;
};
constexpr unsigned char kDestroyedFill = 0xDD;
std::vector<destroyed_t> destroyed_memory;
}  // namespace
int host_iterator_calls = 0;
hsa_status_t host_iterator_result = HSA_STATUS_SUCCESS;
bool host_iterator_ignores_visit = false;

namespace {

struct allocation_t {
  char* base;
  std::size_t size;
  hsa_amd_memory_pool_t pool;
};

struct locked_t {
  void* ptr;
  std::size_t size;
};

// Serialises the fake's entry points, so that tests may call through the tables from several threads.
// Recursive: the symbol walks call back into the adapter, which queries symbols. hsa_memory_copy does not
// take it (only the thread that snapshots copies), so a copy never waits on a thread that waits on kreplay.
std::recursive_mutex fake_mutex;
using guard_t = std::lock_guard<std::recursive_mutex>;

std::vector<allocation_t> allocations;
std::vector<locked_t> locked;
std::uint64_t next_symbol_handle = 0;

struct pool_desc_t {
  hsa_amd_memory_pool_t pool;
  hsa_agent_t owner;
  std::uint32_t global_flags;
  bool runtime_alloc;
};

struct signal_t {
  std::int64_t value;
  int pending;  // async copies queued with this signal
};

struct async_copy_t {
  void* dst;
  const void* src;
  std::size_t bytes;
  std::uint64_t signal;
  std::int64_t value_at_submit;
  bool fault;
  // hsa_amd_memory_async_copy_rect: the copy is range.x bytes by range.y rows by range.z layers
  bool rect;
  hsa_pitched_ptr_t rect_dst;
  hsa_pitched_ptr_t rect_src;
  hsa_dim3_t dst_offset;
  hsa_dim3_t src_offset;
  hsa_dim3_t range;
};

// hsa_amd_signal_async_handler registrations not yet fired (or fired and asked to stay).
struct async_handler_t {
  std::uint64_t signal;
  hsa_signal_condition_t condition;
  hsa_signal_value_t value;
  hsa_amd_signal_handler handler;
  void* arg;
};

std::vector<std::pair<std::uint64_t, signal_t*>> signals;
std::vector<async_copy_t> pending;
std::vector<async_handler_t> handlers;

// Rebuilt by reset() from the agent and pool handles.
std::vector<pool_desc_t> pool_descs;

const pool_desc_t* find_pool(hsa_amd_memory_pool_t pool) {
  for (const auto& desc : pool_descs) {
    if (desc.pool.handle == pool.handle) return &desc;
  }
  return nullptr;
}

std::size_t bytes_in(hsa_amd_memory_pool_t pool) {
  std::size_t bytes = 0;
  for (const auto& a : allocations) {
    if (a.pool.handle == pool.handle) bytes += a.size;
  }
  return bytes;
}

hsa_status_t allocate(hsa_amd_memory_pool_t pool, std::size_t size, void** ptr) {
  if (ptr == nullptr || size == 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  const pool_desc_t* desc = find_pool(pool);
  if (desc == nullptr) return static_cast<hsa_status_t>(HSA_STATUS_ERROR_INVALID_MEMORY_POOL);
  if (!desc->runtime_alloc) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  const bool gpu_coarse = pool.handle == pools.gpu_coarse.handle || pool.handle == pools.gpu2_coarse.handle;
  if (gpu_coarse && state.gpu_capacity != 0 && bytes_in(pool) + size > state.gpu_capacity) {
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  auto* base = static_cast<char*>(std::calloc(1, size));
  if (base == nullptr) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  allocations.push_back({base, size, pool});
  *ptr = base;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t release(void* ptr) {
  auto it = std::find_if(allocations.begin(), allocations.end(), [ptr](const allocation_t& a) { return a.base == ptr; });
  if (it == allocations.end()) return HSA_STATUS_ERROR_INVALID_ALLOCATION;
  if (state.fail_next_frees > 0) {
    --state.fail_next_frees;
    return HSA_STATUS_ERROR;
  }
  if (state.on_free != nullptr) state.on_free(ptr);
  // Poison before giving the memory back, so a late restore would at least be visible under a debugger.
  std::memset(it->base, 0xDD, it->size);
  std::free(it->base);
  allocations.erase(it);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_memory_allocate(hsa_region_t region, std::size_t size, void** ptr) {
  guard_t guard(fake_mutex);
  ++state.memory_allocate_calls;
  if (region.handle != gpu_region.handle) return HSA_STATUS_ERROR_INVALID_REGION;
  return allocate(pools.gpu_coarse, size, ptr);
}

hsa_status_t fake_memory_free(void* ptr) {
  guard_t guard(fake_mutex);
  ++state.memory_free_calls;
  return release(ptr);
}

hsa_status_t fake_pool_allocate(hsa_amd_memory_pool_t pool, std::size_t size, std::uint32_t /*flags*/, void** ptr) {
  guard_t guard(fake_mutex);
  ++state.pool_allocate_calls;
  if (state.oom_next_pool_allocations > 0) {
    --state.oom_next_pool_allocations;
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  return allocate(pool, size, ptr);
}

hsa_status_t fake_pool_free(void* ptr) {
  guard_t guard(fake_mutex);
  ++state.pool_free_calls;
  return release(ptr);
}

hsa_status_t fake_memory_copy(void* dst, const void* src, std::size_t size) {
  ++state.copy_calls;
  if (dst == nullptr || src == nullptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  std::memmove(dst, src, size);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_pointer_info(const void* ptr, hsa_amd_pointer_info_t* info, void* (*/*alloc*/)(std::size_t),
                               std::uint32_t* /*num_agents*/, hsa_agent_t** /*accessible*/) {
  guard_t guard(fake_mutex);
  ++state.pointer_info_calls;
  if (info == nullptr || ptr == nullptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (state.fail_pointer_info) return HSA_STATUS_ERROR;
  const auto* at = static_cast<const char*>(ptr);
  const std::uint32_t short_size = static_cast<std::uint32_t>(offsetof(hsa_amd_pointer_info_t, global_flags));
  if (state.short_pointer_info) info->size = std::min(info->size, short_size);
  for (const auto& a : allocations) {
    if (at >= a.base && at < a.base + a.size) {
      const pool_desc_t* desc = find_pool(a.pool);
      info->type = HSA_EXT_POINTER_TYPE_HSA;
      info->agentBaseAddress = a.base;
      info->hostBaseAddress = a.base;
      info->sizeInBytes = a.size;
      info->userData = nullptr;
      info->agentOwner = desc->owner;
      if (!state.short_pointer_info) info->global_flags = desc->global_flags;
      return HSA_STATUS_SUCCESS;
    }
  }
  info->type = HSA_EXT_POINTER_TYPE_UNKNOWN;
  return HSA_STATUS_SUCCESS;
}

// HSA_AMD_AGENT_INFO_MEMORY_AVAIL, which the installed ROCr headers may predate.
constexpr unsigned memory_avail_attribute = 0xA015;

hsa_status_t memory_avail(hsa_agent_t agent, void* value) {
  ++state.memory_avail_queries;
  hsa_amd_memory_pool_t pool{};
  if (agent.handle == agents.gpu.handle) {
    pool = pools.gpu_coarse;
  } else if (agent.handle == agents.gpu2.handle) {
    pool = pools.gpu2_coarse;
  } else {
    return HSA_STATUS_ERROR_INVALID_AGENT;
  }
  if (state.fail_memory_avail) return HSA_STATUS_ERROR;
  const std::size_t used = bytes_in(pool);
  const std::uint64_t avail = state.gpu_capacity == 0 ? UINT64_MAX
                              : used >= state.gpu_capacity ? 0
                                                           : state.gpu_capacity - used;
  std::memcpy(value, &avail, sizeof avail);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void* value) {
  if (static_cast<unsigned>(attribute) == memory_avail_attribute) return memory_avail(agent, value);
  if (attribute != HSA_AGENT_INFO_DEVICE) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  hsa_device_type_t type;
  if (agent.handle == agents.cpu.handle) {
    type = HSA_DEVICE_TYPE_CPU;
  } else if (agent.handle == agents.gpu.handle || agent.handle == agents.gpu2.handle) {
    type = HSA_DEVICE_TYPE_GPU;
  } else {
    return HSA_STATUS_ERROR_INVALID_AGENT;
  }
  std::memcpy(value, &type, sizeof type);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_iterate_agents(hsa_status_t (*callback)(hsa_agent_t, void*), void* data) {
  for (hsa_agent_t agent : {agents.cpu, agents.gpu, agents.gpu2}) {
    hsa_status_t status = callback(agent, data);
    if (status != HSA_STATUS_SUCCESS) return status;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_agent_iterate_memory_pools(hsa_agent_t agent, hsa_status_t (*callback)(hsa_amd_memory_pool_t, void*),
                                             void* data) {
  for (const auto& desc : pool_descs) {
    if (desc.owner.handle != agent.handle) continue;
    hsa_status_t status = callback(desc.pool, data);
    if (status != HSA_STATUS_SUCCESS) return status;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_memory_pool_get_info(hsa_amd_memory_pool_t pool, hsa_amd_memory_pool_info_t attribute,
                                       void* value) {
  const pool_desc_t* desc = find_pool(pool);
  if (desc == nullptr) return static_cast<hsa_status_t>(HSA_STATUS_ERROR_INVALID_MEMORY_POOL);
  switch (attribute) {
    case HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS:
      std::memcpy(value, &desc->global_flags, sizeof desc->global_flags);
      return HSA_STATUS_SUCCESS;
    case HSA_AMD_MEMORY_POOL_INFO_SEGMENT: {
      const hsa_amd_segment_t segment = HSA_AMD_SEGMENT_GLOBAL;
      std::memcpy(value, &segment, sizeof segment);
      return HSA_STATUS_SUCCESS;
    }
    case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED:
      std::memcpy(value, &desc->runtime_alloc, sizeof desc->runtime_alloc);
      return HSA_STATUS_SUCCESS;
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
}

hsa_status_t fake_agent_memory_pool_get_info(hsa_agent_t agent, hsa_amd_memory_pool_t pool,
                                             hsa_amd_agent_memory_pool_info_t attribute, void* value) {
  const pool_desc_t* desc = find_pool(pool);
  if (desc == nullptr) return static_cast<hsa_status_t>(HSA_STATUS_ERROR_INVALID_MEMORY_POOL);
  if (attribute != HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  hsa_amd_memory_pool_access_t access = HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT;
  if (desc->owner.handle != agent.handle) access = HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED;
  if (state.gpu2_access_disallowed && pool.handle == pools.gpu2_coarse.handle) {
    access = HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT;
  }
  std::memcpy(value, &access, sizeof access);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_agents_allow_access(std::uint32_t num_agents, const hsa_agent_t* agent_list,
                                      const std::uint32_t* /*flags*/, const void* ptr) {
  guard_t guard(fake_mutex);
  ++state.allow_access_calls;
  if (num_agents == 0 || agent_list == nullptr || ptr == nullptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  return HSA_STATUS_SUCCESS;
}

// ---- Signals and async copies ----------------------------------------------------------------------------

signal_t* find_signal(hsa_signal_t signal) {
  for (auto& entry : signals) {
    if (entry.first == signal.handle) return entry.second;
  }
  return nullptr;
}

bool satisfied(hsa_signal_condition_t condition, hsa_signal_value_t value, hsa_signal_value_t compare) {
  switch (condition) {
    case HSA_SIGNAL_CONDITION_EQ: return value == compare;
    case HSA_SIGNAL_CONDITION_NE: return value != compare;
    case HSA_SIGNAL_CONDITION_LT: return value < compare;
    case HSA_SIGNAL_CONDITION_GTE: return value >= compare;
  }
  return false;
}

// Runs the handlers registered on signal whose condition its value now meets, as ROCr's async-event thread
// would (here on the thread that changed the value, with the fake's lock held: the adapter's handler only
// ends a kreplay token). A handler that returns true stays registered.
void fire_handlers(std::uint64_t signal, hsa_signal_value_t value) {
  for (std::size_t i = 0; i < handlers.size();) {
    const async_handler_t h = handlers[i];
    if (h.signal != signal || !satisfied(h.condition, value, h.value)) {
      ++i;
      continue;
    }
    handlers.erase(handlers.begin() + static_cast<std::ptrdiff_t>(i));
    ++state.async_handlers_fired;
    if (h.handler(value, h.arg)) handlers.insert(handlers.begin() + static_cast<std::ptrdiff_t>(i++), h);
  }
}

void perform(const async_copy_t& copy) {
  if (copy.fault) return;
  if (!copy.rect) {
    std::memmove(copy.dst, copy.src, copy.bytes);
    return;
  }
  for (std::size_t z = 0; z < copy.range.z; ++z) {
    for (std::size_t y = 0; y < copy.range.y; ++y) {
      char* to = static_cast<char*>(copy.rect_dst.base) + (copy.dst_offset.z + z) * copy.rect_dst.slice +
                 (copy.dst_offset.y + y) * copy.rect_dst.pitch + copy.dst_offset.x;
      const char* from = static_cast<const char*>(copy.rect_src.base) + (copy.src_offset.z + z) * copy.rect_src.slice +
                         (copy.src_offset.y + y) * copy.rect_src.pitch + copy.src_offset.x;
      std::memmove(to, from, copy.range.x);
    }
  }
}

// Completes the queued copy at index: its bytes land, then its signal takes the value captured at submission
// minus one (negative on a fault) and the handlers waiting for that run.
void complete_at(std::size_t index) {
  const async_copy_t copy = pending[index];
  pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(index));
  perform(copy);
  ++state.async_copies_done;
  signal_t* s = find_signal(hsa_signal_t{copy.signal});
  if (s == nullptr) return;
  --s->pending;
  // The engine writes what it computed at submission, not an atomic decrement.
  s->value = copy.fault ? -1 : copy.value_at_submit - 1;
  fire_handlers(copy.signal, s->value);
}

hsa_status_t fake_signal_create(hsa_signal_value_t initial, std::uint32_t /*num_consumers*/,
                                const hsa_agent_t* /*consumers*/, hsa_signal_t* signal) {
  guard_t guard(fake_mutex);
  ++state.signal_create_calls;
  if (signal == nullptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (state.signal_create_budget == 0) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  if (state.signal_create_budget > 0) --state.signal_create_budget;
  auto* created = new signal_t{initial, 0};
  signals.emplace_back(reinterpret_cast<std::uintptr_t>(created), created);
  ++state.signals_live;
  signal->handle = reinterpret_cast<std::uintptr_t>(created);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_signal_destroy(hsa_signal_t signal) {
  guard_t guard(fake_mutex);
  auto it = std::find_if(signals.begin(), signals.end(), [&](const auto& e) { return e.first == signal.handle; });
  if (it == signals.end()) return HSA_STATUS_ERROR_INVALID_SIGNAL;
  if (it->second->pending != 0) ++state.signal_misuse;
  // ROCr leaves a handler on a destroyed signal undefined: the adapter's must have run by now.
  for (const auto& h : handlers) {
    if (h.signal == signal.handle) ++state.signal_misuse;
  }
  delete it->second;
  signals.erase(it);
  --state.signals_live;
  return HSA_STATUS_SUCCESS;
}

void fake_signal_store_relaxed(hsa_signal_t signal, hsa_signal_value_t value) {
  guard_t guard(fake_mutex);
  signal_t* s = find_signal(signal);
  if (s == nullptr) {
    ++state.signal_misuse;
    return;
  }
  if (s->pending != 0) ++state.signal_misuse;
  s->value = value;
  fire_handlers(signal.handle, value);
}

hsa_signal_value_t fake_signal_load_relaxed(hsa_signal_t signal) {
  guard_t guard(fake_mutex);
  ++state.signal_load_calls;
  signal_t* s = find_signal(signal);
  if (s == nullptr) {
    ++state.signal_misuse;
    return -1;
  }
  return s->value;
}

hsa_status_t fake_signal_async_handler(hsa_signal_t signal, hsa_signal_condition_t condition,
                                       hsa_signal_value_t value, hsa_amd_signal_handler handler, void* arg) {
  guard_t guard(fake_mutex);
  ++state.async_handler_calls;
  if (state.fail_async_handler) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  signal_t* s = find_signal(signal);
  if (s == nullptr) return HSA_STATUS_ERROR_INVALID_SIGNAL;
  if (handler == nullptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  handlers.push_back(async_handler_t{signal.handle, condition, value, handler, arg});
  // A condition met already is seen at once, as ROCr's event thread would on its next look.
  fire_handlers(signal.handle, s->value);
  return HSA_STATUS_SUCCESS;
}

// Completes queued copies in submission order until none is left for signal (all of them when signal is 0).
void complete_until(std::uint64_t signal) {
  while (!pending.empty()) {
    if (signal != 0) {
      signal_t* s = find_signal(hsa_signal_t{signal});
      if (s == nullptr || s->pending == 0) return;
    }
    complete_at(0);
  }
}

hsa_signal_value_t fake_signal_load_scacquire(hsa_signal_t signal) {
  guard_t guard(fake_mutex);
  signal_t* s = find_signal(signal);
  if (s == nullptr) {
    ++state.signal_misuse;
    return -1;
  }
  return s->value;
}

hsa_signal_value_t fake_signal_wait_scacquire(hsa_signal_t signal, hsa_signal_condition_t condition,
                                              hsa_signal_value_t compare_value, std::uint64_t /*timeout*/,
                                              hsa_wait_state_t /*wait_state*/) {
  guard_t guard(fake_mutex);
  signal_t* s = find_signal(signal);
  if (s == nullptr || condition != HSA_SIGNAL_CONDITION_LT) {
    ++state.signal_misuse;
    return -1;
  }
  if (s->value >= compare_value) complete_until(signal.handle);
  return s->value;
}

// What a pointer of the fake is: 'd' device memory of owner (an allocation, or a module variable's storage),
// 'l' locked host memory, 'p' pageable host memory.
char classify(const void* ptr, std::size_t bytes, hsa_agent_t* owner) {
  const auto* at = static_cast<const char*>(ptr);
  for (const auto& a : allocations) {
    if (at >= a.base && at + bytes <= a.base + a.size) {
      *owner = find_pool(a.pool)->owner;
      return 'd';
    }
  }
  for (const auto& e : executables) {
    for (const auto& sym : e.symbols) {
      const auto* base = static_cast<const char*>(sym.address);
      if (base != nullptr && at >= base && at + bytes <= base + sym.size) {
        *owner = sym.agent;
        return 'd';
      }
    }
  }
  for (const auto& l : locked) {
    const auto* base = static_cast<const char*>(l.ptr);
    if (at >= base && at + bytes <= base + l.size) return 'l';
  }
  return 'p';
}

hsa_status_t fake_async_copy(void* dst, hsa_agent_t dst_agent, const void* src, hsa_agent_t src_agent,
                             std::size_t size, std::uint32_t num_dep_signals, const hsa_signal_t* /*dep_signals*/,
                             hsa_signal_t completion_signal) {
  guard_t guard(fake_mutex);
  ++state.async_copy_calls;
  state.last_async_copy = async_call_t{dst, src, size, completion_signal.handle};
  if (state.fail_async_submit_at != 0 && state.async_copy_calls == state.fail_async_submit_at) {
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  signal_t* s = find_signal(completion_signal);
  if (dst == nullptr || src == nullptr || s == nullptr || num_dep_signals != 0) {
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  // Each side's agent must be the one that owns it: the memory's GPU, or the CPU for locked host memory.
  for (int side = 0; side < 2; ++side) {
    const void* ptr = side == 0 ? dst : src;
    const hsa_agent_t agent = side == 0 ? dst_agent : src_agent;
    hsa_agent_t owner{0};
    const char kind = classify(ptr, size, &owner);
    if (kind == 'd' && owner.handle != agent.handle) ++state.async_bad_agent;
    if (kind == 'l' && agent.handle != agents.cpu.handle) ++state.async_bad_agent;
    if (kind == 'p') {
      ++state.async_pageable;
      return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
  }
  const bool fault = state.fault_async_copy_at != 0 && state.async_copy_calls == state.fault_async_copy_at;
  if (s->pending != 0) ++state.signal_misuse;
  ++s->pending;
  pending.push_back(async_copy_t{dst, src, size, completion_signal.handle, s->value, fault, false, {}, {}, {}, {}, {}});
  state.max_in_flight = std::max(state.max_in_flight, static_cast<int>(pending.size()));
  return HSA_STATUS_SUCCESS;
}

#if KREPLAY_HSA_HAVE_COPY_ON_ENGINE
hsa_status_t fake_async_copy_on_engine(void* dst, hsa_agent_t dst_agent, const void* src, hsa_agent_t src_agent,
                                       std::size_t size, std::uint32_t num_dep_signals,
                                       const hsa_signal_t* dep_signals, hsa_signal_t completion_signal,
                                       hsa_amd_sdma_engine_id_t /*engine_id*/, bool /*force_copy_on_sdma*/) {
  guard_t guard(fake_mutex);
  ++state.async_copy_on_engine_calls;
  return fake_async_copy(dst, dst_agent, src, src_agent, size, num_dep_signals, dep_signals, completion_signal);
}
#endif

hsa_status_t fake_async_copy_rect(const hsa_pitched_ptr_t* dst, const hsa_dim3_t* dst_offset,
                                  const hsa_pitched_ptr_t* src, const hsa_dim3_t* src_offset, const hsa_dim3_t* range,
                                  hsa_agent_t copy_agent, hsa_amd_copy_direction_t /*dir*/,
                                  std::uint32_t num_dep_signals, const hsa_signal_t* /*dep_signals*/,
                                  hsa_signal_t completion_signal) {
  guard_t guard(fake_mutex);
  ++state.async_copy_calls;
  ++state.async_copy_rect_calls;
  if (dst == nullptr || src == nullptr || dst_offset == nullptr || src_offset == nullptr || range == nullptr) {
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  state.last_async_copy = async_call_t{dst->base, src->base, range->x, completion_signal.handle};
  if (state.fail_async_submit_at != 0 && state.async_copy_calls == state.fail_async_submit_at) {
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  }
  signal_t* s = find_signal(completion_signal);
  // ROCr's rect copies run on a GPU's engine.
  const bool gpu = copy_agent.handle == agents.gpu.handle || copy_agent.handle == agents.gpu2.handle;
  if (s == nullptr || num_dep_signals != 0 || !gpu) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  if (s->pending != 0) ++state.signal_misuse;
  ++s->pending;
  pending.push_back(async_copy_t{nullptr, nullptr, 0, completion_signal.handle, s->value, false, true, *dst, *src,
                                 *dst_offset, *src_offset, *range});
  state.max_in_flight = std::max(state.max_in_flight, static_cast<int>(pending.size()));
  return HSA_STATUS_SUCCESS;
}

// ---- Executables ------------------------------------------------------------------------------------------

hsa_status_t fake_executable_destroy(hsa_executable_t executable) {
  guard_t guard(fake_mutex);
  ++state.executable_calls;
  auto it = std::find_if(executables.begin(), executables.end(),
                         [&](const executable_t& e) { return e.handle != 0 && e.handle == executable.handle; });
  if (it == executables.end()) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  // Its segment stays mapped but belongs to nobody: poisoned, so a later write into it shows
  // (destroyed_memory_intact), and given back at reset.
  for (auto& sym : it->symbols) {
    if (sym.address == nullptr) continue;
    std::memset(sym.address, kDestroyedFill, sym.size);
    destroyed_memory.push_back(destroyed_t{sym.address, sym.size});
  }
  // ROCr's loader keeps the slot and reports it with a zero handle from then on.
  it->handle = 0;
  it->symbols.clear();
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_executable_freeze(hsa_executable_t /*executable*/, const char* /*options*/) {
  guard_t guard(fake_mutex);
  ++state.executable_calls;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_load_code_object(hsa_executable_t, hsa_agent_t, hsa_code_object_t, const char*) {
  guard_t guard(fake_mutex);
  ++state.executable_calls;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_load_program_code_object(hsa_executable_t, hsa_code_object_reader_t, const char*,
                                           hsa_loaded_code_object_t*) {
  guard_t guard(fake_mutex);
  ++state.executable_calls;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_load_agent_code_object(hsa_executable_t, hsa_agent_t, hsa_code_object_reader_t, const char*,
                                         hsa_loaded_code_object_t*) {
  guard_t guard(fake_mutex);
  ++state.executable_calls;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_global_variable_define(hsa_executable_t, const char*, void*) {
  guard_t guard(fake_mutex);
  ++state.executable_calls;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_agent_variable_define(hsa_executable_t, hsa_agent_t, const char*, void*) {
  guard_t guard(fake_mutex);
  ++state.executable_calls;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_memory_lock(void* host_ptr, std::size_t size, hsa_agent_t* agent_list, int num_agent,
                              void** agent_ptr) {
  guard_t guard(fake_mutex);
  ++state.lock_calls;
  if (agent_list != nullptr || num_agent != 0) ++state.lock_calls_with_agents;
  if (host_ptr == nullptr || size == 0 || agent_ptr == nullptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  locked.push_back({host_ptr, size});
  ++state.locked_ranges;
  *agent_ptr = host_ptr;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_memory_unlock(void* host_ptr) {
  guard_t guard(fake_mutex);
  ++state.unlock_calls;
  auto it = std::find_if(locked.begin(), locked.end(), [host_ptr](const locked_t& l) { return l.ptr == host_ptr; });
  if (it == locked.end()) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  locked.erase(it);
  --state.locked_ranges;
  return HSA_STATUS_SUCCESS;
}

executable_t* find_executable(hsa_executable_t executable) {
  if (executable.handle == 0) return nullptr;
  for (auto& e : executables) {
    if (e.handle == executable.handle) return &e;
  }
  return nullptr;
}

// Symbol handle -> (executable, position), so that a scan of thousands of symbols does not search them all
// for every query. Checked on use: tests edit fake::executables directly, and a stale entry falls back to the
// search.
std::unordered_map<std::uint64_t, std::pair<std::size_t, std::size_t>> symbol_index;

void index_symbols(std::size_t executable) {
  const auto& symbols = executables[executable].symbols;
  for (std::size_t i = 0; i < symbols.size(); ++i) symbol_index[symbols[i].handle] = {executable, i};
}

const symbol_t* find_symbol(hsa_executable_symbol_t symbol) {
  const auto it = symbol_index.find(symbol.handle);
  if (it != symbol_index.end() && it->second.first < executables.size()) {
    const auto& symbols = executables[it->second.first].symbols;
    if (it->second.second < symbols.size() && symbols[it->second.second].handle == symbol.handle) {
      return &symbols[it->second.second];
    }
  }
  for (const auto& e : executables) {
    for (const auto& s : e.symbols) {
      if (s.handle == symbol.handle) return &s;
    }
  }
  return nullptr;
}

hsa_status_t fake_iterate_agent_symbols(hsa_executable_t executable, hsa_agent_t agent,
                                        hsa_status_t (*callback)(hsa_executable_t, hsa_agent_t,
                                                                 hsa_executable_symbol_t, void*),
                                        void* data) {
  guard_t guard(fake_mutex);
  ++state.symbol_walks;
  executable_t* e = find_executable(executable);
  if (e == nullptr) return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
  if (e->fail_iteration) return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  for (const auto& s : e->symbols) {
    if (s.agent.handle != agent.handle) continue;
    hsa_status_t status = callback(executable, agent, hsa_executable_symbol_t{s.handle}, data);
    if (status != HSA_STATUS_SUCCESS) return status;
  }
  return HSA_STATUS_SUCCESS;
}

template <typename T>
hsa_status_t put(void* value, T v) {
  std::memcpy(value, &v, sizeof v);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_symbol_get_info(hsa_executable_symbol_t symbol, hsa_executable_symbol_info_t attribute,
                                  void* value) {
  guard_t guard(fake_mutex);
  ++state.symbol_queries;
  const symbol_t* s = find_symbol(symbol);
  if (s == nullptr) return HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
  if (s->fail_attribute == static_cast<int>(attribute)) return HSA_STATUS_ERROR;
  switch (attribute) {
    case HSA_EXECUTABLE_SYMBOL_INFO_TYPE: return put(value, s->kind);
    case HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH: return put(value, static_cast<std::uint32_t>(s->name.size()));
    case HSA_EXECUTABLE_SYMBOL_INFO_NAME:
      std::memcpy(value, s->name.data(), s->name.size());  // no terminator, as ROCr
      return HSA_STATUS_SUCCESS;
    default: break;
  }
  if (s->kind != HSA_SYMBOL_KIND_VARIABLE) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch (attribute) {
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS:
      return put(value, static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(s->address)));
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE: return put(value, s->size);
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SEGMENT: return put(value, s->segment);
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST: return put(value, s->is_const);
    case HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ALLOCATION: return put(value, HSA_VARIABLE_ALLOCATION_AGENT);
    default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
}

hsa_status_t loader_iterate_executables(hsa_status_t (*callback)(hsa_executable_t, void*), void* data) {
  guard_t guard(fake_mutex);
  for (const auto& e : executables) {
    if (e.handle == 0) ++state.null_executables_reported;
    hsa_status_t status = callback(hsa_executable_t{e.handle}, data);
    if (status != HSA_STATUS_SUCCESS) return status;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t fake_get_major_extension_table(std::uint16_t extension, std::uint16_t version_major,
                                            std::size_t table_length, void* table) {
  guard_t guard(fake_mutex);
  ++state.loader_table_requests;
  if (state.fail_loader_table) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (extension != HSA_EXTENSION_AMD_LOADER || version_major != 1 || table == nullptr) {
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  hsa_ven_amd_loader_1_03_pfn_t loader;
  std::memset(&loader, 0, sizeof loader);
  loader.hsa_ven_amd_loader_iterate_executables = &loader_iterate_executables;
  std::memcpy(table, &loader, std::min(table_length, sizeof loader));
  return HSA_STATUS_SUCCESS;
}

void release_everything() {
  for (auto& d : destroyed_memory) std::free(d.address);
  destroyed_memory.clear();
  for (auto& a : allocations) std::free(a.base);
  allocations.clear();
  locked.clear();
  pending.clear();
  handlers.clear();
  for (auto& entry : signals) delete entry.second;
  signals.clear();
  for (auto& e : executables) {
    for (auto& s : e.symbols) std::free(s.address);
  }
  executables.clear();
  symbol_index.clear();
}

// Gives the fake's memory back at exit, before the containers that point at it are destroyed, so that a
// leak checker reports only real leaks.
struct release_at_exit_t {
  ~release_at_exit_t() { release_everything(); }
} release_at_exit;

}  // namespace

void reset(std::uint64_t base) {
  release_everything();
  state = state_t{};
  agents = {hsa_agent_t{base + 0x100}, hsa_agent_t{base + 0x200}, hsa_agent_t{base + 0x300}};
  pools = {hsa_amd_memory_pool_t{base + 0x1000}, hsa_amd_memory_pool_t{base + 0x1001},
           hsa_amd_memory_pool_t{base + 0x1002}, hsa_amd_memory_pool_t{base + 0x1003},
           hsa_amd_memory_pool_t{base + 0x1004}, hsa_amd_memory_pool_t{base + 0x1005}};
  gpu_region = hsa_region_t{base + 0x2001};
  pool_descs = {
      {pools.gpu_coarse_fixed, agents.gpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, false},
      {pools.gpu_coarse, agents.gpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, true},
      {pools.gpu_fine, agents.gpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, true},
      {pools.gpu2_coarse, agents.gpu2, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, true},
      {pools.cpu_kernarg, agents.cpu,
       HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, true},
      {pools.cpu_fine, agents.cpu, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, true},
  };
  next_symbol_handle = base + 0x10000;
  // The slot of a destroyed executable, reported first by the loader iteration.
  executables.push_back(executable_t{0, {}, false});
  host_iterator_calls = 0;
  host_iterator_result = HSA_STATUS_SUCCESS;
  host_iterator_ignores_visit = false;
}

void fill_tables(CoreApiTable* core, AmdExtTable* amd_ext) {
  std::memset(core, 0, sizeof *core);
  std::memset(amd_ext, 0, sizeof *amd_ext);
  core->version.major_id = HSA_CORE_API_TABLE_MAJOR_VERSION;
  core->version.minor_id = sizeof(CoreApiTable);
  amd_ext->version.major_id = HSA_AMD_EXT_API_TABLE_MAJOR_VERSION;
  amd_ext->version.minor_id = sizeof(AmdExtTable);
  core->hsa_memory_allocate_fn = &fake_memory_allocate;
  core->hsa_memory_free_fn = &fake_memory_free;
  core->hsa_memory_copy_fn = &fake_memory_copy;
  core->hsa_agent_get_info_fn = &fake_agent_get_info;
  core->hsa_iterate_agents_fn = &fake_iterate_agents;
  core->hsa_executable_iterate_agent_symbols_fn = &fake_iterate_agent_symbols;
  core->hsa_executable_symbol_get_info_fn = &fake_symbol_get_info;
  core->hsa_system_get_major_extension_table_fn = &fake_get_major_extension_table;
  amd_ext->hsa_amd_memory_pool_allocate_fn = &fake_pool_allocate;
  amd_ext->hsa_amd_memory_pool_free_fn = &fake_pool_free;
  amd_ext->hsa_amd_pointer_info_fn = &fake_pointer_info;
  amd_ext->hsa_amd_memory_lock_fn = &fake_memory_lock;
  amd_ext->hsa_amd_memory_unlock_fn = &fake_memory_unlock;
  amd_ext->hsa_amd_agent_iterate_memory_pools_fn = &fake_agent_iterate_memory_pools;
  amd_ext->hsa_amd_memory_pool_get_info_fn = &fake_memory_pool_get_info;
  amd_ext->hsa_amd_agent_memory_pool_get_info_fn = &fake_agent_memory_pool_get_info;
  amd_ext->hsa_amd_agents_allow_access_fn = &fake_agents_allow_access;
  amd_ext->hsa_amd_memory_async_copy_fn = &fake_async_copy;
  amd_ext->hsa_amd_memory_async_copy_rect_fn = &fake_async_copy_rect;
#if KREPLAY_HSA_HAVE_COPY_ON_ENGINE
  amd_ext->hsa_amd_memory_async_copy_on_engine_fn = &fake_async_copy_on_engine;
#endif
  amd_ext->hsa_amd_signal_async_handler_fn = &fake_signal_async_handler;
  core->hsa_signal_load_relaxed_fn = &fake_signal_load_relaxed;
  core->hsa_signal_create_fn = &fake_signal_create;
  core->hsa_signal_destroy_fn = &fake_signal_destroy;
  core->hsa_signal_store_relaxed_fn = &fake_signal_store_relaxed;
  core->hsa_signal_load_scacquire_fn = &fake_signal_load_scacquire;
  core->hsa_signal_wait_scacquire_fn = &fake_signal_wait_scacquire;
  core->hsa_executable_destroy_fn = &fake_executable_destroy;
  core->hsa_executable_freeze_fn = &fake_executable_freeze;
  core->hsa_executable_load_code_object_fn = &fake_load_code_object;
  core->hsa_executable_load_program_code_object_fn = &fake_load_program_code_object;
  core->hsa_executable_load_agent_code_object_fn = &fake_load_agent_code_object;
  core->hsa_executable_global_variable_define_fn = &fake_global_variable_define;
  core->hsa_executable_agent_global_variable_define_fn = &fake_agent_variable_define;
  core->hsa_executable_readonly_variable_define_fn = &fake_agent_variable_define;
}

std::size_t add_standard_executable(hsa_agent_t agent, const std::string& suffix) {
  auto variable = [&](const std::string& name, std::uint32_t size, hsa_variable_segment_t segment, bool is_const) {
    // The zero-size one still gets a real byte, so that nothing would crash if it were (wrongly) copied.
    void* storage = std::calloc(1, size == 0 ? 1 : size);
    return symbol_t{++next_symbol_handle, HSA_SYMBOL_KIND_VARIABLE, name, storage, size, segment, is_const, agent, -1};
  };
  executable_t e{next_symbol_handle + 0x100000 + executables.size(), {}, false};
  e.symbols.push_back(
      symbol_t{++next_symbol_handle, HSA_SYMBOL_KIND_KERNEL, "kernel" + suffix, nullptr, 0,
               HSA_VARIABLE_SEGMENT_GLOBAL, false, agent, -1});
  e.symbols.push_back(variable("counter" + suffix, 64, HSA_VARIABLE_SEGMENT_GLOBAL, false));  // __device__
  e.symbols.push_back(variable("lut" + suffix, 32, HSA_VARIABLE_SEGMENT_READONLY, true));     // __constant__
  e.symbols.push_back(variable("__hip_cuid_" + suffix, 1, HSA_VARIABLE_SEGMENT_GLOBAL, false));
  e.symbols.push_back(variable("empty" + suffix, 0, HSA_VARIABLE_SEGMENT_GLOBAL, false));
  e.symbols.push_back(variable("flaky" + suffix, 16, HSA_VARIABLE_SEGMENT_GLOBAL, false));
  executables.push_back(e);
  index_symbols(executables.size() - 1);
  return executables.size() - 1;
}

symbol_t& symbol(std::size_t executable, const std::string& name) {
  for (auto& s : executables.at(executable).symbols) {
    if (s.name == name) return s;
  }
  std::fprintf(stderr, "fake: no symbol %s\n", name.c_str());
  std::abort();
}

hsa_status_t host_iterate_executables(void* user_data, kreplay::hsa::executable_visitor_t visit, void* visit_data) {
  ++host_iterator_calls;
  HSA_TEST_CHECK(user_data == &host_iterator_calls);
  if (host_iterator_result != HSA_STATUS_SUCCESS) return host_iterator_result;
  for (const auto& e : executables) {
    if (e.handle == 0) continue;  // a host registry holds only live executables
    hsa_status_t status = visit(hsa_executable_t{e.handle}, visit_data);
    if (status != HSA_STATUS_SUCCESS && !host_iterator_ignores_visit) return status;
  }
  return HSA_STATUS_SUCCESS;
}

std::size_t add_executable_with_variables(hsa_agent_t agent, std::size_t n, std::uint32_t size) {
  guard_t guard(fake_mutex);
  executable_t e{next_symbol_handle + 0x100000 + executables.size(), {}, false};
  e.symbols.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    e.symbols.push_back(symbol_t{++next_symbol_handle, HSA_SYMBOL_KIND_VARIABLE, "var" + std::to_string(i),
                                 std::calloc(1, size), size, HSA_VARIABLE_SEGMENT_GLOBAL, false, agent, -1});
  }
  executables.push_back(std::move(e));
  index_symbols(executables.size() - 1);
  return executables.size() - 1;
}

bool destroyed_memory_intact() {
  guard_t guard(fake_mutex);
  for (const auto& d : destroyed_memory) {
    const auto* bytes = static_cast<const unsigned char*>(d.address);
    for (std::size_t i = 0; i < d.size; ++i) {
      if (bytes[i] != kDestroyedFill) return false;
    }
  }
  return true;
}

std::size_t live_allocations() {
  guard_t guard(fake_mutex);
  return allocations.size();
}

std::size_t pool_bytes(hsa_amd_memory_pool_t pool) {
  guard_t guard(fake_mutex);
  return bytes_in(pool);
}

bool in_pool(const void* ptr, hsa_amd_memory_pool_t pool) {
  guard_t guard(fake_mutex);
  const auto* at = static_cast<const char*>(ptr);
  for (const auto& a : allocations) {
    if (a.pool.handle == pool.handle && at >= a.base && at < a.base + a.size) return true;
  }
  return false;
}

std::size_t pending_async_copies() {
  guard_t guard(fake_mutex);
  return pending.size();
}

state_t state_now() {
  guard_t guard(fake_mutex);
  return state;
}

std::size_t complete_async_copies(std::size_t n) {
  guard_t guard(fake_mutex);
  std::size_t done = 0;
  while (done < n && !pending.empty()) {
    complete_at(0);
    ++done;
  }
  return done;
}

bool complete_async_copy_with_signal(hsa_signal_t signal) {
  guard_t guard(fake_mutex);
  for (std::size_t i = 0; i < pending.size(); ++i) {
    if (pending[i].signal == signal.handle) {
      complete_at(i);
      return true;
    }
  }
  return false;
}

std::size_t pending_async_handlers() {
  guard_t guard(fake_mutex);
  return handlers.size();
}

hsa_signal_value_t signal_value(hsa_signal_t signal) {
  guard_t guard(fake_mutex);
  signal_t* s = find_signal(signal);
  HSA_TEST_CHECK(s != nullptr);
  return s->value;
}

kreplay_inventory_stats_t stats(hsa_agent_t agent) {
  kreplay_inventory_stats_t out{};
  HSA_TEST_CHECK(kreplay_inventory_stats(k(agent), &out) == KREPLAY_STATUS_SUCCESS);
  return out;
}

}  // namespace fake
