//! The panic boundary (no unwinding crosses into C), and whether a call is nested in a device op or a logger.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

use kreplay_core::log::Level;

thread_local! {
    /// Logger deliveries this thread is inside (some messages come from C-boundary code outside any engine call).
    static LOGGING: Cell<u32> = const { Cell::new(0) };
}

/// Wraps the body of an exported function: `ffi_guard!(default, || body)`. A panic inside the body is logged
/// with the function's name, taken from the code, and the call returns `default`.
macro_rules! ffi_guard {
    ($default:expr, $body:expr) => {{
        fn here() {}
        // The name is worked out only if the body panics: the record paths pay nothing for it.
        $crate::boundary::guard_named(
            || $crate::boundary::enclosing_function(::std::any::type_name_of_val(&here)),
            $default,
            $body,
        )
    }};
}
pub(crate) use ffi_guard;

/// The name of the function a `here` marker was defined in: `crate::module::function::here` gives `function`.
/// A helper named `out_of_line` nested in an exported function (to keep a fast path free of the guard) counts
/// as that function.
pub(crate) const fn enclosing_function(marker: &'static str) -> &'static str {
    const MARKER: &[u8] = b"::here";
    const HELPER: &[u8] = b"::out_of_line";
    let bytes = marker.as_bytes();
    let mut end = bytes.len();
    if ends_with(bytes, end, MARKER) {
        end -= MARKER.len();
    }
    if ends_with(bytes, end, HELPER) {
        end -= HELPER.len();
    }
    let mut start = end;
    while start >= 2 && !(bytes[start - 1] == b':' && bytes[start - 2] == b':') {
        start -= 1;
    }
    if start < 2 {
        start = 0;
    }
    let (_, tail) = bytes.split_at(start);
    let (name, _) = tail.split_at(end - start);
    match std::str::from_utf8(name) {
        Ok(name) => name,
        Err(_) => marker,
    }
}

const fn ends_with(bytes: &[u8], end: usize, suffix: &[u8]) -> bool {
    if end < suffix.len() {
        return false;
    }
    let mut i = 0;
    while i < suffix.len() {
        if bytes[end - suffix.len() + i] != suffix[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Runs `body` as an exported function; a panic inside it is logged with `function()`'s name (asked for only
/// then) and becomes `default`. Use [`ffi_guard!`], which names the function from the code.
pub(crate) fn guard_named<'n, T>(function: impl FnOnce() -> &'n str, default: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(_) => {
            let function = function();
            kreplay_core::log!(Level::Error, "{function}: internal error (a panic was caught at the C boundary)");
            default
        }
    }
}

/// Whether the calling thread is inside another kreplay call or a logger delivery (it was called from a device
/// op or a logger): such a call must not wait for anything that thread's outer call may be holding up. The
/// engine's calls-in-flight table already knows about the first; only logger deliveries are counted here.
pub(crate) fn is_nested() -> bool {
    crate::ENGINE.is_called_from_inside() || LOGGING.with(Cell::get) > 0
}

/// A logger delivery in progress on this thread.
pub(crate) struct InsideLogger;

impl InsideLogger {
    pub(crate) fn enter() -> Self {
        LOGGING.with(|count| count.set(count.get().saturating_add(1)));
        InsideLogger
    }
}

impl Drop for InsideLogger {
    fn drop(&mut self) {
        LOGGING.with(|count| count.set(count.get().saturating_sub(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_names_the_function_it_is_used_in() {
        fn kreplay_example() -> &'static str {
            fn here() {}
            enclosing_function(std::any::type_name_of_val(&here))
        }
        assert_eq!(kreplay_example(), "kreplay_example");
        assert_eq!(enclosing_function("kreplay_capi::snapshot::kreplay_snap::here"), "kreplay_snap");
        assert_eq!(enclosing_function("kreplay_snap::here"), "kreplay_snap");
        assert_eq!(enclosing_function("c::tracking::kreplay_record_free::out_of_line::here"), "kreplay_record_free");
    }

    #[test]
    fn a_panic_inside_the_guard_becomes_the_default() {
        let value = ffi_guard!(7, || -> i32 { panic!("test") });
        assert_eq!(value, 7);
    }
}
