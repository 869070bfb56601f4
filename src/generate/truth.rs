//! Ground truth: every path instance as it really happened, and the patterns they form.
//!
//! `truth.jsonl` holds, in the output contract's shapes: a `truth` header (the run's settings,
//! clocks and measured parallelism), one `instance` per path instance (probability 1; messages
//! in preorder with their true and local timestamps, parent index and, for message traces, the
//! data row), and one `pattern` per pattern with its count and true per-node and per-hop delays.
//! Nodes are named as `--names` would name them, clients aggregated to `CLIENT`, ephemeral
//! ports as `*` (`dst_port: null`). For a trace written with node names (`--endpoints
//! names`), nodes are named as `analyze` names them there: by the names themselves (clients
//! `client`), with no ports; the header then says `"endpoints": "names"` and each message
//! gives its `kind`.

use std::collections::BTreeMap;

use causeway_operators::PatternNode;
use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// Summary statistics of one quantity, in ms.
pub struct Dist {
    hist: Histogram<u64>,
    sum_ns: f64,
    n: u64,
}

impl Default for Dist {
    fn default() -> Self {
        Dist {
            hist: new_hist(),
            sum_ns: 0.0,
            n: 0,
        }
    }
}

#[allow(clippy::expect_used)]
fn new_hist() -> Histogram<u64> {
    // µs resolution, 3 significant digits (valid: at most 5), auto-resizing so that no value
    // is ever refused.
    let mut h = Histogram::<u64>::new(3).expect("3 significant digits is a valid precision");
    h.auto(true);
    h
}

impl Dist {
    /// Adds a value in ns (negative values count as 0).
    pub fn add(&mut self, ns: f64) {
        let ns = ns.max(0.0);
        self.sum_ns += ns;
        self.n += 1;
        let _ = self.hist.record((ns / 1_000.0).round() as u64);
    }

    /// `{mean, p50, p90, p99}` in ms.
    pub fn to_json(&self) -> Value {
        let q = |p: f64| self.hist.value_at_quantile(p) as f64 / 1_000.0;
        json!({
            "mean": if self.n > 0 { self.sum_ns / self.n as f64 / 1e6 } else { 0.0 },
            "p50": q(0.5),
            "p90": q(0.9),
            "p99": q(0.99),
        })
    }
}

/// One message of a true instance, as the truth file gives it.
#[derive(Clone, Debug)]
pub struct TruthMessage {
    /// Sender node name (`CLIENT` for clients).
    pub src: String,
    /// Receiver node name.
    pub dst: String,
    /// Receiver port; `None` when ephemeral.
    pub dst_port: Option<u16>,
    /// Sender endpoint.
    pub src_endpoint: String,
    /// Receiver endpoint.
    pub dst_endpoint: String,
    /// Local send time (sender's clock), absolute ns.
    pub send_ns: u64,
    /// Local receive time (receiver's clock), absolute ns.
    pub recv_ns: u64,
    /// True send time, absolute ns.
    pub true_send_ns: u64,
    /// True receive time, absolute ns.
    pub true_recv_ns: u64,
    /// Parent in tracelet order.
    pub parent: Option<usize>,
    /// Global id (to find its CSV row).
    pub id: u64,
    /// Which sides a sniffer captured (for message traces: which timestamps the row has).
    pub captured: super::write::Sides,
    /// `call` or `return`, written when the trace's ends do not tell (names without ports).
    pub kind: Option<&'static str>,
}

/// Per-pattern aggregates.
struct PatternAgg {
    tree: PatternNode,
    count: u64,
    end_to_end: Dist,
    /// Per preorder position: node delay (not for the root) and network latency.
    delay: Vec<Dist>,
    network: Vec<Dist>,
}

/// Preorder of an instance's messages (root first, children by send time) and each message's
/// parent position in that order.
pub fn preorder(messages: &[TruthMessage]) -> Vec<(usize, Option<usize>)> {
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); messages.len()];
    let mut roots = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m.parent {
            Some(p) => children[p].push(i),
            None => roots.push(i),
        }
    }
    for c in &mut children {
        c.sort_by_key(|&i| (messages[i].true_send_ns, i));
    }
    let mut order = Vec::with_capacity(messages.len());
    let mut stack: Vec<(usize, Option<usize>)> =
        roots.into_iter().rev().map(|r| (r, None)).collect();
    while let Some((i, parent_pos)) = stack.pop() {
        let pos = order.len();
        order.push((i, parent_pos));
        for &c in children[i].iter().rev() {
            stack.push((c, Some(pos)));
        }
    }
    order
}

/// The pattern tree of an instance.
pub fn pattern_of(messages: &[TruthMessage]) -> PatternNode {
    fn build(i: usize, messages: &[TruthMessage], children: &[Vec<usize>]) -> PatternNode {
        PatternNode {
            src: messages[i].src.clone(),
            dst: messages[i].dst.clone(),
            dst_port: messages[i].dst_port,
            children: children[i]
                .iter()
                .map(|&c| build(c, messages, children))
                .collect(),
        }
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); messages.len()];
    for (i, m) in messages.iter().enumerate() {
        if let Some(p) = m.parent {
            children[p].push(i);
        }
    }
    for c in &mut children {
        c.sort_by_key(|&i| (messages[i].true_send_ns, i));
    }
    let root = messages
        .iter()
        .position(|m| m.parent.is_none())
        .unwrap_or(0);
    build(root, messages, &children)
}

/// Collects true patterns.
#[derive(Default)]
pub struct Truth {
    patterns: BTreeMap<String, PatternAgg>,
    /// Instances so far.
    pub instances: u64,
}

impl Truth {
    /// Adds an instance; returns its pattern id and its messages in preorder with parent
    /// positions, as the `instance` line lists them.
    pub fn add(&mut self, messages: &[TruthMessage]) -> (String, Vec<(usize, Option<usize>)>) {
        let tree = pattern_of(messages);
        let id = tree.id();
        let order = preorder(messages);
        let agg = self.patterns.entry(id.clone()).or_insert_with(|| {
            let n = tree.len();
            PatternAgg {
                tree,
                count: 0,
                end_to_end: Dist::default(),
                delay: (0..n).map(|_| Dist::default()).collect(),
                network: (0..n).map(|_| Dist::default()).collect(),
            }
        });
        agg.count += 1;
        self.instances += 1;
        let start = messages.iter().map(|m| m.true_send_ns).min().unwrap_or(0);
        let end = messages.iter().map(|m| m.true_recv_ns).max().unwrap_or(0);
        agg.end_to_end.add(end.saturating_sub(start) as f64);
        for (pos, &(i, parent_pos)) in order.iter().enumerate() {
            let m = &messages[i];
            if pos < agg.network.len() {
                agg.network[pos].add((m.true_recv_ns as i64 - m.true_send_ns as i64) as f64);
                if let Some(pp) = parent_pos {
                    let parent = &messages[order[pp].0];
                    agg.delay[pos].add((m.true_send_ns as i64 - parent.true_recv_ns as i64) as f64);
                }
            }
        }
        (id, order)
    }

    /// Number of distinct patterns.
    pub fn pattern_count(&self) -> usize {
        self.patterns.len()
    }

    /// The `pattern` lines, most frequent first.
    pub fn pattern_lines(&self, window: (u64, u64)) -> Vec<Value> {
        let mut aggs: Vec<(&String, &PatternAgg)> = self.patterns.iter().collect();
        aggs.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        aggs.into_iter()
            .map(|(id, a)| {
                let mut pos = 0;
                let root = tree_json(&a.tree, a, &mut pos, true);
                json!({
                    "schema": 1,
                    "kind": "pattern",
                    "id": id,
                    "window": {"start_ns": window.0, "end_ns": window.1},
                    "count": a.count,
                    "expected": a.count as f64,
                    "max_probability": 1.0,
                    "end_to_end_ms": a.end_to_end.to_json(),
                    "canonical": a.tree.canonical(),
                    "root": root,
                })
            })
            .collect()
    }
}

fn tree_json(node: &PatternNode, agg: &PatternAgg, pos: &mut usize, root: bool) -> Value {
    let here = *pos;
    *pos += 1;
    let children: Vec<Value> = node
        .children
        .iter()
        .map(|c| tree_json(c, agg, pos, false))
        .collect();
    let mut v = json!({
        "src": node.src,
        "dst": node.dst,
        "dst_port": node.dst_port,
        "network_ms": agg.network[here].to_json(),
        "children": children,
    });
    if !root {
        if let Value::Object(o) = &mut v {
            o.insert("delay_ms".into(), agg.delay[here].to_json());
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(src: &str, dst: &str, send: u64, recv: u64, parent: Option<usize>) -> TruthMessage {
        TruthMessage {
            src: src.into(),
            dst: dst.into(),
            dst_port: Some(1),
            src_endpoint: String::new(),
            dst_endpoint: String::new(),
            send_ns: send,
            recv_ns: recv,
            true_send_ns: send,
            true_recv_ns: recv,
            parent,
            id: 0,
            captured: Default::default(),
            kind: None,
        }
    }

    #[test]
    fn preorder_puts_children_in_send_order_and_delays_add_up() {
        // root A->B; B->D sent before B->C although listed after it
        let ms = vec![
            msg("A", "B", 0, 10, None),
            msg("B", "C", 30, 40, Some(0)),
            msg("B", "D", 20, 25, Some(0)),
            msg("C", "B", 50, 60, Some(1)),
        ];
        assert_eq!(
            preorder(&ms),
            vec![(0, None), (2, Some(0)), (1, Some(0)), (3, Some(2))]
        );
        assert_eq!(pattern_of(&ms).canonical(), "A>B:1(B>D:1() B>C:1(C>B:1()))");
        let mut t = Truth::default();
        t.add(&ms);
        let lines = t.pattern_lines((0, 60));
        let root = &lines[0]["root"];
        assert_eq!(root["children"][0]["dst"], "D");
        // B held A->B from 10 until it sent B->D at 20: 10 ns
        assert!((root["children"][0]["delay_ms"]["mean"].as_f64().unwrap() - 10e-6).abs() < 1e-12);
    }
}
