// The counter source of --metrics: CUPTI's Range Profiler (CUDA 12.6 and later) in user replay with automatic
// ranges, one range per launch, or user ranges in range mode (or, for --backend cupti-kernel-replay, in CUPTI's own
// kernel replay). Per context, once: the host side turns the metric names into a config image and
// says how many passes they need; the target side enables the profiler on the context and sizes a counter-data
// image. Per launch (a session, configured inside the launch's window): a fresh counter-data image and SetConfig;
// Start and Stop around each counted pass (the loop restores the memory between them); then DecodeData and the
// values of range 0 (range mode: of each range). A session destroyed between Start and Stop stops the range
// (unless its context went: the profiler was disabled with it, and the session makes no call into the object); one
// dropped before its data was decoded makes the next session on its context enable the profiler afresh.
//
// The functions come from the libcupti the injection subscribed with (range_profiler_api_t, so tests drive the
// source with fakes). A failure at set-up is remembered per context: every launch there runs once with the same
// reason, and the first says it on stderr.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_RANGE_PROFILER_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_RANGE_PROFILER_HPP

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cuda.h>
#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#include "replay/counters.hpp"

namespace kreplay::cuda::inject {

struct range_profiler_api_t {
  CUptiResult (*profiler_initialize)(CUpti_Profiler_Initialize_Params*) = nullptr;  // cuptiProfilerInitialize
  CUptiResult (*device_get_chip_name)(CUpti_Device_GetChipName_Params*) = nullptr;  // cuptiDeviceGetChipName
  CUptiResult (*host_initialize)(CUpti_Profiler_Host_Initialize_Params*) = nullptr;
  CUptiResult (*host_deinitialize)(CUpti_Profiler_Host_Deinitialize_Params*) = nullptr;
  CUptiResult (*host_config_add_metrics)(CUpti_Profiler_Host_ConfigAddMetrics_Params*) = nullptr;
  CUptiResult (*host_get_config_image_size)(CUpti_Profiler_Host_GetConfigImageSize_Params*) = nullptr;
  CUptiResult (*host_get_config_image)(CUpti_Profiler_Host_GetConfigImage_Params*) = nullptr;
  CUptiResult (*host_get_num_of_passes)(CUpti_Profiler_Host_GetNumOfPasses_Params*) = nullptr;
  CUptiResult (*host_evaluate_to_gpu_values)(CUpti_Profiler_Host_EvaluateToGpuValues_Params*) = nullptr;
  CUptiResult (*enable)(CUpti_RangeProfiler_Enable_Params*) = nullptr;
  CUptiResult (*disable)(CUpti_RangeProfiler_Disable_Params*) = nullptr;
  CUptiResult (*get_counter_data_size)(CUpti_RangeProfiler_GetCounterDataSize_Params*) = nullptr;
  CUptiResult (*counter_data_image_initialize)(CUpti_RangeProfiler_CounterDataImage_Initialize_Params*) = nullptr;
  CUptiResult (*set_config)(CUpti_RangeProfiler_SetConfig_Params*) = nullptr;
  CUptiResult (*start)(CUpti_RangeProfiler_Start_Params*) = nullptr;
  CUptiResult (*stop)(CUpti_RangeProfiler_Stop_Params*) = nullptr;
  CUptiResult (*decode_data)(CUpti_RangeProfiler_DecodeData_Params*) = nullptr;
  CUptiResult (*get_result_string)(CUptiResult, const char**) = nullptr;  // optional: for the messages
  // Optional: checks that a decoded image holds the launch's one range.
  CUptiResult (*get_counter_data_info)(CUpti_RangeProfiler_GetCounterDataInfo_Params*) = nullptr;
  // Optional: range mode's user ranges (without them a range holds one launch).
  CUptiResult (*push_range)(CUpti_RangeProfiler_PushRange_Params*) = nullptr;
  CUptiResult (*pop_range)(CUpti_RangeProfiler_PopRange_Params*) = nullptr;
  // Optional: --list-metrics (metric_list.hpp).
  CUptiResult (*host_get_base_metrics)(CUpti_Profiler_Host_GetBaseMetrics_Params*) = nullptr;
  CUptiResult (*host_get_sub_metrics)(CUpti_Profiler_Host_GetSubMetrics_Params*) = nullptr;
  CUptiResult (*host_get_metric_properties)(CUpti_Profiler_Host_GetMetricProperties_Params*) = nullptr;
};

// The functions from the libcupti.so.13 already in the process (the one the injection subscribed with), else
// KREPLAY_CUPTI_PATH, else (with `load`: a process that has none yet, --list-metrics) the one on the loader's
// path. False, with why, when the library has no Range Profiler (CUPTI before 12.6) or none is found.
bool resolve_range_profiler(range_profiler_api_t& out, std::string* why, bool load = false);

// True for CUPTI_SUCCESS; otherwise *why names the call and CUPTI's text for the result.
bool cupti_succeeded(const range_profiler_api_t& api, CUptiResult result, const char* call, std::string* why);
// The profiler host object for `chip` (the layout CUPTI 13.0 knows), null with why when CUPTI refuses; and its
// release (null: nothing).
CUpti_Profiler_Host_Object* open_host_object(const range_profiler_api_t& api, const char* chip, std::string* why);
void close_host_object(const range_profiler_api_t& api, CUpti_Profiler_Host_Object* host);

// The device ordinal of a context (the tracker's), for the chip name; -1 when unknown.
using device_of_t = std::function<int(CUcontext)>;

// Who runs the passes: kreplay (user replay, the replay loop's passes) or CUPTI itself (kernel replay: one Start,
// the program's launch, which CUPTI replays internally as often as the metrics need, one Stop; for
// --backend cupti-kernel-replay, the side-by-side measurement).
enum class counter_replay : uint8_t { kreplay, cupti_kernel };

// How a launch is made a range: automatically (CUPTI takes each launch between Start and Stop as one: kernel mode,
// and range mode's default), or as a user range pushed and popped around it (range mode with --profiler-ranges
// user). The profiler object of a context keeps the kind it was first configured with (on the H200, CUPTI
// 13.0: PushRange refused after automatic ranges, CounterDataImageInitialize after user ones:
// docs/results/2026-12-03-h200-c.md), so a source makes one kind only. User ranges asked of a CUPTI without
// PushRange/PopRange become automatic ranges, one launch a pass. The object seems to keep the ranges a pass may
// hold too (configured for 1 first, later passes of 4 and of 32 user ranges recorded 2), so every configuration
// of a source in user replay allows `per_pass` (range mode's --range-size), and its counter-data image has room
// for them, however many launches a range holds.
enum class counter_ranges : uint8_t { automatic, user };

std::unique_ptr<counter_source> make_range_profiler_source(const range_profiler_api_t& api,
                                                           std::vector<std::string> metrics, device_of_t device_of,
                                                           counter_replay replay = counter_replay::kreplay,
                                                           counter_ranges ranges = counter_ranges::automatic,
                                                           uint32_t per_pass = 1);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_RANGE_PROFILER_HPP
