//! The terminal-table sink: what a person reads at the end of a run.
//!
//! Sections appear when there is something to show: path patterns (the `top` by the chosen
//! rank, each as a tree with its node delays and network latencies), per-input statistics
//! (what capinfos reports), the largest conversations (what tshark's `-z conv` reports),
//! messages per node pair (the busiest `top`), clock offsets and address translations. On a
//! terminal the path patterns refresh in place while the run goes on (at most once a second).
//! State: the latest cumulative report per pattern, the latest statistics per origin, the top
//! `top` conversations by bytes (a bounded heap) with a total count, and one aggregate per
//! node pair: bounded by the number of patterns, origins, `top`, and node pairs, never by the
//! number of records.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use causeway_operators::tcp::correlate::Correlation;
use causeway_operators::tcp::problem::Problem;
use causeway_operators::{
    ClockOffset, Flow, HopProblems, HopStats, NodeName, OriginStats, PathPattern, PatternNode, Rank,
};
use causeway_sources::decode::linktype;
use causeway_sources::{OriginId, Origins};

use crate::output::Output;
use crate::{Record, Sink, SinkError};

#[derive(Default)]
struct Edge {
    messages: u64,
    bytes: u64,
    both_sides: u64,
    latency_sum_ns: i128,
}

/// Renders a summary table when the run ends.
pub struct Table {
    out: Output,
    origins: Origins,
    top: usize,
    stats: BTreeMap<OriginId, OriginStats>,
    flows: BinaryHeap<Reverse<(u64, Flow)>>,
    flow_count: u64,
    edges: BTreeMap<(NodeName, NodeName), Edge>,
    clocks: BTreeMap<String, ClockOffset>,
    nat: BTreeMap<(&'static str, String, String), u64>,
    rank: Rank,
    patterns: BTreeMap<String, PathPattern>,
    changed: bool,
    last_refresh: Option<std::time::Instant>,
    /// Per flow, problem and source (a connection captured at both ends is seen twice):
    /// evidence, time in the problem, events, first and last ns.
    problems: BTreeMap<(String, &'static str, OriginId), ProblemTotal>,
    /// The latest report of each correlated set.
    correlations: BTreeMap<(&'static str, String, &'static str), Correlation>,
    /// The latest `top` alerts (severity, message), and how many there were.
    alerts: std::collections::VecDeque<(String, String)>,
    alerts_total: u64,
}

/// One flow's total time in one problem.
#[derive(Clone, Debug, Default)]
struct ProblemTotal {
    evidence: &'static str,
    problem_ns: f64,
    events: u64,
    first_ns: u64,
    last_ns: u64,
}

impl Table {
    /// A table sink writing to `out`, listing the `top` largest conversations.
    pub fn new(out: Output, origins: Origins, top: usize, rank: Rank) -> Self {
        Table {
            rank,
            patterns: BTreeMap::new(),
            changed: false,
            last_refresh: None,
            problems: BTreeMap::new(),
            correlations: BTreeMap::new(),
            alerts: std::collections::VecDeque::new(),
            alerts_total: 0,
            out,
            origins,
            top,
            stats: BTreeMap::new(),
            flows: BinaryHeap::new(),
            flow_count: 0,
            edges: BTreeMap::new(),
            clocks: BTreeMap::new(),
            nat: BTreeMap::new(),
        }
    }

    fn render(&self) -> String {
        let mut s = String::new();
        if !self.patterns.is_empty() {
            s.push_str(&self.render_patterns());
        }
        if !self.stats.is_empty() {
            s.push_str(&self.render_stats());
        }
        if self.flow_count > 0 {
            s.push_str(&self.render_flows());
        }
        if !self.edges.is_empty() {
            s.push_str(&self.render_edges());
        }
        if !self.clocks.is_empty() {
            s.push_str(&self.render_clocks());
        }
        if !self.nat.is_empty() {
            s.push_str(&self.render_nat());
        }
        if !self.problems.is_empty() {
            s.push_str(&self.render_problems());
        }
        if !self.correlations.is_empty() {
            s.push_str(&self.render_correlations());
        }
        if !self.alerts.is_empty() {
            s.push_str(&self.render_alerts());
        }
        if s.is_empty() {
            s.push_str("No records.\n");
        }
        s
    }

    fn render_patterns(&self) -> String {
        let mut ranked: Vec<&PathPattern> =
            self.patterns.values().filter(|p| p.count > 0).collect();
        let score = |p: &PathPattern| self.rank.score(p.count, p.expected);
        ranked.sort_by(|a, b| score(b).total_cmp(&score(a)).then(a.id.cmp(&b.id)));
        let total: u64 = ranked.iter().map(|p| p.count).sum();
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Path patterns ({} patterns, {} instances; ranked by {}; top {})",
            group(ranked.len() as u64),
            group(total),
            format!("{:?}", self.rank).to_lowercase(),
            self.top.min(ranked.len())
        );
        for (i, p) in ranked.iter().take(self.top).enumerate() {
            let _ = writeln!(
                s,
                "  #{:<3} {}  count {} ({} likeliest)  expected {:.1}  max p {:.2}  end-to-end {:.3} ms mean, {:.3} ms p99",
                i + 1,
                p.id,
                group(p.count),
                group(p.likeliest),
                p.expected,
                p.max_probability,
                p.end_to_end.mean,
                p.end_to_end.p99
            );
            let mut pos = 0;
            tree_lines(&mut s, &p.tree, &p.hops, &mut pos, 1);
        }
        s.push('\n');
        s
    }

    fn render_stats(&self) -> String {
        let mut s = String::new();
        for st in self.stats.values() {
            let t = &st.stats;
            let _ = writeln!(s, "Input {}", self.origins.name(st.origin));
            let formats: Vec<&str> = t.formats.keys().map(String::as_str).collect();
            let links: Vec<String> = t.linktypes.keys().map(|l| linktype::name(*l)).collect();
            let mut format = formats.join(", ");
            if !links.is_empty() {
                let _ = write!(format, "; {}", links.join(", "));
            }
            line(&mut s, "format", &format);
            line(&mut s, "records", &group(t.records));
            if t.tcp + t.udp > 0 {
                line(
                    &mut s,
                    "tcp / udp / ipv6",
                    &format!("{} / {} / {}", group(t.tcp), group(t.udp), group(t.ipv6)),
                );
            }
            line(&mut s, "bytes", &group(t.bytes));
            if let (Some(first), Some(last)) = (t.first_ns, t.last_ns) {
                line(&mut s, "first", &timestamp(first));
                line(&mut s, "last", &timestamp(last));
                let span = last.saturating_sub(first);
                line(&mut s, "duration", &format!("{:.6} s", span as f64 / 1e9));
                if span > 0 {
                    let secs = span as f64 / 1e9;
                    line(
                        &mut s,
                        "rate",
                        &format!(
                            "{:.1} records/s, {:.1} bytes/s",
                            t.records as f64 / secs,
                            t.bytes as f64 / secs
                        ),
                    );
                }
            }
            let skipped = t.skipped_by_name();
            if !skipped.is_empty() {
                let list: Vec<String> = skipped
                    .iter()
                    .map(|(k, v)| format!("{k} {}", group(*v)))
                    .collect();
                line(&mut s, "skipped", &list.join(", "));
            }
            if t.late > 0 {
                line(&mut s, "late", &group(t.late));
            }
            if t.kernel_drops > 0 || t.ring_freezes > 0 {
                line(
                    &mut s,
                    "kernel drops",
                    &format!(
                        "{} (ring full {} times)",
                        group(t.kernel_drops),
                        group(t.ring_freezes)
                    ),
                );
            }
            s.push('\n');
        }
        s
    }

    fn render_flows(&self) -> String {
        let mut flows: Vec<&Flow> = self.flows.iter().map(|Reverse((_, f))| f).collect();
        flows.sort_by_key(|f| Reverse(f.bytes[0] + f.bytes[1]));
        let mut rows = vec![vec![
            "proto".to_owned(),
            "client".to_owned(),
            "server".to_owned(),
            "packets →".to_owned(),
            "← packets".to_owned(),
            "bytes →".to_owned(),
            "← bytes".to_owned(),
            "duration".to_owned(),
            "end".to_owned(),
        ]];
        for f in flows {
            rows.push(vec![
                f.protocol.as_str().to_owned(),
                f.client.to_string(),
                f.server.to_string(),
                group(f.packets[0]),
                group(f.packets[1]),
                group(f.bytes[0]),
                group(f.bytes[1]),
                format!("{:.3} s", f.end_ns.saturating_sub(f.start_ns) as f64 / 1e9),
                f.end.as_str().to_owned(),
            ]);
        }
        let shown = rows.len() - 1;
        let mut s = format!(
            "Conversations: {} (largest {} by bytes)\n",
            group(self.flow_count),
            shown
        );
        s.push_str(&columns(&rows, &[3, 4, 5, 6, 7]));
        s.push('\n');
        s
    }

    fn render_clocks(&self) -> String {
        let mut rows = vec![vec![
            "clock".to_owned(),
            "minus reference".to_owned(),
            "drift".to_owned(),
            "error ≤".to_owned(),
            "evidence".to_owned(),
        ]];
        let reference = self
            .clocks
            .values()
            .next()
            .map(|c| c.reference.name(&self.origins))
            .unwrap_or_default();
        for (name, c) in &self.clocks {
            rows.push(vec![
                name.clone(),
                format!("{:.3} ms", c.offset_ns / 1e6),
                format!("{:.2} ppm", c.drift_ppm),
                if c.error_ns.is_finite() {
                    format!("{:.3} ms", c.error_ns / 1e6)
                } else {
                    "?".into()
                },
                format!("{} s", c.seconds),
            ]);
        }
        let mut s = format!("Clocks (reference {reference})\n");
        s.push_str(&columns(&rows, &[1, 2, 3, 4]));
        s.push('\n');
        s
    }

    fn render_problems(&self) -> String {
        let mut rows = vec![vec![
            "flow".to_owned(),
            "problem".to_owned(),
            "evidence".to_owned(),
            "time in it".to_owned(),
            "of span".to_owned(),
            "events".to_owned(),
        ]];
        // Per flow and problem, one source: the kernel's counters, else the sighting that
        // saw the most time in it (never the sum of two sniffers' views of one connection).
        let mut best: BTreeMap<(&String, &'static str), &ProblemTotal> = BTreeMap::new();
        for ((flow, problem, _), t) in &self.problems {
            if *problem == "app_limited" {
                continue;
            }
            let rank = |t: &ProblemTotal| (t.evidence == "kernel", t.problem_ns);
            let slot = best.entry((flow, problem)).or_insert(t);
            if rank(t).partial_cmp(&rank(slot)) == Some(std::cmp::Ordering::Greater) {
                *slot = t;
            }
        }
        let mut list: Vec<_> = best.into_iter().collect();
        list.sort_by(|a, b| {
            b.1.problem_ns
                .total_cmp(&a.1.problem_ns)
                .then(a.0.cmp(&b.0))
        });
        let shown = list.len().min(self.top.max(1));
        for ((flow, problem), t) in list.iter().take(shown) {
            let span = t.last_ns.saturating_sub(t.first_ns).max(1) as f64;
            rows.push(vec![
                (*flow).clone(),
                problem.to_string(),
                t.evidence.to_owned(),
                format!("{:.1} ms", t.problem_ns / 1e6),
                format!("{:.1}%", 100.0 * t.problem_ns / span),
                group(t.events),
            ]);
        }
        let flows: std::collections::BTreeSet<&String> =
            self.problems.keys().map(|(f, _, _)| f).collect();
        let mut s = format!(
            "TCP problems: {} flow/problem pairs over {} flows{}\n",
            list.len(),
            flows.len(),
            if shown < list.len() {
                format!(" (worst {shown})")
            } else {
                String::new()
            }
        );
        if list.is_empty() {
            s.push_str("  none: every flow was limited by its sender application only\n\n");
            return s;
        }
        s.push_str(&columns(&rows, &[3, 4, 5]));
        s.push('\n');
        s
    }

    fn render_correlations(&self) -> String {
        let mut rows = vec![vec![
            "scope".to_owned(),
            "name".to_owned(),
            "problem".to_owned(),
            "connections".to_owned(),
            "ACC".to_owned(),
        ]];
        let mut list: Vec<&Correlation> = self.correlations.values().collect();
        list.sort_by(|a, b| b.acc.total_cmp(&a.acc).then(a.name.cmp(&b.name)));
        for c in &list {
            let also = if c.also.is_empty() {
                String::new()
            } else {
                format!(" (also {})", c.also.join(", "))
            };
            rows.push(vec![
                c.scope.as_str().to_owned(),
                format!("{}{also}", c.name),
                c.problem.as_str().to_owned(),
                format!("{} of {}", c.connections, c.members),
                format!("{:.2}", c.acc),
            ]);
        }
        let mut s = format!(
            "Problems shared by a host, link or application: {}\n",
            list.len()
        );
        s.push_str(&columns(&rows, &[3, 4]));
        s.push('\n');
        s
    }

    fn render_alerts(&self) -> String {
        let mut s = if self.alerts_total > self.alerts.len() as u64 {
            format!(
                "Alerts: {} (the last {})\n",
                group(self.alerts_total),
                self.alerts.len()
            )
        } else {
            format!("Alerts: {}\n", self.alerts_total)
        };
        for (severity, message) in &self.alerts {
            s.push_str(&format!("  {severity:<8} {message}\n"));
        }
        s.push('\n');
        s
    }

    fn render_nat(&self) -> String {
        let mut rows = vec![vec![
            "proto".to_owned(),
            "public".to_owned(),
            "private".to_owned(),
            "messages".to_owned(),
        ]];
        for ((proto, public, private), n) in &self.nat {
            rows.push(vec![
                proto.to_string(),
                public.clone(),
                private.clone(),
                group(*n),
            ]);
        }
        let mut s = format!("Address translations: {}\n", self.nat.len());
        s.push_str(&columns(&rows, &[3]));
        s.push('\n');
        s
    }

    fn render_edges(&self) -> String {
        let mut rows = vec![vec![
            "src".to_owned(),
            "dst".to_owned(),
            "messages".to_owned(),
            "both sides".to_owned(),
            "bytes".to_owned(),
            "network (corrected clocks)".to_owned(),
        ]];
        // The busiest pairs first.
        let mut edges: Vec<(&(NodeName, NodeName), &Edge)> = self.edges.iter().collect();
        edges.sort_by(|a, b| b.1.messages.cmp(&a.1.messages).then(a.0.cmp(b.0)));
        let shown = edges.len().min(self.top.max(1));
        for ((src, dst), e) in edges.into_iter().take(shown) {
            let latency = if e.both_sides > 0 {
                format!(
                    "{:.3} ms mean",
                    e.latency_sum_ns as f64 / e.both_sides as f64 / 1e6
                )
            } else {
                "one side only".to_owned()
            };
            rows.push(vec![
                src.to_string(),
                dst.to_string(),
                group(e.messages),
                group(e.both_sides),
                group(e.bytes),
                latency,
            ]);
        }
        let total: u64 = self.edges.values().map(|e| e.messages).sum();
        let mut s = format!(
            "Messages: {} between {} node pairs{}\n",
            group(total),
            self.edges.len(),
            if shown < self.edges.len() {
                format!(" (busiest {shown})")
            } else {
                String::new()
            }
        );
        s.push_str(&columns(&rows, &[2, 3, 4, 5]));
        s.push('\n');
        s
    }
}

impl Sink for Table {
    fn write(&mut self, record: &Record) -> Result<(), SinkError> {
        match record {
            Record::Stats(s) => {
                self.stats.insert(s.origin, s.clone());
            }
            Record::Flow(f) => {
                self.flow_count += 1;
                self.flows
                    .push(Reverse((f.bytes[0] + f.bytes[1], f.clone())));
                if self.flows.len() > self.top {
                    self.flows.pop();
                }
            }
            Record::Message(m) => {
                let e = self
                    .edges
                    .entry((m.src.clone(), m.dst.clone()))
                    .or_default();
                e.messages += 1;
                e.bytes += m.bytes.unwrap_or(0);
                let both = match (m.send_corrected_ns, m.recv_corrected_ns) {
                    (Some(s), Some(r)) => Some((s, r)),
                    _ => m.send_ns.zip(m.recv_ns),
                };
                if let Some((s, r)) = both {
                    e.both_sides += 1;
                    e.latency_sum_ns += r as i128 - s as i128;
                }
            }
            Record::ClockOffset(c) => {
                self.clocks.insert(c.domain.name(&self.origins), c.clone());
            }
            Record::Pattern(p) => {
                if p.cumulative {
                    self.patterns.insert(p.id.clone(), p.clone());
                    self.changed = true;
                }
            }
            Record::Instance(_) => {}
            Record::ConnProblem(c) => {
                let t = self
                    .problems
                    .entry((c.conn.flow(), c.problem.as_str(), c.conn.origin))
                    .or_insert_with(|| ProblemTotal {
                        evidence: c.source.as_str(),
                        first_ns: c.start_ns,
                        ..ProblemTotal::default()
                    });
                t.problem_ns += c.fraction * c.end_ns.saturating_sub(c.start_ns) as f64;
                t.events += c.events;
                t.first_ns = t.first_ns.min(c.start_ns);
                t.last_ns = t.last_ns.max(c.end_ns);
            }
            Record::Correlation(c) => {
                self.correlations.insert(
                    (c.scope.as_str(), c.name.clone(), c.problem.as_str()),
                    c.clone(),
                );
            }
            Record::Alert(a) => {
                self.alerts_total += 1;
                if self.alerts.len() == self.top.max(1) {
                    self.alerts.pop_front();
                }
                self.alerts
                    .push_back((a.severity.clone(), a.message.clone()));
            }
            Record::NatMapping(n) => {
                self.nat.insert(
                    (
                        n.protocol.as_str(),
                        n.public.to_string(),
                        n.private.to_string(),
                    ),
                    n.observations,
                );
            }
        }
        Ok(())
    }

    fn progress(&mut self, _frontier: Option<causeway_sources::Time>) -> Result<(), SinkError> {
        if !self.out.is_terminal() || !self.changed {
            return Ok(());
        }
        let now = std::time::Instant::now();
        if self
            .last_refresh
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return Ok(());
        }
        self.last_refresh = Some(now);
        self.changed = false;
        // Clear the screen and draw the current patterns from the top.
        let text = format!("\x1b[H\x1b[2J{}", self.render_patterns());
        self.out.write_all(text.as_bytes())?;
        self.out.flush()
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if self.last_refresh.is_some() {
            self.out.write_all(b"\x1b[H\x1b[2J")?;
        }
        let text = self.render();
        self.out.write_all(text.as_bytes())?;
        self.out.flush()
    }
}

/// One line per message of a pattern tree, indented by depth, with its delay and latency.
fn tree_lines(
    s: &mut String,
    node: &PatternNode,
    hops: &[HopStats],
    pos: &mut usize,
    depth: usize,
) {
    let here = hops.get(*pos).cloned().unwrap_or_default();
    *pos += 1;
    let port = node.dst_port.map_or("*".to_owned(), |p| p.to_string());
    let edge = format!(
        "{}{} -> {}:{}",
        "  ".repeat(depth),
        node.src,
        node.dst,
        port
    );
    let mut facts = Vec::new();
    if let Some(d) = here.delay {
        facts.push(format!("delay {:.3} ms (p99 {:.3})", d.mean, d.p99));
    }
    if let Some(n) = here.network {
        facts.push(format!("network {:.3} ms", n.mean));
    }
    if let Some(t) = &here.tcp {
        facts.push(tcp_fact(t));
    }
    let _ = writeln!(s, "  {edge:<48} {}", facts.join("  "));
    for c in &node.children {
        tree_lines(s, c, hops, pos, depth + 1);
    }
}

/// A hop's TCP problems in a few words: `tcp: fast_retransmit 4% of time (31 of 240
/// messages)`, or `tcp: healthy (240 messages)`.
fn tcp_fact(t: &HopProblems) -> String {
    let problems: Vec<String> = Problem::CORRELATED
        .iter()
        .enumerate()
        .filter(|&(k, _)| t.affected[k] > 0.0)
        .map(|(k, p)| {
            format!(
                "{p} {:.0}% of time ({:.0} of {:.0} messages)",
                t.share[k] * 100.0,
                t.affected[k],
                t.messages
            )
        })
        .collect();
    if problems.is_empty() {
        format!("tcp: healthy ({:.0} messages)", t.messages)
    } else {
        format!("tcp: {}", problems.join(", "))
    }
}

fn line(s: &mut String, label: &str, value: &str) {
    let _ = writeln!(s, "  {label:<18} {value}");
}

/// Thousands-separated integer.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// RFC 3339 UTC time with nanoseconds.
pub fn timestamp(ns: u64) -> String {
    humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
}

/// Aligns rows into columns; columns listed in `right` are right-aligned. The first row is the
/// header, underlined.
fn columns(rows: &[Vec<String>], right: &[usize]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|x| x.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::new();
    for (i, row) in rows.iter().enumerate() {
        let mut cells = Vec::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c].saturating_sub(cell.chars().count());
            if right.contains(&c) {
                cells.push(format!("{}{cell}", " ".repeat(pad)));
            } else {
                cells.push(format!("{cell}{}", " ".repeat(pad)));
            }
        }
        let _ = writeln!(s, "  {}", cells.join("  ").trim_end());
        if i == 0 {
            let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
            let _ = writeln!(s, "  {}", "─".repeat(total));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_seen_by_two_sniffers_is_not_counted_twice() {
        use causeway_operators::tcp::problem::{ConnId, ConnProblem, EvidenceSource, Problem};
        let dir = std::env::temp_dir().join(format!("causeway-table-{}", std::process::id()));
        let out = Output::open(Some(&dir)).unwrap();
        let mut t = Table::new(out, Origins::default(), 8, Rank::Expected);
        for (origin, fraction) in [(0, 0.75), (1, 0.5)] {
            let c = ConnProblem {
                conn: ConnId {
                    origin: OriginId(origin),
                    local: "10.0.0.1:40000".parse().unwrap(),
                    peer: "10.0.0.2:5432".parse().unwrap(),
                },
                problem: Problem::Timeout,
                source: EvidenceSource::Packets,
                start_ns: 0,
                end_ns: 4_000_000_000,
                fraction,
                events: 3,
                intervals: 8,
                bytes: 100,
            };
            t.write(&Record::ConnProblem(c)).unwrap();
        }
        let text = t.render_problems();
        let _ = std::fs::remove_file(&dir);
        assert!(text.contains("3000.0 ms"), "{text}");
        assert!(text.contains("75.0%"), "{text}");
    }

    #[test]
    fn numbers_and_times_read_well() {
        assert_eq!(group(0), "0");
        assert_eq!(group(1234), "1,234");
        assert_eq!(group(1234567), "1,234,567");
        assert_eq!(
            timestamp(1_000_000_000_123),
            "1970-01-01T00:16:40.000000123Z"
        );
    }
}
