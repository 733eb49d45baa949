/* kreplay: C++17 RAII layer over the C API in kreplay.h.
 *
 * Header-only. The names match the types a profiler such as rocprofiler-sdk already uses for kernel replay
 * (staging_buffer_t, device_snapshot_t, snap, restore), so it can stand in for them. Every function is
 * noexcept because the C API never throws: failures come back as values (a bool, a status, a decline
 * reason). Neither exceptions nor RTTI are needed; the header builds with -fno-exceptions -fno-rtti. */

#ifndef KREPLAY_HPP
#define KREPLAY_HPP

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "kreplay.h"

namespace kreplay {

/// Host storage for one region's saved contents, lent by the agent's staging pool.
///
/// Move-only: a move hands the storage to the destination and leaves the source empty, so the storage goes
/// back to its pool exactly once, from whichever object holds it last (its destructor, `release()`, a move
/// assignment over it, or its next `acquire`). The storage is not zero-filled. Not thread-safe: one object
/// must not be used from two threads at once (distinct objects may be).
class staging_buffer_t {
 public:
  /// An empty buffer: `data()` is NULL and `size()` is 0.
  staging_buffer_t() noexcept = default;

  /// Takes the storage of `other`, which becomes empty.
  staging_buffer_t(staging_buffer_t&& other) noexcept : buffer_(other.buffer_) { other.buffer_ = empty_raw(); }

  /// Returns this buffer's storage to its pool, then takes the storage of `other`, which becomes empty.
  /// Moving a buffer onto itself changes nothing.
  staging_buffer_t& operator=(staging_buffer_t&& other) noexcept {
    if (this != &other) {
      release();
      buffer_ = other.buffer_;
      other.buffer_ = empty_raw();
    }
    return *this;
  }

  /// Not copyable: two owners would return the same storage twice.
  staging_buffer_t(const staging_buffer_t&) = delete;
  /// Not copyable: two owners would return the same storage twice.
  staging_buffer_t& operator=(const staging_buffer_t&) = delete;

  /// Returns the storage to its agent's pool.
  ~staging_buffer_t() { release(); }

  /// Returns what the buffer holds, then takes storage for `size` bytes from `agent`'s pool. True on
  /// success; on failure the buffer is empty (or unchanged, for an invalid size). `acquire_status` says why.
  bool acquire(kreplay_agent_t agent, std::size_t size) noexcept {
    return acquire_status(agent, size) == KREPLAY_STATUS_SUCCESS;
  }

  /// `acquire`, returning the status of `kreplay_staging_acquire` (e.g. `KREPLAY_STATUS_OUT_OF_HOST_MEMORY`).
  kreplay_status_t acquire_status(kreplay_agent_t agent, std::size_t size) noexcept {
    return kreplay_staging_acquire(&buffer_, agent, size);
  }

  /// Returns the storage to its agent's pool now; the buffer becomes empty. Empty: nothing happens.
  void release() noexcept { kreplay_staging_release(&buffer_); }

  /// The storage, or NULL when empty; `size()` bytes are usable (`capacity()` in fact).
  char* data() noexcept { return static_cast<char*>(buffer_.data); }

  /// The storage, or NULL when empty.
  const char* data() const noexcept { return static_cast<const char*>(buffer_.data); }

  /// Bytes asked for by the last successful `acquire`; 0 when empty.
  std::size_t size() const noexcept { return buffer_.size; }

  /// Bytes the storage really has (at least `size()`); 0 when empty.
  std::size_t capacity() const noexcept { return buffer_.capacity; }

  /// True when the buffer holds no storage.
  bool empty() const noexcept { return buffer_.data == nullptr; }

  /// The pool the storage belongs to (meaningful only when not empty).
  kreplay_agent_t agent() const noexcept { return buffer_.agent; }

  /// The C view of the buffer, for code that calls the C API directly; read it, never write it.
  const kreplay_staging_buffer_t& raw() const noexcept { return buffer_; }

 private:
  /// The zero-initialised struct the C API takes as "holds nothing".
  static constexpr kreplay_staging_buffer_t empty_raw() noexcept {
    return kreplay_staging_buffer_t{};
  }

  /// What the C API lent; written only by the C API and by moves.
  kreplay_staging_buffer_t buffer_ = empty_raw();
};

/// Capacity held idle in `agent`'s staging pool, in bytes.
inline std::size_t retained_staging_bytes(kreplay_agent_t agent) noexcept {
  return kreplay_retained_staging_bytes(agent);
}

/// A snapshot of one agent's device memory, or the reason there is none.
///
/// Move-only owner of a `kreplay_snapshot_t*`: a move hands the snapshot to the destination and leaves the
/// source without one (`ok == false`, `reason == KREPLAY_DECLINE_NONE`), so it is freed exactly once, by the
/// last owner's destructor, `reset()` or a move assignment over it.
struct device_snapshot_t {
  /// True when a snapshot was taken: the dispatch may be replayed, restoring it before every pass after the
  /// first.
  bool ok = false;

  /// Why `snap` declined (`KREPLAY_DECLINE_NONE` when `ok`, or when `status` is not `DECLINED`).
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;

  /// What `kreplay_snap` returned: `SUCCESS`, `DECLINED`, or an error such as `INTERNAL_ERROR`; `DECLINED` also
  /// for an object that holds no snapshot because it was default-constructed, moved from or reset.
  kreplay_status_t status = KREPLAY_STATUS_DECLINED;

  /// No snapshot.
  device_snapshot_t() noexcept = default;

  /// Takes ownership of `snapshot` (which may be NULL): `ok` is true exactly when it is not NULL.
  explicit device_snapshot_t(kreplay_snapshot_t* snapshot) noexcept
      : ok(snapshot != nullptr),
        status(snapshot != nullptr ? KREPLAY_STATUS_SUCCESS : KREPLAY_STATUS_DECLINED),
        snapshot_(snapshot) {}

  /// Takes the snapshot of `other`, which is left without one.
  device_snapshot_t(device_snapshot_t&& other) noexcept
      : ok(other.ok), reason(other.reason), status(other.status), snapshot_(other.snapshot_) {
    other.forget();
  }

  /// Frees this object's snapshot, then takes the one of `other`, which is left without one. Moving an object
  /// onto itself changes nothing.
  device_snapshot_t& operator=(device_snapshot_t&& other) noexcept {
    if (this != &other) {
      reset();
      ok = other.ok;
      reason = other.reason;
      status = other.status;
      snapshot_ = other.snapshot_;
      other.forget();
    }
    return *this;
  }

  /// Not copyable: two owners would free the same snapshot twice.
  device_snapshot_t(const device_snapshot_t&) = delete;
  /// Not copyable: two owners would free the same snapshot twice.
  device_snapshot_t& operator=(const device_snapshot_t&) = delete;

  /// Frees the snapshot; its staging goes back to the agent's pool.
  ~device_snapshot_t() { reset(); }

  /// True when there is nothing to restore: no snapshot, or one that captured no region and no module
  /// variable.
  bool empty() const noexcept {
    if (snapshot_ == nullptr) {
      return true;
    }
    const kreplay_snapshot_info_t figures = info();
    return figures.regions == 0 && figures.module_variables == 0;
  }

  /// The snapshot, or NULL; it stays owned by this object.
  const kreplay_snapshot_t* get() const noexcept { return snapshot_; }
  /// The snapshot (NULL when there is none), still owned by this object, for calls that update it (write
  /// hints, `kreplay_restore_ex`).
  kreplay_snapshot_t* get() noexcept { return snapshot_; }

  /// Sizes and phase timings of the capture; all zero when there is no snapshot.
  kreplay_snapshot_info_t info() const noexcept {
    kreplay_snapshot_info_t figures{};
    if (snapshot_ != nullptr && kreplay_snapshot_info(snapshot_, &figures) != KREPLAY_STATUS_SUCCESS) {
      figures = kreplay_snapshot_info_t{};
    }
    return figures;
  }

  /// Frees the snapshot now; afterwards the object holds none (`ok == false`).
  void reset() noexcept {
    kreplay_snapshot_free(snapshot_);
    forget();
  }

  /// Gives up ownership: returns the snapshot (to be freed with `kreplay_snapshot_free`) and holds none.
  kreplay_snapshot_t* release() noexcept {
    kreplay_snapshot_t* snapshot = snapshot_;
    forget();
    return snapshot;
  }

 private:
  /// Drops the pointer without freeing it (its new owner, or the caller, frees it) and reads as "no snapshot".
  void forget() noexcept {
    snapshot_ = nullptr;
    ok = false;
    reason = KREPLAY_DECLINE_NONE;
    status = KREPLAY_STATUS_DECLINED;
  }

  /// The owned snapshot, or NULL.
  kreplay_snapshot_t* snapshot_ = nullptr;
};

/// Captures every tracked region of `agent` and every module-scope variable visible to it. When it declines,
/// `ok` is false and `reason` says why: run the dispatch once, unreplayed.
inline device_snapshot_t snap(kreplay_agent_t agent) noexcept {
  kreplay_snapshot_t* raw = nullptr;
  kreplay_decline_reason_t reason = KREPLAY_DECLINE_NONE;
  const kreplay_status_t status = kreplay_snap(agent, &raw, &reason);
  device_snapshot_t snapshot(status == KREPLAY_STATUS_SUCCESS ? raw : nullptr);
  snapshot.status = status;
  snapshot.reason = status == KREPLAY_STATUS_SUCCESS ? KREPLAY_DECLINE_NONE : reason;
  return snapshot;
}

/// The outcome of a restore: the report, and the status that says whether another pass may run.
struct restore_result_t {
  /// `SUCCESS`; `PARTIAL_RESTORE` when a copy failed (run no further pass); `INVALID_ARGUMENT` when there was
  /// no snapshot; `FINALIZED` after `kreplay_finalize`.
  kreplay_status_t status = KREPLAY_STATUS_INVALID_ARGUMENT;

  /// What was restored, skipped and failed, and the bytes written back.
  kreplay_restore_report_t report{};

  /// True when every captured region was restored or rightly skipped, so another pass may run.
  bool ok() const noexcept { return status == KREPLAY_STATUS_SUCCESS; }
};

/// Writes every region of `snapshot` back; returns the report and the status. A snapshot that is not `ok`
/// gives `INVALID_ARGUMENT` and a zeroed report.
inline restore_result_t restore_with_status(const device_snapshot_t& snapshot) noexcept {
  restore_result_t result;
  result.status = kreplay_restore(snapshot.get(), &result.report);
  return result;
}

/// Writes every region of `snapshot` back and returns the report. The status is dropped: check
/// `report.failed` (non-zero means `PARTIAL_RESTORE`: run no further pass) or use `restore_with_status`.
inline kreplay_restore_report_t restore(const device_snapshot_t& snapshot) noexcept {
  return restore_with_status(snapshot).report;
}

/// The outcome of `restore_ex`: the versioned report (bytes digested, write-set misses) and the status.
struct restore_ex_result_t {
  /// As `restore_result_t::status`; also `INVALID_ARGUMENT` for unknown flags.
  kreplay_status_t status = KREPLAY_STATUS_INVALID_ARGUMENT;

  /// What was restored, digested and learned; `struct_size` is this header's.
  kreplay_restore_report_ex_t report{};

  /// True when another pass may run.
  bool ok() const noexcept { return status == KREPLAY_STATUS_SUCCESS; }
};

/// `kreplay_restore_ex`: writes every region of `snapshot` back, with `flags` (`KREPLAY_RESTORE_FULL_CHECK` for
/// the last restore of a window, under the policy's `learn_write_set`).
inline restore_ex_result_t restore_ex(device_snapshot_t& snapshot, std::uint32_t flags = 0) noexcept {
  restore_ex_result_t result;
  kreplay_restore_options_t options{};
  options.struct_size = sizeof options;
  options.flags = flags;
  result.report.struct_size = sizeof result.report;
  result.status = kreplay_restore_ex(snapshot.get(), &options, &result.report);
  return result;
}

/// `kreplay_snapshot_hint_writes`: ranges the host believes the dispatch may write join `snapshot`'s write set
/// (`bytes` 0: the whole tracked region holding `address`). Returns the status; `*added`, when given, the
/// blocks newly added.
inline kreplay_status_t hint_writes(device_snapshot_t& snapshot, const kreplay_write_hint_t* hints, std::size_t count,
                                    std::size_t* added = nullptr) noexcept {
  return kreplay_snapshot_hint_writes(snapshot.get(), hints, count, added);
}

/// Device memory held idle for `agent` (retained device-tier storage no live snapshot uses).
inline std::size_t retained_device_bytes(kreplay_agent_t agent) noexcept { return kreplay_retained_device_bytes(agent); }

/// Gives all of `agent`'s idle device storage back.
inline void device_trim(kreplay_agent_t agent) noexcept { kreplay_device_trim(agent); }

/// Gives every agent's idle device storage back; call it and retry once when an allocation of the host's own
/// fails for lack of device memory.
inline void device_trim_all() noexcept { kreplay_device_trim_all(); }

/// Builds a `kreplay_policy_t` field by field, starting from the defaults, and installs it:
///
///     kreplay::policy_t().pin_staging(true).device_budget_bytes(1ull << 30).dirty_only(true).apply();
///
/// `struct_size` is always this header's `sizeof(kreplay_policy_t)`.
class policy_t {
 public:
  policy_t() noexcept : policy_() { policy_.struct_size = sizeof(kreplay_policy_t); }

  /// Page-lock retained staging (kept locked while retained).
  policy_t& pin_staging(bool on) noexcept { return policy_.pin_staging = on, *this; }
  /// Decline snapshots above this many bytes (0: no limit).
  policy_t& max_snapshot_bytes(std::size_t bytes) noexcept { return policy_.max_snapshot_bytes = bytes, *this; }
  /// Device memory per agent that snapshots may hold (0: host only).
  policy_t& device_budget_bytes(std::size_t bytes) noexcept { return policy_.device_budget_bytes = bytes, *this; }
  /// With a digest op: restore, and re-capture, only blocks whose digest changed.
  policy_t& dirty_only(bool on) noexcept { return policy_.dirty_only = on, *this; }
  /// Digest block size: 0 (64 KiB) or a power of two from 4 KiB to 16 MiB.
  policy_t& digest_block_bytes(std::size_t bytes) noexcept { return policy_.digest_block_bytes = bytes, *this; }
  /// Reuse an agent's module scan until `kreplay_modules_changed()`.
  policy_t& cache_module_scan(bool on) noexcept { return policy_.cache_module_scan = on, *this; }
  /// Bit k: decline a window while untracked memory of kind k (`kreplay_untracked_kind_t`) is live.
  policy_t& untracked_decline_mask(std::uint32_t mask) noexcept {
    return policy_.untracked_decline_mask = mask, *this;
  }
  /// A window projected above this logs one warning (0: 10 s).
  policy_t& warn_window_ns(std::uint64_t ns) noexcept { return policy_.warn_window_ns = ns, *this; }
  /// A window projected above this is declined with `OVER_COST` (0: no limit).
  policy_t& max_window_ns(std::uint64_t ns) noexcept { return policy_.max_window_ns = ns, *this; }
  /// With `ops.device_free_bytes`: each capture's device budget is this percent (0 to 100) of the free device
  /// memory, and at most `device_budget_bytes` when that is set too.
  policy_t& device_budget_percent(std::uint32_t percent) noexcept {
    return policy_.device_budget_percent = percent, *this;
  }
  /// Version 4: each capture may bring kreplay's host staging up to this percent (0 to 100, 0: off) of the host
  /// memory available at that moment plus what kreplay holds; above it the snapshot declines (`HOST_BUDGET`).
  policy_t& host_budget_percent(std::uint32_t percent) noexcept {
    return policy_.host_budget_percent = percent, *this;
  }
  /// Version 4: with `dirty_only`, learn each snapshot's write set; restores between the first and a full check
  /// digest only it.
  policy_t& learn_write_set(bool on) noexcept { return policy_.learn_write_set = on, *this; }

  /// The C struct, for `kreplay_set_policy`.
  const kreplay_policy_t& get() const noexcept { return policy_; }
  /// Installs it: `kreplay_set_policy`'s status.
  kreplay_status_t apply() const noexcept { return kreplay_set_policy(&policy_); }

 private:
  kreplay_policy_t policy_;
};

/// Calls `visit(const void* base, std::size_t bytes, std::uint64_t generation)` for each region tracked for
/// `agent`, in table order: `kreplay_inventory_foreach` with a callable. The visitor runs under the inventory's
/// read lock: it must not call kreplay, and must not throw (an exception cannot cross the library's C frames,
/// so one thrown from `visit` ends the process).
template <class Visit>
kreplay_status_t inventory_foreach(kreplay_agent_t agent, Visit&& visit) noexcept {
  using visitor = typename std::remove_reference<Visit>::type;
  return kreplay_inventory_foreach(
      agent,
      [](void* user_data, const void* base, std::size_t bytes, std::uint64_t generation) {
        (*static_cast<visitor*>(user_data))(base, bytes, generation);
      },
      const_cast<void*>(static_cast<const void*>(std::addressof(visit))));
}

/// The generation of the region tracked at exactly `base`, or 0 (never a generation) when none is.
inline std::uint64_t generation_of(const void* base) noexcept {
  std::uint64_t generation = 0;
  return kreplay_generation_of(base, &generation) == KREPLAY_STATUS_SUCCESS ? generation : 0;
}

/// One replay window (version 3): opened by `window_t::open`, closed by the destructor, `close()` or a move
/// assignment over it, exactly once. While it is open, `snap` and `restore` of its agent are accounted to it,
/// and async copies of other threads that touch the agent wait for it to close.
///
///     auto window = kreplay::window_t::open(agent, passes);
///     if (!window.is_open()) { /* run the dispatch once: window.reason() says why */ }
///     ... snap, passes, restores ...
///     window.close();   // window.outcome() is the account; the outcome line is logged
///
/// Move-only. Not thread-safe: one object must not be used from two threads at once.
class window_t {
 public:
  /// No window: `is_open()` is false, `status()` is `DECLINED`.
  window_t() noexcept : outcome_() {}

  /// Opens a window on `agent` for `passes` passes (0: open-ended, checked per pass as restores run), waiting
  /// up to `copy_timeout_ms` (0: 1000) for async copies in flight, over `dispatches` dispatches run in order on
  /// every pass (version 4; 0 and 1: one). A decline or an error gives an object that is not open; `reason()`
  /// and `status()` say why.
  static window_t open(kreplay_agent_t agent, std::uint32_t passes, std::uint32_t copy_timeout_ms = 0,
                       std::uint32_t dispatches = 0) noexcept {
    window_t window;
    kreplay_window_options_t options{};
    options.struct_size = sizeof options;
    options.passes = passes;
    options.copy_timeout_ms = copy_timeout_ms;
    options.dispatches = dispatches;
    window.status_ = kreplay_window_open(agent, &options, &window.window_, &window.reason_);
    window.outcome_.agent = agent;
    window.outcome_.reason = window.reason_;
    window.outcome_.passes_requested = passes;
    return window;
  }

  /// Takes the window of `other`, which is left without one.
  window_t(window_t&& other) noexcept : window_t() { take(other); }

  /// Closes this object's window, then takes the one of `other`. Moving an object onto itself changes nothing.
  window_t& operator=(window_t&& other) noexcept {
    if (this != &other) {
      close();
      take(other);
    }
    return *this;
  }

  /// Not copyable: two owners would close the same window twice.
  window_t(const window_t&) = delete;
  /// Not copyable: two owners would close the same window twice.
  window_t& operator=(const window_t&) = delete;

  /// Closes the window if it is still open.
  ~window_t() { close(); }

  /// True from a successful open until the close.
  bool is_open() const noexcept { return window_ != nullptr; }
  /// What `kreplay_window_open` returned (`SUCCESS`, `DECLINED` or an error).
  kreplay_status_t status() const noexcept { return status_; }
  /// Why the open declined (`KREPLAY_DECLINE_NONE` when it opened).
  kreplay_decline_reason_t reason() const noexcept { return reason_; }

  /// Closes the window (nothing when it is not open) and keeps its outcome; returns the close's status.
  kreplay_status_t close() noexcept {
    if (window_ == nullptr) {
      return KREPLAY_STATUS_SUCCESS;
    }
    kreplay_window_outcome_t outcome{};
    outcome.struct_size = sizeof outcome;
    const kreplay_status_t status = kreplay_window_close(window_, &outcome);
    window_ = nullptr;
    if (status == KREPLAY_STATUS_SUCCESS) {
      outcome_ = outcome;
    }
    return status;
  }

  /// The account of the window: complete after `close()`; before, or after a declined open, only the agent,
  /// the reason and the passes requested.
  const kreplay_window_outcome_t& outcome() const noexcept { return outcome_; }

 private:
  void take(window_t& other) noexcept {
    window_ = other.window_;
    status_ = other.status_;
    reason_ = other.reason_;
    outcome_ = other.outcome_;
    other.window_ = nullptr;
    other.status_ = KREPLAY_STATUS_DECLINED;
    other.reason_ = KREPLAY_DECLINE_NONE;
  }

  kreplay_window_t* window_ = nullptr;
  kreplay_status_t status_ = KREPLAY_STATUS_DECLINED;
  kreplay_decline_reason_t reason_ = KREPLAY_DECLINE_NONE;
  kreplay_window_outcome_t outcome_;
};

}  // namespace kreplay

#endif /* KREPLAY_HPP */
