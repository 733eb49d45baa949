// --backend kreplay (the default): kreplay's own snapshot of the agent's inventory, restored in place.
#include "backend.hpp"

namespace kreplay::cuda::inject {
namespace {

class kreplay_saved final : public saved_memory {
 public:
  ~kreplay_saved() override {
    if (snapshot != nullptr) {
      kreplay_snapshot_free(snapshot);
    }
  }
  // Between kreplay's passes: after the first, the engine digests only the learned write set and the hints.
  bool restore(launch_row_t&, bool checked) override {
    kreplay_restore_options_t options{};
    options.struct_size = sizeof(options);
    options.flags = checked ? KREPLAY_RESTORE_FULL_CHECK : 0;
    kreplay_restore_report_ex_t report{};
    report.struct_size = sizeof(report);
    const bool restored = kreplay_restore_ex(snapshot, &options, &report) == KREPLAY_STATUS_SUCCESS;
    restores.bytes += report.bytes;
    restores.digested_bytes += report.digested_bytes;
    restores.elapsed_ns += report.elapsed_ns;
    restores.write_set_misses += report.write_set_misses;
    if (report.write_set_miss_pass != 0 &&
        (restores.write_set_miss_pass == 0 || report.write_set_miss_pass < restores.write_set_miss_pass)) {
      restores.write_set_miss_pass = report.write_set_miss_pass;
    }
    return restored;
  }
  bool account(launch_row_t& row) const override {
    kreplay_snapshot_info_t info{};
    if (kreplay_snapshot_info(snapshot, &info) != KREPLAY_STATUS_SUCCESS) {
      return false;
    }
    row.footprint_bytes = info.bytes;
    row.bytes_moved = info.copied_bytes + restores.bytes;
    row.snapshot_ms =
        static_cast<double>(info.inventory_ns + info.module_scan_ns + info.staging_ns + info.copy_ns + info.digest_ns) /
        1e6;
    row.restore_ms = static_cast<double>(restores.elapsed_ns) / 1e6;
    row.digested_bytes = restores.digested_bytes;
    row.write_set_misses = restores.write_set_misses;
    row.write_set_miss_pass = restores.write_set_miss_pass;
    return true;
  }
  // One digest block at each pointer (not the whole region: a caching allocator's segment is large).
  void hint_writes(const std::vector<const void*>& pointers) override {
    std::vector<kreplay_write_hint_t> hints;
    hints.reserve(pointers.size());
    for (const void* pointer : pointers) {
      hints.push_back({pointer, hint_bytes});
    }
    (void)kreplay_snapshot_hint_writes(snapshot, hints.data(), hints.size(), nullptr);
  }
  static constexpr size_t hint_bytes = 65536;
  kreplay_snapshot_t* snapshot = nullptr;
  kreplay_restore_report_ex_t restores{};  // the sums of its restores (for account)
};

class kreplay_backend final : public snapshot_backend {
 public:
  explicit kreplay_backend(tracker& tracker) : tracker_(tracker) {}
  const char* name() const override { return "kreplay"; }
  std::vector<CUpti_CallbackDomain> whole_domains() const override { return {}; }
  bool start(const void*, std::string*) override { return true; }

  std::unique_ptr<saved_memory> capture(kreplay_agent_t agent, CUcontext, launch_row_t& row) override {
    auto saved = std::make_unique<kreplay_saved>();  // first: nothing to leak if it throws
    kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
    if (kreplay_snap(agent, &saved->snapshot, &reason) != KREPLAY_STATUS_SUCCESS) {
      saved->snapshot = nullptr;
      row.reason = "snapshot declined: " + decline_text(reason);
      if (reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE) {
        row.reason += " (" + tracker_.last_error() + ")";
      }
      return nullptr;
    }
    return saved;
  }

  // kreplay measures its snapshot and restores itself, and knows the footprint and what it moved.
  void window_closed(const kreplay_window_outcome_t& outcome, launch_row_t& row) const override {
    row.footprint_bytes = outcome.footprint_bytes;
    row.bytes_moved = outcome.bytes_moved;
    row.snapshot_ms = static_cast<double>(outcome.snapshot_ns) / 1e6;
    row.restore_ms = static_cast<double>(outcome.restore_ns) / 1e6;
    row.digested_bytes = outcome.digested_bytes;
    row.write_set_misses = outcome.write_set_misses;
    row.write_set_miss_pass = outcome.write_set_miss_pass;
  }

 private:
  tracker& tracker_;
};

}  // namespace

std::unique_ptr<snapshot_backend> make_kreplay_backend(tracker& tracker) {
  return std::make_unique<kreplay_backend>(tracker);
}

std::unique_ptr<snapshot_backend> make_backend(replay_backend which, tracker& tracker) {
  // cupti-kernel-replay takes no snapshot: kreplay's backend is there, unused.
  return which == replay_backend::cupti ? make_cupti_backend() : make_kreplay_backend(tracker);
}

}  // namespace kreplay::cuda::inject
