//! The SNAP operators (SNAP §2.1-2.2): `snap.deltas` turns the kernel's cumulative
//! per-socket counters into per-interval [`Evidence`], and `snap` classifies evidence from
//! any source (kernel or packets) into runs of [`ConnProblem`]s.
//!
//! `snap.deltas`
//! - **Input**: [`TcpSample`]s (`ss` logs, the live poller), in time order per connection.
//! - **Output**: one [`Evidence`] per pair of consecutive samples of a connection, covering
//!   the time between them, at the later sample's time.
//! - **Exchange**: by connection (origin and 4-tuple).
//! - **State**: the last sample of each connection, freed once the frontier is `idle_ns` past
//!   it (a connection that closed, or that a sampling poller skipped for that long).
//! - **Cost**: one hash-map update per sample.
//!
//! `snap`
//! - **Input**: [`Evidence`], in time order per connection.
//! - **Output**: [`ConnProblem`] runs: consecutive intervals of one connection with one
//!   problem (and `app_limited` for the active intervals with none, SNAP's default class),
//!   reported when the problem stops, when the run reaches `report_every_ns` (a new run then
//!   continues it), when the connection goes idle, or at the end of the input.
//! - **Exchange**: by connection.
//! - **State**: per connection, its open runs (at most six), freed with its last evidence
//!   when that says the connection closed, else once the frontier is `idle_ns` past its last
//!   interval.
//! - **Cost**: [`classify`] and at most six run updates per interval.
//!
//! ```
//! use causeway_operators::tcp::problem::{ConnId, Evidence, Problem, SnapConfig};
//! use causeway_operators::tcp::snap::Snap;
//! use timely::dataflow::operators::capture::Event;
//! use timely::dataflow::operators::{Capture, ToStream};
//!
//! let conn = ConnId { local: "10.0.0.1:40000".parse().unwrap(), peer: "10.0.0.2:80".parse().unwrap(), ..ConnId::default() };
//! let interval = |k: u64, rwnd_ms: u64| Evidence {
//!     conn,
//!     start_ns: k * 500_000_000,
//!     end_ns: (k + 1) * 500_000_000,
//!     bytes: 1000,
//!     rwnd_limited_ns: Some(rwnd_ms * 1_000_000),
//!     ..Evidence::default()
//! };
//! let evidence: Vec<_> = (0..4).map(|k| interval(k, if k < 2 { 200 } else { 0 })).collect();
//! let captured = timely::example(move |scope| {
//!     evidence.to_stream(scope).container::<Vec<_>>().snap(SnapConfig::default()).capture()
//! });
//! let mut runs: Vec<_> = captured
//!     .try_iter()
//!     .flat_map(|e| match e { Event::Messages(_, r) => r, Event::Progress(_) => Vec::new() })
//!     .collect();
//! runs.sort_by_key(|r| r.start_ns);
//! assert_eq!(runs.len(), 2);
//! assert_eq!((runs[0].problem, runs[0].start_ns, runs[0].end_ns), (Problem::RwndLimited, 0, 1_000_000_000));
//! assert!((runs[0].fraction - 0.4).abs() < 1e-9);
//! assert_eq!(runs[1].problem, Problem::AppLimited);
//! ```

use causeway_sources::Time;
use causeway_sources::tcpstats::TcpSample;
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use crate::FastMap;
use crate::conn::Deadlines;
use crate::tcp::problem::{
    ConnId, ConnProblem, Evidence, EvidenceSource, Problem, SnapConfig, classify,
};

/// The difference of two cumulative counters, `None` when the later sample lacks it. A
/// counter missing from the earlier sample only was zero then (`ss` leaves out counters
/// that are zero; the poller gives every field its kernel has, in every sample). A counter
/// that went down (a new connection on the same 4-tuple) gives `None`.
fn delta<T: Into<u64> + Copy>(before: Option<T>, after: Option<T>) -> Option<u64> {
    let a = after?.into();
    a.checked_sub(before.map_or(0, Into::into))
}

/// The evidence between two samples of one connection (SNAP §2.1: differences of the
/// cumulative counters, the snapshots of the later sample).
///
/// Linux keeps no #SampleRTT or #SumRTT: it samples an RTT from (nearly) every ACK and keeps
/// only the smoothed RTT. The data segments sent in the interval (less those retransmitted)
/// stand for the samples, and their sum is the samples times the mean of the two smoothed
/// RTTs. Fast retransmissions are the retransmitted segments less one per timeout and less
/// those the receiver reported as duplicates (D-SACK: spurious, e.g. a tail loss probe sent
/// while the ACK was on its way).
pub fn evidence_between(prev: &TcpSample, cur: &TcpSample) -> Evidence {
    let (p, c) = (&prev.info, &cur.info);
    let timeouts = delta(p.total_rto, c.total_rto).or_else(|| {
        // Kernels before 6.7 count no timeouts: a backed-off timer or the Loss state at the
        // sample says one happened.
        (c.backoff.is_some() || c.ca_state.is_some())
            .then(|| u64::from(c.backoff.unwrap_or(0) > 0 || c.ca_state == Some(4)))
    });
    let retrans = delta(p.total_retrans, c.total_retrans);
    let segments = delta(p.data_segs_out, c.data_segs_out).unwrap_or(0);
    let samples = segments.saturating_sub(retrans.unwrap_or(0));
    let srtt = match (p.rtt_us, c.rtt_us) {
        (Some(a), Some(b)) => Some((u64::from(a) + u64::from(b)) / 2),
        (a, b) => b.or(a).map(u64::from),
    };
    Evidence {
        conn: ConnId {
            origin: cur.origin,
            local: cur.local,
            peer: cur.peer,
        },
        source: EvidenceSource::Kernel,
        start_ns: prev.ts_ns,
        end_ns: cur.ts_ns,
        bytes: delta(p.bytes_acked, c.bytes_acked)
            .or(delta(p.bytes_sent, c.bytes_sent))
            .unwrap_or(0),
        segments,
        sndbuf_limited_ns: delta(p.sndbuf_limited_us, c.sndbuf_limited_us).map(|us| us * 1000),
        sndbuf_full: match (c.wmem_queued, c.sndbuf) {
            (Some(q), Some(b)) if b > 0 => Some(u64::from(q) * 10 >= u64::from(b) * 9),
            _ => None,
        },
        rwnd_limited_ns: delta(p.rwnd_limited_us, c.rwnd_limited_us).map(|us| us * 1000),
        fast_retransmits: retrans.map(|r| {
            r.saturating_sub(timeouts.unwrap_or(0))
                .saturating_sub(delta(p.dsack_dups, c.dsack_dups).unwrap_or(0))
        }),
        timeouts,
        // A timeout costs the wait for the timer (one RTO, at least Linux's 200 ms minimum)
        // and then the recovery (the kernel's time in RTO recovery, where it counts it).
        timeout_ns: timeouts.filter(|&n| n > 0).map(|n| {
            n * u64::from(c.rto_us.unwrap_or(0)).max(200_000) * 1000
                + delta(p.total_rto_time_ms, c.total_rto_time_ms).unwrap_or(0) * 1_000_000
        }),
        rtt_samples: srtt.map(|_| samples),
        rtt_sum_us: srtt.map(|s| s * samples),
        min_rtt_us: c.min_rtt_us.map(u64::from),
        delayed_acks: None,
        srtt_us: c.rtt_us.map(u64::from),
        rto_us: c.rto_us.map(u64::from),
        closed: false,
        hops: None,
    }
}

/// Extension trait: per-interval evidence from TCP statistics samples.
pub trait SampleDeltas<'scope> {
    /// See the module documentation (`snap.deltas`).
    fn snap_deltas(self, idle_ns: Time) -> Stream<'scope, Time, Vec<Evidence>>;
}

impl<'scope> SampleDeltas<'scope> for Stream<'scope, Time, Vec<TcpSample>> {
    fn snap_deltas(self, idle_ns: Time) -> Stream<'scope, Time, Vec<Evidence>> {
        let key = |s: &TcpSample| ConnId {
            origin: s.origin,
            local: s.local,
            peer: s.peer,
        };
        self.unary_frontier(
            Exchange::new(move |s: &TcpSample| key(s).route()),
            "snap.deltas",
            move |_cap, _info| {
                let mut last: FastMap<ConnId, TcpSample> = FastMap::default();
                let mut deadlines: Deadlines<ConnId> = Deadlines::default();
                move |(input, frontier), output| {
                    input.for_each(|cap, batch| {
                        let mut session = output.session(&cap);
                        for sample in batch.drain(..) {
                            let id = key(&sample);
                            match last.get_mut(&id) {
                                Some(prev) if prev.ts_ns < sample.ts_ns => {
                                    session.give(evidence_between(prev, &sample));
                                    *prev = sample;
                                }
                                Some(_) => {}
                                None => {
                                    deadlines.schedule(id, sample.ts_ns + idle_ns);
                                    last.insert(id, sample);
                                }
                            }
                        }
                    });
                    if let Some(now) = frontier.frontier().iter().next().copied() {
                        for id in deadlines.due(now) {
                            match last.get(&id) {
                                Some(s) if s.ts_ns + idle_ns <= now => {
                                    last.remove(&id);
                                }
                                Some(s) => {
                                    deadlines.schedule(id, s.ts_ns + idle_ns);
                                }
                                None => {}
                            }
                        }
                    }
                }
            },
        )
    }
}

/// An open run of one problem.
#[derive(Clone, Copy, Debug)]
struct Run {
    start_ns: Time,
    end_ns: Time,
    problem_ns: u64,
    events: u64,
    intervals: u64,
    bytes: u64,
}

/// One connection's open runs, by problem (the five of [`Problem::CORRELATED`], then
/// `app_limited`).
#[derive(Debug)]
struct ConnRuns {
    source: EvidenceSource,
    last_ns: Time,
    runs: [Option<Run>; 6],
}

const PROBLEMS: [Problem; 6] = [
    Problem::SndbufLimited,
    Problem::FastRetransmit,
    Problem::Timeout,
    Problem::DelayedAck,
    Problem::RwndLimited,
    Problem::AppLimited,
];

fn report(conn: ConnId, source: EvidenceSource, k: usize, run: Run) -> ConnProblem {
    let span = run.end_ns.saturating_sub(run.start_ns).max(1);
    ConnProblem {
        conn,
        problem: PROBLEMS[k],
        source,
        start_ns: run.start_ns,
        end_ns: run.end_ns,
        fraction: (run.problem_ns as f64 / span as f64).min(1.0),
        events: run.events,
        intervals: run.intervals,
        bytes: run.bytes,
    }
}

impl ConnRuns {
    /// Adds one interval's classification, reporting the runs it ends.
    fn add(&mut self, e: &Evidence, config: &SnapConfig, out: &mut Vec<ConnProblem>) {
        let times = classify(e, config);
        let healthy = !times.any() && (e.bytes > 0 || e.segments > 0);
        for (k, run) in self.runs.iter_mut().enumerate() {
            let (t, n) = if k < 5 {
                (times.ns[k], times.events[k])
            } else if healthy && config.report_app_limited {
                (e.end_ns.saturating_sub(e.start_ns), 0)
            } else {
                (0, 0)
            };
            if t == 0 {
                if let Some(r) = run.take() {
                    out.push(report(e.conn, self.source, k, r));
                }
                continue;
            }
            let r = run.get_or_insert(Run {
                start_ns: e.start_ns,
                end_ns: e.start_ns,
                problem_ns: 0,
                events: 0,
                intervals: 0,
                bytes: 0,
            });
            r.end_ns = e.end_ns;
            r.problem_ns += t;
            r.events += n;
            r.intervals += 1;
            r.bytes += e.bytes;
            if r.end_ns.saturating_sub(r.start_ns) >= config.report_every_ns {
                if let Some(r) = run.take() {
                    out.push(report(e.conn, self.source, k, r));
                }
            }
        }
        self.last_ns = e.end_ns;
    }

    fn close(&mut self, conn: ConnId, out: &mut Vec<ConnProblem>) {
        for (k, run) in self.runs.iter_mut().enumerate() {
            if let Some(r) = run.take() {
                out.push(report(conn, self.source, k, r));
            }
        }
    }
}

/// Extension trait: SNAP's per-connection classification.
pub trait Snap<'scope> {
    /// See the module documentation (`snap`).
    fn snap(self, config: SnapConfig) -> Stream<'scope, Time, Vec<ConnProblem>>;
}

impl<'scope> Snap<'scope> for Stream<'scope, Time, Vec<Evidence>> {
    fn snap(self, config: SnapConfig) -> Stream<'scope, Time, Vec<ConnProblem>> {
        self.unary_frontier(
            Exchange::new(|e: &Evidence| e.conn.route()),
            "snap",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut conns: FastMap<ConnId, ConnRuns> = FastMap::default();
                let mut deadlines: Deadlines<ConnId> = Deadlines::default();
                let mut out = Vec::new();
                move |(input, frontier), output| {
                    input.for_each(|_cap, batch| {
                        batch.sort_by_key(|e| e.end_ns);
                        for e in batch.drain(..) {
                            let state = conns.entry(e.conn).or_insert_with(|| {
                                deadlines.schedule(e.conn, e.end_ns + config.idle_ns);
                                ConnRuns {
                                    source: e.source,
                                    last_ns: 0,
                                    runs: [None; 6],
                                }
                            });
                            if e.end_ns > state.last_ns {
                                state.add(&e, &config, &mut out);
                            }
                            if e.closed {
                                state.close(e.conn, &mut out);
                                conns.remove(&e.conn);
                            }
                        }
                    });
                    let now = frontier.frontier().iter().next().copied();
                    match now {
                        Some(now) => {
                            for id in deadlines.due(now) {
                                let Some(state) = conns.get_mut(&id) else {
                                    continue;
                                };
                                if state.last_ns + config.idle_ns <= now {
                                    state.close(id, &mut out);
                                    conns.remove(&id);
                                } else {
                                    deadlines.schedule(id, state.last_ns + config.idle_ns);
                                }
                            }
                        }
                        None => {
                            let mut all: Vec<_> = conns.drain().collect();
                            all.sort_by_key(|(id, _)| *id);
                            for (id, mut state) in all {
                                state.close(id, &mut out);
                            }
                        }
                    }
                    if let Some(cap) = held.as_mut() {
                        if !out.is_empty() {
                            output.session(&*cap).give_iterator(out.drain(..));
                        }
                    }
                    crate::follow_frontier_one(&mut held, now);
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_sources::tcpstats::TcpInfo;

    fn sample(ts_ms: u64, f: impl FnOnce(&mut TcpInfo)) -> TcpSample {
        let mut info = TcpInfo::default();
        f(&mut info);
        TcpSample {
            ts_ns: ts_ms * 1_000_000,
            local: "10.0.0.1:40000".parse().unwrap(),
            peer: "10.0.0.2:80".parse().unwrap(),
            info,
            ..TcpSample::default()
        }
    }

    #[test]
    fn counters_become_deltas() {
        let a = sample(1000, |i| {
            i.total_retrans = Some(4);
            i.total_rto = Some(1);
            i.rwnd_limited_us = Some(1_000);
            i.bytes_acked = Some(10_000);
            i.data_segs_out = Some(10);
            i.rtt_us = Some(40_000);
        });
        let b = sample(1500, |i| {
            i.total_retrans = Some(9);
            i.total_rto = Some(2);
            i.rwnd_limited_us = Some(101_000);
            i.bytes_acked = Some(30_000);
            i.data_segs_out = Some(30);
            i.rtt_us = Some(40_000);
            i.min_rtt_us = Some(50);
        });
        let e = evidence_between(&a, &b);
        assert_eq!((e.start_ns, e.end_ns), (1_000_000_000, 1_500_000_000));
        assert_eq!(e.bytes, 20_000);
        assert_eq!(e.timeouts, Some(1));
        assert_eq!(e.fast_retransmits, Some(4));
        assert_eq!(e.rwnd_limited_ns, Some(100_000_000));
        assert_eq!((e.rtt_samples, e.rtt_sum_us), (Some(15), Some(600_000)));
        assert_eq!(e.sndbuf_limited_ns, None);
    }

    #[test]
    fn a_counter_ss_left_out_was_zero() {
        let a = sample(0, |_| {});
        let b = sample(500, |i| {
            i.total_retrans = Some(3);
            i.rwnd_limited_us = Some(2_000);
        });
        let e = evidence_between(&a, &b);
        assert_eq!(e.fast_retransmits, Some(3));
        assert_eq!(e.rwnd_limited_ns, Some(2_000_000));
        assert_eq!(evidence_between(&b, &a).fast_retransmits, None);
    }

    #[test]
    fn a_counter_that_goes_down_is_not_a_delta() {
        let a = sample(0, |i| i.total_retrans = Some(7));
        let b = sample(500, |i| i.total_retrans = Some(2));
        assert_eq!(evidence_between(&a, &b).fast_retransmits, None);
    }
}
