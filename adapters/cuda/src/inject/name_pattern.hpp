// Kernel-name patterns (--kernel-name, --exclude): ECMAScript regular expressions, searched anywhere in a name.
//
// Why not std::regex, which did this before: the library is loaded into other people's processes and matches
// inside their launch callbacks, on their threads. libstdc++'s matcher recurses once per character for loops
// such as `.*`, and the mangled name of a templated kernel (CUTLASS, cuDNN) runs to thousands of characters: a
// deep enough recursion overflows a small thread stack and kills the program. It backtracks (exponential in the
// worst case), may throw regex_error(error_complexity / error_stack) while matching, inside a callback, and
// reads the program's global std::locale. Its code is instantiated from the headers of the compiler that built
// the library, whatever libstdc++ the program brings (rocprofiler-sdk keeps std::regex out of its tool library
// for that reason). This matcher is a Thompson NFA run breadth-first (a Pike VM without captures): time linear
// in the name, no recursion while matching, no exception, no locale (bytes; \d, \w, \s and [:classes:] are
// ASCII), and thread-safe.
//
// Syntax: everything of ECMAScript that describes a regular language, with std::regex's meaning: literals and
// escapes (\. \n \t \xHH \0 ...), `.` (any byte but \n and \r), classes `[a-z_]`, `[^0-9]`, `\d \D \w \W \s
// \S`, `[[:alpha:]]`, anchors `^ $ \b \B`, groups `( )` and `(?: )`, alternation `|`, quantifiers `* + ?
// {n} {n,} {n,m}` (lazy forms accepted: they match the same names). Refused, with the reason: back-references
// (\1), look-arounds ((?= (?! (?<), \c, \u and \k escapes, other letter escapes (\a, \z: std::regex took them as
// the letter), \0 followed by a digit, groups nested more than 16 deep and more than 8 quantifiers in a row.
#ifndef KREPLAY_CUDA_INJECT_NAME_PATTERN_HPP
#define KREPLAY_CUDA_INJECT_NAME_PATTERN_HPP

#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

namespace kreplay::cuda::inject {

class name_pattern {
 public:
  // False, with the reason in *why, when `text` is not a pattern of the syntax above (or is too large: more
  // than 1000 characters or 20000 steps once counted repetitions are expanded). *out is left as it was.
  static bool compile(const std::string& text, name_pattern* out, std::string* why);

  // Whether the pattern matches somewhere in `name` (std::regex_search's answer). A default-made pattern
  // matches nothing. Thread-safe.
  bool search(const char* name) const;

  // The compiled program, for compile's helpers: one step per NFA state.
  enum class op : uint8_t { byte, split, jump, begin, end, word_boundary, not_word_boundary, match };
  struct step_t {
    op kind;
    uint32_t set;   // op::byte: the bytes it takes (index into sets)
    uint32_t next;  // op::split, op::jump: where to go (op::split: one of two)
    uint32_t other; // op::split: the other
  };
  using byte_set = std::bitset<256>;

 private:
  std::vector<step_t> steps_;
  std::vector<byte_set> sets_;
};

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_NAME_PATTERN_HPP
