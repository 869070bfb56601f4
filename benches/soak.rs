//! Soak harness: a long run of `causeway analyze` with its resident memory sampled every
//! minute, to show that memory is bounded by the window and not by the length of the run.
//!
//! The input is the generator's multi-tier preset as a single mirror-port capture (pcap.gz),
//! `--messages` long (default 2.4 million messages, about 18 million packets over 10 hours of
//! trace time), replayed with `--speed` (default 10x) so that the run lasts `--minutes`
//! (default 60) of wall time: ten hours of traffic pass through every window while it runs.
//! The command is `causeway analyze --speed S --duration Mm --emit patterns,stats
//! --emit-every 60s --format jsonl -o soak-PID.jsonl mirror.pcap.gz`; its `stats` records tell
//! how far it has read, and its debug log (`CAUSEWAY_LOG`, `paths` at debug by default) how
//! large the pattern table is.
//!
//! Every `--sample` seconds (default 60) it prints the wall minute, VmRSS and VmHWM of the
//! process (from /proc), the trace time reached, and the pattern table's size (patterns, and
//! the bytes `--pattern-memory` counts). The capture is generated once into
//! `target/bench-data/soak-N/` and kept.
//!
//! Arguments after `--analyze` go to `causeway analyze` as they are (e.g. `--max-patterns 200
//! --alert new-pattern`).
//!
//! Run: `cargo bench --bench soak` or
//!      `cargo bench --bench soak -- --messages 2400000 --speed 10x --minutes 60 --sample 60`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::{analyze_args, flag};

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let extra = analyze_args(&mut args);
    let messages: u64 = flag(&args, "--messages").unwrap_or(2_400_000);
    let speed: String = flag(&args, "--speed").unwrap_or_else(|| "10x".into());
    let minutes: u64 = flag(&args, "--minutes").unwrap_or(60);
    let sample: u64 = flag(&args, "--sample").unwrap_or(60);
    let causeway: PathBuf =
        flag(&args, "--causeway").unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_causeway")));
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    let dir = data.join(format!("soak-{messages}"));
    let capture = dir.join("mirror.pcap.gz");
    if !capture.is_file() {
        eprintln!("generating {messages} messages into {}", dir.display());
        let status = Command::new(&causeway)
            .args([
                "generate",
                "--preset",
                "multi-tier",
                "--gzip",
                "--seed",
                "1",
            ])
            .args(["--messages", &messages.to_string()])
            .arg("-o")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success(), "generate failed");
    }
    // Named by this harness's pid, so that several soaks can run side by side.
    let me = std::process::id();
    let out = dir.join(format!("soak-{me}.jsonl"));
    let log_path = dir.join(format!("soak-{me}.stderr"));
    let log = std::fs::File::create(&log_path).unwrap();
    println!("output {}, log {}", out.display(), log_path.display());
    let mut child = Command::new(&causeway)
        .args(["analyze", "--speed", &speed])
        .args(["--duration", &format!("{minutes}m")])
        .args(["--emit", "patterns,stats", "--emit-every", "60s"])
        .args(["--format", "jsonl", "-o"])
        .arg(&out)
        .arg("--names")
        .arg(dir.join("names.txt"))
        .args(&extra)
        .arg(&capture)
        .env(
            "CAUSEWAY_LOG",
            std::env::var("CAUSEWAY_LOG")
                .unwrap_or_else(|_| "warn,causeway_operators::paths::build=debug".into()),
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let pid = child.id();
    println!(
        "{:>6} {:>10} {:>10} {:>12} {:>10} {:>9} {:>10}",
        "minute", "RSS MiB", "HWM MiB", "packets", "trace h", "patterns", "table MiB"
    );
    let start = Instant::now();
    let mut first_ns: Option<u64> = None;
    let mut reader_pos = 0u64;
    let mut progress = (0u64, 0u64);
    let mut next = Duration::from_secs(sample);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "analyze failed: {status}");
            break;
        }
        if start.elapsed() < next {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        next += Duration::from_secs(sample);
        let (rss, hwm) = memory(pid);
        read_stats(&out, &mut reader_pos, &mut progress, &mut first_ns);
        let hours = first_ns.map_or(0.0, |f| progress.1.saturating_sub(f) as f64 / 3.6e12);
        let (patterns, table_kib) = pattern_table(&log_path);
        println!(
            "{:>6.1} {:>10.1} {:>10.1} {:>12} {:>10.2} {:>9} {:>10.1}",
            start.elapsed().as_secs_f64() / 60.0,
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0,
            progress.0,
            hours,
            patterns,
            table_kib as f64 / 1024.0
        );
    }
    read_stats(&out, &mut reader_pos, &mut progress, &mut first_ns);
    println!(
        "finished after {:.1} min; {} packets read",
        start.elapsed().as_secs_f64() / 60.0,
        progress.0
    );
}

/// The latest size of the pattern table that `paths` logged (at debug level, every
/// snapshot): (patterns, KiB).
fn pattern_table(log: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("causeway: debug: paths: "))
        .find_map(|l| {
            let (n, rest) = l.split_once(" patterns hold ")?;
            Some((n.parse().ok()?, rest.strip_suffix(" KiB")?.parse().ok()?))
        })
        .unwrap_or((0, 0))
}

/// VmRSS and VmHWM of `pid`, KiB.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Reads the `stats` records written since the last call: (packets read, last_ns).
fn read_stats(out: &Path, pos: &mut u64, progress: &mut (u64, u64), first: &mut Option<u64>) {
    let Ok(mut f) = std::fs::File::open(out) else {
        return;
    };
    f.seek(SeekFrom::Start(*pos)).unwrap();
    let mut reader = BufReader::new(f);
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap_or(0) > 0 {
        if !line.ends_with('\n') {
            break;
        }
        *pos += line.len() as u64;
        if line.contains("\"kind\":\"stats\"") {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                let records = v["records"].as_u64().unwrap_or(0);
                let last = v["last_ns"].as_u64().unwrap_or(0);
                if first.is_none() {
                    *first = v["first_ns"].as_u64();
                }
                *progress = (records.max(progress.0), last.max(progress.1));
            }
        }
        line.clear();
    }
}
