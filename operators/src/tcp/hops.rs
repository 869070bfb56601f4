//! `tcp.hops`: each message with the TCP problems of the connection that carried it, so that
//! `paths` can put them on the pattern hops the messages make (issue: problems on the paths).
//!
//! - **Input**: messages, and the per-interval [`Evidence`] of every direction of data of
//!   every TCP connection (`tcp.packets` from captures, `snap.deltas` from the kernel's
//!   counters).
//! - **Output**: the same messages, at the same times, each with [`Message::tcp`] set from
//!   the evidence interval of its direction of data (`src_endpoint -> dst_endpoint`) that
//!   covers its event time: the share of that interval spent in each of SNAP's five
//!   problems ([`Carried`]). Where several sightings cover it (the connection captured at both
//!   ends, or by the poller too), the kernel's counters win, else the sighting with the most
//!   data segments: the sender's side, as in `correlate`. Messages between named nodes, or
//!   whose direction has no evidence, pass unchanged.
//! - **Exchange**: both inputs by direction of data (endpoints only, whoever saw it).
//! - **Time**: evidence intervals are compared in event time: their bounds are the capturing
//!   host's raw clock, aligned as the sources align that origin's records. A message waits
//!   until the evidence's frontier is `wait_ns` past its event time (twice the evidence
//!   interval by default: an interval is reported when the frontier passes its end), so the
//!   answer does not depend on timing; evidence that comes later is not applied.
//! - **State**: per direction, the classified intervals that end within `keep_ns` of the
//!   frontier (how late a message may reach this operator plus its wait), freed as the
//!   frontier passes; the messages waiting, freed as they leave.
//! - **Cost**: per evidence interval, [`classify`] and a queue push; per message, a hash
//!   lookup and a scan of the few intervals of its direction held.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use causeway_sources::origin::Alignment;
use causeway_sources::{Address, Endpoint, Time};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use crate::FastMap;
use crate::message::{Message, MessageStream};
use crate::tcp::problem::{Carried, ConnId, Evidence, EvidenceSource, SnapConfig, classify};

/// How `tcp.hops` waits and what it keeps.
#[derive(Clone, Copy, Debug)]
pub struct HopsConfig {
    /// How long past its event time a message waits for the evidence covering it, ns.
    pub wait_ns: Time,
    /// How long past their end evidence intervals are kept, ns: the wait plus how late
    /// (behind the frontier) a message may come.
    pub keep_ns: Time,
    /// The classification's thresholds.
    pub snap: SnapConfig,
}

/// One classified interval of one direction, as one origin saw it.
#[derive(Clone, Copy, Debug)]
struct Interval {
    start: Time,
    end: Time,
    /// Kernel counters first, then the most data segments.
    rank: (bool, u64),
    carried: Carried,
}

/// A message's direction of data, when both ends are `ip:port`.
fn direction(m: &Message) -> Option<(Endpoint, Endpoint)> {
    match (&m.src_endpoint, &m.dst_endpoint) {
        (Address::Endpoint(a), Address::Endpoint(b)) => Some((*a, *b)),
        _ => None,
    }
}

/// The best interval of `held` that covers `t`.
fn covering(held: &VecDeque<Interval>, t: Time) -> Option<Carried> {
    held.iter()
        .filter(|i| i.start <= t && t < i.end)
        .max_by_key(|i| i.rank)
        .map(|i| i.carried)
}

/// Extension trait: TCP problems onto messages.
pub trait TcpHops<'scope> {
    /// See the module documentation.
    fn tcp_hops(
        self,
        evidence: Stream<'scope, Time, Vec<Evidence>>,
        config: HopsConfig,
        alignment: Arc<Alignment>,
    ) -> MessageStream<'scope>;
}

impl<'scope> TcpHops<'scope> for MessageStream<'scope> {
    fn tcp_hops(
        self,
        evidence: Stream<'scope, Time, Vec<Evidence>>,
        config: HopsConfig,
        alignment: Arc<Alignment>,
    ) -> MessageStream<'scope> {
        #[allow(clippy::borrowed_box)]
        let route_message = |m: &Box<Message>| match direction(m) {
            Some((a, b)) => ConnId::direction_route(&a, &b),
            None => m.event_ns,
        };
        self.binary_frontier(
            evidence,
            Exchange::new(route_message),
            Exchange::new(|e: &Evidence| ConnId::direction_route(&e.conn.local, &e.conn.peer)),
            "tcp.hops",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut intervals: FastMap<(Endpoint, Endpoint), VecDeque<Interval>> =
                    FastMap::default();
                // Messages by the time they came at, with the latest event time among them.
                let mut pending: BTreeMap<Time, (Time, Vec<Box<Message>>)> = BTreeMap::new();
                let mut swept: Time = 0;
                move |(messages, msg_frontier), (evidence, ev_frontier), output| {
                    evidence.for_each(|_cap, batch| {
                        for e in batch.drain(..) {
                            let start = alignment.align(e.conn.origin, e.start_ns);
                            let end = alignment.align(e.conn.origin, e.end_ns);
                            let times = classify(&e, &config.snap);
                            let i = Interval {
                                start,
                                end,
                                rank: (e.source == EvidenceSource::Kernel, e.segments),
                                carried: Carried::of(&times, e.end_ns.saturating_sub(e.start_ns)),
                            };
                            let list = intervals.entry((e.conn.local, e.conn.peer)).or_default();
                            let at = list.partition_point(|x| x.end <= end);
                            list.insert(at, i);
                        }
                    });
                    messages.for_each(|cap, batch| {
                        let Some(&t) = cap.least() else { return };
                        let slot = pending.entry(t).or_insert((t, Vec::new()));
                        for m in batch.drain(..) {
                            slot.0 = slot.0.max(m.event_ns);
                            slot.1.push(m);
                        }
                    });
                    let ev_now = ev_frontier.frontier().iter().next().copied();
                    let msg_now = msg_frontier.frontier().iter().next().copied();
                    let Some(cap) = held.as_mut() else { return };
                    // Every batch whose latest message has waited out its evidence.
                    let due: Vec<Time> = pending
                        .iter()
                        .filter(|(_, (latest, _))| {
                            ev_now.is_none_or(|n| latest.saturating_add(config.wait_ns) < n)
                        })
                        .map(|(t, _)| *t)
                        .collect();
                    for t in due {
                        let Some((_, mut batch)) = pending.remove(&t) else {
                            continue;
                        };
                        for m in &mut batch {
                            if let Some(d) = direction(m) {
                                m.tcp = intervals.get(&d).and_then(|l| covering(l, m.event_ns));
                            }
                        }
                        output.session(&cap.delayed(&t)).give_container(&mut batch);
                    }
                    // Intervals no waiting or later message can fall in.
                    if let Some(n) = ev_now.or(msg_now) {
                        let horizon = n.saturating_sub(config.keep_ns);
                        if horizon > swept.saturating_add(config.keep_ns / 4) {
                            swept = horizon;
                            intervals.retain(|_, list| {
                                while list.front().is_some_and(|i| i.end < horizon) {
                                    list.pop_front();
                                }
                                !list.is_empty()
                            });
                        }
                    }
                    match (msg_now, pending.keys().next()) {
                        (None, None) => held = None,
                        (now, first) => {
                            let to = now.into_iter().chain(first.copied()).min();
                            if let Some(to) = to.filter(|&to| to > *cap.time()) {
                                cap.downgrade(&to);
                            }
                        }
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::problem::Problem;
    use timely::dataflow::operators::capture::Event;
    use timely::dataflow::operators::{Capture, ToStream};

    fn ep(s: &str) -> Endpoint {
        s.parse().unwrap()
    }

    fn message(src: &str, dst: &str, at: Time) -> Box<Message> {
        Box::new(Message {
            src_endpoint: Address::Endpoint(ep(src)),
            dst_endpoint: Address::Endpoint(ep(dst)),
            event_ns: at,
            ..Message::default()
        })
    }

    fn evidence(local: &str, peer: &str, k: u64, rwnd_ms: u64, segments: u64) -> Evidence {
        Evidence {
            conn: ConnId {
                local: ep(local),
                peer: ep(peer),
                ..ConnId::default()
            },
            source: EvidenceSource::Packets,
            start_ns: k * 500_000_000,
            end_ns: (k + 1) * 500_000_000,
            bytes: 1000,
            segments,
            rwnd_limited_ns: Some(rwnd_ms * 1_000_000),
            ..Evidence::default()
        }
    }

    fn run(messages: Vec<Box<Message>>, evidence: Vec<Evidence>) -> Vec<Box<Message>> {
        let config = HopsConfig {
            wait_ns: 1_000_000_000,
            keep_ns: 2_000_000_000,
            snap: SnapConfig::default(),
        };
        let captured = timely::example(move |scope| {
            let ev = evidence.to_stream(scope).container::<Vec<_>>();
            messages
                .to_stream(scope)
                .container::<Vec<_>>()
                .tcp_hops(ev, config, Arc::new(Alignment::none()))
                .capture()
        });
        let mut out: Vec<Box<Message>> = captured
            .try_iter()
            .flat_map(|e| match e {
                Event::Messages(_, m) => m,
                Event::Progress(_) => Vec::new(),
            })
            .collect();
        out.sort_by_key(|m| m.event_ns);
        out
    }

    /// `rwnd_limited`'s place in a [`Carried`].
    fn rwnd() -> usize {
        Problem::CORRELATED
            .iter()
            .position(|p| *p == Problem::RwndLimited)
            .unwrap()
    }

    #[test]
    fn a_message_gets_its_own_direction_and_interval() {
        let k = rwnd();
        let out = run(
            vec![
                // In the limited interval of its direction.
                message("10.0.0.2:5432", "10.0.0.1:40000", 100_000_000),
                // The same direction, in the healthy interval after it.
                message("10.0.0.2:5432", "10.0.0.1:40000", 700_000_000),
                // The other direction: no evidence of its own.
                message("10.0.0.1:40000", "10.0.0.2:5432", 200_000_000),
            ],
            vec![
                evidence("10.0.0.2:5432", "10.0.0.1:40000", 0, 300, 10),
                evidence("10.0.0.2:5432", "10.0.0.1:40000", 1, 0, 10),
            ],
        );
        assert_eq!(out.len(), 3);
        let limited = out[0].tcp.expect("evidence covers it");
        assert!((limited.share(k) - 0.6).abs() < 1e-3, "{limited:?}");
        assert_eq!(out[1].tcp, None);
        assert_eq!(out[2].tcp.map(|c| c.share(k)), Some(0.0));
    }

    #[test]
    fn the_sighting_with_more_segments_wins() {
        let k = rwnd();
        let out = run(
            vec![message("10.0.0.2:80", "10.0.0.1:40000", 100_000_000)],
            vec![
                evidence("10.0.0.2:80", "10.0.0.1:40000", 0, 0, 3),
                evidence("10.0.0.2:80", "10.0.0.1:40000", 0, 250, 12),
            ],
        );
        assert!((out[0].tcp.unwrap().share(k) - 0.5).abs() < 1e-3);
    }
}
