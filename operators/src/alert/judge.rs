//! What the `alert` operator keeps and how it judges a snapshot (`Judge`): the latest windowed
//! report of every pattern in the window (a retraction frees it), per rule and subject whether
//! it fires and its baseline, and the ids of the patterns seen. A subject absent for ten
//! windows is forgotten.

use super::rules::{Limit, Metric, RuleKind, Scope, Stat};
use super::*;

/// A subject's standing under one rule.
#[derive(Clone, Debug, Default)]
pub(super) struct Standing {
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
pub(super) struct Judge {
    config: AlertConfig,
    /// Latest windowed report per pattern id.
    pub(super) current: FastMap<String, PathPattern>,
    /// Pattern ids seen, with when last.
    pub(super) seen: FastMap<String, Time>,
    /// (rule index, scope, subject) -> standing.
    pub(super) standings: BTreeMap<(usize, Scope, String), Standing>,
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
    let more = tree.len() - 1;
    if more > 0 {
        format!("{} (+{more} messages)", tree.hop_label())
    } else {
        tree.hop_label()
    }
}

impl Judge {
    pub(super) fn new(config: AlertConfig) -> Self {
        Judge {
            config,
            current: FastMap::default(),
            seen: FastMap::default(),
            standings: BTreeMap::new(),
            warm_until: None,
            window_end: 0,
        }
    }

    pub(super) fn apply(&mut self, p: PathPattern) {
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
                        Stat::Likeliest => p.likeliest as f64,
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
                    for (m, hop) in p.tree.preorder().into_iter().zip(&p.hops) {
                        let (subject, summary) = match metric.scope {
                            Scope::Node => (m.src.clone(), hop.delay),
                            _ => (m.hop_label(), hop.network),
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
    pub(super) fn judge(&mut self, at: Time, out: &mut Vec<Alert>) {
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
