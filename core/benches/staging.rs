//! Staging pool figures (issue 2): what retention saves per dispatch, what a first acquire costs with and
//! without transparent huge pages, and the steady-state cost of acquire/release for large and tiny requests.
//!
//! Run with `cargo bench -p kreplay-core --bench staging`. Prints medians (and the spread, min to max) over
//! several repetitions; figures are for this machine only, see docs/performance.md.

use std::hint::black_box;
use std::ptr::NonNull;
use std::time::Instant;

use kreplay_core::host_memory;
use kreplay_core::staging::Pools;
use kreplay_core::types::Agent;

/// The tables are megabytes: keep them off the stack, as the library does.
static POOLS: Pools = Pools::new();

const MIB: usize = 1 << 20;
const FOOTPRINTS: [usize; 3] = [64 * MIB, 256 * MIB, 1024 * MIB];
const PAGE: usize = 4096;

fn no_unlock() -> impl FnMut(NonNull<u8>, usize, kreplay_core::opsets::OpsHold) {
    |_, _, _| panic!("the benchmark never page-locks")
}

fn ms(seconds: f64) -> f64 {
    seconds * 1e3
}

/// Median, min and max of `runs` timings of `f`, in seconds.
fn measure(runs: usize, mut f: impl FnMut() -> f64) -> (f64, f64, f64) {
    let mut times: Vec<f64> = (0..runs).map(|_| f()).collect();
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (times[times.len() / 2], times[0], times[times.len() - 1])
}

fn touch_pages(data: *mut u8, len: usize) {
    let mut offset = 0;
    while offset < len {
        // SAFETY: `data` is `len` writable bytes.
        unsafe { data.add(offset).write_volatile(1) };
        offset += PAGE;
    }
}

/// Advises transparent huge pages for a fresh block when `huge` (what a host's `host_lock` may do before it
/// populates; the library itself gives no advice).
fn advise(data: *mut u8, len: usize, huge: bool) {
    if huge {
        // SAFETY: `[data, data + len)` is one mapping of the pool, not yet touched; advice changes no contents.
        unsafe { libc::madvise(data.cast(), len, libc::MADV_HUGEPAGE) };
    }
}

/// Transparent huge pages backing anonymous memory in this process right now, in bytes.
fn anon_huge_bytes() -> usize {
    let Ok(text) = std::fs::read_to_string("/proc/self/smaps_rollup") else { return 0 };
    text.lines()
        .find_map(|line| line.strip_prefix("AnonHugePages:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn runs_for(n: usize) -> usize {
    if n >= 1024 * MIB { 5 } else { 9 }
}

/// Before retention: a zero-filled buffer per dispatch (what `std::vector<char>::resize` did), freed at the end.
fn per_dispatch_cost(agent: Agent) {
    println!("== per-dispatch host cost before any copy, per footprint (median of runs, [min, max]) ==");
    println!(
        "{:>9}  {:>28}  {:>28}  {:>24}  {:>26}",
        "footprint",
        "fresh zero-filled (ms/MiB)",
        "fresh mmap+touch (ms/MiB)",
        "retained acq+rel (us)",
        "retained acq+touch (ms/MiB)"
    );
    for n in FOOTPRINTS {
        let runs = runs_for(n);
        let mib = (n / MIB) as f64;
        // The slow initialisation is the point: it is what `resize` on a fresh `std::vector<char>` did.
        #[allow(clippy::slow_vector_initialization)]
        let fresh = measure(runs, || {
            let start = Instant::now();
            let mut buffer: Vec<u8> = Vec::with_capacity(n);
            buffer.resize(n, 0);
            black_box(&mut buffer);
            drop(buffer);
            start.elapsed().as_secs_f64()
        });
        // Without the zero-fill: the mapping, its first-touch page faults and the unmap, which is what the
        // kernel charges even a library that never writes zeros itself.
        let len = host_memory::mapping_len(n).unwrap();
        let mapped = measure(runs, || {
            let start = Instant::now();
            let data = host_memory::map(len).unwrap();
            touch_pages(data.as_ptr(), len);
            // SAFETY: exactly the mapping made above, unused afterwards.
            unsafe { host_memory::unmap(data, len) };
            start.elapsed().as_secs_f64()
        });
        let warm = POOLS.acquire(agent, n).unwrap();
        touch_pages(warm.data.as_ptr(), warm.capacity);
        POOLS.release(agent, warm.data, warm.capacity, warm.loan).unwrap();
        let maps_before = host_memory::stats().maps;
        let retained = measure(runs, || {
            const CYCLES: usize = 1000;
            let start = Instant::now();
            for _ in 0..CYCLES {
                let lease = POOLS.acquire(agent, black_box(n)).unwrap();
                POOLS.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
            }
            start.elapsed().as_secs_f64() / CYCLES as f64
        });
        let retained_touch = measure(runs, || {
            let start = Instant::now();
            let lease = POOLS.acquire(agent, n).unwrap();
            touch_pages(lease.data.as_ptr(), n);
            POOLS.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
            start.elapsed().as_secs_f64()
        });
        let maps = host_memory::stats().maps - maps_before;
        assert_eq!(maps, 0, "a retained acquire mapped memory");
        println!(
            "{:>5} MiB  {:>9.4} [{:.4}, {:.4}]  {:>9.4} [{:.4}, {:.4}]  {:>7.3} [{:.3}, {:.3}]  {:>9.5} [{:.5}, {:.5}]",
            n / MIB,
            ms(fresh.0) / mib,
            ms(fresh.1) / mib,
            ms(fresh.2) / mib,
            ms(mapped.0) / mib,
            ms(mapped.1) / mib,
            ms(mapped.2) / mib,
            retained.0 * 1e6,
            retained.1 * 1e6,
            retained.2 * 1e6,
            ms(retained_touch.0) / mib,
            ms(retained_touch.1) / mib,
            ms(retained_touch.2) / mib,
        );
        println!(
            "           per dispatch: fresh zero-filled {:.1} ms, retained acquire+release {:.3} us (host maps in steady state: {maps})",
            ms(fresh.0),
            retained.0 * 1e6
        );
        POOLS.trim(agent, &mut no_unlock());
    }
    println!();
}

/// The first acquire of a footprint: a new mapping, then the first copy's page faults. Runs with and without
/// huge pages alternate (and swap order every run), so that both see the same state of the machine.
fn first_acquire(agent: Agent) {
    println!("== first acquire: map + first touch, transparent huge pages advised or not ==");
    println!(
        "THP setting: {} / defrag: {}",
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default().trim(),
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/defrag").unwrap_or_default().trim()
    );
    println!(
        "{:>9}  {:>6}  {:>38}  {:>38}  {:>11}",
        "footprint", "THP", "map + touch each page, ms/MiB", "map + write every byte, ms/MiB", "huge-backed"
    );
    println!("{:>9}  {:>6}  {:>38}  {:>38}", "", "", "median [min, p90, max]", "median [min, p90, max]");
    for n in FOOTPRINTS {
        let runs = if n >= 1024 * MIB { 7 } else { 15 };
        let mib = (n / MIB) as f64;
        let mut backed = [0usize; 2];
        let mut times = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
        for run in 0..runs {
            for step in 0..2 {
                let huge = (run + step) % 2 == 1;
                for write_all in [false, true] {
                    let start = Instant::now();
                    let lease = POOLS.acquire(agent, n).unwrap();
                    advise(lease.data.as_ptr(), lease.capacity, huge);
                    if write_all {
                        // SAFETY: the lease is at least `n` writable bytes.
                        unsafe { core::ptr::write_bytes(lease.data.as_ptr(), 0x5A, n) };
                    } else {
                        touch_pages(lease.data.as_ptr(), n);
                    }
                    times[huge as usize][write_all as usize].push(start.elapsed().as_secs_f64());
                    backed[huge as usize] = backed[huge as usize].max(anon_huge_bytes());
                    POOLS.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
                    POOLS.trim(agent, &mut no_unlock());
                }
            }
        }
        for huge in [false, true] {
            let stats = |mut v: Vec<f64>| {
                v.sort_by(|a, b| a.partial_cmp(b).unwrap());
                let at = |p: f64| ms(v[((v.len() - 1) as f64 * p).round() as usize]) / mib;
                format!("{:>7.4} [{:.4}, {:.4}, {:.4}]", at(0.5), at(0.0), at(0.9), at(1.0))
            };
            let [touch, write] = std::mem::take(&mut times[huge as usize]);
            println!(
                "{:>5} MiB  {:>6}  {:>38}  {:>38}  {:>7} MiB",
                n / MIB,
                if huge { "advise" } else { "off" },
                stats(touch),
                stats(write),
                backed[huge as usize] / MIB
            );
        }
    }
    println!();
}

/// The first acquire after the memory has sat free for a while: on a VM whose balloon driver reports free
/// memory to the hypervisor (free page reporting), free 2 MiB blocks are handed back after about two seconds and
/// the next touch faults them in again on the host. Runs only when asked for (`-- cold`): it sleeps.
fn cold_first_acquire(agent: Agent) {
    println!(
        "== first acquire of memory that sat free for 3 s (a profiler's first dispatch), map + write every byte =="
    );
    let reporting = std::fs::read_to_string("/sys/module/page_reporting/parameters/page_reporting_order").ok();
    println!(
        "free page reporting order: {}",
        reporting.as_deref().map_or("none (no balloon driver)", |order| order.trim())
    );
    for n in FOOTPRINTS {
        let mib = (n / MIB) as f64;
        let mut times = [Vec::new(), Vec::new()];
        for run in 0..4 {
            for step in 0..2 {
                let huge = (run + step) % 2 == 1;
                std::thread::sleep(std::time::Duration::from_secs(3));
                let start = Instant::now();
                let lease = POOLS.acquire(agent, n).unwrap();
                advise(lease.data.as_ptr(), lease.capacity, huge);
                // SAFETY: the lease is at least `n` writable bytes.
                unsafe { core::ptr::write_bytes(lease.data.as_ptr(), 0x5A, n) };
                times[huge as usize].push(ms(start.elapsed().as_secs_f64()) / mib);
                POOLS.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
                POOLS.trim(agent, &mut no_unlock());
            }
        }
        for huge in [false, true] {
            let v = &mut times[huge as usize];
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "{:>5} MiB  THP {:>6}: {:.3} ms/MiB median of {} [{:.3}, {:.3}]",
                n / MIB,
                if huge { "advise" } else { "off" },
                v[v.len() / 2],
                v.len(),
                v[0],
                v[v.len() - 1]
            );
        }
    }
    println!();
}

/// Steady-state acquire + release of page-backed blocks while the pool holds many idle blocks: its best fit
/// and its release both scan the agent's block table, so this is the size-independent worst case.
fn crowded_pool(agent: Agent) {
    println!("== steady-state acquire + release with a crowded pool (idle blocks of 8 KiB to 8 MiB) ==");
    for blocks in [10usize, 100, 1000] {
        let sizes: Vec<usize> = (0..blocks).map(|i| (8 << 10) << (i % 11)).collect();
        let leases: Vec<_> = sizes.iter().map(|&size| POOLS.acquire(agent, size).unwrap()).collect();
        for lease in leases {
            POOLS.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
        }
        let maps_before = host_memory::stats().maps;
        let (median, min, max) = measure(9, || {
            const CYCLES: usize = 10_000;
            let start = Instant::now();
            for i in 0..CYCLES {
                let lease = POOLS.acquire(agent, black_box(sizes[i % sizes.len()])).unwrap();
                POOLS.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
            }
            start.elapsed().as_secs_f64() / CYCLES as f64
        });
        println!(
            "{blocks:>5} idle blocks: acquire + release {:>6.0} ns [{:.0}, {:.0}] per cycle; host maps made: {}",
            median * 1e9,
            min * 1e9,
            max * 1e9,
            host_memory::stats().maps - maps_before
        );
        POOLS.trim(agent, &mut no_unlock());
    }
    println!();
}

/// 10,000 acquire/release cycles of 1 to 256-byte regions, one at a time and as a snapshot's worth held at once.
fn tiny_regions(agent: Agent) {
    println!("== tiny regions: 10,000 acquire/release cycles of 1 to 256 bytes ==");
    const CYCLES: usize = 10_000;
    // Warm-up: the first pass maps the slab chunks that every later one reuses.
    let cold = host_memory::stats().maps;
    let warm: Vec<_> = (1..=256).map(|size| POOLS.acquire(agent, size).unwrap()).collect();
    let warm_maps = host_memory::stats().maps - cold;
    for lease in warm {
        POOLS.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
    }
    let before = host_memory::stats();
    let one_at_a_time = measure(9, || {
        let start = Instant::now();
        for i in 0..CYCLES {
            let lease = POOLS.acquire(agent, black_box(i % 256 + 1)).unwrap();
            POOLS.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
        }
        start.elapsed().as_secs_f64() / CYCLES as f64
    });
    let mut held = Vec::with_capacity(256);
    let batched = measure(9, || {
        let start = Instant::now();
        for batch in 0..CYCLES / 250 {
            for i in 0..250 {
                held.push(POOLS.acquire(agent, black_box((batch * 7 + i) % 256 + 1)).unwrap());
            }
            for lease in held.drain(..) {
                POOLS.release(agent, lease.data, lease.capacity, lease.loan).unwrap();
            }
        }
        start.elapsed().as_secs_f64() / CYCLES as f64
    });
    let after = host_memory::stats();
    println!(
        "one at a time:           {:>6.1} ns [{:.1}, {:.1}] per acquire + release",
        one_at_a_time.0 * 1e9,
        one_at_a_time.1 * 1e9,
        one_at_a_time.2 * 1e9
    );
    println!(
        "250 held at once:        {:>6.1} ns [{:.1}, {:.1}] per acquire + release",
        batched.0 * 1e9,
        batched.1 * 1e9,
        batched.2 * 1e9
    );
    println!(
        "host maps: {} to warm up (slab chunks of 64 KiB), {} maps and {} unmaps in {} steady-state cycles",
        warm_maps,
        after.maps - before.maps,
        after.unmaps - before.unmaps,
        CYCLES * 9 * 2
    );
    POOLS.trim(agent, &mut no_unlock());
    println!();
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument runs matching sections only.
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    println!("staging benchmark: {} CPUs", std::thread::available_parallelism().map_or(0, |n| n.get()));
    println!();
    if wanted("dispatch") {
        per_dispatch_cost(Agent(0x51));
    }
    if wanted("first") {
        first_acquire(Agent(0x52));
    }
    // Sleeps for about two minutes: only when named.
    if filter.iter().any(|f| f == "cold") {
        cold_first_acquire(Agent(0x55));
    }
    if wanted("crowded") {
        crowded_pool(Agent(0x53));
    }
    if wanted("tiny") {
        tiny_regions(Agent(0x54));
    }
}
