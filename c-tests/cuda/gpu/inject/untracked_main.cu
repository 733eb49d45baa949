// Check (g) of run_inject.sh: run with the injection library (CUDA_INJECTION64_PATH) and tracking on. Managed
// memory (cudaMallocManaged), pinned host memory (cudaMallocHost, cudaHostAlloc, cudaHostRegister) and mapped host
// memory (cudaHostAlloc with cudaHostAllocMapped) of known sizes must be counted by the tracker
// (kreplay_inject_untracked) and held by kreplay as untracked memory of device 0 (kreplay_inject_untracked_stats),
// stay out of the inventory, leave a snapshot possible, and be forgotten by both at their frees. Prints
// "RESULT untracked ..." and PASS/FAIL lines; exits non-zero on a failed check.
//
// The runtime may pass the driver a mapping flag of its own for cudaMallocHost / cudaHostRegister (every pinned
// allocation is mapped under unified addressing), so the split between pinned and mapped is printed, and checked
// only where the program asked for mapped memory: pinned + mapped must grow by exactly the four host blocks.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kreplay/kreplay_inject.h"

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  g_failures += ok ? 0 : 1;
}

#define CUDA_OK(call)                                                              \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      std::printf("FAIL %s: %s\n", #call, cudaGetErrorString(e_));                 \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

constexpr size_t mib = size_t{1} << 20;
constexpr size_t managed_bytes = 3 * mib;
constexpr size_t malloc_host_bytes = 1 * mib;
constexpr size_t host_alloc_bytes = 2 * mib;
constexpr size_t registered_bytes = 4 * mib;
constexpr size_t mapped_bytes = 5 * mib;
constexpr size_t device_bytes = 6 * mib;
constexpr size_t host_bytes = malloc_host_bytes + host_alloc_bytes + registered_bytes + mapped_bytes;

struct views_t {
  kreplay_inject_untracked_t tracker;
  kreplay_untracked_t kreplay;
  kreplay_inventory_stats_t inventory;
};

struct api_t {
  decltype(&kreplay_inject_untracked) untracked;
  decltype(&kreplay_inject_untracked_stats) untracked_stats;
  decltype(&kreplay_inject_inventory_stats) inventory;
  decltype(&kreplay_inject_snapshot) snapshot;
  decltype(&kreplay_inject_state) state;
};

bool read(const api_t& api, views_t* out) {
  views_t v{};
  const bool ok = api.untracked(0, &v.tracker) == KREPLAY_STATUS_SUCCESS &&
                  api.untracked_stats(0, &v.kreplay) == KREPLAY_STATUS_SUCCESS &&
                  api.inventory(0, &v.inventory) == KREPLAY_STATUS_SUCCESS;
  *out = v;
  return ok;
}

void print(const char* when, const views_t& v) {
  std::printf("RESULT untracked %s tracker_managed=%zu/%zu tracker_pinned=%zu/%zu tracker_mapped=%zu/%zu "
              "kreplay_managed=%zu/%zu kreplay_host=%zu/%zu inventory=%zu/%zu (count/bytes)\n",
              when, v.tracker.managed_count, v.tracker.managed_bytes, v.tracker.host_pinned_count,
              v.tracker.host_pinned_bytes, v.tracker.host_mapped_count, v.tracker.host_mapped_bytes,
              v.kreplay.count[KREPLAY_UNTRACKED_MANAGED], v.kreplay.bytes[KREPLAY_UNTRACKED_MANAGED],
              v.kreplay.count[KREPLAY_UNTRACKED_HOST], v.kreplay.bytes[KREPLAY_UNTRACKED_HOST], v.inventory.regions,
              v.inventory.bytes);
}

// Every kind once, freed at once: whatever the runtime sets up on its first use of a kind happens before the
// baseline is read.
int warm_up() {
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, 4096));
  CUDA_OK(cudaFree(p));
  CUDA_OK(cudaMallocManaged(&p, 4096));
  CUDA_OK(cudaFree(p));
  CUDA_OK(cudaMallocHost(&p, 4096));
  CUDA_OK(cudaFreeHost(p));
  CUDA_OK(cudaHostAlloc(&p, 4096, cudaHostAllocMapped));
  CUDA_OK(cudaFreeHost(p));
  p = std::aligned_alloc(4096, 4096);
  if (p == nullptr) {
    std::printf("FAIL aligned_alloc\n");
    return 1;
  }
  CUDA_OK(cudaHostRegister(p, 4096, cudaHostRegisterDefault));
  CUDA_OK(cudaHostUnregister(p));
  std::free(p);
  return 0;
}

}  // namespace

int main() {
  CUDA_OK(cudaFree(nullptr));  // the primary context
  const char* path = std::getenv("CUDA_INJECTION64_PATH");
  void* library = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  check(library != nullptr, "the injection library is in the process");
  if (library == nullptr) {
    return 1;
  }
  api_t api{};
  api.untracked = reinterpret_cast<decltype(api.untracked)>(dlsym(library, "kreplay_inject_untracked"));
  api.untracked_stats =
      reinterpret_cast<decltype(api.untracked_stats)>(dlsym(library, "kreplay_inject_untracked_stats"));
  api.inventory = reinterpret_cast<decltype(api.inventory)>(dlsym(library, "kreplay_inject_inventory_stats"));
  api.snapshot = reinterpret_cast<decltype(api.snapshot)>(dlsym(library, "kreplay_inject_snapshot"));
  api.state = reinterpret_cast<decltype(api.state)>(dlsym(library, "kreplay_inject_state"));
  check(api.untracked != nullptr && api.untracked_stats != nullptr && api.inventory != nullptr &&
            api.snapshot != nullptr && api.state != nullptr,
        "the injection exports kreplay_inject_untracked, _untracked_stats, _inventory_stats, _snapshot, _state");
  if (g_failures != 0) {
    return 1;
  }
  kreplay_inject_state_t s{};
  check(api.state(&s) == KREPLAY_STATUS_SUCCESS && s.subscribed, "the injection is subscribed");
  if (warm_up() != 0) {
    return 1;
  }

  views_t before{};
  check(read(api, &before), "the counts are readable before");
  print("before", before);

  void* managed = nullptr;
  void* malloc_host = nullptr;
  void* host_alloc = nullptr;
  void* mapped = nullptr;
  void* device = nullptr;
  void* registered = std::aligned_alloc(4096, registered_bytes);
  check(registered != nullptr, "aligned_alloc of the block to register");
  if (registered == nullptr) {
    return 1;
  }
  CUDA_OK(cudaMallocManaged(&managed, managed_bytes));
  CUDA_OK(cudaMallocHost(&malloc_host, malloc_host_bytes));
  CUDA_OK(cudaHostAlloc(&host_alloc, host_alloc_bytes, cudaHostAllocDefault));
  CUDA_OK(cudaHostRegister(registered, registered_bytes, cudaHostRegisterDefault));
  CUDA_OK(cudaHostAlloc(&mapped, mapped_bytes, cudaHostAllocMapped));
  CUDA_OK(cudaMalloc(&device, device_bytes));
  CUDA_OK(cudaDeviceSynchronize());

  views_t during{};
  check(read(api, &during), "the counts are readable with the blocks live");
  print("live", during);
  const auto& t0 = before.tracker;
  const auto& t1 = during.tracker;
  check(t1.managed_count == t0.managed_count + 1 && t1.managed_bytes == t0.managed_bytes + managed_bytes,
        "the tracker counts the managed block (" + std::to_string(managed_bytes) + " bytes)");
  check(t1.host_pinned_count + t1.host_mapped_count == t0.host_pinned_count + t0.host_mapped_count + 4 &&
            t1.host_pinned_bytes + t1.host_mapped_bytes == t0.host_pinned_bytes + t0.host_mapped_bytes + host_bytes,
        "the tracker counts the 4 host blocks as pinned or mapped (" + std::to_string(host_bytes) + " bytes)");
  check(t1.host_mapped_count >= t0.host_mapped_count + 1 && t1.host_mapped_bytes >= t0.host_mapped_bytes + mapped_bytes,
        "the tracker counts the cudaHostAllocMapped block as mapped");
  std::printf("RESULT untracked split pinned=+%zu/+%zu mapped=+%zu/+%zu (cudaMallocHost, cudaHostAlloc default, "
              "cudaHostRegister default: pinned or mapped as the runtime asked the driver)\n",
              t1.host_pinned_count - t0.host_pinned_count, t1.host_pinned_bytes - t0.host_pinned_bytes,
              t1.host_mapped_count - t0.host_mapped_count, t1.host_mapped_bytes - t0.host_mapped_bytes);
  const auto& k0 = before.kreplay;
  const auto& k1 = during.kreplay;
  check(k1.count[KREPLAY_UNTRACKED_MANAGED] == k0.count[KREPLAY_UNTRACKED_MANAGED] + 1 &&
            k1.bytes[KREPLAY_UNTRACKED_MANAGED] == k0.bytes[KREPLAY_UNTRACKED_MANAGED] + managed_bytes,
        "kreplay holds the managed block as untracked MANAGED memory of device 0");
  check(k1.count[KREPLAY_UNTRACKED_HOST] == k0.count[KREPLAY_UNTRACKED_HOST] + 4 &&
            k1.bytes[KREPLAY_UNTRACKED_HOST] == k0.bytes[KREPLAY_UNTRACKED_HOST] + host_bytes,
        "kreplay holds the 4 host blocks as untracked HOST memory of device 0");
  check(during.inventory.regions == before.inventory.regions + 1 &&
            during.inventory.bytes == before.inventory.bytes + device_bytes,
        "the inventory grows by the device block only");

  kreplay_inject_snapshot_result_t result{};
  api.snapshot(0, &result);
  check(result.snap_status == KREPLAY_STATUS_SUCCESS && result.restore_status == KREPLAY_STATUS_SUCCESS,
        "a snapshot of device 0 succeeds with untracked memory live (reason " +
            std::to_string(static_cast<int>(result.reason)) + ": " + result.detail + ")");
  std::printf("RESULT untracked snapshot=%d regions=%zu bytes=%zu\n", static_cast<int>(result.snap_status),
              result.regions, result.bytes);

  CUDA_OK(cudaFree(managed));
  CUDA_OK(cudaFreeHost(malloc_host));
  CUDA_OK(cudaFreeHost(host_alloc));
  CUDA_OK(cudaHostUnregister(registered));
  CUDA_OK(cudaFreeHost(mapped));
  CUDA_OK(cudaFree(device));
  std::free(registered);

  views_t after{};
  check(read(api, &after), "the counts are readable after the frees");
  print("after", after);
  const auto& t2 = after.tracker;
  check(t2.managed_count == t0.managed_count && t2.managed_bytes == t0.managed_bytes &&
            t2.host_pinned_count == t0.host_pinned_count && t2.host_pinned_bytes == t0.host_pinned_bytes &&
            t2.host_mapped_count == t0.host_mapped_count && t2.host_mapped_bytes == t0.host_mapped_bytes,
        "the tracker's counts return to the values before");
  bool same = true;
  for (int kind = 0; kind < KREPLAY_UNTRACKED_KIND_COUNT; ++kind) {
    same = same && after.kreplay.count[kind] == k0.count[kind] && after.kreplay.bytes[kind] == k0.bytes[kind];
  }
  check(same, "kreplay's untracked stats return to the values before");
  check(after.inventory.regions == before.inventory.regions && after.inventory.bytes == before.inventory.bytes,
        "the inventory returns to the values before");
  std::printf("RESULT untracked failures=%d\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
