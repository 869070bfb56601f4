//! The task model: every node serves requests as *tasks*, and every message a node sends is
//! caused by the latest arrival of one of its tasks (WAP5 §5.1's causality, Project 5 §5.1's
//! nesting). [`Model`] holds each node's open tasks, decides for every departure which task
//! it belongs to, and learns from its decisions.
//!
//! - A request that arrives opens a task at its receiver. Its reply closes it: the reply's
//!   task is chosen among the open tasks of the same caller (on the same connection where
//!   the endpoints or a call id name one), and the choice pairs the reply with its request,
//!   which tells the caller which of its calls the answer belongs to.
//! - A call joins one of its node's open tasks, or none (a path starts there: a client's
//!   call, or a server's call that fits no task).
//! - An answer joins the task of the call it answers, once the callee has paired it.
//! - The parent of a departure is the latest arrival of its task at or before it.
//!
//! A departure's options are weighed by the evidence of [`super::evidence`]: the learned
//! delay from the option's latest arrival, Project 5's penalty for a second child of the same
//! class from one arrival, for a reply whether its task's calls are all answered and how
//! typical their set is for the task's type, and the order prior.
//!
//! **Joint decisions** (beyond Project 5, which decides each call on its own): a call stays
//! *provisional* until its answer arrives, a reply of its task is decided, or
//! [`ModelConfig::revise_ns`] has passed, and each new call of a class is decided together
//! with the provisional calls of that class at its node, by one minimum-cost assignment
//! ([`Assign`]) of calls to (task, arrival) slots, a second call of a slot at the same-child
//! penalty. Greedily, the first of two calls takes the task that fits it best and leaves the
//! second what is left; jointly, two tasks that asked one after the other are served in the
//! order that fits both. Replies are decided at once: their answer is their caller's next
//! arrival. A decision reaches the output once it is final ([`Model::take_final`]).
//!
//! State: per node, its open tasks (freed when they reply, or `task_timeout_ns` after their
//! newest arrival), its provisional calls (at most [`MAX_PROVISIONAL`] per class), the calls
//! awaiting answers and the pairings told by callees (freed when the answer arrives, or
//! after the same timeout). Memory follows the requests in flight, never the length of the
//! input.

use smallvec::SmallVec;

use causeway_sources::{Time, shed};

use super::evidence::{
    Coincidence, Composition, Delays, Durations, Repeats, Sizes, delay, order_log_prior, size_bin,
};
use crate::FastMap;
use crate::paths::assign::{Assign, NONE};

/// Whether a message asks or answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// A request (a call, or a one-way message: it opens a task at its receiver).
    Request,
    /// A response: it closes a task at its sender.
    Response,
}

/// A message as the model reads it.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    /// Its id ([`crate::paths::link::message_id`]).
    pub id: u64,
    /// Sender's node key.
    pub src: u64,
    /// Receiver's node key.
    pub dst: u64,
    /// Whether it asks or answers.
    pub role: Role,
    /// Send time in the sender's clock.
    pub send_local: Option<Time>,
    /// Receive time in the receiver's clock.
    pub recv_local: Option<Time>,
    /// The connection (or call) it travelled on, where the input names one.
    pub conn: Option<u64>,
    /// Its size in bytes, when known.
    pub bytes: Option<u64>,
}

/// What the model decided for a departure.
#[derive(Clone, Debug, Default)]
pub struct Decision {
    /// The options weighed: a parent's id (`None`: spontaneous) and its log score.
    pub options: SmallVec<[(Option<u64>, f64); 4]>,
    /// The option taken (an index into `options`), if any.
    pub chosen: Option<usize>,
    /// Whether it starts a path because its sender is a client (it serves no requests).
    pub from_client: bool,
}

impl Decision {
    /// The parent taken, if any.
    pub fn parent(&self) -> Option<u64> {
        self.chosen.and_then(|i| self.options[i].0)
    }
}

/// The model's parameters.
#[derive(Clone, Copy, Debug)]
pub struct ModelConfig {
    /// The order prior's odds against each later-arrived task ([`order_log_prior`]).
    pub rho: f64,
    /// A task whose latest arrival is older than this cannot cause a call (WAP5's `x`).
    pub max_delay_ns: Time,
    /// An open task, or an awaited answer, is forgotten this long after its newest arrival.
    pub task_timeout_ns: Time,
    /// Decisions each learned class remembers.
    pub memory: f32,
    /// How long (its node's clock) a call may be decided again with later calls of its class.
    pub revise_ns: Time,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            rho: 1.0,
            max_delay_ns: 2_000_000_000,
            task_timeout_ns: 60_000_000_000,
            memory: 20_000.0,
            revise_ns: 50_000_000,
        }
    }
}

/// The log score of a call made by no task (a server's spontaneous call): a call fitting
/// some task at all is far likelier.
const SPONTANEOUS: f64 = -9.2; // ln(1e-4)
/// A reply whose task still awaits an answer, per answer awaited (Project 5's nesting: a call
/// returns before its caller's task does).
const UNANSWERED: f64 = -6.9; // ln(1e-3)
/// A second departure of one class caused by the same arrival (Project 5's same-child
/// penalty): calls of one step go to different tasks.
const SAME_CHILD: f64 = -3.0; // ln(0.05)
/// A reply on another connection (or call id) than its request's.
const OTHER_CONNECTION: f64 = -9.2;
/// How far back another task's arrival may cause a reply (a queue's pop answered when a
/// push arrives, a long poll answered by a publish).
const CROSS_WINDOW_NS: Time = 20_000_000;
/// Most recent arrivals kept per node for that, and how far back (the null's shifted times
/// reach back `CROSS_WINDOW_NS` before shifts of up to two windows).
const CROSS_RECENT: usize = 64;
const RECENT_NS: Time = 4 * CROSS_WINDOW_NS;
/// Another task's arrival is weighed as a reply's cause only if arrivals of its type precede
/// the reply's class beyond chance at least this often, and the reply's own task's latest
/// arrival hardly more than chance would (below [`OWN_AT_CHANCE`]).
const CROSS_LEAST: f64 = 0.6;
/// The least the own cause's coincidence counts for, against a cross cause's.
const MIN_OWN: f64 = 0.05;
/// An own cause that precedes its class beyond chance this often or more is never passed
/// over for another task's arrival.
const OWN_AT_CHANCE: f64 = 0.2;
/// Most arrivals scanned per reply, at its time and at its shifted time alike.
const CROSS_SCAN: usize = 8;
/// The task of a recent arrival that another task's arrival caused, at a node where it is in
/// no task (see `Model::answer`).
const FOREIGN: u64 = u64::MAX;
/// What marks an arrival type as another task's, in the learned delays.
const CROSS_TYPE: u64 = 0x0063_726f_7373;

/// Most tasks a call weighs (its likeliest by their own evidence): the calls of a class are
/// decided jointly at a cost that grows with the square of their options.
const MAX_CALL_OPTIONS: usize = 16;
/// Most provisional calls of one class at one node: beyond, the oldest is final.
pub const MAX_PROVISIONAL: usize = 16;
/// Largest set of calls whose matching is refined by the order prior (exchanges of two).
const MAX_REFINED: usize = 8;
/// Added to every negated score to make assignment costs non-negative (a smoothed density
/// reads at most ln 2.5).
const COST_OFFSET: f64 = 1.0;

/// An open task: a request being served, and what arrived for it since.
#[derive(Clone, Debug)]
struct Task {
    /// The request's id.
    id: u64,
    /// The caller's node key.
    caller: u64,
    /// The node and the request's arrival type, by which its calls are learned (0 for a
    /// foreign task, which no reply closes).
    class: u64,
    /// The request's receive time (the node's clock).
    opened: Time,
    conn: Option<u64>,
    /// (receive time, id, arrival type, size class): the request and the answers to its
    /// calls.
    arrivals: SmallVec<[(Time, u64, u64, u8); 4]>,
    /// Calls awaiting their answers.
    outstanding: SmallVec<[u64; 2]>,
    /// (parent id, class) of every call so far.
    kids: SmallVec<[(u64, u64); 4]>,
    /// A multiset hash of the classes of its calls so far.
    signature: u64,
    /// Opened by an answer caused by another connection's message (a queue's job reaching
    /// a worker): nothing replies to it, and it ends when idle for `max_delay_ns`.
    foreign: bool,
}

impl Task {
    /// The latest arrival at or before `t`.
    fn latest(&self, t: Time) -> Option<(Time, u64, u64, u8)> {
        self.arrivals
            .iter()
            .filter(|a| a.0 <= t)
            .max_by_key(|a| a.0)
            .copied()
    }

    fn newest(&self) -> Time {
        self.arrivals
            .iter()
            .map(|a| a.0)
            .max()
            .unwrap_or(self.opened)
    }
}

/// A call not yet final: what deciding it again needs.
#[derive(Clone, Debug)]
struct Provisional {
    id: u64,
    class: u64,
    /// Send time (its node's clock).
    at: Time,
    /// The task it is in, and its parent there (`None`: spontaneous).
    task: Option<(u64, u64)>,
    decision: Decision,
    /// For learning once final: (parent type, delay, posterior, size class) of each
    /// option.
    learn: SmallVec<[(u64, i64, f64, u8); 4]>,
}

/// One node's state.
#[derive(Clone, Debug, Default)]
struct Node {
    /// Open tasks, in order of their requests' arrival.
    tasks: Vec<Task>,
    /// Whether it has served a request: a node that never has is a client, whose calls
    /// start paths.
    served: bool,
    /// Calls awaiting answers -> (their task, when sent).
    calls: FastMap<u64, (u64, Time)>,
    /// Answers paired by their callee -> (the call they answer, when told, whether another
    /// task's arrival caused it), not yet arrived.
    paired: FastMap<u64, (u64, Time, bool)>,
    /// Answers that arrived before their callee paired them -> (receive time, type, size
    /// class).
    unpaired: FastMap<u64, (Time, u64, u8)>,
    /// Provisional calls, by class, oldest first.
    provisional: FastMap<u64, Vec<Provisional>>,
    /// The latest arrivals (receive time, id, type, size class, task), for replies caused
    /// by another task's arrival; at most [`CROSS_RECENT`], of the last [`CROSS_WINDOW_NS`].
    recent: std::collections::VecDeque<(Time, u64, u64, u8, u64)>,
    /// The newest local time seen at the node.
    newest: Time,
}

/// How a pass learns.
#[derive(Clone, Debug)]
enum Learning {
    /// Into the densities it decides by, as it goes (a streaming run).
    Online,
    /// Into a fresh set, while deciding by fixed ones (a pass of expectation-maximisation).
    Batch(Box<(Delays, Composition, Sizes)>),
}

/// The nodes' tasks and what was learned; see the module documentation.
#[derive(Debug)]
pub struct Model {
    config: ModelConfig,
    nodes: FastMap<u64, Node>,
    delays: Delays,
    composition: Composition,
    sizes: Sizes,
    /// Coincidences of each arrival type with departures, whatever task the arrival is in
    /// (how far a reply's own latest arrival explains it beyond chance).
    coincidence: Coincidence,
    /// The same, counted only over arrivals in other tasks than a reply's likeliest (how far
    /// another task's arrival explains it beyond chance: high for a queue's pop reply after a
    /// push, at chance for a busy server's reply after its other tasks' answers).
    others: Coincidence,
    /// How many calls of each class tasks make, per task class.
    repeats: Repeats,
    /// How long tasks last, per task class.
    durations: Durations,
    learning: Learning,
    /// Decisions final and not yet taken: (departure id, decision).
    finals: Vec<(u64, Decision)>,
    /// The log-likelihood of the final decisions so far.
    score: f64,
    /// Departures decided.
    decided: u64,
    /// Tasks and answers forgotten unanswered.
    expired: u64,
    assign: Assign,
    /// What the run did that the paths do not show, logged at its end.
    pub tally: Tally,
    /// Order priors per departure class, where the warm-up chose one (else `config.rho`).
    rhos: FastMap<u64, f64>,
    /// The log-likelihood of the final decisions so far, per departure class.
    class_scores: FastMap<u64, f64>,
    /// Per node: (replies the structure alone decided among several waiting tasks, of
    /// those the longest waiting).
    reply_order: FastMap<u64, (f64, f64)>,
}

/// Counts of what a run did that its paths do not show (for `CAUSEWAY_LOG=debug`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Answers whose call was already gone.
    pub answers_without_call: u64,
    /// Answers whose call's task was already gone.
    pub calls_without_task: u64,
    /// Answers that arrived before their request was paired with a task.
    pub unpaired_answers: u64,
    /// Replies caused by another task's arrival (a queue's pop answered by a push).
    pub cross_replies: u64,
    /// Client calls decided in a task that another task's arrival opened.
    pub client_calls_in_tasks: u64,
}

/// What types and classes name every client by: clients are many nodes of one kind (WAP5
/// §2.5.1), and a type learned per client would learn little.
const CLIENT: u64 = 0x636c_6965_6e74;

/// A hash of a pair of keys, for types and classes.
pub fn mix(a: u64, b: u64) -> u64 {
    let x = a.rotate_left(17) ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x.wrapping_mul(0xff51_afd7_ed55_8ccd) ^ (x >> 29)
}

fn role_key(role: Role) -> u64 {
    match role {
        Role::Request => 0x7265_7175,
        Role::Response => 0x7265_7370,
    }
}

/// The type of an arrival: its sender and role.
fn arrival_type(from: u64, role: Role) -> u64 {
    mix(from, role_key(role))
}

/// The class of a departure: its node, receiver and role.
fn departure_class(node: u64, to: u64, role: Role) -> u64 {
    mix(mix(node, to), role_key(role))
}

/// What a call adds to its task's signature.
fn signature_of(class: u64) -> u64 {
    mix(class, 0x7369_676e)
}

/// A call's option: its task's index, score, parent id, parent type, delay and parent's
/// size class.
type CallOption = (usize, f64, u64, u64, i64, u8);
/// A recent arrival seen from a departure: (receive time, id, type, size class, delay to
/// the departure).
type RecentArrival = (Time, u64, u64, u8, i64);

impl Model {
    /// A model with nothing learned.
    pub fn new(config: ModelConfig) -> Self {
        Model {
            config,
            nodes: FastMap::default(),
            delays: Delays::new(config.memory),
            composition: Composition::new(config.memory),
            sizes: Sizes::new(config.memory),
            coincidence: Coincidence::new(config.memory),
            others: Coincidence::new(config.memory),
            repeats: Repeats::new(config.memory),
            durations: Durations::new(config.memory),
            learning: Learning::Online,
            finals: Vec::new(),
            score: 0.0,
            decided: 0,
            expired: 0,
            assign: Assign::default(),
            tally: Tally::default(),
            rhos: FastMap::default(),
            class_scores: FastMap::default(),
            reply_order: FastMap::default(),
        }
    }

    /// A fresh model (no tasks) that decides by what this one learned (in its last batch
    /// pass, if it learns in batch), and learns into a fresh set (`batch`: a pass of
    /// expectation-maximisation) or into the same one.
    pub fn relearned(&self, config: ModelConfig, batch: bool) -> Self {
        let (delays, composition, sizes) = match &self.learning {
            Learning::Batch(next) => (next.0.clone(), next.1.clone(), next.2.clone()),
            Learning::Online => (
                self.delays.clone(),
                self.composition.clone(),
                self.sizes.clone(),
            ),
        };
        let mut m = Model::new(config);
        m.delays = delays;
        m.composition = composition;
        m.sizes = sizes;
        m.coincidence = self.coincidence.clone();
        m.others = self.others.clone();
        m.repeats = self.repeats.clone();
        m.durations = self.durations.clone();
        m.rhos = self.rhos.clone();
        m.reply_order = self.reply_order.clone();
        if batch {
            m.learning = Learning::Batch(Box::new((
                Delays::new(config.memory),
                Composition::new(config.memory),
                Sizes::new(config.memory),
            )));
        }
        m
    }

    /// A model with nothing learned that learns in batch (the first pass of a warm-up).
    pub fn batch(config: ModelConfig) -> Self {
        Model::new(config).relearned(config, true)
    }

    /// The log-likelihood of the final decisions so far.
    pub fn score(&self) -> f64 {
        self.score
    }

    /// Departures decided so far.
    pub fn decided(&self) -> u64 {
        self.decided
    }

    /// Open tasks and awaited answers forgotten so far.
    pub fn expired(&self) -> u64 {
        self.expired
    }

    /// The order prior of departures of `class`.
    fn rho_of(&self, class: u64) -> f64 {
        self.rhos.get(&class).copied().unwrap_or(self.config.rho)
    }

    /// The order prior of `node`'s replies: from how often, where the structure alone
    /// decided, the task replied to was the longest waiting of two (`1/(1 + rho)`), with a
    /// uniform prior of one each way; 1 (no preference) while nothing was seen.
    fn reply_rho(&self, node: u64) -> f64 {
        let (n, first) = self.reply_order.get(&node).copied().unwrap_or((0.0, 0.0));
        let p = (first + 1.0) / (n + 2.0);
        ((1.0 - p) / p).clamp(0.02, 1.0)
    }

    /// The log-likelihood of the final decisions so far, per departure class.
    pub fn class_scores(&self) -> &FastMap<u64, f64> {
        &self.class_scores
    }

    /// Sets the order prior of departures of each class in `rhos` (others keep
    /// `config.rho`).
    pub fn set_rhos(&mut self, rhos: FastMap<u64, f64>) {
        self.rhos = rhos;
    }

    /// The learned delays, for debugging.
    pub fn delays(&self) -> &Delays {
        &self.delays
    }

    /// The model's parameters.
    pub fn config(&self) -> ModelConfig {
        self.config
    }

    /// How types and classes name `node`: [`CLIENT`] if it serves no requests.
    fn kind_of(&self, node: u64) -> u64 {
        if self.nodes.get(&node).is_some_and(|n| n.served) {
            node
        } else {
            CLIENT
        }
    }

    /// Moves the final decisions made since the last call into `out`.
    pub fn take_final(&mut self, out: &mut Vec<(u64, Decision)>) {
        out.append(&mut self.finals);
    }

    /// Takes in an arrival.
    pub fn arrive(&mut self, s: &Seen) {
        let Some(at) = s.recv_local.or(s.send_local) else {
            return;
        };
        let atype = arrival_type(self.kind_of(s.src), s.role);
        let bin = size_bin(s.bytes);
        match &mut self.learning {
            Learning::Online => self.sizes.arrival(atype, bin),
            Learning::Batch(next) => next.2.arrival(atype, bin),
        }
        let node = self.nodes.entry(s.dst).or_default();
        node.newest = node.newest.max(at);
        match s.role {
            Role::Request => {
                node.served = true;
                let task = Task {
                    id: s.id,
                    caller: s.src,
                    class: mix(s.dst, atype),
                    opened: at,
                    conn: s.conn,
                    arrivals: smallvec::smallvec![(at, s.id, atype, bin)],
                    outstanding: SmallVec::new(),
                    kids: SmallVec::new(),
                    signature: 0,
                    foreign: false,
                };
                insert_task(node, task);
                remember(node, (at, s.id, atype, bin, s.id));
            }
            Role::Response => {
                let paired = node.paired.remove(&s.id);
                match paired {
                    Some((call, _, foreign)) => {
                        self.answer(s.dst, call, foreign, at, s.id, atype, bin)
                    }
                    None => {
                        node.unpaired.insert(s.id, (at, atype, bin));
                        self.tally.unpaired_answers += 1;
                    }
                }
            }
        }
    }

    /// An answer to `call` arrives: it joins the call's task (if the call is in one), and is
    /// remembered among the node's recent arrivals. One that another task's arrival caused
    /// (`foreign`: the job a queue handed a worker's pop) carries that task's path into its
    /// receiver, whose next call may be its doing, client or not; an answer to a client's
    /// own request does not (a client's next request starts a path, WAP5 §2.5.1).
    #[allow(clippy::too_many_arguments)]
    fn answer(
        &mut self,
        node: u64,
        call: u64,
        foreign: bool,
        at: Time,
        id: u64,
        atype: u64,
        bin: u8,
    ) {
        let task = self
            .nodes
            .get(&node)
            .and_then(|n| n.calls.get(&call))
            .map(|c| c.0);
        self.join(node, call, at, id, atype, bin);
        if let Some(n) = self.nodes.get_mut(&node) {
            let task = match (task, foreign) {
                (Some(t), _) => t,
                (None, true) => FOREIGN,
                (None, false) => 0,
            };
            remember(n, (at, id, atype, bin, task));
        }
    }

    /// An answer (`id`, type `atype`, received at `at`) to `call` joins the call's task at
    /// `node`; the call is final from now on.
    fn join(&mut self, node: u64, call: u64, at: Time, id: u64, atype: u64, bin: u8) {
        self.finalize_call(node, call);
        let Some(n) = self.nodes.get_mut(&node) else {
            return;
        };
        let Some((task, _)) = n.calls.remove(&call) else {
            self.tally.answers_without_call += 1;
            return;
        };
        if let Some(t) = n.tasks.iter_mut().find(|t| t.id == task) {
            t.arrivals.push((at, id, atype, bin));
            t.outstanding.retain(|c| *c != call);
        } else {
            self.tally.calls_without_task += 1;
        }
    }

    /// Decides the task of a departure, and takes it in.
    pub fn depart(&mut self, s: &Seen) {
        let Some(at) = s.send_local else {
            self.finals.push((s.id, Decision::default()));
            return;
        };
        self.decided += 1;
        let to = self.kind_of(s.dst);
        let class = departure_class(s.src, to, s.role);
        let node = self.nodes.entry(s.src).or_default();
        node.newest = node.newest.max(at);
        if s.role == Role::Request && !node.served {
            match self.client_call(s, at, class) {
                // Linked to an answer another task caused: the call is decided among the
                // tasks such answers opened.
                None => self.call(s, at, class),
                Some(root) => self.finals.push((s.id, root)),
            }
            return;
        }
        self.finalize_older(s.src, at);
        match s.role {
            Role::Response => self.reply(s, at, to, class),
            Role::Request => self.call(s, at, class),
        }
    }

    /// A client's call: it starts a path, unless its class follows arrivals of a type beyond
    /// chance ([`Coincidence`]: a worker's call after the job its pop brought), in which case
    /// that arrival opens a task at the client (nothing replies to it; it ends when idle for
    /// `max_delay_ns`) and the call is decided in it.
    ///
    /// Returns the call's decision if it starts a path, `None` if it is to be decided among
    /// the client's tasks. A call joins a task only by this test, whatever tasks are open: a
    /// busy client's calls that follow its answers at chance stay roots.
    fn client_call(&mut self, s: &Seen, at: Time, class: u64) -> Option<Decision> {
        let root = Decision {
            from_client: true,
            ..Decision::default()
        };
        let Some(node) = self.nodes.get_mut(&s.src) else {
            return Some(root);
        };
        let scan = |until: Time| -> SmallVec<[RecentArrival; 8]> {
            node.recent
                .iter()
                .rev()
                .filter(|r| r.0 <= until && until - r.0 <= CROSS_WINDOW_NS)
                .take(CROSS_SCAN)
                .map(|r| (r.0, r.1, r.2, r.3, delay(r.0, until)))
                .collect()
        };
        let real = scan(at);
        // Arrivals another task caused, and arrivals in the tasks they opened.
        let foreign_ids: SmallVec<[u64; 8]> = node
            .recent
            .iter()
            .filter(|r| r.4 == FOREIGN || node.tasks.iter().any(|t| t.foreign && t.id == r.4))
            .map(|r| r.1)
            .collect();
        if let Some(shifted) = null_time(node, at, s.id) {
            let null = scan(shifted);
            let pairs = |v: &[RecentArrival]| -> SmallVec<[(u64, i64); 8]> {
                v.iter().map(|x| (mix(x.2, CROSS_TYPE), x.4)).collect()
            };
            self.coincidence
                .observe(class, &pairs(&real), &pairs(&null));
        }
        let best = real
            .iter()
            .filter(|r| foreign_ids.contains(&r.1))
            .map(|r| {
                (
                    r,
                    self.coincidence
                        .probability(mix(r.2, CROSS_TYPE), class, r.4),
                )
            })
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match best {
            Some((r, p)) if p > 0.5 => {
                self.tally.client_calls_in_tasks += 1;
                let (t, id, atype, bin, _) = *r;
                let Some(node) = self.nodes.get_mut(&s.src) else {
                    return Some(root);
                };
                let opens = node.recent.iter().any(|r| r.1 == id && r.4 == FOREIGN)
                    && !node.tasks.iter().any(|t| t.id == id);
                if opens {
                    insert_task(
                        node,
                        Task {
                            id,
                            caller: 0,
                            class: 0,
                            opened: t,
                            conn: None,
                            arrivals: smallvec::smallvec![(t, id, atype, bin)],
                            outstanding: SmallVec::new(),
                            kids: SmallVec::new(),
                            signature: 0,
                            foreign: true,
                        },
                    );
                }
                None
            }
            _ => Some(root),
        }
    }

    /// The options of a call of `class` at `at` at `node`'s tasks.
    fn call_options(&self, node: &Node, at: Time, class: u64) -> SmallVec<[CallOption; 8]> {
        let config = self.config;
        let oldest = at.saturating_sub(config.task_timeout_ns);
        let mut options: SmallVec<[CallOption; 8]> = SmallVec::new();
        for (i, t) in node.tasks.iter().enumerate() {
            if t.opened > at {
                break;
            }
            if t.opened < oldest {
                continue;
            }
            let Some((pt, pid, ptype, bin)) = t.latest(at) else {
                continue;
            };
            if at.saturating_sub(pt) > config.max_delay_ns {
                continue;
            }
            let d = delay(pt, at);
            let score = self.delays.log_p(ptype, class, d)
                + self.sizes.log_ratio(ptype, class, bin)
                + self.repeats.log_another(
                    t.class,
                    class,
                    t.kids.iter().filter(|k| k.1 == class).count(),
                )
                + self.durations.log_survival(t.class, delay(t.opened, at));
            options.push((i, score, pid, ptype, d, bin));
        }
        if options.len() > MAX_CALL_OPTIONS {
            // The likeliest, in the tasks' order (the order prior ranks by it): the joint
            // decision costs the square of the options.
            let mut by_score: SmallVec<[(f64, usize); 64]> =
                options.iter().enumerate().map(|(k, o)| (o.1, k)).collect();
            by_score.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
            let mut keep: SmallVec<[usize; 64]> =
                by_score[..MAX_CALL_OPTIONS].iter().map(|x| x.1).collect();
            keep.sort_unstable();
            options = keep.into_iter().map(|k| options[k]).collect();
        }
        options
    }

    /// Decides a call together with the provisional calls of its class at its node.
    fn call(&mut self, s: &Seen, at: Time, class: u64) {
        let Some(mut node) = self.nodes.remove(&s.src) else {
            return;
        };
        let new = Provisional {
            id: s.id,
            class,
            at,
            task: None,
            decision: Decision::default(),
            learn: SmallVec::new(),
        };
        self.resolve(&mut node, class, Some(new));
        self.nodes.insert(s.src, node);
    }

    /// Decides the provisional calls of `class` at `node` again, with `new` among them.
    fn resolve(&mut self, node: &mut Node, class: u64, new: Option<Provisional>) {
        let mut set = node.provisional.remove(&class).unwrap_or_default();
        if set.len() >= MAX_PROVISIONAL {
            // The oldest is final where it is.
            let oldest = set.remove(0);
            self.finish(node, oldest);
        }
        // Take the provisional calls out of their tasks: they are decided again.
        for p in &set {
            if let Some((tid, pid)) = p.task {
                unassign(node, p.id, tid, pid, p.class);
            }
        }
        set.extend(new);
        if set.is_empty() {
            return;
        }
        // Columns: (task id, parent id) slots, two copies each (the second at the
        // same-child penalty); a slot a final call of the class holds has only the second.
        let mut slots: Vec<(u64, u64)> = Vec::new();
        let mut per_call: Vec<SmallVec<[CallOption; 8]>> = Vec::with_capacity(set.len());
        for p in &set {
            let options = self.call_options(node, p.at, class);
            for o in &options {
                let key = (node.tasks[o.0].id, o.2);
                if !slots.contains(&key) {
                    slots.push(key);
                }
            }
            per_call.push(options);
        }
        let chosen: Vec<Option<usize>> = if set.len() == 1 {
            // One call: the best option, or spontaneous.
            let empty = [None];
            let best = (0..per_call[0].len())
                .map(|k| {
                    (
                        k,
                        self.conditional(node, class, &set, &per_call, &empty, 0, k),
                    )
                })
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .filter(|b| b.1 > SPONTANEOUS);
            vec![best.map(|b| b.0)]
        } else {
            self.assign.clear(slots.len() * 2);
            for options in &per_call {
                self.assign.row(COST_OFFSET - SPONTANEOUS);
                for o in options {
                    let key = (node.tasks[o.0].id, o.2);
                    let Some(c) = slots.iter().position(|k| *k == key) else {
                        continue;
                    };
                    let held = node.tasks[o.0].kids.contains(&(o.2, class));
                    if !held {
                        self.assign.edge(2 * c, COST_OFFSET - o.1);
                    }
                    self.assign.edge(2 * c + 1, COST_OFFSET - o.1 - SAME_CHILD);
                }
            }
            let columns = self.assign.solve();
            let mut chosen: Vec<Option<usize>> = per_call
                .iter()
                .zip(columns)
                .map(|(options, &col)| {
                    (col != NONE)
                        .then(|| {
                            let key = slots[col as usize / 2];
                            options
                                .iter()
                                .position(|o| (node.tasks[o.0].id, o.2) == key)
                        })
                        .flatten()
                })
                .collect();
            // The order prior depends on which tasks earlier calls took (a task that took
            // a call of this step no longer waits for one): refine the matching by
            // exchanging the tasks of two calls while that makes the whole likelier.
            if set.len() <= MAX_REFINED && self.rho_of(class) < 0.999 {
                self.refine(node, class, &set, &per_call, &mut chosen);
            }
            chosen
        };
        // Each option's score given the others' choices: a slot another call of the class
        // holds (a final one, or one of the set) costs the same-child penalty, and the order
        // prior ranks the tasks still waiting. The choices are then each call's best given
        // the others, and their probabilities say so.
        let conditional: Vec<SmallVec<[f64; 8]>> = per_call
            .iter()
            .enumerate()
            .map(|(i, options)| {
                (0..options.len())
                    .map(|k| self.conditional(node, class, &set, &per_call, &chosen, i, k))
                    .collect()
            })
            .collect();
        // Apply: each call into its task, its decision recorded.
        for (((p, options), choice), scores) in
            set.iter_mut().zip(&per_call).zip(chosen).zip(&conditional)
        {
            let mut decision = Decision::default();
            decision
                .options
                .extend(options.iter().zip(scores).map(|(o, s)| (Some(o.2), *s)));
            decision.options.push((None, SPONTANEOUS));
            let pick = choice.unwrap_or(options.len());
            decision.chosen = Some(pick);
            // A client's call that no task it holds caused starts a path.
            decision.from_client = choice.is_none() && !node.served;
            let max = decision
                .options
                .iter()
                .map(|o| o.1)
                .fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = decision.options.iter().map(|o| (o.1 - max).exp()).sum();
            p.learn = options
                .iter()
                .zip(scores)
                .map(|(o, s)| (o.3, o.4, (s - max).exp() / total, o.5))
                .collect();
            p.decision = decision;
            p.task = choice.map(|k| {
                let o = options[k];
                let tid = node.tasks[o.0].id;
                assign_call(node, p.id, o.0, o.2, class, p.at);
                (tid, o.2)
            });
        }
        node.provisional.insert(class, set);
    }

    /// The score of call `i` of `set` taking its option `k`, the others as `chosen`: its
    /// learned delay, the same-child penalty if another call of the class holds the slot,
    /// and the order prior over the tasks still waiting for a call of the class when it was
    /// sent (those whose slot neither a final call nor an earlier one of `set` took).
    #[allow(clippy::too_many_arguments)]
    fn conditional(
        &self,
        node: &Node,
        class: u64,
        set: &[Provisional],
        per_call: &[SmallVec<[CallOption; 8]>],
        chosen: &[Option<usize>],
        i: usize,
        k: usize,
    ) -> f64 {
        let options = &per_call[i];
        // A slot: (the task's index in `node.tasks`, the parent's id).
        let key = |j: usize, c: usize| {
            let o = per_call[j][c];
            (o.0, o.2)
        };
        let held_by = |slot: (usize, u64), before: Option<(Time, usize)>| {
            let (ti, pid) = slot;
            let final_kid = node.tasks[ti].kids.contains(&(pid, class));
            final_kid
                || chosen.iter().enumerate().any(|(j, c)| {
                    j != i
                        && before.is_none_or(|b| (set[j].at, j) < b)
                        && c.is_some_and(|c| key(j, c) == slot)
                })
        };
        let mut score = options[k].1;
        if held_by(key(i, k), None) {
            score += SAME_CHILD;
        }
        let rho = self.rho_of(class);
        if rho < 0.999 {
            let before = Some((set[i].at, i));
            let mut rank = 0;
            let mut n = 0;
            for c in 0..options.len() {
                if c == k || !held_by(key(i, c), before) {
                    if c < k {
                        rank += 1;
                    }
                    n += 1;
                }
            }
            score += order_log_prior(rho, rank, n);
        } else {
            score += order_log_prior(1.0, 0, options.len());
        }
        score
    }

    /// The log-likelihood of the choices `chosen` for `set` (`None`: spontaneous).
    fn objective(
        &self,
        node: &Node,
        class: u64,
        set: &[Provisional],
        per_call: &[SmallVec<[CallOption; 8]>],
        chosen: &[Option<usize>],
    ) -> f64 {
        chosen
            .iter()
            .enumerate()
            .map(|(i, c)| match c {
                Some(k) => self.conditional(node, class, set, per_call, chosen, i, *k),
                None => SPONTANEOUS,
            })
            .sum()
    }

    /// Improves `chosen` by exchanging the tasks of two calls while the whole gets likelier
    /// (at most three passes).
    fn refine(
        &self,
        node: &Node,
        class: u64,
        set: &[Provisional],
        per_call: &[SmallVec<[CallOption; 8]>],
        chosen: &mut [Option<usize>],
    ) {
        let task_of = |j: usize, c: Option<usize>| c.map(|c| node.tasks[per_call[j][c].0].id);
        let option_at = |j: usize, task: Option<u64>| -> Option<Option<usize>> {
            match task {
                None => Some(None),
                Some(t) => per_call[j]
                    .iter()
                    .position(|o| node.tasks[o.0].id == t)
                    .map(Some),
            }
        };
        let mut best = self.objective(node, class, set, per_call, chosen);
        for _ in 0..3 {
            let mut improved = false;
            for a in 0..set.len() {
                for b in a + 1..set.len() {
                    let (ta, tb) = (task_of(a, chosen[a]), task_of(b, chosen[b]));
                    if ta == tb {
                        continue;
                    }
                    let (Some(na), Some(nb)) = (option_at(a, tb), option_at(b, ta)) else {
                        continue;
                    };
                    let (oa, ob) = (chosen[a], chosen[b]);
                    chosen[a] = na;
                    chosen[b] = nb;
                    let score = self.objective(node, class, set, per_call, chosen);
                    if score > best + 1e-9 {
                        best = score;
                        improved = true;
                    } else {
                        chosen[a] = oa;
                        chosen[b] = ob;
                    }
                }
            }
            if !improved {
                break;
            }
        }
    }

    /// Makes a provisional call final: learns from it, and hands its decision out.
    fn finish(&mut self, node: &mut Node, p: Provisional) {
        let chosen = p
            .decision
            .chosen
            .map_or(f64::NEG_INFINITY, |c| p.decision.options[c].1);
        if chosen.is_finite() {
            self.score += chosen;
        }
        let (delays, sizes) = match &mut self.learning {
            Learning::Online => (&mut self.delays, &mut self.sizes),
            Learning::Batch(next) => (&mut next.0, &mut next.2),
        };
        for (i, &(ptype, d, w, bin)) in p.learn.iter().enumerate() {
            if w >= 1e-3 || p.decision.chosen == Some(i) {
                delays.add(ptype, p.class, d, w as f32);
                sizes.parent(ptype, p.class, bin, w as f32);
            }
        }
        let _ = node;
        self.finals.push((p.id, p.decision));
    }

    /// Makes `call` at `node` final, if it is provisional.
    fn finalize_call(&mut self, node: u64, call: u64) {
        let Some(mut n) = self.nodes.remove(&node) else {
            return;
        };
        let mut found = None;
        for set in n.provisional.values_mut() {
            if let Some(i) = set.iter().position(|p| p.id == call) {
                found = Some(set.remove(i));
                break;
            }
        }
        if let Some(p) = found {
            self.finish(&mut n, p);
        }
        self.nodes.insert(node, n);
    }

    /// Makes final the provisional calls at `node` sent more than `revise_ns` before `at`,
    /// and those in any of `tasks` (when given).
    fn finalize_where(&mut self, node: u64, at: Time, tasks: Option<&[u64]>) {
        let Some(mut n) = self.nodes.remove(&node) else {
            return;
        };
        let revise = self.config.revise_ns;
        let mut done = Vec::new();
        for set in n.provisional.values_mut() {
            let mut i = 0;
            while i < set.len() {
                let p = &set[i];
                let old = p.at.saturating_add(revise) < at;
                let in_task = tasks.is_some_and(|ts| p.task.is_some_and(|(t, _)| ts.contains(&t)));
                if old || in_task {
                    done.push(set.remove(i));
                } else {
                    i += 1;
                }
            }
        }
        n.provisional.retain(|_, v| !v.is_empty());
        done.sort_by_key(|p| p.at);
        for p in done {
            self.finish(&mut n, p);
        }
        self.nodes.insert(node, n);
    }

    fn finalize_older(&mut self, node: u64, at: Time) {
        self.finalize_where(node, at, None);
    }

    /// Decides a reply: the task it closes. The provisional calls of the task it closes are
    /// decided again without it (a call is nested in its task: one still out cannot be the
    /// closed task's).
    fn reply(&mut self, s: &Seen, at: Time, to: u64, class: u64) {
        let config = self.config;
        let Some(mut node) = self.nodes.remove(&s.src) else {
            return;
        };
        let provisional: SmallVec<[u64; 8]> =
            node.provisional.values().flatten().map(|p| p.id).collect();
        // The options: (index of the task, score, parent id, parent type, delay).
        let mut options: SmallVec<[CallOption; 8]> = SmallVec::new();
        let oldest = at.saturating_sub(config.task_timeout_ns);
        for (i, t) in node.tasks.iter().enumerate() {
            if t.opened > at {
                break;
            }
            if t.opened < oldest || t.caller != s.dst || t.foreign {
                continue;
            }
            let Some((pt, pid, ptype, bin)) = t.latest(at) else {
                continue;
            };
            let d = delay(pt, at);
            let mut score = self.delays.log_p(ptype, class, d);
            let unanswered = t
                .outstanding
                .iter()
                .filter(|c| !provisional.contains(c))
                .count();
            score += UNANSWERED * unanswered as f64;
            // Its calls as final: the signature without those still out and provisional.
            let signature = t.outstanding.iter().fold(t.signature, |sig, c| {
                match node.provisional.values().flatten().find(|p| p.id == *c) {
                    Some(p) => sig.wrapping_sub(signature_of(p.class)),
                    None => sig,
                }
            });
            score += self.composition.log_p(mix(to, s.src), signature);
            if let (Some(a), Some(b)) = (s.conn, t.conn)
                && a != b
            {
                score += OTHER_CONNECTION;
            }
            options.push((i, score, pid, ptype, d, bin));
        }
        // The order in which the node answers its callers, learned where the structure alone
        // decides: of several waiting tasks only one has all its calls answered. That one
        // being the longest waiting, time after time, says the node serves in order.
        let complete: SmallVec<[usize; 8]> = options
            .iter()
            .enumerate()
            .filter(|(_, o)| node.tasks[o.0].outstanding.is_empty())
            .map(|(k, _)| k)
            .collect();
        if options.len() >= 2 && complete.len() == 1 {
            let e = self.reply_order.entry(s.src).or_insert((0.0, 0.0));
            e.0 += 1.0;
            if complete[0] == 0 {
                e.1 += 1.0;
            }
            if e.0 > 2.0 * f64::from(self.config.memory) {
                e.0 /= 2.0;
                e.1 /= 2.0;
            }
        }
        let rho = self.reply_rho(s.src);
        let n = options.len();
        for (k, o) in options.iter_mut().enumerate() {
            o.1 += order_log_prior(rho, k, n);
        }
        let mut decision = Decision::default();
        decision
            .options
            .extend(options.iter().map(|o| (Some(o.2), o.1)));
        if options.is_empty() {
            decision.options.push((None, SPONTANEOUS));
        }
        // The task closed is the likeliest's; its cause may be another task's arrival.
        let task_best = options
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.1.total_cmp(&b.1.1))
            .map(|(i, _)| i);
        // Cross options: (arrival id, score). Another task's arrival caused the reply as
        // far as such arrivals precede such replies beyond chance (`Coincidence`, counted at
        // every reply against its time shifted into the past).
        let mut cross: SmallVec<[(u64, f64); 8]> = SmallVec::new();
        if let Some(k) = task_best {
            let o = options[k];
            let own = node.tasks[o.0].id;
            let scan = |until: Time| -> SmallVec<[(u64, u64, i64, u64); 8]> {
                node.recent
                    .iter()
                    .rev()
                    .filter(|r| r.0 <= until && until - r.0 <= CROSS_WINDOW_NS)
                    .take(CROSS_SCAN)
                    .map(|r| (r.1, mix(r.2, CROSS_TYPE), delay(r.0, until), r.4))
                    .collect()
            };
            let real = scan(at);
            if let Some(shifted) = null_time(&node, at, s.id) {
                let null = scan(shifted);
                let pairs = |v: &[(u64, u64, i64, u64)]| -> SmallVec<[(u64, i64); 8]> {
                    v.iter().map(|x| (x.1, x.2)).collect()
                };
                let others = |v: &[(u64, u64, i64, u64)]| -> SmallVec<[(u64, i64); 8]> {
                    v.iter()
                        .filter(|x| x.3 != own)
                        .map(|x| (x.1, x.2))
                        .collect()
                };
                self.coincidence
                    .observe(class, &pairs(&real), &pairs(&null));
                self.others.observe(class, &others(&real), &others(&null));
            }
            // The own cause, judged the same way: a server's reply follows its task's latest
            // arrival by a typical delay far more often than chance would; a queue's reply
            // to a pop follows the pop by any wait, as at random times.
            let own_p = self
                .coincidence
                .probability(mix(o.3, CROSS_TYPE), class, o.4)
                .max(MIN_OWN);
            for &(id, ctype, d, task) in &real {
                if id == o.2 || task == own {
                    continue;
                }
                let p = self.others.probability(ctype, class, d);
                if p > CROSS_LEAST && own_p < OWN_AT_CHANCE {
                    cross.push((id, o.1 + (p / own_p).ln()));
                }
            }
        }
        decision
            .options
            .extend(cross.iter().map(|c| (Some(c.0), c.1)));
        let best = decision
            .options
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.1.total_cmp(&b.1.1))
            .map(|(i, _)| i);
        decision.chosen = best;
        let Some(b) = best else {
            self.finals.push((s.id, decision));
            self.nodes.insert(s.src, node);
            return;
        };
        let m = marginal(&decision);
        self.score += m;
        *self.class_scores.entry(class).or_default() += m;
        // Learn from every option by its posterior (soft expectation-maximisation).
        let max = decision.options[b].1;
        let total: f64 = decision.options.iter().map(|o| (o.1 - max).exp()).sum();
        let (delays, composition) = match &mut self.learning {
            Learning::Online => (&mut self.delays, &mut self.composition),
            Learning::Batch(next) => {
                let (d, c, _) = &mut **next;
                (d, c)
            }
        };
        for (k, &(ti, score, _, ptype, d, _)) in options.iter().enumerate() {
            let w = ((score - max).exp() / total) as f32;
            if w < 1e-3 && k != b {
                continue;
            }
            delays.add(ptype, class, d, w);
            composition.add(mix(to, s.src), node.tasks[ti].signature, w);
        }
        // A cross cause closes the likeliest task all the same.
        let cross_cause = b >= options.len() && !options.is_empty();
        if cross_cause {
            self.tally.cross_replies += 1;
        }
        let chosen_task = if cross_cause {
            task_best.map(|k| options[k].0)
        } else {
            options.get(b).map(|o| o.0)
        };
        self.finals.push((s.id, decision));
        let Some(ti) = chosen_task else {
            self.nodes.insert(s.src, node);
            return;
        };
        let task = node.tasks.remove(ti);
        if !task.foreign {
            let mut calls: SmallVec<[(u64, usize); 4]> = SmallVec::new();
            for &(_, c) in &task.kids {
                match calls.iter_mut().find(|x| x.0 == c) {
                    Some(x) => x.1 += 1,
                    None => calls.push((c, 1)),
                }
            }
            self.repeats.add(task.class, &calls);
            self.durations.add(task.class, delay(task.opened, at));
        }
        // Its provisional calls go elsewhere.
        let moved: SmallVec<[u64; 4]> = node
            .provisional
            .iter()
            .filter(|(_, set)| {
                set.iter()
                    .any(|p| p.task.is_some_and(|(t, _)| t == task.id))
            })
            .map(|(c, _)| *c)
            .collect();
        for c in moved {
            self.resolve(&mut node, c, None);
        }
        self.nodes.insert(s.src, node);
        // The caller learns which of its calls this answers.
        let caller = self.nodes.entry(s.dst).or_default();
        match caller.unpaired.remove(&s.id) {
            Some((rt, rtype, rbin)) => {
                self.answer(s.dst, task.id, cross_cause, rt, s.id, rtype, rbin);
            }
            None => {
                caller.paired.insert(s.id, (task.id, at, cross_cause));
            }
        }
    }

    /// Makes every provisional call final (at the end of the input).
    pub fn finalize_all(&mut self) {
        let keys: Vec<u64> = self.nodes.keys().copied().collect();
        for k in keys {
            self.finalize_where(k, Time::MAX, None);
        }
    }

    /// Forgets what is older than `task_timeout_ns` before each node's newest local time.
    pub fn expire(&mut self) {
        // Under memory pressure, at most the governor's cap (`shed`).
        let timeout = shed::capped(self.config.task_timeout_ns);
        let max_delay = shed::capped(self.config.max_delay_ns);
        let mut expired = 0;
        self.nodes.retain(|_, node| {
            let before = node.newest.saturating_sub(timeout);
            // Provisional calls of an expiring task stay until they are final.
            let n = node.tasks.len();
            let held: SmallVec<[u64; 8]> = node
                .provisional
                .values()
                .flatten()
                .filter_map(|p| p.task.map(|t| t.0))
                .collect();
            let idle = node.newest.saturating_sub(max_delay);
            node.tasks.retain(|t| {
                (t.newest() >= before && !(t.foreign && t.newest() < idle)) || held.contains(&t.id)
            });
            expired += (n - node.tasks.len()) as u64;
            node.calls.retain(|_, (_, t)| *t >= before);
            let n = node.paired.len();
            node.paired.retain(|_, (_, t, _)| *t >= before);
            expired += (n - node.paired.len()) as u64;
            node.unpaired.retain(|_, (t, _, _)| *t >= before);
            node.served
                || !node.tasks.is_empty()
                || !node.calls.is_empty()
                || !node.paired.is_empty()
                || !node.unpaired.is_empty()
                || !node.provisional.is_empty()
        });
        self.expired += expired;
    }

    /// How many tasks are open, over all nodes.
    pub fn open_tasks(&self) -> usize {
        self.nodes.values().map(|n| n.tasks.len()).sum()
    }
}

/// The log-likelihood of a departure's delay summed over its options (not only the one
/// taken): what a model of the data is judged by. The score of the option taken alone
/// rewards a model for making its choices look certain (a strong order prior) whether or
/// not they are right.
fn marginal(d: &Decision) -> f64 {
    let max = d
        .options
        .iter()
        .map(|o| o.1)
        .fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    max + d
        .options
        .iter()
        .map(|o| (o.1 - max).exp())
        .sum::<f64>()
        .ln()
}

/// Inserts `task` among `node`'s tasks in order of arrival (arrivals come nearly in order:
/// from the back).
fn insert_task(node: &mut Node, task: Task) {
    let pos = node
        .tasks
        .iter()
        .rposition(|t| t.opened <= task.opened)
        .map_or(0, |p| p + 1);
    node.tasks.insert(pos, task);
}

/// The time before a departure (`id`, at `at`) whose arrivals stand for chance (the null
/// of [`Coincidence`]): up to two cross windows back, by the id; `None` where `node`'s
/// recent arrivals do not reach back over the window before it.
fn null_time(node: &Node, at: Time, id: u64) -> Option<Time> {
    let shifted = at.saturating_sub(CROSS_WINDOW_NS + id % CROSS_WINDOW_NS);
    let covered = node.recent.len() < CROSS_RECENT
        || node
            .recent
            .front()
            .is_some_and(|r| r.0.saturating_add(CROSS_WINDOW_NS) <= shifted);
    covered.then_some(shifted)
}

/// Notes an arrival among `node`'s recent ones.
fn remember(node: &mut Node, a: (Time, u64, u64, u8, u64)) {
    node.recent.push_back(a);
    let newest = node.recent.iter().map(|r| r.0).max().unwrap_or(a.0);
    while node.recent.len() > CROSS_RECENT
        || node
            .recent
            .front()
            .is_some_and(|r| r.0.saturating_add(RECENT_NS) < newest)
    {
        node.recent.pop_front();
    }
}

/// Puts call `id` of `class`, sent at `at`, into the task at index `ti` with parent `pid`.
fn assign_call(node: &mut Node, id: u64, ti: usize, pid: u64, class: u64, at: Time) {
    let task = &mut node.tasks[ti];
    task.kids.push((pid, class));
    task.signature = task.signature.wrapping_add(signature_of(class));
    task.outstanding.push(id);
    let tid = task.id;
    node.calls.insert(id, (tid, at));
}

/// Takes call `id` of `class` out of task `tid`, where it had parent `pid`.
fn unassign(node: &mut Node, id: u64, tid: u64, pid: u64, class: u64) {
    if let Some(task) = node.tasks.iter_mut().find(|t| t.id == tid) {
        if let Some(k) = task.kids.iter().position(|k| *k == (pid, class)) {
            task.kids.remove(k);
        }
        task.signature = task.signature.wrapping_sub(signature_of(class));
        task.outstanding.retain(|c| *c != id);
    }
    node.calls.remove(&id);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(id: u64, src: u64, dst: u64, role: Role, send: Time, recv: Time) -> Seen {
        Seen {
            id,
            src,
            dst,
            role,
            send_local: Some(send),
            recv_local: Some(recv),
            conn: None,
            bytes: None,
        }
    }

    const C: u64 = 1;
    const A: u64 = 2;
    const B: u64 = 3;

    /// A client calls A, A calls B, B answers, A replies: every parent is the latest arrival
    /// of the one task.
    #[test]
    fn a_call_and_its_reply_follow_their_task() {
        let mut m = Model::new(ModelConfig::default());
        let mut finals = Vec::new();
        let req = seen(10, C, A, Role::Request, 0, 100);
        m.depart(&req);
        m.take_final(&mut finals);
        assert!(finals[0].1.from_client);
        m.arrive(&req);
        let call = seen(11, A, B, Role::Request, 200, 300);
        m.depart(&call);
        m.arrive(&call);
        let answer = seen(12, B, A, Role::Response, 400, 500);
        m.depart(&answer);
        m.arrive(&answer);
        let reply = seen(13, A, C, Role::Response, 600, 700);
        m.depart(&reply);
        m.arrive(&reply);
        m.take_final(&mut finals);
        let parent = |id| finals.iter().find(|f| f.0 == id).and_then(|f| f.1.parent());
        assert_eq!(parent(11), Some(10));
        assert_eq!(parent(12), Some(11));
        assert_eq!(parent(13), Some(12));
        assert_eq!(m.open_tasks(), 0);
    }

    /// Two requests from the client; the reply goes to the task whose calls are answered.
    #[test]
    fn a_reply_closes_a_task_whose_calls_are_answered() {
        let mut m = Model::new(ModelConfig::default());
        let r1 = seen(1, C, A, Role::Request, 0, 0);
        let r2 = seen(2, C, A, Role::Request, 10, 10);
        for r in [&r1, &r2] {
            m.depart(r);
            m.arrive(r);
        }
        let call = seen(3, A, B, Role::Request, 11, 12);
        m.depart(&call);
        m.arrive(&call);
        let reply = seen(4, A, C, Role::Response, 20, 21);
        m.depart(&reply);
        m.finalize_all();
        let mut out = Vec::new();
        m.take_final(&mut out);
        let parent = |id| out.iter().find(|f| f.0 == id).and_then(|f| f.1.parent());
        let (called, replied) = (parent(3), parent(4));
        assert!(called.is_some());
        assert_ne!(replied, called);
        // Open: A's task awaiting B, and B's task serving the call.
        assert_eq!(m.open_tasks(), 2);
    }

    /// Two tasks asked in turn, two calls of one class: decided together, each task takes
    /// one, in the order whose delays fit both (with delays learned near 2 ms).
    #[test]
    fn two_calls_of_a_class_go_to_two_tasks_jointly() {
        let ms = 1_000_000;
        let mut m = Model::new(ModelConfig::default());
        // Teach: calls to B 2 ms after a request.
        let mut id = 100;
        for i in 0..200 {
            let t = i * 100 * ms;
            let r = seen(id, C, A, Role::Request, t, t);
            m.depart(&r);
            m.arrive(&r);
            let c = seen(id + 1, A, B, Role::Request, t + 2 * ms, t + 2 * ms);
            m.depart(&c);
            m.arrive(&c);
            let a = seen(id + 2, B, A, Role::Response, t + 3 * ms, t + 3 * ms);
            m.depart(&a);
            m.arrive(&a);
            let reply = seen(id + 3, A, C, Role::Response, t + 4 * ms, t + 4 * ms);
            m.depart(&reply);
            m.arrive(&reply);
            id += 4;
        }
        let t = 1_000_000 * ms;
        let r1 = seen(1, C, A, Role::Request, t, t);
        let r2 = seen(2, C, A, Role::Request, t + ms / 2, t + ms / 2);
        for r in [&r1, &r2] {
            m.depart(r);
            m.arrive(r);
        }
        // The first call fits the second request best on its own (1.9 ms), but then the
        // second call would be 1.6 ms after nothing: jointly, FIFO.
        let c1 = seen(3, A, B, Role::Request, t + 2 * ms + ms / 10, t + 2 * ms);
        let c2 = seen(4, A, B, Role::Request, t + 2 * ms + ms / 2, t + 2 * ms);
        m.depart(&c1);
        m.depart(&c2);
        m.finalize_all();
        let mut out = Vec::new();
        m.take_final(&mut out);
        let parent = |id| out.iter().find(|f| f.0 == id).and_then(|f| f.1.parent());
        assert_eq!((parent(3), parent(4)), (Some(1), Some(2)));
    }

    #[test]
    fn open_tasks_are_forgotten_after_the_timeout() {
        let config = ModelConfig {
            task_timeout_ns: 1_000,
            ..ModelConfig::default()
        };
        let mut m = Model::new(config);
        let r = seen(1, C, A, Role::Request, 0, 0);
        m.arrive(&r);
        let later = seen(2, C, A, Role::Request, 5_000, 5_000);
        m.arrive(&later);
        m.expire();
        assert_eq!(m.open_tasks(), 1);
        assert_eq!(m.expired(), 1);
    }
}
