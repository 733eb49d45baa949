// The parser of name_pattern's syntax (name_pattern.hpp): recursive descent over ECMAScript's grammar, its
// depth bounded by the pattern's nesting (max_depth), into the tree of name_pattern_syntax.hpp.
#include "name_pattern_syntax.hpp"

namespace kreplay::cuda::inject::pattern_syntax {
namespace {

using byte_set = name_pattern::byte_set;
using op = name_pattern::op;

constexpr size_t max_length = 1000;
// The tree's depth is at most max_depth x (max_stacked + 1): the emitter recurses once a level, so this bounds the
// stack a pattern can take (a few hundred frames), whichever thread compiles it (InitializeInjection's).
constexpr int max_depth = 16;
constexpr int max_stacked = 8;  // quantifiers in a row on one term
constexpr uint32_t max_count = 1000;

byte_set range(unsigned char first, unsigned char last) {
  byte_set set;
  for (unsigned c = first; c <= last; ++c) {
    set.set(c);
  }
  return set;
}

byte_set digits() { return range('0', '9'); }
byte_set words() { return range('a', 'z') | range('A', 'Z') | digits() | range('_', '_'); }
byte_set spaces() { return range('\t', '\r') | range(' ', ' '); }

// [:name:] inside a class (libstdc++ takes them in ECMAScript too), ASCII.
bool posix_class(const std::string& name, byte_set* out) {
  const byte_set lower = range('a', 'z'), upper = range('A', 'Z');
  const byte_set graph = range('!', '~');
  const struct { const char* name; byte_set set; } classes[] = {
      {"alpha", lower | upper}, {"digit", digits()}, {"alnum", lower | upper | digits()},
      {"lower", lower},         {"upper", upper},    {"space", spaces()},
      {"xdigit", digits() | range('a', 'f') | range('A', 'F')},
      {"punct", graph & ~(lower | upper | digits())}, {"w", words()}, {"blank", range(' ', ' ') | range('\t', '\t')},
      {"cntrl", range(0, 31) | range(127, 127)}, {"graph", graph}, {"print", graph | range(' ', ' ')}};
  for (const auto& entry : classes) {
    if (name == entry.name) {
      *out = entry.set;
      return true;
    }
  }
  return false;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Recursive descent over ECMAScript's grammar: disjunction := alternative ('|' alternative)*,
// alternative := term*, term := assertion | atom quantifier?.
class parser {
 public:
  parser(const std::string& text, std::vector<node_t>* nodes, std::vector<byte_set>* sets)
      : text_(text), nodes_(*nodes), sets_(*sets) {}

  bool parse(uint32_t* root, std::string* why) {
    if (text_.size() > max_length) {
      *why = "longer than 1000 characters";
      return false;
    }
    if (!disjunction(root, 0) || (at_ < text_.size() && !fail("unmatched ')'"))) {
      *why = why_;
      return false;
    }
    return true;
  }

 private:
  bool fail(const char* why) {
    why_ = why;
    return false;
  }
  bool more() const { return at_ < text_.size(); }
  char peek() const { return text_[at_]; }

  uint32_t add(node_t node) {
    nodes_.push_back(std::move(node));
    return static_cast<uint32_t>(nodes_.size() - 1);
  }
  uint32_t add_set(const byte_set& set) {
    sets_.push_back(set);
    return add({node_t::type::set, static_cast<uint32_t>(sets_.size() - 1), 0, 0, {}});
  }
  uint32_t add_assertion(op kind) { return add({node_t::type::assertion, static_cast<uint32_t>(kind), 0, 0, {}}); }

  bool disjunction(uint32_t* out, int depth) {
    if (depth > max_depth) {
      return fail("groups nested more than 100 deep");
    }
    node_t alternate{node_t::type::alternate, 0, 0, 0, {}};
    do {
      uint32_t branch = 0;
      if (!alternative(&branch, depth)) {
        return false;
      }
      alternate.children.push_back(branch);
    } while (more() && peek() == '|' && ++at_ != 0);
    *out = alternate.children.size() == 1 ? alternate.children[0] : add(std::move(alternate));
    return true;
  }

  bool alternative(uint32_t* out, int depth) {
    node_t concat{node_t::type::concat, 0, 0, 0, {}};
    while (more() && peek() != '|' && peek() != ')') {
      uint32_t term = 0;
      bool assertion = false;
      if (!atom(&term, &assertion, depth)) {
        return false;
      }
      if (!quantifier(&term, assertion)) {
        return false;
      }
      concat.children.push_back(term);
    }
    *out = add(std::move(concat));
    return true;
  }

  bool atom(uint32_t* out, bool* assertion, int depth) {
    const char c = text_[at_++];
    switch (c) {
      case '^': *assertion = true; *out = add_assertion(op::begin); return true;
      case '$': *assertion = true; *out = add_assertion(op::end); return true;
      case '.': *out = add_set(~(range('\n', '\n') | range('\r', '\r'))); return true;
      case '(': return group(out, depth);
      case '[': return char_class(out);
      case '\\': return escape(out, assertion);
      case '*': case '+': case '?': return fail("nothing to repeat before a quantifier");
      case '{': return fail("'{' that does not repeat anything");
      default: *out = add_set(range(c, c)); return true;
    }
  }

  bool group(uint32_t* out, int depth) {
    if (more() && peek() == '?') {
      if (text_.compare(at_, 2, "?:") != 0) {
        return fail("look-arounds ((?= (?! (?<) are not taken");
      }
      at_ += 2;
    }
    if (!disjunction(out, depth + 1)) {
      return false;
    }
    if (!more() || peek() != ')') {
      return fail("missing ')'");
    }
    ++at_;
    return true;
  }

  // After a backslash outside a class.
  bool escape(uint32_t* out, bool* assertion) {
    if (!more()) {
      return fail("a trailing backslash");
    }
    const char c = peek();
    if (c == 'b' || c == 'B') {
      ++at_;
      *assertion = true;
      *out = add_assertion(c == 'b' ? op::word_boundary : op::not_word_boundary);
      return true;
    }
    byte_set set;
    if (!escaped_set(&set)) {
      return false;
    }
    *out = add_set(set);
    return true;
  }

  // The bytes an escape stands for (\d, \n, \xHH, \., ...), past the backslash; also inside classes.
  bool escaped_set(byte_set* out) {
    const char c = text_[at_++];
    switch (c) {
      case 'd': *out = digits(); return true;
      case 'D': *out = ~digits(); return true;
      case 'w': *out = words(); return true;
      case 'W': *out = ~words(); return true;
      case 's': *out = spaces(); return true;
      case 'S': *out = ~spaces(); return true;
      case 'f': *out = range('\f', '\f'); return true;
      case 'n': *out = range('\n', '\n'); return true;
      case 'r': *out = range('\r', '\r'); return true;
      case 't': *out = range('\t', '\t'); return true;
      case 'v': *out = range('\v', '\v'); return true;
      case 'x': return hex_escape(out);
      case '0':
        if (more() && peek() >= '0' && peek() <= '9') {
          return fail("an octal escape");
        }
        *out = range(0, 0);
        return true;
      default: break;
    }
    if (c >= '1' && c <= '9') {
      return fail("back-references (\\1 ...) are not taken");
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      return fail("an escape this matcher does not take (\\c, \\u, \\k or unknown)");
    }
    *out = range(c, c);
    return true;
  }

  bool hex_escape(byte_set* out) {
    if (at_ + 2 > text_.size() || hex_value(text_[at_]) < 0 || hex_value(text_[at_ + 1]) < 0) {
      return fail("\\x without two hexadecimal digits");
    }
    const int value = hex_value(text_[at_]) * 16 + hex_value(text_[at_ + 1]);
    at_ += 2;
    *out = range(static_cast<unsigned char>(value), static_cast<unsigned char>(value));
    return true;
  }

  bool char_class(uint32_t* out);
  bool class_atom(byte_set* set, int* single);
  bool quantifier(uint32_t* term, bool assertion, int stacked = 0);
  bool count(uint32_t* value);

  const std::string& text_;
  std::vector<node_t>& nodes_;
  std::vector<byte_set>& sets_;
  size_t at_ = 0;
  std::string why_;
};

// [...] after the '['.
bool parser::char_class(uint32_t* out) {
  const bool negate = more() && peek() == '^';
  at_ += negate ? 1 : 0;
  byte_set set;
  while (more() && peek() != ']') {  // [] is empty: it matches nothing, as in ECMAScript
    byte_set item;
    int low = -1;
    if (!class_atom(&item, &low)) {
      return false;
    }
    if (more() && peek() == '-' && at_ + 1 < text_.size() && text_[at_ + 1] != ']') {
      ++at_;
      byte_set ignored;
      int high = -1;
      if (!class_atom(&ignored, &high)) {
        return false;
      }
      if (low < 0 || high < 0 || high < low) {
        return fail("a bad range in a class");
      }
      item = range(static_cast<unsigned char>(low), static_cast<unsigned char>(high));
    }
    set |= item;
  }
  if (!more()) {
    return fail("missing ']'");
  }
  ++at_;
  *out = add_set(negate ? ~set : set);
  return true;
}

// One member of a class: a byte (*single is it), an escape or a [:name:].
bool parser::class_atom(byte_set* set, int* single) {
  const char c = text_[at_++];
  if (c == '[' && more() && (peek() == ':' || peek() == '=' || peek() == '.')) {
    const size_t close = text_.find(std::string(1, peek()) + "]", at_ + 1);
    if (peek() != ':' || close == std::string::npos || !posix_class(text_.substr(at_ + 1, close - at_ - 1), set)) {
      return fail("a bracket expression other than [:alpha:], [:digit:] and the like");
    }
    at_ = close + 2;
    return true;
  }
  if (c != '\\') {
    *set = range(c, c);
    *single = static_cast<unsigned char>(c);
    return true;
  }
  if (more() && (peek() == 'b' || peek() == '-')) {  // \b is a backspace inside a class
    *single = peek() == 'b' ? '\b' : '-';
    ++at_;
    *set = range(static_cast<unsigned char>(*single), static_cast<unsigned char>(*single));
    return true;
  }
  if (!more()) {
    return fail("a trailing backslash");
  }
  if (!escaped_set(set)) {
    return false;
  }
  if (set->count() == 1) {
    for (int b = 0; b < 256; ++b) {
      *single = set->test(b) ? b : *single;
    }
  }
  return true;
}

bool parser::quantifier(uint32_t* term, bool assertion, int stacked) {
  if (!more()) {
    return true;
  }
  uint32_t min = 0, max = unbounded;
  const char c = peek();
  if (c == '*' || c == '+' || c == '?') {
    min = c == '+' ? 1 : 0;
    max = c == '?' ? 1 : unbounded;
    ++at_;
  } else if (c == '{') {
    ++at_;
    if (!count(&min)) {
      return false;
    }
    max = min;
    if (more() && peek() == ',') {
      ++at_;
      max = more() && peek() == '}' ? unbounded : 0;
      if (max != unbounded && !count(&max)) {
        return false;
      }
    }
    if (!more() || peek() != '}' || max < min) {
      return fail("a bad count {n}, {n,} or {n,m}");
    }
    ++at_;
  } else {
    return true;
  }
  if (assertion) {
    return fail("a quantifier after an anchor");
  }
  at_ += more() && peek() == '?' ? 1 : 0;  // lazy: the same names match
  // Another quantifier repeats this one, as std::regex takes it: a** is (a*)*. Each one is a level of the tree
  // that the emitter recurses into, so a few are accepted, never a run that could exhaust a thread's stack.
  if (stacked == max_stacked) {
    return fail("more than 8 quantifiers in a row");
  }
  *term = add({node_t::type::repeat, 0, min, max, {*term}});
  return quantifier(term, false, stacked + 1);
}

bool parser::count(uint32_t* value) {
  if (!more() || peek() < '0' || peek() > '9') {
    return fail("a bad count {n}, {n,} or {n,m}");
  }
  uint64_t number = 0;
  while (more() && peek() >= '0' && peek() <= '9') {
    number = number * 10 + static_cast<uint64_t>(peek() - '0');
    if (number > max_count) {
      return fail("a count over 1000");
    }
    ++at_;
  }
  *value = static_cast<uint32_t>(number);
  return true;
}

}  // namespace

bool parse(const std::string& text, std::vector<node_t>* nodes, std::vector<byte_set>* sets, uint32_t* root,
           std::string* why) {
  return parser(text, nodes, sets).parse(root, why);
}

}  // namespace kreplay::cuda::inject::pattern_syntax
