// The injection's device ops over the tracker (injection_ops.hpp).
#include "injection_ops.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <new>

#include "guard.hpp"
#include "kernels.hpp"
#include "log.hpp"
#include "ops_table.hpp"

namespace kreplay::cuda::inject {
namespace {

struct state_t {
  tracker* owner;
  base_ops_factory_t factory;
  std::once_flag once;
  kreplay_status_t made = KREPLAY_STATUS_NOT_CONFIGURED;
  kreplay_device_ops_t base{};
  std::atomic<bool> ready{false};  // `base` is made (published by the once flag's end)
};

state_t& state_of(void* user_data) { return *static_cast<state_t*>(user_data); }

// The base ops, made once; null when they could not be made.
const kreplay_device_ops_t* base(void* user_data) {
  state_t& state = state_of(user_data);
  std::call_once(state.once, [&] {
    state.made = state.factory(&state.base);
    state.ready.store(state.made == KREPLAY_STATUS_SUCCESS, std::memory_order_release);
    if (state.made != KREPLAY_STATUS_SUCCESS) {
      log(KREPLAY_LOG_WARNING, "the CUDA adapter's ops could not be made (%s): snapshots will fail",
          kreplay_status_string(state.made));
    }
  });
  return state.made == KREPLAY_STATUS_SUCCESS ? &state.base : nullptr;
}

// Calls the base ops' `Field` under the re-entry guard; DEVICE_ERROR when the base ops, or that op, are missing.
template <auto Field, typename... Args>
kreplay_status_t forward(void* user_data, Args... args) {
  own_call_scope own;
  const kreplay_device_ops_t* ops = base(user_data);
  return ops != nullptr && ops->*Field != nullptr ? (ops->*Field)(ops->user_data, args...)
                                                  : KREPLAY_STATUS_DEVICE_ERROR;
}

int64_t microseconds_since(std::chrono::steady_clock::time_point begun) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - begun).count();
}

// At KREPLAY_INJECT_LOG=info, a batch's copies by size against the thresholds of copy_batch's automatic method
// (where a restore's time goes depends on how its bytes fall into runs), and the op's time, submission to wait.
void log_batch(const kreplay_copy_t* copies, size_t count, int64_t us) {
  size_t n[3] = {0, 0, 0};
  size_t bytes[3] = {0, 0, 0};
  for (size_t i = 0; i < count; ++i) {
    const size_t b = copies[i].bytes;
    if (b == 0) {
      continue;
    }
    const int size_class = b < detail::kDmaCopyBytes ? 0 : b < detail::kDmaCopyBytesOnDevice ? 1 : 2;
    ++n[size_class];
    bytes[size_class] += b;
  }
  log(KREPLAY_LOG_INFO,
      "copy batch: %zu copies, %zu bytes; below 1 MiB %zu (%zu bytes), 1 to 32 MiB %zu (%zu bytes), from 32 MiB "
      "%zu (%zu bytes); %lld us",
      n[0] + n[1] + n[2], bytes[0] + bytes[1] + bytes[2], n[0], bytes[0], n[1], bytes[1], n[2], bytes[2],
      static_cast<long long>(us));
}

// At KREPLAY_INJECT_LOG=info, a digest op's jobs, bytes and time (launch, wait and the digests' way back).
void log_digest(const kreplay_digest_job_t* jobs, size_t count, int64_t us) {
  size_t bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    bytes += jobs[i].bytes;
  }
  log(KREPLAY_LOG_INFO, "digest: %zu jobs, %zu bytes; %lld us", count, bytes, static_cast<long long>(us));
}

// The ops kreplay calls (ops_table.hpp); user_data is a state_t.
struct injection_ops {
  static kreplay_status_t copy(void* user_data, void* dst, const void* src, size_t bytes) {
    return forward<&kreplay_device_ops_t::copy>(user_data, dst, src, bytes);
  }

  static kreplay_status_t pointer_info(void* user_data, const void* ptr, kreplay_pointer_info_t* info_out) {
    // From what the allocation call itself said: no CUDA call (this runs inside record_alloc, in a callback).
    return state_of(user_data).owner->pointer_info(ptr, info_out);
  }

  static kreplay_status_t iterate_module_variables(void* user_data, kreplay_agent_t agent,
                                                   kreplay_module_variable_visitor_t visit, void* visit_data) {
    own_call_scope own;
    return state_of(user_data).owner->iterate_module_variables(agent, visit, visit_data);
  }

  static kreplay_status_t host_lock(void* user_data, void* host_ptr, size_t bytes) {
    return forward<&kreplay_device_ops_t::host_lock>(user_data, host_ptr, bytes);
  }

  static kreplay_status_t host_unlock(void* user_data, void* host_ptr, size_t bytes) {
    return forward<&kreplay_device_ops_t::host_unlock>(user_data, host_ptr, bytes);
  }

  static kreplay_status_t copy_batch(void* user_data, kreplay_agent_t agent, const kreplay_copy_t* copies,
                                     size_t count) {
    // A failed batch is redone one copy at a time by kreplay: a base without batches costs speed, not results.
    if (copies == nullptr || !log_enabled(KREPLAY_LOG_INFO)) {
      return forward<&kreplay_device_ops_t::copy_batch>(user_data, agent, copies, count);
    }
    const auto begun = std::chrono::steady_clock::now();
    const kreplay_status_t status = forward<&kreplay_device_ops_t::copy_batch>(user_data, agent, copies, count);
    log_batch(copies, count, microseconds_since(begun));
    return status;
  }

  static kreplay_status_t device_alloc(void* user_data, kreplay_agent_t agent, size_t bytes, void** ptr_out) {
    return forward<&kreplay_device_ops_t::device_alloc>(user_data, agent, bytes, ptr_out);
  }

  static kreplay_status_t device_free(void* user_data, kreplay_agent_t agent, void* ptr, size_t bytes) {
    return forward<&kreplay_device_ops_t::device_free>(user_data, agent, ptr, bytes);
  }

  static kreplay_status_t digest(void* user_data, kreplay_agent_t agent, const kreplay_digest_job_t* jobs,
                                 size_t count, size_t block_bytes) {
    if (jobs == nullptr || !log_enabled(KREPLAY_LOG_INFO)) {
      return forward<&kreplay_device_ops_t::digest>(user_data, agent, jobs, count, block_bytes);
    }
    const auto begun = std::chrono::steady_clock::now();
    const kreplay_status_t status = forward<&kreplay_device_ops_t::digest>(user_data, agent, jobs, count, block_bytes);
    log_digest(jobs, count, microseconds_since(begun));
    return status;
  }

  static kreplay_status_t device_free_bytes(void* user_data, kreplay_agent_t agent, size_t* bytes_out) {
    // A failure means budget 0 for that capture (host staging), never a decline.
    return forward<&kreplay_device_ops_t::device_free_bytes>(user_data, agent, bytes_out);
  }

  static void release(void* user_data) {
    state_t* state = static_cast<state_t*>(user_data);
    {
      own_call_scope own;
      if (state->made == KREPLAY_STATUS_SUCCESS && state->base.release != nullptr) {
        state->base.release(state->base.user_data);
      }
    }
    delete state;
  }
};

}  // namespace

kreplay_status_t make_injection_ops(tracker& owner, base_ops_factory_t factory, kreplay_device_ops_t* ops_out) {
  if (factory == nullptr || ops_out == nullptr) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  state_t* state = new (std::nothrow) state_t{&owner, factory, {}, KREPLAY_STATUS_NOT_CONFIGURED, {}};
  if (state == nullptr) {
    return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
  }
  *ops_out = detail::ops_table<injection_ops>(state);
  return KREPLAY_STATUS_SUCCESS;
}

const kreplay_device_ops_t* injection_base_ops(const kreplay_device_ops_t& ops) {
  if (ops.release != &injection_ops::release || ops.user_data == nullptr) {
    return nullptr;
  }
  const state_t& state = state_of(ops.user_data);
  return state.ready.load(std::memory_order_acquire) ? &state.base : nullptr;
}

}  // namespace kreplay::cuda::inject
