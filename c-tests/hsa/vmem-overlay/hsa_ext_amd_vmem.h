/* Test-only: the part of ROCm 6's virtual-memory API (hsa_ext_amd.h) that kreplay's HSA adapter wraps, for
 * building the adapter's vmem wrappers against ROCr headers that predate it. vmem_overlay.cmake appends an
 * include of this file to a copy of those headers; nothing here is ever linked against a runtime. */
#ifndef KREPLAY_TEST_HSA_EXT_AMD_VMEM_H
#define KREPLAY_TEST_HSA_EXT_AMD_VMEM_H

#include "hsa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hsa_amd_vmem_alloc_handle_s {
  uint64_t handle;
} hsa_amd_vmem_alloc_handle_t;

typedef enum {
  MEMORY_TYPE_NONE,
  MEMORY_TYPE_PINNED,
} hsa_amd_memory_type_t;

hsa_status_t HSA_API hsa_amd_vmem_map(void* va, size_t size, size_t in_offset,
                                      hsa_amd_vmem_alloc_handle_t memory_handle, uint64_t flags);
hsa_status_t HSA_API hsa_amd_vmem_unmap(void* va, size_t size);
hsa_status_t HSA_API hsa_amd_vmem_get_alloc_properties_from_handle(hsa_amd_vmem_alloc_handle_t memory_handle,
                                                                   hsa_amd_memory_pool_t* pool,
                                                                   hsa_amd_memory_type_t* type);
hsa_status_t HSA_API hsa_amd_vmem_retain_alloc_handle(hsa_amd_vmem_alloc_handle_t* memory_handle, void* addr);
hsa_status_t HSA_API hsa_amd_vmem_handle_release(hsa_amd_vmem_alloc_handle_t memory_handle);

#ifdef __cplusplus
}
#endif

#endif /* KREPLAY_TEST_HSA_EXT_AMD_VMEM_H */
