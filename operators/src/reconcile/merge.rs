//! The `reconcile` operator: [`Sighting`]s from every sniffer to [`Message`]s.
//!
//! - **Input**: sightings.
//! - **Outputs**: messages; delay samples between clock domains for `clock`; translation
//!   evidence for `nat`; per-origin counts (`unpaired`, `late_sightings`) for `stats`.
//! - **Exchange**: by content key, so that every sniffer's sighting of a message meets on one
//!   worker.
//! - **Rules**: a message's sightings are those with its key whose addresses agree on at least
//!   one side (address translation rewrites one side per hop; two unrelated datagrams with the
//!   same payload do not merge). The send timestamp comes from the sniffer nearest the sender
//!   ([`Homes`]): the sender's host sniffer, else a segment sniffer that saw it; the receive
//!   timestamp likewise from the receiver's side. Where a host has no sniffer at all, a
//!   sighting on the path (a transit sniffer) stands in. Each endpoint is taken as its own
//!   host sees it (so the message names the server behind a load balancer, not the virtual
//!   address). A message its sender's or receiver's host sniffer missed is counted as
//!   `unpaired` for that sniffer.
//! - **State**: the sightings of each message for `window_ns` of event time after its first
//!   sighting, then the keys of finished messages for another window (to count late
//!   sightings). Freed when the frontier passes; memory follows the message rate times the
//!   window.
//! - **Capability**: every output's is held at the earliest sighting still waiting (else the
//!   input frontier): a message, sample or fact is never behind the output frontier (but for
//!   sightings that came late), so nothing downstream waits out the window again.
//! - **Cost**: one hash-map update per sighting; per message, grouping near-linear in its
//!   sightings (union-find over shared sources and destinations) and a sort of each group.
//!   Sightings that share a key are not yet capped per key (issue 45).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::Arc;

use causeway_sources::{
    Address, Alignment, Endpoint, OriginId, Protocol, SourceEvent, SourceStats, Time,
};
use foldhash::fast::FixedState;
use serde::{Deserialize, Serialize};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;

use super::Sighting;
use crate::clock::DelaySample;
use crate::conn::Deadlines;
use crate::domain::Domain;
use crate::message::{Message, MessageStream};
use crate::min_times::MinTimes;
use crate::names::{Names, NodeCache};
use crate::reconcile::topology::Homes;

/// How long `reconcile` waits for a message's sightings.
#[derive(Clone, Copy, Debug)]
pub struct ReconcileConfig {
    /// Event time after a message's first sighting until it is complete. Must cover the
    /// network latency between sniffers and what is left of their clock offsets after the
    /// coarse alignment.
    pub window_ns: Time,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        ReconcileConfig {
            window_ns: 2_000_000_000,
        }
    }
}

/// Evidence of address translation: one sniffer saw a message between `public`, while the
/// hosts themselves use `private`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NatFact {
    /// TCP or UDP.
    pub protocol: Protocol,
    /// Source and destination as the sniffer on the translated side saw them.
    pub public: (Endpoint, Endpoint),
    /// Source and destination as the sender and receiver use them.
    pub private: (Endpoint, Endpoint),
    /// Event time of the message.
    pub at: Time,
}

/// Everything one message yields.
#[derive(Default)]
struct Outcome {
    messages: Vec<Box<Message>>,
    samples: Vec<DelaySample>,
    facts: Vec<NatFact>,
    counts: HashMap<OriginId, SourceStats>,
}

/// Builds messages from groups of sightings.
pub struct Merger {
    alignment: Arc<Alignment>,
    homes: Arc<Homes>,
    names: Arc<Names>,
    nodes: NodeCache,
}

fn label_pair(a: &IpAddr, b: &IpAddr) -> (u64, bool) {
    let (lo, hi, forward) = if a <= b { (a, b, true) } else { (b, a, false) };
    (
        FixedState::with_seed(0x7061_6972).hash_one((lo, hi)),
        forward,
    )
}

impl Merger {
    /// A merger using these clock offsets, sniffer placements and node names.
    pub fn new(alignment: Arc<Alignment>, homes: Arc<Homes>, names: Arc<Names>) -> Self {
        Merger {
            alignment,
            homes,
            names,
            nodes: NodeCache::default(),
        }
    }

    fn aligned(&self, s: &Sighting, t: Time) -> Time {
        self.alignment.align(s.origin, t)
    }

    /// Turns the sightings of one key into messages (usually one).
    fn finish(&mut self, mut sightings: Vec<Sighting>, out: &mut Outcome) {
        // Connected groups: sightings agreeing on at least one side. Each sighting is joined
        // to the first with its source and to the first with its destination (union-find:
        // near-linear in the sightings, however many share the key).
        let n = sightings.len();
        let mut parent: Vec<usize> = (0..n).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        let mut first_src: HashMap<Endpoint, usize> = HashMap::with_capacity(n);
        let mut first_dst: HashMap<Endpoint, usize> = HashMap::with_capacity(n);
        for (i, s) in sightings.iter().enumerate() {
            for j in [
                *first_src.entry(s.src).or_insert(i),
                *first_dst.entry(s.dst).or_insert(i),
            ] {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                if a != b {
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
        let group: Vec<usize> = (0..n).map(|i| root(&mut parent, i)).collect();
        let mut groups: HashMap<usize, Vec<Sighting>> = HashMap::new();
        for (s, g) in sightings.drain(..).zip(group) {
            groups.entry(g).or_default().push(s);
        }
        let mut groups: Vec<Vec<Sighting>> = groups.into_values().collect();
        groups.sort();
        for g in groups {
            self.one(g, out);
        }
    }

    fn one(&mut self, mut sightings: Vec<Sighting>, out: &mut Outcome) {
        // One sighting per sniffer and view (a pcapng with two interfaces may see a packet twice).
        sightings.sort_by_key(|s| (s.origin, s.src, s.dst, s.first_ns));
        sightings.dedup_by(|a, b| a.origin == b.origin && a.src == b.src && a.dst == b.dst);
        let homes = &self.homes;
        let send = sightings
            .iter()
            .filter(|s| homes.is_home(s.origin, &s.src.ip))
            .min_by_key(|s| (std::cmp::Reverse(s.ttl), self.aligned(s, s.first_ns)));
        let recv = sightings
            .iter()
            .filter(|s| homes.is_home(s.origin, &s.dst.ip))
            .max_by_key(|s| (std::cmp::Reverse(s.ttl), self.aligned(s, s.last_ns)));
        // On the path: a sighting that is nobody's home (a transit sniffer).
        let upstream = sightings
            .iter()
            .min_by_key(|s| (std::cmp::Reverse(s.ttl), self.aligned(s, s.first_ns)));
        let downstream = sightings
            .iter()
            .max_by_key(|s| (std::cmp::Reverse(s.ttl), self.aligned(s, s.last_ns)));
        let (Some(up), Some(down)) = (upstream, downstream) else {
            return;
        };
        let src_sniffed = !homes.host_sniffers(&up.src.ip).is_empty();
        let dst_sniffed = !homes.host_sniffers(&down.dst.ip).is_empty();
        let on_path = |s: &&Sighting| {
            !homes.is_home(s.origin, &s.src.ip) && !homes.is_home(s.origin, &s.dst.ip)
        };
        let send = send.or_else(|| {
            if src_sniffed {
                None
            } else {
                Some(up).filter(on_path)
            }
        });
        let recv = recv.or_else(|| {
            if dst_sniffed {
                None
            } else {
                Some(down).filter(on_path)
            }
        });
        let src = send.unwrap_or(up).src;
        let dst = recv.unwrap_or(down).dst;
        for (sniffed, seen, ip) in [
            (src_sniffed, send.is_some(), src.ip),
            (dst_sniffed, recv.is_some(), dst.ip),
        ] {
            if sniffed && !seen {
                if let Some(o) = homes.host_sniffers(&ip).first() {
                    out.counts.entry(*o).or_default().unpaired += 1;
                }
            }
        }
        let event = send
            .map(|s| self.aligned(s, s.first_ns))
            .or_else(|| recv.map(|s| self.aligned(s, s.last_ns)))
            .unwrap_or_else(|| self.aligned(up, up.first_ns));
        let origin = send.or(recv).unwrap_or(up).origin;
        let protocol = up.protocol;
        out.messages.push(Box::new(Message {
            send_ns: send.map(|s| s.first_ns),
            recv_ns: recv.map(|s| s.last_ns),
            send_domain: send.map(|s| Domain::Origin(s.origin)),
            recv_domain: recv.map(|s| Domain::Origin(s.origin)),
            send_corrected_ns: None,
            recv_corrected_ns: None,
            src: self.nodes.node_of_endpoint(&self.names, &src),
            dst: self.nodes.node_of_endpoint(&self.names, &dst),
            src_endpoint: Address::Endpoint(src),
            dst_endpoint: Address::Endpoint(dst),
            bytes: sightings.iter().map(|s| s.bytes).max(),
            protocol: Some(protocol),
            kind: None,
            call_id: None,
            origin,
            row: None,
            sightings: {
                let mut o: Vec<OriginId> = sightings.iter().map(|s| s.origin).collect();
                o.dedup();
                o.len() as u32
            },
            tcp: None,
            event_ns: event,
        }));
        // Delay samples: first-segment times of one packet at two sniffers.
        let mut firsts: Vec<&Sighting> = sightings.iter().filter(|s| s.whole_start).collect();
        firsts.sort_by_key(|s| (s.origin, s.first_ns));
        firsts.dedup_by_key(|s| s.origin);
        let (pair, forward) = label_pair(&src.ip, &dst.ip);
        for i in 0..firsts.len() {
            for j in i + 1..firsts.len() {
                let (a, b) = (firsts[i], firsts[j]);
                out.samples.push(DelaySample {
                    a: Domain::Origin(a.origin),
                    b: Domain::Origin(b.origin),
                    pair,
                    forward,
                    at: event,
                    delay_ns: b.first_ns as i64 - a.first_ns as i64,
                });
            }
        }
        // Translation evidence: views that differ from the hosts' own.
        let mut views: Vec<(Endpoint, Endpoint)> = sightings
            .iter()
            .map(|s| (s.src, s.dst))
            .filter(|v| *v != (src, dst))
            .collect();
        views.sort();
        views.dedup();
        for public in views {
            out.facts.push(NatFact {
                protocol,
                public,
                private: (src, dst),
                at: event,
            });
        }
    }
}

/// The streams `reconcile` produces.
pub struct Reconciled<'scope> {
    /// Messages.
    pub messages: MessageStream<'scope>,
    /// Delay samples between clock domains.
    pub samples: Stream<'scope, Time, Vec<DelaySample>>,
    /// Translation evidence.
    pub facts: Stream<'scope, Time, Vec<NatFact>>,
    /// Per-origin counts.
    pub events: Stream<'scope, Time, Vec<SourceEvent>>,
}

struct Group {
    sightings: Vec<Sighting>,
    due: Time,
    /// The earliest event time among the sightings: where the capability is held while the
    /// group waits.
    first: Time,
}

/// Extension trait: reconcile sightings into messages.
pub trait Reconcile<'scope> {
    /// Merges sightings; see the module documentation.
    fn reconcile(self, config: ReconcileConfig, merger: Merger) -> Reconciled<'scope>;
}

impl<'scope> Reconcile<'scope> for Stream<'scope, Time, Vec<Sighting>> {
    fn reconcile(self, config: ReconcileConfig, mut merger: Merger) -> Reconciled<'scope> {
        let scope = self.scope();
        let mut builder = OperatorBuilder::new("reconcile".to_owned(), scope);
        let mut input = builder.new_input(self, Exchange::new(|s: &Sighting| s.key));
        let (messages_out, messages) = builder.new_output::<Vec<Box<Message>>>();
        let (samples_out, samples) = builder.new_output::<Vec<DelaySample>>();
        let (facts_out, facts) = builder.new_output::<Vec<NatFact>>();
        let (events_out, events) = builder.new_output::<Vec<SourceEvent>>();
        let mut messages_out = OutputBuilder::from(messages_out);
        let mut samples_out = OutputBuilder::from(samples_out);
        let mut facts_out = OutputBuilder::from(facts_out);
        let mut events_out = OutputBuilder::from(events_out);
        builder.build(move |capabilities| {
            let mut caps: Option<Vec<_>> = Some(capabilities);
            let mut open: HashMap<u64, Group> = HashMap::new();
            let mut done: HashMap<u64, Time> = HashMap::new();
            let mut open_due: Deadlines<u64> = Deadlines::default();
            let mut waiting = MinTimes::default();
            let mut done_due: Deadlines<u64> = Deadlines::default();
            let mut late: HashMap<OriginId, SourceStats> = HashMap::new();
            move |frontiers| {
                input.for_each(|_cap, batch| {
                    for s in batch.drain(..) {
                        if done.contains_key(&s.key) {
                            late.entry(s.origin).or_default().late_sightings += 1;
                            continue;
                        }
                        let first = merger.aligned(&s, s.first_ns);
                        let due = first.saturating_add(config.window_ns);
                        let g = open.entry(s.key).or_insert_with(|| {
                            waiting.insert(first);
                            Group {
                                // Most messages are seen by two sniffers (sender's and
                                // receiver's host): room for two, not the four of a
                                // first push.
                                sightings: Vec::with_capacity(2),
                                due,
                                first,
                            }
                        });
                        if first < g.first {
                            waiting.remove(g.first);
                            waiting.insert(first);
                            g.first = first;
                        }
                        if g.sightings.is_empty() || due > g.due {
                            g.due = g.due.max(due);
                            open_due.schedule(s.key, g.due);
                        }
                        g.sightings.push(s);
                    }
                });
                let Some(caps_now) = caps.as_mut() else {
                    return;
                };
                let now = frontiers[0].frontier().iter().next().copied();
                let mut outcome = Outcome::default();
                let ready: Vec<u64> = match now {
                    Some(now) => open_due
                        .due(now)
                        .into_iter()
                        .filter(|k| open.get(k).is_some_and(|g| g.due < now))
                        .collect(),
                    None => open.keys().copied().collect(),
                };
                let mut ready = ready;
                ready.sort_unstable();
                ready.dedup();
                for key in ready {
                    if let Some(g) = open.remove(&key) {
                        waiting.remove(g.first);
                        let forget = g.due.saturating_add(config.window_ns);
                        merger.finish(g.sightings, &mut outcome);
                        if now.is_some() {
                            done.insert(key, forget);
                            done_due.schedule(key, forget);
                        }
                    }
                }
                if let Some(now) = now {
                    for key in done_due.due(now) {
                        if done.get(&key).is_some_and(|t| *t < now) {
                            done.remove(&key);
                        }
                    }
                }
                for (origin, stats) in late.drain() {
                    outcome.counts.entry(origin).or_default().merge(&stats);
                }
                // Messages in event-time order, for readable output.
                outcome
                    .messages
                    .sort_by_key(|m| (m.event_ns, m.src_endpoint.clone(), m.dst_endpoint.clone()));
                if !outcome.messages.is_empty() {
                    messages_out
                        .activate()
                        .session(&caps_now[0])
                        .give_iterator(outcome.messages.drain(..));
                }
                if !outcome.samples.is_empty() {
                    samples_out
                        .activate()
                        .session(&caps_now[1])
                        .give_iterator(outcome.samples.drain(..));
                }
                if !outcome.facts.is_empty() {
                    facts_out
                        .activate()
                        .session(&caps_now[2])
                        .give_iterator(outcome.facts.drain(..));
                }
                if !outcome.counts.is_empty() {
                    let mut counts: Vec<(OriginId, SourceStats)> = outcome.counts.drain().collect();
                    counts.sort_by_key(|(o, _)| *o);
                    events_out.activate().session(&caps_now[3]).give_iterator(
                        counts
                            .into_iter()
                            .map(|(origin, stats)| SourceEvent::Stats {
                                origin,
                                stats: Box::new(stats),
                            }),
                    );
                }
                // Held at the earliest sighting still waiting, so that nothing downstream
                // waits out the window (or the deadlines' granularity) itself.
                crate::follow_frontier(
                    &mut caps,
                    now.map(|n| waiting.min().map_or(n, |w| w.min(n))),
                );
            }
        });
        Reconciled {
            messages,
            samples,
            facts,
            events,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::topology::Placement;
    use std::collections::BTreeSet;

    fn sighting(origin: u16, src: &str, dst: &str, first: Time, ttl: u8) -> Sighting {
        Sighting {
            key: 7,
            origin: OriginId(origin),
            protocol: Protocol::Tcp,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            first_ns: first,
            last_ns: first + 10,
            bytes: 100,
            ttl,
            whole_start: true,
            segments: 1,
            retransmitted: 0,
        }
    }

    fn homes(pairs: &[(u16, &str)], transit: &[u16]) -> Arc<Homes> {
        let mut h = Homes::none();
        for (o, ip) in pairs {
            h.set(
                OriginId(*o),
                Placement::Host(BTreeSet::from([ip.parse().unwrap()])),
            );
        }
        for o in transit {
            h.set(OriginId(*o), Placement::Transit);
        }
        Arc::new(h)
    }

    #[test]
    fn load_balanced_message_takes_each_side_from_its_own_host() {
        // client 10.0.0.9 -> VIP 10.0.100.1:80 -> replica 10.0.0.11:80; sniffers on the
        // client (0), on the balancer (1, both legs) and on the replica (2), clocks apart.
        let mut m = Merger::new(
            Arc::new(Alignment::none()),
            homes(&[(0, "10.0.0.9"), (2, "10.0.0.11")], &[1]),
            Arc::new(Names::new()),
        );
        let mut out = Outcome::default();
        m.finish(
            vec![
                sighting(0, "10.0.0.9:4000", "10.0.100.1:80", 1_000, 64),
                sighting(1, "10.0.0.9:4000", "10.0.100.1:80", 5_000_050, 64),
                sighting(1, "10.0.0.9:4000", "10.0.0.11:80", 5_000_070, 63),
                sighting(2, "10.0.0.9:4000", "10.0.0.11:80", 9_000_100, 63),
            ],
            &mut out,
        );
        assert_eq!(out.messages.len(), 1);
        let msg = &out.messages[0];
        assert_eq!(msg.dst_endpoint.to_string(), "10.0.0.11:80");
        assert_eq!((msg.send_ns, msg.recv_ns), (Some(1_000), Some(9_000_110)));
        assert_eq!(msg.send_domain, Some(Domain::Origin(OriginId(0))));
        assert_eq!(msg.sightings, 3);
        assert_eq!(out.facts.len(), 1);
        assert_eq!(out.facts[0].public.1.to_string(), "10.0.100.1:80");
        assert_eq!(out.samples.len(), 3, "three sniffers, three pairs");
        assert!(out.counts.is_empty());
    }

    #[test]
    fn a_missed_side_is_absent_and_counted_and_unrelated_datagrams_do_not_merge() {
        let mut m = Merger::new(
            Arc::new(Alignment::none()),
            homes(&[(0, "10.0.0.1"), (1, "10.0.0.2")], &[]),
            Arc::new(Names::new()),
        );
        let mut out = Outcome::default();
        m.finish(
            vec![sighting(1, "10.0.0.1:4000", "10.0.0.2:80", 50, 64)],
            &mut out,
        );
        assert_eq!(
            (out.messages[0].send_ns, out.messages[0].recv_ns),
            (None, Some(60))
        );
        assert_eq!(out.counts[&OriginId(0)].unpaired, 1);
        let mut out = Outcome::default();
        m.finish(
            vec![
                sighting(0, "10.0.0.1:4000", "10.0.0.2:53", 50, 64),
                sighting(0, "10.0.0.3:5000", "10.0.0.4:53", 60, 64),
            ],
            &mut out,
        );
        assert_eq!(out.messages.len(), 2);
        assert!(out.facts.is_empty());
    }

    #[test]
    fn sightings_join_through_a_chain_of_shared_sides_and_thousands_of_strangers_stay_apart() {
        let mut m = Merger::new(
            Arc::new(Alignment::none()),
            homes(&[(0, "10.0.0.1")], &[1, 2]),
            Arc::new(Names::new()),
        );
        // a and c share no side, but b shares its source with a and its destination with c.
        let mut sightings = vec![
            sighting(0, "10.0.0.1:4000", "10.0.100.1:80", 100, 64),
            sighting(1, "10.0.0.1:4000", "10.0.0.11:80", 110, 63),
            sighting(2, "10.9.9.9:4000", "10.0.0.11:80", 120, 62),
        ];
        // The same payload from 3,000 other hosts to 3,000 others (heartbeats).
        for i in 0..3_000u32 {
            let (a, b) = (i / 250, i % 250);
            sightings.push(sighting(
                0,
                &format!("10.1.{a}.{b}:5000"),
                &format!("10.2.{a}.{b}:53"),
                200 + u64::from(i),
                64,
            ));
        }
        let mut out = Outcome::default();
        m.finish(sightings, &mut out);
        assert_eq!(out.messages.len(), 3_001);
        assert_eq!(
            out.messages.iter().map(|m| m.sightings).max(),
            Some(3),
            "the chain is one message"
        );
    }
}
