// GPU-free test of the adapters' populate (adapters/common/populate.hpp), which both adapters' host_lock run on a
// fresh staging block before page-locking it: afterwards every page of the block is backed by memory of its own
// (written, not only read: a read maps the shared zero page, which the lock would still have to replace page by
// page), and the contents are unchanged. Sizes under and over the 64 MiB from which it advises huge pages and
// starts threads.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "populate.hpp"
#include "test_util.h"

namespace {

const std::size_t kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));

// Bytes of anonymous memory of its own (the shared zero page is not counted) in the mapping that starts at
// `start`, from /proc/self/smaps; -1 when there is no such mapping.
long long anonymous_bytes(const char* start) {
  std::ifstream smaps("/proc/self/smaps");
  const auto want = reinterpret_cast<std::uintptr_t>(start);
  std::string line;
  bool in = false;
  while (std::getline(smaps, line)) {
    unsigned long long from = 0, to = 0;
    char dash = 0;
    // Mapping lines start "from-to perms ..."; field lines start "Name:".
    if (std::sscanf(line.c_str(), "%llx%c%llx", &from, &dash, &to) == 3 && dash == '-') {
      in = from == want;
    } else if (in && line.rfind("Anonymous:", 0) == 0) {
      return std::atoll(line.c_str() + 10) * 1024;
    }
  }
  return -1;
}

// A fresh private mapping of `bytes` between two inaccessible pages, so that it is a mapping of its own in smaps.
char* map_block(std::size_t bytes) {
  void* all = mmap(nullptr, bytes + 2 * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (all == MAP_FAILED) {
    return nullptr;
  }
  char* base = static_cast<char*>(all) + kPage;
  if (mprotect(base, bytes, PROT_READ | PROT_WRITE) != 0) {
    munmap(all, bytes + 2 * kPage);
    return nullptr;
  }
  return base;
}

void unmap_block(char* base, std::size_t bytes) { munmap(base - kPage, bytes + 2 * kPage); }

// The measure can tell a write from a read: reading every page of a fresh block leaves it with no memory of
// its own (were it not so, the checks below could not fail).
void a_read_maps_nothing_of_its_own() {
  const std::size_t bytes = std::size_t{4} << 20;
  char* base = map_block(bytes);
  CHECK(base != nullptr);
  unsigned sum = 0;
  for (std::size_t at = 0; at < bytes; at += kPage) {
    sum += static_cast<unsigned char>(*static_cast<volatile char*>(base + at));
  }
  CHECK(sum == 0);
  CHECK(anonymous_bytes(base) == 0);
  unmap_block(base, bytes);
}

void populate_writes_every_page_and_keeps_contents(std::size_t bytes) {
  char* base = map_block(bytes);
  CHECK(base != nullptr);
  CHECK(anonymous_bytes(base) == 0);
  // Some pages already written: the first, one in the middle, the last (its last byte).
  const std::size_t marks[] = {0, (bytes / kPage / 2) * kPage + 17, bytes - 1};
  for (std::size_t at : marks) base[at] = static_cast<char>(0x5A);
  kreplay::adapter::populate(base, bytes);
  CHECK_EQ(bytes, anonymous_bytes(base));
  for (std::size_t at = 0; at < bytes; at += kPage) {
    const bool marked = at == 0 || at == marks[1] - 17 || at + kPage >= bytes;
    if (!marked) CHECK(base[at] == 0);
  }
  for (std::size_t at : marks) CHECK(base[at] == static_cast<char>(0x5A));
  unmap_block(base, bytes);
  std::printf("populate of %zu bytes: every page written, contents kept\n", bytes);
}

}  // namespace

int main() {
  a_read_maps_nothing_of_its_own();
  kreplay::adapter::populate(nullptr, 4096);  // nothing to do, and no crash
  populate_writes_every_page_and_keeps_contents(kPage);
  populate_writes_every_page_and_keeps_contents(std::size_t{3} << 20);
  // Threads and huge-page advice, and a last slice shorter than the others.
  populate_writes_every_page_and_keeps_contents((std::size_t{200} << 20) + 3 * kPage);
  std::printf("all populate checks passed\n");
  return 0;
}
