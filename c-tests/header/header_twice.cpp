// The include guard must make a second inclusion harmless in C++ too; main also calls the C translation unit
// so that both languages' declarations name the same, unmangled symbols.
#include "kreplay.h"
#include "kreplay.h"

extern "C" int header_twice_c(void);

int main() {
  if (header_twice_c() != 0) {
    return 1;
  }
  const char* text = kreplay_status_string(KREPLAY_STATUS_INVALID_ARGUMENT);
  return text != nullptr && text[0] != '\0' ? 0 : 1;
}
