// THROW-AWAY STUB of the cubin reader's interface (/work/brief/cubin_api.md), used only while
// adapters/cuda/src/cubin.hpp has not landed in this branch. Delete this folder when it has.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kreplay::cuda::cubin {
enum class section_kind : uint8_t { global, global_init, constant };
struct variable_t {
  std::string name;
  uint64_t size;
  section_kind kind;
  uint32_t constant_bank;
};
enum class error_t : uint8_t {
  none, not_elf, unsupported_class, truncated, bad_section_table, bad_string_table, bad_symbol_table,
  unknown_section, out_of_memory,
};
struct module_symbols_t {
  error_t error = error_t::none;
  std::string detail;
  std::vector<variable_t> variables;
  std::vector<std::string> functions;
};
module_symbols_t read(const void* image, size_t size) noexcept;
const char* error_string(error_t error) noexcept;
}  // namespace kreplay::cuda::cubin
