// kreplay device ops over the CUDA runtime, and the allocation wrapper a CUDA host would put around
// cudaMalloc / cudaFree.
//
// Agents: the agent of CUDA device ordinal d has handle d + 1. Handle 0 is what a zero-initialised
// kreplay_staging_buffer_t carries, so keeping real agents away from it makes a mix-up visible.
//
// Module variables: CUDA gives a tool no public way to walk a loaded module's globals, so the host names the
// ones it owns (its own __device__ and __constant__ symbols) in a table, and the scan resolves each one with
// cudaGetSymbolAddress / cudaGetSymbolSize on the agent's device.
#ifndef KREPLAY_CUDA_HPP
#define KREPLAY_CUDA_HPP

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kreplay.h"

namespace kreplay_cuda {

// One module-scope variable of the host program: `symbol` is the address of the __device__ / __constant__
// variable as host code sees it (the argument cudaGetSymbolAddress takes).
struct symbol_t {
  const char* name;
  const void* symbol;
  bool is_constant;
};

// What the ops have done, process-wide (for tests and the benchmark's notes).
struct stats_t {
  uint64_t copies;
  uint64_t copy_bytes;
  uint64_t copy_failures;
  uint64_t host_locks;
  uint64_t host_unlocks;
  uint64_t locked_bytes;  // page-locked by host_lock and not yet unlocked
  uint64_t module_scans;
};

kreplay_agent_t agent_of_device(int ordinal);
// -1 for a handle that names no device.
int device_of_agent(kreplay_agent_t agent);

// Installs the ops with kreplay_configure. `symbols` (may be NULL when count is 0) must outlive the process's
// use of kreplay; the table is not copied.
kreplay_status_t install(const symbol_t* symbols, size_t count);

// The copy op itself, for harness modes that must move bytes exactly as kreplay does.
kreplay_status_t copy(void* dst, const void* src, size_t bytes);

// cudaMalloc, then kreplay_record_alloc. The allocation's result is returned; what kreplay said about it goes
// to *record_out when non-NULL (SUCCESS when the allocation failed and nothing was recorded).
cudaError_t malloc_tracked(void** ptr_out, size_t bytes, kreplay_status_t* record_out = nullptr);
// kreplay_record_free before cudaFree, so no restore can write into memory already given back; when cudaFree
// fails the allocation is still live, and it is recorded again.
cudaError_t free_tracked(void* ptr, kreplay_status_t* record_out = nullptr);

stats_t stats();

// Diagnostic knob (on by default): whether the copy op waits for the legacy stream after each cudaMemcpy. The
// wait is what makes a pageable host-to-device copy complete on return; with page-locked host memory
// cudaMemcpy is synchronous anyway, so turning it off there measures what the wait itself costs per copy.
void set_sync_after_copy(bool enabled);

// The last CUDA error an op saw, as text ("" when none); for messages only.
const char* last_op_error();

}  // namespace kreplay_cuda

#endif  // KREPLAY_CUDA_HPP
