//! Learned write sets: which blocks of a snapshot's footprint its restores digest.
//!
//! A dirty-only restore digests every block of the footprint to find the few that changed, so its cost follows
//! the footprint, not what the kernel wrote. With the policy's `learn_write_set`, the first restore of a
//! snapshot still digests everything, and remembers the blocks it found changed: the snapshot's write set. Later
//! restores digest (and write back) only the blocks of that set and of the host's hints. A kernel that writes
//! the same blocks on every pass from the same state is restored exactly by them.
//!
//! What a partial restore cannot see is a block written outside the set (a kernel whose writes depend on
//! something that is not in the captured state, or a non-deterministic one): the pass after it starts from a
//! state that is not the snapshot. So the restore that matters, the last of the window before the pass whose
//! results the program keeps, is a *full check*: it digests the whole footprint again, restores whatever changed,
//! and adds the blocks it found outside the set to the set. Those blocks are reported as misses, with the first
//! pass that may have started from a wrong state (the one after the first partial restore since the last full
//! check). A restore is a full check when the host asks for one, when the snapshot's window reaches its last
//! restore by its pass count, and whenever the policy's flag is off.
//!
//! The state lives in the snapshot behind a mutex that is never held across a device op: a restore copies what
//! it needs at its start ([`WriteSet::begin`]) and folds what it found back at its end ([`WriteSet::finish`]).

use alloc::vec::Vec;

use super::Range;

/// Bits per word of a block set.
const WORD: usize = 64;

/// A set of blocks, one bit per digest slot of the snapshot (indexed like its digests).
pub(crate) type Blocks = Vec<u64>;

/// The write set of one snapshot, and the count of its restores.
pub(crate) struct WriteSet {
    /// The blocks partial restores digest: those the full restores found changed, and the hinted ones.
    bits: Blocks,
    /// A full restore has learned the set, so later restores may be partial.
    learned: bool,
    /// Restores of the snapshot begun.
    restores: u32,
    /// The index of the first partial restore since the last full one (0: none since).
    first_partial: u32,
    /// Tracked ranges' indices sorted by address, for hints (built on the first hint).
    by_address: Vec<u32>,
}

/// How one restore uses the write set, decided at its start.
pub(crate) struct Plan {
    /// The restore's index among the snapshot's restores, from 1.
    pub index: u32,
    /// The restore digests the whole footprint.
    pub full: bool,
    /// For a partial restore: the blocks it digests.
    pub select: Option<Blocks>,
    /// When the restore learns: where it marks the blocks it found changed.
    pub changed: Option<Blocks>,
}

/// What a restore found about the write set.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Learned {
    /// Blocks in the set after the restore (0 while nothing is learned or the policy does not learn).
    pub blocks: usize,
    /// Blocks a full check found changed outside the set, after partial restores: some pass from
    /// `miss_pass` on may have started from a state that was not the snapshot.
    pub misses: usize,
    /// The first pass that may have started from a wrong state (0 without misses). Pass `k + 1` runs after the
    /// snapshot's `k`-th restore.
    pub miss_pass: u32,
}

impl WriteSet {
    /// Nothing learned, no restore yet.
    pub(crate) const fn new() -> Self {
        WriteSet { bits: Vec::new(), learned: false, restores: 0, first_partial: 0, by_address: Vec::new() }
    }

    /// Restores of the snapshot begun so far.
    #[cfg(test)]
    pub(crate) fn restores(&self) -> u32 {
        self.restores
    }

    /// Plans the next restore of a snapshot with `blocks` digest slots. It learns when `learn` (the policy asks
    /// and the restore digests); it is partial when it learns, a set is learned and `full_check` is not asked
    /// for. Without host memory for the sets it is a full restore that learns nothing, as with the flag off.
    pub(crate) fn begin(&mut self, blocks: usize, learn: bool, full_check: bool) -> Plan {
        self.restores = self.restores.saturating_add(1);
        let index = self.restores;
        let unlearned = Plan { index, full: true, select: None, changed: None };
        if !learn || !self.fit(blocks) {
            return unlearned;
        }
        let Some(changed) = zeroed(self.bits.len()) else { return unlearned };
        let full = full_check || !self.learned;
        let select = if full { None } else { copy_of(&self.bits) };
        if !full && select.is_none() {
            return Plan { select: None, changed: Some(changed), ..unlearned };
        }
        if !full && self.first_partial == 0 {
            self.first_partial = index;
        }
        Plan { index, full, select, changed: Some(changed) }
    }

    /// Folds a finished restore's findings in. `complete`: every tracked range it reached was digested (no
    /// digest failed), so a full restore's changed blocks are the whole write set of the pass before it.
    pub(crate) fn finish(&mut self, plan: &Plan, complete: bool) -> Learned {
        let Some(changed) = plan.changed.as_ref().filter(|_| plan.full) else {
            return Learned { blocks: self.count(), ..Learned::default() };
        };
        let mut misses = 0;
        if changed.len() == self.bits.len() {
            for (set, &found) in self.bits.iter_mut().zip(changed) {
                misses += (found & !*set).count_ones() as usize;
                *set |= found;
            }
        }
        // Outside a learned set before the first partial restore is not a miss: no pass started from a wrong
        // state (the pass before was restored whole); the set simply grows.
        let after_partial = self.learned && self.first_partial != 0;
        let learned = Learned {
            blocks: self.count(),
            misses: if after_partial { misses } else { 0 },
            miss_pass: if after_partial && misses > 0 { self.first_partial.saturating_add(1) } else { 0 },
        };
        // A full restore leaves the state exact (what it did not digest it wrote whole).
        self.first_partial = 0;
        self.learned |= complete;
        learned
    }

    /// Adds the blocks of `ranges` (the snapshot's) that the hints `[address, address + bytes)` touch; `bytes` 0
    /// stands for the whole tracked range that holds `address`. Hints outside every tracked range are ignored.
    /// Returns the blocks newly added; `None` without host memory (nothing added).
    pub(crate) fn hint(
        &mut self,
        ranges: &[Range],
        blocks: usize,
        block_bytes: usize,
        hints: &[(usize, usize)],
    ) -> Option<usize> {
        if !self.fit(blocks) || !self.index(ranges) {
            return None;
        }
        let mut added = 0;
        for &(address, bytes) in hints {
            // A whole-region hint finds its region as its first byte would.
            let hint_end = address.saturating_add(bytes.max(1));
            // The last tracked range that starts at or before `address`, then those that start before the end.
            let first = self.by_address.partition_point(|&i| ranges[i as usize].address <= address);
            for &i in &self.by_address[first.saturating_sub(1)..] {
                let range = &ranges[i as usize];
                if range.address >= hint_end {
                    break;
                }
                let range_end = range.address + range.size;
                let (start, end) = (address.max(range.address), hint_end.min(range_end));
                if start >= end {
                    continue;
                }
                let (start, end) = if bytes == 0 { (range.address, range_end) } else { (start, end) };
                let b0 = range.digest_at + (start - range.address) / block_bytes;
                let b1 = range.digest_at + (end - 1 - range.address) / block_bytes + 1;
                added += set_range(&mut self.bits, b0, b1);
            }
        }
        Some(added)
    }

    /// Blocks in the set.
    pub(crate) fn count(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Sizes the set for `blocks` slots (a snapshot's count never changes); false without host memory.
    fn fit(&mut self, blocks: usize) -> bool {
        let words = blocks.div_ceil(WORD);
        if self.bits.len() == words {
            return true;
        }
        if self.bits.try_reserve_exact(words.saturating_sub(self.bits.len())).is_err() {
            return false;
        }
        self.bits.resize(words, 0);
        true
    }

    /// Builds the index of tracked ranges by address, once; false without host memory.
    fn index(&mut self, ranges: &[Range]) -> bool {
        if !self.by_address.is_empty() {
            return true;
        }
        let tracked = ranges.iter().filter(|r| r.pin_key().is_some()).count();
        if self.by_address.try_reserve_exact(tracked).is_err() {
            return false;
        }
        self.by_address.extend((0..ranges.len() as u32).filter(|&i| ranges[i as usize].pin_key().is_some()));
        self.by_address.sort_unstable_by_key(|&i| ranges[i as usize].address);
        true
    }
}

/// A set of `words` words, all clear; `None` without host memory.
fn zeroed(words: usize) -> Option<Blocks> {
    let mut bits = Vec::new();
    bits.try_reserve_exact(words).ok()?;
    bits.resize(words, 0);
    Some(bits)
}

/// A copy of `bits`; `None` without host memory.
fn copy_of(bits: &[u64]) -> Option<Blocks> {
    let mut copy = Vec::new();
    copy.try_reserve_exact(bits.len()).ok()?;
    copy.extend_from_slice(bits);
    Some(copy)
}

/// Whether block `b` is in `bits`.
pub(crate) fn contains(bits: &[u64], b: usize) -> bool {
    bits[b / WORD] & (1 << (b % WORD)) != 0
}

/// Adds block `b` to `bits`.
pub(crate) fn insert(bits: &mut [u64], b: usize) {
    bits[b / WORD] |= 1 << (b % WORD);
}

/// Adds blocks `from..to`; returns how many were not in the set.
fn set_range(bits: &mut [u64], from: usize, to: usize) -> usize {
    let mut added = 0;
    for b in from..to {
        if !contains(bits, b) {
            insert(bits, b);
            added += 1;
        }
    }
    added
}

/// The runs of consecutive blocks of `select` within `from..to`, in order, as `(first, end)`; words with no block
/// are skipped whole. `None` selects every block: one run, `(from, to)`.
pub(crate) fn runs(select: Option<&[u64]>, from: usize, to: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut b = from;
    let mut whole = select.is_none();
    core::iter::from_fn(move || {
        let Some(bits) = select else { return core::mem::take(&mut whole).then_some((from, to)) };
        // The next block in the set.
        while b < to {
            let word = bits[b / WORD] >> (b % WORD);
            if word == 0 {
                b = (b / WORD + 1) * WORD;
                continue;
            }
            b += word.trailing_zeros() as usize;
            break;
        }
        if b >= to {
            return None;
        }
        let first = b;
        // The end of its run.
        while b < to {
            let word = !bits[b / WORD] >> (b % WORD);
            let ones = if word == 0 { WORD - b % WORD } else { word.trailing_zeros() as usize };
            b += ones;
            if word != 0 {
                break;
            }
        }
        let end = b.min(to);
        b = end;
        Some((first, end))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_find_every_run_within_the_bounds_and_skip_empty_words() {
        let mut bits = vec![0u64; 4];
        for b in [0, 1, 2, 63, 64, 65, 130, 200, 255] {
            insert(&mut bits, b);
        }
        let all: Vec<_> = runs(Some(&bits), 0, 256).collect();
        assert_eq!(all, [(0, 3), (63, 66), (130, 131), (200, 201), (255, 256)]);
        let inner: Vec<_> = runs(Some(&bits), 2, 200).collect();
        assert_eq!(inner, [(2, 3), (63, 66), (130, 131)]);
        assert_eq!(runs(Some(&bits), 3, 63).count(), 0);
        let mut full = vec![u64::MAX; 2];
        assert_eq!(runs(Some(&full), 5, 100).collect::<Vec<_>>(), [(5, 100)]);
        full[1] = 0;
        assert_eq!(runs(Some(&full), 5, 100).collect::<Vec<_>>(), [(5, 64)]);
        assert_eq!(runs(None, 5, 100).collect::<Vec<_>>(), [(5, 100)]);
    }

    #[test]
    fn a_full_check_reports_misses_only_after_a_partial_restore() {
        let mut set = WriteSet::new();
        let plan = |set: &mut WriteSet, full_check| set.begin(128, true, full_check);
        // Restore 1 learns blocks 3 and 70.
        let mut first = plan(&mut set, false);
        assert!(first.full && first.select.is_none());
        insert(first.changed.as_mut().unwrap(), 3);
        insert(first.changed.as_mut().unwrap(), 70);
        assert_eq!(set.finish(&first, true), Learned { blocks: 2, misses: 0, miss_pass: 0 });
        // Restore 2, a full check before any partial one: block 9 joins the set, not a miss.
        let mut second = plan(&mut set, true);
        assert!(second.full);
        insert(second.changed.as_mut().unwrap(), 9);
        assert_eq!(set.finish(&second, true), Learned { blocks: 3, misses: 0, miss_pass: 0 });
        // Restores 3 and 4 are partial, over the set.
        for _ in 0..2 {
            let partial = plan(&mut set, false);
            assert!(!partial.full);
            assert_eq!(runs(partial.select.as_deref(), 0, 128).count(), 3);
            assert_eq!(set.finish(&partial, true).misses, 0);
        }
        // Restore 5 checks everything and finds block 100: a pass from pass 4 on (after restore 3) may have
        // started from a wrong state.
        let mut last = plan(&mut set, true);
        insert(last.changed.as_mut().unwrap(), 100);
        insert(last.changed.as_mut().unwrap(), 3);
        assert_eq!(set.finish(&last, true), Learned { blocks: 4, misses: 1, miss_pass: 4 });
        assert_eq!(set.restores(), 5);
    }

    #[test]
    fn hints_add_the_blocks_they_touch_and_a_whole_region_hint_its_region() {
        const BLOCK: usize = 4096;
        let tracked = |address: usize, blocks: usize, digest_at: usize| Range {
            address,
            size: blocks * BLOCK,
            tier: super::super::Tier::Host,
            offset: 0,
            source: super::super::Source::Tracked { kind: crate::inventory::RegionKind::Allocation, generation: 1 },
            digest_at,
            hint: 0,
        };
        // Listed out of address order: blocks 0-2 at 0x20000, 3-5 at 0x10000, 6-7 at 0x30000.
        let ranges = [tracked(0x20000, 3, 0), tracked(0x10000, 3, 3), tracked(0x30000, 2, 6)];
        let mut set = WriteSet::new();
        let mut hint = |hints: &[(usize, usize)]| set.hint(&ranges, 8, BLOCK, hints).unwrap();
        // A byte inside the second block of 0x10000, whole: all three of its blocks.
        assert_eq!(hint(&[(0x10000 + BLOCK + 5, 0)]), 3);
        // From a gap into the first two blocks of 0x20000; a whole-region hint in a gap adds nothing.
        assert_eq!(hint(&[(0x1F000, 0x2001), (0x28000, 0)]), 2);
        // Across all three: what is left of 0x20000 and both blocks of 0x30000.
        assert_eq!(hint(&[(0x10000, 0x30000)]), 3);
        assert_eq!(set.count(), 8);
    }

    #[test]
    fn without_the_flag_every_restore_is_full_and_learns_nothing() {
        let mut set = WriteSet::new();
        for _ in 0..3 {
            let plan = set.begin(64, false, false);
            assert!(plan.full && plan.changed.is_none());
            assert_eq!(set.finish(&plan, true), Learned::default());
        }
    }

    #[test]
    fn an_incomplete_first_restore_learns_nothing_so_the_next_is_full_again() {
        let mut set = WriteSet::new();
        let first = set.begin(64, true, false);
        set.finish(&first, false);
        assert!(set.begin(64, true, false).full);
    }
}
