// GPU-free end-to-end test of libkreplay_cuda_inject.so: a fake libcuda.so.1 and a fake libcupti.so.13 are
// loaded first (as the driver and PyTorch would have them in the process), then the built library is dlopened
// and InitializeInjection called, and callbacks are raised through the subscription it made. This covers what
// the other tests cannot: finding CUPTI and the driver by soname, the environment switches, the exported C API.
// Run three ways by ctest (FAKE_MODE): tracking on, KREPLAY_INJECT_TRACKING=0, and CUPTI held (error 39).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <cupti.h>

#include "kreplay/kreplay_inject.h"

namespace {

int g_failures = 0;
#define EXPECT(condition)                                                         \
  do {                                                                            \
    if (!(condition)) {                                                           \
      std::fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #condition); \
      ++g_failures;                                                               \
    }                                                                             \
  } while (0)

template <typename F>
F lookup(void* library, const char* name) {
  void* found = dlsym(library, name);
  F function = nullptr;
  std::memcpy(&function, &found, sizeof(function));
  if (function == nullptr) {
    std::fprintf(stderr, "missing %s\n", name);
    std::exit(1);
  }
  return function;
}

void* open_or_die(const char* path, int flags) {
  void* library = dlopen(path, flags);
  if (library == nullptr) {
    std::fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
    std::exit(1);
  }
  return library;
}

int (*raise_callback)(int, uint32_t, const void*);

template <typename P>
void driver_call(CUpti_CallbackId cbid, CUpti_ApiCallbackSite site, P& params, CUcontext context) {
  CUresult result = CUDA_SUCCESS;
  CUpti_CallbackData data{};
  data.callbackSite = site;
  data.functionName = "fake";
  data.functionParams = &params;
  data.functionReturnValue = &result;
  data.context = context;
  raise_callback(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &data);
}

}  // namespace

int main() {
  const std::string mode = std::getenv("FAKE_MODE") != nullptr ? std::getenv("FAKE_MODE") : "on";
  void* cuda = open_or_die(KREPLAY_FAKE_CUDA, RTLD_NOW | RTLD_GLOBAL);
  void* cupti = open_or_die(KREPLAY_FAKE_CUPTI, RTLD_NOW | RTLD_GLOBAL);
  void* inject = open_or_die(KREPLAY_INJECT_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  raise_callback = lookup<int (*)(int, uint32_t, const void*)>(cupti, "fake_cupti_raise");
  auto subscribes = lookup<int (*)()>(cupti, "fake_cupti_subscribes");
  auto enabled = lookup<int (*)()>(cupti, "fake_cupti_enabled");
  auto set_global = lookup<void (*)(const char*, uint64_t, size_t)>(cuda, "fake_cuda_set_global");
  auto depth = lookup<int (*)()>(cuda, "fake_cuda_depth");
  auto initialize = lookup<int (*)()>(inject, "InitializeInjection");
  auto state = lookup<kreplay_status_t (*)(kreplay_inject_state_t*)>(inject, "kreplay_inject_state");
  auto inventory = lookup<kreplay_status_t (*)(int, kreplay_inventory_stats_t*)>(inject,
                                                                                 "kreplay_inject_inventory_stats");
  auto untracked = lookup<kreplay_status_t (*)(int, kreplay_inject_untracked_t*)>(inject, "kreplay_inject_untracked");
  auto live_bytes = lookup<kreplay_status_t (*)(int, size_t*)>(inject, "kreplay_inject_live_bytes");
  auto counts = lookup<kreplay_status_t (*)(int, size_t*, size_t*)>(inject, "kreplay_inject_module_counts");
  auto list = lookup<kreplay_status_t (*)(int, kreplay_inject_variable_visitor_t, void*, char*, size_t)>(
      inject, "kreplay_inject_list_variables");
  auto untracked_stats =
      lookup<kreplay_status_t (*)(int, kreplay_untracked_t*)>(inject, "kreplay_inject_untracked_stats");

  EXPECT(initialize() == 1);
  kreplay_inject_state_t s{};
  EXPECT(state(&s) == KREPLAY_STATUS_SUCCESS);
  if (mode == "off") {
    EXPECT(!s.tracking && !s.subscribed);
    EXPECT(subscribes() == 0);  // tracking off subscribes to nothing: CUPTI stays free for other tools
    size_t ignored = 0;
    EXPECT(live_bytes(0, &ignored) == KREPLAY_STATUS_NOT_CONFIGURED);
    return g_failures == 0 ? 0 : 1;
  }
  if (mode == "held") {
    EXPECT(s.tracking && !s.subscribed);
    EXPECT(subscribes() == 1 && enabled() == 0);
    kreplay_inventory_stats_t stats{};
    EXPECT(inventory(0, &stats) == KREPLAY_STATUS_NOT_CONFIGURED);
    kreplay_untracked_t k{};
    EXPECT(untracked_stats(0, &k) == KREPLAY_STATUS_NOT_CONFIGURED);
    return g_failures == 0 ? 0 : 1;
  }
  EXPECT(s.tracking && s.subscribed);
  EXPECT(s.callbacks_enabled == static_cast<size_t>(enabled()) && enabled() > 30);

  const CUcontext context = reinterpret_cast<CUcontext>(uintptr_t{0x1000});
  CUdeviceptr address = 0x9000000000;
  cuMemAlloc_v2_params alloc{&address, 1 << 20};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, CUPTI_API_EXIT, alloc, context);
  void* host = reinterpret_cast<void*>(uintptr_t{0x9100000000});
  cuMemAllocHost_v2_params pinned{&host, 4096};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2, CUPTI_API_EXIT, pinned, context);
  kreplay_inventory_stats_t stats{};
  EXPECT(inventory(0, &stats) == KREPLAY_STATUS_SUCCESS);
  EXPECT(stats.regions == 1 && stats.bytes == (1u << 20));
  kreplay_inject_untracked_t u{};
  EXPECT(untracked(0, &u) == KREPLAY_STATUS_SUCCESS);
  EXPECT(u.host_pinned_count == 1 && u.host_pinned_bytes == 4096 && u.managed_count == 0);
  size_t live = 0;
  EXPECT(live_bytes(0, &live) == KREPLAY_STATUS_SUCCESS && live == stats.bytes);

  // Managed, pinned and mapped host memory: counted by the tracker and held by kreplay as untracked memory of
  // the device, never in the inventory; both forget them at their frees.
  kreplay_untracked_t k{};
  EXPECT(untracked_stats(0, nullptr) == KREPLAY_STATUS_INVALID_ARGUMENT);
  EXPECT(untracked_stats(-1, &k) == KREPLAY_STATUS_INVALID_ARGUMENT);
  EXPECT(untracked_stats(0, &k) == KREPLAY_STATUS_SUCCESS);
  EXPECT(k.count[KREPLAY_UNTRACKED_HOST] == 1 && k.bytes[KREPLAY_UNTRACKED_HOST] == 4096);
  EXPECT(k.count[KREPLAY_UNTRACKED_MANAGED] == 0);
  CUdeviceptr managed = 0x9200000000;
  cuMemAllocManaged_params managed_params{&managed, 3 << 20, CU_MEM_ATTACH_GLOBAL};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, CUPTI_API_EXIT, managed_params, context);
  void* mapped = reinterpret_cast<void*>(uintptr_t{0x9300000000});
  cuMemHostAlloc_params mapped_params{&mapped, 5 << 20, CU_MEMHOSTALLOC_DEVICEMAP};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, CUPTI_API_EXIT, mapped_params, context);
  EXPECT(untracked(0, &u) == KREPLAY_STATUS_SUCCESS);
  EXPECT(u.managed_count == 1 && u.managed_bytes == (3u << 20));
  EXPECT(u.host_pinned_count == 1 && u.host_pinned_bytes == 4096);
  EXPECT(u.host_mapped_count == 1 && u.host_mapped_bytes == (5u << 20));
  EXPECT(untracked_stats(0, &k) == KREPLAY_STATUS_SUCCESS);
  EXPECT(k.count[KREPLAY_UNTRACKED_MANAGED] == 1 && k.bytes[KREPLAY_UNTRACKED_MANAGED] == (3u << 20));
  EXPECT(k.count[KREPLAY_UNTRACKED_HOST] == 2 && k.bytes[KREPLAY_UNTRACKED_HOST] == 4096 + (5u << 20));
  EXPECT(inventory(0, &stats) == KREPLAY_STATUS_SUCCESS && stats.regions == 1 && stats.bytes == (1u << 20));
  EXPECT(live_bytes(0, &live) == KREPLAY_STATUS_SUCCESS && live == (1u << 20));
  cuMemFree_v2_params free_managed{managed};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, CUPTI_API_ENTER, free_managed, context);
  cuMemFreeHost_params free_mapped{mapped};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, CUPTI_API_ENTER, free_mapped, context);
  cuMemFreeHost_params free_pinned{host};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, CUPTI_API_ENTER, free_pinned, context);
  EXPECT(untracked(0, &u) == KREPLAY_STATUS_SUCCESS);
  EXPECT(u.managed_count == 0 && u.host_pinned_count == 0 && u.host_mapped_count == 0 && u.host_mapped_bytes == 0);
  EXPECT(untracked_stats(0, &k) == KREPLAY_STATUS_SUCCESS);
  for (size_t kind = 0; kind < KREPLAY_UNTRACKED_KIND_COUNT; ++kind) {
    EXPECT(k.count[kind] == 0 && k.bytes[kind] == 0);
  }

  // A module loaded inside cuModuleLoadData, resolved through the fake driver.
  std::ifstream in(KREPLAY_TEST_CUBIN, std::ios::binary);
  std::vector<char> cubin((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT(!cubin.empty());
  set_global("counter", 0xA000000000, 4);
  set_global("table", 0xA000000100, 256);
  set_global("coeffs", 0xA000000200, 32);
  CUmodule module = nullptr;
  cuModuleLoadData_params load{&module, cubin.data()};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData, CUPTI_API_ENTER, load, context);
  CUpti_ModuleResourceData loaded{};
  loaded.moduleId = 7;
  loaded.cubinSize = cubin.size();
  loaded.pCubin = cubin.data();
  CUpti_ResourceData resource{};
  resource.context = context;
  resource.resourceDescriptor = &loaded;
  raise_callback(CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED, &resource);
  module = reinterpret_cast<CUmodule>(uintptr_t{0x2000});
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData, CUPTI_API_EXIT, load, context);
  size_t modules = 0, variables = 0;
  EXPECT(counts(0, &modules, &variables) == KREPLAY_STATUS_SUCCESS);
  EXPECT(modules == 1 && variables == 3);
  std::map<std::string, std::pair<uint64_t, size_t>> listed;
  char detail[256] = "";
  EXPECT(list(0,
              [](void* data, const kreplay_inject_variable_t* v) {
                (*static_cast<std::map<std::string, std::pair<uint64_t, size_t>>*>(data))[v->name] = {v->address,
                                                                                                      v->size};
                return true;
              },
              &listed, detail, sizeof(detail)) == KREPLAY_STATUS_SUCCESS);
  EXPECT(listed.size() == 3);
  EXPECT(listed["table"] == std::make_pair(uint64_t{0xA000000100}, size_t{256}));
  EXPECT(depth() == 0);  // the module's context pushed and popped

  cuMemFree_v2_params free_params{address};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, CUPTI_API_ENTER, free_params, context);
  EXPECT(inventory(0, &stats) == KREPLAY_STATUS_SUCCESS && stats.regions == 0);
  EXPECT(live_bytes(0, &live) == KREPLAY_STATUS_SUCCESS && live == 0);
  EXPECT(state(&s) == KREPLAY_STATUS_SUCCESS && s.allocations == 4 && s.frees == 4 && s.modules_loaded == 1);
  if (g_failures == 0) {
    std::printf("end to end (%s): %d callbacks enabled, inventory and module variables through the C API\n",
                mode.c_str(), enabled());
  }
  return g_failures == 0 ? 0 : 1;
}
