// Graph launches (--graph-profiling graph): following the calls that make, change and destroy executable graphs,
// and deciding whether a graph launch is replayed as one window.
#include <cstddef>

#include "callback_data.hpp"
#include "guard.hpp"
#include "kreplay/cuda.hpp"
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

// What kreplay's pointer types are, for the reason of a graph that runs once.
std::string memory_kind_text(kreplay_pointer_type_t type) {
  switch (type) {
    case KREPLAY_POINTER_LOCKED: return "page-locked host memory";
    case KREPLAY_POINTER_MANAGED: return "managed memory";
    case KREPLAY_POINTER_GRAPHICS: return "graphics interop memory";
    case KREPLAY_POINTER_IPC: return "memory imported from another process";
    default: return "memory of kreplay's pointer type " + std::to_string(static_cast<int>(type));
  }
}

}  // namespace

tracked_memory_t replayer::tracked_memory(CUcontext context) const {
  const int device = tracker_.device_of(context);
  const kreplay_agent_t agent = agent_of_device(device < 0 ? 0 : device);
  // Region by region: a copy may span regions that lie end to end (a virtual-memory range mapped in pieces), and
  // every byte must be in one of this device's tracked regions.
  return [this, agent](CUdeviceptr start, size_t bytes) -> std::string {
    uintptr_t at = static_cast<uintptr_t>(start);
    const uintptr_t end = at + bytes;
    if (end < at) {
      return "the range wraps around the address space";
    }
    do {
      kreplay_pointer_info_t info{};
      const void* pointer = reinterpret_cast<const void*>(at);
      if (tracker_.pointer_info(pointer, &info) != KREPLAY_STATUS_SUCCESS || info.size == 0) {
        return "no allocation kreplay tracks at " + hex(at);
      }
      if (info.type != KREPLAY_POINTER_DEVICE) {
        return memory_kind_text(info.type) + " at " + hex(at);
      }
      if (info.owner.handle != agent.handle) {
        return "another device's memory at " + hex(at);
      }
      const auto base = reinterpret_cast<uintptr_t>(info.base);
      if (at < base || at - base >= info.size) {
        return "no allocation kreplay tracks at " + hex(at);
      }
      at = base + info.size;
    } while (at < end);
    return "";
  };
}

graph_facts replayer::inspect(CUgraph graph, unsigned long long flags, CUcontext context) const {
  own_call_scope own;  // the graph queries are kreplay's
  return inspect_graph(graph, flags, context, driver_, tracked_memory(context));
}

void replayer::on_graph_built(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (data.callbackSite != CUPTI_API_EXIT || !succeeded(data) || inside_own_call()) {
    return;
  }
  if (is_instantiate(cbid)) {
    const auto& made = params<instantiate_prefix>(data);
    if (made.exec != nullptr) {
      graphs_.instantiated(*made.exec, inspect(made.graph, instantiate_flags(cbid, data), data.context));
    }
    return;
  }
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2: {
      // The executable now follows another graph of the same shape: its kernels (and copies) may differ; its
      // instantiation flags stay. One never seen instantiated stays unknown: its flags are not known.
      const auto& update = params<cuGraphExecUpdate_v2_params>(data);
      if (const std::optional<graph_facts> before = graphs_.find(update.hGraphExec); before) {
        graphs_.instantiated(update.hGraphExec, inspect(update.hGraph, before->flags, data.context));
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy:
      graphs_.destroyed(params<cuGraphExecDestroy_params>(data).hGraphExec);
      return;
    default: return node_changed(cbid, data);
  }
}

// One node of an executable set anew: a copy or memset checked as at instantiation, a child graph read again, a
// kernel's name added for selection.
void replayer::node_changed(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  const tracked_memory_t tracked = tracked_memory(data.context);
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemcpyNodeSetParams: {
      const auto& set = params<cuGraphExecMemcpyNodeSetParams_params>(data);
      if (set.copyParams != nullptr) {
        graphs_.changed(set.hGraphExec, memcpy_node_problem(*set.copyParams, tracked));
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemsetNodeSetParams: {
      const auto& set = params<cuGraphExecMemsetNodeSetParams_params>(data);
      if (const CUDA_MEMSET_NODE_PARAMS* m = set.memsetParams; m != nullptr) {
        graphs_.changed(set.hGraphExec,
                        memset_node_problem(m->dst, m->pitch, m->elementSize, m->width, m->height, tracked));
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams_v2: {
      const auto& set = params<cuGraphExecKernelNodeSetParams_v2_params>(data);
      if (set.nodeParams != nullptr) {
        graphs_.kernel_set(set.hGraphExec, kernel_node_name(set.nodeParams->func, set.nodeParams->kern, driver_));
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams: {
      const auto& set = params<cuGraphExecKernelNodeSetParams_params>(data);
      if (set.nodeParams != nullptr) {
        graphs_.kernel_set(set.hGraphExec, kernel_node_name(set.nodeParams->func, nullptr, driver_));
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecChildGraphNodeSetParams: {
      const auto& set = params<cuGraphExecChildGraphNodeSetParams_params>(data);
      child_changed(set.hGraphExec, set.childGraph, data.context);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecNodeSetParams: {
      const auto& set = params<cuGraphExecNodeSetParams_params>(data);
      if (set.nodeParams != nullptr) {
        generic_node_changed(set.hGraphExec, *set.nodeParams, data.context, tracked);
      }
      return;
    }
    default: return;
  }
}

void replayer::child_changed(CUgraphExec exec, CUgraph child, CUcontext context) {
  const graph_facts facts = inspect(child, 0, context);
  graphs_.changed(exec, facts.why_not);
  for (const std::string& kernel : facts.kernels) {
    graphs_.kernel_set(exec, kernel);
  }
}

void replayer::generic_node_changed(CUgraphExec exec, const CUgraphNodeParams& node, CUcontext context,
                                    const tracked_memory_t& tracked) {
  switch (node.type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY: graphs_.changed(exec, memcpy_node_problem(node.memcpy.copyParams, tracked)); return;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      graphs_.changed(exec, memset_node_problem(node.memset.dst, node.memset.pitch, node.memset.elementSize,
                                                node.memset.width, node.memset.height, tracked));
      return;
    case CU_GRAPH_NODE_TYPE_KERNEL:
      graphs_.kernel_set(exec, kernel_node_name(node.kernel.func, node.kernel.kern, driver_));
      return;
    case CU_GRAPH_NODE_TYPE_GRAPH: return child_changed(exec, node.graph.graph, context);
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
    std::vector<std::string> names = p.graph.kernels;
    names.insert(names.end(), p.graph.set_later.begin(), p.graph.set_later.end());
    const launch_selector::verdict verdict = selector_.classify_graph(names);
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
