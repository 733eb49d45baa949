// Module-scope variables: the executables the host reports, walked per agent with the symbol queries.
#include "internal.hpp"

#include <hsa/hsa_ven_amd_loader.h>

#include <cstdlib>
#include <cstring>

namespace kreplay::hsa::detail {
namespace {

// State of one scan. Names are read into a buffer that grows with malloc rather than std::string: the scan
// runs inside C callbacks from the runtime, through which no exception may travel.
struct scan_state {
  const context* ctx;
  kreplay_agent_t agent;
  kreplay_module_variable_visitor_t visit;
  void* visit_data;
  bool stopped_by_visitor;
  bool failed;
  char inline_name[256];
  char* heap_name;
  std::size_t heap_capacity;

  ~scan_state() { std::free(heap_name); }

  char* name_buffer(std::size_t length) {
    if (length <= sizeof inline_name) return inline_name;
    if (length > heap_capacity) {
      char* grown = static_cast<char*>(std::realloc(heap_name, length));
      if (grown == nullptr) return nullptr;
      heap_name = grown;
      heap_capacity = length;
    }
    return heap_name;
  }

  hsa_status_t fail(hsa_executable_symbol_t symbol, const char* what, hsa_status_t status) {
    logf(KREPLAY_LOG_WARNING, "agent %#llx: symbol %#llx: %s failed (status %#x); the module scan is incomplete",
         static_cast<unsigned long long>(agent.handle), static_cast<unsigned long long>(symbol.handle), what,
         static_cast<unsigned>(status));
    failed = true;
    return status == HSA_STATUS_SUCCESS ? HSA_STATUS_ERROR : status;
  }
};

hsa_status_t visit_symbol(hsa_executable_t /*executable*/, hsa_agent_t /*agent*/, hsa_executable_symbol_t symbol,
                          void* data) {
  auto* scan = static_cast<scan_state*>(data);
  auto* get_info = scan->ctx->symbol_get_info;

  hsa_symbol_kind_t kind = HSA_SYMBOL_KIND_KERNEL;
  hsa_status_t status = get_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_TYPE, &kind);
  if (status != HSA_STATUS_SUCCESS) return scan->fail(symbol, "the kind query", status);
  if (kind != HSA_SYMBOL_KIND_VARIABLE) return HSA_STATUS_SUCCESS;

  // The attribute types are those hsa.h documents: address uint64_t, size and name length uint32_t.
  std::uint64_t address = 0;
  std::uint32_t size = 0;
  std::uint32_t name_length = 0;
  hsa_variable_segment_t segment = HSA_VARIABLE_SEGMENT_GLOBAL;
  bool is_const = false;
  status = get_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS, &address);
  if (status != HSA_STATUS_SUCCESS) return scan->fail(symbol, "the address query", status);
  status = get_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE, &size);
  if (status != HSA_STATUS_SUCCESS) return scan->fail(symbol, "the size query", status);
  // Constness is reported two ways (both deprecated, both implemented for variables): the read-only segment
  // and the is-const flag. Either makes it __constant__; kreplay captures both kinds alike, so this only
  // labels the variable.
  status = get_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SEGMENT, &segment);
  if (status != HSA_STATUS_SUCCESS) return scan->fail(symbol, "the segment query", status);
  status = get_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST, &is_const);
  if (status != HSA_STATUS_SUCCESS) return scan->fail(symbol, "the constness query", status);
  status = get_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH, &name_length);
  if (status != HSA_STATUS_SUCCESS) return scan->fail(symbol, "the name-length query", status);

  const char* name = nullptr;
  if (name_length != 0) {
    // ROCr writes exactly name_length bytes, with no terminator.
    char* buffer = scan->name_buffer(name_length);
    if (buffer == nullptr) return scan->fail(symbol, "allocating its name", HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    status = get_info(symbol, HSA_EXECUTABLE_SYMBOL_INFO_NAME, buffer);
    if (status != HSA_STATUS_SUCCESS) return scan->fail(symbol, "the name query", status);
    name = buffer;
  }

  kreplay_module_variable_t variable{};
  variable.name = name;
  variable.name_length = name_length;
  variable.address = reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));
  variable.size = size;
  variable.is_constant = segment == HSA_VARIABLE_SEGMENT_READONLY || is_const;
  if (!scan->visit(scan->visit_data, &variable)) {
    scan->stopped_by_visitor = true;
    return HSA_STATUS_INFO_BREAK;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t visit_executable(hsa_executable_t executable, void* data) {
  auto* scan = static_cast<scan_state*>(data);
  // ROCr's loader keeps the slot of a destroyed executable and reports it with a zero handle
  // (ROCR-Runtime issue 206); it has no symbols, and asking for them would fail the whole scan.
  if (executable.handle == 0) return HSA_STATUS_SUCCESS;
  hsa_status_t status =
      scan->ctx->iterate_agent_symbols(executable, to_hsa(scan->agent), &visit_symbol, scan);
  if (status == HSA_STATUS_SUCCESS) return HSA_STATUS_SUCCESS;
  if (status == HSA_STATUS_INFO_BREAK && scan->stopped_by_visitor) return HSA_STATUS_INFO_BREAK;
  if (!scan->failed) {
    logf(KREPLAY_LOG_WARNING, "agent %#llx: iterating the symbols of executable %#llx failed (status %#x)",
         static_cast<unsigned long long>(scan->agent.handle), static_cast<unsigned long long>(executable.handle),
         static_cast<unsigned>(status));
    scan->failed = true;
  }
  return status == HSA_STATUS_INFO_BREAK ? HSA_STATUS_ERROR : status;
}

// The loader extension's hsa_ven_amd_loader_iterate_executables (table version 1.03), looked up once through
// the captured core table. A failed lookup is not cached: it may have come before the runtime was up.
loader_iterate_executables_t loader_iterator(const context* ctx) {
  loader_iterate_executables_t cached = ctx->loader_iterate_executables.load(std::memory_order_acquire);
  if (cached != nullptr) return cached;
  if (ctx->get_major_extension_table == nullptr) return nullptr;
  hsa_ven_amd_loader_1_03_pfn_t table;
  std::memset(&table, 0, sizeof table);
  hsa_status_t status = ctx->get_major_extension_table(HSA_EXTENSION_AMD_LOADER, 1, sizeof table, &table);
  if (status != HSA_STATUS_SUCCESS || table.hsa_ven_amd_loader_iterate_executables == nullptr) {
    logf(KREPLAY_LOG_WARNING,
         "the AMD loader extension's executable iteration is unavailable (status %#x); module variables cannot "
         "be enumerated, so snapshots are declined",
         static_cast<unsigned>(status));
    return nullptr;
  }
  ctx->loader_iterate_executables.store(table.hsa_ven_amd_loader_iterate_executables, std::memory_order_release);
  return table.hsa_ven_amd_loader_iterate_executables;
}

}  // namespace

kreplay_status_t op_iterate_module_variables(void* user_data, kreplay_agent_t agent,
                                             kreplay_module_variable_visitor_t visit, void* visit_data) {
  const auto* ctx = static_cast<const context*>(user_data);
  if (ctx == nullptr || visit == nullptr) return KREPLAY_STATUS_INVALID_ARGUMENT;
  scan_state scan{ctx, agent, visit, visit_data, false, false, {}, nullptr, 0};
  hsa_status_t status;
  if (ctx->iterate_executables != nullptr) {
    status = ctx->iterate_executables(ctx->iterate_executables_data, &visit_executable, &scan);
  } else {
    loader_iterate_executables_t iterate = loader_iterator(ctx);
    if (iterate == nullptr) return KREPLAY_STATUS_DEVICE_ERROR;
    status = iterate(&visit_executable, &scan);
  }
  if (scan.failed) return KREPLAY_STATUS_DEVICE_ERROR;
  if (scan.stopped_by_visitor) return KREPLAY_STATUS_SUCCESS;
  if (status != HSA_STATUS_SUCCESS) {
    logf(KREPLAY_LOG_WARNING, "agent %#llx: iterating the loaded executables failed (status %#x)",
         static_cast<unsigned long long>(agent.handle), static_cast<unsigned>(status));
    return KREPLAY_STATUS_DEVICE_ERROR;
  }
  return KREPLAY_STATUS_SUCCESS;
}

}  // namespace kreplay::hsa::detail
