#include "tracker/memory_table.hpp"

#include <cinttypes>
#include <iterator>

#include "kreplay/cuda.hpp"
#include "log.hpp"

namespace kreplay::cuda::inject {

namespace {

// What free_failed needs to put a freed allocation back: the last free of this thread.
thread_local struct last_free_t {
  uint64_t address;
  size_t size;
  memory_kind kind;
  int ordinal;
  CUcontext context;
  bool valid;
} t_last_free = {};

bool captured(memory_kind kind) { return kind == memory_kind::device || kind == memory_kind::pool; }

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

void* pointer(uint64_t address) { return reinterpret_cast<void*>(address); }

// Where kreplay's pointer_info places memory of `kind`.
void classify(memory_kind kind, kreplay_pointer_info_t* info) {
  switch (kind) {
    case memory_kind::device:
    case memory_kind::pool:
      // Coherent at kernel boundaries only, which is what a snapshot between launches relies on.
      info->type = KREPLAY_POINTER_DEVICE;
      info->global_flags = KREPLAY_GLOBAL_FLAG_COARSE_GRAINED;
      break;
    case memory_kind::managed:
      info->type = KREPLAY_POINTER_MANAGED;
      info->global_flags = KREPLAY_GLOBAL_FLAG_FINE_GRAINED;
      break;
    case memory_kind::host_pinned:
    case memory_kind::host_mapped:
      info->type = KREPLAY_POINTER_LOCKED;
      info->global_flags = KREPLAY_GLOBAL_FLAG_FINE_GRAINED;
      break;
  }
}

}  // namespace

// ---- kreplay's inventory ----------------------------------------------------------------------------------

void memory_table::check(kreplay_status_t status, const char* what, uint64_t address) {
  if (status == KREPLAY_STATUS_SUCCESS || status == KREPLAY_STATUS_NOT_FOUND) {
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_.record_errors;
  }
  log(KREPLAY_LOG_WARNING, "%s(0x%" PRIx64 ") answered %s", what, address, kreplay_status_string(status));
}

void memory_table::record_alloc(uint64_t address, size_t size) {
  check(kreplay_record_alloc(pointer(address), size, 0), "kreplay_record_alloc", address);
}

void memory_table::record_free(uint64_t address) {
  check(kreplay_record_free(pointer(address)), "kreplay_record_free", address);
}

void memory_table::record_unmap(uint64_t address, size_t size) {
  check(kreplay_record_vmem_unmap(pointer(address), size), "kreplay_record_vmem_unmap", address);
}

void memory_table::record_unknown_owner(uint64_t address, size_t size) {
  check(kreplay_record_vmem_map_unknown_owner(pointer(address), size), "kreplay_record_vmem_map_unknown_owner",
        address);
}

void memory_table::record_map(uint64_t address, size_t size, int ordinal) {
  check(kreplay_record_vmem_map(pointer(address), size, agent_of_device(ordinal)), "kreplay_record_vmem_map", address);
}

// ---- Contexts ---------------------------------------------------------------------------------------------

void memory_table::context_device(CUcontext context, int ordinal, bool primary) {
  std::lock_guard<std::mutex> lock(mutex_);
  contexts_[context] = ordinal;
  if (primary) {
    primary_[ordinal] = context;
  }
}

int memory_table::device_of(CUcontext context) {
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

void memory_table::context_destroyed(CUcontext context) {
  std::vector<uint64_t> addresses;
  ranges_t unknown;  // recorded with an unknown owner
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = allocations_.begin(); it != allocations_.end();) {
      if (it->second.context != context) {
        ++it;
        continue;
      }
      if (captured(it->second.kind) && it->second.ordinal >= 0) {
        addresses.push_back(it->first);
      } else if (captured(it->second.kind)) {
        unknown.emplace_back(it->first, it->second.size);
      }
      it = allocations_.erase(it);
    }
    const bool known = contexts_.erase(context) != 0 || !addresses.empty() || !unknown.empty();
    for (auto it = primary_.begin(); it != primary_.end();) {
      it = it->second == context ? primary_.erase(it) : std::next(it);
    }
    if (!known) {
      // The same destruction reported again (cuCtxDestroy's entry, then CONTEXT_DESTROY_STARTING within it),
      // or a context never seen: nothing to forget, nothing to count.
      return;
    }
    ++counts_.contexts_forgotten;
  }
  log(KREPLAY_LOG_INFO, "context %p destroyed: %zu allocations forgotten", static_cast<void*>(context),
      addresses.size());
  for (uint64_t address : addresses) {
    record_free(address);
  }
  for (const auto& [address, size] : unknown) {
    record_unmap(address, size);
  }
}

CUcontext memory_table::primary_context(int ordinal) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = primary_.find(ordinal);
  return found != primary_.end() ? found->second : nullptr;
}

// ---- Allocations ------------------------------------------------------------------------------------------

void memory_table::allocated(CUcontext context, uint64_t address, size_t size, memory_kind kind) {
  if (address == 0 || size == 0) {
    return;
  }
  const int ordinal = device_of(context);
  bool replaced = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counts_.allocations;
    replaced = !allocations_.insert_or_assign(address, allocation_t{size, kind, ordinal, context}).second;
  }
  if (replaced) {
    // The driver handed out an address the table still holds: its free went by a path not followed here.
    log(KREPLAY_LOG_WARNING, "allocation at 0x%" PRIx64 " seen again without a free; the old one is forgotten",
        address);
    record_free(address);
  }
  log(KREPLAY_LOG_TRACE, "alloc %s 0x%" PRIx64 " %zu bytes device %d", kind_name(kind), address, size, ordinal);
  if (captured(kind) && ordinal < 0) {
    // Never lost silently: kreplay declines every device's snapshots while it is live.
    log(KREPLAY_LOG_WARNING, "device allocation at 0x%" PRIx64 " (%zu bytes) in context %p of unknown device: "
        "snapshots are declined while it lives", address, size, static_cast<void*>(context));
    record_unknown_owner(address, size);
  } else {
    // Managed and host memory go to kreplay too: pointer_info classifies them, so kreplay counts them as untracked
    // memory of their kind (kreplay_untracked_stats, the window's outcome, the policy's decline mask).
    record_alloc(address, size);
  }
}

void memory_table::freeing(uint64_t address) {
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
  if (captured(allocation.kind) && allocation.ordinal < 0) {
    record_unmap(address, allocation.size);
  } else {
    // For managed and host memory kreplay answers NOT_FOUND (nothing captured) and forgets its untracked entry.
    record_free(address);
  }
}

void memory_table::free_failed(uint64_t address) {
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
    record_unknown_owner(address, last.size);
  } else if (captured(last.kind)) {
    check(kreplay_record_free_undo(pointer(address)), "kreplay_record_free_undo", address);
  }
}

// ---- Queries ----------------------------------------------------------------------------------------------

kreplay_status_t memory_table::pointer_info(const void* ptr, kreplay_pointer_info_t* info_out) {
  if (info_out == nullptr) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  const uint64_t address = reinterpret_cast<uint64_t>(ptr);
  kreplay_pointer_info_t info{};
  info.type = KREPLAY_POINTER_UNKNOWN;
  info.base = const_cast<void*>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocations_.upper_bound(address);
  if (it != allocations_.begin() && address - std::prev(it)->first < std::prev(it)->second.size) {
    --it;
    info.base = pointer(it->first);
    info.size = it->second.size;
    info.owner = agent_of_device(it->second.ordinal);
    classify(it->second.kind, &info);
  } else {
    mapped_piece_locked(address, &info);
  }
  *info_out = info;
  return KREPLAY_STATUS_SUCCESS;
}

// Virtual memory: the recorded piece of a mapping that holds address (made read-write for its own device, what
// kreplay captures), as device memory of that device. Pieces of one mapping lie end to end where cuMemSetAccess
// was called in parts: each is its own region, as it is to kreplay. (mutex_ held.)
void memory_table::mapped_piece_locked(uint64_t address, kreplay_pointer_info_t* info) {
  const auto it = first_mapping_locked(address);  // its pieces lie inside it: one of them holds address, or none
  if (it == mappings_.end() || it->second.ordinal < 0) {
    return;
  }
  const mapping_t& mapping = it->second;
  for (const auto& [base, bytes] : mapping.recorded) {
    if (address >= base && address - base < bytes) {
      info->base = pointer(base);
      info->size = bytes;
      info->owner = agent_of_device(mapping.ordinal);
      classify(memory_kind::device, info);
      return;
    }
  }
}

untracked_t memory_table::untracked(int ordinal) {
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

size_t memory_table::live_bytes(int ordinal) {
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

tracker_counts_t memory_table::counts() {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

}  // namespace kreplay::cuda::inject
