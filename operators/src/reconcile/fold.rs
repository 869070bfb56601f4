//! The `reconcile.fold` operator: packets to [`Sighting`]s, per sniffer.
//!
//! - **Input**: packets.
//! - **Output**: one sighting per message per sniffer. A TCP message is the data a side sends
//!   between the other side's data (direction changes: data seen the other way, or an
//!   acknowledgment that moved on, for data this sniffer missed), a FIN or RST, or a pause
//!   longer than `message_gap_ns` (or, once every byte it sent is acknowledged, longer than
//!   the connection's quiet gap: four times the longest such silence its messages went on
//!   after, at least 50 ms, learned from its own first messages and from any it then cut
//!   short, so that an idle keep-alive connection's last reply does not hold everything
//!   downstream for the whole gap); its start is the next byte the sniffer expected in that
//!   direction (from earlier data, the SYN, or the other side's acknowledgments), so that a sniffer that lost
//!   the first segment still names the message as the others do. Segments carrying only bytes
//!   already seen are retransmissions, not messages. Each UDP datagram is a message.
//! - **Exchange**: by sniffer and connection.
//! - **State**: per live connection, each direction's next expected sequence number, the
//!   latest acknowledgment from the other side, and the message being built, and the
//!   connection's message count and longest acknowledged silence; and a deadline
//!   list with about one entry per connection. A message is emitted at its end; a connection
//!   is forgotten when the frontier passes its last packet plus the close linger (after FIN or
//!   RST both ways), plus five seconds while it has carried no data (half-open: a SYN flood
//!   or a port scan costs seconds of its rate, not `conn_idle_ns`), or plus `conn_idle_ns`.
//! - **Capability**: held at the event time of the oldest message being built (else the input
//!   frontier), so a sighting is never behind the output frontier (but for packets the source
//!   sent late) and nothing downstream waits out the message gap: a busy connection's message
//!   ends at the other side's next data and holds the frontier for as long as it lasted, an
//!   idle connection's last one for its quiet gap (the gap while it has not learned one). At
//!   most `max_hold_ns`: a message open longer comes late downstream.
//! - **Cost**: one table lookup per packet (see [`crate::conn`]); per message, two counter
//!   updates in [`MinTimes`].

use std::hash::BuildHasher;
use std::sync::Arc;

use causeway_sources::{Alignment, Endpoint, Packet, Protocol, TcpFlags, Time};
use foldhash::fast::FixedState;
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use super::Sighting;
use crate::conn::{ConnKey, ConnTable, Deadlines, HANDSHAKE_IDLE_NS};
use crate::min_times::MinTimes;

/// Timeouts of the fold.
#[derive(Clone, Copy, Debug)]
pub struct FoldConfig {
    /// A message ends after this long without a segment.
    pub message_gap_ns: Time,
    /// A connection without packets for this long is forgotten.
    pub conn_idle_ns: Time,
    /// A closed connection is forgotten this long after its last packet.
    pub close_linger_ns: Time,
    /// The capability is held at most this far behind the input frontier: a message open
    /// longer (a download the receiver only acknowledges) leaves that much behind the
    /// frontier, late downstream, rather than holding the whole pipeline back as long as it
    /// lasts.
    pub max_hold_ns: Time,
}

impl Default for FoldConfig {
    fn default() -> Self {
        FoldConfig {
            message_gap_ns: 1_000_000_000,
            conn_idle_ns: 60_000_000_000,
            close_linger_ns: 2_000_000_000,
            max_hold_ns: 5_000_000_000,
        }
    }
}

/// `a` is after `b` in sequence space.
#[inline]
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

#[inline]
fn later(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if after(y, x) { y } else { x }),
        (x, y) => x.or(y),
    }
}

/// The content key of a TCP message: its first sequence number and the acknowledgment it
/// carries, neither of which address translation changes.
pub fn tcp_key(start_seq: u32, ack: u32) -> u64 {
    FixedState::with_seed(0x7463_7000).hash_one((start_seq, ack))
}

/// The content key of a UDP datagram: its payload hash and length.
pub fn udp_key(payload_hash: u64, payload_len: u32) -> u64 {
    FixedState::with_seed(0x7564_7000).hash_one((payload_hash, payload_len))
}

struct Building {
    /// `first_ns` in event time: where the fold's capability is held while the message is
    /// open.
    held_at: Time,
    start_seq: u32,
    ack: u32,
    first_ns: Time,
    last_ns: Time,
    bytes: u64,
    ttl: u8,
    src: Endpoint,
    dst: Endpoint,
    whole_start: bool,
    segments: u32,
    retransmitted: u32,
}

impl Building {
    /// The sighting of the ended message; it no longer holds the capability.
    fn finish(self, p: &ConnState, open: &mut MinTimes) -> Sighting {
        open.remove(self.held_at);
        Sighting {
            key: tcp_key(self.start_seq, self.ack),
            origin: p.origin,
            protocol: Protocol::Tcp,
            src: self.src,
            dst: self.dst,
            first_ns: self.first_ns,
            last_ns: self.last_ns,
            bytes: self.bytes,
            ttl: self.ttl,
            whole_start: self.whole_start,
            segments: self.segments,
            retransmitted: self.retransmitted,
        }
    }
}

#[derive(Default)]
struct Direction {
    next_seq: Option<u32>,
    peer_ack: Option<u32>,
    building: Option<Building>,
    closed: bool,
    /// When (the connection's last packet) this side's message was ended by the quiet gap,
    /// until the other side sends data: should this side go on instead, the silence was
    /// within a message.
    cut: Option<Time>,
}

impl Direction {
    /// Whether the other side has acknowledged every byte this side sent: a sender that
    /// stops then is not waiting for the network.
    fn acked(&self) -> bool {
        matches!((self.next_seq, self.peer_ack), (Some(n), Some(a)) if !after(n, a))
    }
}

struct ConnState {
    origin: causeway_sources::OriginId,
    dirs: [Direction; 2],
    last_ns: Time,
    reset: bool,
    /// A segment with data seen.
    data: bool,
    /// The earliest deadline bucket the connection is listed under, if any.
    listed: Option<Time>,
    /// Messages begun on the connection.
    messages: u32,
    /// The longest silence after which a message of the connection went on while every byte
    /// it had sent was acknowledged.
    quiet_max: Time,
}

/// Messages a connection needs before its own silences set its quiet gap.
const QUIET_MESSAGES: u32 = 8;

/// The least quiet gap: a sender that pauses within a message while all it sent is
/// acknowledged (writes of one reply some milliseconds apart) is split no sooner than this.
const QUIET_FLOOR_NS: Time = 50_000_000;

/// The quiet gap is this many times the longest such silence seen on the connection.
const QUIET_FACTOR: Time = 4;

impl ConnState {
    fn done(&self) -> bool {
        self.reset || (self.dirs[0].closed && self.dirs[1].closed)
    }

    /// How long a message whose every byte is acknowledged may stay silent before it ends:
    /// `QUIET_FACTOR` times the longest silence a message of this connection went on after,
    /// at least `QUIET_FLOOR_NS`, at most the message gap; the gap until the connection has
    /// begun `QUIET_MESSAGES` messages. Learned per connection, from its own packets in their
    /// order, so that where a message ends does not depend on how packets of different
    /// connections interleave or on how fast the frontier moves.
    fn quiet_gap(&self, config: &FoldConfig) -> Time {
        if self.messages <= QUIET_MESSAGES {
            return config.message_gap_ns;
        }
        self.quiet_max
            .saturating_mul(QUIET_FACTOR)
            .max(QUIET_FLOOR_NS)
            .min(config.message_gap_ns)
    }

    /// How long after the last packet an open message of side `side` ends.
    fn message_wait(&self, side: usize, config: &FoldConfig) -> Time {
        if self.dirs[side].acked() {
            self.quiet_gap(config)
        } else {
            config.message_gap_ns
        }
    }

    /// When the connection next needs a look, in its own clock: the close linger once closed,
    /// the message gap (or the quiet gap) while a message is open, else the idle timeout.
    fn deadline(&self, config: &FoldConfig) -> Time {
        let after = (0..2)
            .filter(|&side| self.dirs[side].building.is_some())
            .map(|side| self.message_wait(side, config))
            .min()
            .unwrap_or_else(|| self.forget_after(config));
        self.last_ns.saturating_add(after)
    }

    /// How long after its last packet it is forgotten: the close linger once closed, a few
    /// seconds while it has carried no data (a SYN flood's or a port scan's half-open
    /// connections), else the idle timeout.
    fn forget_after(&self, config: &FoldConfig) -> Time {
        if self.done() {
            config.close_linger_ns
        } else if !self.data {
            config.close_linger_ns.max(HANDSHAKE_IDLE_NS)
        } else {
            config.conn_idle_ns
        }
    }
}

/// The connections one worker folds.
pub struct FoldTable {
    config: FoldConfig,
    alignment: Arc<Alignment>,
    table: ConnTable<ConnState>,
    deadlines: Deadlines<ConnKey>,
    /// The event times of the messages being built.
    open: MinTimes,
}

impl FoldTable {
    /// An empty table; `alignment` maps each origin's times to event time.
    pub fn new(config: FoldConfig, alignment: Arc<Alignment>) -> Self {
        FoldTable {
            config,
            alignment,
            table: ConnTable::default(),
            deadlines: Deadlines::default(),
            open: MinTimes::default(),
        }
    }

    /// Where to hold the capability with the input frontier at `now`: at the earliest event
    /// time of a message being built (to within a millisecond; nothing the fold emits later
    /// is earlier, but for packets the source sent late), at most `max_hold_ns` behind `now`.
    /// Messages open longer are forgotten here.
    pub fn hold(&mut self, now: Time) -> Time {
        self.open
            .forget_before(now.saturating_sub(self.config.max_hold_ns));
        crate::hold_at(now, self.open.min(), self.config.max_hold_ns)
    }

    /// Number of live connections.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no connection is live.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Adds a packet; sightings it completes are pushed to `out`.
    pub fn add(&mut self, p: &Packet, out: &mut Vec<Sighting>) {
        let Some(t) = p.tcp else {
            if p.payload_len > 0 || p.payload_hash != 0 {
                out.push(Sighting {
                    key: udp_key(p.payload_hash, p.payload_len),
                    origin: p.origin,
                    protocol: Protocol::Udp,
                    src: p.src,
                    dst: p.dst,
                    first_ns: p.ts_ns,
                    last_ns: p.ts_ns,
                    bytes: p.payload_len as u64,
                    ttl: p.ttl,
                    whole_start: true,
                    segments: 1,
                    retransmitted: 0,
                });
            }
            return;
        };
        let key = ConnKey::of(p);
        let i = match self.table.find(&key) {
            Some(i) => i,
            None => {
                let state = ConnState {
                    origin: p.origin,
                    dirs: Default::default(),
                    last_ns: p.ts_ns,
                    reset: false,
                    data: false,
                    listed: None,
                    messages: 0,
                    quiet_max: 0,
                };
                self.table.insert(key, state)
            }
        };
        let d = key.direction(&p.src);
        let Some(c) = self.table.slot(i) else { return };
        // What the timer ends once the frontier has passed the silence before this packet,
        // ended here too, so that where a message ends does not depend on when the frontier
        // moved: a message silent longer than the gap, or than the quiet gap with all its
        // side sent acknowledged (`ConnState::message_wait`).
        let silence = p.ts_ns.saturating_sub(c.last_ns);
        for side in 0..2 {
            // The open message first: the wait is worked out only for one (per packet, on a
            // hot path).
            let ended =
                c.dirs[side].building.is_some() && silence > c.message_wait(side, &self.config);
            if let Some(b) = c.dirs[side].building.take_if(|_| ended) {
                out.push(b.finish(c, &mut self.open));
                if silence <= self.config.message_gap_ns {
                    c.dirs[side].cut = Some(c.last_ns);
                }
            }
        }
        c.last_ns = c.last_ns.max(p.ts_ns);
        let flags = t.flags;
        if flags.has(TcpFlags::SYN) {
            c.dirs[d].next_seq = later(c.dirs[d].next_seq, Some(t.seq.wrapping_add(1)));
        }
        if flags.has(TcpFlags::ACK) {
            c.dirs[1 - d].peer_ack = later(c.dirs[1 - d].peer_ack, Some(t.ack));
        }
        let mut end = t.seq.wrapping_add(u32::from(flags.has(TcpFlags::SYN)));
        c.data |= p.payload_len > 0;
        if p.payload_len > 0 {
            // The other side's message, if any, ends where this side's data begins, for good.
            let ended = c.dirs[1 - d].building.take();
            c.dirs[1 - d].cut = None;
            let seq = end;
            end = seq.wrapping_add(p.payload_len);
            let gap = self.config.message_gap_ns;
            // A silence after which this side went on with all it had sent acknowledged (its
            // message ended by the quiet gap, by the timer or just below, or not) was within
            // a message: the connection's quiet gap learns it.
            if let Some(t0) = c.dirs[d].cut.take() {
                c.quiet_max = c.quiet_max.max(p.ts_ns.saturating_sub(t0));
            } else if c.dirs[d].acked() && c.dirs[d].building.is_some() {
                c.quiet_max = c.quiet_max.max(silence);
            }
            let dir = &mut c.dirs[d];
            // This side's message also ends where the other side's data, even unseen, came
            // in between (the acknowledgment moved on), and after a pause of its own longer
            // than the gap.
            let paused = dir
                .building
                .take_if(|b| after(t.ack, b.ack) || p.ts_ns.saturating_sub(b.last_ns) > gap);
            let known = later(dir.next_seq, dir.peer_ack);
            match &mut dir.building {
                None => {
                    if known.is_none_or(|k| after(end, k)) {
                        // Where this message begins: the next byte expected, if known.
                        let start = known.unwrap_or(seq);
                        let new = end.wrapping_sub(if after(start, seq) { start } else { seq });
                        let held_at = self.alignment.align(p.origin, p.ts_ns);
                        self.open.insert(held_at);
                        c.messages = c.messages.saturating_add(1);
                        dir.building = Some(Building {
                            held_at,
                            start_seq: start,
                            ack: t.ack,
                            first_ns: p.ts_ns,
                            last_ns: p.ts_ns,
                            bytes: new as u64,
                            ttl: p.ttl,
                            src: p.src,
                            dst: p.dst,
                            whole_start: !after(seq, start),
                            segments: 1,
                            retransmitted: 0,
                        });
                    }
                }
                Some(b) => match dir.next_seq {
                    Some(n) if !after(end, n) => {
                        b.retransmitted += 1;
                        b.last_ns = b.last_ns.max(p.ts_ns);
                    }
                    next => {
                        let from = match next {
                            Some(n) if after(n, seq) => n,
                            _ => seq,
                        };
                        b.bytes += end.wrapping_sub(from) as u64;
                        b.segments += 1;
                        b.last_ns = b.last_ns.max(p.ts_ns);
                    }
                },
            }
            dir.next_seq = later(dir.next_seq, Some(end));
            for b in [ended, paused].into_iter().flatten() {
                out.push(b.finish(c, &mut self.open));
            }
        }
        if flags.has(TcpFlags::FIN) {
            if let Some(b) = c.dirs[d].building.take() {
                out.push(b.finish(c, &mut self.open));
            }
            c.dirs[d].next_seq = later(c.dirs[d].next_seq, Some(end.wrapping_add(1)));
            c.dirs[d].closed = true;
        }
        if flags.has(TcpFlags::RST) {
            for side in 0..2 {
                if let Some(b) = c.dirs[side].building.take() {
                    out.push(b.finish(c, &mut self.open));
                }
            }
            c.reset = true;
        }
        // Listed only when due before the bucket it is listed under: one entry per
        // connection and bucket, not one per packet.
        let due = self.alignment.align(c.origin, c.deadline(&self.config));
        if c.listed
            .is_none_or(|b| Deadlines::<ConnKey>::bucket(due) < b)
        {
            c.listed = Some(self.deadlines.schedule(key, due));
        }
    }

    /// Ends messages paused longer than the gap, and forgets idle and closed connections, as
    /// of event time `now`.
    pub fn expire(&mut self, now: Time, out: &mut Vec<Sighting>) {
        let config = self.config;
        for key in self.deadlines.due(now) {
            let Some(c) = self.table.get(&key) else {
                continue;
            };
            // Its entries up to `now` are gone; later ones may remain, and are harmless.
            c.listed = None;
            let last = self.alignment.align(c.origin, c.last_ns);
            let forget = last.saturating_add(c.forget_after(&config)) < now;
            for side in 0..2 {
                let by_gap = forget || last.saturating_add(config.message_gap_ns) < now;
                let quiet = last.saturating_add(c.message_wait(side, &config)) < now;
                if by_gap || quiet {
                    if let Some(b) = c.dirs[side].building.take() {
                        out.push(b.finish(c, &mut self.open));
                        if !by_gap {
                            c.dirs[side].cut = Some(c.last_ns);
                        }
                    }
                }
            }
            if forget {
                self.table.remove(&key);
            } else {
                let due = self.alignment.align(c.origin, c.deadline(&config));
                c.listed = Some(self.deadlines.schedule(key, due));
            }
        }
    }

    /// Ends every message at the end of the input.
    pub fn flush(&mut self, out: &mut Vec<Sighting>) {
        let mut rest = Vec::new();
        for mut c in self.table.drain() {
            for side in 0..2 {
                if let Some(b) = c.dirs[side].building.take() {
                    rest.push(b.finish(&c, &mut self.open));
                }
            }
        }
        rest.sort();
        out.extend(rest);
        self.deadlines.clear();
        self.open.clear();
    }
}

/// Extension trait: sightings of a packet stream.
pub trait Fold<'scope> {
    /// Folds packets into sightings; see the module documentation.
    fn fold(
        self,
        config: FoldConfig,
        alignment: Arc<Alignment>,
    ) -> Stream<'scope, Time, Vec<Sighting>>;
}

impl<'scope> Fold<'scope> for Stream<'scope, Time, Vec<Packet>> {
    fn fold(
        self,
        config: FoldConfig,
        alignment: Arc<Alignment>,
    ) -> Stream<'scope, Time, Vec<Sighting>> {
        self.unary_frontier(
            Exchange::new(|p: &Packet| ConnKey::of(p).route()),
            "reconcile.fold",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut table = FoldTable::new(config, alignment);
                let mut out = Vec::new();
                move |(input, frontier), output| {
                    // Arrival order matters: see `flows`.
                    input.for_each(|_cap, batch| {
                        for p in batch.iter() {
                            table.add(p, &mut out);
                        }
                        batch.clear();
                    });
                    let Some(cap) = held.as_mut() else { return };
                    match frontier.frontier().iter().next().copied() {
                        Some(now) => table.expire(now, &mut out),
                        None => table.flush(&mut out),
                    }
                    if !out.is_empty() {
                        output.session(&*cap).give_iterator(out.drain(..));
                    }
                    // Held at the oldest message still being built, so that downstream
                    // operators need not wait out the message gap themselves.
                    match frontier.frontier().iter().next() {
                        Some(t) => {
                            let t = table.hold(*t);
                            if t > *cap.time() {
                                cap.downgrade(&t);
                            }
                        }
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
    use causeway_sources::{OriginId, TcpFields};

    fn tcp(ts: Time, src: &str, dst: &str, seq: u32, ack: u32, flags: u8, len: u32) -> Packet {
        Packet {
            ts_ns: ts,
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
                window: 100,
                window_scale: None,
            }),
            payload_len: len,
            payload_hash: len as u64,
            payload_truncated: false,
            wire_len: 54 + len,
        }
    }

    const A: u8 = TcpFlags::ACK;
    const PA: u8 = TcpFlags::PSH | TcpFlags::ACK;
    const C: &str = "10.0.0.1:40000";
    const S: &str = "10.0.0.2:80";

    fn run(packets: &[Packet]) -> Vec<Sighting> {
        let mut t = FoldTable::new(FoldConfig::default(), Arc::new(Alignment::none()));
        let mut out = Vec::new();
        for p in packets {
            t.add(p, &mut out);
        }
        t.flush(&mut out);
        out
    }

    #[test]
    fn segments_fold_into_messages_at_direction_changes() {
        let out = run(&[
            tcp(1, C, S, 100, 0, TcpFlags::SYN, 0),
            tcp(2, S, C, 500, 101, TcpFlags::SYN | A, 0),
            tcp(3, C, S, 101, 501, A, 0),
            tcp(4, C, S, 101, 501, PA, 300),
            tcp(5, S, C, 501, 401, A, 0),
            tcp(6, S, C, 501, 401, A, 1448),
            tcp(7, S, C, 1949, 401, A, 1448),
            tcp(8, S, C, 1949, 401, A, 1448), // a retransmission
            tcp(9, S, C, 3397, 401, PA, 100),
            tcp(10, C, S, 401, 3497, PA, 50),
        ]);
        assert_eq!(out.len(), 3);
        assert_eq!((out[0].bytes, out[0].first_ns, out[0].last_ns), (300, 4, 4));
        assert_eq!(out[0].key, tcp_key(101, 501));
        assert_eq!(
            (out[1].bytes, out[1].segments, out[1].retransmitted),
            (2996, 3, 1)
        );
        assert_eq!((out[1].first_ns, out[1].last_ns), (6, 9));
        assert_eq!(out[1].key, tcp_key(501, 401));
        assert_eq!(out[2].key, tcp_key(401, 3497));
    }

    #[test]
    fn a_sniffer_that_lost_the_first_segment_names_the_message_alike() {
        // This sniffer never saw the 1448 bytes at 501: the client's ACK tells where they began.
        let out = run(&[
            tcp(4, C, S, 101, 501, PA, 300),
            tcp(5, C, S, 401, 501, A, 0),
            tcp(7, S, C, 1949, 401, PA, 100),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].key, tcp_key(501, 401));
        assert!(!out[1].whole_start);
        assert_eq!(out[1].bytes, 100);
    }

    #[test]
    fn a_missed_answer_still_separates_two_requests() {
        // The answer (501..601) was lost at this sniffer; the second request acknowledges it.
        let out = run(&[
            tcp(4, C, S, 101, 501, PA, 300),
            tcp(6, C, S, 401, 601, A, 0),
            tcp(7, C, S, 401, 601, PA, 200),
            tcp(2_000_000_000, C, S, 601, 701, PA, 10),
            tcp(4_000_000_000, C, S, 611, 701, PA, 10),
        ]);
        let keys: Vec<(u64, u64)> = out.iter().map(|s| (s.key, s.bytes)).collect();
        assert_eq!(
            keys,
            vec![
                (tcp_key(101, 501), 300),
                (tcp_key(401, 601), 200),
                (tcp_key(601, 701), 10),
                (tcp_key(611, 701), 10),
            ],
            "an acknowledgment that moved on, or a pause longer than the gap, ends a message"
        );
    }

    /// A keep-alive connection's `n` exchanges, 10 ms (and `within`) apart: a 100-byte request, its
    /// acknowledgment, a 200-byte reply in two writes `within` apart (the first acknowledged
    /// before the second), the reply's acknowledgment.
    fn exchanges(n: u32, within: Time) -> Vec<Packet> {
        let ms = 1_000_000;
        let mut out = Vec::new();
        for i in 0..n {
            let t = 1 + Time::from(i) * (10 * ms + within);
            let (c, s) = (1 + i * 100, 1 + i * 200);
            out.push(tcp(t, C, S, c, s, PA, 100));
            out.push(tcp(t + 1, S, C, s, c + 100, A, 0));
            out.push(tcp(t + 2, S, C, s, c + 100, PA, 100));
            out.push(tcp(t + 3, C, S, c + 100, s + 100, A, 0));
            out.push(tcp(t + 3 + within, S, C, s + 100, c + 100, PA, 100));
            out.push(tcp(t + 4 + within, C, S, c + 100, s + 200, A, 0));
        }
        out
    }

    #[test]
    fn an_idle_connections_last_reply_ends_at_its_quiet_gap_not_the_message_gap() {
        let ms = 1_000_000;
        let mut t = FoldTable::new(FoldConfig::default(), Arc::new(Alignment::none()));
        let mut out = Vec::new();
        for p in exchanges(20, 0) {
            t.add(&p, &mut out);
        }
        // 19 replies ended by the next request; the last one is open, all of it acknowledged.
        assert_eq!(out.len(), 39);
        let last = 1 + 19 * 10 * ms + 4;
        t.expire(last + 2 * QUIET_FLOOR_NS, &mut out);
        assert_eq!(
            out.len(),
            40,
            "ended after the quiet gap, well before the 1 s gap"
        );
        assert_eq!(out[39].bytes, 200);
        assert!(t.hold(last + 2 * QUIET_FLOOR_NS) > last);
    }

    #[test]
    fn a_connection_that_pauses_within_its_replies_learns_to_wait_longer() {
        let ms = 1_000_000;
        // Replies written in two parts 3 ms apart: learned from the first messages, the
        // quiet gap (4 x 3 ms, at least the floor) keeps every reply whole.
        let whole = run(&exchanges(20, 3 * ms));
        assert_eq!(whole.len(), 40);
        assert!(whole.iter().all(|s| s.bytes == 100 || s.bytes == 200));
        // Parts 80 ms apart, past the floor: the connection's first replies, before it has
        // learned, wait the message gap and stay whole, and teach it the silence; later ones
        // stay whole too, whether ended by the timer or by the next packet.
        let slow = run(&exchanges(20, 80 * ms));
        assert_eq!(slow.len(), 40);
        let mut t = FoldTable::new(FoldConfig::default(), Arc::new(Alignment::none()));
        let mut timed = Vec::new();
        for p in exchanges(20, 80 * ms) {
            t.expire(p.ts_ns, &mut timed);
            t.add(&p, &mut timed);
        }
        t.flush(&mut timed);
        let key = |v: &[Sighting]| v.iter().map(|s| (s.key, s.bytes)).collect::<Vec<_>>();
        assert_eq!(
            key(&timed),
            key(&slow),
            "the timer and the packets end messages alike"
        );
    }

    #[test]
    fn datagrams_are_messages_and_pure_acks_are_not() {
        let mut udp = tcp(1, "10.0.0.3:5353", "10.0.0.4:53", 0, 0, 0, 40);
        udp.protocol = Protocol::Udp;
        udp.tcp = None;
        let out = run(&[udp, tcp(2, C, S, 1, 1, A, 0), tcp(3, S, C, 1, 1, A, 0)]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].key, udp_key(40, 40));
    }
}
