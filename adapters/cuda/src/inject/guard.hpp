// The re-entry guard: set on a thread while it runs one of kreplay's own device operations, so that the driver
// calls those operations make (copies, device-tier allocations, module queries) never reach the tracker.
#ifndef KREPLAY_CUDA_INJECT_GUARD_HPP
#define KREPLAY_CUDA_INJECT_GUARD_HPP

namespace kreplay::cuda::inject {

// General-dynamic TLS, like every thread_local here: the library is dlopen'd by the driver, and initial-exec
// TLS would mark the whole module STATIC_TLS, which its 12 KiB, page-aligned TLS block (the static CUDA
// runtime's and kreplay's) does not fit: dlopen then fails with "cannot allocate memory in static TLS block".
extern thread_local int t_own_calls;

inline bool inside_own_call() { return t_own_calls != 0; }

class own_call_scope {
 public:
  own_call_scope() { ++t_own_calls; }
  ~own_call_scope() { --t_own_calls; }
  own_call_scope(const own_call_scope&) = delete;
  own_call_scope& operator=(const own_call_scope&) = delete;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_GUARD_HPP
