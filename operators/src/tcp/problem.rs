//! SNAP's vocabulary (SNAP §2.2, Table 2): the performance [`Problem`]s of a TCP connection,
//! the [`Evidence`] of one connection over one interval (from the kernel's counters or from
//! packets), and [`classify`], which turns evidence into the time spent in each problem.
//!
//! A connection here is one direction of data: [`ConnId`] names the sender's endpoint
//! (`local`) and the receiver's (`peer`) as seen by one origin, so `local->peer` is the flow
//! whose sender is being diagnosed. The kernel's statistics describe the polled host as
//! sender; packets give both directions, each its own [`ConnId`].
//!
//! No state: a vocabulary of types.

use std::fmt;

use causeway_sources::{Endpoint, OriginId, Time};
use serde::{Deserialize, Serialize};

/// A performance problem of one connection (SNAP Table 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Problem {
    /// The send buffer is full: the application waits for room (SNAP: CurAppWQueue ≈
    /// MaxAppWQueue).
    SndbufLimited,
    /// Losses recovered by fast retransmission (diff(#FastRetrans) > 0).
    FastRetransmit,
    /// Losses recovered only by a retransmission timeout (diff(#Timeout) > 0).
    Timeout,
    /// Segments waited for the receiver's delayed ACK (diff(SumRTT) > diff(SampleRTT) ×
    /// MaxQueuingDelay).
    DelayedAck,
    /// The receiver's window held the sender back (diff(RwinLimitTime) > 0).
    RwndLimited,
    /// None of the above: the sender application did not write faster.
    AppLimited,
}

impl Problem {
    /// The five problems SNAP correlates, in the order of a performance vector (SNAP §2.3,
    /// footnote 4); `AppLimited` is what is left.
    pub const CORRELATED: [Problem; 5] = [
        Problem::SndbufLimited,
        Problem::FastRetransmit,
        Problem::Timeout,
        Problem::DelayedAck,
        Problem::RwndLimited,
    ];

    /// The name in the JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::SndbufLimited => "sndbuf_limited",
            Problem::FastRetransmit => "fast_retransmit",
            Problem::Timeout => "timeout",
            Problem::DelayedAck => "delayed_ack",
            Problem::RwndLimited => "rwnd_limited",
            Problem::AppLimited => "app_limited",
        }
    }

    /// The problem named `s` in the JSON output.
    pub fn parse(s: &str) -> Option<Problem> {
        Problem::CORRELATED
            .into_iter()
            .chain([Problem::AppLimited])
            .find(|p| p.as_str() == s)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One direction of data of one TCP connection, as one origin saw it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ConnId {
    /// The host whose kernel was polled, or the sniffer that saw the packets.
    pub origin: OriginId,
    /// The data sender's endpoint.
    pub local: Endpoint,
    /// The receiver's endpoint.
    pub peer: Endpoint,
}

impl ConnId {
    /// `local->peer`, as the `flow` field of the output contract.
    pub fn flow(&self) -> String {
        format!("{}->{}", self.local, self.peer)
    }

    /// Exchange key: the same on every worker and process.
    pub fn route(&self) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::with_seed(0x736e_6170).hash_one(self)
    }
}

impl ConnId {
    /// Exchange key of the direction alone (`local`, `peer`), whoever saw it: the same on
    /// every worker and process, and the same as a message's from `local` to `peer`.
    pub fn direction_route(local: &Endpoint, peer: &Endpoint) -> u64 {
        use std::hash::BuildHasher;
        foldhash::fast::FixedState::with_seed(0x6870_7073).hash_one((local, peer))
    }
}

/// What the TCP connection that carried one message suffered while the message was sent:
/// the share of that interval of its direction of data spent in each of the five problems
/// ([`Problem::CORRELATED`] order), as [`classify`] judged it. Set by `tcp.hops`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Carried {
    /// Share of the interval in each problem, in parts per ten thousand (0 to 10,000).
    pub shares: [u16; 5],
}

impl Carried {
    /// Parts per ten thousand in one.
    pub const WHOLE: u16 = 10_000;

    /// The shares of an interval of `span_ns` classified as `times`.
    pub fn of(times: &ProblemTimes, span_ns: u64) -> Carried {
        let span = span_ns.max(1) as f64;
        Carried {
            shares: times
                .ns
                .map(|t| ((t as f64 / span).min(1.0) * f64::from(Self::WHOLE)).round() as u16),
        }
    }

    /// The share of problem `k` (in [`Problem::CORRELATED`] order), 0 to 1.
    pub fn share(&self, k: usize) -> f64 {
        f64::from(self.shares[k]) / f64::from(Self::WHOLE)
    }
}

/// Where evidence came from.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum EvidenceSource {
    /// The kernel's per-socket counters (`ss` logs, the live poller).
    #[default]
    Kernel,
    /// Packets (a capture or a live sniffer).
    Packets,
}

impl EvidenceSource {
    /// The name in the JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceSource::Kernel => "kernel",
            EvidenceSource::Packets => "packets",
        }
    }
}

/// What one interval of one connection showed. Counts and times cover `[start_ns, end_ns)`;
/// `None` means not measured (never zero by default).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Evidence {
    /// The connection (one direction of data).
    pub conn: ConnId,
    /// Where the evidence came from.
    pub source: EvidenceSource,
    /// Start of the interval (event time, ns).
    pub start_ns: Time,
    /// End of the interval.
    pub end_ns: Time,
    /// Data bytes the sender sent (or had acknowledged) in the interval.
    pub bytes: u64,
    /// Data segments the sender sent in the interval.
    pub segments: u64,
    /// Time the send buffer limited the sender, ns (kernel `tcpi_sndbuf_limited`).
    pub sndbuf_limited_ns: Option<u64>,
    /// Whether the send buffer was full when sampled at the interval's end (SNAP's
    /// CurAppWQueue ≈ MaxAppWQueue snapshot, for kernels without `tcpi_sndbuf_limited`).
    pub sndbuf_full: Option<bool>,
    /// Time the receiver's window limited the sender, ns.
    pub rwnd_limited_ns: Option<u64>,
    /// Segments retransmitted by fast retransmission (or another loss recovery that was
    /// not a timeout: SACK, RACK, tail loss probes).
    pub fast_retransmits: Option<u64>,
    /// Retransmission timeouts.
    pub timeouts: Option<u64>,
    /// Time spent recovering from timeouts, ns, where known.
    pub timeout_ns: Option<u64>,
    /// RTT samples in the interval (SNAP's diff(#SampleRTT)).
    pub rtt_samples: Option<u64>,
    /// Their sum, µs (SNAP's diff(#SumRTT)).
    pub rtt_sum_us: Option<u64>,
    /// The connection's minimum RTT, µs: its propagation delay.
    pub min_rtt_us: Option<u64>,
    /// Segments that waited for a delayed ACK, counted directly (from packets).
    pub delayed_acks: Option<u64>,
    /// The smoothed RTT at the end of the interval, µs.
    pub srtt_us: Option<u64>,
    /// The retransmission timeout at the end of the interval, µs.
    pub rto_us: Option<u64>,
    /// The connection closed (both FINs, or a RST): nothing more will come of it, and its
    /// state downstream may be freed.
    #[serde(default)]
    pub closed: bool,
    /// The most routers the connection's packets crossed before the capture, from their
    /// TTLs ([`routers_crossed`](crate::tcp::packets::routers_crossed)); `None` from the
    /// kernel's counters.
    #[serde(default)]
    pub hops: Option<u8>,
}

/// Thresholds of the classification (SNAP §2.2, §4.2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SnapConfig {
    /// The largest queuing delay the network should add, ns (SNAP's MaxQueuingDelay; 10 ms
    /// in SNAP's data center).
    pub max_queuing_delay_ns: u64,
    /// The receivers' delayed-ACK timeout, ns, as used to count delayed ACKs: Linux waits
    /// 40 to 200 ms, Windows 200 ms. SNAP uses 90% of the stack's value (180 ms for 200 ms),
    /// since timers fire late or early by a tick.
    pub delayed_ack_timeout_ns: u64,
    /// The smallest fraction of an interval a limit (`sndbuf`, `rwnd`) must take to count:
    /// a few µs of a full window in a fast transfer are not a problem.
    pub min_limited_fraction: f64,
    /// The smallest retransmission timeout of the senders, ns (Linux: 200 ms); a packet-seen
    /// retransmission after this much silence, with no duplicate ACK before it, is a timeout.
    pub min_rto_ns: u64,
    /// A `conn_problem` run is reported once it is this long even if it goes on, so that
    /// long problems show up while they last.
    pub report_every_ns: u64,
    /// A connection not seen for this long is forgotten (its runs are reported).
    pub idle_ns: u64,
    /// Whether to report `app_limited` runs (the healthy default class).
    pub report_app_limited: bool,
}

impl Default for SnapConfig {
    fn default() -> Self {
        SnapConfig {
            max_queuing_delay_ns: 10_000_000,
            delayed_ack_timeout_ns: 36_000_000,
            min_limited_fraction: 0.01,
            min_rto_ns: 200_000_000,
            report_every_ns: 10_000_000_000,
            idle_ns: 30_000_000_000,
            report_app_limited: true,
        }
    }
}

/// The time one interval of one connection spent in each problem, ns, in the order of
/// [`Problem::CORRELATED`], plus counts. A problem is present when its time is above zero.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct ProblemTimes {
    /// Time per problem, ns.
    pub ns: [u64; 5],
    /// Events per problem: limited intervals (1), retransmitted segments, timeouts,
    /// delayed ACKs (SNAP §4.2's estimate when it comes from the kernel), limited intervals.
    pub events: [u64; 5],
}

impl ProblemTimes {
    /// Whether any of the five problems is present.
    pub fn any(&self) -> bool {
        self.ns.iter().any(|&t| t > 0)
    }

    /// The problems present, with their times and event counts.
    pub fn present(&self) -> impl Iterator<Item = (Problem, u64, u64)> + '_ {
        Problem::CORRELATED
            .into_iter()
            .zip(self.ns.iter().zip(self.events.iter()))
            .filter(|(_, (t, _))| **t > 0)
            .map(|(p, (t, e))| (p, *t, *e))
    }
}

/// SNAP Table 2 over one interval: the time spent in each problem. Times are capped at the
/// interval's length.
///
/// - send buffer: the kernel's limited time; without it, the whole interval when the snapshot
///   found the buffer full (Poisson sampling sees time averages, SNAP §2.2);
/// - fast retransmission: one smoothed RTT (at least 1 ms) per retransmitted segment;
/// - timeout: the kernel's time in timeout recovery, or one RTO per timeout;
/// - delayed ACK: SNAP §4.2's count, (diff(SumRTT) − diff(SampleRTT) × (propagation +
///   MaxQueuingDelay)) / DelayedACKTimeout, or the count seen in packets, times the timeout;
/// - receiver window: the limited time.
///
/// Limits shorter than `min_limited_fraction` of the interval do not count.
pub fn classify(e: &Evidence, config: &SnapConfig) -> ProblemTimes {
    let span = e.end_ns.saturating_sub(e.start_ns).max(1);
    let mut out = ProblemTimes::default();
    let min_limited = (span as f64 * config.min_limited_fraction) as u64;
    let limited = |t: Option<u64>| {
        t.filter(|&t| t > 0 && t >= min_limited)
            .map(|t| t.min(span))
    };

    let sndbuf = limited(e.sndbuf_limited_ns)
        .or_else(|| (e.sndbuf_limited_ns.is_none() && e.sndbuf_full == Some(true)).then_some(span));
    if let Some(t) = sndbuf {
        out.ns[0] = t;
        out.events[0] = 1;
    }
    let srtt_ns = e.srtt_us.unwrap_or(0).saturating_mul(1000).max(1_000_000);
    if let Some(n) = e.fast_retransmits.filter(|&n| n > 0) {
        out.ns[1] = n.saturating_mul(srtt_ns).min(span);
        out.events[1] = n;
    }
    if let Some(n) = e.timeouts.filter(|&n| n > 0) {
        let rto = e
            .rto_us
            .unwrap_or(0)
            .saturating_mul(1000)
            .max(config.min_rto_ns);
        let t = e
            .timeout_ns
            .filter(|&t| t > 0)
            .unwrap_or_else(|| n.saturating_mul(rto));
        out.ns[2] = t.min(span).max(1);
        out.events[2] = n;
    }
    let delayed = match (e.delayed_acks, e.rtt_samples, e.rtt_sum_us) {
        (Some(n), _, _) => n,
        (None, Some(samples), Some(sum)) if samples > 0 => {
            let base_us = e.min_rtt_us.unwrap_or(0) + config.max_queuing_delay_ns / 1000;
            let excess = sum.saturating_sub(samples.saturating_mul(base_us));
            // SNAP's rule first (the mean RTT above propagation plus queuing), then its count.
            if sum > samples.saturating_mul(base_us) {
                excess / (config.delayed_ack_timeout_ns / 1000).max(1)
            } else {
                0
            }
        }
        _ => 0,
    };
    if delayed > 0 {
        out.ns[3] = delayed
            .saturating_mul(config.delayed_ack_timeout_ns)
            .min(span);
        out.events[3] = delayed;
    }
    if let Some(t) = limited(e.rwnd_limited_ns) {
        out.ns[4] = t;
        out.events[4] = 1;
    }
    out
}

/// One interval of one connection, classified: what `correlate` consumes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Classified {
    /// The connection.
    pub conn: ConnId,
    /// Start of the interval.
    pub start_ns: Time,
    /// End of the interval.
    pub end_ns: Time,
    /// Time in each problem.
    pub times: ProblemTimes,
}

/// A run of consecutive intervals in which one connection had one problem: the
/// `conn_problem` record of the output contract.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnProblem {
    /// The connection.
    pub conn: ConnId,
    /// What it suffered.
    pub problem: Problem,
    /// Where the evidence came from.
    pub source: EvidenceSource,
    /// Start of the run (event time, ns).
    pub start_ns: Time,
    /// End of the run.
    pub end_ns: Time,
    /// Time in the problem over the run's length.
    pub fraction: f64,
    /// Events in the run (see [`ProblemTimes::events`]).
    pub events: u64,
    /// Intervals in the run.
    pub intervals: u64,
    /// Bytes the sender sent during the run.
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(span_ms: u64) -> Evidence {
        Evidence {
            start_ns: 0,
            end_ns: span_ms * 1_000_000,
            ..Evidence::default()
        }
    }

    #[test]
    fn nothing_measured_is_no_problem() {
        let t = classify(&evidence(500), &SnapConfig::default());
        assert!(!t.any());
    }

    #[test]
    fn snap_delayed_ack_estimate() {
        // 10 segments at a mean RTT of 40 ms over 50 µs of propagation: (400 ms − 10 ×
        // 10.05 ms) / 36 ms = 8 delayed ACKs (SNAP §4.2).
        let mut e = evidence(500);
        e.rtt_samples = Some(10);
        e.rtt_sum_us = Some(400_000);
        e.min_rtt_us = Some(50);
        let t = classify(&e, &SnapConfig::default());
        assert_eq!(t.events[3], 8);
        assert_eq!(t.ns[3], 8 * 36_000_000);
        // A mean RTT within propagation plus queuing is no delayed ACK.
        e.rtt_sum_us = Some(10 * 9_000);
        assert_eq!(classify(&e, &SnapConfig::default()).events[3], 0);
    }

    #[test]
    fn limits_below_the_minimum_fraction_do_not_count() {
        let mut e = evidence(1000);
        e.rwnd_limited_ns = Some(5_000_000); // 0.5%
        e.sndbuf_limited_ns = Some(300_000_000);
        let t = classify(&e, &SnapConfig::default());
        assert_eq!(t.ns[4], 0);
        assert_eq!(t.ns[0], 300_000_000);
    }

    #[test]
    fn losses_are_split_by_how_they_were_recovered() {
        let mut e = evidence(1000);
        e.fast_retransmits = Some(3);
        e.timeouts = Some(1);
        e.srtt_us = Some(2_000);
        let t = classify(&e, &SnapConfig::default());
        assert_eq!((t.events[1], t.ns[1]), (3, 6_000_000));
        assert_eq!((t.events[2], t.ns[2]), (1, 200_000_000));
        let names: Vec<_> = t.present().map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(names, ["fast_retransmit", "timeout"]);
    }

    #[test]
    fn problem_names_round_trip() {
        for p in Problem::CORRELATED.into_iter().chain([Problem::AppLimited]) {
            assert_eq!(Problem::parse(p.as_str()), Some(p));
        }
    }
}
