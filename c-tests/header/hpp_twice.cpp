// A second inclusion of kreplay.hpp (and of kreplay.h through it) must be harmless.
#include "kreplay.hpp"
#include "kreplay.h"
#include "kreplay.hpp"

int main() {
  kreplay::staging_buffer_t buffer;
  return buffer.data() == nullptr && buffer.size() == 0 ? 0 : 1;
}
