/* GPU-free test of the built libkreplay_cuda_inject.so as the driver sees it: it dlopens (its TLS must not be
 * initial-exec: a STATIC_TLS module of its size fails to dlopen), exports InitializeInjection and the
 * kreplay_inject_* API and nothing of kreplay or the adapter, and without a driver in the process stays
 * inert: InitializeInjection returns 1 and the API answers NOT_CONFIGURED. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kreplay/kreplay_inject.h"

static int failures = 0;
#define EXPECT(condition)                                                  \
  do {                                                                     \
    if (!(condition)) {                                                    \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #condition); \
      ++failures;                                                          \
    }                                                                      \
  } while (0)

#define LOOKUP(function, name)           \
  do {                                   \
    void* found_ = dlsym(library, name); \
    memcpy(&(function), &found_, sizeof(function)); \
  } while (0)

int main(void) {
  void* library = dlopen(KREPLAY_INJECT_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    fprintf(stderr, "dlopen(%s): %s\n", KREPLAY_INJECT_LIBRARY, dlerror());
    return 1;
  }
  EXPECT(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) == NULL); /* the library never loads a driver */
  /* ISO C has no conversion from dlsym's object pointer to a function pointer: copy the bits (POSIX). */
  int (*initialize)(void) = NULL;
  kreplay_status_t (*state)(kreplay_inject_state_t*) = NULL;
  kreplay_status_t (*stats)(int, kreplay_inventory_stats_t*) = NULL;
  kreplay_status_t (*snapshot)(int, kreplay_inject_snapshot_result_t*) = NULL;
  LOOKUP(initialize, "InitializeInjection");
  LOOKUP(state, "kreplay_inject_state");
  LOOKUP(stats, "kreplay_inject_inventory_stats");
  LOOKUP(snapshot, "kreplay_inject_snapshot");
  EXPECT(initialize != NULL && state != NULL && stats != NULL && snapshot != NULL);
  EXPECT(dlsym(library, "kreplay_inject_untracked") != NULL);
  EXPECT(dlsym(library, "kreplay_inject_live_bytes") != NULL);
  EXPECT(dlsym(library, "kreplay_inject_module_counts") != NULL);
  EXPECT(dlsym(library, "kreplay_inject_list_variables") != NULL);
  kreplay_status_t (*untracked_stats)(int, kreplay_untracked_t*) = NULL;
  LOOKUP(untracked_stats, "kreplay_inject_untracked_stats");
  EXPECT(untracked_stats != NULL);
  /* Nothing of kreplay, the adapter or the CUDA runtime leaks out. */
  EXPECT(dlsym(library, "kreplay_snap") == NULL);
  EXPECT(dlsym(library, "kreplay_record_alloc") == NULL);
  EXPECT(dlsym(library, "cudaMalloc") == NULL);
  EXPECT(dlsym(library, "_ZN7kreplay4cuda16make_runtime_opsEP20kreplay_device_ops_t") == NULL);
  if (failures != 0 || initialize == NULL || state == NULL || stats == NULL || snapshot == NULL) {
    return 1;
  }
  EXPECT(initialize() == 1);
  EXPECT(initialize() == 1); /* a second call does nothing */
  kreplay_inject_state_t s;
  EXPECT(state(&s) == KREPLAY_STATUS_SUCCESS);
  EXPECT(s.tracking && !s.subscribed && s.callbacks_enabled == 0);
  EXPECT(state(NULL) == KREPLAY_STATUS_INVALID_ARGUMENT);
  kreplay_inventory_stats_t inventory;
  EXPECT(stats(0, &inventory) == KREPLAY_STATUS_NOT_CONFIGURED);
  kreplay_inject_snapshot_result_t result;
  EXPECT(snapshot(0, &result) == KREPLAY_STATUS_NOT_CONFIGURED);
  kreplay_untracked_t untracked;
  EXPECT(untracked_stats == NULL || untracked_stats(0, &untracked) == KREPLAY_STATUS_NOT_CONFIGURED);
  if (failures == 0) {
    printf("libkreplay_cuda_inject.so: loads, exports only its API, stays inert without a driver\n");
  }
  return failures == 0 ? 0 : 1;
}
