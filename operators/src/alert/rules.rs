//! The rules of `--alert` ([`AlertRule`]): read from text and printed back, and the metrics,
//! comparisons and limits they are made of. No state.

use super::*;

/// A rule of `--alert`; see the module documentation for the grammar.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertRule {
    critical: bool,
    pub(super) kind: RuleKind,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum RuleKind {
    /// A pattern not seen before, once it has at least `min` instances in the window.
    NewPattern { min: u64 },
    Threshold {
        metric: Metric,
        op: Op,
        limit: Limit,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Scope {
    Pattern,
    Node,
    Hop,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stat {
    Count,
    Likeliest,
    Expected,
    Mean,
    P50,
    P90,
    P99,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Metric {
    pub(super) scope: Scope,
    pub(super) stat: Stat,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Op {
    Gt,
    Ge,
    Lt,
    Le,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Limit {
    /// ms for latencies, plain for counts.
    Value(f64),
    /// Times the subject's baseline.
    Baseline(f64),
}

impl Op {
    pub(super) fn holds(self, value: f64, limit: f64) -> bool {
        match self {
            Op::Gt => value > limit,
            Op::Ge => value >= limit,
            Op::Lt => value < limit,
            Op::Le => value <= limit,
        }
    }

    pub(super) fn text(self) -> &'static str {
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
            Stat::Likeliest => "likeliest",
            Stat::Expected => "expected",
            Stat::Mean => "mean",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P99 => "p99",
        }
    }

    pub(super) fn of(self, s: &Summary) -> f64 {
        match self {
            Stat::Mean => s.mean,
            Stat::P50 => s.p50,
            Stat::P90 => s.p90,
            Stat::P99 => s.p99,
            Stat::Count | Stat::Likeliest | Stat::Expected => f64::NAN,
        }
    }

    pub(super) fn is_latency(self) -> bool {
        !matches!(self, Stat::Count | Stat::Likeliest | Stat::Expected)
    }
}

impl Metric {
    pub(super) fn name(self) -> String {
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
                "unknown metric `{metric_text}`: pattern.{{count,likeliest,expected,mean,p50,p90,p99}}, \
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
        "likeliest" if counts => Some(Stat::Likeliest),
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
    pub(super) fn severity(&self) -> &'static str {
        if self.critical { "critical" } else { "warning" }
    }
}
