// GPU-free tests of graph replay (--graph-profiling graph and node; adapters/cuda/src/inject/replay/graphs.*,
// graph_launches.cpp, graph_nodes.cpp): a fake driver whose graphs are lists of nodes over host memory (kernels as host functions,
// memsets, memcpys, event and empty nodes, child graphs, allocation and free nodes, host nodes), instantiated and
// launched through fabricated CUPTI callbacks, and kreplay itself restoring the tracked buffer between passes.
// The program's own launch of the graph (the last pass) is run by the test between ENTER and EXIT, as the driver
// would, in an order that respects the graph's edges. In node mode kreplay runs the nodes itself through the fake
// driver's launches, copies, memsets and events, which log what they ran (g_log).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "injection_fixture.hpp"
#include "replay/counters.hpp"
#include "replay/replay.hpp"
#include "replay_config.hpp"

using namespace kreplay::cuda::inject;

namespace {

const CUcontext ctx0 = fake::handle<CUcontext>(0x100);
alignas(64) int g_buffer[1024];  // the tracked device memory
int g_host_memory[16];           // host memory a memcpy node may write
alignas(64) int g_pinned[256];   // page-locked host memory the tracker knows (untracked by snapshots)

// ---- The fake graphs ------------------------------------------------------------------------------------------
struct node_t {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::function<void()> body;    // kernels, memsets, memcpys: what the node does
  CUfunction function = nullptr; // kernels
  CUgraph child = nullptr;       // child graphs
  CUDA_MEMCPY3D copy{};          // memcpys
  CUDA_MEMSET_NODE_PARAMS set{}; // memsets
  CUdeviceptr address = 0;       // allocation and free nodes
  size_t bytes = 0;
  CUevent event = nullptr;       // event nodes
  void* arguments[4] = {};       // kernels with arguments (axpb): pointers into `axpb`
  int axpb[4] = {};              // begin, end, a, b
  unsigned cluster = 0;          // kernels: a cluster width set on the node (0: none)
};
std::map<CUgraph, std::vector<CUgraphNode>> g_graphs;
std::map<CUgraphNode, node_t> g_nodes;
std::map<CUgraphExec, CUgraph> g_execs;  // what launching an executable runs (its graph, or the update's)
std::map<CUfunction, int> g_kernel_runs;
std::map<CUgraph, std::vector<std::pair<CUgraphNode, CUgraphNode>>> g_edges;  // (from, to)
std::map<CUfunction, std::function<void(void**)>> g_kernels;  // what launching a function does, given its arguments
std::map<CUgraphNode, std::array<int, 4>> g_exec_arguments;   // set into the executable since (SetParams)
std::vector<std::string> g_log;                               // what kreplay ran through the fake driver
std::map<std::string, std::vector<long>> g_inputs;            // each run of an axpb kernel: the sum it read
int g_host_node_runs = 0;
uintptr_t g_next_handle = 0x10000;

CUgraph new_graph() { return fake::handle<CUgraph>(g_next_handle++); }
void add(CUgraph graph, node_t node) {
  const auto handle = fake::handle<CUgraphNode>(g_next_handle++);
  g_nodes[handle] = std::move(node);
  g_graphs[graph].push_back(handle);
}
CUgraphNode add_kernel(CUgraph graph, CUfunction f, const char* name, std::function<void()> body) {
  fake::g_functions[f] = {nullptr, name};
  node_t node;
  node.type = CU_GRAPH_NODE_TYPE_KERNEL;
  node.function = f;
  node.body = [f, body] {
    ++g_kernel_runs[f];
    body();
  };
  g_kernels[f] = [name = std::string(name), body = node.body](void**) {
    g_log.push_back(name);
    body();
  };
  add(graph, std::move(node));
  return g_graphs[graph].back();
}

// buffer[i] = a * buffer[i] + b for i in [begin, end): a kernel whose four int arguments come from the launch (as
// the driver's parameter layout says), and each run records the sum of what it read.
void axpb(const std::string& name, const int* args) {
  long sum = 0;
  for (int i = args[0]; i < args[1]; ++i) {
    sum += g_buffer[i];
    g_buffer[i] = args[2] * g_buffer[i] + args[3];
  }
  g_inputs[name].push_back(sum);
}
CUgraphNode add_axpb(CUgraph graph, CUfunction f, const char* name, std::array<int, 4> args) {
  fake::g_functions[f] = {nullptr, name};
  const auto handle = fake::handle<CUgraphNode>(g_next_handle++);
  node_t& node = g_nodes[handle];
  node.type = CU_GRAPH_NODE_TYPE_KERNEL;
  node.function = f;
  std::copy(args.begin(), args.end(), node.axpb);
  for (int i = 0; i < 4; ++i) {
    node.arguments[i] = &node.axpb[i];
  }
  node.body = [handle, name = std::string(name)] {
    const auto set = g_exec_arguments.find(handle);
    axpb(name, set != g_exec_arguments.end() ? set->second.data() : g_nodes.at(handle).axpb);
  };
  g_kernels[f] = [name = std::string(name)](void** arguments) {
    int args[4];
    for (int i = 0; i < 4; ++i) {
      std::memcpy(&args[i], arguments[i], sizeof(int));
    }
    g_log.push_back(name + " a=" + std::to_string(args[2]));
    axpb(name, args);
  };
  g_graphs[graph].push_back(handle);
  return handle;
}
void add_edge(CUgraph graph, CUgraphNode from, CUgraphNode to) { g_edges[graph].emplace_back(from, to); }
CUgraphNode add_type(CUgraph graph, CUgraphNodeType type) {
  node_t node;
  node.type = type;
  if (type == CU_GRAPH_NODE_TYPE_HOST) {
    node.body = [] { ++g_host_node_runs; };
  }
  node.event = fake::handle<CUevent>(0xE0);
  add(graph, std::move(node));
  return g_graphs[graph].back();
}
CUgraphNode add_child_node(CUgraph graph, CUgraph child) {
  node_t node;
  node.type = CU_GRAPH_NODE_TYPE_GRAPH;
  node.child = child;
  add(graph, std::move(node));
  return g_graphs[graph].back();
}
void add_child(CUgraph graph, CUgraph child) { (void)add_child_node(graph, child); }
// `bytes` is what the node says it copies; `runs`: whether running it copies them (not for a node that claims
// more than its destination holds, which the test must never execute).
CUgraphNode add_memcpy(CUgraph graph, CUmemorytype dst_type, void* dst, const void* src, size_t bytes,
                       bool runs = true) {
  node_t node;
  node.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  node.copy.dstMemoryType = dst_type;
  node.copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  node.copy.srcDevice = reinterpret_cast<CUdeviceptr>(src);
  if (dst_type == CU_MEMORYTYPE_HOST) {
    node.copy.dstHost = dst;
  } else {
    node.copy.dstDevice = reinterpret_cast<CUdeviceptr>(dst);
  }
  node.copy.WidthInBytes = bytes;
  if (runs) {
    node.body = [dst, src, bytes] { std::memmove(dst, src, bytes); };
  }
  add(graph, std::move(node));
  return g_graphs[graph].back();
}
CUgraphNode add_memset(CUgraph graph, int* dst, size_t ints) {
  node_t node;
  node.type = CU_GRAPH_NODE_TYPE_MEMSET;
  node.set.dst = reinterpret_cast<CUdeviceptr>(dst);
  node.set.elementSize = sizeof(int);
  node.set.width = ints;
  node.set.height = 1;
  node.body = [dst, ints] { std::memset(dst, 0, ints * sizeof(int)); };
  add(graph, std::move(node));
  return g_graphs[graph].back();
}
void add_memory(CUgraph graph, CUgraphNodeType type, CUdeviceptr address, size_t bytes) {
  node_t node;
  node.type = type;
  node.address = address;
  node.bytes = bytes;
  add(graph, std::move(node));
}

// A graph's nodes in the driver's order, each after the nodes it depends on.
std::vector<CUgraphNode> in_edge_order(CUgraph graph) {
  std::vector<CUgraphNode> left = g_graphs[graph];
  std::vector<CUgraphNode> order;
  while (!left.empty()) {
    const auto ready = std::find_if(left.begin(), left.end(), [&](CUgraphNode n) {
      return std::none_of(g_edges[graph].begin(), g_edges[graph].end(), [&](const auto& e) {
        return e.second == n && std::find(order.begin(), order.end(), e.first) == order.end();
      });
    });
    order.push_back(*ready);
    left.erase(ready);
  }
  return order;
}

void run_graph(CUgraph graph) {
  for (CUgraphNode handle : in_edge_order(graph)) {
    const node_t& node = g_nodes.at(handle);
    if (node.type == CU_GRAPH_NODE_TYPE_GRAPH || node.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {  // an if, taken
      run_graph(node.child);
    } else if (node.body) {
      node.body();
    }
  }
}

// The driver's graph queries and launch, over the tables above.
CUresult graph_launch(CUgraphExec exec, CUstream) {
  run_graph(g_execs.at(exec));
  return CUDA_SUCCESS;
}
CUresult get_nodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  const std::vector<CUgraphNode>& list = g_graphs[graph];
  if (nodes != nullptr) {
    std::copy(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(std::min(*count, list.size())), nodes);
  }
  *count = list.size();
  return CUDA_SUCCESS;
}
CUresult node_type(CUgraphNode node, CUgraphNodeType* type) {
  *type = g_nodes.at(node).type;
  return CUDA_SUCCESS;
}
CUresult kernel_params(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v2* params) {
  *params = {};
  node_t& n = g_nodes.at(node);
  params->func = n.function;
  params->gridDimX = params->gridDimY = params->gridDimZ = 1;
  params->blockDimX = 128, params->blockDimY = params->blockDimZ = 1;
  params->kernelParams = n.arguments[0] != nullptr ? n.arguments : nullptr;
  return CUDA_SUCCESS;
}
CUresult get_edges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData*, size_t* count) {
  const auto& edges = g_edges[graph];
  for (size_t i = 0; from != nullptr && i < std::min(*count, edges.size()); ++i) {
    from[i] = edges[i].first;
    to[i] = edges[i].second;
  }
  *count = edges.size();
  return CUDA_SUCCESS;
}
// axpb kernels have four int parameters; the others none.
CUresult param_info(CUfunction f, size_t index, size_t* offset, size_t* size) {
  const bool has = fake::g_functions.count(f) != 0 && fake::g_functions[f].second.rfind("axpb", 0) == 0;
  if (!has || index >= 4) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *offset = index * sizeof(int);
  *size = sizeof(int);
  return CUDA_SUCCESS;
}
int g_launches = 0;        // kreplay's kernel launches (node mode's relaunches)
int g_refused_launch = 0;  // the one of them the driver refuses (its number from 1; 0: none)
CUresult launch(CUfunction f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                void** arguments, void**) {
  if (++g_launches == g_refused_launch) {
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  g_kernels.at(f)(arguments);
  return CUDA_SUCCESS;
}
CUresult attribute(CUgraphNode node, CUkernelNodeAttrID id, CUkernelNodeAttrValue* value) {
  *value = {};
  if (id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION && g_nodes.at(node).cluster != 0) {
    value->clusterDim.x = g_nodes.at(node).cluster;
    value->clusterDim.y = value->clusterDim.z = 1;
  }
  return CUDA_SUCCESS;
}
// cuLaunchKernelEx: the cluster shape it was given is logged ("cluster N").
CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** arguments, void**) {
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      g_log.push_back("cluster " + std::to_string(config->attrs[i].value.clusterDim.x));
    }
  }
  g_kernels.at(f)(arguments);
  return CUDA_SUCCESS;
}
CUresult memcpy_3d(const CUDA_MEMCPY3D* copy, CUstream) {
  g_log.push_back("memcpy");
  std::memmove(reinterpret_cast<void*>(copy->dstDevice), reinterpret_cast<const void*>(copy->srcDevice),
               copy->WidthInBytes);
  return CUDA_SUCCESS;
}
CUresult memset_32(CUdeviceptr dst, size_t, unsigned value, size_t width, size_t, CUstream) {
  g_log.push_back("memset");
  std::fill_n(reinterpret_cast<unsigned*>(dst), width, value);
  return CUDA_SUCCESS;
}
// Conditional nodes: an if whose handle is the node's `address`, its body the node's `child`.
CUresult node_params(CUgraphNode node, CUgraphNodeParams* params) {
  node_t& n = g_nodes.at(node);
  *params = {};
  params->type = n.type;
  if (n.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    params->conditional.handle = n.address;
    params->conditional.type = CU_GRAPH_COND_TYPE_IF;
    params->conditional.size = 1;
    params->conditional.phGraph_out = &n.child;
  }
  return CUDA_SUCCESS;
}
CUresult event_of(CUgraphNode node, CUevent* event) {
  *event = g_nodes.at(node).event;
  return CUDA_SUCCESS;
}
CUresult child_graph(CUgraphNode node, CUgraph* graph) {
  *graph = g_nodes.at(node).child;
  return CUDA_SUCCESS;
}
CUresult memcpy_params(CUgraphNode node, CUDA_MEMCPY3D* copy) {
  *copy = g_nodes.at(node).copy;
  return CUDA_SUCCESS;
}
CUresult memset_params(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* set) {
  *set = g_nodes.at(node).set;
  return CUDA_SUCCESS;
}
CUresult alloc_params(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  *params = {};
  params->dptr = g_nodes.at(node).address;
  params->bytesize = g_nodes.at(node).bytes;
  return CUDA_SUCCESS;
}
CUresult free_params(CUgraphNode node, CUdeviceptr* address) {
  *address = g_nodes.at(node).address;
  return CUDA_SUCCESS;
}

driver_api_t graph_driver() {
  driver_api_t d = fake::driver();
  d.ctx_synchronize = [] { return CUDA_SUCCESS; };
  d.graph_launch = graph_launch;
  d.graph_get_nodes = get_nodes;
  d.graph_node_get_type = node_type;
  d.graph_kernel_node_get_params = kernel_params;
  d.graph_child_get_graph = child_graph;
  d.graph_memcpy_node_get_params = memcpy_params;
  d.graph_memset_node_get_params = memset_params;
  d.graph_mem_alloc_node_get_params = alloc_params;
  d.graph_mem_free_node_get_params = free_params;
  // Node mode's.
  d.graph_get_edges = get_edges;
  d.func_get_param_info = param_info;
  d.launch_kernel = launch;
  d.launch_kernel_ex = launch_ex;
  d.graph_kernel_node_get_attribute = attribute;
  d.memcpy_3d_async = memcpy_3d;
  d.memset_d2d8_async = [](CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream) {
    return CUDA_ERROR_NOT_SUPPORTED;
  };
  d.memset_d2d16_async = [](CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream) {
    return CUDA_ERROR_NOT_SUPPORTED;
  };
  d.memset_d2d32_async = memset_32;
  d.graph_node_get_params = node_params;
  // The driver's view of memory kreplay does not track: the 4 KiB past g_buffer is a pool's device memory; of
  // memory it does not know it answers zeros, as the real one does.
  d.pointer_get_attributes = [](unsigned count, CUpointer_attribute* asked, void** answers, CUdeviceptr at) {
    const bool known = at == reinterpret_cast<CUdeviceptr>(&g_buffer[1024]);
    for (unsigned i = 0; i < count; ++i) {
      const uint64_t value = !known ? 0
                             : asked[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE      ? uint64_t{CU_MEMORYTYPE_DEVICE}
                             : asked[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ? at
                             : asked[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE       ? 4096
                             : asked[i] == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE   ? 1
                                                                                 : 0;
      std::memcpy(answers[i], &value, asked[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE ? 4 : 8);
    }
    return CUDA_SUCCESS;
  };
  d.graph_event_record_node_get_event = event_of;
  d.graph_event_wait_node_get_event = event_of;
  d.event_record = [](CUevent, CUstream) {
    g_log.push_back("record");
    return CUDA_SUCCESS;
  };
  d.stream_wait_event = [](CUstream, CUevent, unsigned) {
    g_log.push_back("wait");
    return CUDA_SUCCESS;
  };
  return d;
}

// ---- Fabricated callbacks -------------------------------------------------------------------------------------
CUpti_CallbackData callback_data(CUpti_ApiCallbackSite site, void* params, CUresult* result) {
  return fake::callback_data(site, params, result, ctx0, "cuGraphLaunch");
}

// The program instantiates `graph` (cuGraphInstantiateWithFlags) and gets a new executable.
CUgraphExec instantiate(replayer& r, CUgraph graph, unsigned long long flags = 0) {
  CUgraphExec exec = fake::handle<CUgraphExec>(g_next_handle++);
  g_execs[exec] = graph;
  cuGraphInstantiateWithFlags_params p{&exec, graph, flags};
  CUresult ok = CUDA_SUCCESS;
  r.on_graph_built(CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags, callback_data(CUPTI_API_EXIT, &p, &ok));
  return exec;
}

// The program updates `exec` to follow `graph` (cuGraphExecUpdate).
void update(replayer& r, CUgraphExec exec, CUgraph graph) {
  g_execs[exec] = graph;
  cuGraphExecUpdate_v2_params p{exec, graph, nullptr};
  CUresult ok = CUDA_SUCCESS;
  r.on_graph_built(CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2, callback_data(CUPTI_API_EXIT, &p, &ok));
}

// The program launches `exec`: ENTER (kreplay's passes), the launch itself (the last pass), EXIT.
void program_launch(replayer& r, CUgraphExec exec) {
  cuGraphLaunch_params p{exec, nullptr};
  CUresult ok = CUDA_SUCCESS;
  r.on_launch(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, callback_data(CUPTI_API_ENTER, &p, &ok));
  run_graph(g_execs.at(exec));
  r.on_launch(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, callback_data(CUPTI_API_EXIT, &p, &ok));
}

tracker* g_tracker = nullptr;
kreplay_device_ops_t g_ops{};

std::string csv_path() { return "/tmp/kreplay_graph_test_" + std::to_string(getpid()) + ".csv"; }

replayer make_replayer(std::map<std::string, std::string> values, std::unique_ptr<counter_source> counters = nullptr) {
  replay_config_t config;
  std::string error;
  values.emplace("KREPLAY_REPLAY", "1");
  values.emplace("KREPLAY_REPLAY_PROGRESS", "0");
  values.emplace("KREPLAY_REPLAY_PASSES", "3");
  values.emplace("KREPLAY_REPLAY_OUTPUT", csv_path());
  values.emplace("KREPLAY_REPLAY_GRAPH_PROFILING", "graph");  // node mode's tests ask for it
  auto get = [&](const char* name) -> const char* {
    auto found = values.find(name);
    return found != values.end() ? found->second.c_str() : nullptr;
  };
  CHECK(parse_replay_config(get, &config, &error));
  return replayer(*g_tracker, config, g_ops, graph_driver(), std::move(counters));
}

// A replay around `program`: started, the program's calls, finished (its report complete).
void with_replayer(const std::map<std::string, std::string>& options, const std::function<void(replayer&)>& program,
                   std::unique_ptr<counter_source> counters = nullptr) {
  replayer r = make_replayer(options, std::move(counters));
  std::string why;
  CHECK(r.start(nullptr, &why));
  program(r);
  r.finish();
}

// The report's data rows, after finish().
std::vector<std::string> report_rows() {
  std::ifstream in(csv_path());
  std::vector<std::string> rows;
  bool header = true;
  for (std::string line; std::getline(in, line); header = false) {
    if (!header) {
      std::printf("csv: %s\n", line.c_str());
      rows.push_back(line);
    }
  }
  std::remove(csv_path().c_str());
  return rows;
}

const CUfunction scale_kernel = fake::handle<CUfunction>(0xB1);
const CUfunction sum_kernel = fake::handle<CUfunction>(0xB2);

// A graph of six nodes: scale (buffer[i] = 2 buffer[i] + 1 over the first half), an event record, a memset of
// buffer[700..716), a child graph whose kernel adds buffer[1] into buffer[0], an empty node, and a device to
// device memcpy of buffer[0..8) to buffer[900..908). Each pass from anything but the same state ends elsewhere.
CUgraph training_step() {
  CUgraph graph = new_graph();
  add_kernel(graph, scale_kernel, "scale_kernel", [] {
    for (int i = 0; i < 512; ++i) {
      g_buffer[i] = 2 * g_buffer[i] + 1;
    }
  });
  add_type(graph, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  add_memset(graph, &g_buffer[700], 16);
  CUgraph child = new_graph();
  add_kernel(child, sum_kernel, "sum_kernel", [] { g_buffer[0] += g_buffer[1]; });
  add_child(graph, child);
  add_type(graph, CU_GRAPH_NODE_TYPE_EMPTY);
  add_memcpy(graph, CU_MEMORYTYPE_DEVICE, &g_buffer[900], &g_buffer[0], 8 * sizeof(int));
  return graph;
}

void fill_buffer() {
  for (int i = 0; i < 1024; ++i) {
    g_buffer[i] = i % 97;
  }
}

// What one launch of `graph` leaves in the buffer.
std::vector<int> after_one_launch(CUgraph graph) {
  fill_buffer();
  run_graph(graph);
  std::vector<int> expected(g_buffer, g_buffer + 1024);
  fill_buffer();
  return expected;
}

// ---- Tests ----------------------------------------------------------------------------------------------------

void a_graph_launch_is_one_window_and_the_program_sees_one_launch_s_result() {
  const CUgraph graph = training_step();
  const std::vector<int> expected = after_one_launch(graph);
  g_kernel_runs.clear();
  with_replayer({}, [&](replayer& r) { program_launch(r, instantiate(r, graph)); });
  CHECK(g_kernel_runs[scale_kernel] == 3 && g_kernel_runs[sum_kernel] == 3);  // every pass, the child's too
  CHECK(std::equal(expected.begin(), expected.end(), g_buffer));
  const std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 1);
  CHECK(rows[0].find("\"graph: 2 kernels, 7 nodes (scale_kernel, sum_kernel)\"") != std::string::npos);
  CHECK(rows[0].find(",3,3,") != std::string::npos);  // passes asked and run
  CHECK(rows[0].find(",1,\"\",") != std::string::npos);  // replayed, no reason
}

void the_control_without_restore_ends_elsewhere() {
  const CUgraph graph = training_step();
  const std::vector<int> expected = after_one_launch(graph);
  with_replayer({{"KREPLAY_REPLAY_RESTORE", "0"}}, [&](replayer& r) { program_launch(r, instantiate(r, graph)); });
  CHECK(!std::equal(expected.begin(), expected.end(), g_buffer));
  (void)report_rows();
  fill_buffer();
}

// Each graph runs once, and the report says why.
struct run_once_case {
  const char* what;
  std::function<CUgraph()> make;
  unsigned long long flags;
  std::string reason;
};

std::string hex(const void* pointer) {
  char text[24];
  std::snprintf(text, sizeof(text), "%#llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(pointer)));
  return text;
}

void graphs_that_cannot_be_replayed_whole_run_once_with_their_reason() {
  int scratch = 0;
  const CUdeviceptr graph_memory = 0x7000000;
  const std::vector<run_once_case> cases = {
      {"host node", [] { CUgraph g = training_step(); add_type(g, CU_GRAPH_NODE_TYPE_HOST); return g; }, 0,
       "a host node"},
      {"allocation kept", [graph_memory] { CUgraph g = training_step(); add_memory(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC, graph_memory, 4096); return g; }, 0,
       "allocates memory that outlives the launch"},
      {"foreign free", [graph_memory] { CUgraph g = training_step(); add_memory(g, CU_GRAPH_NODE_TYPE_MEM_FREE, graph_memory, 0); return g; }, 0,
       "frees memory it did not allocate"},
      {"memcpy to host", [] { CUgraph g = training_step(); add_memcpy(g, CU_MEMORYTYPE_HOST, g_host_memory, g_buffer, 64); return g; }, 0,
       "writes host memory"},
      {"memcpy to untracked", [&scratch] { CUgraph g = training_step(); add_memcpy(g, CU_MEMORYTYPE_UNIFIED, &scratch, g_buffer, sizeof(int)); return g; }, 0,
       "memcpy node writes memory kreplay's snapshots of this device do not hold (" + hex(&scratch) + ", 4 bytes: no allocation kreplay tracks at " + hex(&scratch) + "; the driver does not know it either)"},
      {"memcpy to pinned host memory", [] { CUgraph g = training_step(); add_memcpy(g, CU_MEMORYTYPE_UNIFIED, g_pinned, g_buffer, 64); return g; }, 0,
       "memcpy node writes memory kreplay's snapshots of this device do not hold (" + hex(g_pinned) + ", 64 bytes: page-locked host memory at " + hex(g_pinned) + ")"},
      {"memcpy past the buffer", [] { CUgraph g = training_step(); add_memcpy(g, CU_MEMORYTYPE_DEVICE, &g_buffer[1020], g_buffer, 64, false); return g; }, 0,
       "memcpy node writes memory kreplay's snapshots of this device do not hold (" + hex(&g_buffer[1020]) + ", 64 bytes: no allocation kreplay tracks at " + hex(&g_buffer[1024]) +
           "; to the driver: device memory of device 0, in an address range at " + hex(&g_buffer[1024]) + " of 4096 bytes, from a memory pool)"},
      {"memcpy to untracked before the kernels", [&scratch] {
         CUgraph g = new_graph();
         add_memcpy(g, CU_MEMORYTYPE_UNIFIED, &scratch, g_buffer, sizeof(int));
         add_kernel(g, scale_kernel, "scale_kernel", [] { g_buffer[0] += 1; });
         return g;
       }, 0,
       "memcpy node writes memory kreplay's snapshots of this device do not hold"},
      {"memset to untracked", [&scratch] { CUgraph g = training_step(); add_memset(g, &scratch, 1); return g; }, 0,
       "memset node writes memory"},
      {"conditional", [] { CUgraph g = training_step(); add_type(g, CU_GRAPH_NODE_TYPE_CONDITIONAL); return g; }, 0,
       "a conditional node whose handle keeps its value"},
      {"semaphore", [] { CUgraph g = training_step(); add_type(g, CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT); return g; }, 0,
       "external semaphore"},
      {"unknown node", [] { CUgraph g = training_step(); add_type(g, static_cast<CUgraphNodeType>(30)); return g; }, 0,
       "a node of type 30"},
      {"device launch", [] { return training_step(); }, CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH,
       "instantiated for device launch"},
  };
  // In both modes: node mode too says why the graph runs once, not that its (unplanned) kernels were not
  // selected.
  for (const char* mode : {"graph", "node"}) {
    for (const run_once_case& c : cases) {
      std::printf("case: %s, %s mode\n", c.what, mode);
      const CUgraph graph = c.make();
      g_kernel_runs.clear();
      g_host_node_runs = 0;
      with_replayer({{"KREPLAY_REPLAY_GRAPH_PROFILING", mode}},
                    [&](replayer& r) { program_launch(r, instantiate(r, graph, c.flags)); });
      CHECK(g_kernel_runs[scale_kernel] == 1);
      CHECK(g_host_node_runs == (std::string(c.what) == "host node" ? 1 : 0));
      const std::vector<std::string> rows = report_rows();
      CHECK(rows.size() == 1 && rows[0].find(c.reason) != std::string::npos && rows[0].find("run once") != std::string::npos);
    }
  }
  fill_buffer();
}

// Memory a graph allocates and frees within one launch holds nothing a pass can read: replayed, also with a
// memcpy into it (which kreplay does not track).
void a_graph_that_frees_what_it_allocates_is_replayed() {
  static int graph_memory[16];
  const auto address = reinterpret_cast<CUdeviceptr>(graph_memory);
  CUgraph graph = training_step();
  add_memory(graph, CU_GRAPH_NODE_TYPE_MEM_ALLOC, address, sizeof(graph_memory));
  add_memcpy(graph, CU_MEMORYTYPE_DEVICE, graph_memory, g_buffer, sizeof(graph_memory));
  add_memory(graph, CU_GRAPH_NODE_TYPE_MEM_FREE, address, 0);
  const std::vector<int> expected = after_one_launch(graph);
  g_kernel_runs.clear();
  with_replayer({}, [&](replayer& r) { program_launch(r, instantiate(r, graph)); });
  CHECK(g_kernel_runs[scale_kernel] == 3);
  CHECK(std::equal(expected.begin(), expected.end(), g_buffer));
  const std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 1 && rows[0].find(",1,\"\",") != std::string::npos);
  fill_buffer();
}

// A memcpy node may write across tracked regions that lie end to end (an allocator that maps a range in pieces):
// every byte is in a snapshot, so the graph is replayed; one byte past them and it runs once.
void a_memcpy_across_adjacent_regions_is_replayed() {
  alignas(4096) static int pieces[2][1024];
  for (const auto& piece : pieces) {
    g_tracker->allocated(ctx0, reinterpret_cast<uint64_t>(piece), sizeof(piece), memory_kind::device);
  }
  for (const size_t ints : {size_t{64}, sizeof(pieces) / sizeof(int) - 1000 + 1}) {
    CUgraph graph = training_step();
    add_memcpy(graph, CU_MEMORYTYPE_DEVICE, &pieces[0][1000], g_buffer, ints * sizeof(int), ints == 64);
    with_replayer({}, [&](replayer& r) { program_launch(r, instantiate(r, graph)); });
    const std::vector<std::string> rows = report_rows();
    const bool within = ints == 64;
    std::printf("memcpy of %zu ints from pieces[0][1000]: %s\n", ints, within ? "replayed" : "runs once");
    CHECK(rows.size() == 1);
    CHECK(within ? rows[0].find(",1,\"\",") != std::string::npos
                 : rows[0].find("memcpy node writes memory kreplay's snapshots") != std::string::npos);
    fill_buffer();
  }
  for (const auto& piece : pieces) {
    g_tracker->freeing(reinterpret_cast<uint64_t>(piece));
  }
}

// An executable updated in place follows its new graph: its new kernels are replayed and named, and an update to a
// graph that cannot be replayed whole makes its launches run once.
void an_updated_executable_is_judged_by_its_new_graph() {
  const CUfunction other = fake::handle<CUfunction>(0xB3);
  CUgraph replacement = new_graph();
  add_kernel(replacement, other, "other_kernel", [] { g_buffer[5] = g_buffer[5] * 3 + 2; });
  CUgraph with_host = training_step();
  add_type(with_host, CU_GRAPH_NODE_TYPE_HOST);
  const std::vector<int> expected = after_one_launch(replacement);
  g_kernel_runs.clear();
  g_host_node_runs = 0;
  with_replayer({}, [&](replayer& r) {
    const CUgraphExec exec = instantiate(r, training_step());
    update(r, exec, replacement);
    program_launch(r, exec);
    CHECK(std::equal(expected.begin(), expected.end(), g_buffer));
    update(r, exec, with_host);
    program_launch(r, exec);
  });
  CHECK(g_kernel_runs[other] == 3 && g_kernel_runs[scale_kernel] == 1 && g_host_node_runs == 1);
  const std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 2);
  CHECK(rows[0].find("graph: 1 kernels, 1 nodes (other_kernel)") != std::string::npos &&
        rows[0].find(",1,\"\",") != std::string::npos);
  CHECK(rows[1].find("a host node") != std::string::npos);
  fill_buffer();
}

// A kernel the driver names nothing could be one the exclusion list names: with a list, its graph runs once; with
// `--exclude ''` (no list) it is replayed.
void a_graph_with_an_unnamed_kernel_is_excluded_while_there_is_a_list() {
  const CUfunction nameless = fake::handle<CUfunction>(0xB5);
  CUgraph graph = training_step();
  node_t node;
  node.type = CU_GRAPH_NODE_TYPE_KERNEL;
  node.function = nameless;  // not in fake::g_functions: cuFuncGetName fails
  add(graph, std::move(node));
  for (const bool with_list : {true, false}) {
    g_kernel_runs.clear();
    std::map<std::string, std::string> options;
    if (!with_list) {
      options["KREPLAY_REPLAY_EXCLUDE"] = "";
    }
    with_replayer(options, [&](replayer& r) { program_launch(r, instantiate(r, graph)); });
    CHECK(g_kernel_runs[scale_kernel] == (with_list ? 1 : 3));
    const std::vector<std::string> rows = report_rows();
    CHECK(rows.size() == 1 && rows[0].find("(unnamed)") != std::string::npos);
    CHECK((rows[0].find("excluded") != std::string::npos) == with_list);
  }
  fill_buffer();
}

// A callback of the program's, at its exit, with its parameters.
template <typename Params>
void program_call(replayer& r, CUpti_CallbackId cbid, Params params) {
  CUresult ok = CUDA_SUCCESS;
  r.on_graph_built(cbid, callback_data(CUPTI_API_EXIT, &params, &ok));
}

// What the program does to an executable after instantiating it is followed: an update keeps the device-launch
// flag, a memcpy or a child graph set anew is checked again, a kernel set into a node is seen by the exclusion
// list, and a destroyed executable is forgotten.
void changes_to_an_executable_after_instantiation_are_followed() {
  const CUfunction nccl = fake::handle<CUfunction>(0xB4);
  fake::g_functions[nccl] = {nullptr, "ncclDevKernel_AllReduce"};
  struct change_case {
    const char* what;
    unsigned long long flags;
    std::function<void(replayer&, CUgraphExec)> change;
    const char* reason;
  };
  const std::vector<change_case> cases = {
      {"update of a device-launch executable", CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH,
       [](replayer& r, CUgraphExec exec) { update(r, exec, training_step()); }, "instantiated for device launch"},
      {"memcpy set to host memory", 0,
       [](replayer& r, CUgraphExec exec) {
         CUDA_MEMCPY3D copy{};
         copy.dstMemoryType = CU_MEMORYTYPE_HOST;
         copy.dstHost = g_host_memory;
         copy.WidthInBytes = 16;
         program_call(r, CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemcpyNodeSetParams,
                      cuGraphExecMemcpyNodeSetParams_params{exec, nullptr, &copy, ctx0});
       },
       "writes host memory"},
      {"child graph set to one with a host node", 0,
       [](replayer& r, CUgraphExec exec) {
         CUgraph child = new_graph();
         add_type(child, CU_GRAPH_NODE_TYPE_HOST);
         CUgraphNodeParams node{};
         node.type = CU_GRAPH_NODE_TYPE_GRAPH;
         node.graph.graph = child;
         program_call(r, CUPTI_DRIVER_TRACE_CBID_cuGraphExecNodeSetParams,
                      cuGraphExecNodeSetParams_params{exec, nullptr, &node});
       },
       "a host node"},
      {"kernel set to a communication kernel", 0,
       [nccl](replayer& r, CUgraphExec exec) {
         CUDA_KERNEL_NODE_PARAMS_v2 kernel{};
         kernel.func = nccl;
         program_call(r, CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams_v2,
                      cuGraphExecKernelNodeSetParams_v2_params{exec, nullptr, &kernel});
       },
       "excluded"},
      {"an update of an executable never seen instantiated", 0,
       [](replayer& r, CUgraphExec exec) {
         program_call(r, CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy, cuGraphExecDestroy_params{exec});
         update(r, exec, training_step());
       },
       "not seen instantiated"},
      {"destroyed", 0,
       [](replayer& r, CUgraphExec exec) {
         program_call(r, CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy, cuGraphExecDestroy_params{exec});
       },
       "not seen instantiated"},
  };
  for (const change_case& c : cases) {
    std::printf("case: %s\n", c.what);
    g_kernel_runs.clear();
    with_replayer({}, [&](replayer& r) {
      const CUgraphExec exec = instantiate(r, training_step(), c.flags);
      c.change(r, exec);
      program_launch(r, exec);
    });
    CHECK(g_kernel_runs[scale_kernel] == 1);
    const std::vector<std::string> rows = report_rows();
    CHECK(rows.size() == 1 && rows[0].find(c.reason) != std::string::npos && rows[0].find("run once") != std::string::npos);
  }
  // The control: the same executable, its kernel set again and again to one it already has (a program updating
  // arguments per step), is replayed, and named as instantiated.
  g_kernel_runs.clear();
  with_replayer({}, [&](replayer& r) {
    const CUgraphExec exec = instantiate(r, training_step());
    CUDA_KERNEL_NODE_PARAMS_v2 kernel{};
    kernel.func = sum_kernel;
    for (int i = 0; i < 1000; ++i) {
      program_call(r, CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams_v2,
                   cuGraphExecKernelNodeSetParams_v2_params{exec, nullptr, &kernel});
    }
    program_launch(r, exec);
  });
  CHECK(g_kernel_runs[scale_kernel] == 3);
  const std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 1 && rows[0].find("graph: 2 kernels, 7 nodes") != std::string::npos);
  fill_buffer();
}

// Selection treats a graph launch as one launch, by its kernels' names; an executable never seen instantiated,
// and every graph with --graph-profiling off, run once.
void selection_and_the_off_switch_apply_to_graph_launches() {
  const CUgraph graph = training_step();
  struct selection_case {
    std::map<std::string, std::string> options;
    bool instantiated;
    int scale_runs;
    const char* reason;
  };
  const std::vector<selection_case> cases = {
      {{{"KREPLAY_REPLAY_KERNEL_NAME", "sum_k"}}, true, 3, ",1,\"\","},  // replayed, no reason
      {{{"KREPLAY_REPLAY_KERNEL_NAME", "nothing_here"}}, true, 1, "not selected"},
      {{{"KREPLAY_REPLAY_EXCLUDE", "sum"}}, true, 1, "excluded"},
      {{{"KREPLAY_REPLAY_GRAPH_PROFILING", "off"}}, true, 1, "--graph-profiling off"},
      {{}, false, 1, "not seen instantiated"},
  };
  for (const selection_case& c : cases) {
    g_kernel_runs.clear();
    with_replayer(c.options, [&](replayer& r) {
      CUgraphExec exec = instantiate(r, graph);
      if (!c.instantiated) {
        exec = fake::handle<CUgraphExec>(g_next_handle++);
        g_execs[exec] = graph;
      }
      program_launch(r, exec);
    });
    CHECK(g_kernel_runs[scale_kernel] == c.scale_runs);
    const std::vector<std::string> rows = report_rows();
    CHECK(rows.size() == 1 && rows[0].find(c.reason) != std::string::npos);
  }
  fill_buffer();
}

// ---- Node mode ------------------------------------------------------------------------------------------------

const CUfunction axpb_scale = fake::handle<CUfunction>(0xC1);
const CUfunction axpb_shift = fake::handle<CUfunction>(0xC2);
const std::map<std::string, std::string> node_mode = {{"KREPLAY_REPLAY_GRAPH_PROFILING", "node"}};

// A step whose driver order is not a valid order: the copy of buffer[0..8) into buffer[900..) is listed first but
// depends on the scale kernel; then an event record, a memset, a child graph with a second axpb kernel (it reads
// what the scale kernel wrote) and the old child kernel, an empty node. `scale_node`: the scale kernel's node.
CUgraph node_step(CUgraphNode* scale_node) {
  CUgraph graph = new_graph();
  const CUgraphNode copy = add_memcpy(graph, CU_MEMORYTYPE_DEVICE, &g_buffer[900], &g_buffer[0], 8 * sizeof(int));
  const CUgraphNode scale = add_axpb(graph, axpb_scale, "axpb_scale", {0, 512, 2, 1});
  const CUgraphNode record = add_type(graph, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  add_memset(graph, &g_buffer[700], 16);
  CUgraph child = new_graph();
  add_axpb(child, axpb_shift, "axpb_shift", {256, 768, 1, 5});
  add_kernel(child, sum_kernel, "sum_kernel", [] { g_buffer[0] += g_buffer[1]; });
  const CUgraphNode inner = add_child_node(graph, child);
  add_type(graph, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
  add_edge(graph, scale, copy);
  add_edge(graph, copy, record);
  add_edge(graph, scale, inner);
  *scale_node = scale;
  return graph;
}

size_t first(const std::string& what) {
  return static_cast<size_t>(std::find(g_log.begin(), g_log.end(), what) - g_log.begin());
}
size_t last(const std::string& what) {
  const auto found = std::find(g_log.rbegin(), g_log.rend(), what);
  return found == g_log.rend() ? g_log.size() : static_cast<size_t>(g_log.rend() - found - 1);
}
bool all_equal(const std::vector<long>& values) {
  return !values.empty() && std::all_of(values.begin(), values.end(), [&](long v) { return v == values[0]; });
}
void clear_runs() {
  g_log.clear();
  g_inputs.clear();
  g_kernel_runs.clear();
  g_exec_arguments.clear();
}

// The program sets the axpb_scale kernel with `arguments` into `node` of `exec` (cuGraphExecKernelNodeSetParams).
void set_scale_arguments(replayer& r, CUgraphExec exec, CUgraphNode node, int (&arguments)[4]) {
  void* pointers[4] = {&arguments[0], &arguments[1], &arguments[2], &arguments[3]};
  CUDA_KERNEL_NODE_PARAMS_v2 set{};
  set.func = axpb_scale;
  set.gridDimX = set.gridDimY = set.gridDimZ = 1;
  set.blockDimX = 128, set.blockDimY = set.blockDimZ = 1;
  set.kernelParams = pointers;
  cuGraphExecKernelNodeSetParams_v2_params p{exec, node, &set};
  CUresult ok = CUDA_SUCCESS;
  r.on_graph_built(CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams_v2, callback_data(CUPTI_API_EXIT, &p, &ok));
}

void node_mode_replays_each_kernel_node_in_edge_order_and_the_program_sees_the_graph_s_result() {
  CUgraphNode scale = nullptr;
  const CUgraph graph = node_step(&scale);
  const std::vector<int> expected = after_one_launch(graph);
  clear_runs();
  with_replayer(node_mode, [&](replayer& r) { program_launch(r, instantiate(r, graph)); });
  CHECK(std::equal(expected.begin(), expected.end(), g_buffer));
  // Each kernel node three times by kreplay, then once in the program's launch of the graph.
  CHECK(g_inputs["axpb_scale"].size() == 4 && g_inputs["axpb_shift"].size() == 4 && g_kernel_runs[sum_kernel] == 4);
  // Every pass of a node read what the graph's own run of it read: the nodes before it ran once, in order.
  CHECK(all_equal(g_inputs["axpb_scale"]) && all_equal(g_inputs["axpb_shift"]));
  // The copy after the scale kernel's last pass, the event record after the copy, the child after the scale.
  CHECK(first("memcpy") > last("axpb_scale a=2") && first("record") > first("memcpy"));
  CHECK(first("axpb_shift a=1") > last("axpb_scale a=2") && first("memset") < g_log.size());
  CHECK(first("wait") < g_log.size());
  const std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 4);  // the three kernel nodes, then the graph launch
  CHECK(rows[0].find("\"axpb_scale\"") != std::string::npos && rows[0].find(",3,3,") != std::string::npos);
  CHECK(rows[0].find(",1,\"\",") != std::string::npos);          // replayed, no reason
  CHECK(rows[0].find(",\"node\",0,0") != std::string::npos);     // graph launch 0, kernel node 0
  CHECK(rows[1].find("\"axpb_shift\"") != std::string::npos && rows[1].find(",\"node\",0,1") != std::string::npos);
  CHECK(rows[2].find("\"sum_kernel\"") != std::string::npos && rows[2].find(",\"node\",0,2") != std::string::npos);
  CHECK(rows[3].rfind("0,\"graph: 3 kernels", 0) == 0 && rows[3].find(",\"node\",0,") != std::string::npos);
  CHECK(rows[3].find(",1,1,") != std::string::npos);  // the program's launch of the graph: one pass
  fill_buffer();
}

// A counter source that needs `passes` passes and records its sessions' calls, in order.
class recording_source final : public counter_source {
 public:
  explicit recording_source(std::vector<std::string>* calls, uint32_t passes = 1) : calls_(calls), passes_(passes) {}
  const std::vector<std::string>& metrics() const override { return metrics_; }
  std::unique_ptr<counter_session> open(CUcontext, uint32_t* passes, std::string*) override {
    *passes = passes_;
    return std::make_unique<session>(calls_);
  }

 private:
  class session final : public counter_session {
   public:
    explicit session(std::vector<std::string>* calls) : calls_(calls) {}
    bool configure(std::string*) override { return said("configure"); }
    bool begin_pass(std::string*) override { return said("begin_pass"); }
    bool end_pass(std::string*) override { return said("end_pass"); }
    bool begin_range(std::string*) override { return said("begin_range"); }
    bool end_range(std::string*) override { return said("end_range"); }
    bool collect(std::vector<double>* values, std::string*) override {
      *values = {1.0};
      return said("collect");
    }

   private:
    bool said(const char* call) {
      calls_->push_back(call);
      return true;
    }
    std::vector<std::string>* calls_;
  };
  std::vector<std::string>* calls_;
  uint32_t passes_;
  std::vector<std::string> metrics_ = {"smsp__inst_executed.sum"};
};

// Kernel nodes are counted in node mode as stream launches are: each relaunch of a counted pass is also a range of
// its own (begin_range / end_range inside begin_pass / end_pass), which a user-range source (range mode's) needs.
void kernel_nodes_are_counted_each_relaunch_a_range_of_its_own() {
  CUgraphNode scale = nullptr;
  const CUgraph graph = node_step(&scale);
  clear_runs();
  std::vector<std::string> calls;
  std::map<std::string, std::string> options = node_mode;
  options["KREPLAY_REPLAY_CACHE_CONTROL"] = "none";
  with_replayer(
      options, [&](replayer& r) { program_launch(r, instantiate(r, graph)); },
      std::make_unique<recording_source>(&calls));
  const std::vector<std::string> one_node = {"configure", "begin_pass", "begin_range", "end_range", "end_pass",
                                             "collect"};
  std::vector<std::string> expected;
  for (int node = 0; node < 3; ++node) {
    expected.insert(expected.end(), one_node.begin(), one_node.end());
  }
  CHECK(calls == expected);
  std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 4 && rows[0].find(",\"\",1") != std::string::npos);  // the first node counted
  // A source that needs the node's three passes: its last relaunch, whose memory the next nodes read, counted too.
  const std::vector<int> after = after_one_launch(graph);
  fill_buffer();
  clear_runs();
  calls.clear();
  with_replayer(
      options, [&](replayer& r) { program_launch(r, instantiate(r, graph)); },
      std::make_unique<recording_source>(&calls, 3));
  const std::vector<std::string> pass = {"begin_pass", "begin_range", "end_range", "end_pass"};
  expected.clear();
  for (int node = 0; node < 3; ++node) {
    expected.push_back("configure");
    for (int i = 0; i < 3; ++i) {
      expected.insert(expected.end(), pass.begin(), pass.end());
    }
    expected.push_back("collect");
  }
  CHECK(calls == expected);
  CHECK(std::equal(after.begin(), after.end(), g_buffer));
  rows = report_rows();
  for (size_t node = 0; node < 3; ++node) {
    CHECK(rows.size() == 4 && rows[node].find(",3,3,") != std::string::npos);  // three passes asked and run
    CHECK(rows.size() == 4 && rows[node].find(",\"\",1") != std::string::npos);
  }
  fill_buffer();
}

// One launch of node_step's graph in node mode, counted by a source that needs three passes, with kreplay's launch
// number `refused` refused by the driver. The source's calls go to `calls`; true when the program's own launch
// left the graph's exact result.
bool node_step_with_a_refused_launch(int refused, std::vector<std::string>* calls) {
  CUgraphNode scale = nullptr;
  const CUgraph graph = node_step(&scale);
  const std::vector<int> after = after_one_launch(graph);
  fill_buffer();
  clear_runs();
  std::map<std::string, std::string> options = node_mode;
  options["KREPLAY_REPLAY_CACHE_CONTROL"] = "none";
  g_launches = 0;
  g_refused_launch = refused;
  with_replayer(
      options, [&](replayer& r) { program_launch(r, instantiate(r, graph)); },
      std::make_unique<recording_source>(calls, 3));
  g_refused_launch = 0;
  const bool exact = std::equal(after.begin(), after.end(), g_buffer);
  fill_buffer();
  return exact;
}

// A kernel node's last pass refused by the driver while counted: the pass is ended, its values dropped, the node
// not replayed and the rest of the graph not run by kreplay; the memory before the graph is put back, so the
// program's own launch of the graph computes exactly what it would without kreplay.
void a_kernel_node_s_counted_last_pass_that_fails_drops_its_values() {
  std::vector<std::string> calls;
  CHECK(node_step_with_a_refused_launch(3, &calls));  // the first kernel node's third pass
  std::vector<std::string> expected = {"configure"};
  for (int i = 0; i < 3; ++i) {
    expected.insert(expected.end(), {"begin_pass", "begin_range", "end_range", "end_pass"});
  }
  CHECK(calls == expected);  // no collect, and nothing for the nodes after it
  CHECK(g_launches == 3);
  const std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 2);
  CHECK(rows.size() == 2 && rows[0].find("\"node mode: the kernel node's launch failed\"") != std::string::npos);
  CHECK(rows.size() == 2 && rows[0].find(",3,2,") != std::string::npos);     // asked 3, two ran
  CHECK(rows.size() == 2 && rows[0].find(",0,\"node mode") != std::string::npos);  // not replayed
  CHECK(rows.size() == 2 && rows[0].find("\"stopped: pass 3 did not run\"") != std::string::npos);
  CHECK(rows.size() == 2 && rows[1].find("failed, the rest not run") != std::string::npos);
}

// A kernel node's middle pass refused: the counting stops, the memory before the node comes back, and its last pass
// runs from there, so the nodes after it read what the graph computes; the row gives the two passes that ran.
void a_kernel_node_s_refused_middle_pass_leaves_the_graph_exact() {
  std::vector<std::string> calls;
  CHECK(node_step_with_a_refused_launch(2, &calls));  // the first kernel node's second pass
  CHECK(g_launches == 3 + 3 + 3);  // every node's three passes were tried
  CHECK(std::count(calls.begin(), calls.end(), "collect") == 2);  // the two nodes after it counted
  const std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 4);
  CHECK(rows.size() == 4 && rows[0].find("\"relaunch failed: pass 2") != std::string::npos);
  CHECK(rows.size() == 4 && rows[0].find(",3,2,") != std::string::npos);  // asked 3, two ran
  CHECK(rows.size() == 4 && rows[0].find("\"stopped: pass 2 did not run\"") != std::string::npos);
  CHECK(rows.size() == 4 && rows[1].find(",3,3,") != std::string::npos && rows[2].find(",3,3,") != std::string::npos);
}

// A kernel node with a cluster shape set on it is relaunched with cuLaunchKernelEx and that shape.
void a_kernel_node_s_cluster_shape_is_kept() {
  CUgraphNode scale = nullptr;
  const CUgraph graph = node_step(&scale);
  g_nodes.at(scale).cluster = 2;
  const std::vector<int> expected = after_one_launch(graph);
  clear_runs();
  with_replayer(node_mode, [&](replayer& r) { program_launch(r, instantiate(r, graph)); });
  CHECK(std::equal(expected.begin(), expected.end(), g_buffer));
  CHECK(std::count(g_log.begin(), g_log.end(), "cluster 2") == 3);  // each of the node's three passes
  CHECK(all_equal(g_inputs["axpb_scale"]) && g_inputs["axpb_scale"].size() == 4);
  const std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 4 && rows[0].find(",\"node\",0,0") != std::string::npos);
  g_nodes.at(scale).cluster = 0;
  fill_buffer();
}

void node_mode_without_restores_differs() {
  CUgraphNode scale = nullptr;
  const CUgraph graph = node_step(&scale);
  const std::vector<int> expected = after_one_launch(graph);
  clear_runs();
  with_replayer({{"KREPLAY_REPLAY_GRAPH_PROFILING", "node"}, {"KREPLAY_REPLAY_RESTORE", "0"}},
                [&](replayer& r) { program_launch(r, instantiate(r, graph)); });
  CHECK(!all_equal(g_inputs["axpb_scale"]));
  CHECK(!std::equal(expected.begin(), expected.end(), g_buffer));
  (void)report_rows();
  fill_buffer();
}

void node_mode_follows_kernel_arguments_set_into_the_executable() {
  CUgraphNode scale = nullptr;
  const CUgraph graph = node_step(&scale);
  g_exec_arguments[scale] = {0, 512, 3, 1};  // what the executable runs once the program has set it
  const std::vector<int> expected = after_one_launch(graph);
  clear_runs();
  with_replayer(node_mode, [&](replayer& r) {
    const CUgraphExec exec = instantiate(r, graph);
    int arguments[4] = {0, 512, 3, 1};
    set_scale_arguments(r, exec, scale, arguments);
    arguments[2] = 99;  // the program's copy is its own again: kreplay copied the arguments
    g_exec_arguments[scale] = {0, 512, 3, 1};
    program_launch(r, exec);
  });
  CHECK(std::equal(expected.begin(), expected.end(), g_buffer));
  CHECK(first("axpb_scale a=3") < g_log.size() && first("axpb_scale a=2") == g_log.size());
  CHECK(all_equal(g_inputs["axpb_shift"]));
  (void)report_rows();
  fill_buffer();
}

// An update from another graph of the same shape, then a kernel node set by the handle of the graph the executable
// was instantiated from (the executable's nodes keep that identity): node mode runs the update's nodes with the
// arguments set last.
void node_mode_follows_an_update_and_later_sets_by_the_first_graph_s_nodes() {
  CUgraphNode instantiated_scale = nullptr;
  CUgraphNode update_scale = nullptr;
  const CUgraph instantiated = node_step(&instantiated_scale);
  const CUgraph update_graph = node_step(&update_scale);
  g_nodes.at(update_scale).axpb[2] = 4;
  g_exec_arguments[update_scale] = {0, 512, 5, 1};  // what the driver runs after the set
  const std::vector<int> expected = after_one_launch(update_graph);
  clear_runs();
  with_replayer(node_mode, [&](replayer& r) {
    const CUgraphExec exec = instantiate(r, instantiated);
    update(r, exec, update_graph);
    int arguments[4] = {0, 512, 5, 1};
    set_scale_arguments(r, exec, instantiated_scale, arguments);
    g_exec_arguments[update_scale] = {0, 512, 5, 1};
    program_launch(r, exec);
  });
  CHECK(std::equal(expected.begin(), expected.end(), g_buffer));
  CHECK(first("axpb_scale a=5") < g_log.size() && first("axpb_scale a=4") == g_log.size());
  const std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 4 && rows[3].find(",\"node\",0,") != std::string::npos);
  fill_buffer();
}

void what_node_mode_cannot_run_is_replayed_whole_with_its_reason() {
  // Allocation and free nodes that pair up: fine whole, not node by node.
  CUgraph graph = new_graph();
  add_memory(graph, CU_GRAPH_NODE_TYPE_MEM_ALLOC, 0x5000, 64);
  add_axpb(graph, axpb_scale, "axpb_scale", {0, 64, 2, 1});
  add_memory(graph, CU_GRAPH_NODE_TYPE_MEM_FREE, 0x5000, 64);
  clear_runs();
  with_replayer(node_mode, [&](replayer& r) { program_launch(r, instantiate(r, graph)); });
  std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 1 && rows[0].find("\"graph: allocation or free nodes") != std::string::npos);
  CHECK(rows[0].find(",3,3,") != std::string::npos && g_inputs["axpb_scale"].size() == 3);
  CHECK(all_equal(g_inputs["axpb_scale"]));
  fill_buffer();
  // A node enabled or disabled after instantiation.
  CUgraphNode scale = nullptr;
  graph = node_step(&scale);
  clear_runs();
  with_replayer(node_mode, [&](replayer& r) {
    const CUgraphExec exec = instantiate(r, graph);
    cuGraphNodeSetEnabled_params p{exec, scale, 1};
    CUresult ok = CUDA_SUCCESS;
    r.on_graph_built(CUPTI_DRIVER_TRACE_CBID_cuGraphNodeSetEnabled, callback_data(CUPTI_API_EXIT, &p, &ok));
    program_launch(r, exec);
  });
  rows = report_rows();
  CHECK(rows.size() == 1 && rows[0].find("\"graph: a node was enabled or disabled") != std::string::npos);
  fill_buffer();
}

// The program creates a conditional handle (cuGraphConditionalHandleCreate) with `flags`.
CUgraphConditionalHandle create_handle(replayer& r, unsigned flags) {
  static CUgraphConditionalHandle next = 0x77;
  CUgraphConditionalHandle handle = next++;
  cuGraphConditionalHandleCreate_params p{&handle, nullptr, ctx0, 1, flags};
  CUresult ok = CUDA_SUCCESS;
  r.on_graph_built(CUPTI_DRIVER_TRACE_CBID_cuGraphConditionalHandleCreate, callback_data(CUPTI_API_EXIT, &p, &ok));
  return handle;
}

// A step whose scale kernel runs inside a conditional node's body.
CUgraph conditional_step(CUgraphConditionalHandle handle) {
  CUgraph graph = new_graph();
  CUgraph body = new_graph();
  add_axpb(body, axpb_scale, "axpb_scale", {0, 512, 2, 1});
  node_t node;
  node.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  node.child = body;
  node.address = handle;
  add(graph, std::move(node));
  add_kernel(graph, sum_kernel, "sum_kernel", [] { g_buffer[0] += g_buffer[1]; });
  return graph;
}

void a_conditional_node_is_replayed_whole_when_its_handle_resets_at_every_launch() {
  for (const unsigned flags : {0U, static_cast<unsigned>(CU_GRAPH_COND_ASSIGN_DEFAULT)}) {
    clear_runs();
    std::vector<int> expected;
    with_replayer(node_mode, [&](replayer& r) {
      const CUgraph graph = conditional_step(create_handle(r, flags));
      expected = after_one_launch(graph);
      g_inputs.clear();
      program_launch(r, instantiate(r, graph));
    });
    CHECK(std::equal(expected.begin(), expected.end(), g_buffer));
    const std::vector<std::string> rows = report_rows();
    CHECK(rows.size() == 1);
    if (flags == 0) {  // the handle could keep a value from the pass before: run once
      CHECK(rows[0].find("keeps its value across launches") != std::string::npos);
      CHECK(g_inputs["axpb_scale"].size() == 1);
    } else {  // whole, three passes from the same memory; node mode says why not
      CHECK(rows[0].find(",3,3,") != std::string::npos);
      CHECK(rows[0].find("\"graph: a conditional node (the device decides") != std::string::npos);
      CHECK(g_inputs["axpb_scale"].size() == 3 && all_equal(g_inputs["axpb_scale"]));
    }
    fill_buffer();
  }
}

void selection_numbers_kernel_nodes_as_launches_in_node_mode() {
  CUgraphNode scale = nullptr;
  const CUgraph graph = node_step(&scale);
  const std::vector<int> expected = after_one_launch(graph);
  clear_runs();
  std::map<std::string, std::string> options = node_mode;
  options["KREPLAY_REPLAY_KERNEL_NAME"] = "axpb";
  options["KREPLAY_REPLAY_LAUNCH_SKIP"] = "1";
  with_replayer(options, [&](replayer& r) { program_launch(r, instantiate(r, graph)); });
  CHECK(std::equal(expected.begin(), expected.end(), g_buffer));
  // axpb_scale is the first match (skipped: run once), axpb_shift the second (replayed), sum_kernel no match.
  CHECK(g_inputs["axpb_scale"].size() == 2 && g_inputs["axpb_shift"].size() == 4 && g_kernel_runs[sum_kernel] == 2);
  const std::vector<std::string> rows = report_rows();
  CHECK(rows.size() == 4 && rows[0].find("not selected: within --launch-skip") != std::string::npos);
  CHECK(rows[2].find("not selected: the name does not match") != std::string::npos);
  fill_buffer();
}

}  // namespace

int main() {
  static tracker owner(fake::driver());
  g_tracker = &owner;
  fake::set_up_injection(owner, &g_ops, ctx0, g_buffer, sizeof(g_buffer));
  owner.allocated(ctx0, reinterpret_cast<uint64_t>(g_pinned), sizeof(g_pinned), memory_kind::host_pinned);
  fill_buffer();

  RUN_TEST(a_graph_launch_is_one_window_and_the_program_sees_one_launch_s_result);
  RUN_TEST(the_control_without_restore_ends_elsewhere);
  RUN_TEST(graphs_that_cannot_be_replayed_whole_run_once_with_their_reason);
  RUN_TEST(a_graph_that_frees_what_it_allocates_is_replayed);
  RUN_TEST(a_memcpy_across_adjacent_regions_is_replayed);
  RUN_TEST(an_updated_executable_is_judged_by_its_new_graph);
  RUN_TEST(selection_and_the_off_switch_apply_to_graph_launches);
  RUN_TEST(changes_to_an_executable_after_instantiation_are_followed);
  RUN_TEST(a_graph_with_an_unnamed_kernel_is_excluded_while_there_is_a_list);
  RUN_TEST(node_mode_replays_each_kernel_node_in_edge_order_and_the_program_sees_the_graph_s_result);
  RUN_TEST(kernel_nodes_are_counted_each_relaunch_a_range_of_its_own);
  RUN_TEST(a_kernel_node_s_counted_last_pass_that_fails_drops_its_values);
  RUN_TEST(a_kernel_node_s_refused_middle_pass_leaves_the_graph_exact);
  RUN_TEST(node_mode_without_restores_differs);
  RUN_TEST(a_kernel_node_s_cluster_shape_is_kept);
  RUN_TEST(node_mode_follows_kernel_arguments_set_into_the_executable);
  RUN_TEST(node_mode_follows_an_update_and_later_sets_by_the_first_graph_s_nodes);
  RUN_TEST(what_node_mode_cannot_run_is_replayed_whole_with_its_reason);
  RUN_TEST(selection_numbers_kernel_nodes_as_launches_in_node_mode);
  RUN_TEST(a_conditional_node_is_replayed_whole_when_its_handle_resets_at_every_launch);
  return 0;
}
