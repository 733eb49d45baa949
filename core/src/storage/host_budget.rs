//! The host budget of one capture (`host_budget_percent`): how much host staging kreplay may hold once the
//! capture has its storage, from the host memory available at that moment.
//!
//! Like the device budget, it is live: each capture asks for the available memory (the host's
//! [`DeviceOps::host_available_bytes`] when it has one, else the operating system's `MemAvailable`). The
//! staging kreplay already holds is counted as available to it, so a capture that finds its previous staging
//! idle keeps the budget it had instead of shrinking it each dispatch: the budget is `percent` of (available +
//! held). What it bounds is everything kreplay will hold once this capture is staged: the staging of other
//! agents and live snapshots, plus this snapshot's host bytes; the agent's idle staging is left out, since the
//! capture takes it over or gives it back. Device-tier ranges that spill to the host count as host bytes.
//! Page-locking is bounded by the same figure: only staging within the budget exists to be locked.
//!
//! An available figure that cannot be had (the op fails, `/proc/meminfo` unreadable) is taken as none
//! available: the budget is then `percent` of what kreplay holds alone, and a capture that needs more than
//! that declines. Declining is the side that cannot take the host down.

use crate::log::Level;
use crate::ops::DeviceOps;
use crate::types::Agent;

/// The figures of one capture's host budget.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HostBudget {
    /// `host_budget_percent`.
    pub percent: u32,
    /// Host memory available now; `None` when it could not be read.
    pub available: Option<usize>,
    /// Staging kreplay holds now (idle and lent, every agent).
    pub held: usize,
    /// Of `held`, the agent's idle staging, which this capture takes over or gives back.
    pub reusable: usize,
}

impl HostBudget {
    /// The figures now, with the available memory from the ops or the operating system.
    pub(crate) fn now<O: DeviceOps>(ops: &O, percent: u32, held: usize, reusable: usize) -> HostBudget {
        let available = if ops.can_query_host_memory() {
            ops.host_available_bytes().ok()
        } else {
            crate::host_memory::available_bytes()
        };
        HostBudget { percent, available, held, reusable: reusable.min(held) }
    }

    /// What kreplay may hold in all: `percent` of (available + held).
    pub(crate) fn limit(&self) -> usize {
        let base = self.available.unwrap_or(0).saturating_add(self.held);
        // In u128 so that a percent of a figure near usize::MAX does not overflow.
        (base as u128 * u128::from(self.percent) / 100) as usize
    }

    /// What kreplay would hold with `need` more bytes of this capture's staging.
    pub(crate) fn would_hold(&self, need: usize) -> usize {
        (self.held - self.reusable).saturating_add(need)
    }

    /// Whether a capture that needs `need` bytes of host staging fits; logs the figures when it does not.
    pub(crate) fn admits(&self, agent: Agent, need: usize) -> bool {
        let (limit, total) = (self.limit(), self.would_hold(need));
        if self.percent == 0 || total <= limit {
            return true;
        }
        match self.available {
            Some(available) => crate::log!(
                Level::Warning,
                "agent {:#x}: host budget: the snapshot needs {need} bytes of host staging; with the {} bytes \
                 kreplay holds otherwise that is {total}, above host_budget_percent = {} of {available} bytes \
                 available + {} held = {limit}",
                agent.0,
                self.held - self.reusable,
                self.percent,
                self.held
            ),
            None => crate::log!(
                Level::Warning,
                "agent {:#x}: host budget: the available host memory could not be read, so the budget is \
                 host_budget_percent = {} of the {} bytes kreplay holds = {limit}; the snapshot needs {need} bytes \
                 of host staging ({total} in all)",
                agent.0,
                self.percent,
                self.held
            ),
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(percent: u32, available: Option<usize>, held: usize, reusable: usize) -> HostBudget {
        HostBudget { percent, available, held, reusable }
    }

    #[test]
    fn a_share_of_available_plus_held_bounds_everything_kreplay_would_hold() {
        let agent = Agent(1);
        // 50 % of (1000 available + 0 held) = 500.
        assert!(budget(50, Some(1000), 0, 0).admits(agent, 500));
        assert!(!budget(50, Some(1000), 0, 0).admits(agent, 501));
        // Its own idle staging counts as available to it, so a repeat capture keeps its budget: 50 % of (500 +
        // 500) = 500, and the 500 held are reused.
        assert!(budget(50, Some(500), 500, 500).admits(agent, 500));
        // Staging lent to another snapshot is held and not reusable: 100 + 450 > 50 % of (900 + 100).
        assert!(!budget(50, Some(900), 100, 0).admits(agent, 450));
        assert!(budget(50, Some(900), 100, 0).admits(agent, 400));
        // Off, and unknown availability (only what kreplay holds counts).
        assert!(budget(0, None, 0, 0).admits(agent, usize::MAX));
        assert!(!budget(50, None, 0, 0).admits(agent, 1));
        assert!(budget(50, None, 0, 0).admits(agent, 0));
        assert_eq!(budget(100, Some(usize::MAX), usize::MAX, 0).limit(), usize::MAX);
    }
}
