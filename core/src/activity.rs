//! Calls in flight: which threads are inside the library, so that `finalize` can wait for them to leave and a
//! call made from inside a device op or logger (re-entry) can be told apart from an ordinary one.
//!
//! Each thread inside the library holds a slot keyed by its thread id, with a depth that counts how many
//! kreplay calls it is nested in. The table is searched from a hash of the id, so entering costs a few atomic
//! operations and never allocates (the `record_*` paths use it too).

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::lock::Backoff;

/// Threads that can be inside the library at once; more wait for a slot.
pub const MAX_THREADS: usize = 256;

struct ThreadSlot {
    /// `pthread_self()` of the holder, 0 when free.
    thread: AtomicUsize,
    /// Nesting depth; only the holder changes it.
    depth: AtomicUsize,
}

/// The calls in flight and the finalize flag they check.
pub struct Activity {
    slots: [ThreadSlot; MAX_THREADS],
    finalized: AtomicBool,
}

/// Proof that the calling thread is inside the library; leaving is dropping it.
pub struct Call<'a> {
    activity: &'a Activity,
    index: usize,
    nested: bool,
}

fn current_thread() -> usize {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    let id = unsafe { libc::pthread_self() } as usize;
    id.max(1)
}

fn home(thread: usize) -> usize {
    ((thread as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - MAX_THREADS.trailing_zeros())) as usize
}

impl Activity {
    /// No call in flight, not finalized.
    pub const fn new() -> Self {
        Activity {
            slots: [const { ThreadSlot { thread: AtomicUsize::new(0), depth: AtomicUsize::new(0) } }; MAX_THREADS],
            finalized: AtomicBool::new(false),
        }
    }

    /// Whether `finalize` has begun.
    #[inline]
    pub fn is_finalized(&self) -> bool {
        self.finalized.load(Ordering::Acquire)
    }

    /// Enters the library; `None` once finalize has begun (the call must do nothing).
    pub fn enter(&self) -> Option<Call<'_>> {
        let thread = current_thread();
        let start = home(thread);
        let mut backoff = Backoff::new();
        loop {
            for probe in 0..MAX_THREADS {
                let index = (start + probe) % MAX_THREADS;
                let slot = &self.slots[index];
                let holder = slot.thread.load(Ordering::Acquire);
                if holder == thread {
                    // Re-entry: this thread holds the slot, and only the holder changes the depth.
                    slot.depth.store(slot.depth.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                    return self.admitted(index, true);
                }
                if holder == 0 && slot.thread.compare_exchange(0, thread, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
                    slot.depth.store(1, Ordering::Relaxed);
                    return self.admitted(index, false);
                }
            }
            // Every slot is held by another thread: wait for one to leave.
            backoff.snooze();
        }
    }

    fn admitted(&self, index: usize, nested: bool) -> Option<Call<'_>> {
        let call = Call { activity: self, index, nested };
        // SeqCst pairs with `finalize`: either finalize sees this slot held, or this load sees the flag.
        if self.finalized.load(Ordering::SeqCst) { None } else { Some(call) }
    }

    fn leave(&self, index: usize) {
        let slot = &self.slots[index];
        // Only the holder changes the depth: no read-modify-write needed.
        let depth = slot.depth.load(Ordering::Relaxed) - 1;
        slot.depth.store(depth, Ordering::Relaxed);
        if depth == 0 {
            slot.thread.store(0, Ordering::Release);
        }
    }

    /// From now on every call finds the library finalized. Waits until every other thread has left, unless
    /// the calling thread is itself inside a call (finalize from a device op or logger): then it cannot wait
    /// for callers that may be waiting on it, and returns at once. Returns whether it waited.
    pub fn finalize(&self) -> bool {
        self.finalized.store(true, Ordering::SeqCst);
        if self.is_current_thread_inside() {
            return false;
        }
        for slot in &self.slots {
            let mut backoff = Backoff::new();
            while slot.thread.load(Ordering::SeqCst) != 0 {
                backoff.snooze();
            }
        }
        true
    }

    /// Whether the calling thread is inside a call (so a call it makes now is nested: made from a device op
    /// or a logger). Scans the table, so it is for the rare calls that must not wait (logger swap, finalize).
    pub fn is_current_thread_inside(&self) -> bool {
        let me = current_thread();
        self.slots.iter().any(|slot| slot.thread.load(Ordering::Acquire) == me)
    }

    /// Calls in flight (threads inside the library), for tests and statistics.
    pub fn threads_inside(&self) -> usize {
        self.slots.iter().filter(|slot| slot.thread.load(Ordering::Acquire) != 0).count()
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

impl Call<'_> {
    /// Whether this call was made from inside another kreplay call on the same thread (from a device op or a
    /// logger): such a call must never wait for work that its own thread is in the middle of.
    pub fn is_nested(&self) -> bool {
        self.nested
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.activity.leave(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool as Flag;
    use std::time::{Duration, Instant};

    #[test]
    fn nested_calls_are_recognised_and_the_slot_is_freed_on_the_way_out() {
        let activity = Activity::new();
        assert!(!activity.is_current_thread_inside());
        let outer = activity.enter().unwrap();
        assert!(!outer.is_nested() && activity.is_current_thread_inside());
        let inner = activity.enter().unwrap();
        assert!(inner.is_nested());
        drop(inner);
        assert_eq!(activity.threads_inside(), 1);
        drop(outer);
        assert_eq!(activity.threads_inside(), 0);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "threads waiting on each other with back-off sleeps: minutes under Miri; `cargo test` runs it natively"
    )]
    fn finalize_waits_for_a_call_in_flight_and_refuses_new_ones() {
        let activity = Arc::new(Activity::new());
        let inside = Arc::new(Flag::new(false));
        let worker = {
            let (activity, inside) = (activity.clone(), inside.clone());
            std::thread::spawn(move || {
                let call = activity.enter().unwrap();
                inside.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(if cfg!(miri) { 5 } else { 100 }));
                drop(call);
                Instant::now()
            })
        };
        while !inside.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        assert!(activity.finalize(), "finalize from outside waits");
        let returned = Instant::now();
        let left = worker.join().unwrap();
        assert!(left <= returned, "finalize returned before the call in flight left");
        assert!(activity.enter().is_none());
    }

    #[test]
    fn finalize_from_inside_a_call_does_not_wait_for_itself() {
        let activity = Activity::new();
        let call = activity.enter().unwrap();
        assert!(!activity.finalize());
        drop(call);
        assert!(activity.enter().is_none());
    }
}
