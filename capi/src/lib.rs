//! The C ABI of kreplay: `libkreplay.a` and, through cbindgen, `include/kreplay.h`.
//!
//! This crate is only the boundary. Each exported function checks its arguments, converts C values to the
//! engine's types, calls [`kreplay_core`] on the one process-wide engine ([`engine`]), and maps the outcome to
//! `kreplay_status_t`. Every export runs inside its panic boundary (`#[ffi_guard]`, see [`boundary`]), so no
//! panic unwinds into C.
#![allow(non_camel_case_types)]

mod boundary;
mod engine;
mod enum_table;
mod versioned;

// The modules with exports, in the order of the header: cbindgen reads them in turn, so this order is the
// header's (and rustfmt sorts only within a group).
mod logging;

mod device_ops;

mod configure;
mod policy;

mod device_storage;
mod gate;
mod snapshot;
mod staging;
mod status;
mod tracking;
mod types;
mod window;

// After the others, so that the header keeps their declarations in the order it had.
mod introspection;

// Version 4.
mod write_set;

/// cbindgen:ignore
#[cfg(feature = "sim")]
pub mod sim;

pub use configure::*;
pub use device_ops::*;
pub use device_storage::*;
pub use gate::*;
pub use introspection::*;
pub use logging::*;
pub use policy::*;
pub use snapshot::*;
pub use staging::*;
pub use status::*;
pub use tracking::*;
pub use types::*;
pub use window::*;
pub use write_set::*;
