//! Ingest harness: how fast `causeway stats` reads a capture on one core, side by side with
//! `tcpdump -nn -r FILE -w /dev/null` on the same file in the same run, and the peak RSS of
//! each, on generated captures: multi-tier (a mix of small requests and large responses) of
//! growing size (default 1, 3 and 10 million packets), and children-parallel at parallelism 5
//! (small packets, interleaved conversations: the per-packet worst case), 10 million packets.
//!
//! Captures are generated once into `target/bench-data/` and kept. Each file is read once
//! beforehand so both tools read from the page cache; each command runs `--runs` times and the
//! median wall time is reported. Peak RSS is the child's `ru_maxrss`, taken in a fresh helper
//! process per run so that runs do not mask each other.
//!
//! Run: `cargo bench --bench ingest` or
//!      `cargo bench --bench ingest -- --packets 1000000,10000000 --runs 5`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::{bench_data, flag, list_flag, measure_child, median_of, warm};

/// Captures: preset, extra generator options, packets per message (measured; used to size
/// the generation, the real count is read back).
const PRESETS: [(&str, &[&str], f64); 2] = [
    ("multi-tier", &[], 7.70),
    ("children-parallel", &["--parallelism", "5"], 2.33),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "--measure") {
        measure_child(&args[2..]);
        return;
    }
    let sizes = list_flag(&args, "--packets").unwrap_or(vec![1_000_000, 3_000_000, 10_000_000]);
    let runs: usize = flag(&args, "--runs").unwrap_or(3);
    let causeway = PathBuf::from(env!("CARGO_BIN_EXE_causeway"));
    let data = bench_data();
    let tcpdump = harness::tcpdump();
    println!(
        "capture                 packets        MB  tool        wall s   Mpackets/s    MB/s  peak RSS MB"
    );
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let mut jobs: Vec<(usize, u64)> = sizes.iter().map(|s| (0, *s)).collect();
    jobs.push((1, largest));
    for (preset, target) in jobs {
        let (file, packets) = capture(&causeway, &data, PRESETS[preset], target);
        let mb = std::fs::metadata(&file).unwrap().len() as f64 / 1e6;
        warm(&file);
        let f = file.display().to_string();
        let mut rows = vec![(
            "causeway",
            vec![
                causeway.display().to_string(),
                "stats".into(),
                "--workers".into(),
                "1".into(),
                "--progress".into(),
                "never".into(),
                "-o".into(),
                "/dev/null".into(),
                f.clone(),
            ],
        )];
        if let Some(t) = &tcpdump {
            rows.push((
                "tcpdump",
                vec![
                    t.display().to_string(),
                    "-nn".into(),
                    "-r".into(),
                    f.clone(),
                    "-w".into(),
                    "/dev/null".into(),
                ],
            ));
        }
        let mut walls = Vec::new();
        for (tool, cmd) in rows {
            let (wall, rss) = median_of(&cmd, runs);
            println!(
                "{:<32} {:>9} {:>9.0}  {:<9} {:>8.3} {:>12.2} {:>7.0} {:>12.1}",
                file.parent()
                    .and_then(|p| p.file_name())
                    .unwrap()
                    .to_string_lossy(),
                packets,
                mb,
                tool,
                wall,
                packets as f64 / wall / 1e6,
                mb / wall,
                rss as f64 / 1024.0
            );
            walls.push(wall);
        }
        if walls.len() == 2 {
            println!(
                "  causeway / tcpdump wall time: {:.2} ({})",
                walls[0] / walls[1],
                if walls[0] <= walls[1] {
                    "causeway faster"
                } else {
                    "tcpdump faster"
                }
            );
        }
    }
}

/// A capture of about `packets` packets of `preset`, generated once; returns it and its exact
/// packet count.
fn capture(
    causeway: &Path,
    data: &Path,
    preset: (&str, &[&str], f64),
    packets: u64,
) -> (PathBuf, u64) {
    let (name, extra, per_message) = preset;
    let messages = (packets as f64 / per_message).ceil() as u64;
    let dir = data.join(format!("{name}-{messages}"));
    let file = dir.join("mirror.pcap");
    if !file.exists() {
        eprintln!("generating {} ({messages} messages)...", file.display());
        let status = Command::new(causeway)
            .args([
                "generate",
                "--preset",
                name,
                "--messages",
                &messages.to_string(),
            ])
            .args(extra)
            .arg("-o")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success());
    }
    let out = Command::new(causeway)
        .args(["stats", "--format", "jsonl", "--progress", "never"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let records = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["kind"] == "stats")
        .and_then(|r| r["records"].as_u64())
        .unwrap();
    (file, records)
}
