//! Status codes, decline reasons and their strings (the engine's: `kreplay_core::error`).

use std::ffi::c_char;

use kreplay_core::{DeclineReason, Error};

use crate::boundary::{OnPanic, ffi_guard};
use crate::enum_table::enum_table;

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

enum_table! {
    kreplay_status_t <=> Error;
    KREPLAY_STATUS_SUCCESS,
    KREPLAY_STATUS_INVALID_ARGUMENT = Error::InvalidArgument,
    KREPLAY_STATUS_NOT_CONFIGURED = Error::NotConfigured,
    KREPLAY_STATUS_FINALIZED = Error::Finalized,
    KREPLAY_STATUS_OUT_OF_HOST_MEMORY = Error::OutOfHostMemory,
    KREPLAY_STATUS_CAPACITY_EXCEEDED = Error::CapacityExceeded,
    KREPLAY_STATUS_DEVICE_ERROR = Error::DeviceError,
    KREPLAY_STATUS_DECLINED = Error::Declined,
    KREPLAY_STATUS_PARTIAL_RESTORE = Error::PartialRestore,
    KREPLAY_STATUS_NOT_FOUND = Error::NotFound,
    KREPLAY_STATUS_INTERNAL_ERROR = Error::Internal,
    KREPLAY_STATUS_IN_USE = Error::InUse,
}

impl OnPanic for kreplay_status_t {
    const ON_PANIC: Self = KREPLAY_STATUS_INTERNAL_ERROR;
}

impl From<kreplay_status_t> for RawStatus {
    fn from(status: kreplay_status_t) -> Self {
        RawStatus(status as u32)
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
    /// The snapshot would exceed the host budget: `max_snapshot_bytes`, or the live `host_budget_percent`.
    KREPLAY_DECLINE_HOST_BUDGET = 8,
    /// Version 3: async copies on the agent did not complete within the window's `copy_timeout_ms`.
    KREPLAY_DECLINE_COPIES_IN_FLIGHT = 9,
    /// Version 3: live untracked memory of a kind the policy's `untracked_decline_mask` declines on.
    KREPLAY_DECLINE_UNTRACKED_MEMORY = 10,
    /// Version 3: the window's projected cost is above the policy's `max_window_ns`.
    KREPLAY_DECLINE_OVER_COST = 11,
    /// Version 3: a window is already open on this agent.
    KREPLAY_DECLINE_WINDOW_NESTED = 12,
}

/// A `kreplay_decline_reason_t` as it arrives from C; the header spells it `kreplay_decline_reason_t`.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RawDeclineReason(pub u32);

enum_table! {
    kreplay_decline_reason_t <=> DeclineReason;
    KREPLAY_DECLINE_NONE = DeclineReason::None,
    KREPLAY_DECLINE_NOT_CONFIGURED = DeclineReason::NotConfigured,
    KREPLAY_DECLINE_FINALIZED = DeclineReason::Finalized,
    KREPLAY_DECLINE_METADATA_MEMORY = DeclineReason::MetadataMemory,
    KREPLAY_DECLINE_STAGING_MEMORY = DeclineReason::StagingMemory,
    KREPLAY_DECLINE_COPY_FAILED = DeclineReason::CopyFailed,
    KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE = DeclineReason::ModuleScanIncomplete,
    KREPLAY_DECLINE_INVENTORY_OVERFLOW = DeclineReason::InventoryOverflow,
    KREPLAY_DECLINE_HOST_BUDGET = DeclineReason::HostBudget,
    KREPLAY_DECLINE_COPIES_IN_FLIGHT = DeclineReason::CopiesInFlight,
    KREPLAY_DECLINE_UNTRACKED_MEMORY = DeclineReason::UntrackedMemory,
    KREPLAY_DECLINE_OVER_COST = DeclineReason::OverCost,
    KREPLAY_DECLINE_WINDOW_NESTED = DeclineReason::WindowNested,
}

/// A static, NUL-terminated description of `status`; never NULL, also for values this library does not know.
/// Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_status_string(status: RawStatus) -> *const c_char {
    kreplay_core::error::status_text(status.0).as_ptr()
}

/// A static, NUL-terminated description of a decline reason; never NULL, also for unknown values.
/// Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_decline_reason_string(reason: RawDeclineReason) -> *const c_char {
    DeclineReason::raw_text(reason.0).as_ptr()
}

/// The library's version, `MAJOR.MINOR.PATCH`, as a static NUL-terminated string. Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_version() -> *const c_char {
    const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    #[test]
    fn every_status_and_reason_maps_onto_the_engines_value_of_the_same_number() {
        for &status in kreplay_status_t::ALL {
            match status.engine() {
                Some(error) => assert_eq!(kreplay_status_t::from(error), status),
                None => assert_eq!(status, KREPLAY_STATUS_SUCCESS),
            }
        }
        assert_eq!(kreplay_status_t::ALL.len(), Error::ALL.len() + 1);
        for &reason in kreplay_decline_reason_t::ALL {
            assert_eq!(kreplay_decline_reason_t::from(reason.engine().unwrap()), reason);
        }
        assert_eq!(kreplay_decline_reason_t::ALL.len(), DeclineReason::ALL.len());
    }

    #[test]
    fn the_strings_are_the_engines_texts_and_unknown_values_have_one_too() {
        let text = |pointer: *const c_char| {
            // SAFETY: the string exports return static NUL-terminated strings.
            unsafe { CStr::from_ptr(pointer) }
        };
        assert_eq!(text(kreplay_status_string(RawStatus(0))), c"success");
        assert_eq!(text(kreplay_status_string(RawStatus(10))), Error::Internal.text());
        assert_eq!(text(kreplay_status_string(RawStatus(999))), c"unknown status");
        assert_eq!(text(kreplay_decline_reason_string(RawDeclineReason(8))), DeclineReason::HostBudget.text());
        assert_eq!(text(kreplay_decline_reason_string(RawDeclineReason(99))), c"unknown decline reason");
    }
}
