// A kreplay_device_ops_t filled from a class whose static member functions are the ops, shared by the adapter's
// runtime ops (runtime_ops/) and the injection's ops (inject/injection_ops.cpp), so that the table is written once
// and the compiler checks each op's signature against the field it fills. Internal: not installed.
#ifndef KREPLAY_CUDA_OPS_TABLE_HPP
#define KREPLAY_CUDA_OPS_TABLE_HPP

#include "kreplay.h"

namespace kreplay::cuda::detail {

template <typename Ops>
kreplay_device_ops_t ops_table(void* user_data) {
  kreplay_device_ops_t ops{};
  ops.struct_size = sizeof(ops);
  ops.user_data = user_data;
  ops.copy = Ops::copy;
  ops.pointer_info = Ops::pointer_info;
  ops.iterate_module_variables = Ops::iterate_module_variables;
  ops.host_lock = Ops::host_lock;
  ops.host_unlock = Ops::host_unlock;
  ops.copy_batch = Ops::copy_batch;
  ops.device_alloc = Ops::device_alloc;
  ops.device_free = Ops::device_free;
  ops.digest = Ops::digest;
  ops.release = Ops::release;
  ops.device_free_bytes = Ops::device_free_bytes;
  return ops;
}

}  // namespace kreplay::cuda::detail

#endif  // KREPLAY_CUDA_OPS_TABLE_HPP
