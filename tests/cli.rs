//! End-to-end tests of the `causeway` binary: generate, analyze, stats, demo, the output
//! contract, workers and processes, errors.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// The record count the generator reported for `file`.
fn generated_records(report: &str, file: &str) -> u64 {
    let line = report
        .lines()
        .find(|l| l.contains(file))
        .unwrap_or_else(|| panic!("{file} not in {report}"));
    let inner = line.rsplit('(').next().unwrap();
    inner.split_whitespace().next().unwrap().parse().unwrap()
}

fn truth(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("truth.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn help_explains_commands_and_options() {
    let out = causeway(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for cmd in ["analyze", "stats", "generate", "demo"] {
        assert!(text.contains(cmd), "{text}");
    }
    let out = causeway(&["analyze", "--help"]);
    let text = String::from_utf8(out.stdout).unwrap();
    for opt in [
        "--workers",
        "--names",
        "--format",
        "--lateness",
        "NAME=PATH",
        "--processes",
        "--hostfile",
    ] {
        assert!(text.contains(opt), "analyze --help lacks {opt}");
    }
    assert!(
        !text.contains(" -w,"),
        "-w is tcpdump's write flag; --workers has no short form"
    );
    let out = causeway(&["analyze", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn analyze_reports_every_packet_in_closed_conversations() {
    let dir = scratch("e2e-pcap");
    let report = generate(&dir, &["--preset", "multi-tier", "--messages", "3000"]);
    let packets = generated_records(&report, "mirror.pcap");
    let capture = dir.join("mirror.pcap");
    let records = causeway_jsonl(&[
        "analyze",
        "--format",
        "jsonl",
        "--emit",
        "flows,stats",
        &capture.display().to_string(),
    ]);
    for r in &records {
        assert_eq!(r["schema"], 1, "{r}");
        assert!(r["kind"].is_string());
    }
    let st = stats_of(&records, "mirror");
    assert_eq!(st["records"].as_u64(), Some(packets));
    assert_eq!(st["tcp"].as_u64(), Some(packets));
    assert_eq!(st["late"], 0);
    assert_eq!(st["formats"]["pcap (ns)"], 1);
    let flows: Vec<_> = records.iter().filter(|r| r["kind"] == "flow").collect();
    let in_flows: u64 = flows
        .iter()
        .map(|f| {
            f["to_server"]["packets"].as_u64().unwrap()
                + f["to_client"]["packets"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(
        in_flows, packets,
        "every packet belongs to one conversation"
    );
    assert!(
        flows
            .iter()
            .all(|f| f["end"] == "closed" && f["saw_open"] == true),
        "generated connections open and close"
    );
    // One client connection per instance, plus pooled connections between servers.
    let instances = truth(&dir)
        .iter()
        .filter(|r| r["kind"] == "instance")
        .count();
    let from_clients = flows
        .iter()
        .filter(|f| f["src_endpoint"].as_str().unwrap().starts_with("10.1."))
        .count();
    assert_eq!(from_clients, instances);
    // No invented path patterns before linking exists.
    assert!(records.iter().all(|r| r["kind"] != "pattern"));
}

#[test]
fn message_traces_become_named_messages() {
    let dir = scratch("e2e-csv");
    let report = generate(
        &dir,
        &[
            "--preset",
            "children-d-cc",
            "--messages",
            "2000",
            "--format",
            "csv",
            "--loss",
            "0.02",
        ],
    );
    let rows = generated_records(&report, "messages.csv");
    let csv = dir.join("messages.csv").display().to_string();
    let names = dir.join("names.txt").display().to_string();
    let records = causeway_jsonl(&["analyze", "--format", "jsonl", "--names", &names, &csv]);
    let messages: Vec<_> = records.iter().filter(|r| r["kind"] == "message").collect();
    assert_eq!(messages.len() as u64, rows);
    let nodes: BTreeSet<&str> = messages
        .iter()
        .flat_map(|m| [m["src"].as_str().unwrap(), m["dst"].as_str().unwrap()])
        .collect();
    for n in ["B", "C", "D"] {
        assert!(nodes.contains(n), "{nodes:?}");
    }
    // Rows are numbered from 0 in file order, and every message says where it came from.
    let mut row_numbers: Vec<u64> = messages
        .iter()
        .map(|m| m["row"].as_u64().unwrap())
        .collect();
    row_numbers.sort_unstable();
    assert_eq!(row_numbers, (0..rows).collect::<Vec<_>>());
    // The truth file points at the same rows.
    let t = truth(&dir);
    let inst = t.iter().find(|r| r["kind"] == "instance").unwrap();
    let first = &inst["messages"][0];
    if let Some(row) = first["row"].as_u64() {
        let m = messages.iter().find(|m| m["row"] == row).unwrap();
        assert_eq!(m["dst"], first["dst"]);
        assert_eq!(m["dst_endpoint"], first["dst_endpoint"]);
    }
    // Loss leaves one side unobserved, never both.
    assert!(
        messages
            .iter()
            .all(|m| !(m["send_ns"].is_null() && m["recv_ns"].is_null()))
    );
    assert!(
        messages
            .iter()
            .any(|m| m["recv_ns"].is_null() || m["send_ns"].is_null())
    );
}

fn flow_set(records: &[serde_json::Value]) -> BTreeSet<String> {
    records
        .iter()
        .filter(|r| {
            r["kind"] == "flow"
                || r["kind"] == "message"
                || (r["kind"] == "clock_offset" && r["final"] == true)
        })
        .map(|r| r.to_string())
        .collect()
}

/// The set differs: show a few of the differences rather than both sets.
fn assert_same(a: &BTreeSet<String>, b: &BTreeSet<String>, what: &str) {
    let only_a: Vec<&String> = a.difference(b).take(3).collect();
    let only_b: Vec<&String> = b.difference(a).take(3).collect();
    assert!(
        only_a.is_empty() && only_b.is_empty(),
        "{what}: only in the first {only_a:#?}, only in the second {only_b:#?}"
    );
}

#[test]
fn workers_and_processes_give_the_same_answers() {
    let dir = scratch("e2e-workers");
    generate(
        &dir,
        &[
            "--preset",
            "cdn-miss",
            "--messages",
            "1500",
            "--sniffers",
            "per-host",
            "--clock-offset",
            "2s",
        ],
    );
    let inputs = pcaps_in(&dir);
    let run = |extra: &[&str]| {
        let mut args = vec![
            "analyze",
            "--format",
            "jsonl",
            "--emit",
            "flows,messages,clock,nat,stats",
        ];
        args.extend_from_slice(extra);
        args.extend(inputs.iter().map(String::as_str));
        causeway_jsonl(&args)
    };
    let one = run(&["--workers", "1"]);
    let two = run(&["--workers", "2"]);
    assert!(!flow_set(&one).is_empty());
    assert!(one.iter().any(|r| r["kind"] == "message"));
    assert!(one.iter().any(|r| r["kind"] == "clock_offset"));
    assert_same(&flow_set(&one), &flow_set(&two), "one worker vs two");
    for origin in ["proxy-a", "dns", "origin-1"] {
        assert_eq!(
            stats_of(&one, origin)["records"],
            stats_of(&two, origin)["records"]
        );
    }

    // Two processes of one worker each, talking over localhost.
    let ports: Vec<u16> = (0..2)
        .map(|_| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        })
        .collect();
    let hostfile = dir.join("hosts.txt");
    std::fs::write(
        &hostfile,
        format!("127.0.0.1:{}\n127.0.0.1:{}\n", ports[0], ports[1]),
    )
    .unwrap();
    let spawn = |index: &str| {
        Command::new(bin())
            .args([
                "analyze",
                "--format",
                "jsonl",
                "--emit",
                "flows,messages,clock,nat,stats",
                "--processes",
                "2",
                "--process",
                index,
                "--hostfile",
            ])
            .arg(&hostfile)
            .args(&inputs)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let p1 = spawn("1");
    let p0 = spawn("0");
    let out0 = p0.wait_with_output().unwrap();
    let out1 = p1.wait_with_output().unwrap();
    assert!(
        out0.status.success(),
        "{}",
        String::from_utf8_lossy(&out0.stderr)
    );
    assert!(
        out1.status.success(),
        "{}",
        String::from_utf8_lossy(&out1.stderr)
    );
    assert!(out1.stdout.is_empty(), "only process 0 writes results");
    let cluster: Vec<serde_json::Value> = String::from_utf8(out0.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_same(
        &flow_set(&cluster),
        &flow_set(&one),
        "two processes vs one worker",
    );
}

#[test]
fn output_formats_files_and_pipes() {
    let dir = scratch("e2e-formats");
    generate(
        &dir,
        &[
            "--preset",
            "penalty-breaker",
            "--messages",
            "1000",
            "--format",
            "pcapng",
            "--gzip",
        ],
    );
    let capture = dir.join("mirror.pcapng.gz").display().to_string();
    // --format json: one array
    let out = causeway(&["stats", "--format", "json", &capture]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.as_array().unwrap().iter().any(|r| r["kind"] == "stats"));
    // -o FILE
    let file = dir.join("out.jsonl");
    let out = causeway(&[
        "analyze",
        "--format",
        "jsonl",
        "-o",
        &file.display().to_string(),
        &capture,
    ]);
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert!(std::fs::read_to_string(&file).unwrap().lines().count() > 1);
    // table
    let out = causeway(&["stats", &capture]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Input mirror") && text.contains("Conversations"),
        "{text}"
    );
    // a reader that goes away early is not an error
    let mut child = Command::new(bin())
        .args(["analyze", "--format", "jsonl", &capture])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn late_records_are_counted_not_dropped() {
    let dir = scratch("e2e-late");
    // A pcap whose third record is 9 s older than the second: later than the 2 s default.
    let frame = {
        let mut v = Vec::new();
        etherparse::PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1000, 2000)
            .write(&mut v, b"hello")
            .unwrap();
        v
    };
    let mut bytes = Vec::new();
    for x in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, 1] {
        bytes.extend(x.to_le_bytes());
    }
    for sec in [
        1_700_000_000u32,
        1_700_000_010,
        1_700_000_001,
        1_700_000_011,
    ] {
        for x in [sec, 0, frame.len() as u32, frame.len() as u32] {
            bytes.extend(x.to_le_bytes());
        }
        bytes.extend(&frame);
    }
    let path = dir.join("late.pcap");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(&bytes)
        .unwrap();
    let records = causeway_jsonl(&["stats", "--format", "jsonl", &path.display().to_string()]);
    let st = stats_of(&records, "late");
    assert_eq!(st["records"], 4);
    assert_eq!(st["late"], 1, "{st}");
    let records = causeway_jsonl(&[
        "stats",
        "--format",
        "jsonl",
        "--lateness",
        "10s",
        &path.display().to_string(),
    ]);
    assert_eq!(stats_of(&records, "late")["late"], 0);
}

#[test]
fn bad_names_file_is_one_line_with_its_location() {
    let dir = scratch("e2e-names");
    generate(&dir, &["--preset", "children-0-2", "--messages", "200"]);
    let names = dir.join("my-names.txt");
    std::fs::write(&names, "10.0.0.1 web\nthis is wrong\n").unwrap();
    let out = causeway(&[
        "analyze",
        "--names",
        &names.display().to_string(),
        &dir.join("mirror.pcap").display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("{}:2:", names.display())), "{err}");
}

#[test]
fn demo_runs_on_built_in_data() {
    let out = causeway(&["demo", "--messages", "2000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Input ws1"), "{text}");
    assert!(text.contains("Messages:"), "{text}");
    assert!(text.contains("Clocks (reference"), "{text}");
}

#[test]
fn generator_presets_are_valid_captures() {
    let dir = scratch("e2e-presets");
    for preset in [
        "multi-tier",
        "children-parallel",
        "children-0-2",
        "children-d-cc",
        "penalty-breaker",
        "cdn-miss",
    ] {
        let sub = dir.join(preset);
        let report = generate(&sub, &["--preset", preset, "--messages", "500"]);
        let t = truth(&sub);
        let summary = t.last().unwrap();
        assert_eq!(summary["kind"], "truth");
        assert!(summary["messages"].as_u64().unwrap() >= 500);
        let patterns: Vec<_> = t.iter().filter(|r| r["kind"] == "pattern").collect();
        let instances = t.iter().filter(|r| r["kind"] == "instance").count() as u64;
        assert_eq!(
            patterns
                .iter()
                .map(|p| p["count"].as_u64().unwrap())
                .sum::<u64>(),
            instances
        );
        let records = causeway_jsonl(&[
            "stats",
            "--format",
            "jsonl",
            &sub.join("mirror.pcap").display().to_string(),
        ]);
        let st = stats_of(&records, "mirror");
        assert_eq!(
            st["records"].as_u64(),
            Some(generated_records(&report, "mirror.pcap"))
        );
        assert_eq!(
            st["skipped"].as_object().unwrap().len(),
            0,
            "{preset}: {st}"
        );
    }
    // The CDN preset's DNS lookups travel over UDP to port 53.
    let records = causeway_jsonl(&[
        "analyze",
        "--format",
        "jsonl",
        "--emit",
        "flows",
        &dir.join("cdn-miss/mirror.pcap").display().to_string(),
    ]);
    assert!(records.iter().any(|r| r["protocol"] == "udp" && r["dst_endpoint"].as_str().unwrap().ends_with(":53")));
}

/// The final `stats` record of a `stats --format jsonl` run, and the records it analysed
/// (read less skipped).
fn analysed(records: &[serde_json::Value]) -> (serde_json::Value, u64) {
    let st = records
        .iter()
        .find(|r| r["kind"] == "stats" && r["final"] == true)
        .expect("final stats")
        .clone();
    let skipped: u64 = st["skipped"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let n = st["records"].as_u64().unwrap() - skipped;
    (st, n)
}

#[test]
fn replay_speed_count_and_ctrl_c() {
    let dir = scratch("replay");
    generate(&dir, &["--preset", "multi-tier", "--messages", "3000"]);
    let pcap = dir.join("mirror.pcap");
    let pcap = pcap.to_str().unwrap();
    let all = causeway_jsonl(&["stats", "--format", "jsonl", pcap]);
    let (st, n) = analysed(&all);
    let span_s = (st["last_ns"].as_u64().unwrap() - st["first_ns"].as_u64().unwrap()) as f64 / 1e9;
    assert!(span_s > 1.0, "span {span_s}");

    // At a speed that makes the trace last 1.5 s, the run takes about that long and reads
    // everything, the same as at full speed.
    let factor = span_s / 1.5;
    let start = std::time::Instant::now();
    let paced = causeway_jsonl(&[
        "stats",
        "--format",
        "jsonl",
        "--speed",
        &format!("{factor}x"),
        pcap,
    ]);
    let took = start.elapsed().as_secs_f64();
    assert!(
        (1.4..4.0).contains(&took),
        "took {took} s for a 1.5 s replay"
    );
    assert_eq!(analysed(&paced).1, n);

    // --count: exactly N records analysed; what was read ahead is counted as stopped.
    let (st, counted) = analysed(&causeway_jsonl(&[
        "stats", "--format", "jsonl", "--count", "500", pcap,
    ]));
    assert_eq!(counted, 500, "{st}");

    // Ctrl-C during a real-time replay: the run stops reading, reports what it read and
    // exits 0.
    let child = Command::new(bin())
        .args(["stats", "--format", "jsonl", "--speed", "1", pcap])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let start = std::time::Instant::now();
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(start.elapsed().as_secs_f64() < 2.0);
    let records: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (_, part) = analysed(&records);
    assert!(part > 0 && part < n, "{part} of {n}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn extra_sinks_receive_every_record() {
    let dir = scratch("sinks");
    generate(&dir, &["--preset", "multi-tier", "--messages", "500"]);
    let pcap = dir.join("mirror.pcap");
    let piped = dir.join("piped.jsonl");
    let side = dir.join("side.jsonl");
    let main = causeway_jsonl(&[
        "stats",
        "--format",
        "jsonl",
        "--sink",
        &format!("exec:cat > {}", piped.display()),
        "--sink",
        &format!("jsonl:{}", side.display()),
        pcap.to_str().unwrap(),
    ]);
    assert!(main.len() > 1);
    for file in [&piped, &side] {
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines, main, "{}", file.display());
    }
    // A command that stops reading is an error that names it, not a silent loss.
    let out = causeway(&[
        "stats",
        "--format",
        "jsonl",
        "--sink",
        "exec:exit 4",
        pcap.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exec `exit 4`"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A message-trace file in time order is waited out by its measured disorder, not the
/// default's seconds: a row 700 ms behind the one before it is not late (the lateness is its
/// disorder plus 100 ms), and one 3 s behind is (the default's 2 s is the most).
/// A busy message trace's warm start is the time its first 200,000 messages take at its
/// mean rate when that is less than the default two seconds (the warm start holds what it
/// covers in memory); a given `--warmup` stands.
#[test]
fn a_busy_message_traces_warm_start_is_its_first_messages() {
    let dir = scratch("e2e-trace-warmup");
    let t0: u64 = 1_700_000_000_000_000_000;
    // 1,000 messages per millisecond of event time: a million per second.
    let mut csv = String::from("send_ns,recv_ns,src,dst\n");
    for i in 0..20_000u64 {
        let t = t0 + i * 1_000;
        let (src, dst) = if i % 2 == 0 {
            ("web", "db")
        } else {
            ("db", "web")
        };
        csv.push_str(&format!("{t},{},{src},{dst}\n", t + 200));
    }
    let path = dir.join("busy.csv");
    std::fs::write(&path, csv).unwrap();
    let path = path.display().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec!["analyze", "--format", "jsonl", "--emit", "stats"];
        args.extend_from_slice(extra);
        args.push(&path);
        let out = Command::new(bin())
            .args(&args)
            .env("CAUSEWAY_LOG", "info")
            .output()
            .unwrap();
        let records = jsonl_of(&out, &args);
        let st = stats_of(&records, "busy");
        assert_eq!(st["records"].as_u64(), Some(20_000), "{st}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = run(&[]);
    assert!(
        stderr.contains(
            "message traces at 1000050 messages per second of event time: a warm start of \
             0.200 s (about 200000 messages)"
        ),
        "{stderr}"
    );
    let stderr = run(&["--warmup", "2s"]);
    assert!(!stderr.contains("a warm start of"), "{stderr}");
}

#[test]
fn a_message_traces_lateness_is_its_measured_disorder() {
    let dir = scratch("e2e-trace-lateness");
    let t0: u64 = 1_700_000_000_000_000_000;
    let write = |name: &str, back_ms: u64| {
        let mut csv = String::from("send_ns,recv_ns,src,dst\n");
        for i in 0..400u64 {
            // Row 350 was stamped `back_ms` before the row before it.
            let t = if i == 350 {
                t0 + 349 * 10_000_000 - back_ms * 1_000_000
            } else {
                t0 + i * 10_000_000
            };
            let (src, dst) = if i % 2 == 0 {
                ("web", "db")
            } else {
                ("db", "web")
            };
            csv.push_str(&format!("{t},{},{src},{dst}\n", t + 200_000));
        }
        let path = dir.join(name);
        std::fs::write(&path, csv).unwrap();
        path.display().to_string()
    };
    let near = write("near.csv", 700);
    let args = ["analyze", "--format", "jsonl", "--emit", "stats", &near];
    let out = Command::new(bin())
        .args(args)
        .env("CAUSEWAY_LOG", "info")
        .output()
        .unwrap();
    let records = jsonl_of(&out, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rows at most 0.700 s out of order): lateness 0.800 s"),
        "{stderr}"
    );
    let st = stats_of(&records, "near");
    assert_eq!(
        (st["records"].as_u64(), st["late"].as_u64()),
        (Some(400), Some(0)),
        "{st}"
    );
    let far = write("far.csv", 3_000);
    let records = causeway_jsonl(&["analyze", "--format", "jsonl", "--emit", "stats", &far]);
    let st = stats_of(&records, "far");
    assert_eq!(
        (st["records"].as_u64(), st["late"].as_u64()),
        (Some(400), Some(1)),
        "{st}"
    );
}
