//! `ss -tin` output captured repeatedly: TCP statistics logs.
//!
//! # Format
//!
//! Blocks of `ss -tin` output, each preceded by a line `### <unix time in seconds>`, as
//! written by [`HOW_TO_CAPTURE`] (gzip is undone by the input layer):
//!
//! ```text
//! ### 1795305858.489725640
//! State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process
//! ESTAB  0      89776  10.77.0.1:38672    10.77.0.2:5003
//!      bbr wscale:0,10 rto:256 backoff:1 rtt:52.73/24.285 mss:1448 ... retrans:0/1 ...
//! ```
//!
//! A socket record is a line that starts with a TCP state (`ESTAB`, `SYN-SENT`, ..., after an
//! optional `tcp` Netid column), then Recv-Q, Send-Q, the local and the peer address, and
//! whatever `-p` (`users:((...))`), `-o` (`timer:(...)`) and `-e` (`uid:`, `ino:`, `sk:`,
//! `cgroup:`) add; then the indented lines that follow it (tab or spaces): `-m`'s
//! `skmem:(...)` and `-i`'s fields. All indented lines up to the next unindented one belong to
//! the record, so output that wraps is read as if it did not. Addresses may be IPv4
//! (`10.0.0.1:22`), bracketed IPv6 (`[::1]:22`, `[fe80::1]%eth0:22`), unbracketed IPv6 as old
//! `ss` versions print it, carry an interface suffix (`10.0.0.1%eth0:22`), or be `*`.
//! IPv4-mapped IPv6 addresses (`[::ffff:127.0.0.1]:80`) become IPv4, as packets carry them.
//!
//! # What is read
//!
//! | `ss` | [`TcpInfo`] | unit |
//! |---|---|---|
//! | the state column | `state` | [`state`] number |
//! | `rto`, `ato`, `minrtt` | `rto_us`, `ato_us`, `min_rtt_us` | ms (with a fraction) → µs |
//! | `rtt:a/b` | `rtt_us` = a, `rttvar_us` = b | ms → µs |
//! | `backoff`, `unacked`, `lost`, `dsack_dups`, `reord_seen`, `rcv_space`, `snd_wnd` | same names | |
//! | `retrans:a/b` | `retrans` = a, `total_retrans` = b | segments |
//! | `mss`, `rcvmss` | `snd_mss`, `rcv_mss` | bytes |
//! | `cwnd`, `ssthresh` | `snd_cwnd`, `snd_ssthresh` | segments |
//! | `bytes_sent`, `bytes_retrans`, `bytes_acked`, `bytes_received` | same names | bytes |
//! | `segs_out`, `segs_in`, `data_segs_out`, `data_segs_in` | same names | segments |
//! | `notsent` | `notsent_bytes` | bytes |
//! | `busy:Nms`, `rwnd_limited:Nms(p%)`, `sndbuf_limited:Nms(p%)` | `busy_time_us`, `rwnd_limited_us`, `sndbuf_limited_us` | ms → µs |
//! | `delivery_rate R` | `delivery_rate` | bit/s (`-n`: exact; else `12.5Mbps`) → bytes/s |
//! | `app_limited` | `app_limited` = true | |
//! | `total_rto`, `total_rto_recoveries`, `total_rto_time` | same names (`_ms`) | should `ss` print them |
//! | `skmem:(r,rb,t,tb,f,w,...)` (`-m`), old `mem:(r,w,f,t)` | `rmem_alloc` = r, `rcvbuf` = rb, `sndbuf` = tb, `wmem_queued` = w | bytes |
//! | `users:(("prog",pid=N,fd=M),...)` (`-p`) | `pid` = the first N | |
//!
//! Every other word is ignored (options such as `ts sack`, the congestion control and its
//! `bbr:(...)` block, `lastsnd`, `-o` timers, `-e` details; `send` and `pacing_rate` only have
//! their values checked). A field
//! `ss` did not print stays `None`. `ss` leaves out most counters while they are zero (no
//! `retrans:` before the first retransmission, no `app_limited` when not limited), so `None`
//! here often means 0; Recv-Q and Send-Q are checked but have no place in [`TcpInfo`].
//!
//! # Damage
//!
//! Nothing here panics on any input. Every record that does not become a sample is counted in
//! [`SourceStats`] under a [`SkipReason`], and described (up to the warning limit) by a
//! [`Warning`] with the file and the byte offset of the offending text:
//! - a line that is not a `###` line, a header or a socket record, a record whose columns or
//!   known fields do not parse, an indented line without a record before it: `bad_row`;
//! - a record with service or host names instead of numbers (`ss` without `-n`):
//!   `resolved_name`, with one warning saying to capture with `-n`;
//! - a record before any `### <unix time>` line: `no_timestamp`, with one warning saying what
//!   the format must be (also given for an input that holds no `###` line at all);
//! - the last record when the input ends inside it (no final newline, or a socket line
//!   without the info line that every other record had): `truncated_record`;
//! - a socket of another protocol (`ss -tuin`'s `udp` lines): `other_protocol`, no warning.
//!
//! Memory: one line buffer (lines longer than 64 KiB are cut and counted as bad) and one
//! record of at most 256 KiB. Cost: one pass over each byte, no allocation per field.

use std::borrow::Cow;
use std::io::{self, BufRead};
use std::net::{IpAddr, Ipv4Addr};

use crate::Warning;
use crate::observation::{Batch, Endpoint, Nanos};
use crate::origin::OriginId;
use crate::pcap::Damage;
use crate::reader::{Ledger, ObservationReader};
use crate::stats::{SkipReason, SourceStats};
use crate::tcpstats::{TcpInfo, TcpSample, state};

/// The format's name in [`SourceStats::formats`].
pub const FORMAT: &str = "ss -ti log";

/// How a TCP statistics log is written, quoted in messages about inputs that are not one.
pub const HOW_TO_CAPTURE: &str = "while sleep 0.25; do echo \"### $(date +%s.%N)\"; ss -tin; done";

/// Longest line kept; the rest of a longer line is dropped and the line counted as bad.
const MAX_LINE: usize = 64 * 1024;
/// Longest record (a socket line and its indented lines) kept.
const MAX_RECORD: usize = 256 * 1024;
/// Longest piece of input quoted in a message.
const SNIPPET: usize = 48;

/// What is wrong with a piece of `ss` output.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SsErrorKind {
    /// The line does not start with a TCP state (`ESTAB`, `SYN-SENT`, ...).
    #[error("not a line of `ss -tin` output (a socket line starts with a state such as ESTAB)")]
    NotASocket,
    /// The socket line ends before this column.
    #[error("the socket line ends before the {0} column")]
    MissingColumn(&'static str),
    /// Recv-Q or Send-Q is not a byte count.
    #[error("{0} is not a byte count")]
    BadQueue(&'static str),
    /// An address column is not `IP:port`.
    #[error("the {0} address is not IP:port")]
    BadAddress(&'static str),
    /// An address column names a service or a host instead of giving numbers.
    #[error(
        "the {0} address is a name, not numbers: `ss` was run without -n (or with -r); \
         capture with `ss -tin`"
    )]
    ResolvedName(&'static str),
    /// The Netid column names another protocol.
    #[error("a socket of another protocol, not tcp")]
    NotTcp,
    /// A known field whose value does not parse.
    #[error("{field} {expected}")]
    BadValue {
        /// The field's name as `ss` prints it.
        field: &'static str,
        /// What its value should look like.
        expected: &'static str,
    },
    /// A field that takes the next word as its value (`delivery_rate 12Mbps`) ends the record.
    #[error("{0} without a value")]
    MissingValue(&'static str),
}

/// A piece of `ss` output that could not be read: what is wrong, and where in the text given
/// to the parser.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}")]
pub struct SsError {
    /// Byte offset in the parsed text where the offending piece starts.
    pub at: usize,
    /// The offending piece's length in bytes.
    pub len: usize,
    /// What is wrong.
    pub kind: SsErrorKind,
}

/// The columns of an `ss` socket line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SsConnection<'a> {
    /// The state, as [`state`] numbers it.
    pub state: u8,
    /// Recv-Q: bytes received and not yet read (established) or the accept backlog (listening).
    pub recv_q: u64,
    /// Send-Q: bytes not yet acknowledged (established) or the backlog's limit (listening).
    pub send_q: u64,
    /// This host's end (`*` and a `*` port read as `0.0.0.0:0`).
    pub local: Endpoint,
    /// The other end.
    pub peer: Endpoint,
    /// What follows the peer column (`-p`, `-o`, `-e` output, and whatever info fields were
    /// joined to the line), for [`parse_info_line`].
    pub rest: &'a str,
}

/// Whether `head`, the start of an input, looks like a TCP statistics log: its first non-empty
/// line is `### ` and a number, or an `ss` header line (`State Recv-Q ...`,
/// `Netid State Recv-Q ...`).
pub fn looks_like_ss_log(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    let Some(line) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return false;
    };
    match line.strip_prefix("###") {
        Some(rest) => rest
            .split_ascii_whitespace()
            .next()
            .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()) && is_number(n)),
        None => is_header(line),
    }
}

/// The time of a `### <unix time>` line in ns since the epoch: seconds, optionally with a
/// fraction (digits past the ninth are dropped). Words after the number are allowed (a label).
pub fn parse_marker(line: &str) -> Option<Nanos> {
    let rest = line.trim().strip_prefix("###")?;
    let num = rest.split_ascii_whitespace().next()?;
    let (secs, frac) = num.split_once('.').unwrap_or((num, ""));
    if secs.is_empty() || !is_digits(secs) || !(frac.is_empty() || is_digits(frac)) {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let mut ns = 0u64;
    for i in 0..9 {
        let d = frac.as_bytes().get(i).map_or(0, |b| u64::from(b - b'0'));
        ns = ns * 10 + d;
    }
    secs.checked_mul(1_000_000_000)?.checked_add(ns)
}

/// Reads an `ss` socket line: state (after an optional `tcp` Netid), Recv-Q, Send-Q, local
/// and peer address. The rest of the line is returned untouched in
/// [`SsConnection::rest`]. Errors carry the offending column's position in `line`.
pub fn parse_connection_line(line: &str) -> Result<SsConnection<'_>, SsError> {
    let mut pos = 0;
    let not_socket = SsError {
        at: 0,
        len: line.len(),
        kind: SsErrorKind::NotASocket,
    };
    let (first_at, first) = word(line, &mut pos).ok_or(not_socket.clone())?;
    let st = match state::from_ss(first) {
        Some(s) => s,
        None => {
            let (_, w) = word(line, &mut pos).ok_or(not_socket.clone())?;
            let s = state::from_ss(w).ok_or(not_socket)?;
            if first != "tcp" {
                return Err(SsError {
                    at: first_at,
                    len: first.len(),
                    kind: SsErrorKind::NotTcp,
                });
            }
            s
        }
    };
    let mut column = |name: &'static str| {
        word(line, &mut pos).ok_or(SsError {
            at: line.len(),
            len: 0,
            kind: SsErrorKind::MissingColumn(name),
        })
    };
    let queue = |(at, w): (usize, &str), name| {
        uint::<u64>(w).ok_or(SsError {
            at,
            len: w.len(),
            kind: SsErrorKind::BadQueue(name),
        })
    };
    let recv_q = queue(column("Recv-Q")?, "Recv-Q")?;
    let send_q = queue(column("Send-Q")?, "Send-Q")?;
    let local = column("local address")?;
    let peer = column("peer address")?;
    let address = |(at, w): (usize, &str), name| {
        parse_endpoint(w).map_err(|named| SsError {
            at,
            len: w.len(),
            kind: if named {
                SsErrorKind::ResolvedName(name)
            } else {
                SsErrorKind::BadAddress(name)
            },
        })
    };
    // A name in either column is the likelier story than damage: say so first.
    let (l, p) = (address(local, "local"), address(peer, "peer"));
    let named = |r: &Result<Endpoint, SsError>| matches!(r, Err(e) if matches!(e.kind, SsErrorKind::ResolvedName(_)));
    if named(&l) {
        l.clone()?;
    }
    if named(&p) {
        p.clone()?;
    }
    Ok(SsConnection {
        state: st,
        recv_q,
        send_q,
        local: l?,
        peer: p?,
        rest: &line[pos..],
    })
}

/// Reads the fields of an `ss -i` info line (and of `-m`, `-p`, `-o`, `-e` output) into
/// `info`; see the module documentation for the mapping. Words it does not know are ignored;
/// a known field whose value does not parse is an error at that field's position in `line`
/// (fields before it have been set).
pub fn parse_info_line(line: &str, info: &mut TcpInfo) -> Result<(), SsError> {
    let mut tokens = Tokens { text: line, pos: 0 };
    while let Some((at, tok)) = tokens.next() {
        let err = |kind| SsError {
            at,
            len: tok.len(),
            kind,
        };
        match tok.split_once(':') {
            Some((key, value)) => field(key, value, info).map_err(err)?,
            None => match tok {
                "app_limited" => info.app_limited = Some(true),
                "send" | "pacing_rate" | "delivery_rate" => {
                    let name = match tok {
                        "send" => "send",
                        "pacing_rate" => "pacing_rate",
                        _ => "delivery_rate",
                    };
                    let (vat, value) = tokens
                        .next()
                        .ok_or_else(|| err(SsErrorKind::MissingValue(name)))?;
                    // `pacing_rate 2648072bps/5000000bps`: the rate, then SO_MAX_PACING_RATE.
                    let rate = value.split_once('/').map_or(value, |(rate, _)| rate);
                    let bps = rate_bps(rate).ok_or(SsError {
                        at: vat,
                        len: value.len(),
                        kind: SsErrorKind::BadValue {
                            field: name,
                            expected: "is not a rate such as 1234bps or 12.5Mbps",
                        },
                    })?;
                    if name == "delivery_rate" {
                        info.delivery_rate = Some(bps / 8 + u64::from(bps % 8 >= 4));
                    }
                }
                // Options (`ts`, `sack`, `ecn`), the congestion control, `-e`'s `<->`.
                _ => {}
            },
        }
    }
    Ok(())
}

/// One `key:value` field into `info`.
fn field(key: &str, value: &str, info: &mut TcpInfo) -> Result<(), SsErrorKind> {
    const COUNT: &str = "is not a whole number";
    const MS: &str = "is not a time in ms";
    let bad =
        |field: &'static str, expected: &'static str| SsErrorKind::BadValue { field, expected };
    let count32 = |field| uint::<u32>(value).ok_or(bad(field, COUNT));
    let count64 = |field| uint::<u64>(value).ok_or(bad(field, COUNT));
    let ms = |field| ms_to_us(value).ok_or(bad(field, MS));
    // `busy:12ms`, `rwnd_limited:12ms(50.0%)`.
    let limited = |field| {
        let ms = value.split_once('(').map_or(value, |(ms, _)| ms);
        ms.strip_suffix("ms")
            .and_then(|ms| decimal(ms, 3))
            .ok_or(bad(field, "is not a time such as 12ms"))
    };
    // `retrans:0/3`, `rtt:0.031/0.015`.
    let pair = |field, expected| value.split_once('/').ok_or(bad(field, expected));
    match key {
        "rto" => info.rto_us = Some(ms("rto")?),
        "ato" => info.ato_us = Some(ms("ato")?),
        "minrtt" => info.min_rtt_us = Some(ms("minrtt")?),
        "rtt" => {
            const RTT: &str = "is not two times in ms such as 0.031/0.015";
            let (a, b) = pair("rtt", RTT)?;
            info.rtt_us = Some(ms_to_us(a).ok_or(bad("rtt", RTT))?);
            info.rttvar_us = Some(ms_to_us(b).ok_or(bad("rtt", RTT))?);
        }
        "retrans" => {
            const RETRANS: &str = "is not two counts such as 0/3";
            let (a, b) = pair("retrans", RETRANS)?;
            info.retrans = Some(uint(a).ok_or(bad("retrans", RETRANS))?);
            info.total_retrans = Some(uint(b).ok_or(bad("retrans", RETRANS))?);
        }
        "backoff" => info.backoff = Some(count32("backoff")?),
        "mss" => info.snd_mss = Some(count32("mss")?),
        "rcvmss" => info.rcv_mss = Some(count32("rcvmss")?),
        "cwnd" => info.snd_cwnd = Some(count32("cwnd")?),
        "ssthresh" => info.snd_ssthresh = Some(count32("ssthresh")?),
        "unacked" => info.unacked = Some(count32("unacked")?),
        "lost" => info.lost = Some(count32("lost")?),
        "rcv_space" => info.rcv_space = Some(count32("rcv_space")?),
        "notsent" => info.notsent_bytes = Some(count32("notsent")?),
        "snd_wnd" => info.snd_wnd = Some(count32("snd_wnd")?),
        "dsack_dups" => info.dsack_dups = Some(count32("dsack_dups")?),
        "reord_seen" => info.reord_seen = Some(count32("reord_seen")?),
        "segs_out" => info.segs_out = Some(count32("segs_out")?),
        "segs_in" => info.segs_in = Some(count32("segs_in")?),
        "data_segs_out" => info.data_segs_out = Some(count32("data_segs_out")?),
        "data_segs_in" => info.data_segs_in = Some(count32("data_segs_in")?),
        "total_rto" => info.total_rto = Some(count32("total_rto")?),
        "total_rto_recoveries" => {
            info.total_rto_recoveries = Some(count32("total_rto_recoveries")?)
        }
        "total_rto_time" => info.total_rto_time_ms = Some(count32("total_rto_time")?),
        "bytes_sent" => info.bytes_sent = Some(count64("bytes_sent")?),
        "bytes_retrans" => info.bytes_retrans = Some(count64("bytes_retrans")?),
        "bytes_acked" => info.bytes_acked = Some(count64("bytes_acked")?),
        "bytes_received" => info.bytes_received = Some(count64("bytes_received")?),
        "busy" => info.busy_time_us = Some(limited("busy")?),
        "rwnd_limited" => info.rwnd_limited_us = Some(limited("rwnd_limited")?),
        "sndbuf_limited" => info.sndbuf_limited_us = Some(limited("sndbuf_limited")?),
        "skmem" | "mem" => memory(value, info).ok_or(bad(
            if key == "skmem" { "skmem" } else { "mem" },
            "is not a list such as (r0,rb131072,t0,tb87040,f0,w0,o0,bl0,d0)",
        ))?,
        "users" => {
            info.pid = users_pid(value).ok_or(bad("users", "has a pid that is not a number"))?
        }
        _ => {}
    }
    Ok(())
}

/// `(r0,rb131072,t0,tb87040,f0,w0,o0,bl0,d0)` (`skmem`) or `(r0,w0,f0,t0)` (old `mem`).
fn memory(value: &str, info: &mut TcpInfo) -> Option<()> {
    let list = value.strip_prefix('(')?.strip_suffix(')')?;
    for item in list.split(',') {
        let digits = item.find(|c: char| c.is_ascii_digit())?;
        let (name, n) = item.split_at(digits);
        let n = uint::<u32>(n)?;
        match name {
            "r" => info.rmem_alloc = Some(n),
            "rb" => info.rcvbuf = Some(n),
            "tb" => info.sndbuf = Some(n),
            "w" => info.wmem_queued = Some(n),
            "" => return None,
            _ => {}
        }
    }
    Some(())
}

/// The first `pid=N` of `(("prog",pid=N,fd=M),...)`, outside quotes: `Some(None)` when there
/// is none, `None` when it is not a number.
fn users_pid(value: &str) -> Option<Option<u32>> {
    let bytes = value.as_bytes();
    let mut quoted = false;
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'"' => quoted = !quoted,
            b'p' if !quoted && value[i..].starts_with("pid=") => {
                let n = &value[i + 4..];
                let end = n.find(|c: char| !c.is_ascii_digit()).unwrap_or(n.len());
                return uint(&n[..end]).map(Some);
            }
            _ => {}
        }
    }
    Some(None)
}

/// A time in ms as `ss` prints it (`%g`: `0.031`, `204`, `1.2e+03`) in µs.
fn ms_to_us(s: &str) -> Option<u32> {
    decimal(s, 3).and_then(|v| u32::try_from(v).ok())
}

/// A rate as `ss` prints it in bit/s: `1234bps` with `-n`, else `12.5Mbps` (`k`/`K`, `M`,
/// `G`, `T`), possibly in `%g`'s exponent form.
fn rate_bps(s: &str) -> Option<u64> {
    let n = s.strip_suffix("bps")?;
    let (n, scale) = match n.as_bytes().last() {
        Some(b'k' | b'K') => (&n[..n.len() - 1], 3),
        Some(b'M') => (&n[..n.len() - 1], 6),
        Some(b'G') => (&n[..n.len() - 1], 9),
        Some(b'T') => (&n[..n.len() - 1], 12),
        _ => (n, 0),
    };
    decimal(n, scale)
}

/// `s` (digits, an optional fraction, an optional exponent as C's `%g` writes them) times
/// 10^`scale`, rounded half up to a whole number. Exact: no floating point.
fn decimal(s: &str, scale: i32) -> Option<u64> {
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    if !(-40..=40).contains(&exp) {
        return None;
    }
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (int.is_empty() && frac.is_empty())
        || int.len() + frac.len() > 30
        || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let m = int
        .bytes()
        .chain(frac.bytes())
        .fold(0u128, |m, b| m * 10 + u128::from(b - b'0'));
    // |power| is at most 12 + 40 + 30: the pow below fails cleanly where it overflows.
    let power = scale + exp - frac.len() as i32;
    let v = if power >= 0 {
        m.checked_mul(10u128.checked_pow(power.unsigned_abs())?)?
    } else {
        match 10u128.checked_pow(power.unsigned_abs()) {
            Some(d) => (m + d / 2) / d,
            None => 0,
        }
    };
    u64::try_from(v).ok()
}

/// An `ss` address column as an endpoint. `Err(true)` when it holds a service or host name,
/// `Err(false)` when it is damaged.
fn parse_endpoint(s: &str) -> Result<Endpoint, bool> {
    let (host, port) = match s.strip_prefix('[') {
        Some(r) => {
            let (host, after) = r.split_once(']').ok_or(false)?;
            // `]:22` or `]%eth0:22`.
            let (iface, port) = after.rsplit_once(':').ok_or(false)?;
            if !(iface.is_empty() || iface.starts_with('%')) {
                return Err(false);
            }
            (host, port)
        }
        None => s.rsplit_once(':').ok_or(false)?,
    };
    let host = host.split_once('%').map_or(host, |(h, _)| h);
    let ip = if host == "*" {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        match host.parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) => return Err(is_name(host)),
        }
    };
    let port = if port == "*" {
        0
    } else if is_digits(port) {
        port.parse::<u16>().map_err(|_| false)?
    } else {
        return Err(is_name(port));
    };
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    Ok(Endpoint::new(ip, port))
}

/// Whether `s` looks like a service or host name (`ssh`, `x11-1`, `db.example.com`).
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().any(|b| b.is_ascii_alphabetic())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'+'))
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Digits with at most one `.` among them.
fn is_number(s: &str) -> bool {
    let (a, b) = s.split_once('.').unwrap_or((s, ""));
    is_digits(a) && (b.is_empty() || is_digits(b))
}

fn uint<T: TryFrom<u64>>(s: &str) -> Option<T> {
    if !is_digits(s) || s.len() > 20 {
        return None;
    }
    s.parse::<u64>().ok().and_then(|v| T::try_from(v).ok())
}

/// `State Recv-Q ...` or `Netid State Recv-Q ...`.
fn is_header(line: &str) -> bool {
    let mut w = line.split_ascii_whitespace();
    match w.next() {
        Some("State") => w.next() == Some("Recv-Q"),
        Some("Netid") => w.next() == Some("State") && w.next() == Some("Recv-Q"),
        _ => false,
    }
}

/// The next whitespace-separated word of `text` from `*pos`, with its position.
fn word<'a>(text: &'a str, pos: &mut usize) -> Option<(usize, &'a str)> {
    let bytes = text.as_bytes();
    let mut i = *pos;
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    let start = i;
    while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    *pos = i;
    (i > start).then(|| (start, &text[start..i]))
}

/// Words split at whitespace outside parentheses and double quotes, with their positions:
/// `users:(("Web Content",pid=1,fd=3))` is one word.
struct Tokens<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Iterator for Tokens<'a> {
    type Item = (usize, &'a str);

    fn next(&mut self) -> Option<(usize, &'a str)> {
        let bytes = self.text.as_bytes();
        let mut i = self.pos;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        let (mut depth, mut quoted) = (0usize, false);
        while i < bytes.len() {
            match bytes[i] {
                b'"' => quoted = !quoted,
                b'(' if !quoted => depth += 1,
                b')' if !quoted => depth = depth.saturating_sub(1),
                b if b.is_ascii_whitespace() && !quoted && depth == 0 => break,
                _ => {}
            }
            i += 1;
        }
        self.pos = i;
        // Splits only at ASCII bytes, so both ends are character boundaries.
        (i > start).then(|| (start, &self.text[start..i]))
    }
}

/// `s` cut to [`SNIPPET`] characters for a message.
fn snippet(s: &str) -> Cow<'_, str> {
    let s = s.trim();
    match s.char_indices().nth(SNIPPET) {
        Some((cut, _)) => Cow::Owned(format!("{}...", &s[..cut])),
        None => Cow::Borrowed(s),
    }
}

/// A socket record being collected: its socket line and the indented lines after it, joined
/// by spaces.
#[derive(Default)]
struct Record {
    active: bool,
    text: String,
    /// Where each line starts, in `text` and in the input.
    starts: Vec<(usize, u64)>,
    /// Bytes of input it covers.
    bytes: u64,
    ts_ns: Option<Nanos>,
    /// Whether its last line ended with a newline.
    complete: bool,
    /// A problem found while collecting it (an overlong line or record).
    problem: Option<(u64, &'static str)>,
}

impl Record {
    /// The input offset of `text[at..]`.
    fn offset_of(&self, at: usize) -> u64 {
        let (text_at, offset) = self
            .starts
            .iter()
            .rev()
            .find(|(t, _)| *t <= at)
            .or(self.starts.first())
            .copied()
            .unwrap_or((0, 0));
        offset + (at.saturating_sub(text_at)) as u64
    }

    fn offset(&self) -> u64 {
        self.starts.first().map_or(0, |s| s.1)
    }
}

/// One line as read: where it starts, how long it is in the input, how it ends.
struct Line {
    offset: u64,
    len: u64,
    newline: bool,
    overlong: bool,
}

/// TCP statistics samples from a TCP statistics log (see the module documentation).
pub struct SsReader<R: BufRead + Send> {
    input: R,
    ledger: Ledger,
    line: Vec<u8>,
    /// Offset of the next byte to read.
    offset: u64,
    /// The current block's time: `None` before the first `###` line and after one that did
    /// not parse.
    ts_ns: Option<Nanos>,
    /// `###` lines seen.
    markers: u64,
    record: Record,
    /// Whether some record had an indented line (`ss` was run with `-i`).
    saw_info: bool,
    untimed: u64,
    named: u64,
    done: bool,
}

impl<R: BufRead + Send> SsReader<R> {
    /// A reader over `input`, the (decompressed) log; `path` names it in warnings.
    pub fn new(input: R, origin: OriginId, path: &str) -> Self {
        SsReader {
            input,
            ledger: Ledger::new(origin, path, FORMAT),
            line: Vec::new(),
            offset: 0,
            ts_ns: None,
            markers: 0,
            record: Record::default(),
            saw_info: false,
            untimed: 0,
            named: 0,
            done: false,
        }
    }

    /// Byte offset of the next line in the input.
    pub fn position(&self) -> u64 {
        self.offset
    }

    /// The next sample, or `None` at the end of the input. Records that do not become samples
    /// are counted and described (see [`ObservationReader::take_stats`] and
    /// [`ObservationReader::take_warnings`]). A read error ends the input: the record being
    /// collected is counted as truncated and the error returned.
    pub fn next_sample(&mut self) -> io::Result<Option<TcpSample>> {
        if self.done {
            return Ok(None);
        }
        loop {
            let line = match self.read_line() {
                Ok(Some(line)) => line,
                Ok(None) => {
                    let sample = self.flush(true);
                    self.finish();
                    return Ok(sample);
                }
                Err(e) => {
                    if self.record.active {
                        self.record.complete = false;
                        self.flush(true);
                    }
                    self.finish();
                    return Err(e);
                }
            };
            let raw = std::mem::take(&mut self.line);
            let sample = self.take_line(&raw, &line);
            self.line = raw;
            if sample.is_some() {
                return Ok(sample);
            }
        }
    }

    /// Reads one line (up to [`MAX_LINE`] bytes of it) into `self.line`.
    fn read_line(&mut self) -> io::Result<Option<Line>> {
        self.line.clear();
        let mut line = Line {
            offset: self.offset,
            len: 0,
            newline: false,
            overlong: false,
        };
        loop {
            let avail = match self.input.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                break;
            }
            let (take, found) = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (avail.len(), false),
            };
            let room = MAX_LINE.saturating_sub(self.line.len());
            self.line.extend_from_slice(&avail[..take.min(room)]);
            line.overlong |= take > room;
            self.input.consume(take);
            line.len += take as u64;
            self.offset += take as u64;
            if found {
                line.newline = true;
                break;
            }
        }
        Ok((line.len > 0).then_some(line))
    }

    /// Takes one line; returns the sample of the record it ends, if any.
    fn take_line(&mut self, raw: &[u8], line: &Line) -> Option<TcpSample> {
        let text = String::from_utf8_lossy(raw);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            return None;
        }
        if text.starts_with([' ', '\t']) {
            if self.record.active {
                self.append(text, line);
            } else if !text.trim().is_empty() {
                self.ledger.stats.records += 1;
                self.ledger.stats.bytes += line.len;
                self.damage(
                    line.offset,
                    SkipReason::BadRow,
                    format!(
                        "`{}`: an indented line with no socket line before it",
                        snippet(text)
                    ),
                );
            }
            return None;
        }
        let sample = self.flush(false);
        if text.starts_with("###") {
            self.markers += 1;
            self.ts_ns = parse_marker(text);
            if self.ts_ns.is_none() {
                self.ledger.stats.records += 1;
                self.ledger.stats.bytes += line.len;
                self.damage(
                    line.offset,
                    SkipReason::BadRow,
                    format!(
                        "`{}` is not `### <unix time in seconds>` (as `date +%s.%N` writes \
                         it): the block after it is skipped",
                        snippet(text)
                    ),
                );
            }
        } else if !is_header(text) {
            let r = &mut self.record;
            r.active = true;
            r.text.clear();
            r.starts.clear();
            r.bytes = 0;
            r.ts_ns = self.ts_ns;
            r.problem = None;
            self.append(text, line);
        }
        sample
    }

    fn append(&mut self, text: &str, line: &Line) {
        let r = &mut self.record;
        r.bytes += line.len;
        r.complete = line.newline;
        if line.overlong && r.problem.is_none() {
            r.problem = Some((line.offset, "a line longer than 64 KiB"));
        }
        if r.text.len() + text.len() >= MAX_RECORD {
            if r.problem.is_none() {
                r.problem = Some((line.offset, "a record longer than 256 KiB"));
            }
            return;
        }
        if !r.text.is_empty() {
            r.text.push(' ');
        }
        r.starts.push((r.text.len(), line.offset));
        r.text.push_str(text);
    }

    /// Ends the record being collected: its sample, or its count under a skip reason.
    fn flush(&mut self, at_end: bool) -> Option<TcpSample> {
        if !self.record.active {
            return None;
        }
        self.record.active = false;
        let lines = self.record.starts.len();
        // Skipped records are counted here; samples by `stats.record` below.
        let skipped = |stats: &mut SourceStats, r: &Record| {
            stats.records += 1;
            stats.bytes += r.bytes;
        };
        if let Some((offset, what)) = self.record.problem {
            skipped(&mut self.ledger.stats, &self.record);
            self.damage(offset, SkipReason::BadRow, format!("{what}: skipped"));
            return None;
        }
        let truncated = !self.record.complete || (at_end && lines == 1 && self.saw_info);
        if truncated {
            skipped(&mut self.ledger.stats, &self.record);
            let offset = self.record.offset();
            self.damage(
                offset,
                SkipReason::TruncatedRecord,
                "the input ends inside this socket record (a truncated last block)".into(),
            );
            return None;
        }
        self.saw_info |= lines > 1;
        let parsed = parse_connection_line(&self.record.text).and_then(|c| {
            let mut info = TcpInfo {
                state: Some(c.state),
                ..TcpInfo::default()
            };
            let rest_at = self.record.text.len() - c.rest.len();
            parse_info_line(c.rest, &mut info)
                .map(|()| (c.local, c.peer, info))
                .map_err(|e| SsError {
                    at: e.at + rest_at,
                    ..e
                })
        });
        let (local, peer, info) = match parsed {
            Ok(p) => p,
            Err(e) => {
                skipped(&mut self.ledger.stats, &self.record);
                self.skip(e);
                return None;
            }
        };
        let Some(ts_ns) = self.record.ts_ns else {
            skipped(&mut self.ledger.stats, &self.record);
            self.ledger.stats.skip(SkipReason::NoTimestamp);
            self.untimed += 1;
            if self.markers == 0 && self.untimed == 1 {
                let offset = self.record.offset();
                self.warn(
                    Some(offset),
                    format!(
                        "socket records before any `### <unix time>` line are skipped: a TCP \
                         statistics log is `ss -tin` output with each block preceded by \
                         `### <unix time in seconds>`, as `{HOW_TO_CAPTURE}` writes it"
                    ),
                );
            }
            return None;
        };
        let stats = &mut self.ledger.stats;
        stats.record(ts_ns, self.record.bytes);
        stats.tcp += 1;
        if local.ip.is_ipv6() {
            stats.ipv6 += 1;
        }
        Some(TcpSample {
            origin: self.ledger.origin,
            ts_ns,
            local,
            peer,
            info,
        })
    }

    /// Counts a record that did not parse, and says why.
    fn skip(&mut self, e: SsError) {
        let offset = self.record.offset_of(e.at);
        let text = &self.record.text;
        let piece = text.get(e.at..e.at + e.len).unwrap_or(text);
        match e.kind {
            SsErrorKind::NotTcp => self.ledger.stats.skip(SkipReason::OtherProtocol),
            SsErrorKind::ResolvedName(_) => {
                self.ledger.stats.skip(SkipReason::ResolvedName);
                self.named += 1;
                if self.named == 1 {
                    let message =
                        format!("`{}`: {}; such records are skipped", snippet(piece), e.kind);
                    self.warn(Some(offset), message);
                }
            }
            kind => {
                let message = format!("`{}`: {kind}", snippet(piece));
                self.damage(offset, SkipReason::BadRow, message);
            }
        }
    }

    /// Counts a skipped record and describes it (up to the warning limit).
    fn damage(&mut self, offset: u64, reason: SkipReason, message: String) {
        self.ledger.stats.skip(reason);
        self.ledger.damage.push(Damage {
            offset,
            reason,
            message,
        });
    }

    /// A warning outside the damage cap (said once per input).
    fn warn(&mut self, offset: Option<u64>, message: String) {
        self.ledger.warnings.push(Warning {
            origin: self.ledger.origin,
            path: self.ledger.path.clone(),
            offset,
            message,
        });
    }

    fn finish(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        // Damage first, in input order; then what is said about the whole input.
        self.ledger.drain_damage();
        if self.markers == 0 && self.untimed == 0 {
            self.warn(
                None,
                format!(
                    "holds no `### <unix time>` line: a TCP statistics log is `ss -tin` output \
                     with each block preceded by `### <unix time in seconds>`, as \
                     `{HOW_TO_CAPTURE}` writes it"
                ),
            );
        }
        if self.named > 1 {
            let message = format!(
                "{} socket records with service or host names skipped in all (capture with \
                 `ss -tin`)",
                self.named
            );
            self.warn(None, message);
        }
        self.ledger.finish();
    }
}

impl<R: BufRead + Send> ObservationReader for SsReader<R> {
    fn origin(&self) -> OriginId {
        self.ledger.origin
    }

    fn reserve(&self, max: usize, out: &mut Batch) {
        out.tcp.reserve(max);
    }

    fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
        let mut produced = 0;
        while produced < max && !self.done {
            match self.next_sample() {
                Ok(Some(s)) => {
                    out.tcp.push(s);
                    produced += 1;
                }
                Ok(None) => {}
                Err(e) => {
                    let at = self.offset;
                    self.ledger.io_error(at, e);
                }
            }
        }
        self.ledger.drain_damage();
        !self.done
    }

    fn take_stats(&mut self) -> SourceStats {
        self.ledger.stats.take()
    }

    fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.ledger.warnings)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufReader, Read};

    use proptest::prelude::*;

    use super::*;
    use crate::warning_limit;

    const ORIGIN: OriginId = OriginId(3);

    fn read_from(
        input: impl BufRead + Send,
        max: usize,
    ) -> (Vec<TcpSample>, SourceStats, Vec<Warning>) {
        let mut r = SsReader::new(input, ORIGIN, "t.log");
        let mut batch = Batch::default();
        while r.read_batch(max, &mut batch) {}
        assert!(!r.read_batch(max, &mut batch), "stays finished");
        (batch.tcp, r.take_stats(), r.take_warnings())
    }

    fn read(text: &[u8]) -> (Vec<TcpSample>, SourceStats, Vec<Warning>) {
        read_from(text, 5)
    }

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/data/ss/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap()
    }

    fn ep(s: &str) -> Endpoint {
        s.parse().unwrap()
    }

    fn sample(ts_ns: Nanos, local: &str, peer: &str, info: TcpInfo) -> TcpSample {
        TcpSample {
            origin: ORIGIN,
            ts_ns,
            local: ep(local),
            peer: ep(peer),
            info,
        }
    }

    fn only_state(s: u8) -> TcpInfo {
        TcpInfo {
            state: Some(s),
            ..TcpInfo::default()
        }
    }

    /// Every record is either a sample or counted under one skip reason.
    fn assert_accounted(samples: &[TcpSample], stats: &SourceStats) {
        assert_eq!(
            stats.records,
            samples.len() as u64 + stats.skipped_total(),
            "{stats:?}"
        );
    }

    const BLOCK1: Nanos = 1_795_305_858_489_725_640;
    const BLOCK2: Nanos = 1_795_305_858_759_678_706;

    #[test]
    fn golden_tin_two_blocks() {
        let (samples, stats, warnings) = read(&fixture("tin.log"));
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(samples.len(), 28);
        assert!(samples[..14].iter().all(|s| s.ts_ns == BLOCK1));
        assert!(samples[14..].iter().all(|s| s.ts_ns == BLOCK2));
        assert!(samples.iter().all(|s| s.origin == ORIGIN));
        assert_eq!(stats.records, 28);
        assert_eq!(stats.skipped_total(), 0);
        assert_eq!(stats.tcp, 28);
        // [::1] twice and [fd77::1] once a block; the IPv4-mapped ones are IPv4.
        assert_eq!(stats.ipv6, 6);
        assert_eq!(
            (stats.first_ns, stats.last_ns),
            (Some(BLOCK1), Some(BLOCK2))
        );
        assert_eq!(
            stats.bytes,
            fixture("tin.log").len() as u64 - header_bytes("tin.log")
        );
        assert_eq!(stats.formats.get(FORMAT), Some(&1));

        // rwnd-limited sender with a retransmission (a receiver that reads slowly).
        assert_eq!(
            samples[1],
            sample(
                BLOCK1,
                "10.77.0.1:38672",
                "10.77.0.2:5003",
                TcpInfo {
                    state: Some(state::ESTABLISHED),
                    backoff: Some(1),
                    rto_us: Some(256_000),
                    snd_mss: Some(1448),
                    rcv_mss: Some(536),
                    retrans: Some(0),
                    total_retrans: Some(1),
                    rtt_us: Some(52_730),
                    rttvar_us: Some(24_285),
                    min_rtt_us: Some(16_226),
                    snd_ssthresh: Some(8),
                    snd_cwnd: Some(20),
                    rcv_space: Some(14_480),
                    bytes_acked: Some(75_297),
                    bytes_sent: Some(76_744),
                    bytes_retrans: Some(1448),
                    segs_out: Some(60),
                    segs_in: Some(37),
                    data_segs_out: Some(53),
                    notsent_bytes: Some(89_776),
                    busy_time_us: Some(3_868_000),
                    rwnd_limited_us: Some(3_244_000),
                    delivery_rate: Some(137_920 / 8),
                    dsack_dups: Some(1),
                    ..TcpInfo::default()
                }
            )
        );
        // A FIN-WAIT-2 (time-wait) socket: an empty info line.
        assert_eq!(
            samples[3],
            sample(
                BLOCK1,
                "127.0.0.1:37782",
                "127.0.0.1:6001",
                only_state(state::FIN_WAIT2)
            )
        );
        assert_eq!(samples[2].info.state, Some(state::CLOSE_WAIT));
        // Bound to a device: `10.77.0.1%cwv0:58400`.
        assert_eq!(
            samples[5],
            sample(
                BLOCK1,
                "10.77.0.1:58400",
                "10.77.0.2:5001",
                TcpInfo {
                    state: Some(state::ESTABLISHED),
                    rto_us: Some(220_000),
                    snd_mss: Some(1448),
                    rcv_mss: Some(536),
                    unacked: Some(4),
                    retrans: Some(0),
                    total_retrans: Some(13),
                    rtt_us: Some(17_799),
                    rttvar_us: Some(1_686),
                    min_rtt_us: Some(9_424),
                    snd_ssthresh: Some(10),
                    snd_cwnd: Some(18),
                    rcv_space: Some(14_480),
                    bytes_acked: Some(789_161),
                    bytes_sent: Some(813_776),
                    bytes_retrans: Some(18_824),
                    segs_out: Some(564),
                    segs_in: Some(278),
                    data_segs_out: Some(562),
                    notsent_bytes: Some(27_512),
                    busy_time_us: Some(3_804_000),
                    delivery_rate: Some(2_584_416 / 8),
                    snd_wnd: Some(99_328),
                    ..TcpInfo::default()
                }
            )
        );
        // IPv4-mapped IPv6 as IPv4.
        assert_eq!(samples[9].local, ep("127.0.0.1:44976"));
        assert_eq!(samples[9].peer, ep("127.0.0.1:6002"));
        // IPv6 over the veth pair.
        assert_eq!(
            samples[12],
            sample(
                BLOCK1,
                "[fd77::1]:35856",
                "[fd77::2]:5002",
                TcpInfo {
                    state: Some(state::ESTABLISHED),
                    rto_us: Some(224_000),
                    snd_mss: Some(1428),
                    rcv_mss: Some(536),
                    rtt_us: Some(20_069),
                    rttvar_us: Some(1_171),
                    min_rtt_us: Some(11_347),
                    snd_ssthresh: Some(10),
                    snd_cwnd: Some(18),
                    rcv_space: Some(14_280),
                    bytes_acked: Some(638_977),
                    bytes_sent: Some(638_976),
                    segs_out: Some(459),
                    segs_in: Some(230),
                    data_segs_out: Some(457),
                    busy_time_us: Some(3_408_000),
                    delivery_rate: Some(2_219_976 / 8),
                    snd_wnd: Some(100_352),
                    ..TcpInfo::default()
                }
            )
        );
        assert_eq!(samples[13].local, ep("[::1]:58848"));
        // The receiver of the loopback stream: app-limited, no data sent.
        let receiver = &samples[14 + 7];
        assert_eq!(receiver.local, ep("127.0.0.1:6001"));
        assert_eq!(receiver.info.app_limited, Some(true));
        assert_eq!(receiver.info.ato_us, Some(40_000));
        assert_eq!(receiver.info.bytes_received, Some(77_000));
        assert_eq!(receiver.info.bytes_sent, None);
    }

    /// Bytes of the `###` and header lines of a fixture (not part of any record).
    fn header_bytes(name: &str) -> u64 {
        fixture(name)
            .split_inclusive(|&b| b == b'\n')
            .filter(|l| l.starts_with(b"###") || l.starts_with(b"State"))
            .map(|l| l.len() as u64)
            .sum()
    }

    #[test]
    fn golden_memory_processes_timers_extended() {
        let (samples, stats, warnings) = read(&fixture("tinmpeo.log"));
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(samples.len(), 14);
        assert_eq!(stats.skipped_total(), 0);
        let ts = 1_795_305_858_765_094_366;
        assert_eq!(
            samples[1],
            sample(
                ts,
                "10.77.0.1:38672",
                "10.77.0.2:5003",
                TcpInfo {
                    state: Some(state::ESTABLISHED),
                    rto_us: Some(248_000),
                    snd_mss: Some(1448),
                    rcv_mss: Some(536),
                    unacked: Some(5),
                    retrans: Some(0),
                    total_retrans: Some(1),
                    rtt_us: Some(44_945),
                    rttvar_us: Some(24_706),
                    min_rtt_us: Some(16_226),
                    snd_ssthresh: Some(8),
                    snd_cwnd: Some(20),
                    rcv_space: Some(14_480),
                    bytes_acked: Some(81_089),
                    bytes_sent: Some(89_776),
                    bytes_retrans: Some(1448),
                    segs_out: Some(69),
                    segs_in: Some(40),
                    data_segs_out: Some(62),
                    notsent_bytes: Some(76_744),
                    busy_time_us: Some(4_144_000),
                    rwnd_limited_us: Some(3_472_000),
                    delivery_rate: Some(1_975_440 / 8),
                    snd_wnd: Some(7240),
                    dsack_dups: Some(1),
                    sndbuf: Some(138_240),
                    wmem_queued: Some(101_456),
                    rcvbuf: Some(131_072),
                    rmem_alloc: Some(0),
                    pid: Some(11_562),
                    ..TcpInfo::default()
                }
            )
        );
        // `timer:(timewait,59sec,0) ino:0 sk:5` and an empty info line.
        assert_eq!(
            samples[3],
            sample(
                ts,
                "127.0.0.1:37782",
                "127.0.0.1:6001",
                only_state(state::FIN_WAIT2)
            )
        );
        // The server's end belongs to another process.
        assert_eq!(samples[7].local, ep("127.0.0.1:6001"));
        assert_eq!(samples[7].info.pid, Some(11_470));
        assert_eq!(samples[7].info.sndbuf, Some(3_939_840));
    }

    #[test]
    fn golden_states_other_than_established() {
        let (samples, stats, warnings) = read(&fixture("tina-states.log"));
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(stats.skipped_total(), 0);
        let states: Vec<u8> = samples.iter().map(|s| s.info.state.unwrap()).collect();
        use state::*;
        assert_eq!(
            states,
            [
                LISTEN,
                LISTEN,
                SYN_SENT,
                FIN_WAIT1,
                TIME_WAIT,
                TIME_WAIT,
                TIME_WAIT,
                SYN_SENT,
                ESTABLISHED
            ]
        );
        let ts = 1_795_306_038_949_525_926;
        // `0.0.0.0:*`.
        assert_eq!(
            samples[0],
            sample(
                ts,
                "127.0.0.1:6099",
                "0.0.0.0:0",
                TcpInfo {
                    state: Some(LISTEN),
                    snd_cwnd: Some(10),
                    ..TcpInfo::default()
                }
            )
        );
        // A SYN that is never answered.
        assert_eq!(
            samples[2],
            sample(
                ts,
                "10.77.0.1:56302",
                "10.77.0.2:5008",
                TcpInfo {
                    state: Some(SYN_SENT),
                    rto_us: Some(1_000_000),
                    snd_mss: Some(524),
                    rcv_mss: Some(88),
                    snd_cwnd: Some(1),
                    segs_out: Some(3),
                    app_limited: Some(true),
                    unacked: Some(1),
                    retrans: Some(1),
                    total_retrans: Some(2),
                    lost: Some(1),
                    ..TcpInfo::default()
                }
            )
        );
        // Closed with data the peer's zero window does not take: backoff, 100% rwnd-limited.
        assert_eq!(
            samples[3],
            sample(
                ts,
                "10.77.0.1:54674",
                "10.77.0.2:5007",
                TcpInfo {
                    state: Some(FIN_WAIT1),
                    backoff: Some(3),
                    rto_us: Some(208_000),
                    snd_mss: Some(1448),
                    rcv_mss: Some(536),
                    retrans: Some(0),
                    total_retrans: Some(1),
                    rtt_us: Some(5_505),
                    rttvar_us: Some(11_001),
                    min_rtt_us: Some(5),
                    snd_cwnd: Some(14),
                    rcv_space: Some(14_480),
                    bytes_acked: Some(4345),
                    bytes_sent: Some(5792),
                    bytes_retrans: Some(1448),
                    segs_out: Some(9),
                    segs_in: Some(5),
                    data_segs_out: Some(4),
                    notsent_bytes: Some(43_441),
                    busy_time_us: Some(2_920_000),
                    rwnd_limited_us: Some(2_920_000),
                    delivery_rate: Some(804_480 / 8),
                    dsack_dups: Some(1),
                    ..TcpInfo::default()
                }
            )
        );
        assert_eq!(samples[4].info, only_state(TIME_WAIT));

        let (peer, stats, warnings) = read(&fixture("tina-states-peer.log"));
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(stats.skipped_total(), 0);
        assert_eq!(peer.len(), 7);
        assert_eq!(
            peer[6],
            sample(
                1_795_306_038_948_487_219,
                "10.77.0.2:5008",
                "10.77.0.1:56302",
                only_state(SYN_RECV)
            )
        );
        assert_eq!(peer[5].info.ato_us, Some(80_000));
        assert_eq!(peer[5].info.rtt_us, Some(5));
    }

    #[test]
    fn service_names_are_skipped_with_one_warning_saying_to_use_n() {
        let text = fixture("ti-names.log");
        let (samples, stats, warnings) = read(&text);
        assert_eq!(samples.len(), 6);
        assert_eq!(stats.skipped(SkipReason::ResolvedName), 8);
        assert_eq!(stats.skipped_total(), 8);
        assert_accounted(&samples, &stats);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        let first = text
            .windows(15)
            .position(|w| w == b"127.0.0.1:x11-1")
            .unwrap();
        assert_eq!(warnings[0].offset, Some(first as u64));
        assert_eq!(warnings[0].path, "t.log");
        assert!(
            warnings[0].message.contains("without -n"),
            "{}",
            warnings[0]
        );
        assert!(warnings[0].message.contains("ss -tin"), "{}", warnings[0]);
        assert!(
            warnings[1].message.starts_with("8 socket records"),
            "{}",
            warnings[1]
        );
        // Without -n rates are rounded to three digits: `delivery_rate 138kbps`.
        assert_eq!(samples[1].info.delivery_rate, Some(138_000 / 8));
        assert_eq!(samples[1].info.rwnd_limited_us, Some(3_240_000));
    }

    /// The example line of the format's description, with every field `TcpInfo` keeps.
    const FULL: &str = "cubic wscale:7,7 rto:204 rtt:0.031/0.015 ato:40 mss:32768 \
        pmtu:65535 rcvmss:536 advmss:65483 cwnd:10 ssthresh:7 bytes_sent:1234 \
        bytes_retrans:99 bytes_acked:1235 bytes_received:567 segs_out:12 segs_in:10 \
        data_segs_out:5 data_segs_in:4 send 84.5Gbps lastsnd:44 lastrcv:44 lastack:44 \
        pacing_rate 169Gbps delivery_rate 12.2Gbps delivered:6 app_limited busy:2ms \
        rwnd_limited:1ms(50.0%) sndbuf_limited:3ms(10.0%) unacked:2 retrans:0/3 lost:1 \
        sacked:2 dsack_dups:1 reordering:4 reord_seen:1 rcv_rtt:1 rcv_space:14600 \
        rcv_ssthresh:64076 minrtt:0.012 snd_wnd:65536 rcv_wnd:65536 notsent:100 backoff:2 \
        total_rto:3 total_rto_recoveries:2 total_rto_time:150";

    fn full_info() -> TcpInfo {
        TcpInfo {
            state: None,
            ca_state: None,
            backoff: Some(2),
            rto_us: Some(204_000),
            ato_us: Some(40_000),
            snd_mss: Some(32_768),
            rcv_mss: Some(536),
            unacked: Some(2),
            lost: Some(1),
            retrans: Some(0),
            total_retrans: Some(3),
            rtt_us: Some(31),
            rttvar_us: Some(15),
            min_rtt_us: Some(12),
            snd_ssthresh: Some(7),
            snd_cwnd: Some(10),
            rcv_space: Some(14_600),
            bytes_acked: Some(1235),
            bytes_received: Some(567),
            bytes_sent: Some(1234),
            bytes_retrans: Some(99),
            segs_out: Some(12),
            segs_in: Some(10),
            data_segs_out: Some(5),
            data_segs_in: Some(4),
            notsent_bytes: Some(100),
            busy_time_us: Some(2000),
            rwnd_limited_us: Some(1000),
            sndbuf_limited_us: Some(3000),
            delivery_rate: Some(12_200_000_000 / 8),
            app_limited: Some(true),
            snd_wnd: Some(65_536),
            total_rto: Some(3),
            total_rto_recoveries: Some(2),
            total_rto_time_ms: Some(150),
            dsack_dups: Some(1),
            reord_seen: Some(1),
            sndbuf: None,
            wmem_queued: None,
            rcvbuf: None,
            rmem_alloc: None,
            pid: None,
        }
    }

    #[test]
    fn info_line_maps_every_field_with_units() {
        let mut info = TcpInfo::default();
        parse_info_line(FULL, &mut info).unwrap();
        assert_eq!(info, full_info());
        // With SO_MAX_PACING_RATE set.
        let mut capped = TcpInfo::default();
        parse_info_line(&FULL.replace("169Gbps", "2.5Mbps/3Mbps"), &mut capped).unwrap();
        assert_eq!(capped, full_info());
    }

    #[test]
    fn memory_and_processes() {
        let mut info = TcpInfo::default();
        parse_info_line(
            "users:((\"Web Content\",pid=4242,fd=7),(\"nginx\",pid=9,fd=3)) \
             skmem:(r12,rb131072,t0,tb87040,f4096,w2048,o0,bl0,d3) cubic",
            &mut info,
        )
        .unwrap();
        assert_eq!(info.pid, Some(4242));
        assert_eq!(
            (info.rmem_alloc, info.rcvbuf, info.sndbuf, info.wmem_queued),
            (Some(12), Some(131_072), Some(87_040), Some(2048))
        );
        // Old kernels: `mem:(r,w,f,t)`.
        let mut info = TcpInfo::default();
        parse_info_line("mem:(r5,w6,f7,t8)", &mut info).unwrap();
        assert_eq!(
            (info.rmem_alloc, info.wmem_queued, info.sndbuf),
            (Some(5), Some(6), None)
        );
        // A pid= inside the program's name does not count.
        let mut info = TcpInfo::default();
        parse_info_line("users:((\"a pid=1\",pid=77,fd=1))", &mut info).unwrap();
        assert_eq!(info.pid, Some(77));
    }

    #[test]
    fn numbers_as_ss_prints_them() {
        assert_eq!(ms_to_us("0.031"), Some(31));
        assert_eq!(ms_to_us("124.948"), Some(124_948));
        assert_eq!(ms_to_us("204"), Some(204_000));
        assert_eq!(ms_to_us("0.0005"), Some(1), "rounded half up");
        assert_eq!(ms_to_us("1.2e+03"), Some(1_200_000), "%g's exponent form");
        assert_eq!(ms_to_us("5e-3"), Some(5));
        assert_eq!(ms_to_us("4294967.295"), Some(u32::MAX));
        assert_eq!(ms_to_us("4294967.296"), None, "too big for tcp_info");
        for bad in ["", ".", "-1", "1.2.3", "1e", "abc", "1,5", "+1"] {
            assert_eq!(ms_to_us(bad), None, "{bad}");
        }
        assert_eq!(rate_bps("927106bps"), Some(927_106));
        assert_eq!(rate_bps("927kbps"), Some(927_000));
        assert_eq!(rate_bps("12.5Mbps"), Some(12_500_000));
        assert_eq!(rate_bps("1.25Tbps"), Some(1_250_000_000_000));
        assert_eq!(rate_bps("1e+03kbps"), Some(1_000_000));
        assert_eq!(rate_bps("84.5K"), None);
        assert_eq!(rate_bps("Mbps"), None);
    }

    #[test]
    fn bad_fields_are_errors_at_their_position() {
        let line = "cubic rto:204 rtt:fast/0.1 cwnd:10";
        let mut info = TcpInfo::default();
        let e = parse_info_line(line, &mut info).unwrap_err();
        assert_eq!(&line[e.at..e.at + e.len], "rtt:fast/0.1");
        assert!(matches!(e.kind, SsErrorKind::BadValue { field: "rtt", .. }));
        assert_eq!(info.rto_us, Some(204_000), "fields before it are set");
        for (line, piece) in [
            ("retrans:1", "retrans:1"),
            ("cwnd:-3", "cwnd:-3"),
            (
                "bytes_acked:99999999999999999999999",
                "bytes_acked:99999999999999999999999",
            ),
            ("busy:12", "busy:12"),
            ("skmem:(r1,rb)", "skmem:(r1,rb)"),
            ("skmem:(r1,rb2", "skmem:(r1,rb2"),
            (
                "users:((\"x\",pid=abc,fd=1))",
                "users:((\"x\",pid=abc,fd=1))",
            ),
            ("a delivery_rate fast b", "fast"),
            ("x delivery_rate", "delivery_rate"),
        ] {
            let e = parse_info_line(line, &mut TcpInfo::default()).unwrap_err();
            assert_eq!(&line[e.at..e.at + e.len], piece, "{line}: {e}");
        }
        // Words and fields it does not know are not errors.
        parse_info_line(
            "ts sack ecn bbr:(bw:1x) wscale:?? fancy_new_field:1/2/3 <->",
            &mut info,
        )
        .unwrap();
    }

    #[test]
    fn connection_lines() {
        let c = parse_connection_line("ESTAB 0 89776 10.77.0.1:38672 10.77.0.2:5003 ").unwrap();
        assert_eq!(
            (c.state, c.recv_q, c.send_q, c.local, c.peer, c.rest),
            (
                state::ESTABLISHED,
                0,
                89_776,
                ep("10.77.0.1:38672"),
                ep("10.77.0.2:5003"),
                " "
            )
        );
        let cases = [
            ("ESTAB 0 0 [::1]:22 [::1]:50000", "[::1]:22", "[::1]:50000"),
            (
                "ESTAB 0 0 [::ffff:127.0.0.1]:80 [::ffff:10.0.0.2]:5",
                "127.0.0.1:80",
                "10.0.0.2:5",
            ),
            (
                "ESTAB 0 0 10.0.0.1%eth0:22 10.0.0.2:9",
                "10.0.0.1:22",
                "10.0.0.2:9",
            ),
            (
                "ESTAB 0 0 [fe80::1]%eth0:22 [fe80::2]:9",
                "[fe80::1]:22",
                "[fe80::2]:9",
            ),
            (
                "ESTAB 0 0 [fe80::1%eth0]:22 [fe80::2]:9",
                "[fe80::1]:22",
                "[fe80::2]:9",
            ),
            (
                "ESTAB 0 0 ::1:22 ::ffff:127.0.0.1:9",
                "[::1]:22",
                "127.0.0.1:9",
            ),
            ("LISTEN 0 128 *:22 *:*", "0.0.0.0:22", "0.0.0.0:0"),
            ("LISTEN 0 128 [::]:22 [::]:*", "[::]:22", "[::]:0"),
            (
                "tcp ESTAB 0 0 10.0.0.1:1 10.0.0.2:2",
                "10.0.0.1:1",
                "10.0.0.2:2",
            ),
            (
                "UNCONN 0 0 10.0.0.1:1 10.0.0.2:2",
                "10.0.0.1:1",
                "10.0.0.2:2",
            ),
        ];
        for (line, local, peer) in cases {
            let c = parse_connection_line(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!((c.local, c.peer), (ep(local), ep(peer)), "{line}");
        }
        let users = "ESTAB 0 0 10.0.0.1:1 10.0.0.2:2 users:((\"sshd\",pid=1,fd=3)) <->";
        assert_eq!(
            parse_connection_line(users).unwrap().rest,
            " users:((\"sshd\",pid=1,fd=3)) <->"
        );
        let err = |line: &str| parse_connection_line(line).unwrap_err();
        let at = |line: &str| {
            let e = err(line);
            (line[e.at..e.at + e.len].to_owned(), e.kind)
        };
        assert_eq!(
            at("ESTAB 0 0 127.0.0.1:ssh 127.0.0.1:50000"),
            ("127.0.0.1:ssh".into(), SsErrorKind::ResolvedName("local"))
        );
        assert_eq!(
            at("ESTAB 0 0 10.0.0.1:999999 localhost:x11-1"),
            ("localhost:x11-1".into(), SsErrorKind::ResolvedName("peer")),
            "a name is the likelier story"
        );
        assert_eq!(
            at("ESTAB 0 0 10.0.0.1:999999 10.0.0.2:1"),
            ("10.0.0.1:999999".into(), SsErrorKind::BadAddress("local"))
        );
        assert_eq!(
            at("ESTAB x 0 a b"),
            ("x".into(), SsErrorKind::BadQueue("Recv-Q"))
        );
        assert_eq!(
            at("udp UNCONN 0 0 10.0.0.1:53 0.0.0.0:*"),
            ("udp".into(), SsErrorKind::NotTcp)
        );
        assert_eq!(
            err("ESTAB 0 0 10.0.0.1:1").kind,
            SsErrorKind::MissingColumn("peer address")
        );
        assert_eq!(err("hello world").kind, SsErrorKind::NotASocket);
        assert_eq!(err("").kind, SsErrorKind::NotASocket);
        for bad in [
            "[::1:22",
            "[::1]22",
            "[::1]x:22",
            "1.2.3:4",
            "10.0.0.1",
            "::zz:1",
        ] {
            assert!(
                matches!(
                    err(&format!("ESTAB 0 0 {bad} 1.1.1.1:1")).kind,
                    SsErrorKind::BadAddress(_)
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn markers_and_detection() {
        assert_eq!(parse_marker("### 1795305858.489725640"), Some(BLOCK1));
        assert_eq!(parse_marker("### 12"), Some(12_000_000_000));
        assert_eq!(parse_marker("###1.5 host-a"), Some(1_500_000_000));
        assert_eq!(parse_marker("### 1.1234567899"), Some(1_123_456_789));
        for bad in [
            "###",
            "### ",
            "### x",
            "### 1.x",
            "### -1",
            "### Tue Nov 21",
            "## 1",
        ] {
            assert_eq!(parse_marker(bad), None, "{bad}");
        }
        assert_eq!(parse_marker("### 99999999999999999999"), None);

        assert!(looks_like_ss_log(b"### 1795305858.489725640\nState Recv-Q"));
        assert!(looks_like_ss_log(b"\n\n### 17953"));
        assert!(looks_like_ss_log(&fixture("tin.log")[..100]));
        assert!(looks_like_ss_log(
            b"State      Recv-Q Send-Q Local Address:Port"
        ));
        assert!(looks_like_ss_log(b"Netid State  Recv-Q Send-Q"));
        assert!(!looks_like_ss_log(b"### Notes\n"));
        assert!(!looks_like_ss_log(b"send_ns,recv_ns,src,dst\n"));
        assert!(!looks_like_ss_log(b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00"));
        assert!(!looks_like_ss_log(b""));
        assert!(!looks_like_ss_log(b"ESTAB 0 0 1.1.1.1:1 2.2.2.2:2"));
    }

    const CONN: &str = "ESTAB      0      0               10.0.0.1:40000          10.0.0.2:80   \n";
    const INFO: &str =
        "\t cubic rto:204 rtt:0.5/0.25 mss:1448 cwnd:10 delivery_rate 8000bps retrans:0/2\n";

    fn block(ts: &str, records: usize) -> String {
        let mut s =
            format!("### {ts}\nState Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n");
        for _ in 0..records {
            s.push_str(CONN);
            s.push_str(INFO);
        }
        s
    }

    fn small_info() -> TcpInfo {
        TcpInfo {
            state: Some(state::ESTABLISHED),
            rto_us: Some(204_000),
            rtt_us: Some(500),
            rttvar_us: Some(250),
            snd_mss: Some(1448),
            snd_cwnd: Some(10),
            delivery_rate: Some(1000),
            retrans: Some(0),
            total_retrans: Some(2),
            ..TcpInfo::default()
        }
    }

    #[test]
    fn wrapped_info_reads_as_if_it_did_not_wrap() {
        let text = "### 1\n\
            ESTAB 0 0 10.0.0.1:40000\n    10.0.0.2:80 users:((\"a\",pid=5,fd=1))\n\
            \t cubic rto:204 rtt:0.5/0.25\n\
            \t mss:1448 cwnd:10 delivery_rate\n  8000bps\n\
            \t retrans:0/2\n";
        let (samples, stats, warnings) = read(text.as_bytes());
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(stats.records, 1);
        let mut want = small_info();
        want.pid = Some(5);
        assert_eq!(
            samples,
            [sample(1_000_000_000, "10.0.0.1:40000", "10.0.0.2:80", want)]
        );
    }

    #[test]
    fn empty_blocks_and_crlf() {
        let text = format!(
            "### 1\n### 2\nState Recv-Q Send-Q Local Address:Port Peer Address:Port\n\n{}### 4\n",
            block("3", 2)
        );
        let (samples, stats, warnings) = read(text.as_bytes());
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(samples.len(), 2);
        assert!(
            samples
                .iter()
                .all(|s| s.ts_ns == 3_000_000_000 && s.info == small_info())
        );
        assert_eq!(stats.skipped_total(), 0);
        let crlf = text.replace('\n', "\r\n");
        let (crlf_samples, _, warnings) = read(crlf.as_bytes());
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(crlf_samples, samples);
    }

    #[test]
    fn truncated_last_block() {
        let whole = block("5", 3);
        // Cut inside the last info line, after the last socket line, inside it.
        for (cut, why) in [
            (whole.len() - 10, "inside the info line"),
            (whole.len() - INFO.len(), "after the socket line"),
            (whole.len() - INFO.len() - 20, "inside the socket line"),
        ] {
            let (samples, stats, warnings) = read(&whole.as_bytes()[..cut]);
            assert_eq!(samples.len(), 2, "{why}");
            assert_eq!(stats.skipped(SkipReason::TruncatedRecord), 1, "{why}");
            assert_accounted(&samples, &stats);
            let last = (whole.len() - INFO.len() - CONN.len()) as u64;
            assert_eq!(warnings.len(), 1, "{why}: {warnings:?}");
            assert_eq!(warnings[0].offset, Some(last), "{why}");
            assert!(warnings[0].message.contains("truncated"), "{}", warnings[0]);
        }
        // Cut inside a `###` line: nothing is lost.
        let text = format!("{whole}### 17");
        let (samples, stats, warnings) = read(text.as_bytes());
        assert_eq!((samples.len(), stats.skipped_total()), (3, 0));
        assert!(warnings.is_empty(), "{warnings:?}");
        // Output of `ss -tn` (no info lines) is not taken for truncated.
        let text = format!("### 1\n{CONN}{CONN}");
        let (samples, stats, _) = read(text.as_bytes());
        assert_eq!((samples.len(), stats.skipped_total()), (2, 0));
        assert_eq!(samples[1].info, only_state(state::ESTABLISHED));
    }

    #[test]
    fn garbage_lines_are_counted_with_offsets() {
        let head = block("1", 1);
        // A line that is not ss output takes the indented lines after it along.
        let garbage = "Cannot open netlink socket: Protocol not supported\n\t details\n";
        let junk = "\x00\x01\u{fffd}\n";
        let bad_field = "ESTAB 0 0 10.0.0.1:1 10.0.0.2:2\n\t rto:204 cwnd:ten\n";
        let orphan = "\t cubic rto:204\n";
        let text = format!("{head}{garbage}{junk}{bad_field}### 2\n{orphan}{CONN}{INFO}");
        let (samples, stats, warnings) = read(text.as_bytes());
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[1].ts_ns, 2_000_000_000);
        assert_eq!(stats.skipped(SkipReason::BadRow), 4, "{warnings:?}");
        assert_accounted(&samples, &stats);
        let offsets: Vec<_> = warnings.iter().map(|w| w.offset.unwrap()).collect();
        let garbage_at = head.len();
        let junk_at = garbage_at + garbage.len();
        let cwnd_at = text.find("cwnd:ten").unwrap();
        let orphan_at = text.find(orphan).unwrap();
        assert_eq!(
            offsets,
            [garbage_at, junk_at, cwnd_at, orphan_at].map(|o| o as u64)
        );
        assert!(
            warnings[0].message.contains("Cannot open netlink"),
            "{}",
            warnings[0]
        );
        assert!(
            warnings[2]
                .message
                .contains("`cwnd:ten`: cwnd is not a whole number"),
            "{}",
            warnings[2]
        );
        assert_eq!(
            warnings[2].to_string(),
            format!("t.log: offset {cwnd_at}: {}", warnings[2].message)
        );
        assert!(
            warnings[3].message.contains("no socket line before it"),
            "{}",
            warnings[3]
        );
    }

    #[test]
    fn input_without_markers_says_what_the_format_is() {
        let text = &block("1", 2)[6..]; // without its `### 1` line
        let (samples, stats, warnings) = read(text.as_bytes());
        assert!(samples.is_empty());
        assert_eq!(stats.skipped(SkipReason::NoTimestamp), 2);
        assert_accounted(&samples, &stats);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].message.contains("### <unix time"),
            "{}",
            warnings[0]
        );
        assert!(
            warnings[0].message.contains(HOW_TO_CAPTURE),
            "{}",
            warnings[0]
        );

        for text in [&b""[..], b"hello\n", b"\n\n"] {
            let (_, _, warnings) = read(text);
            let last = warnings.last().unwrap();
            assert!(
                last.message.starts_with("holds no `### <unix time>` line"),
                "{last}"
            );
            assert_eq!(last.offset, None);
        }
    }

    #[test]
    fn a_marker_that_is_not_a_time_skips_its_block() {
        let text = format!(
            "{}### Tue Nov 21 10:00:00 UTC 2026\n{CONN}{INFO}{}",
            block("1", 1),
            block("3", 1)
        );
        let (samples, stats, warnings) = read(text.as_bytes());
        assert_eq!(
            samples.iter().map(|s| s.ts_ns).collect::<Vec<_>>(),
            [1_000_000_000, 3_000_000_000]
        );
        assert_eq!(stats.skipped(SkipReason::BadRow), 1);
        assert_eq!(stats.skipped(SkipReason::NoTimestamp), 1);
        assert_accounted(&samples, &stats);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].message.contains("date +%s.%N"),
            "{}",
            warnings[0]
        );
    }

    #[test]
    fn other_protocols_are_counted_quietly() {
        let text = "### 1\nNetid State Recv-Q Send-Q Local Address:Port Peer Address:Port\n\
            udp UNCONN 0 0 0.0.0.0:53 0.0.0.0:*\n\
            tcp ESTAB 0 0 10.0.0.1:1 10.0.0.2:2\n\t cwnd:10\n";
        let (samples, stats, warnings) = read(text.as_bytes());
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(samples.len(), 1);
        assert_eq!(stats.skipped(SkipReason::OtherProtocol), 1);
    }

    #[test]
    fn long_lines_and_many_warnings() {
        let long = format!(
            "### 1\nESTAB 0 0 10.0.0.1:1 10.0.0.2:2\n\t {}\n{CONN}{INFO}",
            "x".repeat(MAX_LINE * 2)
        );
        let (samples, stats, warnings) = read(long.as_bytes());
        assert_eq!(samples.len(), 1);
        assert_eq!(stats.skipped(SkipReason::BadRow), 1);
        assert!(warnings[0].message.contains("64 KiB"), "{}", warnings[0]);
        assert_eq!(stats.bytes, long.len() as u64 - 6);

        let text = format!("### 1\n{}", "junk\n".repeat(100));
        let (_, stats, warnings) = read(text.as_bytes());
        assert_eq!(stats.skipped(SkipReason::BadRow), 100);
        assert_eq!(warnings.len(), warning_limit() + 1);
        assert!(
            warnings[warning_limit()].message.starts_with("80 more"),
            "{warnings:?}"
        );
    }

    /// Gives `data`, then fails.
    struct Failing<'a>(&'a [u8]);

    impl Read for Failing<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::Error::other("disk on fire"));
            }
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_read_error_ends_the_input() {
        let text = block("1", 2);
        let cut = text.len() - 3;
        let (samples, stats, warnings) =
            read_from(BufReader::new(Failing(&text.as_bytes()[..cut])), 100);
        assert_eq!(samples.len(), 1);
        assert_eq!(stats.skipped(SkipReason::TruncatedRecord), 1);
        assert!(
            warnings.last().unwrap().message.contains("disk on fire"),
            "{warnings:?}"
        );
        assert_eq!(warnings.last().unwrap().offset, Some(cut as u64));
    }

    /// Real lines, to mix and damage.
    fn vocabulary() -> Vec<String> {
        let mut lines: Vec<String> = ["tin.log", "tinmpeo.log", "tina-states.log", "ti-names.log"]
            .iter()
            .flat_map(|f| {
                String::from_utf8(fixture(f))
                    .unwrap()
                    .split_inclusive('\n')
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect();
        lines.push(format!("{FULL}\n"));
        lines
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let (samples, stats, _) = read(&data);
            assert_accounted(&samples, &stats);
            let _ = looks_like_ss_log(&data);
            let text = String::from_utf8_lossy(&data);
            let _ = parse_connection_line(&text);
            let _ = parse_info_line(&text, &mut TcpInfo::default());
        }

        #[test]
        fn damaged_real_lines_never_panic(
            picks in proptest::collection::vec((any::<prop::sample::Index>(), 0usize..700, any::<u8>(), 0u8..4), 0..40),
        ) {
            let vocabulary = vocabulary();
            let mut text = Vec::new();
            for (pick, at, byte, how) in picks {
                let mut line = pick.get(&vocabulary).clone().into_bytes();
                let at = at.min(line.len());
                match how {
                    0 => line.truncate(at),
                    1 if at < line.len() => line[at] = byte,
                    2 => line.insert(at, byte),
                    _ => {}
                }
                text.extend_from_slice(&line);
            }
            let (samples, stats, _) = read(&text);
            assert_accounted(&samples, &stats);
        }

        #[test]
        fn chunking_does_not_matter(cap in 1usize..64, max in 1usize..9) {
            let text = fixture("tinmpeo.log");
            let want = read(&text);
            let got = read_from(BufReader::with_capacity(cap, &text[..]), max);
            prop_assert_eq!(got, want);
        }

        #[test]
        fn decimal_is_exact(int in 0u64..5_000_000, frac in 0u64..1000, digits in 1usize..4) {
            let frac = frac % 10u64.pow(digits as u32);
            let text = format!("{int}.{frac:0digits$}");
            let want = int * 1000 + frac * 10u64.pow(3 - digits as u32);
            prop_assert_eq!(decimal(&text, 3), Some(want));
        }
    }
}
