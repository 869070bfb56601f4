//! `Paths`: the operator's state per worker, taking linked messages in and deciding when a
//! root is settled (the learned child waits).

use super::*;

/// How far ahead of the root being judged [`Paths::prefetch_roots`] fetches a root's entry,
/// and its message and children's entries.
pub(super) const PREFETCH_FAR: usize = 8;
pub(super) const PREFETCH_NEAR: usize = 4;

/// The state of the `paths` operator.
pub(super) struct Paths {
    pub(super) config: PathsConfig,
    pub(super) entries: Slots,
    /// Links to parents not inserted yet: parent id to (child's event time, child's slot,
    /// probability).
    pub(super) orphans: FastMap<u64, Vec<(Time, u64, Prob)>>,
    /// Roots by the time to judge them, then id, with their slots, in order. A root is
    /// judged its receiver's learned wait after it came ([`Paths::wait_after`]: 1 ms for a
    /// client, up to `max_delay_ns` for a server), so they come far out of order: a sorted
    /// deque cost a move of every later root per insert (a fifth of the run at 200 requests
    /// in flight).
    pub(super) pending: BTreeSet<(Time, u64, u64)>,
    /// Roots not judged yet by event time, then id.
    pub(super) pending_roots: BTreeSet<(Time, u64)>,
    pub(super) ports: Ports,
    /// Patterns by the hash of their shape.
    pub(super) patterns: FastMap<u64, Agg>,
    /// Node labels in patterns.
    pub(super) labels: RefCell<Labels>,
    /// Evicted patterns that were reported: retracted at the next snapshot.
    pub(super) evicted: Vec<(u64, String, PatternNode, bool, bool)>,
    /// Patterns evicted so far.
    pub(super) evictions: u64,
    /// Patterns dropped so far as below `min_expected` once out of the window.
    pub(super) noise: u64,
    /// Bytes the pattern table holds ([`Agg::heap_bytes`] summed).
    pub(super) table_bytes: usize,
    pub(super) next_snapshot: Option<Time>,
    pub(super) last_expiry: Time,
    /// Links dropped because their parent never came or was already freed.
    pub(super) orphans_dropped: u64,
    /// Instances cut at [`MAX_MESSAGES`] (what is past the cut starts instances of its own).
    pub(super) cut: u64,
    /// Checkpoint settings and when it was last saved.
    pub(super) checkpointer: Option<(CheckpointConfig, Instant)>,
    /// Restored patterns not seen again yet: id to their stand-in key.
    pub(super) restored: FastMap<String, u64>,
    /// Where the restored run resumed, and the newest message inserted since.
    pub(super) resumed_ns: Time,
    pub(super) newest_ns: Time,
    /// Scratch of [`Paths::settled_at`]: the messages seen, and those to visit.
    pub(super) reach_scratch: (Vec<u64>, Vec<u64>),
    /// How long a message into each node may still get a child, learned.
    pub(super) waits: ChildWaits,
}

impl Paths {
    /// Schedules the root `(root_id, slot)` to be judged at `ready`.
    pub(super) fn judge_at(&mut self, ready: Time, root_id: u64, slot: u64) {
        self.pending.insert((ready, root_id, slot));
    }

    /// How long `paths` keeps a message after its event time, unless an unfinished root
    /// before it holds it: twice the longest wait for children learned of any receiver (at
    /// most `max_delay_ns`; `max_delay_ns` while a receiver has too little evidence), and the
    /// lateness. Twice, so that a child later than the wait learned so far still finds its
    /// parent and is counted: a wait can grow to twice itself at a time, as `link`'s horizon
    /// does. Under memory pressure at most the cap (`shed`).
    pub(super) fn settle(&self) -> Time {
        shed::capped(self.unshed_settle())
    }

    /// How long after a message into `node` a child may still come: what `node`'s children
    /// have taken ([`ChildWaits`], at most `max_delay_ns`) and the lateness; under memory
    /// pressure at most the cap.
    pub(super) fn wait_after(&self, node: u64) -> Time {
        shed::capped(
            self.waits
                .wait(node, self.config.max_delay_ns)
                .saturating_add(self.config.lateness_ns),
        )
    }

    /// [`Self::settle`] without the cap.
    pub(super) fn unshed_settle(&self) -> Time {
        self.waits
            .keep(self.config.max_delay_ns)
            .saturating_add(self.config.lateness_ns)
    }

    /// The interned label of `node` when it is not a client: its name, or its role.
    pub(super) fn name_label(&self, node: &str) -> u32 {
        let name = if self.config.aggregate_roles {
            self.config.names.role(node)
        } else {
            node
        };
        self.labels.borrow_mut().intern(name)
    }

    pub(super) fn insert(&mut self, l: Linked) {
        let t = l.message.event_ns;
        self.newest_ns = self.newest_ns.max(t);
        let keys = l.keys;
        self.ports.observe(
            &l.message.src_endpoint,
            &l.message.dst_endpoint,
            keys.0,
            keys.1,
            t,
        );
        let wait_key = keys.1;
        let slot = self.entries.base + self.entries.len() as u64;
        self.waits.arrival(wait_key);
        for &(p, q) in &l.parents {
            match self
                .entries
                .slot(p)
                .and_then(|ps| self.entries.get_mut(&ps))
            {
                Some(e) => {
                    e.children.push((slot, q));
                    if l.best == Some(p) {
                        self.waits.child(e.wait_key, t.saturating_sub(e.event_ns));
                    }
                }
                // The parent's event time (its sender's clock, coarsely aligned) may fall
                // after the child's: keep the link until the parent comes.
                None => self.orphans.entry(p).or_default().push((t, slot, q)),
            }
        }
        let adopted: SmallVec<[(u64, Prob); 2]> = (!self.orphans.is_empty())
            .then(|| self.orphans.remove(&l.id))
            .flatten()
            .map(|v| v.into_iter().map(|(_, c, q)| (c, q)).collect())
            .unwrap_or_default();
        let s = f64::from(l.spontaneous) / f64::from(ONE);
        if decide(s, l.best.is_none()) != Decision::False {
            // A receiver whose wait is not learned yet (a run's first messages) would hold
            // the root, and every message after it, for the maximum: it is looked at once
            // the lateness has passed, and put off then only as far as the waits learned by
            // that time say ([`Paths::settled_at`]).
            let look = if self.waits.knows(wait_key) {
                self.wait_after(wait_key)
            } else {
                shed::capped(self.config.lateness_ns)
            };
            self.judge_at(t.saturating_add(look), l.id, slot);
            self.pending_roots.insert((t, l.id));
        }
        self.entries.push(Entry {
            id: l.id,
            event_ns: t,
            m: l.message,
            children: adopted,
            best: l.best,
            spontaneous: l.spontaneous,
            typical: l.typical,
            continued: false,
            keys,
            wait_key,
        });
        self.next_snapshot
            .get_or_insert((t / self.config.every_ns + 1) * self.config.every_ns);
    }

    /// When no child can come any more to the messages any instance from `root` may hold:
    /// the latest of their event times plus [`Self::wait_after`] their receivers. The
    /// messages are those reachable by links that are not probably false (a superset of
    /// every instance, found without enumerating them; at most `4 * MAX_MESSAGES` are
    /// visited).
    pub(super) fn settled_at(&mut self, root: u64) -> Time {
        let Some(r) = self.entries.get(&root) else {
            return 0;
        };
        let mut newest = r.event_ns.saturating_add(self.wait_after(r.wait_key));
        let (mut seen, mut stack) = std::mem::take(&mut self.reach_scratch);
        seen.clear();
        stack.clear();
        seen.push(root);
        stack.push(root);
        while let Some(slot) = stack.pop() {
            let Some(e) = self.entries.get(&slot) else {
                continue;
            };
            for &(c, q) in &e.children {
                let Some(ce) = self.entries.get(&c) else {
                    continue;
                };
                let q = f64::from(q) / f64::from(ONE);
                if decide(q, ce.best == Some(e.id)) == Decision::False
                    || seen.contains(&c)
                    || seen.len() >= 4 * MAX_MESSAGES
                {
                    continue;
                }
                seen.push(c);
                newest = newest.max(ce.event_ns.saturating_add(self.wait_after(ce.wait_key)));
                stack.push(c);
            }
        }
        self.reach_scratch = (seen, stack);
        newest
    }
}
