//! `paths` (WAP5 §5.1 step 3, §5.2, §6.6): path instances built from linked messages, and the
//! path patterns they aggregate into, kept current over a sliding window and in total.
//!
//! - **Input**: [`Linked`] messages from `link`.
//! - **Output**: [`PathRecord`]s: a [`PathPattern`] for every pattern that changed, at every
//!   snapshot (`every_ns` of event time) and at the end, both over the sliding window
//!   (`window_ns`; a pattern that left the window is retracted with count 0) and in total;
//!   with `instances`, every finished [`PathInstance`].
//! - **Exchange**: all to the last worker (a path crosses every node, so its messages must
//!   meet; the sources read on the first workers).
//! - **Rules**: a message is a root if being spontaneous is probably true or worth trying
//!   (below). From each root, the instance grows through the possible children of its
//!   messages: a link of probability `q` is *probably true* (`q ≥ 0.75`: included, factor
//!   `q`), *probably false* (`q ≤ 0.25` and not the child's most likely cause: left out,
//!   factor `1 − q`), or otherwise *try-both*: two instances, one with and one without it,
//!   while the root has try-both decisions left (`try_both`), after which the child's most
//!   likely cause wins. An instance's probability is the product of its decisions (and of its
//!   root's probability of being spontaneous), times its replies' [`Linked::typical`]
//!   (beyond WAP5: a reply far later than complete tasks of its kind, with a call of its node
//!   made and answered in between, says the instance is missing that call, and the instance
//!   counts that much less; a reply as soon after a doubtful call's answer as such replies
//!   come says the call was right, and the instance counts more), at most 1. An instance is
//!   final once no child can still arrive to any message it may hold: each message's event
//!   time plus the wait learned for its receiver ([`ChildWaits`]: twice the 99.9th
//!   percentile of that node's children's delays, at most `max_delay_ns`; `max_delay_ns`
//!   until enough children were seen) plus the lateness, or once its root is
//!   `max_path_ns` old; a root is judged just before the first message at or after that
//!   time is taken in (messages are taken in event-time order), so that the outcome does not
//!   depend on how the frontier moved. Nodes are named as in the messages,
//!   client nodes `CLIENT` and ephemeral ports `*` ([`Ports`]); with `aggregate_roles`,
//!   servers by their role ([`Names::role`]).
//! - **Per pattern**: count, the roots whose likeliest instance it is (each request counted
//!   once: a try-both decision's other instance counts in `count`, not here), expected count
//!   (sum of probabilities), maximum probability, and
//!   probability-weighted distributions ([`Dist`]) of end-to-end time, of each node's delay
//!   (the receiver's time between the parent's arrival and the child's departure, both in its
//!   own clock: free of clock offsets) and of each hop's network latency (corrected
//!   timestamps). The sliding window keeps one bucket per snapshot interval.
//! - **State**: the linked messages of the last twice the longest learned wait (at most
//!   `max_delay_ns`; [`ChildWaits::keep`]) + lateness, and those still reachable from a root
//!   that is not final; freed as soon as no unfinished root precedes them. Per pattern, its totals and the window's buckets (buckets older than the window are
//!   dropped). The pattern table has two bounds: at most `max_patterns` (plus a quarter)
//!   patterns, and at most `max_pattern_bytes` held by them (a running count of what their
//!   distributions allocate, checked against a recount at every snapshot). Beyond either,
//!   those with the smallest expected counts are evicted and retracted (count 0). The byte
//!   bound is what keeps a long run flat: the distributions of the patterns kept grow as
//!   they collect values long after their number stops growing. And a pattern whose
//!   cumulative expected count is below `min_expected` when its last window bucket is
//!   dropped is retracted then (most of a long run's patterns are single improbable
//!   instances: without this the table fills towards its bounds for hours). Memory follows
//!   the message rate times the path duration, plus the bounded pattern table; never the
//!   length of the input. Under memory pressure ([`causeway_sources::shed`]) the wait for
//!   a tree's children and `max_path_ns` are at most the governor's cap.
//! - **Cost**: per root, `O(m · 2^k)` for `m` messages and `k` try-both decisions, plus
//!   building the pattern's canonical text once per instance.
//! - **Checkpoint** (`checkpoint`): at a snapshot at least `every` of wall time after the
//!   last save, and at the end, every pattern's totals and window buckets (distributions
//!   exact) are written to a file with the event time from which input remains
//!   ([`PathsCheckpoint`]); a run started from it takes them over, each pattern under a
//!   stand-in key until an instance of its shape comes (restored patterns count against
//!   `max_patterns` like the others). Saving costs one pass over the pattern table.

use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use causeway_sources::{Address, Endpoint, Time, shed};
use foldhash::fast::FixedState;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use crate::FastMap;
use crate::dist::{Dist, Summary};
use crate::message::Message;
use crate::names::Names;
use crate::paths::child_wait::ChildWaits;
use crate::paths::link::{Linked, ONE, Prob};
use crate::paths::pattern::PatternNode;
use crate::ports::Ports;
use crate::reorder::{Reorder, prefetch};
use crate::tcp::problem::Carried;

mod checkpoint;
mod finish;
mod grow;
mod state;
mod tables;
#[cfg(test)]
mod tests;

pub use checkpoint::{CHECKPOINT_VERSION, CheckpointConfig, PathsCheckpoint};
use grow::*;
use state::*;
use tables::*;

/// Links at least this likely are probably true.
const PROBABLY_TRUE: f64 = 0.75;
/// Links at most this likely (and not the most likely cause) are probably false.
const PROBABLY_FALSE: f64 = 0.25;
/// When no instance from a root holds its answer, links down to this likely are tried too
/// (with twice the try-both budget), in search of the instances that do.
const UNLIKELY: f64 = 0.05;
/// Largest instance built.
const MAX_MESSAGES: usize = 256;
/// A try-both decision is made only where both instances would be at least this likely.
const MIN_PROBABILITY: f64 = 1e-3;

/// How path patterns are ranked (WAP5 §6.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rank {
    /// Expected number of true instances (sum of instance probabilities).
    #[default]
    Expected,
    /// Raw count of instances inferred.
    Count,
    /// Expected / count: the mean probability of an instance.
    Confidence,
    /// Expected / sqrt(count).
    Sqrt,
}

impl Rank {
    /// The ranking score of a pattern with this `count` and `expected` count.
    pub fn score(self, count: u64, expected: f64) -> f64 {
        if count == 0 {
            return 0.0;
        }
        match self {
            Rank::Expected => expected,
            Rank::Count => count as f64,
            Rank::Confidence => expected / count as f64,
            Rank::Sqrt => expected / (count as f64).sqrt(),
        }
    }
}

/// Parameters of `paths`.
#[derive(Clone, Debug)]
pub struct PathsConfig {
    /// `x` of `link`: the longest a node holds a message.
    pub max_delay_ns: Time,
    /// The sources' allowed lateness.
    pub lateness_ns: Time,
    /// An instance whose root is this old is final whatever may still come.
    pub max_path_ns: Time,
    /// Try-both decisions per root.
    pub try_both: u32,
    /// Sliding window of the windowed patterns.
    pub window_ns: Time,
    /// Snapshot interval, event time.
    pub every_ns: Time,
    /// Whether to output every instance.
    pub instances: bool,
    /// Whether to name servers by role.
    pub aggregate_roles: bool,
    /// Node names and roles.
    pub names: Arc<Names>,
    /// Most patterns kept. Beyond it the patterns with the smallest expected counts are
    /// evicted (and retracted in the output), so that memory stays bounded however many rare,
    /// improbable patterns a long run infers.
    pub max_patterns: usize,
    /// Most bytes the pattern table may hold (every pattern's totals, window buckets and
    /// distributions, as `Agg::heap_bytes` counts them). Beyond it the patterns with the
    /// smallest expected counts are evicted until it holds three quarters of this, so that
    /// memory stays flat however the distributions of the patterns kept grow.
    pub max_pattern_bytes: usize,
    /// A pattern whose instances together are less likely than this (its cumulative
    /// expected count) is dropped, and retracted, once its last instance has left the
    /// window: a long run's inference noise, single improbable alternatives of try-both
    /// decisions, then no longer accumulates until `max_patterns` is reached. 0 keeps them.
    pub min_expected: f64,
    /// Saving (and restoring) the pattern totals (`--checkpoint`).
    pub checkpoint: Option<CheckpointConfig>,
}

impl Default for PathsConfig {
    fn default() -> Self {
        PathsConfig {
            max_delay_ns: 2_000_000_000,
            lateness_ns: 1_000_000_000,
            max_path_ns: 60_000_000_000,
            try_both: 4,
            window_ns: 60_000_000_000,
            every_ns: 10_000_000_000,
            instances: false,
            aggregate_roles: false,
            names: Arc::new(Names::new()),
            max_patterns: 2_000,
            max_pattern_bytes: 64 << 20,
            min_expected: 0.5,
            checkpoint: None,
        }
    }
}

/// One hop's distributions in a pattern, in the tree's preorder.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HopStats {
    /// The sender's delay before sending it (not for the root).
    pub delay: Option<Summary>,
    /// Its network latency (where both sides were observed).
    pub network: Option<Summary>,
    /// The TCP problems of the connections that carried its messages (`--emit problems`,
    /// where TCP evidence covers them).
    #[serde(default)]
    pub tcp: Option<HopProblems>,
}

/// The TCP problems of the connections that carried one hop's messages (`tcp.hops`): per
/// problem of [`Problem::CORRELATED`](crate::tcp::problem::Problem::CORRELATED), in its
/// order, weighted by the instances' probabilities.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HopProblems {
    /// Expected messages of the hop that TCP evidence covers.
    pub messages: f64,
    /// Mean share of the connection's interval spent in the problem while a message was
    /// sent (0 to 1): "rwnd_limited 62% of the time".
    pub share: [f64; 5],
    /// Expected messages sent in an interval with the problem.
    pub affected: [f64; 5],
    /// The connections (`local->peer`, the data's direction) whose messages spent the most
    /// time in problems, most first (up to four; a heavy-hitters summary, so approximate on
    /// busy hops).
    #[serde(default)]
    pub flows: Vec<String>,
}

/// A path pattern with its statistics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathPattern {
    /// The pattern id ([`PatternNode::id`]).
    pub id: String,
    /// Its shape.
    pub tree: PatternNode,
    /// Totals since the start (`true`) or over the sliding window.
    pub cumulative: bool,
    /// Event-time span covered, ns.
    pub window: (Time, Time),
    /// Instances inferred (0 retracts): every instance of a try-both decision counts, as in
    /// WAP5.
    pub count: u64,
    /// Roots whose likeliest instance has this pattern: how many requests took it, each
    /// counted once, by the most probable reading of its path.
    #[serde(default)]
    pub likeliest: u64,
    /// Expected number of true instances.
    pub expected: f64,
    /// Highest instance probability.
    pub max_probability: f64,
    /// End-to-end time.
    pub end_to_end: Summary,
    /// Per hop, in preorder.
    pub hops: Vec<HopStats>,
    /// Whether this is the final report (the input has ended).
    pub last: bool,
}

/// One message of a path instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstanceMessage {
    /// Sender, as named in the pattern.
    pub src: String,
    /// Receiver, as named in the pattern.
    pub dst: String,
    /// Receiver port, `None` when ephemeral.
    pub dst_port: Option<u16>,
    /// Sender endpoint.
    pub src_endpoint: Address,
    /// Receiver endpoint.
    pub dst_endpoint: Address,
    /// Raw send time (sender's clock).
    pub send_ns: Option<Time>,
    /// Raw receive time (receiver's clock).
    pub recv_ns: Option<Time>,
    /// Index of its parent in the instance, `None` for the root.
    pub parent: Option<usize>,
    /// Message-trace row.
    pub row: Option<u64>,
}

/// One path instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathInstance {
    /// Its pattern id.
    pub pattern: String,
    /// Product of its decisions.
    pub probability: f64,
    /// Messages in preorder (children by send time).
    pub messages: Vec<InstanceMessage>,
}

/// What `paths` outputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PathRecord {
    /// A pattern's current statistics.
    Pattern(PathPattern),
    /// A finished instance.
    Instance(PathInstance),
}

/// The `paths` operator.
pub trait BuildPaths<'scope> {
    /// Path instances and patterns from linked messages.
    fn paths(self, config: PathsConfig) -> Stream<'scope, Time, Vec<PathRecord>>;
}

impl<'scope> BuildPaths<'scope> for Stream<'scope, Time, Vec<Linked>> {
    fn paths(self, config: PathsConfig) -> Stream<'scope, Time, Vec<PathRecord>> {
        // The last worker: the sources read on the first ones, so that a single input and
        // the path builder do not share one thread.
        let last = self.scope().peers().saturating_sub(1) as u64;
        let here = self.scope().index() as u64;
        self.unary_frontier(
            Exchange::new(move |_: &Linked| last),
            "paths",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut paths = Paths {
                    config,
                    entries: Slots::default(),
                    orphans: FastMap::default(),
                    pending: BTreeSet::new(),
                    pending_roots: BTreeSet::new(),
                    ports: Ports::default(),
                    patterns: FastMap::default(),
                    labels: RefCell::new(Labels::default()),
                    evicted: Vec::new(),
                    evictions: 0,
                    noise: 0,
                    table_bytes: 0,
                    next_snapshot: None,
                    last_expiry: 0,
                    orphans_dropped: 0,
                    cut: 0,
                    checkpointer: None,
                    restored: FastMap::default(),
                    resumed_ns: 0,
                    newest_ns: 0,
                    reach_scratch: Default::default(),
                    waits: ChildWaits::default(),
                };
                if here == last {
                    if let Some(c) = paths.config.checkpoint.clone() {
                        if let Some(saved) = &c.restore {
                            paths.restore(saved);
                        }
                        paths.checkpointer = Some((c, Instant::now()));
                    }
                }
                let mut waiting: Reorder<Linked> = Reorder::default();
                move |(input, frontier), output| {
                    input.for_each(|_cap, batch| {
                        for l in batch.drain(..) {
                            waiting.push(l.message.event_ns, l.id, l);
                        }
                    });
                    let Some(cap) = held.as_mut() else { return };
                    let now = frontier.frontier().iter().next().copied();
                    let mut out = Vec::new();
                    loop {
                        // Snapshots fall between the messages they cover; a root is finished
                        // just before the first message at or after its ready time, so that
                        // what it sees (messages, port evidence) is the same however the
                        // frontier moved.
                        let next_msg = waiting.first().map(|(t, _)| t);
                        let snap = paths.next_snapshot;
                        let msg_ready = next_msg.filter(|t| now.is_none_or(|n| *t < n));
                        if let Some(t) = msg_ready {
                            if paths.pending.first().is_some_and(|(r, _, _)| *r <= t)
                                && snap.is_none_or(|s| s > t)
                            {
                                paths.finish_roots(Some(t.saturating_add(1)), &mut out);
                            }
                        }
                        match (msg_ready, snap) {
                            (Some(t), Some(s)) if s <= t => {
                                paths.finish_roots(Some(s), &mut out);
                                paths.snapshot(s, false, &mut out);
                                paths.next_snapshot = Some(s + paths.config.every_ns);
                            }
                            (Some(_), _) => {
                                if let Some((_, _, l)) = waiting.pop_touching(None) {
                                    paths.insert(l);
                                }
                            }
                            (None, Some(s)) if now.is_some_and(|n| s < n) => {
                                paths.finish_roots(Some(s), &mut out);
                                paths.snapshot(s, false, &mut out);
                                paths.next_snapshot = Some(s + paths.config.every_ns);
                            }
                            _ => break,
                        }
                    }
                    match now {
                        Some(n) => {
                            paths.finish_roots(Some(n), &mut out);
                            // Under memory pressure, trees scheduled for judging within the
                            // wait the cap takes away are judged now (`shed`).
                            let shift = paths.unshed_settle() - paths.settle();
                            if shift > 0 {
                                let waiting = paths.pending_roots.len();
                                paths.finish_roots(Some(n.saturating_add(shift)), &mut out);
                                let judged = waiting.saturating_sub(paths.pending_roots.len());
                                shed::note(shed::Stage::Paths, judged as u64);
                            }
                            paths.expire(n);
                        }
                        None => {
                            paths.finish_roots(None, &mut out);
                            let end = paths.next_snapshot.unwrap_or(0);
                            paths.snapshot(end, true, &mut out);
                        }
                    }
                    if !out.is_empty() {
                        output.session(&*cap).give_iterator(out.into_iter());
                    }
                    match now {
                        Some(t) if t > *cap.time() => cap.downgrade(&t),
                        Some(_) => {}
                        None => held = None,
                    }
                }
            },
        )
    }
}
