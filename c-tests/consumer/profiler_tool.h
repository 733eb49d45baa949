/* The public interface of the stand-in profiler tool: a C++ shared library that uses kreplay internally and
 * exports only these functions. */
#ifndef PROFILER_TOOL_H
#define PROFILER_TOOL_H

#include <stddef.h>
#include <stdint.h>

#define PROFILER_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

/* Acquires size bytes of staging for agent, writes all of them, releases them and acquires the same size
 * again. Returns 0 when the second acquire got the retained storage back and the pool's accounting matched,
 * otherwise a nonzero kreplay status (or -1 for a wrong result). */
PROFILER_API int profiler_staging_round_trip(uint64_t agent, size_t size);

/* The status of a zero-byte staging acquire (the library rejects it). */
PROFILER_API int profiler_staging_zero_size_status(uint64_t agent);

/* kreplay's text for a status value. */
PROFILER_API const char* profiler_status_name(int status);

/* Switches allocation tracking on or off and returns whether it is on afterwards. */
PROFILER_API int profiler_set_tracking(int enabled);

/* The same round trip through kreplay.hpp's RAII buffer, including a move. 0: passed, 1: failed, 2: the
 * C++ header is not there to test. */
PROFILER_API int profiler_cpp_round_trip(uint64_t agent, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* PROFILER_TOOL_H */
