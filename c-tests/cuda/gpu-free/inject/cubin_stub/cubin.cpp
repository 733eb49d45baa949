// THROW-AWAY STUB of the cubin reader (see cubin.hpp here): a minimal ELF64 symbol walk, enough for the
// injection's tests. The real reader is adapters/cuda/src/cubin.cpp.
#include "cubin.hpp"

#include <elf.h>

#include <algorithm>
#include <cstring>

namespace kreplay::cuda::cubin {

module_symbols_t read(const void* image, size_t size) noexcept {
  module_symbols_t out;
  try {
    const auto* bytes = static_cast<const unsigned char*>(image);
    if (size < sizeof(Elf64_Ehdr) || std::memcmp(bytes, ELFMAG, SELFMAG) != 0) {
      out.error = error_t::not_elf;
      return out;
    }
    Elf64_Ehdr header;
    std::memcpy(&header, bytes, sizeof(header));
    if (header.e_ident[EI_CLASS] != ELFCLASS64) {
      out.error = error_t::unsupported_class;
      return out;
    }
    if (header.e_shentsize != sizeof(Elf64_Shdr) || header.e_shoff > size ||
        (size - header.e_shoff) / sizeof(Elf64_Shdr) < header.e_shnum || header.e_shstrndx >= header.e_shnum) {
      out.error = error_t::bad_section_table;
      return out;
    }
    std::vector<Elf64_Shdr> sections(header.e_shnum);
    std::memcpy(sections.data(), bytes + header.e_shoff, sections.size() * sizeof(Elf64_Shdr));
    for (const Elf64_Shdr& s : sections) {
      if (s.sh_type != SHT_NOBITS && (s.sh_offset > size || s.sh_size > size - s.sh_offset)) {
        out.error = error_t::truncated;
        return out;
      }
    }
    auto name_in = [&](const Elf64_Shdr& table, uint32_t offset) -> const char* {
      if (offset >= table.sh_size) {
        return nullptr;
      }
      const char* base = reinterpret_cast<const char*>(bytes + table.sh_offset);
      return std::memchr(base + offset, 0, table.sh_size - offset) != nullptr ? base + offset : nullptr;
    };
    const Elf64_Shdr& names = sections[header.e_shstrndx];
    const Elf64_Shdr* symtab = nullptr;
    for (const Elf64_Shdr& s : sections) {
      if (s.sh_type == SHT_SYMTAB) {
        symtab = &s;
      }
    }
    if (symtab == nullptr || symtab->sh_link >= sections.size() || symtab->sh_entsize != sizeof(Elf64_Sym)) {
      out.error = error_t::bad_symbol_table;
      out.detail = "no .symtab";
      return out;
    }
    const Elf64_Shdr& strings = sections[symtab->sh_link];
    for (size_t i = 0; i < symtab->sh_size / sizeof(Elf64_Sym); ++i) {
      Elf64_Sym symbol;
      std::memcpy(&symbol, bytes + symtab->sh_offset + i * sizeof(Elf64_Sym), sizeof(symbol));
      const int type = ELF64_ST_TYPE(symbol.st_info);
      if (symbol.st_shndx == SHN_UNDEF || symbol.st_shndx >= sections.size() ||
          (type != STT_OBJECT && type != STT_FUNC)) {
        continue;
      }
      const char* name = name_in(strings, symbol.st_name);
      const char* section = name_in(names, sections[symbol.st_shndx].sh_name);
      if (name == nullptr || section == nullptr) {
        out.error = error_t::bad_string_table;
        return out;
      }
      if (type == STT_FUNC) {
        out.functions.emplace_back(name);
        continue;
      }
      variable_t variable{name, symbol.st_size, section_kind::global, 0};
      if (std::strncmp(section, ".nv.global.init", 15) == 0) {
        variable.kind = section_kind::global_init;
      } else if (std::strncmp(section, ".nv.global", 10) == 0) {
        variable.kind = section_kind::global;
      } else if (std::strncmp(section, ".nv.constant", 12) == 0) {
        variable.kind = section_kind::constant;
        variable.constant_bank = static_cast<uint32_t>(std::strtoul(section + 12, nullptr, 10));
      } else if (std::strncmp(section, ".nv.shared", 10) == 0 || std::strncmp(section, ".nv.local", 9) == 0) {
        continue;
      } else {
        out.error = error_t::unknown_section;
        out.detail = std::string(name) + " in " + section;
        return out;
      }
      out.variables.push_back(std::move(variable));
    }
    std::sort(out.variables.begin(), out.variables.end(),
              [](const variable_t& a, const variable_t& b) { return a.name < b.name; });
    std::sort(out.functions.begin(), out.functions.end());
  } catch (...) {
    out = module_symbols_t{};
    out.error = error_t::out_of_memory;
  }
  return out;
}

const char* error_string(error_t error) noexcept {
  switch (error) {
    case error_t::none: return "none";
    case error_t::not_elf: return "not an ELF image";
    case error_t::unsupported_class: return "not ELF64";
    case error_t::truncated: return "truncated";
    case error_t::bad_section_table: return "bad section table";
    case error_t::bad_string_table: return "bad string table";
    case error_t::bad_symbol_table: return "bad symbol table";
    case error_t::unknown_section: return "a variable in an unknown section";
    case error_t::out_of_memory: return "out of memory";
  }
  return "?";
}

}  // namespace kreplay::cuda::cubin
