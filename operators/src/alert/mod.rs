//! Alerts, and the `alert` operator that raises them from rules over the path patterns.
//!
//! An [`Alert`] is something a user should look at now; `correlate` raises them for TCP
//! problems shared by many connections, and the `alert` operator for the rules a user gives
//! on the command line ([`AlertRule`], `--alert`):
//!
//! | rule | fires when |
//! |---|---|
//! | `new-pattern` | a path pattern appears that was not seen in the first window (the warm-up) nor since |
//! | `new-pattern >= 5` | the same, once it has at least 5 instances in the window (rare, improbable patterns stay quiet) |
//! | `pattern.p99 > 200ms` | a pattern's end-to-end p99 over the sliding window exceeds 200 ms (also `mean`, `p50`, `p90`; `count`, `expected` take plain numbers) |
//! | `node.delay.mean > 2x baseline` | a node's delay is more than twice its own baseline: the moving average of its earlier windows (also `p50`, `p90`, `p99`) |
//! | `hop.network.p99 > 5ms` | the one-way network latency of a hop `src -> dst:port` (also `mean`, `p50`, `p90`) |
//!
//! Comparisons are `>`, `>=`, `<`, `<=`. A `critical:` prefix makes the alert critical
//! (default `warning`). Rules are edge-triggered: an alert with `state: firing` when the
//! condition starts to hold for a pattern, node or hop, and one with `state: resolved` when it
//! stops (or the subject leaves the window); nothing while it persists.
//!
//! A node's mean is the count-weighted mean over the hops it sends on in every pattern; its
//! quantiles are the largest of those hops' quantiles (quantiles of different histograms do
//! not combine; the largest is the conservative choice). Hops likewise.
//!
//! # The operator
//! - **Input**: windowed [`PathPattern`] updates, as `paths` emits them at each snapshot (only
//!   the patterns that changed; `count: 0` retracts); cumulative reports are ignored.
//! - **Output**: [`Alert`]s, at the time of the snapshot they judge; each refers (`time_ns`)
//!   to the end of that snapshot's window. A snapshot is judged once all its reports are in:
//!   `paths` sends each snapshot whole, at one time, possibly several snapshots at once.
//! - **Exchange**: everything to worker 0 (one record per changed pattern per snapshot).
//! - **State**: the latest windowed report of every pattern in the window (bounded by
//!   `--max-patterns`; a retraction frees it); per rule and subject, whether it fires and its
//!   baseline; the ids of the patterns seen. A subject absent for ten windows is forgotten
//!   (a pattern that comes back after that is new again), so state is bounded by what the
//!   window holds, not by the length of the run. Updates wait in a buffer until the frontier
//!   passes their time.
//! - **Cost**: per snapshot, one pass over the patterns in the window per rule.
//!
//! ```
//! use causeway_operators::alert::AlertRule;
//! let rule: AlertRule = "critical: pattern.p99 > 200ms".parse().unwrap();
//! assert_eq!(rule.to_string(), "critical: pattern.p99 > 200ms");
//! assert!("node.delay.mean > 2x baseline".parse::<AlertRule>().is_ok());
//! assert!("pattern.p99 >> 2".parse::<AlertRule>().is_err());
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use causeway_sources::Time;
use serde::{Deserialize, Serialize};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use crate::dist::Summary;
use crate::paths::build::PathPattern;
use crate::tcp::correlate::Correlation;
use crate::{FastMap, PatternNode};

mod judge;
mod rules;
#[cfg(test)]
mod tests;

use judge::Judge;

pub use rules::{AlertRule, RuleError};

/// An alert: something a user should look at now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// What raised it (`correlate`, `rule`).
    pub source: String,
    /// `warning` or `critical`.
    pub severity: String,
    /// One line for people.
    pub message: String,
    /// Event time it refers to, ns.
    pub time_ns: Time,
    /// The correlation behind it.
    pub correlation: Option<Correlation>,
    /// The rule behind it.
    pub rule: Option<RuleFinding>,
}

/// What a rule found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleFinding {
    /// The rule as given.
    pub rule: String,
    /// `firing` or `resolved`.
    pub state: String,
    /// `pattern`, `node` or `hop`.
    pub scope: String,
    /// The pattern id, node name or hop (`src -> dst:port`).
    pub subject: String,
    /// For a pattern: its shape, `src -> dst:port` of the root.
    pub pattern: Option<String>,
    /// The value that crossed (ms for latencies); `None` for `new-pattern` and when the
    /// subject left the window.
    pub value: Option<f64>,
    /// The threshold it was compared with (for a baseline rule: factor × baseline).
    pub threshold: Option<f64>,
    /// The baseline, for a baseline rule.
    pub baseline: Option<f64>,
}

/// How the `alert` operator judges.
#[derive(Clone, Debug, Default)]
pub struct AlertConfig {
    /// The rules.
    pub rules: Vec<AlertRule>,
    /// The patterns' sliding window, ns: `new-pattern` learns the patterns of the first
    /// window; subjects absent for ten windows are forgotten.
    pub window_ns: Time,
}

/// Extension trait: alerts from rules over path patterns.
pub trait AlertRules<'scope> {
    /// Judges every snapshot of the patterns by `config`'s rules; see the module
    /// documentation.
    fn alert_rules(self, config: AlertConfig) -> Stream<'scope, Time, Vec<Alert>>;
}

impl<'scope> AlertRules<'scope> for Stream<'scope, Time, Vec<PathPattern>> {
    fn alert_rules(self, config: AlertConfig) -> Stream<'scope, Time, Vec<Alert>> {
        self.unary_frontier(
            Exchange::new(|_: &PathPattern| 0),
            "alert",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut judge = Judge::new(config);
                let mut pending: BTreeMap<Time, Vec<PathPattern>> = BTreeMap::new();
                move |(input, frontier), output| {
                    input.for_each_stamp(|time, data| {
                        let Some(&t) = time.least() else { return };
                        let slot = pending.entry(t).or_default();
                        for batch in data {
                            slot.append(batch);
                        }
                    });
                    let now = frontier.frontier().iter().next().copied();
                    while let Some(entry) = pending.first_entry() {
                        let t = *entry.key();
                        if now.is_some_and(|n| t >= n) {
                            break;
                        }
                        let Some(cap) = held.as_ref() else { break };
                        // `paths` may send several snapshots at one time: judge each in turn.
                        let mut updates = entry.remove();
                        updates.retain(|p| !p.cumulative);
                        updates.sort_by_key(|p| p.window.1);
                        let mut alerts = Vec::new();
                        let mut updates = updates.into_iter().peekable();
                        while let Some(first) = updates.next() {
                            let end = first.window.1;
                            judge.apply(first);
                            while let Some(p) = updates.next_if(|p| p.window.1 == end) {
                                judge.apply(p);
                            }
                            judge.judge(t, &mut alerts);
                        }
                        if !alerts.is_empty() {
                            let cap = cap.delayed(&t);
                            output.session(&cap).give_container(&mut alerts);
                        }
                    }
                    crate::follow_frontier_one(&mut held, now);
                }
            },
        )
    }
}
