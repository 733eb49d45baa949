//! The module-variable cache: an agent's last complete module scan, reused until the host says code objects
//! changed (`modules_changed`). A scan that failed, or that was overtaken by a change while it ran, is never
//! cached. Only the list is cached; contents are still copied at every capture.

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

struct Entry {
    agent: Agent,
    generation: u64,
    variables: Vec<CachedVariable>,
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

    /// Takes `agent`'s cached scan if it is still current. The caller gives it back with [`ModuleCache::store`].
    pub fn take(&self, agent: Agent) -> Option<Vec<CachedVariable>> {
        let generation = self.generation();
        let mut entries = self.entries.lock();
        let at = entries.iter().position(|entry| entry.agent == agent && entry.generation == generation)?;
        Some(entries.swap_remove(at).variables)
    }

    /// Caches a complete scan of `agent` made in `generation`; ignored when code objects changed since.
    pub fn store(&self, agent: Agent, generation: u64, variables: Vec<CachedVariable>) {
        let mut replaced = None;
        {
            let mut entries = self.entries.lock();
            if generation != self.generation() {
                replaced = Some(variables);
            } else if let Some(entry) = entries.iter_mut().find(|entry| entry.agent == agent) {
                entry.generation = generation;
                replaced = Some(core::mem::replace(&mut entry.variables, variables));
            } else if let Err(full) = entries.try_push(Entry { agent, generation, variables }) {
                replaced = Some(full.element().variables);
            }
        }
        drop(replaced);
    }
}
