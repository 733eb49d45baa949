//! Introspection: what the inventory tracks, for hosts and their tests of their own tracking.

use std::ffi::c_void;

use kreplay_core::log::Level;

use crate::boundary::ffi_guard;
use crate::engine::engine;
use crate::status::*;
use crate::types::{kreplay_agent_t, write_out};

/// Called once per tracked region by `kreplay_inventory_foreach`: its base, its size in bytes and its
/// generation (process-unique: an address freed and recorded again gets a new one). NULL is refused.
pub type kreplay_region_visitor_t =
    Option<unsafe extern "C" fn(user_data: *mut c_void, base: *const c_void, bytes: usize, generation: u64)>;

/// Calls `visit(user_data, base, bytes, generation)` for each region tracked for `agent` (allocations, then
/// virtual-memory mappings), in table order, and returns once all are visited. The table order is stable while
/// nothing is recorded or freed; a free moves the last entry into its place.
///
/// The visitor runs under the inventory's read lock: it must not call any kreplay function (an allocation
/// or free recorded from it would wait for that lock forever) and should return quickly, since every
/// `kreplay_record_*` of the process waits for it.
///
/// `INVALID_ARGUMENT` when `visit` is NULL; `FINALIZED` after `kreplay_finalize` (nothing visited). Thread-safe.
///
/// # Safety
/// `visit` must be NULL or a function that may be called with `user_data` from this thread during the call.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_inventory_foreach(
    agent: kreplay_agent_t,
    visit: kreplay_region_visitor_t,
    user_data: *mut c_void,
) -> kreplay_status_t {
    let Some(visit) = visit else {
        kreplay_core::log!(Level::Warning, "kreplay_inventory_foreach: visit is NULL");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    };
    let visited = engine().inventory_foreach(agent.into(), |region| {
        // SAFETY: the host supplied `visit` and `user_data` for calls made during this function.
        unsafe { visit(user_data, region.base as *const c_void, region.size, region.generation) }
    });
    match visited {
        Ok(_) => KREPLAY_STATUS_SUCCESS,
        Err(error) => error.into(),
    }
}

/// The generation of the allocation or mapping tracked at exactly `base` (what the inventory would compare a
/// snapshot's region against), written to `generation_out`. `NOT_FOUND` when nothing is tracked at `base`
/// (never recorded, freed, not tracked by classification, or not a region's base); `INVALID_ARGUMENT` when
/// `generation_out` is NULL; `generation_out` is written only on success. Allocates nothing; thread-safe.
///
/// # Safety
/// `generation_out` must be NULL or valid for a write of a `uint64_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_generation_of(base: *const c_void, generation_out: *mut u64) -> kreplay_status_t {
    if generation_out.is_null() {
        kreplay_core::log!(Level::Warning, "kreplay_generation_of: generation_out is NULL");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    match engine().generation_of(base as usize) {
        Ok(generation) => {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { write_out(generation_out, generation) };
            KREPLAY_STATUS_SUCCESS
        }
        Err(error) => error.into(),
    }
}
