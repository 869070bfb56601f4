//! `Model`: answered calls held until their nesting ends (Project 5 §5.1 scores where a
//! nesting starts; where it ends tells as much).
//!
//! A call is decided when it is sent, by the time since each open task's latest arrival. A
//! task that computes for milliseconds after an answer before its next call looks, at that
//! call, no likelier than a task whose request has just come in and that calls the same
//! service at once; the two calls of one class are then decided by a coin. The task's reply
//! (or next call) tells them apart: it follows its own call's answer by its typical delay,
//! often tens of microseconds, where another task's answer is as far off as chance puts it.
//!
//! So an answered call is held, its decision not yet handed out, until its answer is used:
//! a departure of the node takes the answer as its parent (its task went on from it), or
//! the call's task replies, or `revise_ns` has passed since the answer. While held, a reply
//! of another task that the call could have been in may take it over, when the call's
//! answer as that task's latest arrival explains the reply better than the task's own latest
//! arrival does, by more than the call loses: the reply's learned delay from the answer,
//! less its delay from the task's latest arrival, plus the call's score in that task less
//! its score where it is (both as the call's joint decision weighed them), plus how typical
//! the task's set of calls is with the call and without. The call and its answer then move
//! together, and the call is final.
//!
//! State: per node, the held calls (in `Node::answered`), each freed when final as above:
//! at most the calls answered within `revise_ns`. Cost: per reply, one pass over the held
//! calls for each task it may close.

use super::*;

/// A held call that a reply's option would take over: (index into `Node::answered`, the
/// parent the call would have in the option's task).
pub(super) type Move = (usize, u64);

impl Model {
    /// Holds answered call `p` at `node` (its answer has joined its task): see the module
    /// documentation. A call in no task is final at once, and so is a client's (its tasks,
    /// opened by a job another task handed it, have no reply to take a call over).
    pub(super) fn hold_answered(
        &mut self,
        node: &mut Node,
        mut p: Provisional,
        answer: (Time, u64, u64, u8),
    ) {
        if p.task.is_none() || !node.served {
            self.finish(node, p);
            return;
        }
        p.answer = Some(answer);
        p.weighed = None;
        node.answered.push(p);
    }

    /// Makes final the held calls at `node` that `done` picks, oldest first.
    pub(super) fn release_answered(
        &mut self,
        node: &mut Node,
        done: impl Fn(&Provisional) -> bool,
    ) {
        if !node.answered.iter().any(&done) {
            return;
        }
        let (mut out, keep): (Vec<Provisional>, Vec<Provisional>) =
            std::mem::take(&mut node.answered)
                .into_iter()
                .partition(|p| done(p));
        node.answered = keep;
        out.sort_by_key(|p| p.at);
        for p in out {
            self.finish(node, p);
        }
    }

    /// Makes final the held calls whose answers a departure's parent `pid` is, and those in
    /// task `closed` (its reply).
    pub(super) fn release_used(&mut self, node: &mut Node, pid: Option<u64>, closed: Option<u64>) {
        self.release_answered(node, |p| {
            p.answer.is_some_and(|a| Some(a.1) == pid)
                || (closed.is_some() && p.task.map(|t| t.0) == closed)
        });
    }

    /// The held call that a reply of `class` sent at `at` best takes over if it closes the
    /// task of option `o` (task index, score, parent, its type, delay, size class), with what
    /// that adds to the option's score; `None` where no held call fits better than the task's
    /// own latest arrival. `key` is what the reply's set of calls is read under
    /// ([`Composition`]). Which task the reply closes is decided without it: a held call
    /// moves only into the task chosen on its own evidence.
    pub(super) fn nesting_move(
        &self,
        node: &Node,
        at: Time,
        class: u64,
        key: u64,
        o: &CallOption,
    ) -> Option<(f64, Move)> {
        let task = &node.tasks[o.0];
        let latest = at.saturating_sub(o.4.max(0) as Time);
        let own = self.delays.read((o.3, class, o.4));
        let composition = self.composition.read((key, task.signature));
        let mut best: Option<(f64, Move)> = None;
        // Held in the order their answers came: only those since the task's latest arrival.
        for (i, p) in node.answered.iter().enumerate().rev() {
            let (Some((tid, _)), Some(a)) = (p.task, p.answer) else {
                continue;
            };
            if a.0 <= latest {
                break;
            }
            if tid == task.id || a.0 > at || p.at < task.opened {
                continue;
            }
            // The call's score in this task, as its joint decision weighed it.
            let Some((_, pid, ..)) = task.latest(p.at) else {
                continue;
            };
            let Some(there) = p.decision.options.iter().find(|x| x.0 == Some(pid)) else {
                continue;
            };
            let Some(here) = p.decision.chosen.map(|c| p.decision.options[c].1) else {
                continue;
            };
            let with = task.signature.wrapping_add(signature_of(p.class));
            let gain = self.delays.read((a.2, class, delay(a.0, at))) - own + there.1 - here
                + self.composition.read((key, with))
                - composition;
            if gain > 0.0 && best.is_none_or(|b| gain > b.0) {
                best = Some((gain, (i, pid)));
            }
        }
        best
    }

    /// Option `o` of a reply sent at `at`, its task taking over held call `m`: the call's
    /// answer is its parent, `gain` added to its score.
    pub(super) fn moved_option(node: &Node, at: Time, o: &mut CallOption, gain: f64, m: Move) {
        let a = node.answered[m.0].answer.unwrap_or_default();
        o.1 += gain;
        o.2 = a.1;
        o.3 = a.2;
        o.4 = delay(a.0, at);
        o.5 = a.3;
    }

    /// Moves held call `m` (with its answer) into the task at index `ti`, and makes it
    /// final.
    pub(super) fn take_over(&mut self, node: &mut Node, ti: usize, (i, pid): Move) {
        let mut p = node.answered.remove(i);
        let (Some((from, old)), Some(a)) = (p.task, p.answer) else {
            self.finish(node, p);
            return;
        };
        unassign(node, p.id, from, old, p.class);
        if let Some(t) = node.tasks.iter_mut().find(|t| t.id == from) {
            t.arrivals.retain(|x| x.1 != a.1);
        }
        let task = &mut node.tasks[ti];
        add_arrival(task, a);
        task.kids.push((pid, p.class));
        task.signature = task.signature.wrapping_add(signature_of(p.class));
        let tid = task.id;
        for r in node.recent.iter_mut().filter(|r| r.1 == a.1) {
            r.4 = tid;
        }
        p.task = Some((tid, pid));
        p.decision.chosen = p.decision.options.iter().position(|x| x.0 == Some(pid));
        self.tally.nesting_moves += 1;
        self.finish(node, p);
    }
}
