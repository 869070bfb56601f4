//! Per-origin counters: what was read, what was skipped and why, what arrived late.
//!
//! Sources count into a [`SourceStats`] and hand deltas downstream as data (a
//! [`crate::SourceEvent::Stats`]); the stats operator sums them per origin. Nothing a source
//! drops goes uncounted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::observation::Nanos;

/// Why a record was not turned into an observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SkipReason {
    /// A record whose header contradicts itself (impossible lengths, bad block length); the
    /// reader resynchronised after it.
    CorruptRecord,
    /// The file ends inside a record.
    TruncatedRecord,
    /// A pcapng block that does not carry packets and is not understood (counted, harmless).
    UnknownBlock,
    /// A pcapng packet for an interface that was never described.
    UnknownInterface,
    /// A link-layer type this reader does not decode.
    UnsupportedLinktype,
    /// A frame that is not IPv4 or IPv6 (ARP, LLDP, ...).
    NonIp,
    /// An IP fragment: counted, not reassembled.
    IpFragment,
    /// IP carrying neither TCP nor UDP (ICMP, ...).
    OtherProtocol,
    /// Headers cut short by the snap length, or malformed.
    MalformedHeader,
    /// A message-trace row (or a line of `ss` output) that could not be parsed.
    BadRow,
    /// A message-trace row with neither a send nor a receive timestamp (or `ss` output before
    /// any `### <unix time>` line).
    NoTimestamp,
    /// A send or receive on a socket whose two ends the socket-call log does not name (a
    /// socket inherited from before the capture, a socket pair, a UNIX datagram socket).
    UnnamedSocket,
    /// An `ss` record whose addresses are names, not numbers (`ss` run without `-n`, or with
    /// `-r`): it cannot be matched to packets.
    ResolvedName,
    /// Read, but not analysed: the run was stopped (Ctrl-C, `--duration`, `--count`) while
    /// the record waited in the reader's batch.
    Stopped,
    /// Read, but not analysed: before the event time a checkpoint says was analysed by an
    /// earlier run (`--checkpoint`).
    Resumed,
}

impl SkipReason {
    /// Every reason, in a fixed order.
    pub const ALL: [SkipReason; 15] = [
        SkipReason::CorruptRecord,
        SkipReason::TruncatedRecord,
        SkipReason::UnknownBlock,
        SkipReason::UnknownInterface,
        SkipReason::UnsupportedLinktype,
        SkipReason::NonIp,
        SkipReason::IpFragment,
        SkipReason::OtherProtocol,
        SkipReason::MalformedHeader,
        SkipReason::BadRow,
        SkipReason::NoTimestamp,
        SkipReason::UnnamedSocket,
        SkipReason::ResolvedName,
        SkipReason::Stopped,
        SkipReason::Resumed,
    ];

    /// The snake_case name used in output.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::CorruptRecord => "corrupt_record",
            SkipReason::TruncatedRecord => "truncated_record",
            SkipReason::UnknownBlock => "unknown_block",
            SkipReason::UnknownInterface => "unknown_interface",
            SkipReason::UnsupportedLinktype => "unsupported_linktype",
            SkipReason::NonIp => "non_ip",
            SkipReason::IpFragment => "ip_fragment",
            SkipReason::OtherProtocol => "other_protocol",
            SkipReason::MalformedHeader => "malformed_header",
            SkipReason::BadRow => "bad_row",
            SkipReason::NoTimestamp => "no_timestamp",
            SkipReason::UnnamedSocket => "unnamed_socket",
            SkipReason::ResolvedName => "resolved_name",
            SkipReason::Stopped => "stopped",
            SkipReason::Resumed => "resumed",
        }
    }

    /// Whether this reason means the input is damaged (as opposed to traffic we do not analyse).
    pub fn is_damage(self) -> bool {
        matches!(
            self,
            SkipReason::CorruptRecord
                | SkipReason::TruncatedRecord
                | SkipReason::UnknownInterface
                | SkipReason::MalformedHeader
                | SkipReason::BadRow
        )
    }
}

/// Counters of one origin. Additive: deltas from several readers and workers sum to totals.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SourceStats {
    /// Records read: packets (frames) or trace rows, including those later skipped.
    pub records: u64,
    /// Bytes of those records: frame lengths on the wire, or row lengths in the file.
    pub bytes: u64,
    /// Earliest record time.
    pub first_ns: Option<Nanos>,
    /// Latest record time.
    pub last_ns: Option<Nanos>,
    /// Skipped records per reason, indexed like [`SkipReason::ALL`].
    pub skipped: [u64; SkipReason::ALL.len()],
    /// Records that arrived later than the allowed lateness (still delivered, and counted).
    pub late: u64,
    /// Messages this origin, a sniffer on the sender's or receiver's host, should have seen
    /// but did not (counted by `reconcile`).
    pub unpaired: u64,
    /// Sightings that reached `reconcile` after their message was complete (counted, dropped).
    pub late_sightings: u64,
    /// Observations emitted per transport protocol: TCP.
    pub tcp: u64,
    /// Observations emitted per transport protocol: UDP.
    pub udp: u64,
    /// Records carried over IPv6 (the rest of the IP records are IPv4).
    pub ipv6: u64,
    /// Link-layer types seen (pcap LINKTYPE numbers), with packet counts.
    pub linktypes: BTreeMap<u16, u64>,
    /// Packets the kernel dropped before a live sniffer read them: its ring was full
    /// (`PACKET_STATISTICS` `tp_drops`; 0 for files).
    pub kernel_drops: u64,
    /// Times a live sniffer's ring was found full (`tp_freeze_q_cnt`; 0 for files).
    pub ring_freezes: u64,
    /// File formats read for this origin ("pcap (µs)", "pcapng", "csv", ...), with file counts.
    pub formats: BTreeMap<String, u64>,
}

impl SourceStats {
    /// Counts one record read at `ts_ns` with `bytes` bytes.
    #[inline]
    pub fn record(&mut self, ts_ns: Nanos, bytes: u64) {
        self.records += 1;
        self.bytes += bytes;
        self.first_ns = Some(self.first_ns.map_or(ts_ns, |f| f.min(ts_ns)));
        self.last_ns = Some(self.last_ns.map_or(ts_ns, |l| l.max(ts_ns)));
    }

    /// Counts one skipped record.
    #[inline]
    pub fn skip(&mut self, reason: SkipReason) {
        self.skipped[reason as usize] += 1;
    }

    /// Skips for one reason.
    pub fn skipped(&self, reason: SkipReason) -> u64 {
        self.skipped[reason as usize]
    }

    /// Total skipped records.
    pub fn skipped_total(&self) -> u64 {
        self.skipped.iter().sum()
    }

    /// Non-zero skip counts by name.
    pub fn skipped_by_name(&self) -> BTreeMap<&'static str, u64> {
        SkipReason::ALL
            .iter()
            .filter(|r| self.skipped(**r) > 0)
            .map(|r| (r.as_str(), self.skipped(*r)))
            .collect()
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &SourceStats) {
        self.records += other.records;
        self.bytes += other.bytes;
        self.first_ns = match (self.first_ns, other.first_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_ns = match (self.last_ns, other.last_ns) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        for (a, b) in self.skipped.iter_mut().zip(other.skipped.iter()) {
            *a += b;
        }
        self.late += other.late;
        self.unpaired += other.unpaired;
        self.late_sightings += other.late_sightings;
        self.tcp += other.tcp;
        self.udp += other.udp;
        self.ipv6 += other.ipv6;
        self.kernel_drops += other.kernel_drops;
        self.ring_freezes += other.ring_freezes;
        for (k, v) in &other.linktypes {
            *self.linktypes.entry(*k).or_default() += v;
        }
        for (k, v) in &other.formats {
            *self.formats.entry(k.clone()).or_default() += v;
        }
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        *self == SourceStats::default()
    }

    /// Returns the counts so far and resets `self`.
    pub fn take(&mut self) -> SourceStats {
        std::mem::take(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sums_and_widens_the_span() {
        let mut a = SourceStats::default();
        a.record(10, 100);
        a.skip(SkipReason::NonIp);
        let mut b = SourceStats::default();
        b.record(5, 50);
        b.record(20, 50);
        b.skip(SkipReason::NonIp);
        b.late = 3;
        a.merge(&b);
        assert_eq!(a.records, 3);
        assert_eq!(a.bytes, 200);
        assert_eq!((a.first_ns, a.last_ns), (Some(5), Some(20)));
        assert_eq!(a.skipped(SkipReason::NonIp), 2);
        assert_eq!(a.late, 3);
        assert_eq!(a.skipped_by_name().get("non_ip"), Some(&2));
    }

    #[test]
    fn reason_indices_match_all() {
        for (i, r) in SkipReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }
}
