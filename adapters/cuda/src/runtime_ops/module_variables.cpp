// The iterate_module_variables op, over the table of the host's own __device__ / __constant__ variables that
// register_symbols installs (CUDA gives a tool no public way to walk a module's globals: kreplay/cuda.hpp).
#include <cstring>
#include <mutex>

#include "context.hpp"
#include "kreplay/cuda.hpp"

namespace kreplay::cuda {
namespace detail {
namespace {

// The module-variable table, process-wide by contract (register_symbols): replaced whole by register_symbols,
// read whole by a scan.
std::mutex g_symbols_mutex;
const symbol_t* g_symbols = nullptr;
size_t g_symbol_count = 0;

// Resolves `symbol` on the current device and hands it to `visit`; false when the scan should stop (`status`
// says why: SUCCESS when the visitor asked to stop).
bool visit_symbol(const symbol_t& symbol, kreplay_module_variable_visitor_t visit, void* visit_data,
                  kreplay_status_t& status) {
  void* address = nullptr;
  size_t size = 0;
  cudaError_t error = cudaGetSymbolAddress(&address, symbol.symbol);
  if (error == cudaSuccess) {
    error = cudaGetSymbolSize(&size, symbol.symbol);
  }
  if (error != cudaSuccess) {
    status = fail(error);  // a variable that cannot be resolved makes the scan incomplete: decline
    return false;
  }
  kreplay_module_variable_t variable{};
  variable.name = symbol.name;
  variable.name_length = symbol.name != nullptr ? std::strlen(symbol.name) : 0;
  variable.address = address;
  variable.size = size;
  variable.is_constant = symbol.is_constant;
  status = KREPLAY_STATUS_SUCCESS;
  return visit(visit_data, &variable);
}

}  // namespace

kreplay_status_t runtime_ops::iterate_module_variables(void* user_data, kreplay_agent_t agent,
                                                       kreplay_module_variable_visitor_t visit, void* visit_data) {
  increase(counters_of(user_data).module_scans);
  const int device = device_of_agent(agent);
  if (device < 0) {
    return KREPLAY_STATUS_SUCCESS;  // not a CUDA device: it has no module variables
  }
  // Each device has its own instance of every module variable: resolve them on the agent's device, whichever
  // thread snapshots it.
  device_switch on_device(device);
  if (on_device.error() != cudaSuccess) {
    return fail(on_device.error());
  }
  const symbol_t* symbols = nullptr;
  size_t count = 0;
  {
    std::lock_guard<std::mutex> lock(g_symbols_mutex);
    symbols = g_symbols;
    count = g_symbol_count;
  }
  kreplay_status_t status = KREPLAY_STATUS_SUCCESS;
  for (size_t i = 0; i < count; ++i) {
    if (!visit_symbol(symbols[i], visit, visit_data, status)) {
      break;
    }
  }
  return status;
}

}  // namespace detail

kreplay_status_t register_symbols(const symbol_t* symbols, size_t count) {
  if (count != 0 && symbols == nullptr) {
    return KREPLAY_STATUS_INVALID_ARGUMENT;
  }
  {
    std::lock_guard<std::mutex> lock(detail::g_symbols_mutex);
    detail::g_symbols = symbols;
    detail::g_symbol_count = count;
  }
  // After the swap: a scan that starts from here on sees the new table, and none cached before survives.
  kreplay_modules_changed();
  return KREPLAY_STATUS_SUCCESS;
}

}  // namespace kreplay::cuda
