//! C types shared by several parts of the API.

use kreplay_core::PointerType;

use crate::enum_table::enum_table;

/// A GPU as the host names it; the layout of `hsa_agent_t`, so a host can pass one for the other.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct kreplay_agent_t {
    /// The runtime's opaque handle.
    pub handle: u64,
}

impl From<kreplay_agent_t> for kreplay_core::Agent {
    fn from(agent: kreplay_agent_t) -> Self {
        kreplay_core::Agent(agent.handle)
    }
}

impl From<kreplay_core::Agent> for kreplay_agent_t {
    fn from(agent: kreplay_core::Agent) -> Self {
        kreplay_agent_t { handle: agent.0 }
    }
}

/// Kinds of memory `pointer_info` reports; the values of `hsa_amd_pointer_type_t`.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum kreplay_pointer_type_t {
    /// Not memory the runtime knows.
    KREPLAY_POINTER_UNKNOWN = 0,
    /// Device memory allocated through the runtime.
    KREPLAY_POINTER_DEVICE = 1,
    /// Host memory page-locked for the device.
    KREPLAY_POINTER_LOCKED = 2,
    /// Memory shared with a graphics API.
    KREPLAY_POINTER_GRAPHICS = 3,
    /// Memory imported from another process.
    KREPLAY_POINTER_IPC = 4,
    /// Version 3: unified (managed) memory, for runtimes that have it (CUDA's `cudaMemoryTypeManaged`). Not an
    /// HSA value; counted as untracked memory of kind `KREPLAY_UNTRACKED_MANAGED`, never snapshotted.
    KREPLAY_POINTER_MANAGED = 0x100,
}

/// A `kreplay_pointer_type_t` as a host writes it (any value); the header spells it `kreplay_pointer_type_t`.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RawPointerType(pub u32);

enum_table! {
    kreplay_pointer_type_t <=> PointerType;
    KREPLAY_POINTER_UNKNOWN = PointerType::Unknown,
    KREPLAY_POINTER_DEVICE = PointerType::Device,
    KREPLAY_POINTER_LOCKED = PointerType::Locked,
    KREPLAY_POINTER_GRAPHICS = PointerType::Graphics,
    KREPLAY_POINTER_IPC = PointerType::Ipc,
    KREPLAY_POINTER_MANAGED = PointerType::Managed,
}

impl RawPointerType {
    /// The engine's kind of memory; values this library does not know are `PointerType::Unknown`.
    pub(crate) fn kind(self) -> PointerType {
        PointerType::from_raw(self.0).unwrap_or(PointerType::Unknown)
    }
}

/// Writes `value` through `out` when `out` is not NULL.
///
/// # Safety
/// `out` must be NULL or valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: non-null, and valid for writes by the caller's contract.
        unsafe { out.write(value) };
    }
}
