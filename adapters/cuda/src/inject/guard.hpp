// The re-entry guard: set on a thread while it runs one of kreplay's own device operations, so that the driver
// calls those operations make (copies, device-tier allocations, module queries) never reach the tracker.
#ifndef KREPLAY_CUDA_INJECT_GUARD_HPP
#define KREPLAY_CUDA_INJECT_GUARD_HPP

namespace kreplay::cuda::inject {

// Initial-exec TLS: the library is dlopen'd by the driver, and a general-dynamic access may enter the dynamic
// loader (__tls_get_addr's slow path) from inside a driver callback, where the driver holds its own locks.
extern thread_local int t_own_calls __attribute__((tls_model("initial-exec")));

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
