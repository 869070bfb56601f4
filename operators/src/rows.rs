//! The `rows` operator: message-trace rows to [`Message`]s.
//!
//! - **Input**: [`TraceRow`]s from message-trace sources.
//! - **Output**: one [`Message`] per row, its nodes named by the [`Names`] table (an endpoint
//!   without an entry is named after its IP; a named address is its own node).
//! - **Exchange**: none (pipeline); **state**: the text of unnamed IPs ([`NodeCache`],
//!   bounded); **cost**: two name lookups per row.
//!
//! ```
//! use std::sync::Arc;
//! use causeway_operators::{Names, RowsToMessages};
//! use causeway_sources::{Address, OriginId, TraceRow};
//! use timely::dataflow::operators::capture::Extract;
//! use timely::dataflow::operators::{Capture, ToStream};
//!
//! let names = Arc::new(Names::parse("10.0.0.2 web\n", "names").unwrap());
//! let row = TraceRow {
//!     origin: OriginId(0),
//!     row: 0,
//!     send_ns: Some(10),
//!     recv_ns: Some(12),
//!     event_ns: 10,
//!     src: Address::parse("10.0.0.1:4000"),
//!     dst: Address::parse("10.0.0.2:80"),
//!     ..TraceRow::default()
//! };
//! let captured = timely::example(move |scope| {
//!     vec![row].to_stream(scope).container::<Vec<_>>().messages(names).capture()
//! });
//! let messages: Vec<_> = captured.extract().into_iter().flat_map(|(_, m)| m).collect();
//! assert_eq!((&*messages[0].src, &*messages[0].dst), ("10.0.0.1", "web"));
//! ```

use std::sync::Arc;

use causeway_sources::{Time, TraceRow};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;

use crate::domain::Domain;
use crate::message::{Message, MessageStream};
use crate::names::{Names, NodeCache};

/// Converts a row to a message, naming its nodes.
///
/// Each timestamp is in its own node's clock: the send time in the sender's, the receive time
/// in the receiver's (the clock domains are the nodes); they are kept raw. The event time is
/// the row's, which its reader took in the reference clock (the coarse offset of the host
/// that stamped it).
pub fn message_of_row(row: TraceRow, names: &Names, nodes: &mut NodeCache) -> Message {
    let src = nodes.node_of(names, &row.src);
    let dst = nodes.node_of(names, &row.dst);
    Message {
        send_ns: row.send_ns,
        recv_ns: row.recv_ns,
        send_domain: row.send_ns.map(|_| Domain::Node(src.clone())),
        recv_domain: row.recv_ns.map(|_| Domain::Node(dst.clone())),
        send_corrected_ns: None,
        recv_corrected_ns: None,
        event_ns: row.event_ns,
        src,
        dst,
        src_endpoint: row.src,
        dst_endpoint: row.dst,
        bytes: row.bytes,
        protocol: None,
        kind: row.kind,
        call_id: row.call_id,
        origin: row.origin,
        row: Some(row.row),
        sightings: 1,
        tcp: None,
    }
}

/// Extension trait: messages from message-trace rows.
pub trait RowsToMessages<'scope> {
    /// One message per row; see the module documentation.
    fn messages(self, names: Arc<Names>) -> MessageStream<'scope>;
}

impl<'scope> RowsToMessages<'scope> for Stream<'scope, Time, Vec<TraceRow>> {
    fn messages(self, names: Arc<Names>) -> MessageStream<'scope> {
        self.unary(Pipeline, "rows", move |_cap, _info| {
            let mut nodes = NodeCache::default();
            move |input, output| {
                // In arrival order (`for_each_stamp` may reorder containers of one time).
                input.for_each(|cap, rows| {
                    let mut session = output.session(&cap);
                    for row in rows.drain(..) {
                        session.give(Box::new(message_of_row(row, &names, &mut nodes)));
                    }
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_sources::{Address, OriginId};

    #[test]
    fn rows_become_named_messages() {
        let names = Names::parse("10.0.0.2 web\n", "n").unwrap();
        let row = TraceRow {
            origin: OriginId(2),
            row: 7,
            send_ns: Some(5),
            recv_ns: None,
            event_ns: 5,
            src: Address::parse("10.0.0.1:40000"),
            dst: Address::parse("10.0.0.2:80"),
            bytes: Some(100),
            kind: None,
            call_id: None,
        };
        let m = message_of_row(row, &names, &mut NodeCache::default());
        assert_eq!((&*m.src, &*m.dst), ("10.0.0.1", "web"));
        assert_eq!(m.row, Some(7));
        assert_eq!(m.ts_ns(), 5);
    }
}
