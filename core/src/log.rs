//! Log routing. Messages are formatted into a fixed buffer on the stack (no allocation) and handed to one
//! sink; the default sink writes errors and warnings to stderr. The library never reads the environment.
//!
//! A sink and its level are installed together, and a message is filtered by the level of the sink that
//! receives it. Installing a sink never holds a lock while a message is delivered, and deliveries hold no lock
//! either, so a sink may call anything (including [`install`]). Each installed sink lives in one of
//! [`SINK_SLOTS`] slots that counts the deliveries in progress through it: [`install`] publishes the new slot,
//! then (when asked to wait) waits until the previous slot has no delivery left, so that once it returns the
//! previous sink is never called again. [`close`] installs a sink that delivers nothing, for good.

use core::ffi::CStr;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::lock::{Backoff, Mutex};

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

/// A sink with two words of context (for a C host: its function and `user_data`), handed back on every call.
#[derive(Copy, Clone)]
pub struct ContextSink {
    /// Receives the context and one message.
    pub deliver: fn(context: [*mut (); 2], Level, &CStr),
    /// Passed back unchanged.
    pub context: [*mut (); 2],
}

/// Longest message, in bytes; longer ones are cut and end in `...`.
pub const MESSAGE_CAPACITY: usize = 1023;

/// Sinks that can be installed or still finishing deliveries at once. A new sink takes a slot with no delivery
/// in progress; with every other slot busy, [`install`] waits for one, holding no lock meanwhile (only a host
/// with this many threads inside loggers that are being replaced at the same moment could see that).
pub const SINK_SLOTS: usize = 16;

const KIND_STDERR: u32 = 0;
const KIND_PLAIN: u32 = 1;
const KIND_CONTEXT: u32 = 2;
const KIND_CLOSED: u32 = 3;

/// One installed sink. Every field is atomic so that a delivery that backs out after reading a slot being
/// rewritten reads no torn value; the protocol in [`deliver`] and [`install`] decides which values are used.
struct Slot {
    kind: AtomicU32,
    level: AtomicU32,
    function: AtomicPtr<()>,
    context: [AtomicPtr<()>; 2],
    /// Deliveries in progress (or about to back out) through this slot.
    users: AtomicUsize,
    /// The installation this slot holds; changes each time the slot is reused.
    installed: AtomicU64,
}

static SLOTS: [Slot; SINK_SLOTS] = [const {
    Slot {
        kind: AtomicU32::new(KIND_STDERR),
        level: AtomicU32::new(Level::Warning as u32),
        function: AtomicPtr::new(core::ptr::null_mut()),
        context: [AtomicPtr::new(core::ptr::null_mut()), AtomicPtr::new(core::ptr::null_mut())],
        users: AtomicUsize::new(0),
        installed: AtomicU64::new(0),
    }
}; SINK_SLOTS];

/// The current installation: `serial * SINK_SLOTS + slot`. Serials never repeat, so a delivery that read an
/// old value can tell, after announcing itself on the slot, that the slot was replaced meanwhile.
static CURRENT: AtomicU64 = AtomicU64::new(0);
/// The level of the current sink, for the cheap check in [`enabled`]; the receiving slot's own level decides.
static MAX_LEVEL: AtomicU32 = AtomicU32::new(Level::Warning as u32);
/// Serialises installers. Held only while a slot is written and published, never during a delivery or a wait
/// for deliveries, so a sink that installs another one cannot deadlock with an installer waiting for it.
static INSTALL: Mutex<u64> = Mutex::new(0);
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Routes messages at or below `max_level` to `sink`; `None` restores the default (stderr, errors and warnings).
/// Waits until deliveries in progress to the previous sink are over (see [`install`]).
pub fn set_sink(sink: Option<Sink>, max_level: Level) {
    match sink {
        Some(sink) => {
            install_kind(KIND_PLAIN, sink as *mut (), [core::ptr::null_mut(); 2], max_level, true);
        }
        None => {
            install_kind(KIND_STDERR, core::ptr::null_mut(), [core::ptr::null_mut(); 2], Level::Warning, true);
        }
    }
}

/// Routes messages at or below `max_level` to `sink` (`None`: the default stderr sink, errors and warnings),
/// atomically with its level. With `wait`, returns only once no delivery to the previous sink is in progress,
/// so the previous sink is never called again; without it (the caller is itself inside a delivery, or inside a
/// call that a delivery may be waiting for) it returns at once, and deliveries that began before the switch
/// may still be finishing in the previous sink. Returns false, installing nothing, after [`close`].
pub fn install(sink: Option<ContextSink>, max_level: Level, wait: bool) -> bool {
    match sink {
        Some(sink) => install_kind(KIND_CONTEXT, sink.deliver as *mut (), sink.context, max_level, wait),
        None => install_kind(KIND_STDERR, core::ptr::null_mut(), [core::ptr::null_mut(); 2], Level::Warning, wait),
    }
}

/// From now on no message is delivered anywhere and [`install`] does nothing. With `wait`, returns once the
/// deliveries in progress are over (see [`install`]).
pub fn close(wait: bool) {
    install_kind(KIND_CLOSED, core::ptr::null_mut(), [core::ptr::null_mut(); 2], Level::Error, wait);
}

fn install_kind(kind: u32, function: *mut (), context: [*mut (); 2], level: Level, wait: bool) -> bool {
    let mut backoff = Backoff::new();
    let (previous, previous_installed) = loop {
        let mut serial = INSTALL.lock();
        if CLOSED.load(Ordering::Acquire) {
            return false;
        }
        let current = CURRENT.load(Ordering::SeqCst);
        let current_slot = (current % SINK_SLOTS as u64) as usize;
        // A slot with no delivery in progress. A delivery that announces itself on it from now on read an
        // older `CURRENT` and backs out without reading the fields, so they may be rewritten.
        let free = (1..SINK_SLOTS)
            .map(|step| (current_slot + step) % SINK_SLOTS)
            .find(|&index| SLOTS[index].users.load(Ordering::SeqCst) == 0);
        let Some(slot_index) = free else {
            // Every other slot is still delivering: wait without the lock, since those deliveries may be
            // loggers that install a sink themselves.
            drop(serial);
            backoff.snooze();
            continue;
        };
        *serial += 1;
        let installed = *serial * SINK_SLOTS as u64 + slot_index as u64;
        let slot = &SLOTS[slot_index];
        slot.kind.store(kind, Ordering::Relaxed);
        slot.level.store(level as u32, Ordering::Relaxed);
        slot.function.store(function, Ordering::Relaxed);
        slot.context[0].store(context[0], Ordering::Relaxed);
        slot.context[1].store(context[1], Ordering::Relaxed);
        slot.installed.store(installed, Ordering::SeqCst);
        MAX_LEVEL.store(if kind == KIND_CLOSED { 0 } else { level as u32 }, Ordering::SeqCst);
        if kind == KIND_CLOSED {
            CLOSED.store(true, Ordering::Release);
        }
        CURRENT.store(installed, Ordering::SeqCst);
        break (current_slot, SLOTS[current_slot].installed.load(Ordering::SeqCst));
    };
    if wait {
        // The previous slot is done once it has no user, or once it was reused (which needed it to have none).
        let slot = &SLOTS[previous];
        let mut backoff = Backoff::new();
        while slot.users.load(Ordering::SeqCst) != 0 && slot.installed.load(Ordering::SeqCst) == previous_installed {
            backoff.snooze();
        }
    }
    true
}

/// Whether a message at `level` would be delivered; check this before formatting anything costly.
#[inline]
pub fn enabled(level: Level) -> bool {
    level as u32 <= MAX_LEVEL.load(Ordering::Relaxed) && !CLOSED.load(Ordering::Relaxed)
}

/// Formats and delivers one message. Use the [`crate::log!`] macro.
pub fn write(level: Level, args: fmt::Arguments<'_>) {
    let mut line = Line::new();
    let _ = line.write_fmt(args);
    deliver(level, line.finish());
}

/// Hands `message` to the current sink if its level lets it through.
fn deliver(level: Level, message: &CStr) {
    let (slot, _announced) = loop {
        let current = CURRENT.load(Ordering::SeqCst);
        let slot = &SLOTS[(current % SINK_SLOTS as u64) as usize];
        slot.users.fetch_add(1, Ordering::SeqCst);
        // Still current after announcing: an installer either sees this user before it reuses the slot, or
        // published a new `CURRENT` that this check sees.
        if CURRENT.load(Ordering::SeqCst) == current {
            break (slot, Announced(slot));
        }
        slot.users.fetch_sub(1, Ordering::SeqCst);
    };
    if level as u32 > slot.level.load(Ordering::Relaxed) {
        return;
    }
    let function = slot.function.load(Ordering::Relaxed);
    match slot.kind.load(Ordering::Relaxed) {
        KIND_STDERR => stderr_sink(level, message),
        KIND_PLAIN => {
            // SAFETY: a slot of this kind holds a `Sink` stored by `set_sink` as a pointer; function pointers
            // and data pointers have the same size and representation on every platform the library supports.
            let sink = unsafe { core::mem::transmute::<*mut (), Sink>(function) };
            sink(level, message);
        }
        KIND_CONTEXT => {
            // SAFETY: as above, for the `deliver` function of a `ContextSink` stored by `install`.
            let sink = unsafe { core::mem::transmute::<*mut (), fn([*mut (); 2], Level, &CStr)>(function) };
            let context = [slot.context[0].load(Ordering::Relaxed), slot.context[1].load(Ordering::Relaxed)];
            sink(context, level, message);
        }
        _ => {}
    }
}

/// A delivery in progress through one slot; leaving (also by unwinding out of a sink) ends it.
struct Announced(&'static Slot);

impl Drop for Announced {
    fn drop(&mut self) {
        self.0.users.fetch_sub(1, Ordering::SeqCst);
    }
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

    static A_RETIRED: AtomicBool = AtomicBool::new(false);
    static A_CALLS_AFTER: AtomicUsize = AtomicUsize::new(0);
    static B_ABOVE_LEVEL: AtomicUsize = AtomicUsize::new(0);

    fn sink_a(_: [*mut (); 2], _: Level, _: &CStr) {
        if A_RETIRED.load(Ordering::SeqCst) {
            A_CALLS_AFTER.fetch_add(1, Ordering::SeqCst);
        }
        std::thread::yield_now();
    }

    fn sink_b(_: [*mut (); 2], level: Level, _: &CStr) {
        if level > Level::Error {
            B_ABOVE_LEVEL.fetch_add(1, Ordering::SeqCst);
        }
    }

    // Other tests install sinks of their own meanwhile, so only what must never happen is asserted.
    #[test]
    fn after_install_returns_the_previous_sink_is_never_called_and_levels_travel_with_sinks() {
        let null = [core::ptr::null_mut(); 2];
        install(Some(ContextSink { deliver: sink_a, context: null }), Level::Trace, true);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let talkers: Vec<_> = (0..3)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        crate::log!(Level::Warning, "a warning");
                        crate::log!(Level::Info, "an info line");
                    }
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(if cfg!(miri) { 1 } else { 20 }));
        install(Some(ContextSink { deliver: sink_b, context: null }), Level::Error, true);
        A_RETIRED.store(true, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(if cfg!(miri) { 1 } else { 20 }));
        stop.store(true, Ordering::SeqCst);
        for talker in talkers {
            talker.join().unwrap();
        }
        assert_eq!(A_CALLS_AFTER.load(Ordering::SeqCst), 0);
        assert_eq!(B_ABOVE_LEVEL.load(Ordering::SeqCst), 0);
    }

    fn reinstalling_sink(_: [*mut (); 2], _: Level, _: &CStr) {
        // From inside a delivery: must not wait for itself.
        install(None, Level::Warning, false);
    }

    #[test]
    fn a_sink_that_installs_another_from_inside_itself_does_not_deadlock() {
        install(
            Some(ContextSink { deliver: reinstalling_sink, context: [core::ptr::null_mut(); 2] }),
            Level::Trace,
            true,
        );
        crate::log!(Level::Error, "installs another sink");
        set_sink(Some(|_, _| {}), Level::Error);
    }

    #[test]
    fn newlines_and_nuls_inside_a_message_become_spaces() {
        let mut line = Line::new();
        line.push_bytes(b"a\nb\0c");
        assert_eq!(line.finish().to_bytes(), b"a b c");
    }
}
