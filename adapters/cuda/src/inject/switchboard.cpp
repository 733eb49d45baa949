#include "switchboard.hpp"

#include <algorithm>

#include "log.hpp"

namespace kreplay::cuda::inject {

switchboard::consumer_id switchboard::add_consumer(consumer_spec spec) {
  auto consumer = std::make_unique<consumer_t>();
  consumer->spec = std::move(spec);
  consumers_.push_back(std::move(consumer));
  return consumers_.size() - 1;
}

bool switchboard::route(consumer_id consumer, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                        callback_handler handler, bool enables) {
  if (sealed_ || consumer >= consumers_.size() || domain <= CUPTI_CB_DOMAIN_INVALID ||
      domain >= CUPTI_CB_DOMAIN_SIZE) {
    log(KREPLAY_LOG_WARNING, "switchboard: route (domain %d, id %u) refused", static_cast<int>(domain),
        static_cast<unsigned>(cbid));
    return false;
  }
  std::vector<std::vector<route_t>>& table = routes_[domain];
  if (table.size() <= cbid) {
    table.resize(cbid + 1);
  }
  table[cbid].push_back({consumers_[consumer].get(), std::move(handler)});
  std::vector<callback_key>& wanted = consumers_[consumer]->wanted;
  const callback_key key{domain, cbid};
  if (enables && std::find(wanted.begin(), wanted.end(), key) == wanted.end()) {
    wanted.push_back(key);
  }
  return true;
}

std::vector<callback_key> switchboard::wanted(consumer_id consumer) const { return consumers_[consumer]->wanted; }

// One handler's exception stops that handler only: the others of the callback still run (the replay must still
// hear of a context's destruction when the tracker's handler ran out of memory), and the event counts as lost.
bool switchboard::call(const route_t& route, CUpti_CallbackId cbid, const void* data) const {
  if (!route.consumer->on.load(std::memory_order_acquire)) {
    return true;
  }
  try {
    route.handler(cbid, data);
    return true;
  } catch (...) {
    return false;
  }
}

void switchboard::dispatch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) const {
  if (domain <= CUPTI_CB_DOMAIN_INVALID || domain >= CUPTI_CB_DOMAIN_SIZE || cbid >= routes_[domain].size()) {
    return;
  }
  const std::vector<route_t>& routes = routes_[domain][cbid];
  const bool api = domain == CUPTI_CB_DOMAIN_DRIVER_API || domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  bool handled = true;
  if (api && static_cast<const CUpti_CallbackData*>(data)->callbackSite == CUPTI_API_EXIT) {
    for (auto route = routes.rbegin(); route != routes.rend(); ++route) {
      handled = call(*route, cbid, data) && handled;
    }
  } else {
    for (const route_t& route : routes) {
      handled = call(route, cbid, data) && handled;
    }
  }
  if (!handled) {
    lost();
  }
}

void switchboard::lost() const {
  for (const auto& consumer : consumers_) {
    if (consumer->spec.lost) {
      consumer->spec.lost();
    }
  }
}

}  // namespace kreplay::cuda::inject
