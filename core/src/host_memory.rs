//! Host memory straight from the kernel: anonymous private mappings, never zero-filled by the library (the
//! kernel hands out zero pages lazily; the library writes every byte it later reads).
//!
//! Every map and unmap is counted, so tests can prove that nothing leaks and that the steady state makes no
//! system call. With the `fault-injection` feature (test builds only), the k-th map from now can be made to
//! fail.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};

static MAPS: AtomicUsize = AtomicUsize::new(0);
static UNMAPS: AtomicUsize = AtomicUsize::new(0);
static MAPPED_BYTES: AtomicUsize = AtomicUsize::new(0);
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);

/// Counters of the library's own host mappings, process-wide.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Successful `mmap` calls.
    pub maps: usize,
    /// `munmap` calls.
    pub unmaps: usize,
    /// Bytes currently mapped.
    pub mapped_bytes: usize,
}

/// The current counters.
pub fn stats() -> Stats {
    Stats {
        maps: MAPS.load(Ordering::Relaxed),
        unmaps: UNMAPS.load(Ordering::Relaxed),
        mapped_bytes: MAPPED_BYTES.load(Ordering::Relaxed),
    }
}

/// The system page size.
pub fn page_size() -> usize {
    let cached = PAGE_SIZE.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: sysconf has no memory-safety preconditions.
    let raw = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let size = if raw > 0 { raw as usize } else { 4096 };
    PAGE_SIZE.store(size, Ordering::Relaxed);
    size
}

/// The length a mapping of at least `len` bytes really gets: whole pages.
/// `None` when rounding overflows.
pub fn mapping_len(len: usize) -> Option<usize> {
    len.checked_next_multiple_of(page_size())
}

/// Maps `len` bytes (`len` must come from [`mapping_len`]) of readable, writable, private anonymous memory.
pub fn map(len: usize) -> Result<NonNull<u8>> {
    if len == 0 || len > isize::MAX as usize {
        return Err(Error::InvalidArgument);
    }
    #[cfg(feature = "fault-injection")]
    if fault::map_should_fail() {
        return Err(Error::OutOfHostMemory);
    }
    // SAFETY: an anonymous private mapping with a NULL hint has no preconditions; the result is checked.
    let ptr = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(Error::OutOfHostMemory);
    }
    MAPS.fetch_add(1, Ordering::Relaxed);
    MAPPED_BYTES.fetch_add(len, Ordering::Relaxed);
    NonNull::new(ptr.cast()).ok_or(Error::OutOfHostMemory)
}

/// Unmaps a mapping made by [`map`].
///
/// # Safety
/// `ptr` and `len` must be exactly a mapping returned by [`map`] (with its `len`), not yet unmapped, and no
/// reference into it may be used afterwards.
pub unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
    // SAFETY: by the caller's contract the range is one live mapping of ours.
    let rc = unsafe { libc::munmap(ptr.as_ptr().cast(), len) };
    if rc == 0 {
        UNMAPS.fetch_add(1, Ordering::Relaxed);
        MAPPED_BYTES.fetch_sub(len, Ordering::Relaxed);
    } else {
        crate::log!(
            crate::log::Level::Error,
            "munmap of staging at {:#x} ({} bytes) failed; the memory stays mapped",
            ptr.as_ptr() as usize,
            len
        );
    }
}

/// The host memory available to new allocations now, in bytes: Linux's `MemAvailable` from `/proc/meminfo`.
/// `None` when it cannot be read (no `/proc`, another system, Miri), which the host budget takes as nothing
/// available (see `storage::host_budget`).
pub fn available_bytes() -> Option<usize> {
    if cfg!(miri) {
        return None;
    }
    let mut buf = [0u8; 4096];
    // SAFETY: a NUL-terminated path and plain flags; the result is checked.
    let fd = unsafe { libc::open(c"/proc/meminfo".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: `fd` is open, and `buf[filled..]` is writable for `buf.len() - filled` bytes.
        let got = unsafe { libc::read(fd, buf[filled..].as_mut_ptr().cast(), buf.len() - filled) };
        if got <= 0 {
            break;
        }
        filled += got as usize;
    }
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    parse_mem_available(&buf[..filled])
}

/// The `MemAvailable:` figure of a `/proc/meminfo` text, in bytes.
fn parse_mem_available(text: &[u8]) -> Option<usize> {
    let rest = text.split(|&b| b == b'\n').find_map(|line| line.strip_prefix(b"MemAvailable:"))?;
    // The kernel writes it in kB (KiB).
    let kib = core::str::from_utf8(rest).ok()?.trim_start().strip_suffix(" kB")?;
    kib.parse::<usize>().ok()?.checked_mul(1024)
}

/// Fault injection for tests: make the k-th map from now fail.
#[cfg(feature = "fault-injection")]
pub mod fault {
    use core::sync::atomic::{AtomicUsize, Ordering};

    static FAIL_AT: AtomicUsize = AtomicUsize::new(0);

    /// The `nth` map from now (1 = the next one) fails; 0 disarms.
    pub fn fail_map_at(nth: usize) {
        FAIL_AT.store(nth, Ordering::SeqCst);
    }

    /// Every map from now fails until disarmed with `fail_map_at(0)`.
    pub fn fail_every_map() {
        FAIL_AT.store(usize::MAX, Ordering::SeqCst);
    }

    pub(super) fn map_should_fail() -> bool {
        let mut current = FAIL_AT.load(Ordering::SeqCst);
        loop {
            match current {
                0 => return false,
                usize::MAX => return true,
                n => {
                    let next = if n == 1 { 0 } else { n - 1 };
                    match FAIL_AT.compare_exchange(current, next, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(_) => return n == 1,
                        Err(seen) => current = seen,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_is_writable_and_counted_until_unmapped() {
        let len = mapping_len(10_000).unwrap();
        assert_eq!(len % page_size(), 0);
        let before = stats();
        let ptr = map(len).unwrap();
        // SAFETY: the mapping is `len` bytes, readable and writable.
        unsafe { core::ptr::write_bytes(ptr.as_ptr(), 0xAB, len) };
        // SAFETY: within the mapping.
        assert_eq!(unsafe { *ptr.as_ptr().add(len - 1) }, 0xAB);
        assert!(stats().maps > before.maps);
        // SAFETY: exactly the mapping made above, unused afterwards.
        unsafe { unmap(ptr, len) };
        assert!(stats().unmaps > before.unmaps);
    }

    #[test]
    fn mem_available_is_read_in_kib_and_anything_else_is_unknown() {
        let text = b"MemTotal:       131072000 kB\nMemFree:  1 kB\nMemAvailable:   65536 kB\nBuffers: 2 kB\n";
        assert_eq!(parse_mem_available(text), Some(65536 * 1024));
        assert_eq!(parse_mem_available(b"MemFree: 1 kB\n"), None);
        assert_eq!(parse_mem_available(b"MemAvailable: kB\n"), None);
        assert_eq!(parse_mem_available(b"MemAvailable: 12 MB\n"), None);
        assert_eq!(parse_mem_available(b"MemAvailable: 5 5 kB\n"), None);
        assert_eq!(parse_mem_available(b"MemAvailable: 99999999999999999999999 kB\n"), None);
        if !cfg!(miri) && cfg!(target_os = "linux") {
            assert!(available_bytes().is_some_and(|bytes| bytes > 0));
        }
    }

    #[test]
    fn zero_and_overflowing_lengths_are_refused() {
        assert_eq!(map(0), Err(Error::InvalidArgument));
        assert_eq!(map(usize::MAX), Err(Error::InvalidArgument));
        assert_eq!(mapping_len(usize::MAX), None);
    }
}
