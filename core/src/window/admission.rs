//! Admission: a window's cost projected before any byte moves, from the rates this agent's earlier windows
//! measured (per tier: copies and digests, and how much of a dirty-only restore still had to be written), or
//! from conservative defaults until then.
//!
//! The projection is `snapshot + (passes - 1) x restore`, where the footprint is the agent's tracked bytes plus
//! the module variables its cached scan knows at open, split between the device tier (up to the policy's device
//! budget, with device ops) and host staging like a capture would place it. A snapshot moves the whole
//! footprint (and digests it when dirty-only is on); a restore moves it all, or with dirty-only digests it and
//! writes back the share that earlier restores had to write. Once that share is measured, a dirty-only
//! snapshot is projected to copy the same share (a re-capture copies only the blocks that changed).
//!
//! With a learned write set (`learn_write_set`), only the first restore of a window and its last (the full
//! check) digest the whole footprint; the ones between digest the share of it that partial restores measured.
//! Until a partial restore has been measured on the agent, every restore is projected as a full one.

use crate::policy::Policy;

/// Copy rate of the host tier until measured: 4 GB/s (pageable host memory over PCIe, well below what the H200's
/// link reaches pinned).
pub const DEFAULT_HOST_COPY_BYTES_PER_US: u64 = 4_000;
/// Copy rate of the device tier until measured: 100 GB/s (a device-to-device copy on a recent GPU reaches more
/// than ten times that).
pub const DEFAULT_DEVICE_COPY_BYTES_PER_US: u64 = 100_000;
/// Digest rate until measured: 50 GB/s.
pub const DEFAULT_DIGEST_BYTES_PER_US: u64 = 50_000;
/// A window projected above this logs a warning when the policy leaves `warn_window_ns` at 0: 10 s.
pub const DEFAULT_WARN_WINDOW_NS: u64 = 10_000_000_000;

/// The projection above which a window logs a warning: `warn_window_ns`, or [`DEFAULT_WARN_WINDOW_NS`] for 0.
pub(crate) fn warn_window_ns(policy: &Policy) -> u64 {
    if policy.warn_window_ns == 0 { DEFAULT_WARN_WINDOW_NS } else { policy.warn_window_ns }
}

/// Bytes and the nanoseconds they took, decayed by half at every new measurement so recent windows weigh most.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Rate {
    bytes: u64,
    ns: u64,
}

impl Rate {
    const NONE: Rate = Rate { bytes: 0, ns: 0 };

    /// Folds in one measurement (ignored when either figure is 0).
    pub fn add(&mut self, bytes: u64, ns: u64) {
        if bytes == 0 || ns == 0 {
            return;
        }
        self.bytes = self.bytes / 2 + bytes;
        self.ns = self.ns / 2 + ns;
    }

    /// Nanoseconds for `bytes` at the measured rate, or at `default_bytes_per_us` when nothing was measured.
    pub fn ns_for(&self, bytes: u64, default_bytes_per_us: u64) -> u64 {
        let (per, took) = if self.bytes == 0 { (default_bytes_per_us, 1000) } else { (self.bytes, self.ns) };
        u64::try_from(u128::from(bytes) * u128::from(took) / u128::from(per.max(1))).unwrap_or(u64::MAX)
    }
}

/// What one tier's measurements say.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TierRates {
    /// Device <-> storage copies.
    pub copy: Rate,
    /// Digests of live ranges.
    pub digest: Rate,
    /// Of what dirty-only restores compared, how much they wrote (bytes: written, ns: compared).
    pub dirty_share: Rate,
    /// Of the footprint, how much partial restores (a learned write set) digested (bytes: digested, ns: the
    /// footprint).
    pub learned_share: Rate,
}

/// One agent's measurements, per tier.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    /// Host staging.
    pub host: TierRates,
    /// Device storage.
    pub device: TierRates,
}

/// What a capture or restore measured, for [`Rates::record`].
#[derive(Copy, Clone, Debug, Default)]
pub struct Measured {
    /// All the work was in device storage (else all in host staging; a spill that used both is not recorded).
    pub device_tier: bool,
    /// Bytes copied.
    pub copied: u64,
    /// Time of the copies alone.
    pub copy_ns: u64,
    /// Bytes digested.
    pub digested: u64,
    /// Time of the digests.
    pub digest_ns: u64,
    /// For a dirty-only restore: bytes written back.
    pub written: u64,
    /// For a dirty-only restore: bytes verified clean.
    pub clean: u64,
    /// For a partial restore (over a learned write set): the footprint it stood for; 0 for any other.
    pub partial_of: u64,
}

impl Rates {
    /// Nothing measured yet (all zero).
    pub const UNMEASURED: Rates = Rates {
        host: TierRates { copy: Rate::NONE, digest: Rate::NONE, dirty_share: Rate::NONE, learned_share: Rate::NONE },
        device: TierRates { copy: Rate::NONE, digest: Rate::NONE, dirty_share: Rate::NONE, learned_share: Rate::NONE },
    };

    /// Folds in one capture's or restore's figures.
    pub fn record(&mut self, m: &Measured) {
        let tier = if m.device_tier { &mut self.device } else { &mut self.host };
        tier.copy.add(m.copied, m.copy_ns);
        tier.digest.add(m.digested, m.digest_ns);
        if m.partial_of > 0 {
            // Shares of the footprint: written (as a full restore would have written) and digested.
            share(&mut tier.dirty_share, m.written, m.partial_of);
            share(&mut tier.learned_share, m.digested, m.partial_of);
        } else if m.digest_ns > 0 {
            // A share, not a rate: `bytes` written of `ns` compared.
            let compared = m.written.saturating_add(m.clean);
            if compared > 0 {
                tier.dirty_share.bytes = tier.dirty_share.bytes / 2 + m.written;
                tier.dirty_share.ns = tier.dirty_share.ns / 2 + compared;
            }
        }
    }

    /// The projected nanoseconds of a window with `passes` passes over `footprint` bytes.
    pub fn project(&self, footprint: usize, passes: u32, policy: &Policy, device_tier: bool, digests: bool) -> u64 {
        let footprint = footprint as u64;
        let device = if device_tier { footprint.min(policy.device_budget_bytes as u64) } else { 0 };
        let host = footprint - device;
        let dirty = policy.dirty_only && digests;
        let restores = u64::from(passes.saturating_sub(1));
        // With a learned write set, the first and the last restore check everything, the others a measured share.
        let full_restores = if policy.learn_write_set && dirty { restores.min(2) } else { restores };
        let parts = [
            (&self.host, host, DEFAULT_HOST_COPY_BYTES_PER_US),
            (&self.device, device, DEFAULT_DEVICE_COPY_BYTES_PER_US),
        ];
        let mut snapshot: u64 = 0;
        let mut restore: u64 = 0;
        let mut partial: u64 = 0;
        for (tier, bytes, default_copy) in parts {
            if bytes == 0 {
                continue;
            }
            let digest = if dirty { tier.digest.ns_for(bytes, DEFAULT_DIGEST_BYTES_PER_US) } else { 0 };
            let written = if dirty && tier.dirty_share.ns > 0 {
                u64::try_from(u128::from(bytes) * u128::from(tier.dirty_share.bytes) / u128::from(tier.dirty_share.ns))
                    .unwrap_or(bytes)
            } else {
                bytes
            };
            // Once dirty-only windows have run, the agent's storage holds the last snapshot, and a re-capture
            // copies only the blocks that changed, as a restore writes only those: both move the measured share
            // (and the copy rate was measured on such small copies, so it applies to them alone).
            let copy = tier.copy.ns_for(written, default_copy);
            snapshot = snapshot.saturating_add(copy).saturating_add(digest);
            restore = restore.saturating_add(copy).saturating_add(digest);
            let learned = tier.learned_share;
            let partial_digest = if dirty && learned.ns > 0 {
                let share = u128::from(bytes) * u128::from(learned.bytes) / u128::from(learned.ns);
                tier.digest.ns_for(u64::try_from(share).unwrap_or(bytes), DEFAULT_DIGEST_BYTES_PER_US)
            } else {
                digest
            };
            partial = partial.saturating_add(copy).saturating_add(partial_digest);
        }
        snapshot
            .saturating_add(restore.saturating_mul(full_restores))
            .saturating_add(partial.saturating_mul(restores - full_restores))
    }
}

/// Folds one share (`part` of `whole`) into `rate`, decayed like a rate.
fn share(rate: &mut Rate, part: u64, whole: u64) {
    rate.bytes = rate.bytes / 2 + part;
    rate.ns = rate.ns / 2 + whole;
}
