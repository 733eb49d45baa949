//! Transfer: moves a list of ranges between device memory and storage, in chunks and batches.
//!
//! Each chunk of ranges is *pinned* first (one pass under the inventory's read lock that also re-validates the
//! tracked regions: same base, generation and at least the captured size), then optionally digested, then
//! copied in batches through `copy_batch` (or one `copy` at a time without it), then unpinned. A free of a
//! region in the chunk waits for the chunk; a free of any other region never waits. A batch that fails is
//! redone copy by copy, so exactly the copies that fail are counted.
//!
//! With digests, a tracked range whose storage holds a known earlier state (the snapshot itself for a restore,
//! the previous snapshot for a re-capture) is copied block by block: only blocks whose digest differs, merged
//! when adjacent.

use alloc::vec::Vec;

use super::{Range, Storage};
use crate::clock;
use crate::engine::Engine;
use crate::log::Level;
use crate::ops::{CopyJob, DeviceOps, Digest, DigestJob};
use crate::types::Agent;

/// Ranges pinned together at most.
const CHUNK_RANGES: usize = 4096;
/// Bytes of ranges pinned together at most: a free of one of them waits for this much copying (about 20 ms over
/// PCIe, 0.5 ms device to device), and a dirty-only pass makes one digest call per chunk, whose fixed cost
/// (a launch and a wait) is paid per chunk.
const CHUNK_BYTES: usize = 1 << 30;
/// Copies handed to `copy_batch` in one call at most.
const BATCH_COPIES: usize = 1024;
/// Ranges digested in one call at most.
const DIGEST_JOBS: usize = 256;

/// Which way the contents move.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Device memory to storage.
    Capture,
    /// Storage to device memory.
    Restore,
}

/// What happened to one range.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not reached (the pass stopped early because the library is being finalized).
    Pending,
    /// Holds the right contents now (copied, or verified unchanged).
    Done,
    /// A tracked region freed, shrunk or reallocated: not touched.
    Skipped,
    /// A copy failed.
    Failed,
}

/// Digests for a dirty-only pass.
pub(crate) struct Dirty<'a> {
    pub block_bytes: usize,
    /// Where the live digests go, indexed by `Range::digest_at`.
    pub live: &'a mut [Digest],
    /// For each range, the index in `reference` of the digests of what its storage holds now; `None`: unknown,
    /// copy the whole range.
    pub known: &'a dyn Fn(usize) -> Option<usize>,
    pub reference: &'a [Digest],
}

/// Totals of a pass.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct Moved {
    pub copied_bytes: usize,
    pub clean_bytes: usize,
    pub digest_ns: u64,
    /// A digest call failed: the rest of the pass copied whole ranges.
    pub digest_failed: bool,
}

struct Batch {
    copies: Vec<CopyJob>,
    owners: Vec<u32>,
}

impl<O: DeviceOps> Engine<O> {
    /// Moves every range of `ranges` in `direction`, writing each range's outcome. With `dirty`, tracked ranges
    /// are digested and only changed blocks move where the storage's contents are known.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn transfer(
        &self,
        ops: &O,
        agent: Agent,
        storage: &Storage,
        ranges: &[Range],
        direction: Direction,
        mut dirty: Option<Dirty<'_>>,
        outcomes: &mut [Outcome],
    ) -> Moved {
        let mut moved = Moved::default();
        let batching = ops.can_copy_batch();
        let mut batch = Batch { copies: Vec::new(), owners: Vec::new() };
        let capacity = if batching { BATCH_COPIES } else { 1 };
        if batch.copies.try_reserve_exact(capacity).is_err() || batch.owners.try_reserve_exact(capacity).is_err() {
            crate::log!(Level::Error, "agent {:#x}: no host memory for the copy list", agent.0);
            outcomes.iter_mut().for_each(|o| *o = Outcome::Failed);
            return moved;
        }
        // Without batches, one range at a time: each is validated right before its copy, as in version 1.
        let (chunk_ranges, chunk_bytes) =
            if batching || dirty.is_some() { (CHUNK_RANGES, CHUNK_BYTES) } else { (1, 0) };
        let mut pinned = [0u64; CHUNK_RANGES / 64];
        let mut start = 0;
        while start < ranges.len() {
            if self.is_finalized() {
                // Told to stop: what was not reached stays Pending.
                break;
            }
            let mut end = start + 1;
            let mut bytes = ranges[start].size;
            while end < ranges.len() && end - start < chunk_ranges && bytes + ranges[end].size <= chunk_bytes {
                bytes += ranges[end].size;
                end += 1;
            }
            let chunk = &ranges[start..end];
            // Pin: module variables always count as pinned; tracked regions only while live.
            pinned.fill(0);
            let mut k = 0;
            let keys = chunk.iter().enumerate().filter_map(|(i, r)| r.pin_key().map(|key| (i, key)));
            // Indices (in the chunk) of its tracked ranges, in pin order.
            let mut tracked: arrayvec::ArrayVec<u16, CHUNK_RANGES> = arrayvec::ArrayVec::new();
            for (i, _) in keys.clone() {
                tracked.push(i as u16);
            }
            self.inventory.pin_each(keys.map(|(_, key)| key), |ok| {
                if ok {
                    let i = tracked[k] as usize;
                    pinned[i / 64] |= 1 << (i % 64);
                }
                k += 1;
            });
            for (i, range) in chunk.iter().enumerate() {
                if range.pin_key().is_none() {
                    pinned[i / 64] |= 1 << (i % 64);
                }
            }
            let is_pinned = |i: usize| pinned[i / 64] & (1 << (i % 64)) != 0;

            // Digest the pinned tracked ranges.
            let mut digested = false;
            if let Some(dirty) = dirty.as_mut().filter(|_| !moved.digest_failed) {
                let begun = clock::now_ns();
                let result = self.digest_chunk(ops, agent, chunk, &tracked, &is_pinned, dirty, direction);
                moved.digest_ns += clock::since(begun);
                match result {
                    Ok(()) => digested = true,
                    Err(error) => {
                        moved.digest_failed = true;
                        crate::log!(
                            Level::Warning,
                            "agent {:#x}: digesting failed ({error:?}); this call copies whole ranges instead",
                            agent.0
                        );
                    }
                }
            }

            // Copy.
            let mut failed = [0u64; CHUNK_RANGES / 64];
            for (i, range) in chunk.iter().enumerate() {
                if !is_pinned(i) {
                    continue;
                }
                let index = start + i;
                let stored = storage.at(range);
                let (device, held) = (range.address as *mut u8, stored);
                let mut push = |offset: usize, len: usize, batch: &mut Batch| {
                    // SAFETY: `offset + len <= range.size`, within both the device range and its storage.
                    let (dev, sto) = unsafe { (device.add(offset), held.add(offset)) };
                    let job = match direction {
                        Direction::Capture => CopyJob { dst: sto, src: dev, bytes: len },
                        Direction::Restore => CopyJob { dst: dev, src: sto, bytes: len },
                    };
                    batch.copies.push(job);
                    batch.owners.push(i as u32);
                    moved.copied_bytes += len;
                    if batch.copies.len() == batch.copies.capacity() {
                        moved.copied_bytes -= self.submit(ops, agent, batch, &mut failed);
                    }
                };
                let known = dirty.as_ref().filter(|_| digested && range.pin_key().is_some()).and_then(|dirty| {
                    (dirty.known)(index)
                        .map(|at| (dirty.block_bytes, &dirty.live[range.digest_at..], &dirty.reference[at..]))
                });
                match known {
                    Some((block, live, reference)) => {
                        let blocks = range.size.div_ceil(block);
                        let mut run: Option<usize> = None;
                        for b in 0..=blocks {
                            let changed = b < blocks && live[b] != reference[b];
                            match (changed, run) {
                                (true, None) => run = Some(b),
                                (false, Some(first)) => {
                                    let from = first * block;
                                    let to = (b * block).min(range.size);
                                    push(from, to - from, &mut batch);
                                    run = None;
                                }
                                _ => {}
                            }
                            if b < blocks && !changed {
                                moved.clean_bytes += block.min(range.size - b * block);
                            }
                        }
                    }
                    None => push(0, range.size, &mut batch),
                }
            }
            moved.copied_bytes -= self.submit(ops, agent, &mut batch, &mut failed);
            self.inventory.unpin_each(
                tracked.iter().map(|&i| i as usize).filter(|&i| is_pinned(i)).filter_map(|i| chunk[i].pin_key()),
            );
            for i in 0..chunk.len() {
                outcomes[start + i] = if !is_pinned(i) {
                    Outcome::Skipped
                } else if failed[i / 64] & (1 << (i % 64)) != 0 {
                    Outcome::Failed
                } else {
                    Outcome::Done
                };
            }
            start = end;
            if direction == Direction::Capture && failed.iter().any(|&word| word != 0) {
                // A capture with a failed copy is declined: nothing after it is even read.
                break;
            }
        }
        moved
    }

    /// Digests the pinned tracked ranges of a chunk into `dirty.live`.
    #[allow(clippy::too_many_arguments)]
    fn digest_chunk(
        &self,
        ops: &O,
        agent: Agent,
        chunk: &[Range],
        tracked: &[u16],
        is_pinned: &dyn Fn(usize) -> bool,
        dirty: &mut Dirty<'_>,
        _direction: Direction,
    ) -> crate::Result<()> {
        let mut jobs: arrayvec::ArrayVec<DigestJob, DIGEST_JOBS> = arrayvec::ArrayVec::new();
        let block = dirty.block_bytes;
        let live = dirty.live.as_mut_ptr();
        for i in tracked.iter().map(|&i| i as usize).filter(|&i| is_pinned(i)) {
            let range = &chunk[i];
            debug_assert!(range.digest_at + range.size.div_ceil(block) <= dirty.live.len());
            jobs.push(DigestJob {
                address: range.address as *const u8,
                bytes: range.size,
                // SAFETY: digest slots were laid out for every tracked range (`digest_at` + its block count is
                // within `live`).
                digests_out: unsafe { live.add(range.digest_at) },
            });
            if jobs.is_full() {
                // SAFETY: every job is a pinned (live) tracked region of `agent` and its own slice of `live`.
                unsafe { ops.digest(agent, &jobs, block) }?;
                jobs.clear();
            }
        }
        if !jobs.is_empty() {
            // SAFETY: as above.
            unsafe { ops.digest(agent, &jobs, block) }?;
        }
        Ok(())
    }

    /// Runs the batch's copies, marks the ranges whose copies failed, and empties the batch. Returns the bytes
    /// of the copies that failed.
    fn submit(&self, ops: &O, agent: Agent, batch: &mut Batch, failed: &mut [u64]) -> usize {
        let mut failed_bytes = 0;
        if batch.copies.is_empty() {
            return 0;
        }
        let whole = ops.can_copy_batch() && batch.copies.len() > 1 && {
            // SAFETY: every copy is between a pinned live region (or module variable) and storage this snapshot
            // owns, within both; no two overlap (ranges of a snapshot are disjoint, and so is their storage).
            unsafe { ops.copy_batch(agent, &batch.copies) }.is_ok()
        };
        if !whole {
            // One at a time, so exactly the copies that fail are known.
            for (job, &owner) in batch.copies.iter().zip(&batch.owners) {
                // SAFETY: as above, for this one copy.
                if let Err(error) = unsafe { ops.copy(job.dst, job.src, job.bytes) } {
                    failed[owner as usize / 64] |= 1 << (owner % 64);
                    failed_bytes += job.bytes;
                    crate::log!(
                        Level::Warning,
                        "agent {:#x}: copying {} bytes from {:#x} to {:#x} failed ({error:?})",
                        agent.0,
                        job.bytes,
                        job.src as usize,
                        job.dst as usize
                    );
                }
            }
        }
        batch.copies.clear();
        batch.owners.clear();
        failed_bytes
    }
}
