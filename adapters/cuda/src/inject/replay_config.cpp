#include "replay_config.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace kreplay::cuda::inject {
namespace {

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

bool parse_switch(const char* text, bool* out) {
  if (std::strcmp(text, "1") == 0 || std::strcmp(text, "on") == 0) {
    *out = true;
    return true;
  }
  if (std::strcmp(text, "0") == 0 || std::strcmp(text, "off") == 0) {
    *out = false;
    return true;
  }
  return false;
}

bool compile(const std::string& pattern, std::regex* out) {
  try {
    *out = std::regex(pattern, std::regex::ECMAScript | std::regex::optimize);
    return true;
  } catch (const std::regex_error&) {
    return false;
  }
}

}  // namespace

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
  auto bad = [&](const char* name, const char* value, const char* want) {
    *error = std::string(name) + "=" + value + " is not " + want;
    return false;
  };
  auto value_of = [&](const char* name) -> const char* {
    const char* value = get(name);
    return value != nullptr && *value != '\0' ? value : nullptr;
  };
  if (const char* v = value_of("KREPLAY_REPLAY"); v != nullptr && !parse_switch(v, &config.enabled)) {
    return bad("KREPLAY_REPLAY", v, "0 or 1");
  }
  uint64_t number = 0;
  if (const char* v = value_of("KREPLAY_REPLAY_PASSES"); v != nullptr) {
    if (!parse_unsigned(v, 1000, &number) || number == 0) {
      return bad("KREPLAY_REPLAY_PASSES", v, "a number of passes from 1 to 1000");
    }
    config.passes = static_cast<uint32_t>(number);
  }
  if (const char* v = value_of("KREPLAY_REPLAY_KERNEL_NAME"); v != nullptr) {
    config.kernel_regex = v;
    std::regex check;
    if (!compile(config.kernel_regex, &check)) {
      return bad("KREPLAY_REPLAY_KERNEL_NAME", v, "a valid regular expression (ECMAScript)");
    }
  }
  if (const char* v = value_of("KREPLAY_REPLAY_LAUNCH_SKIP"); v != nullptr &&
                                                            !parse_unsigned(v, UINT64_MAX, &config.launch_skip)) {
    return bad("KREPLAY_REPLAY_LAUNCH_SKIP", v, "a number of launches");
  }
  if (const char* v = value_of("KREPLAY_REPLAY_LAUNCH_COUNT"); v != nullptr &&
                                                             !parse_unsigned(v, UINT64_MAX, &config.launch_count)) {
    return bad("KREPLAY_REPLAY_LAUNCH_COUNT", v, "a number of launches");
  }
  if (const char* v = value_of("KREPLAY_REPLAY_TIER"); v != nullptr) {
    if (std::strcmp(v, "host") == 0) {
      config.tier = replay_tier::host;
    } else if (std::strcmp(v, "device") == 0) {
      config.tier = replay_tier::device;
    } else if (std::strcmp(v, "auto") == 0) {
      config.tier = replay_tier::automatic;
    } else {
      return bad("KREPLAY_REPLAY_TIER", v, "host, device or auto");
    }
  }
  if (const char* v = value_of("KREPLAY_REPLAY_DIRTY_ONLY"); v != nullptr && !parse_switch(v, &config.dirty_only)) {
    return bad("KREPLAY_REPLAY_DIRTY_ONLY", v, "on or off");
  }
  if (const char* v = value_of("KREPLAY_REPLAY_DEVICE_BUDGET"); v != nullptr &&
                                                              !parse_bytes(v, &config.device_budget)) {
    return bad("KREPLAY_REPLAY_DEVICE_BUDGET", v, "a byte count (a number, or with K, M or G)");
  }
  if (const char* v = value_of("KREPLAY_REPLAY_VERIFY"); v != nullptr && !parse_switch(v, &config.verify)) {
    return bad("KREPLAY_REPLAY_VERIFY", v, "0 or 1");
  }
  if (const char* v = value_of("KREPLAY_REPLAY_BACKEND"); v != nullptr) {
    if (std::strcmp(v, "kreplay") == 0) {
      config.backend = replay_backend::kreplay;
    } else if (std::strcmp(v, "cupti") == 0) {
      config.backend = replay_backend::cupti;
    } else {
      return bad("KREPLAY_REPLAY_BACKEND", v, "kreplay or cupti");
    }
  }
  if (const char* v = value_of("KREPLAY_REPLAY_OUTPUT"); v != nullptr) {
    config.output = v;
  }
  if (const char* v = get("KREPLAY_REPLAY_EXCLUDE"); v != nullptr) {  // "" is meaningful: exclude nothing
    config.exclude = v;
    std::regex check;
    if (!config.exclude.empty() && !compile(config.exclude, &check)) {
      return bad("KREPLAY_REPLAY_EXCLUDE", v, "a valid regular expression (ECMAScript)");
    }
  }
  if (const char* v = value_of("KREPLAY_REPLAY_RESTORE"); v != nullptr && !parse_switch(v, &config.restore)) {
    return bad("KREPLAY_REPLAY_RESTORE", v, "0 or 1");
  }
  if (const char* v = value_of("KREPLAY_REPLAY_PROGRESS"); v != nullptr) {
    char* end = nullptr;
    const double seconds = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(seconds >= 0.0) || seconds > 86400.0) {
      return bad("KREPLAY_REPLAY_PROGRESS", v, "a number of seconds from 0 to 86400");
    }
    config.progress_seconds = seconds;
  }
  if (const char* v = value_of("KREPLAY_REPLAY_PID"); v != nullptr && !parse_unsigned(v, UINT64_MAX, &config.launcher_pid)) {
    return bad("KREPLAY_REPLAY_PID", v, "a process id");
  }
  if (config.backend == replay_backend::cupti && config.tier != replay_tier::host) {
    // CUPTI's Checkpoint API chooses its own storage (device memory first): the tier options are kreplay's.
    config.tier = replay_tier::host;
  }
  *out = std::move(config);
  return true;
}

kreplay_policy_t replay_policy(const replay_config_t& config, kreplay_policy_t base) {
  kreplay_policy_t policy = base;
  policy.dirty_only = config.dirty_only;
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
  // parse_replay_config checked both expressions.
  if (has_filter_ && !compile(config.kernel_regex, &filter_)) {
    has_filter_ = false;
  }
  if (has_exclude_ && !compile(config.exclude, &exclude_)) {
    has_exclude_ = false;
  }
}

launch_selector::verdict launch_selector::classify(const char* name) {
  const char* text = name != nullptr ? name : "";
  if (has_filter_ && !std::regex_search(text, filter_)) {
    return verdict::not_matched;
  }
  const uint64_t index = matched_++;
  if (index < skip_) {
    return verdict::skipped;
  }
  if (count_ != 0 && index - skip_ >= count_) {
    return verdict::count_reached;
  }
  if (has_exclude_ && std::regex_search(text, exclude_)) {
    return verdict::excluded;
  }
  return verdict::replay;
}

const char* launch_selector::text(verdict v) {
  switch (v) {
    case verdict::replay: return "replay";
    case verdict::not_matched: return "not selected: the name does not match --kernel-name";
    case verdict::skipped: return "not selected: within --launch-skip";
    case verdict::count_reached: return "not selected: past --launch-count";
    case verdict::excluded: return "excluded: a communication kernel (--exclude), run once";
  }
  return "?";
}

}  // namespace kreplay::cuda::inject
