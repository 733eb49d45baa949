//! Liveness: which of a snapshot's module variables still belong to a loaded code object when it is restored.
//!
//! A code object unloaded since the snapshot (an HSA executable destroyed, a CUDA module unloaded or its context
//! destroyed) takes its variables' memory with it; writing them back would write into memory that belongs to
//! someone else now. The host reports every load and unload with `modules_changed`, so a restore that finds the
//! module generation unchanged since its snapshot's scan knows every variable is still there and checks nothing.
//! Otherwise it asks the device again which variables are loaded (the agent's cached scan when it is current, a
//! new scan else, cached as a capture's is, so that later restores reuse it) and writes back only the snapshot's
//! variables found at the same address with the same size; the others are skipped, counted with the freed
//! regions, and named in the log. A restore that cannot tell (the scan failed, or no host memory) writes no
//! module variable and counts them as failed, so the host runs no further pass on a state it could not put back.

use alloc::vec::Vec;

use super::plan::scan_modules;
use super::{Range, Snapshot, Source};
use crate::log::Level;
use crate::modules::{ModuleList, SharedList};
use crate::ops::DeviceOps;
use crate::types::{Agent, DisplayName};

/// Unloaded variables logged one by one per restore; the rest are summed up in one line.
const GONE_LOG_LIMIT: usize = 8;

/// What a restore may write of a snapshot's module variables.
#[derive(Default)]
pub(super) struct Live {
    /// The ranges to write in place of the snapshot's, when some of its variables must not be written.
    pub ranges: Option<Vec<Range>>,
    /// Variables whose code object is gone: skipped.
    pub gone: usize,
    /// Variables not known to be loaded (the check itself failed): not written, counted as failed.
    pub unverified: usize,
}

/// Checks `snapshot`'s module variables against the code objects loaded now, when any were loaded or unloaded
/// since it was captured.
pub(super) fn check<O: DeviceOps>(ops: &O, snapshot: &Snapshot<'_, O>) -> Live {
    let parts = snapshot.parts;
    let has_variables = snapshot.ranges.iter().any(|r| matches!(r.source, Source::ModuleVariables { .. }));
    if !has_variables || parts.modules.generation() == snapshot.modules.scanned_in {
        return Live::default();
    }
    let agent = snapshot.info.agent;
    let Some(loaded) = loaded_now(ops, snapshot) else { return unverified(agent, snapshot) };
    let list = &*snapshot.modules.list;
    let mut ranges: Vec<Range> = Vec::new();
    let singles: usize = snapshot.ranges.iter().map(Range::units).sum();
    if ranges.try_reserve_exact(singles).is_err() {
        return unverified(agent, snapshot);
    }
    let is_loaded = |k: u32| {
        let v = &list.variables[k as usize];
        loaded.variables.binary_search_by_key(&(v.address, v.size), |l| (l.address, l.size)).is_ok()
    };
    let mut gone = 0;
    for range in &snapshot.ranges {
        let Source::ModuleVariables { first, count } = range.source else {
            ranges.push(*range);
            continue;
        };
        if (first..first + count).all(is_loaded) {
            ranges.push(*range);
            continue;
        }
        // Those still loaded are written one by one, from where the span put them in its storage.
        for k in first..first + count {
            let variable = list.variables[k as usize];
            if is_loaded(k) {
                ranges.push(Range {
                    address: variable.address,
                    size: variable.size,
                    offset: range.offset + (variable.address - range.address),
                    source: Source::ModuleVariables { first: k, count: 1 },
                    ..*range
                });
            } else {
                gone += 1;
                if gone <= GONE_LOG_LIMIT {
                    log_gone(agent, list, k);
                }
            }
        }
    }
    if gone > GONE_LOG_LIMIT {
        crate::log!(
            Level::Warning,
            "agent {:#x}: {gone} module variables in all belong to code objects unloaded since the snapshot and were \
             not restored",
            agent.0
        );
    }
    Live { ranges: (gone > 0).then_some(ranges), gone, unverified: 0 }
}

fn log_gone(agent: Agent, list: &ModuleList, k: u32) {
    let variable = &list.variables[k as usize];
    crate::log!(
        Level::Warning,
        "agent {:#x}: module variable {} at {:#x} ({} bytes) belongs to a code object unloaded since the snapshot; \
         not restored",
        agent.0,
        DisplayName(list.name_of(variable)),
        variable.address,
        variable.size
    );
}

/// The agent's loaded module variables (sorted by address and size, as every list is): its cached scan when that
/// is current, else a new scan, cached as a capture's would be so that the next restore reuses it; `None` when
/// they cannot all be listed.
fn loaded_now<O: DeviceOps>(ops: &O, snapshot: &Snapshot<'_, O>) -> Option<SharedList> {
    let (agent, parts) = (snapshot.info.agent, snapshot.parts);
    if let Some((list, _)) = parts.modules.get(agent) {
        // Current, so complete: every variable a capture would keep, and only those can be in a snapshot.
        return Some(list);
    }
    let cache_it = parts.policy.get().cache_module_scan;
    // A scan that fails logs why itself.
    scan_modules(ops, agent, parts.modules, cache_it).ok().map(|scanned| scanned.list)
}

/// No module variable may be written: they cannot be shown to be loaded.
fn unverified<O: DeviceOps>(agent: Agent, snapshot: &Snapshot<'_, O>) -> Live {
    let mut ranges: Vec<Range> = Vec::new();
    let tracked = snapshot.ranges.iter().filter(|r| r.pin_key().is_some());
    let mut unverified = snapshot.ranges.iter().filter(|r| r.pin_key().is_none()).map(Range::units).sum();
    if ranges.try_reserve_exact(snapshot.ranges.len()).is_ok() {
        ranges.extend(tracked.copied());
    } else {
        // Nothing can be written at all: every region counts as failed too.
        unverified = snapshot.ranges.iter().map(Range::units).sum();
    }
    crate::log!(
        Level::Error,
        "agent {:#x}: code objects changed since the snapshot and could not be listed again; its {unverified} module \
         variables are not restored (they may be unloaded); no further pass may run",
        agent.0
    );
    Live { ranges: Some(ranges), gone: 0, unverified }
}
