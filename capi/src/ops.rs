//! The device operations a host hands in, the policy, and the replay gate.

use std::ffi::{c_char, c_void};
use std::mem::{offset_of, size_of};
use std::panic::{AssertUnwindSafe, catch_unwind};

use std::ptr::NonNull;

use kreplay_core::policy::Policy;
use kreplay_core::{Agent, CopyJob, DeviceOps, Digest, DigestJob, Error, GlobalFlags, ModuleVariable, PointerInfo};

use crate::ENGINE;
use crate::boundary::ffi_guard;
use crate::status::*;
use crate::types::kreplay_agent_t;

/// Kinds of memory `pointer_info` reports; the values of `hsa_amd_pointer_type_t`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum kreplay_pointer_type_t {
    /// Not memory the runtime knows.
    KREPLAY_POINTER_UNKNOWN = 0,
    /// Device memory allocated through the runtime.
    KREPLAY_POINTER_DEVICE = 1,
    /// Host memory page-locked for the device.
    KREPLAY_POINTER_LOCKED = 2,
    /// Memory shared with a graphics API.
    KREPLAY_POINTER_GRAPHICS = 3,
    /// Memory imported from another process.
    KREPLAY_POINTER_IPC = 4,
    /// Version 3: unified (managed) memory, for runtimes that have it (CUDA's `cudaMemoryTypeManaged`). Not an
    /// HSA value; counted as untracked memory of kind `KREPLAY_UNTRACKED_MANAGED`, never snapshotted.
    KREPLAY_POINTER_MANAGED = 0x100,
}

/// A `kreplay_pointer_type_t` as a host writes it (any value); the header spells it `kreplay_pointer_type_t`.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RawPointerType(pub u32);

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
}

/// The installed ops, as the engine sees them. Dropped by the engine when nothing uses them any more.
pub(crate) struct CDeviceOps {
    raw: kreplay_device_ops_t,
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
}

/// The smallest `struct_size` accepted: everything up to and including `iterate_module_variables`.
const MIN_OPS_SIZE: usize = offset_of!(kreplay_device_ops_t, host_lock);

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
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_configure(ops: *const kreplay_device_ops_t) -> kreplay_status_t {
    ffi_guard!(KREPLAY_STATUS_INTERNAL_ERROR, || {
        if ops.is_null() {
            kreplay_core::log!(kreplay_core::log::Level::Warning, "kreplay_configure: ops is NULL");
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        // SAFETY: `ops` is non-null and points at least to a `struct_size` field (caller's contract).
        let struct_size = unsafe { ops.cast::<usize>().read_unaligned() };
        if struct_size < MIN_OPS_SIZE {
            kreplay_core::log!(
                kreplay_core::log::Level::Warning,
                "kreplay_configure: struct_size {struct_size} is smaller than the required ops ({MIN_OPS_SIZE} bytes)"
            );
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        let mut raw = kreplay_device_ops_t {
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
        };
        let len = struct_size.min(size_of::<kreplay_device_ops_t>());
        // SAFETY: 1. the caller guarantees `struct_size` readable bytes at `ops`, and `len` is at most that;
        // 2. `raw` is a distinct local of at least `len` bytes; 3. every field is a pointer or an
        // `Option<fn>`, for which any bytes a C compiler writes (NULL or a function address) are valid.
        unsafe { std::ptr::copy_nonoverlapping(ops.cast::<u8>(), (&mut raw as *mut kreplay_device_ops_t).cast(), len) };
        raw.struct_size = struct_size;
        if raw.copy.is_none() || raw.pointer_info.is_none() || raw.iterate_module_variables.is_none() {
            kreplay_core::log!(
                kreplay_core::log::Level::Warning,
                "kreplay_configure: copy, pointer_info and iterate_module_variables are required"
            );
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        if raw.host_lock.is_some() != raw.host_unlock.is_some() {
            kreplay_core::log!(
                kreplay_core::log::Level::Warning,
                "kreplay_configure: host_lock and host_unlock must both be set or both be NULL"
            );
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        if raw.device_alloc.is_some() != raw.device_free.is_some() {
            kreplay_core::log!(
                kreplay_core::log::Level::Warning,
                "kreplay_configure: device_alloc and device_free must both be set or both be NULL"
            );
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        to_status(ENGINE.configure(CDeviceOps { raw }))
    })
}

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
    /// kind `k` (`kreplay_untracked_kind_t`) is live; bits above `KREPLAY_UNTRACKED_KIND_COUNT` are invalid.
    pub untracked_decline_mask: u32,
    /// Version 3 [0 = 10 s]: a window projected above it logs one warning.
    pub warn_window_ns: u64,
    /// Version 3 [0 = none]: a window projected above it is declined (`KREPLAY_DECLINE_OVER_COST`).
    pub max_window_ns: u64,
    /// Version 3 [0 = off]: with `ops.device_free_bytes`, the device budget of each capture is this percent
    /// (at most 100) of the agent's free device memory at that moment (the smaller of it and
    /// `device_budget_bytes` when both are set).
    pub device_budget_percent: u32,
}

/// The version-1 policy: the fields every `struct_size` must cover.
const POLICY_V1_SIZE: usize = offset_of!(kreplay_policy_t, max_snapshot_bytes) + size_of::<usize>();

/// Replaces the policy; snapshots under way keep the one they started with. Only `policy->struct_size` bytes
/// are read: any size that covers the version-1 fields (`pin_staging`, `max_snapshot_bytes`) is accepted, and
/// fields beyond it take their defaults (in brackets above). A smaller `struct_size`, a
/// `digest_block_bytes` that is not 0 or a power of two from 4096 to 16 MiB, an `untracked_decline_mask` with
/// unknown bits or a `device_budget_percent` above 100: `KREPLAY_STATUS_INVALID_ARGUMENT`.
/// Thread-safe.
///
/// # Safety
/// `policy` must be NULL or point to at least `policy->struct_size` readable bytes laid out as
/// `kreplay_policy_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_set_policy(policy: *const kreplay_policy_t) -> kreplay_status_t {
    ffi_guard!(KREPLAY_STATUS_INTERNAL_ERROR, || {
        if policy.is_null() {
            kreplay_core::log!(kreplay_core::log::Level::Warning, "kreplay_set_policy: policy is NULL");
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        // SAFETY: non-null, and at least the `struct_size` field is readable (caller's contract).
        let struct_size = unsafe { policy.cast::<usize>().read_unaligned() };
        if struct_size < POLICY_V1_SIZE {
            kreplay_core::log!(
                kreplay_core::log::Level::Warning,
                "kreplay_set_policy: struct_size {struct_size} does not cover the version-1 fields ({POLICY_V1_SIZE} \
                 bytes)"
            );
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        let defaults = Policy::default();
        let mut raw = kreplay_policy_t {
            struct_size,
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
        };
        let len = struct_size.min(size_of::<kreplay_policy_t>());
        // SAFETY: 1. the caller guarantees `struct_size` readable bytes at `policy`, and `len` is at most that;
        // 2. `raw` is a distinct local of at least `len` bytes; 3. the fields are integers and bools, and a C
        // `bool` is 0 or 1, valid for Rust's `bool`.
        unsafe { std::ptr::copy_nonoverlapping(policy.cast::<u8>(), (&mut raw as *mut kreplay_policy_t).cast(), len) };
        let digest_block_bytes =
            if raw.digest_block_bytes == 0 { defaults.digest_block_bytes } else { raw.digest_block_bytes };
        to_status(ENGINE.set_policy(Policy {
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
        }))
    })
}

/// Tells kreplay that a code object was loaded or unloaded anywhere: every agent's cached module scan is
/// dropped, so the next capture scans again (see `cache_module_scan`). Thread-safe; cheap.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_modules_changed() {
    ffi_guard!((), || ENGINE.modules_changed())
}

/// Device memory held idle for `agent` (retained device storage that no live snapshot uses). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_retained_device_bytes(agent: kreplay_agent_t) -> usize {
    ffi_guard!(0, || ENGINE.retained_device_bytes(agent.into()))
}

/// Gives all of `agent`'s idle device storage back through `ops.device_free`. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_device_trim(agent: kreplay_agent_t) {
    ffi_guard!((), || ENGINE.device_trim(agent.into()))
}

/// Gives every agent's idle device storage back. A host whose own device allocation failed for lack of memory
/// calls this and retries once: kreplay never makes the application fail for memory it holds idle.
/// Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_device_trim_all() {
    ffi_guard!((), || ENGINE.device_trim_all())
}

/// The replay gate's verdict.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum kreplay_gate_t {
    /// Exactly one packet holding exactly one kernel dispatch: replay it.
    KREPLAY_GATE_REPLAY = 0,
    /// More than one packet in the submission (or none).
    KREPLAY_GATE_MULTI_PACKET = 1,
    /// The one packet is not exactly one kernel dispatch.
    KREPLAY_GATE_NOT_A_DISPATCH = 2,
    /// A graph launch is active: warned once per process, then run once.
    KREPLAY_GATE_GRAPH_LAUNCH = 3,
}

/// Decides whether a submission may be replayed: only one packet that is exactly one kernel dispatch, and
/// never while a graph launch is active (warned once per process). Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_replay_gate(
    packet_count: u32,
    dispatch_packet_count: u32,
    graph_launch_active: bool,
) -> kreplay_gate_t {
    ffi_guard!(kreplay_gate_t::KREPLAY_GATE_NOT_A_DISPATCH, || {
        use kreplay_core::gate::Gate;
        match ENGINE.replay_gate(packet_count, dispatch_packet_count, graph_launch_active) {
            Gate::Replay => kreplay_gate_t::KREPLAY_GATE_REPLAY,
            Gate::MultiPacket => kreplay_gate_t::KREPLAY_GATE_MULTI_PACKET,
            Gate::NotADispatch => kreplay_gate_t::KREPLAY_GATE_NOT_A_DISPATCH,
            Gate::GraphLaunch => kreplay_gate_t::KREPLAY_GATE_GRAPH_LAUNCH,
        }
    })
}
