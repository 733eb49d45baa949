#include "verify.hpp"

#include <cstring>

namespace kreplay::cuda::inject {
namespace {
constexpr size_t block = 64 * 1024;
size_t blocks_of(size_t bytes) { return (bytes + block - 1) / block; }
}  // namespace

bool pass_verifier::list_footprint(kreplay_agent_t agent) {
  struct list_t {
    std::vector<std::pair<const void*, size_t>> regions;
    bool failed = false;
  } list;
  kreplay_inventory_stats_t stats{};
  if (kreplay_inventory_stats(agent, &stats) == KREPLAY_STATUS_SUCCESS) {
    list.regions.reserve(stats.regions);
  }
  // Called from Rust through the C ABI: nothing may unwind out of it.
  auto visit = [](void* data, const void* base, size_t bytes, uint64_t) noexcept {
    auto* to = static_cast<list_t*>(data);
    try {
      to->regions.emplace_back(base, bytes);
    } catch (...) {
      to->failed = true;
    }
  };
  if (kreplay_inventory_foreach(agent, visit, &list) != KREPLAY_STATUS_SUCCESS || list.failed) {
    return false;
  }
  footprint_ = std::move(list.regions);
  return true;
}

bool pass_verifier::digest(const kreplay_device_ops_t& ops, kreplay_agent_t agent,
                           std::vector<kreplay_digest_t>* out) {
  if (ops.digest == nullptr || (footprint_.empty() && !list_footprint(agent))) {
    return false;
  }
  size_t total = 0;
  for (const auto& [base, bytes] : footprint_) {
    total += blocks_of(bytes);
  }
  out->assign(total, kreplay_digest_t{});
  std::vector<kreplay_digest_job_t> jobs;
  jobs.reserve(footprint_.size());
  size_t at = 0;
  for (const auto& [base, bytes] : footprint_) {
    jobs.push_back({base, bytes, out->data() + at});
    at += blocks_of(bytes);
  }
  return jobs.empty() || ops.digest(ops.user_data, agent, jobs.data(), jobs.size(), block) == KREPLAY_STATUS_SUCCESS;
}

void pass_verifier::after_pass(const kreplay_device_ops_t& ops, kreplay_agent_t agent, uint32_t pass,
                               std::string& verdict) {
  if (pass == 1) {
    verifying_ = digest(ops, agent, &first_);
    verdict = verifying_ ? "same" : "not possible (no digest)";
    return;
  }
  std::vector<kreplay_digest_t> again;
  if (!verifying_ || verdict != "same" || !digest(ops, agent, &again)) {
    return;
  }
  size_t differ = 0;
  for (size_t i = 0; i < first_.size() && i < again.size(); ++i) {
    differ += std::memcmp(&first_[i], &again[i], sizeof(kreplay_digest_t)) != 0 ? 1 : 0;
  }
  if (differ != 0) {
    verdict = "differs: pass " + std::to_string(pass) + ", " + std::to_string(differ) + " blocks of 64 KiB";
  }
}

}  // namespace kreplay::cuda::inject
