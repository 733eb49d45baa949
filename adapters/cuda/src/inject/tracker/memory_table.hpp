// The memory table: which device each context is on, the live allocations of every kind, and the virtual-memory
// handles and mappings. It keeps kreplay's inventory in step (kreplay_record_*) and answers kreplay's
// pointer_info from its own tables.
//
// It makes no CUDA call while it records, except one read-only query for the device of a context it never saw
// created (device_of). Locking: one mutex over its tables, never held while kreplay is called (kreplay calls
// pointer_info, which takes it) nor while the driver is called.
#ifndef KREPLAY_CUDA_INJECT_TRACKER_MEMORY_TABLE_HPP
#define KREPLAY_CUDA_INJECT_TRACKER_MEMORY_TABLE_HPP

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <cuda.h>

#include "driver.hpp"
#include "kreplay.h"
#include "tracker/counts.hpp"

namespace kreplay::cuda::inject {

// What an allocation call made.
enum class memory_kind : uint8_t {
  device,        // cuMemAlloc*, cuMemAllocPitch: captured
  pool,          // cuMemAllocAsync, cuMemAllocFromPoolAsync (stream-ordered): captured
  managed,       // cuMemAllocManaged: counted, not captured
  host_pinned,   // cuMemAllocHost, cuMemHostAlloc, cuMemHostRegister without DEVICEMAP: counted
  host_mapped,   // the same with CU_MEMHOSTALLOC_DEVICEMAP / CU_MEMHOSTREGISTER_DEVICEMAP: counted
};
constexpr size_t untracked_kind_count = 3;  // managed, host_pinned, host_mapped (index = kind - managed)

// Memory a snapshot cannot cover, live now, per device.
struct untracked_t {
  size_t count[untracked_kind_count];
  size_t bytes[untracked_kind_count];
};

// One access descriptor of cuMemSetAccess, reduced to what matters here.
struct access_t {
  bool device;       // location is a device (not host memory)
  int ordinal;       // that device
  bool read_write;   // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
};

class memory_table {
 public:
  // `driver` is used only for the device of an unknown context; it may hold nulls.
  explicit memory_table(const driver_api_t& driver) : driver_(driver) {}
  memory_table(const memory_table&) = delete;
  memory_table& operator=(const memory_table&) = delete;

  // ---- Contexts -------------------------------------------------------------------------------------------
  void context_device(CUcontext context, int ordinal, bool primary);
  // The cached answer, else one read-only query (cached), else -1.
  int device_of(CUcontext context);
  // The context's allocations are recorded freed and the context forgotten.
  void context_destroyed(CUcontext context);
  // The device's primary context (null if none is known).
  CUcontext primary_context(int ordinal);

  // ---- Allocations ----------------------------------------------------------------------------------------
  void allocated(CUcontext context, uint64_t address, size_t size, memory_kind kind);
  void freeing(uint64_t address);
  void free_failed(uint64_t address);

  // ---- Virtual memory (vmem.cpp) --------------------------------------------------------------------------
  void vmem_created(uint64_t handle, size_t size, bool device, int ordinal);
  void vmem_released(uint64_t handle);
  void vmem_mapped(uint64_t address, size_t size, uint64_t handle);
  void vmem_access(uint64_t address, size_t size, const access_t* access, size_t count);
  void vmem_unmapping(uint64_t address, size_t size);

  // ---- Queries --------------------------------------------------------------------------------------------
  kreplay_status_t pointer_info(const void* ptr, kreplay_pointer_info_t* info_out);
  untracked_t untracked(int ordinal);
  size_t live_bytes(int ordinal);
  // Its own fields only: allocations, frees, unknown_frees, record_errors, contexts_forgotten.
  tracker_counts_t counts();

 private:
  using ranges_t = std::vector<std::pair<uint64_t, size_t>>;  // (base, bytes)
  struct allocation_t {
    size_t size;
    memory_kind kind;
    int ordinal;
    CUcontext context;
  };
  struct handle_t {
    size_t size;
    bool device;
    int ordinal;
  };
  struct mapping_t {
    size_t size;
    uint64_t handle;
    bool known;    // the handle's cuMemCreate was seen (else: imported, or made before the injection)
    bool device;
    int ordinal;
    ranges_t recorded;  // ranges given to kreplay_record_vmem_map
  };

  // The mappings overlapping [address, address + size): the first one (with mutex_ held).
  std::map<uint64_t, mapping_t>::iterator first_mapping_locked(uint64_t address);
  // pointer_info for virtual memory: the recorded piece holding address, if any.
  void mapped_piece_locked(uint64_t address, kreplay_pointer_info_t* info);
  // Each call of kreplay's, its answer checked (mutex_ not held).
  void record_alloc(uint64_t address, size_t size);
  void record_free(uint64_t address);
  void record_unmap(uint64_t address, size_t size);
  void record_unknown_owner(uint64_t address, size_t size);
  void record_map(uint64_t address, size_t size, int ordinal);
  void check(kreplay_status_t status, const char* what, uint64_t address);

  driver_api_t driver_;
  std::mutex mutex_;
  std::map<CUcontext, int> contexts_;
  std::map<int, CUcontext> primary_;
  std::map<uint64_t, allocation_t> allocations_;
  std::map<uint64_t, handle_t> handles_;
  std::map<uint64_t, mapping_t> mappings_;
  tracker_counts_t counts_{};
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_TRACKER_MEMORY_TABLE_HPP
