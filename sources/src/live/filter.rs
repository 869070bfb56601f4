//! Capture filters: a subset of tcpdump's expression language (pcap-filter(7)), compiled to a
//! classic BPF program that the kernel runs on every packet before it reaches the ring.
//!
//! # Language
//!
//! ```text
//! expr      := term (("and" | "&&" | "or" | "||") term)*     equal precedence, left to right
//! term      := ("not" | "!") term | "(" expr ")" | primitive | value
//! primitive := [proto] [dir] [type] value  |  proto
//! proto     := ip | ip6 | arp | tcp | udp | sctp | icmp | icmp6
//! dir       := src | dst | src or dst | src and dst
//! type      := host ADDR | net ADDR/LEN | port N | portrange N-M
//! ```
//!
//! As in tcpdump, `and` and `or` have the same precedence and associate to the left
//! (`a or b and c` is `(a or b) and c`); `not` binds tightest. A bare value repeats the
//! qualifiers of the primitive before it: `port 80 or 443` is `port 80 or port 443`,
//! `tcp dst port 80 or 8080` is `tcp dst port 80 or tcp dst port 8080`. A type may be left out
//! when the value says it (`src 10.0.0.1` is `src host 10.0.0.1`, `dst 10.0.0.0/8` is
//! `dst net 10.0.0.0/8`). Addresses are numeric (IPv4 or IPv6); ports are numbers. Service and
//! host names are not looked up.
//!
//! # Meaning
//!
//! The same as tcpdump's on the packets this sniffer sees: `ip`, `ip6` and `arp` test the
//! link-layer protocol; `tcp`, `udp`, `sctp` test the IPv4 protocol field or the IPv6 next
//! header, or the next header after an IPv6 fragment header (other extension headers are not
//! walked, as in tcpdump); `icmp` is IPv4 only and `icmp6` IPv6 only; `host` and `net` test
//! the IP source and/or destination (tcpdump also tests the addresses in ARP packets; this
//! does not); `port` and `portrange` test the TCP, UDP or SCTP ports (of the first fragment
//! only for IPv4, right after the fixed header for IPv6; with a protocol qualifier, that
//! protocol only). A packet too short for a field a test reads is rejected whatever the rest
//! of the expression says, as in BPF. A test compares the two on generated packets when
//! tcpdump is installed.
//!
//! # Layers
//!
//! - [`Filter::parse`]: text to [`Expr`] (recursive descent, errors with their column);
//! - lowering: [`Expr`] to a small core of loads and comparisons ([`Core`]), given where the
//!   network header starts ([`Layout`]);
//! - [`compile`]: [`Core`] to a classic BPF [`Program`] by short-circuit code generation
//!   (forward jumps only; a conditional jump too long for BPF's 8-bit offsets makes the whole
//!   program use unconditional 32-bit jumps instead);
//! - [`Program::run`]: a classic BPF interpreter for the instructions [`compile`] emits, used
//!   when the kernel refuses the program (the filter then runs in user space on every packet
//!   read from the ring) and by the tests, which check that the compiled program and a direct
//!   evaluation of [`Core`] agree on arbitrary packets.
//!
//! Cost: parsing and compiling are done once. In the kernel, a filter costs a few instructions
//! per primitive per packet (about 10 for `tcp and port 80`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A parsed capture filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    text: String,
    expr: Expr,
}

/// Why a filter expression was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("filter `{text}`: {message} (at column {column})")]
pub struct FilterError {
    /// The expression.
    pub text: String,
    /// 1-based column of the offending token (one past the end for "expected more").
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// A filter expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// One test.
    Prim(Prim),
    /// Negation.
    Not(Box<Expr>),
    /// Both.
    And(Box<Expr>, Box<Expr>),
    /// Either.
    Or(Box<Expr>, Box<Expr>),
}

/// A link-layer protocol keyword.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ether {
    /// IPv4 (EtherType 0x0800).
    Ip,
    /// IPv6 (0x86dd).
    Ip6,
    /// ARP (0x0806).
    Arp,
}

/// A transport-protocol keyword.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// TCP (6).
    Tcp,
    /// UDP (17).
    Udp,
    /// SCTP (132).
    Sctp,
    /// ICMP (1), over IPv4 only.
    Icmp,
    /// ICMPv6 (58), over IPv6 only.
    Icmp6,
}

/// Which address or port a test looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    /// The source.
    Src,
    /// The destination.
    Dst,
    /// Either (the default).
    SrcOrDst,
    /// Both.
    SrcAndDst,
}

/// One primitive test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prim {
    /// `ip`, `ip6`, `arp`.
    Ether(Ether),
    /// `tcp`, `udp`, `sctp`, `icmp`, `icmp6`.
    Transport(Transport),
    /// `[src|dst] host ADDR`.
    Host {
        /// Which address.
        dir: Dir,
        /// The address.
        addr: IpAddr,
    },
    /// `[src|dst] net ADDR/LEN`.
    Net {
        /// Which address.
        dir: Dir,
        /// The network (host bits zero).
        addr: IpAddr,
        /// Prefix length.
        prefix: u8,
    },
    /// `[tcp|udp|sctp] [src|dst] port N` and `portrange N-M`.
    Port {
        /// Only this transport (TCP, UDP or SCTP), else any of the three.
        proto: Option<Transport>,
        /// Which port.
        dir: Dir,
        /// Lowest port.
        lo: u16,
        /// Highest port (equal to `lo` for `port`).
        hi: u16,
    },
}

impl Filter {
    /// Parses a filter expression.
    pub fn parse(text: &str) -> Result<Filter, FilterError> {
        let tokens = tokenize(text)?;
        let mut p = Parser {
            text,
            tokens,
            pos: 0,
            last: None,
        };
        if p.tokens.is_empty() {
            return Err(p.error_at(text.len(), "empty expression".into()));
        }
        let expr = p.expr()?;
        if let Some(t) = p.peek() {
            let message = format!("unexpected `{}`", t.text);
            return Err(p.error_at(t.at, message));
        }
        Ok(Filter {
            text: text.to_owned(),
            expr,
        })
    }

    /// The expression as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The parsed expression.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }
}

/// Where the network header starts in the bytes the kernel filters: 0 for SOCK_DGRAM (cooked)
/// sockets, 14 for SOCK_RAW sockets on Ethernet (and loopback) interfaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the network header.
    pub nh: u32,
}

// ---------------------------------------------------------------------------------------
// Parsing

#[derive(Clone, Debug)]
struct Token<'a> {
    text: &'a str,
    at: usize,
}

fn tokenize(text: &str) -> Result<Vec<Token<'_>>, FilterError> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'(' || c == b')' {
            out.push(Token {
                text: &text[i..i + 1],
                at: i,
            });
            i += 1;
        } else if text[i..].starts_with("&&") || text[i..].starts_with("||") {
            out.push(Token {
                text: &text[i..i + 2],
                at: i,
            });
            i += 2;
        } else if c == b'!' {
            out.push(Token {
                text: &text[i..i + 1],
                at: i,
            });
            i += 1;
        } else {
            let start = i;
            while i < bytes.len()
                && !bytes[i].is_ascii_whitespace()
                && !matches!(bytes[i], b'(' | b')' | b'!' | b'&' | b'|')
            {
                i += 1;
            }
            if i == start {
                // A lone '&' or '|'.
                return Err(FilterError {
                    text: text.to_owned(),
                    column: column(text, i),
                    message: format!("unexpected `{}`", &text[i..i + 1]),
                });
            }
            out.push(Token {
                text: &text[start..i],
                at: start,
            });
        }
    }
    Ok(out)
}

/// 1-based character column of byte offset `at`.
fn column(text: &str, at: usize) -> usize {
    text.get(..at).map_or(at, |s| s.chars().count()) + 1
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Host,
    Net,
    Port,
    PortRange,
}

/// Qualifiers of the last primitive, for bare values that follow.
#[derive(Clone, Copy, Debug)]
struct Quals {
    proto: Option<Proto>,
    dir: Option<Dir>,
    kind: Kind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Ether(Ether),
    Transport(Transport),
}

fn proto_word(w: &str) -> Option<Proto> {
    Some(match w {
        "ip" => Proto::Ether(Ether::Ip),
        "ip6" => Proto::Ether(Ether::Ip6),
        "arp" => Proto::Ether(Ether::Arp),
        "tcp" => Proto::Transport(Transport::Tcp),
        "udp" => Proto::Transport(Transport::Udp),
        "sctp" => Proto::Transport(Transport::Sctp),
        "icmp" => Proto::Transport(Transport::Icmp),
        "icmp6" => Proto::Transport(Transport::Icmp6),
        _ => return None,
    })
}

fn kind_word(w: &str) -> Option<Kind> {
    Some(match w {
        "host" => Kind::Host,
        "net" => Kind::Net,
        "port" => Kind::Port,
        "portrange" => Kind::PortRange,
        _ => return None,
    })
}

fn is_keyword(w: &str) -> bool {
    proto_word(w).is_some()
        || kind_word(w).is_some()
        || matches!(w, "src" | "dst" | "and" | "or" | "not")
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token<'a>>,
    pos: usize,
    last: Option<Quals>,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Token<'a>> {
        self.tokens.get(self.pos)
    }

    fn peek_at(&self, k: usize) -> Option<&'a str> {
        self.tokens.get(self.pos + k).map(|t| t.text)
    }

    fn next(&mut self) -> Option<Token<'a>> {
        let t = self.tokens.get(self.pos).cloned();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    fn error_at(&self, at: usize, message: String) -> FilterError {
        FilterError {
            text: self.text.to_owned(),
            column: column(self.text, at),
            message,
        }
    }

    fn error_here(&self, message: String) -> FilterError {
        let at = self.peek().map_or(self.text.len(), |t| t.at);
        self.error_at(at, message)
    }

    fn expr(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.term()?;
        loop {
            match self.peek().map(|t| t.text) {
                Some("and" | "&&") => {
                    self.pos += 1;
                    let right = self.term()?;
                    left = Expr::And(Box::new(left), Box::new(right));
                }
                Some("or" | "||") => {
                    self.pos += 1;
                    let right = self.term()?;
                    left = Expr::Or(Box::new(left), Box::new(right));
                }
                _ => return Ok(left),
            }
        }
    }

    fn term(&mut self) -> Result<Expr, FilterError> {
        let Some(t) = self.peek().cloned() else {
            return Err(self.error_here("expected a test after this".into()));
        };
        match t.text {
            "not" | "!" => {
                self.pos += 1;
                Ok(Expr::Not(Box::new(self.term()?)))
            }
            "(" => {
                self.pos += 1;
                let e = self.expr()?;
                match self.next() {
                    Some(c) if c.text == ")" => Ok(e),
                    Some(c) => Err(self.error_at(c.at, format!("expected `)`, got `{}`", c.text))),
                    None => Err(self.error_at(self.text.len(), "missing `)`".into())),
                }
            }
            ")" | "and" | "&&" | "or" | "||" => {
                Err(self.error_at(t.at, format!("expected a test, got `{}`", t.text)))
            }
            _ => self.primitive().map(Expr::Prim),
        }
    }

    /// A direction, if one starts here: `src`, `dst`, `src or dst`, `src and dst`.
    fn dir(&mut self) -> Option<Dir> {
        let first = match self.peek_at(0) {
            Some("src") => Dir::Src,
            Some("dst") => Dir::Dst,
            _ => return None,
        };
        self.pos += 1;
        if first == Dir::Src && self.peek_at(1) == Some("dst") {
            // `src or dst` / `src and dst`, unless `dst` starts the next test: `src X or dst Y`
            // has a value after `src`, so we are not here then.
            match self.peek_at(0) {
                Some("or") => {
                    self.pos += 2;
                    return Some(Dir::SrcOrDst);
                }
                Some("and") => {
                    self.pos += 2;
                    return Some(Dir::SrcAndDst);
                }
                _ => {}
            }
        }
        Some(first)
    }

    fn primitive(&mut self) -> Result<Prim, FilterError> {
        let proto = self.peek_at(0).and_then(proto_word);
        if proto.is_some() {
            self.pos += 1;
        }
        let dir = self.dir();
        let kind = self.peek_at(0).and_then(kind_word);
        if kind.is_some() {
            self.pos += 1;
        }
        let nothing_qualified = proto.is_none() && dir.is_none() && kind.is_none();
        // A protocol alone.
        if let (Some(p), None, None) = (proto, dir, kind) {
            let value_follows = self
                .peek_at(0)
                .is_some_and(|w| !is_keyword(w) && !matches!(w, "(" | ")" | "!" | "&&" | "||"));
            if !value_follows {
                return Ok(match p {
                    Proto::Ether(e) => Prim::Ether(e),
                    Proto::Transport(t) => Prim::Transport(t),
                });
            }
        }
        let Some(value) = self.next() else {
            return Err(self.error_here("expected a value after this".into()));
        };
        if is_keyword(value.text) || matches!(value.text, "(" | ")" | "!" | "&&" | "||") {
            return Err(self.error_at(value.at, format!("expected a value, got `{}`", value.text)));
        }
        let quals = if nothing_qualified {
            // A bare value: the qualifiers of the previous primitive.
            match self.last {
                Some(q) => q,
                None => {
                    return Err(self.error_at(
                        value.at,
                        format!(
                            "`{}` is not a test (expected host, net, port, portrange, ip, ip6, \
                             arp, tcp, udp, sctp, icmp, icmp6, src, dst, not, or `(`)",
                            value.text
                        ),
                    ));
                }
            }
        } else {
            let kind = match kind {
                Some(k) => k,
                None if value.text.contains('/') => Kind::Net,
                None if value.text.parse::<IpAddr>().is_ok() => Kind::Host,
                None => {
                    return Err(self.error_at(
                        value.at,
                        format!(
                            "`{}`: say what it is (host, net, port or portrange)",
                            value.text
                        ),
                    ));
                }
            };
            Quals { proto, dir, kind }
        };
        let prim = self
            .build(quals, value.text)
            .map_err(|m| self.error_at(value.at, m))?;
        self.last = Some(quals);
        Ok(prim)
    }

    fn build(&self, q: Quals, value: &str) -> Result<Prim, String> {
        let dir = q.dir.unwrap_or(Dir::SrcOrDst);
        match q.kind {
            Kind::Host | Kind::Net => {
                let (addr, prefix) = if q.kind == Kind::Net {
                    let (a, len) = match value.split_once('/') {
                        Some((a, len)) => (a, Some(len)),
                        None => (value, None),
                    };
                    let addr: IpAddr = a.parse().map_err(|_| {
                        format!("`{a}` is not an IP address (names are not looked up)")
                    })?;
                    let max = if addr.is_ipv4() { 32 } else { 128 };
                    let prefix = match len {
                        None => max,
                        Some(l) => match l.parse::<u8>() {
                            Ok(p) if p <= max => p,
                            _ => return Err(format!("`{l}` is not a prefix length (0-{max})")),
                        },
                    };
                    (addr, prefix)
                } else {
                    let addr: IpAddr = value.parse().map_err(|_| {
                        format!("`{value}` is not an IP address (names are not looked up)")
                    })?;
                    (addr, if addr.is_ipv4() { 32 } else { 128 })
                };
                match q.proto {
                    None => {}
                    Some(Proto::Ether(Ether::Ip)) if addr.is_ipv4() => {}
                    Some(Proto::Ether(Ether::Ip6)) if addr.is_ipv6() => {}
                    Some(p) => {
                        return Err(format!(
                            "`{}` does not qualify the address {addr}",
                            proto_name(p)
                        ));
                    }
                }
                if q.kind == Kind::Host {
                    return Ok(Prim::Host { dir, addr });
                }
                let masked = mask_addr(addr, prefix);
                if masked != addr {
                    return Err(format!(
                        "`{value}` has host bits set (the network is {masked}/{prefix})"
                    ));
                }
                Ok(Prim::Net { dir, addr, prefix })
            }
            Kind::Port | Kind::PortRange => {
                let proto = match q.proto {
                    None => None,
                    Some(Proto::Transport(
                        t @ (Transport::Tcp | Transport::Udp | Transport::Sctp),
                    )) => Some(t),
                    Some(p) => {
                        return Err(format!(
                            "`{}` has no ports (tcp, udp or sctp do)",
                            proto_name(p)
                        ));
                    }
                };
                let port = |s: &str| {
                    s.parse::<u16>().map_err(|_| {
                        format!("`{s}` is not a port number (0-65535; names are not looked up)")
                    })
                };
                let (lo, hi) = if q.kind == Kind::Port {
                    let p = port(value)?;
                    (p, p)
                } else {
                    let Some((a, b)) = value.split_once('-') else {
                        return Err(format!("`{value}`: expected a range such as 8000-8080"));
                    };
                    let (a, b) = (port(a)?, port(b)?);
                    (a.min(b), a.max(b))
                };
                Ok(Prim::Port { proto, dir, lo, hi })
            }
        }
    }
}

fn proto_name(p: Proto) -> &'static str {
    match p {
        Proto::Ether(e) => e.name(),
        Proto::Transport(t) => t.name(),
    }
}

fn mask_addr(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix))
            };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix))
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

impl Ether {
    fn name(self) -> &'static str {
        match self {
            Ether::Ip => "ip",
            Ether::Ip6 => "ip6",
            Ether::Arp => "arp",
        }
    }

    fn ether_type(self) -> u32 {
        match self {
            Ether::Ip => 0x0800,
            Ether::Ip6 => 0x86dd,
            Ether::Arp => 0x0806,
        }
    }
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
            Transport::Sctp => "sctp",
            Transport::Icmp => "icmp",
            Transport::Icmp6 => "icmp6",
        }
    }

    fn number(self) -> u32 {
        match self {
            Transport::Tcp => 6,
            Transport::Udp => 17,
            Transport::Sctp => 132,
            Transport::Icmp => 1,
            Transport::Icmp6 => 58,
        }
    }
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dir::Src => "src ",
            Dir::Dst => "dst ",
            Dir::SrcOrDst => "",
            Dir::SrcAndDst => "src and dst ",
        })
    }
}

impl fmt::Display for Prim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prim::Ether(e) => f.write_str(e.name()),
            Prim::Transport(t) => f.write_str(t.name()),
            Prim::Host { dir, addr } => write!(f, "{dir}host {addr}"),
            Prim::Net { dir, addr, prefix } => write!(f, "{dir}net {addr}/{prefix}"),
            Prim::Port { proto, dir, lo, hi } => {
                if let Some(p) = proto {
                    write!(f, "{} ", p.name())?;
                }
                if lo == hi {
                    write!(f, "{dir}port {lo}")
                } else {
                    write!(f, "{dir}portrange {lo}-{hi}")
                }
            }
        }
    }
}

/// Fully parenthesised: parses back to the same expression.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Prim(p) => write!(f, "{p}"),
            Expr::Not(e) => write!(f, "not {e}"),
            Expr::And(a, b) => write!(f, "({a} and {b})"),
            Expr::Or(a, b) => write!(f, "({a} or {b})"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The core: loads and comparisons

/// Kernel ancillary data a filter can read (`SKF_AD_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anc {
    /// The link-layer protocol (EtherType), `SKF_AD_PROTOCOL`.
    Protocol,
    /// The packet type (`PACKET_HOST`, `PACKET_OUTGOING`, ...), `SKF_AD_PKTTYPE`.
    PktType,
    /// The interface index, `SKF_AD_IFINDEX`.
    IfIndex,
}

/// Width of a load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// One byte.
    B,
    /// Two bytes, big-endian.
    H,
    /// Four bytes, big-endian.
    W,
}

impl Size {
    fn bytes(self) -> usize {
        match self {
            Size::B => 1,
            Size::H => 2,
            Size::W => 4,
        }
    }
}

/// What a test loads into the accumulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// Ancillary data.
    Anc(Anc),
    /// Bytes at an offset from the network header.
    Net(Size, u32),
    /// Bytes at an offset from the IPv4 transport header (network header plus IHL × 4).
    Transport(Size, u32),
}

/// How a loaded (and masked) value is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Equal.
    Eq,
    /// Greater or equal.
    Ge,
    /// Greater.
    Gt,
}

/// One comparison: `(load & mask) op value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Test {
    /// What to load.
    pub load: Load,
    /// Mask applied before comparing (`u32::MAX`: none).
    pub mask: u32,
    /// Comparison.
    pub op: Op,
    /// The constant compared with.
    pub value: u32,
}

/// A filter reduced to comparisons, in the order they are evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Core {
    /// Always this.
    Const(bool),
    /// A comparison.
    Test(Test),
    /// Negation.
    Not(Box<Core>),
    /// Both, the left first.
    And(Box<Core>, Box<Core>),
    /// Either, the left first.
    Or(Box<Core>, Box<Core>),
}

fn test(load: Load, value: u32) -> Core {
    Core::Test(Test {
        load,
        mask: u32::MAX,
        op: Op::Eq,
        value,
    })
}

fn and(a: Core, b: Core) -> Core {
    Core::And(Box::new(a), Box::new(b))
}

fn or(a: Core, b: Core) -> Core {
    Core::Or(Box::new(a), Box::new(b))
}

fn not(a: Core) -> Core {
    Core::Not(Box::new(a))
}

fn all_of(mut v: Vec<Core>) -> Core {
    let Some(mut acc) = v.pop() else {
        return Core::Const(true);
    };
    while let Some(x) = v.pop() {
        acc = and(x, acc);
    }
    acc
}

fn any_of(mut v: Vec<Core>) -> Core {
    let Some(mut acc) = v.pop() else {
        return Core::Const(false);
    };
    while let Some(x) = v.pop() {
        acc = or(x, acc);
    }
    acc
}

fn dirs(dir: Dir, src: Core, dst: Core) -> Core {
    match dir {
        Dir::Src => src,
        Dir::Dst => dst,
        Dir::SrcOrDst => or(src, dst),
        Dir::SrcAndDst => and(src, dst),
    }
}

fn ether(e: Ether) -> Core {
    test(Load::Anc(Anc::Protocol), e.ether_type())
}

/// Tests of an address at `offset` of the network header, 32 bits at a time, under `prefix`.
fn addr_tests(addr: IpAddr, prefix: u8, offset: u32) -> Core {
    let octets: Vec<u8> = match addr {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let mut tests = Vec::new();
    for (i, word) in octets.chunks(4).enumerate() {
        let bits_before = (i * 32) as u32;
        let p = u32::from(prefix);
        let mask = if p >= bits_before + 32 {
            u32::MAX
        } else if p <= bits_before {
            0
        } else {
            u32::MAX << (32 - (p - bits_before))
        };
        if mask == 0 {
            continue;
        }
        let value = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        tests.push(Core::Test(Test {
            load: Load::Net(Size::W, offset + 4 * i as u32),
            mask,
            op: Op::Eq,
            value: value & mask,
        }));
    }
    all_of(tests)
}

fn port_tests(load: impl Fn(u32) -> Load, lo: u16, hi: u16, dir: Dir) -> Core {
    let one = |offset: u32| {
        if lo == hi {
            test(load(offset), u32::from(lo))
        } else {
            and(
                Core::Test(Test {
                    load: load(offset),
                    mask: u32::MAX,
                    op: Op::Ge,
                    value: u32::from(lo),
                }),
                not(Core::Test(Test {
                    load: load(offset),
                    mask: u32::MAX,
                    op: Op::Gt,
                    value: u32::from(hi),
                })),
            )
        }
    };
    dirs(dir, one(0), one(2))
}

impl Prim {
    fn lower(&self) -> Core {
        match self {
            Prim::Ether(e) => ether(*e),
            Prim::Transport(t) => {
                let v4 = and(ether(Ether::Ip), test(Load::Net(Size::B, 9), t.number()));
                // As libpcap: the next header, or the one after a fragment header (44).
                let v6 = and(
                    ether(Ether::Ip6),
                    or(
                        test(Load::Net(Size::B, 6), t.number()),
                        and(
                            test(Load::Net(Size::B, 6), 44),
                            test(Load::Net(Size::B, 40), t.number()),
                        ),
                    ),
                );
                match t {
                    Transport::Icmp => v4,
                    Transport::Icmp6 => v6,
                    _ => or(v4, v6),
                }
            }
            Prim::Host { dir, addr } => {
                let prefix = if addr.is_ipv4() { 32 } else { 128 };
                Prim::Net {
                    dir: *dir,
                    addr: *addr,
                    prefix,
                }
                .lower()
            }
            Prim::Net { dir, addr, prefix } => match addr {
                IpAddr::V4(_) => and(
                    ether(Ether::Ip),
                    dirs(
                        *dir,
                        addr_tests(*addr, *prefix, 12),
                        addr_tests(*addr, *prefix, 16),
                    ),
                ),
                IpAddr::V6(_) => and(
                    ether(Ether::Ip6),
                    dirs(
                        *dir,
                        addr_tests(*addr, *prefix, 8),
                        addr_tests(*addr, *prefix, 24),
                    ),
                ),
            },
            Prim::Port { proto, dir, lo, hi } => {
                let protos: Vec<u32> = match proto {
                    Some(t) => vec![t.number()],
                    None => vec![6, 17, 132],
                };
                let v4_proto = any_of(
                    protos
                        .iter()
                        .map(|p| test(Load::Net(Size::B, 9), *p))
                        .collect(),
                );
                let v6_proto = any_of(
                    protos
                        .iter()
                        .map(|p| test(Load::Net(Size::B, 6), *p))
                        .collect(),
                );
                let first_fragment = Core::Test(Test {
                    load: Load::Net(Size::H, 6),
                    mask: 0x1fff,
                    op: Op::Eq,
                    value: 0,
                });
                let v4 = all_of(vec![
                    ether(Ether::Ip),
                    v4_proto,
                    first_fragment,
                    port_tests(|o| Load::Transport(Size::H, o), *lo, *hi, *dir),
                ]);
                let v6 = all_of(vec![
                    ether(Ether::Ip6),
                    v6_proto,
                    port_tests(|o| Load::Net(Size::H, 40 + o), *lo, *hi, *dir),
                ]);
                or(v4, v6)
            }
        }
    }
}

impl Expr {
    /// The expression as comparisons.
    pub fn lower(&self) -> Core {
        match self {
            Expr::Prim(p) => p.lower(),
            Expr::Not(e) => not(e.lower()),
            Expr::And(a, b) => and(a.lower(), b.lower()),
            Expr::Or(a, b) => or(a.lower(), b.lower()),
        }
    }
}

/// `PACKET_OUTGOING`, the packet type of a packet this host sends.
pub const PACKET_OUTGOING: u32 = 4;

/// The program a sniffer attaches: the user's filter (if any), preceded by a test that drops
/// the outgoing copy of loopback packets (each is seen twice there, once each way, as libpcap
/// knows) when `loopback_ifindex` is given.
pub fn capture_core(filter: Option<&Filter>, loopback_ifindex: Option<u32>) -> Core {
    let user = filter.map_or(Core::Const(true), |f| f.expr().lower());
    match loopback_ifindex {
        Some(lo) => and(
            not(and(
                test(Load::Anc(Anc::PktType), PACKET_OUTGOING),
                test(Load::Anc(Anc::IfIndex), lo),
            )),
            user,
        ),
        None => user,
    }
}

// ---------------------------------------------------------------------------------------
// Classic BPF

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Constant.
    pub k: u32,
}

/// A classic BPF program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// The instructions.
    pub insns: Vec<Insn>,
}

/// Opcode parts (linux/filter.h, linux/bpf_common.h).
pub mod op {
    /// Load into A.
    pub const LD: u16 = 0x00;
    /// Load into X.
    pub const LDX: u16 = 0x01;
    /// Arithmetic.
    pub const ALU: u16 = 0x04;
    /// Jump.
    pub const JMP: u16 = 0x05;
    /// Return.
    pub const RET: u16 = 0x06;
    /// Word.
    pub const W: u16 = 0x00;
    /// Half word.
    pub const H: u16 = 0x08;
    /// Byte.
    pub const B: u16 = 0x10;
    /// Absolute offset.
    pub const ABS: u16 = 0x20;
    /// Offset plus X.
    pub const IND: u16 = 0x40;
    /// X = 4 * (P\[k\] & 0xf).
    pub const MSH: u16 = 0xa0;
    /// A &= k.
    pub const AND: u16 = 0x50;
    /// Unconditional jump.
    pub const JA: u16 = 0x00;
    /// Jump if A == k.
    pub const JEQ: u16 = 0x10;
    /// Jump if A > k.
    pub const JGT: u16 = 0x20;
    /// Jump if A >= k.
    pub const JGE: u16 = 0x30;
    /// Constant operand.
    pub const K: u16 = 0x00;
    /// Base of ancillary-data offsets (`SKF_AD_OFF`, -0x1000).
    pub const SKF_AD_OFF: u32 = (-0x1000i32) as u32;
    /// `SKF_AD_PROTOCOL`.
    pub const SKF_AD_PROTOCOL: u32 = 0;
    /// `SKF_AD_PKTTYPE`.
    pub const SKF_AD_PKTTYPE: u32 = 4;
    /// `SKF_AD_IFINDEX`.
    pub const SKF_AD_IFINDEX: u32 = 8;
}

/// The most instructions a classic BPF program may have (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

#[derive(Clone, Copy, Debug)]
enum Item {
    Insn(Insn),
    /// A conditional jump to labels: (code, k, true label, false label).
    Cond(u16, u32, usize, usize),
    Ja(usize),
    Label(usize),
}

struct Gen {
    items: Vec<Item>,
    labels: usize,
    nh: u32,
}

impl Gen {
    fn label(&mut self) -> usize {
        self.labels += 1;
        self.labels - 1
    }

    fn emit(&mut self, code: u16, k: u32) {
        self.items.push(Item::Insn(Insn {
            code,
            jt: 0,
            jf: 0,
            k,
        }));
    }

    fn core(&mut self, c: &Core, t: usize, f: usize) {
        match c {
            Core::Const(true) => self.items.push(Item::Ja(t)),
            Core::Const(false) => self.items.push(Item::Ja(f)),
            Core::Not(x) => self.core(x, f, t),
            Core::And(a, b) => {
                let mid = self.label();
                self.core(a, mid, f);
                self.items.push(Item::Label(mid));
                self.core(b, t, f);
            }
            Core::Or(a, b) => {
                let mid = self.label();
                self.core(a, t, mid);
                self.items.push(Item::Label(mid));
                self.core(b, t, f);
            }
            Core::Test(x) => {
                let size = |s: Size| match s {
                    Size::B => op::B,
                    Size::H => op::H,
                    Size::W => op::W,
                };
                match x.load {
                    Load::Anc(a) => {
                        let which = match a {
                            Anc::Protocol => op::SKF_AD_PROTOCOL,
                            Anc::PktType => op::SKF_AD_PKTTYPE,
                            Anc::IfIndex => op::SKF_AD_IFINDEX,
                        };
                        self.emit(op::LD | op::W | op::ABS, op::SKF_AD_OFF.wrapping_add(which));
                    }
                    Load::Net(s, o) => self.emit(op::LD | size(s) | op::ABS, self.nh + o),
                    Load::Transport(s, o) => {
                        self.emit(op::LDX | op::B | op::MSH, self.nh);
                        self.emit(op::LD | size(s) | op::IND, self.nh + o);
                    }
                }
                if x.mask != u32::MAX {
                    self.emit(op::ALU | op::AND | op::K, x.mask);
                }
                let code = match x.op {
                    Op::Eq => op::JEQ,
                    Op::Ge => op::JGE,
                    Op::Gt => op::JGT,
                };
                self.items
                    .push(Item::Cond(op::JMP | code | op::K, x.value, t, f));
            }
        }
    }
}

/// Why a filter could not be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the filter compiles to {0} BPF instructions, more than the kernel's {MAX_INSNS}")]
pub struct TooLong(pub usize);

/// Compiles `core` for packets whose network header is at `layout.nh`: the program returns
/// `snaplen` (the bytes to keep) for packets that match and 0 for the others.
pub fn compile(core: &Core, layout: Layout, snaplen: u32) -> Result<Program, TooLong> {
    match assemble(core, layout, snaplen, false) {
        Some(p) => Ok(p),
        None => assemble(core, layout, snaplen, true)
            .ok_or_else(|| TooLong(count_long(core, layout, snaplen))),
    }
}

fn count_long(core: &Core, layout: Layout, snaplen: u32) -> usize {
    let (items, _, _) = generate(core, layout, snaplen);
    items
        .iter()
        .map(|i| match i {
            Item::Label(_) => 0,
            Item::Cond(..) => 3,
            _ => 1,
        })
        .sum()
}

fn generate(core: &Core, layout: Layout, snaplen: u32) -> (Vec<Item>, usize, usize) {
    let mut g = Gen {
        items: Vec::new(),
        labels: 0,
        nh: layout.nh,
    };
    let accept = g.label();
    let reject = g.label();
    g.core(core, accept, reject);
    g.items.push(Item::Label(accept));
    g.emit(op::RET | op::K, snaplen);
    g.items.push(Item::Label(reject));
    g.emit(op::RET | op::K, 0);
    (g.items, accept, reject)
}

/// Lays out the items; `long`: every conditional jump as `jcond 0,1; ja t; ja f`. None if a
/// short conditional jump does not fit in 8 bits or the program is too long.
fn assemble(core: &Core, layout: Layout, snaplen: u32, long: bool) -> Option<Program> {
    let (items, _, _) = generate(core, layout, snaplen);
    let width = |i: &Item| match i {
        Item::Label(_) => 0,
        Item::Cond(..) if long => 3,
        _ => 1,
    };
    let mut at = Vec::new();
    let mut labels = std::collections::HashMap::new();
    let mut pc = 0usize;
    for item in &items {
        if let Item::Label(l) = item {
            labels.insert(*l, pc);
        }
        at.push(pc);
        pc += width(item);
    }
    if pc > MAX_INSNS {
        return None;
    }
    let mut insns = Vec::with_capacity(pc);
    for (item, &here) in items.iter().zip(&at) {
        let target = |l: &usize| labels.get(l).copied();
        match item {
            Item::Label(_) => {}
            Item::Insn(i) => insns.push(*i),
            Item::Ja(l) => {
                let to = target(l)?;
                insns.push(Insn {
                    code: op::JMP | op::JA,
                    jt: 0,
                    jf: 0,
                    k: u32::try_from(to.checked_sub(here + 1)?).ok()?,
                });
            }
            Item::Cond(code, k, t, f) => {
                let (t, f) = (target(t)?, target(f)?);
                if long {
                    insns.push(Insn {
                        code: *code,
                        jt: 0,
                        jf: 1,
                        k: *k,
                    });
                    insns.push(Insn {
                        code: op::JMP | op::JA,
                        jt: 0,
                        jf: 0,
                        k: u32::try_from(t.checked_sub(here + 2)?).ok()?,
                    });
                    insns.push(Insn {
                        code: op::JMP | op::JA,
                        jt: 0,
                        jf: 0,
                        k: u32::try_from(f.checked_sub(here + 3)?).ok()?,
                    });
                } else {
                    let jt = u8::try_from(t.checked_sub(here + 1)?).ok()?;
                    let jf = u8::try_from(f.checked_sub(here + 1)?).ok()?;
                    insns.push(Insn {
                        code: *code,
                        jt,
                        jf,
                        k: *k,
                    });
                }
            }
        }
    }
    Some(Program { insns })
}

/// A packet as a filter sees it: its bytes (from where the kernel's filter starts: the
/// link-layer header for SOCK_RAW, the network header for SOCK_DGRAM) and its ancillary data.
#[derive(Clone, Copy, Debug)]
pub struct Probe<'a> {
    /// The bytes.
    pub data: &'a [u8],
    /// The link-layer protocol (EtherType, host order).
    pub protocol: u16,
    /// The packet type.
    pub pkttype: u8,
    /// The interface index.
    pub ifindex: u32,
}

impl Probe<'_> {
    fn anc(&self, a: Anc) -> u32 {
        match a {
            Anc::Protocol => u32::from(self.protocol),
            Anc::PktType => u32::from(self.pkttype),
            Anc::IfIndex => self.ifindex,
        }
    }

    fn load(&self, at: usize, size: Size) -> Option<u32> {
        let b = self.data.get(at..at.checked_add(size.bytes())?)?;
        Some(match size {
            Size::B => u32::from(b[0]),
            Size::H => u32::from(u16::from_be_bytes([b[0], b[1]])),
            Size::W => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        })
    }
}

impl Program {
    /// Runs the program on `p` as the kernel would: the bytes to keep, 0 to drop. An
    /// out-of-bounds load, an instruction this interpreter does not know or a jump out of
    /// the program drops the packet.
    pub fn run(&self, p: &Probe<'_>) -> u32 {
        let (mut a, mut x) = (0u32, 0u32);
        let mut pc = 0usize;
        let size = |code: u16| match code & 0x18 {
            op::W => Some(Size::W),
            op::H => Some(Size::H),
            op::B => Some(Size::B),
            _ => None,
        };
        while let Some(i) = self.insns.get(pc) {
            pc += 1;
            match i.code & 0x07 {
                op::LD => {
                    let Some(s) = size(i.code) else { return 0 };
                    let at = match i.code & 0xe0 {
                        op::ABS => {
                            if i.k >= op::SKF_AD_OFF {
                                a = match i.k.wrapping_sub(op::SKF_AD_OFF) {
                                    op::SKF_AD_PROTOCOL => p.anc(Anc::Protocol),
                                    op::SKF_AD_PKTTYPE => p.anc(Anc::PktType),
                                    op::SKF_AD_IFINDEX => p.anc(Anc::IfIndex),
                                    _ => return 0,
                                };
                                continue;
                            }
                            i.k as usize
                        }
                        op::IND => x.wrapping_add(i.k) as usize,
                        _ => return 0,
                    };
                    match p.load(at, s) {
                        Some(v) => a = v,
                        None => return 0,
                    }
                }
                op::LDX => {
                    if i.code != op::LDX | op::B | op::MSH {
                        return 0;
                    }
                    match p.load(i.k as usize, Size::B) {
                        Some(v) => x = 4 * (v & 0xf),
                        None => return 0,
                    }
                }
                op::ALU => {
                    if i.code != op::ALU | op::AND | op::K {
                        return 0;
                    }
                    a &= i.k;
                }
                op::JMP => {
                    let jump = |taken: bool| usize::from(if taken { i.jt } else { i.jf });
                    pc += match i.code & 0xf0 {
                        op::JA => i.k as usize,
                        op::JEQ => jump(a == i.k),
                        op::JGT => jump(a > i.k),
                        op::JGE => jump(a >= i.k),
                        _ => return 0,
                    };
                }
                op::RET => return i.k,
                _ => return 0,
            }
        }
        0
    }
}

/// A load that fell off the end of the packet: BPF drops the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfBounds;

impl Core {
    /// Evaluates the comparisons directly, in the order the compiled program does (left to
    /// right, short-circuit): `Err` where the program would drop the packet for a load past
    /// its end.
    pub fn eval(&self, p: &Probe<'_>, layout: Layout) -> Result<bool, OutOfBounds> {
        match self {
            Core::Const(b) => Ok(*b),
            Core::Not(x) => Ok(!x.eval(p, layout)?),
            Core::And(a, b) => Ok(a.eval(p, layout)? && b.eval(p, layout)?),
            Core::Or(a, b) => Ok(a.eval(p, layout)? || b.eval(p, layout)?),
            Core::Test(t) => {
                let nh = layout.nh as usize;
                let v = match t.load {
                    Load::Anc(a) => p.anc(a),
                    Load::Net(s, o) => p.load(nh + o as usize, s).ok_or(OutOfBounds)?,
                    Load::Transport(s, o) => {
                        let ihl = p.load(nh, Size::B).ok_or(OutOfBounds)?;
                        let x = 4 * (ihl & 0xf) as usize;
                        p.load(x + nh + o as usize, s).ok_or(OutOfBounds)?
                    }
                };
                let v = v & t.mask;
                Ok(match t.op {
                    Op::Eq => v == t.value,
                    Op::Ge => v >= t.value,
                    Op::Gt => v > t.value,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;
    use proptest::prelude::*;

    const DGRAM: Layout = Layout { nh: 0 };
    const ETHER: Layout = Layout { nh: 14 };

    fn matches(filter: &str, packet: &[u8], protocol: u16) -> bool {
        let f = Filter::parse(filter).unwrap_or_else(|e| panic!("{e}"));
        let probe = Probe {
            data: packet,
            protocol,
            pkttype: 0,
            ifindex: 2,
        };
        let core = f.expr().lower();
        let direct = core.eval(&probe, DGRAM).unwrap_or(false);
        let program = compile(&core, DGRAM, 65535).unwrap();
        assert_eq!(
            program.run(&probe) != 0,
            direct,
            "{filter}: program and evaluation disagree"
        );
        direct
    }

    fn tcp4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut v = Vec::new();
        PacketBuilder::ipv4(src, dst, 64)
            .tcp(sport, dport, 1, 1000)
            .write(&mut v, b"hello")
            .unwrap();
        v
    }

    fn udp6(sport: u16, dport: u16) -> Vec<u8> {
        let mut v = Vec::new();
        let mut a = [0u8; 16];
        a[0] = 0x20;
        a[1] = 0x01;
        a[15] = 1;
        let mut b = a;
        b[15] = 2;
        PacketBuilder::ipv6(a, b, 64)
            .udp(sport, dport)
            .write(&mut v, b"x")
            .unwrap();
        v
    }

    #[test]
    fn primitives_mean_what_tcpdump_says() {
        let web = tcp4([10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
        let ip = 0x0800;
        assert!(matches("tcp", &web, ip));
        assert!(!matches("udp", &web, ip));
        assert!(matches("ip", &web, ip));
        assert!(!matches("ip6", &web, ip));
        assert!(matches("tcp and port 80", &web, ip));
        assert!(matches("port 40000", &web, ip));
        assert!(matches("dst port 80", &web, ip));
        assert!(!matches("src port 80", &web, ip));
        assert!(!matches("udp port 80", &web, ip));
        assert!(matches("host 10.0.0.1", &web, ip));
        assert!(matches("src host 10.0.0.1 and dst 10.0.0.2", &web, ip));
        assert!(!matches("dst host 10.0.0.1", &web, ip));
        assert!(matches("net 10.0.0.0/8", &web, ip));
        assert!(!matches("net 192.168.0.0/16", &web, ip));
        assert!(matches("host 10.0.0.1 and not port 22", &web, ip));
        assert!(!matches("host 10.0.0.1 and not port 80", &web, ip));
        assert!(matches("portrange 79-81", &web, ip));
        assert!(!matches("portrange 81-100", &web, ip));
        assert!(matches("port 22 or 80", &web, ip));
        assert!(matches("tcp dst port 8080 or 80", &web, ip));
        assert!(!matches("tcp src port 8080 or 80", &web, ip));
        assert!(matches("! udp && (port 1 || port 80)", &web, ip));
        assert!(!matches("icmp", &web, ip));

        let dns = udp6(5353, 53);
        let ip6 = 0x86dd;
        assert!(matches("udp", &dns, ip6));
        assert!(matches("ip6 and udp port 53", &dns, ip6));
        assert!(matches("host 2001::2", &dns, ip6));
        assert!(matches("src net 2001::/16", &dns, ip6));
        assert!(!matches("dst net 2002::/16", &dns, ip6));
        assert!(!matches("ip", &dns, ip6));
        assert!(!matches("host 10.0.0.1", &dns, ip6));

        // Ports are those of the first fragment only.
        let mut frag = web.clone();
        frag[6] = 0x00;
        frag[7] = 0x10; // fragment offset 16
        assert!(!matches("port 80", &frag, ip));
        assert!(matches("tcp", &frag, ip));
    }

    #[test]
    fn and_or_associate_left_with_equal_precedence() {
        let e = Filter::parse("udp or tcp and port 80").unwrap();
        assert_eq!(e.expr().to_string(), "((udp or tcp) and port 80)");
        let e = Filter::parse("not host 1.2.3.4 and 5.6.7.8").unwrap();
        assert_eq!(e.expr().to_string(), "(not host 1.2.3.4 and host 5.6.7.8)");
        let e = Filter::parse("src or dst port 53").unwrap();
        assert_eq!(e.expr().to_string(), "port 53");
        let e = Filter::parse("src 10.0.0.1 or dst 10.0.0.2").unwrap();
        assert_eq!(
            e.expr().to_string(),
            "(src host 10.0.0.1 or dst host 10.0.0.2)"
        );
    }

    #[test]
    fn errors_point_at_the_problem() {
        let e = Filter::parse("tcp and prot 80").unwrap_err();
        assert_eq!(e.column, 9, "{e}");
        assert!(e.to_string().contains("`prot` is not a test"), "{e}");
        let e = Filter::parse("port http").unwrap_err();
        assert!(e.to_string().contains("not a port number"), "{e}");
        let e = Filter::parse("(tcp").unwrap_err();
        assert!(e.to_string().contains("missing `)`"), "{e}");
        let e = Filter::parse("host example.com").unwrap_err();
        assert!(e.to_string().contains("names are not looked up"), "{e}");
        let e = Filter::parse("net 10.0.0.1/8").unwrap_err();
        assert!(e.to_string().contains("host bits"), "{e}");
        let e = Filter::parse("icmp port 1").unwrap_err();
        assert!(e.to_string().contains("has no ports"), "{e}");
        let e = Filter::parse("").unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let e = Filter::parse("tcp and").unwrap_err();
        assert_eq!(e.column, 8, "{e}");
        let e = Filter::parse("tcp &  udp").unwrap_err();
        assert!(e.to_string().contains("unexpected `&`"), "{e}");
        assert!(Filter::parse("80").is_err());
        assert!(Filter::parse("tcp )").is_err());
    }

    #[test]
    fn golden_program_for_udp() {
        let f = Filter::parse("udp").unwrap();
        let p = compile(&f.expr().lower(), ETHER, 262_144).unwrap();
        let ad = op::SKF_AD_OFF;
        let want = [
            (0x20, 0, 0, ad),      // ld #proto
            (0x15, 0, 2, 0x0800),  // jeq ip, else try ip6
            (0x30, 0, 0, 14 + 9),  // ldb [23]
            (0x15, 8, 0, 17),      // jeq 17: accept, else try ip6
            (0x20, 0, 0, ad),      // ld #proto
            (0x15, 0, 7, 0x86dd),  // jeq ip6, else reject
            (0x30, 0, 0, 14 + 6),  // ldb [20]: next header
            (0x15, 4, 0, 17),      // jeq 17: accept
            (0x30, 0, 0, 14 + 6),  // ldb [20]
            (0x15, 0, 3, 44),      // jeq fragment header, else reject
            (0x30, 0, 0, 14 + 40), // ldb [54]: the fragment header's next header
            (0x15, 0, 1, 17),      // jeq 17: accept, else reject
            (0x06, 0, 0, 262_144), // ret #snaplen
            (0x06, 0, 0, 0),       // ret #0
        ];
        let got: Vec<(u16, u8, u8, u32)> =
            p.insns.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn loopback_outgoing_copies_are_dropped() {
        let core = capture_core(None, Some(1));
        let p = compile(&core, DGRAM, 100).unwrap();
        let pkt = tcp4([127, 0, 0, 1], [127, 0, 0, 1], 1, 2);
        let probe = |pkttype, ifindex| Probe {
            data: &pkt,
            protocol: 0x0800,
            pkttype,
            ifindex,
        };
        assert_eq!(p.run(&probe(4, 1)), 0, "outgoing on lo");
        assert_eq!(p.run(&probe(0, 1)), 100, "incoming on lo");
        assert_eq!(p.run(&probe(4, 2)), 100, "outgoing elsewhere");
    }

    #[test]
    fn long_programs_use_long_jumps() {
        // 40 hosts: the first test's false branch jumps over everything else.
        let text = (0..40)
            .map(|i| format!("host 10.0.0.{i}"))
            .collect::<Vec<_>>()
            .join(" or ");
        let f = Filter::parse(&format!("tcp and ({text}) and port 80")).unwrap();
        let core = f.expr().lower();
        assert!(assemble(&core, ETHER, 1, false).is_none());
        let p = compile(&core, ETHER, 1).unwrap();
        let mut frame = vec![0u8; 14];
        frame.extend(tcp4([10, 0, 0, 39], [1, 1, 1, 1], 80, 5));
        let probe = Probe {
            data: &frame,
            protocol: 0x0800,
            pkttype: 0,
            ifindex: 1,
        };
        assert_eq!(p.run(&probe), 1);
        assert_eq!(core.eval(&probe, ETHER), Ok(true));
    }

    // --- property tests -----------------------------------------------------------------

    fn arb_addr() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            (0u8..3).prop_map(|i| IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))),
            (0u8..3).prop_map(|i| IpAddr::V6(Ipv6Addr::new(
                0x2001,
                0,
                0,
                0,
                0,
                0,
                0,
                u16::from(i)
            ))),
        ]
    }

    fn arb_dir() -> impl Strategy<Value = Dir> {
        prop_oneof![
            Just(Dir::Src),
            Just(Dir::Dst),
            Just(Dir::SrcOrDst),
            Just(Dir::SrcAndDst)
        ]
    }

    fn arb_prim() -> impl Strategy<Value = Prim> {
        prop_oneof![
            prop_oneof![Just(Ether::Ip), Just(Ether::Ip6), Just(Ether::Arp)].prop_map(Prim::Ether),
            prop_oneof![
                Just(Transport::Tcp),
                Just(Transport::Udp),
                Just(Transport::Sctp),
                Just(Transport::Icmp),
                Just(Transport::Icmp6)
            ]
            .prop_map(Prim::Transport),
            (arb_dir(), arb_addr()).prop_map(|(dir, addr)| Prim::Host { dir, addr }),
            (arb_dir(), arb_addr(), 0u8..=32).prop_map(|(dir, addr, p)| {
                let prefix = if addr.is_ipv4() { p } else { p * 4 };
                Prim::Net {
                    dir,
                    addr: mask_addr(addr, prefix),
                    prefix,
                }
            }),
            (
                prop::option::of(prop_oneof![
                    Just(Transport::Tcp),
                    Just(Transport::Udp),
                    Just(Transport::Sctp)
                ]),
                arb_dir(),
                0u16..4,
                0u16..4
            )
                .prop_map(|(proto, dir, a, b)| Prim::Port {
                    proto,
                    dir,
                    lo: a.min(b),
                    hi: a.max(b)
                }),
        ]
    }

    fn arb_expr() -> impl Strategy<Value = Expr> {
        arb_prim()
            .prop_map(Expr::Prim)
            .prop_recursive(4, 24, 2, |inner| {
                prop_oneof![
                    inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
                    (inner.clone(), inner.clone())
                        .prop_map(|(a, b)| Expr::And(Box::new(a), Box::new(b))),
                    (inner.clone(), inner).prop_map(|(a, b)| Expr::Or(Box::new(a), Box::new(b))),
                ]
            })
    }

    /// Packets with a chance of matching: IPv4/IPv6 headers over the small address and port
    /// pools above, cut at any length, or random bytes.
    fn arb_packet() -> impl Strategy<Value = (Vec<u8>, u16)> {
        let v4 = (
            0u8..3,
            0u8..3,
            prop_oneof![Just(6u8), Just(17), Just(132), Just(1), Just(58)],
            prop_oneof![Just(5u8), Just(6), Just(15), Just(0)],
            any::<bool>(),
            0u16..4,
            0u16..4,
            0usize..80,
        )
            .prop_map(|(s, d, proto, ihl, frag, sp, dp, cut)| {
                let mut v = vec![0u8; 80];
                v[0] = 0x40 | ihl;
                v[6] = if frag { 0x20 } else { 0x40 };
                v[7] = if frag { 1 } else { 0 };
                v[9] = proto;
                v[12..16].copy_from_slice(&[10, 0, 0, s]);
                v[16..20].copy_from_slice(&[10, 0, 0, d]);
                let t = 4 * usize::from(ihl);
                v[t..t + 2].copy_from_slice(&sp.to_be_bytes());
                v[t + 2..t + 4].copy_from_slice(&dp.to_be_bytes());
                v.truncate(cut);
                (v, 0x0800u16)
            });
        let v6 = (
            0u16..3,
            0u16..3,
            prop_oneof![Just(6u8), Just(17), Just(132), Just(58), Just(0), Just(44)],
            prop_oneof![Just(6u8), Just(17)],
            0u16..4,
            0u16..4,
            0usize..80,
        )
            .prop_map(|(s, d, nh, after_fragment, sp, dp, cut)| {
                let mut v = vec![0u8; 80];
                v[0] = 0x60;
                v[6] = nh;
                v[8..24].copy_from_slice(&Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, s).octets());
                v[24..40].copy_from_slice(&Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, d).octets());
                v[40..42].copy_from_slice(&sp.to_be_bytes());
                v[42..44].copy_from_slice(&dp.to_be_bytes());
                if nh == 44 {
                    // A fragment header: its first byte is the next header.
                    v[40] = after_fragment;
                }
                v.truncate(cut);
                (v, 0x86ddu16)
            });
        let noise = (
            prop::collection::vec(any::<u8>(), 0..64),
            prop_oneof![Just(0x0800u16), Just(0x86dd), Just(0x0806), any::<u16>()],
        );
        prop_oneof![v4, v6, noise]
    }

    // --- tcpdump as the reference ---------------------------------------------------------

    fn tcpdump() -> Option<std::path::PathBuf> {
        let paths = std::env::var_os("PATH")?;
        std::env::split_paths(&paths)
            .chain([std::path::PathBuf::from("/usr/sbin"), "/sbin".into()])
            .map(|d| d.join("tcpdump"))
            .find(|f| f.is_file())
    }

    /// An Ethernet frame around a network-layer packet.
    fn ether_frame(ether_type: u16, packet: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        f.extend_from_slice(&ether_type.to_be_bytes());
        f.extend_from_slice(packet);
        f
    }

    /// Transport header bytes with the ports first (TCP, UDP, SCTP, ICMP), 20 bytes.
    fn transport(proto: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        if proto == 6 {
            t[12] = 0x50;
        }
        if proto == 17 {
            t[4..6].copy_from_slice(&20u16.to_be_bytes());
        }
        t
    }

    fn ipv4(src: u8, dst: u8, proto: u8, options: bool, fragment: u16, body: &[u8]) -> Vec<u8> {
        let hl = if options { 24 } else { 20 };
        let mut v = vec![0u8; hl];
        v[0] = 0x40 | (hl / 4) as u8;
        v[2..4].copy_from_slice(&((hl + body.len()) as u16).to_be_bytes());
        v[6..8].copy_from_slice(&fragment.to_be_bytes());
        v[8] = 64;
        v[9] = proto;
        v[12..16].copy_from_slice(&[10, 0, 0, src]);
        v[16..20].copy_from_slice(&[10, 0, 0, dst]);
        v.extend_from_slice(body);
        v
    }

    fn ipv6(src: u16, dst: u16, next: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; 40];
        v[0] = 0x60;
        v[4..6].copy_from_slice(&(body.len() as u16).to_be_bytes());
        v[6] = next;
        v[7] = 64;
        v[8..24].copy_from_slice(&Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, src).octets());
        v[24..40].copy_from_slice(&Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, dst).octets());
        v.extend_from_slice(body);
        v
    }

    /// Frames over the address and port pools of `arb_expr`.
    fn reference_frames() -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        for (s, d) in [(0, 1), (1, 0), (1, 2), (2, 2), (0, 2)] {
            for proto in [6u8, 17, 132] {
                for (sp, dp) in [(0, 1), (2, 3), (3, 3)] {
                    frames.push(ether_frame(
                        0x0800,
                        &ipv4(s, d, proto, false, 0x4000, &transport(proto, sp, dp)),
                    ));
                    frames.push(ether_frame(
                        0x86dd,
                        &ipv6(s.into(), d.into(), proto, &transport(proto, sp, dp)),
                    ));
                }
            }
            frames.push(ether_frame(
                0x0800,
                &ipv4(s, d, 1, false, 0, &transport(1, 8, 0)),
            ));
            frames.push(ether_frame(
                0x86dd,
                &ipv6(s.into(), d.into(), 58, &transport(58, 128, 0)),
            ));
            // IPv4 options; a later fragment (no ports); IPv6 behind a fragment header.
            frames.push(ether_frame(
                0x0800,
                &ipv4(s, d, 6, true, 0, &transport(6, 1, 2)),
            ));
            frames.push(ether_frame(
                0x0800,
                &ipv4(s, d, 17, false, 0x0020, &transport(17, 1, 2)),
            ));
            let mut fragment = vec![6u8, 0, 0, 1, 0, 0, 0, 7];
            fragment.extend(transport(6, 2, 1));
            frames.push(ether_frame(
                0x86dd,
                &ipv6(s.into(), d.into(), 44, &fragment),
            ));
        }
        // ARP, with addresses outside the pools (tcpdump's `host` also reads ARP's).
        let mut arp = vec![0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 192, 168, 9, 9];
        arp.extend([0, 0, 0, 0, 0, 0, 192, 168, 9, 8]);
        frames.push(ether_frame(0x0806, &arp));
        frames
    }

    /// Indices of the frames tcpdump's filter `expr` keeps (frame i is stamped i seconds).
    fn tcpdump_keeps(tcpdump: &std::path::Path, file: &std::path::Path, expr: &str) -> Vec<usize> {
        let out = std::process::Command::new(tcpdump)
            .args(["-n", "-q", "-tt", "-r"])
            .arg(file)
            .arg(expr)
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stderr).contains("expression rejects all packets") {
            return Vec::new();
        }
        assert!(
            out.status.success(),
            "tcpdump refused `{expr}`: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split('.').next()?.parse::<usize>().ok())
            .map(|s| s - 1_000_000)
            .collect()
    }

    #[test]
    fn filters_keep_what_tcpdump_keeps() {
        let Some(tcpdump) = tcpdump() else {
            let skip = std::env::var("CAUSEWAY_SKIP_SYSTEM_TESTS").is_ok_and(|v| v == "1");
            assert!(
                skip,
                "this test needs tcpdump (or CAUSEWAY_SKIP_SYSTEM_TESTS=1)"
            );
            eprintln!("skipping: no tcpdump (CAUSEWAY_SKIP_SYSTEM_TESTS=1)");
            return;
        };
        let frames = reference_frames();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("frames.pcap");
        {
            use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
            let header = PcapHeader {
                datalink: pcap_file::DataLink::ETHERNET,
                ..PcapHeader::default()
            };
            let mut w =
                PcapWriter::with_header(std::fs::File::create(&file).unwrap(), header).unwrap();
            for (i, f) in frames.iter().enumerate() {
                let ts = std::time::Duration::from_secs(1_000_000 + i as u64);
                w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
                    .unwrap();
            }
        }
        // The reading of tcpdump's output works: every frame passes an empty-ish filter.
        assert_eq!(
            tcpdump_keeps(&tcpdump, &file, "ip or ip6 or arp"),
            (0..frames.len()).collect::<Vec<_>>()
        );
        let mut exprs: Vec<String> = [
            "tcp",
            "udp",
            "sctp",
            "icmp",
            "icmp6",
            "ip",
            "ip6",
            "arp",
            "port 1",
            "tcp port 3",
            "udp dst port 3",
            "src port 2",
            "portrange 1-2",
            "sctp src portrange 0-1",
            "host 10.0.0.1",
            "src host 10.0.0.2 and dst 10.0.0.0",
            "net 10.0.0.0/30",
            "dst net 2001::/64",
            "host 2001::2",
            "src and dst host 10.0.0.2",
            "not tcp and not udp",
            "tcp or udp and port 3",
            "port 1 or 2",
            "not port 1 or 2",
            "ip6 and (tcp or icmp6)",
            "! (host 10.0.0.1 || host 2001::1) && tcp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        for _ in 0..150 {
            exprs.push(
                arb_expr()
                    .new_tree(&mut runner)
                    .unwrap()
                    .current()
                    .to_string(),
            );
        }
        for expr in &exprs {
            let filter = Filter::parse(expr).unwrap_or_else(|e| panic!("{e}"));
            let program = compile(&capture_core(Some(&filter), None), ETHER, 65_535).unwrap();
            let ours: Vec<usize> = frames
                .iter()
                .enumerate()
                .filter(|(_, f)| {
                    let probe = Probe {
                        data: f,
                        protocol: u16::from_be_bytes([f[12], f[13]]),
                        pkttype: 0,
                        ifindex: 1,
                    };
                    program.run(&probe) != 0
                })
                .map(|(i, _)| i)
                .collect();
            assert_eq!(ours, tcpdump_keeps(&tcpdump, &file, expr), "`{expr}`");
        }
    }

    proptest! {
        #[test]
        fn printed_expressions_parse_back(e in arb_expr()) {
            let text = e.to_string();
            let parsed = Filter::parse(&text).map_err(|err| TestCaseError::fail(err.to_string()))?;
            prop_assert_eq!(parsed.expr(), &e);
        }

        #[test]
        fn the_program_agrees_with_the_expression(
            e in arb_expr(),
            (bytes, protocol) in arb_packet(),
            raw in any::<bool>(),
            pkttype in 0u8..5,
            ifindex in 1u32..3,
        ) {
            let layout = if raw { ETHER } else { DGRAM };
            let mut data = if raw { vec![0u8; 14] } else { Vec::new() };
            data.extend(&bytes);
            let probe = Probe { data: &data, protocol, pkttype, ifindex };
            let filter = Filter { text: e.to_string(), expr: e };
            let core = capture_core(Some(&filter), Some(1));
            let want = match core.eval(&probe, layout) {
                Ok(true) => 1234,
                _ => 0,
            };
            let short = compile(&core, layout, 1234).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(short.run(&probe), want);
            let long = assemble(&core, layout, 1234, true).ok_or_else(|| TestCaseError::fail("long"))?;
            prop_assert_eq!(long.run(&probe), want);
        }

        #[test]
        fn parsing_never_panics(s in "[ -~]{0,40}") {
            let _ = Filter::parse(&s);
        }

        #[test]
        fn parsing_words_never_panics(words in prop::collection::vec(prop_oneof![
            Just("tcp"), Just("udp"), Just("ip"), Just("ip6"), Just("and"), Just("or"),
            Just("not"), Just("("), Just(")"), Just("src"), Just("dst"), Just("host"),
            Just("port"), Just("net"), Just("portrange"), Just("80"), Just("10.0.0.1"),
            Just("::1"), Just("1-2"), Just("10.0.0.0/8"), Just("!"), Just("&&"), Just("||"),
        ], 0..10)) {
            let _ = Filter::parse(&words.join(" "));
        }
    }
}
