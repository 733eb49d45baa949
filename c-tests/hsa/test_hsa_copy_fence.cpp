// The async-copy fence of the HSA adapter on the fake ROCr: the program's copies (through the live tables, so
// through install()'s wrappers) hold a replay window until their completion signal fires, wait while a window
// is open on an agent they touch, make a window decline when they never complete, and never wait for a window
// on an agent they do not touch; the wrappers chain to the entries they replaced, and a second library instance
// does not wrap again. Threads stand for the program's and the profiler's; a short sleep gives a thread that
// should be waiting the time to (wrongly) go ahead, so the checks after it can only pass on a correct fence.
#include "fake_hsa.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace {

CoreApiTable live_core;
AmdExtTable live_amd;
CoreApiTable captured_core;
AmdExtTable captured_amd;

std::atomic<int> handler_warnings{0};

void sink(kreplay_log_level_t level, const char* message, std::size_t /*length*/) {
  if (level == KREPLAY_LOG_WARNING && std::strstr(message, "hsa_amd_signal_async_handler failed") != nullptr) {
    handler_warnings.fetch_add(1);
  }
}

void pause_for_a_wrong_move() { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }

// Waits up to five seconds for flag.
bool eventually(const std::atomic<bool>& flag) {
  for (int i = 0; i < 500 && !flag.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return flag.load();
}

void* allocate(hsa_amd_memory_pool_t pool, std::size_t size) {
  void* ptr = nullptr;
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_pool_allocate_fn(pool, size, 0, &ptr) == HSA_STATUS_SUCCESS);
  return ptr;
}

hsa_signal_t make_signal() {
  hsa_signal_t signal{};
  HSA_TEST_CHECK(captured_core.hsa_signal_create_fn(1, 0, nullptr, &signal) == HSA_STATUS_SUCCESS);
  return signal;
}

void destroy_signal(hsa_signal_t signal) {
  HSA_TEST_CHECK(captured_core.hsa_signal_destroy_fn(signal) == HSA_STATUS_SUCCESS);
}

// The program's hipMemcpyAsync, as HIP issues it: through the live table.
hsa_status_t program_copy(void* dst, hsa_agent_t dst_agent, const void* src, hsa_agent_t src_agent, std::size_t size,
                          hsa_signal_t signal) {
  return live_amd.hsa_amd_memory_async_copy_fn(dst, dst_agent, src, src_agent, size, 0, nullptr, signal);
}

kreplay_window_options_t options(std::uint32_t copy_timeout_ms) {
  kreplay_window_options_t o{};
  o.struct_size = sizeof o;
  o.passes = 2;
  o.copy_timeout_ms = copy_timeout_ms;
  return o;
}

// Opens and closes a window on agent; returns its outcome, checking that it was replayed.
kreplay_window_outcome_t open_and_close(hsa_agent_t agent, std::uint32_t copy_timeout_ms) {
  const kreplay_window_options_t o = options(copy_timeout_ms);
  kreplay_window_t* window = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  HSA_TEST_CHECK(kreplay_window_open(fake::k(agent), &o, &window, &reason) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(window != nullptr && reason == KREPLAY_DECLINE_NONE);
  kreplay_window_outcome_t outcome{};
  outcome.struct_size = sizeof outcome;
  HSA_TEST_CHECK(kreplay_window_close(window, &outcome) == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(outcome.reason == KREPLAY_DECLINE_NONE);
  return outcome;
}

// No copy counts on agent any more: a window with a short timeout opens and waits for none.
void expect_nothing_in_flight(hsa_agent_t agent) { HSA_TEST_CHECK(open_and_close(agent, 200).copies_waited == 0); }

kreplay_window_t* open_window(hsa_agent_t agent) {
  const kreplay_window_options_t o = options(1000);
  kreplay_window_t* window = nullptr;
  HSA_TEST_CHECK(kreplay_window_open(fake::k(agent), &o, &window, nullptr) == KREPLAY_STATUS_SUCCESS);
  return window;
}

void close_window(kreplay_window_t* window) {
  HSA_TEST_CHECK(kreplay_window_close(window, nullptr) == KREPLAY_STATUS_SUCCESS);
}

void fill(void* ptr, std::size_t size, unsigned char value) { std::memset(ptr, value, size); }

bool holds(const void* ptr, std::size_t size, unsigned char value) {
  const auto* bytes = static_cast<const unsigned char*>(ptr);
  for (std::size_t i = 0; i < size; ++i) {
    if (bytes[i] != value) return false;
  }
  return true;
}

constexpr std::size_t bytes = 4096;

struct buffers_t {
  void* gpu;   // owned by agents.gpu
  void* gpu2;  // owned by agents.gpu2
  void* host;  // fine-grained host memory, owned by agents.cpu
};
buffers_t buf;

void before_any_window_a_copy_costs_no_runtime_call() {
  const fake::state_t before = fake::state_now();
  fill(buf.host, bytes, 0x11);
  const hsa_signal_t signal = make_signal();
  HSA_TEST_CHECK(program_copy(buf.gpu, fake::agents.gpu, buf.host, fake::agents.cpu, bytes, signal) ==
                 HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state_now().async_copy_calls == before.async_copy_calls + 1);
  HSA_TEST_CHECK(fake::state_now().signal_load_calls == before.signal_load_calls);
  HSA_TEST_CHECK(fake::state_now().async_handler_calls == before.async_handler_calls);
  HSA_TEST_CHECK(fake::state_now().pointer_info_calls == before.pointer_info_calls);
  HSA_TEST_CHECK(fake::complete_async_copy_with_signal(signal));
  HSA_TEST_CHECK(holds(buf.gpu, bytes, 0x11));
  destroy_signal(signal);
}

void a_copy_in_flight_holds_the_window_until_it_completes() {
  fill(buf.host, bytes, 0x22);
  const hsa_signal_t signal = make_signal();
  const int handlers_before = fake::state_now().async_handler_calls;
  HSA_TEST_CHECK(program_copy(buf.gpu, fake::agents.gpu, buf.host, fake::agents.cpu, bytes, signal) ==
                 HSA_STATUS_SUCCESS);
  // Armed: the wrapper watches the completion signal, for the value below the one it had.
  HSA_TEST_CHECK(fake::state_now().async_handler_calls == handlers_before + 1);
  HSA_TEST_CHECK(fake::pending_async_handlers() == 1);

  std::atomic<bool> opened{false};
  kreplay_status_t status = KREPLAY_STATUS_INVALID_ARGUMENT;
  kreplay_window_outcome_t outcome{};
  std::thread profiler([&] {
    const kreplay_window_options_t o = options(10000);
    kreplay_window_t* window = nullptr;
    status = kreplay_window_open(fake::k(fake::agents.gpu), &o, &window, nullptr);
    opened.store(true);
    outcome.struct_size = sizeof outcome;
    if (status == KREPLAY_STATUS_SUCCESS) {
      HSA_TEST_CHECK(kreplay_window_close(window, &outcome) == KREPLAY_STATUS_SUCCESS);
    }
  });
  pause_for_a_wrong_move();
  HSA_TEST_CHECK(!opened.load());  // still waiting for the copy
  HSA_TEST_CHECK(fake::complete_async_copy_with_signal(signal));
  profiler.join();
  HSA_TEST_CHECK(status == KREPLAY_STATUS_SUCCESS);
  HSA_TEST_CHECK(outcome.reason == KREPLAY_DECLINE_NONE);
  HSA_TEST_CHECK(outcome.copies_waited == 1);
  HSA_TEST_CHECK(fake::pending_async_handlers() == 0);
  HSA_TEST_CHECK(holds(buf.gpu, bytes, 0x22));
  destroy_signal(signal);
  expect_nothing_in_flight(fake::agents.gpu);
}

void a_copy_issued_during_a_window_waits_then_runs() {
  fill(buf.host, bytes, 0x33);
  fill(buf.gpu, bytes, 0);
  const hsa_signal_t signal = make_signal();
  kreplay_window_t* window = open_window(fake::agents.gpu);
  const int calls_before = fake::state_now().async_copy_calls;
  std::atomic<bool> returned{false};
  hsa_status_t status = HSA_STATUS_ERROR;
  std::thread program([&] {
    status = program_copy(buf.gpu, fake::agents.gpu, buf.host, fake::agents.cpu, bytes, signal);
    returned.store(true);
  });
  pause_for_a_wrong_move();
  HSA_TEST_CHECK(!returned.load());
  HSA_TEST_CHECK(fake::state_now().async_copy_calls == calls_before);  // not forwarded
  HSA_TEST_CHECK(holds(buf.gpu, bytes, 0));
  close_window(window);
  program.join();
  HSA_TEST_CHECK(status == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state_now().async_copy_calls == calls_before + 1);
  HSA_TEST_CHECK(fake::complete_async_copy_with_signal(signal));
  HSA_TEST_CHECK(holds(buf.gpu, bytes, 0x33));
  HSA_TEST_CHECK(fake::pending_async_handlers() == 0);
  destroy_signal(signal);
  expect_nothing_in_flight(fake::agents.gpu);
}

void a_copy_that_never_completes_declines_the_window_and_lets_later_copies_through() {
  const hsa_signal_t stuck = make_signal();
  HSA_TEST_CHECK(program_copy(buf.gpu, fake::agents.gpu, buf.host, fake::agents.cpu, bytes, stuck) ==
                 HSA_STATUS_SUCCESS);
  const kreplay_window_options_t o = options(50);
  kreplay_window_t* window = reinterpret_cast<kreplay_window_t*>(&live_core);  // must be overwritten with NULL
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  HSA_TEST_CHECK(kreplay_window_open(fake::k(fake::agents.gpu), &o, &window, &reason) == KREPLAY_STATUS_DECLINED);
  HSA_TEST_CHECK(window == nullptr);
  HSA_TEST_CHECK(reason == KREPLAY_DECLINE_COPIES_IN_FLIGHT);

  // The fence is open again: a copy from another thread goes straight through.
  fill(buf.host, bytes, 0x44);
  const hsa_signal_t later = make_signal();
  const hsa_signal_t same_agent = make_signal();
  const int calls_before = fake::state_now().async_copy_calls;
  std::atomic<bool> returned{false};
  std::thread program([&] {
    HSA_TEST_CHECK(program_copy(buf.gpu2, fake::agents.gpu2, buf.host, fake::agents.cpu, bytes, later) ==
                   HSA_STATUS_SUCCESS);
    HSA_TEST_CHECK(program_copy(buf.gpu, fake::agents.gpu, buf.host, fake::agents.cpu, 64, same_agent) ==
                   HSA_STATUS_SUCCESS);
    returned.store(true);
  });
  HSA_TEST_CHECK(eventually(returned));
  program.join();
  HSA_TEST_CHECK(fake::state_now().async_copy_calls == calls_before + 2);

  // Still stuck: the next window on the agent declines the same way.
  window = nullptr;
  HSA_TEST_CHECK(kreplay_window_open(fake::k(fake::agents.gpu), &o, &window, &reason) == KREPLAY_STATUS_DECLINED);
  HSA_TEST_CHECK(reason == KREPLAY_DECLINE_COPIES_IN_FLIGHT);
  // Once everything completes, windows open again.
  HSA_TEST_CHECK(fake::complete_async_copies(3) == 3);
  HSA_TEST_CHECK(holds(buf.gpu2, bytes, 0x44));
  HSA_TEST_CHECK(fake::pending_async_handlers() == 0);
  destroy_signal(stuck);
  destroy_signal(later);
  destroy_signal(same_agent);
  expect_nothing_in_flight(fake::agents.gpu);
}

void a_copy_on_another_agent_is_never_blocked() {
  kreplay_window_t* window = open_window(fake::agents.gpu);
  fill(buf.host, bytes, 0x55);
  const hsa_signal_t signal = make_signal();
  const int calls_before = fake::state_now().async_copy_calls;
  std::atomic<bool> returned{false};
  std::thread program([&] {
    HSA_TEST_CHECK(program_copy(buf.gpu2, fake::agents.gpu2, buf.host, fake::agents.cpu, bytes, signal) ==
                   HSA_STATUS_SUCCESS);
    returned.store(true);
  });
  HSA_TEST_CHECK(eventually(returned));  // while the window on gpu is open
  program.join();
  HSA_TEST_CHECK(fake::state_now().async_copy_calls == calls_before + 1);
  HSA_TEST_CHECK(fake::complete_async_copy_with_signal(signal));
  HSA_TEST_CHECK(holds(buf.gpu2, bytes, 0x55));
  close_window(window);
  destroy_signal(signal);
  expect_nothing_in_flight(fake::agents.gpu2);
}

// A call may name an agent other than the memory's owner (here gpu2 for both sides of a peer copy into gpu's
// memory, or the rect variant's copy_agent): the owner's window holds it all the same.
template <typename Issue>
void waits_for_the_owners_window(Issue issue, unsigned char value) {
  fill(buf.gpu2, bytes, value);
  fill(buf.gpu, bytes, 0);
  const hsa_signal_t signal = make_signal();
  kreplay_window_t* window = open_window(fake::agents.gpu);
  const int calls_before = fake::state_now().async_copy_calls;
  std::atomic<bool> returned{false};
  hsa_status_t status = HSA_STATUS_ERROR;
  std::thread program([&] {
    status = issue(signal);
    returned.store(true);
  });
  pause_for_a_wrong_move();
  HSA_TEST_CHECK(!returned.load());
  HSA_TEST_CHECK(fake::state_now().async_copy_calls == calls_before);
  close_window(window);
  program.join();
  HSA_TEST_CHECK(status == HSA_STATUS_SUCCESS);
  // It counts on gpu until done.
  const kreplay_window_options_t o = options(50);
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  window = nullptr;
  HSA_TEST_CHECK(kreplay_window_open(fake::k(fake::agents.gpu), &o, &window, &reason) == KREPLAY_STATUS_DECLINED);
  HSA_TEST_CHECK(reason == KREPLAY_DECLINE_COPIES_IN_FLIGHT);
  HSA_TEST_CHECK(fake::complete_async_copy_with_signal(signal));
  HSA_TEST_CHECK(holds(buf.gpu, bytes, value));
  destroy_signal(signal);
  expect_nothing_in_flight(fake::agents.gpu);
}

void a_copy_into_a_fenced_agents_memory_waits_whatever_agents_it_names() {
  const int bad_before = fake::state_now().async_bad_agent;
  waits_for_the_owners_window(
      [](hsa_signal_t signal) {
        return program_copy(buf.gpu, fake::agents.gpu2, buf.gpu2, fake::agents.gpu2, bytes, signal);
      },
      0x66);
  HSA_TEST_CHECK(fake::state_now().async_bad_agent == bad_before + 1);  // the fake saw the mismatch the test meant

  const int rect_before = fake::state_now().async_copy_rect_calls;
  waits_for_the_owners_window(
      [](hsa_signal_t signal) {
        // 64 rows of 64 bytes, pitch 64: all of the buffer.
        const hsa_pitched_ptr_t dst{buf.gpu, 64, bytes};
        const hsa_pitched_ptr_t src{buf.gpu2, 64, bytes};
        const hsa_dim3_t origin{0, 0, 0};
        const hsa_dim3_t range{64, 64, 1};
        return live_amd.hsa_amd_memory_async_copy_rect_fn(&dst, &origin, &src, &origin, &range, fake::agents.gpu2,
                                                          hsaDeviceToDevice, 0, nullptr, signal);
      },
      0x77);
  HSA_TEST_CHECK(fake::state_now().async_copy_rect_calls == rect_before + 1);
}

void refused_copies_and_handlers_end_the_count_at_once() {
  // The runtime refuses the copy: the wrapper returns its status, and nothing stays counted.
  const hsa_signal_t signal = make_signal();
  fake::state.fail_async_submit_at = fake::state.async_copy_calls + 1;
  HSA_TEST_CHECK(program_copy(buf.gpu, fake::agents.gpu, buf.host, fake::agents.cpu, bytes, signal) ==
                 HSA_STATUS_ERROR_OUT_OF_RESOURCES);
  fake::state.fail_async_submit_at = 0;
  HSA_TEST_CHECK(fake::pending_async_copies() == 0);
  HSA_TEST_CHECK(fake::pending_async_handlers() == 0);
  expect_nothing_in_flight(fake::agents.gpu);

  // The runtime refuses the handler: the copy runs, unfenced from then on, and the adapter says so once.
  fake::state.fail_async_handler = true;
  HSA_TEST_CHECK(program_copy(buf.gpu, fake::agents.gpu, buf.host, fake::agents.cpu, bytes, signal) ==
                 HSA_STATUS_SUCCESS);
  const hsa_signal_t second = make_signal();
  HSA_TEST_CHECK(program_copy(buf.gpu2, fake::agents.gpu2, buf.host, fake::agents.cpu, bytes, second) ==
                 HSA_STATUS_SUCCESS);
  fake::state.fail_async_handler = false;
  HSA_TEST_CHECK(fake::pending_async_copies() == 2);
  expect_nothing_in_flight(fake::agents.gpu);
  HSA_TEST_CHECK(handler_warnings.load() == 1);
  HSA_TEST_CHECK(fake::complete_async_copies(2) == 2);
  destroy_signal(signal);
  destroy_signal(second);

  // Nothing to fence: a zero-byte copy is forwarded without a signal read or a handler.
  const fake::state_t before = fake::state_now();
  const hsa_signal_t empty = make_signal();
  HSA_TEST_CHECK(program_copy(buf.gpu, fake::agents.gpu, buf.host, fake::agents.cpu, 0, empty) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state_now().async_copy_calls == before.async_copy_calls + 1);
  HSA_TEST_CHECK(fake::state_now().signal_load_calls == before.signal_load_calls);
  HSA_TEST_CHECK(fake::state_now().async_handler_calls == before.async_handler_calls);
  HSA_TEST_CHECK(fake::complete_async_copies(1) == 1);
  destroy_signal(empty);
}

#if KREPLAY_HSA_HAVE_COPY_ON_ENGINE
void an_on_engine_copy_in_flight_holds_the_window() {
  const hsa_signal_t signal = make_signal();
  const int on_engine_before = fake::state_now().async_copy_on_engine_calls;
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_async_copy_on_engine_fn(buf.gpu, fake::agents.gpu, buf.host,
                                                                 fake::agents.cpu, bytes, 0, nullptr, signal,
                                                                 static_cast<hsa_amd_sdma_engine_id_t>(1),
                                                                 false) == HSA_STATUS_SUCCESS);
  HSA_TEST_CHECK(fake::state_now().async_copy_on_engine_calls == on_engine_before + 1);
  const kreplay_window_options_t o = options(50);
  kreplay_window_t* window = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  HSA_TEST_CHECK(kreplay_window_open(fake::k(fake::agents.gpu), &o, &window, &reason) == KREPLAY_STATUS_DECLINED);
  HSA_TEST_CHECK(reason == KREPLAY_DECLINE_COPIES_IN_FLIGHT);
  HSA_TEST_CHECK(fake::complete_async_copy_with_signal(signal));
  destroy_signal(signal);
  expect_nothing_in_flight(fake::agents.gpu);
}
#endif

}  // namespace

int main() {
  using namespace kreplay::hsa;
  fake::reset(0x52000000);
  fake::fill_tables(&live_core, &live_amd);
  captured_core = live_core;
  captured_amd = live_amd;
  const AmdExtTable original_amd = live_amd;
  set_log_sink(&sink, KREPLAY_LOG_INFO);

  // Chained: the three entries now hold wrappers, and a call reaches the runtime once, with its arguments.
  HSA_TEST_CHECK(install(&live_core, &live_amd, 0) == INSTALL_SUCCESS);
  HSA_TEST_CHECK(copy_wrappers_installed());
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_async_copy_fn != original_amd.hsa_amd_memory_async_copy_fn);
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_async_copy_rect_fn != original_amd.hsa_amd_memory_async_copy_rect_fn);
#if KREPLAY_HSA_HAVE_COPY_ON_ENGINE
  HSA_TEST_CHECK(live_amd.hsa_amd_memory_async_copy_on_engine_fn !=
                 original_amd.hsa_amd_memory_async_copy_on_engine_fn);
#endif
  // What the wrappers use to watch a copy is not wrapped itself.
  HSA_TEST_CHECK(live_amd.hsa_amd_signal_async_handler_fn == original_amd.hsa_amd_signal_async_handler_fn);
  HSA_TEST_CHECK(kreplay::hsa::configure(&captured_core, &captured_amd, nullptr) == KREPLAY_STATUS_SUCCESS);
  kreplay_tracking_enable(true);

  buf.gpu = allocate(fake::pools.gpu_coarse, bytes);
  buf.gpu2 = allocate(fake::pools.gpu2_coarse, bytes);
  buf.host = allocate(fake::pools.cpu_fine, bytes);

  // A second instance receives tables that hold the wrappers: refused, untouched, and a call through its copy
  // still reaches the runtime exactly once (a wrapper that had saved itself would never return).
  CoreApiTable instance1_core = live_core;
  AmdExtTable instance1_amd = live_amd;
  HSA_TEST_CHECK(install(&instance1_core, &instance1_amd, 1) == INSTALL_REFUSED_NOT_FIRST_INSTANCE);
  HSA_TEST_CHECK(install(&instance1_core, &instance1_amd, 0) == INSTALL_REFUSED_ALREADY_INSTALLED);
  HSA_TEST_CHECK(std::memcmp(&instance1_amd, &live_amd, sizeof live_amd) == 0);
  {
    const hsa_signal_t signal = make_signal();
    const int calls_before = fake::state_now().async_copy_calls;
    HSA_TEST_CHECK(instance1_amd.hsa_amd_memory_async_copy_fn(buf.gpu, fake::agents.gpu, buf.host, fake::agents.cpu,
                                                              96, 0, nullptr, signal) == HSA_STATUS_SUCCESS);
    HSA_TEST_CHECK(fake::state_now().async_copy_calls == calls_before + 1);
    fake::async_call_t last = fake::state_now().last_async_copy;
    HSA_TEST_CHECK(last.dst == buf.gpu && last.src == buf.host && last.bytes == 96 && last.signal == signal.handle);
    const hsa_pitched_ptr_t dst{buf.gpu, 64, bytes};
    const hsa_pitched_ptr_t src{buf.gpu2, 64, bytes};
    const hsa_dim3_t origin{0, 0, 0};
    const hsa_dim3_t range{32, 2, 1};
    const hsa_signal_t rect_signal = make_signal();
    HSA_TEST_CHECK(instance1_amd.hsa_amd_memory_async_copy_rect_fn(&dst, &origin, &src, &origin, &range,
                                                                   fake::agents.gpu, hsaDeviceToDevice, 0, nullptr,
                                                                   rect_signal) == HSA_STATUS_SUCCESS);
    HSA_TEST_CHECK(fake::state_now().async_copy_calls == calls_before + 2);
    HSA_TEST_CHECK(fake::state_now().async_copy_rect_calls == 1);
    last = fake::state_now().last_async_copy;
    HSA_TEST_CHECK(last.dst == buf.gpu && last.src == buf.gpu2 && last.bytes == 32);
    HSA_TEST_CHECK(last.signal == rect_signal.handle);
    HSA_TEST_CHECK(fake::complete_async_copies(2) == 2);
    destroy_signal(signal);
    destroy_signal(rect_signal);
  }

  before_any_window_a_copy_costs_no_runtime_call();
  // The first window arms the fence; from then on every copy is counted.
  HSA_TEST_CHECK(open_and_close(fake::agents.gpu, 200).copies_waited == 0);
  a_copy_in_flight_holds_the_window_until_it_completes();
  a_copy_issued_during_a_window_waits_then_runs();
  a_copy_that_never_completes_declines_the_window_and_lets_later_copies_through();
  a_copy_on_another_agent_is_never_blocked();
  a_copy_into_a_fenced_agents_memory_waits_whatever_agents_it_names();
  refused_copies_and_handlers_end_the_count_at_once();
#if KREPLAY_HSA_HAVE_COPY_ON_ENGINE
  an_on_engine_copy_in_flight_holds_the_window();
#endif

  HSA_TEST_CHECK(fake::pending_async_copies() == 0);
  HSA_TEST_CHECK(fake::pending_async_handlers() == 0);
  HSA_TEST_CHECK(fake::state_now().signal_misuse == 0);
  std::printf("hsa copy fence: copies hold, wait for and outlast windows as they should; on-engine wrapper %s\n",
              KREPLAY_HSA_HAVE_COPY_ON_ENGINE ? "tested" : "not in these headers");
  finalize();
  return 0;
}
