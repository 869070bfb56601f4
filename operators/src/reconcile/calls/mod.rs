//! The `reconcile.calls` operator (WAP5 §4): socket calls from socket-call logs to
//! [`Message`]s.
//!
//! - **Input**: [`SocketCall`]s (data-carrying calls, their descriptors already resolved to both
//!   endpoints by the socket-log source).
//! - **Outputs**: messages; delay samples for `clock` (a message whose two ends were logged on
//!   hosts with different clocks); per-origin counts of calls whose other end was traced but
//!   never matched (`unpaired`); [`NatFact`]s for connections joined through a destination
//!   NAT (one per message, for `nat.mappings`).
//! - **Exchange**: TCP by the connecting end's address, which both ends share even through a
//!   load balancer's destination NAT; other transports by connection (the unordered pair of
//!   endpoints), so both ends of a connection meet on one worker. There, the two views of a
//!   translated connection (the client's, to the virtual address; the server's, from the
//!   client) are joined into one connection named by the real server (`translate.rs`).
//! - **Rules**: calls are taken in event-time order once the frontier has passed them. On a
//!   stream socket (TCP, UNIX stream) a message is a run of sends by one end with no receive
//!   by that end in between (WAP5's "fat message", §2.3); its bytes are numbered by the
//!   stream offset, which both ends count alike, so the receive time is that of the receive
//!   call that returned the run's first byte, however reads and writes were split. When only
//!   the receiving end was traced, the runs are its receives with no send in between. A
//!   datagram is one message; the two ends meet by payload hash. Nodes are the processes (or
//!   hosts) that made the calls; an end that was not traced is named by its address.
//! - **State**: per connection, the open runs and the runs and receives waiting for the other
//!   end, for at most `window_ns` of event time after a run ends (or after it was last
//!   extended, for a run the sender never ended); a connection with nothing pending is
//!   forgotten when idle for a window, with its translation joins. Calls not yet passed by the
//!   frontier are buffered.
//!   Memory follows the call rate times the window.
//! - **Frontier**: the outputs are held at the event time of the oldest message still to be
//!   reported (`Calls::oldest`), so a message never comes behind them and nothing
//!   downstream waits out the window itself; at most `max_hold_ns` behind the input
//!   frontier (a run open longer comes late downstream).
//! - **Cost**: per call, one hash-map lookup and amortised O(1) queue work; per run, one scan of
//!   the receiver's pending receives (usually a handful).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::Arc;

use causeway_sources::{
    Address, Alignment, Direction, Endpoint, Opener, OriginId, Protocol, SocketCall, SourceEvent,
    SourceStats, Time, Transport,
};
use foldhash::fast::FixedState;
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;

use crate::clock::DelaySample;
use crate::domain::Domain;
use crate::message::{Message, MessageStream};
use crate::names::{Names, NodeName};
use crate::reconcile::merge::NatFact;

/// How long `reconcile.calls` waits for the other end of a message.
#[derive(Clone, Copy, Debug)]
pub struct CallsConfig {
    /// Event time after a run ends until it is reported without its other end. Must cover the
    /// network latency plus the clock error between traced hosts.
    pub window_ns: Time,
    /// A run of sends not yet ended by a receive is ended after this much idle event time.
    pub idle_ns: Time,
    /// How far behind the input frontier the outputs may be held (see the module's
    /// **Frontier**): a run open longer (a stream written for minutes without a reply)
    /// leaves that much behind the frontier, late downstream, rather than holding the whole
    /// pipeline back as long as it lasts.
    pub max_hold_ns: Time,
}

impl Default for CallsConfig {
    fn default() -> Self {
        CallsConfig {
            window_ns: 1_000_000_000,
            idle_ns: 1_000_000_000,
            max_hold_ns: 5_000_000_000,
        }
    }
}

/// The outputs of [`ReconcileCalls::reconcile_calls`].
pub struct CallMessages<'scope> {
    /// One message per run (stream sockets) or datagram.
    pub messages: MessageStream<'scope>,
    /// Delay samples between the clocks of two traced hosts.
    pub samples: Stream<'scope, Time, Vec<DelaySample>>,
    /// Per-origin `unpaired` counts.
    pub events: Stream<'scope, Time, Vec<SourceEvent>>,
    /// Translations seen on connections joined through a destination NAT, one per message.
    pub facts: Stream<'scope, Time, Vec<NatFact>>,
}

/// Extension trait: reconcile socket calls into messages.
pub trait ReconcileCalls<'scope> {
    /// Pairs the two ends of each message; see the module documentation.
    fn reconcile_calls(
        self,
        config: CallsConfig,
        names: Arc<Names>,
        alignment: Arc<Alignment>,
    ) -> CallMessages<'scope>;
}

mod translate;

use translate::Translations;

/// How calls are spread over workers: TCP by the connecting end's address, which both ends
/// of a connection share even through a destination NAT ([`translate`]); other transports
/// by [`connection_key`].
fn exchange_key(c: &SocketCall) -> u64 {
    if c.transport == Transport::Tcp {
        FixedState::with_seed(0x6361_6c6c).hash_one((c.transport, translate::connector(c)))
    } else {
        connection_key(c)
    }
}

/// The key both ends of a connection share (one view of it: through a NAT, each end has its
/// own).
fn connection_key(c: &SocketCall) -> u64 {
    let (lo, hi) = if c.local <= c.peer {
        (&c.local, &c.peer)
    } else {
        (&c.peer, &c.local)
    };
    FixedState::with_seed(0x6361_6c6c).hash_one((c.transport, lo, hi))
}

/// A run of sends or receives by one end: bytes `start..end` of its direction of the stream.
#[derive(Clone, Debug)]
struct Run {
    start: u64,
    end: u64,
    /// Raw time of its first call.
    first_ns: Time,
    /// Aligned time of its first call.
    first_at: Time,
    /// Aligned time of its last call.
    last_at: Time,
}

/// One receive call: bytes `start..end` of the incoming direction.
#[derive(Clone, Copy, Debug)]
struct Read {
    end: u64,
    ts_ns: Time,
    at: Time,
}

/// A datagram sent or received by one end.
#[derive(Clone, Copy, Debug)]
struct Datagram {
    hash: u64,
    bytes: u64,
    ts_ns: Time,
    at: Time,
}

/// What one end of a connection has done.
#[derive(Debug, Default)]
struct End {
    /// The traced process or host, once a call of this end was seen.
    node: Option<(NodeName, OriginId)>,
    /// Sends not yet ended by a receive.
    sending: Option<Run>,
    /// Ended runs of sends, waiting for the other end's receive time.
    sent: VecDeque<Run>,
    /// Receives not yet ended by a send.
    receiving: Option<Run>,
    /// Ended runs of receives (the messages, if the other end was not traced).
    received: VecDeque<Run>,
    /// Receive calls, by the stream offset of their first byte.
    reads: BTreeMap<u64, Read>,
    /// Datagrams sent, waiting for the other end.
    datagrams_out: VecDeque<Datagram>,
    /// Datagrams received, waiting for the other end.
    datagrams_in: VecDeque<Datagram>,
}

/// One connection: its transport, its two ends and when it was last used.
#[derive(Debug)]
struct Connection {
    transport: Transport,
    /// Each end's address as its own host uses it (through a NAT, the real server's).
    addresses: [Address; 2],
    ends: [End; 2],
    last_at: Time,
    /// For TCP with a known opener: which of `addresses` connected.
    connector: Option<usize>,
    /// Joined through a destination NAT: the accepting end's address as the connecting end
    /// addressed it (the virtual address).
    public: Option<Address>,
    /// The keys of the other views joined to this one.
    aliases: Vec<u64>,
    /// Whether a message of it has been reported.
    reported: bool,
}

impl Connection {
    /// A connection first seen in call `c`.
    fn new(c: &SocketCall, at: Time) -> Self {
        let addresses = if c.local <= c.peer {
            [c.local.clone(), c.peer.clone()]
        } else {
            [c.peer.clone(), c.local.clone()]
        };
        let connector = (c.transport == Transport::Tcp && c.opener != Opener::Unknown)
            .then(|| usize::from(addresses[0] != *translate::connector(c)));
        Connection {
            transport: c.transport,
            addresses,
            ends: [End::default(), End::default()],
            last_at: at,
            connector,
            public: None,
            aliases: Vec::new(),
            reported: false,
        }
    }
}

/// What one round of the operator produced.
#[derive(Default)]
struct Outcome {
    messages: Vec<Box<Message>>,
    samples: Vec<DelaySample>,
    unpaired: HashMap<OriginId, u64>,
    facts: Vec<NatFact>,
}

struct Calls {
    config: CallsConfig,
    names: Arc<Names>,
    alignment: Arc<Alignment>,
    connections: HashMap<u64, Connection>,
    translations: Translations,
    /// Calls the frontier has not passed, by aligned time.
    waiting: BTreeMap<Time, Vec<SocketCall>>,
}

impl Calls {
    fn aligned(&self, c: &SocketCall) -> Time {
        self.alignment.align(c.origin, c.ts_ns)
    }

    /// Takes one call, in event-time order.
    fn take(&mut self, c: SocketCall, at: Time) {
        let view = connection_key(&c);
        let mut key = self.translations.alias(view).unwrap_or(view);
        if !self.connections.contains_key(&key) {
            match self
                .translations
                .join(&c, key, at, self.config.window_ns, &mut self.connections)
            {
                Some(joined) => key = joined,
                None => {
                    let conn = Connection::new(&c, at);
                    if let Some(ci) = conn.connector {
                        self.translations.opened(conn.addresses[ci].clone(), key);
                    }
                    self.connections.insert(key, conn);
                }
            }
        }
        let Some(conn) = self.connections.get_mut(&key) else {
            return;
        };
        conn.last_at = conn.last_at.max(at);
        let me = usize::from(conn.addresses[0] != c.local);
        let end = &mut conn.ends[me];
        if end.node.is_none() {
            end.node = Some((c.node.as_str().into(), c.origin));
        }
        if !c.transport.is_stream() {
            let d = Datagram {
                hash: c.payload_hash,
                bytes: c.bytes,
                ts_ns: c.ts_ns,
                at,
            };
            match c.direction {
                Direction::Send => end.datagrams_out.push_back(d),
                Direction::Recv => end.datagrams_in.push_back(d),
            }
            return;
        }
        if c.bytes == 0 {
            // End of stream or an empty write: nothing moved.
            return;
        }
        let (start, stop) = (c.offset, c.offset.saturating_add(c.bytes));
        let extend = |run: &mut Option<Run>, done: &mut VecDeque<Run>| match run {
            Some(r) if r.end == start => {
                r.end = stop;
                r.last_at = at;
            }
            _ => {
                // A gap in the byte numbering (a call the log missed) starts a new run.
                if let Some(r) = run.take() {
                    done.push_back(r);
                }
                *run = Some(Run {
                    start,
                    end: stop,
                    first_ns: c.ts_ns,
                    first_at: at,
                    last_at: at,
                });
            }
        };
        match c.direction {
            Direction::Send => {
                if let Some(r) = end.receiving.take() {
                    end.received.push_back(r);
                }
                extend(&mut end.sending, &mut end.sent);
            }
            Direction::Recv => {
                if let Some(r) = end.sending.take() {
                    end.sent.push_back(r);
                }
                end.reads.insert(
                    start,
                    Read {
                        end: stop,
                        ts_ns: c.ts_ns,
                        at,
                    },
                );
                extend(&mut end.receiving, &mut end.received);
            }
        }
    }

    /// The earliest event time of a message still to be reported: the first call of the
    /// oldest run or datagram any connection holds (a message's event time is its send's,
    /// else its receive's). Calls not yet taken are behind the input frontier. Costs a pass
    /// over the connections (worked out when the frontier moves).
    fn oldest(&self) -> Option<Time> {
        let run = |r: Option<&Run>| r.map(|r| r.first_at);
        self.connections
            .values()
            .flat_map(|c| c.ends.iter())
            .flat_map(|e| {
                [
                    run(e.sending.as_ref()),
                    run(e.sent.front()),
                    run(e.receiving.as_ref()),
                    run(e.received.front()),
                    e.datagrams_out.front().map(|d| d.at),
                    e.datagrams_in.front().map(|d| d.at),
                ]
            })
            .flatten()
            .min()
    }

    /// Reports what is complete at `now` (everything when `now` is `None`).
    fn settle(&mut self, now: Option<Time>, out: &mut Outcome) {
        let window = self.config.window_ns;
        let idle = self.config.idle_ns;
        let due = |at: Time, after: Time| now.is_none_or(|n| at.saturating_add(after) < n);
        let names = &self.names;
        let translations = &mut self.translations;
        self.connections.retain(|key, conn| {
            for e in &mut conn.ends {
                if e.sending.as_ref().is_some_and(|r| due(r.last_at, idle)) {
                    e.sent.extend(e.sending.take());
                }
                if e.receiving.as_ref().is_some_and(|r| due(r.last_at, idle)) {
                    e.received.extend(e.receiving.take());
                }
            }
            let before = out.messages.len();
            for from in 0..2 {
                let to = 1 - from;
                settle_direction(conn, from, to, &due, window, names, out);
            }
            if out.messages.len() > before {
                conn.reported = true;
                if let (Some(public), Some(ci)) = (&conn.public, conn.connector) {
                    let private = &conn.addresses[1 - ci];
                    let facts = out.messages[before..]
                        .iter()
                        .filter_map(|m| nat_fact(m, private, public));
                    out.facts.extend(facts);
                }
            }
            let quiet = conn.ends.iter().all(|e| {
                e.sending.is_none()
                    && e.receiving.is_none()
                    && e.sent.is_empty()
                    && e.received.is_empty()
                    && e.datagrams_out.is_empty()
                    && e.datagrams_in.is_empty()
            });
            if quiet {
                for e in &mut conn.ends {
                    e.reads.clear();
                }
            }
            let keep = !(quiet && due(conn.last_at, window));
            if !keep {
                translations.forget(*key, conn);
            }
            keep
        });
    }
}

/// The translation that message `m` of a connection joined through a NAT evidences: the
/// connecting end's view, where the accepting end (`private`) was `public`, against the
/// hosts' own.
fn nat_fact(m: &Message, private: &Address, public: &Address) -> Option<NatFact> {
    let endpoint = |a: &Address| match a {
        Address::Endpoint(e) => Some(*e),
        _ => None,
    };
    let (src, dst) = (endpoint(&m.src_endpoint)?, endpoint(&m.dst_endpoint)?);
    let (private, public) = (endpoint(private)?, endpoint(public)?);
    let seen = |e: Endpoint| if e == private { public } else { e };
    Some(NatFact {
        protocol: Protocol::Tcp,
        public: (seen(src), seen(dst)),
        private: (src, dst),
        at: m.event_ns,
    })
}

/// Reports the messages from end `from` to end `to` that are complete.
fn settle_direction(
    conn: &mut Connection,
    from: usize,
    to: usize,
    due: &impl Fn(Time, Time) -> bool,
    window: Time,
    names: &Names,
    out: &mut Outcome,
) {
    let transport = conn.transport;
    let src_address = conn.addresses[from].clone();
    let dst_address = conn.addresses[to].clone();
    let [a, b] = &mut conn.ends;
    let (sender, receiver) = if from == 0 { (a, b) } else { (b, a) };
    let half = |send: Option<(Time, Time)>, recv: Option<(Time, Time)>, bytes: u64| {
        let (src, send_origin) = match &sender.node {
            Some((n, o)) => (n.clone(), Some(*o)),
            None => (names.node_of(&src_address), None),
        };
        let (dst, recv_origin) = match &receiver.node {
            Some((n, o)) => (n.clone(), Some(*o)),
            None => (names.node_of(&dst_address), None),
        };
        let event_ns = send.or(recv).map_or(0, |(_, at)| at);
        Message {
            send_ns: send.map(|(t, _)| t),
            recv_ns: recv.map(|(t, _)| t),
            send_domain: send.and(send_origin).map(Domain::Origin),
            recv_domain: recv.and(recv_origin).map(Domain::Origin),
            send_corrected_ns: None,
            recv_corrected_ns: None,
            src,
            dst,
            src_endpoint: src_address.clone(),
            dst_endpoint: dst_address.clone(),
            bytes: Some(bytes),
            protocol: transport.protocol(),
            kind: None,
            call_id: None,
            origin: send_origin.or(recv_origin).unwrap_or_default(),
            row: None,
            sightings: u32::from(send.is_some()) + u32::from(recv.is_some()),
            tcp: None,
            event_ns,
        }
    };
    let emit = |m: Message, out: &mut Outcome| {
        if let (Some(s), Some(r), Some(Domain::Origin(a)), Some(Domain::Origin(b))) =
            (m.send_ns, m.recv_ns, &m.send_domain, &m.recv_domain)
        {
            if a != b {
                let (lo, hi, forward, delay) = if a < b {
                    (*a, *b, true, r as i64 - s as i64)
                } else {
                    (*b, *a, false, s as i64 - r as i64)
                };
                out.samples.push(DelaySample {
                    a: Domain::Origin(lo),
                    b: Domain::Origin(hi),
                    pair: FixedState::with_seed(0x7061_6972).hash_one((lo, hi)),
                    forward,
                    at: m.event_ns,
                    delay_ns: delay,
                });
            }
        }
        out.messages.push(Box::new(m));
    };
    if !transport.is_stream() {
        while let Some(d) = sender.datagrams_out.front().copied() {
            let hit = receiver
                .datagrams_in
                .iter()
                .position(|r| r.hash == d.hash && r.bytes == d.bytes);
            match hit {
                Some(i) => {
                    let recv = receiver.datagrams_in.remove(i).map(|r| (r.ts_ns, r.at));
                    emit(half(Some((d.ts_ns, d.at)), recv, d.bytes), out);
                }
                None if due(d.at, window) => {
                    if let Some((_, o)) = &receiver.node {
                        *out.unpaired.entry(*o).or_default() += 1;
                    }
                    emit(half(Some((d.ts_ns, d.at)), None, d.bytes), out);
                }
                None => break,
            }
            sender.datagrams_out.pop_front();
        }
        // Datagrams the sender's log does not hold.
        while let Some(r) = receiver.datagrams_in.front().copied() {
            if !due(r.at, window) {
                break;
            }
            if let Some((_, o)) = &sender.node {
                *out.unpaired.entry(*o).or_default() += 1;
            }
            emit(half(None, Some((r.ts_ns, r.at)), r.bytes), out);
            receiver.datagrams_in.pop_front();
        }
        return;
    }
    if sender.node.is_some() {
        // The sender's runs are the messages; the receiver's reads give their receive times.
        while let Some(run) = sender.sent.front() {
            let read = receiver
                .reads
                .range(..=run.start)
                .next_back()
                .filter(|(_, r)| r.end > run.start)
                .map(|(_, r)| *r);
            let recv = match read {
                Some(r) => Some((r.ts_ns, r.at)),
                None if due(run.last_at, window) => {
                    if let Some((_, o)) = &receiver.node {
                        *out.unpaired.entry(*o).or_default() += 1;
                    }
                    None
                }
                None => break,
            };
            let m = half(
                Some((run.first_ns, run.first_at)),
                recv,
                run.end - run.start,
            );
            emit(m, out);
            let start = run.start;
            sender.sent.pop_front();
            // Receives wholly before this run are of earlier messages.
            while let Some((&s, r)) = receiver.reads.first_key_value() {
                if r.end > start {
                    break;
                }
                receiver.reads.remove(&s);
            }
        }
        receiver.received.clear();
    } else {
        // Only the receiving end was traced: its runs of receives are the messages.
        while let Some(run) = receiver.received.front() {
            if !due(run.last_at, window) {
                break;
            }
            let m = half(
                None,
                Some((run.first_ns, run.first_at)),
                run.end - run.start,
            );
            emit(m, out);
            let end = run.end;
            receiver.received.pop_front();
            while let Some((&s, r)) = receiver.reads.first_key_value() {
                if r.end > end {
                    break;
                }
                receiver.reads.remove(&s);
            }
        }
    }
}

impl<'scope> ReconcileCalls<'scope> for Stream<'scope, Time, Vec<SocketCall>> {
    fn reconcile_calls(
        self,
        config: CallsConfig,
        names: Arc<Names>,
        alignment: Arc<Alignment>,
    ) -> CallMessages<'scope> {
        let scope = self.scope();
        let mut builder = OperatorBuilder::new("reconcile.calls".to_owned(), scope);
        let mut input = builder.new_input(self, Exchange::new(exchange_key));
        let (messages_out, messages) = builder.new_output::<Vec<Box<Message>>>();
        let (samples_out, samples) = builder.new_output::<Vec<DelaySample>>();
        let (events_out, events) = builder.new_output::<Vec<SourceEvent>>();
        let (facts_out, facts) = builder.new_output::<Vec<NatFact>>();
        let mut messages_out = OutputBuilder::from(messages_out);
        let mut samples_out = OutputBuilder::from(samples_out);
        let mut events_out = OutputBuilder::from(events_out);
        let mut facts_out = OutputBuilder::from(facts_out);
        builder.build(move |capabilities| {
            let mut caps: Option<Vec<_>> = Some(capabilities);
            let mut state = Calls {
                config,
                names,
                alignment,
                connections: HashMap::new(),
                translations: Translations::default(),
                waiting: BTreeMap::new(),
            };
            // The input frontier the hold was last worked out at, and the hold.
            let mut last_now = None;
            let mut hold = None;
            move |frontiers| {
                input.for_each(|_cap, batch| {
                    for c in batch.drain(..) {
                        let at = state.aligned(&c);
                        state.waiting.entry(at).or_default().push(c);
                    }
                });
                let Some(caps_now) = caps.as_mut() else {
                    return;
                };
                let now = frontiers[0].frontier().iter().next().copied();
                let ready = match now {
                    Some(n) => {
                        let later = state.waiting.split_off(&n);
                        std::mem::replace(&mut state.waiting, later)
                    }
                    None => std::mem::take(&mut state.waiting),
                };
                let mut outcome = Outcome::default();
                for (at, calls) in ready {
                    for c in calls {
                        state.take(c, at);
                    }
                }
                state.settle(now, &mut outcome);
                outcome.messages.sort_by(|a, b| {
                    (a.event_ns, &a.src_endpoint, &a.dst_endpoint).cmp(&(
                        b.event_ns,
                        &b.src_endpoint,
                        &b.dst_endpoint,
                    ))
                });
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
                if !outcome.unpaired.is_empty() {
                    let mut counts: Vec<(OriginId, u64)> = outcome.unpaired.drain().collect();
                    counts.sort();
                    events_out.activate().session(&caps_now[2]).give_iterator(
                        counts.into_iter().map(|(origin, n)| SourceEvent::Stats {
                            origin,
                            stats: Box::new(SourceStats {
                                unpaired: n,
                                ..SourceStats::default()
                            }),
                        }),
                    );
                }
                if !outcome.facts.is_empty() {
                    facts_out
                        .activate()
                        .session(&caps_now[3])
                        .give_iterator(outcome.facts.drain(..));
                }
                // Held at the earliest message still to come, so that nothing downstream
                // waits out the window (or an unended run) itself.
                if now != last_now {
                    last_now = now;
                    hold = state.oldest();
                }
                let max_hold = state.config.max_hold_ns;
                crate::follow_frontier(&mut caps, now.map(|n| crate::hold_at(n, hold, max_hold)));
            }
        });
        CallMessages {
            messages,
            samples,
            events,
            facts,
        }
    }
}

#[cfg(test)]
mod tests;
