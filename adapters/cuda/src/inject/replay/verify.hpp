// --verify: digests the launch's footprint (every region of its agent's inventory, in 64 KiB blocks) after each
// pass and compares each pass with the first: a kernel whose passes differ is not deterministic, and its
// replayed figures are suspect.
#ifndef KREPLAY_CUDA_INJECT_REPLAY_VERIFY_HPP
#define KREPLAY_CUDA_INJECT_REPLAY_VERIFY_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kreplay.h"

namespace kreplay::cuda::inject {

class pass_verifier {
 public:
  // After pass `pass` of a launch on `agent`: pass 1 is the reference; `verdict` (the row's verify column)
  // becomes "same", "not possible (no digest)" or, at the first pass that differs, "differs: pass P, B blocks
  // of 64 KiB", which later passes leave as it is.
  void after_pass(const kreplay_device_ops_t& ops, kreplay_agent_t agent, uint32_t pass, std::string& verdict);

 private:
  bool digest(const kreplay_device_ops_t& ops, kreplay_agent_t agent, std::vector<kreplay_digest_t>* out);
  bool list_footprint(kreplay_agent_t agent);

  std::vector<std::pair<const void*, size_t>> footprint_;  // the regions digested, listed once
  std::vector<kreplay_digest_t> first_;                    // after pass 1
  bool verifying_ = false;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_REPLAY_VERIFY_HPP
