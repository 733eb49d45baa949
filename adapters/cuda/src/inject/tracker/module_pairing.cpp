// The module registry's side of the pairing (pairing.hpp): the inputs gathered from its tables, libraries asked
// for globals through the driver, and each group's result kept until a module or a library comes or goes.
#include <algorithm>

#include "tracker/module_registry.hpp"
#include "tracker/pairing.hpp"

namespace kreplay::cuda::inject {

CUlibrary module_registry::library_by_kernels(module_t& module, std::string* why) {
  if (driver_.library_get_kernel_count == nullptr || driver_.library_enumerate_kernels == nullptr ||
      driver_.kernel_get_name == nullptr) {
    *why = std::string("no module or library handle was known on the loading thread and the driver cannot list a "
                       "library's kernels") + kNotLocated;
    return nullptr;
  }
  const std::pair<CUcontext, std::vector<std::string>> key{module.context, module.kernels};
  pairing_t pairing;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = pairings_.find(key);
    if (found != pairings_.end() && found->second.generation == generation_.load(std::memory_order_relaxed)) {
      pairing = found->second;
      cached = true;
    }
  }
  if (!cached) {
    pairing = pair_group(module);
    std::lock_guard<std::mutex> lock(mutex_);
    if (pairing.generation == generation_.load(std::memory_order_relaxed)) {
      pairings_[key] = pairing;  // nothing came or went meanwhile: the group's other modules use it too
    }
  }
  module.paired = true;
  module.paired_generation = pairing.generation;
  auto found = pairing.library.find(module.id);
  if (found == pairing.library.end()) {
    *why = pairing.why.empty() ? "it is no longer among its context's modules" + std::string(kNotLocated)
                               : pairing.why;
    if (!module.variables.empty()) {
      *why += "; its first variable is " + module.variables.front().name;
    }
    return nullptr;
  }
  return found->second;
}

// The group of `module`: its context's modules with its entry kernels, and the libraries with those kernels.
// With mutex_ held.
pairing_input_t module_registry::pairing_input_locked(const module_t& module) {
  pairing_input_t in;
  in.kernels = module.kernels;
  in.libraries_known = libraries_.size();
  in.eager_loading = eager_loading_.load(std::memory_order_relaxed);
  std::vector<const std::vector<std::string>*> readable;
  for (const auto& [library, entry] : libraries_) {
    if (!entry.named || entry.unreadable) {
      ++in.unreadable;  // (not named: loaded since name_libraries ran)
      continue;
    }
    readable.push_back(&entry.names);
    if (entry.names == module.kernels) {
      in.candidates.push_back(library);  // ordered by handle, as libraries_ is
    }
  }
  for (const auto& [id, other] : modules_) {  // ordered by id
    if (other->context != module.context || other->kernels != module.kernels) {
      continue;
    }
    if (other->origin.kind == origin_kind::none) {
      in.claimants.push_back(claimant_t{id, variable_set(other->variables)});
    } else if (other->origin.kind == origin_kind::library) {
      // Its library's module in this context is known: that library is no candidate.
      const auto known = static_cast<CUlibrary>(other->origin.handle);
      const auto kept = std::remove(in.candidates.begin(), in.candidates.end(), known);
      in.claimed += static_cast<size_t>(in.candidates.end() - kept);
      in.candidates.erase(kept, in.candidates.end());
    } else {
      ++in.through_handle;
    }
  }
  if (in.candidates.empty() && in.claimed == 0 && in.through_handle == 0) {
    in.closest = closest_library(readable, module.kernels);
  }
  return in;
}

// Computed for a whole group at once; each pairing is then still checked by cuModuleGetGlobal on the library's
// module (resolve), and computed afresh once a module or a library comes or goes (generation_).
module_registry::pairing_t module_registry::pair_group(const module_t& module) {
  name_libraries();
  pairing_t out;
  pairing_input_t input;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.generation = generation_.load(std::memory_order_relaxed);
    input = pairing_input_locked(module);
  }
  ask_global_t ask;
  if (driver_.library_get_global != nullptr) {
    ask = [this](CUlibrary library, const char* name, size_t* bytes) {
      CUdeviceptr address = 0;
      return driver_.library_get_global(&address, bytes, library, name) == CUDA_SUCCESS;
    };
  }
  const pairing_result_t result = pair_modules(input, ask);
  out.library = result.library;
  out.why = decline_text(input, result);
  return out;
}

}  // namespace kreplay::cuda::inject
