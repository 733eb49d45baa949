// The CUPTI layer: subscribes to CUPTI's Callback API, enables exactly the callbacks its switchboard names, and
// hands each callback to the switchboard. Who consumes a callback (the tracker, the replay) is the
// switchboard's business: they register their handlers before start(). CUPTI is found at run time
// (resolve_cupti) and reached only through cupti_api_t, so tests can drive the layer with a fake CUPTI and
// fabricated callback data.
#ifndef KREPLAY_CUDA_INJECT_CUPTI_LAYER_HPP
#define KREPLAY_CUDA_INJECT_CUPTI_LAYER_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <cupti.h>

#include "switchboard.hpp"

namespace kreplay::cuda::inject {

struct cupti_api_t {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = nullptr;
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId) = nullptr;
  CUptiResult (*get_result_string)(CUptiResult, const char**) = nullptr;
  // Optional: a consumer that finds callback ids by name needs it (the replay: every memcpy and memset).
  CUptiResult (*get_callback_name)(CUpti_CallbackDomain, uint32_t, const char**) = nullptr;
  // Optional: a consumer that enables whole domains needs it (the replay's CUPTI backend).
  CUptiResult (*enable_domain)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain) = nullptr;
};

// The libcupti already in the process (PyTorch loads its own), else KREPLAY_CUPTI_PATH, else libcupti.so.13 by
// the loader's search. `where` says which; false (with the reason in `where`) when none has the functions.
bool resolve_cupti(cupti_api_t& out, std::string* where);

class cupti_layer {
 public:
  explicit cupti_layer(const cupti_api_t& api);
  cupti_layer(const cupti_layer&) = delete;
  cupti_layer& operator=(const cupti_layer&) = delete;

  // Before start(): consumers register their handlers here.
  switchboard& board() { return board_; }

  // Seals the switchboard, subscribes, and enables the required consumers' callbacks, then each optional
  // consumer's (all or none). On failure prints one line to stderr saying why and what it means, and stays
  // inert (nothing enabled, nothing tracked); never throws.
  bool start();
  bool active() const { return active_.load(std::memory_order_acquire); }
  // The required consumers' callbacks (the tracker's).
  size_t enabled_callbacks() const { return enabled_; }
  // Callbacks of the program's calls received so far (kreplay's own are not counted).
  uint64_t callbacks_raised() const { return raised_.load(std::memory_order_relaxed); }

  // For measuring what tracking costs, in one process: false unsubscribes (the program's calls then raise no
  // callback at all, as with KREPLAY_INJECT_TRACKING=0), true subscribes again with the same callbacks. What the
  // program allocates or loads in between is missed (every consumer's `lost` runs), so from the first pause on
  // every snapshot is declined. False when the layer is not active or CUPTI refuses.
  bool set_subscribed(bool subscribed);

  // CUPTI's entry point (userdata is the layer). Public so that tests can call it with fabricated data.
  static void CUPTIAPI callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* data);

 private:
  bool subscribe();
  bool enable(const callback_key& key, bool say_why);
  bool enable_required();
  void enable_optional(switchboard::consumer_id consumer);
  void stay_inert();

  switchboard board_;
  cupti_api_t api_;
  std::vector<callback_key> enabled_ids_;  // everything enabled, to enable again after a pause
  std::atomic<uint64_t> raised_{0};
  std::mutex pause_mutex_;
  bool paused_ = false;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  std::atomic<bool> active_{false};
  size_t enabled_ = 0;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_CUPTI_LAYER_HPP
