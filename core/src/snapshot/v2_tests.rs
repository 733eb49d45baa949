//! Version-2 behaviour of capture and restore on the simulated device: batches, the device tier, dirty-only
//! restore and re-capture, the module-variable cache, and the faults of each.

use super::*;
use crate::engine::Engine;
use crate::error::{DeclineReason, Error};
use crate::policy::Policy;
use crate::sim::SimDevice;

pub(super) const A: Agent = Agent(0xA1);

pub(super) fn tracked(engine: &Engine<SimDevice>, device: &SimDevice, size: usize, fill: u8) -> usize {
    let base = device.alloc(A, size, fill);
    engine.record_alloc(base, size, 0).unwrap();
    base
}

/// A small xorshift generator: the tests' random writes are reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
#[cfg_attr(miri, ignore = "minutes under Miri even at 40 ranges; the failing-batch test runs the same transfer code")]
fn a_plan_larger_than_one_chunk_and_one_batch_is_split_and_every_range_comes_back() {
    let (engine, device) = setup_v2!(Policy::default());
    // 20,000 ranges: two chunks (at most 16,384 ranges each), so at least two batches each way.
    let count = if cfg!(miri) { 40 } else { 20_000 };
    let bases: Vec<usize> = (0..count).map(|i| tracked(engine, &device, 64, i as u8)).collect();
    let snapshot = engine.snap(A).unwrap();
    let batches = device.state().batches;
    if !cfg!(miri) {
        assert!(batches >= 2, "20,000 copies must take more than one batch (took {batches})");
    }
    for &base in &bases {
        device.write(base, &[0xEE; 64]);
    }
    let (report, status) = engine.restore(&snapshot);
    status.unwrap();
    assert_eq!((report.restored, report.failed, report.bytes), (count, 0, count * 64));
    assert_eq!(device.state().batches - batches, batches, "the restore is batched like the capture");
    for (i, &base) in bases.iter().enumerate() {
        assert_eq!(device.bytes(base, 64), [i as u8; 64]);
    }
    assert_eq!(device.state().copies, 0, "no copy went one by one");
    assert_eq!(device.state().violations, 0);
}

#[test]
fn a_failing_batch_is_redone_copy_by_copy_and_exactly_the_failed_copies_are_counted() {
    let (engine, device) = setup_v2!(Policy::default());
    let bases: Vec<usize> = (0..40).map(|i| tracked(engine, &device, 512, i as u8)).collect();
    let snapshot = engine.snap(A).unwrap();
    for &base in &bases {
        device.write(base, &[0xEE; 512]);
    }
    {
        let mut state = device.state();
        state.fail_batch_at = state.batches + 1;
        // Of the copies redone one by one, the 30th fails (the failed batch did only the first half, so the
        // 30th region is still scribbled afterwards).
        state.fail_copy_at = state.copies + 30;
    }
    let (report, status) = engine.restore(&snapshot);
    assert_eq!(status, Err(Error::PartialRestore));
    assert_eq!((report.restored, report.failed, report.skipped), (39, 1, 0));
    assert_eq!(report.bytes, 39 * 512);
    let wrong = bases.iter().enumerate().filter(|&(i, &b)| device.bytes(b, 512) != [i as u8; 512]).count();
    assert_eq!(wrong, 1);
    assert_eq!(device.state().violations, 0);
}

#[test]
fn version_one_ops_get_version_one_behaviour() {
    let (engine, device) = setup_v2!(Policy { device_budget_bytes: 1 << 20, dirty_only: true, ..Policy::default() });
    {
        let mut state = device.state();
        state.offer_copy_batch = false;
        state.offer_device = false;
        state.offer_digest = false;
    }
    let bases: Vec<usize> = (0..5).map(|i| tracked(engine, &device, 4096, i as u8)).collect();
    let snapshot = engine.snap(A).unwrap();
    assert_eq!(snapshot.info().device_bytes, 0);
    let (report, status) = engine.restore(&snapshot);
    status.unwrap();
    assert_eq!(report.clean_bytes, 0);
    let state = device.state();
    assert_eq!((state.batches, state.device_allocs, state.digests), (0, 0, 0));
    assert_eq!(state.copies, 10, "one copy per region each way");
    drop(state);
    drop(bases);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "threads waiting on each other with back-off sleeps: minutes under Miri; `cargo test` runs it natively"
)]
fn batches_racing_frees_never_write_freed_memory() {
    let (engine, device) = setup_v2!(Policy::default());
    let bases: Vec<usize> = (0..300).map(|i| tracked(engine, &device, 4096, i as u8)).collect();
    let snapshot = engine.snap(A).unwrap();
    std::thread::scope(|scope| {
        let device = device.clone();
        scope.spawn(move || {
            for &base in bases.iter().step_by(3) {
                engine.record_free(base).unwrap();
                device.free(base);
                std::thread::yield_now();
            }
        });
        for _ in 0..if cfg!(miri) { 2 } else { 30 } {
            let (report, status) = engine.restore(&snapshot);
            status.unwrap();
            assert_eq!(report.restored + report.skipped, 300);
        }
    });
    assert_eq!(device.state().violations, 0);
}

#[test]
fn the_whole_footprint_fits_on_the_device_and_comes_back_from_there() {
    let (engine, device) = setup_v2!(Policy { device_budget_bytes: 1 << 30, ..Policy::default() });
    let size = if cfg!(miri) { 1000 } else { 100_000 };
    let bases: Vec<usize> = (0..8).map(|i| tracked(engine, &device, size, i as u8)).collect();
    device.add_variable(A, b"v", 64, 9);
    let snapshot = engine.snap(A).unwrap();
    let info = snapshot.info();
    assert_eq!(info.device_bytes, info.bytes);
    assert!(device.device_bytes_held(A) >= info.bytes);
    for &base in &bases {
        device.write(base, &vec![0xEE; size]);
    }
    let (report, status) = engine.restore(&snapshot);
    status.unwrap();
    assert_eq!(report.restored, 9);
    for (i, &base) in bases.iter().enumerate() {
        assert_eq!(device.bytes(base, size), vec![i as u8; size]);
    }
    drop(snapshot);
    assert!(engine.retained_device_bytes(A) >= info.bytes, "device storage is retained for the next dispatch");
    engine.device_trim(A);
    assert_eq!((engine.retained_device_bytes(A), device.device_bytes_held(A)), (0, 0));
    assert_eq!(device.state().violations, 0);
}

#[test]
#[cfg_attr(miri, ignore = "copies 1 MiB six times: slow under Miri; `cargo test` runs it natively")]
fn half_the_footprint_as_budget_spills_the_rest_and_never_exceeds_it() {
    let footprint = 16 * 65_536;
    let budget = footprint / 2;
    let (engine, device) = setup_v2!(Policy { device_budget_bytes: budget, ..Policy::default() });
    let bases: Vec<usize> = (0..16).map(|i| tracked(engine, &device, 65_536, i as u8)).collect();
    for dispatch in 0..3u8 {
        let snapshot = engine.snap(A).unwrap();
        let info = snapshot.info();
        assert!(info.device_bytes > 0 && info.device_bytes <= budget, "device bytes {}", info.device_bytes);
        assert!(info.device_bytes < info.bytes, "the rest spills to the host");
        for &base in &bases {
            device.write(base, &[dispatch; 65_536]);
        }
        engine.restore(&snapshot).1.unwrap();
        for (i, &base) in bases.iter().enumerate() {
            assert_eq!(device.bytes(base, 65_536), vec![i as u8; 65_536]);
        }
        assert!(device.device_bytes_held(A) <= budget, "headroom counts against the budget");
    }
    assert!(device.state().device_peak_bytes <= budget);
    assert_eq!(device.state().violations, 0);
}

#[test]
fn a_refused_device_alloc_at_any_position_falls_back_to_the_host() {
    let (engine, device) = setup_v2!(Policy { device_budget_bytes: 1 << 30, ..Policy::default() });
    let bases: Vec<usize> = (0..4).map(|i| tracked(engine, &device, 8192, i as u8)).collect();
    for k in 1..=3 {
        engine.device_trim(A);
        {
            let mut state = device.state();
            state.fail_device_alloc_at = state.device_allocs + k;
        }
        // Dispatches until the armed allocation has been tried: every one succeeds, some on the host.
        for _ in 0..k {
            engine.device_trim(A);
            let snapshot = engine.snap(A).unwrap();
            for &base in &bases {
                device.write(base, &[0x55; 8192]);
            }
            engine.restore(&snapshot).1.unwrap();
            for (i, &base) in bases.iter().enumerate() {
                assert_eq!(device.bytes(base, 8192), vec![i as u8; 8192]);
            }
        }
    }
    assert_eq!(device.state().violations, 0);
}

#[test]
#[cfg_attr(miri, ignore = "copies 4 MiB: slow under Miri; `cargo test` runs it natively")]
fn a_smaller_footprint_gives_back_the_device_storage_it_does_not_take() {
    let (engine, device) = setup_v2!(Policy { device_budget_bytes: 1 << 30, ..Policy::default() });
    let big = tracked(engine, &device, 4 << 20, 1);
    drop(engine.snap(A).unwrap());
    assert!(device.device_bytes_held(A) >= 4 << 20);
    engine.record_free(big).unwrap();
    device.free(big);
    tracked(engine, &device, 4096, 2);
    let snapshot = engine.snap(A).unwrap();
    assert!(device.device_bytes_held(A) < 1 << 20, "held {}", device.device_bytes_held(A));
    drop(snapshot);
    engine.device_trim_all();
    assert_eq!(device.device_bytes_held(A), 0);
}

#[test]
fn after_finalize_nothing_is_allocated_and_nothing_crashes() {
    let (engine, device) = setup_v2!(Policy { device_budget_bytes: 1 << 30, dirty_only: true, ..Policy::default() });
    tracked(engine, &device, 4096, 1);
    let snapshot = engine.snap(A).unwrap();
    engine.finalize();
    let allocs = device.state().device_allocs;
    assert_eq!(engine.snap(A).err(), Some(DeclineReason::Finalized));
    assert_eq!(engine.restore(&snapshot).1, Err(Error::Finalized));
    engine.device_trim_all();
    assert_eq!(engine.retained_device_bytes(A), 0);
    drop(snapshot);
    assert_eq!(device.state().device_allocs, allocs);
    assert_eq!(device.state().violations, 0);
}

/// Random writes between passes and between dispatches, some regions reallocated in between: after every
/// dirty-only restore, device memory equals what was captured, byte for byte.
fn dirty_policy(budget: usize) -> Policy {
    Policy { device_budget_bytes: budget, dirty_only: true, digest_block_bytes: 4096, ..Policy::default() }
}

fn dirty_model(engine: &Engine<SimDevice>, device: SimDevice, seed: u64) {
    let mut rng = Rng(seed);
    // Under Miri the digests run interpreted, byte by byte: a smaller footprint of the same shapes.
    let sizes = if cfg!(miri) {
        [4096usize, 5000, 8192, 4097, 9001, 1, 4096 * 3]
    } else {
        [4096usize, 10_000, 33_000, 65_536, 70_001, 1, 8192 * 3]
    };
    let mut bases: Vec<usize> = sizes.iter().enumerate().map(|(i, &n)| tracked(engine, &device, n, i as u8)).collect();
    let variable = device.add_variable(A, b"counter", 24, 7);
    let mut saw_partial_capture = false;
    let mut saw_clean = false;
    for dispatch in 0..if cfg!(miri) { 2 } else { 6 } {
        // The kernel's last pass of the previous dispatch, and an allocation replaced at the same address.
        for _ in 0..3 {
            let i = rng.below(sizes.len());
            let at = rng.below(sizes[i]);
            device.write(bases[i] + at, &[rng.next() as u8]);
        }
        if dispatch % 2 == 1 {
            let i = rng.below(sizes.len());
            engine.record_free(bases[i]).unwrap();
            device.free(bases[i]);
            let again = device
                .try_alloc(Some(bases[i]), A, sizes[i], crate::types::PointerType::Device, GlobalFlagsCoarse::get())
                .unwrap();
            device.write(again, &vec![0x40 | dispatch as u8; sizes[i]]);
            engine.record_alloc(again, sizes[i], 0).unwrap();
            bases[i] = again;
        }
        let expected: Vec<Vec<u8>> = bases.iter().zip(sizes).map(|(&b, n)| device.bytes(b, n)).collect();
        let expected_variable = device.bytes(variable, 24);
        let snapshot = engine.snap(A).unwrap();
        let info = snapshot.info();
        saw_partial_capture |= info.copied_bytes < info.bytes;
        for _pass in 0..4 {
            for _ in 0..rng.below(6) {
                let i = rng.below(sizes.len());
                let at = rng.below(sizes[i]);
                let len = (rng.below(300) + 1).min(sizes[i] - at);
                device.write(bases[i] + at, &vec![rng.next() as u8; len]);
            }
            device.write(variable, &[rng.next() as u8; 24]);
            let (report, status) = engine.restore(&snapshot);
            status.unwrap();
            saw_clean |= report.clean_bytes > 0;
            for ((&base, n), expected) in bases.iter().zip(sizes).zip(&expected) {
                assert_eq!(&device.bytes(base, n), expected, "dispatch {dispatch}: region at {base:#x} differs");
            }
            assert_eq!(device.bytes(variable, 24), expected_variable);
        }
    }
    assert!(saw_clean, "no restore skipped a clean block");
    assert!(saw_partial_capture, "no re-capture reused unchanged blocks");
    assert_eq!(device.state().violations, 0);
}

/// The coarse-grained pool flag, for `try_alloc`.
struct GlobalFlagsCoarse;
impl GlobalFlagsCoarse {
    fn get() -> crate::types::GlobalFlags {
        crate::types::GlobalFlags::COARSE_GRAINED
    }
}

#[test]
fn dirty_restores_equal_full_restores_on_the_host_tier() {
    let (engine, device) = setup_v2!(dirty_policy(0));
    dirty_model(engine, device, 0x1234_5678);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "digests hundreds of kilobytes per pass byte by byte: minutes under Miri; the host-tier model test runs the same code"
)]
fn dirty_restores_equal_full_restores_on_the_device_tier() {
    let (engine, device) = setup_v2!(dirty_policy(1 << 30));
    dirty_model(engine, device, 0x9E37_79B9);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "digests hundreds of kilobytes per pass byte by byte: minutes under Miri; the host-tier model test runs the same code"
)]
fn dirty_restores_equal_full_restores_with_a_spill() {
    let (engine, device) = setup_v2!(dirty_policy(100_000));
    dirty_model(engine, device, 0xC0FF_EE11);
}

#[test]
fn a_digest_that_cannot_tell_contents_apart_still_captures_a_reallocated_region_whole() {
    let (engine, device) = setup_v2!(Policy { dirty_only: true, digest_block_bytes: 4096, ..Policy::default() });
    device.state().constant_digest = true;
    let base = tracked(engine, &device, 8192, 1);
    drop(engine.snap(A).unwrap());
    // Same address, same size, new contents, new generation.
    engine.record_free(base).unwrap();
    device.free(base);
    let again = device
        .try_alloc(Some(base), A, 8192, crate::types::PointerType::Device, crate::types::GlobalFlags::COARSE_GRAINED)
        .unwrap();
    device.write(again, &[2; 8192]);
    engine.record_alloc(again, 8192, 0).unwrap();
    let snapshot = engine.snap(A).unwrap();
    assert_eq!(snapshot.info().copied_bytes, 8192, "a new generation is copied whole, whatever its digests");
    device.state().constant_digest = false;
    device.write(again, &[3; 8192]);
    engine.restore(&snapshot).1.unwrap();
    assert_eq!(device.bytes(again, 8192), vec![2; 8192]);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "digests 60 KiB 16 times over byte by byte: minutes under Miri; `cargo test` runs it natively"
)]
fn a_digest_refused_at_any_position_falls_back_to_full_copies() {
    let (engine, device) = setup_v2!(Policy { dirty_only: true, digest_block_bytes: 4096, ..Policy::default() });
    let bases: Vec<usize> = (0..3).map(|i| tracked(engine, &device, 20_000, i as u8)).collect();
    for k in 1..=4 {
        {
            let mut state = device.state();
            state.fail_digest_at = state.digests + k;
        }
        for _ in 0..2 {
            let snapshot = engine.snap(A).expect("a failed digest never declines");
            for _pass in 0..2 {
                for &base in &bases {
                    device.write(base + 5000, &[0xAB; 100]);
                }
                let (report, status) = engine.restore(&snapshot);
                status.expect("a failed digest is never a partial restore");
                assert_eq!(report.restored, 3);
                for (i, &base) in bases.iter().enumerate() {
                    assert_eq!(device.bytes(base, 20_000), vec![i as u8; 20_000]);
                }
            }
        }
    }
    assert_eq!(device.state().violations, 0);
}

#[test]
fn the_module_scan_is_cached_until_modules_change_and_a_failed_scan_is_not_cached() {
    let (engine, device) = setup_v2!(Policy { cache_module_scan: true, ..Policy::default() });
    let variables: Vec<usize> = (0..50).map(|i| device.add_variable(A, b"v", 16, i as u8)).collect();
    let info = engine.snap(A).unwrap().info();
    assert_eq!(info.module_variables, 50);
    let scans = device.state().scans;
    let snapshot = engine.snap(A).unwrap();
    assert_eq!(device.state().scans, scans, "the second capture made a scan");
    device.write(variables[3], &[0xFF; 16]);
    engine.restore(&snapshot).1.unwrap();
    assert_eq!(device.bytes(variables[3], 16), [3; 16], "contents are still captured at every snap");
    drop(snapshot);
    engine.modules_changed();
    device.add_variable(A, b"late", 16, 0x77);
    assert_eq!(engine.snap(A).unwrap().info().module_variables, 51);
    assert_eq!(device.state().scans, scans + 1);
    // A scan that fails is not cached: the next capture scans again.
    engine.modules_changed();
    {
        let mut state = device.state();
        state.fail_scan_at_variable = state.scanned_variables + 10;
    }
    assert_eq!(engine.snap(A).err(), Some(DeclineReason::ModuleScanIncomplete));
    assert_eq!(engine.snap(A).unwrap().info().module_variables, 51);
    assert_eq!(device.state().scans, scans + 3);
}

#[test]
fn a_recorded_size_beyond_the_allocation_is_clamped_to_it() {
    let (engine, device) = setup_v2!(Policy::default());
    let base = device.alloc(A, 4096, 1);
    engine.record_alloc(base, 1 << 20, 0).unwrap();
    assert_eq!(engine.inventory_stats(A).unwrap().bytes, 4096);
    let snapshot = engine.snap(A).unwrap();
    assert_eq!(snapshot.info().bytes, 4096);
    engine.restore(&snapshot).1.unwrap();
    assert_eq!(device.state().violations, 0, "nothing past the allocation was touched");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "threads waiting on each other with back-off sleeps: minutes under Miri; `cargo test` runs it natively"
)]
fn frees_and_allocations_of_other_agents_do_not_wait_for_a_long_copy_and_a_free_of_the_region_does() {
    let (engine, device) = setup_v2!(Policy::default());
    let copied = tracked(engine, &device, 4096, 1);
    let other = device.alloc(Agent(0xB2), 4096, 2);
    engine.record_alloc(other, 4096, 0).unwrap();
    let snapshot = engine.snap(A).unwrap();
    let copy_ns: u64 = if cfg!(miri) { 50_000_000 } else { 300_000_000 };
    device.state().sleep_in_copy_ns = copy_ns;
    std::thread::scope(|scope| {
        let started = std::time::Instant::now();
        let restore = scope.spawn(|| engine.restore(&snapshot).1);
        std::thread::sleep(std::time::Duration::from_millis(if cfg!(miri) { 5 } else { 50 }));
        let start = std::time::Instant::now();
        engine.record_free(other).unwrap();
        let third = device.alloc(Agent(0xC3), 4096, 3);
        engine.record_alloc(third, 4096, 0).unwrap();
        let waited = start.elapsed();
        assert!(!restore.is_finished(), "the restore finished before the free was tried");
        assert!(waited < std::time::Duration::from_millis(if cfg!(miri) { 25 } else { 100 }), "waited {waited:?}");
        // A free of the region being copied waits for the copy.
        engine.record_free(copied).unwrap();
        assert!(started.elapsed() >= std::time::Duration::from_nanos(copy_ns), "the free did not wait");
        restore.join().unwrap().unwrap();
    });
    assert_eq!(device.state().violations, 0);
}

#[test]
fn a_decline_after_a_dirty_only_dispatch_keeps_no_storage() {
    // The small region fits the device budget, the large one spills to host staging.
    let (small, large) = if cfg!(miri) { (8192, 64 << 10) } else { (8192, 2 << 20) };
    let budget = if cfg!(miri) { 32 << 10 } else { 1 << 20 };
    let (engine, device) = setup_v2!(Policy { dirty_only: true, device_budget_bytes: budget, ..Policy::default() });
    tracked(engine, &device, small, 1);
    tracked(engine, &device, large, 2);
    drop(engine.snap(A).unwrap());
    assert!(engine.retained_staging_bytes(A) > 0 && engine.retained_device_bytes(A) > 0, "kept for re-capture");
    // An allocation whose owner is unknown declines every agent.
    engine.record_vmem_map_unknown(0x7000_0000, 4096).unwrap();
    assert_eq!(engine.snap(A).err(), Some(DeclineReason::InventoryOverflow));
    assert_eq!((engine.retained_staging_bytes(A), engine.retained_device_bytes(A)), (0, 0));
    assert_eq!(device.device_bytes_held(A), 0);
}

#[test]
fn adjacent_module_variables_are_copied_as_one_span_and_counted_one_by_one() {
    let (engine, device) = setup_v2!(Policy { cache_module_scan: true, ..Policy::default() });
    device.state().offer_copy_batch = false;
    // 100 variables back to back in one code object (the simulated device places them 256 bytes apart), and one
    // reported twice over a part of another (aliases overlap).
    let variables: Vec<usize> = (0..100).map(|i| device.add_variable(A, b"v", 256, i as u8)).collect();
    add_alias(&device, variables[7] + 64, 300);
    let region = tracked(engine, &device, 4096, 0xAA);
    let copies = device.state().copies;
    let snapshot = engine.snap(A).unwrap();
    assert_eq!(device.state().copies - copies, 2, "one copy for the region, one for the 101 variables");
    assert_eq!((snapshot.info().regions, snapshot.info().module_variables), (1, 101));
    assert_eq!(snapshot.info().bytes, 4096 + 100 * 256);
    for &v in &variables {
        device.write(v, &[0xEE; 256]);
    }
    device.write(region, &[0xEE; 16]);
    let copies = device.state().copies;
    let (report, status) = engine.restore(&snapshot);
    status.unwrap();
    assert_eq!(device.state().copies - copies, 2);
    assert_eq!((report.restored, report.failed, report.bytes), (102, 0, 4096 + 100 * 256));
    for (i, &v) in variables.iter().enumerate() {
        assert_eq!(device.bytes(v, 256), vec![i as u8; 256]);
    }
    assert_eq!(device.bytes(region, 16), [0xAA; 16]);
    let state = device.state();
    assert_eq!((state.violations, state.refused_copies), (0, 0));
}

#[test]
fn a_span_the_device_refuses_is_copied_variable_by_variable_and_is_not_merged_again() {
    let (engine, device) = setup_v2!(Policy { cache_module_scan: true, ..Policy::default() });
    device.state().offer_copy_batch = false;
    // Two code objects whose variables lie back to back: one span for the engine, two allocations for the device.
    let mut variables: Vec<usize> = (0..3).map(|i| device.add_variable(A, b"a", 512, i)).collect();
    device.new_code_object();
    variables.extend((3..5).map(|i| device.add_variable(A, b"b", 512, i)));
    let snapshot = engine.snap(A).expect("a refused span is no reason to decline");
    assert_eq!(device.state().refused_copies, 1, "the span was tried as one copy first");
    assert_eq!(snapshot.info().module_variables, 5);
    for &v in &variables {
        device.write(v, &[0xEE; 512]);
    }
    let copies = device.state().copies;
    let (report, status) = engine.restore(&snapshot);
    status.unwrap();
    assert_eq!(device.state().refused_copies, 1, "the restore copies the variables one by one from the start");
    assert_eq!(device.state().copies - copies, 5);
    assert_eq!((report.restored, report.failed), (5, 0));
    for (i, &v) in variables.iter().enumerate() {
        assert_eq!(device.bytes(v, 512), vec![i as u8; 512]);
    }
    drop(snapshot);
    // The cache got the cut list back: the next capture does not try the span again.
    let scans = device.state().scans;
    let snapshot = engine.snap(A).unwrap();
    {
        let state = device.state();
        assert_eq!((state.scans, state.refused_copies), (scans, 1));
    }
    engine.restore(&snapshot).1.unwrap();
    assert_eq!(device.state().violations, 0);
}

/// Reports one more module variable of `size` bytes at `address`, over existing ones (an alias: no storage of its
/// own).
fn add_alias(device: &SimDevice, address: usize, size: usize) {
    let alias = crate::sim::Variable { agent: A, name: b"alias".to_vec(), address, size, is_constant: false };
    device.state().variables.push(alias);
}

/// Makes every `copy` whose device side is one of `targets` (address, bytes) fail.
fn fail_device_copies(device: &SimDevice, targets: Vec<(usize, usize)>) {
    let hook_device = device.clone();
    device.set_hook(Some(Box::new(move |op| {
        if let crate::sim::SimOp::Copy { dst, src, bytes } = *op {
            if targets.contains(&(dst, bytes)) || targets.contains(&(src, bytes)) {
                let mut state = hook_device.state();
                state.fail_copy_at = state.copies + 1;
            }
        }
    })));
}

#[test]
fn a_span_whose_copy_fails_counts_exactly_the_variables_that_fail() {
    let (engine, device) = setup_v2!(Policy::default());
    device.state().offer_copy_batch = false;
    let variables: Vec<usize> = (0..4).map(|i| device.add_variable(A, b"v", 256, i)).collect();
    let snapshot = engine.snap(A).unwrap();
    // The span's copy fails, then so does the copy of its second variable alone.
    let span = (variables[0], 4 * 256);
    let failing = variables[1];
    fail_device_copies(&device, vec![span, (failing, 256)]);
    for &v in &variables {
        device.write(v, &[0xEE; 256]);
    }
    let (report, status) = engine.restore(&snapshot);
    assert_eq!(status, Err(Error::PartialRestore));
    assert_eq!((report.restored, report.failed), (3, 1));
    for (i, &v) in variables.iter().enumerate() {
        let expected = if v == failing { 0xEE } else { i as u8 };
        assert_eq!(device.bytes(v, 256), vec![expected; 256]);
    }
    // Only the span's copy fails: every variable is restored, one by one.
    fail_device_copies(&device, vec![span]);
    let (report, status) = engine.restore(&snapshot);
    status.unwrap();
    assert_eq!((report.restored, report.failed), (4, 0));
    device.set_hook(None);
    assert_eq!(device.bytes(failing, 256), vec![1; 256]);
    assert_eq!(device.state().violations, 0);
}

#[test]
fn a_capture_declines_only_when_a_variable_of_a_failed_span_cannot_be_copied_alone() {
    let (engine, device) = setup_v2!(Policy::default());
    device.state().offer_copy_batch = false;
    let variables: Vec<usize> = (0..3).map(|i| device.add_variable(A, b"v", 256, i)).collect();
    let span = (variables[0], 3 * 256);
    // The span's copy fails; each variable alone copies: the capture is complete.
    fail_device_copies(&device, vec![span]);
    let snapshot = engine.snap(A).expect("the span's variables were copied one by one");
    assert_eq!(snapshot.info().module_variables, 3);
    drop(snapshot);
    // The span's copy fails and so does its last variable's: declined, and nothing is kept.
    fail_device_copies(&device, vec![span, (variables[2], 256)]);
    assert_eq!(engine.snap(A).err(), Some(DeclineReason::CopyFailed));
    device.set_hook(None);
    assert_eq!(engine.retained_staging_bytes(A), 0);
    assert_eq!(device.state().violations, 0);
}

#[test]
fn a_restore_counts_the_bytes_of_failed_overlapping_variables_once() {
    let (engine, device) = setup_v2!(Policy::default());
    device.state().offer_copy_batch = false;
    let variables: Vec<usize> = (0..2).map(|i| device.add_variable(A, b"v", 256, i)).collect();
    // An alias over the second half of the first variable and the first half of the second: one span of 512.
    add_alias(&device, variables[0] + 128, 256);
    let snapshot = engine.snap(A).unwrap();
    assert_eq!((snapshot.info().module_variables, snapshot.info().bytes), (3, 512));
    // The span fails, then the first variable (bytes 0..256) and the alias (128..384) alone: 384 bytes lost.
    fail_device_copies(&device, vec![(variables[0], 512), (variables[0], 256), (variables[0] + 128, 256)]);
    let (report, status) = engine.restore(&snapshot);
    assert_eq!(status, Err(Error::PartialRestore));
    assert_eq!((report.restored, report.failed, report.bytes), (1, 2, 512 - 384));
    device.set_hook(None);
    assert_eq!(device.state().violations, 0);
}

#[test]
fn snapshots_alive_at_once_share_the_cached_module_list() {
    let (engine, device) = setup_v2!(Policy { cache_module_scan: true, ..Policy::default() });
    device.state().offer_copy_batch = false;
    let variables: Vec<usize> = (0..3).map(|i| device.add_variable(A, b"a", 512, i)).collect();
    device.new_code_object();
    let last = device.add_variable(A, b"b", 512, 3);
    let first = engine.snap(A).unwrap();
    let scans = device.state().scans;
    // The first capture cut the refused span and cached the cut list while it is still alive: the second capture
    // neither scans nor tries the span again.
    let second = engine.snap(A).unwrap();
    {
        let state = device.state();
        assert_eq!((state.scans, state.refused_copies), (scans, 1));
    }
    let third = engine.snap(A).unwrap();
    assert_eq!(device.state().scans, scans);
    for &v in variables.iter().chain([&last]) {
        device.write(v, &[0xEE; 512]);
    }
    for snapshot in [&first, &second, &third] {
        let (report, status) = engine.restore(snapshot);
        status.unwrap();
        assert_eq!((report.restored, report.failed), (4, 0));
    }
    // A holder keeps its list after modules_changed; its restore scans once to check that its code objects are
    // still loaded (module liveness) and caches that scan, so the next capture does not scan again.
    engine.modules_changed();
    drop(first);
    let (report, status) = engine.restore(&second);
    status.unwrap();
    assert_eq!((report.restored, report.skipped), (4, 0));
    drop((second, third));
    engine.snap(A).unwrap();
    let state = device.state();
    assert_eq!((state.scans, state.refused_copies, state.violations), (scans + 1, 2, 0));
}

#[test]
fn a_variable_whose_code_object_was_unloaded_is_skipped_and_the_others_are_written() {
    let (engine, device) = setup_v2!(Policy::default());
    let kept = device.add_variable(A, b"kept", 64, 1);
    device.new_code_object();
    let gone_module = device.code_object();
    let gone = device.add_variable(A, b"gone", 64, 2);
    let snapshot = engine.snap(A).unwrap();
    device.write(kept, &[0xEE; 64]);
    assert_eq!(device.unload_code_object(gone_module), 1);
    engine.modules_changed();
    let (report, status) = engine.restore(&snapshot);
    status.unwrap();
    assert_eq!((report.restored, report.skipped, report.failed, report.bytes), (1, 1, 0, 64));
    assert_eq!(device.bytes(kept, 64), [1; 64]);
    assert_eq!(device.bytes(gone, 64), [crate::sim::FREED_FILL; 64]);
    assert_eq!(device.state().violations, 0);
}
