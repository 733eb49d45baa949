//! Capture: plan -> stage -> transfer -> report.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use super::plan::place;
use super::transfer::{Direction, Dirty, Outcome, Transfer};
use super::{Digests, Parts, Range, Snapshot, SnapshotInfo, Source, Stash, Storage, Tier, WriteSet, report};
use crate::clock;
use crate::error::DeclineReason;
use crate::fallible::try_box;
use crate::lock::Mutex;
use crate::log::Level;
use crate::modules::{CachedVariable, ModuleList, SharedList, Span};
use crate::ops::{DeviceOps, Digest};
use crate::opsets::OpsRef;
use crate::policy::Policy;
use crate::storage::budget::Budget;
use crate::storage::device::DeviceLease;
use crate::storage::host::Lease;
use crate::storage::host_budget::HostBudget;
use crate::types::Agent;

/// New storage gets this much headroom (1/8), so a footprint that grows a little reuses its block.
const HEADROOM_DIVISOR: usize = 8;

type Declined<T> = core::result::Result<T, DeclineReason>;

/// Which tiers of the previous snapshot's storage a capture took over (their ranges may be re-copied dirty-only).
#[derive(Copy, Clone, Debug, Default)]
struct Reused {
    host: bool,
    device: bool,
}

/// One capture of one agent: what its steps share.
pub(super) struct Capture<'a, 'e, O: DeviceOps> {
    pub parts: Parts<'e, O>,
    pub ops: &'a OpsRef<'e, O>,
    pub agent: Agent,
    pub policy: Policy,
    /// Whether the capture digests its ranges (the policy asks for dirty-only and the ops can digest).
    pub dirty: bool,
}

/// The next snapshot's [`SnapshotInfo::id`].
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Captures `agent`'s tracked regions and module-scope variables, or declines. Either way, once capture ends,
/// the agent's idle storage (host and device) that this snapshot did not take is given back, so memory held
/// between dispatches is bounded by the last snapshot's footprint.
pub(crate) fn capture<'e, O: DeviceOps>(parts: Parts<'e, O>, agent: Agent) -> Declined<Box<Snapshot<'e, O>>> {
    let result = take(parts, agent);
    if result.is_err() {
        // A decline keeps nothing: not even the previous snapshot's storage kept for dirty-only re-capture (the
        // capture may have declined before taking it).
        parts.retained.drop_agent(&parts, agent, Tier::Host);
        parts.retained.drop_agent(&parts, agent, Tier::Device);
    }
    parts.trim_host(agent);
    parts.trim_device(agent);
    // Report.
    match &result {
        Ok(snapshot) => report::captured(&snapshot.info),
        Err(reason) => report::declined(agent, *reason),
    }
    result
}

/// Plan, stage, transfer; then the snapshot's sizes are tallied and it is boxed.
fn take<'e, O: DeviceOps>(parts: Parts<'e, O>, agent: Agent) -> Declined<Box<Snapshot<'e, O>>> {
    let ops = parts.ops.get().map_err(|_| DeclineReason::NotConfigured)?;
    if !parts.inventory.is_enabled() {
        crate::log!(Level::Warning, "agent {:#x}: tracking is off, so allocations are not recorded", agent.0);
        return Err(DeclineReason::NotConfigured);
    }
    let policy = parts.policy.get();
    let dirty = policy.dirty_only && ops.can_digest();
    let capture = Capture { parts, ops: &ops, agent, policy, dirty };
    // Read before any storage is taken: a reset during the capture makes the snapshot stale, never current.
    let epoch = parts.resets.epoch(agent);

    // Plan. From here on a decline drops `snapshot`, which gives its storage and module list back.
    let mut info = SnapshotInfo { agent, id: NEXT_ID.fetch_add(1, Ordering::Relaxed), ..SnapshotInfo::default() };
    let (ranges, modules) = capture.plan(&mut info)?;
    let mut snapshot = Snapshot {
        parts,
        storage: Storage::default(),
        ranges,
        modules,
        digests: None,
        info,
        write_set: Mutex::new(WriteSet::new()),
        epoch,
    };
    capture.check_size(&snapshot)?;

    // Stage and transfer. Whatever storage of the previous snapshot this one does not take over is given back.
    let mut stash = capture.reusable_stash();
    let moved = capture.stage_and_transfer(&mut snapshot, stash.as_mut());
    if let Some(stash) = stash {
        stash.release(&parts);
    }
    moved?;
    report::tally(&mut snapshot.info, &snapshot.ranges);
    try_box(snapshot).ok_or(DeclineReason::MetadataMemory)
}

impl<O: DeviceOps> Capture<'_, '_, O> {
    /// Declines a snapshot larger than the policy's `max_snapshot_bytes`.
    fn check_size(&self, snapshot: &Snapshot<'_, O>) -> Declined<()> {
        let total: usize = snapshot.ranges.iter().map(|r| r.size).sum();
        let limit = self.policy.max_snapshot_bytes;
        if limit != 0 && total > limit {
            crate::log!(
                Level::Warning,
                "agent {:#x}: the snapshot needs {total} bytes, above max_snapshot_bytes = {limit}",
                self.agent.0
            );
            return Err(DeclineReason::HostBudget);
        }
        Ok(())
    }

    /// Declines (`HostBudget`) a capture whose `need` bytes of host staging would take what kreplay holds above
    /// the policy's live host budget (`storage::host_budget`).
    fn check_host_budget(&self, need: usize, stash: Option<&Stash>) -> Declined<()> {
        let percent = self.policy.host_budget_percent;
        if percent == 0 {
            return Ok(());
        }
        let pools = self.parts.pools;
        let taken_over = stash.and_then(|s| s.storage.host.as_ref()).map_or(0, |lease| lease.capacity);
        let reusable = pools.retained_bytes(self.agent).saturating_add(taken_over);
        let budget = HostBudget::now(&**self.ops, percent, pools.mapped_bytes(), reusable);
        if budget.admits(self.agent, need) { Ok(()) } else { Err(DeclineReason::HostBudget) }
    }

    /// The previous snapshot's storage kept for dirty-only re-capture, when this capture digests with the same
    /// block size; otherwise it is given back.
    fn reusable_stash(&self) -> Option<Stash> {
        let stash = self.parts.retained.take(self.agent)?;
        if self.parts.is_stale(self.agent, stash.epoch) {
            // Kept before the agent's context was reset: its device storage went with the context.
            self.parts.release_stale(self.agent, stash.storage);
            return None;
        }
        let block = self.policy.digest_block_bytes;
        if self.dirty && stash.digests.as_ref().is_some_and(|d| d.block_bytes == block) {
            return Some(stash);
        }
        stash.release(&self.parts);
        None
    }

    fn stage_and_transfer(&self, snapshot: &mut Snapshot<'_, O>, mut stash: Option<&mut Stash>) -> Declined<()> {
        let start = clock::now_ns();
        let reused = self.stage(snapshot, stash.as_deref_mut())?;
        snapshot.info.staging_ns = clock::since(start);
        let start = clock::now_ns();
        self.transfer(snapshot, reused, stash.as_deref())?;
        snapshot.info.copy_ns = clock::since(start).saturating_sub(snapshot.info.digest_ns);
        Ok(())
    }

    /// Stage: places the ranges and takes storage for them: device memory of the agent up to its budget (reusing
    /// the previous snapshot's when it fits), host staging for the rest. Returns which tiers of `stash` were taken
    /// over; the stash's other storage is given back.
    fn stage(&self, snapshot: &mut Snapshot<'_, O>, mut stash: Option<&mut Stash>) -> Declined<Reused> {
        let mut reused = Reused::default();
        let (budget, device_limit) = self.device_budget(stash.as_deref());
        let mut placement = place(&mut snapshot.ranges, device_limit).ok_or(DeclineReason::HostBudget)?;
        if placement.device > 0 {
            match self.take_device(placement.device, device_limit, &budget, stash.as_deref_mut()) {
                Ok((lease, from_stash)) => {
                    reused.device = from_stash;
                    snapshot.storage.device = Some(lease);
                }
                Err(error) => {
                    crate::log!(
                        Level::Info,
                        "agent {:#x}: {} bytes of device storage could not be allocated ({error:?}); the snapshot is \
                         kept in host staging",
                        self.agent.0,
                        placement.device
                    );
                    placement = place(&mut snapshot.ranges, 0).ok_or(DeclineReason::HostBudget)?;
                }
            }
        }
        if let Some(lease) = stash.as_deref_mut().and_then(|s| s.storage.device.take()) {
            let _ = self.parts.device.release(&lease);
        }
        if placement.host > 0 {
            self.check_host_budget(placement.host, stash.as_deref())?;
            let (lease, from_stash) = self.take_host(placement.host, stash.as_deref_mut())?;
            reused.host = from_stash;
            snapshot.storage.host = Some(lease);
        }
        if let Some(lease) = stash.and_then(|s| s.storage.host.take()) {
            let _ = self.parts.pools.release(lease.agent, lease.data, lease.capacity, lease.loan);
        }
        Ok(reused)
    }

    /// The device budget of this snapshot (`storage::budget`) and the most it may place in device storage: the
    /// fixed budget less what the agent's other live snapshots hold, the live budget, or the smaller of both
    /// (none without `device_alloc`).
    fn device_budget(&self, stash: Option<&Stash>) -> (Budget, usize) {
        if !self.ops.can_alloc_device() {
            return (Budget::default(), 0);
        }
        let taken_over = stash.and_then(|s| s.storage.device.as_ref()).map_or(0, |l| l.capacity);
        let (budget, held) = Budget::of_capture(&**self.ops, self.agent, &self.policy, self.parts.device, taken_over);
        (budget, budget.limit(held))
    }

    /// Device storage of at least `size` bytes and at most `limit`: the previous snapshot's block if it fits,
    /// else the best idle block, else a new allocation, charged against `budget` before it is made (after giving
    /// idle blocks back, so that they leave room). Whether it is the stash's block.
    fn take_device(
        &self,
        size: usize,
        limit: usize,
        budget: &Budget,
        stash: Option<&mut Stash>,
    ) -> crate::Result<(DeviceLease, bool)> {
        let (parts, agent) = (self.parts, self.agent);
        if let Some(lease) = stash.and_then(|s| s.storage.device.take()) {
            if lease.capacity >= size && lease.capacity / 2 <= size && lease.capacity <= limit {
                return Ok((lease, true));
            }
            // Give it back first: it may be the best fit, and otherwise the trim below frees it before any new
            // allocation, so the budget holds.
            let _ = parts.device.release(&lease);
        }
        let len = size.saturating_add(size / HEADROOM_DIVISOR).min(limit).max(size);
        // A snapshot freed on another thread meanwhile leaves an idle block that takes room: one more round
        // takes it or gives it back.
        let mut reserved = Err(crate::Error::CapacityExceeded);
        for _ in 0..2 {
            if let Some(lease) = parts.device.take(agent, size, limit) {
                return Ok((lease, false));
            }
            parts.trim_device(agent);
            reserved = parts.device.reserve(agent, size, len, budget);
            if reserved.is_ok() {
                break;
            }
        }
        let len = reserved?;
        let ptr = match self.ops.device_alloc(agent, len) {
            Ok(ptr) => ptr,
            Err(error) => {
                parts.device.unreserve(agent, len);
                return Err(error);
            }
        };
        // Freed through the set that allocated it, whatever is configured then.
        let hold = self.ops.hold();
        match parts.device.add(agent, ptr, len, hold) {
            Ok(lease) => Ok((lease, false)),
            Err(error) => {
                parts.free_device(agent, ptr, len, hold);
                parts.device.credit(agent, len);
                Err(error)
            }
        }
    }

    /// Host staging of at least `size` bytes: the previous snapshot's block if it fits, else one from the pool,
    /// page-locked when the policy asks for it. Whether it is the stash's block.
    fn take_host(&self, size: usize, stash: Option<&mut Stash>) -> Declined<(Lease, bool)> {
        let fits = |lease: &mut Lease| lease.capacity >= size && lease.capacity / 2 <= size;
        let (mut lease, from_stash) = match stash.and_then(|s| s.storage.host.take_if(fits)) {
            Some(lease) => (lease, true),
            None => {
                let reserve = size.saturating_add(size / HEADROOM_DIVISOR);
                let lease = self.parts.pools.acquire_block(self.agent, size, reserve).map_err(|error| {
                    crate::log!(
                        Level::Warning,
                        "agent {:#x}: {size} bytes of staging could not be mapped ({error:?})",
                        self.agent.0
                    );
                    DeclineReason::StagingMemory
                })?;
                (lease, false)
            }
        };
        if self.policy.pin_staging && !lease.is_locked() && self.ops.can_lock_host() {
            self.lock_staging(&mut lease);
        }
        Ok((lease, from_stash))
    }

    /// Page-locks a staging block that is not locked yet, held through the current ops so that they unlock it.
    fn lock_staging(&self, lease: &mut Lease) {
        // First dispatch of this footprint: the block is fresh, so the lock also faults every page in (adapters
        // populate it in parallel first; see `DeviceOps::host_lock`).
        let begun = clock::now_ns();
        let locked = self.ops.host_lock(lease.data.as_ptr(), lease.capacity);
        crate::log!(
            Level::Info,
            "agent {:#x}: new staging of {} bytes page-locked in {} us",
            self.agent.0,
            lease.capacity,
            clock::since(begun) / 1000
        );
        match locked {
            Ok(()) => {
                // Held through the set that locked it, so that set unlocks it, whatever is configured then.
                let hold = self.ops.hold();
                if !self.parts.pools.set_hold(lease, Some(hold)) {
                    self.parts.ops.release_hold(hold);
                    let _ = self.ops.host_unlock(lease.data.as_ptr(), lease.capacity);
                }
            }
            Err(error) => crate::log!(
                Level::Warning,
                "agent {:#x}: page-locking {} bytes of staging failed ({error:?}); copies use pageable memory",
                self.agent.0,
                lease.capacity
            ),
        }
    }

    /// Transfer: copies every range into the snapshot's storage; dirty-only, digests them first and re-copies
    /// only the changed blocks of ranges whose previous contents are still in the storage taken over.
    fn transfer(&self, snapshot: &mut Snapshot<'_, O>, reused: Reused, stash: Option<&Stash>) -> Declined<()> {
        let mut outcomes: Vec<Outcome> = Vec::new();
        outcomes.try_reserve_exact(snapshot.ranges.len()).map_err(|_| DeclineReason::MetadataMemory)?;
        outcomes.resize(snapshot.ranges.len(), Outcome::Pending);
        let (mut digests, known) =
            if self.dirty { self.lay_out_digests(snapshot, reused, stash)? } else { Default::default() };
        let block = self.policy.digest_block_bytes;
        let moved = {
            let known_at = |i: usize| known.get(i).copied().flatten();
            let empty: [Digest; 0] = [];
            let reference = stash.and_then(|s| s.digests.as_ref()).map_or(&empty[..], |d| &d.all[..]);
            let rule = self.dirty.then(|| Dirty {
                block_bytes: block,
                live: &mut digests[..],
                known: &known_at,
                reference,
                select: None,
                changed: None,
            });
            let pass = Transfer {
                parts: self.parts,
                ops: self.ops,
                agent: self.agent,
                storage: &snapshot.storage,
                direction: Direction::Capture,
                ranges: &snapshot.ranges,
                variables: &snapshot.modules.list.variables,
            };
            pass.run(rule, &mut outcomes)
        };
        snapshot.info.copied_bytes = moved.copied_bytes;
        snapshot.info.digest_ns = moved.digest_ns;
        if outcomes.iter().any(|o| matches!(o, Outcome::Failed(_))) {
            return Err(DeclineReason::CopyFailed);
        }
        if outcomes.contains(&Outcome::Pending) {
            return Err(DeclineReason::Finalized);
        }
        if self.dirty && !moved.digest_failed {
            snapshot.digests = Some(Digests { block_bytes: block, all: digests });
        }
        keep_captured(self.agent, snapshot, &outcomes);
        Ok(())
    }

    /// Lays out one digest slot per block of each tracked range (its `digest_at`), and finds for each range where
    /// the stash's digests of what its storage holds now are (`None`: unknown, copied whole).
    fn lay_out_digests(
        &self,
        snapshot: &mut Snapshot<'_, O>,
        reused: Reused,
        stash: Option<&Stash>,
    ) -> Declined<(Vec<Digest>, Vec<Option<usize>>)> {
        let block = self.policy.digest_block_bytes;
        let ranges = &mut snapshot.ranges;
        let mut digests: Vec<Digest> = Vec::new();
        let mut known: Vec<Option<usize>> = Vec::new();
        let blocks: usize = ranges.iter().filter(|r| r.pin_key().is_some()).map(|r| r.size.div_ceil(block)).sum();
        if digests.try_reserve_exact(blocks).is_err() || known.try_reserve_exact(ranges.len()).is_err() {
            return Err(DeclineReason::MetadataMemory);
        }
        digests.resize(blocks, Digest::default());
        let mut at = 0;
        for range in ranges.iter_mut().filter(|r| r.pin_key().is_some()) {
            range.digest_at = at;
            at += range.size.div_ceil(block);
        }
        // Where the footprint did not change, range i is the stash's range i; otherwise look it up by address.
        let mut by_address: Vec<u32> = Vec::new();
        for (i, range) in ranges.iter().enumerate() {
            let same_place = stash.and_then(|s| s.ranges.get(i)).filter(|old| old.address == range.address);
            let old = match same_place {
                Some(old) => Some(old),
                None => stash.and_then(|s| lookup(s, &mut by_address, range.address)),
            };
            known.push(old.and_then(|old| previous(range, old, reused, stash)));
        }
        Ok((digests, known))
    }
}

/// Keeps what a complete transfer captured: regions freed since the inventory was listed are left out, and
/// spans of module variables that had to be copied variable by variable are split.
fn keep_captured<O: DeviceOps>(agent: Agent, snapshot: &mut Snapshot<'_, O>, outcomes: &[Outcome]) {
    let mut refused: Vec<u32> = Vec::new();
    for (range, outcome) in snapshot.ranges.iter().zip(outcomes) {
        if let (Outcome::DoneOneByOne, Source::ModuleVariables { first, .. }) = (outcome, range.source) {
            if refused.try_reserve(1).is_ok() {
                refused.push(first);
            }
        }
    }
    let mut outcome = outcomes.iter();
    snapshot.ranges.retain(|_| outcome.next() != Some(&Outcome::Skipped));
    if !refused.is_empty() {
        split_spans(agent, snapshot, &refused);
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
    let Some(ranges) = split_ranges(&snapshot.ranges, list, &is_refused, extra) else { return };
    let cached = snapshot.modules.cache_as.and_then(|generation| {
        let list = split_list(list, &is_refused, extra)?;
        Some((generation, SharedList::new(list)?))
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
        snapshot.parts.modules.store(agent, generation, list);
    }
}

/// The variables `first..first + count` of `list`, each with its index.
fn singles(list: &ModuleList, first: u32, count: u32) -> impl Iterator<Item = (u32, CachedVariable)> + '_ {
    (first..first + count).map(move |k| (k, list.variables[k as usize]))
}

/// `ranges` with each refused span replaced by one range per variable (`extra` more in all), where the span put
/// them in its storage; `None` without host memory.
fn split_ranges(
    ranges: &[Range],
    list: &ModuleList,
    is_refused: &dyn Fn(u32) -> bool,
    extra: usize,
) -> Option<Vec<Range>> {
    let mut split: Vec<Range> = Vec::new();
    split.try_reserve_exact(ranges.len() + extra).ok()?;
    for range in ranges {
        match range.source {
            Source::ModuleVariables { first, count } if is_refused(first) => {
                split.extend(singles(list, first, count).map(|(k, variable)| Range {
                    address: variable.address,
                    size: variable.size,
                    offset: range.offset + (variable.address - range.address),
                    source: Source::ModuleVariables { first: k, count: 1 },
                    ..*range
                }))
            }
            _ => split.push(*range),
        }
    }
    Some(split)
}

/// A copy of `list` with each refused span cut into one span per variable (`extra` more in all); `None` without
/// host memory.
fn split_list(list: &ModuleList, is_refused: &dyn Fn(u32) -> bool, extra: usize) -> Option<ModuleList> {
    let mut spans: Vec<Span> = Vec::new();
    let mut variables: Vec<CachedVariable> = Vec::new();
    let mut names: Vec<u8> = Vec::new();
    spans.try_reserve_exact(list.spans.len() + extra).ok()?;
    variables.try_reserve_exact(list.variables.len()).ok()?;
    names.try_reserve_exact(list.names.len()).ok()?;
    variables.extend_from_slice(&list.variables);
    names.extend_from_slice(&list.names);
    for span in &list.spans {
        if is_refused(span.first) {
            let single = |(k, variable): (u32, CachedVariable)| Span {
                address: variable.address,
                size: variable.size,
                first: k,
                count: 1,
            };
            spans.extend(singles(list, span.first, span.count).map(single));
        } else {
            spans.push(*span);
        }
    }
    Some(ModuleList { variables, spans, names })
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
