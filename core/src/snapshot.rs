//! Snapshot (device to host) and restore (host to device).
//!
//! A snapshot captures, for one agent, every tracked region and every module-scope variable the host's
//! module scan reports, into one block of retained staging (regions packed at cache-line alignment, so tiny
//! variables cost neither a mapping nor a page each, and page-locking is one call). It is complete or it is
//! declined: any failure releases what was taken and leaves device memory untouched.
//!
//! Restore re-validates each tracked region under the inventory's read lock (same base, same generation, at
//! least the captured size) and copies while still holding it, so a free that the host recorded before the
//! real free can never be followed by a write into that memory.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::alloc::Layout;

use crate::clock;
use crate::engine::Engine;
use crate::error::{DeclineReason, Error, Result};
use crate::inventory::{CAPACITY_SETTING, GatherError, RegionKind};
use crate::log::Level;
use crate::ops::DeviceOps;
use crate::staging::Lease;
use crate::types::{Agent, DisplayName, ModuleVariable};

/// Captured regions start at multiples of this many bytes in the staging block.
pub const STAGING_ALIGN: usize = 64;
/// Module variables above this size are not captured (their writes leak across passes, with a warning).
pub const MAX_MODULE_VARIABLE_BYTES: usize = 1 << 30;
/// New staging blocks get this much headroom (1/8), so a footprint that grows a little reuses its block.
const HEADROOM_DIVISOR: usize = 8;
/// Skipped regions logged one by one per restore; the rest are summed up in one line.
const SKIP_LOG_LIMIT: usize = 8;

/// Where a captured range came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Source {
    /// A tracked allocation or mapping, valid only while it keeps this generation.
    Tracked { kind: RegionKind, generation: u64 },
    /// A module-scope variable: part of a loaded executable, always written back.
    ModuleVariable,
}

#[derive(Copy, Clone, Debug)]
struct Entry {
    address: usize,
    size: usize,
    offset: usize,
    source: Source,
}

/// Sizes and phase timings of a capture.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// The agent captured.
    pub agent: Agent,
    /// Tracked allocations and mappings captured.
    pub regions: usize,
    /// Module-scope variables captured.
    pub module_variables: usize,
    /// Bytes captured, both kinds.
    pub bytes: usize,
    /// Time to list the agent's tracked regions.
    pub inventory_ns: u64,
    /// Time of the module scan.
    pub module_scan_ns: u64,
    /// Time to take (and, the first time, map and page-lock) staging.
    pub staging_ns: u64,
    /// Time of the device-to-host copies.
    pub copy_ns: u64,
}

/// What a restore did. Module variables count like regions.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Regions and module variables written back.
    pub restored: usize,
    /// Tracked regions freed, shrunk or reallocated since the snapshot: not written.
    pub skipped: usize,
    /// Copies that failed.
    pub failed: usize,
    /// Bytes written back.
    pub bytes: usize,
}

/// A complete capture of one agent's device memory. Dropping it returns its staging to the agent's pool.
pub struct Snapshot<'e, O: DeviceOps> {
    engine: &'e Engine<O>,
    storage: Option<Lease>,
    entries: Vec<Entry>,
    info: SnapshotInfo,
}

impl<O: DeviceOps> Snapshot<'_, O> {
    /// Sizes and timings of the capture.
    pub fn info(&self) -> SnapshotInfo {
        self.info
    }

    fn staging(&self) -> *mut u8 {
        self.storage.as_ref().map_or(core::ptr::null_mut(), |lease| lease.data.as_ptr())
    }
}

impl<O: DeviceOps> Drop for Snapshot<'_, O> {
    fn drop(&mut self) {
        if let Some(lease) = self.storage.take() {
            if self.engine.pools.release(lease.agent, lease.data, lease.capacity, lease.loan).is_err() {
                crate::log!(Level::Error, "agent {:#x}: a snapshot's staging was not lent by its pool", lease.agent.0);
            }
        }
    }
}

/// Allocates a box without aborting when the allocator fails (stable Rust has no `Box::try_new`).
fn try_box<T>(value: T) -> Option<Box<T>> {
    let layout = Layout::new::<T>();
    if layout.size() == 0 {
        return Some(Box::new(value));
    }
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { alloc::alloc::alloc(layout) }.cast::<T>();
    if ptr.is_null() {
        return None;
    }
    // SAFETY: 1. `ptr` is a fresh allocation of `T`'s layout from the global allocator, so writing a `T` there is
    // valid; 2. `Box::from_raw` then owns memory allocated exactly as `Box` itself would allocate it.
    unsafe {
        ptr.write(value);
        Some(Box::from_raw(ptr))
    }
}

impl<O: DeviceOps> Engine<O> {
    /// Captures `agent`'s tracked regions and module-scope variables, or declines. Either way, once capture
    /// ends, the agent's idle staging that this snapshot did not take is unmapped, so host memory held between
    /// dispatches is bounded by the last snapshot's footprint.
    pub fn snap(&self, agent: Agent) -> core::result::Result<Box<Snapshot<'_, O>>, DeclineReason> {
        if self.is_finalized() {
            return Err(DeclineReason::Finalized);
        }
        let result = self.capture(agent);
        self.staging_trim(agent);
        if let Err(reason) = result {
            crate::log!(
                Level::Warning,
                "agent {:#x}: snapshot declined: {}; the dispatch runs once, unreplayed",
                agent.0,
                reason.describe()
            );
        }
        result
    }

    fn capture(&self, agent: Agent) -> core::result::Result<Box<Snapshot<'_, O>>, DeclineReason> {
        let ops = self.ops().map_err(|_| DeclineReason::NotConfigured)?;
        if !self.tracking_enabled() {
            crate::log!(Level::Warning, "agent {:#x}: tracking is off, so allocations are not recorded", agent.0);
            return Err(DeclineReason::NotConfigured);
        }
        let policy = self.policy();
        let mut info = SnapshotInfo { agent, ..SnapshotInfo::default() };

        // Inventory.
        let start = clock::now_ns();
        let mut entries: Vec<Entry> = Vec::new();
        let listed = self.inventory.gather_with(agent, &mut entries, |region| Entry {
            address: region.base,
            size: region.size,
            offset: 0,
            source: Source::Tracked { kind: region.kind, generation: region.generation },
        });
        listed.map_err(|error| match error {
            GatherError::Overflow => {
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: an allocation or mapping of this agent, or of an unknown owner, could not be \
                     recorded and may be live (the inventory was full, its pointer query failed, or its owner is \
                     unknown); if the inventory was full, raise {}",
                    agent.0,
                    CAPACITY_SETTING
                );
                DeclineReason::InventoryOverflow
            }
            GatherError::OutOfMemory => DeclineReason::MetadataMemory,
        })?;
        let mut total = 0usize;
        for entry in &mut entries {
            (entry.offset, total) = place(total, entry.size).ok_or(DeclineReason::HostBudget)?;
        }
        info.inventory_ns = clock::since(start);

        // Module scan, at capture time: constant memory may be filled after the executable loads.
        let start = clock::now_ns();
        let mut out_of_memory = false;
        let mut too_large = false;
        let scan = ops.iterate_module_variables(agent, &mut |variable: &ModuleVariable<'_>| {
            if !keep_module_variable(agent, variable) {
                return true;
            }
            if entries.len() == entries.capacity() && entries.try_reserve(entries.len()).is_err() {
                out_of_memory = true;
                return false;
            }
            let Some((offset, end)) = place(total, variable.size) else {
                too_large = true;
                return false;
            };
            total = end;
            entries.push(Entry {
                address: variable.address,
                size: variable.size,
                offset,
                source: Source::ModuleVariable,
            });
            true
        });
        if let Err(error) = scan {
            crate::log!(Level::Warning, "agent {:#x}: the module scan failed ({error:?})", agent.0);
            return Err(DeclineReason::ModuleScanIncomplete);
        }
        if out_of_memory {
            return Err(DeclineReason::MetadataMemory);
        }
        if too_large {
            return Err(DeclineReason::HostBudget);
        }
        info.module_scan_ns = clock::since(start);

        if policy.max_snapshot_bytes != 0 && total > policy.max_snapshot_bytes {
            crate::log!(
                Level::Warning,
                "agent {:#x}: the snapshot needs {total} bytes of host memory, above max_snapshot_bytes = {}",
                agent.0,
                policy.max_snapshot_bytes
            );
            return Err(DeclineReason::HostBudget);
        }

        // Staging: one block for everything.
        let start = clock::now_ns();
        let mut snapshot = Snapshot { engine: self, storage: None, entries, info };
        if total > 0 {
            let reserve = total.saturating_add(total / HEADROOM_DIVISOR);
            let mut lease = self.pools.acquire_block(agent, total, reserve).map_err(|error| {
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: {total} bytes of staging could not be mapped ({error:?})",
                    agent.0
                );
                DeclineReason::StagingMemory
            })?;
            if policy.pin_staging && !lease.locked && ops.can_lock_host() {
                match ops.host_lock(lease.data.as_ptr(), lease.capacity) {
                    Ok(()) => self.pools.set_locked(&mut lease, true),
                    Err(error) => crate::log!(
                        Level::Warning,
                        "agent {:#x}: page-locking {} bytes of staging failed ({error:?}); copies use pageable memory",
                        agent.0,
                        lease.capacity
                    ),
                }
            }
            snapshot.storage = Some(lease);
        }
        snapshot.info.staging_ns = clock::since(start);

        // Device-to-host copies. A tracked region is copied under the read lock, so it cannot be freed
        // mid-copy; one freed since the inventory was listed is simply left out.
        let start = clock::now_ns();
        let staging = snapshot.staging();
        let mut dropped = false;
        for entry in snapshot.entries.iter_mut() {
            // SAFETY: `offset + size <= total <= capacity` of the staging block (see `place`).
            let dst = unsafe { staging.add(entry.offset) };
            let copy = || {
                // SAFETY: `dst` is `size` writable bytes of staging; `address` is a live tracked region or module
                // variable of at least `size` bytes (checked under the lock for tracked regions).
                unsafe { ops.copy(dst, entry.address as *const u8, entry.size) }
            };
            let result = match entry.source {
                Source::Tracked { kind, generation } => {
                    match self.inventory.with_live(entry.address, kind, generation, entry.size, |_| copy()) {
                        Some(result) => result,
                        None => {
                            entry.size = 0;
                            dropped = true;
                            continue;
                        }
                    }
                }
                Source::ModuleVariable => copy(),
            };
            if let Err(error) = result {
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: copying {} bytes at {:#x} to the host failed ({error:?})",
                    agent.0,
                    entry.size,
                    entry.address
                );
                return Err(DeclineReason::CopyFailed);
            }
        }
        if dropped {
            snapshot.entries.retain(|entry| entry.size != 0);
        }
        snapshot.info.copy_ns = clock::since(start);
        for entry in &snapshot.entries {
            match entry.source {
                Source::Tracked { .. } => snapshot.info.regions += 1,
                Source::ModuleVariable => snapshot.info.module_variables += 1,
            }
            snapshot.info.bytes += entry.size;
        }
        let info = snapshot.info;
        let boxed = try_box(snapshot).ok_or(DeclineReason::MetadataMemory)?;
        crate::log!(
            Level::Info,
            "agent {:#x}: snapshot of {} regions and {} module variables, {} bytes; inventory {} us, module scan {} us, \
             staging {} us, copy {} us ({:.2} GB/s)",
            agent.0,
            info.regions,
            info.module_variables,
            info.bytes,
            info.inventory_ns / 1000,
            info.module_scan_ns / 1000,
            info.staging_ns / 1000,
            info.copy_ns / 1000,
            gigabytes_per_second(info.bytes, info.copy_ns)
        );
        Ok(boxed)
    }

    /// Writes every captured region back. Tracked regions freed, shrunk or reallocated since the snapshot are
    /// skipped; module variables are always written; every region is attempted. `PartialRestore` when any copy
    /// failed: the host must not run another pass.
    pub fn restore(&self, snapshot: &Snapshot<'_, O>) -> (RestoreReport, Result<()>) {
        let mut report = RestoreReport::default();
        if let Err(error) = self.check_live() {
            return (report, Err(error));
        }
        let ops = match self.ops() {
            Ok(ops) => ops,
            Err(error) => return (report, Err(error)),
        };
        let agent = snapshot.info.agent;
        let start = clock::now_ns();
        let staging = snapshot.staging();
        for entry in &snapshot.entries {
            // SAFETY: `offset + size` lies within the staging block, which the snapshot owns.
            let src = unsafe { staging.add(entry.offset) }.cast_const();
            let copy = || {
                // SAFETY: `src` is `size` bytes of captured contents; `address` is a module variable or a tracked
                // region re-validated under the read lock, still live with at least `size` bytes.
                unsafe { ops.copy(entry.address as *mut u8, src, entry.size) }
            };
            let result = match entry.source {
                Source::Tracked { kind, generation } => {
                    match self.inventory.with_live(entry.address, kind, generation, entry.size, |_| copy()) {
                        Some(result) => result,
                        None => {
                            report.skipped += 1;
                            if report.skipped <= SKIP_LOG_LIMIT {
                                crate::log!(
                                    Level::Warning,
                                    "agent {:#x}: region at {:#x} ({} bytes) was freed, shrunk or reallocated since \
                                     the snapshot; not restored",
                                    agent.0,
                                    entry.address,
                                    entry.size
                                );
                            }
                            continue;
                        }
                    }
                }
                Source::ModuleVariable => copy(),
            };
            match result {
                Ok(()) => {
                    report.restored += 1;
                    report.bytes += entry.size;
                }
                Err(error) => {
                    report.failed += 1;
                    crate::log!(
                        Level::Error,
                        "agent {:#x}: restoring {} bytes at {:#x} failed ({error:?}); no further pass may run",
                        agent.0,
                        entry.size,
                        entry.address
                    );
                }
            }
        }
        let elapsed = clock::since(start);
        if report.skipped > SKIP_LOG_LIMIT {
            crate::log!(
                Level::Warning,
                "agent {:#x}: {} regions in all were freed or reallocated since the snapshot and not restored",
                agent.0,
                report.skipped
            );
        }
        crate::log!(
            Level::Info,
            "agent {:#x}: restore of {} bytes in {} regions ({} skipped, {} failed) took {} us ({:.2} GB/s)",
            agent.0,
            report.bytes,
            report.restored,
            report.skipped,
            report.failed,
            elapsed / 1000,
            gigabytes_per_second(report.bytes, elapsed)
        );
        let status = if report.failed == 0 { Ok(()) } else { Err(Error::PartialRestore) };
        (report, status)
    }
}

/// Places `size` bytes at the first multiple of [`STAGING_ALIGN`] at or after `end`: returns the range's offset
/// and its end, or `None` on overflow.
fn place(end: usize, size: usize) -> Option<(usize, usize)> {
    let offset = end.checked_next_multiple_of(STAGING_ALIGN)?;
    let end = offset.checked_add(size).filter(|&end| end <= isize::MAX as usize)?;
    Some((offset, end))
}

fn keep_module_variable(agent: Agent, variable: &ModuleVariable<'_>) -> bool {
    if variable.address == 0 || variable.size == 0 {
        return false;
    }
    // HIP emits a one-byte `__hip_cuid_*` marker per compilation unit; kernels never write it.
    if variable.size == 1 && variable.name.is_some_and(|name| name.starts_with(b"__hip_cuid_")) {
        return false;
    }
    if variable.size > MAX_MODULE_VARIABLE_BYTES {
        crate::log!(
            Level::Warning,
            "agent {:#x}: module variable {} at {:#x} is {} bytes, above the 1 GiB cap: it is not captured, and a \
             kernel's writes to it will leak across passes",
            agent.0,
            DisplayName(variable.name),
            variable.address,
            variable.size
        );
        return false;
    }
    true
}

fn gigabytes_per_second(bytes: usize, ns: u64) -> f64 {
    if ns == 0 { 0.0 } else { bytes as f64 / ns as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use crate::testing::MockDevice;
    use crate::types::{GlobalFlags, PointerType};

    /// Each test gets its own engine (a static: the tables are megabytes) and its own mock device.
    macro_rules! setup {
        () => {{
            static ENGINE: Engine<MockDevice> = Engine::new();
            // The declines and skips these tests provoke are expected: keep them out of the test output.
            crate::log::set_sink(Some(|_, _| {}), crate::log::Level::Error);
            let device = MockDevice::default();
            ENGINE.configure(device.clone()).unwrap();
            ENGINE.set_tracking(true);
            (&ENGINE, device)
        }};
    }

    const A: Agent = Agent(0xA1);
    const B: Agent = Agent(0xB2);

    fn tracked(engine: &Engine<MockDevice>, device: &MockDevice, agent: Agent, size: usize, fill: u8) -> usize {
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
        assert!(snapshot.entries.iter().all(|entry| entry.offset % STAGING_ALIGN == 0), "ranges are not aligned");
        for pass in 0..3u8 {
            for &(base, n) in &regions {
                device.write(base, &vec![0xF0 | pass; n]);
            }
            device.write(variable, &[pass; 8]);
            device.write(other, &[pass; 64]);
            let (report, status) = engine.restore(&snapshot);
            status.unwrap();
            assert_eq!(report, RestoreReport { restored: 5, skipped: 0, failed: 0, bytes: info.bytes });
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
        let kernarg =
            device.alloc_kind(A, 64, 1, PointerType::Device, GlobalFlags::COARSE_GRAINED | GlobalFlags::KERNARG);
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
        engine.set_policy(Policy { pin_staging: false, max_snapshot_bytes: 1024 }).unwrap();
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
        static ENGINE: Engine<MockDevice> = Engine::new();
        ENGINE.set_tracking(true);
        assert_eq!(ENGINE.snap(A).err(), Some(DeclineReason::NotConfigured));
        assert_eq!(ENGINE.record_alloc(0x1000, 64, 0), Err(Error::NotConfigured));
        let device = MockDevice::default();
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
            let (offset, next) = place(end, size).unwrap();
            assert_eq!(offset % STAGING_ALIGN, 0);
            assert!(offset >= previous_end && next == offset + size);
            previous_end = next;
            end = next;
        }
        assert_eq!(place(usize::MAX - 10, 1), None);
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
        engine.set_policy(Policy { pin_staging: true, max_snapshot_bytes: 0 }).unwrap();
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
}
