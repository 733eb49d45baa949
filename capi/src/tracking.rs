//! Allocation tracking: what the host's allocate and free wrappers report.

use std::ffi::c_void;

use kreplay_core::log::Level;

use crate::boundary::ffi_guard;
use crate::engine::engine;
use crate::logging::is_nested;
use crate::status::*;
use crate::types::{kreplay_agent_t, write_out};

/// The answer of every `kreplay_record_*` while tracking is off, given before the panic boundary (it cannot
/// panic): success, for one relaxed atomic load and no stack frame.
#[inline(always)]
fn while_untracked() -> Option<kreplay_status_t> {
    (!engine().tracking_enabled()).then_some(KREPLAY_STATUS_SUCCESS)
}

/// Turns allocation recording on or off. While off, `kreplay_record_*` cost one relaxed atomic load and return
/// `KREPLAY_STATUS_SUCCESS`, and snapshots are declined (`KREPLAY_DECLINE_NOT_CONFIGURED`). Turning it off
/// forgets every tracked region, since frees made while off cannot be seen. Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_tracking_enable(enabled: bool) {
    engine().set_tracking(enabled)
}

/// Whether allocations are being recorded. Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_tracking_is_enabled() -> bool {
    engine().tracking_enabled()
}

/// Records an allocation, after the runtime made it successfully. `alloc_flags` are the pool allocation flags it
/// was made with: an executable allocation is filtered out before any query, other bits are ignored. The rest
/// are classified with `ops.pointer_info` and tracked only when device memory, coarse-grained and not kernarg,
/// tagged with the owner agent and a process-unique generation; not tracked is still `SUCCESS`.
/// `CAPACITY_EXCEEDED` when the inventory is full, `DEVICE_ERROR` when the pointer query fails, and
/// `NOT_CONFIGURED` when no device ops are installed: in each case the allocation is remembered as lost and
/// snapshots of its agent (all agents, when the owner is unknown) are declined until it is freed. Allocates
/// nothing; thread-safe.
#[ffi_guard(fast_path = while_untracked)]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_record_alloc(ptr: *mut c_void, size: usize, alloc_flags: u32) -> kreplay_status_t {
    to_status(engine().record_alloc(ptr as usize, size, alloc_flags))
}

/// Takes an allocation out of the inventory. Call it before the real free, so that no restore can write into
/// memory already given back; if the real free then fails, call `kreplay_record_free_undo`. Waits for a
/// capture or restore that is copying this region (and for nothing else). `NOT_FOUND` when untracked;
/// `IN_USE` (nothing changed) when called from a device op or logger while kreplay copies this very region on
/// the same thread. Allocates nothing; thread-safe.
#[ffi_guard(fast_path = while_untracked)]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_record_free(ptr: *mut c_void) -> kreplay_status_t {
    to_status(engine().record_free(ptr as usize))
}

/// Puts back the allocation at `ptr` whose free was recorded last, with the generation it had, for a host whose
/// real free failed after `kreplay_record_free` succeeded. `NOT_FOUND` when no recent free of `ptr` is
/// remembered (the last 256 frees are) or `ptr` is tracked again. Allocates nothing; thread-safe.
#[ffi_guard(fast_path = while_untracked)]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_record_free_undo(ptr: *mut c_void) -> kreplay_status_t {
    to_status(engine().record_free_undo(ptr as usize))
}

/// Records a virtual-memory mapping (`hsa_amd_vmem_map`), tracked and snapshotted like an allocation of
/// `owner`. A mapping over part of a tracked one replaces that part. Thread-safe.
#[ffi_guard(fast_path = while_untracked)]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_record_vmem_map(
    address: *mut c_void,
    size: usize,
    owner: kreplay_agent_t,
) -> kreplay_status_t {
    to_status(engine().record_vmem_map(address as usize, size, owner.into()))
}

/// Records a virtual-memory mapping whose owner agent cannot be determined (its allocation handle could not be
/// queried). It is not snapshotted, but it is not lost silently either: snapshots of every agent are declined
/// with `KREPLAY_DECLINE_INVENTORY_OVERFLOW` until unmaps cover it. (An addition to the contract.) Thread-safe.
#[ffi_guard(fast_path = while_untracked)]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_record_vmem_map_unknown_owner(address: *mut c_void, size: usize) -> kreplay_status_t {
    to_status(engine().record_vmem_map_unknown(address as usize, size))
}

/// Records an unmap (`hsa_amd_vmem_unmap`), before the real one. It may cover any part of one or more
/// mappings: covered mappings are removed, partly covered ones trimmed or split. `NOT_FOUND` when it overlaps
/// no tracked mapping. Thread-safe.
#[ffi_guard(fast_path = while_untracked)]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_record_vmem_unmap(address: *mut c_void, size: usize) -> kreplay_status_t {
    to_status(engine().record_vmem_unmap(address as usize, size))
}

/// Teardown guard: from here on `kreplay_record_*`, `kreplay_snap`, restores and staging calls return
/// `KREPLAY_STATUS_FINALIZED` (or do nothing) and touch no table. Call it from the host's finalization, before
/// its static destructors run. Irreversible; thread-safe.
///
/// It waits until calls in progress on other threads have left the library (a capture or restore in progress
/// stops early where it can), so once it returns no device op and no logger is called again. Called from
/// inside a device op or a logger, it cannot wait for its own thread's outer call (nor for calls that may be
/// waiting on it) and returns at once; the outer call then finishes without starting new copies where it can.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_finalize() {
    kreplay_core::log!(Level::Trace, "finalizing");
    engine().finalize();
    // Messages logged by the C boundary itself (outside any engine call) stop here too.
    kreplay_core::log::close(!is_nested());
}

/// What the inventory holds.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_inventory_stats_t {
    /// Regions tracked for the agent (allocations and mappings).
    pub regions: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Capacity of the whole allocation table (build-time setting `KREPLAY_MAX_TRACKED_REGIONS`).
    pub capacity: usize,
    /// Allocations of the agent (or of an unknown owner) that could not be recorded and may still be live.
    pub overflowed: usize,
}

/// Figures for one agent. `stats_out` is written only on success. Thread-safe.
///
/// # Safety
/// `stats_out` must be NULL or valid for a write of `kreplay_inventory_stats_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_inventory_stats(
    agent: kreplay_agent_t,
    stats_out: *mut kreplay_inventory_stats_t,
) -> kreplay_status_t {
    if stats_out.is_null() {
        kreplay_core::log!(Level::Warning, "kreplay_inventory_stats: stats_out is NULL");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    match engine().inventory_stats(agent.into()) {
        Ok(stats) => {
            let stats = kreplay_inventory_stats_t {
                regions: stats.regions,
                bytes: stats.bytes,
                capacity: stats.capacity,
                overflowed: stats.overflowed,
            };
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { write_out(stats_out, stats) };
            KREPLAY_STATUS_SUCCESS
        }
        Err(error) => error.into(),
    }
}
