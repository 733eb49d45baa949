// The passes of a replayed launch. At its entry, passes 1 to N - 1: relaunch, wait, digest (--verify), back to
// the saved memory. The program's own launch is then pass N, measured at its exit, where the window closes; with
// counters whose k passes are all the launch gets (N = k), its range begins at the entry and ends at the exit.
// If a relaunch fails, the memory is the saved one again and the program's launch computes what it would have
// without kreplay.
#include <cstring>

#include "callback_data.hpp"
#include "guard.hpp"
#include "replay/pending.hpp"

namespace kreplay::cuda::inject {

void replayer::run_own_passes(pending_t& p) {
  own_call_scope own;  // the relaunches and their callbacks are kreplay's, not the program's
  p.timer.create();
  double restore_ms = 0;  // the restore that prepared the pass about to run
  for (uint32_t pass = 1; pass < p.passes; ++pass) {
    if (!run_pass(p, pass, &restore_ms)) {
      return;
    }
  }
  p.restore_before_program_ms = restore_ms;
  p.program_counter_begin_ms = begin_counted_pass(p, p.passes);  // nothing unless pass N is a counted one
  p.timer.start(p.launch.stream);
  p.program_pass_begun = replay_clock::now();
}

bool replayer::run_pass(pending_t& p, uint32_t pass, double* restore_ms) {
  const double begin_ms = begin_counted_pass(p, pass);
  const auto begun = replay_clock::now();
  p.timer.start(p.launch.stream);
  const CUresult launched = relaunch(p.launch, driver_);
  p.timer.stop(p.launch.stream);
  const bool ran = launched == CUDA_SUCCESS && driver_.ctx_synchronize() == CUDA_SUCCESS;
  const auto done = replay_clock::now();
  end_counted_pass(p, pass, ran, begin_ms);
  if (!ran) {
    p.row.reason = "relaunch failed: pass " + std::to_string(pass) + ", CUresult " +
                   std::to_string(static_cast<int>(launched)) + "; the program's own launch runs from the snapshot";
    (void)driver_.ctx_synchronize();
    (void)restore(p, true);
    return false;
  }
  ++p.own_passes_run;
  const float kernel_ms = p.timer.elapsed_ms();
  if (pass == 1) {
    p.row.kernel_ms = kernel_ms;
  } else {
    p.extra_ms.push_back(*restore_ms + ms_between(begun, done) - kernel_ms);
  }
  verify_pass(p, pass);
  const auto restoring = replay_clock::now();
  if (!restore(p, pass + 1 == p.passes)) {
    stop_counting(p, "the restore after pass " + std::to_string(pass) + " failed");
    p.row.reason = "restore failed: after pass " + std::to_string(pass) +
                   ", the program's own launch may see that pass's writes";
    return false;
  }
  *restore_ms = ms_between(restoring, replay_clock::now());
  return true;
}

bool replayer::restore(pending_t& p, bool last) {
  if (!config_.restore) {
    return true;  // the control: every pass sees the previous one's writes
  }
  if (p.saved == nullptr) {
    return false;
  }
  return p.saved->restore(p.row, last);
}

void replayer::hint_arguments(pending_t& p) {
  // Hints only add to a learned write set, which only kreplay's partial restores read: otherwise every restore
  // is whole and the scan (a tracker lookup per word) would be wasted on each replayed launch.
  if (config_.backend != replay_backend::kreplay || !config_.restore || !config_.dirty_only || !config_.write_set) {
    return;
  }
  const std::vector<unsigned char>& bytes = p.launch.argument_bytes;
  std::vector<const void*> pointers;
  const auto* data = bytes.data();
  // The words at offsets that are multiples of 8 in the parameter buffer: where a pointer argument lies.
  for (size_t at = 0; at + sizeof(uint64_t) <= bytes.size(); at += sizeof(uint64_t)) {
    uint64_t word = 0;
    std::memcpy(&word, data + at, sizeof(word));
    if (word == 0) {
      continue;
    }
    const void* pointer = reinterpret_cast<const void*>(static_cast<uintptr_t>(word));
    kreplay_pointer_info_t info{};
    if (tracker_.pointer_info(pointer, &info) == KREPLAY_STATUS_SUCCESS && info.size != 0) {
      pointers.push_back(pointer);
    }
  }
  if (!pointers.empty()) {
    p.saved->hint_writes(pointers);
  }
}

double replayer::begin_counted_pass(pending_t& p, uint32_t pass) {
  if (p.counting == nullptr || pass > p.counted_passes) {
    return 0;
  }
  // Before the range starts, so the flush is never counted.
  std::string note;
  const double flush_ms = flush_caches(p.context, p.launch.stream, &note);
  if (!note.empty() && p.row.counters.empty()) {
    p.row.counters = note;
  }
  p.flush_ms += flush_ms;
  p.row.counter_setup_ms += flush_ms;
  const auto begun = replay_clock::now();
  // The launch a range of its own where the source asks for user ranges (range mode's profiler object).
  if (std::string why; !p.counting->begin_pass(&why) || !p.counting->begin_range(&why)) {
    stop_counting(p, "pass " + std::to_string(pass) + ": " + why);
  }
  return ms_between(begun, replay_clock::now());
}

void replayer::end_counted_pass(pending_t& p, uint32_t pass, bool ran, double begin_ms) {
  if (p.counting == nullptr || pass > p.counted_passes) {
    return;
  }
  std::string why;
  const auto ending = replay_clock::now();
  if (!p.counting->end_range(&why) || !p.counting->end_pass(&why)) {
    stop_counting(p, "pass " + std::to_string(pass) + ": " + why);
    return;
  }
  p.counter_ms.push_back(begin_ms + ms_between(ending, replay_clock::now()));
  if (!ran) {
    stop_counting(p, "pass " + std::to_string(pass) + " did not run");
    return;
  }
  if (pass == p.counted_passes) {
    const auto collecting = replay_clock::now();
    if (!p.counting->collect(&p.row.metrics, &why)) {
      p.row.metrics.clear();
      p.row.counters = "not collected: " + why;
    }
    p.counting.reset();
    p.collect_ms = ms_between(collecting, replay_clock::now());
    p.row.counter_setup_ms += p.collect_ms;
  }
}

double replayer::flush_caches(CUcontext context, CUstream stream, std::string* why) {
  const auto flushing = replay_clock::now();
  why->clear();
  if (config_.caches == cache_control::all) {
    (void)caches_.flush(context, stream, why);  // says why when it fails
  }
  return ms_between(flushing, replay_clock::now());
}

void replayer::stop_counting(pending_t& p, const std::string& why) {
  if (p.counting == nullptr) {
    return;
  }
  p.counting.reset();
  p.row.metrics.clear();
  p.row.counters = "stopped: " + why;
}

void replayer::verify_pass(pending_t& p, uint32_t pass) {
  if (config_.verify) {
    p.verifier.after_pass(ops_, p.agent, pass, p.row.verify);
  }
}

// The program's own launch, the last pass: its time, its counters when the pass is counted (their values are
// collected here), and its digest compared with pass 1's.
void replayer::finish_program_pass(pending_t& p, const CUpti_CallbackData& data) {
  const uint32_t pass = p.own_passes_run + 1;
  own_call_scope own;
  if (!succeeded(data)) {
    end_counted_pass(p, pass, false, p.program_counter_begin_ms);
    if (p.row.reason.empty()) {
      p.row.reason = "the program's launch failed: CUresult " + std::to_string(static_cast<int>(result_of(data)));
    }
    p.row.passes_run = p.passes_that_ran(false);
    return;
  }
  p.timer.stop(p.launch.stream);
  const bool ran = driver_.ctx_synchronize() == CUDA_SUCCESS;
  const auto done = replay_clock::now();
  if (!ran && p.row.reason.empty()) {
    p.row.reason = "the program's launch failed on the device";
  }
  end_counted_pass(p, pass, ran, p.program_counter_begin_ms);
  const float kernel_ms = p.timer.elapsed_ms();
  if (pass == 1) {
    p.row.kernel_ms = kernel_ms;
  } else if (p.row.reason.empty()) {
    p.extra_ms.push_back(p.restore_before_program_ms + ms_between(p.program_pass_begun, done) - kernel_ms);
  }
  if (p.row.reason.empty()) {
    verify_pass(p, pass);
  }
  p.row.passes_run = p.passes_that_ran(ran);
}

// The saved memory released, then the window closed: other threads' work goes on from here.
void replayer::close_window(pending_t& p) {
  p.saved.reset();
  if (p.window == nullptr) {
    return;
  }
  kreplay_window_outcome_t outcome{};
  outcome.struct_size = sizeof(outcome);
  if (kreplay_window_close(p.window, &outcome) == KREPLAY_STATUS_SUCCESS) {
    backend_->window_closed(outcome, p.row);
    if (p.row.write_set_misses > 0) {
      // The program's result is exact (the last restore was a full check), but passes may not have been.
      const bool differed = p.row.verify.rfind("differs", 0) == 0;  // --verify's own verdict is kept after it
      p.row.verify = write_set_verdict(p.row) + (differed ? "; " + p.row.verify : std::string());
    }
  }
  p.window = nullptr;
}

}  // namespace kreplay::cuda::inject
