// CUDA graphs built node by node, for --graph-profiling node and graph on a GPU (issue 29):
//
//   replay_graphs step    a graph of every node kind node mode runs: kernels, a memset, a memcpy, a child graph
//                         whose kernel reads both buffers, event record and wait nodes, an empty node, with edges
//                         that make the driver's node order differ from a valid one; launched four times, its
//                         executable changed in place between launches (a kernel node's arguments set, then an
//                         update from a second graph of the same shape)
//   replay_graphs while   a graph with a conditional while node (its handle reset at every launch): an init
//                         kernel sets a counter, the body runs until the counter reaches zero, each iteration
//                         folding the counter into an accumulator; launched twice
//   replay_graphs cost    the graph-mode cost figure (issue 29): a 320 MB footprint like the torch.cuda.graph
//                         loop's, of which a graph of 16 kernel nodes rewrites 87 MB; the same 87 MB rewritten by
//                         one stream launch three times before the graph's four launches and three times after, so
//                         that a graph's extra pass and a stream launch's compare at equal footprint and written
//                         bytes
//
// Every kernel reads what it writes, so a pass from any state but the one before it ends elsewhere. Prints
// "CHECKSUM <hex>" over the buffers at the end (the scripts compare it with the plain run's) and exits 1 on a
// CUDA error.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

constexpr int n = 1 << 16;

__global__ void axpb(float* x, int count, float a, float b) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) {
    x[i] = a * x[i] + b;
  }
}

__global__ void mix(float* x, const float* y, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) {
    x[i] += 0.5f * y[(i * 7) % count];
  }
}

__global__ void set_counter(int* counter, int value) { *counter = value; }

__global__ void loop_body(int* counter, float* accumulator, cudaGraphConditionalHandle handle) {
  *accumulator = *accumulator * 1.5f + static_cast<float>(*counter);
  *counter -= 1;
  cudaGraphSetConditional(handle, *counter > 0 ? 1 : 0);
}

bool ok(cudaError_t result, const char* what) {
  if (result != cudaSuccess) {
    std::fprintf(stderr, "replay_graphs: %s: %s\n", what, cudaGetErrorString(result));
  }
  return result == cudaSuccess;
}

#define CHECK(call)          \
  do {                       \
    if (!ok((call), #call)) { \
      return false;          \
    }                        \
  } while (0)

uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    hash = (hash ^ p[i]) * 1099511628211ull;
  }
  return hash;
}

// The kernel node parameters of axpb over all of `x`, its arguments held here (so never copied).
struct axpb_node {
  float* x;
  int count = n;
  float a;
  float b;
  void* args[4] = {&x, &count, &a, &b};
  cudaKernelNodeParams params{};
  axpb_node(float* buffer, float scale, float shift) : x(buffer), a(scale), b(shift) {
    params.func = reinterpret_cast<void*>(axpb);
    params.gridDim = dim3((count + 255) / 256);
    params.blockDim = dim3(256);
    params.kernelParams = args;
  }
  axpb_node(const axpb_node&) = delete;
  axpb_node& operator=(const axpb_node&) = delete;
};

// The step graph: k1 = axpb(x) -> memcpy of x's first half into y's second half -> child{mix(x, y)} -> event
// record -> k2 = axpb(y); a memset of y's first quarter before the child; an event wait and an empty node. The
// memcpy is added before k1, so the driver's order is not a valid one. `first`: k1's node.
bool build_step(cudaGraph_t* graph, axpb_node& k1, axpb_node& k2, float* x, float* y, cudaEvent_t event,
                cudaGraphNode_t* first) {
  CHECK(cudaGraphCreate(graph, 0));
  cudaGraphNode_t copy, scale, memset_node, child_node, record, wait, empty, last;
  CHECK(cudaGraphAddMemcpyNode1D(&copy, *graph, nullptr, 0, y + n / 2, x, n / 2 * sizeof(float),
                                 cudaMemcpyDeviceToDevice));
  CHECK(cudaGraphAddKernelNode(&scale, *graph, nullptr, 0, &k1.params));
  CHECK(cudaGraphAddDependencies(*graph, &scale, &copy, nullptr, 1));
  cudaMemsetParams set{};
  set.dst = y;
  set.value = 0;
  set.elementSize = 4;
  set.width = n / 4;
  set.height = 1;
  CHECK(cudaGraphAddMemsetNode(&memset_node, *graph, nullptr, 0, &set));
  cudaGraph_t child;
  CHECK(cudaGraphCreate(&child, 0));
  cudaGraphNode_t mix_node;
  cudaKernelNodeParams mix_params{};
  int count = n;
  void* mix_args[] = {&x, &y, &count};
  mix_params.func = reinterpret_cast<void*>(mix);
  mix_params.gridDim = dim3(n / 256);
  mix_params.blockDim = dim3(256);
  mix_params.kernelParams = mix_args;
  CHECK(cudaGraphAddKernelNode(&mix_node, child, nullptr, 0, &mix_params));
  const cudaGraphNode_t before_child[] = {copy, memset_node};
  CHECK(cudaGraphAddChildGraphNode(&child_node, *graph, before_child, 2, child));
  CHECK(cudaGraphDestroy(child));  // the node holds a copy
  CHECK(cudaGraphAddEventRecordNode(&record, *graph, &child_node, 1, event));
  CHECK(cudaGraphAddEventWaitNode(&wait, *graph, &record, 1, event));
  CHECK(cudaGraphAddEmptyNode(&empty, *graph, &wait, 1));
  CHECK(cudaGraphAddKernelNode(&last, *graph, &empty, 1, &k2.params));
  *first = scale;
  return true;
}

bool step(float* x, float* y, uint64_t* hash) {
  cudaStream_t stream;
  cudaEvent_t event;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  axpb_node k1(x, 1.01f, 0.5f), k2(y, 0.99f, -0.25f);
  cudaGraph_t graph;
  cudaGraphNode_t scale;
  if (!build_step(&graph, k1, k2, x, y, event, &scale)) {
    return false;
  }
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));  // the graph stays: SetParams names its nodes
  for (int launch = 0; launch < 4; ++launch) {
    if (launch == 1) {  // a kernel node's arguments set into the executable
      axpb_node changed(x, 1.02f, 0.25f);
      CHECK(cudaGraphExecKernelNodeSetParams(exec, scale, &changed.params));
    }
    if (launch == 2) {  // the executable updated from another graph of the same shape
      axpb_node u1(x, 0.98f, 1.0f), u2(y, 1.03f, 0.125f);
      cudaGraph_t other;
      cudaGraphNode_t other_scale;
      if (!build_step(&other, u1, u2, x, y, event, &other_scale)) {
        return false;
      }
      cudaGraphExecUpdateResultInfo info{};
      CHECK(cudaGraphExecUpdate(exec, other, &info));
      CHECK(cudaGraphDestroy(other));
    }
    CHECK(cudaGraphLaunch(exec, stream));
  }
  CHECK(cudaStreamSynchronize(stream));
  std::vector<float> host(n);
  CHECK(cudaMemcpy(host.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  *hash = fnv1a(host.data(), n * sizeof(float), *hash);
  CHECK(cudaMemcpy(host.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  *hash = fnv1a(host.data(), n * sizeof(float), *hash);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(event));
  CHECK(cudaStreamDestroy(stream));
  return true;
}

bool while_loop(float* accumulator, int* counter, uint64_t* hash) {
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphConditionalHandle handle;
  CHECK(cudaGraphConditionalHandleCreate(&handle, graph, 1, cudaGraphCondAssignDefault));
  cudaGraphNode_t init;
  cudaKernelNodeParams init_params{};
  int start = 5;
  void* init_args[] = {&counter, &start};
  init_params.func = reinterpret_cast<void*>(set_counter);
  init_params.gridDim = init_params.blockDim = dim3(1);
  init_params.kernelParams = init_args;
  CHECK(cudaGraphAddKernelNode(&init, graph, nullptr, 0, &init_params));
  cudaGraphNodeParams loop{};
  loop.type = cudaGraphNodeTypeConditional;
  loop.conditional.handle = handle;
  loop.conditional.type = cudaGraphCondTypeWhile;
  loop.conditional.size = 1;
  cudaGraphNode_t loop_node;
  CHECK(cudaGraphAddNode(&loop_node, graph, &init, nullptr, 1, &loop));
  cudaGraph_t body = loop.conditional.phGraph_out[0];
  cudaGraphNode_t body_node;
  cudaKernelNodeParams body_params{};
  void* body_args[] = {&counter, &accumulator, &handle};
  body_params.func = reinterpret_cast<void*>(loop_body);
  body_params.gridDim = body_params.blockDim = dim3(1);
  body_params.kernelParams = body_args;
  CHECK(cudaGraphAddKernelNode(&body_node, body, nullptr, 0, &body_params));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 2; ++launch) {
    CHECK(cudaGraphLaunch(exec, stream));
  }
  CHECK(cudaStreamSynchronize(stream));
  float value = 0;
  CHECK(cudaMemcpy(&value, accumulator, sizeof(value), cudaMemcpyDeviceToHost));
  std::printf("accumulator %g\n", value);
  *hash = fnv1a(&value, sizeof(value), *hash);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));
  return true;
}

// The cost mode's sizes: 87 MB rewritten every pass, in 16 slices, of a 320 MB footprint.
constexpr int written_floats = 87'000'000 / sizeof(float);
constexpr size_t read_only_bytes = 233'000'000;
constexpr int slices = 16;

// The values every buffer starts from.
std::vector<float> start_values(size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    values[i] = static_cast<float>(i % 113) / 7.0f;
  }
  return values;
}

// A chain of `slices` axpb kernel nodes, each rewriting its slice of x.
bool build_slices(cudaGraph_t* graph, float* x) {
  CHECK(cudaGraphCreate(graph, 0));
  cudaGraphNode_t previous = nullptr;
  for (int slice = 0; slice < slices; ++slice) {
    float* part = x + slice * (written_floats / slices);
    int count = slice + 1 < slices ? written_floats / slices : written_floats - slice * (written_floats / slices);
    float a = 1.0f + 0.001f * static_cast<float>(slice);
    float b = 0.5f;
    void* args[] = {&part, &count, &a, &b};
    cudaKernelNodeParams params{};
    params.func = reinterpret_cast<void*>(axpb);
    params.gridDim = dim3((count + 255) / 256);
    params.blockDim = dim3(256);
    params.kernelParams = args;  // copied into the node
    cudaGraphNode_t node;
    CHECK(cudaGraphAddKernelNode(&node, *graph, previous != nullptr ? &previous : nullptr, previous != nullptr ? 1 : 0,
                                 &params));
    previous = node;
  }
  return true;
}

bool cost(uint64_t* hash) {
  float* x = nullptr;
  void* read_only = nullptr;
  std::vector<float> host = start_values(written_floats);
  CHECK(cudaMalloc(&x, written_floats * sizeof(float)));
  CHECK(cudaMalloc(&read_only, read_only_bytes));
  CHECK(cudaMemset(read_only, 0x3c, read_only_bytes));
  CHECK(cudaMemcpy(x, host.data(), written_floats * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  if (!build_slices(&graph, x)) {
    return false;
  }
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 10; ++launch) {
    if (launch >= 3 && launch < 7) {
      CHECK(cudaGraphLaunch(exec, stream));
    } else {
      axpb<<<(written_floats + 255) / 256, 256, 0, stream>>>(x, written_floats, 0.999f, 0.25f);
      CHECK(cudaGetLastError());
    }
  }
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemcpy(host.data(), x, written_floats * sizeof(float), cudaMemcpyDeviceToHost));
  *hash = fnv1a(host.data(), written_floats * sizeof(float), *hash);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(read_only));
  CHECK(cudaFree(x));
  return true;
}

// The step and while modes: two buffers of n floats and a counter.
bool small_graphs(bool loop, uint64_t* hash) {
  float* x = nullptr;
  float* y = nullptr;
  int* counter = nullptr;
  const std::vector<float> start = start_values(n);
  CHECK(cudaMalloc(&x, n * sizeof(float)));
  CHECK(cudaMalloc(&y, n * sizeof(float)));
  CHECK(cudaMalloc(&counter, sizeof(int)));
  CHECK(cudaMemcpy(x, start.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(y, start.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  return loop ? while_loop(x, counter, hash) : step(x, y, hash);
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "step";
  uint64_t hash = 1469598103934665603ull;
  const bool done = std::strcmp(mode, "cost") == 0 ? cost(&hash) : small_graphs(std::strcmp(mode, "while") == 0, &hash);
  if (!done) {
    return 1;
  }
  std::printf("CHECKSUM %016llx\n", static_cast<unsigned long long>(hash));
  return 0;
}
