// Reading an executable graph's nodes (graphs.hpp says what makes a whole-graph replay unfaithful).
#include "replay/graphs.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "replay/launch.hpp"

namespace kreplay::cuda::inject {
namespace {

// A graph allocation: freed inside the graph or not.
struct graph_allocation {
  CUdeviceptr base;
  size_t bytes;
};

// What lies where a copy or memset writes, when its caller cannot say.
std::string untracked(const tracked_memory_t& tracked, CUdeviceptr start, size_t bytes) {
  return tracked ? tracked(start, bytes) : "no allocation kreplay tracks at " + hex(start);
}

// `nodes` reordered so that each edge's source (`from[e]`) comes before its target (`to[e]`): Kahn's algorithm,
// the given order among the nodes that are ready. Empty when it could, else why not (`nodes` then unchanged).
std::string order_topologically(std::vector<CUgraphNode>& nodes, const std::vector<CUgraphNode>& from,
                                const std::vector<CUgraphNode>& to) {
  std::map<CUgraphNode, size_t> position;
  for (size_t i = 0; i < nodes.size(); ++i) {
    position[nodes[i]] = i;
  }
  std::vector<size_t> waiting(nodes.size(), 0);  // edges into each node not yet satisfied
  std::vector<std::vector<size_t>> after(nodes.size());
  for (size_t e = 0; e < from.size(); ++e) {
    const auto a = position.find(from[e]);
    const auto b = position.find(to[e]);
    if (a == position.end() || b == position.end()) {
      return "an edge names a node outside its graph";
    }
    after[a->second].push_back(b->second);
    ++waiting[b->second];
  }
  std::vector<CUgraphNode> ordered;
  ordered.reserve(nodes.size());
  std::vector<bool> done(nodes.size(), false);
  while (ordered.size() < nodes.size()) {
    size_t next = 0;
    while (next < nodes.size() && (done[next] || waiting[next] != 0)) {
      ++next;
    }
    if (next == nodes.size()) {
      return "its edges form a cycle";
    }
    done[next] = true;
    ordered.push_back(nodes[next]);
    for (size_t later : after[next]) {
      --waiting[later];
    }
  }
  nodes = std::move(ordered);
  return "";
}

// One walk over a graph and its children: counts, names, and what may make it unreplayable.
class graph_walk {
 public:
  graph_walk(CUcontext context, const driver_api_t& driver, const tracked_memory_t& tracked,
             const resets_at_launch_t& resets, const conditional_of_t& conditional_of, bool plan_nodes)
      : context_(context), driver_(driver), tracked_(tracked), resets_(resets), conditional_of_(conditional_of) {
    if (!plan_nodes) {
      node_why_not_ = "--graph-profiling graph";  // no plan: nothing below orders nodes or copies arguments
    }
  }

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
    order_by_edges(graph, nodes);
    for (CUgraphNode node : nodes) {
      visit_node(node, depth);
      if (!why_not_.empty()) {
        return;
      }
    }
  }

  // After the walk: memcpy and memset destinations checked, the graph's own allocations counting as captured.
  graph_facts finish() {
    check_allocations();
    const tracked_memory_t own_or_tracked = [this](CUdeviceptr start, size_t bytes) -> std::string {
      if (in_graph_allocation(start, bytes)) {
        return "";
      }
      return untracked(tracked_, start, bytes);
    };
    for (const CUDA_MEMCPY3D& copy : copies_) {
      if (why_not_.empty()) {
        why_not_ = memcpy_node_problem(copy, own_or_tracked);
      }
    }
    for (const CUDA_MEMSET_NODE_PARAMS& set : memsets_) {
      if (why_not_.empty()) {
        why_not_ = memset_node_problem(set.dst, set.pitch, set.elementSize, set.width, set.height, own_or_tracked);
      }
    }
    facts_.why_not = why_not_;
    if (!allocations_.empty() || !frees_.empty()) {
      no_node_mode("allocation or free nodes (graph memory is mapped only while the graph runs)");
    }
    facts_.node_why_not = node_why_not_;
    if (!why_not_.empty() || !node_why_not_.empty()) {
      facts_.plan.clear();  // node mode will not run it
    }
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

  // `nodes` reordered so that every node comes after those it depends on. Node mode only: a whole-graph replay
  // never runs nodes itself.
  void order_by_edges(CUgraph graph, std::vector<CUgraphNode>& nodes) {
    if (nodes.size() < 2 || !node_why_not_.empty()) {
      return;
    }
    // The edge data is asked for too: without it the driver refuses (LOSSY_QUERY) a graph whose edges carry any
    // (stream capture makes such edges). Running the nodes one after another satisfies every kind of edge.
    size_t count = 0;
    const auto listed = [](CUresult result) { return result == CUDA_SUCCESS || result == CUDA_ERROR_LOSSY_QUERY; };
    if (driver_.graph_get_edges == nullptr || !listed(driver_.graph_get_edges(graph, nullptr, nullptr, nullptr, &count))) {
      return no_node_mode("its edges could not be listed (cuGraphGetEdges)");
    }
    std::vector<CUgraphNode> from(count);
    std::vector<CUgraphNode> to(count);
    std::vector<CUgraphEdgeData> data(count);
    if (count != 0 && driver_.graph_get_edges(graph, from.data(), to.data(), data.data(), &count) != CUDA_SUCCESS) {
      return no_node_mode("its edges could not be listed (cuGraphGetEdges)");
    }
    from.resize(std::min(count, from.size()));
    to.resize(from.size());
    if (const std::string why = order_topologically(nodes, from, to); !why.empty()) {
      no_node_mode(why);
    }
  }

  void no_node_mode(const std::string& why) {
    if (node_why_not_.empty()) {
      node_why_not_ = why;
    }
  }

  void plan(CUgraphNode node, CUgraphNodeType type, const std::function<void(planned_node&)>& fill = {}) {
    if (!node_why_not_.empty()) {
      return;  // node mode will not run this graph: no plan
    }
    planned_node planned;
    planned.node = node;
    planned.type = type;
    if (fill) {
      fill(planned);
    }
    facts_.plan.push_back(std::move(planned));
  }

  void visit_node(CUgraphNode node, int depth) {
    CUgraphNodeType type{};
    if (driver_.graph_node_get_type == nullptr || driver_.graph_node_get_type(node, &type) != CUDA_SUCCESS) {
      why_not_ = "a node's type could not be read (cuGraphNodeGetType)";
      return;
    }
    ++facts_.nodes;
    switch (type) {
      case CU_GRAPH_NODE_TYPE_KERNEL: return read_kernel(node);
      case CU_GRAPH_NODE_TYPE_MEMCPY: return read_memcpy(node);
      case CU_GRAPH_NODE_TYPE_MEMSET: return read_memset(node);
      case CU_GRAPH_NODE_TYPE_GRAPH: return visit_child(node, depth);
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return read_allocation(node);
      case CU_GRAPH_NODE_TYPE_MEM_FREE: return read_free(node);
      case CU_GRAPH_NODE_TYPE_EMPTY: return plan(node, type);
      case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return read_event(node, type);
      case CU_GRAPH_NODE_TYPE_CONDITIONAL: return read_conditional(node, depth);
      default: why_not_ = unreplayable_node(type);
    }
  }

  // Why a graph holding a node of this type is never replayed.
  static std::string unreplayable_node(CUgraphNodeType type) {
    switch (type) {
      case CU_GRAPH_NODE_TYPE_HOST: return "a host node: the program's host function would run on every pass";
      case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
      case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
        return "an external semaphore node: it signals or waits outside the device memory";
      case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
        return "a batch memory-operation node: it writes or waits on values outside the snapshot";
      default: return "a node of type " + std::to_string(static_cast<int>(type)) + " that kreplay does not know";
    }
  }

  // Its name, and a kernel bound to a context other than the instantiating one makes the graph unreplayable.
  void read_kernel(CUgraphNode node) {
    CUDA_KERNEL_NODE_PARAMS_v2 params{};
    if (driver_.graph_kernel_node_get_params == nullptr ||
        driver_.graph_kernel_node_get_params(node, &params) != CUDA_SUCCESS) {
      facts_.kernels.push_back("(unnamed)");
      return no_node_mode("a kernel node's parameters could not be read (cuGraphKernelNodeGetParams)");
    }
    facts_.kernels.push_back(kernel_node_name(params.func, params.kern, driver_));
    if (params.func == nullptr && params.ctx != nullptr && params.ctx != context_) {
      why_not_ = "a kernel node runs in another context (" + facts_.kernels.back().substr(0, 80) + ")";
      return;
    }
    if (!node_why_not_.empty()) {
      return;
    }
    std::string why;
    std::shared_ptr<kernel_node_t> kernel = plan_kernel_node(params, driver_, &why);
    read_kernel_attributes(node, *kernel, &why);
    if (!why.empty()) {
      return no_node_mode(why);
    }
    plan(node, CU_GRAPH_NODE_TYPE_KERNEL, [&kernel](planned_node& p) { p.kernel = std::move(kernel); });
  }

  // Launch attributes set on the node that change how it runs: cooperative and a cluster shape are kept.
  void read_kernel_attributes(CUgraphNode node, kernel_node_t& kernel, std::string* why) {
    if (driver_.graph_kernel_node_get_attribute == nullptr) {
      return;
    }
    CUkernelNodeAttrValue value{};
    if (driver_.graph_kernel_node_get_attribute(node, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &value) == CUDA_SUCCESS) {
      kernel.cooperative = value.cooperative != 0;
    }
    if (kernel.cooperative && kernel.packed && why->empty()) {  // a cooperative launch takes no packed buffer
      *why = "a cooperative kernel node whose arguments are one packed buffer (" + kernel.name.substr(0, 80) + ")";
    }
    value = {};
    if (driver_.graph_kernel_node_get_attribute(node, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &value) ==
            CUDA_SUCCESS &&
        value.clusterDim.x * value.clusterDim.y * value.clusterDim.z > 1) {
      kernel.cluster[0] = value.clusterDim.x, kernel.cluster[1] = value.clusterDim.y;
      kernel.cluster[2] = value.clusterDim.z;
    }
  }

  void read_event(CUgraphNode node, CUgraphNodeType type) {
    const auto get = type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? driver_.graph_event_record_node_get_event
                                                             : driver_.graph_event_wait_node_get_event;
    CUevent event = nullptr;
    if (get == nullptr || get(node, &event) != CUDA_SUCCESS) {
      return no_node_mode("an event node's event could not be read");
    }
    plan(node, type, [event](planned_node& p) { p.event = event; });
  }

  // Replayed whole when its handle is set to its default at every launch; its bodies read as child graphs.
  void read_conditional(CUgraphNode node, int depth) {
    no_node_mode("a conditional node (the device decides how often its bodies run)");
    // The driver's query (CUDA 13.1 and later), else what kreplay saw when the program added the node.
    CUgraphNodeParams params{};
    CUDA_CONDITIONAL_NODE_PARAMS conditional{};
    if (driver_.graph_node_get_params != nullptr && driver_.graph_node_get_params(node, &params) == CUDA_SUCCESS &&
        params.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      conditional = params.conditional;
    } else if (!conditional_of_ || !conditional_of_(node, &conditional)) {
      why_not_ = "a conditional node whose parameters could not be read (cuGraphNodeGetParams, and kreplay did not "
                 "see it added)";
      return;
    }
    if (!resets_ || !resets_(conditional.handle)) {
      why_not_ = "a conditional node whose handle keeps its value across launches (not created with "
                 "CU_GRAPH_COND_ASSIGN_DEFAULT while kreplay watched), so passes could branch apart";
      return;
    }
    for (unsigned body = 0; conditional.phGraph_out != nullptr && body < conditional.size; ++body) {
      visit(conditional.phGraph_out[body], depth + 1);
    }
  }

  void read_memset(CUgraphNode node) {
    CUDA_MEMSET_NODE_PARAMS set{};
    if (driver_.graph_memset_node_get_params == nullptr ||
        driver_.graph_memset_node_get_params(node, &set) != CUDA_SUCCESS) {
      why_not_ = "a memset node's parameters could not be read (cuGraphMemsetNodeGetParams)";
      return;
    }
    memsets_.push_back(set);
    plan(node, CU_GRAPH_NODE_TYPE_MEMSET, [&set](planned_node& p) { p.set = set; });
  }

  void read_memcpy(CUgraphNode node) {
    CUDA_MEMCPY3D copy{};
    if (driver_.graph_memcpy_node_get_params == nullptr ||
        driver_.graph_memcpy_node_get_params(node, &copy) != CUDA_SUCCESS) {
      why_not_ = "a memcpy node's parameters could not be read (cuGraphMemcpyNodeGetParams)";
      return;
    }
    copies_.push_back(copy);
    plan(node, CU_GRAPH_NODE_TYPE_MEMCPY, [&copy](planned_node& p) { p.copy = copy; });
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

  bool in_graph_allocation(CUdeviceptr start, size_t bytes) const {
    return std::any_of(allocations_.begin(), allocations_.end(), [start, bytes](const graph_allocation& a) {
      return start >= a.base && start - a.base <= a.bytes && bytes <= a.bytes - (start - a.base);
    });
  }

  CUcontext context_;
  const driver_api_t& driver_;
  const tracked_memory_t& tracked_;
  const resets_at_launch_t& resets_;
  const conditional_of_t& conditional_of_;
  graph_facts facts_;
  std::string why_not_;
  std::string node_why_not_;
  std::vector<CUDA_MEMCPY3D> copies_;
  std::vector<CUDA_MEMSET_NODE_PARAMS> memsets_;
  std::vector<graph_allocation> allocations_;
  std::vector<CUdeviceptr> frees_;
};

}  // namespace

std::string hex(CUdeviceptr address) {
  char text[32];
  std::snprintf(text, sizeof(text), "%#llx", static_cast<unsigned long long>(address));
  return text;
}

std::string kernel_node_name(CUfunction function, CUkernel kernel, const driver_api_t& driver) {
  const char* name = nullptr;
  if (function != nullptr && driver.func_get_name != nullptr && driver.func_get_name(&name, function) == CUDA_SUCCESS &&
      name != nullptr) {
    return name;
  }
  if (kernel != nullptr && driver.kernel_get_name != nullptr && driver.kernel_get_name(&name, kernel) == CUDA_SUCCESS &&
      name != nullptr) {
    return name;
  }
  return "(unnamed)";
}

std::shared_ptr<kernel_node_t> plan_kernel_node(const CUDA_KERNEL_NODE_PARAMS_v2& params, const driver_api_t& driver,
                                                std::string* why) {
  auto kernel = std::make_shared<kernel_node_t>();
  kernel->name = kernel_node_name(params.func, params.kern, driver);
  kernel->function = params.func != nullptr ? params.func : reinterpret_cast<CUfunction>(params.kern);
  kernel->grid[0] = params.gridDimX, kernel->grid[1] = params.gridDimY, kernel->grid[2] = params.gridDimZ;
  kernel->block[0] = params.blockDimX, kernel->block[1] = params.blockDimY, kernel->block[2] = params.blockDimZ;
  kernel->shared_bytes = params.sharedMemBytes;
  launch_t launch;
  launch.function = kernel->function;
  launch.kernel_params = params.kernelParams;
  launch.extra = params.extra;
  (void)resolve_function(launch, driver);
  kernel->loaded = launch.loaded;
  if (launch.loaded == nullptr) {
    *why = "a kernel node's function cannot be queried (" + kernel->name.substr(0, 80) + ")";
    return kernel;
  }
  copy_arguments(launch, driver);
  kernel->argument_bytes = std::move(launch.argument_bytes);
  if (!launch.argument_pointers.empty()) {
    for (void* at : launch.argument_pointers) {
      kernel->argument_offsets.push_back(static_cast<size_t>(static_cast<unsigned char*>(at) -
                                                             kernel->argument_bytes.data()));
    }
    return kernel;
  }
  if (!launch.extra_copy.empty()) {
    kernel->packed = true;
    return kernel;
  }
  // Nothing copied: right for a kernel without parameters, else its arguments would be gone by the launch.
  size_t offset = 0;
  size_t size = 0;
  const bool has_parameters = driver.func_get_param_info != nullptr
                                  ? driver.func_get_param_info(launch.loaded, 0, &offset, &size) == CUDA_SUCCESS
                                  : params.kernelParams != nullptr || params.extra != nullptr;
  if (has_parameters) {
    *why = "a kernel node's arguments could not be copied (" + kernel->name.substr(0, 80) + ")";
  }
  return kernel;
}

std::string memset_node_problem(CUdeviceptr dst, size_t pitch, unsigned element_size, size_t width, size_t height,
                                const tracked_memory_t& tracked) {
  const size_t row = width * element_size;
  const size_t bytes = height <= 1 ? row : (height - 1) * pitch + row;
  const std::string gap = untracked(tracked, dst, bytes);
  if (gap.empty()) {
    return "";
  }
  return "a memset node writes memory kreplay's snapshots of this device do not hold (" + hex(dst) + ", " +
         std::to_string(bytes) + " bytes: " + gap + ")";
}

std::string memcpy_node_problem(const CUDA_MEMCPY3D& copy, const tracked_memory_t& tracked) {
  switch (copy.dstMemoryType) {
    case CU_MEMORYTYPE_HOST: return "a memcpy node writes host memory, which no snapshot holds";
    case CU_MEMORYTYPE_ARRAY: return "a memcpy node writes a CUDA array, which no snapshot holds";
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: {
      // The whole destination box: its first byte, then rows of dstPitch and slices of dstHeight rows.
      const size_t pitch = copy.dstPitch != 0 ? copy.dstPitch : copy.WidthInBytes;
      const size_t rows = copy.dstHeight != 0 ? copy.dstHeight : copy.Height;
      const CUdeviceptr start = copy.dstDevice + copy.dstXInBytes + copy.dstY * pitch + copy.dstZ * rows * pitch;
      const size_t height = copy.Height != 0 ? copy.Height : 1;
      const size_t depth = copy.Depth != 0 ? copy.Depth : 1;
      const size_t bytes = (depth - 1) * rows * pitch + (height - 1) * pitch + copy.WidthInBytes;
      const std::string gap = untracked(tracked, start, bytes);
      if (gap.empty()) {
        return "";
      }
      return "a memcpy node writes memory kreplay's snapshots of this device do not hold (" + hex(start) + ", " +
             std::to_string(bytes) + " bytes: " + gap + ")";
    }
  }
  return "a memcpy node writes memory of an unknown type";
}

graph_facts inspect_graph(CUgraph graph, unsigned long long instantiate_flags, CUcontext context,
                          const driver_api_t& driver, const tracked_memory_t& tracked,
                          const resets_at_launch_t& resets, bool plan_nodes, const conditional_of_t& conditional_of) {
  graph_walk walk(context, driver, tracked, resets, conditional_of, plan_nodes);
  walk.visit(graph, 0);
  graph_facts facts = walk.finish();
  facts.flags = instantiate_flags;
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

void graph_registry::kernel_set(CUgraphExec exec, const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = execs_.find(exec);
  if (found != execs_.end()) {
    found->second.set_later.insert(name);
  }
}

void graph_registry::node_set(CUgraphExec exec, CUgraphNode node, const std::function<bool(planned_node&)>& change,
                              const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = execs_.find(exec);
  if (found == execs_.end() || !found->second.node_why_not.empty()) {
    return;
  }
  graph_facts& facts = found->second;
  auto planned = std::find_if(facts.plan.begin(), facts.plan.end(),
                              [node](const planned_node& p) { return p.node == node; });
  if (planned == facts.plan.end() || !change(*planned)) {
    facts.node_why_not = why + " (set after instantiation)";
  }
}

void graph_registry::node_mode_off(CUgraphExec exec, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = execs_.find(exec);
  if (found != execs_.end() && found->second.node_why_not.empty()) {
    found->second.node_why_not = why;
  }
}

void graph_registry::destroyed(CUgraphExec exec) {
  std::lock_guard<std::mutex> lock(mutex_);
  execs_.erase(exec);
}

void graph_registry::handle_created(CUgraphConditionalHandle handle, unsigned flags) {
  std::lock_guard<std::mutex> lock(mutex_);
  handles_[handle] = flags;
}

void graph_registry::conditional_added(CUgraphNode node, const CUDA_CONDITIONAL_NODE_PARAMS& params) {
  std::lock_guard<std::mutex> lock(mutex_);
  conditionals_[node] = params;
}

bool graph_registry::conditional_of(CUgraphNode node, CUDA_CONDITIONAL_NODE_PARAMS* params) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = conditionals_.find(node);
  if (found == conditionals_.end()) {
    return false;
  }
  *params = found->second;
  return true;
}

bool graph_registry::resets_at_launch(CUgraphConditionalHandle handle) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = handles_.find(handle);
  return found != handles_.end() && (found->second & CU_GRAPH_COND_ASSIGN_DEFAULT) != 0;
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
