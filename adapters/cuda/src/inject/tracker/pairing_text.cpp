// The words for a declined pairing (pair_modules' result), apart from the algorithm.
#include "tracker/pairing.hpp"

namespace kreplay::cuda::inject {

namespace {

std::string counted(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// The closest readable library by kernels in common: what the modules may be, for whoever reads the decline.
std::string closest_text(const pairing_input_t& input) {
  const closest_t& closest = input.closest;
  if (closest.as_close == 0) {
    return "; no readable library";
  }
  return "; the closest readable library has " + std::to_string(closest.common) + " of its " +
         std::to_string(closest.size) + " kernels among the module's " + std::to_string(input.kernels.size()) +
         (closest.as_close > 1 ? " (" + std::to_string(closest.as_close) + " libraries as close)" : std::string());
}

// The figures in parentheses that end every decline.
std::string figures(const pairing_input_t& input, bool with_closest) {
  return " (" + counted(input.kernels.size(), "entry kernel", "entry kernels") +
         (input.kernels.empty() ? std::string() : ", the first " + input.kernels.front()) + "; " +
         counted(input.libraries_known, "library", "libraries") + " known, " + std::to_string(input.unreadable) +
         " unreadable" + (with_closest ? closest_text(input) : std::string()) + ")";
}

std::string unequal_counts_text(const pairing_input_t& input) {
  const size_t through = input.through_handle;
  return counted(input.claimants.size(), "module", "modules") + " of its context (loaded outside any followed call" +
         (through > 0 ? ", and " + std::to_string(through) + " more through a module handle or a launch"
                      : std::string()) +
         ") and " + counted(input.candidates.size(), "known library", "known libraries") +
         (input.claimed > 0 ? " (besides " + std::to_string(input.claimed) + " whose module in this context is known)"
                            : std::string()) +
         " have exactly its kernels; only as many modules as libraries, all loaded outside any followed call, "
         "can be paired";
}

// The declines once the modules are grouped by their variables.
std::string grouped_text(const pairing_input_t& input, const pairing_result_t& result) {
  const std::string both = counted(input.claimants.size(), "module", "modules") + " of its context and " +
                           counted(input.candidates.size(), "known library", "known libraries") +
                           " have exactly its kernels";
  const std::string sets = std::to_string(result.sets) + " different sets of variables";
  switch (result.outcome) {
    case pairing_outcome::no_global_query:
      return both + ", but the modules define " + sets +
             " and the driver has no cuLibraryGetGlobal to tell which library has which";
    case pairing_outcome::ambiguous_library:
      return both + ", and the modules define " + sets + ", but a library's variables (cuLibraryGetGlobal) fit " +
             (result.fits == 0 ? std::string("none") : std::to_string(result.fits)) + " of them";
    default:
      return both + ", but a set of " + counted(result.set_variables, "variable", "variables") + " defined by " +
             counted(result.set_modules, "module", "modules") + " is found in " +
             counted(result.set_libraries, "library", "libraries") + " (cuLibraryGetGlobal)";
  }
}

}  // namespace

std::string decline_text(const pairing_input_t& input, const pairing_result_t& result) {
  switch (result.outcome) {
    case pairing_outcome::paired:
      return std::string();
    case pairing_outcome::no_library:
      return "no module or library handle was known on the loading thread and no known library has exactly its "
             "kernels" + std::string(kNotLocated) + figures(input, true);
    case pairing_outcome::unequal_counts:
      return unequal_counts_text(input) + kNotLocated + figures(input, false);
    default:
      return grouped_text(input, result) + kNotLocated + figures(input, false);
  }
}

}  // namespace kreplay::cuda::inject
