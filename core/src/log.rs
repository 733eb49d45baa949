//! Log routing. Messages are formatted into a fixed buffer on the stack (no allocation) and handed to one
//! sink; the default sink writes errors and warnings to stderr. The library never reads the environment.

use core::ffi::CStr;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicU32, Ordering};

use crate::lock::RwLock;

/// Severity of a message. The discriminants are the C API's `kreplay_log_level_t` values.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u32)]
pub enum Level {
    /// Something failed.
    Error = 0,
    /// Something will not be done as asked, or a result is weaker than asked.
    Warning = 1,
    /// One line per snapshot and restore, with sizes and timings.
    Info = 2,
    /// Detail for debugging.
    Trace = 3,
}

impl Level {
    /// Maps a raw C value; values above [`Level::Trace`] mean "everything".
    pub const fn from_raw(raw: u32) -> Self {
        match raw {
            0 => Level::Error,
            1 => Level::Warning,
            2 => Level::Info,
            _ => Level::Trace,
        }
    }

    const fn label(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Info => "info",
            Level::Trace => "trace",
        }
    }
}

/// Receives one formatted message. The message never contains a newline and is at most
/// [`MESSAGE_CAPACITY`] bytes; it is NUL-terminated for C hosts.
pub type Sink = fn(Level, &CStr);

/// Longest message, in bytes; longer ones are cut and end in `...`.
pub const MESSAGE_CAPACITY: usize = 1023;

static SINK: RwLock<Sink> = RwLock::new(stderr_sink);
static MAX_LEVEL: AtomicU32 = AtomicU32::new(Level::Warning as u32);

/// Routes messages at or below `max_level` to `sink`; `None` restores the default (stderr, errors and warnings).
pub fn set_sink(sink: Option<Sink>, max_level: Level) {
    let (sink, level) = match sink {
        Some(sink) => (sink, max_level),
        None => (stderr_sink as Sink, Level::Warning),
    };
    *SINK.write() = sink;
    MAX_LEVEL.store(level as u32, Ordering::Relaxed);
}

/// Whether a message at `level` would be delivered; check this before formatting anything costly.
#[inline]
pub fn enabled(level: Level) -> bool {
    level as u32 <= MAX_LEVEL.load(Ordering::Relaxed)
}

/// Formats and delivers one message. Use the [`crate::log!`] macro.
pub fn write(level: Level, args: fmt::Arguments<'_>) {
    let mut line = Line::new();
    let _ = line.write_fmt(args);
    let sink = *SINK.read();
    sink(level, line.finish());
}

/// Logs a message: `log!(Level::Warning, "agent {:#x}: ...", agent.0)`.
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)*) => {{
        let level = $level;
        if $crate::log::enabled(level) {
            $crate::log::write(level, format_args!($($arg)*));
        }
    }};
}

fn stderr_sink(level: Level, message: &CStr) {
    let mut line = Line::new();
    let _ = write!(line, "kreplay {}: ", level.label());
    line.push_bytes(message.to_bytes());
    let bytes = line.finish_with_newline();
    // SAFETY: `bytes` is a valid buffer of `bytes.len()` bytes; a short or failed write to stderr is ignored,
    // since there is nowhere else to report it.
    unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
}

/// A message under construction: truncates instead of failing, and keeps room for `...`, a newline and NUL.
struct Line {
    buf: [u8; MESSAGE_CAPACITY + 3],
    len: usize,
    truncated: bool,
}

impl Line {
    const fn new() -> Self {
        Line { buf: [0; MESSAGE_CAPACITY + 3], len: 0, truncated: false }
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.len == MESSAGE_CAPACITY {
                self.truncated = true;
                return;
            }
            // A NUL would cut the C string short and a newline would split the line.
            self.buf[self.len] = match b {
                0 | b'\n' | b'\r' => b' ',
                _ => b,
            };
            self.len += 1;
        }
    }

    fn mark_truncation(&mut self) {
        if self.truncated {
            self.len = self.len.min(MESSAGE_CAPACITY - 3);
            self.buf[self.len..self.len + 3].copy_from_slice(b"...");
            self.len += 3;
        }
    }

    fn finish(&mut self) -> &CStr {
        self.mark_truncation();
        self.buf[self.len] = 0;
        // The buffer holds no interior NUL (push_bytes replaces them) and ends in one at `len`.
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).unwrap_or(c"kreplay: unprintable message")
    }

    fn finish_with_newline(&mut self) -> &[u8] {
        self.mark_truncation();
        self.buf[self.len] = b'\n';
        &self.buf[..=self.len]
    }
}

impl Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push_bytes(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_truncated_with_an_ellipsis_and_stay_nul_terminated() {
        let mut line = Line::new();
        for _ in 0..2000 {
            let _ = line.write_str("ab");
        }
        let text = line.finish().to_bytes();
        assert_eq!(text.len(), MESSAGE_CAPACITY);
        assert!(text.ends_with(b"..."));
    }

    #[test]
    fn newlines_and_nuls_inside_a_message_become_spaces() {
        let mut line = Line::new();
        line.push_bytes(b"a\nb\0c");
        assert_eq!(line.finish().to_bytes(), b"a b c");
    }
}
