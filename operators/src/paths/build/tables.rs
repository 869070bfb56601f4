//! The `paths` operator's tables: linked-message entries, per-pattern aggregates and their
//! names, hop labels and root slots; and the records a pattern's change gives. State: the
//! entries (freed as no unfinished root precedes them) and the patterns (bounded by
//! `max_patterns`, windows' buckets dropped as they leave the window).

use super::*;

pub(super) struct Entry {
    /// The message's id ([`crate::paths::link::message_id`]).
    pub(super) id: u64,
    pub(super) m: Box<Message>,
    /// The message's event time (read while deciding whether a root is ready, without
    /// touching the message).
    pub(super) event_ns: Time,
    /// The children's slots ([`Slots`]) and link probabilities (inline: most messages have
    /// one or two, and walking a tree then reads no other allocation).
    pub(super) children: SmallVec<[(u64, Prob); 2]>,
    /// The most likely parent's id.
    pub(super) best: Option<u64>,
    pub(super) spontaneous: Prob,
    /// How typical its delay is, for a reply ([`crate::paths::link::Linked::typical`]).
    pub(super) typical: Prob,
    /// Whether an instance of a cut tree's rest holds it ([`Paths::continue_cut`]).
    pub(super) continued: bool,
    /// [`node_key`](crate::paths::link::node_key)s of the sender and receiver.
    pub(super) keys: (u64, u64),
    /// Whose learned wait for children its receiver reads ([`Paths::wait_after`]): the
    /// receiver's key, or one key shared by every client (a client's endpoints are many
    /// nodes of one kind, each too rarely seen to learn from alone).
    pub(super) wait_key: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Stats {
    pub(super) count: u64,
    /// Roots whose likeliest instance this is: each request counted once, where its most
    /// probable reading puts it (`count` counts a try-both decision's every instance).
    #[serde(default)]
    pub(super) likeliest: u64,
    pub(super) expected: f64,
    pub(super) max_p: f64,
    pub(super) e2e: Dist,
    pub(super) delay: Vec<Dist>,
    pub(super) network: Vec<Dist>,
    /// Per hop, the TCP problems of its messages' connections; empty until a message of the
    /// pattern comes with TCP evidence (`--emit problems`).
    #[serde(default)]
    pub(super) tcp: Vec<TcpSums>,
}

/// A message's direction of data (`src_endpoint`, `dst_endpoint`), where both are `ip:port`.
pub(super) type Direction = Option<(Endpoint, Endpoint)>;

/// One instance's facts on one hop: the sender's delay, the network latency and what the
/// TCP connection that carried it suffered, with its direction of data.
pub(super) type HopFacts = (Option<i64>, Option<i64>, Option<(Carried, Direction)>);

/// Connections a hop keeps by the time its messages spent in problems.
const HOP_FLOWS: usize = 4;

/// One hop's TCP problems summed over its messages, each weighted by its instance's
/// probability: [`HopProblems`] in the making.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub(super) struct TcpSums {
    /// Messages with evidence.
    pub(super) messages: f64,
    /// Per problem, the sum of their intervals' shares in it.
    pub(super) share: [f64; 5],
    /// Per problem, the messages sent in an interval with it.
    pub(super) affected: [f64; 5],
    /// The connections (directions of data) whose messages spent the most time in problems,
    /// with that time in shares of intervals: kept as a heavy-hitters summary (a newcomer
    /// replaces the lightest when it outweighs it), so approximate for busy hops.
    pub(super) flows: [Option<((Endpoint, Endpoint), f64)>; HOP_FLOWS],
}

impl TcpSums {
    pub(super) fn add(&mut self, c: &Carried, direction: Direction, w: f64) {
        self.messages += w;
        let mut troubled = 0.0;
        for k in 0..5 {
            let s = c.share(k);
            self.share[k] += w * s;
            if s > 0.0 {
                self.affected[k] += w;
                troubled += w * s;
            }
        }
        if let Some(d) = direction.filter(|_| troubled > 0.0) {
            self.note_flow(d, troubled);
        }
    }

    fn note_flow(&mut self, d: (Endpoint, Endpoint), weight: f64) {
        if let Some((_, x)) = self.flows.iter_mut().flatten().find(|(f, _)| *f == d) {
            *x += weight;
            return;
        }
        if let Some(slot) = self.flows.iter_mut().find(|s| s.is_none()) {
            *slot = Some((d, weight));
            return;
        }
        let lightest = self
            .flows
            .iter_mut()
            .min_by(|a, b| {
                let (a, b) = (a.map_or(0.0, |x| x.1), b.map_or(0.0, |x| x.1));
                a.total_cmp(&b)
            })
            .filter(|s| s.is_some_and(|x| x.1 < weight));
        if let Some(slot) = lightest {
            *slot = Some((d, weight));
        }
    }

    fn merge(&mut self, o: &TcpSums) {
        self.messages += o.messages;
        for k in 0..5 {
            self.share[k] += o.share[k];
            self.affected[k] += o.affected[k];
        }
        for (d, w) in o.flows.iter().flatten() {
            self.note_flow(*d, *w);
        }
    }

    fn summary(&self) -> Option<HopProblems> {
        let mut flows: Vec<((Endpoint, Endpoint), f64)> =
            self.flows.iter().flatten().copied().collect();
        flows.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        (self.messages > 0.0).then(|| HopProblems {
            messages: self.messages,
            share: self.share.map(|s| s / self.messages),
            affected: self.affected,
            flows: flows
                .iter()
                .map(|((a, b), _)| format!("{a}->{b}"))
                .collect(),
        })
    }
}

impl Stats {
    pub(super) fn new(n: usize) -> Stats {
        Stats {
            delay: vec![Dist::default(); n],
            network: vec![Dist::default(); n],
            ..Stats::default()
        }
    }

    pub(super) fn merge(&mut self, o: &Stats) {
        self.count += o.count;
        self.likeliest += o.likeliest;
        self.expected += o.expected;
        self.max_p = self.max_p.max(o.max_p);
        self.e2e.merge(&o.e2e);
        for (a, b) in self.delay.iter_mut().zip(&o.delay) {
            a.merge(b);
        }
        for (a, b) in self.network.iter_mut().zip(&o.network) {
            a.merge(b);
        }
        if self.tcp.len() < o.tcp.len() {
            self.tcp.resize(o.tcp.len(), TcpSums::default());
        }
        for (a, b) in self.tcp.iter_mut().zip(&o.tcp) {
            a.merge(b);
        }
    }

    /// Bytes this holds on the heap. O(hops).
    pub(super) fn heap_bytes(&self) -> usize {
        (self.delay.capacity() + self.network.capacity()) * std::mem::size_of::<Dist>()
            + self.tcp.capacity() * std::mem::size_of::<TcpSums>()
            + self.e2e.heap_bytes()
            + self
                .delay
                .iter()
                .chain(&self.network)
                .map(Dist::heap_bytes)
                .sum::<usize>()
    }

    pub(super) fn hops(&self) -> Vec<HopStats> {
        let opt = |d: &Dist| (!d.is_empty()).then(|| d.summary());
        self.delay
            .iter()
            .zip(&self.network)
            .enumerate()
            .map(|(k, (d, n))| HopStats {
                delay: opt(d),
                network: opt(n),
                tcp: self.tcp.get(k).and_then(TcpSums::summary),
            })
            .collect()
    }
}

pub(super) struct Agg {
    /// The pattern as [`Built::shape`] has it (empty for a restored pattern until an
    /// instance of it comes).
    pub(super) shape: Vec<Hop>,
    /// Its public id and tree, made when first needed (a snapshot, an instance, a
    /// checkpoint): on a busy system most patterns are single improbable instances, evicted
    /// before any snapshot, and naming them was most of their cost.
    pub(super) name: Option<Name>,
    pub(super) total: Stats,
    pub(super) first_ns: Time,
    pub(super) buckets: VecDeque<(Time, Stats)>,
    pub(super) touched: bool,
    /// Whether its cumulative totals were reported.
    pub(super) reported: bool,
    /// Whether the last windowed report had a count.
    pub(super) shown: bool,
}

/// A pattern's public id ([`PatternNode::id`]) and tree.
pub(super) struct Name {
    pub(super) id: String,
    pub(super) tree: PatternNode,
}

impl Name {
    /// The name of a preorder `shape`.
    pub(super) fn of(shape: &[Hop], labels: &Labels) -> Name {
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

    pub(super) fn heap_bytes(&self) -> usize {
        self.id.capacity() + self.tree.len() * (std::mem::size_of::<PatternNode>() + 16)
    }
}

impl Agg {
    /// The name, made now if it was not yet ([`Agg::name`]). Returns how many bytes that
    /// added to [`Agg::heap_bytes`].
    pub(super) fn name(&mut self, labels: &Labels) -> usize {
        if self.name.is_some() {
            return 0;
        }
        let name = Name::of(&self.shape, labels);
        let bytes = name.heap_bytes();
        self.name = Some(name);
        bytes
    }

    /// The public id; empty until named.
    pub(super) fn id(&self) -> &str {
        self.name.as_ref().map_or("", |n| n.id.as_str())
    }

    /// Bytes this pattern holds, the table's slot included: what `max_pattern_bytes` counts.
    /// O(buckets · hops).
    pub(super) fn heap_bytes(&self) -> usize {
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
pub(super) struct Hop {
    pub(super) src: u32,
    pub(super) dst: u32,
    pub(super) port: Option<u16>,
    pub(super) children: u32,
}

/// The label `CLIENT` (WAP5 §2.5.1), interned first.
pub(super) const CLIENT: u32 = 0;

/// Interned node labels.
pub(super) struct Labels {
    pub(super) ids: FastMap<String, u32>,
    pub(super) names: Vec<String>,
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
    pub(super) fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }

    pub(super) fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("?", String::as_str)
    }
}

/// One finished instance, before aggregation.
pub(super) struct Built {
    /// Hash of `shape`: the pattern's key.
    pub(super) key: u64,
    pub(super) shape: Vec<Hop>,
    pub(super) messages: Vec<InstanceMessage>,
    pub(super) probability: f64,
    pub(super) e2e: Option<i64>,
    /// Per hop, in preorder: the sender's delay, the network latency and what the TCP
    /// connection that carried it suffered (`tcp.hops`), with that connection's direction
    /// of data.
    pub(super) hops: Vec<HopFacts>,
}

/// One instance as it is built: its messages with their parents' positions, and its
/// probability.
pub(super) type Hypothesis = (Vec<(u64, Option<usize>)>, f64);

/// The messages `paths` holds, in the order they were inserted (event time, then id), each
/// at a slot number that counts the insertions: a lookup by slot is an index, not a hash, and
/// the oldest leave from the front.
#[derive(Default)]
pub(super) struct Slots {
    pub(super) entries: VecDeque<Entry>,
    /// Slot of `entries[0]`.
    pub(super) base: u64,
    /// Slot of each message by id, in two generations: ids go into `by_id`; once every
    /// entry `old_ids` names has left, it is cleared (its capacity kept) and the two swap.
    /// Removing each id as its entry left cost a cache miss per message.
    pub(super) by_id: FastMap<u64, u64>,
    pub(super) old_ids: FastMap<u64, u64>,
    /// The first slot not in `old_ids`.
    pub(super) old_end: u64,
}

impl Slots {
    pub(super) fn get(&self, slot: &u64) -> Option<&Entry> {
        slot.checked_sub(self.base)
            .and_then(|i| self.entries.get(usize::try_from(i).ok()?))
    }

    pub(super) fn get_mut(&mut self, slot: &u64) -> Option<&mut Entry> {
        slot.checked_sub(self.base)
            .and_then(|i| self.entries.get_mut(usize::try_from(i).ok()?))
    }

    /// The slot of message `id`, if it was pushed and its slot may still be held (it may
    /// have left: [`Slots::get`] says).
    pub(super) fn slot(&self, id: u64) -> Option<u64> {
        self.by_id
            .get(&id)
            .or_else(|| self.old_ids.get(&id))
            .copied()
    }

    pub(super) fn push(&mut self, e: Entry) -> u64 {
        let slot = self.base + self.entries.len() as u64;
        self.by_id.insert(e.id, slot);
        self.entries.push_back(e);
        slot
    }

    pub(super) fn front(&self) -> Option<&Entry> {
        self.entries.front()
    }

    pub(super) fn pop_front(&mut self) {
        if self.entries.pop_front().is_some() {
            self.base += 1;
            if self.base >= self.old_end {
                self.old_ids.clear();
                std::mem::swap(&mut self.by_id, &mut self.old_ids);
                self.old_end = self.base + self.entries.len() as u64;
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The records that retract a pattern that is gone from the table: its windowed report if
/// the last one had a count (`shown`), its cumulative one if any was made (`reported`).
pub(super) fn retract(
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

pub(super) fn pattern_record(
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
        likeliest: s.likeliest,
        expected: s.expected,
        max_probability: s.max_p,
        end_to_end: s.e2e.summary(),
        hops: s.hops(),
        last,
    }
}
