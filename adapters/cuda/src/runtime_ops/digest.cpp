// The digest op: one 128-bit digest per block of each job, by one kernel launch per call (README.md defines the
// function and its collision odds), and the same function on the host for the tests.
//
// One call: plan (validate, count the launch's segments and blocks) -> lay out the scratch buffers -> send the job
// table, launch, fetch the digests, wait -> hand each job its digests.
#include <cstring>

#include "context.hpp"
#include "kernels.hpp"
#include "kreplay/cuda.hpp"

namespace kreplay::cuda::detail {
namespace {

constexpr size_t kMinDigestBlock = 4096;
constexpr size_t kMaxDigestBlock = 16u << 20;

// What one call digests: its jobs with bytes, and the launch's size in segments and blocks.
struct digest_plan {
  unsigned block_shift = 0;
  uint64_t segments = 0;
  uint64_t blocks = 0;
  size_t live_jobs = 0;
  size_t bytes = 0;
};

// Device scratch: [job table | accumulators | digests]; host scratch: [job table | digests].
struct digest_layout {
  size_t table_bytes;
  size_t accumulator_bytes;  // 0 unless blocks are larger than a segment
  size_t digest_bytes;
};

bool valid_block_size(size_t block_bytes) {
  return block_bytes >= kMinDigestBlock && block_bytes <= kMaxDigestBlock && (block_bytes & (block_bytes - 1)) == 0;
}

kreplay_status_t plan_digest(const kreplay_digest_job_t* jobs, size_t count, size_t block_bytes, digest_plan& plan) {
  plan.block_shift = log2_of(block_bytes);
  for (size_t i = 0; i < count; ++i) {
    if (jobs[i].bytes == 0) {
      continue;
    }
    if (jobs[i].address == nullptr || jobs[i].digests_out == nullptr) {
      return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    ++plan.live_jobs;
    plan.bytes += jobs[i].bytes;
    plan.segments += digest_segments(jobs[i].bytes, plan.block_shift);
    plan.blocks += digest_blocks(jobs[i].bytes, plan.block_shift);
  }
  return KREPLAY_STATUS_SUCCESS;
}

digest_layout lay_out(const digest_plan& plan, size_t block_bytes) {
  digest_layout layout{};
  layout.table_bytes = (plan.live_jobs * sizeof(digest_job_desc) + 255) / 256 * 256;
  layout.digest_bytes = static_cast<size_t>(plan.blocks) * 2 * sizeof(uint64_t);
  layout.accumulator_bytes = block_bytes > kDigestSegmentBytes ? layout.digest_bytes : 0;
  return layout;
}

// The kernel's job table, in host scratch: each job with bytes, numbered into the launch's segments and blocks.
void fill_job_table(const kreplay_digest_job_t* jobs, size_t count, unsigned block_shift, digest_job_desc* table) {
  uint64_t segment = 0;
  uint64_t block = 0;
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) {
    if (jobs[i].bytes == 0) {
      continue;
    }
    table[n++] = {reinterpret_cast<uint64_t>(jobs[i].address), jobs[i].bytes, block, segment};
    segment += digest_segments(jobs[i].bytes, block_shift);
    block += digest_blocks(jobs[i].bytes, block_shift);
  }
}

// Sends the table, launches the kernel and fetches the digests into host scratch after the table, then waits
// (also after a failure, so that nothing is left running on the scratch buffers).
cudaError_t run_digest(device_state& state, const digest_plan& plan, const digest_layout& layout,
                       size_t block_bytes) {
  const auto* table = static_cast<const digest_job_desc*>(state.host_scratch);
  unsigned char* device_base = static_cast<unsigned char*>(state.device_scratch);
  auto* device_table = reinterpret_cast<digest_job_desc*>(device_base);
  auto* accumulators = reinterpret_cast<uint64_t*>(device_base + layout.table_bytes);
  auto* device_digests = reinterpret_cast<uint64_t*>(device_base + layout.table_bytes + layout.accumulator_bytes);
  unsigned char* host_digests = static_cast<unsigned char*>(state.host_scratch) + layout.table_bytes;
  cudaError_t error = cudaMemcpyAsync(device_table, table, plan.live_jobs * sizeof(digest_job_desc),
                                      cudaMemcpyHostToDevice, state.stream);
  if (error == cudaSuccess) {
    error = launch_digest(device_table, plan.live_jobs, plan.segments, plan.blocks, block_bytes,
                          layout.accumulator_bytes != 0 ? accumulators : nullptr, device_digests, state.sm_count,
                          state.stream);
  }
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(host_digests, device_digests, layout.digest_bytes, cudaMemcpyDeviceToHost, state.stream);
  }
  cudaError_t wait = cudaStreamSynchronize(state.stream);
  return error == cudaSuccess ? wait : error;
}

// digests_out is the caller's host memory, possibly pageable: filled from the page-locked copy. Jobs whose
// outputs follow one another in the caller's memory (kreplay's usually do) are one memcpy.
void hand_out_digests(const kreplay_digest_job_t* jobs, size_t count, unsigned block_shift,
                      const unsigned char* host_digests) {
  size_t offset = 0;
  unsigned char* run_dst = nullptr;
  size_t run_offset = 0;
  size_t run_bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    if (jobs[i].bytes == 0) {
      continue;
    }
    const size_t job_bytes = digest_blocks(jobs[i].bytes, block_shift) * sizeof(kreplay_digest_t);
    unsigned char* dst = reinterpret_cast<unsigned char*>(jobs[i].digests_out);
    if (run_dst != nullptr && dst == run_dst + run_bytes) {
      run_bytes += job_bytes;
    } else {
      if (run_dst != nullptr) {
        std::memcpy(run_dst, host_digests + run_offset, run_bytes);
      }
      run_dst = dst;
      run_offset = offset;
      run_bytes = job_bytes;
    }
    offset += job_bytes;
  }
  if (run_dst != nullptr) {
    std::memcpy(run_dst, host_digests + run_offset, run_bytes);
  }
}

// The planned call on `device`, which is current, with its state locked.
cudaError_t digest_on_device(device_state& state, int device, const kreplay_digest_job_t* jobs, size_t count,
                             size_t block_bytes, const digest_plan& plan) {
  const digest_layout layout = lay_out(plan, block_bytes);
  cudaError_t error = prepare(state, device, layout.table_bytes + layout.accumulator_bytes + layout.digest_bytes,
                              layout.table_bytes + layout.digest_bytes);
  if (error != cudaSuccess) {
    return error;
  }
  fill_job_table(jobs, count, plan.block_shift, static_cast<digest_job_desc*>(state.host_scratch));
  error = run_digest(state, plan, layout, block_bytes);
  if (error == cudaSuccess) {
    const unsigned char* host_digests = static_cast<unsigned char*>(state.host_scratch) + layout.table_bytes;
    hand_out_digests(jobs, count, plan.block_shift, host_digests);
  }
  return error;
}

}  // namespace

kreplay_status_t runtime_ops::digest(void* user_data, kreplay_agent_t agent, const kreplay_digest_job_t* jobs,
                                     size_t count, size_t block_bytes) {
  if (count == 0) {
    return KREPLAY_STATUS_SUCCESS;
  }
  context& ctx = context_of(user_data);
  const int device = device_in(ctx, agent);
  if (jobs == nullptr || device < 0 || !valid_block_size(block_bytes)) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  digest_plan plan;
  if (plan_digest(jobs, count, block_bytes, plan) != KREPLAY_STATUS_SUCCESS) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  if (plan.live_jobs == 0) {
    return KREPLAY_STATUS_SUCCESS;
  }
  device_switch on_device(device);
  cudaError_t error = on_device.error();
  if (error == cudaSuccess) {
    device_state& state = *ctx.devices[static_cast<size_t>(device)];
    std::lock_guard<std::mutex> lock(state.mutex);
    error = digest_on_device(state, device, jobs, count, block_bytes, plan);
  }
  if (error != cudaSuccess) {
    increase(ctx.stats.digest_failures);
    return fail(error);
  }
  increase(ctx.stats.digests);
  increase(ctx.stats.digest_bytes, plan.bytes);
  return KREPLAY_STATUS_SUCCESS;
}

}  // namespace kreplay::cuda::detail

namespace kreplay::cuda {

void digest_on_host(const void* data, size_t bytes, size_t block_bytes, kreplay_digest_t* out) {
  static_assert(sizeof(kreplay_digest_t) == 2 * sizeof(uint64_t), "a digest is two 64-bit words, lo then hi");
  detail::digest_on_host(data, bytes, block_bytes, reinterpret_cast<uint64_t*>(out));
}

}  // namespace kreplay::cuda
