// CUDA graphs for --graph-profiling graph: what each executable graph holds, learnt when it is instantiated (or
// updated), and whether launching the whole graph once per pass, with kreplay's restores between, computes what
// one launch computes. A graph launch raises no launch callback for its kernels, so the replay sees only the
// cuGraphLaunch; what is inside comes from the graph the executable was made from, read with the driver's graph
// queries while that graph still exists (the program may destroy it once instantiated).
//
// Whole-graph replay is faithful when everything a launch reads and writes is device memory a snapshot holds. It
// is not, and the launch runs once with the reason, when the graph has:
//   - a host node (the program's host function would run on every pass);
//   - memory allocation or free nodes that do not pair up inside the graph (memory that outlives the launch, or
//     memory the graph frees that it did not allocate: a second pass would free it twice);
//   - a memcpy node that writes host memory, a CUDA array, or memory kreplay does not track (not captured, so a
//     pass after the first would read what the one before wrote);
//   - external semaphore or batch memory-operation nodes (they signal or wait on things outside the device
//     memory), or a node type this build does not know;
//   - flags of device launch (its kernels may launch graphs kreplay never sees).
// Event record and wait nodes, memsets, empty nodes, child graphs (inspected as their parent) and conditional
// nodes (their bodies run from restored memory, so every pass takes the same branches) are replayed.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_GRAPHS_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_GRAPHS_HPP

#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <cuda.h>

#include "driver.hpp"

namespace kreplay::cuda::inject {

// What an executable graph holds, as far as the replay needs to know.
struct graph_facts {
  size_t nodes = 0;                  // every node, those of child graphs included
  std::vector<std::string> kernels;  // the kernel nodes' function names, in the driver's node order
  std::string why_not;               // empty: replayable whole; else why a whole-graph replay would be unfaithful
};

// Whether a device address is memory kreplay's snapshots hold (a tracked allocation).
using tracked_memory_t = std::function<bool(CUdeviceptr)>;

// Reads `graph` (and its child graphs) with the driver's graph queries. `instantiate_flags`: the flags the
// executable was instantiated with. A query that fails makes the graph unreplayable, with the query named.
graph_facts inspect_graph(CUgraph graph, unsigned long long instantiate_flags, const driver_api_t& driver,
                          const tracked_memory_t& tracked);

// Why a memcpy with these parameters would make a whole-graph replay unfaithful; empty when it would not.
std::string memcpy_node_problem(const CUDA_MEMCPY3D& copy, const tracked_memory_t& tracked);

// A graph launch's name in the report: "graph: 9 kernels, 12 nodes (first, second, third, ...)".
std::string graph_row_name(const graph_facts& graph);

// The executable graphs of the process and their facts. Thread-safe.
class graph_registry {
 public:
  void instantiated(CUgraphExec exec, graph_facts facts);
  // A change made to one node of `exec` after instantiation that makes it unreplayable (`why` non-empty).
  void changed(CUgraphExec exec, const std::string& why);
  void destroyed(CUgraphExec exec);
  // A copy of the facts; nothing when the executable was never seen instantiated.
  std::optional<graph_facts> find(CUgraphExec exec) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<CUgraphExec, graph_facts> execs_;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_GRAPHS_HPP
