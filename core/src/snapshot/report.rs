//! Report: what a capture or a restore did, tallied and logged once it is over.
//!
//! Every capture ends in [`captured`] or [`declined`], every restore in [`restored`]: the one place per direction
//! that sees a finished pass's agent, sizes and times, and so where per-agent accounting of them belongs.

use super::transfer::{Moved, Outcome};
use super::{Range, RestoreReport, SnapshotInfo, Source, Tier};
use crate::clock;
use crate::error::{DeclineReason, Error, Result};
use crate::log::Level;
use crate::types::Agent;

/// Skipped regions logged one by one per restore; the rest are summed up in one line.
const SKIP_LOG_LIMIT: usize = 8;

/// Counts a complete capture's regions, module variables and bytes into its `info`.
pub(super) fn tally(info: &mut SnapshotInfo, ranges: &[Range]) {
    for range in ranges {
        match range.source {
            Source::Tracked { .. } => info.regions += 1,
            Source::ModuleVariables { count, .. } => info.module_variables += count as usize,
        }
        info.bytes += range.size;
        if range.tier == Tier::Device {
            info.device_bytes += range.size;
        }
    }
}

/// A capture succeeded.
pub(super) fn captured(info: &SnapshotInfo) {
    crate::log!(
        Level::Info,
        "agent {:#x}: snapshot of {} regions and {} module variables, {} bytes ({} on the device, {} copied); \
         inventory {} us, module scan {} us, staging {} us, digest {} us, copy {} us ({:.2} GB/s)",
        info.agent.0,
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
}

/// A capture declined: the dispatch runs once.
pub(super) fn declined(agent: Agent, reason: DeclineReason) {
    crate::log!(
        Level::Warning,
        "agent {:#x}: snapshot declined: {}; the dispatch runs once, unreplayed",
        agent.0,
        reason.describe()
    );
}

/// Module variables a restore left out before it began (see `liveness`).
#[derive(Copy, Clone, Debug, Default)]
pub(super) struct Unwritten {
    /// Their code object is gone: counted as skipped.
    pub gone: usize,
    /// Not known to be loaded: counted as failed.
    pub unverified: usize,
}

/// A restore that began at `start` is over: what happened to each range, tallied, logged and returned with its
/// status.
pub(super) fn restored(
    agent: Agent,
    ranges: &[Range],
    outcomes: &[Outcome],
    moved: Moved,
    unwritten: Unwritten,
    start: u64,
) -> (RestoreReport, Result<()>) {
    let (mut report, any_failed) = tally_restore(agent, ranges, outcomes);
    report.skipped += unwritten.gone;
    report.failed += unwritten.unverified;
    report.bytes = moved.copied_bytes;
    report.clean_bytes = moved.clean_bytes;
    let elapsed = clock::since(start);
    report.elapsed_ns = elapsed;
    report.digest_ns = moved.digest_ns;
    report.digested_bytes = moved.digested_bytes;
    if report.skipped > SKIP_LOG_LIMIT {
        crate::log!(
            Level::Warning,
            "agent {:#x}: {} regions in all were freed or reallocated since the snapshot and not restored",
            agent.0,
            report.skipped
        );
    }
    if any_failed {
        crate::log!(
            Level::Error,
            "agent {:#x}: {} regions or module variables could not be restored; no further pass may run",
            agent.0,
            report.failed
        );
    } else if report.failed > 0 {
        crate::log!(Level::Error, "agent {:#x}: the restore was stopped by finalize; no further pass may run", agent.0);
    }
    crate::log!(
        Level::Info,
        "agent {:#x}: restore of {} bytes ({} verified unchanged) in {} regions ({} skipped, {} failed) took {} us \
         (digest {} us of {} bytes, {:.2} GB/s)",
        agent.0,
        report.bytes,
        report.clean_bytes,
        report.restored,
        report.skipped,
        report.failed,
        elapsed / 1000,
        moved.digest_ns / 1000,
        moved.digested_bytes,
        gigabytes_per_second(report.bytes, elapsed)
    );
    let status = if report.failed == 0 { Ok(()) } else { Err(Error::PartialRestore) };
    (report, status)
}

/// Counts a restore's ranges by outcome (logging the first skipped regions); also whether any copy failed.
fn tally_restore(agent: Agent, ranges: &[Range], outcomes: &[Outcome]) -> (RestoreReport, bool) {
    let mut report = RestoreReport::default();
    let mut any_failed = false;
    for (range, outcome) in ranges.iter().zip(outcomes) {
        match *outcome {
            Outcome::Done | Outcome::DoneOneByOne => report.restored += range.units(),
            Outcome::Failed(lost) => {
                any_failed = true;
                report.failed += lost as usize;
                report.restored += range.units() - lost as usize;
            }
            Outcome::Pending => report.failed += range.units(),
            Outcome::Skipped => {
                report.skipped += 1;
                if report.skipped <= SKIP_LOG_LIMIT {
                    crate::log!(
                        Level::Warning,
                        "agent {:#x}: region at {:#x} ({} bytes) was freed, shrunk or reallocated since the \
                         snapshot; not restored",
                        agent.0,
                        range.address,
                        range.size
                    );
                }
            }
        }
    }
    (report, any_failed)
}

fn gigabytes_per_second(bytes: usize, ns: u64) -> f64 {
    if ns == 0 { 0.0 } else { bytes as f64 / ns as f64 }
}
