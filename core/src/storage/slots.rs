//! Per-agent pool slots, shared by both storage tiers. A slot is claimed by the first agent that needs one and
//! given up when its pool holds nothing, so the fixed table serves any number of agents over a process's life
//! (partition modes expose 64 or more), as long as no more than [`MAX_AGENTS`] hold storage at once.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::lock::Mutex;
use crate::types::Agent;

/// Agents that can hold storage at once, per tier.
pub const MAX_AGENTS: usize = 64;

/// A per-agent pool that a slot can hold.
pub trait Claimed {
    /// A pool holding nothing.
    const EMPTY: Self;
    /// Whether the pool holds nothing (idle or lent), so its slot may be given to another agent.
    fn is_empty(&self) -> bool;
}

struct Owned<P> {
    owner: Option<Agent>,
    pool: P,
}

struct Slot<P> {
    /// The owner, readable without the lock for the search; the lock's `owner` is the truth.
    agent: AtomicU64,
    claimed: AtomicBool,
    pool: Mutex<Owned<P>>,
}

/// The slots of one tier.
pub struct AgentSlots<P> {
    slots: [Slot<P>; MAX_AGENTS],
    claiming: Mutex<()>,
}

impl<P: Claimed> AgentSlots<P> {
    /// No agent has a slot.
    pub const fn new() -> Self {
        AgentSlots {
            slots: [const {
                Slot {
                    agent: AtomicU64::new(0),
                    claimed: AtomicBool::new(false),
                    pool: Mutex::new(Owned { owner: None, pool: P::EMPTY }),
                }
            }; MAX_AGENTS],
            claiming: Mutex::new(()),
        }
    }

    fn find(&self, agent: Agent) -> Option<&Slot<P>> {
        self.slots
            .iter()
            .find(|slot| slot.claimed.load(Ordering::Acquire) && slot.agent.load(Ordering::Relaxed) == agent.0)
    }

    /// Runs `f` on `agent`'s pool under its lock; `None` when the agent has none. `f` must not log or call out.
    pub fn with<R>(&self, agent: Agent, f: impl FnOnce(&mut P) -> R) -> Option<R> {
        loop {
            let slot = self.find(agent)?;
            let mut owned = slot.pool.lock();
            if owned.owner == Some(agent) {
                return Some(f(&mut owned.pool));
            }
            // The slot was given to another agent between the search and the lock: search again.
        }
    }

    /// As [`AgentSlots::with`], claiming a slot first if the agent has none (giving up empty pools of other
    /// agents when every slot is taken). `CapacityExceeded`, logged, when every slot holds storage.
    pub fn with_or_claim<R>(&self, agent: Agent, mut f: impl FnMut(&mut P) -> R) -> Result<R> {
        loop {
            if let Some(result) = self.with(agent, &mut f) {
                return Ok(result);
            }
            let claimed = {
                let _claiming = self.claiming.lock();
                self.find(agent).is_some() || self.claim(agent)
            };
            if !claimed {
                crate::log!(
                    crate::log::Level::Error,
                    "agent {:#x}: no pool slot left: {} other agents hold storage (release or trim theirs)",
                    agent.0,
                    MAX_AGENTS
                );
                return Err(Error::CapacityExceeded);
            }
        }
    }

    /// Claims a free slot for `agent`, reclaiming empty ones if needed; called under `claiming`.
    fn claim(&self, agent: Agent) -> bool {
        for pass in 0..2 {
            for slot in &self.slots {
                if pass == 1 && slot.claimed.load(Ordering::Acquire) {
                    // Second pass: give up the slot of a pool that holds nothing.
                    let mut owned = slot.pool.lock();
                    if owned.owner.is_some() && owned.pool.is_empty() {
                        owned.owner = None;
                        slot.claimed.store(false, Ordering::Release);
                    }
                }
                if !slot.claimed.load(Ordering::Acquire) {
                    let mut owned = slot.pool.lock();
                    owned.owner = Some(agent);
                    slot.agent.store(agent.0, Ordering::Relaxed);
                    slot.claimed.store(true, Ordering::Release);
                    return true;
                }
            }
        }
        false
    }

    /// The agents that have a slot now.
    pub fn agents(&self, mut each: impl FnMut(Agent)) {
        for slot in &self.slots {
            if slot.claimed.load(Ordering::Acquire) {
                each(Agent(slot.agent.load(Ordering::Relaxed)));
            }
        }
    }
}

impl<P: Claimed> Default for AgentSlots<P> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter(usize);
    impl Claimed for Counter {
        const EMPTY: Self = Counter(0);
        fn is_empty(&self) -> bool {
            self.0 == 0
        }
    }

    #[test]
    fn empty_pools_give_their_slots_to_new_agents_and_busy_ones_do_not() {
        static SLOTS: AgentSlots<Counter> = AgentSlots::new();
        crate::log::set_sink(Some(|_, _| {}), crate::log::Level::Error);
        for a in 1..=MAX_AGENTS as u64 {
            SLOTS.with_or_claim(Agent(a), |pool| pool.0 = 1).unwrap();
        }
        assert_eq!(SLOTS.with_or_claim(Agent(1000), |_| ()).err(), Some(Error::CapacityExceeded));
        SLOTS.with(Agent(7), |pool| pool.0 = 0).unwrap();
        SLOTS.with_or_claim(Agent(1000), |pool| pool.0 = 5).unwrap();
        assert!(SLOTS.with(Agent(7), |_| ()).is_none(), "agent 7's empty pool was given up");
        assert_eq!(SLOTS.with(Agent(1000), |pool| pool.0), Some(5));
        assert_eq!(SLOTS.with(Agent(8), |pool| pool.0), Some(1), "a pool holding storage keeps its slot");
    }
}
