//! End to end: SNAP's TCP diagnosis on real faults in network namespaces this test creates.
//!
//! `tests/tcp/faults.py` builds one namespace ("host A") holding every sender, and one peer
//! namespace per scenario on its own link: random and burst loss (iptables `statistic`
//! drops, switched on and off; this kernel has no netem), a slow reader, Nagle with small
//! writes and no replies, a small send buffer over a delayed link, an incast of eight workers
//! through a shaped bottleneck, and a healthy, application-paced bulk transfer as control.
//! While the traffic runs, `causeway tcp --live` polls the kernel inside A, and tcpdump
//! inside A writes a capture that `causeway tcp` then reads. The test asserts, for every
//! labelled connection, that the classes the fault must cause are reported from the live
//! poller and from the packets (where a send-buffer limit is inferred from the bytes in
//! flight), that the control has no problem, and that correlation names the links (or
//! hosts) with the injected problems and nothing of the control.
//!
//! The loss link is switched on and off, and the incast's queries come in bursts of 2 s, so
//! that the problems of the connections that share them rise and fall together, which is
//! what correlation (per-second buckets, the default) looks for.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use common::{bin, causeway_jsonl, pcaps_in, scratch, system_tools};
use serde_json::Value;

/// Problems reported per flow: problem -> events (intervals for `app_limited`). A connection
/// captured at both its ends is reported once per sniffer (the records' `origin`); the same
/// retransmission seen twice is one, so a flow's count is the largest of any one origin.
fn problems(records: &[Value]) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut per_origin: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for r in records.iter().filter(|r| r["kind"] == "conn_problem") {
        let problem = r["problem"].as_str().unwrap().to_owned();
        let n = if problem == "app_limited" {
            r["intervals"].as_u64().unwrap()
        } else {
            r["events"].as_u64().unwrap()
        };
        let flow = r["flow"].as_str().unwrap().to_owned();
        let origin = r["origin"].as_str().unwrap_or_default().to_owned();
        *per_origin.entry((flow, problem, origin)).or_default() += n;
    }
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for ((flow, problem, _), n) in per_origin {
        let count = out.entry(flow).or_default().entry(problem).or_default();
        *count = (*count).max(n);
    }
    out
}

/// Every name (scope and name, and the `also` names) of every correlation, with its problem.
fn correlated(records: &[Value]) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for r in records.iter().filter(|r| r["kind"] == "correlation") {
        let problem = r["problem"].as_str().unwrap().to_owned();
        out.insert((
            format!(
                "{} {}",
                r["scope"].as_str().unwrap(),
                r["name"].as_str().unwrap()
            ),
            problem.clone(),
        ));
        for also in r["also"].as_array().unwrap() {
            out.insert((also.as_str().unwrap().to_owned(), problem.clone()));
        }
    }
    out
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect()
}

/// A labelled connection's flow, `local->peer`.
fn flow_of(c: &Value) -> String {
    format!(
        "{}->{}",
        c["local"].as_str().unwrap(),
        c["peer"].as_str().unwrap()
    )
}

/// Per connection (`local->peer`), the segments its sender's kernel retransmitted, from the
/// ss log (`bytes_retrans` over `mss`, the most any sample showed): what really happened on
/// the wire, against which a problem found on the control is judged.
fn kernel_retransmits(ss_log: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(ss_log).unwrap_or_default();
    let field = |line: &str, name: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
    };
    let mut out = BTreeMap::new();
    let mut flow: Option<String> = None;
    for line in text.lines() {
        if line.starts_with(char::is_alphabetic) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            flow = (cols.len() >= 5).then(|| format!("{}->{}", cols[3], cols[4]));
        } else if let Some(f) = &flow {
            if let (Some(bytes), Some(mss)) = (field(line, "bytes_retrans:"), field(line, "mss:")) {
                let segments = bytes.div_ceil(mss.max(1));
                let e = out.entry(f.clone()).or_insert(0);
                *e = (*e).max(segments);
            }
        }
    }
    out
}

/// Checks one source's findings against the labels; returns the failures. `kernel`: the
/// segments each connection's kernel retransmitted ([`kernel_retransmits`]).
fn judge(
    source: &str,
    records: &[Value],
    labels: &Value,
    kernel: &BTreeMap<String, u64>,
) -> Vec<String> {
    let found = problems(records);
    let sets = correlated(records);
    let mut failures = Vec::new();
    for scenario in labels["scenarios"].as_array().unwrap() {
        let name = scenario["name"].as_str().unwrap();
        for c in scenario["connections"].as_array().unwrap() {
            let flow = flow_of(c);
            let got = found.get(&flow).cloned().unwrap_or_default();
            for expected in c["expected"].as_array().unwrap() {
                let expected = expected.as_str().unwrap();
                if !got.contains_key(expected) {
                    failures.push(format!(
                        "{source}: {name} {flow}: expected {expected}, got {got:?}"
                    ));
                }
            }
            if name == "control" {
                // A healthy transfer: nothing but its sender's pace. One retransmission is
                // tolerated: on this 2-core machine a stalled ACK can make a tail loss probe
                // fire (the peer then reports it as a duplicate). So are as many as its
                // kernel counted: the control shares the machine with the faults, and now and
                // then really loses a few segments (seen: 6 and 5, `bytes_retrans` 6 and 5
                // segments); reporting those is right.
                let real = kernel.get(&flow).copied().unwrap_or(0).max(1);
                for (problem, n) in &got {
                    let tolerated =
                        problem == "app_limited" || (problem == "fast_retransmit" && *n <= real);
                    if !tolerated {
                        failures.push(format!("{source}: control {flow}: {problem} x{n}"));
                    }
                }
            }
        }
        let link = format!("link {}", scenario["link"].as_str().unwrap());
        let peer = format!("host {}", scenario["peer_ip"].as_str().unwrap());
        let named: Vec<&(String, String)> = sets
            .iter()
            .filter(|(n, _)| *n == link || *n == peer)
            .collect();
        let losses = named
            .iter()
            .any(|(_, p)| p == "timeout" || p == "fast_retransmit");
        // Losses its kernel really counted on the control (more than the one tolerated
        // above) may be correlated too: then its link or host did lose packets.
        let control_lost = scenario["connections"].as_array().unwrap().iter().any(|c| {
            let flow = flow_of(c);
            kernel.get(&flow).is_some_and(|&n| n > 1)
        });
        let only_losses = named
            .iter()
            .all(|(_, p)| p == "timeout" || p == "fast_retransmit");
        let excused = control_lost && only_losses;
        match name {
            "control" if !named.is_empty() && !excused => {
                failures.push(format!("{source}: the control was correlated: {named:?}"));
            }
            "loss" | "incast" if !losses => {
                failures.push(format!(
                    "{source}: {link} / {peer} not correlated for losses; correlations: {sets:?}"
                ));
            }
            _ => {}
        }
    }
    failures
}

#[test]
fn real_faults_are_classified_and_correlated_live_and_from_packets() {
    if !system_tools(&["ip", "tc", "iptables", "tcpdump", "ss", "python3"]) {
        return;
    }
    let dir = scratch("tcp-faults");
    let live = dir.join("live.jsonl");
    let topology = dir.join("topology.txt");
    let monitor = format!(
        "exec {} tcp --live --interval 250ms --duration 40s --format jsonl -o {} --topology {}",
        bin().display(),
        live.display(),
        topology.display()
    );
    let faults = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tcp/faults.py");
    let prefix = format!("cwt{}", std::process::id() % 100_000);
    let out = Command::new("python3")
        .arg(&faults)
        .args(["--prefix", &prefix, "--duration", "16"])
        .arg("--labels")
        .arg(dir.join("labels.json"))
        .arg("--topology")
        .arg(&topology)
        .arg("--pcap")
        .arg(dir.join("a.pcap"))
        .arg("--peer-pcaps")
        .arg(dir.join("peers"))
        .arg("--ss")
        .arg(dir.join("ss.log"))
        .args(["--monitor", &monitor])
        .output()
        .expect("run faults.py");
    assert!(
        out.status.success(),
        "faults.py failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let labels: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("labels.json")).unwrap()).unwrap();

    // The live poller ran inside A for the whole run and stopped at the driver's SIGINT.
    let live_records = read_jsonl(&live);
    let polled = live_records
        .iter()
        .find(|r| r["kind"] == "stats" && r["final"] == true)
        .expect("final stats from the live run");
    assert!(polled["records"].as_u64().unwrap() > 500, "{polled}");

    let topo = topology.to_str().unwrap();
    let pcap = dir.join("a.pcap");
    let packet_records = causeway_jsonl(&[
        "tcp",
        "--format",
        "jsonl",
        "--topology",
        topo,
        pcap.to_str().unwrap(),
    ]);
    let ss = dir.join("ss.log");
    let ss_records = causeway_jsonl(&[
        "tcp",
        "--format",
        "jsonl",
        "--topology",
        topo,
        ss.to_str().unwrap(),
    ]);

    // Every connection captured at both its ends, and no topology file: each connection is
    // one member, whichever sniffers saw it.
    let mut both_ends = vec![
        "tcp".to_owned(),
        "--format".to_owned(),
        "jsonl".to_owned(),
        pcap.to_str().unwrap().to_owned(),
    ];
    both_ends.extend(pcaps_in(&dir.join("peers")));
    let both_refs: Vec<&str> = both_ends.iter().map(String::as_str).collect();
    let both_records = causeway_jsonl(&both_refs);

    let kernel = kernel_retransmits(&ss);
    let mut failures = judge("live", &live_records, &labels, &kernel);
    failures.extend(judge("packets", &packet_records, &labels, &kernel));
    failures.extend(judge("both ends", &both_records, &labels, &kernel));
    for r in both_records.iter().filter(|r| r["kind"] == "correlation") {
        let mut conns: Vec<BTreeSet<&str>> = r["flows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().split("->").collect())
            .collect();
        let n = conns.len();
        conns.sort();
        conns.dedup();
        if conns.len() != n || n < 2 {
            failures.push(format!("both ends: a set repeating a connection: {r}"));
        }
    }
    // The incast named as such, into its aggregator, and nothing else called one.
    let aggregator = labels["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "incast")
        .map(|s| s["peer_ip"].as_str().unwrap().to_owned())
        .unwrap();
    let incasts: BTreeSet<String> = [&packet_records, &both_records]
        .iter()
        .flat_map(|records| records.iter())
        .filter(|r| r["kind"] == "correlation")
        .filter_map(|r| r["incast"].as_str().map(str::to_owned))
        .collect();
    if incasts != BTreeSet::from([aggregator.clone()]) {
        failures.push(format!(
            "incast: expected one, into {aggregator}; found into {incasts:?}"
        ));
    }
    // The ss log is read and classified too; `ss` 6.1 prints no timeout counter and its
    // samples are 250 ms apart, so only the classes it shows directly are asserted.
    let from_ss = problems(&ss_records);
    for scenario in labels["scenarios"].as_array().unwrap() {
        let want = match scenario["name"].as_str().unwrap() {
            "slow" => "rwnd_limited",
            "nagle" => "delayed_ack",
            "sndbuf" => "sndbuf_limited",
            _ => continue,
        };
        for c in scenario["connections"].as_array().unwrap() {
            let flow = flow_of(c);
            if !from_ss.get(&flow).is_some_and(|p| p.contains_key(want)) {
                failures.push(format!(
                    "ss: {flow}: expected {want}, got {:?}",
                    from_ss.get(&flow)
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}\n(evidence kept in {})",
        failures.len(),
        failures.join("\n"),
        dir.display()
    );
    std::fs::remove_dir_all(&dir).ok();
}
