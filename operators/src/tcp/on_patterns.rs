//! `tcp.on_patterns`: each correlated problem, and its alert, with the path-pattern hops its
//! connections carry, so that an alert says which paths it slows.
//!
//! - **Input**: the correlations and alerts of `correlate`, and the path patterns of `paths`
//!   (with `--emit problems`, each hop lists the connections whose messages spent the most
//!   time in problems: [`HopProblems::flows`](crate::HopProblems::flows)).
//! - **Output**: the correlations and alerts, at the same times, each with
//!   [`Correlation::patterns`] set to the hops (`src -> dst:port of pattern ID`) whose
//!   latest windowed snapshot lists one of the correlation's flows; an alert's message ends
//!   with them (`; slows app -> pg:5432 of patterns 81256c0b, a6c850d1`).
//! - **Exchange**: everything to worker 0.
//! - **Time**: records are taken in event-time order once both inputs' frontiers have passed
//!   them, snapshots before correlations of the same time, so the answer does not depend on
//!   timing: a correlation names the hops of the snapshots up to its own time.
//! - **State**: per pattern, the flows of its latest windowed snapshot (replaced by each
//!   snapshot, freed by its retraction); an index from flow to hops; the records waiting for
//!   the frontiers, freed as they leave.
//! - **Cost**: per snapshot, O(hops × flows) index updates; per correlation, a lookup per
//!   flow (at most ten).

use std::collections::{BTreeMap, BTreeSet};

use causeway_sources::Time;
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use crate::FastMap;
use crate::paths::build::PathPattern;
use crate::tcp::correlate::{Correlated, Correlation};

/// Most hops an alert names in its message, and patterns per hop (the most expected).
const NAMED: usize = 3;
/// Most hops a correlation lists (the most expected patterns' first).
const LISTED: usize = 20;

/// `(flow, hop label)` of each hop of `p` that lists flows.
fn hop_flows(p: &PathPattern) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (n, hop) in p.tree.preorder().into_iter().zip(&p.hops) {
        if let Some(t) = &hop.tcp {
            let label = n.hop_label();
            out.extend(t.flows.iter().map(|f| (f.clone(), label.clone())));
        }
    }
    out
}

/// The hops that carry correlations' flows, from the patterns' latest snapshots.
#[derive(Default)]
struct HopIndex {
    /// Per pattern id, the `(flow, hop label)` pairs of its latest windowed snapshot, and
    /// its expected count there.
    by_pattern: FastMap<String, (Vec<(String, String)>, f64)>,
    /// Per flow, the `(hop label, pattern id)` pairs that list it.
    by_flow: FastMap<String, BTreeSet<(String, String)>>,
}

impl HopIndex {
    fn apply(&mut self, p: &PathPattern) {
        if p.cumulative {
            return;
        }
        if let Some((old, _)) = self.by_pattern.remove(&p.id) {
            for (flow, label) in old {
                if let Some(set) = self.by_flow.get_mut(&flow) {
                    set.remove(&(label, p.id.clone()));
                    if set.is_empty() {
                        self.by_flow.remove(&flow);
                    }
                }
            }
        }
        if p.count == 0 {
            return;
        }
        let flows = hop_flows(p);
        if flows.is_empty() {
            return;
        }
        for (flow, label) in &flows {
            self.by_flow
                .entry(flow.clone())
                .or_default()
                .insert((label.clone(), p.id.clone()));
        }
        self.by_pattern.insert(p.id.clone(), (flows, p.expected));
    }

    /// `(hop label, pattern id)` for every hop listing one of `c`'s flows, hops by label,
    /// each hop's patterns by expected count, most first.
    fn hops_of(&self, c: &Correlation) -> Vec<(String, String)> {
        let mut hops: BTreeSet<(String, String)> = BTreeSet::new();
        for f in &c.flows {
            if let Some(set) = self.by_flow.get(f) {
                hops.extend(set.iter().cloned());
            }
        }
        let expected = |id: &str| self.by_pattern.get(id).map_or(0.0, |p| p.1);
        let mut hops: Vec<(String, String)> = hops.into_iter().collect();
        hops.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then(expected(&b.1).total_cmp(&expected(&a.1)))
                .then(a.1.cmp(&b.1))
        });
        hops
    }
}

/// `app -> pg:5432 of 40 patterns (81256c0b, a6c850d1, 7e5e4dc1, …)` for up to [`NAMED`]
/// hops, from [`HopIndex::hops_of`].
fn summary(hops: &[(String, String)]) -> String {
    let mut by_label: Vec<(&str, Vec<&str>)> = Vec::new();
    for (label, id) in hops {
        let short = &id[..id.len().min(8)];
        match by_label.last_mut() {
            Some((l, ids)) if *l == label.as_str() => ids.push(short),
            _ => by_label.push((label, vec![short])),
        }
    }
    let mut parts: Vec<String> = by_label
        .iter()
        .take(NAMED)
        .map(|(label, ids)| match ids.len() {
            1 => format!("{label} of pattern {}", ids[0]),
            n => format!(
                "{label} of {n} patterns ({}{})",
                ids[..n.min(NAMED)].join(", "),
                if n > NAMED { ", …" } else { "" }
            ),
        })
        .collect();
    if by_label.len() > NAMED {
        parts.push(format!("{} more hops", by_label.len() - NAMED));
    }
    parts.join("; ")
}

/// What a correlation lists: the first [`LISTED`] of `hops`.
fn listed(hops: &[(String, String)]) -> Vec<String> {
    hops.iter()
        .take(LISTED)
        .map(|(label, id)| format!("{label} of pattern {id}"))
        .collect()
}

/// Extension trait: correlations with the pattern hops they slow.
pub trait OnPatterns<'scope> {
    /// See the module documentation.
    fn on_patterns(
        self,
        patterns: Stream<'scope, Time, Vec<PathPattern>>,
    ) -> Stream<'scope, Time, Vec<Correlated>>;
}

impl<'scope> OnPatterns<'scope> for Stream<'scope, Time, Vec<Correlated>> {
    fn on_patterns(
        self,
        patterns: Stream<'scope, Time, Vec<PathPattern>>,
    ) -> Stream<'scope, Time, Vec<Correlated>> {
        self.binary_frontier(
            patterns,
            Exchange::new(|_: &Correlated| 0),
            Exchange::new(|_: &PathPattern| 0),
            "tcp.on_patterns",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut index = HopIndex::default();
                let mut found: BTreeMap<Time, Vec<Correlated>> = BTreeMap::new();
                let mut snapshots: BTreeMap<Time, Vec<PathPattern>> = BTreeMap::new();
                move |(correlated, c_frontier), (patterns, p_frontier), output| {
                    correlated.for_each(|cap, batch| {
                        let Some(&t) = cap.least() else { return };
                        found.entry(t).or_default().append(batch);
                    });
                    patterns.for_each(|cap, batch| {
                        let Some(&t) = cap.least() else { return };
                        snapshots.entry(t).or_default().append(batch);
                    });
                    let c_now = c_frontier.frontier().iter().next().copied();
                    let p_now = p_frontier.frontier().iter().next().copied();
                    let now = match (c_now, p_now) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    let Some(cap) = held.as_mut() else { return };
                    loop {
                        let next_c = found.keys().next().copied();
                        let next_p = snapshots.keys().next().copied();
                        let t = match (next_c, next_p) {
                            (Some(a), Some(b)) => a.min(b),
                            (a, b) => match a.or(b) {
                                Some(t) => t,
                                None => break,
                            },
                        };
                        if now.is_some_and(|n| t >= n) {
                            break;
                        }
                        if next_p == Some(t) {
                            for p in snapshots.remove(&t).unwrap_or_default() {
                                index.apply(&p);
                            }
                            continue;
                        }
                        let mut batch = found.remove(&t).unwrap_or_default();
                        for r in &mut batch {
                            match r {
                                Correlated::Correlation(c) => {
                                    c.patterns = listed(&index.hops_of(c));
                                }
                                Correlated::Alert(a) => {
                                    let Some(c) = a.correlation.as_mut() else {
                                        continue;
                                    };
                                    let hops = index.hops_of(c);
                                    if !hops.is_empty() {
                                        a.message.push_str("; slows ");
                                        a.message.push_str(&summary(&hops));
                                    }
                                    c.patterns = listed(&hops);
                                }
                            }
                        }
                        output.session(&cap.delayed(&t)).give_container(&mut batch);
                    }
                    let first = found.keys().chain(snapshots.keys()).min().copied();
                    match (now, first) {
                        (None, None) => held = None,
                        (n, f) => {
                            if let Some(to) = n.into_iter().chain(f).min() {
                                if to > *cap.time() {
                                    cap.downgrade(&to);
                                }
                            }
                        }
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::Alert;
    use crate::paths::build::{HopProblems, HopStats};
    use crate::paths::pattern::tests::node;
    use crate::tcp::problem::Problem;
    use crate::tcp::resources::Scope;
    use std::sync::{Arc, Mutex};
    use timely::dataflow::InputHandle;
    use timely::dataflow::operators::{Input, Inspect};

    fn pattern(id: &str, db_flows: Vec<String>) -> PathPattern {
        let tree = node(
            "CLIENT",
            "app",
            Some(80),
            vec![
                node("app", "pg", Some(5432), vec![]),
                node("app", "CLIENT", None, vec![]),
            ],
        );
        let mut hops = vec![HopStats::default(); 3];
        hops[1].tcp = Some(HopProblems {
            messages: 10.0,
            flows: db_flows,
            ..HopProblems::default()
        });
        PathPattern {
            id: id.into(),
            tree,
            cumulative: false,
            window: (0, 10),
            count: 10,
            likeliest: 10,
            expected: 10.0,
            max_probability: 1.0,
            end_to_end: Default::default(),
            hops,
            last: false,
        }
    }

    fn correlation(flows: &[&str]) -> Correlation {
        Correlation {
            scope: Scope::Host,
            name: "10.0.0.40".into(),
            problem: Problem::Timeout,
            connections: 3,
            members: 3,
            acc: 0.8,
            acc_all: None,
            start_ns: 0,
            end_ns: 10,
            bucket_ns: 1,
            series_ms: vec![],
            flows: flows.iter().map(|f| f.to_string()).collect(),
            also: vec![],
            incast: None,
            patterns: vec![],
        }
    }

    #[test]
    fn an_alert_names_the_hops_that_carry_its_connections() {
        let flow = "10.0.0.20:40000->10.0.0.40:5432";
        let c = correlation(&[flow, "10.0.0.20:40002->10.0.0.40:5432"]);
        let alert = Alert {
            source: "correlate".into(),
            severity: "warning".into(),
            message: "timeout on 3 of 3 connections of host 10.0.0.40 at once (ACC 0.80)".into(),
            time_ns: 10,
            correlation: Some(c.clone()),
            rule: None,
        };
        let records = vec![
            (5, Correlated::Alert(Box::new(alert))),
            (5, Correlated::Correlation(Box::new(c))),
        ];
        let snapshots = vec![
            (3, pattern("aaaaaaaaaaaaaaaa", vec![flow.into()])),
            (
                3,
                pattern(
                    "bbbbbbbbbbbbbbbb",
                    vec!["10.0.0.21:1->10.0.0.40:5432".into()],
                ),
            ),
            // Later than the correlation: not seen by it.
            (7, pattern("cccccccccccccccc", vec![flow.into()])),
        ];
        let got: Arc<Mutex<Vec<Correlated>>> = Arc::default();
        let sink = Arc::clone(&got);
        timely::execute_directly(move |worker| {
            let mut found = InputHandle::new();
            let mut patterns = InputHandle::new();
            worker.dataflow::<Time, _, _>(|scope| {
                let p = scope
                    .input_from(&mut patterns)
                    .container::<Vec<PathPattern>>();
                scope
                    .input_from(&mut found)
                    .container::<Vec<Correlated>>()
                    .on_patterns(p)
                    .inspect(move |r| sink.lock().unwrap().push(r.clone()));
            });
            // Snapshots and correlations in time order, as the dataflow gives them.
            let mut events: Vec<(Time, Option<PathPattern>, Option<Correlated>)> = snapshots
                .into_iter()
                .map(|(t, p)| (t, Some(p), None))
                .chain(records.into_iter().map(|(t, r)| (t, None, Some(r))))
                .collect();
            events.sort_by_key(|e| e.0);
            for (t, p, r) in events {
                found.advance_to(t);
                patterns.advance_to(t);
                if let Some(p) = p {
                    patterns.send(p);
                }
                if let Some(r) = r {
                    found.send(r);
                }
            }
        });
        let out = got.lock().unwrap().clone();
        assert_eq!(out.len(), 2);
        for r in out {
            match r {
                Correlated::Alert(a) => {
                    assert!(
                        a.message
                            .ends_with("; slows app -> pg:5432 of pattern aaaaaaaa"),
                        "{}",
                        a.message
                    );
                    assert_eq!(
                        a.correlation.unwrap().patterns,
                        vec!["app -> pg:5432 of pattern aaaaaaaaaaaaaaaa".to_owned()]
                    );
                }
                Correlated::Correlation(c) => assert_eq!(c.patterns.len(), 1),
            }
        }
    }
}
