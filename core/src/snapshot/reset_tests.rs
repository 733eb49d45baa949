//! An agent's device context reset (`Engine::agent_reset`) on the simulated device: live snapshots are never
//! restored, their device storage is forgotten without `device_free`, page-locking is forgotten without
//! `host_unlock`, and snapshots taken afterwards work.

use super::v2_tests::{A, tracked};
use super::*;
use crate::engine::Engine;
use crate::policy::Policy;
use crate::sim::SimDevice;

const ON_DEVICE: Policy = Policy { device_budget_bytes: 1 << 30, ..Policy::DEFAULT };

/// Captures one region on the device tier, overwrites it, and optionally resets the agent before restoring.
fn restore_after(reset: bool) -> (RestoreReport, Vec<u8>) {
    let (engine, device) = if reset { setup_v2!(ON_DEVICE) } else { setup_v2!(ON_DEVICE) };
    let base = tracked(engine, &device, 4096, 0x11);
    let snapshot = engine.snap(A).unwrap();
    assert_eq!(snapshot.info().device_bytes, 4096, "held on the device tier");
    device.write(base, &[0xEE; 4096]);
    if reset {
        engine.agent_reset(A);
    }
    let (report, status) = engine.restore(&snapshot);
    status.unwrap();
    let frees = device.state().device_frees;
    drop(snapshot);
    if reset {
        assert_eq!(device.state().device_frees, frees, "storage of the old context is never freed");
        assert_eq!(engine.retained_device_bytes(A), 0, "nor kept");
    }
    assert_eq!(device.state().violations, 0);
    (report, device.bytes(base, 16))
}

#[test]
fn a_restore_after_a_reset_skips_everything_and_writes_nothing() {
    let (report, bytes) = restore_after(true);
    assert_eq!((report.restored, report.skipped, report.bytes), (0, 1, 0));
    assert_eq!(bytes, [0xEE; 16]);
}

#[test]
fn without_a_reset_the_same_restore_writes() {
    let (report, bytes) = restore_after(false);
    assert_eq!((report.restored, report.skipped, report.bytes), (1, 0, 4096));
    assert_eq!(bytes, [0x11; 16]);
}

#[test]
fn a_snapshot_after_a_reset_takes_new_storage_and_restores() {
    let (engine, device) = setup_v2!(ON_DEVICE);
    let base = tracked(engine, &device, 4096, 0x22);
    drop(engine.snap(A).unwrap());
    assert!(engine.retained_device_bytes(A) > 0, "idle device storage is retained");
    engine.agent_reset(A);
    assert_eq!(engine.retained_device_bytes(A), 0, "forgotten");
    let allocs = device.state().device_allocs;
    let snapshot = engine.snap(A).unwrap();
    assert_eq!(device.state().device_allocs, allocs + 1, "new storage in the new context");
    device.write(base, &[0xEE; 4096]);
    let (report, status) = engine.restore(&snapshot);
    status.unwrap();
    assert_eq!((report.restored, report.skipped), (1, 0));
    assert_eq!(device.bytes(base, 16), [0x22; 16]);
    assert_eq!(device.state().device_frees, 0, "the forgotten block was never freed");
}

#[test]
fn a_retained_dirty_only_stash_is_forgotten_without_device_free() {
    let (engine, device) = setup_v2!(Policy { dirty_only: true, ..ON_DEVICE });
    tracked(engine, &device, 4096, 0x33);
    drop(engine.snap(A).unwrap());
    assert!(engine.retained_device_bytes(A) > 0);
    engine.agent_reset(A);
    assert_eq!(engine.retained_device_bytes(A), 0);
    assert_eq!(device.state().device_frees, 0);
    let snapshot = engine.snap(A).unwrap();
    assert_eq!(snapshot.info().copied_bytes, 4096, "nothing of the old context is reused");
}

#[test]
fn page_locking_is_forgotten_without_unlocking_and_redone_on_next_use() {
    let (engine, device) = setup_v2!(Policy { pin_staging: true, device_budget_bytes: 0, ..Policy::DEFAULT });
    tracked(engine, &device, 64 << 10, 0x44);
    drop(engine.snap(A).unwrap());
    assert_eq!(device.state().locks, 1);
    engine.agent_reset(A);
    assert_eq!(device.state().unlocks, 0, "the registration went with the context");
    drop(engine.snap(A).unwrap());
    assert_eq!(device.state().locks, 2, "locked again in the new context");
    assert_eq!(device.state().unlocks, 0);
    // Control: without a reset the retained block stays locked and is not locked again.
    drop(engine.snap(A).unwrap());
    assert_eq!(device.state().locks, 2);
}
