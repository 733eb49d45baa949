//! The fence and the window state machine, on the mock device.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::*;
use crate::engine::Engine;
use crate::error::{DeclineReason, Error};
use crate::policy::Policy;
use crate::sim::SimDevice;
use crate::types::{GlobalFlags, PointerType};

/// The tests share one engine (each engine is tens of megabytes of `.bss`, and a test binary must stay below
/// 2 GiB of it), one at a time: they change the policy and arm the fence. Each returns the engine to the default
/// policy with no window open.
static ENGINE: Engine<SimDevice> = Engine::new();
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

macro_rules! setup {
    () => {{
        let serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // The declines these tests provoke are expected: keep them out of the test output.
        crate::log::set_sink(Some(|_, _| {}), crate::log::Level::Error);
        let device = SimDevice::default();
        ENGINE.configure(device.clone()).unwrap();
        // Off and on again: nothing tracked or untracked is left from the previous test.
        ENGINE.set_tracking(false);
        ENGINE.set_tracking(true);
        ENGINE.set_policy(Policy::default()).unwrap();
        (&ENGINE, device, serial)
    }};
}

const A: Agent = Agent(0xA1);
const B: Agent = Agent(0xB2);
/// An agent no other test snapshots, so no rate has been measured on it.
const FRESH: Agent = Agent(0xC3);

fn options(passes: u32, copy_timeout_ms: u32) -> WindowOptions {
    WindowOptions { passes, copy_timeout_ms, dispatches: 0 }
}

fn open(engine: &Engine<SimDevice>, agent: Agent) -> WindowHandle {
    match engine.window_open(agent, options(3, 0)).unwrap() {
        Opened::Window(handle) => handle,
        Opened::Declined(outcome) => panic!("declined: {outcome:?}"),
    }
}

fn declined(engine: &Engine<SimDevice>, agent: Agent, options: WindowOptions) -> Outcome {
    match engine.window_open(agent, options).unwrap() {
        Opened::Window(handle) => panic!("opened {handle:?}"),
        Opened::Declined(outcome) => outcome,
    }
}

#[test]
fn before_any_window_a_copy_is_not_counted_and_its_end_does_nothing() {
    static UNARMED: Engine<SimDevice> = Engine::new();
    let engine = &UNARMED;
    let token = engine.copy_begin(&[A, B]).unwrap();
    assert_eq!(token, UNCOUNTED_TOKEN);
    assert_eq!(engine.copies_in_flight(A), 0);
    engine.copy_end(token);
    assert_eq!(engine.copy_begin(&[]), Err(Error::InvalidArgument));
}

#[test]
fn a_copy_in_flight_holds_the_window_until_its_timeout_then_later_copies_go_through() {
    let (engine, _device, _serial) = setup!();
    engine.window_close(open(engine, A)).unwrap();
    let token = engine.copy_begin(&[A, B, A]).unwrap();
    assert_ne!(token, UNCOUNTED_TOKEN);
    assert_eq!((engine.copies_in_flight(A), engine.copies_in_flight(B)), (1, 1), "duplicates count once");
    let start = Instant::now();
    let outcome = declined(engine, A, options(2, 30));
    assert!(start.elapsed() >= Duration::from_millis(30), "the open did not wait for its timeout");
    assert_eq!((outcome.reason, outcome.copies_waited), (DeclineReason::CopiesInFlight, 1));
    assert!(!engine.window_is_open(A), "a decline leaves nothing fenced");
    // The fence is open again: another copy of A goes straight through.
    let second = engine.copy_begin(&[A]).unwrap();
    assert_eq!(engine.copies_in_flight(A), 2);
    engine.copy_end(second);
    engine.copy_end(token);
    assert_eq!((engine.copies_in_flight(A), engine.copies_in_flight(B)), (0, 0));
    engine.window_close(open(engine, A)).unwrap();
}

#[test]
#[cfg_attr(miri, ignore = "threads waiting on each other with back-off sleeps: slow under Miri")]
fn a_copy_ended_while_the_open_waits_lets_the_window_open() {
    let (engine, _device, _serial) = setup!();
    engine.window_close(open(engine, A)).unwrap();
    let token = engine.copy_begin(&[A]).unwrap();
    let ender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        engine.copy_end(token);
    });
    let handle = match engine.window_open(A, options(1, 5000)).unwrap() {
        Opened::Window(handle) => handle,
        Opened::Declined(outcome) => panic!("declined: {outcome:?}"),
    };
    ender.join().unwrap();
    let outcome = engine.window_close(handle).unwrap();
    assert_eq!((outcome.reason, outcome.copies_waited), (DeclineReason::None, 1));
}

#[test]
#[cfg_attr(miri, ignore = "threads waiting on each other with back-off sleeps: slow under Miri")]
fn a_copy_begun_during_a_window_waits_and_runs_after_close() {
    let (engine, _device, _serial) = setup!();
    let handle = open(engine, A);
    let began = Arc::new(AtomicBool::new(false));
    let copier = {
        let began = began.clone();
        std::thread::spawn(move || {
            let token = engine.copy_begin(&[B, A]).unwrap();
            began.store(true, Ordering::SeqCst);
            engine.copy_end(token);
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(!began.load(Ordering::SeqCst), "the copy went ahead inside the window");
    assert_eq!(engine.copies_in_flight(B), 0, "a waiting copy holds no other agent");
    engine.window_close(handle).unwrap();
    copier.join().unwrap();
    assert!(began.load(Ordering::SeqCst));
    assert_eq!((engine.copies_in_flight(A), engine.copies_in_flight(B)), (0, 0));
}

#[test]
fn the_window_thread_own_copies_never_wait() {
    let (engine, _device, _serial) = setup!();
    let handle = open(engine, A);
    let token = engine.copy_begin(&[A]).unwrap();
    assert_eq!(engine.copies_in_flight(A), 1);
    engine.copy_end(token);
    engine.window_close(handle).unwrap();
}

#[test]
fn a_nested_window_is_declined_without_waiting_and_two_agents_from_one_thread_are_allowed() {
    let (engine, _device, _serial) = setup!();
    let a = open(engine, A);
    let start = Instant::now();
    let nested = declined(engine, A, options(2, 5000));
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!((nested.reason, nested.passes_requested), (DeclineReason::WindowNested, 2));
    let b = open(engine, B);
    assert!(engine.window_is_open(A) && engine.window_is_open(B));
    assert_eq!(engine.window_close(b).unwrap().agent, B);
    assert!(engine.window_is_open(A), "closing B's window leaves A's open");
    assert_eq!(engine.window_close(a).unwrap().reason, DeclineReason::None);
}

#[test]
fn handles_are_checked_a_double_close_or_made_up_handle_is_invalid() {
    let (engine, _device, _serial) = setup!();
    let handle = open(engine, A);
    engine.window_close(handle).unwrap();
    assert_eq!(engine.window_close(handle), Err(Error::InvalidArgument));
    for made_up in [0, 1, u64::MAX, handle.0 + (1 << 8), 0xdead_beef] {
        assert_eq!(engine.window_close(WindowHandle(made_up)), Err(Error::InvalidArgument), "{made_up:#x}");
    }
    // The next window of the agent gets a new handle; the old one still does not close it.
    let next = open(engine, A);
    assert_ne!(next, handle);
    assert_eq!(engine.window_close(handle), Err(Error::InvalidArgument));
    assert!(engine.window_is_open(A));
    engine.window_close(next).unwrap();
}

#[test]
fn an_open_ended_window_is_checked_per_pass_and_never_declined_once_open() {
    // Its warnings are asserted by c-tests/unit/window.c, where no other test replaces the log sink meanwhile.
    let (engine, device, _serial) = setup!();
    let base = device.alloc(A, 4096, 1);
    engine.record_alloc(base, 4096, 0).unwrap();
    // Passes 0: not known in advance. Admitted on its first pass.
    let Opened::Window(handle) = engine.window_open(A, options(0, 0)).unwrap() else { panic!("declined") };
    let snapshot = engine.snap(A).unwrap();
    engine.restore(&snapshot).1.unwrap();
    // Limits lowered while it runs: each pass is checked against the policy of the moment, and the window stays
    // open above max_window_ns.
    engine.set_policy(Policy { warn_window_ns: 1, max_window_ns: 1, ..Policy::default() }).unwrap();
    for _ in 0..4 {
        engine.restore(&snapshot).1.unwrap();
    }
    assert!(engine.window_is_open(A));
    let outcome = engine.window_close(handle).unwrap();
    drop(snapshot);
    engine.set_policy(Policy::default()).unwrap();
    assert_eq!((outcome.reason, outcome.passes_requested, outcome.passes_run), (DeclineReason::None, 0, 6));
    assert!(outcome.projected_ns >= outcome.snapshot_ns + outcome.restore_ns, "the last pass's projection");
    let line = format!("{}", outcome::Line(&outcome));
    assert!(line.contains(" passes=6/open "), "{line}");
}

#[test]
fn a_token_ended_twice_or_never_issued_is_ignored() {
    let (engine, _device, _serial) = setup!();
    engine.window_close(open(engine, A)).unwrap();
    let token = engine.copy_begin(&[A]).unwrap();
    let other = engine.copy_begin(&[A]).unwrap();
    engine.copy_end(token);
    engine.copy_end(token);
    engine.copy_end(token ^ (1 << 40));
    engine.copy_end(u64::MAX);
    assert_eq!(engine.copies_in_flight(A), 1, "only the real end counted");
    engine.copy_end(other);
    assert_eq!(engine.copies_in_flight(A), 0);
    assert_eq!(engine.windows.fence.tokens_in_use(), 0);
}

#[test]
fn the_snapshot_and_restores_of_the_window_are_accounted_in_its_outcome() {
    let (engine, device, _serial) = setup!();
    let base = device.alloc(A, 4096, 1);
    engine.record_alloc(base, 4096, 0).unwrap();
    let handle = open(engine, A);
    let snapshot = engine.snap(A).unwrap();
    for _ in 0..2 {
        engine.restore(&snapshot).1.unwrap();
    }
    // A snapshot of another agent is not this window's.
    drop(engine.snap(B));
    engine.window_note_reentry(A);
    let outcome = engine.window_close(handle).unwrap();
    drop(snapshot);
    assert_eq!(outcome.reason, DeclineReason::None);
    assert_eq!((outcome.passes_requested, outcome.passes_run), (3, 3));
    assert_eq!((outcome.footprint_bytes, outcome.footprint_regions), (4096, 1));
    assert_eq!(outcome.bytes_moved, 3 * 4096);
    assert!(outcome.reentry_observed);
    assert!(outcome.projected_ns > 0);
    // A restore after close is nobody's.
    assert!(!engine.window_is_open(A));
}

#[test]
fn per_dispatch_snapshots_in_a_window_over_a_range_are_not_its_passes() {
    // A graph replayed node by node: the window's snapshot first, then one snapshot per kernel node with restores
    // of its own, then the window's snapshot restored once before the program's own launch of the graph.
    let (engine, device, _serial) = setup!();
    let base = device.alloc(A, 4096, 1);
    engine.record_alloc(base, 4096, 0).unwrap();
    let handle = match engine.window_open(A, WindowOptions { passes: 2, copy_timeout_ms: 0, dispatches: 3 }).unwrap() {
        Opened::Window(handle) => handle,
        Opened::Declined(outcome) => panic!("declined: {outcome:?}"),
    };
    let whole = engine.snap(A).unwrap();
    for _ in 0..2 {
        let node = engine.snap(A).unwrap();
        assert_ne!(node.info().id, whole.info().id);
        for _ in 0..3 {
            engine.restore(&node).1.unwrap();
        }
    }
    engine.restore(&whole).1.unwrap();
    let outcome = engine.window_close(handle).unwrap();
    drop(whole);
    assert_eq!(outcome.reason, DeclineReason::None);
    assert_eq!((outcome.passes_requested, outcome.passes_run, outcome.dispatches), (2, 2, 3));
    assert_eq!(outcome.bytes_moved, 2 * 4096, "the window's snapshot and its one restore");
}

#[test]
fn a_failed_snapshot_leaves_the_window_open_with_its_reason() {
    let (engine, _device, _serial) = setup!();
    engine.set_policy(Policy { max_snapshot_bytes: 1, ..Policy::default() }).unwrap();
    let base = _device.alloc(A, 64, 1);
    engine.record_alloc(base, 64, 0).unwrap();
    let handle = open(engine, A);
    assert!(engine.snap(A).is_err());
    assert!(engine.window_is_open(A));
    let outcome = engine.window_close(handle).unwrap();
    assert_eq!((outcome.reason, outcome.passes_run, outcome.footprint_bytes), (DeclineReason::HostBudget, 1, 0));
}

#[test]
fn admission_declines_above_max_window_ns_and_the_projection_follows_the_defaults() {
    let (engine, device, _serial) = setup!();
    let base = device.alloc(FRESH, 4 << 20, 0);
    engine.record_alloc(base, 4 << 20, 0).unwrap();
    engine.set_policy(Policy { max_window_ns: 1, ..Policy::default() }).unwrap();
    let outcome = declined(engine, FRESH, options(5, 0));
    assert_eq!(outcome.reason, DeclineReason::OverCost);
    // 5 full copies of 4 MiB at the host tier's default rate.
    let expected = 5 * (4u64 << 20) * 1000 / admission::DEFAULT_HOST_COPY_BYTES_PER_US;
    assert_eq!(outcome.projected_ns, expected);
    assert!(!engine.window_is_open(FRESH));
    engine.set_policy(Policy::default()).unwrap();
    engine.window_close(open(engine, FRESH)).unwrap();
}

#[test]
fn untracked_memory_is_counted_by_kind_and_declines_when_the_policy_asks() {
    let (engine, device, _serial) = setup!();
    let host = device.alloc_kind(A, 8192, 0, PointerType::Locked, GlobalFlags::FINE_GRAINED);
    let fine = device.alloc_kind(A, 100, 0, PointerType::Device, GlobalFlags::FINE_GRAINED);
    let kernarg = device.alloc_kind(A, 64, 0, PointerType::Device, GlobalFlags::KERNARG | GlobalFlags::FINE_GRAINED);
    for (ptr, size) in [(host, 8192), (fine, 100), (kernarg, 64)] {
        engine.record_alloc(ptr, size, 0).unwrap();
    }
    engine.record_alloc(0x7777_0000, 32, crate::types::AllocFlags::EXECUTABLE.bits()).unwrap();
    let stats = engine.untracked_stats(A).unwrap();
    assert_eq!(stats.count, [1, 1, 0, 1, 1, 0]);
    assert_eq!(stats.bytes, [100, 8192, 0, 64, 32, 0]);
    assert_eq!(engine.untracked_stats(B).unwrap().count, [0, 0, 0, 0, 1, 0], "executable: owner unknown");
    engine.set_policy(Policy { untracked_decline_mask: 1 << UntrackedKind::Host as u32, ..Policy::default() }).unwrap();
    let outcome = declined(engine, A, options(2, 0));
    assert_eq!((outcome.reason, outcome.untracked.bytes[1]), (DeclineReason::UntrackedMemory, 8192));
    assert_eq!(engine.record_free(host), Err(Error::NotFound), "a free of untracked memory is still NOT_FOUND");
    assert_eq!(engine.untracked_stats(A).unwrap().count[1], 0);
    engine.window_close(open(engine, A)).unwrap();
    assert_eq!(
        engine.set_policy(Policy { untracked_decline_mask: 1 << 6, ..Policy::default() }),
        Err(Error::InvalidArgument)
    );
    engine.set_policy(Policy::default()).unwrap();
}

#[test]
fn the_outcome_line_has_every_key_in_order() {
    let mut outcome = Outcome {
        agent: A,
        passes_requested: 5,
        passes_run: 5,
        footprint_bytes: 4096,
        bytes_moved: 20480,
        snapshot_ns: 12_345,
        projected_ns: 2_000_000,
        dispatches: 1,
        ..Outcome::default()
    };
    outcome.untracked.count[1] = 2;
    outcome.untracked.bytes[1] = 8192;
    let line = format!("{}", outcome::Line(&outcome));
    assert_eq!(
        line,
        "kreplay window agent=0xa1 reason=none passes=5/5 footprint=4096 moved=20480 clean=0 snapshot_us=12 \
         restore_us=0 projected_us=2000 copies_waited=0 \
         untracked=fine:0/0,host:2/8192,managed:0/0,kernarg:0/0,exec:0/0,vmem:0/0 reentry=0 digested=0 \
         write_set_misses=0 miss_pass=0 dispatches=1"
    );
}

#[test]
fn measured_rates_replace_the_defaults_in_the_projection() {
    let mut rates = Rates::UNMEASURED;
    let policy = Policy::default();
    let default = rates.project(1_000_000, 2, &policy, false, false);
    assert_eq!(default, 2 * 1_000_000 * 1000 / admission::DEFAULT_HOST_COPY_BYTES_PER_US);
    rates.record(&admission::Measured { copied: 1_000_000, copy_ns: 1_000, ..Default::default() });
    assert_eq!(rates.project(1_000_000, 2, &policy, false, false), 2_000);
    // Dirty-only restores that wrote a tenth: restores project a tenth of the copies plus the digest.
    let dirty = Policy { dirty_only: true, ..Policy::default() };
    rates.record(&admission::Measured {
        copied: 100_000,
        copy_ns: 100,
        digested: 1_000_000,
        digest_ns: 500,
        written: 100_000,
        clean: 900_000,
        ..Default::default()
    });
    // Copies now run at 600,000 bytes per 600 ns, digests at 1,000,000 per 500 ns, and a tenth is written: the
    // snapshot (a re-capture) and the restore each copy 100,000 bytes (100 ns) and digest all (500 ns).
    let projected = rates.project(1_000_000, 2, &dirty, true, true);
    assert_eq!(projected, 2 * (100 + 500), "dirty-only snapshot and restore both move the measured share");
    assert!(projected < rates.project(1_000_000, 2, &Policy::default(), false, false) + 1_000, "{projected}");
}

#[test]
fn a_learned_write_set_projects_the_restores_between_first_and_last_at_the_measured_share() {
    let mut rates = Rates::UNMEASURED;
    let dirty = Policy { dirty_only: true, ..Policy::default() };
    let learning = Policy { learn_write_set: true, ..dirty };
    // A full dirty-only restore: a tenth written, all digested.
    let full = admission::Measured {
        copied: 100_000,
        copy_ns: 100,
        digested: 1_000_000,
        digest_ns: 1_000,
        written: 100_000,
        clean: 900_000,
        ..Default::default()
    };
    rates.record(&full);
    let before = rates.project(1_000_000, 10, &learning, false, true);
    assert_eq!(before, rates.project(1_000_000, 10, &dirty, false, true), "nothing learned yet: all restores full");
    // A partial restore that digested a tenth of the footprint.
    rates.record(&admission::Measured { digested: 100_000, digest_ns: 100, partial_of: 1_000_000, ..full });
    let after = rates.project(1_000_000, 10, &learning, false, true);
    let without = rates.project(1_000_000, 10, &dirty, false, true);
    assert!(after < without, "learned {after} ns, not learned {without} ns");
    // Two passes: one restore, the first, which is full either way.
    assert_eq!(rates.project(1_000_000, 2, &learning, false, true), rates.project(1_000_000, 2, &dirty, false, true));
}

#[test]
#[cfg_attr(miri, ignore = "threads waiting on each other with back-off sleeps: minutes under Miri")]
fn copies_and_windows_on_several_threads_keep_the_counts_exact() {
    use std::sync::atomic::AtomicU32;
    let (engine, _device, _serial) = setup!();
    engine.window_close(open(engine, A)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Copies between their begin and end, per agent: what a window must never see above zero.
    let active = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let done = Arc::new(AtomicU32::new(0));
    let copiers: Vec<_> = (0..3)
        .map(|i| {
            let (stop, active, done) = (stop.clone(), active.clone(), done.clone());
            std::thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let agents: &[Agent] = match (i + n) % 3 {
                        0 => &[A],
                        1 => &[B],
                        _ => &[B, A],
                    };
                    let token = engine.copy_begin(agents).unwrap();
                    let named = || (0..2).filter(|&slot| agents.contains(&[A, B][slot]));
                    named().for_each(|slot| {
                        active[slot].fetch_add(1, Ordering::SeqCst);
                    });
                    std::thread::yield_now();
                    named().for_each(|slot| {
                        active[slot].fetch_sub(1, Ordering::SeqCst);
                    });
                    engine.copy_end(token);
                    n += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut opened, mut round) = (0u32, 0usize);
    while (opened < 100 || done.load(Ordering::Relaxed) < 1000) && Instant::now() < deadline {
        let (agent, slot) = if round % 2 == 0 { (A, 0) } else { (B, 1) };
        round += 1;
        if let Opened::Window(handle) = engine.window_open(agent, options(2, 200)).unwrap() {
            std::thread::yield_now();
            assert_eq!(active[slot].load(Ordering::SeqCst), 0, "another thread's copy ran inside the window");
            opened += 1;
            engine.window_close(handle).unwrap();
        }
        // Room for the copiers between windows: back to back, windows on A and B in turn can starve a copy
        // naming both for the whole deadline on a loaded machine (seen with 2 cores and another build running).
        std::thread::sleep(Duration::from_micros(100));
    }
    stop.store(true, Ordering::Relaxed);
    for copier in copiers {
        copier.join().unwrap();
    }
    assert!(opened >= 100 && done.load(Ordering::Relaxed) >= 1000, "windows {opened}, copies {done:?}");
    assert_eq!((engine.copies_in_flight(A), engine.copies_in_flight(B)), (0, 0));
    assert_eq!(engine.windows.fence.tokens_in_use(), 0);
}
