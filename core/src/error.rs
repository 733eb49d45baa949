//! Errors and decline reasons. Their numeric values are the C API's and are never reused.

/// Why an operation did not succeed. The discriminants are the C API's `kreplay_status_t` values.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Error {
    /// NULL, zero or overflowing size, short `struct_size`, unknown flag bits.
    InvalidArgument = 1,
    /// No device operations have been installed.
    NotConfigured = 2,
    /// `finalize` has run; the call did nothing.
    Finalized = 3,
    /// Host memory could not be mapped or allocated.
    OutOfHostMemory = 4,
    /// A fixed-capacity table is full.
    CapacityExceeded = 5,
    /// A device operation reported failure.
    DeviceError = 6,
    /// No usable snapshot: the dispatch must run once, unreplayed.
    Declined = 7,
    /// At least one region could not be written back: no further pass may run.
    PartialRestore = 8,
    /// The pointer or object is not known to the library.
    NotFound = 9,
    /// A bug in the library, caught at the boundary.
    Internal = 10,
    /// Refused because waiting would deadlock: called from inside a kreplay call on the same thread (a device
    /// op or a logger) for a region that call is copying. Nothing changed.
    InUse = 11,
}

/// Result type of the engine.
pub type Result<T> = core::result::Result<T, Error>;

/// Why a snapshot was declined. The discriminants are the C API's `kreplay_decline_reason_t` values.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[repr(u32)]
pub enum DeclineReason {
    /// Not declined.
    #[default]
    None = 0,
    /// No device operations have been installed.
    NotConfigured = 1,
    /// `finalize` has run.
    Finalized = 2,
    /// Host memory for the snapshot's own bookkeeping could not be allocated.
    MetadataMemory = 3,
    /// Host memory for the captured contents could not be mapped.
    StagingMemory = 4,
    /// A device-to-host copy failed.
    CopyFailed = 5,
    /// The module-scope variables could not all be enumerated.
    ModuleScanIncomplete = 6,
    /// An allocation of this agent could not be recorded and may still be live.
    InventoryOverflow = 7,
    /// The snapshot would exceed the configured host budget.
    HostBudget = 8,
    /// Async copies on the agent did not complete within the window's copy timeout.
    CopiesInFlight = 9,
    /// Untracked memory of a kind the policy declines on is live.
    UntrackedMemory = 10,
    /// The window's projected cost is above the policy's limit.
    OverCost = 11,
    /// A window is already open on this agent.
    WindowNested = 12,
}

impl DeclineReason {
    /// A short lower-case description for log lines.
    pub const fn describe(self) -> &'static str {
        match self {
            DeclineReason::None => "not declined",
            DeclineReason::NotConfigured => "no device operations are configured",
            DeclineReason::Finalized => "the library is finalized",
            DeclineReason::MetadataMemory => "host memory for the snapshot's bookkeeping ran out",
            DeclineReason::StagingMemory => "host memory for the captured contents could not be mapped",
            DeclineReason::CopyFailed => "a device-to-host copy failed",
            DeclineReason::ModuleScanIncomplete => "the module-scope variables could not all be enumerated",
            DeclineReason::InventoryOverflow => "an allocation of this agent could not be recorded",
            DeclineReason::HostBudget => "the snapshot would exceed max_snapshot_bytes",
            DeclineReason::CopiesInFlight => "async copies on the agent did not complete in time",
            DeclineReason::UntrackedMemory => "untracked memory of a declined kind is live",
            DeclineReason::OverCost => "the window's projected cost is above max_window_ns",
            DeclineReason::WindowNested => "a window is already open on this agent",
        }
    }
}
