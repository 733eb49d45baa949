#include "tracker/pairing.hpp"

#include <algorithm>
#include <set>
#include <utility>

namespace kreplay::cuda::inject {

namespace {

using groups_t = std::map<variable_set_t, std::vector<uint32_t>>;          // the claimants' ids by their set
using homes_t = std::map<const variable_set_t*, std::vector<CUlibrary>>;  // the libraries found to have a set

// How many names two sorted lists have in common.
size_t common_names(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t n = 0;
  for (auto i = a.begin(), j = b.begin(); i != a.end() && j != b.end();) {
    if (*i < *j) {
      ++i;
    } else if (*j < *i) {
      ++j;
    } else {
      ++n;
      ++i;
      ++j;
    }
  }
  return n;
}

// (name, size) of each variable: what a library can be asked for by name.
std::set<std::pair<std::string, uint64_t>> names_and_sizes(const variable_set_t& variables) {
  std::set<std::pair<std::string, uint64_t>> out;
  for (const auto& [name, size, kind] : variables) {
    out.emplace(name, size);
  }
  return out;
}

// The sets of which `library` has every variable, by name and size.
std::vector<const variable_set_t*> sets_in(CUlibrary library, const groups_t& groups, const ask_global_t& ask) {
  std::vector<const variable_set_t*> fits;
  for (const auto& [set, ids] : groups) {
    bool all = true;
    for (size_t i = 0; all && i < set.size(); ++i) {
      size_t bytes = 0;
      all = ask(library, std::get<0>(set[i]).c_str(), &bytes) && bytes == std::get<1>(set[i]);
    }
    if (all) {
      fits.push_back(&set);
    }
  }
  return fits;
}

// The set among `fits` that includes every other one (the library's own module's), and in *found how many do.
const variable_set_t* home_of(const std::vector<const variable_set_t*>& fits, size_t* found) {
  const variable_set_t* home = nullptr;
  *found = 0;
  for (const variable_set_t* candidate : fits) {
    const auto outer = names_and_sizes(*candidate);
    bool covers = true;
    for (const variable_set_t* other : fits) {
      const auto inner = names_and_sizes(*other);
      covers = covers && std::includes(outer.begin(), outer.end(), inner.begin(), inner.end());
    }
    if (covers) {
      home = candidate;
      ++*found;
    }
  }
  return home;
}

// Each candidate under the set its module defines; false (with the outcome) at a library that fits none of the
// sets (where no surplus allows it) or several.
bool place(const pairing_input_t& input, const groups_t& groups, bool surplus, const ask_global_t& ask,
           homes_t* homes, pairing_result_t* out) {
  for (CUlibrary library : input.candidates) {
    size_t found = 0;
    const variable_set_t* home = home_of(sets_in(library, groups, ask), &found);
    if (found == 0 && surplus) {
      continue;  // the module of a library none of these modules is
    }
    if (found != 1) {
      out->outcome = pairing_outcome::ambiguous_library;
      out->fits = found;
      return false;
    }
    (*homes)[home].push_back(library);
  }
  return true;
}

// Each set's claimants paired in order with its libraries; false (with the outcome) where the counts differ.
bool assign(const groups_t& groups, homes_t& homes, pairing_result_t* out) {
  for (const auto& [set, ids] : groups) {
    const std::vector<CUlibrary>& libraries = homes[&set];
    if (libraries.size() != ids.size()) {
      out->library.clear();
      out->outcome = pairing_outcome::unequal_set;
      out->set_variables = set.size();
      out->set_modules = ids.size();
      out->set_libraries = libraries.size();
      return false;
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      out->library[ids[i]] = libraries[i];
    }
  }
  return true;
}

}  // namespace

variable_set_t variable_set(const std::vector<cubin::variable_t>& variables) {
  variable_set_t out;
  out.reserve(variables.size());
  for (const cubin::variable_t& variable : variables) {
    out.emplace_back(variable.name, variable.size, variable.kind);
  }
  std::sort(out.begin(), out.end());
  return out;
}

closest_t closest_library(const std::vector<const std::vector<std::string>*>& readable,
                          const std::vector<std::string>& kernels) {
  closest_t out;
  for (const std::vector<std::string>* names : readable) {
    const size_t shared = common_names(*names, kernels);
    if (out.as_close == 0 || shared > out.common) {
      out = closest_t{1, shared, names->size()};
    } else if (shared == out.common) {
      ++out.as_close;
    }
  }
  return out;
}

pairing_result_t pair_modules(const pairing_input_t& input, const ask_global_t& ask) {
  pairing_result_t out;
  const size_t k = input.claimants.size();
  const size_t candidates = input.candidates.size();
  if (candidates == 0 && input.claimed == 0 && input.through_handle == 0) {
    out.outcome = pairing_outcome::no_library;
    return out;
  }
  const bool surplus = candidates > k && k > 0 && input.eager_loading && ask && input.through_handle == 0;
  if (input.through_handle > 0 || (candidates != k && !surplus)) {
    out.outcome = pairing_outcome::unequal_counts;
    return out;
  }
  groups_t groups;
  for (const claimant_t& claimant : input.claimants) {
    groups[claimant.variables].push_back(claimant.id);
  }
  out.sets = groups.size();
  homes_t homes;
  if (groups.size() == 1 && !surplus) {
    homes[&groups.begin()->first] = input.candidates;
  } else if (!ask) {
    out.outcome = pairing_outcome::no_global_query;
    return out;
  } else if (!place(input, groups, surplus, ask, &homes, &out)) {
    return out;
  }
  assign(groups, homes, &out);
  return out;
}

}  // namespace kreplay::cuda::inject
