//! Module variables as a capture takes them, and the module-variable cache.
//!
//! A scan's variables are sorted by address and cut into *spans*: runs of variables that touch or overlap, which
//! are copied as one range (the variables of one code object usually lie back to back in its loaded segment, so
//! thousands of small variables cost a few copies). A span covers exactly its variables' bytes, never a gap
//! between them. A snapshot keeps the list it was captured with, so that a span whose copy the device refuses (it
//! may cross from one code object's memory into another's) is copied again variable by variable.
//!
//! The cache holds an agent's last complete scan, reused until the host says code objects changed
//! (`modules_changed`). A scan that failed, or that was overtaken by a change while it ran, is never cached. Only
//! the list is cached; contents are still copied at every capture. The cache and the snapshots captured with a
//! list share it read-only; a capture that had to split spans caches a new list in its place.

use alloc::boxed::Box;
use alloc::vec::Vec;
use arrayvec::ArrayVec;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};

use crate::lock::Mutex;
use crate::storage::slots::MAX_AGENTS;
use crate::types::Agent;

/// A module variable kept for capture: where it is and how big, and where its name is in its list's `names`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CachedVariable {
    /// Device address.
    pub address: usize,
    /// Bytes.
    pub size: usize,
    pub(crate) name: NameRef,
}

impl CachedVariable {
    /// A variable with no name kept.
    pub const fn new(address: usize, size: usize) -> Self {
        CachedVariable { address, size, name: NameRef { at: 0, len: 0 } }
    }
}

/// Where a variable's name lies in its list's `names` (`len` 0: unknown). Names are kept for the log lines that
/// name a variable after its code object is gone (see `snapshot::liveness`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct NameRef {
    pub at: u32,
    pub len: u32,
}

/// Bytes of a name kept at most (the log shows fewer).
pub(crate) const MAX_NAME_BYTES: usize = 512;

/// Variables that touch or overlap, copied as one range of `size` bytes at `address`: the list's variables
/// `first..first + count`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub address: usize,
    pub size: usize,
    pub first: u32,
    pub count: u32,
}

/// Module variables above this size are not captured (their writes leak across passes, with a warning).
pub const MAX_MODULE_VARIABLE_BYTES: usize = 1 << 30;

/// Spans of variables that only touch are cut at this size, the largest variable captured, so no one copy grows
/// without bound (variables that overlap are never cut apart: at most the bytes they cover).
const MAX_SPAN_BYTES: usize = MAX_MODULE_VARIABLE_BYTES;

/// An agent's module variables, sorted by address, and the spans they form.
#[derive(Debug, Default)]
pub(crate) struct ModuleList {
    pub(crate) variables: Vec<CachedVariable>,
    pub(crate) spans: Vec<Span>,
    /// The variables' names, back to back (see [`NameRef`]).
    pub(crate) names: Vec<u8>,
}

impl ModuleList {
    /// Sorts `variables` (in scan order, none wrapping the address space) and cuts them into spans; `None`
    /// without host memory for the spans (or for more than `u32::MAX` variables).
    pub(crate) fn build(mut variables: Vec<CachedVariable>, names: Vec<u8>) -> Option<ModuleList> {
        // Spans index variables with 32 bits.
        if u32::try_from(variables.len()).is_err() {
            return None;
        }
        variables.sort_unstable_by_key(|v| (v.address, v.size));
        let mut spans: Vec<Span> = Vec::new();
        spans.try_reserve_exact(spans_of(&variables, |_| {})).ok()?;
        spans_of(&variables, |span| spans.push(span));
        Some(ModuleList { variables, spans, names })
    }

    /// `variable`'s name, when one was kept.
    pub(crate) fn name_of(&self, variable: &CachedVariable) -> Option<&[u8]> {
        let NameRef { at, len } = variable.name;
        (len > 0).then(|| self.names.get(at as usize..at as usize + len as usize)).flatten()
    }
}

/// Calls `emit` with each span of `sorted` in order; returns how many there are.
fn spans_of(sorted: &[CachedVariable], mut emit: impl FnMut(Span)) -> usize {
    let mut spans = 0;
    let mut open: Option<Span> = None;
    for (i, variable) in sorted.iter().enumerate() {
        let end = variable.address + variable.size;
        if let Some(span) = open.as_mut() {
            let span_end = span.address + span.size;
            let merged_end = span_end.max(end);
            // A variable that overlaps the span joins it whatever the size, so spans never overlap (no two copies
            // of a batch may); one that only touches it starts a new span where the span would grow too large.
            let overlaps = variable.address < span_end;
            let touches = variable.address == span_end;
            if overlaps || (touches && merged_end - span.address <= MAX_SPAN_BYTES) {
                span.size = merged_end - span.address;
                span.count += 1;
                continue;
            }
            emit(*span);
            spans += 1;
        }
        // Fits: `build` takes at most u32::MAX variables.
        open = Some(Span { address: variable.address, size: variable.size, first: i as u32, count: 1 });
    }
    if let Some(span) = open {
        emit(span);
        spans += 1;
    }
    spans
}

/// A module list shared by the cache and the snapshots captured with it, read-only, freed with its last holder
/// (an `Arc` whose one allocation cannot abort the process: stable Rust has no `Arc::try_new`).
pub(crate) struct SharedList(NonNull<Shared>);

struct Shared {
    holders: AtomicUsize,
    list: ModuleList,
}

// SAFETY: the list is never written while shared (`Deref` only), and the count is atomic; `ModuleList` itself is
// `Send + Sync` (two `Vec`s of plain data).
unsafe impl Send for SharedList {}
// SAFETY: as above.
unsafe impl Sync for SharedList {}

impl SharedList {
    /// Shares `list`; `None` without host memory for the one allocation.
    pub(crate) fn new(list: ModuleList) -> Option<SharedList> {
        let shared = crate::fallible::try_box(Shared { holders: AtomicUsize::new(1), list })?;
        Some(SharedList(NonNull::from(Box::leak(shared))))
    }

    fn shared(&self) -> &Shared {
        // SAFETY: the allocation lives while any holder does, and `self` is one.
        unsafe { self.0.as_ref() }
    }
}

impl Clone for SharedList {
    fn clone(&self) -> Self {
        // Relaxed, as in `Arc`: a new holder is made from an existing one, which keeps the list alive meanwhile.
        // Holders are snapshots and cache entries, far fewer than `usize::MAX`.
        self.shared().holders.fetch_add(1, Ordering::Relaxed);
        SharedList(self.0)
    }
}

impl Drop for SharedList {
    fn drop(&mut self) {
        if self.shared().holders.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Every other holder's reads happen before the free (they released with their decrement).
        fence(Ordering::Acquire);
        // SAFETY: the last holder is going: the pointer came from `Box::leak` in `new`, and nothing else refers to
        // the allocation any more.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

impl core::ops::Deref for SharedList {
    type Target = ModuleList;
    fn deref(&self) -> &ModuleList {
        &self.shared().list
    }
}

impl core::fmt::Debug for SharedList {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("SharedList").field(&**self).finish()
    }
}

/// The module list a capture used, the generation it was scanned in, and that generation again when it may be
/// cached (then a capture that had to split spans caches the split list in its place).
#[derive(Debug)]
pub(crate) struct CapturedModules {
    pub list: SharedList,
    pub cache_as: Option<u64>,
    /// The generation of the module cache the list was scanned in: a restore that finds another one checks
    /// that the list's code objects are still loaded (see `snapshot::liveness`).
    pub scanned_in: u64,
}

struct Entry {
    agent: Agent,
    generation: u64,
    list: SharedList,
}

/// The cached scans of every agent.
pub struct ModuleCache {
    /// Bumped by every `modules_changed`.
    generation: AtomicU64,
    entries: Mutex<ArrayVec<Entry, MAX_AGENTS>>,
}

impl Default for ModuleCache {
    fn default() -> Self {
        Self::new()
    }
}

impl ModuleCache {
    /// Nothing cached.
    pub const fn new() -> Self {
        ModuleCache { generation: AtomicU64::new(0), entries: Mutex::new(ArrayVec::new_const()) }
    }

    /// The generation a scan starting now belongs to.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Drops every agent's cached scan (snapshots holding a list keep it until they are freed).
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let dropped: ArrayVec<Entry, MAX_AGENTS> = core::mem::take(&mut *self.entries.lock());
        // Freed outside the lock.
        drop(dropped);
    }

    /// `agent`'s cached scan if it is still current, shared, with the generation it belongs to.
    pub(crate) fn get(&self, agent: Agent) -> Option<(SharedList, u64)> {
        let generation = self.generation();
        let entries = self.entries.lock();
        let entry = entries.iter().find(|entry| entry.agent == agent && entry.generation == generation)?;
        Some((entry.list.clone(), generation))
    }

    /// Caches a complete scan of `agent` made in `generation` (replacing the agent's previous one); ignored when
    /// code objects changed since.
    pub(crate) fn store(&self, agent: Agent, generation: u64, list: SharedList) {
        let replaced;
        {
            let mut entries = self.entries.lock();
            if generation != self.generation() {
                replaced = Some(list);
            } else if let Some(entry) = entries.iter_mut().find(|entry| entry.agent == agent) {
                entry.generation = generation;
                replaced = Some(core::mem::replace(&mut entry.list, list));
            } else {
                replaced = entries.try_push(Entry { agent, generation, list }).err().map(|full| full.element().list);
            }
        }
        // Freed outside the lock.
        drop(replaced);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(address: usize, size: usize) -> CachedVariable {
        CachedVariable::new(address, size)
    }

    #[test]
    fn spans_join_variables_that_touch_or_overlap_and_never_a_gap() {
        // In scan order, not address order.
        let list =
            ModuleList::build(vec![v(0x1100, 0x100), v(0x1000, 0x100), v(0x1180, 0x10), v(0x1201, 8)], Vec::new())
                .unwrap();
        assert_eq!(list.variables.iter().map(|v| v.address).collect::<Vec<_>>(), [0x1000, 0x1100, 0x1180, 0x1201]);
        assert_eq!(
            list.spans,
            [
                Span { address: 0x1000, size: 0x200, first: 0, count: 3 },
                Span { address: 0x1201, size: 8, first: 3, count: 1 }
            ]
        );
    }

    #[test]
    fn a_span_is_cut_before_it_grows_past_the_largest_variable() {
        let half = MAX_SPAN_BYTES / 2;
        let list = ModuleList::build(vec![v(0, half), v(half, half), v(2 * half, 1)], Vec::new()).unwrap();
        assert_eq!(
            list.spans,
            [
                Span { address: 0, size: 2 * half, first: 0, count: 2 },
                Span { address: 2 * half, size: 1, first: 2, count: 1 }
            ]
        );
        assert!(ModuleList::build(Vec::new(), Vec::new()).unwrap().spans.is_empty());
    }

    #[test]
    fn variables_that_overlap_are_not_cut_apart_so_spans_never_overlap() {
        let list =
            ModuleList::build(vec![v(0, MAX_SPAN_BYTES - 0x100), v(0x100, MAX_SPAN_BYTES), v(0x100, 8)], Vec::new())
                .unwrap();
        assert_eq!(list.spans, [Span { address: 0, size: MAX_SPAN_BYTES + 0x100, first: 0, count: 3 }]);
        // One that only touches the grown span starts a new one.
        let list = ModuleList::build(vec![v(0, MAX_SPAN_BYTES), v(8, 8), v(MAX_SPAN_BYTES, 8)], Vec::new()).unwrap();
        assert_eq!(
            list.spans,
            [
                Span { address: 0, size: MAX_SPAN_BYTES, first: 0, count: 2 },
                Span { address: MAX_SPAN_BYTES, size: 8, first: 2, count: 1 }
            ]
        );
    }

    #[test]
    fn random_lists_cut_into_exact_disjoint_spans() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        let sizes = [1, 8, 256, 4096, 300 << 20, 600 << 20, MAX_SPAN_BYTES];
        for _ in 0..if cfg!(miri) { 20 } else { 3000 } {
            // Variables placed after the previous one: overlapping it, touching it, or past a gap; then shuffled.
            let mut variables = Vec::new();
            let mut end = 0x10_0000usize;
            for _ in 0..next(40) {
                let size = sizes[next(sizes.len() as u64) as usize];
                let address = match next(3) {
                    0 => end - (next(end as u64 - 0x10_0000 + 1) as usize).min(end - 0x10_0000),
                    1 => end,
                    _ => end + 1 + next(4096) as usize,
                };
                variables.push(v(address, size));
                end = end.max(address + size);
            }
            for i in (1..variables.len()).rev() {
                variables.swap(i, next(i as u64 + 1) as usize);
            }
            let list = ModuleList::build(variables, Vec::new()).unwrap();
            let sorted = &list.variables;
            assert!(sorted.windows(2).all(|w| (w[0].address, w[0].size) <= (w[1].address, w[1].size)));
            let mut first = 0usize;
            for (k, span) in list.spans.iter().enumerate() {
                assert_eq!(span.first as usize, first, "spans take the variables in order, none left out");
                let members = &sorted[first..][..span.count as usize];
                let mut covered = members[0].address;
                for member in members {
                    assert!(member.address <= covered, "a gap inside a span");
                    covered = covered.max(member.address + member.size);
                }
                assert_eq!((span.address, span.address + span.size), (members[0].address, covered), "not exact");
                if let Some(next_span) = list.spans.get(k + 1) {
                    let span_end = span.address + span.size;
                    assert!(next_span.address >= span_end, "spans overlap");
                    if next_span.address == span_end {
                        let joined = span_end + sorted[next_span.first as usize].size - span.address;
                        assert!(joined > MAX_SPAN_BYTES, "touching variables cut apart below the limit");
                    }
                }
                first += span.count as usize;
            }
            assert_eq!(first, sorted.len());
        }
    }

    #[test]
    fn a_cached_list_is_shared_until_modules_change_and_freed_by_its_last_holder() {
        let cache = ModuleCache::new();
        let agent = Agent(1);
        let generation = cache.generation();
        cache.store(
            agent,
            generation,
            SharedList::new(ModuleList::build(vec![v(0x1000, 4)], Vec::new()).unwrap()).unwrap(),
        );
        let (first, at) = cache.get(agent).unwrap();
        let (second, _) = cache.get(agent).unwrap();
        assert_eq!(at, generation);
        assert!(core::ptr::eq(&*first, &*second), "one list, shared");
        assert_eq!(first.shared().holders.load(Ordering::Relaxed), 3);
        cache.invalidate();
        assert!(cache.get(agent).is_none());
        assert_eq!(first.variables, [v(0x1000, 4)], "a holder keeps its list after modules_changed");
        assert_eq!(first.shared().holders.load(Ordering::Relaxed), 2);
        // A scan from before the change is not cached.
        cache.store(agent, generation, second.clone());
        assert!(cache.get(agent).is_none());
        drop(second);
        assert_eq!(first.shared().holders.load(Ordering::Relaxed), 1);
        drop(first);
        // A list replaced in the cache goes with its last holder (Miri checks the frees).
        cache.store(agent, cache.generation(), SharedList::new(ModuleList::default()).unwrap());
        cache.store(
            agent,
            cache.generation(),
            SharedList::new(ModuleList::build(vec![v(8, 8)], Vec::new()).unwrap()).unwrap(),
        );
        assert_eq!(cache.get(agent).unwrap().0.variables, [v(8, 8)]);
    }
}
