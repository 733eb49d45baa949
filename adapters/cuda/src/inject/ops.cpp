#include "ops.hpp"

#include <mutex>
#include <new>

#include "guard.hpp"
#include "log.hpp"

namespace kreplay::cuda::inject {
namespace {

struct state_t {
  tracker* owner;
  base_ops_factory_t factory;
  std::once_flag once;
  kreplay_status_t made = KREPLAY_STATUS_NOT_CONFIGURED;
  kreplay_device_ops_t base{};
};

state_t& state_of(void* user_data) { return *static_cast<state_t*>(user_data); }

// The base ops, made once; null when they could not be made.
const kreplay_device_ops_t* base(void* user_data) {
  state_t& state = state_of(user_data);
  std::call_once(state.once, [&] {
    state.made = state.factory(&state.base);
    if (state.made != KREPLAY_STATUS_SUCCESS) {
      log(KREPLAY_LOG_WARNING, "the CUDA adapter's ops could not be made (%s): snapshots will fail",
          kreplay_status_string(state.made));
    }
  });
  return state.made == KREPLAY_STATUS_SUCCESS ? &state.base : nullptr;
}

kreplay_status_t op_copy(void* user_data, void* dst, const void* src, size_t bytes) {
  own_call_scope own;
  const kreplay_device_ops_t* ops = base(user_data);
  return ops != nullptr ? ops->copy(ops->user_data, dst, src, bytes) : KREPLAY_STATUS_DEVICE_ERROR;
}

kreplay_status_t op_pointer_info(void* user_data, const void* ptr, kreplay_pointer_info_t* info_out) {
  // From what the allocation call itself said: no CUDA call (this runs inside record_alloc, in a callback).
  return state_of(user_data).owner->pointer_info(ptr, info_out);
}

kreplay_status_t op_iterate(void* user_data, kreplay_agent_t agent, kreplay_module_variable_visitor_t visit,
                            void* visit_data) {
  own_call_scope own;
  return state_of(user_data).owner->iterate_module_variables(agent, visit, visit_data);
}

kreplay_status_t op_host_lock(void* user_data, void* host_ptr, size_t bytes) {
  own_call_scope own;
  const kreplay_device_ops_t* ops = base(user_data);
  return ops != nullptr && ops->host_lock != nullptr ? ops->host_lock(ops->user_data, host_ptr, bytes)
                                                     : KREPLAY_STATUS_DEVICE_ERROR;
}

kreplay_status_t op_host_unlock(void* user_data, void* host_ptr, size_t bytes) {
  own_call_scope own;
  const kreplay_device_ops_t* ops = base(user_data);
  return ops != nullptr && ops->host_unlock != nullptr ? ops->host_unlock(ops->user_data, host_ptr, bytes)
                                                       : KREPLAY_STATUS_DEVICE_ERROR;
}

kreplay_status_t op_copy_batch(void* user_data, kreplay_agent_t agent, const kreplay_copy_t* copies, size_t count) {
  own_call_scope own;
  const kreplay_device_ops_t* ops = base(user_data);
  // A failed batch is redone one copy at a time by kreplay: a base without batches costs speed, not results.
  return ops != nullptr && ops->copy_batch != nullptr ? ops->copy_batch(ops->user_data, agent, copies, count)
                                                      : KREPLAY_STATUS_DEVICE_ERROR;
}

kreplay_status_t op_device_alloc(void* user_data, kreplay_agent_t agent, size_t bytes, void** ptr_out) {
  own_call_scope own;
  const kreplay_device_ops_t* ops = base(user_data);
  return ops != nullptr && ops->device_alloc != nullptr ? ops->device_alloc(ops->user_data, agent, bytes, ptr_out)
                                                        : KREPLAY_STATUS_DEVICE_ERROR;
}

kreplay_status_t op_device_free(void* user_data, kreplay_agent_t agent, void* ptr, size_t bytes) {
  own_call_scope own;
  const kreplay_device_ops_t* ops = base(user_data);
  return ops != nullptr && ops->device_free != nullptr ? ops->device_free(ops->user_data, agent, ptr, bytes)
                                                       : KREPLAY_STATUS_DEVICE_ERROR;
}

kreplay_status_t op_digest(void* user_data, kreplay_agent_t agent, const kreplay_digest_job_t* jobs, size_t count,
                           size_t block_bytes) {
  own_call_scope own;
  const kreplay_device_ops_t* ops = base(user_data);
  return ops != nullptr && ops->digest != nullptr ? ops->digest(ops->user_data, agent, jobs, count, block_bytes)
                                                  : KREPLAY_STATUS_DEVICE_ERROR;
}

kreplay_status_t op_device_free_bytes(void* user_data, kreplay_agent_t agent, size_t* bytes_out) {
  own_call_scope own;
  const kreplay_device_ops_t* ops = base(user_data);
  // A failure means budget 0 for that capture (host staging), never a decline.
  return ops != nullptr && ops->device_free_bytes != nullptr ? ops->device_free_bytes(ops->user_data, agent, bytes_out)
                                                             : KREPLAY_STATUS_DEVICE_ERROR;
}

void op_release(void* user_data) {
  state_t* state = static_cast<state_t*>(user_data);
  {
    own_call_scope own;
    if (state->made == KREPLAY_STATUS_SUCCESS && state->base.release != nullptr) {
      state->base.release(state->base.user_data);
    }
  }
  delete state;
}

}  // namespace

kreplay_status_t make_ops(tracker& owner, base_ops_factory_t factory, kreplay_device_ops_t* ops_out) {
  if (factory == nullptr || ops_out == nullptr) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  state_t* state = new (std::nothrow) state_t{&owner, factory, {}, KREPLAY_STATUS_NOT_CONFIGURED, {}};
  if (state == nullptr) {
    return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
  }
  kreplay_device_ops_t ops{};
  ops.struct_size = sizeof(ops);
  ops.user_data = state;
  ops.copy = op_copy;
  ops.pointer_info = op_pointer_info;
  ops.iterate_module_variables = op_iterate;
  ops.host_lock = op_host_lock;
  ops.host_unlock = op_host_unlock;
  ops.copy_batch = op_copy_batch;
  ops.device_alloc = op_device_alloc;
  ops.device_free = op_device_free;
  ops.digest = op_digest;
  ops.release = op_release;
  ops.device_free_bytes = op_device_free_bytes;
  *ops_out = ops;
  return KREPLAY_STATUS_SUCCESS;
}

}  // namespace kreplay::cuda::inject
