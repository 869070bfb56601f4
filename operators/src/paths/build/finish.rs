//! `Paths`: finished instances aggregated into patterns, roots finished and state expired
//! (what frees it), patterns evicted past their bounds, and snapshots.

use super::*;

impl Paths {
    /// Names every pattern not named yet. O(patterns), and O(hops) for each one named.
    pub(super) fn name_all(&mut self) {
        let labels = self.labels.borrow();
        for agg in self.patterns.values_mut() {
            self.table_bytes += agg.name(&labels);
        }
    }

    /// Adds an instance to its pattern; returns the pattern's id when instances are emitted.
    pub(super) fn aggregate(
        &mut self,
        root_ns: Time,
        b: &Built,
        likeliest: bool,
    ) -> Option<String> {
        let cap = self.config.max_patterns.max(1);
        let over_count =
            self.patterns.len() >= cap + cap / 4 && !self.patterns.contains_key(&b.key);
        if over_count || self.table_bytes > self.config.max_pattern_bytes {
            self.evict(cap, self.config.max_pattern_bytes / 4 * 3);
        }
        let n = b.hops.len();
        if !self.patterns.contains_key(&b.key) && !self.restored.is_empty() {
            let id = Name::of(&b.shape, &self.labels.borrow()).id;
            if let Some(mut agg) = self
                .restored
                .remove(&id)
                .and_then(|k| self.patterns.remove(&k))
            {
                self.table_bytes += b.shape.len() * std::mem::size_of::<Hop>();
                agg.shape = b.shape.clone();
                agg.shape.shrink_to_fit();
                self.patterns.insert(b.key, agg);
            }
        }
        if !self.patterns.contains_key(&b.key) {
            let mut shape = b.shape.clone();
            shape.shrink_to_fit();
            let agg = Agg {
                shape,
                name: None,
                total: Stats::new(n),
                first_ns: root_ns,
                buckets: VecDeque::new(),
                touched: false,
                reported: false,
                shown: false,
            };
            self.table_bytes += agg.heap_bytes();
            self.patterns.insert(b.key, agg);
        }
        let every = self.config.every_ns;
        let bucket = root_ns - root_ns % every;
        let agg = self.patterns.get_mut(&b.key)?;
        // How many bytes the table grows by, counted as it grows: O(hops), not the
        // O(buckets · hops) of a recount.
        let mut grown: isize = 0;
        agg.touched = true;
        agg.first_ns = agg.first_ns.min(root_ns);
        let pos = agg.buckets.iter().rposition(|(s, _)| *s == bucket);
        let idx = match pos {
            Some(i) => i,
            None => {
                let at = agg.buckets.partition_point(|(s, _)| *s < bucket);
                let capacity = agg.buckets.capacity();
                let stats = Stats::new(n);
                grown += stats.heap_bytes() as isize;
                agg.buckets.insert(at, (bucket, stats));
                grown += ((agg.buckets.capacity() - capacity)
                    * std::mem::size_of::<(Time, Stats)>()) as isize;
                at
            }
        };
        let w = b.probability;
        for stats in [&mut agg.total, &mut agg.buckets[idx].1] {
            stats.count += 1;
            stats.likeliest += u64::from(likeliest);
            stats.expected += w;
            stats.max_p = stats.max_p.max(w);
            if let Some(e) = b.e2e {
                grown += stats.e2e.add(e, w);
            }
            for (k, (d, net, tcp)) in b.hops.iter().enumerate() {
                if let Some(d) = d {
                    grown += stats.delay[k].add(*d, w);
                }
                if let Some(x) = net {
                    grown += stats.network[k].add(*x, w);
                }
                if let Some((c, direction)) = tcp {
                    if stats.tcp.is_empty() {
                        stats.tcp = vec![TcpSums::default(); n];
                        grown += (n * std::mem::size_of::<TcpSums>()) as isize;
                    }
                    stats.tcp[k].add(c, *direction, w);
                }
            }
        }
        if self.config.instances {
            grown += agg.name(&self.labels.borrow()) as isize;
        }
        self.table_bytes = self.table_bytes.saturating_add_signed(grown);
        self.config.instances.then(|| agg.id().to_owned())
    }

    /// Evicts the patterns with the smallest expected counts until at most `keep` remain
    /// and they hold at most `keep_bytes`. Amortised: called when the table is a quarter over
    /// `keep` or over `max_pattern_bytes` (a quarter more than `keep_bytes`), so each
    /// insertion pays `O(log n)`.
    pub(super) fn evict(&mut self, keep: usize, keep_bytes: usize) {
        let mut by_expected: Vec<(f64, u64)> = self
            .patterns
            .iter()
            .map(|(key, a)| (a.total.expected, *key))
            .collect();
        by_expected.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        if self.evictions == 0 {
            let bound = if self.patterns.len() > keep {
                format!("more than {keep} patterns (--max-patterns)")
            } else {
                format!(
                    "patterns hold more than {:.1} MiB (--pattern-memory)",
                    self.config.max_pattern_bytes as f64 / 1_048_576.0
                )
            };
            tracing::warn!(
                "paths: {bound}; evicting those with the smallest expected counts (retracted \
                 in the output; raise the bound to keep more)"
            );
        }
        for (_, key) in by_expected {
            if self.patterns.len() <= keep && self.table_bytes <= keep_bytes {
                break;
            }
            if let Some(agg) = self.patterns.remove(&key) {
                self.evictions += 1;
                self.table_bytes = self.table_bytes.saturating_sub(agg.heap_bytes());
                if let (Some(name), true) = (agg.name, agg.reported || agg.shown) {
                    self.evicted
                        .push((key, name.id, name.tree, agg.shown, agg.reported));
                }
            }
        }
    }

    /// Prefetches what the roots waiting next will read ([`prefetch`]): their entries,
    /// [`PREFETCH_FAR`] places ahead, then, once those have come, [`PREFETCH_NEAR`] places
    /// ahead, their messages and their children's entries. A root is judged seconds after it
    /// came, when its tree has left the cache.
    pub(super) fn prefetch_roots(&self) {
        // One walk of the ordered set for both places.
        let mut ahead = self.pending.iter();
        let near = ahead.nth(PREFETCH_NEAR);
        let far = ahead.nth(PREFETCH_FAR - PREFETCH_NEAR - 1);
        if let Some(e) = far.and_then(|r| self.entries.get(&r.2)) {
            prefetch(e);
        }
        if let Some(e) = near.and_then(|r| self.entries.get(&r.2)) {
            prefetch::<Message>(&e.m);
            for (c, _) in &e.children {
                if let Some(ce) = self.entries.get(c) {
                    prefetch(ce);
                }
            }
        }
    }

    /// Finishes the roots that are ready at `now` (all of them when `now` is `None`).
    pub(super) fn finish_roots(&mut self, now: Option<Time>, out: &mut Vec<PathRecord>) {
        while let Some(&(ready, root_id, root)) = self.pending.first() {
            if now.is_some_and(|n| ready >= n) {
                break;
            }
            self.pending.pop_first();
            self.prefetch_roots();
            let Some(root_ns) = self.entries.get(&root).map(|e| e.event_ns) else {
                continue;
            };
            let settled = self.settled_at(root);
            // Judged at `ready`, not at the frontier: every message before `ready` is in and
            // none after it (see the operator's loop), so the outcome does not depend on how
            // the frontier moved.
            if now.is_some()
                && settled > ready
                && root_ns.saturating_add(shed::capped(self.config.max_path_ns)) > ready
            {
                // A child may still come: look again when it would have.
                self.judge_at(settled, root_id, root);
                continue;
            }
            self.pending_roots.remove(&(root_ns, root_id));
            let budget = self.config.try_both;
            let mut lost = Vec::new();
            let mut instances = self.enumerate(root, PROBABLY_FALSE, budget, &mut lost);
            if !self.condition_on_answer(root, &mut instances) {
                let mut wider_lost = Vec::new();
                let mut wider =
                    self.enumerate(root, UNLIKELY, budget.saturating_mul(2), &mut wider_lost);
                if self.condition_on_answer(root, &mut wider) {
                    instances = wider;
                    lost = wider_lost;
                }
            }
            let covered = (!lost.is_empty()).then(|| {
                instances
                    .iter()
                    .flat_map(|(m, _)| m.iter().map(|m| m.0))
                    .collect()
            });
            self.emit_instances(root_ns, instances, out);
            if let Some(covered) = covered {
                self.continue_cut(lost, covered, out);
            }
        }
    }

    /// Instances of the cut trees' rest ([`Paths::enumerate`]): each message whose most
    /// likely cause a cut instance held, without room for it, and that no instance of the
    /// root holds (`covered`), starts an instance of its own along the most likely links,
    /// with the cut instance's probability times its link's, and so on as they are cut in
    /// turn. A tree cut at [`MAX_MESSAGES`] is nearly always requests the linker chained
    /// together; this keeps every message of it in some instance, linked as the linker
    /// linked it (but to the cut), at the cost of one instance per cut branch: each message
    /// is in at most one of them, so the work is linear in the tree.
    fn continue_cut(
        &mut self,
        mut lost: Vec<(u64, f64)>,
        mut covered: crate::FastSet<u64>,
        out: &mut Vec<PathRecord>,
    ) {
        while let Some((c, prob)) = lost.pop() {
            if !covered.insert(c) {
                continue;
            }
            // Another root's cut tree may have reached it (their alternatives overlap).
            let Some(c_ns) = self
                .entries
                .get(&c)
                .filter(|e| !e.continued)
                .map(|e| e.event_ns)
            else {
                continue;
            };
            // Along the most likely links alone (no try-both), each message is in one tree.
            let instances = self.enumerate_from(c, prob, PROBABLY_FALSE, 0, &mut lost);
            for &(id, _) in instances.iter().flat_map(|(m, _)| m) {
                covered.insert(id);
                if let Some(e) = self.entries.get_mut(&id) {
                    e.continued = true;
                }
            }
            self.emit_instances(c_ns, instances, out);
        }
    }

    /// Counts the cut ones among a root's `instances`, builds them and aggregates them into
    /// their patterns, and writes them to `out`.
    fn emit_instances(
        &mut self,
        root_ns: Time,
        instances: Vec<Hypothesis>,
        out: &mut Vec<PathRecord>,
    ) {
        self.cut += instances
            .iter()
            .filter(|(m, _)| m.len() >= MAX_MESSAGES)
            .count() as u64;
        let mut hop_cache = FastMap::default();
        let built: Vec<_> = instances
            .into_iter()
            .filter_map(|(msgs, p)| self.build(&msgs, p, &mut hop_cache))
            .collect();
        // The root's likeliest instance (the first at equal probability).
        let likeliest = built
            .iter()
            .enumerate()
            .max_by(|a, b| {
                a.1.probability
                    .total_cmp(&b.1.probability)
                    .then(b.0.cmp(&a.0))
            })
            .map(|(i, _)| i);
        for (i, b) in built.into_iter().enumerate() {
            if let Some(id) = self.aggregate(root_ns, &b, likeliest == Some(i)) {
                out.push(PathRecord::Instance(PathInstance {
                    pattern: id,
                    probability: b.probability,
                    messages: b.messages,
                }));
            }
        }
    }

    /// Frees messages no unfinished root can reach any more.
    pub(super) fn expire(&mut self, now: Time) {
        let oldest_root = self.pending_roots.first().map(|r| r.0);
        let settled = now.saturating_sub(self.settle());
        while let Some(t) = self.entries.front().map(|e| e.event_ns) {
            if t >= settled || oldest_root.is_some_and(|r| t >= r) {
                break;
            }
            self.entries.pop_front();
        }
        // Links whose parent never came (its sender was not observed, or it was late).
        let mut dropped = 0;
        self.orphans.retain(|_, v| {
            let before = v.len();
            v.retain(|(t, _, _)| *t >= settled);
            dropped += (before - v.len()) as u64;
            !v.is_empty()
        });
        self.orphans_dropped += dropped;
        if now.saturating_sub(self.last_expiry) >= crate::ports::EXPIRY_EVERY_NS {
            self.ports.expire(now.saturating_sub(300_000_000_000));
            self.last_expiry = now;
        }
    }

    /// Reports the patterns at snapshot time `at`.
    pub(super) fn snapshot(&mut self, at: Time, last: bool, out: &mut Vec<PathRecord>) {
        let window = self.config.window_ns;
        let start = at.saturating_sub(window);
        // Naming adds to the table's bytes: the bound holds for what is reported too.
        self.name_all();
        if self.table_bytes > self.config.max_pattern_bytes {
            let cap = self.config.max_patterns.max(1);
            self.evict(cap, self.config.max_pattern_bytes / 4 * 3);
        }
        for (key, id, tree, shown, reported) in std::mem::take(&mut self.evicted) {
            if self.patterns.contains_key(&key) {
                // Back since: its new report supersedes the old one.
                continue;
            }
            retract(&id, &tree, shown, reported, (start, at), last, out);
        }
        if last && self.evictions > 0 {
            tracing::info!(
                "paths: {} patterns evicted in all (--max-patterns {}, --pattern-memory {:.1} MiB)",
                self.evictions,
                self.config.max_patterns,
                self.config.max_pattern_bytes as f64 / 1_048_576.0
            );
        }
        // In id order, so that output does not depend on hashing.
        let mut keys: Vec<(&str, u64)> = self.patterns.iter().map(|(k, a)| (a.id(), *k)).collect();
        keys.sort();
        let keys: Vec<u64> = keys.into_iter().map(|(_, k)| k).collect();
        let mut held = 0;
        let mut noise = Vec::new();
        for key in keys {
            let Some(agg) = self.patterns.get_mut(&key) else {
                continue;
            };
            let before = agg.buckets.len();
            while agg.buckets.front().is_some_and(|(s, _)| *s < start) {
                if let Some((_, old)) = agg.buckets.pop_front() {
                    self.table_bytes = self.table_bytes.saturating_sub(old.heap_bytes());
                }
            }
            let window_changed = agg.buckets.len() != before;
            if agg.buckets.is_empty() && agg.total.expected < self.config.min_expected && !last {
                noise.push(key);
                continue;
            }
            held += agg.heap_bytes();
            if !(agg.touched || window_changed || last) {
                continue;
            }
            let Some(name) = &agg.name else { continue };
            let mut w = Stats::new(agg.total.delay.len());
            for (_, b) in agg.buckets.iter().filter(|(s, _)| *s < at) {
                w.merge(b);
            }
            if w.count > 0 || agg.shown {
                out.push(PathRecord::Pattern(pattern_record(
                    &name.id,
                    &name.tree,
                    &w,
                    false,
                    (start, at),
                    last,
                )));
            }
            agg.shown = w.count > 0;
            if agg.touched || last {
                agg.reported = true;
                out.push(PathRecord::Pattern(pattern_record(
                    &name.id,
                    &name.tree,
                    &agg.total,
                    true,
                    (agg.first_ns, at),
                    last,
                )));
            }
            agg.touched = false;
        }
        for key in noise {
            let Some(agg) = self.patterns.remove(&key) else {
                continue;
            };
            self.table_bytes = self.table_bytes.saturating_sub(agg.heap_bytes());
            self.noise += 1;
            if let Some(name) = agg.name {
                let (shown, reported) = (agg.shown, agg.reported);
                retract(
                    &name.id,
                    &name.tree,
                    shown,
                    reported,
                    (start, at),
                    last,
                    out,
                );
            }
        }
        if held != self.table_bytes {
            tracing::warn!(
                "paths: the pattern table's size was counted as {} bytes, but it holds {held}",
                self.table_bytes
            );
            self.table_bytes = held;
        }
        tracing::debug!(
            "paths: {} patterns hold {} KiB",
            self.patterns.len(),
            held >> 10
        );
        tracing::debug!(
            "paths: {} links dropped, their parent gone",
            self.orphans_dropped
        );
        if last && self.cut > 0 {
            tracing::warn!(
                "paths: {} instances cut at {MAX_MESSAGES} messages (the linker chained requests \
                 together; the rest of each tree is in instances that start at the cut)",
                self.cut
            );
        }
        if last && self.noise > 0 {
            tracing::info!(
                "paths: {} patterns below --min-expected {} dropped once out of the window",
                self.noise,
                self.config.min_expected
            );
        }
        self.save(at, last);
    }
}
