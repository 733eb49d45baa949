// GPU-free tests of the injection's CUPTI layer (adapters/cuda/src/inject/cupti_layer.cpp, switchboard.cpp and
// the tracker's handlers, tracker_callbacks.cpp): a fake CUPTI, and
// callbacks fabricated the way CUPTI raises them (CUpti_CallbackData with the driver call's parameter struct,
// CUpti_ResourceData for module and context events), so that the translation itself is tested.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>
#include <iterator>
#include <map>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "cupti_layer.hpp"
#include "tracker_callbacks.hpp"
#include "fakes.hpp"
#include "guard.hpp"
#include "injection_ops.hpp"

using namespace kreplay::cuda::inject;

namespace {

// ---- A fake CUPTI ---------------------------------------------------------------------------------------------
CUptiResult g_subscribe_result = CUPTI_SUCCESS;
int g_subscribes = 0;
int g_enabled = 0;
std::set<std::pair<int, CUpti_CallbackId>> g_enabled_ids;  // (domain, id)
CUptiResult fake_subscribe(CUpti_SubscriberHandle* out, CUpti_CallbackFunc, void*) {
  ++g_subscribes;
  if (g_subscribe_result == CUPTI_SUCCESS) {
    *out = fake::handle<CUpti_SubscriberHandle>(0x5);
  }
  return g_subscribe_result;
}
CUptiResult fake_unsubscribe(CUpti_SubscriberHandle) { return CUPTI_SUCCESS; }
CUptiResult fake_enable(uint32_t enable, CUpti_SubscriberHandle, CUpti_CallbackDomain domain, CUpti_CallbackId id) {
  g_enabled += enable != 0 ? 1 : 0;
  if (enable != 0) {
    g_enabled_ids.insert({static_cast<int>(domain), id});
  }
  return CUPTI_SUCCESS;
}
CUptiResult fake_result_string(CUptiResult result, const char** text) {
  *text = result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
                                                                   : "CUPTI_ERROR_UNKNOWN";
  return CUPTI_SUCCESS;
}
cupti_api_t fake_cupti() {
  cupti_api_t api;
  api.subscribe = fake_subscribe;
  api.unsubscribe = fake_unsubscribe;
  api.enable_callback = fake_enable;
  api.get_result_string = fake_result_string;
  return api;
}

const CUcontext ctx0 = fake::handle<CUcontext>(0x100);
kreplay_agent_t agent0() { return test_agent(1); }

// ---- Fabricated callbacks -------------------------------------------------------------------------------------
cupti_layer* g_layer = nullptr;
tracker* g_layer_tracker = nullptr;

template <typename P>
void driver_call(CUpti_CallbackId cbid, const char* name, CUpti_ApiCallbackSite site, P& params,
                 CUresult result = CUDA_SUCCESS) {
  CUpti_CallbackData data{};
  data.callbackSite = site;
  data.functionName = name;
  data.functionParams = &params;
  data.functionReturnValue = &result;
  data.context = ctx0;
  cupti_layer::callback(g_layer, CUPTI_CB_DOMAIN_DRIVER_API, cbid, &data);
}

void resource(CUpti_CallbackId cbid, CUcontext context, void* descriptor) {
  CUpti_ResourceData data{};
  data.context = context;
  data.resourceDescriptor = descriptor;
  cupti_layer::callback(g_layer, CUPTI_CB_DOMAIN_RESOURCE, cbid, &data);
}

void module_loaded(uint32_t id, std::vector<unsigned char>& cubin) {
  CUpti_ModuleResourceData module{};
  module.moduleId = id;
  module.cubinSize = cubin.size();
  module.pCubin = reinterpret_cast<const char*>(cubin.data());
  resource(CUPTI_CBID_RESOURCE_MODULE_LOADED, ctx0, &module);
}

void module_unloading(uint32_t id) {
  CUpti_ModuleResourceData module{};
  module.moduleId = id;
  resource(CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING, ctx0, &module);
}

CUdeviceptr alloc(CUdeviceptr address, size_t bytes) {
  CUdeviceptr out = address;
  cuMemAlloc_v2_params params{&out, bytes};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", CUPTI_API_EXIT, params);
  return out;
}

void free_(CUdeviceptr address, CUresult result = CUDA_SUCCESS) {
  cuMemFree_v2_params params{address};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree_v2", CUPTI_API_ENTER, params);
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree_v2", CUPTI_API_EXIT, params, result);
}

size_t module_variables_in_snapshot(kreplay_status_t expected = KREPLAY_STATUS_SUCCESS) {
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  CHECK_STATUS(expected, kreplay_snap(agent0(), &snapshot, &reason));
  if (snapshot == nullptr) {
    return 0;
  }
  kreplay_snapshot_info_t info{};
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  kreplay_snapshot_free(snapshot);
  return info.module_variables;
}

std::vector<unsigned char> read_cubin() {
  std::ifstream in(KREPLAY_TEST_CUBIN, std::ios::binary);
  CHECK(in.good());
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ---- Tests ----------------------------------------------------------------------------------------------------

void a_held_cupti_gives_one_line_and_an_inert_layer(tracker& owner) {
  g_subscribe_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  g_enabled = 0;
  cupti_layer layer(fake_cupti());
  register_tracker_callbacks(layer.board(), owner);
  // stderr into a file for the call.
  std::fflush(stderr);
  FILE* capture = std::tmpfile();
  CHECK(capture != nullptr);
  const int saved = dup(2);
  CHECK(dup2(fileno(capture), 2) >= 0);
  const bool started = layer.start();
  std::fflush(stderr);
  CHECK(dup2(saved, 2) >= 0);
  close(saved);
  std::rewind(capture);
  std::string text;
  for (int c = std::fgetc(capture); c != EOF; c = std::fgetc(capture)) {
    text.push_back(static_cast<char>(c));
  }
  std::fclose(capture);
  CHECK(!started);
  CHECK(!layer.active());
  CHECK_EQ(0, g_enabled);
  CHECK_EQ(0, layer.enabled_callbacks());
  size_t lines = 0;
  for (char c : text) {
    lines += c == '\n' ? 1 : 0;
  }
  CHECK_EQ(1, lines);
  CHECK(text.find("already has a subscriber") != std::string::npos);
  CHECK(text.find("39") != std::string::npos);
  CHECK(text.find("inert") != std::string::npos);
  g_subscribe_result = CUPTI_SUCCESS;
}

bool enabled(CUpti_CallbackId id, CUpti_CallbackDomain domain = CUPTI_CB_DOMAIN_DRIVER_API) {
  return g_enabled_ids.count({static_cast<int>(domain), id}) != 0;
}

void the_layer_enables_only_its_callbacks(cupti_layer& layer) {
  CHECK(layer.active());
  CHECK_EQ(static_cast<size_t>(g_enabled), layer.enabled_callbacks());
  // Each callback id named once; far fewer than the driver API's ~800 functions.
  CHECK_EQ(g_enabled_ids.size(), layer.enabled_callbacks());
  CHECK(layer.enabled_callbacks() > 30 && layer.enabled_callbacks() < 45);
  // What the inventory needs: allocations, frees, vmem, pools, contexts, module loads and unloads.
  CHECK(enabled(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2));
  CHECK(enabled(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2));
  CHECK(enabled(CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync));
  CHECK(enabled(CUPTI_DRIVER_TRACE_CBID_cuMemMap));
  CHECK(enabled(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData));
  CHECK(enabled(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData));
  CHECK(enabled(CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2));
  CHECK(enabled(CUPTI_CBID_RESOURCE_MODULE_LOADED, CUPTI_CB_DOMAIN_RESOURCE));
  // Nothing raised per kernel: no launch, no kernel lookup (the launcher enables its own, for a replay only).
  for (CUpti_CallbackId hot : {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
                               CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
                               CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
                               CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
                               CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
                               CUPTI_DRIVER_TRACE_CBID_cuLibraryGetKernel,
                               CUPTI_DRIVER_TRACE_CBID_cuKernelGetFunction,
                               CUPTI_DRIVER_TRACE_CBID_cuModuleGetFunction}) {
    CHECK(!enabled(hot));
  }
}

void allocation_callbacks_reach_the_inventory() {
  const size_t before = test_inventory(agent0()).regions;
  alloc(0x8000000000, 4096);
  CHECK_EQ(before + 1, test_inventory(agent0()).regions);
  free_(0x8000000000, CUDA_ERROR_INVALID_VALUE);  // the free fails: still live
  CHECK_EQ(before + 1, test_inventory(agent0()).regions);
  free_(0x8000000000);
  CHECK_EQ(before, test_inventory(agent0()).regions);

  // A failed allocation records nothing.
  CUdeviceptr out = 0x8000100000;
  cuMemAlloc_v2_params failed{&out, 4096};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", CUPTI_API_EXIT, failed,
              CUDA_ERROR_OUT_OF_MEMORY);
  CHECK_EQ(before, test_inventory(agent0()).regions);

  // Pinned host memory with DEVICEMAP is counted as mapped, not captured.
  void* host = reinterpret_cast<void*>(0x8000200000);
  cuMemHostAlloc_params pinned{&host, 65536, CU_MEMHOSTALLOC_DEVICEMAP};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, "cuMemHostAlloc", CUPTI_API_EXIT, pinned);
  CHECK_EQ(before, test_inventory(agent0()).regions);
  cuMemFreeHost_params free_host{host};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, "cuMemFreeHost", CUPTI_API_ENTER, free_host);
}

void kreplay_s_own_calls_are_never_tracked() {
  const size_t before = test_inventory(agent0()).regions;
  {
    own_call_scope own;
    alloc(0x8100000000, 4096);
  }
  CHECK_EQ(before, test_inventory(agent0()).regions);
}

void vmem_callbacks_count_mapped_accessible_pages() {
  const size_t before = test_inventory(agent0()).bytes;
  CUmemGenericAllocationHandle handle = 0xD1;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  cuMemCreate_params create{&handle, 2 << 20, &prop, 0};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemCreate, "cuMemCreate", CUPTI_API_EXIT, create);
  cuMemMap_params map{0x8200000000, 2 << 20, 0, handle, 0};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemMap, "cuMemMap", CUPTI_API_EXIT, map);
  CHECK_EQ(before, test_inventory(agent0()).bytes);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  cuMemSetAccess_params set{0x8200000000, 2 << 20, &access, 1};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess, "cuMemSetAccess", CUPTI_API_EXIT, set);
  CHECK_EQ(before + (2 << 20), test_inventory(agent0()).bytes);
  cuMemUnmap_params unmap{0x8200000000, 2 << 20};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, "cuMemUnmap", CUPTI_API_ENTER, unmap);
  CHECK_EQ(before, test_inventory(agent0()).bytes);
}

void a_module_loaded_inside_a_load_call_is_bound_to_its_handle() {
  std::vector<unsigned char> cubin = read_cubin();
  std::vector<unsigned char> storage(4 + 256 + 32 + 64);
  const CUdeviceptr base = (reinterpret_cast<CUdeviceptr>(storage.data()) + 15) & ~CUdeviceptr{15};
  const CUmodule handle = fake::handle<CUmodule>(0xE1);
  fake::g_globals[handle] = {{"counter", {base, 4}}, {"table", {base + 16, 256}}, {"coeffs", {base + 272, 32}}};

  CUmodule out = nullptr;
  cuModuleLoadData_params load{&out, cubin.data()};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData, "cuModuleLoadData", CUPTI_API_ENTER, load);
  module_loaded(81, cubin);
  out = handle;  // what the driver returns
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData, "cuModuleLoadData", CUPTI_API_EXIT, load);
  CHECK_EQ(3, module_variables_in_snapshot());
  module_unloading(81);
  CHECK_EQ(0, module_variables_in_snapshot());

  // Outside any followed call (a lazy load inside a launch, whose callback is not enabled), with no library
  // known: declined, not guessed.
  module_loaded(83, cubin);
  CHECK_EQ(0, module_variables_in_snapshot(KREPLAY_STATUS_DECLINED));
  CHECK(g_layer_tracker->last_error().find("module 83") != std::string::npos);
  module_unloading(83);
  CHECK_EQ(0, module_variables_in_snapshot());
}

// Loads the library `library` the way cudart does (cuLibraryLoadData, nothing loaded inside it).
void load_library(CUlibrary library, std::vector<unsigned char>& cubin) {
  CUlibrary returned = nullptr;
  cuLibraryLoadData_params load{};
  load.library = &returned;
  load.code = cubin.data();
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, "cuLibraryLoadData", CUPTI_API_ENTER, load);
  returned = library;
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData, "cuLibraryLoadData", CUPTI_API_EXIT, load);
}

void unload_library(CUlibrary library) {
  cuLibraryUnload_params unload{library};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload, "cuLibraryUnload", CUPTI_API_ENTER, unload);
}

// The address `counter` resolved to in module `id` (0 if the snapshot's walk did not reach it).
uint64_t counter_of(uint32_t id) {
  std::map<uint32_t, uint64_t> counters;
  std::string detail;
  (void)g_layer_tracker->list_variables(0, [](void* data, const resolved_variable_t& v) {
    if (std::strcmp(v.name, "counter") == 0) {
      (*static_cast<std::map<uint32_t, uint64_t>*>(data))[v.module_id] = v.address;
    }
    return true;
  }, &counters, &detail);
  return counters[id];
}

// Lazy loading (a module loaded inside a launch) and eager loading (inside cuDevicePrimaryCtxRetain) both give
// a module without a handle: it is found at snapshot time through the one library whose kernels are exactly
// the cubin's entry kernels, or declined.
void a_module_loaded_outside_any_call_is_found_by_its_kernels_or_declined() {
  std::vector<unsigned char> cubin = read_cubin();
  std::vector<unsigned char> storage_a(512), storage_b(512);
  const CUdeviceptr a = (reinterpret_cast<CUdeviceptr>(storage_a.data()) + 15) & ~CUdeviceptr{15};
  const CUdeviceptr b = (reinterpret_cast<CUdeviceptr>(storage_b.data()) + 15) & ~CUdeviceptr{15};
  const CUmodule module_a = fake::handle<CUmodule>(0xEA);
  const CUmodule module_b = fake::handle<CUmodule>(0xEB);
  fake::g_globals[module_a] = {{"counter", {a, 4}}, {"table", {a + 16, 256}}, {"coeffs", {a + 272, 32}}};
  fake::g_globals[module_b] = {{"counter", {b, 4}}, {"table", {b + 16, 256}}, {"coeffs", {b + 272, 32}}};
  // Two libraries with different kernel sets: only the first is exactly the cubin's ({bump}); a superset is
  // not a match.
  const CUlibrary with_bump = fake::handle<CUlibrary>(0xE7);
  const CUlibrary with_more = fake::handle<CUlibrary>(0xE8);
  fake::g_library_kernels[with_bump] = {"bump"};
  fake::g_library_modules[with_bump] = module_a;
  fake::g_library_kernels[with_more] = {"bump", "scale"};
  fake::g_library_modules[with_more] = module_b;
  load_library(with_bump, cubin);
  load_library(with_more, cubin);

  // Lazy: nothing followed is in progress when the module arrives.
  module_loaded(84, cubin);
  CHECK_EQ(3, module_variables_in_snapshot());
  CHECK_EQ(a, counter_of(84));
  module_unloading(84);

  // Eager: the module arrives inside cuDevicePrimaryCtxRetain, which carries no module handle.
  CUcontext retained = nullptr;
  cuDevicePrimaryCtxRetain_params retain{&retained, 0};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUPTI_API_ENTER,
              retain);
  module_loaded(85, cubin);
  retained = ctx0;
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUPTI_API_EXIT,
              retain);
  CHECK_EQ(3, module_variables_in_snapshot());
  CHECK_EQ(a, counter_of(85));

  // Two cubins of one context with the same kernels would both claim the library's one module: declined.
  module_loaded(86, cubin);
  CHECK_EQ(0, module_variables_in_snapshot(KREPLAY_STATUS_DECLINED));
  CHECK(g_layer_tracker->last_error().find("module 86") != std::string::npos);
  CHECK(g_layer_tracker->last_error().find("2 modules of its context") != std::string::npos);
  module_unloading(86);

  // A second library with exactly the same kernels, whose module is a second cubin defining the same variables:
  // two modules and two libraries, interchangeable, paired one to one. The twin's handle sorts first, so module
  // 85, paired alone before, is paired afresh: both modules' variables are captured, once each.
  const CUlibrary twin = fake::handle<CUlibrary>(0xE5);
  fake::g_library_kernels[twin] = {"bump"};
  fake::g_library_modules[twin] = module_b;
  load_library(twin, cubin);
  module_loaded(87, cubin);
  CHECK_EQ(6, module_variables_in_snapshot());
  CHECK(std::set<uint64_t>({counter_of(85), counter_of(87)}) == std::set<uint64_t>({a, b}));
  // One of the two unloaded: one module, two libraries, and which library it belongs to cannot be told.
  module_unloading(85);
  CHECK_EQ(0, module_variables_in_snapshot(KREPLAY_STATUS_DECLINED));
  const std::string why = g_layer_tracker->last_error();
  CHECK(why.find("module 87") != std::string::npos);
  CHECK(why.find("2 known libraries") != std::string::npos);
  module_unloading(87);

  // With the twin unloaded the match is unique again.
  unload_library(twin);
  module_loaded(90, cubin);
  CHECK_EQ(3, module_variables_in_snapshot());
  CHECK_EQ(a, counter_of(90));
  module_unloading(90);

  // Every variable is still checked: a size that differs from the cubin's declines.
  fake::g_globals[module_a]["counter"] = {a, 8};
  module_loaded(91, cubin);
  CHECK_EQ(0, module_variables_in_snapshot(KREPLAY_STATUS_DECLINED));
  CHECK(g_layer_tracker->last_error().find("module 91") != std::string::npos);
  module_unloading(91);
  fake::g_globals[module_a]["counter"] = {a, 4};
  unload_library(with_bump);
  unload_library(with_more);
}

void loads_on_two_threads_at_once_bind_each_module_to_its_own_call() {
  std::vector<unsigned char> cubin = read_cubin();
  std::vector<unsigned char> storage_a(512), storage_b(512);
  const CUdeviceptr a = (reinterpret_cast<CUdeviceptr>(storage_a.data()) + 15) & ~CUdeviceptr{15};
  const CUdeviceptr b = (reinterpret_cast<CUdeviceptr>(storage_b.data()) + 15) & ~CUdeviceptr{15};
  const CUmodule loaded = fake::handle<CUmodule>(0xE5);
  const CUmodule launched = fake::handle<CUmodule>(0xE6);
  fake::g_globals[loaded] = {{"counter", {a, 4}}, {"table", {a + 16, 256}}, {"coeffs", {a + 272, 32}}};
  fake::g_globals[launched] = {{"counter", {b, 4}}, {"table", {b + 16, 256}}, {"coeffs", {b + 272, 32}}};
  const CUlibrary library = fake::handle<CUlibrary>(0xE4);
  fake::g_library_modules[library] = launched;

  // Thread A is inside cuModuleLoadData while this thread asks a library for its module, which loads lazily.
  std::atomic<int> phase{0};
  std::thread loader([&] {
    CUmodule out = nullptr;
    cuModuleLoadData_params load{&out, cubin.data()};
    driver_call(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData, "cuModuleLoadData", CUPTI_API_ENTER, load);
    phase.store(1);
    while (phase.load() != 2) {
    }
    module_loaded(88, cubin);
    out = loaded;
    driver_call(CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData, "cuModuleLoadData", CUPTI_API_EXIT, load);
  });
  while (phase.load() != 1) {
  }
  CUmodule got = nullptr;
  cuLibraryGetModule_params get{&got, library};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuLibraryGetModule, "cuLibraryGetModule", CUPTI_API_ENTER, get);
  module_loaded(89, cubin);
  got = launched;
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuLibraryGetModule, "cuLibraryGetModule", CUPTI_API_EXIT, get);
  phase.store(2);
  loader.join();

  std::map<uint32_t, uint64_t> counter_of;
  std::string detail;
  CHECK_OK(g_layer_tracker->list_variables(0, [](void* data, const resolved_variable_t& v) {
    if (std::strcmp(v.name, "counter") == 0) {
      (*static_cast<std::map<uint32_t, uint64_t>*>(data))[v.module_id] = v.address;
    }
    return true;
  }, &counter_of, &detail));
  CHECK_EQ(a, counter_of[88]);
  CHECK_EQ(b, counter_of[89]);
  module_unloading(88);
  module_unloading(89);
}

void a_destroyed_context_forgets_its_allocations() {
  const size_t before = test_inventory(agent0()).regions;
  alloc(0x8300000000, 4096);
  alloc(0x8300010000, 4096);
  CHECK_EQ(before + 2, test_inventory(agent0()).regions);
  resource(CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, ctx0, nullptr);
  CHECK_EQ(before, test_inventory(agent0()).regions);
  // The primary context retained again: its device is learned from the call's parameters.
  CUcontext retained = ctx0;
  cuDevicePrimaryCtxRetain_params retain{&retained, 0};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUPTI_API_EXIT, retain);
  alloc(0x8300020000, 4096);
  CHECK_EQ(before + 1, test_inventory(agent0()).regions);
  cuDevicePrimaryCtxReset_v2_params reset{0};
  driver_call(CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset_v2", CUPTI_API_ENTER,
              reset);
  CHECK_EQ(before, test_inventory(agent0()).regions);
}


// ---- The switchboard ------------------------------------------------------------------------------------------
// Handlers of one callback nest like scopes: entry in the order routed, exit in reverse. A listening route
// (enables = false) asks CUPTI for nothing; a consumer switched off is no longer called; a sealed board takes no
// route.
void the_switchboard_nests_handlers_and_listens_without_enabling() {
  switchboard board;
  consumer_spec first_spec;
  first_spec.name = "first";
  consumer_spec second_spec;
  second_spec.name = "second";
  second_spec.required = false;
  const switchboard::consumer_id first = board.add_consumer(first_spec);
  const switchboard::consumer_id second = board.add_consumer(second_spec);
  const CUpti_CallbackId id = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  std::string order;
  CHECK(board.route(first, CUPTI_CB_DOMAIN_DRIVER_API, id, [&](CUpti_CallbackId, const void*) { order += 'a'; },
                    false));
  CHECK(board.route(second, CUPTI_CB_DOMAIN_DRIVER_API, id, [&](CUpti_CallbackId, const void*) { order += 'b'; }));
  CHECK(board.wanted(first).empty());
  CHECK(board.wanted(second).size() == 1 && board.wanted(second)[0].second == id);
  CUpti_CallbackData data{};
  data.callbackSite = CUPTI_API_ENTER;
  board.dispatch(CUPTI_CB_DOMAIN_DRIVER_API, id, &data);
  data.callbackSite = CUPTI_API_EXIT;
  board.dispatch(CUPTI_CB_DOMAIN_DRIVER_API, id, &data);
  CHECK(order == "abba");
  board.dispatch(CUPTI_CB_DOMAIN_DRIVER_API, id + 1, &data);  // no route: nothing
  board.dispatch(CUPTI_CB_DOMAIN_RESOURCE, id, &data);
  CHECK(order == "abba");
  board.switch_off(second);
  board.dispatch(CUPTI_CB_DOMAIN_DRIVER_API, id, &data);
  CHECK(order == "abbaa");
  board.seal();
  CHECK(!board.route(first, CUPTI_CB_DOMAIN_DRIVER_API, id + 1, [](CUpti_CallbackId, const void*) {}));
}

// A handler that throws stops only itself: the other consumers' handlers of the callback still run, and the
// event counts as lost once (each consumer's `lost`).
void a_throwing_handler_does_not_keep_the_others_from_their_callback() {
  switchboard board;
  int lost = 0;
  consumer_spec thrower_spec;
  thrower_spec.name = "thrower";
  thrower_spec.lost = [&] { ++lost; };
  consumer_spec listener_spec;
  listener_spec.name = "listener";
  listener_spec.required = false;
  const switchboard::consumer_id thrower = board.add_consumer(thrower_spec);
  const switchboard::consumer_id listener = board.add_consumer(listener_spec);
  const CUpti_CallbackId id = CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING;
  int heard = 0;
  CHECK(board.route(thrower, CUPTI_CB_DOMAIN_RESOURCE, id,
                    [](CUpti_CallbackId, const void*) { throw std::bad_alloc(); }));
  CHECK(board.route(listener, CUPTI_CB_DOMAIN_RESOURCE, id, [&](CUpti_CallbackId, const void*) { ++heard; }));
  CUpti_ResourceData data{};
  board.dispatch(CUPTI_CB_DOMAIN_RESOURCE, id, &data);
  CHECK(heard == 1);  // a single try around the whole dispatch skipped it
  CHECK(lost == 1);
}

// An optional consumer that CUPTI refuses one callback of: the ones it enabled are turned off again, except one
// a required consumer also enabled; its `refused` says how many of how many; the required consumer goes on.
std::map<std::pair<int, CUpti_CallbackId>, bool> g_switches;
CUptiResult enable_refusing_launches(uint32_t on, CUpti_SubscriberHandle, CUpti_CallbackDomain domain,
                                     CUpti_CallbackId id) {
  if (on != 0 && id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  g_switches[{static_cast<int>(domain), id}] = on != 0;
  return CUPTI_SUCCESS;
}

void an_optional_consumer_refused_leaves_the_required_callbacks_on() {
  cupti_api_t api = fake_cupti();
  api.enable_callback = enable_refusing_launches;
  cupti_layer layer(api);
  int required_calls = 0;
  consumer_spec required;
  required.name = "required";
  const switchboard::consumer_id r = layer.board().add_consumer(required);
  layer.board().route(r, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
                      [&](CUpti_CallbackId, const void*) { ++required_calls; });
  consumer_spec optional;
  optional.name = "optional";
  optional.required = false;
  size_t refused = 0;
  size_t wanted = 0;
  optional.refused = [&](size_t n, size_t of) { refused = n, wanted = of; };
  int optional_calls = 0;
  const switchboard::consumer_id o = layer.board().add_consumer(optional);
  for (CUpti_CallbackId id : {CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
                              CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel}) {
    layer.board().route(o, CUPTI_CB_DOMAIN_DRIVER_API, id, [&](CUpti_CallbackId, const void*) { ++optional_calls; });
  }
  g_switches.clear();
  CHECK(layer.start() && layer.active());
  CHECK_EQ(1, layer.enabled_callbacks());
  CHECK(refused == 1 && wanted == 3);
  const std::pair<int, CUpti_CallbackId> alloc{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2};
  const std::pair<int, CUpti_CallbackId> free{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2};
  CHECK(g_switches.count(alloc) == 1 && g_switches[alloc]);  // the required consumer's stays on
  CHECK(g_switches.count(free) == 1 && !g_switches[free]);   // on, then off again
  CUdeviceptr address = 0;
  cuMemAlloc_v2_params params{&address, 64};
  CUresult failed = CUDA_ERROR_INVALID_VALUE;  // nothing for a tracker to record
  CUpti_CallbackData data{};
  data.callbackSite = CUPTI_API_EXIT;
  data.functionParams = &params;
  data.functionReturnValue = &failed;
  cupti_layer::callback(&layer, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &data);
  CHECK(required_calls == 1 && optional_calls == 0);
}
}  // namespace

int main() {
  // Only the contexts the calls name: ctx0 on device 0 (the fake cuCtxGetDevice_v2 answers for it).
  fake::g_context_devices = {{ctx0, 0}};
  static tracker owner(fake::driver());
  kreplay_device_ops_t ops{};
  CHECK_OK(make_injection_ops(owner, fake::make_base, &ops));
  CHECK_OK(kreplay_configure(&ops));
  kreplay_tracking_enable(true);

  printf("[ RUN  ] a_held_cupti_gives_one_line_and_an_inert_layer\n");
  a_held_cupti_gives_one_line_and_an_inert_layer(owner);
  printf("[   OK ] a_held_cupti_gives_one_line_and_an_inert_layer\n");

  static cupti_layer layer(fake_cupti());
  register_tracker_callbacks(layer.board(), owner);
  g_enabled = 0;
  CHECK(layer.start());
  g_layer = &layer;
  g_layer_tracker = &owner;
  printf("[ RUN  ] the_layer_enables_only_its_callbacks\n");
  the_layer_enables_only_its_callbacks(layer);
  printf("[   OK ] the_layer_enables_only_its_callbacks\n");
  RUN_TEST(allocation_callbacks_reach_the_inventory);
  RUN_TEST(kreplay_s_own_calls_are_never_tracked);
  RUN_TEST(vmem_callbacks_count_mapped_accessible_pages);
  RUN_TEST(a_module_loaded_inside_a_load_call_is_bound_to_its_handle);
  RUN_TEST(a_module_loaded_outside_any_call_is_found_by_its_kernels_or_declined);
  RUN_TEST(loads_on_two_threads_at_once_bind_each_module_to_its_own_call);
  RUN_TEST(a_destroyed_context_forgets_its_allocations);
  RUN_TEST(the_switchboard_nests_handlers_and_listens_without_enabling);
  RUN_TEST(a_throwing_handler_does_not_keep_the_others_from_their_callback);
  RUN_TEST(an_optional_consumer_refused_leaves_the_required_callbacks_on);
  return 0;
}
