//! The parts of the engine that captures and restores work with, borrowed for a call or for a snapshot's life.
//!
//! The snapshot module lies below the engine: it never names `Engine`. The engine lends it these parts
//! (`Engine::parts`), and a snapshot keeps them to give its storage back when it is dropped.

use core::ptr::NonNull;

use super::{Retained, Storage, Tier};
use crate::activity::Activity;
use crate::inventory::Inventory;
use crate::log::Level;
use crate::modules::ModuleCache;
use crate::ops::DeviceOps;
use crate::opsets::{OpsHold, OpsTable};
use crate::policy::AtomicPolicy;
use crate::storage::device::DevicePools;
use crate::storage::host::Pools;
use crate::storage::resets::Resets;
use crate::types::Agent;

/// Borrowed parts of one engine.
pub(crate) struct Parts<'e, O: DeviceOps> {
    pub ops: &'e OpsTable<O>,
    pub activity: &'e Activity,
    pub inventory: &'e Inventory,
    pub pools: &'e Pools,
    pub device: &'e DevicePools,
    pub policy: &'e AtomicPolicy,
    pub modules: &'e ModuleCache,
    pub retained: &'e Retained,
    pub resets: &'e Resets,
}

// Not derived: a derive would ask `O: Copy` of the ops, and only references are copied.
impl<O: DeviceOps> Clone for Parts<'_, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<O: DeviceOps> Copy for Parts<'_, O> {}

impl<O: DeviceOps> Parts<'_, O> {
    /// Whether `finalize` has begun (a pass stops early when it has).
    pub(crate) fn is_finalized(&self) -> bool {
        self.activity.is_finalized()
    }

    /// Gives all of `agent`'s idle storage of `tier` back, including the stash kept for dirty-only re-capture.
    pub(crate) fn trim(&self, agent: Agent, tier: Tier) {
        self.retained.drop_agent(self, agent, tier);
        match tier {
            Tier::Host => self.trim_host(agent),
            Tier::Device => self.trim_device(agent),
        }
    }

    /// Unmaps `agent`'s idle host staging, unlocking page-locked blocks first through the ops that locked them.
    pub(crate) fn trim_host(&self, agent: Agent) {
        self.pools.trim(agent, &mut |ptr, len, hold| {
            let result = self.ops.held(hold).host_unlock(ptr.as_ptr(), len);
            self.ops.release_hold(hold);
            if let Err(error) = result {
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: unlocking staging at {:#x} ({len} bytes) failed ({error:?}) before unmapping it",
                    agent.0,
                    ptr.as_ptr() as usize
                );
            }
        });
    }

    /// Frees `agent`'s idle device storage.
    pub(crate) fn trim_device(&self, agent: Agent) {
        self.device.trim(agent, &mut |ptr, len, hold| self.free_device(agent, ptr, len, hold));
    }

    /// Frees device storage through the ops it was allocated with, then gives that hold back.
    pub(crate) fn free_device(&self, agent: Agent, ptr: NonNull<u8>, len: usize, hold: OpsHold) {
        // SAFETY: `ptr`/`len` are a block this set of ops allocated for `agent`, taken out of its pool (or never
        // added to it), so nothing uses it any more.
        let result = unsafe { self.ops.held(hold).device_free(agent, ptr, len) };
        self.ops.release_hold(hold);
        if let Err(error) = result {
            crate::log!(
                Level::Warning,
                "agent {:#x}: freeing {len} bytes of device storage at {:#x} failed ({error:?})",
                agent.0,
                ptr.as_ptr() as usize
            );
        }
    }

    /// Whether `agent`'s device context was reset since `epoch` (storage and contents of then are gone).
    pub(crate) fn is_stale(&self, agent: Agent, epoch: u64) -> bool {
        self.resets.epoch(agent) != epoch
    }

    /// Gives back the host part of storage taken before its agent's context was reset; its device part is
    /// forgotten (that memory went with the context, and its addresses may be the program's now).
    pub(crate) fn release_stale(&self, agent: Agent, storage: Storage) {
        self.release(agent, Storage { host: storage.host, device: None });
    }

    /// Gives a snapshot's storage back to `agent`'s pools.
    pub(crate) fn release(&self, agent: Agent, storage: Storage) {
        if let Some(lease) = storage.host {
            if self.pools.release(lease.agent, lease.data, lease.capacity, lease.loan).is_err() {
                crate::log!(Level::Error, "agent {:#x}: a snapshot's staging was not lent by its pool", agent.0);
            }
        }
        if let Some(lease) = storage.device {
            if self.device.release(&lease).is_err() {
                crate::log!(Level::Error, "agent {:#x}: a snapshot's device storage was not lent by its pool", agent.0);
            }
        }
    }
}
