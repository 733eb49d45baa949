//! kreplay's engine: everything a kernel-replay profiler needs to give every pass of a dispatch the same
//! device-memory inputs.
//!
//! - [`inventory`]: the live device allocations and virtual-memory mappings, fed by the host's wrappers around
//!   the runtime's allocate and free entry points, classified and tagged by owning agent.
//! - [`staging`]: per-agent pools of retained host memory (mmap'd, never zero-filled) that hold snapshots.
//! - [`snapshot`]: capture (device to host) of an agent's tracked regions and module-scope variables, and
//!   restore (host to device) that never writes into memory freed or reused since the capture.
//! - [`ops`]: the device operations the host supplies (copy, pointer query, module scan, page-locking).
//! - [`engine`]: the state that ties these together; a C host uses exactly one, through `kreplay-capi`.
//!
//! The crate is `no_std`. It allocates from the global allocator only for a snapshot's bookkeeping, and only
//! fallibly; every table elsewhere has a fixed capacity and reports when it is full.
#![cfg_attr(not(any(test, feature = "std")), no_std)]

extern crate alloc;

pub mod activity;
pub mod clock;
pub mod engine;
pub mod error;
pub mod gate;
pub mod host_memory;
pub mod inventory;
pub mod lock;
pub mod log;
pub mod modules;
pub mod ops;
pub mod opsets;
pub mod policy;
pub mod snapshot;
pub mod storage;
pub mod types;
pub mod window;

/// The host staging pools, under the name the C API gives them.
pub use storage::host as staging;

#[cfg(any(test, feature = "sim"))]
pub mod sim;

pub use engine::Engine;
pub use error::{DeclineReason, Error, Result};
pub use ops::{CopyJob, DeviceOps, Digest, DigestJob};
pub use types::{Agent, AllocFlags, GlobalFlags, ModuleVariable, PointerInfo, PointerType};
