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
//   - a conditional node (its handle can keep a value in the executable across launches, outside device memory,
//     so later passes could take other branches; its body is not read either);
//   - external semaphore or batch memory-operation nodes (they signal or wait on things outside the device
//     memory), or a node type this build does not know;
//   - flags of device launch (its kernels may launch graphs kreplay never sees), kept across updates.
// Event record and wait nodes, empty nodes and child graphs (inspected as their parent) are replayed.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_GRAPHS_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_GRAPHS_HPP

#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <cuda.h>

#include "driver.hpp"

namespace kreplay::cuda::inject {

// What an executable graph holds, as far as the replay needs to know.
struct graph_facts {
  size_t nodes = 0;                  // every node, those of child graphs included
  std::vector<std::string> kernels;  // the kernel nodes' function names, in the driver's node order ("(unnamed)"
                                     // where the driver has no name)
  std::set<std::string> set_later;   // kernels set into nodes since (cuGraphExec*SetParams): for selection only
  std::string why_not;               // empty: replayable whole; else why a whole-graph replay would be unfaithful
  unsigned long long flags = 0;      // the executable's instantiation flags (an update keeps them)
};

// Whether every byte of [start, start + bytes) lies in tracked device allocations of the launching device (memory
// kreplay's snapshots of that device hold): "" when it does, else what lies at the first byte that does not
// ("page-locked host memory at 0x...", "no allocation kreplay tracks at 0x...").
using tracked_memory_t = std::function<std::string(CUdeviceptr start, size_t bytes)>;

// Reads `graph` (and its child graphs) with the driver's graph queries. `instantiate_flags`: the flags the
// executable was instantiated with; `context`: the instantiating context. A query that fails makes the graph
// unreplayable, with the query named.
graph_facts inspect_graph(CUgraph graph, unsigned long long instantiate_flags, CUcontext context,
                          const driver_api_t& driver, const tracked_memory_t& tracked);

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

// The executable graphs of the process and their facts. Thread-safe.
class graph_registry {
 public:
  void instantiated(CUgraphExec exec, graph_facts facts);
  // A change made to one node of `exec` after instantiation that makes it unreplayable (`why` non-empty).
  void changed(CUgraphExec exec, const std::string& why);
  // A kernel set into a node of `exec` after instantiation: selection sees its name too (each name once).
  void kernel_set(CUgraphExec exec, const std::string& name);
  void destroyed(CUgraphExec exec);
  // A copy of the facts; nothing when the executable was never seen instantiated.
  std::optional<graph_facts> find(CUgraphExec exec) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<CUgraphExec, graph_facts> execs_;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_GRAPHS_HPP
