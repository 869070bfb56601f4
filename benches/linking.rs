//! Linking harness: how fast `causeway analyze` links messages into paths and aggregates the
//! patterns (WAP5 §5: the message-trace input, the `rows`, `clock`, `link` and `paths`
//! operators), with its peak RSS, on the generator's multi-tier preset at parallelism 1.6 as
//! a message trace, at growing sizes: by default 470,000 and 4.7 million messages (the size of
//! WAP5's CoDeeN trace), so that the RSS can be compared as the trace grows 10×.
//!
//! The command is `causeway analyze --workers W --names names.txt --emit patterns
//! --emit-every 100000s --format jsonl -o /dev/null messages.csv` (one final snapshot: the
//! work, not the printing, is measured). Traces are generated once into
//! `target/bench-data/linking-N/` and kept. Each trace is read once beforehand so that it
//! is in the page cache; each size runs `--runs` times; the median wall time and the largest
//! peak RSS are reported. Peak RSS is the child's `ru_maxrss`, taken in a fresh helper process
//! per run; the harness also samples the resident set every 100 ms and prints it at each
//! tenth of the last run of each size, to show whether memory grows with the input.
//!
//! Busy systems: `--parallelism 1.6,20,200` generates the preset at each of those mean
//! per-node parallelisms (the generator scales the clients' think times, so at 200 the
//! 4.7 million messages span 8 s of event time); `--endpoints names` writes node names
//! instead of `ip:port` endpoints (the task linker's case); `--memory-limit BYTES` is passed
//! to `analyze`, and so is `--emit KINDS` (default `patterns`; `patterns,problems` measures
//! what the TCP diagnosis on the paths costs).
//!
//! Run: `cargo bench --bench linking` or
//!      `cargo bench --bench linking -- --messages 470000,4700000 --workers 2 --runs 3`
//!      `cargo bench --bench linking -- --parallelism 20,200 --runs 1 --memory-limit 256M`
//!      `cargo bench --bench linking -- --messages 4700000 --emit patterns,problems`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::{flag, list_flag, measure_child, measure_profile, warm};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "--measure") {
        measure_child(&args[2..]);
        return;
    }
    let sizes = list_flag(&args, "--messages").unwrap_or(vec![470_000, 4_700_000]);
    let runs: usize = flag(&args, "--runs").unwrap_or(3);
    let workers: usize = flag(&args, "--workers").unwrap_or(2);
    let parallelisms: Vec<String> = flag::<String>(&args, "--parallelism")
        .map_or(vec!["1.6".into()], |p| {
            p.split(',').map(str::to_owned).collect()
        });
    let endpoints: String = flag(&args, "--endpoints").unwrap_or_else(|| "ip-port".into());
    let memory_limit: Option<String> = flag(&args, "--memory-limit");
    let emit: String = flag(&args, "--emit").unwrap_or_else(|| "patterns".into());
    // What `analyze` is given besides the harness's own options.
    let mut extra = vec!["--emit".to_owned(), emit];
    if let Some(limit) = memory_limit {
        extra.extend(["--memory-limit".to_owned(), limit]);
    }
    let causeway = PathBuf::from(env!("CARGO_BIN_EXE_causeway"));
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&data).unwrap();
    println!(
        "{:>11} {:>8} {:>10} {:>9} {:>12} {:>14} {:>12}",
        "parallelism", "endpoints", "messages", "wall s", "messages/s", "peak RSS MiB", "patterns"
    );
    let mut profiles = Vec::new();
    for p in &parallelisms {
        for &n in &sizes {
            let (row, profile) =
                run_size(&causeway, &data, p, &endpoints, n, runs, workers, &extra);
            println!("{row}");
            profiles.push((format!("{p:>11} {n:>10}"), profile));
        }
    }
    // The resident set of each size's last run at each tenth of its wall time: the input is
    // read at a steady pace, so a tenth of the time is about a tenth of the trace, and a flat
    // row is memory that does not grow with the input.
    println!("RSS MiB at each tenth of the run (last run of each size):");
    for (label, samples) in profiles {
        let at: Vec<String> = (1..=10)
            .filter_map(|k| {
                let i = (samples.len() * k / 10).checked_sub(1)?;
                Some(format!("{:.0}", samples[i] as f64 / 1024.0))
            })
            .collect();
        println!("{label}  {}", at.join(" "));
    }
}

/// Generates (once) and links one trace `runs` times: its table row, and the RSS samples of
/// the last run.
#[allow(clippy::too_many_arguments)]
fn run_size(
    causeway: &Path,
    data: &Path,
    parallelism: &str,
    endpoints: &str,
    n: u64,
    runs: usize,
    workers: usize,
    extra: &[String],
) -> (String, Vec<u64>) {
    // The original case keeps its directory name (and its generated trace).
    let dir = if parallelism == "1.6" && endpoints == "ip-port" {
        data.join(format!("linking-{n}"))
    } else {
        data.join(format!("linking-p{parallelism}-{endpoints}-{n}"))
    };
    let trace = dir.join("messages.csv");
    if !trace.is_file() {
        eprintln!("generating {n} messages into {}", dir.display());
        let status = Command::new(causeway)
            .args(["generate", "--preset", "multi-tier", "--format", "csv"])
            .args(["--parallelism", parallelism, "--seed", "1"])
            .args(["--endpoints", endpoints])
            .args(["--messages", &n.to_string()])
            .arg("-o")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success(), "generate failed");
    }
    warm(&trace);
    let out = dir.join("patterns.jsonl");
    let mut cmd: Vec<String> = vec![
        causeway.display().to_string(),
        "analyze".into(),
        "--workers".into(),
        workers.to_string(),
        "--names".into(),
        dir.join("names.txt").display().to_string(),
        "--emit-every".into(),
        "100000s".into(),
        "--format".into(),
        "jsonl".into(),
        "-o".into(),
        out.display().to_string(),
    ];
    cmd.extend(extra.iter().cloned());
    cmd.push(trace.display().to_string());
    let mut walls = Vec::new();
    let mut rss = 0;
    let mut profile = Vec::new();
    for _ in 0..runs.max(1) {
        let (wall, kib, samples) = measure_profile(&cmd);
        walls.push(wall);
        rss = rss.max(kib);
        profile = samples;
    }
    walls.sort_by(f64::total_cmp);
    let wall = walls[walls.len() / 2];
    // Patterns in the final report: the latest cumulative line per id, count above 0.
    let mut latest = std::collections::HashMap::new();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        // A long chain's pattern nests deeper than serde_json's default limit.
        let v: serde_json::Value =
            causeway_operators::json::from_slice_nested(line.as_bytes()).unwrap();
        if v["kind"] == "pattern" && v["cumulative"] == true {
            latest.insert(v["id"].to_string(), v["count"].as_u64().unwrap_or(0));
        }
    }
    let patterns = latest.values().filter(|c| **c > 0).count();
    let row = format!(
        "{parallelism:>11} {endpoints:>8} {n:>10} {wall:>9.2} {:>12.0} {:>14.1} {patterns:>12}",
        n as f64 / wall,
        rss as f64 / 1024.0
    );
    (row, profile)
}
