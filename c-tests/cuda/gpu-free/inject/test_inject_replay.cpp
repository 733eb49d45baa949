// GPU-free tests of kreplay-cuda-replay's loop (adapters/cuda/src/inject/replay/) and of its options
// (replay_config.cpp): launches fabricated as CUPTI raises them, a fake driver whose "kernels" are host
// functions over host memory, and kreplay itself (real snapshots and restores through the injection's ops, with
// memcpy copies and a host digest). The program's own launch (pass 1) is run by the test between the ENTER
// and the EXIT callback, as the driver would.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "context_reset.hpp"
#include "cupti_layer.hpp"
#include "fakes.hpp"
#include "injection_ops.hpp"
#include "replay/replay.hpp"
#include "replay_config.hpp"
#include "tracker_callbacks.hpp"

using namespace kreplay::cuda::inject;

namespace {

const CUcontext ctx0 = fake::handle<CUcontext>(0x100);

// ---- Contexts: what the fake made in each, and calls that reach it with a destroyed context's handles ------------
CUcontext g_live_context = ctx0;           // where launches run and the fake makes events and storage now
std::set<CUcontext> g_dead_contexts;
std::map<const void*, CUcontext> g_made_in;  // an event, a storage block or a page-locked range: its context
int g_dead_calls = 0;
void check_alive(const void* handle) {
  auto found = g_made_in.find(handle);
  if (found != g_made_in.end() && g_dead_contexts.count(found->second) != 0) {
    ++g_dead_calls;
  }
}
// Whether [address, address + bytes) touches storage made in a destroyed context.
void check_range(const void* address, size_t bytes);

// ---- The fake device: kernels are host functions of (pass, argument) over one buffer --------------------------
alignas(64) int g_buffer[4096];
struct kernel_t {
  std::string name;
  std::function<void(int pass, int argument)> body;
};
std::map<CUfunction, kernel_t> g_kernels;
std::mutex g_device_mutex;                   // the fake device's tables, for the test with two threads
std::map<CUfunction, int> g_launches;        // relaunches made by the replayer, per function
std::vector<const void*> g_argument_sources; // where each relaunch read its argument from
thread_local int g_pass = 1;
CUresult g_relaunch_result = CUDA_SUCCESS;

CUresult synchronize() { return CUDA_SUCCESS; }
void run(CUfunction f, void** params) {
  const int argument = params != nullptr ? *static_cast<const int*>(params[0]) : 0;
  std::function<void(int, int)> body;
  {
    std::lock_guard<std::mutex> lock(g_device_mutex);
    g_argument_sources.push_back(params != nullptr ? params[0] : nullptr);
    ++g_launches[f];
    body = g_kernels.at(f).body;
  }
  body(++g_pass, argument);
}
CUresult launch(CUfunction f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                void** params, void**) {
  if (g_relaunch_result != CUDA_SUCCESS) {
    return g_relaunch_result;
  }
  run(f, params);
  return CUDA_SUCCESS;
}
CUresult launch_ex(const CUlaunchConfig*, CUfunction f, void** params, void**) {
  run(f, params);
  return CUDA_SUCCESS;
}
CUresult func_name(const char** name, CUfunction f) {
  auto found = g_kernels.find(f);
  if (found == g_kernels.end()) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *name = found->second.name.c_str();
  return CUDA_SUCCESS;
}
CUfunction g_pointer_kernel = nullptr;  // its one argument is 8 bytes (a pointer), the others' an int
CUresult param_info(CUfunction f, size_t index, size_t* offset, size_t* size) {
  if (index > 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *offset = 0;
  *size = f == g_pointer_kernel && f != nullptr ? sizeof(void*) : sizeof(int);
  return CUDA_SUCCESS;
}
CUresult event_create(CUevent* event, unsigned) {
  static uintptr_t next = 0x9000;
  *event = fake::handle<CUevent>(next++);
  g_made_in[*event] = g_live_context;
  return CUDA_SUCCESS;
}
CUresult event_record(CUevent event, CUstream) {
  check_alive(event);
  return CUDA_SUCCESS;
}
CUresult event_elapsed(float* ms, CUevent start, CUevent end) {
  check_alive(start);
  check_alive(end);
  *ms = 0.001f;
  return CUDA_SUCCESS;
}
CUresult event_destroy(CUevent event) {
  check_alive(event);
  g_made_in.erase(event);
  return CUDA_SUCCESS;
}

driver_api_t fake_driver() {
  driver_api_t d;
  d.ctx_synchronize = synchronize;
  d.launch_kernel = launch;
  d.launch_kernel_ex = launch_ex;
  d.launch_cooperative = [](CUfunction f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void** params) {
    run(f, params);
    return CUDA_SUCCESS;
  };
  d.func_get_name = func_name;
  d.func_get_param_info = param_info;
  d.event_create = event_create;
  d.event_record = event_record;
  d.event_elapsed = event_elapsed;
  d.event_destroy = event_destroy;
  return d;
}

// A digest per block: FNV-1a over its bytes (enough to tell equal blocks from different ones here).
kreplay_status_t digest(void*, kreplay_agent_t, const kreplay_digest_job_t* jobs, size_t count, size_t block) {
  for (size_t j = 0; j < count; ++j) {
    const auto* bytes = static_cast<const unsigned char*>(jobs[j].address);
    for (size_t at = 0, k = 0; at < jobs[j].bytes; at += block, ++k) {
      uint64_t h = 1469598103934665603ull;
      for (size_t i = at; i < jobs[j].bytes && i < at + block; ++i) {
        h = (h ^ bytes[i]) * 1099511628211ull;
      }
      std::memcpy(&jobs[j].digests_out[k], &h, sizeof(h));
      std::memset(reinterpret_cast<unsigned char*>(&jobs[j].digests_out[k]) + sizeof(h), 0,
                  sizeof(kreplay_digest_t) - sizeof(h));
    }
  }
  return KREPLAY_STATUS_SUCCESS;
}
// Device storage for the device tier: host memory, counted, each block remembered with its context.
size_t g_device_held = 0;
std::map<const void*, size_t> g_storage;
kreplay_status_t device_alloc(void*, kreplay_agent_t, size_t bytes, void** out) {
  *out = std::malloc(bytes);
  g_device_held += *out != nullptr ? bytes : 0;
  if (*out != nullptr) {
    g_storage[*out] = bytes;
    g_made_in[*out] = g_live_context;
  }
  return *out != nullptr ? KREPLAY_STATUS_SUCCESS : KREPLAY_STATUS_DEVICE_ERROR;
}
kreplay_status_t device_free(void*, kreplay_agent_t, void* ptr, size_t bytes) {
  check_alive(ptr);  // storage of a destroyed context is the driver's again: never freed twice
  g_storage.erase(ptr);
  g_made_in.erase(ptr);
  std::free(ptr);
  g_device_held -= bytes;
  return KREPLAY_STATUS_SUCCESS;
}
// The storage a destroyed context held is the driver's again (kreplay forgets it, never frees it): the fake
// gives it back once the test no longer looks at it.
void release_dead_storage() {
  for (auto it = g_storage.begin(); it != g_storage.end();) {
    auto made = g_made_in.find(it->first);
    if (made == g_made_in.end() || g_dead_contexts.count(made->second) == 0) {
      ++it;
      continue;
    }
    g_device_held -= it->second;
    g_made_in.erase(made);
    std::free(const_cast<void*>(it->first));
    it = g_storage.erase(it);
  }
}
void check_range(const void* address, size_t bytes) {
  const auto* at = static_cast<const unsigned char*>(address);
  for (const auto& [base, size] : g_storage) {
    const auto* start = static_cast<const unsigned char*>(base);
    if (at < start + size && start < at + bytes) {
      check_alive(base);
    }
  }
}
kreplay_status_t checked_copy(void* user_data, void* dst, const void* src, size_t bytes) {
  check_range(dst, bytes);
  check_range(src, bytes);
  return fake::copy(user_data, dst, src, bytes);
}
kreplay_status_t checked_copy_batch(void* user_data, kreplay_agent_t agent, const kreplay_copy_t* copies,
                                    size_t count) {
  for (size_t i = 0; i < count; ++i) {
    check_range(copies[i].dst, copies[i].bytes);
    check_range(copies[i].src, copies[i].bytes);
  }
  return fake::copy_batch(user_data, agent, copies, count);
}
// Page-locking: a registration of the context live at the time.
int g_host_locks = 0;
kreplay_status_t host_lock(void*, void* ptr, size_t) {
  ++g_host_locks;
  g_made_in[ptr] = g_live_context;
  return KREPLAY_STATUS_SUCCESS;
}
kreplay_status_t host_unlock(void*, void* ptr, size_t) {
  check_alive(ptr);
  g_made_in.erase(ptr);
  return KREPLAY_STATUS_SUCCESS;
}
kreplay_status_t make_base(kreplay_device_ops_t* out) {
  CHECK_OK(fake::make_base(out));
  out->copy = checked_copy;
  out->copy_batch = checked_copy_batch;
  out->digest = digest;
  out->device_alloc = device_alloc;
  out->device_free = device_free;
  out->host_lock = host_lock;
  out->host_unlock = host_unlock;
  return KREPLAY_STATUS_SUCCESS;
}

// ---- Fabricated launches ----------------------------------------------------------------------------------------
CUpti_CallbackData callback_data(CUpti_ApiCallbackSite site, void* params, CUresult* result) {
  return fake::callback_data(site, params, result, g_live_context, "cuLaunchKernel");
}

// The program launches `f` with `argument`: ENTER (kreplay's passes 1 to N - 1), the launch itself (pass N, run
// here as the driver would), EXIT.
const void* g_program_argument = nullptr;  // where the program's argument lives: a relaunch must not read it
void program_launch(replayer& r, CUfunction f, int argument, CUresult result = CUDA_SUCCESS,
                    const void* pointer = nullptr) {
  int value = argument;
  const void* pointer_value = pointer;
  g_program_argument = &value;
  void* params[] = {pointer != nullptr ? static_cast<void*>(&pointer_value) : static_cast<void*>(&value)};
  cuLaunchKernel_params p{f, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr};
  CUresult ok = CUDA_SUCCESS;
  CUpti_CallbackData enter = callback_data(CUPTI_API_ENTER, &p, &ok);
  g_pass = 0;
  r.on_launch(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, enter);
  if (result == CUDA_SUCCESS) {
    g_kernels.at(f).body(++g_pass, argument);
  }
  CUpti_CallbackData exit = callback_data(CUPTI_API_EXIT, &p, &result);
  r.on_launch(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, exit);
}

const CUfunction add_kernel = fake::handle<CUfunction>(0xA1);       // buffer[i] += argument: deterministic
const CUfunction pass_kernel = fake::handle<CUfunction>(0xA2);      // buffer[0] = pass: differs per pass
const CUfunction nccl_kernel = fake::handle<CUfunction>(0xA3);
const CUfunction other_kernel = fake::handle<CUfunction>(0xA4);
const CUfunction slow_kernel = fake::handle<CUfunction>(0xA5);  // thread A's, in the fence test
const CUfunction late_kernel = fake::handle<CUfunction>(0xA6);  // thread B's

// The fence test's record: every pass of either kernel, in the order they ran.
std::mutex g_order_mutex;
std::vector<char> g_order;
std::atomic<bool> g_a_in_window{false};

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

replay_config_t config_with(std::map<std::string, std::string> values) {
  replay_config_t config;
  std::string error;
  values.emplace("KREPLAY_REPLAY", "1");
  values.emplace("KREPLAY_REPLAY_PROGRESS", "0");
  auto get = [&](const char* name) -> const char* {
    auto found = values.find(name);
    return found != values.end() ? found->second.c_str() : nullptr;
  };
  CHECK(parse_replay_config(get, &config, &error));
  return config;
}

std::string tmp_csv(const char* name) { return std::string("/tmp/kreplay_replay_test_") + name + "_" +
                                               std::to_string(getpid()) + ".csv"; }

tracker* g_tracker = nullptr;
kreplay_device_ops_t g_ops{};
kreplay_policy_t g_policy{};             // the tests' policy (set in main)
size_t g_host_available = SIZE_MAX / 4;  // what the ops' host_available_bytes answers

kreplay_status_t host_available(void*, size_t* bytes_out) {
  *bytes_out = g_host_available;
  return KREPLAY_STATUS_SUCCESS;
}

// One field of a CSV row, by its column's name in the header (quotes removed).
std::string csv_field(const std::string& header, const std::string& line, const std::string& name) {
  auto split = [](const std::string& text) {
    std::vector<std::string> fields(1);
    bool quoted = false;
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '"') {
        if (quoted && i + 1 < text.size() && text[i + 1] == '"') {
          fields.back() += '"';
          ++i;
        } else {
          quoted = !quoted;
        }
      } else if (c == ',' && !quoted) {
        fields.emplace_back();
      } else {
        fields.back() += c;
      }
    }
    return fields;
  };
  const std::vector<std::string> names = split(header);
  const std::vector<std::string> values = split(line);
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (names[i] == name) {
      return values[i];
    }
  }
  return "(no column " + name + ")";
}

// The first replayed launch of `f` under `settings` with the replay's own policy (replay_policy, 4 KiB digest
// blocks: the buffer is 4 of them), from a buffer of 10s; the report's header and row, and the buffer after it.
struct write_set_run_t {
  std::string header;
  std::string row;
};
write_set_run_t replay_once_with_policy(CUfunction f, int argument, std::map<std::string, std::string> settings,
                                        const void* pointer = nullptr) {
  for (int& v : g_buffer) {
    v = 10;
  }
  const std::string csv = tmp_csv("write_set");
  settings.emplace("KREPLAY_REPLAY_OUTPUT", csv);
  const replay_config_t config = config_with(settings);
  kreplay_policy_t base = g_policy;
  base.digest_block_bytes = 4096;
  const kreplay_policy_t policy = replay_policy(config, base);
  CHECK_OK(kreplay_set_policy(&policy));
  {
    replayer r(*g_tracker, config, g_ops, fake_driver());
    std::string why;
    CHECK(r.start(nullptr, &why));
    program_launch(r, f, argument, CUDA_SUCCESS, pointer);
    r.finish();
  }
  CHECK_OK(kreplay_set_policy(&g_policy));
  const std::vector<std::string> lines = read_lines(csv);
  for (const std::string& line : lines) {
    std::printf("csv: %s\n", line.c_str());
  }
  std::remove(csv.c_str());
  CHECK(lines.size() == 2);
  return {lines[0], lines[1]};
}

size_t column_size(const write_set_run_t& run, const char* name) {
  return static_cast<size_t>(std::strtoull(csv_field(run.header, run.row, name).c_str(), nullptr, 10));
}

// ---- Tests -------------------------------------------------------------------------------------------------------

void options_parse_and_refuse_malformed_values() {
  replay_config_t c = config_with({{"KREPLAY_REPLAY_PASSES", "3"}, {"KREPLAY_REPLAY_TIER", "auto"},
                                   {"KREPLAY_REPLAY_DEVICE_BUDGET", "512M"}, {"KREPLAY_REPLAY_DIRTY_ONLY", "off"},
                                   {"KREPLAY_REPLAY_BACKEND", "cupti"}, {"KREPLAY_REPLAY_VERIFY", "1"},
                                   {"KREPLAY_REPLAY_LAUNCH_SKIP", "7"}, {"KREPLAY_REPLAY_LAUNCH_COUNT", "2"}});
  CHECK(c.enabled && c.passes == 3 && c.device_budget == (512u << 20) && !c.dirty_only && c.verify);
  CHECK(c.backend == replay_backend::cupti && c.launch_skip == 7 && c.launch_count == 2);
  CHECK(c.tier == replay_tier::host);  // the Checkpoint API picks its own storage
  const char* bad[][2] = {{"KREPLAY_REPLAY_PASSES", "0"},       {"KREPLAY_REPLAY_PASSES", "1001"},
                          {"KREPLAY_REPLAY_PASSES", "3x"},      {"KREPLAY_REPLAY_TIER", "gpu"},
                          {"KREPLAY_REPLAY_DEVICE_BUDGET", "1T"}, {"KREPLAY_REPLAY_DEVICE_BUDGET", "-5"},
                          {"KREPLAY_REPLAY_KERNEL_NAME", "(("}, {"KREPLAY_REPLAY_EXCLUDE", "[a"},
                          {"KREPLAY_REPLAY_BACKEND", "ncu"},    {"KREPLAY_REPLAY_DIRTY_ONLY", "maybe"},
                          {"KREPLAY_REPLAY_PROGRESS", "-1"},    {"KREPLAY_REPLAY_LAUNCH_SKIP", "x"}};
  for (const auto& entry : bad) {
    replay_config_t out;
    std::string error;
    auto get = [&](const char* name) -> const char* { return std::strcmp(name, entry[0]) == 0 ? entry[1] : nullptr; };
    CHECK(!parse_replay_config(get, &out, &error));
    CHECK(error.find(entry[0]) != std::string::npos && error.find(entry[1]) != std::string::npos);
  }
  size_t bytes = 0;
  CHECK(parse_bytes("64K", &bytes) && bytes == 65536);
  CHECK(parse_bytes("2G", &bytes) && bytes == (size_t{2} << 30));
  CHECK(!parse_bytes("", &bytes) && !parse_bytes("5MB", &bytes) && !parse_bytes("99999999999999999999G", &bytes));
  // The tiers as policies.
  kreplay_policy_t base{};
  base.struct_size = sizeof(base);
  CHECK(replay_policy(config_with({{"KREPLAY_REPLAY_TIER", "host"}}), base).device_budget_bytes == 0);
  kreplay_policy_t device = replay_policy(config_with({{"KREPLAY_REPLAY_TIER", "device"},
                                                       {"KREPLAY_REPLAY_DEVICE_BUDGET", "1M"}}), base);
  CHECK(device.device_budget_bytes == (1u << 20) && device.dirty_only);
  CHECK(replay_policy(config_with({{"KREPLAY_REPLAY_TIER", "auto"}}), base).device_budget_percent == 50);
}

void the_selector_counts_like_ncu() {
  replay_config_t c = config_with({{"KREPLAY_REPLAY_KERNEL_NAME", "^gemm"}, {"KREPLAY_REPLAY_LAUNCH_SKIP", "1"},
                                   {"KREPLAY_REPLAY_LAUNCH_COUNT", "2"}});
  launch_selector s(c);
  using v = launch_selector::verdict;
  CHECK(s.classify("relu") == v::not_matched);
  CHECK(s.classify("gemm_a") == v::skipped);
  CHECK(s.classify("relu") == v::not_matched);
  CHECK(s.classify("gemm_b") == v::replay);
  CHECK(s.classify("gemm_ncclX") == v::excluded);  // counted as selected, then excluded
  CHECK(s.classify("gemm_c") == v::count_reached);
  launch_selector everything(config_with({{"KREPLAY_REPLAY_EXCLUDE", ""}}));
  CHECK(everything.classify("ncclKernel_AllReduce") == v::replay);
  launch_selector defaults(config_with({}));
  CHECK(defaults.classify("ncclDevKernel_AllReduce_Sum") == v::excluded);
  CHECK(defaults.classify("nvshmemi_barrier") == v::excluded);
  CHECK(defaults.classify(nullptr) == v::replay);
}

void csv_rows_quote_names_and_texts() {
  launch_row_t row;
  row.index = 4;
  row.kernel = "void k<\"a\", 2>(int)";
  row.device = 0;
  row.reason = "snapshot declined: x, y";
  const std::string line = csv_row(row);
  CHECK(line.rfind("4,\"void k<\"\"a\"\", 2>(int)\",0,", 0) == 0);
  CHECK(line.find(",\"snapshot declined: x, y\",\"off\",0,0,\"\",,,0.0000,0.0000,0.0000\n") != std::string::npos);
  row.snapshot_ms = 1.23456;
  row.extra_pass_ms = -0.00005;  // rounds to -0.0001: a sign, never a locale's decimal comma
  const std::string numbers = csv_row(row);
  CHECK(numbers.find(",1.2346,0.0000,0.0000,-0.0001,0,") != std::string::npos);
  const std::string header = csv_header();
  CHECK(std::count(header.begin(), header.end(), ',') == 23);
  // The write set's columns, then the graphs', then the replay's time and the profiler's share of a pass, after
  // the ones scripts already read by name.
  CHECK(header.find(",verify,digested_bytes,write_set_misses,graph_mode,graph_launch,graph_node,replay_ms,"
                    "counter_pass_ms,counter_setup_ms\n") != std::string::npos);
  row.digested_bytes = 8192;
  row.write_set_misses = 2;
  row.counter_pass_ms = 3.5;
  row.counter_setup_ms = 40;
  CHECK(csv_row(row, 0, 12.25).find(",\"off\",8192,2,\"\",,,12.2500,3.5000,40.0000\n") != std::string::npos);
}

void every_pass_sees_the_same_inputs_and_the_program_the_last_pass() {
  for (int& v : g_buffer) {
    v = 10;
  }
  const std::string csv = tmp_csv("passes");
  replay_config_t config = config_with({{"KREPLAY_REPLAY_PASSES", "3"}, {"KREPLAY_REPLAY_OUTPUT", csv},
                                        {"KREPLAY_REPLAY_VERIFY", "1"}});
  replayer r(*g_tracker, config, g_ops, fake_driver());
  std::string why;
  CHECK(r.start(nullptr, &why));
  g_launches.clear();
  g_argument_sources.clear();
  program_launch(r, add_kernel, 5);
  CHECK(g_launches[add_kernel] == 2);  // passes 2 and 3
  for (int v : g_buffer) {
    CHECK(v == 15);  // restored before each pass: one addition, not three
  }
  // The relaunches read a private copy of the argument, not the program's storage.
  CHECK(g_argument_sources.size() == 2 && g_argument_sources[0] == g_argument_sources[1]);
  CHECK(g_argument_sources[0] != nullptr && g_argument_sources[0] != g_program_argument);
  program_launch(r, pass_kernel, 0);  // writes the pass number: its passes differ
  CHECK(g_buffer[0] == 3);            // the last pass's result
  r.finish();
  const std::vector<std::string> lines = read_lines(csv);
  for (const std::string& line : lines) {
    std::printf("csv: %s\n", line.c_str());
  }
  CHECK(lines.size() == 3);
  CHECK(lines[1].find("\"add_kernel\",0,1x1x1,32x1x1,3,3,") != std::string::npos);
  CHECK(lines[1].find(",1,\"\",\"same\"") != std::string::npos);
  CHECK(lines[2].find("\"differs: pass 2, 1 blocks of 64 KiB\"") != std::string::npos);
  std::remove(csv.c_str());
}

// A child of the program inherits the launcher's environment: it writes a report of its own beside the
// program's, never over it.
void a_child_process_writes_a_report_of_its_own() {
  const std::string csv = tmp_csv("child");
  const std::string mine = csv.substr(0, csv.size() - 4) + "." + std::to_string(getpid()) + ".csv";
  std::remove(mine.c_str());
  replayer child(*g_tracker, config_with({{"KREPLAY_REPLAY_OUTPUT", csv}, {"KREPLAY_REPLAY_PID", "1"}}), g_ops,
                 fake_driver());
  std::string why;
  CHECK(child.start(nullptr, &why));
  child.finish();
  CHECK(access(mine.c_str(), F_OK) == 0);
  CHECK(access(csv.c_str(), F_OK) != 0);
  std::remove(mine.c_str());
}

void the_control_without_restore_changes_the_result() {
  for (int& v : g_buffer) {
    v = 10;
  }
  replayer r(*g_tracker, config_with({{"KREPLAY_REPLAY_PASSES", "3"}, {"KREPLAY_REPLAY_RESTORE", "0"}}), g_ops,
             fake_driver());
  std::string why;
  CHECK(r.start(nullptr, &why));
  program_launch(r, add_kernel, 5);
  CHECK(g_buffer[0] == 25 && g_buffer[4095] == 25);  // three additions: the test can tell
  r.finish();
}

void launches_never_replayed_run_once_with_their_reason() {
  for (int& v : g_buffer) {
    v = 10;
  }
  const std::string csv = tmp_csv("once");
  replayer r(*g_tracker, config_with({{"KREPLAY_REPLAY_PASSES", "4"}, {"KREPLAY_REPLAY_KERNEL_NAME", "kernel$"},
                                      {"KREPLAY_REPLAY_OUTPUT", csv}}),
             g_ops, fake_driver());
  std::string why;
  CHECK(r.start(nullptr, &why));
  g_launches.clear();
  program_launch(r, other_kernel, 1);  // "other_kern": not matched
  program_launch(r, nccl_kernel, 1);   // excluded
  // A stream capture in progress: the launch is recorded into a graph, not executed.
  cuStreamBeginCapture_v2_params begin{nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL};
  CUresult ok = CUDA_SUCCESS;
  CUpti_CallbackData data = callback_data(CUPTI_API_EXIT, &begin, &ok);
  r.on_capture(CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2, data);
  program_launch(r, add_kernel, 1);
  cuStreamEndCapture_params end{nullptr, nullptr};
  data = callback_data(CUPTI_API_EXIT, &end, &ok);
  r.on_capture(CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture, data);
  r.on_capture(CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture, data);  // one end too many: the count stays at 0
  // The program's own launch failed: kreplay's passes ran at the entry, and the memory is the snapshot's again,
  // as if the failed launch had been alone.
  const int before_failed = g_buffer[0];
  program_launch(r, add_kernel, 1, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  CHECK_EQ(before_failed, g_buffer[0]);
  // A relaunch that fails: reported, the later passes not run, and the program's own launch still computes
  // its result from the snapshot's memory.
  g_relaunch_result = CUDA_ERROR_LAUNCH_FAILED;
  const int before_relaunch = g_buffer[0];
  program_launch(r, add_kernel, 1);
  CHECK_EQ(before_relaunch + 1, g_buffer[0]);
  g_relaunch_result = CUDA_SUCCESS;
  // A graph launch runs once.
  cuGraphLaunch_params graph{fake::handle<CUgraphExec>(0x77), nullptr};
  data = callback_data(CUPTI_API_ENTER, &graph, &ok);
  r.on_launch(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, data);
  data = callback_data(CUPTI_API_EXIT, &graph, &ok);
  r.on_launch(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, data);
  // And one that is replayed, after all of them.
  program_launch(r, add_kernel, 1);
  r.finish();
  CHECK(g_launches[other_kernel] == 0 && g_launches[nccl_kernel] == 0);
  const std::vector<std::string> lines = read_lines(csv);
  CHECK(lines.size() == 8);
  CHECK(lines[1].find("not selected: the name does not match") != std::string::npos);
  CHECK(lines[2].find("excluded: a communication kernel") != std::string::npos);
  CHECK(lines[3].find("a stream capture is in progress") != std::string::npos);
  CHECK(lines[4].find("the program's launch failed") != std::string::npos);
  CHECK(lines[5].find("relaunch failed: pass 1") != std::string::npos && lines[5].find(",4,1,") != std::string::npos);
  CHECK(lines[6].find("(graph launch)") != std::string::npos && lines[6].find("graph launch:") != std::string::npos);
  CHECK(lines[7].find(",4,4,") != std::string::npos && lines[7].find(",1,\"\",\"off\"") != std::string::npos);
  std::remove(csv.c_str());
}

// The CUPTI layer enables the launch, capture, memcpy and memset ids only when a replay is registered.
std::set<CUpti_CallbackId> g_ids;
CUptiResult enable(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain domain, CUpti_CallbackId id) {
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    g_ids.insert(id);
  }
  return CUPTI_SUCCESS;
}
int g_subscribes = 0;
int g_unsubscribes = 0;
CUptiResult subscribe(CUpti_SubscriberHandle* out, CUpti_CallbackFunc, void*) {
  ++g_subscribes;
  *out = fake::handle<CUpti_SubscriberHandle>(0x5);
  return CUPTI_SUCCESS;
}
CUptiResult unsubscribe(CUpti_SubscriberHandle) {
  ++g_unsubscribes;
  return CUPTI_SUCCESS;
}
CUptiResult callback_name(CUpti_CallbackDomain, uint32_t id, const char** name) {
  *name = id == CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2   ? "cuMemcpyHtoD_v2"
          : id == CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async ? "cuMemsetD8Async"
                                                          : "cuSomethingElse";
  return CUPTI_SUCCESS;
}

void the_layer_adds_launch_callbacks_only_for_a_replay() {
  cupti_api_t api;
  api.subscribe = subscribe;
  api.enable_callback = enable;
  api.get_callback_name = callback_name;
  cupti_layer plain(api);
  register_tracker_callbacks(plain.board(), *g_tracker);
  CHECK(plain.start());
  CHECK(g_ids.count(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) == 0 &&
        g_ids.count(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2) == 0);
  const size_t tracking_only = g_ids.size();
  g_ids.clear();
  replayer r(*g_tracker, config_with({}), g_ops, fake_driver());
  cupti_layer replaying(api);
  register_tracker_callbacks(replaying.board(), *g_tracker);
  register_replay_callbacks(replaying.board(), r, api);
  CHECK(replaying.start());
  for (size_t i = 0; i < replay_launch_id_count; ++i) {
    CHECK(g_ids.count(replay_launch_ids[i]) == 1);
  }
  CHECK(g_ids.count(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2) == 1 &&
        g_ids.count(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async) == 1);
  for (CUpti_CallbackId id : replay_graph_ids) {
    CHECK(g_ids.count(id) == 1);  // graph replay is on by default: the graph calls are followed
  }
  CHECK(g_ids.size() == tracking_only + replay_launch_id_count + replay_capture_id_count + std::size(replay_graph_ids) + 2);
  r.finish();
  // With --graph-profiling off nothing follows the graph calls: they cost the program nothing.
  g_ids.clear();
  replayer no_graphs(*g_tracker, config_with({{"KREPLAY_REPLAY_GRAPH_PROFILING", "off"}}), g_ops, fake_driver());
  cupti_layer layer(api);
  register_tracker_callbacks(layer.board(), *g_tracker);
  register_replay_callbacks(layer.board(), no_graphs, api);
  CHECK(layer.start());
  CHECK(g_ids.count(CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags) == 0);
  CHECK(g_ids.size() == tracking_only + replay_launch_id_count + replay_capture_id_count + 2);
  no_graphs.finish();
}

// A launch of another thread while a window is open waits for it (the fence), then is replayed itself: its
// passes never run among the window's. Thread B tries while thread A's first pass is running; without the wait,
// B's passes would interleave with A's (and A's restores would overwrite B's results).
void a_launch_of_another_thread_waits_for_the_open_window() {
  g_order.clear();
  g_a_in_window = false;
  replayer r(*g_tracker, config_with({{"KREPLAY_REPLAY_PASSES", "3"}}), g_ops, fake_driver());
  std::string why;
  CHECK(r.start(nullptr, &why));
  std::thread a([&] { program_launch(r, slow_kernel, 1); });
  while (!g_a_in_window.load()) {
    std::this_thread::yield();
  }
  std::thread b([&] { program_launch(r, late_kernel, 1); });
  a.join();
  b.join();
  r.finish();
  CHECK_EQ(6, g_order.size());
  CHECK(std::string(g_order.begin(), g_order.end()) == "AAABBB");
}

// Near full device memory: when a program's device allocation fails, kreplay's idle device storage goes back
// at once, so that the program's own retry finds it.
void a_failed_device_allocation_gives_kreplay_s_idle_device_storage_back() {
  kreplay_policy_t policy{};
  policy.struct_size = sizeof(policy);
  policy.device_budget_bytes = 1 << 20;
  CHECK_OK(kreplay_set_policy(&policy));
  kreplay_snapshot_t* snapshot = nullptr;
  CHECK_OK(kreplay_snap(test_agent(1), &snapshot, nullptr));
  kreplay_snapshot_free(snapshot);
  CHECK(kreplay_retained_device_bytes(test_agent(1)) > 0 && g_device_held > 0);
  cupti_api_t api;
  api.subscribe = subscribe;
  api.enable_callback = enable;
  cupti_layer layer(api);
  register_tracker_callbacks(layer.board(), *g_tracker);
  CHECK(layer.start());
  CUdeviceptr address = 0;
  cuMemAlloc_v2_params params{&address, size_t{1} << 40};
  CUresult failed = CUDA_ERROR_OUT_OF_MEMORY;
  CUpti_CallbackData data = callback_data(CUPTI_API_EXIT, &params, &failed);
  cupti_layer::callback(&layer, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &data);
  CHECK(kreplay_retained_device_bytes(test_agent(1)) == 0 && g_device_held == 0);
  policy.device_budget_bytes = 0;
  policy.dirty_only = true;
  CHECK_OK(kreplay_set_policy(&policy));
}

// A CUPTI that refuses one of the replay's callback ids (an older one the program brought): tracking goes on,
// the replay's ids are turned off again, and nothing is replayed.
CUptiResult enable_but_not_ex(uint32_t on, CUpti_SubscriberHandle, CUpti_CallbackDomain domain, CUpti_CallbackId id) {
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API) {
    return CUPTI_SUCCESS;
  }
  if (on == 0) {
    g_ids.erase(id);
    return CUPTI_SUCCESS;
  }
  if (id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  g_ids.insert(id);
  return CUPTI_SUCCESS;
}

void a_refused_replay_callback_leaves_tracking_on_and_replays_nothing() {
  cupti_api_t api;
  api.subscribe = subscribe;
  api.enable_callback = enable_but_not_ex;
  api.get_callback_name = callback_name;
  g_ids.clear();
  replayer r(*g_tracker, config_with({}), g_ops, fake_driver());
  cupti_layer layer(api);
  register_tracker_callbacks(layer.board(), *g_tracker);
  register_replay_callbacks(layer.board(), r, api);
  CHECK(layer.start());  // tracking is on
  CHECK(layer.active());
  CHECK(g_ids.count(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2) == 1);
  for (size_t i = 0; i < replay_launch_id_count; ++i) {
    CHECK(g_ids.count(replay_launch_ids[i]) == 0);  // enabled, then turned off again
  }
  CHECK(g_ids.count(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2) == 0);
  r.finish();
}

// ---- A context destroyed (cudaDeviceReset) with kreplay's state live in it -------------------------------------
const CUfunction reset_kernel = fake::handle<CUfunction>(0xA7);  // adds its argument; its last pass resets
std::function<void()> g_reset_during_program_pass;

// Destroys the live context as cudaDeviceReset does (CONTEXT_DESTROY_STARTING through the layer), then the
// program allocates its buffer again, at the same address, in a new primary context.
void destroy_live_context(cupti_layer& layer, CUcontext next) {
  CUpti_ResourceData data{};
  data.context = g_live_context;
  cupti_layer::callback(&layer, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, &data);
  g_dead_contexts.insert(g_live_context);
  g_live_context = next;
  fake::g_context_devices[next] = 0;
  g_tracker->context_device(next, 0, true);
  g_tracker->allocated(next, reinterpret_cast<uint64_t>(g_buffer), sizeof(g_buffer), memory_kind::device);
}

// In the live context: a snapshot of the host tier held (page-locked staging lent to it), a replayed launch on
// the device tier (its storage kept for dirty-only re-capture), and a replayed launch whose own pass (the last)
// coincides with the context's destruction (its events and snapshot were made there). Then a launch in the new
// context. `handled`: the injection's context reset and the replay's listener are registered; the control
// leaves both out. Returns the calls that reached the fake with a destroyed context's handles.
int replay_across_a_context_reset(bool handled, CUcontext next) {
  g_dead_calls = 0;
  kreplay_policy_t policy{};
  policy.struct_size = sizeof(policy);
  policy.dirty_only = true;
  policy.pin_staging = true;
  CHECK_OK(kreplay_set_policy(&policy));
  cupti_api_t api;
  api.subscribe = subscribe;
  api.enable_callback = enable;
  api.get_callback_name = callback_name;
  replayer r(*g_tracker, config_with({{"KREPLAY_REPLAY_PASSES", "3"}, {"KREPLAY_REPLAY_OUTPUT", tmp_csv("reset")}}),
             g_ops, fake_driver());
  std::string why;
  CHECK(r.start(nullptr, &why));
  cupti_layer layer(api);
  std::vector<int> forgotten;
  if (handled) {
    register_context_reset(layer.board(), *g_tracker, [&forgotten](int device) { forgotten.push_back(device); });
  }
  register_tracker_callbacks(layer.board(), *g_tracker);
  if (handled) {
    register_replay_callbacks(layer.board(), r, api);
  }
  CHECK(layer.start());

  // Host tier, page-locked, held across the reset.
  const int locks = g_host_locks;
  kreplay_snapshot_t* held = nullptr;
  CHECK_OK(kreplay_snap(test_agent(1), &held, nullptr));
  CHECK(g_host_locks == locks + 1);
  // Device tier from here on.
  policy.device_budget_bytes = 1 << 20;
  CHECK_OK(kreplay_set_policy(&policy));
  for (int& v : g_buffer) {
    v = 10;
  }
  g_launches.clear();
  program_launch(r, add_kernel, 5);
  CHECK(g_launches[add_kernel] == 2 && g_buffer[7] == 15);
  CHECK(kreplay_retained_device_bytes(test_agent(1)) > 0);  // the stash, made in the live context
  g_reset_during_program_pass = [&] { destroy_live_context(layer, next); };
  program_launch(r, reset_kernel, 1);
  g_reset_during_program_pass = nullptr;
  CHECK(g_live_context == next);
  if (handled) {
    CHECK(forgotten == std::vector<int>{0});
    CHECK(kreplay_retained_device_bytes(test_agent(1)) == 0);
  }

  // The held snapshot is of the old context: nothing of it is written back.
  for (int& v : g_buffer) {
    v = 10;
  }
  kreplay_restore_report_t report{};
  (void)kreplay_restore(held, &report);
  if (handled) {
    CHECK(report.restored == 0 && report.skipped >= 1 && report.bytes == 0);
  }
  kreplay_snapshot_free(held);
  // The program goes on in the new context: replayed there, every pass from the same inputs.
  g_launches.clear();
  program_launch(r, add_kernel, 5);
  CHECK(g_launches[add_kernel] == 2);
  for (int v : g_buffer) {
    CHECK(v == 15);
  }
  kreplay_staging_trim(test_agent(1));
  kreplay_device_trim(test_agent(1));
  r.finish();
  policy.device_budget_bytes = 0;
  policy.pin_staging = false;
  CHECK_OK(kreplay_set_policy(&policy));
  release_dead_storage();
  return g_dead_calls;
}

void a_control_without_reset_handling_calls_into_the_destroyed_context() {
  CHECK(replay_across_a_context_reset(false, fake::handle<CUcontext>(0x101)) > 0);
  // What the control left behind was made in a destroyed context: forgotten before the real test.
  kreplay_agent_reset(test_agent(1));
}

void after_a_context_reset_launches_replay_in_the_new_context_and_nothing_calls_into_the_old_one() {
  CHECK(replay_across_a_context_reset(true, fake::handle<CUcontext>(0x102)) == 0);
}

// cuDevicePrimaryCtxReset is reported twice, its entry and then CONTEXT_DESTROY_STARTING within the same call (by
// then the tracker has forgotten the context): the device's state is forgotten once, at the entry.
void a_primary_context_reset_reported_twice_is_handled_once() {
  cupti_api_t api;
  api.subscribe = subscribe;
  api.enable_callback = enable;
  api.get_callback_name = callback_name;
  cupti_layer layer(api);
  std::vector<int> forgotten;
  register_context_reset(layer.board(), *g_tracker, [&forgotten](int device) { forgotten.push_back(device); });
  register_tracker_callbacks(layer.board(), *g_tracker);
  CHECK(layer.start());
  const CUcontext primary = g_live_context;
  CHECK(g_tracker->primary_context(0) == primary);
  cuDevicePrimaryCtxReset_v2_params params{0};
  CUresult result = CUDA_SUCCESS;
  CUpti_CallbackData entry = callback_data(CUPTI_API_ENTER, &params, &result);
  cupti_layer::callback(&layer, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2, &entry);
  CHECK(forgotten == std::vector<int>{0});
  CUpti_ResourceData destroyed{};
  destroyed.context = primary;
  cupti_layer::callback(&layer, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, &destroyed);
  CUpti_CallbackData exit = callback_data(CUPTI_API_EXIT, &params, &result);
  cupti_layer::callback(&layer, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2, &exit);
  CHECK(forgotten == std::vector<int>{0});
  // A context destroyed outside a call whose entry was seen (the runtime's own teardown) is still handled.
  g_tracker->context_device(primary, 0, true);
  cupti_layer::callback(&layer, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, &destroyed);
  CHECK((forgotten == std::vector<int>{0, 0}));
  // The program goes on in the same context, as before.
  g_tracker->context_device(primary, 0, true);
  g_tracker->allocated(primary, reinterpret_cast<uint64_t>(g_buffer), sizeof(g_buffer), memory_kind::device);
}

// The in-process overhead measurement's switch (kreplay_inject_set_subscribed): unsubscribing and subscribing
// again enables the same callbacks, counts the program's callbacks, and makes every later snapshot decline.
void pausing_unsubscribes_and_resuming_enables_the_same_callbacks() {
  cupti_api_t api;
  api.subscribe = subscribe;
  api.unsubscribe = unsubscribe;
  api.enable_callback = enable;
  cupti_layer layer(api);
  register_tracker_callbacks(layer.board(), *g_tracker);
  g_ids.clear();
  CHECK(layer.start());
  const std::set<CUpti_CallbackId> first = g_ids;
  const int subscribes = g_subscribes;
  CUdeviceptr address = 0x7000000;
  cuMemAlloc_v2_params params{&address, 64};
  CUresult ok = CUDA_SUCCESS;
  CUpti_CallbackData data = callback_data(CUPTI_API_EXIT, &params, &ok);
  cupti_layer::callback(&layer, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &data);
  CHECK(layer.callbacks_raised() == 1);
  CHECK(layer.set_subscribed(false) && g_unsubscribes == 1);
  CHECK(layer.set_subscribed(false) && g_unsubscribes == 1);  // already paused: nothing more
  g_ids.clear();
  CHECK(layer.set_subscribed(true) && g_subscribes == subscribes + 1);
  CHECK(g_ids == first);
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  CHECK(kreplay_snap(test_agent(1), &snapshot, &reason) == KREPLAY_STATUS_DECLINED);
  CHECK(reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE);  // the tracker says events were lost
  cuMemFree_v2_params freed{address};
  data = callback_data(CUPTI_API_ENTER, &freed, &ok);
  cupti_layer::callback(&layer, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, &data);
  CHECK(layer.callbacks_raised() == 2);
}

}  // namespace

const CUfunction block0_kernel = fake::handle<CUfunction>(0xB1);  // every pass writes block 0 only
const CUfunction stray_kernel = fake::handle<CUfunction>(0xB2);   // pass 3 also writes block 2
const CUfunction hinted_kernel = fake::handle<CUfunction>(0xB3);  // passes from 2 on also write block 3

// Later passes write exactly pass 1's blocks: the restores after the first digest those only (the last, a full
// check, the whole footprint), and the program's result is the plain run's. The control, --write-set off,
// digests the whole footprint at every restore.
void restores_after_the_first_digest_only_the_learned_write_set() {
  const write_set_run_t learned = replay_once_with_policy(block0_kernel, 5, {{"KREPLAY_REPLAY_PASSES", "4"}});
  CHECK(g_buffer[0] == 15 && g_buffer[1] == 10 && g_buffer[4095] == 10);  // one addition, as without kreplay
  const size_t footprint = column_size(learned, "footprint_bytes");
  CHECK(footprint >= sizeof(g_buffer));
  const size_t digested = column_size(learned, "digested_bytes");
  CHECK(digested > 0 && digested < 3 * footprint);  // 3 restores: full, partial, full check
  CHECK(digested == 2 * footprint + 4096);
  CHECK(column_size(learned, "write_set_misses") == 0);
  CHECK(csv_field(learned.header, learned.row, "verify") == "off");
  CHECK(csv_field(learned.header, learned.row, "replayed") == "1");

  const write_set_run_t control =
      replay_once_with_policy(block0_kernel, 5, {{"KREPLAY_REPLAY_PASSES", "4"}, {"KREPLAY_REPLAY_WRITE_SET", "off"}});
  CHECK(g_buffer[0] == 15 && g_buffer[4095] == 10);
  CHECK(column_size(control, "digested_bytes") == 3 * column_size(control, "footprint_bytes"));
}

// Pass 3 writes a block outside pass 1's set: the partial restore before it cannot see it, the full check
// before the program's launch restores it, so the result is still exact, and the report names the misses.
void a_write_outside_the_learned_set_is_caught_by_the_last_full_check() {
  const write_set_run_t run = replay_once_with_policy(stray_kernel, 5, {{"KREPLAY_REPLAY_PASSES", "4"}});
  CHECK(g_buffer[0] == 15 && g_buffer[2048] == 10 && g_buffer[4095] == 10);  // exactly the plain run's
  CHECK(column_size(run, "write_set_misses") == 1);
  const std::string verify = csv_field(run.header, run.row, "verify");
  CHECK(verify.rfind("differs: write set missed 1 blocks from pass ", 0) == 0);
  CHECK(csv_field(run.header, run.row, "replayed") == "1");
}

// A pointer argument into a tracked region is hinted: the block it points at joins the write set, so a pass
// that writes there only from pass 2 on is restored by the partial restores (no miss). The control, a pointer
// outside every tracked region, adds nothing: the full check then finds the miss.
void a_pointer_argument_s_block_is_hinted_into_the_write_set() {
  const write_set_run_t hinted =
      replay_once_with_policy(hinted_kernel, 0, {{"KREPLAY_REPLAY_PASSES", "4"}}, &g_buffer[3072]);
  CHECK(g_buffer[0] == 11 && g_buffer[3072] == 11 && g_buffer[2048] == 10);
  CHECK(column_size(hinted, "write_set_misses") == 0);
  CHECK(column_size(hinted, "digested_bytes") == 2 * column_size(hinted, "footprint_bytes") + 2 * 4096);

  static int untracked = 0;
  const write_set_run_t control =
      replay_once_with_policy(hinted_kernel, 0, {{"KREPLAY_REPLAY_PASSES", "4"}}, &untracked);
  CHECK(g_buffer[0] == 11 && g_buffer[3072] == 11);  // still exact: the full check restored the block
  CHECK(column_size(control, "write_set_misses") == 1);
}

// --host-budget: with almost no host memory available, the snapshot declines with HOST_BUDGET in the reason and
// the launch runs once, its result intact. The control, --host-budget 0, replays.
void a_snapshot_over_the_host_budget_declines_and_runs_once() {
  g_host_available = 1024;
  const write_set_run_t declined = replay_once_with_policy(block0_kernel, 5, {{"KREPLAY_REPLAY_PASSES", "4"}});
  CHECK(g_buffer[0] == 15 && g_buffer[4095] == 10);
  CHECK(csv_field(declined.header, declined.row, "replayed") == "0");
  CHECK(csv_field(declined.header, declined.row, "passes_run") == "1");
  CHECK(csv_field(declined.header, declined.row, "reason").find("HOST_BUDGET") != std::string::npos);
  const write_set_run_t control =
      replay_once_with_policy(block0_kernel, 5, {{"KREPLAY_REPLAY_PASSES", "4"}, {"KREPLAY_REPLAY_HOST_BUDGET", "0"}});
  g_host_available = SIZE_MAX / 4;
  CHECK(g_buffer[0] == 15);
  CHECK(csv_field(control.header, control.row, "replayed") == "1");
}

int main() {
  fake::g_context_devices = {{ctx0, 0}};
  g_kernels[add_kernel] = {"add_kernel", [](int, int a) {
                             for (int& v : g_buffer) {
                               v += a;
                             }
                           }};
  g_kernels[pass_kernel] = {"pass_kernel", [](int pass, int) { g_buffer[0] = pass; }};
  g_kernels[nccl_kernel] = {"ncclDevKernel_kernel", [](int, int) { g_buffer[1] += 1000; }};
  g_kernels[other_kernel] = {"other_kern", [](int, int) {}};
  auto record = [](char who) {
    std::lock_guard<std::mutex> lock(g_order_mutex);
    g_order.push_back(who);
  };
  g_kernels[slow_kernel] = {"slow_kernel", [record](int, int) {
                              g_a_in_window = true;
                              std::this_thread::sleep_for(std::chrono::milliseconds(20));
                              record('A');
                            }};
  g_kernels[late_kernel] = {"late_kernel", [record](int, int) { record('B'); }};
  g_pointer_kernel = hinted_kernel;
  g_kernels[hinted_kernel] = {"hinted_kernel", [](int pass, int) {
                                g_buffer[0] += 1;
                                if (pass >= 2) {
                                  g_buffer[3072] += 1;  // block 3: where the argument points
                                }
                              }};
  g_kernels[block0_kernel] = {"block0_kernel", [](int, int a) { g_buffer[0] += a; }};
  g_kernels[stray_kernel] = {"stray_kernel", [](int pass, int a) {
                               g_buffer[0] += a;
                               if (pass == 3) {
                                 g_buffer[2048] += 1;  // block 2 of 4 KiB
                               }
                             }};
  g_kernels[reset_kernel] = {"reset_kernel", [](int pass, int a) {
                               for (int& v : g_buffer) {
                                 v += a;
                               }
                               if (pass == 3 && g_reset_during_program_pass) {
                                 g_reset_during_program_pass();
                               }
                             }};
  static tracker owner(fake::driver());
  g_tracker = &owner;
  CHECK_OK(make_injection_ops(owner, make_base, &g_ops));
  g_ops.host_available_bytes = host_available;  // the host budget's figure, under the tests' control
  CHECK_OK(kreplay_configure(&g_ops));
  g_policy.struct_size = sizeof(g_policy);
  g_policy.dirty_only = true;
  CHECK_OK(kreplay_set_policy(&g_policy));
  kreplay_tracking_enable(true);
  owner.context_device(ctx0, 0, true);
  owner.allocated(ctx0, reinterpret_cast<uint64_t>(g_buffer), sizeof(g_buffer), memory_kind::device);

  RUN_TEST(options_parse_and_refuse_malformed_values);
  RUN_TEST(the_selector_counts_like_ncu);
  RUN_TEST(csv_rows_quote_names_and_texts);
  RUN_TEST(every_pass_sees_the_same_inputs_and_the_program_the_last_pass);
  RUN_TEST(a_child_process_writes_a_report_of_its_own);
  RUN_TEST(the_control_without_restore_changes_the_result);
  RUN_TEST(restores_after_the_first_digest_only_the_learned_write_set);
  RUN_TEST(a_write_outside_the_learned_set_is_caught_by_the_last_full_check);
  RUN_TEST(a_pointer_argument_s_block_is_hinted_into_the_write_set);
  RUN_TEST(a_snapshot_over_the_host_budget_declines_and_runs_once);
  RUN_TEST(launches_never_replayed_run_once_with_their_reason);
  RUN_TEST(the_layer_adds_launch_callbacks_only_for_a_replay);
  RUN_TEST(a_launch_of_another_thread_waits_for_the_open_window);
  RUN_TEST(a_refused_replay_callback_leaves_tracking_on_and_replays_nothing);
  RUN_TEST(a_failed_device_allocation_gives_kreplay_s_idle_device_storage_back);
  RUN_TEST(a_control_without_reset_handling_calls_into_the_destroyed_context);
  RUN_TEST(after_a_context_reset_launches_replay_in_the_new_context_and_nothing_calls_into_the_old_one);
  RUN_TEST(a_primary_context_reset_reported_twice_is_handled_once);
  RUN_TEST(pausing_unsubscribes_and_resuming_enables_the_same_callbacks);  // last: snapshots decline after it
  return 0;
}
