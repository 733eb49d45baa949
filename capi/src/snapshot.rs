//! Snapshot and restore through opaque handles.

use kreplay_core::DeclineReason;
use kreplay_core::log::Level;
use kreplay_core::snapshot::Snapshot;
use spin::Mutex;

use crate::boundary::ffi_guard;
use crate::device_ops::CDeviceOps;
use crate::engine::engine;
use crate::status::*;
use crate::types::{kreplay_agent_t, write_out};

/// A complete capture of one agent's device memory. Opaque (a handle, not an address); free it with
/// `kreplay_snapshot_free`.
pub struct kreplay_snapshot_t {
    _opaque: [u8; 0],
}

type Inner = Snapshot<'static, CDeviceOps>;

/// Snapshots alive at once, process-wide (hosts hold one per agent being replayed).
const MAX_LIVE_SNAPSHOTS: usize = 1024;
const INDEX_BITS: u32 = 11;
const _: () = assert!(MAX_LIVE_SNAPSHOTS < 1 << INDEX_BITS);

/// The snapshots handed out and not yet freed. A handle is not an address: it encodes a slot index and a
/// serial number that is never reused, so a freed, stale or foreign handle is refused instead of used, even
/// when a later snapshot reuses the same memory or slot.
///
/// Restore and info take a use of the snapshot under the registry's lock and give it back afterwards; free
/// unregisters the handle at once (later calls with it are refused) and drops the snapshot itself only when no
/// use remains: otherwise the last user drops it, so a free during a restore takes effect when the restore ends.
/// Snapshots are dropped outside the lock, since dropping one gives storage back to the pools.
struct Registry {
    snapshots: [usize; MAX_LIVE_SNAPSHOTS],
    serials: [u64; MAX_LIVE_SNAPSHOTS],
    /// Calls using the snapshot now.
    uses: [u32; MAX_LIVE_SNAPSHOTS],
    /// Freed by the host while in use: the handle is dead, the slot waits for its last user.
    freed: [bool; MAX_LIVE_SNAPSHOTS],
    next_serial: u64,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    snapshots: [0; MAX_LIVE_SNAPSHOTS],
    serials: [0; MAX_LIVE_SNAPSHOTS],
    uses: [0; MAX_LIVE_SNAPSHOTS],
    freed: [false; MAX_LIVE_SNAPSHOTS],
    next_serial: 1,
});

impl Registry {
    fn slot(handle: *const kreplay_snapshot_t) -> Option<(usize, u64)> {
        let value = handle.addr();
        let index = (value & ((1 << INDEX_BITS) - 1)).checked_sub(1)?;
        (index < MAX_LIVE_SNAPSHOTS).then_some((index, (value >> INDEX_BITS) as u64))
    }

    /// The slot of a live (registered, not freed) handle.
    fn live(&self, handle: *const kreplay_snapshot_t) -> Option<usize> {
        let (index, serial) = Self::slot(handle)?;
        (self.snapshots[index] != 0 && self.serials[index] == serial && !self.freed[index]).then_some(index)
    }

    /// Registers a snapshot and returns its handle; `None` when every slot is taken.
    fn insert(&mut self, snapshot: *mut Inner) -> Option<*mut kreplay_snapshot_t> {
        let index = self.snapshots.iter().position(|&p| p == 0)?;
        let serial = self.next_serial;
        self.next_serial += 1;
        self.snapshots[index] = snapshot as usize;
        self.serials[index] = serial;
        self.uses[index] = 0;
        self.freed[index] = false;
        let value = ((serial as usize) << INDEX_BITS) | (index + 1);
        Some(std::ptr::without_provenance_mut(value))
    }

    /// Empties a slot and returns the snapshot it held, for the caller to drop outside the lock.
    fn vacate(&mut self, index: usize) -> *mut Inner {
        let snapshot = self.snapshots[index] as *mut Inner;
        self.snapshots[index] = 0;
        self.uses[index] = 0;
        self.freed[index] = false;
        snapshot
    }

    /// Unregisters a live handle. Returns its snapshot when nobody uses it (the caller drops it); when calls
    /// use it, the last of them will, and this returns `Some(None)`.
    fn remove(&mut self, handle: *const kreplay_snapshot_t) -> Option<Option<*mut Inner>> {
        let index = self.live(handle)?;
        if self.uses[index] == 0 {
            Some(Some(self.vacate(index)))
        } else {
            self.freed[index] = true;
            Some(None)
        }
    }
}

/// A use of a registered snapshot: it is not dropped while this lives.
pub(crate) struct Use {
    index: usize,
    snapshot: *mut Inner,
}

impl Use {
    /// Takes a use of the snapshot behind a live handle.
    pub(crate) fn take(handle: *const kreplay_snapshot_t) -> Option<Use> {
        let mut registry = REGISTRY.lock();
        let index = registry.live(handle)?;
        registry.uses[index] += 1;
        Some(Use { index, snapshot: registry.snapshots[index] as *mut Inner })
    }

    pub(crate) fn get(&self) -> &Inner {
        // SAFETY: the slot holds a `Box<Inner>` from `kreplay_snap`, and this use keeps it from being dropped
        // (a free while it lives only marks the slot).
        unsafe { &*self.snapshot }
    }
}

impl Drop for Use {
    fn drop(&mut self) {
        let orphan = {
            let mut registry = REGISTRY.lock();
            registry.uses[self.index] -= 1;
            (registry.uses[self.index] == 0 && registry.freed[self.index]).then(|| registry.vacate(self.index))
        };
        if let Some(snapshot) = orphan {
            // SAFETY: the host freed the handle while it was in use and this was the last use: the slot is
            // vacated, so this is the one owner of the `Box<Inner>`.
            drop(unsafe { Box::from_raw(snapshot) });
        }
    }
}

/// Capture every tracked region owned by `agent` and every module-scope variable visible to it.
///
/// `SUCCESS`: `*snapshot_out` is a complete snapshot (it may hold no region), owned by the caller, to be freed
/// with `kreplay_snapshot_free`; `*reason_out` is `KREPLAY_DECLINE_NONE`. `DECLINED`: `*snapshot_out` is NULL,
/// `*reason_out` says why, nothing was left half-done and device memory is untouched: run the dispatch once,
/// unreplayed. `reason_out` may be NULL. Either way, once capture ends the agent's idle staging that this
/// snapshot did not take is unmapped. Thread-safe; snapshots of one agent should not overlap in time.
///
/// # Safety
/// `snapshot_out` must be NULL or valid for a write of a pointer; `reason_out` NULL or valid for a write of
/// `kreplay_decline_reason_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_snap(
    agent: kreplay_agent_t,
    snapshot_out: *mut *mut kreplay_snapshot_t,
    reason_out: *mut kreplay_decline_reason_t,
) -> kreplay_status_t {
    let declined = |reason: DeclineReason| {
        // SAFETY: both outputs are NULL or writable by the caller's contract.
        unsafe {
            write_out(snapshot_out, std::ptr::null_mut());
            write_out(reason_out, reason.into());
        }
        KREPLAY_STATUS_DECLINED
    };
    if snapshot_out.is_null() {
        kreplay_core::log!(Level::Warning, "kreplay_snap: snapshot_out is NULL");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    let snapshot = match engine().snap(agent.into()) {
        Ok(snapshot) => snapshot,
        Err(reason) => return declined(reason),
    };
    let raw = Box::into_raw(snapshot);
    // The registry's lock is released before the decline below logs (a logger may call kreplay).
    let inserted = REGISTRY.lock().insert(raw);
    let Some(handle) = inserted else {
        // SAFETY: `raw` came from `Box::into_raw` just above and was handed to no one.
        drop(unsafe { Box::from_raw(raw) });
        // Like every other decline, this one leaves nothing retained that it took: the capture's storage went
        // back to the pools with the snapshot, so give the agent's idle storage back.
        engine().staging_trim(agent.into());
        engine().device_trim(agent.into());
        kreplay_core::log!(
            Level::Warning,
            "agent {:#x}: {MAX_LIVE_SNAPSHOTS} snapshots are alive already; free some",
            agent.handle
        );
        return declined(DeclineReason::MetadataMemory);
    };
    // SAFETY: both outputs are writable by the caller's contract (`snapshot_out` was checked non-null).
    unsafe {
        snapshot_out.write(handle);
        write_out(reason_out, kreplay_decline_reason_t::KREPLAY_DECLINE_NONE);
    }
    KREPLAY_STATUS_SUCCESS
}

/// What a restore did. Module variables count like regions here.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_restore_report_t {
    /// Regions and module variables written back.
    pub restored: usize,
    /// Tracked regions freed, shrunk or reallocated since the snapshot: not written.
    pub skipped: usize,
    /// Copies that failed.
    pub failed: usize,
    /// Bytes written back.
    pub bytes: usize,
    /// Version 2: bytes verified unchanged by digest (dirty-only restore), so not written.
    pub clean_bytes: usize,
}

/// Writes every region of `snapshot` back. Each tracked region is re-validated and pinned while it is copied,
/// so a concurrent free of it waits for that copy (and frees of other regions wait for nothing); one freed,
/// shrunk or reallocated (another generation at the same address) is skipped. Module variables are always
/// written. Every region is attempted: `SUCCESS` when none failed, `PARTIAL_RESTORE` otherwise (run no further
/// pass). `report_out`, when non-NULL, is always written, even on `PARTIAL_RESTORE` (zeros when nothing was
/// attempted). A pointer that is not a live snapshot: `INVALID_ARGUMENT`. Thread-safe, also against
/// `kreplay_snapshot_info` and `kreplay_snapshot_free` of the same snapshot: a free during the restore takes
/// effect when the restore ends.
///
/// With the policy's `learn_write_set`, this restore (like every one that is not a full check) digests and
/// writes only the snapshot's learned write set and hints once a restore has learned it, and it updates that
/// set (state inside the snapshot, guarded; the `const` predates it). Mark the last restore of a window with
/// `kreplay_restore_ex` and `KREPLAY_RESTORE_FULL_CHECK`; `kreplay_restore_ex` also reports the bytes digested
/// and the write set's misses.
///
/// # Safety
/// `report_out` must be NULL or valid for a write of `kreplay_restore_report_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_restore(
    snapshot: *const kreplay_snapshot_t,
    report_out: *mut kreplay_restore_report_t,
) -> kreplay_status_t {
    // SAFETY: `report_out` is NULL or writable by the caller's contract.
    unsafe { write_out(report_out, kreplay_restore_report_t::default()) };
    let Some(inner) = Use::take(snapshot) else {
        kreplay_core::log!(Level::Warning, "kreplay_restore: {:#x} is not a live snapshot", snapshot.addr());
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    };
    let (report, result) = engine().restore(inner.get());
    drop(inner);
    let report = kreplay_restore_report_t {
        restored: report.restored,
        skipped: report.skipped,
        failed: report.failed,
        bytes: report.bytes,
        clean_bytes: report.clean_bytes,
    };
    // SAFETY: as above.
    unsafe { write_out(report_out, report) };
    to_status(result)
}

/// Frees a snapshot; its staging goes back to the agent's pool. NULL: nothing happens. A pointer that is not a
/// live snapshot (freed already, or never one) is logged and ignored. Thread-safe: the handle is dead once
/// this returns, but while a `kreplay_restore` or `kreplay_snapshot_info` of it is in progress on another
/// thread, the snapshot itself is freed when the last of them ends.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_snapshot_free(snapshot: *mut kreplay_snapshot_t) {
    if snapshot.is_null() {
        return;
    }
    let removed = REGISTRY.lock().remove(snapshot);
    let Some(inner) = removed else {
        kreplay_core::log!(
            Level::Error,
            "kreplay_snapshot_free: {:#x} is not a live snapshot (freed twice?); ignored",
            snapshot.addr()
        );
        return;
    };
    if let Some(inner) = inner {
        // SAFETY: the handle was live, unused, and is now unregistered, so this is the one owner of the
        // `Box<Inner>`.
        drop(unsafe { Box::from_raw(inner) });
    }
}

/// Sizes and phase timings of a capture.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_snapshot_info_t {
    /// The agent captured.
    pub agent: kreplay_agent_t,
    /// Tracked allocations and vmem ranges captured.
    pub regions: usize,
    /// Module-scope variables captured.
    pub module_variables: usize,
    /// Everything captured, both kinds.
    pub bytes: usize,
    /// Time to list the agent's tracked regions.
    pub inventory_ns: u64,
    /// Time of the module scan.
    pub module_scan_ns: u64,
    /// Time to take (and, the first time, map and page-lock) staging.
    pub staging_ns: u64,
    /// Time of the copies.
    pub copy_ns: u64,
    /// Version 2: of `bytes`, how many are held in device memory (the rest in host staging).
    pub device_bytes: usize,
    /// Version 2: bytes this capture moved; below `bytes` when unchanged blocks were reused (dirty-only).
    pub copied_bytes: usize,
    /// Version 2: time spent digesting during the capture.
    pub digest_ns: u64,
}

/// Sizes and phase timings of `snapshot`. `info_out` is written only on success. Thread-safe, also against a
/// `kreplay_snapshot_free` of the same snapshot (then either the info or `INVALID_ARGUMENT`).
///
/// # Safety
/// `info_out` must be NULL or valid for a write of `kreplay_snapshot_info_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_snapshot_info(
    snapshot: *const kreplay_snapshot_t,
    info_out: *mut kreplay_snapshot_info_t,
) -> kreplay_status_t {
    let inner = if info_out.is_null() { None } else { Use::take(snapshot) };
    let Some(inner) = inner else {
        kreplay_core::log!(Level::Warning, "kreplay_snapshot_info: NULL output or not a live snapshot");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    };
    let info = inner.get().info();
    drop(inner);
    let info = kreplay_snapshot_info_t {
        agent: info.agent.into(),
        regions: info.regions,
        module_variables: info.module_variables,
        bytes: info.bytes,
        inventory_ns: info.inventory_ns,
        module_scan_ns: info.module_scan_ns,
        staging_ns: info.staging_ns,
        copy_ns: info.copy_ns,
        device_bytes: info.device_bytes,
        copied_bytes: info.copied_bytes,
        digest_ns: info.digest_ns,
    };
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { info_out.write(info) };
    KREPLAY_STATUS_SUCCESS
}
