#include "cupti_layer.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "guard.hpp"
#include "log.hpp"
#include "symbols.hpp"

namespace kreplay::cuda::inject {
namespace {

// The functions only some consumers use: their absence is reported by what needs them.
bool optional(void* library, cupti_api_t& out) {
  find_symbol(library, "cuptiGetCallbackName", out.get_callback_name);
  find_symbol(library, "cuptiEnableDomain", out.enable_domain);
  return true;
}

bool from(void* library, cupti_api_t& out) {
  return library != nullptr && find_symbol(library, "cuptiSubscribe", out.subscribe) &&
         find_symbol(library, "cuptiUnsubscribe", out.unsubscribe) &&
         find_symbol(library, "cuptiEnableCallback", out.enable_callback) &&
         find_symbol(library, "cuptiGetResultString", out.get_result_string) && optional(library, out);
}

}  // namespace

bool resolve_cupti(cupti_api_t& out, std::string* where) {
  if (from(dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD), out)) {
    *where = "the libcupti.so.13 already loaded in the process";
    return true;
  }
  if (const char* path = std::getenv("KREPLAY_CUPTI_PATH"); path != nullptr && *path != '\0') {
    if (from(dlopen(path, RTLD_NOW | RTLD_LOCAL), out)) {
      *where = std::string("KREPLAY_CUPTI_PATH=") + path;
      return true;
    }
    *where = std::string("KREPLAY_CUPTI_PATH=") + path + " does not load as CUPTI (" +
             (dlerror() != nullptr ? "dlopen failed" : "functions missing") + ")";
    return false;
  }
  if (from(dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL), out)) {
    *where = "libcupti.so.13 found by the loader's search";
    return true;
  }
  *where = "no libcupti.so.13 in the process or on the loader's path (set KREPLAY_CUPTI_PATH)";
  return false;
}

cupti_layer::cupti_layer(const cupti_api_t& api) : api_(api) {}

bool cupti_layer::start() {
  if (api_.subscribe == nullptr || api_.enable_callback == nullptr) {
    std::fprintf(stderr, "kreplay-inject: CUPTI is incomplete; the injection stays inert (nothing is tracked)\n");
    return false;
  }
  board_.seal();
  if (!subscribe()) {
    return false;
  }
  if (!enable_required()) {
    stay_inert();
    return false;
  }
  for (switchboard::consumer_id consumer = 0; consumer < board_.consumers(); ++consumer) {
    if (!board_.spec(consumer).required) {
      enable_optional(consumer);
    }
  }
  active_.store(true, std::memory_order_release);
  log(KREPLAY_LOG_INFO, "subscribed to CUPTI: %zu callbacks enabled", enabled_);
  return true;
}

bool cupti_layer::subscribe() {
  const CUptiResult result = api_.subscribe(&subscriber_, &cupti_layer::callback, this);
  if (result == CUPTI_SUCCESS) {
    return true;
  }
  const char* text = nullptr;
  if (api_.get_result_string == nullptr || api_.get_result_string(result, &text) != CUPTI_SUCCESS) {
    text = nullptr;
  }
  if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    std::fprintf(stderr,
                 "kreplay-inject: CUPTI already has a subscriber (another tool: Nsight Compute, Nsight Systems, "
                 "a profiler) and allows only one (cuptiSubscribe: %s, %d); kreplay's injection stays inert: "
                 "no allocation or module variable is tracked and snapshots are declined\n",
                 text != nullptr ? text : "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED", static_cast<int>(result));
  } else {
    std::fprintf(stderr,
                 "kreplay-inject: cuptiSubscribe failed (%s, %d); kreplay's injection stays inert: no allocation "
                 "or module variable is tracked and snapshots are declined\n",
                 text != nullptr ? text : "?", static_cast<int>(result));
  }
  subscriber_ = nullptr;
  return false;
}

bool cupti_layer::enable(const callback_key& key, bool say_why) {
  const CUptiResult answer = api_.enable_callback(1, subscriber_, key.first, key.second);
  if (answer != CUPTI_SUCCESS && say_why) {
    log(KREPLAY_LOG_WARNING, "cuptiEnableCallback(domain %d, id %u) answered %d", static_cast<int>(key.first),
        static_cast<unsigned>(key.second), static_cast<int>(answer));
  }
  return answer == CUPTI_SUCCESS;
}

// Every callback of every required consumer, each tried even after a refusal (each refusal gets its line).
bool cupti_layer::enable_required() {
  size_t wanted = 0;
  for (switchboard::consumer_id consumer = 0; consumer < board_.consumers(); ++consumer) {
    if (!board_.spec(consumer).required) {
      continue;
    }
    for (const callback_key& key : board_.wanted(consumer)) {
      ++wanted;
      if (enable(key, true)) {
        enabled_ids_.push_back(key);
        ++enabled_;
      }
    }
  }
  if (enabled_ == wanted) {
    return true;
  }
  // A callback left off would be an allocation or a module missed: better nothing than a wrong inventory.
  std::fprintf(stderr, "kreplay-inject: CUPTI refused %zu of %zu callbacks; the injection stays inert\n",
               wanted - enabled_, wanted);
  return false;
}

// All of the consumer's callbacks or none: those it enabled are turned off again if CUPTI refuses one (an older
// CUPTI the program brought), and the consumer says what that means. A callback another consumer already
// enabled stays on.
void cupti_layer::enable_optional(switchboard::consumer_id consumer) {
  const consumer_spec& spec = board_.spec(consumer);
  std::vector<callback_key> wanted = board_.wanted(consumer);
  std::vector<callback_key> enabled;
  for (const callback_key& key : wanted) {
    const bool already = std::find(enabled_ids_.begin(), enabled_ids_.end(), key) != enabled_ids_.end();
    if (spec.viable && (already || enable(key, false))) {
      enabled.push_back(key);
    }
  }
  if (enabled.size() != wanted.size() || !spec.viable) {
    for (const callback_key& key : enabled) {
      if (std::find(enabled_ids_.begin(), enabled_ids_.end(), key) == enabled_ids_.end()) {
        (void)api_.enable_callback(0, subscriber_, key.first, key.second);
      }
    }
    board_.switch_off(consumer);
    if (spec.refused) {
      spec.refused(spec.viable ? wanted.size() - enabled.size() : 0, wanted.size());
    }
    return;
  }
  enabled_ids_.insert(enabled_ids_.end(), enabled.begin(), enabled.end());
  for (CUpti_CallbackDomain domain : spec.whole_domains) {
    if (api_.enable_domain != nullptr) {
      (void)api_.enable_domain(1, subscriber_, domain);
    }
  }
}

void cupti_layer::stay_inert() {
  if (api_.unsubscribe != nullptr) {
    (void)api_.unsubscribe(subscriber_);
  }
  subscriber_ = nullptr;
  enabled_ = 0;
  enabled_ids_.clear();
}

bool cupti_layer::set_subscribed(bool subscribed) {
  std::lock_guard<std::mutex> lock(pause_mutex_);
  if (!active() || subscribed == !paused_) {
    return active();
  }
  if (!subscribed) {
    // Whatever the program allocates or loads from now on is missed: every later snapshot declines.
    board_.lost();
    if (api_.unsubscribe == nullptr || api_.unsubscribe(subscriber_) != CUPTI_SUCCESS) {
      return false;
    }
    paused_ = true;
    return true;
  }
  if (api_.subscribe(&subscriber_, &cupti_layer::callback, this) != CUPTI_SUCCESS) {
    return false;
  }
  for (const auto& [domain, id] : enabled_ids_) {
    (void)api_.enable_callback(1, subscriber_, domain, id);
  }
  paused_ = false;
  return true;
}

void CUPTIAPI cupti_layer::callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                    const void* data) {
  // kreplay's own driver calls (its copies, device storage, module queries) are never the program's.
  if (inside_own_call() || userdata == nullptr || data == nullptr) {
    return;
  }
  auto* layer = static_cast<cupti_layer*>(userdata);
  layer->raised_.fetch_add(1, std::memory_order_relaxed);
  // No exception may unwind through CUPTI's C frames into the program: that would end the process. The tables
  // allocate, so an out-of-memory is possible here; the event is then lost and every snapshot declines.
  try {
    layer->board_.dispatch(domain, cbid, data);
  } catch (...) {
    layer->board_.lost();
  }
}

}  // namespace kreplay::cuda::inject
