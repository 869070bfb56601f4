//! TCP statistics: per-socket samples of the kernel's TCP state (SNAP §2.1, Table 1).
//!
//! A [`TcpSample`] is one look at one connection: its two endpoints, when it was taken, and
//! the [`TcpInfo`] fields that were available. Two sources produce them:
//! - [`ss`]: `ss -tin` output captured repeatedly (blocks preceded by `### <unix time>`);
//! - [`netlink`]: a live poller over NETLINK_SOCK_DIAG (INET_DIAG with `struct tcp_info`
//!   and `SK_MEMINFO`), as `ss -ti` does, at Poisson-distributed intervals.
//!
//! # SNAP Table 1 on Linux
//!
//! | SNAP statistic | Linux `tcp_info` (and `ss -ti` name) | kernel |
//! |---|---|---|
//! | CurAppWQueue | `SK_MEMINFO_WMEM_QUEUED` (`skmem w`), `tcpi_notsent_bytes` (`notsent`) | 4.6 |
//! | MaxAppWQueue | `SK_MEMINFO_SNDBUF` (`skmem tb`) | 2.6 |
//! | (send-buffer limited time) | `tcpi_sndbuf_limited` µs (`sndbuf_limited`) | 4.10 |
//! | #FastRetrans | `tcpi_total_retrans` − retransmissions by timeout (`retrans:a/b`) | 2.6 |
//! | #Timeout | `tcpi_total_rto` (`rto` counters of 6.7+; not printed by iproute2 6.1) | 6.7 |
//! | #SampleRTT, #SumRTT | not kept; estimated from `tcpi_rtt` × acked segments (see `snap`) | — |
//! | RwinLimitTime | `tcpi_rwnd_limited` µs (`rwnd_limited`) | 4.10 |
//! | CwinLimitTime | `tcpi_busy_time` − rwnd − sndbuf limited time (`busy`) | 4.10 |
//! | SentBytes | `tcpi_bytes_sent` (`bytes_sent`), `tcpi_bytes_acked` (`bytes_acked`) | 4.19 / 4.1 |
//! | Cwin | `tcpi_snd_cwnd` (`cwnd`) × `tcpi_snd_mss` (`mss`) | 2.6 |
//! | Rwin | `tcpi_snd_wnd` (`snd_wnd`), the peer's announced window | 6.2 |
//!
//! Every field is an `Option`: `None` where the kernel or the `ss` version did not give it,
//! so that a classifier never mistakes "not measured" for zero. `ss` also leaves out most
//! counters while they are zero (`retrans`, `bytes_*`, `busy`, `rwnd_limited`...); `snap`
//! reads a counter missing from one sample and present in the next as having been zero.

pub mod netlink;
pub mod ss;

use serde::{Deserialize, Serialize};

use crate::observation::{Endpoint, Nanos};
use crate::origin::OriginId;

/// One sample of one TCP connection's kernel state.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TcpSample {
    /// The host (or file of `ss` output) it came from: its clock domain.
    pub origin: OriginId,
    /// When it was taken (CLOCK_REALTIME of that host), ns since the epoch.
    pub ts_ns: Nanos,
    /// This host's end of the connection.
    pub local: Endpoint,
    /// The other end.
    pub peer: Endpoint,
    /// What the kernel said about it.
    pub info: TcpInfo,
}

/// TCP connection states, as `tcpi_state` numbers them (include/net/tcp_states.h).
pub mod state {
    /// Established.
    pub const ESTABLISHED: u8 = 1;
    /// SYN sent.
    pub const SYN_SENT: u8 = 2;
    /// SYN received.
    pub const SYN_RECV: u8 = 3;
    /// FIN wait 1.
    pub const FIN_WAIT1: u8 = 4;
    /// FIN wait 2.
    pub const FIN_WAIT2: u8 = 5;
    /// Time wait.
    pub const TIME_WAIT: u8 = 6;
    /// Closed.
    pub const CLOSE: u8 = 7;
    /// Close wait.
    pub const CLOSE_WAIT: u8 = 8;
    /// Last ACK.
    pub const LAST_ACK: u8 = 9;
    /// Listening.
    pub const LISTEN: u8 = 10;
    /// Closing.
    pub const CLOSING: u8 = 11;

    /// The state's number for `ss`'s name of it (`ESTAB`, `SYN-SENT`, ...).
    pub fn from_ss(name: &str) -> Option<u8> {
        Some(match name {
            "ESTAB" => ESTABLISHED,
            "SYN-SENT" => SYN_SENT,
            "SYN-RECV" => SYN_RECV,
            "FIN-WAIT-1" => FIN_WAIT1,
            "FIN-WAIT-2" => FIN_WAIT2,
            "TIME-WAIT" => TIME_WAIT,
            "UNCONN" | "CLOSE" => CLOSE,
            "CLOSE-WAIT" => CLOSE_WAIT,
            "LAST-ACK" => LAST_ACK,
            "LISTEN" => LISTEN,
            "CLOSING" => CLOSING,
            _ => return None,
        })
    }
}

/// The fields of Linux's `struct tcp_info` (and socket memory) that Causeway uses. Times are
/// in µs, as the kernel gives them; counters are cumulative over the connection's life
/// unless marked as a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TcpInfo {
    /// `tcpi_state` (see [`state`]).
    pub state: Option<u8>,
    /// `tcpi_ca_state`: 0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss (snapshot).
    pub ca_state: Option<u8>,
    /// `tcpi_backoff`: RTO backoff exponent now (snapshot).
    pub backoff: Option<u32>,
    /// `tcpi_rto`, µs (snapshot).
    pub rto_us: Option<u32>,
    /// `tcpi_ato`: the delayed-ACK timeout now, µs (snapshot).
    pub ato_us: Option<u32>,
    /// `tcpi_snd_mss`, bytes.
    pub snd_mss: Option<u32>,
    /// `tcpi_rcv_mss`, bytes.
    pub rcv_mss: Option<u32>,
    /// `tcpi_unacked`: segments in flight (snapshot).
    pub unacked: Option<u32>,
    /// `tcpi_lost`: segments thought lost (snapshot).
    pub lost: Option<u32>,
    /// `tcpi_retrans`: retransmitted segments not yet acknowledged (snapshot).
    pub retrans: Option<u32>,
    /// `tcpi_total_retrans`: segments retransmitted over the connection's life.
    pub total_retrans: Option<u32>,
    /// `tcpi_rtt`: smoothed RTT, µs (snapshot).
    pub rtt_us: Option<u32>,
    /// `tcpi_rttvar`, µs (snapshot).
    pub rttvar_us: Option<u32>,
    /// `tcpi_min_rtt`: the windowed minimum RTT, µs (snapshot).
    pub min_rtt_us: Option<u32>,
    /// `tcpi_snd_ssthresh`, segments (snapshot).
    pub snd_ssthresh: Option<u32>,
    /// `tcpi_snd_cwnd`, segments (snapshot).
    pub snd_cwnd: Option<u32>,
    /// `tcpi_rcv_space`, bytes (snapshot).
    pub rcv_space: Option<u32>,
    /// `tcpi_bytes_acked`: bytes the peer acknowledged.
    pub bytes_acked: Option<u64>,
    /// `tcpi_bytes_received`: bytes received.
    pub bytes_received: Option<u64>,
    /// `tcpi_bytes_sent`: bytes sent, retransmissions included.
    pub bytes_sent: Option<u64>,
    /// `tcpi_bytes_retrans`: bytes retransmitted.
    pub bytes_retrans: Option<u64>,
    /// `tcpi_segs_out`: segments sent.
    pub segs_out: Option<u32>,
    /// `tcpi_segs_in`: segments received.
    pub segs_in: Option<u32>,
    /// `tcpi_data_segs_out`: segments sent that carried data.
    pub data_segs_out: Option<u32>,
    /// `tcpi_data_segs_in`: segments received that carried data.
    pub data_segs_in: Option<u32>,
    /// `tcpi_notsent_bytes`: bytes written by the application and not yet sent (snapshot).
    pub notsent_bytes: Option<u32>,
    /// `tcpi_busy_time`: time with data in flight, µs.
    pub busy_time_us: Option<u64>,
    /// `tcpi_rwnd_limited`: time limited by the peer's receive window, µs.
    pub rwnd_limited_us: Option<u64>,
    /// `tcpi_sndbuf_limited`: time limited by the send buffer, µs.
    pub sndbuf_limited_us: Option<u64>,
    /// `tcpi_delivery_rate`, bytes/s (snapshot).
    pub delivery_rate: Option<u64>,
    /// `tcpi_delivery_rate_app_limited` (snapshot).
    pub app_limited: Option<bool>,
    /// `tcpi_snd_wnd`: the peer's announced receive window, bytes (snapshot; kernel 6.2).
    pub snd_wnd: Option<u32>,
    /// `tcpi_total_rto`: retransmission timeouts (kernel 6.7).
    pub total_rto: Option<u32>,
    /// `tcpi_total_rto_recoveries`: recoveries entered by a timeout (kernel 6.7).
    pub total_rto_recoveries: Option<u32>,
    /// `tcpi_total_rto_time`: time spent in recoveries entered by a timeout, ms (kernel 6.7).
    pub total_rto_time_ms: Option<u32>,
    /// `tcpi_dsack_dups`: duplicate segments the peer reported (D-SACK).
    pub dsack_dups: Option<u32>,
    /// `tcpi_reord_seen`: reorderings seen.
    pub reord_seen: Option<u32>,
    /// `SK_MEMINFO_SNDBUF`: the send buffer's size, bytes (snapshot).
    pub sndbuf: Option<u32>,
    /// `SK_MEMINFO_WMEM_QUEUED`: bytes queued in the send buffer (snapshot).
    pub wmem_queued: Option<u32>,
    /// `SK_MEMINFO_RCVBUF`: the receive buffer's size, bytes (snapshot).
    pub rcvbuf: Option<u32>,
    /// `SK_MEMINFO_RMEM_ALLOC`: bytes queued in the receive buffer (snapshot).
    pub rmem_alloc: Option<u32>,
    /// The owning process's pid, where the source knew it (`ss -p`).
    pub pid: Option<u32>,
}
