//! Pipeline harness: the whole capture pipeline (decode, fold, reconcile, clock, link, paths)
//! on multi-host captures, beside `tcpdump -nn -r FILE -w /dev/null` reading the same files in
//! the same run.
//!
//! For each size of `--messages` (default 150,000 and 1,000,000: about 1.6 and 10.7 million
//! packets) it generates the multi-tier preset at parallelism 5 with one capture per host
//! (`causeway generate --preset multi-tier --parallelism 5 --sniffers per-host`, kept in
//! `target/bench-data/pipeline-p5-MESSAGES/`), counts the packets with `causeway stats`, reads
//! the files once so both tools read from the page cache, then runs `--runs` times each (median
//! wall time, largest peak RSS, in a fresh helper process per run):
//! - `causeway analyze --workers W --names names.txt --emit patterns,stats --format jsonl
//!   --progress never -o /dev/null FILES` (W from `--workers`, default 2; arguments after
//!   `--analyze` are added as they are, e.g. `--analyze --memory-limit 256M`);
//! - `tcpdump -nn -r F -w /dev/null` for each file in turn, in one shell.
//!
//! Run: `cargo bench --bench pipeline` or
//!      `cargo bench --bench pipeline -- --messages 150000 --runs 3 --workers 2`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::{analyze_args, bench_data, flag, list_flag, measure_child, median_of, warm};

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "--measure") {
        measure_child(&args[2..]);
        return;
    }
    let extra = analyze_args(&mut args);
    let sizes = list_flag(&args, "--messages").unwrap_or(vec![150_000, 1_000_000]);
    let runs: usize = flag(&args, "--runs").unwrap_or(3);
    let workers: usize = flag(&args, "--workers").unwrap_or(2);
    let causeway = PathBuf::from(env!("CARGO_BIN_EXE_causeway"));
    let data = bench_data();
    let tcpdump = harness::tcpdump();
    println!(
        "analyze --workers {workers} --emit patterns,stats {}",
        extra.join(" ")
    );
    println!(
        "| messages | hosts | packets | MB | tool | wall s | Mpackets/s | peak RSS MB | causeway / tcpdump |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for messages in sizes {
        let (dir, files) = captures(&causeway, &data, messages);
        let packets = count_packets(&causeway, &files);
        let mb = files
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .sum::<u64>() as f64
            / 1e6;
        for f in &files {
            warm(f);
        }
        let mut cmd: Vec<String> = vec![
            causeway.display().to_string(),
            "analyze".into(),
            "--workers".into(),
            workers.to_string(),
            "--names".into(),
            dir.join("names.txt").display().to_string(),
            "--emit".into(),
            "patterns,stats".into(),
            "--format".into(),
            "jsonl".into(),
            "--progress".into(),
            "never".into(),
            "-o".into(),
            "/dev/null".into(),
        ];
        cmd.extend(extra.iter().cloned());
        cmd.extend(files.iter().map(|f| f.display().to_string()));
        let mut rows = vec![("causeway", cmd)];
        if let Some(t) = &tcpdump {
            let script = files
                .iter()
                .map(|f| {
                    format!(
                        "{} -nn -r '{}' -w /dev/null 2>/dev/null",
                        t.display(),
                        f.display()
                    )
                })
                .collect::<Vec<_>>()
                .join(" && ");
            rows.push(("tcpdump", vec!["sh".into(), "-c".into(), script]));
        }
        let mut walls = Vec::new();
        for (tool, cmd) in rows {
            let (wall, rss) = median_of(&cmd, runs);
            walls.push(wall);
            let ratio = if walls.len() == 2 {
                format!("{:.2}", walls[0] / walls[1])
            } else {
                String::new()
            };
            println!(
                "| {messages} | {} | {packets} | {mb:.0} | {tool} | {wall:.3} | {:.2} | {:.1} | {ratio} |",
                files.len(),
                packets as f64 / wall / 1e6,
                rss as f64 / 1024.0,
            );
        }
    }
}

/// The per-host captures of `messages` messages of the multi-tier preset at parallelism 5,
/// generated once: their directory and files.
fn captures(causeway: &Path, data: &Path, messages: u64) -> (PathBuf, Vec<PathBuf>) {
    let dir = data.join(format!("pipeline-p5-{messages}"));
    if !dir.join("names.txt").exists() {
        eprintln!("generating {} ({messages} messages)...", dir.display());
        let status = Command::new(causeway)
            .args(["generate", "--preset", "multi-tier", "--parallelism", "5"])
            .args([
                "--sniffers",
                "per-host",
                "--messages",
                &messages.to_string(),
            ])
            .arg("-o")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no captures in {}", dir.display());
    (dir, files)
}

/// Packets in `files`, as `causeway stats` counts them.
fn count_packets(causeway: &Path, files: &[PathBuf]) -> u64 {
    let out = Command::new(causeway)
        .args(["stats", "--format", "jsonl", "--progress", "never"])
        .args(files)
        .output()
        .unwrap();
    assert!(out.status.success(), "causeway stats failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["kind"] == "stats" && r["final"] == true)
        .filter_map(|r| r["records"].as_u64())
        .sum()
}
