/* Smoke test of the production library through the build's test helper: a staging round trip, the status
 * strings and the tracking switch, each checked against what the C API promises. */
#include "kreplay.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;

#define CHECK(condition)                                                   \
  do {                                                                     \
    if (!(condition)) {                                                    \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
      ++failures;                                                          \
    }                                                                      \
  } while (0)

int main(void) {
  const kreplay_agent_t agent = {0x5eed};
  const size_t size = 3 * 4096 + 17;
  kreplay_staging_buffer_t buffer = {0};
  void* first_data;

  CHECK(kreplay_staging_acquire(&buffer, agent, size) == KREPLAY_STATUS_SUCCESS);
  CHECK(buffer.data != NULL && buffer.size == size && buffer.capacity >= size);
  CHECK(buffer.agent.handle == agent.handle);
  if (buffer.data != NULL) {
    memset(buffer.data, 0xA5, size);
  }
  first_data = buffer.data;
  CHECK(kreplay_retained_staging_bytes(agent) == 0);

  kreplay_staging_release(&buffer);
  CHECK(buffer.data == NULL && buffer.size == 0);
  CHECK(kreplay_retained_staging_bytes(agent) >= size);

  /* The same footprint again takes the retained storage back instead of mapping new memory. */
  CHECK(kreplay_staging_acquire(&buffer, agent, size) == KREPLAY_STATUS_SUCCESS);
  CHECK(buffer.data == first_data);
  CHECK(kreplay_retained_staging_bytes(agent) == 0);
  kreplay_staging_release(&buffer);

  CHECK(kreplay_staging_acquire(&buffer, agent, 0) == KREPLAY_STATUS_INVALID_ARGUMENT);
  CHECK(buffer.data == NULL);
  CHECK(kreplay_staging_acquire(NULL, agent, size) == KREPLAY_STATUS_INVALID_ARGUMENT);

  CHECK(strcmp(kreplay_status_string(KREPLAY_STATUS_SUCCESS), kreplay_status_string(KREPLAY_STATUS_DECLINED)) != 0);
  CHECK(kreplay_status_string((kreplay_status_t)999) != NULL);

  CHECK(!kreplay_tracking_is_enabled());
  kreplay_tracking_enable(true);
  CHECK(kreplay_tracking_is_enabled());
  kreplay_tracking_enable(false);
  CHECK(!kreplay_tracking_is_enabled());

  kreplay_staging_trim(agent);
  CHECK(kreplay_retained_staging_bytes(agent) == 0);

  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  puts("kreplay smoke test: staging, status strings and tracking behave as documented");
  return 0;
}
