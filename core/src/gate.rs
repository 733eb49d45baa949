//! The replay gate: which submissions may be replayed at all.

crate::error::c_enum! {
    /// The gate's verdict. The discriminants are the C API's `kreplay_gate_t` values.
    pub enum Gate {
        /// Exactly one packet, and it is exactly one kernel dispatch: replay it.
        Replay = 0,
        /// More than one packet in the submission (or none).
        MultiPacket = 1,
        /// The one packet is not exactly one kernel dispatch.
        NotADispatch = 2,
        /// A graph launch is active: run once, unreplayed.
        GraphLaunch = 3,
        /// Version 4, from [`decide_range`] only: more than one packet, at least one of them a kernel dispatch:
        /// replay the submission as one window over its dispatches.
        ReplayRange = 4,
    }
}

/// Decides whether a submission may be replayed. Graph launches are checked first: snapshot and restore
/// around a graph's runtime-managed memory and ordering is undefined.
pub const fn decide(packet_count: u32, dispatch_packet_count: u32, graph_launch_active: bool) -> Gate {
    if graph_launch_active {
        Gate::GraphLaunch
    } else if packet_count != 1 {
        Gate::MultiPacket
    } else if dispatch_packet_count != 1 {
        Gate::NotADispatch
    } else {
        Gate::Replay
    }
}

/// As [`decide`], for a host that replays a multi-packet submission as one window over a range of dispatches
/// (version 4): more than one packet with at least one kernel dispatch among them is [`Gate::ReplayRange`]; one
/// packet or none, and graph launches (whose memory only the host can vouch for), are decided as by [`decide`].
pub const fn decide_range(packet_count: u32, dispatch_packet_count: u32, graph_launch_active: bool) -> Gate {
    match decide(packet_count, dispatch_packet_count, graph_launch_active) {
        Gate::MultiPacket if packet_count > 1 && dispatch_packet_count == 0 => Gate::NotADispatch,
        Gate::MultiPacket if packet_count > 1 && dispatch_packet_count <= packet_count => Gate::ReplayRange,
        verdict => verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_host_replays_multi_packet_submissions_that_dispatch() {
        assert_eq!(decide_range(1, 1, false), Gate::Replay);
        assert_eq!(decide_range(3, 2, false), Gate::ReplayRange);
        assert_eq!(decide_range(2, 2, false), Gate::ReplayRange);
        assert_eq!(decide_range(2, 0, false), Gate::NotADispatch);
        assert_eq!(decide_range(2, 3, false), Gate::MultiPacket);
        assert_eq!(decide_range(0, 0, false), Gate::MultiPacket);
        assert_eq!(decide_range(1, 0, false), Gate::NotADispatch);
        assert_eq!(decide_range(3, 2, true), Gate::GraphLaunch);
    }

    #[test]
    fn only_one_packet_holding_one_dispatch_is_replayed() {
        assert_eq!(decide(1, 1, false), Gate::Replay);
        assert_eq!(decide(2, 1, false), Gate::MultiPacket);
        assert_eq!(decide(0, 0, false), Gate::MultiPacket);
        assert_eq!(decide(1, 0, false), Gate::NotADispatch);
        assert_eq!(decide(1, 2, false), Gate::NotADispatch);
        assert_eq!(decide(1, 1, true), Gate::GraphLaunch);
    }
}
