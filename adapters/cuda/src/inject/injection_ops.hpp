// The device ops the injection hands kreplay: the CUDA adapter's runtime ops do the copies, batches, digests and
// device tier (made on first use, because make_runtime_ops calls the runtime and InitializeInjection runs inside
// cuInit), while pointer_info and iterate_module_variables are answered by the tracker. Every op runs under the
// re-entry guard, so the driver calls it makes are never tracked.
#ifndef KREPLAY_CUDA_INJECT_INJECTION_OPS_HPP
#define KREPLAY_CUDA_INJECT_INJECTION_OPS_HPP

#include "kreplay.h"
#include "tracker.hpp"

namespace kreplay::cuda::inject {

// Makes the ops that do the copying (the adapter's make_runtime_ops in the library; a fake in tests).
using base_ops_factory_t = kreplay_status_t (*)(kreplay_device_ops_t* ops_out);

// Fills *ops_out; kreplay_configure takes it over (its release frees the base ops too, if they were made).
kreplay_status_t make_injection_ops(tracker& tracker, base_ops_factory_t factory, kreplay_device_ops_t* ops_out);

// The base ops under a set made by make_injection_ops, if they have been made (null otherwise, and for any
// other set): what a context reset hands forget_device.
const kreplay_device_ops_t* injection_base_ops(const kreplay_device_ops_t& ops);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_INJECTION_OPS_HPP
