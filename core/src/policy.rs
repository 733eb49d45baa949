//! Policy: how snapshots use host and device memory.

use crate::lock::RwLock;

/// Smallest digest block.
pub const MIN_DIGEST_BLOCK: usize = 4096;
/// Largest digest block.
pub const MAX_DIGEST_BLOCK: usize = 16 << 20;
/// Digest block when the host leaves it at 0.
pub const DEFAULT_DIGEST_BLOCK: usize = 64 << 10;
/// Largest `device_budget_percent`.
pub const MAX_DEVICE_BUDGET_PERCENT: u32 = 100;
/// Largest `host_budget_percent`.
pub const MAX_HOST_BUDGET_PERCENT: u32 = 100;

/// The host's choices for snapshots.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Page-lock retained staging through the device ops, once, and keep it locked while retained.
    pub pin_staging: bool,
    /// Decline snapshots that would capture more than this many bytes; 0 means no limit.
    pub max_snapshot_bytes: usize,
    /// Device memory per agent that snapshots may hold (with `device_alloc`); 0 keeps everything on the host.
    pub device_budget_bytes: usize,
    /// With the digest op: restore, and re-capture across dispatches, only the blocks whose digest changed.
    pub dirty_only: bool,
    /// Digest block size: a power of two in [`MIN_DIGEST_BLOCK`, `MAX_DIGEST_BLOCK`].
    pub digest_block_bytes: usize,
    /// Reuse an agent's last complete module scan until [`crate::Engine::modules_changed`].
    pub cache_module_scan: bool,
    /// Bit k: decline a window while untracked memory of kind k is live.
    pub untracked_decline_mask: u32,
    /// A window projected above this many nanoseconds logs one warning; 0 means 10 s.
    pub warn_window_ns: u64,
    /// A window projected above this many nanoseconds is declined; 0 means no limit.
    pub max_window_ns: u64,
    /// With [`crate::DeviceOps::device_free_bytes`]: each capture's device budget is this percent (1 to 100)
    /// of the agent's free device memory at that moment, and the smaller of that and `device_budget_bytes`
    /// when both are set; 0 leaves `device_budget_bytes` alone in charge.
    pub device_budget_percent: u32,
    /// Each capture may bring the host staging kreplay holds up to this percent (1 to 100) of the host memory
    /// available at that moment, kreplay's own staging counted as available (see `storage::host_budget`); above
    /// it the capture declines with `HostBudget`. 0 turns it off. `max_snapshot_bytes` applies as well.
    pub host_budget_percent: u32,
    /// With `dirty_only` and the digest op: the first restore of a snapshot digests the whole footprint and
    /// learns the blocks that changed (its write set); later restores digest and write only that set and the
    /// host's hints, except a restore marked as a full check (or the last of a window by its pass count), which
    /// checks the whole footprint again and adds what it finds outside the set (see
    /// [`crate::snapshot::write_set`]).
    pub learn_write_set: bool,
}

/// Bits of [`Policy::untracked_decline_mask`] that name a kind.
pub const UNTRACKED_DECLINE_BITS: u32 = (1 << crate::window::untracked::UNTRACKED_KINDS) - 1;

impl Default for Policy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Policy {
    /// Pageable staging, no budgets, full copies, 64 KiB digest blocks, no module cache.
    pub const DEFAULT: Policy = Policy {
        pin_staging: false,
        max_snapshot_bytes: 0,
        device_budget_bytes: 0,
        dirty_only: false,
        digest_block_bytes: DEFAULT_DIGEST_BLOCK,
        cache_module_scan: false,
        untracked_decline_mask: 0,
        warn_window_ns: 0,
        max_window_ns: 0,
        device_budget_percent: 0,
        host_budget_percent: 0,
        learn_write_set: false,
    };

    /// Whether every field is within its range.
    pub fn is_valid(&self) -> bool {
        self.digest_block_bytes.is_power_of_two()
            && (MIN_DIGEST_BLOCK..=MAX_DIGEST_BLOCK).contains(&self.digest_block_bytes)
            && self.window_fields_valid()
            && self.host_budget_percent <= MAX_HOST_BUDGET_PERCENT
    }

    /// Whether the replay-window fields are within range: known untracked kinds, a percentage.
    pub fn window_fields_valid(&self) -> bool {
        self.untracked_decline_mask & !UNTRACKED_DECLINE_BITS == 0
            && self.device_budget_percent <= MAX_DEVICE_BUDGET_PERCENT
    }
}

/// A [`Policy`] that can be read and replaced from any thread; a reader sees one whole policy.
pub struct AtomicPolicy(RwLock<Policy>);

impl Default for AtomicPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl AtomicPolicy {
    /// The default policy: pageable staging, host only, no budget, full copies, no module cache.
    pub const fn new() -> Self {
        // All zero (a digest block of 0 stands for the default), so that an engine in a `static` is `.bss`.
        AtomicPolicy(RwLock::new(Policy { digest_block_bytes: 0, ..Policy::DEFAULT }))
    }

    /// The current policy.
    pub fn get(&self) -> Policy {
        let policy = *self.0.read();
        if policy.digest_block_bytes == 0 {
            Policy { digest_block_bytes: DEFAULT_DIGEST_BLOCK, ..policy }
        } else {
            policy
        }
    }

    /// Replaces the policy; snapshots already under way keep the one they started with.
    pub fn set(&self, policy: Policy) {
        *self.0.write() = policy;
    }
}
