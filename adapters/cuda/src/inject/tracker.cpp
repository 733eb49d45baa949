#include "tracker.hpp"

#include <cstring>

#include "kreplay/cuda.hpp"

namespace kreplay::cuda::inject {

void tracker::context_destroyed(CUcontext context) {
  const bool modules_changed = modules_.context_destroyed(context);
  memory_.context_destroyed(context);
  if (modules_changed) {
    kreplay_modules_changed();
  }
}

void tracker::primary_context_reset(int ordinal) {
  const CUcontext context = memory_.primary_context(ordinal);
  if (context != nullptr) {
    context_destroyed(context);
  }
}

void tracker::module_loaded(CUcontext context, uint32_t module_id, const void* cubin, size_t cubin_size,
                            const origin_t& origin) {
  modules_.module_loaded(context, device_of(context), module_id, cubin, cubin_size, origin);
  kreplay_modules_changed();
}

void tracker::module_unloading(uint32_t module_id) {
  if (modules_.module_unloading(module_id)) {
    kreplay_modules_changed();
  }
}

kreplay_status_t tracker::list_variables(int ordinal, bool (*visit)(void*, const resolved_variable_t&), void* data,
                                         std::string* detail) {
  if (const uint64_t lost = lost_events_.load(std::memory_order_relaxed); lost > 0) {
    return modules_.fail(std::to_string(lost) +
                             " intercepted events could not be recorded (out of host memory inside a callback); "
                             "snapshots are declined",
                         detail);
  }
  return modules_.list_variables(ordinal, visit, data, detail);
}

kreplay_status_t tracker::iterate_module_variables(kreplay_agent_t agent, kreplay_module_variable_visitor_t visit,
                                                   void* visit_data) {
  const int device = device_of_agent(agent);
  if (visit == nullptr || device < 0) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  struct forward_t {
    kreplay_module_variable_visitor_t visit;
    void* data;
  } forward{visit, visit_data};
  auto each = [](void* data, const resolved_variable_t& variable) {
    const auto* to = static_cast<const forward_t*>(data);
    kreplay_module_variable_t out{};
    out.name = variable.name;
    out.name_length = std::strlen(variable.name);
    out.address = reinterpret_cast<void*>(variable.address);
    out.size = variable.size;
    out.is_constant = variable.is_constant;
    return to->visit(to->data, &out);
  };
  return list_variables(device, each, &forward, nullptr);
}

tracker_counts_t tracker::counts() {
  tracker_counts_t out = memory_.counts();
  const tracker_counts_t modules = modules_.counts();
  out.modules_loaded = modules.modules_loaded;
  out.modules_unloaded = modules.modules_unloaded;
  return out;
}

}  // namespace kreplay::cuda::inject
