//! The one process-wide engine every export calls.

use kreplay_core::Engine;

use crate::device_ops::CDeviceOps;

/// A static is never destroyed, so calls made during the host's static destruction (HIP frees memory from
/// `__cxa_finalize`) still find valid tables. It starts all zero, so it lives in `.bss`
/// (`c-tests/engine-bss` finds it by its name).
static ENGINE: Engine<CDeviceOps> = Engine::new();

/// The process-wide engine.
pub(crate) fn engine() -> &'static Engine<CDeviceOps> {
    &ENGINE
}
