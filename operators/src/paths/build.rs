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
//! - **Per pattern**: count, expected count (sum of probabilities), maximum probability, and
//!   probability-weighted distributions ([`Dist`]) of end-to-end time, of each node's delay
//!   (the receiver's time between the parent's arrival and the child's departure, both in its
//!   own clock: free of clock offsets) and of each hop's network latency (corrected
//!   timestamps). The sliding window keeps one bucket per snapshot interval.
//! - **State**: the linked messages of the last `max_delay_ns` + lateness, and those still
//!   reachable from a root that is not final; freed as soon as no unfinished root precedes
//!   them. Per pattern, its totals and the window's buckets (buckets older than the window are
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

use causeway_sources::{Address, Time, shed};
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
use crate::recent::partition_point_from_back;
use crate::reorder::{Reorder, prefetch};

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

/// Where and how often `paths` saves its pattern state (`--checkpoint`).
#[derive(Clone, Debug)]
pub struct CheckpointConfig {
    /// The file; written whole to a temporary file beside it, then renamed over it.
    pub path: PathBuf,
    /// Wall-clock time between saves; the end of a run (or a stop) always saves.
    pub every: Duration,
    /// What an earlier run saved, to start from.
    pub restore: Option<Arc<PathsCheckpoint>>,
}

/// What `paths` saves: every pattern's totals and sliding-window buckets (with their full
/// distributions), and the event time from which input remains to be read.
#[derive(Debug, Serialize, Deserialize)]
pub struct PathsCheckpoint {
    /// Format version ([`CHECKPOINT_VERSION`]).
    pub version: u32,
    /// Input before this event time is in the totals: a resumed run skips it.
    pub resume_ns: Time,
    /// Whether it was saved at the end of a run (then exact up to `resume_ns`). A periodic
    /// save leaves out the instances still in flight (those finishing within `--max-delay`
    /// plus the lateness of it); a run resumed from it misses them.
    pub complete: bool,
    patterns: Vec<SavedPattern>,
}

/// Version of the checkpoint format.
pub const CHECKPOINT_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct SavedPattern {
    id: String,
    tree: PatternNode,
    first_ns: Time,
    total: Stats,
    buckets: Vec<(Time, Stats)>,
}

#[derive(Serialize)]
struct SavedPatternRef<'a> {
    id: &'a str,
    tree: &'a PatternNode,
    first_ns: Time,
    total: &'a Stats,
    buckets: &'a VecDeque<(Time, Stats)>,
}

#[derive(Serialize)]
struct PathsCheckpointRef<'a> {
    version: u32,
    resume_ns: Time,
    complete: bool,
    patterns: Vec<SavedPatternRef<'a>>,
}

impl PathsCheckpoint {
    /// Reads a checkpoint; `Ok(None)` when there is none yet.
    pub fn load(path: &Path) -> Result<Option<PathsCheckpoint>, String> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let c: PathsCheckpoint = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{}: not a checkpoint of this version ({e}, line {} column {})",
                path.display(),
                e.line(),
                e.column()
            )
        })?;
        if c.version != CHECKPOINT_VERSION {
            return Err(format!(
                "{}: checkpoint version {}, this build reads {CHECKPOINT_VERSION}",
                path.display(),
                c.version
            ));
        }
        Ok(Some(c))
    }

    /// Patterns saved.
    pub fn patterns(&self) -> usize {
        self.patterns.len()
    }
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
    /// Instances inferred (0 retracts).
    pub count: u64,
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

struct Entry {
    /// The message's id ([`crate::paths::link::message_id`]).
    id: u64,
    m: Box<Message>,
    /// The message's event time (read while deciding whether a root is ready, without
    /// touching the message).
    event_ns: Time,
    /// The children's slots ([`Slots`]) and link probabilities (inline: most messages have
    /// one or two, and walking a tree then reads no other allocation).
    children: SmallVec<[(u64, Prob); 2]>,
    /// The most likely parent's id.
    best: Option<u64>,
    spontaneous: Prob,
    /// How typical its delay is, for a reply ([`crate::paths::link::Linked::typical`]).
    typical: Prob,
    /// [`node_key`](crate::paths::link::node_key)s of the sender and receiver.
    keys: (u64, u64),
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Stats {
    count: u64,
    expected: f64,
    max_p: f64,
    e2e: Dist,
    delay: Vec<Dist>,
    network: Vec<Dist>,
}

impl Stats {
    fn new(n: usize) -> Stats {
        Stats {
            delay: vec![Dist::default(); n],
            network: vec![Dist::default(); n],
            ..Stats::default()
        }
    }

    fn merge(&mut self, o: &Stats) {
        self.count += o.count;
        self.expected += o.expected;
        self.max_p = self.max_p.max(o.max_p);
        self.e2e.merge(&o.e2e);
        for (a, b) in self.delay.iter_mut().zip(&o.delay) {
            a.merge(b);
        }
        for (a, b) in self.network.iter_mut().zip(&o.network) {
            a.merge(b);
        }
    }

    /// Bytes this holds on the heap. O(hops).
    fn heap_bytes(&self) -> usize {
        (self.delay.capacity() + self.network.capacity()) * std::mem::size_of::<Dist>()
            + self.e2e.heap_bytes()
            + self
                .delay
                .iter()
                .chain(&self.network)
                .map(Dist::heap_bytes)
                .sum::<usize>()
    }

    fn hops(&self) -> Vec<HopStats> {
        let opt = |d: &Dist| (!d.is_empty()).then(|| d.summary());
        self.delay
            .iter()
            .zip(&self.network)
            .map(|(d, n)| HopStats {
                delay: opt(d),
                network: opt(n),
            })
            .collect()
    }
}

struct Agg {
    /// The pattern as [`Built::shape`] has it (empty for a restored pattern until an
    /// instance of it comes).
    shape: Vec<Hop>,
    /// Its public id and tree, made when first needed (a snapshot, an instance, a
    /// checkpoint): on a busy system most patterns are single improbable instances, evicted
    /// before any snapshot, and naming them was most of their cost.
    name: Option<Name>,
    total: Stats,
    first_ns: Time,
    buckets: VecDeque<(Time, Stats)>,
    touched: bool,
    /// Whether its cumulative totals were reported.
    reported: bool,
    /// Whether the last windowed report had a count.
    shown: bool,
}

/// A pattern's public id ([`PatternNode::id`]) and tree.
struct Name {
    id: String,
    tree: PatternNode,
}

impl Name {
    /// The name of a preorder `shape`.
    fn of(shape: &[Hop], labels: &Labels) -> Name {
        fn grow(shape: &[Hop], at: &mut usize, labels: &Labels) -> PatternNode {
            let h = shape[*at];
            *at += 1;
            let children = (0..h.children).map(|_| grow(shape, at, labels)).collect();
            PatternNode {
                src: labels.name(h.src).to_owned(),
                dst: labels.name(h.dst).to_owned(),
                dst_port: h.port,
                children,
            }
        }
        let tree = grow(shape, &mut 0, labels);
        Name {
            id: tree.id(),
            tree,
        }
    }

    fn heap_bytes(&self) -> usize {
        self.id.capacity() + self.tree.len() * (std::mem::size_of::<PatternNode>() + 16)
    }
}

impl Agg {
    /// The name, made now if it was not yet ([`Agg::name`]). Returns how many bytes that
    /// added to [`Agg::heap_bytes`].
    fn name(&mut self, labels: &Labels) -> usize {
        if self.name.is_some() {
            return 0;
        }
        let name = Name::of(&self.shape, labels);
        let bytes = name.heap_bytes();
        self.name = Some(name);
        bytes
    }

    /// The public id; empty until named.
    fn id(&self) -> &str {
        self.name.as_ref().map_or("", |n| n.id.as_str())
    }

    /// Bytes this pattern holds, the table's slot included: what `max_pattern_bytes` counts.
    /// O(buckets · hops).
    fn heap_bytes(&self) -> usize {
        std::mem::size_of::<(u64, Agg)>()
            + self.shape.capacity() * std::mem::size_of::<Hop>()
            + self.name.as_ref().map_or(0, Name::heap_bytes)
            + self.total.heap_bytes()
            + self.buckets.capacity() * std::mem::size_of::<(Time, Stats)>()
            + self
                .buckets
                .iter()
                .map(|(_, s)| s.heap_bytes())
                .sum::<usize>()
    }
}

/// One message of an instance as its pattern has it: interned labels, the receiver's port
/// when fixed, and how many children it has (preorder, so the tree follows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Hop {
    src: u32,
    dst: u32,
    port: Option<u16>,
    children: u32,
}

/// The label `CLIENT` (WAP5 §2.5.1), interned first.
const CLIENT: u32 = 0;

/// Interned node labels.
struct Labels {
    ids: FastMap<String, u32>,
    names: Vec<String>,
}

impl Default for Labels {
    fn default() -> Self {
        let mut l = Labels {
            ids: FastMap::default(),
            names: Vec::new(),
        };
        l.intern("CLIENT");
        l
    }
}

impl Labels {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }

    fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("?", String::as_str)
    }
}

/// One finished instance, before aggregation.
struct Built {
    /// Hash of `shape`: the pattern's key.
    key: u64,
    shape: Vec<Hop>,
    messages: Vec<InstanceMessage>,
    probability: f64,
    e2e: Option<i64>,
    /// Per preorder position: (delay, network) in ns.
    hops: Vec<(Option<i64>, Option<i64>)>,
}

/// One instance as it is built: its messages with their parents' positions, and its
/// probability.
type Hypothesis = (Vec<(u64, Option<usize>)>, f64);

/// The messages `paths` holds, in the order they were inserted (event time, then id), each
/// at a slot number that counts the insertions: a lookup by slot is an index, not a hash, and
/// the oldest leave from the front.
#[derive(Default)]
struct Slots {
    entries: VecDeque<Entry>,
    /// Slot of `entries[0]`.
    base: u64,
    /// Slot of each message by id, in two generations: ids go into `by_id`; once every
    /// entry `old_ids` names has left, it is cleared (its capacity kept) and the two swap.
    /// Removing each id as its entry left cost a cache miss per message.
    by_id: FastMap<u64, u64>,
    old_ids: FastMap<u64, u64>,
    /// The first slot not in `old_ids`.
    old_end: u64,
}

impl Slots {
    fn get(&self, slot: &u64) -> Option<&Entry> {
        slot.checked_sub(self.base)
            .and_then(|i| self.entries.get(usize::try_from(i).ok()?))
    }

    fn get_mut(&mut self, slot: &u64) -> Option<&mut Entry> {
        slot.checked_sub(self.base)
            .and_then(|i| self.entries.get_mut(usize::try_from(i).ok()?))
    }

    /// The slot of message `id`, if it was pushed and its slot may still be held (it may
    /// have left: [`Slots::get`] says).
    fn slot(&self, id: u64) -> Option<u64> {
        self.by_id
            .get(&id)
            .or_else(|| self.old_ids.get(&id))
            .copied()
    }

    fn push(&mut self, e: Entry) -> u64 {
        let slot = self.base + self.entries.len() as u64;
        self.by_id.insert(e.id, slot);
        self.entries.push_back(e);
        slot
    }

    fn front(&self) -> Option<&Entry> {
        self.entries.front()
    }

    fn pop_front(&mut self) {
        if self.entries.pop_front().is_some() {
            self.base += 1;
            if self.base >= self.old_end {
                self.old_ids.clear();
                std::mem::swap(&mut self.by_id, &mut self.old_ids);
                self.old_end = self.base + self.entries.len() as u64;
            }
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// How far ahead of the root being judged [`Paths::prefetch_roots`] fetches a root's entry,
/// and its message and children's entries.
const PREFETCH_FAR: usize = 8;
const PREFETCH_NEAR: usize = 4;

/// The state of the `paths` operator.
struct Paths {
    config: PathsConfig,
    entries: Slots,
    /// Links to parents not inserted yet: parent id to (child's event time, child's slot,
    /// probability).
    orphans: FastMap<u64, Vec<(Time, u64, Prob)>>,
    /// Roots by the time to judge them, then id, with their slots, in order. They come
    /// nearly in order (a root's event time plus a constant, or a later look again), so a
    /// sorted deque filled from the back costs less than a heap.
    pending: VecDeque<(Time, u64, u64)>,
    /// Roots not judged yet by event time, then id.
    pending_roots: BTreeSet<(Time, u64)>,
    ports: Ports,
    /// Patterns by the hash of their shape.
    patterns: FastMap<u64, Agg>,
    /// Node labels in patterns.
    labels: RefCell<Labels>,
    /// Evicted patterns that were reported: retracted at the next snapshot.
    evicted: Vec<(u64, String, PatternNode, bool, bool)>,
    /// Patterns evicted so far.
    evictions: u64,
    /// Patterns dropped so far as below `min_expected` once out of the window.
    noise: u64,
    /// Bytes the pattern table holds ([`Agg::heap_bytes`] summed).
    table_bytes: usize,
    next_snapshot: Option<Time>,
    last_expiry: Time,
    /// Links dropped because their parent never came or was already freed.
    orphans_dropped: u64,
    /// Instances cut at [`MAX_MESSAGES`] (what is past the cut is in no instance).
    cut: u64,
    /// Checkpoint settings and when it was last saved.
    checkpointer: Option<(CheckpointConfig, Instant)>,
    /// Restored patterns not seen again yet: id to their stand-in key.
    restored: FastMap<String, u64>,
    /// Where the restored run resumed, and the newest message inserted since.
    resumed_ns: Time,
    newest_ns: Time,
    /// Scratch of [`Paths::settled_at`]: the messages seen, and those to visit.
    reach_scratch: (Vec<u64>, Vec<u64>),
    /// How long a message into each node may still get a child, learned.
    waits: ChildWaits,
}

impl Paths {
    /// Takes over the patterns of a checkpoint. Each waits under a stand-in key until an
    /// instance of its shape comes, which moves it to its real key.
    fn restore(&mut self, c: &PathsCheckpoint) {
        self.resumed_ns = c.resume_ns;
        for (i, p) in c.patterns.iter().enumerate() {
            let key = u64::MAX - i as u64;
            self.restored.insert(p.id.clone(), key);
            let agg = Agg {
                shape: Vec::new(),
                name: Some(Name {
                    id: p.id.clone(),
                    tree: p.tree.clone(),
                }),
                total: p.total.clone(),
                first_ns: p.first_ns,
                buckets: p.buckets.iter().cloned().collect(),
                touched: true,
                reported: false,
                shown: false,
            };
            self.table_bytes += agg.heap_bytes();
            self.patterns.insert(key, agg);
        }
    }

    /// Saves a checkpoint when one is due (always at the end).
    fn save(&mut self, at: Time, last: bool) {
        let Some((config, since)) = &mut self.checkpointer else {
            return;
        };
        if !last && since.elapsed() < config.every {
            return;
        }
        *since = Instant::now();
        let resume_ns = if last {
            self.newest_ns.saturating_add(1)
        } else {
            at
        }
        .max(self.resumed_ns);
        // Every pattern was named by the snapshot that saves it.
        let mut patterns: Vec<SavedPatternRef<'_>> = self
            .patterns
            .values()
            .filter_map(|a| Some((a, a.name.as_ref()?)))
            .map(|(a, name)| SavedPatternRef {
                id: &name.id,
                tree: &name.tree,
                first_ns: a.first_ns,
                total: &a.total,
                buckets: &a.buckets,
            })
            .collect();
        patterns.sort_by(|a, b| a.id.cmp(b.id));
        let saved = PathsCheckpointRef {
            version: CHECKPOINT_VERSION,
            resume_ns,
            complete: last,
            patterns,
        };
        let path = config.path.clone();
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        let result = serde_json::to_vec(&saved)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = result {
            tracing::warn!("checkpoint {}: not saved: {e}", path.display());
        }
    }

    /// Schedules the root `(root_id, slot)` to be judged at `ready`.
    fn judge_at(&mut self, ready: Time, root_id: u64, slot: u64) {
        let key = (ready, root_id, slot);
        let i = partition_point_from_back(&self.pending, |e| *e <= key);
        self.pending.insert(i, key);
    }

    /// How long after its newest message a path tree may still grow: the longest a node
    /// holds a message and the lateness; under memory pressure at most the cap (`shed`).
    fn settle(&self) -> Time {
        shed::capped(self.unshed_settle())
    }

    /// How long after a message into `node` a child may still come: what `node`'s children
    /// have taken ([`ChildWaits`], at most `max_delay_ns`) and the lateness; under memory
    /// pressure at most the cap.
    fn wait_after(&self, node: u64) -> Time {
        shed::capped(
            self.waits
                .wait(node, self.config.max_delay_ns)
                .saturating_add(self.config.lateness_ns),
        )
    }

    /// [`Self::settle`] without the cap.
    fn unshed_settle(&self) -> Time {
        self.config
            .max_delay_ns
            .saturating_add(self.config.lateness_ns)
    }

    /// The interned label of `node` when it is not a client: its name, or its role.
    fn name_label(&self, node: &str) -> u32 {
        let name = if self.config.aggregate_roles {
            self.config.names.role(node)
        } else {
            node
        };
        self.labels.borrow_mut().intern(name)
    }

    fn insert(&mut self, l: Linked) {
        let t = l.message.event_ns;
        self.newest_ns = self.newest_ns.max(t);
        let keys = l.keys;
        self.ports.observe(
            &l.message.src_endpoint,
            &l.message.dst_endpoint,
            keys.0,
            keys.1,
            t,
        );
        let slot = self.entries.base + self.entries.len() as u64;
        self.waits.arrival(keys.1);
        for &(p, q) in &l.parents {
            match self
                .entries
                .slot(p)
                .and_then(|ps| self.entries.get_mut(&ps))
            {
                Some(e) => {
                    e.children.push((slot, q));
                    if l.best == Some(p) {
                        self.waits.child(e.keys.1, t.saturating_sub(e.event_ns));
                    }
                }
                // The parent's event time (its sender's clock, coarsely aligned) may fall
                // after the child's: keep the link until the parent comes.
                None => self.orphans.entry(p).or_default().push((t, slot, q)),
            }
        }
        let adopted: SmallVec<[(u64, Prob); 2]> = (!self.orphans.is_empty())
            .then(|| self.orphans.remove(&l.id))
            .flatten()
            .map(|v| v.into_iter().map(|(_, c, q)| (c, q)).collect())
            .unwrap_or_default();
        let s = f64::from(l.spontaneous) / f64::from(ONE);
        if decide(s, l.best.is_none()) != Decision::False {
            self.judge_at(t.saturating_add(self.wait_after(keys.1)), l.id, slot);
            self.pending_roots.insert((t, l.id));
        }
        self.entries.push(Entry {
            id: l.id,
            event_ns: t,
            m: l.message,
            children: adopted,
            best: l.best,
            spontaneous: l.spontaneous,
            typical: l.typical,
            keys,
        });
        self.next_snapshot
            .get_or_insert((t / self.config.every_ns + 1) * self.config.every_ns);
    }

    /// When no child can come any more to the messages any instance from `root` may hold:
    /// the latest of their event times plus [`Self::wait_after`] their receivers. The
    /// messages are those reachable by links that are not probably false (a superset of
    /// every instance, found without enumerating them; at most `4 * MAX_MESSAGES` are
    /// visited).
    fn settled_at(&mut self, root: u64) -> Time {
        let Some(r) = self.entries.get(&root) else {
            return 0;
        };
        let mut newest = r.event_ns.saturating_add(self.wait_after(r.keys.1));
        let (mut seen, mut stack) = std::mem::take(&mut self.reach_scratch);
        seen.clear();
        stack.clear();
        seen.push(root);
        stack.push(root);
        while let Some(slot) = stack.pop() {
            let Some(e) = self.entries.get(&slot) else {
                continue;
            };
            for &(c, q) in &e.children {
                let Some(ce) = self.entries.get(&c) else {
                    continue;
                };
                let q = f64::from(q) / f64::from(ONE);
                if decide(q, ce.best == Some(e.id)) == Decision::False
                    || seen.contains(&c)
                    || seen.len() >= 4 * MAX_MESSAGES
                {
                    continue;
                }
                seen.push(c);
                newest = newest.max(ce.event_ns.saturating_add(self.wait_after(ce.keys.1)));
                stack.push(c);
            }
        }
        self.reach_scratch = (seen, stack);
        newest
    }

    /// The instances from `root`: (messages with parent positions, probability).
    /// Links at most `probably_false` likely (and not the most likely cause) are left out;
    /// `budget` try-both decisions are made.
    fn enumerate(&self, root: u64, probably_false: f64, budget: u32) -> Vec<Hypothesis> {
        struct Partial {
            msgs: Vec<(u64, Option<usize>)>,
            i: usize,
            j: usize,
            prob: f64,
            budget: u32,
        }
        let Some(r) = self.entries.get(&root) else {
            return Vec::new();
        };
        let s = f64::from(r.spontaneous) / f64::from(ONE);
        let mut out = Vec::new();
        let mut stack = vec![Partial {
            msgs: {
                let mut v = Vec::with_capacity(32);
                v.push((root, None));
                v
            },
            i: 0,
            j: 0,
            prob: s,
            budget,
        }];
        while let Some(mut p) = stack.pop() {
            loop {
                if p.i >= p.msgs.len() || p.msgs.len() >= MAX_MESSAGES {
                    out.push((p.msgs, p.prob));
                    break;
                }
                let id = p.msgs[p.i].0;
                let Some(e) = self.entries.get(&id) else {
                    p.i += 1;
                    p.j = 0;
                    continue;
                };
                let Some(&(c, q)) = e.children.get(p.j) else {
                    p.i += 1;
                    p.j = 0;
                    continue;
                };
                p.j += 1;
                if p.msgs.iter().any(|m| m.0 == c) {
                    continue;
                }
                let Some(ce) = self.entries.get(&c) else {
                    continue;
                };
                let q = f64::from(q) / f64::from(ONE);
                let is_best = ce.best == Some(e.id);
                let parent = Some(p.i);
                match decide_below(q, is_best, probably_false) {
                    Decision::True => {
                        p.prob *= q;
                        p.msgs.push((c, parent));
                    }
                    Decision::False => p.prob *= 1.0 - q,
                    // A branch less likely than `MIN_PROBABILITY` is not split off: every
                    // message stays in the instances of its most likely cause.
                    Decision::Both
                        if p.budget > 0 && p.prob * q.min(1.0 - q) >= MIN_PROBABILITY =>
                    {
                        p.budget -= 1;
                        stack.push(Partial {
                            msgs: p.msgs.clone(),
                            i: p.i,
                            j: p.j,
                            prob: p.prob * (1.0 - q),
                            budget: p.budget,
                        });
                        p.prob *= q;
                        p.msgs.push((c, parent));
                    }
                    Decision::Both => {
                        if is_best {
                            p.prob *= q;
                            p.msgs.push((c, parent));
                        } else {
                            p.prob *= 1.0 - q;
                        }
                    }
                }
            }
        }
        out
    }

    /// Beyond WAP5: a request is answered on its own connection, and its answer is caused by
    /// the request or by what the request led to; so of the instances from a root, those that
    /// hold the root's answer (a message back from the root's receiver to its sender on the
    /// same connection) are the possible ones. When some do and some do not, the others are
    /// dropped and the probabilities of the rest scaled so that the root's total stays as it
    /// was (conditioning on the answer being in the tree). When none holds it (one-way
    /// messages, or an answer not linked within the try-both budget), nothing changes.
    /// Returns whether some instance holds the answer.
    fn condition_on_answer(&self, root: u64, instances: &mut Vec<Hypothesis>) -> bool {
        let Some(r) = self.entries.get(&root) else {
            return false;
        };
        let answers = |h: &Hypothesis| {
            h.0.iter().skip(1).any(|(id, _)| {
                self.entries.get(id).is_some_and(|e| {
                    e.m.src_endpoint == r.m.dst_endpoint && e.m.dst_endpoint == r.m.src_endpoint
                })
            })
        };
        let closed: Vec<bool> = instances.iter().map(answers).collect();
        let closed_mass: f64 = instances
            .iter()
            .zip(&closed)
            .filter(|(_, c)| **c)
            .map(|(h, _)| h.1)
            .sum();
        if closed_mass <= 0.0 {
            return false;
        }
        if closed.iter().all(|c| *c) {
            return true;
        }
        let total: f64 = instances.iter().map(|h| h.1).sum();
        let scale = total / closed_mass;
        let mut keep = closed.into_iter();
        instances.retain(|_| keep.next().unwrap_or(false));
        for h in instances.iter_mut() {
            h.1 *= scale;
        }
        true
    }

    /// The message of `e` as its pattern has it: sender and receiver labels (`CLIENT`, a
    /// role, or a name, interned) and the receiver's port when fixed.
    fn hop_labels(&self, e: &Entry) -> (u32, u32, Option<u16>) {
        let m = &e.m;
        let (src_fixed, dst_fixed) = self.ports.fixed_ends(&m.src_endpoint, &m.dst_endpoint);
        // A node's name (or role) is interned when it is not a client: clients are many
        // and come and go; their names are never in a pattern.
        let label = |end: &Address, key: u64, fixed: bool, node: &str| {
            if self.ports.client_given(end, key, fixed) {
                CLIENT
            } else {
                self.name_label(node)
            }
        };
        let port = match &m.dst_endpoint {
            Address::Endpoint(d) if dst_fixed => Some(d.port),
            _ => None,
        };
        (
            label(&m.src_endpoint, e.keys.0, src_fixed, &m.src),
            label(&m.dst_endpoint, e.keys.1, dst_fixed, &m.dst),
            port,
        )
    }

    /// Builds one instance; `hops` caches [`Paths::hop_labels`] over the instances of one
    /// root, which share most of their messages.
    fn build(
        &self,
        msgs: &[(u64, Option<usize>)],
        probability: f64,
        hop_cache: &mut FastMap<u64, (u32, u32, Option<u16>)>,
    ) -> Option<Built> {
        let entries: Vec<&Entry> = msgs
            .iter()
            .map(|(id, _)| self.entries.get(id))
            .collect::<Option<_>>()?;
        // Beyond WAP5: an instance whose replies come far later than their kind's do is
        // missing a message (a call linked to another task); it counts only as much as its
        // replies are typical (the product of their `typical`). Applied here, after the root's
        // instances were conditioned on holding its answer, so that its other instances do
        // not take over this one's weight.
        let mut probability = probability;
        for e in entries.iter().skip(1).filter(|e| e.typical != ONE) {
            probability *= f64::from(e.typical) / f64::from(ONE);
        }
        // A reply whose gap is evidence for a call in doubt raises its instances (`typical`
        // above ONE), never beyond certainty.
        let probability = probability.min(1.0);
        let n = msgs.len();
        // Children by (parent, send time, position), in one sorted list: a parent's children
        // are the range `kids[start[p]..start[p + 1]]`, in send order.
        let mut kids: Vec<(usize, Time, usize)> = msgs
            .iter()
            .enumerate()
            .filter_map(|(i, (_, p))| {
                let m = &entries[i].m;
                p.map(|p| (p, m.send_ns.or(m.recv_ns).unwrap_or(m.event_ns), i))
            })
            .collect();
        kids.sort_unstable();
        let mut start = vec![0usize; n + 1];
        for &(p, _, _) in &kids {
            start[p + 1] += 1;
        }
        for k in 0..n {
            start[k + 1] += start[k];
        }
        let children = |p: usize| &kids[start[p]..start[p + 1]];
        // Preorder.
        let mut order: Vec<(usize, Option<usize>)> = Vec::with_capacity(n);
        let mut stack = Vec::with_capacity(n);
        stack.push((0usize, None));
        while let Some((i, pp)) = stack.pop() {
            let pos = order.len();
            order.push((i, pp));
            for &(_, _, c) in children(i).iter().rev() {
                stack.push((c, Some(pos)));
            }
        }
        let mut shape = Vec::with_capacity(n);
        let mut hops = Vec::with_capacity(n);
        let (mut first, mut last) = (i64::MAX, i64::MIN);
        for &(i, pp) in &order {
            let m = &entries[i].m;
            let (src, dst, port) = *hop_cache
                .entry(msgs[i].0)
                .or_insert_with(|| self.hop_labels(entries[i]));
            shape.push(Hop {
                src,
                dst,
                port,
                children: children(i).len() as u32,
            });
            let send = m.send_corrected_ns.or(m.send_ns);
            let recv = m.recv_corrected_ns.or(m.recv_ns);
            if let Some(s) = send {
                first = first.min(s as i64);
                last = last.max(s as i64);
            }
            if let Some(r) = recv {
                first = first.min(r as i64);
                last = last.max(r as i64);
            }
            let network = match (m.send_corrected_ns, m.recv_corrected_ns) {
                (Some(s), Some(r)) => Some(r as i64 - s as i64),
                _ => match (m.send_ns, m.recv_ns, &m.send_domain, &m.recv_domain) {
                    (Some(s), Some(r), Some(a), Some(b)) if a == b => Some(r as i64 - s as i64),
                    _ => None,
                },
            };
            let delay = pp.and_then(|pp| {
                let parent = &entries[order[pp].0].m;
                match (m.send_ns, parent.recv_ns) {
                    (Some(s), Some(r)) => Some(s as i64 - r as i64),
                    _ => None,
                }
            });
            hops.push((delay, network));
        }
        let messages = if self.config.instances {
            let labels = self.labels.borrow();
            order
                .iter()
                .zip(&shape)
                .map(|(&(i, pp), hop)| {
                    let m = &entries[i].m;
                    InstanceMessage {
                        src: labels.name(hop.src).to_owned(),
                        dst: labels.name(hop.dst).to_owned(),
                        dst_port: hop.port,
                        src_endpoint: m.src_endpoint.clone(),
                        dst_endpoint: m.dst_endpoint.clone(),
                        send_ns: m.send_ns,
                        recv_ns: m.recv_ns,
                        parent: pp,
                        row: m.row,
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        Some(Built {
            key: FixedState::with_seed(0x7061_7468).hash_one(&shape),
            shape,
            messages,
            probability,
            e2e: (first <= last).then_some(last - first),
            hops,
        })
    }

    /// Names every pattern not named yet. O(patterns), and O(hops) for each one named.
    fn name_all(&mut self) {
        let labels = self.labels.borrow();
        for agg in self.patterns.values_mut() {
            self.table_bytes += agg.name(&labels);
        }
    }

    /// Adds an instance to its pattern; returns the pattern's id when instances are emitted.
    fn aggregate(&mut self, root_ns: Time, b: &Built) -> Option<String> {
        let cap = self.config.max_patterns.max(1);
        let over_count =
            self.patterns.len() >= cap + cap / 4 && !self.patterns.contains_key(&b.key);
        if over_count || self.table_bytes > self.config.max_pattern_bytes {
            self.evict(cap, self.config.max_pattern_bytes / 4 * 3);
        }
        let n = b.hops.len();
        if !self.patterns.contains_key(&b.key) && !self.restored.is_empty() {
            let id = Name::of(&b.shape, &self.labels.borrow()).id;
            if let Some(mut agg) = self
                .restored
                .remove(&id)
                .and_then(|k| self.patterns.remove(&k))
            {
                self.table_bytes += b.shape.len() * std::mem::size_of::<Hop>();
                agg.shape = b.shape.clone();
                agg.shape.shrink_to_fit();
                self.patterns.insert(b.key, agg);
            }
        }
        if !self.patterns.contains_key(&b.key) {
            let mut shape = b.shape.clone();
            shape.shrink_to_fit();
            let agg = Agg {
                shape,
                name: None,
                total: Stats::new(n),
                first_ns: root_ns,
                buckets: VecDeque::new(),
                touched: false,
                reported: false,
                shown: false,
            };
            self.table_bytes += agg.heap_bytes();
            self.patterns.insert(b.key, agg);
        }
        let every = self.config.every_ns;
        let bucket = root_ns - root_ns % every;
        let agg = self.patterns.get_mut(&b.key)?;
        // How many bytes the table grows by, counted as it grows: O(hops), not the
        // O(buckets · hops) of a recount.
        let mut grown: isize = 0;
        agg.touched = true;
        agg.first_ns = agg.first_ns.min(root_ns);
        let pos = agg.buckets.iter().rposition(|(s, _)| *s == bucket);
        let idx = match pos {
            Some(i) => i,
            None => {
                let at = agg.buckets.partition_point(|(s, _)| *s < bucket);
                let capacity = agg.buckets.capacity();
                let stats = Stats::new(n);
                grown += stats.heap_bytes() as isize;
                agg.buckets.insert(at, (bucket, stats));
                grown += ((agg.buckets.capacity() - capacity)
                    * std::mem::size_of::<(Time, Stats)>()) as isize;
                at
            }
        };
        let w = b.probability;
        for stats in [&mut agg.total, &mut agg.buckets[idx].1] {
            stats.count += 1;
            stats.expected += w;
            stats.max_p = stats.max_p.max(w);
            if let Some(e) = b.e2e {
                grown += stats.e2e.add(e, w);
            }
            for (k, (d, net)) in b.hops.iter().enumerate() {
                if let Some(d) = d {
                    grown += stats.delay[k].add(*d, w);
                }
                if let Some(x) = net {
                    grown += stats.network[k].add(*x, w);
                }
            }
        }
        if self.config.instances {
            grown += agg.name(&self.labels.borrow()) as isize;
        }
        self.table_bytes = self.table_bytes.saturating_add_signed(grown);
        self.config.instances.then(|| agg.id().to_owned())
    }

    /// Evicts the patterns with the smallest expected counts until at most `keep` remain
    /// and they hold at most `keep_bytes`. Amortised: called when the table is a quarter over
    /// `keep` or over `max_pattern_bytes` (a quarter more than `keep_bytes`), so each
    /// insertion pays `O(log n)`.
    fn evict(&mut self, keep: usize, keep_bytes: usize) {
        let mut by_expected: Vec<(f64, u64)> = self
            .patterns
            .iter()
            .map(|(key, a)| (a.total.expected, *key))
            .collect();
        by_expected.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        if self.evictions == 0 {
            let bound = if self.patterns.len() > keep {
                format!("more than {keep} patterns (--max-patterns)")
            } else {
                format!(
                    "patterns hold more than {:.1} MiB (--pattern-memory)",
                    self.config.max_pattern_bytes as f64 / 1_048_576.0
                )
            };
            tracing::warn!(
                "paths: {bound}; evicting those with the smallest expected counts (retracted \
                 in the output; raise the bound to keep more)"
            );
        }
        for (_, key) in by_expected {
            if self.patterns.len() <= keep && self.table_bytes <= keep_bytes {
                break;
            }
            if let Some(agg) = self.patterns.remove(&key) {
                self.evictions += 1;
                self.table_bytes = self.table_bytes.saturating_sub(agg.heap_bytes());
                if let (Some(name), true) = (agg.name, agg.reported || agg.shown) {
                    self.evicted
                        .push((key, name.id, name.tree, agg.shown, agg.reported));
                }
            }
        }
    }

    /// Prefetches what the roots waiting next will read ([`prefetch`]): their entries,
    /// [`PREFETCH_FAR`] places ahead, then, once those have come, [`PREFETCH_NEAR`] places
    /// ahead, their messages and their children's entries. A root is judged seconds after it
    /// came, when its tree has left the cache.
    fn prefetch_roots(&self) {
        if let Some(e) = self
            .pending
            .get(PREFETCH_FAR)
            .and_then(|r| self.entries.get(&r.2))
        {
            prefetch(e);
        }
        if let Some(e) = self
            .pending
            .get(PREFETCH_NEAR)
            .and_then(|r| self.entries.get(&r.2))
        {
            prefetch::<Message>(&e.m);
            for (c, _) in &e.children {
                if let Some(ce) = self.entries.get(c) {
                    prefetch(ce);
                }
            }
        }
    }

    /// Finishes the roots that are ready at `now` (all of them when `now` is `None`).
    fn finish_roots(&mut self, now: Option<Time>, out: &mut Vec<PathRecord>) {
        while let Some(&(ready, root_id, root)) = self.pending.front() {
            if now.is_some_and(|n| ready >= n) {
                break;
            }
            self.pending.pop_front();
            self.prefetch_roots();
            let Some(root_ns) = self.entries.get(&root).map(|e| e.event_ns) else {
                continue;
            };
            let settled = self.settled_at(root);
            // Judged at `ready`, not at the frontier: every message before `ready` is in and
            // none after it (see the operator's loop), so the outcome does not depend on how
            // the frontier moved.
            if now.is_some()
                && settled > ready
                && root_ns.saturating_add(shed::capped(self.config.max_path_ns)) > ready
            {
                // A child may still come: look again when it would have.
                self.judge_at(settled, root_id, root);
                continue;
            }
            self.pending_roots.remove(&(root_ns, root_id));
            let budget = self.config.try_both;
            let mut instances = self.enumerate(root, PROBABLY_FALSE, budget);
            if !self.condition_on_answer(root, &mut instances) {
                let mut wider = self.enumerate(root, UNLIKELY, budget.saturating_mul(2));
                if self.condition_on_answer(root, &mut wider) {
                    instances = wider;
                }
            }
            self.cut += instances
                .iter()
                .filter(|(m, _)| m.len() >= MAX_MESSAGES)
                .count() as u64;
            let mut hop_cache = FastMap::default();
            for (msgs, p) in instances {
                if let Some(b) = self.build(&msgs, p, &mut hop_cache) {
                    if let Some(id) = self.aggregate(root_ns, &b) {
                        out.push(PathRecord::Instance(PathInstance {
                            pattern: id,
                            probability: b.probability,
                            messages: b.messages,
                        }));
                    }
                }
            }
        }
    }

    /// Frees messages no unfinished root can reach any more.
    fn expire(&mut self, now: Time) {
        let oldest_root = self.pending_roots.first().map(|r| r.0);
        let settled = now.saturating_sub(self.settle());
        while let Some(t) = self.entries.front().map(|e| e.event_ns) {
            if t >= settled || oldest_root.is_some_and(|r| t >= r) {
                break;
            }
            self.entries.pop_front();
        }
        // Links whose parent never came (its sender was not observed, or it was late).
        let mut dropped = 0;
        self.orphans.retain(|_, v| {
            let before = v.len();
            v.retain(|(t, _, _)| *t >= settled);
            dropped += (before - v.len()) as u64;
            !v.is_empty()
        });
        self.orphans_dropped += dropped;
        if now.saturating_sub(self.last_expiry) >= crate::ports::EXPIRY_EVERY_NS {
            self.ports.expire(now.saturating_sub(300_000_000_000));
            self.last_expiry = now;
        }
    }

    /// Reports the patterns at snapshot time `at`.
    fn snapshot(&mut self, at: Time, last: bool, out: &mut Vec<PathRecord>) {
        let window = self.config.window_ns;
        let start = at.saturating_sub(window);
        // Naming adds to the table's bytes: the bound holds for what is reported too.
        self.name_all();
        if self.table_bytes > self.config.max_pattern_bytes {
            let cap = self.config.max_patterns.max(1);
            self.evict(cap, self.config.max_pattern_bytes / 4 * 3);
        }
        for (key, id, tree, shown, reported) in std::mem::take(&mut self.evicted) {
            if self.patterns.contains_key(&key) {
                // Back since: its new report supersedes the old one.
                continue;
            }
            retract(&id, &tree, shown, reported, (start, at), last, out);
        }
        if last && self.evictions > 0 {
            tracing::info!(
                "paths: {} patterns evicted in all (--max-patterns {}, --pattern-memory {:.1} MiB)",
                self.evictions,
                self.config.max_patterns,
                self.config.max_pattern_bytes as f64 / 1_048_576.0
            );
        }
        // In id order, so that output does not depend on hashing.
        let mut keys: Vec<(&str, u64)> = self.patterns.iter().map(|(k, a)| (a.id(), *k)).collect();
        keys.sort();
        let keys: Vec<u64> = keys.into_iter().map(|(_, k)| k).collect();
        let mut held = 0;
        let mut noise = Vec::new();
        for key in keys {
            let Some(agg) = self.patterns.get_mut(&key) else {
                continue;
            };
            let before = agg.buckets.len();
            while agg.buckets.front().is_some_and(|(s, _)| *s < start) {
                if let Some((_, old)) = agg.buckets.pop_front() {
                    self.table_bytes = self.table_bytes.saturating_sub(old.heap_bytes());
                }
            }
            let window_changed = agg.buckets.len() != before;
            if agg.buckets.is_empty() && agg.total.expected < self.config.min_expected && !last {
                noise.push(key);
                continue;
            }
            held += agg.heap_bytes();
            if !(agg.touched || window_changed || last) {
                continue;
            }
            let Some(name) = &agg.name else { continue };
            let mut w = Stats::new(agg.total.delay.len());
            for (_, b) in agg.buckets.iter().filter(|(s, _)| *s < at) {
                w.merge(b);
            }
            if w.count > 0 || agg.shown {
                out.push(PathRecord::Pattern(pattern_record(
                    &name.id,
                    &name.tree,
                    &w,
                    false,
                    (start, at),
                    last,
                )));
            }
            agg.shown = w.count > 0;
            if agg.touched || last {
                agg.reported = true;
                out.push(PathRecord::Pattern(pattern_record(
                    &name.id,
                    &name.tree,
                    &agg.total,
                    true,
                    (agg.first_ns, at),
                    last,
                )));
            }
            agg.touched = false;
        }
        for key in noise {
            let Some(agg) = self.patterns.remove(&key) else {
                continue;
            };
            self.table_bytes = self.table_bytes.saturating_sub(agg.heap_bytes());
            self.noise += 1;
            if let Some(name) = agg.name {
                let (shown, reported) = (agg.shown, agg.reported);
                retract(
                    &name.id,
                    &name.tree,
                    shown,
                    reported,
                    (start, at),
                    last,
                    out,
                );
            }
        }
        if held != self.table_bytes {
            tracing::warn!(
                "paths: the pattern table's size was counted as {} bytes, but it holds {held}",
                self.table_bytes
            );
            self.table_bytes = held;
        }
        tracing::debug!(
            "paths: {} patterns hold {} KiB",
            self.patterns.len(),
            held >> 10
        );
        tracing::debug!(
            "paths: {} links dropped, their parent gone",
            self.orphans_dropped
        );
        if last && self.cut > 0 {
            tracing::warn!(
                "paths: {} instances cut at {MAX_MESSAGES} messages (the rest of their messages \
                 are in no instance: the linker chained requests together)",
                self.cut
            );
        }
        if last && self.noise > 0 {
            tracing::info!(
                "paths: {} patterns below --min-expected {} dropped once out of the window",
                self.noise,
                self.config.min_expected
            );
        }
        self.save(at, last);
    }
}

/// The records that retract a pattern that is gone from the table: its windowed report if
/// the last one had a count (`shown`), its cumulative one if any was made (`reported`).
fn retract(
    id: &str,
    tree: &PatternNode,
    shown: bool,
    reported: bool,
    window: (Time, Time),
    last: bool,
    out: &mut Vec<PathRecord>,
) {
    let empty = Stats::default();
    for (cumulative, said) in [(false, shown), (true, reported)] {
        if said {
            out.push(PathRecord::Pattern(pattern_record(
                id, tree, &empty, cumulative, window, last,
            )));
        }
    }
}

fn pattern_record(
    id: &str,
    tree: &PatternNode,
    s: &Stats,
    cumulative: bool,
    window: (Time, Time),
    last: bool,
) -> PathPattern {
    PathPattern {
        id: id.to_owned(),
        tree: tree.clone(),
        cumulative,
        window,
        count: s.count,
        expected: s.expected,
        max_probability: s.max_p,
        end_to_end: s.e2e.summary(),
        hops: s.hops(),
        last,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    True,
    False,
    Both,
}

fn decide(q: f64, is_best: bool) -> Decision {
    decide_below(q, is_best, PROBABLY_FALSE)
}

/// [`decide`], with links at most `probably_false` likely probably false.
fn decide_below(q: f64, is_best: bool, probably_false: f64) -> Decision {
    if q >= PROBABLY_TRUE {
        Decision::True
    } else if q <= probably_false && !is_best {
        Decision::False
    } else {
        Decision::Both
    }
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
                    pending: VecDeque::new(),
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
                            if paths.pending.front().is_some_and(|(r, _, _)| *r <= t)
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

#[cfg(test)]
mod tests {
    use super::*;
    use timely::dataflow::operators::capture::Event;
    use timely::dataflow::operators::{Capture, ToStream};

    fn message(src: &str, dst: &str, send: Time) -> Box<Message> {
        Box::new(Message::between(src, dst, send, send + 100_000))
    }

    /// The probabilities of the instances `paths` finishes from a request and its reply,
    /// the reply's [`Linked::typical`] as given.
    fn instances(typical: Prob) -> Vec<f64> {
        let t = 1_000_000_000_000;
        let request = Linked {
            id: 1,
            message: message("10.1.0.1:40000", "10.0.0.2:80", t),
            parents: SmallVec::new(),
            spontaneous: ONE,
            best: None,
            from_client: true,
            keys: (11, 12),
            typical: ONE,
        };
        let reply = Linked {
            id: 2,
            message: message("10.0.0.2:80", "10.1.0.1:40000", t + 1_000_000),
            parents: smallvec::smallvec![(1, ONE)],
            spontaneous: 0,
            best: Some(1),
            from_client: false,
            keys: (12, 11),
            typical,
        };
        let config = PathsConfig {
            instances: true,
            ..PathsConfig::default()
        };
        let captured = timely::example(move |scope| {
            vec![request, reply]
                .to_stream(scope)
                .container::<Vec<_>>()
                .paths(config)
                .capture()
        });
        captured
            .try_iter()
            .flat_map(|event| match event {
                Event::Messages(_, records) => records,
                Event::Progress(_) => Vec::new(),
            })
            .filter_map(|r| match r {
                PathRecord::Instance(i) => Some(i.probability),
                PathRecord::Pattern(_) => None,
            })
            .collect()
    }

    #[test]
    fn an_instance_counts_as_much_as_its_replies_are_typical() {
        assert_eq!(instances(ONE), vec![1.0]);
        assert_eq!(instances(ONE / 4), vec![0.25]);
    }
}
