// GPU-free tests of kreplay-cuda-replay's options table (adapters/cuda/src/inject/replay_config.cpp) and of the
// kernel-name patterns (name_pattern.cpp): every row parses its default and refuses a malformed value naming
// its variable, --help (the launcher's own, run here) lists every row, and the patterns answer as std::regex
// did on every pattern both take, in linear time on long names.
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <regex>
#include <string>

#include "fakes.hpp"
#include "name_pattern.hpp"
#include "replay_config.hpp"

using namespace kreplay::cuda::inject;

namespace {

bool parse(const std::map<std::string, std::string>& values, replay_config_t* out, std::string* error) {
  auto get = [&](const char* name) -> const char* {
    const auto found = values.find(name);
    return found != values.end() ? found->second.c_str() : nullptr;
  };
  return parse_replay_config(get, out, error);
}

bool compiles(const char* text) {
  name_pattern pattern;
  std::string why;
  return name_pattern::compile(text, &pattern, &why);
}

bool finds(const char* text, const char* name) {
  name_pattern pattern;
  std::string why;
  CHECK(name_pattern::compile(text, &pattern, &why));
  return pattern.search(name);
}

// A value of the row's kind that it must refuse ("" for a kind that takes any text).
const char* malformed(option_kind kind) {
  switch (kind) {
    case option_kind::flag_on:
    case option_kind::flag_off: return "2";
    case option_kind::on_off: return "maybe";
    case option_kind::count: return "12x";
    case option_kind::choice: return "nowhere";
    case option_kind::bytes: return "5MB";
    case option_kind::seconds: return "-1";
    case option_kind::pattern:
    case option_kind::pattern_or_empty: return "((";
    case option_kind::name_list: return "sm__cycles_elapsed.avg,,x";
    case option_kind::path:
    case option_kind::text: return "";
  }
  return "";
}

void the_table_s_defaults_are_the_struct_s() {
  replay_config_t parsed;
  std::string error;
  CHECK(parse({}, &parsed, &error));
  const replay_config_t plain;
  CHECK(parsed.enabled == plain.enabled && parsed.passes == plain.passes && parsed.kernel_regex == plain.kernel_regex);
  CHECK(parsed.launch_skip == plain.launch_skip && parsed.launch_count == plain.launch_count);
  CHECK(parsed.tier == plain.tier && parsed.dirty_only == plain.dirty_only && parsed.verify == plain.verify);
  CHECK(parsed.device_budget == plain.device_budget && parsed.backend == plain.backend);
  CHECK(parsed.output == plain.output && parsed.exclude == plain.exclude && parsed.restore == plain.restore);
  CHECK(parsed.progress_seconds == plain.progress_seconds && parsed.launcher_pid == plain.launcher_pid);
  CHECK(parsed.write_set == plain.write_set && parsed.host_budget_percent == plain.host_budget_percent);
  CHECK(parsed.write_set && parsed.host_budget_percent == 50);
  CHECK(parsed.graphs == plain.graphs && parsed.graphs == graph_profiling::node);
  CHECK(parsed.metrics == plain.metrics && parsed.metrics.empty());
  CHECK(parsed.caches == plain.caches && parsed.caches == cache_control::all);
  CHECK(parsed.ranges == plain.ranges && parsed.ranges == profiler_ranges::automatic);
  // They reach the policy: learn_write_set and host_budget_percent.
  const kreplay_policy_t policy = replay_policy(parsed, kreplay_policy_t{});
  CHECK(policy.learn_write_set && policy.host_budget_percent == 50);
  // Control: a value given is not the default.
  CHECK(parse({{variable_of<&replay_config_t::passes>(), "7"}}, &parsed, &error) && parsed.passes == 7);
  const std::string budget = variable_of<&replay_config_t::host_budget_percent>();
  CHECK(parse({{variable_of<&replay_config_t::write_set>(), "off"}, {budget, "0"}}, &parsed, &error));
  CHECK(!parsed.write_set && parsed.host_budget_percent == 0);
  CHECK(!parse({{budget, "101"}}, &parsed, &error));  // above 100: refused
  CHECK(parse({{variable_of<&replay_config_t::ranges>(), "user"}}, &parsed, &error));
  CHECK(parsed.ranges == profiler_ranges::user);
}

void every_row_refuses_a_malformed_value_naming_its_variable() {
  size_t refused = 0;
  for (const replay_option_t& option : replay_options()) {
    const char* bad = malformed(option.value.kind);
    if (*bad == '\0') {
      continue;
    }
    replay_config_t out;
    std::string error;
    CHECK(!parse({{option.variable, bad}}, &out, &error));
    CHECK(error.find(std::string(option.variable) + "=" + bad + " is not ") == 0);
    ++refused;
  }
  CHECK(refused + 1 == static_cast<size_t>(replay_options().end() - replay_options().begin()));  // all but -o FILE
  replay_config_t out;
  std::string error;
  CHECK(!parse({{variable_of<&replay_config_t::passes>(), "1001"}}, &out, &error));
  CHECK(error == "KREPLAY_REPLAY_PASSES=1001 is not a number of passes from 1 to 1000");
  CHECK(!parse({{variable_of<&replay_config_t::tier>(), "gpu"}}, &out, &error));
  CHECK(error == "KREPLAY_REPLAY_TIER=gpu is not host, device or auto");
  // "" is a value of its own only for the exclusion list; elsewhere it is the default.
  CHECK(parse({{variable_of<&replay_config_t::exclude>(), ""}, {variable_of<&replay_config_t::passes>(), ""}}, &out,
              &error));
  CHECK(out.exclude.empty() && out.passes == 5);
}

void the_launcher_s_help_lists_every_row_with_a_flag() {
  std::string help;
  FILE* launcher = popen(KREPLAY_LAUNCHER " --help", "r");
  CHECK(launcher != nullptr);
  char buffer[4096];
  for (size_t got; (got = std::fread(buffer, 1, sizeof(buffer), launcher)) > 0;) {
    help.append(buffer, got);
  }
  CHECK(pclose(launcher) == 0);
  CHECK(help.find(options_help()) != std::string::npos);
  size_t listed = 0;
  for (const replay_option_t& option : replay_options()) {
    if (option.flag == nullptr) {
      CHECK(help.find(option.help) == std::string::npos);  // the launcher sets these itself
      continue;
    }
    const std::string left = std::string("--") + option.flag + (takes_value(option) ? " " : "") +
                             value_placeholder(option);
    CHECK(help.find(left) != std::string::npos);
    CHECK(help.find(option.help) != std::string::npos);
    if (option.default_value != nullptr && takes_value(option)) {
      CHECK(help.find(std::string("(default ") + option.default_value + ")") != std::string::npos);
    }
    ++listed;
  }
  CHECK(listed == 22);
  CHECK(help.find("-o, --output FILE") != std::string::npos);
  CHECK(help.find("--frobnicate") == std::string::npos);  // control: the search can fail
}

void the_selector_s_reasons_name_the_flags_as_before() {
  using v = launch_selector::verdict;
  CHECK(std::strcmp(launch_selector::text(v::not_matched), "not selected: the name does not match --kernel-name") == 0);
  CHECK(std::strcmp(launch_selector::text(v::skipped), "not selected: within --launch-skip") == 0);
  CHECK(std::strcmp(launch_selector::text(v::count_reached), "not selected: past --launch-count") == 0);
  CHECK(std::strcmp(launch_selector::text(v::excluded), "excluded: a communication kernel (--exclude), run once") == 0);
  CHECK(std::strcmp(variable_of<&replay_config_t::launcher_pid>(), "KREPLAY_REPLAY_PID") == 0);
}

void patterns_take_the_documented_syntax() {
  CHECK(finds("^gemm", "gemm_relu") && !finds("^gemm", "sgemm"));
  CHECK(finds("kernel$", "add_kernel") && !finds("kernel$", "kernel_b"));
  CHECK(finds("nccl|nvshmem", "ncclDevKernel_AllReduce") && finds("nccl|nvshmem", "nvshmemi_barrier"));
  CHECK(!finds("nccl|nvshmem", "cutlass_gemm"));
  CHECK(finds("_Z\\d+gemm", "_Z12gemm_kernelPf") && finds("[[:upper:]]{2}\\b", "run AB"));
  CHECK(finds("(?:ab){2,3}c", "xababc") && !finds("(?:ab){2,3}c", "xabc"));
  CHECK(finds("a.c", "abc") && !finds("a.c", "a\nc"));
  CHECK(finds("", "anything"));
  // Refused, each with its reason: malformed, or what a linear matcher cannot do.
  for (const char* refused : {"((", "[a", "a)", "*a", "a{2,1}", "(a)\\1", "a(?=b)", "a(?!b)", "\\u0041", "\\q"}) {
    name_pattern pattern;
    std::string why;
    CHECK(!name_pattern::compile(refused, &pattern, &why) && !why.empty());
  }
  CHECK(compiles("a(b)c"));  // control
  CHECK(!name_pattern().search("anything"));
}

// Random patterns over a small alphabet of ECMAScript pieces: every pattern this matcher takes, std::regex
// takes too and answers the same on every name. Patterns it refuses are only those outside the syntax.
void patterns_answer_as_std_regex_did() {
  const char* pieces[] = {"a", "b", "_", "1", ".", "^", "$", "|", "(", ")", "*", "+", "?", "[ab]", "[^a]",
                          "\\d", "\\w", "\\b", "\\B", "{1,2}", "{2}", "{0,}", "(?:", "[a-c]", "\\.", "\\s",
                          "[[:digit:]]", "*?", "-", "[-a]", "\\W", "[]", "[^]", "\\x61", "[\\d-]", "]", "}"};
  const char* names[] = {"", "a", "ab", "ba", "abc", "a_1", "1a", "aab.c", "a b", "__a1b", "abab", "a.b", "-a"};
  std::mt19937 random(26);
  size_t both = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    for (unsigned n = 1 + random() % 6; n > 0; --n) {
      text += pieces[random() % (sizeof(pieces) / sizeof(pieces[0]))];
    }
    name_pattern mine;
    std::string why;
    const bool mine_ok = name_pattern::compile(text, &mine, &why);
    std::regex theirs;
    bool theirs_ok = true;
    try {
      theirs = std::regex(text, std::regex::ECMAScript);
    } catch (const std::regex_error&) {
      theirs_ok = false;
    }
    CHECK(mine_ok == theirs_ok);
    if (!mine_ok) {
      continue;
    }
    ++both;
    for (const char* name : names) {
      CHECK(mine.search(name) == std::regex_search(name, theirs));
    }
  }
  CHECK(both > 5000);
}

void long_names_match_in_linear_time_without_recursion() {
  const std::string name(200000, 'a');  // std::regex recurses per character on `.*` over such a name
  CHECK(finds(".*b|a$", name.c_str()));
  CHECK(!finds("(a*)*b", name.c_str()));  // exponential for a backtracking matcher
  CHECK(!finds("^(a|aa)+$x", name.c_str()));
  name_pattern large;
  std::string why;
  CHECK(!name_pattern::compile("(((a{1000}){1000}){1000})", &large, &why));  // too many steps: refused
  // Runs of quantifiers and deep nesting are refused before they could take a thread's stack (the pattern is
  // compiled on the thread that called cuInit); a few are taken, as std::regex takes them.
  CHECK(!name_pattern::compile("a" + std::string(999, '*'), &large, &why) && !why.empty());
  CHECK(!name_pattern::compile(std::string(100, '(') + "a" + std::string(100, ')'), &large, &why));
  CHECK(name_pattern::compile("a***", &large, &why) && large.search("aaa"));
}

}  // namespace

int main() {
  RUN_TEST(the_table_s_defaults_are_the_struct_s);
  RUN_TEST(every_row_refuses_a_malformed_value_naming_its_variable);
  RUN_TEST(the_launcher_s_help_lists_every_row_with_a_flag);
  RUN_TEST(the_selector_s_reasons_name_the_flags_as_before);
  RUN_TEST(patterns_take_the_documented_syntax);
  RUN_TEST(patterns_answer_as_std_regex_did);
  RUN_TEST(long_names_match_in_linear_time_without_recursion);
  return 0;
}
