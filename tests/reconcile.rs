//! Reconciliation, clock offsets and address translation on real traffic: a client, an
//! iptables DNAT load balancer and two nginx servers, each in its own network namespace with
//! its own tcpdump; the captures' clocks are then shifted with `editcap -t` by amounts from a
//! second to an hour, and `causeway analyze` must find both translations (and no other), every
//! shift to within a millisecond, and every HTTP request with both of its timestamps.
//!
//! ```text
//!  client 10.N.1.2 ── 10.N.1.1 lb (VIP :80, DNAT, every 2nd connection) ┬─ 10.N.2.1 ── 10.N.2.2:8080 s1 (nginx)
//!                                                                       └─ 10.N.3.1 ── 10.N.3.2:8080 s2 (nginx)
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Netns, Sniffer, causeway_jsonl, scratch, system_tools};

const NET: u8 = 214;
/// Requests on connections of their own (`Connection: close`), alternating between servers.
const CLOSE_REQUESTS: usize = 60;
/// Requests on one kept-alive connection.
const KEEPALIVE_REQUESTS: usize = 30;

/// nginx on `ip:8080` inside `ns`, serving `body` for every path, until dropped.
struct Nginx {
    child: Child,
}

impl Nginx {
    fn start(ns: &Netns, dir: &Path, ip: &str, body: &str) -> Nginx {
        let root = dir.join(format!("www-{ip}"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("index.html"), body).unwrap();
        let conf = dir.join(format!("nginx-{ip}.conf"));
        std::fs::write(
            &conf,
            format!(
                "daemon off;\nmaster_process off;\nuser root;\npid {dir}/nginx-{ip}.pid;\n\
                 error_log {dir}/nginx-{ip}.log;\nevents {{}}\nhttp {{\n  access_log off;\n  \
                 client_body_temp_path {dir}/tmp-{ip};\n  proxy_temp_path {dir}/tmp-{ip};\n  \
                 server {{\n    listen {ip}:8080;\n    root {root};\n    \
                 location / {{ try_files /index.html =404; }}\n  }}\n}}\n",
                dir = dir.display(),
                root = root.display(),
            ),
        )
        .unwrap();
        let child = ns
            .exec("nginx")
            .args(["-p", &dir.display().to_string(), "-c"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut nginx = Nginx { child };
        // Ready once it answers (bounded: 10 s).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ok = ns
                .exec("curl")
                .args(["-s", "-o", "/dev/null", "--max-time", "1"])
                .arg(format!("http://{ip}:8080/"))
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                break;
            }
            if let Ok(Some(status)) = nginx.child.try_wait() {
                let log = std::fs::read_to_string(dir.join(format!("nginx-{ip}.log")));
                panic!("nginx on {ip} exited ({status}): {log:?}");
            }
            assert!(Instant::now() < deadline, "nginx on {ip} did not answer");
            std::thread::sleep(Duration::from_millis(100));
        }
        nginx
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn editcap_shift(input: &Path, output: &Path, seconds: &str) {
    let out = Command::new("editcap")
        .args(["-t", seconds])
        .arg(input)
        .arg(output)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "editcap: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn dnat_load_balancer_with_shifted_clocks() {
    if !system_tools(&["ip", "iptables", "tcpdump", "editcap", "nginx", "curl"]) {
        return;
    }
    let dir = scratch("dnat");
    let client = Netns::new("cl");
    let lb = Netns::new("lb");
    let s1 = Netns::new("s1");
    let s2 = Netns::new("s2");
    let id = std::process::id() % 10_000;
    let dev = |name: &str| format!("{name}{id}");
    let net = |sub: u8, host: u8| format!("10.{NET}.{sub}.{host}");
    let vip = net(1, 1);
    let (s1_ip, s2_ip, client_ip) = (net(2, 2), net(3, 2), net(1, 2));
    client.link(
        &dev("vc"),
        &format!("{client_ip}/24"),
        &lb,
        &dev("vlc"),
        &format!("{vip}/24"),
    );
    lb.link(
        &dev("vl1"),
        &format!("{}/24", net(2, 1)),
        &s1,
        &dev("vs1"),
        &format!("{s1_ip}/24"),
    );
    lb.link(
        &dev("vl2"),
        &format!("{}/24", net(3, 1)),
        &s2,
        &dev("vs2"),
        &format!("{s2_ip}/24"),
    );
    client.run("ip", &["route", "add", "default", "via", &vip]);
    s1.run("ip", &["route", "add", "default", "via", &net(2, 1)]);
    s2.run("ip", &["route", "add", "default", "via", &net(3, 1)]);
    lb.run("sysctl", &["-q", "-w", "net.ipv4.ip_forward=1"]);
    // Every second new connection to the VIP goes to s1, the others to s2, port 80 -> 8080.
    lb.run(
        "iptables",
        &[
            "-t",
            "nat",
            "-A",
            "PREROUTING",
            "-d",
            &vip,
            "-p",
            "tcp",
            "--dport",
            "80",
            "-m",
            "statistic",
            "--mode",
            "nth",
            "--every",
            "2",
            "--packet",
            "0",
            "-j",
            "DNAT",
            "--to-destination",
            &format!("{s1_ip}:8080"),
        ],
    );
    lb.run(
        "iptables",
        &[
            "-t",
            "nat",
            "-A",
            "PREROUTING",
            "-d",
            &vip,
            "-p",
            "tcp",
            "--dport",
            "80",
            "-j",
            "DNAT",
            "--to-destination",
            &format!("{s2_ip}:8080"),
        ],
    );
    // Answers of several segments from one server, of one from the other.
    let _n1 = Nginx::start(&s1, &dir, &s1_ip, &"a".repeat(5000));
    let _n2 = Nginx::start(&s2, &dir, &s2_ip, &"b".repeat(700));

    let capture = |ns: &Netns, iface: &str, name: &str| {
        let file = dir.join(format!("{name}-raw.pcap"));
        let sniffer = Sniffer::start(
            "ip",
            &[
                "netns",
                "exec",
                &ns.name,
                "tcpdump",
                "-i",
                iface,
                "-nn",
                "--immediate-mode",
                "-B",
                "16384",
                "-U",
                "-w",
                &file.display().to_string(),
                "tcp",
            ],
        );
        (sniffer, file)
    };
    let sniffers = [
        capture(&client, &dev("vc"), "client"),
        capture(&lb, "any", "lb"),
        capture(&s1, &dev("vs1"), "s1"),
        capture(&s2, &dev("vs2"), "s2"),
    ];

    // Bounded load: a connection per request, 20 a second, then requests on one connection.
    let curl = |args: &[&str]| {
        let out = client
            .exec("curl")
            .args([
                "-s",
                "--max-time",
                "30",
                "-w",
                "%{http_code}\n",
                "-o",
                "/dev/null",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "curl {args:?}: {out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| l.ends_with("200"))
            .count()
    };
    let ok = curl(&[
        "--rate",
        "20/s",
        "-H",
        "Connection: close",
        &format!("http://{vip}/[1-{CLOSE_REQUESTS}]"),
    ]);
    assert_eq!(ok, CLOSE_REQUESTS, "answers on their own connections");
    let ok = curl(&[
        "--rate",
        "20/s",
        &format!("http://{vip}/keep/[1-{KEEPALIVE_REQUESTS}]"),
    ]);
    assert_eq!(ok, KEEPALIVE_REQUESTS, "answers on one connection");
    for (sniffer, _) in sniffers {
        sniffer.stop();
    }

    // Clocks: the load balancer 1.5 s ahead, s1 an hour ahead, s2 ten minutes behind.
    let shifts = [("lb", 1.5), ("s1", 3600.25), ("s2", -600.125)];
    let mut inputs = vec![format!("client={}", dir.join("client-raw.pcap").display())];
    for (name, seconds) in shifts {
        let shifted = dir.join(format!("{name}.pcapng"));
        editcap_shift(
            &dir.join(format!("{name}-raw.pcap")),
            &shifted,
            &format!("{seconds}"),
        );
        inputs.push(format!("{name}={}", shifted.display()));
    }
    let mut args = vec![
        "analyze",
        "--format",
        "jsonl",
        "--emit",
        "messages,clock,nat,stats",
        "--clock-reference",
        "client",
    ];
    args.extend(inputs.iter().map(String::as_str));
    let records = causeway_jsonl(&args);

    // Both translations, and nothing else.
    let mappings: BTreeSet<(String, String)> = records
        .iter()
        .filter(|r| r["kind"] == "nat_mapping" && r["final"] == true)
        .map(|r| {
            (
                r["public"].as_str().unwrap().to_owned(),
                r["private"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = [&s1_ip, &s2_ip]
        .into_iter()
        .map(|ip| (format!("{vip}:80"), format!("{ip}:8080")))
        .collect();
    assert_eq!(mappings, want, "translations");

    // Every shift, to within a millisecond.
    for (name, seconds) in shifts {
        let offset = records
            .iter()
            .find(|r| r["kind"] == "clock_offset" && r["final"] == true && r["domain"] == name)
            .unwrap_or_else(|| panic!("no final clock_offset for {name}"));
        assert_eq!(offset["reference"], "client");
        let got = offset["offset_ms"].as_f64().unwrap();
        let error = (got - seconds * 1e3).abs();
        assert!(
            error <= 1.0,
            "{name}: offset {got} ms, shifted by {} ms (error {error} ms)",
            seconds * 1e3
        );
        assert!(
            offset["error_ms"].as_f64().unwrap() <= 1.0,
            "{name}: stated error {offset}"
        );
    }

    // Every request, from the client to the server that took it, with both timestamps; the
    // answers likewise, from the server's own address.
    let messages: Vec<&serde_json::Value> =
        records.iter().filter(|r| r["kind"] == "message").collect();
    let servers = [format!("{s1_ip}:8080"), format!("{s2_ip}:8080")];
    let requests: Vec<&&serde_json::Value> = messages
        .iter()
        .filter(|m| servers.iter().any(|s| m["dst_endpoint"] == s.as_str()))
        .collect();
    let both = |m: &&&serde_json::Value| !m["send_ns"].is_null() && !m["recv_ns"].is_null();
    assert_eq!(
        requests.len(),
        CLOSE_REQUESTS + KEEPALIVE_REQUESTS,
        "requests: {requests:#?}"
    );
    assert!(requests.iter().all(both), "a request lacks a side");
    for s in &servers {
        assert!(
            requests
                .iter()
                .filter(|m| m["dst_endpoint"] == s.as_str())
                .count()
                >= CLOSE_REQUESTS / 2,
            "{s} took its share"
        );
    }
    let answers: Vec<&&serde_json::Value> = messages
        .iter()
        .filter(|m| servers.iter().any(|s| m["src_endpoint"] == s.as_str()))
        .collect();
    assert_eq!(answers.len(), CLOSE_REQUESTS + KEEPALIVE_REQUESTS);
    assert!(answers.iter().all(both), "an answer lacks a side");
    // Corrected one-way latencies are those of veth hops: small, and negative by no more than
    // the stated errors of the two clocks allow. A message is corrected by the estimate in force
    // at its event time (the latest at or before it, else the first), and early estimates
    // state larger errors than the final one: the bound is the largest error stated by the
    // estimates in force within a second of the message (its event time is its send time in
    // the reference clock, as the sources aligned it: close to, not exactly, the corrected one).
    let mut by_domain: std::collections::HashMap<String, Vec<(u64, f64)>> = Default::default();
    for r in records.iter().filter(|r| r["kind"] == "clock_offset") {
        by_domain
            .entry(r["domain"].as_str().unwrap().to_owned())
            .or_default()
            .push((
                r["at_ns"].as_u64().unwrap(),
                r["error_ms"].as_f64().unwrap(),
            ));
    }
    let estimates = |domain: &serde_json::Value| -> &[(u64, f64)] {
        domain
            .as_str()
            .and_then(|d| by_domain.get(d))
            .map_or(&[], Vec::as_slice)
    };
    let stated = |domain: &serde_json::Value, t: u64| -> f64 {
        let est = estimates(domain);
        assert!(!est.is_empty(), "no clock estimate for {domain}");
        let (lo, hi) = (t.saturating_sub(1_000_000_000), t + 1_000_000_000);
        let in_force_at_lo = est.iter().rev().find(|(at, _)| *at <= lo).or(est.first());
        in_force_at_lo
            .into_iter()
            .chain(est.iter().filter(|(at, _)| *at > lo && *at <= hi))
            .map(|(_, e)| *e)
            .fold(0.0, f64::max)
    };
    // A clock can put a message's arrival before its send; only a clock error does. Long
    // ones are real too (a softirq put off on a busy machine: 6.8 ms seen once in a full
    // suite), so of those at most one in a hundred, while a wrong offset would make most of a
    // domain's messages long.
    let mut long = Vec::new();
    let all: Vec<_> = requests.iter().chain(answers.iter()).collect();
    for m in &all {
        let ms = m["network_ms"].as_f64().unwrap();
        let t = m["send_corrected_ns"].as_u64().unwrap();
        let slack = stated(&m["send_domain"], t) + stated(&m["recv_domain"], t) + 0.001;
        let report = || {
            format!(
                "network_ms {ms} (slack {slack}) in {m}; estimates (at_ns, error_ms) of {}: {:?}; of {}: {:?}",
                m["send_domain"],
                estimates(&m["send_domain"]),
                m["recv_domain"],
                estimates(&m["recv_domain"])
            )
        };
        assert!(ms >= -slack, "{}", report());
        if ms >= 5.0 {
            long.push(report());
        }
    }
    assert!(
        long.len() <= all.len() / 100,
        "{} of {} messages 5 ms or longer on veth hops:\n{}",
        long.len(),
        all.len(),
        long.join("\n")
    );
    assert!(
        messages
            .iter()
            .all(|m| m["dst_endpoint"] != format!("{vip}:80").as_str()
                && m["src_endpoint"] != format!("{vip}:80").as_str()),
        "no message is left on the virtual address"
    );
}
