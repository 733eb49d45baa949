// kreplay_demo: a small kernel-replay profiler run on the simulated device.
//
// It plays the part of a profiler that replays every dispatch several times to collect more counters than one
// pass can: an application allocates a footprint of device memory (through wrappers that report each
// allocation to kreplay, as a host's HSA interception would), defines module-scope variables, then launches
// kernels. Before each dispatch the profiler takes a snapshot; between passes it restores it, so that every
// pass reads exactly the inputs the first one read. The "kernel" rewrites all of its inputs, so a missed or
// partial restore shows up as a checksum that differs between passes, and the demo exits non-zero.
//
// Exit status: 0 when every replayed dispatch computed the same result in every pass and the simulated device
// saw no write into freed memory; 1 when a check failed; 2 for bad command-line arguments.

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
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct Options {
  std::size_t footprint_mib = 256;
  std::size_t regions = 200;
  std::size_t dispatches = 5;
  std::size_t passes = 4;
  bool pin = true;
  std::size_t max_snapshot_mib = 0;
  bool verbose = false;
  bool skip_restores = false;
};

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: kreplay_demo [options]\n"
               "\n"
               "Replays dispatches on kreplay's simulated device: each dispatch is snapshotted, its kernel runs\n"
               "once per pass with a restore in between, and every pass must compute the same checksum.\n"
               "\n"
               "  --footprint-mib N      tracked device memory to allocate (default 256)\n"
               "  --regions N            tracked allocations it is split into (default 200)\n"
               "  --dispatches N         dispatches to replay (default 5)\n"
               "  --passes N             passes per dispatch (default 4)\n"
               "  --pin / --no-pin       page-lock retained staging (default --pin)\n"
               "  --max-snapshot-mib N   decline snapshots above N MiB of host memory (default 0: no limit)\n"
               "  --verbose              also print kreplay's INFO lines (one per snapshot and restore)\n"
               "  --skip-restores        self-test: run the passes without restoring, so the check must fail\n"
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
  if (options->footprint_mib == 0 || options->footprint_mib > (32u << 10)) {
    std::fprintf(stderr, "kreplay_demo: --footprint-mib must be in [1, 32768]\n");
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
  if (options->dispatches == 0 || options->passes < 2) {
    std::fprintf(stderr, "kreplay_demo: --dispatches must be at least 1 and --passes at least 2\n");
    return 2;
  }
  return 0;
}

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// A progress line on stderr, only once a run has taken more than a second, and at most once a second: short
// runs print nothing extra.
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
    std::fprintf(stderr, tty_ ? "\r[%6.1f s] %-70s" : "[%6.1f s] %s\n", now - start_, text);
    shown_ = true;
  }

  // Clears a pending carriage-return line before normal output.
  void clear() {
    if (shown_ && tty_) std::fprintf(stderr, "\r%-82s\r", "");
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

// A device allocation as the application sees it.
struct Allocation {
  unsigned char* ptr = nullptr;
  std::size_t size = 0;
};

// The host's allocate and free wrappers: the runtime call first, then the record (allocate), or the record
// first, then the runtime call (free), so that no restore can write into memory already given back.
class Device {
 public:
  explicit Device(kreplay_agent_t agent) : agent_(agent) {}

  bool allocate(std::size_t size, kreplay_pointer_type_t type, uint32_t global_flags, uint32_t alloc_flags,
                Allocation* out) {
    void* ptr = nullptr;
    if (!check(kreplay_sim_alloc(agent_, size, type, global_flags, &ptr), "kreplay_sim_alloc")) return false;
    if (!check(kreplay_record_alloc(ptr, size, alloc_flags), "kreplay_record_alloc")) return false;
    *out = Allocation{static_cast<unsigned char*>(ptr), size};
    return true;
  }

  // Reallocates at an address the runtime just got back, the way allocators hand a freed block to the next
  // request: the inventory must see a new generation there.
  bool allocate_at(void* address, std::size_t size, Allocation* out) {
    void* ptr = nullptr;
    if (!check(kreplay_sim_alloc_at(address, agent_, size, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED,
                                    &ptr),
               "kreplay_sim_alloc_at"))
      return false;
    if (!check(kreplay_record_alloc(ptr, size, 0), "kreplay_record_alloc")) return false;
    *out = Allocation{static_cast<unsigned char*>(ptr), size};
    return true;
  }

  bool allocate_tracked(std::size_t size, Allocation* out) {
    return allocate(size, KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, 0, out);
  }

  bool release(const Allocation& allocation) {
    if (!check(kreplay_record_free(allocation.ptr), "kreplay_record_free")) return false;
    return check(kreplay_sim_free(allocation.ptr), "kreplay_sim_free");
  }

  // Memory that a snapshot must leave alone; record_alloc still sees it, as it would on a real host.
  bool release_untracked(const Allocation& allocation) {
    const kreplay_status_t status = kreplay_record_free(allocation.ptr);
    if (status != KREPLAY_STATUS_NOT_FOUND) {
      std::fprintf(stderr, "kreplay_demo: untracked memory at %p was tracked (record_free: %s)\n",
                   static_cast<void*>(allocation.ptr), kreplay_status_string(status));
      return false;
    }
    return check(kreplay_sim_free(allocation.ptr), "kreplay_sim_free");
  }

 private:
  kreplay_agent_t agent_;
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

// The "kernel": reads every input, folds it into a position-dependent checksum, and rewrites it with one step
// of a full-period generator, so that the next pass reads different data unless it is restored in between.
uint64_t kernel_over(unsigned char* data, std::size_t size, bool writable) {
  uint64_t sum = 0;
  uint64_t running = 0;
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, data + i, 8);
    sum += word;
    running += sum;
    if (writable) {
      word = word * 6364136223846793005ull + 1442695040888963407ull;
      std::memcpy(data + i, &word, 8);
    }
  }
  for (; i < size; ++i) {
    sum += data[i];
    running += sum;
    if (writable) data[i] = static_cast<unsigned char>(data[i] * 5u + 1u);
  }
  return (sum * 0xff51afd7ed558ccdull) ^ running ^ size;
}

uint64_t mix(uint64_t hash, uint64_t value) {
  hash ^= value + 0x9E3779B97F4A7C15ull + (hash << 6) + (hash >> 2);
  return hash;
}

struct Kernel {
  std::vector<Allocation>* regions;
  std::vector<ModuleVariable>* variables;
  uint64_t* launch_counter;  // fine-grained memory: the host reads it, so it must never be rolled back

  uint64_t run() const {
    uint64_t hash = 0;
    for (const Allocation& region : *regions) hash = mix(hash, kernel_over(region.ptr, region.size, true));
    for (const ModuleVariable& variable : *variables) {
      if (!variable.captured) continue;
      // Kernels read __constant__ memory and never write it.
      hash = mix(hash, kernel_over(variable.ptr, variable.size, !variable.is_constant));
    }
    ++*launch_counter;
    return hash;
  }
};

struct DispatchFigures {
  bool replayed = false;
  double snap_s = 0;
  double restore_s = 0;  // all restores of the dispatch
  std::size_t restores = 0;
  std::size_t bytes = 0;
  std::size_t regions = 0;
  std::size_t module_variables = 0;
  std::size_t maps = 0;  // host mappings the snapshot made (0: staging reused)
  std::size_t mapped_bytes = 0;
  std::size_t locks = 0;
  kreplay_snapshot_info_t info{};
};

kreplay_host_memory_stats_t host_memory() {
  kreplay_host_memory_stats_t stats{};
  kreplay_host_memory_stats(&stats);
  return stats;
}

kreplay_sim_counters_t sim_counters() {
  kreplay_sim_counters_t counters{};
  kreplay_sim_counters(&counters);
  return counters;
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

double gb_per_s(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; }

int run(const Options& options) {
  Progress progress;
  LogContext log_context;
  log_context.progress = &progress;
  kreplay_set_logger(demo_log, &log_context, options.verbose ? KREPLAY_LOG_INFO : KREPLAY_LOG_WARNING);

  kreplay_device_ops_t ops{};
  if (!check(kreplay_sim_device_ops(&ops), "kreplay_sim_device_ops")) return 1;
  if (!check(kreplay_configure(&ops), "kreplay_configure")) return 1;
  kreplay_policy_t policy{};
  policy.struct_size = sizeof policy;
  policy.pin_staging = options.pin;
  policy.max_snapshot_bytes = options.max_snapshot_mib << 20;
  if (!check(kreplay_set_policy(&policy), "kreplay_set_policy")) return 1;
  kreplay_tracking_enable(true);

  const kreplay_agent_t agent{0x6170u};
  Device device(agent);
  std::mt19937_64 rng(20240521);
  const std::size_t footprint = options.footprint_mib << 20;

  std::printf("kreplay %s demo on the simulated device: %s in %zu regions, %zu dispatches x %zu passes, staging %s\n",
              kreplay_version(), describe_size(footprint).c_str(), options.regions, options.dispatches,
              options.passes, options.pin ? "page-locked" : "pageable");

  // The application's footprint.
  const double setup_start = now_s();
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
  auto* launch_counter = reinterpret_cast<uint64_t*>(fine_grained.ptr);

  // Module-scope variables, as a code object defines them: __device__ state the kernel updates, __constant__
  // tables it only reads, and the one-byte compilation-unit marker that HIP emits and kreplay skips.
  std::vector<ModuleVariable> variables;
  for (int i = 0; i < 48; ++i) variables.push_back({"g_state_" + std::to_string(i), nullptr, 1u + (37u * i * i) % 4096u, false, true});
  for (int i = 0; i < 16; ++i) variables.push_back({"c_table_" + std::to_string(i), nullptr, 16u << (i % 8), true, true});
  variables.push_back({"__hip_cuid_5e1f0a9c2b7d4e38", nullptr, 1, false, false});
  std::size_t captured_variables = 0;
  for (ModuleVariable& variable : variables) {
    void* address = nullptr;
    if (!check(kreplay_sim_add_module_variable(agent, variable.name.c_str(), variable.size, variable.is_constant,
                                               &address),
               "kreplay_sim_add_module_variable"))
      return 1;
    variable.ptr = static_cast<unsigned char*>(address);
    fill(variable.ptr, variable.size, seed++);
    captured_variables += variable.captured ? 1 : 0;
  }

  kreplay_inventory_stats_t inventory{};
  if (!check(kreplay_inventory_stats(agent, &inventory), "kreplay_inventory_stats")) return 1;
  if (inventory.regions != regions.size() || inventory.bytes != footprint || inventory.overflowed != 0) {
    std::fprintf(stderr, "kreplay_demo: the inventory holds %zu regions of %zu bytes (%zu lost); expected %zu of %zu\n",
                 inventory.regions, inventory.bytes, inventory.overflowed, regions.size(), footprint);
    return 1;
  }
  std::printf("footprint: %zu tracked regions from %s to %s, %zu module variables (%zu captured), 3 untracked "
              "allocations (fine-grained, kernarg, executable); set up in %.2f s\n\n",
              regions.size(), describe_size(smallest).c_str(), describe_size(largest).c_str(), variables.size(),
              captured_variables, now_s() - setup_start);

  const Kernel kernel{&regions, &variables, launch_counter};
  std::vector<DispatchFigures> figures;
  const double run_start = now_s();
  double kernel_s = 0;
  uint64_t previous_checksum = 0;
  std::size_t reallocated_in_place = 0;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const std::size_t churn = std::max<std::size_t>(2, options.regions / 50);

  for (std::size_t d = 0; d < options.dispatches; ++d) {
    DispatchFigures f;
    const uint64_t launches_before = *launch_counter;
    uint64_t first_checksum = 0;
    // One packet holding one kernel dispatch, outside any graph launch: the gate lets it be replayed.
    f.replayed = kreplay_replay_gate(1, 1, false) == KREPLAY_GATE_REPLAY;
    const kreplay_host_memory_stats_t before = host_memory();
    const kreplay_sim_counters_t counters_before = sim_counters();
    progress.update("dispatch %zu of %zu: taking the snapshot", d + 1, options.dispatches);
    const double snap_start = now_s();
    kreplay::device_snapshot_t snapshot = f.replayed ? kreplay::snap(agent) : kreplay::device_snapshot_t{};
    f.snap_s = now_s() - snap_start;
    const kreplay_host_memory_stats_t after = host_memory();
    f.maps = after.maps - before.maps;
    f.mapped_bytes = after.mapped_bytes > before.mapped_bytes ? after.mapped_bytes - before.mapped_bytes : 0;
    f.locks = sim_counters().host_locks - counters_before.host_locks;
    if (f.replayed && !snapshot.ok) {
      progress.clear();
      std::printf("dispatch %3zu  snapshot declined (%s): runs once, unreplayed\n", d + 1,
                  kreplay_decline_reason_string(snapshot.reason));
      f.replayed = false;
    }

    if (f.replayed) {
      if (!check(kreplay_snapshot_info(snapshot.get(), &f.info), "kreplay_snapshot_info")) return 1;
      f.bytes = f.info.bytes;
      f.regions = f.info.regions;
      f.module_variables = f.info.module_variables;
      if (f.regions != regions.size() || f.module_variables != captured_variables) {
        std::fprintf(stderr, "kreplay_demo: dispatch %zu captured %zu regions and %zu module variables; expected %zu "
                             "and %zu\n",
                     d + 1, f.regions, f.module_variables, regions.size(), captured_variables);
        return 1;
      }
      for (std::size_t pass = 0; pass < options.passes; ++pass) {
        if (pass > 0 && !options.skip_restores) {
          const double restore_start = now_s();
          const kreplay::restore_result_t restored = kreplay::restore_with_status(snapshot);
          f.restore_s += now_s() - restore_start;
          const kreplay_status_t status = restored.status;
          const kreplay_restore_report_t& report = restored.report;
          ++f.restores;
          if (status != KREPLAY_STATUS_SUCCESS || report.skipped != 0 || report.failed != 0 ||
              report.restored != f.regions + f.module_variables || report.bytes != f.bytes) {
            std::fprintf(stderr, "kreplay_demo: dispatch %zu pass %zu: restore %s: %zu restored, %zu skipped, %zu "
                                 "failed, %zu bytes (expected %zu and %zu bytes)\n",
                         d + 1, pass + 1, kreplay_status_string(status), report.restored, report.skipped,
                         report.failed, report.bytes, f.regions + f.module_variables, f.bytes);
            return 1;
          }
        }
        progress.update("dispatch %zu of %zu, pass %zu of %zu", d + 1, options.dispatches, pass + 1, options.passes);
        const double kernel_start = now_s();
        const uint64_t checksum = kernel.run();
        kernel_s += now_s() - kernel_start;
        if (pass == 0) {
          first_checksum = checksum;
        } else if (checksum != first_checksum) {
          std::fprintf(stderr, "kreplay_demo: dispatch %zu pass %zu computed %016" PRIx64 ", pass 1 computed %016"
                               PRIx64 ": the restore did not give it the same inputs\n",
                       d + 1, pass + 1, checksum, first_checksum);
          return 1;
        }
      }
    } else {
      const double kernel_start = now_s();
      first_checksum = kernel.run();
      kernel_s += now_s() - kernel_start;
    }
    // The last pass's writes stand, so the next dispatch reads new data: if it did not, the kernel would not be
    // testing the restores at all.
    if (d > 0 && first_checksum == previous_checksum) {
      std::fprintf(stderr, "kreplay_demo: dispatch %zu read the same inputs as dispatch %zu: the kernel does not "
                           "rewrite its inputs\n", d + 1, d);
      return 1;
    }
    previous_checksum = first_checksum;
    const uint64_t launches = *launch_counter - launches_before;
    if (launches != (f.replayed ? options.passes : 1)) {
      std::fprintf(stderr, "kreplay_demo: the fine-grained launch counter moved by %" PRIu64 " in dispatch %zu: "
                           "untracked memory was restored\n", launches, d + 1);
      return 1;
    }

    if (f.replayed) {
      progress.clear();
      char staging[96];
      if (f.maps == 0) {
        std::snprintf(staging, sizeof staging, "staging reused");
      } else {
        std::snprintf(staging, sizeof staging, "staging mapped (%zu map%s, %s%s)", f.maps, f.maps == 1 ? "" : "s",
                      describe_size(f.mapped_bytes).c_str(), f.locks > 0 ? ", page-locked" : "");
      }
      std::printf("dispatch %3zu  snapshot %8.2f ms  restore %8.2f ms/pass  %10s  %5zu regions  %3zu module vars  "
                  "%s  checksum %016" PRIx64 "\n",
                  d + 1, f.snap_s * 1e3, f.restores ? f.restore_s * 1e3 / static_cast<double>(f.restores) : 0.0,
                  describe_size(f.bytes).c_str(), f.regions, f.module_variables, staging, first_checksum);
      std::fflush(stdout);
    }
    snapshot.reset();
    figures.push_back(f);

    // Between dispatches the application frees a few small buffers and allocates others: half of them at the
    // address just given back (a new generation for the inventory), half elsewhere, with a different size.
    if (d + 1 < options.dispatches) {
      for (std::size_t c = 0; c < churn; ++c) {
        // Only the smaller half churns, so that the simulated device (which keeps freed memory mapped and
        // poisoned) does not grow on long runs.
        std::size_t index = 1 + static_cast<std::size_t>(unit(rng) * static_cast<double>(regions.size() - 1));
        index = std::min(index, regions.size() - 1);
        if (regions[index].size > footprint / regions.size()) continue;
        const Allocation old = regions[index];
        if (!device.release(old)) return 1;
        Allocation fresh;
        if (c % 2 == 0) {
          if (!device.allocate_at(old.ptr, old.size, &fresh)) return 1;
          ++reallocated_in_place;
        } else {
          const auto size =
              std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(old.size) * (0.75 + unit(rng) / 2)));
          if (!device.allocate_tracked(size, &fresh)) return 1;
        }
        fill(fresh.ptr, fresh.size, seed++);
        regions[index] = fresh;
      }
    }
  }
  const double run_s = now_s() - run_start;
  progress.clear();

  // Summary.
  std::size_t replayed = 0;
  double snap_bytes = 0, snap_s = 0, restore_bytes = 0, restore_s = 0;
  double steady_snap_s = 0, steady_restore_s = 0;
  std::size_t steady = 0, steady_restores = 0, steady_maps = 0;
  for (std::size_t d = 0; d < figures.size(); ++d) {
    const DispatchFigures& f = figures[d];
    if (!f.replayed) continue;
    ++replayed;
    snap_bytes += static_cast<double>(f.bytes);
    snap_s += f.snap_s;
    restore_bytes += static_cast<double>(f.bytes) * static_cast<double>(f.restores);
    restore_s += f.restore_s;
    if (d > 0) {
      ++steady;
      steady_snap_s += f.snap_s;
      steady_restore_s += f.restore_s;
      steady_restores += f.restores;
      steady_maps += f.maps;
    }
  }
  const kreplay_sim_counters_t counters = sim_counters();
  const kreplay_host_memory_stats_t host = host_memory();
  const std::size_t retained = kreplay_retained_staging_bytes(agent);

  if (replayed > 0) {
    std::printf("\nsummary: %zu of %zu dispatches replayed, %zu passes each; every pass of a replayed dispatch computed "
                "the same checksum\n",
                replayed, options.dispatches, options.passes);
    std::printf("  snapshots  %8.1f MiB in %8.2f ms  %6.2f GB/s\n", snap_bytes / kMiB, snap_s * 1e3,
                gb_per_s(snap_bytes, snap_s));
    std::printf("  restores   %8.1f MiB in %8.2f ms  %6.2f GB/s\n", restore_bytes / kMiB, restore_s * 1e3,
                gb_per_s(restore_bytes, restore_s));
  } else {
    std::printf("\nsummary: no dispatch was replayed (every snapshot was declined); each ran once\n");
  }
  if (!figures.empty() && figures[0].replayed) {
    std::printf("  first dispatch: snapshot %.2f ms (%zu host map%s)\n", figures[0].snap_s * 1e3, figures[0].maps,
                figures[0].maps == 1 ? "" : "s");
  }
  if (steady > 0) {
    std::printf("  steady state:   snapshot %.2f ms, restore %.2f ms/pass, %zu host maps in %zu later dispatch(es)\n",
                steady_snap_s * 1e3 / static_cast<double>(steady),
                steady_restores ? steady_restore_s * 1e3 / static_cast<double>(steady_restores) : 0.0, steady_maps,
                steady);
  }
  std::printf("  kernel passes %.2f s of %.2f s; allocation churn: %zu regions reallocated at a freed address\n",
              kernel_s, run_s, reallocated_in_place);
  std::printf("  host memory: %s retained idle, %s mapped by kreplay (%zu maps, %zu unmaps), %s page-locked\n",
              describe_size(retained).c_str(), describe_size(host.mapped_bytes).c_str(), host.maps, host.unmaps,
              describe_size(counters.locked_bytes).c_str());
  std::printf("  simulated device: %zu copies, %s, %zu writes refused as violations; kreplay logged %zu warnings, "
              "%zu errors\n",
              counters.copies, describe_size(counters.copy_bytes).c_str(), counters.violations, log_context.warnings,
              log_context.errors);

  // Teardown as a host would: free everything (records first), then give idle staging back.
  for (const Allocation& region : regions) {
    if (!device.release(region)) return 1;
  }
  if (!device.release_untracked(fine_grained) || !device.release_untracked(kernarg) ||
      !device.release_untracked(executable))
    return 1;
  kreplay_staging_trim(agent);
  const kreplay_host_memory_stats_t end = host_memory();
  if (end.mapped_bytes != 0 || sim_counters().locked_bytes != 0) {
    std::fprintf(stderr, "kreplay_demo: after a trim kreplay still maps %zu bytes (%zu page-locked)\n",
                 end.mapped_bytes, sim_counters().locked_bytes);
    return 1;
  }
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
