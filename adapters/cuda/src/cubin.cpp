// The cubin reader (cubin.hpp): ELF64 section headers, .shstrtab, .symtab and its .strtab, every field checked
// against the image's bounds before it is used.
#include "cubin.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <tuple>

namespace kreplay::cuda::cubin {
namespace {

// ELF constants (the System V gABI); NVIDIA's own values where they differ from it.
constexpr size_t elf_header_size = 64;
constexpr size_t section_header_size = 64;
constexpr size_t symbol_size = 24;
constexpr uint8_t elf_class_64 = 2;
constexpr uint8_t elf_data_little = 1;
constexpr uint16_t machine_cuda = 190;  // EM_CUDA
constexpr uint32_t type_null = 0;
constexpr uint32_t type_symtab = 2;
constexpr uint32_t type_strtab = 3;
constexpr uint32_t type_nobits = 8;
constexpr uint32_t type_symtab_shndx = 18;
constexpr uint16_t index_undefined = 0;
constexpr uint16_t index_reserved_low = 0xff00;
constexpr uint16_t index_extended = 0xffff;  // SHN_XINDEX: the index is in .symtab_shndx
constexpr uint8_t symbol_object = 1;
constexpr uint8_t symbol_func = 2;
constexpr uint8_t symbol_cuda_object = 13;  // STT_LOPROC: a variable in a relocatable (-rdc) cubin
// STO_CUDA_ENTRY in st_other: the function is a kernel (`__global__`), not a device function the compiler kept
// out of line (readelf -sW shows it as "[<other>: 10]").
constexpr uint8_t other_cuda_entry = 0x10;

struct section_t {
  uint32_t name_offset;
  uint32_t type;
  uint64_t offset;
  uint64_t size;
  uint32_t link;
  uint64_t entry_size;
  std::string_view name;
};

std::string hex(uint64_t value) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  do {
    text.insert(text.begin(), digits[value & 0xf]);
    value >>= 4;
  } while (value != 0);
  return "0x" + text;
}

// Reads a little-endian integer at `offset` if the image holds all of it.
template <typename T>
bool load(const uint8_t* image, size_t size, uint64_t offset, T& out) {
  if (offset > size || sizeof(T) > size - offset) {
    return false;
  }
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, image + offset, sizeof(T));
  uint64_t value = 0;
  for (size_t i = sizeof(T); i-- > 0;) {
    value = (value << 8) | bytes[i];
  }
  out = static_cast<T>(value);
  return true;
}

// True when [offset, offset + length) lies inside [0, limit).
bool fits(uint64_t offset, uint64_t length, uint64_t limit) { return offset <= limit && length <= limit - offset; }

// The NUL-terminated string at `offset` of a string table, or false if it is not wholly inside the table.
bool string_at(const uint8_t* image, const section_t& table, uint64_t offset, std::string_view& out) {
  if (offset >= table.size) {
    return false;
  }
  const char* start = reinterpret_cast<const char*>(image + table.offset + offset);
  const void* end = std::memchr(start, '\0', static_cast<size_t>(table.size - offset));
  if (end == nullptr) {
    return false;
  }
  out = std::string_view(start, static_cast<size_t>(static_cast<const char*>(end) - start));
  return true;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

// The kind and bank of a variable section's name; false for a section that holds no module variables.
bool classify(std::string_view name, section_kind& kind, uint32_t& bank) {
  bank = 0;
  if (name == ".nv.global") {
    kind = section_kind::global;
    return true;
  }
  if (name == ".nv.global.init") {
    kind = section_kind::global_init;
    return true;
  }
  constexpr std::string_view constant = ".nv.constant";
  if (!starts_with(name, constant) || name.size() == constant.size()) {
    return false;
  }
  uint64_t value = 0;
  for (char c : name.substr(constant.size())) {
    if (c < '0' || c > '9') {
      return false;
    }
    value = value * 10 + static_cast<uint64_t>(c - '0');
    if (value > UINT32_MAX) {
      return false;
    }
  }
  kind = section_kind::constant;
  bank = static_cast<uint32_t>(value);
  return true;
}

bool per_block_or_thread(std::string_view name) {
  return starts_with(name, ".nv.shared") || starts_with(name, ".nv.local");
}

class reader_t {
 public:
  reader_t(const uint8_t* image, size_t size, module_symbols_t& out) : image_(image), size_(size), out_(out) {}

  void run() {
    if (header() && section_table() && section_names() && symbols()) {
      std::sort(out_.variables.begin(), out_.variables.end(), [](const variable_t& a, const variable_t& b) {
        return std::tie(a.name, a.kind, a.constant_bank, a.size) < std::tie(b.name, b.kind, b.constant_bank, b.size);
      });
      std::sort(out_.functions.begin(), out_.functions.end());
      std::sort(out_.kernels.begin(), out_.kernels.end());
    }
  }

 private:
  bool fail(error_t error, std::string detail) {
    out_.error = error;
    out_.detail = std::move(detail);
    out_.variables.clear();
    out_.functions.clear();
    out_.kernels.clear();
    return false;
  }

  bool header() {
    static const uint8_t magic[4] = {0x7f, 'E', 'L', 'F'};
    if (image_ == nullptr) {
      return fail(error_t::not_elf, "null image");
    }
    if (size_ < sizeof magic || std::memcmp(image_, magic, sizeof magic) != 0) {
      return fail(error_t::not_elf, "no ELF magic at offset 0 (image of " + std::to_string(size_) + " bytes)");
    }
    if (size_ < elf_header_size) {
      return fail(error_t::truncated, "ELF header needs 64 bytes, image has " + std::to_string(size_));
    }
    if (image_[4] != elf_class_64 || image_[5] != elf_data_little) {
      return fail(error_t::unsupported_class, "ELF class " + std::to_string(image_[4]) + ", data encoding " +
                                                  std::to_string(image_[5]) + ": only ELF64 little-endian is read");
    }
    uint16_t machine = 0;
    load(image_, size_, 0x12, machine);
    if (machine != machine_cuda) {
      return fail(error_t::unsupported_class, "e_machine " + std::to_string(machine) + " is not EM_CUDA (190)");
    }
    return true;
  }

  bool section_table() {
    uint64_t table = 0;
    uint16_t entry_size = 0, count16 = 0, names16 = 0;
    load(image_, size_, 0x28, table);
    load(image_, size_, 0x3a, entry_size);
    load(image_, size_, 0x3c, count16);
    load(image_, size_, 0x3e, names16);
    if (table == 0) {
      return fail(error_t::bad_section_table, "e_shoff is 0: no section header table");
    }
    if (entry_size != section_header_size) {
      return fail(error_t::bad_section_table, "e_shentsize " + std::to_string(entry_size) + ", expected 64");
    }
    uint64_t programs = 0;
    uint16_t program_entry_size = 0, program_count = 0;
    load(image_, size_, 0x20, programs);
    load(image_, size_, 0x36, program_entry_size);
    load(image_, size_, 0x38, program_count);
    // Not read, but a table cut short means the image was too: its other contents cannot be trusted either.
    if (program_count != 0 && !fits(programs, uint64_t{program_count} * program_entry_size, size_)) {
      return fail(error_t::truncated, std::to_string(program_count) + " program headers at " + hex(programs) +
                                          " reach past the image's end (" + hex(size_) + ")");
    }
    section_t first{};
    if (!read_section(table, first)) {
      return fail(error_t::truncated, "section header table at " + hex(table) + " is past the image's end (" +
                                          hex(size_) + ")");
    }
    // ELF's escapes for more than 0xff00 sections: the real count and name-table index are in section 0.
    const uint64_t count = count16 != 0 ? count16 : first.size;
    names_index_ = names16 != index_extended ? names16 : first.link;
    if (count == 0) {
      return fail(error_t::bad_section_table, "no sections");
    }
    if ((size_ - table) / section_header_size < count) {
      return fail(error_t::truncated, std::to_string(count) + " section headers at " + hex(table) +
                                          " reach past the image's end (" + hex(size_) + ")");
    }
    sections_.resize(static_cast<size_t>(count));
    for (size_t i = 0; i < sections_.size(); ++i) {
      section_t& section = sections_[i];
      read_section(table + i * section_header_size, section);
      if (section.type != type_null && section.type != type_nobits && !fits(section.offset, section.size, size_)) {
        return fail(error_t::truncated, "section [" + std::to_string(i) + "] at " + hex(section.offset) + ", " +
                                            hex(section.size) + " bytes, reaches past the image's end (" +
                                            hex(size_) + ")");
      }
    }
    return true;
  }

  bool read_section(uint64_t at, section_t& section) {
    if (!fits(at, section_header_size, size_)) {
      return false;
    }
    load(image_, size_, at + 0x00, section.name_offset);
    load(image_, size_, at + 0x04, section.type);
    load(image_, size_, at + 0x18, section.offset);
    load(image_, size_, at + 0x20, section.size);
    load(image_, size_, at + 0x28, section.link);
    load(image_, size_, at + 0x38, section.entry_size);
    return true;
  }

  bool section_names() {
    if (names_index_ == index_undefined || names_index_ >= sections_.size()) {
      return fail(error_t::bad_string_table, "section name table index " + std::to_string(names_index_) +
                                                 " is not one of the " + std::to_string(sections_.size()) +
                                                 " sections");
    }
    const section_t& names = sections_[names_index_];
    if (names.type != type_strtab) {
      return fail(error_t::bad_string_table, "section name table [" + std::to_string(names_index_) + "] has type " +
                                                 std::to_string(names.type) + ", not SHT_STRTAB");
    }
    for (size_t i = 1; i < sections_.size(); ++i) {
      if (!string_at(image_, names, sections_[i].name_offset, sections_[i].name)) {
        return fail(error_t::bad_string_table, "section [" + std::to_string(i) + "]: name offset " +
                                                   hex(sections_[i].name_offset) + " is not a string inside " +
                                                   "the section name table (" + hex(names.size) + " bytes)");
      }
    }
    return true;
  }

  // The symbol table and its string table are checked first; then each symbol in turn, skipping entry 0.
  bool symbols() {
    size_t symtab = 0;
    if (!find_symbol_table(symtab) || !check_symbol_table(sections_[symtab])) {
      return false;
    }
    const section_t& table = sections_[symtab];
    const section_t& strings = sections_[table.link];
    const section_t* extended = extended_indices(symtab);
    const uint64_t count = table.size / symbol_size;
    for (uint64_t i = 1; i < count; ++i) {
      if (!symbol(i, table.offset + i * symbol_size, strings, extended)) {
        return false;
      }
    }
    return true;
  }

  // Exactly one SHT_SYMTAB section.
  bool find_symbol_table(size_t& symtab) {
    for (size_t i = 1; i < sections_.size(); ++i) {
      if (sections_[i].type != type_symtab) {
        continue;
      }
      if (symtab != 0) {
        return fail(error_t::bad_symbol_table, "two symbol tables: sections [" + std::to_string(symtab) + "] and [" +
                                                   std::to_string(i) + "]");
      }
      symtab = i;
    }
    if (symtab == 0) {
      return fail(error_t::bad_symbol_table, "no .symtab: a stripped image, its variables cannot be named");
    }
    return true;
  }

  bool check_symbol_table(const section_t& table) {
    if (table.entry_size != symbol_size || table.size % symbol_size != 0) {
      return fail(error_t::bad_symbol_table, "'" + std::string(table.name) + "': entry size " +
                                                 std::to_string(table.entry_size) + " and size " + hex(table.size) +
                                                 " are not 24-byte symbols");
    }
    if (table.link == index_undefined || table.link >= sections_.size() ||
        sections_[table.link].type != type_strtab) {
      return fail(error_t::bad_string_table, "'" + std::string(table.name) + "' links section " +
                                                 std::to_string(table.link) + ", which is not a string table");
    }
    return true;
  }

  // The .symtab_shndx section that belongs to the symbol table, if any (the last one when there are several).
  const section_t* extended_indices(size_t symtab) const {
    const section_t* extended = nullptr;
    for (size_t i = 1; i < sections_.size(); ++i) {
      if (sections_[i].type == type_symtab_shndx && sections_[i].link == symtab) {
        extended = &sections_[i];
      }
    }
    return extended;
  }

  // Checks the symbol at `at` (entry `i`) and records it if it is a variable or a function defined in this module.
  bool symbol(uint64_t i, uint64_t at, const section_t& strings, const section_t* extended) {
    uint32_t name_offset = 0;
    uint8_t info = 0;
    uint8_t other = 0;
    uint16_t index16 = 0;
    uint64_t value = 0, length = 0;
    load(image_, size_, at + 0, name_offset);
    load(image_, size_, at + 4, info);
    load(image_, size_, at + 5, other);
    load(image_, size_, at + 6, index16);
    load(image_, size_, at + 8, value);
    load(image_, size_, at + 16, length);
    const uint8_t type = info & 0xf;
    if (type != symbol_object && type != symbol_func && type != symbol_cuda_object) {
      return true;
    }
    if (index16 == index_undefined) {
      return true;  // declared here, defined in another module
    }
    std::string_view name;
    if (!string_at(image_, strings, name_offset, name)) {
      return fail(error_t::bad_string_table, "symbol " + std::to_string(i) + ": name offset " +
                                                 hex(name_offset) + " is not a string inside '" +
                                                 std::string(strings.name) + "' (" + hex(strings.size) + " bytes)");
    }
    if (name.empty()) {
      return fail(error_t::bad_symbol_table, "symbol " + std::to_string(i) + " has no name");
    }
    uint64_t index = 0;
    if (!section_index(i, name, index16, type, extended, index)) {
      return false;
    }
    const section_t& section = sections_[static_cast<size_t>(index)];
    if (!fits(value, length, section.size)) {
      return fail(error_t::bad_symbol_table, "symbol '" + std::string(name) + "' at " + hex(value) + ", " +
                                                 hex(length) + " bytes, reaches past the end of '" +
                                                 std::string(section.name) + "' (" + hex(section.size) + " bytes)");
    }
    return record(name, type, other, length, section, index);
  }

  // The section that holds symbol `i`: st_shndx, or its .symtab_shndx entry when st_shndx is SHN_XINDEX.
  bool section_index(uint64_t i, std::string_view name, uint16_t index16, uint8_t type, const section_t* extended,
                     uint64_t& index) {
    index = index16;
    if (index16 == index_extended) {
      uint32_t index32 = 0;
      if (extended == nullptr || !fits(i * 4, 4, extended->size) ||
          !load(image_, size_, extended->offset + i * 4, index32)) {
        return fail(error_t::bad_symbol_table, "symbol '" + std::string(name) +
                                                   "': extended section index without a .symtab_shndx entry");
      }
      index = index32;
    } else if (index16 >= index_reserved_low) {
      // SHN_ABS, SHN_COMMON and the like: no section of the module holds it.
      const error_t error = type == symbol_func ? error_t::bad_symbol_table : error_t::unknown_section;
      return fail(error, "symbol '" + std::string(name) + "' has the special section index " + hex(index16));
    }
    if (index == index_undefined || index >= sections_.size()) {
      return fail(error_t::bad_symbol_table, "symbol '" + std::string(name) + "': section index " +
                                                 std::to_string(index) + " is not one of the " +
                                                 std::to_string(sections_.size()) + " sections");
    }
    return true;
  }

  // A function (and whether it is a kernel), or a variable with the kind of memory its section says.
  bool record(std::string_view name, uint8_t type, uint8_t other, uint64_t length, const section_t& section,
              uint64_t index) {
    if (type == symbol_func) {
      out_.functions.emplace_back(name);
      if ((other & other_cuda_entry) != 0) {
        out_.kernels.emplace_back(name);
      }
      return true;
    }
    if (per_block_or_thread(section.name)) {
      return true;
    }
    section_kind kind = section_kind::global;
    uint32_t bank = 0;
    if (!classify(section.name, kind, bank)) {
      return fail(error_t::unknown_section, "variable '" + std::string(name) + "' is in section [" +
                                                std::to_string(index) + "] '" + std::string(section.name) +
                                                "', not .nv.global, .nv.global.init or .nv.constant<N>");
    }
    out_.variables.push_back(variable_t{std::string(name), length, kind, bank});
    return true;
  }

  const uint8_t* image_;
  size_t size_;
  module_symbols_t& out_;
  std::vector<section_t> sections_;
  uint64_t names_index_ = 0;
};

}  // namespace

module_symbols_t read(const void* image, size_t size) noexcept {
  module_symbols_t out;
  try {
    reader_t(static_cast<const uint8_t*>(image), size, out).run();
  } catch (const std::exception&) {
    // Only allocations throw here (std::bad_alloc, or std::length_error for a size no image can hold).
    out.variables.clear();
    out.functions.clear();
    out.kernels.clear();
    out.detail.clear();
    out.error = error_t::out_of_memory;
  }
  return out;
}

const char* error_string(error_t error) noexcept {
  switch (error) {
    case error_t::none: return "none";
    case error_t::not_elf: return "not an ELF image";
    case error_t::unsupported_class: return "not an ELF64 little-endian CUDA image";
    case error_t::truncated: return "truncated";
    case error_t::bad_section_table: return "bad section header table";
    case error_t::bad_string_table: return "bad string table";
    case error_t::bad_symbol_table: return "bad symbol table";
    case error_t::unknown_section: return "variable in an unknown section";
    case error_t::out_of_memory: return "out of memory";
  }
  return "unknown error";
}

}  // namespace kreplay::cuda::cubin
