// Reading an executable graph's nodes (graphs.hpp says what makes a whole-graph replay unfaithful).
#include "replay/graphs.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace kreplay::cuda::inject {
namespace {

// A graph allocation: freed inside the graph or not.
struct graph_allocation {
  CUdeviceptr base;
  size_t bytes;
};

std::string hex(CUdeviceptr address) {
  char text[32];
  std::snprintf(text, sizeof(text), "%#llx", static_cast<unsigned long long>(address));
  return text;
}

// One walk over a graph and its children: counts, names, and what may make it unreplayable.
class graph_walk {
 public:
  graph_walk(const driver_api_t& driver, const tracked_memory_t& tracked) : driver_(driver), tracked_(tracked) {}

  void visit(CUgraph graph, int depth) {
    if (!why_not_.empty()) {
      return;
    }
    if (depth > max_depth) {
      why_not_ = "child graphs nested deeper than " + std::to_string(max_depth);
      return;
    }
    std::vector<CUgraphNode> nodes;
    if (!nodes_of(graph, nodes)) {
      return;
    }
    for (CUgraphNode node : nodes) {
      visit_node(node, depth);
      if (!why_not_.empty()) {
        return;
      }
    }
  }

  // After the walk: memcpy destinations and graph allocations checked against each other.
  graph_facts finish() {
    check_allocations();
    for (const CUDA_MEMCPY3D& copy : copies_) {
      if (!why_not_.empty()) {
        break;
      }
      const CUdeviceptr dst = copy.dstDevice + copy.dstXInBytes;
      const bool graph_memory = (copy.dstMemoryType == CU_MEMORYTYPE_DEVICE ||
                                 copy.dstMemoryType == CU_MEMORYTYPE_UNIFIED) &&
                                in_graph_allocation(dst);
      if (!graph_memory) {
        why_not_ = memcpy_node_problem(copy, tracked_);
      }
    }
    facts_.why_not = why_not_;
    return std::move(facts_);
  }

 private:
  static constexpr int max_depth = 16;

  bool nodes_of(CUgraph graph, std::vector<CUgraphNode>& nodes) {
    size_t count = 0;
    if (driver_.graph_get_nodes == nullptr || driver_.graph_get_nodes(graph, nullptr, &count) != CUDA_SUCCESS) {
      why_not_ = "its nodes could not be listed (cuGraphGetNodes)";
      return false;
    }
    nodes.resize(count);
    if (count != 0 && driver_.graph_get_nodes(graph, nodes.data(), &count) != CUDA_SUCCESS) {
      why_not_ = "its nodes could not be listed (cuGraphGetNodes)";
      return false;
    }
    nodes.resize(std::min(count, nodes.size()));
    return true;
  }

  void visit_node(CUgraphNode node, int depth) {
    CUgraphNodeType type{};
    if (driver_.graph_node_get_type == nullptr || driver_.graph_node_get_type(node, &type) != CUDA_SUCCESS) {
      why_not_ = "a node's type could not be read (cuGraphNodeGetType)";
      return;
    }
    ++facts_.nodes;
    switch (type) {
      case CU_GRAPH_NODE_TYPE_KERNEL: facts_.kernels.push_back(kernel_name(node)); return;
      case CU_GRAPH_NODE_TYPE_MEMCPY: return read_memcpy(node);
      case CU_GRAPH_NODE_TYPE_GRAPH: return visit_child(node, depth);
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return read_allocation(node);
      case CU_GRAPH_NODE_TYPE_MEM_FREE: return read_free(node);
      case CU_GRAPH_NODE_TYPE_MEMSET:
      case CU_GRAPH_NODE_TYPE_EMPTY:
      case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      case CU_GRAPH_NODE_TYPE_CONDITIONAL: return;
      case CU_GRAPH_NODE_TYPE_HOST:
        why_not_ = "a host node: the program's host function would run on every pass";
        return;
      case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
      case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
        why_not_ = "an external semaphore node: it signals or waits outside the device memory";
        return;
      case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
        why_not_ = "a batch memory-operation node: it writes or waits on values outside the snapshot";
        return;
      default: why_not_ = "a node of type " + std::to_string(static_cast<int>(type)) + " that kreplay does not know";
    }
  }

  std::string kernel_name(CUgraphNode node) const {
    CUDA_KERNEL_NODE_PARAMS_v2 params{};
    const char* name = nullptr;
    if (driver_.graph_kernel_node_get_params == nullptr ||
        driver_.graph_kernel_node_get_params(node, &params) != CUDA_SUCCESS) {
      return "(unnamed)";
    }
    if (params.func != nullptr && driver_.func_get_name != nullptr &&
        driver_.func_get_name(&name, params.func) == CUDA_SUCCESS && name != nullptr) {
      return name;
    }
    if (params.kern != nullptr && driver_.kernel_get_name != nullptr &&
        driver_.kernel_get_name(&name, params.kern) == CUDA_SUCCESS && name != nullptr) {
      return name;
    }
    return "(unnamed)";
  }

  void read_memcpy(CUgraphNode node) {
    CUDA_MEMCPY3D copy{};
    if (driver_.graph_memcpy_node_get_params == nullptr ||
        driver_.graph_memcpy_node_get_params(node, &copy) != CUDA_SUCCESS) {
      why_not_ = "a memcpy node's parameters could not be read (cuGraphMemcpyNodeGetParams)";
      return;
    }
    copies_.push_back(copy);
  }

  void visit_child(CUgraphNode node, int depth) {
    CUgraph child = nullptr;
    if (driver_.graph_child_get_graph == nullptr || driver_.graph_child_get_graph(node, &child) != CUDA_SUCCESS) {
      why_not_ = "a child graph could not be read (cuGraphChildGraphNodeGetGraph)";
      return;
    }
    visit(child, depth + 1);
  }

  void read_allocation(CUgraphNode node) {
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    if (driver_.graph_mem_alloc_node_get_params == nullptr ||
        driver_.graph_mem_alloc_node_get_params(node, &params) != CUDA_SUCCESS) {
      why_not_ = "a memory allocation node could not be read (cuGraphMemAllocNodeGetParams)";
      return;
    }
    allocations_.push_back({params.dptr, params.bytesize});
  }

  void read_free(CUgraphNode node) {
    CUdeviceptr freed = 0;
    if (driver_.graph_mem_free_node_get_params == nullptr ||
        driver_.graph_mem_free_node_get_params(node, &freed) != CUDA_SUCCESS) {
      why_not_ = "a memory free node could not be read (cuGraphMemFreeNodeGetParams)";
      return;
    }
    frees_.push_back(freed);
  }

  // Every allocation freed inside the graph, and nothing freed that the graph did not allocate.
  void check_allocations() {
    if (!why_not_.empty()) {
      return;
    }
    for (const graph_allocation& a : allocations_) {
      if (std::find(frees_.begin(), frees_.end(), a.base) == frees_.end()) {
        why_not_ = "it allocates memory that outlives the launch (" + hex(a.base) + ", " + std::to_string(a.bytes) +
                   " bytes, no free node)";
        return;
      }
    }
    for (CUdeviceptr freed : frees_) {
      const bool own = std::any_of(allocations_.begin(), allocations_.end(),
                                   [freed](const graph_allocation& a) { return a.base == freed; });
      if (!own) {
        why_not_ = "it frees memory it did not allocate (" + hex(freed) + "): a second pass would free it again";
        return;
      }
    }
  }

  bool in_graph_allocation(CUdeviceptr address) const {
    return std::any_of(allocations_.begin(), allocations_.end(), [address](const graph_allocation& a) {
      return address >= a.base && address - a.base < a.bytes;
    });
  }

  const driver_api_t& driver_;
  const tracked_memory_t& tracked_;
  graph_facts facts_;
  std::string why_not_;
  std::vector<CUDA_MEMCPY3D> copies_;
  std::vector<graph_allocation> allocations_;
  std::vector<CUdeviceptr> frees_;
};

}  // namespace

std::string memcpy_node_problem(const CUDA_MEMCPY3D& copy, const tracked_memory_t& tracked) {
  switch (copy.dstMemoryType) {
    case CU_MEMORYTYPE_HOST: return "a memcpy node writes host memory, which no snapshot holds";
    case CU_MEMORYTYPE_ARRAY: return "a memcpy node writes a CUDA array, which no snapshot holds";
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: {
      const CUdeviceptr dst = copy.dstDevice + copy.dstXInBytes;
      if (tracked && tracked(dst)) {
        return "";
      }
      return "a memcpy node writes memory kreplay does not track (" + hex(dst) + ")";
    }
  }
  return "a memcpy node writes memory of an unknown type";
}

graph_facts inspect_graph(CUgraph graph, unsigned long long instantiate_flags, const driver_api_t& driver,
                          const tracked_memory_t& tracked) {
  graph_walk walk(driver, tracked);
  walk.visit(graph, 0);
  graph_facts facts = walk.finish();
  if (facts.why_not.empty() && (instantiate_flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) != 0) {
    facts.why_not = "instantiated for device launch: its kernels may launch graphs kreplay never sees";
  }
  return facts;
}

void graph_registry::instantiated(CUgraphExec exec, graph_facts facts) {
  std::lock_guard<std::mutex> lock(mutex_);
  execs_[exec] = std::move(facts);
}

void graph_registry::changed(CUgraphExec exec, const std::string& why) {
  if (why.empty()) {
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = execs_.find(exec);
  if (found != execs_.end() && found->second.why_not.empty()) {
    found->second.why_not = why + " (changed after instantiation)";
  }
}

void graph_registry::destroyed(CUgraphExec exec) {
  std::lock_guard<std::mutex> lock(mutex_);
  execs_.erase(exec);
}

std::optional<graph_facts> graph_registry::find(CUgraphExec exec) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = execs_.find(exec);
  if (found == execs_.end()) {
    return std::nullopt;
  }
  return found->second;
}

}  // namespace kreplay::cuda::inject
