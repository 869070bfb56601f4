//! Open and answered tasks per node, indexed for a scan: which tasks a departure can still
//! join (`NodeTasks`), and the arrivals that belong to them. State: the tasks of the
//! linker's window; freed with the arrivals they hold (see the module documentation).

use super::*;

/// An arrival that belongs to no task (yet), as a node's list holds it: what linking reads,
/// without the endpoints.
#[derive(Clone, Copy, Debug)]
pub(super) struct Arrived {
    pub(super) id: u64,
    pub(super) from: u64,
    pub(super) local_ns: Time,
    pub(super) event_ns: Time,
    pub(super) request: bool,
    pub(super) kind_from: u64,
    /// Its connection, as its receiver's logs key it.
    pub(super) conn: u64,
}

/// The tasks of one node that a scan may still find open: those not answered, and those
/// answered less than [`LinkConfig::tasks_margin_ns`] before the node's latest send taken in
/// (sends come in time order; a send is weighed up to a match window after it was taken in,
/// and the null scan looks back at most one and a half shifts).
///
/// A scan at `at` wants the tasks open then: asked at `at`, not answered before it. The open
/// ones are few (what the node has in progress); the answered ones are many on a busy node
/// (at 100,000 requests/s, the margin holds tens of thousands). So the answered are kept by
/// how long they lasted, in classes of powers of two (class `k`: `2^k` to `2^(k+1)` ns), each
/// by the request's receive time: a task of class `k` can be open at `at` only if it was
/// asked within `2^(k+1)` before it, so a scan visits, per class, at most about twice the
/// tasks of that class open at `at` (an interval stabbing query in `O(answer + classes)`).
/// Compacted whenever the latest send has moved on by [`NodeTasks::COMPACT_NS`].
#[derive(Debug, Default)]
pub(super) struct NodeTasks {
    /// Not answered yet, by the request's receive time.
    pub(super) open: VecDeque<TaskRef>,
    /// Answered, by duration class ([`duration_class`]), each by the request's receive time.
    pub(super) answered: Vec<VecDeque<TaskRef>>,
    /// Bit `k` set: class `k` of `answered` is not empty (a scan visits only those).
    pub(super) classes: u64,
    /// The latest send (the node's clock) a scan was made for.
    pub(super) last_send: Time,
    /// When the lists were last compacted (the latest send then).
    pub(super) compacted: Time,
}

/// The class of a task that lasted `d` ns: `floor(log2(d))` (0 for 0 and 1).
pub(super) fn duration_class(d: Time) -> usize {
    (Time::BITS - 1 - d.max(1).leading_zeros()) as usize
}

impl NodeTasks {
    const COMPACT_NS: Time = 50_000_000;

    /// Notes a send at `at` and drops the tasks no send from now on can find open.
    pub(super) fn advance(&mut self, at: Time, margin_ns: Time) {
        self.last_send = self.last_send.max(at);
        if self.last_send < self.compacted.saturating_add(Self::COMPACT_NS) {
            return;
        }
        self.compacted = self.last_send;
        let done = self.last_send.saturating_sub(margin_ns);
        for list in &mut self.answered {
            list.retain(|t| t.reply_ns.is_none_or(|r| r >= done));
        }
        self.recount();
    }

    /// Works out [`NodeTasks::classes`] again.
    pub(super) fn recount(&mut self) {
        self.classes = self
            .answered
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_empty())
            .fold(0, |bits, (k, _)| bits | 1 << k);
    }

    /// Takes in a task.
    pub(super) fn insert(&mut self, t: TaskRef) {
        let list = match t.reply_ns {
            None => &mut self.open,
            Some(r) => {
                let k = duration_class(r.saturating_sub(t.request_ns));
                if self.answered.len() <= k {
                    self.answered.resize_with(k + 1, VecDeque::new);
                }
                self.classes |= 1 << k;
                &mut self.answered[k]
            }
        };
        let i = partition_point_from_back(list, |x| x.request_ns <= t.request_ns);
        list.insert(i, t);
    }

    /// The task asked at `request_ns` (it was answered at `old`, if at all) was answered at
    /// `reply`.
    pub(super) fn answer(&mut self, request_ns: Time, task: u64, old: Option<Time>, reply: Time) {
        let list = match old {
            None => &mut self.open,
            Some(r) => match self
                .answered
                .get_mut(duration_class(r.saturating_sub(request_ns)))
            {
                Some(list) => list,
                None => return,
            },
        };
        let i = partition_point_from_back(list, |t| t.request_ns < request_ns);
        // Every copy (a request taken in twice has two), without allocating for the one.
        let mut moved: SmallVec<[TaskRef; 1]> = SmallVec::new();
        let mut j = i;
        while j < list.len() && list[j].request_ns == request_ns {
            if list[j].task == task {
                moved.extend(list.remove(j));
            } else {
                j += 1;
            }
        }
        if old.is_some() && list.is_empty() {
            self.recount();
        }
        for mut t in moved {
            t.reply_ns = Some(reply);
            self.insert(t);
        }
    }

    /// Drops the tasks whose request's event time is before `before`; whether any is left.
    pub(super) fn clean(&mut self, before: Time) -> bool {
        self.open.retain(|t| t.event_ns >= before);
        for list in &mut self.answered {
            list.retain(|t| t.event_ns >= before);
        }
        self.recount();
        !self.open.is_empty() || self.classes != 0
    }

    /// Calls `f` with every task asked at or before `at` and not answered before it (and
    /// some answered before it, for `f` to pass over): the open ones, and per duration
    /// class those asked recently enough to last until `at`.
    pub(super) fn open_at(&self, at: Time, mut f: impl FnMut(&TaskRef)) {
        let end = partition_point_from_back(&self.open, |t| t.request_ns <= at);
        self.open.range(..end).for_each(&mut f);
        let mut classes = self.classes;
        while classes != 0 {
            let k = classes.trailing_zeros();
            classes &= classes - 1;
            let list = &self.answered[k as usize];
            // Lasted less than 2^(k+1): open at `at` only if asked after `at - 2^(k+1)`.
            let since = at.saturating_sub(1u64.checked_shl(k + 1).unwrap_or(Time::MAX));
            let end = partition_point_from_back(list, |t| t.request_ns <= at);
            list.range(..end)
                .rev()
                .take_while(|t| t.request_ns >= since)
                .for_each(&mut f);
        }
    }
}

/// A task as its node's list of tasks holds it, by the request's receive time.
#[derive(Clone, Copy, Debug)]
pub(super) struct TaskRef {
    /// The request's receive time (the node's clock).
    pub(super) request_ns: Time,
    /// The request's id, the task's key.
    pub(super) task: u64,
    /// A copy of the task's reply time, kept current with it.
    pub(super) reply_ns: Option<Time>,
    /// The request's event time.
    pub(super) event_ns: Time,
}
