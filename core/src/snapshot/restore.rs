//! Restore: transfer every range of a snapshot back, dirty-only where the snapshot has digests.

use alloc::vec::Vec;

use super::transfer::{Direction, Dirty, Outcome, Ranges};
use super::{RestoreReport, Snapshot, gigabytes_per_second};
use crate::clock;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::log::Level;
use crate::ops::{DeviceOps, Digest};

/// Skipped regions logged one by one per restore; the rest are summed up in one line.
const SKIP_LOG_LIMIT: usize = 8;

impl<O: DeviceOps> Engine<O> {
    /// Writes every captured range back. Tracked regions freed, shrunk or reallocated since the snapshot are
    /// skipped; module variables are always written; every range is attempted. `PartialRestore` when any copy
    /// failed (or a finalize stopped the restore): the host must not run another pass.
    pub fn restore(&self, snapshot: &Snapshot<'_, O>) -> (RestoreReport, Result<()>) {
        let mut report = RestoreReport::default();
        let _call = match self.enter() {
            Ok(call) => call,
            Err(error) => return (report, Err(error)),
        };
        let ops = match self.ops() {
            Ok(ops) => ops,
            Err(error) => return (report, Err(error)),
        };
        let agent = snapshot.info.agent;
        let start = clock::now_ns();
        let mut outcomes: Vec<Outcome> = Vec::new();
        if outcomes.try_reserve_exact(snapshot.ranges.len()).is_err() {
            crate::log!(Level::Error, "agent {:#x}: no host memory to restore; nothing was written", agent.0);
            report.failed = snapshot.ranges.iter().map(|range| range.units()).sum();
            return (report, Err(Error::PartialRestore));
        }
        outcomes.resize(snapshot.ranges.len(), super::transfer::Outcome::Pending);

        // Dirty-only when the snapshot has digests and the policy still asks for it.
        let mut live: Vec<Digest> = Vec::new();
        let digests = snapshot.digests.as_ref().filter(|_| self.policy().dirty_only && ops.can_digest());
        let digests = digests.filter(|d| live.try_reserve_exact(d.all.len()).is_ok());
        if let Some(d) = digests {
            live.resize(d.all.len(), Digest::default());
        }
        let known = |i: usize| {
            let range = &snapshot.ranges[i];
            range.pin_key().map(|_| range.digest_at)
        };
        let rule = digests.map(|d| Dirty {
            block_bytes: d.block_bytes,
            live: &mut live[..],
            known: &known,
            reference: &d.all,
        });
        let ranges = Ranges { all: &snapshot.ranges, variables: &snapshot.modules.list.variables };
        let moved = self.transfer(&ops, agent, &snapshot.storage, ranges, Direction::Restore, rule, &mut outcomes);

        let mut any_failed = false;
        for (range, outcome) in snapshot.ranges.iter().zip(&outcomes) {
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
        report.bytes = moved.copied_bytes;
        report.clean_bytes = moved.clean_bytes;
        let elapsed = clock::since(start);
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
            crate::log!(
                Level::Error,
                "agent {:#x}: the restore was stopped by finalize; no further pass may run",
                agent.0
            );
        }
        crate::log!(
            Level::Info,
            "agent {:#x}: restore of {} bytes ({} verified unchanged) in {} regions ({} skipped, {} failed) took {} us \
             (digest {} us, {:.2} GB/s)",
            agent.0,
            report.bytes,
            report.clean_bytes,
            report.restored,
            report.skipped,
            report.failed,
            elapsed / 1000,
            moved.digest_ns / 1000,
            gigabytes_per_second(report.bytes, elapsed)
        );
        let status = if report.failed == 0 { Ok(()) } else { Err(Error::PartialRestore) };
        self.window_restore(&snapshot.info, &report, status.is_ok(), elapsed, moved.digest_ns);
        (report, status)
    }
}
