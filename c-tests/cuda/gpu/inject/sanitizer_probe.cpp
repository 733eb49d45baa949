// Check (e) of run_inject.sh, for adapters/cuda/README.md's comparison of interception layers: a tiny injection
// library over the Compute Sanitizer API (not CUPTI) that counts, on the same PyTorch step, what its resource
// callbacks report: device allocations, module loads and module-static memory (SANITIZER_MEMORY_FLAG_MODULE).
// Loaded like kreplay's own (CUDA_INJECTION64_PATH); prints one "RESULT sanitizer ..." line at exit.
#include <sanitizer.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {

std::atomic<unsigned long long> g_allocs{0}, g_alloc_bytes{0}, g_frees{0};
std::atomic<unsigned long long> g_statics{0}, g_static_bytes{0};
std::atomic<unsigned long long> g_modules{0}, g_modules_with_handle{0}, g_cubin_bytes{0};

void SANITIZERAPI on_callback(void*, Sanitizer_CallbackDomain domain, Sanitizer_CallbackId cbid, const void* data) {
  if (domain != SANITIZER_CB_DOMAIN_RESOURCE) {
    return;
  }
  switch (cbid) {
    case SANITIZER_CBID_RESOURCE_DEVICE_MEMORY_ALLOC: {
      const auto* memory = static_cast<const Sanitizer_ResourceMemoryData*>(data);
      if ((memory->flags & SANITIZER_MEMORY_FLAG_MODULE) != 0) {
        ++g_statics;
        g_static_bytes += memory->size;
      } else {
        ++g_allocs;
        g_alloc_bytes += memory->size;
      }
      break;
    }
    case SANITIZER_CBID_RESOURCE_DEVICE_MEMORY_FREE:
      ++g_frees;
      break;
    case SANITIZER_CBID_RESOURCE_MODULE_LOADED: {
      const auto* module = static_cast<const Sanitizer_ResourceModuleData*>(data);
      ++g_modules;
      g_modules_with_handle += module->module != nullptr ? 1 : 0;
      g_cubin_bytes += module->cubinSize;
      break;
    }
    default:
      break;
  }
}

void report() {
  std::fprintf(stderr,
               "RESULT sanitizer device_allocs=%llu device_alloc_bytes=%llu frees=%llu module_statics=%llu "
               "module_static_bytes=%llu modules=%llu modules_with_CUmodule=%llu cubin_bytes=%llu\n",
               g_allocs.load(), g_alloc_bytes.load(), g_frees.load(), g_statics.load(), g_static_bytes.load(),
               g_modules.load(), g_modules_with_handle.load(), g_cubin_bytes.load());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  Sanitizer_SubscriberHandle subscriber = nullptr;
  if (sanitizerSubscribe(&subscriber, on_callback, nullptr) != SANITIZER_SUCCESS ||
      sanitizerEnableDomain(1, subscriber, SANITIZER_CB_DOMAIN_RESOURCE) != SANITIZER_SUCCESS) {
    std::fprintf(stderr, "RESULT sanitizer subscribe=failed\n");
    return 1;
  }
  std::atexit(report);
  return 1;
}
