//! `Linker`: learning from each scan against its time-shifted null, and the commit of a
//! departure's links to tasks and connections.
//!
//! No state of its own: it updates the `Linker`'s learned densities (`linker.rs`).

use super::*;

impl Linker {
    /// Learns from a weighed send's candidates: their delays against the time-shifted null's
    /// (the causal densities), and the gaps from calls' answers to their tasks' replies.
    pub(super) fn learn(&mut self, p: &Prep, candidates: &[Candidate]) {
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
            if seen_back > 0 {
                self.learn_affinity(p, candidates, null, seen_back);
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
    pub(super) fn commit(
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
            matured,
            smallest,
            ..
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
        if matured {
            self.learn_spontaneity(p, p_spont);
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
        if let Some(c) = best {
            self.learn_horizon(p.from, c.delay, p.event_ns);
        }
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
    pub(super) fn reply_gap(&mut self, p: &Prep, latest: &Candidate, bytes: Option<u64>) -> f64 {
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
    pub(super) fn learn_again(&mut self, p: &Prep) {
        if self.weigh_as_of(p, Some(p.event_ns)).is_some() {
            let candidates = std::mem::take(&mut self.scratch.candidates);
            self.learn(p, &candidates);
            self.scratch.candidates = candidates;
        }
    }
}
