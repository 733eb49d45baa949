// Loads the stand-in profiler tool like a host program would (it links only the shared library, never
// libkreplay.a) and checks what the tool's kreplay calls return.
#include <cstdio>
#include <cstring>

#include "kreplay.h"  // for the status constants only; nothing of kreplay is linked here
#include "profiler_tool.h"

namespace {

int failures = 0;

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "consumer check failed: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  check(profiler_staging_round_trip(1, 1 << 20) == 0, "a released 1 MiB buffer is reused by the next acquire");
  check(profiler_staging_round_trip(2, 100) == 0, "a released 100-byte buffer is reused by the next acquire");
  check(profiler_staging_zero_size_status(1) == KREPLAY_STATUS_INVALID_ARGUMENT,
        "a zero-byte acquire is INVALID_ARGUMENT");

  const char* success = profiler_status_name(KREPLAY_STATUS_SUCCESS);
  const char* declined = profiler_status_name(KREPLAY_STATUS_DECLINED);
  check(success != nullptr && success[0] != '\0', "SUCCESS has a name");
  check(declined != nullptr && success != nullptr && std::strcmp(success, declined) != 0,
        "SUCCESS and DECLINED have different names");

  check(profiler_set_tracking(1) == 1, "tracking can be switched on");
  check(profiler_set_tracking(0) == 0, "tracking can be switched off");

  check(profiler_cpp_round_trip(3, 4096) == 0, "kreplay.hpp's staging_buffer_t moves and returns storage once");

  if (failures != 0) {
    std::fprintf(stderr, "consumer: %d check(s) failed\n", failures);
    return 1;
  }
  std::puts("consumer: all checks passed");
  return 0;
}
