// GPU-free tests of counter collection in the replay loop (adapters/cuda/src/inject/replay/counters.hpp): a
// fake source whose sessions need k passes, stream launches fabricated as CUPTI raises them, a fake driver whose
// kernel is a host function over a tracked buffer, and kreplay restoring it between passes. The program's own
// launch (the last pass) is run by the test between ENTER and EXIT, as the driver would.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "injection_fixture.hpp"
#include "log.hpp"
#include "replay/counter_summary.hpp"
#include "replay/counters.hpp"
#include "replay/metric_list.hpp"
#include "replay/range_profiler.hpp"
#include "replay/replay.hpp"
#include "replay_config.hpp"

using namespace kreplay::cuda::inject;

namespace {

const CUcontext ctx0 = fake::handle<CUcontext>(0x100);
const CUfunction step_kernel = fake::handle<CUfunction>(0xC1);
alignas(64) int g_buffer[1024];  // the tracked device memory
int g_runs = 0;                  // the kernel's runs, relaunches and the program's own
int g_fail_run = 0;              // the relaunch that fails instead of running (its run's number; 0: none)
int g_failed_runs = 0;           // launches that failed, relaunches and the program's own
bool g_device_fails = false;     // cuCtxSynchronize reports a failed launch (the context's work failed)

// buffer[i] = 3 buffer[i] + 1: a pass from anything but the snapshot ends elsewhere.
void step() {
  ++g_runs;
  for (int& v : g_buffer) {
    v = 3 * v + 1;
  }
}

// ---- The fake source: what each session was asked, in order ----------------------------------------------
// "open", "configure", "begin", "end", "collect", "gone" (a session destroyed), and "program": the program's own
// launch runs (between its ENTER and EXIT)
std::vector<std::string> g_calls;
struct fake_plan {
  uint32_t passes = 4;
  bool open_fails = false;
  uint32_t failing_end = 0;  // the pass whose end_pass fails (0: none)
  int end_pass_ms = 0;       // how long each end_pass takes (the profiler's own cost of a pass)
  int configure_ms = 0;      // how long configure takes (the counting's set-up, outside the passes)
};
fake_plan g_plan;

class fake_session final : public counter_session {
 public:
  ~fake_session() override { g_calls.push_back("gone"); }
  bool configure(std::string*) override {
    g_calls.push_back("configure");
    if (g_plan.configure_ms > 0) {
      usleep(static_cast<useconds_t>(g_plan.configure_ms) * 1000);
    }
    return true;
  }
  explicit fake_session(uint32_t ranges = 1) : ranges_(ranges) {}
  bool begin_pass(std::string*) override {
    g_calls.push_back("begin");
    runs_at_begin_ = g_runs;
    return true;
  }
  bool end_pass(std::string* why) override {
    g_calls.push_back("end");
    ++ended_;
    if (g_plan.end_pass_ms > 0) {
      usleep(static_cast<useconds_t>(g_plan.end_pass_ms) * 1000);
    }
    if (ended_ == g_plan.failing_end) {
      *why = "the fake's end_pass failed";
      return false;
    }
    // The counted launches ran between begin and end (or failed there): the loop bracketed exactly one pass.
    CHECK(g_runs == runs_at_begin_ + static_cast<int>(ranges_) || g_failed_runs > 0);
    return true;
  }
  bool collect(std::vector<double>* values, std::string*) override {
    g_calls.push_back("collect");
    *values = {static_cast<double>(ended_), 0.25};
    return true;
  }
  bool collect_range(size_t index, std::vector<double>* values, std::string* why) override {
    if (ranges_ == 1) {
      return counter_session::collect_range(index, values, why);
    }
    g_calls.push_back("collect " + std::to_string(index));
    *values = {static_cast<double>(ended_), static_cast<double>(index)};
    return true;
  }

 private:
  uint32_t ranges_ = 1;
  uint32_t ended_ = 0;
  int runs_at_begin_ = 0;
};

class fake_source final : public counter_source {
 public:
  const std::vector<std::string>& metrics() const override { return metrics_; }
  std::unique_ptr<counter_session> open(CUcontext context, uint32_t* passes, std::string* why) override {
    g_calls.push_back("open");
    CHECK(context == ctx0);
    if (g_plan.open_fails) {
      *why = "the fake cannot count here";
      return nullptr;
    }
    *passes = g_plan.passes;
    return std::make_unique<fake_session>();
  }
  std::unique_ptr<counter_session> open_ranges(CUcontext context, uint32_t ranges, uint32_t* passes,
                                               std::string*) override {
    g_calls.push_back("open_ranges " + std::to_string(ranges));
    CHECK(context == ctx0);
    *passes = g_plan.passes;
    return std::make_unique<fake_session>(ranges);
  }

 private:
  std::vector<std::string> metrics_{"smsp__inst_executed.sum", "sm__cycles_elapsed.avg"};
};

// ---- The fake driver and the program's launch ---------------------------------------------------------------
CUresult launch(CUfunction f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**,
                void**) {
  CHECK(f == step_kernel);
  if (g_runs + 1 == g_fail_run) {
    ++g_failed_runs;
    g_fail_run = 0;
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  step();
  return CUDA_SUCCESS;
}

// --cache-control: the flush buffer comes from here, and each flush is a call ("flush") with its size checked.
alignas(64) unsigned g_scratch[2048];
const char* g_cache_control = "none";  // the tests of the loop's protocol leave the caches alone
bool g_kernel_replay = false;          // --backend cupti-kernel-replay
std::map<std::string, std::string> g_options;  // more options for the next replay (range mode's)
bool g_scratch_alloc_fails = false;

driver_api_t counter_driver() {
  driver_api_t d = fake::driver();
  d.device_get_attribute = [](int* value, CUdevice_attribute attribute, CUdevice) {
    CHECK(attribute == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    *value = 4096;
    return CUDA_SUCCESS;
  };
  d.mem_alloc = [](CUdeviceptr* address, size_t bytes) {
    CHECK(bytes == 2 * 4096);
    if (g_scratch_alloc_fails) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *address = reinterpret_cast<CUdeviceptr>(g_scratch);
    return CUDA_SUCCESS;
  };
  d.memset_d2d32_async = [](CUdeviceptr address, size_t, unsigned value, size_t words, size_t height, CUstream) {
    CHECK(address == reinterpret_cast<CUdeviceptr>(g_scratch) && words == 2048 && height == 1);
    std::fill_n(g_scratch, words, value);
    g_calls.push_back("flush");
    return CUDA_SUCCESS;
  };
  d.ctx_synchronize = [] { return g_device_fails ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS; };
  d.launch_kernel = launch;
  d.launch_kernel_ex = [](const CUlaunchConfig*, CUfunction, void**, void**) { return CUDA_ERROR_NOT_SUPPORTED; };
  d.launch_cooperative = [](CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                            void**) { return CUDA_ERROR_NOT_SUPPORTED; };
  return d;
}

CUpti_CallbackData callback_data(CUpti_ApiCallbackSite site, void* params, CUresult* result) {
  return fake::callback_data(site, params, result, ctx0, "cuLaunchKernel");
}

// What happens while the program's launch runs (another thread's work), when set.
std::function<void(replayer&)> g_during_program;

// `arguments`: the launch's kernelParams (the fake driver has no cuFuncGetParamInfo, so kreplay cannot copy them).
// `result`: what the driver's call returns (anything but success: the kernel does not run).
void program_launch(replayer& r, void** arguments = nullptr, CUresult result = CUDA_SUCCESS) {
  cuLaunchKernel_params p{step_kernel, 1, 1, 1, 32, 1, 1, 0, nullptr, arguments, nullptr};
  r.on_launch(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, callback_data(CUPTI_API_ENTER, &p, &result));
  g_calls.push_back("program");
  if (result == CUDA_SUCCESS) {
    step();
  } else {
    ++g_failed_runs;
  }
  if (g_during_program) {
    g_during_program(r);
  }
  r.on_launch(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, callback_data(CUPTI_API_EXIT, &p, &result));
}

tracker* g_tracker = nullptr;
kreplay_device_ops_t g_ops{};

std::string csv_path() { return "/tmp/kreplay_counters_test_" + std::to_string(getpid()) + ".csv"; }

// The report's lines (header first), echoed with "csv: " for the test log; the file is removed.
std::vector<std::string> read_report() {
  std::ifstream in(csv_path());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    std::printf("csv: %s\n", line.c_str());
    lines.push_back(line);
  }
  std::remove(csv_path().c_str());
  return lines;
}

// ---- A fake CUPTI Range Profiler, for the real source -----------------------------------------------------------
std::vector<std::string> g_cupti;  // the calls, in order
size_t g_ranges_per_pass = 1;      // what SetConfig must be asked for (range mode: the range's launches)
bool g_user_ranges = false;        // and whether for user ranges (range mode) or automatic ones
// The kind of range the profiler object was first configured with, -1 before: as on the H200 (CUPTI 13.0), it
// keeps it until disabled; a push after automatic ranges is refused, and a configuration for automatic ranges
// after user ones (there the image's initialisation failed).
int g_object_kind = -1;
// The same for the ranges a pass may hold: configured again for another number, the object recorded 2 ranges a
// pass whatever it held (32 or 4 launches).
int64_t g_object_per_pass = -1;
bool g_per_pass_changed = false;
size_t g_ranges_this_pass = 0;  // pushed in the current pass (user ranges)
int g_runs_at_start = 0;        // g_runs + g_failed_runs at the pass's Start (automatic ranges: one a launch)
size_t g_ranges_recorded = 0;   // recorded in the last pass
bool g_lose_a_range = false;    // the decoded image holds one range fewer than were pushed
// A configuration dropped before its data was decoded leaves the object unable to finish a later one (on the
// H200 every later session's passes were never all submitted) until it is disabled and enabled again.
bool g_undecoded = false;
bool g_object_broken = false;
int g_stops = 0;                   // Stop calls of the current configuration
bool g_started = false;            // a range begun and not yet ended
bool g_range_open = false;         // a user range pushed and not yet popped
int g_runs_at_push = 0;            // g_runs + g_failed_runs when it was pushed
CUpti_RangeProfiler_Object* const g_object = fake::handle<CUpti_RangeProfiler_Object*>(0x0B);
CUpti_Profiler_Host_Object* const g_host = fake::handle<CUpti_Profiler_Host_Object*>(0x0C);
constexpr size_t kFakePasses = 3;

range_profiler_api_t fake_cupti() {
  range_profiler_api_t a;
  a.profiler_initialize = [](CUpti_Profiler_Initialize_Params*) { g_cupti.push_back("init"); return CUPTI_SUCCESS; };
  a.device_get_chip_name = [](CUpti_Device_GetChipName_Params* p) {
    g_cupti.push_back("chip");
    CHECK(p->deviceIndex == 0);
    p->pChipName = "GH100";
    return CUPTI_SUCCESS;
  };
  a.host_initialize = [](CUpti_Profiler_Host_Initialize_Params* p) {
    g_cupti.push_back("host_init");
    CHECK(p->structSize == CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_Initialize_Params, pHostObject));
    CHECK(p->profilerType == CUPTI_PROFILER_TYPE_RANGE_PROFILER && std::string(p->pChipName) == "GH100");
    p->pHostObject = g_host;
    return CUPTI_SUCCESS;
  };
  a.host_deinitialize = [](CUpti_Profiler_Host_Deinitialize_Params*) { return CUPTI_SUCCESS; };
  a.host_config_add_metrics = [](CUpti_Profiler_Host_ConfigAddMetrics_Params* p) {
    g_cupti.push_back("add_metrics");
    for (size_t i = 0; i < p->numMetrics; ++i) {
      if (std::string(p->ppMetricNames[i]) == "bogus__metric.sum") {
        return CUPTI_ERROR_INVALID_METRIC_NAME;
      }
    }
    return CUPTI_SUCCESS;
  };
  a.host_get_config_image_size = [](CUpti_Profiler_Host_GetConfigImageSize_Params* p) {
    p->configImageSize = 64;
    return CUPTI_SUCCESS;
  };
  a.host_get_config_image = [](CUpti_Profiler_Host_GetConfigImage_Params* p) {
    CHECK(p->configImageSize == 64 && p->pConfigImage != nullptr);
    return CUPTI_SUCCESS;
  };
  a.host_get_num_of_passes = [](CUpti_Profiler_Host_GetNumOfPasses_Params* p) {
    p->numOfPasses = kFakePasses;
    return CUPTI_SUCCESS;
  };
  a.host_evaluate_to_gpu_values = [](CUpti_Profiler_Host_EvaluateToGpuValues_Params* p) {
    g_cupti.push_back("evaluate");
    CHECK(p->pHostObject == g_host && p->rangeIndex < g_ranges_per_pass && p->numMetrics >= 1);
    p->pMetricValues[0] = 10.0 * g_stops;  // depends on the passes seen, so the test sees them
    for (size_t i = 1; i < p->numMetrics; ++i) {
      p->pMetricValues[i] = 0.5;
    }
    return CUPTI_SUCCESS;
  };
  a.enable = [](CUpti_RangeProfiler_Enable_Params* p) {
    g_cupti.push_back("enable");
    // The size CUPTI 13.0 knows: the field 13.4 added (cacheControlMode) is left out.
    CHECK(p->structSize == CUPTI_PROFILER_STRUCT_SIZE(CUpti_RangeProfiler_Enable_Params, pRangeProfilerObject));
    CHECK(p->ctx == ctx0);
    p->pRangeProfilerObject = g_object;
    g_object_kind = -1;
    g_object_per_pass = -1;
    g_per_pass_changed = false;
    g_undecoded = false;
    g_object_broken = false;
    return CUPTI_SUCCESS;
  };
  a.disable = [](CUpti_RangeProfiler_Disable_Params*) {
    g_cupti.push_back(g_started ? "disable while started" : "disable");  // only a destroyed context's may be
    g_object_kind = -1;
    g_started = false;  // the object is gone, and its range with it
    return CUPTI_SUCCESS;
  };
  a.get_counter_data_size = [](CUpti_RangeProfiler_GetCounterDataSize_Params* p) {
    CHECK(p->pRangeProfilerObject == g_object && p->numMetrics >= 1);
    if (p->maxNumOfRanges != 1) {
      g_cupti.push_back("size for " + std::to_string(p->maxNumOfRanges));
    }
    p->counterDataSize = 256;
    return CUPTI_SUCCESS;
  };
  a.counter_data_image_initialize = [](CUpti_RangeProfiler_CounterDataImage_Initialize_Params* p) {
    g_cupti.push_back("image");
    CHECK(!g_started && p->counterDataSize == 256 && p->pCounterData != nullptr);
    return CUPTI_SUCCESS;
  };
  a.set_config = [](CUpti_RangeProfiler_SetConfig_Params* p) {
    g_cupti.push_back("set_config");
    CHECK(!g_started);
    // Kernel mode: an automatic range; range mode: a user range each, one launch a pass or several.
    CHECK(p->range == (g_user_ranges ? CUPTI_UserRange : CUPTI_AutoRange));
    CHECK(p->maxRangesPerPass == g_ranges_per_pass);
    if (g_object_kind == CUPTI_UserRange && p->range == CUPTI_AutoRange) {
      return CUPTI_ERROR_UNKNOWN;
    }
    g_object_kind = g_object_kind < 0 ? p->range : g_object_kind;
    const auto per_pass = static_cast<int64_t>(p->maxRangesPerPass);
    g_per_pass_changed = g_per_pass_changed || (g_object_per_pass >= 0 && g_object_per_pass != per_pass);
    g_object_per_pass = g_object_per_pass < 0 ? per_pass : g_object_per_pass;
    g_object_broken = g_object_broken || g_undecoded;
    g_undecoded = true;
    CHECK(p->replayMode == (g_kernel_replay ? CUPTI_KernelReplay : CUPTI_UserReplay));
    CHECK(p->configSize == 64 && p->counterDataImageSize == 256 && p->numNestingLevels == 1);
    g_stops = 0;
    return CUPTI_SUCCESS;
  };
  a.start = [](CUpti_RangeProfiler_Start_Params* p) {
    g_cupti.push_back("start");
    CHECK(p->pRangeProfilerObject == g_object && !g_started);
    g_started = true;
    g_ranges_this_pass = 0;
    g_runs_at_start = g_runs + g_failed_runs;
    return CUPTI_SUCCESS;
  };
  a.stop = [](CUpti_RangeProfiler_Stop_Params* p) {
    g_cupti.push_back("stop");
    CHECK(g_started);
    g_started = false;
    g_ranges_recorded = g_object_kind == CUPTI_UserRange
                            ? g_ranges_this_pass
                            : static_cast<size_t>(g_runs + g_failed_runs - g_runs_at_start);  // each launch one
    if (g_kernel_replay) {  // CUPTI ran every pass inside the launch
      CHECK(g_runs == 1);
      g_stops = static_cast<int>(kFakePasses) - 1;
    }
    p->isAllPassSubmitted = ++g_stops >= static_cast<int>(kFakePasses) && !g_object_broken ? 1 : 0;
    return CUPTI_SUCCESS;
  };
  // A user range holds exactly one relaunch, inside a pass.
  a.push_range = [](CUpti_RangeProfiler_PushRange_Params* p) {
    g_cupti.push_back("push");
    CHECK(g_started && !g_range_open && p->pRangeName != nullptr);
    if (g_object_kind != CUPTI_UserRange) {
      return CUPTI_ERROR_INVALID_PARAMETER;
    }
    g_range_open = true;
    g_runs_at_push = g_runs + g_failed_runs;  // a relaunch that fails still had its range
    ++g_ranges_this_pass;
    return CUPTI_SUCCESS;
  };
  a.pop_range = [](CUpti_RangeProfiler_PopRange_Params*) {
    g_cupti.push_back("pop");
    CHECK(g_started && g_range_open && g_runs + g_failed_runs == g_runs_at_push + 1);
    g_range_open = false;
    return CUPTI_SUCCESS;
  };
  a.get_counter_data_info = [](CUpti_RangeProfiler_GetCounterDataInfo_Params* p) {
    p->numTotalRanges = g_per_pass_changed ? 2 : g_ranges_recorded - (g_lose_a_range ? 1 : 0);
    return CUPTI_SUCCESS;
  };
  a.decode_data = [](CUpti_RangeProfiler_DecodeData_Params* p) {
    g_cupti.push_back("decode");
    g_undecoded = false;
    p->numOfRangeDropped = 0;
    return CUPTI_SUCCESS;
  };
  return a;
}

// The configuration `values` give, with the buffer, the runs and the calls back at their start.
replay_config_t fresh_run(const std::map<std::string, std::string>& values) {
  replay_config_t config;
  std::string error;
  CHECK(parse_replay_config(
      [&](const char* name) -> const char* {
        auto found = values.find(name);
        return found != values.end() ? found->second.c_str() : nullptr;
      },
      &config, &error));
  for (int& v : g_buffer) {
    v = 7;
  }
  g_runs = 0;
  g_failed_runs = 0;
  g_calls.clear();
  return config;
}

// One launch replayed with `passes` asked and the fake source; returns the report's lines (header, row).
std::vector<std::string> replay_one_launch(uint32_t passes, bool restore = true,
                                           std::unique_ptr<counter_source> source = nullptr, int launches = 1,
                                           CUresult result = CUDA_SUCCESS) {
  std::map<std::string, std::string> values = {{"KREPLAY_REPLAY", "1"},
                                               {"KREPLAY_REPLAY_PROGRESS", "0"},
                                               {"KREPLAY_REPLAY_PASSES", std::to_string(passes)},
                                               {"KREPLAY_REPLAY_OUTPUT", csv_path()},
                                               {"KREPLAY_REPLAY_RESTORE", restore ? "1" : "0"},
                                               {"KREPLAY_REPLAY_CACHE_CONTROL", g_cache_control}};
  values.insert(g_options.begin(), g_options.end());
  if (g_kernel_replay) {
    values["KREPLAY_REPLAY_BACKEND"] = "cupti-kernel-replay";
    values["KREPLAY_REPLAY_METRICS"] = "smsp__inst_executed.sum";
  }
  const replay_config_t config = fresh_run(values);
  {
    replayer r(*g_tracker, config, g_ops, counter_driver(),
               source != nullptr ? std::move(source) : std::make_unique<fake_source>());
    std::string why;
    CHECK(r.start(nullptr, &why));
    for (int i = 0; i < launches; ++i) {
      program_launch(r, nullptr, result);
    }
    r.finish();
  }
  std::vector<std::string> lines = read_report();
  CHECK(lines.size() == 1 + static_cast<size_t>(launches));
  return lines;
}

bool one_run_s_result() {
  for (int v : g_buffer) {
    if (v != 22) {  // 3 * 7 + 1
      return false;
    }
  }
  return true;
}

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

std::vector<std::string> calls(std::initializer_list<const char*> names) { return {names.begin(), names.end()}; }

// The source's calls were exactly `names`; when not, the calls made are printed for the test log.
bool calls_are(std::initializer_list<const char*> names) {
  if (g_calls == std::vector<std::string>(names.begin(), names.end())) {
    return true;
  }
  std::printf("calls:");
  for (const std::string& call : g_calls) {
    std::printf(" \"%s\"", call.c_str());
  }
  std::printf("\n");
  return false;
}

// ---- Tests ----------------------------------------------------------------------------------------------------

// The source's 4 counted passes for 2 asked, each from the snapshot: 3 relaunches, then the program's own launch,
// the fourth, whose pass begins at its entry and ends (the values collected) at its exit.
void a_source_that_needs_more_passes_than_asked_gets_them_the_program_s_launch_the_last() {
  g_plan = fake_plan{};
  g_plan.passes = 4;
  const std::vector<std::string> lines = replay_one_launch(2);
  CHECK(g_runs == 4);
  CHECK(one_run_s_result());
  CHECK(calls_are({"open", "configure", "begin", "end", "begin", "end", "begin", "end", "begin", "program",
                          "end", "collect", "gone"}));
  CHECK(lines[0].find(",write_set_misses,graph_mode,graph_launch,graph_node,replay_ms,counter_pass_ms,counter_setup_ms,counters,smsp__inst_executed.sum,sm__cycles_elapsed.avg") !=
        std::string::npos);
  CHECK(lines[1].find(",4,4,") != std::string::npos);         // passes asked and run
  CHECK(lines[1].find(",1,\"\",") != std::string::npos);      // replayed
  CHECK(ends_with(lines[1], ",\"\",4,0.25"));  // counted: no note, then the two values
}

// A row's field by its column's name (the fields before the metrics hold no commas but the kernel's quoted name,
// which these tests keep plain).
double field(const std::vector<std::string>& lines, size_t row, const std::string& column) {
  auto split = [](const std::string& line) {
    std::vector<std::string> fields;
    size_t at = 0;
    for (size_t comma = line.find(','); comma != std::string::npos; comma = line.find(',', at)) {
      fields.push_back(line.substr(at, comma - at));
      at = comma + 1;
    }
    fields.push_back(line.substr(at));
    return fields;
  };
  const std::vector<std::string> names = split(lines[0]);
  const std::vector<std::string> values = split(lines[row]);
  const auto at = static_cast<size_t>(std::find(names.begin(), names.end(), column) - names.begin());
  CHECK(at < names.size() && at < values.size());
  return at < values.size() ? std::atof(values[at].c_str()) : -1;
}

// The report splits a counted pass's cost: counter_pass_ms is the profiler's begin and end of the pass (here an
// end_pass of 20 ms), extra_pass_ms kreplay's restore, relaunch and wait without them; counter_setup_ms the
// counting's time outside the passes (here a configuration of 30 ms); replay_ms the whole replay.
void a_counted_pass_s_cost_is_split_between_kreplay_and_the_profiler() {
  g_plan = fake_plan{};
  g_plan.passes = 4;
  g_plan.end_pass_ms = 20;
  g_plan.configure_ms = 30;
  std::vector<std::string> lines = replay_one_launch(2);
  CHECK(field(lines, 1, "counter_pass_ms") >= 20 && field(lines, 1, "counter_pass_ms") < 200);
  CHECK(field(lines, 1, "extra_pass_ms") < 20);
  CHECK(field(lines, 1, "counter_setup_ms") >= 30 && field(lines, 1, "counter_setup_ms") < 100);  // not the passes' 80
  CHECK(field(lines, 1, "replay_ms") >= 4 * 20 + 30);
  // Range mode: the range's passes, each launch's share (two launches a range).
  g_options = {{"KREPLAY_REPLAY_MODE", "range"}, {"KREPLAY_REPLAY_RANGE_SIZE", "2"}};
  lines = replay_one_launch(2, true, nullptr, 2);
  g_options.clear();
  for (size_t row = 1; row <= 2; ++row) {
    CHECK(field(lines, row, "counter_pass_ms") >= 10 && field(lines, row, "extra_pass_ms") < 10);
    CHECK(field(lines, row, "counter_setup_ms") >= 15);  // the range's one configuration, shared
  }
  g_plan = fake_plan{};
  lines = replay_one_launch(2);
  CHECK(field(lines, 1, "counter_pass_ms") < 20);
}

// The figure logged after `name ` in a phase line, or -1 when it is not there.
double logged(const std::string& text, const std::string& name) {
  const size_t at = text.find(" " + name + " ");
  return at == std::string::npos ? -1.0 : std::strtod(text.c_str() + at + name.size() + 2, nullptr);
}

// KREPLAY_INJECT_LOG=info: each replayed launch's time by phase, one line, with the passes' profiler time apart
// (here a configuration of 30 ms and two counted passes whose end takes 10 ms each), the kernel's name last.
void a_launch_s_phases_are_logged_at_info() {
  g_plan = fake_plan{};
  g_plan.passes = 2;
  g_plan.end_pass_ms = 10;
  g_plan.configure_ms = 30;
  set_log_level(KREPLAY_LOG_INFO);
  const std::string said = fake::stderr_of([] { (void)replay_one_launch(2); });
  set_log_level(KREPLAY_LOG_WARNING);
  const size_t line = said.find("launch 0: ");
  CHECK(line != std::string::npos);
  const std::string text = " " + said.substr(line, said.find('\n', line) - line);
  CHECK(logged(text, "configure") >= 30 && logged(text, "configure") < 100);
  // The second counted pass is the program's launch: its end is in the phase after the program's call.
  CHECK(logged(text, "profiler") >= 20 && logged(text, "passes") >= 10 && logged(text, "pass") >= 10);
  for (const char* phase : {"entry", "window", "drain", "snapshot", "program", "pass", "close", "flushes", "collect",
                            "restores"}) {
    CHECK(logged(text, phase) >= 0);
  }
  CHECK(ends_with(text, "; kernel step_kernel"));
  // Without info lines, nothing is timed or said.
  CHECK(fake::stderr_of([] { (void)replay_one_launch(2); }).find("launch 0: ") == std::string::npos);
  g_plan = fake_plan{};
}

// --cache-control all: the L2 flushed before each counted pass's range (the program's launch's too, when it is
// counted), none before the uncounted ones; without memory for the buffer the launch is still counted, with a note.
void caches_are_flushed_before_every_counted_pass() {
  g_plan = fake_plan{};
  g_plan.passes = 2;
  g_cache_control = "all";
  std::vector<std::string> lines = replay_one_launch(4);
  CHECK(calls_are({"open", "configure", "flush", "begin", "end", "flush", "begin", "end", "collect", "gone",
                          "program"}));
  CHECK(one_run_s_result() && ends_with(lines[1], ",\"\",2,0.25"));
  lines = replay_one_launch(2);
  CHECK(calls_are({"open", "configure", "flush", "begin", "end", "flush", "begin", "program", "end", "collect",
                          "gone"}));
  CHECK(one_run_s_result() && ends_with(lines[1], ",\"\",2,0.25"));
  g_scratch_alloc_fails = true;
  // The buffer is made once per context: a new replayer (a new process, as it were) tries again and fails.
  lines = replay_one_launch(4);
  CHECK(calls_are({"open", "configure", "begin", "end", "begin", "end", "collect", "gone", "program"}));
  CHECK(ends_with(lines[1], ",\"caches not flushed: no device memory for the 8192-byte flush buffer\",2,0.25"));
  g_scratch_alloc_fails = false;
  g_cache_control = "none";
}

// One pass asked and one needed: the program's launch is the only pass, counted, the snapshot never restored.
void one_pass_needed_and_asked_counts_the_program_s_launch_alone() {
  g_plan = fake_plan{};
  g_plan.passes = 1;
  const std::vector<std::string> lines = replay_one_launch(1);
  CHECK(g_runs == 1 && one_run_s_result());
  CHECK(calls_are({"open", "configure", "begin", "program", "end", "collect", "gone"}));
  CHECK(lines[1].find(",1,1,") != std::string::npos && lines[1].find(",1,\"\",") != std::string::npos);
  CHECK(ends_with(lines[1], ",\"\",1,0.25"));
}

void passes_beyond_the_counted_ones_run_without_counters() {
  g_plan = fake_plan{};
  g_plan.passes = 2;
  const std::vector<std::string> lines = replay_one_launch(5);
  CHECK(g_runs == 5);
  CHECK(one_run_s_result());
  CHECK(calls_are({"open", "configure", "begin", "end", "begin", "end", "collect", "gone", "program"}));
  CHECK(lines[1].find(",5,5,") != std::string::npos);
  CHECK(ends_with(lines[1], ",\"\",2,0.25"));
}

// A relaunch that fails on a counted pass: the pass is ended, its values dropped, and the program's own launch
// runs from the snapshot, uncounted.
void a_relaunch_that_fails_on_a_counted_pass_reports_no_values() {
  g_plan = fake_plan{};
  g_plan.passes = 3;
  g_fail_run = 2;  // the relaunch of pass 2
  const std::vector<std::string> lines = replay_one_launch(3);
  CHECK(g_failed_runs == 1 && g_runs == 2);  // pass 1, then the program's own launch
  CHECK(one_run_s_result());
  CHECK(calls_are({"open", "configure", "begin", "end", "begin", "end", "gone", "program"}));
  CHECK(lines[1].find("relaunch failed: pass 2") != std::string::npos);
  CHECK(ends_with(lines[1], ",\"stopped: pass 2 did not run\",,"));
}

void a_launch_the_source_cannot_count_runs_once_with_the_reason() {
  g_plan = fake_plan{};
  g_plan.open_fails = true;
  const std::vector<std::string> lines = replay_one_launch(3);
  CHECK(g_runs == 1);
  CHECK(one_run_s_result());
  CHECK(calls_are({"open", "program"}));
  CHECK(lines[1].find("\"counters: the fake cannot count here, run once\"") != std::string::npos);
  CHECK(ends_with(lines[1], ",\"\",,"));  // no note (the reason says it), no values
}

// A pass whose counting fails ends the counting, never the replay: the program's result is still one run's.
void a_failed_pass_drops_the_counters_and_the_replay_goes_on() {
  g_plan = fake_plan{};
  g_plan.passes = 3;
  g_plan.failing_end = 2;
  const std::vector<std::string> lines = replay_one_launch(3);
  CHECK(g_runs == 3);
  CHECK(one_run_s_result());
  CHECK(calls_are({"open", "configure", "begin", "end", "begin", "end", "gone", "program"}));
  CHECK(lines[1].find(",1,\"\",") != std::string::npos);  // still replayed
  CHECK(lines[1].find("\"stopped: pass 2: the fake's end_pass failed\",,") != std::string::npos);
}

// The control: without restores the counted passes start from each other's results, and so does the program.
void the_control_without_restores_ends_elsewhere() {
  g_plan = fake_plan{};
  g_plan.passes = 4;
  (void)replay_one_launch(2, false);
  CHECK(g_runs == 4);
  CHECK(!one_run_s_result());
}

std::unique_ptr<counter_source> range_profiler(std::vector<std::string> metrics,
                                               counter_replay replay = counter_replay::kreplay,
                                               counter_ranges ranges = counter_ranges::automatic,
                                               uint32_t per_pass = 1) {
  return make_range_profiler_source(fake_cupti(), std::move(metrics), [](CUcontext) { return 0; }, replay, ranges,
                                    per_pass);
}

// The Range Profiler source on a fake CUPTI that asks for 3 passes: set up once, configured per launch for user
// replay with automatic ranges, Start and Stop around each of the 3 passes (the program's own launch the third),
// decoded and evaluated once.
void the_range_profiler_source_brackets_every_pass_cupti_asks_for() {
  g_cupti.clear();
  const std::vector<std::string> lines =
      replay_one_launch(2, true, range_profiler({"smsp__inst_executed.sum", "sm__cycles_elapsed.avg"}), 2);
  CHECK(g_runs == 6);  // 3 counted passes, the program's own launch the third, twice
  CHECK(!g_started);
  const std::vector<std::string> one_launch = {"image", "set_config", "start", "stop", "start", "stop",
                                               "start", "stop", "decode", "evaluate"};
  std::vector<std::string> expected = {"init", "chip", "host_init", "add_metrics", "enable"};  // once
  expected.insert(expected.end(), one_launch.begin(), one_launch.end());
  expected.insert(expected.end(), one_launch.begin(), one_launch.end());
  expected.push_back("disable");  // the source goes with the replay: the profiler is disabled on the context
  CHECK(g_cupti == expected);
  for (size_t row = 1; row <= 2; ++row) {
    CHECK(lines[row].find(",3,3,") != std::string::npos);
    CHECK(ends_with(lines[row], ",\"\",30,0.5"));
  }
}

// --backend cupti-kernel-replay: the same source in CUPTI's kernel replay. One Start before the program's launch,
// one Stop after it (CUPTI runs its 3 passes inside the launch), no pass of kreplay's, the values in the row.
void cupti_s_kernel_replay_runs_the_passes_itself() {
  g_cupti.clear();
  g_kernel_replay = true;
  const std::vector<std::string> lines =
      replay_one_launch(2, true, range_profiler({"smsp__inst_executed.sum", "sm__cycles_elapsed.avg"},
                                                counter_replay::cupti_kernel));
  g_kernel_replay = false;
  CHECK(g_runs == 1 && one_run_s_result());
  const std::vector<std::string> expected = {"init",  "chip", "host_init", "add_metrics", "enable", "image",
                                             "set_config", "start", "stop", "decode", "evaluate", "disable"};
  CHECK(g_cupti == expected);
  CHECK(lines[1].find(",3,3,") != std::string::npos);  // CUPTI's passes
  CHECK(ends_with(lines[1], ",\"\",30,0.5"));
  // Without metrics it is refused when the options are read.
  replay_config_t config;
  std::string error;
  CHECK(!parse_replay_config(
      [](const char* name) -> const char* {
        return std::string(name) == "KREPLAY_REPLAY_BACKEND" ? "cupti-kernel-replay" : nullptr;
      },
      &config, &error));
  CHECK(error.find("give --set or --metrics") != std::string::npos);
  // Nor in range mode: CUPTI replays each launch inside its call.
  CHECK(!parse_replay_config(
      [](const char* name) -> const char* {
        const std::string n(name);
        return n == "KREPLAY_REPLAY_BACKEND" ? "cupti-kernel-replay"
               : n == "KREPLAY_REPLAY_MODE"  ? "range"
               : n == "KREPLAY_REPLAY_METRICS" ? "smsp__inst_executed.sum"
                                               : nullptr;
      },
      &config, &error));
  CHECK(error.find("it takes --replay-mode kernel, not range") != std::string::npos);
}

// What `steps` runs of the kernel leave, from the buffer's start (7 everywhere).
bool after_steps(int steps) {
  int expected = 7;
  for (int i = 0; i < steps; ++i) {
    expected = 3 * expected + 1;
  }
  return std::all_of(std::begin(g_buffer), std::end(g_buffer), [expected](int v) { return v == expected; });
}

// The program's own launch, a counted pass, refused by the driver: its pass is ended at the exit, the values
// dropped, the reason in the row; the memory is the snapshot's, as the failed call leaves it without kreplay.
void a_program_launch_that_fails_in_its_counted_pass_reports_no_values() {
  g_plan = fake_plan{};
  g_plan.passes = 2;
  std::vector<std::string> lines = replay_one_launch(2, true, nullptr, 1, CUDA_ERROR_LAUNCH_FAILED);
  CHECK(g_runs == 1 && after_steps(0));  // pass 1 only, its writes restored
  CHECK(calls_are({"open", "configure", "begin", "end", "begin", "program", "end", "gone"}));
  CHECK(lines[1].find("\"the program's launch failed: CUresult 719\"") != std::string::npos);
  CHECK(field(lines, 1, "passes_asked") == 2 && field(lines, 1, "passes_run") == 1);
  CHECK(ends_with(lines[1], ",\"stopped: pass 2 did not run\",,"));
  // On CUPTI's Range Profiler (3 passes): the third's Stop comes at the exit, and nothing is decoded.
  g_cupti.clear();
  lines = replay_one_launch(2, true, range_profiler({"smsp__inst_executed.sum"}), 1, CUDA_ERROR_LAUNCH_FAILED);
  CHECK(!g_started && std::count(g_cupti.begin(), g_cupti.end(), "stop") == 3);
  CHECK(std::count(g_cupti.begin(), g_cupti.end(), "decode") == 0);
  CHECK(field(lines, 1, "passes_asked") == 3 && field(lines, 1, "passes_run") == 2);  // of the three CUPTI needs
  CHECK(ends_with(lines[1], ",\"stopped: pass 3 did not run\","));
}

// The program's counted launch fails on the device (its launch call succeeded; the wait after it reports the
// failure): its pass is ended, the values dropped, and the row gives the one pass that ran before it.
void a_program_launch_that_fails_on_the_device_reports_no_values() {
  g_plan = fake_plan{};
  g_plan.passes = 2;
  g_during_program = [](replayer&) { g_device_fails = true; };
  const std::vector<std::string> lines = replay_one_launch(2);
  g_during_program = nullptr;
  g_device_fails = false;
  CHECK(calls_are({"open", "configure", "begin", "end", "begin", "program", "end", "gone"}));
  CHECK(lines[1].find("\"the program's launch failed on the device\"") != std::string::npos);
  CHECK(field(lines, 1, "passes_asked") == 2 && field(lines, 1, "passes_run") == 1);
  CHECK(ends_with(lines[1], ",\"stopped: pass 2 did not run\",,"));
}

// The restore that prepares the program's counted launch fails: the counting stops before that pass begins (no
// range is left open), the launch runs uncounted, and the row says the program's launch may have seen the last
// pass's writes, which it did. The control, the same run with the copies working, counts every pass.
void a_restore_that_fails_before_the_program_s_counted_launch_stops_the_counting() {
  g_plan = fake_plan{};
  g_plan.passes = 3;
  fake::g_copy_calls = 0;
  fake::g_copies_fail_from = 3;  // the snapshot's copy, the restore after pass 1, then the one after pass 2
  std::vector<std::string> lines = replay_one_launch(3);
  fake::g_copies_fail_from = 0;
  CHECK(calls_are({"open", "configure", "begin", "end", "begin", "end", "gone", "program"}));
  CHECK(g_runs == 3 && after_steps(2));  // pass 2's writes stayed: the program's launch ran on top of them
  CHECK(lines[1].find("\"restore failed: after pass 2, the program's own launch may see that pass's writes\"") !=
        std::string::npos);
  CHECK(field(lines, 1, "passes_run") == 3);  // the last not from the snapshot, so not replayed
  CHECK(field(lines, 1, "replayed") == 0);
  CHECK(ends_with(lines[1], ",\"stopped: the restore after pass 2 failed\",,"));
  lines = replay_one_launch(3);
  CHECK(g_runs == 3 && one_run_s_result());
  CHECK(calls_are({"open", "configure", "begin", "end", "begin", "end", "begin", "program", "end", "collect",
                   "gone"}));
}

// --replay-mode range: the program's three launches run first; at the third's exit the range's passes run them
// again together from the memory before the first (one session, one Start and Stop per pass around all three,
// each launch a range), and the memory after the program's own launches is put back.
void a_range_s_passes_run_its_launches_together_after_the_program_s() {
  g_plan = fake_plan{};
  g_plan.passes = 2;
  g_options = {{"KREPLAY_REPLAY_MODE", "range"}, {"KREPLAY_REPLAY_RANGE_SIZE", "3"}};
  std::vector<std::string> lines = replay_one_launch(2, true, nullptr, 3);
  CHECK(g_runs == 3 + 2 * 3);  // the program's three, then two passes of three
  CHECK(after_steps(3));       // the program's result, not the passes'
  CHECK(calls_are({"program", "program", "program", "open_ranges 3", "configure", "begin", "end", "begin", "end",
                   "collect 0", "collect 1", "collect 2", "gone"}));
  for (size_t row = 1; row <= 3; ++row) {
    CHECK(lines[row].find(",3,3,") != std::string::npos);  // two passes of kreplay's and the program's own
    CHECK(ends_with(lines[row], ",\"\",2," + std::to_string(row - 1)));  // counted: its range's values
  }
  // The control: no restores, so the passes start from the program's result and it keeps theirs.
  lines = replay_one_launch(2, false, nullptr, 3);
  CHECK(g_runs == 9 && !after_steps(3));
  g_options.clear();
}

// Range mode on the Range Profiler source: a counter-data image sized for the range's two launches, SetConfig
// for two user ranges a pass, Start and Stop around both launches in each of CUPTI's 3 passes, each launch pushed
// and popped as its own range, one decode, then each launch's range evaluated. A CUPTI that cannot push ranges
// counts nothing in range mode, and says so; the launches are still replayed.
void the_range_profiler_counts_a_range_s_launches_in_one_pass() {
  g_cupti.clear();
  g_plan = fake_plan{};
  g_ranges_per_pass = 2;
  g_user_ranges = true;
  g_options = {{"KREPLAY_REPLAY_MODE", "range"}, {"KREPLAY_REPLAY_RANGE_SIZE", "2"}};
  const std::vector<std::string> lines = replay_one_launch(
      2, true,
      range_profiler({"smsp__inst_executed.sum", "sm__cycles_elapsed.avg"}, counter_replay::kreplay,
                     counter_ranges::user, 2),
      2);
  g_options.clear();
  g_ranges_per_pass = 1;
  g_user_ranges = false;
  CHECK(g_runs == 2 + 3 * 2 && after_steps(2));
  std::vector<std::string> expected = {"init", "chip", "host_init", "add_metrics", "enable", "size for 2", "image",
                                       "set_config"};
  for (int pass = 0; pass < 3; ++pass) {
    expected.insert(expected.end(), {"start", "push", "pop", "push", "pop", "stop"});
  }
  expected.insert(expected.end(), {"decode", "evaluate", "evaluate", "disable"});
  CHECK(g_cupti == expected);
  CHECK(lines[1].find(",4,4,") != std::string::npos && ends_with(lines[2], ",\"\",30,0.5"));

  range_profiler_api_t without_push = fake_cupti();
  without_push.push_range = nullptr;
  g_options = {{"KREPLAY_REPLAY_MODE", "range"}, {"KREPLAY_REPLAY_RANGE_SIZE", "2"}};
  const std::vector<std::string> uncounted = replay_one_launch(
      2, true,
      make_range_profiler_source(without_push, {"smsp__inst_executed.sum"}, [](CUcontext) { return 0; },
                                 counter_replay::kreplay, counter_ranges::user, 2),
      2);
  g_options.clear();
  CHECK(after_steps(2) && uncounted.size() == 3);
  CHECK(uncounted.size() == 3 && uncounted[1].find("no cuptiRangeProfilerPushRange") != std::string::npos &&
        uncounted[1].find(",1,\"\",") != std::string::npos);  // replayed, not counted
}

// --profiler-ranges auto: range mode on CUPTI's automatic ranges. The configuration allows the range's two launches
// a pass, as with user ranges, but nothing is pushed or popped: CUPTI takes each relaunch between Start and Stop as
// a range (the fake records one for each launch it ran), and each launch's range is evaluated into its row.
void range_mode_on_automatic_ranges_pushes_nothing() {
  g_cupti.clear();
  g_plan = fake_plan{};
  g_ranges_per_pass = 2;
  g_options = {{"KREPLAY_REPLAY_MODE", "range"}, {"KREPLAY_REPLAY_RANGE_SIZE", "2"}};
  const std::vector<std::string> lines = replay_one_launch(
      2, true, range_profiler({"smsp__inst_executed.sum"}, counter_replay::kreplay, counter_ranges::automatic, 2), 2);
  g_options.clear();
  g_ranges_per_pass = 1;
  CHECK(g_runs == 2 + 3 * 2 && after_steps(2));
  std::vector<std::string> expected = {"init",  "chip",  "host_init", "add_metrics", "enable", "size for 2",
                                       "image", "set_config"};
  for (int pass = 0; pass < 3; ++pass) {
    expected.insert(expected.end(), {"start", "stop"});
  }
  expected.insert(expected.end(), {"decode", "evaluate", "evaluate", "disable"});
  CHECK(g_cupti == expected);
  CHECK(lines.size() == 3);
  for (size_t row = 1; row < lines.size(); ++row) {
    CHECK(lines[row].find("stopped") == std::string::npos && lines[row].find("not collected") == std::string::npos);
    CHECK(ends_with(lines[row], ",\"\",30"));  // counted: 3 passes seen
  }
}

// Range mode makes every launch a user range, also one alone in its range: a context's profiler object keeps the
// kind of range it was first configured with (the fake refuses a push after automatic ranges, as CUPTI 13.0 did
// on the H200), so ranges of one launch configured for automatic ranges would stop every later range's counting.
void range_mode_makes_a_launch_alone_in_its_range_a_user_range() {
  g_cupti.clear();
  g_plan = fake_plan{};
  g_user_ranges = true;
  g_options = {{"KREPLAY_REPLAY_MODE", "range"}, {"KREPLAY_REPLAY_RANGE_SIZE", "1"}};
  const std::vector<std::string> lines = replay_one_launch(
      2, true, range_profiler({"smsp__inst_executed.sum"}, counter_replay::kreplay, counter_ranges::user), 2);
  g_options.clear();
  g_user_ranges = false;
  CHECK(after_steps(2) && lines.size() == 3);
  const std::vector<std::string> one_range = {"image", "set_config", "start", "push", "pop", "stop", "start", "push",
                                              "pop",   "stop",       "start", "push", "pop", "stop", "decode",
                                              "evaluate"};
  std::vector<std::string> expected = {"init", "chip", "host_init", "add_metrics", "enable"};
  expected.insert(expected.end(), one_range.begin(), one_range.end());
  expected.insert(expected.end(), one_range.begin(), one_range.end());
  expected.push_back("disable");
  CHECK(g_cupti == expected);
  for (size_t row = 1; row < lines.size(); ++row) {
    CHECK(lines[row].find("stopped") == std::string::npos && ends_with(lines[row], ",\"\",30"));  // counted
  }
}

// Range mode with ranges of up to `size` launches, 2 passes, a source that needs 1, and the report.
replay_config_t range_run(const char* size) {
  g_plan = fake_plan{};
  g_plan.passes = 1;
  return fresh_run({{"KREPLAY_REPLAY", "1"},
                    {"KREPLAY_REPLAY_PROGRESS", "0"},
                    {"KREPLAY_REPLAY_PASSES", "2"},
                    {"KREPLAY_REPLAY_CACHE_CONTROL", "none"},
                    {"KREPLAY_REPLAY_OUTPUT", csv_path()},
                    {"KREPLAY_REPLAY_MODE", "range"},
                    {"KREPLAY_REPLAY_RANGE_SIZE", size}});
}

// A range-mode replay on the Range Profiler source with user ranges, `per_pass` a pass (ranges of up to that many
// launches), around `program`; the fake expects that configuration meanwhile.
void with_user_ranges(uint32_t per_pass, const std::function<void(replayer&)>& program) {
  g_user_ranges = true;
  g_ranges_per_pass = per_pass;
  const replay_config_t config = range_run(std::to_string(per_pass).c_str());
  {
    replayer r(*g_tracker, config, g_ops, counter_driver(),
               range_profiler({"smsp__inst_executed.sum"}, counter_replay::kreplay, counter_ranges::user, per_pass));
    std::string why;
    CHECK(r.start(nullptr, &why));
    program(r);
    r.finish();
  }
  g_user_ranges = false;
  g_ranges_per_pass = 1;
}

// A decoded image that does not hold the range's launches: every launch's row says so, from one decode.
void a_range_s_data_is_decoded_once_for_all_its_launches() {
  g_cupti.clear();
  g_lose_a_range = true;
  with_user_ranges(2, [](replayer& r) {
    program_launch(r);
    program_launch(r);
  });
  g_lose_a_range = false;
  CHECK(std::count(g_cupti.begin(), g_cupti.end(), "decode") == 1);
  const std::vector<std::string> lines = read_report();
  CHECK(lines.size() == 3);
  for (size_t row = 1; row < lines.size(); ++row) {
    CHECK(lines[row].find("not collected: 1 ranges recorded for 2 launches") != std::string::npos);
  }
}

// A relaunch that fails in a range's pass: the pass stops there (no more launches, no empty ranges pushed after
// it), the range's rows say which launch and the CUresult, and the program's result is kept.
void a_range_pass_that_fails_names_the_launch() {
  g_cupti.clear();
  with_user_ranges(2, [](replayer& r) {
    g_fail_run = 3;  // the program's two launches, then pass 1's relaunch of the first
    program_launch(r);
    program_launch(r);
  });
  CHECK(after_steps(2) && g_failed_runs == 1);
  const auto start = std::find(g_cupti.begin(), g_cupti.end(), "start");
  CHECK(start != g_cupti.end() && std::vector<std::string>(start, g_cupti.end()) ==
                                      calls({"start", "push", "pop", "stop", "disable"}));
  const std::vector<std::string> lines = read_report();
  CHECK(lines.size() == 3);
  for (size_t row = 1; row < lines.size(); ++row) {
    CHECK(lines[row].find("range: pass 1 of 3 did not run (its launch 1, step_kernel: CUresult 719)") !=
          std::string::npos);
  }
}

// Ranges of different lengths (one launch ended by a copy, then a full one of 4) are configured alike, for the
// source's 4 ranges a pass: the fake, as the H200's CUPTI, records 2 ranges a pass once the number changes.
void ranges_of_any_length_are_configured_for_the_same_ranges_a_pass() {
  g_cupti.clear();
  with_user_ranges(4, [](replayer& r) {
    program_launch(r);
    CUresult ok = CUDA_SUCCESS;
    r.on_copy(fake::callback_data(CUPTI_API_ENTER, nullptr, &ok, ctx0, "cuMemcpyHtoD_v2"));
    r.on_copy(fake::callback_data(CUPTI_API_EXIT, nullptr, &ok, ctx0, "cuMemcpyHtoD_v2"));
    for (int i = 0; i < 4; ++i) {
      program_launch(r);
    }
  });
  CHECK(after_steps(5) && std::count(g_cupti.begin(), g_cupti.end(), "set_config") == 2);
  CHECK(std::count(g_cupti.begin(), g_cupti.end(), "size for 4") == 1);  // one image, made at the set-up
  const std::vector<std::string> lines = read_report();
  CHECK(lines.size() == 6);
  for (size_t row = 1; row < lines.size(); ++row) {
    CHECK(lines[row].find("not collected") == std::string::npos && lines[row].find("stopped") == std::string::npos);
    CHECK(ends_with(lines[row], ",\"\",30"));  // counted
  }
}

// A user range that cannot be pushed: the pass's ranges are not the launches', so no later pass is counted and
// nothing is collected; the rows say why, and the range is still replayed and its memory put back.
void a_range_that_cannot_be_pushed_stops_the_counting_not_the_replay() {
  g_cupti.clear();
  g_plan = fake_plan{};
  g_ranges_per_pass = 2;
  g_user_ranges = true;
  range_profiler_api_t api = fake_cupti();
  api.push_range = [](CUpti_RangeProfiler_PushRange_Params*) {
    g_cupti.push_back("push");
    return g_cupti.size() > 10 ? CUPTI_ERROR_UNKNOWN : CUPTI_SUCCESS;  // the second push of the first pass fails
  };
  api.pop_range = [](CUpti_RangeProfiler_PopRange_Params*) {
    g_cupti.push_back("pop");
    return CUPTI_SUCCESS;
  };
  g_options = {{"KREPLAY_REPLAY_MODE", "range"}, {"KREPLAY_REPLAY_RANGE_SIZE", "2"}};
  const std::vector<std::string> lines = replay_one_launch(
      2, true,
      make_range_profiler_source(api, {"smsp__inst_executed.sum"}, [](CUcontext) { return 0; },
                                 counter_replay::kreplay, counter_ranges::user, 2),
      2);
  g_options.clear();
  g_ranges_per_pass = 1;
  g_user_ranges = false;
  CHECK(g_runs == 2 + 3 * 2 && after_steps(2));  // every pass ran; the program's result kept
  CHECK(std::count(g_cupti.begin(), g_cupti.end(), "start") == 1);  // the later passes are not counted
  CHECK(std::find(g_cupti.begin(), g_cupti.end(), "decode") == g_cupti.end());
  for (size_t row = 1; row <= 2; ++row) {
    CHECK(row < lines.size() && lines[row].find("stopped: pass 1: cuptiRangeProfilerPushRange failed") !=
                                    std::string::npos);
    CHECK(row < lines.size() && lines[row].find(",1,\"\",") != std::string::npos);  // replayed
  }
}

// A copy on the range's thread ends it early: its two launches get their passes and rows before the copy runs.
void a_copy_ends_the_range_before_it() {
  const replay_config_t config = range_run("8");
  replayer r(*g_tracker, config, g_ops, counter_driver(), std::make_unique<fake_source>());
  std::string why;
  CHECK(r.start(nullptr, &why));
  program_launch(r);
  program_launch(r);
  CHECK(g_runs == 2 && calls_are({"program", "program"}));  // the range is still open
  CUresult ok = CUDA_SUCCESS;
  r.on_copy(fake::callback_data(CUPTI_API_ENTER, nullptr, &ok, ctx0, "cuMemcpyHtoD_v2"));
  CHECK(g_runs == 4 && after_steps(2));  // one pass of the two, before the copy; the program's result kept
  CHECK(calls_are({"program", "program", "open_ranges 2", "configure", "begin", "end", "collect 0", "collect 1",
                   "gone"}));
  r.on_copy(fake::callback_data(CUPTI_API_EXIT, nullptr, &ok, ctx0, "cuMemcpyHtoD_v2"));
  r.finish();
}

// A launch whose arguments kreplay cannot copy cannot join a range (its passes run after the program's call has
// returned, when the program's argument array may be gone): the range before it ends, it runs once with the
// reason, and the next launches begin a new range.
void a_launch_whose_arguments_cannot_be_copied_ends_the_range_and_runs_once() {
  const replay_config_t config = range_run("2");
  {
    replayer r(*g_tracker, config, g_ops, counter_driver(), std::make_unique<fake_source>());
    std::string why;
    CHECK(r.start(nullptr, &why));
    program_launch(r);
    CHECK(g_runs == 1 && calls_are({"program"}));  // the range is open
    int value = 5;
    void* arguments[] = {&value};
    program_launch(r, arguments);
    // The first range's pass ran before the launch that ended it; that launch ran once, not in a range.
    CHECK(g_runs == 3 && after_steps(2));
    CHECK(calls_are({"program", "open_ranges 1", "configure", "begin", "end", "collect", "gone", "program"}));
    program_launch(r);
    program_launch(r);
    CHECK(g_runs == 3 + 2 + 2 && after_steps(4));  // a full range of the next two: one pass of both
    r.finish();
  }
  const std::vector<std::string> lines = read_report();
  CHECK(lines.size() == 5);
  CHECK(lines.size() == 5 && lines[2].find("range: its arguments cannot be copied, run once") != std::string::npos &&
        lines[2].find(",0,\"range:") != std::string::npos);
  for (size_t row : {1, 3, 4}) {
    CHECK(row < lines.size() && lines[row].find(",1,\"\",") != std::string::npos);  // replayed
  }
}

// A function's limit on dynamic shared memory as the fake driver keeps it: the program sets it before each launch
// (as cuDNN appears to), through the function or through its CUkernel, and a launch asking for more fails as
// cuLaunchKernel does. kreplay never sets it: the fake has no attribute calls to give it.
int g_shared_limit = 48 * 1024;
const CUkernel step_kernel_handle = fake::handle<CUkernel>(0xC7);

driver_api_t shared_limit_driver() {
  driver_api_t d = counter_driver();
  d.kernel_get_function = [](CUfunction* f, CUkernel kernel) {
    *f = kernel == step_kernel_handle ? step_kernel : nullptr;
    return kernel == step_kernel_handle ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  };
  d.launch_kernel = [](CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared, CUstream stream, void** params, void** extra) {
    if (shared > static_cast<unsigned>(g_shared_limit)) {
      ++g_failed_runs;
      return CUDA_ERROR_INVALID_VALUE;
    }
    return launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
  };
  return d;
}

// The program sets an attribute of `function` (step_kernel's limit by default), through its CUkernel (the
// runtime's way) or the function itself; `seen` false: the replay is not told (the control).
void program_sets(replayer& r, int value, bool through_kernel, bool seen = true,
                  CUfunction_attribute attribute = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                  CUfunction function = step_kernel) {
  CUresult ok = CUDA_SUCCESS;
  const CUkernel kernel = function == step_kernel ? step_kernel_handle : fake::handle<CUkernel>(0xC9);
  cuKernelSetAttribute_params on_kernel{attribute, value, kernel, 0};
  cuFuncSetAttribute_params on_function{function, attribute, value};
  if (seen && through_kernel) {
    r.on_function_attribute(CUPTI_DRIVER_TRACE_CBID_cuKernelSetAttribute,
                            callback_data(CUPTI_API_ENTER, &on_kernel, &ok));
  } else if (seen) {
    r.on_function_attribute(CUPTI_DRIVER_TRACE_CBID_cuFuncSetAttribute,
                            callback_data(CUPTI_API_ENTER, &on_function, &ok));
  }
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && function == step_kernel) {
    g_shared_limit = value;
  }
}

// The program's launch with `shared` bytes of dynamic shared memory.
void program_launch_shared(replayer& r, unsigned shared) {
  cuLaunchKernel_params p{step_kernel, 1, 1, 1, 32, 1, 1, shared, nullptr, nullptr, nullptr};
  CUresult ok = CUDA_SUCCESS;
  r.on_launch(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, callback_data(CUPTI_API_ENTER, &p, &ok));
  step();
  r.on_launch(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, callback_data(CUPTI_API_EXIT, &p, &ok));
}

// A range's passes relaunch its launches after the program's calls, under the function's limits as they are then.
// The program lowers the limit from 24 KiB (its first launch's) to 6 KiB for its next launch (cuDNN's batch-norm
// kernel on the H200 did; kreplay's earlier mend raised the limit itself, and the value it put back overrode the
// program's later settings, failing the program's own launch): the range ends at that call, before the limit
// changes, and both launches are counted, each in its range. Raising a limit, lowering it to what the range's
// launches still fit, the carve-out hint, and another function's limit end nothing; a cluster attribute of the
// range's function ends it. The control, the replay not told of the call: the relaunch fails as it did on the
// H200.
void a_range_ends_before_the_program_lowers_a_limit_its_launches_need() {
  for (const bool through_kernel : {true, false}) {
    const replay_config_t config = range_run("3");
    const std::string said = fake::stderr_of([&] {
      replayer r(*g_tracker, config, g_ops, shared_limit_driver(), std::make_unique<fake_source>());
      std::string why;
      CHECK(r.start(nullptr, &why));
      program_sets(r, 16 * 1024, through_kernel);
      program_launch_shared(r, 16 * 1024);
      program_sets(r, 20 * 1024, through_kernel);  // raised: the range goes on
      program_sets(r, 18 * 1024, through_kernel);  // lowered, and the launch still fits
      program_sets(r, 50, through_kernel, true, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);
      program_sets(r, 0, through_kernel, true, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                   fake::handle<CUfunction>(0xC8));  // another function
      CHECK(g_runs == 1);
      program_sets(r, 24 * 1024, through_kernel);
      program_launch_shared(r, 24 * 1024);
      CHECK(g_runs == 2);
      program_sets(r, 6 * 1024, through_kernel);  // below both: their range ends first
      CHECK(g_runs == 2 + 2);
      program_launch_shared(r, 6 * 1024);
      program_sets(r, 6 * 1024, through_kernel);  // what the launch was made with: nothing ends
      CHECK(g_runs == 2 + 2 + 1);
      CUresult ok = CUDA_SUCCESS;
      r.on_range_end_call(fake::callback_data(CUPTI_API_ENTER, nullptr, &ok, ctx0, "cuCtxSynchronize"));
      CHECK(g_runs == 2 + 2 + 1 + 1);
      program_launch_shared(r, 6 * 1024);
      program_sets(r, 1, through_kernel, true, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED);
      CHECK(g_runs == 2 + 2 + 1 + 1 + 2);  // a cluster attribute of the range's function: it ends
      r.finish();
    });
    CHECK(after_steps(4) && g_failed_runs == 0 && g_shared_limit == 6 * 1024);
    // The summary counts the ranges by what ended them.
    CHECK(said.find("ranges: 3 of 1.3 launches on average, ended by: 1 x a function's shared-memory limit lowered "
                    "below a launch of the range; 1 x an attribute of a function of the range set; 1 x "
                    "cuCtxSynchronize\n") != std::string::npos);
    const std::vector<std::string> lines = read_report();
    CHECK(lines.size() == 5);
    for (size_t row = 1; row < lines.size(); ++row) {
      CHECK(lines[row].find(",1,\"\",") != std::string::npos);  // replayed and counted
    }
  }
  const replay_config_t config = range_run("2");
  {
    replayer r(*g_tracker, config, g_ops, shared_limit_driver(), std::make_unique<fake_source>());
    std::string why;
    CHECK(r.start(nullptr, &why));
    program_sets(r, 24 * 1024, true, false);
    program_launch_shared(r, 24 * 1024);
    program_sets(r, 6 * 1024, true, false);
    program_launch_shared(r, 6 * 1024);  // the range is full: its pass runs now, under 6 KiB
    r.finish();
  }
  CHECK(after_steps(2) && g_failed_runs == 1);
  const std::vector<std::string> lines = read_report();
  CHECK(lines.size() == 3 && lines[1].find("did not run (its launch 1") != std::string::npos &&
        lines[1].find("CUresult 1)") != std::string::npos);
  g_shared_limit = 48 * 1024;
}

// --list-metrics: each type's endings (from its first metric), then every base metric sorted, with its unit and
// description; a CUPTI without the listing calls, or one that fails, says why.
void the_metric_list_gives_each_type_s_endings_and_every_metric() {
  range_profiler_api_t api = fake_cupti();
  api.host_get_base_metrics = [](CUpti_Profiler_Host_GetBaseMetrics_Params* p) {
    static const char* counters[] = {"smsp__inst_executed", "dram__bytes_read"};
    static const char* ratios[] = {"sm__warps_active"};
    CHECK(p->pHostObject == g_host);
    p->ppMetricNames = p->metricType == CUPTI_METRIC_TYPE_COUNTER ? counters : ratios;
    p->numMetrics = p->metricType == CUPTI_METRIC_TYPE_COUNTER ? 2 : p->metricType == CUPTI_METRIC_TYPE_RATIO ? 1 : 0;
    return CUPTI_SUCCESS;
  };
  api.host_get_sub_metrics = [](CUpti_Profiler_Host_GetSubMetrics_Params* p) {
    static const char* counter_endings[] = {".sum", ".avg", ".max"};
    static const char* ratio_endings[] = {".ratio", ".pct"};
    const bool counter = p->metricType == CUPTI_METRIC_TYPE_COUNTER;
    CHECK(std::string(p->pMetricName) == (counter ? "dram__bytes_read" : "sm__warps_active"));
    p->ppSubMetrics = counter ? counter_endings : ratio_endings;
    p->numOfSubmetrics = counter ? 3 : 2;
    return CUPTI_SUCCESS;
  };
  api.host_get_metric_properties = [](CUpti_Profiler_Host_GetMetricProperties_Params* p) {
    // The layout CUPTI 13.0 knows ends at metricType; a smaller size would be refused.
    CHECK(p->structSize >= CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_GetMetricProperties_Params, metricType));
    const std::string name = p->pMetricName;
    p->pDimUnit = name == "dram__bytes_read" ? "byte" : "inst";
    p->pDescription = name == "dram__bytes_read" ? "bytes read from DRAM" : "instructions";
    return name == "sm__warps_active" ? CUPTI_ERROR_INVALID_METRIC_NAME : CUPTI_SUCCESS;
  };
  g_cupti.clear();
  std::string text;
  std::string why;
  CHECK(list_metrics(api, 0, &text, &why));
  CHECK(text.rfind("# the metrics of GH100 (device 0)", 0) == 0);
  CHECK(text.find("# counter (2), a name ends in one of: .sum .avg .max\n") != std::string::npos);
  CHECK(text.find("# ratio (1), a name ends in one of: .ratio .pct\n") != std::string::npos);
  CHECK(text.find("# throughput") == std::string::npos);  // none of that type
  const size_t dram = text.find("counter     dram__bytes_read ");
  const size_t inst = text.find("counter     smsp__inst_executed ");
  CHECK(dram != std::string::npos && inst != std::string::npos && dram < inst);  // sorted
  CHECK(text.find("byte       bytes read from DRAM\n", dram) != std::string::npos);
  // Listed without the properties CUPTI refused to give: nothing after the name but blanks.
  const size_t ratio = text.find("ratio       sm__warps_active ");
  const size_t end = text.find('\n', ratio);
  CHECK(ratio != std::string::npos && end != std::string::npos &&
        text.find_first_not_of(' ', ratio + 28) == end);
  CHECK(std::count(g_cupti.begin(), g_cupti.end(), "host_init") == 1);
  api.host_get_sub_metrics = [](CUpti_Profiler_Host_GetSubMetrics_Params*) { return CUPTI_ERROR_UNKNOWN; };
  CHECK(!list_metrics(api, 0, &text, &why) && why.find("cuptiProfilerHostGetSubMetrics failed: ") == 0);
  api.host_get_base_metrics = nullptr;
  CHECK(!list_metrics(api, 0, &text, &why) && why.find("cannot list metrics") != std::string::npos);
}

// A session given up between Start and Stop (an exception on the way, say) stops its range: the next launch's
// configuration must not find the profiler started.
void a_session_dropped_inside_a_pass_stops_its_range() {
  g_cupti.clear();
  std::unique_ptr<counter_source> source = range_profiler({"smsp__inst_executed.sum", "sm__cycles_elapsed.avg"});
  uint32_t passes = 0;
  std::string why;
  std::unique_ptr<counter_session> session = source->open(ctx0, &passes, &why);
  CHECK(session != nullptr && passes == kFakePasses);
  CHECK(session->configure(&why) && session->begin_pass(&why));
  CHECK(g_started);
  session.reset();
  CHECK(!g_started && g_cupti.back() == "stop");
  // The context goes: the profiler is disabled on it while it is still valid.
  source->context_gone(ctx0);
  CHECK(g_cupti.back() == "disable");
}

// The context destroyed while the program's launch, a counted pass, runs (a cudaDeviceReset on another thread):
// the source disables the profiler on it, and the launch's exit lets its session go without a call into the
// object: no Stop after the Disable. The same for CUPTI's kernel replay, whose one range spans the launch.
void a_context_destroyed_during_a_counted_program_launch_is_not_called_into() {
  for (const bool kernel_replay : {false, true}) {
    g_cupti.clear();
    g_kernel_replay = kernel_replay;
    g_during_program = [](replayer& r) { r.on_context_destroyed(ctx0); };
    const std::vector<std::string> lines = replay_one_launch(
        kernel_replay ? 1 : 3, true,
        range_profiler({"smsp__inst_executed.sum"},
                       kernel_replay ? counter_replay::cupti_kernel : counter_replay::kreplay));
    g_during_program = nullptr;
    g_kernel_replay = false;
    const auto disabled = std::find(g_cupti.begin(), g_cupti.end(), "disable while started");
    CHECK(disabled != g_cupti.end() && std::find(disabled, g_cupti.end(), "stop") == g_cupti.end());
    CHECK(std::count(g_cupti.begin(), g_cupti.end(), "stop") == (kernel_replay ? 0 : 2));  // passes 1 and 2
    CHECK(lines[1].find("\"the launch's context was destroyed before its exit\"") != std::string::npos);
    CHECK(ends_with(lines[1], ",\"stopped: the launch's context was destroyed\","));
  }
}

// A launch whose relaunch fails on a counted pass drops its session undecoded; the next launch's session finds
// the profiler disabled and enabled afresh on the context, and is counted (without that, the fake, as CUPTI on the
// H200, never submits all its passes).
void a_session_dropped_undecoded_enables_the_profiler_afresh() {
  g_cupti.clear();
  g_plan = fake_plan{};
  g_fail_run = 2;  // the first launch's relaunch of pass 2, a counted one
  const std::vector<std::string> lines = replay_one_launch(2, true, range_profiler({"smsp__inst_executed.sum"}), 2);
  CHECK(lines.size() == 3 && lines[1].find("stopped: pass 2 did not run") != std::string::npos);
  CHECK(ends_with(lines[2], ",\"\",30"));  // the second launch counted
  const auto first = std::find(g_cupti.begin(), g_cupti.end(), "enable");
  const auto second = first == g_cupti.end() ? first : std::find(first + 1, g_cupti.end(), "enable");
  CHECK(second != g_cupti.end() && *(second - 1) == "disable");  // between the two launches
  CHECK(std::count(g_cupti.begin(), g_cupti.end(), "enable") == 2);
}

// A metric CUPTI does not know is left out (one line on stderr): each name is tried alone, the launches are counted
// with the others, and its column stays empty.
void a_metric_cupti_does_not_know_is_left_out_and_the_others_counted() {
  g_cupti.clear();
  std::vector<std::string> metrics = {"bogus__metric.sum", "sm__cycles_elapsed.avg"};
  const std::vector<std::string> lines = replay_one_launch(2, true, range_profiler(metrics), 2);
  CHECK(g_runs == 6);  // 3 counted passes, the program's own launch the third, twice
  CHECK(ends_with(lines[0], ",counters,bogus__metric.sum,sm__cycles_elapsed.avg"));
  for (size_t row = 1; row <= 2; ++row) {
    CHECK(ends_with(lines[row], ",\"\",,30"));  // counted; the unknown metric's column empty
  }
  const std::vector<std::string> set_up = {"init",        "chip",      "host_init",   "add_metrics",  // the list
                                           "host_init",   "add_metrics",                              // bogus alone
                                           "host_init",   "add_metrics",                              // the other
                                           "host_init",   "add_metrics", "enable"};                   // the known
  CHECK(std::vector<std::string>(g_cupti.begin(), g_cupti.begin() + set_up.size()) == set_up);
}

// A list the device knows none of: one line on stderr, every launch of the context run once with the reason, and
// the set-up is not tried again.
void a_list_cupti_knows_none_of_runs_the_launches_once_with_the_reason() {
  g_cupti.clear();
  const std::vector<std::string> lines = replay_one_launch(2, true, range_profiler({"bogus__metric.sum"}), 2);
  CHECK(g_runs == 2);  // each launch once
  for (size_t row = 1; row <= 2; ++row) {
    CHECK(lines[row].find("counters: cuptiProfilerHostConfigAddMetrics failed") != std::string::npos);
    CHECK(lines[row].find("GH100 knows none of the metrics") != std::string::npos);
  }
  CHECK(g_cupti == calls({"init", "chip", "host_init", "add_metrics", "host_init", "add_metrics"}));
}

// --set names a list; --metrics adds to it, in order, without repeating a name.
void sets_and_lists_make_one_list_of_metrics() {
  replay_config_t config;
  std::vector<std::string> names;
  std::string why;
  CHECK(counted_metrics(config, &names, &why) && names.empty());
  config.set = metric_set::counts;
  CHECK(counted_metrics(config, &names, &why) && names.size() == 6 && names[0] == "smsp__inst_executed.sum");
  config.set = metric_set::full;
  config.metrics = "sm__warps_launched.sum,dram__bytes.sum";
  CHECK(counted_metrics(config, &names, &why));
  CHECK(names.front() == "gpu__time_duration.sum" && names.back() == "dram__bytes.sum");
  CHECK(std::count(names.begin(), names.end(), "sm__warps_launched.sum") == 1);
  CHECK(names.size() == 7 + 6 + 12 + 1);
  // warps: the counts, then counters of the SMs alone (none of L2, DRAM or the front end's elapsed cycles).
  config.set = metric_set::warps;
  config.metrics.clear();
  CHECK(counted_metrics(config, &names, &why) && names.size() == 6 + 27 && names[0] == "smsp__inst_executed.sum");
  CHECK(std::count(names.begin(), names.end(), "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio") == 1);
  CHECK(std::none_of(names.begin(), names.end(), [](const std::string& name) {
    return name.rfind("dram__", 0) == 0 || name.rfind("lts__", 0) == 0 ||
           name.find("cycles_elapsed") != std::string::npos;
  }));
  config.metrics = "a,,b";
  CHECK(!counted_metrics(config, &names, &why) && why.find("empty metric name") != std::string::npos);
  // The option: its words in the enum's order.
  const std::map<std::string, std::string> values = {{"KREPLAY_REPLAY", "1"}, {"KREPLAY_REPLAY_SET", "warps"}};
  auto get = [&](const char* name) -> const char* {
    auto found = values.find(name);
    return found != values.end() ? found->second.c_str() : nullptr;
  };
  replay_config_t parsed;
  CHECK(parse_replay_config(get, &parsed, &why) && parsed.set == metric_set::warps);
  const std::map<std::string, std::string> wrong = {{"KREPLAY_REPLAY", "1"}, {"KREPLAY_REPLAY_SET", "most"}};
  auto get_wrong = [&](const char* name) -> const char* {
    auto found = wrong.find(name);
    return found != wrong.end() ? found->second.c_str() : nullptr;
  };
  CHECK(!parse_replay_config(get_wrong, &parsed, &why) && why.find("KREPLAY_REPLAY_SET") != std::string::npos);
}

// The summary at exit: kernels by time (gpu__time_duration.sum where counted), their share, launches, readable
// names and the means of the first three other metrics; rows without values are left out.
void the_summary_names_the_kernels_with_the_most_time() {
  counter_summary summary({"gpu__time_duration.sum", "smsp__inst_executed.sum", "x.sum"});
  auto row = [](const char* kernel, std::vector<double> values) {
    launch_row_t r;
    r.kernel = kernel;
    r.metrics = std::move(values);
    return r;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  summary.add(row("_Z7kernelAPf", {2e6, 100, 1}));
  summary.add(row("_Z7kernelBPf", {3e6, 40000, nan}));
  summary.add(row("_Z7kernelBPf", {3e6, 60000, 4}));
  summary.add(row("_Z7kernelCPf", {}));  // not counted
  const std::string text = summary.text(5);
  std::printf("%s", text.c_str());
  CHECK(text.find("the 2 kernels with the most time (gpu__time_duration.sum), of 2") != std::string::npos);
  const size_t b = text.find("75 %  6 ms  x2  kernelB  smsp__inst_executed.sum 50k  x.sum 4");
  const size_t a = text.find("25 %  2 ms  x1  kernelA  smsp__inst_executed.sum 100  x.sum 1");
  CHECK(b != std::string::npos && a != std::string::npos && b < a);
  CHECK(counter_summary({"y.sum"}).text(5).empty());
  const std::string fill =
      "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_";
  CHECK(readable_kernel_name(fill, 200).rfind("at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>", 0) == 0);
  CHECK(readable_kernel_name("sm90_xmma_gemm_f32f32", 60) == "sm90_xmma_gemm_f32f32");
  CHECK(readable_kernel_name("_Z7kernelAPf", 60) == "kernelA");
  CHECK(readable_kernel_name(std::string(100, 'k'), 20) == std::string(17, 'k') + "...");
}

void metric_lists_are_split_and_checked() {
  std::vector<std::string> names;
  std::string why;
  CHECK(parse_metric_list("sm__cycles_elapsed.avg,smsp__inst_executed.sum", &names, &why));
  CHECK(names == calls({"sm__cycles_elapsed.avg", "smsp__inst_executed.sum"}));
  CHECK(parse_metric_list("dram__bytes_read.sum.per_second", &names, &why) && names.size() == 1);
  CHECK(!parse_metric_list("a,,b", &names, &why) && why.find("empty metric name") != std::string::npos);
  CHECK(!parse_metric_list("", &names, &why));
  CHECK(!parse_metric_list("a,", &names, &why));
  CHECK(!parse_metric_list("sm__cycles elapsed", &names, &why) && why.find("' '") != std::string::npos);
  CHECK(!parse_metric_list("x;y", &names, &why));
}

}  // namespace

int main() {
  static tracker owner(fake::driver());
  g_tracker = &owner;
  fake::g_functions[step_kernel] = {nullptr, "step_kernel"};
  fake::set_up_injection(owner, &g_ops, ctx0, g_buffer, sizeof(g_buffer));

  RUN_TEST(a_source_that_needs_more_passes_than_asked_gets_them_the_program_s_launch_the_last);
  RUN_TEST(one_pass_needed_and_asked_counts_the_program_s_launch_alone);
  RUN_TEST(passes_beyond_the_counted_ones_run_without_counters);
  RUN_TEST(caches_are_flushed_before_every_counted_pass);
  RUN_TEST(a_launch_the_source_cannot_count_runs_once_with_the_reason);
  RUN_TEST(a_failed_pass_drops_the_counters_and_the_replay_goes_on);
  RUN_TEST(the_control_without_restores_ends_elsewhere);
  RUN_TEST(a_relaunch_that_fails_on_a_counted_pass_reports_no_values);
  RUN_TEST(a_program_launch_that_fails_in_its_counted_pass_reports_no_values);
  RUN_TEST(a_restore_that_fails_before_the_program_s_counted_launch_stops_the_counting);
  RUN_TEST(a_program_launch_that_fails_on_the_device_reports_no_values);
  RUN_TEST(the_range_profiler_source_brackets_every_pass_cupti_asks_for);
  RUN_TEST(cupti_s_kernel_replay_runs_the_passes_itself);
  RUN_TEST(a_range_s_passes_run_its_launches_together_after_the_program_s);
  RUN_TEST(a_copy_ends_the_range_before_it);
  RUN_TEST(the_range_profiler_counts_a_range_s_launches_in_one_pass);
  RUN_TEST(a_session_dropped_inside_a_pass_stops_its_range);
  RUN_TEST(a_context_destroyed_during_a_counted_program_launch_is_not_called_into);
  RUN_TEST(a_metric_cupti_does_not_know_is_left_out_and_the_others_counted);
  RUN_TEST(a_list_cupti_knows_none_of_runs_the_launches_once_with_the_reason);
  RUN_TEST(sets_and_lists_make_one_list_of_metrics);
  RUN_TEST(the_summary_names_the_kernels_with_the_most_time);
  RUN_TEST(metric_lists_are_split_and_checked);
  RUN_TEST(a_counted_pass_s_cost_is_split_between_kreplay_and_the_profiler);
  RUN_TEST(a_launch_s_phases_are_logged_at_info);
  RUN_TEST(a_launch_whose_arguments_cannot_be_copied_ends_the_range_and_runs_once);
  RUN_TEST(the_metric_list_gives_each_type_s_endings_and_every_metric);
  RUN_TEST(a_range_that_cannot_be_pushed_stops_the_counting_not_the_replay);
  RUN_TEST(range_mode_makes_a_launch_alone_in_its_range_a_user_range);
  RUN_TEST(range_mode_on_automatic_ranges_pushes_nothing);
  RUN_TEST(a_range_ends_before_the_program_lowers_a_limit_its_launches_need);
  RUN_TEST(ranges_of_any_length_are_configured_for_the_same_ranges_a_pass);
  RUN_TEST(a_session_dropped_undecoded_enables_the_profiler_afresh);
  RUN_TEST(a_range_pass_that_fails_names_the_launch);
  RUN_TEST(a_range_s_data_is_decoded_once_for_all_its_launches);
  return 0;
}
