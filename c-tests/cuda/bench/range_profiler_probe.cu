// What CUPTI's Range Profiler costs, call by call, and which ways of calling it work on this machine, for the
// counter source (adapters/cuda/src/inject/replay/range_profiler.cpp). User replay on a 64 MiB in-place kernel
// with the metrics of argv[1] (default: run_graphs_counters.sh's 15). Prints one line per finding:
//   kernel   three launches as kreplay's kernel mode makes them (counter-data image initialized, SetConfig with
//            automatic ranges, Start/kernel/Stop per pass, DecodeData, evaluation), each call's time in ms
//   reuse    the next launch without SetConfig: the image initialized again and Start called (works or not)
//   switch   on the same profiler object, SetConfig with user ranges (4 a pass) after automatic ones: PushRange's
//            answer
//   fresh    the profiler disabled and enabled again, user ranges first: each pass's Push/Pop answers, the
//            ranges decoded, the instruction counts of the four; then automatic ranges and user ones again
//   per pass on fresh objects: one user range a pass, then four; four a pass holding one launch, then four
// Exits 0 unless CUDA itself fails: a refusal by CUPTI is a finding.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#include "cuda_check.hpp"
#include "driver_api.hpp"

namespace {

using probe_clock = std::chrono::steady_clock;

__global__ void scale(float* data, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = data[i] * 1.0001f + 1.0f;
  }
}

const char* text(CUptiResult result) {
  const char* out = nullptr;
  return cuptiGetResultString(result, &out) == CUPTI_SUCCESS && out != nullptr ? out : "?";
}

double ms_since(probe_clock::time_point begun) {
  return std::chrono::duration<double, std::milli>(probe_clock::now() - begun).count();
}

// Runs `call`, adds " name ms" (and the error, if any) to *line; true on success.
template <typename F>
bool timed(std::string* line, const char* name, F&& call) {
  const auto begun = probe_clock::now();
  const CUptiResult result = call();
  char part[160];
  std::snprintf(part, sizeof(part), " %s %.3f%s%s", name, ms_since(begun), result == CUPTI_SUCCESS ? "" : " FAILED ",
                result == CUPTI_SUCCESS ? "" : text(result));
  *line += part;
  return result == CUPTI_SUCCESS;
}

struct probe {
  CUpti_Profiler_Host_Object* host = nullptr;
  CUpti_RangeProfiler_Object* object = nullptr;
  std::vector<const char*> metrics;
  std::vector<uint8_t> config;
  float* buffer = nullptr;
  size_t n = (64u << 20) / sizeof(float);
  CUcontext context = nullptr;

  std::vector<uint8_t> image(size_t ranges) {
    CUpti_RangeProfiler_GetCounterDataSize_Params size{};
    size.structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE;
    size.pRangeProfilerObject = object;
    size.pMetricNames = metrics.data();
    size.numMetrics = metrics.size();
    size.maxNumOfRanges = ranges;
    size.maxNumRangeTreeNodes = ranges;
    const CUptiResult result = cuptiRangeProfilerGetCounterDataSize(&size);
    if (result != CUPTI_SUCCESS) {
      std::printf("GetCounterDataSize(%zu) failed: %s\n", ranges, text(result));
      return {};
    }
    return std::vector<uint8_t>(size.counterDataSize);
  }

  CUptiResult initialize(std::vector<uint8_t>& data) {
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{};
    init.structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE;
    init.pRangeProfilerObject = object;
    init.counterDataSize = data.size();
    init.pCounterData = data.data();
    return cuptiRangeProfilerCounterDataImageInitialize(&init);
  }

  CUptiResult set_config(std::vector<uint8_t>& data, CUpti_ProfilerRange range, size_t ranges) {
    CUpti_RangeProfiler_SetConfig_Params set{};
    set.structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE;
    set.pRangeProfilerObject = object;
    set.configSize = config.size();
    set.pConfig = config.data();
    set.counterDataImageSize = data.size();
    set.pCounterDataImage = data.data();
    set.range = range;
    set.replayMode = CUPTI_UserReplay;
    set.maxRangesPerPass = ranges;
    set.numNestingLevels = 1;
    set.minNestingLevel = 1;
    set.passIndex = 0;
    set.targetNestingLevel = 1;
    return cuptiRangeProfilerSetConfig(&set);
  }

  // Start, the kernel `launches` times (each in a pushed range when `push`), synchronise, Stop; true when every
  // pass is submitted.
  bool pass(std::string* line, int launches, bool push, bool* all) {
    CUpti_RangeProfiler_Start_Params start{};
    start.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE;
    start.pRangeProfilerObject = object;
    if (!timed(line, "start", [&] { return cuptiRangeProfilerStart(&start); })) {
      return false;
    }
    for (int i = 0; i < launches; ++i) {
      const std::string name = "launch " + std::to_string(i);
      CUpti_RangeProfiler_PushRange_Params pushed{};
      pushed.structSize = CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE;
      pushed.pRangeProfilerObject = object;
      pushed.pRangeName = name.c_str();
      if (push && !timed(line, "push", [&] { return cuptiRangeProfilerPushRange(&pushed); })) {
        break;
      }
      scale<<<264, 256>>>(buffer, n);
      CUpti_RangeProfiler_PopRange_Params popped{};
      popped.structSize = CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE;
      popped.pRangeProfilerObject = object;
      if (push && !timed(line, "pop", [&] { return cuptiRangeProfilerPopRange(&popped); })) {
        break;
      }
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    CUpti_RangeProfiler_Stop_Params stop{};
    stop.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE;
    stop.pRangeProfilerObject = object;
    const bool stopped = timed(line, "stop", [&] { return cuptiRangeProfilerStop(&stop); });
    *all = stop.isAllPassSubmitted != 0;
    return stopped;
  }

  // Passes until all are submitted (at most 64), DecodeData, and each range's first metric.
  void passes_and_values(std::string* line, std::vector<uint8_t>& data, int launches, bool push) {
    bool all = false;
    for (int i = 0; i < 64 && !all; ++i) {
      *line += " |";
      if (!pass(line, launches, push, &all)) {
        return;
      }
    }
    if (!all) {
      *line += " | not all passes submitted after 64";
      return;
    }
    CUpti_RangeProfiler_DecodeData_Params decode{};
    decode.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE;
    decode.pRangeProfilerObject = object;
    *line += " |";
    if (!timed(line, "decode", [&] { return cuptiRangeProfilerDecodeData(&decode); })) {
      return;
    }
    CUpti_RangeProfiler_GetCounterDataInfo_Params info{};
    info.structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE;
    info.pCounterDataImage = data.data();
    info.counterDataImageSize = data.size();
    if (cuptiRangeProfilerGetCounterDataInfo(&info) == CUPTI_SUCCESS) {
      *line += " ranges " + std::to_string(info.numTotalRanges);
    }
    for (size_t range = 0; range < info.numTotalRanges; ++range) {
      std::vector<double> values(metrics.size());
      CUpti_Profiler_Host_EvaluateToGpuValues_Params evaluate{};
      evaluate.structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE;
      evaluate.pHostObject = host;
      evaluate.pCounterDataImage = data.data();
      evaluate.counterDataImageSize = data.size();
      evaluate.rangeIndex = range;
      evaluate.ppMetricNames = metrics.data();
      evaluate.numMetrics = metrics.size();
      evaluate.pMetricValues = values.data();
      if (timed(line, "evaluate", [&] { return cuptiProfilerHostEvaluateToGpuValues(&evaluate); })) {
        *line += " (" + std::string(metrics[0]) + " " + std::to_string(values[0]) + ")";
      }
    }
  }

  bool enable() {
    CUpti_RangeProfiler_Enable_Params on{};
    on.structSize = CUPTI_PROFILER_STRUCT_SIZE(CUpti_RangeProfiler_Enable_Params, pRangeProfilerObject);
    on.ctx = context;
    const CUptiResult result = cuptiRangeProfilerEnable(&on);
    object = on.pRangeProfilerObject;
    if (result != CUPTI_SUCCESS) {
      std::printf("enable failed: %s\n", text(result));
    }
    return result == CUPTI_SUCCESS;
  }

  // A fresh profiler object on the context: the old one disabled, a new one enabled.
  bool enable_afresh() {
    disable();
    return enable();
  }

  void disable() {
    CUpti_RangeProfiler_Disable_Params off{};
    off.structSize = CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE;
    off.pRangeProfilerObject = object;
    (void)cuptiRangeProfilerDisable(&off);
  }
};

bool host_side(probe& p, const std::string& list) {
  static std::vector<std::string> names;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = list.find(',', at);
    names.push_back(list.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    at = comma == std::string::npos ? list.size() + 1 : comma + 1;
  }
  for (const std::string& name : names) {
    p.metrics.push_back(name.c_str());
  }
  CUpti_Profiler_Initialize_Params init{};
  init.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE;
  CUpti_Device_GetChipName_Params chip{};
  chip.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE;
  CUpti_Profiler_Host_Initialize_Params host{};
  host.structSize = CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_Initialize_Params, pHostObject);
  host.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  if (cuptiProfilerInitialize(&init) != CUPTI_SUCCESS || cuptiDeviceGetChipName(&chip) != CUPTI_SUCCESS) {
    return false;
  }
  host.pChipName = chip.pChipName;
  if (cuptiProfilerHostInitialize(&host) != CUPTI_SUCCESS) {
    return false;
  }
  p.host = host.pHostObject;
  CUpti_Profiler_Host_ConfigAddMetrics_Params add{};
  add.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE;
  add.pHostObject = p.host;
  add.ppMetricNames = p.metrics.data();
  add.numMetrics = p.metrics.size();
  CUpti_Profiler_Host_GetConfigImageSize_Params size{};
  size.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE;
  size.pHostObject = p.host;
  if (cuptiProfilerHostConfigAddMetrics(&add) != CUPTI_SUCCESS ||
      cuptiProfilerHostGetConfigImageSize(&size) != CUPTI_SUCCESS) {
    return false;
  }
  p.config.resize(size.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params image{};
  image.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE;
  image.pHostObject = p.host;
  image.configImageSize = p.config.size();
  image.pConfigImage = p.config.data();
  CUpti_Profiler_Host_GetNumOfPasses_Params passes{};
  passes.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE;
  passes.configImageSize = p.config.size();
  passes.pConfigImage = p.config.data();
  if (cuptiProfilerHostGetConfigImage(&image) != CUPTI_SUCCESS ||
      cuptiProfilerHostGetNumOfPasses(&passes) != CUPTI_SUCCESS) {
    return false;
  }
  std::printf("chip %s, %zu metrics, %zu passes\n", chip.pChipName, p.metrics.size(), passes.numOfPasses);
  return true;
}

// One session: the image initialized, SetConfig (unless `configure` is false) for `per_pass` ranges a pass (user
// ranges, each launch pushed, or automatic ones), passes of `launches` launches, the values; its line printed.
void session(probe& p, const std::string& label, std::vector<uint8_t>& data, CUpti_ProfilerRange kind, int per_pass,
             int launches, bool configure = true) {
  std::string line = label;
  if (timed(&line, "init", [&] { return p.initialize(data); }) &&
      (!configure || timed(&line, "setconfig", [&] { return p.set_config(data, kind, per_pass); }))) {
    p.passes_and_values(&line, data, launches, kind == CUPTI_UserRange);
  }
  std::printf("%s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string list =
      argc > 1 ? argv[1]
               : "smsp__inst_executed.sum,sm__warps_launched.sum,smsp__sass_inst_executed_op_global_ld.sum,"
                 "l1tex__t_bytes.sum,smsp__sass_inst_executed_op_global_st.sum,"
                 "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__inst_executed_pipe_tensor.sum,"
                 "dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,"
                 "sm__cycles_elapsed.avg,gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,"
                 "dram__throughput.avg.pct_of_peak_sustained_elapsed";
  probe p;
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  CUDA_CHECK(cudaMalloc(&p.buffer, p.n * sizeof(float)));
  CUDA_CHECK(cudaMemset(p.buffer, 0, p.n * sizeof(float)));
  p.context = driver_api::current_context();
  if (!host_side(p, list) || !p.enable()) {
    std::printf("set-up failed\n");
    return 0;
  }
  std::vector<uint8_t> one = p.image(1);
  for (int launch = 0; launch < 3; ++launch) {
    session(p, "kernel launch " + std::to_string(launch) + ":", one, CUPTI_AutoRange, 1, 1);
  }
  session(p, "reuse (no SetConfig):", one, CUPTI_AutoRange, 1, 1, false);
  std::vector<uint8_t> four = p.image(4);
  session(p, "switch (user ranges after automatic, same object):", four, CUPTI_UserRange, 4, 4);
  if (!p.enable_afresh()) {
    return 0;
  }
  four = p.image(4);
  session(p, "fresh (user ranges first), session 0:", four, CUPTI_UserRange, 4, 4);
  session(p, "fresh (user ranges first), session 1:", four, CUPTI_UserRange, 4, 4);
  session(p, "fresh, then automatic ranges, one launch:", one, CUPTI_AutoRange, 1, 1);
  session(p, "then user ranges again:", four, CUPTI_UserRange, 4, 4);
  // Ranges a pass: configured for one user range first, then for four (what range mode did before 73a2aea); and
  // configured for four with a pass holding one (what it does now).
  if (!p.enable_afresh()) {
    return 0;
  }
  one = p.image(1);
  four = p.image(4);
  session(p, "fresh, one user range a pass:", one, CUPTI_UserRange, 1, 1);
  session(p, "then four user ranges a pass:", four, CUPTI_UserRange, 4, 4);
  if (!p.enable_afresh()) {
    return 0;
  }
  four = p.image(4);
  session(p, "fresh, four user ranges a pass, one launch in it:", four, CUPTI_UserRange, 4, 1);
  session(p, "then four launches:", four, CUPTI_UserRange, 4, 4);
  p.disable();
  return 0;
}
