//! Snapshot (device to storage) and restore (storage to device).
//!
//! A capture is a short sequence of steps ([`capture`]): *plan* the ranges (the agent's tracked regions and its
//! module variables, [`plan`]), *stage* storage for them (device memory up to the agent's budget, host staging
//! for the rest), then *transfer* in batches ([`transfer`]) and *report* ([`report`]). A restore plans nothing:
//! it transfers the snapshot's ranges back, re-validating each tracked region as its batch is pinned, and
//! reports.
//!
//! This module lies below the engine: it works on the engine's [`Parts`], lent by the engine's `snap` and
//! `restore`, and never names `Engine` itself.
//!
//! With the digest op and `dirty_only`, both directions copy only what changed: the live ranges are digested
//! block by block, and only blocks whose digest differs from the snapshot's are written back; a capture that
//! finds the previous snapshot of a range still in the agent's retained storage re-copies only its changed
//! blocks. A digest that fails means full copies for that call, never a decline.
//!
//! A snapshot is complete or it is declined: any failure releases what was taken and leaves device memory
//! untouched.

use alloc::vec::Vec;

use crate::inventory::{PinKey, RegionKind};
use crate::lock::Mutex;
use crate::modules::CapturedModules;
use crate::ops::{DeviceOps, Digest};
use crate::storage::device::DeviceLease;
use crate::storage::host::Lease;
use crate::storage::slots::MAX_AGENTS;
use crate::types::Agent;

mod capture;
mod liveness;
mod parts;
mod plan;
mod report;
mod restore;
mod transfer;
pub mod write_set;

pub(crate) use capture::capture;
pub(crate) use parts::Parts;
pub(crate) use restore::restore;
pub use write_set::Learned;
use write_set::WriteSet;

/// A test's own engine (a static: the tables are megabytes) with `$policy`, and a device offering every v2 op.
#[cfg(test)]
macro_rules! setup_v2 {
    ($policy:expr) => {{
        static ENGINE: Engine<SimDevice> = Engine::new();
        crate::log::set_sink(Some(|_, _| {}), crate::log::Level::Error);
        let device = SimDevice::with_v2();
        ENGINE.configure(device.clone()).unwrap();
        ENGINE.set_tracking(true);
        ENGINE.set_policy($policy).unwrap();
        (&ENGINE, device)
    }};
}

#[cfg(test)]
mod reset_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod v2_tests;
#[cfg(test)]
mod write_set_tests;

/// Captured ranges are placed at multiples of this many bytes in their storage (the variables of a span that had
/// to be split stay where the span put them).
pub const STAGING_ALIGN: usize = 64;
pub use crate::modules::MAX_MODULE_VARIABLE_BYTES;

/// Where a captured range came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// A tracked allocation or mapping, valid only while it keeps this generation.
    Tracked { kind: RegionKind, generation: u64 },
    /// Module-scope variables that touch or overlap (a span of the snapshot's module list: its variables
    /// `first..first + count`): part of loaded executables, written back while their code object is loaded,
    /// never digested.
    ModuleVariables { first: u32, count: u32 },
}

/// Which storage holds a range's contents.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Host staging.
    Host,
    /// Device memory of the same agent.
    Device,
}

/// One captured range and where its contents are kept.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Range {
    pub address: usize,
    pub size: usize,
    pub tier: Tier,
    pub offset: usize,
    pub source: Source,
    /// Index of its first block digest, for tracked ranges of a snapshot that has digests.
    pub digest_at: usize,
    /// Where its region was in the inventory's table when it was listed (a lookup hint for pinning).
    pub hint: u32,
}

impl Range {
    pub(crate) fn pin_key(&self) -> Option<PinKey> {
        match self.source {
            Source::Tracked { kind, generation } => {
                Some(PinKey { base: self.address, kind, generation, min_size: self.size, hint: self.hint })
            }
            Source::ModuleVariables { .. } => None,
        }
    }

    /// What the range counts as in reports: one region, or its module variables.
    pub(crate) fn units(&self) -> usize {
        match self.source {
            Source::Tracked { .. } => 1,
            Source::ModuleVariables { count, .. } => count as usize,
        }
    }
}

/// Sizes and phase timings of a capture.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The agent captured.
    pub agent: Agent,
    /// This snapshot among the process's, from 1 (0 only in a default value): a window tells its own snapshot
    /// from the per-dispatch snapshots a host takes inside a window over several dispatches.
    pub id: u64,
    /// Tracked allocations and mappings captured.
    pub regions: usize,
    /// Module-scope variables captured.
    pub module_variables: usize,
    /// Bytes captured, both kinds.
    pub bytes: usize,
    /// Time to list the agent's tracked regions.
    pub inventory_ns: u64,
    /// Time of the module scan (or of taking the cached one).
    pub module_scan_ns: u64,
    /// Time to take (and, the first time, map and page-lock, or allocate on the device) storage.
    pub staging_ns: u64,
    /// Time of the copies.
    pub copy_ns: u64,
    /// Of `bytes`, how many are held in device memory.
    pub device_bytes: usize,
    /// Bytes this capture moved; below `bytes` when unchanged blocks were reused.
    pub copied_bytes: usize,
    /// Time spent digesting.
    pub digest_ns: u64,
}

/// What a restore did. Module variables count like regions.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Regions and module variables that hold the captured contents again (written, or verified unchanged).
    pub restored: usize,
    /// Tracked regions freed, shrunk or reallocated since the snapshot, and module variables whose code object
    /// was unloaded since: not written.
    pub skipped: usize,
    /// Regions whose copy failed (or that a finalize stopped before they were written).
    pub failed: usize,
    /// Bytes written back.
    pub bytes: usize,
    /// Bytes verified unchanged by digest, so not written.
    pub clean_bytes: usize,
    /// How long the restore took, digests included.
    pub elapsed_ns: u64,
    /// Of it, the time spent digesting.
    pub digest_ns: u64,
    /// Bytes of device memory digested to find what changed (0 without digests).
    pub digested_bytes: usize,
    /// The restore digested only the snapshot's learned write set and hints, not the whole footprint.
    pub partial: bool,
    /// What the restore learned about the write set (all zero while the policy does not learn).
    pub write_set: Learned,
}

/// How the host asks a restore to run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreOptions {
    /// Digest the whole footprint even where a write set is learned: the restore before the pass whose results
    /// count (the last of a window).
    pub full_check: bool,
}

/// The storage of one snapshot: a host block, a device block, or both.
#[derive(Default)]
pub(crate) struct Storage {
    pub host: Option<Lease>,
    pub device: Option<DeviceLease>,
}

impl Storage {
    /// The address of a range's contents.
    pub(crate) fn at(&self, range: &Range) -> *mut u8 {
        let base = match range.tier {
            Tier::Host => self.host.as_ref().map(|lease| lease.data),
            Tier::Device => self.device.as_ref().map(|lease| lease.data),
        };
        // SAFETY: placement put `offset + size` within the tier's block (see `plan::place`).
        base.map_or(core::ptr::null_mut(), |base| unsafe { base.as_ptr().add(range.offset) })
    }

    fn bytes(&self, tier: Tier) -> usize {
        match tier {
            Tier::Host => self.host.as_ref().map_or(0, |lease| lease.capacity),
            Tier::Device => self.device.as_ref().map_or(0, |lease| lease.capacity),
        }
    }
}

/// Block digests of a snapshot's tracked ranges, as captured.
pub(crate) struct Digests {
    pub block_bytes: usize,
    pub all: Vec<Digest>,
}

/// A complete capture of one agent's device memory. Dropping it returns its storage to the agent's pools (or,
/// with digests, keeps it for the next capture of the agent to re-copy only what changed).
pub struct Snapshot<'e, O: DeviceOps> {
    /// The engine it was captured from, which gets its storage back.
    pub(crate) parts: Parts<'e, O>,
    pub(crate) storage: Storage,
    pub(crate) ranges: Vec<Range>,
    /// The module list its spans index into (shared with the module cache).
    pub(crate) modules: CapturedModules,
    pub(crate) digests: Option<Digests>,
    pub(crate) info: SnapshotInfo,
    /// What its restores learned of the blocks its passes write.
    pub(crate) write_set: Mutex<WriteSet>,
    /// Its agent's reset epoch when it was captured: after a reset it is never restored.
    pub(crate) epoch: u64,
}

// SAFETY: a snapshot's storage is written only by its capture, before the snapshot exists; afterwards shared
// access (`info`, `restore`, hints) only reads the ranges, the digests and the storage behind the leases, and
// changes nothing but the write set, behind its mutex; the one owner that drops it gives the storage back. The
// engine parts it refers to are `Sync`.
unsafe impl<O: DeviceOps> Sync for Snapshot<'_, O> {}
// SAFETY: as above; nothing in a snapshot is tied to the thread that made it.
unsafe impl<O: DeviceOps> Send for Snapshot<'_, O> {}

impl<O: DeviceOps> Snapshot<'_, O> {
    /// Sizes and timings of the capture.
    pub fn info(&self) -> SnapshotInfo {
        self.info
    }

    /// Blocks in the learned write set now (learned and hinted).
    pub fn write_set_blocks(&self) -> usize {
        self.write_set.lock().count()
    }

    /// Adds the blocks that `hints` (`(address, bytes)`, `bytes` 0 for the whole tracked region holding
    /// `address`) touch to the write set, so that partial restores digest them. Never skips a full check; does
    /// nothing for a snapshot without digests. Returns the blocks added; `None` without host memory.
    pub(crate) fn hint_writes(&self, hints: &[(usize, usize)]) -> Option<usize> {
        let Some(digests) = self.digests.as_ref() else { return Some(0) };
        self.write_set.lock().hint(&self.ranges, digests.all.len(), digests.block_bytes, hints)
    }
}

impl<O: DeviceOps> Drop for Snapshot<'_, O> {
    fn drop(&mut self) {
        let stash = Stash {
            agent: self.info.agent,
            epoch: self.epoch,
            storage: core::mem::take(&mut self.storage),
            ranges: core::mem::take(&mut self.ranges),
            digests: self.digests.take(),
        };
        let parts = self.parts;
        if parts.is_stale(stash.agent, self.epoch) {
            parts.release_stale(stash.agent, stash.storage);
        } else if stash.digests.is_some() && parts.policy.get().dirty_only && !parts.is_finalized() {
            parts.retained.put(&parts, stash);
        } else {
            stash.release(&parts);
        }
    }
}

/// Storage and layout of an agent's last snapshot with digests, kept after it was freed so that the next
/// capture of the agent copies only the blocks that changed.
pub(crate) struct Stash {
    pub agent: Agent,
    /// The agent's reset epoch when the snapshot was taken: a stash from before a reset is never reused.
    pub epoch: u64,
    pub storage: Storage,
    pub ranges: Vec<Range>,
    pub digests: Option<Digests>,
}

impl Stash {
    /// Gives the storage back to the agent's pools.
    pub(crate) fn release<O: DeviceOps>(self, parts: &Parts<'_, O>) {
        parts.release(self.agent, self.storage);
    }
}

/// The stashes of every agent (at most one each).
pub(crate) struct Retained {
    stashes: Mutex<arrayvec::ArrayVec<Stash, MAX_AGENTS>>,
}

// SAFETY: a stash holds leases (addresses of storage lent to it) and plain vectors; it is moved between threads
// only under the mutex, and the storage behind the leases is used only by the one capture that takes the stash.
unsafe impl Send for Stash {}

impl Retained {
    pub(crate) const fn new() -> Self {
        Retained { stashes: Mutex::new(arrayvec::ArrayVec::new_const()) }
    }

    /// Keeps `stash` as its agent's, releasing the one it replaces (and `stash` itself if none can be kept).
    pub(crate) fn put<O: DeviceOps>(&self, parts: &Parts<'_, O>, stash: Stash) {
        // The epoch is checked under the lock that an agent reset takes its stash under, after bumping the
        // epoch: a stash from before the reset is either refused here or taken (and forgotten) by the reset.
        let (evicted, stale) = {
            let mut stashes = self.stashes.lock();
            if parts.is_stale(stash.agent, stash.epoch) {
                (None, Some(stash))
            } else {
                let evicted = match stashes.iter().position(|s| s.agent == stash.agent) {
                    Some(at) => Some(core::mem::replace(&mut stashes[at], stash)),
                    None => stashes.try_push(stash).err().map(|full| full.element()),
                };
                (evicted, None)
            }
        };
        if let Some(stale) = stale {
            parts.release_stale(stale.agent, stale.storage);
        }
        if let Some(evicted) = evicted {
            evicted.release(parts);
        }
    }

    /// Takes `agent`'s stash.
    pub(crate) fn take(&self, agent: Agent) -> Option<Stash> {
        let mut stashes = self.stashes.lock();
        let at = stashes.iter().position(|s| s.agent == agent)?;
        Some(stashes.swap_remove(at))
    }

    /// Releases `agent`'s stash if it holds storage of `tier` (a trim of that tier).
    pub(crate) fn drop_agent<O: DeviceOps>(&self, parts: &Parts<'_, O>, agent: Agent, tier: Tier) {
        let taken = {
            let mut stashes = self.stashes.lock();
            stashes.iter().position(|s| s.agent == agent && s.storage.bytes(tier) > 0).map(|at| stashes.swap_remove(at))
        };
        if let Some(stash) = taken {
            stash.release(parts);
        }
    }

    /// Storage of `tier` that `agent`'s stash holds.
    pub(crate) fn bytes(&self, agent: Agent, tier: Tier) -> usize {
        self.stashes.lock().iter().filter(|s| s.agent == agent).map(|s| s.storage.bytes(tier)).sum()
    }
}
