//! `Model`: replies close tasks, and what a closed task teaches the evidence; decisions made
//! final, and expiry: tasks and calls older than the node's window are dropped (what frees
//! the model's state).

use super::*;

impl Model {
    /// Makes a provisional call final: learns from it, and hands its decision out.
    pub(super) fn finish(&mut self, node: &mut Node, p: Provisional) {
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
                delays.learn((ptype, p.class, d, w as f32));
                sizes.learn(SizeFact::Parent {
                    ptype,
                    class: p.class,
                    bin,
                    w: w as f32,
                });
            }
        }
        let _ = node;
        self.finals.push((p.id, p.decision));
    }

    /// Makes final the provisional calls at `node` sent more than `revise_ns` before `at`,
    /// and those in any of `tasks` (when given).
    pub(super) fn finalize_where(&mut self, node: u64, at: Time, tasks: Option<&[u64]>) {
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
        self.release_answered(&mut n, |p| {
            let answered = p.answer.map_or(p.at, |a| a.0.max(p.at));
            answered.saturating_add(revise) < at
                || tasks.is_some_and(|ts| p.task.is_some_and(|(t, _)| ts.contains(&t)))
        });
        self.nodes.insert(node, n);
    }

    pub(super) fn finalize_older(&mut self, node: u64, at: Time) {
        self.finalize_where(node, at, None);
    }

    /// Decides a reply: the task it closes. The provisional calls of the task it closes are
    /// decided again without it (a call is nested in its task: one still out cannot be the
    /// closed task's).
    pub(super) fn reply(&mut self, s: &Seen, at: Time, to: u64, class: u64) {
        let config = self.config;
        let Some(mut node) = self.nodes.remove(&s.src) else {
            return;
        };
        let provisional: SmallVec<[u64; 8]> =
            node.provisional.values().flatten().map(|p| p.id).collect();
        // The options: (index of the task, score, parent id, parent type, delay).
        let mut options: SmallVec<[CallOption; 8]> = SmallVec::new();
        // The options on the reply's own connection (all where the input names none).
        let mut rivals = 0usize;
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
            let mut score = self.delays.read((ptype, class, d));
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
            score += self.composition.read((mix(to, s.src), signature));
            if let (Some(a), Some(b)) = (s.conn, t.conn)
                && a != b
            {
                score += OTHER_CONNECTION;
            } else {
                rivals += 1;
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
        // Its reply may follow the answer of a call held in another task better than the
        // task's own latest arrival: the call was this task's (`model/answered.rs`).
        let nesting = task_best.and_then(|k| {
            let m = self.nesting_move(&node, at, class, mix(to, s.src), &options[k])?;
            Self::moved_option(&node, at, &mut options[k], m.0, m.1);
            decision.options[k] = (Some(options[k].2), options[k].1);
            Some((k, m.1))
        });
        // Cross options: (arrival id, score). Another task's arrival caused the reply as
        // far as such arrivals precede such replies beyond chance (`Coincidence`, counted at
        // every reply against its time shifted into the past).
        let mut cross: SmallVec<[(u64, f64); 8]> = SmallVec::new();
        // Whether a job waited at the node from before the reply's own task's latest
        // arrival: then the reply's timing tells nothing of what it carries.
        let mut backlog = false;
        // Pops that came before the reply's own and still wait: jobs they will take.
        let mut ahead = 0;
        let key = conn_key(s.conn, s.dst);
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
                    .learn((class, &pairs(&real), &pairs(&null)));
                self.others.learn((class, &others(&real), &others(&null)));
            }
            // The own cause, judged the same way: a server's reply follows its task's latest
            // arrival by a typical delay far more often than chance would; a queue's reply
            // to a pop follows the pop by any wait, as at random times.
            let own_p = self
                .coincidence
                .read((mix(o.3, CROSS_TYPE), class, o.4))
                .max(MIN_OWN);
            // Another caller's request may cause the reply (a push answering a pop, a
            // publish a subscription), one that came while the task waited: after its
            // latest arrival. A request of the reply's own caller still waiting is one of
            // the tasks the reply may close, weighed as such above, not a cross cause.
            for &(id, ctype, d, task) in &real {
                if id == o.2
                    || task == own
                    || d >= o.4
                    || task != id
                    || node.tasks.iter().any(|t| t.id == task && t.caller == s.dst)
                {
                    continue;
                }
                let p = self.others.read((ctype, class, d));
                if p > CROSS_LEAST && own_p < OWN_AT_CHANCE {
                    cross.push((id, o.1 + (p / own_p).ln()));
                }
            }
            // At a queue, the reply carries a job not handed out, in the queue's order:
            // the oldest there is, but for those the pops that came before its own and are
            // still waiting will take (a queue serves its pops in the order they came, though
            // it may write the answers in another). As likely as the reply's connection is a
            // consumer's and the job's a producer's; whatever the timing, which says nothing
            // of what a pop answered at once carries.
            if let Some(q) = node.queue.as_deref() {
                let opened = node.tasks[o.0].opened;
                let own_latest = at.saturating_sub(o.4.max(0) as Time);
                backlog = q
                    .oldest(own_latest, own, 0)
                    .is_some_and(|j| j.1 < own_latest);
                ahead = node
                    .tasks
                    .iter()
                    .filter(|t| t.id != own && t.opened < opened && !t.foreign)
                    .filter(|t| q.consumer(conn_key(t.conn, t.caller)) > 0.5)
                    .count();
                if let Some((id, _, producer)) = q.oldest(at, own, ahead) {
                    let score = o.1 + logit(q.consumer(key)) + logit(producer);
                    match cross.iter_mut().find(|c| c.0 == id) {
                        Some(c) => c.1 = c.1.max(score),
                        None => cross.push((id, score)),
                    }
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
        // The chosen task takes over the held call whose answer it follows.
        if let Some((k, m)) = nesting
            && k == b
        {
            self.take_over(&mut node, options[k].0, m);
        }
        let m = marginal(&decision);
        self.score += m;
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
        // A reply that could have closed any of `rivals` tasks on its connection teaches
        // its delays 1/rivals as much as one with a single task to close: what it teaches
        // follows the decision it helped make (at a leaf, the shortest service times
        // learned pull each reply to the newest request, and teach shorter times still),
        // where a reply with one task to close teaches the node's service time as it is.
        let teach = 1.0 / rivals.max(1) as f32;
        for (k, &(ti, score, _, ptype, d, _)) in options.iter().enumerate() {
            let w = ((score - max).exp() / total) as f32;
            if w < 1e-3 && k != b {
                continue;
            }
            delays.learn((ptype, class, d, w * teach));
            composition.learn((mix(to, s.src), node.tasks[ti].signature, w));
        }
        // A cross cause closes the likeliest task all the same.
        let cross_cause = b >= options.len() && !options.is_empty();
        if cross_cause {
            self.tally.cross_replies += 1;
            if let Some(job) = decision.options[b].0 {
                node.queue.get_or_insert_default().carry(job, ahead);
            }
        }
        if let Some(q) = node.queue.as_mut() {
            q.count_reply(key, backlog, cross_cause, at);
        }
        let chosen_task = if cross_cause {
            task_best.map(|k| options[k].0)
        } else {
            options.get(b).map(|o| o.0)
        };
        let parent = decision.parent();
        self.finals.push((s.id, decision));
        let Some(ti) = chosen_task else {
            self.release_used(&mut node, parent, None);
            self.nodes.insert(s.src, node);
            return;
        };
        // The task's held calls, and the one whose answer caused the reply, are final.
        let closed = node.tasks[ti].id;
        self.release_used(&mut node, parent, Some(closed));
        let task = node.tasks.remove(ti);
        if !task.foreign {
            let mut calls: SmallVec<[(u64, usize); 4]> = SmallVec::new();
            for &(_, c) in task.kids.iter() {
                match calls.iter_mut().find(|x| x.0 == c) {
                    Some(x) => x.1 += 1,
                    None => calls.push((c, 1)),
                }
            }
            self.repeats.learn((task.class, &calls));
            self.durations.learn((task.class, delay(task.opened, at)));
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
                self.answer(s.dst, task.id, cross_cause, rt, (s.id, s.conn), rtype, rbin);
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

    /// Forgets what is older than `task_timeout_ns` before each node's newest local time,
    /// and the tasks another task's arrival opened once idle (`max_delay_ns`; the cross
    /// window once their calls are answered).
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
                .chain(&node.answered)
                .filter_map(|p| p.task.map(|t| t.0))
                .collect();
            let idle = node.newest.saturating_sub(max_delay);
            // A task another task's arrival opened takes no call past its reach
            // (`Task::reach_ns`): done once its calls are answered and that is over.
            let newest = node.newest;
            node.tasks.retain(|t| {
                let done = t.foreign
                    && (t.newest() < idle
                        || (t.newest().saturating_add(t.reach_ns(max_delay)) < newest
                            && t.outstanding.is_empty()));
                (t.newest() >= before && !done) || held.contains(&t.id)
            });
            expired += (n - node.tasks.len()) as u64;
            node.calls.retain(|_, (_, t)| *t >= before);
            let n = node.paired.len();
            node.paired.retain(|_, (_, t, _)| *t >= before);
            expired += (n - node.paired.len()) as u64;
            node.unpaired.retain(|_, (t, _, _)| *t >= before);
            if let Some(q) = node.queue.as_mut() {
                q.expire(before);
            }
            node.served
                || !node.tasks.is_empty()
                || !node.calls.is_empty()
                || !node.paired.is_empty()
                || !node.unpaired.is_empty()
                || !node.provisional.is_empty()
                || !node.answered.is_empty()
        });
        self.expired += expired;
    }

    /// How many tasks are open, over all nodes.
    pub fn open_tasks(&self) -> usize {
        self.nodes.values().map(|n| n.tasks.len()).sum()
    }
}
