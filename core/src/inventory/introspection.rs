//! Introspection: the tracked regions as a host's own tests of its tracking see them (rocprofiler-sdk's
//! tracker tests ask the same two questions: what is tracked for an agent, and under which generation).

use super::{Inventory, Region};
use crate::types::Agent;

impl<const CAP: usize, const SLOTS: usize> Inventory<CAP, SLOTS> {
    /// Calls `visit` for each of `agent`'s tracked regions, allocations then mappings, in table order, under
    /// the read lock: `visit` must not record, free or otherwise change the inventory (that would wait for
    /// the lock it runs under). Returns how many regions it visited.
    pub fn for_each(&self, agent: Agent, mut visit: impl FnMut(&Region)) -> usize {
        let state = self.state.read();
        let mut visited = 0;
        for region in state.allocations.iter().chain(state.mappings.iter()).filter(|r| r.agent == agent) {
            visit(region);
            visited += 1;
        }
        visited
    }

    /// The generation of the allocation or mapping tracked at exactly `base`, if any.
    pub fn generation_of(&self, base: usize) -> Option<u64> {
        let state = self.state.read();
        let found = state.allocations.get(base).or_else(|| state.mappings.iter().find(|r| r.base == base));
        found.map(|region| region.generation)
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;

    const A: Agent = Agent(1);
    const B: Agent = Agent(2);

    fn visited(inventory: &Inventory<64, 128>, agent: Agent) -> Vec<(usize, usize, u64)> {
        let mut seen = Vec::new();
        let count = inventory.for_each(agent, |r| seen.push((r.base, r.size, r.generation)));
        assert_eq!(count, seen.len());
        seen
    }

    #[test]
    fn foreach_visits_exactly_the_agents_live_regions_in_table_order() {
        let inventory: Inventory<64, 128> = Inventory::new();
        inventory.set_enabled(true, true);
        let epoch = inventory.epoch();
        for (i, agent) in [A, B, A, A, A].into_iter().enumerate() {
            inventory.insert(0x1000 * (i + 1), 16 * (i + 1), agent, epoch).unwrap();
        }
        inventory.insert_vmem(0x90_000, 4096, A).unwrap();
        inventory.remove(0x1000, true).unwrap();
        let seen = visited(&inventory, A);
        let bases: Vec<usize> = seen.iter().map(|&(base, _, _)| base).collect();
        // The free moved the last allocation into its hole (the table is dense): table order, then mappings.
        assert_eq!(bases, [0x5000, 0x3000, 0x4000, 0x90_000]);
        for &(base, size, generation) in &seen {
            assert_eq!(inventory.generation_of(base), Some(generation));
            assert_eq!(size, if base == 0x90_000 { 4096 } else { 16 * (base / 0x1000) });
        }
        assert_eq!(visited(&inventory, B), [(0x2000, 32, inventory.generation_of(0x2000).unwrap())]);
        assert!(visited(&inventory, Agent(3)).is_empty());
    }

    #[test]
    #[cfg_attr(miri, ignore = "threads contending for the lock with back-off sleeps: slow under Miri")]
    fn foreach_during_concurrent_records_sees_whole_regions_and_never_another_agents() {
        static INVENTORY: Inventory<1024, 2048> = Inventory::new();
        let inventory = &INVENTORY;
        inventory.set_enabled(true, true);
        // A writer keeps replacing agent A's 64 regions (size = the round) while readers walk them: every region
        // a walk sees is one of A's bases, with the size one round gave it, and a walk never sees a base twice.
        let writer = std::thread::spawn(move || {
            for round in 1..=if cfg!(miri) { 4 } else { 300 } {
                for i in 0..64 {
                    inventory.insert((i + 1) << 12, round, A, inventory.epoch()).unwrap();
                }
                for i in (0..64).step_by(3) {
                    inventory.remove((i + 1) << 12, true).unwrap();
                }
            }
        });
        let readers: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(move || {
                    for _ in 0..if cfg!(miri) { 4 } else { 300 } {
                        let mut bases = Vec::new();
                        inventory.for_each(A, |region| {
                            assert_eq!(region.agent, A);
                            assert!(region.base.trailing_zeros() >= 12 && region.base >> 12 <= 64);
                            assert!(region.size >= 1 && region.generation != 0);
                            bases.push(region.base);
                        });
                        let seen = bases.len();
                        bases.sort_unstable();
                        bases.dedup();
                        assert_eq!(bases.len(), seen, "a region visited twice");
                        assert_eq!(inventory.for_each(B, |_| panic!("agent B has no regions")), 0);
                    }
                })
            })
            .collect();
        writer.join().unwrap();
        for reader in readers {
            reader.join().unwrap();
        }
        // 64 regions, every third removed in the last round.
        assert_eq!(inventory.for_each(A, |_| {}), 64 - 22);
    }

    #[test]
    fn generation_of_answers_only_for_a_tracked_base() {
        let inventory: Inventory<64, 128> = Inventory::new();
        inventory.set_enabled(true, true);
        let epoch = inventory.epoch();
        inventory.insert(0x1000, 256, A, epoch).unwrap();
        let first = inventory.generation_of(0x1000).unwrap();
        assert_eq!(inventory.generation_of(0x1010), None, "an interior pointer is not a base");
        assert_eq!(inventory.generation_of(0x2000), None);
        inventory.remove(0x1000, true).unwrap();
        assert_eq!(inventory.generation_of(0x1000), None, "a freed region is untracked");
        inventory.insert(0x1000, 256, A, epoch).unwrap();
        let second = inventory.generation_of(0x1000).unwrap();
        assert_ne!(first, second, "a reused address has a new generation");
    }
}
