// The module scan through the adapter fails as a whole when any query fails -- a symbol attribute, an
// executable's symbol walk, the host's executable enumeration, the loader-extension lookup -- and kreplay then
// declines the snapshot with KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE instead of taking one without a variable.
#include "fake_hsa.hpp"

namespace {

struct outcome {
  kreplay_status_t status;
  kreplay_decline_reason_t reason;
  std::size_t module_variables;
};

outcome snap(hsa_agent_t agent) {
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  outcome out{kreplay_snap(fake::k(agent), &snapshot, &reason), reason, 0};
  HSA_TEST_CHECK((out.status == KREPLAY_STATUS_SUCCESS) == (snapshot != nullptr));
  if (snapshot != nullptr) {
    kreplay_snapshot_info_t info{};
    HSA_TEST_CHECK(kreplay_snapshot_info(snapshot, &info) == KREPLAY_STATUS_SUCCESS);
    out.module_variables = info.module_variables;
    kreplay_snapshot_free(snapshot);
  }
  return out;
}

bool declined_as_incomplete(hsa_agent_t agent) {
  outcome out = snap(agent);
  return out.status == KREPLAY_STATUS_DECLINED && out.reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE;
}

bool complete(hsa_agent_t agent) {
  outcome out = snap(agent);
  return out.status == KREPLAY_STATUS_SUCCESS && out.module_variables == 3;
}

}  // namespace

int main() {
  fake::reset(0x54000000);
  CoreApiTable core;
  AmdExtTable amd;
  fake::fill_tables(&core, &amd);
  const hsa_agent_t gpu = fake::agents.gpu;
  const std::size_t exe = fake::add_standard_executable(gpu, "_a");

  // The host enumerates its own executables (as rocprofiler-sdk's code-object registry would).
  kreplay::hsa::configure_options_t options{};
  options.struct_size = sizeof options;
  options.iterate_executables = &fake::host_iterate_executables;
  options.iterate_executables_data = &fake::host_iterator_calls;
  HSA_TEST_CHECK(kreplay::hsa::configure(&core, &amd, &options) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);
  HSA_TEST_CHECK(complete(gpu));
  HSA_TEST_CHECK(fake::host_iterator_calls == 1);
  HSA_TEST_CHECK(fake::state.loader_table_requests == 0);

  // Any failed attribute query fails the scan, for a variable or for the kind of any symbol.
  const hsa_executable_symbol_info_t variable_queries[] = {
      HSA_EXECUTABLE_SYMBOL_INFO_TYPE,          HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS,
      HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SEGMENT,
      HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_IS_CONST, HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH,
      HSA_EXECUTABLE_SYMBOL_INFO_NAME};
  for (hsa_executable_symbol_info_t attribute : variable_queries) {
    fake::symbol(exe, "flaky_a").fail_attribute = attribute;
    HSA_TEST_CHECK(declined_as_incomplete(gpu));
    fake::symbol(exe, "flaky_a").fail_attribute = -1;
    HSA_TEST_CHECK(complete(gpu));
  }
  // The zero-size variable and the marker are skipped by kreplay, but only after the adapter read them: a
  // failure there counts too.
  fake::symbol(exe, "empty_a").fail_attribute = HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE;
  HSA_TEST_CHECK(declined_as_incomplete(gpu));
  fake::symbol(exe, "empty_a").fail_attribute = -1;
  fake::symbol(exe, "kernel_a").fail_attribute = HSA_EXECUTABLE_SYMBOL_INFO_TYPE;
  HSA_TEST_CHECK(declined_as_incomplete(gpu));
  fake::symbol(exe, "kernel_a").fail_attribute = -1;
  HSA_TEST_CHECK(complete(gpu));

  // An executable whose symbols cannot be walked.
  fake::executables.at(exe).fail_iteration = true;
  HSA_TEST_CHECK(declined_as_incomplete(gpu));
  fake::executables.at(exe).fail_iteration = false;
  // The host's own enumeration failing.
  fake::host_iterator_result = HSA_STATUS_ERROR_OUT_OF_RESOURCES;
  HSA_TEST_CHECK(declined_as_incomplete(gpu));
  fake::host_iterator_result = HSA_STATUS_SUCCESS;
  HSA_TEST_CHECK(complete(gpu));
  // A host enumeration that swallows the visitor's error and reports success still cannot hide the failure.
  fake::host_iterator_ignores_visit = true;
  fake::symbol(exe, "flaky_a").fail_attribute = HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE;
  HSA_TEST_CHECK(declined_as_incomplete(gpu));
  fake::symbol(exe, "flaky_a").fail_attribute = -1;
  HSA_TEST_CHECK(complete(gpu));
  fake::host_iterator_ignores_visit = false;

  // Configuration errors leave the previous ops in place.
  kreplay::hsa::configure_options_t short_options = options;
  short_options.struct_size = sizeof(std::size_t);
  HSA_TEST_CHECK(kreplay::hsa::configure(&core, &amd, &short_options) == KREPLAY_STATUS_INVALID_ARGUMENT);
  CoreApiTable holed = core;
  holed.hsa_executable_symbol_get_info_fn = nullptr;
  HSA_TEST_CHECK(kreplay::hsa::configure(&holed, &amd, &options) == KREPLAY_STATUS_INVALID_ARGUMENT);
  CoreApiTable truncated = core;  // a runtime whose core table ends before the v1.1 executable entries
  truncated.version.minor_id =
      static_cast<std::uint32_t>(offsetof(CoreApiTable, hsa_executable_iterate_agent_symbols_fn));
  HSA_TEST_CHECK(kreplay::hsa::configure(&truncated, &amd, &options) == KREPLAY_STATUS_INVALID_ARGUMENT);
  HSA_TEST_CHECK(kreplay::hsa::configure(nullptr, &amd, &options) == KREPLAY_STATUS_INVALID_ARGUMENT);
  const int calls = fake::host_iterator_calls;
  HSA_TEST_CHECK(complete(gpu));
  HSA_TEST_CHECK(fake::host_iterator_calls == calls + 1);

  // The default enumeration: the loader extension's table. A failed lookup declines and is retried next time
  // (it may have come before the runtime was up); a successful one is kept.
  HSA_TEST_CHECK(kreplay::hsa::configure(&core, &amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  fake::state.fail_loader_table = true;
  HSA_TEST_CHECK(declined_as_incomplete(gpu));
  fake::state.fail_loader_table = false;
  HSA_TEST_CHECK(complete(gpu));
  HSA_TEST_CHECK(complete(gpu));
  HSA_TEST_CHECK(fake::state.loader_table_requests == 2);
  HSA_TEST_CHECK(fake::host_iterator_calls == calls + 1);
  // Through the loader, a failing symbol declines the same way.
  fake::symbol(exe, "flaky_a").fail_attribute = HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS;
  HSA_TEST_CHECK(declined_as_incomplete(gpu));
  fake::symbol(exe, "flaky_a").fail_attribute = -1;

  kreplay::hsa::finalize();
  std::printf("hsa module scan: every failing query declines the snapshot\n");
  return 0;
}
