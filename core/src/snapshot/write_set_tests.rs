//! Learned write sets on the simulated device: partial restores digest only what pass 1 wrote (and the hints),
//! the last full check catches a pass that wrote elsewhere, and without it the same kernel ends wrong.
//!
//! Small footprints (three regions of three 4 KiB blocks), so Miri runs every test in seconds.

use super::*;
use crate::engine::Engine;
use crate::policy::Policy;
use crate::sim::SimDevice;
use crate::window::{Opened, WindowOptions};

const A: Agent = Agent(0xA1);
const BLOCK: usize = 4096;
const REGION: usize = 3 * BLOCK;
const FOOTPRINT: usize = 3 * REGION;
const LEARNING: Policy =
    Policy { dirty_only: true, digest_block_bytes: BLOCK, learn_write_set: true, ..Policy::DEFAULT };
const FULL: RestoreOptions = RestoreOptions { full_check: true };
const PLAIN: RestoreOptions = RestoreOptions { full_check: false };

/// Three tracked regions of three blocks each, filled 1, 2, 3, and a module variable.
fn footprint(engine: &Engine<SimDevice>, device: &SimDevice) -> Vec<usize> {
    let bases: Vec<usize> = (0..3u8)
        .map(|i| {
            let base = device.alloc(A, REGION, i + 1);
            engine.record_alloc(base, REGION, 0).unwrap();
            base
        })
        .collect();
    device.add_variable(A, b"counter", 8, 9);
    bases
}

/// A pass of the kernel: writes `value` into the blocks `(region, block)`, a few bytes each.
fn pass(device: &SimDevice, bases: &[usize], blocks: &[(usize, usize)], value: u8) {
    for &(region, block) in blocks {
        device.write(bases[region] + block * BLOCK + 100, &[value; 16]);
    }
}

fn contents(device: &SimDevice, bases: &[usize]) -> Vec<Vec<u8>> {
    bases.iter().map(|&base| device.bytes(base, REGION)).collect()
}

/// Pass 1's blocks: the set the first restore learns.
const WRITES: [(usize, usize); 2] = [(0, 1), (2, 2)];
/// A block outside it.
const STRAY: (usize, usize) = (1, 0);

#[test]
fn later_passes_that_write_pass_ones_blocks_are_restored_exactly_by_partial_digests() {
    let (engine, device) = setup_v2!(LEARNING);
    let bases = footprint(engine, &device);
    let expected = contents(&device, &bases);
    let snapshot = engine.snap(A).unwrap();
    for restore in 1..=5u8 {
        pass(&device, &bases, &WRITES, 0xE0 + restore);
        let digested_before = device.state().digest_bytes;
        let options = if restore == 5 { FULL } else { PLAIN };
        let (report, status) = engine.restore_with(&snapshot, options);
        status.unwrap();
        assert!(contents(&device, &bases) == expected, "restore {restore} left the footprint changed");
        let digested = device.state().digest_bytes - digested_before;
        assert_eq!(report.digested_bytes, digested, "restore {restore}: the report counts what the device digested");
        // The first restore and the last (marked) digest everything; those between only pass 1's two blocks.
        let partial = restore != 1 && restore != 5;
        assert_eq!(report.partial, partial, "restore {restore}");
        assert_eq!(digested, if partial { 2 * BLOCK } else { FOOTPRINT }, "restore {restore}");
        assert_eq!(report.bytes, 2 * BLOCK + 8, "restore {restore}: the two changed blocks and the variable");
        assert_eq!(report.clean_bytes, digested - 2 * BLOCK);
        assert_eq!(report.write_set, Learned { blocks: 2, misses: 0, miss_pass: 0 }, "restore {restore}");
    }
    assert_eq!(snapshot.write_set_blocks(), 2);
    assert_eq!(device.state().violations, 0);
}

/// Pass `number` of a kernel that writes pass 1's blocks each pass and, in pass 3 only, `STRAY` too.
fn stray_pass(device: &SimDevice, bases: &[usize], number: u8) {
    pass(device, bases, &WRITES, 0xE0 + number);
    if number == 3 {
        pass(device, bases, &[STRAY], 0x5A);
    }
}

/// Runs five passes (four restores) of a kernel that also writes `STRAY` in pass 3, the fourth restore
/// marked as a full check or not; returns the last restore's report.
fn stray_in_pass_three(engine: &Engine<SimDevice>, device: &SimDevice, mark_last: bool) -> (RestoreReport, bool) {
    let bases = footprint(engine, device);
    let expected = contents(device, &bases);
    let snapshot = engine.snap(A).unwrap();
    let mut last = RestoreReport::default();
    for restore in 1..=4u8 {
        stray_pass(device, &bases, restore);
        let options = if restore == 4 && mark_last { FULL } else { PLAIN };
        let (report, status) = engine.restore_with(&snapshot, options);
        status.unwrap();
        if restore == 3 {
            // The partial restore did not see the stray block: pass 4 starts from a state that is not the
            // snapshot, which is what the last full check is there to catch.
            assert!(report.partial);
            assert!(contents(device, &bases) != expected, "the stray write survives a partial restore");
        }
        last = report;
    }
    (last, contents(device, &bases) == expected)
}

#[test]
fn a_pass_that_writes_outside_the_learned_set_is_caught_by_the_last_full_check() {
    let (engine, device) = setup_v2!(LEARNING);
    let (last, exact) = stray_in_pass_three(engine, &device, true);
    assert!(exact, "the full check restores the stray block");
    assert!(!last.partial);
    assert_eq!(last.digested_bytes, FOOTPRINT);
    // The first partial restore was the second, so pass 3 is the first that may have started wrong.
    assert_eq!(last.write_set, Learned { blocks: 3, misses: 1, miss_pass: 3 });
}

#[test]
fn control_without_the_last_full_check_the_stray_write_survives() {
    let (engine, device) = setup_v2!(LEARNING);
    let (last, exact) = stray_in_pass_three(engine, &device, false);
    assert!(!exact, "a partial last restore cannot see a block outside the set");
    assert!(last.partial);
    assert_eq!(last.write_set.misses, 0);
}

#[test]
fn with_the_flag_off_every_restore_checks_the_whole_footprint() {
    let (engine, device) = setup_v2!(LEARNING);
    engine.set_policy(Policy { learn_write_set: false, ..LEARNING }).unwrap();
    let (last, exact) = {
        let bases = footprint(engine, &device);
        let expected = contents(&device, &bases);
        let snapshot = engine.snap(A).unwrap();
        let mut last = RestoreReport::default();
        for restore in 1..=4u8 {
            stray_pass(&device, &bases, restore);
            let (report, status) = engine.restore(&snapshot);
            status.unwrap();
            assert!(!report.partial);
            assert_eq!(report.digested_bytes, FOOTPRINT);
            last = report;
        }
        (last, contents(&device, &bases) == expected)
    };
    assert!(exact);
    assert_eq!(last.write_set, Learned::default());
}

#[test]
fn a_window_of_known_passes_checks_its_last_restore_and_its_outcome_names_the_misses() {
    let (engine, device) = setup_v2!(LEARNING);
    let Opened::Window(window) =
        engine.window_open(A, WindowOptions { passes: 5, copy_timeout_ms: 0, dispatches: 0 }).unwrap()
    else {
        panic!("the window was declined");
    };
    // Not marked: the window knows restore 4 is its last.
    let (last, exact) = stray_in_pass_three(engine, &device, false);
    let outcome = engine.window_close(window).unwrap();
    assert!(exact, "the window's last restore is a full check");
    assert_eq!(last.write_set.misses, 1);
    assert_eq!((outcome.write_set_misses, outcome.write_set_miss_pass), (1, 3));
    assert_eq!(outcome.passes_run, 5);
    // Two full restores and two partial ones of pass 1's two blocks.
    assert_eq!(outcome.digested_bytes, 2 * FOOTPRINT + 2 * 2 * BLOCK);
    let line = format!("{}", crate::window::outcome::Line(&outcome));
    assert!(
        line.ends_with(&format!("digested={} write_set_misses=1 miss_pass=3 dispatches=1", 2 * FOOTPRINT + 4 * BLOCK)),
        "{line}"
    );
}

#[test]
fn a_hinted_block_is_digested_by_partial_restores_so_a_write_there_is_restored() {
    let (engine, device) = setup_v2!(LEARNING);
    let bases = footprint(engine, &device);
    let expected = contents(&device, &bases);
    let snapshot = engine.snap(A).unwrap();
    // The stray block, hinted by an address inside it; a hint outside every region adds nothing.
    let stray = bases[STRAY.0] + STRAY.1 * BLOCK;
    assert_eq!(engine.hint_writes(&snapshot, &[(stray + 10, 1), (8, 16)]), Ok(1));
    assert_eq!(engine.hint_writes(&snapshot, &[(usize::MAX, 2)]), Err(crate::Error::InvalidArgument));
    for restore in 1..=4u8 {
        stray_pass(&device, &bases, restore);
        let (report, status) = engine.restore(&snapshot);
        status.unwrap();
        assert!(contents(&device, &bases) == expected, "restore {restore}");
        if restore > 1 {
            assert_eq!(report.digested_bytes, 3 * BLOCK, "pass 1's two blocks and the hinted one");
        }
        assert_eq!(report.write_set.misses, 0);
    }
    // A whole-region hint (bytes 0) adds the region's other two blocks.
    assert_eq!(engine.hint_writes(&snapshot, &[(bases[STRAY.0] + 5, 0)]), Ok(2));
    assert_eq!(snapshot.write_set_blocks(), 5);
}
