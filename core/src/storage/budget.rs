//! The device budget of one capture: how much device storage it may hold, from the policy's fixed budget
//! (`device_budget_bytes`) and its live one (`device_budget_percent` of the memory the device has free at that
//! moment, through [`DeviceOps::device_free_bytes`]).
//!
//! The live budget counts the agent's idle device storage as free: kreplay gives it back before it allocates
//! anew, so a capture that finds its previous block idle keeps the budget it had, instead of halving it each
//! time the block sits in the pool. Storage lent to other live snapshots is already missing from what the
//! device reports free, so only the fixed budget subtracts it.
//!
//! Both bound what the agent's books say at the moment a new block is charged, before it is allocated
//! ([`Budget::room`]), so neither a concurrent capture nor a block still on its way to `device_free` can take
//! the agent past them (`storage::device`).

use super::device::DevicePools;
use crate::log::Level;
use crate::ops::DeviceOps;
use crate::policy::Policy;
use crate::types::Agent;

/// Device storage of an agent that kreplay already holds, as one capture sees it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Held {
    /// Lent to other live snapshots of the agent, or being allocated or freed on other threads.
    pub lent: usize,
    /// Idle, or held by the storage this capture may take over: given back before any new allocation.
    pub reclaimable: usize,
}

/// An agent's device storage books at one moment (`storage::device`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Books {
    /// Everything the device may count as allocated for the agent's storage: idle and lent blocks, allocations
    /// in flight, and blocks on their way to `device_free`.
    pub charged: usize,
    /// Of `charged`, for `device_alloc` calls in flight (the device may not count them as used yet).
    pub allocating: usize,
    /// Lent to snapshots (and to the stash kept for dirty-only re-capture).
    pub lent: usize,
    /// Idle in the pool.
    pub idle: usize,
    /// Changes whenever any of the above does.
    pub version: u64,
}

/// The device budget of one capture, as its parts: the fixed budget bounds everything the agent holds, the
/// live one what this capture may add to what the device counted as used when it was asked.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Budget {
    /// `device_budget_bytes`, when set.
    pub fixed: Option<usize>,
    /// `device_budget_percent` of the free memory and of kreplay's idle storage, when set (0 when the query
    /// failed).
    pub live: Option<usize>,
    /// Of the agent's storage charged when the device answered, what the live budget did not count as free:
    /// anything charged beyond it later (idle blocks not yet freed, new blocks of other captures) takes room.
    pub base: usize,
}

/// How many times a capture asks for the free memory while its agent's books keep changing meanwhile.
const QUERY_TRIES: usize = 3;

impl Budget {
    /// Queries the free memory (when the policy has a live budget) for a capture that sees `held`.
    pub(crate) fn query<O: DeviceOps + ?Sized>(ops: &O, agent: Agent, policy: &Policy, held: Held) -> Budget {
        let fixed = (policy.device_budget_bytes > 0).then_some(policy.device_budget_bytes);
        let live = has_live(ops, policy).then(|| match free_bytes(ops, agent) {
            Some(free) => percent_of(free.saturating_add(held.reclaimable), policy.device_budget_percent),
            None => 0,
        });
        Budget { fixed, live, base: held.lent }
    }

    /// The budget of a capture of `agent` that took over `taken_over` bytes of its storage, and the agent's
    /// storage as the capture sees it. The agent's idle storage counts as free for the live budget only when
    /// the books did not change while the device answered, so that the device surely counted every idle block
    /// as used (a block freed or allocated meanwhile would be counted twice); the device is asked again then,
    /// and after [`QUERY_TRIES`] answers idle storage is not counted.
    pub(crate) fn of_capture<O: DeviceOps + ?Sized>(
        ops: &O,
        agent: Agent,
        policy: &Policy,
        device: &DevicePools,
        taken_over: usize,
    ) -> (Budget, Held) {
        let fixed = (policy.device_budget_bytes > 0).then_some(policy.device_budget_bytes);
        let mut books = device.books(agent);
        let (mut live, mut base) = (None, 0);
        if has_live(ops, policy) {
            for attempt in 1..=QUERY_TRIES {
                let free = free_bytes(ops, agent);
                let (before, after) = (books, device.books(agent));
                let still = after.version == before.version;
                books = after;
                match free {
                    None => {
                        live = Some(0);
                        break;
                    }
                    Some(free) if still || attempt == QUERY_TRIES => {
                        // What the device surely counted as used: charged both before and after it answered, not
                        // being allocated, and not counted as free here.
                        let reclaimable = if still { books.idle } else { 0 }.saturating_add(taken_over);
                        let surely =
                            before.charged.min(after.charged).saturating_sub(after.allocating.max(before.allocating));
                        base = surely.saturating_sub(reclaimable);
                        live = Some(percent_of(free.saturating_add(reclaimable), policy.device_budget_percent));
                        break;
                    }
                    Some(_) => {}
                }
            }
        }
        let reclaimable = books.idle.saturating_add(taken_over);
        (Budget { fixed, live, base }, Held { lent: books.charged.saturating_sub(reclaimable), reclaimable })
    }

    /// The most device storage the capture may place: the fixed budget less what other snapshots hold, the
    /// live budget, or the smaller of the two when both are set (0 when neither is).
    pub(crate) fn limit(&self, held: Held) -> usize {
        match (self.fixed.map(|fixed| fixed.saturating_sub(held.lent)), self.live) {
            (Some(fixed), Some(live)) => fixed.min(live),
            (Some(budget), None) | (None, Some(budget)) => budget,
            (None, None) => 0,
        }
    }

    /// How many more bytes may be charged now, with the agent's books at `books`: the fixed budget bounds all
    /// that is charged, the live one all that is charged beyond [`Budget::base`] (idle blocks the live budget
    /// counted as free but that are not freed yet, blocks other captures added since), so a block given back
    /// late is never counted as room.
    pub(crate) fn room(&self, books: Books) -> usize {
        let fixed = self.fixed.map(|fixed| fixed.saturating_sub(books.charged));
        let live = self.live.map(|live| live.saturating_sub(books.charged.saturating_sub(self.base)));
        match (fixed, live) {
            (Some(fixed), Some(live)) => fixed.min(live),
            (Some(room), None) | (None, Some(room)) => room,
            (None, None) => 0,
        }
    }
}

/// The budget of one capture: the fixed budget less what other snapshots hold, the live budget, or the smaller
/// of the two when both are set. A failing free-memory query makes the live budget 0 for this capture.
pub(crate) fn capture_budget<O: DeviceOps + ?Sized>(ops: &O, agent: Agent, policy: &Policy, held: Held) -> usize {
    Budget::query(ops, agent, policy, held).limit(held)
}

/// Whether the policy sets a live budget and the ops can answer it.
fn has_live<O: DeviceOps + ?Sized>(ops: &O, policy: &Policy) -> bool {
    policy.device_budget_percent > 0 && ops.can_query_free_memory()
}

/// The free device memory of `agent`; `None` (logged) when the query fails.
fn free_bytes<O: DeviceOps + ?Sized>(ops: &O, agent: Agent) -> Option<usize> {
    ops.device_free_bytes(agent)
        .inspect_err(|error| {
            crate::log!(
                Level::Info,
                "agent {:#x}: the free device memory could not be queried ({error:?}); this snapshot is kept in \
                 host staging",
                agent.0
            );
        })
        .ok()
}

/// `percent` percent of `bytes`, rounded down, without overflow.
fn percent_of(bytes: usize, percent: u32) -> usize {
    let share = bytes as u128 * u128::from(percent) / 100;
    usize::try_from(share).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;
    use crate::sim::SimDevice;

    const A: Agent = Agent(1);

    fn device(free: usize) -> SimDevice {
        let device = SimDevice::with_v2();
        let mut state = device.state();
        state.offer_free_bytes = true;
        state.free_bytes = free;
        drop(state);
        device
    }

    fn policy(bytes: usize, percent: u32) -> Policy {
        Policy { device_budget_bytes: bytes, device_budget_percent: percent, ..Policy::default() }
    }

    #[test]
    fn the_live_budget_is_the_percent_of_free_memory_and_what_kreplay_holds_idle() {
        let device = device(1000);
        assert_eq!(capture_budget(&device, A, &policy(0, 50), Held::default()), 500);
        assert_eq!(capture_budget(&device, A, &policy(0, 50), Held { lent: 300, reclaimable: 200 }), 600);
        assert_eq!(capture_budget(&device, A, &policy(0, 100), Held::default()), 1000);
        assert_eq!(device.state().free_bytes_queries, 3);
    }

    #[test]
    fn the_smaller_of_the_fixed_and_the_live_budget_wins() {
        let device = device(1000);
        assert_eq!(capture_budget(&device, A, &policy(200, 50), Held::default()), 200);
        assert_eq!(capture_budget(&device, A, &policy(800, 50), Held::default()), 500);
        // Only the fixed budget counts what other snapshots hold: the device already counts it as used.
        assert_eq!(capture_budget(&device, A, &policy(800, 50), Held { lent: 400, reclaimable: 0 }), 400);
    }

    #[test]
    fn a_failing_query_means_no_device_budget_for_that_capture() {
        let device = device(1000);
        device.state().fail_free_bytes = true;
        assert_eq!(capture_budget(&device, A, &policy(0, 50), Held::default()), 0);
        assert_eq!(capture_budget(&device, A, &policy(800, 50), Held::default()), 0);
        device.state().fail_free_bytes = false;
        assert_eq!(capture_budget(&device, A, &policy(800, 50), Held::default()), 500);
    }

    #[test]
    fn without_the_query_or_the_percent_the_fixed_budget_holds_alone() {
        let device = device(1000);
        device.state().offer_free_bytes = false;
        assert_eq!(capture_budget(&device, A, &policy(0, 50), Held::default()), 0);
        assert_eq!(capture_budget(&device, A, &policy(800, 50), Held { lent: 100, reclaimable: 0 }), 700);
        device.state().offer_free_bytes = true;
        assert_eq!(capture_budget(&device, A, &policy(800, 0), Held::default()), 800);
        assert_eq!(device.state().free_bytes_queries, 0);
    }

    #[test]
    fn the_room_for_a_new_block_counts_what_was_charged_since_the_device_answered() {
        // 180 charged now; when the device answered, 100 of it was counted as used (others' snapshots, blocks in
        // flight) and the rest as free, so 80 charged beyond it take room from the live budget.
        let books = Books { charged: 180, allocating: 0, lent: 100, idle: 50, version: 0 };
        let budget = |fixed, live| Budget { fixed, live, base: 100 };
        assert_eq!(budget(Some(300), None).room(books), 120, "the fixed budget bounds all that is charged");
        assert_eq!(budget(None, Some(200)).room(books), 120, "the live one what was charged since");
        assert_eq!(budget(Some(300), Some(100)).room(books), 20, "the smaller room wins");
        assert_eq!(budget(Some(150), Some(500)).room(books), 0, "nothing when over the budget");
        assert_eq!(budget(None, Some(200)).room(Books { charged: 60, ..books }), 200, "frees since give no more");
        assert_eq!(Budget::default().room(books), 0);
    }

    /// An engine of its own (a static: the tables are megabytes) on a device with `free` bytes free, and 16
    /// tracked regions of 64 KiB.
    macro_rules! engine_with {
        ($free:expr, $policy:expr) => {{
            static ENGINE: Engine<SimDevice> = Engine::new();
            crate::log::set_sink(Some(|_, _| {}), crate::log::Level::Error);
            let device = device($free);
            ENGINE.configure(device.clone()).unwrap();
            ENGINE.set_tracking(true);
            ENGINE.set_policy($policy).unwrap();
            let bases: Vec<usize> = (0..16u8)
                .map(|i| {
                    let base = device.alloc(A, REGION, i);
                    ENGINE.record_alloc(base, REGION, 0).unwrap();
                    base
                })
                .collect();
            (&ENGINE, device, bases)
        }};
    }

    const REGION: usize = 65_536;
    const FOOTPRINT: usize = 16 * REGION;

    #[test]
    #[cfg_attr(miri, ignore = "copies 1 MiB several times: slow under Miri; `cargo test` runs it natively")]
    fn every_capture_holds_at_most_the_percent_of_free_memory_and_spills_the_rest() {
        let free = FOOTPRINT;
        let (engine, device, bases) = engine_with!(free, policy(0, 50));
        for dispatch in 0..3u8 {
            let snapshot = engine.snap(A).unwrap();
            let info = snapshot.info();
            assert_eq!(info.bytes, FOOTPRINT);
            assert!(info.device_bytes > 0 && info.device_bytes <= free / 2, "device bytes {}", info.device_bytes);
            assert!(device.device_bytes_held(A) <= free / 2, "headroom counts against the budget");
            for &base in &bases {
                device.write(base, &[0xF0 | dispatch; REGION]);
            }
            engine.restore(&snapshot).1.unwrap();
            for (i, &base) in bases.iter().enumerate() {
                assert_eq!(device.bytes(base, REGION), [i as u8; REGION]);
            }
        }
        assert!(device.state().device_peak_bytes <= free / 2);
        assert!(device.state().free_bytes_queries >= 3, "one query per capture");
        assert_eq!(device.state().violations, 0);
    }

    #[test]
    fn the_budget_follows_the_free_memory_from_one_capture_to_the_next() {
        let (engine, device, _bases) = engine_with!(8 * FOOTPRINT, policy(0, 50));
        assert_eq!(engine.snap(A).unwrap().info().device_bytes, FOOTPRINT, "room for everything");
        let idle = engine.retained_device_bytes(A);
        assert!(idle >= FOOTPRINT);
        // The program now holds most of the device: 1.5 footprints are left to share with kreplay's idle
        // storage, so the device reports 1.5 footprints less that storage. Counted back in, the budget is 3/4.
        device.state().free_bytes = 3 * FOOTPRINT / 2;
        let info = engine.snap(A).unwrap().info();
        assert!(info.device_bytes > 0 && info.device_bytes <= 3 * FOOTPRINT / 4, "device bytes {}", info.device_bytes);
        assert!(device.device_bytes_held(A) <= 3 * FOOTPRINT / 4, "the larger idle block was given back");
        assert_eq!(device.state().violations, 0);
    }

    #[test]
    fn a_failing_query_keeps_the_whole_snapshot_in_host_staging() {
        let (engine, device, bases) = engine_with!(4 * FOOTPRINT, policy(1 << 30, 50));
        device.state().fail_free_bytes = true;
        let snapshot = engine.snap(A).unwrap();
        let info = snapshot.info();
        assert_eq!((info.regions, info.bytes, info.device_bytes), (16, FOOTPRINT, 0));
        assert_eq!(device.state().device_allocs, 0);
        device.write(bases[3], &[0xEE; REGION]);
        engine.restore(&snapshot).1.unwrap();
        assert_eq!(device.bytes(bases[3], REGION), [3; REGION]);
        drop(snapshot);
        device.state().fail_free_bytes = false;
        assert_eq!(engine.snap(A).unwrap().info().device_bytes, FOOTPRINT, "the next capture queries again");
    }

    #[test]
    fn a_percent_above_100_is_refused() {
        static ENGINE: Engine<SimDevice> = Engine::new();
        assert!(ENGINE.set_policy(policy(0, 101)).is_err());
        assert!(ENGINE.set_policy(policy(0, 100)).is_ok());
    }

    #[test]
    fn the_percent_of_a_huge_free_amount_does_not_overflow() {
        assert_eq!(percent_of(usize::MAX, 100), usize::MAX);
        assert_eq!(percent_of(usize::MAX, 50), usize::MAX / 2);
        assert_eq!(percent_of(99, 1), 0);
    }
}
