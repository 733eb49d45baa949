/* Test-only: ROCm 6's hsa_amd_memory_async_copy_on_engine (hsa_ext_amd.h), for building the HSA adapter's
 * wrapper of it against ROCr headers that predate it. vmem_overlay.cmake appends an include of this file to a
 * copy of those headers when they lack it; nothing here is ever linked against a runtime. */
#ifndef KREPLAY_TEST_HSA_EXT_AMD_COPY_ENGINE_H
#define KREPLAY_TEST_HSA_EXT_AMD_COPY_ENGINE_H

#include "hsa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hsa_amd_sdma_engine_id {
  HSA_AMD_SDMA_ENGINE_0 = 0x1,
  HSA_AMD_SDMA_ENGINE_1 = 0x2,
} hsa_amd_sdma_engine_id_t;

hsa_status_t HSA_API hsa_amd_memory_async_copy_on_engine(void* dst, hsa_agent_t dst_agent, const void* src,
                                                         hsa_agent_t src_agent, size_t size,
                                                         uint32_t num_dep_signals, const hsa_signal_t* dep_signals,
                                                         hsa_signal_t completion_signal,
                                                         hsa_amd_sdma_engine_id_t engine_id, bool force_copy_on_sdma);

#ifdef __cplusplus
}
#endif

#endif /* KREPLAY_TEST_HSA_EXT_AMD_COPY_ENGINE_H */
