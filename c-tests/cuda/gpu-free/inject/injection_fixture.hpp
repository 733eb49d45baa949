// The injection set up over the fakes for the replay-loop tests: the tracker's ops (memcpy copies) configured as
// kreplay's device, full restores, tracking on, and one device-0 context whose device memory the tests use.
#ifndef KREPLAY_INJECT_TEST_INJECTION_FIXTURE_HPP
#define KREPLAY_INJECT_TEST_INJECTION_FIXTURE_HPP

#include "fakes.hpp"
#include "injection_ops.hpp"
#include "tracker.hpp"

namespace fake {

inline void set_up_injection(kreplay::cuda::inject::tracker& owner, kreplay_device_ops_t* ops, CUcontext context,
                             void* buffer, size_t bytes) {
  using kreplay::cuda::inject::memory_kind;
  CHECK_OK(kreplay::cuda::inject::make_injection_ops(owner, make_base, ops));
  CHECK_OK(kreplay_configure(ops));
  kreplay_policy_t policy{};
  policy.struct_size = sizeof(policy);
  CHECK_OK(kreplay_set_policy(&policy));
  kreplay_tracking_enable(true);
  g_context_devices[context] = 0;
  owner.context_device(context, 0, true);
  owner.allocated(context, reinterpret_cast<uint64_t>(buffer), bytes, memory_kind::device);
}

}  // namespace fake

#endif  // KREPLAY_INJECT_TEST_INJECTION_FIXTURE_HPP
