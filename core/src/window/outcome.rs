//! What a window ends in: the [`Outcome`] record handed to the host, and its one `key=value` log line (INFO
//! when replayed, WARNING when declined). The keys, their order and their meaning do not change within a major
//! version, so tests and tools may parse the line.

use core::fmt;

use super::untracked::{UNTRACKED_KINDS, UntrackedKind};
use crate::error::DeclineReason;
use crate::log::Level;
use crate::types::Agent;

/// Untracked memory live for one agent, by [`UntrackedKind`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct UntrackedStats {
    /// Allocations (or mappings) of each kind.
    pub count: [usize; UNTRACKED_KINDS],
    /// Their bytes.
    pub bytes: [usize; UNTRACKED_KINDS],
    /// Untracked allocations that did not fit in the table, over the life of the process (all agents).
    pub overflowed: usize,
}

impl UntrackedStats {
    /// Bit `k` set for each kind `k` with something live.
    pub fn live_mask(&self) -> u32 {
        self.count.iter().enumerate().filter(|(_, n)| **n > 0).fold(0, |mask, (kind, _)| mask | 1 << kind)
    }
}

/// One window's account.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The window's agent.
    pub agent: Agent,
    /// `None`: replayed.
    pub reason: DeclineReason,
    /// Passes the host meant to run; 0: open-ended (not known in advance).
    pub passes_requested: u32,
    /// 1 + the restores that succeeded in the window.
    pub passes_run: u32,
    /// Bytes the window's snapshot captured (0 if none).
    pub footprint_bytes: usize,
    /// Its regions and module variables.
    pub footprint_regions: usize,
    /// Bytes moved by the snapshot and every restore.
    pub bytes_moved: usize,
    /// Bytes verified unchanged and not written, summed over the restores.
    pub clean_bytes: usize,
    /// Time of the snapshot.
    pub snapshot_ns: u64,
    /// Time of all restores.
    pub restore_ns: u64,
    /// Admission's projection of the snapshot and restores.
    pub projected_ns: u64,
    /// Async copies in flight that the open waited for.
    pub copies_waited: u64,
    /// Untracked memory live at open.
    pub untracked: UntrackedStats,
    /// Work was submitted on the agent from inside the window.
    pub reentry_observed: bool,
    /// Bytes of device memory the restores digested to find what changed.
    pub digested_bytes: usize,
    /// Blocks that full checks found changed outside the snapshot's learned write set after partial restores
    /// (see [`crate::snapshot::write_set`]): restored and learned then, but some pass may have started from a
    /// state that was not the snapshot.
    pub write_set_misses: usize,
    /// The first pass that may have started from such a state (0 without misses).
    pub write_set_miss_pass: u32,
    /// Dispatches the window covers (1 unless the host opened it over a range).
    pub dispatches: u32,
}

/// What an open window accounted so far (behind its agent's mutex).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Record {
    pub outcome: Outcome,
    /// The window's one snapshot has been accounted.
    pub snapshot_seen: bool,
    /// Its [`crate::snapshot::SnapshotInfo::id`] (0 before it, or when it declined): only its restores are the
    /// window's.
    pub snapshot_id: u64,
    /// Restores that succeeded.
    pub restores_ok: u32,
    /// Restores accounted, failed ones included (the per-pass projection of an open-ended window averages them).
    pub restores: u32,
    /// Limits an open-ended window's per-pass projection has crossed and logged: [`CROSSED_WARN`],
    /// [`CROSSED_MAX`].
    pub crossed: u8,
}

/// The per-pass projection of an open-ended window crossed `warn_window_ns`.
pub(crate) const CROSSED_WARN: u8 = 1;
/// The per-pass projection of an open-ended window crossed `max_window_ns`.
pub(crate) const CROSSED_MAX: u8 = 2;

impl Record {
    /// Nothing accounted; all zero, for a `static`.
    pub(crate) const EMPTY: Record = Record {
        outcome: Outcome {
            agent: Agent(0),
            reason: DeclineReason::None,
            passes_requested: 0,
            passes_run: 0,
            footprint_bytes: 0,
            footprint_regions: 0,
            bytes_moved: 0,
            clean_bytes: 0,
            snapshot_ns: 0,
            restore_ns: 0,
            projected_ns: 0,
            copies_waited: 0,
            untracked: UntrackedStats { count: [0; UNTRACKED_KINDS], bytes: [0; UNTRACKED_KINDS], overflowed: 0 },
            reentry_observed: false,
            digested_bytes: 0,
            write_set_misses: 0,
            write_set_miss_pass: 0,
            dispatches: 0,
        },
        snapshot_seen: false,
        snapshot_id: 0,
        restores_ok: 0,
        restores: 0,
        crossed: 0,
    };
}

/// The short name of a decline reason in the outcome line.
pub const fn reason_key(reason: DeclineReason) -> &'static str {
    match reason {
        DeclineReason::None => "none",
        DeclineReason::NotConfigured => "not_configured",
        DeclineReason::Finalized => "finalized",
        DeclineReason::MetadataMemory => "metadata_memory",
        DeclineReason::StagingMemory => "staging_memory",
        DeclineReason::CopyFailed => "copy_failed",
        DeclineReason::ModuleScanIncomplete => "module_scan_incomplete",
        DeclineReason::InventoryOverflow => "inventory_overflow",
        DeclineReason::HostBudget => "host_budget",
        DeclineReason::CopiesInFlight => "copies_in_flight",
        DeclineReason::UntrackedMemory => "untracked_memory",
        DeclineReason::OverCost => "over_cost",
        DeclineReason::WindowNested => "window_nested",
    }
}

/// The outcome line: `kreplay window agent=0x1 reason=none passes=5/5 footprint=... moved=... clean=...
/// snapshot_us=... restore_us=... projected_us=... copies_waited=... untracked=fine:0/0,host:2/8192,...
/// reentry=0 digested=... write_set_misses=0 miss_pass=0 dispatches=1` (passes run/requested, `passes=5/open`
/// for an open-ended window; each untracked kind as count/bytes, in the order of their values; `dispatches`: the
/// dispatches a window over a range covers, 1 otherwise).
pub struct Line<'a>(pub &'a Outcome);

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = self.0;
        write!(
            f,
            "kreplay window agent={:#x} reason={} passes={}/{} footprint={} moved={} clean={} snapshot_us={} \
             restore_us={} projected_us={} copies_waited={} untracked=",
            o.agent.0,
            reason_key(o.reason),
            o.passes_run,
            Requested(o.passes_requested),
            o.footprint_bytes,
            o.bytes_moved,
            o.clean_bytes,
            o.snapshot_ns / 1000,
            o.restore_ns / 1000,
            o.projected_ns / 1000,
            o.copies_waited
        )?;
        for (i, kind) in UntrackedKind::ALL.iter().enumerate() {
            let separator = if i == 0 { "" } else { "," };
            write!(f, "{separator}{}:{}/{}", kind.key(), o.untracked.count[i], o.untracked.bytes[i])?;
        }
        write!(
            f,
            " reentry={} digested={} write_set_misses={} miss_pass={} dispatches={}",
            o.reentry_observed as u8, o.digested_bytes, o.write_set_misses, o.write_set_miss_pass, o.dispatches
        )
    }
}

/// Passes requested as the outcome line writes them: a number, or `open`.
struct Requested(u32);

impl fmt::Display for Requested {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 { f.write_str("open") } else { write!(f, "{}", self.0) }
    }
}

/// Logs the outcome line at INFO when replayed, WARNING when declined.
pub(crate) fn log(outcome: &Outcome) {
    let level = if outcome.reason == DeclineReason::None { Level::Info } else { Level::Warning };
    crate::log!(level, "{}", Line(outcome));
}
