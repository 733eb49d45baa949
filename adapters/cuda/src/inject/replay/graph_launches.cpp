// Graph launches (--graph-profiling graph): following the calls that make, change and destroy executable graphs,
// and deciding whether a graph launch is replayed as one window.
#include <cstddef>

#include "callback_data.hpp"
#include "guard.hpp"
#include "replay/pending.hpp"

namespace kreplay::cuda::inject {
namespace {

// Every instantiate form's parameters begin with the executable's address and the graph.
struct instantiate_prefix {
  CUgraphExec* exec;
  CUgraph graph;
};
static_assert(offsetof(cuGraphInstantiateWithFlags_params, hGraph) == offsetof(instantiate_prefix, graph));
static_assert(offsetof(cuGraphInstantiateWithParams_params, hGraph) == offsetof(instantiate_prefix, graph));
static_assert(offsetof(cuGraphInstantiate_v2_params, hGraph) == offsetof(instantiate_prefix, graph));
static_assert(offsetof(cuGraphInstantiate_params, hGraph) == offsetof(instantiate_prefix, graph));
// And both update forms' with the executable and the graph it now follows.
static_assert(offsetof(cuGraphExecUpdate_params, hGraph) == offsetof(cuGraphExecUpdate_v2_params, hGraph));

unsigned long long instantiate_flags(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags:
      return params<cuGraphInstantiateWithFlags_params>(data).flags;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz: {
      const CUDA_GRAPH_INSTANTIATE_PARAMS* with = params<cuGraphInstantiateWithParams_params>(data).instantiateParams;
      return with != nullptr ? with->flags : 0;
    }
    default: return 0;
  }
}

bool is_instantiate(CUpti_CallbackId cbid) {
  return cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate || cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2 ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz;
}

}  // namespace

tracked_memory_t replayer::tracked_memory() const {
  return [this](CUdeviceptr address) {
    kreplay_pointer_info_t info{};
    return tracker_.pointer_info(reinterpret_cast<const void*>(static_cast<uintptr_t>(address)), &info) ==
               KREPLAY_STATUS_SUCCESS &&
           info.size != 0;
  };
}

graph_facts replayer::inspect(CUgraph graph, unsigned long long flags) const {
  own_call_scope own;  // the graph queries are kreplay's
  return inspect_graph(graph, flags, driver_, tracked_memory());
}

void replayer::on_graph_built(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (data.callbackSite != CUPTI_API_EXIT || !succeeded(data) || inside_own_call()) {
    return;
  }
  if (is_instantiate(cbid)) {
    const auto& made = params<instantiate_prefix>(data);
    if (made.exec != nullptr) {
      graphs_.instantiated(*made.exec, inspect(made.graph, instantiate_flags(cbid, data)));
    }
    return;
  }
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2: {
      // The executable now follows another graph of the same shape: its kernels (and memcpys) may differ.
      const auto& update = params<cuGraphExecUpdate_v2_params>(data);
      graphs_.instantiated(update.hGraphExec, inspect(update.hGraph, 0));
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemcpyNodeSetParams: {
      const auto& set = params<cuGraphExecMemcpyNodeSetParams_params>(data);
      if (set.copyParams != nullptr) {
        graphs_.changed(set.hGraphExec, memcpy_node_problem(*set.copyParams, tracked_memory()));
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecNodeSetParams: {
      const auto& set = params<cuGraphExecNodeSetParams_params>(data);
      if (set.nodeParams != nullptr && set.nodeParams->type == CU_GRAPH_NODE_TYPE_MEMCPY) {
        graphs_.changed(set.hGraphExec, "a memcpy node's parameters were set (cuGraphExecNodeSetParams)");
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecChildGraphNodeSetParams: {
      const auto& set = params<cuGraphExecChildGraphNodeSetParams_params>(data);
      graphs_.changed(set.hGraphExec, inspect(set.childGraph, 0).why_not);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy:
      graphs_.destroyed(params<cuGraphExecDestroy_params>(data).hGraphExec);
      return;
    default: return;
  }
}

// Empty when the graph launch is replayed as one window, else why it runs once. Selection counts it as one
// launch, by the names of its kernels.
std::string replayer::why_graph_runs_once(pending_t& p) {
  if (config_.graphs == graph_profiling::off) {
    return "graph launch: --graph-profiling off, run once";
  }
  if (config_.backend == replay_backend::cupti) {
    return "graph launch: CUPTI's Checkpoint API may not be used with graphs, run once";
  }
  std::optional<graph_facts> facts = graphs_.find(p.launch.graph);
  if (!facts) {
    return "graph launch: its executable was not seen instantiated, run once";
  }
  p.graph = std::move(*facts);
  p.row.kernel = graph_row_name(p.graph);
  {
    std::lock_guard<std::mutex> lock(selector_mutex_);
    const launch_selector::verdict verdict = selector_.classify_graph(p.graph.kernels);
    if (verdict != launch_selector::verdict::replay) {
      return launch_selector::text(verdict);
    }
  }
  if (!p.graph.why_not.empty()) {
    return "graph launch: " + p.graph.why_not + ", run once";
  }
  if (p.graph.kernels.empty()) {
    return "graph launch: no kernel node, run once";
  }
  if (driver_.graph_launch == nullptr) {
    return "graph launch: the driver has no cuGraphLaunch, run once";
  }
  return "";
}

std::string graph_row_name(const graph_facts& graph) {
  std::string name = "graph: " + std::to_string(graph.kernels.size()) + " kernels, " + std::to_string(graph.nodes) +
                     " nodes";
  constexpr size_t listed = 3;
  for (size_t i = 0; i < graph.kernels.size() && i < listed; ++i) {
    name += (i == 0 ? " (" : ", ") + graph.kernels[i].substr(0, 80);
  }
  if (!graph.kernels.empty()) {
    name += graph.kernels.size() > listed ? ", ...)" : ")";
  }
  return name;
}

}  // namespace kreplay::cuda::inject
