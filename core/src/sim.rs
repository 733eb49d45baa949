//! The simulated device: host memory standing in for device memory, every copy checked against what is live,
//! with fault injection and counters. The one fake behind the core's unit tests, the C tests, the demo, the
//! benchmarks and the fuzzer (through `kreplay-capi`'s `sim` feature). Never part of the production library:
//! it is compiled only for the core's tests and with the `sim` feature.
//!
//! # The API in one place
//!
//! [`SimDevice`] (cheap to clone: clones share one device) is built with [`SimDevice::new`] /
//! `SimDevice::default()` (version-1 ops only), [`SimDevice::with_v2`] (also offers `copy_batch`,
//! `device_alloc`/`device_free` and `digest`) or [`SimDevice::with_arena`] (a chosen address-space size).
//!
//! - Memory: [`SimDevice::alloc`], [`SimDevice::alloc_kind`], [`SimDevice::try_alloc`] (also at a freed
//!   region's address), [`SimDevice::free`], [`SimDevice::try_free`], [`SimDevice::add_variable`],
//!   [`SimDevice::add_variable_with`], [`SimDevice::new_code_object`], [`SimDevice::unload_code_object`], [`SimDevice::bytes`], [`SimDevice::write`], [`SimDevice::reset`],
//!   [`SimDevice::device_bytes_held`].
//! - Hooks: [`SimDevice::set_hook`] runs a callback at the start of every op ([`SimOp`]), outside the device's
//!   lock, so it may call back into the device (free a region, write) or into the engine.
//! - Everything else is a public field of [`State`], read and set through [`SimDevice::state`]:
//!   - which ops are offered (what the `can_*` queries answer; the ops themselves work either way):
//!     `offer_lock` (default on), `offer_copy_batch`, `offer_device`, `offer_digest`;
//!   - copies: `copies` (calls of `copy`, failed ones included), `copies_done`, `copy_bytes`,
//!     `copies_to_device`, `failed_copies`; faults `fail_copy_at` (the call whose number `copies` reaches
//!     this fails, once), `fail_copies_from` (every call from this number on fails);
//!   - batches: `batches` (calls of `copy_batch`), `batch_copies` (jobs done inside batches), `failed_batches`;
//!     faults `fail_batch_at` (once), `fail_batches_from`; a failed batch first does the jobs of its first
//!     half, as a device that fails midway would;
//!   - `sleep_in_copy_ns`: every `copy` and `copy_batch` sleeps this long before it checks and copies;
//!   - device storage: `device_allocs` (calls), `device_frees`, `device_bytes` (held now, all agents),
//!     `device_peak_bytes` (per agent: [`SimDevice::device_peak_bytes_of`]), `device_capacity` (bytes per
//!     agent, 0 = unlimited; beyond it `device_alloc` fails with `DeviceError`), fault `fail_device_alloc_at`
//!     (once);
//!   - free device memory (`device_free_bytes`, offered with `offer_free_bytes`): `free_bytes` is what each
//!     agent has free besides its storage, so the op answers `free_bytes` less the storage the agent holds
//!     now; `free_bytes_queries` (calls), fault `fail_free_bytes` (every query fails);
//!   - available host memory (`host_available_bytes`, offered with `offer_host_memory`): the op answers
//!     `host_available` as set, so a test feeds the figure each capture sees; `host_available_queries` (calls),
//!     fault `fail_host_available` (every query fails);
//!   - digests: `digests` (calls), `digest_blocks`, `digest_bytes`, `constant_digest` (every block digests
//!     the same, to prove a digest that cannot tell contents apart is never trusted for a reallocated region),
//!     `digest_seed`, fault `fail_digest_at` (once), `fail_digests_from`;
//!   - pointer queries: `queries`, fault `fail_query` (every query fails);
//!   - module scans: `scans`, `scanned_variables`, faults `fail_scan` (every scan fails at once),
//!     `fail_scan_at_variable` (the scan fails on reaching the variable whose number `scanned_variables`
//!     reaches this, once);
//!   - page-locking: `locked` (ranges locked now), `locked_bytes`, `locks`, `unlocks`, fault `refuse_lock`;
//!   - `violations`: copies, batch jobs and digests that touched freed or unknown device memory or ran past a
//!     region's end, unlocks of ranges never locked, and `device_free`s of blocks not held. A correct engine
//!     leaves it 0;
//!   - `refused_copies`: copies and batch jobs refused because they ran from one code object's module variables
//!     into another's (see [`SimDevice::new_code_object`]; the variables of one code object lie in one segment,
//!     and a copy may span them); the copy fails with `DeviceError`, and it is not a violation. A copy running
//!     from a region or a storage block into the next allocation is a violation.
//!
//! Fault numbers are absolute (compare with the counter): to fail the next copy but one, set
//! `fail_copy_at = state.copies + 2`.
//!
//! # Memory
//! Device memory is carved from one reserved address range (an `mmap` with no reserve; heap memory under
//! Miri), so tens of thousands of regions cost nothing each and an address that was never handed out, or was
//! freed, can be told from host memory: a copy touching it is refused and counted as a violation. A freed
//! region is filled with 0xDD and stays reserved until [`SimDevice::reset`]; only [`SimDevice::try_alloc`]
//! with an address hands it out again (the way a runtime reuses a freed address). Freed storage blocks of
//! `device_alloc` are handed out again to a later `device_alloc` of the same size.
#![allow(missing_docs, reason = "the counters, faults and op fields are documented together above")]

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use std::vec::Vec;

use crate::error::{Error, Result};
use crate::ops::{CopyJob, DeviceOps, Digest, DigestJob};
use crate::types::{Agent, GlobalFlags, ModuleVariable, PointerInfo, PointerType};

/// Simulated allocations start at multiples of this.
pub const ALIGN: usize = 256;
/// What a freed region is filled with.
pub const FREED_FILL: u8 = 0xDD;
/// Address space reserved by [`SimDevice::new`].
pub const DEFAULT_ARENA_BYTES: usize = if cfg!(miri) { 8 << 20 } else { 64 << 30 };
/// The address a zero-size module variable reports (never read or written).
pub const ZERO_SIZE_VARIABLE: usize = 0x10;

/// An op the engine called, as a hook sees it (before the op does anything).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SimOp {
    /// `copy`.
    Copy { dst: usize, src: usize, bytes: usize },
    /// `copy_batch` with this many jobs.
    CopyBatch { agent: Agent, jobs: usize },
    /// `pointer_info`.
    PointerInfo { ptr: usize },
    /// `iterate_module_variables`.
    ModuleScan { agent: Agent },
    /// `host_lock`.
    HostLock { ptr: usize, bytes: usize },
    /// `host_unlock`.
    HostUnlock { ptr: usize, bytes: usize },
    /// `device_alloc`.
    DeviceAlloc { agent: Agent, bytes: usize },
    /// `device_free`.
    DeviceFree { agent: Agent, ptr: usize, bytes: usize },
    /// `digest` with this many jobs.
    Digest { agent: Agent, jobs: usize, block_bytes: usize },
    /// `device_free_bytes`.
    DeviceFreeBytes { agent: Agent },
    /// `host_available_bytes`.
    HostAvailableBytes,
}

/// A callback run at the start of every op.
pub type SimHook = Box<dyn Fn(&SimOp) + Send + Sync>;
type SharedHook = Arc<dyn Fn(&SimOp) + Send + Sync>;

/// What a reserved range of the arena is.
#[derive(Clone, Debug)]
pub enum ItemKind {
    /// An allocation of the application, reported by `pointer_info`.
    Region { agent: Agent, kind: PointerType, flags: GlobalFlags },
    /// A module-scope variable's storage, in the loaded segment of code object `code_object`: a copy may run on
    /// from one variable into the next one of the same segment when they lie back to back, not into another
    /// segment's.
    Variable { code_object: u64 },
    /// Snapshot storage from `device_alloc`.
    Storage { agent: Agent },
}

/// A reserved range of the arena.
#[derive(Clone, Debug)]
pub struct Item {
    /// Bytes.
    pub size: usize,
    /// What it is.
    pub kind: ItemKind,
    /// False once freed.
    pub live: bool,
}

/// A module-scope variable, in the order the scan reports them.
#[derive(Clone, Debug)]
pub struct Variable {
    /// The agent that sees it.
    pub agent: Agent,
    /// Its name (empty for an unnamed one).
    pub name: Vec<u8>,
    /// Its address ([`ZERO_SIZE_VARIABLE`] when `size` is 0).
    pub address: usize,
    /// Bytes.
    pub size: usize,
    /// Reported as constant.
    pub is_constant: bool,
}

/// The device's state, counters and faults (see the module's documentation).
#[derive(Default)]
pub struct State {
    pub items: BTreeMap<usize, Item>,
    pub variables: Vec<Variable>,
    next: usize,

    pub offer_lock: bool,
    pub offer_copy_batch: bool,
    pub offer_device: bool,
    pub offer_digest: bool,

    pub copies: usize,
    pub copies_done: usize,
    pub copy_bytes: usize,
    pub copies_to_device: usize,
    pub failed_copies: usize,
    pub fail_copy_at: usize,
    pub fail_copies_from: usize,

    pub batches: usize,
    pub batch_copies: usize,
    pub failed_batches: usize,
    pub fail_batch_at: usize,
    pub fail_batches_from: usize,

    pub sleep_in_copy_ns: u64,

    pub device_allocs: usize,
    pub device_frees: usize,
    pub device_bytes: usize,
    pub device_peak_bytes: usize,
    pub device_capacity: usize,
    pub fail_device_alloc_at: usize,
    held: BTreeMap<u64, usize>,
    held_peak: BTreeMap<u64, usize>,

    pub offer_free_bytes: bool,
    pub free_bytes: usize,
    pub free_bytes_queries: usize,
    pub fail_free_bytes: bool,

    pub offer_host_memory: bool,
    pub host_available: usize,
    pub host_available_queries: usize,
    pub fail_host_available: bool,

    pub digests: usize,
    pub digest_blocks: usize,
    pub digest_bytes: usize,
    pub constant_digest: bool,
    pub digest_seed: u64,
    pub fail_digest_at: usize,
    pub fail_digests_from: usize,

    pub queries: usize,
    pub fail_query: bool,

    pub scans: usize,
    pub scanned_variables: usize,
    pub fail_scan: bool,
    pub fail_scan_at_variable: usize,

    pub locked: Vec<(usize, usize)>,
    pub locked_bytes: usize,
    pub locks: usize,
    pub unlocks: usize,
    pub refuse_lock: bool,

    pub violations: usize,
    pub refused_copies: usize,
    pub code_object: u64,
    /// Runs of back-to-back variables of one code object: start -> (end, code object).
    segments: BTreeMap<usize, (usize, u64)>,

    hook: Option<SharedHook>,
}

/// Where an address falls.
enum Place {
    /// Inside a live item, with this many bytes left to its end.
    Device(usize),
    /// Inside a freed item, or in the arena outside any item.
    Dead,
    /// Not simulated device memory.
    Host,
}

/// The reserved address range.
struct Arena {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the arena is plain memory owned by the device; every access is either under the state's lock or
// through pointers the engine was given (whose use the `DeviceOps` contract governs).
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    fn new(len: usize) -> Option<Arena> {
        let len = len.checked_next_multiple_of(4096)?.max(4096);
        #[cfg(miri)]
        {
            let layout = std::alloc::Layout::from_size_align(len, 4096).ok()?;
            // SAFETY: `layout` has a non-zero size.
            let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
            (!ptr.is_null()).then_some(Arena { ptr, len })
        }
        #[cfg(not(miri))]
        {
            // SAFETY: an anonymous private mapping with no address hint has no preconditions; checked below.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return None;
            }
            // Huge pages where the kernel allows them, as a GPU's memory and kreplay's host staging have: without
            // them, copies into simulated memory pay TLB misses that real device memory does not, and the
            // benchmark's device tier would look slower than host staging for no reason of kreplay's.
            // SAFETY: advice on our own mapping; failure only means small pages.
            unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
            Some(Arena { ptr: ptr.cast(), len })
        }
    }

    fn base(&self) -> usize {
        self.ptr as usize
    }

    /// A pointer to `address` with the arena's provenance.
    fn at(&self, address: usize) -> *mut u8 {
        self.ptr.wrapping_add(address - self.base())
    }

    fn contains(&self, address: usize) -> bool {
        address >= self.base() && address - self.base() < self.len
    }

    /// Gives every page back (they read as zero again) and keeps the range reserved.
    fn discard(&self) {
        #[cfg(miri)]
        // SAFETY: the arena owns `len` bytes.
        unsafe {
            std::ptr::write_bytes(self.ptr, 0, self.len)
        };
        #[cfg(not(miri))]
        // SAFETY: our own mapping; dropping its pages keeps the addresses reserved.
        unsafe {
            libc::madvise(self.ptr.cast(), self.len, libc::MADV_DONTNEED)
        };
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        #[cfg(miri)]
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe {
            std::alloc::dealloc(self.ptr, std::alloc::Layout::from_size_align_unchecked(self.len, 4096))
        };
        #[cfg(not(miri))]
        // SAFETY: mapped in `new` with this length, unmapped once.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len)
        };
    }
}

struct Shared {
    arena: Arena,
    state: Mutex<State>,
}

/// The simulated device. Clones share one device.
#[derive(Clone)]
pub struct SimDevice(Arc<Shared>);

impl Default for SimDevice {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    fn place(&self, arena: &Arena, address: usize) -> Place {
        if !arena.contains(address) {
            return Place::Host;
        }
        match self.items.range(..=address).next_back() {
            Some((&base, item)) if address - base < item.size => {
                if !item.live {
                    return Place::Dead;
                }
                Place::Device(base + item.size - address)
            }
            _ => Place::Dead,
        }
    }

    /// Bytes from `address` to the end of its variable's segment: the variables of its code object that follow
    /// back to back (variables live until a reset).
    fn segment_left(&self, address: usize) -> Option<usize> {
        let (_, &(end, _)) = self.segments.range(..=address).next_back()?;
        (address < end).then(|| end - address)
    }

    /// True when every byte of `[address, address + bytes)` lies in module variables (which live until a reset):
    /// a copy of it that is not allowed only runs from one code object's segment into another's, which a device
    /// may refuse; refused, not a violation. A copy running from a region or a storage block into anything else
    /// is a violation.
    fn all_variables(&self, arena: &Arena, address: usize, bytes: usize) -> bool {
        let mut at = address;
        let end = address.saturating_add(bytes);
        while at < end {
            match self.items.range(..=at).next_back() {
                Some((&base, item))
                    if at - base < item.size
                        && item.live
                        && arena.contains(at)
                        && matches!(item.kind, ItemKind::Variable { .. }) =>
                {
                    at = base + item.size
                }
                _ => return false,
            }
        }
        true
    }

    fn allowed(&self, arena: &Arena, address: usize, bytes: usize) -> bool {
        match self.place(arena, address) {
            Place::Host => !arena.contains(address.saturating_add(bytes.saturating_sub(1))),
            Place::Device(left) => bytes <= left || self.segment_left(address).is_some_and(|left| bytes <= left),
            Place::Dead => false,
        }
    }

    fn is_device(&self, arena: &Arena, address: usize) -> bool {
        matches!(self.place(arena, address), Place::Device(_))
    }

    /// Reserves `size` bytes at the end of what was handed out.
    fn bump(&mut self, arena: &Arena, size: usize) -> Option<usize> {
        let offset = self.next;
        let end = offset.checked_add(size.max(1))?.checked_next_multiple_of(ALIGN)?;
        if end > arena.len {
            return None;
        }
        self.next = end;
        Some(arena.base() + offset)
    }

    fn hook(&self) -> Option<SharedHook> {
        self.hook.clone()
    }

    /// Checks one copy, and does it when allowed. Under the lock, so no free can interleave.
    ///
    /// # Safety
    /// Host ranges are valid for `bytes` (the `DeviceOps::copy` contract).
    unsafe fn checked_copy(&mut self, arena: &Arena, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()> {
        if !self.allowed(arena, dst as usize, bytes) || !self.allowed(arena, src as usize, bytes) {
            let crossing =
                |address: usize| self.allowed(arena, address, bytes) || self.all_variables(arena, address, bytes);
            if crossing(dst as usize) && crossing(src as usize) {
                self.refused_copies += 1;
            } else {
                self.violations += 1;
            }
            return Err(Error::DeviceError);
        }
        let to_device = self.is_device(arena, dst as usize);
        if bytes > 0 {
            // SAFETY: device ranges were checked to lie in live items of the arena; host ranges are valid by the
            // caller's contract; the engine never passes overlapping ranges.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, bytes) };
        }
        self.copies_done += 1;
        self.copy_bytes += bytes;
        if to_device {
            self.copies_to_device += 1;
        }
        Ok(())
    }
}

/// A 128-bit digest of `bytes`: four 64-bit lanes over interleaved 8-byte words (so the host's pipelines
/// overlap them), each word mixed in with a multiply and a rotate, then the lanes folded with the block's length
/// and a full avalanche. Not cryptographic; collisions of different contents are as unlikely as for any
/// well-mixed 128-bit hash, which is all dirty tracking relies on.
pub fn digest_block(seed: u64, bytes: &[u8]) -> Digest {
    const P: [u64; 4] = [0x9E37_79B1_85EB_CA87, 0xC2B2_AE3D_27D4_EB4F, 0x1656_67B1_9E37_79F9, 0x85EB_CA77_C2B2_AE63];
    fn fmix(mut h: u64) -> u64 {
        h ^= h >> 33;
        h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        h ^= h >> 33;
        h = h.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
        h ^ (h >> 33)
    }
    fn word(bytes: &[u8]) -> u64 {
        let mut w = [0u8; 8];
        w[..bytes.len()].copy_from_slice(bytes);
        u64::from_le_bytes(w)
    }
    fn mix(lane: u64, w: u64, p: u64) -> u64 {
        (lane ^ w).wrapping_mul(p).rotate_left(31)
    }
    let mut lanes =
        [seed ^ P[0], seed.rotate_left(16) ^ P[1], seed.rotate_left(32) ^ P[2], seed.rotate_left(48) ^ P[3]];
    let mut stripes = bytes.chunks_exact(32);
    for stripe in &mut stripes {
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = mix(*lane, word(&stripe[8 * i..8 * i + 8]), P[i]);
        }
    }
    // The tail: whole and partial words go on round the lanes; the length below tells a short word from zeros.
    for (i, chunk) in stripes.remainder().chunks(8).enumerate() {
        lanes[i] = mix(lanes[i], word(chunk), P[i]);
    }
    let len = bytes.len() as u64;
    let lo = fmix(lanes[0] ^ lanes[2].rotate_left(23) ^ len);
    let hi = fmix(lanes[1] ^ lanes[3].rotate_left(41) ^ len.wrapping_mul(P[2]) ^ lo);
    Digest { lo, hi }
}

impl SimDevice {
    /// A device that offers the version-1 ops only (copy, pointer query, module scan, page-locking).
    pub fn new() -> Self {
        Self::with_arena(DEFAULT_ARENA_BYTES)
    }

    /// A device with `bytes` of address space for its memory. Panics when it cannot be reserved (tests only).
    pub fn with_arena(bytes: usize) -> Self {
        let arena = Arena::new(bytes).expect("the simulated device could not reserve its address space");
        let state = State { offer_lock: true, ..State::default() };
        SimDevice(Arc::new(Shared { arena, state: Mutex::new(state) }))
    }

    /// A device that also offers every version-2 op: `copy_batch`, `device_alloc`/`device_free`, `digest`.
    pub fn with_v2() -> Self {
        let device = Self::new();
        {
            let mut state = device.state();
            state.offer_copy_batch = true;
            state.offer_device = true;
            state.offer_digest = true;
        }
        device
    }

    /// The state, counters and faults; a poisoned lock (a test that panicked) is taken over.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn arena(&self) -> &Arena {
        &self.0.arena
    }

    /// Runs `hook` at the start of every op (outside the device's lock); `None` removes it.
    pub fn set_hook(&self, hook: Option<SimHook>) {
        self.state().hook = hook.map(Arc::from);
    }

    fn run_hook(&self, op: SimOp) {
        let hook = self.state().hook();
        if let Some(hook) = hook {
            hook(&op);
        }
    }

    /// Allocates coarse-grained device memory of `agent` filled with `fill`; returns its address. Panics when
    /// the arena is full (tests only).
    pub fn alloc(&self, agent: Agent, size: usize, fill: u8) -> usize {
        self.alloc_kind(agent, size, fill, PointerType::Device, GlobalFlags::COARSE_GRAINED)
    }

    /// As [`SimDevice::alloc`], of any kind and flags.
    pub fn alloc_kind(&self, agent: Agent, size: usize, fill: u8, kind: PointerType, flags: GlobalFlags) -> usize {
        let base = self.try_alloc(None, agent, size, kind, flags).expect("the simulated device is full");
        self.fill(base, size, fill);
        base
    }

    /// Allocates `size` bytes (not filled: fresh memory reads as zero, a reused region as [`FREED_FILL`]), at
    /// the end of the arena, or at `at`, which must be a freed region at least `size` bytes large.
    /// `InvalidArgument` for a size of 0 or larger than the arena, or a bad `at`; `OutOfHostMemory` when the
    /// arena is full.
    pub fn try_alloc(
        &self,
        at: Option<usize>,
        agent: Agent,
        size: usize,
        kind: PointerType,
        flags: GlobalFlags,
    ) -> Result<usize> {
        if size == 0 || size > self.arena().len {
            return Err(Error::InvalidArgument);
        }
        let mut state = self.state();
        let base = match at {
            Some(address) => match state.items.get(&address) {
                Some(item) if !item.live && item.size >= size && matches!(item.kind, ItemKind::Region { .. }) => {
                    address
                }
                _ => return Err(Error::InvalidArgument),
            },
            None => state.bump(self.arena(), size).ok_or(Error::OutOfHostMemory)?,
        };
        // A region reused at a smaller size keeps the rest of the old one reserved and dead.
        let old = state.items.insert(base, Item { size, kind: ItemKind::Region { agent, kind, flags }, live: true });
        if let Some(old) = old.filter(|old| old.size > size) {
            let rest = (base + size).next_multiple_of(ALIGN);
            if rest < base + old.size {
                state.items.insert(rest, Item { size: base + old.size - rest, kind: old.kind, live: false });
            }
        }
        Ok(base)
    }

    /// Frees a region (fills it with [`FREED_FILL`]); panics when `base` is not a live region (tests only).
    pub fn free(&self, base: usize) {
        assert!(self.try_free(base), "{base:#x} is not a live simulated region");
    }

    /// Frees a live region at `base`; false (and nothing done) for anything else.
    pub fn try_free(&self, base: usize) -> bool {
        let mut state = self.state();
        match state.items.get_mut(&base) {
            Some(item) if item.live && matches!(item.kind, ItemKind::Region { .. }) => {
                item.live = false;
                let size = item.size;
                // SAFETY: the item lies inside the arena, which stays reserved while the device lives.
                unsafe { std::ptr::write_bytes(self.arena().at(base), FREED_FILL, size) };
                true
            }
            _ => false,
        }
    }

    /// Starts a new code object: variables added from now on lie in its own segment, which a copy of variables
    /// of the previous one may not run into (until then, every variable is in code object 0).
    pub fn new_code_object(&self) {
        self.state().code_object += 1;
    }

    /// The code object that variables added now go into.
    pub fn code_object(&self) -> u64 {
        self.state().code_object
    }

    /// Unloads code object `code_object`: its variables leave the scan, and their storage reads as freed (filled
    /// with [`FREED_FILL`]; a copy touching it is a violation). Returns how many variables it held. Variables
    /// added later still go into the current code object (start a new one first to keep loading).
    pub fn unload_code_object(&self, code_object: u64) -> usize {
        let mut state = self.state();
        let mut unloaded = 0;
        let arena = self.arena();
        for (&address, item) in state.items.iter_mut() {
            if item.live && matches!(item.kind, ItemKind::Variable { code_object: c } if c == code_object) {
                item.live = false;
                unloaded += 1;
                // SAFETY: a variable's storage lies inside the arena, reserved for it; nothing else writes it.
                unsafe { std::ptr::write_bytes(arena.at(address), FREED_FILL, item.size) };
            }
        }
        let dead = |state: &State, address: usize| state.items.get(&address).is_some_and(|item| !item.live);
        let kept: Vec<Variable> = state.variables.iter().filter(|v| !dead(&state, v.address)).cloned().collect();
        state.variables = kept;
        state.segments.retain(|_, &mut (_, c)| c != code_object);
        unloaded
    }

    /// Adds a module-scope variable visible to `agent`, filled with `fill`; returns its address.
    pub fn add_variable(&self, agent: Agent, name: &[u8], size: usize, fill: u8) -> usize {
        let address = self.add_variable_with(agent, name, size, false).expect("the simulated device is full");
        self.fill(address, size, fill);
        address
    }

    /// Adds a module-scope variable (reading as zero at first; a size of 0 reports [`ZERO_SIZE_VARIABLE`]);
    /// its storage lives until [`SimDevice::reset`]. `InvalidArgument` for a size larger than the arena,
    /// `OutOfHostMemory` when the arena is full.
    pub fn add_variable_with(&self, agent: Agent, name: &[u8], size: usize, is_constant: bool) -> Result<usize> {
        if size > self.arena().len {
            return Err(Error::InvalidArgument);
        }
        let mut state = self.state();
        let address = if size == 0 {
            ZERO_SIZE_VARIABLE
        } else {
            let address = state.bump(self.arena(), size).ok_or(Error::OutOfHostMemory)?;
            let code_object = state.code_object;
            state.items.insert(address, Item { size, kind: ItemKind::Variable { code_object }, live: true });
            let end = address + size;
            match state.segments.range_mut(..address).next_back() {
                Some((_, segment)) if *segment == (address, code_object) => segment.0 = end,
                _ => {
                    state.segments.insert(address, (end, code_object));
                }
            }
            address
        };
        state.variables.push(Variable { agent, name: name.to_vec(), address, size, is_constant });
        Ok(address)
    }

    fn fill(&self, address: usize, size: usize, value: u8) {
        if size > 0 {
            // SAFETY: callers pass an item they just reserved inside the arena.
            unsafe { std::ptr::write_bytes(self.arena().at(address), value, size) };
        }
    }

    /// The bytes at `[address, address + size)` of the arena. Panics outside it (tests only).
    pub fn bytes(&self, address: usize, size: usize) -> Vec<u8> {
        assert!(size == 0 || (self.arena().contains(address) && self.arena().contains(address + size - 1)));
        if size == 0 {
            return Vec::new();
        }
        // SAFETY: checked to lie inside the arena, which is readable while the device lives.
        unsafe { std::slice::from_raw_parts(self.arena().at(address), size) }.to_vec()
    }

    /// Writes `bytes` at `address` of the arena, as a kernel would. Panics outside it (tests only).
    pub fn write(&self, address: usize, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        assert!(self.arena().contains(address) && self.arena().contains(address + bytes.len() - 1));
        // SAFETY: checked to lie inside the arena; the caller owns the region it writes (as a kernel would).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.arena().at(address), bytes.len()) };
    }

    /// Bytes of `device_alloc` storage `agent` holds now.
    pub fn device_bytes_held(&self, agent: Agent) -> usize {
        self.state().held.get(&agent.0).copied().unwrap_or(0)
    }

    /// The most `device_alloc` storage `agent` held at once (allocated and not yet given to `device_free`),
    /// since the device was made or reset.
    pub fn device_peak_bytes_of(&self, agent: Agent) -> usize {
        self.state().held_peak.get(&agent.0).copied().unwrap_or(0)
    }

    /// Forgets every region, variable and storage block (their pages are given back), disarms every fault,
    /// removes the hook and zeroes every counter, but keeps what is page-locked (`locked`, `locked_bytes`:
    /// the engine must unlock it itself) and which ops are offered.
    pub fn reset(&self) {
        let mut state = self.state();
        self.arena().discard();
        let kept = State {
            offer_lock: state.offer_lock,
            offer_copy_batch: state.offer_copy_batch,
            offer_device: state.offer_device,
            offer_digest: state.offer_digest,
            offer_free_bytes: state.offer_free_bytes,
            offer_host_memory: state.offer_host_memory,
            locked: std::mem::take(&mut state.locked),
            locked_bytes: state.locked_bytes,
            ..State::default()
        };
        *state = kept;
    }

    /// Sleeps for `sleep_in_copy_ns`, outside the lock.
    fn copy_delay(&self) {
        let ns = self.state().sleep_in_copy_ns;
        if ns > 0 {
            std::thread::sleep(Duration::from_nanos(ns));
        }
    }
}

impl DeviceOps for SimDevice {
    unsafe fn copy(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()> {
        self.run_hook(SimOp::Copy { dst: dst as usize, src: src as usize, bytes });
        self.copy_delay();
        let mut state = self.state();
        state.copies += 1;
        let n = state.copies;
        if n == state.fail_copy_at || (state.fail_copies_from != 0 && n >= state.fail_copies_from) {
            state.failed_copies += 1;
            return Err(Error::DeviceError);
        }
        // SAFETY: forwarded from the caller.
        unsafe { state.checked_copy(self.arena(), dst, src, bytes) }
    }

    fn pointer_info(&self, ptr: *const u8) -> Result<PointerInfo> {
        self.run_hook(SimOp::PointerInfo { ptr: ptr as usize });
        let mut state = self.state();
        if state.fail_query {
            return Err(Error::DeviceError);
        }
        state.queries += 1;
        let address = ptr as usize;
        let unknown = PointerInfo {
            kind: PointerType::Unknown,
            global_flags: GlobalFlags::empty(),
            owner: Agent(0),
            base: 0,
            size: 0,
        };
        if !self.arena().contains(address) {
            return Ok(unknown);
        }
        Ok(match state.items.range(..=address).next_back() {
            Some((&base, Item { size, kind: ItemKind::Region { agent, kind, flags }, live: true }))
                if address - base < *size =>
            {
                PointerInfo { kind: *kind, global_flags: *flags, owner: *agent, base, size: *size }
            }
            _ => unknown,
        })
    }

    fn iterate_module_variables(&self, agent: Agent, visit: &mut dyn FnMut(&ModuleVariable<'_>) -> bool) -> Result<()> {
        self.run_hook(SimOp::ModuleScan { agent });
        let variables: Vec<Variable> = {
            let mut state = self.state();
            if state.fail_scan {
                return Err(Error::DeviceError);
            }
            state.scans += 1;
            state.variables.iter().filter(|v| v.agent == agent).cloned().collect()
        };
        for variable in &variables {
            {
                let mut state = self.state();
                state.scanned_variables += 1;
                if state.scanned_variables == state.fail_scan_at_variable {
                    return Err(Error::DeviceError);
                }
            }
            let reported = ModuleVariable {
                name: Some(&variable.name),
                address: variable.address,
                size: variable.size,
                is_constant: variable.is_constant,
            };
            if !visit(&reported) {
                break;
            }
        }
        Ok(())
    }

    fn can_lock_host(&self) -> bool {
        self.state().offer_lock
    }

    fn host_lock(&self, ptr: *mut u8, bytes: usize) -> Result<()> {
        self.run_hook(SimOp::HostLock { ptr: ptr as usize, bytes });
        let mut state = self.state();
        if state.refuse_lock {
            return Err(Error::DeviceError);
        }
        state.locked.push((ptr as usize, bytes));
        state.locked_bytes += bytes;
        state.locks += 1;
        Ok(())
    }

    fn host_unlock(&self, ptr: *mut u8, bytes: usize) -> Result<()> {
        self.run_hook(SimOp::HostUnlock { ptr: ptr as usize, bytes });
        let mut state = self.state();
        match state.locked.iter().position(|&range| range == (ptr as usize, bytes)) {
            Some(i) => {
                state.locked.swap_remove(i);
                state.locked_bytes -= bytes;
                state.unlocks += 1;
                Ok(())
            }
            None => {
                state.violations += 1;
                Err(Error::DeviceError)
            }
        }
    }

    fn can_copy_batch(&self) -> bool {
        self.state().offer_copy_batch
    }

    unsafe fn copy_batch(&self, agent: Agent, copies: &[CopyJob]) -> Result<()> {
        self.run_hook(SimOp::CopyBatch { agent, jobs: copies.len() });
        self.copy_delay();
        let mut state = self.state();
        state.batches += 1;
        let n = state.batches;
        let fail = n == state.fail_batch_at || (state.fail_batches_from != 0 && n >= state.fail_batches_from);
        // A failing batch does its first half, so the engine cannot assume a failed batch changed nothing.
        let todo = if fail { &copies[..copies.len() / 2] } else { copies };
        let mut result = Ok(());
        for job in todo {
            // SAFETY: forwarded from the caller, per job.
            match unsafe { state.checked_copy(self.arena(), job.dst, job.src, job.bytes) } {
                Ok(()) => state.batch_copies += 1,
                Err(error) => result = Err(error),
            }
        }
        if fail {
            state.failed_batches += 1;
            return Err(Error::DeviceError);
        }
        result
    }

    fn can_alloc_device(&self) -> bool {
        self.state().offer_device
    }

    fn device_alloc(&self, agent: Agent, bytes: usize) -> Result<NonNull<u8>> {
        self.run_hook(SimOp::DeviceAlloc { agent, bytes });
        let mut state = self.state();
        state.device_allocs += 1;
        if bytes == 0 {
            return Err(Error::InvalidArgument);
        }
        if state.device_allocs == state.fail_device_alloc_at {
            return Err(Error::DeviceError);
        }
        let held = state.held.get(&agent.0).copied().unwrap_or(0);
        if state.device_capacity != 0 && held.saturating_add(bytes) > state.device_capacity {
            return Err(Error::DeviceError);
        }
        // Reuse a freed block of exactly this size, as a caching allocator would, so that repeated snapshots
        // do not walk through the arena.
        let reused = state
            .items
            .iter()
            .find(|(_, item)| !item.live && item.size == bytes && matches!(item.kind, ItemKind::Storage { .. }))
            .map(|(&base, _)| base);
        let base = match reused {
            Some(base) => base,
            None => state.bump(self.arena(), bytes).ok_or(Error::DeviceError)?,
        };
        state.items.insert(base, Item { size: bytes, kind: ItemKind::Storage { agent }, live: true });
        let held = *state.held.entry(agent.0).and_modify(|held| *held += bytes).or_insert(bytes);
        let peak = state.held_peak.entry(agent.0).or_insert(0);
        *peak = (*peak).max(held);
        state.device_bytes += bytes;
        state.device_peak_bytes = state.device_peak_bytes.max(state.device_bytes);
        NonNull::new(self.arena().at(base)).ok_or(Error::DeviceError)
    }

    unsafe fn device_free(&self, agent: Agent, ptr: NonNull<u8>, bytes: usize) -> Result<()> {
        self.run_hook(SimOp::DeviceFree { agent, ptr: ptr.as_ptr() as usize, bytes });
        let mut state = self.state();
        let base = ptr.as_ptr() as usize;
        match state.items.get_mut(&base) {
            Some(item)
                if item.live
                    && item.size == bytes
                    && matches!(item.kind, ItemKind::Storage { agent: owner } if owner == agent) =>
            {
                item.live = false;
                // SAFETY: the block lies inside the arena.
                unsafe { std::ptr::write_bytes(self.arena().at(base), FREED_FILL, bytes) };
                state.device_frees += 1;
                state.device_bytes -= bytes;
                if let Some(held) = state.held.get_mut(&agent.0) {
                    *held -= bytes;
                }
                Ok(())
            }
            _ => {
                state.violations += 1;
                Err(Error::InvalidArgument)
            }
        }
    }

    fn can_digest(&self) -> bool {
        self.state().offer_digest
    }

    unsafe fn digest(&self, agent: Agent, jobs: &[DigestJob], block_bytes: usize) -> Result<()> {
        self.run_hook(SimOp::Digest { agent, jobs: jobs.len(), block_bytes });
        let mut state = self.state();
        state.digests += 1;
        let n = state.digests;
        if n == state.fail_digest_at || (state.fail_digests_from != 0 && n >= state.fail_digests_from) {
            return Err(Error::DeviceError);
        }
        if block_bytes == 0 {
            return Err(Error::InvalidArgument);
        }
        for job in jobs {
            let address = job.address as usize;
            if job.bytes == 0 {
                continue;
            }
            if !self.arena().contains(address) || !state.allowed(self.arena(), address, job.bytes) {
                state.violations += 1;
                return Err(Error::DeviceError);
            }
            // SAFETY: checked to lie in a live item of the arena, which nothing writes while we hold the lock
            // (the engine's own writes go through `copy`, which takes it too).
            let bytes = unsafe { std::slice::from_raw_parts(self.arena().at(address), job.bytes) };
            for (i, block) in bytes.chunks(block_bytes).enumerate() {
                let digest = if state.constant_digest {
                    Digest { lo: state.digest_seed, hi: !state.digest_seed }
                } else {
                    digest_block(state.digest_seed, block)
                };
                // SAFETY: `digests_out` holds `bytes.div_ceil(block_bytes)` digests by the caller's contract.
                unsafe { job.digests_out.add(i).write(digest) };
            }
            state.digest_blocks += job.bytes.div_ceil(block_bytes);
            state.digest_bytes += job.bytes;
        }
        Ok(())
    }

    fn can_query_free_memory(&self) -> bool {
        self.state().offer_free_bytes
    }

    fn device_free_bytes(&self, agent: Agent) -> Result<usize> {
        self.run_hook(SimOp::DeviceFreeBytes { agent });
        let mut state = self.state();
        state.free_bytes_queries += 1;
        if state.fail_free_bytes {
            return Err(Error::DeviceError);
        }
        let held = state.held.get(&agent.0).copied().unwrap_or(0);
        Ok(state.free_bytes.saturating_sub(held))
    }

    fn can_query_host_memory(&self) -> bool {
        self.state().offer_host_memory
    }

    fn host_available_bytes(&self) -> Result<usize> {
        self.run_hook(SimOp::HostAvailableBytes);
        let mut state = self.state();
        state.host_available_queries += 1;
        if state.fail_host_available {
            return Err(Error::DeviceError);
        }
        Ok(state.host_available)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Agent = Agent(1);

    #[test]
    fn a_copy_into_freed_memory_is_refused_and_counted() {
        let device = SimDevice::new();
        let base = device.alloc(A, 64, 7);
        let mut host = [0u8; 64];
        // SAFETY: `host` is 64 writable bytes; `base` is a live 64-byte region.
        unsafe { device.copy(host.as_mut_ptr(), base as *const u8, 64) }.unwrap();
        assert_eq!(host, [7; 64]);
        device.free(base);
        // SAFETY: as above; the sim refuses the freed destination before touching it.
        assert!(unsafe { device.copy(base as *mut u8, host.as_ptr(), 64) }.is_err());
        let other = device.alloc(A, 32, 1);
        // SAFETY: the range runs past a live region's end: refused before it is touched.
        assert!(unsafe { device.copy(other as *mut u8, host.as_ptr(), 64) }.is_err());
        let state = device.state();
        assert_eq!((state.violations, state.copies, state.copies_done), (2, 3, 1));
        drop(state);
        assert_eq!(device.bytes(base, 64), [FREED_FILL; 64]);
        assert_eq!(device.pointer_info(base as *const u8).unwrap().kind, PointerType::Unknown);
        let again = device.try_alloc(Some(base), A, 32, PointerType::Device, GlobalFlags::COARSE_GRAINED).unwrap();
        assert_eq!(again, base);
        assert_eq!(device.pointer_info((base + 8) as *const u8).unwrap().size, 32);
        // The rest of the old region stays dead.
        // SAFETY: refused before it is touched.
        assert!(unsafe { device.copy((base + 32) as *mut u8, host.as_ptr(), 8) }.is_err());
    }

    #[test]
    fn only_a_copy_across_code_objects_is_refused_without_a_violation() {
        let device = SimDevice::new();
        // Back to back: two regions, then two variables of code object 0, then one of code object 1.
        let first = device.alloc(A, ALIGN, 1);
        let second = device.alloc(A, ALIGN, 2);
        assert_eq!(second, first + ALIGN);
        let v0 = device.add_variable(A, b"v0", ALIGN, 3);
        let v1 = device.add_variable(A, b"v1", ALIGN, 4);
        device.new_code_object();
        let v2 = device.add_variable(A, b"v2", ALIGN, 5);
        assert_eq!((v1, v2), (v0 + ALIGN, v0 + 2 * ALIGN));
        let mut host = vec![0u8; 2 * ALIGN];
        let dst = host.as_mut_ptr();
        // SAFETY: `dst` is 2 * ALIGN writable bytes; the device side is checked before anything is touched.
        let copy = |src: usize| unsafe { device.copy(dst, src as *const u8, 2 * ALIGN) };
        assert!(copy(v0).is_ok(), "variables of one code object may be copied as one span");
        assert!(copy(v1).is_err(), "from one code object into the next");
        let state = device.state();
        assert_eq!((state.refused_copies, state.violations), (1, 0));
        drop(state);
        assert!(copy(first).is_err(), "from a region into the next region");
        assert!(copy(second).is_err(), "from a region into a module variable");
        let state = device.state();
        assert_eq!((state.refused_copies, state.violations), (1, 2));
    }

    #[test]
    fn a_failing_batch_does_half_and_later_batches_work() {
        let device = SimDevice::with_v2();
        let bases: Vec<usize> = (0..4).map(|i| device.alloc(A, 16, i)).collect();
        let mut host = [[0u8; 16]; 4];
        let jobs: Vec<CopyJob> = bases
            .iter()
            .zip(host.iter_mut())
            .map(|(&b, h)| CopyJob { dst: h.as_mut_ptr(), src: b as *const u8, bytes: 16 })
            .collect();
        device.state().fail_batch_at = 1;
        // SAFETY: every job copies a live 16-byte region into 16 host bytes.
        assert!(unsafe { device.copy_batch(A, &jobs) }.is_err());
        assert_eq!(device.state().batch_copies, 2);
        // SAFETY: as above.
        unsafe { device.copy_batch(A, &jobs) }.unwrap();
        let state = device.state();
        assert_eq!((state.batches, state.batch_copies, state.failed_batches, state.violations), (2, 6, 1, 0));
        drop(state);
        assert_eq!(host[3], [3; 16]);
    }

    #[test]
    fn device_storage_has_a_capacity_and_faults() {
        let device = SimDevice::with_v2();
        device.state().device_capacity = 1 << 20;
        let a = device.device_alloc(A, 512 << 10).unwrap();
        assert_eq!(device.device_alloc(A, 768 << 10).err(), Some(Error::DeviceError));
        device.state().fail_device_alloc_at = 3;
        assert_eq!(device.device_alloc(A, 4096).err(), Some(Error::DeviceError));
        assert_eq!(device.device_bytes_held(A), 512 << 10);
        // SAFETY: `a` came from `device_alloc` with this size.
        unsafe { device.device_free(A, a, 512 << 10) }.unwrap();
        // SAFETY: a second free is refused and counted, not done.
        assert!(unsafe { device.device_free(A, a, 512 << 10) }.is_err());
        let b = device.device_alloc(A, 512 << 10).unwrap();
        assert_eq!(a, b, "a freed block of the same size is reused");
        let state = device.state();
        assert_eq!(
            (state.device_bytes, state.device_allocs, state.device_frees, state.violations),
            (512 << 10, 4, 1, 1)
        );
    }

    #[test]
    fn free_device_memory_is_the_set_amount_less_the_storage_held() {
        let device = SimDevice::with_v2();
        device.state().free_bytes = 1 << 20;
        let a = device.device_alloc(A, 256 << 10).unwrap();
        assert_eq!(device.device_free_bytes(A), Ok(768 << 10));
        assert_eq!(device.device_free_bytes(Agent(2)), Ok(1 << 20));
        device.state().fail_free_bytes = true;
        assert_eq!(device.device_free_bytes(A), Err(Error::DeviceError));
        // SAFETY: `a` came from `device_alloc` with this size.
        unsafe { device.device_free(A, a, 256 << 10) }.unwrap();
        device.state().fail_free_bytes = false;
        assert_eq!(device.device_free_bytes(A), Ok(1 << 20));
        assert_eq!(device.state().free_bytes_queries, 4);
    }

    #[test]
    fn digests_tell_blocks_apart_unless_made_constant() {
        let device = SimDevice::with_v2();
        let base = device.alloc(A, 3 * 4096 + 10, 0);
        device.write(base + 4096, &[1]);
        let mut out = [Digest::default(); 4];
        let job = DigestJob { address: base as *const u8, bytes: 3 * 4096 + 10, digests_out: out.as_mut_ptr() };
        // SAFETY: a live region and room for its 4 digests.
        unsafe { device.digest(A, &[job], 4096) }.unwrap();
        assert_ne!(out[0], out[1]);
        assert_eq!(out[0], out[2]);
        assert_ne!(out[0], out[3], "a short block digests differently");
        device.state().constant_digest = true;
        // SAFETY: as above.
        unsafe { device.digest(A, &[job], 4096) }.unwrap();
        assert_eq!(out[0], out[1]);
        device.state().fail_digest_at = 3;
        // SAFETY: as above.
        assert!(unsafe { device.digest(A, &[job], 4096) }.is_err());
        assert_eq!(device.state().digest_blocks, 8);
    }

    #[test]
    fn every_bit_and_every_word_position_counts() {
        let block: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let mut seen = std::collections::HashSet::new();
        assert!(seen.insert(digest_block(7, &block)));
        for position in (0..block.len()).step_by(61).chain([4095]) {
            let mut changed = block.clone();
            changed[position] ^= 1 << (position % 8);
            assert!(seen.insert(digest_block(7, &changed)), "flipping a bit at {position} went unnoticed");
        }
        let mut swapped = block.clone();
        swapped.swap(0, 8);
        swapped.swap(1, 9);
        assert!(seen.insert(digest_block(7, &swapped)), "two words swapped went unnoticed");
        assert!(seen.insert(digest_block(8, &block)), "the seed does not count");
        assert_ne!(digest_block(7, &[0; 5]), digest_block(7, &[0; 6]), "the length does not count");
    }

    #[test]
    fn a_hook_runs_inside_an_op_and_may_free() {
        let device = SimDevice::new();
        let base = device.alloc(A, 64, 1);
        let inner = device.clone();
        device.set_hook(Some(Box::new(move |op| {
            if let SimOp::Copy { dst, .. } = *op {
                inner.try_free(dst);
            }
        })));
        let host = [0u8; 64];
        // SAFETY: the hook frees the destination first, so the sim refuses the copy.
        assert!(unsafe { device.copy(base as *mut u8, host.as_ptr(), 64) }.is_err());
        assert_eq!(device.state().violations, 1);
        device.set_hook(None);
        device.reset();
        assert_eq!(device.state().violations, 0);
        assert_eq!(device.pointer_info(base as *const u8).unwrap().kind, PointerType::Unknown);
    }
}
