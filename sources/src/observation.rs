//! The records that sources emit (observations: [`Packet`]s and [`TraceRow`]s) and their
//! parts.
//!
//! Observations are plain owned values (what timely's exchange needs). Parsing is zero-copy
//! inside a source; what leaves it is compact: a packet observation holds header fields, the
//! payload length and a 64-bit hash of the payload, never the payload bytes.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::origin::OriginId;

/// Event time: nanoseconds since the Unix epoch in the clock of the record's origin.
pub type Nanos = u64;

/// A transport endpoint: an IP address and a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    /// IPv4 or IPv6 address.
    pub ip: IpAddr,
    /// TCP or UDP port.
    pub port: u16,
}

impl Endpoint {
    /// An endpoint from its parts.
    pub fn new(ip: impl Into<IpAddr>, port: u16) -> Self {
        Endpoint {
            ip: ip.into(),
            port,
        }
    }
}

impl Default for Endpoint {
    /// `0.0.0.0:0`.
    fn default() -> Self {
        Endpoint::new(std::net::Ipv4Addr::UNSPECIFIED, 0)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            IpAddr::V4(ip) => write!(f, "{ip}:{}", self.port),
            IpAddr::V6(ip) => write!(f, "[{ip}]:{}", self.port),
        }
    }
}

impl FromStr for Endpoint {
    type Err = std::net::AddrParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let addr: SocketAddr = s.parse()?;
        Ok(Endpoint::new(addr.ip(), addr.port()))
    }
}

/// Transport protocol of a packet or message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Protocol {
    /// Lower-case name, as used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// TCP flag bits, in the order of the TCP header's flag byte.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No more data from the sender.
    pub const FIN: u8 = 0x01;
    /// Synchronise sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push.
    pub const PSH: u8 = 0x08;
    /// The acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// The urgent pointer is significant.
    pub const URG: u8 = 0x20;
    /// ECN echo.
    pub const ECE: u8 = 0x40;
    /// Congestion window reduced.
    pub const CWR: u8 = 0x80;

    /// Whether every bit of `mask` is set.
    pub fn has(self, mask: u8) -> bool {
        self.0 & mask == mask
    }
}

impl fmt::Display for TcpFlags {
    /// tcpdump's notation: `[S.]` for SYN+ACK, `[P.]`, `[F.]`, `[R]`, `[.]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (bit, c) in [
            (Self::SYN, 'S'),
            (Self::FIN, 'F'),
            (Self::PSH, 'P'),
            (Self::RST, 'R'),
            (Self::URG, 'U'),
            (Self::ECE, 'E'),
            (Self::CWR, 'W'),
        ] {
            if self.has(bit) {
                write!(f, "{c}")?;
            }
        }
        if self.has(Self::ACK) {
            f.write_str(".")?;
        }
        f.write_str("]")
    }
}

/// TCP header fields of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TcpFields {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (meaningful when the ACK flag is set).
    pub ack: u32,
    /// Flag bits.
    pub flags: TcpFlags,
    /// Advertised receive window, unscaled.
    pub window: u16,
    /// Window-scale option, present on SYN segments that carry it.
    pub window_scale: Option<u8>,
}

/// One captured IP packet carrying TCP or UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Packet {
    /// Event time in the origin's clock.
    pub ts_ns: Nanos,
    /// The sniffer that saw it (its clock domain).
    pub origin: OriginId,
    /// Sender address and port.
    pub src: Endpoint,
    /// Receiver address and port.
    pub dst: Endpoint,
    /// TCP or UDP.
    pub protocol: Protocol,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// IPv4 identification; 0 for IPv6.
    pub ip_id: u16,
    /// TCP header fields; `None` for UDP.
    pub tcp: Option<TcpFields>,
    /// Transport payload length in bytes, from the headers (also when the capture was cut
    /// short by the snap length).
    pub payload_len: u32,
    /// xxh3-64 of the captured payload bytes; 0 when the payload is empty. Copies of one packet
    /// seen by several sniffers share it.
    pub payload_hash: u64,
    /// The snap length cut the payload: `payload_hash` covers only its captured prefix.
    pub payload_truncated: bool,
    /// Length of the frame on the wire.
    pub wire_len: u32,
}

#[cfg(test)]
impl Packet {
    /// An empty UDP datagram at `ts_ns` from 10.0.0.1:80 to itself, for tests.
    pub(crate) fn test_at(ts_ns: Nanos) -> Packet {
        let end = Endpoint::new([10, 0, 0, 1], 80);
        Packet {
            ts_ns,
            origin: OriginId(0),
            src: end,
            dst: end,
            protocol: Protocol::Udp,
            ttl: 64,
            ip_id: 0,
            tcp: None,
            payload_len: 0,
            payload_hash: 0,
            payload_truncated: false,
            wire_len: 60,
        }
    }
}

/// An address in a message trace: an IP endpoint, or a name (a node name, a UNIX socket path).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Address {
    /// `ip:port`.
    Endpoint(Endpoint),
    /// Anything else, kept verbatim.
    Name(String),
}

impl Default for Address {
    fn default() -> Self {
        Address::Name(String::new())
    }
}

impl Address {
    /// Parses `ip:port` (or `[v6]:port`) as an endpoint, anything else as a name.
    pub fn parse(s: &str) -> Address {
        match s.parse::<Endpoint>() {
            Ok(e) => Address::Endpoint(e),
            Err(_) => Address::Name(s.to_owned()),
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Endpoint(e) => e.fmt(f),
            Address::Name(n) => f.write_str(n),
        }
    }
}

/// The role of a message in a message trace (Project 5 §6.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MessageKind {
    /// An RPC call.
    Call,
    /// The return of an RPC call.
    Return,
    /// A request (client/server protocols).
    Request,
    /// A response.
    Response,
    /// A free-form message.
    Message,
}

impl MessageKind {
    /// Parses the trace's `kind` column (case-insensitive).
    pub fn parse(s: &str) -> Option<MessageKind> {
        let s = s.trim();
        [
            MessageKind::Call,
            MessageKind::Return,
            MessageKind::Request,
            MessageKind::Response,
            MessageKind::Message,
        ]
        .into_iter()
        .find(|k| k.as_str().eq_ignore_ascii_case(s))
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::Call => "call",
            MessageKind::Return => "return",
            MessageKind::Request => "request",
            MessageKind::Response => "response",
            MessageKind::Message => "message",
        }
    }
}

/// One data row of a message trace: a message with its send and receive timestamps, each in
/// the clock of the node that observed it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TraceRow {
    /// The trace file it came from.
    pub origin: OriginId,
    /// 0-based data row (the header is not counted).
    pub row: u64,
    /// Send time in the sender's clock; `None` where the send side was not observed.
    pub send_ns: Option<Nanos>,
    /// Receive time in the receiver's clock; `None` where the receive side was not observed.
    pub recv_ns: Option<Nanos>,
    /// Event time: the send time (else the receive time) in the reference clock, as the
    /// coarse clock alignment of the trace's hosts puts it (`crate::ordered`); the raw time
    /// where the trace is read without one.
    pub event_ns: Nanos,
    /// Sender.
    pub src: Address,
    /// Receiver.
    pub dst: Address,
    /// Message size, when the trace gives it.
    pub bytes: Option<u64>,
    /// Call, return, request, response or message, when the trace gives it.
    pub kind: Option<MessageKind>,
    /// Call identifier pairing a call with its return, when the trace gives it.
    pub call_id: Option<String>,
}

impl TraceRow {
    /// The row's raw time: its send time in the sender's clock, or its receive time in the
    /// receiver's when the send side is absent. Its event time is [`TraceRow::event_ns`].
    pub fn ts_ns(&self) -> Nanos {
        self.send_ns.or(self.recv_ns).unwrap_or(0)
    }
}

/// How a socket carries data.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Transport {
    /// TCP: a byte stream.
    #[default]
    Tcp,
    /// UDP datagrams.
    Udp,
    /// A UNIX-domain stream socket.
    UnixStream,
    /// UNIX-domain datagrams.
    UnixDgram,
}

impl Transport {
    /// Whether it carries a byte stream (writes and reads need not align) rather than
    /// datagrams.
    pub fn is_stream(self) -> bool {
        matches!(self, Transport::Tcp | Transport::UnixStream)
    }

    /// The packet protocol, for IP transports.
    pub fn protocol(self) -> Option<Protocol> {
        match self {
            Transport::Tcp => Some(Protocol::Tcp),
            Transport::Udp => Some(Protocol::Udp),
            Transport::UnixStream | Transport::UnixDgram => None,
        }
    }
}

/// Which way data went in a socket call.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Direction {
    /// The process sent (write, send, sendto, sendmsg, writev, sendfile).
    #[default]
    Send,
    /// The process received (read, recv, recvfrom, recvmsg, readv).
    Recv,
}

/// Which end of a stream connection opened it, as the process that made a call saw it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Opener {
    /// The process connected: its own end is the connection's initiator.
    Local,
    /// The process accepted: the other end connected.
    Peer,
    /// The log does not say (a descriptor whose `connect` or `accept` was not logged).
    #[default]
    Unknown,
}

/// One data-carrying socket call of a traced process (WAP5 §3, Table 1), with its descriptor
/// already resolved to the connection's two endpoints by the socket-log source.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SocketCall {
    /// The capture it came from: one traced host, whose clock stamped it.
    pub origin: OriginId,
    /// Time of the call (CLOCK_REALTIME of the traced host), ns.
    pub ts_ns: Nanos,
    /// The process (`program[pid]@host`) or the host, as `--node-granularity` says.
    pub node: String,
    /// How the socket carries data.
    pub transport: Transport,
    /// This process's end of the connection: `ip:port`, or `unix:PATH` (the server side of a
    /// UNIX socket) / `unix:PATH#PID` (its client side).
    pub local: Address,
    /// The other end, named the same way.
    pub peer: Address,
    /// Sent or received.
    pub direction: Direction,
    /// For stream sockets: bytes this process had already sent (or received) on the connection
    /// before this call, so that both ends number the bytes alike.
    pub offset: u64,
    /// Bytes the call moved (its return value).
    pub bytes: u64,
    /// For datagrams: a hash of the payload, equal on both ends.
    pub payload_hash: u64,
    /// For stream sockets: which end connected. The connecting end's address is the one a
    /// destination NAT (a load balancer's virtual IP) leaves alone, so both ends of a
    /// translated connection still share it.
    pub opener: Opener,
}

/// A batch of observations from one reader, by kind. A reader fills only the vector of its own
/// kind; the source operator sends each vector on its own typed stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Captured packets.
    pub packets: Vec<Packet>,
    /// Message-trace rows.
    pub rows: Vec<TraceRow>,
    /// Socket calls.
    pub calls: Vec<SocketCall>,
    /// TCP statistics samples.
    pub tcp: Vec<crate::tcpstats::TcpSample>,
}

impl Batch {
    /// Number of observations.
    pub fn len(&self) -> usize {
        self.packets.len() + self.rows.len() + self.calls.len() + self.tcp.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the observations stamped before `min_ns` (as [`Batch::ts_at`] reads their
    /// times); returns how many.
    pub fn drop_before(&mut self, min_ns: Nanos) -> usize {
        let before = self.len();
        self.packets.retain(|p| p.ts_ns >= min_ns);
        self.rows.retain(|r| r.event_ns >= min_ns);
        self.calls.retain(|c| c.ts_ns >= min_ns);
        self.tcp.retain(|t| t.ts_ns >= min_ns);
        before - self.len()
    }

    /// Empties it, keeping capacity.
    pub fn clear(&mut self) {
        self.packets.clear();
        self.rows.clear();
        self.calls.clear();
        self.tcp.clear();
    }

    /// Time of the `i`-th observation of the (single) kind it holds: its raw time, which its
    /// origin's coarse clock offset turns into event time, or for a trace row its event time
    /// (aligned per host by the reader; a trace's origin has no offset of its own).
    pub fn ts_at(&self, i: usize) -> Option<Nanos> {
        match (self.packets.get(i), self.rows.get(i)) {
            (Some(p), _) => Some(p.ts_ns),
            (None, Some(r)) => Some(r.event_ns),
            (None, None) => self
                .calls
                .get(i)
                .map(|c| c.ts_ns)
                .or_else(|| self.tcp.get(i).map(|t| t.ts_ns)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_round_trips_through_text() {
        for s in ["10.0.0.1:80", "[::1]:443", "[fe80::1]:5353"] {
            let e: Endpoint = s.parse().unwrap();
            assert_eq!(e.to_string(), s);
        }
        assert!("10.0.0.1".parse::<Endpoint>().is_err());
    }

    #[test]
    fn address_falls_back_to_name() {
        assert_eq!(
            Address::parse("10.0.0.1:80"),
            Address::Endpoint("10.0.0.1:80".parse().unwrap())
        );
        assert_eq!(Address::parse("web1"), Address::Name("web1".into()));
        assert_eq!(
            Address::parse("/run/app.sock"),
            Address::Name("/run/app.sock".into())
        );
    }

    #[test]
    fn flags_print_like_tcpdump() {
        assert_eq!(TcpFlags(TcpFlags::SYN).to_string(), "[S]");
        assert_eq!(TcpFlags(TcpFlags::SYN | TcpFlags::ACK).to_string(), "[S.]");
        assert_eq!(TcpFlags(TcpFlags::PSH | TcpFlags::ACK).to_string(), "[P.]");
        assert_eq!(TcpFlags(TcpFlags::ACK).to_string(), "[.]");
    }
}
