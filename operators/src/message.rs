//! [`Message`]: one application-level message between two nodes, with the send and receive
//! timestamps each taken in its own node's clock (WAP5 §4's reconciled trace tuple).

use causeway_sources::{Address, MessageKind, OriginId, Protocol, Time};
use serde::{Deserialize, Serialize};

/// A message from one node to another.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Message {
    /// Send time in the sender's clock; `None` where the send side was not observed.
    pub send_ns: Option<Time>,
    /// Receive time in the receiver's clock; `None` where the receive side was not observed.
    pub recv_ns: Option<Time>,
    /// Sending node.
    pub src: String,
    /// Receiving node.
    pub dst: String,
    /// Sender's endpoint.
    pub src_endpoint: Address,
    /// Receiver's endpoint.
    pub dst_endpoint: Address,
    /// Size in bytes, when known.
    pub bytes: Option<u64>,
    /// Transport protocol, when known.
    pub protocol: Option<Protocol>,
    /// Call, return, request, response or message, when the input says.
    pub kind: Option<MessageKind>,
    /// Call identifier, when the input gives one.
    pub call_id: Option<String>,
    /// Where it was read.
    pub origin: OriginId,
    /// For message-trace input: the 0-based data row it came from.
    pub row: Option<u64>,
}

impl Message {
    /// Event time: the send time, or the receive time where the send side is absent.
    pub fn ts_ns(&self) -> Time {
        self.send_ns.or(self.recv_ns).unwrap_or(0)
    }
}
