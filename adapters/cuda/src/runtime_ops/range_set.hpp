// Address ranges of one kind (host memory page-locked through host_lock, or device storage from device_alloc):
// how copy_batch tells, without a driver query per pointer, which copies its kernel may do. Internal; inline,
// since copy_batch asks it up to four times per copy.
#ifndef KREPLAY_CUDA_RUNTIME_OPS_RANGE_SET_HPP
#define KREPLAY_CUDA_RUNTIME_OPS_RANGE_SET_HPP

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <utility>

namespace kreplay::cuda::detail {

class range_set {
 public:
  // The range found last, checked first by contains_locked: a batch's copies usually come in address order from
  // a few large staging mappings.
  using hint_t = std::pair<uintptr_t, size_t>;

  // False when there was no memory to record the range.
  bool add(const void* ptr, size_t bytes) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    try {
      ranges_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
    } catch (const std::bad_alloc&) {
      return false;
    }
    return true;
  }

  void remove(const void* ptr) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    ranges_.erase(reinterpret_cast<uintptr_t>(ptr));
  }

  // Every range forgotten at once (their device context is gone: nothing is unregistered or freed).
  void clear() {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    ranges_.clear();
  }

  std::shared_mutex& mutex() const { return mutex_; }

  // With mutex() held shared: whether [ptr, ptr + bytes) lies inside one range.
  bool contains_locked(const void* ptr, size_t bytes, hint_t& hint) const {
    const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
    if (p >= hint.first && p - hint.first <= hint.second && bytes <= hint.second - (p - hint.first)) {
      return true;
    }
    auto it = ranges_.upper_bound(p);
    if (it == ranges_.begin()) {
      return false;
    }
    --it;
    if (p - it->first <= it->second && bytes <= it->second - (p - it->first)) {
      hint = *it;
      return true;
    }
    return false;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, size_t> ranges_;
};

}  // namespace kreplay::cuda::detail

#endif  // KREPLAY_CUDA_RUNTIME_OPS_RANGE_SET_HPP
