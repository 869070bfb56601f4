//! Live harness: the packet rate `causeway analyze --live lo` sustains without kernel drops,
//! and the lag from packet to output.
//!
//! A load generator in this process runs a request/response server on 127.0.0.1 and
//! `--connections` clients (default 8) that pace their requests to a target rate (64-byte
//! requests, 256-byte responses, each on a long-lived connection). For each rate of `--rates`
//! (requests per second; default 2000,5000,10000,20000,40000) it runs `causeway analyze
//! --live lo --filter 'tcp and port P' --emit patterns,instances,stats --emit-every 1s
//! --format jsonl` for `--seconds` (default 10) of load, then stops it with SIGINT and reads
//! its final `stats`: packets captured, `kernel_drops`. Every line Causeway writes is
//! timestamped as this harness reads it from the pipe, and two lags go into hdrhistograms:
//! - *instance lag*: read time minus the newest packet timestamp of a path instance (the
//!   time from the packet that completes a request to that request's path being output);
//! - *pattern lag*: read time minus the end of the window a pattern update reports (how old
//!   the newest traffic in a pattern update is when it arrives), with `--emit-every 1s`.
//!
//! Packets are stamped by the kernel with the same clock the harness reads, so the lags are
//! wall-clock differences. Needs CAP_NET_RAW (root).
//!
//! Arguments after `--analyze` go to `causeway analyze` as they are (e.g. `--max-delay 200ms`:
//! a path is final only once `--max-delay` has passed after its newest message with no child,
//! so the instance lag is at least that plus the lateness).
//!
//! Run: `cargo bench --bench live` or
//!      `cargo bench --bench live -- --rates 5000,20000 --seconds 10 --connections 8`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use harness::{analyze_args, flag, list_flag};
use hdrhistogram::Histogram;

const REQUEST: usize = 64;
const RESPONSE: usize = 256;

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let extra = analyze_args(&mut args);
    let rates = list_flag(&args, "--rates").unwrap_or(vec![2000, 5000, 10_000, 20_000, 40_000]);
    let seconds: u64 = flag(&args, "--seconds").unwrap_or(10);
    let connections: usize = flag(&args, "--connections").unwrap_or(8);
    let workers: usize = flag(&args, "--workers").unwrap_or(1);
    let causeway = PathBuf::from(env!("CARGO_BIN_EXE_causeway"));
    println!(
        "{:>9} {:>10} {:>11} {:>9} {:>9} {:>12} {:>9} {:>9} {:>9} {:>9}",
        "req/s",
        "done req/s",
        "packets/s",
        "drops",
        "late",
        "instances",
        "inst p50",
        "inst p99",
        "patt p50",
        "patt p99"
    );
    for &rate in &rates {
        run(&causeway, rate, seconds, connections, workers, &extra);
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn run(
    causeway: &PathBuf,
    rate: u64,
    seconds: u64,
    connections: usize,
    workers: usize,
    extra: &[String],
) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || serve(listener, stop));
    }
    let mut child = Command::new(causeway)
        .args([
            "analyze",
            "--live",
            "lo",
            "--filter",
            &format!("tcp and port {port}"),
        ])
        .args(["--emit", "patterns,instances,stats", "--emit-every", "1s"])
        .args(["--workers", &workers.to_string(), "--format", "jsonl"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || read_output(stdout));
    // Let the sniffer open its ring before the load starts.
    std::thread::sleep(Duration::from_millis(1500));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let per_conn = rate as f64 / connections as f64;
    let clients: Vec<_> = (0..connections)
        .map(|_| {
            let done = Arc::clone(&done);
            std::thread::spawn(move || client(port, per_conn, seconds, &done))
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let load_s = start.elapsed().as_secs_f64();
    // Let the last paths finish (max-delay + lateness) before stopping.
    std::thread::sleep(Duration::from_secs(4));
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    assert!(status.success(), "causeway failed: {err}");
    let out = reader.join().unwrap();
    let requests = done.load(Ordering::Relaxed) as f64;
    println!(
        "{:>9} {:>10.0} {:>11.0} {:>9} {:>9} {:>12} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
        rate,
        requests / load_s,
        out.packets as f64 / load_s,
        out.drops,
        out.late,
        out.instance_lag.len(),
        ms(&out.instance_lag, 0.5),
        ms(&out.instance_lag, 0.99),
        ms(&out.pattern_lag, 0.5),
        ms(&out.pattern_lag, 0.99),
    );
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        f64::NAN
    } else {
        h.value_at_quantile(q) as f64 / 1000.0
    }
}

struct Observed {
    packets: u64,
    drops: u64,
    /// Records the source counted late (more than the lateness behind its reader's newest).
    late: u64,
    instance_lag: Histogram<u64>,
    pattern_lag: Histogram<u64>,
}

/// Reads Causeway's output as it comes: lags in µs, and the final stats.
fn read_output(stdout: std::process::ChildStdout) -> Observed {
    let mut out = Observed {
        packets: 0,
        drops: 0,
        late: 0,
        instance_lag: Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap(),
        pattern_lag: Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap(),
    };
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let read_at = now_ns();
        let v: serde_json::Value =
            causeway_operators::json::from_slice_nested(line.as_bytes()).unwrap();
        let lag_us = |t: u64| read_at.saturating_sub(t) / 1000;
        match v["kind"].as_str() {
            Some("instance") => {
                let newest = v["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|m| [m["send_ns"].as_u64(), m["recv_ns"].as_u64()])
                    .flatten()
                    .max();
                if let Some(t) = newest {
                    if std::env::var_os("LIVE_DEBUG").is_some() {
                        eprintln!("instance newest {t} read {read_at} lag {} us", lag_us(t));
                    }
                    out.instance_lag.saturating_record(lag_us(t));
                }
            }
            Some("pattern") if v["cumulative"] == false && v["last"] != true => {
                if let Some(end) = v["window"]["end_ns"].as_u64() {
                    out.pattern_lag.saturating_record(lag_us(end));
                }
            }
            Some("stats") if v["final"] == true => {
                out.packets = v["records"].as_u64().unwrap_or(0);
                out.drops = v["kernel_drops"].as_u64().unwrap_or(0);
                out.late = v["late"].as_u64().unwrap_or(0);
            }
            _ => {}
        }
    }
    out
}

/// Answers every 64-byte request with 256 bytes until told to stop.
fn serve(listener: TcpListener, stop: Arc<AtomicBool>) {
    for conn in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut conn) = conn else { continue };
        std::thread::spawn(move || {
            conn.set_nodelay(true).ok();
            let mut req = [0u8; REQUEST];
            let resp = [7u8; RESPONSE];
            while conn.read_exact(&mut req).is_ok() {
                if conn.write_all(&resp).is_err() {
                    return;
                }
            }
        });
    }
}

/// One connection sending `rate` requests per second for `seconds`, each waiting for its
/// answer; bounded in count and time.
fn client(port: u16, rate: f64, seconds: u64, done: &AtomicU64) {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_nodelay(true).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let req = [1u8; REQUEST];
    let mut resp = [0u8; RESPONSE];
    let total = (rate * seconds as f64) as u64;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds + 2);
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        let now = Instant::now();
        if now > deadline {
            break;
        }
        if due > now {
            std::thread::sleep(due - now);
        }
        if conn.write_all(&req).is_err() || conn.read_exact(&mut resp).is_err() {
            break;
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
}
