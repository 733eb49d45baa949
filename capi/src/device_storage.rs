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
