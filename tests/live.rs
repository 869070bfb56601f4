//! End to end: `causeway analyze --live` on real traffic through a reverse proxy, in network
//! namespaces this test creates.
//!
//! ```text
//!  client 10.N.1.2 ── 10.N.1.1 proxy 10.N.2.1 ── 10.N.2.2:8000 app (tests/live/app.py)
//!                       nginx :80, proxy_pass to the app
//!                       causeway --live any      (both legs, cooked SLL2 frames)
//!                       causeway --live <veth>   (the client leg, Ethernet, kernel filter)
//! ```
//!
//! curl sends a bounded load (300 requests, one connection each, 30 a second) while two live
//! sniffers run inside the proxy's namespace. The test measures how long after the first
//! request the pattern CLIENT → nginx with its child nginx → app first appears in the JSON
//! lines (it must within 5 s), stops both sniffers with SIGINT (exit status 0, final patterns
//! and stats, no kernel drops), then checks the pcapng files they wrote: capinfos and tshark
//! count the packets the stats counted, tshark finds every request on both legs, and
//! replaying the `any` capture (as fast as possible and at 10x) gives the live run's final
//! patterns, ids, counts and expected counts alike.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Netns, bin, capinfos, final_patterns, scratch, system_tools};
use serde_json::Value;

/// The second octet of this test's addresses (other tests use 77, 213, 214).
const NET: u8 = 216;
const REQUESTS: usize = 300;
/// The pattern of a proxied request: the request, the proxied request, both answers.
const PROXIED: &str = "CLIENT>nginx:80(nginx>app:8000(app>nginx:*(nginx>CLIENT:*())))";

/// A process this test started, killed (if still running) when dropped.
struct Running {
    child: Child,
    name: &'static str,
}

impl Running {
    fn spawn(mut command: Command, name: &'static str) -> Running {
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Running { child, name }
    }

    /// Sends SIGINT, as Ctrl-C does, and waits up to `limit` for the exit status.
    fn interrupt(mut self, limit: Duration) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -INT {}", self.name);
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not stop within {limit:?} of SIGINT",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect()
}

/// The final cumulative patterns by id: (canonical, count, expected count).
fn patterns_by_id(records: &[Value]) -> BTreeMap<String, (String, u64, f64)> {
    let mut last = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r["kind"] == "pattern" && r["cumulative"] == true)
    {
        last.insert(
            r["id"].as_str().unwrap().to_owned(),
            (
                r["canonical"].as_str().unwrap().to_owned(),
                r["count"].as_u64().unwrap(),
                r["expected"].as_f64().unwrap(),
            ),
        );
    }
    last.retain(|_, p| p.1 > 0);
    last
}

/// Whether a record is the proxied pattern with a non-zero count.
fn proxied(r: &Value) -> bool {
    r["kind"] == "pattern" && r["canonical"] == PROXIED && r["count"].as_u64().unwrap_or(0) > 0
}

/// The final `stats` record of `origin`.
fn final_stats<'a>(records: &'a [Value], origin: &str) -> &'a Value {
    records
        .iter()
        .rev()
        .find(|r| r["kind"] == "stats" && r["origin"] == origin && r["final"] == true)
        .unwrap_or_else(|| panic!("no final stats for {origin}"))
}

/// Lines tshark prints for `capture` with display filter `filter` (one per packet).
fn tshark_count(capture: &Path, filter: &str) -> usize {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(capture)
        .args(["-Y", filter, "-T", "fields", "-e", "frame.number"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// The analysis settings every run shares (live and replays): a single clock, so a short
/// lateness and reconciliation window, and no warm start (the live defaults, given
/// explicitly so that the replays use them too), and an application that answers in milliseconds: a node holds a
/// message at most 500 ms before sending what it caused (the pattern of a request is known
/// that long after it at the earliest).
const ANALYSIS: [&str; 10] = [
    "--warmup",
    "0s",
    "--lateness",
    "250ms",
    "--reconcile-window",
    "250ms",
    "--max-delay",
    "500ms",
    "--emit-every",
    "500ms",
];

#[test]
fn live_capture_through_an_nginx_proxy_matches_its_replay() {
    if !system_tools(&[
        "ip", "nginx", "curl", "python3", "capinfos", "tshark", "kill",
    ]) {
        return;
    }
    // Until `link`'s lateness covered the message gap (a61d331), about one loaded run in
    // eight linked two of the 300 proxied paths differently from the replay of its own
    // capture; since, 21 runs in a row matched, beside two soaks and a benchmark. The scenario
    // is still tried a second time when an attempt fails (a loaded machine can also miss the
    // 90% check), and the first failure is printed; two in a row fail.
    if let Err(first) = std::panic::catch_unwind(proxy_scenario) {
        let why = first
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| first.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        println!("first attempt failed, trying once more: {why}");
        proxy_scenario();
    }
}

fn proxy_scenario() {
    let dir = scratch("live");
    let client = Netns::new("lc");
    let proxy = Netns::new("lp");
    let app = Netns::new("la");
    let id = std::process::id() % 10_000;
    let dev = |name: &str| format!("{name}{id}");
    let net = |sub: u8, host: u8| format!("10.{NET}.{sub}.{host}");
    let (client_ip, front_ip, back_ip, app_ip) = (net(1, 2), net(1, 1), net(2, 1), net(2, 2));
    let front_dev = dev("vlp");
    client.link(
        &dev("vlc"),
        &format!("{client_ip}/24"),
        &proxy,
        &front_dev,
        &format!("{front_ip}/24"),
    );
    proxy.link(
        &dev("vlb"),
        &format!("{back_ip}/24"),
        &app,
        &dev("vla"),
        &format!("{app_ip}/24"),
    );

    // The application, and nginx in front of it.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/live/app.py");
    let mut python = app.exec("python3");
    python
        .arg(&script)
        .args([&app_ip, "8000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _app = Running::spawn(python, "app.py");
    let d = dir.display();
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes 1;\ndaemon off;\nmaster_process off;\nuser root;\npid {d}/nginx.pid;\n\
             error_log {d}/nginx.log;\nevents {{ worker_connections 256; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  \
             proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fcgi;\n  \
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
             server {{ listen {front_ip}:80; location / {{ proxy_pass http://{app_ip}:8000; }} }}\n}}\n"
        ),
    )
    .unwrap();
    let mut nginx = proxy.exec("nginx");
    nginx
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _nginx = Running::spawn(nginx, "nginx");
    let url = format!("http://{front_ip}/");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ok = client
            .exec("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "--max-time",
                "1",
                "-w",
                "%{http_code}",
            ])
            .arg(&url)
            .output()
            .is_ok_and(|o| o.stdout == b"200");
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nginx and the app did not answer: {:?}",
            std::fs::read_to_string(dir.join("nginx.log"))
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let names = dir.join("names.txt");
    std::fs::write(
        &names,
        format!("{front_ip} nginx\n{back_ip} nginx\n{app_ip} app\n"),
    )
    .unwrap();

    // The live sniffers, inside the proxy's namespace.
    let start_sniffer = |interface: &str, filter: Option<&str>, name: &str| {
        let out = dir.join(format!("{name}.jsonl"));
        let capture = dir.join(format!("{name}.pcapng"));
        let mut c = proxy.exec(bin().to_str().unwrap());
        c.args(["analyze", "--live", interface]);
        if let Some(f) = filter {
            c.args(["--filter", f]);
        }
        c.arg("--write")
            .arg(&capture)
            .args(["--emit", "patterns,stats", "--format", "jsonl", "-o"])
            .arg(&out)
            .arg("--names")
            .arg(&names)
            .args(["--max-delay", "500ms", "--emit-every", "500ms"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap());
        let running = Running::spawn(c, "causeway");
        (running, out, capture)
    };
    let (any, any_out, any_cap) = start_sniffer("any", None, "any");
    let (front, front_out, front_cap) = start_sniffer(&front_dev, Some("tcp and port 80"), "front");
    // The --write file is created once the socket is bound and its filter attached.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(any_cap.exists() && front_cap.exists()) {
        assert!(
            Instant::now() < deadline,
            "the sniffers did not start: {:?} {:?}",
            std::fs::read_to_string(dir.join("any.err")),
            std::fs::read_to_string(dir.join("front.err"))
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The load: bounded in count (300) and time (30 a second; curl stopped after 30 s).
    let first_request = Instant::now();
    let mut curl = client.exec("curl");
    curl.args([
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}\n",
        "--rate",
        "30/s",
        "--max-time",
        "5",
        "-H",
        "Connection: close",
    ])
    .arg(format!("http://{front_ip}/[1-{REQUESTS}]"))
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let mut load = Running::spawn(curl, "curl");
    let mut first_pattern = None;
    let watch_until = first_request + Duration::from_secs(30);
    while Instant::now() < watch_until {
        if first_pattern.is_none() && read_jsonl(&any_out).iter().any(proxied) {
            first_pattern = Some(first_request.elapsed());
        }
        if first_pattern.is_some() && load.child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if load.child.try_wait().unwrap().is_none() {
        let _ = load.child.kill();
    }
    let output = load.child.wait_with_output_ref();
    let answered = output.lines().filter(|l| *l == "200").count();
    let load_time = first_request.elapsed();
    assert_eq!(answered, REQUESTS, "answers to the load");
    let first_pattern = first_pattern.unwrap_or_else(|| {
        panic!(
            "no {PROXIED} pattern within 30 s: {:?}",
            std::fs::read_to_string(dir.join("any.err"))
        )
    });
    println!(
        "time to first pattern: {:.2} s after the first request ({REQUESTS} requests in {:.1} s)",
        first_pattern.as_secs_f64(),
        load_time.as_secs_f64()
    );
    assert!(
        first_pattern <= Duration::from_secs(5),
        "the pattern appeared {first_pattern:?} after the first request"
    );

    // Let the last requests reach the reports, then stop both sniffers as Ctrl-C would.
    std::thread::sleep(Duration::from_millis(1500));
    for (running, name) in [(any, "any"), (front, "front")] {
        let status = running.interrupt(Duration::from_secs(20));
        assert!(
            status.success(),
            "{name}: {status}: {:?}",
            std::fs::read_to_string(dir.join(format!("{name}.err")))
        );
    }

    let live = read_jsonl(&any_out);
    let stats = final_stats(&live, "any");
    let packets = stats["records"].as_u64().unwrap();
    assert_eq!(stats["kernel_drops"], 0, "{stats}");
    assert_eq!(stats["skipped"].get("stopped"), None, "{stats}");
    assert_eq!(
        stats["linktypes"]["Linux cooked v2 (SLL2)"], packets,
        "{stats}"
    );
    let patterns = final_patterns(&live);
    let (_, count, _) = patterns
        .iter()
        .find(|(canonical, _, _)| canonical == PROXIED)
        .unwrap_or_else(|| panic!("final patterns: {patterns:?}"));
    assert!(
        *count as usize >= REQUESTS * 9 / 10 && *count as usize <= REQUESTS,
        "{PROXIED}: {count} of {REQUESTS}; all: {patterns:?}"
    );
    println!(
        "live (any): {packets} packets, {} kernel drops, {PROXIED} x{count}",
        stats["kernel_drops"]
    );

    // The files: what the stats counted, readable by Wireshark's tools, every request there.
    let (in_file, _, _) = capinfos(&any_cap);
    assert_eq!(
        in_file,
        packets,
        "capinfos and the stats of {}",
        any_cap.display()
    );
    assert_eq!(tshark_count(&any_cap, "frame"), packets as usize);
    // Each request is one segment with data (counted so rather than with tshark's HTTP
    // dissector, which can take a segment on a reused port for an answer).
    let requests_at = |cap: &PathBuf, port: u16| {
        tshark_count(cap, &format!("tcp.dstport == {port} and tcp.len > 0"))
    };
    assert_eq!(requests_at(&any_cap, 80), REQUESTS, "requests to nginx");
    assert_eq!(requests_at(&any_cap, 8000), REQUESTS, "requests to the app");
    // The client leg alone, on the named interface with the kernel filter: Ethernet frames,
    // the same packets as `any` saw on that leg.
    let front_live = read_jsonl(&front_out);
    let front_stats = final_stats(&front_live, &front_dev);
    let front_packets = front_stats["records"].as_u64().unwrap();
    assert_eq!(front_stats["kernel_drops"], 0, "{front_stats}");
    assert_eq!(front_stats["linktypes"]["Ethernet"], front_packets);
    assert_eq!(capinfos(&front_cap).0, front_packets);
    assert_eq!(
        front_packets as usize,
        tshark_count(&any_cap, "tcp.port == 80"),
        "the client leg, on its interface and in `any`"
    );
    assert_eq!(requests_at(&front_cap, 80), REQUESTS);
    assert!(
        final_patterns(&front_live)
            .iter()
            .all(|(c, _, _)| !c.contains("app")),
        "the client leg alone has no app: {:?}",
        final_patterns(&front_live)
    );

    // Replays of the `any` capture give the live run's patterns.
    for speed in ["max", "10x"] {
        let out = dir.join(format!("replay-{speed}.jsonl"));
        let status = Command::new(bin())
            .args([
                "analyze",
                "--emit",
                "patterns,stats",
                "--format",
                "jsonl",
                "-o",
            ])
            .arg(&out)
            .arg("--names")
            .arg(&names)
            .args(ANALYSIS)
            .args(["--speed", speed])
            .arg(format!("any={}", any_cap.display()))
            .status()
            .unwrap();
        assert!(status.success(), "replay at {speed}");
        let replay = read_jsonl(&out);
        assert_eq!(
            patterns_by_id(&replay),
            patterns_by_id(&live),
            "replay at {speed} and the live run"
        );
        assert_eq!(final_stats(&replay, "any")["records"], packets);
    }
}

/// `Child::wait_with_output` for a child we keep owning (its drop guard stays in place).
trait WaitOutput {
    fn wait_with_output_ref(&mut self) -> String;
}

impl WaitOutput for Child {
    fn wait_with_output_ref(&mut self) -> String {
        use std::io::Read;
        let mut text = String::new();
        if let Some(mut out) = self.stdout.take() {
            out.read_to_string(&mut text).unwrap();
        }
        self.wait().unwrap();
        text
    }
}

/// `--duration` and `--count` end a live run with status 0 and the final statistics (here in
/// a namespace of its own, on its loopback), and without CAP_NET_RAW the run fails at once
/// with one line saying what it needs.
#[test]
fn live_runs_stop_on_duration_and_count_and_need_cap_net_raw() {
    if !system_tools(&["ip", "setpriv", "python3"]) {
        return;
    }
    let ns = Netns::new("ld");
    let run = |extra: &[&str]| {
        let mut c = ns.exec(bin().to_str().unwrap());
        c.args([
            "analyze", "--live", "lo", "--emit", "stats", "--format", "jsonl",
        ])
        .args(extra);
        let started = Instant::now();
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let records: Vec<Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (final_stats(&records, "lo").clone(), started.elapsed())
    };
    let (stats, took) = run(&["--duration", "1s"]);
    assert_eq!(stats["records"], 0, "{stats}");
    assert_eq!(stats["kernel_drops"], 0, "{stats}");
    assert!(took < Duration::from_secs(5), "--duration 1s took {took:?}");

    // Datagrams over the namespace's loopback while a run waits for 25 of them.
    let mut sender = ns.exec("python3");
    sender
        .args([
            "-c",
            "import socket, time\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             for i in range(200):\n    s.sendto(b'x' * 10, ('127.0.0.1', 9)); time.sleep(0.01)",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _sender = Running::spawn(sender, "python3");
    let (stats, _) = run(&[
        "--count",
        "25",
        "--filter",
        "udp port 9",
        "--duration",
        "20s",
    ]);
    // 25 analysed; any read with the 25th from the ring are counted as skipped, `stopped`.
    let stopped = stats["skipped"]["stopped"].as_u64().unwrap_or(0);
    assert_eq!(stats["records"].as_u64().unwrap(), 25 + stopped, "{stats}");
    assert_eq!(stats["udp"], stats["records"], "{stats}");
    assert!(stopped < 10, "{stats}");

    let out = ns
        .exec("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(bin())
        .args(["analyze", "--live", "lo"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(
        stderr.trim_end(),
        "causeway: error: capturing on lo needs CAP_NET_RAW (run as root or \
         `setcap cap_net_raw+ep $(which causeway)`)"
    );
}
