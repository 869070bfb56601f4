//! `link` (WAP5 §5.1, steps 1 and 2): for every message a node sends, the messages it received
//! shortly before that may have caused it, each with a probability.
//!
//! - **Input**: reconciled [`Message`]s (clock-corrected where possible).
//! - **Output**: one [`Linked`] per message: its candidate parents with their probabilities,
//!   the probability that it was spontaneous, and the most likely option.
//! - **Exchange**: every message goes twice, by node: as an arrival (a possible parent) to the
//!   worker of its receiver, and as a child to the worker of its sender. A node's arrivals and
//!   departures thus meet on one worker.
//! - **Rules**: a message B→C sent at `s` (B's clock) has as candidate parents the messages
//!   into B received at `r` in `[s − x, s]` (B's clock; `x` is `max_delay_ns`), each weighted
//!   `e^(−(s − r)/d)` where `d` is the mean causal delay of B→C; being spontaneous weighs
//!   `e^(−y)` (a delay of `y·d`). Weights are normalised to probabilities. `d` is WAP5's
//!   estimate, the mean over a sliding window (`delay_window_ns`) of the smallest delay
//!   preceding each B→C message, or (`DelayEstimate::Weighted`, the refinement §5.1 suggests
//!   but WAP5 did not do) the mean of the candidate delays weighted by their probabilities. A
//!   message whose sender side was not observed (B untraced) may only have been caused by a
//!   message from its own receiver: B→A's candidates are the A→B messages A sent within `x`
//!   before A received B→A, in A's clock (A→B→A). Messages a client sends are spontaneous
//!   (clients start paths; see [`crate::ports`]). Beyond WAP5, for request/response
//!   connections: a message the server side of a connection sends while the last message in
//!   on it is unanswered is that message's reply, so its cause is that request or a reply to
//!   a call B made after it, and it is never spontaneous; and a request B has already answered
//!   is no candidate for what B sends after its answer. A message is linked once the frontier
//!   is `lateness_ns` (how late upstream windows may emit it) plus `order_slack_ns` past it,
//!   so that parents whose event times carry their senders' residual clock error are in;
//!   arrivals are taken `order_slack_ns` earlier, in one order with the children, so that
//!   what a message is linked against does not depend on how the frontier moved (the output
//!   is the same on any number of workers). Candidates below `min_probability` are dropped unless they
//!   are the most likely option; at most `max_candidates` (the most recent) are kept.
//! - **State**: per node, the arrivals of the last `x` plus the allowed lateness, freed as the
//!   frontier passes; per node pair, the delay estimate's buckets over `delay_window_ns`; the
//!   endpoints' port evidence ([`Ports`]), forgotten after `idle_ns`. Memory follows the
//!   message rate times `x`, never the length of the input.
//! - **Cost**: per message, a hash and a scan over the arrivals of its sender within
//!   `min(x, d·(y + 7))` (bounded by `max_candidates`), one `exp` per candidate.

use std::collections::VecDeque;

use causeway_sources::{Address, Time};
use std::hash::BuildHasher;

use foldhash::fast::FixedState;
use serde::{Deserialize, Serialize};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::vec::Map;

use crate::FastMap;
use crate::message::Message;
use crate::ports::Ports;
use crate::reorder::Reorder;

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
    /// Most candidate parents kept per message.
    pub max_candidates: usize,
    /// Candidates less likely than this are dropped (unless most likely).
    pub min_probability: f64,
    /// How late a message may arrive behind its sender's newest (the sources' lateness).
    pub lateness_ns: Time,
    /// Endpoints not seen for this long are forgotten by the port classifier.
    pub idle_ns: Time,
    /// Link types remember about this many messages of their node pair.
    pub type_memory: f64,
    /// A message is linked once the frontier is this far past its event time, so that its
    /// causes, whose event times carry their own senders' residual clock error, are in.
    pub order_slack_ns: Time,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            max_delay_ns: 2_000_000_000,
            spontaneous_factor: 4.0,
            delay_window_ns: 60_000_000_000,
            estimate: DelayEstimate::Smallest,
            max_candidates: 32,
            min_probability: 0.01,
            lateness_ns: 1_000_000_000,
            idle_ns: 300_000_000_000,
            type_memory: 1000.0,
            order_slack_ns: 500_000_000,
        }
    }
}

/// A message with its possible causes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Linked {
    /// The message's id ([`message_id`]).
    pub id: u64,
    /// The message.
    pub message: Message,
    /// Candidate parents (ids) and the probability of each link, most recent first.
    pub parents: Vec<(u64, Prob)>,
    /// Probability that the message was spontaneous (a root).
    pub spontaneous: Prob,
    /// The most likely option: a parent's id, or `None` for spontaneous.
    pub best: Option<u64>,
    /// Whether the sender is a client (its messages start paths).
    pub from_client: bool,
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

/// A connection's key: a hash of its unordered endpoint pair.
fn conn_key(a: &Address, b: &Address) -> u64 {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    FixedState::with_seed(0x636f_6e6e).hash_one((lo, hi))
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
    /// The connection (unordered endpoint pair) it travelled on.
    conn: u64,
    /// Whether it went to the connection's fixed end (a request), as the port evidence had it
    /// when it arrived.
    request: bool,
    src_endpoint: Address,
    dst_endpoint: Address,
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

    fn mean(&self, estimate: DelayEstimate) -> Option<f64> {
        let (mut s, mut n, mut ws, mut w) = (0.0, 0.0, 0.0, 0.0);
        for b in &self.buckets {
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
    inbound: FastMap<u64, VecDeque<Arrival>>,
    one_sided: FastMap<u64, VecDeque<Arrival>>,
    estimates: FastMap<(u64, u64), Estimate>,
    /// Per node pair (B, C): per sender X of B's arrivals (and [`SPONTANEOUS`]), the faded
    /// sum of link probabilities and of probability-weighted delays.
    types: FastMap<(u64, u64), FastMap<u64, (f64, f64)>>,
    /// Per (node, connection): the node's recent send times on it, in its clock.
    sends: FastMap<(u64, u64), VecDeque<Time>>,
    ports: Ports,
    last_expiry: Time,
}

impl Linker {
    fn insert(&mut self, mut a: Arrival) {
        self.ports
            .observe(&a.src_endpoint, &a.dst_endpoint, a.from, a.to, a.event_ns);
        a.request = self.ports.fixed(&a.dst_endpoint, &a.src_endpoint);
        let list = if a.one_sided {
            self.one_sided.entry(a.to).or_default()
        } else {
            self.inbound.entry(a.to).or_default()
        };
        // Mostly in order: insert from the back.
        let mut i = list.len();
        while i > 0 && list[i - 1].local_ns > a.local_ns {
            i -= 1;
        }
        list.insert(i, a);
    }

    fn expire(&mut self, now: Time) {
        let keep = self
            .config
            .max_delay_ns
            .saturating_add(self.config.lateness_ns)
            .saturating_mul(2);
        let before = now.saturating_sub(keep);
        for map in [&mut self.inbound, &mut self.one_sided] {
            map.retain(|_, list| {
                while list.front().is_some_and(|a| a.event_ns < before) {
                    list.pop_front();
                }
                !list.is_empty()
            });
        }
        self.sends.retain(|_, times| {
            while times.len() > 1 && times.front().is_some_and(|t| *t < before) {
                times.pop_front();
            }
            times.back().is_some_and(|t| *t >= before)
        });
        let window = self.config.delay_window_ns;
        self.estimates.retain(|_, e| {
            e.buckets
                .back()
                .is_some_and(|b| b.0.saturating_add(window) > now)
        });
        if now.saturating_sub(self.last_expiry) >= 10_000_000_000 {
            self.ports.expire(now.saturating_sub(self.config.idle_ns));
            self.last_expiry = now;
        }
    }

    fn link(&mut self, id: u64, m: Message) -> Linked {
        let from = node_key(&m.src);
        let to = node_key(&m.dst);
        self.ports
            .observe(&m.src_endpoint, &m.dst_endpoint, from, to, m.event_ns);
        let from_client = self.ports.client(&m.src_endpoint, &m.dst_endpoint, from);
        let root = |m: Message| Linked {
            id,
            message: m,
            parents: Vec::new(),
            spontaneous: ONE,
            best: None,
            from_client,
        };
        if from_client {
            return root(m);
        }
        let x = self.config.max_delay_ns;
        let conn = conn_key(&m.src_endpoint, &m.dst_endpoint);
        // Candidates: (id, delay) from the most recent back.
        let mut candidates: Vec<(u64, Time, u64)> = Vec::new();
        let cap = self.config.max_candidates.max(1) * 8;
        // Whether this message answers a request (see below): then its cause is among the
        // candidates, never "spontaneous".
        let mut answering = false;
        let (at, list, only_from) = match (m.send_ns, m.recv_ns) {
            (Some(s), _) => (s, self.inbound.get(&from), None),
            (None, Some(r)) => (r, self.one_sided.get(&from), Some(to)),
            (None, None) => return root(m),
        };
        if let Some(list) = list {
            let sends = &self.sends;
            // The latest send by this node on `conn` before `t`.
            let call_before = |conn: u64, t: Time| {
                sends.get(&(from, conn)).and_then(|times| {
                    let i = times.partition_point(|s| *s < t);
                    i.checked_sub(1).map(|i| times[i])
                })
            };
            // Skip arrivals after the send.
            let end = list.partition_point(|a| a.local_ns <= at);
            let mut scanned: Vec<&Arrival> = Vec::new();
            for a in list.range(..end).rev() {
                if at - a.local_ns > x || scanned.len() >= cap {
                    break;
                }
                if only_from.is_some_and(|f| a.from != f) || a.id == id {
                    continue;
                }
                scanned.push(a);
            }
            // A message sent back on the connection that last brought a message in, with no
            // send on it since, answers that message (a reply): its cause arrived no earlier,
            // and is that message or a reply to a call made after it.
            let request = scanned.iter().find(|a| a.conn == conn).copied();
            let answered =
                request.is_some_and(|r| call_before(conn, at).is_some_and(|c| c > r.local_ns));
            // Only the callee side of a connection (the fixed port) answers.
            let callee = self.ports.fixed(&m.src_endpoint, &m.dst_endpoint);
            let floor = match request {
                Some(r) if callee && !answered && only_from.is_none() => Some((r.id, r.local_ns)),
                _ => None,
            };
            answering = floor.is_some();
            for a in scanned {
                if let Some((rid, low)) = floor {
                    let within = a.id == rid
                        || (a.local_ns >= low
                            && call_before(a.conn, a.local_ns).is_some_and(|c| c >= low));
                    if !within {
                        continue;
                    }
                }
                // A request this node has already answered (it sent on that connection since
                // the request came) caused nothing after its answer.
                if a.conn != conn
                    && a.request
                    && call_before(a.conn, at).is_some_and(|c| c > a.local_ns)
                {
                    continue;
                }
                candidates.push((a.id, at - a.local_ns, a.from));
            }
        }
        if let Some(s) = m.send_ns {
            let times = self.sends.entry((from, conn)).or_default();
            let i = times.partition_point(|t| *t <= s);
            times.insert(i, s);
        }
        let window = self.config.delay_window_ns;
        let width = (window / 8).max(1);
        let estimate = self.estimates.entry((from, to)).or_default();
        // What has left the window goes now, not when `expire` runs.
        estimate.trim(m.event_ns, width, window);
        if let Some(&(_, smallest, _)) = candidates.first() {
            let b = estimate.bucket(m.event_ns, width, window);
            b.1 += smallest as f64;
            b.2 += 1.0;
        }
        let Some(d) = estimate.mean(self.config.estimate) else {
            return root(m);
        };
        let d = d.max(1_000.0);
        let y = self.config.spontaneous_factor;
        let horizon = d * (y + 7.0);
        // Link types (beyond WAP5, the iteration §5.1 suggests): how often messages from X
        // into this node caused its messages to `to`, and after what mean delay, learned from
        // the link probabilities of the window so far. Unseen types start from WAP5's model.
        let learn = self.config.estimate == DelayEstimate::Weighted;
        let types = self.types.entry((from, to)).or_default();
        if !learn {
            types.clear();
        }
        let n_types = types.len() as f64 + 1.0;
        let total_weight: f64 = types.values().map(|t| t.0).sum::<f64>() + types_spont(types);
        let prior = |w: f64| (w + 1.0) / (total_weight + n_types);
        let mut weights: Vec<(u64, f64, Time, u64)> = candidates
            .iter()
            .take_while(|(_, delay, _)| answering || (*delay as f64) <= horizon)
            .take(self.config.max_candidates.max(1))
            .map(|&(pid, delay, px)| {
                let (tw, tsum) = types.get(&px).map_or((0.0, 0.0), |t| (t.0, t.1));
                let dt = if tw >= 3.0 {
                    (tsum / tw).max(1_000.0)
                } else {
                    d
                };
                let w = prior(tw) * (d / dt) * (-(delay as f64) / dt).exp();
                (pid, w, delay, px)
            })
            .collect();
        // A reply is caused by its request or by what the request led to: beyond WAP5, which
        // keeps "spontaneous" for every message, a message that answers a request has no
        // spontaneous alternative.
        let spontaneous = if answering && !weights.is_empty() {
            0.0
        } else {
            prior(types_spont(types)) * (-y).exp()
        };
        let total: f64 = spontaneous + weights.iter().map(|w| w.1).sum::<f64>();
        for w in &mut weights {
            w.1 /= total;
        }
        let p_spont = spontaneous / total;
        // Learn from this message's posterior, with a fading memory of about the window.
        let fade = 1.0 - 1.0 / self.config.type_memory.max(1.0);
        for t in types.values_mut().filter(|_| learn) {
            t.0 *= fade;
            t.1 *= fade;
        }
        if learn {
            for w in &weights {
                let t = types.entry(w.3).or_insert((0.0, 0.0));
                t.0 += w.1;
                t.1 += w.1 * w.2 as f64;
            }
            let sp = types.entry(SPONTANEOUS).or_insert((0.0, 0.0));
            sp.0 += p_spont;
        }
        let estimate = self.estimates.entry((from, to)).or_default();
        if weights.iter().map(|w| w.1).sum::<f64>() > 0.0 {
            let b = estimate.bucket(m.event_ns, width, window);
            for w in &weights {
                b.3 += w.1 * w.2 as f64;
                b.4 += w.1;
            }
        }
        let best = weights
            .iter()
            .filter(|w| w.1 > p_spont)
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.2.cmp(&a.2)))
            .map(|w| w.0);
        let min = self.config.min_probability;
        let parents = weights
            .iter()
            .filter(|w| w.1 >= min || Some(w.0) == best)
            .map(|w| (w.0, to_prob(w.1)))
            .collect();
        Linked {
            id,
            message: m,
            parents,
            spontaneous: to_prob(p_spont),
            best,
            from_client,
        }
    }
}

/// The type key of spontaneity in a node pair's link types.
const SPONTANEOUS: u64 = 0;

/// Weight of spontaneity among a node pair's link types.
fn types_spont(types: &FastMap<u64, (f64, f64)>) -> f64 {
    types.get(&SPONTANEOUS).map_or(0.0, |t| t.0)
}

fn to_prob(p: f64) -> Prob {
    (p.clamp(0.0, 1.0) * f64::from(ONE)).round() as Prob
}

/// The `link` operator.
pub trait Link<'scope> {
    /// Candidate parents and their probabilities for every message.
    fn link(self, config: LinkConfig) -> Stream<'scope, Time, Vec<Linked>>;
}

impl<'scope> Link<'scope> for Stream<'scope, Time, Vec<Message>> {
    fn link(self, config: LinkConfig) -> Stream<'scope, Time, Vec<Linked>> {
        let arrivals = self.clone().flat_map(|m| {
            let one_sided = m.recv_ns.is_none();
            m.recv_ns.or(m.send_ns).map(|local_ns| Arrival {
                id: message_id(&m),
                to: node_key(&m.dst),
                from: node_key(&m.src),
                local_ns,
                event_ns: m.event_ns,
                one_sided,
                conn: conn_key(&m.src_endpoint, &m.dst_endpoint),
                request: false,
                src_endpoint: m.src_endpoint.clone(),
                dst_endpoint: m.dst_endpoint.clone(),
            })
        });
        let children = self.map(|m| (node_key(&m.src), message_id(&m), m));
        children.binary_frontier(
            arrivals,
            Exchange::new(|c: &(u64, u64, Message)| c.0),
            Exchange::new(|a: &Arrival| a.to),
            "link",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut linker = Linker {
                    config,
                    inbound: FastMap::default(),
                    one_sided: FastMap::default(),
                    estimates: FastMap::default(),
                    sends: FastMap::default(),
                    types: FastMap::default(),
                    ports: Ports::with_idle(config.idle_ns),
                    last_expiry: 0,
                };
                let mut waiting_children: Reorder<Message> = Reorder::default();
                let mut waiting_arrivals: Reorder<Arrival> = Reorder::default();
                move |(children, children_frontier), (arrivals, arrivals_frontier), output| {
                    children.for_each(|_cap, batch| {
                        for (_, id, m) in batch.drain(..) {
                            waiting_children.push(m.event_ns, id, m);
                        }
                    });
                    arrivals.for_each(|_cap, batch| {
                        for a in batch.drain(..) {
                            waiting_arrivals.push(a.event_ns, a.id, a);
                        }
                    });
                    let Some(cap) = held.as_mut() else { return };
                    let now = [
                        children_frontier.frontier().iter().next().copied(),
                        arrivals_frontier.frontier().iter().next().copied(),
                    ]
                    .into_iter()
                    .flatten()
                    .min();
                    // Children wait `order_slack_ns` longer than arrivals. Both are taken in
                    // one order, an arrival at `t` as if at `t - slack`, so that what a child
                    // sees (arrivals, port evidence) does not depend on how the frontier moved.
                    // Messages may come up to `lateness_ns` after the frontier has passed their
                    // event time (upstream windows): a time counts as passed only that much
                    // later, so that what is linked does not depend on timing.
                    let slack = linker.config.order_slack_ns;
                    let lag = linker.config.lateness_ns;
                    let arrivals_bound = now.map(|n| n.saturating_sub(lag));
                    let bound = now.map(|n| n.saturating_sub(lag.saturating_add(slack)));
                    let mut session = output.session(&*cap);
                    loop {
                        let arrival = waiting_arrivals
                            .first()
                            .filter(|(t, _)| arrivals_bound.is_none_or(|b| *t < b));
                        let child = waiting_children
                            .first()
                            .filter(|(t, _)| bound.is_none_or(|b| *t < b));
                        let take_arrival = match (arrival, child) {
                            (Some((ta, _)), Some((tc, _))) => ta.saturating_sub(slack) <= tc,
                            (Some(_), None) => true,
                            (None, Some(_)) => false,
                            (None, None) => break,
                        };
                        if take_arrival {
                            if let Some((_, _, a)) = waiting_arrivals.pop_before(arrivals_bound) {
                                linker.insert(a);
                            }
                        } else if let Some((_, id, m)) = waiting_children.pop_before(bound) {
                            session.give(linker.link(id, m));
                        }
                    }
                    drop(session);
                    if let Some(n) = now {
                        linker.expire(n);
                    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use timely::dataflow::operators::capture::Extract;
    use timely::dataflow::operators::{Capture, ToStream};

    fn msg(src: &str, dst: &str, send: Time, recv: Time) -> Message {
        let node = |s: &str| s.split(':').next().unwrap_or("").to_owned();
        Message {
            send_ns: Some(send),
            recv_ns: Some(recv),
            src: node(src).into(),
            dst: node(dst).into(),
            src_endpoint: Address::parse(src),
            dst_endpoint: Address::parse(dst),
            event_ns: send,
            ..Message::default()
        }
    }

    fn run(messages: Vec<Message>) -> Vec<Linked> {
        let captured = timely::example(move |scope| {
            messages
                .to_stream(scope)
                .container::<Vec<_>>()
                .link(LinkConfig::default())
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

    #[test]
    fn the_nearest_arrival_is_the_likely_parent() {
        const MS: Time = 1_000_000;
        // Clients 10.1.0.x call B (10.0.0.2:80); B calls C (10.0.0.3:5432) 1 ms after each.
        let mut messages = Vec::new();
        for i in 0..5u64 {
            let t = 1_000 * MS + i * 100 * MS;
            let client = format!("10.1.0.{}:{}", i + 1, 40000 + i);
            messages.push(msg(&client, "10.0.0.2:80", t, t + MS / 10));
            messages.push(msg(
                &format!("10.0.0.2:{}", 50000 + i),
                "10.0.0.3:5432",
                t + MS + MS / 10,
                t + MS + 2 * MS / 10,
            ));
        }
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
}
