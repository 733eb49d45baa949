// Graph launches (--graph-profiling graph): following the calls that make, change and destroy executable graphs,
// and deciding whether a graph launch is replayed as one window.
#include <algorithm>
#include <cstddef>
#include <cstring>

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
static_assert(offsetof(cuGraphAddNode_params, phGraphNode) == offsetof(cuGraphAddNode_v2_params, phGraphNode));

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

// The generic form's kernel parameters as the _v2 form (the same fields in the same places).
CUDA_KERNEL_NODE_PARAMS_v2 as_v2(const CUDA_KERNEL_NODE_PARAMS_v3& v3) {
  static_assert(sizeof(CUDA_KERNEL_NODE_PARAMS_v3) == sizeof(CUDA_KERNEL_NODE_PARAMS_v2));
  static_assert(offsetof(CUDA_KERNEL_NODE_PARAMS_v3, ctx) == offsetof(CUDA_KERNEL_NODE_PARAMS_v2, ctx));
  CUDA_KERNEL_NODE_PARAMS_v2 v2{};
  std::memcpy(&v2, &v3, sizeof(v2));
  return v2;
}

CUDA_KERNEL_NODE_PARAMS_v2 as_v2(const CUDA_KERNEL_NODE_PARAMS_v1& v1) {
  CUDA_KERNEL_NODE_PARAMS_v2 v2{};
  v2.func = v1.func;
  v2.gridDimX = v1.gridDimX, v2.gridDimY = v1.gridDimY, v2.gridDimZ = v1.gridDimZ;
  v2.blockDimX = v1.blockDimX, v2.blockDimY = v1.blockDimY, v2.blockDimZ = v1.blockDimZ;
  v2.sharedMemBytes = v1.sharedMemBytes;
  v2.kernelParams = v1.kernelParams;
  v2.extra = v1.extra;
  return v2;
}

// After cuGraphExecUpdate the executable's nodes keep their identity: later cuGraphExec*SetParams calls name
// them by the nodes of the graph it was instantiated from, not of the update's. An update needs the same
// topology, so the plans pair node for node: the new plan takes the old handles where every node's kind matches
// (otherwise it keeps its own, and a later SetParams turns node mode off for the executable).
void keep_node_handles(const graph_facts& before, graph_facts& after) {
  if (before.plan.size() != after.plan.size()) {
    return;
  }
  for (size_t i = 0; i < before.plan.size(); ++i) {
    if (before.plan[i].type != after.plan[i].type) {
      return;
    }
  }
  for (size_t i = 0; i < before.plan.size(); ++i) {
    after.plan[i].node = before.plan[i].node;
  }
}

// What the driver says lies at `at`, for a reason's text: "; to the driver: device memory of device 0, in an
// address range at 0x... of N bytes, from a memory pool". The driver answers zeros for memory it does not know.
std::string driver_view(const driver_api_t& driver, uintptr_t at) {
  if (driver.pointer_get_attributes == nullptr) {
    return "";
  }
  CUpointer_attribute asked[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_MAPPED,
                                 CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE};
  // Each answer is at most 8 bytes, written from the start of its slot: zeroed slots read right at any width.
  uint64_t answers[7] = {};
  void* slots[7];
  for (size_t i = 0; i < 7; ++i) {
    slots[i] = &answers[i];
  }
  {
    own_call_scope own;
    if (driver.pointer_get_attributes(7, asked, slots, static_cast<CUdeviceptr>(at)) != CUDA_SUCCESS) {
      return "; the driver does not know it either";
    }
  }
  const auto type = static_cast<CUmemorytype>(answers[0] & 0xffffffffu);
  if (type == 0) {
    return "; the driver does not know it either";
  }
  std::string text = "; to the driver: ";
  text += type == CU_MEMORYTYPE_DEVICE ? "device memory" : type == CU_MEMORYTYPE_HOST ? "host memory"
                                                            : type == CU_MEMORYTYPE_ARRAY ? "an array"
                                                            : "memory of type " + std::to_string(answers[0]);
  text += " of device " + std::to_string(static_cast<int32_t>(answers[1] & 0xffffffffu));
  if (answers[3] != 0) {
    text += ", in an address range at " + hex(static_cast<CUdeviceptr>(answers[2])) + " of " +
            std::to_string(answers[3]) + " bytes";
  }
  text += answers[4] != 0 ? ", managed" : "";
  text += answers[6] != 0 ? ", from a memory pool" : "";
  text += answers[5] != 0 && answers[6] == 0 ? ", mapped" : "";
  return text;
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
        return "no allocation kreplay tracks at " + hex(at) + driver_view(driver_, at);
      }
      if (info.type != KREPLAY_POINTER_DEVICE) {
        return memory_kind_text(info.type) + " at " + hex(at);
      }
      if (info.owner.handle != agent.handle) {
        return "another device's memory at " + hex(at);
      }
      const auto base = reinterpret_cast<uintptr_t>(info.base);
      if (at < base || at - base >= info.size) {
        return "no allocation kreplay tracks at " + hex(at) + driver_view(driver_, at);
      }
      at = base + info.size;
    } while (at < end);
    return "";
  };
}

graph_facts replayer::inspect(CUgraph graph, unsigned long long flags, CUcontext context) const {
  own_call_scope own;  // the graph queries are kreplay's
  return inspect_graph(
      graph, flags, context, driver_, tracked_memory(context),
      [this](CUgraphConditionalHandle handle) { return graphs_.resets_at_launch(handle); },
      config_.graphs == graph_profiling::node,
      [this](CUgraphNode node, CUDA_CONDITIONAL_NODE_PARAMS* params) { return graphs_.conditional_of(node, params); });
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
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2:
      return graph_updated(params<cuGraphExecUpdate_v2_params>(data), data.context);
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy:
      graphs_.destroyed(params<cuGraphExecDestroy_params>(data).hGraphExec);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2:
      return node_added(cbid, data);
    case CUPTI_DRIVER_TRACE_CBID_cuGraphConditionalHandleCreate: {
      const auto& made = params<cuGraphConditionalHandleCreate_params>(data);
      if (made.pHandle_out != nullptr) {
        graphs_.handle_created(*made.pHandle_out, made.flags);
      }
      return;
    }
    default: return node_changed(cbid, data);
  }
}

// The executable now follows another graph of the same shape: its kernels (and copies) may differ; its
// instantiation flags stay. One never seen instantiated stays unknown: its flags are not known.
void replayer::graph_updated(const cuGraphExecUpdate_v2_params& update, CUcontext context) {
  const std::optional<graph_facts> before = graphs_.find(update.hGraphExec);
  if (!before) {
    return;
  }
  graph_facts after = inspect(update.hGraph, before->flags, context);
  keep_node_handles(*before, after);
  if (after.node_why_not.empty() && !before->node_why_not.empty()) {
    after.node_why_not = before->node_why_not;  // a change kreplay could not follow outlives the update
    after.plan.clear();
  }
  graphs_.instantiated(update.hGraphExec, std::move(after));
}

// Both forms begin with the node's address and end with the parameters; only conditional nodes are kept (the
// 13.0 driver's cuGraphNodeGetParams cannot read them back).
void replayer::node_added(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  const CUgraphNodeParams* added = cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode
                                       ? params<cuGraphAddNode_params>(data).nodeParams
                                       : params<cuGraphAddNode_v2_params>(data).nodeParams;
  CUgraphNode* const node = params<cuGraphAddNode_params>(data).phGraphNode;
  if (added != nullptr && node != nullptr && added->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    graphs_.conditional_added(*node, added->conditional);
  }
}

// One node of an executable set anew: a copy or memset checked as at instantiation, a child graph read again, a
// kernel's name added for selection; and node mode's plan changed to match (or node mode turned off for it).
void replayer::node_changed(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  const tracked_memory_t tracked = tracked_memory(data.context);
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemcpyNodeSetParams: {
      const auto& set = params<cuGraphExecMemcpyNodeSetParams_params>(data);
      if (set.copyParams != nullptr) {
        memcpy_set(set.hGraphExec, set.hNode, *set.copyParams, tracked);
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemsetNodeSetParams: {
      const auto& set = params<cuGraphExecMemsetNodeSetParams_params>(data);
      if (set.memsetParams != nullptr) {
        memset_set(set.hGraphExec, set.hNode, *set.memsetParams, tracked);
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams_v2: {
      const auto& set = params<cuGraphExecKernelNodeSetParams_v2_params>(data);
      if (set.nodeParams != nullptr) {
        kernel_set(set.hGraphExec, set.hNode, *set.nodeParams);
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams: {
      const auto& set = params<cuGraphExecKernelNodeSetParams_params>(data);
      if (set.nodeParams != nullptr) {
        kernel_set(set.hGraphExec, set.hNode, as_v2(*set.nodeParams));
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
        generic_node_changed(set.hGraphExec, set.hNode, *set.nodeParams, data.context, tracked);
      }
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecEventRecordNodeSetEvent: {
      const auto& set = params<cuGraphExecEventRecordNodeSetEvent_params>(data);
      return event_set(set.hGraphExec, set.hNode, set.event);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecEventWaitNodeSetEvent: {
      const auto& set = params<cuGraphExecEventWaitNodeSetEvent_params>(data);
      return event_set(set.hGraphExec, set.hNode, set.event);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphNodeSetEnabled:
      graphs_.node_mode_off(params<cuGraphNodeSetEnabled_params>(data).hGraphExec,
                            "a node was enabled or disabled after instantiation");
      return;
    default: return;
  }
}

void replayer::kernel_set(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v2& params) {
  graphs_.kernel_set(exec, kernel_node_name(params.func, params.kern, driver_));
  own_call_scope own;  // the function queries are kreplay's
  std::string why;
  std::shared_ptr<kernel_node_t> kernel = plan_kernel_node(params, driver_, &why);
  graphs_.node_set(
      exec, node,
      [&kernel, &why](planned_node& planned) {
        if (!why.empty() || planned.type != CU_GRAPH_NODE_TYPE_KERNEL || planned.kernel == nullptr) {
          return false;
        }
        kernel->cooperative = planned.kernel->cooperative;  // a node's attributes stay
        planned.kernel = std::move(kernel);
        return true;
      },
      why.empty() ? "a kernel node kreplay cannot place" : why);
}

void replayer::memcpy_set(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D& copy,
                          const tracked_memory_t& tracked) {
  graphs_.changed(exec, memcpy_node_problem(copy, tracked));
  graphs_.node_set(
      exec, node,
      [&copy](planned_node& planned) {
        planned.copy = copy;
        return planned.type == CU_GRAPH_NODE_TYPE_MEMCPY;
      },
      "a memcpy node kreplay cannot place");
}

void replayer::memset_set(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS& set,
                          const tracked_memory_t& tracked) {
  graphs_.changed(exec, memset_node_problem(set.dst, set.pitch, set.elementSize, set.width, set.height, tracked));
  graphs_.node_set(
      exec, node,
      [&set](planned_node& planned) {
        planned.set = set;
        return planned.type == CU_GRAPH_NODE_TYPE_MEMSET;
      },
      "a memset node kreplay cannot place");
}

void replayer::event_set(CUgraphExec exec, CUgraphNode node, CUevent event) {
  graphs_.node_set(
      exec, node,
      [event](planned_node& planned) {
        planned.event = event;
        return planned.type == CU_GRAPH_NODE_TYPE_EVENT_RECORD || planned.type == CU_GRAPH_NODE_TYPE_WAIT_EVENT;
      },
      "an event node kreplay cannot place");
}

void replayer::child_changed(CUgraphExec exec, CUgraph child, CUcontext context) {
  const graph_facts facts = inspect(child, 0, context);
  graphs_.changed(exec, facts.why_not);
  graphs_.node_mode_off(exec, "a child graph was set after instantiation");
  for (const std::string& kernel : facts.kernels) {
    graphs_.kernel_set(exec, kernel);
  }
}

void replayer::generic_node_changed(CUgraphExec exec, CUgraphNode node, const CUgraphNodeParams& params,
                                    CUcontext context, const tracked_memory_t& tracked) {
  switch (params.type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY: return memcpy_set(exec, node, params.memcpy.copyParams, tracked);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS_v2& m = params.memset;
      CUDA_MEMSET_NODE_PARAMS set{};
      set.dst = m.dst, set.pitch = m.pitch, set.value = m.value, set.elementSize = m.elementSize;
      set.width = m.width, set.height = m.height;
      return memset_set(exec, node, set, tracked);
    }
    case CU_GRAPH_NODE_TYPE_KERNEL: return kernel_set(exec, node, as_v2(params.kernel));
    case CU_GRAPH_NODE_TYPE_GRAPH: return child_changed(exec, params.graph.graph, context);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return event_set(exec, node, params.eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return event_set(exec, node, params.eventWait.event);
    default: return graphs_.node_mode_off(exec, "a node of type " + std::to_string(static_cast<int>(params.type)) +
                                                    " was set after instantiation");
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
  if (config_.backend == replay_backend::cupti_kernel_replay) {
    return "graph launch: --backend cupti-kernel-replay counts stream launches only, run once";
  }
  std::optional<graph_facts> facts = graphs_.find(p.launch.graph);
  if (!facts) {
    return "graph launch: its executable was not seen instantiated, run once";
  }
  p.graph = std::move(*facts);
  p.row.kernel = graph_row_name(p.graph);
  // Node mode's kernel nodes are numbered one by one as they run (replay_kernel_node); graph mode counts the
  // whole graph as one launch.
  const bool by_node = config_.graphs == graph_profiling::node && node_mode_problem(p.graph).empty();
  {
    std::lock_guard<std::mutex> lock(selector_mutex_);
    std::vector<std::string> names = p.graph.kernels;
    names.insert(names.end(), p.graph.set_later.begin(), p.graph.set_later.end());
    const launch_selector::verdict verdict =
        by_node ? selector_.precheck_nodes(planned_kernel_names(p.graph)) : selector_.classify_graph(names);
    if (verdict == launch_selector::verdict::excluded && by_node) {
      return "graph launch: a kernel node is excluded (a communication kernel, --exclude): node mode would run it "
             "twice, run once";
    }
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
  if (by_node) {
    p.row.graph_mode = "node";
    p.row.holds_nodes = true;
  } else if (config_.graphs == graph_profiling::node) {
    p.row.graph_mode = "graph: " + node_mode_problem(p.graph);
  } else {
    p.row.graph_mode = "graph";
  }
  p.row.graph_launch = p.row.index;
  return "";
}

// The kernel nodes' names in the plan's order (what node mode numbers and selects).
std::vector<std::string> planned_kernel_names(const graph_facts& graph) {
  std::vector<std::string> names;
  for (const planned_node& node : graph.plan) {
    if (node.type == CU_GRAPH_NODE_TYPE_KERNEL) {
      names.push_back(node.kernel->name);
    }
  }
  return names;
}

// Empty when node mode can run `graph`'s plan here, else why the graph is replayed whole instead (or, with
// why_not, run once: what stops a whole replay stops node mode too, and its plan was cleared).
std::string replayer::node_mode_problem(const graph_facts& graph) const {
  if (!graph.why_not.empty()) {
    return graph.why_not;
  }
  if (!graph.node_why_not.empty()) {
    return graph.node_why_not;
  }
  const bool copies = std::any_of(graph.plan.begin(), graph.plan.end(), [](const planned_node& n) {
    return n.type == CU_GRAPH_NODE_TYPE_MEMCPY || n.type == CU_GRAPH_NODE_TYPE_MEMSET;
  });
  if (copies && (driver_.memcpy_3d_async == nullptr || driver_.memset_d2d8_async == nullptr ||
                 driver_.memset_d2d16_async == nullptr || driver_.memset_d2d32_async == nullptr)) {
    return "the driver lacks cuMemcpy3DAsync or cuMemsetD2D*Async";
  }
  const bool events = std::any_of(graph.plan.begin(), graph.plan.end(), [](const planned_node& n) {
    return n.type == CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  });
  if (events && driver_.stream_wait_event == nullptr) {
    return "the driver lacks cuStreamWaitEvent";
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
