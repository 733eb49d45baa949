// Logging: one sink for kreplay's messages and the adapter's own.
#include "internal.hpp"

#include <kreplay/hsa.hpp>

#include <cstdarg>
#include <cstdio>

namespace kreplay::hsa {
namespace {

// Constant-initialised atomics only: messages can arrive from other libraries' static destructors, after
// anything with a non-trivial destructor here would have run.
std::atomic<log_sink_t> g_sink{nullptr};
std::atomic<int> g_max_level{KREPLAY_LOG_WARNING};

const char* level_name(kreplay_log_level_t level) {
  switch (level) {
    case KREPLAY_LOG_ERROR: return "error";
    case KREPLAY_LOG_WARNING: return "warning";
    case KREPLAY_LOG_INFO: return "info";
    case KREPLAY_LOG_TRACE: return "trace";
  }
  return "?";
}

}  // namespace

void set_log_sink(log_sink_t sink, kreplay_log_level_t max_level) {
  if (sink == nullptr) {
    g_sink.store(nullptr, std::memory_order_release);
    g_max_level.store(KREPLAY_LOG_WARNING, std::memory_order_relaxed);
    kreplay_set_logger(nullptr, nullptr, KREPLAY_LOG_WARNING);
    return;
  }
  g_max_level.store(max_level, std::memory_order_relaxed);
  g_sink.store(sink, std::memory_order_release);
  kreplay_set_logger(&forward_log, nullptr, max_level);
}

void forward_log(void* /*user_data*/, kreplay_log_level_t level, const char* message, std::size_t length) {
  if (message == nullptr) return;
  if (log_sink_t sink = g_sink.load(std::memory_order_acquire)) {
    sink(level, message, length);
    return;
  }
  if (level <= KREPLAY_LOG_WARNING) {
    std::fprintf(stderr, "kreplay %s: %.*s\n", level_name(level), static_cast<int>(length), message);
  }
}

namespace detail {

void logf(kreplay_log_level_t level, const char* format, ...) {
  if (static_cast<int>(level) > g_max_level.load(std::memory_order_relaxed)) return;
  char buffer[512];
  int prefix = std::snprintf(buffer, sizeof buffer, "hsa adapter: ");
  va_list args;
  va_start(args, format);
  int body = std::vsnprintf(buffer + prefix, sizeof buffer - static_cast<std::size_t>(prefix), format, args);
  va_end(args);
  if (body < 0) return;
  std::size_t length = static_cast<std::size_t>(prefix) + static_cast<std::size_t>(body);
  if (length >= sizeof buffer) length = sizeof buffer - 1;  // truncated by vsnprintf
  forward_log(nullptr, level, buffer, length);
}

}  // namespace detail

}  // namespace kreplay::hsa
