//! kreplay's engine: everything a kernel-replay profiler needs to give every pass of a dispatch the same
//! device-memory inputs. A C host uses exactly one [`Engine`], through `kreplay-capi`.
//!
//! The modules, from the floor up: none uses a module listed after it.
//!
//! - [`types`]: agents, pointer types and info, flags, module variables.
//! - [`error`]: `Error` (the C status values) and `DeclineReason`.
//! - [`clock`]: the monotonic clock that times each phase.
//! - [`lock`]: the spin reader-writer lock and mutex.
//! - [`log`]: messages formatted into a stack buffer and handed to one sink.
//! - [`fallible`]: allocations that report failure instead of aborting.
//! - [`host_memory`]: anonymous mappings and their counters.
//! - [`ops`]: the device operations the host supplies (copy, pointer query, module scan, page-locking).
//! - [`opsets`]: the installed sets of device ops, kept while calls or storage still use them.
//! - [`activity`]: calls in flight, which `finalize` waits for.
//! - [`policy`]: what a capture may take and how (budgets, page-locking, dirty-only, module cache).
//! - [`gate`]: whether a dispatch is replayed.
//! - [`inventory`]: the live device allocations and mappings, classified, tagged by agent, pinned while copied.
//! - [`storage`]: per-agent pools of retained host staging and device storage that hold snapshots.
//! - [`modules`]: module-variable lists cut into spans, and the per-agent cache of the last scan.
//! - [`snapshot`]: capture (plan, stage, transfer, report) and restore (transfer, report) of one agent.
//! - [`engine`]: the state that ties these together, and every call's entry.
//! - `sim`: (feature `sim`, and tests) the simulated device.
//!
//! The crate is `no_std`. It allocates from the global allocator only for a snapshot's bookkeeping, and only
//! fallibly; every table elsewhere has a fixed capacity and reports when it is full.
#![cfg_attr(not(any(test, feature = "std")), no_std)]

extern crate alloc;

pub mod activity;
pub mod clock;
pub mod engine;
pub mod error;
pub mod fallible;
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
