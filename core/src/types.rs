//! Plain values that cross between the engine and the host's device operations.

use bitflags::bitflags;

/// A GPU (HSA agent, CUDA device) as the host names it. Only compared, never interpreted.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Agent(pub u64);

/// What kind of memory a pointer refers to (the values of `hsa_amd_pointer_type_t`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PointerType {
    /// Not memory the runtime knows.
    Unknown,
    /// Device memory allocated through the runtime.
    Device,
    /// Host memory page-locked for the device.
    Locked,
    /// Memory shared with a graphics API.
    Graphics,
    /// Memory imported from another process.
    Ipc,
    /// Unified (managed) memory that migrates between host and device: not an HSA value, for runtimes that
    /// have it (CUDA). Never snapshotted.
    Managed,
}

/// The raw value of [`PointerType::Managed`]: kreplay's own, far from `hsa_amd_pointer_type_t`'s values.
pub const POINTER_TYPE_MANAGED: u32 = 0x100;

impl PointerType {
    /// Maps an HSA pointer-type value; values the library does not know are [`PointerType::Unknown`].
    pub const fn from_raw(raw: u32) -> Self {
        match raw {
            1 => PointerType::Device,
            2 => PointerType::Locked,
            3 => PointerType::Graphics,
            4 => PointerType::Ipc,
            POINTER_TYPE_MANAGED => PointerType::Managed,
            _ => PointerType::Unknown,
        }
    }
}

bitflags! {
    /// Bits of `hsa_amd_memory_pool_global_flag_t` that classify an allocation's memory pool.
    #[derive(Copy, Clone, Debug, PartialEq, Eq)]
    pub struct GlobalFlags: u32 {
        /// Kernel-argument memory.
        const KERNARG = 1;
        /// Fine-grained (coherent) memory.
        const FINE_GRAINED = 2;
        /// Coarse-grained device memory: the only kind that is snapshotted.
        const COARSE_GRAINED = 4;
    }
}

bitflags! {
    /// Flags an allocation was made with (`hsa_amd_memory_pool_allocate`'s flags).
    #[derive(Copy, Clone, Debug, PartialEq, Eq)]
    pub struct AllocFlags: u32 {
        /// `HSA_AMD_MEMORY_POOL_EXECUTABLE_FLAG`: runtimes put kernarg pools and trace buffers here.
        const EXECUTABLE = 1 << 2;
    }
}

/// What the device runtime says about a pointer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PointerInfo {
    /// The kind of memory.
    pub kind: PointerType,
    /// The pool's global flags.
    pub global_flags: GlobalFlags,
    /// The agent that owns the memory.
    pub owner: Agent,
    /// Start of the allocation that contains the pointer.
    pub base: usize,
    /// Size of that allocation in bytes.
    pub size: usize,
}

impl PointerInfo {
    /// True for the only memory a snapshot may capture: coarse-grained device memory that is not kernarg.
    pub fn is_snapshottable(&self) -> bool {
        self.kind == PointerType::Device
            && self.global_flags.contains(GlobalFlags::COARSE_GRAINED)
            && !self.global_flags.contains(GlobalFlags::KERNARG)
    }
}

/// A module-scope (`__device__` or `__constant__`) variable as the host's module scan reports it.
#[derive(Copy, Clone, Debug)]
pub struct ModuleVariable<'a> {
    /// The symbol name, when known (not NUL-terminated).
    pub name: Option<&'a [u8]>,
    /// Device address of the variable.
    pub address: usize,
    /// Size in bytes.
    pub size: usize,
    /// `__constant__` rather than `__device__`.
    pub is_constant: bool,
}

/// Displays a symbol name from raw bytes, replacing anything that is not printable ASCII.
pub struct DisplayName<'a>(pub Option<&'a [u8]>);

impl core::fmt::Display for DisplayName<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use core::fmt::Write;
        match self.0 {
            None => f.write_str("<unnamed>"),
            Some(bytes) => {
                for &b in bytes.iter().take(200) {
                    f.write_char(if b.is_ascii_graphic() { b as char } else { '?' })?;
                }
                if bytes.len() > 200 {
                    f.write_str("...")?;
                }
                Ok(())
            }
        }
    }
}
