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
  // Nothing to let go of: kreplay_agent_reset (context_reset.cpp) made the snapshot unrestorable, and freeing
  // it then calls no device op.
  bool restore(launch_row_t&) override {
    kreplay_restore_report_t report{};
    return kreplay_restore(snapshot, &report) == KREPLAY_STATUS_SUCCESS;
  }
  kreplay_snapshot_t* snapshot = nullptr;
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
      row.reason = std::string("snapshot declined: ") + kreplay_decline_reason_string(reason);
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
  }

 private:
  tracker& tracker_;
};

}  // namespace

std::unique_ptr<snapshot_backend> make_kreplay_backend(tracker& tracker) {
  return std::make_unique<kreplay_backend>(tracker);
}

std::unique_ptr<snapshot_backend> make_backend(replay_backend which, tracker& tracker) {
  return which == replay_backend::cupti ? make_cupti_backend() : make_kreplay_backend(tracker);
}

}  // namespace kreplay::cuda::inject
