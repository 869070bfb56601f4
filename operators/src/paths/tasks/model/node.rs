//! Small functions over one node's tables: tasks inserted, calls assigned and unassigned,
//! arrivals remembered. No state of their own.

use super::*;

/// The log-likelihood of a departure's delay summed over its options (not only the one
/// taken): what a model of the data is judged by. The score of the option taken alone
/// rewards a model for making its choices look certain (a strong order prior) whether or
/// not they are right.
pub(super) fn marginal(d: &Decision) -> f64 {
    let max = d
        .options
        .iter()
        .map(|o| o.1)
        .fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    max + d
        .options
        .iter()
        .map(|o| (o.1 - max).exp())
        .sum::<f64>()
        .ln()
}

/// Inserts `task` among `node`'s tasks in order of arrival (arrivals come nearly in order:
/// from the back).
pub(super) fn insert_task(node: &mut Node, task: Task) {
    reweigh_from(node, task.opened);
    let pos = node
        .tasks
        .iter()
        .rposition(|t| t.opened <= task.opened)
        .map_or(0, |p| p + 1);
    node.tasks.insert(pos, task);
}

/// Forgets the options weighed for `node`'s provisional calls sent at or after `t`: a task
/// opened, or an arrival came, at or before their send (a tie, or an answer paired late),
/// and they have an option they were not weighed with.
pub(super) fn reweigh_from(node: &mut Node, t: Time) {
    for set in node.provisional.values_mut() {
        for p in set.iter_mut().filter(|p| p.at >= t) {
            p.weighed = None;
        }
    }
}

/// `node`'s tasks as (receive time, id), in their order: what finding a task again by
/// halving reads (a task is some hundreds of bytes; these are sixteen).
pub(super) fn task_keys(node: &Node) -> SmallVec<[(Time, u64); 64]> {
    node.tasks.iter().map(|t| (t.opened, t.id)).collect()
}

/// The index of task `id`, received at `opened`, among the tasks `keys`
/// ([`task_keys`]) lists, if it is still open.
pub(super) fn task_index(keys: &[(Time, u64)], id: u64, opened: Time) -> Option<usize> {
    let start = keys.partition_point(|k| k.0 < opened);
    keys[start..]
        .iter()
        .take_while(|k| k.0 == opened)
        .position(|k| k.1 == id)
        .map(|k| start + k)
}

/// The time before a departure (`id`, at `at`) whose arrivals stand for chance (the null
/// of [`Coincidence`]): up to two cross windows back, by the id; `None` where `node`'s
/// recent arrivals do not reach back over the window before it.
pub(super) fn null_time(node: &Node, at: Time, id: u64) -> Option<Time> {
    let shifted = at.saturating_sub(CROSS_WINDOW_NS + id % CROSS_WINDOW_NS);
    let covered = node.recent.len() < CROSS_RECENT
        || node
            .recent
            .front()
            .is_some_and(|r| r.0.saturating_add(CROSS_WINDOW_NS) <= shifted);
    covered.then_some(shifted)
}

/// The at most [`CALL_SCAN`] latest of `node`'s recent arrivals at or before `until` and
/// within [`CROSS_WINDOW_NS`] of it, newest first.
pub(super) fn recent_before(
    node: &Node,
    until: Time,
) -> SmallVec<[&(Time, u64, u64, u8, u64, Option<u64>); CALL_SCAN]> {
    node.recent
        .iter()
        .rev()
        .filter(|r| r.0 <= until && until - r.0 <= CROSS_WINDOW_NS)
        .take(CALL_SCAN)
        .collect()
}

/// Notes an arrival among `node`'s recent ones.
pub(super) fn remember(node: &mut Node, a: (Time, u64, u64, u8, u64, Option<u64>)) {
    node.recent.push_back(a);
    let newest = node.recent.iter().map(|r| r.0).max().unwrap_or(a.0);
    while node.recent.len() > CROSS_RECENT
        || node
            .recent
            .front()
            .is_some_and(|r| r.0.saturating_add(RECENT_NS) < newest)
    {
        node.recent.pop_front();
    }
}

/// Adds arrival `a` (receive time, id, type, size class) to `task`, in time order (after
/// those at the same time), so that the latest before a time is found by halving.
pub(super) fn add_arrival(task: &mut Task, a: (Time, u64, u64, u8)) {
    let i = task.arrivals.partition_point(|x| x.0 <= a.0);
    task.arrivals.insert(i, a);
}

/// Puts call `id` of `class`, sent at `at`, into the task at index `ti` with parent `pid`.
pub(super) fn assign_call(node: &mut Node, id: u64, ti: usize, pid: u64, class: u64, at: Time) {
    let task = &mut node.tasks[ti];
    task.kids.push((pid, class));
    task.signature = task.signature.wrapping_add(signature_of(class));
    task.outstanding.push(id);
    let tid = task.id;
    node.calls.insert(id, (tid, at));
}

/// Takes call `id` of `class` out of task `tid`, where it had parent `pid`.
pub(super) fn unassign(node: &mut Node, id: u64, tid: u64, pid: u64, class: u64) {
    if let Some(task) = node.tasks.iter_mut().find(|t| t.id == tid) {
        task.kids.remove((pid, class));
        task.signature = task.signature.wrapping_sub(signature_of(class));
        task.outstanding.retain(|c| *c != id);
    }
    node.calls.remove(&id);
}
