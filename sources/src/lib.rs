//! Causeway's sources: everything that produces observations.
//!
//! Layers, bottom up:
//! - [`pcap`]: frames from classic pcap and pcapng streams, with damage handling;
//! - [`decode`]: frames to [`Packet`] observations (link layer, IP, TCP/UDP);
//! - [`trace`]: message-trace CSV rows to [`TraceRow`] observations;
//! - [`clocks`] and [`ordered`]: a message trace's hosts' clocks coarsely aligned from its
//!   rows, and the trace read in the order of those clocks;
//! - [`socketlog`]: directories of socket-call logs to [`SocketCall`] observations;
//! - [`live`]: the live sniffer (AF_PACKET with a TPACKET_V3 ring, Linux): packets as they
//!   pass an interface, with a BPF capture filter and an optional pcapng copy;
//! - [`input`]: command-line inputs (`NAME=PATH`, `-`, gzip) opened and format-detected;
//! - [`reader`]: an [`ObservationReader`] per input, counting into [`SourceStats`];
//! - [`piped`]: a reader on a thread of its own for pipes, whose watermark moves on when a
//!   live capture piped in goes quiet;
//! - [`operator`]: the timely `source` operator that merges a worker's readers in event time
//!   and keeps the watermark.
//!
//! Observations come in typed streams, one per kind (packets, message-trace rows; socket calls
//! and TCP samples as their sources arrive). Every observation carries its [`OriginId`]: the sniffer or trace it came from, which is also
//! the clock domain of its timestamps.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod clocks;
pub mod decode;
pub mod input;
pub mod live;
pub mod observation;
pub mod operator;
pub mod ordered;
pub mod origin;
pub mod pcap;
pub mod piped;
pub mod read_ahead;
pub mod reader;
pub mod records;
pub mod shed;
pub mod socketlog;
pub mod sorted;
pub mod stats;
pub mod tcpstats;
pub mod trace;

use serde::{Deserialize, Serialize};

pub use clocks::HostKey;
pub use input::{
    InputError, InputKind, InputSpec, ProgressCounter, open, open_ordered, open_stream,
};
pub use observation::{
    Address, Batch, Direction, Endpoint, MessageKind, Nanos, Opener, Packet, Protocol, SocketCall,
    TcpFields, TcpFlags, TraceRow, Transport,
};
pub use operator::{RunControl, SourceConfig, SourceStreams, read_inputs};
pub use ordered::TraceOrder;
pub use origin::{Alignment, OriginId, Origins};
pub use reader::ObservationReader;
pub use stats::{SkipReason, SourceStats};

/// Timely time throughout Causeway: event time in ns since the epoch.
pub type Time = u64;

/// A problem with an input that did not stop it: damage skipped, a read that failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    /// The input's origin.
    pub origin: OriginId,
    /// The input's path.
    pub path: String,
    /// Byte offset where the problem starts, when there is one.
    pub offset: Option<u64>,
    /// What happened, in one line.
    pub message: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.offset {
            Some(o) => write!(f, "{}: offset {}: {}", self.path, o, self.message),
            None => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

/// What sources report besides observations, as data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceEvent {
    /// Counts since the origin's previous delta.
    Stats {
        /// Whose counts.
        origin: OriginId,
        /// The delta (boxed: the event's other kind is much smaller).
        stats: Box<SourceStats>,
    },
    /// A warning about an input.
    Warning(Warning),
}

/// How many damage warnings per input are spelled out before the rest are only counted.
pub fn warning_limit() -> usize {
    20
}
