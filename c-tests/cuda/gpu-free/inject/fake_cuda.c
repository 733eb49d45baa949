/* A fake libcuda.so.1 for test_inject_end_to_end: the few driver functions the injection's tracker resolves
 * with dlsym, answering from a table the test fills (fake_cuda_set_global). Every context is on device 0. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { max_globals = 16 };
static struct {
  char name[64];
  uint64_t address;
  size_t size;
} g_globals[max_globals];
static int g_count;
static int g_depth;

void fake_cuda_set_global(const char* name, uint64_t address, size_t size) {
  if (g_count < max_globals) {
    strncpy(g_globals[g_count].name, name, sizeof(g_globals[g_count].name) - 1);
    g_globals[g_count].address = address;
    g_globals[g_count].size = size;
    ++g_count;
  }
}
int fake_cuda_depth(void) { return g_depth; }

int cuCtxGetDevice_v2(int* device, void* context) {
  (void)context;
  *device = 0;
  return 0;
}
int cuCtxPushCurrent_v2(void* context) {
  (void)context;
  ++g_depth;
  return 0;
}
int cuCtxPopCurrent_v2(void** context) {
  *context = NULL;
  --g_depth;
  return 0;
}
int cuModuleGetGlobal_v2(uint64_t* address, size_t* size, void* module, const char* name) {
  (void)module;
  for (int i = 0; i < g_count; ++i) {
    if (strcmp(g_globals[i].name, name) == 0) {
      *address = g_globals[i].address;
      *size = g_globals[i].size;
      return 0;
    }
  }
  return 500; /* CUDA_ERROR_NOT_FOUND */
}
