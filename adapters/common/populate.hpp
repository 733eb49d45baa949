// Populating a staging block before it is page-locked, shared by the CUDA and HSA adapters' host_lock (private
// to the adapters: header-only, never installed; namespace kreplay::adapter, CMake target kreplay_adapter_common).
//
// kreplay page-locks each staging block once, fresh from mmap. Left to itself the lock (cudaHostRegister,
// hsa_amd_memory_lock) faults the pages in one by one, which is most of a first dispatch's staging time. Measured
// on the H200 machine (Linux 6.18) for 1.125 GiB, the block kreplay maps for 1 GiB (kreplay_host_lock_bench,
// c-tests/cuda/bench/bench_host_lock.cu; docs/performance.md "First dispatch, step by step"):
//   - cudaHostRegister alone: 336-472 ms; populated first on one thread: 323-495 ms in all;
//   - transparent huge pages advised and 4 threads populating: 77-92 ms in all (8 or 16 threads: 124-194 ms);
//   - two blocks at once from two threads of one process (two GPUs): 94-130 ms each when the populate touches
//     every page, against 158-195 ms with MADV_POPULATE_WRITE in 32 MiB steps at once and 124-188 ms with it one
//     block at a time. MADV_POPULATE_WRITE holds the process's mmap lock for each step, while a page fault (Linux
//     6.4 and later) locks only the mapping it faults in, so touching scales where the madvise queues.
// Hence: large blocks get the huge-page advice and are touched by up to four threads.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace kreplay::adapter {

// Faults [start, start + bytes) in, writable, without changing its contents: one write of "or 0" into one byte
// of every page, a write fault each (one per 2 MiB where a transparent huge page backs it). The write is atomic,
// so a byte written meanwhile by someone else keeps its value.
inline void touch_pages(char* start, std::size_t bytes, std::size_t page) noexcept {
  for (std::size_t at = 0; at < bytes; at += page) {
    char* byte = start + at;
#if defined(__x86_64__) || defined(__i386__)
    // In assembly: a compiler may turn an atomic "or 0" whose result is unused into a fence with no store at all
    // (LLVM does on x86), which would leave the pages to the lock's own faults.
    __asm__ __volatile__("lock orb $0, %0" : "+m"(*byte) : : "memory");
#else
    // Through a volatile pointer, which the compiler keeps as written.
    (void)__atomic_fetch_or(static_cast<volatile char*>(byte), 0, __ATOMIC_RELAXED);
#endif
  }
}

// Populates a block about to be page-locked (page-aligned, as kreplay's staging is; an unaligned one is populated
// but for its last page, which the lock then faults in itself). Never fails: advice the kernel refuses, or a
// thread that cannot be started, only makes the lock slower.
inline void populate(void* block, std::size_t bytes) noexcept {
  constexpr std::size_t min_slice = std::size_t{64} << 20;
  constexpr std::size_t max_threads = 4;
  const long raw_page = sysconf(_SC_PAGESIZE);
  const std::size_t page = raw_page > 0 ? static_cast<std::size_t>(raw_page) : 4096;
  char* base = static_cast<char*>(block);
  if (base == nullptr || bytes == 0) {
    return;
  }
  if (bytes >= min_slice) {
    // Advice only: a kernel without transparent huge pages refuses it, and nothing else changes.
    (void)madvise(base, bytes, MADV_HUGEPAGE);
  }
  const std::size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t threads = std::min({hardware, max_threads, bytes / min_slice});
  if (threads <= 1) {
    touch_pages(base, bytes, page);
    return;
  }
  const std::size_t slice = (bytes / threads + page - 1) / page * page;
  std::vector<std::thread> workers;
  try {
    workers.reserve(threads);
    for (std::size_t at = slice; at < bytes; at += slice) {
      workers.emplace_back(touch_pages, base + at, std::min(slice, bytes - at), page);
    }
  } catch (const std::exception&) {
    // No thread (or no memory for one): the slices without one are done below, on this thread.
  }
  touch_pages(base, std::min(slice, bytes), page);
  for (std::thread& worker : workers) {
    worker.join();
  }
  for (std::size_t at = slice * (workers.size() + 1); at < bytes; at += slice) {
    touch_pages(base + at, std::min(slice, bytes - at), page);
  }
}

}  // namespace kreplay::adapter
