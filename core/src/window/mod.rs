//! The replay window: one replayed dispatch on one agent, from before its snapshot to after its last pass.
//!
//! - [`fence`]: async copies of the host program (DMA engines, outside the dispatch queues) counted in flight
//!   per agent, held back while a window is open on an agent they touch.
//! - [`windows`]: opening (fence, wait for copies, untracked and admission checks) and closing a window, and
//!   accounting the agent's snapshot and restores to it.
//! - [`admission`]: the projected cost of a window from the copy and digest rates earlier windows measured.
//! - [`outcome`]: the record every window ends in, and its one `key=value` log line.
//! - [`untracked`]: memory seen through the record calls that classification leaves out of snapshots.
//!
//! The engine's window calls enter the library and delegate to [`WindowState`], handing it what an open reads
//! (`OpenInputs`); nothing here names the engine.
//!
//! Per-agent state lives in a fixed table of [`AgentSlot`]s, claimed by the first window or fenced copy that
//! names an agent and never given back (an agent's in-flight count must outlive any one window), so nothing
//! here allocates.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::lock::Mutex;
use crate::types::Agent;

pub mod admission;
pub mod fence;
pub mod outcome;
pub mod untracked;
pub mod windows;

#[cfg(test)]
mod tests;

pub use admission::Rates;
pub use fence::{Fence, UNCOUNTED_TOKEN};
pub use outcome::{Outcome, UntrackedStats};
pub use untracked::{Untracked, UntrackedKind};
pub(crate) use windows::OpenInputs;
pub use windows::{Opened, WindowHandle, WindowOptions};

/// Agents that can have windows or fenced copies over the life of the process.
pub const WINDOW_AGENTS: usize = 256;

/// The calling thread, as the window that fences an agent remembers its opener.
pub(crate) fn current_thread() -> usize {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    let id = unsafe { libc::pthread_self() } as usize;
    id.max(1)
}

/// Everything the window code keeps for one agent.
pub(crate) struct AgentSlot {
    /// Whether `agent` is valid; set once, under the table's claim lock.
    claimed: AtomicBool,
    agent: AtomicU64,
    /// A window of this agent is opening or open: a copy naming the agent waits (unless it is the window's own
    /// thread's).
    pub(crate) fenced: AtomicBool,
    /// The thread that opened the window (valid while `fenced`).
    pub(crate) owner: AtomicUsize,
    /// Async copies in flight that touch the agent.
    pub(crate) in_flight: AtomicU64,
    /// The window's state and generation ([`windows`] encodes them).
    pub(crate) window: AtomicU64,
    /// Set by `note_reentry` while the window is open.
    pub(crate) reentry: AtomicBool,
    /// What the open window accounted so far.
    pub(crate) record: Mutex<outcome::Record>,
    /// Rates measured on this agent's earlier windows.
    pub(crate) rates: Mutex<Rates>,
}

impl AgentSlot {
    const fn new() -> Self {
        AgentSlot {
            claimed: AtomicBool::new(false),
            agent: AtomicU64::new(0),
            fenced: AtomicBool::new(false),
            owner: AtomicUsize::new(0),
            in_flight: AtomicU64::new(0),
            window: AtomicU64::new(0),
            reentry: AtomicBool::new(false),
            record: Mutex::new(outcome::Record::EMPTY),
            rates: Mutex::new(Rates::UNMEASURED),
        }
    }
}

/// The per-agent slots, the fence's tokens and the untracked table.
pub struct WindowState {
    slots: [AgentSlot; WINDOW_AGENTS],
    claiming: Mutex<()>,
    pub(crate) fence: Fence,
    pub(crate) untracked: Untracked,
}

impl Default for WindowState {
    fn default() -> Self {
        Self::new()
    }
}

impl WindowState {
    /// No agent known, no window ever opened. All zero, so that an engine in a `static` is `.bss`.
    pub const fn new() -> Self {
        WindowState {
            slots: [const { AgentSlot::new() }; WINDOW_AGENTS],
            claiming: Mutex::new(()),
            fence: Fence::new(),
            untracked: Untracked::new(),
        }
    }

    /// The slot of `agent`, if it has one.
    pub(crate) fn find(&self, agent: Agent) -> Option<(usize, &AgentSlot)> {
        self.slots
            .iter()
            .enumerate()
            .take_while(|(_, slot)| slot.claimed.load(Ordering::Acquire))
            .find(|(_, slot)| slot.agent.load(Ordering::Relaxed) == agent.0)
    }

    /// The slot of `agent`, claimed if it has none; `None` when the table is full.
    pub(crate) fn claim(&self, agent: Agent) -> Option<(usize, &AgentSlot)> {
        if let Some(found) = self.find(agent) {
            return Some(found);
        }
        let _claiming = self.claiming.lock();
        // Slots are claimed in order and never given back, so the first unclaimed one ends the search.
        for (index, slot) in self.slots.iter().enumerate() {
            if !slot.claimed.load(Ordering::Acquire) {
                slot.agent.store(agent.0, Ordering::Relaxed);
                slot.claimed.store(true, Ordering::Release);
                return Some((index, slot));
            }
            if slot.agent.load(Ordering::Relaxed) == agent.0 {
                return Some((index, slot));
            }
        }
        None
    }

    /// The slot at `index` (which a token or handle named), if it is claimed.
    pub(crate) fn at(&self, index: usize) -> Option<&AgentSlot> {
        self.slots.get(index).filter(|slot| slot.claimed.load(Ordering::Acquire))
    }
}
