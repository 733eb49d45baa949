//! A monotonic clock for phase timings, without `std`.

/// Nanoseconds on the monotonic clock.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always supported on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// Nanoseconds since `start_ns`.
pub fn since(start_ns: u64) -> u64 {
    now_ns().saturating_sub(start_ns)
}
