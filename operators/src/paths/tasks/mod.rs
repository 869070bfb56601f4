//! `link` by tasks (WAP5 §5.1's causality, Project 5 §5.1's nesting): for every message a
//! node sends, the message it received that caused it, found by following the requests each
//! node serves.
//!
//! - **Input**: reconciled [`Message`]s, clock-corrected where the `clock` operator could.
//! - **Output**: one [`Linked`] per message, in event-time order: the options weighed for its
//!   cause with their probabilities (a softmax of their log scores), the one taken, and
//!   whether it starts a path.
//! - **Exchange**: everything to the worker before the last (`paths` takes the last): a
//!   node's decisions pair its replies with its callers' calls, so every node's decisions
//!   feed its callers'.
//! - **The model** ([`model`]): every node serves requests as tasks; a request opens one at
//!   its receiver, a reply closes one of the same caller's (on the same connection or call
//!   id where the input names one), a call joins one of its node's open tasks, and an
//!   answer joins its call's task once the callee has paired it. A departure's parent is
//!   the latest arrival of its task. The evidence ([`evidence`]): learned delays per
//!   arrival type and departure class (read as a hazard: density over survival), Project
//!   5's same-child penalty, whether a replying task's calls are all answered, how typical
//!   its calls are for its type, where a nesting ends (a reply that follows the answer of a
//!   call held in another task better than its own latest arrival takes the call over),
//!   the order in which the system takes up waiting tasks,
//!   sizes, how many calls of a class tasks make and how long they last (a task that lost
//!   its reply to another stops taking calls), how far a call's option's latest arrival, at
//!   its delay, explains such calls beyond chance (counted at every call against its time
//!   shifted into the past, whatever was decided: the learned delays follow the decisions
//!   they helped make, this does not), and coincidences against a time-shifted null
//!   (a reply caused by another caller's request that came while its task waited: a
//!   queue's pop answered when a push comes in; at such a queue, a pop answered at once from
//!   a backlog carries the oldest job not handed out, in the order the pops came, where its
//!   connection's replies carry jobs when none waits; and a client's call caused by such a
//!   reply, a worker's call for the job its pop brought, but not by an answer to the client's own
//!   requests, which a closed-loop client's next request also follows beyond chance).
//!   Where each message's role comes from: the input's `kind` (`call`/`request` asks,
//!   `return`/`response` answers, `message` is one-way); else the ports (a message to a
//!   fixed port asks, [`Ports`]); else, for names, which of two nodes spoke to the other
//!   first. Roles are told in event-time order as departures are taken in, so they do not
//!   depend on how the workers' batches interleave. Nothing is keyed to a generator's
//!   preset.
//! - **Warm start**: the input is held until the first `warmup_max` messages by event time
//!   are in (the frontier, less the lateness, is past them), or the frontier has passed the
//!   first `warmup_ns` of event time; which messages it learns from depends on event time
//!   alone, not on how the input was batched. The warm-up is then linked three
//!   times for each order prior in [`TasksConfig::rhos`] (expectation-maximisation: each pass
//!   decides by what the one before learned), the prior under which the warm-up is likeliest
//!   is kept, and everything held is linked with what it learned, which then goes on
//!   learning from every decision. A system that serves its tasks first come, first served
//!   (a single event loop) is told from one that does not by the likelihood, not by a rule.
//! - **Order**: each message is taken in twice, as a departure at its corrected send time and
//!   as an arrival at its corrected receive time (never before its departure); a message's
//!   cause is decided when its departure is taken in, in event-time order, once the frontier
//!   is `lateness_ns` past it. Ties go by the input's order (the data row).
//! - **State**: the messages not yet taken in (a reorder buffer, up to the lateness); the
//!   model's open tasks ([`model`]: freed when they reply or time out), each node's 64
//!   most recent arrivals (for cross-task causes, at most 80 ms back), at most 16
//!   provisional calls per class and the answered calls of the last `revise_ns` held until
//!   their task goes on; the learned evidence, bounded by the number of types and
//!   halved past its memory; the roles of node pairs without a kind.
//!   During the warm-up, the held messages: what the source reads ahead of the frontier
//!   (its read-ahead bounds them; a cut at a count held would make what is learned depend
//!   on timing). Memory follows the message rate times the
//!   lateness, and the requests in flight. Under memory pressure
//!   ([`causeway_sources::shed`]) the lateness, and the idle time after which an open task
//!   expires, are at most the governor's cap, and the warm-up ends at once.
//! - **Cost**: per message, a hash of its endpoints and two reorder-buffer moves; per
//!   departure, one pass over its node's open tasks (a histogram lookup each), and for a
//!   call the joint decision of its class's provisional calls over their 16 likeliest
//!   tasks each, and two scans of its node's 32 latest arrivals (its coincidences). The warm-up
//!   is linked `3 · rhos` times more.

pub mod evidence;
pub mod model;

use causeway_sources::{Address, MessageKind, Time, shed};
use foldhash::fast::FixedState;
use smallvec::SmallVec;
use std::collections::BTreeSet;
use std::hash::BuildHasher;
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use crate::FastMap;
use crate::message::{Message, MessageStream};
use crate::paths::link::{Linked, ONE, Prob, message_id, node_key};
use crate::ports::Ports;
use crate::reorder::Reorder;
use model::{Decision, Model, ModelConfig, Role, Seen};

/// Parameters of the task linker.
#[derive(Clone, Debug)]
pub struct TasksConfig {
    /// The model's parameters (its `rho` is replaced by the one the warm-up picks).
    pub model: ModelConfig,
    /// The order priors tried on the warm-up.
    pub rhos: Vec<f64>,
    /// How late a message may come after the frontier passed its event time.
    pub lateness_ns: Time,
    /// The longest stretch of event time the warm-up may wait for its messages (0: no
    /// warm-up; the order prior is then `rhos[0]`).
    pub warmup_ns: Time,
    /// Messages the warm-up learns from: the first this many by event time.
    pub warmup_max: usize,
}

impl Default for TasksConfig {
    fn default() -> Self {
        TasksConfig {
            model: ModelConfig::default(),
            rhos: vec![1.0, 0.5, 0.2],
            lateness_ns: 1_000_000_000,
            warmup_ns: 0,
            warmup_max: 20_000,
        }
    }
}

/// Extension trait: the task linker.
pub trait TaskLink<'scope> {
    /// The cause of every message; see the module documentation.
    fn link_tasks(self, config: TasksConfig) -> Stream<'scope, Time, Vec<Linked>>;
}

/// Where each message's role comes from when the input has no `kind`.
#[derive(Debug)]
struct Roles {
    ports: Ports,
    /// Unordered pair of node keys -> the one that spoke first (names only).
    first: FastMap<(u64, u64), (u64, Time)>,
    idle_ns: Time,
}

impl Roles {
    fn new(idle_ns: Time) -> Self {
        Roles {
            ports: Ports::default(),
            first: FastMap::default(),
            idle_ns,
        }
    }

    fn role(&mut self, m: &Message, src: u64, dst: u64) -> Role {
        match m.kind {
            Some(MessageKind::Call | MessageKind::Request | MessageKind::Message) => {
                return Role::Request;
            }
            Some(MessageKind::Return | MessageKind::Response) => return Role::Response,
            None => {}
        }
        let t = m.event_ns;
        if let (Address::Endpoint(_), Address::Endpoint(_)) = (&m.src_endpoint, &m.dst_endpoint) {
            let ends = self
                .ports
                .observe_message(&m.src_endpoint, &m.dst_endpoint, src, dst, t);
            if ends.dst_fixed && !ends.src_fixed {
                return Role::Request;
            }
            if ends.src_fixed && !ends.dst_fixed {
                return Role::Response;
            }
        }
        let pair = (src.min(dst), src.max(dst));
        let idle = self.idle_ns;
        let first = self.first.entry(pair).or_insert((src, t));
        if first.1.saturating_add(idle) < t {
            *first = (src, t);
        } else {
            first.1 = t;
        }
        if first.0 == src {
            Role::Request
        } else {
            Role::Response
        }
    }

    fn expire(&mut self, now: Time) {
        let idle = self.idle_ns;
        self.first.retain(|_, (_, t)| t.saturating_add(idle) >= now);
        self.ports.expire(now.saturating_sub(idle));
    }
}

/// The connection a message travelled on: its two endpoints (where both are `ip:port`), or
/// its call id with its two nodes.
fn connection(m: &Message, src: u64, dst: u64) -> Option<u64> {
    let pair = (src.min(dst), src.max(dst));
    if let Some(id) = &m.call_id {
        return Some(FixedState::with_seed(0x6361_6c6c).hash_one((id, pair)));
    }
    match (&m.src_endpoint, &m.dst_endpoint) {
        (Address::Endpoint(a), Address::Endpoint(b)) => {
            let (x, y) = if (a.ip, a.port) <= (b.ip, b.port) {
                (a, b)
            } else {
                (b, a)
            };
            Some(FixedState::with_seed(0x636f_6e6e).hash_one((x, y)))
        }
        _ => None,
    }
}

/// Where a message goes among those of the same event time: its data row (a message
/// trace's order), else its id; doubled, so that its two events fit side by side.
fn order_key(m: &Message, id: u64) -> u64 {
    m.row.unwrap_or(id >> 2) << 1
}

/// A message as the linker holds it until its departure is taken in.
struct Held {
    message: Box<Message>,
    seen: Seen,
}

/// One event: a message leaving its sender or reaching its receiver.
enum Event {
    Depart(Box<Held>),
    Arrive(Seen),
}

/// The events waiting for the frontier, in (time, input order) order.
#[derive(Default)]
struct Events {
    queue: Reorder<Event>,
}

impl Events {
    /// Queues both events of a message: at equal times, by the input's order (the data row),
    /// a message's departure before its arrival.
    fn push(&mut self, held: Box<Held>) {
        let seq = order_key(&held.message, held.seen.id);
        let m = &held.message;
        let depart = m
            .send_corrected_ns
            .or(m.recv_corrected_ns)
            .unwrap_or(m.event_ns);
        let arrive = m.recv_corrected_ns.unwrap_or(depart).max(depart);
        let seen = held.seen;
        self.queue.push(arrive, seq | 1, Event::Arrive(seen));
        self.queue.push(depart, seq, Event::Depart(held));
    }
}

/// The linker: its events, model and roles.
struct Linker {
    config: TasksConfig,
    model: Model,
    events: Events,
    roles: Roles,
    /// Roles told at departures whose arrivals are still queued, by id.
    roles_told: FastMap<u64, Role>,
    /// Departures taken in whose decision is not final yet, by id: (time, message).
    pending: FastMap<u64, (Time, Box<Held>)>,
    /// The times of `pending`, for the output's capability.
    pending_times: BTreeSet<(Time, u64)>,
    finals: Vec<(u64, Decision)>,
    /// During the warm-up: every message taken in, by input order.
    warm: Option<Vec<Box<Held>>>,
    warm_start: Option<Time>,
}

impl Linker {
    fn new(config: TasksConfig) -> Self {
        let mut model_config = config.model;
        model_config.rho = config.rhos.first().copied().unwrap_or(1.0);
        Linker {
            model: Model::new(model_config),
            roles: Roles::new(config.model.task_timeout_ns),
            roles_told: FastMap::default(),
            events: Events::default(),
            pending: FastMap::default(),
            pending_times: BTreeSet::new(),
            finals: Vec::new(),
            warm: (config.warmup_ns > 0).then(Vec::new),
            warm_start: None,
            config,
        }
    }

    fn take(&mut self, m: Box<Message>) {
        let src = node_key(&m.src);
        let dst = node_key(&m.dst);
        let seen = Seen {
            id: message_id(&m),
            src,
            dst,
            // Told once the message is taken in event-time order (`Roles`).
            role: Role::Request,
            send_local: m.send_ns,
            recv_local: m.recv_ns,
            conn: connection(&m, src, dst),
            bytes: m.bytes,
        };
        let held = Box::new(Held { message: m, seen });
        match self.warm.as_mut() {
            Some(w) => {
                let t = held.message.event_ns;
                self.warm_start = Some(self.warm_start.map_or(t, |s| s.min(t)));
                w.push(held);
            }
            None => self.events.push(held),
        }
    }

    /// Ends the warm-up if the frontier `now` has passed it: picks the order prior and the
    /// learned evidence, and queues everything held.
    fn end_warmup(&mut self, now: Option<Time>) {
        let Some(w) = self.warm.as_ref() else { return };
        // Which messages the warm-up learns from depends on event time only: the first
        // `warmup_max` by event time, once every message before them is in (the frontier,
        // less the lateness, is past them), or those of its first `warmup_ns`.
        let complete = now.map(|n| n.saturating_sub(self.config.lateness_ns));
        let start = self.warm_start;
        let max = self.config.warmup_max;
        let in_before = |t: Time| w.iter().filter(|h| h.message.event_ns < t).count();
        // The messages learned from are those before `cut` (all of them once the input
        // has ended), at most `max`.
        let cut = match (complete, start) {
            (None, _) => None,
            (Some(c), Some(_)) if in_before(c) >= max => Some(c),
            (Some(c), Some(s)) if c >= s.saturating_add(self.config.warmup_ns) => {
                Some(s.saturating_add(self.config.warmup_ns))
            }
            // Under memory pressure the messages held are the first to go (`shed`).
            (Some(c), Some(_)) if shed::active() => {
                shed::note(shed::Stage::Warmup, w.len() as u64);
                Some(c)
            }
            _ => return,
        };
        let Some(mut held) = self.warm.take() else {
            return;
        };
        held.sort_by_key(|h| (h.message.event_ns, order_key(&h.message, h.seen.id)));
        let n = held
            .iter()
            .take(max)
            .take_while(|h| cut.is_none_or(|t| h.message.event_ns < t))
            .count();
        // The roles as the linker will tell them, in the same order: the warm-up's alone.
        let mut roles = Roles::new(self.config.model.task_timeout_ns);
        for h in &mut held[..n] {
            h.seen.role = roles.role(&h.message, h.seen.src, h.seen.dst);
        }
        self.model = warm_up(&self.config, &held[..n]);
        for h in held {
            self.events.push(h);
        }
    }

    /// Takes in every event the frontier at `now` has passed; returns the time below which
    /// everything is linked.
    fn run(&mut self, now: Option<Time>, out: &mut Vec<Linked>) -> Option<Time> {
        // Under memory pressure the wait is at most the cap (`shed`).
        let bound = now.map(|n| n.saturating_sub(shed::capped(self.config.lateness_ns)));
        let unshed = now.map(|n| n.saturating_sub(self.config.lateness_ns));
        while let Some((t, _, e)) = self.events.queue.pop_before(bound) {
            match e {
                Event::Arrive(mut s) => {
                    // Its departure, at or before it, told its role.
                    if let Some(role) = self.roles_told.remove(&s.id) {
                        s.role = role;
                    }
                    self.model.arrive(&s);
                }
                Event::Depart(mut h) => {
                    if unshed.is_some_and(|u| t >= u) {
                        shed::note(shed::Stage::Tasks, 1);
                    }
                    let id = h.seen.id;
                    // Roles are told in event-time order, so that they do not depend on
                    // the order the workers' batches came in.
                    h.seen.role = self.roles.role(&h.message, h.seen.src, h.seen.dst);
                    self.roles_told.insert(id, h.seen.role);
                    self.model.depart(&h.seen);
                    self.pending_times.insert((t, id));
                    self.pending.insert(id, (t, h));
                    if self.model.decided() % 4096 == 0 {
                        self.model.expire();
                        self.roles.expire(t);
                    }
                }
            }
            self.emit(out);
        }
        if now.is_none() {
            self.model.finalize_all();
            self.emit(out);
            tracing::debug!(tally = ?self.model.tally, decided = self.model.decided(), "link.tasks: end");
        }
        let queued = self.events.queue.first().map(|(t, _)| t);
        let pending = self.pending_times.first().map(|(t, _)| *t);
        [bound, queued, pending]
            .into_iter()
            .flatten()
            .min()
            .or(bound)
    }

    /// Hands out the decisions made final.
    fn emit(&mut self, out: &mut Vec<Linked>) {
        self.model.take_final(&mut self.finals);
        for (id, d) in self.finals.drain(..) {
            if let Some((t, h)) = self.pending.remove(&id) {
                self.pending_times.remove(&(t, id));
                out.push(linked(*h, &d));
            }
        }
    }
}

/// Links the warm-up `held` three times for each order prior, and returns a model with the
/// evidence learned under the likeliest prior, for the real run.
fn warm_up(config: &TasksConfig, held: &[Box<Held>]) -> Model {
    let order = taken_in(held);
    let mut best: Option<(f64, Model)> = None;
    for &rho in &config.rhos {
        let model_config = ModelConfig {
            rho,
            ..config.model
        };
        let mut model = Model::batch(model_config);
        for _ in 0..3 {
            model = model.relearned(model_config, true);
            replay(&mut model, &order);
        }
        let score = model.score();
        tracing::debug!(rho, score, "link.tasks: warm-up");
        if best.as_ref().is_none_or(|(s, _)| score > *s) {
            best = Some((score, model));
        }
    }
    let Some((_, model)) = best else {
        return Model::new(config.model);
    };
    // One pass more, learning from the decisions of the one before.
    let c = model.config();
    let mut model = model.relearned(c, true);
    replay(&mut model, &order);
    let m = model.relearned(c, false);
    if tracing::enabled!(tracing::Level::TRACE) {
        for (t, c, n, mode, total) in m.delays().summary() {
            tracing::trace!("class {c:x} type {t:x}: {n:.1} of {total:.1}, mode {mode:.0} us");
        }
    }
    m
}

/// The events of `held` in the order they are taken in (whether a departure, what is seen):
/// the same in every pass of the warm-up, so worked out once.
fn taken_in(held: &[Box<Held>]) -> Vec<(bool, Seen)> {
    let mut events = Events::default();
    for h in held {
        events.push(Box::new(Held {
            message: h.message.clone(),
            seen: h.seen,
        }));
    }
    let mut order = Vec::with_capacity(2 * held.len());
    while let Some((_, _, e)) = events.queue.pop_before(None) {
        order.push(match e {
            Event::Arrive(s) => (false, s),
            Event::Depart(h) => (true, h.seen),
        });
    }
    order
}

/// Links the events `order` ([`taken_in`]) once with `model`, dropping the output.
fn replay(model: &mut Model, order: &[(bool, Seen)]) {
    let mut finals = Vec::new();
    for (depart, s) in order {
        if *depart {
            model.depart(s);
        } else {
            model.arrive(s);
        }
        model.take_final(&mut finals);
        finals.clear();
    }
    model.finalize_all();
}

fn to_prob(p: f64) -> Prob {
    (p.clamp(0.0, 1.0) * f64::from(ONE)).round() as Prob
}

/// The [`Linked`] of a decided departure.
fn linked(h: Held, d: &Decision) -> Linked {
    let id = h.seen.id;
    let keys = (h.seen.src, h.seen.dst);
    // Probabilities: a softmax of the options' log scores.
    let max = d
        .options
        .iter()
        .map(|o| o.1)
        .fold(f64::NEG_INFINITY, f64::max);
    let total: f64 = d.options.iter().map(|o| (o.1 - max).exp()).sum();
    let mut parents: SmallVec<[(u64, Prob); 2]> = SmallVec::new();
    let mut spontaneous = if d.options.is_empty() { ONE } else { 0 };
    for (i, (p, s)) in d.options.iter().enumerate() {
        let q = (s - max).exp() / total;
        match p {
            Some(p) if q >= 0.01 || Some(i) == d.chosen => parents.push((*p, to_prob(q))),
            Some(_) => {}
            None => spontaneous = to_prob(q),
        }
    }
    Linked {
        id,
        message: h.message,
        parents,
        spontaneous,
        best: d.parent(),
        from_client: d.from_client,
        keys,
        typical: ONE,
    }
}

impl<'scope> TaskLink<'scope> for MessageStream<'scope> {
    fn link_tasks(self, config: TasksConfig) -> Stream<'scope, Time, Vec<Linked>> {
        // The worker before the last, which `paths` takes: linking and paths, the two
        // single-threaded stages, run side by side (on one worker, one after the other).
        let peers = self.scope().peers() as u64;
        let here = peers.saturating_sub(2);
        self.unary_frontier(
            #[allow(clippy::borrowed_box)]
            Exchange::new(move |_m: &Box<Message>| here),
            "link.tasks",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut linker = Linker::new(config);
                let mut out = Vec::new();
                move |(input, frontier), output| {
                    input.for_each(|_cap, batch| {
                        for m in batch.drain(..) {
                            linker.take(m);
                        }
                    });
                    let Some(cap) = held.as_mut() else { return };
                    let now = frontier.frontier().iter().next().copied();
                    linker.end_warmup(now);
                    if linker.warm.is_some() {
                        // Nothing is linked during the warm-up: hold the capability at the
                        // earliest time anything still to come may have.
                        let lag = linker.config.lateness_ns;
                        let floor = match (linker.warm_start, now) {
                            (Some(s), Some(n)) => Some(s.min(n.saturating_sub(lag))),
                            (None, Some(n)) => Some(n.saturating_sub(lag)),
                            (s, None) => s,
                        };
                        if let Some(t) = floor.filter(|t| t > cap.time()) {
                            cap.downgrade(&t);
                        }
                        return;
                    }
                    let bound = linker.run(now, &mut out);
                    if !out.is_empty() {
                        output.session(&*cap).give_iterator(out.drain(..));
                    }
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

/// Tests of the operator on timely.
#[cfg(test)]
mod tests {
    use super::*;
    use timely::dataflow::operators::capture::Extract;
    use timely::dataflow::operators::{Capture, ToStream};

    fn named(src: &str, dst: &str, send: Time, recv: Time, kind: MessageKind, row: u64) -> Message {
        Message {
            send_ns: Some(send),
            recv_ns: Some(recv),
            src: src.into(),
            dst: dst.into(),
            src_endpoint: Address::Name(src.into()),
            dst_endpoint: Address::Name(dst.into()),
            kind: Some(kind),
            row: Some(row),
            event_ns: send,
            ..Message::default()
        }
    }

    fn run(messages: Vec<Message>, config: TasksConfig) -> Vec<Linked> {
        let captured = timely::example(move |scope| {
            messages
                .into_iter()
                .map(Box::new)
                .to_stream(scope)
                .container::<Vec<_>>()
                .link_tasks(config)
                .capture()
        });
        let mut out: Vec<Linked> = captured
            .extract()
            .into_iter()
            .flat_map(|(_, v)| v)
            .collect();
        out.sort_by_key(|l| l.message.row);
        out
    }

    /// Two requests of a client interleave at a web server that calls a database for each
    /// (3 ms after each request, each answered 3 ms after it arrives, replied to 2 ms after
    /// that), at irregular times; names only, with kinds: every message gets the parent its
    /// task gives it.
    #[test]
    fn interleaved_requests_link_by_their_tasks() {
        use MessageKind::{Request as Q, Response as R};
        let ms = 1_000_000;
        let mut messages = Vec::new();
        let mut row = 0;
        let mut push = |s: &str, d: &str, send: Time, recv: Time, k: MessageKind| {
            messages.push(named(s, d, send, recv, k, row));
            row += 1;
        };
        // Pairs of requests at irregular times (a fixed pseudo-random sequence).
        let mut t = 0;
        let mut x: u64 = 99;
        for _ in 0..50u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            t += (40 + (x >> 33) % 120) * ms;
            push("client", "web", t, t + ms, Q); // 0
            push("client", "web", t + 4 * ms, t + 5 * ms, Q); // 1
            push("web", "db", t + 4 * ms, t + 5 * ms, Q); // 2: for request 0
            push("web", "db", t + 8 * ms, t + 9 * ms, Q); // 3: for request 1
            push("db", "web", t + 8 * ms, t + 9 * ms, R); // 4: answers 2
            push("web", "client", t + 11 * ms, t + 12 * ms, R); // 5: replies to 0
            push("db", "web", t + 12 * ms, t + 13 * ms, R); // 6: answers 3
            push("web", "client", t + 15 * ms, t + 16 * ms, R); // 7: replies to 1
        }
        let config = TasksConfig {
            warmup_ns: 10_000_000_000,
            ..TasksConfig::default()
        };
        let out = run(messages.clone(), config);
        assert_eq!(out.len(), messages.len());
        let id = |row: usize| message_id(&messages[row]);
        let mut right = 0;
        for i in 0..50 {
            let b = i * 8;
            let expect = [
                (b, None),
                (b + 1, None),
                (b + 2, Some(id(b))),
                (b + 3, Some(id(b + 1))),
                (b + 4, Some(id(b + 2))),
                (b + 5, Some(id(b + 4))),
                (b + 6, Some(id(b + 3))),
                (b + 7, Some(id(b + 6))),
            ];
            right += expect.iter().filter(|(r, p)| out[*r].best == *p).count();
        }
        assert!(right >= 8 * 50 * 95 / 100, "{right} of 400 right");
        assert!(out[0].from_client);
    }

    /// Without `kind`, roles come from who speaks first to whom: told in event-time order,
    /// they do not depend on the order the messages reach the operator (with several workers,
    /// the order their batches interleave). The same trace given in time order and backwards
    /// is linked the same.
    #[test]
    fn roles_do_not_depend_on_the_order_messages_come_in() {
        let ms = 1_000_000;
        let mut messages = Vec::new();
        let mut t = 0;
        for i in 0..40u64 {
            t += (30 + (i * 7919) % 50) * ms;
            let rows = [
                ("client", "web", t, t + ms),
                ("web", "db", t + 2 * ms, t + 3 * ms),
                ("db", "web", t + 5 * ms, t + 6 * ms),
                ("web", "client", t + 7 * ms, t + 8 * ms),
            ];
            for (s, d, send, recv) in rows {
                let mut m = named(
                    s,
                    d,
                    send,
                    recv,
                    MessageKind::Request,
                    messages.len() as u64,
                );
                m.kind = None;
                messages.push(m);
            }
        }
        let config = TasksConfig {
            warmup_ns: 10_000_000_000,
            ..TasksConfig::default()
        };
        let forwards = run(messages.clone(), config.clone());
        let backwards = run(messages.iter().rev().cloned().collect(), config);
        let parents = |v: &[Linked]| v.iter().map(|l| l.best).collect::<Vec<_>>();
        assert_eq!(forwards.len(), messages.len());
        assert_eq!(parents(&forwards), parents(&backwards));
        // And right: the web server's call is caused by the request, its reply by the answer.
        assert_eq!(forwards[1].best, Some(message_id(&messages[0])));
        assert_eq!(forwards[3].best, Some(message_id(&messages[2])));
    }

    /// A job queue: a producer pushes jobs to a queue server, whose reply to a worker's
    /// long-waiting pop follows the push by 50 µs; the worker then calls a service. The
    /// pop's reply is caused by the push, another connection's message, and the worker's call
    /// by that reply.
    #[test]
    fn a_queue_reply_is_caused_by_the_push_that_fed_it() {
        use MessageKind::{Request as Q, Response as R};
        let us = 1_000;
        let mut messages = Vec::new();
        let mut row = 0;
        let mut push = |s: &str, d: &str, send: Time, recv: Time, k: MessageKind| {
            messages.push(named(s, d, send, recv, k, row));
            row += 1;
            (row - 1) as usize
        };
        let mut truth = Vec::new();
        let workers = ["w1", "w2"];
        // Each worker's first pop, long before any job.
        let mut pop: Vec<usize> = workers
            .iter()
            .map(|w| push(w, "queue", 0, 10 * us, Q))
            .collect();
        // Jobs come at irregular times (a fixed pseudo-random sequence): a pop waits as
        // long as the next job takes to come.
        let mut t = 1_000_000;
        let mut x: u64 = 12345;
        for j in 0..300u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            t += (3_000 + (x >> 33) % 20_000) * us;
            let w = (j % 2) as usize;
            let lpush = push("producer", "queue", t, t + 20 * us, Q);
            push("queue", "producer", t + 60 * us, t + 80 * us, R);
            let popped = push("queue", workers[w], t + 70 * us, t + 90 * us, R);
            let call = push(workers[w], "svc", t + 290 * us, t + 310 * us, Q);
            let answer = push("svc", workers[w], t + 2_310 * us, t + 2_330 * us, R);
            let next = push(workers[w], "queue", t + 2_530 * us, t + 2_550 * us, Q);
            truth.push((popped, lpush, pop[w]));
            truth.push((call, popped, 0));
            truth.push((next, answer, 0));
            pop[w] = next;
        }
        let config = TasksConfig {
            warmup_ns: 10_000_000_000,
            ..TasksConfig::default()
        };
        let out = run(messages.clone(), config);
        let id = |r: usize| message_id(&messages[r]);
        let right = truth
            .iter()
            .filter(|(m, p, _)| out[*m].best == Some(id(*p)))
            .count();

        assert!(
            right >= truth.len() * 9 / 10,
            "{right} of {} right",
            truth.len()
        );
    }
}
