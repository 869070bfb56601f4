//! `Linker`: a departure prepared and its candidates weighed (timing, sizes, what follows).
//!
//! No state of its own: it reads the `Linker`'s (`linker.rs`).

use super::*;

impl Linker {
    /// Takes in a send as children come, in event-time order: what is known of it then (its
    /// endpoints' roles, the request it replies to, its answer). A root needs nothing more.
    pub(super) fn prepare(&mut self, id: u64, m: &Message) -> Prep {
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
    pub(super) fn weigh(&mut self, p: &Prep) -> Option<Weighed> {
        self.weigh_as_of(p, None)
    }

    /// [`Linker::weigh`], counting as causes (for Project 5's penalty) only the sends caused
    /// before `before_event`, if given.
    pub(super) fn weigh_as_of(&mut self, p: &Prep, before_event: Option<Time>) -> Option<Weighed> {
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
        // What the call's connection learned of its callers' connections, looked up once.
        let affinity = self.affinity_at(p);
        // Whether every candidate was weighed by a matured density.
        let mut matured_all = learned;
        for c in candidates.iter_mut() {
            let exponential = (-(c.delay as f64) / d).exp();
            // WAP5's exponential while the type has few samples.
            let (model, own) = match self.causal.get(&c.kind) {
                Some(density) if learned && !stale(density.last_ns, window, p.event_ns) => {
                    let e = density.samples();
                    matured_all &= matured(density, window, p.event_ns);
                    let r = density.probability(c.delay as f64);
                    // Its sizes' evidence, on the odds.
                    let lr = self.size_odds(c, p.answer_bytes, p.event_ns)
                        * affinity.map_or(1.0, |a| self.affinity_odds(a, c));
                    let r = if r < 1.0 {
                        r * lr / (r * lr + 1.0 - r)
                    } else {
                        r
                    };
                    ((e * r + LEARNING * exponential) / (e + LEARNING), r)
                }
                _ => {
                    matured_all = false;
                    (exponential, 1.0)
                }
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
                        // `relative` is at most 1: a follow fitting no better than the best
                        // so far cannot raise it.
                        if f.fit <= via {
                            continue;
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
            self.spontaneous_weight(p)
        };
        let total: f64 = spontaneous + candidates.iter().map(|c| c.weight).sum::<f64>();
        for c in candidates.iter_mut() {
            c.weight /= total;
        }
        self.scratch = scratch;
        Some(Weighed {
            spontaneous: spontaneous / total,
            matured: matured_all,
            total,
            smallest,
        })
    }

    /// How much the sizes multiply the odds that candidate `c` is the parent of a call
    /// answered with `answer_bytes`, at event time `t`: [`SizeEvidence::ratio`] for the
    /// answer's size, times [`ParentSizes::ratio`] for the candidate's own, times
    /// [`ReplySizes::ratio`] for the size of its task's reply given the answer's (each 1
    /// where not known, not learned, or stale).
    pub(super) fn size_odds(&self, c: &Candidate, answer_bytes: Option<u64>, t: Time) -> f64 {
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
    pub(super) fn reply_bytes(&self, task: Option<u64>) -> Option<u64> {
        self.tasks.get(&task?)?.reply_bytes
    }

    /// The calls the node of call `p` made after `p`'s answer came back and before `until`
    /// whose own answers came back before `until` (at most [`MAX_FOLLOWS`]), each with how typical its
    /// delay after that answer is for a call following it; the calls whose link type is
    /// not learned yet are left out.
    pub(super) fn follows(&self, p: &Prep, until: Time, follows: &mut Vec<Follow>) {
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
    pub(super) fn null_shift(&self, id: u64) -> Time {
        self.config.null_shift_ns / 2
            + ((u128::from(self.config.null_shift_ns) * u128::from(id)) >> 64) as Time
    }

    /// Where the arrivals of the sender of `p` begin (its time, if none came yet): what a
    /// scan shifted into the past cannot see before.
    pub(super) fn first_local(&self, p: &Prep) -> Time {
        self.first_arrival
            .get(&p.from)
            .map_or(p.at, |f| f.first_local)
    }

    /// Whether the gap `(start, end)` of `node` is clean ([`TypicalDelay`]): the node made no
    /// call in it whose answer came back in it. A gap holding more than [`MAX_CLEAN_SCAN`]
    /// sends is taken as not clean.
    pub(super) fn clean(&self, node: u64, start: Time, end: Time) -> bool {
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
}
