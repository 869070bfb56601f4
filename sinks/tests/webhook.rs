//! The webhook sink under faults, against a real HTTP receiver (tests/webhook_receiver.py,
//! python3) on 127.0.0.1: a receiver that is down for 30 s in the middle of 45 s of alerts,
//! alerts left pending and sent by the next run, rejections, retries and a full queue.
//!
//! Run with `--nocapture` to see the figures:
//! `cargo test -p causeway-sinks --test webhook -- --nocapture`

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use causeway_operators::Alert;
use causeway_sinks::webhook::{Backoff, Webhook, WebhookOptions, WebhookReport, queue_dir};
use causeway_sinks::{Record, Sink};
use causeway_sources::Origins;
use serde_json::Value;

const RECEIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/webhook_receiver.py");

/// A receiver process; killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
}

impl Receiver {
    fn start(port: u16, log: &Path, extra: &[&str]) -> Receiver {
        let mut child = Command::new("python3")
            .arg(RECEIVER)
            .args(["--port", &port.to_string(), "--log"])
            .arg(log)
            .args(extra)
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

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn alert(i: usize) -> Record {
    Record::Alert(Alert {
        source: "test".into(),
        severity: "warning".into(),
        message: format!("alert {i}"),
        time_ns: 1_000 + i as u64,
        correlation: None,
        rule: None,
    })
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("causeway-webhook-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A port nothing listens on (for now).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The receiver's log: one object per request it answered 2xx.
fn received(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Checks every logged request and returns (alert message -> alert ids, duplicates).
fn check_requests(got: &[Value]) -> (BTreeMap<String, BTreeSet<String>>, usize) {
    let mut by_message: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    let mut duplicates = 0;
    for r in got {
        assert_eq!(r["content_type"], "application/json", "{r}");
        assert_eq!(r["kind"], "alert", "{r}");
        assert_eq!(r["schema"], 1, "{r}");
        assert_eq!(
            r["key"], r["alert_id"],
            "Idempotency-Key is the alert id: {r}"
        );
        let id = r["alert_id"].as_str().unwrap().to_owned();
        if !ids.insert(id.clone()) {
            duplicates += 1;
        }
        by_message
            .entry(r["message"].as_str().unwrap().to_owned())
            .or_default()
            .insert(id);
    }
    (by_message, duplicates)
}

fn options(base: &Path) -> WebhookOptions {
    WebhookOptions {
        queue_base: Some(base.to_owned()),
        ..WebhookOptions::default()
    }
}

fn json_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".json"))
            })
            .count()
        })
        .unwrap_or(0)
}

/// The Must show: alerts sent steadily for 45 s (one every 0.5 s), the receiver down from
/// 7.5 s to 37.5 s. Every alert arrives, once after dedup by id; nothing is dropped or left.
#[test]
fn alerts_survive_a_receiver_down_for_30_s() {
    let dir = temp("outage");
    let log = dir.join("received.jsonl");
    let receiver = Receiver::start(0, &log, &[]);
    let port = receiver.port;
    let url = format!("http://127.0.0.1:{port}/alerts");
    let mut opts = options(&dir.join("queue"));
    opts.timeout = Duration::from_secs(2);
    opts.drain = Duration::from_secs(20);
    let mut sink = Webhook::start(&url, &opts, Origins::new()).unwrap();

    let total = 90;
    let every = Duration::from_millis(500);
    let (down_at, up_at) = (Duration::from_millis(7_500), Duration::from_millis(37_500));
    let start = Instant::now();
    let mut receiver = Some(receiver);
    let mut came_back: Option<Instant> = None;
    let mut drained_after: Option<Duration> = None;
    let mut most_pending = 0;
    let mut sent = 0;
    while sent < total {
        let now = start.elapsed();
        if now >= down_at && came_back.is_none() {
            if let Some(r) = receiver.take() {
                r.kill();
            }
        }
        if now >= up_at && came_back.is_none() {
            receiver = Some(Receiver::start(port, &log, &[]));
            came_back = Some(Instant::now());
        }
        if now >= every * sent as u32 {
            sink.write(&alert(sent)).unwrap();
            sent += 1;
        }
        let report = sink.report();
        most_pending = most_pending.max(report.pending);
        if drained_after.is_none() && report.pending == 0 {
            drained_after = came_back.map(|up| up.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let finishing = Instant::now();
    sink.finish().unwrap();
    let finish_took = finishing.elapsed();
    let report = sink.report();
    let up = came_back.unwrap();
    if drained_after.is_none() && report.pending == 0 {
        drained_after = Some(up.elapsed() - finish_took);
    }

    let got = received(&log);
    let (by_message, duplicates) = check_requests(&got);
    let missing: Vec<usize> = (0..total)
        .filter(|i| !by_message.contains_key(&format!("alert {i}")))
        .collect();
    // One id per alert, whatever was resent.
    assert!(by_message.values().all(|ids| ids.len() == 1));
    let backlog_done = got
        .iter()
        .filter_map(|r| r["t"].as_f64())
        .fold(f64::MIN, f64::max);
    eprintln!(
        "webhook outage: sent {sent} over {:.1} s, receiver down {:.1} s; received {} requests, \
         {} distinct alerts, {duplicates} duplicates, missing {missing:?}; {report:?}; \
         most pending {most_pending}; queue drained {:.2} s after the receiver came back; \
         finish took {:.2} s; last arrival at unix {backlog_done:.3}",
        (every * (total as u32 - 1)).as_secs_f64(),
        (up_at - down_at).as_secs_f64(),
        got.len(),
        by_message.len(),
        drained_after.map_or(f64::NAN, |d| d.as_secs_f64()),
        finish_took.as_secs_f64(),
    );
    assert_eq!(
        report.dropped + report.pending + report.rejected,
        0,
        "{report:?}"
    );
    assert!(missing.is_empty(), "missing {missing:?}");
    assert_eq!(by_message.len(), total);
    assert_eq!(report.delivered as usize, total);
    assert!(report.retried > 0, "the outage was noticed: {report:?}");
    // Each duplicate needs an attempt that failed after the receiver had taken it.
    assert!(duplicates as u64 <= report.retried);
    assert!(
        most_pending >= 55,
        "alerts queued during the outage: {most_pending}"
    );
    // Backoff is capped at 10 s: the backlog goes within a cap and a little after return.
    let drained = drained_after.expect("drained");
    assert!(drained < Duration::from_secs(12), "{drained:?}");
    assert_eq!(json_files(&queue_dir(&dir.join("queue"), &url)), 0);
    drop(receiver);
    std::fs::remove_dir_all(dir).ok();
}

/// Alerts a run could not deliver stay in the queue and are sent by the next run on it.
#[test]
fn pending_alerts_are_sent_by_the_next_run() {
    let dir = temp("restart");
    let log = dir.join("received.jsonl");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/alerts");
    let mut opts = options(&dir.join("queue"));
    opts.drain = Duration::from_millis(500);
    opts.timeout = Duration::from_secs(1);

    let first_ids;
    {
        let mut sink = Webhook::start(&url, &opts, Origins::new()).unwrap();
        first_ids = sink.run_id().to_owned();
        for i in 0..5 {
            sink.write(&alert(i)).unwrap();
        }
        sink.finish().unwrap();
        let report = sink.report();
        assert_eq!(
            (report.delivered, report.pending, report.dropped),
            (0, 5, 0),
            "{report:?}"
        );
        assert_eq!(json_files(&sink.queue_dir()), 5);
    }

    let _receiver = Receiver::start(port, &log, &[]);
    let mut sink = Webhook::start(&url, &opts, Origins::new()).unwrap();
    assert_ne!(sink.run_id(), first_ids);
    assert_eq!(sink.report().recovered, 5);
    sink.write(&alert(5)).unwrap();
    sink.finish().unwrap();
    let report = sink.report();
    assert_eq!(
        report,
        WebhookReport {
            delivered: 6,
            recovered: 5,
            ..report
        }
    );
    assert_eq!((report.pending, report.dropped, report.rejected), (0, 0, 0));
    assert_eq!(json_files(&sink.queue_dir()), 0);
    let got = received(&log);
    let (by_message, duplicates) = check_requests(&got);
    assert_eq!(duplicates, 0);
    assert_eq!(by_message.len(), 6);
    // In order, the old run's ids first.
    let ids: Vec<&str> = got
        .iter()
        .map(|r| r["alert_id"].as_str().unwrap())
        .collect();
    for (i, id) in ids.iter().enumerate().take(5) {
        assert_eq!(*id, format!("{first_ids}-{}", i + 1));
    }
    assert!(ids[5].starts_with(sink.run_id()));
    eprintln!("webhook restart: {report:?}");
    std::fs::remove_dir_all(dir).ok();
}

/// 503s are retried, 4xx rejected for good, a full queue drops the newest: all counted.
#[test]
fn retries_rejections_and_a_full_queue_are_counted() {
    let dir = temp("counts");
    // Three 503s, then 200.
    let log = dir.join("retry.jsonl");
    let receiver = Receiver::start(0, &log, &["--fail-first", "3"]);
    let url = format!("http://127.0.0.1:{}/a", receiver.port);
    let mut opts = options(&dir.join("queue"));
    opts.backoff = Backoff {
        first: Duration::from_millis(20),
        max: Duration::from_millis(200),
    };
    let mut sink = Webhook::start(&url, &opts, Origins::new()).unwrap();
    sink.write(&alert(0)).unwrap();
    sink.finish().unwrap();
    let r = sink.report();
    assert_eq!((r.delivered, r.retried, r.pending), (1, 3, 0), "{r:?}");
    assert_eq!(received(&log).len(), 1);
    drop(receiver);

    // 400: rejected, not retried.
    let receiver = Receiver::start(0, &dir.join("reject.jsonl"), &["--status", "400"]);
    let url = format!("http://127.0.0.1:{}/a", receiver.port);
    let mut sink = Webhook::start(&url, &opts, Origins::new()).unwrap();
    for i in 0..3 {
        sink.write(&alert(i)).unwrap();
    }
    sink.finish().unwrap();
    let r = sink.report();
    assert_eq!(
        (r.delivered, r.rejected, r.retried, r.pending),
        (0, 3, 0, 0)
    );
    assert_eq!(json_files(&sink.queue_dir()), 0);
    drop(receiver);

    // Nobody listening, room for 2: 2 pending, 3 dropped.
    let url = format!("http://127.0.0.1:{}/a", free_port());
    opts.max_entries = 2;
    opts.drain = Duration::from_millis(200);
    let mut sink = Webhook::start(&url, &opts, Origins::new()).unwrap();
    for i in 0..5 {
        sink.write(&alert(i)).unwrap();
    }
    sink.finish().unwrap();
    let r = sink.report();
    assert_eq!((r.delivered, r.pending, r.dropped), (0, 2, 3), "{r:?}");
    assert_eq!(json_files(&sink.queue_dir()), 2);
    std::fs::remove_dir_all(dir).ok();
}
