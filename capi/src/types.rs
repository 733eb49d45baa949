//! C types shared by several parts of the API.

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
