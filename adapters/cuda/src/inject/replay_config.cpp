// kreplay-cuda-replay's options as one table (below), the parser and --help that read it, the replay's kreplay
// policy, and the launch selector. Shared by the injection library and the launcher.
#include "replay_config.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace kreplay::cuda::inject {
namespace {

// ---- How a row is written: its kind, the field it fills and its limits, checked against the field's type ------

template <auto Field>
using field_of = std::remove_reference_t<decltype(std::declval<replay_config_t&>().*Field)>;

template <auto Field>
constexpr option_value_t flag(option_kind kind) {
  static_assert(std::is_same_v<field_of<Field>, bool>, "a flag or on|off fills a bool");
  return {kind, "", 0, 1, &store_field<Field>};
}

template <auto Field>
constexpr option_value_t count(uint64_t min, uint64_t max, const char* what) {
  static_assert(std::is_integral_v<field_of<Field>> && !std::is_same_v<field_of<Field>, bool>, "a count");
  return {option_kind::count, what, min, max, &store_field<Field>};
}

template <auto Field>
constexpr option_value_t choice(const char* words) {
  static_assert(std::is_enum_v<field_of<Field>>, "a choice fills an enum, its words in the enum's order");
  return {option_kind::choice, words, 0, 0, &store_field<Field>};
}

template <auto Field>
constexpr option_value_t bytes() {
  static_assert(std::is_same_v<field_of<Field>, size_t>, "a byte count fills a size_t");
  return {option_kind::bytes, "", 0, 0, &store_field<Field>};
}

template <auto Field>
constexpr option_value_t seconds(uint64_t max) {
  static_assert(std::is_floating_point_v<field_of<Field>>, "seconds fill a double");
  return {option_kind::seconds, "a number of seconds", 0, max, &store_field<Field>};
}

template <auto Field>
constexpr option_value_t text(option_kind kind) {
  static_assert(std::is_same_v<field_of<Field>, std::string>, "a pattern, a path or a text fills a string");
  return {kind, "", 0, 0, &store_field<Field>};
}

using c = replay_config_t;
using k = option_kind;
constexpr uint64_t no_limit = std::numeric_limits<uint64_t>::max();

// The options, one row each: {flag, short flag, variable, kind<field>(limits), default, help}. The order is
// --help's and the order in which the variables are checked.
// clang-format off
constexpr replay_option_t options[] = {
  {nullptr, 0, "KREPLAY_REPLAY", flag<&c::enabled>(k::flag_on), "0", "the launcher asks for a replay"},
  {"passes", 0, "KREPLAY_REPLAY_PASSES", count<&c::passes>(1, 1000, "a number of passes"), "5",
   "passes per replayed launch, 1 to 1000"},
  {"kernel-name", 0, "KREPLAY_REPLAY_KERNEL_NAME", text<&c::kernel_regex>(k::pattern), nullptr,
   "replay only kernels whose name matches (ECMAScript, searched anywhere in the mangled name; no "
   "back-references or look-arounds)"},
  {"launch-skip", 0, "KREPLAY_REPLAY_LAUNCH_SKIP", count<&c::launch_skip>(0, no_limit, "a number of launches"), "0",
   "run the first N matching launches once"},
  {"launch-count", 0, "KREPLAY_REPLAY_LAUNCH_COUNT", count<&c::launch_count>(0, no_limit, "a number of launches"),
   "0", "replay at most N matching launches, 0 for all"},
  {"tier", 0, "KREPLAY_REPLAY_TIER", choice<&c::tier>("host|device|auto"), "host",
   "where snapshots live: host staging, device memory (spilling to host past the budget), or auto (at most "
   "half of the free device memory at each capture, the rest on the host)"},
  {"dirty-only", 0, "KREPLAY_REPLAY_DIRTY_ONLY", flag<&c::dirty_only>(k::on_off), "on",
   "restore and re-capture only changed blocks"},
  {"write-set", 0, "KREPLAY_REPLAY_WRITE_SET", flag<&c::write_set>(k::on_off), "on",
   "with dirty-only, restores between passes check only the blocks pass 1 wrote; the last is checked whole"},
  {"host-budget", 0, "KREPLAY_REPLAY_HOST_BUDGET", count<&c::host_budget_percent>(0, 100, "a percent"), "50",
   "percent of the available host memory a snapshot may take (0 for no limit); above it, run once"},
  {"device-budget", 0, "KREPLAY_REPLAY_DEVICE_BUDGET", bytes<&c::device_budget>(), nullptr,
   "device memory snapshots may hold (K, M, G; default: the tier's)"},
  {"verify", 0, "KREPLAY_REPLAY_VERIFY", flag<&c::verify>(k::flag_on), nullptr,
   "compare every pass's footprint with pass 1's (block digests)"},
  {"backend", 0, "KREPLAY_REPLAY_BACKEND", choice<&c::backend>("kreplay|cupti|cupti-kernel-replay"), "kreplay",
   "kreplay; or for a side-by-side measurement CUPTI's Checkpoint API (cupti), or CUPTI's own kernel replay with "
   "the same metrics (cupti-kernel-replay: needs --set or --metrics; CUPTI saves, restores and runs the passes)"},
  {"graph-profiling", 0, "KREPLAY_REPLAY_GRAPH_PROFILING", choice<&c::graphs>("node|graph|off"), "node",
   "CUDA graph launches: node replays each selected kernel node as a stream launch is (its own snapshot, passes "
   "and row) and then runs the graph itself once from the memory before it; graph replays the whole graph as one "
   "window (one row per graph launch); off runs them once. A graph node mode cannot run faithfully is replayed "
   "in graph mode, with why in its row"},
  {"set", 0, "KREPLAY_REPLAY_SET", choice<&c::set>("none|counts|speed|full|warps"), "none",
   "a named list of metrics, counted as --metrics' are (and before them): counts (instructions, warps, loads and "
   "stores: exact counts), speed (time, cycles and the speed of light of the SMs, L1, L2 and DRAM), full (both, "
   "with bytes and hit rates at each memory level, IPC, occupancy and pipes), warps (the counts, issue rate, "
   "occupancy, why warps stalled, and time: the SMs' counters and the duration, which CUPTI sets up far faster "
   "a pass than those of L2 and DRAM)"},
  {"metrics", 0, "KREPLAY_REPLAY_METRICS", text<&c::metrics>(k::name_list), nullptr,
   "hardware metrics of every replayed launch (Nsight Compute's names), one CSV column each, by CUPTI's Range "
   "Profiler in user replay: a launch gets at least the passes they need; in node mode every kernel node is "
   "counted, a graph replayed whole is not"},
  {"replay-mode", 0, "KREPLAY_REPLAY_MODE", choice<&c::mode>("kernel|range"), "kernel",
   "kernel: every launch its own window and passes; range: up to --range-size consecutive launches of a thread "
   "run first as the program made them, then kreplay's passes replay them together from the memory before the "
   "first (with counters: one profiler range per launch, the profiler's cost per pass paid once for all), and the "
   "memory after the last is put back; a range ends early at a copy, memset, synchronisation or free on its "
   "thread, and at a launch it does not take"},
  {"range-size", 0, "KREPLAY_REPLAY_RANGE_SIZE", count<&c::range_size>(1, 4096, "a number of launches"), "32",
   "range mode: launches per range at most, 1 to 4096"},
  {"profiler-ranges", 0, "KREPLAY_REPLAY_PROFILER_RANGES", choice<&c::ranges>("user|auto"), "auto",
   "range mode with counters: auto lets CUPTI take each launch between a pass's Start and Stop as a range (no "
   "calls between the launches); user pushes and pops a profiler range around each launch's relaunch (its time "
   "metrics then include the push and the pop)"},
  {"cache-control", 0, "KREPLAY_REPLAY_CACHE_CONTROL", choice<&c::caches>("all|none"), "all",
   "with counters: all writes a buffer twice the L2's size before every counted pass (as Nsight Compute does), so "
   "each pass starts from a cold cache; none leaves the caches as the restore left them"},
  {"exclude", 0, "KREPLAY_REPLAY_EXCLUDE", text<&c::exclude>(k::pattern_or_empty), default_exclude,
   "kernels never replayed, run once (communication kernels hang under replay; \"\" excludes nothing)"},
  {"progress", 0, "KREPLAY_REPLAY_PROGRESS", seconds<&c::progress_seconds>(86400), "5",
   "seconds between progress lines on stderr, 0 for none"},
  {"debug-no-restore", 0, "KREPLAY_REPLAY_RESTORE", flag<&c::restore>(k::flag_off), nullptr,
   "debug: relaunch without restoring (results then differ: the control of a correctness test)"},
  {"output", 'o', "KREPLAY_REPLAY_OUTPUT", text<&c::output>(k::path), nullptr, "the CSV report, one row per launch"},
  {nullptr, 0, "KREPLAY_REPLAY_PID", count<&c::launcher_pid>(0, no_limit, "a process id"), nullptr,
   "the launcher's process id, which is the program's"},
};
// clang-format on

bool parse_unsigned(const char* text, uint64_t max, uint64_t* out) {
  if (text == nullptr || *text < '0' || *text > '9') {
    return false;
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || value > max) {
    return false;
  }
  *out = value;
  return true;
}

bool parse_switch(const char* text, uint64_t* out) {
  if (std::strcmp(text, "1") == 0 || std::strcmp(text, "on") == 0) {
    *out = 1;
    return true;
  }
  if (std::strcmp(text, "0") == 0 || std::strcmp(text, "off") == 0) {
    *out = 0;
    return true;
  }
  return false;
}

// The index of `text` among "a|b|c".
bool parse_choice(const char* text, const char* words, uint64_t* out) {
  const size_t length = std::strlen(text);
  uint64_t index = 0;
  for (const char* word = words;; ++index) {
    const char* bar = std::strchr(word, '|');
    const size_t word_length = bar != nullptr ? static_cast<size_t>(bar - word) : std::strlen(word);
    if (word_length == length && std::strncmp(word, text, length) == 0) {
      *out = index;
      return true;
    }
    if (bar == nullptr) {
      return false;
    }
    word = bar + 1;
  }
}

// "host|device|auto" as "host, device or auto".
std::string listed(const char* words) {
  std::string out;
  const char* word = words;
  for (const char* bar = std::strchr(word, '|'); bar != nullptr; bar = std::strchr(word, '|')) {
    out.append(word, static_cast<size_t>(bar - word));
    word = bar + 1;
    out += std::strchr(word, '|') != nullptr ? ", " : " or ";
  }
  return out + word;
}

// What a value must be, for the refusal: "a number of passes from 1 to 1000", "host, device or auto", ...
std::string wanted(const option_value_t& value) {
  switch (value.kind) {
    case option_kind::flag_on:
    case option_kind::flag_off: return "0 or 1";
    case option_kind::on_off: return "on or off";
    case option_kind::choice: return listed(value.words);
    case option_kind::bytes: return "a byte count (a number, or with K, M or G)";
    case option_kind::count:
    case option_kind::seconds:
      return value.max == no_limit ? value.words
                                   : std::string(value.words) + " from " + std::to_string(value.min) + " to " +
                                         std::to_string(value.max);
    case option_kind::pattern:
    case option_kind::pattern_or_empty: return "a valid regular expression";
    case option_kind::path: return "a file name";
    case option_kind::name_list: return "metric names separated by commas";
    case option_kind::text: return "a text";
  }
  return "valid";
}

// Parses one value of its row's kind; false, with what was wrong in *why for a pattern.
bool parse_value(const option_value_t& value, const char* text, parsed_value_t* out, std::string* why) {
  out->text = text;
  switch (value.kind) {
    case option_kind::flag_on:
    case option_kind::flag_off:
    case option_kind::on_off: return parse_switch(text, &out->number);
    case option_kind::choice: return parse_choice(text, value.words, &out->number);
    case option_kind::count:
      return parse_unsigned(text, value.max, &out->number) && out->number >= value.min;
    case option_kind::bytes: {
      size_t bytes = 0;
      const bool ok = parse_bytes(text, &bytes);
      out->number = bytes;
      return ok;
    }
    case option_kind::seconds: {
      char* end = nullptr;
      out->real = std::strtod(text, &end);
      return end != text && *end == '\0' && out->real >= static_cast<double>(value.min) &&
             out->real <= static_cast<double>(value.max);
    }
    case option_kind::pattern:
    case option_kind::pattern_or_empty: {
      name_pattern check;
      return *text == '\0' || name_pattern::compile(text, &check, why);
    }
    case option_kind::name_list: {
      std::vector<std::string> names;
      return *text == '\0' || parse_metric_list(text, &names, why);
    }
    case option_kind::path:
    case option_kind::text: return true;
  }
  return false;
}

}  // namespace

bool parse_metric_list(const std::string& text, std::vector<std::string>* out, std::string* why) {
  out->clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t end = comma == std::string::npos ? text.size() : comma;
    const std::string name = text.substr(start, end - start);
    if (name.empty()) {
      *why = "an empty metric name in \"" + text + "\"";
      return false;
    }
    for (char c : name) {
      const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                           c == '.' || c == ':';
      if (!allowed) {
        *why = "the metric name \"" + name + "\" has a character no metric name has ('" + std::string(1, c) + "')";
        return false;
      }
    }
    out->push_back(name);
    start = end + 1;
  }
  return true;
}

namespace {

// The sets' metrics (Nsight Compute's names), the speed of light first where a set has it.
constexpr const char* counts_set[] = {
    "smsp__inst_executed.sum", "sm__warps_launched.sum", "smsp__sass_inst_executed_op_global_ld.sum",
    "smsp__sass_inst_executed_op_global_st.sum", "l1tex__t_bytes.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
};
constexpr const char* speed_set[] = {
    "gpu__time_duration.sum", "sm__cycles_elapsed.avg", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
};
constexpr const char* full_extra[] = {
    "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum", "lts__t_sector_hit_rate.pct",
    "l1tex__t_sector_hit_rate.pct", "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum", "smsp__inst_executed.avg.per_cycle_active",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__inst_executed_pipe_tensor.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
};

// Where the SMs' time goes, from counters in the SMs alone (9 passes on GH100, the last the duration's): on the
// H200 CUPTI's Start and Stop took about 2.6 ms for each of those passes, and 10 to 25 ms for a pass that holds
// L2, DRAM or elapsed-cycle counters (docs/results/2026-12-03-h200-e.md).
constexpr const char* warps_extra[] = {
    "smsp__issue_active.avg.per_cycle_active",
    "smsp__inst_executed.avg.per_cycle_active",
    "smsp__warps_active.avg.per_cycle_active",
    "smsp__warps_eligible.avg.per_cycle_active",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "smsp__average_warps_active_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_drain_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_membar_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_misc_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    "gpu__time_duration.sum",
    "sm__cycles_active.avg",
};

void add_new(std::vector<std::string>* out, const std::string& name) {
  if (std::find(out->begin(), out->end(), name) == out->end()) {
    out->push_back(name);
  }
}

template <size_t N>
void add_new(std::vector<std::string>* out, const char* const (&names)[N]) {
  for (const char* name : names) {
    add_new(out, name);
  }
}

}  // namespace

bool counted_metrics(const replay_config_t& config, std::vector<std::string>* out, std::string* why) {
  out->clear();
  if (config.set == metric_set::speed || config.set == metric_set::full) {
    add_new(out, speed_set);
  }
  if (config.set == metric_set::counts || config.set == metric_set::full) {
    add_new(out, counts_set);
  }
  if (config.set == metric_set::full) {
    add_new(out, full_extra);
  }
  if (config.set == metric_set::warps) {
    add_new(out, counts_set);
    add_new(out, warps_extra);
  }
  std::vector<std::string> listed;
  if (!config.metrics.empty() && !parse_metric_list(config.metrics, &listed, why)) {
    return false;
  }
  for (const std::string& name : listed) {
    add_new(out, name);
  }
  return true;
}

option_table_t replay_options() { return {std::begin(options), std::end(options)}; }

bool takes_value(const replay_option_t& option) {
  return option.value.kind != option_kind::flag_on && option.value.kind != option_kind::flag_off;
}

const char* value_placeholder(const replay_option_t& option) {
  switch (option.value.kind) {
    case option_kind::flag_on:
    case option_kind::flag_off: return "";
    case option_kind::on_off: return "on|off";
    case option_kind::count: return "N";
    case option_kind::choice: return option.value.words;
    case option_kind::bytes: return "BYTES";
    case option_kind::seconds: return "SECONDS";
    case option_kind::pattern:
    case option_kind::pattern_or_empty: return "REGEX";
    case option_kind::path: return "FILE";
    case option_kind::name_list: return "NAME[,NAME...]";
    case option_kind::text: return "TEXT";
  }
  return "";
}

std::string options_help() {
  std::string out;
  for (const replay_option_t& option : options) {
    if (option.flag == nullptr) {
      continue;
    }
    std::string left = option.short_flag != '\0' ? std::string("-") + option.short_flag + ", " : "";
    left += std::string("--") + option.flag;
    left += takes_value(option) ? std::string(" ") + value_placeholder(option) : "";
    std::string help = option.help;
    if (option.default_value != nullptr && takes_value(option)) {
      help += std::string(" (default ") + option.default_value + ")";
    }
    char line[1024];
    std::snprintf(line, sizeof(line), "  %-32s %s\n", left.c_str(), help.c_str());
    out += line;
  }
  return out;
}

const replay_option_t* option_storing(void (*store)(replay_config_t*, const parsed_value_t&)) {
  for (const replay_option_t& option : options) {
    if (option.value.store == store) {
      return &option;
    }
  }
  return nullptr;
}

bool parse_bytes(const char* text, size_t* out) {
  if (text == nullptr || *text < '0' || *text > '9') {
    return false;
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0) {
    return false;
  }
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') {
    shift = 10;
  } else if (*end == 'M' || *end == 'm') {
    shift = 20;
  } else if (*end == 'G' || *end == 'g') {
    shift = 30;
  } else if (*end != '\0') {
    return false;
  }
  if (shift != 0 && end[1] != '\0') {
    return false;
  }
  if (value > (std::numeric_limits<size_t>::max() >> shift)) {
    return false;
  }
  *out = static_cast<size_t>(value) << shift;
  return true;
}

bool parse_replay_config(const std::function<const char*(const char*)>& get, replay_config_t* out,
                         std::string* error) {
  replay_config_t config;
  for (const replay_option_t& option : options) {
    const char* text = get(option.variable);
    if (text == nullptr || (*text == '\0' && option.value.kind != option_kind::pattern_or_empty)) {
      text = option.default_value;
    }
    if (text == nullptr) {
      continue;
    }
    parsed_value_t value;
    std::string why;
    if (!parse_value(option.value, text, &value, &why)) {
      *error = std::string(option.variable) + "=" + text + " is not " + wanted(option.value) +
               (why.empty() ? "" : " (" + why + ")");
      return false;
    }
    option.value.store(&config, value);
  }
  if (config.backend == replay_backend::cupti_kernel_replay && config.metrics.empty() &&
      config.set == metric_set::none) {
    *error = std::string(variable_of<&replay_config_t::backend>()) +
             "=cupti-kernel-replay counts metrics: give --set or --metrics";
    return false;
  }
  if (config.backend == replay_backend::cupti_kernel_replay && config.mode == replay_mode::range) {
    // CUPTI replays each launch inside its own call: there is no range of launches for it to replay together.
    *error = std::string(variable_of<&replay_config_t::backend>()) +
             "=cupti-kernel-replay runs each launch's passes itself: it takes --replay-mode kernel, not range";
    return false;
  }
  if (config.backend != replay_backend::kreplay && config.tier != replay_tier::host) {
    // CUPTI's Checkpoint API chooses its own storage (device memory first): the tier options are kreplay's.
    config.tier = replay_tier::host;
  }
  *out = std::move(config);
  return true;
}

kreplay_policy_t replay_policy(const replay_config_t& config, kreplay_policy_t base) {
  kreplay_policy_t policy = base;
  policy.dirty_only = config.dirty_only;
  policy.learn_write_set = config.write_set;
  policy.host_budget_percent = config.host_budget_percent;
  switch (config.tier) {
    case replay_tier::host:
      policy.device_budget_bytes = 0;
      policy.device_budget_percent = 0;
      break;
    case replay_tier::device:
      // As much as the device has, unless a budget is given; beyond it kreplay spills to host staging.
      policy.device_budget_bytes = config.device_budget != 0 ? config.device_budget : SIZE_MAX / 2;
      policy.device_budget_percent = config.device_budget != 0 ? 0 : 90;
      break;
    case replay_tier::automatic:
      // Half of the free device memory at each capture (and at most the budget): the program keeps room.
      policy.device_budget_bytes = config.device_budget != 0 ? config.device_budget : SIZE_MAX / 2;
      policy.device_budget_percent = 50;
      break;
  }
  return policy;
}

launch_selector::launch_selector(const replay_config_t& config)
    : has_filter_(!config.kernel_regex.empty()),
      has_exclude_(!config.exclude.empty()),
      skip_(config.launch_skip),
      count_(config.launch_count) {
  // parse_replay_config checked both patterns; one that does not compile (a configuration made by hand) is
  // no filter, and no exclusion, as before.
  std::string why;
  has_filter_ = has_filter_ && name_pattern::compile(config.kernel_regex, &filter_, &why);
  has_exclude_ = has_exclude_ && name_pattern::compile(config.exclude, &exclude_, &why);
}

launch_selector::verdict launch_selector::classify(const char* name) {
  const char* text = name != nullptr ? name : "";
  if (has_filter_ && !filter_.search(text)) {
    return verdict::not_matched;
  }
  return count_match(has_exclude_ && exclude_.search(text));
}

launch_selector::verdict launch_selector::count_match(bool excluded) {
  const uint64_t index = matched_++;
  if (index < skip_) {
    return verdict::skipped;
  }
  if (count_ != 0 && index - skip_ >= count_) {
    return verdict::count_reached;
  }
  return excluded ? verdict::excluded : verdict::replay;
}

launch_selector::verdict launch_selector::classify_graph(const std::vector<std::string>& kernels) {
  const auto any = [&kernels](const name_pattern& pattern) {
    return std::any_of(kernels.begin(), kernels.end(), [&pattern](const std::string& k) { return pattern.search(k.c_str()); });
  };
  if (has_filter_ && !any(filter_)) {
    return verdict::not_matched;
  }
  // A kernel without a name could be one the list excludes: while there is a list, the graph is excluded.
  const bool unnamed = std::any_of(kernels.begin(), kernels.end(), [](const std::string& k) { return k == "(unnamed)"; });
  return count_match(has_exclude_ && (unnamed || any(exclude_)));
}

launch_selector::verdict launch_selector::precheck_nodes(const std::vector<std::string>& kernels) {
  const bool unnamed = std::any_of(kernels.begin(), kernels.end(), [](const std::string& k) { return k == "(unnamed)"; });
  const auto excluded = [this](const std::string& k) { return exclude_.search(k.c_str()); };
  if (has_exclude_ && (unnamed || std::any_of(kernels.begin(), kernels.end(), excluded))) {
    return verdict::excluded;
  }
  const auto matching = static_cast<uint64_t>(std::count_if(
      kernels.begin(), kernels.end(), [this](const std::string& k) { return !has_filter_ || filter_.search(k.c_str()); }));
  if (matching == 0) {
    return verdict::not_matched;
  }
  const uint64_t last = matched_ + matching - 1;  // the index the last matching node would take
  if (last < skip_ || (count_ != 0 && matched_ >= skip_ && matched_ - skip_ >= count_)) {
    const verdict v = last < skip_ ? verdict::skipped : verdict::count_reached;
    matched_ += matching;
    return v;
  }
  return verdict::replay;
}

const char* launch_selector::text(verdict v) {
  // The reasons name the options by their flags, from the table (made once, thread-safe).
  static const std::string not_matched = std::string("not selected: the name does not match --") +
                                         flag_of<&replay_config_t::kernel_regex>();
  static const std::string skipped = std::string("not selected: within --") + flag_of<&replay_config_t::launch_skip>();
  static const std::string count_reached =
      std::string("not selected: past --") + flag_of<&replay_config_t::launch_count>();
  static const std::string excluded = std::string("excluded: a communication kernel (--") +
                                      flag_of<&replay_config_t::exclude>() + "), run once";
  switch (v) {
    case verdict::replay: return "replay";
    case verdict::not_matched: return not_matched.c_str();
    case verdict::skipped: return skipped.c_str();
    case verdict::count_reached: return count_reached.c_str();
    case verdict::excluded: return excluded.c_str();
  }
  return "?";
}

}  // namespace kreplay::cuda::inject
