//! The `tcp.packets` operator: SNAP's evidence (SNAP Table 2) from packets instead of the
//! kernel's counters, for captures and live sniffers.
//!
//! For each direction of data of each TCP connection, per aggregation interval:
//! - **retransmissions**: a data segment that starts before the highest sequence number
//!   already sent. It is a *timeout* when no duplicate ACK came since the last progress and
//!   the sender had sent nothing for at least 90% of `min_rto_ns` (the stall is the
//!   timeout's time; the retransmissions that follow in the same recovery belong to it);
//!   otherwise a *fast retransmission* (duplicate ACKs, SACK, RACK or a tail loss probe
//!   recovered it);
//! - **RTT samples**: data to the ACK that covers it, for segments never retransmitted
//!   (Karn) and not acknowledged during the recovery of a loss (a hole delays the ACK of
//!   what follows it), one sample per ACK;
//! - **delayed ACKs** (SNAP §4.2): a pure ACK that acknowledged a segment at least
//!   `delayed_ack_timeout_ns` after it was sent, and more than the connection's minimum RTT
//!   plus `max_queuing_delay_ns`;
//! - **receiver-window limited time**: from when the bytes in flight reach the receiver's
//!   announced window less one segment (or the window is zero) until they fall below it
//!   (windows are scaled by the SYN's window-scale option; without the handshake only a zero
//!   window counts);
//! - **send-buffer limited** (inferred; packets do not show the buffer): the sender always
//!   busy, without loss, not held back by the receiver's window, and its bytes in flight
//!   stuck at one level of at least three segments for three intervals in a row, where the
//!   congestion window would have grown; the interval then counts as limited, as SNAP's
//!   snapshot rule counts a full buffer;
//! - bytes and data segments sent.
//!
//! Seen from the sender's side, data-to-ACK is the round trip; from the receiver's side it is
//! the receiver's own hold time; both work, since the minimum RTT is subtracted.
//!
//! - **Input**: packets (TCP; UDP is ignored), in time order per connection.
//! - **Output**: [`Evidence`] per direction with activity per interval, at the end of the
//!   interval; an interval ends when a later packet of the connection arrives or the frontier
//!   passes it.
//! - **Exchange**: by connection, both directions together.
//! - **State**: per connection, two sides with at most `MAX_OUTSTANDING` unacknowledged
//!   segments each; freed when the frontier is a second past the last packet of a closed
//!   connection (both FINs, or a RST; its evidence from then on says `closed`), five seconds
//!   past that of one that never carried data (half-open), else `idle_ns` past its last
//!   packet. So short connections cost a second each, and a SYN flood five, not `idle_ns`.
//! - **Cost**: per packet, a hash lookup and amortised O(1) queue work.

use std::collections::VecDeque;

use causeway_sources::{Endpoint, OriginId, Packet, Protocol, TcpFlags, Time};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use crate::FastMap;
use crate::conn::{ConnKey, Deadlines, HANDSHAKE_IDLE_NS};
use crate::tcp::problem::{ConnId, Evidence, EvidenceSource, SnapConfig};

/// Unacknowledged segments remembered per direction; older ones are forgotten (their ACK
/// then gives no RTT sample).
const MAX_OUTSTANDING: usize = 4096;

/// How long after its last packet a closed connection (both FINs, or a RST) is forgotten.
const CLOSE_LINGER_NS: Time = 1_000_000_000;

/// `a` comes before `b` in sequence space.
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    end: u32,
    sent_ns: Time,
    retransmitted: bool,
}

#[derive(Clone, Debug, Default)]
struct Acc {
    bytes: u64,
    segments: u64,
    fast: u64,
    timeouts: u64,
    timeout_ns: u64,
    rtt_samples: u64,
    rtt_sum_us: u64,
    delayed: u64,
    rwnd_ns: u64,
    /// Time with data in flight.
    busy_ns: u64,
    /// Most bytes in flight.
    max_flight: u64,
}

impl Acc {
    fn active(&self) -> bool {
        self.bytes > 0
            || self.segments > 0
            || self.fast > 0
            || self.timeouts > 0
            || self.rwnd_ns > 0
    }
}

/// One direction of data: its sender's state.
#[derive(Clone, Debug, Default)]
struct Side {
    endpoint: Option<Endpoint>,
    /// Window scale the sender announced on its SYN (applies to the windows it announces).
    wscale: Option<u8>,
    nxt: Option<u32>,
    acked: Option<u32>,
    dupacks: u32,
    mss: u32,
    outstanding: VecDeque<Segment>,
    /// The receiver's announced window, bytes; `None` before it is known to scale.
    window: Option<u64>,
    limited_since: Option<Time>,
    min_rtt_ns: Option<u64>,
    srtt_ns: Option<u64>,
    /// While a loss is being recovered: the highest sequence sent when it began. Segments
    /// after a hole are acknowledged only once the hole is filled, so ACKs below this give
    /// no RTT sample and no delayed-ACK judgement.
    recovery: Option<u32>,
    /// The current recovery began with a timeout: its further retransmissions belong to it.
    after_rto: bool,
    /// When the sender last sent data (new or retransmitted).
    last_tx_ns: Option<Time>,
    /// When the busy time was last accounted.
    busy_at: Option<Time>,
    /// The previous interval's most bytes in flight, and for how many intervals in a row
    /// the flight has stayed at that level while the sender was busy.
    plateau: (u64, u32),
    acc: Acc,
}

impl Side {
    fn flight(&self) -> u64 {
        match (self.nxt, self.acked) {
            (Some(n), Some(a)) if before(a, n) => u64::from(n.wrapping_sub(a)),
            _ => 0,
        }
    }

    /// Accounts the time since the last event as busy if data was in flight.
    fn busy_until(&mut self, ts: Time) {
        if let Some(at) = self.busy_at {
            if self.flight() > 0 {
                self.acc.busy_ns += ts.saturating_sub(at);
            }
        }
        self.busy_at = Some(ts);
    }

    /// Whether the sender looks send-buffer limited over the interval just ended (`span`
    /// long): always busy, no loss, not held back by the receiver's window, and the bytes in
    /// flight stuck at the same level (at least three segments) for three intervals in a
    /// row, where the congestion window would have grown. Packets do not show the send
    /// buffer; this is the trace it leaves.
    fn stuck(&mut self, span: u64) -> bool {
        let a = &self.acc;
        let steady = a.busy_ns * 10 >= span * 9
            && a.fast == 0
            && a.timeouts == 0
            && a.rwnd_ns * 100 < span
            && a.max_flight >= 3 * u64::from(self.mss.max(1));
        let (prev, n) = self.plateau;
        let same = prev > 0 && a.max_flight.abs_diff(prev) * 10 <= prev;
        self.plateau = match (steady, same) {
            (true, true) => (prev, n + 1),
            (true, false) => (a.max_flight, 1),
            _ => (0, 0),
        };
        self.plateau.1 >= 3
    }

    fn check_limit(&mut self, ts: Time) {
        let flight = self.flight();
        self.acc.max_flight = self.acc.max_flight.max(flight);
        let Some(window) = self.window else { return };
        let limited = window == 0
            || (self.flight() > 0 && self.flight() + u64::from(self.mss.max(1)) > window);
        match (limited, self.limited_since) {
            (true, None) => self.limited_since = Some(ts),
            (false, Some(since)) => {
                self.acc.rwnd_ns += ts.saturating_sub(since);
                self.limited_since = None;
            }
            _ => {}
        }
    }
}

/// How many routers a packet crossed before it was captured: its TTL (hop limit) below the
/// nearest initial value at or above it that stacks use (64: Linux, macOS; 128: Windows;
/// 255: network gear, some BSDs).
pub fn routers_crossed(ttl: u8) -> u8 {
    let initial = [64u8, 128, 255]
        .into_iter()
        .find(|&i| i >= ttl)
        .unwrap_or(255);
    initial - ttl
}

struct ConnState {
    origin: OriginId,
    sides: [Side; 2],
    /// Start of the current interval.
    interval: Time,
    last_ns: Time,
    /// A FIN seen from each side.
    fin: [bool; 2],
    /// A RST seen.
    reset: bool,
    /// A segment with data seen.
    data: bool,
    /// The most routers any of its packets crossed before the capture (from their TTLs).
    hops: u8,
}

impl ConnState {
    /// Both sides sent FIN, or a RST ended it.
    fn closed(&self) -> bool {
        self.reset || self.fin == [true; 2]
    }

    /// Emits the interval ending at `end` (said `closed` once the connection closed: what
    /// comes after the close is its last ACKs, no data).
    fn flush(&mut self, end: Time, out: &mut Vec<Evidence>) {
        let last = self.closed();
        for d in 0..2 {
            let peer = self.sides[1 - d].endpoint;
            let s = &mut self.sides[d];
            if let Some(since) = s.limited_since {
                s.acc.rwnd_ns += end.saturating_sub(since);
                s.limited_since = Some(end);
            }
            s.busy_until(end);
            let stuck = s.stuck(end.saturating_sub(self.interval));
            let acc = std::mem::take(&mut s.acc);
            let (Some(local), Some(peer)) = (s.endpoint, peer) else {
                continue;
            };
            if !acc.active() {
                continue;
            }
            out.push(Evidence {
                conn: ConnId {
                    origin: self.origin,
                    local,
                    peer,
                },
                source: EvidenceSource::Packets,
                start_ns: self.interval,
                end_ns: end,
                bytes: acc.bytes,
                segments: acc.segments,
                sndbuf_limited_ns: None,
                sndbuf_full: Some(stuck),
                rwnd_limited_ns: s.window.map(|_| acc.rwnd_ns),
                fast_retransmits: Some(acc.fast),
                timeouts: Some(acc.timeouts),
                timeout_ns: Some(acc.timeout_ns),
                rtt_samples: Some(acc.rtt_samples),
                rtt_sum_us: Some(acc.rtt_sum_us),
                min_rtt_us: s.min_rtt_ns.map(|n| n / 1000),
                delayed_acks: Some(acc.delayed),
                srtt_us: s.srtt_ns.map(|n| n / 1000),
                rto_us: None,
                closed: last,
                hops: Some(self.hops),
            });
        }
    }

    fn add(&mut self, key: &ConnKey, p: &Packet, config: &SnapConfig) {
        let Some(tcp) = p.tcp else { return };
        let d = key.direction(&p.src);
        let ts = p.ts_ns;
        self.last_ns = ts;
        self.hops = self.hops.max(routers_crossed(p.ttl));
        self.fin[d] |= tcp.flags.has(TcpFlags::FIN);
        self.data |= p.payload_len > 0;
        self.reset |= tcp.flags.has(TcpFlags::RST);
        self.sides[d].endpoint = Some(p.src);
        self.sides[1 - d].endpoint = Some(p.dst);
        if tcp.flags.has(TcpFlags::SYN) {
            self.sides[d].wscale = Some(tcp.window_scale.unwrap_or(0));
            self.sides[d].nxt = Some(tcp.seq.wrapping_add(1));
            self.sides[d].acked = Some(tcp.seq.wrapping_add(1));
        }
        // The packet as data of direction `d`.
        if p.payload_len > 0 && !tcp.flags.has(TcpFlags::SYN) {
            let s = &mut self.sides[d];
            let end = tcp.seq.wrapping_add(p.payload_len);
            s.busy_until(ts);
            s.mss = s.mss.max(p.payload_len);
            let last_tx = s.last_tx_ns.replace(ts);
            match s.nxt {
                Some(nxt) if before(tcp.seq, nxt) => {
                    // The segments it resends (Karn: no RTT sample from them), in one pass:
                    // the one holding its first byte, then those it covers.
                    let mut sent = None;
                    for g in s.outstanding.iter_mut().filter(|g| before(tcp.seq, g.end)) {
                        if sent.is_some() && before(end, g.end) {
                            break;
                        }
                        sent.get_or_insert(g.sent_ns);
                        g.retransmitted = true;
                    }
                    // How long the sender had been silent: a timeout is a stall of at
                    // least the minimum RTO with no duplicate ACK to go on.
                    let silence = ts.saturating_sub(last_tx.or(sent).unwrap_or(ts));
                    s.recovery = Some(match s.recovery {
                        Some(r) if before(nxt, r) => r,
                        _ => nxt,
                    });
                    if s.dupacks == 0 && silence * 10 >= config.min_rto_ns * 9 {
                        s.acc.timeouts += 1;
                        s.acc.timeout_ns += silence;
                        s.after_rto = true;
                    } else if !s.after_rto {
                        s.acc.fast += 1;
                    }
                    if before(nxt, end) {
                        s.nxt = Some(end);
                    }
                }
                _ => {
                    s.nxt = Some(end);
                    if s.acked.is_none() {
                        s.acked = Some(tcp.seq);
                    }
                    s.acc.bytes += u64::from(p.payload_len);
                    s.acc.segments += 1;
                    if s.outstanding.len() == MAX_OUTSTANDING {
                        s.outstanding.pop_front();
                    }
                    s.outstanding.push_back(Segment {
                        end,
                        sent_ns: ts,
                        retransmitted: false,
                    });
                }
            }
            s.check_limit(ts);
        }
        // The packet as an acknowledgment of direction `1 - d`.
        if tcp.flags.has(TcpFlags::ACK) {
            let scale = self.sides[d].wscale;
            let both_scaled = scale.is_some() && self.sides[1 - d].wscale.is_some();
            let o = &mut self.sides[1 - d];
            o.busy_until(ts);
            let a = tcp.ack;
            let window = u64::from(tcp.window) << if both_scaled { scale.unwrap_or(0) } else { 0 };
            let window_changed = o.window.is_some_and(|w| w != window);
            let pure = p.payload_len == 0
                && !tcp.flags.has(TcpFlags::SYN)
                && !tcp.flags.has(TcpFlags::FIN);
            match o.acked {
                Some(prev) if before(prev, a) => {
                    o.acked = Some(a);
                    o.dupacks = 0;
                    let mut newest: Option<Segment> = None;
                    while let Some(g) = o.outstanding.front() {
                        if before(a, g.end) {
                            break;
                        }
                        newest = o.outstanding.pop_front();
                    }
                    let recovering = match o.recovery {
                        Some(r) if before(a, r) => true,
                        Some(_) => {
                            o.recovery = None;
                            o.after_rto = false;
                            true
                        }
                        None => false,
                    };
                    if let Some(g) = newest.filter(|g| !g.retransmitted && !recovering) {
                        let rtt = ts.saturating_sub(g.sent_ns);
                        let min = *o.min_rtt_ns.get_or_insert(rtt);
                        let min = min.min(rtt);
                        o.min_rtt_ns = Some(min);
                        o.srtt_ns = Some(match o.srtt_ns {
                            Some(s) => (7 * s + rtt) / 8,
                            None => rtt,
                        });
                        o.acc.rtt_samples += 1;
                        o.acc.rtt_sum_us += rtt / 1000;
                        if pure
                            && rtt >= config.delayed_ack_timeout_ns
                            && rtt >= min + config.max_queuing_delay_ns
                        {
                            o.acc.delayed += 1;
                        }
                    }
                }
                Some(prev) if prev == a && pure && !window_changed && o.flight() > 0 => {
                    o.dupacks += 1;
                }
                Some(_) => {}
                None => o.acked = Some(a),
            }
            // A reset's window means nothing (a refused connection's RST carries 0): taken as
            // a zero window it held the retried connection "limited" until its SYN-ACK.
            if (both_scaled || window == 0) && !tcp.flags.has(TcpFlags::RST) {
                o.window = Some(window);
            }
            o.check_limit(ts);
        }
    }
}

/// Extension trait: SNAP evidence from TCP packets.
pub trait TcpPackets<'scope> {
    /// See the module documentation; `interval_ns` is the aggregation interval.
    fn tcp_packets(
        self,
        interval_ns: Time,
        config: SnapConfig,
    ) -> Stream<'scope, Time, Vec<Evidence>>;
}

impl<'scope> TcpPackets<'scope> for Stream<'scope, Time, Vec<Packet>> {
    fn tcp_packets(
        self,
        interval_ns: Time,
        config: SnapConfig,
    ) -> Stream<'scope, Time, Vec<Evidence>> {
        let interval_ns = interval_ns.max(1_000_000);
        self.unary_frontier(
            Exchange::new(|p: &Packet| ConnKey::of(p).route()),
            "tcp.packets",
            move |cap, _info| {
                let mut held = Some(cap);
                // Boxed: a table of a SYN flood's hundreds of thousands of connections then
                // grows (doubling, old and new side by side) by pointers, not by states of
                // two sides each (measured: 517 MB peak on a port scan of 327,675 connections).
                let mut conns: FastMap<ConnKey, Box<ConnState>> = FastMap::default();
                let mut deadlines: Deadlines<ConnKey> = Deadlines::default();
                let mut out = Vec::new();
                move |(input, frontier), output| {
                    input.for_each(|_cap, batch| {
                        for p in batch.drain(..) {
                            if p.protocol != Protocol::Tcp {
                                continue;
                            }
                            let key = ConnKey::of(&p);
                            let start = p.ts_ns - p.ts_ns % interval_ns;
                            let state = conns.entry(key).or_insert_with(|| {
                                deadlines.schedule(key, start + interval_ns);
                                Box::new(ConnState {
                                    origin: p.origin,
                                    sides: Default::default(),
                                    interval: start,
                                    last_ns: p.ts_ns,
                                    fin: [false; 2],
                                    reset: false,
                                    data: false,
                                    hops: 0,
                                })
                            });
                            if start > state.interval {
                                state.flush(state.interval + interval_ns, &mut out);
                                state.interval = start;
                            }
                            state.add(&key, &p, &config);
                        }
                    });
                    let now = frontier.frontier().iter().next().copied();
                    match now {
                        Some(now) => {
                            for key in deadlines.due(now) {
                                let Some(state) = conns.get_mut(&key) else {
                                    continue;
                                };
                                let end = state.interval + interval_ns;
                                // A closed connection is done once its last packet is
                                // `CLOSE_LINGER_NS` behind (a retransmitted FIN or last ACK
                                // then starts a fresh, empty entry).
                                let gone = state.closed()
                                    && state.last_ns.saturating_add(CLOSE_LINGER_NS) <= now;
                                if end <= now || gone {
                                    state.flush(end, &mut out);
                                    state.interval = end;
                                }
                                // Without data it has no evidence to give: a SYN flood's
                                // half-open connections are forgotten after a few seconds.
                                let idle = if state.data {
                                    config.idle_ns
                                } else {
                                    HANDSHAKE_IDLE_NS
                                };
                                if gone || state.last_ns + idle <= now {
                                    conns.remove(&key);
                                } else {
                                    deadlines.schedule(key, state.interval + interval_ns);
                                }
                            }
                        }
                        None => {
                            // In key order (output independent of hashing), without a copy
                            // of every state.
                            let mut keys: Vec<ConnKey> = conns.keys().copied().collect();
                            keys.sort_unstable();
                            for key in keys {
                                if let Some(mut state) = conns.remove(&key) {
                                    let end = state.interval + interval_ns;
                                    state.flush(end, &mut out);
                                }
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
    use causeway_sources::TcpFields;

    const A: &str = "10.0.0.1:40000";
    const B: &str = "10.0.0.2:80";

    fn packet(ts_ms: f64, src: &str, dst: &str, seq: u32, ack: u32, flags: u8, len: u32) -> Packet {
        Packet {
            ts_ns: (ts_ms * 1e6) as u64,
            origin: OriginId(0),
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            protocol: Protocol::Tcp,
            ttl: 64,
            ip_id: 0,
            tcp: Some(TcpFields {
                seq,
                ack,
                flags: TcpFlags(flags),
                window: 1000,
                window_scale: (flags & TcpFlags::SYN != 0).then_some(7),
            }),
            payload_len: len,
            payload_hash: 0,
            payload_truncated: false,
            wire_len: 60 + len,
        }
    }

    fn run(packets: &[Packet]) -> Vec<Evidence> {
        let config = SnapConfig::default();
        let mut state = ConnState {
            origin: OriginId(0),
            sides: Default::default(),
            interval: 0,
            last_ns: 0,
            fin: [false; 2],
            reset: false,
            data: false,
            hops: 0,
        };
        let key = ConnKey::of(&packets[0]);
        for p in packets {
            state.add(&key, p, &config);
        }
        let mut out = Vec::new();
        state.flush(1_000_000_000, &mut out);
        out
    }

    const ACK: u8 = TcpFlags::ACK;
    const SYN: u8 = TcpFlags::SYN;

    fn handshake() -> Vec<Packet> {
        vec![
            packet(0.0, A, B, 99, 0, SYN, 0),
            packet(0.05, B, A, 499, 100, SYN | ACK, 0),
            packet(0.1, A, B, 100, 500, ACK, 0),
        ]
    }

    #[test]
    fn routers_crossed_from_ttl() {
        for (ttl, hops) in [
            (64, 0),
            (63, 1),
            (1, 63),
            (128, 0),
            (120, 8),
            (255, 0),
            (250, 5),
        ] {
            assert_eq!(routers_crossed(ttl), hops, "ttl {ttl}");
        }
    }

    #[test]
    fn evidence_says_closed_once_both_sides_sent_fin_or_one_reset() {
        let mut p = handshake();
        p.push(packet(0.5, A, B, 100, 500, ACK | TcpFlags::PSH, 50));
        p.push(packet(0.6, B, A, 500, 150, ACK | TcpFlags::PSH, 20));
        assert!(run(&p).iter().all(|e| !e.closed), "open");
        let mut half = p.clone();
        half.push(packet(0.7, A, B, 150, 520, ACK | TcpFlags::FIN, 0));
        assert!(run(&half).iter().all(|e| !e.closed), "half closed");
        let mut both = half.clone();
        both.push(packet(0.8, B, A, 520, 151, ACK | TcpFlags::FIN, 0));
        let e = run(&both);
        assert!(!e.is_empty() && e.iter().all(|e| e.closed), "{e:?}");
        let mut reset = p;
        reset.push(packet(0.7, B, A, 520, 150, TcpFlags::RST, 0));
        assert!(run(&reset).iter().all(|e| e.closed));
    }

    #[test]
    fn delayed_acks_are_counted_from_data_to_a_late_pure_ack() {
        let mut p = handshake();
        // One record acknowledged at once (the round trip is 0.1 ms), then three small
        // records, each acknowledged 40 ms later.
        p.push(packet(0.5, A, B, 100, 500, ACK | TcpFlags::PSH, 50));
        p.push(packet(0.6, B, A, 500, 150, ACK, 0));
        for k in 1..4u32 {
            let t = 1.0 + 41.0 * f64::from(k);
            p.push(packet(t, A, B, 100 + 50 * k, 500, ACK | TcpFlags::PSH, 50));
            p.push(packet(t + 40.0, B, A, 500, 150 + 50 * k, ACK, 0));
        }
        let e = run(&p);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].conn.flow(), format!("{A}->{B}"));
        assert_eq!(e[0].delayed_acks, Some(3));
        assert_eq!(e[0].rtt_samples, Some(4));
        assert_eq!(e[0].min_rtt_us, Some(100));
        assert_eq!((e[0].bytes, e[0].segments), (200, 4));
    }

    #[test]
    fn retransmissions_after_silence_are_timeouts_and_after_dupacks_fast() {
        let mut p = handshake();
        p.push(packet(1.0, A, B, 100, 500, ACK, 100)); // lost
        p.push(packet(1.1, A, B, 200, 500, ACK, 100));
        p.push(packet(1.2, B, A, 500, 100, ACK, 0)); // duplicate ACKs
        p.push(packet(1.3, B, A, 500, 100, ACK, 0));
        p.push(packet(1.4, A, B, 100, 500, ACK, 100)); // fast retransmission
        p.push(packet(1.5, B, A, 500, 300, ACK, 0));
        p.push(packet(10.0, A, B, 300, 500, ACK, 100)); // lost, then retransmitted by RTO
        p.push(packet(215.0, A, B, 300, 500, ACK, 100));
        p.push(packet(215.1, B, A, 500, 400, ACK, 0));
        let e = run(&p);
        assert_eq!(e[0].fast_retransmits, Some(1));
        assert_eq!(e[0].timeouts, Some(1));
        assert_eq!(e[0].timeout_ns, Some(205_000_000));
    }

    #[test]
    fn a_full_receiver_window_is_limited_time() {
        let mut p = handshake();
        // Window 1000 << 7 = 128000 bytes; send 128000 bytes, ACK after 100 ms.
        for k in 0..128u32 {
            p.push(packet(1.0, A, B, 100 + 1000 * k, 500, ACK, 1000));
        }
        p.push(packet(101.0, B, A, 500, 100 + 128_000, ACK, 0));
        let e = run(&p);
        assert_eq!(e[0].rwnd_limited_ns, Some(100_000_000));
    }

    #[test]
    fn a_refused_attempt_before_the_connection_is_not_a_zero_window() {
        // The first SYN meets no listener (RST, window 0); the client retries 50 ms later on
        // the same ports, and one segment is acknowledged at once.
        let mut rst = packet(0.01, B, A, 0, 100, TcpFlags::RST | ACK, 0);
        if let Some(t) = rst.tcp.as_mut() {
            t.window = 0;
        }
        let mut p = vec![packet(0.0, A, B, 99, 0, SYN, 0), rst];
        p.extend(handshake().into_iter().map(|mut k| {
            k.ts_ns += 50_000_000;
            k
        }));
        p.push(packet(51.0, A, B, 100, 500, ACK, 1000));
        p.push(packet(51.1, B, A, 500, 1100, ACK, 0));
        let e = run(&p);
        assert_eq!(e[0].rwnd_limited_ns, Some(0), "{e:?}");
    }
}
