//! What a scan weighs: the prepared departure (`Prep`), its candidate causes
//! (`Candidate`), their weights, and the constants and small functions of the weighing.
//! No state of its own.

use super::*;

/// Project 5's overlapping-child penalty: `1/(n + 1)²` for an arrival that is the most likely
/// cause of `n` sends already (of those before `before_event`, if given: the first's event
/// time is what is known).
pub(super) fn penalty(
    caused: &FastMap<u64, (u32, Time, Time)>,
    id: u64,
    before_event: Option<Time>,
) -> f64 {
    match caused.get(&id) {
        Some(&(_, first, _)) if before_event.is_some_and(|b| first >= b) => 1.0,
        Some(&(n, _, _)) => 1.0 / f64::from(n + 1).powi(2),
        None => 1.0,
    }
}

/// A send as a scan for its candidate parents sees it ([`Linker::scan`]).
#[derive(Clone, Copy)]
pub(super) struct Scan {
    /// Its send time (or, for the time-shifted null, that time shifted).
    pub(super) at: Time,
    pub(super) id: u64,
    pub(super) from: u64,
    pub(super) child_to: u64,
    pub(super) only_from: Option<u64>,
    pub(super) callee: bool,
    /// When its answer came back.
    pub(super) nested_until: Option<Time>,
    pub(super) calls_back: Option<u64>,
    /// Its connection, as its sender's logs key it.
    pub(super) conn: u64,
    /// For the null: sends caused at or after this event time are not known yet.
    pub(super) before_event: Option<Time>,
}

/// A candidate parent as `link` weighs it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Candidate {
    pub(super) id: u64,
    pub(super) delay: Time,
    /// Its link type.
    pub(super) kind: u64,
    pub(super) task: Option<u64>,
    /// For a call: the time from its answer to its task's reply, when both are known.
    pub(super) gap: Option<Time>,
    /// Its weight by structure alone (penalties), as the scan found it.
    pub(super) structural: f64,
    /// For a call: the share of its gap's fit that is the task's reply coming right after
    /// the call's answer rather than after one more call (what the gap density learns).
    pub(super) direct: f64,
    /// Its weight under the learned densities alone, for learning the gaps.
    pub(super) learned: f64,
    /// Its weight, and once weighed, its probability.
    pub(super) weight: f64,
    /// Whether it is the answer to a call not decided yet (a match window's round: such a
    /// candidate holds the call back until that call is decided).
    pub(super) undecided: bool,
}

impl Candidate {
    pub(super) fn new(
        id: u64,
        delay: Time,
        kind: u64,
        task: Option<u64>,
        gap: Option<Time>,
        w: f64,
    ) -> Self {
        Candidate {
            id,
            delay,
            kind,
            task,
            gap,
            direct: 1.0,
            structural: w,
            learned: w,
            weight: w,
            undecided: false,
        }
    }

    /// Arrival `a` at `from` as a candidate parent, outside any task, of a send to
    /// `child_to` at `at`, weighing `w` by structure.
    pub(super) fn arrived(a: &Arrived, at: Time, from: u64, child_to: u64, w: f64) -> Self {
        Candidate::new(
            a.id,
            at - a.local_ns,
            link_type(a.kind_from, a.request, from, child_to, false),
            None,
            None,
            w,
        )
    }
}

/// What weighing a send found besides its candidates ([`Linker::weigh`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Weighed {
    /// The probability that it was spontaneous.
    pub(super) spontaneous: f64,
    /// Whether every candidate was weighed by a learned density that has [`matured`].
    pub(super) matured: bool,
    /// What [`Linker::weigh`] divided the weights by to make them probabilities.
    pub(super) total: f64,
    /// Its smallest candidate delay (WAP5's sample of the pair's mean delay).
    pub(super) smallest: Option<Time>,
}

/// A send as `link` takes it in ([`Linker::prepare`]): what deciding its cause needs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Prep {
    pub(super) id: u64,
    pub(super) from: u64,
    pub(super) to: u64,
    pub(super) from_client: bool,
    /// Whether it starts a path without weighing (a client's, or one without timestamps).
    pub(super) root: bool,
    pub(super) conn: u64,
    /// Its send time (the sender's clock), or for a message seen at its receiver alone, the
    /// receive time.
    pub(super) at: Time,
    pub(super) event_ns: Time,
    pub(super) send_ns: Option<Time>,
    /// For a message seen at its receiver alone: the receiver (its only possible cause is
    /// what the receiver sent the sender).
    pub(super) only_from: Option<u64>,
    /// Whether it was sent from a fixed port (an answer or a reply).
    pub(super) callee: bool,
    /// The request it replies to.
    pub(super) answers: Option<u64>,
    pub(super) child_to: u64,
    /// When its answer came back (a call).
    pub(super) nested_until: Option<Time>,
    /// Who answered it, as link types name the answer's sender (a call).
    pub(super) answer_kind: Option<u64>,
    /// Its answer's size in bytes (a call whose answer is known).
    pub(super) answer_bytes: Option<u64>,
    pub(super) calls_back: Option<u64>,
}

impl Prep {
    /// Whether it is a call its node's match window decides jointly.
    pub(super) fn is_call(&self) -> bool {
        !self.root && !self.callee && self.answers.is_none() && self.only_from.is_none()
    }

    /// Its scan for candidate parents at its time.
    pub(super) fn scan(&self) -> Scan {
        Scan {
            at: self.at,
            id: self.id,
            from: self.from,
            child_to: self.child_to,
            only_from: self.only_from,
            callee: self.callee,
            nested_until: self.nested_until,
            calls_back: self.calls_back,
            conn: self.conn,
            before_event: None,
        }
    }

    /// It, linked as a root.
    pub(super) fn root(&self, m: Box<Message>) -> Linked {
        Linked {
            id: self.id,
            message: m,
            parents: SmallVec::new(),
            spontaneous: ONE,
            best: None,
            from_client: self.from_client,
            keys: (self.from, self.to),
            typical: ONE,
        }
    }
}

/// Copies of each candidate parent in a match window's assignment: its first call, a second
/// and a third at Project 5's overlapping-child penalty.
pub(super) const COPIES: usize = 3;

/// How many candidates a link type must have been (faded) before calls with it as a
/// candidate are decided jointly.
pub(super) const MATCH_SAMPLES: f64 = 100.0;

/// A reply whose delay is at least this share of its kind's most typical one counts as
/// typical ([`Linked::typical`]): only a delay far outside what its kind does weighs its
/// instances down.
pub const TYPICAL_FLOOR: f64 = 0.02;

/// The most [`Linked::typical`] raises an instance by (`paths` caps an instance's
/// probability at 1 anyway).
pub(super) const MAX_TYPICAL: f64 = 1000.0;

/// How many clean gaps a reply type must have been expected to show before the shortfall of
/// clean ones is believed ([`TypicalDelay::clean_share`]).
pub(super) const CLEAN_EVIDENCE: f64 = 20.0;

/// The parents at a reply's gap ([`Linker::reply_gap`]) are counted this many standard
/// deviations below the excess of answers there over the null
/// ([`CausalDensity::likelihood_ratio`], which fits the parents' gaps to what stands out):
/// on Project 5's multi-tier trace at parallelism 45, 0, 0.25, 0.5, 0.75, 1 and 1.5 gave
/// a largest per-node delay error of 8.3%, 8.1%, 8.0%, 8.5%, 9.5% and 11.2%, every one of
/// them no false negative beyond 1 among the top N by either ranking.
pub(super) const REPLY_GAP_SIGMAS: f64 = 0.5;
/// A reply's gaps are learned from the answers of its kind at most this long before it (and
/// before its shifted time); a longer gap is not judged...
pub(super) const REPLY_GAP_BACK_NS: Time = 100_000_000;
/// ... and from at most this many of them.
pub(super) const MAX_REPLY_GAP_SCAN: usize = 64;
/// Only replies whose task's calls were all given to it with less than this probability
/// (the product of theirs) are judged by their gaps, and learned from.
pub(super) const REPLY_GAP_DOUBT: f64 = 0.9;
/// The number of calls under which a reply type's gaps are also learned pooled over all
/// numbers of calls.
pub(super) const POOLED_CALLS: u8 = u8::MAX;

/// A gap is tested for being clean ([`Linker::clean`]) over at most this many of its
/// node's sends; a gap holding more is taken as not clean.
pub(super) const MAX_CLEAN_SCAN: usize = 1024;

/// The cost of a probability in an assignment: its negative log.
pub(super) fn cost(p: f64) -> f64 {
    -(p.max(1e-12).ln())
}

/// Most sends a call's weighing looks at after its answer, for the call its task may have
/// gone on with ([`Linker::follows`]).
pub(super) const MAX_FOLLOWS: usize = 64;

/// The buffers of one match window's rounds ([`Linker::flush`]), reused.
#[derive(Default)]
pub(super) struct Matching {
    /// Every undecided call's candidates, one call after another.
    pub(super) arena: Vec<Candidate>,
    /// The answers to the undecided calls (receive time, id, sender's kind, the call).
    pub(super) answers: Vec<(Time, u64, u64, u64)>,
    /// Per undecided call: its candidates in `arena`, and what weighing it found.
    pub(super) rows: Vec<(usize, usize, Option<Weighed>)>,
    /// Candidate parent id -> its index in `ids`.
    pub(super) columns: FastMap<u64, usize>,
    pub(super) ids: Vec<u64>,
    /// How many calls the round gave each candidate parent.
    pub(super) uses: Vec<u32>,
    pub(super) assign: Assign,
}

/// Whether a learned causal density may be weighed by at `t`: it has seen [`MATCH_SAMPLES`]
/// candidates and is not [`stale`].
pub(super) fn matured(d: &CausalDensity, window: Time, t: Time) -> bool {
    d.samples() >= MATCH_SAMPLES && !stale(d.last_ns, window, t)
}

/// The link type under which the gaps of `kind` are learned.
pub(super) fn gap_type(kind: u64) -> u64 {
    kind ^ 0x6761_7020_6761_7020
}

/// Whether a learned density last stepped at `last_ns` (0: not yet) is forgotten at `t`:
/// unseen for the delay window. Decided when it is used, so that it does not matter whether
/// [`Linker::expire`] dropped it first.
pub(super) fn stale(last_ns: Time, window: Time, t: Time) -> bool {
    last_ns != 0 && last_ns.saturating_add(window) <= t
}

/// The density of `kind` in `map`, afresh (`new`) if absent or [`stale`] at `t` (`last`
/// tells when a density was last stepped).
pub(super) fn density_at<K: std::hash::Hash + Eq, D>(
    map: &mut FastMap<K, D>,
    kind: K,
    (window, t): (Time, Time),
    new: impl Fn() -> D,
    last: impl Fn(&D) -> Time,
) -> &mut D {
    let d = map.entry(kind).or_insert_with(&new);
    if stale(last(d), window, t) {
        *d = new();
    }
    d
}

/// [`density_at`] for the learned causal delays of `kind`.
pub(super) fn causal_at(
    map: &mut FastMap<u64, CausalDensity>,
    kind: u64,
    at: (Time, Time),
    memory: f64,
) -> &mut CausalDensity {
    density_at(map, kind, at, || CausalDensity::new(memory), |d| d.last_ns)
}

/// A node's first-arrival entry is dropped once its newest arrival is this much older than
/// what is linked (far longer than the lull after which it starts afresh).
pub(super) const FIRST_ARRIVAL_IDLE_NS: Time = 600_000_000_000;

/// Where a node's arrivals begin: its first arrival since the last lull.
#[derive(Clone, Copy, Debug)]
pub(super) struct FirstArrival {
    /// The first arrival's receive time (the node's clock).
    pub(super) first_local: Time,
    /// The newest arrival's receive time.
    pub(super) newest_local: Time,
    /// The newest arrival's event time, for expiry.
    pub(super) newest_event: Time,
}

impl FirstArrival {
    /// Notes an arrival; after a lull longer than `lull_ns` (the node's clock), the arrivals
    /// begin again with it. Decided as arrivals come, not when sweeps run.
    pub(super) fn note(&mut self, local_ns: Time, event_ns: Time, lull_ns: Time) {
        if local_ns.saturating_sub(self.newest_local) > lull_ns {
            self.first_local = local_ns;
        }
        self.first_local = self.first_local.min(local_ns);
        self.newest_local = self.newest_local.max(local_ns);
        self.newest_event = self.newest_event.max(event_ns);
    }
}

impl Touch for Linked {
    #[inline]
    fn touch(&self) {
        prefetch::<Message>(&self.message);
    }
}

/// Weight of a candidate that belongs to no task.
pub(super) const TASKLESS: f64 = 0.1;

/// The node key that stands for every client in a link type.
pub(super) const CLIENT_KEY: u64 = 0;

/// A link type: the parent's sender and kind, the node, the child's receiver and kind.
pub(super) fn link_type(parent_from: u64, request: bool, node: u64, to: u64, reply: bool) -> u64 {
    FixedState::with_seed(0x7479_7065).hash_one((parent_from, request, node, to, reply))
}
