//! The engine: one inventory, one set of staging pools, the device ops and the policy. A C host has exactly
//! one, as a static in `kreplay-capi`; statics are never destroyed, so calls that arrive during the host's
//! static destruction still find valid state.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};
use crate::gate::{self, Gate};
use crate::inventory::{self, AgentStats, InsertError, Inventory};
use crate::lock::RwLock;
use crate::log::Level;
use crate::ops::DeviceOps;
use crate::policy::{AtomicPolicy, Policy};
use crate::staging::{Lease, Pools};
use crate::types::{Agent, AllocFlags};

/// Everything kreplay keeps, for one set of device ops.
pub struct Engine<O: DeviceOps> {
    ops: RwLock<Option<O>>,
    pub(crate) inventory: Inventory,
    pub(crate) pools: Pools,
    pub(crate) policy: AtomicPolicy,
    tracking: AtomicBool,
    finalized: AtomicBool,
    graph_warned: AtomicBool,
}

impl<O: DeviceOps> Default for Engine<O> {
    fn default() -> Self {
        Self::new()
    }
}

impl<O: DeviceOps> Engine<O> {
    /// An unconfigured engine with tracking off. Meant for a `static`: its tables are several megabytes.
    pub const fn new() -> Self {
        Engine {
            ops: RwLock::new(None),
            inventory: Inventory::new(),
            pools: Pools::new(),
            policy: AtomicPolicy::new(),
            tracking: AtomicBool::new(false),
            finalized: AtomicBool::new(false),
            graph_warned: AtomicBool::new(false),
        }
    }

    /// Installs the device ops (replacing any earlier ones).
    pub fn configure(&self, ops: O) -> Result<()> {
        self.check_live()?;
        *self.ops.write() = Some(ops);
        Ok(())
    }

    /// A copy of the installed ops.
    pub fn ops(&self) -> Result<O> {
        self.ops.read().clone().ok_or(Error::NotConfigured)
    }

    /// Whether `finalize` has run.
    pub fn is_finalized(&self) -> bool {
        self.finalized.load(Ordering::Acquire)
    }

    /// From now on every call returns [`Error::Finalized`] (or does nothing) and touches no table.
    pub fn finalize(&self) {
        self.finalized.store(true, Ordering::Release);
    }

    /// The checks every record call makes: not finalized, and a non-null range that does not wrap around.
    fn check_record(&self, function: &str, address: usize, size: usize) -> Result<()> {
        self.check_live()?;
        if address == 0 || size == 0 || address.checked_add(size).is_none() {
            crate::log!(Level::Warning, "{function}({address:#x}, {size}): null address, zero or overflowing size");
            return Err(Error::InvalidArgument);
        }
        Ok(())
    }

    pub(crate) fn check_live(&self) -> Result<()> {
        if self.is_finalized() { Err(Error::Finalized) } else { Ok(()) }
    }

    /// Turns allocation recording on or off. Frees that happen while it is off cannot be seen, so turning it
    /// off forgets everything tracked: a later snapshot can then only be as complete as what is recorded after
    /// tracking is turned on again.
    pub fn set_tracking(&self, enabled: bool) {
        if self.is_finalized() {
            return;
        }
        let was = self.tracking.swap(enabled, Ordering::AcqRel);
        if was && !enabled {
            let forgotten = self.inventory.clear();
            crate::log!(Level::Info, "tracking turned off: {forgotten} tracked regions forgotten");
        }
    }

    /// Whether allocations are being recorded.
    #[inline]
    pub fn tracking_enabled(&self) -> bool {
        self.tracking.load(Ordering::Relaxed)
    }

    /// Records an allocation after the runtime made it: classified, and tracked only when it is coarse-grained
    /// device memory that is neither kernarg nor executable.
    pub fn record_alloc(&self, ptr: usize, size: usize, alloc_flags: u32) -> Result<()> {
        if !self.tracking_enabled() {
            return Ok(());
        }
        self.check_record("record_alloc", ptr, size)?;
        // Hosts pass the pool allocation flags through unchanged; only the executable bit matters here, and it is
        // decided before any query because runtimes keep live kernel arguments in such allocations.
        if AllocFlags::from_bits_truncate(alloc_flags).contains(AllocFlags::EXECUTABLE) {
            return Ok(());
        }
        let Ok(ops) = self.ops() else {
            // Tracking is on but nothing can classify the allocation: it must not vanish silently.
            self.inventory.insert_unknown(ptr);
            crate::log!(
                Level::Warning,
                "record_alloc: no device ops are configured to classify {ptr:#x} ({size} bytes); snapshots of every \
                 agent are declined until it is freed"
            );
            return Err(Error::NotConfigured);
        };
        let info = match ops.pointer_info(ptr as *const u8) {
            Ok(info) => info,
            Err(error) => {
                // Whether this is device memory, and whose, is unknown: decline every agent until it is freed.
                self.inventory.insert_unknown(ptr);
                crate::log!(
                    Level::Warning,
                    "record_alloc: the pointer query for {ptr:#x} ({size} bytes) failed ({error:?}); snapshots of \
                     every agent are declined until it is freed"
                );
                return Err(Error::DeviceError);
            }
        };
        if !info.is_snapshottable() {
            return Ok(());
        }
        match self.inventory.insert(ptr, size, info.owner) {
            Ok(None) => Ok(()),
            Ok(Some(stale)) => {
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: allocation at {ptr:#x} ({size} bytes) replaces a tracked one of {} bytes whose free \
                     was never recorded",
                    info.owner.0,
                    stale.size
                );
                Ok(())
            }
            Err(InsertError::Full) => {
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: allocation at {ptr:#x} ({size} bytes) cannot be tracked: the inventory holds {} \
                     regions; snapshots of this agent are declined until it is freed; raise {}",
                    info.owner.0,
                    self.inventory.capacity(),
                    inventory::CAPACITY_SETTING
                );
                Err(Error::CapacityExceeded)
            }
        }
    }

    /// Takes an allocation out before the runtime frees it. If the real free then fails, the host records the
    /// allocation again.
    pub fn record_free(&self, ptr: usize) -> Result<()> {
        if !self.tracking_enabled() {
            return Ok(());
        }
        self.check_live()?;
        if ptr == 0 {
            return Err(Error::InvalidArgument);
        }
        self.inventory.remove(ptr).map(|_| ()).ok_or(Error::NotFound)
    }

    /// Records a virtual-memory mapping, tracked and snapshotted like an allocation.
    pub fn record_vmem_map(&self, address: usize, size: usize, owner: Agent) -> Result<()> {
        if !self.tracking_enabled() {
            return Ok(());
        }
        self.check_record("record_vmem_map", address, size)?;
        self.inventory.insert_vmem(address, size, owner).map_err(|InsertError::Full| {
            crate::log!(
                Level::Warning,
                "agent {:#x}: mapping at {address:#x} ({size} bytes) cannot be tracked: {} mappings are tracked \
                 already; snapshots of this agent are declined until it is unmapped",
                owner.0,
                inventory::VMEM_CAPACITY
            );
            Error::CapacityExceeded
        })
    }

    /// Records a virtual-memory mapping whose owner could not be determined, so that it is not lost silently:
    /// snapshots of every agent are declined until unmaps cover it.
    pub fn record_vmem_map_unknown(&self, address: usize, size: usize) -> Result<()> {
        if !self.tracking_enabled() {
            return Ok(());
        }
        self.check_record("record_vmem_map_unknown", address, size)?;
        self.inventory.insert_vmem_unknown(address, size);
        crate::log!(
            Level::Warning,
            "mapping at {address:#x} ({size} bytes) has no known owner; snapshots of every agent are declined until \
             it is unmapped"
        );
        Ok(())
    }

    /// Records an unmap of `[address, address + size)`, which may cover any part of one or more mappings.
    pub fn record_vmem_unmap(&self, address: usize, size: usize) -> Result<()> {
        if !self.tracking_enabled() {
            return Ok(());
        }
        self.check_record("record_vmem_unmap", address, size)?;
        let outcome = self.inventory.remove_vmem(address, size);
        if outcome.lost {
            crate::log!(
                Level::Warning,
                "unmap of {address:#x} ({size} bytes) split a mapping and the remainder could not be tracked; \
                 snapshots of its agent are declined until it is unmapped"
            );
            return Err(Error::CapacityExceeded);
        }
        if outcome.touched == 0 { Err(Error::NotFound) } else { Ok(()) }
    }

    /// What the inventory holds for `agent`.
    pub fn inventory_stats(&self, agent: Agent) -> Result<AgentStats> {
        self.check_live()?;
        Ok(self.inventory.stats(agent))
    }

    /// Replaces the policy.
    pub fn set_policy(&self, policy: Policy) -> Result<()> {
        self.check_live()?;
        self.policy.set(policy);
        Ok(())
    }

    /// The current policy.
    pub fn policy(&self) -> Policy {
        self.policy.get()
    }

    /// Host storage for `size` bytes from `agent`'s pool.
    pub fn staging_acquire(&self, agent: Agent, size: usize) -> Result<Lease> {
        self.check_live()?;
        self.pools.acquire(agent, size)
    }

    /// Returns storage lent under `loan` to `agent`'s pool; `NotFound` when that loan is not outstanding.
    pub fn staging_release(&self, agent: Agent, data: NonNull<u8>, capacity: usize, loan: u64) -> Result<()> {
        self.check_live()?;
        self.pools.release(agent, data, capacity, loan)
    }

    /// Unmaps all of `agent`'s idle storage (unlocking page-locked storage first).
    pub fn staging_trim(&self, agent: Agent) {
        if self.is_finalized() {
            return;
        }
        let ops = self.ops().ok();
        self.pools.trim(agent, &mut |ptr, len| {
            if let Some(ops) = ops.as_ref() {
                if let Err(error) = ops.host_unlock(ptr.as_ptr(), len) {
                    crate::log!(
                        Level::Warning,
                        "agent {:#x}: unlocking staging at {:#x} ({len} bytes) failed ({error:?}) before unmapping it",
                        agent.0,
                        ptr.as_ptr() as usize
                    );
                }
            }
        });
    }

    /// Bytes of idle storage in `agent`'s pool.
    pub fn retained_staging_bytes(&self, agent: Agent) -> usize {
        if self.is_finalized() { 0 } else { self.pools.retained_bytes(agent) }
    }

    /// The replay gate; a graph launch is warned about once per engine (per process for the C API).
    pub fn replay_gate(&self, packet_count: u32, dispatch_packet_count: u32, graph_launch_active: bool) -> Gate {
        let verdict = gate::decide(packet_count, dispatch_packet_count, graph_launch_active);
        if verdict == Gate::GraphLaunch && !self.graph_warned.swap(true, Ordering::Relaxed) {
            crate::log!(
                Level::Warning,
                "graph launches are not replayed: their dispatches run once, without counters from extra passes \
                 (warned once per process)"
            );
        }
        verdict
    }
}
