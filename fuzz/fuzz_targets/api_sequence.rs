//! Random sequences of C API calls on the simulated device, checked against a model after every call.
//!
//! An input is decoded into a few module variables per agent and then up to `MAX_OPS` operations: allocations
//! (tracked kinds and not), frees, reallocations at a freed address, allocations recorded twice, stray frees,
//! kernel writes, vmem maps and unmaps, staging acquires and releases (with a release through a stale copy),
//! trims, snapshots, restores and snapshot frees, each optionally under an injected fault. The model says
//! what is tracked (per-agent regions and bytes), whether a snapshot must succeed or why it must decline,
//! what a restore must write (captured bytes of every region still live with the captured generation, every
//! module variable; nothing else), what it must report, and how much idle staging an agent may hold. After
//! every input, everything is freed and trimmed: the library's host mappings must be back to where they
//! started, every page lock undone, and the simulated device must have refused no copy.
//!
//! Version 2: each input first picks a configuration of the simulated device and the policy (copy batches,
//! the device tier with a budget and a device capacity, dirty-only restores with digests and their block size,
//! a delay in every copy), and the ops can reconfigure mid-input (a new set of ops while snapshots made through
//! the old one live), arm batch, device-allocation and digest faults, toggle tracking, swap the logger (the
//! previous one must never be called again), and restore while a second thread reads the snapshot's info and
//! frees it. With any version-2 op in play the exact copy counts of version 1 no longer apply; the invariant
//! that stays is: after every restore that returns SUCCESS every writable entry (live with the captured
//! generation, or a module variable) holds exactly its bytes at snapshot time, a restore that fails leaves
//! each byte either restored or as it was, nothing else changes, and the simulated device sees no write into
//! freed memory. An input may end with finalize while calls are in flight: that runs in a forked child (finalize
//! cannot be undone in this process), which checks that no device op and no logger runs after it returned.
//!
//! Version 4: each module variable is its own code object, and an op unloads one (reported with
//! `kreplay_modules_changed`): from then on no snapshot captures it and no restore writes it (it is skipped, and
//! its memory keeps the device's poison). The configuration may turn the live host budget on with an available
//! figure fed through the `host_available_bytes` op: a capture whose host staging would take what the library
//! holds (its host mappings, measured before the call, less the agent's idle staging) above that percent of
//! available + held must decline with HOST_BUDGET, one clearly under it must not. Windows may be open-ended
//! (passes 0), reported as such in their outcome.
//!
//! The fuzzer runs many inputs in one process and the library is a process-wide singleton: every input starts
//! from a reset (tracking off and on, simulated device reset, pools trimmed) and uses two agents, new ones for
//! every input in a cycle of 200, so that the library's per-agent tables are recycled.
#![no_main]

use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use arbitrary::{Arbitrary, Unstructured};
use kreplay::sim::{
    kreplay_sim_add_module_variable, kreplay_sim_alloc, kreplay_sim_alloc_at, kreplay_sim_counters,
    kreplay_sim_counters_t, kreplay_sim_device_bytes, kreplay_sim_device_ops, kreplay_sim_faults_t, kreplay_sim_free,
    kreplay_sim_new_code_object, kreplay_sim_options_t, kreplay_sim_reset, kreplay_sim_set_faults,
    kreplay_sim_set_options, kreplay_sim_unload_code_object,
};
use kreplay::*;
use libfuzzer_sys::fuzz_target;

use kreplay_status_t::*;

const MAX_OPS: usize = 64;
/// The first of this input's two agents (see `agents`).
static AGENT_BASE: AtomicU64 = AtomicU64::new(0xF0);
/// Distinct agent pairs the inputs cycle through: far more than the library's per-agent tables hold at once.
const AGENT_PAIRS: u64 = 100;

/// This input's two agents.
fn agents() -> [kreplay_agent_t; 2] {
    let base = AGENT_BASE.load(Ordering::Relaxed);
    [kreplay_agent_t { handle: base }, kreplay_agent_t { handle: base + 1 }]
}
/// Each agent's virtual range: `SLICES` slices of `SLICE` bytes, mapped and unmapped in slice units.
const SLICES: usize = 32;
const SLICE: usize = 64;
const STAGING_SLOTS: usize = 6;
/// The largest slab chunk (64 KiB): releasing one tiny buffer can make that much idle at once.
const CHUNK_BYTES: usize = 64 << 10;
const POISON: u8 = 0xDD;

// ---- Logging -------------------------------------------------------------------------------------------

static ERRORS: AtomicUsize = AtomicUsize::new(0);
static WARNINGS: AtomicUsize = AtomicUsize::new(0);
/// Every message delivered, to any logger.
static MESSAGES: AtomicUsize = AtomicUsize::new(0);
/// Loggers are installed with increasing ids as `user_data`; ids up to this one were replaced and
/// `kreplay_set_logger` returned, so they must never be called again.
static RETIRED_LOGGER: AtomicUsize = AtomicUsize::new(0);
static NEXT_LOGGER: AtomicUsize = AtomicUsize::new(1);

type Logger = unsafe extern "C" fn(*mut c_void, kreplay_log_level_t, *const c_char, usize);

/// Installs a new counting logger (alternating between two functions) and retires the previous one.
fn swap_logger() {
    let id = NEXT_LOGGER.fetch_add(1, Ordering::Relaxed);
    let logger: Logger = if id.is_multiple_of(2) { count_messages_too } else { count_messages };
    kreplay_set_logger(Some(logger), id as *mut c_void, RawLogLevel(1));
    RETIRED_LOGGER.store(id - 1, Ordering::Relaxed);
}

unsafe extern "C" fn count_messages_too(
    data: *mut c_void,
    level: kreplay_log_level_t,
    message: *const c_char,
    length: usize,
) {
    // SAFETY: forwarded unchanged.
    unsafe { count_messages(data, level, message, length) }
}

unsafe extern "C" fn count_messages(
    data: *mut c_void,
    level: kreplay_log_level_t,
    message: *const c_char,
    length: usize,
) {
    assert!(data as usize > RETIRED_LOGGER.load(Ordering::Relaxed), "a replaced logger was called");
    MESSAGES.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the library passes a NUL-terminated message of `length` bytes, valid for the call.
    let text = unsafe { CStr::from_ptr(message) };
    assert_eq!(text.count_bytes(), length, "the message length does not match its NUL");
    match level {
        kreplay_log_level_t::KREPLAY_LOG_ERROR => ERRORS.fetch_add(1, Ordering::Relaxed),
        kreplay_log_level_t::KREPLAY_LOG_WARNING => WARNINGS.fetch_add(1, Ordering::Relaxed),
        _ => 0,
    };
}

// ---- What the run exercised (printed now and then, so a short run shows it reached the interesting paths) --

#[derive(Default)]
struct Stats {
    inputs: AtomicUsize,
    ops: AtomicUsize,
    snapshots: AtomicUsize,
    declines: [AtomicUsize; 9],
    restores: AtomicUsize,
    partial_restores: AtomicUsize,
    skipped: AtomicUsize,
    acquires: AtomicUsize,
    races: AtomicUsize,
    v2_inputs: AtomicUsize,
    finalizes: AtomicUsize,
    device_snapshots: AtomicUsize,
    dirty_restores: AtomicUsize,
    windows: AtomicUsize,
    window_declines: AtomicUsize,
    fenced_copies: AtomicUsize,
    hints: AtomicUsize,
    partial_digests: AtomicUsize,
    write_set_misses: AtomicUsize,
}

static STATS: Stats = Stats {
    inputs: AtomicUsize::new(0),
    ops: AtomicUsize::new(0),
    snapshots: AtomicUsize::new(0),
    declines: [const { AtomicUsize::new(0) }; 9],
    restores: AtomicUsize::new(0),
    partial_restores: AtomicUsize::new(0),
    skipped: AtomicUsize::new(0),
    acquires: AtomicUsize::new(0),
    races: AtomicUsize::new(0),
    v2_inputs: AtomicUsize::new(0),
    finalizes: AtomicUsize::new(0),
    device_snapshots: AtomicUsize::new(0),
    dirty_restores: AtomicUsize::new(0),
    windows: AtomicUsize::new(0),
    window_declines: AtomicUsize::new(0),
    fenced_copies: AtomicUsize::new(0),
    hints: AtomicUsize::new(0),
    partial_digests: AtomicUsize::new(0),
    write_set_misses: AtomicUsize::new(0),
};

fn bump(counter: &AtomicUsize, by: usize) {
    counter.fetch_add(by, Ordering::Relaxed);
}

fn print_stats() {
    let load = |c: &AtomicUsize| c.load(Ordering::Relaxed);
    let declines: Vec<usize> = STATS.declines.iter().map(load).collect();
    eprintln!(
        "kreplay-fuzz: {} inputs, {} ops, {} snapshots, declines by reason {:?}, {} restores ({} partial, {} ranges \
         skipped), {} staging acquires, {} racing restores, {} inputs with version-2 ops, {} finalizes, {} snapshots on the device, {} restores that found clean bytes, {} windows ({} declined), {} fenced copies, {} write hints, {} restores over a learned write set, {} write-set misses",
        load(&STATS.inputs),
        load(&STATS.ops),
        load(&STATS.snapshots),
        declines,
        load(&STATS.restores),
        load(&STATS.partial_restores),
        load(&STATS.skipped),
        load(&STATS.acquires),
        load(&STATS.races),
        load(&STATS.v2_inputs),
        load(&STATS.finalizes),
        load(&STATS.device_snapshots),
        load(&STATS.dirty_restores),
        load(&STATS.windows),
        load(&STATS.window_declines),
        load(&STATS.fenced_copies),
        load(&STATS.hints),
        load(&STATS.partial_digests),
        load(&STATS.write_set_misses)
    );
}

fn warnings() -> usize {
    WARNINGS.load(Ordering::Relaxed)
}

fn errors() -> usize {
    ERRORS.load(Ordering::Relaxed)
}

// ---- Input -----------------------------------------------------------------------------------------------

/// A fault armed for one call. Positions are small (1 + raw % 8, or % 4 for the scan) so that they land
/// inside the few copies and variables an input has.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Fault {
    None,
    CopyAt(u8),
    CopiesFrom(u8),
    ScanAt(u8),
    HostMap,
    RefuseLock,
    /// The k-th `copy_batch` fails (after doing half of it); the library redoes it copy by copy.
    BatchAt(u8),
    BatchesFrom(u8),
    /// The k-th `device_alloc` fails: the snapshot spills to host staging.
    DeviceAllocAt(u8),
    /// The k-th `digest` fails: the rest of the call copies whole ranges.
    DigestAt(u8),
    DigestsFrom(u8),
}

/// How an input sets up the simulated device's version-2 ops and the policy.
#[derive(Arbitrary, Debug, Clone, Copy, Default)]
struct Config {
    copy_batch: bool,
    device: bool,
    digest: bool,
    dirty_only: bool,
    /// Device budget per agent: 0, or 4 KiB times this.
    device_budget: u8,
    /// Device capacity per agent: unlimited (0), or 4 KiB times this.
    device_capacity: u8,
    /// Digest block: 4, 8 or 64 KiB.
    block: u8,
    cache_module_scan: bool,
    /// Every copy sleeps a little, to widen the windows of the racing ops.
    slow_copies: bool,
    /// Version 4: `host_budget_percent` is 0 (off), 25, 50 or 100 (`host_budget % 5`, 0 twice).
    host_budget: u8,
    /// Version 4: the host memory `host_available_bytes` reports, in KiB (a few footprints' worth, so that
    /// captures land on both sides of the budget).
    host_available_kib: u8,
}

impl Config {
    fn options(self) -> kreplay_sim_options_t {
        kreplay_sim_options_t {
            copy_batch: self.copy_batch,
            device_alloc: self.device,
            digest: self.digest,
            device_capacity: self.device_capacity as usize * 4096,
            sleep_in_copy_ns: if self.slow_copies { 2000 } else { 0 },
            constant_digest: false,
            host_available_bytes: true,
            host_available: self.host_available(),
            ..Default::default()
        }
    }

    fn host_budget_percent(self) -> u32 {
        [0, 0, 25, 50, 100][self.host_budget as usize % 5]
    }

    fn host_available(self) -> usize {
        self.host_available_kib as usize * 1024
    }

    /// Version 4: learn each snapshot's write set (with `digest` and `dirty_only`). Read from the block's high
    /// bit, not a field of its own, so that the committed corpus decodes into the same operations as before.
    fn learn_write_set(self) -> bool {
        self.block >= 128
    }

    /// Whether the version-1 model's exact copy counts hold.
    fn is_v1(self) -> bool {
        let v2 = self.copy_batch || (self.device && self.device_budget != 0) || (self.digest && self.dirty_only);
        !v2
    }

    fn policy(self, pin: bool, budget: usize) -> kreplay_policy_t {
        kreplay_policy_t {
            struct_size: size_of::<kreplay_policy_t>(),
            pin_staging: pin,
            max_snapshot_bytes: budget,
            device_budget_bytes: self.device_budget as usize * 4096,
            dirty_only: self.dirty_only,
            digest_block_bytes: [4096, 8192, 65536][self.block as usize % 3],
            cache_module_scan: self.cache_module_scan,
            host_budget_percent: self.host_budget_percent(),
            learn_write_set: self.learn_write_set(),
            ..Default::default()
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// A new allocation; `kind` picks tracked device memory (mostly) or one of the kinds never tracked.
    Alloc {
        agent: u8,
        size: u16,
        kind: u8,
        query: u8,
    },
    /// record_free, then the real free.
    Free {
        pick: u8,
    },
    /// A freed address handed to the next allocation (possibly of the other agent, possibly smaller).
    Realloc {
        pick: u8,
        agent: u8,
        shrink: u16,
        query: u8,
    },
    /// The host recorded an allocation again without recording its free.
    RecordAgain {
        pick: u8,
    },
    /// record_free of an address that is not an allocation's base: a freed one, or one inside a live region.
    StrayFree {
        pick: u8,
        interior: bool,
    },
    /// A kernel writes somewhere live.
    Write {
        pick: u8,
        seed: u8,
    },
    Map {
        agent: u8,
        start: u8,
        len: u8,
    },
    /// A mapping whose owner could not be determined: every agent is declined until unmaps cover it.
    MapUnknownOwner {
        agent: u8,
        start: u8,
        len: u8,
    },
    Unmap {
        agent: u8,
        start: u8,
        len: u8,
    },
    Acquire {
        slot: u8,
        agent: u8,
        size: u32,
        failing_map: bool,
    },
    Release {
        slot: u8,
    },
    /// A copy of a buffer released earlier is released again, whoever holds that storage now.
    ReleaseStale {
        pick: u8,
    },
    Trim {
        agent: u8,
    },
    Snap {
        agent: u8,
        fault: Fault,
    },
    /// Version 4, from `pick`'s high bits (so that the committed corpus decodes as before): bit 7 makes it a
    /// full check (`KREPLAY_RESTORE_FULL_CHECK`), bit 6 first hints a write into one of the snapshot's entries.
    Restore {
        pick: u8,
        fault: Fault,
    },
    FreeSnapshot {
        pick: u8,
    },
    Policy {
        pin: bool,
        budget: u16,
    },
    /// A new set of ops and policy while snapshots made through the old one live.
    Reconfigure {
        config: Config,
    },
    /// Tracking off and on: everything tracked is forgotten, and every snapshot's tracked ranges are skipped.
    ToggleTracking,
    /// A new logger; the previous one must never be called again.
    SwapLogger,
    /// A restore while a second thread reads the snapshot's info and, maybe, frees it.
    RaceRestore {
        pick: u8,
        free: bool,
    },
    /// At the end of the input, finalize while calls are in flight (in a forked child); one in 16, since each
    /// costs a fork.
    Finalize {
        gate: u8,
    },
    /// Version 3: a replay window on an agent (declined when one is open there, or copies are in flight).
    WindowOpen {
        agent: u8,
        passes: u8,
    },
    /// Closes the agent's window; `stale` also closes a handle closed before (refused).
    WindowClose {
        agent: u8,
        stale: bool,
    },
    /// An async copy touching one agent or both (`mask` 1, 2 or 3) begins; this thread's own copies never wait.
    CopyBegin {
        mask: u8,
    },
    /// An async copy in flight ends; `twice` ends its token again (ignored, logged).
    CopyEnd {
        pick: u8,
        twice: bool,
    },
    /// Version 4: a loaded module variable's code object is unloaded, and the library told.
    Unload {
        pick: u8,
    },
}

/// Version 3: what the model knows of an agent's open window.
struct WindowModel {
    handle: *mut kreplay_window_t,
    passes: u32,
    /// The dispatches it was opened over (0: one).
    dispatches: u32,
    /// The window's snapshot: `Some(true)` when it succeeded.
    snapshot: Option<bool>,
    /// Restores attempted while it was open (those that succeed count in `passes_run`).
    restores: u32,
}

/// A window has been opened in this process: copies are counted from now on (before, their token is 0).
static FENCE_ARMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

// ---- Model ---------------------------------------------------------------------------------------------

/// A simulated allocation made during this input (freed ones stay: their poison must stay intact).
struct SimRegion {
    address: usize,
    /// Bytes reserved at the first allocation; a reallocation at the address may use fewer.
    reserved: usize,
    size: usize,
    agent: usize,
    live: bool,
    /// Device, coarse-grained, not kernarg, not executable: what the library tracks.
    snapshottable: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tracked {
    size: usize,
    agent: usize,
    generation: u64,
}

#[derive(Clone, Copy, Debug)]
struct Mapping {
    base: usize,
    size: usize,
    agent: usize,
    generation: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Allocation(u64),
    Mapping(u64),
    Variable,
}

struct Entry {
    address: usize,
    source: Source,
    bytes: Vec<u8>,
}

struct Snapshot {
    handle: *mut kreplay_snapshot_t,
    agent: usize,
    entries: Vec<Entry>,
    /// What its staging block may hold once freed.
    staging_bound: usize,
}

struct Buffer {
    raw: kreplay_staging_buffer_t,
    token: u8,
}

#[derive(Default)]
struct Model {
    regions: Vec<SimRegion>,
    tracked: std::collections::HashMap<usize, Tracked>,
    /// Allocations whose pointer query failed: unknown owner, so every agent is declined while any is here.
    lost: Vec<usize>,
    /// Mappings of unknown owner, as (base, size) still mapped: the same, until unmaps cover them.
    lost_mappings: Vec<(usize, usize)>,
    mappings: Vec<Mapping>,
    areas: [usize; 2],
    variables: Vec<(usize, usize, usize)>,
    /// Version 4: each variable's code object (by address), and the addresses of those unloaded.
    code_objects: std::collections::HashMap<usize, usize>,
    unloaded: std::collections::HashSet<usize>,
    snapshots: Vec<Snapshot>,
    buffers: Vec<Option<Buffer>>,
    /// Copies of released buffers.
    stale: Vec<kreplay_staging_buffer_t>,
    /// Idle staging an agent may hold: what was given back to its pool since it was last emptied.
    idle_bound: [usize; 2],
    next_generation: u64,
    next_token: u8,
    config: Config,
    /// No version-2 op has been in play: the exact version-1 expectations hold.
    v1: bool,
    /// The largest device budget set during this input.
    max_device_budget: usize,
    /// Dirty-only restores (digest and `dirty_only`) have been in effect during this input.
    dirty_seen: bool,
    finalize: bool,
    /// Version 3: each agent's open window, the copies in flight (token, agents), handles closed already.
    windows: [Option<WindowModel>; 2],
    copies: Vec<(u64, [bool; 2])>,
    closed_windows: Vec<*mut kreplay_window_t>,
}

/// One allocation in 16 has its pointer query fail: often enough to reach the lost-allocation paths, rarely
/// enough that most snapshots are not declined for it.
fn failing_query(raw: u8) -> bool {
    raw.is_multiple_of(16)
}

fn agent_index(raw: u8) -> usize {
    raw as usize % 2
}

fn sim_counters() -> kreplay_sim_counters_t {
    let mut counters = kreplay_sim_counters_t::default();
    // SAFETY: a valid, writable struct.
    assert_eq!(unsafe { kreplay_sim_counters(&mut counters) }, KREPLAY_STATUS_SUCCESS);
    counters
}

fn host_memory() -> kreplay_host_memory_stats_t {
    let mut stats = kreplay_host_memory_stats_t::default();
    // SAFETY: a valid, writable struct.
    assert_eq!(unsafe { kreplay_host_memory_stats(&mut stats) }, KREPLAY_STATUS_SUCCESS);
    stats
}

fn arm(faults: kreplay_sim_faults_t) {
    // SAFETY: a valid struct, read during the call.
    unsafe { kreplay_sim_set_faults(&faults) };
}

fn disarm() {
    // SAFETY: NULL disarms.
    unsafe { kreplay_sim_set_faults(std::ptr::null()) };
}

/// Reads `len` bytes of simulated memory (live, freed or variable: all of it stays mapped during an input).
fn read(address: usize, len: usize) -> Vec<u8> {
    // SAFETY: the address lies in the simulated device's arena, which stays mapped, or in a variable's
    // storage, which lives until the next reset; nothing writes it concurrently.
    unsafe { std::slice::from_raw_parts(address as *const u8, len) }.to_vec()
}

fn write(address: usize, bytes: &[u8]) {
    // SAFETY: as in `read`; the model only writes live regions, its own virtual ranges and variables.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), address as *mut u8, bytes.len()) };
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seed.wrapping_mul(0x9E37_79B9).wrapping_add(i as u64 * 0x3B) >> 3) as u8).collect()
}

/// Where the library's bookkeeping could leave a snapshot's staging: best-fit reuse takes up to twice the
/// footprint, a new block gets 1/8 headroom rounded to huge pages.
fn staging_bound(total: usize) -> usize {
    (2 * total).max(total + total / 8 + (2 << 20)) + 4096
}

impl Model {
    fn generation(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }

    /// Every byte the fuzzer's device memory consists of, in one image: allocations (also freed), virtual
    /// ranges, module variables.
    fn ranges(&self) -> Vec<(usize, usize)> {
        let mut ranges: Vec<(usize, usize)> = self.regions.iter().map(|r| (r.address, r.reserved)).collect();
        ranges.extend(self.areas.iter().map(|&a| (a, SLICES * SLICE)));
        ranges.extend(self.variables.iter().map(|&(a, s, _)| (a, s)));
        ranges
    }

    fn image(&self) -> Vec<Vec<u8>> {
        self.ranges().iter().map(|&(a, s)| read(a, s)).collect()
    }

    fn check_image(&self, expected: &[Vec<u8>], what: &str) {
        for ((address, size), bytes) in self.ranges().into_iter().zip(expected) {
            assert!(read(address, size) == *bytes, "{what}: memory at {address:#x} ({size} bytes) changed");
        }
    }

    fn check_inventory(&self) {
        for (index, agent) in agents().iter().enumerate() {
            let mut stats = kreplay_inventory_stats_t::default();
            // SAFETY: a valid, writable struct.
            assert_eq!(unsafe { kreplay_inventory_stats(*agent, &mut stats) }, KREPLAY_STATUS_SUCCESS);
            let tracked = self.tracked.values().filter(|t| t.agent == index);
            let mapped = self.mappings.iter().filter(|m| m.agent == index);
            let regions = tracked.clone().count() + mapped.clone().count();
            let bytes = tracked.map(|t| t.size).sum::<usize>() + mapped.map(|m| m.size).sum::<usize>();
            assert_eq!((stats.regions, stats.bytes), (regions, bytes), "inventory of agent {index}");
            assert_eq!(stats.overflowed, self.lost.len() + self.lost_mappings.len(), "lost ranges of agent {index}");
        }
    }

    fn check_idle(&self) {
        for (index, agent) in agents().iter().enumerate() {
            let retained = kreplay_retained_staging_bytes(*agent);
            assert!(
                retained <= self.idle_bound[index],
                "agent {index} holds {retained} idle bytes, more than the {} given back since its last trim",
                self.idle_bound[index]
            );
        }
    }

    fn released(&mut self, agent: usize, capacity: usize) {
        self.idle_bound[agent] += if capacity <= 2048 { CHUNK_BYTES } else { capacity };
    }

    /// What `record_alloc` must do, applied to the model.
    fn record_alloc(&mut self, index: usize, failing_query: bool) {
        let (address, size, agent, snapshottable) = {
            let r = &self.regions[index];
            (r.address, r.size, r.agent, r.snapshottable)
        };
        let executable = !snapshottable && address % 3 == 0;
        let flags = if executable { KREPLAY_ALLOC_FLAG_EXECUTABLE } else { 0 };
        if failing_query {
            arm(kreplay_sim_faults_t { fail_pointer_info: true, ..Default::default() });
        }
        let before = warnings();
        let status = kreplay_record_alloc(address as *mut c_void, size, flags);
        disarm();
        if executable {
            // Filtered before any query, so a failing one does not matter.
            assert_eq!(status, KREPLAY_STATUS_SUCCESS);
        } else if failing_query {
            assert_eq!(status, KREPLAY_STATUS_DEVICE_ERROR);
            assert!(warnings() > before, "a failed pointer query was not logged");
            self.lost.push(address);
        } else {
            assert_eq!(status, KREPLAY_STATUS_SUCCESS);
            if snapshottable {
                let generation = self.generation();
                self.tracked.insert(address, Tracked { size, agent, generation });
                // A successful record supersedes a failed attempt at the same address.
                self.lost.retain(|&lost| lost != address);
            }
        }
    }

    /// What `record_free` must do: the tracked allocation goes first, else a lost one, else NOT_FOUND.
    fn record_free(&mut self, address: usize) {
        let status = kreplay_record_free(address as *mut c_void);
        if self.tracked.remove(&address).is_some() {
            assert_eq!(status, KREPLAY_STATUS_SUCCESS);
        } else if let Some(position) = self.lost.iter().position(|&lost| lost == address) {
            assert_eq!(status, KREPLAY_STATUS_SUCCESS);
            self.lost.swap_remove(position);
        } else {
            assert_eq!(status, KREPLAY_STATUS_NOT_FOUND, "record_free of an untracked {address:#x}");
        }
    }

    /// The inventory's unmap, mirrored: covered mappings go, partly covered ones are trimmed or split.
    fn unmap(&mut self, base: usize, size: usize) -> usize {
        let end = base + size;
        let mut touched = 0;
        let mut kept = Vec::new();
        for mapping in self.mappings.drain(..) {
            let mapping_end = mapping.base + mapping.size;
            if mapping_end <= base || mapping.base >= end {
                kept.push(mapping);
                continue;
            }
            touched += 1;
            if mapping.base < base {
                kept.push(Mapping { size: base - mapping.base, ..mapping });
            }
            if mapping_end > end {
                kept.push(Mapping { base: end, size: mapping_end - end, ..mapping });
            }
        }
        self.mappings = kept;
        // Lost mappings: covered ones go, a covered head or tail is trimmed, a hole in the middle keeps them whole.
        let mut lost_kept = Vec::new();
        for (lost_base, lost_size) in self.lost_mappings.drain(..) {
            let lost_end = lost_base + lost_size;
            if lost_end <= base || lost_base >= end {
                lost_kept.push((lost_base, lost_size));
                continue;
            }
            touched += 1;
            match (lost_base < base, lost_end > end) {
                (false, false) => {}
                (true, false) => lost_kept.push((lost_base, base - lost_base)),
                (false, true) => lost_kept.push((end, lost_end - end)),
                (true, true) => lost_kept.push((lost_base, lost_size)),
            }
        }
        self.lost_mappings = lost_kept;
        touched
    }

    fn live_snapshot_entries(&self, agent: usize) -> usize {
        self.tracked.values().filter(|t| t.agent == agent).count()
            + self.mappings.iter().filter(|m| m.agent == agent).count()
            + self.variables.iter().filter(|v| v.2 == agent && !self.unloaded.contains(&v.0)).count()
    }

    /// Whether a restore must write `entry` back: module variables while their code object is loaded, tracked
    /// ranges only while the same generation is live at the address with at least the captured size.
    fn writable(&self, entry: &Entry) -> bool {
        match entry.source {
            Source::Variable => !self.unloaded.contains(&entry.address),
            Source::Allocation(generation) => self
                .tracked
                .get(&entry.address)
                .is_some_and(|t| t.generation == generation && t.size >= entry.bytes.len()),
            Source::Mapping(generation) => self
                .mappings
                .iter()
                .find(|m| m.base == entry.address)
                .is_some_and(|m| m.generation == generation && m.size >= entry.bytes.len()),
        }
    }

    /// Version 4: whether the live host budget declines a capture of `agent` whose host staging needs
    /// `total_low..=total_high` bytes (all of it when no device tier can take a part): `Some(true)` certainly,
    /// `Some(false)` possibly, `None` not. What the library holds is its host mappings now, less the agent's idle
    /// staging, which the capture takes over or gives back.
    fn host_budget_decline(&self, agent: usize, total_low: usize, total_high: usize) -> Option<bool> {
        let percent = self.config.host_budget_percent();
        if percent == 0 || total_high == 0 {
            return None;
        }
        let held = host_memory().mapped_bytes;
        let reusable = kreplay_retained_staging_bytes(agents()[agent]).min(held);
        let limit = ((self.config.host_available() + held) as u128 * u128::from(percent) / 100) as usize;
        let others = held - reusable;
        let device_tier = self.config.device && self.config.device_budget != 0;
        if !device_tier && total_low > 0 && others + total_low > limit {
            Some(true)
        } else if others + total_high > limit {
            Some(false)
        } else {
            None
        }
    }

    fn snap(&mut self, agent: usize, fault: Fault, pin: bool, budget: usize) {
        let variables: Vec<(usize, usize)> = self
            .variables
            .iter()
            .filter(|v| v.2 == agent && !self.unloaded.contains(&v.0))
            .map(|&(a, s, _)| (a, s))
            .collect();
        let mut entries: Vec<(usize, usize, Source)> = Vec::new();
        for (&address, t) in self.tracked.iter().filter(|(_, t)| t.agent == agent) {
            entries.push((address, t.size, Source::Allocation(t.generation)));
        }
        for m in self.mappings.iter().filter(|m| m.agent == agent) {
            entries.push((m.base, m.size, Source::Mapping(m.generation)));
        }
        entries.extend(variables.iter().map(|&(a, s)| (a, s, Source::Variable)));
        // The budget is checked against the captured bytes themselves; their staging, 64-byte aligned, is at
        // most `rounded`. (The bound was `rounded - 63`, which holds for one entry only: two module variables of
        // a few bytes each, under a budget of 16, were expected to decline.)
        let rounded: usize = entries.iter().map(|e| e.1.next_multiple_of(64)).sum();
        let (total_low, total_high) = (entries.iter().map(|e| e.1).sum::<usize>(), rounded);

        // What must happen, in the order capture checks it.
        enum Expect {
            Decline(kreplay_decline_reason_t),
            Succeed,
            Either(kreplay_decline_reason_t),
        }
        use kreplay_decline_reason_t::*;
        let n = entries.len();
        // With the module cache an earlier complete scan may be reused: then no scan runs and none fails, and
        // the capture goes on to its next checks; if a scan does run, it fails as armed.
        let scan_may_be_cached = self.config.cache_module_scan;
        let scan_may_fail = matches!(fault, Fault::ScanAt(k) if scan_position(k) <= variables.len());
        // The live host budget is checked after the size and before staging and copies: certainly over it is a
        // decline in that place; possibly over it (`Some(false)`), HOST_BUDGET is accepted besides what the later
        // steps would do.
        let host_budget = self.host_budget_decline(agent, total_low, total_high);
        let expect = if !self.lost.is_empty() || !self.lost_mappings.is_empty() {
            Expect::Decline(KREPLAY_DECLINE_INVENTORY_OVERFLOW)
        } else if !scan_may_be_cached && matches!(fault, Fault::ScanAt(k) if scan_position(k) <= variables.len()) {
            Expect::Decline(KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE)
        } else if budget != 0 && total_low > budget {
            Expect::Decline(KREPLAY_DECLINE_HOST_BUDGET)
        } else if budget != 0 && total_high > budget {
            Expect::Either(KREPLAY_DECLINE_HOST_BUDGET)
        } else if host_budget == Some(true) {
            Expect::Decline(KREPLAY_DECLINE_HOST_BUDGET)
        } else if matches!(fault, Fault::HostMap) && total_high > 0 {
            // Mapping is needed unless a retained block fits; the pool's contents are not modelled.
            Expect::Either(KREPLAY_DECLINE_STAGING_MEMORY)
        } else if !self.v1 && matches!(fault, Fault::CopyAt(_) | Fault::CopiesFrom(_)) {
            // Batches, digests and the device tier change how many copies a capture makes, and which.
            Expect::Either(KREPLAY_DECLINE_COPY_FAILED)
        } else if matches!(fault, Fault::CopyAt(k) | Fault::CopiesFrom(k) if copy_position(k) <= n) {
            Expect::Decline(KREPLAY_DECLINE_COPY_FAILED)
        } else {
            Expect::Succeed
        };

        let image = self.image();
        let counters = sim_counters();
        let before_warnings = warnings();
        arm(faults_for(fault));
        let mut handle: *mut kreplay_snapshot_t = std::ptr::NonNull::dangling().as_ptr();
        let mut reason = KREPLAY_DECLINE_NONE;
        // SAFETY: both outputs are valid for writes.
        let status = unsafe { kreplay_snap(agents()[agent], &mut handle, &mut reason) };
        disarm();
        self.check_image(&image, "snapshot");
        let after = sim_counters();
        if self.v1 {
            assert_eq!(after.copies_to_device, counters.copies_to_device, "a snapshot wrote to the device");
        }
        if matches!(fault, Fault::RefuseLock) {
            assert_eq!(after.host_locks, counters.host_locks);
        }
        // Capture ends by trimming the agent's idle staging: with dirty-only restores the storage that still holds
        // the previous snapshot is taken over by this capture, or given back (on a decline too).
        assert_eq!(kreplay_retained_staging_bytes(agents()[agent]), 0, "idle staging left after a snapshot");
        self.idle_bound[agent] = 0;

        let declined = |expected: kreplay_decline_reason_t| {
            bump(&STATS.declines[expected as usize], 1);
            assert_eq!(
                status,
                KREPLAY_STATUS_DECLINED,
                "expected a decline ({expected:?}); fault {fault:?}, {n} entries ({} variables), {total_low}..={total_high} \
                 bytes, budget {budget}, {} lost",
                variables.len(),
                self.lost.len()
            );
            assert_eq!(reason, expected);
            assert!(handle.is_null());
            assert!(warnings() > before_warnings, "a decline was not logged");
        };
        if scan_may_be_cached
            && scan_may_fail
            && self.lost.is_empty()
            && self.lost_mappings.is_empty()
            && reason == KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE
        {
            return declined(KREPLAY_DECLINE_MODULE_SCAN_INCOMPLETE);
        }
        if host_budget == Some(false) && reason == KREPLAY_DECLINE_HOST_BUDGET {
            return declined(KREPLAY_DECLINE_HOST_BUDGET);
        }
        match expect {
            Expect::Decline(expected) => return declined(expected),
            Expect::Either(expected) if status != KREPLAY_STATUS_SUCCESS => return declined(expected),
            _ => assert_eq!(status, KREPLAY_STATUS_SUCCESS, "declined: {reason:?}"),
        }
        assert_eq!(reason, KREPLAY_DECLINE_NONE);
        assert!(!handle.is_null());
        bump(&STATS.snapshots, 1);
        let mut info = kreplay_snapshot_info_t::default();
        // SAFETY: a live handle and a writable struct.
        assert_eq!(unsafe { kreplay_snapshot_info(handle, &mut info) }, KREPLAY_STATUS_SUCCESS);
        assert_eq!(info.agent, agents()[agent]);
        assert_eq!(info.regions, n - variables.len());
        assert_eq!(info.module_variables, variables.len());
        assert_eq!(info.bytes, entries.iter().map(|e| e.1).sum::<usize>());
        let device_budget = self.config.device_budget as usize * 4096;
        assert!(info.device_bytes <= info.bytes, "more bytes on the device than in the snapshot");
        bump(&STATS.device_snapshots, usize::from(info.device_bytes > 0));
        if device_budget == 0 || !self.config.device {
            assert_eq!(info.device_bytes, 0, "device storage without a device budget");
        }
        if self.v1 && pin && !matches!(fault, Fault::RefuseLock) && total_high > 0 {
            assert!(after.locked_bytes > 0, "pinned staging was not locked");
        }
        let entries = entries
            .into_iter()
            .map(|(address, size, source)| Entry { address, source, bytes: read(address, size) })
            .collect();
        self.snapshots.push(Snapshot { handle, agent, entries, staging_bound: staging_bound(total_high) });
    }

    fn restore(&mut self, pick: usize, fault: Fault, full_check: bool) {
        let snapshot = &self.snapshots[pick];
        let writable: Vec<usize> =
            (0..snapshot.entries.len()).filter(|&i| self.writable(&snapshot.entries[i])).collect();
        let before = self.image();
        let before_errors = errors();
        // A restore after an unload lists the loaded variables again; a scan failing there (every variable
        // counted as failed, none written) is c-tests/unit/module_liveness.c's, so no scan fault is armed here.
        let fault = if matches!(fault, Fault::ScanAt(_)) { Fault::None } else { fault };
        arm(faults_for(fault));
        let (status, report, partial) = if full_check || pick % 2 == 0 {
            restore_ex(snapshot.handle, full_check)
        } else {
            let mut report = kreplay_restore_report_t { restored: 7, skipped: 7, failed: 7, bytes: 7, clean_bytes: 7 };
            // SAFETY: a live handle and a writable report.
            let status = unsafe { kreplay_restore(snapshot.handle, &mut report) };
            // Without the versioned report, whether it was partial is not known: only a learning policy can
            // make it so.
            (status, report, self.config.learn_write_set())
        };
        disarm();
        assert!(!(full_check && partial), "a full check digested only the write set");
        self.check_restore(pick, &writable, &before, status, &report, fault, before_errors, partial);
    }

    /// A write hint for snapshot `pick` inside its entry `entry`.
    fn hint(&mut self, pick: usize, entry: usize, offset: usize, bytes: usize) {
        let snapshot = &self.snapshots[pick];
        if snapshot.entries.is_empty() {
            return;
        }
        let entry = &snapshot.entries[entry % snapshot.entries.len()];
        let len = entry.bytes.len().max(1);
        let hint = kreplay_write_hint_t { address: (entry.address + offset % len) as *const c_void, bytes };
        let mut added = usize::MAX;
        // SAFETY: a live handle, one readable hint and a writable count.
        let status = unsafe { kreplay_snapshot_hint_writes(snapshot.handle, &hint, 1, &mut added) };
        assert_eq!(status, KREPLAY_STATUS_SUCCESS, "a hint inside a snapshot's entry was refused");
        assert_ne!(added, usize::MAX, "the count of blocks added was not written");
        bump(&STATS.hints, 1);
    }

    /// What a restore of snapshot `pick` must have done, given what was writable and the image before it.
    #[allow(clippy::too_many_arguments)]
    fn check_restore(
        &self,
        pick: usize,
        writable: &[usize],
        before: &[Vec<u8>],
        status: kreplay_status_t,
        report: &kreplay_restore_report_t,
        fault: Fault,
        before_errors: usize,
        partial: bool,
    ) {
        let snapshot = &self.snapshots[pick];
        let w = writable.len();
        bump(&STATS.restores, 1);
        bump(&STATS.skipped, snapshot.entries.len() - w);
        bump(&STATS.dirty_restores, usize::from(report.clean_bytes > 0));
        assert_eq!(report.skipped, snapshot.entries.len() - w);
        let expected_failed = if self.v1 {
            let failed = match fault {
                Fault::CopyAt(k) if copy_position(k) <= w => 1,
                Fault::CopiesFrom(k) if copy_position(k) <= w => w - copy_position(k) + 1,
                _ => 0,
            };
            assert_eq!(report.failed, failed);
            failed
        } else {
            if !matches!(fault, Fault::CopyAt(_) | Fault::CopiesFrom(_)) {
                assert_eq!(report.failed, 0, "a restore failed under {fault:?}, which only changes how it copies");
            }
            report.failed
        };
        assert_eq!(report.restored, w - expected_failed);
        bump(&STATS.partial_restores, usize::from(expected_failed > 0));
        if expected_failed == 0 {
            assert_eq!(status, KREPLAY_STATUS_SUCCESS);
        } else {
            assert_eq!(status, KREPLAY_STATUS_PARTIAL_RESTORE);
            assert!(errors() > before_errors, "a failed restore copy was not logged");
        }

        // Every writable entry holds its captured bytes, except the ones whose copy failed, which hold what
        // they held before (byte by byte: a dirty-only restore may have written some blocks of them);
        // everything else is as it was.
        let mut expected_image = before.to_vec();
        let ranges = self.ranges();
        let locate = |address: usize| {
            ranges.iter().position(|&(a, s)| address >= a && address < a + s).expect("an entry outside the model")
        };
        let mut not_written = 0;
        let mut written_bytes = 0;
        for &i in writable {
            let entry = &snapshot.entries[i];
            let r = locate(entry.address);
            let offset = entry.address - ranges[r].0;
            let now = read(entry.address, entry.bytes.len());
            let was = &before[r][offset..offset + entry.bytes.len()];
            if now == entry.bytes {
                written_bytes += entry.bytes.len();
            } else {
                if self.v1 {
                    assert_eq!(now, was, "a restore wrote the wrong bytes");
                } else {
                    let wrong = (0..now.len()).find(|&b| now[b] != entry.bytes[b] && now[b] != was[b]);
                    assert_eq!(wrong, None, "a restore wrote bytes that are neither captured nor previous");
                }
                not_written += 1;
            }
            expected_image[r][offset..offset + entry.bytes.len()].copy_from_slice(&now);
        }
        // A partial restore (a learned write set) writes only the blocks of the set: what a pass wrote elsewhere
        // stays, until a full check restores it.
        assert!(
            partial || not_written <= expected_failed,
            "{not_written} ranges were not written back, {expected_failed} failed"
        );
        if expected_failed == 0 && self.v1 {
            assert_eq!(report.bytes, written_bytes);
        }
        self.check_image(&expected_image, "restore");
    }

    /// A restore while a second thread reads the snapshot's info and maybe frees it.
    fn race_restore(&mut self, pick: usize, free: bool) {
        let snapshot = &self.snapshots[pick];
        let handle = snapshot.handle as usize;
        let expected_regions = snapshot.entries.iter().filter(|e| e.source != Source::Variable).count();
        let writable: Vec<usize> =
            (0..snapshot.entries.len()).filter(|&i| self.writable(&snapshot.entries[i])).collect();
        let before = self.image();
        let before_errors = errors();
        let barrier = std::sync::Barrier::new(2);
        let mut report = kreplay_restore_report_t::default();
        let mut partial = false;
        let status = std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                barrier.wait();
                for _ in 0..3 {
                    let mut info = kreplay_snapshot_info_t::default();
                    // SAFETY: a handle that is live or freed by this very thread below; the library checks it.
                    let status = unsafe { kreplay_snapshot_info(handle as *mut kreplay_snapshot_t, &mut info) };
                    assert_eq!(status, KREPLAY_STATUS_SUCCESS, "info of a live snapshot during a restore");
                    assert_eq!(info.regions, expected_regions);
                    std::thread::yield_now();
                }
                if free {
                    kreplay_snapshot_free(handle as *mut kreplay_snapshot_t);
                }
            });
            barrier.wait();
            // A live handle (a free racing with it takes effect when the restore ends).
            let (status, plain, was_partial) = restore_ex(handle as *mut kreplay_snapshot_t, false);
            (report, partial) = (plain, was_partial);
            other.join().expect("the racing thread failed");
            status
        });
        bump(&STATS.races, 1);
        if status == KREPLAY_STATUS_INVALID_ARGUMENT {
            // The free came first: nothing may have been written.
            assert!(free, "a restore of a live snapshot was refused");
            self.check_image(&before, "refused restore");
        } else {
            self.check_restore(pick, &writable, &before, status, &report, Fault::None, before_errors, partial);
        }
        if free {
            let snapshot = self.snapshots.swap_remove(pick);
            self.idle_bound[snapshot.agent] += snapshot.staging_bound;
            // The handle is gone: info and free of it are refused, and nothing crashes.
            let mut info = kreplay_snapshot_info_t::default();
            // SAFETY: a freed handle; the library must refuse it without touching it.
            let status = unsafe { kreplay_snapshot_info(snapshot.handle, &mut info) };
            assert_eq!(status, KREPLAY_STATUS_INVALID_ARGUMENT, "info of a freed snapshot");
        }
    }
}

/// `kreplay_restore_ex` of `handle`: its status, the report's version-1 and -2 fields, and whether it was
/// partial. The versioned report is checked for what it must say whatever the restore did.
fn restore_ex(handle: *mut kreplay_snapshot_t, full_check: bool) -> (kreplay_status_t, kreplay_restore_report_t, bool) {
    let options = kreplay_restore_options_t {
        struct_size: size_of::<kreplay_restore_options_t>(),
        flags: if full_check { KREPLAY_RESTORE_FULL_CHECK } else { 0 },
    };
    let mut report = kreplay_restore_report_ex_t {
        struct_size: size_of::<kreplay_restore_report_ex_t>(),
        restored: 7,
        ..Default::default()
    };
    // SAFETY: a handle (live, or freed by a racing thread: the library checks it), options and a report.
    let status = unsafe { kreplay_restore_ex(handle, &options, &mut report) };
    assert_eq!(report.struct_size, size_of::<kreplay_restore_report_ex_t>());
    assert!(report.write_set_misses == 0 || report.write_set_miss_pass >= 2, "a miss before any partial restore");
    assert!(report.write_set_misses <= report.write_set_blocks, "more misses than blocks in the set");
    bump(&STATS.write_set_misses, report.write_set_misses);
    bump(&STATS.partial_digests, usize::from(report.partial));
    let plain = kreplay_restore_report_t {
        restored: report.restored,
        skipped: report.skipped,
        failed: report.failed,
        bytes: report.bytes,
        clean_bytes: report.clean_bytes,
    };
    (status, plain, report.partial)
}

fn copy_position(raw: u8) -> usize {
    1 + raw as usize % 8
}

fn scan_position(raw: u8) -> usize {
    1 + raw as usize % 4
}

fn faults_for(fault: Fault) -> kreplay_sim_faults_t {
    let mut faults = kreplay_sim_faults_t::default();
    match fault {
        Fault::None => {}
        Fault::CopyAt(k) => faults.fail_copy_at = copy_position(k),
        Fault::CopiesFrom(k) => faults.fail_copies_from = copy_position(k),
        Fault::ScanAt(k) => faults.fail_module_scan_at = scan_position(k),
        Fault::HostMap => faults.fail_host_map_at = 1,
        Fault::RefuseLock => faults.refuse_host_lock = true,
        Fault::BatchAt(k) => faults.fail_copy_batch_at = 1 + k as usize % 4,
        Fault::BatchesFrom(k) => faults.fail_copy_batches_from = 1 + k as usize % 4,
        Fault::DeviceAllocAt(k) => faults.fail_device_alloc_at = 1 + k as usize % 4,
        Fault::DigestAt(k) => faults.fail_digest_at = 1 + k as usize % 4,
        Fault::DigestsFrom(k) => faults.fail_digests_from = 1 + k as usize % 4,
    }
    faults
}

// ---- One input -------------------------------------------------------------------------------------------

/// The library's host mappings once both pools are empty: where every input must leave them.
static BASELINE: OnceLock<kreplay_host_memory_stats_t> = OnceLock::new();

fn init() -> kreplay_host_memory_stats_t {
    *BASELINE.get_or_init(|| {
        let mut ops = std::mem::MaybeUninit::<kreplay_device_ops_t>::uninit();
        // SAFETY: writable; initialised by the call on success.
        assert_eq!(unsafe { kreplay_sim_device_ops(ops.as_mut_ptr()) }, KREPLAY_STATUS_SUCCESS);
        // SAFETY: initialised just above.
        let ops = unsafe { ops.assume_init() };
        // SAFETY: a valid ops struct.
        assert_eq!(unsafe { kreplay_configure(&ops) }, KREPLAY_STATUS_SUCCESS);
        swap_logger();
        for agent in agents() {
            kreplay_staging_trim(agent);
        }
        host_memory()
    })
}

fn reset(config: Config) {
    kreplay_tracking_enable(false);
    kreplay_tracking_enable(true);
    kreplay_sim_reset();
    disarm();
    configure(config, false, 0);
}

/// A new set of the simulated device's ops with `config`'s version-2 ops, and `config`'s policy.
fn configure(config: Config, pin: bool, budget: usize) {
    let options = config.options();
    // SAFETY: a valid struct, read during the call.
    unsafe { kreplay_sim_set_options(&options) };
    let mut ops = std::mem::MaybeUninit::<kreplay_device_ops_t>::uninit();
    // SAFETY: writable; initialised by the call on success.
    assert_eq!(unsafe { kreplay_sim_device_ops(ops.as_mut_ptr()) }, KREPLAY_STATUS_SUCCESS);
    // SAFETY: initialised just above.
    let ops = unsafe { ops.assume_init() };
    // SAFETY: a valid ops struct.
    assert_eq!(unsafe { kreplay_configure(&ops) }, KREPLAY_STATUS_SUCCESS);
    let policy = config.policy(pin, budget);
    // SAFETY: a valid policy.
    assert_eq!(unsafe { kreplay_set_policy(&policy) }, KREPLAY_STATUS_SUCCESS);
}

fn sim_alloc(agent: usize, size: usize, kind: u8) -> (usize, bool) {
    let (pointer_type, flags, snapshottable) = match kind % 10 {
        7 => (kreplay_pointer_type_t::KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_FINE_GRAINED, false),
        8 => (
            kreplay_pointer_type_t::KREPLAY_POINTER_DEVICE,
            KREPLAY_GLOBAL_FLAG_COARSE_GRAINED | KREPLAY_GLOBAL_FLAG_KERNARG,
            false,
        ),
        9 => (kreplay_pointer_type_t::KREPLAY_POINTER_LOCKED, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, false),
        _ => (kreplay_pointer_type_t::KREPLAY_POINTER_DEVICE, KREPLAY_GLOBAL_FLAG_COARSE_GRAINED, true),
    };
    let mut ptr = std::ptr::null_mut();
    // SAFETY: a writable output.
    let status = unsafe { kreplay_sim_alloc(agents()[agent], size, pointer_type, flags, &mut ptr) };
    assert_eq!(status, KREPLAY_STATUS_SUCCESS);
    (ptr as usize, snapshottable)
}

fn run(data: &[u8], baseline: &kreplay_host_memory_stats_t) {
    let mut u = Unstructured::new(data);
    let config: Config = u.arbitrary().unwrap_or_default();
    // KREPLAY_FUZZ_DEBUG=1 prints the configuration and every op, to read a reproducer.
    let debug = std::env::var_os("KREPLAY_FUZZ_DEBUG").is_some();
    if debug {
        eprintln!("config: {config:?}");
    }
    reset(config);
    let mut model = Model {
        buffers: (0..STAGING_SLOTS).map(|_| None).collect(),
        config,
        v1: config.is_v1(),
        max_device_budget: config.device_budget as usize * 4096,
        dirty_seen: config.digest && config.dirty_only,
        ..Model::default()
    };
    bump(&STATS.v2_inputs, usize::from(!model.v1));
    let mut pin = false;
    let mut budget = 0usize;

    for agent in 0..2 {
        let (area, _) = sim_alloc(agent, SLICES * SLICE, 0);
        write(area, &pattern(0xA7EA + agent as u64, SLICES * SLICE));
        model.areas[agent] = area;
        for v in 0..u.int_in_range(0..=2u8).unwrap_or(0) {
            // Never a multiple of the simulated device's 256-byte placement, so no two variables lie back to back:
            // the model counts one copy per variable, and spans of adjacent variables (one copy for several, split
            // again when it fails) are core/src/snapshot/v2_tests.rs's.
            let size = u.int_in_range(1..=600usize).unwrap_or(1);
            let size = if size % 256 == 0 { size - 1 } else { size };
            let name = format!("variable_{agent}_{v}\0");
            let code_object = kreplay_sim_new_code_object();
            let mut address = std::ptr::null_mut();
            // SAFETY: a NUL-terminated name and a writable output.
            let status = unsafe {
                kreplay_sim_add_module_variable(agents()[agent], name.as_ptr().cast(), size, v == 1, &mut address)
            };
            assert_eq!(status, KREPLAY_STATUS_SUCCESS);
            write(address as usize, &pattern(address as u64, size));
            model.variables.push((address as usize, size, agent));
            model.code_objects.insert(address as usize, code_object);
        }
    }
    // The module variables were "loaded" just now (and the previous input's are gone): as a host does on every
    // code-object load, tell the library, so that no cached scan of an earlier input is used.
    kreplay_modules_changed();

    for _ in 0..MAX_OPS {
        if u.is_empty() {
            break;
        }
        let Ok(op) = u.arbitrary::<Op>() else { break };
        if debug {
            eprintln!("op: {op:?}");
        }
        bump(&STATS.ops, 1);
        apply(&mut model, op, &mut pin, &mut budget);
        model.check_inventory();
        model.check_idle();
        for agent in agents() {
            let held = kreplay_sim_device_bytes(agent);
            assert!(held <= model.max_device_budget, "an agent holds {held} bytes of device storage, over its budget");
        }
    }
    finish(&mut model, baseline);
}

fn apply(model: &mut Model, op: Op, pin: &mut bool, budget: &mut usize) {
    match op {
        Op::Alloc { agent, size, kind, query } => {
            let agent = agent_index(agent);
            let size = 1 + size as usize % 8192;
            let (address, snapshottable) = sim_alloc(agent, size, kind);
            write(address, &pattern(address as u64 ^ size as u64, size));
            model.regions.push(SimRegion { address, reserved: size, size, agent, live: true, snapshottable });
            model.record_alloc(model.regions.len() - 1, failing_query(query));
        }
        Op::Free { pick } => {
            let live: Vec<usize> = (0..model.regions.len()).filter(|&i| model.regions[i].live).collect();
            if let Some(&index) = live.get(pick as usize % live.len().max(1)) {
                let address = model.regions[index].address;
                model.record_free(address);
                assert_eq!(kreplay_sim_free(address as *mut c_void), KREPLAY_STATUS_SUCCESS);
                model.regions[index].live = false;
            }
        }
        Op::Realloc { pick, agent, shrink, query } => {
            let dead: Vec<usize> = (0..model.regions.len()).filter(|&i| !model.regions[i].live).collect();
            if let Some(&index) = dead.get(pick as usize % dead.len().max(1)) {
                let agent = agent_index(agent);
                let region = &mut model.regions[index];
                // The simulated device reuses a freed region for at most what its last allocation had.
                let size = region.size - shrink as usize % region.size;
                assert!(read(region.address, region.reserved).iter().all(|&b| b == POISON), "freed memory was written");
                let mut ptr = std::ptr::null_mut();
                let status = unsafe {
                    // SAFETY: a freed simulated region at least `size` bytes large, and a writable output.
                    kreplay_sim_alloc_at(
                        region.address as *mut c_void,
                        agents()[agent],
                        size,
                        kreplay_pointer_type_t::KREPLAY_POINTER_DEVICE,
                        KREPLAY_GLOBAL_FLAG_COARSE_GRAINED,
                        &mut ptr,
                    )
                };
                assert_eq!(status, KREPLAY_STATUS_SUCCESS);
                assert_eq!(ptr as usize, region.address);
                *region = SimRegion { size, agent, live: true, snapshottable: true, ..*region };
                write(region.address, &pattern(region.address as u64 + size as u64 * 31, size));
                model.record_alloc(index, failing_query(query));
            }
        }
        Op::RecordAgain { pick } => {
            let live: Vec<usize> = (0..model.regions.len()).filter(|&i| model.regions[i].live).collect();
            if let Some(&index) = live.get(pick as usize % live.len().max(1)) {
                model.record_alloc(index, false);
            }
        }
        Op::StrayFree { pick, interior } => {
            if model.regions.is_empty() {
                return;
            }
            let region = &model.regions[pick as usize % model.regions.len()];
            if interior && region.live && region.size > 1 {
                let address = region.address + 1;
                assert_eq!(kreplay_record_free(address as *mut c_void), KREPLAY_STATUS_NOT_FOUND);
            } else if !region.live {
                let address = region.address;
                model.record_free(address);
            }
        }
        Op::Write { pick, seed } => {
            let mut targets: Vec<(usize, usize)> =
                model.regions.iter().filter(|r| r.live).map(|r| (r.address, r.size)).collect();
            targets.extend(model.areas.iter().map(|&a| (a, SLICES * SLICE)));
            targets.extend(model.variables.iter().map(|&(a, s, _)| (a, s)));
            let (address, size) = targets[pick as usize % targets.len()];
            write(address, &pattern(seed as u64 * 7919 + address as u64, size));
        }
        Op::Map { agent, start, len } => {
            let agent = agent_index(agent);
            let start = start as usize % SLICES;
            let len = 1 + len as usize % (SLICES - start);
            let (base, size) = (model.areas[agent] + start * SLICE, len * SLICE);
            let status = kreplay_record_vmem_map(base as *mut c_void, size, agents()[agent]);
            assert_eq!(status, KREPLAY_STATUS_SUCCESS);
            model.unmap(base, size);
            let generation = model.generation();
            model.mappings.push(Mapping { base, size, agent, generation });
        }
        // Rarer than a plain map (one in four), since it declines every snapshot until it is unmapped.
        Op::MapUnknownOwner { agent, start, len } if (start ^ len) % 4 != 0 => {
            apply(model, Op::Map { agent, start, len }, pin, budget);
        }
        Op::MapUnknownOwner { agent, start, len } => {
            let agent = agent_index(agent);
            let start = start as usize % SLICES;
            let len = 1 + len as usize % (SLICES - start);
            let (base, size) = (model.areas[agent] + start * SLICE, len * SLICE);
            let before = warnings();
            let status = kreplay_record_vmem_map_unknown_owner(base as *mut c_void, size);
            assert_eq!(status, KREPLAY_STATUS_SUCCESS);
            assert!(warnings() > before, "a mapping of unknown owner was not logged");
            model.unmap(base, size);
            model.lost_mappings.push((base, size));
        }
        Op::Unmap { agent, start, len } => {
            let agent = agent_index(agent);
            let start = start as usize % SLICES;
            let len = 1 + len as usize % (SLICES - start);
            let (base, size) = (model.areas[agent] + start * SLICE, len * SLICE);
            let status = kreplay_record_vmem_unmap(base as *mut c_void, size);
            let touched = model.unmap(base, size);
            assert_eq!(status, if touched > 0 { KREPLAY_STATUS_SUCCESS } else { KREPLAY_STATUS_NOT_FOUND });
        }
        Op::Acquire { slot, agent, size, failing_map } => {
            let slot = slot as usize % STAGING_SLOTS;
            let agent = agent_index(agent);
            let size = match size % 8 {
                0 => 0,
                1..=4 => 1 + (size >> 3) as usize % 2048,
                _ => 2049 + (size >> 3) as usize % 200_000,
            };
            let mut raw = match &model.buffers[slot] {
                Some(buffer) => {
                    check_token(buffer);
                    buffer.raw
                }
                None => kreplay_staging_buffer_t {
                    data: std::ptr::null_mut(),
                    size: 0,
                    capacity: 0,
                    agent: kreplay_agent_t { handle: 0 },
                    loan: 0,
                },
            };
            let held = raw;
            if failing_map {
                arm(kreplay_sim_faults_t { fail_host_map_at: 1, ..Default::default() });
            }
            let maps = host_memory().maps;
            // SAFETY: a zeroed buffer or one this library wrote.
            let status = unsafe { kreplay_staging_acquire(&mut raw, agents()[agent], size) };
            disarm();
            if size == 0 {
                assert_eq!(status, KREPLAY_STATUS_INVALID_ARGUMENT);
                assert_eq!((raw.data, raw.size, raw.capacity), (held.data, held.size, held.capacity));
                return;
            }
            // The held storage went back to its pool first.
            if !held.data.is_null() {
                let owner = agents().iter().position(|a| *a == held.agent).expect("a buffer of an unknown agent");
                model.released(owner, held.capacity);
            }
            model.buffers[slot] = None;
            if failing_map && status == KREPLAY_STATUS_OUT_OF_HOST_MEMORY {
                assert!(raw.data.is_null() && raw.size == 0 && raw.capacity == 0, "a failed acquire left storage");
                assert_eq!(host_memory().maps, maps);
                return;
            }
            assert_eq!(status, KREPLAY_STATUS_SUCCESS);
            bump(&STATS.acquires, 1);
            assert!(!raw.data.is_null() && raw.size == size && raw.capacity >= size && raw.agent == agents()[agent]);
            if size > 2048 {
                // Best fit: never more than twice the request, plus page rounding.
                assert!(raw.capacity <= (2 * size).max(size.next_multiple_of(4096)) + (2 << 20));
            }
            model.next_token = model.next_token.wrapping_add(1);
            let buffer = Buffer { raw, token: model.next_token };
            // SAFETY: `capacity` bytes of storage lent to us.
            unsafe { std::ptr::write_bytes(raw.data.cast::<u8>(), buffer.token, raw.size) };
            model.buffers[slot] = Some(buffer);
        }
        Op::Release { slot } => {
            let slot = slot as usize % STAGING_SLOTS;
            let Some(buffer) = model.buffers[slot].take() else {
                // Releasing an empty buffer does nothing, and says nothing.
                let mut empty = kreplay_staging_buffer_t {
                    data: std::ptr::null_mut(),
                    size: 0,
                    capacity: 0,
                    agent: agents()[0],
                    loan: 0,
                };
                let (w, e) = (warnings(), errors());
                // SAFETY: a valid, empty buffer.
                unsafe { kreplay_staging_release(&mut empty) };
                assert_eq!((warnings(), errors()), (w, e));
                return;
            };
            check_token(&buffer);
            let mut raw = buffer.raw;
            let stale = raw;
            // SAFETY: a buffer this library wrote.
            unsafe { kreplay_staging_release(&mut raw) };
            assert!(raw.data.is_null() && raw.size == 0 && raw.capacity == 0);
            let owner = agents().iter().position(|a| *a == stale.agent).expect("a buffer of an unknown agent");
            model.released(owner, stale.capacity);
            if model.stale.len() < 8 {
                model.stale.push(stale);
            }
        }
        Op::ReleaseStale { pick } => {
            if model.stale.is_empty() {
                return;
            }
            // Its storage is idle in the pool, lent to a new owner (a buffer or a snapshot), or unmapped by a
            // trim: in every case the release is refused and logged, and nothing changes. The tokens of the
            // buffers held and the next restores prove that no new owner lost its storage.
            let stale = model.stale[pick as usize % model.stale.len()];
            let retained = kreplay_retained_staging_bytes(stale.agent);
            let maps = host_memory();
            let before = errors();
            let mut copy = stale;
            // SAFETY: a struct this library wrote; the library must not touch the storage it names.
            unsafe { kreplay_staging_release(&mut copy) };
            assert!(errors() > before, "a release of a released buffer was not logged");
            assert_eq!(
                (copy.data, copy.size, copy.capacity, copy.loan),
                (stale.data, stale.size, stale.capacity, stale.loan)
            );
            assert_eq!(kreplay_retained_staging_bytes(stale.agent), retained);
            let now = host_memory();
            assert_eq!((now.maps, now.unmaps, now.mapped_bytes), (maps.maps, maps.unmaps, maps.mapped_bytes));
            for buffer in model.buffers.iter().flatten() {
                check_token(buffer);
            }
        }
        Op::Trim { agent } => {
            let agent = agent_index(agent);
            kreplay_staging_trim(agents()[agent]);
            assert_eq!(kreplay_retained_staging_bytes(agents()[agent]), 0);
            model.idle_bound[agent] = 0;
        }
        Op::Snap { agent, fault } => {
            let agent = agent_index(agent);
            // The handle registry holds 1024; stay well below it.
            if model.snapshots.len() < 16 && model.live_snapshot_entries(agent) < 512 {
                let before = model.snapshots.len();
                model.snap(agent, fault, *pin, *budget);
                let succeeded = model.snapshots.len() > before;
                if let Some(window) = model.windows[agent].as_mut() {
                    window.snapshot.get_or_insert(succeeded);
                }
            }
        }
        Op::Restore { pick: raw, fault } => {
            if !model.snapshots.is_empty() {
                let pick = raw as usize % model.snapshots.len();
                if raw & 0x40 != 0 {
                    // Bytes 0 (the whole region) for odd picks, else 1..=16 from the pick.
                    let bytes = if raw & 1 != 0 { 0 } else { usize::from(raw & 0xF) + 1 };
                    model.hint(pick, raw as usize, usize::from(raw) * 97, bytes);
                }
                if let Some(window) = model.windows[model.snapshots[pick].agent].as_mut() {
                    window.restores += 1;
                }
                model.restore(pick, fault, raw & 0x80 != 0);
            }
        }
        Op::WindowOpen { agent, passes } => window_open(model, agent_index(agent), u32::from(passes % 8)),
        Op::Unload { pick } => {
            let loaded: Vec<usize> =
                model.variables.iter().map(|v| v.0).filter(|a| !model.unloaded.contains(a)).collect();
            if !loaded.is_empty() {
                let address = loaded[pick as usize % loaded.len()];
                assert_eq!(kreplay_sim_unload_code_object(model.code_objects[&address]), 1);
                kreplay_modules_changed();
                model.unloaded.insert(address);
            }
        }
        Op::WindowClose { agent, stale } => window_close(model, agent_index(agent), stale),
        Op::CopyBegin { mask } => copy_begin(model, [mask % 3 != 1, mask % 3 != 0]),
        Op::CopyEnd { pick, twice } => {
            if !model.copies.is_empty() {
                let (token, _) = model.copies.swap_remove(pick as usize % model.copies.len());
                kreplay_copy_end(token);
                if twice && token != 0 {
                    let before = warnings();
                    kreplay_copy_end(token);
                    assert!(warnings() > before, "a token ended twice was not logged");
                }
            }
        }
        Op::FreeSnapshot { pick } => {
            if !model.snapshots.is_empty() {
                let snapshot = model.snapshots.swap_remove(pick as usize % model.snapshots.len());
                kreplay_snapshot_free(snapshot.handle);
                model.idle_bound[snapshot.agent] += snapshot.staging_bound;
            }
        }
        Op::Policy { pin: new_pin, budget: new_budget } => {
            *pin = new_pin;
            *budget = new_budget as usize * 16;
            let policy = model.config.policy(*pin, *budget);
            // SAFETY: a valid policy.
            assert_eq!(unsafe { kreplay_set_policy(&policy) }, KREPLAY_STATUS_SUCCESS);
        }
        Op::Reconfigure { config } => {
            configure(config, *pin, *budget);
            model.config = config;
            model.v1 &= config.is_v1();
            model.dirty_seen |= config.digest && config.dirty_only;
            model.max_device_budget = model.max_device_budget.max(config.device_budget as usize * 4096);
        }
        Op::ToggleTracking => {
            kreplay_tracking_enable(false);
            assert!(!kreplay_tracking_is_enabled());
            kreplay_tracking_enable(true);
            model.tracked.clear();
            model.lost.clear();
            model.mappings.clear();
            model.lost_mappings.clear();
        }
        Op::SwapLogger => swap_logger(),
        Op::RaceRestore { pick, free } => {
            if !model.snapshots.is_empty() {
                let pick = pick as usize % model.snapshots.len();
                if let Some(window) = model.windows[model.snapshots[pick].agent].as_mut() {
                    window.restores += 1;
                }
                model.race_restore(pick, free);
            }
        }
        Op::Finalize { gate } => model.finalize |= gate.is_multiple_of(16),
    }
}

// ---- The replay window (version 3) --------------------------------------------------------------------

impl Model {
    fn in_flight(&self, agent: usize) -> usize {
        self.copies.iter().filter(|(token, named)| *token != 0 && named[agent]).count()
    }
}

fn window_open(model: &mut Model, agent: usize, passes: u32) {
    use kreplay_decline_reason_t::*;
    // Version 4: a window over a range of dispatches for some of them (0 and 1 mean one).
    let dispatches = passes % 3;
    let options = kreplay_window_options_t {
        struct_size: size_of::<kreplay_window_options_t>(),
        passes,
        // This thread's own copies in flight are waited for like any other: keep the decline quick.
        copy_timeout_ms: 1,
        dispatches,
    };
    let mut window: *mut kreplay_window_t = std::ptr::NonNull::dangling().as_ptr();
    let mut reason = KREPLAY_DECLINE_HOST_BUDGET;
    let before = warnings();
    // SAFETY: valid options and writable outputs.
    let status = unsafe { kreplay_window_open(agents()[agent], &options, &mut window, &mut reason) };
    // Version 4: passes 0 is an open-ended window, opened like any other.
    let expected = if model.windows[agent].is_some() {
        KREPLAY_DECLINE_WINDOW_NESTED
    } else if FENCE_ARMED.load(Ordering::Relaxed) && model.in_flight(agent) > 0 {
        KREPLAY_DECLINE_COPIES_IN_FLIGHT
    } else {
        KREPLAY_DECLINE_NONE
    };
    if expected != KREPLAY_DECLINE_WINDOW_NESTED {
        FENCE_ARMED.store(true, Ordering::Relaxed);
    }
    assert_eq!(reason, expected, "window_open of agent {agent}");
    if expected != KREPLAY_DECLINE_NONE {
        assert_eq!(status, KREPLAY_STATUS_DECLINED);
        assert!(window.is_null());
        assert!(warnings() > before, "a declined window logged no outcome line");
        bump(&STATS.window_declines, 1);
        return;
    }
    assert_eq!(status, KREPLAY_STATUS_SUCCESS);
    assert!(!window.is_null());
    bump(&STATS.windows, 1);
    model.windows[agent] = Some(WindowModel { handle: window, passes, dispatches, snapshot: None, restores: 0 });
}

fn window_close(model: &mut Model, agent: usize, stale: bool) {
    use kreplay_decline_reason_t::KREPLAY_DECLINE_NONE;
    if stale && let Some(&handle) = model.closed_windows.last() {
        // SAFETY: a handle is never dereferenced; the outcome is not wanted.
        let status = unsafe { kreplay_window_close(handle, std::ptr::null_mut()) };
        assert_eq!(status, KREPLAY_STATUS_INVALID_ARGUMENT, "a closed window was closed again");
    }
    let Some(window) = model.windows[agent].take() else { return };
    let mut outcome: kreplay_window_outcome_t = kreplay_window_outcome_t {
        struct_size: size_of::<kreplay_window_outcome_t>(),
        // SAFETY: every field of the outcome is an integer, a bool or a C enum whose value 0 exists.
        ..unsafe { std::mem::zeroed() }
    };
    // SAFETY: an open window and a writable outcome.
    assert_eq!(unsafe { kreplay_window_close(window.handle, &mut outcome) }, KREPLAY_STATUS_SUCCESS);
    assert_eq!(outcome.agent, agents()[agent]);
    assert_eq!(outcome.passes_requested, window.passes);
    assert_eq!(outcome.dispatches, window.dispatches.max(1));
    assert!(outcome.passes_run >= 1 && outcome.passes_run <= 1 + window.restores, "{outcome:?}");
    match window.snapshot {
        Some(true) | None => assert_eq!(outcome.reason, KREPLAY_DECLINE_NONE),
        Some(false) => assert_ne!(outcome.reason, KREPLAY_DECLINE_NONE),
    }
    // Restores of the agent count toward the window whichever snapshot they write back (API.md: restores of the
    // agent while its window is open are accounted to it); only the footprint needs the window's own snapshot.
    if window.snapshot != Some(true) {
        assert_eq!(outcome.footprint_bytes, 0);
    }
    for agent in agents() {
        let mut untracked = kreplay_untracked_t::default();
        // SAFETY: a writable struct.
        assert_eq!(unsafe { kreplay_untracked_stats(agent, &mut untracked) }, KREPLAY_STATUS_SUCCESS);
        assert!(untracked.count.iter().sum::<usize>() <= model.regions.len() + SLICES, "{untracked:?}");
    }
    model.closed_windows.push(window.handle);
}

fn copy_begin(model: &mut Model, named: [bool; 2]) {
    let list: Vec<kreplay_agent_t> = (0..2).filter(|&a| named[a]).map(|a| agents()[a]).collect();
    let mut token = u64::MAX;
    // SAFETY: `list.len()` readable agents and a writable token. The windows open now are this thread's own,
    // so the call never waits.
    let status = unsafe { kreplay_copy_begin(list.as_ptr(), list.len(), &mut token) };
    assert_eq!(status, KREPLAY_STATUS_SUCCESS);
    assert_eq!(token == 0, !FENCE_ARMED.load(Ordering::Relaxed), "token {token:#x}");
    bump(&STATS.fenced_copies, usize::from(token != 0));
    model.copies.push((token, named));
}

/// What a caller was lent is written by no one else.
fn check_token(buffer: &Buffer) {
    // SAFETY: the buffer is still lent to us, `size` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(buffer.raw.data.cast::<u8>(), buffer.raw.size) };
    assert!(bytes.iter().all(|&b| b == buffer.token), "lent staging was written by someone else");
}

/// Frees everything, then checks that nothing leaked.
fn finish(model: &mut Model, baseline: &kreplay_host_memory_stats_t) {
    for agent in 0..2 {
        window_close(model, agent, false);
    }
    for (token, _) in model.copies.drain(..) {
        kreplay_copy_end(token);
    }
    for snapshot in model.snapshots.drain(..) {
        kreplay_snapshot_free(snapshot.handle);
    }
    for slot in model.buffers.iter_mut() {
        if let Some(buffer) = slot.take() {
            check_token(&buffer);
            let mut raw = buffer.raw;
            // SAFETY: a buffer this library wrote.
            unsafe { kreplay_staging_release(&mut raw) };
        }
    }
    for agent in agents() {
        kreplay_staging_trim(agent);
        assert_eq!(kreplay_retained_staging_bytes(agent), 0);
    }
    for region in model.regions.iter().filter(|r| !r.live) {
        assert!(read(region.address, region.reserved).iter().all(|&b| b == POISON), "freed memory was written");
    }
    let memory = host_memory();
    assert_eq!(memory.mapped_bytes, baseline.mapped_bytes, "host mappings leaked");
    assert_eq!(memory.maps - memory.unmaps, baseline.maps - baseline.unmaps, "maps and unmaps do not balance");
    let counters = sim_counters();
    assert_eq!(counters.host_locks, counters.host_unlocks, "page locks leaked");
    assert_eq!(counters.locked_bytes, 0);
    assert_eq!(counters.violations, 0, "a copy touched freed or foreign device memory");
    assert_eq!(counters.refused_copies, 0, "a copy ran from one module variable into another");
    kreplay_device_trim_all();
    for agent in agents() {
        assert_eq!(kreplay_retained_device_bytes(agent), 0, "idle device storage left after a trim");
    }
    assert_eq!(sim_counters().device_bytes, 0, "device storage leaked: held with no snapshot left");
    if model.finalize {
        finalize_in_child();
    }
}

/// Finalize while two threads snapshot, restore, record and use staging, in a forked child (finalize cannot
/// be undone in this process). After `kreplay_finalize` returns, no device op and no logger may run again.
fn finalize_in_child() {
    bump(&STATS.finalizes, 1);
    // SAFETY: this process runs no thread of ours now; the child only uses the library, the simulated device
    // and the allocator, then leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        finalize_scenario();
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: our own child and a writable status.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "finalize with calls in flight broke a rule (the child's message is above); wait status {status:#x}"
    );
}

fn finalize_scenario() {
    use std::sync::atomic::AtomicBool;
    let [agent, _] = agents();
    let (region, _) = sim_alloc(0, 4096, 0);
    assert_eq!(kreplay_record_alloc(region as *mut c_void, 4096, 0), KREPLAY_STATUS_SUCCESS);
    let stop = AtomicBool::new(false);
    let frozen = |c: &kreplay_sim_counters_t| {
        (c.copies, c.failed_copies, c.batches, c.pointer_queries, c.module_scans, c.host_locks, c.host_unlocks)
    };
    let device = |c: &kreplay_sim_counters_t| (c.device_allocs, c.device_frees, c.digests);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let mut handle = std::ptr::null_mut();
                // SAFETY: writable outputs; the reason is not wanted.
                if unsafe { kreplay_snap(agent, &mut handle, std::ptr::null_mut()) } == KREPLAY_STATUS_SUCCESS {
                    let mut report = kreplay_restore_report_t::default();
                    // SAFETY: a live handle and a writable report.
                    unsafe { kreplay_restore(handle, &mut report) };
                    kreplay_snapshot_free(handle);
                }
            }
        });
        scope.spawn(|| {
            let (other, _) = sim_alloc(0, 8192, 0);
            while !stop.load(Ordering::Relaxed) {
                kreplay_record_alloc(other as *mut c_void, 8192, 0);
                kreplay_record_free(other as *mut c_void);
                let mut buffer =
                    kreplay_staging_buffer_t { data: std::ptr::null_mut(), size: 0, capacity: 0, agent, loan: 0 };
                // SAFETY: an empty buffer.
                if unsafe { kreplay_staging_acquire(&mut buffer, agent, 3000) } == KREPLAY_STATUS_SUCCESS {
                    // SAFETY: a buffer this library wrote.
                    unsafe { kreplay_staging_release(&mut buffer) };
                }
            }
        });
        std::thread::sleep(std::time::Duration::from_micros(300));
        kreplay_finalize();
        let (counters, messages) = (sim_counters(), MESSAGES.load(Ordering::Relaxed));
        std::thread::sleep(std::time::Duration::from_millis(2));
        stop.store(true, Ordering::Relaxed);
        // Calls made after finalize are refused without touching the device or logging.
        let mut handle = std::ptr::null_mut();
        // SAFETY: writable outputs.
        assert_eq!(unsafe { kreplay_snap(agent, &mut handle, std::ptr::null_mut()) }, KREPLAY_STATUS_DECLINED);
        let after = sim_counters();
        assert_eq!(frozen(&after), frozen(&counters), "a device op ran after kreplay_finalize returned");
        assert_eq!(device(&after), device(&counters), "a device op ran after kreplay_finalize returned");
        assert_eq!(MESSAGES.load(Ordering::Relaxed), messages, "the logger ran after kreplay_finalize returned");
    });
}

fuzz_target!(|data: &[u8]| {
    let baseline = init();
    let input = STATS.inputs.load(Ordering::Relaxed) as u64;
    AGENT_BASE.store(0x1000 + (input % AGENT_PAIRS) * 2, Ordering::Relaxed);
    run(data, &baseline);
    let inputs = STATS.inputs.fetch_add(1, Ordering::Relaxed) + 1;
    if inputs.is_power_of_two() && inputs >= 1024 {
        print_stats();
    }
});
