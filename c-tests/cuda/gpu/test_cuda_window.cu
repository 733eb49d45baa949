// kreplay_cuda_window_test: the replay window (API.md, "Replay window (version 3)") on a real GPU through the CUDA
// adapter (needs an NVIDIA GPU; not part of the GPU-free suite). Device 0 only. The behaviours checked:
//   window_holds_a_copy_from_another_thread  a 64 MiB tracked region is captured inside a window; while the
//                                             window is open a second thread issues a 64 MiB host-to-device
//                                             copy into the region through memcpy_async_fenced. The copy must
//                                             wait: after each of the window's two restores the region equals
//                                             the snapshot byte for byte (so neither the kernel's writes nor the
//                                             copy's survive a restore), and the copy has not been issued. Once
//                                             the window closes the copy runs: the region then equals the
//                                             copy's bytes, every byte. The outcome says replayed, passes 3/3.
//   control_without_the_fence                the same copy issued with plain cudaMemcpyAsync lands during the
//                                             window (the region differs from the snapshot before the restore),
//                                             so the check above can fail.
//   fence_costs_under_one_percent            a 64 MiB restore from page-locked staging, alone and inside an
//                                             open window (open, restore, close), interleaved, median of 41
//                                             each: the window's extra time is at most 1 % of the restore.
// Closing line: "N passed, M failed"; the exit status is non-zero on any failure.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "kreplay.h"
#include "kreplay/cuda.hpp"

namespace {

constexpr size_t kBytes = 64u << 20;
constexpr uint32_t kPasses = 3;
constexpr int kCostSamples = 41;

int g_failures = 0;
int g_failed_cases = 0;
int g_passed = 0;

void expect(bool condition, const char* what) {
  if (!condition) {
    ++g_failures;
    say("  FAIL %s\n", what);
  }
}

void finish_case(const char* name, int failures_before) {
  if (g_failures == failures_before) {
    ++g_passed;
    say("PASS %s\n", name);
  } else {
    ++g_failed_cases;
    say("FAIL %s\n", name);
  }
}

__global__ void scribble(unsigned int* x, size_t n, unsigned int salt) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    x[i] = x[i] * 2654435761u + salt;
  }
}

void fill(std::vector<unsigned int>& words, uint64_t seed) {
  for (unsigned int& word : words) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    word = static_cast<unsigned int>(seed);
  }
}

bool region_equals(const void* device, const unsigned int* expected, std::vector<unsigned int>& scratch) {
  CUDA_CHECK(cudaMemcpy(scratch.data(), device, kBytes, cudaMemcpyDeviceToHost));
  return std::memcmp(scratch.data(), expected, kBytes) == 0;
}

kreplay_window_t* open_window(kreplay_agent_t agent) {
  kreplay_window_options_t options{};
  options.struct_size = sizeof(options);
  options.passes = kPasses;
  kreplay_window_t* window = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  const kreplay_status_t status = kreplay_window_open(agent, &options, &window, &reason);
  if (status != KREPLAY_STATUS_SUCCESS) {
    say("  window_open: %s (%s)\n", kreplay_status_string(status), kreplay_decline_reason_string(reason));
  }
  return window;
}

// The copy comes from a second thread, on a stream of its own, as another thread of the program would issue it.
struct second_thread_copy {
  std::atomic<bool> issued{false};
  std::atomic<bool> done{false};
  std::thread thread;

  void start(void* dst, const void* src, bool fenced) {
    thread = std::thread([this, dst, src, fenced] {
      CUDA_CHECK(cudaSetDevice(0));
      cudaStream_t stream = nullptr;
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      if (fenced) {
        CUDA_CHECK(kreplay::cuda::memcpy_async_fenced(dst, src, kBytes, stream));
      } else {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDefault, stream));
      }
      issued.store(true);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      CUDA_CHECK(cudaStreamDestroy(stream));
      done.store(true);
    });
  }
};

void window_holds_a_copy_from_another_thread(kreplay_agent_t agent, void* region, const unsigned int* original,
                                             const unsigned int* incoming, std::vector<unsigned int>& scratch) {
  const int before = g_failures;
  CUDA_CHECK(cudaMemcpy(region, original, kBytes, cudaMemcpyHostToDevice));
  kreplay_window_t* window = open_window(agent);
  expect(window != nullptr, "the window opens");
  if (window == nullptr) {
    finish_case("window_holds_a_copy_from_another_thread", before);
    return;
  }
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  expect(kreplay_snap(agent, &snapshot, &reason) == KREPLAY_STATUS_SUCCESS, "the snapshot inside the window");
  second_thread_copy copy;
  copy.start(region, incoming, true);
  for (uint32_t pass = 0; pass < kPasses && snapshot != nullptr; ++pass) {
    if (pass > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // time for a copy that slipped through to land
      kreplay_restore_report_t report{};
      expect(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS, "a restore inside the window");
      expect(region_equals(region, original, scratch), "after a restore the region is the snapshot, every byte");
      expect(!copy.issued.load(), "the fenced copy waits while the window is open");
    }
    scribble<<<264, 256>>>(static_cast<unsigned int*>(region), kBytes / 4, 17 + pass);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  kreplay_window_outcome_t outcome{};
  outcome.struct_size = sizeof(outcome);
  expect(kreplay_window_close(window, &outcome) == KREPLAY_STATUS_SUCCESS, "the window closes");
  expect(outcome.reason == KREPLAY_DECLINE_NONE && outcome.passes_requested == kPasses &&
             outcome.passes_run == kPasses,
         "the outcome says replayed, passes 3/3");
  expect(outcome.footprint_bytes >= kBytes, "the outcome's footprint covers the region");
  copy.thread.join();
  expect(copy.done.load(), "the fenced copy ran after the window closed");
  expect(region_equals(region, incoming, scratch), "after the window the region holds the copy's bytes, every byte");
  kreplay_snapshot_free(snapshot);
  finish_case("window_holds_a_copy_from_another_thread", before);
}

void control_without_the_fence(kreplay_agent_t agent, void* region, const unsigned int* original,
                               const unsigned int* incoming, std::vector<unsigned int>& scratch) {
  const int before = g_failures;
  CUDA_CHECK(cudaMemcpy(region, original, kBytes, cudaMemcpyHostToDevice));
  kreplay_window_t* window = open_window(agent);
  expect(window != nullptr, "the window opens");
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  expect(kreplay_snap(agent, &snapshot, &reason) == KREPLAY_STATUS_SUCCESS, "the snapshot inside the window");
  second_thread_copy copy;
  copy.start(region, incoming, false);
  copy.thread.join();
  expect(region_equals(region, incoming, scratch), "an unfenced copy lands inside the window (the control)");
  if (snapshot != nullptr) {
    kreplay_restore_report_t report{};
    expect(kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS, "the restore");
    expect(region_equals(region, original, scratch), "the restore then writes the snapshot back over it");
  }
  kreplay_window_outcome_t outcome{};
  outcome.struct_size = sizeof(outcome);
  if (window != nullptr) {
    expect(kreplay_window_close(window, &outcome) == KREPLAY_STATUS_SUCCESS, "the window closes");
  }
  kreplay_snapshot_free(snapshot);
  finish_case("control_without_the_fence", before);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void fence_costs_under_one_percent(kreplay_agent_t agent) {
  const int before = g_failures;
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  KREPLAY_CHECK(kreplay_snap(agent, &snapshot, &reason));
  std::vector<double> alone;
  std::vector<double> windowed;
  kreplay_restore_report_t report{};
  for (int i = 0; i < 3; ++i) {  // warm-up
    KREPLAY_CHECK(kreplay_restore(snapshot, &report));
  }
  for (int i = 0; i < kCostSamples; ++i) {
    double start = now_ms();
    KREPLAY_CHECK(kreplay_restore(snapshot, &report));
    alone.push_back(now_ms() - start);

    start = now_ms();
    kreplay_window_t* window = open_window(agent);
    KREPLAY_CHECK(kreplay_restore(snapshot, &report));
    kreplay_window_outcome_t outcome{};
    outcome.struct_size = sizeof(outcome);
    if (window != nullptr) {
      KREPLAY_CHECK(kreplay_window_close(window, &outcome));
    }
    windowed.push_back(now_ms() - start);
    expect(window != nullptr, "every window opens");
  }
  // A fenced copy's own bookkeeping, with no window open: the cost every program copy pays.
  kreplay_agent_t agents[1] = {agent};
  const int pairs = 100000;
  double start = now_ms();
  for (int i = 0; i < pairs; ++i) {
    uint64_t token = 0;
    KREPLAY_CHECK(kreplay_copy_begin(agents, 1, &token));
    kreplay_copy_end(token);
  }
  const double pair_ns = (now_ms() - start) * 1e6 / pairs;
  const double plain = median(alone);
  const double fenced = median(windowed);
  const double extra = (fenced - plain) / plain * 100.0;
  say("  64 MiB pinned restore: alone %.3f ms, in a window (open + restore + close) %.3f ms: %+.2f %%; "
      "copy_begin + copy_end %.0f ns\n",
      plain, fenced, extra, pair_ns);
  say("FIGURE fence restore_ms=%.4f windowed_ms=%.4f extra_percent=%.3f copy_pair_ns=%.1f\n", plain, fenced, extra,
      pair_ns);
  expect(extra <= 1.0, "the window costs at most 1 % of a 64 MiB pinned restore");
  kreplay_snapshot_free(snapshot);
  finish_case("fence_costs_under_one_percent", before);
}

void log_line(void*, kreplay_log_level_t level, const char* message, size_t) {
  if (level <= KREPLAY_LOG_INFO && std::strncmp(message, "kreplay window", 14) == 0) {
    say("  %s\n", message);
  } else if (level <= KREPLAY_LOG_WARNING) {
    say("  kreplay: %s\n", message);
  }
}

}  // namespace

int main() {
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 1) {
    std::printf("no CUDA device\n0 passed, 1 failed\n");
    return 1;
  }
  CUDA_CHECK(cudaSetDevice(0));
  kreplay_set_logger(log_line, nullptr, KREPLAY_LOG_INFO);
  KREPLAY_CHECK(kreplay::cuda::install(nullptr, 0));
  kreplay_policy_t policy = kreplay::cuda::recommended_policy();  // pin_staging on
  KREPLAY_CHECK(kreplay_set_policy(&policy));
  kreplay_tracking_enable(true);
  const kreplay_agent_t agent = kreplay::cuda::agent_of_device(0);

  void* region = nullptr;
  CUDA_CHECK(kreplay::cuda::malloc_tracked(&region, kBytes));
  unsigned int* original = nullptr;
  unsigned int* incoming = nullptr;
  CUDA_CHECK(cudaMallocHost(&original, kBytes));  // untracked host memory: never part of a snapshot
  CUDA_CHECK(cudaMallocHost(&incoming, kBytes));
  {
    std::vector<unsigned int> words(kBytes / 4);
    fill(words, 0x9e3779b97f4a7c15ull);
    std::memcpy(original, words.data(), kBytes);
    fill(words, 0x2545f4914f6cdd1dull);
    std::memcpy(incoming, words.data(), kBytes);
  }
  std::vector<unsigned int> scratch(kBytes / 4);

  window_holds_a_copy_from_another_thread(agent, region, original, incoming, scratch);
  control_without_the_fence(agent, region, original, incoming, scratch);
  fence_costs_under_one_percent(agent);

  CUDA_CHECK(kreplay::cuda::free_tracked(region));
  CUDA_CHECK(cudaFreeHost(original));
  CUDA_CHECK(cudaFreeHost(incoming));
  kreplay_staging_trim(agent);
  std::printf("%d passed, %d failed\n", g_passed, g_failed_cases);
  return g_failures == 0 ? 0 : 1;
}
