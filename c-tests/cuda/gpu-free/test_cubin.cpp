// GPU-free test of the cubin reader (adapters/cuda/src/cubin.hpp) on cubins that nvcc made in this build
// (CMakeLists.txt): every variable of the sources found with its name, size and kind; a stripped cubin and
// corrupt ones (cut at every length, bad offsets and indices, a symbol past its section, a name outside the
// string table, every byte flipped) give the right error and never read outside the image (ASan preset).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cubin.hpp"
#include "cubin_layout.hpp"

namespace cubin = kreplay::cuda::cubin;
// Not `using cubin::error_t`: glibc declares an error_t of its own at global scope.
using cubin_error = cubin::error_t;
using cubin::section_kind;

namespace {

int failures = 0;

#define CHECK(condition)                                                                   \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition);   \
      ++failures;                                                                          \
    }                                                                                      \
  } while (0)

// Checks a read's error; on a mismatch prints both errors and the reader's detail.
#define CHECK_ERROR(result, expected)                                                                        \
  do {                                                                                                       \
    const cubin::module_symbols_t& check_result_ = (result);                                                 \
    if (check_result_.error != (expected)) {                                                                 \
      std::fprintf(stderr, "%s:%d: error %s, expected %s (detail: %s)\n", __FILE__, __LINE__,                \
                   cubin::error_string(check_result_.error), cubin::error_string(expected),                  \
                   check_result_.detail.c_str());                                                            \
      ++failures;                                                                                            \
    }                                                                                                        \
  } while (0)

using bytes_t = std::vector<uint8_t>;

bytes_t load_cubin(const std::string& name) {
  const std::string path = std::string(KREPLAY_CUBIN_DIR) + "/" + name;
  std::ifstream file(path, std::ios::binary);
  bytes_t bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (!file.good() && !file.eof()) {
    bytes.clear();
  }
  if (bytes.empty()) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  return bytes;
}

cubin::module_symbols_t read(const bytes_t& bytes) { return cubin::read(bytes.data(), bytes.size()); }

// ---- A minimal ELF editor for the corruptions: written independently of the reader, trusting the image ----

template <typename T>
T get(const bytes_t& bytes, uint64_t offset) {
  uint64_t value = 0;
  for (size_t i = sizeof(T); i-- > 0;) {
    value = (value << 8) | bytes.at(offset + i);
  }
  return static_cast<T>(value);
}

template <typename T>
void put(bytes_t& bytes, uint64_t offset, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    bytes.at(offset + i) = static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i));
  }
}

// Offsets of the ELF64 header and section header fields.
constexpr uint64_t e_shoff = 0x28, e_shentsize = 0x3a, e_shnum = 0x3c, e_shstrndx = 0x3e;
constexpr uint64_t sh_name = 0x00, sh_type = 0x04, sh_offset = 0x18, sh_size = 0x20, sh_link = 0x28;
constexpr uint64_t sh_entsize = 0x38;
constexpr uint64_t st_name = 0, st_shndx = 6, st_value = 8, st_size = 16;

uint64_t section_header(const bytes_t& bytes, uint64_t index) { return get<uint64_t>(bytes, e_shoff) + index * 64; }

uint64_t section_count(const bytes_t& bytes) { return get<uint16_t>(bytes, e_shnum); }

std::string section_name(const bytes_t& bytes, uint64_t index) {
  const uint64_t names = section_header(bytes, get<uint16_t>(bytes, e_shstrndx));
  const uint64_t at = get<uint64_t>(bytes, names + sh_offset) + get<uint32_t>(bytes, section_header(bytes, index));
  return std::string(reinterpret_cast<const char*>(&bytes.at(at)));
}

uint64_t section_index(const bytes_t& bytes, const std::string& name) {
  for (uint64_t i = 1; i < section_count(bytes); ++i) {
    if (section_name(bytes, i) == name) {
      return i;
    }
  }
  std::fprintf(stderr, "no section %s\n", name.c_str());
  std::exit(1);
}

uint64_t symtab_header(const bytes_t& bytes) { return section_header(bytes, section_index(bytes, ".symtab")); }

// The file offset of the symbol table entry named `name`.
uint64_t symbol(const bytes_t& bytes, const std::string& name) {
  const uint64_t table = symtab_header(bytes);
  const uint64_t strings = section_header(bytes, get<uint32_t>(bytes, table + sh_link));
  const uint64_t count = get<uint64_t>(bytes, table + sh_size) / 24;
  for (uint64_t i = 1; i < count; ++i) {
    const uint64_t entry = get<uint64_t>(bytes, table + sh_offset) + i * 24;
    const uint64_t at = get<uint64_t>(bytes, strings + sh_offset) + get<uint32_t>(bytes, entry + st_name);
    if (name == reinterpret_cast<const char*>(&bytes.at(at))) {
      return entry;
    }
  }
  std::fprintf(stderr, "no symbol %s\n", name.c_str());
  std::exit(1);
}

// ---- Expected contents ---------------------------------------------------------------------------------

// sm_90 puts user __constant__ variables in bank 3.
constexpr uint32_t user_bank = 3;

struct expected_t {
  const char* name;
  uint64_t size;
  section_kind kind;
};

// The reader's variables equal `expected` (given in name order), each constant in the user bank.
void check_variables(const char* file, const cubin::module_symbols_t& result, const std::vector<expected_t>& expected) {
  CHECK_ERROR(result, cubin_error::none);
  bool same = result.variables.size() == expected.size();
  for (size_t i = 0; same && i < expected.size(); ++i) {
    const cubin::variable_t& got = result.variables[i];
    const uint32_t bank = expected[i].kind == section_kind::constant ? user_bank : 0;
    same = got.name == expected[i].name && got.size == expected[i].size && got.kind == expected[i].kind &&
           got.constant_bank == bank;
  }
  if (!same) {
    std::fprintf(stderr, "%s: variables differ from the source's; the reader found:\n", file);
    for (const cubin::variable_t& got : result.variables) {
      std::fprintf(stderr, "  %s %llu bytes kind %d bank %u\n", got.name.c_str(),
                   static_cast<unsigned long long>(got.size), static_cast<int>(got.kind), got.constant_bank);
    }
    ++failures;
  }
}

// `expected` are the module's kernels (entry functions): the reader lists them in `kernels`, and `functions`
// holds them too, with any device function the compiler kept out of line.
void check_functions(const cubin::module_symbols_t& result, const std::vector<std::string>& expected) {
  CHECK(result.kernels == expected);
  CHECK(std::includes(result.functions.begin(), result.functions.end(), expected.begin(), expected.end()));
}

constexpr section_kind global = section_kind::global;
constexpr section_kind global_init = section_kind::global_init;
constexpr section_kind constant = section_kind::constant;

void globals_are_found_with_their_sizes_and_kinds() {
  const auto result = read(load_cubin("globals.cubin"));
  check_variables("globals.cubin", result,
                  {
                      {"_ZN7physics10step_countE", sizeof(unsigned long long), global},
                      {"g_config", sizeof(config_t), global_init},
                      {"g_counter", sizeof(int), global},
                      {"g_hidden", sizeof(int), global},
                      {"g_particles", 10 * sizeof(particle_t), global},
                      {"g_seed", sizeof(int), global_init},
                      {"g_table", 256 * sizeof(double), global},
                      {"g_weights", 7 * sizeof(float), global_init},
                  });
  check_functions(result, {"_Z9k_globalsPd"});
  // g_sum_weights stays out of line: a function of the module, not one of its kernels (no STO_CUDA_ENTRY).
  CHECK(result.functions.size() == 2);
  CHECK(std::any_of(result.functions.begin(), result.functions.end(), [](const std::string& name) {
    return name.find("g_sum_weights") != std::string::npos;
  }));
}

void constants_are_found_in_their_bank() {
  const auto result = read(load_cubin("constants.cubin"));
  check_variables("constants.cubin", result,
                  {
                      {"c_config", sizeof(config_t), constant},
                      {"c_lut", 64 * sizeof(int), constant},
                      {"c_origin", sizeof(particle_t), constant},
                      {"c_scale", sizeof(float), constant},
                  });
  check_functions(result, {"_Z11k_constantsPf"});
}

void template_instances_are_separate_variables() {
  const auto result = read(load_cubin("templates.cubin"));
  check_variables("templates.cubin", result,
                  {
                      {"_Z7t_coeffIdE", 4 * sizeof(double), constant},
                      {"_Z7t_coeffIfE", 4 * sizeof(float), constant},
                      {"_Z7t_coeffIiE", 4 * sizeof(int), constant},
                      {"_Z8t_bufferIdE", 16 * sizeof(double), global},
                      {"_Z8t_bufferIfE", 16 * sizeof(float), global},
                      {"_Z8t_bufferIiE", 16 * sizeof(int), global},
                      {"g_vec5", sizeof(vec_t<5>), global},
                  });
  check_functions(result, {"_Z6k_fillIdEvPT_", "_Z6k_fillIfEvPT_", "_Z6k_fillIiEvPT_"});
}

// Moves the variables named after rdc_a.cu's and rdc_b.cu's `static unit_state` out of `result`: nvcc gives
// each a name of its own unit (a hash of the source inside), so the test knows their ending, not the name.
std::vector<cubin::variable_t> take_unit_states(cubin::module_symbols_t& result) {
  std::vector<cubin::variable_t> taken, kept;
  const std::string ending = "unit_state";
  for (cubin::variable_t& variable : result.variables) {
    const bool match = variable.name.size() > ending.size() &&
                       variable.name.compare(variable.name.size() - ending.size(), ending.size(), ending) == 0;
    (match ? taken : kept).push_back(std::move(variable));
  }
  result.variables = std::move(kept);
  for (const cubin::variable_t& variable : taken) {
    CHECK(variable.size == sizeof(int) && variable.kind == section_kind::global && variable.constant_bank == 0);
  }
  return taken;
}

// A relocatable unit lists what it defines, not the extern declarations (SHN_UNDEF) it uses.
void relocatable_units_skip_their_extern_declarations() {
  auto a = read(load_cubin("rdc_a.cubin"));
  CHECK(take_unit_states(a).size() == 1);
  check_variables("rdc_a.cubin", a, {{"shared_counter", sizeof(int), global_init}});
  check_functions(a, {"_Z7k_rdc_aPf"});
  auto b = read(load_cubin("rdc_b.cubin"));
  CHECK(take_unit_states(b).size() == 1);
  check_variables("rdc_b.cubin", b,
                  {
                      {"b_only", 3 * sizeof(int), global},
                      {"shared_config", sizeof(config_t), global},
                      {"shared_gain", 8 * sizeof(float), constant},
                  });
  check_functions(b, {"_Z7k_rdc_bPi"});
}

// After device linking, the module has each extern variable once, defined, and both units' statics apart.
void device_linked_module_has_every_unit_s_variables() {
  auto result = read(load_cubin("rdc_linked.cubin"));
  const auto unit_states = take_unit_states(result);
  CHECK(unit_states.size() == 2 && unit_states[0].name != unit_states[1].name);
  check_variables("rdc_linked.cubin", result,
                  {
                      {"b_only", 3 * sizeof(int), global},
                      {"shared_config", sizeof(config_t), global},
                      {"shared_counter", sizeof(int), global_init},
                      {"shared_gain", 8 * sizeof(float), constant},
                  });
  check_functions(result, {"_Z7k_rdc_aPf", "_Z7k_rdc_bPi"});
}

void each_of_many_modules_has_its_own_variables() {
  for (int i = 0; i < KREPLAY_MANY_MODULES; ++i) {
    const std::string prefix = "module_" + std::to_string(i);
    const std::string file = "many_" + std::to_string(i) + ".cubin";
    const std::string bytes_name = prefix + "_bytes", gain_name = prefix + "_gain";
    const auto result = read(load_cubin(file));
    const uint64_t count = static_cast<uint64_t>(i) + 1;
    check_variables(file.c_str(), result,
                    {{bytes_name.c_str(), count * 16, global}, {gain_name.c_str(), count * sizeof(int), constant}});
    check_functions(result, {prefix + "_kernel"});
  }
}

// ---- Stripped and corrupt images -----------------------------------------------------------------------

// A cubin without a symbol table may hold variables that cannot be named: an error, not an empty list.
void stripped_cubin_is_an_error() {
  bytes_t bytes = load_cubin("globals.cubin");
  const uint64_t table = symtab_header(bytes);
  // Strip: the symbols' bytes zeroed and the section no longer a symbol table.
  const auto start = bytes.begin() + static_cast<long>(get<uint64_t>(bytes, table + sh_offset));
  std::fill(start, start + static_cast<long>(get<uint64_t>(bytes, table + sh_size)), uint8_t{0});
  put<uint32_t>(bytes, table + sh_type, 0);
  const auto result = read(bytes);
  CHECK_ERROR(result, cubin_error::bad_symbol_table);
  CHECK(result.variables.empty() && result.functions.empty() && result.kernels.empty());
  CHECK(result.detail.find("stripped") != std::string::npos);
}

// Every cut of a cubin short of its full length is an error (the tables reach its last byte), never a crash.
void every_truncation_is_an_error() {
  const bytes_t full = load_cubin("many_0.cubin");
  for (size_t length = 0; length < full.size(); ++length) {
    // A copy of exactly `length` bytes, so that ASan sees any read past the cut.
    const bytes_t cut(full.begin(), full.begin() + static_cast<long>(length));
    const auto result = cubin::read(length == 0 ? nullptr : cut.data(), cut.size());
    const cubin_error expected = length < 4 ? cubin_error::not_elf : cubin_error::truncated;
    if (result.error != expected || !result.variables.empty() || !result.functions.empty() ||
        !result.kernels.empty()) {
      std::fprintf(stderr, "cut at %zu of %zu bytes: error %s, expected %s (%s)\n", length, full.size(),
                   cubin::error_string(result.error), cubin::error_string(expected), result.detail.c_str());
      ++failures;
      return;
    }
  }
  CHECK_ERROR(read(full), cubin_error::none);
}

void header_faults_are_reported() {
  const bytes_t good = load_cubin("globals.cubin");
  bytes_t bytes;

  CHECK_ERROR(cubin::read(nullptr, 0), cubin_error::not_elf);
  const char ptx[] = "//\n// Generated by NVIDIA NVVM Compiler\n.version 8.0\n.target sm_90\n";
  CHECK_ERROR(cubin::read(ptx, sizeof ptx), cubin_error::not_elf);
  CHECK_ERROR(cubin::read(bytes_t(128, 0).data(), 128), cubin_error::not_elf);

  bytes = good;
  bytes[4] = 1;  // ELFCLASS32
  CHECK_ERROR(read(bytes), cubin_error::unsupported_class);
  bytes = good;
  bytes[5] = 2;  // big-endian
  CHECK_ERROR(read(bytes), cubin_error::unsupported_class);
  bytes = good;
  put<uint16_t>(bytes, 0x12, 62);  // EM_X86_64
  CHECK_ERROR(read(bytes), cubin_error::unsupported_class);

  bytes = good;
  put<uint64_t>(bytes, e_shoff, 0);
  CHECK_ERROR(read(bytes), cubin_error::bad_section_table);
  bytes = good;
  put<uint16_t>(bytes, e_shentsize, 40);
  CHECK_ERROR(read(bytes), cubin_error::bad_section_table);
  bytes = good;
  put<uint64_t>(bytes, e_shoff, bytes.size() - 32);
  CHECK_ERROR(read(bytes), cubin_error::truncated);
  bytes = good;
  put<uint64_t>(bytes, e_shoff, UINT64_MAX - 16);
  CHECK_ERROR(read(bytes), cubin_error::truncated);
  bytes = good;
  put<uint16_t>(bytes, e_shnum, 0xfeff);
  CHECK_ERROR(read(bytes), cubin_error::truncated);
  bytes = good;
  put<uint16_t>(bytes, e_shstrndx, static_cast<uint16_t>(section_count(good) + 5));
  CHECK_ERROR(read(bytes), cubin_error::bad_string_table);
  bytes = good;
  put<uint16_t>(bytes, e_shstrndx, static_cast<uint16_t>(section_index(good, ".symtab")));
  CHECK_ERROR(read(bytes), cubin_error::bad_string_table);
}

void section_faults_are_reported() {
  const bytes_t good = load_cubin("globals.cubin");
  const uint64_t table = symtab_header(good);
  const uint64_t names = section_header(good, get<uint16_t>(good, e_shstrndx));
  bytes_t bytes;

  bytes = good;
  put<uint64_t>(bytes, table + sh_offset, bytes.size() - 8);
  CHECK_ERROR(read(bytes), cubin_error::truncated);
  bytes = good;
  put<uint64_t>(bytes, table + sh_size, UINT64_MAX - 7);
  CHECK_ERROR(read(bytes), cubin_error::truncated);
  bytes = good;
  put<uint64_t>(bytes, table + sh_entsize, 16);
  CHECK_ERROR(read(bytes), cubin_error::bad_symbol_table);
  bytes = good;
  put<uint64_t>(bytes, table + sh_size, get<uint64_t>(good, table + sh_size) - 5);
  CHECK_ERROR(read(bytes), cubin_error::bad_symbol_table);
  bytes = good;
  put<uint32_t>(bytes, table + sh_link, static_cast<uint32_t>(section_index(good, ".symtab")));
  CHECK_ERROR(read(bytes), cubin_error::bad_string_table);
  bytes = good;
  put<uint32_t>(bytes, table + sh_link, 60000);
  CHECK_ERROR(read(bytes), cubin_error::bad_string_table);
  // A section's name outside the section name table.
  bytes = good;
  put<uint32_t>(bytes, table + sh_name, static_cast<uint32_t>(get<uint64_t>(good, names + sh_size)));
  CHECK_ERROR(read(bytes), cubin_error::bad_string_table);
  // A section name table cut inside the name of .symtab, so that the name has no terminator in the table.
  bytes = good;
  put<uint64_t>(bytes, names + sh_size, get<uint32_t>(good, table + sh_name) + 3);
  CHECK_ERROR(read(bytes), cubin_error::bad_string_table);
  // Two symbol tables.
  bytes = good;
  put<uint32_t>(bytes, section_header(good, section_index(good, ".nv.info")) + sh_type, 2);
  CHECK_ERROR(read(bytes), cubin_error::bad_symbol_table);
}

void symbol_faults_are_reported() {
  const bytes_t good = load_cubin("globals.cubin");
  const uint64_t table_entry = symbol(good, "g_table");
  const uint64_t global_section = get<uint16_t>(good, table_entry + st_shndx);
  const uint64_t global_size = get<uint64_t>(good, section_header(good, global_section) + sh_size);
  const uint64_t strings = section_header(good, get<uint32_t>(good, symtab_header(good) + sh_link));
  bytes_t bytes;

  // Past its section: by its start, by its size, and by a size that wraps around.
  bytes = good;
  put<uint64_t>(bytes, table_entry + st_value, global_size - 8);
  CHECK_ERROR(read(bytes), cubin_error::bad_symbol_table);
  bytes = good;
  put<uint64_t>(bytes, table_entry + st_value, global_size + 1);
  put<uint64_t>(bytes, table_entry + st_size, 0);
  CHECK_ERROR(read(bytes), cubin_error::bad_symbol_table);
  bytes = good;
  put<uint64_t>(bytes, table_entry + st_size, UINT64_MAX);
  CHECK_ERROR(read(bytes), cubin_error::bad_symbol_table);
  // A kernel past its code section.
  bytes = good;
  put<uint64_t>(bytes, symbol(good, "_Z9k_globalsPd") + st_size, UINT64_MAX / 2);
  CHECK_ERROR(read(bytes), cubin_error::bad_symbol_table);

  // A name outside .strtab, and one at its last byte without the terminator past it.
  bytes = good;
  put<uint32_t>(bytes, table_entry + st_name, static_cast<uint32_t>(get<uint64_t>(good, strings + sh_size) + 10));
  CHECK_ERROR(read(bytes), cubin_error::bad_string_table);
  bytes = good;
  put<uint32_t>(bytes, table_entry + st_name, UINT32_MAX);
  CHECK_ERROR(read(bytes), cubin_error::bad_string_table);
  bytes = good;
  put<uint64_t>(bytes, strings + sh_size, get<uint32_t>(good, table_entry + st_name) + 3);
  {
    // Symbols before g_table may now be out of range too; whichever comes first, the error is the string table's.
    const auto result = read(bytes);
    CHECK_ERROR(result, cubin_error::bad_string_table);
  }

  // Section indices: past the table, and the reserved SHN_ABS for a variable and a kernel.
  bytes = good;
  put<uint16_t>(bytes, table_entry + st_shndx, static_cast<uint16_t>(section_count(good)));
  CHECK_ERROR(read(bytes), cubin_error::bad_symbol_table);
  bytes = good;
  put<uint16_t>(bytes, table_entry + st_shndx, 0xfff1);
  CHECK_ERROR(read(bytes), cubin_error::unknown_section);
  bytes = good;
  put<uint16_t>(bytes, symbol(good, "_Z9k_globalsPd") + st_shndx, 0xfff1);
  CHECK_ERROR(read(bytes), cubin_error::bad_symbol_table);
  // SHN_XINDEX without a .symtab_shndx section.
  bytes = good;
  put<uint16_t>(bytes, table_entry + st_shndx, 0xffff);
  CHECK_ERROR(read(bytes), cubin_error::bad_symbol_table);
}

// A variable in a section that is neither .nv.global* nor .nv.constant<N> is declined, never guessed at;
// one moved into per-block shared storage is not a module variable and is left out.
void variables_outside_known_sections() {
  const bytes_t good = load_cubin("globals.cubin");
  const uint64_t counter = symbol(good, "g_counter");
  bytes_t bytes;

  bytes = good;
  put<uint16_t>(bytes, counter + st_shndx, static_cast<uint16_t>(section_index(good, ".text._Z9k_globalsPd")));
  put<uint64_t>(bytes, counter + st_value, 0);
  const auto in_text = read(bytes);
  CHECK_ERROR(in_text, cubin_error::unknown_section);
  CHECK(in_text.detail.find("g_counter") != std::string::npos);
  CHECK(in_text.detail.find(".text._Z9k_globalsPd") != std::string::npos);

  bytes = good;
  put<uint16_t>(bytes, counter + st_shndx, static_cast<uint16_t>(section_index(good, ".nv.shared._Z9k_globalsPd")));
  put<uint64_t>(bytes, counter + st_value, 0);
  const auto in_shared = read(bytes);
  CHECK_ERROR(in_shared, cubin_error::none);
  CHECK(in_shared.variables.size() == 7);
  for (const cubin::variable_t& variable : in_shared.variables) {
    CHECK(variable.name != "g_counter");
  }

  // Undefined: skipped, like an extern declaration.
  bytes = good;
  put<uint16_t>(bytes, counter + st_shndx, 0);
  const auto undefined = read(bytes);
  CHECK_ERROR(undefined, cubin_error::none);
  CHECK(undefined.variables.size() == 7);
}

// Any single byte set to 0x00 or 0xff: a result or an error with empty lists and a detail, never a crash or a
// read outside the image (ASan preset).
void every_flipped_byte_is_survived() {
  const bytes_t good = load_cubin("many_0.cubin");
  const auto full = read(good);
  size_t errors = 0;
  for (size_t at = 0; at < good.size(); ++at) {
    for (uint8_t value : {uint8_t{0x00}, uint8_t{0xff}}) {
      bytes_t bytes = good;
      bytes[at] = value;
      const auto result = read(bytes);
      if (result.error != cubin_error::none) {
        ++errors;
        CHECK(result.variables.empty() && result.functions.empty() && result.kernels.empty() &&
              !result.detail.empty());
      }
    }
  }
  CHECK(errors > 0);
  CHECK_ERROR(full, cubin_error::none);
}

void error_strings_are_distinct() {
  const cubin_error all[] = {cubin_error::none,          cubin_error::not_elf,         cubin_error::unsupported_class,
                         cubin_error::truncated,     cubin_error::bad_section_table, cubin_error::bad_string_table,
                         cubin_error::bad_symbol_table, cubin_error::unknown_section, cubin_error::out_of_memory};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
    CHECK(cubin::error_string(all[i]) != nullptr);
    for (size_t j = 0; j < i; ++j) {
      CHECK(std::strcmp(cubin::error_string(all[i]), cubin::error_string(all[j])) != 0);
    }
  }
  CHECK(std::strcmp(cubin::error_string(static_cast<cubin_error>(200)), "unknown error") == 0);
}

}  // namespace

int main() {
  globals_are_found_with_their_sizes_and_kinds();
  constants_are_found_in_their_bank();
  template_instances_are_separate_variables();
  relocatable_units_skip_their_extern_declarations();
  device_linked_module_has_every_unit_s_variables();
  each_of_many_modules_has_its_own_variables();
  stripped_cubin_is_an_error();
  every_truncation_is_an_error();
  header_faults_are_reported();
  section_faults_are_reported();
  symbol_faults_are_reported();
  variables_outside_known_sections();
  every_flipped_byte_is_survived();
  error_strings_are_distinct();
  if (failures != 0) {
    std::fprintf(stderr, "test_cubin: %d checks failed\n", failures);
    return 1;
  }
  std::printf("test_cubin: all checks passed\n");
  return 0;
}
