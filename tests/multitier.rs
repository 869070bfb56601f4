//! End-to-end test of a real multi-tier system, judged against the programs' own logs.
//!
//! `tests/multitier/system.py` builds it in network namespaces of its own: a client, a
//! router whose iptables DNAT spreads a virtual IP over two nginx servers, which proxy over
//! keep-alive upstream connections to a threaded python application server, which calls
//! redis and postgres. The client, both nginx and the application run under the preload
//! library (one capture directory); redis and postgres are not traced; tcpdump captures at
//! every host. Each request's true path (its kind and the nginx that served it) comes from
//! the client's and the application's logs. The test runs `analyze` on the socket-call logs
//! and on the captures, and `tests/multitier/score.py` matches each request to the instance
//! rooted at its client message.
//!
//! Asserted, for each: both DNAT mappings reported; all eight true patterns (two nginx ×
//! four request kinds) found; the share of requests whose instance is exactly their path;
//! each pattern's count against the truth; the application's time per request against its
//! own log; the one-way latency between nginx and the application; for the socket logs, how
//! few calls are skipped as `unnamed_socket`. Thresholds are what twenty runs measured, with
//! margin (docs/notes/2026-11-30-multitier.md gives the figures); they are looser than the
//! issue's 5% on the counts, which is not met yet.
//!
//! Every load is bounded in count and time; the driver removes what it created, passing or
//! failing.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

/// What `tests/multitier/system.py` runs.
const NEEDED: [&str; 7] = [
    "ip",
    "iptables",
    "nginx",
    "python3",
    "redis-server",
    "tcpdump",
    "runuser",
];

/// Requests the client makes (about 1.5 s of load).
const REQUESTS: u64 = 1300;

/// The tests' systems run one at a time: two at once on a small machine slow each other's
/// programs, and the first test compares the application's time per request with its log
/// (23% off with the loss test's twelve clients beside it, against 2-9% alone).
static ONE_SYSTEM: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_system() -> std::sync::MutexGuard<'static, ()> {
    ONE_SYSTEM.lock().unwrap_or_else(|e| e.into_inner())
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/multitier")
        .join(name)
}

/// Runs `system.py` as `command` sets it up, failing the test with its output if it fails;
/// prints its summary.
fn system_py(command: &mut Command) {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "system.py failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&out.stdout).trim());
}

/// Runs the system once: returns (truth, capture directory, the captures).
fn run_system(dir: &Path) -> (PathBuf, PathBuf, Vec<String>) {
    let (truth, cap, pcap, work) = (
        dir.join("truth.jsonl"),
        dir.join("cap"),
        dir.join("pcap"),
        dir.join("work"),
    );
    let lib = bin().parent().unwrap().join("libcauseway_preload.so");
    assert!(
        lib.is_file(),
        "{} missing: `cargo build` builds it with the binary",
        lib.display()
    );
    system_py(
        Command::new("python3")
            .arg(script("system.py"))
            .args(["--requests", &REQUESTS.to_string(), "--duration", "60"])
            .arg("--preload")
            .arg(&lib)
            .arg("--capture-dir")
            .arg(&cap)
            .arg("--pcap-dir")
            .arg(&pcap)
            .arg("--truth")
            .arg(&truth)
            .arg("--workdir")
            .arg(&work),
    );
    (truth, cap, pcaps_in(&pcap))
}

/// `analyze` of `inputs` into `out`, scored against `truth`.
fn analyze_and_score(inputs: &[String], out: &Path, truth: &Path) -> Value {
    let mut args = vec![
        "analyze",
        "--format",
        "jsonl",
        "--emit",
        "patterns,instances,messages,nat,stats",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend(inputs.iter().map(String::as_str));
    let o = causeway(&args);
    assert!(
        o.status.success(),
        "analyze failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let scored = Command::new("python3")
        .arg(script("score.py"))
        .arg(truth)
        .arg(out)
        .output()
        .unwrap();
    assert!(
        scored.status.success(),
        "score.py failed: {}",
        String::from_utf8_lossy(&scored.stderr)
    );
    serde_json::from_slice(&scored.stdout).unwrap()
}

/// What both analyses must show; `likeliest_error` is the largest relative error allowed of
/// a pattern's likeliest count (the requests whose most probable path it is: over 68 runs
/// with each call type's spontaneous share learned, socket logs 3.5% at worst, captures
/// 7.1%, in 66 of them within 5%), `count_error` of its count (every instance of a
/// try-both decision; socket logs 3.0% at worst, captures 5.8%),
/// docs/notes/2026-11-30-spontaneity.md;
/// `min_correct` the share of requests on exactly their path,
/// `app_error` (if given) the largest relative error of the application's time per request
/// against its log (where it makes calls: a static answer's 0.1 ms is mostly the
/// interpreter's own, which its log does not see).
fn check(
    what: &str,
    s: &Value,
    min_correct: f64,
    (likeliest_error, count_error): (f64, f64),
    app_error: Option<f64>,
) {
    eprintln!("{what}: {s}");
    let requests = s["requests"].as_f64().unwrap();
    assert!(
        requests >= REQUESTS as f64 * 0.99,
        "{what}: {requests} requests answered"
    );
    let nat: Vec<&str> = s["nat"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for real in ["10.78.2.11:8080", "10.78.2.12:8080"] {
        let mapping = format!("10.78.1.100:80 -> {real}");
        assert!(
            nat.contains(&mapping.as_str()),
            "{what}: {mapping} not in {nat:?}"
        );
    }
    let correct = s["correct"].as_f64().unwrap() / requests;
    assert!(
        correct >= min_correct,
        "{what}: {:.1}% of requests on exactly their path",
        100.0 * correct
    );
    let patterns = s["patterns"].as_object().unwrap();
    assert_eq!(patterns.len(), 8, "{what}: true patterns {patterns:?}");
    for (name, p) in patterns {
        let truth = p["truth"].as_f64().unwrap();
        let inferred = p["inferred"].as_f64().unwrap();
        assert!(inferred > 0.0, "{what}: {name} not found");
        assert!(
            (inferred - truth).abs() / truth <= count_error,
            "{what}: {name} counted {inferred} times, truly {truth}"
        );
        let likeliest = p["likeliest"].as_f64().unwrap();
        assert!(
            (likeliest - truth).abs() / truth <= likeliest_error,
            "{what}: {name} the likeliest path of {likeliest} requests, truly {truth}"
        );
        // The application's own time per request, as its log and as the paths say.
        let Some(app_error) = app_error.filter(|_| !name.ends_with("/static")) else {
            continue;
        };
        let log = p["app_log_ms"].as_f64().unwrap();
        let inferred = p["app_inferred_ms"].as_f64().unwrap();
        assert!(
            (inferred - log).abs() / log <= app_error,
            "{what}: {name}: the application takes {inferred} ms per request by the paths, \
             {log} ms by its log"
        );
    }
    // The bridge's real one-way latency is about 0.05 ms; pairing the wrong messages of a
    // keep-alive connection made it seconds. From socket logs a message's latency also holds
    // its receiver's wait for a core and for the interpreter, which on a loaded 2-core
    // machine makes the tail milliseconds (p99 3.1 ms in CI run 74, the app's first request
    // on a connection 29-36 ms as its thread starts), so the median is held to the wire, the
    // tail only far below a wrong pairing, and the pairing itself to the app's own log.
    let p50 = s["bridge_ms"]["p50"].as_f64().unwrap();
    let p99 = s["bridge_ms"]["p99"].as_f64().unwrap();
    assert!(p50 < 0.2, "{what}: nginx ↔ app latency p50 {p50} ms");
    assert!(p99 < 20.0, "{what}: nginx ↔ app latency p99 {p99} ms");
    if app_error.is_some() {
        // A request's arrival at the app and its answer's departure, as its instance has
        // them, within 1 ms of the app's log (run 74: 1278 of 1285; the 7 others had the
        // request line read 1.2-2.2 ms after the request's first bytes).
        let n = s["app_end"]["n"].as_f64().unwrap();
        let agree = s["app_end"]["agree"].as_f64().unwrap();
        assert!(
            agree >= 0.98 * n,
            "{what}: {agree} of {n} instances have the app's ends where its log has them"
        );
    }
}

#[test]
fn a_load_balanced_multi_tier_system_from_socket_logs_and_captures() {
    if !system_tools(&NEEDED) {
        return;
    }
    let _one = one_system();
    let dir = scratch("multitier");
    let (truth, cap, pcaps) = run_system(&dir);
    assert_eq!(pcaps.len(), 6, "a capture per host: {pcaps:?}");

    let logs = analyze_and_score(
        &[cap.to_str().unwrap().to_owned()],
        &dir.join("cap.jsonl"),
        &truth,
    );
    check("socket logs", &logs, 0.97, (0.08, 0.08), Some(0.20));
    // The calls left unnamed: nginx's master↔worker channel (a socket pair) only.
    let unnamed = logs["skipped"]["unnamed_socket"].as_u64().unwrap_or(0);
    assert!(unnamed <= 16, "{unnamed} calls on unnamed sockets");

    // From packets, the application's time is its host's (from the request's arrival at
    // its interface), which its log cannot see: not compared.
    let captures = analyze_and_score(&pcaps, &dir.join("pcap.jsonl"), &truth);
    check("captures", &captures, 0.93, (0.12, 0.15), None);
}

/// Per hop (sender, receiver) of the final cumulative patterns: the messages TCP evidence
/// covered and those sent while their connection lost data (fast retransmissions or
/// timeouts).
fn loss_on_hops(records: &[Value]) -> std::collections::BTreeMap<(String, String), (f64, f64)> {
    fn walk(node: &Value, out: &mut std::collections::BTreeMap<(String, String), (f64, f64)>) {
        if let Some(tcp) = node.get("tcp") {
            let key = (
                node["src"].as_str().unwrap().to_owned(),
                node["dst"].as_str().unwrap().to_owned(),
            );
            let affected = |p: &str| tcp["problems"][p]["messages"].as_f64().unwrap_or(0.0);
            let e = out.entry(key).or_default();
            e.0 += tcp["messages"].as_f64().unwrap();
            e.1 += affected("fast_retransmit") + affected("timeout");
        }
        for c in node["children"].as_array().unwrap() {
            walk(c, out);
        }
    }
    let mut last = std::collections::BTreeMap::new();
    for r in records {
        if r["kind"] == "pattern" && r["cumulative"] == true {
            last.insert(r["id"].as_str().unwrap().to_owned(), r);
        }
    }
    let mut out = std::collections::BTreeMap::new();
    for r in last.values() {
        walk(&r["root"], &mut out);
    }
    out
}

/// Loss on the database's link, captures at every host and no topology: `analyze --emit
/// patterns,problems` puts the loss on the pattern hops between the application and the
/// database, and on no other hop; the correlated loss on the database's host is reported
/// (not as an incast: its requests lose too) with the hops it slows.
#[test]
fn loss_on_one_tier_shows_on_the_hops_over_its_link() {
    if !system_tools(&NEEDED) {
        return;
    }
    let _one = one_system();
    let dir = scratch("multitier-loss");
    let (pcap, names) = (dir.join("pcap"), dir.join("names.txt"));
    system_py(
        Command::new("python3")
            .arg(script("system.py"))
            // Twelve clients keep most of the application's database connections busy, so that
            // each outage hits them together (with four, the few in use at each outage differ,
            // and their timeouts correlate at 0.2-0.6).
            .args(["--requests", "3000", "--clients", "12", "--duration", "60"])
            // The database's link drops every packet for 150 ms every 600 ms, and 1% at random
            // in between.
            .args(["--flap", "pg:150:600", "--loss", "pg:0.01"])
            .arg("--pcap-dir")
            .arg(&pcap)
            .arg("--names")
            .arg(&names)
            .arg("--workdir")
            .arg(dir.join("work")),
    );
    let mut args = vec![
        "analyze",
        "--names",
        names.to_str().unwrap(),
        "--emit",
        "patterns,problems",
        // The load lasts about three seconds: correlation windows to match.
        "--correlation-window",
        "2s",
        "--aggregation",
        "200ms",
        // Timeouts last from 200 ms to seconds, so the connections' series correlate at
        // 0.4-0.85 (measured): findings down to 0.2. Only the database's connections lose,
        // so no other loss finding can pass.
        "--alpha",
        "0.2",
        "--format",
        "jsonl",
    ];
    let pcaps = pcaps_in(&pcap);
    args.extend(pcaps.iter().map(String::as_str));
    let records = causeway_jsonl(&args);
    let hops = loss_on_hops(&records);
    let (mut near, mut far) = ((0.0, 0.0), (0.0, 0.0));
    for ((src, dst), (messages, lossy)) in &hops {
        eprintln!(
            "{src} -> {dst}: {messages:.0} messages, {lossy:.0} ({:.1}%) sent while losing",
            100.0 * lossy / messages
        );
        let side = if src == "pg" || dst == "pg" {
            &mut near
        } else {
            &mut far
        };
        side.0 += messages;
        side.1 += lossy;
    }
    assert!(
        hops.contains_key(&("app".into(), "pg".into())),
        "no hop app -> pg carries TCP evidence: {hops:?}"
    );
    assert!(near.0 >= 500.0 && far.0 >= 4000.0, "{near:?} {far:?}");
    // Measured (3% random loss alone): 45-75% of app -> pg and 10-20% of pg -> app messages
    // in a losing interval, and none of any other hop's.
    assert!(
        near.1 / near.0 >= 0.15,
        "the database's hops: {near:?} (messages, sent while losing)"
    );
    assert!(
        far.1 / far.0 <= 0.005,
        "hops away from the lossy link: {far:?} (messages, sent while losing)"
    );
    // The database host's connections lose data together, and the alert says which path
    // hops that slows.
    let alerts: Vec<&str> = records
        .iter()
        .filter(|r| r["kind"] == "alert")
        .map(|r| r["message"].as_str().unwrap())
        .collect();
    let loss = |m: &str| m.starts_with("timeout on ") || m.starts_with("fast_retransmit on ");
    let db = alerts
        .iter()
        .find(|m| loss(m) && m.contains("of host 10.78.2.40 at once"));
    assert!(
        db.is_some_and(|m| !m.starts_with("incast")
            && (m.contains("slows app -> pg:5432 of ") || m.contains("slows pg -> app:* of "))),
        "no loss alert on the database naming its hop: {alerts:#?}"
    );
    // No loss alert on a host whose link kept its packets.
    for m in alerts.iter().filter(|m| loss(m)) {
        assert!(
            m.contains("10.78.2.40") || m.contains("10.78.2.20") || m.contains("port 5432"),
            "a loss alert away from the lossy link: {m}"
        );
    }
}
