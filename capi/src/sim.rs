//! The simulated device: host memory standing in for device memory, with fault injection and counters.
//! Built only with the `sim` feature, for the C tests, the demo, the benchmarks and the fuzzer; never part of
//! the production library. Declared in `kreplay.h` under `#if defined(KREPLAY_SIM)`.
//!
//! Device memory is carved from one large reserved mapping, so tens of thousands of regions cost no mapping
//! each. A freed region stays mapped, filled with 0xDD, until `kreplay_sim_reset`: any copy into it (or into
//! memory that is neither a live region, a module variable, nor plain host memory) is refused and counted as
//! a violation, so tests can prove that the library never writes into freed memory.
//!
//! One simulated device serves the whole process; every function is thread-safe.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use kreplay_core::host_memory;

use crate::boundary::guard;
use crate::ops::{
    RawPointerType, kreplay_device_ops_t, kreplay_module_variable_t, kreplay_module_variable_visitor_t,
    kreplay_pointer_info_t, kreplay_pointer_type_t,
};
use crate::status::*;
use crate::types::kreplay_agent_t;

/// Bytes of address space reserved for simulated device memory.
const ARENA_BYTES: usize = 64 << 30;
/// Simulated allocations start at multiples of this.
const ALIGN: usize = 256;
const FREED_FILL: u8 = 0xDD;

/// Faults to inject. Counts are 1-based and start from the call of `kreplay_sim_set_faults`; 0 disarms.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_sim_faults_t {
    /// The k-th device copy from now fails (once).
    pub fail_copy_at: usize,
    /// Every device copy from the k-th on fails.
    pub fail_copies_from: usize,
    /// Every pointer query fails.
    pub fail_pointer_info: bool,
    /// The module scan fails when it reaches its k-th variable (counting across scans from now).
    pub fail_module_scan_at: usize,
    /// `host_lock` refuses.
    pub refuse_host_lock: bool,
    /// The library's k-th host mapping from now fails (once).
    pub fail_host_map_at: usize,
}

/// What the simulated device has seen since the last reset.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct kreplay_sim_counters_t {
    /// Copies performed (both directions).
    pub copies: usize,
    /// Bytes copied.
    pub copy_bytes: usize,
    /// Copies into device memory (restores).
    pub copies_to_device: usize,
    /// Copies that failed by injection.
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
    /// Copies refused because they touched freed or unknown device memory, or ran past a region's end, and
    /// unlocks of ranges never locked: a correct library leaves this 0.
    pub violations: usize,
}

#[derive(Clone, Debug)]
struct Region {
    size: usize,
    agent: u64,
    kind: u32,
    global_flags: u32,
    live: bool,
}

#[derive(Clone, Debug)]
struct Variable {
    agent: u64,
    name: Vec<u8>,
    address: usize,
    size: usize,
    is_constant: bool,
}

struct State {
    arena: usize,
    next: usize,
    regions: BTreeMap<usize, Region>,
    variables: Vec<Variable>,
    locked: Vec<(usize, usize)>,
    faults: kreplay_sim_faults_t,
    copies_since_faults: usize,
    variables_since_faults: usize,
}

static STATE: Mutex<State> = Mutex::new(State {
    arena: 0,
    next: 0,
    regions: BTreeMap::new(),
    variables: Vec::new(),
    locked: Vec::new(),
    faults: kreplay_sim_faults_t {
        fail_copy_at: 0,
        fail_copies_from: 0,
        fail_pointer_info: false,
        fail_module_scan_at: 0,
        refuse_host_lock: false,
        fail_host_map_at: 0,
    },
    copies_since_faults: 0,
    variables_since_faults: 0,
});

struct Counters {
    copies: AtomicUsize,
    copy_bytes: AtomicUsize,
    copies_to_device: AtomicUsize,
    failed_copies: AtomicUsize,
    pointer_queries: AtomicUsize,
    module_scans: AtomicUsize,
    host_locks: AtomicUsize,
    host_unlocks: AtomicUsize,
    locked_bytes: AtomicUsize,
    violations: AtomicUsize,
}

static COUNTERS: Counters = Counters {
    copies: AtomicUsize::new(0),
    copy_bytes: AtomicUsize::new(0),
    copies_to_device: AtomicUsize::new(0),
    failed_copies: AtomicUsize::new(0),
    pointer_queries: AtomicUsize::new(0),
    module_scans: AtomicUsize::new(0),
    host_locks: AtomicUsize::new(0),
    host_unlocks: AtomicUsize::new(0),
    locked_bytes: AtomicUsize::new(0),
    violations: AtomicUsize::new(0),
};

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn bump(counter: &AtomicUsize, by: usize) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// Where an address falls.
enum Place {
    /// Inside a live region or module variable, with this many bytes left to its end.
    Device(usize),
    /// Inside a freed region, or in the arena outside any region.
    Dead,
    /// Not simulated device memory.
    Host,
}

impl State {
    fn ensure_arena(&mut self) -> bool {
        if self.arena != 0 {
            return true;
        }
        // SAFETY: an anonymous private mapping with no address hint has no preconditions; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ARENA_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return false;
        }
        self.arena = ptr as usize;
        self.next = self.arena;
        true
    }

    fn place(&self, address: usize) -> Place {
        if let Some(v) = self.variables.iter().find(|v| address >= v.address && address < v.address + v.size) {
            return Place::Device(v.address + v.size - address);
        }
        if self.arena == 0 || address < self.arena || address >= self.arena + ARENA_BYTES {
            return Place::Host;
        }
        match self.regions.range(..=address).next_back() {
            Some((&base, region)) if address < base + region.size => {
                if region.live {
                    Place::Device(base + region.size - address)
                } else {
                    Place::Dead
                }
            }
            _ => Place::Dead,
        }
    }

    /// Whether `[address, address + bytes)` may be touched by a copy.
    fn copy_allowed(&self, address: usize, bytes: usize) -> bool {
        match self.place(address) {
            Place::Host => true,
            Place::Device(left) => bytes <= left,
            Place::Dead => false,
        }
    }

    fn allocate(&mut self, address: Option<usize>, size: usize) -> Option<usize> {
        if !self.ensure_arena() || size == 0 {
            return None;
        }
        match address {
            Some(address) => {
                let region = self.regions.get(&address)?;
                (!region.live && region.size >= size).then_some(address)
            }
            None => {
                let base = self.next;
                let end = base.checked_add(size)?.checked_next_multiple_of(ALIGN)?;
                if end > self.arena + ARENA_BYTES {
                    return None;
                }
                self.next = end;
                Some(base)
            }
        }
    }
}

unsafe extern "C" fn sim_copy(_: *mut c_void, dst: *mut c_void, src: *const c_void, bytes: usize) -> RawStatus {
    let (dst_addr, src_addr) = (dst as usize, src as usize);
    let mut state = state();
    state.copies_since_faults += 1;
    let n = state.copies_since_faults;
    let faults = state.faults;
    if faults.fail_copy_at == n || (faults.fail_copies_from != 0 && n >= faults.fail_copies_from) {
        bump(&COUNTERS.failed_copies, 1);
        return RawStatus(KREPLAY_STATUS_DEVICE_ERROR as u32);
    }
    let dst_place = state.place(dst_addr);
    if !state.copy_allowed(dst_addr, bytes) || !state.copy_allowed(src_addr, bytes) {
        bump(&COUNTERS.violations, 1);
        return RawStatus(KREPLAY_STATUS_DEVICE_ERROR as u32);
    }
    drop(state);
    // SAFETY: both ranges were checked to be live simulated regions or host memory the library passed; the
    // library guarantees host ranges are valid for `bytes` and that source and destination do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), dst.cast::<u8>(), bytes) };
    bump(&COUNTERS.copies, 1);
    bump(&COUNTERS.copy_bytes, bytes);
    if matches!(dst_place, Place::Device(_)) {
        bump(&COUNTERS.copies_to_device, 1);
    }
    RawStatus(KREPLAY_STATUS_SUCCESS as u32)
}

unsafe extern "C" fn sim_pointer_info(
    _: *mut c_void,
    ptr: *const c_void,
    info: *mut kreplay_pointer_info_t,
) -> RawStatus {
    let state = state();
    if state.faults.fail_pointer_info {
        return RawStatus(KREPLAY_STATUS_DEVICE_ERROR as u32);
    }
    bump(&COUNTERS.pointer_queries, 1);
    let address = ptr as usize;
    let mut answer = kreplay_pointer_info_t::default();
    if let Some((&base, region)) = state.regions.range(..=address).next_back() {
        if region.live && address < base + region.size {
            answer = kreplay_pointer_info_t {
                r#type: RawPointerType(region.kind),
                global_flags: region.global_flags,
                owner: kreplay_agent_t { handle: region.agent },
                base: base as *mut c_void,
                size: region.size,
            };
        }
    }
    // SAFETY: the library passes a writable info struct.
    unsafe { info.write(answer) };
    RawStatus(KREPLAY_STATUS_SUCCESS as u32)
}

unsafe extern "C" fn sim_iterate(
    _: *mut c_void,
    agent: kreplay_agent_t,
    visit: kreplay_module_variable_visitor_t,
    visit_data: *mut c_void,
) -> RawStatus {
    bump(&COUNTERS.module_scans, 1);
    let variables: Vec<Variable> = state().variables.iter().filter(|v| v.agent == agent.handle).cloned().collect();
    for variable in &variables {
        {
            let mut state = state();
            state.variables_since_faults += 1;
            if state.faults.fail_module_scan_at == state.variables_since_faults {
                return RawStatus(KREPLAY_STATUS_DEVICE_ERROR as u32);
            }
        }
        let reported = kreplay_module_variable_t {
            name: variable.name.as_ptr().cast(),
            name_length: variable.name.len(),
            address: variable.address as *mut c_void,
            size: variable.size,
            is_constant: variable.is_constant,
        };
        // SAFETY: the visitor and its data come from the library for this walk; `reported` lives across the call.
        if !unsafe { visit(visit_data, &reported) } {
            break;
        }
    }
    RawStatus(KREPLAY_STATUS_SUCCESS as u32)
}

unsafe extern "C" fn sim_host_lock(_: *mut c_void, ptr: *mut c_void, bytes: usize) -> RawStatus {
    let mut state = state();
    if state.faults.refuse_host_lock {
        return RawStatus(KREPLAY_STATUS_DEVICE_ERROR as u32);
    }
    state.locked.push((ptr as usize, bytes));
    bump(&COUNTERS.host_locks, 1);
    bump(&COUNTERS.locked_bytes, bytes);
    RawStatus(KREPLAY_STATUS_SUCCESS as u32)
}

unsafe extern "C" fn sim_host_unlock(_: *mut c_void, ptr: *mut c_void, bytes: usize) -> RawStatus {
    let mut state = state();
    match state.locked.iter().position(|&range| range == (ptr as usize, bytes)) {
        Some(i) => {
            state.locked.swap_remove(i);
            bump(&COUNTERS.host_unlocks, 1);
            COUNTERS.locked_bytes.fetch_sub(bytes, Ordering::Relaxed);
            RawStatus(KREPLAY_STATUS_SUCCESS as u32)
        }
        None => {
            bump(&COUNTERS.violations, 1);
            RawStatus(KREPLAY_STATUS_DEVICE_ERROR as u32)
        }
    }
}

/// Fills `ops_out` with the simulated device's ops (all five), ready for `kreplay_configure`.
///
/// # Safety
/// `ops_out` must be NULL or valid for a write of `kreplay_device_ops_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_device_ops(ops_out: *mut kreplay_device_ops_t) -> kreplay_status_t {
    guard("kreplay_sim_device_ops", KREPLAY_STATUS_INTERNAL_ERROR, || {
        if ops_out.is_null() {
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        let ops = kreplay_device_ops_t {
            struct_size: size_of::<kreplay_device_ops_t>(),
            user_data: std::ptr::null_mut(),
            copy: Some(sim_copy),
            pointer_info: Some(sim_pointer_info),
            iterate_module_variables: Some(sim_iterate),
            host_lock: Some(sim_host_lock),
            host_unlock: Some(sim_host_unlock),
            copy_batch: None,
            device_alloc: None,
            device_free: None,
            digest: None,
            release: None,
        };
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { ops_out.write(ops) };
        KREPLAY_STATUS_SUCCESS
    })
}

fn alloc_common(
    address: Option<usize>,
    agent: kreplay_agent_t,
    size: usize,
    kind: kreplay_pointer_type_t,
    global_flags: u32,
    ptr_out: *mut *mut c_void,
) -> kreplay_status_t {
    if ptr_out.is_null() || size == 0 || size > ARENA_BYTES {
        return KREPLAY_STATUS_INVALID_ARGUMENT;
    }
    let mut state = state();
    let Some(base) = state.allocate(address, size) else {
        return if address.is_some() { KREPLAY_STATUS_INVALID_ARGUMENT } else { KREPLAY_STATUS_OUT_OF_HOST_MEMORY };
    };
    state.regions.insert(base, Region { size, agent: agent.handle, kind: kind as u32, global_flags, live: true });
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { ptr_out.write(base as *mut c_void) };
    KREPLAY_STATUS_SUCCESS
}

/// Allocates `size` bytes of simulated memory of the given kind and global flags, owned by `agent`. The
/// contents are unspecified (fresh memory reads as zero). Does not record it: the caller does, as a host's
/// allocate wrapper would.
///
/// # Safety
/// `ptr_out` must be NULL or valid for a write of a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_alloc(
    agent: kreplay_agent_t,
    size: usize,
    r#type: kreplay_pointer_type_t,
    global_flags: u32,
    ptr_out: *mut *mut c_void,
) -> kreplay_status_t {
    guard("kreplay_sim_alloc", KREPLAY_STATUS_INTERNAL_ERROR, || {
        alloc_common(None, agent, size, r#type, global_flags, ptr_out)
    })
}

/// Allocates again at `address`, which must be a region freed with `kreplay_sim_free` at least `size` bytes
/// large: the way a runtime hands a freed address to the next allocation.
///
/// # Safety
/// `ptr_out` must be NULL or valid for a write of a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_alloc_at(
    address: *mut c_void,
    agent: kreplay_agent_t,
    size: usize,
    r#type: kreplay_pointer_type_t,
    global_flags: u32,
    ptr_out: *mut *mut c_void,
) -> kreplay_status_t {
    guard("kreplay_sim_alloc_at", KREPLAY_STATUS_INTERNAL_ERROR, || {
        alloc_common(Some(address as usize), agent, size, r#type, global_flags, ptr_out)
    })
}

/// Frees a simulated region: it is filled with 0xDD and stays mapped, and from now on any copy into it is
/// refused and counted as a violation. `NOT_FOUND` for anything but a live region's base. Does not record the
/// free: the caller does that first, as a host's free wrapper would.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_sim_free(ptr: *mut c_void) -> kreplay_status_t {
    guard("kreplay_sim_free", KREPLAY_STATUS_INTERNAL_ERROR, || {
        let mut state = state();
        match state.regions.get_mut(&(ptr as usize)) {
            Some(region) if region.live => {
                region.live = false;
                // SAFETY: the region lies inside the arena mapping, which stays mapped until reset.
                unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), FREED_FILL, region.size) };
                KREPLAY_STATUS_SUCCESS
            }
            _ => KREPLAY_STATUS_NOT_FOUND,
        }
    })
}

/// Adds a module-scope variable of `size` bytes visible to `agent` (`name` is NUL-terminated; NULL for an
/// unnamed one) and returns its address. Its storage reads as zero at first and lives until `kreplay_sim_reset`.
/// A `size` of 0 registers a zero-size variable at a dummy address, to test the skip rule.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string; `address_out` NULL or valid for a write of a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_add_module_variable(
    agent: kreplay_agent_t,
    name: *const c_char,
    size: usize,
    is_constant: bool,
    address_out: *mut *mut c_void,
) -> kreplay_status_t {
    guard("kreplay_sim_add_module_variable", KREPLAY_STATUS_INTERNAL_ERROR, || {
        if address_out.is_null() || size > ARENA_BYTES {
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        let name = if name.is_null() {
            Vec::new()
        } else {
            // SAFETY: non-null and NUL-terminated by the caller's contract.
            unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes().to_vec()
        };
        let mut state = state();
        let address = if size == 0 {
            0x10
        } else {
            // Carved from the arena (but not a region): after a reset the address is dead, so a stale snapshot's
            // restore is refused instead of writing into reused memory.
            match state.allocate(None, size) {
                Some(address) => address,
                None => return KREPLAY_STATUS_OUT_OF_HOST_MEMORY,
            }
        };
        state.variables.push(Variable { agent: agent.handle, name, address, size, is_constant });
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { address_out.write(address as *mut c_void) };
        KREPLAY_STATUS_SUCCESS
    })
}

/// Arms the faults in `faults` (NULL disarms all) and restarts their counts.
///
/// # Safety
/// `faults` must be NULL or point to a readable `kreplay_sim_faults_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_set_faults(faults: *const kreplay_sim_faults_t) {
    guard("kreplay_sim_set_faults", (), || {
        // SAFETY: NULL is checked; otherwise readable by the caller's contract.
        let faults = unsafe { faults.as_ref() }.copied().unwrap_or_default();
        let mut state = state();
        state.faults = faults;
        state.copies_since_faults = 0;
        state.variables_since_faults = 0;
        host_memory::fault::fail_map_at(faults.fail_host_map_at);
    })
}

/// The counters since the last reset.
///
/// # Safety
/// `counters_out` must be NULL or valid for a write of `kreplay_sim_counters_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn kreplay_sim_counters(counters_out: *mut kreplay_sim_counters_t) -> kreplay_status_t {
    guard("kreplay_sim_counters", KREPLAY_STATUS_INTERNAL_ERROR, || {
        if counters_out.is_null() {
            return KREPLAY_STATUS_INVALID_ARGUMENT;
        }
        let load = |counter: &AtomicUsize| counter.load(Ordering::Relaxed);
        let counters = kreplay_sim_counters_t {
            copies: load(&COUNTERS.copies),
            copy_bytes: load(&COUNTERS.copy_bytes),
            copies_to_device: load(&COUNTERS.copies_to_device),
            failed_copies: load(&COUNTERS.failed_copies),
            pointer_queries: load(&COUNTERS.pointer_queries),
            module_scans: load(&COUNTERS.module_scans),
            host_locks: load(&COUNTERS.host_locks),
            host_unlocks: load(&COUNTERS.host_unlocks),
            locked_bytes: load(&COUNTERS.locked_bytes),
            violations: load(&COUNTERS.violations),
        };
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { counters_out.write(counters) };
        KREPLAY_STATUS_SUCCESS
    })
}

/// Forgets every region and module variable (their memory is released), disarms faults and zeroes the
/// counters (except `locked_bytes` and the ranges still locked, which the library must unlock itself).
/// Does not touch the library's inventory: record frees first, or turn tracking off and on.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_sim_reset() {
    guard("kreplay_sim_reset", (), || {
        let mut state = state();
        if state.arena != 0 {
            // SAFETY: the arena is our own mapping; dropping its pages zero-fills them on next touch and keeps
            // the addresses reserved.
            unsafe { libc::madvise(state.arena as *mut c_void, ARENA_BYTES, libc::MADV_DONTNEED) };
            state.next = state.arena;
        }
        state.regions.clear();
        state.variables.clear();
        state.faults = kreplay_sim_faults_t::default();
        state.copies_since_faults = 0;
        state.variables_since_faults = 0;
        host_memory::fault::fail_map_at(0);
        for counter in [
            &COUNTERS.copies,
            &COUNTERS.copy_bytes,
            &COUNTERS.copies_to_device,
            &COUNTERS.failed_copies,
            &COUNTERS.pointer_queries,
            &COUNTERS.module_scans,
            &COUNTERS.host_locks,
            &COUNTERS.host_unlocks,
            &COUNTERS.violations,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    })
}
