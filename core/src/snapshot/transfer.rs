//! Transfer: moves a list of ranges between device memory and storage, in chunks and batches.
//!
//! Each chunk of ranges is *pinned* first (one pass under the inventory's read lock that also re-validates the
//! tracked regions: same base, generation and at least the captured size), then optionally digested, then
//! copied in batches through `copy_batch` (or one `copy` at a time without it), then unpinned. A free of a
//! region in the chunk waits for the chunk; a free of any other region never waits. A batch that fails is
//! redone copy by copy, and a span of module variables whose copy fails is redone variable by variable, so
//! exactly the regions and variables that fail are counted.
//!
//! With digests, a tracked range whose storage holds a known earlier state (the snapshot itself for a restore,
//! the previous snapshot for a re-capture) is copied block by block: only blocks whose digest differs, merged
//! when adjacent.

use alloc::vec::Vec;

use super::{Range, Source, Storage};
use crate::clock;
use crate::engine::Engine;
use crate::log::Level;
use crate::modules::CachedVariable;
use crate::ops::{CopyJob, DeviceOps, Digest, DigestJob};
use crate::types::Agent;

/// Ranges pinned together at most.
const CHUNK_RANGES: usize = 16384;
/// Bytes of ranges pinned together at most: a free of one of them waits for this much copying (about 40 ms over
/// PCIe, 1 ms device to device), and each chunk pays a batch's and a digest call's fixed cost (a launch and a
/// wait, tens of microseconds), which is what a larger chunk saves.
const CHUNK_BYTES: usize = 2 << 30;
/// Copies handed to `copy_batch` in one call at most: a chunk's copies, or a dirty chunk's changed blocks in a
/// few calls.
const BATCH_COPIES: usize = CHUNK_RANGES;

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
    /// A span of module variables that the device would not copy as one, copied variable by variable.
    DoneOneByOne,
    /// A tracked region freed, shrunk or reallocated: not touched.
    Skipped,
    /// A copy failed: this many of the range's units (its region, or variables of its span) were not moved.
    Failed(u32),
}

/// The ranges of a pass, and the module list their spans index into.
#[derive(Copy, Clone)]
pub(crate) struct Ranges<'a> {
    pub all: &'a [Range],
    pub variables: &'a [CachedVariable],
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

/// Per-call working memory, allocated once per transfer (fallibly) and sized for one chunk.
struct Scratch {
    copies: Vec<CopyJob>,
    /// The chunk index of each copy's range.
    owners: Vec<u32>,
    /// Chunk indices of the chunk's tracked ranges, in pin order.
    tracked: Vec<u32>,
    /// Bit sets over the chunk: pinned (or a module variable), failed.
    pinned: Vec<u64>,
    failed: Vec<u64>,
    /// Spans of the chunk copied variable by variable: (chunk index, variables not moved).
    split: Vec<(u32, u32)>,
    jobs: Vec<DigestJob>,
}

impl Scratch {
    /// Working memory for chunks of `ranges` ranges and batches of `copies` copies; `None` without host memory.
    fn new(ranges: usize, copies: usize, digests: bool) -> Option<Scratch> {
        let words = ranges.div_ceil(64);
        let mut scratch = Scratch {
            copies: Vec::new(),
            owners: Vec::new(),
            tracked: Vec::new(),
            pinned: Vec::new(),
            failed: Vec::new(),
            split: Vec::new(),
            jobs: Vec::new(),
        };
        scratch.copies.try_reserve_exact(copies).ok()?;
        scratch.owners.try_reserve_exact(copies).ok()?;
        scratch.tracked.try_reserve_exact(ranges).ok()?;
        scratch.pinned.try_reserve_exact(words).ok()?;
        scratch.failed.try_reserve_exact(words).ok()?;
        if digests {
            scratch.jobs.try_reserve_exact(ranges).ok()?;
        }
        scratch.pinned.resize(words, 0);
        scratch.failed.resize(words, 0);
        Some(scratch)
    }

    fn is_pinned(&self, i: usize) -> bool {
        self.pinned[i / 64] & (1 << (i % 64)) != 0
    }

    fn has_failed(&self, i: usize) -> bool {
        self.failed[i / 64] & (1 << (i % 64)) != 0
    }
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
        ranges: Ranges<'_>,
        direction: Direction,
        mut dirty: Option<Dirty<'_>>,
        outcomes: &mut [Outcome],
    ) -> Moved {
        let Ranges { all: ranges, variables } = ranges;
        let mut moved = Moved::default();
        let batching = ops.can_copy_batch();
        // Without batches or digests, one range at a time: each is validated right before its copy, as in
        // version 1.
        let (chunk_ranges, chunk_bytes) =
            if batching || dirty.is_some() { (CHUNK_RANGES.min(ranges.len().max(1)), CHUNK_BYTES) } else { (1, 0) };
        let copies = if batching { BATCH_COPIES } else { 1 };
        let scratch =
            Scratch::new(chunk_ranges, copies, dirty.is_some()).or_else(|| Scratch::new(1, 1, dirty.is_some()));
        let Some(mut scratch) = scratch else {
            crate::log!(Level::Error, "agent {:#x}: no host memory for the copy list", agent.0);
            for (outcome, range) in outcomes.iter_mut().zip(ranges) {
                *outcome = Outcome::Failed(range.units() as u32);
            }
            return moved;
        };
        let chunk_ranges = chunk_ranges.min(scratch.tracked.capacity()).max(1);
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
            self.pin_chunk(chunk, &mut scratch);

            // Digest the pinned tracked ranges.
            let mut digested = false;
            if let Some(dirty) = dirty.as_mut().filter(|_| !moved.digest_failed) {
                let begun = clock::now_ns();
                let result = self.digest_chunk(ops, agent, chunk, &mut scratch, dirty);
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
            scratch.failed.fill(0);
            scratch.split.clear();
            for (i, range) in chunk.iter().enumerate() {
                if !scratch.is_pinned(i) {
                    continue;
                }
                let known = dirty.as_ref().filter(|_| digested && range.pin_key().is_some()).and_then(|dirty| {
                    (dirty.known)(start + i)
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
                                    let at = (i, from, to - from);
                                    self.push(
                                        ops,
                                        agent,
                                        storage,
                                        chunk,
                                        variables,
                                        at,
                                        direction,
                                        &mut scratch,
                                        &mut moved,
                                    );
                                    run = None;
                                }
                                _ => {}
                            }
                            if b < blocks && !changed {
                                moved.clean_bytes += block.min(range.size - b * block);
                            }
                        }
                    }
                    None => {
                        let at = (i, 0, range.size);
                        self.push(ops, agent, storage, chunk, variables, at, direction, &mut scratch, &mut moved)
                    }
                }
            }
            moved.copied_bytes -= self.submit(ops, agent, chunk, variables, &mut scratch);
            let pinned_keys = scratch
                .tracked
                .iter()
                .map(|&i| i as usize)
                .filter(|&i| scratch.is_pinned(i))
                .filter_map(|i| chunk[i].pin_key());
            self.inventory.unpin_each(pinned_keys);
            let mut any_failed = false;
            for i in 0..chunk.len() {
                outcomes[start + i] = if !scratch.is_pinned(i) {
                    Outcome::Skipped
                } else {
                    let split = scratch
                        .split
                        .binary_search_by_key(&(i as u32), |&(at, _)| at)
                        .ok()
                        .map(|at| scratch.split[at].1);
                    match (scratch.has_failed(i), split) {
                        (false, None) => Outcome::Done,
                        (false, Some(_)) => Outcome::DoneOneByOne,
                        (true, lost) => {
                            any_failed = true;
                            Outcome::Failed(lost.unwrap_or(chunk[i].units() as u32))
                        }
                    }
                };
            }
            start = end;
            if direction == Direction::Capture && any_failed {
                // A capture with a failed copy is declined: nothing after it is even read.
                break;
            }
        }
        moved
    }

    /// Pins the chunk's tracked ranges (module variables always count as pinned; tracked regions only while
    /// live with their generation and size).
    fn pin_chunk(&self, chunk: &[Range], scratch: &mut Scratch) {
        scratch.pinned.fill(0);
        scratch.tracked.clear();
        for (i, range) in chunk.iter().enumerate() {
            if range.pin_key().is_some() {
                scratch.tracked.push(i as u32);
            } else {
                scratch.pinned[i / 64] |= 1 << (i % 64);
            }
        }
        let Scratch { tracked, pinned, .. } = scratch;
        let mut k = 0;
        self.inventory.pin_each(tracked.iter().filter_map(|&i| chunk[i as usize].pin_key()), |ok| {
            if ok {
                let i = tracked[k] as usize;
                pinned[i / 64] |= 1 << (i % 64);
            }
            k += 1;
        });
    }

    /// Adds one copy of `len` bytes at `offset` within the chunk's range `i` (`at` = `(i, offset, len)`) to the
    /// batch, submitting the batch when it is full.
    #[allow(clippy::too_many_arguments)]
    fn push(
        &self,
        ops: &O,
        agent: Agent,
        storage: &Storage,
        chunk: &[Range],
        variables: &[CachedVariable],
        (i, offset, len): (usize, usize, usize),
        direction: Direction,
        scratch: &mut Scratch,
        moved: &mut Moved,
    ) {
        let range = &chunk[i];
        // SAFETY: `offset + len <= range.size`, within both the device range and its storage.
        let (device, stored) = unsafe { ((range.address as *mut u8).add(offset), storage.at(range).add(offset)) };
        let job = match direction {
            Direction::Capture => CopyJob { dst: stored, src: device, bytes: len },
            Direction::Restore => CopyJob { dst: device, src: stored, bytes: len },
        };
        scratch.copies.push(job);
        scratch.owners.push(i as u32);
        moved.copied_bytes += len;
        if scratch.copies.len() == scratch.copies.capacity() {
            moved.copied_bytes -= self.submit(ops, agent, chunk, variables, scratch);
        }
    }

    /// Digests the pinned tracked ranges of a chunk into `dirty.live`, in one call.
    fn digest_chunk(
        &self,
        ops: &O,
        agent: Agent,
        chunk: &[Range],
        scratch: &mut Scratch,
        dirty: &mut Dirty<'_>,
    ) -> crate::Result<()> {
        let block = dirty.block_bytes;
        let live = dirty.live.as_mut_ptr();
        scratch.jobs.clear();
        for &i in &scratch.tracked {
            let i = i as usize;
            if !scratch.is_pinned(i) {
                continue;
            }
            let range = &chunk[i];
            debug_assert!(range.digest_at + range.size.div_ceil(block) <= dirty.live.len());
            scratch.jobs.push(DigestJob {
                address: range.address as *const u8,
                bytes: range.size,
                // SAFETY: digest slots were laid out for every tracked range (`digest_at` + its block count is
                // within `live`).
                digests_out: unsafe { live.add(range.digest_at) },
            });
        }
        if scratch.jobs.is_empty() {
            return Ok(());
        }
        // SAFETY: every job is a pinned (live) tracked region of `agent` and its own slice of `live`.
        unsafe { ops.digest(agent, &scratch.jobs, block) }
    }

    /// Runs the batch's copies, marks the ranges whose copies failed, and empties the batch. Returns the bytes
    /// of the copies that failed.
    fn submit(
        &self,
        ops: &O,
        agent: Agent,
        chunk: &[Range],
        variables: &[CachedVariable],
        batch: &mut Scratch,
    ) -> usize {
        let mut failed_bytes = 0;
        if batch.copies.is_empty() {
            return 0;
        }
        let whole = ops.can_copy_batch() && batch.copies.len() > 1 && {
            // SAFETY: every copy is between a pinned live region (or module variables) and storage this snapshot
            // owns, within both; no two overlap (ranges of a snapshot are disjoint, and so is their storage).
            unsafe { ops.copy_batch(agent, &batch.copies) }.is_ok()
        };
        if !whole {
            // One at a time, so exactly the copies that fail are known.
            for (job, &owner) in batch.copies.iter().zip(&batch.owners) {
                // SAFETY: as above, for this one copy.
                let Err(error) = (unsafe { ops.copy(job.dst, job.src, job.bytes) }) else { continue };
                let range = &chunk[owner as usize];
                let lost = match range.source {
                    Source::ModuleVariables { first, count } if count > 1 => {
                        // The span may cross from one code object's memory into another's, which a device may
                        // refuse as one copy: copy its variables one by one.
                        let members = &variables[first as usize..][..count as usize];
                        let (lost, lost_bytes) = self.copy_variables(ops, agent, range, members, job);
                        // Without memory for the note, a span copied whole one by one still counts as done, and
                        // one that failed in part counts every variable as failed.
                        // In order of the chunk's ranges, for the binary search that reads the notes.
                        debug_assert!(batch.split.last().is_none_or(|&(at, _)| at < owner));
                        if batch.split.try_reserve(1).is_ok() {
                            batch.split.push((owner, lost));
                        }
                        if lost == 0 {
                            continue;
                        }
                        failed_bytes += lost_bytes;
                        lost
                    }
                    _ => {
                        failed_bytes += job.bytes;
                        crate::log!(
                            Level::Warning,
                            "agent {:#x}: copying {} bytes from {:#x} to {:#x} failed ({error:?})",
                            agent.0,
                            job.bytes,
                            job.src as usize,
                            job.dst as usize
                        );
                        1
                    }
                };
                debug_assert!(lost > 0);
                batch.failed[owner as usize / 64] |= 1 << (owner % 64);
            }
        }
        batch.copies.clear();
        batch.owners.clear();
        failed_bytes
    }

    /// Copies each of a span's `members` (sorted by address) on its own, after `job` (the whole span) failed.
    /// Returns how many failed, and the bytes of the span they leave unmoved (the union of the failed variables:
    /// bytes they share are counted once).
    fn copy_variables(
        &self,
        ops: &O,
        agent: Agent,
        span: &Range,
        members: &[CachedVariable],
        job: &CopyJob,
    ) -> (u32, usize) {
        debug_assert_eq!(job.bytes, span.size, "a span is always copied whole");
        let mut lost = 0u32;
        let mut lost_bytes = 0usize;
        // End of the failed bytes counted so far.
        let mut lost_end = span.address;
        for member in members {
            let delta = member.address - span.address;
            // SAFETY: the member lies within the span (`delta + member.size <= span.size`), on both sides of the
            // span's copy, which the caller's contract covers.
            let result = unsafe { ops.copy(job.dst.add(delta), job.src.add(delta), member.size) };
            if let Err(error) = result {
                lost += 1;
                let end = member.address + member.size;
                lost_bytes += end.saturating_sub(member.address.max(lost_end));
                lost_end = lost_end.max(end);
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: copying module variable at {:#x} ({} bytes) failed ({error:?})",
                    agent.0,
                    member.address,
                    member.size
                );
            }
        }
        if lost == 0 {
            crate::log!(
                Level::Trace,
                "agent {:#x}: {} adjacent module variables at {:#x} ({} bytes) could not be copied as one; copied \
                 one by one",
                agent.0,
                members.len(),
                span.address,
                span.size
            );
        }
        (lost, lost_bytes)
    }
}
