//! Routing the library's log messages to the host.

use std::ffi::{CStr, c_char, c_void};

use kreplay_core::log::{self, Level};
use spin::RwLock;

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

/// Receives one message: `message` is `length` bytes, NUL-terminated, without a newline, valid only during
/// the call. It may be called from any thread, and must not call back into kreplay.
pub type kreplay_log_fn = Option<
    unsafe extern "C" fn(user_data: *mut c_void, level: kreplay_log_level_t, message: *const c_char, length: usize),
>;

#[derive(Copy, Clone)]
struct HostSink {
    function: unsafe extern "C" fn(*mut c_void, kreplay_log_level_t, *const c_char, usize),
    user_data: usize,
}

static HOST_SINK: RwLock<Option<HostSink>> = RwLock::new(None);

fn forward(level: Level, message: &CStr) {
    let Some(sink) = *HOST_SINK.read() else { return };
    let level = match level {
        Level::Error => kreplay_log_level_t::KREPLAY_LOG_ERROR,
        Level::Warning => kreplay_log_level_t::KREPLAY_LOG_WARNING,
        Level::Info => kreplay_log_level_t::KREPLAY_LOG_INFO,
        Level::Trace => kreplay_log_level_t::KREPLAY_LOG_TRACE,
    };
    // SAFETY: the host installed this function with `kreplay_set_logger` and promised it may be called from
    // any thread with its user data; the message is valid for the duration of the call.
    unsafe { (sink.function)(sink.user_data as *mut c_void, level, message.as_ptr(), message.count_bytes()) };
}

/// Routes messages at or below `max_level` to `fn`, with `user_data` as its first argument. A NULL `fn`
/// restores the default, which writes ERROR and WARNING lines to stderr. The library never reads the
/// environment to decide this. Thread-safe; messages being delivered concurrently may still reach the
/// previous logger.
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_set_logger(r#fn: kreplay_log_fn, user_data: *mut c_void, max_level: RawLogLevel) {
    crate::boundary::guard("kreplay_set_logger", (), || {
        *HOST_SINK.write() = r#fn.map(|function| HostSink { function, user_data: user_data as usize });
        log::set_sink(r#fn.map(|_| forward as log::Sink), Level::from_raw(max_level.0));
    })
}
