//! Errors and decline reasons, and the one table per enum that gives each its C value and its text. Their
//! numeric values are the C API's and are never reused; the C side (`kreplay-capi`) only maps its enums onto
//! these, checked at compile time.

use core::ffi::CStr;

/// One table per enum whose values cross the C boundary: each row is a variant, its C value and (for the
/// enums that have texts) its description, written nowhere else. The enum gets `ALL` and `from_raw`; with
/// texts also `describe` (for log lines), `text` and `raw_text` (NUL-terminated, for the C API's strings).
/// Appending a value is one row; a value is never renumbered or reused.
///
/// ```ignore
/// c_enum! {
///     /// What a light shows.
///     pub enum Light, unknown "unknown light" {
///         /// Stop.
///         Red = 0 => "red: stop",
///         /// Go.
///         Green = 1 => "green: go",
///     }
/// }
/// ```
macro_rules! c_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $value:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        #[repr(u32)]
        pub enum $name {
            $( $(#[$variant_meta])* $variant = $value ),+
        }

        impl $name {
            /// Every value, in table order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value with this number, if there is one.
            pub const fn from_raw(raw: u32) -> Option<Self> {
                $(if raw == $value {
                    return Some($name::$variant);
                })+
                None
            }
        }
    };
    (
        $(#[$meta:meta])*
        pub enum $name:ident, unknown $unknown:literal {
            $( $(#[$variant_meta:meta])* $variant:ident = $value:literal => $text:literal ),+ $(,)?
        }
    ) => {
        $crate::error::c_enum! {
            $(#[$meta])*
            pub enum $name {
                $( $(#[$variant_meta])* $variant = $value ),+
            }
        }

        impl $name {
            /// A short lower-case description, for log lines.
            pub const fn describe(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            /// The description, NUL-terminated (the C API's string for this value).
            pub const fn text(self) -> &'static ::core::ffi::CStr {
                match self {
                    $($name::$variant => {
                        const TEXT: &::core::ffi::CStr = $crate::error::nul_terminated(concat!($text, "\0"));
                        TEXT
                    }),+
                }
            }

            /// The description of a raw value, which may be one this library does not know.
            pub const fn raw_text(raw: u32) -> &'static ::core::ffi::CStr {
                const UNKNOWN: &::core::ffi::CStr = $crate::error::nul_terminated(concat!($unknown, "\0"));
                match Self::from_raw(raw) {
                    Some(value) => value.text(),
                    None => UNKNOWN,
                }
            }
        }
    };
}
pub(crate) use c_enum;

/// `text` as a C string. Only ever evaluated in constants: a text with a NUL inside does not compile.
pub(crate) const fn nul_terminated(text: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(text.as_bytes()) {
        Ok(text) => text,
        Err(_) => panic!("a table text must hold no NUL"),
    }
}

c_enum! {
    /// Why an operation did not succeed. The discriminants are the C API's `kreplay_status_t` values (0 is
    /// success, see [`status_text`]).
    pub enum Error, unknown "unknown status" {
        /// NULL, zero or overflowing size, short `struct_size`, unknown flag bits.
        InvalidArgument = 1 => "invalid argument",
        /// No device operations have been installed.
        NotConfigured = 2 => "not configured: no device ops installed",
        /// `finalize` has run; the call did nothing.
        Finalized = 3 => "finalized: the call did nothing",
        /// Host memory could not be mapped or allocated.
        OutOfHostMemory = 4 => "out of host memory",
        /// A fixed-capacity table is full.
        CapacityExceeded = 5 => "capacity exceeded: a fixed-capacity table is full",
        /// A device operation reported failure.
        DeviceError = 6 => "device error: a device op reported failure",
        /// No usable snapshot: the dispatch must run once, unreplayed.
        Declined = 7 => "declined: run the dispatch once, unreplayed",
        /// At least one region could not be written back: no further pass may run.
        PartialRestore = 8 => "partial restore: do not run another pass",
        /// The pointer or object is not known to the library.
        NotFound = 9 => "not found",
        /// A bug in the library, caught at the boundary.
        Internal = 10 => "internal error",
        /// Refused because waiting would deadlock: called from inside a kreplay call on the same thread (a device
        /// op or a logger) for a region that call is copying. Nothing changed.
        InUse = 11 => "in use: called from inside a kreplay call that is copying this region",
    }
}

/// The description of a C status value: 0 is success, the others are [`Error`]s (or unknown).
pub const fn status_text(status: u32) -> &'static CStr {
    if status == 0 { c"success" } else { Error::raw_text(status) }
}

/// Result type of the engine.
pub type Result<T> = core::result::Result<T, Error>;

c_enum! {
    /// Why a snapshot was declined. The discriminants are the C API's `kreplay_decline_reason_t` values.
    #[derive(Default)]
    pub enum DeclineReason, unknown "unknown decline reason" {
        /// Not declined.
        #[default]
        None = 0 => "not declined",
        /// No device operations have been installed, or tracking is off.
        NotConfigured = 1 => "no device ops are configured, or tracking is off",
        /// `finalize` has run.
        Finalized = 2 => "the library is finalized",
        /// Host memory for the snapshot's own bookkeeping could not be allocated.
        MetadataMemory = 3 => "host memory for the snapshot's bookkeeping ran out",
        /// Host memory for the captured contents could not be mapped.
        StagingMemory = 4 => "host memory for the captured contents could not be mapped",
        /// A device-to-host copy failed.
        CopyFailed = 5 => "a device-to-host copy failed",
        /// The module-scope variables could not all be enumerated.
        ModuleScanIncomplete = 6 => "the module-scope variables could not all be enumerated",
        /// An allocation of this agent could not be recorded and may still be live.
        InventoryOverflow = 7 => "an allocation of this agent could not be recorded",
        /// The snapshot would exceed the configured host budget.
        HostBudget = 8 => "the snapshot would exceed the host budget (max_snapshot_bytes or host_budget_percent)",
        /// Async copies on the agent did not complete within the window's copy timeout.
        CopiesInFlight = 9 => "async copies on the agent did not complete in time",
        /// Untracked memory of a kind the policy declines on is live.
        UntrackedMemory = 10 => "untracked memory of a declined kind is live",
        /// The window's projected cost is above the policy's limit.
        OverCost = 11 => "the window's projected cost is above max_window_ns",
        /// A window is already open on this agent.
        WindowNested = 12 => "a window is already open on this agent",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_and_reason_has_its_own_text_and_its_own_number() {
        let mut texts = std::collections::HashSet::new();
        assert!(texts.insert(status_text(0)));
        for &error in Error::ALL {
            assert_eq!(Error::from_raw(error as u32), Some(error));
            assert_eq!(status_text(error as u32), error.text());
            assert_eq!(error.text().to_str(), Ok(error.describe()));
            assert!(texts.insert(error.text()), "{error:?} shares its text");
        }
        for &reason in DeclineReason::ALL {
            assert_eq!(DeclineReason::from_raw(reason as u32), Some(reason));
            assert_eq!(DeclineReason::raw_text(reason as u32), reason.text());
            assert!(texts.insert(reason.text()), "{reason:?} shares its text");
        }
    }

    #[test]
    fn a_value_no_table_holds_reads_as_unknown() {
        assert_eq!(Error::from_raw(0), None);
        assert_eq!(status_text(12), c"unknown status");
        assert_eq!(status_text(u32::MAX), c"unknown status");
        assert_eq!(DeclineReason::raw_text(13), c"unknown decline reason");
        assert_eq!(DeclineReason::from_raw(u32::MAX), None);
    }
}
