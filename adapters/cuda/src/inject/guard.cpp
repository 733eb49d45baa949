#include "guard.hpp"

namespace kreplay::cuda::inject {

thread_local int t_own_calls = 0;

}  // namespace kreplay::cuda::inject
