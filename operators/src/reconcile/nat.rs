//! Address translation (WAP5 §7.1): mappings learned from `reconcile`'s evidence, and the
//! messages only one side saw rewritten to the hosts' own endpoints.
//!
//! `reconcile` matches the sightings of one message across sniffers by content that NAT does
//! not change (TCP sequence and acknowledgment numbers; UDP payload hash and length) and takes
//! each endpoint from the sniffer nearest that host, so a message seen on both sides of a
//! load balancer already names the real server; where the views differ it emits a
//! [`NatFact`]. Two operators use the facts:
//!
//! - `nat` (every worker): messages and facts, both exchanged by the connection as the
//!   translated side sees it. A message seen on one side only waits `window_ns` for a fact
//!   about its connection, and is then rewritten to the private endpoints (its nodes renamed
//!   accordingly). State: per translated connection, its private endpoints, forgotten
//!   `conn_idle_ns` after its last fact; the waiting messages. The capability is held at
//!   the earliest waiting message's event time, so that none leaves behind the frontier.
//! - `nat.mappings` (worker 0): counts the messages evidencing each (public endpoint, private
//!   endpoint) translation and reports a [`NatMapping`] once it has `min_evidence` (more for
//!   UDP, whose payloads can match by accident), again when the input ends. State: one counter
//!   per translation.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use causeway_sources::{Address, Endpoint, Protocol, Time};
use serde::{Deserialize, Serialize};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::vec::Map;

use crate::conn::{ConnKey, Deadlines};
use crate::message::{Message, MessageStream};
use crate::names::Names;
use crate::reconcile::merge::NatFact;

/// A learned translation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NatMapping {
    /// TCP or UDP.
    pub protocol: Protocol,
    /// The endpoint as the far side (the client) addresses it.
    pub public: Endpoint,
    /// The endpoint as its host uses it.
    pub private: Endpoint,
    /// Messages that evidence it.
    pub observations: u64,
    /// Whether this is the final count (the input has ended).
    pub last: bool,
}

/// How `nat` waits and how much evidence a mapping needs.
#[derive(Clone, Copy, Debug)]
pub struct NatConfig {
    /// How long a one-sided message waits for a fact about its connection.
    pub window_ns: Time,
    /// A translated connection without facts for this long is forgotten.
    pub conn_idle_ns: Time,
    /// Messages needed before a TCP translation is reported.
    pub min_evidence_tcp: u64,
    /// Messages needed before a UDP translation is reported.
    pub min_evidence_udp: u64,
}

impl Default for NatConfig {
    fn default() -> Self {
        NatConfig {
            window_ns: 2_000_000_000,
            conn_idle_ns: 60_000_000_000,
            min_evidence_tcp: 3,
            min_evidence_udp: 8,
        }
    }
}

/// A translated connection: its public view, its private view, and the last fact's time.
type Translation = ((Endpoint, Endpoint), (Endpoint, Endpoint), Time);

fn conn_of(m: &Message) -> Option<ConnKey> {
    match (&m.src_endpoint, &m.dst_endpoint) {
        (Address::Endpoint(a), Address::Endpoint(b)) => Some(ConnKey::between(*a, *b, 0)),
        _ => None,
    }
}

/// The translations a fact implies: (public endpoint, private endpoint).
fn translations(f: &NatFact) -> Vec<(Endpoint, Endpoint)> {
    let mut out = Vec::with_capacity(2);
    if f.public.1 != f.private.1 {
        out.push((f.public.1, f.private.1));
    }
    if f.public.0 != f.private.0 {
        out.push((f.public.0, f.private.0));
    }
    out
}

/// Extension trait: canonicalise messages with translation facts.
pub trait Nat<'scope> {
    /// Rewrites one-sided messages and reports mappings; see the module documentation.
    fn nat(
        self,
        facts: Stream<'scope, Time, Vec<NatFact>>,
        names: Arc<Names>,
        config: NatConfig,
    ) -> (MessageStream<'scope>, Stream<'scope, Time, Vec<NatMapping>>);
}

impl<'scope> Nat<'scope> for MessageStream<'scope> {
    fn nat(
        self,
        facts: Stream<'scope, Time, Vec<NatFact>>,
        names: Arc<Names>,
        config: NatConfig,
    ) -> (MessageStream<'scope>, Stream<'scope, Time, Vec<NatMapping>>) {
        let mappings = facts
            .clone()
            .flat_map(|f| {
                translations(&f)
                    .into_iter()
                    .map(move |(public, private)| (f.protocol, public, private))
            })
            .unary_frontier(
                Exchange::new(|_: &(Protocol, Endpoint, Endpoint)| 0),
                "nat.mappings",
                move |cap, _info| {
                    let mut held = Some(cap);
                    let mut counts: BTreeMap<(Protocol, Endpoint, Endpoint), u64> = BTreeMap::new();
                    move |(input, frontier), output| {
                        let Some(cap) = held.as_mut() else {
                            input.for_each(|_, _| {});
                            return;
                        };
                        let mut reached = Vec::new();
                        input.for_each(|_cap, batch| {
                            for key in batch.drain(..) {
                                let need = match key.0 {
                                    Protocol::Tcp => config.min_evidence_tcp,
                                    Protocol::Udp => config.min_evidence_udp,
                                };
                                let c = counts.entry(key).or_default();
                                *c += 1;
                                if *c == need {
                                    reached.push(NatMapping {
                                        protocol: key.0,
                                        public: key.1,
                                        private: key.2,
                                        observations: *c,
                                        last: false,
                                    });
                                }
                            }
                        });
                        if !reached.is_empty() {
                            output.session(&*cap).give_iterator(reached.into_iter());
                        }
                        match frontier.frontier().iter().next() {
                            Some(t) if *t > *cap.time() => cap.downgrade(t),
                            Some(_) => {}
                            None => {
                                let finals: Vec<NatMapping> = counts
                                    .iter()
                                    .filter(|(k, c)| {
                                        **c >= if k.0 == Protocol::Tcp {
                                            config.min_evidence_tcp
                                        } else {
                                            config.min_evidence_udp
                                        }
                                    })
                                    .map(|(k, c)| NatMapping {
                                        protocol: k.0,
                                        public: k.1,
                                        private: k.2,
                                        observations: *c,
                                        last: true,
                                    })
                                    .collect();
                                output.session(&*cap).give_iterator(finals.into_iter());
                                held = None;
                            }
                        }
                    }
                },
            );
        let messages = self.binary_frontier(
            facts,
            // The stream's items are boxed messages.
            #[allow(clippy::borrowed_box)]
            Exchange::new(|m: &Box<Message>| conn_of(m).map_or(0, |k| k.route())),
            Exchange::new(|f: &NatFact| ConnKey::between(f.public.0, f.public.1, 0).route()),
            "nat",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut known: HashMap<ConnKey, Translation> = HashMap::new();
                let mut forget: Deadlines<ConnKey> = Deadlines::default();
                let mut waiting: BTreeMap<Time, Vec<Box<Message>>> = BTreeMap::new();
                let mut ready: Vec<Box<Message>> = Vec::new();
                move |(messages, frontier), (facts, facts_frontier), output| {
                    facts.for_each(|_cap, batch| {
                        for f in batch.drain(..) {
                            let key = ConnKey::between(f.public.0, f.public.1, 0);
                            let e = known.entry(key).or_insert((f.public, f.private, f.at));
                            e.2 = e.2.max(f.at);
                            forget.schedule(key, f.at.saturating_add(config.conn_idle_ns));
                        }
                    });
                    messages.for_each(|_cap, batch| {
                        for m in batch.drain(..) {
                            let one_sided = m.send_ns.is_none() || m.recv_ns.is_none();
                            if one_sided && conn_of(&m).is_some() {
                                waiting
                                    .entry(m.event_ns.saturating_add(config.window_ns))
                                    .or_default()
                                    .push(m);
                            } else {
                                ready.push(m);
                            }
                        }
                    });
                    let Some(cap) = held.as_mut() else { return };
                    let now = [
                        frontier.frontier().iter().next().copied(),
                        facts_frontier.frontier().iter().next().copied(),
                    ]
                    .into_iter()
                    .flatten()
                    .min();
                    while let Some(entry) = waiting.first_entry() {
                        if now.is_some_and(|n| *entry.key() >= n) {
                            break;
                        }
                        for mut m in entry.remove() {
                            let translation = conn_of(&m).and_then(|k| known.get(&k));
                            if let (
                                Some((public, private, _)),
                                Address::Endpoint(s),
                                Address::Endpoint(d),
                            ) = (translation, &m.src_endpoint, &m.dst_endpoint)
                            {
                                let rewritten = if (*s, *d) == *public {
                                    Some(*private)
                                } else if (*d, *s) == *public {
                                    Some((private.1, private.0))
                                } else {
                                    None
                                };
                                if let Some((s, d)) = rewritten {
                                    m.src = names.node_of_endpoint(&s);
                                    m.dst = names.node_of_endpoint(&d);
                                    m.src_endpoint = Address::Endpoint(s);
                                    m.dst_endpoint = Address::Endpoint(d);
                                }
                            }
                            ready.push(m);
                        }
                    }
                    if let Some(n) = now {
                        for key in forget.due(n) {
                            if known
                                .get(&key)
                                .is_some_and(|e| e.2.saturating_add(config.conn_idle_ns) < n)
                            {
                                known.remove(&key);
                            }
                        }
                    }
                    if !ready.is_empty() {
                        output.session(&*cap).give_iterator(ready.drain(..));
                    }
                    // Held at the earliest message still waiting for a fact, so that
                    // nothing downstream waits out the window itself.
                    let first_waiting = waiting
                        .first_key_value()
                        .map(|(t, _)| t.saturating_sub(config.window_ns));
                    let lowest = match (now, first_waiting) {
                        (Some(n), w) => Some(w.map_or(n, |w| w.min(n))),
                        (None, w) => w,
                    };
                    match lowest {
                        Some(t) if t > *cap.time() => cap.downgrade(&t),
                        Some(_) => {}
                        None => held = None,
                    }
                }
            },
        );
        (messages, mappings)
    }
}
