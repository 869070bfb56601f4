//! How far past a message `link` must look before it links it (the order slack), learned
//! from the system rather than fixed at [`LinkConfig::order_slack_ns`].
//!
//! A call is weighed against what comes after it: its own answer (a candidate task
//! answered before it cannot have made it), the replies of the tasks it may belong to (how
//! typical the time from the answer to the reply is) and the calls the node made in between
//! (the one-call look-ahead). All of these come within the task the call belongs to: they
//! lie at most that task's duration after the call, in the node's own clock. And a cause
//! whose event time carries its sender's residual clock error may come that much after the
//! node received it. So the look-ahead needed is the longest task duration plus the
//! largest clock error that the event times show, and both are measured as `link` takes
//! its inputs in:
//!
//! - **Task durations**: per node serving tasks, from the request's arrival to the reply
//!   (both in its clock) as each reply becomes known; twice the 99.9th percentile
//!   ([`ChildWaits`]' rule), and [`LinkConfig::order_slack_ns`] while any node serving tasks
//!   has had fewer than [`ChildWaits::MIN_CHILDREN`] of them, or none has replied yet.
//! - **Clock error**: per arrival received at a node whose own sends have been seen, how far
//!   its event time lies after its receive time as the node's sends align its clock (a
//!   message is received after it is sent, so a positive difference is the error of the
//!   event times): twice the 99.9th percentile over all arrivals.
//!
//! The slack is their sum, at most [`LinkConfig::order_slack_ns`]: a system whose requests
//! take milliseconds links them tens of milliseconds behind the frontier rather than half a
//! second, and what `link` holds (its children's reorder buffer, the tables kept for them)
//! shrinks with it. It is worked out again once every [`SWEEP_NS`] of event time, at
//! points of the inputs' merged order, so that what is linked does not depend on how the
//! frontier moved.
//!
//! - **State**: a delay histogram per node serving tasks and one for the clock error (the
//!   system's size, not the input's), and each node's latest clock alignment.
//! - **Cost**: a bucket increment per reply and per arrival; the quantiles once per sweep.

use super::*;

/// The learned order slack (see the module's documentation).
#[derive(Debug)]
pub(super) struct LookAhead {
    /// Task durations, per node serving tasks.
    tasks: ChildWaits,
    /// Clock errors of the arrivals, all under one key.
    clock: ChildWaits,
    /// Per node, its event time less its local time on its latest send.
    alignment: FastMap<u64, i64>,
    /// The slack as last worked out, and the event time it was worked out at.
    slack_ns: Time,
    at: Time,
    /// The most it may be ([`LinkConfig::order_slack_ns`]), and what it is until learned.
    max_ns: Time,
}

impl LookAhead {
    /// The clock error histogram's one key.
    const CLOCK: u64 = 0;

    pub(super) fn new(max_ns: Time) -> Self {
        LookAhead {
            tasks: ChildWaits::default(),
            clock: ChildWaits::default(),
            alignment: FastMap::default(),
            slack_ns: max_ns,
            at: 0,
            max_ns,
        }
    }

    /// The slack as learned, at most the configured slack.
    pub(super) fn slack_ns(&self) -> Time {
        self.slack_ns
    }

    /// `node` sent at `send` (its clock), at event time `event_ns`.
    pub(super) fn sent(&mut self, node: u64, send: Time, event_ns: Time) {
        self.alignment.insert(node, event_ns as i64 - send as i64);
    }

    /// A message sent at event time `event_ns` was received by `node` at `local_ns` (its
    /// clock).
    pub(super) fn received(&mut self, node: u64, local_ns: Time, event_ns: Time) {
        if let Some(&offset) = self.alignment.get(&node) {
            let error = event_ns as i64 - (local_ns as i64 + offset);
            self.clock.child(Self::CLOCK, error.max(0) as Time);
        }
    }

    /// `node` replied at `reply` to a request it received at `request` (both its clock), at
    /// event time `event_ns`; the slack is worked out again if a sweep's worth of event time
    /// has passed since it last was.
    pub(super) fn replied(&mut self, node: u64, request: Time, reply: Time, event_ns: Time) {
        self.tasks.child(node, reply.saturating_sub(request));
        if event_ns >= self.at.saturating_add(SWEEP_NS) {
            self.at = event_ns;
            let max_ns = self.max_ns;
            let tasks = self.tasks.longest(max_ns);
            let clock = self.clock.wait(Self::CLOCK, max_ns);
            let slack = tasks.saturating_add(clock).min(max_ns);
            if slack.abs_diff(self.slack_ns) > self.slack_ns / 4 {
                tracing::debug!(
                    "link: order slack {:.1} ms (tasks {:.1} ms, clock error {:.1} ms)",
                    slack as f64 / 1e6,
                    tasks as f64 / 1e6,
                    clock as f64 / 1e6
                );
            }
            self.slack_ns = slack;
        }
    }
}
