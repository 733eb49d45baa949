#include "guard.hpp"

namespace kreplay::cuda::inject {

thread_local int t_own_calls __attribute__((tls_model("initial-exec"))) = 0;

}  // namespace kreplay::cuda::inject
