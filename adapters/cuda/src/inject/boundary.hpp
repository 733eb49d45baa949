// The C boundary of the injection library's exports (InitializeInjection, kreplay_inject_*): one rule at every
// one, as #[ffi_guard] is for the Rust exports. An export's body runs inside `guarded`; an exception never
// crosses into the driver or the host's C code: it is logged in one line that names the export, and the export
// returns its failure value, which comes from its return type (export_failure), not from a value typed at each
// export. The export's name comes from the code (__func__).
#ifndef KREPLAY_CUDA_INJECT_BOUNDARY_HPP
#define KREPLAY_CUDA_INJECT_BOUNDARY_HPP

#include <exception>
#include <new>
#include <type_traits>

#include "kreplay.h"
#include "log.hpp"

namespace kreplay::cuda::inject {

// An export's failure values by return type. Left undefined for other types: an export that returns anything
// else must name its values (guarded_with), as InitializeInjection does.
template <typename T>
struct export_failure;

template <>
struct export_failure<kreplay_status_t> {
  static constexpr kreplay_status_t failure = KREPLAY_STATUS_INTERNAL_ERROR;
  static constexpr kreplay_status_t out_of_memory = KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
};

// The one line for an exception caught at the boundary.
inline void log_caught(const char* name, const char* what) noexcept {
  log(KREPLAY_LOG_WARNING, "%s failed: %s", name, what);
}

// Runs `body` and returns what it returns; an exception leaving it becomes `failure` (`out_of_memory` for
// std::bad_alloc), with one line.
template <typename R, typename F>
R guarded_with(const char* name, R failure, R out_of_memory, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    log_caught(name, "out of host memory");
    return out_of_memory;
  } catch (const std::exception& error) {
    log_caught(name, error.what());
    return failure;
  } catch (...) {
    log_caught(name, "an exception that is not a std::exception");
    return failure;
  }
}

// guarded_with with the failure values of the body's return type.
template <typename F>
std::invoke_result_t<F&> guarded(const char* name, F&& body) noexcept {
  using result_t = std::invoke_result_t<F&>;
  return guarded_with<result_t>(name, export_failure<result_t>::failure, export_failure<result_t>::out_of_memory,
                                body);
}

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_BOUNDARY_HPP
