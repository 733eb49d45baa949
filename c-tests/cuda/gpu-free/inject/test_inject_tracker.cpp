// GPU-free tests of the injection's tracker and ops (adapters/cuda/src/inject): the tracker is fed events as
// the CUPTI layer would feed it, kreplay is configured with the injection's ops over memcpy, and "device
// memory" is host memory. Module variables come from a real cubin nvcc made in the build (vars.cu).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fakes.hpp"
#include "injection_ops.hpp"
#include "log.hpp"
#include "tracker.hpp"
#include "tracker/pairing.hpp"

using namespace kreplay::cuda::inject;

namespace {

tracker* g_tracker = nullptr;

// Two devices, each with a primary context, and a second context on device 0.
const CUcontext ctx0 = fake::handle<CUcontext>(0x100);
const CUcontext ctx1 = fake::handle<CUcontext>(0x200);
const CUcontext ctx0b = fake::handle<CUcontext>(0x300);

kreplay_agent_t agent(int device) { return test_agent(static_cast<uint64_t>(device) + 1); }

std::vector<unsigned char> read_cubin(const char* path = KREPLAY_TEST_CUBIN) {
  std::ifstream in(path, std::ios::binary);
  CHECK(in.good());
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Host buffers standing for device allocations, 64-byte aligned.
struct buffer_t {
  std::vector<unsigned char> bytes;
  explicit buffer_t(size_t size) : bytes(size + 64) {}
  uint64_t address() const {
    return (reinterpret_cast<uint64_t>(bytes.data()) + 63) & ~uint64_t{63};
  }
  unsigned char* data() { return reinterpret_cast<unsigned char*>(address()); }
};

void allocations_of_each_kind_are_tracked_or_counted() {
  const kreplay_inventory_stats_t before = test_inventory(agent(0));
  const size_t live_before = g_tracker->live_bytes(0);
  g_tracker->allocated(ctx0, 0x7000000000, 4096, memory_kind::device);
  g_tracker->allocated(ctx0, 0x7000100000, 8192, memory_kind::pool);
  g_tracker->allocated(ctx0, 0x7000200000, 1 << 20, memory_kind::managed);
  g_tracker->allocated(ctx0, 0x7000300000, 65536, memory_kind::host_pinned);
  g_tracker->allocated(ctx0, 0x7000400000, 32768, memory_kind::host_mapped);
  const kreplay_inventory_stats_t during = test_inventory(agent(0));
  CHECK_EQ(before.regions + 2, during.regions);
  CHECK_EQ(before.bytes + 4096 + 8192, during.bytes);
  // The tracker's own count: captured kinds only, and it agrees with the inventory.
  CHECK_EQ(live_before + 4096 + 8192, g_tracker->live_bytes(0));
  CHECK_EQ(0, g_tracker->live_bytes(1));
  const untracked_t untracked = g_tracker->untracked(0);
  CHECK_EQ(1, untracked.count[0]);
  CHECK_EQ(1 << 20, untracked.bytes[0]);
  CHECK_EQ(1, untracked.count[1]);
  CHECK_EQ(65536, untracked.bytes[1]);
  CHECK_EQ(1, untracked.count[2]);
  CHECK_EQ(32768, untracked.bytes[2]);
  CHECK_EQ(0, g_tracker->untracked(1).count[0]);

  // pointer_info answers from the allocation call: inside a device allocation, its base, size and owner.
  kreplay_pointer_info_t info{};
  CHECK_OK(g_tracker->pointer_info(reinterpret_cast<void*>(0x7000100010), &info));
  CHECK(info.type == KREPLAY_POINTER_DEVICE);
  CHECK_EQ(0x7000100000, reinterpret_cast<uint64_t>(info.base));
  CHECK_EQ(8192, info.size);
  CHECK_EQ(1, info.owner.handle);
  CHECK_OK(g_tracker->pointer_info(reinterpret_cast<void*>(0x7000300000), &info));
  CHECK(info.type == KREPLAY_POINTER_LOCKED);
  CHECK_OK(g_tracker->pointer_info(reinterpret_cast<void*>(0x7000002000), &info));
  CHECK(info.type == KREPLAY_POINTER_UNKNOWN);

  for (uint64_t address : {0x7000400000ull, 0x7000000000ull, 0x7000300000ull, 0x7000100000ull, 0x7000200000ull}) {
    g_tracker->freeing(address);
  }
  const kreplay_inventory_stats_t after = test_inventory(agent(0));
  CHECK_EQ(before.regions, after.regions);
  CHECK_EQ(before.bytes, after.bytes);
  CHECK_EQ(0, g_tracker->untracked(0).count[0] + g_tracker->untracked(0).count[1] + g_tracker->untracked(0).count[2]);
}

void frees_out_of_order_and_of_unknown_pointers_keep_the_inventory_exact() {
  const kreplay_inventory_stats_t before = test_inventory(agent(0));
  const uint64_t base = 0x7100000000;
  for (uint64_t i = 0; i < 8; ++i) {
    g_tracker->allocated(ctx0, base + i * 0x10000, 0x1000 * (i + 1), memory_kind::device);
  }
  const uint64_t order[] = {5, 0, 7, 2, 6, 1, 4, 3};
  size_t live_bytes = 0;
  for (uint64_t i = 0; i < 8; ++i) {
    live_bytes += 0x1000 * (i + 1);
  }
  const uint64_t unknown_before = g_tracker->counts().unknown_frees;
  for (uint64_t i : order) {
    g_tracker->freeing(base + i * 0x10000);
    g_tracker->freeing(base + i * 0x10000 + 0x800);  // inside, not a base: unknown
    live_bytes -= 0x1000 * (i + 1);
    CHECK_EQ(before.bytes + live_bytes, test_inventory(agent(0)).bytes);
  }
  g_tracker->freeing(base);  // twice
  CHECK_EQ(unknown_before + 9, g_tracker->counts().unknown_frees);
  CHECK_EQ(before.regions, test_inventory(agent(0)).regions);
}

void an_allocation_of_an_unknown_device_declines_every_device_until_freed() {
  const CUcontext stranger = fake::handle<CUcontext>(0x900);  // the fake driver knows no device for it
  g_tracker->allocated(stranger, 0x7600000000, 4096, memory_kind::device);
  for (int device : {0, 1}) {
    kreplay_snapshot_t* snapshot = nullptr;
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(agent(device), &snapshot, &reason));
    CHECK(reason == KREPLAY_DECLINE_INVENTORY_OVERFLOW);
  }
  g_tracker->freeing(0x7600000000);
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  CHECK_OK(kreplay_snap(agent(0), &snapshot, &reason));
  kreplay_snapshot_free(snapshot);
}

void a_failed_free_puts_the_allocation_back() {
  const kreplay_inventory_stats_t before = test_inventory(agent(0));
  g_tracker->allocated(ctx0, 0x7200000000, 4096, memory_kind::device);
  g_tracker->freeing(0x7200000000);
  CHECK_EQ(before.regions, test_inventory(agent(0)).regions);
  g_tracker->free_failed(0x7200000000);
  CHECK_EQ(before.regions + 1, test_inventory(agent(0)).regions);
  g_tracker->freeing(0x7200000000);
  CHECK_EQ(before.regions, test_inventory(agent(0)).regions);
}

void only_mapped_pages_with_read_write_access_count() {
  const kreplay_inventory_stats_t before = test_inventory(agent(1));
  const uint64_t va = 0x7300000000;
  const size_t page = 2 << 20;
  g_tracker->vmem_created(0xA1, page, true, 1);
  g_tracker->vmem_created(0xA2, page, true, 1);
  g_tracker->vmem_created(0xA3, page, false, 0);  // host memory
  g_tracker->vmem_mapped(va, page, 0xA1);
  g_tracker->vmem_mapped(va + page, page, 0xA2);
  g_tracker->vmem_mapped(va + 2 * page, page, 0xA3);
  CHECK_EQ(before.bytes, test_inventory(agent(1)).bytes);  // mapped, not yet accessible

  const access_t other_device{true, 0, true};
  g_tracker->vmem_access(va, 3 * page, &other_device, 1);
  CHECK_EQ(before.bytes, test_inventory(agent(1)).bytes);
  const access_t read_only{true, 1, false};
  g_tracker->vmem_access(va, 3 * page, &read_only, 1);
  CHECK_EQ(before.bytes, test_inventory(agent(1)).bytes);

  const access_t access[] = {{true, 0, true}, {true, 1, true}};
  g_tracker->vmem_access(va, page / 2, access, 2);  // half of the first mapping
  CHECK_EQ(before.bytes + page / 2, test_inventory(agent(1)).bytes);
  // pointer_info answers for the recorded piece (a graph's memcpy into it is checked with it), not the rest.
  kreplay_pointer_info_t info{};
  CHECK_OK(g_tracker->pointer_info(reinterpret_cast<const void*>(va + 4096), &info));
  CHECK(info.type == KREPLAY_POINTER_DEVICE && info.size == page / 2 && info.owner.handle == agent(1).handle);
  CHECK(reinterpret_cast<uint64_t>(info.base) == va);
  CHECK_OK(g_tracker->pointer_info(reinterpret_cast<const void*>(va + page / 2), &info));
  CHECK(info.type == KREPLAY_POINTER_UNKNOWN && info.size == 0);
  g_tracker->vmem_access(va, 3 * page, access, 2);  // all: the rest of the first, the second; never the host one
  CHECK_EQ(before.bytes + 2 * page, test_inventory(agent(1)).bytes);
  CHECK_OK(g_tracker->pointer_info(reinterpret_cast<const void*>(va + page + 8), &info));
  CHECK(info.type == KREPLAY_POINTER_DEVICE && info.size == page && reinterpret_cast<uint64_t>(info.base) == va + page);
  CHECK_OK(g_tracker->pointer_info(reinterpret_cast<const void*>(va + 2 * page + 8), &info));  // the host one
  CHECK(info.type == KREPLAY_POINTER_UNKNOWN);
  g_tracker->vmem_access(va, 3 * page, access, 2);  // again: nothing twice
  CHECK_EQ(before.bytes + 2 * page, test_inventory(agent(1)).bytes);
  g_tracker->vmem_released(0xA1);  // released while mapped: still mapped
  CHECK_EQ(before.bytes + 2 * page, test_inventory(agent(1)).bytes);

  g_tracker->vmem_unmapping(va + page, page);  // the second mapping only
  CHECK_EQ(before.bytes + page, test_inventory(agent(1)).bytes);
  g_tracker->vmem_unmapping(va, page);
  g_tracker->vmem_unmapping(va + 2 * page, page);
  CHECK_EQ(before.bytes, test_inventory(agent(1)).bytes);
  CHECK_OK(g_tracker->pointer_info(reinterpret_cast<const void*>(va + 4096), &info));
  CHECK(info.type == KREPLAY_POINTER_UNKNOWN);
  CHECK_EQ(before.regions, test_inventory(agent(1)).regions);

  // A handle never seen created (imported): mapped and writable, it declines every device until unmapped.
  g_tracker->vmem_mapped(va, page, 0xA9);
  g_tracker->vmem_access(va, page, access, 2);
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(agent(0), &snapshot, &reason));
  CHECK(reason == KREPLAY_DECLINE_INVENTORY_OVERFLOW);
  g_tracker->vmem_unmapping(va, page);
  CHECK_OK(kreplay_snap(agent(0), &snapshot, &reason));
  kreplay_snapshot_free(snapshot);
}

struct module_fixture_t {
  std::vector<unsigned char> cubin = read_cubin();
  buffer_t counter{4}, table{256}, coeffs{32};
  CUmodule handle;
  explicit module_fixture_t(uintptr_t module) : handle(fake::handle<CUmodule>(module)) {
    fake::g_globals[handle] = {{"counter", {counter.address(), 4}},
                               {"table", {table.address(), 256}},
                               {"coeffs", {coeffs.address(), 32}}};
  }
};

void a_loaded_module_s_variables_are_snapshotted_and_restored() {
  module_fixture_t module(0xB0);
  size_t modules_before = 0, variables_before = 0;
  g_tracker->module_counts(0, &modules_before, &variables_before);
  g_tracker->module_loaded(ctx0, 41, module.cubin.data(), module.cubin.size(),
                           origin_t{origin_kind::module, nullptr, "cuModuleLoadData"});
  g_tracker->module_bound(41, origin_t{origin_kind::module, module.handle, "cuModuleLoadData"});
  size_t modules = 0, variables = 0;
  g_tracker->module_counts(0, &modules, &variables);
  CHECK_EQ(modules_before + 1, modules);
  CHECK_EQ(variables_before + 3, variables);

  std::memset(module.table.data(), 0x5A, 256);
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  CHECK_OK(kreplay_snap(agent(0), &snapshot, &reason));
  kreplay_snapshot_info_t info{};
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  CHECK_EQ(3, info.module_variables);
  CHECK_EQ(4 + 256 + 32, info.bytes);
  CHECK(fake::g_current.empty());  // every push popped
  std::memset(module.table.data(), 0, 256);
  kreplay_restore_report_t report{};
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK(test_all_bytes(module.table.data(), 256, 0x5A));
  kreplay_snapshot_free(snapshot);

  // The listing gives every variable with its kind; coeffs is the __constant__ one.
  struct seen_t {
    int count = 0;
    bool coeffs_constant = false;
  } seen;
  std::string detail;
  CHECK_OK(g_tracker->list_variables(0, [](void* data, const resolved_variable_t& v) {
    auto* s = static_cast<seen_t*>(data);
    ++s->count;
    if (std::strcmp(v.name, "coeffs") == 0) {
      s->coeffs_constant = v.is_constant && v.size == 32;
    }
    return true;
  }, &seen, &detail));
  CHECK_EQ(3, seen.count);
  CHECK(seen.coeffs_constant);

  g_tracker->module_unloading(41);
  g_tracker->module_counts(0, &modules, &variables);
  CHECK_EQ(modules_before, modules);
  CHECK_OK(kreplay_snap(agent(0), &snapshot, &reason));
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  CHECK_EQ(0, info.module_variables);
  kreplay_snapshot_free(snapshot);
}

// Loads the cubin as module `id` with `origin`, expects the snapshot of device 0 declined with the module named,
// then unloads it.
void expect_declined(uint32_t id, const void* image, size_t size, const origin_t& origin, const char* needle) {
  g_tracker->module_loaded(ctx0, id, image, size, origin);
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(agent(0), &snapshot, &reason));
  CHECK(snapshot == nullptr);
  CHECK(reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE);
  const std::string error = g_tracker->last_error();
  if (error.find("module " + std::to_string(id)) == std::string::npos || error.find(needle) == std::string::npos) {
    std::fprintf(stderr, "last error: %s (wanted %s)\n", error.c_str(), needle);
    CHECK(false);
  }
  g_tracker->module_unloading(id);
  CHECK_OK(kreplay_snap(agent(0), &snapshot, &reason));
  kreplay_snapshot_free(snapshot);
}

void modules_that_cannot_be_resolved_exactly_decline_the_device() {
  module_fixture_t module(0xB1);
  // A corrupt cubin (the section table cut off).
  std::vector<unsigned char> cut(module.cubin.begin(), module.cubin.begin() + 100);
  expect_declined(51, cut.data(), cut.size(), origin_t{origin_kind::module, module.handle, "cuModuleLoadData"},
                  "cubin cannot be read");
  const unsigned char junk[64] = {1, 2, 3};
  expect_declined(52, junk, sizeof(junk), origin_t{origin_kind::module, module.handle, "cuModuleLoadData"},
                  "cubin cannot be read");
  // Loaded where no handle was known: never guessed.
  expect_declined(53, module.cubin.data(), module.cubin.size(),
                  origin_t{origin_kind::none, nullptr, "cuDevicePrimaryCtxRetain"}, "cannot be located exactly");
  // A symbol the driver does not know, then one whose size differs from the cubin's.
  fake::g_globals[module.handle].erase("counter");
  expect_declined(54, module.cubin.data(), module.cubin.size(),
                  origin_t{origin_kind::module, module.handle, "cuModuleLoadData"}, "cuModuleGetGlobal(counter)");
  fake::g_globals[module.handle]["counter"] = {module.counter.address(), 8};
  expect_declined(55, module.cubin.data(), module.cubin.size(),
                  origin_t{origin_kind::module, module.handle, "cuModuleLoadData"}, "8 bytes, the cubin 4");
  fake::g_globals[module.handle]["counter"] = {module.counter.address(), 4};
  // A module in a context whose device is unknown: every device declines.
  g_tracker->module_loaded(fake::handle<CUcontext>(0x901), 57, module.cubin.data(), module.cubin.size(),
                           origin_t{origin_kind::module, module.handle, "cuModuleLoadData"});
  for (int device : {0, 1}) {
    kreplay_snapshot_t* snapshot = nullptr;
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    CHECK_STATUS(KREPLAY_STATUS_DECLINED, kreplay_snap(agent(device), &snapshot, &reason));
    CHECK(g_tracker->last_error().find("module 57 has variables in a context whose device is unknown") !=
          std::string::npos);
  }
  g_tracker->module_unloading(57);
  // A launch whose function is not in the cubin.
  const CUfunction stranger = fake::handle<CUfunction>(0xF1);
  fake::g_functions[stranger] = {module.handle, "not_here"};
  expect_declined(56, module.cubin.data(), module.cubin.size(),
                  origin_t{origin_kind::function, stranger, "cuLaunchKernel"}, "not in its cubin");
}

void modules_loaded_by_a_library_or_a_launch_resolve_through_their_handle() {
  module_fixture_t module(0xB2);
  const CUlibrary library = fake::handle<CUlibrary>(0xC2);
  fake::g_library_modules[library] = module.handle;
  const CUfunction bump = fake::handle<CUfunction>(0xF2);
  fake::g_functions[bump] = {module.handle, "bump"};
  for (const origin_t& origin : {origin_t{origin_kind::library, library, "cuLibraryLoadData"},
                                 origin_t{origin_kind::function, bump, "cuLaunchKernel"}}) {
    g_tracker->module_loaded(ctx0, 61, module.cubin.data(), module.cubin.size(), origin);
    kreplay_snapshot_t* snapshot = nullptr;
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    CHECK_OK(kreplay_snap(agent(0), &snapshot, &reason));
    kreplay_snapshot_info_t info{};
    CHECK_OK(kreplay_snapshot_info(snapshot, &info));
    CHECK_EQ(3, info.module_variables);
    kreplay_snapshot_free(snapshot);
    g_tracker->module_unloading(61);
  }
}

void a_module_loaded_without_a_handle_resolves_only_through_a_unique_library() {
  module_fixture_t module(0xB4);
  std::vector<unsigned char>& cubin = module.cubin;
  const origin_t none{origin_kind::none, nullptr, "cuDevicePrimaryCtxRetain"};
  // No library known with exactly its kernels ("bump"): declined.
  const CUlibrary other = fake::handle<CUlibrary>(0xC5);
  fake::g_library_kernels[other] = {"bump", "another"};
  g_tracker->library_loaded(other);
  const CUlibrary unreadable = fake::handle<CUlibrary>(0xC7);  // the fake driver cannot list its kernels
  g_tracker->library_loaded(unreadable);
  // The decline says why in figures: the module's kernels, the libraries, the closest one.
  expect_declined(91, cubin.data(), cubin.size(), none,
                  "no known library has exactly its kernels, so its variables cannot be located exactly (1 entry "
                  "kernel, the first bump; 2 libraries known, 1 unreadable; the closest readable library has 1 of "
                  "its 2 kernels among the module's 1); its first variable is ");
  g_tracker->library_unloading(unreadable);
  // One library with exactly "bump": its module in this context is the one.
  const CUlibrary library = fake::handle<CUlibrary>(0xC4);
  fake::g_library_kernels[library] = {"bump"};
  fake::g_library_modules[library] = module.handle;
  g_tracker->library_loaded(library);
  g_tracker->module_loaded(ctx0, 92, cubin.data(), cubin.size(), none);
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  CHECK_OK(kreplay_snap(agent(0), &snapshot, &reason));
  kreplay_snapshot_info_t info{};
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  CHECK_EQ(3, info.module_variables);
  kreplay_snapshot_free(snapshot);
  g_tracker->module_unloading(92);
  // Two libraries with the same kernels: ambiguous, declined.
  const CUlibrary twin = fake::handle<CUlibrary>(0xC6);
  fake::g_library_kernels[twin] = {"bump"};
  g_tracker->library_loaded(twin);
  expect_declined(93, cubin.data(), cubin.size(), none, "2 known libraries have exactly its kernels");
  // The twin unloaded: unique again.
  g_tracker->library_unloading(twin);
  g_tracker->module_loaded(ctx0, 94, cubin.data(), cubin.size(), none);
  CHECK_OK(kreplay_snap(agent(0), &snapshot, &reason));
  kreplay_snapshot_free(snapshot);
  g_tracker->module_unloading(94);
  g_tracker->library_unloading(library);
  g_tracker->library_unloading(other);
}

// A library the fake driver knows: its kernels, and its module in ctx0 with the given variables, each at an
// address of its own. Loaded into the tracker on construction, unloaded on destruction.
struct library_fixture_t {
  CUlibrary library;
  CUmodule module;
  std::vector<std::unique_ptr<buffer_t>> storage;
  library_fixture_t(uintptr_t library_handle, uintptr_t module_handle, std::vector<std::string> kernels,
                    const std::vector<std::pair<std::string, size_t>>& variables)
      : library(fake::handle<CUlibrary>(library_handle)), module(fake::handle<CUmodule>(module_handle)) {
    auto& globals = fake::g_globals[module];
    globals.clear();
    for (const auto& [name, size] : variables) {
      storage.push_back(std::make_unique<buffer_t>(size));
      globals[name] = {storage.back()->address(), size};
    }
    fake::g_library_kernels[library] = std::move(kernels);
    fake::g_library_modules[library] = module;
    g_tracker->library_loaded(library);
  }
  library_fixture_t(const library_fixture_t&) = delete;
  library_fixture_t& operator=(const library_fixture_t&) = delete;
  ~library_fixture_t() {
    g_tracker->library_unloading(library);
    fake::g_library_kernels.erase(library);
    fake::g_library_modules.erase(library);
    fake::g_globals.erase(module);
  }
  uint64_t address_of(const std::string& name) const { return fake::g_globals[module].at(name).address; }
};

using listing_t = std::map<std::pair<uint32_t, std::string>, uint64_t>;  // (module id, name) -> address

uint64_t at(listing_t& listed, uint32_t id, const char* name) { return listed[{id, name}]; }

kreplay_status_t list_device0(tracker& owner, listing_t* out, std::string* detail) {
  return owner.list_variables(0, [](void* data, const resolved_variable_t& v) {
    (*static_cast<listing_t*>(data))[{v.module_id, v.name}] = v.address;
    return true;
  }, out, detail);
}

const std::vector<std::pair<std::string, size_t>> kVarsVariables = {{"counter", 4}, {"table", 256}, {"coeffs", 32}};
const origin_t kNone{origin_kind::none, nullptr, "cuDevicePrimaryCtxRetain"};

void interchangeable_modules_are_paired_one_to_one_with_their_libraries() {
  const std::vector<unsigned char> cubin = read_cubin();
  auto first = std::make_unique<library_fixture_t>(0xD3, 0xBB, std::vector<std::string>{"bump"}, kVarsVariables);
  library_fixture_t second(0xD1, 0xBC, {"bump"}, kVarsVariables);
  library_fixture_t third(0xD2, 0xBD, {"bump"}, kVarsVariables);
  for (uint32_t id : {101u, 102u, 103u}) {
    g_tracker->module_loaded(ctx0, id, cubin.data(), cubin.size(), kNone);
  }
  // Three modules and three libraries with the same kernels and variables: each module gets one library's module,
  // in order (modules by id, libraries by handle), so every variable of the three is captured once.
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  CHECK_OK(kreplay_snap(agent(0), &snapshot, &reason));
  kreplay_snapshot_info_t info{};
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  CHECK_EQ(9, info.module_variables);
  kreplay_snapshot_free(snapshot);
  listing_t listed;
  std::string detail;
  CHECK_OK(list_device0(*g_tracker, &listed, &detail));
  CHECK_EQ(second.address_of("counter"), at(listed, 101, "counter"));
  CHECK_EQ(third.address_of("counter"), at(listed, 102, "counter"));
  CHECK_EQ(first->address_of("counter"), at(listed, 103, "counter"));

  // A library goes with its module (which of the three modules it was is the driver's to say): the two left are
  // paired afresh with the two libraries left.
  g_tracker->module_unloading(102);
  first.reset();
  listed.clear();
  CHECK_OK(list_device0(*g_tracker, &listed, &detail));
  CHECK(std::set<uint64_t>({at(listed, 101, "counter"), at(listed, 103, "counter")}) ==
        std::set<uint64_t>({second.address_of("counter"), third.address_of("counter")}));

  // A third module again, but no third library: declined, in figures.
  g_tracker->module_loaded(ctx0, 104, cubin.data(), cubin.size(), kNone);
  CHECK_STATUS(KREPLAY_STATUS_DEVICE_ERROR, list_device0(*g_tracker, &listed, &detail));
  CHECK(detail.find("module 101") != std::string::npos);
  CHECK(detail.find("3 modules of its context (loaded outside any followed call) and 2 known libraries have "
                    "exactly its kernels") != std::string::npos);
  CHECK(detail.find("(1 entry kernel, the first bump; 2 libraries known, 0 unreadable)") != std::string::npos);
  for (uint32_t id : {101u, 103u, 104u}) {
    g_tracker->module_unloading(id);
  }
}

void modules_with_different_variables_are_told_apart_by_their_libraries_globals() {
  const std::vector<unsigned char> cubin = read_cubin();
  const std::vector<unsigned char> more = read_cubin(KREPLAY_TEST_CUBIN_MORE);
  std::vector<std::pair<std::string, size_t>> more_variables = kVarsVariables;
  more_variables.emplace_back("more", 32);
  // The library with more variables sorts first: pairing in order alone would give module 111 its module.
  library_fixture_t big(0xD5, 0xBE, {"bump"}, more_variables);
  library_fixture_t small(0xD6, 0xBF, {"bump"}, kVarsVariables);
  g_tracker->module_loaded(ctx0, 111, cubin.data(), cubin.size(), kNone);
  g_tracker->module_loaded(ctx0, 112, more.data(), more.size(), kNone);
  const int calls = fake::g_library_global_calls;
  listing_t listed;
  std::string detail;
  CHECK_OK(list_device0(*g_tracker, &listed, &detail));
  CHECK(fake::g_library_global_calls > calls);  // each library asked for the variables by name
  CHECK_EQ(small.address_of("counter"), at(listed, 111, "counter"));
  CHECK_EQ(big.address_of("counter"), at(listed, 112, "counter"));
  CHECK_EQ(big.address_of("more"), at(listed, 112, "more"));
  CHECK_EQ(7, listed.size());

  // Without cuLibraryGetGlobal the two cannot be told apart: declined.
  driver_api_t without_globals = fake::driver();
  without_globals.library_get_global = nullptr;
  tracker local(without_globals);
  local.context_device(ctx0, 0, true);
  local.library_loaded(big.library);
  local.library_loaded(small.library);
  local.module_loaded(ctx0, 111, cubin.data(), cubin.size(), kNone);
  local.module_loaded(ctx0, 112, more.data(), more.size(), kNone);
  detail.clear();
  CHECK_STATUS(KREPLAY_STATUS_DEVICE_ERROR, list_device0(local, &listed, &detail));
  CHECK(detail.find("the modules define 2 different sets of variables and the driver has no cuLibraryGetGlobal") !=
        std::string::npos);

  // A library whose variables fit neither set (one size differs): declined, once the pairing is made afresh.
  fake::g_globals[small.module]["table"].size = 128;
  g_tracker->module_unloading(111);
  g_tracker->module_loaded(ctx0, 113, cubin.data(), cubin.size(), kNone);
  detail.clear();
  CHECK_STATUS(KREPLAY_STATUS_DEVICE_ERROR, list_device0(*g_tracker, &listed, &detail));
  CHECK(detail.find("a library's variables (cuLibraryGetGlobal) fit none of them") != std::string::npos);
  fake::g_globals[small.module]["table"].size = 256;
  g_tracker->module_unloading(112);
  g_tracker->module_unloading(113);
}

void modules_without_kernels_are_paired_by_their_variables() {
  const std::vector<unsigned char> only = read_cubin(KREPLAY_TEST_CUBIN_NO_KERNEL);
  const std::vector<unsigned char> only_more = read_cubin(KREPLAY_TEST_CUBIN_NO_KERNEL_MORE);
  const std::vector<std::pair<std::string, size_t>> variables = {{"only_counter", 4}, {"only_table", 64}};
  std::vector<std::pair<std::string, size_t>> more_variables = variables;
  more_variables.emplace_back("only_more", 32);
  // The shape of a translation unit without kernels: only its headers' variables. Two modules define the same
  // two, a third one more; the libraries have no kernels either.
  library_fixture_t a(0xDB, 0xC8, {}, variables);
  library_fixture_t b(0xD9, 0xC9, {}, more_variables);
  library_fixture_t c(0xDA, 0xCA, {}, variables);
  g_tracker->module_loaded(ctx0, 121, only.data(), only.size(), kNone);
  g_tracker->module_loaded(ctx0, 122, only_more.data(), only_more.size(), kNone);
  g_tracker->module_loaded(ctx0, 123, only.data(), only.size(), kNone);
  listing_t listed;
  std::string detail;
  CHECK_OK(list_device0(*g_tracker, &listed, &detail));
  CHECK_EQ(7, listed.size());
  CHECK_EQ(b.address_of("only_more"), at(listed, 122, "only_more"));
  CHECK_EQ(b.address_of("only_counter"), at(listed, 122, "only_counter"));
  CHECK(std::set<uint64_t>({at(listed, 121, "only_table"), at(listed, 123, "only_table")}) ==
        std::set<uint64_t>({a.address_of("only_table"), c.address_of("only_table")}));
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  CHECK_OK(kreplay_snap(agent(0), &snapshot, &reason));
  kreplay_snapshot_free(snapshot);

  // A fourth such module with no library of its own: declined, and the figures say it has no kernels.
  g_tracker->module_loaded(ctx0, 124, only.data(), only.size(), kNone);
  detail.clear();
  CHECK_STATUS(KREPLAY_STATUS_DEVICE_ERROR, list_device0(*g_tracker, &listed, &detail));
  CHECK(detail.find("4 modules of its context (loaded outside any followed call) and 3 known libraries") !=
        std::string::npos);
  CHECK(detail.find("(0 entry kernels; 3 libraries known, 0 unreadable)") != std::string::npos);
  for (uint32_t id : {121u, 122u, 123u, 124u}) {
    g_tracker->module_unloading(id);
  }
}

// Eager loading (PyTorch on the H200: 42 modules without kernels against 2026 libraries without kernels): more
// candidates than modules, told apart by their variables' names; only under eager loading, where asking a
// library loads nothing.
void under_eager_loading_more_libraries_than_modules_are_told_apart_by_names() {
  const std::vector<unsigned char> only = read_cubin(KREPLAY_TEST_CUBIN_NO_KERNEL);
  const std::vector<unsigned char> only_more = read_cubin(KREPLAY_TEST_CUBIN_NO_KERNEL_MORE);
  const std::vector<std::pair<std::string, size_t>> variables = {{"only_counter", 4}, {"only_table", 64}};
  std::vector<std::pair<std::string, size_t>> more_variables = variables;
  more_variables.emplace_back("only_more", 32);
  library_fixture_t a(0xE1, 0xD1, {}, variables);
  library_fixture_t b(0xE2, 0xD2, {}, more_variables);
  library_fixture_t other(0xE3, 0xD3, {}, {{"someone_elses", 4}});
  library_fixture_t empty(0xE4, 0xD4, {}, {});
  g_tracker->module_loaded(ctx0, 131, only.data(), only.size(), kNone);
  g_tracker->module_loaded(ctx0, 132, only_more.data(), only_more.size(), kNone);
  listing_t listed;
  std::string detail;
  // Lazy loading (the default): 2 modules, 4 libraries: declined, as asking could load a module untracked.
  CHECK_STATUS(KREPLAY_STATUS_DEVICE_ERROR, list_device0(*g_tracker, &listed, &detail));
  CHECK(detail.find("2 modules of its context (loaded outside any followed call) and 4 known libraries") !=
        std::string::npos);
  g_tracker->set_eager_loading(true);
  g_tracker->module_unloading(131);  // a new generation: the pairing is made afresh
  g_tracker->module_loaded(ctx0, 133, only.data(), only.size(), kNone);
  listed.clear();
  detail.clear();
  CHECK_OK(list_device0(*g_tracker, &listed, &detail));
  CHECK_EQ(5, listed.size());
  CHECK_EQ(a.address_of("only_table"), at(listed, 133, "only_table"));
  CHECK_EQ(b.address_of("only_more"), at(listed, 132, "only_more"));
  CHECK_EQ(b.address_of("only_table"), at(listed, 132, "only_table"));
  // A second library with the first set's names: the set is in two libraries for one module: declined.
  {
    library_fixture_t twin(0xE5, 0xD5, {}, variables);
    g_tracker->module_unloading(133);
    g_tracker->module_loaded(ctx0, 134, only.data(), only.size(), kNone);
    detail.clear();
    CHECK_STATUS(KREPLAY_STATUS_DEVICE_ERROR, list_device0(*g_tracker, &listed, &detail));
    CHECK(detail.find("is found in 2 libraries") != std::string::npos);
  }
  g_tracker->set_eager_loading(false);
  g_tracker->module_unloading(132);
  g_tracker->module_unloading(134);
}

void a_library_whose_module_is_known_is_no_candidate() {
  const std::vector<unsigned char> cubin = read_cubin();
  library_fixture_t loaded(0xE1, 0xCB, {"bump"}, kVarsVariables);
  auto other = std::make_unique<library_fixture_t>(0xE2, 0xCC, std::vector<std::string>{"bump"}, kVarsVariables);
  // Module 131 arrived inside cuLibraryLoadData of `loaded`: it is that library's module. Module 132, loaded
  // outside any followed call, can then only be `other`'s, though both libraries have its kernels.
  g_tracker->module_loaded(ctx0, 131, cubin.data(), cubin.size(),
                           origin_t{origin_kind::library, loaded.library, "cuLibraryLoadData"});
  g_tracker->module_loaded(ctx0, 132, cubin.data(), cubin.size(), kNone);
  listing_t listed;
  std::string detail;
  CHECK_OK(list_device0(*g_tracker, &listed, &detail));
  CHECK_EQ(loaded.address_of("counter"), at(listed, 131, "counter"));
  CHECK_EQ(other->address_of("counter"), at(listed, 132, "counter"));
  // Without `other` no library is left for it: declined, and the figures say why.
  g_tracker->module_unloading(132);
  other.reset();
  g_tracker->module_loaded(ctx0, 133, cubin.data(), cubin.size(), kNone);
  CHECK_STATUS(KREPLAY_STATUS_DEVICE_ERROR, list_device0(*g_tracker, &listed, &detail));
  CHECK(detail.find("module 133") != std::string::npos);
  CHECK(detail.find("and 0 known libraries (besides 1 whose module in this context is known) have exactly its "
                    "kernels") != std::string::npos);
  g_tracker->module_unloading(131);
  g_tracker->module_unloading(133);
}

void a_context_reset_forgets_its_allocations_and_modules_on_its_device_only() {
  module_fixture_t module(0xB3);
  const kreplay_inventory_stats_t before0 = test_inventory(agent(0));
  const kreplay_inventory_stats_t before1 = test_inventory(agent(1));
  g_tracker->allocated(ctx0, 0x7400000000, 4096, memory_kind::device);
  g_tracker->allocated(ctx0, 0x7400010000, 4096, memory_kind::pool);
  g_tracker->allocated(ctx0b, 0x7400020000, 4096, memory_kind::device);
  g_tracker->allocated(ctx1, 0x7400030000, 4096, memory_kind::device);
  g_tracker->allocated(ctx0, 0x7400040000, 4096, memory_kind::host_pinned);
  g_tracker->module_loaded(ctx0, 71, module.cubin.data(), module.cubin.size(),
                           origin_t{origin_kind::module, module.handle, "cuModuleLoadData"});
  CHECK_EQ(before0.regions + 3, test_inventory(agent(0)).regions);
  CHECK_EQ(before1.regions + 1, test_inventory(agent(1)).regions);

  g_tracker->primary_context_reset(0);  // ctx0 is device 0's primary context
  CHECK_EQ(before0.regions + 1, test_inventory(agent(0)).regions);  // ctx0b's allocation stays
  CHECK_EQ(before1.regions + 1, test_inventory(agent(1)).regions);
  CHECK_EQ(0, g_tracker->untracked(0).count[1]);
  size_t modules = 0, variables = 0;
  g_tracker->module_counts(0, &modules, &variables);
  CHECK_EQ(0, modules);

  const uint64_t forgotten = g_tracker->counts().contexts_forgotten;
  g_tracker->context_destroyed(ctx1);
  CHECK_EQ(before1.regions, test_inventory(agent(1)).regions);
  CHECK_EQ(forgotten + 1, g_tracker->counts().contexts_forgotten);
  // cuCtxDestroy's entry, then CONTEXT_DESTROY_STARTING within it: one destruction, counted once.
  g_tracker->context_destroyed(ctx1);
  CHECK_EQ(forgotten + 1, g_tracker->counts().contexts_forgotten);
  g_tracker->context_destroyed(ctx0b);
  CHECK_EQ(before0.regions, test_inventory(agent(0)).regions);
  CHECK_EQ(forgotten + 2, g_tracker->counts().contexts_forgotten);
  // The contexts come back (a reset primary context is retained again).
  g_tracker->context_device(ctx0, 0, true);
  g_tracker->context_device(ctx1, 1, true);
  g_tracker->context_device(ctx0b, 0, false);
}

void threads_allocating_and_freeing_at_once_leave_an_exact_inventory() {
  const kreplay_inventory_stats_t before0 = test_inventory(agent(0));
  const kreplay_inventory_stats_t before1 = test_inventory(agent(1));
  constexpr int threads = 4;
  constexpr uint64_t per_thread = 2000;
  std::atomic<int> ready{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([t, &ready] {
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      const CUcontext context = t % 2 == 0 ? ctx0 : ctx1;
      const uint64_t base = 0x7500000000 + static_cast<uint64_t>(t) * 0x100000000;
      for (uint64_t i = 0; i < per_thread; ++i) {
        g_tracker->allocated(context, base + i * 0x1000, 0x800, i % 3 == 0 ? memory_kind::pool : memory_kind::device);
        if (i >= 10) {
          g_tracker->freeing(base + (i - 10) * 0x1000);
        }
      }
    });
  }
  for (std::thread& worker : workers) {
    worker.join();
  }
  // Ten live per thread.
  CHECK_EQ(before0.regions + 20, test_inventory(agent(0)).regions);
  CHECK_EQ(before1.regions + 20, test_inventory(agent(1)).regions);
  CHECK_EQ(before0.bytes + 20 * 0x800, test_inventory(agent(0)).bytes);
  for (int t = 0; t < threads; ++t) {
    const uint64_t base = 0x7500000000 + static_cast<uint64_t>(t) * 0x100000000;
    for (uint64_t i = per_thread - 10; i < per_thread; ++i) {
      g_tracker->freeing(base + i * 0x1000);
    }
  }
  CHECK_EQ(before0.regions, test_inventory(agent(0)).regions);
  CHECK_EQ(before1.regions, test_inventory(agent(1)).regions);
}

void a_snapshot_covers_tracked_allocations_of_its_device_only() {
  buffer_t a(4096), b(8192), other(4096);
  std::memset(a.data(), 1, 4096);
  std::memset(b.data(), 2, 8192);
  g_tracker->allocated(ctx0, a.address(), 4096, memory_kind::device);
  g_tracker->allocated(ctx0, b.address(), 8192, memory_kind::pool);
  g_tracker->allocated(ctx1, other.address(), 4096, memory_kind::device);
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  CHECK_OK(kreplay_snap(agent(0), &snapshot, &reason));
  kreplay_snapshot_info_t info{};
  CHECK_OK(kreplay_snapshot_info(snapshot, &info));
  CHECK_EQ(2, info.regions);
  CHECK_EQ(4096 + 8192, info.bytes);
  std::memset(a.data(), 9, 4096);
  std::memset(b.data(), 9, 8192);
  kreplay_restore_report_t report{};
  CHECK_OK(kreplay_restore(snapshot, &report));
  CHECK(test_all_bytes(a.data(), 4096, 1));
  CHECK(test_all_bytes(b.data(), 8192, 2));
  kreplay_snapshot_free(snapshot);
  g_tracker->freeing(a.address());
  g_tracker->freeing(b.address());
  g_tracker->freeing(other.address());
}

// ---- The pairing as a pure function (tracker/pairing.hpp): plain inputs, a result struct ---------------------

namespace cubin = kreplay::cuda::cubin;

const CUlibrary kLibLow = fake::handle<CUlibrary>(0x11);
const CUlibrary kLibHigh = fake::handle<CUlibrary>(0x12);

variable_set_t set_of(const std::vector<std::pair<std::string, uint64_t>>& variables) {
  std::vector<cubin::variable_t> out;
  for (const auto& [name, size] : variables) {
    out.push_back(cubin::variable_t{name, size, cubin::section_kind::global, 0});
  }
  return variable_set(out);
}

// Each library's globals by name and size, and how often it was asked.
struct globals_t {
  std::map<CUlibrary, std::map<std::string, size_t>> of;
  int asked = 0;
  ask_global_t ask() {
    return [this](CUlibrary library, const char* name, size_t* bytes) {
      ++asked;
      const auto& globals = of[library];
      const auto found = globals.find(name);
      if (found == globals.end()) {
        return false;
      }
      *bytes = found->second;
      return true;
    };
  }
};

const std::vector<std::pair<std::string, uint64_t>> kSmall = {{"counter", 4}, {"table", 256}};
const std::vector<std::pair<std::string, uint64_t>> kLarge = {{"counter", 4}, {"table", 256}, {"more", 32}};

pairing_input_t two_modules(const variable_set_t& first, const variable_set_t& second) {
  pairing_input_t input;
  input.kernels = {"bump"};
  input.candidates = {kLibLow, kLibHigh};
  input.claimants = {claimant_t{7, first}, claimant_t{9, second}};
  input.libraries_known = 2;
  return input;
}

void pairing_gives_interchangeable_modules_the_libraries_in_order_without_asking() {
  globals_t globals;
  const pairing_result_t result = pair_modules(two_modules(set_of(kSmall), set_of(kSmall)), globals.ask());
  CHECK(result.outcome == pairing_outcome::paired);
  CHECK_EQ(2, result.library.size());
  CHECK(result.library.at(7) == kLibLow);
  CHECK(result.library.at(9) == kLibHigh);
  CHECK_EQ(0, globals.asked);
  CHECK(decline_text(two_modules(set_of(kSmall), set_of(kSmall)), result).empty());
}

void pairing_tells_different_variables_apart_by_the_libraries_globals() {
  globals_t globals;
  globals.of[kLibLow] = {{"counter", 4}, {"table", 256}, {"more", 32}};  // has both sets: its own is the larger
  globals.of[kLibHigh] = {{"counter", 4}, {"table", 256}};
  const pairing_result_t result = pair_modules(two_modules(set_of(kSmall), set_of(kLarge)), globals.ask());
  CHECK(result.outcome == pairing_outcome::paired);
  CHECK(result.library.at(7) == kLibHigh);
  CHECK(result.library.at(9) == kLibLow);
  CHECK(globals.asked > 0);
  // Without a way to ask, the same modules are declined.
  const pairing_input_t input = two_modules(set_of(kSmall), set_of(kLarge));
  const pairing_result_t blind = pair_modules(input, ask_global_t());
  CHECK(blind.outcome == pairing_outcome::no_global_query);
  CHECK(blind.library.empty());
  CHECK_EQ(2, blind.sets);
  CHECK(decline_text(input, blind).find("the modules define 2 different sets of variables and the driver has no "
                                        "cuLibraryGetGlobal") != std::string::npos);
}

void pairing_declines_a_library_that_fits_none_of_the_sets() {
  globals_t globals;
  globals.of[kLibLow] = {{"counter", 4}, {"table", 128}};  // a size differs
  globals.of[kLibHigh] = {{"counter", 4}, {"table", 256}, {"more", 32}};
  const pairing_input_t input = two_modules(set_of(kSmall), set_of(kLarge));
  const pairing_result_t result = pair_modules(input, globals.ask());
  CHECK(result.outcome == pairing_outcome::ambiguous_library);
  CHECK_EQ(0, result.fits);
  CHECK(result.library.empty());
  CHECK(decline_text(input, result) ==
        "2 modules of its context and 2 known libraries have exactly its kernels, and the modules define 2 different "
        "sets of variables, but a library's variables (cuLibraryGetGlobal) fit none of them, so its variables "
        "cannot be located exactly (1 entry kernel, the first bump; 2 libraries known, 0 unreadable)");
}

void pairing_declines_unequal_counts_and_a_module_that_came_through_a_handle() {
  pairing_input_t input = two_modules(set_of(kSmall), set_of(kSmall));
  input.through_handle = 1;
  const pairing_result_t through = pair_modules(input, ask_global_t());
  CHECK(through.outcome == pairing_outcome::unequal_counts);
  CHECK(through.library.empty());
  CHECK(decline_text(input, through).find("2 modules of its context (loaded outside any followed call, and 1 more "
                                          "through a module handle or a launch) and 2 known libraries") !=
        std::string::npos);
  // A surplus of libraries: declined under lazy loading, told apart by names under eager loading.
  input.through_handle = 0;
  input.claimants.pop_back();
  globals_t globals;
  globals.of[kLibHigh] = {{"counter", 4}, {"table", 256}};
  CHECK(pair_modules(input, globals.ask()).outcome == pairing_outcome::unequal_counts);
  input.eager_loading = true;
  const pairing_result_t eager = pair_modules(input, globals.ask());
  CHECK(eager.outcome == pairing_outcome::paired);
  CHECK_EQ(1, eager.library.size());
  CHECK(eager.library.at(7) == kLibHigh);
}

void pairing_without_a_library_names_the_closest_one() {
  pairing_input_t input;
  input.kernels = {"bump"};
  input.claimants = {claimant_t{7, set_of(kSmall)}};
  input.libraries_known = 3;
  input.unreadable = 1;
  const std::vector<std::string> one = {"another", "bump"};
  const std::vector<std::string> other = {"else"};
  input.closest = closest_library({&one, &other}, input.kernels);
  CHECK_EQ(1, input.closest.as_close);
  CHECK_EQ(1, input.closest.common);
  CHECK_EQ(2, input.closest.size);
  const pairing_result_t result = pair_modules(input, ask_global_t());
  CHECK(result.outcome == pairing_outcome::no_library);
  CHECK(decline_text(input, result) ==
        "no module or library handle was known on the loading thread and no known library has exactly its kernels, "
        "so its variables cannot be located exactly (1 entry kernel, the first bump; 3 libraries known, 1 "
        "unreadable; the closest readable library has 1 of its 2 kernels among the module's 1)");
}

// KREPLAY_INJECT_LOG=info: each copy batch is described by the sizes of its copies, in the classes of
// copy_batch's automatic method (below 1 MiB, 1 to 32 MiB, from 32 MiB; zero-byte copies are not counted), and its
// time; each digest op by its jobs, bytes and time. The copies themselves go through unchanged, and below info
// nothing is said.
const kreplay_device_ops_t* g_ops = nullptr;  // the injection's ops over the fakes, made in main

void copy_batches_and_digests_are_described_at_info() {
  const kreplay_device_ops_t& ops = *g_ops;
  std::vector<std::vector<unsigned char>> src;
  std::vector<std::vector<unsigned char>> dst;
  std::vector<kreplay_copy_t> copies;
  // Each threshold itself belongs to the class above it.
  for (const size_t bytes : {size_t{4096}, size_t{4096}, size_t{0}, size_t{100000}, size_t{1} << 20, size_t{2} << 20,
                             size_t{32} << 20}) {
    // At least one byte each, so that no pointer is null (memcpy's arguments must not be, even for 0 bytes).
    src.emplace_back(bytes + 1, static_cast<unsigned char>(src.size() + 1));
    dst.emplace_back(bytes + 1, 0);
    copies.push_back({dst.back().data(), src.back().data(), bytes});
  }
  const auto copy_all = [&] {
    CHECK_OK(ops.copy_batch(ops.user_data, kreplay_agent_t{1}, copies.data(), copies.size()));
  };
  set_log_level(KREPLAY_LOG_INFO);
  const std::string said = fake::stderr_of(copy_all);
  set_log_level(KREPLAY_LOG_WARNING);
  const std::string described = "copy batch: 6 copies, 36808352 bytes; below 1 MiB 3 (108192 bytes), 1 to 32 MiB 2 "
                                "(3145728 bytes), from 32 MiB 1 (33554432 bytes); ";
  const size_t at = said.find(described);
  CHECK(at != std::string::npos);
  const char* time = said.c_str() + at + described.size();
  char* end = nullptr;
  const long long us = std::strtoll(time, &end, 10);
  CHECK(end != time && us >= 0 && std::string(end).rfind(" us\n", 0) == 0);
  for (size_t i = 0; i < src.size(); ++i) {
    CHECK(std::equal(src[i].begin(), src[i].end() - 1, dst[i].begin()) && dst[i].back() == 0);
  }
  CHECK(fake::stderr_of(copy_all).find("copy batch") == std::string::npos);
  // The fake base has no digest op, so the call fails; it is described all the same.
  kreplay_digest_t digests[1]{};
  const kreplay_digest_job_t job{src[3].data(), 100000, digests};
  const auto digest_one = [&] {
    CHECK(ops.digest(ops.user_data, kreplay_agent_t{1}, &job, 1, 1u << 20) == KREPLAY_STATUS_DEVICE_ERROR);
  };
  set_log_level(KREPLAY_LOG_INFO);
  const std::string digested = fake::stderr_of(digest_one);
  set_log_level(KREPLAY_LOG_WARNING);
  CHECK(digested.find("digest: 1 jobs, 100000 bytes; ") != std::string::npos);
  CHECK(fake::stderr_of(digest_one).find("digest:") == std::string::npos);
}

}  // namespace

int main() {
  fake::g_context_devices = {{ctx0, 0}, {ctx1, 1}, {ctx0b, 0}};
  static tracker owner(fake::driver());
  g_tracker = &owner;
  // ctx0 and ctx1 are primary contexts (cuDevicePrimaryCtxRetain); ctx0b comes from cuCtxCreate.
  owner.context_device(ctx0, 0, true);
  owner.context_device(ctx1, 1, true);
  owner.context_device(ctx0b, 0, false);
  kreplay_device_ops_t ops{};
  CHECK_OK(make_injection_ops(owner, fake::make_base, &ops));
  CHECK_OK(kreplay_configure(&ops));
  kreplay_tracking_enable(true);
  CHECK_EQ(0, fake::g_base_made);  // made on first use, never inside InitializeInjection

  RUN_TEST(pairing_gives_interchangeable_modules_the_libraries_in_order_without_asking);
  RUN_TEST(pairing_tells_different_variables_apart_by_the_libraries_globals);
  RUN_TEST(pairing_declines_a_library_that_fits_none_of_the_sets);
  RUN_TEST(pairing_declines_unequal_counts_and_a_module_that_came_through_a_handle);
  RUN_TEST(pairing_without_a_library_names_the_closest_one);
  RUN_TEST(allocations_of_each_kind_are_tracked_or_counted);
  RUN_TEST(frees_out_of_order_and_of_unknown_pointers_keep_the_inventory_exact);
  RUN_TEST(a_failed_free_puts_the_allocation_back);
  RUN_TEST(an_allocation_of_an_unknown_device_declines_every_device_until_freed);
  RUN_TEST(only_mapped_pages_with_read_write_access_count);
  RUN_TEST(a_loaded_module_s_variables_are_snapshotted_and_restored);
  RUN_TEST(modules_that_cannot_be_resolved_exactly_decline_the_device);
  RUN_TEST(modules_loaded_by_a_library_or_a_launch_resolve_through_their_handle);
  RUN_TEST(a_module_loaded_without_a_handle_resolves_only_through_a_unique_library);
  RUN_TEST(interchangeable_modules_are_paired_one_to_one_with_their_libraries);
  RUN_TEST(modules_with_different_variables_are_told_apart_by_their_libraries_globals);
  RUN_TEST(modules_without_kernels_are_paired_by_their_variables);
  RUN_TEST(under_eager_loading_more_libraries_than_modules_are_told_apart_by_names);
  RUN_TEST(a_library_whose_module_is_known_is_no_candidate);
  RUN_TEST(a_context_reset_forgets_its_allocations_and_modules_on_its_device_only);
  RUN_TEST(threads_allocating_and_freeing_at_once_leave_an_exact_inventory);
  RUN_TEST(a_snapshot_covers_tracked_allocations_of_its_device_only);
  CHECK_EQ(1, fake::g_base_made);
  // The live device budget's op reaches the base ops (device_budget_percent works under the injection).
  size_t free_bytes = 0;
  CHECK(ops.device_free_bytes != nullptr);
  CHECK_OK(ops.device_free_bytes(ops.user_data, kreplay_agent_t{1}, &free_bytes));
  CHECK_EQ(fake::kFreeBytes, free_bytes);
  g_ops = &ops;
  RUN_TEST(copy_batches_and_digests_are_described_at_info);
  return 0;
}
