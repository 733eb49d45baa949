//! Device storage: per-agent pools of device memory that hold the device-tier part of snapshots, under a
//! per-agent budget. Same rules as host staging (best fit within `[size, 2 * size]`, retained across
//! dispatches, trimmed on every capture exit to what that capture did not take); the memory comes from the
//! host's `device_alloc` op and goes back through `device_free` of the same set of ops.
//!
//! # The budget holds at every moment
//! Each pool keeps `charged`: the bytes of its agent's storage that the device may count as allocated, from
//! before `device_alloc` is called until after `device_free` has returned, so a block on its way to
//! `device_free` (taken out of the books by a trim) still counts, and so does an allocation in flight. A new
//! block is charged ([`DevicePools::reserve`]) under the pool's lock, against the capture's [`Budget`] and the
//! books of that moment, before the op is called: two captures cannot both count on the same room, and a
//! capture cannot count on storage another thread is still freeing. Restores never touch these books.

use core::ptr::NonNull;

use arrayvec::ArrayVec;

use super::blocks::{BLOCKS_PER_AGENT, Block, BlockPool, Loaned};
use super::budget::{Books, Budget};
use super::slots::{AgentSlots, Claimed};
use crate::error::{Error, Result};
use crate::opsets::OpsHold;
use crate::types::Agent;

/// Device memory lent to a snapshot.
#[derive(Debug, PartialEq, Eq)]
pub struct DeviceLease {
    /// Start of the storage (device address).
    pub data: NonNull<u8>,
    /// Its capacity.
    pub capacity: usize,
    /// The pool it came from.
    pub agent: Agent,
    /// The loan to give back.
    pub loan: u64,
}

/// One agent's device storage.
///
/// # Invariants
/// `charged` is the capacity of every block in `blocks` plus the bytes of `device_alloc` calls in
/// flight and of blocks taken out for `device_free` whose call has not returned; `allocating` is the part of it
/// charged for `device_alloc` calls in flight; `lent` is the capacity of the blocks lent out; `version` changes
/// whenever any of the books does. A pool that is charged anything keeps its slot.
pub(crate) struct DevicePool {
    blocks: BlockPool,
    charged: usize,
    allocating: usize,
    lent: usize,
    version: u64,
}

impl DevicePool {
    fn books(&self) -> Books {
        Books {
            charged: self.charged,
            allocating: self.allocating,
            lent: self.lent,
            idle: self.blocks.idle_bytes(),
            version: self.version,
        }
    }

    fn changed(&mut self) {
        self.version = self.version.wrapping_add(1);
    }
}

impl Claimed for DevicePool {
    const EMPTY: Self = DevicePool { blocks: BlockPool::new(), charged: 0, allocating: 0, lent: 0, version: 0 };
    fn is_empty(&self) -> bool {
        self.charged == 0 && self.blocks.is_empty()
    }
}

/// Device storage of every agent.
pub struct DevicePools {
    slots: AgentSlots<DevicePool>,
}

const TRIM_BATCH: usize = 64;

impl Default for DevicePools {
    fn default() -> Self {
        Self::new()
    }
}

impl DevicePools {
    /// No device storage.
    pub const fn new() -> Self {
        DevicePools { slots: AgentSlots::new() }
    }

    /// `agent`'s books, all read at one moment.
    pub(crate) fn books(&self, agent: Agent) -> Books {
        self.slots.with(agent, |pool| pool.books()).unwrap_or_default()
    }

    /// Idle device bytes `agent` holds.
    pub fn idle_bytes(&self, agent: Agent) -> usize {
        self.slots.with(agent, |pool| pool.blocks.idle_bytes()).unwrap_or(0)
    }

    /// Lends the best-fitting idle block of at least `size` and at most `limit` bytes, if any.
    pub fn take(&self, agent: Agent, size: usize, limit: usize) -> Option<DeviceLease> {
        let loaned = self
            .slots
            .with(agent, |pool| {
                let loaned = pool.blocks.take_best_fit(size)?;
                if loaned.capacity <= limit {
                    pool.lent += loaned.capacity;
                    pool.changed();
                    Some(loaned)
                } else {
                    pool.blocks.give_back(loaned.ptr, loaned.capacity, loaned.loan);
                    None
                }
            })
            .flatten()?;
        Some(Self::lease(agent, loaned))
    }

    fn lease(agent: Agent, loaned: Loaned) -> DeviceLease {
        DeviceLease { data: loaned.ptr, capacity: loaned.capacity, agent, loan: loaned.loan }
    }

    /// Charges `agent` for a new block of between `size` and `len` bytes (as many as `budget` leaves room for
    /// now), before it is allocated; returns how many. `CapacityExceeded` when not even `size` fits, or no pool
    /// slot is left. The caller either adds the block it allocated ([`DevicePools::add`]) or gives the charge
    /// back ([`DevicePools::credit`]).
    pub(crate) fn reserve(&self, agent: Agent, size: usize, len: usize, budget: &Budget) -> Result<usize> {
        let reserved = self.slots.with_or_claim(agent, |pool| {
            let len = len.min(budget.room(pool.books()));
            (len >= size && len > 0).then(|| {
                pool.charged += len;
                pool.allocating += len;
                pool.changed();
                len
            })
        })?;
        reserved.ok_or(Error::CapacityExceeded)
    }

    /// Takes back the charge of an allocation charged by [`DevicePools::reserve`] that failed.
    pub fn unreserve(&self, agent: Agent, bytes: usize) {
        self.slots.with(agent, |pool| {
            pool.charged = pool.charged.saturating_sub(bytes);
            pool.allocating = pool.allocating.saturating_sub(bytes);
            pool.changed();
        });
    }

    /// Takes `bytes` off `agent`'s charge: a block whose `device_free` has returned.
    pub fn credit(&self, agent: Agent, bytes: usize) {
        self.slots.with(agent, |pool| {
            pool.charged = pool.charged.saturating_sub(bytes);
            pool.changed();
        });
    }

    /// Keeps the books on a block just allocated through `hold`'s ops (charged by [`DevicePools::reserve`]),
    /// and lends it. On `Err` the caller frees the block itself, then credits it.
    pub fn add(&self, agent: Agent, ptr: NonNull<u8>, capacity: usize, hold: OpsHold) -> Result<DeviceLease> {
        let added = self.slots.with(agent, |pool| {
            pool.allocating = pool.allocating.saturating_sub(capacity);
            pool.changed();
            let loaned = pool.blocks.add_lent(Block::new(ptr, capacity, Some(hold)))?;
            pool.lent += capacity;
            pool.changed();
            Some(loaned)
        });
        match added.flatten() {
            Some(loaned) => Ok(Self::lease(agent, loaned)),
            None => Err(Error::CapacityExceeded),
        }
    }

    /// Returns a lease to its pool; `NotFound` when that loan is not outstanding.
    pub fn release(&self, lease: &DeviceLease) -> Result<()> {
        let released = self.slots.with(lease.agent, |pool| {
            let released = pool.blocks.give_back(lease.data, lease.capacity, lease.loan);
            if released {
                pool.lent = pool.lent.saturating_sub(lease.capacity);
                pool.changed();
            }
            released
        });
        if released == Some(true) { Ok(()) } else { Err(Error::NotFound) }
    }

    /// Gives all of `agent`'s idle device storage back through `free` (called with no lock held). Each block
    /// stays charged until its `free` has returned.
    pub fn trim(&self, agent: Agent, free: &mut dyn FnMut(NonNull<u8>, usize, OpsHold)) {
        loop {
            let mut victims: ArrayVec<Block, TRIM_BATCH> = ArrayVec::new();
            self.slots.with(agent, |pool| {
                while !victims.is_full() {
                    let Some(block) = pool.blocks.pop_idle() else { break };
                    pool.changed();
                    victims.push(block);
                }
            });
            if victims.is_empty() {
                return;
            }
            for block in victims {
                if let Some(hold) = block.hold {
                    free(block.ptr, block.capacity, hold);
                }
                self.credit(agent, block.capacity);
            }
        }
    }

    /// Forgets all of `agent`'s device storage, idle and lent, without freeing it: its context was destroyed, so
    /// the memory is gone and its addresses may already be the program's. Leases still out are refused when they
    /// come back. `release` gets the hold of every block forgotten. Allocations in flight stay charged.
    pub fn forget(&self, agent: Agent, release: &mut dyn FnMut(OpsHold)) {
        let mut holds: ArrayVec<OpsHold, BLOCKS_PER_AGENT> = ArrayVec::new();
        self.slots.with(agent, |pool| {
            let mut forgotten = 0usize;
            pool.blocks.forget_all(&mut |block| {
                forgotten += block.capacity;
                // Never full: a pool has at most one hold per block.
                if let Some(hold) = block.hold {
                    let _ = holds.try_push(hold);
                }
            });
            pool.charged = pool.charged.saturating_sub(forgotten);
            pool.lent = 0;
            pool.changed();
        });
        for hold in holds {
            release(hold);
        }
    }

    /// Every agent that holds device storage.
    pub fn agents(&self, each: impl FnMut(Agent)) {
        self.slots.agents(each);
    }
}
