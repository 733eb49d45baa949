//! Capture: plan -> stage -> transfer -> report.

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::plan::place;
use super::transfer::{Direction, Dirty, Outcome, Ranges};
use super::{Digests, Range, Snapshot, SnapshotInfo, Source, Stash, Storage, Tier, gigabytes_per_second, try_box};
use crate::clock;
use crate::engine::Engine;
use crate::error::DeclineReason;
use crate::log::Level;
use crate::modules::{CachedVariable, ModuleList, SharedList, Span};
use crate::ops::{DeviceOps, Digest};
use crate::opsets::OpsRef;
use crate::policy::Policy;
use crate::storage::device::DeviceLease;
use crate::types::Agent;

/// New storage gets this much headroom (1/8), so a footprint that grows a little reuses its block.
const HEADROOM_DIVISOR: usize = 8;

/// Which tiers of the previous snapshot's storage a capture took over (their ranges may be re-copied dirty-only).
#[derive(Copy, Clone, Debug, Default)]
struct Reused {
    host: bool,
    device: bool,
}

impl<O: DeviceOps> Engine<O> {
    /// Captures `agent`'s tracked regions and module-scope variables, or declines. Either way, once capture
    /// ends, the agent's idle storage (host and device) that this snapshot did not take is given back, so
    /// memory held between dispatches is bounded by the last snapshot's footprint.
    pub fn snap(&self, agent: Agent) -> core::result::Result<Box<Snapshot<'_, O>>, DeclineReason> {
        let Ok(_call) = self.enter() else { return Err(DeclineReason::Finalized) };
        let result = self.capture(agent);
        self.window_snapshot(agent, result.as_ref().map(|snapshot| snapshot.info).map_err(|&reason| reason));
        if result.is_err() {
            // A decline keeps nothing: not even the previous snapshot's storage kept for dirty-only re-capture
            // (the capture may have declined before taking it).
            self.retained.drop_agent(self, agent, Tier::Host);
            self.retained.drop_agent(self, agent, Tier::Device);
        }
        self.trim_host(agent);
        self.trim_device(agent);
        if let Err(reason) = result {
            crate::log!(
                Level::Warning,
                "agent {:#x}: snapshot declined: {}; the dispatch runs once, unreplayed",
                agent.0,
                reason.describe()
            );
        }
        result
    }

    fn capture(&self, agent: Agent) -> core::result::Result<Box<Snapshot<'_, O>>, DeclineReason> {
        let ops = self.ops().map_err(|_| DeclineReason::NotConfigured)?;
        if !self.tracking_enabled() {
            crate::log!(Level::Warning, "agent {:#x}: tracking is off, so allocations are not recorded", agent.0);
            return Err(DeclineReason::NotConfigured);
        }
        let policy = self.policy();
        let mut info = SnapshotInfo { agent, ..SnapshotInfo::default() };

        // Plan. From here on a decline drops `snapshot`, which gives its storage and module list back.
        let (ranges, modules) = self.plan(&ops, agent, &policy, &mut info)?;
        let mut snapshot = Snapshot { engine: self, storage: Storage::default(), ranges, modules, digests: None, info };
        let total: usize = snapshot.ranges.iter().map(|r| r.size).sum();
        if policy.max_snapshot_bytes != 0 && total > policy.max_snapshot_bytes {
            crate::log!(
                Level::Warning,
                "agent {:#x}: the snapshot needs {total} bytes, above max_snapshot_bytes = {}",
                agent.0,
                policy.max_snapshot_bytes
            );
            return Err(DeclineReason::HostBudget);
        }
        let dirty = policy.dirty_only && ops.can_digest();
        let stash = self.retained.take(agent);
        let stash = match stash {
            Some(stash)
                if dirty && stash.digests.as_ref().is_some_and(|d| d.block_bytes == policy.digest_block_bytes) =>
            {
                Some(stash)
            }
            other => {
                if let Some(stash) = other {
                    stash.release(self);
                }
                None
            }
        };
        // Whatever storage of the previous snapshot this one does not take over is given back below.
        let mut stash = stash;
        let moved = (|| {
            // Stage.
            let start = clock::now_ns();
            let reused = self.stage(&ops, agent, &policy, &mut snapshot, stash.as_mut())?;
            snapshot.info.staging_ns = clock::since(start);
            // Transfer.
            let start = clock::now_ns();
            self.capture_transfer(&ops, agent, &policy, &mut snapshot, dirty, reused, stash.as_ref())?;
            snapshot.info.copy_ns = clock::since(start).saturating_sub(snapshot.info.digest_ns);
            Ok(())
        })();
        if let Some(stash) = stash {
            stash.release(self);
        }
        moved?;

        // Report.
        for range in &snapshot.ranges {
            match range.source {
                Source::Tracked { .. } => snapshot.info.regions += 1,
                Source::ModuleVariables { count, .. } => snapshot.info.module_variables += count as usize,
            }
            snapshot.info.bytes += range.size;
            if range.tier == Tier::Device {
                snapshot.info.device_bytes += range.size;
            }
        }
        let info = snapshot.info;
        let boxed = try_box(snapshot).ok_or(DeclineReason::MetadataMemory)?;
        crate::log!(
            Level::Info,
            "agent {:#x}: snapshot of {} regions and {} module variables, {} bytes ({} on the device, {} copied); \
             inventory {} us, module scan {} us, staging {} us, digest {} us, copy {} us ({:.2} GB/s)",
            agent.0,
            info.regions,
            info.module_variables,
            info.bytes,
            info.device_bytes,
            info.copied_bytes,
            info.inventory_ns / 1000,
            info.module_scan_ns / 1000,
            info.staging_ns / 1000,
            info.digest_ns / 1000,
            info.copy_ns / 1000,
            gigabytes_per_second(info.copied_bytes, info.copy_ns)
        );
        Ok(boxed)
    }

    /// Places the ranges and takes storage for them: device memory of the agent up to its budget (reusing the
    /// previous snapshot's when it fits), host staging for the rest. Returns which tiers of `stash` were taken
    /// over; the stash's other storage is given back.
    fn stage(
        &self,
        ops: &OpsRef<'_, O>,
        agent: Agent,
        policy: &Policy,
        snapshot: &mut Snapshot<'_, O>,
        mut stash: Option<&mut Stash>,
    ) -> core::result::Result<Reused, DeclineReason> {
        let mut reused = Reused::default();
        let stash_device = stash.as_ref().and_then(|s| s.storage.device.as_ref()).map_or(0, |l| l.capacity);
        let device_limit = if policy.device_budget_bytes > 0 && ops.can_alloc_device() {
            // Device memory lent to other live snapshots of this agent counts against the budget.
            let lent = self.device.held_bytes(agent).saturating_sub(self.device.idle_bytes(agent) + stash_device);
            policy.device_budget_bytes.saturating_sub(lent)
        } else {
            0
        };
        let mut placement = place(&mut snapshot.ranges, device_limit).ok_or(DeclineReason::HostBudget)?;

        if placement.device > 0 {
            match self.take_device(ops, agent, placement.device, device_limit, stash.as_deref_mut()) {
                Ok((lease, from_stash)) => {
                    reused.device = from_stash;
                    snapshot.storage.device = Some(lease);
                }
                Err(error) => {
                    crate::log!(
                        Level::Info,
                        "agent {:#x}: {} bytes of device storage could not be allocated ({error:?}); the snapshot is \
                         kept in host staging",
                        agent.0,
                        placement.device
                    );
                    placement = place(&mut snapshot.ranges, 0).ok_or(DeclineReason::HostBudget)?;
                }
            }
        }
        if let Some(lease) = stash.as_deref_mut().and_then(|s| s.storage.device.take()) {
            let _ = self.device.release(&lease);
        }

        if placement.host > 0 {
            let from_stash = stash.as_deref_mut().and_then(|s| {
                s.storage.host.take_if(|lease| lease.capacity >= placement.host && lease.capacity / 2 <= placement.host)
            });
            let mut lease = match from_stash {
                Some(lease) => {
                    reused.host = true;
                    lease
                }
                None => {
                    let reserve = placement.host.saturating_add(placement.host / HEADROOM_DIVISOR);
                    self.pools.acquire_block(agent, placement.host, reserve).map_err(|error| {
                        crate::log!(
                            Level::Warning,
                            "agent {:#x}: {} bytes of staging could not be mapped ({error:?})",
                            agent.0,
                            placement.host
                        );
                        DeclineReason::StagingMemory
                    })?
                }
            };
            if policy.pin_staging && !lease.is_locked() && ops.can_lock_host() {
                // First dispatch of this footprint: the block is fresh, so the lock also faults every page in
                // (adapters populate it in parallel first; see `DeviceOps::host_lock`).
                let begun = clock::now_ns();
                let locked = ops.host_lock(lease.data.as_ptr(), lease.capacity);
                crate::log!(
                    Level::Info,
                    "agent {:#x}: new staging of {} bytes page-locked in {} us",
                    agent.0,
                    lease.capacity,
                    clock::since(begun) / 1000
                );
                match locked {
                    Ok(()) => {
                        // Held through the set that locked it, so that set unlocks it, whatever is configured then.
                        let hold = ops.hold();
                        if !self.pools.set_hold(&mut lease, Some(hold)) {
                            self.ops.release_hold(hold);
                            let _ = ops.host_unlock(lease.data.as_ptr(), lease.capacity);
                        }
                    }
                    Err(error) => crate::log!(
                        Level::Warning,
                        "agent {:#x}: page-locking {} bytes of staging failed ({error:?}); copies use pageable memory",
                        agent.0,
                        lease.capacity
                    ),
                }
            }
            snapshot.storage.host = Some(lease);
        }
        if let Some(lease) = stash.and_then(|s| s.storage.host.take()) {
            let _ = self.pools.release(lease.agent, lease.data, lease.capacity, lease.loan);
        }
        Ok(reused)
    }

    /// Device storage of at least `size` bytes and at most `limit`: the previous snapshot's block if it fits,
    /// else the best idle block, else a new allocation (after giving idle blocks back, so that the budget holds).
    fn take_device(
        &self,
        ops: &OpsRef<'_, O>,
        agent: Agent,
        size: usize,
        limit: usize,
        stash: Option<&mut Stash>,
    ) -> crate::Result<(DeviceLease, bool)> {
        if let Some(lease) = stash.and_then(|s| s.storage.device.take()) {
            if lease.capacity >= size && lease.capacity / 2 <= size && lease.capacity <= limit {
                return Ok((lease, true));
            }
            // Give it back first: it may be the best fit, and otherwise the trim below frees it before any new
            // allocation, so the budget holds.
            let _ = self.device.release(&lease);
        }
        if let Some(lease) = self.device.take(agent, size, limit) {
            return Ok((lease, false));
        }
        self.trim_device(agent);
        let len = size.saturating_add(size / HEADROOM_DIVISOR).min(limit).max(size);
        let ptr = ops.device_alloc(agent, len)?;
        // Freed through the set that allocated it, whatever is configured then.
        let hold = ops.hold();
        match self.device.add(agent, ptr, len, hold) {
            Ok(lease) => Ok((lease, false)),
            Err(error) => {
                self.free_device(agent, ptr, len, hold);
                Err(error)
            }
        }
    }

    /// Copies every range into the snapshot's storage; with dirty-only, digests them first and re-copies only
    /// the changed blocks of ranges whose previous contents are still in the reused storage.
    #[allow(clippy::too_many_arguments)]
    fn capture_transfer(
        &self,
        ops: &O,
        agent: Agent,
        policy: &Policy,
        snapshot: &mut Snapshot<'_, O>,
        dirty: bool,
        reused: Reused,
        stash: Option<&Stash>,
    ) -> core::result::Result<(), DeclineReason> {
        let mut outcomes: Vec<Outcome> = Vec::new();
        outcomes.try_reserve_exact(snapshot.ranges.len()).map_err(|_| DeclineReason::MetadataMemory)?;
        outcomes.resize(snapshot.ranges.len(), Outcome::Pending);

        let block = policy.digest_block_bytes;
        let mut digests: Vec<Digest> = Vec::new();
        // For each range, the index of its previous digests in the stash, where its storage holds them.
        let mut known: Vec<Option<usize>> = Vec::new();
        if dirty {
            let blocks: usize =
                snapshot.ranges.iter().filter(|r| r.pin_key().is_some()).map(|r| r.size.div_ceil(block)).sum();
            if digests.try_reserve_exact(blocks).is_err() || known.try_reserve_exact(snapshot.ranges.len()).is_err() {
                return Err(DeclineReason::MetadataMemory);
            }
            digests.resize(blocks, Digest::default());
            let mut at = 0;
            for range in snapshot.ranges.iter_mut().filter(|r| r.pin_key().is_some()) {
                range.digest_at = at;
                at += range.size.div_ceil(block);
            }
            // Where the footprint did not change, range i is the stash's range i; otherwise look it up by address.
            let mut by_address: Vec<u32> = Vec::new();
            for (i, range) in snapshot.ranges.iter().enumerate() {
                let same_place = stash.and_then(|s| s.ranges.get(i)).filter(|old| old.address == range.address);
                let old = match same_place {
                    Some(old) => Some(old),
                    None => stash.and_then(|s| lookup(s, &mut by_address, range.address)),
                };
                known.push(old.and_then(|old| previous(range, old, reused, stash)));
            }
        }

        let moved = {
            let known_at = |i: usize| known.get(i).copied().flatten();
            let empty: [Digest; 0] = [];
            let reference = stash.and_then(|s| s.digests.as_ref()).map_or(&empty[..], |d| &d.all[..]);
            let rule = dirty.then(|| Dirty { block_bytes: block, live: &mut digests[..], known: &known_at, reference });
            let ranges = Ranges { all: &snapshot.ranges, variables: &snapshot.modules.list.variables };
            self.transfer(ops, agent, &snapshot.storage, ranges, Direction::Capture, rule, &mut outcomes)
        };
        snapshot.info.copied_bytes = moved.copied_bytes;
        snapshot.info.digest_ns = moved.digest_ns;
        if outcomes.iter().any(|o| matches!(o, Outcome::Failed(_))) {
            return Err(DeclineReason::CopyFailed);
        }
        if outcomes.contains(&Outcome::Pending) {
            return Err(DeclineReason::Finalized);
        }
        if dirty && !moved.digest_failed {
            snapshot.digests = Some(Digests { block_bytes: block, all: digests });
        }
        let mut refused: Vec<u32> = Vec::new();
        for (range, outcome) in snapshot.ranges.iter().zip(&outcomes) {
            if let (Outcome::DoneOneByOne, Source::ModuleVariables { first, .. }) = (outcome, range.source) {
                if refused.try_reserve(1).is_ok() {
                    refused.push(first);
                }
            }
        }
        // Regions freed since the inventory was listed are simply left out.
        let mut outcome = outcomes.iter();
        snapshot.ranges.retain(|_| outcome.next() != Some(&Outcome::Skipped));
        if !refused.is_empty() {
            split_spans(agent, snapshot, &refused);
        }
        Ok(())
    }
}

/// Cuts the spans of module variables that the device would not copy as one (those starting at the variables
/// `refused`, in order) into single variables: in the snapshot, so that its restores copy them one by one from
/// the start, and, when its list may be cached, in a new list cached in place of the old one, so that later
/// captures do too until code objects change. Any span whose copy failed and whose variables then copied one by
/// one counts as refused. Without host memory for the new lists nothing changes, and those spans are tried whole
/// again next time.
fn split_spans<O: DeviceOps>(agent: Agent, snapshot: &mut Snapshot<'_, O>, refused: &[u32]) {
    debug_assert!(refused.windows(2).all(|w| w[0] < w[1]), "refused spans are listed in order");
    let is_refused = |first: u32| refused.binary_search(&first).is_ok();
    let list = &*snapshot.modules.list;
    let extra: usize = list.spans.iter().filter(|s| is_refused(s.first)).map(|s| s.count as usize - 1).sum();
    let mut ranges: Vec<Range> = Vec::new();
    if ranges.try_reserve_exact(snapshot.ranges.len() + extra).is_err() {
        return;
    }
    let singles = |first: u32, count: u32| {
        (first..first + count).map(move |k| {
            let variable = list.variables[k as usize];
            (k, variable)
        })
    };
    for range in &snapshot.ranges {
        match range.source {
            Source::ModuleVariables { first, count } if is_refused(first) => {
                ranges.extend(singles(first, count).map(|(k, variable)| Range {
                    address: variable.address,
                    size: variable.size,
                    offset: range.offset + (variable.address - range.address),
                    source: Source::ModuleVariables { first: k, count: 1 },
                    ..*range
                }))
            }
            _ => ranges.push(*range),
        }
    }
    let cached = snapshot.modules.cache_as.and_then(|generation| {
        let mut spans: Vec<Span> = Vec::new();
        let mut variables: Vec<CachedVariable> = Vec::new();
        spans.try_reserve_exact(list.spans.len() + extra).ok()?;
        variables.try_reserve_exact(list.variables.len()).ok()?;
        variables.extend_from_slice(&list.variables);
        for span in &list.spans {
            if is_refused(span.first) {
                spans.extend(singles(span.first, span.count).map(|(k, variable)| Span {
                    address: variable.address,
                    size: variable.size,
                    first: k,
                    count: 1,
                }));
            } else {
                spans.push(*span);
            }
        }
        Some((generation, SharedList::new(ModuleList { variables, spans })?))
    });
    crate::log!(
        Level::Info,
        "agent {:#x}: {} spans of adjacent module variables could not be copied as one; their {} variables are \
         copied one by one by this snapshot's restores{}",
        agent.0,
        refused.len(),
        extra + refused.len(),
        if cached.is_some() { " and by later captures" } else { "" }
    );
    snapshot.ranges = ranges;
    if let Some((generation, list)) = cached {
        snapshot.engine.modules.store(agent, generation, list);
    }
}

/// The stash's tracked range at `address`, through an index of its ranges by address built on first use (empty,
/// so every range is copied whole, when there is no host memory for it).
fn lookup<'s>(stash: &'s Stash, by_address: &mut Vec<u32>, address: usize) -> Option<&'s Range> {
    if by_address.is_empty() {
        if by_address.try_reserve_exact(stash.ranges.len()).is_err() {
            return None;
        }
        by_address.extend((0..stash.ranges.len() as u32).filter(|&i| stash.ranges[i as usize].pin_key().is_some()));
        by_address.sort_unstable_by_key(|&i| stash.ranges[i as usize].address);
    }
    let at = by_address.binary_search_by_key(&address, |&i| stash.ranges[i as usize].address).ok()?;
    Some(&stash.ranges[by_address[at] as usize])
}

/// Where the previous snapshot's digests of `range` are, if the storage that now holds `range` still holds
/// them: `old` (the stash's range at the same address) has the same generation, size, tier and offset, in a
/// tier taken over from the stash.
fn previous(range: &Range, old: &Range, reused: Reused, stash: Option<&Stash>) -> Option<usize> {
    let Source::Tracked { generation, .. } = range.source else { return None };
    let tier_reused = match range.tier {
        Tier::Host => reused.host,
        Tier::Device => reused.device,
    };
    if !tier_reused || stash?.digests.is_none() {
        return None;
    }
    let same = old.address == range.address
        && old.size == range.size
        && old.tier == range.tier
        && old.offset == range.offset
        && matches!(old.source, Source::Tracked { generation: g, .. } if g == generation);
    same.then_some(old.digest_at)
}
