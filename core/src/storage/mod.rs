//! Storage for captured contents, in two tiers that share one block pool ([`blocks`]) and one per-agent slot
//! table ([`slots`]):
//! - [`host`]: retained host memory (anonymous mmap, optionally page-locked), also the C API's staging buffers;
//! - [`device`]: retained device memory of the same agent, under a budget ([`budget`]: how much one capture
//!   may take).

pub mod blocks;
pub(crate) mod budget;
pub mod device;
pub mod host;
pub(crate) mod host_budget;
pub mod resets;
pub mod slots;

#[cfg(test)]
mod budget_race;
