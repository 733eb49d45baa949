//! The installed sets of device ops and their lifetimes.
//!
//! `configure` may replace the ops while calls are in flight and while retained storage is page-locked or
//! allocated through the old set. Each set therefore lives in a slot with a user count: a call in progress
//! holds one use ([`OpsRef`]), and every block of storage locked or allocated through a set holds one until it
//! is unlocked or freed through that same set. A replaced set is dropped (a C host's `release` op runs) by
//! whichever release brings its count to zero, outside every lock.

use core::cell::UnsafeCell;
use core::ops::Deref;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::lock::Mutex;

/// Sets of ops alive at once: the current one and replaced ones still in use.
pub const MAX_OPS_SETS: usize = 8;

/// Bit of a slot's state: replaced by a later `configure`; its count only goes down from here.
const RETIRED: usize = 1 << (usize::BITS - 1);
/// Bit of a slot's state: the slot holds a set of ops (the low bits count its uses).
const PRESENT: usize = RETIRED >> 1;
/// State of a slot that holds no ops: zero, so that an engine in a `static` starts in `.bss`, not as tens of
/// megabytes of initialised data in every host that links the library.
const EMPTY: usize = 0;
/// State of a slot whose ops are being dropped: neither `get` nor `install` touches it.
const FREEING: usize = RETIRED | 1;

/// A slot: `state` is `PRESENT | count`, or `PRESENT | RETIRED | count`, or `FREEING`, or `EMPTY`.
///
/// # Invariants
/// `ops` is `Some` exactly while `state` has `PRESENT` or is `FREEING`; it is written only while the slot is
/// `EMPTY` (under the table's configure lock) or by the one thread that moved the state to `FREEING`.
struct Slot<O> {
    state: AtomicUsize,
    ops: UnsafeCell<Option<O>>,
}

/// The ops table of an engine.
pub struct OpsTable<O> {
    slots: [Slot<O>; MAX_OPS_SETS],
    /// Index + 1 of the current set; 0 before the first `configure`.
    current: AtomicUsize,
    configuring: Mutex<()>,
}

// SAFETY: the ops are `Send + Sync` (the `DeviceOps` bound at every use) and each slot's `UnsafeCell` is accessed
// under the protocol in `Slot`'s invariants.
unsafe impl<O: Send + Sync> Sync for OpsTable<O> {}

/// One use of a set of ops, for the length of a call.
pub struct OpsRef<'a, O> {
    table: &'a OpsTable<O>,
    index: usize,
}

impl<O> OpsTable<O> {
    /// No ops installed.
    pub const fn new() -> Self {
        OpsTable {
            slots: [const { Slot { state: AtomicUsize::new(EMPTY), ops: UnsafeCell::new(None) } }; MAX_OPS_SETS],
            current: AtomicUsize::new(0),
            configuring: Mutex::new(()),
        }
    }

    /// Installs `ops` as the current set. The previous set is dropped once nothing uses it.
    /// `CapacityExceeded` when [`MAX_OPS_SETS`] replaced sets are all still in use.
    pub fn install(&self, ops: O) -> Result<()> {
        let retired = {
            let _configuring = self.configuring.lock();
            let Some(index) = self.slots.iter().position(|slot| slot.state.load(Ordering::Acquire) == EMPTY) else {
                return Err(Error::CapacityExceeded);
            };
            // SAFETY: the slot is EMPTY and we hold the configure lock, so no one else reads or writes `ops`.
            unsafe { *self.slots[index].ops.get() = Some(ops) };
            self.slots[index].state.store(PRESENT, Ordering::Release);
            let previous = self.current.swap(index + 1, Ordering::AcqRel);
            previous.checked_sub(1)
        };
        if let Some(previous) = retired {
            let before = self.slots[previous].state.fetch_or(RETIRED, Ordering::AcqRel);
            if before == PRESENT {
                self.free_if_unused(previous);
            }
        }
        Ok(())
    }

    /// A use of the current set; `NotConfigured` before the first `install`.
    pub fn get(&self) -> Result<OpsRef<'_, O>> {
        loop {
            let index = self.current.load(Ordering::Acquire).checked_sub(1).ok_or(Error::NotConfigured)?;
            let slot = &self.slots[index];
            let mut state = slot.state.load(Ordering::Acquire);
            while state & RETIRED == 0 && state & PRESENT != 0 {
                match slot.state.compare_exchange_weak(state, state + 1, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Ok(OpsRef { table: self, index }),
                    Err(now) => state = now,
                }
            }
            // Replaced between the two loads: take the new current set.
        }
    }

    /// Drops one use of slot `index`; the last use of a replaced set drops it.
    fn put(&self, index: usize) {
        let before = self.slots[index].state.fetch_sub(1, Ordering::AcqRel);
        if before == PRESENT | RETIRED | 1 {
            self.free_if_unused(index);
        }
    }

    fn free_if_unused(&self, index: usize) {
        let slot = &self.slots[index];
        if slot.state.compare_exchange(PRESENT | RETIRED, FREEING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            // SAFETY: this thread moved the slot out of RETIRED with no user left, and into a state that no `get`
            // increments and no `install` reuses, so it alone touches `ops` now.
            let ops = unsafe { (*slot.ops.get()).take() };
            // Dropping may call the host (a C `release` op): no lock is held here.
            drop(ops);
            slot.state.store(EMPTY, Ordering::Release);
        }
    }
}

impl<O> Default for OpsTable<O> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a, O> OpsRef<'a, O> {
    /// A lasting use of this set for storage locked or allocated through it, to be given back with
    /// [`OpsTable::release_hold`] after the storage is unlocked or freed through [`OpsTable::held`].
    pub fn hold(&self) -> OpsHold {
        self.table.slots[self.index].state.fetch_add(1, Ordering::AcqRel);
        OpsHold(self.index as u8)
    }
}

/// A lasting use of one set of ops (see [`OpsRef::hold`]): plain data, stored with the storage it pays for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OpsHold(u8);

impl<O> OpsTable<O> {
    /// The set a hold refers to.
    pub fn held(&self, hold: OpsHold) -> &O {
        // SAFETY: a hold keeps the slot's count above zero, so its ops stay `Some` and unchanged (invariants).
        unsafe { (*self.slots[hold.0 as usize].ops.get()).as_ref() }.expect("a held set of ops is present")
    }

    /// Gives a hold back; the last use of a replaced set drops it.
    pub fn release_hold(&self, hold: OpsHold) {
        self.put(hold.0 as usize);
    }
}

impl<O> Deref for OpsRef<'_, O> {
    type Target = O;
    fn deref(&self) -> &O {
        // SAFETY: this use keeps the slot's count above zero, so its ops stay `Some` and unchanged.
        unsafe { (*self.table.slots[self.index].ops.get()).as_ref() }.expect("a used set of ops is present")
    }
}

impl<O> Drop for OpsRef<'_, O> {
    fn drop(&mut self) {
        self.table.put(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize as Counter;

    struct Tracked(Arc<Counter>, u32);
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_replaced_set_is_dropped_only_after_its_last_use_and_hold() {
        let dropped = Arc::new(Counter::new(0));
        let table = OpsTable::new();
        assert!(table.get().is_err());
        table.install(Tracked(dropped.clone(), 1)).unwrap();
        let call = table.get().unwrap();
        let hold = call.hold();
        table.install(Tracked(dropped.clone(), 2)).unwrap();
        assert_eq!(table.get().unwrap().1, 2, "new calls use the new set");
        assert_eq!(call.1, 1, "a call in flight keeps its set");
        drop(call);
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "storage still held through the old set");
        assert_eq!(table.held(hold).1, 1);
        table.release_hold(hold);
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        table.install(Tracked(dropped.clone(), 3)).unwrap();
        assert_eq!(dropped.load(Ordering::SeqCst), 2, "an unused set is dropped at once");
    }

    #[test]
    fn too_many_sets_in_use_are_refused_not_overwritten() {
        let dropped = Arc::new(Counter::new(0));
        let table = OpsTable::new();
        let mut holds = Vec::new();
        for i in 0..MAX_OPS_SETS as u32 {
            table.install(Tracked(dropped.clone(), i)).unwrap();
            holds.push(table.get().unwrap().hold());
        }
        assert_eq!(table.install(Tracked(dropped.clone(), 99)).err(), Some(Error::CapacityExceeded));
        // The refused set was dropped on the way out, the held ones were not.
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        for hold in holds {
            table.release_hold(hold);
        }
        table.install(Tracked(dropped.clone(), 100)).unwrap();
        assert_eq!(table.get().unwrap().1, 100);
    }
}
