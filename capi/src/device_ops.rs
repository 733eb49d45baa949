//! The device operations a host hands in (`kreplay_device_ops_t`), the values they pass, and how the engine
//! calls them ([`CDeviceOps`]).

use std::ffi::{c_char, c_void};
use std::mem::{offset_of, size_of};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;

use kreplay_core::{Agent, CopyJob, DeviceOps, Digest, DigestJob, Error, GlobalFlags, ModuleVariable, PointerInfo};

use crate::status::RawStatus;
use crate::types::{RawPointerType, kreplay_agent_t};
use crate::versioned::Versioned;

/// Global flag: kernel-argument memory (bit of `hsa_amd_memory_pool_global_flag_t`).
pub const KREPLAY_GLOBAL_FLAG_KERNARG: u32 = 1;
/// Global flag: fine-grained memory.
pub const KREPLAY_GLOBAL_FLAG_FINE_GRAINED: u32 = 2;
/// Global flag: coarse-grained memory, the only kind that is snapshotted.
pub const KREPLAY_GLOBAL_FLAG_COARSE_GRAINED: u32 = 4;
/// Allocation flag: executable memory (`HSA_AMD_MEMORY_POOL_EXECUTABLE_FLAG`, 1 << 2); never tracked.
pub const KREPLAY_ALLOC_FLAG_EXECUTABLE: u32 = 4;

/// What the runtime says about a pointer (`hsa_amd_pointer_info`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_pointer_info_t {
    /// The kind of memory.
    pub r#type: RawPointerType,
    /// `KREPLAY_GLOBAL_FLAG_*` bits of the memory's pool.
    pub global_flags: u32,
    /// The owning agent (`agentOwner`).
    pub owner: kreplay_agent_t,
    /// Start of the allocation containing the pointer.
    pub base: *mut c_void,
    /// Size of that allocation in bytes.
    pub size: usize,
}

/// A module-scope variable, as the host's module scan reports it.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct kreplay_module_variable_t {
    /// The symbol name, not NUL-terminated; may be NULL when unknown.
    pub name: *const c_char,
    /// Length of `name` in bytes.
    pub name_length: usize,
    /// Device address.
    pub address: *mut c_void,
    /// Size in bytes.
    pub size: usize,
    /// `__constant__` rather than `__device__`.
    pub is_constant: bool,
}

/// Called once per module variable; return true to continue the walk.
pub type kreplay_module_variable_visitor_t =
    unsafe extern "C" fn(visit_data: *mut c_void, variable: *const kreplay_module_variable_t) -> bool;

/// One copy of a batch: `bytes` from `src` to `dst`, in any direction (host or device on either side).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct kreplay_copy_t {
    /// Destination.
    pub dst: *mut c_void,
    /// Source.
    pub src: *const c_void,
    /// Bytes to copy.
    pub bytes: usize,
}

/// A 128-bit digest of one block of device memory.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct kreplay_digest_t {
    /// Low 64 bits.
    pub lo: u64,
    /// High 64 bits.
    pub hi: u64,
}

/// One range to digest, block by block.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct kreplay_digest_job_t {
    /// Device memory to digest.
    pub address: *const c_void,
    /// Bytes from `address`.
    pub bytes: usize,
    /// Host memory for `ceil(bytes / block_bytes)` digests.
    pub digests_out: *mut kreplay_digest_t,
}

// The core passes its own types across as these: same layout, checked here.
const _: () = {
    assert!(size_of::<kreplay_copy_t>() == size_of::<CopyJob>());
    assert!(offset_of!(kreplay_copy_t, bytes) == offset_of!(CopyJob, bytes));
    assert!(size_of::<kreplay_digest_t>() == size_of::<Digest>());
    assert!(size_of::<kreplay_digest_job_t>() == size_of::<DigestJob>());
    assert!(offset_of!(kreplay_digest_job_t, digests_out) == offset_of!(DigestJob, digests_out));
};

/// The device operations, as function pointers the host hands in (for HSA: the captured, un-wrapped runtime
/// functions). Every op is called with `user_data` first, from any thread that calls into kreplay.
///
/// Re-entry: an op may call any kreplay function; kreplay holds no lock while it calls an op. A
/// `kreplay_record_free` or `kreplay_record_vmem_unmap` of a region that the op's own call is copying returns
/// `KREPLAY_STATUS_IN_USE` with an error line (waiting would wait for itself); frees of other regions work.
/// `kreplay_finalize`, `kreplay_set_logger` and `kreplay_tracking_enable(false)` called from an op take effect
/// but return without waiting for the calls they would otherwise wait for. One cycle kreplay cannot break: an
/// op that takes a host lock which another host thread holds while it calls `kreplay_record_free` of a region
/// the op's call is copying (the free waits for the copy, the copy for the lock): do not hold, across
/// `kreplay_record_free`, a lock that an op takes.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct kreplay_device_ops_t {
    /// `sizeof(kreplay_device_ops_t)` as the caller compiled it: fields past it are taken as NULL.
    pub struct_size: usize,
    /// Passed back as the first argument of every op.
    pub user_data: *mut c_void,
    /// Direction-agnostic copy with `hsa_memory_copy` semantics; returns when the copy is complete.
    pub copy: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *const c_void, usize) -> RawStatus>,
    /// Describes the allocation containing a pointer.
    pub pointer_info:
        Option<unsafe extern "C" fn(*mut c_void, *const c_void, *mut kreplay_pointer_info_t) -> RawStatus>,
    /// Visits every module-scope variable visible to the agent in the loaded executables. Any failure to
    /// enumerate an executable or symbol must be returned as an error: the snapshot is then declined.
    /// Variables that lie back to back (or overlap) are copied as one range covering exactly their bytes; when
    /// `copy` refuses such a range (a refused `copy_batch` is redone copy by copy), for instance because it runs
    /// from one code object's memory into another's, kreplay copies those variables one by one, in that snapshot's
    /// restores too, and with `cache_module_scan` in later captures until `kreplay_modules_changed`.
    pub iterate_module_variables: Option<
        unsafe extern "C" fn(*mut c_void, kreplay_agent_t, kreplay_module_variable_visitor_t, *mut c_void) -> RawStatus,
    >,
    /// Optional (NULL when unsupported): page-locks host memory for faster transfers.
    pub host_lock: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> RawStatus>,
    /// Optional (NULL when unsupported, and then `host_lock` must be NULL too): undoes `host_lock`.
    pub host_unlock: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> RawStatus>,
    /// Version 2, optional: performs `count` copies (any directions, none overlapping another) and returns when
    /// every one is complete. A failure status means "some may not have happened": kreplay then redoes that
    /// batch one copy at a time with `copy`, so a report counts exactly the copies that fail.
    pub copy_batch:
        Option<unsafe extern "C" fn(*mut c_void, kreplay_agent_t, *const kreplay_copy_t, usize) -> RawStatus>,
    /// Version 2, optional (with `device_free`): device memory of the agent for snapshot storage (the device
    /// tier), allocated with the un-wrapped runtime functions: kreplay's own storage is never reported to
    /// `kreplay_record_alloc`.
    pub device_alloc: Option<unsafe extern "C" fn(*mut c_void, kreplay_agent_t, usize, *mut *mut c_void) -> RawStatus>,
    /// Version 2, optional (with `device_alloc`): gives back memory from `device_alloc`.
    pub device_free: Option<unsafe extern "C" fn(*mut c_void, kreplay_agent_t, *mut c_void, usize) -> RawStatus>,
    /// Version 2, optional: for each job, one 128-bit digest per consecutive `block_bytes` block of
    /// `[address, address + bytes)` (the last may be short), written to its `digests_out` (host memory);
    /// returns when all are written. Deterministic, well mixed, position-dependent within a block: two
    /// different blocks collide with probability near 2^-128 for accidental changes.
    pub digest: Option<
        unsafe extern "C" fn(*mut c_void, kreplay_agent_t, *const kreplay_digest_job_t, usize, usize) -> RawStatus,
    >,
    /// Optional: called once, with `user_data`, when kreplay no longer uses this set of ops (after a later
    /// `kreplay_configure`, once calls in flight and storage locked or allocated through it are gone), so the
    /// host may free what `user_data` points to. Not called for the set in use when the process exits.
    pub release: Option<unsafe extern "C" fn(*mut c_void)>,
    /// Version 3, optional: the agent's free device memory now, in bytes, written to `bytes_out`. With
    /// `device_budget_percent`, each capture's device budget is that percent of it (kreplay's own idle device
    /// storage counted as free); a failure means no device storage for that capture. Appended after `release`
    /// (which follows `digest`), so a version-2 `struct_size` stops before it.
    pub device_free_bytes: Option<unsafe extern "C" fn(*mut c_void, kreplay_agent_t, *mut usize) -> RawStatus>,
    /// Version 4, optional: the host memory available now, in bytes, written to `bytes_out` (what a new
    /// allocation of the process can get without swapping: Linux's `MemAvailable`, or a container's limit less
    /// its usage). With `host_budget_percent`, each capture's host budget is that percent of it plus the
    /// staging kreplay holds. NULL: kreplay reads `/proc/meminfo` itself. A failure means nothing available for
    /// that capture (only what kreplay holds counts). Called from capture, outside kreplay's locks; it may call
    /// no kreplay function. Appended after `device_free_bytes`.
    pub host_available_bytes: Option<unsafe extern "C" fn(*mut c_void, *mut usize) -> RawStatus>,
}

/// The installed ops, as the engine sees them. Dropped by the engine when nothing uses them any more.
pub(crate) struct CDeviceOps {
    pub(crate) raw: kreplay_device_ops_t,
}

impl Drop for CDeviceOps {
    fn drop(&mut self) {
        if let Some(release) = self.raw.release {
            // SAFETY: the host installed `release` with these ops and asked for exactly this call, once, when
            // kreplay stops using them: the engine drops a set of ops only then.
            unsafe { release(self.raw.user_data) };
        }
    }
}

// SAFETY: `kreplay_configure`'s contract requires the ops (and their user data) to be callable from any
// thread; the struct itself is plain data.
unsafe impl Send for CDeviceOps {}
// SAFETY: as above; the engine only reads the struct.
unsafe impl Sync for CDeviceOps {}

fn check(status: RawStatus) -> kreplay_core::Result<()> {
    if status.is_success() { Ok(()) } else { Err(Error::DeviceError) }
}

struct Visit<'a> {
    visit: &'a mut dyn FnMut(&ModuleVariable<'_>) -> bool,
    bad_input: bool,
}

unsafe extern "C" fn visit_trampoline(visit_data: *mut c_void, variable: *const kreplay_module_variable_t) -> bool {
    // SAFETY: `visit_data` is the `Visit` that `iterate_module_variables` passed to the host, alive for the walk.
    let visit = unsafe { &mut *visit_data.cast::<Visit<'_>>() };
    // SAFETY: NULL is checked; otherwise the host passes a variable valid for the call.
    let Some(variable) = (unsafe { variable.as_ref() }) else {
        visit.bad_input = true;
        return false;
    };
    let name = if variable.name.is_null() || variable.name_length == 0 {
        None
    } else {
        // SAFETY: the host guarantees `name` points to `name_length` readable bytes for the call.
        Some(unsafe { std::slice::from_raw_parts(variable.name.cast::<u8>(), variable.name_length) })
    };
    let variable = ModuleVariable {
        name,
        address: variable.address as usize,
        size: variable.size,
        is_constant: variable.is_constant,
    };
    // Unwinding into the host's C frames would be undefined behaviour: a panic ends the walk as a failure.
    match catch_unwind(AssertUnwindSafe(|| (visit.visit)(&variable))) {
        Ok(more) => more,
        Err(_) => {
            visit.bad_input = true;
            false
        }
    }
}

impl DeviceOps for CDeviceOps {
    unsafe fn copy(&self, dst: *mut u8, src: *const u8, bytes: usize) -> kreplay_core::Result<()> {
        let copy = self.raw.copy.ok_or(Error::NotConfigured)?;
        // SAFETY: the engine passes ranges valid for `bytes` (this function's contract); the host's copy has
        // `hsa_memory_copy` semantics.
        check(unsafe { copy(self.raw.user_data, dst.cast(), src.cast(), bytes) })
    }

    fn pointer_info(&self, ptr: *const u8) -> kreplay_core::Result<PointerInfo> {
        let query = self.raw.pointer_info.ok_or(Error::NotConfigured)?;
        let mut info = kreplay_pointer_info_t::default();
        // SAFETY: `info` is a valid, writable struct for the duration of the call.
        check(unsafe { query(self.raw.user_data, ptr.cast(), &mut info) })?;
        Ok(PointerInfo {
            kind: info.r#type.kind(),
            global_flags: GlobalFlags::from_bits_retain(info.global_flags),
            owner: info.owner.into(),
            base: info.base as usize,
            size: info.size,
        })
    }

    fn iterate_module_variables(
        &self,
        agent: Agent,
        visit: &mut dyn FnMut(&ModuleVariable<'_>) -> bool,
    ) -> kreplay_core::Result<()> {
        let iterate = self.raw.iterate_module_variables.ok_or(Error::NotConfigured)?;
        let mut state = Visit { visit, bad_input: false };
        // SAFETY: the trampoline matches the visitor signature and `state` outlives the walk, which the host
        // finishes before returning.
        let status = unsafe {
            iterate(self.raw.user_data, agent.into(), visit_trampoline, (&mut state as *mut Visit<'_>).cast())
        };
        check(status)?;
        if state.bad_input { Err(Error::DeviceError) } else { Ok(()) }
    }

    fn can_lock_host(&self) -> bool {
        self.raw.host_lock.is_some() && self.raw.host_unlock.is_some()
    }

    fn host_lock(&self, ptr: *mut u8, bytes: usize) -> kreplay_core::Result<()> {
        let lock = self.raw.host_lock.ok_or(Error::NotConfigured)?;
        // SAFETY: the engine passes a live mapping of its own of `bytes` bytes.
        check(unsafe { lock(self.raw.user_data, ptr.cast(), bytes) })
    }

    fn host_unlock(&self, ptr: *mut u8, bytes: usize) -> kreplay_core::Result<()> {
        let unlock = self.raw.host_unlock.ok_or(Error::NotConfigured)?;
        // SAFETY: the engine passes a range it locked earlier with `host_lock`.
        check(unsafe { unlock(self.raw.user_data, ptr.cast(), bytes) })
    }

    fn can_copy_batch(&self) -> bool {
        self.raw.copy_batch.is_some()
    }

    unsafe fn copy_batch(&self, agent: Agent, copies: &[CopyJob]) -> kreplay_core::Result<()> {
        let batch = self.raw.copy_batch.ok_or(Error::NotConfigured)?;
        // SAFETY: `CopyJob` has the layout of `kreplay_copy_t` (checked above); the engine passes valid,
        // non-overlapping copies (this function's contract).
        check(unsafe { batch(self.raw.user_data, agent.into(), copies.as_ptr().cast(), copies.len()) })
    }

    fn can_alloc_device(&self) -> bool {
        self.raw.device_alloc.is_some() && self.raw.device_free.is_some()
    }

    fn device_alloc(&self, agent: Agent, bytes: usize) -> kreplay_core::Result<NonNull<u8>> {
        let alloc = self.raw.device_alloc.ok_or(Error::NotConfigured)?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out pointer for the call.
        check(unsafe { alloc(self.raw.user_data, agent.into(), bytes, &mut ptr) })?;
        NonNull::new(ptr.cast()).ok_or(Error::DeviceError)
    }

    unsafe fn device_free(&self, agent: Agent, ptr: NonNull<u8>, bytes: usize) -> kreplay_core::Result<()> {
        let free = self.raw.device_free.ok_or(Error::NotConfigured)?;
        // SAFETY: `ptr`/`bytes` came from this set's `device_alloc` for `agent` (this function's contract).
        check(unsafe { free(self.raw.user_data, agent.into(), ptr.as_ptr().cast(), bytes) })
    }

    fn can_digest(&self) -> bool {
        self.raw.digest.is_some()
    }

    unsafe fn digest(&self, agent: Agent, jobs: &[DigestJob], block_bytes: usize) -> kreplay_core::Result<()> {
        let digest = self.raw.digest.ok_or(Error::NotConfigured)?;
        // SAFETY: `DigestJob` has the layout of `kreplay_digest_job_t` (checked above); each job is live device
        // memory and room for its digests (this function's contract).
        check(unsafe { digest(self.raw.user_data, agent.into(), jobs.as_ptr().cast(), jobs.len(), block_bytes) })
    }

    fn can_query_free_memory(&self) -> bool {
        self.raw.device_free_bytes.is_some()
    }

    fn device_free_bytes(&self, agent: Agent) -> kreplay_core::Result<usize> {
        let query = self.raw.device_free_bytes.ok_or(Error::NotConfigured)?;
        let mut bytes = 0usize;
        // SAFETY: `bytes` is a valid, writable out pointer for the duration of the call.
        check(unsafe { query(self.raw.user_data, agent.into(), &mut bytes) })?;
        Ok(bytes)
    }

    fn can_query_host_memory(&self) -> bool {
        self.raw.host_available_bytes.is_some()
    }

    fn host_available_bytes(&self) -> kreplay_core::Result<usize> {
        let query = self.raw.host_available_bytes.ok_or(Error::NotConfigured)?;
        let mut bytes = 0usize;
        // SAFETY: `bytes` is a valid, writable out pointer for the duration of the call.
        check(unsafe { query(self.raw.user_data, &mut bytes) })?;
        Ok(bytes)
    }
}

// SAFETY: `kreplay_device_ops_t` is `#[repr(C)]` and begins with `struct_size: usize`; its other fields are a
// pointer and `Option`s of function pointers, valid for NULL or any address a C compiler writes.
unsafe impl Versioned for kreplay_device_ops_t {
    const MIN_SIZE: usize = offset_of!(kreplay_device_ops_t, host_lock);
    const REQUIRED: &'static str = "the required ops";

    fn defaults() -> Self {
        kreplay_device_ops_t {
            struct_size: size_of::<kreplay_device_ops_t>(),
            user_data: std::ptr::null_mut(),
            copy: None,
            pointer_info: None,
            iterate_module_variables: None,
            host_lock: None,
            host_unlock: None,
            copy_batch: None,
            device_alloc: None,
            device_free: None,
            digest: None,
            release: None,
            device_free_bytes: None,
            host_available_bytes: None,
        }
    }
}
