#include "tracker/module_registry.hpp"

#include "log.hpp"

namespace kreplay::cuda::inject {

// ---- Events -----------------------------------------------------------------------------------------------

void module_registry::module_loaded(CUcontext context, int ordinal, uint32_t module_id, const void* image,
                                    size_t image_size, const origin_t& origin) {
  auto module = std::make_shared<module_t>();
  module->id = module_id;
  module->context = context;
  module->ordinal = ordinal;
  module->origin = origin;
  if (image == nullptr || image_size == 0) {
    module->error = cubin::error_t::truncated;
    module->detail = "the driver gave no image";
  } else {
    cubin::module_symbols_t symbols = cubin::read(image, image_size);
    module->error = symbols.error;
    module->detail = std::move(symbols.detail);
    module->variables = std::move(symbols.variables);
    module->kernels = std::move(symbols.kernels);
    if (!module->variables.empty()) {
      module->functions = std::move(symbols.functions);
    }
  }
  log(KREPLAY_LOG_TRACE, "module %u loaded (device %d, %zu bytes of cubin, %zu variables, inside %s)", module_id,
      ordinal, image_size, module->variables.size(), origin.call);
  std::lock_guard<std::mutex> lock(mutex_);
  modules_[module_id] = std::move(module);
  ++counts_.modules_loaded;
  regroup_locked();
}

void module_registry::module_bound(uint32_t module_id, const origin_t& origin) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = modules_.find(module_id);
  if (found != modules_.end()) {
    found->second->origin = origin;
  }
}

bool module_registry::module_unloading(uint32_t module_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (modules_.erase(module_id) == 0) {
    return false;
  }
  ++counts_.modules_unloaded;
  regroup_locked();
  return true;
}

bool module_registry::context_destroyed(CUcontext context) {
  bool changed = false;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = modules_.begin(); it != modules_.end();) {
    if (it->second->context == context) {
      it = modules_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  regroup_locked();
  return changed;
}

void module_registry::library_loaded(CUlibrary library) {
  if (library == nullptr) {
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  libraries_[library] = library_t{};
  regroup_locked();
}

void module_registry::library_unloading(CUlibrary library) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (libraries_.erase(library) != 0) {
    regroup_locked();
  }
}

// ---- Listing ----------------------------------------------------------------------------------------------

kreplay_status_t module_registry::visit_module(module_t& module, variable_visitor_t visit, void* data,
                                               std::string* detail, bool* stop) {
  std::lock_guard<std::mutex> lock(module.resolve_mutex);
  if (module.paired && module.paired_generation != generation_.load(std::memory_order_relaxed)) {
    module.resolved = false;  // modules or libraries came or went since it was paired: pair it afresh
    module.addresses.clear();
  }
  kreplay_status_t status = resolve(module, detail);
  if (status != KREPLAY_STATUS_SUCCESS) {
    return status;
  }
  for (size_t i = 0; i < module.addresses.size(); ++i) {
    const cubin::variable_t& variable = module.variables[i];
    resolved_variable_t out{module.id, variable.name.c_str(), module.addresses[i], static_cast<size_t>(variable.size),
                            variable.kind == cubin::section_kind::constant};
    if (!visit(data, out)) {
      *stop = true;
      return KREPLAY_STATUS_SUCCESS;
    }
  }
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t module_registry::list_variables(int ordinal, variable_visitor_t visit, void* data,
                                                 std::string* detail) {
  std::vector<std::shared_ptr<module_t>> modules;
  uint32_t unplaced = 0;  // a module with variables whose device is unknown: it may be this one
  bool any_unplaced = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [id, module] : modules_) {
      if (module->ordinal == ordinal) {
        modules.push_back(module);
      } else if (module->ordinal < 0 && !module->variables.empty() && !any_unplaced) {
        unplaced = id;
        any_unplaced = true;
      }
    }
  }
  kreplay_status_t result = KREPLAY_STATUS_SUCCESS;
  if (any_unplaced) {
    result = fail("module " + std::to_string(unplaced) + " has variables in a context whose device is unknown; "
                  "snapshots of every device are declined", detail);
  }
  bool stop = false;
  for (size_t i = 0; i < modules.size() && !stop; ++i) {
    kreplay_status_t status = visit_module(*modules[i], visit, data, detail, &stop);
    if (status != KREPLAY_STATUS_SUCCESS && result == KREPLAY_STATUS_SUCCESS) {
      result = status;  // go on, so that every failing module is logged once
    }
  }
  return result;
}

// ---- Introspection ----------------------------------------------------------------------------------------

void module_registry::module_counts(int ordinal, size_t* modules, size_t* variables) {
  size_t module_count = 0;
  size_t variable_count = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [id, module] : modules_) {
    if (ordinal < 0 || module->ordinal == ordinal) {
      ++module_count;
      variable_count += module->variables.size();
    }
  }
  *modules = module_count;
  *variables = variable_count;
}

tracker_counts_t module_registry::counts() {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

kreplay_status_t module_registry::fail(const std::string& text, std::string* detail) {
  log(KREPLAY_LOG_WARNING, "%s", text.c_str());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_error_ = text;
  }
  if (detail != nullptr && detail->empty()) {
    *detail = text;
  }
  return KREPLAY_STATUS_DEVICE_ERROR;
}

std::string module_registry::last_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_error_;
}

}  // namespace kreplay::cuda::inject
