// Node mode (--graph-profiling node): a graph launch whose kernel nodes are each replayed as a stream launch is.
//
// At the graph launch's entry its window is open (other threads wait) and the snapshot of the memory before the
// graph is taken. kreplay then runs the executable's plan (graphs.hpp) itself on the launch's stream, in an order
// that respects the graph's edges: memcpy, memset and event nodes once, each kernel node that selection picks
// with a snapshot of its own (a per-dispatch snapshot inside the graph's window), N passes and restores between,
// its own row; a kernel node not picked runs once. The memory after the last node is what the graph computes;
// it is then put back to the memory before the graph (a full check), and the program's own launch of the graph,
// right after the entry, computes it once more from there: what the program sees is the graph's own result, never
// kreplay's.
#include <algorithm>
#include <iterator>

#include "guard.hpp"
#include "replay/pending.hpp"

namespace kreplay::cuda::inject {
namespace {

// A kernel node as a launch on `stream`, its arguments the plan's private copy.
void fill_launch(const kernel_node_t& kernel, CUstream stream, launch_t& launch) {
  launch.kind = kernel.cooperative ? launch_kind::cooperative : launch_kind::kernel;
  launch.function = kernel.function;
  launch.loaded = kernel.loaded;
  std::copy(std::begin(kernel.grid), std::end(kernel.grid), std::begin(launch.grid));
  std::copy(std::begin(kernel.block), std::end(kernel.block), std::begin(launch.block));
  launch.shared_bytes = kernel.shared_bytes;
  launch.stream = stream;
  launch.argument_bytes = kernel.argument_bytes;
  for (size_t offset : kernel.argument_offsets) {
    launch.argument_pointers.push_back(launch.argument_bytes.data() + offset);
  }
  if (kernel.packed) {
    launch.extra_size = launch.argument_bytes.size();
    launch.extra_copy = {CU_LAUNCH_PARAM_BUFFER_POINTER, launch.argument_bytes.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                         &launch.extra_size, CU_LAUNCH_PARAM_END};
  }
  if (kernel.cluster[0] * kernel.cluster[1] * kernel.cluster[2] > 1) {
    // A cluster shape set on the node (cuDNN's and CUTLASS's Hopper kernels): cuLaunchKernelEx with it.
    launch.kind = launch_kind::kernel_ex;
    CUlaunchAttribute cluster{};
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = kernel.cluster[0];
    cluster.value.clusterDim.y = kernel.cluster[1];
    cluster.value.clusterDim.z = kernel.cluster[2];
    launch.attributes.push_back(cluster);
    if (kernel.cooperative) {
      CUlaunchAttribute cooperative{};
      cooperative.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      cooperative.value.cooperative = 1;
      launch.attributes.push_back(cooperative);
    }
    CUlaunchConfig& config = launch.config;
    config.gridDimX = kernel.grid[0], config.gridDimY = kernel.grid[1], config.gridDimZ = kernel.grid[2];
    config.blockDimX = kernel.block[0], config.blockDimY = kernel.block[1], config.blockDimZ = kernel.block[2];
    config.sharedMemBytes = kernel.shared_bytes;
    config.hStream = stream;
    config.attrs = launch.attributes.data();
    config.numAttrs = static_cast<unsigned>(launch.attributes.size());
  }
}

CUresult run_memset(const CUDA_MEMSET_NODE_PARAMS& set, CUstream stream, const driver_api_t& driver) {
  const size_t pitch = set.height <= 1 && set.pitch == 0 ? set.width * set.elementSize : set.pitch;
  const size_t height = set.height == 0 ? 1 : set.height;
  switch (set.elementSize) {
    case 1:
      return driver.memset_d2d8_async(set.dst, pitch, static_cast<unsigned char>(set.value), set.width, height,
                                      stream);
    case 2:
      return driver.memset_d2d16_async(set.dst, pitch, static_cast<unsigned short>(set.value), set.width, height,
                                       stream);
    case 4: return driver.memset_d2d32_async(set.dst, pitch, set.value, set.width, height, stream);
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

void replayer::run_graph_nodes(pending_t& p) {
  own_call_scope own;  // every launch, copy and event below is kreplay's
  uint32_t kernel_index = 0;
  for (const planned_node& node : p.graph.plan) {
    if (!run_planned(p, node, kernel_index)) {
      break;
    }
    kernel_index += node.type == CU_GRAPH_NODE_TYPE_KERNEL ? 1 : 0;
  }
  // The memory before the graph, checked whole, for the program's own launch of it.
  if (driver_.ctx_synchronize() != CUDA_SUCCESS && p.row.reason.empty()) {
    p.row.reason = "node mode: the context failed while kreplay ran the graph's nodes";
  }
  if (!restore(p, true) && p.row.reason.empty()) {
    p.row.reason = "node mode: the memory before the graph could not be restored; the program's launch may see "
                   "kreplay's passes";
  }
  p.timer.create();
  p.timer.start(p.launch.stream);
  p.program_pass_begun = replay_clock::now();
}

// One node of the plan, on the launch's stream. False when node mode must stop (the row says why); the memory
// before the graph is restored all the same, so the program's launch is unaffected.
bool replayer::run_planned(pending_t& p, const planned_node& node, uint32_t kernel_index) {
  const CUstream stream = p.launch.stream;
  CUresult result = CUDA_SUCCESS;
  switch (node.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return replay_kernel_node(p, *node.kernel, kernel_index);
    case CU_GRAPH_NODE_TYPE_MEMCPY: result = driver_.memcpy_3d_async(&node.copy, stream); break;
    case CU_GRAPH_NODE_TYPE_MEMSET: result = run_memset(node.set, stream, driver_); break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: result = driver_.event_record(node.event, stream); break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: result = driver_.stream_wait_event(stream, node.event, 0); break;
    default: break;  // empty nodes
  }
  if (result != CUDA_SUCCESS) {
    p.row.reason = "node mode: a node of type " + std::to_string(static_cast<int>(node.type)) +
                   " failed (CUresult " + std::to_string(static_cast<int>(result)) + "), the rest not run";
    return false;
  }
  return true;
}

// A kernel node: selected, it is replayed as a stream launch is (snapshot, N passes with restores between, its
// row); otherwise it runs once. Every pass is kreplay's: the node's last pass leaves the memory the next node reads.
bool replayer::replay_kernel_node(pending_t& graph, const kernel_node_t& kernel, uint32_t kernel_index) {
  pending_t n(driver_);
  n.entered = replay_clock::now();
  fill_launch(kernel, graph.launch.stream, n.launch);
  n.name = kernel.name.c_str();
  n.context = graph.context;
  n.destroyed_at_entry = graph.destroyed_at_entry;
  n.device = graph.device;
  n.agent = graph.agent;
  n.row.index = launches_.fetch_add(1, std::memory_order_relaxed);
  n.row.kernel = kernel.name;
  n.row.device = graph.device;
  std::copy(std::begin(kernel.grid), std::end(kernel.grid), std::begin(n.row.grid));
  std::copy(std::begin(kernel.block), std::end(kernel.block), std::begin(n.row.block));
  n.row.graph_mode = "node";
  n.row.graph_launch = graph.row.graph_launch;
  n.row.graph_node = kernel_index;
  n.row.passes_asked = config_.passes;
  n.row.passes_run = 1;
  launch_selector::verdict verdict;
  {
    std::lock_guard<std::mutex> lock(selector_mutex_);
    verdict = selector_.classify(n.name);
  }
  bool replaying = verdict == launch_selector::verdict::replay;
  if (!replaying) {
    n.row.reason = launch_selector::text(verdict);
  } else if (!plan_passes(n)) {
    replaying = false;
  } else if (driver_.ctx_synchronize() != CUDA_SUCCESS) {  // the nodes before it, queued on the launch's stream
    n.row.reason = "node mode: the nodes before it failed";
    replaying = false;
  } else {
    n.saved = backend_->capture(n.agent, n.context, n.row);
    replaying = n.saved != nullptr;
  }
  const bool ran = replaying ? run_node_passes(n) : relaunch(n.launch, driver_) == CUDA_SUCCESS;
  if (!ran && n.row.reason.empty()) {
    n.row.reason = "node mode: the kernel node's launch failed";
  }
  n.row.replayed = n.row.reason.empty() && n.row.passes_run == n.row.passes_asked;
  report_.add(n.row, replaying ? ms_between(n.entered, replay_clock::now()) : 0.0);
  if (!ran) {
    graph.row.reason = "node mode: kernel node " + std::to_string(kernel_index) + " (" + kernel.name.substr(0, 80) +
                       ") failed, the rest not run";
  }
  return ran;
}

// Passes 1 to N - 1 as a stream launch's (restores between), then pass N, whose memory the next nodes read (the
// restore before it a full check), counted when the counters need all N. False when pass N did not run.
bool replayer::run_node_passes(pending_t& n) {
  hint_arguments(n);
  configure_counting(n);
  n.timer.create();
  n.replaying = true;
  double restore_ms = 0;  // the restore before the pass about to run
  for (uint32_t pass = 1; pass < n.passes; ++pass) {
    if (!run_pass(n, pass, &restore_ms)) {
      break;  // the snapshot's memory is back (run_pass): pass N runs from it
    }
  }
  const uint32_t last = n.own_passes_run + 1;
  const double counter_begin_ms = begin_counted_pass(n, last);
  const auto begun = replay_clock::now();
  n.timer.start(n.launch.stream);
  bool ran = relaunch(n.launch, driver_) == CUDA_SUCCESS;
  n.timer.stop(n.launch.stream);
  ran = ran && driver_.ctx_synchronize() == CUDA_SUCCESS;
  const auto done = replay_clock::now();
  end_counted_pass(n, last, ran, counter_begin_ms);
  const float kernel_ms = n.timer.elapsed_ms();
  if (n.own_passes_run == 0) {
    n.row.kernel_ms = kernel_ms;
  } else if (ran && n.row.reason.empty()) {
    n.extra_ms.push_back(restore_ms + ms_between(begun, done) - kernel_ms);
  }
  if (ran && n.row.reason.empty()) {
    verify_pass(n, last);
  }
  n.row.passes_run = n.passes_that_ran(ran);
  if (n.saved->account(n.row) && n.row.write_set_misses > 0) {
    // Its last pass (what the next nodes read) is exact: the full check restored what the write set missed.
    const bool differed = n.row.verify.rfind("differs", 0) == 0;
    n.row.verify = write_set_verdict(n.row) + (differed ? "; " + n.row.verify : std::string());
  }
  n.saved.reset();
  n.row.extra_pass_ms = median(n.extra_ms);
  n.row.counter_pass_ms = median(n.counter_ms);
  return ran;
}

}  // namespace kreplay::cuda::inject
