//! The device operations a host hands in, the policy, and the replay gate.

use std::ffi::{c_char, c_void};
use std::mem::{offset_of, size_of};
use std::panic::{AssertUnwindSafe, catch_unwind};

use kreplay_core::policy::Policy;
use kreplay_core::{Agent, DeviceOps, Error, GlobalFlags, ModuleVariable, PointerInfo, PointerType};

use crate::ENGINE;
use crate::boundary::guard;
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

/// The device operations, as function pointers the host hands in (for HSA: the captured, un-wrapped runtime
/// functions). Every op is called with `user_data` first, from any thread that calls into kreplay.
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
    pub iterate_module_variables: Option<
        unsafe extern "C" fn(*mut c_void, kreplay_agent_t, kreplay_module_variable_visitor_t, *mut c_void) -> RawStatus,
    >,
    /// Optional (NULL when unsupported): page-locks host memory for faster transfers.
    pub host_lock: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> RawStatus>,
    /// Optional (NULL when unsupported, and then `host_lock` must be NULL too): undoes `host_lock`.
    pub host_unlock: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> RawStatus>,
}

/// The installed ops, as the engine sees them.
#[derive(Copy, Clone)]
pub(crate) struct CDeviceOps {
    raw: kreplay_device_ops_t,
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
            kind: PointerType::from_raw(info.r#type.0),
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
}

/// The smallest `struct_size` accepted: everything up to and including `iterate_module_variables`.
const MIN_OPS_SIZE: usize = offset_of!(kreplay_device_ops_t, host_lock);

/// Installs (copies in) the device ops, replacing earlier ones. The ops and `user_data` must stay valid, and be
/// callable from any thread, until the process ends or other ops are installed; the library keeps no pointer
/// to `ops` itself. Missing required ops, `host_lock` without `host_unlock` (or the reverse), or a
/// `struct_size` too small for the required ops: `KREPLAY_STATUS_INVALID_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `ops` must be NULL or point to at least `ops->struct_size` readable bytes laid out as
/// `kreplay_device_ops_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_configure(ops: *const kreplay_device_ops_t) -> kreplay_status_t {
    guard("kreplay_configure", KREPLAY_STATUS_INTERNAL_ERROR, || {
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
}

/// Replaces the policy; snapshots under way keep the one they started with. A `struct_size` smaller than this
/// version's `kreplay_policy_t`: `KREPLAY_STATUS_INVALID_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `policy` must be NULL or point to a readable `kreplay_policy_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_set_policy(policy: *const kreplay_policy_t) -> kreplay_status_t {
    guard("kreplay_set_policy", KREPLAY_STATUS_INTERNAL_ERROR, || {
        // SAFETY: NULL is checked; otherwise readable by the caller's contract.
        let Some(policy) = (unsafe { policy.as_ref() }) else {
            kreplay_core::log!(kreplay_core::log::Level::Warning, "kreplay_set_policy: policy is NULL");
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        };
        if policy.struct_size < size_of::<kreplay_policy_t>() {
            kreplay_core::log!(
                kreplay_core::log::Level::Warning,
                "kreplay_set_policy: struct_size {} is smaller than kreplay_policy_t ({} bytes)",
                policy.struct_size,
                size_of::<kreplay_policy_t>()
            );
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        to_status(
            ENGINE
                .set_policy(Policy { pin_staging: policy.pin_staging, max_snapshot_bytes: policy.max_snapshot_bytes }),
        )
    })
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
    guard("kreplay_replay_gate", kreplay_gate_t::KREPLAY_GATE_NOT_A_DISPATCH, || {
        use kreplay_core::gate::Gate;
        match ENGINE.replay_gate(packet_count, dispatch_packet_count, graph_launch_active) {
            Gate::Replay => kreplay_gate_t::KREPLAY_GATE_REPLAY,
            Gate::MultiPacket => kreplay_gate_t::KREPLAY_GATE_MULTI_PACKET,
            Gate::NotADispatch => kreplay_gate_t::KREPLAY_GATE_NOT_A_DISPATCH,
            Gate::GraphLaunch => kreplay_gate_t::KREPLAY_GATE_GRAPH_LAUNCH,
        }
    })
}
