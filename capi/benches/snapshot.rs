//! Snapshot and restore on the simulated device, through the C API (issue 4): what kreplay adds on top of the
//! copies themselves, for one large footprint and for one footprint cut into more and more regions, on the
//! first dispatch (staging mapped and faulted in) and in steady state (staging retained).
//!
//! Version 2 (issues 11 to 14) adds, side by side on the same simulated device: 16,384 regions of 64 KiB with and
//! without `copy_batch`; the device tier against host staging; dirty-only restores (digests) against full
//! ones; and issue 14's GPU-free bar, a capture with 5,000 module variables from the module cache against a
//! capture of the same bytes in one region (bar: at most 1.2x).
//!
//! Run with `cargo bench -p kreplay-capi --features sim --bench snapshot` (optionally with row names: large,
//! split, disabled, batches, tiers, dirty, modules, fixed). The simulated device's copy is a
//! `memcpy` behind a lock and a region lookup, so the baseline is a plain `memcpy` of the same bytes between
//! the same kinds of memory. Figures are for this machine only; see docs/performance.md.

use std::ffi::c_void;
use std::hint::black_box;
use std::mem::MaybeUninit;
use std::ptr;
use std::time::Instant;

use kreplay::sim::*;
use kreplay::*;

const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;

fn ok(status: kreplay_status_t, what: &str) {
    assert_eq!(status, kreplay_status_t::KREPLAY_STATUS_SUCCESS, "{what}");
}

fn median(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (values[values.len() / 2], values[0], values[values.len() - 1])
}

fn configure() {
    configure_with(kreplay_sim_options_t::default(), kreplay_policy_t::default());
}

/// Installs the simulated device's ops with the version-2 ops `options` turns on, and `policy` (its
/// `struct_size` is filled in here). Tracking stays on; the engine keeps what it recorded.
fn configure_with(options: kreplay_sim_options_t, policy: kreplay_policy_t) {
    // SAFETY: a complete options struct, read during the call.
    unsafe { kreplay_sim_set_options(&options) };
    let mut ops = MaybeUninit::<kreplay_device_ops_t>::uninit();
    // SAFETY: `ops` is writable; on success the function initialised all of it.
    let ops = unsafe {
        ok(kreplay_sim_device_ops(ops.as_mut_ptr()), "kreplay_sim_device_ops");
        ops.assume_init()
    };
    // SAFETY: a complete ops struct.
    ok(unsafe { kreplay_configure(&ops) }, "kreplay_configure");
    let policy = kreplay_policy_t { struct_size: size_of::<kreplay_policy_t>(), ..policy };
    // SAFETY: a complete policy struct.
    ok(unsafe { kreplay_set_policy(&policy) }, "kreplay_set_policy");
    kreplay_tracking_enable(true);
}

struct Region {
    ptr: *mut u8,
    size: usize,
}

/// Allocates and records `count` regions of `size` bytes, filled so that every page is really backed (a
/// snapshot of never-touched memory would read the kernel's shared zero page and flatter every figure).
fn allocate(agent: kreplay_agent_t, count: usize, size: usize) -> Vec<Region> {
    (0..count)
        .map(|i| {
            let mut ptr: *mut c_void = ptr::null_mut();
            // SAFETY: `ptr` is writable.
            ok(
                unsafe {
                    kreplay_sim_alloc(
                        agent,
                        size,
                        kreplay_pointer_type_t::KREPLAY_POINTER_DEVICE,
                        KREPLAY_GLOBAL_FLAG_COARSE_GRAINED,
                        &mut ptr,
                    )
                },
                "kreplay_sim_alloc",
            );
            ok(kreplay_record_alloc(ptr, size, 0), "kreplay_record_alloc");
            // SAFETY: a live simulated region of `size` bytes.
            unsafe { ptr::write_bytes(ptr.cast::<u8>(), (i % 251) as u8 + 1, size) };
            Region { ptr: ptr.cast(), size }
        })
        .collect()
}

fn free_all(regions: Vec<Region>) {
    for region in regions {
        ok(kreplay_record_free(region.ptr.cast()), "kreplay_record_free");
        ok(kreplay_sim_free(region.ptr.cast()), "kreplay_sim_free");
    }
}

/// Host memory like kreplay's staging: an anonymous mapping advised to use huge pages, faulted in once.
struct HostBuffer {
    ptr: *mut u8,
    len: usize,
}

impl HostBuffer {
    fn new(len: usize) -> Self {
        // Whole huge pages, as kreplay rounds its staging: the kernel then aligns the mapping so that all of it
        // can be huge-backed.
        let len = len.next_multiple_of(2 * MIB);
        // SAFETY: an anonymous private mapping has no preconditions; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        // SAFETY: the mapping just made.
        unsafe {
            libc::madvise(ptr, len, libc::MADV_HUGEPAGE);
            ptr::write_bytes(ptr.cast::<u8>(), 0, len);
        }
        HostBuffer { ptr: ptr.cast(), len }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// `memcpy` of every region into a packed host buffer (`to_host`) or back: as many bytes as kreplay copies, in
/// as many calls.
fn memcpy_regions(regions: &[Region], buffer: &HostBuffer, to_host: bool) -> f64 {
    let start = Instant::now();
    let mut offset = 0;
    for region in regions {
        // SAFETY: the buffer holds the sum of the region sizes (plus alignment); the ranges are disjoint.
        unsafe {
            if to_host {
                ptr::copy_nonoverlapping(region.ptr, buffer.ptr.add(offset), region.size);
            } else {
                ptr::copy_nonoverlapping(buffer.ptr.add(offset), region.ptr, region.size);
            }
        }
        offset = (offset + region.size).next_multiple_of(64);
    }
    black_box(buffer.ptr);
    start.elapsed().as_secs_f64()
}

/// Median, min and max.
type Spread = (f64, f64, f64);

struct Dispatches {
    first_snap: Spread,
    first_maps: usize,
    snap: Spread,
    copy_phase: Spread,
    restore: Spread,
    memcpy_to_host: Spread,
    memcpy_to_device: Spread,
    /// Medians of the per-iteration ratios to the memcpy run just before: robust to the machine's drift.
    snap_ratio: f64,
    restore_ratio: f64,
    steady_maps: usize,
    bytes: usize,
}

fn host_maps() -> usize {
    let mut stats = MaybeUninit::<kreplay_host_memory_stats_t>::uninit();
    // SAFETY: writable output.
    ok(unsafe { kreplay_host_memory_stats(stats.as_mut_ptr()) }, "kreplay_host_memory_stats");
    // SAFETY: written on success.
    unsafe { stats.assume_init() }.maps
}

fn snap(agent: kreplay_agent_t) -> (*mut kreplay_snapshot_t, f64) {
    let mut snapshot: *mut kreplay_snapshot_t = ptr::null_mut();
    let start = Instant::now();
    // SAFETY: writable output; the reason is not wanted.
    let status = unsafe { kreplay_snap(agent, &mut snapshot, ptr::null_mut()) };
    let elapsed = start.elapsed().as_secs_f64();
    ok(status, "kreplay_snap");
    (snapshot, elapsed)
}

/// `firsts` first dispatches (nothing retained), then `runs` steady-state dispatches of one snapshot and one restore,
/// each right after a `memcpy` of the same bytes in the same direction, so both see the same machine.
fn dispatches(agent: kreplay_agent_t, regions: &[Region], firsts: usize, runs: usize) -> Dispatches {
    let total: usize = regions.iter().map(|r| r.size.next_multiple_of(64)).sum();
    let buffer = HostBuffer::new(total);
    memcpy_regions(regions, &buffer, true);
    memcpy_regions(regions, &buffer, false);
    let mut first_snaps = Vec::new();
    let mut first_maps = 0;
    for _ in 0..firsts {
        kreplay_staging_trim(agent);
        let maps = host_maps();
        let (first, elapsed) = snap(agent);
        first_maps = host_maps() - maps;
        first_snaps.push(elapsed);
        kreplay_snapshot_free(first);
    }
    let (mut snaps, mut copies, mut restores) = (Vec::new(), Vec::new(), Vec::new());
    let (mut to_host, mut to_device, mut snap_ratios, mut restore_ratios) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut bytes = 0;
    let maps = host_maps();
    for _ in 0..runs {
        let baseline = memcpy_regions(regions, &buffer, true);
        let (snapshot, elapsed) = snap(agent);
        to_host.push(baseline);
        snaps.push(elapsed);
        snap_ratios.push(elapsed / baseline);
        let mut info = MaybeUninit::<kreplay_snapshot_info_t>::uninit();
        // SAFETY: a live snapshot and a writable output.
        ok(unsafe { kreplay_snapshot_info(snapshot, info.as_mut_ptr()) }, "kreplay_snapshot_info");
        // SAFETY: written on success.
        let info = unsafe { info.assume_init() };
        assert_eq!(info.regions, regions.len());
        copies.push(info.copy_ns as f64 * 1e-9);
        bytes = info.bytes;
        let baseline = memcpy_regions(regions, &buffer, false);
        let mut report = kreplay_restore_report_t::default();
        let start = Instant::now();
        // SAFETY: a live snapshot and a writable report.
        let status = unsafe { kreplay_restore(snapshot, &mut report) };
        let elapsed = start.elapsed().as_secs_f64();
        ok(status, "kreplay_restore");
        assert_eq!(report.restored, regions.len());
        to_device.push(baseline);
        restores.push(elapsed);
        restore_ratios.push(elapsed / baseline);
        kreplay_snapshot_free(snapshot);
    }
    Dispatches {
        first_snap: median(first_snaps),
        first_maps,
        snap: median(snaps),
        copy_phase: median(copies),
        restore: median(restores),
        memcpy_to_host: median(to_host),
        memcpy_to_device: median(to_device),
        snap_ratio: median(snap_ratios).0,
        restore_ratio: median(restore_ratios).0,
        steady_maps: host_maps() - maps,
        bytes,
    }
}

fn gbps(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e9
}

fn large_footprint(runs: usize) {
    println!("== 1 GiB in 16 regions of 64 MiB against memcpy (median of {runs} [min, max]) ==");
    let agent = kreplay_agent_t { handle: 0xB16 };
    let regions = allocate(agent, 16, 64 * MIB);
    let d = dispatches(agent, &regions, 5, runs);
    let ms = |s: f64| s * 1e3;
    let (to_host, to_device) = (d.memcpy_to_host, d.memcpy_to_device);
    println!(
        "memcpy device->host {:>7.2} ms [{:.2}, {:.2}] ({:.2} GB/s);  host->device {:>7.2} ms [{:.2}, {:.2}] ({:.2} GB/s)",
        ms(to_host.0),
        ms(to_host.1),
        ms(to_host.2),
        gbps(GIB, to_host.0),
        ms(to_device.0),
        ms(to_device.1),
        ms(to_device.2),
        gbps(GIB, to_device.0)
    );
    println!(
        "snapshot, steady   {:>7.2} ms [{:.2}, {:.2}] ({:.2} GB/s), copy phase {:.2} ms: {:.3}x memcpy (median of \
         paired ratios; min/min {:.3}x); host maps {}",
        ms(d.snap.0),
        ms(d.snap.1),
        ms(d.snap.2),
        gbps(d.bytes, d.snap.0),
        ms(d.copy_phase.0),
        d.snap_ratio,
        d.snap.1 / to_host.1,
        d.steady_maps
    );
    println!(
        "restore            {:>7.2} ms [{:.2}, {:.2}] ({:.2} GB/s): {:.3}x memcpy (median of paired ratios; min/min \
         {:.3}x)",
        ms(d.restore.0),
        ms(d.restore.1),
        ms(d.restore.2),
        gbps(d.bytes, d.restore.0),
        d.restore_ratio,
        d.restore.1 / to_device.1
    );
    println!(
        "snapshot, first dispatch {:.2} ms [{:.2}, {:.2}] over 5 ({:.2}x steady state; {} host map(s), staging \
         faulted in)",
        ms(d.first_snap.0),
        ms(d.first_snap.1),
        ms(d.first_snap.2),
        d.first_snap.0 / d.snap.0,
        d.first_maps
    );
    free_all(regions);
    kreplay_staging_trim(agent);
    println!();
}

fn split_footprint(runs: usize) {
    println!("== 64 MiB split into 1, 256 and 4,096 regions (median of {runs} [min, max]) ==");
    println!(
        "{:>7}  {:>24}  {:>24}  {:>10}  {:>17}  {:>13}  {:>15}",
        "regions", "snapshot, steady (ms)", "restore (ms)", "first (ms)", "memcpy d>h/h>d", "vs memcpy", "vs 1 region"
    );
    let mut one: Option<(f64, f64)> = None;
    for (i, count) in [1usize, 256, 4096].into_iter().enumerate() {
        let agent = kreplay_agent_t { handle: 0x5100 + i as u64 };
        let size = 64 * MIB / count;
        let regions = allocate(agent, count, size);
        let d = dispatches(agent, &regions, 5, runs);
        let (snap_vs_one, restore_vs_one) = match one {
            None => {
                one = Some((d.snap.0, d.restore.0));
                (1.0, 1.0)
            }
            Some((snap, restore)) => (d.snap.0 / snap, d.restore.0 / restore),
        };
        println!(
            "{count:>7}  {:>6.2} [{:>5.2}, {:>6.2}]  {:>6.2} [{:>5.2}, {:>6.2}]  {:>10.2}  {:>7.2} / {:<7.2}  {:.2}x / {:.2}x  \
             {:.2}x / {:.2}x",
            d.snap.0 * 1e3,
            d.snap.1 * 1e3,
            d.snap.2 * 1e3,
            d.restore.0 * 1e3,
            d.restore.1 * 1e3,
            d.restore.2 * 1e3,
            d.first_snap.0 * 1e3,
            d.memcpy_to_host.0 * 1e3,
            d.memcpy_to_device.0 * 1e3,
            d.snap_ratio,
            d.restore_ratio,
            snap_vs_one,
            restore_vs_one
        );
        if count > 1 {
            println!(
                "         kreplay's own cost per region (median time above the paired memcpy): snapshot {:.0} ns, \
                 restore {:.0} ns; steady-state host maps {}",
                (d.snap_ratio - 1.0) * d.memcpy_to_host.0 / count as f64 * 1e9,
                (d.restore_ratio - 1.0) * d.memcpy_to_device.0 / count as f64 * 1e9,
                d.steady_maps
            );
        }
        free_all(regions);
        kreplay_staging_trim(agent);
    }
    println!();
}

fn disabled_record() {
    println!("== tracking disabled, through the C API ==");
    kreplay_tracking_enable(false);
    const CALLS: usize = 20_000_000;
    let mut alloc = Vec::new();
    let mut free = Vec::new();
    for _ in 0..7 {
        let start = Instant::now();
        for i in 0..CALLS {
            black_box(kreplay_record_alloc(black_box((0x10000 + i * 256) as *mut c_void), 4096, 0));
        }
        alloc.push(start.elapsed().as_nanos() as f64 / CALLS as f64);
        let start = Instant::now();
        for i in 0..CALLS {
            black_box(kreplay_record_free(black_box((0x10000 + i * 256) as *mut c_void)));
        }
        free.push(start.elapsed().as_nanos() as f64 / CALLS as f64);
    }
    let (alloc, free) = (median(alloc), median(free));
    println!(
        "kreplay_record_alloc {:.2} ns [{:.2}, {:.2}], kreplay_record_free {:.2} ns [{:.2}, {:.2}] per call",
        alloc.0, alloc.1, alloc.2, free.0, free.1, free.2
    );
    kreplay_tracking_enable(true);
    println!();
}

// ---- Version 2 -------------------------------------------------------------------------------------------

fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed().as_secs_f64())
}

fn restore(snapshot: *mut kreplay_snapshot_t) -> (kreplay_restore_report_t, f64) {
    let mut report = kreplay_restore_report_t::default();
    // SAFETY: a live snapshot and a writable report.
    let (status, elapsed) = timed(|| unsafe { kreplay_restore(snapshot, &mut report) });
    ok(status, "kreplay_restore");
    (report, elapsed)
}

fn info(snapshot: *mut kreplay_snapshot_t) -> kreplay_snapshot_info_t {
    let mut info = MaybeUninit::<kreplay_snapshot_info_t>::uninit();
    // SAFETY: a live snapshot and a writable output.
    ok(unsafe { kreplay_snapshot_info(snapshot, info.as_mut_ptr()) }, "kreplay_snapshot_info");
    // SAFETY: written on success.
    unsafe { info.assume_init() }
}

fn counters() -> kreplay_sim_counters_t {
    let mut counters = MaybeUninit::<kreplay_sim_counters_t>::uninit();
    // SAFETY: writable output.
    ok(unsafe { kreplay_sim_counters(counters.as_mut_ptr()) }, "kreplay_sim_counters");
    // SAFETY: written on success.
    unsafe { counters.assume_init() }
}

/// Steady-state snapshot and restore times (medians of `runs`, after one first dispatch that is not counted),
/// with the simulated device's batch and copy counts of the last run.
struct Steady {
    snap: Spread,
    restore: Spread,
    batches: usize,
    copies: usize,
}

fn steady(agent: kreplay_agent_t, regions: usize, runs: usize) -> Steady {
    let (first, _) = snap(agent);
    kreplay_snapshot_free(first);
    let (mut snaps, mut restores) = (Vec::new(), Vec::new());
    let (mut batches, mut copies) = (0, 0);
    for _ in 0..runs {
        let before = counters();
        let (snapshot, elapsed) = snap(agent);
        snaps.push(elapsed);
        let (report, elapsed) = restore(snapshot);
        assert_eq!(report.restored, regions);
        restores.push(elapsed);
        let after = counters();
        batches = after.batches - before.batches;
        copies = after.copies - before.copies;
        kreplay_snapshot_free(snapshot);
    }
    Steady { snap: median(snaps), restore: median(restores), batches, copies }
}

fn print_steady(label: &str, s: &Steady, bytes: usize, versus: Option<&Steady>) {
    let ratio = versus
        .map_or(String::new(), |v| format!("  ({:.2}x / {:.2}x)", s.snap.0 / v.snap.0, s.restore.0 / v.restore.0));
    println!(
        "{label:<28} snapshot {:>7.2} ms [{:.2}, {:.2}] ({:>5.2} GB/s)  restore {:>7.2} ms [{:.2}, {:.2}] ({:>5.2} GB/s)  \
         {} batches, {} copies{ratio}",
        s.snap.0 * 1e3,
        s.snap.1 * 1e3,
        s.snap.2 * 1e3,
        gbps(bytes, s.snap.0),
        s.restore.0 * 1e3,
        s.restore.1 * 1e3,
        s.restore.2 * 1e3,
        gbps(bytes, s.restore.0),
        s.batches / 2,
        s.copies / 2
    );
}

fn batches(runs: usize) {
    println!("== 1 GiB in 16,384 regions of 64 KiB: copy by copy against copy_batch (median of {runs} [min, max]) ==");
    let agent = kreplay_agent_t { handle: 0xBA7C };
    let regions = allocate(agent, 16_384, 64 << 10);
    let bytes = 16_384 * (64 << 10);
    configure_with(kreplay_sim_options_t::default(), kreplay_policy_t::default());
    let single = steady(agent, regions.len(), runs);
    print_steady("copy (version 1)", &single, bytes, None);
    configure_with(kreplay_sim_options_t { copy_batch: true, ..Default::default() }, kreplay_policy_t::default());
    let batched = steady(agent, regions.len(), runs);
    print_steady("copy_batch", &batched, bytes, Some(&single));
    println!("(batches and copies are per snapshot-and-restore pair; the ratios are against copy by copy)");
    free_all(regions);
    kreplay_staging_trim(agent);
    configure();
    println!();
}

fn tiers(runs: usize) {
    println!("== 1 GiB in 16 regions of 64 MiB: host staging against the device tier (median of {runs} [min, max]) ==");
    let agent = kreplay_agent_t { handle: 0x7135 };
    let regions = allocate(agent, 16, 64 * MIB);
    let v2 = kreplay_sim_options_t { copy_batch: true, device_alloc: true, ..Default::default() };
    configure_with(v2, kreplay_policy_t::default());
    let host = steady(agent, regions.len(), runs);
    print_steady("host staging", &host, GIB, None);
    configure_with(v2, kreplay_policy_t { device_budget_bytes: 2 * GIB, ..Default::default() });
    let (probe, _) = snap(agent);
    let on_device = info(probe).device_bytes;
    kreplay_snapshot_free(probe);
    let device = steady(agent, regions.len(), runs);
    print_steady("device tier (budget 2 GiB)", &device, GIB, Some(&host));
    println!(
        "device tier: {} MiB of the snapshot in device storage, {} MiB held by the simulated device after the runs",
        on_device / MIB,
        counters().device_bytes / MIB
    );
    kreplay_device_trim(agent);
    free_all(regions);
    kreplay_staging_trim(agent);
    configure();
    println!();
}

fn dirty(runs: usize) {
    println!(
        "== restore of 1 GiB in 16 regions of 64 MiB after a kernel wrote 1% of its 64 KiB blocks: full against \
         dirty-only (median of {runs} [min, max]) =="
    );
    let agent = kreplay_agent_t { handle: 0xD127 };
    let regions = allocate(agent, 16, 64 * MIB);
    let block = 64 << 10;
    // One block in a hundred, spread over every region.
    let dirty_blocks: Vec<(usize, usize)> =
        (0..GIB / block).step_by(100).map(|b| (b * block / (64 * MIB), b * block % (64 * MIB))).collect();
    let kernel = |seed: u8| {
        for &(r, offset) in &dirty_blocks {
            // SAFETY: within a live simulated region.
            unsafe { ptr::write_bytes(regions[r].ptr.add(offset), seed, 256) };
        }
    };
    let options = kreplay_sim_options_t { copy_batch: true, digest: true, ..Default::default() };
    let mut rows = Vec::new();
    for (label, dirty_only) in [("full restore", false), ("dirty-only restore", true)] {
        configure_with(options, kreplay_policy_t { dirty_only, digest_block_bytes: block, ..Default::default() });
        let (snapshot, snap_time) = snap(agent);
        let (mut times, mut clean, mut copied, mut digests) = (Vec::new(), 0, 0, 0);
        for i in 0..runs {
            kernel(i as u8 + 1);
            let before = counters();
            let (report, elapsed) = restore(snapshot);
            let after = counters();
            times.push(elapsed);
            clean = report.clean_bytes;
            copied = after.copy_bytes - before.copy_bytes;
            digests = after.digest_blocks - before.digest_blocks;
            assert_eq!(report.restored, regions.len());
        }
        for &(r, offset) in &dirty_blocks {
            // SAFETY: within a live simulated region, which `allocate` filled with one value per region.
            assert_eq!(unsafe { *regions[r].ptr.add(offset) }, (r % 251) as u8 + 1, "a dirty block was not restored");
        }
        let digest_ms = info(snapshot).digest_ns as f64 * 1e-6;
        kreplay_snapshot_free(snapshot);
        let t = median(times);
        rows.push(t.0);
        println!(
            "{label:<20} restore {:>7.2} ms [{:.2}, {:.2}]: {:>5} MiB copied, {:>5} MiB reported clean, {:>6} blocks \
             digested; snapshot {:.2} ms (digests {:.2} ms)",
            t.0 * 1e3,
            t.1 * 1e3,
            t.2 * 1e3,
            copied / MIB,
            clean / MIB,
            digests,
            snap_time * 1e3,
            digest_ms
        );
    }
    println!(
        "dirty-only / full: {:.2}x (the simulated digest is a host hash; a GPU's runs at memory bandwidth)",
        rows[1] / rows[0]
    );
    free_all(regions);
    kreplay_staging_trim(agent);
    configure();
    println!();
}

/// Issue 14's GPU-free bar: with the module cache on, a capture of 5,000 module variables (second capture
/// onwards, so no scan) against a capture of the same bytes in one region. The simulated device places
/// variables 256 bytes apart, so 256 B, 4 KiB and 64 KiB variables lie back to back (as in a code object's
/// segment) and are copied in spans; 200 B variables leave 56 B gaps, so each is a copy of its own: the cost when
/// nothing can be merged.
fn module_cache(runs: usize) {
    println!(
        "== 5,000 module variables from the module cache against the same bytes in one region (median of {runs}; \
         bar: at most 1.2x) =="
    );
    const VARIABLES: usize = 5000;
    for (i, size) in [256usize, 200, 4096, 64 << 10].into_iter().enumerate() {
        let cached = kreplay_agent_t { handle: 0x3D00 + i as u64 };
        let single = kreplay_agent_t { handle: 0x3E00 + i as u64 };
        for v in 0..VARIABLES {
            let name = format!("variable_{v}\0");
            let mut address = ptr::null_mut();
            // SAFETY: a NUL-terminated name and a writable output.
            ok(
                unsafe { kreplay_sim_add_module_variable(cached, name.as_ptr().cast(), size, false, &mut address) },
                "kreplay_sim_add_module_variable",
            );
            // SAFETY: the variable's storage, `size` bytes.
            unsafe { ptr::write_bytes(address.cast::<u8>(), (v % 251) as u8 + 1, size) };
        }
        let region = allocate(single, 1, VARIABLES * size);
        for (label, options) in [
            ("copy", kreplay_sim_options_t::default()),
            ("copy_batch", kreplay_sim_options_t { copy_batch: true, ..Default::default() }),
        ] {
            configure_with(options, kreplay_policy_t { cache_module_scan: true, ..Default::default() });
            let measure = |agent: kreplay_agent_t| {
                let (first, _) = snap(agent);
                kreplay_snapshot_free(first);
                let before = counters();
                let mut times = Vec::new();
                for _ in 0..runs {
                    let (snapshot, elapsed) = snap(agent);
                    times.push(elapsed);
                    kreplay_snapshot_free(snapshot);
                }
                let after = counters();
                let copies = (after.copies - before.copies) / runs;
                (median(times), after.module_scans - before.module_scans, copies)
            };
            let (variables, scans, copies) = measure(cached);
            let (one, _, _) = measure(single);
            println!(
                "{VARIABLES} x {:>6} B ({:>6.2} MiB), {label:<10}: variables {:>7.3} ms [{:.3}, {:.3}], one region {:>7.3} ms \
                 [{:.3}, {:.3}]: {:.2}x{}; {copies} copies a capture, scans after the first capture: {scans}",
                size,
                (VARIABLES * size) as f64 / MIB as f64,
                variables.0 * 1e3,
                variables.1 * 1e3,
                variables.2 * 1e3,
                one.0 * 1e3,
                one.1 * 1e3,
                one.2 * 1e3,
                variables.0 / one.0,
                match (copies < VARIABLES, variables.0 / one.0 <= 1.2) {
                    (true, true) => " (within the bar)",
                    (true, false) => " (ABOVE the 1.2x bar)",
                    // Not the bar's case: nothing can be merged, so this is the cost of one copy per variable.
                    (false, _) => " (gaps between the variables: one copy each)",
                }
            );
        }
        free_all(region);
        kreplay_staging_trim(cached);
        kreplay_staging_trim(single);
    }
    configure();
    println!();
}

/// Counts what a logger was handed (the benchmark's logger: it keeps nothing).
static LOGGED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

unsafe extern "C" fn count_messages(_: *mut c_void, _: kreplay_log_level_t, _: *const std::ffi::c_char, len: usize) {
    LOGGED.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
}

/// What a snapshot and a restore cost beyond their copies: one 4 KiB region and two module variables (the GPU
/// benchmark's 64 MiB row, without the bytes), pinned staging and `copy_batch`, steady state; without a logger
/// and with one taking INFO lines (as the GPU benchmark has), against a `memcpy` of the same 4 KiB.
fn fixed(runs: usize) {
    println!("== fixed cost of a call: 1 region of 4 KiB + 2 module variables, steady state (median of {runs}) ==");
    let agent = kreplay_agent_t { handle: 0x3F00 };
    let region = allocate(agent, 1, 4096);
    for name in [c"counter", c"flags"] {
        let mut address = ptr::null_mut();
        // SAFETY: a NUL-terminated name and a writable output.
        ok(unsafe { kreplay_sim_add_module_variable(agent, name.as_ptr(), 36, false, &mut address) }, "variable");
    }
    configure_with(kreplay_sim_options_t { copy_batch: true, ..Default::default() }, kreplay_policy_t::default());
    let buffer = HostBuffer::new(4096);
    for (label, level) in [("no logger", None), ("INFO logger", Some(kreplay_log_level_t::KREPLAY_LOG_INFO))] {
        match level {
            Some(level) => kreplay_set_logger(Some(count_messages), ptr::null_mut(), RawLogLevel(level as u32)),
            None => {
                kreplay_set_logger(None, ptr::null_mut(), RawLogLevel(kreplay_log_level_t::KREPLAY_LOG_ERROR as u32))
            }
        }
        let (first, _) = snap(agent);
        kreplay_snapshot_free(first);
        let (mut snaps, mut restores, mut copies) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            copies.push(timed(|| memcpy_regions(&region, &buffer, true)).1);
            let (snapshot, elapsed) = snap(agent);
            snaps.push(elapsed);
            restores.push(restore(snapshot).1);
            kreplay_snapshot_free(snapshot);
        }
        let (snap_ns, restore_ns, copy_ns) = (median(snaps).0 * 1e9, median(restores).0 * 1e9, median(copies).0 * 1e9);
        println!(
            "{label:<12}: snapshot {snap_ns:>7.0} ns, restore {restore_ns:>7.0} ns; memcpy of 4 KiB {copy_ns:>5.0} ns"
        );
    }
    kreplay_set_logger(None, ptr::null_mut(), RawLogLevel(kreplay_log_level_t::KREPLAY_LOG_ERROR as u32));
    free_all(region);
    kreplay_staging_trim(agent);
    configure();
    println!();
}

fn main() {
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    println!(
        "snapshot benchmark on the simulated device, kreplay {}: {} CPUs",
        // SAFETY: a static NUL-terminated string.
        unsafe { std::ffi::CStr::from_ptr(kreplay_version()) }.to_string_lossy(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    configure();
    if wanted("large") {
        large_footprint(11);
    }
    if wanted("split") {
        split_footprint(21);
    }
    if wanted("disabled") {
        disabled_record();
    }
    if wanted("batches") {
        batches(7);
    }
    if wanted("tiers") {
        tiers(7);
    }
    if wanted("dirty") {
        dirty(7);
    }
    if wanted("modules") {
        module_cache(21);
    }
    if wanted("fixed") {
        fixed(2001);
    }
    let mut counters = MaybeUninit::<kreplay_sim_counters_t>::uninit();
    // SAFETY: writable output.
    ok(unsafe { kreplay_sim_counters(counters.as_mut_ptr()) }, "kreplay_sim_counters");
    // SAFETY: written on success.
    assert_eq!(unsafe { counters.assume_init() }.violations, 0, "a copy touched freed memory");
}
