/* Links the installed libkreplay.a through find_package(kreplay) and checks that the library works and is
 * the version the package config claims. */
#include <kreplay.h>

#include <stdio.h>
#include <string.h>

int main(void) {
  const kreplay_agent_t agent = {42};
  kreplay_staging_buffer_t buffer = {0};
  int failures = 0;

  if (strcmp(kreplay_version(), EXPECTED_VERSION) != 0) {
    fprintf(stderr, "kreplay_version() is %s, the package says %s\n", kreplay_version(), EXPECTED_VERSION);
    ++failures;
  }
  if (kreplay_staging_acquire(&buffer, agent, 8192) != KREPLAY_STATUS_SUCCESS || buffer.size != 8192) {
    fprintf(stderr, "staging acquire of 8192 bytes failed\n");
    ++failures;
  } else {
    memset(buffer.data, 1, buffer.size);
    kreplay_staging_release(&buffer);
    if (kreplay_retained_staging_bytes(agent) < 8192) {
      fprintf(stderr, "released storage was not retained\n");
      ++failures;
    }
  }
  if (failures != 0) {
    return 1;
  }
  puts("find_package consumer: all checks passed");
  return 0;
}
