//! The device operations a host supplies. The engine is device-agnostic: HSA, CUDA and the simulated device
//! all come in through this trait.

use crate::error::Result;
use crate::types::{Agent, ModuleVariable, PointerInfo};

/// Device operations. Implementations must be callable from any thread.
pub trait DeviceOps: Clone + Send + Sync {
    /// Copies `bytes` from `src` to `dst` in whichever direction the addresses imply, and returns when the
    /// copy is complete (`hsa_memory_copy` semantics).
    ///
    /// # Safety
    /// `src` must be readable and `dst` writable for `bytes` bytes, each in host or device memory, and the two
    /// ranges must not overlap.
    unsafe fn copy(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<()>;

    /// Describes the allocation that contains `ptr`.
    fn pointer_info(&self, ptr: *const u8) -> Result<PointerInfo>;

    /// Calls `visit` for every module-scope variable visible to `agent`, until it returns false. Any failure
    /// to enumerate an executable or a symbol must be returned as an error.
    fn iterate_module_variables(&self, agent: Agent, visit: &mut dyn FnMut(&ModuleVariable<'_>) -> bool) -> Result<()>;

    /// Whether [`DeviceOps::host_lock`] and [`DeviceOps::host_unlock`] are available.
    fn can_lock_host(&self) -> bool;

    /// Page-locks host memory for faster transfers.
    fn host_lock(&self, ptr: *mut u8, bytes: usize) -> Result<()>;

    /// Undoes [`DeviceOps::host_lock`].
    fn host_unlock(&self, ptr: *mut u8, bytes: usize) -> Result<()>;
}
