//! The one reader of versioned structs: C structs that begin with `struct_size`, the size the caller compiled
//! them with. Later versions only append fields, so a caller built against an older header passes a shorter
//! struct, and the fields it does not have take their defaults.

use std::mem::size_of;

use kreplay_core::log::Level;

/// A struct the host passes in with a `struct_size` prefix. A new versioned struct is one `impl`; a new field
/// is appended to the struct and given its default in [`Versioned::defaults`].
///
/// # Safety
/// Implementors are `#[repr(C)]` structs whose first field is `struct_size: usize`, and whose every field is
/// valid for any bytes a C compiler writes for it (integers, pointers, `Option` of a function pointer, `bool`,
/// which C writes as 0 or 1).
pub(crate) unsafe trait Versioned: Sized {
    /// The smallest `struct_size` accepted: it covers the fields every version has.
    const MIN_SIZE: usize;
    /// What those fields are, for the log line of a short struct.
    const REQUIRED: &'static str;
    /// Where each version's last field ends, in ascending order, for a struct whose new fields may start inside
    /// the tail padding of an older version (a `u32` after a `u32` at an offset 4 mod 8): a caller's
    /// `struct_size` then covers padding that C never initialises, and only the bytes up to the largest end within
    /// it are read. Empty: every `struct_size` ends at a field (pointer-sized fields only).
    const VERSION_ENDS: &'static [usize] = &[];
    /// The value of every field that lies past a caller's `struct_size`.
    fn defaults() -> Self;
}

/// Reads the first `struct_size` bytes of `*value` over [`Versioned::defaults`]. NULL, or a `struct_size`
/// below `T::MIN_SIZE`: `None`, with a warning that names `function` and its `argument`.
///
/// # Safety
/// `value` must be NULL or point to at least `struct_size` readable bytes laid out as `T`.
pub(crate) unsafe fn read<T: Versioned>(function: &str, argument: &str, value: *const T) -> Option<T> {
    if value.is_null() {
        kreplay_core::log!(Level::Warning, "{function}: {argument} is NULL");
        return None;
    }
    // SAFETY: `value` is non-null and points at least to its `struct_size` field (caller's contract).
    let struct_size = unsafe { struct_size_of(value) };
    if struct_size < T::MIN_SIZE {
        kreplay_core::log!(
            Level::Warning,
            "{function}: struct_size {struct_size} does not cover {} ({} bytes)",
            T::REQUIRED,
            T::MIN_SIZE
        );
        return None;
    }
    let mut read = T::defaults();
    let len = covered::<T>(struct_size);
    // SAFETY: 1. the caller guarantees `struct_size` readable bytes at `value`, and `len` is at most that;
    // 2. `read` is a distinct local of at least `len` bytes; 3. every field of `T` is valid for any bytes a C
    // compiler writes for it (the trait's contract).
    unsafe { std::ptr::copy_nonoverlapping(value.cast::<u8>(), (&mut read as *mut T).cast::<u8>(), len) };
    Some(read)
}

/// How many bytes of a caller's struct of `struct_size` bytes are its fields: all of `T` for a caller as new as
/// this library or newer, else up to the end of the last version it covers (never its tail padding).
fn covered<T: Versioned>(struct_size: usize) -> usize {
    let len = struct_size.min(size_of::<T>());
    if len == size_of::<T>() {
        return len;
    }
    T::VERSION_ENDS.iter().rev().copied().find(|&end| end <= len).unwrap_or(len)
}

/// Reads the `struct_size` a caller put first in a versioned struct it passes for the library to fill.
///
/// # Safety
/// `ptr` must be non-null and point to at least a readable `size_t`.
pub(crate) unsafe fn struct_size_of<T>(ptr: *const T) -> usize {
    // SAFETY: forwarded from the caller; unaligned reads are fine for a host's odd packing.
    unsafe { ptr.cast::<usize>().read_unaligned() }
}

/// Writes to `out` the bytes of `value` that a caller's struct of `struct_size` bytes has room for (at most all
/// of `T`): a caller built against an older header gets the fields its struct has. `value`'s own `struct_size`
/// field is written as it is: set it to the caller's.
///
/// # Safety
/// `out` must be valid for writes of `struct_size` bytes.
pub(crate) unsafe fn write<T>(out: *mut T, struct_size: usize, value: &T) {
    let len = struct_size.min(size_of::<T>());
    // SAFETY: 1. `out` is valid for writes of `struct_size` bytes (caller's contract) and `len` is at most that;
    // 2. `value` is a distinct value of `size_of::<T>()` bytes, at least `len`.
    unsafe { std::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), out.cast::<u8>(), len) };
}
