//! [`Message`]: one application-level message between two nodes, with the send and receive
//! timestamps each taken in its own clock (WAP5 §4's reconciled trace tuple), and the same two
//! timestamps corrected to the reference clock.
//!
//! No state: a type and its stream alias.

use causeway_sources::{Address, MessageKind, OriginId, Protocol, Time};
use serde::{Deserialize, Serialize};

use crate::domain::Domain;
use crate::names::NodeName;

/// A stream of messages, boxed (see [`crate`]'s note on `clippy::vec_box`).
pub type MessageStream<'scope> = timely::dataflow::Stream<'scope, Time, Vec<Box<Message>>>;

/// A message from one node to another.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Message {
    /// Send time in the sender side's clock; `None` where the send side was not observed.
    pub send_ns: Option<Time>,
    /// Receive time in the receiver side's clock; `None` where the receive side was not
    /// observed.
    pub recv_ns: Option<Time>,
    /// Whose clock `send_ns` was read from.
    pub send_domain: Option<Domain>,
    /// Whose clock `recv_ns` was read from.
    pub recv_domain: Option<Domain>,
    /// `send_ns` in the reference clock, once the `clock` operator has corrected it.
    pub send_corrected_ns: Option<Time>,
    /// `recv_ns` in the reference clock, once corrected.
    pub recv_corrected_ns: Option<Time>,
    /// Sending node.
    pub src: NodeName,
    /// Receiving node.
    pub dst: NodeName,
    /// Sender's endpoint (as the sender sees it: behind a NAT, the private side).
    pub src_endpoint: Address,
    /// Receiver's endpoint (as the receiver sees it).
    pub dst_endpoint: Address,
    /// Size in bytes, when known.
    pub bytes: Option<u64>,
    /// Transport protocol, when known.
    pub protocol: Option<Protocol>,
    /// Call, return, request, response or message, when the input says.
    pub kind: Option<MessageKind>,
    /// Call identifier, when the input gives one.
    pub call_id: Option<String>,
    /// Where it was read: the trace file, or the sniffer of its send side (else its receive
    /// side).
    pub origin: OriginId,
    /// For message-trace input: the 0-based data row it came from.
    pub row: Option<u64>,
    /// How many sniffers saw it (1 for message traces).
    pub sightings: u32,
    /// The TCP problems of the connection that carried it, while it was sent (`tcp.hops`,
    /// with `--emit problems`); `None` where nothing was measured. (Always serialized:
    /// messages cross processes in bincode, which cannot skip a field.)
    #[serde(default)]
    pub tcp: Option<crate::tcp::problem::Carried>,
    /// Event time: the send (else receive) time in the reference clock as the sources aligned
    /// it, before the `clock` operator's finer correction.
    pub event_ns: Time,
}

impl Message {
    /// Event time in the reference clock.
    pub fn ts_ns(&self) -> Time {
        self.event_ns
    }
}

#[cfg(test)]
impl Message {
    /// For tests: a message between two `ip:port` endpoints (their nodes named by the IP),
    /// sent and received at the times given.
    pub(crate) fn between(src: &str, dst: &str, send: Time, recv: Time) -> Message {
        let node = |s: &str| s.split(':').next().unwrap_or("").to_owned();
        Message {
            send_ns: Some(send),
            recv_ns: Some(recv),
            src: node(src).into(),
            dst: node(dst).into(),
            src_endpoint: Address::parse(src),
            dst_endpoint: Address::parse(dst),
            event_ns: send,
            ..Message::default()
        }
    }
}
