//! Causeway's dataflow operators, one module each.
//!
//! Each operator is an extension trait on a timely stream, named in the running graph as in
//! DESIGN.md's picture; its module documentation states its input, output, exchange key, the
//! state it holds, when that state is freed, and its cost per record.
//!
//! Operators so far:
//! - [`flows`]: per-conversation summaries of a packet stream;
//! - [`rows`]: message-trace rows to [`Message`]s;
//! - [`stats`]: per-origin totals of the sources' counts.
//!
//! Shared types: [`Message`], [`Names`] (address to node name), [`PatternNode`] (path pattern
//! shapes and ids).

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod flows;
pub mod message;
pub mod names;
pub mod pattern;
pub mod rows;
pub mod stats;

pub use flows::{Flow, FlowConfig, FlowEnd, Flows};
pub use message::Message;
pub use names::{Names, NamesError};
pub use pattern::PatternNode;
pub use rows::RowsToMessages;
pub use stats::{CollectStats, OriginStats};
