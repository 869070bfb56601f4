//! Reconciliation harness: accuracy, throughput and memory of nat + reconcile + clock on
//! generated captures with ground truth (issue "streaming reconciliation").
//!
//! Each scenario generates the multi-tier system (Project 5 Fig. 10) with a DNAT load
//! balancer in front of the two application servers (`--dnat ap`), one sniffer per server
//! host in that host's clock (the load balancer's own capture sees every translated packet
//! twice), clock offsets uniform in ±OFFSET per host, drift uniform in ±50 ppm, and 1% of the
//! packet copies lost; a different seed per offset. `causeway analyze` then runs on 2 workers with `--emit
//! messages,clock,nat,stats` (messages written as JSON lines to a file), and the output is
//! scored against `truth.jsonl`:
//!
//! - **offset error**: for every `clock_offset` record stamped at least 10 s after the
//!   reference's first packet, |estimated − true| offset at that instant (true offsets from
//!   the generator's clocks, drift included); max and mean;
//! - **NAT**: mappings reported vs the generator's translations (found, missed, false);
//! - **reconciled**: of the messages whose sender's and receiver's sniffers both captured
//!   some of their segments, the share that Causeway reports between the same endpoints, with
//!   both timestamps, its send timestamp within [−50 µs, +2 ms] of the true local send time
//!   (a lost first segment delays it); and how many two-sided messages match nothing;
//! - **transit**: for those messages, |corrected receive − corrected send − true transit|
//!   (what clock correction leaves of the offsets, drift and loss);
//! - **throughput and peak RSS** of the whole run (bootstrap included), median of `--runs`.
//!
//! The last scenario is the ±1 h one with 10× the messages, to show that peak RSS does not
//! grow with the length of the trace.
//!
//! Captures are generated once into `target/bench-data/` and kept.
//!
//! Run: `cargo bench --bench reconcile` or
//!      `cargo bench --bench reconcile -- --messages 20000 --scale 10 --runs 3`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Command;

use harness::{flag, measure_child, median_of, warm};
use serde_json::Value;

struct Scenario {
    label: &'static str,
    offset: &'static str,
    scale: u64,
    seed: u64,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "--measure") {
        measure_child(&args[2..]);
        return;
    }
    let messages: u64 = flag(&args, "--messages").unwrap_or(20_000);
    let scale: u64 = flag(&args, "--scale").unwrap_or(10);
    let runs: usize = flag(&args, "--runs").unwrap_or(3);
    let workers: u64 = flag(&args, "--workers").unwrap_or(2);
    let causeway = PathBuf::from(env!("CARGO_BIN_EXE_causeway"));
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&data).unwrap();
    let scenarios = [
        Scenario {
            label: "±1 s",
            offset: "1s",
            scale: 1,
            seed: 1,
        },
        Scenario {
            label: "±10 min",
            offset: "10m",
            scale: 1,
            seed: 2,
        },
        Scenario {
            label: "±1 h",
            offset: "1h",
            scale: 1,
            seed: 3,
        },
        Scenario {
            label: "±1 h",
            offset: "1h",
            scale,
            seed: 3,
        },
    ];
    println!(
        "offsets  messages   packets  traffic s  offset err ms (max/mean)  NAT found/missed/false  reconciled        unmatched  wall s  Mpkt/s  peak RSS MB"
    );
    for s in &scenarios {
        let n = messages * s.scale;
        let dir = data.join(format!("reconcile-{}-{n}-{}", s.offset, s.seed));
        generate(&causeway, &dir, s.offset, n, s.seed);
        let truth = Truth::load(&dir.join("truth.jsonl"));
        let inputs: Vec<PathBuf> = truth
            .nodes
            .iter()
            .map(|name| dir.join(format!("{name}.pcap")))
            .collect();
        for f in &inputs {
            warm(f);
        }
        let out = dir.join("out.jsonl");
        let mut cmd: Vec<String> = vec![
            causeway.display().to_string(),
            "analyze".into(),
            "--workers".into(),
            workers.to_string(),
            "--progress".into(),
            "never".into(),
            "--format".into(),
            "jsonl".into(),
            "--emit".into(),
            "messages,clock,nat,stats".into(),
            "--names".into(),
            dir.join("names.txt").display().to_string(),
            "-o".into(),
            out.display().to_string(),
        ];
        cmd.extend(inputs.iter().map(|p| p.display().to_string()));
        let (wall, rss) = median_of(&cmd, runs);
        let score = score(&truth, &out);
        println!(
            "{:<8} {:>8} {:>9} {:>10.0}  {:>11.4} / {:<11.4} {:>9}/{}/{}  {:>7}/{:<7} {:>6.2}%  {:>7}  {:>6.3}  {:>6.2}  {:>11.1}",
            s.label,
            n,
            score.packets,
            truth.duration_s,
            score.offset_max_ms,
            score.offset_mean_ms,
            score.nat_found,
            score.nat_missed,
            score.nat_false,
            score.reconciled,
            score.two_sided,
            100.0 * score.reconciled as f64 / score.two_sided.max(1) as f64,
            score.unmatched,
            wall,
            score.packets as f64 / wall / 1e6,
            rss as f64 / 1024.0
        );
        println!(
            "  corrected one-way transit of reconciled messages vs truth: error p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
            score.transit_us.0, score.transit_us.1, score.transit_us.2
        );
        if score.offset_records == 0 {
            println!("  no clock_offset record after 10 s of traffic");
        } else {
            println!(
                "  {} offsets scored, {:.1}% within their error_ms; largest error {}",
                score.offset_records,
                100.0 * score.within_bound as f64 / score.offset_records as f64,
                score.worst
            );
        }
    }
}

fn generate(causeway: &Path, dir: &Path, offset: &str, messages: u64, seed: u64) {
    if dir.join("truth.jsonl").exists() {
        return;
    }
    eprintln!("generating {} ({messages} messages)...", dir.display());
    let status = Command::new(causeway)
        .args([
            "generate",
            "--preset",
            "multi-tier",
            "--dnat",
            "ap",
            "--sniffers",
            "per-host",
            "--clock-offset",
            offset,
            "--drift-ppm",
            "50",
            "--loss",
            "0.01",
            "--messages",
            &messages.to_string(),
            "--seed",
            &seed.to_string(),
            "-o",
        ])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
}

/// What the generator says happened.
struct Truth {
    /// Node names in the generator's order (the first is the reference clock).
    nodes: Vec<String>,
    /// Per node: offset ns and drift ppm, relative to `epoch_ns`.
    clocks: HashMap<String, (f64, f64)>,
    epoch_ns: u64,
    nat: BTreeSet<(String, String)>,
    /// Messages both of whose sides were captured: (src, dst) endpoints -> local send time
    /// and true transit time (first byte sent to last byte received).
    two_sided: HashMap<(String, String), Vec<(u64, f64)>>,
    two_sided_count: u64,
    duration_s: f64,
}

impl Truth {
    fn load(path: &Path) -> Truth {
        let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
        let mut truth = Truth {
            nodes: Vec::new(),
            clocks: HashMap::new(),
            epoch_ns: 0,
            nat: BTreeSet::new(),
            two_sided: HashMap::new(),
            two_sided_count: 0,
            duration_s: 0.0,
        };
        for line in file.lines() {
            let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
            match v["kind"].as_str() {
                Some("instance") => {
                    for m in v["messages"].as_array().unwrap() {
                        if m["send_captured"] == true && m["recv_captured"] == true {
                            let key = (
                                m["src_endpoint"].as_str().unwrap().to_owned(),
                                m["dst_endpoint"].as_str().unwrap().to_owned(),
                            );
                            truth.two_sided.entry(key).or_default().push((
                                m["send_ns"].as_u64().unwrap(),
                                m["true_recv_ns"].as_u64().unwrap() as f64
                                    - m["true_send_ns"].as_u64().unwrap() as f64,
                            ));
                            truth.two_sided_count += 1;
                        }
                    }
                }
                Some("truth") => {
                    truth.epoch_ns = v["clock_epoch_ns"].as_u64().unwrap();
                    for (name, c) in v["clocks"].as_object().unwrap() {
                        truth.nodes.push(name.clone());
                        truth.clocks.insert(
                            name.clone(),
                            (
                                c["offset_ms"].as_f64().unwrap() * 1e6,
                                c["drift_ppm"].as_f64().unwrap(),
                            ),
                        );
                    }
                    for m in v["nat"].as_array().unwrap() {
                        truth.nat.insert((
                            m["public"].as_str().unwrap().to_owned(),
                            m["private"].as_str().unwrap().to_owned(),
                        ));
                    }
                    truth.duration_s = (v["end_ns"].as_u64().unwrap() as f64
                        - v["start_ns"].as_u64().unwrap() as f64)
                        / 1e9;
                }
                _ => {}
            }
        }
        truth
    }

    /// True offset of `domain`'s clock minus `reference`'s when the reference reads `at_ns`.
    fn offset_ns(&self, domain: &str, reference: &str, at_ns: u64) -> f64 {
        let (or, dr) = self.clocks[reference];
        let (od, dd) = self.clocks[domain];
        let reading = at_ns as f64 - self.epoch_ns as f64;
        let t = (reading - or) / (1.0 + dr * 1e-6);
        (t * (1.0 + dd * 1e-6) + od) - reading
    }
}

#[derive(Default)]
struct Score {
    packets: u64,
    offset_max_ms: f64,
    offset_mean_ms: f64,
    offset_records: u64,
    /// Offsets whose error is within their stated bound.
    within_bound: u64,
    /// Where the largest error was.
    worst: String,
    nat_found: usize,
    nat_missed: usize,
    nat_false: usize,
    two_sided: u64,
    reconciled: u64,
    /// |corrected − true| one-way transit of reconciled messages, µs: p50, p99, max.
    transit_us: (f64, f64, f64),
    unmatched: u64,
}

fn score(truth: &Truth, out: &Path) -> Score {
    let file = std::io::BufReader::new(std::fs::File::open(out).unwrap());
    let mut score = Score {
        two_sided: truth.two_sided_count,
        ..Score::default()
    };
    let mut first_ns: BTreeMap<String, u64> = BTreeMap::new();
    let mut offsets: Vec<(String, String, u64, f64, f64)> = Vec::new();
    let mut mappings: BTreeSet<(String, String)> = BTreeSet::new();
    let mut found: HashMap<(String, String), Vec<(u64, f64)>> = HashMap::new();
    for line in file.lines() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        match v["kind"].as_str() {
            Some("message") => {
                if let (Some(send), Some(_)) = (v["send_ns"].as_u64(), v["recv_ns"].as_u64()) {
                    let transit = (v["recv_corrected_ns"].as_u64().unwrap_or(0) as i64
                        - v["send_corrected_ns"].as_u64().unwrap_or(0) as i64)
                        as f64;
                    found
                        .entry((
                            v["src_endpoint"].as_str().unwrap_or("").to_owned(),
                            v["dst_endpoint"].as_str().unwrap_or("").to_owned(),
                        ))
                        .or_default()
                        .push((send, transit));
                }
            }
            Some("clock_offset") => offsets.push((
                v["domain"].as_str().unwrap().to_owned(),
                v["reference"].as_str().unwrap().to_owned(),
                v["at_ns"].as_u64().unwrap(),
                v["offset_ms"].as_f64().unwrap() * 1e6,
                v["error_ms"].as_f64().unwrap_or(0.0),
            )),
            Some("nat_mapping") => {
                mappings.insert((
                    v["public"].as_str().unwrap().to_owned(),
                    v["private"].as_str().unwrap().to_owned(),
                ));
            }
            Some("stats") if v["final"] == true => {
                score.packets += v["records"].as_u64().unwrap_or(0);
                if let Some(t) = v["first_ns"].as_u64() {
                    first_ns.insert(v["origin"].as_str().unwrap().to_owned(), t);
                }
            }
            _ => {}
        }
    }
    // Offsets after 10 s of the reference's traffic.
    let mut sum = 0.0;
    let mut worst: Option<(f64, String, u64)> = None;
    for (domain, reference, at, offset, bound) in &offsets {
        let Some(start) = first_ns.get(reference) else {
            continue;
        };
        if *at < start + 10_000_000_000 || domain == reference {
            continue;
        }
        let error = (offset - truth.offset_ns(domain, reference, *at)).abs() / 1e6;
        if error > score.offset_max_ms {
            score.offset_max_ms = error;
            worst = Some((error, domain.clone(), (at - start) / 1_000_000_000));
        }
        sum += error;
        score.offset_records += 1;
        if error <= *bound {
            score.within_bound += 1;
        }
    }
    score.offset_mean_ms = sum / score.offset_records.max(1) as f64;
    if let Some((e, domain, s)) = worst {
        score.worst = format!("{domain} at {s} s: {e:.3} ms");
    }
    score.nat_found = truth.nat.intersection(&mappings).count();
    score.nat_missed = truth.nat.difference(&mappings).count();
    score.nat_false = mappings.difference(&truth.nat).count();
    // Messages: nearest unused send time per pair of endpoints.
    for list in found.values_mut() {
        list.sort_unstable_by_key(|x| x.0);
    }
    let mut transit_errors: Vec<f64> = Vec::new();
    let mut used: HashMap<(String, String), BTreeSet<usize>> = HashMap::new();
    for (key, sends) in &truth.two_sided {
        let Some(list) = found.get(key) else { continue };
        let taken = used.entry(key.clone()).or_default();
        for &(t, true_transit) in sends {
            let lo = t.saturating_sub(50_000);
            let hi = t + 2_000_000;
            let start = list.partition_point(|x| x.0 < lo);
            if let Some(k) = (start..list.len())
                .take_while(|&k| list[k].0 <= hi)
                .find(|k| !taken.contains(k))
            {
                taken.insert(k);
                score.reconciled += 1;
                transit_errors.push((list[k].1 - true_transit).abs());
            }
        }
    }
    transit_errors.sort_by(f64::total_cmp);
    let q = |p: f64| {
        transit_errors
            .get(((transit_errors.len() as f64 - 1.0) * p).round() as usize)
            .map_or(0.0, |e| e / 1e3)
    };
    score.transit_us = (q(0.5), q(0.99), q(1.0));
    let total: usize = found.values().map(Vec::len).sum();
    let matched: usize = used.values().map(BTreeSet::len).sum();
    score.unmatched = (total - matched) as u64;
    score
}
