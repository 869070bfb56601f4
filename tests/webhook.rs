//! `--sink webhook:URL` driven through the real binary, with a Python receiver
//! (tests/webhook_receiver.py) on 127.0.0.1 that is down for 30 s in the middle of a run.
//!
//! The alerts are real: a TCP statistics log (`ss -tin` blocks, written here) in which 90
//! groups of four connections, one group starting every 0.5 s, are send-buffer limited
//! together; `correlate` raises one alert per group. Replayed at `--speed 1`, the run sends
//! two alerts a second for about 46 s. Run with `--nocapture` to see the figures:
//! `cargo test --test webhook -- --nocapture`

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const RECEIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/webhook_receiver.py");

struct Receiver {
    child: Child,
    port: u16,
}

impl Receiver {
    fn start(port: u16, log: &Path) -> Receiver {
        let mut child = Command::new("python3")
            .arg(RECEIVER)
            .args(["--port", &port.to_string(), "--log"])
            .arg(log)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs tests/webhook_receiver.py (is python3 installed?)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("receiver said {line:?}"))
            .parse()
            .unwrap();
        Receiver { child, port }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An `ss -tin` log: `groups` groups of four connections (host 10.9.G.1 to 10.9.G.2, port
/// 5000+G), group G alive for 8 s from G * `gap_s`, send-buffer limited together 2 s on, 2 s
/// off, sampled every 0.25 s.
fn ss_log(groups: usize, gap_s: f64) -> String {
    let (t0, step, life) = (1_795_305_858.0_f64, 0.25_f64, 8.0_f64);
    let end = (groups as f64 - 1.0) * gap_s + life + 2.0;
    let mut limited: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    let mut out = String::new();
    let mut i = 0u32;
    while f64::from(i) * step <= end {
        let t = f64::from(i) * step;
        writeln!(out, "### {:.9}", t0 + t).unwrap();
        out.push_str("State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n");
        for g in 0..groups {
            let start = g as f64 * gap_s;
            if t < start || t >= start + life {
                continue;
            }
            let age = t - start;
            let on = (age as u64 / 2) % 2 == 0;
            for c in 0..4 {
                let l = limited.entry((g, c)).or_default();
                if on {
                    *l += 200;
                }
                writeln!(
                    out,
                    "ESTAB  0      89776  10.9.{g}.1:{}    10.9.{g}.2:{}\n\t cubic wscale:7,7 \
                     rto:204 rtt:1.5/0.5 mss:1448 cwnd:10 busy:{:.0}ms sndbuf_limited:{l}ms \
                     retrans:0/0",
                    40_000 + c,
                    5_000 + g,
                    (age + step) * 1000.0,
                )
                .unwrap();
            }
        }
        i += 1;
    }
    out
}

fn received(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The counts of the sink's last line on stderr: delivered, retried, pending, dropped, rejected.
fn report(stderr: &str) -> BTreeMap<String, u64> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("causeway: webhook "))
        .unwrap_or_else(|| panic!("no webhook report in {stderr}"));
    let counts = line.split_once("/alerts: ").unwrap().1;
    let counts = counts.split(" (").next().unwrap();
    counts
        .split(", ")
        .map(|kv| {
            let (k, v) = kv.split_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

fn analyze(log: &Path, out: &Path, url: &str, queue: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(common::bin());
    cmd.args([
        "analyze",
        "--emit",
        "problems",
        "--correlation-window",
        "10s",
        "--format",
        "jsonl",
        "--progress",
        "never",
        "-o",
    ])
    .arg(out)
    .arg("--sink")
    .arg(format!("webhook:{url}"))
    .arg("--webhook-queue")
    .arg(queue)
    .args(extra)
    .arg(log)
    .stderr(Stdio::piped());
    cmd
}

/// The alerts of a run's JSON lines, by message.
fn alerts(out: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["kind"] == "alert")
        .map(|v| v["message"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn binary_alerts_survive_a_receiver_down_for_30_s() {
    let dir = common::scratch("webhook-outage");
    let log = dir.join("ss.log");
    std::fs::write(&log, ss_log(90, 0.5)).unwrap();
    let got_log = dir.join("received.jsonl");
    let receiver = Receiver::start(0, &got_log);
    let port = receiver.port;
    let url = format!("http://127.0.0.1:{port}/alerts");
    let out = dir.join("out.jsonl");
    let start = Instant::now();
    let mut run = analyze(
        &log,
        &out,
        &url,
        &dir.join("queue"),
        &[
            "--speed",
            "1",
            "--webhook-drain",
            "20s",
            "--webhook-timeout",
            "2s",
        ],
    )
    .spawn()
    .unwrap();
    let stderr = run.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());

    // The first alerts come out about 8 s in (5 s of event time, plus the lateness), the last
    // about 54 s in: the receiver is down for the middle 30 s.
    std::thread::sleep(Duration::from_millis(12_500).saturating_sub(start.elapsed()));
    drop(receiver);
    let down_at = start.elapsed();
    std::thread::sleep(Duration::from_millis(42_500).saturating_sub(start.elapsed()));
    let receiver = Receiver::start(port, &got_log);
    let up_at = start.elapsed();
    let up_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    // Bounded: the replay takes about 56 s, the drain at most 20 s more.
    let status = loop {
        if let Some(s) = run.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(150) {
            let _ = run.kill();
            panic!("causeway did not finish within 150 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let took = start.elapsed();
    let stderr = err_reader.join().unwrap();
    assert!(status.success(), "{stderr}");
    drop(receiver);

    let sent = alerts(&out);
    let got = received(&got_log);
    let mut ids = BTreeSet::new();
    let mut by_message: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut duplicates = 0;
    for r in &got {
        assert_eq!(r["key"], r["alert_id"]);
        let id = r["alert_id"].as_str().unwrap().to_owned();
        if !ids.insert(id.clone()) {
            duplicates += 1;
        }
        by_message
            .entry(r["message"].as_str().unwrap().to_owned())
            .or_default()
            .insert(id);
    }
    let counts = report(&stderr);
    let unknown: Vec<&String> = by_message.keys().filter(|m| !sent.contains(*m)).collect();
    let missing = sent.iter().filter(|m| !by_message.contains_key(*m)).count() as u64;
    let arrivals: Vec<f64> = got.iter().filter_map(|r| r["t"].as_f64()).collect();
    let before = arrivals.iter().filter(|t| **t < up_unix).count();
    // After the receiver came back: its first request, and the last of the backlog (the
    // alerts raised while it was down), from the receiver's clock.
    let back: Vec<f64> = arrivals
        .iter()
        .map(|t| t - up_unix)
        .filter(|d| *d >= 0.0)
        .collect();
    let first_back = back.iter().copied().fold(f64::MAX, f64::min);
    eprintln!(
        "webhook via causeway: {} alerts in the output, receiver down {:.1}-{:.1} s; received \
         {} requests ({before} before the outage), {} distinct alerts, {duplicates} \
         duplicates; missing {missing}; {counts:?}; run took {:.1} s; first delivery {:.1} s \
         after the receiver came back",
        sent.len(),
        down_at.as_secs_f64(),
        up_at.as_secs_f64(),
        got.len(),
        by_message.len(),
        took.as_secs_f64(),
        first_back,
    );
    assert!(sent.len() >= 80, "alerts raised: {}", sent.len());
    assert!(unknown.is_empty(), "{unknown:?}");
    assert!(by_message.values().all(|ids| ids.len() == 1));
    // Every alert arrived, or is counted as left in the queue, dropped or rejected.
    assert_eq!(
        missing,
        counts["pending"] + counts["dropped"] + counts["rejected"],
        "{counts:?}"
    );
    assert_eq!(counts["delivered"], by_message.len() as u64);
    assert_eq!(
        counts["pending"] + counts["dropped"] + counts["rejected"],
        0
    );
    assert!(counts["retried"] > 0);
    assert!(before > 0, "some alerts went before the outage");
    assert!(first_back < 13.0, "backoff is capped at 10 s: {first_back}");
    assert!(duplicates as u64 <= counts["retried"]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn binary_pending_alerts_are_sent_by_the_next_run() {
    let dir = common::scratch("webhook-restart");
    let log = dir.join("ss.log");
    std::fs::write(&log, ss_log(2, 0.5)).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/alerts");
    let queue = dir.join("queue");
    let quick = ["--webhook-drain", "1s", "--webhook-timeout", "1s"];

    // Nobody listening: the run ends with its alerts left in the queue.
    let first = analyze(&log, &dir.join("1.jsonl"), &url, &queue, &quick)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{stderr}");
    let counts = report(&stderr);
    let sent = alerts(&dir.join("1.jsonl"));
    assert_eq!(sent.len(), 2);
    assert_eq!((counts["delivered"], counts["pending"]), (0, 2), "{stderr}");
    assert!(stderr.contains("for the next run"), "{stderr}");

    // The next run delivers them, and its own.
    let got_log = dir.join("received.jsonl");
    let _receiver = Receiver::start(port, &got_log);
    let second = analyze(&log, &dir.join("2.jsonl"), &url, &queue, &quick)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    let counts = report(&stderr);
    assert_eq!((counts["delivered"], counts["pending"]), (4, 0), "{stderr}");
    let got = received(&got_log);
    let ids: BTreeSet<&str> = got
        .iter()
        .map(|r| r["alert_id"].as_str().unwrap())
        .collect();
    assert_eq!((got.len(), ids.len()), (4, 4));
    let messages: BTreeSet<&str> = got.iter().map(|r| r["message"].as_str().unwrap()).collect();
    assert_eq!(messages.len(), 2, "each alert of both runs: {messages:?}");
    std::fs::remove_dir_all(dir).ok();
}
