//! Learned write sets (version 4): a restore the host can mark as a full check, a report that says what it
//! digested and what the full check found, and write hints.

use std::mem::{offset_of, size_of};

use bitflags::bitflags;
use kreplay_core::log::Level;
use kreplay_core::snapshot::{RestoreOptions, RestoreReport};

use crate::boundary::ffi_guard;
use crate::engine::engine;
use crate::snapshot::{Use, kreplay_snapshot_t};
use crate::status::*;
use crate::types::write_out;
use crate::versioned::{self, Versioned};

/// Restore flag: digest the whole footprint whatever write set was learned, restore what changed, and add the
/// blocks found changed outside the set to it (reported as `write_set_misses`). Mark the last restore of a
/// window (the one before the pass whose results count) with it.
pub const KREPLAY_RESTORE_FULL_CHECK: u32 = 1;

bitflags! {
    /// The `KREPLAY_RESTORE_*` flags, checked on the way in: unknown bits are an error.
    #[derive(Copy, Clone, Debug, PartialEq, Eq)]
    struct RestoreFlags: u32 {
        const FULL_CHECK = KREPLAY_RESTORE_FULL_CHECK;
    }
}

/// How `kreplay_restore_ex` runs.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_restore_options_t {
    /// `sizeof(kreplay_restore_options_t)` as the caller compiled it.
    pub struct_size: usize,
    /// `KREPLAY_RESTORE_*` bits; any other bit is `INVALID_ARGUMENT`.
    pub flags: u32,
}

// SAFETY: `kreplay_restore_options_t` is `#[repr(C)]` and begins with `struct_size: usize`; its other field is
// an integer.
unsafe impl Versioned for kreplay_restore_options_t {
    const MIN_SIZE: usize = offset_of!(kreplay_restore_options_t, flags) + size_of::<u32>();
    const REQUIRED: &'static str = "the version-4 fields (flags)";

    fn defaults() -> Self {
        kreplay_restore_options_t { struct_size: size_of::<kreplay_restore_options_t>(), flags: 0 }
    }
}

/// What `kreplay_restore_ex` did: `kreplay_restore_report_t`'s fields, and what the write set made of the
/// restore. Versioned by `struct_size`: later versions append fields. Module variables count like regions.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_restore_report_ex_t {
    /// `sizeof(kreplay_restore_report_ex_t)` as the caller compiled it; set it before the call.
    pub struct_size: usize,
    /// Regions and module variables written back (or verified unchanged).
    pub restored: usize,
    /// Tracked regions freed, shrunk or reallocated since the snapshot: not written.
    pub skipped: usize,
    /// Copies that failed.
    pub failed: usize,
    /// Bytes written back.
    pub bytes: usize,
    /// Bytes verified unchanged by digest, so not written.
    pub clean_bytes: usize,
    /// Bytes of device memory digested to find what changed (0 without dirty-only).
    pub digested_bytes: usize,
    /// Time of the restore, digests included.
    pub elapsed_ns: u64,
    /// Of it, the time spent digesting.
    pub digest_ns: u64,
    /// Blocks in the snapshot's write set after the restore (learned and hinted; 0 without `learn_write_set`).
    pub write_set_blocks: usize,
    /// Blocks this full check found changed outside the write set after partial restores: restored now and
    /// learned, but a pass from `write_set_miss_pass` on may have started from a state that was not the
    /// snapshot.
    pub write_set_misses: usize,
    /// The first pass that may have started from such a state (pass k + 1 runs after the snapshot's k-th
    /// restore); 0 without misses.
    pub write_set_miss_pass: u32,
    /// The restore digested only the learned write set and hints, not the whole footprint.
    pub partial: bool,
}

impl From<RestoreReport> for kreplay_restore_report_ex_t {
    fn from(r: RestoreReport) -> Self {
        kreplay_restore_report_ex_t {
            struct_size: size_of::<kreplay_restore_report_ex_t>(),
            restored: r.restored,
            skipped: r.skipped,
            failed: r.failed,
            bytes: r.bytes,
            clean_bytes: r.clean_bytes,
            digested_bytes: r.digested_bytes,
            elapsed_ns: r.elapsed_ns,
            digest_ns: r.digest_ns,
            write_set_blocks: r.write_set.blocks,
            write_set_misses: r.write_set.misses,
            write_set_miss_pass: r.write_set.miss_pass,
            partial: r.partial,
        }
    }
}

/// `kreplay_restore`, with options and a versioned report. Writes every region of `snapshot` back, as
/// `kreplay_restore` does (same validation, skips, failures and statuses). With the policy's
/// `learn_write_set`, a restore that is not a full check digests and writes only the snapshot's learned write
/// set and hints; `options->flags` with `KREPLAY_RESTORE_FULL_CHECK` makes it check the whole footprint (mark the
/// last restore of a window with it; the last restore of a window opened with a known pass count is checked
/// anyway). `options` may be NULL (no flags).
///
/// `report_out` may be NULL; otherwise its `struct_size` must be set and cover at least `struct_size` itself,
/// and it is always written (the fields that size covers), even on `PARTIAL_RESTORE`. `INVALID_ARGUMENT`, with
/// nothing restored: a snapshot that is not live, `options->struct_size` too small, unknown flag bits, or a
/// `report_out->struct_size` below `sizeof(size_t)`. Thread-safe, like `kreplay_restore`.
///
/// # Safety
/// `options` must be NULL or point to at least `options->struct_size` readable bytes laid out as
/// `kreplay_restore_options_t`; `report_out` NULL or valid for reads and writes of `report_out->struct_size`
/// bytes.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_restore_ex(
    snapshot: *mut kreplay_snapshot_t,
    options: *const kreplay_restore_options_t,
    report_out: *mut kreplay_restore_report_ex_t,
) -> kreplay_status_t {
    let flags = if options.is_null() {
        Some(0)
    } else {
        // SAFETY: non-null, with `struct_size` readable bytes of the struct (caller's contract).
        unsafe { versioned::read("kreplay_restore_ex", "options", options) }.map(|options| options.flags)
    };
    let Some(flags) = flags else { return KREPLAY_STATUS_INVALID_ARGUMENT };
    let Some(flags) = RestoreFlags::from_bits(flags) else {
        kreplay_core::log!(Level::Warning, "kreplay_restore_ex: unknown flags {flags:#x}");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    };
    let struct_size = if report_out.is_null() {
        None
    } else {
        // SAFETY: non-null, and at least its `struct_size` field is readable (caller's contract).
        Some(unsafe { versioned::struct_size_of(report_out) })
    };
    if struct_size.is_some_and(|size| size < size_of::<usize>()) {
        kreplay_core::log!(Level::Warning, "kreplay_restore_ex: report_out->struct_size does not cover struct_size");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    let Some(inner) = Use::take(snapshot) else {
        kreplay_core::log!(Level::Warning, "kreplay_restore_ex: {:#x} is not a live snapshot", snapshot.addr());
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    };
    let options = RestoreOptions { full_check: flags.contains(RestoreFlags::FULL_CHECK) };
    let (report, result) = engine().restore_with(inner.get(), options);
    drop(inner);
    if let Some(struct_size) = struct_size {
        // A caller built against an older header gets the fields its struct has; its struct_size stays its own.
        let full = kreplay_restore_report_ex_t { struct_size, ..report.into() };
        // SAFETY: `report_out` is non-null and valid for writes of its `struct_size` bytes (caller's contract).
        unsafe { versioned::write(report_out, struct_size, &full) };
    }
    to_status(result)
}

/// A range of device memory the host believes a dispatch may write.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct kreplay_write_hint_t {
    /// Start of the range.
    pub address: *const std::ffi::c_void,
    /// Its length; 0 stands for the whole tracked region that holds `address` (for a pointer whose extent the
    /// host does not know, such as one found in a launch's arguments).
    pub bytes: usize,
}

/// Adds the blocks that `hints` touch, within `snapshot`'s tracked regions, to its write set, so that its
/// partial restores digest (and, when changed, restore) them too. Hints only add: they never make a full check
/// partial, and a hint outside every tracked region of the snapshot adds nothing. A snapshot without digests
/// (no dirty-only) has no write set: SUCCESS, nothing added. `*blocks_added_out` (may be NULL) is the count of
/// blocks newly added, written only on success. `INVALID_ARGUMENT`, nothing added: a snapshot that is not live,
/// `hints` NULL with `count` above 0, or a hint whose range wraps around the address space.
/// `OUT_OF_HOST_MEMORY`: no memory for the set; nothing added. Thread-safe, also against restores of the same
/// snapshot (a restore already running does not see the hints).
///
/// # Safety
/// `hints` must be NULL or point to `count` readable hints; `blocks_added_out` NULL or valid for a write of a
/// `size_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_snapshot_hint_writes(
    snapshot: *mut kreplay_snapshot_t,
    hints: *const kreplay_write_hint_t,
    count: usize,
    blocks_added_out: *mut usize,
) -> kreplay_status_t {
    if hints.is_null() && count > 0 {
        kreplay_core::log!(Level::Warning, "kreplay_snapshot_hint_writes: hints is NULL and count is {count}");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    let Some(inner) = Use::take(snapshot) else {
        kreplay_core::log!(
            Level::Warning,
            "kreplay_snapshot_hint_writes: {:#x} is not a live snapshot",
            snapshot.addr()
        );
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    };
    let hints = if count == 0 {
        &[][..]
    } else {
        // SAFETY: non-null and `count` readable hints by the caller's contract.
        unsafe { std::slice::from_raw_parts(hints, count) }
    };
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    if ranges.try_reserve_exact(hints.len()).is_err() {
        return KREPLAY_STATUS_OUT_OF_HOST_MEMORY;
    }
    ranges.extend(hints.iter().map(|hint| (hint.address.addr(), hint.bytes)));
    match engine().hint_writes(inner.get(), &ranges) {
        Ok(added) => {
            // SAFETY: NULL or writable by the caller's contract.
            unsafe { write_out(blocks_added_out, added) };
            KREPLAY_STATUS_SUCCESS
        }
        Err(error) => error.into(),
    }
}
