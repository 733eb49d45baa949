// What every HSA adapter test starts with: the ROCr headers as the adapter sees them, kreplay's, and the check
// macro (stop at the first failure with its file and line).
#ifndef KREPLAY_C_TESTS_HSA_HSA_TEST_HPP
#define KREPLAY_C_TESTS_HSA_HSA_TEST_HPP

#ifndef AMD_INTERNAL_BUILD
#define AMD_INTERNAL_BUILD 1  // hsa_api_trace.h finds its siblings by relative path only with this
#endif
#include <hsa/hsa_api_trace.h>
#include <kreplay.h>

#include <kreplay/hsa.hpp>

#include <cstdio>
#include <cstdlib>

#define HSA_TEST_CHECK(cond)                                                               \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);        \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

#endif  // KREPLAY_C_TESTS_HSA_HSA_TEST_HPP
