// Finds which way of calling CUPTI's Checkpoint API works on this machine and driver, before the benchmark
// relies on one: the context left NULL (the header's "current context"), the current (primary) context named
// explicitly, or a context made with cuCtxCreate (as NVIDIA's checkpoint sample does); each with the checkpoint
// in device memory and kept out of it (reserveDeviceMB = -1, as the header documents, or = the device's whole
// memory in MiB). Each variant saves a 64 MiB buffer, overwrites it, restores and checks the bytes. Prints one
// line per variant, then CUPTI_CONTEXT=<first mode whose device variant works> and CUPTI_HOST_RESERVE=<first
// host variant that works in that mode> (none when nothing does), then runs the benchmark's OPT_TRANSFER
// sequence in that mode, step by step. Exits 0 unless CUDA itself fails: a refusal by
// CUPTI is a finding, not an error.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <cupti_checkpoint.h>

#include "cuda_check.hpp"
#include "driver_api.hpp"

using NV::Cupti::Checkpoint::CUpti_Checkpoint;
using NV::Cupti::Checkpoint::cuptiCheckpointFree;
using NV::Cupti::Checkpoint::cuptiCheckpointRestore;
using NV::Cupti::Checkpoint::cuptiCheckpointSave;

namespace {

constexpr size_t kBytes = 64u << 20;

// A checkpoint of `ctx` that may be saved over, in device memory (host_reserve nullptr) or kept out of it
// ("minus1": reserveDeviceMB = -1, as the header documents; "total": the device's whole memory in MiB).
CUpti_Checkpoint make_checkpoint(CUcontext ctx, const char* host_reserve, uint8_t optimizations) {
  CUpti_Checkpoint checkpoint;
  std::memset(&checkpoint, 0, sizeof(checkpoint));
  checkpoint.structSize = CUpti_Checkpoint_STRUCT_SIZE;
  checkpoint.ctx = ctx;
  size_t free_now = 0, total_now = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_now, &total_now));
  checkpoint.reserveDeviceMB = host_reserve == nullptr                  ? 0
                               : std::strcmp(host_reserve, "minus1") == 0 ? static_cast<size_t>(-1)
                                                                          : total_now >> 20;
  checkpoint.allowOverwrite = 1;
  checkpoint.optimizations = optimizations;
  return checkpoint;
}

// host_reserve: nullptr keeps the checkpoint in device memory; "minus1" or "total" keep it out.
bool try_variant(const char* mode, const char* host_reserve, uint8_t optimizations) {
  const bool device_memory = host_reserve == nullptr;
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  CUcontext created = nullptr;
  if (std::strcmp(mode, "created") == 0) {
    created = driver_api::create_context(0);
  }
  CUcontext ctx = std::strcmp(mode, "null") == 0 ? nullptr : driver_api::current_context();

  void* buffer = nullptr;
  CUDA_CHECK(cudaMalloc(&buffer, kBytes));
  CUDA_CHECK(cudaMemset(buffer, 0x11, kBytes));
  CUDA_CHECK(cudaDeviceSynchronize());

  CUpti_Checkpoint checkpoint = make_checkpoint(ctx, host_reserve, optimizations);

  size_t free_before = 0, free_after = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  const int save = static_cast<int>(cuptiCheckpointSave(&checkpoint));
  CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  int restore = -1;
  int release = -1;
  bool restored = false;
  if (save == 0) {
    CUDA_CHECK(cudaMemset(buffer, 0x22, kBytes));
    CUDA_CHECK(cudaDeviceSynchronize());
    restore = static_cast<int>(cuptiCheckpointRestore(&checkpoint));
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<unsigned char> host(kBytes);
    CUDA_CHECK(cudaMemcpy(host.data(), buffer, kBytes, cudaMemcpyDeviceToHost));
    restored = restore == 0;
    for (unsigned char byte : host) {
      restored = restored && byte == 0x11;
    }
    release = static_cast<int>(cuptiCheckpointFree(&checkpoint));
  }
  std::printf("cupti_probe: ctx=%-8s %-13s opt=%u: save=%d restore=%d free=%d device MiB taken by save=%.1f "
              "restored=%s\n",
              mode, device_memory ? "device" : (std::string("host/") + host_reserve).c_str(), optimizations, save, restore, release,
              (static_cast<double>(free_before) - static_cast<double>(free_after)) / (1 << 20),
              restored ? "yes" : "no");
  std::fflush(stdout);
  CUDA_CHECK(cudaFree(buffer));
  if (created != nullptr) {
    driver_api::destroy_context(created);
    CUDA_CHECK(cudaSetDevice(0));
  }
  return restored && release == 0;
}

__global__ void write_block(unsigned char* block, size_t bytes) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    block[i] = 0x22;
  }
}

// The sequence the benchmark's OPT_TRANSFER rows run (CUPTI_CHECKPOINT_OPT_TRANSFER, one checkpoint saved over
// with allowOverwrite): save, then twice a partial overwrite and a restore, then a second save over the first and
// once more. Each step is printed (and flushed) before it runs, so that a crash inside CUPTI names its step.
// by_kernel: the partial overwrites are a kernel's (as in the benchmark) rather than cudaMemset's.
// between: what else runs between a restore and the next pass, as the benchmark's verification and write lists
// do: "none"; "h2d" (a pageable host-to-device copy into a second allocation); "memset" (a cudaMemset of it);
// "kernel" (a kernel writing it). The second allocation exists in every variant, before the save.
void try_transfer_sequence(const char* mode, bool device_memory, bool by_kernel, const char* between = "none") {
  CUDA_CHECK(cudaSetDevice(0));
  CUcontext ctx = std::strcmp(mode, "null") == 0 ? nullptr : driver_api::current_context();
  unsigned char* buffer = nullptr;
  unsigned char* other = nullptr;
  constexpr size_t kOther = 1u << 20;
  CUDA_CHECK(cudaMalloc(&other, kOther));
  CUDA_CHECK(cudaMemset(other, 0, kOther));
  std::vector<unsigned char> pageable(kOther, 0x5A);
  CUDA_CHECK(cudaMalloc(&buffer, kBytes));
  CUDA_CHECK(cudaMemset(buffer, 0x11, kBytes));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUpti_Checkpoint checkpoint = make_checkpoint(ctx, device_memory ? nullptr : "total", 1);
  auto step = [&](const char* what) {
    std::printf("cupti_probe: transfer sequence ctx=%s %s, writes by %s, between %s: %s\n", mode,
                device_memory ? "device" : "host", by_kernel ? "kernel" : "cudaMemset", between, what);
    std::fflush(stdout);
  };
  bool ok = true;
  for (int save = 0; save < 2 && ok; ++save) {
    step(save == 0 ? "save" : "save over the first");
    ok = cuptiCheckpointSave(&checkpoint) == CUPTI_SUCCESS;
    for (int pass = 0; pass < 2 && ok; ++pass) {
      if (std::strcmp(between, "h2d") == 0) {
        CUDA_CHECK(cudaMemcpy(other, pageable.data(), kOther, cudaMemcpyHostToDevice));
      } else if (std::strcmp(between, "memset") == 0) {
        CUDA_CHECK(cudaMemset(other, 0x5A, kOther));
      } else if (std::strcmp(between, "kernel") == 0) {
        write_block<<<64, 256>>>(other, kOther);
        CUDA_CHECK_LAUNCH();
      }
      if (by_kernel) {
        write_block<<<64, 256>>>(buffer + (pass + 1) * (1u << 20), 64u << 10);
        CUDA_CHECK_LAUNCH();
      } else {
        CUDA_CHECK(cudaMemset(buffer + (pass + 1) * (1u << 20), 0x22, 64u << 10));  // one 64 KiB block
      }
      CUDA_CHECK(cudaDeviceSynchronize());
      step("restore");
      ok = cuptiCheckpointRestore(&checkpoint) == CUPTI_SUCCESS;
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<unsigned char> host(kBytes);
      CUDA_CHECK(cudaMemcpy(host.data(), buffer, kBytes, cudaMemcpyDeviceToHost));
      for (unsigned char byte : host) {
        ok = ok && byte == 0x11;
      }
    }
  }
  step("free");
  const bool freed = cuptiCheckpointFree(&checkpoint) == CUPTI_SUCCESS;
  std::printf("cupti_probe: transfer sequence ctx=%s %s, writes by %s, between %s: %s\n", mode,
              device_memory ? "device" : "host", by_kernel ? "kernel" : "cudaMemset", between,
              ok && freed ? "restored exactly every time" : "FAILED");
  std::fflush(stdout);
  CUDA_CHECK(cudaFree(buffer));
  CUDA_CHECK(cudaFree(other));
}

}  // namespace

int main() {
  const char* context = "none";
  const char* host_reserve = "none";
  for (const char* mode : {"null", "explicit", "created"}) {
    const bool on_device = try_variant(mode, nullptr, 0);
    const bool host_minus1 = try_variant(mode, "minus1", 0);
    const bool host_total = try_variant(mode, "total", 0);
    (void)try_variant(mode, nullptr, 1);  // the optimisation NVIDIA's sample turns on, for the record
    if (on_device && std::strcmp(context, "none") == 0) {
      context = mode;
      host_reserve = host_minus1 ? "minus1" : host_total ? "total" : "none";
    }
  }
  std::printf("CUPTI_CONTEXT=%s\nCUPTI_HOST_RESERVE=%s\n", context, host_reserve);
  std::fflush(stdout);
  if (std::strcmp(context, "none") != 0) {
    for (bool by_kernel : {false, true}) {
      try_transfer_sequence(context, true, by_kernel);
      try_transfer_sequence(context, false, by_kernel);
    }
    // What the benchmark does between passes besides the pass's own writes, one thing at a time.
    for (const char* between : {"h2d", "memset", "kernel"}) {
      try_transfer_sequence(context, true, true, between);
    }
  }
  return 0;
}
