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
//!   probabilities. With [`DelayModel::Exponential`] a candidate weighs `e^(−(s − r)/d)`, `d`
//!   the mean causal delay of B→C: WAP5's estimate, the mean over a sliding window
//!   (`delay_window_ns`) of the smallest delay preceding each B→C message, or
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
//!   windows may emit it) plus `order_slack_ns` past it, so that parents whose event times
//!   carry their senders' residual clock error are in; arrivals and the sends themselves are
//!   taken `order_slack_ns` earlier, in one order with the children, so that `link` sees the
//!   answers and replies that come within that slack after a message, and what a message is
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
//!   neither on timing nor on the number of workers ([`WarmStart`]), but what it learned
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
//!   after answers (likewise); per node its answers of the last `2·(x + lateness)`; the
//!   endpoints' port evidence
//!   ([`Ports`]), forgotten after `idle_ns`; per arrival its size, freed with the arrivals;
//!   per link type its size evidence and reply sizes (dropped as the densities are), and per
//!   task its reply's size. All but the densities and ports are freed once
//!   linking (the time below which every message is linked, not the frontier, which runs
//!   ahead of it by as much as the input is ahead) is `2·(x + lateness)` past them. A
//!   density or delay estimate unseen for `delay_window_ns`, and a node's first-arrival time after a lull, are forgotten when next
//!   used, and swept only once every later message would forget them too, so that what a
//!   message is weighed by does not depend on when the sweeps ran. Memory follows the message
//!   rate times `x`, never the length of the input. During a warm start, the inputs held
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
    /// `y`: spontaneity weighs as much as a delay of `y·d`.
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
    /// How late a message may arrive behind its sender's newest (the sources' lateness).
    pub lateness_ns: Time,
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
    /// A message is linked once the frontier is this far past its event time, so that its
    /// causes, whose event times carry their own senders' residual clock error, are in.
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
    /// How long `link` keeps what it received: `2·(x + lateness)`, and the lull after which a
    /// node's arrivals start afresh.
    fn keep_ns(&self) -> Time {
        // Under memory pressure, at most the cap on both (`shed`).
        shed::capped(self.max_delay_ns)
            .saturating_add(shed::capped(self.lateness_ns))
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

/// An arrival that belongs to no task (yet), as a node's list holds it: what linking reads,
/// without the endpoints.
#[derive(Clone, Copy, Debug)]
struct Arrived {
    id: u64,
    from: u64,
    local_ns: Time,
    event_ns: Time,
    request: bool,
    kind_from: u64,
}

/// The tasks of one node that a scan may still find open: those not answered, and those
/// answered less than [`LinkConfig::tasks_margin_ns`] before the node's latest send taken in
/// (sends come in time order; a send is weighed up to a match window after it was taken in,
/// and the null scan looks back at most one and a half shifts).
///
/// A scan at `at` wants the tasks open then: asked at `at`, not answered before it. The open
/// ones are few (what the node has in progress); the answered ones are many on a busy node
/// (at 100,000 requests/s, the margin holds tens of thousands). So the answered are kept by
/// how long they lasted, in classes of powers of two (class `k`: `2^k` to `2^(k+1)` ns), each
/// by the request's receive time: a task of class `k` can be open at `at` only if it was
/// asked within `2^(k+1)` before it, so a scan visits, per class, at most about twice the
/// tasks of that class open at `at` (an interval stabbing query in `O(answer + classes)`).
/// Compacted whenever the latest send has moved on by [`NodeTasks::COMPACT_NS`].
#[derive(Debug, Default)]
struct NodeTasks {
    /// Not answered yet, by the request's receive time.
    open: VecDeque<TaskRef>,
    /// Answered, by duration class ([`duration_class`]), each by the request's receive time.
    answered: Vec<VecDeque<TaskRef>>,
    /// Bit `k` set: class `k` of `answered` is not empty (a scan visits only those).
    classes: u64,
    /// The latest send (the node's clock) a scan was made for.
    last_send: Time,
    /// When the lists were last compacted (the latest send then).
    compacted: Time,
}

/// The class of a task that lasted `d` ns: `floor(log2(d))` (0 for 0 and 1).
fn duration_class(d: Time) -> usize {
    (Time::BITS - 1 - d.max(1).leading_zeros()) as usize
}

impl NodeTasks {
    const COMPACT_NS: Time = 50_000_000;

    /// Notes a send at `at` and drops the tasks no send from now on can find open.
    fn advance(&mut self, at: Time, margin_ns: Time) {
        self.last_send = self.last_send.max(at);
        if self.last_send < self.compacted.saturating_add(Self::COMPACT_NS) {
            return;
        }
        self.compacted = self.last_send;
        let done = self.last_send.saturating_sub(margin_ns);
        for list in &mut self.answered {
            list.retain(|t| t.reply_ns.is_none_or(|r| r >= done));
        }
        self.recount();
    }

    /// Works out [`NodeTasks::classes`] again.
    fn recount(&mut self) {
        self.classes = self
            .answered
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_empty())
            .fold(0, |bits, (k, _)| bits | 1 << k);
    }

    /// Takes in a task.
    fn insert(&mut self, t: TaskRef) {
        let list = match t.reply_ns {
            None => &mut self.open,
            Some(r) => {
                let k = duration_class(r.saturating_sub(t.request_ns));
                if self.answered.len() <= k {
                    self.answered.resize_with(k + 1, VecDeque::new);
                }
                self.classes |= 1 << k;
                &mut self.answered[k]
            }
        };
        let i = partition_point_from_back(list, |x| x.request_ns <= t.request_ns);
        list.insert(i, t);
    }

    /// The task asked at `request_ns` (it was answered at `old`, if at all) was answered at
    /// `reply`.
    fn answer(&mut self, request_ns: Time, task: u64, old: Option<Time>, reply: Time) {
        let list = match old {
            None => &mut self.open,
            Some(r) => match self
                .answered
                .get_mut(duration_class(r.saturating_sub(request_ns)))
            {
                Some(list) => list,
                None => return,
            },
        };
        let i = partition_point_from_back(list, |t| t.request_ns < request_ns);
        // Every copy (a request taken in twice has two), without allocating for the one.
        let mut moved: SmallVec<[TaskRef; 1]> = SmallVec::new();
        let mut j = i;
        while j < list.len() && list[j].request_ns == request_ns {
            if list[j].task == task {
                moved.extend(list.remove(j));
            } else {
                j += 1;
            }
        }
        if old.is_some() && list.is_empty() {
            self.recount();
        }
        for mut t in moved {
            t.reply_ns = Some(reply);
            self.insert(t);
        }
    }

    /// Drops the tasks whose request's event time is before `before`; whether any is left.
    fn clean(&mut self, before: Time) -> bool {
        self.open.retain(|t| t.event_ns >= before);
        for list in &mut self.answered {
            list.retain(|t| t.event_ns >= before);
        }
        self.recount();
        !self.open.is_empty() || self.classes != 0
    }

    /// Calls `f` with every task asked at or before `at` and not answered before it (and
    /// some answered before it, for `f` to pass over): the open ones, and per duration
    /// class those asked recently enough to last until `at`.
    fn open_at(&self, at: Time, mut f: impl FnMut(&TaskRef)) {
        let end = partition_point_from_back(&self.open, |t| t.request_ns <= at);
        self.open.range(..end).for_each(&mut f);
        let mut classes = self.classes;
        while classes != 0 {
            let k = classes.trailing_zeros();
            classes &= classes - 1;
            let list = &self.answered[k as usize];
            // Lasted less than 2^(k+1): open at `at` only if asked after `at - 2^(k+1)`.
            let since = at.saturating_sub(1u64.checked_shl(k + 1).unwrap_or(Time::MAX));
            let end = partition_point_from_back(list, |t| t.request_ns <= at);
            list.range(..end)
                .rev()
                .take_while(|t| t.request_ns >= since)
                .for_each(&mut f);
        }
    }
}

/// A task as its node's list of tasks holds it, by the request's receive time.
#[derive(Clone, Copy, Debug)]
struct TaskRef {
    /// The request's receive time (the node's clock).
    request_ns: Time,
    /// The request's id, the task's key.
    task: u64,
    /// A copy of the task's reply time, kept current with it.
    reply_ns: Option<Time>,
    /// The request's event time.
    event_ns: Time,
}

/// Per node pair: buckets of delay sums over the sliding window.
#[derive(Debug, Default)]
struct Estimate {
    /// (bucket start, sum of smallest delays, their count, weighted delay sum, weight sum).
    buckets: VecDeque<(Time, f64, f64, f64, f64)>,
}

impl Estimate {
    fn bucket(&mut self, t: Time, width: Time, window: Time) -> &mut (Time, f64, f64, f64, f64) {
        let start = t - t % width.max(1);
        while self
            .buckets
            .front()
            .is_some_and(|b| b.0.saturating_add(window) <= start)
        {
            self.buckets.pop_front();
        }
        if self.buckets.back().is_none_or(|b| b.0 < start) {
            self.buckets.push_back((start, 0.0, 0.0, 0.0, 0.0));
        }
        // Out-of-order times land in the newest bucket.
        let n = self.buckets.len() - 1;
        &mut self.buckets[n]
    }

    /// Drops the buckets that have left the window before `t`.
    fn trim(&mut self, t: Time, width: Time, window: Time) {
        let start = t - t % width.max(1);
        while self
            .buckets
            .front()
            .is_some_and(|b| b.0.saturating_add(window) <= start)
        {
            self.buckets.pop_front();
        }
    }

    /// The mean at `t` (over the buckets still in the window then), with `extra` as one
    /// more smallest delay.
    fn mean_at(
        &self,
        t: Time,
        width: Time,
        window: Time,
        extra: Option<Time>,
        estimate: DelayEstimate,
    ) -> Option<f64> {
        let start = t - t % width.max(1);
        let (mut s, mut n, mut ws, mut w) = (0.0, 0.0, 0.0, 0.0);
        if let Some(e) = extra {
            s += e as f64;
            n += 1.0;
        }
        for b in self
            .buckets
            .iter()
            .filter(|b| b.0.saturating_add(window) > start)
        {
            s += b.1;
            n += b.2;
            ws += b.3;
            w += b.4;
        }
        match estimate {
            DelayEstimate::Weighted if w >= 8.0 => Some(ws / w),
            _ if n > 0.0 => Some(s / n),
            _ => None,
        }
    }
}

/// The linking state of one worker.
struct Linker {
    config: LinkConfig,
    /// Per node: the tasks it serves that a scan may still find open.
    node_tasks: FastMap<u64, NodeTasks>,
    /// Per node: the arrivals that belong to no task, by receive time (an answer leaves
    /// when its call is linked to a task).
    taskless: FastMap<u64, VecDeque<Arrived>>,
    /// Arrivals whose sender side alone was observed, by the sender's send time.
    one_sided: FastMap<u64, VecDeque<Arrived>>,
    estimates: FastMap<(u64, u64), Estimate>,
    /// Learned gaps (a call's answer to its task's reply) per link type ([`gap_type`]).
    densities: FastMap<u64, DelayDensity>,
    /// Per node, its sends taken in, by time: the calls a task may have gone on with after
    /// an answer.
    departures: FastMap<u64, VecDeque<Departure>>,
    /// Learned causal delays per link type, against the time-shifted null.
    causal: FastMap<u64, CausalDensity>,
    /// Learned delays of replies after their task's latest message, per link type.
    typical: FastMap<u64, TypicalDelay>,
    /// Learned gaps from answers to the replies they are the latest message of, per the
    /// reply's link type, against the time-shifted null ([`Linker::reply_gap`]).
    reply_gaps: FastMap<u64, CausalDensity>,
    /// How much likelier a call is to have a parent of each link type, by the size of its
    /// answer, against the time-shifted null ([`SizeEvidence`]).
    size_evidence: FastMap<u64, SizeEvidence>,
    /// Learned sizes of the parents of each link type against its other candidates'
    /// ([`ParentSizes`]).
    parent_sizes: FastMap<u64, ParentSizes>,
    /// Learned reply sizes of the tasks of each link type's parents, by the size of the
    /// call's answer, against its other candidates' ([`ReplySizes`]).
    reply_sizes: FastMap<u64, ReplySizes>,
    /// The size of each arrival held, and its event time.
    sizes: FastMap<u64, (u64, Time)>,
    /// Per node, the answers it received, by receive time (its clock): (receive time, event
    /// time, the sender as link types name it).
    answers: FastMap<u64, VecDeque<(Time, Time, u64)>>,
    /// Per node: where its arrivals begin, so that the null scan, which cannot see before
    /// that, is compared with what the scan at the send sees after it.
    first_arrival: FastMap<u64, FirstArrival>,
    /// Per (node, connection): what the node sent and received on it (one entry for both,
    /// which are mostly looked up together).
    conns: FastMap<(u64, u64), Conn>,
    /// Tasks: the requests a node serves, by the request's id.
    tasks: FastMap<u64, Task>,
    /// Arrivals that are the most likely cause of a send: how many sends, and the event time
    /// of the newest.
    caused: FastMap<u64, (u32, Time, Time)>,
    ports: Ports,
    last_expiry: Time,
    /// When [`Linker::expire`] last swept the state.
    last_sweep: Time,
    /// Buffers [`Linker::weigh`] reuses from message to message (no allocation per message).
    scratch: Scratch,
    /// Buffers of the match windows' rounds.
    matching: Matching,
}

/// Buffers that [`Linker::weigh`] and [`Linker::commit`] clear and reuse.
#[derive(Default)]
struct Scratch {
    candidates: Vec<Candidate>,
    null: Vec<Candidate>,
    kinds: Vec<u64>,
    /// The calls a task may have gone on with after a call's answer ([`Linker::follows`]).
    follows: Vec<Follow>,
    /// Per link type, its candidates' and the null's weights ([`SizeEvidence`]).
    sizes: Vec<(u64, f64, f64)>,
}

/// A send as [`Linker::departures`] holds it.
#[derive(Clone, Copy, Debug)]
struct Departure {
    /// Its send time (the node's clock).
    send: Time,
    conn: u64,
    event_ns: Time,
    /// The first arrival on its connection after it, if that is an answer: its receive
    /// time and its sender as link types name it (set when either of the two is taken in
    /// second).
    answer: Option<(Time, u64)>,
}

/// A call its node made after another call's answer came back, as a task's next call
/// ([`Linker::follows`]).
#[derive(Clone, Copy, Debug)]
struct Follow {
    /// Its send time.
    send: Time,
    /// When its own answer came back.
    answer: Time,
    /// Its link type, as a call following the first call's answer.
    kind: u64,
    /// How typical its delay after that answer is ([`CausalDensity::relative`]).
    fit: f64,
}

/// How often, in event time, `link` sweeps what the frontier has passed.
const SWEEP_NS: Time = 250_000_000;

/// What a node sent or received on one connection, by its local time, with the event time
/// of the newest entry. Local times are in the node's own clock, which may be far from the
/// frontier's: entries are trimmed by the span of local time they cover, the log dropped by
/// event time.
#[derive(Debug)]
struct ConnLog<T> {
    newest_event_ns: Time,
    /// Inline up to two: most connections carry one request and its answer (a
    /// connection per request), and a heap allocation per connection cost more than the
    /// rest of its bookkeeping.
    entries: SmallVec<[(Time, T); 2]>,
}

impl<T> Default for ConnLog<T> {
    fn default() -> Self {
        ConnLog {
            newest_event_ns: 0,
            entries: SmallVec::new(),
        }
    }
}

impl<T: Copy> ConnLog<T> {
    fn insert(&mut self, local_ns: Time, event_ns: Time, value: T) {
        let i = self.entries.partition_point(|e| e.0 <= local_ns);
        self.entries.insert(i, (local_ns, value));
        self.newest_event_ns = self.newest_event_ns.max(event_ns);
    }

    /// The latest entry before `t` (`inclusive`: at or before).
    fn before(&self, t: Time, inclusive: bool) -> Option<(Time, T)> {
        let i = self
            .entries
            .partition_point(|e| e.0 < t || (inclusive && e.0 == t));
        i.checked_sub(1).map(|i| self.entries[i])
    }

    /// The first entry after `t`.
    fn after(&self, t: Time) -> Option<(Time, T)> {
        let i = self.entries.partition_point(|e| e.0 <= t);
        self.entries.get(i).copied()
    }

    /// Drops entries more than `span` of local time older than the newest, keeping one.
    fn trim(&mut self, span: Time) {
        let Some(newest) = self.entries.last().map(|e| e.0) else {
            return;
        };
        let old = self
            .entries
            .iter()
            .take(self.entries.len() - 1)
            .take_while(|e| e.0.saturating_add(span) < newest)
            .count();
        if old > 0 {
            self.entries.drain(..old);
        }
    }
}

/// A send in a connection's log: the task it belongs to, once linked, and its size.
#[derive(Clone, Copy, Debug)]
struct Sent {
    task: Option<u64>,
    bytes: Option<u64>,
}

/// What a node sent and received on one connection.
#[derive(Debug, Default)]
struct Conn {
    /// The node's sends, in its clock, with the task each belongs to and its size.
    sends: ConnLog<Sent>,
    /// The arrivals (receive time in the node's clock, id, whether a request, the sender as
    /// link types name it).
    recvs: ConnLog<(u64, bool, u64)>,
}

impl Conn {
    /// Trims both logs to `keep` of local time, and forgets a log whose newest entry is
    /// older than `before` (as if it had never been); whether anything is left.
    fn expire(&mut self, keep: Time, before: Time) -> bool {
        self.sends.trim(keep);
        if self.sends.newest_event_ns < before {
            self.sends = ConnLog::default();
        }
        self.recvs.trim(keep);
        if self.recvs.newest_event_ns < before {
            self.recvs = ConnLog::default();
        }
        self.sends.newest_event_ns != 0 || self.recvs.newest_event_ns != 0
    }
}

/// A request a node serves, and what it has received for it so far.
struct Task {
    /// The request's event time.
    event_ns: Time,
    /// The reply: the node's first send on the request's connection after the request, once
    /// known (kept current by [`Linker::depart`] and at the request's insertion, whichever
    /// comes first).
    reply_ns: Option<Time>,
    /// The reply's size, if known.
    reply_bytes: Option<u64>,
    /// The endpoint the request came to ([`endpoint_key`]): where the node serves it.
    served: u64,
    /// The request and the answers to the calls made for it: (receive time, id, the
    /// sender's key in link types, whether a request), by receive time.
    arrivals: TaskArrivals,
    /// The probability that every call given to it so far is its: the product of the
    /// probabilities `link` gave their causes.
    chain: f32,
    /// How many calls were given to it so far.
    calls: u8,
}

/// A task's arrivals: (receive time, id, the sender's key in link types, whether a request),
/// by receive time; inline up to two (the request and one answer: most tasks).
type TaskArrivals = SmallVec<[(Time, u64, u64, bool); 2]>;

/// Project 5's overlapping-child penalty: `1/(n + 1)²` for an arrival that is the most likely
/// cause of `n` sends already (of those before `before_event`, if given: the first's event
/// time is what is known).
fn penalty(caused: &FastMap<u64, (u32, Time, Time)>, id: u64, before_event: Option<Time>) -> f64 {
    match caused.get(&id) {
        Some(&(_, first, _)) if before_event.is_some_and(|b| first >= b) => 1.0,
        Some(&(n, _, _)) => 1.0 / f64::from(n + 1).powi(2),
        None => 1.0,
    }
}

/// A send as a scan for its candidate parents sees it ([`Linker::scan`]).
#[derive(Clone, Copy)]
struct Scan {
    /// Its send time (or, for the time-shifted null, that time shifted).
    at: Time,
    id: u64,
    from: u64,
    child_to: u64,
    only_from: Option<u64>,
    callee: bool,
    /// When its answer came back.
    nested_until: Option<Time>,
    calls_back: Option<u64>,
    /// For the null: sends caused at or after this event time are not known yet.
    before_event: Option<Time>,
}

/// A candidate parent as `link` weighs it.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    id: u64,
    delay: Time,
    /// Its link type.
    kind: u64,
    task: Option<u64>,
    /// For a call: the time from its answer to its task's reply, when both are known.
    gap: Option<Time>,
    /// Its weight by structure alone (penalties), as the scan found it.
    structural: f64,
    /// For a call: the share of its gap's fit that is the task's reply coming right after
    /// the call's answer rather than after one more call (what the gap density learns).
    direct: f64,
    /// Its weight under the learned densities alone, for learning the gaps.
    learned: f64,
    /// Its weight, and once weighed, its probability.
    weight: f64,
    /// Whether it is the answer to a call not decided yet (a match window's round: such a
    /// candidate holds the call back until that call is decided).
    undecided: bool,
}

impl Candidate {
    fn new(id: u64, delay: Time, kind: u64, task: Option<u64>, gap: Option<Time>, w: f64) -> Self {
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
    fn arrived(a: &Arrived, at: Time, from: u64, child_to: u64, w: f64) -> Self {
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
struct Weighed {
    /// The probability that it was spontaneous.
    spontaneous: f64,
    /// Its smallest candidate delay (WAP5's sample of the pair's mean delay).
    smallest: Option<Time>,
}

/// A send as `link` takes it in ([`Linker::prepare`]): what deciding its cause needs.
#[derive(Clone, Copy, Debug)]
struct Prep {
    id: u64,
    from: u64,
    to: u64,
    from_client: bool,
    /// Whether it starts a path without weighing (a client's, or one without timestamps).
    root: bool,
    conn: u64,
    /// Its send time (the sender's clock), or for a message seen at its receiver alone, the
    /// receive time.
    at: Time,
    event_ns: Time,
    send_ns: Option<Time>,
    /// For a message seen at its receiver alone: the receiver (its only possible cause is
    /// what the receiver sent the sender).
    only_from: Option<u64>,
    /// Whether it was sent from a fixed port (an answer or a reply).
    callee: bool,
    /// The request it replies to.
    answers: Option<u64>,
    child_to: u64,
    /// When its answer came back (a call).
    nested_until: Option<Time>,
    /// Who answered it, as link types name the answer's sender (a call).
    answer_kind: Option<u64>,
    /// Its answer's size in bytes (a call whose answer is known).
    answer_bytes: Option<u64>,
    calls_back: Option<u64>,
}

impl Prep {
    /// Whether it is a call its node's match window decides jointly.
    fn is_call(&self) -> bool {
        !self.root && !self.callee && self.answers.is_none() && self.only_from.is_none()
    }

    /// Its scan for candidate parents at its time.
    fn scan(&self) -> Scan {
        Scan {
            at: self.at,
            id: self.id,
            from: self.from,
            child_to: self.child_to,
            only_from: self.only_from,
            callee: self.callee,
            nested_until: self.nested_until,
            calls_back: self.calls_back,
            before_event: None,
        }
    }

    /// It, linked as a root.
    fn root(&self, m: Box<Message>) -> Linked {
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
const COPIES: usize = 3;

/// How many candidates a link type must have been (faded) before calls with it as a
/// candidate are decided jointly.
const MATCH_SAMPLES: f64 = 100.0;

/// A reply whose delay is at least this share of its kind's most typical one counts as
/// typical ([`Linked::typical`]): only a delay far outside what its kind does weighs its
/// instances down.
pub const TYPICAL_FLOOR: f64 = 0.02;

/// The most [`Linked::typical`] raises an instance by (`paths` caps an instance's
/// probability at 1 anyway).
const MAX_TYPICAL: f64 = 1000.0;

/// How many clean gaps a reply type must have been expected to show before the shortfall of
/// clean ones is believed ([`TypicalDelay::clean_share`]).
const CLEAN_EVIDENCE: f64 = 20.0;

/// The parents at a reply's gap ([`Linker::reply_gap`]) are counted this many standard
/// deviations below the excess of answers there over the null
/// ([`CausalDensity::likelihood_ratio`], which fits the parents' gaps to what stands out):
/// on Project 5's multi-tier trace at parallelism 45, 0, 0.25, 0.5, 0.75, 1 and 1.5 gave
/// a largest per-node delay error of 8.3%, 8.1%, 8.0%, 8.5%, 9.5% and 11.2%, every one of
/// them no false negative beyond 1 among the top N by either ranking.
const REPLY_GAP_SIGMAS: f64 = 0.5;
/// A reply's gaps are learned from the answers of its kind at most this long before it (and
/// before its shifted time); a longer gap is not judged...
const REPLY_GAP_BACK_NS: Time = 100_000_000;
/// ... and from at most this many of them.
const MAX_REPLY_GAP_SCAN: usize = 64;
/// Only replies whose task's calls were all given to it with less than this probability
/// (the product of theirs) are judged by their gaps, and learned from.
const REPLY_GAP_DOUBT: f64 = 0.9;
/// The number of calls under which a reply type's gaps are also learned pooled over all
/// numbers of calls.
const POOLED_CALLS: u8 = u8::MAX;

/// A gap is tested for being clean ([`Linker::clean`]) over at most this many of its
/// node's sends; a gap holding more is taken as not clean.
const MAX_CLEAN_SCAN: usize = 1024;

/// The cost of a probability in an assignment: its negative log.
fn cost(p: f64) -> f64 {
    -(p.max(1e-12).ln())
}

/// Most sends a call's weighing looks at after its answer, for the call its task may have
/// gone on with ([`Linker::follows`]).
const MAX_FOLLOWS: usize = 64;

/// The buffers of one match window's rounds ([`Linker::flush`]), reused.
#[derive(Default)]
struct Matching {
    /// Every undecided call's candidates, one call after another.
    arena: Vec<Candidate>,
    /// The answers to the undecided calls (receive time, id, sender's kind, the call).
    answers: Vec<(Time, u64, u64, u64)>,
    /// Per undecided call: its candidates in `arena`, and what weighing it found.
    rows: Vec<(usize, usize, Option<Weighed>)>,
    /// Candidate parent id -> its index in `ids`.
    columns: FastMap<u64, usize>,
    ids: Vec<u64>,
    /// How many calls the round gave each candidate parent.
    uses: Vec<u32>,
    assign: Assign,
}

/// Whether a learned causal density may be weighed by at `t`: it has seen [`MATCH_SAMPLES`]
/// candidates and is not [`stale`].
fn matured(d: &CausalDensity, window: Time, t: Time) -> bool {
    d.samples() >= MATCH_SAMPLES && !stale(d.last_ns, window, t)
}

/// The link type under which the gaps of `kind` are learned.
fn gap_type(kind: u64) -> u64 {
    kind ^ 0x6761_7020_6761_7020
}

/// Whether a learned density last stepped at `last_ns` (0: not yet) is forgotten at `t`:
/// unseen for the delay window. Decided when it is used, so that it does not matter whether
/// [`Linker::expire`] dropped it first.
fn stale(last_ns: Time, window: Time, t: Time) -> bool {
    last_ns != 0 && last_ns.saturating_add(window) <= t
}

/// The density of `kind` in `map`, afresh (`new`) if absent or [`stale`] at `t` (`last`
/// tells when a density was last stepped).
fn density_at<D>(
    map: &mut FastMap<u64, D>,
    kind: u64,
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
fn causal_at(
    map: &mut FastMap<u64, CausalDensity>,
    kind: u64,
    at: (Time, Time),
    memory: f64,
) -> &mut CausalDensity {
    density_at(map, kind, at, || CausalDensity::new(memory), |d| d.last_ns)
}

/// A node's first-arrival entry is dropped once its newest arrival is this much older than
/// what is linked (far longer than the lull after which it starts afresh).
const FIRST_ARRIVAL_IDLE_NS: Time = 600_000_000_000;

/// Where a node's arrivals begin: its first arrival since the last lull.
#[derive(Clone, Copy, Debug)]
struct FirstArrival {
    /// The first arrival's receive time (the node's clock).
    first_local: Time,
    /// The newest arrival's receive time.
    newest_local: Time,
    /// The newest arrival's event time, for expiry.
    newest_event: Time,
}

impl FirstArrival {
    /// Notes an arrival; after a lull longer than `lull_ns` (the node's clock), the arrivals
    /// begin again with it. Decided as arrivals come, not when sweeps run.
    fn note(&mut self, local_ns: Time, event_ns: Time, lull_ns: Time) {
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
const TASKLESS: f64 = 0.1;

/// The node key that stands for every client in a link type.
const CLIENT_KEY: u64 = 0;

/// A link type: the parent's sender and kind, the node, the child's receiver and kind.
fn link_type(parent_from: u64, request: bool, node: u64, to: u64, reply: bool) -> u64 {
    FixedState::with_seed(0x7479_7065).hash_one((parent_from, request, node, to, reply))
}

impl Linker {
    fn new(config: LinkConfig) -> Self {
        Linker {
            config,
            node_tasks: FastMap::default(),
            taskless: FastMap::default(),
            one_sided: FastMap::default(),
            estimates: FastMap::default(),
            conns: FastMap::default(),
            densities: FastMap::default(),
            departures: FastMap::default(),
            causal: FastMap::default(),
            typical: FastMap::default(),
            reply_gaps: FastMap::default(),
            size_evidence: FastMap::default(),
            parent_sizes: FastMap::default(),
            reply_sizes: FastMap::default(),
            sizes: FastMap::default(),
            answers: FastMap::default(),
            first_arrival: FastMap::default(),
            tasks: FastMap::default(),
            caused: FastMap::default(),
            ports: Ports::with_idle(config.idle_ns),
            last_expiry: 0,
            last_sweep: 0,
            scratch: Scratch::default(),
            matching: Matching::default(),
        }
    }

    /// A linker that starts afresh but for what this one learned: the causal delay, gap,
    /// reply-gap and typical-reply densities, the size and reply-size evidence, and the port
    /// evidence.
    /// (The delay estimates, buckets of a sliding window in time order, start afresh too:
    /// they stand in only while a type has not matured.)
    fn relearned(self) -> Self {
        Linker {
            densities: self.densities,
            causal: self.causal,
            typical: self.typical,
            reply_gaps: self.reply_gaps,
            size_evidence: self.size_evidence,
            parent_sizes: self.parent_sizes,
            reply_sizes: self.reply_sizes,
            ports: self.ports,
            ..Linker::new(self.config)
        }
    }

    // Arrivals come boxed from the reorder buffer; unboxing would copy them.
    #[allow(clippy::boxed_local)]
    fn insert(&mut self, mut a: Box<Arrival>) {
        let ends =
            self.ports
                .observe_message(&a.src_endpoint, &a.dst_endpoint, a.from, a.to, a.event_ns);
        a.request = ends.dst_fixed;
        // Clients are many nodes of one kind: their messages share a link type.
        a.kind_from = if ends.src_client { CLIENT_KEY } else { a.from };
        let lull = self.config.keep_ns();
        self.first_arrival
            .entry(a.to)
            .or_insert(FirstArrival {
                first_local: a.local_ns,
                newest_local: a.local_ns,
                newest_event: a.event_ns,
            })
            .note(a.local_ns, a.event_ns, lull);
        self.sizes.insert(a.id, (a.bytes, a.event_ns));
        let arrived = Arrived {
            id: a.id,
            from: a.from,
            local_ns: a.local_ns,
            event_ns: a.event_ns,
            request: a.request,
            kind_from: a.kind_from,
        };
        if a.one_sided {
            insert_by_local(self.one_sided.entry(a.to).or_default(), arrived);
            return;
        }
        let c = self.conns.entry((a.to, a.conn)).or_default();
        c.recvs
            .insert(a.local_ns, a.event_ns, (a.id, a.request, a.kind_from));
        if !a.request {
            let list = self.answers.entry(a.to).or_default();
            let i = partition_point_from_back(list, |x| x.0 <= a.local_ns);
            list.insert(i, (a.local_ns, a.event_ns, a.kind_from));
            // The answer to the node's latest send on the connection before it.
            if let Some((s, _)) = c.sends.before(a.local_ns, false) {
                if let Some(list) = self.departures.get_mut(&a.to) {
                    let i = partition_point_from_back(list, |d| d.send < s);
                    for d in list.range_mut(i..).take_while(|d| d.send == s) {
                        if d.conn == a.conn && d.answer.is_none_or(|x| a.local_ns < x.0) {
                            d.answer = Some((a.local_ns, a.kind_from));
                        }
                    }
                }
            }
        }
        let sends = &c.sends;
        let entry = (a.local_ns, a.id, a.kind_from, a.request);
        if a.request {
            // Its reply, if sent already.
            // Its reply, if sent already (a send may be taken in before the arrival it
            // answers, as both are taken in before the children after them).
            let reply = sends.after(a.local_ns);
            let reply_ns = reply.map(|s| s.0);
            self.tasks.insert(
                a.id,
                Task {
                    event_ns: a.event_ns,
                    reply_ns,
                    reply_bytes: reply.and_then(|s| s.1.bytes),
                    served: endpoint_key(&a.dst_endpoint),
                    arrivals: smallvec::smallvec![entry],
                    chain: 1.0,
                    calls: 0,
                },
            );
            self.node_tasks.entry(a.to).or_default().insert(TaskRef {
                request_ns: a.local_ns,
                task: a.id,
                reply_ns,
                event_ns: a.event_ns,
            });
            return;
        }
        // The answer to a call linked already joins the call's task; any other arrival
        // waits for its call to be linked.
        let task = sends
            .before(a.local_ns, false)
            .and_then(|s| s.1.task)
            .and_then(|t| self.tasks.get_mut(&t));
        match task {
            Some(task) => add_arrival(&mut task.arrivals, entry),
            None => insert_by_local(self.taskless.entry(a.to).or_default(), arrived),
        }
    }

    /// Frees what linking has passed. `linked` is the time below which every child has
    /// been linked (all later ones are at or after it). Everything is measured from it,
    /// not from the frontier, which runs ahead of it by the lateness, the order slack and
    /// any open match window, and by more while input comes faster than it is linked:
    /// state kept for `keep_ns` before the messages still to link is there whenever a sweep
    /// runs, and state whose dropping a later message would notice is dropped only when
    /// that message would find it stale anyway (see [`stale`]), so the output does not
    /// depend on when sweeps ran. (Measured from the frontier, a task open for 4.5 s was
    /// there or not by how far the input had run ahead: the linking harness's patterns
    /// changed with the sweep interval and with the machine's speed.)
    fn expire(&mut self, linked: Time) {
        // A sweep visits every connection and task held: once per `SWEEP_NS` of event time,
        // not at every activation.
        // Under memory pressure the sweeps come as often as what they keep is short.
        let keep = self.config.keep_ns();
        if linked < self.last_sweep.saturating_add(SWEEP_NS.min(keep.max(1))) {
            return;
        }
        self.last_sweep = linked;
        let before = linked.saturating_sub(keep);
        for map in [&mut self.taskless, &mut self.one_sided] {
            map.retain(|_, list| {
                while list.front().is_some_and(|a| a.event_ns < before) {
                    list.pop_front();
                }
                !list.is_empty()
            });
        }
        self.answers.retain(|_, list| {
            while list.front().is_some_and(|a| a.1 < before) {
                list.pop_front();
            }
            !list.is_empty()
        });
        self.departures.retain(|_, list| {
            while list.front().is_some_and(|d| d.event_ns < before) {
                list.pop_front();
            }
            !list.is_empty()
        });
        self.node_tasks.retain(|_, tasks| tasks.clean(before));
        // A node's first arrival starts afresh after a lull of `keep` (decided as arrivals
        // come); an entry is dropped once its newest arrival is far older than any lull.
        self.first_arrival
            .retain(|_, f| f.newest_event.saturating_add(FIRST_ARRIVAL_IDLE_NS) >= linked);
        self.conns.retain(|_, c| c.expire(keep, before));
        self.tasks.retain(|_, t| t.event_ns >= before);
        self.sizes.retain(|_, s| s.1 >= before);
        self.caused.retain(|_, c| c.2 >= before);
        let window = self.config.delay_window_ns;
        // What `Estimate::trim` at any later message would empty.
        let width = self.config.bucket_width_ns();
        let trimmed = linked - linked % width;
        self.estimates.retain(|_, e| {
            e.buckets
                .back()
                .is_some_and(|b| b.0.saturating_add(window) > trimmed)
        });
        self.densities
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.causal.retain(|_, d| !stale(d.last_ns, window, linked));
        self.typical
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.reply_gaps
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.size_evidence
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.parent_sizes
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.reply_sizes
            .retain(|_, d| !stale(d.last_ns, window, linked));
        if linked.saturating_sub(self.last_expiry) >= crate::ports::EXPIRY_EVERY_NS {
            self.ports
                .expire(linked.saturating_sub(self.config.idle_ns));
            self.last_expiry = linked;
        }
    }

    /// Records a send before it is linked: `link` looks ahead at the sends up to
    /// `order_slack_ns` after a child, as at the arrivals.
    fn depart(&mut self, node: u64, conn: u64, send: Time, event_ns: Time, bytes: Option<u64>) {
        let answer = self
            .recv_after(node, conn, send)
            .filter(|r| !r.2)
            .map(|r| (r.0, r.3));
        let list = self.departures.entry(node).or_default();
        let i = partition_point_from_back(list, |d| d.send <= send);
        list.insert(
            i,
            Departure {
                send,
                conn,
                event_ns,
                answer,
            },
        );
        let c = self.conns.entry((node, conn)).or_default();
        let previous = c.sends.before(send, false).map(|s| s.0);
        c.sends.insert(send, event_ns, Sent { task: None, bytes });
        // This send replies to the requests on the connection since the previous send.
        let recvs = &c.recvs;
        {
            let end = recvs.entries.partition_point(|e| e.0 < send);
            for &(local, (id, request, _)) in recvs.entries[..end].iter().rev() {
                if previous.is_some_and(|p| local <= p) {
                    break;
                }
                let Some(task) = self.tasks.get_mut(&id).filter(|_| request) else {
                    continue;
                };
                if task.reply_ns.is_some_and(|r| r <= send) {
                    continue;
                }
                let old = task.reply_ns.replace(send);
                task.reply_bytes = bytes;
                // The copy in the node's list of tasks.
                if let Some(tasks) = self.node_tasks.get_mut(&node) {
                    tasks.answer(local, id, old, send);
                }
            }
        }
    }

    /// How long before `at` `node` sent the call answered at `answered` (both in its clock),
    /// if that call is among the node's recent sends; else [`REPLY_GAP_BACK_NS`].
    fn since_call(&self, node: u64, at: Time, answered: Time) -> Time {
        self.departures
            .get(&node)
            .and_then(|list| {
                let i = partition_point_from_back(list, |d| d.send < answered);
                list.range(..i)
                    .rev()
                    .take(MAX_CLEAN_SCAN)
                    .find(|d| d.answer.is_some_and(|a| a.0 == answered))
                    .map(|d| at.saturating_sub(d.send))
            })
            .unwrap_or(REPLY_GAP_BACK_NS)
    }

    /// The first arrival at `node` on `conn` after `t` (the answer to a call sent at `t`).
    fn recv_after(&self, node: u64, conn: u64, t: Time) -> Option<(Time, u64, bool, u64)> {
        let (r, (id, request, kind_from)) = self.conns.get(&(node, conn))?.recvs.after(t)?;
        Some((r, id, request, kind_from))
    }

    /// The latest arrival at `node` on `conn` at or before `t`.
    fn recv_before(&self, node: u64, conn: u64, t: Time) -> Option<(Time, u64, bool)> {
        let (r, (id, request, _)) = self.conns.get(&(node, conn))?.recvs.before(t, true)?;
        Some((r, id, request))
    }

    /// When task `task` is answered (its node's first send on the request's connection
    /// after the request), if that is known yet.
    fn reply_of(&self, task: u64) -> Option<Time> {
        self.tasks.get(&task)?.reply_ns
    }

    /// Whether task `task` was answered before `t` (its node sent on the request's
    /// connection since the request came).
    fn answered(&self, task: u64, t: Time) -> bool {
        self.reply_of(task).is_some_and(|r| r < t)
    }

    /// Takes in a send as children come, in event-time order: what is known of it then (its
    /// endpoints' roles, the request it replies to, its answer). A root needs nothing more.
    fn prepare(&mut self, id: u64, m: &Message) -> Prep {
        let from = node_key(&m.src);
        let to = node_key(&m.dst);
        let ends =
            self.ports
                .observe_message(&m.src_endpoint, &m.dst_endpoint, from, to, m.event_ns);
        let mut p = Prep {
            id,
            from,
            to,
            from_client: ends.src_client,
            root: ends.src_client,
            conn: end_key(&m.src_endpoint, &m.dst_endpoint),
            at: 0,
            event_ns: m.event_ns,
            send_ns: m.send_ns,
            only_from: None,
            callee: ends.src_fixed,
            answers: None,
            child_to: if ends.dst_client { CLIENT_KEY } else { to },
            nested_until: None,
            answer_kind: None,
            answer_bytes: None,
            calls_back: None,
        };
        if p.root {
            return p;
        }
        (p.at, p.only_from) = match (m.send_ns, m.recv_ns) {
            (Some(s), _) => (s, None),
            (None, Some(r)) => (r, Some(to)),
            (None, None) => {
                p.root = true;
                return p;
            }
        };
        if p.only_from.is_none() {
            let margin = self.config.tasks_margin_ns();
            if let Some(tasks) = self.node_tasks.get_mut(&from) {
                tasks.advance(p.at, margin);
            }
        }
        // Beyond WAP5, for request/response connections. A node serves a request as a
        // *task*: the request, the calls the node makes for it and their answers, and the
        // reply. A message sent back on the connection that last brought a request in, with
        // no send on it since, is that request's reply: its cause is the latest message of
        // the request's task, never spontaneous. Any other send is caused by the latest
        // message of some task not answered yet (a task's earlier messages already caused
        // its later calls), and nested in it (the task is not answered before the call's
        // own answer comes back: Project 5 §5.1); a message that already caused a send is
        // less likely to cause another (Project 5's overlapping-child penalty).
        if p.callee && p.only_from.is_none() {
            p.answers = self
                .recv_before(from, p.conn, p.at)
                .filter(|r| r.2 && !self.answered(r.1, p.at))
                .map(|r| r.1);
        }
        if !p.callee && p.only_from.is_none() {
            let answer = self.recv_after(from, p.conn, p.at);
            p.nested_until = answer.map(|n| n.0);
            p.answer_kind = answer.map(|n| n.3);
            p.answer_bytes = answer.and_then(|n| self.sizes.get(&n.1)).map(|s| s.0);
        }
        // A call from a node to an endpoint of its own is not made for a task served at
        // that endpoint (a server does not call the port it serves): on one host, as on
        // loopback, a client process and the server it calls are one node, and the
        // client's next request would otherwise nest in the server's open requests.
        p.calls_back = (from == to && !p.callee).then(|| endpoint_key(&m.dst_endpoint));
        p
    }

    /// The candidate parents of a prepared send, each with its probability (in
    /// `scratch.candidates`), and the probability that it was spontaneous; `None` for a root
    /// (its node pair has no delay estimate yet). Changes nothing but the scratch buffers, so
    /// that a call can be weighed again after other calls of its node were decided.
    fn weigh(&mut self, p: &Prep) -> Option<Weighed> {
        self.weigh_as_of(p, None)
    }

    /// [`Linker::weigh`], counting as causes (for Project 5's penalty) only the sends caused
    /// before `before_event`, if given.
    fn weigh_as_of(&mut self, p: &Prep, before_event: Option<Time>) -> Option<Weighed> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let candidates = &mut scratch.candidates;
        candidates.clear();
        let learned = self.config.model == DelayModel::Learned;
        if let Some(t) = p.answers {
            // A reply: the latest message of its task.
            let latest = self.tasks.get(&t).and_then(|task| {
                let i = task.arrivals.partition_point(|a| a.0 <= p.at);
                i.checked_sub(1).map(|i| task.arrivals[i])
            });
            if let Some((local, pid, kind_from, request)) = latest {
                candidates.push(Candidate::new(
                    pid,
                    p.at - local,
                    link_type(kind_from, request, p.from, p.child_to, true),
                    Some(t),
                    None,
                    penalty(&self.caused, pid, None),
                ));
            }
        } else {
            let scan = Scan {
                before_event,
                ..p.scan()
            };
            self.scan(&scan, candidates);
        }
        // The smallest delay is WAP5's sample of the pair's mean delay.
        let smallest = candidates.first().map(|c| c.delay);
        let window = self.config.delay_window_ns;
        let width = self.config.bucket_width_ns();
        let d = self.estimates.get(&(p.from, p.to)).map_or_else(
            || smallest.map(|s| s as f64),
            |e| e.mean_at(p.event_ns, width, window, smallest, self.config.estimate),
        );
        let Some(d) = d else {
            self.scratch = scratch;
            return None;
        };
        let d = d.max(1_000.0);
        let y = self.config.spontaneous_factor;
        // WAP5's exponential only counts recent candidates; a learned density may put the
        // typical delay well past its horizon.
        let horizon = if learned { f64::MAX } else { d * (y + 7.0) };
        candidates.retain(|c| p.answers.is_some() || (c.delay as f64) <= horizon);
        candidates.truncate(self.config.max_candidates.max(1));
        const LEARNING: f64 = 50.0;
        let follows = &mut scratch.follows;
        follows.clear();
        if learned {
            let until = candidates
                .iter()
                .filter_map(|c| c.gap)
                .max()
                .zip(p.nested_until)
                .map(|(g, a)| a + g);
            if let Some(until) = until {
                self.follows(p, until, follows);
            }
        }
        // The gap density of each follow's type, looked up once.
        let follow_gaps: SmallVec<[Option<&DelayDensity>; 16]> = follows
            .iter()
            .map(|f| {
                self.densities
                    .get(&gap_type(f.kind))
                    .filter(|d| !stale(d.last_ns, window, p.event_ns))
            })
            .collect();
        for c in candidates.iter_mut() {
            let exponential = (-(c.delay as f64) / d).exp();
            // WAP5's exponential while the type has few samples.
            let (model, own) = match self.causal.get(&c.kind) {
                Some(density) if learned && !stale(density.last_ns, window, p.event_ns) => {
                    let e = density.samples();
                    let r = density.probability(c.delay as f64);
                    // Its sizes' evidence, on the odds.
                    let lr = self.size_odds(c, p.answer_bytes, p.event_ns);
                    let r = if r < 1.0 {
                        r * lr / (r * lr + 1.0 - r)
                    } else {
                        r
                    };
                    ((e * r + LEARNING * exponential) / (e + LEARNING), r)
                }
                _ => (exponential, 1.0),
            };
            // How typical the time from the call's answer to the task's reply is (Project 5
            // scores only the start of a nesting; its end tells a task that goes on from one
            // that answers at once).
            let gap = match (c.gap, self.densities.get(&gap_type(c.kind))) {
                (Some(g), Some(density))
                    if learned && !stale(density.last_ns, window, p.event_ns) =>
                {
                    let e = density.evidence();
                    let direct = density.relative(g as f64);
                    // Or the task went on with one more call: its delay after this call's
                    // answer and the time from its own answer to the reply.
                    let reply = p.nested_until.map_or(0, |a| a + g);
                    let mut via: f64 = 0.0;
                    for (f, d) in follows.iter().zip(&follow_gaps) {
                        if f.send >= reply {
                            break;
                        }
                        if let Some(d) = d.filter(|_| f.answer < reply) {
                            via = via.max(f.fit * d.relative((reply - f.answer) as f64));
                        }
                    }
                    let r = direct.max(via);
                    c.direct = if direct + via > 0.0 {
                        direct / (direct + via)
                    } else {
                        1.0
                    };
                    ((e * r + LEARNING) / (e + LEARNING), r)
                }
                _ => (1.0, 1.0),
            };
            // The weight under the learned model alone (1 while its type has no density
            // yet), for learning.
            c.learned = c.structural * own * gap.1;
            c.weight = c.structural * model * gap.0;
        }
        // A reply has no spontaneous alternative (beyond WAP5, which keeps it for every
        // message).
        let spontaneous = if p.answers.is_some() && !candidates.is_empty() {
            0.0
        } else {
            (-y).exp()
        };
        let total: f64 = spontaneous + candidates.iter().map(|c| c.weight).sum::<f64>();
        for c in candidates.iter_mut() {
            c.weight /= total;
        }
        self.scratch = scratch;
        Some(Weighed {
            spontaneous: spontaneous / total,
            smallest,
        })
    }

    /// How much the sizes multiply the odds that candidate `c` is the parent of a call
    /// answered with `answer_bytes`, at event time `t`: [`SizeEvidence::ratio`] for the
    /// answer's size, times [`ParentSizes::ratio`] for the candidate's own, times
    /// [`ReplySizes::ratio`] for the size of its task's reply given the answer's (each 1
    /// where not known, not learned, or stale).
    fn size_odds(&self, c: &Candidate, answer_bytes: Option<u64>, t: Time) -> f64 {
        let (kind, id) = (c.kind, c.id);
        let window = self.config.delay_window_ns;
        let answer = self
            .size_evidence
            .get(&kind)
            .filter(|s| !stale(s.last_ns, window, t))
            .zip(answer_bytes)
            .map_or(1.0, |(s, bytes)| s.ratio(bytes, MATCH_SAMPLES));
        let own = self
            .parent_sizes
            .get(&kind)
            .filter(|s| !stale(s.last_ns, window, t))
            .zip(self.sizes.get(&id))
            .map_or(1.0, |(s, &(bytes, _))| s.ratio(bytes, MATCH_SAMPLES));
        let reply = self
            .reply_sizes
            .get(&kind)
            .filter(|s| !stale(s.last_ns, window, t))
            .zip(answer_bytes.zip(self.reply_bytes(c.task)))
            .map_or(1.0, |(s, (answer, reply))| {
                s.ratio(answer, reply, MATCH_SAMPLES)
            });
        answer * own * reply
    }

    /// The size of the reply of task `task`, once known.
    fn reply_bytes(&self, task: Option<u64>) -> Option<u64> {
        self.tasks.get(&task?)?.reply_bytes
    }

    /// The calls the node of call `p` made after `p`'s answer came back and before `until`
    /// whose own answers came back before `until` (at most [`MAX_FOLLOWS`]), each with how typical its
    /// delay after that answer is for a call following it; the calls whose link type is
    /// not learned yet are left out.
    fn follows(&self, p: &Prep, until: Time, follows: &mut Vec<Follow>) {
        let (Some(a), Some(answer_kind)) = (p.nested_until, p.answer_kind) else {
            return;
        };
        let Some(list) = self.departures.get(&p.from) else {
            return;
        };
        let i = partition_point_from_back(list, |d| d.send <= a);
        for d in list.range(i..).take(MAX_FOLLOWS) {
            if d.send >= until {
                break;
            }
            let Some((answer, callee)) = d.answer.filter(|x| x.0 < until) else {
                continue;
            };
            let kind = link_type(answer_kind, false, p.from, callee, false);
            if let Some(density) = self.matured(kind, p.event_ns) {
                follows.push(Follow {
                    send: d.send,
                    answer,
                    kind,
                    fit: density.relative((d.send - a) as f64),
                });
            }
        }
    }

    /// How far the null of message `id` is shifted into the past: spread over half to one and
    /// a half times `null_shift_ns` by the message's id, so that a workload periodic in about
    /// the shift does not look caused.
    fn null_shift(&self, id: u64) -> Time {
        self.config.null_shift_ns / 2
            + ((u128::from(self.config.null_shift_ns) * u128::from(id)) >> 64) as Time
    }

    /// Where the arrivals of the sender of `p` begin (its time, if none came yet): what a
    /// scan shifted into the past cannot see before.
    fn first_local(&self, p: &Prep) -> Time {
        self.first_arrival
            .get(&p.from)
            .map_or(p.at, |f| f.first_local)
    }

    /// Whether the gap `(start, end)` of `node` is clean ([`TypicalDelay`]): the node made no
    /// call in it whose answer came back in it. A gap holding more than [`MAX_CLEAN_SCAN`]
    /// sends is taken as not clean.
    fn clean(&self, node: u64, start: Time, end: Time) -> bool {
        let Some(list) = self.departures.get(&node) else {
            return true;
        };
        let i = partition_point_from_back(list, |d| d.send <= start);
        for d in list.range(i..).take(MAX_CLEAN_SCAN) {
            if d.send >= end {
                return true;
            }
            if d.answer.is_some_and(|a| a.0 < end) {
                return false;
            }
        }
        list.len() - i <= MAX_CLEAN_SCAN
    }

    /// Learns from a weighed send's candidates: their delays against the time-shifted null's
    /// (the causal densities), and the gaps from calls' answers to their tasks' replies.
    fn learn(&mut self, p: &Prep, candidates: &[Candidate]) {
        let learned = self.config.model == DelayModel::Learned;
        let window = self.config.delay_window_ns;
        let mut scratch = std::mem::take(&mut self.scratch);
        if learned && p.answers.is_none() {
            // The same scan at a time shifted into the past, where no send is: what a
            // candidate of each type looks like when it is not the parent.
            let shift = self.null_shift(p.id);
            let first = self.first_local(p);
            let null = &mut scratch.null;
            null.clear();
            // The longest delay both scans could see.
            let mut seen_back: Time = 0;
            if p.at > shift && p.event_ns > shift {
                // Only delays the null could have seen are compared.
                seen_back = (p.at - shift).saturating_sub(first);
                let scan = p.scan();
                let null_scan = Scan {
                    at: p.at - shift,
                    nested_until: scan.nested_until.map(|n| n.saturating_sub(shift)),
                    before_event: Some(p.event_ns - shift),
                    ..scan
                };
                self.scan(&null_scan, null);
                null.truncate(self.config.max_candidates.max(1));
            }
            // Each candidate's delay, and each of the null's, by its structural weight.
            let memory = self.config.causal_memory;
            let at = (window, p.event_ns);
            let kinds = &mut scratch.kinds;
            kinds.clear();
            // Per type, its candidates and the null's, each weighed by how likely its
            // delay makes it the parent (the same densities for both, before they learn
            // from this call): in all, by the size of the call's answer ([`SizeEvidence`]),
            // and by each one's own size ([`ParentSizes`]).
            if let Some(bytes) = p.answer_bytes {
                let sums = &mut scratch.sizes;
                sums.clear();
                for (list, null) in [(candidates, false), (&null[..], true)] {
                    for c in list.iter().filter(|c| c.delay <= seen_back) {
                        let Some(q) = self
                            .causal
                            .get(&c.kind)
                            .filter(|d| matured(d, window, p.event_ns))
                            .map(|d| d.probability(c.delay as f64))
                        else {
                            continue;
                        };
                        let i = match sums.iter().position(|s| s.0 == c.kind) {
                            Some(i) => i,
                            None => {
                                sums.push((c.kind, 0.0, 0.0));
                                sums.len() - 1
                            }
                        };
                        let w = if null { c.weight * q } else { c.structural * q };
                        if null {
                            sums[i].2 += w;
                        } else {
                            sums[i].1 += w;
                        }
                        if let Some(&(size, _)) = self.sizes.get(&c.id) {
                            density_at(
                                &mut self.parent_sizes,
                                c.kind,
                                at,
                                || ParentSizes::new(memory),
                                |d| d.last_ns,
                            )
                            .add(size, w, null);
                        }
                        if let Some(reply) = self.reply_bytes(c.task) {
                            density_at(
                                &mut self.reply_sizes,
                                c.kind,
                                at,
                                || ReplySizes::new(memory),
                                |d| d.last_ns,
                            )
                            .add(bytes, reply, w, null);
                        }
                    }
                }
                for &(kind, cand, nul) in sums.iter() {
                    density_at(
                        &mut self.size_evidence,
                        kind,
                        at,
                        || SizeEvidence::new(memory),
                        |d| d.last_ns,
                    )
                    .add(bytes, cand, nul, p.event_ns);
                    if let Some(d) = self.parent_sizes.get_mut(&kind) {
                        d.step(p.event_ns);
                    }
                    if let Some(d) = self.reply_sizes.get_mut(&kind) {
                        d.step(p.event_ns);
                    }
                }
            }
            for c in candidates.iter().filter(|c| c.delay <= seen_back) {
                causal_at(&mut self.causal, c.kind, at, memory)
                    .add_candidate(c.delay as f64, c.structural);
                kinds.push(c.kind);
            }
            for c in null.iter().filter(|c| c.delay <= seen_back) {
                causal_at(&mut self.causal, c.kind, at, memory).add_null(c.delay as f64, c.weight);
                kinds.push(c.kind);
            }
            kinds.sort_unstable();
            kinds.dedup();
            for k in kinds.iter() {
                if let Some(d) = self.causal.get_mut(k) {
                    d.step(p.event_ns);
                }
            }
        }
        if learned && candidates.iter().any(|c| c.gap.is_some()) {
            // The gaps are learned by expectation-maximisation as the data streams: each
            // candidate counts its probability under the learned model (all alike at first:
            // Project 5's 1/N).
            let n = candidates.len() as f64;
            let sum: f64 = candidates.iter().map(|c| c.learned).sum();
            let memory = self.config.type_memory;
            for c in candidates.iter() {
                let q = if sum > 0.0 { c.learned / sum } else { 1.0 / n };
                if let Some(g) = c.gap {
                    density_at(
                        &mut self.densities,
                        gap_type(c.kind),
                        (window, p.event_ns),
                        || DelayDensity::new(memory),
                        |d| d.last_ns,
                    )
                    .add(g as f64, q * c.direct);
                }
            }
            let kinds = &mut scratch.kinds;
            kinds.clear();
            kinds.extend(
                candidates
                    .iter()
                    .filter_map(|c| c.gap.map(|_| gap_type(c.kind))),
            );
            kinds.sort_unstable();
            kinds.dedup();
            for k in kinds.iter() {
                if let Some(density) = self.densities.get_mut(k) {
                    density.step(p.event_ns);
                }
            }
        }
        self.scratch = scratch;
    }

    /// Decides a weighed send (`candidates` and `weighed` from [`Linker::weigh`]): learns
    /// from its candidates if `learn`, records its most likely cause (`chosen`, when its
    /// node's calls were decided jointly; else the most likely candidate) and its task, and
    /// gives it out.
    fn commit(
        &mut self,
        p: &Prep,
        m: Box<Message>,
        candidates: &[Candidate],
        weighed: Option<Weighed>,
        chosen: Option<u64>,
        learn: bool,
    ) -> Linked {
        let Some(Weighed {
            spontaneous: p_spont,
            smallest,
        }) = weighed
        else {
            self.set_task(p.from, p.conn, p.send_ns, p.answers, None);
            return p.root(m);
        };
        let window = self.config.delay_window_ns;
        let width = self.config.bucket_width_ns();
        let estimate = self.estimates.entry((p.from, p.to)).or_default();
        // What has left the window goes now, not when `expire` runs.
        estimate.trim(p.event_ns, width, window);
        if let Some(s) = smallest {
            let b = estimate.bucket(p.event_ns, width, window);
            b.1 += s as f64;
            b.2 += 1.0;
        }
        if learn {
            self.learn(p, candidates);
        }
        let estimate = self.estimates.entry((p.from, p.to)).or_default();
        let total: f64 = candidates.iter().map(|c| c.weight).sum();
        if total > 0.0 {
            let b = estimate.bucket(p.event_ns, width, window);
            for c in candidates.iter() {
                b.3 += c.weight * c.delay as f64;
                b.4 += c.weight;
            }
        }
        let best = match chosen {
            Some(id) => candidates.iter().find(|c| c.id == id),
            None => candidates
                .iter()
                .filter(|c| c.weight > p_spont)
                .max_by(|a, b| a.weight.total_cmp(&b.weight).then(b.delay.cmp(&a.delay))),
        };
        let task = p.answers.or_else(|| best.and_then(|c| c.task));
        // A reply: whether its task may be missing a call. Not if the gap from the task's
        // latest message is clean; else as far as its delay is untypical of complete tasks.
        let typical = match (p.answers, best) {
            (Some(_), Some(c)) if self.config.model == DelayModel::Learned => {
                let start = p.at.saturating_sub(c.delay);
                let clean = self.clean(p.from, start, p.at);
                // The same gap shifted into the past, where the node's own history is.
                let shift = self.null_shift(p.id);
                let first = self.first_local(p);
                let shifted_clean = (start > first.saturating_add(shift))
                    .then(|| self.clean(p.from, start - shift, p.at - shift));
                let memory = self.config.type_memory;
                let d = density_at(
                    &mut self.typical,
                    c.kind,
                    (window, p.event_ns),
                    || TypicalDelay::new(memory),
                    |d| d.last_ns,
                );
                let r = if clean {
                    1.0
                } else if d.values() < MATCH_SAMPLES {
                    d.clean_share(CLEAN_EVIDENCE)
                        .map_or(1.0, |s| s.max(TYPICAL_FLOOR))
                } else {
                    (d.relative(c.delay as f64) / TYPICAL_FLOOR).min(1.0)
                };
                d.observe(c.delay as f64, clean, shifted_clean, p.event_ns);
                // And, after an answer, as far as its gap is evidence about the task's
                // latest call: a clean gap after another task's answer (the call given to
                // the wrong task) is still one that such replies do not take. Evidence for
                // the call raises what the clean-gap test left; evidence against it and that
                // test both say the task lost a call: the stronger one counts.
                let g = self.reply_gap(p, c, m.bytes);
                if g > 1.0 { r * g } else { r.min(g) }
            }
            _ => 1.0,
        };
        // A call's: how likely its cause is against its other candidates (not against its
        // being spontaneous).
        let weight = best
            .filter(|_| p.answers.is_none())
            .map(|c| if total > 0.0 { c.weight / total } else { 1.0 });
        let best = best.map(|c| c.id);
        if let Some(b) = best {
            let e = self.caused.entry(b).or_insert((0, p.event_ns, p.event_ns));
            e.0 += 1;
            e.2 = e.2.max(p.event_ns);
        }
        self.set_task(p.from, p.conn, p.send_ns, task, weight);
        let min = self.config.min_probability;
        let parents = candidates
            .iter()
            .filter(|c| c.weight >= min || Some(c.id) == best)
            .map(|c| (c.id, to_prob(c.weight)))
            .collect();
        Linked {
            id: p.id,
            message: m,
            parents,
            spontaneous: to_prob(p_spont),
            best,
            from_client: p.from_client,
            keys: (p.from, p.to),
            typical: (typical.clamp(0.0, MAX_TYPICAL) * f64::from(ONE)).round() as Prob,
        }
    }

    /// How much the gap of reply `p` after `latest`, its task's latest message, weighs its
    /// instances, if `latest` is an answer (1 otherwise, and while the reply's type has
    /// fewer than [`MATCH_SAMPLES`] replies); then learns from `p`.
    ///
    /// The gaps are learned per reply type and number of calls its task made (a task that
    /// queried twice replies after its second answer as no task that queried once does),
    /// against the time-shifted null ([`CausalDensity`]): before each reply, the answers of
    /// its task's latest answer's kind that its node received, and the same before a time
    /// shifted into the past. Whichever answer is the reply's cause, the excess at a gap is
    /// what such answers add there; it is learned from what the node received, not from the
    /// links, so that tasks given other tasks' answers cannot teach their gaps (the gap
    /// densities of the end fit learn from the links, and did). The gap's likelihood ratio
    /// `λ` ([`CausalDensity::likelihood_ratio`], the excess taken [`REPLY_GAP_SIGMAS`] low)
    /// is evidence about the calls given to the task, all of which must be its for the gap
    /// to be its reply's (a task given another's first call carries that task's later
    /// calls, each of them placed with certainty), against the other tasks they might have
    /// been given to (their answers taken as chance's), as likely as `link` found them
    /// together (`w`, the product of their probabilities): by Bayes they are right with
    /// probability `w·λ / (w·λ + 1 − w)`, so the instance, which counted them at about `w`,
    /// counts `λ / (w·λ + 1 − w)` times as much (at least [`TYPICAL_FLOOR`]; at most `1/w`).
    /// Calls that were hard to place lose their task's instances to an untypical gap and
    /// regain what their doubt cost at a typical one; calls not in doubt are not judged (a
    /// rare pattern's gap shows little excess on a busy node, but its calls are not in
    /// doubt). The gaps are learned, too, per reply type, number of calls and size class of
    /// the reply (`bytes`, its power of two), and judged by those first; a number of calls
    /// too rare to have [`MATCH_SAMPLES`] replies is judged by the gaps pooled over all
    /// numbers. Where the task had an earlier answer of the latest's
    /// kind, only answers that came after its latest call was sent are scanned, at both
    /// times (else the earlier answers' mode, narrower in the log bins and so taller, could
    /// be the one fitted: on the generator's multi-tier preset at parallelism 45, seed 8,
    /// an application server's two-query replies were judged against their tasks' first
    /// answers for half the trace, and their instances weighed at the floor).
    fn reply_gap(&mut self, p: &Prep, latest: &Candidate, bytes: Option<u64>) -> f64 {
        let Some(task) = p.answers.and_then(|t| self.tasks.get(&t)) else {
            return 1.0;
        };
        let i = task.arrivals.partition_point(|a| a.0 <= p.at);
        let Some(from) = i
            .checked_sub(1)
            .map(|i| task.arrivals[i])
            .filter(|a| !a.3 && a.1 == latest.id)
            .map(|a| a.2)
        else {
            return 1.0;
        };
        let w = f64::from(task.chain);
        if latest.delay > REPLY_GAP_BACK_NS || w >= REPLY_GAP_DOUBT {
            return 1.0;
        }
        let hasher = FixedState::with_seed(0x7368_6170);
        let kind = hasher.hash_one((latest.kind, task.calls.min(4)));
        // And by the reply's size class (its power of two): tasks of one reply type and
        // number of calls can be of several kinds, each replying after its own gap (a web
        // server's reports reply 2 ms after their application call's answer, its dynamic
        // pages 1.5 ms, with 45 and 12 kB); judged by the mixture, the rarer kind's replies
        // are raised where the commoner's gap is.
        let sized = bytes
            .map(|b| hasher.hash_one((latest.kind, task.calls.min(4), 64 - b.leading_zeros())));
        let pooled = hasher.hash_one((latest.kind, POOLED_CALLS));
        let window = self.config.delay_window_ns;
        let ready = |k: &u64| {
            self.reply_gaps
                .get(k)
                .is_some_and(|d| matured(d, window, p.event_ns))
        };
        let judge = sized.into_iter().chain([kind, pooled]).find(ready);
        let typical = match judge
            .and_then(|k| self.reply_gaps.get_mut(&k))
            .and_then(|d| d.likelihood_ratio(latest.delay as f64, REPLY_GAP_SIGMAS))
        {
            Some(lr) => (lr / (w * lr + 1.0 - w)).max(TYPICAL_FLOOR),
            None => 1.0,
        };
        // Learn: the answers of that kind before the reply, and before the shifted time
        // (only gaps the shifted scan could see are compared), under the task's number of
        // calls and pooled over all numbers (what a number too rare to have matured is
        // judged by).
        let shift = self.null_shift(p.id);
        let first = self.first_local(p);
        // Where the task had an earlier answer of the same kind (an application server's
        // report: its first query's answer 18 ms before the reply, the second's 6 ms),
        // only the answers that came after its latest call was sent: the earlier ones make
        // a second mode, narrower and so taller than the latest's, which the fit took.
        let repeated = task.arrivals[..i - 1].iter().any(|a| !a.3 && a.2 == from);
        let since_call = if repeated {
            self.since_call(p.from, p.at, p.at.saturating_sub(latest.delay))
        } else {
            REPLY_GAP_BACK_NS
        };
        if p.at > shift && p.at - shift > first {
            let seen_back = (p.at - shift - first)
                .min(REPLY_GAP_BACK_NS)
                .min(since_call);
            let mut gaps: SmallVec<[(Time, bool); 2 * MAX_REPLY_GAP_SCAN]> = SmallVec::new();
            if let Some(list) = self.answers.get(&p.from) {
                for (at, null) in [(p.at, false), (p.at - shift, true)] {
                    let end = partition_point_from_back(list, |a| a.0 < at);
                    let mut found = 0;
                    for &(a, _, kind_from) in list.range(..end).rev() {
                        let gap = at - a;
                        if gap > seen_back || found == MAX_REPLY_GAP_SCAN {
                            break;
                        }
                        if kind_from != from {
                            continue;
                        }
                        found += 1;
                        gaps.push((gap, null));
                    }
                }
            }
            let memory = self.config.causal_memory;
            for k in sized.into_iter().chain([kind, pooled]) {
                let d = causal_at(&mut self.reply_gaps, k, (window, p.event_ns), memory);
                for &(gap, null) in &gaps {
                    if null {
                        d.add_null(gap as f64, 1.0);
                    } else {
                        d.add_candidate(gap as f64, 1.0);
                    }
                }
                d.step(p.event_ns);
            }
        }
        typical
    }

    /// Learns from a send decided already, weighed again as of its time.
    fn learn_again(&mut self, p: &Prep) {
        if self.weigh_as_of(p, Some(p.event_ns)).is_some() {
            let candidates = std::mem::take(&mut self.scratch.candidates);
            self.learn(p, &candidates);
            self.scratch.candidates = candidates;
        }
    }

    /// Links a send on its own, at once: weighs it and takes its most likely cause.
    fn link_now(&mut self, p: &Prep, m: Box<Message>) -> Linked {
        if p.root {
            return p.root(m);
        }
        let weighed = self.weigh(p);
        let candidates = std::mem::take(&mut self.scratch.candidates);
        let linked = self.commit(p, m, &candidates, weighed, None, true);
        self.scratch.candidates = candidates;
        linked
    }

    /// The learned causal density of `kind` at `t`, if it has seen [`MATCH_SAMPLES`]
    /// candidates and is not stale: what a match window's assignment may weigh by.
    fn matured(&self, kind: u64, t: Time) -> Option<&CausalDensity> {
        let window = self.config.delay_window_ns;
        self.causal.get(&kind).filter(|d| matured(d, window, t))
    }

    /// Decides the sends one node made in one match window ([`LinkConfig::match_window_ns`]),
    /// in time order: first its calls jointly, by rounds of minimum-cost assignment
    /// ([`Assign`]) of calls to candidate parents (each parent causing one call, a second
    /// and third at Project 5's overlapping-child penalty; a call may stay undecided), the
    /// calls assigned in a round decided (their answers join their tasks and become the
    /// candidates of the calls that follow them), the rest weighed again in the next round;
    /// then, in time order, the replies and whatever no round decided, each by its most
    /// likely cause.
    fn flush(&mut self, sends: WindowSends, out: &mut Vec<Linked>) {
        const ROUNDS: usize = 8;
        let mut sends: Vec<Option<(Prep, Box<Message>)>> = sends.into_iter().map(Some).collect();
        let mut undecided: Vec<usize> = sends
            .iter()
            .enumerate()
            .filter(|(_, s)| s.as_ref().is_some_and(|(p, _)| p.is_call()))
            .map(|(i, _)| i)
            .collect();
        let mut state = std::mem::take(&mut self.matching);
        // The calls decided by rounds, to learn from as if decided in time order.
        let mut learn_later: Vec<Prep> = Vec::new();
        for _ in 0..ROUNDS {
            if undecided.is_empty() {
                break;
            }
            let Matching {
                arena,
                answers,
                rows,
                columns,
                ids,
                uses,
                assign,
            } = &mut state;
            arena.clear();
            rows.clear();
            columns.clear();
            ids.clear();
            // The answers to the undecided calls: (receive time, id, sender as link types
            // name it, the call's id), by time.
            answers.clear();
            for &i in undecided.iter() {
                let Some((p, _)) = &sends[i] else { continue };
                if let Some((r, aid, false, kind_from)) = self.recv_after(p.from, p.conn, p.at) {
                    answers.push((r, aid, kind_from, p.id));
                }
            }
            answers.sort_unstable();
            for &i in undecided.iter() {
                let Some((p, _)) = &sends[i] else { continue };
                let mut weighed = self.weigh(p);
                // Only a call whose candidates' types are learned takes part: before, its
                // candidates would be weighed by the exponential alone, and a call
                // assigned on it, before the calls it follows are, would teach the
                // densities what the candidates look like while they are not (its task's
                // request, not the answer it followed).
                let learned = self
                    .scratch
                    .candidates
                    .iter()
                    .all(|c| self.matured(c.kind, p.event_ns).is_some());
                if !learned {
                    weighed = None;
                }
                let start = arena.len();
                if let Some(w) = weighed.as_mut() {
                    arena.extend_from_slice(&self.scratch.candidates);
                    // The answers of the calls still undecided that came before this one:
                    // what it may have followed once they are decided (it is then weighed
                    // again). Without them, a call that followed one of them would be
                    // assigned now to the best of the rest.
                    let x = self.config.max_delay_ns;
                    let lo = answers.partition_point(|a| a.0.saturating_add(x) < p.at);
                    let hi = answers.partition_point(|a| a.0 <= p.at);
                    let spontaneous = (-self.config.spontaneous_factor).exp();
                    // The weights so far, back to before they were normalised.
                    let scale = spontaneous / w.spontaneous.max(1e-300);
                    let mut added = 0.0;
                    for &(r, aid, kind_from, of) in answers[lo..hi].iter().rev() {
                        if arena.len() - start >= 2 * self.config.max_candidates {
                            break;
                        }
                        if of == p.id {
                            continue;
                        }
                        let kind = link_type(kind_from, false, p.from, p.child_to, false);
                        let Some(d) = self.matured(kind, p.event_ns) else {
                            continue;
                        };
                        let q = d.probability((p.at - r) as f64);
                        if q <= 0.0 {
                            continue;
                        }
                        let mut c = Candidate::new(aid, p.at - r, kind, None, None, q / scale);
                        c.undecided = true;
                        arena.push(c);
                        added += q / scale;
                    }
                    if added > 0.0 {
                        let total = 1.0 + added;
                        for c in &mut arena[start..] {
                            c.weight /= total;
                        }
                        w.spontaneous /= total;
                    }
                }
                rows.push((start, arena.len(), weighed));
                for c in &arena[start..] {
                    columns.entry(c.id).or_insert_with(|| {
                        ids.push(c.id);
                        ids.len() - 1
                    });
                }
            }
            assign.clear(ids.len() * COPIES);
            for &(start, end, weighed) in rows.iter() {
                let Some(w) = weighed else {
                    assign.row(0.0);
                    continue;
                };
                assign.row(cost(w.spontaneous));
                for c in &arena[start..end] {
                    let column = columns[&c.id] * COPIES;
                    for copy in 0..COPIES {
                        // Project 5's overlapping-child penalty, 1/(n + 1)² for the n-th
                        // further child.
                        let extra = 2.0 * ((copy + 1) as f64).ln();
                        assign.edge(column + copy, cost(c.weight) + extra);
                    }
                }
            }
            let solution = assign.solve();
            uses.clear();
            uses.resize(ids.len(), 0);
            for &c in solution
                .iter()
                .filter(|&&c| c != crate::paths::assign::NONE)
            {
                uses[c as usize / COPIES] += 1;
            }
            let mut decided = 0;
            for (row, &i) in undecided.iter().enumerate() {
                let c = solution[row];
                if c == crate::paths::assign::NONE {
                    continue;
                }
                let chosen = ids[c as usize / COPIES];
                let (start, end, weighed) = rows[row];
                let Some(mut w) = weighed else { continue };
                // A call given an answer still undecided waits for the next round; the
                // others are decided on their own candidates.
                if arena[start..end]
                    .iter()
                    .any(|c| c.id == chosen && c.undecided)
                {
                    continue;
                }
                let end = start
                    + arena[start..end]
                        .iter()
                        .take_while(|c| !c.undecided)
                        .count();
                // A candidate this round gave to other calls weighs what a parent of as many
                // calls does (Project 5's penalty), and the weights are normalised again.
                let candidates = &mut arena[start..end];
                for c in candidates.iter_mut() {
                    let others = uses[columns[&c.id]] - u32::from(c.id == chosen);
                    if others > 0 {
                        c.weight /= f64::from(others + 1).powi(2);
                    }
                }
                let total = w.spontaneous + candidates.iter().map(|c| c.weight).sum::<f64>();
                for c in candidates.iter_mut() {
                    c.weight /= total;
                }
                w.spontaneous /= total;
                let Some((p, m)) = sends[i].take() else {
                    continue;
                };
                out.push(self.commit(&p, m, &arena[start..end], Some(w), Some(chosen), false));
                learn_later.push(p);
                decided += 1;
            }
            undecided.retain(|&i| sends[i].is_some());
            if decided == 0 {
                break;
            }
        }
        self.matching = state;
        // In time order: what the rounds decided is learned from (weighed again, now that
        // the calls before it are decided, as it would have been in time order), the rest
        // decided one by one.
        learn_later.sort_by_key(|q| (q.event_ns, q.at, q.id));
        let mut later = learn_later.into_iter().peekable();
        for (p, m) in sends.into_iter().flatten() {
            while let Some(q) = later.next_if(|q| (q.event_ns, q.at) <= (p.event_ns, p.at)) {
                self.learn_again(&q);
            }
            out.push(self.link_now(&p, m));
        }
        for q in later {
            self.learn_again(&q);
        }
    }

    /// The candidate parents of a send at `scan.at` among its node's arrivals, most recent
    /// first, each weighed by structure alone (penalties; not by delay).
    ///
    /// A two-sided send's candidates are the latest arrival (at or before the send) of each
    /// task of its node that is open (not answered before the send, nor before the send's
    /// own answer came back), and for a send to a fixed port, the arrivals that belong to no
    /// task. [`NodeTasks::open_at`] finds the tasks open at `at`, so a scan costs what the
    /// node had in progress then, not what it received within `x` or the margin.
    fn scan(&mut self, scan: &Scan, candidates: &mut Vec<Candidate>) {
        let Scan {
            at,
            id,
            from,
            child_to,
            only_from,
            callee,
            nested_until,
            calls_back,
            before_event,
        } = *scan;
        let x = self.config.max_delay_ns;
        let keep = self.config.max_candidates.max(1);
        let start = candidates.len();
        if let Some(only) = only_from {
            // The sender side alone was seen: the messages the receiver sent it shortly
            // before (A→B→A), most recent first.
            let Some(list) = self.one_sided.get(&from) else {
                return;
            };
            let end = partition_point_from_back(list, |a| a.local_ns <= at);
            for a in list.range(..end).rev() {
                if at - a.local_ns > x || candidates.len() - start >= keep {
                    break;
                }
                if a.from != only || a.id == id {
                    continue;
                }
                let w = penalty(&self.caused, a.id, before_event);
                candidates.push(Candidate::arrived(a, at, from, child_to, w));
            }
            return;
        }
        // Answered before this send or before the call's own answer came.
        let answered = |r: Time| r < at || nested_until.is_some_and(|n| r < n);
        if let Some(tasks) = self.node_tasks.get(&from) {
            tasks.open_at(at, |t| {
                if t.reply_ns.is_some_and(answered) {
                    return;
                }
                let Some(task) = self.tasks.get(&t.task) else {
                    return;
                };
                if Some(task.served) == calls_back {
                    return;
                }
                // The task's latest message at or before the send (its earlier messages
                // caused its earlier sends).
                let i = task.arrivals.partition_point(|a| a.0 <= at);
                let Some(&(local, aid, kind_from, request)) =
                    task.arrivals[..i].iter().rev().find(|a| a.1 != id)
                else {
                    return;
                };
                if at - local > x {
                    return;
                }
                candidates.push(Candidate::new(
                    aid,
                    at - local,
                    link_type(kind_from, request, from, child_to, false),
                    Some(t.task),
                    nested_until
                        .zip(task.reply_ns)
                        .and_then(|(n, r)| r.checked_sub(n)),
                    // Weighed by the penalty once the most recent are chosen.
                    1.0,
                ));
            });
        }
        if callee {
            // A message to an ephemeral port that answers nothing: its thread of work is
            // unknown, and such messages would otherwise stay candidates for as long as
            // `x`. (A call is made for a task: an answer that belongs to none answered a
            // call that started a path itself, what a client does next, not a cause.)
            if let Some(list) = self.taskless.get(&from) {
                let end = partition_point_from_back(list, |a| a.local_ns <= at);
                for a in list.range(..end).rev() {
                    if at - a.local_ns > x {
                        break;
                    }
                    if a.id == id {
                        continue;
                    }
                    let w = TASKLESS * penalty(&self.caused, a.id, before_event);
                    candidates.push(Candidate::arrived(a, at, from, child_to, w));
                }
            }
        }
        // The `max_candidates` most recent.
        let order = |a: &Candidate, b: &Candidate| {
            a.delay
                .cmp(&b.delay)
                .then(b.id.cmp(&a.id))
                .then(a.task.cmp(&b.task))
        };
        let found = &mut candidates[start..];
        if found.len() > keep {
            found.select_nth_unstable_by(keep, order);
        }
        candidates.truncate(start + keep);
        candidates[start..].sort_by(order);
        for c in candidates[start..].iter_mut().filter(|c| c.task.is_some()) {
            let w = penalty(&self.caused, c.id, before_event);
            (c.structural, c.learned, c.weight) = (w, w, w);
        }
    }

    /// Records the task of the send by `node` on `conn` at `send`.
    fn set_task(
        &mut self,
        node: u64,
        conn: u64,
        send: Option<Time>,
        task: Option<u64>,
        call_weight: Option<f64>,
    ) {
        let (Some(s), Some(task)) = (send, task) else {
            return;
        };
        if let (Some(t), Some(w)) = (self.tasks.get_mut(&task), call_weight) {
            t.calls = t.calls.saturating_add(1);
            t.chain *= w as f32;
        }
        let Some(log) = self.conns.get_mut(&(node, conn)).map(|c| &mut c.sends) else {
            return;
        };
        let i = log.entries.partition_point(|t| t.0 < s);
        let Some(t) = log
            .entries
            .get_mut(i)
            .filter(|t| t.0 == s && t.1.task.is_none())
        else {
            return;
        };
        t.1.task = Some(task);
        // The call's answer, if it came already (the first arrival on `conn` after the call,
        // with no other send between), is the task's.
        let next_send = log.entries.get(i + 1).map(|t| t.0);
        let Some((r, rid, false, kind_from)) = self.recv_after(node, conn, s) else {
            return;
        };
        if next_send.is_some_and(|n| n < r) {
            return;
        }
        let Some(k) = self.tasks.get_mut(&task) else {
            return;
        };
        if let Some(list) = self.taskless.get_mut(&node) {
            let j = partition_point_from_back(list, |a| a.local_ns < r);
            if let Some(off) = list
                .range(j..)
                .take_while(|a| a.local_ns == r)
                .position(|a| a.id == rid)
            {
                list.remove(j + off);
                add_arrival(&mut k.arrivals, (r, rid, kind_from, false));
            }
        }
    }
}

/// Inserts an arrival into a node's list, by receive time (mostly in order: from the back).
fn insert_by_local(list: &mut VecDeque<Arrived>, a: Arrived) {
    let mut i = list.len();
    while i > 0 && list[i - 1].local_ns > a.local_ns {
        i -= 1;
    }
    list.insert(i, a);
}

/// Adds an arrival to a task's, in receive-time order.
fn add_arrival(arrivals: &mut TaskArrivals, a: (Time, u64, u64, bool)) {
    if arrivals.iter().any(|x| x.1 == a.1) {
        return;
    }
    let i = arrivals.partition_point(|x| x.0 <= a.0);
    arrivals.insert(i, a);
}

/// The sends of one node's match window, in time order.
type WindowSends = Vec<(Prep, Box<Message>)>;

/// The match windows still open: per node, the sends it made in its current window
/// ([`LinkConfig::match_window_ns`]), windows aligned to multiples of the width so that where
/// they fall does not depend on the order nodes come in. State: the sends of the open
/// windows, at most a window's worth per node; a window is closed, and its sends decided and
/// freed, as soon as the frontier passes its end.
#[derive(Default)]
struct MatchWindows {
    /// Per node: its window's start and sends, in time order.
    open: FastMap<u64, (Time, WindowSends)>,
    /// (end, node) of every open window.
    ends: BTreeSet<(Time, u64)>,
    /// How many open windows start at each time, for the capability.
    starts: BTreeMap<Time, usize>,
}

impl MatchWindows {
    fn push(&mut self, p: Prep, m: Box<Message>, width: Time) {
        let start = p.event_ns - p.event_ns % width;
        let window = self.open.entry(p.from).or_insert_with(|| {
            self.ends.insert((start.saturating_add(width), p.from));
            *self.starts.entry(start).or_default() += 1;
            (start, Vec::new())
        });
        debug_assert!(p.event_ns >= window.0 && p.event_ns - window.0 < width);
        window.1.push((p, m));
    }

    /// When the first open window ends.
    fn next_close(&self) -> Option<Time> {
        self.ends.first().map(|e| e.0)
    }

    /// Where the first open window starts: every send still in a window is at or after it.
    fn first_start(&self) -> Option<Time> {
        self.starts.first_key_value().map(|e| *e.0)
    }

    /// Closes the first window to end: its sends.
    fn close(&mut self) -> Option<WindowSends> {
        let (_, node) = self.ends.pop_first()?;
        let (start, sends) = self.open.remove(&node)?;
        if let Some(n) = self.starts.get_mut(&start) {
            *n -= 1;
            if *n == 0 {
                self.starts.remove(&start);
            }
        }
        Some(sends)
    }
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
    /// For a warm start ([`WarmStart`]), to worker `.1`: an event time no later than every
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
            let child = LinkInput::Child(node_key(&m.src), id, m);
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
                    let bound = pipeline.run(now, &mut linked);
                    output.session(&*cap).give_iterator(linked.drain(..));
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

/// A warm start (beyond WAP5): the inputs are held until the frontier has passed the first
/// [`LinkConfig::warmup_ns`] of event time; those of the warm-up are then linked once, to
/// learn from (the output dropped), and everything held is linked afresh with what was
/// learned ([`Linker::relearned`]). Decisions early in a run are then made with densities
/// that have seen a warm-up's worth of messages, not none (WAP5's exponential, which
/// prefers the most recent candidate, stands in until a type has seen
/// [`MATCH_SAMPLES`]; a type's learned density settles only after some thousands).
///
/// Which inputs the warm-up holds depends neither on timing nor on the number of workers:
/// it ends once the frontier is past the earliest message's event time (on any worker: each
/// worker tells every other the earliest it has seen, [`LinkInput::Start`]) plus the warm-up,
/// plus `link`'s own lateness and slack, when every input before that is in; only
/// [`LinkConfig::warmup_max`] held inputs end it sooner. Memory: the inputs up to then (as
/// the reorder buffers would hold them), and for the first pass a copy of those of the
/// warm-up, freed with it.
#[derive(Default)]
struct WarmStart {
    inputs: Vec<LinkInput>,
    /// The earliest event time of any message, as far as it is known.
    start: Option<Time>,
}

impl WarmStart {
    fn hold(&mut self, i: LinkInput) {
        let t = i.event_ns();
        self.start = Some(self.start.map_or(t, |s| s.min(t)));
        if !matches!(i, LinkInput::Start(..)) {
            self.inputs.push(i);
        }
    }

    /// The frontier past which every input of the warm-up, and every input the first pass
    /// could take in, is in.
    fn end(&self, config: LinkConfig) -> Option<Time> {
        self.start.map(|s| {
            s.saturating_add(config.warmup_ns)
                .saturating_add(config.lateness_ns)
                .saturating_add(config.order_slack_ns)
        })
    }

    /// Whether the warm-up is over: the frontier `now` has passed its [`Self::end`], or the
    /// input has ended, or it holds [`LinkConfig::warmup_max`] inputs.
    fn over(&self, now: Option<Time>, config: LinkConfig) -> bool {
        let passed = match (now, self.end(config)) {
            (None, _) => true,
            (Some(n), Some(end)) => n >= end,
            (Some(_), None) => false,
        };
        let full = self.inputs.len() >= config.warmup_max;
        // Under memory pressure the inputs held are the first to go.
        let cut = !passed && !full && shed::active();
        if cut {
            shed::note(shed::Stage::Warmup, self.inputs.len() as u64);
        }
        passed || full || cut
    }

    /// Links the warm-up to learn from it, and returns a pipeline that holds every input
    /// again, to be linked with what was learned.
    fn finish(self, config: LinkConfig) -> Pipeline {
        let mut first = Pipeline::new(Linker::new(config));
        if let Some(end) = self.end(config) {
            // With the frontier at `end`, the first pass takes in what comes before `end`
            // less `link`'s lateness (arrivals and sends; children up to `slack` before).
            let reach = end.saturating_sub(config.lateness_ns);
            for i in self.inputs.iter().filter(|i| i.event_ns() < reach) {
                first.push(i.clone());
            }
            let mut dropped = Vec::new();
            first.run(Some(end), &mut dropped);
        }
        let mut pipeline = Pipeline::new(first.linker.relearned());
        for i in self.inputs {
            pipeline.push(i);
        }
        pipeline
    }
}

/// The linker with its inputs waiting in event-time order and its open match windows.
struct Pipeline {
    linker: Linker,
    windows: MatchWindows,
    children: Reorder<Box<Message>>,
    arrivals: Reorder<Box<Arrival>>,
    /// The sends themselves, known as early as the arrivals: (node, connection, send time,
    /// event time).
    departures: Reorder<(u64, u64, Time, Time, Option<u64>)>,
}

impl Pipeline {
    fn new(linker: Linker) -> Self {
        Pipeline {
            linker,
            windows: MatchWindows::default(),
            children: Reorder::default(),
            arrivals: Reorder::default(),
            departures: Reorder::default(),
        }
    }

    fn push(&mut self, i: LinkInput) {
        match i {
            LinkInput::Child(from, id, m) => {
                if let Some(s) = m.send_ns {
                    let conn = end_key(&m.src_endpoint, &m.dst_endpoint);
                    self.departures
                        .push(m.event_ns, id, (from, conn, s, m.event_ns, m.bytes));
                }
                self.children.push(m.event_ns, id, m);
            }
            LinkInput::Arrival(a) => self.arrivals.push(a.event_ns, a.id, a),
            LinkInput::Start(..) => {}
        }
    }

    /// The time below which everything is linked, with the frontier at `now`.
    fn bound(&self, now: Option<Time>) -> Option<Time> {
        let lag = shed::capped(self.linker.config.lateness_ns);
        let slack = shed::capped(self.linker.config.order_slack_ns);
        let bound = now.map(|n| n.saturating_sub(lag.saturating_add(slack)));
        // Sends waiting in a match window are linked at or after its start.
        match (bound, self.windows.first_start()) {
            (Some(b), Some(w)) => Some(b.min(w)),
            (b, w) => b.or(w),
        }
    }

    /// Links what the frontier at `now` lets through, into `linked`; returns [`Self::bound`].
    fn run(&mut self, now: Option<Time>, linked: &mut Vec<Linked>) -> Option<Time> {
        let linker = &mut self.linker;
        let windows = &mut self.windows;
        // Children wait `order_slack_ns` longer than arrivals. Both are taken in one order,
        // an arrival at `t` as if at `t - slack`, so that what a child sees (arrivals, port
        // evidence) does not depend on how the frontier moved. Messages may come up to
        // `lateness_ns` after the frontier has passed their event time (upstream windows): a
        // time counts as passed only that much later, so that what is linked does not depend
        // on timing.
        // Under memory pressure both wait at most the cap (`shed`).
        let slack = shed::capped(linker.config.order_slack_ns);
        let lag = shed::capped(linker.config.lateness_ns);
        let arrivals_bound = now.map(|n| n.saturating_sub(lag));
        let bound = now.map(|n| n.saturating_sub(lag.saturating_add(slack)));
        let unshed = now.map(|n| {
            n.saturating_sub(
                linker
                    .config
                    .lateness_ns
                    .saturating_add(linker.config.order_slack_ns),
            )
        });
        loop {
            // A match window closes like a child at its end: after the arrivals of up to
            // `slack` past it, before the children from its end on.
            let next_child = self.children.first().map(|(t, _)| t);
            let next_close = windows.next_close();
            let next = match (next_child, next_close) {
                (Some(c), Some(w)) => Some(c.min(w)),
                (c, w) => c.or(w),
            };
            let departure = self
                .departures
                .first()
                .filter(|(t, _)| arrivals_bound.is_none_or(|b| *t < b));
            if let Some((td, _)) = departure {
                if next.is_none_or(|tc| td.saturating_sub(slack) <= tc) {
                    if let Some((_, _, (node, conn, send, event, bytes))) =
                        self.departures.pop_before(arrivals_bound)
                    {
                        linker.depart(node, conn, send, event, bytes);
                    }
                    continue;
                }
            }
            let arrival = self
                .arrivals
                .first()
                .filter(|(t, _)| arrivals_bound.is_none_or(|b| *t < b));
            let child = next.filter(|t| bound.is_none_or(|b| *t < b));
            let take_arrival = match (arrival, child) {
                (Some((ta, _)), Some(tc)) => ta.saturating_sub(slack) <= tc,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_arrival {
                if let Some((_, _, a)) = self.arrivals.pop_touching(arrivals_bound) {
                    linker.insert(a);
                }
            } else if next_close.is_some_and(|w| next_child.is_none_or(|c| w <= c)) {
                if let Some(sends) = windows.close() {
                    linker.flush(sends, linked);
                }
            } else if let Some((t, id, m)) = self.children.pop_touching(bound) {
                if unshed.is_some_and(|u| t >= u) {
                    shed::note(shed::Stage::Link, 1);
                }
                let p = linker.prepare(id, &m);
                let width = linker.config.match_window_ns;
                if width > 0 && !p.root && p.only_from.is_none() {
                    windows.push(p, m, width);
                } else {
                    linked.push(linker.link_now(&p, m));
                }
            }
        }
        let bound = self.bound(now);
        if let Some(b) = bound {
            self.linker.expire(b);
        }
        bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use timely::dataflow::operators::capture::Extract;
    use timely::dataflow::operators::{Capture, ToStream};

    fn msg(src: &str, dst: &str, send: Time, recv: Time) -> Message {
        Message::between(src, dst, send, recv)
    }

    /// A message `src` → `dst` sent at `send`, received 10 µs later, of `bytes` if given.
    fn sized_msg(src: &str, dst: &str, send: Time, bytes: Option<u64>) -> Message {
        let mut m = msg(src, dst, send, send + 10_000);
        m.bytes = bytes;
        m
    }

    fn run(messages: Vec<Message>) -> Vec<Linked> {
        run_with(messages, LinkConfig::default())
    }

    proptest::proptest! {
        /// A node's tasks found open at a time are exactly those asked by then and not
        /// answered before it, whatever their durations and however replies came and moved
        /// (some answered twice, the second time earlier).
        #[test]
        fn tasks_open_at_a_time_are_found(
            tasks in proptest::collection::vec(
                (0u64..1_000_000, proptest::option::of(0u64..1u64 << 40), proptest::option::of(0u64..1000)),
                1..60,
            ),
            probes in proptest::collection::vec(0u64..2_000_000_000_000, 1..20),
        ) {
            let mut node = NodeTasks::default();
            let mut truth = Vec::new();
            for (i, &(request_ns, first, earlier)) in tasks.iter().enumerate() {
                let task = i as u64;
                // Known at insertion or told later.
                let at_insert = first.filter(|d| d % 2 == 0).map(|d| request_ns + d);
                node.insert(TaskRef { request_ns, task, reply_ns: at_insert, event_ns: 0 });
                let mut reply = at_insert;
                if at_insert.is_none() {
                    if let Some(d) = first {
                        node.answer(request_ns, task, None, request_ns + d);
                        reply = Some(request_ns + d);
                    }
                }
                if let (Some(r), Some(e)) = (reply, earlier) {
                    let new = request_ns + (r - request_ns) * e / 1000;
                    node.answer(request_ns, task, reply, new);
                    reply = Some(new);
                }
                truth.push((request_ns, task, reply));
            }
            for at in probes {
                let mut found = Vec::new();
                node.open_at(at, |t| {
                    if t.reply_ns.is_none_or(|r| r >= at) {
                        found.push(t.task);
                    }
                });
                found.sort_unstable();
                let expected: Vec<u64> = truth
                    .iter()
                    .filter(|&&(q, _, r)| q <= at && r.is_none_or(|r| r >= at))
                    .map(|t| t.1)
                    .collect();
                proptest::prop_assert_eq!(found, expected);
            }
        }
    }

    fn run_with(messages: Vec<Message>, config: LinkConfig) -> Vec<Linked> {
        let captured = timely::example(move |scope| {
            messages
                .into_iter()
                .map(Box::new)
                .to_stream(scope)
                .container::<Vec<_>>()
                .link(config)
                .capture()
        });
        let mut out: Vec<Linked> = captured
            .extract()
            .into_iter()
            .flat_map(|(_, l)| l)
            .collect();
        out.sort_by_key(|l| l.message.event_ns);
        out
    }

    /// `n` clients 10.1.0.x call B (10.0.0.2:80), one every `spacing`; B calls C
    /// (10.0.0.3:5432) 1 ms after each request: request, call, request, call...
    fn clients_call_b_and_b_calls_c(n: u64, spacing: Time) -> Vec<Message> {
        const MS: Time = 1_000_000;
        let mut messages = Vec::new();
        for i in 0..n {
            let t = 1_000 * MS + i * spacing;
            let client = format!("10.1.0.{}:{}", i % 200 + 1, 40000 + i);
            messages.push(msg(&client, "10.0.0.2:80", t, t + MS / 10));
            messages.push(msg(
                &format!("10.0.0.2:{}", 50000 + i),
                "10.0.0.3:5432",
                t + MS + MS / 10,
                t + MS + 2 * MS / 10,
            ));
        }
        messages
    }

    #[test]
    fn match_windows_close_in_order_of_their_ends() {
        let p = |from: u64, event_ns: Time| Prep {
            id: event_ns,
            from,
            to: 0,
            from_client: false,
            root: false,
            conn: 0,
            at: event_ns,
            event_ns,
            send_ns: Some(event_ns),
            only_from: None,
            callee: false,
            answers: None,
            child_to: 0,
            nested_until: None,
            answer_kind: None,
            answer_bytes: None,
            calls_back: None,
        };
        let mut w = MatchWindows::default();
        let m = || Box::new(Message::default());
        w.push(p(1, 120), m(), 100);
        w.push(p(2, 95), m(), 100);
        w.push(p(1, 150), m(), 100);
        assert_eq!(w.first_start(), Some(0));
        assert_eq!(w.next_close(), Some(100));
        let first = w.close().unwrap_or_default();
        assert_eq!(first.iter().map(|s| s.0.id).collect::<Vec<_>>(), vec![95]);
        assert_eq!(w.first_start(), Some(100));
        assert_eq!(w.next_close(), Some(200));
        let second = w.close().unwrap_or_default();
        assert_eq!(
            second.iter().map(|s| s.0.id).collect::<Vec<_>>(),
            vec![120, 150]
        );
        assert_eq!((w.first_start(), w.next_close()), (None, None));
        assert!(w.close().is_none());
    }

    #[test]
    fn match_windows_give_out_every_message_once_and_agree_where_nothing_is_ambiguous() {
        const MS: Time = 1_000_000;
        // As below, over more than one window; enough of them that the link types are
        // learned and the later windows are matched.
        let messages = clients_call_b_and_b_calls_c(240, 7 * MS);
        let jointly = run_with(messages.clone(), LinkConfig::default());
        let alone = run_with(
            messages.clone(),
            LinkConfig {
                match_window_ns: 0,
                ..LinkConfig::default()
            },
        );
        let ids = |l: &[Linked]| {
            let mut v: Vec<u64> = l.iter().map(|l| l.id).collect();
            v.sort_unstable();
            v
        };
        let mut all: Vec<u64> = messages.iter().map(message_id).collect();
        all.sort_unstable();
        assert_eq!(ids(&jointly), all);
        assert_eq!(ids(&alone), all);
        let best = |l: &[Linked]| l.iter().map(|l| (l.id, l.best)).collect::<Vec<_>>();
        assert_eq!(best(&jointly), best(&alone));
        for (i, l) in jointly.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
            assert_eq!(l.best, Some(message_id(&messages[i - 1])), "{l:?}");
        }
    }

    /// Pairs of tasks at B, one pair every 10 ms (see
    /// [`a_call_goes_to_the_task_whose_end_fits_it`]); the messages in time order, and for
    /// each pair the ids of its C calls with their true parents.
    fn tasks_x_and_y(pairs: u64) -> (Vec<Message>, Vec<[(u64, u64); 2]>) {
        const MS: Time = 1_000_000;
        const US: Time = 1_000;
        let mut messages = Vec::new();
        let mut truth = Vec::new();
        for i in 0..pairs {
            let t = 1_000 * MS + i * 10 * MS;
            let (x, y) = (
                format!("10.1.0.{}:{}", i % 200 + 1, 40000 + 2 * i),
                format!("10.1.0.{}:{}", i % 200 + 1, 40001 + 2 * i),
            );
            let (cx, cy, dx) = (
                format!("10.0.0.2:{}", 20000 + 3 * i),
                format!("10.0.0.2:{}", 20001 + 3 * i),
                format!("10.0.0.2:{}", 20002 + 3 * i),
            );
            let request_x = msg(&x, "10.0.0.2:80", t - 50 * US, t);
            let request_y = msg(&y, "10.0.0.2:80", t + 50 * US, t + 100 * US);
            // The C calls, 2.05 and 1.96 ms after their requests, 10 µs apart (which
            // leaves first alternates).
            let (sx, sy) = if i % 2 == 0 {
                (t + 2_050 * US, t + 2_060 * US)
            } else {
                (t + 2_060 * US, t + 2_050 * US)
            };
            let call_x = msg(&cx, "10.0.0.3:5432", sx, sx + 10 * US);
            let call_y = msg(&cy, "10.0.0.3:5432", sy, sy + 10 * US);
            let answer_x = msg("10.0.0.3:5432", &cx, sx + 990 * US, sx + MS);
            let answer_y = msg("10.0.0.3:5432", &cy, sy + 1_390 * US, sy + 1_400 * US);
            let call_d = msg(&dx, "10.0.0.4:6379", sx + 2 * MS, sx + 2 * MS + 10 * US);
            let answer_d = msg("10.0.0.4:6379", &dx, sx + 3 * MS - 10 * US, sx + 3 * MS);
            let reply_x = msg("10.0.0.2:80", &x, sx + 4 * MS, sx + 4 * MS + 50 * US);
            let reply_y = msg("10.0.0.2:80", &y, sy + 2_400 * US, sy + 2_450 * US);
            truth.push([
                (message_id(&call_x), message_id(&request_x)),
                (message_id(&call_y), message_id(&request_y)),
            ]);
            messages.extend([
                request_x, request_y, call_x, call_y, answer_x, answer_y, call_d, answer_d,
                reply_x, reply_y,
            ]);
        }
        messages.sort_by_key(|m| m.event_ns);
        (messages, truth)
    }

    /// How many of the (call, true parent) pairs in `truth` `out` gives their true parent.
    fn right_calls<'a>(out: &[Linked], truth: impl IntoIterator<Item = &'a (u64, u64)>) -> usize {
        let best: FastMap<u64, Option<u64>> = out.iter().map(|l| (l.id, l.best)).collect();
        truth
            .into_iter()
            .filter(|(call, request)| best.get(call) == Some(&Some(*request)))
            .count()
    }

    /// Pairs of tasks at B: X calls C and then D before it replies, Y calls C and replies.
    /// Their C calls leave together, as long after either request; what tells them apart
    /// is how each task ends: X's C answer is followed by its D call, Y's by its reply.
    /// (This holds with the gap weighed without looking a call ahead too: two tasks at a
    /// time leave the gap densities little to blur. What the look-ahead changes, at 46
    /// tasks in flight, is measured by `benches/accuracy.rs`; here it must not break what
    /// worked.) The first 100 pairs are left out: they come while the densities learn.
    #[test]
    fn a_call_goes_to_the_task_whose_end_fits_it() {
        let (messages, truth) = tasks_x_and_y(400);
        let out = run(messages);
        let right = right_calls(&out, truth[100..].iter().flatten());
        assert!(
            right as f64 >= 0.95 * 600.0,
            "{right} of 600 C calls given their own task"
        );
    }

    /// Every 10 ms, a request X comes to B and B calls C 3 ms later for it; another request,
    /// Y, comes in between (0.2 to 2.7 ms before the call, spread evenly), stays open past
    /// the call's answer and is replied to without a call. WAP5's exponential, which stands
    /// in while nothing is learned, takes the more recent Y; the learned density, X. With a
    /// warm start over the first second (100 requests), the first calls are linked with
    /// what the warm-up taught, as well as the later ones; every message is linked once.
    #[test]
    fn a_warm_start_links_the_first_calls_with_what_the_warm_up_taught() {
        const MS: Time = 1_000_000;
        const US: Time = 1_000;
        let mut messages = Vec::new();
        let mut truth = Vec::new();
        for i in 0..400u64 {
            let t = 1_000 * MS + i * 10 * MS;
            let (x, y) = (
                format!("10.1.0.{}:{}", i % 200 + 1, 40000 + 2 * i),
                format!("10.1.0.{}:{}", i % 200 + 1, 40001 + 2 * i),
            );
            let cx = format!("10.0.0.2:{}", 20000 + i);
            let decoy = 200 * US + (i * 7_919) % 2_500 * US;
            let request_x = msg(&x, "10.0.0.2:80", t - 50 * US, t);
            let request_y = msg(
                &y,
                "10.0.0.2:80",
                t + 3 * MS - decoy - 50 * US,
                t + 3 * MS - decoy,
            );
            let call = msg(&cx, "10.0.0.3:5432", t + 3 * MS, t + 3 * MS + 10 * US);
            let answer = msg("10.0.0.3:5432", &cx, t + 3_490 * US, t + 3_500 * US);
            let reply_x = msg("10.0.0.2:80", &x, t + 4_500 * US, t + 4_550 * US);
            let reply_y = msg("10.0.0.2:80", &y, t + 6 * MS, t + 6 * MS + 50 * US);
            truth.push((message_id(&call), message_id(&request_x)));
            messages.extend([request_x, request_y, call, answer, reply_x, reply_y]);
        }
        messages.sort_by_key(|m| m.event_ns);
        let warm_start = LinkConfig {
            warmup_ns: 1_000 * MS,
            ..LinkConfig::default()
        };
        let (cold, warm) = (
            run(messages.clone()),
            run_with(messages.clone(), warm_start),
        );
        let mut ids: Vec<u64> = warm.iter().map(|l| l.id).collect();
        ids.sort_unstable();
        let mut all: Vec<u64> = messages.iter().map(message_id).collect();
        all.sort_unstable();
        assert_eq!(ids, all);
        let (cold_first, warm_first) = (
            right_calls(&cold, &truth[..100]),
            right_calls(&warm, &truth[..100]),
        );
        let (cold_later, warm_later) = (
            right_calls(&cold, &truth[100..]),
            right_calls(&warm, &truth[100..]),
        );
        assert!(
            warm_first >= 95 && cold_first < 50,
            "first 100 calls: {warm_first} right with a warm start, {cold_first} without"
        );
        // Y stays a plausible parent here, and the later calls come out about as right
        // either way (183 and 192 of 300 when written): the gap densities learned from the
        // first pass's decisions, made while the causal densities were young, carry over
        // with them. Carrying over the causal densities alone put the later calls at 290,
        // but on the generator's multi-tier trace at parallelism 45 the gaps then had to be
        // learned afresh and the per-node delay error rose from 4.5% to 9.2%.
        assert!(
            warm_later as f64 >= 0.9 * cold_later as f64,
            "later 300 calls: {warm_later} right with a warm start, {cold_later} without"
        );
    }

    /// Every 10 ms a report R comes to B: B queries C about 3 ms later (answered with
    /// 30 kB), again about 2 ms after that answer (answered with 8 kB), and replies. A
    /// dynamic page D comes too, and B queries C about 3 ms after it (answered with 4 kB)
    /// and replies. Each delay varies by ±0.3 ms. In three slots of four D's query comes
    /// long after R's first answer; in the fourth (the ones returned as truth), D comes 1 ms
    /// before that answer and both second queries leave 2 ms after it, 20 µs apart (either
    /// first): each is 2 ms after R's first answer and 3 ms after D, timing cannot tell
    /// which is which, and only the sizes of their answers can ([`SizeEvidence`]).
    fn reports_and_dynamic_pages(slots: u64, sized: bool) -> (Vec<Message>, Vec<(u64, u64)>) {
        const MS: Time = 1_000_000;
        const US: Time = 1_000;
        let mut messages = Vec::new();
        let mut truth = Vec::new();
        let sized_msg = |src: &str, dst: &str, send: Time, bytes: u64| {
            sized_msg(src, dst, send, sized.then_some(bytes))
        };
        for i in 0..slots {
            let t = 1_000 * MS + i * 10 * MS;
            let jitter = |k: u64| ((i * 7_919 + k * 104_729) % 601) * US;
            let (r, d) = (
                format!("10.1.0.{}:{}", i % 200 + 1, 40000 + 2 * i),
                format!("10.1.0.{}:{}", i % 200 + 1, 40001 + 2 * i),
            );
            let (c1, c2, cd) = (
                format!("10.0.0.2:{}", 20000 + 3 * i),
                format!("10.0.0.2:{}", 20001 + 3 * i),
                format!("10.0.0.2:{}", 20002 + 3 * i),
            );
            let together = i % 4 == 0;
            // R's first query leaves at `first` and is answered 0.5 ms later (received 10
            // µs after that).
            let first = t + 2_700 * US + jitter(1);
            let answered = first + 500 * US;
            let (second, request_d, query_d, reply_r, reply_d) = if together {
                // 20 µs apart, either first.
                let (second, query_d) = if i % 8 == 0 {
                    (answered + 2_000 * US, answered + 2_020 * US)
                } else {
                    (answered + 2_020 * US, answered + 2_000 * US)
                };
                (
                    second,
                    answered - 1_010 * US,
                    query_d,
                    second + 1_500 * US,
                    query_d + 1_500 * US,
                )
            } else {
                let second = answered + 1_700 * US + jitter(2);
                let request_d = t + 3_900 * US;
                let query_d = request_d + 2_700 * US + jitter(3);
                (
                    second,
                    request_d,
                    query_d,
                    second + 1_500 * US,
                    query_d + 1_500 * US,
                )
            };
            let request_r = sized_msg(&r, "10.0.0.2:80", t, 500);
            let query_1 = sized_msg(&c1, "10.0.0.3:5432", first, 260);
            let answer_1 = sized_msg("10.0.0.3:5432", &c1, answered - 10 * US, 30_000);
            let query_2 = sized_msg(&c2, "10.0.0.3:5432", second, 240);
            let answer_2 = sized_msg("10.0.0.3:5432", &c2, second + 490 * US, 8_000);
            let request = sized_msg(&d, "10.0.0.2:80", request_d, 500);
            let query = sized_msg(&cd, "10.0.0.3:5432", query_d, 250);
            let answer_d = sized_msg("10.0.0.3:5432", &cd, query_d + 490 * US, 4_000);
            if together {
                truth.push((message_id(&query_2), message_id(&answer_1)));
                truth.push((message_id(&query), message_id(&request)));
            }
            messages.extend([
                request_r,
                query_1,
                answer_1,
                query_2,
                answer_2,
                sized_msg("10.0.0.2:80", &r, reply_r, 40_000),
                request,
                query,
                answer_d,
                sized_msg("10.0.0.2:80", &d, reply_d, 9_000),
            ]);
        }
        messages.sort_by_key(|m| m.event_ns);
        (messages, truth)
    }

    /// Where timing cannot tell two calls apart, what answers them can
    /// ([`reports_and_dynamic_pages`]): of the last 300 slots' 150 such calls, 136 right
    /// with sizes and 76 (about half) without, when written.
    #[test]
    fn a_call_answered_like_second_queries_follows_an_answer() {
        let right = |sized: bool| {
            let (messages, truth) = reports_and_dynamic_pages(400, sized);
            right_calls(&run(messages), &truth[50..])
        };
        let (with, without) = (right(true), right(false));
        assert!(
            with >= 125 && without <= 100,
            "{with} of 150 right with sizes, {without} without"
        );
    }

    /// A web server B (10.0.0.2:80) serves reports (its application call, to
    /// 10.0.0.4:8080, answered with 40 kB; its reply 45 kB) and dynamic pages (answered with
    /// 9 kB; replying 12 kB), the two alike in their requests (500 bytes), their calls'
    /// delays and their answers' times. In every slot a report and a page come in; in one
    /// slot of four (`together`) their requests arrive 20 µs apart, either first, and their
    /// calls leave at once, so that nothing but sizes tells which call is whose; in the others the
    /// page comes 3.9 ms after the report. Returns the messages, and each `together` call
    /// with its true parent. `reply_sized`: whether the replies carry their sizes.
    fn reports_and_pages_at_a_web_server(
        slots: u64,
        reply_sized: bool,
    ) -> (Vec<Message>, Vec<(u64, u64)>) {
        const MS: Time = 1_000_000;
        const US: Time = 1_000;
        let mut messages = Vec::new();
        let mut truth = Vec::new();
        for i in 0..slots {
            let t = 1_000 * MS + i * 10 * MS;
            let jitter = |k: u64| ((i * 7_919 + k * 104_729) % 401) * US;
            let together = i % 4 == 0;
            let (start_r, start_d) = match (together, i % 8 == 0) {
                (true, true) => (t, t + 20 * US),
                (true, false) => (t + 20 * US, t),
                (false, _) => (t, t + 3_900 * US),
            };
            for (k, start, answer_bytes, reply_bytes) in
                [(0, start_r, 40_000, 45_000), (1, start_d, 9_000, 12_000)]
            {
                let client = format!("10.1.{}.{}:{}", k, i % 200 + 1, 40000 + i);
                let port = format!("10.0.0.2:{}", 20000 + 2 * i + k);
                // Together, both calls leave at once, as long after either request as
                // calls are after theirs.
                let call_at = if together {
                    t + 1_200 * US + jitter(2) / 2
                } else {
                    start + 1_000 * US + jitter(k)
                };
                let request = sized_msg(&client, "10.0.0.2:80", start - 10 * US, Some(500));
                let call = sized_msg(&port, "10.0.0.4:8080", call_at, Some(700));
                let answer = sized_msg(
                    "10.0.0.4:8080",
                    &port,
                    call_at + 3_000 * US,
                    Some(answer_bytes),
                );
                let reply = sized_msg(
                    "10.0.0.2:80",
                    &client,
                    call_at + 4_500 * US,
                    reply_sized.then_some(reply_bytes),
                );
                if together {
                    truth.push((message_id(&call), message_id(&request)));
                }
                messages.extend([request, call, answer, reply]);
            }
        }
        messages.sort_by_key(|m| m.event_ns);
        (messages, truth)
    }

    /// Where neither timing nor the requests tell two calls apart, the sizes of their
    /// answers and of the tasks' replies do ([`reports_and_pages_at_a_web_server`]): of the
    /// last 300 slots' 150 such calls, 122 right with the replies' sizes and 66 (about
    /// half) without, when written. (Not more: the together slots' other candidates come
    /// with the calls, so the excess over the null counts them with the parents.)
    #[test]
    fn a_call_goes_to_the_task_whose_reply_is_sized_for_its_answer() {
        let right = |reply_sized: bool| {
            let (messages, truth) = reports_and_pages_at_a_web_server(400, reply_sized);
            right_calls(&run(messages), &truth[50..])
        };
        let (with, without) = (right(true), right(false));
        assert!(
            with >= 110 && without <= 90,
            "{with} of 150 right with the replies' sizes, {without} without"
        );
    }

    #[test]
    fn the_nearest_arrival_is_the_likely_parent() {
        const MS: Time = 1_000_000;
        let messages = clients_call_b_and_b_calls_c(5, 100 * MS);
        let linked = run(messages.clone());
        assert_eq!(linked.len(), 10);
        for (i, l) in linked.iter().enumerate() {
            if i % 2 == 0 {
                assert!(l.from_client, "client requests start paths");
                assert_eq!(l.spontaneous, ONE);
            } else {
                let parent = message_id(&messages[i - 1]);
                assert_eq!(l.best, Some(parent), "{l:?}");
                assert!(l.parents[0].1 > ONE * 9 / 10, "{l:?}");
            }
        }
    }

    /// Request `n` from its own client to B (10.0.0.2:80), received at `t`, and B's reply
    /// `reply_after` later; with `call`, B calls C (10.0.0.3:5432) 5 ms after the request and
    /// is answered 1 ms later. Returns the reply's id.
    fn served_by_b(
        messages: &mut Vec<Message>,
        n: u64,
        t: Time,
        reply_after: Time,
        call: bool,
    ) -> u64 {
        const MS: Time = 1_000_000;
        let client = format!("10.1.{}.{}:{}", n / 200, n % 200 + 1, 40000 + n);
        messages.push(msg(&client, "10.0.0.2:80", t - 100, t));
        if call {
            let port = format!("10.0.0.2:{}", 50000 + n);
            messages.push(msg(&port, "10.0.0.3:5432", t + 5 * MS, t + 5 * MS + 100));
            messages.push(msg("10.0.0.3:5432", &port, t + 6 * MS - 100, t + 6 * MS));
        }
        let reply = msg(
            "10.0.0.2:80",
            &client,
            t + reply_after,
            t + reply_after + 100,
        );
        messages.push(reply.clone());
        message_id(&reply)
    }

    /// Tasks served by B ([`served_by_b`]), each from its own client.
    #[derive(Default)]
    struct TasksOfB {
        messages: Vec<Message>,
        n: u64,
    }

    impl TasksOfB {
        /// Adds one ([`served_by_b`]); returns its reply's id.
        fn add(&mut self, t: Time, reply_after: Time, call: bool) -> u64 {
            self.n += 1;
            served_by_b(&mut self.messages, self.n, t, reply_after, call)
        }
    }

    /// The [`Linked::typical`] of message `id` among `linked`.
    fn typical_of(linked: &[Linked], id: u64) -> Prob {
        linked.iter().find(|l| l.id == id).expect("linked").typical
    }

    #[test]
    fn a_reply_far_later_than_its_kind_is_untypical_if_a_call_was_made_and_answered_in_its_gap() {
        const MS: Time = 1_000_000;
        // Requests from many clients to B (10.0.0.2:80), 10 ms apart: every other one answered
        // 1.0-1.2 ms later with no call, the others after a call to C (10.0.0.3:5432) sent
        // 5 ms after the request and answered 1 ms later, the reply 1 ms after that.
        let mut tasks = TasksOfB::default();
        let t0 = 1_000 * MS;
        for i in 0..400u64 {
            let t = t0 + i * 10 * MS;
            if i % 2 == 0 {
                tasks.add(t, MS + (i % 3) * MS / 10, false);
            } else {
                tasks.add(t, 7 * MS, true);
            }
        }
        // A slow reply, 30 ms after its request, with no call of B in between.
        let t = t0 + 4_000 * MS;
        let alone = tasks.add(t, 30 * MS, false);
        // Two requests 0.3 ms apart and one call 5 ms after them, answered 1 ms later: one
        // of the two tasks made it, and the other, whose gap holds the call and its answer
        // and is far longer than a task of its kind's, may be the one that did.
        let t = t0 + 4_100 * MS;
        let first = tasks.add(t, 30 * MS, true);
        let second = tasks.add(t + 300_000, 10 * MS, false);
        let linked = run(tasks.messages);
        let typical = |id: u64| typical_of(&linked, id);
        assert_eq!(typical(alone), ONE, "slow for its own reasons");
        let (a, b) = (typical(first), typical(second));
        assert!(a.min(b) < ONE * 9 / 10, "{a} {b}");
    }

    /// Two requests to B, 0.1 ms apart, each calling C 5 ms later: either call may be either
    /// request's. At a node where every reply comes 1 ms after its task's answer, both
    /// replies come 5 ms after: evidence against the calls as given, and their instances
    /// count less. The same gap after a call no other request could have made is no such
    /// evidence. Replies 1 ms after are evidence for the calls: their instances count more.
    #[test]
    fn a_reply_long_after_an_answer_of_a_call_in_doubt_counts_less_and_one_not_in_doubt_does_not() {
        const MS: Time = 1_000_000;
        let mut tasks = TasksOfB::default();
        // A request at `t`, its call 5 ms later answered 1 ms after, the reply `gap` after
        // the answer.
        let mut task = |t: Time, gap: Time| tasks.add(t, 6 * MS + gap, true);
        let t0 = 1_000 * MS;
        // Pairs of requests 0.1 ms apart, 20 ms between pairs, each replied to 1 ms after
        // its answer.
        let mut usual = (0, 0);
        for i in 0..400u64 {
            let t = t0 + i * 20 * MS;
            usual = (task(t, MS), task(t + MS / 10, MS));
        }
        // A pair whose replies come 5 ms after their answers.
        let t = t0 + 8_000 * MS;
        let first = task(t, 5 * MS);
        let second = task(t + MS / 10, 5 * MS);
        // A lone request, its reply 5 ms after its answer.
        let alone = task(t + 100 * MS, 5 * MS);
        tasks.messages.sort_by_key(|m| m.send_ns);
        let linked = run(tasks.messages);
        let typical = |id: u64| typical_of(&linked, id);
        let (a, b) = (typical(first), typical(second));
        assert!(a < ONE / 2 && b < ONE / 2, "{a} {b}");
        assert_eq!(typical(alone), ONE);
        // The usual pair's replies, 1 ms after their answers, bear their calls out.
        let (a, b) = (typical(usual.0), typical(usual.1));
        assert!(a > ONE && b > ONE, "{a} {b}");
    }

    /// A node whose tasks all call C, and requests in pairs 0.1 ms apart of which only one
    /// calls: whichever task the call is given to, the other's reply follows its request
    /// straight, 7 ms later, its gap holding the call and the answer. No reply of that kind
    /// is ever clean, where windows as long on this node are two times in three: such
    /// replies are tasks that lost a call, and count for little. (Before any was learned
    /// clean, a reply type judged nothing.) The other reply, 1 ms after the call's answer
    /// as every reply here is, bears the call out and counts more.
    #[test]
    fn a_reply_type_never_clean_where_windows_as_long_often_are_counts_little() {
        const MS: Time = 1_000_000;
        let mut tasks = TasksOfB::default();
        let t0 = 1_000 * MS;
        let mut pair = (0, 0);
        for i in 0..200u64 {
            let t = t0 + i * 20 * MS;
            pair = (
                tasks.add(t, 7 * MS, true),
                tasks.add(t + MS / 10, 7 * MS + MS / 2, false),
            );
        }
        tasks.messages.sort_by_key(|m| m.send_ns);
        let linked = run(tasks.messages);
        let typical = |id: u64| typical_of(&linked, id);
        let (a, b) = (typical(pair.0), typical(pair.1));
        // The task given the call replies as soon after its answer as tasks here do: the
        // call, in doubt between the two, is borne out.
        assert!(a.max(b) > ONE && a.min(b) < ONE / 10, "{a} {b}");
    }

    /// A node that makes no calls can be missing none: however many of its replies a slow
    /// reply's gap holds, the gap is clean (a scan cut short must not count as a call).
    #[test]
    fn a_slow_reply_of_a_node_that_makes_no_calls_keeps_its_weight_however_busy_it_is() {
        const MS: Time = 1_000_000;
        let mut tasks = TasksOfB::default();
        let mut task = |t: Time, reply_after: Time| tasks.add(t, reply_after, false);
        let t0 = 1_000 * MS;
        // Quiet: replies 20 ms after their requests, which come 10 ms apart.
        for i in 0..300u64 {
            task(t0 + i * 10 * MS, 20 * MS);
        }
        // Busy: requests 0.1 ms apart, and one reply 60 ms after its request, its gap
        // holding some 600 other replies (well over what a scan once stopped at).
        let t1 = t0 + 3_100 * MS;
        let mut slow = 0;
        for i in 0..800u64 {
            let id = task(t1 + i * MS / 10, if i == 100 { 60 * MS } else { 20 * MS });
            if i == 100 {
                slow = id;
            }
        }
        tasks.messages.sort_by_key(|m| m.send_ns);
        let linked = run(tasks.messages);
        let slow = linked.iter().find(|l| l.id == slow).expect("linked");
        assert_eq!(slow.typical, ONE, "{slow:?}");
    }

    #[test]
    fn a_call_belongs_to_the_request_it_is_nested_in_and_the_reply_ends_the_task() {
        const MS: Time = 1_000_000;
        let t0 = 1_000 * MS;
        let us = |n: u64| t0 + n * 1_000;
        // R1 and R2 come to B (10.0.0.2:80) from two clients. B calls C for R1 at 1.5 ms; C
        // answers at 3 ms; B answers R1 at 3.5 ms. R2 is answered at 2 ms, before the call's
        // answer: the call is not nested in R2, although R2 is its most recent candidate.
        // Earlier requests from other clients make port 80 fixed.
        let mut messages = Vec::new();
        for i in 0..4u64 {
            let t = t0 - 500 * MS + i * 10 * MS;
            let client = format!("10.1.0.{}:{}", 10 + i, 40000 + i);
            messages.push(msg(&client, "10.0.0.2:80", t, t + 100));
            messages.push(msg("10.0.0.2:80", &client, t + MS, t + MS + 100));
        }
        let r1 = msg("10.1.0.1:40001", "10.0.0.2:80", us(0) - 100, us(0));
        let r2 = msg("10.1.0.2:40002", "10.0.0.2:80", us(1_000) - 100, us(1_000));
        let call = msg("10.0.0.2:50000", "10.0.0.3:5432", us(1_500), us(1_600));
        let ret = msg("10.0.0.3:5432", "10.0.0.2:50000", us(2_900), us(3_000));
        let reply1 = msg("10.0.0.2:80", "10.1.0.1:40001", us(3_500), us(3_600));
        let reply2 = msg("10.0.0.2:80", "10.1.0.2:40002", us(2_000), us(2_100));
        messages.extend([
            r1.clone(),
            r2.clone(),
            call.clone(),
            ret.clone(),
            reply1.clone(),
            reply2.clone(),
        ]);
        let linked = run(messages);
        let of = |m: &Message| {
            let id = message_id(m);
            linked.iter().find(|l| l.id == id).cloned().expect("linked")
        };
        assert_eq!(of(&call).best, Some(message_id(&r1)), "{:?}", of(&call));
        let l1 = of(&reply1);
        assert_eq!(l1.best, Some(message_id(&ret)), "{l1:?}");
        assert_eq!((l1.spontaneous, l1.parents.len()), (0, 1));
        assert_eq!(of(&reply2).best, Some(message_id(&r2)));
    }

    #[test]
    fn a_client_on_the_servers_host_starts_a_path_with_each_request() {
        const MS: Time = 1_000_000;
        let t0 = 1_000 * MS;
        // On loopback, clients and the server they call are one node (the host). Four
        // clients each send a request every 2 ms on their own connection to port 7411, and
        // the server answers each 300 µs later; the requests of the clients overlap. Each
        // request is a root: neither the client's previous answer (a call that started a
        // path itself) nor a request the server is still serving caused it.
        let mut messages = Vec::new();
        let mut requests = Vec::new();
        for i in 0..20u64 {
            for c in 0..4u64 {
                let client = format!("127.0.0.1:{}", 40000 + c);
                let t = t0 + i * 2 * MS + c * 100_000;
                let request = msg(&client, "127.0.0.1:7411", t, t + 10_000);
                requests.push(request.clone());
                messages.push(request);
                messages.push(msg("127.0.0.1:7411", &client, t + 300_000, t + 310_000));
            }
        }
        let linked = run(messages);
        assert_eq!(linked.len(), 160);
        // Once port 7411 is known to be fixed (three peers), every request is a root.
        for r in &requests[4..] {
            let id = message_id(r);
            let l = linked.iter().find(|l| l.id == id).expect("linked");
            assert_eq!(l.best, None, "{l:?}");
        }
    }
}
