// The memory table's virtual memory: handles (cuMemCreate), their mappings (cuMemMap), and the pages made
// read-write for their own device (cuMemSetAccess), which are the ones recorded with kreplay.
#include <algorithm>
#include <cinttypes>
#include <iterator>

#include "log.hpp"
#include "tracker/memory_table.hpp"

namespace kreplay::cuda::inject {

namespace {

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

// Cuts [address, end) out of `recorded`: what was cut goes to *cut, the rest is returned.
std::vector<std::pair<uint64_t, size_t>> cut_out(const std::vector<std::pair<uint64_t, size_t>>& recorded,
                                                 uint64_t address, uint64_t end,
                                                 std::vector<std::pair<uint64_t, size_t>>* cut) {
  std::vector<std::pair<uint64_t, size_t>> kept;
  for (const auto& [base, bytes] : recorded) {
    const uint64_t lo = std::max(base, address);
    const uint64_t hi = std::min(base + bytes, end);
    if (lo >= hi) {
      kept.emplace_back(base, bytes);
      continue;
    }
    cut->emplace_back(lo, hi - lo);
    if (base < lo) {
      kept.emplace_back(base, lo - base);
    }
    if (base + bytes > hi) {
      kept.emplace_back(hi, base + bytes - hi);
    }
  }
  return kept;
}

void trace_access(uint64_t address, size_t size, const access_t* access, size_t count) {
  const access_t none{false, -1, false};
  const access_t& first = count != 0 ? access[0] : none;
  log(KREPLAY_LOG_TRACE, "vmem access 0x%" PRIx64 " %zu bytes, %zu descriptors, the first %s %d %s", address, size,
      count, first.device ? "device" : "other", first.ordinal, first.read_write ? "read-write" : "not read-write");
}

}  // namespace

void memory_table::vmem_created(uint64_t handle, size_t size, bool device, int ordinal) {
  log(KREPLAY_LOG_TRACE, "vmem create handle 0x%" PRIx64 " %zu bytes %s %d", handle, size, device ? "device" : "other",
      ordinal);
  std::lock_guard<std::mutex> lock(mutex_);
  handles_[handle] = handle_t{size, device, ordinal};
}

void memory_table::vmem_released(uint64_t handle) {
  // Mappings keep the physical memory alive until they are unmapped; they carry their own copy of its owner.
  log(KREPLAY_LOG_TRACE, "vmem release handle 0x%" PRIx64, handle);
  std::lock_guard<std::mutex> lock(mutex_);
  handles_.erase(handle);
}

void memory_table::vmem_mapped(uint64_t address, size_t size, uint64_t handle) {
  log(KREPLAY_LOG_TRACE, "vmem map 0x%" PRIx64 " %zu bytes handle 0x%" PRIx64, address, size, handle);
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

std::map<uint64_t, memory_table::mapping_t>::iterator memory_table::first_mapping_locked(uint64_t address) {
  // The last mapping that begins at or below address, else the first one.
  auto it = mappings_.upper_bound(address);
  if (it != mappings_.begin()) {
    --it;
  }
  return it;
}

void memory_table::vmem_access(uint64_t address, size_t size, const access_t* access, size_t count) {
  trace_access(address, size, access, count);
  const uint64_t end = address + size;
  std::vector<std::pair<std::pair<uint64_t, size_t>, int>> record;  // (range, ordinal)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = first_mapping_locked(address); it != mappings_.end() && it->first < end; ++it) {
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
      record_unknown_owner(piece.first, piece.second);
    } else {
      record_map(piece.first, piece.second, ordinal);
    }
  }
}

void memory_table::vmem_unmapping(uint64_t address, size_t size) {
  log(KREPLAY_LOG_TRACE, "vmem unmap 0x%" PRIx64 " %zu bytes", address, size);
  const uint64_t end = address + size;
  ranges_t unmap;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = first_mapping_locked(address);
    while (it != mappings_.end() && it->first < end) {
      mapping_t& mapping = it->second;
      const uint64_t top = it->first + mapping.size;
      if (top <= address) {
        ++it;
        continue;
      }
      mapping.recorded = cut_out(mapping.recorded, address, end, &unmap);
      it = address <= it->first && end >= top ? mappings_.erase(it) : std::next(it);
    }
  }
  for (const auto& [base, bytes] : unmap) {
    record_unmap(base, bytes);
  }
}

}  // namespace kreplay::cuda::inject
