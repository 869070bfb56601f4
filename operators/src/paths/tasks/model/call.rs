//! `Model`: a call's options (which open task made it), weighed by the evidence, and the
//! joint resolution of provisional calls on a node (the assignment where they conflict).
//!
//! No state of its own: it works on the `Model`'s tables (`model/mod.rs`).

use super::*;

impl Model {
    /// A client's call: it starts a path, unless its class follows arrivals of a type beyond
    /// chance ([`Coincidence`]: a worker's call after the job its pop brought) and one of
    /// them, within the cross window, is an answer another task's arrival caused (marked
    /// `FOREIGN`), in which case that arrival opens a task at the client (nothing replies
    /// to it; it takes calls within the cross window of its latest arrival, and ends when
    /// idle past it with its calls answered, or for `max_delay_ns`) and the call is decided
    /// in it. The
    /// answers to the calls made in such a task do not count: a closed-loop client's next
    /// request follows its answers beyond chance too, and one such task would take every
    /// later request of the client (on a node-name trace of the generator's multi-tier
    /// preset at parallelism 20, all 150,353 client calls, leaving 0.1% of the true
    /// instances whole). Nor does one that came on the call's own connection: a worker's
    /// next pop follows the job its last pop brought, as closely as the job's work was quick
    /// (a real job queue's paths split in two patterns, with and without the next pop, as
    /// its service answered in 4 ms or in 42 ms). Without connections (a node-name trace)
    /// nothing tells the next turn of a loop from a reply whose roles were told wrong (a
    /// server taken for a client answering the node that called it), and the test is as
    /// before.
    ///
    /// Returns the call's decision if it starts a path, `None` if it is to be decided among
    /// the client's tasks. A call joins a task only by this test, whatever tasks are open: a
    /// busy client's calls that follow its answers at chance stay roots.
    pub(super) fn client_call(&mut self, s: &Seen, at: Time, class: u64) -> Option<Decision> {
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
        // Arrivals another task caused. Not the answers to the calls made in the tasks they
        // opened: a closed-loop client's next call follows its answers beyond chance, and
        // would chain every later request of the client into one such task. Nor, for the
        // same reason, one that came on the call's own connection: it answered the client's
        // previous call there, and the call is the next turn of its loop (a worker's next pop
        // follows the job its last pop brought, at once if its work was quick, beyond the
        // window if not, so that the job's pattern would hang on the speed of its service).
        let foreign_ids: SmallVec<[u64; 8]> = node
            .recent
            .iter()
            .filter(|r| r.4 == FOREIGN && (s.conn.is_none() || r.5 != s.conn))
            .map(|r| r.1)
            .collect();
        if let Some(shifted) = null_time(node, at, s.id) {
            let null = scan(shifted);
            let pairs = |v: &[RecentArrival]| -> SmallVec<[(u64, i64); 8]> {
                v.iter().map(|x| (mix(x.2, CROSS_TYPE), x.4)).collect()
            };
            self.coincidence
                .learn((class, &pairs(&real), &pairs(&null)));
        }
        let best = real
            .iter()
            .filter(|r| foreign_ids.contains(&r.1))
            .map(|r| (r, self.coincidence.read((mix(r.2, CROSS_TYPE), class, r.4))))
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
                            kids: Kids::default(),
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

    /// The options of provisional call `p` of `class` at `node`'s tasks (`keys`:
    /// [`task_keys`]): weighed once (kept in `p`), and read again with what changes while it
    /// is provisional (`repeats`, per task: the chance of another call of its class, from
    /// the calls of the class it made, [`Repeats`]) for the tasks still open.
    pub(super) fn call_options(
        &self,
        node: &Node,
        keys: &[(Time, u64)],
        repeats: &[f64],
        p: &mut Provisional,
        class: u64,
    ) -> CallOptions {
        let weighed = p
            .weighed
            .get_or_insert_with(|| self.weigh_call(node, p.at, class));
        let mut options: SmallVec<[CallOption; 64]> = SmallVec::new();
        for w in weighed.iter() {
            let Some(i) = task_index(keys, w.task, w.opened) else {
                continue;
            };
            let score = w.score + repeats[i];
            options.push((i, score, w.pid, w.ptype, w.delay, w.bin));
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
            return keep.into_iter().map(|k| options[k]).collect();
        }
        options.into_iter().collect()
    }

    /// A call of `class` sent at `at` weighed against each of `node`'s tasks that can take
    /// it: the part of its score that stays while it is provisional.
    fn weigh_call(&self, node: &Node, at: Time, class: u64) -> Vec<Weighed> {
        let config = self.config;
        let oldest = at.saturating_sub(config.task_timeout_ns);
        let mut weighed = Vec::new();
        // The arrivals just before the call, whose coincidence with calls of the class is
        // counted (`call`): an option whose latest arrival is among them is weighed also by
        // how far such an arrival at that delay explains such a call beyond chance.
        let believed = self.call_coincidence.believed(class);
        let scanned: SmallVec<[u64; CALL_SCAN]> = if believed {
            recent_before(node, at).iter().map(|r| r.1).collect()
        } else {
            SmallVec::new()
        };
        for t in node.tasks.iter() {
            if t.opened > at {
                break;
            }
            if t.opened < oldest {
                continue;
            }
            let Some((pt, pid, ptype, bin)) = t.latest(at) else {
                continue;
            };
            if at.saturating_sub(pt) > t.reach_ns(config.max_delay_ns) {
                continue;
            }
            let d = delay(pt, at);
            let mut score = self.delays.read((ptype, class, d))
                + self.sizes.read((ptype, class, bin))
                + self.durations.read((t.class, delay(t.opened, at)));
            if scanned.contains(&pid) {
                score += self
                    .call_coincidence
                    .read((ptype, class, d))
                    .max(CALL_LEAST)
                    .ln();
            }
            weighed.push(Weighed {
                task: t.id,
                opened: t.opened,
                pid,
                ptype,
                delay: d,
                bin,
                score,
            });
        }
        weighed
    }

    /// Decides a call together with the provisional calls of its class at its node.
    pub(super) fn call(&mut self, s: &Seen, at: Time, class: u64) {
        let Some(mut node) = self.nodes.remove(&s.src) else {
            return;
        };
        // Counted at every call, whatever is decided: nothing learned feeds back.
        if let Some(shifted) = null_time(&node, at, s.id) {
            let pairs = |until: Time| -> SmallVec<[(u64, i64); CALL_SCAN]> {
                recent_before(&node, until)
                    .iter()
                    .map(|r| (r.2, delay(r.0, until)))
                    .collect()
            };
            self.call_coincidence
                .learn((class, &pairs(at), &pairs(shifted)));
        }
        let new = Provisional {
            id: s.id,
            class,
            at,
            task: None,
            decision: Decision::default(),
            learn: SmallVec::new(),
            weighed: None,
            answer: None,
        };
        self.resolve(&mut node, class, Some(new));
        self.nodes.insert(s.src, node);
    }

    /// Decides the provisional calls of `class` at `node` again, with `new` among them.
    pub(super) fn resolve(&mut self, node: &mut Node, class: u64, new: Option<Provisional>) {
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
        // Up to `MAX_PROVISIONAL` calls of `MAX_CALL_OPTIONS` options each: the slots are
        // found by a map, not by scanning them.
        let mut slots: Vec<(u64, u64)> = Vec::new();
        let mut slot_of: FastMap<(u64, u64), usize> = FastMap::default();
        let mut per_call: Vec<CallOptions> = Vec::with_capacity(set.len());
        let keys = task_keys(node);
        // Each task's chance of another call of the class, read once for every call of the
        // set.
        let repeats: SmallVec<[f64; 64]> = node
            .tasks
            .iter()
            .map(|t| self.repeats.read((t.class, class, t.kids.of_class(class))))
            .collect();
        for p in set.iter_mut() {
            let options = self.call_options(node, &keys, &repeats, p, class);
            for o in &options {
                let key = (node.tasks[o.0].id, o.2);
                slot_of.entry(key).or_insert_with(|| {
                    slots.push(key);
                    slots.len() - 1
                });
            }
            per_call.push(options);
        }
        let chosen: Vec<Option<usize>> = if set.len() == 1 {
            // One call: the best option, or spontaneous.
            let empty = [None];
            let best = self
                .joint(node, class, &set, &per_call, &empty)
                .conditionals(0)
                .into_iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .filter(|b| b.1 > SPONTANEOUS);
            vec![best.map(|b| b.0)]
        } else {
            self.assign.clear(slots.len() * 2);
            for options in &per_call {
                self.assign.row(COST_OFFSET - SPONTANEOUS);
                for o in options {
                    let key = (node.tasks[o.0].id, o.2);
                    let Some(&c) = slot_of.get(&key) else {
                        continue;
                    };
                    let held = node.tasks[o.0].kids.contains((o.2, class));
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
            if set.len() <= MAX_REFINED && self.config.rho < 0.999 {
                self.refine(node, class, &set, &per_call, &mut chosen);
            }
            chosen
        };
        // Each option's score given the others' choices: a slot another call of the class
        // holds (a final one, or one of the set) costs the same-child penalty, and the order
        // prior ranks the tasks still waiting. The choices are then each call's best given
        // the others, and their probabilities say so.
        let joint = self.joint(node, class, &set, &per_call, &chosen);
        let conditional: Vec<SmallVec<[f64; MAX_CALL_OPTIONS]>> =
            (0..per_call.len()).map(|i| joint.conditionals(i)).collect();
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
        // A held call whose answer a call of the set went on from is final.
        if !node.answered.is_empty() {
            let parents: SmallVec<[u64; MAX_PROVISIONAL]> =
                set.iter().filter_map(|p| p.task.map(|t| t.1)).collect();
            self.release_answered(node, |p| p.answer.is_some_and(|a| parents.contains(&a.1)));
        }
        node.provisional.insert(class, set);
    }

    /// The calls `set` of `class` at `node`, with their options and the choices `chosen`,
    /// as [`Joint`] scores them.
    fn joint<'a>(
        &self,
        node: &'a Node,
        class: u64,
        set: &'a [Provisional],
        per_call: &'a [CallOptions],
        chosen: &'a [Option<usize>],
    ) -> Joint<'a> {
        // Which calls of the set hold which slot, as chosen (at most `MAX_PROVISIONAL`).
        let holders: SmallVec<[((usize, u64), usize); MAX_PROVISIONAL]> = chosen
            .iter()
            .enumerate()
            .filter_map(|(j, c)| {
                c.map(|c| {
                    let o = per_call[j][c];
                    ((o.0, o.2), j)
                })
            })
            .collect();
        Joint {
            node,
            class,
            set,
            per_call,
            holders,
            rho: self.config.rho,
        }
    }

    /// The log-likelihood of the choices `chosen` for `set` (`None`: spontaneous).
    pub(super) fn objective(
        &self,
        node: &Node,
        class: u64,
        set: &[Provisional],
        per_call: &[CallOptions],
        chosen: &[Option<usize>],
    ) -> f64 {
        let joint = self.joint(node, class, set, per_call, chosen);
        chosen
            .iter()
            .enumerate()
            .map(|(i, c)| match c {
                Some(k) => joint.conditional(i, *k),
                None => SPONTANEOUS,
            })
            .sum()
    }

    /// Improves `chosen` by exchanging the tasks of two calls while the whole gets likelier
    /// (at most three passes).
    pub(super) fn refine(
        &self,
        node: &Node,
        class: u64,
        set: &[Provisional],
        per_call: &[CallOptions],
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
}

/// Per option of a call of a joint decision: whether its task still waits for a call of
/// the class, and whether another call holds its slot ([`Joint::held`]).
#[derive(Default)]
struct Held {
    waiting: SmallVec<[bool; MAX_CALL_OPTIONS]>,
    taken: SmallVec<[bool; MAX_CALL_OPTIONS]>,
}

/// The calls of a class at a node decided jointly: their scores given one another's
/// choices.
struct Joint<'a> {
    node: &'a Node,
    class: u64,
    set: &'a [Provisional],
    per_call: &'a [CallOptions],
    /// (slot, call of the set that holds it), as chosen.
    holders: SmallVec<[((usize, u64), usize); MAX_PROVISIONAL]>,
    /// The class's order prior.
    rho: f64,
}

impl Joint<'_> {
    /// Option `c` of call `j` as a slot: (the task's index in `node.tasks`, the parent's id).
    fn key(&self, j: usize, c: usize) -> (usize, u64) {
        let o = self.per_call[j][c];
        (o.0, o.2)
    }

    /// For each option of call `i`: whether its task still waits for a call of the class
    /// when `i` was sent (neither a final call nor an earlier one of the set took its slot),
    /// and whether its slot is held at all (by a final call or by any other call of the set,
    /// as chosen), found in one pass over the holders.
    fn held(&self, i: usize) -> Held {
        let before = (self.set[i].at, i);
        let mut held = Held::default();
        for c in 0..self.per_call[i].len() {
            let slot = self.key(i, c);
            let (ti, pid) = slot;
            let by_final = self.node.tasks[ti].kids.contains((pid, self.class));
            let (mut by_earlier, mut by_other) = (false, false);
            for &(h, j) in &self.holders {
                if h == slot && j != i {
                    by_other = true;
                    by_earlier |= (self.set[j].at, j) < before;
                }
            }
            held.waiting.push(!(by_final || by_earlier));
            held.taken.push(by_final || by_other);
        }
        held
    }

    /// The score of call `i` of the set taking its option `k`, the others as chosen: its
    /// learned delay, the same-child penalty if another call of the class holds the slot,
    /// and the order prior over the tasks still waiting for a call of the class when it was
    /// sent (those whose slot neither a final call nor an earlier one of the set took).
    fn conditional(&self, i: usize, k: usize) -> f64 {
        self.score(i, k, &self.held(i))
    }

    /// [`Joint::conditional`] of call `i` for each of its options: which tasks still wait
    /// is worked out once.
    fn conditionals(&self, i: usize) -> SmallVec<[f64; MAX_CALL_OPTIONS]> {
        let held = self.held(i);
        (0..self.per_call[i].len())
            .map(|k| self.score(i, k, &held))
            .collect()
    }

    /// [`Joint::conditional`], with `held` from [`Joint::held`].
    fn score(&self, i: usize, k: usize, held: &Held) -> f64 {
        let rho = self.rho;
        let options = &self.per_call[i];
        let waiting = &held.waiting;
        let mut score = options[k].1;
        if held.taken[k] {
            score += SAME_CHILD;
        }
        if rho >= 0.999 {
            // No order: every option the same, whatever its rank.
            return score + order_log_prior(1.0, 0, options.len());
        }
        score + order_log_prior(rho, order_rank(waiting, k), options.len())
    }
}

/// The rank of option `k` in the order the order prior reads: the tasks still waiting for
/// a call of the class first, by age, then those whose slot was taken, by age. One order
/// over all the options, so that the prior sums to one whatever `rho` (a prior that gave
/// every taken slot the rank after the waiting ones summed to more, and made a strong order
/// look likelier than the data said when the warm-up compared priors).
fn order_rank(waiting: &[bool], k: usize) -> usize {
    let before = waiting[..k].iter().filter(|w| **w == waiting[k]).count();
    if waiting[k] {
        before
    } else {
        waiting.iter().filter(|w| **w).count() + before
    }
}

#[cfg(test)]
mod order_tests {
    use super::*;

    #[test]
    fn the_order_prior_over_a_calls_options_sums_to_one() {
        let waiting = [false, true, false, true, true, false];
        let mut ranks: Vec<usize> = (0..waiting.len())
            .map(|k| order_rank(&waiting, k))
            .collect();
        assert_eq!(ranks[1], 0, "the oldest waiting task comes first");
        ranks.sort_unstable();
        assert_eq!(ranks, (0..waiting.len()).collect::<Vec<_>>());
        for rho in [1.0, 0.5, 0.2, 0.1] {
            let total: f64 = (0..waiting.len())
                .map(|k| order_log_prior(rho, order_rank(&waiting, k), waiting.len()).exp())
                .sum();
            assert!((total - 1.0).abs() < 1e-9, "rho {rho}: {total}");
        }
    }
}
