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
//! arrival. An answered call is held until its task goes on from the answer, and a reply of
//! another task that follows the answer better than its own latest arrival takes the call
//! over (where a nesting ends tells whose call it was: `model/answered.rs`). A decision
//! reaches the output once it is final ([`Model::take_final`]).
//!
//! State: per node, its open tasks (freed when they reply, or `task_timeout_ns` after their
//! newest arrival), its provisional calls (at most [`MAX_PROVISIONAL`] per class), its
//! answered calls held (at most those answered within `revise_ns`), the calls
//! awaiting answers and the pairings told by callees (freed when the answer arrives, or
//! after the same timeout), and at a node whose replies carry other tasks' arrivals (a job
//! queue) the jobs not yet handed out and what its connections are (`model/queue.rs`: bounded by
//! count and age). Memory follows the requests in flight, never the length of the input.

use smallvec::SmallVec;

use causeway_sources::{Time, shed};

use super::evidence::{
    Coincidence, Composition, Delays, Durations, Evidence, Repeats, SizeFact, Sizes, delay, fade,
    order_log_prior, size_bin,
};
use crate::FastMap;
use crate::paths::assign::{Assign, NONE};

mod answered;
mod arrive;
mod call;
mod node;
mod queue;
mod reply;
#[cfg(test)]
mod tests;

use node::*;
use queue::{Queue, conn_key, logit};

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
/// The least a call's option counts for whose latest arrival explains the call no more than
/// chance does ([`Model::call_coincidence`]).
const CALL_LEAST: f64 = 0.2;
/// The recent arrivals before a call whose coincidences with it are counted.
const CALL_SCAN: usize = 32;
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

/// A task's calls, (parent id, class) in the order they joined it, with counts by call and
/// by class once they are many, so that a lookup costs the same however many a task holds
/// (a client's task that chains its calls can hold thousands; scanning them made a busy
/// node-name trace cost minutes).
#[derive(Clone, Debug, Default)]
struct Kids {
    list: SmallVec<[(u64, u64); 4]>,
    /// Kept from [`Kids::INDEX_FROM`] calls on.
    index: Option<Box<KidCounts>>,
}

/// Counts of a task's calls by (parent id, class), and by class.
type KidCounts = (FastMap<(u64, u64), u32>, FastMap<u64, u32>);

impl Kids {
    /// Calls from which lookups go through the counts rather than the list.
    const INDEX_FROM: usize = 16;

    fn push(&mut self, kid: (u64, u64)) {
        self.list.push(kid);
        if let Some(index) = self.index.as_mut() {
            *index.0.entry(kid).or_default() += 1;
            *index.1.entry(kid.1).or_default() += 1;
        } else if self.list.len() >= Self::INDEX_FROM {
            let mut index = (FastMap::default(), FastMap::default());
            for &k in &self.list {
                *index.0.entry(k).or_default() += 1;
                *index.1.entry(k.1).or_default() += 1;
            }
            self.index = Some(Box::new(index));
        }
    }

    /// Takes out the first occurrence of `kid`, if held.
    fn remove(&mut self, kid: (u64, u64)) {
        let Some(i) = self.list.iter().position(|k| *k == kid) else {
            return;
        };
        self.list.remove(i);
        if let Some(index) = self.index.as_mut() {
            if let Some(n) = index.0.get_mut(&kid) {
                *n -= 1;
                if *n == 0 {
                    index.0.remove(&kid);
                }
            }
            if let Some(n) = index.1.get_mut(&kid.1) {
                *n -= 1;
                if *n == 0 {
                    index.1.remove(&kid.1);
                }
            }
        }
    }

    fn contains(&self, kid: (u64, u64)) -> bool {
        match self.index.as_ref() {
            Some(index) => index.0.contains_key(&kid),
            None => self.list.contains(&kid),
        }
    }

    /// How many calls of `class` it holds.
    fn of_class(&self, class: u64) -> usize {
        match self.index.as_ref() {
            Some(index) => index.1.get(&class).map_or(0, |n| *n as usize),
            None => self.list.iter().filter(|k| k.1 == class).count(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &(u64, u64)> {
        self.list.iter()
    }
}

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
    /// calls, in time order.
    arrivals: SmallVec<[(Time, u64, u64, u8); 4]>,
    /// Calls awaiting their answers.
    outstanding: SmallVec<[u64; 2]>,
    /// (parent id, class) of every call so far.
    kids: Kids,
    /// A multiset hash of the classes of its calls so far.
    signature: u64,
    /// Opened by an answer caused by another connection's message (a queue's job reaching
    /// a worker): nothing replies to it, and it ends when idle for `max_delay_ns`.
    foreign: bool,
}

impl Task {
    /// The latest arrival at or before `t` (of several at that time, the last to come).
    /// `arrivals` is in time order.
    fn latest(&self, t: Time) -> Option<(Time, u64, u64, u8)> {
        let i = self.arrivals.partition_point(|a| a.0 <= t);
        i.checked_sub(1).map(|i| self.arrivals[i])
    }

    fn newest(&self) -> Time {
        self.arrivals.last().map_or(self.opened, |a| a.0)
    }

    /// How long after its latest arrival the task may still take a call: `max_delay_ns`, or
    /// for a task another task's arrival opened the cross window, as far as
    /// [`Model::client_call`] looks for that arrival.
    fn reach_ns(&self, max_delay_ns: Time) -> Time {
        if self.foreign {
            CROSS_WINDOW_NS
        } else {
            max_delay_ns
        }
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
    /// Its options as first weighed, in the tasks' order (`None`: not yet, or a task opened
    /// or an arrival came at or before its send since): deciding it again reads only what
    /// other calls change.
    weighed: Option<Vec<Weighed>>,
    /// Its answer once arrived (receive time, id, type, size class): the call is then held
    /// in `Node::answered` (`model/answered.rs`).
    answer: Option<(Time, u64, u64, u8)>,
}

/// A provisional call's option as first weighed: the task (its id and receive time, by
/// which it is found again), the parent (id, type, size class), the delay from it, and the
/// score of all that does not change while the call is provisional (the learned delay,
/// sizes and the task's age, as learned when the call was sent).
#[derive(Clone, Copy, Debug)]
struct Weighed {
    task: u64,
    opened: Time,
    pid: u64,
    ptype: u64,
    delay: i64,
    bin: u8,
    score: f64,
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
    /// Answered calls whose decision waits for their task to go on from the answer
    /// (`model/answered.rs`).
    answered: Vec<Provisional>,
    /// The latest arrivals (receive time, id, type, size class, task, connection), for
    /// replies caused by another task's arrival; at most [`CROSS_RECENT`], of the last
    /// [`CROSS_WINDOW_NS`].
    recent: std::collections::VecDeque<(Time, u64, u64, u8, u64, Option<u64>)>,
    /// What the node knows as a queue, once one of its replies carried another task's
    /// arrival.
    queue: Option<Box<Queue>>,
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
    /// Coincidences of each arrival type with a server's calls of each class: how far an
    /// arrival at a delay before a call explains it beyond chance (a call follows its own
    /// task's latest arrival at its typical delay time after time; another task's answer
    /// lies just before it only as often as chance puts one there).
    call_coincidence: Coincidence,
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
    /// Answered calls that a reply of another task took over (`model/answered.rs`).
    pub nesting_moves: u64,
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
/// A call's options, at most [`MAX_CALL_OPTIONS`].
type CallOptions = SmallVec<[CallOption; MAX_CALL_OPTIONS]>;
/// A recent arrival seen from a departure: (receive time, id, type, size class, delay to
/// the departure).
type RecentArrival = (Time, u64, u64, u8, i64);
