// kreplay_demo: one kernel-replay workload run in each of kreplay's modes on the simulated device, side by side.
//
// It plays the part of a profiler that replays every dispatch several times to collect more counters than one
// pass can. An application allocates a footprint of device memory (through wrappers that report each
// allocation to kreplay, as a host's HSA interception would) and defines module-scope variables. Each dispatch
// is replayed in passes: a snapshot before the first, a restore before each later one. The "kernel" of a pass
// first reads its whole footprint (a checksum) and then rewrites a fraction of its 64 KiB blocks at random, so
// a missed or partial restore shows up as a checksum that differs from the one of the captured state.
//
// The same workload runs in every mode (host tier with full copies or dirty-only, device tier whole or
// spilled, version-1 ops), and a table compares what a dispatch cost and how many bytes it moved in each.
//
// Exit status: 0 when every pass of every replayed dispatch read exactly the captured state, the byte counts
// agree with kreplay's reports and nothing was left held after a trim; 1 when a check failed; 2 for bad
// command-line arguments.

#include "kreplay.h"
#include "kreplay_sim.h"
#include "kreplay.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr std::size_t kBlockBytes = 64u << 10;  // the kernel's write unit, and kreplay's default digest block

// One way of running kreplay, as a host would set it up: which ops it hands in and which policy it sets.
struct Mode {
  const char* key;    // for --modes
  const char* label;  // for the table
  bool copy_batch;
  bool device_ops;  // device_alloc and device_free
  bool digest;
  bool dirty_only;
  int budget_halves;  // device_budget_bytes in halves of the captured footprint: 0 (host only), 1 or 2
};

constexpr Mode kModes[] = {
    {"host-full", "host tier, full copies", true, true, true, false, 0},
    {"host-dirty", "host tier, dirty-only", true, true, true, true, 0},
    {"device", "device tier, full copies", true, true, true, false, 2},
    {"device-dirty", "device tier, dirty-only", true, true, true, true, 2},
    {"spill", "spill (budget = half)", true, true, true, false, 1},
    {"v1", "version-1 ops (no batches)", false, false, false, false, 0},
};
constexpr std::size_t kModeCount = sizeof kModes / sizeof kModes[0];

struct Options {
  std::size_t footprint_mib = 256;
  std::size_t regions = 200;
  std::size_t dispatches = 3;
  std::size_t passes = 5;
  double write_percent = 1.0;
  std::vector<std::size_t> modes;  // indices into kModes; empty: all
  bool pin = true;
  std::size_t max_snapshot_mib = 0;
  bool verbose = false;
  bool skip_restores = false;
  bool blind_digest = false;
};

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: kreplay_demo [options]\n"
               "\n"
               "Replays one workload in each of kreplay's modes on the simulated device and compares them: each\n"
               "dispatch is snapshotted, its kernel runs once per pass with a restore in between, and every pass\n"
               "must read exactly the captured state.\n"
               "\n"
               "  --footprint-mib N      tracked device memory to allocate (default 256)\n"
               "  --regions N            tracked allocations it is split into (default 200)\n"
               "  --dispatches N         dispatches to replay in each mode (default 3)\n"
               "  --passes N             passes per dispatch: 1 snapshot + N-1 restores (default 5)\n"
               "  --write-percent P      share of the 64 KiB blocks each pass rewrites, 0 to 100 (default 1)\n"
               "  --modes A,B,...        modes to run, in this order (default all):\n"
               "                         host-full, host-dirty, device, device-dirty, spill, v1\n"
               "  --pin / --no-pin       page-lock retained staging (default --pin)\n"
               "  --max-snapshot-mib N   decline snapshots above N MiB of host memory (default 0: no limit)\n"
               "  --verbose              also print each dispatch and kreplay's INFO lines\n"
               "  --skip-restores        self-test: run the passes without restoring, so the check must fail\n"
               "  --blind-digest         self-test: the digest cannot tell blocks apart, so dirty-only restores\n"
               "                         write nothing and the check must fail\n"
               "  --help                 this text\n");
}

bool parse_size(const char* text, std::size_t* out) {
  if (text == nullptr || *text == '\0' || *text == '-') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = static_cast<std::size_t>(value);
  return true;
}

bool parse_percent(const char* text, double* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text, &end);
  if (errno != 0 || *end != '\0' || !(value >= 0.0 && value <= 100.0)) return false;
  *out = value;
  return true;
}

bool parse_modes(const std::string& text, std::vector<std::size_t>* out) {
  out->clear();
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string key = text.substr(start, comma - start);
    std::size_t found = kModeCount;
    for (std::size_t m = 0; m < kModeCount; ++m) {
      if (key == kModes[m].key) found = m;
    }
    if (found == kModeCount) {
      std::fprintf(stderr, "kreplay_demo: unknown mode '%s'\n", key.c_str());
      return false;
    }
    // A mode named twice runs once: the table has one row per mode.
    if (std::find(out->begin(), out->end(), found) == out->end()) out->push_back(found);
    start = comma + 1;
  }
  return !out->empty();
}

// Returns 0 to run, 1 when --help was asked for, 2 on a bad argument.
int parse_options(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::size_t* target = nullptr;
    if (arg == "--help" || arg == "-h") {
      usage(stdout);
      return 1;
    } else if (arg == "--pin") {
      options->pin = true;
      continue;
    } else if (arg == "--no-pin") {
      options->pin = false;
      continue;
    } else if (arg == "--verbose" || arg == "-v") {
      options->verbose = true;
      continue;
    } else if (arg == "--skip-restores") {
      options->skip_restores = true;
      continue;
    } else if (arg == "--blind-digest") {
      options->blind_digest = true;
      continue;
    } else if (arg == "--write-percent") {
      if (i + 1 >= argc || !parse_percent(argv[i + 1], &options->write_percent)) {
        std::fprintf(stderr, "kreplay_demo: --write-percent needs a number from 0 to 100\n");
        return 2;
      }
      ++i;
      continue;
    } else if (arg == "--modes") {
      if (i + 1 >= argc || !parse_modes(argv[i + 1], &options->modes)) {
        std::fprintf(stderr, "kreplay_demo: --modes needs a comma-separated list of modes (see --help)\n");
        return 2;
      }
      ++i;
      continue;
    } else if (arg == "--footprint-mib") {
      target = &options->footprint_mib;
    } else if (arg == "--regions") {
      target = &options->regions;
    } else if (arg == "--dispatches") {
      target = &options->dispatches;
    } else if (arg == "--passes") {
      target = &options->passes;
    } else if (arg == "--max-snapshot-mib") {
      target = &options->max_snapshot_mib;
    } else {
      std::fprintf(stderr, "kreplay_demo: unknown argument '%s'\n\n", arg.c_str());
      usage(stderr);
      return 2;
    }
    if (i + 1 >= argc || !parse_size(argv[i + 1], target)) {
      std::fprintf(stderr, "kreplay_demo: %s needs a non-negative whole number\n", arg.c_str());
      return 2;
    }
    ++i;
  }
  if (options->footprint_mib == 0 || options->footprint_mib > (8u << 10)) {
    std::fprintf(stderr, "kreplay_demo: --footprint-mib must be in [1, 8192]\n");
    return 2;
  }
  if (options->regions < 2 || options->regions > 60000) {
    std::fprintf(stderr, "kreplay_demo: --regions must be in [2, 60000]\n");
    return 2;
  }
  if (options->regions > options->footprint_mib * (1u << 20) / 8) {
    std::fprintf(stderr, "kreplay_demo: --regions is too many for the footprint (at least 8 bytes each)\n");
    return 2;
  }
  if (options->max_snapshot_mib > (std::size_t{1} << 40)) {
    std::fprintf(stderr, "kreplay_demo: --max-snapshot-mib must be at most 2^40\n");
    return 2;
  }
  if (options->dispatches == 0 || options->dispatches > 1000 || options->passes < 2 || options->passes > 1000) {
    std::fprintf(stderr, "kreplay_demo: --dispatches must be in [1, 1000] and --passes in [2, 1000]\n");
    return 2;
  }
  if (options->modes.empty()) {
    for (std::size_t m = 0; m < kModeCount; ++m) options->modes.push_back(m);
  }
  return 0;
}

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// A progress line on stderr, only once a run has taken more than a second, and at most once a second: short
// runs print nothing extra. On a terminal it rewrites one line.
class Progress {
 public:
  Progress() : start_(now_s()), last_(start_), tty_(isatty(STDERR_FILENO) != 0) {}

  void update(const char* format, ...) __attribute__((format(printf, 2, 3))) {
    const double now = now_s();
    if (now - start_ < 1.0 || now - last_ < 1.0) return;
    last_ = now;
    char text[160];
    va_list args;
    va_start(args, format);
    std::vsnprintf(text, sizeof text, format, args);
    va_end(args);
    std::fprintf(stderr, tty_ ? "\r[%5.1f s] %-80s" : "[%5.1f s] %s\n", now - start_, text);
    shown_ = true;
  }

  // Clears a pending carriage-return line before normal output.
  void clear() {
    if (shown_ && tty_) std::fprintf(stderr, "\r%-92s\r", "");
    shown_ = false;
  }

 private:
  double start_;
  double last_;
  bool tty_;
  bool shown_ = false;
};

struct LogContext {
  std::size_t warnings = 0;
  std::size_t errors = 0;
  Progress* progress = nullptr;
  bool verbose = false;  // print every INFO line, not only the replay windows' outcome lines
};

extern "C" void demo_log(void* user_data, kreplay_log_level_t level, const char* message, std::size_t length) {
  auto* context = static_cast<LogContext*>(user_data);
  const char* tag = "trace";
  switch (level) {
    case KREPLAY_LOG_ERROR:
      ++context->errors;
      tag = "error";
      break;
    case KREPLAY_LOG_WARNING:
      ++context->warnings;
      tag = "warning";
      break;
    case KREPLAY_LOG_INFO:
      tag = "info";
      // One outcome line per replayed dispatch (its replay window), on stdout; other INFO lines only when verbose.
      if (std::strncmp(message, "kreplay window ", 15) == 0) {
        if (context->progress != nullptr) context->progress->clear();
        std::printf("  %.*s\n", static_cast<int>(length), message);
        return;
      }
      if (!context->verbose) return;
      break;
    case KREPLAY_LOG_TRACE:
      break;
  }
  if (context->progress != nullptr) context->progress->clear();
  std::fprintf(stderr, "  [kreplay %s] %.*s\n", tag, static_cast<int>(length), message);
}

bool check(kreplay_status_t status, const char* what) {
  if (status == KREPLAY_STATUS_SUCCESS) return true;
  std::fprintf(stderr, "kreplay_demo: %s failed: %s\n", what, kreplay_status_string(status));
  return false;
}

std::string describe_size(std::size_t bytes);

const char* plural(std::size_t count) { return count == 1 ? "" : "s"; }

// A MiB figure of the table in words: small amounts in their own unit, so that "0.0 MiB" never hides bytes.
std::string describe_mib(double mib) {
  if (mib == 0.0) return "none";
  if (mib < 0.1) return describe_size(static_cast<std::size_t>(std::llround(mib * kMiB)));
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", mib);
  return text;
}

std::string describe_size(std::size_t bytes) {
  char text[32];
  if (bytes >= (1u << 20)) {
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / kMiB);
  } else if (bytes >= 1024) {
    std::snprintf(text, sizeof text, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  } else {
    std::snprintf(text, sizeof text, "%zu B", bytes);
  }
  return text;
}

// ---------------------------------------------------------------------------------------------------------
// The ops the demo hands to kreplay: the simulated device's own, with every copy counted by direction on the
// way through. The simulated device counts copied bytes but not where they went; the table needs host<->device
// and device<->device apart, and the device-to-device share is what the device tier is for.

struct CopyCounts {
  std::size_t host_device = 0;    // either way across the (simulated) link
  std::size_t device_device = 0;  // within device memory: device-tier storage
  std::size_t host_host = 0;      // never expected: both ends in host memory
  std::size_t to_device = 0;      // of the above, bytes written into device memory (restores)
  std::size_t total() const { return host_device + device_device + host_host; }
};

CopyCounts operator-(const CopyCounts& a, const CopyCounts& b) {
  CopyCounts d;
  d.host_device = a.host_device - b.host_device;
  d.device_device = a.device_device - b.device_device;
  d.host_host = a.host_host - b.host_host;
  d.to_device = a.to_device - b.to_device;
  return d;
}

CopyCounts operator+(const CopyCounts& a, const CopyCounts& b) {
  CopyCounts s;
  s.host_device = a.host_device + b.host_device;
  s.device_device = a.device_device + b.device_device;
  s.host_host = a.host_host + b.host_host;
  s.to_device = a.to_device + b.to_device;
  return s;
}

class CopyTap {
 public:
  // Device memory: the application's regions and module variables (added by the demo) and kreplay's device
  // storage (added by device_alloc below). Everything else a copy touches is host staging.
  void add_device_range(const void* base, std::size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    device_[reinterpret_cast<std::uintptr_t>(base)] = size;
  }
  void remove_device_range(const void* base) {
    std::lock_guard<std::mutex> lock(mutex_);
    device_.erase(reinterpret_cast<std::uintptr_t>(base));
  }

  // Wraps `inner` (the simulated device's ops) into `out`, which kreplay_configure takes. Sets installed earlier
  // call the new `inner` from then on: the demo trims all storage before it installs the next set, so none of
  // them is called again.
  void wrap(const kreplay_device_ops_t& inner, kreplay_device_ops_t* out) {
    inner_ = inner;
    *out = kreplay_device_ops_t{};
    out->struct_size = sizeof *out;
    out->user_data = this;
    out->copy = &tap_copy;
    out->pointer_info = &tap_pointer_info;
    out->iterate_module_variables = &tap_iterate_module_variables;
    if (inner.host_lock != nullptr && inner.host_unlock != nullptr) {
      out->host_lock = &tap_host_lock;
      out->host_unlock = &tap_host_unlock;
    }
    if (inner.copy_batch != nullptr) out->copy_batch = &tap_copy_batch;
    if (inner.device_alloc != nullptr && inner.device_free != nullptr) {
      out->device_alloc = &tap_device_alloc;
      out->device_free = &tap_device_free;
    }
    if (inner.digest != nullptr) out->digest = &tap_digest;
  }

  CopyCounts counts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return counts_;
  }

 private:
  bool is_device(const void* address) const {
    const auto a = reinterpret_cast<std::uintptr_t>(address);
    auto it = device_.upper_bound(a);
    if (it == device_.begin()) return false;
    --it;
    return a - it->first < it->second;
  }

  void count(const void* dst, const void* src, std::size_t bytes) {
    const bool dst_device = is_device(dst);
    const bool src_device = is_device(src);
    if (dst_device && src_device) {
      counts_.device_device += bytes;
    } else if (dst_device || src_device) {
      counts_.host_device += bytes;
    } else {
      counts_.host_host += bytes;
    }
    if (dst_device) counts_.to_device += bytes;
  }

  static CopyTap* self(void* user_data) { return static_cast<CopyTap*>(user_data); }

  static kreplay_status_t tap_copy(void* user_data, void* dst, const void* src, std::size_t bytes) {
    CopyTap* tap = self(user_data);
    const kreplay_status_t status = tap->inner_.copy(tap->inner_.user_data, dst, src, bytes);
    if (status == KREPLAY_STATUS_SUCCESS) {
      std::lock_guard<std::mutex> lock(tap->mutex_);
      tap->count(dst, src, bytes);
    }
    return status;
  }
  static kreplay_status_t tap_copy_batch(void* user_data, kreplay_agent_t agent, const kreplay_copy_t* copies,
                                         std::size_t count) {
    CopyTap* tap = self(user_data);
    const kreplay_status_t status = tap->inner_.copy_batch(tap->inner_.user_data, agent, copies, count);
    // A failed batch is redone copy by copy through tap_copy, which counts those; the demo injects no faults.
    if (status == KREPLAY_STATUS_SUCCESS) {
      std::lock_guard<std::mutex> lock(tap->mutex_);
      for (std::size_t i = 0; i < count; ++i) tap->count(copies[i].dst, copies[i].src, copies[i].bytes);
    }
    return status;
  }
  static kreplay_status_t tap_pointer_info(void* user_data, const void* ptr, kreplay_pointer_info_t* info) {
    CopyTap* tap = self(user_data);
    return tap->inner_.pointer_info(tap->inner_.user_data, ptr, info);
  }
  static kreplay_status_t tap_iterate_module_variables(void* user_data, kreplay_agent_t agent,
                                                       kreplay_module_variable_visitor_t visit, void* visit_data) {
    CopyTap* tap = self(user_data);
    return tap->inner_.iterate_module_variables(tap->inner_.user_data, agent, visit, visit_data);
  }
  static kreplay_status_t tap_host_lock(void* user_data, void* ptr, std::size_t bytes) {
    CopyTap* tap = self(user_data);
    return tap->inner_.host_lock(tap->inner_.user_data, ptr, bytes);
  }
  static kreplay_status_t tap_host_unlock(void* user_data, void* ptr, std::size_t bytes) {
    CopyTap* tap = self(user_data);
    return tap->inner_.host_unlock(tap->inner_.user_data, ptr, bytes);
  }
  static kreplay_status_t tap_device_alloc(void* user_data, kreplay_agent_t agent, std::size_t bytes,
                                           void** ptr_out) {
    CopyTap* tap = self(user_data);
    const kreplay_status_t status = tap->inner_.device_alloc(tap->inner_.user_data, agent, bytes, ptr_out);
    if (status == KREPLAY_STATUS_SUCCESS) tap->add_device_range(*ptr_out, bytes);
    return status;
  }
  static kreplay_status_t tap_device_free(void* user_data, kreplay_agent_t agent, void* ptr, std::size_t bytes) {
    CopyTap* tap = self(user_data);
    tap->remove_device_range(ptr);
    return tap->inner_.device_free(tap->inner_.user_data, agent, ptr, bytes);
  }
  static kreplay_status_t tap_digest(void* user_data, kreplay_agent_t agent, const kreplay_digest_job_t* jobs,
                                     std::size_t count, std::size_t block_bytes) {
    CopyTap* tap = self(user_data);
    return tap->inner_.digest(tap->inner_.user_data, agent, jobs, count, block_bytes);
  }

  std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> device_;
  CopyCounts counts_;
  kreplay_device_ops_t inner_{};
};

// ---------------------------------------------------------------------------------------------------------
// The application: its allocations, module variables and kernel.

// A device allocation as the application sees it.
struct Allocation {
  unsigned char* ptr = nullptr;
  std::size_t size = 0;
};

// The host's allocate and free wrappers: the runtime call first, then the record (allocate), or the record
// first, then the runtime call (free), so that no restore can write into memory already given back.
class Device {
 public:
  Device(kreplay_agent_t agent, CopyTap* tap) : agent_(agent), tap_(tap) {}

  bool allocate(std::size_t size, kreplay_pointer_type_t type, uint32_t global_flags, uint32_t alloc_flags,
                Allocation* out) {
    void* ptr = nullptr;
    if (!check(kreplay_sim_alloc(agent_, size, type, global_flags, &ptr), "kreplay_sim_alloc")) return false;
    if (!check(kreplay_record_alloc(ptr, size, alloc_flags), "kreplay_record_alloc")) return false;
    tap_->add_device_range(ptr, size);
    *out = Allocation{static_cast<unsigned char*>(ptr), size};
    return true;
  }

  bool allocate_tracked(std::size_t size, Allocation* out) {
    return allocate(size, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, 0, out);
  }

  bool release(const Allocation& allocation) {
    if (!check(kreplay_record_free(allocation.ptr), "kreplay_record_free")) return false;
    tap_->remove_device_range(allocation.ptr);
    return check(kreplay_sim_free(allocation.ptr), "kreplay_sim_free");
  }

  // Memory that a snapshot must leave alone; record_free still sees it, as it would on a real host.
  bool release_untracked(const Allocation& allocation) {
    const kreplay_status_t status = kreplay_record_free(allocation.ptr);
    if (status != KREPLAY_STATUS_NOT_FOUND) {
      std::fprintf(stderr, "kreplay_demo: untracked memory at %p was tracked (record_free: %s)\n",
                   static_cast<void*>(allocation.ptr), kreplay_status_string(status));
      return false;
    }
    tap_->remove_device_range(allocation.ptr);
    return check(kreplay_sim_free(allocation.ptr), "kreplay_sim_free");
  }

 private:
  kreplay_agent_t agent_;
  CopyTap* tap_;
};

struct ModuleVariable {
  std::string name;
  unsigned char* ptr = nullptr;
  std::size_t size = 0;
  bool is_constant = false;
  bool captured = true;  // false for the __hip_cuid_ marker, which kreplay skips
};

// Sizes from a few bytes up: the largest region holds half the footprint (the "model"), the rest follow a
// log-uniform spread whose upper end is chosen so that everything adds up to the footprint exactly.
std::vector<std::size_t> footprint_sizes(std::size_t footprint, std::size_t count, std::mt19937_64& rng) {
  const std::size_t big = footprint / 2;
  const std::size_t rest = footprint - big;
  const std::size_t others = count - 1;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> quantiles(others);
  for (double& q : quantiles) q = unit(rng);
  const double low = 4.0;
  auto sizes_for = [&](double high, std::vector<std::size_t>* out) {
    std::size_t total = 0;
    out->clear();
    for (double q : quantiles) {
      const auto size = static_cast<std::size_t>(std::max(1.0, low * std::pow(high / low, q)));
      out->push_back(size);
      total += size;
    }
    return total;
  };
  // The total grows with the upper end: bisect for the largest one that still fits.
  double lo = low;
  double hi = static_cast<double>(rest);
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 100; ++i) {
    const double mid = std::sqrt(lo * hi);
    if (sizes_for(mid, &sizes) <= rest) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  std::size_t total = sizes_for(lo, &sizes);
  if (total > rest) {
    // Every region at its 1-byte floor still overflows: shave the big one instead.
    sizes.insert(sizes.begin(), footprint - std::min(footprint - 1, total));
  } else {
    sizes.insert(sizes.begin(), big + (rest - total));
  }
  return sizes;
}

void fill(unsigned char* data, std::size_t size, uint64_t seed) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::memcpy(data + i, &state, 8);
  }
  for (; i < size; ++i) data[i] = static_cast<unsigned char>(seed + i);
}

// A position-dependent checksum of a range (Fletcher-style running sums in four lanes, so that the compiler
// can vectorise it and a pass's read runs near memory speed).
uint64_t checksum(const unsigned char* data, std::size_t size) {
  uint64_t s[4] = {0, 0, 0, 0};
  uint64_t t[4] = {0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    uint64_t w[4];
    std::memcpy(w, data + i, 32);
    for (int k = 0; k < 4; ++k) {
      s[k] += w[k];
      t[k] += s[k];
    }
  }
  uint64_t tail = 0;
  for (; i < size; ++i) tail = tail * 131 + data[i] + 1;
  uint64_t hash = size;
  for (int k = 0; k < 4; ++k) hash = (hash ^ s[k]) * 0xff51afd7ed558ccdull ^ t[k];
  return (hash ^ tail) * 0xc4ceb9fe1a85ec53ull;
}

// Rewrites a block so that it differs from what it held: one step of a full-period generator per word.
void rewrite(unsigned char* data, std::size_t size) {
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, data + i, 8);
    word = word * 6364136223846793005ull + 1442695040888963407ull;
    std::memcpy(data + i, &word, 8);
  }
  for (; i < size; ++i) data[i] = static_cast<unsigned char>(data[i] * 5u + 1u);
}

uint64_t mix(uint64_t hash, uint64_t value) {
  hash ^= value + 0x9E3779B97F4A7C15ull + (hash << 6) + (hash >> 2);
  return hash;
}

struct Range {
  unsigned char* ptr;
  std::size_t size;
};

// What the kernel reads and writes: every tracked region and captured module variable (it reads __constant__
// tables and never writes them), and a fine-grained launch counter that kreplay must never roll back.
class Kernel {
 public:
  Kernel(std::vector<Range> reads, const std::vector<Range>& writes, uint64_t* launch_counter)
      : reads_(std::move(reads)), launch_counter_(launch_counter) {
    for (const Range& range : writes) {
      for (std::size_t offset = 0; offset < range.size; offset += kBlockBytes)
        blocks_.push_back({range.ptr + offset, std::min(kBlockBytes, range.size - offset)});
    }
    restart();
  }

  // Makes the next draws, from a generator seeded alike, pick the same blocks as after the previous restart.
  void restart() {
    order_.resize(blocks_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = i;
  }

  std::size_t blocks() const { return blocks_.size(); }

  // The checksum of everything the kernel reads: what a pass computes from its inputs.
  uint64_t read() const {
    uint64_t hash = 0;
    for (const Range& range : reads_) hash = mix(hash, checksum(range.ptr, range.size));
    return hash;
  }

  // Rewrites `count` distinct blocks drawn at random (a partial shuffle).
  void write(std::size_t count, std::mt19937_64& rng) {
    count = std::min(count, blocks_.size());
    for (std::size_t i = 0; i < count; ++i) {
      std::uniform_int_distribution<std::size_t> pick(i, blocks_.size() - 1);
      std::swap(order_[i], order_[pick(rng)]);
      rewrite(blocks_[order_[i]].ptr, blocks_[order_[i]].size);
    }
    ++*launch_counter_;
  }

  uint64_t launches() const { return *launch_counter_; }

 private:
  std::vector<Range> reads_;
  std::vector<Range> blocks_;
  std::vector<std::size_t> order_;
  uint64_t* launch_counter_;
};

// ---------------------------------------------------------------------------------------------------------
// One mode's run and its figures.

struct ModeFigures {
  std::size_t replayed = 0;   // dispatches replayed
  std::size_t declined = 0;   // dispatches whose snapshot was declined (run once)
  std::size_t passes = 0;     // passes verified
  double first_s = 0;         // the first dispatch's snapshot + restores
  double steady_s = 0;        // the later dispatches' snapshots + restores, summed
  std::size_t steady = 0;     // how many later dispatches
  CopyCounts steady_bytes;    // bytes moved by the later dispatches, summed
  CopyCounts first_bytes;     // bytes moved by the first dispatch
  std::size_t device_held = 0;  // most device storage held while a snapshot was live
  std::size_t host_held = 0;    // most host staging mapped while a snapshot was live
  std::size_t first_calls = 0;   // copy, copy_batch and digest calls of the first dispatch
  std::size_t steady_calls = 0;  // of the later dispatches, summed

  double per_dispatch_ms() const {
    if (steady > 0) return steady_s * 1e3 / static_cast<double>(steady);
    return first_s * 1e3;
  }
  double calls_per_dispatch() const {
    if (steady > 0) return static_cast<double>(steady_calls) / static_cast<double>(steady);
    return static_cast<double>(first_calls);
  }
  double mib_per_dispatch(std::size_t CopyCounts::*field) const {
    if (steady > 0) return static_cast<double>(steady_bytes.*field) / kMiB / static_cast<double>(steady);
    return static_cast<double>(first_bytes.*field) / kMiB;
  }
};

struct Context {
  const Options* options;
  kreplay_agent_t agent;
  Kernel* kernel;
  CopyTap* tap;
  Progress* progress;
  std::size_t captured_bytes;  // regions and captured module variables
  std::size_t regions;
  std::size_t module_variables;
};

kreplay_sim_counters_t sim_counters() {
  kreplay_sim_counters_t counters{};
  kreplay_sim_counters(&counters);
  return counters;
}

std::size_t host_mapped_bytes() {
  kreplay_host_memory_stats_t stats{};
  kreplay_host_memory_stats(&stats);
  return stats.mapped_bytes;
}

// Runs the dispatches of one mode; false when a check failed (it printed why).
bool run_mode(const Context& context, const Mode& mode, std::size_t index, std::size_t count, ModeFigures* out) {
  const Options& options = *context.options;
  const kreplay_agent_t agent = context.agent;
  ModeFigures& figures = *out;

  // The ops a host with this device would hand in, and the policy it would set.
  kreplay_sim_options_t sim{};
  sim.copy_batch = mode.copy_batch;
  sim.device_alloc = mode.device_ops;
  sim.digest = mode.digest;
  sim.constant_digest = options.blind_digest;
  kreplay_sim_set_options(&sim);
  kreplay_device_ops_t sim_ops{};
  if (!check(kreplay_sim_device_ops(&sim_ops), "kreplay_sim_device_ops")) return false;
  kreplay_device_ops_t ops{};
  context.tap->wrap(sim_ops, &ops);
  if (!check(kreplay_configure(&ops), "kreplay_configure")) return false;
  const std::size_t budget =
      mode.budget_halves == 2 ? context.captured_bytes : context.captured_bytes / 2 * (mode.budget_halves == 1 ? 1 : 0);
  const kreplay_status_t policy = kreplay::policy_t()
                                      .pin_staging(options.pin)
                                      .max_snapshot_bytes(options.max_snapshot_mib << 20)
                                      .device_budget_bytes(budget)
                                      .dirty_only(mode.dirty_only)
                                      .apply();
  if (!check(policy, "kreplay_set_policy")) return false;

  // The same blocks are written in every mode, so that the modes do the same work.
  std::mt19937_64 rng(0x6b7265706c6179ull);
  context.kernel->restart();
  const auto writes = static_cast<std::size_t>(
      std::llround(static_cast<double>(context.kernel->blocks()) * options.write_percent / 100.0));

  for (std::size_t d = 0; d < options.dispatches; ++d) {
    context.progress->update("mode %zu of %zu (%s): dispatch %zu of %zu, snapshot", index + 1, count, mode.label,
                             d + 1, options.dispatches);
    const uint64_t launches_before = context.kernel->launches();
    const CopyCounts tap_before = context.tap->counts();
    const kreplay_sim_counters_t sim_before = sim_counters();
    // One packet holding one kernel dispatch, outside any graph launch: the gate lets it be replayed.
    const bool gate = kreplay_replay_gate(1, 1, false) == KREPLAY_GATE_REPLAY;
    double spent_s = 0;
    double start = now_s();
    // The replay window: async copies of the agent are fenced from here to its close, and it ends in one outcome
    // line (printed by demo_log).
    kreplay::window_t window = gate ? kreplay::window_t::open(agent, static_cast<std::uint32_t>(options.passes))
                                    : kreplay::window_t{};
    kreplay::device_snapshot_t snapshot = window.is_open() ? kreplay::snap(agent) : kreplay::device_snapshot_t{};
    spent_s += now_s() - start;
    if (!snapshot.ok) {
      context.progress->clear();
      const kreplay_decline_reason_t reason = window.is_open() ? snapshot.reason : window.reason();
      std::printf("  %-28s dispatch %zu: snapshot declined (%s): runs once, unreplayed\n", mode.label, d + 1,
                  gate ? kreplay_decline_reason_string(reason) : "the gate said no");
      ++figures.declined;
      (void)context.kernel->read();
      context.kernel->write(writes, rng);
      continue;
    }
    kreplay_snapshot_info_t info{};
    if (!check(kreplay_snapshot_info(snapshot.get(), &info), "kreplay_snapshot_info")) return false;
    if (info.regions != context.regions || info.module_variables != context.module_variables ||
        info.bytes != context.captured_bytes) {
      std::fprintf(stderr, "kreplay_demo: %s dispatch %zu captured %zu regions, %zu module variables, %zu bytes; "
                           "expected %zu, %zu and %zu\n",
                   mode.label, d + 1, info.regions, info.module_variables, info.bytes, context.regions,
                   context.module_variables, context.captured_bytes);
      return false;
    }
    const CopyCounts captured_moved = context.tap->counts() - tap_before;
    if (captured_moved.total() != info.copied_bytes || captured_moved.device_device > info.device_bytes) {
      std::fprintf(stderr, "kreplay_demo: %s dispatch %zu: the capture reports %zu bytes copied, %zu held on the "
                           "device; the device saw %zu copied (%zu device to device)\n",
                   mode.label, d + 1, info.copied_bytes, info.device_bytes, captured_moved.total(),
                   captured_moved.device_device);
      return false;
    }
    figures.device_held = std::max(figures.device_held, kreplay_sim_device_bytes(agent));
    figures.host_held = std::max(figures.host_held, host_mapped_bytes());

    uint64_t captured_checksum = 0;
    std::size_t restored_bytes = 0;
    for (std::size_t pass = 0; pass < options.passes; ++pass) {
      if (pass > 0 && !options.skip_restores) {
        const CopyCounts before = context.tap->counts();
        start = now_s();
        const kreplay::restore_result_t restored = kreplay::restore_with_status(snapshot);
        spent_s += now_s() - start;
        const kreplay_restore_report_t& report = restored.report;
        const CopyCounts moved = context.tap->counts() - before;
        restored_bytes += report.bytes;
        if (!restored.ok() || report.skipped != 0 || report.failed != 0 ||
            report.restored != info.regions + info.module_variables ||
            report.bytes + report.clean_bytes != info.bytes || moved.to_device != report.bytes ||
            moved.total() != report.bytes) {
          std::fprintf(stderr, "kreplay_demo: %s dispatch %zu pass %zu: restore %s: %zu restored, %zu skipped, %zu "
                               "failed, %zu bytes written and %zu found unchanged (expected %zu ranges and %zu "
                               "bytes); the device saw %zu bytes written\n",
                       mode.label, d + 1, pass + 1, kreplay_status_string(restored.status), report.restored,
                       report.skipped, report.failed, report.bytes, report.clean_bytes,
                       info.regions + info.module_variables, info.bytes, moved.to_device);
          return false;
        }
      }
      context.progress->update("mode %zu of %zu (%s): dispatch %zu of %zu, pass %zu of %zu", index + 1, count,
                               mode.label, d + 1, options.dispatches, pass + 1, options.passes);
      const uint64_t read = context.kernel->read();
      if (pass == 0) {
        captured_checksum = read;
      } else if (read != captured_checksum) {
        context.progress->clear();
        std::fprintf(stderr, "kreplay_demo: %s dispatch %zu pass %zu read a state with checksum %016" PRIx64
                             ", the captured state has %016" PRIx64 ": the restore did not give it the same inputs\n",
                     mode.label, d + 1, pass + 1, read, captured_checksum);
        return false;
      }
      context.kernel->write(writes, rng);
      ++figures.passes;
    }
    const uint64_t launches = context.kernel->launches() - launches_before;
    if (launches != options.passes) {
      std::fprintf(stderr, "kreplay_demo: the fine-grained launch counter moved by %" PRIu64 " in %s dispatch %zu: "
                           "untracked memory was restored\n",
                   launches, mode.label, d + 1);
      return false;
    }
    figures.device_held = std::max(figures.device_held, kreplay_sim_device_bytes(agent));
    figures.host_held = std::max(figures.host_held, host_mapped_bytes());
    snapshot.reset();
    if (!check(window.close(), "kreplay_window_close")) return false;
    const kreplay_window_outcome_t& outcome = window.outcome();
    const std::size_t passes_run = options.skip_restores ? 1 : options.passes;
    if (outcome.reason != KREPLAY_DECLINE_NONE || outcome.passes_run != passes_run ||
        outcome.footprint_bytes != info.bytes || outcome.bytes_moved != info.copied_bytes + restored_bytes) {
      std::fprintf(stderr, "kreplay_demo: %s dispatch %zu: the window's outcome says %s, %u passes run, %zu bytes "
                           "captured and %zu moved; expected none, %zu, %zu and %zu\n",
                   mode.label, d + 1, kreplay_decline_reason_string(outcome.reason), outcome.passes_run,
                   outcome.footprint_bytes, outcome.bytes_moved, passes_run, info.bytes,
                   info.copied_bytes + restored_bytes);
      return false;
    }

    // The simulated device's own count of copied bytes must agree with the demo's, so that the table's byte
    // figures are the device's and not only the demo's.
    const CopyCounts moved = context.tap->counts() - tap_before;
    const kreplay_sim_counters_t sim_after = sim_counters();
    const std::size_t sim_bytes = sim_after.copy_bytes - sim_before.copy_bytes;
    // Calls the engine made into the device: single copies, batches and digests.
    const std::size_t single_copies =
        (sim_after.copies - sim_after.batch_copies) - (sim_before.copies - sim_before.batch_copies);
    const std::size_t calls =
        single_copies + (sim_after.batches - sim_before.batches) + (sim_after.digests - sim_before.digests);
    if (sim_bytes != moved.total() || moved.host_host != 0) {
      std::fprintf(stderr, "kreplay_demo: %s dispatch %zu: the simulated device copied %zu bytes, the ops saw %zu "
                           "(%zu host to host)\n",
                   mode.label, d + 1, sim_bytes, moved.total(), moved.host_host);
      return false;
    }
    ++figures.replayed;
    if (d == 0) {
      figures.first_s = spent_s;
      figures.first_bytes = moved;
      figures.first_calls = calls;
    } else {
      figures.steady_s += spent_s;
      figures.steady_bytes = figures.steady_bytes + moved;
      figures.steady_calls += calls;
      ++figures.steady;
    }
    if (options.verbose) {
      context.progress->clear();
      std::printf("  %-28s dispatch %zu: %8.2f ms; capture copied %s (%s on the device), restores wrote %s and "
                  "left %s unchanged; moved %s host<->device, %s device<->device\n",
                  mode.label, d + 1, spent_s * 1e3, describe_size(info.copied_bytes).c_str(),
                  describe_size(info.device_bytes).c_str(), describe_size(restored_bytes).c_str(),
                  describe_size(static_cast<std::size_t>(options.passes - 1) * info.bytes - restored_bytes).c_str(),
                  describe_size(moved.host_device).c_str(), describe_size(moved.device_device).c_str());
    }
  }

  // Give everything back, as a host does between profiling sessions: the next mode starts from nothing.
  kreplay_staging_trim(agent);
  kreplay_device_trim(agent);
  if (host_mapped_bytes() != 0 || kreplay_sim_device_bytes(agent) != 0 || sim_counters().locked_bytes != 0) {
    std::fprintf(stderr, "kreplay_demo: after %s and a trim kreplay still holds %zu bytes of host memory (%zu "
                         "page-locked) and %zu of device memory\n",
                 mode.label, host_mapped_bytes(), sim_counters().locked_bytes, kreplay_sim_device_bytes(agent));
    return false;
  }
  return true;
}

int run(const Options& options) {
  Progress progress;
  LogContext log_context;
  log_context.progress = &progress;
  log_context.verbose = options.verbose;
  kreplay_set_logger(demo_log, &log_context, KREPLAY_LOG_INFO);

  // Allocations are classified through the ops when they are recorded, so a set must be installed first; each
  // mode installs its own later.
  CopyTap tap;
  kreplay_device_ops_t sim_ops{};
  if (!check(kreplay_sim_device_ops(&sim_ops), "kreplay_sim_device_ops")) return 1;
  kreplay_device_ops_t ops{};
  tap.wrap(sim_ops, &ops);
  if (!check(kreplay_configure(&ops), "kreplay_configure")) return 1;
  kreplay_tracking_enable(true);
  const kreplay_agent_t agent{0x6170u};
  Device device(agent, &tap);
  std::mt19937_64 rng(20240521);
  const std::size_t footprint = options.footprint_mib << 20;
  const double start = now_s();

  // The application's footprint.
  std::vector<Allocation> regions;
  regions.reserve(options.regions);
  uint64_t seed = 1;
  for (std::size_t size : footprint_sizes(footprint, options.regions, rng)) {
    Allocation allocation;
    if (!device.allocate_tracked(size, &allocation)) return 1;
    fill(allocation.ptr, allocation.size, seed++);
    regions.push_back(allocation);
    progress.update("allocating: %zu of %zu regions", regions.size(), options.regions);
  }
  std::size_t smallest = footprint;
  std::size_t largest = 0;
  for (const Allocation& region : regions) {
    smallest = std::min(smallest, region.size);
    largest = std::max(largest, region.size);
  }

  // Memory kreplay must not capture: a fine-grained counter the host reads back, a kernarg segment, and an
  // executable allocation (code objects, trace buffers).
  Allocation fine_grained;
  Allocation kernarg;
  Allocation executable;
  if (!device.allocate(4096, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_FINE_GRAINED, 0, &fine_grained) ||
      !device.allocate(4096, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_KERNARG | KREPLAY_GLOBAL_FLAG_FINE_GRAINED, 0,
                       &kernarg) ||
      !device.allocate(64 << 10, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED,
                       KREPLAY_ALLOC_FLAG_EXECUTABLE, &executable))
    return 1;

  // Module-scope variables, as a code object defines them: __device__ state the kernel updates, __constant__
  // tables it only reads, and the one-byte compilation-unit marker that HIP emits and kreplay skips.
  std::vector<ModuleVariable> variables;
  for (int i = 0; i < 48; ++i)
    variables.push_back({"g_state_" + std::to_string(i), nullptr, 1u + (37u * i * i) % 4096u, false, true});
  for (int i = 0; i < 16; ++i)
    variables.push_back({"c_table_" + std::to_string(i), nullptr, 16u << (i % 8), true, true});
  variables.push_back({"__hip_cuid_5e1f0a9c2b7d4e38", nullptr, 1, false, false});
  std::size_t captured_variables = 0;
  std::size_t variable_bytes = 0;
  std::vector<Range> reads;
  std::vector<Range> writes;
  for (const Allocation& region : regions) {
    reads.push_back({region.ptr, region.size});
    writes.push_back({region.ptr, region.size});
  }
  for (ModuleVariable& variable : variables) {
    void* address = nullptr;
    if (!check(kreplay_sim_add_module_variable(agent, variable.name.c_str(), variable.size, variable.is_constant,
                                               &address),
               "kreplay_sim_add_module_variable"))
      return 1;
    variable.ptr = static_cast<unsigned char*>(address);
    tap.add_device_range(variable.ptr, variable.size);
    fill(variable.ptr, variable.size, seed++);
    if (!variable.captured) continue;
    ++captured_variables;
    variable_bytes += variable.size;
    reads.push_back({variable.ptr, variable.size});
    // Kernels read __constant__ memory and never write it.
    if (!variable.is_constant) writes.push_back({variable.ptr, variable.size});
  }
  Kernel kernel(std::move(reads), writes, reinterpret_cast<uint64_t*>(fine_grained.ptr));

  kreplay_inventory_stats_t inventory{};
  if (!check(kreplay_inventory_stats(agent, &inventory), "kreplay_inventory_stats")) return 1;
  if (inventory.regions != regions.size() || inventory.bytes != footprint || inventory.overflowed != 0) {
    std::fprintf(stderr, "kreplay_demo: the inventory holds %zu regions of %zu bytes (%zu lost); expected %zu of %zu\n",
                 inventory.regions, inventory.bytes, inventory.overflowed, regions.size(), footprint);
    return 1;
  }
  const std::size_t writes_per_pass = static_cast<std::size_t>(
      std::llround(static_cast<double>(kernel.blocks()) * options.write_percent / 100.0));

  std::printf("kreplay %s demo: one workload replayed in %zu mode%s on the simulated device\n", kreplay_version(),
              options.modes.size(), plural(options.modes.size()));
  std::printf("  footprint  %s in %zu tracked regions (%s to %s) and %zu module variables (%s)\n",
              describe_size(footprint).c_str(), regions.size(), describe_size(smallest).c_str(),
              describe_size(largest).c_str(), captured_variables, describe_size(variable_bytes).c_str());
  std::printf("  kernel     each pass reads everything and rewrites %g %% of its %zu blocks of 64 KiB at random "
              "(%zu blocks)\n",
              options.write_percent, kernel.blocks(), writes_per_pass);
  std::printf("  replay     %zu dispatch%s per mode, %zu passes each (1 snapshot + %zu restore%s); every pass checks "
              "that it reads the captured state\n\n",
              options.dispatches, options.dispatches == 1 ? "" : "es", options.passes, options.passes - 1,
              plural(options.passes - 1));
  std::fflush(stdout);

  const Context context{&options, agent, &kernel, &tap, &progress, footprint + variable_bytes, regions.size(),
                        captured_variables};
  std::vector<ModeFigures> results(kModeCount);
  for (std::size_t i = 0; i < options.modes.size(); ++i) {
    const std::size_t m = options.modes[i];
    ModeFigures& figures = results[m];
    const double mode_start = now_s();
    if (!run_mode(context, kModes[m], i, options.modes.size(), &figures)) return 1;
    progress.clear();
    std::printf("  %-28s done in %5.2f s: %zu dispatches replayed, %zu passes verified%s\n", kModes[m].label,
                now_s() - mode_start, figures.replayed, figures.passes,
                figures.declined > 0 ? " (some snapshots declined)" : "");
    std::fflush(stdout);
  }
  const double total_s = now_s() - start;

  // The table: per dispatch, the later dispatches' average (the first one also maps and page-locks staging and
  // allocates device storage, and its capture copies everything).
  const bool steady = options.dispatches > 1;
  std::printf("\n%-28s %12s %15s %15s %10s %10s %10s\n", "mode", "ms/dispatch", "host<->device",
              "device<->device", "device op", "device mem", "host mem");
  std::printf("%-28s %12s %15s %15s %10s %10s %10s\n", "", steady ? "(after 1st)" : "", "MiB/dispatch",
              "MiB/dispatch", "calls", "held MiB", "held MiB");
  auto link_mib = [&](std::size_t m) { return results[m].mib_per_dispatch(&CopyCounts::host_device); };
  auto moved_mib = [&](std::size_t m) { return link_mib(m) + results[m].mib_per_dispatch(&CopyCounts::device_device); };
  std::size_t fewest = kModeCount;
  std::size_t full = kModeCount;
  std::size_t total_passes = 0;
  std::size_t total_declined = 0;
  for (std::size_t m : options.modes) {
    const ModeFigures& f = results[m];
    total_passes += f.passes;
    total_declined += f.declined;
    if (f.replayed == 0) {
      std::printf("%-28s %12s\n", kModes[m].label, "declined");
      continue;
    }
    std::printf("%-28s %12.1f %15.1f %15.1f %10.0f %10.1f %10.1f\n", kModes[m].label, f.per_dispatch_ms(),
                link_mib(m), f.mib_per_dispatch(&CopyCounts::device_device), f.calls_per_dispatch(),
                static_cast<double>(f.device_held) / kMiB, static_cast<double>(f.host_held) / kMiB);
    // Fewest bytes in all; between equals, fewest across the host link.
    if (fewest == kModeCount || moved_mib(m) < moved_mib(fewest) ||
        (moved_mib(m) == moved_mib(fewest) && link_mib(m) < link_mib(fewest)))
      fewest = m;
    if (std::strcmp(kModes[m].key, "host-full") == 0) full = m;
  }

  std::printf("\nCompared: one %s workload (each pass rewrites %g %% of its 64 KiB blocks) replayed in %zu mode%s;\n",
              describe_size(footprint + variable_bytes).c_str(), options.write_percent, options.modes.size(),
              plural(options.modes.size()));
  if (total_passes > 0) {
    std::printf("every one of the %zu passes read exactly the captured state", total_passes);
  } else {
    std::printf("no dispatch was replayed");
  }
  if (total_declined > 0) std::printf(" (%zu declined dispatches ran once, unreplayed)", total_declined);
  std::printf(".\n");
  if (fewest != kModeCount) {
    std::printf("Fewest bytes moved: %s, %s per dispatch, %s of it across the host link", kModes[fewest].label,
                describe_mib(moved_mib(fewest)).c_str(), describe_mib(link_mib(fewest)).c_str());
    std::vector<std::size_t> tied;
    for (std::size_t m : options.modes) {
      if (m != fewest && results[m].replayed > 0 && moved_mib(m) == moved_mib(fewest)) tied.push_back(m);
    }
    const bool full_tied = std::find(tied.begin(), tied.end(), full) != tied.end();
    if (full != kModeCount && full != fewest && !full_tied && results[full].replayed > 0)
      std::printf("\n  (%s: %s)", kModes[full].label, describe_mib(moved_mib(full)).c_str());
    if (tied.size() == 1) {
      std::printf("; %s moved as many, %s across the link", kModes[tied[0]].label,
                  describe_mib(link_mib(tied[0])).c_str());
    } else if (tied.size() > 1) {
      std::printf("; %zu other modes moved as many", tied.size());
    }
    std::printf(".\n");
  }
  std::printf("Times are of the simulation (this run: %.1f s): its device memory is host memory, so every copy runs\n"
              "at memcpy speed and digests (dirty-only) run on the CPU; GPU figures are in docs/performance.md.\n",
              total_s);
  if (log_context.warnings != 0 || log_context.errors != 0)
    std::printf("kreplay logged %zu warnings and %zu errors.\n", log_context.warnings, log_context.errors);

  // Teardown as a host would: free everything (records first).
  for (const Allocation& region : regions) {
    if (!device.release(region)) return 1;
  }
  if (!device.release_untracked(fine_grained) || !device.release_untracked(kernarg) ||
      !device.release_untracked(executable))
    return 1;
  const kreplay_sim_counters_t counters = sim_counters();
  if (counters.violations != 0 || log_context.errors != 0) {
    std::fprintf(stderr, "kreplay_demo: %zu copies into freed memory, %zu errors logged\n", counters.violations,
                 log_context.errors);
    return 1;
  }
  kreplay_finalize();
  kreplay_set_logger(nullptr, nullptr, KREPLAY_LOG_WARNING);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  switch (parse_options(argc, argv, &options)) {
    case 0:
      break;
    case 1:
      return 0;
    default:
      return 2;
  }
  return run(options);
}
