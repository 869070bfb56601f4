//! Accuracy harness: Project 5's accuracy metrics (§7.5.1) for the linking and path
//! aggregation, on the generator's presets, as one table.
//!
//! For each case it generates a message trace (`causeway generate --format csv --seed 1`, kept
//! in `target/bench-data/accuracy-CASE-MESSAGES/`), analyses it with `causeway analyze
//! --workers 2 --emit patterns,instances --format jsonl` (plus whatever follows `--analyze`),
//! scores the output with `causeway score --format json`, and prints a row: the measured mean
//! per-node parallelism, the worst top-N false-negative count at 2% tolerance and the N where
//! it occurs, whether FN(2%) ≤ 1 for every N (the "≤ 1/N" rate), false positives in
//! the top N (N = the true patterns), the worst and mean error of per-node mean delays over
//! the true patterns found, instance and message recall; for `cdn-miss`, whether a true
//! pattern with the DNS lookup was found. The figures come from the run, never from a table.
//!
//! Cases: multi-tier at parallelism 1.6, 5 and 45 (Project 5 Table 1), the four pathological
//! cases of Project 5 §7.5.2, and cdn-miss (WAP5 Fig. 12). `--cases a,b` picks some (names as
//! printed, e.g. `multi-tier@5`).
//!
//! Run: `cargo bench --bench accuracy` or
//!      `cargo bench --bench accuracy -- --messages 100000 --cases multi-tier@1.6 --analyze --try-both 6`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::{analyze_args, flag};

/// (printed name, preset, parallelism to calibrate to, if any).
const CASES: &[(&str, &str, Option<&str>)] = &[
    ("multi-tier@1.6", "multi-tier", Some("1.6")),
    ("multi-tier@5", "multi-tier", Some("5")),
    ("multi-tier@45", "multi-tier", Some("45")),
    ("children-parallel", "children-parallel", None),
    ("children-0-2", "children-0-2", None),
    ("children-d-cc", "children-d-cc", None),
    ("penalty-breaker", "penalty-breaker", None),
    ("cdn-miss", "cdn-miss", None),
];

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let extra = analyze_args(&mut args);
    let messages: u64 = flag(&args, "--messages").unwrap_or(100_000);
    let picked: Option<String> = flag(&args, "--cases");
    let causeway: PathBuf =
        flag(&args, "--causeway").unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_causeway")));
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    println!(
        "{messages} messages per case; analyze --workers 2 {}",
        extra.join(" ")
    );
    println!(
        "| case | parallelism | true patterns | inferred | worst FN 2% (N) | FN 2% ≤ 1 for all N | FP in top N | delay error max / mean | instance recall | message recall |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &(name, preset, parallelism) in CASES {
        if picked
            .as_ref()
            .is_some_and(|p| !p.split(',').any(|c| c == name))
        {
            continue;
        }
        let dir = data.join(format!("accuracy-{name}-{messages}"));
        let truth = dir.join("truth.jsonl");
        if !truth.is_file() {
            let mut cmd = Command::new(&causeway);
            cmd.args(["generate", "--preset", preset, "--format", "csv"])
                .args(["--seed", "1", "--messages", &messages.to_string()])
                .arg("-o")
                .arg(&dir);
            if let Some(p) = parallelism {
                cmd.args(["--parallelism", p]);
            }
            run(&mut cmd);
        }
        let out = dir.join("analyzed.jsonl");
        run(Command::new(&causeway)
            .args(["analyze", "--workers", "2", "--quiet", "--format", "jsonl"])
            .args(["--emit", "patterns,instances", "--names"])
            .arg(dir.join("names.txt"))
            .args(&extra)
            .arg("-o")
            .arg(&out)
            .arg(dir.join("messages.csv")));
        let score: serde_json::Value = serde_json::from_slice(&run(Command::new(&causeway)
            .args(["score", "--format", "json", "--truth"])
            .arg(&truth)
            .arg(&out)))
        .unwrap();
        let summary = std::fs::read_to_string(&truth)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|r| r["kind"] == "truth")
            .expect("truth summary");
        let worst = &score["worst"];
        let delay = &score["delay"];
        let dns = if preset == "cdn-miss" {
            let found = delay["per_pattern"].as_array().is_some_and(|ps| {
                ps.iter()
                    .any(|p| p["canonical"].as_str().is_some_and(|c| c.contains(">dns:")))
            });
            if found {
                ", DNS sub-path found"
            } else {
                ", DNS sub-path NOT found"
            }
        } else {
            ""
        };
        println!(
            "| {name}{dns} | {:.2} | {} | {} | {} ({}) | {} | {} | {:.1}% / {:.1}% ({} compared) | {:.1}% | {:.1}% |",
            summary["mean_parallelism"].as_f64().unwrap_or(f64::NAN),
            score["truth_patterns"],
            score["inferred_patterns"],
            worst["fn_2pct"],
            worst["rate_n"]
                .as_u64()
                .map_or("-".to_owned(), |n| n.to_string()),
            if score["fn_2pct_max_ok"] == true {
                "yes"
            } else {
                "no"
            },
            score["false_positives"]["in_top_k"],
            delay["max_rel_error"].as_f64().unwrap_or(f64::NAN) * 100.0,
            delay["mean_rel_error"].as_f64().unwrap_or(f64::NAN) * 100.0,
            delay["patterns_compared"],
            score["instances"]["recall"].as_f64().unwrap_or(f64::NAN) * 100.0,
            score["messages"]["recall"].as_f64().unwrap_or(f64::NAN) * 100.0,
        );
    }
}
