//! Transfer: moves a list of ranges between device memory and storage, in chunks and batches.
//!
//! A [`Transfer`] says what moves (ranges between device memory and a snapshot's storage) and which way. It runs
//! chunk by chunk, in four steps: *pin* the chunk's tracked ranges (one pass under the inventory's read lock
//! that also re-validates them: same base, generation and at least the captured size), *digest* them (dirty-only
//! passes), *copy* in batches through `copy_batch` (or one `copy` at a time without it), and *record*: unpin, and
//! write each range's outcome. A free of a region in the chunk waits for the chunk; a free of any other region
//! never waits. A batch that fails is redone copy by copy, and a span of module variables whose copy fails is
//! redone variable by variable, so exactly the regions and variables that fail are counted.
//!
//! With digests, a tracked range whose storage holds a known earlier state (the snapshot itself for a restore,
//! the previous snapshot for a re-capture) is copied block by block: only blocks whose digest differs, merged
//! when adjacent.

use alloc::vec::Vec;

use super::{Parts, Range, Source, Storage, write_set};
use crate::clock;
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

/// One pass: which ranges move between device memory and which storage, and which way.
pub(crate) struct Transfer<'a, O: DeviceOps> {
    /// The engine's parts: its inventory pins the tracked ranges, and a finalize stops the pass.
    pub parts: Parts<'a, O>,
    pub ops: &'a O,
    pub agent: Agent,
    pub storage: &'a Storage,
    pub direction: Direction,
    pub ranges: &'a [Range],
    /// The module list the ranges' spans index into.
    pub variables: &'a [CachedVariable],
}

/// The ranges `start..start + ranges.len()` of a pass, pinned together.
#[derive(Copy, Clone)]
struct Chunk<'a> {
    start: usize,
    ranges: &'a [Range],
}

/// How large a chunk may grow: ranges and bytes.
#[derive(Copy, Clone)]
struct Limits {
    ranges: usize,
    bytes: usize,
}

/// Where a range's storage holds a known earlier state: the index of its first block in the live digests (and
/// in the write-set bits) and in the digests of what its storage holds.
#[derive(Copy, Clone)]
struct Known {
    live_at: usize,
    reference_at: usize,
}

/// What became of one copy run on its own.
enum Single {
    Copied,
    Failed,
    /// A span of module variables copied variable by variable: how many failed, and the bytes they leave unmoved.
    Split {
        lost: u32,
        bytes: usize,
    },
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
    /// A partial pass (a learned write set): only these blocks, indexed like `live`, are digested and may be
    /// written; `None`: every block.
    pub select: Option<&'a [u64]>,
    /// Where the blocks found changed are marked, indexed like `live`, when the pass learns them.
    pub changed: Option<&'a mut [u64]>,
}

/// Totals of a pass.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct Moved {
    pub copied_bytes: usize,
    pub clean_bytes: usize,
    pub digest_ns: u64,
    /// Bytes of device memory digested (by calls that succeeded).
    pub digested_bytes: usize,
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

    /// What happened to the chunk's range `i`, once its copies ran.
    fn outcome(&self, i: usize, range: &Range) -> Outcome {
        if !self.is_pinned(i) {
            return Outcome::Skipped;
        }
        let split = self.split.binary_search_by_key(&(i as u32), |&(at, _)| at).ok().map(|at| self.split[at].1);
        match (self.has_failed(i), split) {
            (false, None) => Outcome::Done,
            (false, Some(_)) => Outcome::DoneOneByOne,
            (true, lost) => Outcome::Failed(lost.unwrap_or(range.units() as u32)),
        }
    }
}

impl<'a, O: DeviceOps> Transfer<'a, O> {
    /// Moves every range, writing each one's outcome. With `dirty`, tracked ranges are digested and only changed
    /// blocks move where the storage's contents are known.
    pub(crate) fn run(&self, mut dirty: Option<Dirty<'_>>, outcomes: &mut [Outcome]) -> Moved {
        let mut moved = Moved::default();
        let Some((mut scratch, limits)) = self.scratch(dirty.is_some()) else {
            crate::log!(Level::Error, "agent {:#x}: no host memory for the copy list", self.agent.0);
            for (outcome, range) in outcomes.iter_mut().zip(self.ranges) {
                *outcome = Outcome::Failed(range.units() as u32);
            }
            return moved;
        };
        let mut start = 0;
        // Told to stop by a finalize: what was not reached stays Pending.
        while start < self.ranges.len() && !self.parts.is_finalized() {
            let chunk = self.chunk(start, limits);
            self.pin(chunk, &mut scratch);
            let digested = self.digest(chunk, &mut scratch, dirty.as_mut(), &mut moved);
            self.copy(chunk, &mut scratch, dirty.as_mut().filter(|_| digested), &mut moved);
            let any_failed = self.record(chunk, &scratch, &mut outcomes[start..][..chunk.ranges.len()]);
            start += chunk.ranges.len();
            if self.direction == Direction::Capture && any_failed {
                // A capture with a failed copy is declined: nothing after it is even read.
                break;
            }
        }
        moved
    }

    /// Working memory for the pass, and how large its chunks may grow; `None` without host memory.
    fn scratch(&self, digests: bool) -> Option<(Scratch, Limits)> {
        let batching = self.ops.can_copy_batch();
        // Without batches or digests, one range at a time: each is validated right before its copy, as in
        // version 1.
        let (ranges, bytes) =
            if batching || digests { (CHUNK_RANGES.min(self.ranges.len().max(1)), CHUNK_BYTES) } else { (1, 0) };
        let copies = if batching { BATCH_COPIES } else { 1 };
        let scratch = Scratch::new(ranges, copies, digests).or_else(|| Scratch::new(1, 1, digests))?;
        let ranges = ranges.min(scratch.tracked.capacity()).max(1);
        Some((scratch, Limits { ranges, bytes }))
    }

    /// The chunk that starts at range `start`: as many ranges as `limits` allow, and at least one.
    fn chunk(&self, start: usize, limits: Limits) -> Chunk<'a> {
        let ranges = self.ranges;
        let mut end = start + 1;
        let mut bytes = ranges[start].size;
        while end < ranges.len() && end - start < limits.ranges && bytes + ranges[end].size <= limits.bytes {
            bytes += ranges[end].size;
            end += 1;
        }
        Chunk { start, ranges: &ranges[start..end] }
    }

    /// Pin: the chunk's tracked ranges, while live with their generation and size (module variables always count
    /// as pinned).
    fn pin(&self, chunk: Chunk<'_>, scratch: &mut Scratch) {
        scratch.pinned.fill(0);
        scratch.tracked.clear();
        for (i, range) in chunk.ranges.iter().enumerate() {
            if range.pin_key().is_some() {
                scratch.tracked.push(i as u32);
            } else {
                scratch.pinned[i / 64] |= 1 << (i % 64);
            }
        }
        let Scratch { tracked, pinned, .. } = scratch;
        let mut k = 0;
        self.parts.inventory.pin_each(tracked.iter().filter_map(|&i| chunk.ranges[i as usize].pin_key()), |ok| {
            if ok {
                let i = tracked[k] as usize;
                pinned[i / 64] |= 1 << (i % 64);
            }
            k += 1;
        });
    }

    /// Digest: the chunk's pinned tracked ranges, into `dirty.live`, unless a digest of this pass failed before
    /// (then the pass copies whole ranges). Whether the chunk was digested.
    fn digest(
        &self,
        chunk: Chunk<'_>,
        scratch: &mut Scratch,
        dirty: Option<&mut Dirty<'_>>,
        moved: &mut Moved,
    ) -> bool {
        let Some(dirty) = dirty.filter(|_| !moved.digest_failed) else { return false };
        let begun = clock::now_ns();
        let result = self.digest_pinned(chunk, scratch, dirty, &mut moved.digested_bytes);
        moved.digest_ns += clock::since(begun);
        if let Err(error) = result {
            moved.digest_failed = true;
            crate::log!(
                Level::Warning,
                "agent {:#x}: digesting failed ({error:?}); this call copies whole ranges instead",
                self.agent.0
            );
            return false;
        }
        true
    }

    /// Digests the pinned tracked ranges of a chunk into `dirty.live`: whole, in one call, or only the runs of
    /// blocks a partial pass selects (in as few calls as the job list allows). Adds the bytes digested to
    /// `digested`.
    fn digest_pinned(
        &self,
        chunk: Chunk<'_>,
        scratch: &mut Scratch,
        dirty: &mut Dirty<'_>,
        digested: &mut usize,
    ) -> crate::Result<()> {
        let block = dirty.block_bytes;
        let live = dirty.live.as_mut_ptr();
        scratch.jobs.clear();
        for k in 0..scratch.tracked.len() {
            let i = scratch.tracked[k] as usize;
            if !scratch.is_pinned(i) {
                continue;
            }
            let range = &chunk.ranges[i];
            let blocks = range.size.div_ceil(block);
            debug_assert!(range.digest_at + blocks <= dirty.live.len());
            for (first, end) in write_set::runs(dirty.select, range.digest_at, range.digest_at + blocks) {
                let offset = (first - range.digest_at) * block;
                let bytes = ((end - first) * block).min(range.size - offset);
                if scratch.jobs.len() == scratch.jobs.capacity() {
                    self.digest_jobs(scratch, block, digested)?;
                }
                scratch.jobs.push(DigestJob {
                    // SAFETY: `offset < range.size`: within the range.
                    address: unsafe { (range.address as *const u8).add(offset) },
                    bytes,
                    // SAFETY: digest slots were laid out for every tracked range (`digest_at` + its block count is
                    // within `live`), and `first` is one of the range's.
                    digests_out: unsafe { live.add(first) },
                });
            }
        }
        self.digest_jobs(scratch, block, digested)
    }

    /// Runs the digest jobs collected so far, in one call, and empties the list.
    fn digest_jobs(&self, scratch: &mut Scratch, block: usize, digested: &mut usize) -> crate::Result<()> {
        if scratch.jobs.is_empty() {
            return Ok(());
        }
        // SAFETY: every job is within a pinned (live) tracked region of `agent`, starts at one of its block
        // boundaries, and has its own slots of `live`.
        unsafe { self.ops.digest(self.agent, &scratch.jobs, block) }?;
        *digested += scratch.jobs.iter().map(|job| job.bytes).sum::<usize>();
        scratch.jobs.clear();
        Ok(())
    }

    /// Copy: the chunk's pinned ranges, whole, or only their changed blocks where `dirty` (digested) knows what
    /// their storage holds (and, in a partial pass, only among the blocks it digested).
    fn copy(&self, chunk: Chunk<'_>, scratch: &mut Scratch, mut dirty: Option<&mut Dirty<'_>>, moved: &mut Moved) {
        scratch.failed.fill(0);
        scratch.split.clear();
        for (i, range) in chunk.ranges.iter().enumerate() {
            if !scratch.is_pinned(i) {
                continue;
            }
            let known = dirty.as_deref().filter(|_| range.pin_key().is_some()).and_then(|dirty| {
                (dirty.known)(chunk.start + i).map(|reference_at| Known { live_at: range.digest_at, reference_at })
            });
            match (known, dirty.as_deref_mut()) {
                (Some(known), Some(dirty)) => self.push_changed(chunk, i, known, dirty, scratch, moved),
                _ => self.push(chunk, (i, 0, range.size), scratch, moved),
            }
        }
        moved.copied_bytes -= self.submit(chunk, scratch);
    }

    /// Adds the copies of the chunk's range `i` that its changed blocks need (adjacent ones merged) to the batch,
    /// marks them in `dirty.changed`, and counts the unchanged blocks as clean. A partial pass looks only at the
    /// blocks it digested.
    fn push_changed(
        &self,
        chunk: Chunk<'_>,
        i: usize,
        known: Known,
        dirty: &mut Dirty<'_>,
        scratch: &mut Scratch,
        moved: &mut Moved,
    ) {
        let size = chunk.ranges[i].size;
        let block = dirty.block_bytes;
        let blocks = size.div_ceil(block);
        let (live, reference) = (&dirty.live[known.live_at..], &dirty.reference[known.reference_at..]);
        for (first, end) in write_set::runs(dirty.select, known.live_at, known.live_at + blocks) {
            let (first, end) = (first - known.live_at, end - known.live_at);
            let mut run: Option<usize> = None;
            for b in first..=end {
                let changed = b < end && live[b] != reference[b];
                match (changed, run) {
                    (true, None) => run = Some(b),
                    (false, Some(from)) => {
                        let from = from * block;
                        let to = (b * block).min(size);
                        self.push(chunk, (i, from, to - from), scratch, moved);
                        run = None;
                    }
                    _ => {}
                }
                if b == end {
                    break;
                }
                if changed {
                    if let Some(bits) = dirty.changed.as_deref_mut() {
                        write_set::insert(bits, known.live_at + b);
                    }
                } else {
                    moved.clean_bytes += block.min(size - b * block);
                }
            }
        }
    }

    /// Adds one copy of `len` bytes at `offset` within the chunk's range `i` (`at` = `(i, offset, len)`) to the
    /// batch, submitting the batch when it is full.
    fn push(
        &self,
        chunk: Chunk<'_>,
        (i, offset, len): (usize, usize, usize),
        scratch: &mut Scratch,
        moved: &mut Moved,
    ) {
        let range = &chunk.ranges[i];
        // SAFETY: `offset + len <= range.size`, within both the device range and its storage.
        let (device, stored) = unsafe { ((range.address as *mut u8).add(offset), self.storage.at(range).add(offset)) };
        let job = match self.direction {
            Direction::Capture => CopyJob { dst: stored, src: device, bytes: len },
            Direction::Restore => CopyJob { dst: device, src: stored, bytes: len },
        };
        scratch.copies.push(job);
        scratch.owners.push(i as u32);
        moved.copied_bytes += len;
        if scratch.copies.len() == scratch.copies.capacity() {
            moved.copied_bytes -= self.submit(chunk, scratch);
        }
    }

    /// Runs the batch's copies, marks the ranges whose copies failed, and empties the batch. Returns the bytes
    /// of the copies that failed.
    fn submit(&self, chunk: Chunk<'_>, batch: &mut Scratch) -> usize {
        if batch.copies.is_empty() {
            return 0;
        }
        let whole = self.ops.can_copy_batch() && batch.copies.len() > 1 && {
            // SAFETY: every copy is between a pinned live region (or module variables) and storage this snapshot
            // owns, within both; no two overlap (ranges of a snapshot are disjoint, and so is their storage).
            unsafe { self.ops.copy_batch(self.agent, &batch.copies) }.is_ok()
        };
        let mut failed_bytes = 0;
        if !whole {
            // One at a time, so exactly the copies that fail are known.
            for (job, &owner) in batch.copies.iter().zip(&batch.owners) {
                let (lost, bytes) = match self.copy_one(&chunk.ranges[owner as usize], job) {
                    Single::Copied => continue,
                    Single::Failed => (1, job.bytes),
                    Single::Split { lost, bytes } => {
                        // In order of the chunk's ranges, for the binary search that reads the notes. Without
                        // memory for the note, a span copied whole one by one still counts as done, and one that
                        // failed in part counts every variable as failed.
                        debug_assert!(batch.split.last().is_none_or(|&(at, _)| at < owner));
                        if batch.split.try_reserve(1).is_ok() {
                            batch.split.push((owner, lost));
                        }
                        (lost, bytes)
                    }
                };
                if lost > 0 {
                    failed_bytes += bytes;
                    batch.failed[owner as usize / 64] |= 1 << (owner % 64);
                }
            }
        }
        batch.copies.clear();
        batch.owners.clear();
        failed_bytes
    }

    /// Runs one copy of the batch on its own (the ops have no `copy_batch`, or the batch failed); a span of
    /// module variables whose copy fails is copied again variable by variable.
    fn copy_one(&self, range: &Range, job: &CopyJob) -> Single {
        // SAFETY: the copy is between a pinned live region (or module variables) and storage this snapshot owns,
        // within both.
        let Err(error) = (unsafe { self.ops.copy(job.dst, job.src, job.bytes) }) else { return Single::Copied };
        match range.source {
            Source::ModuleVariables { first, count } if count > 1 => {
                // The span may cross from one code object's memory into another's, which a device may refuse as
                // one copy: copy its variables one by one.
                let members = &self.variables[first as usize..][..count as usize];
                let (lost, bytes) = self.copy_variables(range, members, job);
                Single::Split { lost, bytes }
            }
            _ => {
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: copying {} bytes from {:#x} to {:#x} failed ({error:?})",
                    self.agent.0,
                    job.bytes,
                    job.src as usize,
                    job.dst as usize
                );
                Single::Failed
            }
        }
    }

    /// Record: unpins the chunk's tracked ranges and writes each range's outcome. Whether any copy failed.
    fn record(&self, chunk: Chunk<'_>, scratch: &Scratch, outcomes: &mut [Outcome]) -> bool {
        let pinned_keys = scratch
            .tracked
            .iter()
            .map(|&i| i as usize)
            .filter(|&i| scratch.is_pinned(i))
            .filter_map(|i| chunk.ranges[i].pin_key());
        self.parts.inventory.unpin_each(pinned_keys);
        let mut any_failed = false;
        for (i, outcome) in outcomes.iter_mut().enumerate() {
            *outcome = scratch.outcome(i, &chunk.ranges[i]);
            any_failed |= matches!(outcome, Outcome::Failed(_));
        }
        any_failed
    }

    /// Copies each of a span's `members` (sorted by address) on its own, after `job` (the whole span) failed.
    /// Returns how many failed, and the bytes of the span they leave unmoved (the union of the failed variables:
    /// bytes they share are counted once).
    fn copy_variables(&self, span: &Range, members: &[CachedVariable], job: &CopyJob) -> (u32, usize) {
        debug_assert_eq!(job.bytes, span.size, "a span is always copied whole");
        let mut lost = 0u32;
        let mut lost_bytes = 0usize;
        // End of the failed bytes counted so far.
        let mut lost_end = span.address;
        for member in members {
            let delta = member.address - span.address;
            // SAFETY: the member lies within the span (`delta + member.size <= span.size`), on both sides of the
            // span's copy, which the caller's contract covers.
            let result = unsafe { self.ops.copy(job.dst.add(delta), job.src.add(delta), member.size) };
            if let Err(error) = result {
                lost += 1;
                let end = member.address + member.size;
                lost_bytes += end.saturating_sub(member.address.max(lost_end));
                lost_end = lost_end.max(end);
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: copying module variable at {:#x} ({} bytes) failed ({error:?})",
                    self.agent.0,
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
                self.agent.0,
                members.len(),
                span.address,
                span.size
            );
        }
        (lost, lost_bytes)
    }
}
