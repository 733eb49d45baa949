//! The block pool both storage tiers share: retained blocks of one agent, handed out by best fit within
//! `[size, 2 * size]`, so a small request cannot take a block that a later, larger one would have to allocate
//! again. It knows nothing of where blocks come from (host mappings or device memory): the tiers allocate and
//! free, and call in here to keep the books.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

use arrayvec::ArrayVec;

use crate::opsets::OpsHold;

/// Blocks (idle or lent) one agent's pool keeps track of, per tier.
pub const BLOCKS_PER_AGENT: usize = 1024;

/// Low bits of a loan number that hold the block's index, so a release finds it without a search.
const BLOCK_INDEX_BITS: u32 = 10;
const _: () = assert!(BLOCKS_PER_AGENT <= 1 << BLOCK_INDEX_BITS);

static NEXT_LOAN: AtomicU64 = AtomicU64::new(1);

/// A fresh loan number: 64 bits, never 0, never reused in practice (2^54 block loans or 2^64 slab loans).
pub fn next_loan() -> u64 {
    NEXT_LOAN.fetch_add(1, Ordering::Relaxed)
}

fn block_loan(index: usize) -> u64 {
    (next_loan() << BLOCK_INDEX_BITS) | index as u64
}

/// The block index a loan number carries.
pub fn block_index(loan: u64) -> usize {
    (loan & ((1 << BLOCK_INDEX_BITS) - 1)) as usize
}

/// One retained block.
#[derive(Copy, Clone, Debug)]
pub struct Block {
    /// Start of the block.
    pub ptr: NonNull<u8>,
    /// Its size in bytes.
    pub capacity: usize,
    /// The set of ops the block is page-locked (host) or allocated (device) through, if any: it is unlocked or
    /// freed through that same set.
    pub hold: Option<OpsHold>,
    lent: bool,
    loan: u64,
}

impl Block {
    /// A block just allocated, about to be lent.
    pub fn new(ptr: NonNull<u8>, capacity: usize, hold: Option<OpsHold>) -> Self {
        Block { ptr, capacity, hold, lent: true, loan: 0 }
    }
}

/// A block lent out: where it is and the loan that must come back with it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Loaned {
    /// Start of the block.
    pub ptr: NonNull<u8>,
    /// Its size.
    pub capacity: usize,
    /// The loan number.
    pub loan: u64,
    /// As [`Block::hold`].
    pub hold: Option<OpsHold>,
}

#[derive(Copy, Clone, Debug)]
struct IdleBlock {
    capacity: usize,
    index: u16,
}

/// # Invariants
/// `idle` lists exactly the blocks that are present and not lent, each once, ordered by capacity. Blocks never
/// move, so a loan number can carry its block's index.
pub struct BlockPool {
    blocks: ArrayVec<Option<Block>, BLOCKS_PER_AGENT>,
    idle: ArrayVec<IdleBlock, BLOCKS_PER_AGENT>,
}

impl BlockPool {
    /// No blocks.
    pub const fn new() -> Self {
        BlockPool { blocks: ArrayVec::new_const(), idle: ArrayVec::new_const() }
    }

    /// Lends the smallest idle block with capacity in `[size, 2 * size]`, if any.
    pub fn take_best_fit(&mut self, size: usize) -> Option<Loaned> {
        let first = self.idle.partition_point(|b| b.capacity < size);
        let capacity = self.idle.get(first)?.capacity;
        if capacity > size.saturating_mul(2) {
            return None;
        }
        // Of equal blocks take the last listed: removing it moves the fewest entries.
        let last = self.idle.partition_point(|b| b.capacity <= capacity) - 1;
        let index = self.idle.remove(last).index as usize;
        let block = self.blocks[index].as_mut()?;
        block.lent = true;
        block.loan = block_loan(index);
        Some(Loaned { ptr: block.ptr, capacity: block.capacity, loan: block.loan, hold: block.hold })
    }

    /// Adds a newly allocated block and lends it; `None` (and nothing kept) when every slot is taken.
    pub fn add_lent(&mut self, block: Block) -> Option<Loaned> {
        let index = match self.blocks.iter().position(Option::is_none) {
            Some(index) => index,
            None => {
                self.blocks.try_push(None).ok()?;
                self.blocks.len() - 1
            }
        };
        let loan = block_loan(index);
        self.blocks[index] = Some(Block { lent: true, loan, ..block });
        Some(Loaned { ptr: block.ptr, capacity: block.capacity, loan, hold: block.hold })
    }

    /// Takes back a block lent under `loan`; false (and nothing changes) when that loan is not outstanding.
    pub fn give_back(&mut self, ptr: NonNull<u8>, capacity: usize, loan: u64) -> bool {
        let index = block_index(loan);
        match self.blocks.get_mut(index) {
            Some(Some(block)) if block.ptr == ptr && block.capacity == capacity && block.lent && block.loan == loan => {
                block.lent = false;
                let at = self.idle.partition_point(|b| b.capacity <= capacity);
                // Cannot overflow: `idle` has room for every block.
                self.idle.insert(at, IdleBlock { capacity, index: index as u16 });
                true
            }
            _ => false,
        }
    }

    /// Records the set of ops a lent block is now page-locked through.
    pub fn set_hold(&mut self, loan: u64, ptr: NonNull<u8>, hold: Option<OpsHold>) -> bool {
        match self.blocks.get_mut(block_index(loan)) {
            Some(Some(block)) if block.ptr == ptr && block.lent && block.loan == loan => {
                block.hold = hold;
                true
            }
            _ => false,
        }
    }

    /// Removes the largest idle block, for the tier to free.
    pub fn pop_idle(&mut self) -> Option<Block> {
        let idle = self.idle.pop()?;
        self.blocks[idle.index as usize].take()
    }

    /// Removes every block, idle and lent, without freeing it (its memory is gone already): loans out stay
    /// unreturnable. `each` gets every removed block.
    pub fn forget_all(&mut self, each: &mut dyn FnMut(Block)) {
        self.idle.clear();
        for block in self.blocks.iter_mut().filter_map(Option::take) {
            each(block);
        }
        self.blocks.clear();
    }

    /// Clears the page-locked mark of every block, idle and lent (the registration is gone already); `each` gets
    /// every hold cleared.
    pub fn forget_holds(&mut self, each: &mut dyn FnMut(OpsHold)) {
        for block in self.blocks.iter_mut().flatten() {
            if let Some(hold) = block.hold.take() {
                each(hold);
            }
        }
    }

    /// Capacity of the idle blocks.
    pub fn idle_bytes(&self) -> usize {
        self.idle.iter().map(|b| b.capacity).sum()
    }

    /// Capacity of every block, idle or lent.
    pub fn total_bytes(&self) -> usize {
        self.blocks.iter().flatten().map(|b| b.capacity).sum()
    }

    /// Whether the pool holds no block at all.
    pub fn is_empty(&self) -> bool {
        self.blocks.iter().all(Option::is_none)
    }
}

impl Default for BlockPool {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the pointers are addresses of storage the pool keeps books on; they are only read or written under the
// owning tier's per-agent mutex, and the memory behind them is handed out only through loans.
unsafe impl Send for BlockPool {}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(addr: usize, capacity: usize) -> Block {
        Block::new(NonNull::new(addr as *mut u8).unwrap(), capacity, None)
    }

    #[test]
    fn best_fit_stays_within_twice_the_request_and_stale_loans_are_refused() {
        let mut pool = BlockPool::new();
        let small = pool.add_lent(fake(0x1000, 100)).unwrap();
        let big = pool.add_lent(fake(0x2000, 1000)).unwrap();
        assert!(pool.give_back(small.ptr, small.capacity, small.loan));
        assert!(pool.give_back(big.ptr, big.capacity, big.loan));
        assert!(!pool.give_back(big.ptr, big.capacity, big.loan), "a second release of one loan");
        assert_eq!(pool.take_best_fit(400), None, "1000 is more than twice 400");
        let again = pool.take_best_fit(600).unwrap();
        assert_eq!(again.ptr, big.ptr);
        assert_ne!(again.loan, big.loan, "a new loan number for a new loan");
        assert!(!pool.give_back(big.ptr, big.capacity, big.loan), "a stale copy of the old loan");
        assert_eq!(pool.idle_bytes(), 100);
        assert_eq!(pool.total_bytes(), 1100);
        assert_eq!(pool.pop_idle().map(|b| b.capacity), Some(100));
        assert!(!pool.is_empty());
    }
}
