//! Device storage: per-agent pools of device memory that hold the device-tier part of snapshots, under a
//! per-agent budget. Same rules as host staging (best fit within `[size, 2 * size]`, retained across
//! dispatches, trimmed on every capture exit to what that capture did not take); the memory comes from the
//! host's `device_alloc` op and goes back through `device_free` of the same set of ops.

use core::ptr::NonNull;

use arrayvec::ArrayVec;

use super::blocks::{Block, BlockPool, Loaned};
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
pub(crate) struct DevicePool {
    blocks: BlockPool,
}

impl Claimed for DevicePool {
    const EMPTY: Self = DevicePool { blocks: BlockPool::new() };
    fn is_empty(&self) -> bool {
        self.blocks.is_empty()
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

    /// Device bytes `agent` holds, idle or lent.
    pub fn held_bytes(&self, agent: Agent) -> usize {
        self.slots.with(agent, |pool| pool.blocks.total_bytes()).unwrap_or(0)
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

    /// Keeps the books on a block just allocated through `hold`'s ops, and lends it. On `Err` the caller
    /// frees the block itself.
    pub fn add(&self, agent: Agent, ptr: NonNull<u8>, capacity: usize, hold: OpsHold) -> Result<DeviceLease> {
        match self.slots.with_or_claim(agent, |pool| pool.blocks.add_lent(Block::new(ptr, capacity, Some(hold))))? {
            Some(loaned) => Ok(Self::lease(agent, loaned)),
            None => Err(Error::CapacityExceeded),
        }
    }

    /// Returns a lease to its pool; `NotFound` when that loan is not outstanding.
    pub fn release(&self, lease: &DeviceLease) -> Result<()> {
        let released =
            self.slots.with(lease.agent, |pool| pool.blocks.give_back(lease.data, lease.capacity, lease.loan));
        if released == Some(true) { Ok(()) } else { Err(Error::NotFound) }
    }

    /// Gives all of `agent`'s idle device storage back through `free` (called with no lock held).
    pub fn trim(&self, agent: Agent, free: &mut dyn FnMut(NonNull<u8>, usize, OpsHold)) {
        loop {
            let mut victims: ArrayVec<Block, TRIM_BATCH> = ArrayVec::new();
            self.slots.with(agent, |pool| {
                while !victims.is_full() {
                    let Some(block) = pool.blocks.pop_idle() else { break };
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
            }
        }
    }

    /// Every agent that holds device storage.
    pub fn agents(&self, each: impl FnMut(Agent)) {
        self.slots.agents(each);
    }
}
