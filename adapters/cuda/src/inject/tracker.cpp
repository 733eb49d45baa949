#include "tracker.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <set>
#include <tuple>
#include <utility>

#include "cubin.hpp"
#include "log.hpp"

namespace kreplay::cuda::inject {

struct tracker::module_t {
  uint32_t id = 0;
  CUcontext context = nullptr;
  int ordinal = -1;
  origin_t origin;
  size_t cubin_size = 0;
  cubin::error_t error = cubin::error_t::none;
  std::string detail;
  std::vector<cubin::variable_t> variables;
  std::vector<std::string> functions;  // kept only for modules with variables (to check a resolved handle)
  // Its entry kernels (the cubin's STO_CUDA_ENTRY functions), kept for every module: what associates a module
  // loaded outside any followed call with its library, and what shows two cubins claiming one library.
  std::vector<std::string> kernels;
  // Resolution, done once outside any callback; guarded by resolve_mutex.
  std::mutex resolve_mutex;
  bool resolved = false;
  std::vector<uint64_t> addresses;  // of variables, in order
  // Found by its kernels (library_by_kernels), with the pairing of that generation: redone once modules or
  // libraries came or went since.
  bool paired = false;
  uint64_t paired_generation = 0;
};

namespace {

thread_local struct last_free_t {
  uint64_t address;
  size_t size;
  memory_kind kind;
  int ordinal;
  CUcontext context;
  bool valid;
} t_last_free = {};

bool captured(memory_kind kind) { return kind == memory_kind::device || kind == memory_kind::pool; }

kreplay_agent_t agent_of(int ordinal) { return kreplay_agent_t{static_cast<uint64_t>(ordinal) + 1}; }

void check(kreplay_status_t status, const char* what, uint64_t address, tracker_counts_t& counts,
           std::mutex& mutex) {
  if (status == KREPLAY_STATUS_SUCCESS || status == KREPLAY_STATUS_NOT_FOUND) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    ++counts.record_errors;
  }
  log(KREPLAY_LOG_WARNING, "%s(0x%" PRIx64 ") answered %s", what, address, kreplay_status_string(status));
}

const char* kind_name(memory_kind kind) {
  switch (kind) {
    case memory_kind::device: return "device";
    case memory_kind::pool: return "pool";
    case memory_kind::managed: return "managed";
    case memory_kind::host_pinned: return "host-pinned";
    case memory_kind::host_mapped: return "host-mapped";
  }
  return "?";
}

// Ranges of [begin, end) not covered by `covered` (sorted, disjoint).
std::vector<std::pair<uint64_t, size_t>> uncovered(uint64_t begin, uint64_t end,
                                                   std::vector<std::pair<uint64_t, size_t>> covered) {
  std::sort(covered.begin(), covered.end());
  std::vector<std::pair<uint64_t, size_t>> out;
  uint64_t at = begin;
  for (const auto& [base, size] : covered) {
    const uint64_t top = base + size;
    if (top <= at || base >= end) {
      continue;
    }
    if (base > at) {
      out.emplace_back(at, base - at);
    }
    at = std::max(at, top);
  }
  if (at < end) {
    out.emplace_back(at, end - at);
  }
  return out;
}

}  // namespace

tracker::tracker(const driver_api_t& driver) : driver_(driver) {}

// ---- Contexts ---------------------------------------------------------------------------------------------

void tracker::context_device(CUcontext context, int ordinal, bool primary) {
  std::lock_guard<std::mutex> lock(mutex_);
  contexts_[context] = ordinal;
  if (primary) {
    primary_[ordinal] = context;
  }
}

int tracker::device_of(CUcontext context) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = contexts_.find(context);
    if (found != contexts_.end()) {
      return found->second;
    }
  }
  // A context created before the injection followed context creation (or by a call it does not follow): one
  // read-only query, cached. cuCtxGetDevice_v2 names the context; without it the callback's context is the
  // calling thread's current one, which is what cuCtxGetDevice answers for.
  CUdevice device = -1;
  CUresult result = CUDA_ERROR_NOT_SUPPORTED;
  if (driver_.ctx_get_device_of != nullptr) {
    result = driver_.ctx_get_device_of(&device, context);
  } else if (driver_.ctx_get_device != nullptr) {
    result = driver_.ctx_get_device(&device);
  }
  if (result != CUDA_SUCCESS) {
    return -1;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  contexts_[context] = device;
  return device;
}

void tracker::context_destroyed(CUcontext context) {
  std::vector<uint64_t> addresses;
  std::vector<std::pair<uint64_t, size_t>> unknown;  // recorded with an unknown owner
  bool modules_changed = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = allocations_.begin(); it != allocations_.end();) {
      if (it->second.context == context) {
        if (captured(it->second.kind) && it->second.ordinal >= 0) {
          addresses.push_back(it->first);
        } else if (captured(it->second.kind)) {
          unknown.emplace_back(it->first, it->second.size);
        }
        it = allocations_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = modules_.begin(); it != modules_.end();) {
      if (it->second->context == context) {
        it = modules_.erase(it);
        modules_changed = true;
      } else {
        ++it;
      }
    }
    regroup_locked();
    contexts_.erase(context);
    for (auto it = primary_.begin(); it != primary_.end();) {
      it = it->second == context ? primary_.erase(it) : std::next(it);
    }
    ++counts_.contexts_forgotten;
  }
  log(KREPLAY_LOG_INFO, "context %p destroyed: %zu allocations forgotten", static_cast<void*>(context),
      addresses.size());
  forget(std::move(addresses));
  for (const auto& [address, size] : unknown) {
    check(kreplay_record_vmem_unmap(reinterpret_cast<void*>(address), size), "kreplay_record_vmem_unmap", address,
          counts_, mutex_);
  }
  if (modules_changed) {
    kreplay_modules_changed();
  }
}

void tracker::primary_context_reset(int ordinal) {
  CUcontext context = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = primary_.find(ordinal);
    if (found != primary_.end()) {
      context = found->second;
    }
  }
  if (context != nullptr) {
    context_destroyed(context);
  }
}

void tracker::forget(std::vector<uint64_t> addresses) {
  for (uint64_t address : addresses) {
    check(kreplay_record_free(reinterpret_cast<void*>(address)), "kreplay_record_free", address, counts_, mutex_);
  }
}

// ---- Allocations ------------------------------------------------------------------------------------------

void tracker::allocated(CUcontext context, uint64_t address, size_t size, memory_kind kind) {
  if (address == 0 || size == 0) {
    return;
  }
  const int ordinal = device_of(context);
  bool replaced = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_.allocations;
    auto [it, inserted] = allocations_.insert_or_assign(address, allocation_t{size, kind, ordinal, context});
    (void)it;
    replaced = !inserted;
  }
  if (replaced) {
    // The driver handed out an address the tracker still holds: its free went by a path not followed here.
    log(KREPLAY_LOG_WARNING, "allocation at 0x%" PRIx64 " seen again without a free; the old one is forgotten",
        address);
    check(kreplay_record_free(reinterpret_cast<void*>(address)), "kreplay_record_free", address, counts_, mutex_);
  }
  log(KREPLAY_LOG_TRACE, "alloc %s 0x%" PRIx64 " %zu bytes device %d", kind_name(kind), address, size, ordinal);
  if (captured(kind) && ordinal < 0) {
    // Never lost silently: kreplay declines every device's snapshots while it is live.
    log(KREPLAY_LOG_WARNING, "device allocation at 0x%" PRIx64 " (%zu bytes) in context %p of unknown device: "
        "snapshots are declined while it lives", address, size, static_cast<void*>(context));
    check(kreplay_record_vmem_map_unknown_owner(reinterpret_cast<void*>(address), size),
          "kreplay_record_vmem_map_unknown_owner", address, counts_, mutex_);
  }
  if ((captured(kind) && ordinal >= 0) || !captured(kind)) {
    // Managed and host memory go to kreplay too: pointer_info classifies them, so kreplay counts them as untracked
    // memory of their kind (kreplay_untracked_stats, the window's outcome, the policy's decline mask).
    check(kreplay_record_alloc(reinterpret_cast<void*>(address), size, 0), "kreplay_record_alloc", address,
          counts_, mutex_);
  }
}

void tracker::freeing(uint64_t address) {
  if (address == 0) {
    return;
  }
  allocation_t allocation{};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_.frees;
    auto found = allocations_.find(address);
    if (found == allocations_.end()) {
      ++counts_.unknown_frees;
      t_last_free.valid = false;
      log(KREPLAY_LOG_INFO, "free of 0x%" PRIx64 ", which the tracker never saw allocated", address);
      return;
    }
    allocation = found->second;
    allocations_.erase(found);
  }
  t_last_free = {address, allocation.size, allocation.kind, allocation.ordinal, allocation.context, true};
  log(KREPLAY_LOG_TRACE, "free %s 0x%" PRIx64, kind_name(allocation.kind), address);
  if ((captured(allocation.kind) && allocation.ordinal >= 0) || !captured(allocation.kind)) {
    // For managed and host memory kreplay answers NOT_FOUND (nothing captured) and forgets its untracked entry.
    check(kreplay_record_free(reinterpret_cast<void*>(address)), "kreplay_record_free", address, counts_, mutex_);
  } else {
    check(kreplay_record_vmem_unmap(reinterpret_cast<void*>(address), allocation.size), "kreplay_record_vmem_unmap",
          address, counts_, mutex_);
  }
}

void tracker::free_failed(uint64_t address) {
  if (!t_last_free.valid || t_last_free.address != address) {
    return;
  }
  const last_free_t last = t_last_free;
  t_last_free.valid = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    allocations_.insert_or_assign(address, allocation_t{last.size, last.kind, last.ordinal, last.context});
  }
  if (captured(last.kind) && last.ordinal < 0) {
    check(kreplay_record_vmem_map_unknown_owner(reinterpret_cast<void*>(address), last.size),
          "kreplay_record_vmem_map_unknown_owner", address, counts_, mutex_);
  } else if (captured(last.kind)) {
    check(kreplay_record_free_undo(reinterpret_cast<void*>(address)), "kreplay_record_free_undo", address, counts_,
          mutex_);
  }
}

// ---- Virtual memory ---------------------------------------------------------------------------------------

void tracker::vmem_created(uint64_t handle, size_t size, bool device, int ordinal) {
  std::lock_guard<std::mutex> lock(mutex_);
  handles_[handle] = handle_t{size, device, ordinal};
}

void tracker::vmem_released(uint64_t handle) {
  // Mappings keep the physical memory alive until they are unmapped; they carry their own copy of its owner.
  std::lock_guard<std::mutex> lock(mutex_);
  handles_.erase(handle);
}

void tracker::vmem_mapped(uint64_t address, size_t size, uint64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = handles_.find(handle);
  mapping_t mapping{size, handle, false, false, -1, {}};
  if (found != handles_.end()) {
    mapping.known = true;
    mapping.device = found->second.device;
    mapping.ordinal = found->second.ordinal;
  }
  mappings_[address] = std::move(mapping);
}

void tracker::vmem_access(uint64_t address, size_t size, const access_t* access, size_t count) {
  const uint64_t end = address + size;
  std::vector<std::pair<std::pair<uint64_t, size_t>, int>> record;  // (range, ordinal)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The mappings overlapping [address, end): start from the last one that begins at or below address.
    auto it = mappings_.upper_bound(address);
    if (it != mappings_.begin()) {
      --it;
    }
    for (; it != mappings_.end() && it->first < end; ++it) {
      mapping_t& mapping = it->second;
      const uint64_t top = it->first + mapping.size;
      if (top <= address || (mapping.known && !mapping.device)) {
        continue;
      }
      // A handle never seen created: whichever device may write it, its owner is unknown (ordinal -1).
      bool writable = false;
      for (size_t i = 0; i < count; ++i) {
        writable = writable || (access[i].device && access[i].read_write &&
                                (!mapping.known || access[i].ordinal == mapping.ordinal));
      }
      if (!writable) {
        continue;
      }
      for (const auto& piece : uncovered(std::max(address, it->first), std::min(end, top), mapping.recorded)) {
        mapping.recorded.push_back(piece);
        record.push_back({piece, mapping.ordinal});
      }
    }
  }
  for (const auto& [piece, ordinal] : record) {
    if (ordinal < 0) {
      log(KREPLAY_LOG_WARNING, "mapping at 0x%" PRIx64 " of a handle never seen created: snapshots are declined "
          "while it is mapped", piece.first);
      check(kreplay_record_vmem_map_unknown_owner(reinterpret_cast<void*>(piece.first), piece.second),
            "kreplay_record_vmem_map_unknown_owner", piece.first, counts_, mutex_);
    } else {
      check(kreplay_record_vmem_map(reinterpret_cast<void*>(piece.first), piece.second, agent_of(ordinal)),
            "kreplay_record_vmem_map", piece.first, counts_, mutex_);
    }
  }
}

void tracker::vmem_unmapping(uint64_t address, size_t size) {
  const uint64_t end = address + size;
  std::vector<std::pair<uint64_t, size_t>> unmap;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = mappings_.upper_bound(address);
    if (it != mappings_.begin()) {
      --it;
    }
    while (it != mappings_.end() && it->first < end) {
      mapping_t& mapping = it->second;
      const uint64_t top = it->first + mapping.size;
      if (top <= address) {
        ++it;
        continue;
      }
      std::vector<std::pair<uint64_t, size_t>> kept;
      for (const auto& [base, bytes] : mapping.recorded) {
        const uint64_t lo = std::max(base, address);
        const uint64_t hi = std::min(base + bytes, end);
        if (lo >= hi) {
          kept.emplace_back(base, bytes);
          continue;
        }
        unmap.emplace_back(lo, hi - lo);
        if (base < lo) {
          kept.emplace_back(base, lo - base);
        }
        if (base + bytes > hi) {
          kept.emplace_back(hi, base + bytes - hi);
        }
      }
      mapping.recorded = std::move(kept);
      if (address <= it->first && end >= top) {
        it = mappings_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const auto& [base, bytes] : unmap) {
    check(kreplay_record_vmem_unmap(reinterpret_cast<void*>(base), bytes), "kreplay_record_vmem_unmap", base,
          counts_, mutex_);
  }
}

// ---- Modules ----------------------------------------------------------------------------------------------

void tracker::module_loaded(CUcontext context, uint32_t module_id, const void* image, size_t image_size,
                            const origin_t& origin) {
  auto module = std::make_shared<module_t>();
  module->id = module_id;
  module->context = context;
  module->ordinal = device_of(context);
  module->origin = origin;
  module->cubin_size = image_size;
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
      module->ordinal, image_size, module->variables.size(), origin.call);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    modules_[module_id] = std::move(module);
    ++counts_.modules_loaded;
    regroup_locked();
  }
  kreplay_modules_changed();
}

void tracker::module_bound(uint32_t module_id, const origin_t& origin) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = modules_.find(module_id);
  if (found != modules_.end()) {
    found->second->origin = origin;
  }
}

void tracker::module_unloading(uint32_t module_id) {
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    known = modules_.erase(module_id) != 0;
    if (known) {
      ++counts_.modules_unloaded;
      regroup_locked();
    }
  }
  if (known) {
    kreplay_modules_changed();
  }
}

void tracker::library_loaded(CUlibrary library) {
  if (library == nullptr) {
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  libraries_[library] = library_t{};
  regroup_locked();
}

void tracker::library_unloading(CUlibrary library) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (libraries_.erase(library) != 0) {
    regroup_locked();
  }
}

void tracker::name_libraries() {
  std::vector<CUlibrary> unnamed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [library, entry] : libraries_) {
      if (!entry.named) {
        unnamed.push_back(library);
      }
    }
  }
  for (CUlibrary library : unnamed) {
    library_t entry;
    entry.named = true;
    unsigned int count = 0;
    std::vector<CUkernel> kernels;
    if (driver_.library_get_kernel_count(&count, library) == CUDA_SUCCESS) {
      kernels.resize(count);
    } else {
      entry.unreadable = true;
    }
    if (!entry.unreadable && count > 0 &&
        driver_.library_enumerate_kernels(kernels.data(), count, library) != CUDA_SUCCESS) {
      entry.unreadable = true;
    }
    for (size_t i = 0; !entry.unreadable && i < kernels.size(); ++i) {
      const char* name = nullptr;
      if (driver_.kernel_get_name(&name, kernels[i]) != CUDA_SUCCESS || name == nullptr) {
        entry.unreadable = true;
      } else {
        entry.names.emplace_back(name);
      }
    }
    std::sort(entry.names.begin(), entry.names.end());
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = libraries_.find(library);
    if (found != libraries_.end()) {
      found->second = std::move(entry);
    }
  }
}

namespace {

// How many names two sorted lists have in common.
size_t common_names(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t n = 0;
  for (auto i = a.begin(), j = b.begin(); i != a.end() && j != b.end();) {
    if (*i < *j) {
      ++i;
    } else if (*j < *i) {
      ++j;
    } else {
      ++n;
      ++i;
      ++j;
    }
  }
  return n;
}

// The module's variables as (name, size, kind), sorted: what must be equal for two modules to be interchangeable.
std::vector<std::tuple<std::string, uint64_t, cubin::section_kind>> variable_set(
    const std::vector<cubin::variable_t>& variables) {
  std::vector<std::tuple<std::string, uint64_t, cubin::section_kind>> out;
  out.reserve(variables.size());
  for (const cubin::variable_t& variable : variables) {
    out.emplace_back(variable.name, variable.size, variable.kind);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string counted(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string located() { return ", so its variables cannot be located exactly"; }

// (name, size) of each variable: what a library can be asked for by name.
std::set<std::pair<std::string, uint64_t>> names_and_sizes(
    const std::vector<std::tuple<std::string, uint64_t, cubin::section_kind>>& variables) {
  std::set<std::pair<std::string, uint64_t>> out;
  for (const auto& [name, size, kind] : variables) {
    out.emplace(name, size);
  }
  return out;
}

}  // namespace

CUlibrary tracker::library_by_kernels(module_t& module, std::string* why) {
  if (driver_.library_get_kernel_count == nullptr || driver_.library_enumerate_kernels == nullptr ||
      driver_.kernel_get_name == nullptr) {
    *why = "no module or library handle was known on the loading thread and the driver cannot list a library's "
           "kernels" + located();
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
    *why = pairing.why.empty() ? "it is no longer among its context's modules" + located() : pairing.why;
    if (!module.variables.empty()) {
      *why += "; its first variable is " + module.variables.front().name;
    }
    return nullptr;
  }
  return found->second;
}

// Association by kernels, for the modules loaded outside any followed call (a launch under lazy loading,
// cuDevicePrimaryCtxRetain under eager loading), computed for a whole group at once. The premise, as for every
// such load: each of these modules is the module, in its context, of a library the tracker saw loaded, and a
// library has one module per context. With K the module's entry kernels:
// - the candidates are the libraries whose kernels are exactly K (read from the driver), less those whose module
//   in this context is known (a module with kernels K loaded inside a call on that library);
// - the claimants are the modules of the context with kernels K loaded outside any followed call. A module with
//   kernels K loaded through a module handle or a launch (its library unknown) makes the whole group a decline;
// - k claimants and k candidates are paired, or the group is declined. The k claimants are the k candidates'
//   modules in an order nothing tells, but modules that define the same variables (names, sizes, kinds) are
//   interchangeable for capture: any one-to-one pairing captures the same set of variables. So claimants with
//   the same variables are paired in order (by id, libraries by handle) with as many libraries whose module has
//   those variables. Where the claimants define different sets of variables, each library is asked for every
//   set's names with cuLibraryGetGlobal in this context: its module's set is the one among those it has every
//   variable of (name and size) that includes all the others it has. A library that fits no set, or two, and a
//   set found in a number of libraries other than its number of modules, decline the group.
// Each pairing is then still checked by cuModuleGetGlobal on the library's module (resolve), and every pairing
// is computed afresh once a module or a library comes or goes (generation_).
tracker::pairing_t tracker::pair_group(const module_t& module) {
  using signature_t = std::vector<std::tuple<std::string, uint64_t, cubin::section_kind>>;
  name_libraries();
  pairing_t out;
  std::vector<CUlibrary> candidates;                        // ordered by handle (libraries_ is)
  std::vector<std::pair<uint32_t, signature_t>> claimants;  // ordered by id (modules_ is)
  size_t through_handle = 0;
  size_t claimed = 0;  // candidates whose module in this context is known (loaded inside a call on them)
  std::string figures;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.generation = generation_.load(std::memory_order_relaxed);
    size_t unreadable = 0;
    for (const auto& [library, entry] : libraries_) {
      if (!entry.named || entry.unreadable) {
        ++unreadable;  // (not named: loaded since name_libraries ran)
      } else if (entry.names == module.kernels) {
        candidates.push_back(library);
      }
    }
    for (const auto& [id, other] : modules_) {
      if (other->context != module.context || other->kernels != module.kernels) {
        continue;
      }
      if (other->origin.kind == origin_kind::none) {
        claimants.emplace_back(id, variable_set(other->variables));
      } else if (other->origin.kind == origin_kind::library) {
        const auto known = static_cast<CUlibrary>(other->origin.handle);
        const auto kept = std::remove(candidates.begin(), candidates.end(), known);
        claimed += static_cast<size_t>(candidates.end() - kept);
        candidates.erase(kept, candidates.end());
      } else {
        ++through_handle;
      }
    }
    figures = " (" + counted(module.kernels.size(), "entry kernel", "entry kernels") +
              (module.kernels.empty() ? std::string() : ", the first " + module.kernels.front()) + "; " +
              counted(libraries_.size(), "library", "libraries") + " known, " + std::to_string(unreadable) +
              " unreadable";
    if (candidates.empty() && claimed == 0 && through_handle == 0) {
      // The closest library by kernels in common: what the modules may be, for whoever reads the decline.
      size_t best = 0;
      size_t best_size = 0;
      size_t as_close = 0;
      for (const auto& [library, entry] : libraries_) {
        if (!entry.named || entry.unreadable) {
          continue;
        }
        const size_t shared = common_names(entry.names, module.kernels);
        if (as_close == 0 || shared > best) {
          best = shared;
          best_size = entry.names.size();
          as_close = 1;
        } else if (shared == best) {
          ++as_close;
        }
      }
      figures += as_close == 0 ? std::string("; no readable library")
                               : "; the closest readable library has " + std::to_string(best) + " of its " +
                                     std::to_string(best_size) + " kernels among the module's " +
                                     std::to_string(module.kernels.size()) +
                                     (as_close > 1 ? " (" + std::to_string(as_close) + " libraries as close)"
                                                   : std::string());
    }
    figures += ")";
  }
  const size_t k = claimants.size();
  if (candidates.empty() && claimed == 0 && through_handle == 0) {
    out.why = "no module or library handle was known on the loading thread and no known library has exactly its "
              "kernels" + located() + figures;
    return out;
  }
  // More candidates than modules: under eager loading every library's module is in every context already, so
  // asking a library for its variables by name (cuLibraryGetGlobal) loads nothing, and a library that has none
  // of a group's variables is simply another library's (a translation unit's variables carry its own hash in
  // their names, so they are found in one library only). Under lazy loading the question could load a module
  // inside kreplay's own call, where it would go untracked: declined as before.
  const bool surplus = candidates.size() > k && k > 0 && eager_loading_.load(std::memory_order_relaxed) &&
                       driver_.library_get_global != nullptr && through_handle == 0;
  if (through_handle > 0 || (candidates.size() != k && !surplus)) {
    out.why = counted(k, "module", "modules") + " of its context (loaded outside any followed call" +
              (through_handle > 0 ? ", and " + std::to_string(through_handle) + " more through a module handle or a "
                                    "launch" : std::string()) +
              ") and " + counted(candidates.size(), "known library", "known libraries") +
              (claimed > 0 ? " (besides " + std::to_string(claimed) + " whose module in this context is known)"
                           : std::string()) +
              " have exactly its kernels; only as many modules as libraries, all loaded outside any followed call, "
              "can be paired" + located() + figures;
    return out;
  }
  // The claimants by their variables, each group's ids in order.
  std::map<signature_t, std::vector<uint32_t>> groups;
  for (const auto& [id, signature] : claimants) {
    groups[signature].push_back(id);
  }
  std::map<const signature_t*, std::vector<CUlibrary>> homes;
  if (groups.size() == 1 && !surplus) {
    homes[&groups.begin()->first] = candidates;
  } else if (driver_.library_get_global == nullptr) {
    out.why = counted(k, "module", "modules") + " of its context and " +
                  counted(candidates.size(), "known library", "known libraries") + " have exactly its "
              "kernels, but the modules define " + std::to_string(groups.size()) + " different sets of variables "
              "and the driver has no cuLibraryGetGlobal to tell which library has which" + located() + figures;
    return out;
  } else {
    for (CUlibrary library : candidates) {
      std::vector<const signature_t*> fits;  // the sets of variables this library has, every one by name and size
      for (const auto& [signature, ids] : groups) {
        bool all = true;
        for (size_t i = 0; all && i < signature.size(); ++i) {
          CUdeviceptr address = 0;
          size_t bytes = 0;
          all = driver_.library_get_global(&address, &bytes, library, std::get<0>(signature[i]).c_str()) ==
                    CUDA_SUCCESS &&
                bytes == std::get<1>(signature[i]);
        }
        if (all) {
          fits.push_back(&signature);
        }
      }
      const signature_t* home = nullptr;
      size_t homes_found = 0;
      for (const signature_t* candidate : fits) {
        const auto outer = names_and_sizes(*candidate);
        bool covers = true;
        for (const signature_t* other : fits) {
          const auto inner = names_and_sizes(*other);
          covers = covers && std::includes(outer.begin(), outer.end(), inner.begin(), inner.end());
        }
        if (covers) {
          home = candidate;
          ++homes_found;
        }
      }
      if (homes_found == 0 && surplus) {
        continue;  // the module of a library none of these modules is
      }
      if (homes_found != 1) {
        out.why = counted(k, "module", "modules") + " of its context and " +
                  counted(candidates.size(), "known library", "known libraries") + " have exactly its "
                  "kernels, and the modules define " + std::to_string(groups.size()) + " different sets of "
                  "variables, but a library's variables (cuLibraryGetGlobal) fit " +
                  (homes_found == 0 ? std::string("none") : std::to_string(homes_found)) + " of them" + located() +
                  figures;
        return out;
      }
      homes[home].push_back(library);
    }
  }
  for (const auto& [signature, ids] : groups) {
    const std::vector<CUlibrary>& libraries = homes[&signature];
    if (libraries.size() != ids.size()) {
      out.library.clear();
      out.why = counted(k, "module", "modules") + " of its context and " +
                  counted(candidates.size(), "known library", "known libraries") + " have exactly its "
                "kernels, but a set of " + counted(signature.size(), "variable", "variables") + " defined by " +
                counted(ids.size(), "module", "modules") + " is found in " +
                counted(libraries.size(), "library", "libraries") + " (cuLibraryGetGlobal)" + located() + figures;
      return out;
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      out.library[ids[i]] = libraries[i];
    }
  }
  return out;
}

void tracker::note_error(const std::string& text) {
  log(KREPLAY_LOG_WARNING, "%s", text.c_str());
  std::lock_guard<std::mutex> lock(mutex_);
  last_error_ = text;
}

// Finds the module's CUmodule from what was known when it was loaded, then every variable's address. Runs with
// the module's context current (pushed here), outside any callback.
kreplay_status_t tracker::resolve(module_t& module, std::string* detail) {
  auto fail = [&](const std::string& why) {
    std::string text = "module " + std::to_string(module.id) + " (device " + std::to_string(module.ordinal) +
                       ", " + std::to_string(module.variables.size()) + " variables, loaded inside " +
                       module.origin.call + "): " + why + "; snapshots of this device are declined";
    note_error(text);
    if (detail != nullptr && detail->empty()) {
      *detail = text;
    }
    return KREPLAY_STATUS_DEVICE_ERROR;
  };
  if (module.error != cubin::error_t::none) {
    return fail(std::string("its cubin cannot be read: ") + cubin::error_string(module.error) + " (" +
                module.detail + ")");
  }
  if (module.resolved || module.variables.empty()) {
    module.resolved = true;
    return KREPLAY_STATUS_SUCCESS;
  }
  if (driver_.ctx_push == nullptr || driver_.ctx_pop == nullptr || driver_.module_get_global == nullptr) {
    return fail("the driver lacks cuCtxPushCurrent / cuModuleGetGlobal");
  }
  if (driver_.ctx_push(module.context) != CUDA_SUCCESS) {
    return fail("its context cannot be made current");
  }
  struct pop_t {
    const driver_api_t& driver;
    ~pop_t() {
      CUcontext ignored = nullptr;
      (void)driver.ctx_pop(&ignored);
    }
  } pop{driver_};

  CUmodule handle = nullptr;
  const char* function_name = nullptr;  // a kernel known to be in the module, checked against the cubin
  auto from_library = [&](CUlibrary library) {
    return driver_.library_get_module != nullptr && driver_.library_get_module(&handle, library) == CUDA_SUCCESS;
  };
  auto from_kernel = [&](CUkernel kernel) {
    CUlibrary library = nullptr;
    if (driver_.kernel_get_library == nullptr || driver_.kernel_get_library(&library, kernel) != CUDA_SUCCESS) {
      return false;
    }
    if (driver_.kernel_get_name != nullptr && driver_.kernel_get_name(&function_name, kernel) != CUDA_SUCCESS) {
      function_name = nullptr;
    }
    return from_library(library);
  };
  switch (module.origin.kind) {
    case origin_kind::module:
      handle = static_cast<CUmodule>(module.origin.handle);
      break;
    case origin_kind::library:
      if (!from_library(static_cast<CUlibrary>(module.origin.handle))) {
        return fail("cuLibraryGetModule failed for the library it was loaded from");
      }
      break;
    case origin_kind::kernel:
      if (!from_kernel(static_cast<CUkernel>(module.origin.handle))) {
        return fail("the library of the kernel it was loaded for cannot be found");
      }
      break;
    case origin_kind::function: {
      // A launch takes a CUfunction, or a CUkernel passed as one (what cudart does): try both.
      CUfunction function = static_cast<CUfunction>(module.origin.handle);
      if (driver_.func_get_module != nullptr && driver_.func_get_module(&handle, function) == CUDA_SUCCESS) {
        if (driver_.func_get_name == nullptr || driver_.func_get_name(&function_name, function) != CUDA_SUCCESS) {
          function_name = nullptr;
        }
      } else if (!from_kernel(reinterpret_cast<CUkernel>(function))) {
        return fail("the launched function's module cannot be found");
      }
      if (function_name == nullptr) {
        return fail("the launched function's name cannot be read to check the association");
      }
      break;
    }
    case origin_kind::none: {
      // Loaded inside a call the CUPTI layer does not follow: a launch (lazy loading; launches are not
      // followed, for the overhead) or cuDevicePrimaryCtxRetain / cuCtxCreate (eager loading: every library
      // loaded before the context). Paired with a library by its entry kernels where that is exact
      // (library_by_kernels); cuLibraryGetModule in this context is then this module, or one interchangeable
      // with it (checked below by every variable's address and size).
      std::string why;
      CUlibrary library = library_by_kernels(module, &why);
      if (library == nullptr) {
        return fail(why);
      }
      if (!from_library(library)) {
        return fail("cuLibraryGetModule failed for the library with its kernels");
      }
      break;
    }
  }
  if (handle == nullptr) {
    return fail("no CUmodule handle");
  }
  if (function_name != nullptr &&
      !std::binary_search(module.functions.begin(), module.functions.end(), std::string(function_name))) {
    return fail(std::string("the function it was loaded for (") + function_name + ") is not in its cubin");
  }
  std::vector<uint64_t> addresses;
  addresses.reserve(module.variables.size());
  for (const cubin::variable_t& variable : module.variables) {
    CUdeviceptr address = 0;
    size_t bytes = 0;
    if (driver_.module_get_global(&address, &bytes, handle, variable.name.c_str()) != CUDA_SUCCESS) {
      return fail("cuModuleGetGlobal(" + variable.name + ") failed");
    }
    if (bytes != variable.size) {
      return fail("cuModuleGetGlobal(" + variable.name + ") gives " + std::to_string(bytes) +
                  " bytes, the cubin " + std::to_string(variable.size));
    }
    addresses.push_back(static_cast<uint64_t>(address));
  }
  module.addresses = std::move(addresses);
  module.resolved = true;
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t tracker::visit_module(module_t& module, bool (*visit)(void*, const resolved_variable_t&),
                                       void* data, std::string* detail, bool* stop) {
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

kreplay_status_t tracker::list_variables(int ordinal, bool (*visit)(void*, const resolved_variable_t&), void* data,
                                         std::string* detail) {
  if (const uint64_t lost = lost_events_.load(std::memory_order_relaxed); lost > 0) {
    std::string text = std::to_string(lost) +
                       " intercepted events could not be recorded (out of host memory inside a callback); "
                       "snapshots are declined";
    note_error(text);
    if (detail != nullptr && detail->empty()) {
      *detail = text;
    }
    return KREPLAY_STATUS_DEVICE_ERROR;
  }
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
    const std::string text = "module " + std::to_string(unplaced) + " has variables in a context whose device "
                             "is unknown; snapshots of every device are declined";
    note_error(text);
    if (detail != nullptr && detail->empty()) {
      *detail = text;
    }
    result = KREPLAY_STATUS_DEVICE_ERROR;
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

// ---- kreplay's ops ----------------------------------------------------------------------------------------

kreplay_status_t tracker::pointer_info(const void* ptr, kreplay_pointer_info_t* info_out) {
  if (info_out == nullptr) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  const uint64_t address = reinterpret_cast<uint64_t>(ptr);
  kreplay_pointer_info_t info{};
  info.type = KREPLAY_POINTER_UNKNOWN;
  info.base = const_cast<void*>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocations_.upper_bound(address);
  if (it != allocations_.begin()) {
    --it;
    const allocation_t& allocation = it->second;
    if (address - it->first < allocation.size) {
      info.base = reinterpret_cast<void*>(it->first);
      info.size = allocation.size;
      info.owner = agent_of(allocation.ordinal);
      switch (allocation.kind) {
        case memory_kind::device:
        case memory_kind::pool:
          // Coherent at kernel boundaries only, which is what a snapshot between launches relies on.
          info.type = KREPLAY_POINTER_DEVICE;
          info.global_flags = KREPLAY_GLOBAL_FLAG_COARSE_GRAINED;
          break;
        case memory_kind::managed:
          info.type = KREPLAY_POINTER_MANAGED;
          info.global_flags = KREPLAY_GLOBAL_FLAG_FINE_GRAINED;
          break;
        case memory_kind::host_pinned:
        case memory_kind::host_mapped:
          info.type = KREPLAY_POINTER_LOCKED;
          info.global_flags = KREPLAY_GLOBAL_FLAG_FINE_GRAINED;
          break;
      }
    }
  }
  *info_out = info;
  return KREPLAY_STATUS_SUCCESS;
}

kreplay_status_t tracker::iterate_module_variables(kreplay_agent_t agent, kreplay_module_variable_visitor_t visit,
                                                   void* visit_data) {
  if (visit == nullptr || agent.handle == 0) {
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
  return list_variables(static_cast<int>(agent.handle - 1), each, &forward, nullptr);
}

// ---- Introspection ----------------------------------------------------------------------------------------

untracked_t tracker::untracked(int ordinal) {
  untracked_t out{};
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [address, allocation] : allocations_) {
    if (captured(allocation.kind) || allocation.ordinal != ordinal) {
      continue;
    }
    const size_t index = static_cast<size_t>(allocation.kind) - static_cast<size_t>(memory_kind::managed);
    ++out.count[index];
    out.bytes[index] += allocation.size;
  }
  return out;
}

size_t tracker::live_bytes(int ordinal) {
  size_t bytes = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [address, allocation] : allocations_) {
    if (captured(allocation.kind) && allocation.ordinal == ordinal) {
      bytes += allocation.size;
    }
  }
  for (const auto& [address, mapping] : mappings_) {
    if (mapping.ordinal == ordinal) {
      for (const auto& piece : mapping.recorded) {
        bytes += piece.second;
      }
    }
  }
  return bytes;
}

void tracker::module_counts(int ordinal, size_t* modules, size_t* variables) {
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

tracker_counts_t tracker::counts() {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

std::string tracker::last_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_error_;
}

}  // namespace kreplay::cuda::inject
