//! `--memory-limit`: on a dense message trace (the generator's multi-tier system at
//! parallelism 200, about 590,000 messages per second of event time, so that every stage's
//! waits hold most of it), the limited run sheds, says what it shed, reads every row, still
//! reports patterns, and peaks well below the unlimited run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs::File;
use std::process::{Command, Stdio};

use common::{bin, final_patterns, multi_tier_trace, stats_of, wait_with_peak_rss};

struct Run {
    peak_kib: u64,
    stderr: String,
    records: Vec<serde_json::Value>,
}

fn analyze(dir: &std::path::Path, names: &str, trace: &str, limit: &str) -> Run {
    let out = dir.join(format!("out-{limit}.jsonl"));
    let err = dir.join(format!("err-{limit}.txt"));
    let mut child = Command::new(bin())
        .args(["analyze", "--workers", "2", "--memory-limit", limit])
        .args([
            "--names",
            names,
            "--emit",
            "patterns,stats",
            "--format",
            "jsonl",
        ])
        .arg(trace)
        .stdout(Stdio::from(File::create(&out).unwrap()))
        .stderr(Stdio::from(File::create(&err).unwrap()))
        .spawn()
        .unwrap();
    let (status, peak_kib) = wait_with_peak_rss(&mut child);
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(
        status.success(),
        "--memory-limit {limit}: {status}: {stderr}"
    );
    let records = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Run {
        peak_kib,
        stderr,
        records,
    }
}

#[test]
fn a_memory_limit_sheds_counts_and_lowers_the_peak() {
    let messages = 300_000u64;
    let (dir, names, trace) =
        multi_tier_trace("memory-limit", messages as u32, &["--parallelism", "200"]);
    let free = analyze(&dir, &names, &trace, "0");
    let limited = analyze(&dir, &names, &trace, "128M");
    eprintln!(
        "peak RSS: {} MiB without a limit, {} MiB with --memory-limit 128M\n{}",
        free.peak_kib / 1024,
        limited.peak_kib / 1024,
        limited.stderr
    );
    assert!(!free.stderr.contains("shedding"), "{}", free.stderr);
    assert!(
        limited
            .stderr
            .contains("shedding, each stage holds back at most"),
        "{}",
        limited.stderr
    );
    assert!(
        limited.stderr.contains("causeway: memory: peak")
            && limited
                .stderr
                .contains("messages linked before their wait was over"),
        "{}",
        limited.stderr
    );
    // Every row read (the generator finishes the requests under way: a few more than asked).
    let rows = |run: &Run| stats_of(&run.records, "messages")["records"].as_u64();
    assert!(
        rows(&free).is_some_and(|n| n >= messages),
        "{:?}",
        rows(&free)
    );
    assert_eq!(rows(&limited), rows(&free));
    for run in [&free, &limited] {
        assert!(!final_patterns(&run.records).is_empty());
    }
    assert!(
        limited.peak_kib * 3 < free.peak_kib * 2,
        "peak {} KiB limited against {} KiB free",
        limited.peak_kib,
        free.peak_kib
    );
}
