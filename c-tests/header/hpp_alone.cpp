// kreplay.hpp must compile as the only include of a C++17 translation unit.
#include "kreplay.hpp"

int main() {
  const kreplay_agent_t agent{7};
  kreplay::staging_buffer_t buffer;
  if (!buffer.acquire(agent, 100) || buffer.data() == nullptr || buffer.size() != 100) {
    return 1;
  }
  buffer.data()[99] = 'x';
  kreplay::staging_buffer_t moved(static_cast<kreplay::staging_buffer_t&&>(buffer));
  if (moved.data() == nullptr || moved.data()[99] != 'x') {
    return 1;
  }
  return kreplay::retained_staging_bytes(agent) == 0 ? 0 : 1;
}
