//! Restore: transfer every range of a snapshot back, dirty-only where the snapshot has digests (and only over
//! its learned write set where the policy learns one and the restore is not a full check), then report.

use alloc::vec::Vec;

use super::transfer::{Direction, Dirty, Outcome, Transfer};
use super::write_set::Plan;
use super::{Parts, RestoreOptions, RestoreReport, Snapshot, liveness, report};
use crate::clock;
use crate::error::{Error, Result};
use crate::log::Level;
use crate::ops::{DeviceOps, Digest};

/// Writes every captured range back. Tracked regions freed, shrunk or reallocated since the snapshot are
/// skipped, and so are module variables whose code object was unloaded since (see [`liveness`]); every other
/// range is attempted. `PartialRestore` when any copy
/// failed (or a finalize stopped the restore): the host must not run another pass.
pub(crate) fn restore<O: DeviceOps>(
    parts: Parts<'_, O>,
    snapshot: &Snapshot<'_, O>,
    options: RestoreOptions,
) -> (RestoreReport, Result<()>) {
    let ops = match parts.ops.get() {
        Ok(ops) => ops,
        Err(error) => return (RestoreReport::default(), Err(error)),
    };
    let agent = snapshot.info.agent;
    if parts.is_stale(agent, snapshot.epoch) {
        let skipped = snapshot.ranges.iter().map(|range| range.units()).sum();
        crate::log!(
            Level::Warning,
            "agent {:#x}: device context reset since the snapshot; {skipped} regions and module variables skipped, \
             nothing written",
            agent.0
        );
        return (RestoreReport { skipped, ..RestoreReport::default() }, Ok(()));
    }
    let start = clock::now_ns();
    // Module variables whose code object is gone are left out.
    let alive = liveness::check(&*ops, snapshot);
    let ranges = alive.ranges.as_deref().unwrap_or(&snapshot.ranges);
    let mut outcomes: Vec<Outcome> = Vec::new();
    if outcomes.try_reserve_exact(ranges.len()).is_err() {
        crate::log!(Level::Error, "agent {:#x}: no host memory to restore; nothing was written", agent.0);
        let failed = snapshot.ranges.iter().map(|range| range.units()).sum();
        return (RestoreReport { failed, ..RestoreReport::default() }, Err(Error::PartialRestore));
    }
    outcomes.resize(ranges.len(), Outcome::Pending);

    // Dirty-only when the snapshot has digests and the policy still asks for it.
    let policy = parts.policy.get();
    let mut live: Vec<Digest> = Vec::new();
    let digests = snapshot.digests.as_ref().filter(|_| policy.dirty_only && ops.can_digest());
    let digests = digests.filter(|d| live.try_reserve_exact(d.all.len()).is_ok());
    if let Some(d) = digests {
        live.resize(d.all.len(), Digest::default());
    }
    // Over the learned write set where there is one and no full check is asked for.
    let blocks = digests.map_or(0, |d| d.all.len());
    let mut plan: Plan =
        snapshot.write_set.lock().begin(blocks, policy.learn_write_set && digests.is_some(), options.full_check);
    let known = |i: usize| {
        let range = &ranges[i];
        range.pin_key().map(|_| range.digest_at)
    };
    let select = plan.select.as_deref();
    let rule = digests.map(|d| Dirty {
        block_bytes: d.block_bytes,
        live: &mut live[..],
        known: &known,
        reference: &d.all,
        select,
        changed: plan.changed.as_deref_mut(),
    });
    let pass = Transfer {
        parts,
        ops: &ops,
        agent,
        storage: &snapshot.storage,
        direction: Direction::Restore,
        ranges,
        variables: &snapshot.modules.list.variables,
    };
    let moved = pass.run(rule, &mut outcomes);
    let complete = !moved.digest_failed && !outcomes.contains(&Outcome::Pending);
    let learned = snapshot.write_set.lock().finish(&plan, complete);
    let unwritten = report::Unwritten { gone: alive.gone, unverified: alive.unverified };
    let (mut report, status) = report::restored(agent, ranges, &outcomes, moved, unwritten, start);
    report.partial = !plan.full;
    report.write_set = learned;
    if learned.misses > 0 {
        crate::log!(
            Level::Warning,
            "agent {:#x}: the full check of restore {} found {} blocks changed outside the learned write set: a pass \
             from pass {} on may have started from a state that was not the snapshot; they are restored now and \
             learned",
            agent.0,
            plan.index,
            learned.misses,
            learned.miss_pass
        );
    }
    (report, status)
}
