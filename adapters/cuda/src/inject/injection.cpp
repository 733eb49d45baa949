// The injection library's entry point and C API (kreplay_inject.h). One injection per process: the tracker,
// the CUPTI layer and kreplay's configuration are made in InitializeInjection and live until the process ends
// (they are never destroyed: callbacks may come from any thread until the driver unloads).
#include "kreplay/kreplay_inject.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "adapter.hpp"
#include "boundary.hpp"
#include "context_reset.hpp"
#include "cupti_layer.hpp"
#include "driver.hpp"
#include "guard.hpp"
#include "log.hpp"
#include "injection_ops.hpp"
#include "replay/metric_list.hpp"
#include "replay/range_profiler.hpp"
#include "replay/replay.hpp"
#include "replay_config.hpp"
#include "tracker.hpp"
#include "tracker_callbacks.hpp"

#define KREPLAY_INJECT_EXPORT extern "C" __attribute__((visibility("default")))

namespace kreplay::cuda::inject {


namespace {

struct injection_t {
  bool tracking = true;
  driver_api_t driver;
  tracker* owner = nullptr;
  cupti_layer* layer = nullptr;
  replayer* replay = nullptr;  // kreplay-cuda-replay asked for a replay (KREPLAY_REPLAY=1)
};
injection_t g_injection;
std::once_flag g_once;

bool live() { return g_injection.layer != nullptr && g_injection.layer->active(); }

void forward_log(void*, kreplay_log_level_t level, const char* message, size_t length) {
  log(level, "kreplay: %.*s", static_cast<int>(length), message);
}

kreplay_log_level_t level_from_environment() {
  const char* text = std::getenv("KREPLAY_INJECT_LOG");
  if (text == nullptr || *text == '\0' || std::strcmp(text, "warning") == 0) {
    return KREPLAY_LOG_WARNING;
  }
  if (std::strcmp(text, "info") == 0) {
    return KREPLAY_LOG_INFO;
  }
  if (std::strcmp(text, "trace") == 0) {
    return KREPLAY_LOG_TRACE;
  }
  log(KREPLAY_LOG_WARNING, "KREPLAY_INJECT_LOG=%s is not warning, info or trace: warning it is", text);
  return KREPLAY_LOG_WARNING;
}

// KREPLAY_INJECT_COPY_METHOD: how the copy batches of snapshots and restores move bytes (automatic, kernel,
// memcpy_batch, memcpy_async; kreplay/cuda.hpp), for measuring the methods on a real program. Unset: automatic.
void copy_method_from_environment() {
  const char* text = std::getenv("KREPLAY_INJECT_COPY_METHOD");
  if (text == nullptr || *text == '\0') {
    return;
  }
  adapter::copy_method method = adapter::copy_method::automatic;
  if (!adapter::copy_method_from_name(text, &method)) {
    log(KREPLAY_LOG_WARNING,
        "KREPLAY_INJECT_COPY_METHOD=%s is not automatic, kernel, memcpy_batch or memcpy_async: automatic it is", text);
    return;
  }
  adapter::set_copy_method(method);
  log(KREPLAY_LOG_INFO, "copy batches by the %s method (KREPLAY_INJECT_COPY_METHOD)",
      adapter::copy_method_name(method));
}

kreplay_status_t base_ops(kreplay_device_ops_t* ops_out) {
  copy_method_from_environment();
  return adapter::make_runtime_ops(ops_out);
}

void finish_replay() {
  if (g_injection.replay != nullptr) {
    g_injection.replay->finish();
  }
}

// KREPLAY_INJECT_TRACKING: false when it is 0 (the library then subscribes to nothing).
bool tracking_asked() {
  const char* tracking = std::getenv("KREPLAY_INJECT_TRACKING");
  if (tracking != nullptr && std::strcmp(tracking, "0") == 0) {
    g_injection.tracking = false;
    log(KREPLAY_LOG_INFO, "KREPLAY_INJECT_TRACKING=0: subscribing to nothing");
    return false;
  }
  if (tracking != nullptr && std::strcmp(tracking, "1") != 0) {
    log(KREPLAY_LOG_WARNING, "KREPLAY_INJECT_TRACKING=%s is not 0 or 1: tracking stays on", tracking);
  }
  return true;
}

// The driver and CUPTI already in the process. False, with one line, when either is missing.
bool resolve_apis(cupti_api_t* cupti) {
  if (!resolve_driver(g_injection.driver)) {
    log(KREPLAY_LOG_WARNING, "libcuda.so.1 is not in the process; the injection stays inert");
    return false;
  }
  std::string where;
  if (!resolve_cupti(*cupti, &where)) {
    log(KREPLAY_LOG_WARNING, "%s; the injection stays inert", where.c_str());
    return false;
  }
  log(KREPLAY_LOG_INFO, "CUPTI: %s", where.c_str());
  return true;
}

// The tracker, and kreplay configured with the ops made over it.
bool make_tracker(kreplay_device_ops_t* ops) {
  g_injection.owner = new (std::nothrow) tracker(g_injection.driver);
  if (g_injection.owner == nullptr) {
    return false;
  }
  if (const char* loading = std::getenv("CUDA_MODULE_LOADING");
      loading != nullptr && std::strcmp(loading, "EAGER") == 0) {
    g_injection.owner->set_eager_loading(true);
  }
  if (make_injection_ops(*g_injection.owner, base_ops, ops) != KREPLAY_STATUS_SUCCESS) {
    return false;
  }
  if (kreplay_configure(ops) != KREPLAY_STATUS_SUCCESS) {
    log(KREPLAY_LOG_WARNING, "kreplay_configure refused the injection's ops; the injection stays inert");
    return false;
  }
  return true;
}

// The launcher's options (KREPLAY_REPLAY*), and the policy they ask for. Malformed options: one line, no replay.
replay_config_t read_replay_config() {
  replay_config_t config;
  std::string config_error;
  if (!parse_replay_config([](const char* name) { return std::getenv(name); }, &config, &config_error)) {
    std::fprintf(stderr, "kreplay-cuda-replay: %s; nothing is replayed\n", config_error.c_str());
    config.enabled = false;
  }
  kreplay_policy_t policy = adapter::recommended_policy();
  if (config.enabled) {
    policy = replay_policy(config, policy);
  }
  (void)kreplay_set_policy(&policy);
  return config;
}

// --set and --metrics: CUPTI's Range Profiler as the replay's counter source. False, with one line on stderr, when
// the list or the library will not do: nothing is replayed then (a profile without its counters is not what was
// asked).
bool make_counters(std::vector<std::string> metrics, counter_replay replay, counter_ranges ranges,
                   uint32_t per_pass, std::unique_ptr<counter_source>* out) {
  std::string why;
  range_profiler_api_t api;
  if (!resolve_range_profiler(api, &why)) {
    std::fprintf(stderr, "kreplay-cuda-replay: --metrics: %s; nothing is replayed\n", why.c_str());
    return false;
  }
  *out = make_range_profiler_source(api, std::move(metrics), [](CUcontext context) {
    return g_injection.owner->device_of(context);
  }, replay, ranges, per_pass);
  return *out != nullptr;
}

// The replay the launcher asked for, registered with the layer before it starts (which then enables the launch
// callbacks). None, with one line on stderr, when the driver lacks what it needs or the replay cannot start:
// the program then runs with tracking only.
void connect_replay(const replay_config_t& config, const kreplay_device_ops_t& ops, const cupti_api_t& cupti) {
  if (!can_relaunch(g_injection.driver)) {
    std::fputs("kreplay-cuda-replay: the driver lacks the launch functions; nothing is replayed\n", stderr);
    return;
  }
  std::unique_ptr<counter_source> counters;
  std::vector<std::string> metrics;
  std::string why;
  if (!counted_metrics(config, &metrics, &why)) {
    std::fprintf(stderr, "kreplay-cuda-replay: --metrics: %s; nothing is replayed\n", why.c_str());
    return;
  }
  const counter_replay replay = config.backend == replay_backend::cupti_kernel_replay ? counter_replay::cupti_kernel
                                                                                    : counter_replay::kreplay;
  // Range mode makes every launch a range of the kind asked, even alone in its range: a context's profiler keeps
  // one kind, and the ranges a pass it was first configured for.
  const bool user = config.mode == replay_mode::range && config.ranges == profiler_ranges::user;
  const counter_ranges ranges = user ? counter_ranges::user : counter_ranges::automatic;
  const uint32_t per_pass = config.mode == replay_mode::range ? config.range_size : 1;
  if (!metrics.empty() && !make_counters(std::move(metrics), replay, ranges, per_pass, &counters)) {
    return;
  }
  g_injection.replay =
      new (std::nothrow) replayer(*g_injection.owner, config, ops, g_injection.driver, std::move(counters));
  if (g_injection.replay != nullptr &&
      !g_injection.replay->start(reinterpret_cast<const void*>(cupti.subscribe), &why)) {
    std::fprintf(stderr, "kreplay-cuda-replay: %s; nothing is replayed\n", why.c_str());
    delete g_injection.replay;
    g_injection.replay = nullptr;
  }
  if (g_injection.replay != nullptr) {
    register_replay_callbacks(g_injection.layer->board(), *g_injection.replay, cupti);
  }
}

// The layer and its consumers: the context reset before the tracker (it reads what the tracker forgets), the
// tracker before the replay, so that a module the replay loads at a launch's entry is bound to the launched
// function.
bool connect_layer(const replay_config_t& config, const kreplay_device_ops_t& ops, const cupti_api_t& cupti) {
  g_injection.layer = new (std::nothrow) cupti_layer(cupti);
  if (g_injection.layer == nullptr) {
    return false;
  }
  register_context_reset(g_injection.layer->board(), *g_injection.owner, [ops](int device) {
    if (const kreplay_device_ops_t* base = injection_base_ops(ops); base != nullptr) {
      adapter::forget_device(*base, device);
    }
  });
  register_tracker_callbacks(g_injection.layer->board(), *g_injection.owner);
  if (config.enabled) {
    connect_replay(config, ops, cupti);
  }
  return true;
}

void initialize() {
  set_log_level(level_from_environment());
  kreplay_set_logger(forward_log, nullptr, log_level());
  cupti_api_t cupti;
  kreplay_device_ops_t ops{};
  if (!tracking_asked() || !resolve_apis(&cupti) || !make_tracker(&ops)) {
    return;
  }
  const replay_config_t config = read_replay_config();
  kreplay_tracking_enable(true);
  if (!connect_layer(config, ops, cupti) || !g_injection.layer->start()) {
    kreplay_tracking_enable(false);
    if (config.enabled && g_injection.layer != nullptr) {
      std::fputs("kreplay-cuda-replay: CUPTI could not be subscribed (see above): nothing is replayed\n", stderr);
    }
    return;
  }
  if (g_injection.replay != nullptr) {
    std::atexit(finish_replay);
    // CUPTI takes one subscriber (before CUPTI 13.2): say at the start what that means for the program.
    std::fputs("kreplay-cuda-replay: kreplay holds CUPTI's only subscriber slot: PyTorch's profiler (Kineto), "
               "Nsight Systems and Nsight Compute record no CUDA activity in this process\n", stderr);
  }
}

}  // namespace
}  // namespace kreplay::cuda::inject

using namespace kreplay::cuda::inject;
using kreplay::cuda::agent_of_device;

// Every export's body runs inside the boundary (boundary.hpp): an exception never reaches the driver or the
// host's C code.
KREPLAY_INJECT_EXPORT int InitializeInjection(void) {
  // 1 whatever happens: the driver goes on, and the program runs without kreplay if initialisation failed.
  return guarded_with(__func__, 1, 1, [] {
    std::call_once(g_once, initialize);
    return 1;
  });
}

KREPLAY_INJECT_EXPORT kreplay_status_t kreplay_inject_state(kreplay_inject_state_t* state_out) {
  return guarded(__func__, [&] {
    if (state_out == nullptr) {
      return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    kreplay_inject_state_t state{};
    state.tracking = g_injection.tracking;
    state.subscribed = live();
    if (g_injection.layer != nullptr) {
      state.callbacks_enabled = g_injection.layer->enabled_callbacks();
      state.callbacks_raised = g_injection.layer->callbacks_raised();
    }
    if (g_injection.owner != nullptr) {
      const tracker_counts_t counts = g_injection.owner->counts();
      state.allocations = counts.allocations;
      state.frees = counts.frees;
      state.unknown_frees = counts.unknown_frees;
      state.record_errors = counts.record_errors;
      state.modules_loaded = counts.modules_loaded;
      state.modules_unloaded = counts.modules_unloaded;
      state.contexts_forgotten = counts.contexts_forgotten;
    }
    *state_out = state;
    return KREPLAY_STATUS_SUCCESS;
  });
}

KREPLAY_INJECT_EXPORT kreplay_status_t kreplay_inject_inventory_stats(int device,
                                                                     kreplay_inventory_stats_t* stats_out) {
  return guarded(__func__, [&] {
    if (!live()) {
      return KREPLAY_STATUS_NOT_CONFIGURED;
    }
    if (device < 0 || stats_out == nullptr) {
      return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    return kreplay_inventory_stats(agent_of_device(device), stats_out);
  });
}

KREPLAY_INJECT_EXPORT kreplay_status_t kreplay_inject_live_bytes(int device, size_t* bytes_out) {
  return guarded(__func__, [&] {
    if (!live()) {
      return KREPLAY_STATUS_NOT_CONFIGURED;
    }
    if (device < 0 || bytes_out == nullptr) {
      return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    *bytes_out = g_injection.owner->live_bytes(device);
    return KREPLAY_STATUS_SUCCESS;
  });
}

KREPLAY_INJECT_EXPORT kreplay_status_t kreplay_inject_untracked(int device, kreplay_inject_untracked_t* untracked_out) {
  return guarded(__func__, [&] {
    if (!live()) {
      return KREPLAY_STATUS_NOT_CONFIGURED;
    }
    if (device < 0 || untracked_out == nullptr) {
      return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    const untracked_t counts = g_injection.owner->untracked(device);
    *untracked_out = {counts.count[0], counts.bytes[0], counts.count[1], counts.bytes[1], counts.count[2],
                      counts.bytes[2]};
    return KREPLAY_STATUS_SUCCESS;
  });
}

KREPLAY_INJECT_EXPORT kreplay_status_t kreplay_inject_module_counts(int device, size_t* modules_out,
                                                                   size_t* variables_out) {
  return guarded(__func__, [&] {
    if (!live()) {
      return KREPLAY_STATUS_NOT_CONFIGURED;
    }
    if (device < -1 || modules_out == nullptr || variables_out == nullptr) {
      return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    g_injection.owner->module_counts(device, modules_out, variables_out);
    return KREPLAY_STATUS_SUCCESS;
  });
}

KREPLAY_INJECT_EXPORT kreplay_status_t kreplay_inject_list_variables(int device,
                                                                    kreplay_inject_variable_visitor_t visit,
                                                                    void* user_data, char* detail,
                                                                    size_t detail_length) {
  return guarded(__func__, [&] {
    if (!live()) {
      return KREPLAY_STATUS_NOT_CONFIGURED;
    }
    if (device < 0 || visit == nullptr) {
      return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    struct forward_t {
      kreplay_inject_variable_visitor_t visit;
      void* data;
    } forward{visit, user_data};
    auto each = [](void* data, const resolved_variable_t& variable) {
      const auto* to = static_cast<const forward_t*>(data);
      const kreplay_inject_variable_t out{variable.module_id, variable.name, variable.address, variable.size,
                                          variable.is_constant};
      return to->visit(to->data, &out);
    };
    std::string why;
    kreplay_status_t status = KREPLAY_STATUS_INTERNAL_ERROR;
    {
      own_call_scope own;
      status = g_injection.owner->list_variables(device, each, &forward, &why);
    }
    if (detail != nullptr && detail_length > 0) {
      std::snprintf(detail, detail_length, "%s", why.c_str());
    }
    return status;
  });
}

KREPLAY_INJECT_EXPORT kreplay_status_t kreplay_inject_snapshot(int device,
                                                               kreplay_inject_snapshot_result_t* result_out) {
  return guarded(__func__, [&] {
    if (!live()) {
      return KREPLAY_STATUS_NOT_CONFIGURED;
    }
    if (device < 0 || result_out == nullptr) {
      return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    kreplay_inject_snapshot_result_t result{};
    kreplay_snapshot_t* snapshot = nullptr;
    result.snap_status = kreplay_snap(agent_of_device(device), &snapshot, &result.reason);
    result.restore_status = KREPLAY_STATUS_SUCCESS;
    if (result.snap_status == KREPLAY_STATUS_SUCCESS) {
      kreplay_snapshot_info_t info{};
      if (kreplay_snapshot_info(snapshot, &info) == KREPLAY_STATUS_SUCCESS) {
        result.regions = info.regions;
        result.module_variables = info.module_variables;
        result.bytes = info.bytes;
      }
      result.restore_status = kreplay_restore(snapshot, &result.report);
      kreplay_snapshot_free(snapshot);
    } else if (result.reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE) {
      std::snprintf(result.detail, sizeof(result.detail), "%s", g_injection.owner->last_error().c_str());
    }
    *result_out = result;
    return result.snap_status;
  });
}

KREPLAY_INJECT_EXPORT kreplay_status_t kreplay_inject_untracked_stats(int device, kreplay_untracked_t* stats_out) {
  return guarded(__func__, [&] {
    if (!live()) {
      return KREPLAY_STATUS_NOT_CONFIGURED;
    }
    if (device < 0 || stats_out == nullptr) {
      return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    return kreplay_untracked_stats(agent_of_device(device), stats_out);
  });
}

KREPLAY_INJECT_EXPORT kreplay_status_t kreplay_inject_set_subscribed(bool subscribed) {
  return guarded(__func__, [&] {
    if (!live()) {
      return KREPLAY_STATUS_NOT_CONFIGURED;
    }
    return g_injection.layer->set_subscribed(subscribed) ? KREPLAY_STATUS_SUCCESS : KREPLAY_STATUS_DEVICE_ERROR;
  });
}

KREPLAY_INJECT_EXPORT kreplay_status_t kreplay_inject_list_metrics(int device, FILE* out, FILE* errors) {
  return guarded(__func__, [&] {
    if (device < 0 || out == nullptr || errors == nullptr) {
      return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    // CUPTI asks the driver for the chip: it must be initialised (this process's own, not a program's).
    using cu_init_t = CUresult (*)(unsigned);
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    auto cu_init = cuda != nullptr ? reinterpret_cast<cu_init_t>(dlsym(cuda, "cuInit")) : nullptr;
    if (cu_init == nullptr || cu_init(0) != CUDA_SUCCESS) {
      std::fprintf(errors, "kreplay-cuda-replay: --list-metrics: %s\n",
                   cuda == nullptr ? "no libcuda.so.1 (no NVIDIA driver)" : "cuInit failed (no usable GPU)");
      return KREPLAY_STATUS_DEVICE_ERROR;
    }
    range_profiler_api_t api;
    std::string text;
    std::string why;
    if (!resolve_range_profiler(api, &why, true) || !list_metrics(api, device, &text, &why)) {
      std::fprintf(errors, "kreplay-cuda-replay: --list-metrics: %s\n", why.c_str());
      return KREPLAY_STATUS_NOT_FOUND;
    }
    std::fputs(text.c_str(), out);
    return KREPLAY_STATUS_SUCCESS;
  });
}
