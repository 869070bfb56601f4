//! `Paths`: instances grown from a root (probably true, probably false, try-both) and built
//! into pattern shapes with their delays.
//!
//! No state of its own: it reads the `Paths` tables (`tables.rs`).

use super::*;

impl Paths {
    /// The instances from `root`: (messages with parent positions, probability).
    /// Links at most `probably_false` likely (and not the most likely cause) are left out;
    /// `budget` try-both decisions are made. An instance that reaches [`MAX_MESSAGES`] is cut
    /// there; the messages whose most likely cause it holds but had no room for go to `lost`,
    /// with the probability of the cut instance and their link (see [`Paths::continue_cut`]).
    pub(super) fn enumerate(
        &self,
        root: u64,
        probably_false: f64,
        budget: u32,
        lost: &mut Vec<(u64, f64)>,
    ) -> Vec<Hypothesis> {
        let Some(r) = self.entries.get(&root) else {
            return Vec::new();
        };
        let s = f64::from(r.spontaneous) / f64::from(ONE);
        self.enumerate_from(root, s, probably_false, budget, lost)
    }

    /// [`Paths::enumerate`] from `root` as if it were one with probability `prob`.
    pub(super) fn enumerate_from(
        &self,
        root: u64,
        prob: f64,
        probably_false: f64,
        budget: u32,
        lost: &mut Vec<(u64, f64)>,
    ) -> Vec<Hypothesis> {
        struct Partial {
            msgs: Vec<(u64, Option<usize>)>,
            i: usize,
            j: usize,
            prob: f64,
            budget: u32,
        }
        let mut out = Vec::new();
        let mut stack = vec![Partial {
            msgs: {
                let mut v = Vec::with_capacity(32);
                v.push((root, None));
                v
            },
            i: 0,
            j: 0,
            prob,
            budget,
        }];
        while let Some(mut p) = stack.pop() {
            loop {
                if p.i >= p.msgs.len() {
                    out.push((p.msgs, p.prob));
                    break;
                }
                if p.msgs.len() >= MAX_MESSAGES {
                    for (k, &(id, _)) in p.msgs.iter().enumerate().skip(p.i) {
                        let Some(e) = self.entries.get(&id) else {
                            continue;
                        };
                        let from = if k == p.i { p.j } else { 0 };
                        for &(c, q) in e.children.iter().skip(from) {
                            let best = self.entries.get(&c).is_some_and(|ce| ce.best == Some(e.id));
                            if best && !p.msgs.iter().any(|m| m.0 == c) {
                                lost.push((c, p.prob * f64::from(q) / f64::from(ONE)));
                            }
                        }
                    }
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
    pub(super) fn condition_on_answer(&self, root: u64, instances: &mut Vec<Hypothesis>) -> bool {
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
    pub(super) fn hop_labels(&self, e: &Entry) -> (u32, u32, Option<u16>) {
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
    pub(super) fn build(
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
            let direction = match (&m.src_endpoint, &m.dst_endpoint) {
                (Address::Endpoint(a), Address::Endpoint(b)) => Some((*a, *b)),
                _ => None,
            };
            hops.push((delay, network, m.tcp.map(|c| (c, direction))));
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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    True,
    False,
    Both,
}

pub(super) fn decide(q: f64, is_best: bool) -> Decision {
    decide_below(q, is_best, PROBABLY_FALSE)
}

/// [`decide`], with links at most `probably_false` likely probably false.
pub(super) fn decide_below(q: f64, is_best: bool, probably_false: f64) -> Decision {
    if q >= PROBABLY_TRUE {
        Decision::True
    } else if q <= probably_false && !is_best {
        Decision::False
    } else {
        Decision::Both
    }
}
