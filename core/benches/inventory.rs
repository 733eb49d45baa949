//! Inventory figures (issue 3): the cost of the allocation-tracking path a host pays on every allocate and
//! free, with tracking on and off, and the time a snapshot spends listing an agent's regions.
//!
//! Run with `cargo bench -p kreplay-core --bench inventory`. Figures are for this machine only; see
//! docs/performance.md.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

use kreplay_core::inventory::{CAPACITY, Inventory, Region};
use kreplay_core::{Agent, DeviceOps, Engine, GlobalFlags, ModuleVariable, PointerInfo, PointerType};

const AGENT: Agent = Agent(0xA11CE);

/// Device ops that answer every pointer query with "coarse-grained device memory of AGENT", as fast as a
/// real runtime's lookup could ever be: the figures are kreplay's own cost.
#[derive(Clone)]
struct CoarseDevice;

impl DeviceOps for CoarseDevice {
    unsafe fn copy(&self, _: *mut u8, _: *const u8, _: usize) -> kreplay_core::Result<()> {
        unreachable!("the inventory benchmark never copies")
    }

    fn pointer_info(&self, ptr: *const u8) -> kreplay_core::Result<PointerInfo> {
        Ok(PointerInfo {
            kind: PointerType::Device,
            global_flags: GlobalFlags::COARSE_GRAINED,
            owner: AGENT,
            base: ptr as usize,
            size: 0,
        })
    }

    fn iterate_module_variables(
        &self,
        _: Agent,
        _: &mut dyn FnMut(&ModuleVariable<'_>) -> bool,
    ) -> kreplay_core::Result<()> {
        Ok(())
    }

    fn can_lock_host(&self) -> bool {
        false
    }

    fn host_lock(&self, _: *mut u8, _: usize) -> kreplay_core::Result<()> {
        Ok(())
    }

    fn host_unlock(&self, _: *mut u8, _: usize) -> kreplay_core::Result<()> {
        Ok(())
    }
}

/// The tables are megabytes: statics, as in the library.
static ENGINE: Engine<CoarseDevice> = Engine::new();
static INVENTORY: Inventory = Inventory::new();

const LIVE: usize = 10_000;
/// Device addresses are fake (the ops never touch them): 64 KiB apart, like a suballocator's blocks.
const STRIDE: usize = 64 << 10;
const LIVE_BASE: usize = 0x7f00_0000_0000;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Per-pair times (ns), each the mean over a batch of `batch` pairs, for `batches` batches; addresses start
/// at `base` and never collide with the live entries.
fn pairs(base: usize, batches: usize, batch: usize) -> Vec<f64> {
    let mut times = Vec::with_capacity(batches);
    for b in 0..batches {
        let start = Instant::now();
        for i in 0..batch {
            let ptr = base + ((b * batch + i) % 4096) * STRIDE;
            ENGINE.record_alloc(black_box(ptr), 4096, 0).unwrap();
            ENGINE.record_free(black_box(ptr)).unwrap();
        }
        times.push(start.elapsed().as_nanos() as f64 / batch as f64);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    times
}

fn record_pairs() {
    ENGINE.configure(CoarseDevice).unwrap();
    ENGINE.set_tracking(true);
    for i in 0..LIVE {
        ENGINE.record_alloc(LIVE_BASE + i * STRIDE, 4096, 0).unwrap();
    }
    assert_eq!(ENGINE.inventory_stats(AGENT).unwrap().regions, LIVE);
    println!("== record_alloc + record_free pairs with {LIVE} live entries (capacity {CAPACITY}) ==");

    // Warm-up, then 2,000 batches of 50 pairs.
    pairs(0x1000_0000_0000, 200, 50);
    let single = pairs(0x1000_0000_0000, 2000, 50);
    let median = percentile(&single, 0.5);
    println!(
        "1 thread:  median {:.1} ns per pair (p10 {:.1}, p90 {:.1}, p99 {:.1}) = {:.2} M pairs/s",
        median,
        percentile(&single, 0.1),
        percentile(&single, 0.9),
        percentile(&single, 0.99),
        1e3 / median
    );

    const THREADS: usize = 2;
    const BATCHES: usize = 2000;
    const BATCH: usize = 50;
    let barrier = Barrier::new(THREADS);
    let start = Instant::now();
    let per_thread: Vec<Vec<f64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    pairs(0x2000_0000_0000 + t * 0x100_0000_0000, BATCHES, BATCH)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let total = (THREADS * BATCHES * BATCH) as f64;
    let mut all: Vec<f64> = per_thread.concat();
    all.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mean = all.iter().sum::<f64>() / all.len() as f64;
    println!(
        "{THREADS} threads: {:.2} M pairs/s in all; per thread median {:.1} ns per pair (p90 {:.1}, p99 {:.1}, mean \
         {:.1}, worst batch of {BATCH} {:.1} us)",
        total / elapsed / 1e6,
        percentile(&all, 0.5),
        percentile(&all, 0.9),
        percentile(&all, 0.99),
        mean,
        all[all.len() - 1] * BATCH as f64 / 1e3
    );
    assert_eq!(ENGINE.inventory_stats(AGENT).unwrap().regions, LIVE);
    println!();
}

fn disabled() {
    // Turning tracking off forgets the inventory, which is what a host that disables it gets too.
    ENGINE.set_tracking(false);
    println!("== tracking disabled ==");
    const CALLS: usize = 20_000_000;
    let mut best_alloc = f64::MAX;
    let mut best_free = f64::MAX;
    let mut all_alloc = Vec::new();
    for _ in 0..7 {
        let start = Instant::now();
        for i in 0..CALLS {
            black_box(ENGINE.record_alloc(black_box(LIVE_BASE + i * STRIDE), 4096, 0)).unwrap();
        }
        let alloc = start.elapsed().as_nanos() as f64 / CALLS as f64;
        let start = Instant::now();
        for i in 0..CALLS {
            black_box(ENGINE.record_free(black_box(LIVE_BASE + i * STRIDE))).unwrap();
        }
        let free = start.elapsed().as_nanos() as f64 / CALLS as f64;
        best_alloc = best_alloc.min(alloc);
        best_free = best_free.min(free);
        all_alloc.push(alloc);
    }
    all_alloc.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "record_alloc: {:.2} ns per call (median {:.2}); record_free: {:.2} ns per call (best of 7 x {CALLS})",
        best_alloc,
        percentile(&all_alloc, 0.5),
        best_free
    );
    println!();
}

fn gather() {
    println!("== gathering one agent's regions from a full table ({CAPACITY} entries) ==");
    const AGENTS: u64 = 8;
    INVENTORY.set_enabled(true, true);
    let epoch = INVENTORY.epoch();
    for i in 0..CAPACITY {
        let agent = Agent(1 + (i as u64 % AGENTS));
        INVENTORY.insert(LIVE_BASE + i * STRIDE, 4096 + i, agent, epoch).unwrap();
    }
    assert_eq!(INVENTORY.len(), CAPACITY);
    assert!(INVENTORY.insert(0x10, 16, Agent(1), epoch).is_err(), "the table should be full");
    let _ = INVENTORY.remove(0x10, true);
    let time = |agent: Agent, expect: usize| {
        let mut times: Vec<f64> = (0..51)
            .map(|_| {
                // A fresh list each time, as a snapshot does.
                let start = Instant::now();
                let mut out: Vec<Region> = Vec::new();
                INVENTORY.gather(agent, &mut out).unwrap();
                let elapsed = start.elapsed().as_secs_f64();
                assert_eq!(out.len(), expect);
                black_box(out);
                elapsed
            })
            .collect();
        // The first list of a process faults its memory in; later ones reuse the allocator's heap.
        let first = times.remove(0);
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (percentile(&times, 0.5) * 1e3, percentile(&times, 0.9) * 1e3, times[times.len() - 1] * 1e3, first * 1e3)
    };
    let (median, p90, max, first) = time(Agent(3), CAPACITY / AGENTS as usize);
    println!(
        "one agent of {AGENTS} ({} regions): median {median:.3} ms (p90 {p90:.3}, max {max:.3}); first in the \
         process {first:.3} ms",
        CAPACITY / AGENTS as usize
    );
    INVENTORY.set_enabled(false, true);
    INVENTORY.set_enabled(true, true);
    let epoch = INVENTORY.epoch();
    for i in 0..CAPACITY {
        INVENTORY.insert(LIVE_BASE + i * STRIDE, 4096 + i, Agent(1), epoch).unwrap();
    }
    let (median, p90, max, first) = time(Agent(1), CAPACITY);
    println!(
        "one agent owning all {CAPACITY} regions: median {median:.3} ms (p90 {p90:.3}, max {max:.3}); first \
         {first:.3} ms"
    );
    INVENTORY.set_enabled(false, true);
    println!();
}

fn main() {
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    println!("inventory benchmark: {} CPUs", std::thread::available_parallelism().map_or(0, |n| n.get()));
    println!();
    if wanted("pairs") {
        record_pairs();
    }
    if wanted("disabled") {
        disabled();
    }
    if wanted("gather") {
        gather();
    }
}
