// The pairing of modules loaded outside any followed call with the known libraries that have their kernels: a
// pure function from plain inputs to a result, and the decline text written from that result.
//
// The premise, as for every such load: each of these modules is the module, in its context, of a library the
// tracker saw loaded, and a library has one module per context. With K the modules' entry kernels:
// - the candidates are the libraries whose kernels are exactly K, less those whose module in the context is
//   known (a module with kernels K loaded inside a call on that library);
// - the claimants are the context's modules with kernels K loaded outside any followed call. A module with
//   kernels K loaded through a module handle or a launch (its library unknown) makes the whole group a decline;
// - k claimants and k candidates are paired, or the group is declined. Which claimant is which candidate's
//   module nothing tells, but modules that define the same variables (names, sizes, kinds) are interchangeable
//   for capture: any one-to-one pairing captures the same variables. So claimants with the same variables are
//   paired in order (by id, libraries by handle) with as many libraries whose module has those variables. Where
//   the claimants define different sets of variables, each library is asked for every set's names (a global by
//   name, cuLibraryGetGlobal in the context): its module's set is the one, among those it has every variable of
//   (name and size), that includes all the others it has. A library that fits no set, or two, and a set found in
//   a number of libraries other than its number of modules, decline the group.
// - More candidates than claimants (a surplus) can be told apart only under eager loading, where asking a library
//   for a global loads nothing: every library's module is in every context already, and a library that has none
//   of a group's variables is another library's (a translation unit's variables carry its hash in their names,
//   so they are found in one library only). Under lazy loading the question could load a module inside kreplay's
//   own call, where it would go untracked.
#ifndef KREPLAY_CUDA_INJECT_TRACKER_PAIRING_HPP
#define KREPLAY_CUDA_INJECT_TRACKER_PAIRING_HPP

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <cuda.h>

#include "cubin.hpp"

namespace kreplay::cuda::inject {

// The end of every text that says a module cannot be paired.
inline constexpr const char* kNotLocated = ", so its variables cannot be located exactly";

// A module's variables as (name, size, kind), sorted: modules with equal sets are interchangeable for capture.
using variable_set_t = std::vector<std::tuple<std::string, uint64_t, cubin::section_kind>>;
variable_set_t variable_set(const std::vector<cubin::variable_t>& variables);

// A module loaded outside any followed call, waiting for its library.
struct claimant_t {
  uint32_t id;
  variable_set_t variables;
};

// The readable library with the most kernel names in common with the group (for the decline text).
struct closest_t {
  size_t as_close = 0;  // libraries with that many in common (0: no readable library)
  size_t common = 0;    // kernel names in common
  size_t size = 0;      // that library's kernels
};
closest_t closest_library(const std::vector<const std::vector<std::string>*>& readable,
                          const std::vector<std::string>& kernels);

struct pairing_input_t {
  std::vector<std::string> kernels;   // K, the group's entry kernels, sorted
  std::vector<CUlibrary> candidates;  // ordered by handle
  std::vector<claimant_t> claimants;  // ordered by id
  size_t claimed = 0;                 // libraries with kernels K whose module in the context is known
  size_t through_handle = 0;          // the context's modules with kernels K loaded through a handle or a launch
  bool eager_loading = false;         // CUDA_MODULE_LOADING=EAGER: a surplus of candidates may be told apart
  // Only for the decline text.
  size_t libraries_known = 0;
  size_t unreadable = 0;              // libraries whose kernels could not be read
  closest_t closest;                  // filled where no library has kernels K
};

// Asks `library` for its global `name`: true, with its size in *bytes, where it has one. Empty where the driver
// cannot answer (no cuLibraryGetGlobal).
using ask_global_t = std::function<bool(CUlibrary library, const char* name, size_t* bytes)>;

enum class pairing_outcome : uint8_t {
  paired,             // every claimant has its library
  no_library,         // no library has kernels K, and no module with them came through a handle
  unequal_counts,     // a module came through a handle, or as many candidates as claimants are not
  no_global_query,    // the claimants define several sets of variables and libraries cannot be asked
  ambiguous_library,  // a library's globals fit none of the sets, or several
  unequal_set,        // a set of variables is found in more or fewer libraries than modules define it
};

struct pairing_result_t {
  pairing_outcome outcome = pairing_outcome::paired;
  std::map<uint32_t, CUlibrary> library;  // claimant id -> its library; empty unless paired
  size_t sets = 0;                        // different sets of variables among the claimants (once grouped)
  size_t fits = 0;                        // ambiguous_library: how many sets the library fits
  size_t set_variables = 0;               // unequal_set: the set's variables,
  size_t set_modules = 0;                 //   the modules that define it,
  size_t set_libraries = 0;               //   and the libraries found to have it
};

// Pure: asks nothing but `ask`, and that only where the claimants must be told apart by their variables.
pairing_result_t pair_modules(const pairing_input_t& input, const ask_global_t& ask);

// Why the group was declined, in words and figures ("" when paired).
std::string decline_text(const pairing_input_t& input, const pairing_result_t& result);

}  // namespace kreplay::cuda::inject

#endif  // KREPLAY_CUDA_INJECT_TRACKER_PAIRING_HPP
