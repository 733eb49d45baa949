// Probe: does CUPTI's Checkpoint API work in a process that also holds a CUPTI Callback API subscriber?
// (kreplay-cuda-replay --backend cupti saw cuptiCheckpointSave answer CUPTI_ERROR_NOT_INITIALIZED under its
// subscriber.) Saves and restores one buffer (a) with no subscriber, (b) with a subscriber holding one
// callback, (c) after unsubscribing, (d) from inside a launch callback, and prints each answer. With the
// argument "subscriber-first" the subscriber is made before cuInit (as an injection library's is) and (a) is
// left out.
//   nvcc -o checkpoint_probe checkpoint_probe.cu -I<cupti include> -L<cupti lib> -lcupti -lcheckpoint -lcuda
#include <cuda.h>
#include <cupti.h>
#include <cupti_checkpoint.h>

#include <cstdio>
#include <string>

using NV::Cupti::Checkpoint::CUpti_Checkpoint;
using NV::Cupti::Checkpoint::cuptiCheckpointFree;
using NV::Cupti::Checkpoint::cuptiCheckpointRestore;
using NV::Cupti::Checkpoint::cuptiCheckpointSave;

__global__ void bump(int* p) { p[threadIdx.x] += 1; }

namespace {
CUcontext g_context = nullptr;
int g_in_callback = -1;

int save_restore(const char* label) {
  CUpti_Checkpoint cp{};
  cp.structSize = CUpti_Checkpoint_STRUCT_SIZE;
  cp.ctx = g_context;
  cp.allowOverwrite = 1;
  const int saved = cuptiCheckpointSave(&cp);
  const int restored = saved == CUPTI_SUCCESS ? cuptiCheckpointRestore(&cp) : -1;
  const int freed = saved == CUPTI_SUCCESS ? cuptiCheckpointFree(&cp) : -1;
  std::printf("RESULT checkpoint %s save=%d restore=%d free=%d\n", label, saved, restored, freed);
  return saved;
}

void CUPTIAPI callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite == CUPTI_API_ENTER && g_in_callback == -1) {
    cuCtxSynchronize();
    g_in_callback = save_restore("d_inside_launch_callback");
  }
}
}  // namespace

int main(int argc, char** argv) {
  const bool first = argc > 1 && std::string(argv[1]) == "subscriber-first";
  CUpti_SubscriberHandle subscriber = nullptr;
  if (first) {
    std::printf("RESULT checkpoint subscribe_first=%d\n", cuptiSubscribe(&subscriber, callback, nullptr));
    cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
  }
  cuInit(0);
  CUdevice device;
  cuDeviceGet(&device, 0);
  cuDevicePrimaryCtxRetain(&g_context, device);
  cuCtxSetCurrent(g_context);
  int* buffer = nullptr;
  cudaMalloc(&buffer, 1 << 20);
  bump<<<1, 32>>>(buffer);
  cudaDeviceSynchronize();
  if (!first) {
    save_restore("a_no_subscriber");
    std::printf("RESULT checkpoint subscribe=%d\n", cuptiSubscribe(&subscriber, callback, nullptr));
    cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
  }
  save_restore("b_with_subscriber");
  bump<<<1, 32>>>(buffer);  // cudart launches through cuLaunchKernel: the callback saves inside it
  cudaDeviceSynchronize();
  cuptiUnsubscribe(subscriber);
  save_restore("c_after_unsubscribe");
  cudaFree(buffer);
  return 0;
}
