// What kreplay-cuda-replay asks of the injection library: the options of the launcher, passed through the
// environment (KREPLAY_REPLAY_*), parsed and checked once in InitializeInjection. Plain C++, no CUDA: the
// GPU-free tests parse every option and every malformed value.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_CONFIG_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_CONFIG_HPP

#include <cstddef>
#include <cstdint>
#include <functional>
#include <regex>
#include <string>

#include "kreplay.h"

namespace kreplay::cuda::inject {

enum class replay_tier : uint8_t { host, device, automatic };
enum class replay_backend : uint8_t { kreplay, cupti };

// The default exclusion list: communication kernels wait on other GPUs or on the host and hang when replayed.
inline constexpr const char* default_exclude = "nccl|nvshmem";

struct replay_config_t {
  bool enabled = false;          // KREPLAY_REPLAY=1: the launcher asked for a replay
  uint32_t passes = 5;           // KREPLAY_REPLAY_PASSES, 1..1000
  std::string kernel_regex;      // KREPLAY_REPLAY_KERNEL_NAME ("" = every kernel), matched anywhere in the name
  uint64_t launch_skip = 0;      // KREPLAY_REPLAY_LAUNCH_SKIP: matching launches run once before the first replay
  uint64_t launch_count = 0;     // KREPLAY_REPLAY_LAUNCH_COUNT: replay at most this many (0 = no limit)
  replay_tier tier = replay_tier::host;      // KREPLAY_REPLAY_TIER=host|device|auto
  bool dirty_only = true;                    // KREPLAY_REPLAY_DIRTY_ONLY=on|off
  size_t device_budget = 0;                  // KREPLAY_REPLAY_DEVICE_BUDGET (bytes, K/M/G suffixes; 0 = tier's)
  bool verify = false;                       // KREPLAY_REPLAY_VERIFY=1
  replay_backend backend = replay_backend::kreplay;  // KREPLAY_REPLAY_BACKEND=kreplay|cupti
  std::string output;                        // KREPLAY_REPLAY_OUTPUT: the CSV report ("" = none)
  std::string exclude = default_exclude;     // KREPLAY_REPLAY_EXCLUDE ("" = exclude nothing)
  bool restore = true;                       // KREPLAY_REPLAY_RESTORE=0: debug, relaunch without restoring
  double progress_seconds = 5.0;             // KREPLAY_REPLAY_PROGRESS: seconds between progress lines (0 = none)
  uint64_t launcher_pid = 0;                 // KREPLAY_REPLAY_PID: the launcher's process, which is the program's
};

// Reads the configuration through `get` (std::getenv in the library). False, with the first problem in
// *error (which names the variable and the value), when a value is malformed; a replay is then not started.
bool parse_replay_config(const std::function<const char*(const char*)>& get, replay_config_t* out,
                         std::string* error);

// Parses "123", "64K", "512M", "2G" (binary multiples). False on anything else or an overflow.
bool parse_bytes(const char* text, size_t* out);

// The kreplay policy for the configuration (the injection's recommended policy with the tier, dirty-only and
// budget applied).
kreplay_policy_t replay_policy(const replay_config_t& config, kreplay_policy_t base);

// Which launches are replayed: the name filter, the exclusion list, --launch-skip and --launch-count, in
// ncu's sense (skip and count number the launches that match the filter).
class launch_selector {
 public:
  enum class verdict : uint8_t { replay, not_matched, skipped, count_reached, excluded };
  explicit launch_selector(const replay_config_t& config);
  // Not thread-safe: the replayer calls it under its own lock.
  verdict classify(const char* name);
  static const char* text(verdict v);

 private:
  bool has_filter_;
  bool has_exclude_;
  std::regex filter_;
  std::regex exclude_;
  uint64_t skip_;
  uint64_t count_;
  uint64_t matched_ = 0;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_CONFIG_HPP
