//! A spin-based reader-writer lock whose waiters back off from spinning to yielding to sleeping.
//!
//! A restore holds the inventory's read lock while it copies a region, and on real hardware a 1 GiB copy
//! takes tens of milliseconds. A free waiting for that must not burn a core, so waiters spin briefly, then
//! yield, then sleep in growing steps up to a millisecond. Writers take the lock in two steps (upgradeable,
//! then write) so that a waiting writer stops new readers from coming in: a stream of restores cannot starve a
//! free.

use core::ops::{Deref, DerefMut};

/// The guard types of [`RwLock`].
pub type ReadGuard<'a, T> = spin::RwLockReadGuard<'a, T>;
/// The guard types of [`RwLock`].
pub type WriteGuard<'a, T> = spin::RwLockWriteGuard<'a, T>;

/// A reader-writer lock for `no_std` with a yielding back-off.
pub struct RwLock<T>(spin::RwLock<T>);

impl<T> RwLock<T> {
    /// A new, unlocked lock.
    pub const fn new(value: T) -> Self {
        RwLock(spin::RwLock::new(value))
    }

    /// Shared access; waits (with back-off) while a writer holds or waits for the lock.
    pub fn read(&self) -> ReadGuard<'_, T> {
        let mut backoff = Backoff::new();
        loop {
            if let Some(guard) = self.0.try_read() {
                return guard;
            }
            backoff.snooze();
        }
    }

    /// Exclusive access; once waiting, it keeps new readers out.
    pub fn write(&self) -> WriteGuard<'_, T> {
        let mut backoff = Backoff::new();
        let mut upgradeable = loop {
            if let Some(guard) = self.0.try_upgradeable_read() {
                break guard;
            }
            backoff.snooze();
        };
        loop {
            match upgradeable.try_upgrade() {
                Ok(guard) => return guard,
                Err(guard) => upgradeable = guard,
            }
            backoff.snooze();
        }
    }
}

/// A spin mutex with the same back-off, for the staging pools and small registries.
pub struct Mutex<T>(spin::mutex::SpinMutex<T>);

/// The guard type of [`Mutex`].
pub struct MutexGuard<'a, T>(spin::mutex::SpinMutexGuard<'a, T>);

impl<T> Mutex<T> {
    /// A new, unlocked mutex.
    pub const fn new(value: T) -> Self {
        Mutex(spin::mutex::SpinMutex::new(value))
    }

    /// Exclusive access, with back-off while another thread holds it.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        let mut backoff = Backoff::new();
        loop {
            if let Some(guard) = self.0.try_lock() {
                return MutexGuard(guard);
            }
            backoff.snooze();
        }
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// Exponential back-off: spin, then `sched_yield`, then sleep from 20 us doubling up to 1 ms.
///
/// The yield phase is long (64 yields, tens of microseconds) because on a loaded machine the holder of a short
/// critical section (a record) is often just preempted: yielding lets it run, and sleeping that early would
/// stall the waiter for far longer than the section. Only a wait that outlasts the yields (a restore copying a
/// large region) goes to sleep.
pub struct Backoff {
    step: u32,
}

const SPIN_STEPS: u32 = 7;
const YIELD_STEPS: u32 = SPIN_STEPS + 64;
const MAX_SLEEP_NS: i64 = 1_000_000;

impl Backoff {
    /// A fresh back-off at its first (shortest) step.
    pub const fn new() -> Self {
        Backoff { step: 0 }
    }

    /// Waits a little longer than the previous call did.
    pub fn snooze(&mut self) {
        if self.step < SPIN_STEPS {
            for _ in 0..(1u32 << self.step) {
                core::hint::spin_loop();
            }
        } else if self.step < YIELD_STEPS {
            // SAFETY: sched_yield takes no arguments and cannot fail on Linux.
            unsafe { libc::sched_yield() };
        } else {
            let shift = (self.step - YIELD_STEPS).min(6);
            let ns = (20_000i64 << shift).min(MAX_SLEEP_NS);
            let ts = libc::timespec { tv_sec: 0, tv_nsec: ns as _ };
            // SAFETY: `ts` is a valid timespec; the remaining-time output is not wanted (NULL is allowed), and
            // an early wake-up by a signal only shortens the wait.
            unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
        }
        self.step = self.step.saturating_add(1);
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    fn thread_cpu_ns() -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: valid out pointer; CLOCK_THREAD_CPUTIME_ID is supported on Linux.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    #[test]
    #[cfg_attr(miri, ignore = "measures thread CPU time, which Miri does not model")]
    fn a_writer_waits_for_a_long_read_without_spinning_a_core_then_proceeds() {
        let lock = Arc::new(RwLock::new(0u64));
        let reading = Arc::new(AtomicBool::new(false));
        let reader = {
            let (lock, reading) = (lock.clone(), reading.clone());
            std::thread::spawn(move || {
                let guard = lock.read();
                reading.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(200));
                *guard
            })
        };
        while !reading.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
        let (start, cpu_start) = (Instant::now(), thread_cpu_ns());
        *lock.write() += 1;
        let (waited, cpu) = (start.elapsed(), thread_cpu_ns() - cpu_start);
        assert_eq!(reader.join().unwrap(), 0, "the reader saw the value from before the write");
        assert_eq!(*lock.read(), 1);
        assert!(waited >= Duration::from_millis(150), "the writer did not wait for the reader: {waited:?}");
        assert!(
            (cpu as f64) < 0.25 * waited.as_nanos() as f64,
            "the waiting writer used {cpu} ns of CPU in {waited:?}"
        );
    }

    #[test]
    fn a_waiting_writer_keeps_new_readers_out() {
        let lock = Arc::new(RwLock::new(0u32));
        let first = lock.read();
        let writer = {
            let lock = lock.clone();
            std::thread::spawn(move || *lock.write() = 7)
        };
        // Wait until the writer has announced itself (the upgradeable bit blocks new readers).
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock.0.try_read().is_some() {
            assert!(Instant::now() < deadline, "the writer never started waiting");
            std::thread::yield_now();
        }
        drop(first);
        writer.join().unwrap();
        assert_eq!(*lock.read(), 7);
    }
}
