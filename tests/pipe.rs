//! End-to-end test of a live capture piped in: `tcpdump -U -w - | causeway analyze -`. When
//! the traffic stops but tcpdump keeps running, the pipe goes quiet without ending; with
//! `--pipe-idle` the watermark moves on with the host's clock and the patterns are reported
//! while the pipe is still open; without it they wait for the end of the input.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;

/// Runs tcpdump on loopback into `causeway analyze - --pipe-idle IDLE`, sends 50 exchanges,
/// then waits up to `wait` for a cumulative pattern while tcpdump still runs. Returns how long
/// after the traffic the first pattern came (None: not before the wait was over), and the
/// patterns of the whole run once tcpdump is stopped.
fn quiet_pipe(idle: &str, wait: Duration) -> (Option<Duration>, Vec<(String, u64, f64)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut tcpdump = Sniffer::start_with(
        "tcpdump",
        &["-i", "lo", "-U", "-w", "-", "tcp", "port", &port],
        Stdio::piped(),
    );
    let mut analyze = Command::new(bin())
        .args(["analyze", "--format", "jsonl", "--emit", "patterns,stats"])
        .args(["--emit-every", "1s", "--pipe-idle", idle])
        // One sniffer, one clock: as little lateness as a live run.
        .args(["--lateness", "250ms", "--reconcile-window", "250ms", "-"])
        .stdin(Stdio::from(tcpdump.stdout().unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(analyze.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel::<serde_json::Value>();
    let reader = std::thread::spawn(move || {
        for line in stdout.lines() {
            let _ = tx.send(serde_json::from_str(&line.unwrap()).unwrap());
        }
    });
    loopback_traffic(listener, udp, 50);
    let quiet_since = Instant::now();
    let mut records = Vec::new();
    let mut first = None;
    while first.is_none() && quiet_since.elapsed() < wait {
        if let Ok(r) = rx.recv_timeout(Duration::from_millis(50)) {
            if r["kind"] == "pattern" && r["cumulative"] == true && r["count"].as_u64() > Some(0) {
                first = Some(quiet_since.elapsed());
            }
            records.push(r);
        }
    }
    tcpdump.stop();
    let status = analyze.wait().unwrap();
    assert!(status.success(), "analyze: {status}");
    reader.join().unwrap();
    records.extend(rx.try_iter());
    (first, final_patterns(&records))
}

#[test]
fn a_quiet_pipe_from_a_live_tcpdump_is_reported_before_it_ends() {
    if !system_tools(&["tcpdump"]) {
        return;
    }
    let (came, patterns) = quiet_pipe("1s", Duration::from_secs(20));
    let came = came.expect("no pattern while the pipe was quiet, within 20 s");
    println!("--pipe-idle 1s: first pattern {came:?} after the traffic");
    // The 50 request/response exchanges on one connection.
    let total: u64 = patterns.iter().map(|p| p.1).sum();
    assert!(total >= 45, "{patterns:?}");
    // Without it, nothing is reported until tcpdump stops, though the same messages are then.
    let (early, without) = quiet_pipe("0s", came * 2 + Duration::from_secs(2));
    assert_eq!(
        early, None,
        "--pipe-idle 0s reported while the pipe was open"
    );
    // Every message is in a pattern either way. (Which patterns is a matter of timing on a
    // loaded machine: a response that comes more than --max-delay after its request, live, is
    // rightly not linked to it, and the run that happened to see that has one more pattern.)
    assert_eq!(
        messages(&without),
        messages(&patterns),
        "{without:?} vs {patterns:?}"
    );
}

/// How many messages the instances of `patterns` hold (a canonical name has one `>` per
/// message).
fn messages(patterns: &[(String, u64, f64)]) -> u64 {
    patterns
        .iter()
        .map(|(name, count, _)| count * name.matches('>').count() as u64)
        .sum()
}

/// A capture read through a pipe gives what the same file gives: every packet, in order, the
/// same patterns and the same counts.
#[test]
fn a_capture_piped_in_gives_what_its_file_gives() {
    let dir = scratch("pipe-file");
    generate(
        &dir,
        &[
            "--preset",
            "multi-tier",
            "--messages",
            "4000",
            "--sniffers",
            "single",
        ],
    );
    let capture = dir.join("mirror.pcap");
    let names = dir.join("names.txt").display().to_string();
    let args = [
        "analyze",
        "--format",
        "jsonl",
        "--emit",
        "patterns,stats",
        "--names",
        &names,
    ];
    let from_file = causeway_jsonl(&[&args[..], &[capture.to_str().unwrap()]].concat());
    let mut piped = Command::new(bin())
        .args(args)
        .arg("mirror=-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = piped.stdin.take().unwrap();
    let bytes = std::fs::read(&capture).unwrap();
    // Written in uneven pieces, as a pipe delivers them.
    let writer = std::thread::spawn(move || {
        for piece in bytes.chunks(7_919) {
            std::io::Write::write_all(&mut stdin, piece).unwrap();
        }
    });
    let out = piped.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success());
    let from_pipe: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let patterns = final_patterns(&from_file);
    assert!(patterns.len() >= 4, "{patterns:?}");
    assert_eq!(final_patterns(&from_pipe), patterns);
    let (a, b) = (
        stats_of(&from_file, "mirror"),
        stats_of(&from_pipe, "mirror"),
    );
    for field in ["records", "bytes", "first_ns", "last_ns", "late", "tcp"] {
        assert_eq!(a[field], b[field], "{field}");
    }
    assert!(a["records"].as_u64() > Some(10_000), "{a}");
}
