//! Policy: how snapshots use host memory.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The host's choices for snapshots.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Page-lock retained staging through the device ops, once, and keep it locked while retained.
    pub pin_staging: bool,
    /// Decline snapshots that would capture more than this many bytes; 0 means no limit.
    pub max_snapshot_bytes: usize,
}

/// A [`Policy`] that can be read and replaced from any thread.
#[derive(Default)]
pub struct AtomicPolicy {
    pin_staging: AtomicBool,
    max_snapshot_bytes: AtomicUsize,
}

impl AtomicPolicy {
    /// The default policy: pageable staging, no budget.
    pub const fn new() -> Self {
        AtomicPolicy { pin_staging: AtomicBool::new(false), max_snapshot_bytes: AtomicUsize::new(0) }
    }

    /// The current policy.
    pub fn get(&self) -> Policy {
        Policy {
            pin_staging: self.pin_staging.load(Ordering::Relaxed),
            max_snapshot_bytes: self.max_snapshot_bytes.load(Ordering::Relaxed),
        }
    }

    /// Replaces the policy; snapshots already under way keep the one they started with.
    pub fn set(&self, policy: Policy) {
        self.pin_staging.store(policy.pin_staging, Ordering::Relaxed);
        self.max_snapshot_bytes.store(policy.max_snapshot_bytes, Ordering::Relaxed);
    }
}
