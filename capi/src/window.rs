//! The replay window (version 3): open and close, the async-copy fence, re-entry, untracked memory.

use std::mem::{offset_of, size_of};

use kreplay_core::Agent;
use kreplay_core::log::Level;
use kreplay_core::window::{Opened, Outcome, UntrackedStats, WindowHandle, WindowOptions};

use crate::boundary::ffi_guard;
use crate::engine::engine;
use crate::status::*;
use crate::types::{kreplay_agent_t, write_out};
use crate::versioned::{self, Versioned};

/// One replayed dispatch on one agent, from before its snapshot to after its last pass. Opaque (a handle, not
/// an address): close it with `kreplay_window_close`.
pub struct kreplay_window_t {
    _opaque: [u8; 0],
}

/// Kinds of memory seen through `kreplay_record_alloc` (or a vmem map) and not captured.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum kreplay_untracked_kind_t {
    /// Device memory that is not coarse-grained (also memory shared with a graphics API or another process).
    KREPLAY_UNTRACKED_FINE_GRAINED = 0,
    /// Host memory the device can address (pinned, registered, mapped).
    KREPLAY_UNTRACKED_HOST = 1,
    /// Unified / managed memory.
    KREPLAY_UNTRACKED_MANAGED = 2,
    /// Kernel-argument memory.
    KREPLAY_UNTRACKED_KERNARG = 3,
    /// Allocations made with `KREPLAY_ALLOC_FLAG_EXECUTABLE`.
    KREPLAY_UNTRACKED_EXECUTABLE = 4,
    /// Mappings recorded with an unknown owner.
    KREPLAY_UNTRACKED_VMEM_UNKNOWN = 5,
    /// The number of kinds: the length of the arrays of `kreplay_untracked_t`.
    KREPLAY_UNTRACKED_KIND_COUNT = 6,
}

const KINDS: usize = kreplay_untracked_kind_t::KREPLAY_UNTRACKED_KIND_COUNT as usize;
const _: () = assert!(KINDS == kreplay_core::window::untracked::UNTRACKED_KINDS);

/// Untracked memory live at the time of the query, for one agent (allocations of unknown owner, such as
/// executable ones, count for every agent).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct kreplay_untracked_t {
    /// Allocations of each kind, indexed by `kreplay_untracked_kind_t`.
    pub count: [usize; 6],
    /// Their bytes.
    pub bytes: [usize; 6],
}

impl From<UntrackedStats> for kreplay_untracked_t {
    fn from(stats: UntrackedStats) -> Self {
        kreplay_untracked_t { count: stats.count, bytes: stats.bytes }
    }
}

/// What the host tells `kreplay_window_open`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_window_options_t {
    /// `sizeof(kreplay_window_options_t)` as the caller compiled it.
    pub struct_size: usize,
    /// Passes the host means to run, used for admission and the outcome; version 4: 0 means open-ended, not
    /// known in advance (a counter service decides as it goes). An open-ended window is admitted on its first
    /// pass (the snapshot) at open; after each restore, its projection (the snapshot and restores so far, as
    /// measured, plus one more restore at their average) is checked against the policy: the first crossing of
    /// `warn_window_ns` and of `max_window_ns` each log one WARNING, and the window stays open (an open window
    /// is never declined; the host decides whether to run the next pass). The outcome line says
    /// `passes=N/open`.
    pub passes: u32,
    /// How long the open waits for async copies in flight [0 = 1000].
    pub copy_timeout_ms: u32,
    /// Version 4: the dispatches the window covers, run in order on every pass (a graph, a multi-packet
    /// submission, a range of dispatches) [0 = 1: one dispatch]. The snapshot is taken once before the first;
    /// restore between repetitions of the whole range. Admission, the fence and the outcome treat the range as
    /// one dispatch; the range's own dispatches are not re-entry (do not report them with
    /// `kreplay_window_note_reentry`). A host may also replay the range dispatch by dispatch: further
    /// snapshots in the window (one per dispatch, each restored between that dispatch's passes) are the host's,
    /// not the window's; the outcome accounts only the first snapshot and its restores.
    pub dispatches: u32,
}

/// The account of one window, filled by `kreplay_window_close`.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct kreplay_window_outcome_t {
    /// `sizeof(kreplay_window_outcome_t)` as the caller compiled it; set it before the call.
    pub struct_size: usize,
    /// The window's agent.
    pub agent: kreplay_agent_t,
    /// `KREPLAY_DECLINE_NONE`: replayed; otherwise why not (a snapshot that declined inside the window).
    pub reason: kreplay_decline_reason_t,
    /// Passes the host asked for at open; 0: open-ended.
    pub passes_requested: u32,
    /// 1 + the restores that succeeded in this window.
    pub passes_run: u32,
    /// Bytes captured by the window's snapshot (0 if none).
    pub footprint_bytes: usize,
    /// Its regions and module variables.
    pub footprint_regions: usize,
    /// Bytes moved by the snapshot and every restore of the window.
    pub bytes_moved: usize,
    /// Bytes verified unchanged and not written, summed over the restores.
    pub clean_bytes: usize,
    /// Time of the snapshot.
    pub snapshot_ns: u64,
    /// Time of all restores of the window.
    pub restore_ns: u64,
    /// Admission's projection of the snapshot and restores.
    pub projected_ns: u64,
    /// Async copies in flight that the open waited for.
    pub copies_waited: u64,
    /// Untracked memory live at open.
    pub untracked: kreplay_untracked_t,
    /// Work was submitted on the agent from inside the window (`kreplay_window_note_reentry`).
    pub reentry_observed: bool,
    /// Version 4: bytes of device memory the window's restores digested to find what changed.
    pub digested_bytes: usize,
    /// Version 4: blocks that full checks found changed outside the snapshot's learned write set after partial
    /// restores (`learn_write_set`): restored and learned then, but a pass from `write_set_miss_pass` on may have
    /// started from a state that was not the snapshot.
    pub write_set_misses: usize,
    /// Version 4: the first pass that may have started from such a state; 0 without misses.
    pub write_set_miss_pass: u32,
    /// Version 4: the dispatches the window covered (`kreplay_window_options_t::dispatches`, at least 1). It lies
    /// in what was the struct's tail padding, so `struct_size` cannot tell whether a library filled it: zero the
    /// struct before the call, and read 0 as "not filled" (a library before this field).
    pub dispatches: u32,
}

impl From<Outcome> for kreplay_window_outcome_t {
    fn from(o: Outcome) -> Self {
        kreplay_window_outcome_t {
            struct_size: size_of::<kreplay_window_outcome_t>(),
            agent: o.agent.into(),
            reason: o.reason.into(),
            passes_requested: o.passes_requested,
            passes_run: o.passes_run,
            footprint_bytes: o.footprint_bytes,
            footprint_regions: o.footprint_regions,
            bytes_moved: o.bytes_moved,
            clean_bytes: o.clean_bytes,
            snapshot_ns: o.snapshot_ns,
            restore_ns: o.restore_ns,
            projected_ns: o.projected_ns,
            copies_waited: o.copies_waited,
            untracked: o.untracked.into(),
            reentry_observed: o.reentry_observed,
            digested_bytes: o.digested_bytes,
            write_set_misses: o.write_set_misses,
            write_set_miss_pass: o.write_set_miss_pass,
            dispatches: o.dispatches,
        }
    }
}

// SAFETY: `kreplay_window_options_t` is `#[repr(C)]` and begins with `struct_size: usize`; its other fields are
// integers.
unsafe impl Versioned for kreplay_window_options_t {
    const MIN_SIZE: usize = offset_of!(kreplay_window_options_t, copy_timeout_ms) + size_of::<u32>();
    const REQUIRED: &'static str = "the version-3 fields";
    // Version 4's `dispatches` ends at 20, inside the struct's 24 bytes: a later `u32` would start in that tail
    // padding, which a version-4 caller's struct_size of 24 covers without setting.
    const VERSION_ENDS: &'static [usize] = &[
        offset_of!(kreplay_window_options_t, copy_timeout_ms) + size_of::<u32>(),
        offset_of!(kreplay_window_options_t, dispatches) + size_of::<u32>(),
    ];

    fn defaults() -> Self {
        kreplay_window_options_t {
            struct_size: size_of::<kreplay_window_options_t>(),
            passes: 0,
            copy_timeout_ms: 0,
            dispatches: 0,
        }
    }
}
/// Opens a replay window on `agent`: closes the async-copy fence on it (a `kreplay_copy_begin` naming it from
/// now on waits), waits up to `options->copy_timeout_ms` for the copies already in flight, then checks
/// untracked memory and the projected cost against the policy.
///
/// `SUCCESS`: `*window_out` is the open window, owned by the caller until `kreplay_window_close`;
/// `*reason_out` is `KREPLAY_DECLINE_NONE`. `DECLINED`: `*window_out` is NULL, `*reason_out` says why
/// (`COPIES_IN_FLIGHT`, `UNTRACKED_MEMORY`, `OVER_COST`, `WINDOW_NESTED`), nothing is left fenced and the
/// outcome line was logged: run the dispatch once. A second window on an agent that has one open is
/// `WINDOW_NESTED` at once, never a wait; windows on different agents may be open together, also on one thread.
/// `INVALID_ARGUMENT` (nothing changed): NULL `options` or `window_out`, `options->struct_size` too small.
/// `passes` 0 opens an open-ended window (version 4; it was `INVALID_ARGUMENT` in version 3). `reason_out` may
/// be NULL. Thread-safe.
///
/// # Safety
/// `options` must be NULL or point to at least `options->struct_size` readable bytes laid out as
/// `kreplay_window_options_t`; `window_out` NULL or valid for a write of a pointer; `reason_out` NULL or valid
/// for a write of `kreplay_decline_reason_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_window_open(
    agent: kreplay_agent_t,
    options: *const kreplay_window_options_t,
    window_out: *mut *mut kreplay_window_t,
    reason_out: *mut kreplay_decline_reason_t,
) -> kreplay_status_t {
    if window_out.is_null() {
        kreplay_core::log!(Level::Warning, "kreplay_window_open: window_out is NULL");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    // SAFETY: `options` is NULL or holds `struct_size` readable bytes of the struct (caller's contract).
    let Some(options) = (unsafe { versioned::read("kreplay_window_open", "options", options) }) else {
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    };
    let (passes, copy_timeout_ms, dispatches) = (options.passes, options.copy_timeout_ms, options.dispatches);
    match engine().window_open(agent.into(), WindowOptions { passes, copy_timeout_ms, dispatches }) {
        Ok(Opened::Window(handle)) => {
            // SAFETY: both outputs are writable by the caller's contract (`window_out` checked non-null).
            unsafe {
                window_out.write(std::ptr::without_provenance_mut(handle.0 as usize));
                write_out(reason_out, kreplay_decline_reason_t::KREPLAY_DECLINE_NONE);
            }
            KREPLAY_STATUS_SUCCESS
        }
        Ok(Opened::Declined(outcome)) => {
            // SAFETY: as above.
            unsafe {
                window_out.write(std::ptr::null_mut());
                write_out(reason_out, outcome.reason.into());
            }
            KREPLAY_STATUS_DECLINED
        }
        Err(error) => error.into(),
    }
}

/// Closes a window: reopens the fence on its agent (copies waiting for it proceed), fills `*outcome_out`
/// (also when the window's snapshot declined inside it), logs the outcome line (INFO when replayed, WARNING
/// when declined) and frees the window; the handle is invalid afterwards. `INVALID_ARGUMENT`, with nothing
/// changed: a handle that is NULL, already closed or never issued (handles are checked, never dereferenced).
/// `outcome_out` may be NULL; a caller's `struct_size` smaller than this version's gets the fields it covers
/// (its `struct_size` unchanged), and one too small to hold `struct_size` itself is `INVALID_ARGUMENT` with the
/// window closed all the same (a window left open would keep its agent fenced).
/// Thread-safe; works after `kreplay_finalize` too, so no fence stays closed.
///
/// # Safety
/// `outcome_out` must be NULL or valid for reads and writes of `outcome_out->struct_size` bytes.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_window_close(
    window: *mut kreplay_window_t,
    outcome_out: *mut kreplay_window_outcome_t,
) -> kreplay_status_t {
    if window.is_null() {
        kreplay_core::log!(Level::Warning, "kreplay_window_close: window is NULL");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    let struct_size = if outcome_out.is_null() {
        0
    } else {
        // SAFETY: non-null, and at least the `struct_size` field is readable (caller's contract).
        unsafe { versioned::struct_size_of(outcome_out) }
    };
    // The window closes whatever the outcome's size: a window left open would keep the agent fenced.
    let outcome = match engine().window_close(WindowHandle(window.addr() as u64)) {
        Ok(outcome) => outcome,
        Err(error) => return error.into(),
    };
    if outcome_out.is_null() {
        return KREPLAY_STATUS_SUCCESS;
    }
    if struct_size < size_of::<usize>() {
        kreplay_core::log!(
            Level::Warning,
            "kreplay_window_close: outcome_out->struct_size {struct_size} does not even cover struct_size; the \
             window is closed and its outcome not written"
        );
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    // A caller built against an older header gets the fields its struct has; its struct_size stays its own.
    let full = kreplay_window_outcome_t { struct_size, ..outcome.into() };
    // SAFETY: `outcome_out` is valid for writes of `struct_size` bytes (caller's contract).
    unsafe { versioned::write(outcome_out, struct_size, &full) };
    KREPLAY_STATUS_SUCCESS
}

/// The host saw a dispatch submitted on `agent` from inside that agent's open window (a tool callback
/// launching work): the window's outcome will say so. Does nothing when no window is open on `agent`; never
/// waits. Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_window_note_reentry(agent: kreplay_agent_t) {
    engine().window_note_reentry(agent.into())
}

/// For an adapter's wrapper around each async copy of the host program (DMA, outside the dispatch queues): call
/// before issuing the copy, naming every agent it touches, and `kreplay_copy_end(*token_out)` when its
/// completion signal fires. Costs one relaxed atomic load while no window has ever been opened (the token is
/// then 0, and ending it does nothing; such a copy is not counted, so a host whose program may have copies in
/// flight at its first replayed dispatch opens and closes one window at setup). Afterwards it waits (back-off, no lock held) while a window of another
/// thread is open on any of `agents`, and the copy counts as in flight on each of them until its end; a call
/// from the thread of a window open on the agent (an adapter's own copies, from inside a device op) never
/// waits. Never allocates. `INVALID_ARGUMENT`: `agents` NULL, `count` 0, or `token_out` NULL;
/// `CAPACITY_EXCEEDED` (nothing counted, a log line; issue the copy anyway): more than 8 distinct agents, 4096
/// copies in flight, or 256 agents known. Thread-safe.
///
/// # Safety
/// `agents` must be NULL or point to `count` readable agents; `token_out` NULL or valid for a write of a
/// `uint64_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_copy_begin(
    agents: *const kreplay_agent_t,
    count: usize,
    token_out: *mut u64,
) -> kreplay_status_t {
    if agents.is_null() || count == 0 || token_out.is_null() {
        kreplay_core::log!(Level::Warning, "kreplay_copy_begin: agents or token_out is NULL, or count is 0");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    const _: () = assert!(size_of::<kreplay_agent_t>() == size_of::<Agent>());
    // SAFETY: 1. `count` readable agents by the caller's contract; 2. `kreplay_agent_t` and `Agent` are both
    // one `u64` (`repr(C)` and a single-field tuple struct of the same size and alignment, asserted above).
    let agents = unsafe { std::slice::from_raw_parts(agents.cast::<Agent>(), count) };
    match engine().copy_begin(agents) {
        Ok(token) => {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { token_out.write(token) };
            KREPLAY_STATUS_SUCCESS
        }
        Err(error) => error.into(),
    }
}

/// Ends the async copy that `kreplay_copy_begin` gave `token` for: it no longer counts as in flight. A token
/// ended twice, or never issued, is ignored with a log line; 0 is ignored silently. Thread-safe; never waits.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_copy_end(token: u64) {
    engine().copy_end(token)
}

/// Untracked memory live for `agent` now, by kind. `out` is written only on success; NULL is
/// `INVALID_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `out` must be NULL or valid for a write of `kreplay_untracked_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_untracked_stats(
    agent: kreplay_agent_t,
    out: *mut kreplay_untracked_t,
) -> kreplay_status_t {
    if out.is_null() {
        kreplay_core::log!(Level::Warning, "kreplay_untracked_stats: out is NULL");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    match engine().untracked_stats(agent.into()) {
        Ok(stats) => {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { out.write(stats.into()) };
            KREPLAY_STATUS_SUCCESS
        }
        Err(error) => error.into(),
    }
}
