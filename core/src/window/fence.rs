//! The async-copy fence. A host's wrapper around each async copy of the program calls
//! [`crate::Engine::copy_begin`] with the agents the copy touches and [`crate::Engine::copy_end`] when its completion signal
//! fires. While no window has ever been opened, `copy_begin` is one relaxed load. Afterwards a copy counts as in
//! flight on each agent it names, and waits (with back-off, holding no lock) while a window of another thread is
//! open on any of them; a window opens only once the copies in flight on its agent are done.
//!
//! The protocol is the store-then-load pair of both sides, all `SeqCst`: a window sets its agent's `fenced`
//! flag, then reads the in-flight count; a copy adds itself to the count, then reads the flag. Either the window
//! sees the copy or the copy sees the window (and takes itself out again before waiting).
//!
//! Tokens live in a fixed table: a token is its slot's index and the slot's sequence number, so a token ended
//! twice, or one that was never issued, fails the slot's compare-and-swap and is ignored, with a log line.

use arrayvec::ArrayVec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::{AgentSlot, WindowState, current_thread};
use crate::activity::Activity;
use crate::error::{Error, Result};
use crate::lock::Backoff;
use crate::log::Level;
use crate::types::Agent;

/// Copies that can be in flight at once while the fence is armed.
pub const TOKEN_CAPACITY: usize = 4096;
/// Distinct agents one copy may name.
pub const MAX_COPY_AGENTS: usize = 8;
/// The token of a copy begun before any window was opened: nothing was counted, and ending it does nothing.
pub const UNCOUNTED_TOKEN: u64 = 0;

const INDEX_BITS: u32 = TOKEN_CAPACITY.trailing_zeros();
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

struct TokenSlot {
    /// `sequence << 2 | state`.
    word: AtomicU64,
    count: AtomicU32,
    /// Agent-slot indices the copy counts on; written by its `copy_begin` while the slot is `FILLING`.
    agents: [AtomicU32; MAX_COPY_AGENTS],
}

// The two low bits of a token slot's `word`; the rest is its sequence number, bumped by every end.
const FREE: u64 = 0;
const FILLING: u64 = 1;
const IN_USE: u64 = 2;
const ENDING: u64 = 3;
const STATE_MASK: u64 = 3;

/// The armed flag and the token table.
pub struct Fence {
    armed: AtomicBool,
    next: AtomicUsize,
    tokens: [TokenSlot; TOKEN_CAPACITY],
}

impl Default for Fence {
    fn default() -> Self {
        Self::new()
    }
}

impl Fence {
    /// Unarmed, no token out.
    pub const fn new() -> Self {
        const { assert!(TOKEN_CAPACITY.is_power_of_two()) };
        Fence {
            armed: AtomicBool::new(false),
            next: AtomicUsize::new(0),
            tokens: [const {
                TokenSlot {
                    word: AtomicU64::new(0),
                    count: AtomicU32::new(0),
                    agents: [const { AtomicU32::new(0) }; MAX_COPY_AGENTS],
                }
            }; TOKEN_CAPACITY],
        }
    }

    /// Whether a window has ever been opened (the copy path's one relaxed load).
    #[inline]
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    /// From now on every copy is counted. Called by the first window, before it fences its agent.
    pub(crate) fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Takes a free token slot; `None` when all are out.
    fn take_slot(&self) -> Option<(usize, u64)> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..TOKEN_CAPACITY).map(|probe| (start + probe) & (TOKEN_CAPACITY - 1)).find_map(|index| {
            let word = self.tokens[index].word.load(Ordering::Relaxed);
            let taken = word & STATE_MASK == FREE
                && self.tokens[index]
                    .word
                    .compare_exchange(word, word | FILLING, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok();
            taken.then_some((index, word >> 2))
        })
    }

    /// Tokens in use now (copies in flight), for tests.
    pub fn tokens_in_use(&self) -> usize {
        self.tokens.iter().filter(|slot| slot.word.load(Ordering::Acquire) & STATE_MASK != FREE).count()
    }
}

/// Whether a copy must wait for `slot`'s window: one is opening or open, and not on the copying thread (whose
/// own copies, from its device ops or from its host code inside its window, must never wait for it).
fn held_back(slot: &AgentSlot, me: usize) -> bool {
    slot.fenced.load(Ordering::SeqCst) && slot.owner.load(Ordering::Relaxed) != me
}

impl WindowState {
    /// Whether a copy of `agents` is counted: `false` while no window has ever been opened (the caller returns
    /// [`UNCOUNTED_TOKEN`] without entering the library, at the cost of one relaxed load). `InvalidArgument`
    /// for no agents.
    pub(crate) fn counts_copy(&self, agents: &[Agent]) -> Result<bool> {
        if agents.is_empty() {
            crate::log!(Level::Warning, "copy_begin: no agents named");
            return Err(Error::InvalidArgument);
        }
        Ok(self.fence.is_armed())
    }

    /// Counts a copy of `agents` in flight (see [`crate::Engine::copy_begin`]); the fence is armed and the
    /// agents are not empty. `activity` ends the wait at finalize.
    pub(crate) fn copy_begin(&self, agents: &[Agent], activity: &Activity) -> Result<u64> {
        let mut named: ArrayVec<u32, MAX_COPY_AGENTS> = ArrayVec::new();
        for &agent in agents {
            let Some((index, _)) = self.claim(agent) else {
                crate::log!(
                    Level::Warning,
                    "copy_begin: agent {:#x} cannot be fenced: {} agents have windows or copies already",
                    agent.0,
                    super::WINDOW_AGENTS
                );
                return Err(Error::CapacityExceeded);
            };
            let index = index as u32;
            if !named.contains(&index) && named.try_push(index).is_err() {
                crate::log!(Level::Warning, "copy_begin: more than {MAX_COPY_AGENTS} distinct agents in one copy");
                return Err(Error::CapacityExceeded);
            }
        }
        let Some((token_index, sequence)) = self.fence.take_slot() else {
            crate::log!(
                Level::Warning,
                "copy_begin: {TOKEN_CAPACITY} async copies are in flight already; this one is not fenced"
            );
            return Err(Error::CapacityExceeded);
        };
        self.count_in(&named, activity);
        let slot = &self.fence.tokens[token_index];
        slot.count.store(named.len() as u32, Ordering::Relaxed);
        for (to, &index) in slot.agents.iter().zip(&named) {
            to.store(index, Ordering::Relaxed);
        }
        // Publishes the agents to whichever thread ends the copy.
        slot.word.store(sequence << 2 | IN_USE, Ordering::Release);
        // Sequence numbers start at 0, tokens at 1 << INDEX_BITS: no token is UNCOUNTED_TOKEN.
        Ok((sequence + 1) << INDEX_BITS | token_index as u64)
    }

    /// Adds the copy to the in-flight count of every named agent, waiting first while any of them is held back
    /// by a window. A copy never holds one agent while it waits for another (a window on the first would time
    /// out on it for nothing). Finalize ends the waits: the copy is counted and goes ahead.
    fn count_in(&self, named: &[u32], activity: &Activity) {
        let me = current_thread();
        // Named agents have claimed slots, which are never given back.
        let slots = || named.iter().filter_map(|&index| self.at(index as usize));
        'retry: loop {
            for (done, slot) in slots().enumerate() {
                slot.in_flight.fetch_add(1, Ordering::SeqCst);
                if held_back(slot, me) && !activity.is_finalized() {
                    for undo in slots().take(done + 1) {
                        undo.in_flight.fetch_sub(1, Ordering::SeqCst);
                    }
                    let mut backoff = Backoff::new();
                    while held_back(slot, me) && !activity.is_finalized() {
                        backoff.snooze();
                    }
                    continue 'retry;
                }
            }
            return;
        }
    }

    /// Ends the copy `token` stands for (see [`crate::Engine::copy_end`]).
    pub(crate) fn copy_end(&self, token: u64) {
        if token == UNCOUNTED_TOKEN {
            return;
        }
        let index = (token & INDEX_MASK) as usize;
        // Token sequences are the slot's plus one (see `copy_begin`); 0 was never issued.
        let sequence = (token >> INDEX_BITS).wrapping_sub(1);
        let slot = &self.fence.tokens[index];
        let in_use = sequence << 2 | IN_USE;
        if slot.word.compare_exchange(in_use, sequence << 2 | ENDING, Ordering::Acquire, Ordering::Relaxed).is_err() {
            crate::log!(
                Level::Warning,
                "copy_end({token:#x}): no copy in flight has this token (ended twice, or never issued); ignored"
            );
            return;
        }
        let count = (slot.count.load(Ordering::Relaxed) as usize).min(MAX_COPY_AGENTS);
        for agent in &slot.agents[..count] {
            if let Some(agent) = self.at(agent.load(Ordering::Relaxed) as usize) {
                agent.in_flight.fetch_sub(1, Ordering::SeqCst);
            }
        }
        slot.word.store((sequence + 1) << 2 | FREE, Ordering::Release);
    }

    /// Async copies in flight on `agent` (for tests and statistics).
    pub(crate) fn copies_in_flight(&self, agent: Agent) -> u64 {
        self.find(agent).map_or(0, |(_, slot)| slot.in_flight.load(Ordering::Acquire))
    }
}
