/* The C API of libkreplay_cuda_inject.so, kreplay's CUDA injection library, for a test or a host that finds it
 * in its own process (dlsym, ctypes). The library is loaded by the CUDA driver when CUDA_INJECTION64_PATH names
 * it; the driver calls InitializeInjection from inside cuInit.
 *
 * Devices are CUDA device ordinals (kreplay agent d + 1). Every function is thread-safe, returns
 * KREPLAY_STATUS_NOT_CONFIGURED while the injection is inert (tracking off, CUPTI missing or held by another
 * tool), and writes its outputs only on success. None may be called from inside a CUDA callback. */
#ifndef KREPLAY_INJECT_H
#define KREPLAY_INJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "kreplay.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the injection is doing. */
typedef struct kreplay_inject_state_t {
  bool     tracking;            /* KREPLAY_INJECT_TRACKING was not 0 */
  bool     subscribed;          /* CUPTI accepted the subscription and every callback: the injection is live */
  size_t   callbacks_enabled;
  uint64_t allocations;         /* allocation calls seen, every kind */
  uint64_t frees;
  uint64_t unknown_frees;       /* frees of pointers never seen allocated */
  uint64_t record_errors;       /* kreplay_record_* calls that failed */
  uint64_t modules_loaded;
  uint64_t modules_unloaded;
  uint64_t contexts_forgotten;  /* contexts destroyed or reset, with their allocations */
  uint64_t callbacks_raised;    /* CUPTI callbacks of the program's own calls so far (kreplay's are not) */
} kreplay_inject_state_t;

/* Live memory of a device that snapshots do not cover: counted, never captured. */
typedef struct kreplay_inject_untracked_t {
  size_t managed_count, managed_bytes;          /* cuMemAllocManaged */
  size_t host_pinned_count, host_pinned_bytes;  /* cuMemAllocHost, cuMemHostAlloc, cuMemHostRegister */
  size_t host_mapped_count, host_mapped_bytes;  /* the same with the DEVICEMAP flag */
} kreplay_inject_untracked_t;

typedef struct kreplay_inject_variable_t {
  uint32_t    module_id;   /* CUPTI's module id */
  const char* name;        /* NUL-terminated; valid during the visit only */
  uint64_t    address;
  size_t      size;
  bool        is_constant;
} kreplay_inject_variable_t;
/* Return true to go on. */
typedef bool (*kreplay_inject_variable_visitor_t)(void* user_data, const kreplay_inject_variable_t* variable);

typedef struct kreplay_inject_snapshot_result_t {
  kreplay_status_t         snap_status;
  kreplay_decline_reason_t reason;
  size_t                   regions, module_variables, bytes;
  kreplay_status_t         restore_status;   /* SUCCESS when no snapshot was taken */
  kreplay_restore_report_t report;
  char                     detail[512];      /* why a module scan failed (names the module), or "" */
} kreplay_inject_snapshot_result_t;

/* Called by the driver inside cuInit. Reads KREPLAY_INJECT_TRACKING (0|1, default 1) and KREPLAY_INJECT_LOG
 * (warning|info|trace) once. Returns 1. */
int InitializeInjection(void);

kreplay_status_t kreplay_inject_state(kreplay_inject_state_t* state_out);
/* kreplay_inventory_stats of the device's agent. */
kreplay_status_t kreplay_inject_inventory_stats(int device, kreplay_inventory_stats_t* stats_out);
kreplay_status_t kreplay_inject_untracked(int device, kreplay_inject_untracked_t* untracked_out);
/* The bytes of the device that the tracker itself saw allocated (device and pool allocations, vmem pages mapped
 * read-write) minus those it saw freed or unmapped, counted from its own tables, not from kreplay's inventory:
 * the two must agree. */
kreplay_status_t kreplay_inject_live_bytes(int device, size_t* bytes_out);
/* Modules loaded on the device (device -1: every device) and the variables their cubins define. */
kreplay_status_t kreplay_inject_module_counts(int device, size_t* modules_out, size_t* variables_out);
/* Resolves every variable of the device (cuModuleGetGlobal) and visits it. A module whose variables cannot be
 * located is skipped, the first such failure's text is copied to detail (may be NULL) and the answer is
 * DEVICE_ERROR after the walk. */
kreplay_status_t kreplay_inject_list_variables(int device, kreplay_inject_variable_visitor_t visit, void* user_data,
                                               char* detail, size_t detail_length);
/* kreplay_snap of the device, then kreplay_restore of the snapshot and kreplay_snapshot_free. The program must
 * be idle on the device (synchronised). Returns result_out->snap_status. */
kreplay_status_t kreplay_inject_snapshot(int device, kreplay_inject_snapshot_result_t* result_out);
/* kreplay_untracked_stats of the device's agent: what kreplay itself holds as untracked memory, by kind. The
 * tracker records managed memory (KREPLAY_UNTRACKED_MANAGED) and pinned, registered and mapped host memory
 * (KREPLAY_UNTRACKED_HOST) with kreplay too, so these agree with kreplay_inject_untracked's counts. */
kreplay_status_t kreplay_inject_untracked_stats(int device, kreplay_untracked_t* stats_out);

/* For measuring what tracking costs within one process (c-tests/cuda/gpu/inject/torch_ab.py): false
 * unsubscribes from CUPTI, so the program's calls raise no callback (as with KREPLAY_INJECT_TRACKING=0); true
 * subscribes again with the same callbacks. Allocations and module loads made in between are missed, so from
 * the first pause on every snapshot of the process is declined. */
kreplay_status_t kreplay_inject_set_subscribed(bool subscribed);

/* kreplay-cuda-replay --list-metrics, called in the launcher's own process (no injection needed): the metrics
 * CUPTI's profiler host knows for `device`'s chip, one a line with its type, unit and description, after the
 * endings each type's names take, written to `out`. It loads the driver and CUPTI (the one on the loader's path,
 * or KREPLAY_CUPTI_PATH). DEVICE_ERROR without a driver or GPU, NOT_FOUND without a CUPTI that can list, each
 * with one line on `errors`. */
kreplay_status_t kreplay_inject_list_metrics(int device, FILE* out, FILE* errors);

#ifdef __cplusplus
}
#endif

#endif /* KREPLAY_INJECT_H */
