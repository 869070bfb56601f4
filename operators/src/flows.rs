//! The `flows` operator: per-connection summaries, as tshark's conversation statistics give.
//!
//! - **Input**: packets.
//! - **Output**: one [`Flow`] per conversation (origin, protocol, endpoint pair) when it ends:
//!   after a TCP close (both FINs, or a RST) once the frontier passes its last packet plus
//!   `close_linger_ns`; after `idle_timeout_ns` without packets; or at the end of the input,
//!   marked `open`. A conversation that resumes after being emitted starts a new record.
//! - **Exchange**: by a hash of the conversation key, so both directions meet on one worker.
//! - **State**: one entry per live conversation plus a deadline queue; an entry is freed when
//!   the frontier passes its deadline, so memory follows the number of concurrent
//!   conversations, not the length of the run.
//! - **Cost**: one hash-map update per packet; one queue operation per conversation per idle
//!   period.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use foldhash::fast::FixedState;

use causeway_sources::{Endpoint, OriginId, Packet, Protocol, TcpFlags, Time};
use serde::{Deserialize, Serialize};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
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

/// Canonical key: both directions of a conversation map to the same key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    origin: OriginId,
    protocol: Protocol,
    low: Endpoint,
    high: Endpoint,
}

impl Key {
    fn of(p: &Packet) -> Key {
        let (low, high) = if p.src <= p.dst {
            (p.src, p.dst)
        } else {
            (p.dst, p.src)
        };
        Key {
            origin: p.origin,
            protocol: p.protocol,
            low,
            high,
        }
    }

    /// Exchange key: the same on every worker and process.
    fn route(&self) -> u64 {
        FixedState::with_seed(0x666c_6f77).hash_one(self)
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

/// Extension trait: conversation summaries of a packet stream.
pub trait Flows<'scope> {
    /// Summarises conversations; see the module documentation.
    fn flows(self, config: FlowConfig) -> Stream<'scope, Time, Vec<Flow>>;
}

impl<'scope> Flows<'scope> for Stream<'scope, Time, Vec<Packet>> {
    fn flows(self, config: FlowConfig) -> Stream<'scope, Time, Vec<Flow>> {
        self.unary_frontier(
            Exchange::new(|p: &Packet| Key::of(p).route()),
            "flows",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut live: HashMap<Key, State, FixedState> =
                    HashMap::with_hasher(FixedState::with_seed(0x6c69_7665));
                let mut deadlines: BTreeMap<Time, Vec<Key>> = BTreeMap::new();
                move |(input, frontier), output| {
                    input.for_each_stamp(|_cap, data| {
                        // Packets of one conversation come in runs (segments and their ACKs): keep
                        // the current one out of the map and touch the map only when the run ends.
                        let mut hot: Option<(Key, State)> = None;
                        for packets in data {
                            for p in packets.iter() {
                                let key = Key::of(p);
                                match &mut hot {
                                    Some((k, state)) if *k == key => state.add(p),
                                    _ => {
                                        if let Some((k, state)) = hot.take() {
                                            live.insert(k, state);
                                        }
                                        let mut state = live.remove(&key).unwrap_or_else(|| {
                                            let s = State::new(p);
                                            deadlines
                                                .entry(s.deadline(&config))
                                                .or_default()
                                                .push(key);
                                            s
                                        });
                                        state.add(p);
                                        hot = Some((key, state));
                                    }
                                }
                            }
                            packets.clear();
                        }
                        if let Some((k, state)) = hot {
                            live.insert(k, state);
                        }
                    });
                    let Some(cap) = held.as_mut() else { return };
                    let mut session = output.session(&*cap);
                    match frontier.frontier().iter().next().copied() {
                        Some(now) => {
                            while let Some(entry) = deadlines.first_entry() {
                                if *entry.key() >= now {
                                    break;
                                }
                                for key in entry.remove() {
                                    let Some(state) = live.get(&key) else {
                                        continue;
                                    };
                                    let due = state.deadline(&config);
                                    if due < now {
                                        if let Some(mut s) = live.remove(&key) {
                                            if s.flow.end == FlowEnd::Open {
                                                s.flow.end = FlowEnd::Idle;
                                            }
                                            session.give(s.flow);
                                        }
                                    } else {
                                        deadlines.entry(due).or_default().push(key);
                                    }
                                }
                            }
                            drop(session);
                            if now > *cap.time() {
                                cap.downgrade(&now);
                            }
                        }
                        None => {
                            let mut rest: Vec<Flow> = live.drain().map(|(_, s)| s.flow).collect();
                            rest.sort();
                            session.give_iterator(rest.into_iter());
                            deadlines.clear();
                            drop(session);
                            held = None;
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
            packets
                .clone()
                .to_stream(scope)
                .container::<Vec<_>>()
                .flows(config)
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
        assert_eq!(flows[2].end, FlowEnd::Open);
    }
}
