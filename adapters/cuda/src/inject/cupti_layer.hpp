// The CUPTI translation layer: subscribes to CUPTI's Callback API with only the callback ids the tracker needs,
// and turns each callback into a tracker event. CUPTI is found at run time (resolve_cupti) and reached only
// through cupti_api_t, so tests can drive the layer with a fake CUPTI and fabricated callback data.
#ifndef KREPLAY_CUDA_INJECT_CUPTI_LAYER_HPP
#define KREPLAY_CUDA_INJECT_CUPTI_LAYER_HPP

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <cupti.h>

#include "tracker.hpp"

namespace kreplay::cuda::inject {
class replayer;
}

namespace kreplay::cuda::inject {

struct cupti_api_t {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = nullptr;
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId) = nullptr;
  CUptiResult (*get_result_string)(CUptiResult, const char**) = nullptr;
  // Optional: only a replay needs it (to find every memcpy and memset callback id by its name).
  CUptiResult (*get_callback_name)(CUpti_CallbackDomain, uint32_t, const char**) = nullptr;
  // Optional: only the CUPTI backend of a replay needs it (below).
  CUptiResult (*enable_domain)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain) = nullptr;
};

// The libcupti already in the process (PyTorch loads its own), else KREPLAY_CUPTI_PATH, else libcupti.so.13 by
// the loader's search. `where` says which; false (with the reason in `where`) when none has the functions.
bool resolve_cupti(cupti_api_t& out, std::string* where);

class cupti_layer {
 public:
  cupti_layer(tracker& tracker, const cupti_api_t& api);
  cupti_layer(const cupti_layer&) = delete;
  cupti_layer& operator=(const cupti_layer&) = delete;

  // Before start(): a replay (kreplay-cuda-replay) is asked for. start() then also enables the launch, stream
  // capture, memcpy and memset callbacks and hands them to `replay`; without it none of them is enabled.
  void attach(replayer* replay) { replay_ = replay; }

  // Subscribes and enables the callbacks. On failure prints one line to stderr saying why and what it means,
  // and stays inert (nothing enabled, nothing tracked); never throws.
  bool start();
  bool active() const { return active_.load(std::memory_order_acquire); }
  size_t enabled_callbacks() const { return enabled_; }
  // Callbacks of the program's calls received so far (kreplay's own are not counted).
  uint64_t callbacks_raised() const { return raised_.load(std::memory_order_relaxed); }

  // For measuring what tracking costs, in one process: false unsubscribes (the program's calls then raise no
  // callback at all, as with KREPLAY_INJECT_TRACKING=0), true subscribes again with the same callbacks. What the
  // program allocates or loads in between is missed, so from the first pause on every snapshot is declined.
  // False when the layer is not active or CUPTI refuses.
  bool set_subscribed(bool subscribed);

  // CUPTI's entry point (userdata is the layer). Public so that tests can call it with fabricated data.
  static void CUPTIAPI callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* data);

 private:
  void on_driver(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  void on_resource(CUpti_CallbackId cbid, const CUpti_ResourceData& data);

  void on_replay(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  void enable_replay();

  tracker& tracker_;
  cupti_api_t api_;
  replayer* replay_ = nullptr;
  std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> enabled_ids_;
  std::atomic<uint64_t> raised_{0};
  std::mutex pause_mutex_;
  bool paused_ = false;
  std::vector<bool> copy_ids_;  // driver ids of the memcpy / memset calls (a replay only)
  CUpti_SubscriberHandle subscriber_ = nullptr;
  std::atomic<bool> active_{false};
  size_t enabled_ = 0;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_CUPTI_LAYER_HPP
