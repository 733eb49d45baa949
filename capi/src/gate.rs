//! The replay gate: which submissions may be replayed at all.

use kreplay_core::gate::Gate;

use crate::boundary::{OnPanic, ffi_guard};
use crate::engine::engine;
use crate::enum_table::enum_table;

/// The replay gate's verdict.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum kreplay_gate_t {
    /// Exactly one packet holding exactly one kernel dispatch: replay it.
    KREPLAY_GATE_REPLAY = 0,
    /// More than one packet in the submission (or none).
    KREPLAY_GATE_MULTI_PACKET = 1,
    /// The one packet is not exactly one kernel dispatch.
    KREPLAY_GATE_NOT_A_DISPATCH = 2,
    /// A graph launch is active: warned once per process, then run once.
    KREPLAY_GATE_GRAPH_LAUNCH = 3,
    /// Version 4, from `kreplay_replay_gate_range` only: more than one packet, at least one of them a kernel
    /// dispatch: replay the submission as one window over its dispatches (`kreplay_window_options_t::dispatches`).
    KREPLAY_GATE_REPLAY_RANGE = 4,
}

enum_table! {
    kreplay_gate_t <=> Gate;
    KREPLAY_GATE_REPLAY = Gate::Replay,
    KREPLAY_GATE_MULTI_PACKET = Gate::MultiPacket,
    KREPLAY_GATE_NOT_A_DISPATCH = Gate::NotADispatch,
    KREPLAY_GATE_GRAPH_LAUNCH = Gate::GraphLaunch,
    KREPLAY_GATE_REPLAY_RANGE = Gate::ReplayRange,
}

/// A gate that failed inside lets the submission run once, unreplayed.
impl OnPanic for kreplay_gate_t {
    const ON_PANIC: Self = kreplay_gate_t::KREPLAY_GATE_NOT_A_DISPATCH;
}

/// Decides whether a submission may be replayed: only one packet that is exactly one kernel dispatch, and
/// never while a graph launch is active (warned once per process). Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_replay_gate(
    packet_count: u32,
    dispatch_packet_count: u32,
    graph_launch_active: bool,
) -> kreplay_gate_t {
    engine().replay_gate(packet_count, dispatch_packet_count, graph_launch_active).into()
}

/// Version 4: the gate of a host that replays a multi-packet submission (a HIP graph's packets, a range of
/// dispatches) as one window: `KREPLAY_GATE_REPLAY_RANGE` for more than one packet with at least one kernel
/// dispatch among them (open the window with `dispatches` set to that count, run the whole submission on every
/// pass, restore between), `KREPLAY_GATE_NOT_A_DISPATCH` for packets none of which dispatches; otherwise as
/// `kreplay_replay_gate` (one dispatch packet: `REPLAY`; a graph launch: `GRAPH_LAUNCH`, since only the host can
/// tell whether the graph keeps memory it allocates). Thread-safe.
#[ffi_guard]
#[unsafe(no_mangle)]
pub extern "C" fn kreplay_replay_gate_range(
    packet_count: u32,
    dispatch_packet_count: u32,
    graph_launch_active: bool,
) -> kreplay_gate_t {
    engine().replay_gate_range(packet_count, dispatch_packet_count, graph_launch_active).into()
}
