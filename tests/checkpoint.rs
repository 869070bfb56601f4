//! `--checkpoint DIR`: a run stopped part-way and started again with the same DIR ends with
//! the patterns of one uninterrupted run.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::BTreeMap;

use common::{causeway, final_patterns, multi_tier_trace, scratch, stats_of};

fn run(args: &[&str]) -> (Vec<serde_json::Value>, String) {
    let out = causeway(args);
    assert!(
        out.status.success(),
        "causeway {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| causeway_operators::json::from_slice_nested(l.as_bytes()).unwrap())
        .collect();
    (records, String::from_utf8(out.stderr).unwrap())
}

#[test]
fn a_stopped_run_resumes_where_it_stopped() {
    let (dir, names, trace) = multi_tier_trace("checkpoint", 20_000, &[]);
    let state = dir.join("state").display().to_string();
    let base = [
        "analyze",
        "--names",
        &names,
        "--emit",
        "patterns,stats",
        "--format",
        "jsonl",
    ];

    let (whole, _) = run(&[&base[..], &[&trace]].concat());
    let whole = final_patterns(&whole);

    // Stopped after 8,000 rows: the checkpoint is saved at the stop.
    let (first, _) = run(&[
        &base[..],
        &["--checkpoint", &state, "--count", "8000", &trace],
    ]
    .concat());
    let first_stats = stats_of(&first, "messages");
    let first_rows = first_stats["records"].as_u64().unwrap()
        - first_stats["skipped"]["stopped"].as_u64().unwrap_or(0);
    assert!(std::path::Path::new(&state).join("paths.json").is_file());
    let (second, err) = run(&[&base[..], &["--checkpoint", &state, &trace]].concat());
    assert!(err.contains("resuming from"), "{err}");
    let stats = stats_of(&second, "messages");
    let resumed = stats["skipped"]["resumed"].as_u64().unwrap();
    // The second run read everything and skipped what the first analysed.
    assert_eq!(stats["records"], 20_000);
    assert!(
        resumed + 50 >= first_rows && resumed <= first_rows,
        "{resumed} resumed, {first_rows} analysed before"
    );
    let resumed_patterns = final_patterns(&second);

    let count = |p: &[(String, u64, f64)]| -> BTreeMap<String, u64> {
        p.iter().map(|(id, c, _)| (id.clone(), *c)).collect()
    };
    let (a, b) = (count(&whole), count(&resumed_patterns));
    let total = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
    // What differs: the paths in flight at the stop (cut in two), and the first seconds of
    // the resumed run, while `link` relearns each node pair's delays and the ports their
    // roles (fragments of paths). About 1.6% on this short trace.
    let (ta, tb) = (total(&a), total(&b));
    assert!(
        ta.abs_diff(tb) * 100 <= ta * 3,
        "{ta} instances in one run, {tb} when resumed"
    );
    let mut top: Vec<(&String, &u64)> = a.iter().collect();
    top.sort_by(|x, y| y.1.cmp(x.1));
    for (id, n) in top.into_iter().take(10).filter(|(_, n)| **n >= 100) {
        let m = b.get(id).copied().unwrap_or(0);
        assert!(
            n.abs_diff(m) * 20 <= *n,
            "pattern {id}: {n} in one run, {m} resumed"
        );
    }
    println!("one run: {ta} instances; stopped and resumed: {tb}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_damaged_checkpoint_is_one_line_naming_it() {
    let dir = scratch("checkpoint-bad");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("paths.json"), "{\"version\": 1, \"resu").unwrap();
    let trace = dir.join("empty.csv");
    std::fs::write(&trace, "send_ns,recv_ns,src,dst\n").unwrap();
    let out = causeway(&[
        "analyze",
        "--checkpoint",
        &dir.display().to_string(),
        &trace.display().to_string(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("paths.json") && err.lines().count() == 1,
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_checkpoint_of_a_long_chain_is_read_back() {
    // Requests down a chain of 70 services and the answers back: a pattern tree 140 messages
    // deep, which nests deeper than serde_json's default limit of 128.
    const DEPTH: usize = 70;
    let dir = scratch("checkpoint-chain");
    let trace = dir.join("chain.csv");
    let mut csv = String::from("send_ns,recv_ns,src,dst,kind\n");
    let name = |i: usize| {
        if i == 0 {
            "client".to_owned()
        } else {
            format!("s{i}")
        }
    };
    for request in 0..5u64 {
        let mut t = 1_000_000_000 + request * 100_000_000;
        for i in 0..DEPTH {
            csv += &format!("{t},{},{},{},request\n", t + 10_000, name(i), name(i + 1));
            t += 50_000;
        }
        for i in (0..DEPTH).rev() {
            csv += &format!("{t},{},{},{},response\n", t + 10_000, name(i + 1), name(i));
            t += 50_000;
        }
    }
    std::fs::write(&trace, csv).unwrap();
    let state = dir.join("state").display().to_string();
    let trace = trace.display().to_string();
    let args = ["analyze", "--emit", "patterns", "--format", "jsonl"];
    let (first, _) = run(&[&args[..], &["--checkpoint", &state, &trace]].concat());
    let deepest = first
        .iter()
        .filter(|r| r["kind"] == "pattern")
        .map(|r| r["canonical"].as_str().unwrap().matches('(').count())
        .max();
    assert_eq!(deepest, Some(2 * DEPTH), "{first:?}");
    let (_, err) = run(&[&args[..], &["--checkpoint", &state, &trace]].concat());
    assert!(
        err.contains("resuming from") && err.contains("1 pattern"),
        "{err}"
    );
    std::fs::remove_dir_all(&*dir).ok();
}
