//! The policy: how snapshots use host and device memory.

use std::mem::{offset_of, size_of};

use kreplay_core::policy::Policy;

use crate::boundary::ffi_guard;
use crate::engine::engine;
use crate::status::*;
use crate::versioned::{self, Versioned};

/// How snapshots use host memory.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_policy_t {
    /// `sizeof(kreplay_policy_t)` as the caller compiled it.
    pub struct_size: usize,
    /// Page-lock retained staging with `ops.host_lock`, once; it stays locked while retained and is unlocked
    /// before it is unmapped.
    pub pin_staging: bool,
    /// 0: unlimited; a snapshot above it is declined with `KREPLAY_DECLINE_HOST_BUDGET`.
    pub max_snapshot_bytes: usize,
    /// Version 2 [0]: device memory per agent that snapshots may hold (with `device_alloc`/`device_free`);
    /// ranges beyond it spill to host staging. 0: host only.
    pub device_budget_bytes: usize,
    /// Version 2 [false]: with `ops.digest`, restore, and re-capture across dispatches, only the blocks whose
    /// digest changed.
    pub dirty_only: bool,
    /// Version 2 [0 = 65536]: digest block size, a power of two from 4096 to 16 MiB.
    pub digest_block_bytes: usize,
    /// Version 2 [false]: reuse an agent's last complete module scan until `kreplay_modules_changed()` is
    /// called. Only for hosts that call it whenever a code object is loaded or unloaded.
    pub cache_module_scan: bool,
    /// Version 3 [0]: bit `k` declines a window (`KREPLAY_DECLINE_UNTRACKED_MEMORY`) while untracked memory of
    /// kind `k` (`kreplay_untracked_kind_t`) is live; bits from `KREPLAY_UNTRACKED_KIND_COUNT` up are invalid.
    pub untracked_decline_mask: u32,
    /// Version 3 [0 = 10 s]: a window projected above it logs one warning.
    pub warn_window_ns: u64,
    /// Version 3 [0 = none]: a window projected above it is declined (`KREPLAY_DECLINE_OVER_COST`).
    pub max_window_ns: u64,
    /// Version 3 [0 = off], at most 100: with `ops.device_free_bytes`, the device budget of each capture is
    /// this percent of the agent's free device memory at that moment (kreplay's own idle device storage
    /// counted as free), and the smaller of that and `device_budget_bytes` when both are set. Without the op it
    /// has no effect.
    pub device_budget_percent: u32,
    /// Version 4 [0 = off], at most 100: the live host budget. At each capture, everything kreplay would hold
    /// in host staging once the capture has its storage (other agents' and live snapshots' staging, plus this
    /// snapshot's host part, device-tier spill included) may be at most this percent of the host memory
    /// available at that moment plus the staging kreplay holds (counted as available to it). Above it the
    /// snapshot declines with `KREPLAY_DECLINE_HOST_BUDGET` and a warning with the figures. The available memory
    /// comes from `ops.host_available_bytes`, else Linux's `MemAvailable` (`/proc/meminfo`); when it cannot be
    /// read, nothing is taken as available. Page-locked staging (`pin_staging`) is staging within this budget.
    /// `max_snapshot_bytes` applies as well. The adapters' `recommended_policy()` set 50.
    pub host_budget_percent: u32,
    /// Version 4 [false]: with `dirty_only` and `ops.digest`, learn each snapshot's write set: its first restore
    /// digests the whole footprint and remembers the blocks that changed; later restores digest and write only
    /// those and the host's hints (`kreplay_snapshot_hint_writes`). A restore with `KREPLAY_RESTORE_FULL_CHECK`
    /// (`kreplay_restore_ex`), the last restore of a window by its pass count, and every restore while this is
    /// off, check the whole footprint; blocks found changed outside the set there are restored, learned and
    /// reported (`write_set_misses`).
    pub learn_write_set: bool,
}

// SAFETY: `kreplay_policy_t` is `#[repr(C)]` and begins with `struct_size: usize`; its other fields are
// integers and `bool`s, which a C compiler writes as 0 or 1.
unsafe impl Versioned for kreplay_policy_t {
    const MIN_SIZE: usize = offset_of!(kreplay_policy_t, max_snapshot_bytes) + size_of::<usize>();
    const REQUIRED: &'static str = "the version-1 fields";
    // Version 3's `untracked_decline_mask` starts in version 2's tail padding and version 4's
    // `host_budget_percent` in version 3's: a caller's struct_size of 56 or 80 covers 3 or 4 bytes it never set.
    const VERSION_ENDS: &'static [usize] = &[
        offset_of!(kreplay_policy_t, max_snapshot_bytes) + size_of::<usize>(),
        offset_of!(kreplay_policy_t, cache_module_scan) + size_of::<bool>(),
        offset_of!(kreplay_policy_t, device_budget_percent) + size_of::<u32>(),
        offset_of!(kreplay_policy_t, learn_write_set) + size_of::<bool>(),
    ];

    fn defaults() -> Self {
        let defaults = Policy::DEFAULT;
        kreplay_policy_t {
            struct_size: size_of::<kreplay_policy_t>(),
            pin_staging: defaults.pin_staging,
            max_snapshot_bytes: defaults.max_snapshot_bytes,
            device_budget_bytes: defaults.device_budget_bytes,
            dirty_only: defaults.dirty_only,
            digest_block_bytes: 0,
            cache_module_scan: defaults.cache_module_scan,
            untracked_decline_mask: defaults.untracked_decline_mask,
            warn_window_ns: defaults.warn_window_ns,
            max_window_ns: defaults.max_window_ns,
            device_budget_percent: defaults.device_budget_percent,
            host_budget_percent: defaults.host_budget_percent,
            learn_write_set: defaults.learn_write_set,
        }
    }
}

impl From<kreplay_policy_t> for Policy {
    fn from(raw: kreplay_policy_t) -> Self {
        let digest_block_bytes =
            if raw.digest_block_bytes == 0 { Policy::DEFAULT.digest_block_bytes } else { raw.digest_block_bytes };
        Policy {
            pin_staging: raw.pin_staging,
            max_snapshot_bytes: raw.max_snapshot_bytes,
            device_budget_bytes: raw.device_budget_bytes,
            dirty_only: raw.dirty_only,
            digest_block_bytes,
            cache_module_scan: raw.cache_module_scan,
            untracked_decline_mask: raw.untracked_decline_mask,
            warn_window_ns: raw.warn_window_ns,
            max_window_ns: raw.max_window_ns,
            device_budget_percent: raw.device_budget_percent,
            host_budget_percent: raw.host_budget_percent,
            learn_write_set: raw.learn_write_set,
        }
    }
}

/// Replaces the policy; snapshots under way keep the one they started with. Only `policy->struct_size` bytes
/// are read: any size that covers the version-1 fields (`pin_staging`, `max_snapshot_bytes`) is accepted, and
/// fields beyond it take their defaults (in brackets above). A smaller `struct_size`, a `digest_block_bytes`
/// that is not 0 or a power of two from 4096 to 16 MiB, an `untracked_decline_mask` with unknown bits or a
/// `device_budget_percent` or `host_budget_percent` above 100: `KREPLAY_STATUS_INVALID_ARGUMENT`.
/// Thread-safe.
///
/// # Safety
/// `policy` must be NULL or point to at least `policy->struct_size` readable bytes laid out as
/// `kreplay_policy_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_set_policy(policy: *const kreplay_policy_t) -> kreplay_status_t {
    // SAFETY: `policy` is NULL or holds `struct_size` readable bytes of the struct (caller's contract).
    match unsafe { versioned::read("kreplay_set_policy", "policy", policy) } {
        Some(raw) => to_status(engine().set_policy(raw.into())),
        None => KREPLAY_STATUS_INVALID_ARGUMENT,
    }
}

/// Tells kreplay that a code object was loaded or unloaded anywhere: every agent's cached module scan is
/// dropped, so the next capture scans again (see `cache_module_scan`). Thread-safe; cheap.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_modules_changed() {
    engine().modules_changed()
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::kreplay_policy_t;
    use crate::versioned;

    /// A caller's struct as a C compiler may leave it: every byte 0xFF, then the fields it knows written.
    #[repr(C, align(8))]
    struct Raw([u8; size_of::<kreplay_policy_t>()]);

    fn raw_of_size(struct_size: usize) -> Raw {
        let mut raw = Raw([0xFF; size_of::<kreplay_policy_t>()]);
        raw.0[..size_of::<usize>()].copy_from_slice(&struct_size.to_ne_bytes());
        raw.0[offset_of!(kreplay_policy_t, pin_staging)] = 0;
        let limit = offset_of!(kreplay_policy_t, max_snapshot_bytes);
        raw.0[limit..limit + size_of::<usize>()].copy_from_slice(&0usize.to_ne_bytes());
        raw
    }

    #[test]
    fn a_version_3_struct_s_tail_padding_is_never_read_as_a_version_4_field() {
        // Version 3 ended with `device_budget_percent`; its sizeof rounds up past it, over the padding where
        // version 4's `host_budget_percent` now lies.
        let v3_end = offset_of!(kreplay_policy_t, device_budget_percent) + size_of::<u32>();
        let v3_size = v3_end.next_multiple_of(8);
        assert!(offset_of!(kreplay_policy_t, host_budget_percent) < v3_size, "no field starts in the padding");
        let mut raw = raw_of_size(v3_size);
        for field in [offset_of!(kreplay_policy_t, dirty_only), offset_of!(kreplay_policy_t, cache_module_scan)] {
            raw.0[field] = 0;
        }
        let mask = offset_of!(kreplay_policy_t, untracked_decline_mask);
        raw.0[mask..mask + 4].copy_from_slice(&0u32.to_ne_bytes());
        let percent = offset_of!(kreplay_policy_t, device_budget_percent);
        raw.0[percent..percent + 4].copy_from_slice(&0u32.to_ne_bytes());
        let pointer = (&raw as *const Raw).cast::<kreplay_policy_t>();
        // SAFETY: `pointer` addresses `v3_size` readable bytes (the whole buffer), aligned for the struct.
        let read = unsafe { versioned::read("test", "policy", pointer) }.expect("a version-3 size is accepted");
        assert_eq!(read.host_budget_percent, 0, "padding read as the host budget");
        assert!(!read.learn_write_set);
        assert_eq!(read.device_budget_percent, 0);
    }

    #[test]
    fn a_version_4_struct_is_read_whole() {
        let mut raw = raw_of_size(size_of::<kreplay_policy_t>());
        for field in [
            offset_of!(kreplay_policy_t, dirty_only),
            offset_of!(kreplay_policy_t, cache_module_scan),
            offset_of!(kreplay_policy_t, learn_write_set),
        ] {
            raw.0[field] = 1;
        }
        let budget = offset_of!(kreplay_policy_t, host_budget_percent);
        raw.0[budget..budget + 4].copy_from_slice(&50u32.to_ne_bytes());
        let pointer = (&raw as *const Raw).cast::<kreplay_policy_t>();
        // SAFETY: `pointer` addresses the whole struct's bytes, aligned for it, every field set to a valid value.
        let read = unsafe { versioned::read("test", "policy", pointer) }.expect("the full size is accepted");
        assert_eq!(read.host_budget_percent, 50);
        assert!(read.learn_write_set);
    }
}
