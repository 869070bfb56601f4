//! `--alert` rules end to end: the alerts `causeway analyze` raises must be exactly the edges
//! of the rule's condition over the windowed pattern reports it writes in the same run.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{causeway, causeway_jsonl, multi_tier_trace};
use serde_json::Value;

#[test]
fn alerts_are_the_edges_of_their_rules_over_the_reported_patterns() {
    let (dir, names, trace) = multi_tier_trace("alerts", 20_000, &[]);
    let records = causeway_jsonl(&[
        "analyze",
        "--names",
        &names,
        "--emit",
        "patterns",
        "--alert",
        "critical: pattern.p99 > 30ms",
        "--alert",
        "new-pattern",
        "--format",
        "jsonl",
        &trace,
    ]);
    // Windowed reports grouped by snapshot (their window's end), in order.
    let mut snapshots: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    let mut alerts: BTreeMap<(u64, String), Vec<&Value>> = BTreeMap::new();
    for r in &records {
        match r["kind"].as_str().unwrap() {
            "pattern" if r["cumulative"] == false => snapshots
                .entry(r["window"]["end_ns"].as_u64().unwrap())
                .or_default()
                .push(r),
            "alert" => {
                assert_eq!(r["source"], "rule");
                alerts
                    .entry((
                        r["time_ns"].as_u64().unwrap(),
                        r["rule"].as_str().unwrap().to_owned(),
                    ))
                    .or_default()
                    .push(r);
            }
            _ => {}
        }
    }
    assert!(snapshots.len() > 10, "{} snapshots", snapshots.len());
    let window_ns = 60_000_000_000;
    let warm_until = snapshots.keys().next().unwrap() + window_ns;

    let mut current: BTreeMap<String, f64> = BTreeMap::new();
    let mut firing: BTreeSet<String> = BTreeSet::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let (mut fired, mut resolved, mut new) = (0, 0, 0);
    for (&end, reports) in &snapshots {
        for p in reports {
            let id = p["id"].as_str().unwrap().to_owned();
            if p["count"] == 0 {
                current.remove(&id);
            } else {
                current.insert(id, p["end_to_end_ms"]["p99"].as_f64().unwrap());
            }
        }
        // The threshold rule: one alert per change of state.
        let mut expected: BTreeMap<String, &str> = BTreeMap::new();
        let holds: BTreeSet<String> = current
            .iter()
            .filter(|(_, p99)| **p99 > 30.0)
            .map(|(id, _)| id.clone())
            .collect();
        for id in holds.difference(&firing) {
            expected.insert(id.clone(), "firing");
        }
        for id in firing.difference(&holds) {
            expected.insert(id.clone(), "resolved");
        }
        firing = holds;
        let got: BTreeMap<String, &str> = alerts
            .get(&(end, "critical: pattern.p99 > 30ms".to_owned()))
            .into_iter()
            .flatten()
            .map(|a| {
                assert_eq!(a["severity"], "critical");
                (
                    a["subject"].as_str().unwrap().to_owned(),
                    a["state"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, expected, "threshold alerts at {end}");
        fired += got.values().filter(|s| **s == "firing").count();
        resolved += got.values().filter(|s| **s == "resolved").count();

        // new-pattern: ids first reported after the first window, once each.
        let mut expected_new = BTreeSet::new();
        for id in current.keys() {
            if seen.insert(id.clone()) && end >= warm_until {
                expected_new.insert(id.clone());
            }
        }
        let got_new: BTreeSet<String> = alerts
            .get(&(end, "new-pattern".to_owned()))
            .into_iter()
            .flatten()
            .map(|a| a["subject"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(got_new, expected_new, "new-pattern alerts at {end}");
        new += got_new.len();
    }
    let total: usize = alerts.values().map(Vec::len).sum();
    assert_eq!(total, fired + resolved + new, "alerts at no snapshot");
    assert!(
        fired > 0 && resolved > 0 && new > 0,
        "{fired} {resolved} {new}"
    );
    println!("{fired} firing, {resolved} resolved, {new} new-pattern alerts checked");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_bad_rule_is_one_clear_line() {
    let out = causeway(&["analyze", "--alert", "pattern.p99 > fast", "x.pcap"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("alert rule `pattern.p99 > fast`") && err.contains("expected a duration"),
        "{err}"
    );
}
