// The first phase of name_pattern (name_pattern.hpp): the pattern's text parsed into a small tree, which
// name_pattern.cpp writes out as NFA steps. Private to the two files.
#ifndef KREPLAY_CUDA_INJECT_NAME_PATTERN_SYNTAX_HPP
#define KREPLAY_CUDA_INJECT_NAME_PATTERN_SYNTAX_HPP

#include <cstdint>
#include <string>
#include <vector>

#include "name_pattern.hpp"

namespace kreplay::cuda::inject::pattern_syntax {

constexpr uint32_t unbounded = UINT32_MAX;  // a repeat's max: no limit

struct node_t {
  enum class type : uint8_t { empty, set, assertion, concat, alternate, repeat } kind;
  uint32_t value = 0;              // set: index into the sets; assertion: its op
  uint32_t min = 0, max = 0;       // repeat
  std::vector<uint32_t> children;  // concat, alternate; repeat: one
};

// Parses `text` (name_pattern.hpp's syntax) into *nodes, the byte sets its atoms take into *sets, and the
// tree's root into *root; false with the reason in *why.
bool parse(const std::string& text, std::vector<node_t>* nodes, std::vector<name_pattern::byte_set>* sets,
           uint32_t* root, std::string* why);

}  // namespace kreplay::cuda::inject::pattern_syntax

#endif  // KREPLAY_CUDA_INJECT_NAME_PATTERN_SYNTAX_HPP
