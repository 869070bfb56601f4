//! The `flows` operator: per-connection summaries, as tshark's conversation statistics give.
//!
//! - **Input**: packets, and each origin's latest packet time (broadcast).
//! - **Output**: one [`Flow`] per conversation (origin, protocol, endpoint pair) when it ends:
//!   after a TCP close (both FINs, or a RST) once the frontier passes its last packet plus
//!   `close_linger_ns`; after `idle_timeout_ns` without packets; or at the end of the input,
//!   marked `open`. A conversation that resumes after being emitted starts a new record. The
//!   records depend on event time only (see [`FlowTable`]), not on workers or batching.
//! - **Exchange**: by a hash of the conversation key, so both directions meet on one worker.
//! - **State**: one entry per live conversation plus a deadline queue; an entry is freed when
//!   the frontier passes its deadline, so memory follows the number of concurrent
//!   conversations, not the length of the run.
//! - **Cost**: one hash-map update per packet; one queue operation per conversation per idle
//!   period.
//!
//! ```
//! use causeway_operators::{FlowConfig, FlowEnd, Flows};
//! use causeway_sources::{OriginId, Packet, Protocol, TcpFields, TcpFlags};
//! use timely::dataflow::operators::capture::Extract;
//! use timely::dataflow::operators::{Capture, ToStream};
//!
//! let packet = |ts, src: &str, dst: &str, flags| Packet {
//!     ts_ns: ts,
//!     origin: OriginId(0),
//!     src: src.parse().unwrap(),
//!     dst: dst.parse().unwrap(),
//!     protocol: Protocol::Tcp,
//!     ttl: 64,
//!     ip_id: 0,
//!     tcp: Some(TcpFields { seq: 0, ack: 0, flags: TcpFlags(flags), window: 0, window_scale: None }),
//!     payload_len: 0,
//!     payload_hash: 0,
//!     payload_truncated: false,
//!     wire_len: 60,
//! };
//! let packets = vec![
//!     packet(1, "10.0.0.1:4000", "10.0.0.2:80", TcpFlags::SYN),
//!     packet(2, "10.0.0.2:80", "10.0.0.1:4000", TcpFlags::SYN | TcpFlags::ACK),
//!     packet(3, "10.0.0.1:4000", "10.0.0.2:80", TcpFlags::FIN | TcpFlags::ACK),
//!     packet(4, "10.0.0.2:80", "10.0.0.1:4000", TcpFlags::FIN | TcpFlags::ACK),
//! ];
//! let captured = timely::example(move |scope| {
//!     let ends = vec![(OriginId(0), 4u64)].to_stream(scope).container::<Vec<_>>();
//!     packets.to_stream(scope).container::<Vec<_>>().flows(ends, FlowConfig::default(), Default::default()).capture()
//! });
//! let flows: Vec<_> = captured.extract().into_iter().flat_map(|(_, f)| f).collect();
//! assert_eq!(flows.len(), 1);
//! assert_eq!((flows[0].packets, flows[0].end), ([2, 2], FlowEnd::Closed));
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use crate::conn::{ConnKey, ConnTable, Deadlines};

use causeway_sources::{Alignment, Endpoint, OriginId, Packet, Protocol, TcpFlags, Time};
use serde::{Deserialize, Serialize};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::generic::Operator;

/// How a conversation's record came to be emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum FlowEnd {
    /// Both sides sent FIN.
    Closed,
    /// A RST ended it.
    Reset,
    /// No packets for the idle timeout.
    Idle,
    /// Still going when the input ended.
    Open,
}

impl FlowEnd {
    /// Lower-case name for output.
    pub fn as_str(self) -> &'static str {
        match self {
            FlowEnd::Closed => "closed",
            FlowEnd::Reset => "reset",
            FlowEnd::Idle => "idle",
            FlowEnd::Open => "open",
        }
    }
}

/// A conversation summary. Direction 0 is client to server: the client is the side that sent
/// the first SYN, or failing that the side with the higher port (the usual ephemeral side).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Flow {
    /// The sniffer that saw it.
    pub origin: OriginId,
    /// TCP or UDP.
    pub protocol: Protocol,
    /// The initiating side.
    pub client: Endpoint,
    /// The accepting side.
    pub server: Endpoint,
    /// First packet time.
    pub start_ns: Time,
    /// Last packet time.
    pub end_ns: Time,
    /// Packets client to server, server to client.
    pub packets: [u64; 2],
    /// Wire bytes in each direction.
    pub bytes: [u64; 2],
    /// Transport payload bytes in each direction (retransmissions included).
    pub payload_bytes: [u64; 2],
    /// Whether the capture saw the connection open (TCP SYN).
    pub saw_open: bool,
    /// How the record ended.
    pub end: FlowEnd,
}

/// Timeouts of the `flows` operator.
#[derive(Clone, Copy, Debug)]
pub struct FlowConfig {
    /// A conversation with no packets for this long is emitted as idle.
    pub idle_timeout_ns: Time,
    /// A closed conversation is emitted once the frontier is this far past its last packet.
    pub close_linger_ns: Time,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            idle_timeout_ns: 60_000_000_000,
            close_linger_ns: 1_000_000_000,
        }
    }
}

struct State {
    flow: Flow,
    fin: [bool; 2],
}

impl State {
    fn new(p: &Packet) -> State {
        let flags = p.tcp.map(|t| t.flags).unwrap_or_default();
        let client_is_src = if flags.has(TcpFlags::SYN) {
            !flags.has(TcpFlags::ACK)
        } else {
            p.src.port >= p.dst.port
        };
        let (client, server) = if client_is_src {
            (p.src, p.dst)
        } else {
            (p.dst, p.src)
        };
        State {
            flow: Flow {
                origin: p.origin,
                protocol: p.protocol,
                client,
                server,
                start_ns: p.ts_ns,
                end_ns: p.ts_ns,
                packets: [0; 2],
                bytes: [0; 2],
                payload_bytes: [0; 2],
                saw_open: flags.has(TcpFlags::SYN),
                end: FlowEnd::Open,
            },
            fin: [false; 2],
        }
    }

    #[inline]
    fn add(&mut self, p: &Packet) {
        let d = usize::from(p.src != self.flow.client);
        let f = &mut self.flow;
        f.packets[d] += 1;
        f.bytes[d] += p.wire_len as u64;
        f.payload_bytes[d] += p.payload_len as u64;
        f.start_ns = f.start_ns.min(p.ts_ns);
        f.end_ns = f.end_ns.max(p.ts_ns);
        if let Some(t) = p.tcp {
            if t.flags.has(TcpFlags::FIN) {
                self.fin[d] = true;
                if self.fin == [true; 2] {
                    f.end = FlowEnd::Closed;
                }
            }
            if t.flags.has(TcpFlags::RST) {
                f.end = FlowEnd::Reset;
            }
        }
    }

    /// Whether `p` starts a new conversation on this key: it comes more than the idle timeout
    /// after the last packet, or it is a SYN after the conversation closed.
    fn ends_before(&self, p: &Packet, config: &FlowConfig) -> bool {
        if p.ts_ns > self.flow.end_ns.saturating_add(config.idle_timeout_ns) {
            return true;
        }
        let syn = p
            .tcp
            .is_some_and(|t| t.flags.has(TcpFlags::SYN) && !t.flags.has(TcpFlags::ACK));
        syn && matches!(self.flow.end, FlowEnd::Closed | FlowEnd::Reset)
    }

    fn deadline(&self, config: &FlowConfig) -> Time {
        match self.flow.end {
            FlowEnd::Closed | FlowEnd::Reset => {
                self.flow.end_ns.saturating_add(config.close_linger_ns)
            }
            FlowEnd::Idle | FlowEnd::Open => {
                self.flow.end_ns.saturating_add(config.idle_timeout_ns)
            }
        }
    }
}

/// The conversations a worker tracks, with their deadlines.
///
/// Splitting follows event time only, so that the records do not depend on batching or on how
/// inputs are spread over workers: a packet more than the idle timeout after its
/// conversation's last one ends the old record (idle) and starts a new one, as does a SYN on a
/// closed conversation; at the end of the input a conversation counts as idle when its origin's
/// last packet is past its deadline.
pub struct FlowTable {
    config: FlowConfig,
    alignment: Arc<Alignment>,
    table: ConnTable<State>,
    deadlines: Deadlines<ConnKey>,
}

impl FlowTable {
    /// An empty table; `alignment` maps each origin's times to event time.
    pub fn new(config: FlowConfig, alignment: Arc<Alignment>) -> Self {
        FlowTable {
            config,
            alignment,
            table: ConnTable::default(),
            deadlines: Deadlines::default(),
        }
    }

    /// A conversation's deadline in event time.
    fn due(&self, state: &State) -> Time {
        self.alignment
            .align(state.flow.origin, state.deadline(&self.config))
    }

    /// Number of live conversations.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no conversation is live.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Adds packets in order; conversations they end are pushed to `out`.
    pub fn add_all(&mut self, packets: &[Packet], out: &mut Vec<Flow>) {
        for p in packets {
            self.add(p, out);
        }
    }

    /// Adds a packet; a conversation it ends is pushed to `out`.
    #[inline]
    pub fn add(&mut self, p: &Packet, out: &mut Vec<Flow>) {
        let key = ConnKey::of(p);
        let i = match self.table.find(&key) {
            Some(i) => i,
            None => {
                let state = State::new(p);
                let due = self.due(&state);
                self.deadlines.schedule(key, due);
                self.table.insert(key, state)
            }
        };
        let config = self.config;
        let Some(state) = self.table.slot(i) else {
            return;
        };
        let mut reschedule = false;
        if state.ends_before(p, &config) {
            let mut old = std::mem::replace(state, State::new(p));
            if old.flow.end == FlowEnd::Open {
                old.flow.end = FlowEnd::Idle;
            }
            out.push(old.flow);
            reschedule = true;
        }
        let was_open = state.flow.end == FlowEnd::Open;
        state.add(p);
        // Closed or reset: its deadline moved from idle timeout to close linger.
        reschedule |= was_open && state.flow.end != FlowEnd::Open;
        if reschedule {
            let due = self
                .alignment
                .align(state.flow.origin, state.deadline(&config));
            self.deadlines.schedule(key, due);
        }
    }

    /// Emits and forgets every conversation whose deadline is before `now`.
    pub fn expire(&mut self, now: Time, out: &mut Vec<Flow>) {
        for key in self.deadlines.due(now) {
            let Some(state) = self.table.get(&key) else {
                continue;
            };
            let due = self
                .alignment
                .align(state.flow.origin, state.deadline(&self.config));
            if due < now {
                if let Some(mut s) = self.table.remove(&key) {
                    if s.flow.end == FlowEnd::Open {
                        s.flow.end = FlowEnd::Idle;
                    }
                    out.push(s.flow);
                }
            } else {
                self.deadlines.schedule(key, due);
            }
        }
    }

    /// Emits every conversation at the end of the input; `last` gives each origin's last
    /// packet time.
    pub fn flush(&mut self, last: &HashMap<OriginId, Time>, out: &mut Vec<Flow>) {
        let config = self.config;
        let mut rest: Vec<Flow> = self
            .table
            .drain()
            .map(|s| {
                let mut f = s.flow.clone();
                if f.end == FlowEnd::Open
                    && last
                        .get(&f.origin)
                        .is_some_and(|l| s.deadline(&config) < *l)
                {
                    f.end = FlowEnd::Idle;
                }
                f
            })
            .collect();
        rest.sort();
        out.extend(rest);
        self.deadlines.clear();
    }
}

/// Extension trait: conversation summaries of a packet stream.
pub trait Flows<'scope> {
    /// Summarises conversations; see the module documentation. `ends` carries each origin's
    /// latest packet time (from the sources' statistics), broadcast to every worker.
    fn flows(
        self,
        ends: Stream<'scope, Time, Vec<(OriginId, Time)>>,
        config: FlowConfig,
        alignment: Arc<Alignment>,
    ) -> Stream<'scope, Time, Vec<Flow>>;
}

impl<'scope> Flows<'scope> for Stream<'scope, Time, Vec<Packet>> {
    fn flows(
        self,
        ends: Stream<'scope, Time, Vec<(OriginId, Time)>>,
        config: FlowConfig,
        alignment: Arc<Alignment>,
    ) -> Stream<'scope, Time, Vec<Flow>> {
        self.binary_frontier(
            ends,
            Exchange::new(|p: &Packet| ConnKey::of(p).route()),
            Pipeline,
            "flows",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut table = FlowTable::new(config, alignment);
                let mut last: HashMap<OriginId, Time> = HashMap::new();
                let mut out = Vec::new();
                move |(packets, frontier), (ends, ends_frontier), output| {
                    // `for_each`, not `for_each_stamp`: the latter sorts containers by time with
                    // an unstable sort, which can swap two containers of one time and so put a
                    // conversation's packets out of order.
                    packets.for_each(|_cap, batch| {
                        table.add_all(batch, &mut out);
                        batch.clear();
                    });
                    ends.for_each(|_cap, batch| {
                        for (origin, t) in batch.drain(..) {
                            let e = last.entry(origin).or_insert(t);
                            *e = (*e).max(t);
                        }
                    });
                    let Some(cap) = held.as_mut() else { return };
                    let now = frontier.frontier().iter().next().copied();
                    match now {
                        Some(now) => table.expire(now, &mut out),
                        None if ends_frontier.frontier().is_empty() => table.flush(&last, &mut out),
                        None => {}
                    }
                    if !out.is_empty() {
                        output.session(&*cap).give_iterator(out.drain(..));
                    }
                    let both = [
                        frontier.frontier().iter().next().copied(),
                        ends_frontier.frontier().iter().next().copied(),
                    ];
                    match both.iter().flatten().min() {
                        Some(t) if *t > *cap.time() => cap.downgrade(t),
                        Some(_) => {}
                        None => held = None,
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_sources::TcpFields;
    use timely::dataflow::operators::capture::Extract;
    use timely::dataflow::operators::{Capture, ToStream};

    fn packet(ts: Time, src: &str, dst: &str, flags: u8) -> Packet {
        Packet {
            ts_ns: ts,
            origin: OriginId(0),
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            protocol: Protocol::Tcp,
            ttl: 64,
            ip_id: 0,
            tcp: Some(TcpFields {
                seq: 0,
                ack: 0,
                flags: TcpFlags(flags),
                window: 100,
                window_scale: None,
            }),
            payload_len: 10,
            payload_hash: 0,
            payload_truncated: false,
            wire_len: 64,
        }
    }

    #[test]
    fn closes_idles_and_flushes_with_exact_outputs() {
        const S: u8 = TcpFlags::SYN;
        const SA: u8 = TcpFlags::SYN | TcpFlags::ACK;
        const A: u8 = TcpFlags::ACK;
        const FA: u8 = TcpFlags::FIN | TcpFlags::ACK;
        let packets = vec![
            packet(10, "10.0.0.1:5000", "10.0.0.2:80", S),
            packet(11, "10.0.0.2:80", "10.0.0.1:5000", SA),
            packet(12, "10.0.0.1:5000", "10.0.0.2:80", FA),
            packet(13, "10.0.0.2:80", "10.0.0.1:5000", FA),
            // mid-stream: client is the higher port
            packet(20, "10.0.0.9:80", "10.0.0.3:40000", A),
            // idles out before 1000
            packet(30, "10.0.0.4:53000", "10.0.0.5:53", A),
        ];
        let config = FlowConfig {
            idle_timeout_ns: 100,
            close_linger_ns: 5,
        };
        let captured = timely::example(move |scope| {
            let ends = vec![(OriginId(0), 30u64)]
                .to_stream(scope)
                .container::<Vec<_>>();
            packets
                .clone()
                .to_stream(scope)
                .container::<Vec<_>>()
                .flows(ends, config, Arc::new(Alignment::none()))
                .capture()
        });
        let mut flows: Vec<Flow> = captured
            .extract()
            .into_iter()
            .flat_map(|(_, v)| v)
            .collect();
        flows.sort_by_key(|f| f.start_ns);
        assert_eq!(flows.len(), 3);
        assert_eq!(flows[0].end, FlowEnd::Closed);
        assert_eq!(flows[0].client.to_string(), "10.0.0.1:5000");
        assert_eq!(flows[0].packets, [2, 2]);
        assert_eq!((flows[0].start_ns, flows[0].end_ns), (10, 13));
        assert_eq!(flows[1].client.to_string(), "10.0.0.3:40000");
        assert_eq!(flows[1].packets, [0, 1]);
        assert!(!flows[1].saw_open);
        // all input arrives at time 0, so the frontier goes straight to empty: still open
        // (its deadline, 130, is after the origin's last packet at 30)
        assert_eq!(flows[2].end, FlowEnd::Open);
    }

    #[test]
    fn splits_and_labels_follow_event_time_only() {
        let config = FlowConfig {
            idle_timeout_ns: 100,
            close_linger_ns: 5,
        };
        let mut t = FlowTable::new(config, Arc::new(Alignment::none()));
        let mut out = Vec::new();
        t.add(
            &packet(10, "10.0.0.1:5000", "10.0.0.2:80", TcpFlags::ACK),
            &mut out,
        );
        t.add(
            &packet(50, "10.0.0.2:80", "10.0.0.1:5000", TcpFlags::ACK),
            &mut out,
        );
        assert!(out.is_empty());
        // 200 after the last packet: the old record ends as idle, a new one starts
        t.add(
            &packet(250, "10.0.0.1:5000", "10.0.0.2:80", TcpFlags::ACK),
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].end, out[0].start_ns, out[0].end_ns),
            (FlowEnd::Idle, 10, 50)
        );
        // closed, then a new SYN on the same ports: two records
        t.add(
            &packet(
                260,
                "10.0.0.1:5000",
                "10.0.0.2:80",
                TcpFlags::FIN | TcpFlags::ACK,
            ),
            &mut out,
        );
        t.add(
            &packet(
                261,
                "10.0.0.2:80",
                "10.0.0.1:5000",
                TcpFlags::FIN | TcpFlags::ACK,
            ),
            &mut out,
        );
        t.add(
            &packet(270, "10.0.0.1:5000", "10.0.0.2:80", TcpFlags::SYN),
            &mut out,
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].end, FlowEnd::Closed);
        // the frontier passing a deadline expires (once its ~1 s bucket is over), an end of
        // input flushes by origin time
        t.add(
            &packet(300, "10.0.0.3:6000", "10.0.0.4:53", TcpFlags::ACK),
            &mut out,
        );
        t.add(
            &packet(2_000_000_000, "10.0.0.5:6000", "10.0.0.6:53", TcpFlags::ACK),
            &mut out,
        );
        t.expire(385, &mut out);
        assert_eq!(
            out.len(),
            2,
            "the bucket holding deadline 370 is not over at 385"
        );
        t.expire((1 << 30) + 1, &mut out);
        assert_eq!(out.len(), 4, "deadlines 370 and 400 expired");
        assert!(out[2..].iter().all(|f| f.end == FlowEnd::Idle));
        let last: HashMap<OriginId, Time> = [(OriginId(0), 3_000_000_000)].into();
        t.flush(&last, &mut out);
        assert_eq!(out.len(), 5);
        assert_eq!(
            out[4].end,
            FlowEnd::Idle,
            "deadline 2e9+100 < origin end 3e9"
        );
        assert!(t.is_empty());
    }
}
