// --backend cupti: CUPTI's Checkpoint API saves and restores the launch's context, for comparing kreplay with
// it on the same program. libcheckpoint.so is loaded at the first save, in the process CUDA has set up by then.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <cupti_checkpoint.h>

#include "backend.hpp"
#include "guard.hpp"
#include "symbols.hpp"

namespace kreplay::cuda::inject {
namespace {

// cupti_checkpoint.h declares its C++ names in a namespace of its own.
using NV::Cupti::Checkpoint::CUpti_Checkpoint;

class cupti_saved final : public saved_memory {
 public:
  explicit cupti_saved(const checkpoint_api_t& api) : api_(api) {}
  // Also after a failed save: whatever it set up is freed.
  ~cupti_saved() override {
    own_call_scope own;
    if (!gone_) {
      (void)api_.free(&checkpoint);
    }
  }
  // The checkpoint's device copies went with the context; its host side is left (the Checkpoint API frees
  // both at once).
  void context_gone() override { gone_ = true; }
  bool restore(launch_row_t& row, bool) override {
    const auto begun = replay_clock::now();
    own_call_scope own;
    const bool restored = api_.restore(&checkpoint) == CUPTI_SUCCESS;
    row.restore_ms += ms_between(begun, replay_clock::now());
    return restored;
  }
  CUpti_Checkpoint checkpoint{};

 private:
  const checkpoint_api_t& api_;
  bool gone_ = false;
};

class cupti_backend final : public snapshot_backend {
 public:
  const char* name() const override { return "cupti"; }
  // --backend cupti ran on the H200 (run 5, docs/performance.md) with the runtime and resource domains enabled
  // whole, as in the reference measurement of CUPTI's Checkpoint API.
  std::vector<CUpti_CallbackDomain> whole_domains() const override {
    return {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_RESOURCE};
  }
  bool start(const void* cupti_symbol, std::string*) override {
    cupti_symbol_ = cupti_symbol;
    return true;
  }

  std::unique_ptr<saved_memory> capture(kreplay_agent_t agent, CUcontext context, launch_row_t& row) override {
    const auto begun = replay_clock::now();
    std::call_once(once_, [&] { loaded_ = load(); });
    if (!loaded_) {
      row.reason = "CUPTI's Checkpoint API is not available (libcheckpoint.so)";
      return nullptr;
    }
    auto saved = std::make_unique<cupti_saved>(api_);
    saved->checkpoint.structSize = CUpti_Checkpoint_STRUCT_SIZE;
    // The launch's context, named: with NULL (the current one) and libcheckpoint loaded RTLD_LOCAL every save
    // inside the launch callback answered CUPTI_ERROR_NOT_INITIALIZED on the H200, while checkpoint_probe.cu,
    // naming its context, saved in every setting; with both changed (run 5) every save succeeded. Which of the
    // two mattered was not measured apart, so both stay.
    saved->checkpoint.ctx = context;
    saved->checkpoint.allowOverwrite = 1;
    own_call_scope own;
    const CUptiResult result = api_.save(&saved->checkpoint);
    row.snapshot_ms = ms_between(begun, replay_clock::now());
    if (result != CUPTI_SUCCESS) {
      row.reason = "cuptiCheckpointSave failed (CUptiResult " + std::to_string(static_cast<int>(result)) + ")";
      return nullptr;
    }
    kreplay_inventory_stats_t stats{};
    if (kreplay_inventory_stats(agent, &stats) == KREPLAY_STATUS_SUCCESS) {
      row.footprint_bytes = stats.bytes;
    }
    return saved;
  }

  // The row's figures are the backend's own (kreplay's window moved nothing).
  void window_closed(const kreplay_window_outcome_t&, launch_row_t&) const override {}

 private:
  bool load() {
    std::string where;
    if (!resolve_checkpoint(api_, cupti_symbol_, &where)) {
      return false;
    }
    std::fprintf(stderr, "kreplay-cuda-replay: --backend cupti: CUPTI's Checkpoint API from %s\n", where.c_str());
    return true;
  }

  const void* cupti_symbol_ = nullptr;  // a libcupti function: libcheckpoint.so is looked for beside it
  checkpoint_api_t api_;
  std::once_flag once_;
  bool loaded_ = false;  // written inside once_, read after it
};

}  // namespace

std::unique_ptr<snapshot_backend> make_cupti_backend() { return std::make_unique<cupti_backend>(); }

bool resolve_checkpoint(checkpoint_api_t& out, const void* cupti_symbol, std::string* where) {
  auto from = [&](void* library) {
    checkpoint_api_t found;  // published whole or not at all
    if (library == nullptr || !find_symbol(library, "cuptiCheckpointSave", found.save) ||
        !find_symbol(library, "cuptiCheckpointRestore", found.restore) ||
        !find_symbol(library, "cuptiCheckpointFree", found.free)) {
      return false;
    }
    out = found;
    return true;
  };
  if (const char* path = std::getenv("KREPLAY_CHECKPOINT_PATH"); path != nullptr && *path != '\0') {
    *where = std::string("KREPLAY_CHECKPOINT_PATH=") + path;
    return from(dlopen(path, RTLD_NOW | RTLD_GLOBAL));
  }
  Dl_info info{};
  if (cupti_symbol != nullptr && dladdr(cupti_symbol, &info) != 0 && info.dli_fname != nullptr) {
    std::string beside = info.dli_fname;
    beside = beside.substr(0, beside.rfind('/') + 1) + "libcheckpoint.so";
    if (from(dlopen(beside.c_str(), RTLD_NOW | RTLD_GLOBAL))) {
      *where = beside;
      return true;
    }
  }
  *where = "libcheckpoint.so by the loader's search";
  if (from(dlopen("libcheckpoint.so", RTLD_NOW | RTLD_GLOBAL))) {
    return true;
  }
  *where = "no libcheckpoint.so beside libcupti or on the loader's path (set KREPLAY_CHECKPOINT_PATH)";
  return false;
}

}  // namespace kreplay::cuda::inject
