//! Live TCP statistics through NETLINK_SOCK_DIAG: the kernel's `struct tcp_info` and socket
//! memory for every TCP socket of this network namespace, as `ss -tinm` reads them, sampled
//! at Poisson-distributed times.
//!
//! Layers, bottom up:
//! - wire: checked, zero-copy views over the kernel's replies ([`NlHeader`], [`DiagView`]);
//!   `struct tcp_info` is read by byte offset following include/uapi/linux/tcp.h
//!   ([`TCP_INFO_LAYOUT`]), and a field is `Some` only when the attribute the kernel sent is
//!   long enough to hold it (the struct grows with kernel versions: 104 bytes in 2.6, 248 from
//!   6.7, 280 on 6.18 with the AccECN counters, which are not read);
//! - [`SockDiag`]: one netlink socket and the dump of all TCP sockets (IPv4, then IPv6);
//!   [`dump_once`] opens one and dumps once;
//! - [`LivePoller`]: an [`ObservationReader`] that dumps at Poisson times and keeps within a
//!   CPU budget.
//!
//! # The live poller
//!
//! - **Input**: the kernel's socket tables, dumped with `SOCK_DIAG_BY_FAMILY` requests for
//!   `IPPROTO_TCP`, asking for `INET_DIAG_INFO` and `INET_DIAG_SKMEMINFO`, for the states of
//!   [`PollerConfig::states`] (all but LISTEN by default). TIME-WAIT and SYN-RECV sockets
//!   carry no `tcp_info`: their samples hold the state and endpoints only.
//! - **Output**: [`TcpSample`]s in [`Batch::tcp`], one per emitted socket and dump, stamped
//!   with CLOCK_REALTIME taken when the dump started (all samples of one dump share it).
//!   IPv4-mapped IPv6 endpoints (`::ffff:a.b.c.d`) are given as IPv4, as a capture sees them.
//! - **When**: dump times form a Poisson process (exponential gaps, mean
//!   [`PollerConfig::mean_interval`], 500 ms by default), so that by PASTA (SNAP §2.1) the
//!   samples see the time average of each connection's state. The first dump happens on the
//!   first call. [`ObservationReader::read_batch`] sleeps until the next dump time but at most
//!   100 ms per call; it returns false once [`LivePoller::new`]'s `until` instant has passed or
//!   its stop flag is set (samples already taken are handed out first).
//! - **Rates per connection**: a connection is *hot* when one of its cumulative problem
//!   counters (`total_retrans`, `total_rto`, `rwnd_limited_us`, `sndbuf_limited_us`) changed
//!   within [`PollerConfig::hot_for`], or when its smoothed RTT is far above its minimum
//!   (more than [`PollerConfig::rtt_ratio`] times and by more than [`PollerConfig::rtt_floor`]).
//!   Hot connections, and every connection the first time it is seen, are emitted on every
//!   dump; quiet ones only on every k-th dump (staggered by socket cookie so that they do not
//!   all come in one dump). k is 1 unless the CPU budget raised it. The counters are
//!   cumulative, so thinning loses resolution, not totals; a quiet connection's last
//!   up-to-k dumps before it closes are lost.
//! - **CPU budget** (SNAP §7): the poller measures its own CPU time (the thread CPU clock,
//!   user + system, around each dump: the kernel's work in `recvmsg` included) over a sliding
//!   window ([`PollerConfig::cpu_window`], at least 8 mean intervals). At most once per
//!   window: above [`PollerConfig::cpu_high`] (5% of one core) the mean interval is lengthened
//!   in proportion (up to [`PollerConfig::max_interval`]) and k doubled (up to
//!   [`PollerConfig::max_quiet_every`]); below [`PollerConfig::cpu_low`] (1%) the interval is
//!   shortened back toward the configured mean and k halved toward 1. Turning
//!   [`PollerConfig::cpu_budget`] off keeps both fixed. [`LivePoller::status`] and
//!   [`PollerStatusHandle`] report the measured share and the current interval.
//! - **State**: one entry per socket seen in the last dump (its cookie, four counters, when it
//!   was last emitted and until when it is hot: 72 bytes in the table), and the samples of
//!   the last dump not yet handed out. Entries of sockets missing from a dump are dropped after that dump
//!   (a failed dump drops nothing).
//! - **Cost**: per socket and dump, the kernel's fill of ~400 bytes of reply, one parse of
//!   them and one hash-table update; a [`TcpSample`] is built only for emitted sockets. On
//!   the development VM (benches/poller.rs): about 1.3 µs of CPU per socket and dump, three
//!   quarters of it in the kernel; 3 ms per dump for 2,000 sockets (0.6% of a core at
//!   500 ms), 25 ms for 20,000 (5%; 2.7% once the budget lengthened the interval).
//! - **Errors**: a socket that cannot be opened, or a kernel that refuses the dump, fails
//!   [`LivePoller::new`] with a one-line [`NetlinkError`]. Later failed dumps become warnings;
//!   after [`MAX_FAILED_DUMPS`] failures in a row the poller stops.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Exp1};
use rustix::io::Errno;
use rustix::net::netlink::{SOCK_DIAG, SocketAddrNetlink};
use rustix::net::sockopt::{Timeout, set_socket_timeout};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};
use rustix::time::{ClockId, clock_gettime};

use super::{TcpInfo, TcpSample, state};
use crate::observation::{Batch, Endpoint, Nanos};
use crate::origin::OriginId;
use crate::reader::ObservationReader;
use crate::stats::SourceStats;
use crate::{Warning, warning_limit};

/// The name warnings give for this source.
const SOURCE_NAME: &str = "netlink sock_diag";

/// Failed dumps in a row after which the live poller gives up.
pub const MAX_FAILED_DUMPS: u32 = 5;

/// Longest one [`ObservationReader::read_batch`] call sleeps.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// How long a dump may wait for the kernel's next reply before it fails.
const RECV_TIMEOUT: Duration = Duration::from_secs(5);

/// The receive buffer: the kernel fills dump replies up to 32 KiB when the reader offers that
/// much (net/netlink/af_netlink.c, `max_recvmsg_len`).
const RECV_BUFFER: usize = 32 * 1024;

// Netlink and inet_diag numbers (include/uapi/linux/netlink.h, sock_diag.h, inet_diag.h).
const NLMSG_HDRLEN: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x01;
const NLM_F_DUMP: u16 = 0x300;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IPPROTO_TCP: u8 = 6;
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_SKMEMINFO: u16 = 7;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, `inet_diag_sockid` (48).
const INET_DIAG_REQ_V2_LEN: usize = 56;
/// `struct inet_diag_msg`: family, state, timer, retrans, sockid (48), expires, rqueue,
/// wqueue, uid, inode.
const INET_DIAG_MSG_LEN: usize = 72;
const SKMEMINFO_RMEM_ALLOC: usize = 0;
const SKMEMINFO_RCVBUF: usize = 1;
const SKMEMINFO_SNDBUF: usize = 3;
const SKMEMINFO_WMEM_QUEUED: usize = 5;

/// What went wrong talking to the kernel. Each renders as one line.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The kernel (or a sandbox) offers no NETLINK_SOCK_DIAG sockets.
    #[error(
        "netlink sock_diag is not available here (kernel without it, or a sandbox that forbids netlink sockets): {error}"
    )]
    Unsupported {
        /// The system's error.
        error: std::io::Error,
    },
    /// Opening the socket or dumping was not permitted.
    #[error("not permitted to read TCP socket statistics through netlink sock_diag: {error}")]
    PermissionDenied {
        /// The system's error.
        error: std::io::Error,
    },
    /// Any other failure to open the socket.
    #[error("cannot open a netlink sock_diag socket: {error}")]
    Open {
        /// The system's error.
        error: std::io::Error,
    },
    /// Sending the dump request failed.
    #[error("sending the sock_diag dump request failed: {error}")]
    Send {
        /// The system's error.
        error: std::io::Error,
    },
    /// Reading the dump failed.
    #[error("reading the sock_diag dump failed: {error}")]
    Recv {
        /// The system's error.
        error: std::io::Error,
    },
    /// The kernel did not answer in time.
    #[error("the kernel did not answer the sock_diag dump within {0:?}")]
    Timeout(Duration),
    /// The kernel refused the dump.
    #[error(
        "the kernel refused the {family} TCP socket dump: {error} (is the tcp_diag module available?)"
    )]
    Kernel {
        /// `IPv4` or `IPv6`.
        family: &'static str,
        /// The error the kernel gave.
        error: std::io::Error,
    },
    /// A reply that contradicts itself.
    #[error("malformed sock_diag reply: {what} at offset {offset} (length {len})")]
    Malformed {
        /// What is wrong.
        what: &'static str,
        /// Offset in the datagram.
        offset: usize,
        /// The length concerned.
        len: usize,
    },
    /// A datagram larger than the receive buffer.
    #[error(
        "sock_diag reply truncated: a {len}-byte datagram did not fit the {capacity}-byte buffer"
    )]
    Truncated {
        /// The datagram's length.
        len: usize,
        /// The buffer's.
        capacity: usize,
    },
    /// A configuration that cannot work.
    #[error("invalid poller configuration: {0}")]
    Config(&'static str),
}

impl NetlinkError {
    fn open(e: Errno) -> Self {
        let error = std::io::Error::from(e);
        match e {
            Errno::AFNOSUPPORT | Errno::PROTONOSUPPORT | Errno::NOSYS => {
                NetlinkError::Unsupported { error }
            }
            Errno::ACCESS | Errno::PERM => NetlinkError::PermissionDenied { error },
            _ => NetlinkError::Open { error },
        }
    }

    fn kernel(family: u8, errno: i32) -> Self {
        let error = std::io::Error::from_raw_os_error(errno);
        if errno == Errno::ACCESS.raw_os_error() || errno == Errno::PERM.raw_os_error() {
            return NetlinkError::PermissionDenied { error };
        }
        NetlinkError::Kernel {
            family: if family == AF_INET6 { "IPv6" } else { "IPv4" },
            error,
        }
    }
}

/// A set of TCP states (numbered as in [`state`]), as the dump request's `idiag_states` bit
/// mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateMask(pub u32);

impl StateMask {
    /// Every state (`ss -a`).
    pub const ALL: StateMask = StateMask(0xFFF & !1);
    /// Every state but LISTEN (the default).
    pub const ALL_BUT_LISTEN: StateMask = StateMask(Self::ALL.0 & !(1 << state::LISTEN));
    /// Established connections only.
    pub const ESTABLISHED: StateMask = StateMask(1 << state::ESTABLISHED);
    /// No state: a dump that returns nothing (used to probe permissions).
    pub const NONE: StateMask = StateMask(0);

    /// The set of `states`.
    pub fn of(states: &[u8]) -> Self {
        StateMask(
            states
                .iter()
                .filter(|s| **s < 32)
                .fold(0, |m, s| m | (1 << s)),
        )
    }

    /// Whether `state` is in the set.
    pub fn contains(self, state: u8) -> bool {
        state < 32 && self.0 & (1 << state) != 0
    }
}

impl Default for StateMask {
    fn default() -> Self {
        StateMask::ALL_BUT_LISTEN
    }
}

// ---------------------------------------------------------------------------------------------
// Wire: checked views over the kernel's replies.
// ---------------------------------------------------------------------------------------------

/// Reads a native-endian u16 at `at`, if `b` holds it.
fn ne_u16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_ne_bytes([s[0], s[1]]))
}

/// Reads a native-endian u32 at `at`, if `b` holds it.
fn ne_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

/// Reads a native-endian u64 at `at`, if `b` holds it.
fn ne_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    let mut a = [0; 8];
    a.copy_from_slice(s);
    Some(u64::from_ne_bytes(a))
}

/// Netlink lengths are padded to 4 bytes.
fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

/// A checked netlink message header (`struct nlmsghdr`): its length fits the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NlHeader {
    /// `nlmsg_len`: header and payload, unpadded.
    pub len: usize,
    /// `nlmsg_type`.
    pub kind: u16,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`.
    pub seq: u32,
}

impl NlHeader {
    /// The header at the start of `b` (a datagram's bytes from `offset` on), checked against
    /// `b`'s length.
    pub fn parse(b: &[u8], offset: usize) -> Result<Self, NetlinkError> {
        let malformed = |what, len| NetlinkError::Malformed { what, offset, len };
        let (Some(len), Some(kind), Some(flags), Some(seq)) =
            (ne_u32(b, 0), ne_u16(b, 4), ne_u16(b, 6), ne_u32(b, 8))
        else {
            return Err(malformed("netlink header cut short", b.len()));
        };
        let len = len as usize;
        if len < NLMSG_HDRLEN || len > b.len() {
            return Err(malformed("netlink message length out of bounds", len));
        }
        Ok(NlHeader {
            len,
            kind,
            flags,
            seq,
        })
    }
}

/// A checked view of one `SOCK_DIAG_BY_FAMILY` reply: `struct inet_diag_msg` and its
/// attributes. Borrowed from the receive buffer; [`DiagView::to_sample`] makes the owned
/// record.
#[derive(Clone, Copy, Debug)]
pub struct DiagView<'a> {
    msg: &'a [u8],
    info: Option<&'a [u8]>,
    skmem: Option<&'a [u8]>,
}

impl<'a> DiagView<'a> {
    /// Checks the payload of one reply (the bytes after its netlink header; `offset` is where
    /// they start in the datagram, for errors).
    pub fn new_checked(msg: &'a [u8], offset: usize) -> Result<Self, NetlinkError> {
        if msg.len() < INET_DIAG_MSG_LEN {
            return Err(NetlinkError::Malformed {
                what: "inet_diag_msg cut short",
                offset,
                len: msg.len(),
            });
        }
        let family = msg[0];
        if family != AF_INET && family != AF_INET6 {
            return Err(NetlinkError::Malformed {
                what: "inet_diag_msg of an unknown address family",
                offset,
                len: family as usize,
            });
        }
        let mut view = DiagView {
            msg,
            info: None,
            skmem: None,
        };
        let mut at = INET_DIAG_MSG_LEN;
        while at + 4 <= msg.len() {
            let (Some(len), Some(kind)) = (ne_u16(msg, at), ne_u16(msg, at + 2)) else {
                break;
            };
            let len = len as usize;
            if len < 4 || at + len > msg.len() {
                return Err(NetlinkError::Malformed {
                    what: "attribute length out of bounds",
                    offset: offset + at,
                    len,
                });
            }
            let payload = &msg[at + 4..at + len];
            match kind & 0x3FFF {
                INET_DIAG_INFO => view.info = Some(payload),
                INET_DIAG_SKMEMINFO => view.skmem = Some(payload),
                _ => {}
            }
            at += align4(len);
        }
        Ok(view)
    }

    /// `AF_INET` or `AF_INET6`.
    pub fn family(&self) -> u8 {
        self.msg[0]
    }

    /// `idiag_state` (see [`state`]).
    pub fn state(&self) -> u8 {
        self.msg[1]
    }

    /// The socket's cookie: unique among the sockets of this network namespace.
    pub fn cookie(&self) -> u64 {
        let lo = ne_u32(self.msg, 44).unwrap_or(0) as u64;
        let hi = ne_u32(self.msg, 48).unwrap_or(0) as u64;
        lo | hi << 32
    }

    fn endpoint(&self, port_at: usize, addr_at: usize) -> Endpoint {
        let port = u16::from_be_bytes([self.msg[port_at], self.msg[port_at + 1]]);
        let a = &self.msg[addr_at..addr_at + 16];
        let ip = if self.family() == AF_INET {
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        } else {
            let mut o = [0; 16];
            o.copy_from_slice(a);
            let v6 = Ipv6Addr::from(o);
            match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            }
        };
        Endpoint::new(ip, port)
    }

    /// This host's end (`idiag_sport`, `idiag_src`).
    pub fn local(&self) -> Endpoint {
        self.endpoint(4, 8)
    }

    /// The other end (`idiag_dport`, `idiag_dst`).
    pub fn peer(&self) -> Endpoint {
        self.endpoint(6, 24)
    }

    /// Whether the endpoints are IPv6 (not IPv4-mapped).
    pub fn is_ipv6(&self) -> bool {
        matches!(self.local().ip, IpAddr::V6(_))
    }

    /// The raw `struct tcp_info` attribute, as long as the kernel made it.
    pub fn tcp_info(&self) -> Option<&'a [u8]> {
        self.info
    }

    /// The raw `SK_MEMINFO` array.
    pub fn skmeminfo(&self) -> Option<&'a [u8]> {
        self.skmem
    }

    /// Bytes of the reply (header excluded).
    pub fn len(&self) -> usize {
        self.msg.len()
    }

    /// Whether the reply is empty (never, for a checked view).
    pub fn is_empty(&self) -> bool {
        self.msg.is_empty()
    }

    /// The counters whose change makes a connection hot: `total_retrans`, `total_rto`,
    /// `rwnd_limited`, `sndbuf_limited` (0 where absent).
    pub fn problem_counters(&self) -> [u64; 4] {
        let Some(i) = self.info else {
            return [0; 4];
        };
        [
            ne_u32(i, off::TOTAL_RETRANS).unwrap_or(0) as u64,
            ne_u16(i, off::TOTAL_RTO).unwrap_or(0) as u64,
            ne_u64(i, off::RWND_LIMITED).unwrap_or(0),
            ne_u64(i, off::SNDBUF_LIMITED).unwrap_or(0),
        ]
    }

    /// Smoothed and minimum RTT, µs, when the kernel gave both.
    pub fn rtt_and_min(&self) -> Option<(u32, u32)> {
        let i = self.info?;
        Some((ne_u32(i, off::RTT)?, ne_u32(i, off::MIN_RTT)?))
    }

    /// The owned sample, stamped `ts_ns` and attributed to `origin`.
    pub fn to_sample(&self, origin: OriginId, ts_ns: Nanos) -> TcpSample {
        let mut info = match self.info {
            Some(b) => parse_tcp_info(b),
            None => TcpInfo::default(),
        };
        if info.state.is_none() {
            info.state = Some(self.state());
        }
        if let Some(m) = self.skmem {
            let at = |i: usize| ne_u32(m, i * 4);
            info.rmem_alloc = at(SKMEMINFO_RMEM_ALLOC);
            info.rcvbuf = at(SKMEMINFO_RCVBUF);
            info.sndbuf = at(SKMEMINFO_SNDBUF);
            info.wmem_queued = at(SKMEMINFO_WMEM_QUEUED);
        }
        TcpSample {
            origin,
            ts_ns,
            local: self.local(),
            peer: self.peer(),
            info,
        }
    }
}

/// Byte offsets of the `struct tcp_info` fields read (include/uapi/linux/tcp.h).
pub mod off {
    /// `tcpi_state` (u8).
    pub const STATE: usize = 0;
    /// `tcpi_ca_state` (u8).
    pub const CA_STATE: usize = 1;
    /// `tcpi_backoff` (u8).
    pub const BACKOFF: usize = 4;
    /// The byte of `tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2`.
    pub const APP_LIMITED_BYTE: usize = 7;
    /// `tcpi_rto`.
    pub const RTO: usize = 8;
    /// `tcpi_ato`.
    pub const ATO: usize = 12;
    /// `tcpi_snd_mss`.
    pub const SND_MSS: usize = 16;
    /// `tcpi_rcv_mss`.
    pub const RCV_MSS: usize = 20;
    /// `tcpi_unacked`.
    pub const UNACKED: usize = 24;
    /// `tcpi_lost`.
    pub const LOST: usize = 32;
    /// `tcpi_retrans`.
    pub const RETRANS: usize = 36;
    /// `tcpi_rtt`.
    pub const RTT: usize = 68;
    /// `tcpi_rttvar`.
    pub const RTTVAR: usize = 72;
    /// `tcpi_snd_ssthresh`.
    pub const SND_SSTHRESH: usize = 76;
    /// `tcpi_snd_cwnd`.
    pub const SND_CWND: usize = 80;
    /// `tcpi_rcv_space`.
    pub const RCV_SPACE: usize = 96;
    /// `tcpi_total_retrans`.
    pub const TOTAL_RETRANS: usize = 100;
    /// `tcpi_bytes_acked` (u64).
    pub const BYTES_ACKED: usize = 120;
    /// `tcpi_bytes_received` (u64).
    pub const BYTES_RECEIVED: usize = 128;
    /// `tcpi_segs_out`.
    pub const SEGS_OUT: usize = 136;
    /// `tcpi_segs_in`.
    pub const SEGS_IN: usize = 140;
    /// `tcpi_notsent_bytes`.
    pub const NOTSENT_BYTES: usize = 144;
    /// `tcpi_min_rtt`.
    pub const MIN_RTT: usize = 148;
    /// `tcpi_data_segs_in`.
    pub const DATA_SEGS_IN: usize = 152;
    /// `tcpi_data_segs_out`.
    pub const DATA_SEGS_OUT: usize = 156;
    /// `tcpi_delivery_rate` (u64).
    pub const DELIVERY_RATE: usize = 160;
    /// `tcpi_busy_time` (u64).
    pub const BUSY_TIME: usize = 168;
    /// `tcpi_rwnd_limited` (u64).
    pub const RWND_LIMITED: usize = 176;
    /// `tcpi_sndbuf_limited` (u64).
    pub const SNDBUF_LIMITED: usize = 184;
    /// `tcpi_bytes_sent` (u64).
    pub const BYTES_SENT: usize = 200;
    /// `tcpi_bytes_retrans` (u64).
    pub const BYTES_RETRANS: usize = 208;
    /// `tcpi_dsack_dups`.
    pub const DSACK_DUPS: usize = 216;
    /// `tcpi_reord_seen`.
    pub const REORD_SEEN: usize = 220;
    /// `tcpi_snd_wnd`.
    pub const SND_WND: usize = 228;
    /// `tcpi_total_rto` (u16).
    pub const TOTAL_RTO: usize = 240;
    /// `tcpi_total_rto_recoveries` (u16).
    pub const TOTAL_RTO_RECOVERIES: usize = 242;
    /// `tcpi_total_rto_time` (u32).
    pub const TOTAL_RTO_TIME: usize = 244;
}

/// `struct tcp_info` as of Linux 6.7 (name, offset, size), in order: the offsets of [`off`]
/// are checked against it, and it against natural C alignment, in the tests. Later kernels
/// append fields (6.18: AccECN counters, up to 280 bytes), earlier ones stop sooner.
pub const TCP_INFO_LAYOUT: &[(&str, usize, usize)] = &[
    ("tcpi_state", 0, 1),
    ("tcpi_ca_state", 1, 1),
    ("tcpi_retransmits", 2, 1),
    ("tcpi_probes", 3, 1),
    ("tcpi_backoff", 4, 1),
    ("tcpi_options", 5, 1),
    ("tcpi_snd_wscale:4, tcpi_rcv_wscale:4", 6, 1),
    (
        "tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2",
        7,
        1,
    ),
    ("tcpi_rto", 8, 4),
    ("tcpi_ato", 12, 4),
    ("tcpi_snd_mss", 16, 4),
    ("tcpi_rcv_mss", 20, 4),
    ("tcpi_unacked", 24, 4),
    ("tcpi_sacked", 28, 4),
    ("tcpi_lost", 32, 4),
    ("tcpi_retrans", 36, 4),
    ("tcpi_fackets", 40, 4),
    ("tcpi_last_data_sent", 44, 4),
    ("tcpi_last_ack_sent", 48, 4),
    ("tcpi_last_data_recv", 52, 4),
    ("tcpi_last_ack_recv", 56, 4),
    ("tcpi_pmtu", 60, 4),
    ("tcpi_rcv_ssthresh", 64, 4),
    ("tcpi_rtt", 68, 4),
    ("tcpi_rttvar", 72, 4),
    ("tcpi_snd_ssthresh", 76, 4),
    ("tcpi_snd_cwnd", 80, 4),
    ("tcpi_advmss", 84, 4),
    ("tcpi_reordering", 88, 4),
    ("tcpi_rcv_rtt", 92, 4),
    ("tcpi_rcv_space", 96, 4),
    ("tcpi_total_retrans", 100, 4),
    ("tcpi_pacing_rate", 104, 8),
    ("tcpi_max_pacing_rate", 112, 8),
    ("tcpi_bytes_acked", 120, 8),
    ("tcpi_bytes_received", 128, 8),
    ("tcpi_segs_out", 136, 4),
    ("tcpi_segs_in", 140, 4),
    ("tcpi_notsent_bytes", 144, 4),
    ("tcpi_min_rtt", 148, 4),
    ("tcpi_data_segs_in", 152, 4),
    ("tcpi_data_segs_out", 156, 4),
    ("tcpi_delivery_rate", 160, 8),
    ("tcpi_busy_time", 168, 8),
    ("tcpi_rwnd_limited", 176, 8),
    ("tcpi_sndbuf_limited", 184, 8),
    ("tcpi_delivered", 192, 4),
    ("tcpi_delivered_ce", 196, 4),
    ("tcpi_bytes_sent", 200, 8),
    ("tcpi_bytes_retrans", 208, 8),
    ("tcpi_dsack_dups", 216, 4),
    ("tcpi_reord_seen", 220, 4),
    ("tcpi_rcv_ooopack", 224, 4),
    ("tcpi_snd_wnd", 228, 4),
    ("tcpi_rcv_wnd", 232, 4),
    ("tcpi_rehash", 236, 4),
    ("tcpi_total_rto", 240, 2),
    ("tcpi_total_rto_recoveries", 242, 2),
    ("tcpi_total_rto_time", 244, 4),
];

/// The [`TcpInfo`] fields held by a `struct tcp_info` attribute of any length: a field is
/// `Some` only if `b` reaches to its end. `ssthresh` is given as the kernel has it
/// (0x7fffffff while in initial slow start). The socket-memory fields and `pid` stay `None`.
pub fn parse_tcp_info(b: &[u8]) -> TcpInfo {
    let u8_at = |at: usize| b.get(at).copied();
    let u32_at = |at: usize| ne_u32(b, at);
    let u64_at = |at: usize| ne_u64(b, at);
    // The first bit-field member is the least significant bit on little-endian ABIs and the
    // most significant one on big-endian ABIs.
    let app_limited_bit = if cfg!(target_endian = "little") {
        0x01
    } else {
        0x80
    };
    TcpInfo {
        state: u8_at(off::STATE),
        ca_state: u8_at(off::CA_STATE),
        backoff: u8_at(off::BACKOFF).map(u32::from),
        rto_us: u32_at(off::RTO),
        ato_us: u32_at(off::ATO),
        snd_mss: u32_at(off::SND_MSS),
        rcv_mss: u32_at(off::RCV_MSS),
        unacked: u32_at(off::UNACKED),
        lost: u32_at(off::LOST),
        retrans: u32_at(off::RETRANS),
        total_retrans: u32_at(off::TOTAL_RETRANS),
        rtt_us: u32_at(off::RTT),
        rttvar_us: u32_at(off::RTTVAR),
        min_rtt_us: u32_at(off::MIN_RTT),
        snd_ssthresh: u32_at(off::SND_SSTHRESH),
        snd_cwnd: u32_at(off::SND_CWND),
        rcv_space: u32_at(off::RCV_SPACE),
        bytes_acked: u64_at(off::BYTES_ACKED),
        bytes_received: u64_at(off::BYTES_RECEIVED),
        bytes_sent: u64_at(off::BYTES_SENT),
        bytes_retrans: u64_at(off::BYTES_RETRANS),
        segs_out: u32_at(off::SEGS_OUT),
        segs_in: u32_at(off::SEGS_IN),
        data_segs_out: u32_at(off::DATA_SEGS_OUT),
        data_segs_in: u32_at(off::DATA_SEGS_IN),
        notsent_bytes: u32_at(off::NOTSENT_BYTES),
        busy_time_us: u64_at(off::BUSY_TIME),
        rwnd_limited_us: u64_at(off::RWND_LIMITED),
        sndbuf_limited_us: u64_at(off::SNDBUF_LIMITED),
        delivery_rate: u64_at(off::DELIVERY_RATE),
        // The bit-field byte predates the delivery rate (4.9): present whenever the rate is.
        app_limited: u64_at(off::DELIVERY_RATE)
            .and(u8_at(off::APP_LIMITED_BYTE))
            .map(|v| v & app_limited_bit != 0),
        snd_wnd: u32_at(off::SND_WND),
        total_rto: ne_u16(b, off::TOTAL_RTO).map(u32::from),
        total_rto_recoveries: ne_u16(b, off::TOTAL_RTO_RECOVERIES).map(u32::from),
        total_rto_time_ms: u32_at(off::TOTAL_RTO_TIME),
        dsack_dups: u32_at(off::DSACK_DUPS),
        reord_seen: u32_at(off::REORD_SEEN),
        sndbuf: None,
        wmem_queued: None,
        rcvbuf: None,
        rmem_alloc: None,
        pid: None,
    }
}

/// The dump request for `family`: `struct nlmsghdr` and `struct inet_diag_req_v2`.
fn request(family: u8, states: StateMask, seq: u32) -> [u8; NLMSG_HDRLEN + INET_DIAG_REQ_V2_LEN] {
    let mut r = [0u8; NLMSG_HDRLEN + INET_DIAG_REQ_V2_LEN];
    r[0..4].copy_from_slice(&((NLMSG_HDRLEN + INET_DIAG_REQ_V2_LEN) as u32).to_ne_bytes());
    r[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    r[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    r[8..12].copy_from_slice(&seq.to_ne_bytes());
    // nlmsg_pid 0: the kernel.
    r[16] = family;
    r[17] = IPPROTO_TCP;
    r[18] = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_SKMEMINFO - 1));
    r[20..24].copy_from_slice(&states.0.to_ne_bytes());
    // The socket id stays zero: a dump matches every socket.
    r
}

// ---------------------------------------------------------------------------------------------
// The socket.
// ---------------------------------------------------------------------------------------------

/// What one dump read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpCounts {
    /// Sockets reported.
    pub sockets: usize,
    /// Bytes of netlink replies read.
    pub bytes: usize,
    /// Datagrams read.
    pub datagrams: usize,
}

/// A NETLINK_SOCK_DIAG socket and its receive buffer.
#[derive(Debug)]
pub struct SockDiag {
    fd: OwnedFd,
    buf: Vec<u8>,
    seq: u32,
}

impl SockDiag {
    /// Opens the socket.
    pub fn open() -> Result<Self, NetlinkError> {
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            Some(SOCK_DIAG),
        )
        .map_err(NetlinkError::open)?;
        set_socket_timeout(&fd, Timeout::Recv, Some(RECV_TIMEOUT)).map_err(NetlinkError::open)?;
        Ok(SockDiag {
            fd,
            buf: vec![0; RECV_BUFFER],
            seq: 0,
        })
    }

    /// Dumps the TCP sockets in `states`, IPv4 then IPv6, calling `visit` on each reply as it
    /// is read. A failure part-way leaves the sockets visited so far visited.
    pub fn dump(
        &mut self,
        states: StateMask,
        mut visit: impl FnMut(&DiagView<'_>),
    ) -> Result<DumpCounts, NetlinkError> {
        let mut counts = DumpCounts::default();
        for family in [AF_INET, AF_INET6] {
            self.dump_family(family, states, &mut counts, &mut visit)?;
        }
        Ok(counts)
    }

    fn dump_family(
        &mut self,
        family: u8,
        states: StateMask,
        counts: &mut DumpCounts,
        visit: &mut impl FnMut(&DiagView<'_>),
    ) -> Result<(), NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let req = request(family, states, seq);
        loop {
            match rustix::net::sendto(
                &self.fd,
                &req,
                SendFlags::empty(),
                &SocketAddrNetlink::new(0, 0),
            ) {
                Ok(_) => break,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(NetlinkError::Send { error: e.into() }),
            }
        }
        loop {
            let (n, full) = match rustix::net::recv(&self.fd, &mut self.buf[..], RecvFlags::TRUNC) {
                Ok(r) => r,
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => return Err(NetlinkError::Timeout(RECV_TIMEOUT)),
                Err(e) => return Err(NetlinkError::Recv { error: e.into() }),
            };
            if full > self.buf.len() {
                return Err(NetlinkError::Truncated {
                    len: full,
                    capacity: self.buf.len(),
                });
            }
            counts.datagrams += 1;
            counts.bytes += n;
            let data = &self.buf[..n];
            let mut at = 0;
            while at + NLMSG_HDRLEN <= n {
                let start = at;
                let h = NlHeader::parse(&data[start..], start)?;
                let msg = &data[start..start + h.len];
                at += align4(h.len);
                if h.seq != seq {
                    // Left over from an earlier dump that failed part-way.
                    continue;
                }
                match h.kind {
                    NLMSG_DONE => {
                        // Since 4.x a dump's DONE carries the dump's error code.
                        match ne_u32(msg, NLMSG_HDRLEN).map(|e| e as i32) {
                            Some(e) if e < 0 => return Err(NetlinkError::kernel(family, -e)),
                            _ => return Ok(()),
                        }
                    }
                    NLMSG_ERROR => match ne_u32(msg, NLMSG_HDRLEN).map(|e| e as i32) {
                        Some(0) => {}
                        Some(e) => return Err(NetlinkError::kernel(family, e.saturating_neg())),
                        None => {
                            return Err(NetlinkError::Malformed {
                                what: "netlink error message cut short",
                                offset: start,
                                len: h.len,
                            });
                        }
                    },
                    SOCK_DIAG_BY_FAMILY => {
                        let view =
                            DiagView::new_checked(&msg[NLMSG_HDRLEN..], start + NLMSG_HDRLEN)?;
                        counts.sockets += 1;
                        visit(&view);
                    }
                    _ => {}
                }
            }
        }
    }
}

/// CLOCK_REALTIME now, ns since the epoch.
fn realtime_ns() -> Nanos {
    let t = clock_gettime(ClockId::Realtime);
    (t.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec.max(0) as u64)
}

/// CPU time of the calling thread (user and system).
fn thread_cpu() -> Duration {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Dumps every TCP socket but the listening ones once, as samples of `origin` stamped with
/// the time the dump started.
pub fn dump_once(origin: OriginId) -> Result<Vec<TcpSample>, NetlinkError> {
    let mut diag = SockDiag::open()?;
    let ts = realtime_ns();
    let mut out = Vec::new();
    diag.dump(StateMask::ALL_BUT_LISTEN, |v| {
        out.push(v.to_sample(origin, ts))
    })?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Per-connection rates.
// ---------------------------------------------------------------------------------------------

/// What the poller remembers of one socket.
#[derive(Clone, Copy, Debug)]
struct Conn {
    /// The dump it was last seen in.
    seen: u64,
    /// The dump it was last emitted in.
    emitted: u64,
    /// Hot until then.
    hot_until: Instant,
    /// Its problem counters in the last dump.
    counters: [u64; 4],
}

/// When to emit each connection: every dump while hot, every k-th dump while quiet.
#[derive(Debug)]
struct Thinner {
    conns: foldhash::HashMap<u64, Conn>,
    hot_for: Duration,
    rtt_ratio: f64,
    rtt_floor_us: u64,
}

impl Thinner {
    fn new(config: &PollerConfig) -> Self {
        Thinner {
            conns: foldhash::HashMap::default(),
            hot_for: config.hot_for,
            rtt_ratio: config.rtt_ratio,
            rtt_floor_us: config.rtt_floor.as_micros().min(u64::MAX as u128) as u64,
        }
    }

    /// Notes socket `cookie` seen in dump number `dump` (from 1) at `now`; whether to emit it
    /// when quiet connections go out every `k` dumps.
    fn observe(
        &mut self,
        cookie: u64,
        counters: [u64; 4],
        rtt: Option<(u32, u32)>,
        dump: u64,
        now: Instant,
        k: u32,
    ) -> bool {
        let k = u64::from(k.max(1));
        let slow = rtt.is_some_and(|(rtt, min)| {
            let (rtt, min) = (u64::from(rtt), u64::from(min));
            min > 0
                && rtt as f64 > self.rtt_ratio * min as f64
                && rtt.saturating_sub(min) > self.rtt_floor_us
        });
        match self.conns.entry(cookie) {
            std::collections::hash_map::Entry::Vacant(e) => {
                // Stagger the quiet schedule by cookie.
                let phase = cookie.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
                e.insert(Conn {
                    seen: dump,
                    emitted: dump.saturating_sub(phase % k),
                    hot_until: if slow { now + self.hot_for } else { now },
                    counters,
                });
                true
            }
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let c = e.get_mut();
                if c.counters != counters || slow {
                    c.hot_until = now + self.hot_for;
                }
                c.counters = counters;
                c.seen = dump;
                let hot = now < c.hot_until;
                let emit = hot || dump.saturating_sub(c.emitted) >= k;
                if emit {
                    c.emitted = dump;
                }
                emit
            }
        }
    }

    /// Forgets the sockets that dump number `dump` did not report.
    fn sweep(&mut self, dump: u64) {
        self.conns.retain(|_, c| c.seen == dump);
    }
}

// ---------------------------------------------------------------------------------------------
// The CPU budget.
// ---------------------------------------------------------------------------------------------

/// The poller's CPU share over a sliding window, and the mean interval and quiet-connection
/// period it sets.
#[derive(Debug)]
struct Budget {
    enabled: bool,
    low: f64,
    high: f64,
    window: Duration,
    base_mean: Duration,
    max_mean: Duration,
    max_every: u32,
    mean: Duration,
    every: u32,
    /// (end of a dump, CPU it took), oldest first.
    spent: VecDeque<(Instant, Duration)>,
    started: Instant,
    changed: Instant,
    share: f64,
}

impl Budget {
    fn new(config: &PollerConfig, now: Instant) -> Self {
        Budget {
            enabled: config.cpu_budget,
            low: config.cpu_low,
            high: config.cpu_high,
            window: config.cpu_window,
            base_mean: config.mean_interval,
            max_mean: config.max_interval.max(config.mean_interval),
            max_every: config.max_quiet_every.max(1),
            mean: config.mean_interval,
            every: 1,
            spent: VecDeque::new(),
            started: now,
            changed: now,
            share: 0.0,
        }
    }

    /// The window the share is measured over: long enough to hold several dumps.
    fn span(&self) -> Duration {
        self.window.max(self.mean.saturating_mul(8))
    }

    /// Notes a dump that ended at `now` and took `cpu`; adapts the interval and k.
    fn note(&mut self, now: Instant, cpu: Duration) {
        self.spent.push_back((now, cpu));
        let span = self.span();
        while self
            .spent
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= span)
        {
            self.spent.pop_front();
        }
        let wall = span.min(now.saturating_duration_since(self.started));
        let cpu: Duration = self.spent.iter().map(|(_, c)| *c).sum();
        self.share = if wall.is_zero() {
            0.0
        } else {
            cpu.as_secs_f64() / wall.as_secs_f64()
        };
        if !self.enabled
            || now.saturating_duration_since(self.started) < span
            || now.saturating_duration_since(self.changed) < span
        {
            return;
        }
        let target = (self.low + self.high) / 2.0;
        if self.share > self.high {
            let factor = (self.share / target).clamp(1.25, 8.0);
            self.mean = self.mean.mul_f64(factor).min(self.max_mean);
            self.every = self.every.saturating_mul(2).min(self.max_every);
            self.changed = now;
        } else if self.share < self.low && (self.mean > self.base_mean || self.every > 1) {
            let factor = (self.share / target).clamp(0.25, 0.8);
            self.mean = self.mean.mul_f64(factor).max(self.base_mean);
            self.every = (self.every / 2).max(1);
            self.changed = now;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The live poller.
// ---------------------------------------------------------------------------------------------

/// How the live poller samples and limits itself.
#[derive(Clone, Debug, PartialEq)]
pub struct PollerConfig {
    /// Mean of the exponential gaps between dumps (the configured rate; the budget may
    /// lengthen it).
    pub mean_interval: Duration,
    /// Longest mean interval the budget may set.
    pub max_interval: Duration,
    /// Whether to adapt the interval and k to the CPU budget; false measures the raw cost.
    pub cpu_budget: bool,
    /// Below this share of one core, the interval shortens back toward `mean_interval`.
    pub cpu_low: f64,
    /// Above this share of one core, the interval lengthens.
    pub cpu_high: f64,
    /// Window over which the CPU share is measured (at least 8 mean intervals are used).
    pub cpu_window: Duration,
    /// TCP states to dump.
    pub states: StateMask,
    /// How long a connection stays hot after a problem counter changed.
    pub hot_for: Duration,
    /// A connection whose smoothed RTT exceeds its minimum by this factor is hot...
    pub rtt_ratio: f64,
    /// ...provided the difference also exceeds this.
    pub rtt_floor: Duration,
    /// Largest k (quiet connections are emitted every k-th dump).
    pub max_quiet_every: u32,
    /// Seed of the dump-time generator; `None` draws one from the clock.
    pub seed: Option<u64>,
}

impl Default for PollerConfig {
    fn default() -> Self {
        PollerConfig {
            mean_interval: Duration::from_millis(500),
            max_interval: Duration::from_secs(30),
            cpu_budget: true,
            cpu_low: 0.01,
            cpu_high: 0.05,
            cpu_window: Duration::from_secs(5),
            states: StateMask::ALL_BUT_LISTEN,
            hot_for: Duration::from_secs(5),
            rtt_ratio: 4.0,
            rtt_floor: Duration::from_millis(1),
            max_quiet_every: 16,
            seed: None,
        }
    }
}

impl PollerConfig {
    fn validate(&self) -> Result<(), NetlinkError> {
        if self.mean_interval.is_zero() {
            return Err(NetlinkError::Config("the mean interval must be positive"));
        }
        if !(self.cpu_low >= 0.0 && self.cpu_low <= self.cpu_high) {
            return Err(NetlinkError::Config(
                "the CPU bounds must satisfy 0 <= low <= high",
            ));
        }
        if !(self.rtt_ratio.is_finite() && self.rtt_ratio >= 1.0) {
            return Err(NetlinkError::Config("the RTT ratio must be at least 1"));
        }
        Ok(())
    }
}

/// What the poller measured, for stats reporting.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PollerStatus {
    /// The poller's CPU time over the last window, as a share of one core.
    pub cpu_share: f64,
    /// The current mean interval between dumps.
    pub mean_interval: Duration,
    /// The current k: quiet connections are emitted every k-th dump.
    pub quiet_every: u32,
    /// Dumps done (failed ones included).
    pub dumps: u64,
    /// Dumps that failed.
    pub failed_dumps: u64,
    /// Sockets in the last dump.
    pub sockets: usize,
    /// Samples emitted, in all.
    pub samples: u64,
    /// Socket reports not emitted because their connection was quiet, in all.
    pub thinned: u64,
    /// Sockets tracked now.
    pub tracked: usize,
    /// The poller's CPU time in dumps, in all.
    pub cpu_total: Duration,
    /// Wall time spent in dumps, in all.
    pub dump_wall_total: Duration,
}

/// A handle on a poller's [`PollerStatus`], readable from another thread after the poller
/// has been handed to the source operator.
#[derive(Clone, Debug, Default)]
pub struct PollerStatusHandle(Arc<Mutex<PollerStatus>>);

impl PollerStatusHandle {
    /// The status after the latest dump.
    pub fn get(&self) -> PollerStatus {
        match self.0.lock() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, status: &PollerStatus) {
        match self.0.lock() {
            Ok(mut s) => s.clone_from(status),
            Err(poisoned) => poisoned.into_inner().clone_from(status),
        }
    }
}

/// The live TCP-statistics source: an [`ObservationReader`] of [`TcpSample`]s dumped from
/// the kernel at Poisson times (see the module documentation).
#[derive(Debug)]
pub struct LivePoller {
    origin: OriginId,
    config: PollerConfig,
    diag: SockDiag,
    stop: Arc<AtomicBool>,
    until: Option<Instant>,
    rng: Xoshiro256PlusPlus,
    next: Instant,
    pending: VecDeque<TcpSample>,
    thinner: Thinner,
    budget: Budget,
    status: PollerStatus,
    handle: PollerStatusHandle,
    stats: SourceStats,
    warnings: Vec<Warning>,
    shown: usize,
    suppressed: u64,
    failures: u32,
    gave_up: bool,
}

impl LivePoller {
    /// A poller whose samples belong to `origin`. It stops once `until` has passed or `stop`
    /// is set. Fails if the netlink socket cannot be opened or the kernel refuses a dump.
    pub fn new(
        origin: OriginId,
        config: PollerConfig,
        stop: Arc<AtomicBool>,
        until: Option<Instant>,
    ) -> Result<Self, NetlinkError> {
        config.validate()?;
        let mut diag = SockDiag::open()?;
        // An empty dump: checks that the kernel answers before the run starts.
        diag.dump(StateMask::NONE, |_| {})?;
        let now = Instant::now();
        let seed = config.seed.unwrap_or_else(|| {
            realtime_ns() ^ (u64::from(std::process::id()) << 32) ^ u64::from(origin.0)
        });
        let mut stats = SourceStats::default();
        stats.formats.insert(SOURCE_NAME.to_owned(), 1);
        let status = PollerStatus {
            mean_interval: config.mean_interval,
            quiet_every: 1,
            ..PollerStatus::default()
        };
        let handle = PollerStatusHandle::default();
        handle.set(&status);
        Ok(LivePoller {
            origin,
            thinner: Thinner::new(&config),
            budget: Budget::new(&config, now),
            config,
            diag,
            stop,
            until,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            next: now,
            pending: VecDeque::new(),
            status,
            handle,
            stats,
            warnings: Vec::new(),
            shown: 0,
            suppressed: 0,
            failures: 0,
            gave_up: false,
        })
    }

    /// What the poller measured so far.
    pub fn status(&self) -> PollerStatus {
        self.status.clone()
    }

    /// A handle that reads the status from another thread.
    pub fn status_handle(&self) -> PollerStatusHandle {
        self.handle.clone()
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &PollerConfig {
        &self.config
    }

    fn stopping(&self, now: Instant) -> bool {
        self.gave_up || self.stop.load(Ordering::Relaxed) || self.until.is_some_and(|u| now >= u)
    }

    fn warn(&mut self, message: String) {
        if self.shown < warning_limit() {
            self.shown += 1;
            self.warnings.push(Warning {
                origin: self.origin,
                path: SOURCE_NAME.to_owned(),
                offset: None,
                message,
            });
        } else {
            self.suppressed += 1;
        }
    }

    /// One dump: samples of emitted sockets into `pending`, the budget updated.
    fn poll(&mut self) {
        let cpu0 = thread_cpu();
        let wall0 = Instant::now();
        let ts = realtime_ns();
        let dump = self.status.dumps + 1;
        let k = self.budget.every;
        let origin = self.origin;
        let mut emitted = 0u64;
        let mut thinned = 0u64;
        let thinner = &mut self.thinner;
        let pending = &mut self.pending;
        let stats = &mut self.stats;
        let result = self.diag.dump(self.config.states, |v| {
            let emit = thinner.observe(
                v.cookie(),
                v.problem_counters(),
                v.rtt_and_min(),
                dump,
                wall0,
                k,
            );
            if emit {
                stats.record(ts, (v.len() + NLMSG_HDRLEN) as u64);
                stats.tcp += 1;
                if v.is_ipv6() {
                    stats.ipv6 += 1;
                }
                pending.push_back(v.to_sample(origin, ts));
                emitted += 1;
            } else {
                thinned += 1;
            }
        });
        self.status.dumps = dump;
        match result {
            Ok(counts) => {
                self.thinner.sweep(dump);
                self.status.sockets = counts.sockets;
                self.failures = 0;
            }
            Err(e) => {
                self.status.failed_dumps += 1;
                self.failures += 1;
                self.warn(format!("dump failed: {e}"));
                if self.failures >= MAX_FAILED_DUMPS {
                    self.gave_up = true;
                    self.warn(format!(
                        "stopped polling after {MAX_FAILED_DUMPS} failed dumps in a row"
                    ));
                }
            }
        }
        let end = Instant::now();
        let cpu = thread_cpu().saturating_sub(cpu0);
        self.budget.note(end, cpu);
        let s = &mut self.status;
        s.samples += emitted;
        s.thinned += thinned;
        s.tracked = self.thinner.conns.len();
        s.cpu_total += cpu;
        s.dump_wall_total += end.saturating_duration_since(wall0);
        s.cpu_share = self.budget.share;
        s.mean_interval = self.budget.mean;
        s.quiet_every = self.budget.every;
        self.handle.set(&self.status);
    }

    /// The next dump time: an exponential gap after the previous dump time (not after the
    /// dump's end, so that the times stay a Poisson process), or after now if that time has
    /// passed already (a slow dump, a caller that did not call): by memorylessness the times
    /// stay Poisson, and a backlog never turns into a burst of dumps.
    fn schedule(&mut self) {
        let x: f64 = Exp1.sample(&mut self.rng);
        let gap = self
            .budget
            .mean
            .mul_f64(x.min(1e6))
            .min(Duration::from_secs(24 * 3600));
        let now = Instant::now();
        self.next = match self.next.checked_add(gap) {
            Some(t) if t >= now => t,
            _ => now + gap,
        };
    }

    fn deliver(&mut self, max: usize, out: &mut Batch) {
        let n = max.min(self.pending.len());
        out.tcp.extend(self.pending.drain(..n));
    }
}

impl ObservationReader for LivePoller {
    fn origin(&self) -> OriginId {
        self.origin
    }

    fn is_live(&self) -> bool {
        true
    }

    fn clock_now(&self) -> Option<crate::observation::Nanos> {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_nanos() as u64)
    }

    fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
        if !self.pending.is_empty() {
            self.deliver(max, out);
            return true;
        }
        let now = Instant::now();
        if self.stopping(now) {
            self.finish();
            return false;
        }
        if now < self.next {
            let mut wait = (self.next - now).min(MAX_SLEEP);
            if let Some(u) = self.until {
                wait = wait.min(u.saturating_duration_since(now));
            }
            std::thread::sleep(wait);
            let now = Instant::now();
            if now < self.next || self.stopping(now) {
                return true;
            }
        }
        self.poll();
        self.schedule();
        self.deliver(max, out);
        true
    }

    fn reserve(&self, max: usize, out: &mut Batch) {
        out.tcp.reserve(max.min(self.pending.len().max(1024)));
    }

    fn take_stats(&mut self) -> SourceStats {
        self.stats.take()
    }

    fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.warnings)
    }
}

impl LivePoller {
    fn finish(&mut self) {
        if self.suppressed > 0 {
            let n = std::mem::take(&mut self.suppressed);
            self.warnings.push(Warning {
                origin: self.origin,
                path: SOURCE_NAME.to_owned(),
                offset: None,
                message: format!("{n} more warnings not shown"),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::HashMap;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::process::Command;

    use proptest::prelude::*;

    /// A `struct tcp_info` of `len` bytes whose u32 fields hold their own offset plus 1000
    /// (and u64 fields their offset plus 1e12), so that a misplaced read shows.
    fn numbered_info(len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        for (name, at, size) in TCP_INFO_LAYOUT {
            if at + size > len {
                break;
            }
            match size {
                1 => b[*at] = *at as u8 + 1,
                2 => b[*at..at + 2].copy_from_slice(&(*at as u16 + 1000).to_ne_bytes()),
                4 => b[*at..at + 4].copy_from_slice(&(*at as u32 + 1000).to_ne_bytes()),
                8 => {
                    b[*at..at + 8].copy_from_slice(&(*at as u64 + 1_000_000_000_000).to_ne_bytes())
                }
                _ => panic!("{name}: size {size}"),
            }
        }
        b
    }

    /// One SOCK_DIAG_BY_FAMILY reply: netlink header, inet_diag_msg, INFO and SKMEMINFO.
    fn reply(family: u8, info: &[u8], skmem: &[u32], seq: u32) -> Vec<u8> {
        let mut m = vec![0u8; NLMSG_HDRLEN + INET_DIAG_MSG_LEN];
        m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m[8..12].copy_from_slice(&seq.to_ne_bytes());
        let d = NLMSG_HDRLEN;
        m[d] = family;
        m[d + 1] = state::ESTABLISHED;
        m[d + 4..d + 6].copy_from_slice(&8080u16.to_be_bytes());
        m[d + 6..d + 8].copy_from_slice(&443u16.to_be_bytes());
        if family == AF_INET {
            m[d + 8..d + 12].copy_from_slice(&[10, 0, 0, 1]);
            m[d + 24..d + 28].copy_from_slice(&[10, 0, 0, 2]);
        } else {
            m[d + 8..d + 24].copy_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
            m[d + 24..d + 40]
                .copy_from_slice(&"::ffff:192.0.2.7".parse::<Ipv6Addr>().unwrap().octets());
        }
        m[d + 44..d + 48].copy_from_slice(&7u32.to_ne_bytes());
        m[d + 48..d + 52].copy_from_slice(&1u32.to_ne_bytes());
        let mut attr = |kind: u16, payload: &[u8]| {
            m.extend_from_slice(&((payload.len() + 4) as u16).to_ne_bytes());
            m.extend_from_slice(&kind.to_ne_bytes());
            m.extend_from_slice(payload);
            while m.len() % 4 != 0 {
                m.push(0);
            }
        };
        attr(INET_DIAG_INFO, info);
        let sk: Vec<u8> = skmem.iter().flat_map(|v| v.to_ne_bytes()).collect();
        attr(INET_DIAG_SKMEMINFO, &sk);
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    #[test]
    fn layout_is_contiguous_and_naturally_aligned() {
        let mut end = 0;
        for (name, at, size) in TCP_INFO_LAYOUT {
            assert_eq!(*at, end, "{name} does not follow the previous field");
            assert_eq!(at % size, 0, "{name} is not naturally aligned");
            end = at + size;
        }
        assert_eq!(end, 248, "the 6.7 struct tcp_info is 248 bytes");
        let named = [
            ("tcpi_state", off::STATE),
            ("tcpi_ca_state", off::CA_STATE),
            ("tcpi_backoff", off::BACKOFF),
            ("tcpi_rto", off::RTO),
            ("tcpi_ato", off::ATO),
            ("tcpi_snd_mss", off::SND_MSS),
            ("tcpi_rcv_mss", off::RCV_MSS),
            ("tcpi_unacked", off::UNACKED),
            ("tcpi_lost", off::LOST),
            ("tcpi_retrans", off::RETRANS),
            ("tcpi_rtt", off::RTT),
            ("tcpi_rttvar", off::RTTVAR),
            ("tcpi_snd_ssthresh", off::SND_SSTHRESH),
            ("tcpi_snd_cwnd", off::SND_CWND),
            ("tcpi_rcv_space", off::RCV_SPACE),
            ("tcpi_total_retrans", off::TOTAL_RETRANS),
            ("tcpi_bytes_acked", off::BYTES_ACKED),
            ("tcpi_bytes_received", off::BYTES_RECEIVED),
            ("tcpi_segs_out", off::SEGS_OUT),
            ("tcpi_segs_in", off::SEGS_IN),
            ("tcpi_notsent_bytes", off::NOTSENT_BYTES),
            ("tcpi_min_rtt", off::MIN_RTT),
            ("tcpi_data_segs_in", off::DATA_SEGS_IN),
            ("tcpi_data_segs_out", off::DATA_SEGS_OUT),
            ("tcpi_delivery_rate", off::DELIVERY_RATE),
            ("tcpi_busy_time", off::BUSY_TIME),
            ("tcpi_rwnd_limited", off::RWND_LIMITED),
            ("tcpi_sndbuf_limited", off::SNDBUF_LIMITED),
            ("tcpi_bytes_sent", off::BYTES_SENT),
            ("tcpi_bytes_retrans", off::BYTES_RETRANS),
            ("tcpi_dsack_dups", off::DSACK_DUPS),
            ("tcpi_reord_seen", off::REORD_SEEN),
            ("tcpi_snd_wnd", off::SND_WND),
            ("tcpi_total_rto", off::TOTAL_RTO),
            ("tcpi_total_rto_recoveries", off::TOTAL_RTO_RECOVERIES),
            ("tcpi_total_rto_time", off::TOTAL_RTO_TIME),
        ];
        for (name, at) in named {
            let entry = TCP_INFO_LAYOUT.iter().find(|(n, _, _)| *n == name);
            assert_eq!(entry.map(|e| e.1), Some(at), "{name}");
        }
    }

    #[test]
    fn full_tcp_info_reads_every_field_at_its_offset() {
        let i = parse_tcp_info(&numbered_info(248));
        let w = |at: usize| Some(at as u32 + 1000);
        let q = |at: usize| Some(at as u64 + 1_000_000_000_000);
        assert_eq!(i.state, Some(1));
        assert_eq!(i.ca_state, Some(2));
        assert_eq!(i.backoff, Some(5));
        // Byte 7 holds 8: the app-limited bit is clear.
        assert_eq!(i.app_limited, Some(false));
        let mut b = numbered_info(248);
        b[7] = if cfg!(target_endian = "little") {
            1
        } else {
            0x80
        };
        assert_eq!(parse_tcp_info(&b).app_limited, Some(true));
        assert_eq!(i.rto_us, w(8));
        assert_eq!(i.ato_us, w(12));
        assert_eq!(i.snd_mss, w(16));
        assert_eq!(i.rcv_mss, w(20));
        assert_eq!(i.unacked, w(24));
        assert_eq!(i.lost, w(32));
        assert_eq!(i.retrans, w(36));
        assert_eq!(i.rtt_us, w(68));
        assert_eq!(i.rttvar_us, w(72));
        assert_eq!(i.snd_ssthresh, w(76));
        assert_eq!(i.snd_cwnd, w(80));
        assert_eq!(i.rcv_space, w(96));
        assert_eq!(i.total_retrans, w(100));
        assert_eq!(i.bytes_acked, q(120));
        assert_eq!(i.bytes_received, q(128));
        assert_eq!(i.segs_out, w(136));
        assert_eq!(i.segs_in, w(140));
        assert_eq!(i.notsent_bytes, w(144));
        assert_eq!(i.min_rtt_us, w(148));
        assert_eq!(i.data_segs_in, w(152));
        assert_eq!(i.data_segs_out, w(156));
        assert_eq!(i.delivery_rate, q(160));
        assert_eq!(i.busy_time_us, q(168));
        assert_eq!(i.rwnd_limited_us, q(176));
        assert_eq!(i.sndbuf_limited_us, q(184));
        assert_eq!(i.bytes_sent, q(200));
        assert_eq!(i.bytes_retrans, q(208));
        assert_eq!(i.dsack_dups, w(216));
        assert_eq!(i.reord_seen, w(220));
        assert_eq!(i.snd_wnd, w(228));
        assert_eq!(i.total_rto, Some(1240));
        assert_eq!(i.total_rto_recoveries, Some(1242));
        assert_eq!(i.total_rto_time_ms, w(244));
        assert_eq!(i.pid, None);
        assert_eq!(i.sndbuf, None);
    }

    #[test]
    fn shorter_structs_of_older_kernels_leave_newer_fields_out() {
        // 4.19's struct ends after tcpi_reord_seen (224 bytes); 4.9's after the delivery rate
        // (168); 2.6's after tcpi_total_retrans (104).
        let i = parse_tcp_info(&numbered_info(224));
        assert_eq!(i.reord_seen, Some(1220));
        assert_eq!(
            (i.snd_wnd, i.total_rto, i.total_rto_time_ms),
            (None, None, None)
        );
        let i = parse_tcp_info(&numbered_info(168));
        assert_eq!(i.delivery_rate, Some(1_000_000_000_160));
        assert!(i.app_limited.is_some());
        assert_eq!(
            (i.busy_time_us, i.bytes_sent, i.dsack_dups),
            (None, None, None)
        );
        let i = parse_tcp_info(&numbered_info(104));
        assert_eq!(i.total_retrans, Some(1100));
        assert_eq!(
            (i.bytes_acked, i.app_limited, i.min_rtt_us),
            (None, None, None)
        );
        // A field cut in the middle is absent, not misread.
        let i = parse_tcp_info(&numbered_info(246));
        assert_eq!(i.total_rto_recoveries, Some(1242));
        assert_eq!(i.total_rto_time_ms, None);
        assert_eq!(parse_tcp_info(&[]), TcpInfo::default());
    }

    #[test]
    fn diag_reply_golden_bytes() {
        let skmem = [11, 22, 33, 44, 55, 66, 77, 88, 99];
        for family in [AF_INET, AF_INET6] {
            let m = reply(family, &numbered_info(248), &skmem, 1);
            let h = NlHeader::parse(&m, 0).unwrap();
            assert_eq!((h.len, h.kind, h.seq), (m.len(), SOCK_DIAG_BY_FAMILY, 1));
            let v = DiagView::new_checked(&m[NLMSG_HDRLEN..], NLMSG_HDRLEN).unwrap();
            assert_eq!(v.cookie(), 7 | 1 << 32);
            let s = v.to_sample(OriginId(3), 42);
            assert_eq!((s.origin, s.ts_ns), (OriginId(3), 42));
            if family == AF_INET {
                assert_eq!(s.local.to_string(), "10.0.0.1:8080");
                assert_eq!(s.peer.to_string(), "10.0.0.2:443");
                assert!(!v.is_ipv6());
            } else {
                assert_eq!(s.local.to_string(), "[2001:db8::1]:8080");
                // IPv4-mapped: given as IPv4, as a capture sees the connection.
                assert_eq!(s.peer.to_string(), "192.0.2.7:443");
                assert!(v.is_ipv6());
            }
            assert_eq!(s.info.state, Some(1));
            assert_eq!(s.info.bytes_acked, Some(1_000_000_000_120));
            assert_eq!(
                (
                    s.info.rmem_alloc,
                    s.info.rcvbuf,
                    s.info.sndbuf,
                    s.info.wmem_queued
                ),
                (Some(11), Some(22), Some(44), Some(66))
            );
            assert_eq!(
                v.problem_counters(),
                [1100, 1240, 1_000_000_000_176, 1_000_000_000_184]
            );
        }
    }

    #[test]
    fn a_time_wait_socket_without_attributes_keeps_its_state() {
        let mut m = reply(AF_INET, &[], &[], 1);
        m.truncate(NLMSG_HDRLEN + INET_DIAG_MSG_LEN);
        m[NLMSG_HDRLEN + 1] = state::TIME_WAIT;
        let v = DiagView::new_checked(&m[NLMSG_HDRLEN..], 0).unwrap();
        let s = v.to_sample(OriginId(0), 1);
        assert_eq!(s.info.state, Some(state::TIME_WAIT));
        assert_eq!(s.info.rtt_us, None);
        assert_eq!(v.problem_counters(), [0; 4]);
    }

    #[test]
    fn malformed_replies_are_errors_with_offsets() {
        let m = reply(AF_INET, &numbered_info(248), &[1; 9], 1);
        // A header that claims more than the datagram holds.
        let mut long = m.clone();
        long[0..4].copy_from_slice(&(m.len() as u32 + 4).to_ne_bytes());
        assert!(matches!(
            NlHeader::parse(&long, 32),
            Err(NetlinkError::Malformed { offset: 32, .. })
        ));
        // An attribute that runs past its message.
        let mut bad = m[NLMSG_HDRLEN..].to_vec();
        bad[INET_DIAG_MSG_LEN..INET_DIAG_MSG_LEN + 2].copy_from_slice(&4000u16.to_ne_bytes());
        let e = DiagView::new_checked(&bad, 16).unwrap_err();
        assert!(
            matches!(e, NetlinkError::Malformed { offset, len: 4000, .. } if offset == 16 + INET_DIAG_MSG_LEN)
        );
        assert_eq!(
            e.to_string(),
            "malformed sock_diag reply: attribute length out of bounds at offset 88 (length 4000)"
        );
        // A message shorter than inet_diag_msg.
        assert!(DiagView::new_checked(&m[NLMSG_HDRLEN..NLMSG_HDRLEN + 40], 0).is_err());
    }

    #[test]
    fn the_request_asks_for_info_and_skmeminfo() {
        let r = request(AF_INET6, StateMask::ALL_BUT_LISTEN, 9);
        assert_eq!(ne_u32(&r, 0), Some(72));
        assert_eq!(ne_u16(&r, 4), Some(20));
        assert_eq!(ne_u16(&r, 6), Some(0x301));
        assert_eq!(ne_u32(&r, 8), Some(9));
        assert_eq!(&r[16..20], &[10, 6, 0x42, 0]);
        assert_eq!(ne_u32(&r, 20), Some(0xFFF & !1 & !(1 << 10)));
        assert!(StateMask::ALL_BUT_LISTEN.contains(state::TIME_WAIT));
        assert!(!StateMask::ALL_BUT_LISTEN.contains(state::LISTEN));
        assert_eq!(StateMask::of(&[1, 10]).0, 0b100_0000_0010);
    }

    proptest! {
        #[test]
        fn any_bytes_parse_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse_tcp_info(&bytes);
            let _ = NlHeader::parse(&bytes, 0);
            if let Ok(v) = DiagView::new_checked(&bytes, 0) {
                let _ = v.to_sample(OriginId(0), 0);
                let _ = v.problem_counters();
            }
        }

        #[test]
        fn fields_are_present_exactly_when_the_struct_reaches_them(len in 0usize..260) {
            let i = parse_tcp_info(&numbered_info(len));
            prop_assert_eq!(i.rtt_us.is_some(), len >= 72);
            prop_assert_eq!(i.bytes_acked.is_some(), len >= 128);
            prop_assert_eq!(i.snd_wnd.is_some(), len >= 232);
            prop_assert_eq!(i.total_rto.is_some(), len >= 242);
            prop_assert_eq!(i.total_rto_time_ms.is_some(), len >= 248);
        }
    }

    #[test]
    fn quiet_connections_go_out_every_kth_dump_and_hot_ones_every_dump() {
        let config = PollerConfig::default();
        let mut t = Thinner::new(&config);
        let t0 = Instant::now();
        let at = |d: u64| t0 + Duration::from_millis(500 * d);
        // Dump 1: both new, both emitted.
        assert!(t.observe(1, [0; 4], None, 1, at(1), 4));
        assert!(t.observe(2, [0; 4], None, 1, at(1), 4));
        let mut quiet = 0;
        let mut hot = 0;
        for d in 2..=13 {
            quiet += t.observe(1, [0; 4], None, d, at(d), 4) as u32;
            // Connection 2 retransmits on every dump.
            hot += t.observe(2, [d, 0, 0, 0], None, d, at(d), 4) as u32;
            t.sweep(d);
        }
        assert_eq!((quiet, hot), (3, 12));
        // After its counters stop moving, connection 2 stays hot for `hot_for` (10 dumps).
        let mut after = Vec::new();
        for d in 14..=30 {
            after.push(t.observe(2, [13, 0, 0, 0], None, d, at(d), 4));
        }
        assert!(after[..9].iter().all(|e| *e));
        assert!(after[10..].iter().filter(|e| **e).count() <= 2);
        // An RTT far above its minimum makes a connection hot; a small excess does not.
        assert!(t.observe(1, [0; 4], Some((50_000, 1_000)), 31, at(31), 16));
        assert!(t.observe(1, [0; 4], Some((50_000, 1_000)), 32, at(32), 16));
        let mut t = Thinner::new(&config);
        t.observe(5, [0; 4], Some((90, 10)), 1, at(1), 16);
        assert!(!t.observe(5, [0; 4], Some((90, 10)), 2, at(2), 16));
        // Sockets missing from a dump are forgotten.
        t.sweep(3);
        assert!(t.conns.is_empty());
    }

    #[test]
    fn the_budget_lengthens_the_interval_when_over_and_restores_it_when_under() {
        let config = PollerConfig::default();
        let t0 = Instant::now();
        let mut b = Budget::new(&config, t0);
        // 50 ms of CPU per 500 ms dump: 10%.
        let mut t = t0;
        for _ in 0..40 {
            t += Duration::from_millis(500);
            b.note(t, Duration::from_millis(50));
        }
        assert!(b.mean > config.mean_interval, "{:?}", b.mean);
        assert!(b.every > 1);
        // Then the connections go away: 0.1 ms per dump.
        for _ in 0..400 {
            t += b.mean;
            b.note(t, Duration::from_micros(100));
        }
        assert_eq!((b.mean, b.every), (config.mean_interval, 1));
        // Disabled: measured, never changed.
        let mut b = Budget::new(
            &PollerConfig {
                cpu_budget: false,
                ..config.clone()
            },
            t0,
        );
        let mut t = t0;
        for _ in 0..40 {
            t += Duration::from_millis(500);
            b.note(t, Duration::from_millis(50));
        }
        assert!((b.share - 0.1).abs() < 0.01, "{}", b.share);
        assert_eq!((b.mean, b.every), (config.mean_interval, 1));
    }

    #[test]
    fn config_is_checked() {
        let bad = PollerConfig {
            cpu_low: 0.1,
            cpu_high: 0.05,
            ..PollerConfig::default()
        };
        assert!(matches!(bad.validate(), Err(NetlinkError::Config(_))));
        assert!(PollerConfig::default().validate().is_ok());
    }

    // --- Tests that need the kernel: they skip, saying so, where netlink is unavailable. ---

    fn diag_or_skip() -> Option<SockDiag> {
        match SockDiag::open().and_then(|mut d| d.dump(StateMask::NONE, |_| {}).map(|_| d)) {
            Ok(d) => Some(d),
            Err(e) => {
                eprintln!("skipping: {e}");
                None
            }
        }
    }

    /// A loopback connection that moved 100,000 bytes one way and 10,000 the other, then went
    /// idle: (client, server, client's address, server's).
    fn loopback_pair() -> (TcpStream, TcpStream, Endpoint, Endpoint) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(&vec![b'x'; 100_000]).unwrap();
        let mut buf = vec![0u8; 100_000];
        server.read_exact(&mut buf).unwrap();
        server.write_all(&buf[..10_000]).unwrap();
        client.read_exact(&mut buf[..10_000]).unwrap();
        // Let delayed ACKs go out.
        std::thread::sleep(Duration::from_millis(300));
        let c = client.local_addr().unwrap();
        let s = server.local_addr().unwrap();
        (
            client,
            server,
            Endpoint::new(c.ip(), c.port()),
            Endpoint::new(s.ip(), s.port()),
        )
    }

    #[test]
    fn dump_finds_a_loopback_connection() {
        if diag_or_skip().is_none() {
            return;
        }
        let (_c, _s, client, server) = loopback_pair();
        let samples = dump_once(OriginId(1)).unwrap();
        let c = samples
            .iter()
            .find(|s| s.local == client && s.peer == server)
            .expect("the client's socket");
        let s = samples
            .iter()
            .find(|s| s.local == server && s.peer == client)
            .expect("the server's socket");
        assert_eq!(c.origin, OriginId(1));
        assert_eq!(c.info.state, Some(state::ESTABLISHED));
        assert_eq!(c.info.bytes_sent, Some(100_000));
        // The SYN counts one byte of sequence space.
        assert_eq!(c.info.bytes_acked, Some(100_001));
        assert_eq!(c.info.bytes_received, Some(10_000));
        assert_eq!(s.info.bytes_received, Some(100_000));
        // The server's handshake does not count its SYN-ACK as acknowledged bytes.
        assert_eq!(s.info.bytes_acked, Some(10_000));
        // Linux 6.7 and later: the RTO counters are there (and zero on loopback).
        assert_eq!(c.info.total_rto, Some(0));
        assert!(c.info.snd_wnd.is_some_and(|w| w > 0));
        let now = realtime_ns();
        assert!(c.ts_ns <= now && now - c.ts_ns < 60_000_000_000);
        // No listening sockets by default.
        assert!(samples.iter().all(|s| s.info.state != Some(state::LISTEN)));
    }

    /// `key:value` tokens of one `ss -tinmHO` line, and its endpoints.
    fn ss_line(line: &str) -> Option<(Endpoint, Endpoint, HashMap<String, String>)> {
        let mut tokens = line.split_whitespace();
        let _state = tokens.next()?;
        let _recvq = tokens.next()?;
        let _sendq = tokens.next()?;
        let local: Endpoint = tokens.next()?.parse().ok()?;
        let peer: Endpoint = tokens.next()?.parse().ok()?;
        let mut kv = HashMap::new();
        let rest: Vec<&str> = tokens.collect();
        // `delivery_rate 123bps` and `send 1bps` are two tokens.
        let mut i = 0;
        while i < rest.len() {
            let t = rest[i];
            if let Some((k, v)) = t.split_once(':') {
                kv.insert(k.to_owned(), v.to_owned());
            } else if matches!(t, "delivery_rate" | "send" | "pacing_rate") && i + 1 < rest.len() {
                kv.insert(t.to_owned(), rest[i + 1].to_owned());
                i += 1;
            } else {
                kv.insert(t.to_owned(), String::new());
            }
            i += 1;
        }
        Some((local, peer, kv))
    }

    /// `skmem:(r0,rb131072,t0,tb2626560,f0,w0,o0,bl0,d0)` as a map.
    fn skmem(v: &str) -> HashMap<String, u32> {
        v.trim_matches(|c| c == '(' || c == ')')
            .split(',')
            .filter_map(|f| {
                let split = f.find(|c: char| c.is_ascii_digit())?;
                Some((f[..split].to_owned(), f[split..].parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn fields_agree_with_ss() {
        if diag_or_skip().is_none() {
            return;
        }
        let (_c, _s, client, server) = loopback_pair();
        let ours = dump_once(OriginId(0)).unwrap();
        let out = match Command::new("ss").args(["-tinmHO"]).output() {
            Ok(o) if o.status.success() => o,
            _ => {
                eprintln!("skipping: ss (iproute2) is not available");
                return;
            }
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let mut compared = 0;
        for (local, peer) in [(client, server), (server, client)] {
            let (_, _, kv) = text
                .lines()
                .filter_map(ss_line)
                .find(|(l, p, _)| *l == local && *p == peer)
                .expect("ss shows the connection");
            let s = ours
                .iter()
                .find(|s| s.local == local && s.peer == peer)
                .expect("the dump shows the connection");
            let i = &s.info;
            let num = |k: &str| kv.get(k).and_then(|v| v.parse::<u64>().ok());
            // ss prints times in ms with %g: compare in µs, within the rounding.
            let ms = |v: &str| v.parse::<f64>().ok().map(|m| (m * 1000.0).round() as u64);
            let check = |name: &str, ss: Option<u64>, ours: Option<u64>| {
                assert_eq!(ss, ours, "{name} for {local} -> {peer}:\n{text}");
            };
            check("bytes_sent", num("bytes_sent"), i.bytes_sent);
            check("bytes_acked", num("bytes_acked"), i.bytes_acked);
            check("bytes_received", num("bytes_received"), i.bytes_received);
            check("segs_out", num("segs_out"), i.segs_out.map(u64::from));
            check("segs_in", num("segs_in"), i.segs_in.map(u64::from));
            check(
                "data_segs_out",
                num("data_segs_out"),
                i.data_segs_out.map(u64::from),
            );
            check(
                "data_segs_in",
                num("data_segs_in"),
                i.data_segs_in.map(u64::from),
            );
            check("cwnd", num("cwnd"), i.snd_cwnd.map(u64::from));
            check("mss", num("mss"), i.snd_mss.map(u64::from));
            check("rcvmss", num("rcvmss"), i.rcv_mss.map(u64::from));
            check("rcv_space", num("rcv_space"), i.rcv_space.map(u64::from));
            check("snd_wnd", num("snd_wnd"), i.snd_wnd.map(u64::from));
            let (rtt, rttvar) = kv["rtt"].split_once('/').unwrap();
            check("rtt", ms(rtt), i.rtt_us.map(u64::from));
            check("rttvar", ms(rttvar), i.rttvar_us.map(u64::from));
            check(
                "minrtt",
                kv.get("minrtt").and_then(|v| ms(v)),
                i.min_rtt_us.map(u64::from),
            );
            check(
                "rto",
                kv.get("rto").and_then(|v| ms(v)),
                i.rto_us.map(u64::from),
            );
            check(
                "ato",
                kv.get("ato").and_then(|v| ms(v)),
                i.ato_us.map(u64::from),
            );
            let rate = kv["delivery_rate"]
                .trim_end_matches("bps")
                .parse::<u64>()
                .ok();
            check("delivery_rate", rate, i.delivery_rate.map(|r| r * 8));
            check(
                "app_limited",
                Some(kv.contains_key("app_limited") as u64),
                i.app_limited.map(u64::from),
            );
            let mem = skmem(&kv["skmem"]);
            check(
                "skmem r",
                mem.get("r").map(|v| *v as u64),
                i.rmem_alloc.map(u64::from),
            );
            check(
                "skmem rb",
                mem.get("rb").map(|v| *v as u64),
                i.rcvbuf.map(u64::from),
            );
            check(
                "skmem tb",
                mem.get("tb").map(|v| *v as u64),
                i.sndbuf.map(u64::from),
            );
            check(
                "skmem w",
                mem.get("w").map(|v| *v as u64),
                i.wmem_queued.map(u64::from),
            );
            // Zero counters ss leaves out.
            check(
                "retrans",
                kv.get("retrans").map(|_| 1),
                i.total_retrans.filter(|r| *r > 0).map(|_| 1),
            );
            compared += 1;
        }
        assert_eq!(compared, 2);
    }

    #[test]
    fn the_poller_dumps_thins_and_stops() {
        if diag_or_skip().is_none() {
            return;
        }
        let (_c, _s, client, _server) = loopback_pair();
        let stop = Arc::new(AtomicBool::new(false));
        let config = PollerConfig {
            mean_interval: Duration::from_millis(20),
            seed: Some(7),
            ..PollerConfig::default()
        };
        let until = Instant::now() + Duration::from_millis(600);
        let mut p = LivePoller::new(OriginId(2), config, stop.clone(), Some(until)).unwrap();
        let handle = p.status_handle();
        let mut batch = Batch::default();
        let started = Instant::now();
        let mut calls = 0;
        loop {
            let t = Instant::now();
            let more = p.read_batch(4, &mut batch);
            assert!(t.elapsed() < Duration::from_millis(400), "a call blocked");
            calls += 1;
            if !more {
                break;
            }
        }
        assert!(started.elapsed() >= Duration::from_millis(590));
        let status = handle.get();
        assert!(status.dumps >= 5, "{status:?}");
        assert_eq!(status.failed_dumps, 0);
        assert!(calls > status.dumps);
        let ours: Vec<_> = batch.tcp.iter().filter(|s| s.local == client).collect();
        assert!(!ours.is_empty());
        assert!(ours.iter().all(|s| s.origin == OriginId(2)));
        assert!(batch.tcp.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
        let stats = p.take_stats();
        assert_eq!(stats.records, batch.tcp.len() as u64);
        assert_eq!(stats.tcp, batch.tcp.len() as u64);
        assert_eq!(status.samples, batch.tcp.len() as u64);
        assert!(p.take_warnings().is_empty());
        // The stop flag ends it at once.
        let mut p =
            LivePoller::new(OriginId(2), PollerConfig::default(), stop.clone(), None).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert!(!p.read_batch(16, &mut Batch::default()));
    }
}
