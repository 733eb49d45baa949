//! The panic boundary: no unwinding crosses into C.
//!
//! Every export is written as the plain `#[unsafe(no_mangle)] pub extern "C" fn` that cbindgen and rustfmt
//! read, with one more attribute, `#[ffi_guard]` (the `kreplay-capi-macros` crate, under `capi/macros`). The
//! attribute wraps the body in [`run`], passing the function's name as its identifier spells it; what a call
//! returns after a caught panic comes from the return type ([`OnPanic`]), so no export spells out a default.
//!
//! Why this shape. hyper's `ffi_fn!` writes the whole export from inside a `macro_rules!` macro: the name comes
//! from the code, but the function only exists after expansion, so the header would need cbindgen's macro
//! expansion (a nightly compiler at every regeneration, and rustfmt never formats the bodies). rustls-ffi puts
//! `ffi_panic_boundary! { .. }` inside an ordinary function and takes the default from the return type, but
//! a macro in the body cannot know the function's name: it would have to be typed again by hand (and drift),
//! or be dug out of a type name at run time. An attribute has both: cbindgen sees an ordinary export (it
//! ignores attributes it does not know), the body is ordinary code for rustfmt, and the name and the default
//! come from the signature. The cost is a proc-macro crate, which depends on nothing but `proc_macro`.
//!
//! `#[ffi_guard(fast_path = check)]` answers before the boundary when `check()` returns `Some`: the
//! `kreplay_record_*` functions use it so that, while tracking is off, they cost one load and a return, with
//! no stack frame (the guarded body is then an out-of-line inner function).

use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use kreplay_core::log::Level;

pub(crate) use kreplay_capi_macros::ffi_guard;

/// What an export returns when its body panicked: its return type's "internal error".
pub(crate) trait OnPanic {
    /// The value returned after a caught panic.
    const ON_PANIC: Self;
}

impl OnPanic for () {
    const ON_PANIC: Self = ();
}

impl OnPanic for usize {
    const ON_PANIC: Self = 0;
}

impl OnPanic for bool {
    const ON_PANIC: Self = false;
}

/// The static strings exports return are never NULL: after a panic, the text of an internal error.
impl OnPanic for *const c_char {
    const ON_PANIC: Self = kreplay_core::Error::Internal.text().as_ptr();
}

/// Runs the body of the export `function` (its name, for the log line); a panic inside it is logged and
/// becomes `T::ON_PANIC`. Written by `#[ffi_guard]`, not by hand.
pub(crate) fn run<T: OnPanic>(function: &str, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(_) => {
            kreplay_core::log!(Level::Error, "{function}: internal error (a panic was caught at the C boundary)");
            T::ON_PANIC
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;
    use std::sync::Mutex;

    use super::*;
    use crate::status::{KREPLAY_STATUS_INTERNAL_ERROR, KREPLAY_STATUS_NOT_FOUND, kreplay_status_t};

    static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

    fn keep(_: [*mut (); 2], _: Level, message: &CStr) {
        LINES.lock().unwrap().push(message.to_string_lossy().into_owned());
    }

    fn logged(text: &str) -> bool {
        LINES.lock().unwrap().iter().any(|line| line.contains(text))
    }

    #[ffi_guard]
    extern "C" fn kreplay_example_that_panics(panic: bool) -> kreplay_status_t {
        if panic {
            panic!("test");
        }
        KREPLAY_STATUS_NOT_FOUND
    }

    #[ffi_guard]
    extern "C" fn kreplay_example_string() -> *const c_char {
        panic!("test")
    }

    fn never() -> Option<usize> {
        None
    }

    fn always() -> Option<usize> {
        Some(7)
    }

    #[ffi_guard(fast_path = never)]
    extern "C" fn kreplay_example_slow(r#type: usize, panic: bool) -> usize {
        if panic {
            panic!("test");
        }
        r#type + 1
    }

    #[ffi_guard(fast_path = always)]
    extern "C" fn kreplay_example_fast(_value: usize) -> usize {
        panic!("the fast path answers first")
    }

    #[test]
    fn a_panic_becomes_the_return_types_default_and_a_line_naming_the_function() {
        kreplay_core::log::install(
            Some(kreplay_core::log::ContextSink { deliver: keep, context: [std::ptr::null_mut(); 2] }),
            Level::Error,
            true,
        );
        assert_eq!(kreplay_example_that_panics(false), KREPLAY_STATUS_NOT_FOUND);
        assert_eq!(kreplay_example_that_panics(true), KREPLAY_STATUS_INTERNAL_ERROR);
        assert!(logged("kreplay_example_that_panics: internal error"));
        // SAFETY: the default of a string export is a static NUL-terminated string.
        assert_eq!(unsafe { CStr::from_ptr(kreplay_example_string()) }, c"internal error");
        assert_eq!(kreplay_example_slow(1, false), 2);
        assert_eq!(kreplay_example_slow(1, true), 0);
        assert!(logged("kreplay_example_slow: internal error"));
        assert_eq!(kreplay_example_fast(1), 7);
    }
}
