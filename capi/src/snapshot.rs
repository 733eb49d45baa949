//! Snapshot and restore through opaque handles.

use kreplay_core::DeclineReason;
use kreplay_core::log::Level;
use kreplay_core::snapshot::Snapshot;
use spin::Mutex;

use crate::ENGINE;
use crate::boundary::guard;
use crate::ops::CDeviceOps;
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
struct Registry {
    snapshots: [usize; MAX_LIVE_SNAPSHOTS],
    serials: [u64; MAX_LIVE_SNAPSHOTS],
    next_serial: u64,
}

static REGISTRY: Mutex<Registry> =
    Mutex::new(Registry { snapshots: [0; MAX_LIVE_SNAPSHOTS], serials: [0; MAX_LIVE_SNAPSHOTS], next_serial: 1 });

impl Registry {
    fn slot(handle: *const kreplay_snapshot_t) -> Option<(usize, u64)> {
        let value = handle.addr();
        let index = (value & ((1 << INDEX_BITS) - 1)).checked_sub(1)?;
        (index < MAX_LIVE_SNAPSHOTS).then_some((index, (value >> INDEX_BITS) as u64))
    }

    /// The snapshot behind a live handle.
    fn get(&self, handle: *const kreplay_snapshot_t) -> Option<*mut Inner> {
        let (index, serial) = Self::slot(handle)?;
        (self.snapshots[index] != 0 && self.serials[index] == serial).then(|| self.snapshots[index] as *mut Inner)
    }

    /// Registers a snapshot and returns its handle; `None` when every slot is taken.
    fn insert(&mut self, snapshot: *mut Inner) -> Option<*mut kreplay_snapshot_t> {
        let index = self.snapshots.iter().position(|&p| p == 0)?;
        let serial = self.next_serial;
        self.next_serial += 1;
        self.snapshots[index] = snapshot as usize;
        self.serials[index] = serial;
        let value = ((serial as usize) << INDEX_BITS) | (index + 1);
        Some(std::ptr::without_provenance_mut(value))
    }

    /// Unregisters a live handle and returns its snapshot.
    fn remove(&mut self, handle: *const kreplay_snapshot_t) -> Option<*mut Inner> {
        let snapshot = self.get(handle)?;
        let (index, _) = Self::slot(handle)?;
        self.snapshots[index] = 0;
        Some(snapshot)
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
    guard("kreplay_snap", KREPLAY_STATUS_INTERNAL_ERROR, || {
        if snapshot_out.is_null() {
            kreplay_core::log!(Level::Warning, "kreplay_snap: snapshot_out is NULL");
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        let snapshot = match ENGINE.snap(agent.into()) {
            Ok(snapshot) => snapshot,
            Err(reason) => return declined(reason),
        };
        let raw = Box::into_raw(snapshot);
        let Some(handle) = REGISTRY.lock().insert(raw) else {
            // SAFETY: `raw` came from `Box::into_raw` just above and was handed to no one.
            drop(unsafe { Box::from_raw(raw) });
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
    })
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

/// Writes every region of `snapshot` back. Each tracked region is re-validated and copied under the
/// inventory's read lock, so a concurrent free cannot race between check and write; one freed, shrunk or
/// reallocated (another generation at the same address) is skipped. Module variables are always written.
/// Every region is attempted: `SUCCESS` when none failed, `PARTIAL_RESTORE` otherwise (run no further pass).
/// `report_out`, when non-NULL, is always written, even on `PARTIAL_RESTORE` (zeros when nothing was
/// attempted). A pointer that is not a live snapshot: `INVALID_ARGUMENT`. Thread-safe, but the snapshot must
/// not be freed meanwhile.
///
/// # Safety
/// `report_out` must be NULL or valid for a write of `kreplay_restore_report_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_restore(
    snapshot: *const kreplay_snapshot_t,
    report_out: *mut kreplay_restore_report_t,
) -> kreplay_status_t {
    // SAFETY: `report_out` is NULL or writable by the caller's contract.
    unsafe { write_out(report_out, kreplay_restore_report_t::default()) };
    guard("kreplay_restore", KREPLAY_STATUS_INTERNAL_ERROR, || {
        let Some(inner) = REGISTRY.lock().get(snapshot) else {
            kreplay_core::log!(Level::Warning, "kreplay_restore: {:#x} is not a live snapshot", snapshot.addr());
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        };
        // SAFETY: the handle is registered as live, so this is a `Box<Inner>` from `kreplay_snap` not yet freed
        // (freeing it while it is being restored is the caller's bug, as documented).
        let inner = unsafe { &*inner };
        let (report, result) = ENGINE.restore(inner);
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
    })
}

/// Frees a snapshot; its staging goes back to the agent's pool. NULL: nothing happens. A pointer that is not a
/// live snapshot (freed already, or never one) is logged and ignored. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_snapshot_free(snapshot: *mut kreplay_snapshot_t) {
    guard("kreplay_snapshot_free", (), || {
        if snapshot.is_null() {
            return;
        }
        let Some(inner) = REGISTRY.lock().remove(snapshot) else {
            kreplay_core::log!(
                Level::Error,
                "kreplay_snapshot_free: {:#x} is not a live snapshot (freed twice?); ignored",
                snapshot.addr()
            );
            return;
        };
        // SAFETY: the handle was live and is now unregistered, so this is the one owner of the `Box<Inner>`.
        drop(unsafe { Box::from_raw(inner) });
    })
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

/// Sizes and phase timings of `snapshot`. `info_out` is written only on success. Thread-safe.
///
/// # Safety
/// `info_out` must be NULL or valid for a write of `kreplay_snapshot_info_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_snapshot_info(
    snapshot: *const kreplay_snapshot_t,
    info_out: *mut kreplay_snapshot_info_t,
) -> kreplay_status_t {
    guard("kreplay_snapshot_info", KREPLAY_STATUS_INTERNAL_ERROR, || {
        let inner = REGISTRY.lock().get(snapshot);
        let (Some(inner), false) = (inner, info_out.is_null()) else {
            kreplay_core::log!(Level::Warning, "kreplay_snapshot_info: NULL output or not a live snapshot");
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        };
        // SAFETY: the handle is registered as live (see `kreplay_restore`).
        let info = unsafe { &*inner }.info();
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
    })
}
