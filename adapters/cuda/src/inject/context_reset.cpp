// What goes with a destroyed context (context_reset.hpp).
#include "context_reset.hpp"

#include <memory>
#include <utility>

#include "callback_data.hpp"
#include "kreplay/cuda.hpp"
#include "log.hpp"

namespace kreplay::cuda::inject {

void on_context_destroyed(tracker& t, const forget_ops_t& forget_ops, CUcontext context, int device) {
  if (device < 0) {
    device = t.device_of(context);
  }
  if (device < 0) {
    log(KREPLAY_LOG_WARNING, "context %p destroyed on an unknown device: kreplay's state is kept",
        static_cast<void*>(context));
    return;
  }
  // A primary context never seen retained is taken for the one going: forgetting costs a remake, keeping a
  // dead stream costs the process.
  const CUcontext primary = t.primary_context(device);
  if (primary != nullptr && primary != context) {
    return;  // the runtime ops and kreplay's storage live in the primary context, which stays
  }
  if (forget_ops) {
    forget_ops(device);
  }
  kreplay_agent_reset(agent_of_device(device));
  log(KREPLAY_LOG_INFO, "device %d: its primary context %p is going; kreplay's state there is forgotten", device,
      static_cast<void*>(context));
}

namespace {

// Inside a cuCtxDestroy or cuDevicePrimaryCtxReset on this thread whose entry was handled: the
// CONTEXT_DESTROY_STARTING that CUPTI raises within the call is the same destruction, and the tracker has
// forgotten the context by then (its device would be asked of the dying context, and the primary context, no
// longer known, taken for one never seen).
thread_local bool t_entry_handled = false;

}  // namespace

switchboard::consumer_id register_context_reset(switchboard& board, tracker& t, forget_ops_t forget_ops) {
  consumer_spec spec;
  spec.name = "context reset";
  spec.required = false;
  const switchboard::consumer_id me = board.add_consumer(std::move(spec));
  auto shared = std::make_shared<forget_ops_t>(std::move(forget_ops));
  // The resource callback comes for every context destroyed, the primary one's reset included; the driver calls'
  // entries come first where CUPTI raises them, while the tracker still knows the context. Each destruction is
  // handled once: at the entry, else at the resource callback.
  board.route(
      me, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
      [&t, shared](CUpti_CallbackId, const void* data) {
        if (!t_entry_handled) {
          on_context_destroyed(t, *shared, static_cast<const CUpti_ResourceData*>(data)->context, -1);
        }
      },
      false);
  auto on_call = [&t, shared](CUpti_CallbackId cbid, const void* raw) {
    const auto& data = *static_cast<const CUpti_CallbackData*>(raw);
    t_entry_handled = data.callbackSite == CUPTI_API_ENTER;
    if (!t_entry_handled) {
      return;
    }
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2) {
      on_context_destroyed(t, *shared, params<cuCtxDestroy_v2_params>(data).ctx, -1);
    } else {
      const int device = params<cuDevicePrimaryCtxReset_v2_params>(data).dev;
      on_context_destroyed(t, *shared, t.primary_context(device), device);
    }
  };
  board.route(me, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2, on_call, false);
  board.route(me, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2, on_call, false);
  return me;
}

}  // namespace kreplay::cuda::inject
