//! Installing the device ops.

use kreplay_core::log::Level;

use crate::boundary::ffi_guard;
use crate::device_ops::{CDeviceOps, kreplay_device_ops_t};
use crate::engine::engine;
use crate::status::*;
use crate::versioned;

/// Installs (copies in) the device ops, replacing earlier ones. Only `ops->struct_size` bytes are read:
/// fields past it are taken as NULL, so a host compiled against the version-1 struct gets version-1
/// behaviour. The ops and `user_data` must stay valid, and be callable from any thread, until `release` is
/// called for them (or, without `release`, until the process ends); calls in flight and storage page-locked
/// or allocated through a replaced set keep using that set, and it is released when the last of them is
/// gone. The library keeps no pointer to `ops` itself. Missing required ops, `host_lock` without
/// `host_unlock` (or the reverse), `device_alloc` without `device_free` (or the reverse), or a `struct_size`
/// too small for the required ops: `KREPLAY_STATUS_INVALID_ARGUMENT` (kreplay took nothing: `release` is not
/// called); more than 8 replaced sets still in use: `KREPLAY_STATUS_CAPACITY_EXCEEDED`, and after finalize
/// `KREPLAY_STATUS_FINALIZED` (in both cases kreplay took the set and has called `release` for it before
/// returning). Thread-safe.
///
/// # Safety
/// `ops` must be NULL or point to at least `ops->struct_size` readable bytes laid out as
/// `kreplay_device_ops_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_configure(ops: *const kreplay_device_ops_t) -> kreplay_status_t {
    // SAFETY: `ops` is NULL or holds `struct_size` readable bytes of the struct (caller's contract).
    let Some(raw) = (unsafe { versioned::read("kreplay_configure", "ops", ops) }) else {
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    };
    if raw.copy.is_none() || raw.pointer_info.is_none() || raw.iterate_module_variables.is_none() {
        kreplay_core::log!(
            Level::Warning,
            "kreplay_configure: copy, pointer_info and iterate_module_variables are required"
        );
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    if raw.host_lock.is_some() != raw.host_unlock.is_some() {
        kreplay_core::log!(
            Level::Warning,
            "kreplay_configure: host_lock and host_unlock must both be set or both be NULL"
        );
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    if raw.device_alloc.is_some() != raw.device_free.is_some() {
        kreplay_core::log!(
            Level::Warning,
            "kreplay_configure: device_alloc and device_free must both be set or both be NULL"
        );
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    to_status(engine().configure(CDeviceOps { raw }))
}
