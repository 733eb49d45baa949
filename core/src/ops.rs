//! The device operations a host supplies. The engine is device-agnostic: HSA, CUDA and the simulated device
//! all come in through this trait.
//!
//! Version-1 ops (copy, pointer query, module scan, page-locking) are required or paired as before. The
//! version-2 ops (batched copies, device storage, block digests) are optional: each has a `can_*` query, and a
//! host that offers none of them gets exactly the version-1 behaviour.

use core::ptr::NonNull;

use crate::error::{Error, Result};
use crate::types::{Agent, ModuleVariable, PointerInfo};

/// One copy of a batch. The layout of the C API's `kreplay_copy_t`, so a batch crosses the boundary as is.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CopyJob {
    /// Destination, host or device.
    pub dst: *mut u8,
    /// Source, host or device.
    pub src: *const u8,
    /// Bytes to copy.
    pub bytes: usize,
}

/// A 128-bit block digest. The layout of the C API's `kreplay_digest_t`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Digest {
    /// Low 64 bits.
    pub lo: u64,
    /// High 64 bits.
    pub hi: u64,
}

/// One range to digest. The layout of the C API's `kreplay_digest_job_t`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DigestJob {
    /// Device memory to digest.
    pub address: *const u8,
    /// Bytes from `address`.
    pub bytes: usize,
    /// Host memory for `bytes.div_ceil(block_bytes)` digests.
    pub digests_out: *mut Digest,
}

/// Device operations. Implementations must be callable from any thread. The engine keeps one set per
/// `configure` and drops it only when nothing uses it any more (no call in flight, no storage page-locked or
/// allocated through it), so `Drop` is where a host's per-set context may be released.
pub trait DeviceOps: Send + Sync {
    /// Copies `bytes` from `src` to `dst` in whichever direction the addresses imply, and returns when the
    /// copy is complete (`hsa_memory_copy` semantics).
    ///
    /// # Safety
    /// `src` must be readable and `dst` writable for `bytes` bytes, each in host or device memory, and the two
    /// ranges must not overlap.
    unsafe fn copy(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()>;

    /// Describes the allocation that contains `ptr`.
    fn pointer_info(&self, ptr: *const u8) -> Result<PointerInfo>;

    /// Calls `visit` for every module-scope variable visible to `agent`, until it returns false. Any failure
    /// to enumerate an executable or a symbol must be returned as an error.
    fn iterate_module_variables(&self, agent: Agent, visit: &mut dyn FnMut(&ModuleVariable<'_>) -> bool) -> Result<()>;

    /// Whether [`DeviceOps::host_lock`] and [`DeviceOps::host_unlock`] are available.
    fn can_lock_host(&self) -> bool;

    /// Page-locks host memory for faster transfers. The engine locks each staging block once, when it is
    /// fresh from `mmap` (no page touched yet), so this is where a first dispatch pays for faulting its
    /// footprint in: an implementation that can should populate the range first, in parallel, since runtimes
    /// fault pages in one by one. Touching each page from a few threads (a write fault each) scales when several
    /// agents' first dispatches run at once in one process, where `MADV_POPULATE_WRITE` holds the process's mmap
    /// lock and queues them (the adapters' `adapters/common/populate.hpp` has the figures).
    fn host_lock(&self, ptr: *mut u8, bytes: usize) -> Result<()>;

    /// Undoes [`DeviceOps::host_lock`].
    fn host_unlock(&self, ptr: *mut u8, bytes: usize) -> Result<()>;

    /// Whether [`DeviceOps::copy_batch`] is available.
    fn can_copy_batch(&self) -> bool {
        false
    }

    /// Performs every copy of `copies` (any directions), returning when all are complete. An error means that
    /// some copies may not have happened.
    ///
    /// # Safety
    /// As [`DeviceOps::copy`], for every element; no two copies overlap.
    unsafe fn copy_batch(&self, _agent: Agent, _copies: &[CopyJob]) -> Result<()> {
        Err(Error::NotConfigured)
    }

    /// Whether [`DeviceOps::device_alloc`] and [`DeviceOps::device_free`] are available.
    fn can_alloc_device(&self) -> bool {
        false
    }

    /// Device memory of `agent` for snapshot storage, never reported to the inventory.
    fn device_alloc(&self, _agent: Agent, _bytes: usize) -> Result<NonNull<u8>> {
        Err(Error::NotConfigured)
    }

    /// Gives back memory from [`DeviceOps::device_alloc`].
    ///
    /// # Safety
    /// `ptr` and `bytes` are exactly what an earlier `device_alloc` of this set of ops for `agent` returned and
    /// asked for, and nothing uses that memory any more.
    unsafe fn device_free(&self, _agent: Agent, _ptr: NonNull<u8>, _bytes: usize) -> Result<()> {
        Err(Error::NotConfigured)
    }

    /// Whether [`DeviceOps::digest`] is available.
    fn can_digest(&self) -> bool {
        false
    }

    /// For each job, one 128-bit digest per `block_bytes` block of its range (the last may be short), written
    /// to its `digests_out`; returns when all are written.
    ///
    /// # Safety
    /// Each job's range is readable device memory of `agent`, and its `digests_out` is writable host memory
    /// for `bytes.div_ceil(block_bytes)` digests.
    unsafe fn digest(&self, _agent: Agent, _jobs: &[DigestJob], _block_bytes: usize) -> Result<()> {
        Err(Error::NotConfigured)
    }

    /// Whether [`DeviceOps::device_free_bytes`] is available.
    fn can_query_free_memory(&self) -> bool {
        false
    }

    /// Device memory of `agent` free now, in bytes (for `device_budget_percent`).
    fn device_free_bytes(&self, _agent: Agent) -> Result<usize> {
        Err(Error::NotConfigured)
    }

    /// Whether [`DeviceOps::host_available_bytes`] is available; without it the host budget reads the operating
    /// system's figure ([`crate::host_memory::available_bytes`]).
    fn can_query_host_memory(&self) -> bool {
        false
    }

    /// Host memory available now, in bytes (for `host_budget_percent`).
    fn host_available_bytes(&self) -> Result<usize> {
        Err(Error::NotConfigured)
    }
}
