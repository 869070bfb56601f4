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

/// A rule of `--alert`; see the module documentation for the grammar.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertRule {
    critical: bool,
    kind: RuleKind,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum RuleKind {
    /// A pattern not seen before, once it has at least `min` instances in the window.
    NewPattern { min: u64 },
    Threshold {
        metric: Metric,
        op: Op,
        limit: Limit,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Scope {
    Pattern,
    Node,
    Hop,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stat {
    Count,
    Expected,
    Mean,
    P50,
    P90,
    P99,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Metric {
    scope: Scope,
    stat: Stat,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Gt,
    Ge,
    Lt,
    Le,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Limit {
    /// ms for latencies, plain for counts.
    Value(f64),
    /// Times the subject's baseline.
    Baseline(f64),
}

impl Op {
    fn holds(self, value: f64, limit: f64) -> bool {
        match self {
            Op::Gt => value > limit,
            Op::Ge => value >= limit,
            Op::Lt => value < limit,
            Op::Le => value <= limit,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Lt => "<",
            Op::Le => "<=",
        }
    }
}

impl Stat {
    fn name(self) -> &'static str {
        match self {
            Stat::Count => "count",
            Stat::Expected => "expected",
            Stat::Mean => "mean",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P99 => "p99",
        }
    }

    fn of(self, s: &Summary) -> f64 {
        match self {
            Stat::Mean => s.mean,
            Stat::P50 => s.p50,
            Stat::P90 => s.p90,
            Stat::P99 => s.p99,
            Stat::Count | Stat::Expected => f64::NAN,
        }
    }

    fn is_latency(self) -> bool {
        !matches!(self, Stat::Count | Stat::Expected)
    }
}

impl Metric {
    fn name(self) -> String {
        match self.scope {
            Scope::Pattern => format!("pattern.{}", self.stat.name()),
            Scope::Node => format!("node.delay.{}", self.stat.name()),
            Scope::Hop => format!("hop.network.{}", self.stat.name()),
        }
    }
}

/// Why a rule could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("alert rule `{rule}`: {why}")]
pub struct RuleError {
    rule: String,
    why: String,
}

const EXPECTED_FORM: &str = "expected `new-pattern` or METRIC OP LIMIT, e.g. `pattern.p99 > 200ms`, \
     `node.delay.mean > 2x baseline`, `hop.network.p99 > 5ms`, `pattern.count < 10`";

impl FromStr for AlertRule {
    type Err = RuleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| RuleError {
            rule: text.to_owned(),
            why: why.to_owned(),
        };
        let mut rest = text.trim();
        let mut critical = false;
        for (prefix, is_critical) in [("critical:", true), ("warning:", false)] {
            if let Some(r) = rest.strip_prefix(prefix) {
                critical = is_critical;
                rest = r.trim();
            }
        }
        if let Some(limit) = rest.strip_prefix("new-pattern") {
            let limit = limit.trim();
            let min = if limit.is_empty() {
                Some(1)
            } else if let Some(n) = limit.strip_prefix(">=") {
                n.trim().parse::<u64>().ok()
            } else if let Some(n) = limit.strip_prefix('>') {
                n.trim().parse::<u64>().ok().map(|n| n + 1)
            } else {
                None
            };
            let Some(min) = min else {
                return Err(err(
                    "expected `new-pattern` or `new-pattern >= N` (N instances in the window)",
                ));
            };
            return Ok(AlertRule {
                critical,
                kind: RuleKind::NewPattern { min: min.max(1) },
            });
        }
        let ops = [(">=", Op::Ge), ("<=", Op::Le), (">", Op::Gt), ("<", Op::Lt)];
        let Some((at, op_text, op)) = ops
            .iter()
            .filter_map(|&(t, op)| rest.find(t).map(|i| (i, t, op)))
            .min_by_key(|&(i, t, _)| (i, std::cmp::Reverse(t.len())))
        else {
            return Err(err(EXPECTED_FORM));
        };
        let metric_text = rest[..at].trim();
        let limit_text = rest[at + op_text.len()..].trim();
        let metric = parse_metric(metric_text).ok_or_else(|| {
            err(&format!(
                "unknown metric `{metric_text}`: pattern.{{count,expected,mean,p50,p90,p99}}, \
                 node.delay.{{mean,p50,p90,p99}} or hop.network.{{mean,p50,p90,p99}}"
            ))
        })?;
        let limit = parse_limit(limit_text, metric.stat.is_latency()).map_err(|why| err(&why))?;
        Ok(AlertRule {
            critical,
            kind: RuleKind::Threshold { metric, op, limit },
        })
    }
}

fn parse_metric(text: &str) -> Option<Metric> {
    let stat = |s: &str, counts: bool| match s {
        "count" if counts => Some(Stat::Count),
        "expected" if counts => Some(Stat::Expected),
        "mean" => Some(Stat::Mean),
        "p50" => Some(Stat::P50),
        "p90" => Some(Stat::P90),
        "p99" => Some(Stat::P99),
        _ => None,
    };
    let parts: Vec<&str> = text.split('.').collect();
    match parts.as_slice() {
        ["pattern", s] => Some(Metric {
            scope: Scope::Pattern,
            stat: stat(s, true)?,
        }),
        ["node", "delay", s] => Some(Metric {
            scope: Scope::Node,
            stat: stat(s, false)?,
        }),
        ["hop", "network", s] => Some(Metric {
            scope: Scope::Hop,
            stat: stat(s, false)?,
        }),
        _ => None,
    }
}

fn parse_limit(text: &str, latency: bool) -> Result<Limit, String> {
    let compact: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(factor) = compact.strip_suffix("baseline") {
        let factor = factor.trim().trim_end_matches(['x', '×', '*']).trim();
        return match factor.parse::<f64>() {
            Ok(f) if f.is_finite() && f > 0.0 => Ok(Limit::Baseline(f)),
            _ => Err(format!(
                "`{text}`: expected a factor before `baseline`, e.g. `2x baseline`"
            )),
        };
    }
    if latency {
        parse_ms(&compact).map(Limit::Value).ok_or_else(|| {
            format!("`{text}`: expected a duration (e.g. 200ms, 1.5s, 300us) or `Nx baseline`")
        })
    } else {
        match compact.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Limit::Value(v)),
            _ => Err(format!("`{text}`: expected a number or `Nx baseline`")),
        }
    }
}

/// A duration such as `200ms`, `1.5s`, `300us`, in ms.
fn parse_ms(text: &str) -> Option<f64> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match unit.trim() {
        "ns" => 1e-6,
        "us" | "µs" => 1e-3,
        "ms" => 1.0,
        "s" => 1e3,
        "m" | "min" => 60e3,
        "h" => 3600e3,
        _ => return None,
    };
    Some(number * scale)
}

impl fmt::Display for AlertRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.critical {
            write!(f, "critical: ")?;
        }
        match self.kind {
            RuleKind::NewPattern { min: 1 } => write!(f, "new-pattern"),
            RuleKind::NewPattern { min } => write!(f, "new-pattern >= {min}"),
            RuleKind::Threshold { metric, op, limit } => {
                write!(f, "{} {} ", metric.name(), op.text())?;
                match limit {
                    Limit::Baseline(k) => write!(f, "{k}x baseline"),
                    Limit::Value(v) if metric.stat.is_latency() => write!(f, "{v}ms"),
                    Limit::Value(v) => write!(f, "{v}"),
                }
            }
        }
    }
}

impl AlertRule {
    fn severity(&self) -> &'static str {
        if self.critical { "critical" } else { "warning" }
    }
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

/// A subject's standing under one rule.
#[derive(Clone, Debug, Default)]
struct Standing {
    firing: bool,
    /// Moving average of the earlier values, and how many went into it.
    baseline: f64,
    samples: u32,
    last_seen: Time,
}

/// Earlier windows needed before a baseline is trusted.
const BASELINE_SAMPLES: u32 = 6;
/// Weight of each new value in the moving-average baseline.
const BASELINE_ALPHA: f64 = 0.1;

/// What the `alert` operator keeps; see the module documentation.
struct Judge {
    config: AlertConfig,
    /// Latest windowed report per pattern id.
    current: FastMap<String, PathPattern>,
    /// Pattern ids seen, with when last.
    seen: FastMap<String, Time>,
    /// (rule index, scope, subject) -> standing.
    standings: BTreeMap<(usize, Scope, String), Standing>,
    warm_until: Option<Time>,
    /// End of the newest window reported: the time alerts refer to.
    window_end: Time,
}

/// One subject's value for a metric, with a label for people.
struct Value {
    value: f64,
    pattern: Option<String>,
}

fn shape(tree: &PatternNode) -> String {
    let port = tree.dst_port.map_or("*".to_owned(), |p| p.to_string());
    let more = tree.len() - 1;
    if more > 0 {
        format!("{} -> {}:{} (+{more} messages)", tree.src, tree.dst, port)
    } else {
        format!("{} -> {}:{}", tree.src, tree.dst, port)
    }
}

impl Judge {
    fn new(config: AlertConfig) -> Self {
        Judge {
            config,
            current: FastMap::default(),
            seen: FastMap::default(),
            standings: BTreeMap::new(),
            warm_until: None,
            window_end: 0,
        }
    }

    fn apply(&mut self, p: PathPattern) {
        if p.cumulative {
            return;
        }
        self.window_end = self.window_end.max(p.window.1);
        if p.count == 0 {
            self.current.remove(&p.id);
        } else {
            self.current.insert(p.id.clone(), p);
        }
    }

    /// The values of `metric` per subject in the window.
    fn values(&self, metric: Metric) -> BTreeMap<String, Value> {
        let mut out = BTreeMap::new();
        match metric.scope {
            Scope::Pattern => {
                for p in self.current.values() {
                    let value = match metric.stat {
                        Stat::Count => p.count as f64,
                        Stat::Expected => p.expected,
                        s => s.of(&p.end_to_end),
                    };
                    out.insert(
                        p.id.clone(),
                        Value {
                            value,
                            pattern: Some(shape(&p.tree)),
                        },
                    );
                }
            }
            Scope::Node | Scope::Hop => {
                // subject -> (Σ mean·count, Σ count, largest quantile)
                let mut acc: BTreeMap<String, (f64, f64, f64)> = BTreeMap::new();
                for p in self.current.values() {
                    let mut messages = Vec::new();
                    preorder(&p.tree, &mut messages);
                    for (m, hop) in messages.iter().zip(&p.hops) {
                        let (subject, summary) = match metric.scope {
                            Scope::Node => (m.src.clone(), hop.delay),
                            _ => (
                                format!(
                                    "{} -> {}:{}",
                                    m.src,
                                    m.dst,
                                    m.dst_port.map_or("*".to_owned(), |p| p.to_string())
                                ),
                                hop.network,
                            ),
                        };
                        let Some(s) = summary else { continue };
                        let e = acc.entry(subject).or_insert((0.0, 0.0, 0.0));
                        let w = p.count as f64;
                        e.0 += s.mean * w;
                        e.1 += w;
                        e.2 = e.2.max(metric.stat.of(&s));
                    }
                }
                for (subject, (sum, weight, largest)) in acc {
                    let value = match metric.stat {
                        Stat::Mean if weight > 0.0 => sum / weight,
                        Stat::Mean => continue,
                        _ => largest,
                    };
                    out.insert(
                        subject,
                        Value {
                            value,
                            pattern: None,
                        },
                    );
                }
            }
        }
        out
    }

    /// Judges the window as it stands at `at` (the snapshot's event time); alerts refer to
    /// the end of the newest window reported.
    fn judge(&mut self, at: Time, out: &mut Vec<Alert>) {
        let now = if self.window_end > 0 {
            self.window_end
        } else {
            at
        };
        let warm_until = *self
            .warm_until
            .get_or_insert(now.saturating_add(self.config.window_ns));
        let forget_after = self.config.window_ns.saturating_mul(10);
        for i in 0..self.config.rules.len() {
            let rule = self.config.rules[i].clone();
            match rule.kind {
                RuleKind::NewPattern { min } => {
                    let mut ids: Vec<&PathPattern> = self.current.values().collect();
                    ids.sort_by(|a, b| a.id.cmp(&b.id));
                    for p in ids {
                        // After the warm-up, a pattern with fewer instances than `min` is not
                        // taken in yet: it is judged again when it has more.
                        if p.count < min && now >= warm_until && !self.seen.contains_key(&p.id) {
                            continue;
                        }
                        let known = self.seen.insert(p.id.clone(), now).is_some();
                        if known || now < warm_until {
                            continue;
                        }
                        let shape = shape(&p.tree);
                        out.push(Alert {
                            source: "rule".to_owned(),
                            severity: rule.severity().to_owned(),
                            message: format!(
                                "new path pattern {} ({}), {} in the window",
                                p.id, shape, p.count
                            ),
                            time_ns: now,
                            correlation: None,
                            rule: Some(RuleFinding {
                                rule: rule.to_string(),
                                state: "firing".to_owned(),
                                scope: "pattern".to_owned(),
                                subject: p.id.clone(),
                                pattern: Some(shape),
                                value: Some(p.count as f64),
                                threshold: None,
                                baseline: None,
                            }),
                        });
                    }
                }
                RuleKind::Threshold { metric, op, limit } => {
                    let values = self.values(metric);
                    for (subject, v) in &values {
                        let key = (i, metric.scope, subject.clone());
                        let standing = self.standings.entry(key).or_default();
                        standing.last_seen = now;
                        let threshold = match limit {
                            Limit::Value(t) => Some(t),
                            Limit::Baseline(k) => (standing.samples >= BASELINE_SAMPLES)
                                .then_some(k * standing.baseline),
                        };
                        let holds = threshold.is_some_and(|t| op.holds(v.value, t));
                        if holds != standing.firing {
                            standing.firing = holds;
                            out.push(finding(
                                &rule,
                                metric,
                                now,
                                subject,
                                Some(v),
                                threshold,
                                matches!(limit, Limit::Baseline(_)).then_some(standing.baseline),
                                holds,
                            ));
                        }
                        // The baseline learns from normal windows only.
                        if !standing.firing && v.value.is_finite() {
                            standing.baseline = if standing.samples == 0 {
                                v.value
                            } else {
                                standing.baseline + BASELINE_ALPHA * (v.value - standing.baseline)
                            };
                            standing.samples = standing.samples.saturating_add(1);
                        }
                    }
                    // Subjects that left the window stop firing.
                    for ((ri, scope, subject), standing) in self.standings.iter_mut() {
                        if *ri == i && standing.firing && !values.contains_key(subject) {
                            standing.firing = false;
                            out.push(finding(
                                &rule,
                                Metric {
                                    scope: *scope,
                                    stat: metric.stat,
                                },
                                now,
                                subject,
                                None,
                                None,
                                None,
                                false,
                            ));
                        }
                    }
                }
            }
        }
        self.standings
            .retain(|_, s| s.firing || now.saturating_sub(s.last_seen) <= forget_after);
        let current = &self.current;
        self.seen.retain(|id, last| {
            current.contains_key(id) || now.saturating_sub(*last) <= forget_after
        });
    }
}

#[allow(clippy::too_many_arguments)]
fn finding(
    rule: &AlertRule,
    metric: Metric,
    now: Time,
    subject: &str,
    value: Option<&Value>,
    threshold: Option<f64>,
    baseline: Option<f64>,
    firing: bool,
) -> Alert {
    let scope = match metric.scope {
        Scope::Pattern => "pattern",
        Scope::Node => "node",
        Scope::Hop => "hop",
    };
    let unit = if metric.stat.is_latency() { " ms" } else { "" };
    let what = match value.and_then(|v| v.pattern.as_ref()) {
        Some(shape) => format!("{scope} {subject} ({shape})"),
        None => format!("{scope} {subject}"),
    };
    let message = match (firing, value, threshold) {
        (true, Some(v), Some(t)) => format!(
            "{what}: {} = {:.3}{unit} {} {:.3}{unit} ({rule})",
            metric.name(),
            v.value,
            match rule.kind {
                RuleKind::Threshold { op, .. } => op.text(),
                RuleKind::NewPattern { .. } => "",
            },
            t
        ),
        (false, Some(v), _) => format!(
            "{what}: {} = {:.3}{unit}, back within `{rule}`",
            metric.name(),
            v.value
        ),
        _ => format!("{what}: left the window, no longer judged by `{rule}`"),
    };
    Alert {
        source: "rule".to_owned(),
        severity: rule.severity().to_owned(),
        message,
        time_ns: now,
        correlation: None,
        rule: Some(RuleFinding {
            rule: rule.to_string(),
            state: if firing { "firing" } else { "resolved" }.to_owned(),
            scope: scope.to_owned(),
            subject: subject.to_owned(),
            pattern: value.and_then(|v| v.pattern.clone()),
            value: value.map(|v| v.value),
            threshold,
            baseline,
        }),
    }
}

/// The tree's messages in preorder (the order of [`PathPattern::hops`]).
fn preorder<'a>(node: &'a PatternNode, out: &mut Vec<&'a PatternNode>) {
    out.push(node);
    for c in &node.children {
        preorder(c, out);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::build::HopStats;

    fn summary(ms: f64) -> Summary {
        Summary {
            mean: ms,
            p50: ms,
            p90: ms,
            p99: ms,
        }
    }

    fn node(src: &str, dst: &str, port: Option<u16>, children: Vec<PatternNode>) -> PatternNode {
        PatternNode {
            src: src.into(),
            dst: dst.into(),
            dst_port: port,
            children,
        }
    }

    /// CLIENT -> web:80 -> app:5000 with end-to-end `e2e` and app delay `delay` ms.
    fn pattern(app: &str, count: u64, e2e: f64, delay: f64) -> PathPattern {
        let tree = node(
            "CLIENT",
            "web",
            Some(80),
            vec![node("web", app, Some(5000), vec![])],
        );
        PathPattern {
            id: tree.id(),
            tree,
            cumulative: false,
            window: (0, 0),
            count,
            expected: count as f64,
            max_probability: 1.0,
            end_to_end: summary(e2e),
            hops: vec![
                HopStats {
                    delay: None,
                    network: Some(summary(0.1)),
                },
                HopStats {
                    delay: Some(summary(delay)),
                    network: Some(summary(0.1)),
                },
            ],
            last: false,
        }
    }

    fn judge(rules: &[&str]) -> Judge {
        Judge::new(AlertConfig {
            rules: rules.iter().map(|r| r.parse().unwrap()).collect(),
            window_ns: 60_000_000_000,
        })
    }

    fn run(j: &mut Judge, t_s: u64, patterns: Vec<PathPattern>) -> Vec<Alert> {
        for p in patterns {
            j.apply(p);
        }
        let mut out = Vec::new();
        j.judge(t_s * 1_000_000_000, &mut out);
        out
    }

    #[test]
    fn rules_parse_and_print() {
        for (text, shown) in [
            ("new-pattern", "new-pattern"),
            ("new-pattern >= 5", "new-pattern >= 5"),
            ("warning: new-pattern>4", "new-pattern >= 5"),
            ("pattern.p99 > 200ms", "pattern.p99 > 200ms"),
            ("pattern.p99>1.5s", "pattern.p99 > 1500ms"),
            (
                "critical: hop.network.mean >= 300us",
                "critical: hop.network.mean >= 0.3ms",
            ),
            (
                "node.delay.mean > 2x baseline",
                "node.delay.mean > 2x baseline",
            ),
            (
                "node.delay.p90 > 3 × baseline",
                "node.delay.p90 > 3x baseline",
            ),
            ("pattern.count < 10", "pattern.count < 10"),
        ] {
            let rule: AlertRule = text.parse().unwrap();
            assert_eq!(rule.to_string(), shown, "{text}");
        }
        for bad in [
            "",
            "pattern.p99",
            "pattern.p99 > fast",
            "pattern.count > 10ms",
            "node.delay.count > 3",
            "node.p99 > 3ms",
            "pattern.p99 > 0x baseline",
        ] {
            assert!(bad.parse::<AlertRule>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn threshold_fires_once_and_resolves() {
        let mut j = judge(&["pattern.p99 > 200ms"]);
        assert!(run(&mut j, 10, vec![pattern("app", 5, 50.0, 1.0)]).is_empty());
        let fired = run(&mut j, 20, vec![pattern("app", 5, 250.0, 1.0)]);
        assert_eq!(fired.len(), 1);
        let f = fired[0].rule.as_ref().unwrap();
        assert_eq!(
            (f.state.as_str(), f.value, f.threshold),
            ("firing", Some(250.0), Some(200.0))
        );
        assert!(
            fired[0].message.contains("CLIENT -> web:80"),
            "{}",
            fired[0].message
        );
        // Persisting: nothing new.
        assert!(run(&mut j, 30, vec![pattern("app", 6, 260.0, 1.0)]).is_empty());
        let resolved = run(&mut j, 40, vec![pattern("app", 6, 20.0, 1.0)]);
        assert_eq!(resolved[0].rule.as_ref().unwrap().state, "resolved");
        // Firing again, then the pattern leaves the window: resolved.
        assert_eq!(
            run(&mut j, 50, vec![pattern("app", 6, 900.0, 1.0)]).len(),
            1
        );
        let mut gone = pattern("app", 0, 0.0, 0.0);
        gone.count = 0;
        let left = run(&mut j, 60, vec![gone]);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].rule.as_ref().unwrap().value, None);
    }

    #[test]
    fn baseline_needs_history_and_ignores_its_own_anomaly() {
        let mut j = judge(&["node.delay.mean > 2x baseline"]);
        // A jump before the baseline is established does not fire.
        assert!(run(&mut j, 10, vec![pattern("app", 5, 10.0, 1.0)]).is_empty());
        for t in 2..=7 {
            assert!(run(&mut j, t * 10, vec![pattern("app", 5, 10.0, 1.0)]).is_empty());
        }
        let fired = run(&mut j, 80, vec![pattern("app", 5, 10.0, 3.0)]);
        assert_eq!(fired.len(), 1, "{fired:?}");
        let f = fired[0].rule.as_ref().unwrap();
        assert_eq!((f.scope.as_str(), f.subject.as_str()), ("node", "web"));
        assert_eq!(f.baseline, Some(1.0));
        // Still high for a long time: the baseline does not learn it, so no resolution.
        for t in 9..30 {
            assert!(run(&mut j, t * 10, vec![pattern("app", 5, 10.0, 3.0)]).is_empty());
        }
        assert_eq!(
            run(&mut j, 300, vec![pattern("app", 5, 10.0, 1.1)]).len(),
            1
        );
    }

    #[test]
    fn node_mean_is_weighted_across_patterns() {
        let mut j = judge(&["node.delay.mean > 2ms"]);
        // web sends to app (1 ms, 30 instances) and app2 (5 ms, 10): mean 2 ms, not above.
        let a = pattern("app", 30, 10.0, 1.0);
        let b = pattern("app2", 10, 10.0, 5.0);
        assert!(run(&mut j, 10, vec![a, b]).is_empty());
        let fired = run(&mut j, 20, vec![pattern("app2", 20, 10.0, 5.0)]);
        assert_eq!(fired.len(), 1);
        let v = fired[0].rule.as_ref().unwrap().value.unwrap();
        assert!((v - 130.0 / 50.0).abs() < 1e-9, "{v}");
    }

    #[test]
    fn new_pattern_after_warm_up_only_and_once() {
        let mut j = judge(&["new-pattern"]);
        assert!(run(&mut j, 0, vec![pattern("app", 5, 10.0, 1.0)]).is_empty());
        // Still warming up (first window).
        assert!(run(&mut j, 30, vec![pattern("app2", 1, 10.0, 1.0)]).is_empty());
        let new = run(&mut j, 70, vec![pattern("app3", 1, 10.0, 1.0)]);
        assert_eq!(new.len(), 1);
        assert!(new[0].message.contains("new path pattern"));
        assert!(run(&mut j, 80, vec![pattern("app3", 2, 10.0, 1.0)]).is_empty());
    }

    #[test]
    fn new_pattern_waits_for_its_minimum_count() {
        let mut j = judge(&["new-pattern >= 3"]);
        assert!(run(&mut j, 0, vec![pattern("app", 1, 10.0, 1.0)]).is_empty());
        // New, but one instance: quiet; then three: it fires, once.
        assert!(run(&mut j, 70, vec![pattern("app3", 1, 10.0, 1.0)]).is_empty());
        let new = run(&mut j, 80, vec![pattern("app3", 3, 10.0, 1.0)]);
        assert_eq!(new.len(), 1, "{new:?}");
        assert_eq!(new[0].rule.as_ref().unwrap().value, Some(3.0));
        assert!(run(&mut j, 90, vec![pattern("app3", 4, 10.0, 1.0)]).is_empty());
        // Seen in the warm-up with one instance: known, whatever it grows to.
        assert!(run(&mut j, 100, vec![pattern("app", 9, 10.0, 1.0)]).is_empty());
        assert!("new-pattern = 3".parse::<AlertRule>().is_err());
        assert!("new-pattern >= x".parse::<AlertRule>().is_err());
    }

    #[test]
    fn forgotten_subjects_free_their_state() {
        let mut j = judge(&["new-pattern", "hop.network.p99 > 1s"]);
        run(&mut j, 0, vec![pattern("app", 5, 10.0, 1.0)]);
        let mut gone = pattern("app", 0, 0.0, 0.0);
        gone.count = 0;
        run(&mut j, 10, vec![gone]);
        run(&mut j, 700, vec![]);
        assert!(j.current.is_empty() && j.seen.is_empty() && j.standings.is_empty());
        // Back after ten windows: new again.
        assert_eq!(
            run(&mut j, 710, vec![pattern("app", 5, 10.0, 1.0)]).len(),
            1
        );
    }
}
