// What kreplay-cuda-replay asks of the injection library: the options of the launcher, passed through the
// environment (KREPLAY_REPLAY_*), parsed and checked once in InitializeInjection. Plain C++, no CUDA: the
// GPU-free tests parse every option and every malformed value.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_CONFIG_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_CONFIG_HPP

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "kreplay.h"
#include "name_pattern.hpp"

namespace kreplay::cuda::inject {

enum class replay_tier : uint8_t { host, device, automatic };
// Who saves and restores memory: kreplay, CUPTI's Checkpoint API (cupti), or CUPTI's Range Profiler in its own
// kernel replay (cupti_kernel_replay: counters only, kreplay runs no pass; for measuring side by side).
enum class replay_backend : uint8_t { kreplay, cupti, cupti_kernel_replay };
// CUDA graph launches: each kernel node replayed on its own (node, Nsight Compute's default), the whole graph as
// one window (graph: every pass launches the whole graph), or run once (off).
enum class graph_profiling : uint8_t { node, graph, off };
// A named list of metrics (--set), counted before --metrics' own.
enum class metric_set : uint8_t { none, counts, speed, full, warps };
// With counters: the L2 flushed before every counted pass (all, Nsight Compute's default), or left warm (none).
enum class cache_control : uint8_t { all, none };
// One window per launch (kernel), or up to --range-size consecutive launches of a thread per window (range).
enum class replay_mode : uint8_t { kernel, range };
// Range mode with counters: each launch a user range kreplay pushes and pops around its relaunch, or one of
// CUPTI's automatic ranges (no calls between the launches: the default, for the time metrics' sake).
enum class profiler_ranges : uint8_t { user, automatic };

// The default exclusion list: communication kernels wait on other GPUs or on the host and hang when replayed.
inline constexpr const char* default_exclude = "nccl|nvshmem";

// Filled from the environment by parse_replay_config; which variable fills which field, and the defaults, are in
// the options' table (replay_config.cpp).
struct replay_config_t {
  bool enabled = false;          // the launcher asked for a replay
  uint32_t passes = 5;           // passes per replayed launch, 1..1000
  std::string kernel_regex;      // the name filter ("" = every kernel), a name_pattern searched in the name
  uint64_t launch_skip = 0;      // matching launches run once before the first replay
  uint64_t launch_count = 0;     // replay at most this many matching launches (0 = no limit)
  replay_tier tier = replay_tier::host;      // where snapshots live
  bool dirty_only = true;                    // restore and re-capture only changed blocks
  bool write_set = true;                     // learn the write set (the policy's learn_write_set)
  uint32_t host_budget_percent = 50;         // of the available host memory per snapshot (0 = no limit)
  size_t device_budget = 0;                  // bytes of device memory for snapshots (0 = the tier's)
  bool verify = false;                       // compare every pass's footprint with pass 1's
  replay_backend backend = replay_backend::kreplay;
  graph_profiling graphs = graph_profiling::node;  // what a graph launch gets
  metric_set set = metric_set::none;         // counted metrics by name
  std::string metrics;                       // counted metrics, "a,b,c" ("" = replay only)
  cache_control caches = cache_control::all; // with counters: flush the L2 before each counted pass
  replay_mode mode = replay_mode::kernel;     // a window per launch, or per range of launches
  uint32_t range_size = 32;                   // range mode: launches per window at most
  profiler_ranges ranges = profiler_ranges::automatic;  // range mode with counters: how a launch is made a range
  std::string output;                        // the CSV report ("" = none)
  std::string exclude = default_exclude;     // kernels never replayed ("" = exclude nothing), a name_pattern
  bool restore = true;                       // false: debug, relaunch without restoring
  double progress_seconds = 5.0;             // seconds between progress lines (0 = none)
  uint64_t launcher_pid = 0;                 // the launcher's process, which is the program's
};

// ---- The options: one table, one line per option ------------------------------------------------------------
// Each row gives an option's flag, its environment variable, its kind (which parses the value and names the
// field it fills), its default and its help. The library's parser, the launcher's command line, its checks and
// its --help all read the table (replay_config.cpp): adding an option is one row there and the field above.

// How a value is written, which decides how it is parsed, what the launcher asks for and what --help shows.
enum class option_kind : uint8_t {
  flag_on,           // a flag without a value: given, the variable is 1 (0|1|on|off in the environment)
  flag_off,          // a flag without a value: given, the variable is 0
  on_off,            // on|off (1|0 too)
  count,             // a whole number from min to max
  choice,            // one of `words` ("host|device|auto"), stored as its index: the enum's order
  bytes,             // parse_bytes
  seconds,           // a decimal number of seconds from min to max
  pattern,           // a name_pattern; empty means unset (the default)
  pattern_or_empty,  // a name_pattern, where "" means none (the exclusion list)
  path,              // a file name; the launcher makes it absolute
  name_list,         // names separated by commas (parse_metric_list); empty means unset
  text,              // any other text (a list of names, ...)
};

// What a value parsed to, for the row's store function.
struct parsed_value_t {
  uint64_t number = 0;  // flags, on_off, count, choice (the index), bytes
  double real = 0.0;    // seconds
  const char* text = "";  // pattern, path, text
};

struct option_value_t {
  option_kind kind;
  const char* words;  // count, seconds: what the number is ("a number of passes"); choice: "a|b|c"
  uint64_t min;       // count, seconds
  uint64_t max;
  void (*store)(replay_config_t* config, const parsed_value_t& value);  // fills the row's field
};

struct replay_option_t {
  const char* flag;           // without "--"; nullptr: set by the launcher itself, not a command-line option
  char short_flag;            // '\0', or the one-letter form ('o': -o FILE, -oFILE)
  const char* variable;       // the library's environment variable
  option_value_t value;
  const char* default_value;  // in the variable's syntax; nullptr: none (the field's own default stands)
  const char* help;           // for --help, without the default (which is added from default_value)
};

struct option_table_t {
  const replay_option_t* first;
  const replay_option_t* last;
  const replay_option_t* begin() const { return first; }
  const replay_option_t* end() const { return last; }
};

// Splits "a,b,c" into metric names; false, with why, for an empty name or a character no metric name has
// (letters, digits, '_', '.', ':').
bool parse_metric_list(const std::string& text, std::vector<std::string>* out, std::string* why);

// The metrics a replay counts: those of --set, then those of --metrics not in it, in order. Empty when neither
// is given; false, with why, for a --metrics list parse_metric_list refuses.
bool counted_metrics(const replay_config_t& config, std::vector<std::string>* out, std::string* why);

// The table, in --help's order (also the order in which parse_replay_config checks the variables).
option_table_t replay_options();

// Whether the launcher's option takes a value (every kind but the two flags).
bool takes_value(const replay_option_t& option);

// What --help shows for the value: "N", "BYTES", "host|device|auto", "" for a flag, ...
const char* value_placeholder(const replay_option_t& option);

// The options part of --help: one line per row with a flag, "  --passes N   <help> (default 5)".
std::string options_help();

// Stores a parsed value into the field `Field` of the configuration (the table's store functions).
template <auto Field>
void store_field(replay_config_t* config, const parsed_value_t& value) {
  using field_t = std::remove_reference_t<decltype(config->*Field)>;
  if constexpr (std::is_same_v<field_t, bool>) {
    config->*Field = value.number != 0;
  } else if constexpr (std::is_same_v<field_t, std::string>) {
    config->*Field = value.text;
  } else if constexpr (std::is_floating_point_v<field_t>) {
    config->*Field = value.real;
  } else {
    config->*Field = static_cast<field_t>(value.number);  // integers and the choices' enums
  }
}

// The row that fills `store`'s field, or nullptr.
const replay_option_t* option_storing(void (*store)(replay_config_t*, const parsed_value_t&));

// The variable and the flag of the row that fills `Field` ("" when none): the launcher sets the enabling
// variable and the process id itself, and the selector's reasons name the flags.
template <auto Field>
const char* variable_of() {
  const replay_option_t* option = option_storing(&store_field<Field>);
  return option != nullptr ? option->variable : "";
}
template <auto Field>
const char* flag_of() {
  const replay_option_t* option = option_storing(&store_field<Field>);
  return option != nullptr && option->flag != nullptr ? option->flag : "";
}

// Reads the configuration through `get` (std::getenv in the library): every row's variable, or its default
// when unset or "" (but for pattern_or_empty, where "" is a value). False, with the first problem in *error
// (which names the variable and the value), when a value is malformed; a replay is then not started.
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
  // A graph launch, as one launch: it matches --kernel-name when one of its kernels does, and is excluded when
  // one of its kernels is (a communication kernel replayed inside a graph hangs as it would on a stream), or has
  // no name while there is an exclusion list.
  verdict classify_graph(const std::vector<std::string>& kernels);
  // A graph launch in node mode, before its kernel nodes are classified one by one (with classify, so that the
  // filter, --launch-skip and --launch-count number kernel nodes as launches): excluded as classify_graph says
  // (node mode would run a communication kernel twice); not_matched when no kernel node matches; skipped or
  // count_reached when none of the matching nodes could be replayed (they are counted then, and the graph runs
  // once); replay otherwise, nothing counted.
  verdict precheck_nodes(const std::vector<std::string>& kernels);
  static const char* text(verdict v);

 private:
  // A launch that matched the filter: counted against --launch-skip and --launch-count, then excluded or replayed.
  verdict count_match(bool excluded);

  bool has_filter_;
  bool has_exclude_;
  name_pattern filter_;
  name_pattern exclude_;
  uint64_t skip_;
  uint64_t count_;
  uint64_t matched_ = 0;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_CONFIG_HPP
