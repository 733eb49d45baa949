// kreplay_host_lock_bench (c-tests/cuda/bench/bench_host_lock.cu): what a first dispatch's staging costs on this
// machine, step by step. Maps a fresh block (as kreplay's host pool does), optionally advises huge pages,
// populates it (not at all, on one thread, or in parallel slices), then page-locks it with cudaHostRegister
// (portable, with or without mapped), and prints the time of each step. Each configuration gets a fresh mapping.
// GPU machine only. With "pair": two threads at once, per populate method; with "adapter": the CUDA adapter's own
// host_lock, two at once and alone.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <mutex>

#include <cuda_runtime.h>

#include "kreplay/cuda.hpp"
#include "populate.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Populates by touching instead of madvise, as the adapters do (adapters/common/populate.hpp): an atomic "or 0"
// into one byte of every 4 KiB page is one write fault per page (one per 2 MiB where a huge page backs it), keeps
// the contents, and takes the fault path, which on Linux 6.4+ locks only the faulting mapping, not the process's
// mmap lock that MADV_POPULATE_WRITE holds.
constexpr size_t kTouch = ~size_t{0};

void touch_slice(char* base, size_t bytes) { kreplay::adapter::touch_pages(base, bytes, 4096); }

// One madvise per slice, or (step > 0) one per step of the slice, or (step == kTouch) by touching.
void populate_slice(char* base, size_t bytes, size_t step) {
  if (step == kTouch) {
    touch_slice(base, bytes);
    return;
  }
  if (step == 0) step = bytes;
  for (size_t done = 0; done < bytes; done += step) {
    (void)madvise(base + done, std::min(step, bytes - done), MADV_POPULATE_WRITE);
  }
}

void populate(char* base, size_t bytes, unsigned threads, size_t step = 0) {
  if (threads <= 1) {
    populate_slice(base, bytes, step);
    return;
  }
  const size_t slice = (bytes / threads + 4095) / 4096 * 4096;
  std::vector<std::thread> workers;
  for (size_t at = 0; at < bytes; at += slice) {
    workers.emplace_back([=] { populate_slice(base + at, std::min(slice, bytes - at), step); });
  }
  for (std::thread& worker : workers) worker.join();
}

// Runs work(t, block) on `threads` threads at once, each with a fresh mapping of `bytes` (none when mmap fails),
// then, once every thread is done, release(t, block) and the unmapping: kreplay keeps its staging, so no block goes
// away while another thread still works.
template <typename Work, typename Release>
void on_fresh_blocks(int threads, size_t bytes, Work work, Release release) {
  std::vector<char*> blocks(static_cast<size_t>(threads), nullptr);
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&, t] {
      void* raw = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (raw == MAP_FAILED) return;
      blocks[static_cast<size_t>(t)] = static_cast<char*>(raw);
      work(t, static_cast<char*>(raw));
    });
  }
  for (std::thread& thread : running) thread.join();
  for (int t = 0; t < threads; ++t) {
    char* block = blocks[static_cast<size_t>(t)];
    if (block == nullptr) continue;
    release(t, block);
    munmap(block, bytes);
  }
}

// Two first dispatches at once in one process (two GPUs' replay threads): each maps, advises huge pages,
// populates in 4 slices and registers, as the CUDA adapter does, with one madvise per slice, per 32 MiB, or by
// touching; nothing done one at a time, the populates one at a time, or the registrations one at a time. Then one
// thread alone (one GPU), per method. Blocks are unregistered and unmapped only after both threads are done, as
// kreplay keeps its staging.
void pair(size_t bytes) {
  std::printf("two threads at once in one process, advised, 4 populate threads each (ms: populate + register)\n");
  enum class one_at_a_time { nothing, populate, reg };
  std::mutex serial;
  for (int round = 0; round < 2; ++round) {
    for (int threads_at_once : {2, 1}) {
      for (one_at_a_time serialize : {one_at_a_time::nothing, one_at_a_time::populate, one_at_a_time::reg}) {
        for (size_t step : {size_t{0}, size_t{32} << 20, kTouch}) {
          if (threads_at_once == 1 && (serialize != one_at_a_time::nothing || step == 0)) continue;
          if (serialize == one_at_a_time::reg && step != kTouch) continue;
          double populate_ms[2] = {0, 0}, register_ms[2] = {0, 0};
          bool registered[2] = {false, false};
          on_fresh_blocks(
              threads_at_once, bytes,
              [&](int t, char* base) {
                (void)madvise(base, bytes, MADV_HUGEPAGE);
                auto start = std::chrono::steady_clock::now();
                {
                  std::unique_lock<std::mutex> lock(serial, std::defer_lock);
                  if (serialize == one_at_a_time::populate) lock.lock();
                  populate(base, bytes, 4, step);
                }
                populate_ms[t] = ms_since(start);
                start = std::chrono::steady_clock::now();
                {
                  std::unique_lock<std::mutex> lock(serial, std::defer_lock);
                  if (serialize == one_at_a_time::reg) lock.lock();
                  registered[t] = cudaHostRegister(base, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped) ==
                                  cudaSuccess;
                }
                register_ms[t] = ms_since(start);
              },
              [&](int t, char* base) {
                if (registered[t]) (void)cudaHostUnregister(base);
              });
          const char* serialized = serialize == one_at_a_time::nothing    ? "nothing"
                                   : serialize == one_at_a_time::populate ? "populate"
                                                                          : "register";
          std::printf("%d at once, one at a time: %-8s, step %-6s: thread 0 %6.1f + %5.1f = %6.1f", threads_at_once,
                      serialized, step == kTouch ? "touch" : step ? "32 MiB" : "slice", populate_ms[0],
                      register_ms[0], populate_ms[0] + register_ms[0]);
          if (threads_at_once == 2) {
            std::printf("; thread 1 %6.1f + %5.1f = %6.1f", populate_ms[1], register_ms[1],
                        populate_ms[1] + register_ms[1]);
          }
          std::printf("%s\n", registered[0] && (threads_at_once < 2 || registered[1]) ? "" : " (a register failed)");
        }
      }
    }
  }
}

// The CUDA adapter's own host_lock (what kreplay calls on a first dispatch), on fresh blocks: two threads at once
// in one process (two GPUs' first dispatches) and one alone; ms per call.
int adapter(size_t bytes) {
  kreplay_device_ops_t ops{};
  if (kreplay::cuda::make_runtime_ops(&ops) != KREPLAY_STATUS_SUCCESS) {
    std::printf("kreplay::cuda::make_runtime_ops failed: %s\n", kreplay::cuda::last_op_error());
    return 1;
  }
  if (ops.host_lock == nullptr) {
    std::printf("the adapter offers no host_lock\n");
    if (ops.release != nullptr) ops.release(ops.user_data);
    return 1;
  }
  std::printf("the adapter's host_lock on fresh blocks (ms per call)\n");
  for (int round = 0; round < 3; ++round) {
    for (int threads_at_once : {2, 1}) {
      double lock_ms[2] = {0, 0};
      bool locked[2] = {false, false};
      const char* why[2] = {"", ""};  // the CUDA error of a failed lock (the adapter keeps it per thread)
      on_fresh_blocks(
          threads_at_once, bytes,
          [&](int t, char* block) {
            const auto start = std::chrono::steady_clock::now();
            locked[t] = ops.host_lock(ops.user_data, block, bytes) == KREPLAY_STATUS_SUCCESS;
            lock_ms[t] = ms_since(start);
            if (!locked[t]) why[t] = kreplay::cuda::last_op_error();
          },
          [&](int t, char* block) {
            if (locked[t]) (void)ops.host_unlock(ops.user_data, block, bytes);
          });
      std::printf("round %d, %d at once: thread 0 %6.1f%s%s", round, threads_at_once, lock_ms[0],
                  locked[0] ? "" : " failed: ", why[0]);
      if (threads_at_once == 2) {
        std::printf(", thread 1 %6.1f%s%s", lock_ms[1], locked[1] ? "" : " failed: ", why[1]);
      }
      std::printf("\n");
    }
  }
  if (ops.release != nullptr) ops.release(ops.user_data);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = (argc > 1 ? std::strtoull(argv[1], nullptr, 0) : (size_t{9} << 27));  // 1.125 GiB
  if (cudaFree(nullptr) != cudaSuccess) {
    std::printf("no CUDA device\n");
    return 1;
  }
  std::printf("host lock bench: %zu bytes per configuration, %u hardware threads\n", bytes,
              std::thread::hardware_concurrency());
  if (argc > 2 && std::string(argv[2]) == "pair") {
    pair(bytes);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "adapter") {
    return adapter(bytes);
  }
  std::printf("%-8s %-8s %-10s %10s %10s %10s %10s\n", "huge", "threads", "flags", "map_ms", "populate", "register",
              "total_ms");
  for (int round = 0; round < 2; ++round) {
    for (bool huge : {false, true}) {
      for (unsigned threads : {0u, 1u, 4u, 8u, 16u}) {
        for (unsigned flags : {unsigned{cudaHostRegisterPortable},
                               unsigned{cudaHostRegisterPortable | cudaHostRegisterMapped}}) {
          auto start = std::chrono::steady_clock::now();
          void* raw = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          if (raw == MAP_FAILED) return 2;
          char* base = static_cast<char*>(raw);
          if (huge) (void)madvise(base, bytes, MADV_HUGEPAGE);
          const double map_ms = ms_since(start);
          start = std::chrono::steady_clock::now();
          if (threads > 0) populate(base, bytes, threads);
          const double populate_ms = ms_since(start);
          start = std::chrono::steady_clock::now();
          const cudaError_t error = cudaHostRegister(base, bytes, flags);
          const double register_ms = ms_since(start);
          std::printf("%-8s %-8u %-10s %10.1f %10.1f %10.1f %10.1f%s\n", huge ? "advise" : "off", threads,
                      (flags & cudaHostRegisterMapped) ? "port|map" : "portable", map_ms, populate_ms, register_ms,
                      map_ms + populate_ms + register_ms, error == cudaSuccess ? "" : " (register failed)");
          if (error == cudaSuccess) (void)cudaHostUnregister(base);
          munmap(base, bytes);
        }
      }
    }
  }
  return 0;
}
