// Links the installed HSA adapter through find_package(kreplay COMPONENTS hsa) and calls into it: the
// archive, its header, the ROCr headers and libkreplay.a behind it must all come from the package.
#include <kreplay/hsa.hpp>

#include <cstdio>
#include <cstring>

#ifndef KREPLAY_HSA_HAVE_VMEM
#error "kreplay::hsa must carry KREPLAY_HSA_HAVE_VMEM to its users"
#endif

int main() {
  int failures = 0;
  // No tables: refused, touching nothing, and said so with the adapter's own text.
  const kreplay::hsa::install_status_t status = kreplay::hsa::install(nullptr, nullptr, 0);
  if (status != kreplay::hsa::INSTALL_REFUSED_INVALID_TABLE) {
    std::fprintf(stderr, "install(NULL, NULL, 0) returned %d\n", static_cast<int>(status));
    ++failures;
  }
  if (std::strcmp(kreplay::hsa::install_status_string(kreplay::hsa::INSTALL_SUCCESS), "installed") != 0) {
    std::fprintf(stderr, "install_status_string(INSTALL_SUCCESS) is not \"installed\"\n");
    ++failures;
  }
  if (kreplay::hsa::vmem_wrappers_compiled() != (KREPLAY_HSA_HAVE_VMEM != 0)) {
    std::fprintf(stderr, "vmem_wrappers_compiled() disagrees with KREPLAY_HSA_HAVE_VMEM\n");
    ++failures;
  }
  if (kreplay::hsa::configure(nullptr, nullptr, nullptr) != KREPLAY_STATUS_INVALID_ARGUMENT) {
    std::fprintf(stderr, "configure(NULL, NULL, NULL) was not INVALID_ARGUMENT\n");
    ++failures;
  }
  kreplay::hsa::finalize();
  if (failures != 0) return 1;
  std::puts("find_package hsa consumer: all checks passed");
  return 0;
}
