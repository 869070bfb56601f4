//! `reconcile` (WAP5 §4 and §7, Pip §4.1): packets from any number of sniffers to one
//! [`Message`](crate::Message) per application message, with the sender side's and the receiver
//! side's timestamps.
//!
//! Two stages, each an operator:
//!
//! 1. [`fold`]: per sniffer and TCP connection, the data segments between direction changes
//!    fold into one [`Sighting`] (WAP5's "fat message", §2.3); retransmitted and duplicate
//!    segments are not new messages, pure ACKs are not messages, each UDP datagram is one.
//! 2. [`merge`]: the sightings of one message from every sniffer meet by their content key (the
//!    message's first sequence number and acknowledgment, which NAT does not change; for UDP,
//!    the payload hash) and become one message: the send timestamp from the sniffer nearest
//!    the sender, the receive timestamp from the sniffer nearest the receiver, each endpoint
//!    as the host itself sees it. Pairs of sightings also give the `clock` operator its
//!    samples, and sightings whose addresses differ give the `nat` operator its evidence.
//!
//! Socket-call logs take a third operator, [`calls`]: both ends of a connection logged their
//! own sends and receives, which meet by stream offset (datagrams by payload hash).
//!
//! Beside them: [`nat`] learns address translations from the sightings whose addresses differ
//! (WAP5 §7.1) and canonicalises messages seen on one side only; [`topology`] says which
//! sniffer is nearest each host, so that `merge` takes each timestamp from the right one.
//!
//! State: each operator's module says what it holds; `fold` and `merge` keep the sightings of
//! their lateness windows and free them as the frontier passes.

pub mod calls;
pub mod fold;
pub mod merge;
pub mod nat;
pub mod topology;

use causeway_sources::{Endpoint, OriginId, Protocol, Time};
use serde::{Deserialize, Serialize};

/// One sniffer's view of one message.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Sighting {
    /// Identity of the message across sniffers.
    pub key: u64,
    /// The sniffer.
    pub origin: OriginId,
    /// TCP or UDP.
    pub protocol: Protocol,
    /// Source as this sniffer saw it.
    pub src: Endpoint,
    /// Destination as this sniffer saw it.
    pub dst: Endpoint,
    /// Time of its first segment seen, in the sniffer's clock.
    pub first_ns: Time,
    /// Time of its last segment seen, in the sniffer's clock.
    pub last_ns: Time,
    /// Payload bytes (new data only).
    pub bytes: u64,
    /// IP TTL (hop limit) of its first segment seen.
    pub ttl: u8,
    /// Whether the sniffer saw the message's first segment (so `first_ns` is that segment's).
    pub whole_start: bool,
    /// Data segments seen.
    pub segments: u32,
    /// Segments that carried only data already seen (retransmissions, duplicates).
    pub retransmitted: u32,
}
