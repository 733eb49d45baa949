// CUDA graphs for --graph-profiling graph: what each executable graph holds, learnt when it is instantiated (or
// updated), and whether launching the whole graph once per pass, with kreplay's restores between, computes what
// one launch computes. A graph launch raises no launch callback for its kernels, so the replay sees only the
// cuGraphLaunch; what is inside comes from the graph the executable was made from, read with the driver's graph
// queries while that graph still exists (the program may destroy it once instantiated).
//
// Whole-graph replay is faithful when everything a launch reads and writes is device memory a snapshot holds, on
// the launching context's device. It is not, and the launch runs once with the reason, when the graph has:
//   - a host node (the program's host function would run on every pass);
//   - memory allocation or free nodes that do not pair up inside the graph (memory that outlives the launch, or
//     memory the graph frees that it did not allocate: a second pass would free it twice);
//   - a memcpy or memset node whose whole destination is not inside one tracked device allocation of the
//     launching device (or memory the graph allocates and frees itself): host, managed or a peer's memory, an
//     array, untracked memory are not captured, so a pass after the first would read what the one before wrote;
//   - a kernel node bound to another context (its writes are neither drained nor captured);
//   - a conditional node whose handle keeps its value across launches (created without
//     CU_GRAPH_COND_ASSIGN_DEFAULT, or before kreplay saw it): the value lives outside device memory, so later
//     passes could take other branches. With the default assigned at every launch, each pass starts from the same
//     value and the node is replayed with the graph; its bodies are read as child graphs are;
//   - external semaphore or batch memory-operation nodes (they signal or wait on things outside the device
//     memory), or a node type this build does not know;
//   - flags of device launch (its kernels may launch graphs kreplay never sees), kept across updates.
// Event record and wait nodes, empty nodes and child graphs (inspected as their parent) are replayed. Node mode
// never runs conditional nodes (the device decides how often their bodies run): such graphs are replayed whole.
//
// Node mode (--graph-profiling node) keeps more: every node's parameters as of instantiation (a kernel node's
// arguments copied then, since the program may destroy the graph), in an order that respects the graph's edges,
// child graphs inlined; the calls that change an executable's nodes in place (cuGraphExec*SetParams, an update
// from another graph) change this plan too. At a launch, kreplay runs the plan itself on the launch's stream,
// each selected kernel node replayed as a stream launch is, then puts back the memory as it was before the graph
// and lets the program's own launch run the graph once. Besides what stops a whole-graph replay, node mode
// cannot run a graph with allocation or free nodes (graph memory is mapped only while the graph runs), a kernel
// node whose arguments cannot be copied, or a node enabled, disabled or replaced by a child graph after
// instantiation: those are replayed in graph mode, with why. A cluster shape set on a kernel node is kept.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_GRAPHS_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_GRAPHS_HPP

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <cuda.h>

#include "driver.hpp"

namespace kreplay::cuda::inject {

// A kernel node as node mode launches it: the function and shape, and a private copy of the arguments.
struct kernel_node_t {
  std::string name;
  CUfunction function = nullptr;   // the node's function (or its CUkernel, passed as a CUfunction)
  CUfunction loaded = nullptr;     // a CUfunction of it in the instantiating context, for the queries
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  unsigned shared_bytes = 0;
  bool cooperative = false;
  unsigned cluster[3] = {0, 0, 0};            // a cluster shape set on the node (launched with cuLaunchKernelEx)
  std::vector<unsigned char> argument_bytes;  // the parameter buffer
  std::vector<size_t> argument_offsets;       // where each parameter lies in it (empty: `packed`, or none)
  bool packed = false;                        // passed as one buffer (CU_LAUNCH_PARAM_BUFFER_POINTER)
};

// One node of the plan node mode runs, in an order that respects the edges.
struct planned_node {
  CUgraphNode node = nullptr;  // its handle in the graph the executable follows (as SetParams calls name it)
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::shared_ptr<const kernel_node_t> kernel;  // kernel nodes
  CUDA_MEMCPY3D copy{};                         // memcpy nodes
  CUDA_MEMSET_NODE_PARAMS set{};                // memset nodes
  CUevent event = nullptr;                      // event record and wait nodes
};

// What an executable graph holds, as far as the replay needs to know.
struct graph_facts {
  size_t nodes = 0;                  // every node, those of child graphs included
  std::vector<std::string> kernels;  // the kernel nodes' function names, in the driver's node order ("(unnamed)"
                                     // where the driver has no name)
  std::set<std::string> set_later;   // kernels set into nodes since (cuGraphExec*SetParams): for selection only
  std::string why_not;               // empty: replayable whole; else why a whole-graph replay would be unfaithful
  unsigned long long flags = 0;      // the executable's instantiation flags (an update keeps them)
  std::vector<planned_node> plan;    // node mode: every node to run, in order (child graphs inlined)
  std::string node_why_not;          // empty: node mode can run it; else why it is replayed in graph mode
};

// A kernel node's launch as node mode makes it, from its parameters (the arguments copied now). Empty `why`
// when it can be launched later, after the graph that held it is gone.
std::shared_ptr<kernel_node_t> plan_kernel_node(const CUDA_KERNEL_NODE_PARAMS_v2& params, const driver_api_t& driver,
                                                std::string* why);

// Whether every byte of [start, start + bytes) lies in tracked device allocations of the launching device (memory
// kreplay's snapshots of that device hold): "" when it does, else what lies at the first byte that does not
// ("page-locked host memory at 0x...", "no allocation kreplay tracks at 0x...").
using tracked_memory_t = std::function<std::string(CUdeviceptr start, size_t bytes)>;

// Whether a conditional handle is set to its default at every launch (created with CU_GRAPH_COND_ASSIGN_DEFAULT,
// as kreplay saw it created).
using resets_at_launch_t = std::function<bool(CUgraphConditionalHandle handle)>;

// A conditional node's parameters as the program added it (cuGraphAddNode), for drivers whose cuGraphNodeGetParams
// cannot read them; false when kreplay did not see it added.
using conditional_of_t = std::function<bool(CUgraphNode node, CUDA_CONDITIONAL_NODE_PARAMS* params)>;

// Reads `graph` (and its child graphs) with the driver's graph queries. `instantiate_flags`: the flags the
// executable was instantiated with; `context`: the instantiating context. A query that fails makes the graph
// unreplayable, with the query named.
// `plan_nodes`: node mode may run it, so its plan is made (false: --graph-profiling graph, no plan, and
// node_why_not says so).
graph_facts inspect_graph(CUgraph graph, unsigned long long instantiate_flags, CUcontext context,
                          const driver_api_t& driver, const tracked_memory_t& tracked,
                          const resets_at_launch_t& resets = {}, bool plan_nodes = true,
                          const conditional_of_t& conditional_of = {});

// An address as "0x7f0ae2c00000", for the reasons in the report.
std::string hex(CUdeviceptr address);

// A kernel node's function name, "(unnamed)" where the driver has none.
std::string kernel_node_name(CUfunction function, CUkernel kernel, const driver_api_t& driver);

// Why a memcpy or a memset with these parameters would make a whole-graph replay unfaithful; empty when it would
// not.
std::string memcpy_node_problem(const CUDA_MEMCPY3D& copy, const tracked_memory_t& tracked);
std::string memset_node_problem(CUdeviceptr dst, size_t pitch, unsigned element_size, size_t width, size_t height,
                                const tracked_memory_t& tracked);

// A graph launch's name in the report: "graph: 9 kernels, 12 nodes (first, second, third, ...)".
std::string graph_row_name(const graph_facts& graph);

// The kernel nodes' names in the plan's order (what node mode numbers and selects).
std::vector<std::string> planned_kernel_names(const graph_facts& graph);

// The executable graphs of the process and their facts. Thread-safe.
class graph_registry {
 public:
  void instantiated(CUgraphExec exec, graph_facts facts);
  // A change made to one node of `exec` after instantiation that makes it unreplayable (`why` non-empty).
  void changed(CUgraphExec exec, const std::string& why);
  // A kernel set into a node of `exec` after instantiation: selection sees its name too (each name once).
  void kernel_set(CUgraphExec exec, const std::string& name);
  // A node of `exec` set anew in place: `change` edits its planned form (false: it could not, and node mode is
  // off for `exec` with `why`). A node the plan does not hold turns node mode off too.
  void node_set(CUgraphExec exec, CUgraphNode node, const std::function<bool(planned_node&)>& change,
                const std::string& why);
  // Something node mode cannot follow happened to `exec` (a node enabled or disabled, a child graph set).
  void node_mode_off(CUgraphExec exec, const std::string& why);
  void destroyed(CUgraphExec exec);
  // A conditional handle created (cuGraphConditionalHandleCreate) with `flags`.
  void handle_created(CUgraphConditionalHandle handle, unsigned flags);
  bool resets_at_launch(CUgraphConditionalHandle handle) const;
  // A conditional node added (cuGraphAddNode), with its handle and bodies.
  void conditional_added(CUgraphNode node, const CUDA_CONDITIONAL_NODE_PARAMS& params);
  bool conditional_of(CUgraphNode node, CUDA_CONDITIONAL_NODE_PARAMS* params) const;
  // A copy of the facts; nothing when the executable was never seen instantiated.
  std::optional<graph_facts> find(CUgraphExec exec) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<CUgraphExec, graph_facts> execs_;
  std::unordered_map<CUgraphConditionalHandle, unsigned> handles_;  // the flags each was created with
  std::unordered_map<CUgraphNode, CUDA_CONDITIONAL_NODE_PARAMS> conditionals_;  // conditional nodes added
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_GRAPHS_HPP
