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
//! the list is cached; contents are still copied at every capture. The cache lends its list to the snapshot that
//! uses it and gets it back when that snapshot is freed (a capture of the same agent meanwhile scans again).

use alloc::vec::Vec;
use arrayvec::ArrayVec;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::lock::Mutex;
use crate::storage::slots::MAX_AGENTS;
use crate::types::Agent;

/// A module variable kept for capture: where it is and how big.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CachedVariable {
    /// Device address.
    pub address: usize,
    /// Bytes.
    pub size: usize,
}

/// Variables that touch or overlap, copied as one range of `size` bytes at `address`: the list's variables
/// `first..first + count`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub address: usize,
    pub size: usize,
    pub first: u32,
    pub count: u32,
}

/// Spans are cut at this size, the largest variable captured, so no one copy grows without bound.
const MAX_SPAN_BYTES: usize = crate::snapshot::MAX_MODULE_VARIABLE_BYTES;

/// An agent's module variables, sorted by address, and the spans they form.
#[derive(Debug, Default)]
pub(crate) struct ModuleList {
    pub(crate) variables: Vec<CachedVariable>,
    pub(crate) spans: Vec<Span>,
}

impl ModuleList {
    /// Sorts `variables` (in scan order, none wrapping the address space) and cuts them into spans; `None`
    /// without host memory for the spans (or for more than `u32::MAX` variables).
    pub(crate) fn build(mut variables: Vec<CachedVariable>) -> Option<ModuleList> {
        // Spans index variables with 32 bits.
        if u32::try_from(variables.len()).is_err() {
            return None;
        }
        variables.sort_unstable_by_key(|v| (v.address, v.size));
        let mut spans: Vec<Span> = Vec::new();
        spans.try_reserve_exact(spans_of(&variables, |_| {})).ok()?;
        spans_of(&variables, |span| spans.push(span));
        Some(ModuleList { variables, spans })
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
            if variable.address <= span_end && merged_end - span.address <= MAX_SPAN_BYTES && span.count < u32::MAX {
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

/// The module list a capture took, and whether to give it back to the cache when its snapshot is freed.
#[derive(Debug, Default)]
pub(crate) struct Lent {
    pub list: ModuleList,
    /// The generation the list was scanned in, when it may be cached.
    pub cache_as: Option<u64>,
}

struct Entry {
    agent: Agent,
    generation: u64,
    list: ModuleList,
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

    /// Drops every agent's cached scan.
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        let dropped: ArrayVec<Entry, MAX_AGENTS> = core::mem::take(&mut *self.entries.lock());
        // Freed outside the lock.
        drop(dropped);
    }

    /// Takes `agent`'s cached scan if it is still current, with the generation it belongs to. The caller gives it
    /// back with [`ModuleCache::give_back`] (or [`ModuleCache::store`]).
    pub(crate) fn take(&self, agent: Agent) -> Option<(ModuleList, u64)> {
        let generation = self.generation();
        let mut entries = self.entries.lock();
        let at = entries.iter().position(|entry| entry.agent == agent && entry.generation == generation)?;
        Some((entries.swap_remove(at).list, generation))
    }

    /// Caches a complete scan of `agent` made in `generation`; ignored when code objects changed since.
    pub(crate) fn store(&self, agent: Agent, generation: u64, list: ModuleList) {
        let mut replaced = None;
        {
            let mut entries = self.entries.lock();
            if generation != self.generation() {
                replaced = Some(list);
            } else if let Some(entry) = entries.iter_mut().find(|entry| entry.agent == agent) {
                entry.generation = generation;
                replaced = Some(core::mem::replace(&mut entry.list, list));
            } else if let Err(full) = entries.try_push(Entry { agent, generation, list }) {
                replaced = Some(full.element().list);
            }
        }
        // Freed outside the lock.
        drop(replaced);
    }

    /// Takes back a list lent to a snapshot: cached again if it may be and is still current, else freed.
    pub(crate) fn give_back(&self, agent: Agent, lent: Lent) {
        if let Some(generation) = lent.cache_as {
            self.store(agent, generation, lent.list);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(address: usize, size: usize) -> CachedVariable {
        CachedVariable { address, size }
    }

    #[test]
    fn spans_join_variables_that_touch_or_overlap_and_never_a_gap() {
        // In scan order, not address order.
        let list = ModuleList::build(vec![v(0x1100, 0x100), v(0x1000, 0x100), v(0x1180, 0x10), v(0x1201, 8)]).unwrap();
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
        let list = ModuleList::build(vec![v(0, half), v(half, half), v(2 * half, 1)]).unwrap();
        assert_eq!(
            list.spans,
            [
                Span { address: 0, size: 2 * half, first: 0, count: 2 },
                Span { address: 2 * half, size: 1, first: 2, count: 1 }
            ]
        );
        assert!(ModuleList::build(Vec::new()).unwrap().spans.is_empty());
    }

    #[test]
    fn a_list_lent_to_a_snapshot_comes_back_only_while_current() {
        let cache = ModuleCache::new();
        let agent = Agent(1);
        let generation = cache.generation();
        cache.store(agent, generation, ModuleList::build(vec![v(0x1000, 4)]).unwrap());
        let (list, lent_in) = cache.take(agent).unwrap();
        assert!(cache.take(agent).is_none(), "lent out");
        cache.give_back(agent, Lent { list, cache_as: Some(lent_in) });
        let (list, lent_in) = cache.take(agent).unwrap();
        cache.invalidate();
        cache.give_back(agent, Lent { list, cache_as: Some(lent_in) });
        assert!(cache.take(agent).is_none(), "a list from before modules_changed is not cached again");
    }
}
