//! Opening and closing windows, and accounting an agent's snapshot and restores to its open window.
//!
//! Each agent has at most one window; its slot's `window` word holds `generation << 2 | state`, and a handle is
//! `generation << 8 | slot index`, checked against that word and never dereferenced: a closed, foreign or made-up
//! handle is an `InvalidArgument`. The record a window accumulates is behind its agent's mutex, and every hook
//! reads the state word under that mutex, so no update lands in a window that has begun to close (or in the next
//! window of the agent).

use core::sync::atomic::Ordering;

use super::admission::Measured;
use super::outcome::{self, Outcome, Record, UntrackedStats};
use super::untracked::UntrackedKind;
use super::{AgentSlot, WINDOW_AGENTS, current_thread};
use crate::clock;
use crate::engine::Engine;
use crate::error::{DeclineReason, Error, Result};
use crate::lock::Backoff;
use crate::log::Level;
use crate::ops::DeviceOps;
use crate::snapshot::{RestoreReport, SnapshotInfo};
use crate::types::{Agent, PointerInfo};

/// How long an open waits for async copies in flight when the host leaves `copy_timeout_ms` at 0.
pub const DEFAULT_COPY_TIMEOUT_MS: u32 = 1000;

const NONE: u64 = 0;
const OPENING: u64 = 1;
const OPEN: u64 = 2;
const CLOSING: u64 = 3;
const STATE_MASK: u64 = 3;
const INDEX_BITS: u32 = WINDOW_AGENTS.trailing_zeros();

/// What the host tells an open.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WindowOptions {
    /// Passes the host means to run (at least 1).
    pub passes: u32,
    /// How long to wait for async copies in flight; 0: [`DEFAULT_COPY_TIMEOUT_MS`].
    pub copy_timeout_ms: u32,
}

/// An open window. Plain data: [`Engine::window_close`] checks it against the agent's current window.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WindowHandle(pub u64);

/// What an open did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// The window is open: the host snapshots, runs its passes and restores, then closes it.
    Window(WindowHandle),
    /// Declined (the outcome says why, and was logged): the host runs the dispatch once.
    Declined(Outcome),
}

impl<O: DeviceOps> Engine<O> {
    /// Opens a window on `agent`: fences it (copies naming it wait from now on), waits for the copies in
    /// flight on it, then checks untracked memory and the projected cost against the policy. A decline leaves
    /// nothing fenced and logs the outcome line. `InvalidArgument` for 0 passes; `CapacityExceeded` when
    /// [`WINDOW_AGENTS`] agents have windows or copies already.
    pub fn window_open(&self, agent: Agent, options: WindowOptions) -> Result<Opened> {
        if options.passes == 0 {
            crate::log!(Level::Warning, "window_open(agent {:#x}): passes is 0", agent.0);
            return Err(Error::InvalidArgument);
        }
        let _call = self.enter()?;
        let Some((index, slot)) = self.windows.claim(agent) else {
            crate::log!(
                Level::Warning,
                "window_open(agent {:#x}): {WINDOW_AGENTS} agents have windows or copies already",
                agent.0
            );
            return Err(Error::CapacityExceeded);
        };
        let mut outcome = Outcome {
            agent,
            passes_requested: options.passes,
            passes_run: 1,
            untracked: self.windows.untracked.stats(agent),
            ..Outcome::default()
        };
        let word = slot.window.load(Ordering::Acquire);
        let generation = (word >> 2) + 1;
        let claimed = word & STATE_MASK == NONE
            && slot
                .window
                .compare_exchange(word, generation << 2 | OPENING, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
        if !claimed {
            // Never a wait: the window in the way may be this thread's own.
            outcome.reason = DeclineReason::WindowNested;
            outcome::log(&outcome);
            return Ok(Opened::Declined(outcome));
        }

        // Fence, then wait for the copies already in flight.
        self.windows.fence.arm();
        slot.owner.store(current_thread(), Ordering::Relaxed);
        slot.fenced.store(true, Ordering::SeqCst);
        let timeout_ms = if options.copy_timeout_ms == 0 { DEFAULT_COPY_TIMEOUT_MS } else { options.copy_timeout_ms };
        outcome.copies_waited = slot.in_flight.load(Ordering::SeqCst);
        let start = clock::now_ns();
        let mut backoff = Backoff::new();
        while slot.in_flight.load(Ordering::SeqCst) != 0 {
            if clock::since(start) >= u64::from(timeout_ms) * 1_000_000 || self.is_finalized() {
                let left = slot.in_flight.load(Ordering::SeqCst);
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: {left} async copies still in flight after {timeout_ms} ms; window declined",
                    agent.0
                );
                return Ok(decline(slot, generation, outcome, DeclineReason::CopiesInFlight));
            }
            backoff.snooze();
        }

        // Untracked memory, then admission: both before any byte moves.
        let policy = self.policy();
        let live = outcome.untracked.live_mask();
        if live & policy.untracked_decline_mask != 0 {
            crate::log!(
                Level::Warning,
                "agent {:#x}: untracked memory of kinds {live:#x} is live and untracked_decline_mask is {:#x}; window \
                 declined",
                agent.0,
                policy.untracked_decline_mask
            );
            return Ok(decline(slot, generation, outcome, DeclineReason::UntrackedMemory));
        }
        outcome.projected_ns = self.project_window(agent, slot, options.passes);
        if policy.max_window_ns != 0 && outcome.projected_ns > policy.max_window_ns {
            crate::log!(
                Level::Warning,
                "agent {:#x}: window projected at {} us, above max_window_ns = {} us; declined",
                agent.0,
                outcome.projected_ns / 1000,
                policy.max_window_ns / 1000
            );
            return Ok(decline(slot, generation, outcome, DeclineReason::OverCost));
        }
        let warn =
            if policy.warn_window_ns == 0 { super::admission::DEFAULT_WARN_WINDOW_NS } else { policy.warn_window_ns };
        if outcome.projected_ns > warn {
            crate::log!(
                Level::Warning,
                "agent {:#x}: window projected at {} us, above warn_window_ns = {} us",
                agent.0,
                outcome.projected_ns / 1000,
                warn / 1000
            );
        }

        *slot.record.lock() = Record { outcome, snapshot_seen: false, restores_ok: 0 };
        slot.reentry.store(false, Ordering::Relaxed);
        slot.window.store(generation << 2 | OPEN, Ordering::Release);
        Ok(Opened::Window(WindowHandle(generation << INDEX_BITS | index as u64)))
    }

    /// The projected cost of a window of `passes` on `agent` (see [`super::admission`]).
    fn project_window(&self, agent: Agent, slot: &AgentSlot, passes: u32) -> u64 {
        let policy = self.policy();
        let (device_tier, digests) = match self.ops() {
            Ok(ops) => (policy.device_budget_bytes > 0 && ops.can_alloc_device(), ops.can_digest()),
            Err(_) => (false, false),
        };
        let modules = self.modules.get(agent).map_or(0, |(list, _)| list.variables.iter().map(|v| v.size).sum());
        let footprint = self.inventory.stats(agent).bytes.saturating_add(modules);
        slot.rates.lock().project(footprint, passes, &policy, device_tier, digests)
    }

    /// Closes a window: reopens the fence, fills in and logs the outcome, and frees the handle. A handle that is
    /// not an open window (closed already, or never issued) is `InvalidArgument`, with a log line. Works after
    /// finalize too, so that no fence stays closed.
    pub fn window_close(&self, handle: WindowHandle) -> Result<Outcome> {
        let index = (handle.0 & ((1 << INDEX_BITS) - 1)) as usize;
        let generation = handle.0 >> INDEX_BITS;
        let slot = self.windows.at(index).filter(|_| generation != 0);
        let closing = slot.is_some_and(|slot| {
            slot.window
                .compare_exchange(
                    generation << 2 | OPEN,
                    generation << 2 | CLOSING,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
        });
        let (Some(slot), true) = (slot, closing) else {
            crate::log!(
                Level::Warning,
                "window_close({:#x}): not an open window (closed already, or never issued)",
                handle.0
            );
            return Err(Error::InvalidArgument);
        };
        let record = *slot.record.lock();
        let mut outcome = record.outcome;
        outcome.passes_run = record.restores_ok.saturating_add(1);
        outcome.reentry_observed = slot.reentry.load(Ordering::Relaxed);
        slot.fenced.store(false, Ordering::SeqCst);
        slot.window.store(generation << 2 | NONE, Ordering::Release);
        outcome::log(&outcome);
        Ok(outcome)
    }

    /// The host saw work submitted on `agent` from inside its open window (a tool callback launching a
    /// dispatch): the outcome will say so. Does nothing when no window is open there; never waits.
    pub fn window_note_reentry(&self, agent: Agent) {
        if let Some((_, slot)) = self.windows.find(agent) {
            if slot.window.load(Ordering::Acquire) & STATE_MASK == OPEN {
                slot.reentry.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Untracked memory live for `agent` now.
    pub fn untracked_stats(&self, agent: Agent) -> Result<UntrackedStats> {
        let _call = self.enter()?;
        Ok(self.windows.untracked.stats(agent))
    }

    /// The record path's hook for an allocation it does not track: remembered by kind, or ignored when it is
    /// not memory the device runtime knows. A full table is counted and logged, never an error.
    pub(crate) fn note_untracked(&self, ptr: usize, size: usize, alloc_flags: u32, info: Option<&PointerInfo>) {
        let Some(kind) = UntrackedKind::of_allocation(alloc_flags, info) else { return };
        let owner = info.filter(|_| kind != UntrackedKind::Executable).map(|info| info.owner);
        if !self.windows.untracked.insert(ptr, size, owner, kind) {
            crate::log!(
                Level::Warning,
                "untracked allocation at {ptr:#x} ({size} bytes, {}) not remembered: {} are already; windows will \
                 under-report untracked memory",
                kind.key(),
                super::untracked::UNTRACKED_CAPACITY
            );
        }
    }

    /// The snapshot hook: the first snapshot of `agent` while its window is open is the window's.
    pub(crate) fn window_snapshot(&self, agent: Agent, result: core::result::Result<SnapshotInfo, DeclineReason>) {
        let Some(slot) = self.open_window_slot(agent) else { return };
        let accounted = {
            let mut record = slot.record.lock();
            if slot.window.load(Ordering::Acquire) & STATE_MASK != OPEN {
                return;
            }
            let first = !record.snapshot_seen;
            record.snapshot_seen = true;
            let outcome = &mut record.outcome;
            match result {
                _ if !first => {}
                Ok(info) => {
                    outcome.footprint_bytes = info.bytes;
                    outcome.footprint_regions = info.regions + info.module_variables;
                    outcome.bytes_moved = outcome.bytes_moved.saturating_add(info.copied_bytes);
                    outcome.snapshot_ns =
                        info.inventory_ns + info.module_scan_ns + info.staging_ns + info.copy_ns + info.digest_ns;
                }
                Err(reason) => outcome.reason = reason,
            }
            first
        };
        if !accounted {
            crate::log!(
                Level::Warning,
                "agent {:#x}: a second snapshot in one window is not accounted to it (one snapshot per window)",
                agent.0
            );
            return;
        }
        if let Ok(info) = result {
            if let Some(device_tier) = single_tier(&info) {
                slot.rates.lock().record(&Measured {
                    device_tier,
                    copied: info.copied_bytes as u64,
                    copy_ns: info.copy_ns,
                    digested: info.bytes as u64,
                    digest_ns: info.digest_ns,
                    ..Measured::default()
                });
            }
        }
    }

    /// The restore hook: a restore of `agent`'s snapshot while its window is open is the window's.
    pub(crate) fn window_restore(
        &self,
        info: &SnapshotInfo,
        report: &RestoreReport,
        ok: bool,
        ns: u64,
        digest_ns: u64,
    ) {
        let Some(slot) = self.open_window_slot(info.agent) else { return };
        {
            let mut record = slot.record.lock();
            if slot.window.load(Ordering::Acquire) & STATE_MASK != OPEN {
                return;
            }
            if ok {
                record.restores_ok = record.restores_ok.saturating_add(1);
            }
            let outcome = &mut record.outcome;
            outcome.bytes_moved = outcome.bytes_moved.saturating_add(report.bytes);
            outcome.clean_bytes = outcome.clean_bytes.saturating_add(report.clean_bytes);
            outcome.restore_ns = outcome.restore_ns.saturating_add(ns);
        }
        if let Some(device_tier) = single_tier(info) {
            slot.rates.lock().record(&Measured {
                device_tier,
                copied: report.bytes as u64,
                copy_ns: ns.saturating_sub(digest_ns),
                digested: info.bytes as u64,
                digest_ns,
                written: report.bytes as u64,
                clean: report.clean_bytes as u64,
            });
        }
    }

    /// `agent`'s slot when a window may be open on it (a cheap pre-check; the hooks check again under the lock).
    fn open_window_slot(&self, agent: Agent) -> Option<&AgentSlot> {
        if !self.windows.fence.is_armed() {
            return None;
        }
        let (_, slot) = self.windows.find(agent)?;
        (slot.window.load(Ordering::Acquire) & STATE_MASK == OPEN).then_some(slot)
    }

    /// The agent's window state, for tests: whether a window is open or opening on it.
    pub fn window_is_open(&self, agent: Agent) -> bool {
        self.windows.find(agent).is_some_and(|(_, slot)| slot.window.load(Ordering::Acquire) & STATE_MASK != NONE)
    }
}

/// Declines an open that fenced its agent: the fence is reopened, the slot freed, the outcome logged.
fn decline(slot: &AgentSlot, generation: u64, mut outcome: Outcome, reason: DeclineReason) -> Opened {
    slot.fenced.store(false, Ordering::SeqCst);
    slot.window.store(generation << 2 | NONE, Ordering::Release);
    outcome.reason = reason;
    outcome::log(&outcome);
    Opened::Declined(outcome)
}

/// Which tier a capture's storage was wholly in (`Some(true)`: device), or `None` for a spill across both.
fn single_tier(info: &SnapshotInfo) -> Option<bool> {
    if info.device_bytes == 0 {
        Some(false)
    } else if info.device_bytes == info.bytes {
        Some(true)
    } else {
        None
    }
}
