// A stand-in for a profiler tool such as rocprofiler-sdk: C++17, built as a shared library with -fPIC,
// hidden visibility and -Wl,--no-undefined, with libkreplay.a linked inside it.
#include "profiler_tool.h"

#include <cstring>
#include <utility>

#include "kreplay.h"

#include "kreplay.hpp"

namespace {

kreplay_agent_t to_agent(uint64_t handle) { return kreplay_agent_t{handle}; }

}  // namespace

extern "C" int profiler_staging_round_trip(uint64_t agent, size_t size) {
  kreplay_staging_buffer_t buffer{};
  int status = kreplay_staging_acquire(&buffer, to_agent(agent), size);
  if (status != KREPLAY_STATUS_SUCCESS) {
    return status;
  }
  std::memset(buffer.data, 0x5a, size);
  void* const first = buffer.data;
  kreplay_staging_release(&buffer);
  if (buffer.data != nullptr || kreplay_retained_staging_bytes(to_agent(agent)) < size) {
    return -1;
  }
  status = kreplay_staging_acquire(&buffer, to_agent(agent), size);
  if (status != KREPLAY_STATUS_SUCCESS) {
    return status;
  }
  const bool reused = buffer.data == first && kreplay_retained_staging_bytes(to_agent(agent)) == 0;
  kreplay_staging_release(&buffer);
  kreplay_staging_trim(to_agent(agent));
  return reused && kreplay_retained_staging_bytes(to_agent(agent)) == 0 ? 0 : -1;
}

extern "C" int profiler_staging_zero_size_status(uint64_t agent) {
  kreplay_staging_buffer_t buffer{};
  return kreplay_staging_acquire(&buffer, to_agent(agent), 0);
}

extern "C" const char* profiler_status_name(int status) {
  return kreplay_status_string(static_cast<kreplay_status_t>(status));
}

extern "C" int profiler_set_tracking(int enabled) {
  kreplay_tracking_enable(enabled != 0);
  return kreplay_tracking_is_enabled() ? 1 : 0;
}

extern "C" int profiler_cpp_round_trip(uint64_t agent, size_t size) {
  const kreplay_agent_t kagent = to_agent(agent);
  void* first = nullptr;
  {
    kreplay::staging_buffer_t buffer;
    if (!buffer.acquire(kagent, size) || buffer.size() != size) {
      return 1;
    }
    std::memset(buffer.data(), 0x33, size);
    first = buffer.data();
    kreplay::staging_buffer_t owner(std::move(buffer));
    if (owner.data() != first) {
      return 1;
    }
  }
  // Only the final owner returned the storage, and it did so once.
  if (kreplay::retained_staging_bytes(kagent) < size) {
    return 1;
  }
  kreplay::staging_buffer_t again;
  if (!again.acquire(kagent, size) || again.data() != first) {
    return 1;
  }
  return 0;
}
