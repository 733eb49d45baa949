//! Routing the library's log messages to the host, and whether a call is nested in a device op or a logger.

use std::cell::Cell;
use std::ffi::{CStr, c_char, c_void};

use kreplay_core::log::{self, Level};

use crate::boundary::ffi_guard;
use crate::engine::engine;
use crate::enum_table::enum_table;

/// Severity of a message.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum kreplay_log_level_t {
    /// Something failed.
    KREPLAY_LOG_ERROR = 0,
    /// Something will not be done as asked (a declined snapshot, a skipped region).
    KREPLAY_LOG_WARNING = 1,
    /// One line per snapshot and per restore, with sizes and phase timings.
    KREPLAY_LOG_INFO = 2,
    /// Detail for debugging.
    KREPLAY_LOG_TRACE = 3,
}

/// A `kreplay_log_level_t` as it arrives from C; the header spells it `kreplay_log_level_t`.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RawLogLevel(pub u32);

enum_table! {
    kreplay_log_level_t <=> Level;
    KREPLAY_LOG_ERROR = Level::Error,
    KREPLAY_LOG_WARNING = Level::Warning,
    KREPLAY_LOG_INFO = Level::Info,
    KREPLAY_LOG_TRACE = Level::Trace,
}

/// Receives one message: `message` is `length` bytes, NUL-terminated, without a newline, valid only during
/// the call. It may be called from any thread, never while the library holds a lock, and may call any kreplay
/// function (see `kreplay_set_logger`).
pub type kreplay_log_fn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, level: kreplay_log_level_t, message: *const c_char, length: usize),
>;

type HostFn = unsafe extern "C" fn(*mut c_void, kreplay_log_level_t, *const c_char, usize);

fn forward(context: [*mut (); 2], level: Level, message: &CStr) {
    // SAFETY: `kreplay_set_logger` stored the host's non-null function as the first context word; a function
    // pointer round-trips through a data pointer unchanged on every supported platform.
    let function = unsafe { std::mem::transmute::<*mut (), HostFn>(context[0]) };
    let level = kreplay_log_level_t::from(level);
    let _inside = InsideLogger::enter();
    // SAFETY: the host installed this function with `kreplay_set_logger` and promised it may be called from
    // any thread with its user data until a later `kreplay_set_logger` returns; the message is valid for the
    // duration of the call.
    unsafe { function(context[1].cast(), level, message.as_ptr(), message.count_bytes()) };
}

/// Routes messages at or below `max_level` to `fn`, with `user_data` as its first argument; the logger and its
/// level change together, so each message is filtered by the level of the logger that receives it. A NULL
/// `fn` restores the default, which writes ERROR and WARNING lines to stderr. The library never reads the
/// environment to decide this. Thread-safe.
///
/// When it returns, deliveries in progress to the previous logger (on other threads) are over and the previous
/// logger is never called again: its `user_data` may be freed. The library never calls a logger while
/// holding a lock, so a logger may call any kreplay function, including this one. Called from inside a logger
/// or a device op (on a thread that is inside a kreplay call), it switches loggers at once and returns without
/// waiting, since the delivery it would wait for may be its own or may be waiting for its thread: deliveries
/// that began before the switch may still end in the previous logger, so free its `user_data` only after a
/// call made from outside. After `kreplay_finalize` it does nothing and no logger is called again.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_set_logger(r#fn: kreplay_log_fn, user_data: *mut c_void, max_level: RawLogLevel) {
    let sink =
        r#fn.map(|function| log::ContextSink { deliver: forward, context: [function as *mut (), user_data.cast()] });
    // Values above `KREPLAY_LOG_TRACE` mean everything.
    log::install(sink, Level::from_raw(max_level.0), !is_nested());
}

thread_local! {
    /// Logger deliveries this thread is inside (some messages come from C-boundary code outside any engine call).
    static LOGGING: Cell<u32> = const { Cell::new(0) };
}

/// Whether the calling thread is inside another kreplay call or a logger delivery (it was called from a device
/// op or a logger): such a call must not wait for anything that thread's outer call may be holding up. The
/// engine's calls-in-flight table already knows about the first; only logger deliveries are counted here.
pub(crate) fn is_nested() -> bool {
    engine().is_called_from_inside() || LOGGING.with(Cell::get) > 0
}

/// A logger delivery in progress on this thread.
struct InsideLogger;

impl InsideLogger {
    fn enter() -> Self {
        LOGGING.with(|count| count.set(count.get().saturating_add(1)));
        InsideLogger
    }
}

impl Drop for InsideLogger {
    fn drop(&mut self) {
        LOGGING.with(|count| count.set(count.get().saturating_sub(1)));
    }
}
