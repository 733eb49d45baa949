//! Plan: the ranges a capture takes (the agent's tracked regions, then its module variables in spans) and where each
//! one's contents go (device storage while the budget lasts, host staging for the rest).

use alloc::vec::Vec;

use super::capture::Capture;
use super::{MAX_MODULE_VARIABLE_BYTES, Range, STAGING_ALIGN, SnapshotInfo, Source, Tier};
use crate::clock;
use crate::error::DeclineReason;
use crate::inventory::{CAPACITY_SETTING, GatherError};
use crate::log::Level;
use crate::modules::{CachedVariable, CapturedModules, MAX_NAME_BYTES, ModuleCache, ModuleList, NameRef, SharedList};
use crate::ops::DeviceOps;
use crate::types::{Agent, DisplayName, ModuleVariable};

/// Bytes each tier needs for a placement.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    pub host: usize,
    pub device: usize,
}

impl<O: DeviceOps> Capture<'_, '_, O> {
    /// Plan: lists the ranges to capture: tracked regions first, then module variables in spans (from the cache
    /// when the policy allows and it is current). Also returns the module list the spans index into.
    pub(super) fn plan(&self, info: &mut SnapshotInfo) -> Result<(Vec<Range>, CapturedModules), DeclineReason> {
        let agent = self.agent;
        let start = clock::now_ns();
        let mut ranges: Vec<Range> = Vec::new();
        let listed = self.parts.inventory.gather_with(agent, &mut ranges, |region, hint| Range {
            address: region.base,
            size: region.size,
            tier: Tier::Host,
            offset: 0,
            source: Source::Tracked { kind: region.kind, generation: region.generation },
            digest_at: 0,
            hint,
        });
        listed.map_err(|error| match error {
            GatherError::Overflow => {
                crate::log!(
                    Level::Warning,
                    "agent {:#x}: an allocation or mapping of this agent, or of an unknown owner, could not be \
                     recorded and may be live (the inventory was full, its pointer query failed, or its owner is \
                     unknown); if the inventory was full, raise {}",
                    agent.0,
                    CAPACITY_SETTING
                );
                DeclineReason::InventoryOverflow
            }
            GatherError::OutOfMemory => DeclineReason::MetadataMemory,
        })?;
        // In the inventory's order, which stays the same from one dispatch to the next while nothing is freed, so
        // an unchanged footprint gets the same layout and a re-capture finds each range where the previous
        // snapshot put it (sorting 16,384 ranges cost 1 ms a capture on the H200 host).
        info.inventory_ns = clock::since(start);

        let start = clock::now_ns();
        let modules = self.module_list()?;
        info.module_scan_ns = clock::since(start);
        let spans = &modules.list.spans;
        if ranges.try_reserve_exact(spans.len()).is_err() {
            return Err(DeclineReason::MetadataMemory);
        }
        ranges.extend(spans.iter().map(|span| Range {
            address: span.address,
            size: span.size,
            tier: Tier::Host,
            offset: 0,
            source: Source::ModuleVariables { first: span.first, count: span.count },
            digest_at: 0,
            hint: 0,
        }));
        Ok((ranges, modules))
    }

    /// The agent's module variables: the cached list when the policy allows and it is current, else a scan (made
    /// at capture time, since constant memory may be filled after the executable loads).
    fn module_list(&self) -> Result<CapturedModules, DeclineReason> {
        let (agent, policy, cache) = (self.agent, &self.policy, self.parts.modules);
        if policy.cache_module_scan {
            if let Some((list, generation)) = cache.get(agent) {
                return Ok(CapturedModules { list, cache_as: Some(generation), scanned_in: generation });
            }
        }
        scan_modules(&**self.ops, agent, cache, policy.cache_module_scan)
    }
}

/// Scans `agent`'s module variables now and, when `cache_it`, caches the complete list, so that later captures
/// (and restores checking liveness) of the agent share it until code objects change.
pub(super) fn scan_modules<O: DeviceOps>(
    ops: &O,
    agent: Agent,
    cache: &ModuleCache,
    cache_it: bool,
) -> Result<CapturedModules, DeclineReason> {
    let generation = cache.generation();
    let mut variables: Vec<CachedVariable> = Vec::new();
    let mut names: Vec<u8> = Vec::new();
    let mut out_of_memory = false;
    let mut wraps = false;
    let scan = ops.iterate_module_variables(agent, &mut |variable: &ModuleVariable<'_>| {
        if variable.address.checked_add(variable.size).is_none() {
            wraps = true;
            crate::log!(
                Level::Warning,
                "agent {:#x}: module variable {} at {:#x} of {} bytes wraps around the address space",
                agent.0,
                DisplayName(variable.name),
                variable.address,
                variable.size
            );
            return false;
        }
        if !keep_module_variable(agent, variable) {
            return true;
        }
        if variables.len() == variables.capacity() && variables.try_reserve(variables.len().max(16)).is_err() {
            out_of_memory = true;
            return false;
        }
        let name = variable.name.unwrap_or_default();
        let name = &name[..name.len().min(MAX_NAME_BYTES)];
        let Some(name_ref) = keep_name(&mut names, name) else {
            out_of_memory = true;
            return false;
        };
        variables.push(CachedVariable { address: variable.address, size: variable.size, name: name_ref });
        true
    });
    if let Err(error) = scan {
        crate::log!(Level::Warning, "agent {:#x}: the module scan failed ({error:?})", agent.0);
        return Err(DeclineReason::ModuleScanIncomplete);
    }
    if wraps {
        return Err(DeclineReason::ModuleScanIncomplete);
    }
    if out_of_memory {
        return Err(DeclineReason::MetadataMemory);
    }
    let list = ModuleList::build(variables, names).and_then(SharedList::new).ok_or(DeclineReason::MetadataMemory)?;
    let cache_as = cache_it.then_some(generation);
    if let Some(generation) = cache_as {
        // Complete: cached now, so that captures of the agent share it from here on.
        cache.store(agent, generation, list.clone());
    }
    Ok(CapturedModules { list, cache_as, scanned_in: generation })
}

/// Places `ranges` in order: in device storage while its end stays within `device_limit`, the rest in host
/// staging, each at a multiple of [`STAGING_ALIGN`]. `None` when the host part overflows.
pub(crate) fn place(ranges: &mut [Range], device_limit: usize) -> Option<Placement> {
    let mut placement = Placement::default();
    for range in ranges.iter_mut() {
        let (offset, end) = align_after(placement.device, range.size)?;
        if end <= device_limit {
            range.tier = Tier::Device;
            range.offset = offset;
            placement.device = end;
            continue;
        }
        let (offset, end) = align_after(placement.host, range.size)?;
        range.tier = Tier::Host;
        range.offset = offset;
        placement.host = end;
    }
    Some(placement)
}

/// The first multiple of [`STAGING_ALIGN`] at or after `end`, and the end of `size` bytes placed there.
pub(crate) fn align_after(end: usize, size: usize) -> Option<(usize, usize)> {
    let offset = end.checked_next_multiple_of(STAGING_ALIGN)?;
    let end = offset.checked_add(size).filter(|&end| end <= isize::MAX as usize)?;
    Some((offset, end))
}

/// Appends `name` to `names`; where it lies, or `None` without host memory (or past 4 GiB of names).
fn keep_name(names: &mut Vec<u8>, name: &[u8]) -> Option<NameRef> {
    let at = u32::try_from(names.len()).ok()?;
    let len = u32::try_from(name.len()).ok()?;
    at.checked_add(len)?;
    if names.capacity() - names.len() < name.len() {
        names.try_reserve(name.len().max(names.len())).ok()?;
    }
    names.extend_from_slice(name);
    Some(NameRef { at, len })
}

fn keep_module_variable(agent: Agent, variable: &ModuleVariable<'_>) -> bool {
    if variable.address == 0 || variable.size == 0 {
        return false;
    }
    // HIP emits a one-byte `__hip_cuid_*` marker per compilation unit; kernels never write it.
    if variable.size == 1 && variable.name.is_some_and(|name| name.starts_with(b"__hip_cuid_")) {
        return false;
    }
    if variable.size > MAX_MODULE_VARIABLE_BYTES {
        crate::log!(
            Level::Warning,
            "agent {:#x}: module variable {} at {:#x} is {} bytes, above the 1 GiB cap: it is not captured, and a \
             kernel's writes to it will leak across passes",
            agent.0,
            DisplayName(variable.name),
            variable.address,
            variable.size
        );
        return false;
    }
    true
}
