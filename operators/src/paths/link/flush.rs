//! `Linker`: match windows flushed (the joint assignment where candidates conflict), the scan
//! of a node's arrivals, and task bookkeeping. State: a node's match window, freed when
//! flushed.

use super::*;

/// How many times `max_candidates` of an untraced node's arrivals a scan looks through for
/// the request on the answer's own connection.
const ONE_SIDED_LOOK: usize = 8;

impl Linker {
    /// Links a send on its own, at once: weighs it and takes its most likely cause.
    pub(super) fn link_now(&mut self, p: &Prep, m: Box<Message>) -> Linked {
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
    pub(super) fn matured(&self, kind: u64, t: Time) -> Option<&CausalDensity> {
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
    pub(super) fn flush(&mut self, sends: WindowSends, out: &mut Vec<Linked>) {
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
                    let x = self.horizon_ns;
                    let lo = answers.partition_point(|a| a.0.saturating_add(x) < p.at);
                    let hi = answers.partition_point(|a| a.0 <= p.at);
                    // The weights so far, back to before they were normalised.
                    let scale = w.total;
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
    pub(super) fn scan(&mut self, scan: &Scan, candidates: &mut Vec<Candidate>) {
        let Scan {
            at,
            id,
            from,
            child_to,
            only_from,
            callee,
            nested_until,
            calls_back,
            conn,
            before_event,
        } = *scan;
        let x = self.horizon_ns;
        let keep = self.config.max_candidates.max(1);
        let start = candidates.len();
        if let Some(only) = only_from {
            // The sender side alone was seen: the messages the receiver sent it shortly
            // before (A→B→A), most recent first. The latest on the same connection, if
            // any, is the request this answers (an untraced server answers where it was
            // asked), and the only candidate; else any (a push, a queue's delivery).
            let Some(list) = self.one_sided.get(&from) else {
                return;
            };
            let end = partition_point_from_back(list, |a| a.local_ns <= at);
            for (looked, a) in list.range(..end).rev().enumerate() {
                if at - a.local_ns > x || looked >= ONE_SIDED_LOOK * keep {
                    break;
                }
                if a.from != only || a.id == id {
                    continue;
                }
                let w = penalty(&self.caused, a.id, before_event);
                if a.conn == conn {
                    candidates.truncate(start);
                    candidates.push(Candidate::arrived(a, at, from, child_to, w));
                    return;
                }
                if candidates.len() - start < keep {
                    candidates.push(Candidate::arrived(a, at, from, child_to, w));
                }
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
    pub(super) fn set_task(
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

/// Inserts an arrival into a node's list, by receive time, after those at the same time.
/// Mostly in order (appended); else found by halving: after a clock stepped back, every
/// arrival goes before all the list holds, and a scan from the back made each insert cost
/// the list (the degenerate corpus's time-jumps case).
pub(super) fn insert_by_local(list: &mut VecDeque<Arrived>, a: Arrived) {
    if list.back().is_none_or(|b| b.local_ns <= a.local_ns) {
        list.push_back(a);
        return;
    }
    let i = list.partition_point(|x| x.local_ns <= a.local_ns);
    list.insert(i, a);
}

/// Adds an arrival to a task's, in receive-time order.
pub(super) fn add_arrival(arrivals: &mut TaskArrivals, a: (Time, u64, u64, bool)) {
    if arrivals.iter().any(|x| x.1 == a.1) {
        return;
    }
    let i = arrivals.partition_point(|x| x.0 <= a.0);
    arrivals.insert(i, a);
}

/// The sends of one node's match window, in time order.
pub(super) type WindowSends = Vec<(Prep, Box<Message>)>;

/// The match windows still open: per node, the sends it made in its current window
/// ([`LinkConfig::match_window_ns`]), windows aligned to multiples of the width so that where
/// they fall does not depend on the order nodes come in. State: the sends of the open
/// windows, at most a window's worth per node; a window is closed, and its sends decided and
/// freed, as soon as the frontier passes its end.
#[derive(Default)]
pub(super) struct MatchWindows {
    /// Per node: its window's start and sends, in time order.
    pub(super) open: FastMap<u64, (Time, WindowSends)>,
    /// (end, node) of every open window.
    pub(super) ends: BTreeSet<(Time, u64)>,
    /// How many open windows start at each time, for the capability.
    pub(super) starts: BTreeMap<Time, usize>,
}

impl MatchWindows {
    pub(super) fn push(&mut self, p: Prep, m: Box<Message>, width: Time) {
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
    pub(super) fn next_close(&self) -> Option<Time> {
        self.ends.first().map(|e| e.0)
    }

    /// Where the first open window starts: every send still in a window is at or after it.
    pub(super) fn first_start(&self) -> Option<Time> {
        self.starts.first_key_value().map(|e| *e.0)
    }

    /// Closes the first window to end: its sends.
    pub(super) fn close(&mut self) -> Option<WindowSends> {
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
