// kreplay/hsa.hpp stands alone: it compiles without hsa_api_trace.h and without AMD_INTERNAL_BUILD (a host's
// translation units that only call the adapter need neither), twice over, and its refusals need no table.
#include <kreplay/hsa.hpp>
#include <kreplay/hsa.hpp>

#include <cstdio>
#include <cstring>

#ifdef AMD_INTERNAL_BUILD
#error "kreplay::hsa must not impose AMD_INTERNAL_BUILD on its users"
#endif

int main() {
  int failures = 0;
  if (kreplay::hsa::install(nullptr, nullptr, 0) != kreplay::hsa::INSTALL_REFUSED_INVALID_TABLE) ++failures;
  if (kreplay::hsa::configure(nullptr, nullptr, nullptr) != KREPLAY_STATUS_INVALID_ARGUMENT) ++failures;
  if (kreplay::hsa::vmem_wrappers_installed()) ++failures;
  if (kreplay::hsa::vmem_wrappers_compiled() != (KREPLAY_HSA_HAVE_VMEM != 0)) ++failures;
  for (int status = 0; status < 5; ++status) {
    const char* text = kreplay::hsa::install_status_string(static_cast<kreplay::hsa::install_status_t>(status));
    if (text == nullptr || std::strlen(text) == 0) ++failures;
  }
  std::printf("hsa header: standalone, %d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
