// The injection library's log: lines on stderr prefixed "kreplay-inject:", at or below the level chosen by
// KREPLAY_INJECT_LOG (warning by default). kreplay's own messages are routed here too (injection.cpp).
#ifndef KREPLAY_CUDA_INJECT_LOG_HPP
#define KREPLAY_CUDA_INJECT_LOG_HPP

#include "kreplay.h"

namespace kreplay::cuda::inject {

void set_log_level(kreplay_log_level_t level);
kreplay_log_level_t log_level();
bool log_enabled(kreplay_log_level_t level);
// printf-style; one line, the newline is added.
void log(kreplay_log_level_t level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_LOG_HPP
