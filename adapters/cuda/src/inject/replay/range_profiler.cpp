// CUPTI's Range Profiler as the replay's counter source (range_profiler.hpp).
#include "replay/range_profiler.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

#include "symbols.hpp"

namespace kreplay::cuda::inject {
namespace {

bool optional_symbols(void* library, range_profiler_api_t& out) {
  find_symbol(library, "cuptiRangeProfilerGetCounterDataInfo", out.get_counter_data_info);
  find_symbol(library, "cuptiRangeProfilerPushRange", out.push_range);
  find_symbol(library, "cuptiRangeProfilerPopRange", out.pop_range);
  find_symbol(library, "cuptiProfilerHostGetBaseMetrics", out.host_get_base_metrics);
  find_symbol(library, "cuptiProfilerHostGetSubMetrics", out.host_get_sub_metrics);
  find_symbol(library, "cuptiProfilerHostGetMetricProperties", out.host_get_metric_properties);
  return true;
}

// The profiler host's calls (cupti_profiler_host.h) and the two the set-up needs first.
bool host_symbols(void* library, range_profiler_api_t& out) {
  return find_symbol(library, "cuptiProfilerInitialize", out.profiler_initialize) &&
         find_symbol(library, "cuptiDeviceGetChipName", out.device_get_chip_name) &&
         find_symbol(library, "cuptiProfilerHostInitialize", out.host_initialize) &&
         find_symbol(library, "cuptiProfilerHostDeinitialize", out.host_deinitialize) &&
         find_symbol(library, "cuptiProfilerHostConfigAddMetrics", out.host_config_add_metrics) &&
         find_symbol(library, "cuptiProfilerHostGetConfigImageSize", out.host_get_config_image_size) &&
         find_symbol(library, "cuptiProfilerHostGetConfigImage", out.host_get_config_image) &&
         find_symbol(library, "cuptiProfilerHostGetNumOfPasses", out.host_get_num_of_passes) &&
         find_symbol(library, "cuptiProfilerHostEvaluateToGpuValues", out.host_evaluate_to_gpu_values);
}

bool from(void* library, range_profiler_api_t& out) {
  if (library == nullptr) {
    return false;
  }
  find_symbol(library, "cuptiGetResultString", out.get_result_string);
  return host_symbols(library, out) && find_symbol(library, "cuptiRangeProfilerEnable", out.enable) &&
         find_symbol(library, "cuptiRangeProfilerDisable", out.disable) &&
         find_symbol(library, "cuptiRangeProfilerGetCounterDataSize", out.get_counter_data_size) &&
         find_symbol(library, "cuptiRangeProfilerCounterDataImageInitialize", out.counter_data_image_initialize) &&
         find_symbol(library, "cuptiRangeProfilerSetConfig", out.set_config) &&
         find_symbol(library, "cuptiRangeProfilerStart", out.start) &&
         find_symbol(library, "cuptiRangeProfilerStop", out.stop) &&
         find_symbol(library, "cuptiRangeProfilerDecodeData", out.decode_data) &&
         optional_symbols(library, out);
}

// maxNumRangeTreeNodes arrived in a later CUPTI than the first Range Profiler: set where the header has it.
template <typename T, typename = void>
struct has_tree_nodes : std::false_type {};
template <typename T>
struct has_tree_nodes<T, std::void_t<decltype(T::maxNumRangeTreeNodes)>> : std::true_type {};
template <typename T>
void set_tree_nodes(T& params, uint32_t nodes) {
  if constexpr (has_tree_nodes<T>::value) {
    params.maxNumRangeTreeNodes = nodes;
  }
}

// Struct sizes of the oldest layout that holds the fields used: a CUPTI older than these headers (the H200's is
// 13.0, the PyPI headers newer) may refuse a size it does not know. Enable gained cacheControlMode in 13.4, host
// Initialize pSinglePassMetricSetName (PM sampling) later than the Range Profiler.
constexpr size_t kEnableSize = CUPTI_PROFILER_STRUCT_SIZE(CUpti_RangeProfiler_Enable_Params, pRangeProfilerObject);
constexpr size_t kHostInitializeSize = CUPTI_PROFILER_STRUCT_SIZE(CUpti_Profiler_Host_Initialize_Params, pHostObject);


// What CUPTI is handed by address: the configuration and counter-data images and the metric names. One set per
// context, alive while its set-up or any session holds it, and never copied: the profiler seems to keep the
// addresses from one SetConfig to the next (not documented; inferred: with copies made and freed per session,
// NVPW's BeginPass crashed after 14 to 49 launches on the H200, CUPTI 13.0, and with one set per context it ran
// 200 of 200). A context's sessions use it one at a time: each only inside its launch's window, which the
// context's other launches wait for.
struct profiler_images {
  std::vector<uint8_t> config;
  std::vector<uint8_t> counter_data;  // room for the source's ranges per pass
  // The metrics the context's device knows (the names CUPTI is given), and their columns among the source's
  // metrics; the others' columns stay empty. Fixed once the set-up is done.
  std::vector<const char*> names;
  std::vector<size_t> columns;
  uint32_t per_pass = 1;  // the ranges a pass may hold (the counter-data image's room)
  // The profiler enabled on the context. A session configured and dropped before its data was decoded (a pass
  // failed, a relaunch did not run) sets `abandoned`: on the H200 every later session on that object then found
  // its passes never all submitted, so the next session's configure, inside its window, disables the profiler on
  // the context and enables it afresh here.
  CUcontext context = nullptr;
  CUpti_RangeProfiler_Object* object = nullptr;
  std::atomic<bool> abandoned{false};
  // The context is being destroyed and the profiler was disabled on it (set before the Disable): a session still
  // holding the object makes no call into it from then on.
  std::atomic<bool> disabled{false};
};

CUpti_RangeProfiler_Object* enable_profiler(const range_profiler_api_t& api, CUcontext context, std::string* why) {
  CUpti_RangeProfiler_Enable_Params enable{};
  enable.structSize = kEnableSize;
  enable.ctx = context;
  return cupti_succeeded(api, api.enable(&enable), "cuptiRangeProfilerEnable", why) ? enable.pRangeProfilerObject
                                                                                    : nullptr;
}

void disable_profiler(const range_profiler_api_t& api, CUpti_RangeProfiler_Object* object) {
  if (object != nullptr) {
    CUpti_RangeProfiler_Disable_Params disable{};
    disable.structSize = CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE;
    disable.pRangeProfilerObject = object;
    (void)api.disable(&disable);
  }
}

// The counter-data image sized for the images' metrics and ranges a pass, as the object asks.
bool size_counter_data(const range_profiler_api_t& api, profiler_images& images, std::string* why) {
  CUpti_RangeProfiler_GetCounterDataSize_Params size{};
  size.structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE;
  size.pRangeProfilerObject = images.object;
  size.pMetricNames = const_cast<const char**>(images.names.data());
  size.numMetrics = images.names.size();
  size.maxNumOfRanges = images.per_pass;
  set_tree_nodes(size, images.per_pass);
  if (!cupti_succeeded(api, api.get_counter_data_size(&size), "cuptiRangeProfilerGetCounterDataSize", why)) {
    return false;
  }
  images.counter_data.resize(size.counterDataSize);
  return true;
}

// What one context needs for every session on it, made at its first launch.
struct context_setup {
  std::string failure;  // non-empty: this context cannot be counted, and why
  CUpti_Profiler_Host_Object* host = nullptr;
  std::shared_ptr<profiler_images> images = std::make_shared<profiler_images>();
  uint32_t passes = 0;
};

// What a session needs of its context's set-up, so that a context forgotten meanwhile leaves it whole.
struct session_inputs {
  CUpti_Profiler_Host_Object* host;
  std::shared_ptr<profiler_images> images;
  uint32_t passes;
  size_t metrics;  // the source's
  CUpti_ProfilerReplayMode replay;  // user replay (kreplay's passes), or CUPTI's own kernel replay
  bool user_ranges = false;         // each launch pushed and popped as a range (counter_ranges::user)
  uint32_t per_pass = 1;            // the ranges a pass may hold, the same for every session of the source
  uint32_t ranges = 1;              // the launches (ranges) of this session's passes, at most per_pass
};

class range_session final : public counter_session {
 public:
  range_session(const range_profiler_api_t& api, session_inputs inputs)
      : api_(api), in_(std::move(inputs)), image_(in_.images->counter_data) {}
  range_session(const range_session&) = delete;
  range_session& operator=(const range_session&) = delete;

  // A range begun and never ended would leave the profiler started: every later configuration would fail.
  ~range_session() override {
    if (started_) {
      std::string ignored;
      (void)stop(&ignored);
    }
    if (configured_ && !decode_called_) {  // (a session whose data was decoded leaves the object ready)
      in_.images->abandoned.store(true, std::memory_order_release);
    }
  }

  // After an abandoned session, a fresh profiler object first (inside this launch's window, so no other session
  // of the context is between its Start and Stop). Then the counter-data image initialized afresh, and the
  // configuration: each launch an automatic range, in user replay (kreplay runs the passes) or kernel replay
  // (CUPTI runs them all inside the one launch between Start and Stop, saving and restoring memory itself); or
  // (range mode) each a user range, pushed and popped around its relaunch, one or several a pass, always
  // configured for the source's ranges a pass (range_profiler.hpp says why).
  bool configure(std::string* why) override {
    profiler_images& images = *in_.images;
    if (images.abandoned.exchange(false, std::memory_order_acq_rel)) {
      disable_profiler(api_, images.object);
      images.object = enable_profiler(api_, images.context, why);
      if (images.object == nullptr || !size_counter_data(api_, images, why)) {
        *why += " (enabling the profiler afresh after an abandoned session)";
        return false;
      }
    }
    if (images.object == nullptr) {
      *why = "the profiler could not be enabled afresh on this context";
      return false;
    }
    configured_ = true;  // from here on CUPTI holds state that only a decode (or a fresh object) clears
    CUpti_RangeProfiler_CounterDataImage_Initialize_Params init{};
    init.structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE;
    init.pRangeProfilerObject = in_.images->object;
    init.counterDataSize = image_.size();
    init.pCounterData = image_.data();
    if (!ok(api_.counter_data_image_initialize(&init), "cuptiRangeProfilerCounterDataImageInitialize", why)) {
      return false;
    }
    CUpti_RangeProfiler_SetConfig_Params config{};
    config.structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE;
    config.pRangeProfilerObject = in_.images->object;
    config.configSize = in_.images->config.size();
    config.pConfig = in_.images->config.data();
    config.counterDataImageSize = image_.size();
    config.pCounterDataImage = image_.data();
    config.range = user_ranges() ? CUPTI_UserRange : CUPTI_AutoRange;
    config.replayMode = in_.replay;
    config.maxRangesPerPass = in_.per_pass;
    config.numNestingLevels = 1;
    config.minNestingLevel = 1;
    config.passIndex = 0;
    config.targetNestingLevel = 1;
    return ok(api_.set_config(&config), "cuptiRangeProfilerSetConfig", why);
  }

  bool begin_pass(std::string* why) override {
    if (disabled(why)) {
      return false;
    }
    CUpti_RangeProfiler_Start_Params start{};
    start.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE;
    start.pRangeProfilerObject = in_.images->object;
    started_ = ok(api_.start(&start), "cuptiRangeProfilerStart", why);
    return started_;
  }

  bool end_pass(std::string* why) override { return stop(why); }

  bool begin_range(std::string* why) override {
    if (!user_ranges()) {
      return true;
    }
    if (disabled(why)) {
      return false;
    }
    CUpti_RangeProfiler_PushRange_Params push{};
    push.structSize = CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE;
    push.pRangeProfilerObject = in_.images->object;
    const std::string name = "launch " + std::to_string(pushed_++ % in_.ranges);
    push.pRangeName = name.c_str();
    return ok(api_.push_range(&push), "cuptiRangeProfilerPushRange", why);
  }

  bool end_range(std::string* why) override {
    if (!user_ranges()) {
      return true;
    }
    if (disabled(why)) {
      return false;
    }
    CUpti_RangeProfiler_PopRange_Params pop{};
    pop.structSize = CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE;
    pop.pRangeProfilerObject = in_.images->object;
    return ok(api_.pop_range(&pop), "cuptiRangeProfilerPopRange", why);
  }

  bool collect(std::vector<double>* values, std::string* why) override { return collect_range(0, values, why); }

  // The data decoded once (after the last pass), then each range evaluated.
  bool collect_range(size_t index, std::vector<double>* values, std::string* why) override {
    if (!all_submitted_) {
      *why = "CUPTI needs more passes than it said (" + std::to_string(in_.passes) + ")";
      return false;
    }
    if (!decode(why)) {
      return false;
    }
    const profiler_images& images = *in_.images;
    std::vector<double> known(images.names.size(), 0.0);
    CUpti_Profiler_Host_EvaluateToGpuValues_Params evaluate{};
    evaluate.structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE;
    evaluate.pHostObject = in_.host;
    evaluate.pCounterDataImage = image_.data();
    evaluate.counterDataImageSize = image_.size();
    evaluate.rangeIndex = index;
    evaluate.ppMetricNames = const_cast<const char**>(images.names.data());
    evaluate.numMetrics = images.names.size();
    evaluate.pMetricValues = known.data();
    if (!ok(api_.host_evaluate_to_gpu_values(&evaluate), "cuptiProfilerHostEvaluateToGpuValues", why)) {
      return false;
    }
    values->assign(in_.metrics, std::numeric_limits<double>::quiet_NaN());  // NaN: a metric the device lacks
    for (size_t i = 0; i < known.size(); ++i) {
      (*values)[images.columns[i]] = known[i];
    }
    return true;
  }

 private:
  // The context's profiler was disabled (the context is being destroyed): the object is not to be called again.
  bool disabled(std::string* why) {
    if (!in_.images->disabled.load(std::memory_order_acquire)) {
      return false;
    }
    started_ = false;
    *why = "the profiler was disabled with the launch's context";
    return true;
  }

  bool stop(std::string* why) {
    if (disabled(why)) {
      return false;
    }
    CUpti_RangeProfiler_Stop_Params stop{};
    stop.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE;
    stop.pRangeProfilerObject = in_.images->object;
    started_ = false;
    if (!ok(api_.stop(&stop), "cuptiRangeProfilerStop", why)) {
      return false;
    }
    all_submitted_ = stop.isAllPassSubmitted != 0;
    return true;
  }

  // DecodeData once, at the first range's collection; its verdict (empty: the image holds the launches' ranges)
  // kept for every range after it, so a range mode's 32 collections do not decode 32 times.
  bool decode(std::string* why) {
    if (!decode_tried_ && !disabled(&decode_failure_)) {
      decode_tried_ = true;
      CUpti_RangeProfiler_DecodeData_Params decode{};
      decode.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE;
      decode.pRangeProfilerObject = in_.images->object;
      decode_called_ = ok(api_.decode_data(&decode), "cuptiRangeProfilerDecodeData", &decode_failure_);
      if (decode_called_ && all_ranges(&decode_failure_) && decode.numOfRangeDropped != 0) {
        decode_failure_ =
            std::to_string(decode.numOfRangeDropped) + " ranges dropped (more kernels in the pass than launches?)";
      }
    }
    if (!decode_failure_.empty()) {
      *why = decode_failure_;
      return false;
    }
    return true;
  }

  // Exactly one range per launch of the pass was recorded (where the library can say).
  bool all_ranges(std::string* why) const {
    if (api_.get_counter_data_info == nullptr) {
      return true;
    }
    CUpti_RangeProfiler_GetCounterDataInfo_Params info{};
    info.structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE;
    info.pCounterDataImage = image_.data();
    info.counterDataImageSize = image_.size();
    if (!ok(api_.get_counter_data_info(&info), "cuptiRangeProfilerGetCounterDataInfo", why)) {
      return false;
    }
    if (info.numTotalRanges != in_.ranges) {
      *why = std::to_string(info.numTotalRanges) + " ranges recorded for " + std::to_string(in_.ranges) +
             (in_.ranges == 1 ? " launch" : " launches");
      return false;
    }
    return true;
  }

  bool ok(CUptiResult result, const char* call, std::string* why) const {
    return cupti_succeeded(api_, result, call, why);
  }

  // The source's kind (a source makes user ranges only with a CUPTI that can push and pop them).
  bool user_ranges() const { return in_.user_ranges; }

  const range_profiler_api_t& api_;
  session_inputs in_;
  std::vector<uint8_t>& image_;  // in_.images's counter data
  bool configured_ = false;    // the image initialised or SetConfig tried
  bool decode_tried_ = false;
  bool decode_called_ = false;  // DecodeData succeeded: the object is ready for another configuration
  std::string decode_failure_;  // why the decoded data cannot be read (empty: it can)
  bool started_ = false;
  bool all_submitted_ = false;
  uint64_t pushed_ = 0;  // ranges pushed, for their names
};

class range_profiler_source final : public counter_source {
 public:
  range_profiler_source(const range_profiler_api_t& api, std::vector<std::string> metrics, device_of_t device_of,
                        counter_replay replay, counter_ranges ranges, uint32_t per_pass)
      : api_(api),
        metrics_(std::move(metrics)),
        device_of_(std::move(device_of)),
        replay_(replay == counter_replay::cupti_kernel ? CUPTI_KernelReplay : CUPTI_UserReplay),
        user_ranges_(ranges == counter_ranges::user && replay == counter_replay::kreplay && can_push(api)),
        pushless_(ranges == counter_ranges::user && replay == counter_replay::kreplay && !can_push(api)),
        per_pass_(replay == counter_replay::kreplay && !pushless_ ? std::max<uint32_t>(per_pass, 1) : 1) {
    for (const std::string& metric : metrics_) {
      names_.push_back(metric.c_str());
    }
  }
  range_profiler_source(const range_profiler_source&) = delete;
  range_profiler_source& operator=(const range_profiler_source&) = delete;

  ~range_profiler_source() override {
    for (auto& [context, setup] : contexts_) {
      release(setup);
    }
  }

  const std::vector<std::string>& metrics() const override { return metrics_; }

  // CONTEXT_DESTROY_STARTING: the context is still valid, so the profiler is disabled on it and its host object
  // released, outside the lock; a session still holding the object sees `disabled` and makes no call into it.
  void context_gone(CUcontext context) override {
    context_setup gone;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = contexts_.find(context);
      if (found == contexts_.end()) {
        return;
      }
      gone = std::move(found->second);
      contexts_.erase(found);
    }
    release(gone);
  }

  std::unique_ptr<counter_session> open(CUcontext context, uint32_t* passes, std::string* why) override {
    return open_session(context, 1, passes, why);
  }

  std::unique_ptr<counter_session> open_ranges(CUcontext context, uint32_t ranges, uint32_t* passes,
                                               std::string* why) override {
    if (ranges > 1 && pushless_) {
      *why = "this CUPTI has no cuptiRangeProfilerPushRange / PopRange: one launch a range";
      return nullptr;
    }
    if (ranges == 0 || ranges > per_pass_) {
      *why = "a pass of " + std::to_string(ranges) + " launches, where the source was made for " +
             std::to_string(per_pass_);
      return nullptr;
    }
    return open_session(context, ranges, passes, why);
  }

 private:
  static bool can_push(const range_profiler_api_t& api) { return api.push_range != nullptr && api.pop_range != nullptr; }

  // A session whose passes hold `ranges` launches, the context set up at its first.
  std::unique_ptr<counter_session> open_session(CUcontext context, uint32_t ranges, uint32_t* passes,
                                                std::string* why) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = contexts_.find(context);
    if (found == contexts_.end()) {
      found = contexts_.emplace(context, context_setup{}).first;
      set_up(context, found->second);
      if (!found->second.failure.empty() && !warned_) {
        warned_ = true;
        std::fprintf(stderr, "kreplay-cuda-replay: --metrics: %s; launches there run once\n",
                     found->second.failure.c_str());
      }
    }
    const context_setup& setup = found->second;
    if (!setup.failure.empty()) {
      *why = setup.failure;
      return nullptr;
    }
    *passes = setup.passes;
    session_inputs inputs{setup.host, setup.images, setup.passes, names_.size(), replay_};
    inputs.user_ranges = user_ranges_;
    inputs.per_pass = per_pass_;
    inputs.ranges = ranges;
    return std::make_unique<range_session>(api_, std::move(inputs));
  }

  // The host side (config image, pass count) and the target side (the profiler on the context, the counter-data
  // size); the first failure is kept in setup.failure.
  void set_up(CUcontext context, context_setup& setup) {
    if (!initialized_) {
      CUpti_Profiler_Initialize_Params init{};
      init.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE;
      if (!ok(api_.profiler_initialize(&init), "cuptiProfilerInitialize", &setup.failure)) {
        return;
      }
      initialized_ = true;
    }
    const int device = device_of_ ? device_of_(context) : -1;
    if (device < 0) {
      setup.failure = "the launch's device is unknown";
      return;
    }
    CUpti_Device_GetChipName_Params chip{};
    chip.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE;
    chip.deviceIndex = static_cast<size_t>(device);
    if (!ok(api_.device_get_chip_name(&chip), "cuptiDeviceGetChipName", &setup.failure) ||
        !host_side(chip.pChipName, setup)) {
      return;
    }
    profiler_images& images = *setup.images;
    images.context = context;
    images.per_pass = per_pass_;
    images.object = enable_profiler(api_, context, &setup.failure);
    if (images.object != nullptr) {
      (void)size_counter_data(api_, images, &setup.failure);
    }
  }

  // The host object with the metrics the chip knows, their config image and its pass count.
  bool host_side(const char* chip_name, context_setup& setup) {
    setup.images->names = names_;
    for (size_t i = 0; i < names_.size(); ++i) {
      setup.images->columns.push_back(i);
    }
    if (!host_with(chip_name, names_, &setup.host, &setup.failure) && !keep_known(chip_name, setup)) {
      return false;
    }
    CUpti_Profiler_Host_GetConfigImageSize_Params size{};
    size.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE;
    size.pHostObject = setup.host;
    if (!ok(api_.host_get_config_image_size(&size), "cuptiProfilerHostGetConfigImageSize", &setup.failure)) {
      return false;
    }
    std::vector<uint8_t>& config = setup.images->config;
    config.resize(size.configImageSize);
    CUpti_Profiler_Host_GetConfigImage_Params image{};
    image.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE;
    image.pHostObject = setup.host;
    image.configImageSize = config.size();
    image.pConfigImage = config.data();
    if (!ok(api_.host_get_config_image(&image), "cuptiProfilerHostGetConfigImage", &setup.failure)) {
      return false;
    }
    CUpti_Profiler_Host_GetNumOfPasses_Params passes{};
    passes.structSize = CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE;
    passes.configImageSize = config.size();
    passes.pConfigImage = config.data();
    if (!ok(api_.host_get_num_of_passes(&passes), "cuptiProfilerHostGetNumOfPasses", &setup.failure)) {
      return false;
    }
    setup.passes = static_cast<uint32_t>(passes.numOfPasses);
    return true;
  }

  // CUPTI refused the whole list: each metric is tried on its own, the ones the chip does not know are left out
  // (said once on stderr; their columns stay empty) and the host object is made with the rest. False when the
  // chip knows none, or the second try fails.
  bool keep_known(const char* chip_name, context_setup& setup) {
    const std::string chip = chip_name != nullptr ? chip_name : "?";
    std::vector<const char*> known;
    std::vector<size_t> columns;
    std::string unknown;
    for (size_t i = 0; i < names_.size(); ++i) {
      CUpti_Profiler_Host_Object* probe = nullptr;
      std::string ignored;
      if (host_with(chip_name, {names_[i]}, &probe, &ignored)) {
        close_host_object(api_, probe);
        known.push_back(names_[i]);
        columns.push_back(i);
      } else {
        unknown += (unknown.empty() ? "" : ", ") + std::string(names_[i]);
      }
    }
    if (known.empty()) {
      setup.failure += " (" + chip + " knows none of the metrics)";
      return false;
    }
    if (!unknown_said_) {
      unknown_said_ = true;
      std::fprintf(stderr, "kreplay-cuda-replay: --metrics: %s does not know %s: left out, their columns stay empty\n",
                   chip.c_str(), unknown.c_str());
    }
    setup.images->names = std::move(known);
    setup.images->columns = std::move(columns);
    setup.failure.clear();
    return host_with(chip_name, setup.images->names, &setup.host, &setup.failure);
  }

  // A host object for `chip_name` with `names` added, in *host; false, with why and no object left, when CUPTI
  // refuses either.
  bool host_with(const char* chip_name, const std::vector<const char*>& names, CUpti_Profiler_Host_Object** host,
                 std::string* why) {
    CUpti_Profiler_Host_Object* const made = open_host_object(api_, chip_name, why);
    if (made == nullptr) {
      return false;
    }
    CUpti_Profiler_Host_ConfigAddMetrics_Params add{};
    add.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE;
    add.pHostObject = made;
    add.ppMetricNames = const_cast<const char**>(names.data());
    add.numMetrics = names.size();
    if (!ok(api_.host_config_add_metrics(&add), "cuptiProfilerHostConfigAddMetrics", why)) {
      close_host_object(api_, made);
      return false;
    }
    *host = made;
    return true;
  }

  void release(context_setup& setup) {
    setup.images->disabled.store(true, std::memory_order_release);
    disable_profiler(api_, setup.images->object);
    close_host_object(api_, setup.host);
  }

  bool ok(CUptiResult result, const char* call, std::string* why) const {
    return cupti_succeeded(api_, result, call, why);
  }

  range_profiler_api_t api_;
  std::vector<std::string> metrics_;
  std::vector<const char*> names_;  // metrics_'s, for CUPTI
  device_of_t device_of_;
  std::mutex mutex_;
  CUpti_ProfilerReplayMode replay_;
  bool user_ranges_;  // counter_ranges::user, with a CUPTI that can push and pop
  bool pushless_;     // counter_ranges::user asked of a CUPTI that cannot push: automatic ranges, one a pass
  uint32_t per_pass_; // the ranges every configuration allows a pass (1 in CUPTI's kernel replay)
  std::map<CUcontext, context_setup> contexts_;
  bool initialized_ = false;
  bool warned_ = false;
  bool unknown_said_ = false;
};

}  // namespace

bool cupti_succeeded(const range_profiler_api_t& api, CUptiResult result, const char* call, std::string* why) {
  if (result == CUPTI_SUCCESS) {
    return true;
  }
  const char* text = nullptr;
  if (api.get_result_string == nullptr || api.get_result_string(result, &text) != CUPTI_SUCCESS) {
    text = nullptr;
  }
  *why = std::string(call) + " failed: " + (text != nullptr ? text : std::to_string(static_cast<int>(result)));
  return false;
}

CUpti_Profiler_Host_Object* open_host_object(const range_profiler_api_t& api, const char* chip, std::string* why) {
  CUpti_Profiler_Host_Initialize_Params init{};
  init.structSize = kHostInitializeSize;
  init.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  init.pChipName = chip;
  return cupti_succeeded(api, api.host_initialize(&init), "cuptiProfilerHostInitialize", why) ? init.pHostObject
                                                                                             : nullptr;
}

void close_host_object(const range_profiler_api_t& api, CUpti_Profiler_Host_Object* host) {
  if (host != nullptr) {
    CUpti_Profiler_Host_Deinitialize_Params deinit{};
    deinit.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE;
    deinit.pHostObject = host;
    (void)api.host_deinitialize(&deinit);
  }
}

bool resolve_range_profiler(range_profiler_api_t& out, std::string* why, bool load) {
  if (from(dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD), out)) {
    return true;
  }
  const char* path = std::getenv("KREPLAY_CUPTI_PATH");
  const bool given = path != nullptr && *path != '\0';
  if (given) {
    void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (from(library, out)) {
      return true;
    }
    const char* error = library == nullptr ? dlerror() : nullptr;
    *why = std::string("KREPLAY_CUPTI_PATH=") + path +
           (library == nullptr ? std::string(" does not load (") + (error != nullptr ? error : "dlopen failed") + ")"
                               : std::string(" has no Range Profiler (CUPTI 12.6 or later is needed)"));
    return false;
  }
  if (load && from(dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL), out)) {
    return true;
  }
  *why = load ? "no libcupti.so.13 with a Range Profiler on the loader's path (set KREPLAY_CUPTI_PATH)"
              : "the libcupti in the process has no Range Profiler (CUPTI 12.6 or later is needed)";
  return false;
}

std::unique_ptr<counter_source> make_range_profiler_source(const range_profiler_api_t& api,
                                                           std::vector<std::string> metrics, device_of_t device_of,
                                                           counter_replay replay, counter_ranges ranges,
                                                           uint32_t per_pass) {
  return std::make_unique<range_profiler_source>(api, std::move(metrics), std::move(device_of), replay, ranges,
                                                 per_pass);
}

}  // namespace kreplay::cuda::inject
