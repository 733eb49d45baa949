// The module-scan cache through the adapter, on an executable with thousands of variables: install() wraps
// the entries that load and unload code objects and turns kreplay's cache_module_scan on; a capture then
// reuses the last complete scan (no symbol query at all), a load, freeze or destroy through the live table
// makes the next capture scan again, and a scan that failed is never cached.
//
// Depends on the engine's module cache (kreplay_modules_changed, policy cache_module_scan).
#include "fake_hsa.hpp"

#include <cstring>

namespace {

CoreApiTable live_core;
AmdExtTable live_amd;

constexpr std::size_t many = 4000;

struct capture_t {
  kreplay_status_t status;
  kreplay_decline_reason_t reason;
  std::size_t module_variables;
  int symbol_queries;  // hsa_executable_symbol_get_info calls the capture made
  int symbol_walks;    // hsa_executable_iterate_agent_symbols calls
  kreplay_snapshot_t* snapshot;
};

capture_t capture(hsa_agent_t agent) {
  const int queries = fake::state.symbol_queries;
  const int walks = fake::state.symbol_walks;
  capture_t out{};
  out.reason = KREPLAY_DECLINE_NONE;
  out.status = kreplay_snap(fake::k(agent), &out.snapshot, &out.reason);
  out.symbol_queries = fake::state.symbol_queries - queries;
  out.symbol_walks = fake::state.symbol_walks - walks;
  if (out.snapshot != nullptr) {
    kreplay_snapshot_info_t info{};
    HSA_TEST_CHECK(kreplay_snapshot_info(out.snapshot, &info) == KREPLAY_STATUS_SUCCESS);
    out.module_variables = info.module_variables;
  }
  return out;
}

// A capture that succeeded and scanned (cached == false) or did not query a single symbol (cached == true).
bool captured(hsa_agent_t agent, std::size_t variables, bool cached) {
  capture_t c = capture(agent);
  const bool ok = c.status == KREPLAY_STATUS_SUCCESS && c.module_variables == variables &&
                  (cached ? c.symbol_queries == 0 && c.symbol_walks == 0 : c.symbol_queries > 0);
  if (!ok) {
    std::fprintf(stderr, "capture: status %d, %zu variables (expected %zu), %d symbol queries, %d walks (%s)\n",
                 static_cast<int>(c.status), c.module_variables, variables, c.symbol_queries, c.symbol_walks,
                 cached ? "expected none" : "expected a scan");
  }
  kreplay_snapshot_free(c.snapshot);
  return ok;
}

}  // namespace

int main() {
  fake::reset(0x5B000000);
  fake::fill_tables(&live_core, &live_amd);
  const CoreApiTable captured_core = live_core;
  const AmdExtTable captured_amd = live_amd;
  const hsa_agent_t gpu = fake::agents.gpu;
  const std::size_t big = fake::add_executable_with_variables(gpu, many, 8);
  const std::size_t small = fake::add_standard_executable(gpu, "_s");  // 3 variables kreplay captures
  const std::uint64_t small_handle = fake::executables[small].handle;

  HSA_TEST_CHECK(kreplay::hsa::install(&live_core, &live_amd, 0) == kreplay::hsa::INSTALL_SUCCESS);
  HSA_TEST_CHECK(kreplay::hsa::module_wrappers_installed());
  HSA_TEST_CHECK(live_core.hsa_executable_freeze_fn != captured_core.hsa_executable_freeze_fn);
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  // The first capture scans every symbol; the next ones reuse the list and query nothing.
  HSA_TEST_CHECK(captured(gpu, many + 3, false));
  HSA_TEST_CHECK(captured(gpu, many + 3, true));
  HSA_TEST_CHECK(captured(gpu, many + 3, true));

  // Contents are still copied at every capture: a cached capture holds the values of its own time.
  auto* first = static_cast<unsigned char*>(fake::executables[big].symbols[0].address);
  first[0] = 0x11;
  capture_t c = capture(gpu);
  HSA_TEST_CHECK(c.status == KREPLAY_STATUS_SUCCESS && c.symbol_queries == 0);
  first[0] = 0x22;
  kreplay_restore_report_t report{};
  HSA_TEST_CHECK(kreplay_restore(c.snapshot, &report) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(first[0] == 0x11);
  kreplay_snapshot_free(c.snapshot);

  // Each entry that changes what is loaded, called through the live table, reaches the runtime once and
  // makes the next capture scan again.
  const hsa_executable_t exe{fake::executables[big].handle};
  int calls = fake::state.executable_calls;
  HSA_TEST_CHECK(live_core.hsa_executable_freeze_fn(exe, "") == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.executable_calls == calls + 1);
  HSA_TEST_CHECK(captured(gpu, many + 3, false));
  HSA_TEST_CHECK(captured(gpu, many + 3, true));
  hsa_loaded_code_object_t loaded{};
  HSA_TEST_CHECK(live_core.hsa_executable_load_agent_code_object_fn(exe, gpu, hsa_code_object_reader_t{1}, "",
                                                                     &loaded) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(captured(gpu, many + 3, false));
  HSA_TEST_CHECK(live_core.hsa_executable_load_program_code_object_fn(exe, hsa_code_object_reader_t{1}, "",
                                                                       &loaded) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(captured(gpu, many + 3, false));
  int dummy = 0;
  HSA_TEST_CHECK(live_core.hsa_executable_agent_global_variable_define_fn(exe, gpu, "v", &dummy) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(captured(gpu, many + 3, false));
  HSA_TEST_CHECK(captured(gpu, many + 3, true));
  // Destroying an executable: its variables are gone from the next capture.
  calls = fake::state.executable_calls;
  HSA_TEST_CHECK(live_core.hsa_executable_destroy_fn(hsa_executable_t{small_handle}) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.executable_calls == calls + 1);
  HSA_TEST_CHECK(captured(gpu, many, false));
  HSA_TEST_CHECK(captured(gpu, many, true));
  // A call the runtime refuses still drops the cache (it may have changed something), and returns its status.
  HSA_TEST_CHECK(live_core.hsa_executable_destroy_fn(hsa_executable_t{small_handle}) ==
                 HSA_STATUS_ERROR_INVALID_EXECUTABLE);
  HSA_TEST_CHECK(captured(gpu, many, false));

  // A scan that fails is declined and not cached: after the failure clears, the next capture scans again.
  HSA_TEST_CHECK(live_core.hsa_executable_freeze_fn(exe, "") == HSA_STATUS_SUCCESS);
  fake::executables[big].symbols[many / 2].fail_attribute = HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS;
  c = capture(gpu);
  HSA_TEST_CHECK(c.status == KREPLAY_STATUS_DECLINED && c.reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE);
  HSA_TEST_CHECK(c.symbol_queries > 0);
  c = capture(gpu);  // still failing: scanned again, declined again
  HSA_TEST_CHECK(c.status == KREPLAY_STATUS_DECLINED && c.symbol_queries > 0);
  fake::executables[big].symbols[many / 2].fail_attribute = -1;
  HSA_TEST_CHECK(captured(gpu, many, false));
  HSA_TEST_CHECK(captured(gpu, many, true));

  // set_policy keeps the cache on whatever the host's struct says; a raw version-1 policy turns it off.
  kreplay_policy_t policy{};
  policy.struct_size = offsetof(kreplay_policy_t, max_snapshot_bytes) + sizeof policy.max_snapshot_bytes;
  policy.pin_staging = true;
  HSA_TEST_CHECK(kreplay::hsa::set_policy(&policy) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(captured(gpu, many, true));
  HSA_TEST_CHECK(kreplay_set_policy(&policy) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(captured(gpu, many, false));
  HSA_TEST_CHECK(captured(gpu, many, false));
  HSA_TEST_CHECK(kreplay::hsa::set_policy(nullptr) == KREPLAY_STATUS_INVALID_ARGUMENT);
  policy.struct_size = sizeof(std::size_t);
  HSA_TEST_CHECK(kreplay::hsa::set_policy(&policy) == KREPLAY_STATUS_INVALID_ARGUMENT);

  kreplay::hsa::finalize();
  // After finalize the wrappers only forward.
  calls = fake::state.executable_calls;
  HSA_TEST_CHECK(live_core.hsa_executable_freeze_fn(exe, "") == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state.executable_calls == calls + 1);
  std::printf("hsa module cache: %zu variables scanned once, rescanned after every load, freeze and destroy\n", many);
  return 0;
}
