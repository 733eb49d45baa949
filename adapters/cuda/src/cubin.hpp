// The cubin reader: the module variables and kernels of one CUDA module image, read from its ELF symbol table.
//
// A cubin is an ELF64 little-endian file (e_machine EM_CUDA). Its `__device__` variables are symbols in
// .nv.global (zero-initialised, no file data) or .nv.global.init (initialised), its `__constant__` variables
// symbols in .nv.constant<N> (bank N; user constants are in bank 3 on sm_90), its kernels STT_FUNC symbols.
// The injection library resolves each variable's address with cuModuleGetGlobal, so the reader reports names
// and sizes only, never addresses.
//
// Pure C++17 without CUDA headers, so that it is tested on cubins nvcc makes on a machine without a GPU
// (c-tests/cuda/gpu-free). Every offset and size in the image is checked before it is used; a malformed image
// gives an error and a detail that names the section, symbol or offset, never a partial guess.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kreplay::cuda::cubin {

// Where a variable lives: .nv.global (zero-initialised), .nv.global.init (initialised), .nv.constant<N>.
enum class section_kind : uint8_t { global, global_init, constant };

struct variable_t {
  std::string name;
  uint64_t size;
  section_kind kind;
  uint32_t constant_bank;  // N of .nv.constant<N>; 0 otherwise
};

enum class error_t : uint8_t {
  none,
  not_elf,            // no ELF magic, or shorter than an ELF header
  unsupported_class,  // not ELF64 little-endian, or not EM_CUDA
  truncated,          // a table or section reaches past the end of the image
  bad_section_table,  // section header table malformed (entry size, count, index)
  bad_string_table,   // .shstrtab or .strtab missing, of the wrong type, or a name not inside it
  bad_symbol_table,   // no .symtab (a stripped image), or a symbol outside its section, or a bad section index
  unknown_section,    // an STT_OBJECT symbol defined in a section the reader does not know
  out_of_memory,
};

struct module_symbols_t {
  error_t error = error_t::none;
  std::string detail;                  // human-readable: which section/symbol/offset was wrong
  std::vector<variable_t> variables;   // every defined STT_OBJECT in .nv.global*/.nv.constant*, sorted by name
  std::vector<std::string> functions;  // every defined STT_FUNC name (kernels and out-of-line device code), sorted
  // The entry kernels: defined STT_FUNC symbols with STO_CUDA_ENTRY (0x10) in st_other, sorted. This is the
  // set the driver enumerates for the module (cuLibraryEnumerateKernels, cuModuleEnumerateFunctions), so it is
  // what a cubin is matched against when its module must be found by its kernels.
  std::vector<std::string> kernels;
};

// Never throws, never reads outside [image, image + size); a malformed image gives an error, never a guess.
// On an error, `variables`, `functions` and `kernels` are empty.
//
// Symbols read as variables: STT_OBJECT, and NVIDIA's relocatable-object variable type (STT_LOPROC, 13, what
// `nvcc -rdc=true -cubin` writes before device linking), of any binding. Undefined (SHN_UNDEF) symbols are
// skipped, and so are symbols in .nv.shared* and .nv.local* (per-block and per-thread storage, not module
// state). An image without a symbol table is an error (bad_symbol_table): it may well hold variables, and an
// empty list would say it has none. Names are as nvcc wrote them: with -rdc, a static variable's name
// carries its unit's hash (__nv_static_..._name), so that two units' statics stay apart after device linking;
// should a name repeat all the same, each copy is listed.
module_symbols_t read(const void* image, size_t size) noexcept;

// Static text naming `error` ("truncated", ...); "unknown error" for a value outside the enum.
const char* error_string(error_t error) noexcept;

}  // namespace kreplay::cuda::cubin
