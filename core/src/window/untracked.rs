//! Untracked memory: allocations and mappings the record calls saw but classification leaves out of snapshots
//! (fine-grained, host, managed, kernarg, executable memory, and mappings of unknown owner). A snapshot that
//! leaves out memory the kernel writes is sound but useless, so a window reports what is live of each kind and
//! may decline on it.
//!
//! Remembered by base in a fixed table of their own until freed (or unmapped); an allocation that does not fit
//! is counted as an overflow, never an error. The table is behind a spin mutex that no copy holds, and the free
//! path looks at it only for a pointer the inventory does not track, and only while the table is not empty.

use arrayvec::ArrayVec;
use core::sync::atomic::{AtomicUsize, Ordering};

use super::outcome::UntrackedStats;
use crate::lock::Mutex;
use crate::types::{Agent, AllocFlags, GlobalFlags, PointerInfo, PointerType};

/// Untracked allocations and mappings remembered at once, process-wide.
pub const UNTRACKED_CAPACITY: usize = 4096;

crate::error::c_enum! {
    /// Kinds of memory seen and not captured; the discriminants are the C API's `kreplay_untracked_kind_t`, the
    /// texts the outcome line's keys.
    pub enum UntrackedKind, unknown "unknown" {
        #[doc = "Device memory that is not coarse-grained (graphics and IPC memory too)."] FineGrained = 0 => "fine",
        #[doc = "Host memory the device can address."] Host = 1 => "host",
        #[doc = "Unified / managed memory."] Managed = 2 => "managed",
        #[doc = "Kernel-argument memory."] Kernarg = 3 => "kernarg",
        #[doc = "Allocations made with the executable flag."] Executable = 4 => "exec",
        #[doc = "Virtual-memory mappings recorded with an unknown owner."] VmemUnknown = 5 => "vmem",
    }
}

/// Number of [`UntrackedKind`]s.
pub const UNTRACKED_KINDS: usize = UntrackedKind::ALL.len();

impl UntrackedKind {
    /// The short name the outcome line uses.
    pub const fn key(self) -> &'static str {
        self.describe()
    }

    /// The kind of an allocation that the record path does not track, or `None` for memory that is not the
    /// device's business at all (a pointer the runtime does not know). Mirrors the decisions of
    /// `Engine::record_alloc`: the executable flag first, then the pointer query.
    pub fn of_allocation(alloc_flags: u32, info: Option<&PointerInfo>) -> Option<UntrackedKind> {
        if AllocFlags::from_bits_truncate(alloc_flags).contains(AllocFlags::EXECUTABLE) {
            return Some(UntrackedKind::Executable);
        }
        let info = info?;
        if info.is_snapshottable() {
            return None;
        }
        match info.kind {
            PointerType::Unknown => None,
            PointerType::Locked => Some(UntrackedKind::Host),
            PointerType::Managed => Some(UntrackedKind::Managed),
            PointerType::Device | PointerType::Graphics | PointerType::Ipc => {
                if info.global_flags.contains(GlobalFlags::KERNARG) {
                    Some(UntrackedKind::Kernarg)
                } else {
                    Some(UntrackedKind::FineGrained)
                }
            }
        }
    }
}

#[derive(Copy, Clone, Debug)]
struct Entry {
    /// 0: an empty slot (recorded addresses are never null).
    base: usize,
    size: usize,
    /// `None` when the owner is unknown: counted for every agent.
    agent: Option<Agent>,
    kind: UntrackedKind,
}

impl Entry {
    const EMPTY: Entry = Entry { base: 0, size: 0, agent: None, kind: UntrackedKind::FineGrained };
}

/// Mappings of unknown owner remembered at once (an unmap may name any part of one, so they are kept in a list).
pub const UNTRACKED_MAPPINGS: usize = 256;
const SLOTS: usize = 2 * UNTRACKED_CAPACITY;
const MASK: usize = SLOTS - 1;

/// Allocations by base (open addressing, linear probing, backward-shift deletion, load at most one half), and
/// mappings in a list.
///
/// # Invariants
/// - `len` is the number of non-empty slots, at most [`UNTRACKED_CAPACITY`].
/// - An entry is reachable from its home slot by linear probing without crossing an empty slot.
struct Table {
    slots: [Entry; SLOTS],
    len: usize,
    mappings: ArrayVec<Entry, UNTRACKED_MAPPINGS>,
}

fn home(base: usize) -> usize {
    ((base as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
}

impl Table {
    fn find(&self, base: usize) -> Result<usize, usize> {
        let mut at = home(base);
        loop {
            match self.slots[at].base {
                0 => return Err(at),
                b if b == base => return Ok(at),
                _ => at = (at + 1) & MASK,
            }
        }
    }

    fn remove_at(&mut self, mut hole: usize) {
        self.slots[hole] = Entry::EMPTY;
        self.len -= 1;
        let mut at = hole;
        loop {
            at = (at + 1) & MASK;
            let base = self.slots[at].base;
            if base == 0 {
                return;
            }
            // The entry may fill the hole unless its home lies cyclically in (hole, at].
            let from_home = at.wrapping_sub(home(base)) & MASK;
            if from_home >= at.wrapping_sub(hole) & MASK {
                self.slots[hole] = self.slots[at];
                self.slots[at] = Entry::EMPTY;
                hole = at;
            }
        }
    }
}

/// The table.
pub struct Untracked {
    table: Mutex<Table>,
    /// Allocations and mappings remembered, so the record paths skip the lock while nothing is.
    live: AtomicUsize,
    /// Allocations and mappings that did not fit, over the life of the process.
    overflowed: AtomicUsize,
}

impl Default for Untracked {
    fn default() -> Self {
        Self::new()
    }
}

impl Untracked {
    /// Empty.
    pub const fn new() -> Self {
        Untracked {
            table: Mutex::new(Table { slots: [Entry::EMPTY; SLOTS], len: 0, mappings: ArrayVec::new_const() }),
            live: AtomicUsize::new(0),
            overflowed: AtomicUsize::new(0),
        }
    }

    fn publish(&self, table: &Table) {
        self.live.store(table.len + table.mappings.len(), Ordering::Release);
    }

    /// Remembers an allocation of `kind` at `base` (not null) until [`Untracked::remove`] of that base; one
    /// already remembered there (its free was never recorded) is replaced. Returns false when the table is full
    /// (the overflow is counted).
    pub fn insert(&self, base: usize, size: usize, agent: Option<Agent>, kind: UntrackedKind) -> bool {
        if base == 0 {
            return false;
        }
        let entry = Entry { base, size, agent, kind };
        let mut table = self.table.lock();
        let fitted = match table.find(base) {
            Ok(at) => {
                table.slots[at] = entry;
                true
            }
            Err(at) if table.len < UNTRACKED_CAPACITY => {
                table.slots[at] = entry;
                table.len += 1;
                true
            }
            Err(_) => false,
        };
        self.publish(&table);
        drop(table);
        if !fitted {
            self.overflowed.fetch_add(1, Ordering::Relaxed);
        }
        fitted
    }

    /// Remembers a mapping of unknown owner until unmaps cover it; false when the list is full (counted).
    pub fn insert_mapping(&self, base: usize, size: usize) -> bool {
        let mut table = self.table.lock();
        let lost = unmap_from(&mut table.mappings, base, size);
        let entry = Entry { base, size, agent: None, kind: UntrackedKind::VmemUnknown };
        let fitted = table.mappings.try_push(entry).is_ok();
        self.publish(&table);
        drop(table);
        self.overflowed.fetch_add(lost + usize::from(!fitted), Ordering::Relaxed);
        fitted
    }

    /// Forgets the allocation remembered at `base`; whether there was one. One atomic load while nothing is
    /// remembered.
    pub fn remove(&self, base: usize) -> bool {
        if self.live.load(Ordering::Acquire) == 0 || base == 0 {
            return false;
        }
        let mut table = self.table.lock();
        let Ok(at) = table.find(base) else { return false };
        table.remove_at(at);
        self.publish(&table);
        true
    }

    /// Takes `[base, base + size)` out of the remembered mappings: covered ones are forgotten, cut ones keep the
    /// parts outside it (an unmap inside a mapping splits it; a part with no room is counted as overflow).
    pub fn unmap(&self, base: usize, size: usize) {
        if self.live.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut table = self.table.lock();
        let lost = unmap_from(&mut table.mappings, base, size);
        self.publish(&table);
        drop(table);
        self.overflowed.fetch_add(lost, Ordering::Relaxed);
    }

    /// Forgets everything (tracking was turned off: frees are no longer seen).
    pub fn clear(&self) {
        let mut table = self.table.lock();
        table.slots.fill(Entry::EMPTY);
        table.len = 0;
        table.mappings.clear();
        self.publish(&table);
    }

    /// What is live for `agent` (entries of unknown owner count for every agent).
    pub fn stats(&self, agent: Agent) -> UntrackedStats {
        let mut stats = UntrackedStats { overflowed: self.overflowed.load(Ordering::Relaxed), ..Default::default() };
        if self.live.load(Ordering::Acquire) == 0 {
            return stats;
        }
        let table = self.table.lock();
        let entries = table.slots.iter().filter(|e| e.base != 0).chain(table.mappings.iter());
        for entry in entries.filter(|e| e.agent.is_none_or(|a| a == agent)) {
            let kind = entry.kind as usize;
            stats.count[kind] += 1;
            stats.bytes[kind] = stats.bytes[kind].saturating_add(entry.size);
        }
        stats
    }
}

/// Takes `[base, base + size)` out of `mappings`: a mapping it covers goes, one it cuts keeps the parts on either
/// side (an unmap inside a mapping splits it in two). Returns how many parts found no room (counted as overflow).
fn unmap_from(mappings: &mut ArrayVec<Entry, UNTRACKED_MAPPINGS>, base: usize, size: usize) -> usize {
    let end = base.saturating_add(size);
    let mut right_parts: ArrayVec<Entry, UNTRACKED_MAPPINGS> = ArrayVec::new();
    mappings.retain(|e| {
        let e_end = e.base.saturating_add(e.size);
        if e_end <= base || end <= e.base {
            return true;
        }
        if end < e_end {
            let _ = right_parts.try_push(Entry { base: end, size: e_end - end, ..*e });
        }
        if e.base < base {
            e.size = base - e.base;
            return true;
        }
        false
    });
    let mut lost = 0;
    for part in right_parts {
        if mappings.try_push(part).is_err() {
            lost += 1;
        }
    }
    lost
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_counted_per_agent_and_kind_until_freed_and_unknown_owners_count_everywhere() {
        static TABLE: Untracked = Untracked::new();
        let table = &TABLE;
        assert!(table.insert(0x1000, 64, Some(Agent(1)), UntrackedKind::Host));
        assert!(table.insert(0x2000, 128, Some(Agent(2)), UntrackedKind::Host));
        assert!(table.insert(0x3000, 32, None, UntrackedKind::Executable));
        let one = table.stats(Agent(1));
        assert_eq!((one.count[1], one.bytes[1], one.count[4], one.bytes[4]), (1, 64, 1, 32));
        assert_eq!(table.stats(Agent(2)).bytes[1], 128);
        assert!(table.remove(0x1000));
        assert!(!table.remove(0x1000), "a second free finds nothing");
        assert_eq!(table.stats(Agent(1)).count[1], 0);
        assert_eq!(table.stats(Agent(1)).count[4], 1);
    }

    #[test]
    fn a_full_table_counts_the_overflow_and_keeps_working() {
        static TABLE: Untracked = Untracked::new();
        let table = &TABLE;
        for i in 0..UNTRACKED_CAPACITY {
            assert!(table.insert(0x1000 * (i + 1), 1, Some(Agent(1)), UntrackedKind::Kernarg));
        }
        assert!(!table.insert(0x1000 * (UNTRACKED_CAPACITY + 1), 1, Some(Agent(1)), UntrackedKind::Kernarg));
        let stats = table.stats(Agent(1));
        assert_eq!((stats.count[3], stats.overflowed), (UNTRACKED_CAPACITY, 1));
        // Every entry is still found after many backward shifts.
        for i in (0..UNTRACKED_CAPACITY).step_by(2) {
            assert!(table.remove(0x1000 * (i + 1)));
        }
        for i in 0..UNTRACKED_CAPACITY {
            assert_eq!(table.remove(0x1000 * (i + 1)), i % 2 == 1, "entry {i}");
        }
        assert_eq!(table.stats(Agent(1)).count[3], 0);
    }

    #[test]
    fn mappings_of_unknown_owner_shrink_with_partial_unmaps_and_go_when_covered() {
        static TABLE: Untracked = Untracked::new();
        let table = &TABLE;
        assert!(table.insert_mapping(0x10000, 0x4000));
        table.unmap(0x10000, 0x1000);
        assert_eq!(table.stats(Agent(9)).bytes[5], 0x3000);
        table.unmap(0x12000, 0x1000);
        assert_eq!((table.stats(Agent(9)).count[5], table.stats(Agent(9)).bytes[5]), (2, 0x2000), "split in two");
        table.unmap(0x0, 0x100000);
        assert_eq!(table.stats(Agent(9)).count[5], 0);
    }

    #[test]
    fn a_mapping_unmapped_piece_by_piece_from_the_inside_is_gone_at_the_end() {
        static TABLE: Untracked = Untracked::new();
        let table = &TABLE;
        assert!(table.insert_mapping(0x10000, 0x4000));
        table.unmap(0x11000, 0x1000);
        table.unmap(0x12000, 0x2000);
        assert_eq!((table.stats(Agent(9)).count[5], table.stats(Agent(9)).bytes[5]), (1, 0x1000));
        table.unmap(0x10000, 0x1000);
        assert_eq!((table.stats(Agent(9)).count[5], table.stats(Agent(9)).bytes[5]), (0, 0));
        assert_eq!(table.stats(Agent(9)).overflowed, 0);
    }

    #[test]
    fn classification_follows_the_record_path() {
        let info = |kind, flags: u32| PointerInfo {
            kind,
            global_flags: GlobalFlags::from_bits_retain(flags),
            owner: Agent(1),
            base: 0,
            size: 0,
        };
        let of = |i: PointerInfo| UntrackedKind::of_allocation(0, Some(&i));
        assert_eq!(UntrackedKind::of_allocation(AllocFlags::EXECUTABLE.bits(), None), Some(UntrackedKind::Executable));
        assert_eq!(of(info(PointerType::Device, 4)), None, "coarse-grained device memory is tracked");
        assert_eq!(of(info(PointerType::Device, 2)), Some(UntrackedKind::FineGrained));
        assert_eq!(of(info(PointerType::Device, 5)), Some(UntrackedKind::Kernarg));
        assert_eq!(of(info(PointerType::Locked, 2)), Some(UntrackedKind::Host));
        assert_eq!(of(info(PointerType::Managed, 2)), Some(UntrackedKind::Managed));
        assert_eq!(of(info(PointerType::Unknown, 0)), None);
    }
}
