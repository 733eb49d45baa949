// Reading entries of the HSA API tables with regard to the size the runtime gave them.
#ifndef KREPLAY_HSA_TABLE_HPP
#define KREPLAY_HSA_TABLE_HPP

#include <hsa/hsa_api_trace.h>

#include <cstddef>
#include <type_traits>

// A table's version.minor_id holds sizeof(table) as the runtime compiled it: an entry past it does not exist
// in that runtime (an older one), whatever these headers say. Evaluates to the entry, or NULL when it lies
// beyond the runtime's table.
#define KREPLAY_HSA_ENTRY(table, field)                                                                       \
  ((table)->version.minor_id >=                                                                               \
           offsetof(std::remove_cv_t<std::remove_pointer_t<decltype(table)>>, field) + sizeof((table)->field) \
       ? (table)->field                                                                                       \
       : nullptr)

#endif  // KREPLAY_HSA_TABLE_HPP
