//! Allocations that report failure instead of aborting the process (stable Rust has no `Box::try_new`).

use alloc::boxed::Box;
use core::alloc::Layout;

/// Allocates a box, or `None` when the global allocator fails.
pub fn try_box<T>(value: T) -> Option<Box<T>> {
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
