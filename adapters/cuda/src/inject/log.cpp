#include "log.hpp"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace kreplay::cuda::inject {
namespace {
std::atomic<int> g_level{KREPLAY_LOG_WARNING};
}  // namespace

void set_log_level(kreplay_log_level_t level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

kreplay_log_level_t log_level() { return static_cast<kreplay_log_level_t>(g_level.load(std::memory_order_relaxed)); }

bool log_enabled(kreplay_log_level_t level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void log(kreplay_log_level_t level, const char* format, ...) {
  if (!log_enabled(level)) {
    return;
  }
  // One buffer and one write, so that lines from several threads do not interleave.
  char line[1024];
  int used = std::snprintf(line, sizeof(line), "kreplay-inject: ");
  va_list args;
  va_start(args, format);
  int body = std::vsnprintf(line + used, sizeof(line) - static_cast<size_t>(used) - 1, format, args);
  va_end(args);
  size_t length = static_cast<size_t>(used) + (body < 0 ? 0 : static_cast<size_t>(body));
  if (length > sizeof(line) - 2) {
    length = sizeof(line) - 2;
  }
  line[length] = '\n';
  std::fwrite(line, 1, length + 1, stderr);
}

}  // namespace kreplay::cuda::inject
