// The table from a CUPTI callback (domain, callback id) to the handlers of the consumers that asked for it,
// filled once before the CUPTI layer starts and only read after (Kineto's CuptiCallbackApi is the model). The
// layer enables what the table names and calls dispatch() for every callback; it never knows who consumes one.
// A consumer (the tracker, the replay) registers itself: adding one needs no edit to the layer.
#ifndef KREPLAY_CUDA_INJECT_SWITCHBOARD_HPP
#define KREPLAY_CUDA_INJECT_SWITCHBOARD_HPP

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cupti.h>

namespace kreplay::cuda::inject {

// `data` is what CUPTI passes: a CUpti_CallbackData for the API domains, a CUpti_ResourceData for resources.
using callback_handler = std::function<void(CUpti_CallbackId cbid, const void* data)>;
using callback_key = std::pair<CUpti_CallbackDomain, CUpti_CallbackId>;

struct consumer_spec {
  std::string name;
  // Required: if CUPTI refuses any of its callbacks the layer stays inert (the tracker: a callback missed would
  // be an allocation or a module missed). Optional: all of its callbacks are enabled or none, and `refused`
  // says so; the other consumers go on.
  bool required = true;
  // False when the consumer cannot run in this process (something it needs is missing): nothing of it is
  // enabled, and `refused` runs with 0 refused.
  bool viable = true;
  // Domains enabled whole once its callbacks are (the callbacks they add without a route are ignored).
  std::vector<CUpti_CallbackDomain> whole_domains;
  std::function<void(size_t refused, size_t wanted)> refused;
  // Events were missed: a handler threw, or the layer unsubscribed for a while.
  std::function<void()> lost;
};

class switchboard {
 public:
  using consumer_id = size_t;

  consumer_id add_consumer(consumer_spec spec);
  // The consumer's handler for one callback. `enables` false: it listens to a callback that another consumer
  // enables, without asking CUPTI for it (a callback raised per kernel is enabled only by who needs it).
  // Handlers of one callback run in the order they were routed at its entry (and for resources), in the
  // reverse order at its exit, so that consumers nest like scopes. False once sealed.
  bool route(consumer_id consumer, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, callback_handler handler,
             bool enables = true);
  // From here on the table is only read (the layer seals it when it starts).
  void seal() { sealed_ = true; }

  void dispatch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) const;
  // Every consumer's `lost`.
  void lost() const;

  size_t consumers() const { return consumers_.size(); }
  const consumer_spec& spec(consumer_id consumer) const { return consumers_[consumer]->spec; }
  // The callbacks the consumer enables, each once, in the order routed.
  std::vector<callback_key> wanted(consumer_id consumer) const;
  // An optional consumer whose callbacks were refused: its handlers are no longer called.
  void switch_off(consumer_id consumer) { consumers_[consumer]->on.store(false, std::memory_order_release); }

 private:
  struct consumer_t {
    consumer_spec spec;
    std::vector<callback_key> wanted;
    std::atomic<bool> on{true};
  };
  struct route_t {
    const consumer_t* consumer;
    callback_handler handler;
  };
  // False when the handler threw.
  bool call(const route_t& route, CUpti_CallbackId cbid, const void* data) const;

  std::vector<std::unique_ptr<consumer_t>> consumers_;
  std::vector<std::vector<route_t>> routes_[CUPTI_CB_DOMAIN_SIZE];  // [domain][callback id]
  bool sealed_ = false;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_SWITCHBOARD_HPP
