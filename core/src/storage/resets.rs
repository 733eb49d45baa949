//! Device context resets: an epoch per agent, moved on by every reset of the agent's device context.
//!
//! A reset (CUDA: `cudaDeviceReset`, the primary context reset, `cuCtxDestroy`) frees everything the host and
//! kreplay made in that context: device storage, page-locked registrations, module variables. Its addresses
//! may come back at once as the program's own new allocations. A snapshot remembers the epoch it was captured
//! in; one of an older epoch is never restored and its device storage is never freed or written.

use arrayvec::ArrayVec;

use super::slots::MAX_AGENTS;
use crate::lock::Mutex;
use crate::types::Agent;

/// Resets seen per agent.
///
/// # Invariants
/// An agent's epoch is its entry in `table` (0 if none) plus `spill`; neither ever decreases, so an epoch never
/// repeats. `spill` moves on when an agent is reset while every entry is taken (every agent goes stale then).
pub struct Resets {
    inner: Mutex<Epochs>,
}

struct Epochs {
    table: ArrayVec<(Agent, u64), MAX_AGENTS>,
    spill: u64,
}

impl Default for Resets {
    fn default() -> Self {
        Self::new()
    }
}

impl Resets {
    /// No reset seen.
    pub const fn new() -> Self {
        Resets { inner: Mutex::new(Epochs { table: ArrayVec::new_const(), spill: 0 }) }
    }

    /// `agent`'s epoch now.
    pub fn epoch(&self, agent: Agent) -> u64 {
        let epochs = self.inner.lock();
        let own = epochs.table.iter().find(|(a, _)| *a == agent).map_or(0, |(_, epoch)| *epoch);
        own.wrapping_add(epochs.spill)
    }

    /// A reset of `agent`'s device context: its epoch moves on.
    pub fn bump(&self, agent: Agent) {
        let mut epochs = self.inner.lock();
        if let Some(entry) = epochs.table.iter_mut().find(|(a, _)| *a == agent) {
            entry.1 += 1;
        } else if epochs.table.try_push((agent, 1)).is_err() {
            epochs.spill += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_moves_only_its_agents_epoch_on() {
        let resets = Resets::new();
        let (a, b) = (Agent(1), Agent(2));
        assert_eq!((resets.epoch(a), resets.epoch(b)), (0, 0));
        resets.bump(a);
        assert_eq!((resets.epoch(a), resets.epoch(b)), (1, 0));
    }

    #[test]
    fn a_full_table_moves_every_epoch_on() {
        let resets = Resets::new();
        for i in 0..MAX_AGENTS as u64 {
            resets.bump(Agent(i + 1));
        }
        let outsider = Agent(MAX_AGENTS as u64 + 1);
        let before = (resets.epoch(Agent(1)), resets.epoch(outsider));
        resets.bump(outsider);
        assert_ne!(resets.epoch(outsider), before.1);
        assert_ne!(resets.epoch(Agent(1)), before.0);
    }
}
