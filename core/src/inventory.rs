//! The inventory: every live device allocation and virtual-memory mapping the host has reported, keyed by
//! base address, tagged with its owning agent and a process-unique generation.
//!
//! The record path (`record_alloc`, `record_free`) allocates nothing and makes no system call when the lock is
//! free: allocations live in a fixed-capacity open-addressing table behind a spin reader-writer lock whose
//! waiters back off to sleeping ([`crate::lock`]). Virtual-memory mappings live in a smaller table of their own,
//! since an unmap may name any part of a mapping.
//!
//! Copies never run under the lock. A capture or restore *pins* the regions of a batch (a short read-locked
//! pass that also re-validates them) and unpins them when the batch is complete; a free of a pinned region
//! marks it dying (no new pin succeeds) and waits until its pins are gone, so a free waits only for copies that
//! touch its own region, and allocations and frees of other regions never wait for a copy.
//!
//! Nothing is ever lost silently: an allocation that cannot be recorded (table full, or its pointer query
//! failed) is remembered as *lost* until it is freed, and while any lost allocation of an agent (or of an
//! unknown owner) may be live, [`Inventory::gather`] refuses that agent.

use alloc::vec::Vec;
use arrayvec::ArrayVec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::lock::{Backoff, RwLock};
use crate::types::Agent;

mod introspection;

/// Default number of live allocations the inventory holds, process-wide.
pub const DEFAULT_CAPACITY: usize = 65_536;

/// The build-time capacity: `KREPLAY_MAX_TRACKED_REGIONS` in the environment of the build (CMake option
/// `KREPLAY_MAX_TRACKED_REGIONS`), else [`DEFAULT_CAPACITY`].
pub const CAPACITY: usize = parse_capacity(option_env!("KREPLAY_MAX_TRACKED_REGIONS"), DEFAULT_CAPACITY);

/// Slots of the open-addressing index for [`CAPACITY`] entries (load factor at most one half).
pub const SLOTS: usize = slots_for(CAPACITY);

/// Live virtual-memory mappings the inventory holds.
pub const VMEM_CAPACITY: usize = 4096;

/// Lost allocations remembered individually; past this, every agent is declined for the rest of the process.
pub const LOST_CAPACITY: usize = 1024;

/// Frees remembered so that a free the runtime then refused can be undone with the region's generation.
pub const UNDO_CAPACITY: usize = 256;

/// Bit of a pin word: the region is being freed; no new pin succeeds.
const DYING: u32 = 1 << 31;

/// The setting that raises the capacity, for messages.
pub const CAPACITY_SETTING: &str = "KREPLAY_MAX_TRACKED_REGIONS (CMake option or build environment)";

const fn parse_capacity(text: Option<&str>, default: usize) -> usize {
    let Some(text) = text else { return default };
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        return default;
    }
    let mut value: usize = 0;
    let mut i = 0;
    while i < bytes.len() {
        let digit = bytes[i];
        assert!(digit.is_ascii_digit(), "KREPLAY_MAX_TRACKED_REGIONS must be a decimal number");
        value = value * 10 + (digit - b'0') as usize;
        i += 1;
    }
    assert!(value >= 16 && value <= (1 << 26), "KREPLAY_MAX_TRACKED_REGIONS must be in [16, 2^26]");
    value
}

/// Index slots for `capacity` entries: a power of two at least twice the capacity.
pub const fn slots_for(capacity: usize) -> usize {
    (capacity * 2).next_power_of_two()
}

/// How a region came to be tracked.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// A runtime allocation (`record_alloc`).
    Allocation,
    /// A virtual-memory mapping (`record_vmem_map`).
    VmemMapping,
}

/// One tracked region.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// Start address (device virtual address).
    pub base: usize,
    /// Size in bytes.
    pub size: usize,
    /// The owning agent.
    pub agent: Agent,
    /// Process-unique: a region freed and recorded again at the same address gets a new one.
    pub generation: u64,
    /// Allocation or mapping.
    pub kind: RegionKind,
}

/// An allocation or mapping that could not be recorded and may still be live.
#[derive(Copy, Clone, Debug)]
struct Lost {
    base: usize,
    /// Bytes from `base` still mapped, for a mapping (unused for an allocation: its free names only the base).
    size: usize,
    /// A lost allocation ends with `record_free` of its base; a lost mapping with unmaps that cover it.
    kind: RegionKind,
    /// `None` when the owner could not be determined: then every agent is affected.
    agent: Option<Agent>,
}

/// Why [`Inventory::insert`] could not record a region.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The table is full; the allocation is remembered as lost.
    Full,
}

/// Why [`Inventory::gather`] refused an agent.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GatherError {
    /// A lost allocation of this agent (or of an unknown owner) may be live.
    Overflow,
    /// Host memory for the list could not be reserved.
    OutOfMemory,
}

/// What [`Inventory::remove_vmem`] did.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct UnmapOutcome {
    /// Mappings that overlapped the range.
    pub touched: usize,
    /// A split whose second half could not be stored; it is remembered as lost.
    pub lost: bool,
}

/// Per-agent figures for `kreplay_inventory_stats`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentStats {
    /// Tracked regions of the agent.
    pub regions: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Capacity of the allocation table, process-wide.
    pub capacity: usize,
    /// Allocations of the agent (or of an unknown owner) that could not be recorded and may still be live.
    pub overflowed: usize,
}

static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// A process-unique generation number.
pub fn next_generation() -> u64 {
    NEXT_GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// A fixed-capacity map from base address to [`Region`]: entries are dense (so per-agent iteration touches
/// only live entries), and an open-addressing index with linear probing and backward-shift deletion finds
/// them by base.
///
/// # Invariants
/// - Every entry is pointed to by exactly one index slot, holding `entry index + 1`; other slots hold 0.
/// - An entry's slot is reachable from its home slot by linear probing without crossing an empty slot.
/// - No two entries have the same base.
struct Table<const CAP: usize, const SLOTS: usize> {
    entries: ArrayVec<Region, CAP>,
    /// Pin word of each entry (same index): copies in flight, and [`DYING`]. Changed under the read lock by
    /// pins, moved with its entry under the write lock.
    pins: [AtomicU32; CAP],
    index: [u32; SLOTS],
}

impl<const CAP: usize, const SLOTS: usize> Table<CAP, SLOTS> {
    const MASK: usize = SLOTS - 1;
    const SHIFT: u32 = 64 - SLOTS.trailing_zeros();

    const fn new() -> Self {
        assert!(SLOTS.is_power_of_two() && SLOTS >= 2 * CAP && CAP < u32::MAX as usize);
        Table { entries: ArrayVec::new_const(), pins: [const { AtomicU32::new(0) }; CAP], index: [0; SLOTS] }
    }

    /// Fibonacci hashing: spreads page- and cache-line-aligned addresses over the whole index.
    #[inline]
    fn home(base: usize) -> usize {
        ((base as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> Self::SHIFT) as usize
    }

    /// The slot that points at the entry with this base.
    fn slot_of(&self, base: usize) -> Option<usize> {
        let mut slot = Self::home(base);
        loop {
            let at = self.index[slot];
            if at == 0 {
                return None;
            }
            if self.entries[at as usize - 1].base == base {
                return Some(slot);
            }
            slot = (slot + 1) & Self::MASK;
        }
    }

    fn get(&self, base: usize) -> Option<&Region> {
        self.slot_of(base).map(|slot| &self.entries[self.index[slot] as usize - 1])
    }

    /// The entry with this base and its pin word, trying index `hint` first (where the entry was when it was
    /// listed: entries move only when another is removed, so in a steady replay the hint is right and no hash
    /// probe is needed).
    fn get_pinned_hinted(&self, base: usize, hint: u32) -> Option<(&Region, &AtomicU32)> {
        let at = hint as usize;
        match self.entries.get(at) {
            Some(region) if region.base == base => Some((region, &self.pins[at])),
            _ => self.get_pinned(base),
        }
    }

    /// The entry with this base and its pin word.
    fn get_pinned(&self, base: usize) -> Option<(&Region, &AtomicU32)> {
        self.slot_of(base).map(|slot| {
            let at = self.index[slot] as usize - 1;
            (&self.entries[at], &self.pins[at])
        })
    }

    /// Inserts or replaces the entry with `region.base`. Returns the replaced entry.
    fn insert(&mut self, region: Region) -> Result<Option<Region>, InsertError> {
        let mut slot = Self::home(region.base);
        loop {
            let at = self.index[slot];
            if at == 0 {
                break;
            }
            let entry = &mut self.entries[at as usize - 1];
            if entry.base == region.base {
                // Pins of the replaced generation no longer match anything: the new entry starts unpinned.
                self.pins[at as usize - 1].store(0, Ordering::Relaxed);
                return Ok(Some(core::mem::replace(entry, region)));
            }
            slot = (slot + 1) & Self::MASK;
        }
        self.entries.try_push(region).map_err(|_| InsertError::Full)?;
        self.pins[self.entries.len() - 1].store(0, Ordering::Relaxed);
        self.index[slot] = self.entries.len() as u32;
        Ok(None)
    }

    fn remove(&mut self, base: usize) -> Option<Region> {
        let slot = self.slot_of(base)?;
        let at = self.index[slot] as usize - 1;
        self.erase_slot(slot);
        let last = self.entries.len() - 1;
        let removed = self.entries.swap_remove(at);
        if at != last {
            // The former last entry now lives at `at`: move its pin word and repoint its slot.
            self.pins[at].store(self.pins[last].load(Ordering::Relaxed), Ordering::Relaxed);
            let moved = self.entries[at].base;
            let moved_slot = self.slot_of_index(moved, last + 1);
            self.index[moved_slot] = at as u32 + 1;
        }
        Some(removed)
    }

    /// The slot holding `stored` (an index + 1) for an entry with this base.
    fn slot_of_index(&self, base: usize, stored: usize) -> usize {
        let mut slot = Self::home(base);
        while self.index[slot] as usize != stored {
            slot = (slot + 1) & Self::MASK;
        }
        slot
    }

    /// Empties `hole` and shifts later members of its probe run back so that every entry stays reachable.
    fn erase_slot(&mut self, mut hole: usize) {
        let mut slot = hole;
        loop {
            slot = (slot + 1) & Self::MASK;
            let at = self.index[slot];
            if at == 0 {
                break;
            }
            let home = Self::home(self.entries[at as usize - 1].base);
            // The entry may move into the hole when the hole lies on its probe path from home to slot.
            if (hole.wrapping_sub(home) & Self::MASK) < (slot.wrapping_sub(home) & Self::MASK) {
                self.index[hole] = at;
                hole = slot;
            }
        }
        self.index[hole] = 0;
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn clear(&mut self) {
        for pin in &self.pins[..self.entries.len()] {
            pin.store(0, Ordering::Relaxed);
        }
        self.entries.clear();
        self.index.fill(0);
    }

    fn iter(&self) -> impl Iterator<Item = &Region> {
        self.entries.iter()
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        let mut pointed = 0;
        for (slot, &at) in self.index.iter().enumerate() {
            if at == 0 {
                continue;
            }
            pointed += 1;
            let base = self.entries[at as usize - 1].base;
            assert_eq!(self.slot_of(base), Some(slot), "entry {base:#x} is not reachable from its home");
        }
        assert_eq!(pointed, self.entries.len());
    }
}

struct State<const CAP: usize, const SLOTS: usize> {
    allocations: Table<CAP, SLOTS>,
    mappings: ArrayVec<Region, VMEM_CAPACITY>,
    /// Pin words of `mappings`, same index.
    mapping_pins: [AtomicU32; VMEM_CAPACITY],
    lost: ArrayVec<Lost, LOST_CAPACITY>,
    /// A lost allocation could not even be remembered: every agent is declined from now on.
    lost_forgotten: bool,
    /// Recent frees for [`Inventory::undo_remove`]: a ring (filled up to its capacity, then overwritten at
    /// `freed_next`); an undone entry becomes `None`. An `ArrayVec`, not an array of `None`s, so that the table
    /// starts all zero (`.bss` in a `static`).
    freed: ArrayVec<Option<Freed>, UNDO_CAPACITY>,
    freed_next: usize,
    /// Whether inserts are accepted; changed only under the write lock, with `epoch`.
    enabled: bool,
    /// Bumped whenever tracking is turned on or off: an insert prepared under another epoch is refused.
    epoch: u64,
}

/// A free that may still be undone.
#[derive(Copy, Clone, Debug)]
enum Freed {
    Tracked(Region),
    Lost(Lost),
}

/// One tracked region to pin for a copy: it must still be live with this generation and at least `min_size`
/// bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PinKey {
    /// Base address.
    pub base: usize,
    /// Allocation or mapping.
    pub kind: RegionKind,
    /// Generation captured.
    pub generation: u64,
    /// Bytes captured.
    pub min_size: usize,
    /// Where the region was in its table when it was listed ([`Inventory::gather_with`]): checked first.
    pub hint: u32,
}

/// Why [`Inventory::remove`] or [`Inventory::remove_vmem`] did not finish.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RemoveError {
    /// Nothing tracked there.
    NotFound,
    /// A copy in flight touches the region and the caller may not wait for it (it is nested inside a kreplay
    /// call on the same thread, which may be that very copy). The region stays tracked.
    InUse,
}

/// The inventory. `CAP` and `SLOTS` are build-time constants ([`CAPACITY`], [`SLOTS`]); tests use small ones.
pub struct Inventory<const CAP: usize = CAPACITY, const SLOTS: usize = { slots_for(CAPACITY) }> {
    state: RwLock<State<CAP, SLOTS>>,
    /// Mirror of `State::enabled` for the record paths' one relaxed load.
    enabled: AtomicBool,
    /// Pins taken and not yet released, all regions: turning tracking off waits for it to reach zero.
    pinned: AtomicUsize,
    /// Mirror of `State::epoch`, written under the write lock, read without it by record calls.
    epoch: AtomicU64,
}

impl<const CAP: usize, const SLOTS: usize> Default for Inventory<CAP, SLOTS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const CAP: usize, const SLOTS: usize> Inventory<CAP, SLOTS> {
    /// An empty inventory.
    pub const fn new() -> Self {
        Inventory {
            state: RwLock::new(State {
                allocations: Table::new(),
                mappings: ArrayVec::new_const(),
                mapping_pins: [const { AtomicU32::new(0) }; VMEM_CAPACITY],
                lost: ArrayVec::new_const(),
                lost_forgotten: false,
                freed: ArrayVec::new_const(),
                freed_next: 0,
                enabled: false,
                epoch: 0,
            }),
            enabled: AtomicBool::new(false),
            pinned: AtomicUsize::new(0),
            epoch: AtomicU64::new(0),
        }
    }

    /// The allocation table's capacity.
    pub const fn capacity(&self) -> usize {
        CAP
    }

    /// Whether tracking is on (one relaxed load: the record paths' fast exit).
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The current tracking epoch, read before a record call does its slow work (the pointer query), so that
    /// its insert can be refused if tracking was turned off (or off and on) meanwhile.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Turns tracking on or off. Turning it off forgets everything and waits until no copy touches a region
    /// that was tracked (unless `may_wait` is false: a call nested in a device op cannot wait for itself).
    /// Returns how many regions were forgotten.
    pub fn set_enabled(&self, enabled: bool, may_wait: bool) -> usize {
        let forgotten = {
            let mut state = self.state.write();
            if state.enabled == enabled {
                return 0;
            }
            state.enabled = enabled;
            state.epoch += 1;
            self.epoch.store(state.epoch, Ordering::Release);
            self.enabled.store(enabled, Ordering::Relaxed);
            if enabled { 0 } else { state.clear() }
        };
        if !enabled && may_wait {
            let mut backoff = Backoff::new();
            while self.pinned.load(Ordering::Acquire) != 0 {
                backoff.snooze();
            }
        }
        forgotten
    }

    /// Records a classified allocation, unless tracking changed since `epoch` (then `Ok(None)`, nothing
    /// recorded: the allocation began before tracking was turned off). On [`InsertError::Full`] the
    /// allocation is remembered as lost. Returns the entry it replaced, if the host never reported that one's
    /// free.
    pub fn insert(&self, base: usize, size: usize, agent: Agent, epoch: u64) -> Result<Option<Region>, InsertError> {
        let region = Region { base, size, agent, generation: next_generation(), kind: RegionKind::Allocation };
        let mut state = self.state.write();
        if !state.enabled || state.epoch != epoch {
            return Ok(None);
        }
        match state.allocations.insert(region) {
            Ok(replaced) => {
                // A failed attempt at recording this same allocation (its pointer query failed) is superseded.
                state.lost.retain(|lost| !(lost.kind == RegionKind::Allocation && lost.base == base));
                Ok(replaced)
            }
            Err(error) => {
                state.remember_lost(base, size, Some(agent), RegionKind::Allocation);
                Err(error)
            }
        }
    }

    /// Remembers an allocation whose owner could not be determined: every agent is declined until it is freed.
    /// Ignored when tracking changed since `epoch`.
    pub fn insert_unknown(&self, base: usize, epoch: u64) {
        let mut state = self.state.write();
        if state.enabled && state.epoch == epoch {
            state.remember_lost(base, 0, None, RegionKind::Allocation);
        }
    }

    /// Remembers a mapping whose owner could not be determined: every agent is declined until unmaps cover it.
    pub fn insert_vmem_unknown(&self, base: usize, size: usize) {
        let mut state = self.state.write();
        state.unmap_range(base, size);
        state.remember_lost(base, size, None, RegionKind::VmemMapping);
    }

    /// Takes the allocation at `base` out (or forgets it as lost), first waiting until no copy in flight touches
    /// it. With `may_wait` false (a call nested in a device op) a pinned region is left tracked and
    /// [`RemoveError::InUse`] returned instead of waiting. Returns the region, `None` for a lost one.
    pub fn remove(&self, base: usize, may_wait: bool) -> Result<Option<Region>, RemoveError> {
        let mut backoff = Backoff::new();
        loop {
            let mut state = self.state.write();
            if let Some((region, pins)) = state.allocations.get_pinned(base) {
                let generation = region.generation;
                let word = pins.load(Ordering::Relaxed);
                if word & !DYING != 0 {
                    if !may_wait {
                        pins.fetch_and(!DYING, Ordering::Relaxed);
                        return Err(RemoveError::InUse);
                    }
                    // No new pin from here on; wait outside the lock for the copies in flight.
                    pins.fetch_or(DYING, Ordering::Relaxed);
                    drop(state);
                    self.wait_unpinned(base, generation, &mut backoff);
                    continue;
                }
                let region = state.allocations.remove(base).ok_or(RemoveError::NotFound)?;
                state.remember_freed(Freed::Tracked(region));
                return Ok(Some(region));
            }
            let position = state
                .lost
                .iter()
                .position(|lost| lost.kind == RegionKind::Allocation && lost.base == base)
                .ok_or(RemoveError::NotFound)?;
            let lost = state.lost.swap_remove(position);
            state.remember_freed(Freed::Lost(lost));
            return Ok(None);
        }
    }

    /// Waits until the allocation at `base` of `generation` has no pin left (or is gone).
    fn wait_unpinned(&self, base: usize, generation: u64, backoff: &mut Backoff) {
        loop {
            {
                let state = self.state.read();
                match state.allocations.get_pinned(base) {
                    Some((region, pins)) if region.generation == generation => {
                        if pins.load(Ordering::Acquire) & !DYING == 0 {
                            return;
                        }
                    }
                    _ => return,
                }
            }
            backoff.snooze();
        }
    }

    /// Puts back the allocation whose free at `base` was recorded last, with its generation (the runtime
    /// refused the real free). `NotFound` when no such free is remembered, or the address is tracked again.
    pub fn undo_remove(&self, base: usize) -> Result<(), RemoveError> {
        let mut state = self.state.write();
        // Newest first: walk the ring backwards from the last free.
        let len = state.freed.len();
        let position = (1..=len)
            .map(|back| (state.freed_next + len - back) % len)
            .find(|&at| match state.freed[at] {
                Some(Freed::Tracked(region)) => region.base == base,
                Some(Freed::Lost(lost)) => lost.base == base,
                None => false,
            })
            .ok_or(RemoveError::NotFound)?;
        if state.allocations.get(base).is_some() {
            return Err(RemoveError::NotFound);
        }
        let Some(freed) = state.freed[position].take() else { return Err(RemoveError::NotFound) };
        match freed {
            Freed::Tracked(region) => {
                if state.allocations.insert(region).is_err() {
                    state.remember_lost(base, region.size, Some(region.agent), RegionKind::Allocation);
                }
            }
            Freed::Lost(lost) => {
                if state.lost.try_push(lost).is_err() {
                    state.lost_forgotten = true;
                }
            }
        }
        Ok(())
    }

    /// Pins each key's region for a copy, in one pass under the read lock: `on(i, true)` for keys that are
    /// still live with their generation and size and not being freed (each must be unpinned later), `on(i,
    /// false)` for the others (freed, shrunk or reallocated: not to be touched).
    pub fn pin_each(&self, keys: impl Iterator<Item = PinKey>, mut on: impl FnMut(bool)) {
        let state = self.state.read();
        let mut count = 0;
        for key in keys {
            let found = match key.kind {
                RegionKind::Allocation => state.allocations.get_pinned_hinted(key.base, key.hint),
                RegionKind::VmemMapping => state.mapping_pinned(key.base, key.hint),
            };
            let pinned = match found {
                Some((region, pins)) if region.generation == key.generation && region.size >= key.min_size => {
                    if pins.fetch_add(1, Ordering::AcqRel) & DYING != 0 {
                        pins.fetch_sub(1, Ordering::AcqRel);
                        false
                    } else {
                        true
                    }
                }
                _ => false,
            };
            count += pinned as usize;
            on(pinned);
        }
        self.pinned.fetch_add(count, Ordering::AcqRel);
    }

    /// Releases pins taken by [`Inventory::pin_each`] (only keys it reported pinned).
    pub fn unpin_each(&self, keys: impl Iterator<Item = PinKey>) {
        let state = self.state.read();
        let mut count = 0;
        for key in keys {
            count += 1;
            let found = match key.kind {
                RegionKind::Allocation => state.allocations.get_pinned_hinted(key.base, key.hint),
                RegionKind::VmemMapping => state.mapping_pinned(key.base, key.hint),
            };
            // A region forgotten meanwhile (tracking turned off) or replaced has no pin of ours to release.
            if let Some((region, pins)) = found {
                if region.generation == key.generation {
                    pins.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        self.pinned.fetch_sub(count, Ordering::AcqRel);
    }

    /// Records a virtual-memory mapping. Any part of an existing mapping it overlaps is unmapped first (the
    /// host missed that unmap).
    pub fn insert_vmem(&self, base: usize, size: usize, agent: Agent) -> Result<(), InsertError> {
        let region = Region { base, size, agent, generation: next_generation(), kind: RegionKind::VmemMapping };
        let mut state = self.state.write();
        if !state.enabled {
            return Ok(());
        }
        state.unmap_range(base, size);
        if state.mappings.try_push(region).is_err() {
            state.remember_lost(base, size, Some(agent), RegionKind::VmemMapping);
            return Err(InsertError::Full);
        }
        let last = state.mappings.len() - 1;
        state.mapping_pins[last].store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Unmaps `[base, base + size)` from the tracked mappings: whole mappings are removed, partly covered
    /// ones trimmed or split. Waits first until no copy in flight touches a mapping it overlaps; with
    /// `may_wait` false it returns [`RemoveError::InUse`] instead, changing nothing.
    pub fn remove_vmem(&self, base: usize, size: usize, may_wait: bool) -> Result<UnmapOutcome, RemoveError> {
        let end = base.saturating_add(size);
        let mut backoff = Backoff::new();
        loop {
            let mut state = self.state.write();
            let mut busy = false;
            for (region, pins) in state.mappings.iter().zip(&state.mapping_pins) {
                if region.base < end && base < region.base + region.size && pins.load(Ordering::Relaxed) & !DYING != 0 {
                    busy = true;
                    if may_wait {
                        pins.fetch_or(DYING, Ordering::Relaxed);
                    }
                }
            }
            if !busy {
                // Mappings that survive this unmap (trimmed or split) may be pinned again.
                for (region, pins) in state.mappings.iter().zip(&state.mapping_pins) {
                    if region.base < end && base < region.base + region.size {
                        pins.fetch_and(!DYING, Ordering::Relaxed);
                    }
                }
                return Ok(state.unmap_range(base, size));
            }
            if !may_wait {
                return Err(RemoveError::InUse);
            }
            drop(state);
            backoff.snooze();
        }
    }

    /// Appends `agent`'s regions to `out` (allocations first, then mappings), reserving outside the lock.
    pub fn gather(&self, agent: Agent, out: &mut Vec<Region>) -> Result<(), GatherError> {
        self.gather_with(agent, out, |region, _| *region)
    }

    /// Like [`Inventory::gather`], appending `convert(region, hint)` for each region, so a caller that keeps its
    /// own record per region fills it straight from the table, without an intermediate list. `hint` is the
    /// region's place in its table, for [`PinKey::hint`].
    pub fn gather_with<T>(
        &self,
        agent: Agent,
        out: &mut Vec<T>,
        mut convert: impl FnMut(&Region, u32) -> T,
    ) -> Result<(), GatherError> {
        let start = out.len();
        let mut want = 0;
        loop {
            out.truncate(start);
            if out.try_reserve(want).is_err() {
                return Err(GatherError::OutOfMemory);
            }
            let state = self.state.read();
            if state.is_overflowed(agent) {
                return Err(GatherError::Overflow);
            }
            let mut complete = true;
            let allocations = state.allocations.iter().enumerate();
            for (at, region) in allocations.chain(state.mappings.iter().enumerate()) {
                if region.agent != agent {
                    continue;
                }
                if out.len() == out.capacity() {
                    complete = false;
                    break;
                }
                out.push(convert(region, at as u32));
            }
            if complete {
                return Ok(());
            }
            // More regions than reserved: size the reservation from the current total and try again.
            want = state.allocations.len() + state.mappings.len();
        }
    }

    /// Figures for one agent.
    pub fn stats(&self, agent: Agent) -> AgentStats {
        let state = self.state.read();
        let mut stats = AgentStats { capacity: CAP, ..AgentStats::default() };
        for region in state.allocations.iter().chain(state.mappings.iter()).filter(|r| r.agent == agent) {
            stats.regions += 1;
            stats.bytes = stats.bytes.saturating_add(region.size);
        }
        stats.overflowed = state.lost.iter().filter(|lost| lost.agent.is_none_or(|a| a == agent)).count();
        if state.lost_forgotten {
            stats.overflowed = stats.overflowed.max(1);
        }
        stats
    }

    /// Whether snapshots of `agent` must be declined because an allocation may have been lost.
    pub fn is_overflowed(&self, agent: Agent) -> bool {
        self.state.read().is_overflowed(agent)
    }

    /// Total tracked allocations and mappings, all agents.
    pub fn len(&self) -> usize {
        let state = self.state.read();
        state.allocations.len() + state.mappings.len()
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        self.state.read().allocations.check_invariants();
    }
}

impl<const CAP: usize, const SLOTS: usize> State<CAP, SLOTS> {
    /// Forgets everything: tracked regions, lost allocations, undoable frees. Returns how many regions were
    /// tracked.
    fn clear(&mut self) -> usize {
        let count = self.allocations.len() + self.mappings.len();
        self.allocations.clear();
        for pin in &self.mapping_pins[..self.mappings.len()] {
            pin.store(0, Ordering::Relaxed);
        }
        self.mappings.clear();
        self.lost.clear();
        self.lost_forgotten = false;
        self.freed.clear();
        self.freed_next = 0;
        count
    }

    fn remember_freed(&mut self, freed: Freed) {
        if self.freed.is_full() {
            self.freed[self.freed_next] = Some(freed);
        } else {
            self.freed.push(Some(freed));
        }
        self.freed_next = (self.freed_next + 1) % UNDO_CAPACITY;
    }

    fn mapping_pinned(&self, base: usize, hint: u32) -> Option<(&Region, &AtomicU32)> {
        let at = match self.mappings.get(hint as usize) {
            Some(region) if region.base == base => hint as usize,
            _ => self.mappings.iter().position(|r| r.base == base)?,
        };
        Some((&self.mappings[at], &self.mapping_pins[at]))
    }

    /// Removes mapping `i`, moving the last mapping's pin word with it.
    fn swap_remove_mapping(&mut self, i: usize) {
        let last = self.mappings.len() - 1;
        self.mapping_pins[i].store(self.mapping_pins[last].load(Ordering::Relaxed), Ordering::Relaxed);
        self.mapping_pins[last].store(0, Ordering::Relaxed);
        self.mappings.swap_remove(i);
    }

    fn remember_lost(&mut self, base: usize, size: usize, agent: Option<Agent>, kind: RegionKind) {
        if self.lost.try_push(Lost { base, size, agent, kind }).is_err() {
            self.lost_forgotten = true;
        }
    }

    fn is_overflowed(&self, agent: Agent) -> bool {
        self.lost_forgotten || self.lost.iter().any(|lost| lost.agent.is_none_or(|a| a == agent))
    }

    fn unmap_range(&mut self, base: usize, size: usize) -> UnmapOutcome {
        let end = base.saturating_add(size);
        let mut outcome = UnmapOutcome::default();
        let mut i = 0;
        while i < self.mappings.len() {
            let region = self.mappings[i];
            let region_end = region.base + region.size;
            if region_end <= base || region.base >= end {
                i += 1;
                continue;
            }
            outcome.touched += 1;
            let keeps_head = region.base < base;
            let keeps_tail = region_end > end;
            match (keeps_head, keeps_tail) {
                (false, false) => {
                    self.swap_remove_mapping(i);
                    continue;
                }
                (true, false) => self.mappings[i].size = base - region.base,
                (false, true) => {
                    self.mappings[i].base = end;
                    self.mappings[i].size = region_end - end;
                }
                (true, true) => {
                    self.mappings[i].size = base - region.base;
                    let tail = Region { base: end, size: region_end - end, ..region };
                    let tail_index = self.mappings.len();
                    if self.mappings.try_push(tail).is_ok() {
                        self.mapping_pins[tail_index].store(0, Ordering::Relaxed);
                    } else {
                        self.remember_lost(end, region_end - end, Some(region.agent), RegionKind::VmemMapping);
                        outcome.lost = true;
                    }
                }
            }
            i += 1;
        }
        outcome.touched += self.unmap_lost(base, end);
        outcome
    }

    /// Lost mappings end the same way as tracked ones: an unmap covering one entirely forgets it, one covering
    /// its head or tail trims it. One that only punches a hole keeps it whole, which declines at worst too long,
    /// never too short. Returns how many it touched.
    fn unmap_lost(&mut self, base: usize, end: usize) -> usize {
        let mut touched = 0;
        let mut i = 0;
        while i < self.lost.len() {
            let lost = self.lost[i];
            let lost_end = lost.base.saturating_add(lost.size);
            if lost.kind != RegionKind::VmemMapping || lost_end <= base || lost.base >= end {
                i += 1;
                continue;
            }
            touched += 1;
            match (lost.base < base, lost_end > end) {
                (false, false) => {
                    self.lost.swap_remove(i);
                    continue;
                }
                (true, false) => self.lost[i].size = base - lost.base,
                (false, true) => {
                    self.lost[i].base = end;
                    self.lost[i].size = lost_end - end;
                }
                (true, true) => {}
            }
            i += 1;
        }
        touched
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const A: Agent = Agent(0xA);
    const B: Agent = Agent(0xB);

    /// Shorthands for the tests: tracking on, inserts in the current epoch, removals that may wait.
    impl<const CAP: usize, const SLOTS: usize> Inventory<CAP, SLOTS> {
        fn add(&self, base: usize, size: usize, agent: Agent) -> Result<Option<Region>, InsertError> {
            self.set_enabled(true, true);
            self.insert(base, size, agent, self.epoch())
        }
        fn add_unknown(&self, base: usize) {
            self.insert_unknown(base, self.epoch());
        }
        fn del(&self, base: usize) -> Option<Option<Region>> {
            self.remove(base, true).ok()
        }
        fn unmap(&self, base: usize, size: usize) -> UnmapOutcome {
            self.remove_vmem(base, size, true).unwrap()
        }
        fn is_live(&self, base: usize, generation: u64, min_size: usize) -> bool {
            let key = PinKey { base, kind: RegionKind::Allocation, generation, min_size, hint: 0 };
            let mut live = false;
            self.pin_each(core::iter::once(key), |pinned| live = pinned);
            if live {
                self.unpin_each(core::iter::once(key));
            }
            live
        }
    }

    #[test]
    fn the_table_matches_a_model_under_random_inserts_and_removes() {
        // A tiny index forces long probe runs and wrap-around, which backward-shift deletion must get right.
        let mut table: Table<48, 128> = Table::new();
        let mut model = HashMap::new();
        let mut seed = 0x1234_5678_u64;
        for step in 0..if cfg!(miri) { 2_000 } else { 20_000 } {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let base = ((seed % 96) as usize + 1) * 4096;
            if seed & 0x100 == 0 {
                let region =
                    Region { base, size: step, agent: A, generation: step as u64, kind: RegionKind::Allocation };
                match table.insert(region) {
                    Ok(_) => {
                        model.insert(base, step);
                    }
                    Err(InsertError::Full) => assert_eq!(model.len(), 48),
                }
            } else {
                assert_eq!(table.remove(base).map(|r| r.size), model.remove(&base));
            }
            if step % 97 == 0 {
                table.check_invariants();
            }
            assert_eq!(table.len(), model.len());
        }
        for (base, size) in model {
            assert_eq!(table.get(base).map(|r| r.size), Some(size));
        }
    }

    #[test]
    fn a_full_table_reports_and_remembers_the_lost_allocation_until_it_is_freed() {
        let inventory: Inventory<16, 32> = Inventory::new();
        inventory.set_enabled(true, true);
        for i in 0..16 {
            inventory.add(0x1000 * (i + 1), 64, A).unwrap();
        }
        assert_eq!(inventory.add(0x100_0000, 64, A), Err(InsertError::Full));
        assert!(inventory.is_overflowed(A));
        assert!(!inventory.is_overflowed(B), "another agent's snapshots are unaffected");
        assert_eq!(inventory.stats(A).overflowed, 1);
        let mut out = Vec::new();
        assert_eq!(inventory.gather(A, &mut out), Err(GatherError::Overflow));
        assert_eq!(inventory.del(0x100_0000), Some(None), "freeing the lost allocation is not NOT_FOUND");
        assert!(!inventory.is_overflowed(A));
        inventory.gather(A, &mut out).unwrap();
        assert_eq!(out.len(), 16);
        inventory.check_invariants();
    }

    #[test]
    fn an_allocation_of_unknown_owner_declines_every_agent_until_freed() {
        let inventory: Inventory<16, 32> = Inventory::new();
        inventory.set_enabled(true, true);
        inventory.add_unknown(0x5000);
        assert!(inventory.is_overflowed(A) && inventory.is_overflowed(B));
        inventory.del(0x5000);
        assert!(!inventory.is_overflowed(A) && !inventory.is_overflowed(B));
    }

    #[test]
    fn a_successful_retry_supersedes_the_lost_mark_of_the_same_allocation() {
        let inventory: Inventory<16, 32> = Inventory::new();
        inventory.set_enabled(true, true);
        inventory.add_unknown(0x5000);
        inventory.add(0x5000, 64, A).unwrap();
        assert!(!inventory.is_overflowed(A) && !inventory.is_overflowed(B));
        assert!(matches!(inventory.del(0x5000), Some(Some(_))));
        assert!(inventory.del(0x5000).is_none(), "one free takes it out entirely");
    }

    #[test]
    #[cfg_attr(miri, ignore = "fills the 4096-entry mapping table")]
    fn lost_mappings_end_with_the_unmaps_that_cover_them() {
        let inventory: Inventory<16, 32> = Inventory::new();
        inventory.set_enabled(true, true);
        let slice = 0x1000;
        for i in 0..VMEM_CAPACITY {
            inventory.insert_vmem(0x1000_0000 + i * slice, slice, A).unwrap();
        }
        let past = 0x1000_0000 + VMEM_CAPACITY * slice;
        assert_eq!(inventory.insert_vmem(past, 4 * slice, A), Err(InsertError::Full));
        assert!(inventory.is_overflowed(A) && !inventory.is_overflowed(B));
        // A hole in the middle keeps it; unmapping its head and then its tail ends it.
        assert_eq!(inventory.unmap(past + slice, slice).touched, 1);
        assert_eq!(inventory.unmap(past, slice).touched, 1);
        assert!(inventory.is_overflowed(A));
        assert_eq!(inventory.unmap(past + slice, 3 * slice).touched, 1);
        assert!(!inventory.is_overflowed(A));
        // The tail of a split that could not be stored ends when it is unmapped.
        let outcome = inventory.unmap(0x1000_0000 + 0x100, 0x100);
        assert!(outcome.lost);
        assert!(inventory.is_overflowed(A));
        assert_eq!(inventory.unmap(0x1000_0000 + 0x200, slice - 0x200).touched, 1);
        assert!(!inventory.is_overflowed(A));
        // A lost mapping is not ended by a free of the same address, nor a lost allocation by an unmap.
        inventory.add_unknown(0x7000_0000);
        assert_eq!(inventory.unmap(0x7000_0000, slice).touched, 0);
        assert!(inventory.is_overflowed(B));
        assert!(inventory.del(0x7000_0000).is_some());
        assert!(!inventory.is_overflowed(B));
    }

    #[test]
    fn a_reused_address_gets_a_new_generation() {
        let inventory: Inventory<16, 32> = Inventory::new();
        inventory.set_enabled(true, true);
        inventory.add(0x4000, 128, A).unwrap();
        let first = !inventory.is_live(0x4000, 0, 0);
        assert!(first, "generation 0 is never handed out");
        let mut out = Vec::new();
        inventory.gather(A, &mut out).unwrap();
        let old = out[0].generation;
        inventory.del(0x4000).unwrap();
        inventory.add(0x4000, 128, A).unwrap();
        out.clear();
        inventory.gather(A, &mut out).unwrap();
        assert_ne!(out[0].generation, old);
        assert!(!inventory.is_live(0x4000, old, 128));
        assert!(inventory.is_live(0x4000, out[0].generation, 128));
        assert!(!inventory.is_live(0x4000, out[0].generation, 129));
    }

    #[test]
    fn gather_returns_only_the_agents_regions() {
        let inventory: Inventory<64, 128> = Inventory::new();
        inventory.set_enabled(true, true);
        for i in 0..40 {
            inventory.add(0x10_0000 + i * 0x1000, 16, if i % 4 == 0 { A } else { B }).unwrap();
        }
        inventory.insert_vmem(0x9000_0000, 0x10000, A).unwrap();
        let mut out = Vec::new();
        inventory.gather(A, &mut out).unwrap();
        assert_eq!(out.len(), 11);
        assert!(out.iter().all(|r| r.agent == A));
        assert_eq!(out.iter().filter(|r| r.kind == RegionKind::VmemMapping).count(), 1);
    }

    #[test]
    fn a_mapping_of_unknown_owner_declines_every_agent_until_unmapped() {
        let inventory: Inventory<16, 32> = Inventory::new();
        inventory.set_enabled(true, true);
        inventory.insert_vmem_unknown(0x10000, 0x4000);
        assert!(inventory.is_overflowed(A) && inventory.is_overflowed(B));
        inventory.unmap(0x10000, 0x2000);
        assert!(inventory.is_overflowed(A), "half of the mapping is still there");
        inventory.unmap(0x12000, 0x2000);
        assert!(!inventory.is_overflowed(A) && !inventory.is_overflowed(B));
    }

    #[test]
    fn partial_unmaps_trim_and_split_mappings() {
        let inventory: Inventory<16, 32> = Inventory::new();
        inventory.set_enabled(true, true);
        inventory.insert_vmem(0x10000, 0x10000, A).unwrap();
        // Middle: split into [0x10000, 0x14000) and [0x18000, 0x20000).
        assert_eq!(inventory.unmap(0x14000, 0x4000).touched, 1);
        let mut out = Vec::new();
        inventory.gather(A, &mut out).unwrap();
        out.sort_by_key(|r| r.base);
        let ranges: Vec<_> = out.iter().map(|r| (r.base, r.size)).collect();
        assert_eq!(ranges, [(0x10000, 0x4000), (0x18000, 0x8000)]);
        // Head of the second piece, then the tail of the first.
        inventory.unmap(0x18000, 0x1000);
        inventory.unmap(0x13000, 0x1000);
        out.clear();
        inventory.gather(A, &mut out).unwrap();
        out.sort_by_key(|r| r.base);
        let ranges: Vec<_> = out.iter().map(|r| (r.base, r.size)).collect();
        assert_eq!(ranges, [(0x10000, 0x3000), (0x19000, 0x7000)]);
        // A range covering everything removes both.
        assert_eq!(inventory.unmap(0, 0x100000).touched, 2);
        assert!(inventory.is_empty());
        assert_eq!(inventory.unmap(0, 0x100000).touched, 0);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "four threads contending for the lock with back-off sleeps: minutes under Miri; `cargo test` runs it natively"
    )]
    fn concurrent_inserts_and_removes_keep_the_table_consistent() {
        static INVENTORY: Inventory<4096, 8192> = Inventory::new();
        let inventory = &INVENTORY;
        inventory.set_enabled(true, true);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let agent = Agent(t);
                    for round in 0..if cfg!(miri) { 4 } else { 200 } {
                        for i in 0..64 {
                            let base = ((t as usize) << 32) | ((i + 1) << 12);
                            inventory.add(base, round + 1, agent).unwrap();
                        }
                        for i in (0..64).step_by(2) {
                            let base = ((t as usize) << 32) | ((i + 1) << 12);
                            assert!(inventory.del(base).is_some());
                        }
                        for i in (0..64).step_by(2) {
                            let base = ((t as usize) << 32) | ((i + 1) << 12);
                            assert!(inventory.del(base).is_none());
                        }
                        for i in (1..64).step_by(2) {
                            let base = ((t as usize) << 32) | ((i + 1) << 12);
                            assert!(inventory.del(base).is_some());
                        }
                    }
                    for i in 0..10 {
                        inventory.add(((t as usize) << 32) | ((i + 1) << 12), 8, agent).unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        inventory.check_invariants();
        assert_eq!(inventory.len(), 40);
        for t in 0..4 {
            assert_eq!(inventory.stats(Agent(t)).regions, 10);
        }
    }

    fn key(inventory: &Inventory<64, 128>, base: usize) -> PinKey {
        let mut out = Vec::new();
        inventory.gather(A, &mut out).unwrap();
        let region = out.iter().find(|r| r.base == base).unwrap();
        PinKey { base, kind: region.kind, generation: region.generation, min_size: region.size, hint: 0 }
    }

    fn pin(inventory: &Inventory<64, 128>, key: PinKey) -> bool {
        let mut pinned = false;
        inventory.pin_each(core::iter::once(key), |ok| pinned = ok);
        pinned
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "threads waiting on each other with back-off sleeps: minutes under Miri; `cargo test` runs it natively"
    )]
    fn a_free_waits_for_the_pins_of_its_own_region_and_nothing_else_does() {
        static INVENTORY: Inventory<64, 128> = Inventory::new();
        let inventory = &INVENTORY;
        inventory.add(0x1000, 64, A).unwrap();
        inventory.add(0x2000, 64, A).unwrap();
        let pinned = key(inventory, 0x1000);
        assert!(pin(inventory, pinned));
        let freed = std::sync::Arc::new(AtomicBool::new(false));
        let waiter = {
            let freed = freed.clone();
            std::thread::spawn(move || {
                inventory.remove(0x1000, true).unwrap();
                freed.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(if cfg!(miri) { 5 } else { 50 }));
        assert!(!freed.load(Ordering::SeqCst), "the free did not wait for the copy in flight");
        // Unrelated frees and allocations go through while the pin is held.
        assert!(inventory.del(0x2000).is_some());
        inventory.add(0x3000, 64, B).unwrap();
        // The region being freed cannot be pinned again.
        assert!(!pin(inventory, pinned), "a dying region was pinned");
        inventory.unpin_each(core::iter::once(pinned));
        waiter.join().unwrap();
        assert!(freed.load(Ordering::SeqCst));
        assert_eq!(inventory.stats(A).regions, 0);
    }

    #[test]
    fn a_free_that_may_not_wait_leaves_a_pinned_region_tracked_and_pinnable() {
        let inventory: Inventory<64, 128> = Inventory::new();
        inventory.add(0x1000, 64, A).unwrap();
        let pinned = key(&inventory, 0x1000);
        assert!(pin(&inventory, pinned));
        assert_eq!(inventory.remove(0x1000, false), Err(RemoveError::InUse));
        assert!(pin(&inventory, pinned), "the refused free left the region dying");
        inventory.unpin_each([pinned, pinned].into_iter());
        assert!(inventory.remove(0x1000, false).is_ok(), "unpinned: removed without waiting");
    }

    #[test]
    fn an_insert_prepared_before_tracking_was_turned_off_is_refused() {
        let inventory: Inventory<64, 128> = Inventory::new();
        inventory.set_enabled(true, true);
        let epoch = inventory.epoch();
        inventory.set_enabled(false, true);
        assert_eq!(inventory.insert(0x1000, 64, A, epoch), Ok(None));
        inventory.set_enabled(true, true);
        assert_eq!(inventory.insert(0x1000, 64, A, epoch), Ok(None), "off and on again is another epoch");
        inventory.insert_unknown(0x9000, epoch);
        assert_eq!(inventory.len(), 0);
        assert!(!inventory.is_overflowed(A));
        inventory.insert(0x1000, 64, A, inventory.epoch()).unwrap();
        assert_eq!(inventory.len(), 1);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "threads waiting on each other with back-off sleeps: minutes under Miri; `cargo test` runs it natively"
    )]
    fn turning_tracking_off_waits_until_no_copy_touches_a_region() {
        static INVENTORY: Inventory<64, 128> = Inventory::new();
        let inventory = &INVENTORY;
        inventory.add(0x1000, 64, A).unwrap();
        let pinned = key(inventory, 0x1000);
        assert!(pin(inventory, pinned));
        let off = std::sync::Arc::new(AtomicBool::new(false));
        let toggler = {
            let off = off.clone();
            std::thread::spawn(move || {
                inventory.set_enabled(false, true);
                off.store(true, Ordering::SeqCst);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(if cfg!(miri) { 5 } else { 50 }));
        assert!(!off.load(Ordering::SeqCst), "tracking off returned while a copy was in flight");
        assert_eq!(inventory.len(), 0, "the regions are forgotten at once");
        inventory.unpin_each(core::iter::once(pinned));
        toggler.join().unwrap();
        assert_eq!(inventory.set_enabled(false, false), 0);
    }

    #[test]
    fn a_free_is_undone_with_its_generation() {
        let inventory: Inventory<64, 128> = Inventory::new();
        inventory.add(0x1000, 64, A).unwrap();
        let before = key(&inventory, 0x1000);
        inventory.del(0x1000).unwrap();
        inventory.undo_remove(0x1000).unwrap();
        assert_eq!(key(&inventory, 0x1000), before, "same region, same generation");
        assert!(pin(&inventory, before), "a snapshot taken before the free still restores it");
        inventory.unpin_each(core::iter::once(before));
        assert_eq!(inventory.undo_remove(0x1000), Err(RemoveError::NotFound), "undone once");
        assert_eq!(inventory.undo_remove(0x7000), Err(RemoveError::NotFound));
        // A lost allocation comes back as lost.
        inventory.add_unknown(0x5000);
        inventory.del(0x5000).unwrap();
        assert!(!inventory.is_overflowed(A));
        inventory.undo_remove(0x5000).unwrap();
        assert!(inventory.is_overflowed(A));
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "threads waiting on each other with back-off sleeps: minutes under Miri; `cargo test` runs it natively"
    )]
    fn an_unmap_waits_for_pinned_mappings_and_a_trimmed_mapping_can_be_pinned_again() {
        static INVENTORY: Inventory<64, 128> = Inventory::new();
        let inventory = &INVENTORY;
        inventory.set_enabled(true, true);
        inventory.insert_vmem(0x10000, 0x4000, A).unwrap();
        let whole = key(inventory, 0x10000);
        assert!(pin(inventory, whole));
        assert_eq!(inventory.remove_vmem(0x13000, 0x1000, false), Err(RemoveError::InUse));
        let unmapper = std::thread::spawn(move || inventory.unmap(0x13000, 0x1000).touched);
        std::thread::sleep(std::time::Duration::from_millis(if cfg!(miri) { 5 } else { 50 }));
        assert!(!unmapper.is_finished(), "the unmap did not wait for the copy in flight");
        inventory.unpin_each(core::iter::once(whole));
        assert_eq!(unmapper.join().unwrap(), 1);
        let head = key(inventory, 0x10000);
        assert_eq!(head.min_size, 0x3000);
        assert!(pin(inventory, head), "the surviving head is still dying");
        inventory.unpin_each(core::iter::once(head));
    }
}
