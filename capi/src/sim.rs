//! The simulated device for C: the `kreplay_sim_*` functions, a thin wrapper over the one simulated device of
//! the core ([`kreplay_core::sim::SimDevice`]). Built only with the `sim` feature, for the C tests, the demo,
//! the benchmarks and the fuzzer; never part of the production library. Declared in `include/kreplay_sim.h`
//! (generated from this file alone by `capi/cbindgen-sim.toml`), never in `kreplay.h`.
//!
//! One simulated device serves the whole process; every function is thread-safe. Device memory is carved
//! from one reserved address range; a freed region is filled with 0xDD and stays reserved until
//! `kreplay_sim_reset`, and any copy into it (or into reserved memory that is not a live region, module
//! variable or storage block) is refused and counted as a violation, so tests can prove that the library
//! never writes into freed memory.

use std::ffi::{c_char, c_void};
use std::ptr::NonNull;
use std::sync::OnceLock;

use kreplay_core::host_memory;
use kreplay_core::sim::SimDevice;
use kreplay_core::{Agent, CopyJob, DeviceOps, DigestJob, GlobalFlags, ModuleVariable, PointerType};

use crate::boundary::ffi_guard;
use crate::device_ops::{
    kreplay_copy_t, kreplay_device_ops_t, kreplay_digest_job_t, kreplay_module_variable_t,
    kreplay_module_variable_visitor_t, kreplay_pointer_info_t,
};
use crate::status::*;
use crate::types::{RawPointerType, kreplay_agent_t, kreplay_pointer_type_t};

/// Faults to inject. Counts are 1-based and start from the call of `kreplay_sim_set_faults`; 0 disarms.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_sim_faults_t {
    /// The k-th `copy` from now fails (once).
    pub fail_copy_at: usize,
    /// Every `copy` from the k-th on fails.
    pub fail_copies_from: usize,
    /// Every pointer query fails.
    pub fail_pointer_info: bool,
    /// The module scan fails when it reaches its k-th variable (counting across scans from now).
    pub fail_module_scan_at: usize,
    /// `host_lock` refuses.
    pub refuse_host_lock: bool,
    /// The library's k-th host mapping from now fails (once).
    pub fail_host_map_at: usize,
    /// The k-th `copy_batch` from now fails (once), after doing the first half of its copies.
    pub fail_copy_batch_at: usize,
    /// Every `copy_batch` from the k-th on fails, after doing the first half of its copies.
    pub fail_copy_batches_from: usize,
    /// The k-th `device_alloc` from now fails (once).
    pub fail_device_alloc_at: usize,
    /// The k-th `digest` from now fails (once).
    pub fail_digest_at: usize,
    /// Every `digest` from the k-th on fails.
    pub fail_digests_from: usize,
    /// Every `device_free_bytes` fails.
    pub fail_device_free_bytes: bool,
    /// Every `host_available_bytes` fails.
    pub fail_host_available_bytes: bool,
}

/// How the simulated device behaves; `kreplay_sim_reset` restores the defaults (all zero).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_sim_options_t {
    /// `kreplay_sim_device_ops` fills `copy_batch`.
    pub copy_batch: bool,
    /// `kreplay_sim_device_ops` fills `device_alloc` and `device_free`.
    pub device_alloc: bool,
    /// `kreplay_sim_device_ops` fills `digest`.
    pub digest: bool,
    /// Bytes of `device_alloc` storage each agent may hold at once (0: unlimited); beyond it `device_alloc`
    /// fails with `KREPLAY_STATUS_DEVICE_ERROR`, as a device out of memory does.
    pub device_capacity: usize,
    /// Every `copy` and `copy_batch` first sleeps this many nanoseconds (outside the device's lock), to widen
    /// race windows.
    pub sleep_in_copy_ns: u64,
    /// Every block digests to the same value: a digest that cannot tell contents apart.
    pub constant_digest: bool,
    /// `kreplay_sim_device_ops` fills `device_free_bytes`.
    pub device_free_bytes: bool,
    /// Free device memory of each agent besides its `device_alloc` storage: `device_free_bytes` answers this
    /// less the storage the agent holds now (at least 0).
    pub free_bytes: usize,
    /// `kreplay_sim_device_ops` fills `host_available_bytes`, which answers `host_available` as set here.
    pub host_available_bytes: bool,
    /// Host memory available, in bytes, as `host_available_bytes` reports it.
    pub host_available: usize,
}

/// What the simulated device has seen since the last reset.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_sim_counters_t {
    /// Copies performed (both directions), by `copy` and inside batches.
    pub copies: usize,
    /// Bytes copied.
    pub copy_bytes: usize,
    /// Copies into device memory (restores).
    pub copies_to_device: usize,
    /// `copy` calls that failed by injection.
    pub failed_copies: usize,
    /// Pointer queries answered.
    pub pointer_queries: usize,
    /// Module scans started.
    pub module_scans: usize,
    /// Successful `host_lock` calls.
    pub host_locks: usize,
    /// Successful `host_unlock` calls.
    pub host_unlocks: usize,
    /// Bytes page-locked now.
    pub locked_bytes: usize,
    /// Copies and digests refused because they touched freed or unknown device memory, or ran past a region's
    /// end, unlocks of ranges never locked and `device_free` of blocks not held: a correct library leaves
    /// this 0.
    pub violations: usize,
    /// `copy_batch` calls.
    pub batches: usize,
    /// Copies performed inside batches (also counted in `copies`).
    pub batch_copies: usize,
    /// `copy_batch` calls that failed by injection.
    pub failed_batches: usize,
    /// `device_alloc` calls.
    pub device_allocs: usize,
    /// Successful `device_free` calls.
    pub device_frees: usize,
    /// Bytes of `device_alloc` storage held now, all agents.
    pub device_bytes: usize,
    /// The most `device_bytes` has been.
    pub device_peak_bytes: usize,
    /// `digest` calls.
    pub digests: usize,
    /// Blocks digested.
    pub digest_blocks: usize,
    /// Copies refused because they ran from one code object's module variables into another's: not a violation
    /// (kreplay then copies those variables one by one). Every variable added through this header belongs to one
    /// code object, so a correct library leaves this 0 here.
    pub refused_copies: usize,
    /// `device_free_bytes` calls, failed ones included.
    pub device_free_queries: usize,
    /// `host_available_bytes` calls, failed ones included.
    pub host_available_queries: usize,
}

fn sim() -> &'static SimDevice {
    static SIM: OnceLock<SimDevice> = OnceLock::new();
    SIM.get_or_init(SimDevice::new)
}

fn raw(result: kreplay_core::Result<()>) -> RawStatus {
    to_status(result).into()
}

/// The status of `value()`; on success its value is written through `out` first. `out` NULL:
/// `INVALID_ARGUMENT`, and `value` is not called.
///
/// # Safety
/// `out` must be NULL or valid for a write of `T`.
unsafe fn deliver<T>(out: *mut T, value: impl FnOnce() -> kreplay_core::Result<T>) -> kreplay_status_t {
    if out.is_null() {
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    match value() {
        Ok(value) => {
            // SAFETY: writable by this function's contract.
            unsafe { out.write(value) };
            KREPLAY_STATUS_SUCCESS
        }
        Err(error) => error.into(),
    }
}

unsafe extern "C" fn sim_copy(_: *mut c_void, dst: *mut c_void, src: *const c_void, bytes: usize) -> RawStatus {
    // SAFETY: the library passes ranges valid for `bytes` (the `copy` op's contract); the sim checks device
    // ranges itself.
    raw(unsafe { sim().copy(dst.cast(), src.cast(), bytes) })
}

unsafe extern "C" fn sim_pointer_info(
    _: *mut c_void,
    ptr: *const c_void,
    info: *mut kreplay_pointer_info_t,
) -> RawStatus {
    let answer = || {
        sim().pointer_info(ptr.cast()).map(|found| kreplay_pointer_info_t {
            r#type: RawPointerType(kreplay_pointer_type_t::from(found.kind) as u32),
            global_flags: found.global_flags.bits(),
            owner: found.owner.into(),
            base: found.base as *mut c_void,
            size: found.size,
        })
    };
    // SAFETY: the library passes a writable info struct.
    unsafe { deliver(info, answer) }.into()
}

unsafe extern "C" fn sim_iterate(
    _: *mut c_void,
    agent: kreplay_agent_t,
    visit: kreplay_module_variable_visitor_t,
    visit_data: *mut c_void,
) -> RawStatus {
    raw(sim().iterate_module_variables(agent.into(), &mut |variable: &ModuleVariable<'_>| {
        let name = variable.name.unwrap_or_default();
        let reported = kreplay_module_variable_t {
            name: name.as_ptr().cast(),
            name_length: name.len(),
            address: variable.address as *mut c_void,
            size: variable.size,
            is_constant: variable.is_constant,
        };
        // SAFETY: the visitor and its data come from the library for this walk; `reported` lives across the call.
        unsafe { visit(visit_data, &reported) }
    }))
}

unsafe extern "C" fn sim_host_lock(_: *mut c_void, ptr: *mut c_void, bytes: usize) -> RawStatus {
    raw(sim().host_lock(ptr.cast(), bytes))
}

unsafe extern "C" fn sim_host_unlock(_: *mut c_void, ptr: *mut c_void, bytes: usize) -> RawStatus {
    raw(sim().host_unlock(ptr.cast(), bytes))
}

/// Runs `op` on the `count` entries at `list`, read as `J`: success at once for an empty list,
/// `INVALID_ARGUMENT` for NULL.
///
/// # Safety
/// `list` must be NULL or point to `count` readable entries of a C type with `J`'s layout (checked in
/// `device_ops` for `kreplay_copy_t` and `kreplay_digest_job_t`).
unsafe fn on_list<C, J>(list: *const C, count: usize, op: impl FnOnce(&[J]) -> kreplay_core::Result<()>) -> RawStatus {
    if count == 0 {
        return KREPLAY_STATUS_SUCCESS.into();
    }
    if list.is_null() {
        return KREPLAY_STATUS_INVALID_ARGUMENT.into();
    }
    // SAFETY: non-null, `count` readable entries with `J`'s layout (this function's contract).
    raw(op(unsafe { std::slice::from_raw_parts(list.cast::<J>(), count) }))
}

unsafe extern "C" fn sim_copy_batch(
    _: *mut c_void,
    agent: kreplay_agent_t,
    copies: *const kreplay_copy_t,
    count: usize,
) -> RawStatus {
    let copy = |jobs: &[CopyJob]| {
        // SAFETY: every copy is valid by the `copy_batch` op's contract; the sim checks device ranges itself.
        unsafe { sim().copy_batch(agent.into(), jobs) }
    };
    // SAFETY: the library passes `count` readable copies (the `copy_batch` op's contract), and
    // `kreplay_copy_t` has `CopyJob`'s layout.
    unsafe { on_list(copies, count, copy) }
}

unsafe extern "C" fn sim_device_alloc(
    _: *mut c_void,
    agent: kreplay_agent_t,
    bytes: usize,
    ptr_out: *mut *mut c_void,
) -> RawStatus {
    let block = || sim().device_alloc(agent.into(), bytes).map(|ptr| ptr.as_ptr().cast());
    // SAFETY: NULL or writable by the op's contract.
    unsafe { deliver(ptr_out, block) }.into()
}

unsafe extern "C" fn sim_device_free(
    _: *mut c_void,
    agent: kreplay_agent_t,
    ptr: *mut c_void,
    bytes: usize,
) -> RawStatus {
    match NonNull::new(ptr.cast::<u8>()) {
        // SAFETY: the sim checks that `ptr`/`bytes` is a block it handed to `agent` and refuses anything else.
        Some(ptr) => raw(unsafe { sim().device_free(agent.into(), ptr, bytes) }),
        None => KREPLAY_STATUS_INVALID_ARGUMENT.into(),
    }
}

unsafe extern "C" fn sim_digest(
    _: *mut c_void,
    agent: kreplay_agent_t,
    jobs: *const kreplay_digest_job_t,
    count: usize,
    block_bytes: usize,
) -> RawStatus {
    let digest = |jobs: &[DigestJob]| {
        // SAFETY: each job's output is writable by the op's contract; the sim checks the device ranges itself.
        unsafe { sim().digest(agent.into(), jobs, block_bytes) }
    };
    // SAFETY: the library passes `count` readable jobs (the `digest` op's contract), and
    // `kreplay_digest_job_t` has `DigestJob`'s layout.
    unsafe { on_list(jobs, count, digest) }
}

unsafe extern "C" fn sim_device_free_bytes(_: *mut c_void, agent: kreplay_agent_t, bytes_out: *mut usize) -> RawStatus {
    // SAFETY: NULL or writable by the op's contract.
    unsafe { deliver(bytes_out, || sim().device_free_bytes(agent.into())) }.into()
}

unsafe extern "C" fn sim_host_available_bytes(_: *mut c_void, bytes_out: *mut usize) -> RawStatus {
    // SAFETY: NULL or writable by the op's contract.
    unsafe { deliver(bytes_out, || sim().host_available_bytes()) }.into()
}

/// Fills `ops_out` with the simulated device's ops: the five version-1 ops always, and the optional ops
/// (`copy_batch`, `device_alloc`/`device_free`, `digest`, `device_free_bytes`, `host_available_bytes`) that `kreplay_sim_set_options`
/// turned on (none by default). `release` stays NULL: the simulated device lives as long as the process. Ready for
/// `kreplay_configure`.
///
/// # Safety
/// `ops_out` must be NULL or valid for a write of `kreplay_device_ops_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_device_ops(ops_out: *mut kreplay_device_ops_t) -> kreplay_status_t {
    if ops_out.is_null() {
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    let (batch, device, digest, free_bytes, host_memory) = {
        let state = sim().state();
        (
            state.offer_copy_batch,
            state.offer_device,
            state.offer_digest,
            state.offer_free_bytes,
            state.offer_host_memory,
        )
    };
    let ops = kreplay_device_ops_t {
        struct_size: size_of::<kreplay_device_ops_t>(),
        user_data: std::ptr::null_mut(),
        copy: Some(sim_copy),
        pointer_info: Some(sim_pointer_info),
        iterate_module_variables: Some(sim_iterate),
        host_lock: Some(sim_host_lock),
        host_unlock: Some(sim_host_unlock),
        copy_batch: batch.then_some(sim_copy_batch as _),
        device_alloc: device.then_some(sim_device_alloc as _),
        device_free: device.then_some(sim_device_free as _),
        digest: digest.then_some(sim_digest as _),
        release: None,
        device_free_bytes: free_bytes.then_some(sim_device_free_bytes as _),
        host_available_bytes: host_memory.then_some(sim_host_available_bytes as _),
    };
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { ops_out.write(ops) };
    KREPLAY_STATUS_SUCCESS
}

/// Sets the simulated device's options (NULL restores the defaults). Takes effect at once for the counters
/// and behaviour; which version-2 ops exist is read by the next `kreplay_sim_device_ops`.
///
/// # Safety
/// `options` must be NULL or point to a readable `kreplay_sim_options_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_set_options(options: *const kreplay_sim_options_t) {
    // SAFETY: NULL is checked; otherwise readable by the caller's contract.
    let options = unsafe { options.as_ref() }.copied().unwrap_or_default();
    let mut state = sim().state();
    state.offer_copy_batch = options.copy_batch;
    state.offer_device = options.device_alloc;
    state.offer_digest = options.digest;
    state.device_capacity = options.device_capacity;
    state.sleep_in_copy_ns = options.sleep_in_copy_ns;
    state.constant_digest = options.constant_digest;
    state.offer_free_bytes = options.device_free_bytes;
    state.free_bytes = options.free_bytes;
    state.offer_host_memory = options.host_available_bytes;
    state.host_available = options.host_available;
}

fn alloc_common(
    at: Option<usize>,
    agent: kreplay_agent_t,
    size: usize,
    kind: kreplay_pointer_type_t,
    global_flags: u32,
    ptr_out: *mut *mut c_void,
) -> kreplay_status_t {
    if size == 0 {
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    let kind = kind.engine().unwrap_or(PointerType::Unknown);
    let flags = GlobalFlags::from_bits_retain(global_flags);
    let base = || sim().try_alloc(at, agent.into(), size, kind, flags).map(|base| base as *mut c_void);
    // SAFETY: NULL or writable by the caller's contract.
    unsafe { deliver(ptr_out, base) }
}

/// Allocates `size` bytes of simulated memory of the given kind and global flags, owned by `agent`. The
/// contents are unspecified (fresh memory reads as zero). Does not record it: the caller does, as a host's
/// allocate wrapper would.
///
/// # Safety
/// `ptr_out` must be NULL or valid for a write of a pointer.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_alloc(
    agent: kreplay_agent_t,
    size: usize,
    r#type: kreplay_pointer_type_t,
    global_flags: u32,
    ptr_out: *mut *mut c_void,
) -> kreplay_status_t {
    alloc_common(None, agent, size, r#type, global_flags, ptr_out)
}

/// Allocates again at `address`, which must be a region freed with `kreplay_sim_free` at least `size` bytes
/// large: the way a runtime hands a freed address to the next allocation.
///
/// # Safety
/// `ptr_out` must be NULL or valid for a write of a pointer.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_alloc_at(
    address: *mut c_void,
    agent: kreplay_agent_t,
    size: usize,
    r#type: kreplay_pointer_type_t,
    global_flags: u32,
    ptr_out: *mut *mut c_void,
) -> kreplay_status_t {
    alloc_common(Some(address as usize), agent, size, r#type, global_flags, ptr_out)
}

/// Frees a simulated region: it is filled with 0xDD and stays reserved, and from now on any copy into it is
/// refused and counted as a violation. `NOT_FOUND` for anything but a live region's base. Does not record the
/// free: the caller does that first, as a host's free wrapper would.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_sim_free(ptr: *mut c_void) -> kreplay_status_t {
    if sim().try_free(ptr as usize) { KREPLAY_STATUS_SUCCESS } else { KREPLAY_STATUS_NOT_FOUND }
}

/// Adds a module-scope variable of `size` bytes visible to `agent` (`name` is NUL-terminated; NULL for an
/// unnamed one) and returns its address. Its storage reads as zero at first and lives until `kreplay_sim_reset`.
/// A `size` of 0 registers a zero-size variable at a dummy address, to test the skip rule.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string; `address_out` NULL or valid for a write of a pointer.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_add_module_variable(
    agent: kreplay_agent_t,
    name: *const c_char,
    size: usize,
    is_constant: bool,
    address_out: *mut *mut c_void,
) -> kreplay_status_t {
    let add = || {
        let name: &[u8] = if name.is_null() {
            &[]
        } else {
            // SAFETY: non-null and NUL-terminated by the caller's contract.
            unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes()
        };
        sim().add_variable_with(agent.into(), name, size, is_constant).map(|address| address as *mut c_void)
    };
    // SAFETY: NULL or writable by the caller's contract.
    unsafe { deliver(address_out, add) }
}

/// Starts a new code object: module variables added from now on lie in its own loaded segment. Returns its id
/// (every variable added before the first call is in code object 0).
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_sim_new_code_object() -> usize {
    sim().new_code_object();
    sim().code_object() as usize
}

/// Unloads code object `code_object` (as `hsa_executable_destroy` or `cuModuleUnload` would): its variables
/// leave the module scan and their memory reads as freed, so a copy into it counts as a violation. Returns how
/// many variables it held. The library is not told: a host calls `kreplay_modules_changed()` itself.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_sim_unload_code_object(code_object: usize) -> usize {
    sim().unload_code_object(code_object as u64)
}

/// Arms the faults in `faults` (NULL disarms all) and restarts their counts.
///
/// # Safety
/// `faults` must be NULL or point to a readable `kreplay_sim_faults_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_set_faults(faults: *const kreplay_sim_faults_t) {
    // SAFETY: NULL is checked; otherwise readable by the caller's contract.
    let faults = unsafe { faults.as_ref() }.copied().unwrap_or_default();
    let from = |now: usize, k: usize| if k == 0 { 0 } else { now.saturating_add(k) };
    let mut state = sim().state();
    state.fail_copy_at = from(state.copies, faults.fail_copy_at);
    state.fail_copies_from = from(state.copies, faults.fail_copies_from);
    state.fail_query = faults.fail_pointer_info;
    state.fail_scan_at_variable = from(state.scanned_variables, faults.fail_module_scan_at);
    state.refuse_lock = faults.refuse_host_lock;
    state.fail_batch_at = from(state.batches, faults.fail_copy_batch_at);
    state.fail_batches_from = from(state.batches, faults.fail_copy_batches_from);
    state.fail_device_alloc_at = from(state.device_allocs, faults.fail_device_alloc_at);
    state.fail_digest_at = from(state.digests, faults.fail_digest_at);
    state.fail_digests_from = from(state.digests, faults.fail_digests_from);
    state.fail_free_bytes = faults.fail_device_free_bytes;
    state.fail_host_available = faults.fail_host_available_bytes;
    host_memory::fault::fail_map_at(faults.fail_host_map_at);
}

/// The counters since the last reset.
///
/// # Safety
/// `counters_out` must be NULL or valid for a write of `kreplay_sim_counters_t`.
#[ffi_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_counters(counters_out: *mut kreplay_sim_counters_t) -> kreplay_status_t {
    if counters_out.is_null() {
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    let state = sim().state();
    let counters = kreplay_sim_counters_t {
        copies: state.copies_done,
        copy_bytes: state.copy_bytes,
        copies_to_device: state.copies_to_device,
        failed_copies: state.failed_copies,
        pointer_queries: state.queries,
        module_scans: state.scans,
        host_locks: state.locks,
        host_unlocks: state.unlocks,
        locked_bytes: state.locked_bytes,
        violations: state.violations,
        batches: state.batches,
        batch_copies: state.batch_copies,
        failed_batches: state.failed_batches,
        device_allocs: state.device_allocs,
        device_frees: state.device_frees,
        device_bytes: state.device_bytes,
        device_peak_bytes: state.device_peak_bytes,
        digests: state.digests,
        digest_blocks: state.digest_blocks,
        refused_copies: state.refused_copies,
        device_free_queries: state.free_bytes_queries,
        host_available_queries: state.host_available_queries,
    };
    drop(state);
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { counters_out.write(counters) };
    KREPLAY_STATUS_SUCCESS
}

/// Bytes of `device_alloc` storage `agent` holds now.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_sim_device_bytes(agent: kreplay_agent_t) -> usize {
    sim().device_bytes_held(Agent::from(agent))
}

/// Forgets every region, module variable and storage block (their memory is released), disarms faults,
/// restores the default options and zeroes the counters (except `locked_bytes` and the ranges still locked,
/// which the library must unlock itself). Ops already configured keep working (a version-2 op that the
/// options no longer offer still runs). Does not touch the library's inventory: record frees first, or turn
/// tracking off and on.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_sim_reset() {
    sim().reset();
    let mut state = sim().state();
    state.offer_copy_batch = false;
    state.offer_device = false;
    state.offer_digest = false;
    state.offer_free_bytes = false;
    state.offer_host_memory = false;
    drop(state);
    host_memory::fault::fail_map_at(0);
}
