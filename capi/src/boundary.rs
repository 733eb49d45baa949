//! The panic boundary: no unwinding crosses into C.

use std::panic::{AssertUnwindSafe, catch_unwind};

use kreplay_core::log::Level;

/// Runs `body`; a panic inside it is logged and becomes `default`.
pub(crate) fn guard<T>(function: &str, default: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(_) => {
            kreplay_core::log!(Level::Error, "{function}: internal error (a panic was caught at the C boundary)");
            default
        }
    }
}
