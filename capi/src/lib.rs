//! The C ABI of kreplay: `libkreplay.a` and, through cbindgen, `include/kreplay.h`.
//!
//! This crate is only the boundary. Each exported function checks its arguments, converts C values to the
//! engine's types, calls [`kreplay_core`] on the one process-wide [`Engine`], and maps the outcome to
//! `kreplay_status_t`. Every body runs inside `ffi_guard!` (see [`boundary`]), so no panic unwinds into C.
#![allow(non_camel_case_types)]

mod boundary;
mod logging;
mod ops;
mod snapshot;
mod staging;
mod status;
mod tracking;
mod types;
mod window;

/// cbindgen:ignore
#[cfg(feature = "sim")]
pub mod sim;

pub use logging::*;
pub use ops::*;
pub use snapshot::*;
pub use staging::*;
pub use status::*;
pub use tracking::*;
pub use types::*;
pub use window::*;

use kreplay_core::Engine;

/// The process-wide engine. A static is never destroyed, so calls made during the host's static destruction
/// (HIP frees memory from `__cxa_finalize`) still find valid tables.
pub(crate) static ENGINE: Engine<ops::CDeviceOps> = Engine::new();
