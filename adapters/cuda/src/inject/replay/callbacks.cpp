// The replay as a consumer of the CUPTI layer's switchboard.
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "cupti_layer.hpp"
#include "replay/replay.hpp"

namespace kreplay::cuda::inject {
namespace {

// Every memcpy and memset of the driver API, found by name (there are dozens, and new ones with each CUDA).
std::vector<CUpti_CallbackId> copy_ids(const cupti_api_t& api) {
  std::vector<CUpti_CallbackId> ids;
  for (uint32_t id = 1; api.get_callback_name != nullptr && id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id) {
    const char* name = nullptr;
    if (api.get_callback_name(CUPTI_CB_DOMAIN_DRIVER_API, id, &name) == CUPTI_SUCCESS && name != nullptr &&
        (std::strncmp(name, "cuMemcpy", 8) == 0 || std::strncmp(name, "cuMemset", 8) == 0)) {
      ids.push_back(id);
    }
  }
  return ids;
}

const CUpti_CallbackData& api_data(const void* data) { return *static_cast<const CUpti_CallbackData*>(data); }

}  // namespace

switchboard::consumer_id register_replay_callbacks(switchboard& board, replayer& replay, const cupti_api_t& api) {
  consumer_spec spec;
  spec.name = "replay";
  spec.required = false;
  spec.viable = api.get_callback_name != nullptr;
  spec.whole_domains = replay.whole_domains();
  spec.refused = [named = spec.viable](size_t refused, size_t wanted) {
    std::fprintf(stderr,
                 "kreplay-cuda-replay: CUPTI refused %zu of the replay's %zu callbacks%s; nothing is replayed "
                 "(allocations and modules are still tracked)\n",
                 refused, wanted, named ? "" : " and has no cuptiGetCallbackName");
  };
  const switchboard::consumer_id me = board.add_consumer(std::move(spec));
  for (CUpti_CallbackId cbid : replay_launch_ids) {
    board.route(me, CUPTI_CB_DOMAIN_DRIVER_API, cbid,
                [&replay](CUpti_CallbackId id, const void* data) { replay.on_launch(id, api_data(data)); });
  }
  for (CUpti_CallbackId cbid : replay_capture_ids) {
    board.route(me, CUPTI_CB_DOMAIN_DRIVER_API, cbid,
                [&replay](CUpti_CallbackId id, const void* data) { replay.on_capture(id, api_data(data)); });
  }
  // Listens only: the tracker enables it.
  board.route(
      me, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
      [&replay](CUpti_CallbackId, const void* data) {
        replay.on_context_destroyed(static_cast<const CUpti_ResourceData*>(data)->context);
      },
      false);
  // The graph calls only when graph launches are replayed: otherwise they cost nothing.
  if (replay.replays_graphs()) {
    for (CUpti_CallbackId cbid : replay_graph_ids) {
      board.route(me, CUPTI_CB_DOMAIN_DRIVER_API, cbid,
                  [&replay](CUpti_CallbackId id, const void* data) { replay.on_graph_built(id, api_data(data)); });
    }
  }
  if (replay.replays_ranges()) {
    for (CUpti_CallbackId cbid : replay_range_end_ids) {
      board.route(me, CUPTI_CB_DOMAIN_DRIVER_API, cbid,
                  [&replay](CUpti_CallbackId, const void* data) { replay.on_range_end_call(api_data(data)); });
    }
    for (CUpti_CallbackId cbid : replay_attribute_ids) {
      board.route(me, CUPTI_CB_DOMAIN_DRIVER_API, cbid, [&replay](CUpti_CallbackId id, const void* data) {
        replay.on_function_attribute(id, api_data(data));
      });
    }
  }
  for (CUpti_CallbackId cbid : copy_ids(api)) {
    board.route(me, CUPTI_CB_DOMAIN_DRIVER_API, cbid,
                [&replay](CUpti_CallbackId, const void* data) { replay.on_copy(api_data(data)); });
  }
  return me;
}

}  // namespace kreplay::cuda::inject
