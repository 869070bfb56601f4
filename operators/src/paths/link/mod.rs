//! `link` (WAP5 §5.1, steps 1 and 2): for every message a node sends, the messages it received
//! shortly before that may have caused it, each with a probability.
//!
//! - **Input**: reconciled [`Message`]s (clock-corrected where possible).
//! - **Output**: one [`Linked`] per message: its candidate parents with their probabilities,
//!   the probability that it was spontaneous, and the most likely option.
//! - **Exchange**: every message goes twice, by node: as an arrival (a possible parent) to the
//!   worker of its receiver, and as a child to the worker of its sender. A node's arrivals and
//!   departures thus meet on one worker.
//! - **WAP5's rule**: a message B→C sent at `s` (B's clock) has as candidate parents the
//!   messages into B received at `r` in `[s − x, s]` (B's clock; `x` is `max_delay_ns`);
//!   being spontaneous weighs `e^(−y)`, as a delay of `y·d`; weights are normalised to
//!   probabilities. Beyond WAP5, where delays are learned, that weight is scaled by the
//!   odds that a call of its type (node and callee) is spontaneous, learned from the calls
//!   (`Spontaneity`, `spontaneity.rs`): a proxy's forwards and a server's queries, never
//!   spontaneous, keep a late parent. With [`DelayModel::Exponential`] a candidate weighs
//!   `e^(−(s − r)/d)`, `d` the mean causal delay of B→C: WAP5's estimate, the mean over a
//!   sliding window (`delay_window_ns`) of the smallest delay preceding each B→C message, or
//!   ([`DelayEstimate::Weighted`]) the mean of the candidate delays weighted by their
//!   probabilities. A message whose sender side was not observed (B untraced) may only have
//!   been caused by a message from its own receiver: B→A's candidates are the A→B messages A
//!   sent within `x` before A received B→A, in A's clock (A→B→A). Messages a client sends are
//!   spontaneous (clients start paths; see [`crate::ports`]).
//! - **Delays learned** ([`DelayModel::Learned`], the default): a candidate weighs the
//!   probability that a candidate of its link type with its delay is the parent
//!   ([`CausalDensity`], Project 5's scoreboard against a null): every send is scanned twice,
//!   at its time and at a time about `null_shift_ns` earlier where no send is, and how many more
//!   candidates of a type lie at a delay at the send than at the shifted time is what the
//!   parents add there. Nothing learned feeds back into the learning, so a busy node cannot
//!   settle on a wrong delay (expectation-maximisation did, at Project 5's parallelism 45:
//!   the most recent candidates), and a type that is often a candidate but never the parent
//!   learns that. WAP5's exponential stands in while a type has few samples; it prefers the
//!   most recent candidate, and on a busy node the cause is rarely the most recent message.
//! - **Tasks** (beyond WAP5, for request/response connections; Project 5's nesting): a node
//!   serves each request as a task: the request, the calls it makes for it and their answers
//!   (an answer belongs to its call's task), and the reply. A message sent back on the
//!   connection that last brought a request in, with no send on it since, is the reply: its
//!   cause is the latest message of that task, and it is never spontaneous. Any other message
//!   is caused by the latest message of some task (a task's earlier messages caused its
//!   earlier sends) that is not answered before the message's own answer comes back (a call
//!   is nested in its task); a message that caused a send already weighs `1/(n + 1)²` after
//!   `n` of them (Project 5's overlapping-child penalty); one that belongs to no task weighs a
//!   tenth, and causes no call (an answer to a call that started a path itself is what a
//!   client does next, not a cause). A call from a node to one of its own endpoints is not
//!   nested in a task served at that endpoint: on one host (loopback) clients and their
//!   server are one node, and their requests would otherwise chain through the server's
//!   open ones. A call also weighs how typical the time from its answer to its task's reply is
//!   (learned like the delays), or, if the task went on calling, how typical the best next
//!   call is: its delay after the answer ([`CausalDensity::relative`]) times how typical the
//!   time from its own answer to the reply is (one call of look-ahead, among the calls the
//!   node sent between the answer and the reply, whose answers came back before it). This
//!   tells a task that answers right after the call from one that goes on calling, without
//!   taking a task that goes on for one that has stopped; the gap densities learn the share
//!   of each gap that is a direct reply. A reply carries whether its task as linked may be
//!   missing a call ([`Linked::typical`]): not if no call of its node was made and answered
//!   between the task's latest message and the reply (a *clean* gap); else as far as its
//!   delay is untypical of the complete tasks of its type (learned from clean gaps, each
//!   weighed by how rarely a window that long is clean, tested at a shifted time; a type
//!   never seen clean, as far as its gaps are clean less often than windows as long:
//!   [`TypicalDelay::clean_share`]), and, if its task's latest message is an answer and
//!   the calls given to the task were in doubt, as far as its gap is evidence against
//!   them, or above 1 as far as it bears them out (`Linker::reply_gap`: the gaps learned
//!   against the time-shifted null, not from the links, per reply type and number of
//!   calls, and by the reply's size class too, and pooled over the numbers for a number too
//!   rare to have been learned).
//!   `paths` weighs its instances by it. On the generator's earlier "@45" traces (28
//!   candidate parents per call by Project 5's measure) a web server's calls got their true
//!   parent 37.4% of the time with the look-ahead, 30.4% without.
//! - **Sizes** (beyond WAP5 and Project 5): a learned candidate's odds of being the parent
//!   are multiplied by what three sizes say, each learned per link type against the
//!   time-shifted null like the delays, so that nothing learned feeds back: how much likelier
//!   a call whose answer has the size of this one's is than calls in general to have a parent
//!   of the candidate's type ([`SizeEvidence`]: an application server's second query, answered
//!   with 8 kB, follows an answer, while its first queries, answered with 4 or 30 kB, follow
//!   requests), and how much likelier the candidate's own size is among the type's parents
//!   than among its other candidates ([`ParentSizes`]: a login's request at an
//!   authentication server against a session check's), and, for a candidate whose task has
//!   replied, how much likelier that reply's size is among the tasks of the type's parents
//!   than among its other candidates', given the size of the call's answer ([`ReplySizes`]:
//!   a reply is often made of what its calls brought back, as a report's 45 kB reply of its
//!   application call's 40 kB answer, where a dynamic page replies 12 kB after 9 kB). Types
//!   are not split by size (that was tried: kinds whose sizes straddle a class bound lost
//!   half their samples). On the
//!   generator's multi-tier preset at parallelism 45, a report's second query got its true
//!   parent 62% of the time with sizes, 39% without, and the largest per-node delay error
//!   fell from 4.5%, 4.8% and 4.5% to 4.3%, 4.1% and 3.5% (seeds 1-3). The reply sizes then
//!   took seed 2's truncated login paths from 345 and 331 expected to 264 and 214, below
//!   the report paths (312-383 expected, 208-313 before); with them and the reply gaps
//!   learned since a task's latest call (`Linker::reply_gap`), the false-negative criterion
//!   held on seeds 1-8 by both rankings, where it had failed on seeds 2, 4 and 8. A trace
//!   without sizes (a message trace with no `bytes` column) reads 1 throughout.
//! - **Joint decision** (beyond WAP5 and Project 5, which decide each message on its own): a
//!   node's calls are decided together over match windows (`match_window_ns`, aligned to
//!   multiples of it). In rounds, every call not decided yet is weighed as above and the calls
//!   are assigned to their candidates by one minimum-cost assignment ([`Assign`]; cost: the
//!   negative log probability), each candidate taking one call (a second and third at Project
//!   5's penalty), a call free to stay undecided at the cost of being spontaneous. The answers
//!   to undecided calls count as candidates too (weighed by their learned densities): a call
//!   given one waits for the next round, when that call is decided and its answer has joined
//!   its task. The others are decided, and the rounds repeat while any is. Then, in time order,
//!   the replies and the calls left are decided on their own, and the densities learn from the
//!   decided calls weighed again as of their time, as if decided one by one (learning from the
//!   rounds' view would teach them what a call's candidates look like before the calls it
//!   follows are decided). Greedily, in time order, a call takes the candidate that fits it
//!   best and leaves the next call the rest: on Project 5's multi-tier traces a web server's
//!   calls got their true parent 88.6% of the time at parallelism 5 and 17.8% at 45, jointly
//!   90.6% and 30.4% (`tools/parents.py`; with the look-ahead above, 93.7% and 37.4%). A
//!   type's calls take
//!   part only once the densities of all their candidates' types have seen
//!   `MATCH_SAMPLES` (100) candidates (before, the exponential alone would decide them).
//! - **Timing**: a message is linked once the frontier is `lateness_ns` (how late upstream
//!   windows may emit it) plus the order slack past it, so that parents whose event times
//!   carry their senders' residual clock error are in; arrivals and the sends themselves are
//!   taken the order slack earlier, in one order with the children, so that `link` sees the
//!   answers and replies that come within that slack after a message. The slack is learned
//!   (`lookahead.rs`: the longest task durations and the clock error the event times show;
//!   `order_slack_ns` at most, and until learned), and what a message is
//!   linked against does not depend on how the frontier moved (nor, but for the port
//!   classifier's per-worker view, on the number of workers: see [`Ports`]). Candidates below `min_probability` are dropped unless they are the
//!   most likely option; at most `max_candidates` (the most recent) are kept.
//! - **Warm start** (beyond WAP5; `warmup_ns`, 0 by default here, 2 s from the command
//!   line): until the frontier has passed the first `warmup_ns` of event time, nothing is
//!   linked and the inputs are held; the warm-up is then linked once to learn from (that
//!   output is dropped), and everything held is linked again, starting afresh but for what
//!   was learned (causal, gap, reply-gap and typical-reply densities, size and reply-size
//!   evidence, port evidence). Early
//!   decisions are otherwise made while the densities have seen little (WAP5's exponential,
//!   which prefers the most recent candidate, decides a type's calls until it has seen
//!   `MATCH_SAMPLES`): on the generator's multi-tier trace at parallelism 45 (seed 2), 83
//!   of the 418 expected instances of a truncated login pattern came from its first
//!   sixteenth.
//!   With a 2 s warm start the per-node delay error there fell from 5.8%, 7.2% and 4.2% to
//!   4.5%, 4.8% and 4.5% (generator seeds 1-3). Which inputs the warm-up covers depends
//!   neither on timing nor on the number of workers (`WarmStart`), but what it learned
//!   does a little: each worker's port classifier sees only its own nodes (which leaves the
//!   expected counts a cold start gives different in the low digits), and the gap densities
//!   carry that into the first decisions after the warm-up (on a 100,000-message trace at
//!   parallelism 1.6, 7 of 26,283 instances in other patterns on two workers than on one).
//! - **State**: the sends of each node's open match window (closed, decided and freed as the
//!   frontier passes the window's end; the capability is held at the first open window's
//!   start); per node, the arrivals of the last `x` plus the allowed lateness, and per
//!   connection its send and receive times; per task its arrivals; per node pair the delay
//!   estimate's buckets over `delay_window_ns`; per node its sends of the last `2·(x +
//!   lateness)`, each with its answer; per link type its delay and gap densities (dropped
//!   when the type is unseen for `delay_window_ns`), and per reply type its clean gaps and
//!   shifted windows (likewise), and per reply type and number of calls its learned gaps
//!   after answers (likewise); per node its answers of the last `2·(x + keep_margin)`; the
//!   endpoints' port evidence
//!   ([`Ports`]), forgotten after `idle_ns`; per arrival its size, freed with the arrivals;
//!   per link type its size evidence and reply sizes (dropped as the densities are), and per
//!   task its reply's size. All but the densities and ports are freed once
//!   linking (the time below which every message is linked, not the frontier, which runs
//!   ahead of it by as much as the input is ahead) is `2·(x + keep_margin)` past them. A
//!   density or delay estimate unseen for `delay_window_ns`, and a node's first-arrival time after a lull, are forgotten when next
//!   used, and swept only once every later message would forget them too, so that what a
//!   message is weighed by does not depend on when the sweeps ran. `x` is learned
//!   (`Linker::learn_horizon`): twice the longest wait of the sending nodes, each twice the
//!   99.9th percentile of the delays of the causes taken for its sends (per node, a
//!   quarter-octave histogram, [`ChildWaits`]), at most `max_delay_ns`, and `max_delay_ns`
//!   while any sending node has too little evidence; it grows by at most twice itself plus
//!   the lateness at a time, so that a sweep never drops what a later scan looks for, and
//!   the connections that carried more than one exchange, and the two latest requests of
//!   every connection, are kept at least a quarter of `2·(max_delay_ns + keep_margin)` (a
//!   persistent connection is told by a request within that of another; a connection per
//!   request goes with the rest). Memory follows the message
//!   rate times the learned `x` and the lateness, never the length of the input (on the
//!   linking harness's parallelism-20 trace, 63,000 messages a second of event time with
//!   millisecond causes: 775 MiB peak at `x` = 2 s, 592 MiB learned). During a warm start, the inputs held
//!   (at most `warmup_max`), as the reorder buffers would hold them, and for its first pass a
//!   copy of those of the warm-up, freed with it. Under memory pressure
//!   ([`causeway_sources::shed`]) the lateness, the order slack, `x` in what is kept and
//!   the sweeps' interval are at most the governor's cap, and a warm start ends at once.
//! - **Cost**: the warm-up is linked twice. Per message, a hash (and one per candidate
//!   weighed or learned from, for its size), binary searches on its
//!   connection's sends and receives,
//!   and two scans of its sender's tasks open at a time (at the send and at the null's
//!   time): the tasks not yet answered, and, by duration class, those answered since
//!   (`NodeTasks`: at most about twice as many as are open then, whatever the node's
//!   request rate); each task found open costs a map lookup or two. A call in a match
//!   window is weighed once per round it takes part in (most are decided in the first or
//!   second) and once more to learn from, plus its share of
//!   the window's assignment (a shortest-path search per call, which ends at the first free
//!   candidate it reaches). A reply looks at its task, and at its node's sends in its gap
//!   and in the gap shifted (a binary search each, and a scan up to the first call answered
//!   in it, at most `MAX_CLEAN_SCAN`, 1,024, sends); a reply's departure updates the copies on its
//!   task's arrivals (a binary search each). A call whose answer came back also looks at
//!   the sends its node made between the answer and its candidates' latest reply (at most
//!   64), once per weighing, and each candidate at those before its own task's reply. A
//!   reply after an answer, its task's calls in doubt, scans its node's answers of the
//!   100 ms before it and before its shifted time (at most 64 of the kind each), and fits
//!   the learned gaps anew (O(bins)) at most once every 64 replies of its type.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::paths::child_wait::ChildWaits;
use causeway_sources::{Address, Time, shed};
use std::hash::BuildHasher;

use foldhash::fast::FixedState;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::vec::Map;

use crate::FastMap;
use crate::message::{Message, MessageStream};
use crate::paths::assign::Assign;
use crate::paths::density::{
    CausalDensity, DelayDensity, ParentSizes, ReplySizes, SizeEvidence, TypicalDelay,
};
use crate::ports::Ports;
use crate::recent::partition_point_from_back;
use crate::reorder::{Reorder, Touch, prefetch};

mod affinity;
mod candidate;
mod estimate;
mod flush;
mod learn;
mod linker;
mod lookahead;
mod node_tasks;
mod spontaneity;
mod state;
#[cfg(test)]
mod tests;
mod warm;
mod weigh;

use affinity::*;
pub use candidate::TYPICAL_FLOOR;
use candidate::*;
use estimate::*;
use flush::*;
use linker::*;
use lookahead::*;
use node_tasks::*;
use spontaneity::*;
use warm::*;

/// A probability in millionths.
pub type Prob = u32;
/// Probability one.
pub const ONE: Prob = 1_000_000;

/// How `d`, the mean causal delay of a node pair, is estimated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DelayEstimate {
    /// WAP5: mean of the smallest delay preceding each message.
    #[default]
    Smallest,
    /// Mean of the candidate delays weighted by their link probabilities (one round of the
    /// iteration WAP5 §5.1 suggests, carried over the sliding window).
    Weighted,
}

/// How `link` weighs a candidate parent by its delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DelayModel {
    /// WAP5: `e^(−delay/d)`, `d` the node pair's mean causal delay.
    Exponential,
    /// The probability that a candidate of its link type with its delay is the parent, learned
    /// against a time-shifted null ([`CausalDensity`]), starting from WAP5's exponential while
    /// the type has few samples.
    #[default]
    Learned,
}

/// Parameters of `link`.
#[derive(Clone, Copy, Debug)]
pub struct LinkConfig {
    /// `x`: the longest a node holds a message before sending what it caused.
    pub max_delay_ns: Time,
    /// `y`: spontaneity weighs as much as a delay of `y·d` (at even odds; each call type's
    /// learned odds scale it where delays are learned).
    pub spontaneous_factor: f64,
    /// Window over which `d` is estimated.
    pub delay_window_ns: Time,
    /// How `d` is estimated.
    pub estimate: DelayEstimate,
    /// How a candidate is weighed by its delay.
    pub model: DelayModel,
    /// Most candidate parents kept per message.
    pub max_candidates: usize,
    /// Candidates less likely than this are dropped (unless most likely).
    pub min_probability: f64,
    /// How late a message may arrive behind the frontier (what the operators before `link`
    /// emit behind theirs).
    pub lateness_ns: Time,
    /// What `link` keeps beyond `x` (`2·(x + keep_margin)`), which also sets the lull after
    /// which a node's arrivals start afresh and the span that tells a persistent connection.
    /// It was the lateness until `reconcile` and `reconcile.fold` held their capabilities
    /// (2026-12-02), and is still set to what the lateness was: with 0 instead, the pipeline
    /// harness's probability-weighted instance recall fell from 0.942 to 0.927 and its
    /// per-node delay error rose from 0.7% to 1.8% at most.
    pub keep_margin_ns: Time,
    /// Endpoints not seen for this long are forgotten by the port classifier.
    pub idle_ns: Time,
    /// The gap densities and typical reply delays remember about this many messages of their
    /// link type.
    pub type_memory: f64,
    /// The causal delay densities, and the gaps from answers to replies, learned against the
    /// time-shifted null ([`CausalDensity`]), remember about this many sends or replies of
    /// their type: unbiased, but each
    /// the small difference of two large counts on a busy node, they need more than the
    /// others (at Project 5's parallelism 45, 1,000 left the report paths outranked by wrong
    /// ones and their delays 31.7% off).
    pub causal_memory: f64,
    /// A message is linked once the frontier is the order slack past its event time, so that
    /// its causes, whose event times carry their own senders' residual clock error, and the
    /// answers and replies that tell its task are in: learned (`lookahead.rs`), at most this
    /// (and this until learned).
    pub order_slack_ns: Time,
    /// How far into the past the null scan of each send is shifted ([`CausalDensity`]), on
    /// average (each send's shift is spread over half to one and a half times this): longer
    /// than most causal delays, short enough that the load is alike.
    pub null_shift_ns: Time,
    /// A node's calls are decided jointly over windows of this much event time (0: each on
    /// its own, as it comes): the window's calls are assigned to their causes by minimum
    /// cost, each cause taking one call (a further one at a penalty), instead of each call
    /// taking the cause that fits it best and leaving the rest to the next.
    pub match_window_ns: Time,
    /// Warm start: the first this much event time is linked twice, the second time with
    /// what the densities learned the first (0: once, as it comes). Its output waits until
    /// then.
    pub warmup_ns: Time,
    /// The most inputs (each message twice: as a child and as an arrival) a warm start
    /// holds; it ends early when they are reached.
    pub warmup_max: usize,
}

impl LinkConfig {
    /// `2·(max_delay_ns + keep_margin)`: the lull after which a node's arrivals start afresh,
    /// and (a quarter of it) the span that tells a persistent connection. What is kept is
    /// `Linker::keep_ns`, by the learned `x`.
    fn keep_ns(&self) -> Time {
        self.keep_with(self.max_delay_ns)
    }

    /// `2·(x + keep_margin)` for a given `x`; under memory pressure, at most the cap on both
    /// (`shed`).
    fn keep_with(&self, x_ns: Time) -> Time {
        shed::capped(x_ns)
            .saturating_add(shed::capped(self.keep_margin_ns))
            .saturating_mul(2)
    }

    /// How long after a node's latest send a task answered then may still be scanned: the
    /// null scan's reach (one and a half shifts, and a half for margin) and a match window.
    fn tasks_margin_ns(&self) -> Time {
        self.null_shift_ns
            .saturating_mul(2)
            .saturating_add(self.match_window_ns)
    }

    /// Width of the delay estimates' buckets: an eighth of the delay window.
    fn bucket_width_ns(&self) -> Time {
        (self.delay_window_ns / 8).max(1)
    }
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            max_delay_ns: 2_000_000_000,
            spontaneous_factor: 4.0,
            delay_window_ns: 60_000_000_000,
            estimate: DelayEstimate::Smallest,
            model: DelayModel::Learned,
            max_candidates: 32,
            min_probability: 0.01,
            lateness_ns: 1_000_000_000,
            keep_margin_ns: 1_000_000_000,
            idle_ns: 300_000_000_000,
            type_memory: 1000.0,
            causal_memory: 20_000.0,
            order_slack_ns: 500_000_000,
            null_shift_ns: 100_000_000,
            match_window_ns: 10_000_000,
            warmup_ns: 0,
            warmup_max: 2_000_000,
        }
    }
}

/// A message with its possible causes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Linked {
    /// The message's id ([`message_id`]).
    pub id: u64,
    /// The message, boxed: it is moved through two exchanges and two reorder buffers.
    pub message: Box<Message>,
    /// Candidate parents (ids) and the probability of each link, most recent first.
    pub parents: SmallVec<[(u64, Prob); 2]>,
    /// Probability that the message was spontaneous (a root).
    pub spontaneous: Prob,
    /// The most likely option: a parent's id, or `None` for spontaneous.
    pub best: Option<u64>,
    /// Whether the sender is a client (its messages start paths).
    pub from_client: bool,
    /// [`node_key`]s of the sender and the receiver.
    pub keys: (u64, u64),
    /// For a reply: whether its task as linked may be missing a call. [`ONE`] if the gap
    /// from the task's latest message to the reply is *clean* (its node made no call in it
    /// that was answered in it: the task cannot be missing one, however slow the reply);
    /// else how typical the reply's delay is, relative to the most typical delay of the
    /// complete tasks of its link type ([`TypicalDelay`]: learned from clean gaps), a delay
    /// at least [`TYPICAL_FLOOR`] as typical counting as fully typical; for a type with too
    /// few clean gaps to learn from, the share of its unclean gaps that are whole, by how
    /// often its gaps are clean against how often windows as long are
    /// ([`TypicalDelay::clean_share`]). And where the calls given to the task were in doubt,
    /// the reply's gap after the latest one's answer is evidence for or against them
    /// (`Linker::reply_gap`), which may raise it above [`ONE`] (up to `1/w` for calls of
    /// probability `w` together). `paths` weighs the instances holding it by this: a reply far later
    /// than complete tasks of its kind reply, with a call of its node made and answered in
    /// between, says its task lost that call to another. [`ONE`] for every other message,
    /// and while nothing is learned.
    pub typical: Prob,
}

/// A message's identity: a hash of its endpoints, timestamps and trace row.
pub fn message_id(m: &Message) -> u64 {
    FixedState::with_seed(0x6c69_6e6b).hash_one((
        &m.src_endpoint,
        &m.dst_endpoint,
        m.send_ns,
        m.recv_ns,
        m.row,
    ))
}

/// An endpoint's key.
fn endpoint_key(e: &Address) -> u64 {
    FixedState::with_seed(0x656e_6470).hash_one(e)
}

/// One end of a connection: a hash of the endpoint at that end and its peer's. A node's
/// sends and arrivals on a connection meet under the key of its own end, also where both
/// ends are the node's (a client and a server on one host).
fn end_key(local: &Address, remote: &Address) -> u64 {
    FixedState::with_seed(0x636f_6e6e).hash_one((local, remote))
}

/// A node's key: a hash of its name.
pub fn node_key(name: &str) -> u64 {
    FixedState::with_seed(0x6e6f_6465).hash_one(name)
}

/// A message as a possible parent, at its receiver.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Arrival {
    id: u64,
    /// Receiving node (the exchange key).
    to: u64,
    /// Sending node.
    from: u64,
    /// Receive time in the receiver's clock; for a one-sided arrival, the send time in the
    /// sender's clock.
    local_ns: Time,
    event_ns: Time,
    /// Whether only the sender side was observed.
    one_sided: bool,
    /// The receiver's end of the connection it travelled on ([`end_key`]).
    conn: u64,
    /// Whether it went to the connection's fixed end (a request), as the port evidence had it
    /// when it arrived.
    request: bool,
    /// The sender as link types name it ([`CLIENT_KEY`] for clients), when it arrived.
    kind_from: u64,
    /// Its size in bytes (0 if unknown).
    bytes: u64,
    src_endpoint: Address,
    dst_endpoint: Address,
}

fn to_prob(p: f64) -> Prob {
    (p.clamp(0.0, 1.0) * f64::from(ONE)).round() as Prob
}

/// The `link` operator.
pub trait Link<'scope> {
    /// Candidate parents and their probabilities for every message.
    fn link(self, config: LinkConfig) -> Stream<'scope, Time, Vec<Linked>>;
}

/// What `link` takes in, exchanged by node: a message as a child, to its sender's worker, and
/// as an arrival (a possible parent), to its receiver's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum LinkInput {
    /// A message to link: its sender's [`node_key`], its [`message_id`], the message.
    Child(u64, u64, Box<Message>),
    /// A message as a possible parent (boxed, like the message: timely batches records by
    /// bytes, so small records make large batches).
    Arrival(Box<Arrival>),
    /// For a warm start (`WarmStart`), to worker `.1`: an event time no later than every
    /// message's, sent to every worker whenever a worker sees an earlier message than it
    /// has seen, so that every worker's warm-up starts at the same time.
    Start(Time, u64),
}

impl LinkInput {
    fn event_ns(&self) -> Time {
        match self {
            LinkInput::Child(_, _, m) => m.event_ns,
            LinkInput::Arrival(a) => a.event_ns,
            LinkInput::Start(t, _) => *t,
        }
    }

    /// A message's two roles: an arrival at its receiver (a possible parent; none where
    /// neither side was observed) and a child of its sender.
    fn roles(m: Box<Message>) -> (Option<LinkInput>, LinkInput) {
        let id = message_id(&m);
        let one_sided = m.recv_ns.is_none();
        let arrival = m.recv_ns.or(m.send_ns).map(|local_ns| {
            LinkInput::Arrival(Box::new(Arrival {
                id,
                to: node_key(&m.dst),
                from: node_key(&m.src),
                local_ns,
                event_ns: m.event_ns,
                one_sided,
                conn: end_key(&m.dst_endpoint, &m.src_endpoint),
                request: false,
                kind_from: 0,
                bytes: m.bytes.unwrap_or(0),
                src_endpoint: m.src_endpoint.clone(),
                dst_endpoint: m.dst_endpoint.clone(),
            }))
        });
        (arrival, LinkInput::Child(node_key(&m.src), id, m))
    }

    fn node(&self) -> u64 {
        match self {
            LinkInput::Child(from, _, _) => *from,
            LinkInput::Arrival(a) => a.to,
            // The exchange sends key `k` to worker `k` (of more than `k` workers).
            LinkInput::Start(_, worker) => *worker,
        }
    }
}

impl<'scope> Link<'scope> for MessageStream<'scope> {
    fn link(self, config: LinkConfig) -> Stream<'scope, Time, Vec<Linked>> {
        let peers = self.scope().peers() as u64;
        let mut least: Option<Time> = None;
        // One stream of both roles, so that a message is moved, not copied, to its child role.
        let inputs = self.flat_map(move |m| {
            let earliest = config.warmup_ns > 0 && least.is_none_or(|l| m.event_ns < l);
            if earliest {
                least = Some(m.event_ns);
            }
            let t = m.event_ns;
            let starts = (0..if earliest { peers } else { 0 }).map(move |k| LinkInput::Start(t, k));
            let (arrival, child) = LinkInput::roles(m);
            starts.chain(arrival).chain(std::iter::once(child))
        });
        inputs.unary_frontier(
            Exchange::new(|i: &LinkInput| i.node()),
            "link",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut pipeline = Pipeline::new(Linker::new(config));
                let mut warm = (config.warmup_ns > 0).then(WarmStart::default);
                let mut linked = Vec::new();
                move |(input, frontier), output| {
                    input.for_each(|_cap, batch| {
                        for i in batch.drain(..) {
                            match warm.as_mut() {
                                Some(w) => w.hold(i),
                                None => pipeline.push(i),
                            }
                        }
                    });
                    let Some(cap) = held.as_mut() else { return };
                    let now = frontier.frontier().iter().next().copied();
                    if let Some(w) = warm.take_if(|w| w.over(now, config)) {
                        pipeline = w.finish(config);
                    }
                    if let Some(w) = warm.as_ref() {
                        // Nothing is linked before the warm-up is over: the capability stays
                        // at the earliest event time anything still to come may have (the
                        // earliest held, or one the frontier lets come late), not at the
                        // start of time, which would hold the output frontier there and stop
                        // the source reading ahead.
                        let lag = config.lateness_ns;
                        let floor = match (w.start, now) {
                            (Some(s), Some(n)) => Some(s.min(n.saturating_sub(lag))),
                            (None, Some(n)) => Some(n.saturating_sub(lag)),
                            (s, None) => s,
                        };
                        if let Some(t) = floor.filter(|t| t > cap.time()) {
                            cap.downgrade(&t);
                        }
                        return;
                    }
                    let bound = {
                        let mut session = output.session(&*cap);
                        let bound = pipeline.run(now, &mut linked, &mut |l| {
                            session.give_iterator(l.drain(..))
                        });
                        session.give_iterator(linked.drain(..));
                        bound
                    };
                    // Everything still to come is linked at or after `bound`.
                    match bound {
                        Some(t) if t > *cap.time() => cap.downgrade(&t),
                        Some(_) => {}
                        None => held = None,
                    }
                }
            },
        )
    }
}
