//! Staging buffers: retained host memory from per-agent pools.

use std::ffi::c_void;
use std::ptr::NonNull;

use kreplay_core::log::Level;

use crate::boundary::ffi_guard;
use crate::engine::engine;
use crate::status::*;
use crate::types::kreplay_agent_t;

/// One region's host storage. Zero-initialise to get an empty buffer; read the fields, never write them.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct kreplay_staging_buffer_t {
    /// The storage, or NULL when empty.
    pub data: *mut c_void,
    /// Bytes asked for.
    pub size: usize,
    /// Bytes usable (at least `size`).
    pub capacity: usize,
    /// The pool the storage belongs to.
    pub agent: kreplay_agent_t,
    /// Identifies the loan, so that a stale copy of this struct released after the storage was lent to someone
    /// else is refused instead of taking the storage from its new owner. (An addition to the contract.)
    pub loan: u64,
}

const EMPTY: kreplay_staging_buffer_t = kreplay_staging_buffer_t {
    data: std::ptr::null_mut(),
    size: 0,
    capacity: 0,
    agent: kreplay_agent_t { handle: 0 },
    loan: 0,
};

/// Gives back what `buffer` holds; true when it held nothing or was given back (then it is empty).
fn release_into_pool(function: &str, buffer: &mut kreplay_staging_buffer_t) -> bool {
    let Some(data) = NonNull::new(buffer.data.cast::<u8>()) else { return true };
    match engine().staging_release(buffer.agent.into(), data, buffer.capacity, buffer.loan) {
        Ok(()) => {
            *buffer = EMPTY;
            true
        }
        Err(kreplay_core::Error::Finalized) => false,
        Err(_) => {
            kreplay_core::log!(
                Level::Error,
                "{function}: buffer at {:#x} ({} bytes, agent {:#x}) was not lent by kreplay or was released \
                 already; left untouched",
                data.as_ptr() as usize,
                buffer.capacity,
                buffer.agent.handle
            );
            false
        }
    }
}

/// Releases what `buffer` holds, then takes storage for `size` bytes from `agent`'s pool: the smallest
/// retained buffer whose capacity is in `[size, 2 * size]` (sizes up to 2 KiB come from shared slabs), otherwise
/// new storage, mapped without zero-filling. `size` 0 or too large to map: `INVALID_ARGUMENT`, and `buffer` is
/// unchanged. `buffer` holding storage whose loan is not outstanding (see `kreplay_staging_release`):
/// `INVALID_ARGUMENT`, logged, and `buffer` is unchanged. A failed mapping: `OUT_OF_HOST_MEMORY`, and `buffer` is
/// left empty. The caller gives the storage back with `kreplay_staging_release` (or another acquire).
/// Thread-safe for distinct buffers.
///
/// # Safety
/// `buffer` must be NULL or point to a `kreplay_staging_buffer_t` that is zero-initialised or was last written
/// by this library.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_staging_acquire(
    buffer: *mut kreplay_staging_buffer_t,
    agent: kreplay_agent_t,
    size: usize,
) -> kreplay_status_t {
    // SAFETY: NULL is checked; otherwise valid by the caller's contract.
    let Some(buffer) = (unsafe { buffer.as_mut() }) else {
        kreplay_core::log!(Level::Warning, "kreplay_staging_acquire: buffer is NULL");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    };
    // Every refusal of the size comes before the buffer is given back: a refused call changes nothing.
    let mappable = kreplay_core::host_memory::mapping_len(size).is_some_and(|len| len <= isize::MAX as usize);
    if size == 0 || !mappable {
        kreplay_core::log!(Level::Warning, "kreplay_staging_acquire: size {size} is zero or too large");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    if engine().is_finalized() {
        return KREPLAY_STATUS_FINALIZED;
    }
    if !release_into_pool("kreplay_staging_acquire", buffer) {
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    match engine().staging_acquire(agent.into(), size) {
        Ok(lease) => {
            *buffer = kreplay_staging_buffer_t {
                data: lease.data.as_ptr().cast(),
                size: lease.size,
                capacity: lease.capacity,
                agent,
                loan: lease.loan,
            };
            KREPLAY_STATUS_SUCCESS
        }
        Err(error) => {
            kreplay_core::log!(
                Level::Warning,
                "kreplay_staging_acquire: {size} bytes for agent {:#x} could not be had ({error:?})",
                agent.handle
            );
            error.into()
        }
    }
}

/// Returns the storage to its agent's pool; `buffer` becomes empty. NULL or empty: nothing happens. A buffer
/// whose loan is not outstanding (storage this library did not lend, or a copy of the struct whose storage came
/// back already, even if it has been lent to someone else since) is logged and left alone. Thread-safe for
/// distinct buffers.
///
/// # Safety
/// `buffer` must be NULL or point to a valid `kreplay_staging_buffer_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_staging_release(buffer: *mut kreplay_staging_buffer_t) {
    // SAFETY: NULL is checked; otherwise valid by the caller's contract.
    if let Some(buffer) = unsafe { buffer.as_mut() } {
        release_into_pool("kreplay_staging_release", buffer);
    }
}

/// Capacity held idle in `agent`'s pool, in bytes: idle buffers and wholly idle slab chunks. Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_retained_staging_bytes(agent: kreplay_agent_t) -> usize {
    engine().retained_staging_bytes(agent.into())
}

/// Unmaps all of `agent`'s idle storage (unlocking page-locked storage first). Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_staging_trim(agent: kreplay_agent_t) {
    engine().staging_trim(agent.into())
}

/// The library's own host mappings, process-wide.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_host_memory_stats_t {
    /// Successful mappings since the process started.
    pub maps: usize,
    /// Unmappings since the process started.
    pub unmaps: usize,
    /// Bytes mapped now (lent and retained).
    pub mapped_bytes: usize,
}

/// Counters of the library's host mappings: with them a host (or a test) can check that nothing leaks and
/// that steady-state dispatches make no mapping. Thread-safe.
///
/// # Safety
/// `stats_out` must be NULL or valid for a write of `kreplay_host_memory_stats_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_host_memory_stats(stats_out: *mut kreplay_host_memory_stats_t) -> kreplay_status_t {
    if stats_out.is_null() {
        kreplay_core::log!(Level::Warning, "kreplay_host_memory_stats: stats_out is NULL");
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    let stats = kreplay_core::host_memory::stats();
    let stats =
        kreplay_host_memory_stats_t { maps: stats.maps, unmaps: stats.unmaps, mapped_bytes: stats.mapped_bytes };
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { stats_out.write(stats) };
    KREPLAY_STATUS_SUCCESS
}
