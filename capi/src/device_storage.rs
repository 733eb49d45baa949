//! Device storage held idle between snapshots (the device tier), and giving it back.

use crate::boundary::ffi_guard;
use crate::engine::engine;
use crate::types::kreplay_agent_t;

/// Device memory held idle for `agent` (retained device storage that no live snapshot uses). Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_retained_device_bytes(agent: kreplay_agent_t) -> usize {
    engine().retained_device_bytes(agent.into())
}

/// Gives all of `agent`'s idle device storage back through `ops.device_free`. Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_device_trim(agent: kreplay_agent_t) {
    engine().device_trim(agent.into())
}

/// Gives every agent's idle device storage back. A host whose own device allocation failed for lack of memory
/// calls this and retries once: kreplay never makes the application fail for memory it holds idle.
/// Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_device_trim_all() {
    engine().device_trim_all()
}

/// Tells kreplay that `agent`'s device context is gone (CUDA: `cudaDeviceReset`, the primary context reset, a
/// context destroyed), with everything made in it. kreplay forgets the device storage it holds for `agent`
/// (idle, and held by live snapshots) without `ops.device_free`, since those addresses may already be the
/// program's new allocations; forgets that `agent`'s staging is page-locked without `ops.host_unlock` (it is
/// locked again on next use if the policy pins); drops cached module scans (as `kreplay_modules_changed`); and
/// makes every live snapshot of `agent` unrestorable: `kreplay_restore` then writes nothing and counts every
/// region and variable in `skipped`, and `kreplay_snapshot_free` gives back only its host staging. No device op
/// is called. Thread-safe; call it before anything else uses the new context.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_agent_reset(agent: kreplay_agent_t) {
    engine().agent_reset(agent.into())
}
