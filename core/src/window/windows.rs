//! Opening and closing windows, and accounting an agent's snapshot and restores to its open window.
//!
//! Each agent has at most one window; its slot's `window` word holds `generation << 2 | state`, and a handle is
//! `generation << 8 | slot index`, checked against that word and never dereferenced: a closed, foreign or made-up
//! handle is an `InvalidArgument`. The record a window accumulates is behind its agent's mutex, and every hook
//! reads the state word under that mutex, so no update lands in a window that has begun to close (or in the next
//! window of the agent).

use core::sync::atomic::Ordering;

use super::admission::{Measured, warn_window_ns};
use super::outcome::{self, CROSSED_MAX, CROSSED_WARN, Outcome, Record, UntrackedStats};
use super::untracked::{UNTRACKED_CAPACITY, UntrackedKind};
use super::{AgentSlot, WINDOW_AGENTS, WindowState, current_thread};
use crate::activity::Activity;
use crate::clock;
use crate::error::{DeclineReason, Error, Result};
use crate::inventory::Inventory;
use crate::lock::Backoff;
use crate::log::Level;
use crate::modules::ModuleCache;
use crate::ops::DeviceOps;
use crate::opsets::OpsTable;
use crate::policy::{AtomicPolicy, Policy};
use crate::snapshot::{RestoreReport, SnapshotInfo};
use crate::storage::budget::{Held, capture_budget};
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
    /// Passes the host means to run; 0: open-ended, not known in advance (admission then checks the first pass
    /// at open and each further pass as restores run: see [`WindowState::on_restore`]).
    pub passes: u32,
    /// How long to wait for async copies in flight; 0: [`DEFAULT_COPY_TIMEOUT_MS`].
    pub copy_timeout_ms: u32,
    /// Dispatches the window covers, run in order on every pass (a graph, a multi-packet submission, a range
    /// of dispatches); 0 and 1: one dispatch. The snapshot is taken once before the first, the restores run
    /// between repetitions of the whole range, and admission, the fence and the outcome treat the range as one
    /// dispatch. The outcome says how many.
    pub dispatches: u32,
}

/// An open window. Plain data: [`crate::Engine::window_close`] checks it against the agent's current window.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct WindowHandle(pub u64);

/// What an open did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per open and never stored; boxing the outcome would allocate on every decline"
)]
pub enum Opened {
    /// The window is open: the host snapshots, runs its passes and restores, then closes it.
    Window(WindowHandle),
    /// Declined (the outcome says why, and was logged): the host runs the dispatch once.
    Declined(Outcome),
}

impl WindowOptions {
    fn copy_timeout_ms(&self) -> u32 {
        if self.copy_timeout_ms == 0 { DEFAULT_COPY_TIMEOUT_MS } else { self.copy_timeout_ms }
    }

    /// One dispatch unless the host names a range.
    fn dispatches(&self) -> u32 {
        self.dispatches.max(1)
    }
}

/// What an open reads besides the window table, borrowed from the engine for the call: whether finalize has
/// begun, the policy, and (for the projection) the ops' tier and digest facts and the agent's footprint.
pub(crate) struct OpenInputs<'e, O: DeviceOps> {
    pub activity: &'e Activity,
    pub policy: &'e AtomicPolicy,
    pub ops: &'e OpsTable<O>,
    pub inventory: &'e Inventory,
    pub modules: &'e ModuleCache,
}

impl<O: DeviceOps> OpenInputs<'_, O> {
    /// The projected cost of a window of `passes` on `agent` (see [`super::admission`]).
    fn project(&self, agent: Agent, slot: &AgentSlot, passes: u32, policy: &Policy) -> u64 {
        // The device budget a capture would get now: the fixed one, the live one (a percent of the free device
        // memory), or the smaller of both, as `storage::budget` decides it.
        let (device_budget, digests) = match self.ops.get() {
            Ok(ops) if ops.can_alloc_device() => {
                (capture_budget(&*ops, agent, policy, Held::default()), ops.can_digest())
            }
            Ok(ops) => (0, ops.can_digest()),
            Err(_) => (0, false),
        };
        let policy = Policy { device_budget_bytes: device_budget, ..*policy };
        let modules = self.modules.get(agent).map_or(0, |(list, _)| list.variables.iter().map(|v| v.size).sum());
        let footprint = self.inventory.stats(agent).bytes.saturating_add(modules);
        slot.rates.lock().project(footprint, passes, &policy, device_budget > 0, digests)
    }
}

/// An open that has taken its agent's window word (`OPENING` at `generation`): it ends as a window or a decline.
struct Opening<'s> {
    agent: Agent,
    index: usize,
    slot: &'s AgentSlot,
    generation: u64,
}

impl Opening<'_> {
    /// Fences the agent (copies naming it wait from now on), then waits up to the options' timeout for the
    /// copies already in flight; `CopiesInFlight` when some are still in flight then (or finalize began).
    fn fence_and_wait(
        &self,
        state: &WindowState,
        options: &WindowOptions,
        activity: &Activity,
        outcome: &mut Outcome,
    ) -> core::result::Result<(), DeclineReason> {
        state.fence.arm();
        self.slot.owner.store(current_thread(), Ordering::Relaxed);
        self.slot.fenced.store(true, Ordering::SeqCst);
        let timeout_ms = options.copy_timeout_ms();
        outcome.copies_waited = self.slot.in_flight.load(Ordering::SeqCst);
        let start = clock::now_ns();
        let mut backoff = Backoff::new();
        while self.slot.in_flight.load(Ordering::SeqCst) != 0 {
            if clock::since(start) >= u64::from(timeout_ms) * 1_000_000 || activity.is_finalized() {
                let left = self.slot.in_flight.load(Ordering::SeqCst);
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: {left} async copies still in flight after {timeout_ms} ms; window declined",
                    self.agent.0
                );
                return Err(DeclineReason::CopiesInFlight);
            }
            backoff.snooze();
        }
        Ok(())
    }

    /// `UntrackedMemory` when untracked memory of a kind the policy declines for is live on the agent.
    fn check_untracked(&self, outcome: &Outcome, policy: &Policy) -> core::result::Result<(), DeclineReason> {
        let live = outcome.untracked.live_mask();
        if live & policy.untracked_decline_mask != 0 {
            crate::log!(
                Level::Warning,
                "agent {:#x}: untracked memory of kinds {live:#x} is live and untracked_decline_mask is {:#x}; window \
                 declined",
                self.agent.0,
                policy.untracked_decline_mask
            );
            return Err(DeclineReason::UntrackedMemory);
        }
        Ok(())
    }

    /// `OverCost` when the projection is above `max_window_ns`; a warning when it is above `warn_window_ns`.
    fn admit(&self, projected_ns: u64, policy: &Policy) -> core::result::Result<(), DeclineReason> {
        if policy.max_window_ns != 0 && projected_ns > policy.max_window_ns {
            crate::log!(
                Level::Warning,
                "agent {:#x}: window projected at {} us, above max_window_ns = {} us; declined",
                self.agent.0,
                projected_ns / 1000,
                policy.max_window_ns / 1000
            );
            return Err(DeclineReason::OverCost);
        }
        let warn = warn_window_ns(policy);
        if projected_ns > warn {
            crate::log!(
                Level::Warning,
                "agent {:#x}: window projected at {} us, above warn_window_ns = {} us",
                self.agent.0,
                projected_ns / 1000,
                warn / 1000
            );
        }
        Ok(())
    }

    /// The window is open: its record starts from `outcome`, and the handle names its slot and generation.
    fn open(self, outcome: Outcome) -> Opened {
        *self.slot.record.lock() = Record { outcome, ..Record::EMPTY };
        self.slot.reentry.store(false, Ordering::Relaxed);
        self.slot.window.store(self.generation << 2 | OPEN, Ordering::Release);
        Opened::Window(WindowHandle(self.generation << INDEX_BITS | self.index as u64))
    }

    /// Declines the open: the fence is reopened, the slot freed, the outcome logged.
    fn decline(self, mut outcome: Outcome, reason: DeclineReason) -> Opened {
        self.slot.fenced.store(false, Ordering::SeqCst);
        self.slot.window.store(self.generation << 2 | NONE, Ordering::Release);
        outcome.reason = reason;
        outcome::log(&outcome);
        Opened::Declined(outcome)
    }
}

impl WindowState {
    /// Opens a window on `agent` (see [`crate::Engine::window_open`]); the options are checked already.
    pub(crate) fn open<O: DeviceOps>(
        &self,
        inputs: &OpenInputs<'_, O>,
        agent: Agent,
        options: &WindowOptions,
    ) -> Result<Opened> {
        let Some((index, slot)) = self.claim(agent) else {
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
            dispatches: options.dispatches(),
            untracked: self.untracked.stats(agent),
            ..Outcome::default()
        };
        let Some(opening) = Self::begin_open(agent, index, slot) else {
            // Never a wait: the window in the way may be this thread's own.
            outcome.reason = DeclineReason::WindowNested;
            outcome::log(&outcome);
            return Ok(Opened::Declined(outcome));
        };
        Ok(match self.checks(&opening, inputs, options, &mut outcome) {
            Ok(()) => opening.open(outcome),
            Err(reason) => opening.decline(outcome, reason),
        })
    }

    /// Takes the agent's window word from `NONE` to `OPENING` at the next generation; `None` when a window is in
    /// the way.
    fn begin_open(agent: Agent, index: usize, slot: &AgentSlot) -> Option<Opening<'_>> {
        let word = slot.window.load(Ordering::Acquire);
        let generation = (word >> 2) + 1;
        let claimed = word & STATE_MASK == NONE
            && slot
                .window
                .compare_exchange(word, generation << 2 | OPENING, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
        claimed.then_some(Opening { agent, index, slot, generation })
    }

    /// The steps between taking the window word and opening: fence and wait for copies, then untracked memory
    /// and admission, both before any byte moves. The first that fails names the decline.
    fn checks<O: DeviceOps>(
        &self,
        opening: &Opening<'_>,
        inputs: &OpenInputs<'_, O>,
        options: &WindowOptions,
        outcome: &mut Outcome,
    ) -> core::result::Result<(), DeclineReason> {
        opening.fence_and_wait(self, options, inputs.activity, outcome)?;
        let policy = inputs.policy.get();
        opening.check_untracked(outcome, &policy)?;
        // An open-ended window is admitted on its first pass, the snapshot; later passes are checked as they run.
        outcome.projected_ns = inputs.project(opening.agent, opening.slot, options.passes.max(1), &policy);
        opening.admit(outcome.projected_ns, &policy)
    }

    /// Closes a window (see [`crate::Engine::window_close`]).
    pub(crate) fn close(&self, handle: WindowHandle) -> Result<Outcome> {
        let index = (handle.0 & ((1 << INDEX_BITS) - 1)) as usize;
        let generation = handle.0 >> INDEX_BITS;
        let slot = self.at(index).filter(|_| generation != 0);
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

    /// Marks `agent`'s open window as re-entered (see [`crate::Engine::window_note_reentry`]).
    pub(crate) fn note_reentry(&self, agent: Agent) {
        if let Some((_, slot)) = self.find(agent) {
            if slot.window.load(Ordering::Acquire) & STATE_MASK == OPEN {
                slot.reentry.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Untracked memory live for `agent` now.
    pub(crate) fn untracked_stats(&self, agent: Agent) -> UntrackedStats {
        self.untracked.stats(agent)
    }

    /// The record path's hook for an allocation it does not track: remembered by kind, or ignored when it is
    /// not memory the device runtime knows. A full table is counted and logged, never an error.
    pub(crate) fn note_untracked(&self, ptr: usize, size: usize, alloc_flags: u32, info: Option<&PointerInfo>) {
        let Some(kind) = UntrackedKind::of_allocation(alloc_flags, info) else { return };
        let owner = info.filter(|_| kind != UntrackedKind::Executable).map(|info| info.owner);
        if !self.untracked.insert(ptr, size, owner, kind) {
            crate::log!(
                Level::Warning,
                "untracked allocation at {ptr:#x} ({size} bytes, {}) not remembered: {} are already; windows will \
                 under-report untracked memory",
                kind.key(),
                UNTRACKED_CAPACITY
            );
        }
    }

    /// The snapshot hook: the first snapshot of `agent` while its window is open is the window's.
    pub(crate) fn on_snapshot(&self, agent: Agent, result: core::result::Result<SnapshotInfo, DeclineReason>) {
        let Some(slot) = self.open_window_slot(agent) else { return };
        let accounted = {
            let mut record = slot.record.lock();
            if slot.window.load(Ordering::Acquire) & STATE_MASK != OPEN {
                return;
            }
            let first = !record.snapshot_seen;
            record.snapshot_seen = true;
            if first {
                record.snapshot_id = result.map_or(0, |info| info.id);
            }
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
            if !first && record.outcome.dispatches > 1 {
                // A window over several dispatches: the host's snapshot of one dispatch inside it (a graph
                // replayed node by node), with an account of its own, none of the window's.
                return;
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
    pub(crate) fn on_restore(&self, info: &SnapshotInfo, report: &RestoreReport, ok: bool, policy: &AtomicPolicy) {
        let (ns, digest_ns) = (report.elapsed_ns, report.digest_ns);
        let Some(slot) = self.open_window_slot(info.agent) else { return };
        let crossing = {
            let mut record = slot.record.lock();
            // A per-dispatch snapshot's restores (a window over a range) are not the window's passes.
            if slot.window.load(Ordering::Acquire) & STATE_MASK != OPEN || record.snapshot_id != info.id {
                return;
            }
            if ok {
                record.restores_ok = record.restores_ok.saturating_add(1);
            }
            record.restores = record.restores.saturating_add(1);
            let outcome = &mut record.outcome;
            outcome.bytes_moved = outcome.bytes_moved.saturating_add(report.bytes);
            outcome.clean_bytes = outcome.clean_bytes.saturating_add(report.clean_bytes);
            outcome.restore_ns = outcome.restore_ns.saturating_add(ns);
            outcome.digested_bytes = outcome.digested_bytes.saturating_add(report.digested_bytes);
            let learned = report.write_set;
            outcome.write_set_misses = outcome.write_set_misses.saturating_add(learned.misses);
            if learned.miss_pass != 0
                && (outcome.write_set_miss_pass == 0 || learned.miss_pass < outcome.write_set_miss_pass)
            {
                outcome.write_set_miss_pass = learned.miss_pass;
            }
            (record.outcome.passes_requested == 0).then(|| next_pass(&mut record, &policy.get())).flatten()
        };
        // Logged outside the record's lock: a logger may call back into kreplay.
        if let Some((projected, limit, max)) = crossing {
            crate::log!(
                Level::Warning,
                "agent {:#x}: open-ended window projected at {} us with one more pass, above {} = {} us{}",
                info.agent.0,
                projected / 1000,
                if max { "max_window_ns" } else { "warn_window_ns" },
                limit / 1000,
                if max { "; an open window is never declined: the host should end it after this pass" } else { "" }
            );
        }
        if let Some(device_tier) = single_tier(info) {
            slot.rates.lock().record(&Measured {
                device_tier,
                copied: report.bytes as u64,
                copy_ns: ns.saturating_sub(digest_ns),
                digested: report.digested_bytes as u64,
                digest_ns,
                written: report.bytes as u64,
                clean: report.clean_bytes as u64,
                partial_of: if report.partial { info.bytes as u64 } else { 0 },
            });
        }
    }

    /// Whether the next restore on `agent` is the last of its open window by the pass count given at open
    /// (restore `passes - 1`, or any after it): such a restore checks the whole footprint.
    /// A per-dispatch snapshot's restores (a window over a range) are never the window's last.
    pub(crate) fn is_last_restore(&self, info: &SnapshotInfo) -> bool {
        let Some(slot) = self.open_window_slot(info.agent) else { return false };
        let record = slot.record.lock();
        let requested = record.outcome.passes_requested;
        slot.window.load(Ordering::Acquire) & STATE_MASK == OPEN
            && record.snapshot_id == info.id
            && requested != 0
            && record.restores_ok.saturating_add(2) >= requested
    }

    /// `agent`'s slot when a window may be open on it (a cheap pre-check; the hooks check again under the lock).
    fn open_window_slot(&self, agent: Agent) -> Option<&AgentSlot> {
        if !self.fence.is_armed() {
            return None;
        }
        let (_, slot) = self.find(agent)?;
        (slot.window.load(Ordering::Acquire) & STATE_MASK == OPEN).then_some(slot)
    }

    /// Whether a window is open or opening on `agent`.
    pub(crate) fn is_open(&self, agent: Agent) -> bool {
        self.find(agent).is_some_and(|(_, slot)| slot.window.load(Ordering::Acquire) & STATE_MASK != NONE)
    }
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

/// The per-pass check of an open-ended window, after each restore: the window so far (its snapshot and
/// restores, as measured) plus one more restore at their average is its projection, kept in the outcome. The
/// first time it crosses `warn_window_ns` (default 10 s), and again the first time it crosses `max_window_ns`,
/// returns (projection, limit, whether the limit is the max) to be logged. The window is already open, so it
/// is never declined here: the host decides whether to run the pass.
fn next_pass(record: &mut Record, policy: &Policy) -> Option<(u64, u64, bool)> {
    let outcome = &mut record.outcome;
    let average = outcome.restore_ns / u64::from(record.restores.max(1));
    let projected = outcome.snapshot_ns.saturating_add(outcome.restore_ns).saturating_add(average);
    outcome.projected_ns = outcome.projected_ns.max(projected);
    let warn = warn_window_ns(policy);
    if policy.max_window_ns != 0 && projected > policy.max_window_ns && record.crossed & CROSSED_MAX == 0 {
        record.crossed |= CROSSED_MAX | CROSSED_WARN;
        return Some((projected, policy.max_window_ns, true));
    }
    if projected > warn && record.crossed & CROSSED_WARN == 0 {
        record.crossed |= CROSSED_WARN;
        return Some((projected, warn, false));
    }
    None
}
