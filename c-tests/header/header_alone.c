/* kreplay.h must compile as the only include of a strict C99 translation unit: nothing it needs may come
 * from a header the user happened to include first. */
#include "kreplay.h"

int main(void) {
  kreplay_agent_t agent = {1};
  kreplay_staging_buffer_t buffer = {0};
  /* Types and constants the header promises, used so that a missing or misspelt one fails the build. */
  kreplay_status_t status = kreplay_staging_acquire(&buffer, agent, 64);
  uint32_t flags =
      KREPLAY_GLOBAL_FLAG_KERNARG | KREPLAY_GLOBAL_FLAG_FINE_GRAINED | KREPLAY_GLOBAL_FLAG_COARSE_GRAINED;
  bool enabled = kreplay_tracking_is_enabled();
  size_t retained;
  if (status != KREPLAY_STATUS_SUCCESS || buffer.data == NULL || buffer.size != 64 || flags != 7u ||
      KREPLAY_ALLOC_FLAG_EXECUTABLE != 4u || enabled) {
    return 1;
  }
  kreplay_staging_release(&buffer);
  retained = kreplay_retained_staging_bytes(agent);
  return retained >= 64 && buffer.data == NULL ? 0 : 1;
}
