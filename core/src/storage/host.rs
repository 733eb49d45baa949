//! Host staging: per-agent host memory that holds captured contents, retained across dispatches so that the
//! per-dispatch cost is the copy and nothing else.
//!
//! - Storage comes from [`crate::host_memory`] (anonymous mmap) and is never zero-filled by the library.
//! - Reuse is best fit within `[size, 2 * size]`, so a small request cannot take a buffer that a later,
//!   larger one would have to map again.
//! - An agent's pool never hands storage to another agent.
//! - Requests of at most [`SMALL_MAX`] bytes are served from per-agent slabs: a 64 KiB chunk is cut into
//!   slots of one size class, so hundreds of tiny module variables cost neither a system call nor a page each.
//! - The pools live in a static that is never destroyed: a buffer released during the host's static
//!   destruction still has a pool to go back to.
//!
//! - A pool that holds nothing is given up, so a process that sees many agents over its life never runs out
//!   of pools for good.
//!
//! Everything is in fixed-capacity tables behind per-agent spin mutexes; nothing is logged under them. Nothing
//! here knows about devices: page-locked blocks are unlocked through a callback the caller supplies.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};

use arrayvec::ArrayVec;

use super::blocks::{Block, BlockPool, next_loan};
use super::slots::{AgentSlots, Claimed};
use crate::error::{Error, Result};
use crate::host_memory;
use crate::opsets::OpsHold;
use crate::types::Agent;

pub use super::blocks::BLOCKS_PER_AGENT;
pub use super::slots::MAX_AGENTS;
/// The largest request served from a slab.
pub const SMALL_MAX: usize = 2048;
const SMALL_CLASSES: [usize; 8] = [16, 32, 64, 128, 256, 512, 1024, 2048];
/// Slab chunks per size class and agent. Fewer in the core's own tests and under Miri: every test's engine is a
/// separate static, the chunks' loan tags are most of an engine's size (29 of its 45 MB), and with 16 chunks the
/// test binary's statics pass the 2 GiB that x86-64's default code model can address (the link fails). The C
/// tests and the library itself keep 16.
const CHUNKS_PER_CLASS: usize = if cfg!(any(miri, test)) { 2 } else { 16 };
const MAX_SLOTS_PER_CHUNK: usize = 512;
const CHUNK_BYTES: usize = 64 << 10;

/// Host storage lent by a pool. It must go back through [`Pools::release`] (or the snapshot that owns it).
#[derive(Debug, PartialEq, Eq)]
pub struct Lease {
    /// Start of the storage.
    pub data: NonNull<u8>,
    /// Bytes asked for.
    pub size: usize,
    /// Bytes usable (at least `size`).
    pub capacity: usize,
    /// The pool it came from.
    pub agent: Agent,
    /// The set of ops the storage is page-locked through (it stays locked while retained), if it is.
    pub hold: Option<OpsHold>,
    /// Identifies this loan: a stale copy of a lease whose storage has since been lent again is refused.
    pub loan: u64,
}

impl Lease {
    /// Whether the storage is page-locked.
    pub fn is_locked(&self) -> bool {
        self.hold.is_some()
    }
}

/// One mapping cut into equal slots.
///
/// # Invariants
/// Bit `i` of `free` is set exactly when slot `i` (at `base + i * class size`) is idle; `idle` counts the set
/// bits; bits at or above `slots` are never set.
#[derive(Copy, Clone, Debug)]
struct Chunk {
    base: NonNull<u8>,
    free: [u64; MAX_SLOTS_PER_CHUNK / 64],
    slots: u16,
    idle: u16,
    /// The loan number of each lent slot.
    tags: [u64; MAX_SLOTS_PER_CHUNK],
}

impl Chunk {
    fn new(base: NonNull<u8>, slots: usize) -> Self {
        let mut free = [0u64; MAX_SLOTS_PER_CHUNK / 64];
        for (word, bits) in free.iter_mut().enumerate() {
            let first = word * 64;
            *bits = match slots.saturating_sub(first) {
                0 => 0,
                n if n >= 64 => u64::MAX,
                n => (1u64 << n) - 1,
            };
        }
        Chunk { base, free, slots: slots as u16, idle: slots as u16, tags: [0; MAX_SLOTS_PER_CHUNK] }
    }

    fn take(&mut self, loan: u64) -> Option<usize> {
        let word = self.free.iter().position(|&w| w != 0)?;
        let bit = self.free[word].trailing_zeros() as usize;
        self.free[word] &= !(1u64 << bit);
        self.idle -= 1;
        let slot = word * 64 + bit;
        self.tags[slot] = loan;
        Some(slot)
    }

    /// Returns slot `slot` lent under `loan`; false when it is idle already or lent under another loan (a
    /// stale copy released after the slot went to a new owner).
    fn give_back(&mut self, slot: usize, loan: u64) -> bool {
        let (word, bit) = (slot / 64, slot % 64);
        if slot >= self.slots as usize || self.free[word] & (1u64 << bit) != 0 || self.tags[slot] != loan {
            return false;
        }
        self.free[word] |= 1u64 << bit;
        self.idle += 1;
        true
    }

    fn is_idle(&self) -> bool {
        self.idle == self.slots
    }
}

const fn class_index(size: usize) -> usize {
    let mut i = 0;
    while SMALL_CLASSES[i] < size {
        i += 1;
    }
    i
}

const fn slots_per_chunk(class_size: usize) -> usize {
    let slots = CHUNK_BYTES / class_size;
    if slots > MAX_SLOTS_PER_CHUNK { MAX_SLOTS_PER_CHUNK } else { slots }
}

/// One agent's host storage: page-backed blocks and slabs.
pub(crate) struct AgentPool {
    blocks: BlockPool,
    slabs: [ArrayVec<Chunk, CHUNKS_PER_CLASS>; SMALL_CLASSES.len()],
}

// SAFETY: the pointers in a pool are addresses of mappings the pool owns; they are only read or written under
// the slot's mutex, and the memory behind them is handed out only through leases.
unsafe impl Send for AgentPool {}

impl Claimed for AgentPool {
    const EMPTY: Self =
        AgentPool { blocks: BlockPool::new(), slabs: [const { ArrayVec::new_const() }; SMALL_CLASSES.len()] };

    fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.slabs.iter().all(|chunks| chunks.is_empty())
    }
}

impl AgentPool {
    fn retained_bytes(&self) -> usize {
        let blocks = self.blocks.idle_bytes();
        let slabs: usize = self
            .slabs
            .iter()
            .zip(SMALL_CLASSES)
            .map(|(chunks, class)| {
                chunks.iter().filter(|c| c.is_idle()).map(|c| c.slots as usize * class).sum::<usize>()
            })
            .sum();
        blocks + slabs
    }
}

/// Memory to give back to the system, collected under a pool's lock and unmapped outside it.
struct Victim {
    ptr: NonNull<u8>,
    len: usize,
    hold: Option<OpsHold>,
}

const TRIM_BATCH: usize = 64;

/// The staging pools of every agent.
pub struct Pools {
    slots: AgentSlots<AgentPool>,
    /// Bytes these pools have mapped and not unmapped (idle and lent): the staging the host budget counts as
    /// kreplay's (`storage::host_budget`).
    mapped: AtomicUsize,
}

impl Default for Pools {
    fn default() -> Self {
        Self::new()
    }
}

impl Pools {
    /// Empty pools.
    pub const fn new() -> Self {
        Pools { slots: AgentSlots::new(), mapped: AtomicUsize::new(0) }
    }

    /// Storage for `size` bytes from `agent`'s pool: a slab slot for small requests, else the best-fitting
    /// retained block, else a new mapping.
    pub fn acquire(&self, agent: Agent, size: usize) -> Result<Lease> {
        if size == 0 {
            return Err(Error::InvalidArgument);
        }
        if size <= SMALL_MAX {
            if let Some(lease) = self.acquire_small(agent, size)? {
                return Ok(lease);
            }
        }
        self.acquire_block(agent, size, size)
    }

    /// A page-backed block of at least `size` bytes. A new mapping gets `reserve` (at least `size`) bytes,
    /// so that a footprint that grows a little can still reuse it later.
    pub fn acquire_block(&self, agent: Agent, size: usize, reserve: usize) -> Result<Lease> {
        if size == 0 {
            return Err(Error::InvalidArgument);
        }
        let reserve = reserve.max(size);
        let len = host_memory::mapping_len(reserve)
            .filter(|&len| len <= isize::MAX as usize)
            .ok_or(Error::InvalidArgument)?;
        let lease = |loaned: super::blocks::Loaned| Lease {
            data: loaned.ptr,
            size,
            capacity: loaned.capacity,
            agent,
            hold: loaned.hold,
            loan: loaned.loan,
        };
        if let Some(loaned) = self.slots.with_or_claim(agent, |pool| pool.blocks.take_best_fit(size))? {
            return Ok(lease(loaned));
        }
        let data = host_memory::map(len)?;
        self.mapped.fetch_add(len, Ordering::Relaxed);
        let added = self.slots.with_or_claim(agent, |pool| pool.blocks.add_lent(Block::new(data, len, None)));
        match added {
            Ok(Some(loaned)) => Ok(lease(loaned)),
            failed => {
                // SAFETY: `data` is the mapping of `len` bytes made above, not yet shared with anyone.
                unsafe { host_memory::unmap(data, len) };
                self.mapped.fetch_sub(len, Ordering::Relaxed);
                if failed.is_ok() {
                    crate::log!(
                        crate::log::Level::Warning,
                        "agent {:#x}: staging pool tracks {} blocks already; release or trim some",
                        agent.0,
                        BLOCKS_PER_AGENT
                    );
                }
                Err(Error::CapacityExceeded)
            }
        }
    }

    /// `Ok(None)` when the slab for this class is full and the request should take a block instead.
    fn acquire_small(&self, agent: Agent, size: usize) -> Result<Option<Lease>> {
        let class = class_index(size);
        let class_size = SMALL_CLASSES[class];
        let loan = next_loan();
        let lease = |base: NonNull<u8>, index: usize| Lease {
            // SAFETY: `index < slots`, so the slot lies inside the chunk's mapping, and a pointer into a mapping
            // is never null.
            data: unsafe { base.add(index * class_size) },
            size,
            capacity: class_size,
            agent,
            hold: None,
            loan,
        };
        let taken = self.slots.with_or_claim(agent, |pool| {
            for chunk in pool.slabs[class].iter_mut() {
                if let Some(index) = chunk.take(loan) {
                    return Some(Some((chunk.base, index)));
                }
            }
            if pool.slabs[class].is_full() { Some(None) } else { None }
        })?;
        match taken {
            Some(Some((base, index))) => return Ok(Some(lease(base, index))),
            Some(None) => return Ok(None),
            None => {}
        }
        let slots = slots_per_chunk(class_size);
        let len = slots * class_size;
        let data = host_memory::map(len)?;
        self.mapped.fetch_add(len, Ordering::Relaxed);
        let mut chunk = Chunk::new(data, slots);
        let index = chunk.take(loan).ok_or(Error::Internal)?;
        let added = self.slots.with_or_claim(agent, |pool| pool.slabs[class].try_push(chunk).is_ok());
        if added != Ok(true) {
            // Another thread filled the class meanwhile, or no slot is left.
            // SAFETY: `data` is the mapping of `len` bytes made above, not yet shared with anyone.
            unsafe { host_memory::unmap(data, len) };
            self.mapped.fetch_sub(len, Ordering::Relaxed);
            return added.map(|_| None);
        }
        Ok(Some(lease(data, index)))
    }

    /// Returns storage lent under `loan` to its agent's pool. `NotFound` (and nothing changes) when that loan is
    /// not outstanding in that pool: never lent, released already, lent again since (a stale copy), or released
    /// to the wrong agent.
    pub fn release(&self, agent: Agent, data: NonNull<u8>, capacity: usize, loan: u64) -> Result<()> {
        let addr = data.as_ptr() as usize;
        let released = self.slots.with(agent, |pool| {
            if capacity <= SMALL_MAX {
                let class = class_index(capacity.max(1));
                let class_size = SMALL_CLASSES[class];
                if class_size == capacity {
                    for chunk in pool.slabs[class].iter_mut() {
                        let start = chunk.base.as_ptr() as usize;
                        let end = start + chunk.slots as usize * class_size;
                        if addr >= start && addr < end && (addr - start) % class_size == 0 {
                            return chunk.give_back((addr - start) / class_size, loan);
                        }
                    }
                }
            }
            pool.blocks.give_back(data, capacity, loan)
        });
        if released == Some(true) { Ok(()) } else { Err(Error::NotFound) }
    }

    /// Records that a lent block is now page-locked through `hold`'s set of ops (or no longer), so that it is
    /// unlocked through that set before it is unmapped. False when the lease is not outstanding.
    pub fn set_hold(&self, lease: &mut Lease, hold: Option<OpsHold>) -> bool {
        let recorded = self.slots.with(lease.agent, |pool| pool.blocks.set_hold(lease.loan, lease.data, hold));
        if recorded == Some(true) {
            lease.hold = hold;
            true
        } else {
            false
        }
    }

    /// Unmaps all of `agent`'s idle storage, calling `unlock` first for page-locked blocks (with the hold to
    /// unlock through and give back). No lock is held during `unlock`.
    pub fn trim(&self, agent: Agent, unlock: &mut dyn FnMut(NonNull<u8>, usize, OpsHold)) {
        loop {
            let mut victims: ArrayVec<Victim, TRIM_BATCH> = ArrayVec::new();
            let found = self.slots.with(agent, |pool| {
                while !victims.is_full() {
                    let Some(block) = pool.blocks.pop_idle() else { break };
                    victims.push(Victim { ptr: block.ptr, len: block.capacity, hold: block.hold });
                }
                for (class, chunks) in pool.slabs.iter_mut().enumerate() {
                    let len = slots_per_chunk(SMALL_CLASSES[class]) * SMALL_CLASSES[class];
                    let mut i = 0;
                    while i < chunks.len() && !victims.is_full() {
                        if !chunks[i].is_idle() {
                            i += 1;
                            continue;
                        }
                        let chunk = chunks.swap_remove(i);
                        victims.push(Victim { ptr: chunk.base, len, hold: None });
                    }
                }
            });
            if found.is_none() || victims.is_empty() {
                return;
            }
            for victim in victims {
                if let Some(hold) = victim.hold {
                    unlock(victim.ptr, victim.len, hold);
                }
                // SAFETY: the victim was an idle mapping of this pool, removed from it under the lock, so nothing
                // else can reach it; ptr and len are exactly what `map` returned.
                unsafe { host_memory::unmap(victim.ptr, victim.len) };
                self.mapped.fetch_sub(victim.len, Ordering::Relaxed);
            }
        }
    }

    /// Forgets that `agent`'s blocks, idle and lent, are page-locked, without unlocking them: the registration
    /// went with the device context. A block is locked again the next time a capture that pins takes it.
    /// `release` gets every hold cleared (called with no lock held).
    pub fn forget_locks(&self, agent: Agent, release: &mut dyn FnMut(OpsHold)) {
        let mut holds: ArrayVec<OpsHold, BLOCKS_PER_AGENT> = ArrayVec::new();
        self.slots.with(agent, |pool| {
            // Never full: a pool has at most one hold per block.
            pool.blocks.forget_holds(&mut |hold| {
                let _ = holds.try_push(hold);
            });
        });
        for hold in holds {
            release(hold);
        }
    }

    /// Bytes of idle storage `agent`'s pool holds: idle blocks and wholly idle slab chunks (what a trim unmaps).
    pub fn retained_bytes(&self, agent: Agent) -> usize {
        self.slots.with(agent, |pool| pool.retained_bytes()).unwrap_or(0)
    }

    /// Bytes these pools hold mapped, idle and lent, for every agent.
    pub fn mapped_bytes(&self) -> usize {
        self.mapped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pools are megabytes of fixed tables: each test gets its own static rather than a stack copy.
    macro_rules! pools {
        () => {{
            static POOLS: Pools = Pools::new();
            &POOLS
        }};
    }

    fn no_unlock() -> impl FnMut(NonNull<u8>, usize, OpsHold) {
        |_, _, _| panic!("nothing here is page-locked")
    }

    #[test]
    fn a_fresh_block_is_sized_to_the_request_writable_and_nothing_is_retained() {
        let pools = pools!();
        let agent = Agent(1);
        let lease = pools.acquire(agent, 100_000).unwrap();
        assert_eq!(lease.size, 100_000);
        assert!(lease.capacity >= 100_000);
        // SAFETY: the lease is `capacity` writable bytes.
        unsafe { core::ptr::write_bytes(lease.data.as_ptr(), 0x5A, lease.capacity) };
        assert_eq!(pools.retained_bytes(agent), 0);
        pools.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
        assert_eq!(pools.retained_bytes(agent), lease.capacity);
        pools.trim(agent, &mut no_unlock());
        assert_eq!(pools.retained_bytes(agent), 0);
    }

    #[test]
    fn reuse_is_best_fit_within_twice_the_request() {
        let pools = pools!();
        let agent = Agent(2);
        let big = pools.acquire(agent, 100 << 10).unwrap();
        pools.release(agent, big.data, big.capacity, big.loan).unwrap();
        let small = pools.acquire(agent, 40 << 10).unwrap();
        assert_ne!(small.data, big.data, "a 40 KiB request must not take a 100 KiB block");
        let fits = pools.acquire(agent, 60 << 10).unwrap();
        assert_eq!(fits.data, big.data, "a 60 KiB request takes the 100 KiB block");
        for lease in [small, fits] {
            pools.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
        }
        pools.trim(agent, &mut no_unlock());
    }

    #[test]
    fn tiny_requests_share_a_chunk_and_are_reused_without_mapping() {
        let pools = pools!();
        let agent = Agent(3);
        let first: Vec<_> = (1..=256).map(|size| pools.acquire(agent, size).unwrap()).collect();
        for lease in &first {
            pools.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
        }
        let first: std::collections::HashSet<_> = first.iter().map(|lease| lease.data).collect();
        for round in 0..if cfg!(miri) { 100 } else { 1000 } {
            let size = round % 256 + 1;
            let lease = pools.acquire(agent, size).unwrap();
            assert!(lease.capacity >= size && lease.capacity <= 256.max(2 * size).max(16));
            assert!(first.contains(&lease.data), "a steady-state tiny request got storage that was not retained");
            pools.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
        }
        assert!(pools.retained_bytes(agent) > 0);
        pools.trim(agent, &mut no_unlock());
        assert_eq!(pools.retained_bytes(agent), 0);
    }

    #[test]
    fn double_and_foreign_releases_are_refused() {
        let pools = pools!();
        let (a, b) = (Agent(4), Agent(5));
        let small = pools.acquire(a, 10).unwrap();
        let large = pools.acquire(a, 1 << 20).unwrap();
        let _ = pools.acquire(b, 10).unwrap();
        assert_eq!(pools.release(b, small.data, small.capacity, small.loan), Err(Error::NotFound));
        pools.release(a, small.data, small.capacity, small.loan).unwrap();
        assert_eq!(pools.release(a, small.data, small.capacity, small.loan), Err(Error::NotFound));
        pools.release(a, large.data, large.capacity, large.loan).unwrap();
        assert_eq!(pools.release(a, large.data, large.capacity, large.loan), Err(Error::NotFound));
        pools.trim(a, &mut no_unlock());
    }

    #[test]
    fn a_stale_copy_cannot_release_storage_lent_again_to_a_new_owner() {
        let pools = pools!();
        let agent = Agent(10);
        for size in [64, 256 << 10] {
            let first = pools.acquire(agent, size).unwrap();
            let stale = (first.data, first.capacity, first.loan);
            pools.release(agent, first.data, first.capacity, first.loan).unwrap();
            let second = pools.acquire(agent, size).unwrap();
            assert_eq!(second.data, stale.0, "the same storage is lent again");
            assert_eq!(pools.release(agent, stale.0, stale.1, stale.2), Err(Error::NotFound));
            let third = pools.acquire(agent, size).unwrap();
            assert_ne!(third.data, second.data, "storage still lent was handed to a second owner");
            for lease in [second, third] {
                pools.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
            }
        }
        pools.trim(agent, &mut no_unlock());
    }

    #[test]
    fn a_crowded_pool_still_hands_out_the_best_fit_and_keeps_lent_blocks_apart() {
        let pools = pools!();
        let agent = Agent(11);
        let page = host_memory::page_size();
        // 60 blocks of 3 to 62 pages, released largest first.
        let mut leases: Vec<Lease> = (3..63).map(|pages| pools.acquire(agent, pages * page).unwrap()).collect();
        let mut idle: Vec<usize> = leases.iter().map(|lease| lease.capacity).collect();
        leases.reverse();
        for lease in leases.drain(..) {
            pools.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
        }
        let mut lent = Vec::new();
        for pages in [40, 3, 17, 17, 33, 61, 100, 1] {
            let size = pages * page - page / 2;
            let expected = idle.iter().copied().filter(|&c| c >= size && c <= 2 * size).min();
            let lease = pools.acquire_block(agent, size, size).unwrap();
            match expected {
                Some(capacity) => {
                    assert_eq!(lease.capacity, capacity, "not the best fit for {size} bytes");
                    idle.remove(idle.iter().position(|&c| c == capacity).unwrap());
                }
                None => assert!(!idle.contains(&lease.capacity) || lease.capacity > 2 * size),
            }
            assert!(lent.iter().all(|other: &Lease| other.data != lease.data), "one block lent twice");
            lent.push(lease);
        }
        assert_eq!(pools.retained_bytes(agent), idle.iter().sum::<usize>());
        for lease in lent {
            pools.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
        }
        pools.trim(agent, &mut no_unlock());
        assert_eq!(pools.retained_bytes(agent), 0);
        // Slots freed by the trim are reused, and loans keep finding their blocks.
        let again = pools.acquire(agent, 5 * page).unwrap();
        pools.release(agent, again.data, again.capacity, again.loan).unwrap();
        assert_eq!(pools.retained_bytes(agent), again.capacity);
        pools.trim(agent, &mut no_unlock());
    }

    #[test]
    fn pools_are_per_agent() {
        let pools = pools!();
        let (a, b) = (Agent(6), Agent(7));
        let lease = pools.acquire(a, 1 << 20).unwrap();
        pools.release(a, lease.data, lease.capacity, lease.loan).unwrap();
        let other = pools.acquire(b, 1 << 20).unwrap();
        assert_ne!(other.data, lease.data);
        assert_eq!(pools.retained_bytes(a), lease.capacity);
        pools.release(b, other.data, other.capacity, other.loan).unwrap();
        pools.trim(a, &mut no_unlock());
        pools.trim(b, &mut no_unlock());
    }

    #[test]
    fn locked_blocks_are_unlocked_before_they_are_unmapped() {
        let pools = pools!();
        let agent = Agent(8);
        let mut lease = pools.acquire_block(agent, 1 << 20, 1 << 20).unwrap();
        let table = crate::opsets::OpsTable::new();
        table.install(()).unwrap();
        let hold = table.get().unwrap().hold();
        assert!(pools.set_hold(&mut lease, Some(hold)));
        pools.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
        let again = pools.acquire_block(agent, 1 << 20, 1 << 20).unwrap();
        assert_eq!(again.hold, Some(hold), "a retained block stays locked, through the same ops");
        pools.release(agent, again.data, again.capacity, again.loan).unwrap();
        let mut unlocked = Vec::new();
        pools.trim(agent, &mut |ptr, len, by| {
            assert_eq!(by, hold);
            unlocked.push((ptr, len))
        });
        assert_eq!(unlocked, [(lease.data, lease.capacity)]);
    }

    #[test]
    fn zero_and_overflowing_sizes_are_invalid() {
        let pools = pools!();
        assert_eq!(pools.acquire(Agent(9), 0), Err(Error::InvalidArgument));
        assert_eq!(pools.acquire(Agent(9), usize::MAX), Err(Error::InvalidArgument));
    }

    #[test]
    fn more_agents_than_pools_is_capacity_exceeded() {
        let pools = pools!();
        let mut leases = Vec::new();
        for agent in 0..MAX_AGENTS as u64 {
            leases.push(pools.acquire(Agent(1000 + agent), 16).unwrap());
        }
        assert_eq!(pools.acquire(Agent(5000), 16), Err(Error::CapacityExceeded));
        for lease in leases {
            pools.release(lease.agent, lease.data, lease.capacity, lease.loan).unwrap();
            pools.trim(lease.agent, &mut no_unlock());
        }
        // Every pool is empty again: a new agent gets one (the slot of an empty pool is given up).
        let lease = pools.acquire(Agent(5000), 16).unwrap();
        pools.release(lease.agent, lease.data, lease.capacity, lease.loan).unwrap();
        pools.trim(lease.agent, &mut no_unlock());
    }
}
