//! The engine: one inventory, the storage tiers, the installed device ops and the policy. A C host has exactly
//! one, as a static in `kreplay-capi`; statics are never destroyed, so calls that arrive during the host's
//! static destruction still find valid state.
//!
//! Every public call enters [`Activity`] first: `finalize` waits for calls in flight to leave, and a call made
//! from inside a device op or logger on the same thread is recognised as nested, so it never waits for work
//! its own thread is in the middle of (re-entry returns an error instead of deadlocking).
//!
//! Capture and restore live in [`crate::snapshot`], below the engine: `snap` and `restore` enter the call and
//! lend the snapshot module the engine's [`Parts`]. The replay window lives in [`crate::window`], below the
//! engine too: the window calls enter here and hand the window table what they read (`OpenInputs` for an open).

use alloc::boxed::Box;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::activity::{Activity, Call};
use crate::error::{DeclineReason, Error, Result};
use crate::gate::{self, Gate};
use crate::inventory::{self, AgentStats, InsertError, Inventory, Region, RemoveError};
use crate::log::Level;
use crate::modules::ModuleCache;
use crate::ops::DeviceOps;
use crate::opsets::{OpsRef, OpsTable};
use crate::policy::{AtomicPolicy, Policy};
use crate::snapshot::{Parts, RestoreOptions, RestoreReport, Retained, Snapshot, Tier};
use crate::storage::device::DevicePools;
use crate::storage::host::{Lease, Pools};
use crate::storage::resets::Resets;
use crate::types::{Agent, AllocFlags, PointerInfo};
use crate::window::{
    OpenInputs, Opened, Outcome, UNCOUNTED_TOKEN, UntrackedStats, WindowHandle, WindowOptions, WindowState,
};

/// Everything kreplay keeps, for one set of device ops at a time.
pub struct Engine<O: DeviceOps> {
    pub(crate) ops: OpsTable<O>,
    pub(crate) activity: Activity,
    pub(crate) inventory: Inventory,
    pub(crate) pools: Pools,
    pub(crate) device: DevicePools,
    pub(crate) policy: AtomicPolicy,
    pub(crate) modules: ModuleCache,
    pub(crate) retained: Retained,
    pub(crate) windows: WindowState,
    pub(crate) resets: Resets,
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
            ops: OpsTable::new(),
            activity: Activity::new(),
            inventory: Inventory::new(),
            pools: Pools::new(),
            device: DevicePools::new(),
            policy: AtomicPolicy::new(),
            modules: ModuleCache::new(),
            retained: Retained::new(),
            windows: WindowState::new(),
            resets: Resets::new(),
            graph_warned: AtomicBool::new(false),
        }
    }

    /// Enters the library for one call; `Finalized` once finalize has begun.
    fn enter(&self) -> Result<Call<'_>> {
        self.activity.enter().ok_or(Error::Finalized)
    }

    /// The parts a capture or restore works with, lent to the snapshot module.
    fn parts(&self) -> Parts<'_, O> {
        Parts {
            ops: &self.ops,
            activity: &self.activity,
            inventory: &self.inventory,
            pools: &self.pools,
            device: &self.device,
            policy: &self.policy,
            modules: &self.modules,
            retained: &self.retained,
            resets: &self.resets,
        }
    }

    /// Installs the device ops. The previous set stays in use by calls in flight and by storage locked or
    /// allocated through it, and is dropped when the last of those is gone.
    pub fn configure(&self, ops: O) -> Result<()> {
        let _call = self.enter()?;
        self.ops.install(ops).inspect_err(|_| {
            crate::log!(
                Level::Warning,
                "configure: {} earlier sets of ops are all still in use (by calls in flight or storage locked \
                 through them); trim staging and device storage, then configure again",
                crate::opsets::MAX_OPS_SETS
            );
        })
    }

    /// A use of the current ops for the length of a call.
    fn ops(&self) -> Result<OpsRef<'_, O>> {
        self.ops.get()
    }

    /// Whether `finalize` has begun.
    pub fn is_finalized(&self) -> bool {
        self.activity.is_finalized()
    }

    /// Whether the calling thread is inside an engine call: a kreplay call it makes now comes from a device op
    /// or a logger, and must not wait for work its own thread is in the middle of.
    pub fn is_called_from_inside(&self) -> bool {
        self.activity.is_current_thread_inside()
    }

    /// From now on every call returns [`Error::Finalized`] (or does nothing). Waits until calls in flight on
    /// other threads have left the library (they stop early where they can), so no device op and no log line
    /// comes after it returns. Called from inside a device op or logger it cannot wait for its own thread and
    /// returns at once.
    pub fn finalize(&self) {
        self.activity.finalize();
    }

    /// The checks every record call makes: a non-null range that does not wrap around.
    fn check_record(function: &str, address: usize, size: usize) -> Result<()> {
        if address == 0 || size == 0 || address.checked_add(size).is_none() {
            crate::log!(Level::Warning, "{function}({address:#x}, {size}): null address, zero or overflowing size");
            return Err(Error::InvalidArgument);
        }
        Ok(())
    }

    /// Turns allocation recording on or off. Frees that happen while it is off cannot be seen, so turning it
    /// off forgets everything tracked, refuses inserts of record calls still in flight, and waits until no copy
    /// touches a region that was tracked (except when called from inside a device op: then it cannot wait).
    pub fn set_tracking(&self, enabled: bool) {
        let Ok(call) = self.enter() else { return };
        let forgotten = self.inventory.set_enabled(enabled, !call.is_nested());
        if !enabled {
            self.windows.untracked.clear();
        }
        if forgotten > 0 {
            crate::log!(Level::Info, "tracking turned off: {forgotten} tracked regions forgotten");
        }
    }

    /// Whether allocations are being recorded.
    #[inline]
    pub fn tracking_enabled(&self) -> bool {
        self.inventory.is_enabled()
    }

    /// Records an allocation after the runtime made it: classified, and tracked only when it is coarse-grained
    /// device memory that is neither kernarg nor executable. A size beyond the allocation's extent as the
    /// pointer query reports it is clamped to that extent.
    pub fn record_alloc(&self, ptr: usize, size: usize, alloc_flags: u32) -> Result<()> {
        if !self.tracking_enabled() {
            return Ok(());
        }
        let _call = self.enter()?;
        Self::check_record("record_alloc", ptr, size)?;
        // Hosts pass the pool allocation flags through unchanged; only the executable bit matters here, and it is
        // decided before any query because runtimes keep live kernel arguments in such allocations.
        if AllocFlags::from_bits_truncate(alloc_flags).contains(AllocFlags::EXECUTABLE) {
            self.windows.note_untracked(ptr, size, alloc_flags, None);
            return Ok(());
        }
        // Anything recorded from here on belongs to this epoch: if tracking is turned off while the pointer query
        // runs, the insert is refused.
        let epoch = self.inventory.epoch();
        let info = self.classify(ptr, size, epoch)?;
        if !info.is_snapshottable() {
            self.windows.note_untracked(ptr, size, alloc_flags, Some(&info));
            return Ok(());
        }
        // Remembered as untracked under an earlier allocation at this address whose free was never recorded.
        self.windows.untracked.remove(ptr);
        let size = clamp_to_extent(ptr, size, info.base, info.size);
        match self.inventory.insert(ptr, size, info.owner, epoch) {
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

    /// The pointer query's answer for an allocation being recorded in `epoch`. Without one, whether it is device
    /// memory, and whose, is unknown: it is recorded as unknown, which declines every agent until it is freed, so
    /// that it does not vanish silently.
    fn classify(&self, ptr: usize, size: usize, epoch: u64) -> Result<PointerInfo> {
        let Ok(ops) = self.ops() else {
            self.inventory.insert_unknown(ptr, epoch);
            crate::log!(
                Level::Warning,
                "record_alloc: no device ops are configured to classify {ptr:#x} ({size} bytes); snapshots of every \
                 agent are declined until it is freed"
            );
            return Err(Error::NotConfigured);
        };
        let info = ops.pointer_info(ptr as *const u8);
        drop(ops);
        info.map_err(|error| {
            self.inventory.insert_unknown(ptr, epoch);
            crate::log!(
                Level::Warning,
                "record_alloc: the pointer query for {ptr:#x} ({size} bytes) failed ({error:?}); snapshots of every \
                 agent are declined until it is freed"
            );
            Error::DeviceError
        })
    }

    /// Takes an allocation out before the runtime frees it, waiting only for a copy in flight that touches it.
    /// If the real free then fails, the host calls [`Engine::record_free_undo`].
    pub fn record_free(&self, ptr: usize) -> Result<()> {
        if !self.tracking_enabled() {
            return Ok(());
        }
        let call = self.enter()?;
        if ptr == 0 {
            return Err(Error::InvalidArgument);
        }
        match self.inventory.remove(ptr, !call.is_nested()) {
            Ok(_) => Ok(()),
            Err(RemoveError::NotFound) => {
                self.windows.untracked.remove(ptr);
                Err(Error::NotFound)
            }
            Err(RemoveError::InUse) => {
                crate::log!(
                    Level::Error,
                    "record_free({ptr:#x}) was called from inside a kreplay call on the same thread (a device op or \
                     logger) while that call copies this region: refused, the region stays tracked; free it after \
                     the op returns"
                );
                Err(Error::InUse)
            }
        }
    }

    /// Puts back the allocation at `ptr` whose free was recorded last, with its generation, because the
    /// runtime refused the real free. `NotFound` when no such free is remembered.
    pub fn record_free_undo(&self, ptr: usize) -> Result<()> {
        if !self.tracking_enabled() {
            return Ok(());
        }
        let _call = self.enter()?;
        if ptr == 0 {
            return Err(Error::InvalidArgument);
        }
        self.inventory.undo_remove(ptr).map_err(|_| {
            crate::log!(
                Level::Warning,
                "record_free_undo({ptr:#x}): no recent free of that address is remembered (or it is tracked again)"
            );
            Error::NotFound
        })
    }

    /// Records a virtual-memory mapping, tracked and snapshotted like an allocation.
    pub fn record_vmem_map(&self, address: usize, size: usize, owner: Agent) -> Result<()> {
        if !self.tracking_enabled() {
            return Ok(());
        }
        let _call = self.enter()?;
        Self::check_record("record_vmem_map", address, size)?;
        self.windows.untracked.unmap(address, size);
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
        let _call = self.enter()?;
        Self::check_record("record_vmem_map_unknown", address, size)?;
        self.inventory.insert_vmem_unknown(address, size);
        self.windows.untracked.insert_mapping(address, size);
        crate::log!(
            Level::Warning,
            "mapping at {address:#x} ({size} bytes) has no known owner; snapshots of every agent are declined until \
             it is unmapped"
        );
        Ok(())
    }

    /// Records an unmap of `[address, address + size)`, which may cover any part of one or more mappings,
    /// waiting only for copies in flight that touch those mappings.
    pub fn record_vmem_unmap(&self, address: usize, size: usize) -> Result<()> {
        if !self.tracking_enabled() {
            return Ok(());
        }
        let call = self.enter()?;
        Self::check_record("record_vmem_unmap", address, size)?;
        self.windows.untracked.unmap(address, size);
        let outcome = match self.inventory.remove_vmem(address, size, !call.is_nested()) {
            Ok(outcome) => outcome,
            Err(_) => {
                crate::log!(
                    Level::Error,
                    "record_vmem_unmap({address:#x}, {size}) was called from inside a kreplay call on the same thread \
                     while that call copies the mapping: refused, nothing changed"
                );
                return Err(Error::InUse);
            }
        };
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
        let _call = self.enter()?;
        Ok(self.inventory.stats(agent))
    }

    /// Replaces the policy; `InvalidArgument` when a field is out of range.
    pub fn set_policy(&self, policy: Policy) -> Result<()> {
        let _call = self.enter()?;
        if !policy.window_fields_valid() {
            crate::log!(
                Level::Warning,
                "set_policy: untracked_decline_mask = {:#x} names unknown kinds (known: {:#x}), or \
                 device_budget_percent = {} is above 100",
                policy.untracked_decline_mask,
                crate::policy::UNTRACKED_DECLINE_BITS,
                policy.device_budget_percent
            );
            return Err(Error::InvalidArgument);
        }
        if policy.host_budget_percent > crate::policy::MAX_HOST_BUDGET_PERCENT {
            crate::log!(
                Level::Warning,
                "set_policy: host_budget_percent = {} is above 100",
                policy.host_budget_percent
            );
            return Err(Error::InvalidArgument);
        }
        if !policy.is_valid() {
            crate::log!(
                Level::Warning,
                "set_policy: digest_block_bytes = {} is not a power of two from {} to {}",
                policy.digest_block_bytes,
                crate::policy::MIN_DIGEST_BLOCK,
                crate::policy::MAX_DIGEST_BLOCK
            );
            return Err(Error::InvalidArgument);
        }
        self.policy.set(policy);
        Ok(())
    }

    /// The current policy.
    pub fn policy(&self) -> Policy {
        self.policy.get()
    }

    /// A code object was loaded or unloaded: every agent's cached module scan is dropped.
    pub fn modules_changed(&self) {
        let Ok(_call) = self.enter() else { return };
        self.modules.invalidate();
    }

    /// `agent`'s device context is gone (CUDA: a device reset, the primary context reset, a context destroyed):
    /// everything made in it went with it. kreplay forgets the agent's device storage (idle, retained and held by
    /// live snapshots) without `device_free`, since its addresses may be the program's new allocations; forgets
    /// that the agent's staging is page-locked without `host_unlock` (it is locked again on next use); drops
    /// cached module scans; and makes every live snapshot of the agent unrestorable (a restore skips all of it,
    /// a release gives back its host staging only). No device op is called.
    pub fn agent_reset(&self, agent: Agent) {
        let Ok(_call) = self.enter() else { return };
        // The epoch first: a snapshot dropped from now on gives back no device storage and keeps no stash.
        self.resets.bump(agent);
        let parts = self.parts();
        if let Some(stash) = self.retained.take(agent) {
            parts.release_stale(agent, stash.storage);
        }
        self.device.forget(agent, &mut |hold| self.ops.release_hold(hold));
        self.pools.forget_locks(agent, &mut |hold| self.ops.release_hold(hold));
        self.modules.invalidate();
        crate::log!(
            Level::Info,
            "agent {:#x}: device context reset; its device storage and page-locking are forgotten, its snapshots \
             will not be restored",
            agent.0
        );
    }

    /// Host storage for `size` bytes from `agent`'s pool.
    pub fn staging_acquire(&self, agent: Agent, size: usize) -> Result<Lease> {
        let _call = self.enter()?;
        self.pools.acquire(agent, size)
    }

    /// Returns storage lent under `loan` to `agent`'s pool; `NotFound` when that loan is not outstanding.
    pub fn staging_release(&self, agent: Agent, data: NonNull<u8>, capacity: usize, loan: u64) -> Result<()> {
        let _call = self.enter()?;
        self.pools.release(agent, data, capacity, loan)
    }

    /// Unmaps all of `agent`'s idle host storage (unlocking page-locked storage first, through the ops that
    /// locked it), including storage kept for dirty-only re-capture.
    pub fn staging_trim(&self, agent: Agent) {
        let Ok(_call) = self.enter() else { return };
        self.parts().trim(agent, Tier::Host);
    }

    /// Bytes of idle host storage held for `agent`.
    pub fn retained_staging_bytes(&self, agent: Agent) -> usize {
        let Ok(_call) = self.enter() else { return 0 };
        self.pools.retained_bytes(agent) + self.retained.bytes(agent, Tier::Host)
    }

    /// Bytes of idle device storage held for `agent`.
    pub fn retained_device_bytes(&self, agent: Agent) -> usize {
        let Ok(_call) = self.enter() else { return 0 };
        self.device.idle_bytes(agent) + self.retained.bytes(agent, Tier::Device)
    }

    /// Gives all of `agent`'s idle device storage back.
    pub fn device_trim(&self, agent: Agent) {
        let Ok(_call) = self.enter() else { return };
        self.parts().trim(agent, Tier::Device);
    }

    /// Gives every agent's idle device storage back (a host allocation failed for lack of device memory).
    pub fn device_trim_all(&self) {
        let Ok(_call) = self.enter() else { return };
        let parts = self.parts();
        self.device.agents(|agent| parts.trim(agent, Tier::Device));
    }

    /// Captures `agent`'s tracked regions and module-scope variables, or declines. Either way, once capture
    /// ends, the agent's idle storage (host and device) that this snapshot did not take is given back, so
    /// memory held between dispatches is bounded by the last snapshot's footprint.
    pub fn snap(&self, agent: Agent) -> core::result::Result<Box<Snapshot<'_, O>>, DeclineReason> {
        let Ok(_call) = self.enter() else { return Err(DeclineReason::Finalized) };
        let result = crate::snapshot::capture(self.parts(), agent);
        self.windows.on_snapshot(agent, result.as_ref().map(|snapshot| snapshot.info).map_err(|&reason| reason));
        result
    }

    /// Writes every captured range back. Tracked regions freed, shrunk or reallocated since the snapshot are
    /// skipped; module variables are always written; every range is attempted. `PartialRestore` when any copy
    /// failed (or a finalize stopped the restore): the host must not run another pass.
    ///
    /// With the policy's `learn_write_set`, a restore that is not a full check digests and writes only the
    /// snapshot's learned write set and hints (see [`crate::snapshot::write_set`]); use
    /// [`Engine::restore_with`] to mark the last restore of a window.
    pub fn restore(&self, snapshot: &Snapshot<'_, O>) -> (RestoreReport, Result<()>) {
        self.restore_with(snapshot, RestoreOptions::default())
    }

    /// [`Engine::restore`], as `options` ask: a full check digests the whole footprint whatever was learned. So
    /// does the restore that is the last of the snapshot's open window by the pass count given at open (restore
    /// `passes - 1` and any after it), so a window of known passes ends exact even if the host marks nothing.
    pub fn restore_with(&self, snapshot: &Snapshot<'_, O>, options: RestoreOptions) -> (RestoreReport, Result<()>) {
        match self.enter() {
            Ok(_call) => {
                let last = self.windows.is_last_restore(&snapshot.info);
                let options = RestoreOptions { full_check: options.full_check || last };
                let (report, status) = crate::snapshot::restore(self.parts(), snapshot, options);
                self.windows.on_restore(&snapshot.info, &report, status.is_ok(), &self.policy);
                (report, status)
            }
            Err(error) => (RestoreReport::default(), Err(error)),
        }
    }

    /// Adds the blocks that `hints` (`(address, bytes)`: ranges the host believes the dispatch may write;
    /// `bytes` 0 stands for the whole tracked region that holds `address`) touch to `snapshot`'s write set, so
    /// that its partial restores digest them too. Hints never make a full check partial. A snapshot without
    /// digests has no write set: nothing to do. Returns the blocks added (hints outside the snapshot's tracked
    /// regions add none); `InvalidArgument` for a hint that wraps around the address space, `OutOfHostMemory`
    /// (nothing added) without memory for the set.
    pub fn hint_writes(&self, snapshot: &Snapshot<'_, O>, hints: &[(usize, usize)]) -> Result<usize> {
        let _call = self.enter()?;
        if let Some(&(address, bytes)) = hints.iter().find(|(address, bytes)| address.checked_add(*bytes).is_none()) {
            crate::log!(Level::Warning, "hint_writes: the hint at {address:#x} of {bytes} bytes wraps around");
            return Err(Error::InvalidArgument);
        }
        snapshot.hint_writes(hints).ok_or_else(|| {
            crate::log!(Level::Warning, "hint_writes: no host memory for the write set; the hints are dropped");
            Error::OutOfHostMemory
        })
    }

    /// Opens a window on `agent`: fences it (copies naming it wait from now on), waits for the copies in
    /// flight on it, then checks untracked memory and the projected cost against the policy. A decline leaves
    /// nothing fenced and logs the outcome line. 0 passes opens an open-ended window; `CapacityExceeded` when
    /// [`crate::window::WINDOW_AGENTS`] agents have windows or copies already.
    pub fn window_open(&self, agent: Agent, options: WindowOptions) -> Result<Opened> {
        let _call = self.enter()?;
        let inputs = OpenInputs {
            activity: &self.activity,
            policy: &self.policy,
            ops: &self.ops,
            inventory: &self.inventory,
            modules: &self.modules,
        };
        self.windows.open(&inputs, agent, &options)
    }

    /// Closes a window: reopens the fence, fills in and logs the outcome, and frees the handle. A handle that is
    /// not an open window (closed already, or never issued) is `InvalidArgument`, with a log line. Works after
    /// finalize too, so that no fence stays closed.
    pub fn window_close(&self, handle: WindowHandle) -> Result<Outcome> {
        self.windows.close(handle)
    }

    /// The host saw work submitted on `agent` from inside its open window (a tool callback launching a
    /// dispatch): the outcome will say so. Does nothing when no window is open there; never waits.
    pub fn window_note_reentry(&self, agent: Agent) {
        self.windows.note_reentry(agent);
    }

    /// The agent's window state, for tests: whether a window is open or opening on it.
    pub fn window_is_open(&self, agent: Agent) -> bool {
        self.windows.is_open(agent)
    }

    /// Untracked memory live for `agent` now.
    pub fn untracked_stats(&self, agent: Agent) -> Result<UntrackedStats> {
        let _call = self.enter()?;
        Ok(self.windows.untracked_stats(agent))
    }

    /// Counts an async copy that touches `agents` as in flight on each of them until
    /// [`Engine::copy_end`] of the returned token, first waiting while a window of another thread is open on
    /// any of them. Before any window was ever opened, returns [`UNCOUNTED_TOKEN`] at the cost of one relaxed
    /// load. Never allocates. `InvalidArgument` for no agents; `CapacityExceeded` (nothing counted, with a log
    /// line) for more than [`crate::window::fence::MAX_COPY_AGENTS`] distinct agents, more than
    /// [`crate::window::fence::TOKEN_CAPACITY`] copies in flight, or an agent table that is full.
    pub fn copy_begin(&self, agents: &[Agent]) -> Result<u64> {
        if !self.windows.counts_copy(agents)? {
            return Ok(UNCOUNTED_TOKEN);
        }
        let _call = self.enter()?;
        self.windows.copy_begin(agents, &self.activity)
    }

    /// Ends the copy `token` stands for: it no longer counts as in flight on its agents. A token ended twice or
    /// never issued is ignored, with a log line; [`UNCOUNTED_TOKEN`] is ignored silently.
    pub fn copy_end(&self, token: u64) {
        self.windows.copy_end(token);
    }

    /// Async copies in flight on `agent` (for tests and statistics).
    pub fn copies_in_flight(&self, agent: Agent) -> u64 {
        self.windows.copies_in_flight(agent)
    }

    /// The replay gate; a graph launch is warned about once per engine (per process for the C API).
    pub fn replay_gate(&self, packet_count: u32, dispatch_packet_count: u32, graph_launch_active: bool) -> Gate {
        self.warn_graph(gate::decide(packet_count, dispatch_packet_count, graph_launch_active))
    }

    /// The gate of a host that replays multi-packet submissions as windows over their dispatches (see
    /// [`gate::decide_range`]). No warning for graph launches: such a host may replay a graph itself once it has
    /// checked the graph's memory.
    pub fn replay_gate_range(&self, packet_count: u32, dispatch_packet_count: u32, graph_launch_active: bool) -> Gate {
        gate::decide_range(packet_count, dispatch_packet_count, graph_launch_active)
    }

    fn warn_graph(&self, verdict: Gate) -> Gate {
        if verdict == Gate::GraphLaunch && !self.graph_warned.swap(true, Ordering::Relaxed) {
            if let Ok(_call) = self.enter() {
                crate::log!(
                    Level::Warning,
                    "graph launches are not replayed: their dispatches run once, without counters from extra \
                     passes (warned once per process)"
                );
            }
        }
        verdict
    }

    /// Calls `visit` for each of `agent`'s tracked regions, under the inventory's read lock (see
    /// [`Inventory::for_each`]): `visit` must not call into the engine. Returns how many regions it visited.
    pub fn inventory_foreach(&self, agent: Agent, visit: impl FnMut(&Region)) -> Result<usize> {
        let _call = self.enter()?;
        Ok(self.inventory.for_each(agent, visit))
    }

    /// The generation of the region tracked at exactly `base`; `NotFound` when none is.
    pub fn generation_of(&self, base: usize) -> Result<u64> {
        let _call = self.enter()?;
        self.inventory.generation_of(base).ok_or(Error::NotFound)
    }
}

/// `size` bytes from `ptr`, clamped to the allocation `[base, base + extent)` that the pointer query reported
/// (when it reported one that contains `ptr`), with a warning.
fn clamp_to_extent(ptr: usize, size: usize, base: usize, extent: usize) -> usize {
    let Some(end) = base.checked_add(extent) else { return size };
    if extent == 0 || ptr < base || ptr >= end || size <= end - ptr {
        return size;
    }
    let clamped = end - ptr;
    crate::log!(
        Level::Warning,
        "record_alloc({ptr:#x}, {size}): the allocation ends {clamped} bytes after the pointer (base {base:#x}, {extent} \
         bytes); only those are tracked"
    );
    clamped
}
