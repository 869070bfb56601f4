//! End-to-end tests of path inference: `analyze` links messages into paths and reports
//! patterns continuously; `score` judges them against the generator's truth.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::BTreeMap;

use common::*;

/// While analyze works through a long trace of a steady workload, successive snapshots report
/// growing counts for the same patterns; the final totals agree with the truth's busiest
/// patterns.
#[test]
fn snapshots_show_growing_counts_for_the_same_patterns() {
    let dir = scratch("paths-growing");
    generate(
        &dir,
        &[
            "--preset",
            "multi-tier",
            "--format",
            "csv",
            "--messages",
            "20000",
        ],
    );
    let names = dir.join("names.txt");
    let csv = dir.join("messages.csv");
    let records = causeway_jsonl(&[
        "analyze",
        "--format",
        "jsonl",
        "--emit",
        "patterns",
        "--emit-every",
        "5s",
        "--names",
        names.to_str().unwrap(),
        csv.to_str().unwrap(),
    ]);
    // Cumulative counts per pattern, in report order.
    let mut series: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for r in &records {
        assert_eq!(r["schema"], 1);
        if r["kind"] == "pattern" && r["cumulative"] == true {
            series
                .entry(r["canonical"].as_str().unwrap().to_owned())
                .or_default()
                .push((
                    r["window"]["end_ns"].as_u64().unwrap(),
                    r["count"].as_u64().unwrap(),
                ));
        }
    }
    let static_page = "CLIENT>ws1:80(ws1>CLIENT:*())";
    let s = &series[static_page];
    assert!(s.len() >= 5, "{static_page}: {s:?}");
    for w in s.windows(2) {
        assert!(w[1].0 > w[0].0, "snapshots in event-time order: {s:?}");
        assert!(w[1].1 >= w[0].1, "cumulative counts never shrink: {s:?}");
    }
    assert!(s.last().unwrap().1 > 2 * s[0].1, "counts grow: {s:?}");
    // Windowed reports exist too, and the final cumulative count is near the truth's.
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "pattern" && r["cumulative"] == false)
    );
    let truth = std::fs::read_to_string(dir.join("truth.jsonl")).unwrap();
    let true_count = truth
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["kind"] == "pattern" && v["canonical"] == static_page)
        .unwrap()["count"]
        .as_u64()
        .unwrap();
    let ours = s.last().unwrap().1;
    assert!(
        ours.abs_diff(true_count) * 20 <= true_count,
        "{static_page}: {ours} inferred, {true_count} true"
    );
}

/// `score` reads truth and analyze output and reports the figures as JSON; at low parallelism
/// the busiest patterns are found and per-node delays are close to the truth.
#[test]
fn score_judges_inferred_patterns_against_the_truth() {
    let dir = scratch("paths-score");
    generate(
        &dir,
        &[
            "--preset",
            "multi-tier",
            "--format",
            "csv",
            "--messages",
            "20000",
            "--parallelism",
            "1.2",
        ],
    );
    let out_path = dir.join("out.jsonl");
    let out = causeway(&[
        "analyze",
        "--emit",
        "patterns,instances",
        "--format",
        "jsonl",
        "-o",
        out_path.to_str().unwrap(),
        "--names",
        dir.join("names.txt").to_str().unwrap(),
        dir.join("messages.csv").to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = causeway(&[
        "score",
        "--format",
        "json",
        "--truth",
        dir.join("truth.jsonl").to_str().unwrap(),
        out_path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["truth_patterns"], 12);
    // The two busiest true patterns are our two busiest.
    assert_eq!(s["top_n"][1]["fn"], 0, "{}", s["top_n"]);
    assert!(
        s["instances"]["recall"].as_f64().unwrap() > 0.5,
        "{}",
        s["instances"]
    );
    assert!(
        s["messages"]["recall"].as_f64().unwrap() > 0.5,
        "{}",
        s["messages"]
    );
    assert!(
        s["delay"]["mean_rel_error"].as_f64().unwrap() < 0.05,
        "{}",
        s["delay"]
    );
}
