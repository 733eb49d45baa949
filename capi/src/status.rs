//! Status codes, decline reasons and their strings.

use std::ffi::c_char;

use kreplay_core::{DeclineReason, Error};

/// The outcome of a fallible call. Values are explicit and never reused.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum kreplay_status_t {
    /// The call did what it says.
    KREPLAY_STATUS_SUCCESS = 0,
    /// NULL, zero or overflowing size, short `struct_size`, unknown flag bits, unknown handle.
    KREPLAY_STATUS_INVALID_ARGUMENT = 1,
    /// No device ops installed yet.
    KREPLAY_STATUS_NOT_CONFIGURED = 2,
    /// `kreplay_finalize()` has run; the call did nothing.
    KREPLAY_STATUS_FINALIZED = 3,
    /// Host memory could not be mapped or allocated.
    KREPLAY_STATUS_OUT_OF_HOST_MEMORY = 4,
    /// A fixed-capacity table is full.
    KREPLAY_STATUS_CAPACITY_EXCEEDED = 5,
    /// A device op reported failure.
    KREPLAY_STATUS_DEVICE_ERROR = 6,
    /// No usable snapshot: run the dispatch once, unreplayed.
    KREPLAY_STATUS_DECLINED = 7,
    /// Restore failed for at least one region: do not run another pass.
    KREPLAY_STATUS_PARTIAL_RESTORE = 8,
    /// The pointer or object is not tracked (e.g. `kreplay_record_free` of an untracked pointer).
    KREPLAY_STATUS_NOT_FOUND = 9,
    /// A bug in the library, caught at the boundary.
    KREPLAY_STATUS_INTERNAL_ERROR = 10,
    /// Refused because waiting would deadlock: called from inside a kreplay call on the same thread (a device op
    /// or a logger) for a region that call is copying right now. Nothing changed; log line says which.
    KREPLAY_STATUS_IN_USE = 11,
}

pub(crate) use kreplay_status_t::*;

/// A `kreplay_status_t` as it arrives from C: any 32-bit value, checked before use.
/// The header spells it `kreplay_status_t` (cbindgen renames it).
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RawStatus(pub u32);

impl RawStatus {
    pub(crate) fn is_success(self) -> bool {
        self.0 == kreplay_status_t::KREPLAY_STATUS_SUCCESS as u32
    }
}

impl From<Error> for kreplay_status_t {
    fn from(error: Error) -> Self {
        match error {
            Error::InvalidArgument => KREPLAY_STATUS_INVALID_ARGUMENT,
            Error::NotConfigured => KREPLAY_STATUS_NOT_CONFIGURED,
            Error::Finalized => KREPLAY_STATUS_FINALIZED,
            Error::OutOfHostMemory => KREPLAY_STATUS_OUT_OF_HOST_MEMORY,
            Error::CapacityExceeded => KREPLAY_STATUS_CAPACITY_EXCEEDED,
            Error::DeviceError => KREPLAY_STATUS_DEVICE_ERROR,
            Error::Declined => KREPLAY_STATUS_DECLINED,
            Error::PartialRestore => KREPLAY_STATUS_PARTIAL_RESTORE,
            Error::NotFound => KREPLAY_STATUS_NOT_FOUND,
            Error::Internal => KREPLAY_STATUS_INTERNAL_ERROR,
            Error::InUse => KREPLAY_STATUS_IN_USE,
        }
    }
}

pub(crate) fn to_status(result: kreplay_core::Result<()>) -> kreplay_status_t {
    match result {
        Ok(()) => KREPLAY_STATUS_SUCCESS,
        Err(error) => error.into(),
    }
}

/// Why `kreplay_snap` declined. Values are explicit and never reused.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum kreplay_decline_reason_t {
    /// Not declined.
    KREPLAY_DECLINE_NONE = 0,
    /// No device ops are installed, or tracking is off.
    KREPLAY_DECLINE_NOT_CONFIGURED = 1,
    /// `kreplay_finalize()` has run.
    KREPLAY_DECLINE_FINALIZED = 2,
    /// Host memory for the snapshot's own bookkeeping.
    KREPLAY_DECLINE_METADATA_MEMORY = 3,
    /// Host memory for a region's contents.
    KREPLAY_DECLINE_STAGING_MEMORY = 4,
    /// A device-to-host copy failed.
    KREPLAY_DECLINE_COPY_FAILED = 5,
    /// Module-scope variables could not all be enumerated.
    KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE = 6,
    /// An allocation of the agent could not be recorded and may be live.
    KREPLAY_DECLINE_INVENTORY_OVERFLOW = 7,
    /// The snapshot would exceed `max_snapshot_bytes`.
    KREPLAY_DECLINE_HOST_BUDGET = 8,
}

/// A `kreplay_decline_reason_t` as it arrives from C; the header spells it `kreplay_decline_reason_t`.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RawDeclineReason(pub u32);

impl From<DeclineReason> for kreplay_decline_reason_t {
    fn from(reason: DeclineReason) -> Self {
        use kreplay_decline_reason_t::*;
        match reason {
            DeclineReason::None => KREPLAY_DECLINE_NONE,
            DeclineReason::NotConfigured => KREPLAY_DECLINE_NOT_CONFIGURED,
            DeclineReason::Finalized => KREPLAY_DECLINE_FINALIZED,
            DeclineReason::MetadataMemory => KREPLAY_DECLINE_METADATA_MEMORY,
            DeclineReason::StagingMemory => KREPLAY_DECLINE_STAGING_MEMORY,
            DeclineReason::CopyFailed => KREPLAY_DECLINE_COPY_FAILED,
            DeclineReason::ModuleScanIncomplete => KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE,
            DeclineReason::InventoryOverflow => KREPLAY_DECLINE_INVENTORY_OVERFLOW,
            DeclineReason::HostBudget => KREPLAY_DECLINE_HOST_BUDGET,
        }
    }
}

/// A static, NUL-terminated description of `status`; never NULL, also for values this library does not know.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_status_string(status: RawStatus) -> *const c_char {
    let text: &'static std::ffi::CStr = match status.0 {
        0 => c"success",
        1 => c"invalid argument",
        2 => c"not configured: no device ops installed",
        3 => c"finalized: the call did nothing",
        4 => c"out of host memory",
        5 => c"capacity exceeded: a fixed-capacity table is full",
        6 => c"device error: a device op reported failure",
        7 => c"declined: run the dispatch once, unreplayed",
        8 => c"partial restore: do not run another pass",
        9 => c"not found",
        10 => c"internal error",
        11 => c"in use: called from inside a kreplay call that is copying this region",
        _ => c"unknown status",
    };
    text.as_ptr()
}

/// A static, NUL-terminated description of a decline reason; never NULL, also for unknown values.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_decline_reason_string(reason: RawDeclineReason) -> *const c_char {
    let text: &'static std::ffi::CStr = match reason.0 {
        0 => c"not declined",
        1 => c"no device ops are configured, or tracking is off",
        2 => c"the library is finalized",
        3 => c"host memory for the snapshot's bookkeeping ran out",
        4 => c"host memory for the captured contents could not be mapped",
        5 => c"a device-to-host copy failed",
        6 => c"the module-scope variables could not all be enumerated",
        7 => c"an allocation of this agent could not be recorded",
        8 => c"the snapshot would exceed max_snapshot_bytes",
        _ => c"unknown decline reason",
    };
    text.as_ptr()
}

/// The library's version, `MAJOR.MINOR.PATCH`, as a static NUL-terminated string. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_version() -> *const c_char {
    const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}
