//! TraceWeaver harness: how well `causeway analyze` finds each message's causal parent on real
//! microservice traces recorded by others, next to the trivial latest-in rule and the figures
//! that TraceWeaver (Ashok et al., SIGCOMM'24) and its baselines reach on the same traces.
//!
//! Data: the sets under `DATA/data/<set>/` (default `../shared/traceweaver` next to the
//! workspace, i.e. `/work/shared/traceweaver`; `--data DIR` or `CAUSEWAY_TRACEWEAVER=DIR`
//! overrides): the Apache-2.0 traces of the TraceWeaver artifact (DeathStarBench
//! hotelReservation and mediaMicroservices, a Node.js chain with and without file I/O),
//! converted from Jaeger JSON into message traces; see `DATA/README.md`. Each
//! `messages.csv.gz` has the columns `send_ns,recv_ns,src,dst,kind,msg_id,
//! truth_parent_msg_id,trace_id`; only the first five are written, to
//! `target/bench-data/traceweaver/<set>/messages.csv`, for Causeway to read.
//!
//! Per set it runs `causeway analyze --workers 2 --emit instances --format jsonl -o
//! instances.jsonl messages.csv` (plus whatever follows `--analyze`) in a fresh helper process
//! that takes its wall time (one run, start to exit) and peak RSS (`ru_maxrss`), and turns the
//! instances into predicted parents: a message's `row` is its 0-based data row (`msg_id` − 1),
//! its parent is the message its `parent` index points at in the same instance; a message in
//! several instances takes its parent from the likeliest one (highest `probability`, the first
//! listed at equal probability); a message in no instance, or an instance's root, has no
//! parent. The predictions are kept as `pred.csv` (`msg_id,pred_parent_msg_id`) next to the
//! trace.
//!
//! It scores them exactly as `DATA/score.py` does (reimplemented here: `parent_acc`,
//! `request_parent_acc`, `trace_exact_acc`, `trace_membership_acc` and the `*_lenient`
//! variants that also accept the parent in `truth_trace_scope.csv(.gz)`, which lists
//! alternatives on media only), and scores score.py's `latest_in` baseline (the parent of a
//! message sent by N is the latest message N received at or before the send, whatever its
//! trace) the same way. The table shows, per set, `parent_acc` (lenient where the set lists
//! alternatives, i.e. on media, as the README asks; elsewhere the two are equal) and
//! `trace_membership_acc` (traces all of whose messages lead through the predicted parents to
//! the trace's own root: trace-scoped by construction, so it has no lenient variant) for
//! Causeway and for latest-in; the end-to-end accuracy of TraceWeaver, TraceWeaver top-5, WAP5,
//! vPath, FCFS and ArrivalOrder from `DATA/peer_figures.csv` (run by others from the artifact's
//! own code on these traces; its notes are printed under the table); the wall time and peak
//! RSS of the analyze run; and whether Causeway meets the bar: membership at least latest-in's
//! and at least each of WAP5's, vPath's and FCFS's (within 2 points of one that is 100), and
//! `parent_acc` at least latest-in's. All Causeway and latest-in figures come from the run,
//! never from a table.
//!
//! `--check-python` also runs `python3 DATA/score.py` on each set, on its `--baseline
//! latest-in`, on the Rust latest-in predictions and on Causeway's predictions, and fails if
//! any figure differs from the Rust scoring. `--json FILE` writes the table (with every metric)
//! as JSON. `--causeway PATH` uses another binary.
//!
//! Run: `cargo bench --bench traceweaver` or
//!      `cargo bench --bench traceweaver -- --sets hotel_load25,media_load125`
//!      `cargo bench --bench traceweaver -- --check-python --json tw.json --analyze --try-both 6`

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod harness;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use harness::{analyze_args, flag, measure, which};
use serde_json::{Value, json};

/// What `harness::measure` runs in its fresh helper process (in place of
/// `harness::measure_child`, whose 100 ms resident-set polling rounds the wall time up to the
/// next 100 ms, a large part of these sub-second runs): runs the command, waits for it, and
/// prints the wall time in ns and its peak RSS in KiB (`ru_maxrss` of the helper's only child).
/// The child's stderr goes to the helper's, which `measure` shows if the command fails.
fn measure_wait(cmd: &[String]) {
    let start = Instant::now();
    let status = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    let wall = start.elapsed().as_nanos();
    assert!(status.success(), "{cmd:?} failed: {status}");
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    println!("{wall} {}", usage.max_rss());
}

/// The peers' methods as `peer_figures.csv` names them, with their column headings.
const PEERS: &[(&str, &str)] = &[
    ("TraceWeaver", "TraceWeaver"),
    ("TraceWeaver (top-K=5)", "TW top-5"),
    ("WAP5", "WAP5"),
    ("vPath", "vPath"),
    ("FCFS", "FCFS"),
    ("ArrivalOrder", "ArrivalOrder"),
];

/// The peers whose end-to-end accuracy Causeway's membership must reach.
const BAR_PEERS: &[&str] = &["WAP5", "vPath", "FCFS"];

/// How far below a peer's 100% Causeway's membership may be and still meet the bar.
const BAR_SLACK_AT_100: f64 = 2.0;

/// One message of a set, as score.py reads it.
struct Msg {
    send: i64,
    recv: i64,
    src: String,
    dst: String,
    request: bool,
    /// The true parent's msg_id; `None` for a root.
    truth: Option<u64>,
    /// Index of its trace id among the set's trace ids.
    trace: usize,
}

/// A set: its messages in file order (`msg_id` = index + 1) and the trace-scoped alternative
/// parents (by index; `None` where there is none).
struct Set {
    msgs: Vec<Msg>,
    traces: usize,
    alt: Vec<Option<u64>>,
    alternatives: usize,
}

/// Predicted parent msg_id per message (by index); `None`: a root, or no prediction.
type Pred = Vec<Option<u64>>;

/// score.py's figures for one prediction.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Scores {
    messages: usize,
    traces: usize,
    parent_acc: f64,
    request_parent_acc: f64,
    trace_exact_acc: f64,
    parent_acc_lenient: f64,
    trace_exact_acc_lenient: f64,
    trace_membership_acc: f64,
}

impl Scores {
    /// The figures in score.py's JSON order and names.
    const NAMES: [&str; 8] = [
        "messages",
        "traces",
        "parent_acc",
        "request_parent_acc",
        "trace_exact_acc",
        "parent_acc_lenient",
        "trace_exact_acc_lenient",
        "trace_membership_acc",
    ];

    fn values(&self) -> [f64; 8] {
        [
            self.messages as f64,
            self.traces as f64,
            self.parent_acc,
            self.request_parent_acc,
            self.trace_exact_acc,
            self.parent_acc_lenient,
            self.trace_exact_acc_lenient,
            self.trace_membership_acc,
        ]
    }

    fn to_json(self) -> Value {
        let mut m = serde_json::Map::new();
        for (name, v) in Self::NAMES.iter().zip(self.values()) {
            let v = if *name == "messages" || *name == "traces" {
                json!(v as u64)
            } else {
                json!(v)
            };
            m.insert((*name).to_owned(), v);
        }
        Value::Object(m)
    }
}

/// Python's `round(x, 2)`: Rust's formatting rounds the exact binary value to nearest, ties
/// to even, as Python's `round` does.
fn round2(x: f64) -> f64 {
    format!("{x:.2}").parse().unwrap()
}

/// Splits one CSV line (RFC 4180 quoting, as Python's `csv` module reads it).
fn split_csv(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' if quoted => quoted = false,
            '"' if field.is_empty() => quoted = true,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// Reads a CSV file (gzipped if its name ends in `.gz`) as a header and rows of fields; empty
/// lines are skipped, as `csv.DictReader` does.
fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let file =
        std::fs::File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut lines = BufReader::new(reader).lines().map(|l| {
        let l = l.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        l.strip_suffix('\r').map(str::to_owned).unwrap_or(l)
    });
    let header = split_csv(&lines.next().unwrap_or_default());
    let rows = lines
        .filter(|l| !l.is_empty())
        .map(|l| split_csv(&l))
        .collect();
    (header, rows)
}

/// The position of each of `names` in `header`.
fn columns<const N: usize>(header: &[String], names: [&str; N], path: &Path) -> [usize; N] {
    names.map(|name| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("{}: no column {name}", path.display()))
    })
}

/// A msg_id-like field: a plain decimal number, as score.py compares them as strings.
fn id_of(field: &str, what: &str) -> u64 {
    let id: u64 = field
        .parse()
        .unwrap_or_else(|_| panic!("{what}: not a message id: {field:?}"));
    assert_eq!(id.to_string(), field, "{what}: not a plain message id");
    id
}

/// Reads a set's messages and its trace-scoped alternatives (score.py's `read_messages` and
/// `read_alt`). `msg_id` must be the 1-based data row, as the README says.
fn read_set(dir: &Path) -> Set {
    let path = dir.join("messages.csv.gz");
    let (header, rows) = read_csv(&path);
    let cols = columns(
        &header,
        [
            "send_ns",
            "recv_ns",
            "src",
            "dst",
            "kind",
            "msg_id",
            "truth_parent_msg_id",
            "trace_id",
        ],
        &path,
    );
    let mut trace_ids: HashMap<String, usize> = HashMap::new();
    let mut msgs = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let at = format!("{} data row {}", path.display(), i + 1);
        assert!(r.len() == header.len(), "{at}: {} fields", r.len());
        let f = |c: usize| r[cols[c]].as_str();
        assert_eq!(
            id_of(f(5), &at),
            i as u64 + 1,
            "{at}: msg_id is not the 1-based data row"
        );
        let time = |c: usize| -> i64 {
            f(c).parse()
                .unwrap_or_else(|_| panic!("{at}: bad timestamp {:?}", f(c)))
        };
        let n = trace_ids.len();
        msgs.push(Msg {
            send: time(0),
            recv: time(1),
            src: f(2).to_owned(),
            dst: f(3).to_owned(),
            request: f(4) == "request",
            truth: (!f(6).is_empty()).then(|| id_of(f(6), &at)),
            trace: *trace_ids.entry(f(7).to_owned()).or_insert(n),
        });
    }
    let mut alt = vec![None; msgs.len()];
    let mut alternatives = 0;
    let scope = ["truth_trace_scope.csv", "truth_trace_scope.csv.gz"]
        .into_iter()
        .map(|name| dir.join(name))
        .find(|p| p.exists());
    if let Some(path) = scope {
        let (header, rows) = read_csv(&path);
        let [id, parent] = columns(&header, ["msg_id", "trace_scope_parent_msg_id"], &path);
        for r in &rows {
            // An alternative for a message that is not in the set, or an empty one, never
            // counts in score.py.
            let Ok(row) = r[id].parse::<usize>() else {
                continue;
            };
            if r[id] != row.to_string() || row == 0 || row > msgs.len() || r[parent].is_empty() {
                continue;
            }
            alt[row - 1] = Some(id_of(&r[parent], &path.display().to_string()));
            alternatives += 1;
        }
    }
    Set {
        msgs,
        traces: trace_ids.len(),
        alt,
        alternatives,
    }
}

/// score.py's `latest_in`: the parent of a message sent by N is the latest message received
/// by N at or before the send (at equal timestamps: listed earlier), whatever its trace;
/// requests from nodes that never receive a request are roots.
fn latest_in(set: &Set) -> Pred {
    let mut by_dst: HashMap<&str, Vec<(i64, u64)>> = HashMap::new();
    for (i, m) in set.msgs.iter().enumerate() {
        by_dst
            .entry(m.dst.as_str())
            .or_default()
            .push((m.recv, i as u64 + 1));
    }
    for v in by_dst.values_mut() {
        v.sort_unstable();
    }
    let servers: HashSet<&str> = set
        .msgs
        .iter()
        .filter(|m| m.request)
        .map(|m| m.dst.as_str())
        .collect();
    set.msgs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if m.request && !servers.contains(m.src.as_str()) {
                return None;
            }
            let v = by_dst.get(m.src.as_str())?;
            // bisect_left(v, (send, id)) - 1: the last candidate before (send, id).
            let before = v.partition_point(|&c| c < (m.send, i as u64 + 1));
            before.checked_sub(1).map(|j| v[j].1)
        })
        .collect()
}

/// score.py's `score`.
fn score(set: &Set, pred: &Pred) -> Scores {
    let msgs = &set.msgs;
    let n = msgs.len();
    let (mut ok, mut req_ok, mut req_n, mut lenient) = (0usize, 0usize, 0usize, 0usize);
    let mut trace_ok = vec![true; set.traces];
    let mut trace_len = vec![true; set.traces];
    for (i, m) in msgs.iter().enumerate() {
        let p = pred[i];
        let good = p == m.truth;
        let good_l = good || (p.is_some() && set.alt[i] == p);
        ok += usize::from(good);
        lenient += usize::from(good_l);
        if m.request {
            req_n += 1;
            req_ok += usize::from(good);
        }
        trace_ok[m.trace] &= good;
        trace_len[m.trace] &= good_l;
    }
    // The trace's root: the last message without a true parent, in file order.
    let mut root_of_trace = vec![None; set.traces];
    for (i, m) in msgs.iter().enumerate() {
        if m.truth.is_none() {
            root_of_trace[m.trace] = Some(i as u64 + 1);
        }
    }
    // score.py's `root`: follow predicted parents until a message without one (or an id
    // that is not a message); `None` on a cycle. Memoised: without a cycle a walk has at
    // most n steps, so score.py's step limit only ever stops cycles.
    let next = |id: u64| -> Option<u64> {
        let i = usize::try_from(id).ok()?.checked_sub(1)?;
        pred.get(i).copied().flatten()
    };
    #[derive(Clone, Copy)]
    enum Walk {
        Unknown,
        OnPath,
        Done(Option<u64>),
    }
    let mut walk = vec![Walk::Unknown; n];
    let mut root = |start: u64| -> Option<u64> {
        let mut path = Vec::new();
        let mut id = start;
        let found = loop {
            let i = (id - 1) as usize;
            match walk[i] {
                Walk::Done(r) => break r,
                Walk::OnPath => break None,
                Walk::Unknown => {}
            }
            walk[i] = Walk::OnPath;
            path.push(i);
            match next(id) {
                Some(p) if p >= 1 && p as usize <= n => id = p,
                Some(p) => break Some(p),
                None => break Some(id),
            }
        };
        for i in path {
            walk[i] = Walk::Done(found);
        }
        found
    };
    let mut member_ok = vec![true; set.traces];
    for (i, m) in msgs.iter().enumerate() {
        member_ok[m.trace] &= root(i as u64 + 1) == root_of_trace[m.trace];
    }
    let pct = |k: usize, of: usize| round2(100.0 * k as f64 / of as f64);
    let count = |v: &[bool]| v.iter().filter(|&&b| b).count();
    Scores {
        messages: n,
        traces: set.traces,
        parent_acc: pct(ok, n),
        request_parent_acc: pct(req_ok, req_n.max(1)),
        trace_exact_acc: pct(count(&trace_ok), set.traces),
        parent_acc_lenient: pct(lenient, n),
        trace_exact_acc_lenient: pct(count(&trace_len), set.traces),
        trace_membership_acc: pct(count(&member_ok), set.traces),
    }
}

/// Predicted parents from `causeway analyze --emit instances --format jsonl` output: by the
/// likeliest instance holding each message.
fn parents_of_instances(out: &Path, n: usize) -> (Pred, usize) {
    let file =
        std::fs::File::open(out).unwrap_or_else(|e| panic!("cannot open {}: {e}", out.display()));
    let mut best: Vec<Option<(f64, Option<u64>)>> = vec![None; n];
    let mut instances = 0;
    for (k, line) in BufReader::new(file).lines().enumerate() {
        let line = line.unwrap();
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{} line {}", out.display(), k + 1);
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{at}: {e}"));
        if v["kind"] != "instance" {
            continue;
        }
        instances += 1;
        let probability = v["probability"]
            .as_f64()
            .unwrap_or_else(|| panic!("{at}: no probability"));
        let messages = v["messages"]
            .as_array()
            .unwrap_or_else(|| panic!("{at}: no messages"));
        let rows: Vec<u64> = messages
            .iter()
            .map(|m| {
                m["row"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{at}: a message without a row"))
            })
            .collect();
        for (m, &row) in messages.iter().zip(&rows) {
            let parent = match &m["parent"] {
                Value::Null => None,
                p => {
                    let j = p
                        .as_u64()
                        .and_then(|j| usize::try_from(j).ok())
                        .filter(|&j| j < rows.len())
                        .unwrap_or_else(|| panic!("{at}: bad parent index {p}"));
                    Some(rows[j] + 1)
                }
            };
            let slot = usize::try_from(row)
                .ok()
                .and_then(|r| best.get_mut(r))
                .unwrap_or_else(|| panic!("{at}: row {row} beyond the trace's {n} rows"));
            if slot.is_none_or(|(p, _)| probability > p) {
                *slot = Some((probability, parent));
            }
        }
    }
    (
        best.into_iter().map(|b| b.and_then(|(_, p)| p)).collect(),
        instances,
    )
}

/// Writes predictions as score.py reads them: `msg_id,pred_parent_msg_id`.
fn write_pred(path: &Path, pred: &Pred) {
    let mut out = String::from("msg_id,pred_parent_msg_id\n");
    for (i, p) in pred.iter().enumerate() {
        let _ = writeln!(
            out,
            "{},{}",
            i + 1,
            p.map_or(String::new(), |p| p.to_string())
        );
    }
    std::fs::write(path, out).unwrap();
}

/// Writes the first five columns of the set's messages for Causeway.
fn write_trace(src: &Path, dst: &Path) {
    let (header, rows) = read_csv(src);
    let want = ["send_ns", "recv_ns", "src", "dst", "kind"];
    let cols = columns(&header, want, src);
    let mut out = std::io::BufWriter::new(std::fs::File::create(dst).unwrap());
    writeln!(out, "{}", want.join(",")).unwrap();
    for r in &rows {
        let fields: Vec<&str> = cols.iter().map(|&c| r[c].as_str()).collect();
        assert!(
            fields.iter().all(|f| !f.contains([',', '"', '\n'])),
            "{}: a field that needs quoting",
            src.display()
        );
        writeln!(out, "{}", fields.join(",")).unwrap();
    }
    out.flush().unwrap();
}

/// `python3 score.py ARGS`: its JSON figures.
fn python_score(python: &Path, script: &Path, args: &[&std::ffi::OsStr]) -> Scores {
    let out = Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "score.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = |name: &str| {
        v[name]
            .as_f64()
            .unwrap_or_else(|| panic!("score.py printed no {name}: {v}"))
    };
    Scores {
        messages: f("messages") as usize,
        traces: f("traces") as usize,
        parent_acc: f("parent_acc"),
        request_parent_acc: f("request_parent_acc"),
        trace_exact_acc: f("trace_exact_acc"),
        parent_acc_lenient: f("parent_acc_lenient"),
        trace_exact_acc_lenient: f("trace_exact_acc_lenient"),
        trace_membership_acc: f("trace_membership_acc"),
    }
}

/// The figures where `ours` and score.py's differ, as `name ours/python`.
fn differences(ours: &Scores, python: &Scores) -> Vec<String> {
    Scores::NAMES
        .iter()
        .zip(ours.values().iter().zip(python.values()))
        .filter(|(_, (a, b))| *a != b)
        .map(|(name, (a, b))| format!("{name} {a}/{b}"))
        .collect()
}

/// `peer_figures.csv`: (app, dataset, method) → (e2e accuracy %, note).
fn read_peers(path: &Path) -> HashMap<(String, String, String), (f64, String)> {
    if !path.is_file() {
        eprintln!("{} not found: no peer figures", path.display());
        return HashMap::new();
    }
    let (header, rows) = read_csv(path);
    let [app, dataset, method, e2e, note] = columns(
        &header,
        ["app", "dataset", "method", "e2e_accuracy_pct", "note"],
        path,
    );
    rows.iter()
        .filter_map(|r| {
            let pct = r.get(e2e)?.parse().ok()?;
            Some((
                (r[app].clone(), r[dataset].clone(), r[method].clone()),
                (pct, r.get(note).cloned().unwrap_or_default()),
            ))
        })
        .collect()
}

/// The (app, dataset) under which `peer_figures.csv` lists a set: nodeio_X is the artifact's
/// nodejs_file_io node_X.
fn peer_key(set: &str) -> Option<(&'static str, String)> {
    if let Some(rest) = set.strip_prefix("nodeio_") {
        Some(("nodejs_file_io", format!("node_{rest}")))
    } else if set.starts_with("hotel_") {
        Some(("hotel_reservation", set.to_owned()))
    } else if set.starts_with("media_") {
        Some(("media_microservices", set.to_owned()))
    } else if set.starts_with("node_") {
        Some(("nodejs_microservices", set.to_owned()))
    } else {
        None
    }
}

/// Sets in a readable order: by system, then by the number at the end of the name.
fn set_order(name: &str) -> (String, f64) {
    let cut = name
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |i| i + 1);
    (
        name[..cut].to_owned(),
        name[cut..].parse().unwrap_or(f64::NAN),
    )
}

fn fmt_pct(x: Option<f64>) -> String {
    x.map_or("-".to_owned(), |x| format!("{x:.1}"))
}

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "--measure") {
        measure_wait(&args[2..]);
        return;
    }
    let extra = analyze_args(&mut args);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let data_dir: PathBuf = flag(&args, "--data")
        .or_else(|| std::env::var_os("CAUSEWAY_TRACEWEAVER").map(PathBuf::from))
        .unwrap_or_else(|| root.join("../shared/traceweaver"));
    let data_dir = data_dir.canonicalize().unwrap_or(data_dir);
    let picked: Option<String> = flag(&args, "--sets");
    let json_out: Option<PathBuf> = flag(&args, "--json");
    let check_python = args.iter().any(|a| a == "--check-python");
    let causeway: PathBuf =
        flag(&args, "--causeway").unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_causeway")));
    let work = root.join("target/bench-data/traceweaver");

    let mut sets: Vec<String> = std::fs::read_dir(data_dir.join("data"))
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (give the TraceWeaver data with --data DIR or CAUSEWAY_TRACEWEAVER)",
                data_dir.join("data").display()
            )
        })
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("messages.csv.gz").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    sets.sort_by(|a, b| {
        let (x, y) = (set_order(a), set_order(b));
        x.0.cmp(&y.0).then(x.1.total_cmp(&y.1)).then(a.cmp(b))
    });
    if let Some(p) = &picked {
        let wanted: Vec<&str> = p.split(',').filter(|s| !s.is_empty()).collect();
        for w in &wanted {
            assert!(
                sets.iter().any(|s| s == w),
                "--sets: no set {w:?} under {} (have: {})",
                data_dir.join("data").display(),
                sets.join(", ")
            );
        }
        sets.retain(|s| wanted.contains(&s.as_str()));
    }
    let peers = read_peers(&data_dir.join("peer_figures.csv"));
    let python = if check_python {
        let script = data_dir.join("score.py");
        match which("python3") {
            Some(py) if script.is_file() => Some((py, script)),
            Some(_) => {
                eprintln!("{} not found: no cross-check", script.display());
                None
            }
            None => {
                eprintln!("python3 not found: no cross-check");
                None
            }
        }
    } else {
        None
    };

    let analyze_line = format!(
        "analyze --workers 2 --emit instances --format jsonl{}{}",
        if extra.is_empty() { "" } else { " " },
        extra.join(" ")
    );
    println!("causeway {analyze_line}");
    println!("data: {}", data_dir.display());
    let peer_heads: Vec<&str> = PEERS.iter().map(|&(_, h)| h).collect();
    println!(
        "| set | messages | traces | parent % Causeway | parent % latest-in | membership % Causeway | membership % latest-in | {} | meets the bar | wall s | peak RSS MiB |",
        peer_heads.join(" | ")
    );
    println!(
        "|---|---|---|---|---|---|---|{}---|---|---|",
        "---|".repeat(PEERS.len())
    );

    let mut rows_json = Vec::new();
    let mut notes: Vec<(String, String)> = Vec::new();
    let mut checks: Vec<(String, Vec<String>)> = Vec::new();
    let mut met = 0;
    for name in &sets {
        let src_dir = data_dir.join("data").join(name);
        let set = read_set(&src_dir);
        let dir = work.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("messages.csv");
        write_trace(&src_dir.join("messages.csv.gz"), &trace);
        let out = dir.join("instances.jsonl");
        let _ = std::fs::remove_file(&out);
        let mut cmd: Vec<String> = vec![
            causeway.display().to_string(),
            "analyze".into(),
            "--workers".into(),
            "2".into(),
            "--emit".into(),
            "instances".into(),
            "--format".into(),
            "jsonl".into(),
        ];
        cmd.extend(extra.iter().cloned());
        cmd.extend([
            "-o".into(),
            out.display().to_string(),
            trace.display().to_string(),
        ]);
        let (wall, rss_kib) = measure(&cmd);
        let (pred, instances) = parents_of_instances(&out, set.msgs.len());
        write_pred(&dir.join("pred.csv"), &pred);
        let ours = score(&set, &pred);
        let base_pred = latest_in(&set);
        let base = score(&set, &base_pred);

        if let Some((py, script)) = &python {
            let messages = src_dir.join("messages.csv.gz");
            let base_file = dir.join("latest_in_pred.csv");
            let pred_file = dir.join("pred.csv");
            write_pred(&base_file, &base_pred);
            let mut problems = Vec::new();
            for (what, ours, args) in [
                (
                    "--baseline latest-in",
                    &base,
                    vec![
                        messages.as_os_str(),
                        "--baseline".as_ref(),
                        "latest-in".as_ref(),
                    ],
                ),
                (
                    "latest_in_pred.csv",
                    &base,
                    vec![messages.as_os_str(), base_file.as_os_str()],
                ),
                (
                    "pred.csv",
                    &ours,
                    vec![messages.as_os_str(), pred_file.as_os_str()],
                ),
            ] {
                let theirs = python_score(py, script, &args);
                let diff = differences(ours, &theirs);
                if !diff.is_empty() {
                    problems.push(format!("{what}: {}", diff.join(", ")));
                }
            }
            checks.push((name.clone(), problems));
        }

        // The parent figure: lenient where the set lists alternatives (media).
        let lenient = set.alternatives > 0;
        let parent = |s: &Scores| {
            if lenient {
                s.parent_acc_lenient
            } else {
                s.parent_acc
            }
        };
        let key = peer_key(name);
        // The peers' figures, and their notes with the methods each applies to.
        let mut set_notes: Vec<(&str, Vec<&str>)> = Vec::new();
        let mut peer = |method: &'static str| -> Option<f64> {
            let (app, dataset) = key.as_ref()?;
            let (pct, note) =
                peers.get(&((*app).to_owned(), dataset.clone(), method.to_owned()))?;
            if !note.is_empty() {
                match set_notes.iter_mut().find(|(n, _)| n == note) {
                    Some((_, methods)) => methods.push(method),
                    None => set_notes.push((note, vec![method])),
                }
            }
            Some(*pct)
        };
        let peer_figs: Vec<Option<f64>> = PEERS.iter().map(|&(m, _)| peer(m)).collect();
        for (note, methods) in set_notes {
            notes.push((name.clone(), format!("{}: {note}", methods.join(", "))));
        }

        // The bar.
        let membership = ours.trace_membership_acc;
        let mut short = Vec::new();
        if membership < base.trace_membership_acc {
            short.push("latest-in".to_owned());
        }
        for &m in BAR_PEERS {
            let i = PEERS.iter().position(|&(p, _)| p == m).unwrap();
            if let Some(fig) = peer_figs[i] {
                let need = if fig >= 100.0 {
                    fig - BAR_SLACK_AT_100
                } else {
                    fig
                };
                if membership < need {
                    short.push(m.to_owned());
                }
            }
        }
        let parent_ok = parent(&ours) >= parent(&base);
        let meets = short.is_empty() && parent_ok;
        met += usize::from(meets);
        let verdict = if meets {
            "yes".to_owned()
        } else {
            let mut why = Vec::new();
            if !short.is_empty() {
                why.push(format!("membership < {}", short.join(", ")));
            }
            if !parent_ok {
                why.push("parent < latest-in".to_owned());
            }
            format!("no ({})", why.join("; "))
        };
        let peer_cells: Vec<String> = peer_figs.iter().map(|&f| fmt_pct(f)).collect();
        println!(
            "| {name}{} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {verdict} | {wall:.2} | {:.1} |",
            if lenient { " (lenient)" } else { "" },
            set.msgs.len(),
            set.traces,
            parent(&ours),
            parent(&base),
            ours.trace_membership_acc,
            base.trace_membership_acc,
            peer_cells.join(" | "),
            rss_kib as f64 / 1024.0,
        );
        rows_json.push(json!({
            "set": name,
            "messages": set.msgs.len(),
            "traces": set.traces,
            "parent_metric": if lenient { "parent_acc_lenient" } else { "parent_acc" },
            "instances": instances,
            "causeway": ours.to_json(),
            "latest_in": base.to_json(),
            "peers_e2e_accuracy_pct": PEERS
                .iter()
                .zip(&peer_figs)
                .map(|(&(m, _), f)| (m.to_owned(), json!(f)))
                .collect::<serde_json::Map<_, _>>(),
            "meets_bar": meets,
            "membership_short_of": short,
            "parent_at_least_latest_in": parent_ok,
            "wall_s": wall,
            "peak_rss_kib": rss_kib,
        }));
    }
    println!(
        "Meets the bar: {met} of {} sets (membership ≥ latest-in and ≥ WAP5, vPath, FCFS, within {BAR_SLACK_AT_100} points of a 100; parent ≥ latest-in).",
        sets.len()
    );
    println!(
        "parent %: parent_acc, and parent_acc_lenient on the sets marked (lenient); membership %: trace_membership_acc. Peers: e2e_accuracy_pct from peer_figures.csv."
    );
    for (set, note) in &notes {
        println!("{set}: {note}");
    }

    let mut mismatched = false;
    if check_python {
        if python.is_none() {
            println!("score.py cross-check: skipped (python3 or score.py not found)");
        }
        for (set, problems) in &checks {
            if problems.is_empty() {
                println!(
                    "score.py cross-check {set}: agrees (--baseline latest-in, Rust latest-in predictions, Causeway predictions)"
                );
            } else {
                mismatched = true;
                println!(
                    "score.py cross-check {set}: DIFFERS: {}",
                    problems.join("; ")
                );
            }
        }
    }

    if let Some(path) = json_out {
        let commit = Command::new("git")
            .args(["describe", "--always", "--dirty"])
            .current_dir(&root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        let bar_against: Vec<&str> = std::iter::once("latest-in")
            .chain(BAR_PEERS.iter().copied())
            .collect();
        let cross_check: Option<Vec<Value>> = python.is_some().then(|| {
            checks
                .iter()
                .map(|(s, p)| json!({"set": s, "differences": p}))
                .collect()
        });
        let doc = json!({
            "bench": "traceweaver",
            "commit": commit,
            "analyze": analyze_line,
            "data": data_dir.display().to_string(),
            "bar": {
                "membership_at_least": bar_against,
                "slack_below_a_peer_at_100": BAR_SLACK_AT_100,
                "parent_at_least": "latest-in",
            },
            "sets_meeting_bar": met,
            "sets": rows_json,
            "notes": notes.iter().map(|(s, n)| json!({"set": s, "note": n})).collect::<Vec<_>>(),
            "python_cross_check": cross_check,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap() + "\n")
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        println!("wrote {}", path.display());
    }
    if mismatched {
        std::process::exit(1);
    }
}
