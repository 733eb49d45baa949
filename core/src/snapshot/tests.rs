//! The engine's snapshot and restore, on the mock device: contents, validity rules, declines, tiers, digests.

use super::plan::align_after;
use super::*;
use crate::engine::Engine;
use crate::error::{DeclineReason, Error};
use crate::policy::Policy;
use crate::sim::SimDevice;
use crate::types::{GlobalFlags, PointerType};

/// Each test gets its own engine (a static: the tables are megabytes) and its own mock device.
macro_rules! setup {
    () => {{
        static ENGINE: Engine<SimDevice> = Engine::new();
        // The declines and skips these tests provoke are expected: keep them out of the test output.
        crate::log::set_sink(Some(|_, _| {}), crate::log::Level::Error);
        let device = SimDevice::default();
        ENGINE.configure(device.clone()).unwrap();
        ENGINE.set_tracking(true);
        (&ENGINE, device)
    }};
}

const A: Agent = Agent(0xA1);
const B: Agent = Agent(0xB2);

fn tracked(engine: &Engine<SimDevice>, device: &SimDevice, agent: Agent, size: usize, fill: u8) -> usize {
    let base = device.alloc(agent, size, fill);
    engine.record_alloc(base, size, 0).unwrap();
    base
}

#[test]
fn every_pass_is_restored_exactly_and_other_agents_are_left_alone() {
    let (engine, device) = setup!();
    let regions: Vec<(usize, usize)> = [1usize, 7, 4096, 100_000]
        .iter()
        .enumerate()
        .map(|(i, &n)| (tracked(engine, &device, A, n, i as u8), n))
        .collect();
    let other = tracked(engine, &device, B, 64, 0xBB);
    let variable = device.add_variable(A, b"counter", 8, 0x11);
    let before: Vec<Vec<u8>> = regions.iter().map(|&(base, n)| device.bytes(base, n)).collect();
    let snapshot = engine.snap(A).unwrap();
    let info = snapshot.info();
    assert_eq!((info.regions, info.module_variables), (4, 1));
    assert_eq!(info.bytes, 1 + 7 + 4096 + 100_000 + 8);
    assert!(snapshot.ranges.iter().all(|range| range.offset % STAGING_ALIGN == 0), "ranges are not aligned");
    for pass in 0..3u8 {
        for &(base, n) in &regions {
            device.write(base, &vec![0xF0 | pass; n]);
        }
        device.write(variable, &[pass; 8]);
        device.write(other, &[pass; 64]);
        let (report, status) = engine.restore(&snapshot);
        status.unwrap();
        assert_eq!(
            report,
            RestoreReport { restored: 5, skipped: 0, failed: 0, bytes: info.bytes, clean_bytes: 0, ..report }
        );
        for (&(base, n), expected) in regions.iter().zip(&before) {
            assert_eq!(&device.bytes(base, n), expected);
        }
        assert_eq!(device.bytes(variable, 8), [0x11; 8]);
        assert_eq!(device.bytes(other, 64), [pass; 64], "agent B's memory is not part of A's snapshot");
    }
    assert_eq!(device.state().violations, 0);
}

#[test]
fn untracked_kinds_are_neither_captured_nor_queried_when_executable() {
    let (engine, device) = setup!();
    let fine = device.alloc_kind(A, 64, 1, PointerType::Device, GlobalFlags::FINE_GRAINED);
    let kernarg = device.alloc_kind(A, 64, 1, PointerType::Device, GlobalFlags::COARSE_GRAINED | GlobalFlags::KERNARG);
    let host = device.alloc_kind(A, 64, 1, PointerType::Locked, GlobalFlags::COARSE_GRAINED);
    for base in [fine, kernarg, host] {
        engine.record_alloc(base, 64, 0).unwrap();
    }
    let queries = device.state().queries;
    let executable = device.alloc(A, 64, 1);
    engine.record_alloc(executable, 64, crate::types::AllocFlags::EXECUTABLE.bits()).unwrap();
    assert_eq!(device.state().queries, queries, "an executable allocation must not be queried");
    assert_eq!(engine.inventory_stats(A).unwrap().regions, 0);
    assert_eq!(engine.snap(A).unwrap().info().regions, 0);
}

#[test]
fn a_region_freed_after_the_snapshot_is_skipped_and_not_written() {
    let (engine, device) = setup!();
    let keep = tracked(engine, &device, A, 256, 1);
    let gone = tracked(engine, &device, A, 256, 2);
    let snapshot = engine.snap(A).unwrap();
    engine.record_free(gone).unwrap();
    device.free(gone);
    device.write(keep, &[9; 256]);
    let (report, status) = engine.restore(&snapshot);
    status.unwrap();
    assert_eq!((report.restored, report.skipped, report.failed), (1, 1, 0));
    assert_eq!(device.bytes(keep, 256), [1; 256]);
    assert_eq!(device.bytes(gone, 256), [0xDD; 256], "freed memory was written");
    assert_eq!(device.state().violations, 0);
}

#[test]
fn a_region_reallocated_at_the_same_address_is_not_overwritten() {
    let (engine, device) = setup!();
    let base = tracked(engine, &device, A, 128, 1);
    let snapshot = engine.snap(A).unwrap();
    // The runtime frees the block and hands the same address to the next allocation.
    engine.record_free(base).unwrap();
    engine.record_alloc(base, 128, 0).unwrap();
    device.write(base, &[7; 128]);
    let (report, status) = engine.restore(&snapshot);
    status.unwrap();
    assert_eq!(report.skipped, 1);
    assert_eq!(device.bytes(base, 128), [7; 128]);
}

#[test]
fn a_failed_restore_copy_is_reported_and_the_other_regions_are_still_written() {
    let (engine, device) = setup!();
    let bases: Vec<usize> = (0..4).map(|i| tracked(engine, &device, A, 32, i)).collect();
    let snapshot = engine.snap(A).unwrap();
    for &base in &bases {
        device.write(base, &[0xEE; 32]);
    }
    let copies = device.state().copies;
    device.state().fail_copy_at = copies + 2;
    let (report, status) = engine.restore(&snapshot);
    assert_eq!(status, Err(Error::PartialRestore));
    assert_eq!((report.restored, report.failed), (3, 1));
    let restored = bases.iter().enumerate().filter(|&(i, &b)| device.bytes(b, 32) == [i as u8; 32]).count();
    assert_eq!(restored, 3);
}

#[test]
fn declines_leave_nothing_behind() {
    let (engine, device) = setup!();
    let base = tracked(engine, &device, A, 4096, 3);
    device.add_variable(A, b"v", 16, 4);
    // A copy failure during capture.
    let copies = device.state().copies;
    device.state().fail_copy_at = copies + 2;
    assert_eq!(engine.snap(A).err(), Some(DeclineReason::CopyFailed));
    assert_eq!(engine.retained_staging_bytes(A), 0, "a declined snapshot keeps no staging");
    // A module scan failure.
    device.state().fail_scan = true;
    assert_eq!(engine.snap(A).err(), Some(DeclineReason::ModuleScanIncomplete));
    device.state().fail_scan = false;
    // The host budget.
    engine.set_policy(Policy { max_snapshot_bytes: 1024, ..Policy::default() }).unwrap();
    assert_eq!(engine.snap(A).err(), Some(DeclineReason::HostBudget));
    engine.set_policy(Policy::default()).unwrap();
    // Tracking off.
    engine.set_tracking(false);
    assert_eq!(engine.snap(A).err(), Some(DeclineReason::NotConfigured));
    engine.set_tracking(true);
    engine.record_alloc(base, 4096, 0).unwrap();
    assert_eq!(device.bytes(base, 4096), [3; 4096], "device memory changed");
    assert!(engine.snap(A).is_ok());
}

#[test]
fn an_unconfigured_engine_declines_and_remembers_what_it_could_not_classify() {
    static ENGINE: Engine<SimDevice> = Engine::new();
    ENGINE.set_tracking(true);
    assert_eq!(ENGINE.snap(A).err(), Some(DeclineReason::NotConfigured));
    assert_eq!(ENGINE.record_alloc(0x1000, 64, 0), Err(Error::NotConfigured));
    let device = SimDevice::default();
    ENGINE.configure(device).unwrap();
    assert_eq!(ENGINE.snap(A).err(), Some(DeclineReason::InventoryOverflow), "an unclassified allocation is live");
    ENGINE.record_free(0x1000).unwrap();
    assert!(ENGINE.snap(A).is_ok());
}

#[test]
fn a_finalized_engine_declines_and_records_nothing() {
    let (engine, device) = setup!();
    let base = device.alloc(A, 64, 1);
    engine.finalize();
    assert_eq!(engine.record_alloc(base, 64, 0), Err(Error::Finalized));
    assert_eq!(engine.record_free(base), Err(Error::Finalized));
    assert_eq!(engine.snap(A).err(), Some(DeclineReason::Finalized));
    assert_eq!(engine.staging_acquire(A, 16).err(), Some(Error::Finalized));
}

#[test]
fn captured_ranges_start_at_aligned_offsets_and_do_not_overlap() {
    let mut end = 0;
    let mut previous_end = 0;
    for size in [1usize, 7, 64, 65, 3, 4096, 1] {
        let (offset, next) = align_after(end, size).unwrap();
        assert_eq!(offset % STAGING_ALIGN, 0);
        assert!(offset >= previous_end && next == offset + size);
        previous_end = next;
        end = next;
    }
    assert_eq!(align_after(usize::MAX - 10, 1), None);
}

#[test]
fn module_variable_skip_rules() {
    let (engine, device) = setup!();
    device.add_variable(A, b"__hip_cuid_0123", 1, 0);
    device.add_variable(A, b"__hip_cuid_wide", 2, 0);
    device.add_variable(A, b"empty", 0, 0);
    device.add_variable(A, b"table", 300, 0);
    let info = engine.snap(A).unwrap().info();
    assert_eq!(info.module_variables, 2);
    assert_eq!(info.bytes, 302);
}

#[test]
fn pinned_staging_is_locked_once_reused_and_unlocked_before_unmapping() {
    let (engine, device) = setup!();
    engine.set_policy(Policy { pin_staging: true, ..Policy::default() }).unwrap();
    tracked(engine, &device, A, 1 << 20, 5);
    for _ in 0..4 {
        let snapshot = engine.snap(A).unwrap();
        drop(snapshot);
    }
    assert_eq!(device.state().locks, 1, "the lock is paid on the first dispatch only");
    engine.staging_trim(A);
    let state = device.state();
    assert_eq!((state.unlocks, state.locked.len(), state.violations), (1, 0, 0));
}

#[test]
fn retained_staging_is_bounded_by_the_last_snapshot() {
    let (engine, device) = setup!();
    let big = tracked(engine, &device, A, 4 << 20, 1);
    drop(engine.snap(A).unwrap());
    let retained = engine.retained_staging_bytes(A);
    assert!(retained >= 4 << 20);
    engine.record_free(big).unwrap();
    tracked(engine, &device, A, 64, 2);
    drop(engine.snap(A).unwrap());
    assert!(engine.retained_staging_bytes(A) < 1 << 20, "the big block this snapshot did not take was kept");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "threads waiting on each other with back-off sleeps: minutes under Miri; `cargo test` runs it natively"
)]
fn a_concurrent_free_never_sees_a_write_after_it_returned() {
    let (engine, device) = setup!();
    let bases: Vec<usize> = (0..64).map(|i| tracked(engine, &device, A, 4096, i)).collect();
    let snapshot = engine.snap(A).unwrap();
    std::thread::scope(|scope| {
        let device = device.clone();
        scope.spawn(move || {
            for &base in bases.iter().step_by(2) {
                engine.record_free(base).unwrap();
                // From here on the memory belongs to the runtime again: any write is a violation.
                device.free(base);
                std::thread::yield_now();
            }
        });
        for _ in 0..if cfg!(miri) { 3 } else { 50 } {
            let (report, status) = engine.restore(&snapshot);
            status.unwrap();
            assert_eq!(report.restored + report.skipped, 64);
        }
    });
    assert_eq!(device.state().violations, 0);
}
