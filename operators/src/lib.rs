//! Causeway's dataflow operators, one folder per stage of the dataflow (ARCHITECTURE.md's
//! picture), one module per operator.
//!
//! Each operator is an extension trait on a timely stream, named in the running graph as in
//! the picture; its module documentation states its input, output, exchange key, the state it
//! holds, when that state is freed, and its cost per record.
//!
//! ```text
//! rows (message traces) ------------------------------------------\
//! packets -> reconcile.fold -> reconcile -> clock -> clock.correct -> link | link.tasks -> paths -> alert
//! socket-call logs -> reconcile.calls ---/       \-> nat                (paths/)         (paths/build/)
//! packets | tcp stats -> tcp.packets | snap.deltas -> snap -> correlate (tcp/)
//! ```
//!
//! Stages:
//! - [`reconcile`]: packets from any number of sniffers, or socket-call logs, to messages;
//!   address translations ([`reconcile::nat`]) and where sniffers sit ([`reconcile::topology`]);
//! - [`clock`]: offsets and drift between clock domains (`clock.bounds`, `clock`), and the
//!   correction of message timestamps (`clock.correct`);
//! - [`paths`]: the cause of every message (`link`, [`paths::link`]; `link.tasks`,
//!   [`paths::tasks`]), and path instances and patterns (`paths`, [`paths::build`]);
//! - [`tcp`]: SNAP's evidence from TCP statistics or packets, its classification, and the
//!   problems connections share ([`tcp::correlate`]); per-conversation summaries
//!   ([`tcp::flows`]);
//! - [`alert`]: alerts from `--alert` rules over the path patterns.
//!
//! Inputs and totals: [`rows`] (message-trace rows to [`Message`]s), [`stats`] (per-origin
//! totals of the sources' counts).
//!
//! Shared types: [`Message`], [`Domain`] (clock domains), [`Names`] (address to node name),
//! [`Homes`] (which sniffer is nearest each host), [`PatternNode`] (path pattern shapes and
//! ids), [`conn`] (per-connection state tables), [`ports`] (servers and clients), [`dist`]
//! (weighted distributions), [`reorder`] and [`recent`] (event-time buffers).

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
// Messages travel boxed (`Vec<Box<Message>>`): a few hundred bytes each, they are moved
// through exchanges and reorder buffers by pointer, not copied.
#![allow(clippy::vec_box)]

/// A hash map with a fast, fixed (unkeyed) hasher, for the operators' hot tables: their keys
/// come from our own hashes and parsed records, and the std's SipHash cost a tenth of a run.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;
/// A hash set with a fast, fixed (reproducible) hasher.
pub type FastSet<T> = std::collections::HashSet<T, foldhash::fast::FixedState>;

/// Where an operator that holds records holds its capability with the input frontier at
/// `now`: at the oldest event time it may still emit (`oldest`), but never more than
/// `max_hold_ns` behind `now` (a record held longer comes late downstream rather than
/// holding the whole pipeline back), and never ahead of `now`.
pub(crate) fn hold_at(
    now: causeway_sources::Time,
    oldest: Option<causeway_sources::Time>,
    max_hold_ns: causeway_sources::Time,
) -> causeway_sources::Time {
    oldest.map_or(now, |o| o.clamp(now.saturating_sub(max_hold_ns), now))
}

/// Moves an operator's output capabilities up to its input frontier `now`, or drops them
/// once the input has ended (`now` is `None`): for operators that hold one capability per
/// output and nothing back.
pub(crate) fn follow_frontier(
    caps: &mut Option<Vec<timely::dataflow::operators::Capability<causeway_sources::Time>>>,
    now: Option<causeway_sources::Time>,
) {
    match (now, caps.as_mut()) {
        (Some(t), Some(held)) => {
            for c in held.iter_mut() {
                if t > *c.time() {
                    c.downgrade(&t);
                }
            }
        }
        (Some(_), None) => {}
        (None, _) => *caps = None,
    }
}

/// Moves one held capability up to the input frontier `now`, or drops it once the input has
/// ended.
pub(crate) fn follow_frontier_one(
    held: &mut Option<timely::dataflow::operators::Capability<causeway_sources::Time>>,
    now: Option<causeway_sources::Time>,
) {
    match (now, held.as_mut()) {
        (Some(t), Some(c)) => {
            if t > *c.time() {
                c.downgrade(&t);
            }
        }
        (Some(_), None) => {}
        (None, _) => *held = None,
    }
}

pub mod alert;
pub mod clock;
pub mod conn;
pub mod dist;
pub mod domain;
pub mod json;
pub mod message;
pub mod min_times;
pub mod names;
pub mod paths;
pub mod ports;
pub mod recent;
pub mod reconcile;
pub mod reorder;
pub mod rows;
pub mod stats;
pub mod tcp;

pub use alert::{Alert, AlertConfig, AlertRule, AlertRules, RuleFinding};
pub use clock::{
    Bounds, Clock, ClockConfig, ClockOffset, Correct, DelayBounds, DelaySample, MessageBounds,
};
pub use dist::{Dist, Summary};
pub use domain::Domain;
pub use message::{Message, MessageStream};
pub use names::{Names, NamesError, NodeCache, NodeName};
pub use paths::build::{
    BuildPaths, HopProblems, HopStats, InstanceMessage, PathInstance, PathPattern, PathRecord,
    PathsConfig, Rank,
};
pub use paths::link::{DelayEstimate, DelayModel, Link, LinkConfig, Linked};
pub use paths::pattern::PatternNode;
pub use paths::tasks::{TaskLink, TasksConfig};
pub use reconcile::Sighting;
pub use reconcile::calls::{CallMessages, CallsConfig, ReconcileCalls};
pub use reconcile::fold::{Fold, FoldConfig};
pub use reconcile::merge::{Merger, NatFact, Reconcile, ReconcileConfig, Reconciled};
pub use reconcile::nat::{Nat, NatConfig, NatMapping};
pub use reconcile::topology::{Homes, Placement};
pub use rows::RowsToMessages;
pub use stats::{CollectStats, OriginStats};
pub use tcp::flows::{Flow, FlowConfig, FlowEnd, Flows};
