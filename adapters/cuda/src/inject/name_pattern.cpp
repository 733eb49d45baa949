// The pattern is parsed into a small tree (name_pattern_syntax.cpp), the tree written out as NFA steps
// (emitter), and the steps run over a name one byte at a time with every live state in a set (search): the
// three phases of name_pattern.hpp. Only the parser and the emitter recurse, over the pattern's nesting, which
// the parser bounds.
#include "name_pattern.hpp"

#include <cstring>

#include "name_pattern_syntax.hpp"

namespace kreplay::cuda::inject {
namespace {

using op = name_pattern::op;
using step_t = name_pattern::step_t;
using pattern_syntax::node_t;
using pattern_syntax::unbounded;

constexpr size_t max_steps = 20000;

// The tree as steps; false when they would exceed max_steps.
class emitter {
 public:
  emitter(const std::vector<node_t>& nodes, std::vector<step_t>* steps) : nodes_(nodes), steps_(*steps) {}

  bool emit(uint32_t index) {
    const node_t& node = nodes_[index];
    switch (node.kind) {
      case node_t::type::empty: return true;
      case node_t::type::set: return push({op::byte, node.value, 0, 0});
      case node_t::type::assertion: return push({static_cast<op>(node.value), 0, 0, 0});
      case node_t::type::concat:
        for (uint32_t child : node.children) {
          if (!emit(child)) {
            return false;
          }
        }
        return true;
      case node_t::type::alternate: return alternate(node.children);
      case node_t::type::repeat: return repeat(node);
    }
    return false;
  }

 private:
  uint32_t here() const { return static_cast<uint32_t>(steps_.size()); }
  bool push(step_t step) {
    if (steps_.size() >= max_steps) {
      return false;
    }
    steps_.push_back(step);
    return true;
  }

  // split a, next; a: first; jump end; next: split ... ; last branch; end.
  bool alternate(const std::vector<uint32_t>& branches) {
    std::vector<uint32_t> jumps;
    for (size_t i = 0; i + 1 < branches.size(); ++i) {
      const uint32_t split = here();
      if (!push({op::split, 0, split + 1, 0}) || !emit(branches[i])) {
        return false;
      }
      jumps.push_back(here());
      if (!push({op::jump, 0, 0, 0})) {
        return false;
      }
      steps_[split].other = here();
    }
    if (!emit(branches.back())) {
      return false;
    }
    for (uint32_t jump : jumps) {
      steps_[jump].next = here();
    }
    return true;
  }

  // min copies, then either a loop (unbounded) or max - min optional copies, all leaving to one end.
  bool repeat(const node_t& node) {
    for (uint32_t i = 0; i < node.min; ++i) {
      if (!emit(node.children[0])) {
        return false;
      }
    }
    if (node.max == unbounded) {
      const uint32_t split = here();
      if (!push({op::split, 0, split + 1, 0}) || !emit(node.children[0]) || !push({op::jump, 0, split, 0})) {
        return false;
      }
      steps_[split].other = here();
      return true;
    }
    std::vector<uint32_t> splits;
    for (uint32_t i = node.min; i < node.max; ++i) {
      splits.push_back(here());
      if (!push({op::split, 0, here() + 1, 0}) || !emit(node.children[0])) {
        return false;
      }
    }
    for (uint32_t split : splits) {
      steps_[split].other = here();
    }
    return true;
  }

  const std::vector<node_t>& nodes_;
  std::vector<step_t>& steps_;
};

bool is_word(const char* name, size_t at, size_t length) {
  if (at >= length) {
    return false;
  }
  const unsigned char c = static_cast<unsigned char>(name[at]);
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The states live at one position of the name (those waiting for a byte); `seen` stamps which are in already.
struct state_list {
  std::vector<uint32_t> states;
  std::vector<size_t> seen;
  std::vector<uint32_t> pending;
};

// Adds `start` and every state it reaches without taking a byte, at position `at`; true when the match is
// among them. An explicit stack: no recursion, whatever the pattern.
bool follow(const std::vector<step_t>& steps, uint32_t start, const char* text, size_t length, size_t at,
            state_list* list) {
  list->pending.assign(1, start);
  while (!list->pending.empty()) {
    const uint32_t pc = list->pending.back();
    list->pending.pop_back();
    if (list->seen[pc] == at + 1) {
      continue;
    }
    list->seen[pc] = at + 1;
    const step_t& step = steps[pc];
    bool holds = false;
    switch (step.kind) {
      case op::match: return true;
      case op::byte: list->states.push_back(pc); break;
      case op::jump: list->pending.push_back(step.next); break;
      case op::split:
        list->pending.push_back(step.other);
        list->pending.push_back(step.next);
        break;
      case op::begin: holds = at == 0; break;
      case op::end: holds = at == length; break;
      case op::word_boundary: holds = is_word(text, at - 1, length) != is_word(text, at, length); break;
      case op::not_word_boundary: holds = is_word(text, at - 1, length) == is_word(text, at, length); break;
    }
    if (holds) {
      list->pending.push_back(pc + 1);
    }
  }
  return false;
}

}  // namespace

bool name_pattern::compile(const std::string& text, name_pattern* out, std::string* why) {
  std::vector<node_t> nodes;
  name_pattern pattern;
  uint32_t root = 0;
  if (!pattern_syntax::parse(text, &nodes, &pattern.sets_, &root, why)) {
    return false;
  }
  if (!emitter(nodes, &pattern.steps_).emit(root) || pattern.steps_.size() >= max_steps) {
    *why = "too large once its counts are expanded";
    return false;
  }
  pattern.steps_.push_back({op::match, 0, 0, 0});
  *out = std::move(pattern);
  return true;
}

bool name_pattern::search(const char* name) const {
  if (steps_.empty()) {
    return false;
  }
  const char* text = name != nullptr ? name : "";
  const size_t length = std::strlen(text);
  state_list lists[2];
  for (state_list& list : lists) {
    list.seen.assign(steps_.size(), 0);
  }
  for (size_t at = 0; at <= length; ++at) {
    state_list& now = lists[at % 2];
    // A new start at every position: the pattern is searched for, not matched against the whole name.
    if (follow(steps_, 0, text, length, at, &now)) {
      return true;
    }
    if (at == length) {
      break;
    }
    state_list& next = lists[(at + 1) % 2];
    next.states.clear();
    const unsigned char c = static_cast<unsigned char>(text[at]);
    for (uint32_t pc : now.states) {
      if (sets_[steps_[pc].set].test(c) && follow(steps_, pc + 1, text, length, at + 1, &next)) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace kreplay::cuda::inject
