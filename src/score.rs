//! `causeway score`: Project 5's accuracy metrics (§7.5.1) for inferred path patterns.
//!
//! Reads the ground truth that `causeway generate` wrote (`truth.jsonl`: one `instance` line
//! per true path instance, one `pattern` line per true pattern) and the JSON lines of
//! `causeway analyze --format jsonl` (`pattern` lines, and `instance` lines when instances
//! were emitted), and measures:
//!
//! - **Top-N false negatives** (Project 5 Fig. 17): the true patterns ranked by count, ours by
//!   the chosen rank score; FN(N) is how many of the true top N are missing from our top N.
//!   With a tolerance t (2% and 6%) a missing pattern is forgiven when it was within t of
//!   making our top N (its score ≥ (1 − t) × the score of our N-th pattern) or when it is in a
//!   near-tie in the truth (its count ≤ (1 + t) × the true (N+1)-th count): such misses say
//!   nothing about the algorithm. A rate FN/N ≤ 1/N means at most one near-tie per N.
//! - **False positives**: our patterns that are no true pattern (the ids are hashes of the same
//!   canonical text on both sides, so they compare directly).
//! - **Instance-level recall**: a true instance is found when some inferred instance has
//!   exactly its messages with the same parents. Messages are identified by their data row
//!   when both sides give one, else by their endpoints and send time (receive time when ours
//!   has no send time) within ±1 ms.
//! - **Message-level recall**: a true message is ascribed correctly when the most probable
//!   inferred instance that contains it gives it its true parent.
//! - **Delay errors**: for the true patterns found, the per-node mean delays (`delay_ms`),
//!   per-hop network latencies (`network_ms`) and end-to-end means against the truth.
//!
//! Parsing ([`parse_truth`], [`parse_patterns`]) is separate from scoring ([`score`], a pure
//! function), so that both can be tested on in-memory text.
//!
//! `--baseline latest-in` scores a trivial linker instead, run on the truth's own messages
//! ([`parse_truth_messages`], [`latest_in`]): a message's parent is the latest message its
//! sender received at or before sending it (in the sender's clock, as the trace gives it; at
//! equal times the row listed earlier), and messages from clients are roots. With a `kind`
//! column a client is a node that never receives a call (`causeway generate`'s truth says
//! which messages are calls: by their port, or by `kind` when the trace names nodes); without
//! one, a node no other node ever speaks to first (at each node, in its own clock, a peer's
//! first message arriving before the node's first message to it). Its message-level recall
//! is the figure `score` gives analyze's output, to set them side by side.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};

use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use causeway_operators::PatternNode;
use causeway_operators::json::from_slice_nested;

use crate::cli::{BaselineArg, RankArg, ScoreArgs, ScoreFormatArg};

/// How far apart two timestamps of the same message may be (ns): ±1 ms.
const TIME_TOLERANCE_NS: u64 = 1_000_000;

/// Tolerances of the forgiving false-negative counts (Project 5 Fig. 17).
const TOLERANCES: [f64; 2] = [0.02, 0.06];

/// A missing value in the packed message fields.
const NONE64: u64 = u64::MAX;
/// A missing index in the packed message fields.
const NONE32: u32 = u32::MAX;

/// `causeway score` from the command line.
pub fn run(args: &ScoreArgs) -> Result<()> {
    let truth_name = args.truth.display().to_string();
    let file = File::open(&args.truth).with_context(|| truth_name.clone())?;
    if let Some(baseline) = args.baseline {
        return run_baseline(baseline, file, &truth_name, args.format);
    }
    let Some(patterns) = &args.patterns else {
        bail!("give the analyze output to score (PATTERNS), or --baseline");
    };
    let truth = parse_truth(BufReader::with_capacity(1 << 20, file), &truth_name)?;
    let (ours, ours_name) = if patterns == "-" {
        let name = "stdin".to_owned();
        (parse_patterns(std::io::stdin().lock(), &name)?, name)
    } else {
        let name = patterns.clone();
        let file = File::open(&name).with_context(|| name.clone())?;
        (
            parse_patterns(BufReader::with_capacity(1 << 20, file), &name)?,
            name,
        )
    };
    for (parsed, name) in [(&truth, &truth_name), (&ours, &ours_name)] {
        if let Some(line) = parsed.first_malformed {
            tracing::warn!(
                "skipped {} malformed lines in {name}, first at line {line}",
                parsed.malformed
            );
        }
    }
    let report = score(&truth, &ours, args.rank, args.top);
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        ScoreFormatArg::Table => write_table(&mut out, &report, &truth_name, &ours_name),
        ScoreFormatArg::Json => serde_json::to_writer_pretty(&mut out, &report)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out)),
    }
    .and_then(|()| out.flush());
    finish_output(written)
}

/// A reader that has seen enough (`| head`) is no failure.
fn finish_output(written: std::io::Result<()>) -> Result<()> {
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other.context("stdout")?),
    }
}

/// `causeway score --baseline`: the baseline's message-level recall on the truth.
fn run_baseline(
    baseline: BaselineArg,
    file: File,
    truth_name: &str,
    format: ScoreFormatArg,
) -> Result<()> {
    let truth = parse_truth_messages(BufReader::with_capacity(1 << 20, file), truth_name)?;
    if let Some(line) = truth.first_malformed {
        tracing::warn!(
            "skipped {} malformed lines in {truth_name}, first at line {line}",
            truth.malformed
        );
    }
    let report = match baseline {
        BaselineArg::LatestIn => baseline_report("latest-in", &truth, &latest_in(&truth)),
    };
    let mut out = std::io::stdout().lock();
    let written = match format {
        ScoreFormatArg::Table => write_baseline(&mut out, &report, truth_name),
        ScoreFormatArg::Json => serde_json::to_writer_pretty(&mut out, &report)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out)),
    }
    .and_then(|()| out.flush());
    finish_output(written)
}

// ---------------------------------------------------------------------------------------------
// Parsed input

/// One node of a pattern tree, with the means that are scored.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PatternTree {
    /// Sending node.
    pub src: String,
    /// Receiving node.
    pub dst: String,
    /// Receiver's port; `None` when ephemeral.
    pub dst_port: Option<u16>,
    /// Mean time the sender held the parent message before sending this one (ms); not on the
    /// root.
    pub delay_ms: Option<f64>,
    /// Mean one-way network latency (ms); absent where only one side was observed.
    pub network_ms: Option<f64>,
    /// The messages sent because of this one, in send order.
    pub children: Vec<PatternTree>,
}

impl PatternTree {
    /// The tree's shape, to compute its canonical text.
    fn shape(&self) -> PatternNode {
        PatternNode {
            src: self.src.clone(),
            dst: self.dst.clone(),
            dst_port: self.dst_port,
            children: self.children.iter().map(PatternTree::shape).collect(),
        }
    }
}

/// A path pattern as a `pattern` line gives it (the latest line for its id).
#[derive(Clone, Debug, PartialEq)]
pub struct Pattern {
    /// 16 hex digits of the hash of the canonical text.
    pub id: String,
    /// Number of instances.
    pub count: u64,
    /// Expected number of true instances (the count in the truth).
    pub expected: f64,
    /// Canonical text of the tree.
    pub canonical: String,
    /// Mean end-to-end time (ms).
    pub end_to_end_ms: Option<f64>,
    /// The tree with its per-node means.
    pub root: PatternTree,
}

/// One message of an instance, packed (`NONE64`/`NONE32` for absent values): truth files
/// hold tens of millions of them.
#[derive(Clone, Copy, Debug)]
struct Msg {
    send_ns: u64,
    recv_ns: u64,
    row: u64,
    src_ep: u32,
    dst_ep: u32,
    /// Index of the parent within the instance.
    parent: u32,
    /// Index of the instance.
    instance: u32,
}

impl Msg {
    fn get(v: u64) -> Option<u64> {
        (v != NONE64).then_some(v)
    }

    fn parent(&self) -> Option<u32> {
        (self.parent != NONE32).then_some(self.parent)
    }

    fn endpoints(&self) -> Option<(u32, u32)> {
        (self.src_ep != NONE32 && self.dst_ep != NONE32).then_some((self.src_ep, self.dst_ep))
    }
}

/// Path instances: messages in preorder, packed into one list.
#[derive(Debug, Default)]
pub struct Instances {
    /// Endpoint text to its number.
    endpoints: HashMap<String, u32>,
    messages: Vec<Msg>,
    /// Index of each instance's first message; one more entry at the end.
    starts: Vec<u32>,
    probability: Vec<f64>,
}

impl Instances {
    /// Number of instances.
    pub fn len(&self) -> usize {
        self.probability.len()
    }

    /// Whether there are no instances.
    pub fn is_empty(&self) -> bool {
        self.probability.is_empty()
    }

    /// Number of messages in all instances.
    pub fn message_count(&self) -> usize {
        self.messages.len()
    }

    fn range(&self, instance: usize) -> std::ops::Range<usize> {
        self.starts[instance] as usize..self.starts[instance + 1] as usize
    }

    fn endpoint(&mut self, text: Option<String>) -> Result<u32, String> {
        let Some(text) = text else { return Ok(NONE32) };
        if let Some(&n) = self.endpoints.get(&text) {
            return Ok(n);
        }
        let n = u32::try_from(self.endpoints.len())
            .ok()
            .filter(|&n| n != NONE32)
            .ok_or("too many endpoints")?;
        self.endpoints.insert(text, n);
        Ok(n)
    }

    /// Appends an instance; an error (malformed line) leaves `self` as it was.
    fn push(&mut self, probability: f64, messages: Vec<MsgIn>) -> Result<(), String> {
        if !probability.is_finite() || !(0.0..=1.0).contains(&probability) {
            return Err(format!("probability {probability}"));
        }
        if messages.is_empty() {
            return Err("no messages".into());
        }
        let count = messages.len();
        for (i, m) in messages.iter().enumerate() {
            if let Some(p) = m.parent.filter(|&p| p >= count || p == i) {
                return Err(format!("message {i}: parent {p} out of range"));
            }
        }
        if self.starts.is_empty() {
            self.starts.push(0);
        }
        let instance = u32::try_from(self.probability.len())
            .ok()
            .filter(|&n| n != NONE32)
            .ok_or("too many instances")?;
        if self.messages.len() + count >= NONE32 as usize {
            return Err("too many messages".into());
        }
        let mark = self.messages.len();
        for m in messages {
            let src_ep = self.endpoint(m.src_endpoint);
            let dst_ep = self.endpoint(m.dst_endpoint);
            let (src_ep, dst_ep) = match (src_ep, dst_ep) {
                (Ok(s), Ok(d)) => (s, d),
                (Err(e), _) | (_, Err(e)) => {
                    self.messages.truncate(mark);
                    return Err(e);
                }
            };
            self.messages.push(Msg {
                send_ns: m.send_ns.unwrap_or(NONE64),
                recv_ns: m.recv_ns.unwrap_or(NONE64),
                row: m.row.unwrap_or(NONE64),
                src_ep,
                dst_ep,
                // Checked above: `p < count < NONE32`.
                parent: m.parent.map_or(NONE32, |p| p as u32),
                instance,
            });
        }
        self.starts.push(self.messages.len() as u32);
        self.probability.push(probability);
        Ok(())
    }
}

/// A parsed truth or patterns file.
#[derive(Debug, Default)]
pub struct Parsed {
    /// The patterns in force (count > 0), by id.
    pub patterns: Vec<Pattern>,
    /// The path instances.
    pub instances: Instances,
    /// Number of `pattern` lines read.
    pub pattern_lines: usize,
    /// Number of `instance` lines read.
    pub instance_lines: usize,
    /// Lines that were not JSON or not a valid `pattern` or `instance` line.
    pub malformed: usize,
    /// 1-based number of the first malformed line.
    pub first_malformed: Option<usize>,
}

// The line shapes. Fields of other kinds are ignored; a line of another kind that does not fit
// these types is looked at again as plain JSON.

#[derive(Deserialize)]
struct LineIn {
    kind: Option<String>,
    id: Option<String>,
    count: Option<u64>,
    expected: Option<f64>,
    canonical: Option<String>,
    cumulative: Option<bool>,
    end_to_end_ms: Option<DistIn>,
    root: Option<NodeIn>,
    probability: Option<f64>,
    messages: Option<Vec<MsgIn>>,
}

#[derive(Deserialize)]
struct DistIn {
    mean: Option<f64>,
}

#[derive(Deserialize)]
struct NodeIn {
    #[serde(default)]
    src: String,
    #[serde(default)]
    dst: String,
    dst_port: Option<u16>,
    network_ms: Option<DistIn>,
    delay_ms: Option<DistIn>,
    #[serde(default)]
    children: Vec<NodeIn>,
}

impl From<NodeIn> for PatternTree {
    fn from(n: NodeIn) -> Self {
        PatternTree {
            src: n.src,
            dst: n.dst,
            dst_port: n.dst_port,
            delay_ms: n.delay_ms.and_then(|d| d.mean),
            network_ms: n.network_ms.and_then(|d| d.mean),
            children: n.children.into_iter().map(PatternTree::from).collect(),
        }
    }
}

#[derive(Deserialize)]
struct MsgIn {
    src_endpoint: Option<String>,
    dst_endpoint: Option<String>,
    send_ns: Option<u64>,
    recv_ns: Option<u64>,
    parent: Option<usize>,
    row: Option<u64>,
}

/// Reads `truth.jsonl` as `causeway generate` writes it. `name` names the input in messages.
pub fn parse_truth(reader: impl BufRead, name: &str) -> Result<Parsed> {
    let parsed = parse(reader, name)?;
    if parsed.pattern_lines == 0 {
        bail!(
            "{name}: no `pattern` lines (expected the truth.jsonl that `causeway generate` writes)"
        );
    }
    Ok(parsed)
}

/// Reads the JSON lines of `causeway analyze --format jsonl`. `name` names the input in
/// messages.
pub fn parse_patterns(reader: impl BufRead, name: &str) -> Result<Parsed> {
    let parsed = parse(reader, name)?;
    if parsed.pattern_lines == 0 {
        bail!(
            "{name}: no `pattern` lines (expected the output of `causeway analyze --format jsonl` \
             with path patterns)"
        );
    }
    Ok(parsed)
}

/// Reads `pattern` and `instance` lines; other kinds are skipped, malformed lines counted.
/// Of the pattern lines, the cumulative ones are used if there are any, else all; the latest
/// line for an id supersedes the earlier ones and `count: 0` retracts.
fn parse(mut reader: impl BufRead, name: &str) -> Result<Parsed> {
    let mut parsed = Parsed::default();
    let mut cumulative: HashMap<String, Pattern> = HashMap::new();
    let mut other: HashMap<String, Pattern> = HashMap::new();
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("{name}: line {}", line_no + 1))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = buf.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let ok = match from_slice_nested::<LineIn>(text) {
            Ok(line) => match line.kind.as_deref() {
                Some("pattern") => {
                    parsed.pattern_lines += 1;
                    match pattern_of(line) {
                        Some((p, true)) => {
                            cumulative.insert(p.id.clone(), p);
                            true
                        }
                        Some((p, false)) => {
                            other.insert(p.id.clone(), p);
                            true
                        }
                        None => false,
                    }
                }
                Some("instance") => {
                    parsed.instance_lines += 1;
                    match (line.probability, line.messages) {
                        (Some(p), Some(m)) => parsed.instances.push(p, m).is_ok(),
                        _ => false,
                    }
                }
                Some(_) => true,
                None => false,
            },
            // Another kind may have fields of these names with other types.
            Err(_) => match from_slice_nested::<Value>(text) {
                Ok(v) => match v.get("kind").and_then(Value::as_str) {
                    Some("pattern") => {
                        parsed.pattern_lines += 1;
                        false
                    }
                    Some("instance") => {
                        parsed.instance_lines += 1;
                        false
                    }
                    Some(_) => true,
                    None => false,
                },
                Err(_) => false,
            },
        };
        if !ok {
            parsed.malformed += 1;
            parsed.first_malformed.get_or_insert(line_no);
        }
    }
    let chosen = if cumulative.is_empty() {
        other
    } else {
        cumulative
    };
    parsed.patterns = chosen.into_values().filter(|p| p.count > 0).collect();
    parsed.patterns.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(parsed)
}

/// The pattern of a `pattern` line and whether it is cumulative; `None` when malformed.
fn pattern_of(line: LineIn) -> Option<(Pattern, bool)> {
    let id = line.id?;
    let count = line.count?;
    let root = PatternTree::from(line.root?);
    let expected = line.expected.unwrap_or(count as f64);
    if !expected.is_finite() {
        return None;
    }
    let canonical = line.canonical.unwrap_or_else(|| root.shape().canonical());
    let pattern = Pattern {
        id,
        count,
        expected,
        canonical,
        end_to_end_ms: line.end_to_end_ms.and_then(|d| d.mean),
        root,
    };
    Some((pattern, line.cumulative.unwrap_or(false)))
}

// ---------------------------------------------------------------------------------------------
// The report

/// Everything `causeway score` reports; `--format json` writes it as it is.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Number of true patterns.
    pub truth_patterns: usize,
    /// Number of inferred patterns (count > 0).
    pub inferred_patterns: usize,
    /// Number of true instances.
    pub truth_instances: usize,
    /// Number of messages in the true instances.
    pub truth_messages: usize,
    /// Number of inferred instances.
    pub inferred_instances: usize,
    /// How our patterns were ranked.
    pub rank: String,
    /// False negatives among the top N, for N = 1 ..= top.
    pub top_n: Vec<TopN>,
    /// Whether FN 2%(N) ≤ 1 (a rate ≤ 1/N) for every N.
    pub fn_2pct_max_ok: bool,
    /// The largest figures over N.
    pub worst: Worst,
    /// Inferred patterns that are no true pattern.
    pub false_positives: FalsePositives,
    /// Instance-level recall; `None` without inferred instance lines.
    pub instances: Option<InstanceRecall>,
    /// Message-level recall; `None` without inferred instance lines.
    pub messages: Option<MessageRecall>,
    /// Errors of the per-node mean delays on the true patterns found.
    pub delay: DelayReport,
    /// Errors of the per-hop mean network latencies.
    pub network: NetworkReport,
    /// Errors of the mean end-to-end times.
    pub end_to_end: EndToEndReport,
}

/// False negatives among the top N.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopN {
    /// N.
    pub n: usize,
    /// True top-N patterns missing from our top N.
    #[serde(rename = "fn")]
    pub fn_exact: usize,
    /// The same, forgiving misses within 2%.
    pub fn_2pct: usize,
    /// The same, forgiving misses within 6%.
    pub fn_6pct: usize,
    /// FN / N.
    pub rate: f64,
}

/// The largest top-N figures over N.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Worst {
    /// Largest FN(N).
    #[serde(rename = "fn")]
    pub fn_exact: usize,
    /// Largest FN 2%(N).
    pub fn_2pct: usize,
    /// Largest FN 6%(N).
    pub fn_6pct: usize,
    /// Largest FN(N) / N.
    pub rate: f64,
    /// The N of the largest rate (the first).
    pub rate_n: Option<usize>,
}

/// Inferred patterns that are no true pattern.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FalsePositives {
    /// How many.
    pub patterns: usize,
    /// Their total expected count.
    pub expected: f64,
    /// How many of them are in our top K, K the number of true patterns.
    pub in_top_k: usize,
    /// The highest ranked of them (at most 10).
    pub highest: Vec<RankedPattern>,
}

/// An inferred pattern and its rank.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankedPattern {
    /// Pattern id.
    pub id: String,
    /// Canonical text.
    pub canonical: String,
    /// 1-based rank among ours.
    pub rank: usize,
    /// Inferred count.
    pub count: u64,
    /// Inferred expected count.
    pub expected: f64,
}

/// Instance-level recall.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InstanceRecall {
    /// Number of true instances.
    pub truth: usize,
    /// True instances that some inferred instance reproduces exactly (any probability).
    pub found: usize,
    /// found / truth.
    pub recall: f64,
    /// Sum over true instances of the highest probability of an inferred instance that
    /// reproduces it, divided by the number of true instances.
    pub weighted_recall: f64,
    /// Inferred instances that reproduce no true instance.
    pub unmatched_inferred: usize,
}

/// Message-level recall.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MessageRecall {
    /// Number of true messages.
    pub truth: usize,
    /// True messages whose most probable inferred instance gives them their true parent.
    pub correct: usize,
    /// True messages in no inferred instance.
    pub missing: usize,
    /// correct / truth.
    pub recall: f64,
}

/// Errors of per-node mean delays.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DelayReport {
    /// Largest relative error of a node's mean delay.
    pub max_rel_error: Option<f64>,
    /// Mean relative error over all nodes, each weighted by its pattern's true count.
    pub mean_rel_error: Option<f64>,
    /// True patterns found and compared.
    pub patterns_compared: usize,
    /// Every true pattern, by true count.
    pub per_pattern: Vec<PatternErrors>,
}

/// The errors on one true pattern.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PatternErrors {
    /// Pattern id.
    pub id: String,
    /// Canonical text.
    pub canonical: String,
    /// True count.
    pub truth_count: u64,
    /// Our count (0: not found).
    pub count: u64,
    /// Our expected count.
    pub expected: f64,
    /// Our 1-based rank.
    pub rank: Option<usize>,
    /// Largest relative error of a node's mean delay.
    pub max_rel_error: Option<f64>,
    /// Largest absolute error of a node's mean delay (ms).
    pub max_abs_error_ms: Option<f64>,
    /// Largest absolute error of a hop's mean network latency (ms).
    pub network_max_abs_error_ms: Option<f64>,
    /// Relative error of the mean end-to-end time.
    pub end_to_end_rel_error: Option<f64>,
    /// Whether the two trees differ in shape although their ids are equal.
    pub shape_mismatch: bool,
}

/// Errors of per-hop mean network latencies.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetworkReport {
    /// Largest absolute error (ms).
    pub max_abs_error_ms: Option<f64>,
    /// Mean absolute error over all hops, weighted by true count (ms).
    pub mean_abs_error_ms: Option<f64>,
}

/// Errors of mean end-to-end times.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EndToEndReport {
    /// Largest relative error.
    pub max_rel_error: Option<f64>,
    /// Mean relative error, weighted by true count.
    pub mean_rel_error: Option<f64>,
}

// ---------------------------------------------------------------------------------------------
// Scoring

/// Scores `ours` against `truth`: ours ranked by `rank`, false negatives for N up to `top`
/// (default: the number of true patterns).
pub fn score(truth: &Parsed, ours: &Parsed, rank: RankArg, top: Option<usize>) -> Report {
    // The truth by count, ours by score; ties by id.
    let mut truth_ranked: Vec<&Pattern> = truth.patterns.iter().collect();
    truth_ranked.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.id.cmp(&b.id)));
    let score_of = |p: &Pattern| rank.score(p.count, p.expected);
    let mut ours_ranked: Vec<(&Pattern, f64)> =
        ours.patterns.iter().map(|p| (p, score_of(p))).collect();
    ours_ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.id.cmp(&b.0.id)));
    let our_rank: HashMap<&str, usize> = ours_ranked
        .iter()
        .enumerate()
        .map(|(i, (p, _))| (p.id.as_str(), i))
        .collect();
    let k = truth_ranked.len();
    let top = top.unwrap_or(k);

    let top_n = false_negatives(&truth_ranked, &ours_ranked, &our_rank, top);
    let mut worst = Worst::default();
    for row in &top_n {
        worst.fn_exact = worst.fn_exact.max(row.fn_exact);
        worst.fn_2pct = worst.fn_2pct.max(row.fn_2pct);
        worst.fn_6pct = worst.fn_6pct.max(row.fn_6pct);
        if row.rate > worst.rate {
            worst.rate = row.rate;
            worst.rate_n = Some(row.n);
        }
    }

    // False positives.
    let truth_ids: HashSet<&str> = truth_ranked.iter().map(|p| p.id.as_str()).collect();
    let mut false_positives = FalsePositives {
        patterns: 0,
        expected: 0.0,
        in_top_k: 0,
        highest: Vec::new(),
    };
    for (i, (p, _)) in ours_ranked.iter().enumerate() {
        if truth_ids.contains(p.id.as_str()) {
            continue;
        }
        false_positives.patterns += 1;
        false_positives.expected += p.expected;
        if i < k {
            false_positives.in_top_k += 1;
        }
        if false_positives.highest.len() < 10 {
            false_positives.highest.push(RankedPattern {
                id: p.id.clone(),
                canonical: p.canonical.clone(),
                rank: i + 1,
                count: p.count,
                expected: p.expected,
            });
        }
    }

    let (instances, messages) = if ours.instance_lines == 0 {
        (None, None)
    } else {
        let (i, m) = recall(&truth.instances, &ours.instances);
        (Some(i), Some(m))
    };

    let (delay, network, end_to_end) = errors(&truth_ranked, &ours_ranked, &our_rank);

    Report {
        truth_patterns: k,
        inferred_patterns: ours_ranked.len(),
        truth_instances: truth.instances.len(),
        truth_messages: truth.instances.message_count(),
        inferred_instances: ours.instances.len(),
        rank: rank
            .to_possible_value()
            .map_or_else(|| format!("{rank:?}"), |v| v.get_name().to_owned()),
        fn_2pct_max_ok: top_n.iter().all(|r| r.fn_2pct <= 1),
        top_n,
        worst,
        false_positives,
        instances,
        messages,
        delay,
        network,
        end_to_end,
    }
}

/// FN(N), FN 2%(N) and FN 6%(N) for N = 1 ..= top.
fn false_negatives(
    truth: &[&Pattern],
    ours: &[(&Pattern, f64)],
    our_rank: &HashMap<&str, usize>,
    top: usize,
) -> Vec<TopN> {
    let mut rows = Vec::with_capacity(top);
    for n in 1..=top {
        // Score of our N-th pattern and the true count at N+1 (the bar a missing pattern
        // was near).
        let nth_score = ours.get(n - 1).map(|p| p.1);
        let next_count = truth.get(n).map(|p| p.count as f64);
        let mut missing = [0usize; 1 + TOLERANCES.len()];
        for t in truth.iter().take(n) {
            let rank = our_rank.get(t.id.as_str()).copied();
            if rank.is_some_and(|r| r < n) {
                continue;
            }
            missing[0] += 1;
            let our_score = rank.map(|r| ours[r].1);
            for (j, tol) in TOLERANCES.iter().enumerate() {
                let near_ours = match (our_score, nth_score) {
                    (Some(s), Some(bar)) => s >= (1.0 - tol) * bar,
                    _ => false,
                };
                let near_tie = next_count.is_some_and(|c| t.count as f64 <= (1.0 + tol) * c);
                if !(near_ours || near_tie) {
                    missing[j + 1] += 1;
                }
            }
        }
        rows.push(TopN {
            n,
            fn_exact: missing[0],
            fn_2pct: missing[1],
            fn_6pct: missing[2],
            rate: missing[0] as f64 / n as f64,
        });
    }
    rows
}

/// Where true messages are, to find an inferred message among them.
struct TruthIndex<'a> {
    messages: &'a [Msg],
    by_row: HashMap<u64, u32>,
    /// By (src, dst) endpoint pair: indices sorted by send time, and by receive time.
    by_send: HashMap<(u32, u32), Vec<u32>>,
    by_recv: HashMap<(u32, u32), Vec<u32>>,
}

impl<'a> TruthIndex<'a> {
    fn new(truth: &'a Instances, with_rows: bool) -> Self {
        let messages = truth.messages.as_slice();
        let mut by_row = HashMap::new();
        let mut by_send: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
        let mut by_recv: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
        for (i, m) in messages.iter().enumerate() {
            // `Instances::push` keeps the number of messages below NONE32.
            let i = i as u32;
            if with_rows && m.row != NONE64 {
                by_row.insert(m.row, i);
            }
            if let Some(key) = m.endpoints() {
                if m.send_ns != NONE64 {
                    by_send.entry(key).or_default().push(i);
                }
                if m.recv_ns != NONE64 {
                    by_recv.entry(key).or_default().push(i);
                }
            }
        }
        for list in by_send.values_mut() {
            list.sort_unstable_by_key(|&i| messages[i as usize].send_ns);
        }
        for list in by_recv.values_mut() {
            list.sort_unstable_by_key(|&i| messages[i as usize].recv_ns);
        }
        TruthIndex {
            messages,
            by_row,
            by_send,
            by_recv,
        }
    }

    /// The true message nearest `at` (within the tolerance) in `list`, sorted by `time`.
    fn nearest(&self, list: &[u32], time: impl Fn(&Msg) -> u64, at: u64) -> Option<u32> {
        let lo = at.saturating_sub(TIME_TOLERANCE_NS);
        let hi = at.saturating_add(TIME_TOLERANCE_NS);
        let t = |i: u32| time(&self.messages[i as usize]);
        let start = list.partition_point(|&i| t(i) < lo);
        list[start..]
            .iter()
            .take_while(|&&i| t(i) <= hi)
            .min_by_key(|&&i| t(i).abs_diff(at))
            .copied()
    }

    /// The true message that inferred message `m` is, its endpoints translated by `eps`.
    fn find(&self, m: &Msg, eps: &[u32]) -> Option<u32> {
        if let Some(&i) = Msg::get(m.row).and_then(|row| self.by_row.get(&row)) {
            return Some(i);
        }
        let (s, d) = m.endpoints()?;
        let key = (eps[s as usize], eps[d as usize]);
        if key.0 == NONE32 || key.1 == NONE32 {
            return None;
        }
        if let Some(send) = Msg::get(m.send_ns) {
            self.nearest(self.by_send.get(&key)?, |m| m.send_ns, send)
        } else if let Some(recv) = Msg::get(m.recv_ns) {
            self.nearest(self.by_recv.get(&key)?, |m| m.recv_ns, recv)
        } else {
            None
        }
    }
}

/// Instance- and message-level recall of `ours` against `truth`.
fn recall(truth: &Instances, ours: &Instances) -> (InstanceRecall, MessageRecall) {
    let with_rows = ours.messages.iter().any(|m| m.row != NONE64);
    let index = TruthIndex::new(truth, with_rows);
    // Our endpoint numbers to the truth's.
    let mut eps = vec![NONE32; ours.endpoints.len()];
    for (text, &n) in &ours.endpoints {
        if let Some(&t) = truth.endpoints.get(text) {
            eps[n as usize] = t;
        }
    }
    let mapped: Vec<Option<u32>> = ours.messages.iter().map(|m| index.find(m, &eps)).collect();

    // Per true instance: the best probability of an inferred instance that reproduces it.
    let mut found: Vec<Option<f64>> = vec![None; truth.len()];
    // Per true message: the best probability of an inferred instance that holds it, and
    // whether that instance gives it its true parent.
    let mut best: Vec<(f64, bool)> = vec![(f64::NEG_INFINITY, false); truth.messages.len()];
    let mut unmatched_inferred = 0;
    let mut seen: Vec<bool> = Vec::new();
    for j in 0..ours.len() {
        let range = ours.range(j);
        let start = range.start;
        let probability = ours.probability[j];
        // Whether inferred message `i` has the true parent of the true message it is.
        let true_parent = |i: usize, t: u32| -> bool {
            let truth_msg = &truth.messages[t as usize];
            match (ours.messages[i].parent(), truth_msg.parent()) {
                (None, None) => true,
                (Some(p), Some(tp)) => {
                    let tp = truth.starts[truth_msg.instance as usize] + tp;
                    mapped[start + p as usize] == Some(tp)
                }
                _ => false,
            }
        };
        let mut exact = true;
        let mut instance = None;
        for i in range.clone() {
            let Some(t) = mapped[i] else {
                exact = false;
                continue;
            };
            let right = true_parent(i, t);
            exact &= right;
            let ti = truth.messages[t as usize].instance;
            exact &= *instance.get_or_insert(ti) == ti;
            let slot = &mut best[t as usize];
            if probability > slot.0 {
                *slot = (probability, right);
            }
        }
        // Same instance, same parents: exact when the message sets are equal too.
        let matched = match instance {
            Some(ti) if exact && truth.range(ti as usize).len() == range.len() => {
                let truth_range = truth.range(ti as usize);
                seen.clear();
                seen.resize(truth_range.len(), false);
                range
                    .clone()
                    .all(|i| {
                        let slot = mapped[i]
                            .and_then(|t| (t as usize).checked_sub(truth_range.start))
                            .and_then(|offset| seen.get_mut(offset));
                        slot.is_some_and(|s| !std::mem::replace(s, true))
                    })
                    .then_some(ti)
            }
            _ => None,
        };
        match matched {
            Some(ti) => {
                let slot = &mut found[ti as usize];
                *slot = Some(slot.map_or(probability, |p| p.max(probability)));
            }
            None => unmatched_inferred += 1,
        }
    }
    let truth_instances = truth.len();
    let found_count = found.iter().filter(|f| f.is_some()).count();
    let weighted: f64 = found.iter().flatten().sum();
    let ratio = |a: f64, b: usize| if b == 0 { 0.0 } else { a / b as f64 };
    let instances = InstanceRecall {
        truth: truth_instances,
        found: found_count,
        recall: ratio(found_count as f64, truth_instances),
        weighted_recall: ratio(weighted, truth_instances),
        unmatched_inferred,
    };
    let truth_messages = truth.messages.len();
    let correct = best.iter().filter(|b| b.1).count();
    let missing = best.iter().filter(|b| b.0 == f64::NEG_INFINITY).count();
    let messages = MessageRecall {
        truth: truth_messages,
        correct,
        missing,
        recall: ratio(correct as f64, truth_messages),
    };
    (instances, messages)
}

/// Sums of errors over the nodes of a pattern pair.
#[derive(Default)]
struct NodeErrors {
    delay_max_rel: Option<f64>,
    delay_max_abs: Option<f64>,
    delay_rel_sum: f64,
    delay_rel_n: usize,
    network_max_abs: Option<f64>,
    network_abs_sum: f64,
    network_n: usize,
    shape_mismatch: bool,
}

fn max_opt(a: Option<f64>, b: f64) -> Option<f64> {
    Some(a.map_or(b, |a| a.max(b)))
}

impl NodeErrors {
    fn walk(&mut self, truth: &PatternTree, ours: &PatternTree, root: bool) {
        if let (false, Some(t), Some(o)) = (root, truth.delay_ms, ours.delay_ms) {
            let abs = (o - t).abs();
            self.delay_max_abs = max_opt(self.delay_max_abs, abs);
            // A zero true delay has no relative error.
            if t > 0.0 {
                let rel = abs / t;
                self.delay_max_rel = max_opt(self.delay_max_rel, rel);
                self.delay_rel_sum += rel;
                self.delay_rel_n += 1;
            }
        }
        if let (Some(t), Some(o)) = (truth.network_ms, ours.network_ms) {
            let abs = (o - t).abs();
            self.network_max_abs = max_opt(self.network_max_abs, abs);
            self.network_abs_sum += abs;
            self.network_n += 1;
        }
        if truth.children.len() != ours.children.len() {
            self.shape_mismatch = true;
        }
        for (t, o) in truth.children.iter().zip(&ours.children) {
            self.walk(t, o, false);
        }
    }
}

/// Delay, network and end-to-end errors on the true patterns found.
fn errors(
    truth: &[&Pattern],
    ours: &[(&Pattern, f64)],
    our_rank: &HashMap<&str, usize>,
) -> (DelayReport, NetworkReport, EndToEndReport) {
    let mut per_pattern = Vec::with_capacity(truth.len());
    let mut compared = 0;
    let (mut delay_max, mut delay_sum, mut delay_weight) = (None, 0.0, 0.0);
    let (mut net_max, mut net_sum, mut net_weight) = (None, 0.0, 0.0);
    let (mut e2e_max, mut e2e_sum, mut e2e_weight) = (None, 0.0, 0.0);
    for t in truth {
        let rank = our_rank.get(t.id.as_str()).copied();
        let o = rank.map(|r| ours[r].0);
        let mut row = PatternErrors {
            id: t.id.clone(),
            canonical: t.canonical.clone(),
            truth_count: t.count,
            count: o.map_or(0, |o| o.count),
            expected: o.map_or(0.0, |o| o.expected),
            rank: rank.map(|r| r + 1),
            max_rel_error: None,
            max_abs_error_ms: None,
            network_max_abs_error_ms: None,
            end_to_end_rel_error: None,
            shape_mismatch: false,
        };
        if let Some(o) = o {
            compared += 1;
            let weight = t.count as f64;
            let mut e = NodeErrors::default();
            e.walk(&t.root, &o.root, true);
            row.max_rel_error = e.delay_max_rel;
            row.max_abs_error_ms = e.delay_max_abs;
            row.network_max_abs_error_ms = e.network_max_abs;
            row.shape_mismatch = e.shape_mismatch;
            if let Some(m) = e.delay_max_rel {
                delay_max = max_opt(delay_max, m);
            }
            delay_sum += weight * e.delay_rel_sum;
            delay_weight += weight * e.delay_rel_n as f64;
            if let Some(m) = e.network_max_abs {
                net_max = max_opt(net_max, m);
            }
            net_sum += weight * e.network_abs_sum;
            net_weight += weight * e.network_n as f64;
            if let (Some(te), Some(oe)) = (t.end_to_end_ms.filter(|&te| te > 0.0), o.end_to_end_ms)
            {
                let rel = (oe - te).abs() / te;
                row.end_to_end_rel_error = Some(rel);
                e2e_max = max_opt(e2e_max, rel);
                e2e_sum += weight * rel;
                e2e_weight += weight;
            }
        }
        per_pattern.push(row);
    }
    let mean = |sum: f64, weight: f64| (weight > 0.0).then(|| sum / weight);
    (
        DelayReport {
            max_rel_error: delay_max,
            mean_rel_error: mean(delay_sum, delay_weight),
            patterns_compared: compared,
            per_pattern,
        },
        NetworkReport {
            max_abs_error_ms: net_max,
            mean_abs_error_ms: mean(net_sum, net_weight),
        },
        EndToEndReport {
            max_rel_error: e2e_max,
            mean_rel_error: mean(e2e_sum, e2e_weight),
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Table output

/// Top-N rows always shown; past them only rows that differ from the one before, and the last.
const TABLE_ROWS: usize = 20;
/// Why the instance and message figures are missing.
const NO_INSTANCES: &str =
    " (the patterns file has no instance lines: analyze with --emit patterns,instances)";
/// Patterns listed in the delay table.
const TABLE_PATTERNS: usize = 30;

// ---------------------------------------------------------------------------------------------
// Baselines

/// One true message as a baseline sees it: what the trace gives of it, and its true parent.
#[derive(Clone, Copy, Debug)]
struct BaseMsg {
    /// Send time in the sender's clock, when the trace has it.
    send_ns: Option<u64>,
    /// Receive time in the receiver's clock, when the trace has it.
    recv_ns: Option<u64>,
    /// Place in the trace (its row; the truth's order without rows).
    order: u64,
    /// Sender and receiver, numbered.
    src: u32,
    dst: u32,
    /// Whether it is a call (the truth's `kind`, or a fixed destination port).
    call: bool,
    /// The true parent's index.
    parent: Option<u32>,
}

/// The true messages of a truth file, for a baseline.
#[derive(Debug, Default)]
pub struct TruthMessages {
    messages: Vec<BaseMsg>,
    /// Number of distinct nodes.
    nodes: usize,
    /// Number of instances.
    instances: usize,
    /// Whether the trace has a `kind` column (the truth's header says when it has not).
    kind_column: bool,
    /// Lines that were not JSON or not a valid `instance` line.
    pub malformed: usize,
    /// 1-based number of the first malformed line.
    pub first_malformed: Option<usize>,
}

impl TruthMessages {
    /// Number of true messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

#[derive(Deserialize)]
struct BaseLineIn {
    kind: Option<String>,
    kind_column: Option<bool>,
    messages: Option<Vec<BaseMsgIn>>,
}

#[derive(Deserialize)]
struct BaseMsgIn {
    src: String,
    dst: String,
    dst_port: Option<u16>,
    send_ns: Option<u64>,
    recv_ns: Option<u64>,
    send_captured: Option<bool>,
    recv_captured: Option<bool>,
    parent: Option<usize>,
    row: Option<u64>,
    kind: Option<String>,
}

/// Reads the true messages of `truth.jsonl` (its `instance` lines and `truth` header) for a
/// baseline. A message's timestamps count only where the trace has them (`send_captured`,
/// `recv_captured`); when the truth gives rows, a message without one is not in the trace.
pub fn parse_truth_messages(mut reader: impl BufRead, name: &str) -> Result<TruthMessages> {
    let mut out = TruthMessages {
        kind_column: true,
        ..TruthMessages::default()
    };
    // (message, whether the line gave a row)
    let mut read: Vec<(BaseMsgIn, u32)> = Vec::new();
    let mut node_ids: HashMap<String, u32> = HashMap::new();
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("{name}: line {}", line_no + 1))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = buf.trim_ascii();
        if text.is_empty() {
            continue;
        }
        let ok = match from_slice_nested::<BaseLineIn>(text) {
            Ok(line) => match line.kind.as_deref() {
                Some("instance") => match line.messages {
                    Some(list) if !list.is_empty() && out.instances < NONE32 as usize => {
                        let count = list.len();
                        let start = read.len();
                        let valid = list
                            .iter()
                            .enumerate()
                            .all(|(i, m)| m.parent.is_none_or(|p| p < count && p != i));
                        if valid && start + count < NONE32 as usize {
                            read.extend(list.into_iter().map(|m| (m, start as u32)));
                            out.instances += 1;
                            true
                        } else {
                            false
                        }
                    }
                    _ => false,
                },
                Some("truth") => {
                    out.kind_column = line.kind_column.unwrap_or(true);
                    true
                }
                Some(_) => true,
                None => false,
            },
            // Other kinds, and the header (whose `messages` is a count), may have fields of
            // these names with other types.
            Err(_) => match from_slice_nested::<Value>(text) {
                Ok(v) => match v.get("kind").and_then(Value::as_str) {
                    Some("instance") | None => false,
                    Some("truth") => {
                        out.kind_column = v
                            .get("kind_column")
                            .and_then(Value::as_bool)
                            .unwrap_or(true);
                        true
                    }
                    Some(_) => true,
                },
                Err(_) => false,
            },
        };
        if !ok {
            out.malformed += 1;
            out.first_malformed.get_or_insert(line_no);
        }
    }
    if out.instances == 0 {
        bail!(
            "{name}: no `instance` lines (expected the truth.jsonl that `causeway generate` writes)"
        );
    }
    let with_rows = read.iter().any(|(m, _)| m.row.is_some());
    let mut node = |n: String| -> u32 {
        let next = node_ids.len() as u32;
        *node_ids.entry(n).or_insert(next)
    };
    out.messages = read
        .into_iter()
        .enumerate()
        .map(|(i, (m, start))| {
            let in_trace = !with_rows || m.row.is_some();
            let call = match m.kind.as_deref() {
                Some(k) => k == "call",
                None => m.dst_port.is_some(),
            };
            BaseMsg {
                send_ns: m
                    .send_ns
                    .filter(|_| in_trace && m.send_captured.unwrap_or(true)),
                recv_ns: m
                    .recv_ns
                    .filter(|_| in_trace && m.recv_captured.unwrap_or(true)),
                order: if with_rows {
                    m.row.unwrap_or(u64::MAX)
                } else {
                    i as u64
                },
                src: node(m.src),
                dst: node(m.dst),
                call,
                // Checked when read: the parent is within its instance, whose messages
                // number below NONE32 in all.
                parent: m.parent.map(|p| start + p as u32),
            }
        })
        .collect();
    out.nodes = node_ids.len();
    Ok(out)
}

/// Which nodes are clients: with a kind column, those that never receive a call; without,
/// those no other node speaks to first.
fn clients(truth: &TruthMessages) -> Vec<bool> {
    let mut client = vec![true; truth.nodes];
    if truth.kind_column {
        for m in truth.messages.iter().filter(|m| m.call) {
            client[m.dst as usize] = false;
        }
        return client;
    }
    // At node a, per peer b: its first message to b, and b's first message to arrive.
    let mut first_out: HashMap<(u32, u32), (u64, u64)> = HashMap::new();
    let mut first_in: HashMap<(u32, u32), (u64, u64)> = HashMap::new();
    for m in &truth.messages {
        if let Some(t) = m.send_ns {
            let e = first_out.entry((m.src, m.dst)).or_insert((t, m.order));
            *e = (*e).min((t, m.order));
        }
        if let Some(t) = m.recv_ns {
            let e = first_in.entry((m.dst, m.src)).or_insert((t, m.order));
            *e = (*e).min((t, m.order));
        }
    }
    for (&(a, b), &arrived) in &first_in {
        if first_out.get(&(a, b)).is_none_or(|&sent| arrived < sent) && a != b {
            client[a as usize] = false;
        }
    }
    client
}

/// The latest-in linker on the truth's messages: each message's predicted parent (an index
/// into the messages), `None` for a root.
pub fn latest_in(truth: &TruthMessages) -> Vec<Option<u32>> {
    let client = clients(truth);
    // Per node, the messages it received: (receive time, order, index), sorted.
    let mut received: Vec<Vec<(u64, u64, u32)>> = vec![Vec::new(); truth.nodes];
    for (i, m) in truth.messages.iter().enumerate() {
        if let Some(t) = m.recv_ns {
            received[m.dst as usize].push((t, m.order, i as u32));
        }
    }
    for list in &mut received {
        list.sort_unstable();
    }
    truth
        .messages
        .iter()
        .map(|m| {
            let from_client = client[m.src as usize] && (m.call || !truth.kind_column);
            if from_client {
                return None;
            }
            let send = m.send_ns?;
            let list = &received[m.src as usize];
            let before = list.partition_point(|&(t, order, _)| (t, order) < (send, m.order));
            before.checked_sub(1).map(|k| list[k].2)
        })
        .collect()
}

/// What `score --baseline` reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BaselineReport {
    /// The baseline's name.
    pub baseline: String,
    /// How clients were told: `kind` (never receive a call) or `first-contact`.
    pub clients_by: String,
    /// Number of true instances.
    pub truth_instances: usize,
    /// Number of true messages.
    pub truth_messages: usize,
    /// Message-level recall: messages given their true parent (`missing` is 0: the baseline
    /// places every message).
    pub messages: MessageRecall,
}

/// Scores predicted parents (`predicted[i]` for message i) against the truth.
pub fn baseline_report(
    name: &str,
    truth: &TruthMessages,
    predicted: &[Option<u32>],
) -> BaselineReport {
    let correct = truth
        .messages
        .iter()
        .zip(predicted)
        .filter(|(m, p)| m.parent == **p)
        .count();
    let n = truth.messages.len();
    BaselineReport {
        baseline: name.to_owned(),
        clients_by: if truth.kind_column {
            "kind"
        } else {
            "first-contact"
        }
        .to_owned(),
        truth_instances: truth.instances,
        truth_messages: n,
        messages: MessageRecall {
            truth: n,
            correct,
            missing: 0,
            recall: if n == 0 {
                0.0
            } else {
                correct as f64 / n as f64
            },
        },
    }
}

/// Writes a baseline's report for people.
fn write_baseline(
    out: &mut impl Write,
    r: &BaselineReport,
    truth_name: &str,
) -> std::io::Result<()> {
    writeln!(
        out,
        "Truth:    {} instances, {} messages ({truth_name})",
        r.truth_instances, r.truth_messages
    )?;
    let clients = if r.clients_by == "kind" {
        "nodes that never receive a call"
    } else {
        "nodes no other node speaks to first"
    };
    writeln!(
        out,
        "Baseline: {} (a message's parent is the latest message its sender received; \
         messages from clients, {clients}, are roots)",
        r.baseline
    )?;
    let m = &r.messages;
    writeln!(
        out,
        "Messages:  {} of {} true messages ascribed to their true parent ({})",
        m.correct,
        m.truth,
        pct(Some(m.recall))
    )
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".to_owned(), |x| format!("{:.1}%", 100.0 * x))
}

fn ms(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.3}"))
}

/// `text` cut to `width` characters, with an ellipsis when cut.
fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// Writes `report` as tables for people.
fn write_table(
    out: &mut impl Write,
    r: &Report,
    truth_name: &str,
    ours_name: &str,
) -> std::io::Result<()> {
    writeln!(
        out,
        "Truth:    {} patterns, {} instances, {} messages ({truth_name})",
        r.truth_patterns, r.truth_instances, r.truth_messages
    )?;
    writeln!(
        out,
        "Inferred: {} patterns, {} instances ({ours_name}); ranked by {}",
        r.inferred_patterns, r.inferred_instances, r.rank
    )?;
    writeln!(out)?;

    writeln!(
        out,
        "Top-N false negatives (truth ranked by count, ours by {}; 2%/6%: near-ties forgiven)",
        r.rank
    )?;
    writeln!(
        out,
        "{:>6} {:>5} {:>6} {:>6} {:>7}",
        "N", "FN", "FN 2%", "FN 6%", "rate"
    )?;
    let mut omitted = false;
    for (i, row) in r.top_n.iter().enumerate() {
        let changed = i == 0 || {
            let prev = &r.top_n[i - 1];
            (prev.fn_exact, prev.fn_2pct, prev.fn_6pct) != (row.fn_exact, row.fn_2pct, row.fn_6pct)
        };
        if row.n <= TABLE_ROWS || changed || i + 1 == r.top_n.len() {
            writeln!(
                out,
                "{:>6} {:>5} {:>6} {:>6} {:>7.3}{}",
                row.n,
                row.fn_exact,
                row.fn_2pct,
                row.fn_6pct,
                row.rate,
                if row.fn_2pct > 1 { "  FN 2% > 1" } else { "" }
            )?;
        } else {
            omitted = true;
        }
    }
    if omitted {
        writeln!(
            out,
            "  (rows past N = {TABLE_ROWS} equal to the one before are left out)"
        )?;
    }
    let w = &r.worst;
    writeln!(
        out,
        "worst: FN {}, FN 2% {}, FN 6% {}, rate {:.3}{}; FN 2% rate ≤ 1/N for every N: {}",
        w.fn_exact,
        w.fn_2pct,
        w.fn_6pct,
        w.rate,
        w.rate_n.map_or_else(String::new, |n| format!(" (N = {n})")),
        if r.fn_2pct_max_ok { "yes" } else { "no" }
    )?;
    writeln!(out)?;

    let fp = &r.false_positives;
    writeln!(
        out,
        "False positives: {} patterns not in the truth, expected {:.1} in all, {} in our top {}",
        fp.patterns, fp.expected, fp.in_top_k, r.truth_patterns
    )?;
    if !fp.highest.is_empty() {
        writeln!(
            out,
            "{:>6} {:>8} {:>10}  {:<16}  pattern",
            "rank", "count", "expected", "id"
        )?;
        for p in &fp.highest {
            writeln!(
                out,
                "{:>6} {:>8} {:>10.1}  {:<16}  {}",
                p.rank,
                p.count,
                p.expected,
                p.id,
                truncate(&p.canonical, 60)
            )?;
        }
    }
    writeln!(out)?;

    match &r.instances {
        Some(i) => writeln!(
            out,
            "Instances: {} of {} true instances found ({}), probability-weighted recall {:.3}; \
             {} inferred instances match no true instance",
            i.found,
            i.truth,
            pct(Some(i.recall)),
            i.weighted_recall,
            i.unmatched_inferred
        )?,
        None => writeln!(out, "Instances: n/a{NO_INSTANCES}")?,
    }
    match &r.messages {
        Some(m) => {
            let missing = if m.truth == 0 {
                0.0
            } else {
                m.missing as f64 / m.truth as f64
            };
            writeln!(
                out,
                "Messages:  {} of {} true messages ascribed to their true parent ({}); {} ({}) \
                 in no inferred instance",
                m.correct,
                m.truth,
                pct(Some(m.recall)),
                m.missing,
                pct(Some(missing))
            )?
        }
        None => writeln!(out, "Messages:  n/a{NO_INSTANCES}")?,
    }
    writeln!(out)?;

    let d = &r.delay;
    writeln!(
        out,
        "Per-node mean delays on the {} of {} true patterns found: max relative error {}, \
         count-weighted mean {}",
        d.patterns_compared,
        r.truth_patterns,
        pct(d.max_rel_error),
        pct(d.mean_rel_error)
    )?;
    writeln!(
        out,
        "Network latency: max absolute error {} ms, mean {} ms; end-to-end: max relative error \
         {}, mean {}",
        ms(r.network.max_abs_error_ms),
        ms(r.network.mean_abs_error_ms),
        pct(r.end_to_end.max_rel_error),
        pct(r.end_to_end.mean_rel_error)
    )?;
    writeln!(
        out,
        "{:>8} {:>8} {:>10} {:>5} {:>9} {:>9} {:>8}  {:<16}  pattern",
        "truth", "count", "expected", "rank", "delay rel", "abs ms", "e2e rel", "id"
    )?;
    for p in d.per_pattern.iter().take(TABLE_PATTERNS) {
        writeln!(
            out,
            "{:>8} {:>8} {:>10.1} {:>5} {:>9} {:>9} {:>8}  {:<16}  {}{}",
            p.truth_count,
            p.count,
            p.expected,
            p.rank.map_or_else(|| "-".to_owned(), |r| r.to_string()),
            pct(p.max_rel_error),
            ms(p.max_abs_error_ms),
            pct(p.end_to_end_rel_error),
            p.id,
            truncate(&p.canonical, 60),
            if p.shape_mismatch {
                "  (trees differ)"
            } else {
                ""
            }
        )?;
    }
    if d.per_pattern.len() > TABLE_PATTERNS {
        writeln!(
            out,
            "  ({} more true patterns; --format json lists all)",
            d.per_pattern.len() - TABLE_PATTERNS
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A two-message pattern line `CLIENT>s:80(s>CLIENT:*())`.
    fn pattern_line(id: &str, count: u64, expected: f64, delay: f64) -> String {
        json!({
            "schema": 1, "kind": "pattern", "id": id, "count": count, "expected": expected,
            "cumulative": true,
            "end_to_end_ms": {"mean": 2.0 * delay},
            "root": {"src": "CLIENT", "dst": id, "dst_port": 80, "network_ms": {"mean": 0.5},
                     "children": [{"src": id, "dst": "CLIENT", "dst_port": null,
                                   "delay_ms": {"mean": delay}, "network_ms": {"mean": 0.5},
                                   "children": []}]}
        })
        .to_string()
    }

    fn parse_str(text: &str) -> Parsed {
        parse(text.as_bytes(), "test").unwrap()
    }

    /// A pattern line whose tree is a chain `depth` calls deep, written as `analyze` writes
    /// it (serde_json writes any depth; it reads 128 by default).
    fn chain_line(id: &str, depth: usize) -> String {
        let mut node = json!({"src": "n0", "dst": "n1", "children": []});
        for i in 1..depth {
            node = json!({"src": format!("n{i}"), "dst": format!("n{}", i + 1),
                          "children": [node]});
        }
        json!({"schema": 1, "kind": "pattern", "id": id, "count": 3, "cumulative": true,
               "canonical": "a chain", "root": node})
        .to_string()
    }

    #[test]
    fn a_pattern_of_a_long_chain_is_read_and_a_hostile_depth_is_counted() {
        let deep = chain_line("deep", 300);
        let hostile = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        let parsed = parse_str(&format!("{deep}\n{hostile}\n"));
        assert_eq!(parsed.patterns.len(), 1, "the 300-deep chain is read");
        assert_eq!(parsed.malformed, 1);
        assert_eq!(parsed.first_malformed, Some(2));
    }

    fn fn_vectors(report: &Report) -> [Vec<usize>; 3] {
        [
            report.top_n.iter().map(|r| r.fn_exact).collect(),
            report.top_n.iter().map(|r| r.fn_2pct).collect(),
            report.top_n.iter().map(|r| r.fn_6pct).collect(),
        ]
    }

    #[test]
    fn top_n_false_negatives_with_near_ties_and_a_false_positive() {
        let truth = [("a", 100), ("b", 50), ("c", 49), ("d", 30), ("e", 20)]
            .iter()
            .map(|&(id, count)| pattern_line(id, count, count as f64, 1.0))
            .collect::<Vec<_>>()
            .join("\n");
        // Ranked by expected: a 100, c 60, b 40, f 30.5 (false), d 30, e 29.
        let ours = [
            pattern_line("b", 999, 999.0, 1.0), // superseded below
            pattern_line("a", 100, 100.0, 1.0),
            pattern_line("c", 60, 60.0, 1.0),
            pattern_line("b", 40, 40.0, 1.0),
            pattern_line("f", 31, 30.5, 1.0),
            pattern_line("d", 30, 30.0, 1.0),
            pattern_line("e", 29, 29.0, 1.0),
            pattern_line("g", 90, 90.0, 1.0),
            pattern_line("g", 0, 0.0, 1.0), // retracted
            // Not cumulative: ignored, since there are cumulative lines.
            json!({"kind": "pattern", "id": "h", "count": 500, "expected": 500.0,
                   "cumulative": false, "root": {"src": "CLIENT", "dst": "h"}})
            .to_string(),
            r#"{"kind":"stats","origin":"x","records":5}"#.to_owned(),
        ]
        .join("\n");
        let report = score(
            &parse_str(&truth),
            &parse_str(&ours),
            RankArg::Expected,
            None,
        );
        // N=2: b (40) is missing; not within 2% or 6% of c (60), but a near-tie in the truth
        // (50 vs 49) at 6%. N=4: d (30) within 2% of f (30.5). N=5: e (29) within 6% of d
        // (30), and there is no 6th true pattern to tie with.
        assert_eq!(
            fn_vectors(&report),
            [
                vec![0, 1, 0, 1, 1],
                vec![0, 1, 0, 0, 1],
                vec![0, 0, 0, 0, 0]
            ]
        );
        assert!(report.fn_2pct_max_ok);
        assert_eq!(report.worst.fn_exact, 1);
        assert_eq!(report.worst.rate_n, Some(2));
        assert_eq!(report.truth_patterns, 5);
        assert_eq!(report.inferred_patterns, 6);
        assert_eq!(report.false_positives.patterns, 1);
        assert_eq!(report.false_positives.expected, 30.5);
        assert_eq!(report.false_positives.in_top_k, 1);
        assert_eq!(report.false_positives.highest[0].id, "f");
        assert_eq!(report.false_positives.highest[0].rank, 4);
        assert!(report.instances.is_none() && report.messages.is_none());

        // Ranked by count instead: a 100, c 60, b 40, f 31, d 30, e 29: d within 6% only.
        let report = score(&parse_str(&truth), &parse_str(&ours), RankArg::Count, None);
        assert_eq!(
            fn_vectors(&report),
            [
                vec![0, 1, 0, 1, 1],
                vec![0, 1, 0, 1, 1],
                vec![0, 0, 0, 0, 0]
            ]
        );
        // A longer top: the truth has only 5 patterns.
        let report = score(
            &parse_str(&truth),
            &parse_str(&ours),
            RankArg::Count,
            Some(7),
        );
        assert_eq!(report.top_n.len(), 7);
        assert_eq!(report.top_n[6].fn_exact, 0);
    }

    /// A message of an instance line.
    fn msg(ep: (&str, &str), send_ms: Option<f64>, recv_ms: f64, parent: Option<usize>) -> Value {
        let ns = |ms: f64| (ms * 1e6) as u64;
        json!({"src": "x", "dst": "y", "src_endpoint": ep.0, "dst_endpoint": ep.1,
               "send_ns": send_ms.map(ns), "recv_ns": ns(recv_ms), "parent": parent})
    }

    fn instance_line(probability: f64, messages: Vec<Value>) -> String {
        json!({"kind": "instance", "pattern": "p", "probability": probability,
               "messages": messages})
        .to_string()
    }

    const C1: &str = "10.1.0.1:5000";
    const C2: &str = "10.1.0.2:5000";
    const S: &str = "10.0.0.1:80";
    const S2: &str = "10.0.0.1:4000";
    const DB: &str = "10.0.0.2:5432";

    #[test]
    fn instance_and_message_recall() {
        let truth = [
            // I1: a, b(a); with rows.
            {
                let mut a = msg((C1, S), Some(1000.0), 1000.5, None);
                a["row"] = json!(0);
                let mut b = msg((S, C1), Some(1002.0), 1002.5, Some(0));
                b["row"] = json!(1);
                instance_line(1.0, vec![a, b])
            },
            // I2: c, d(c), e(d).
            instance_line(
                1.0,
                vec![
                    msg((C2, S), Some(2000.0), 2000.5, None),
                    msg((S2, DB), Some(2001.0), 2001.2, Some(0)),
                    msg((DB, S2), Some(2003.0), 2003.2, Some(1)),
                ],
            ),
            // I3: f, found nowhere.
            instance_line(1.0, vec![msg((C1, S), Some(5000.0), 5000.5, None)]),
            pattern_line("p", 3, 3.0, 1.0),
        ]
        .join("\n");
        let ours = [
            // X1 = I1 by rows (times and endpoints are off: rows decide).
            {
                let mut a = msg((C2, DB), None, 1.0, None);
                a["row"] = json!(0);
                let mut b = msg((C2, DB), None, 1.0, Some(0));
                b["row"] = json!(1);
                instance_line(0.8, vec![a, b])
            },
            // X2: c, d(c), e(c): e's parent is wrong. c has no send time (receive time
            // matches), the others are 0.5 ms off.
            instance_line(
                0.6,
                vec![
                    msg((C2, S), None, 2000.9, None),
                    msg((S2, DB), Some(2001.5), 2001.2, Some(0)),
                    msg((DB, S2), Some(2002.5), 2003.2, Some(0)),
                ],
            ),
            // X3 = I2, less probable.
            instance_line(
                0.3,
                vec![
                    msg((C2, S), Some(2000.0), 2000.5, None),
                    msg((S2, DB), Some(2001.0), 2001.2, Some(0)),
                    msg((DB, S2), Some(2003.0), 2003.2, Some(1)),
                ],
            ),
            // X4: f with a send time 1.5 ms off: no true message.
            instance_line(0.9, vec![msg((C1, S), Some(5001.5), 5000.5, None)]),
            // X5: only part of I2.
            instance_line(1.0, vec![msg((C2, S), Some(2000.0), 2000.5, None)]),
            pattern_line("p", 3, 2.0, 1.0),
            "not json".to_owned(),
            r#"{"kind":"instance","probability":0.5}"#.to_owned(),
        ]
        .join("\n");
        let ours = parse_str(&ours);
        assert_eq!(ours.malformed, 2);
        assert_eq!(ours.first_malformed, Some(7));
        let report = score(&parse_str(&truth), &ours, RankArg::Expected, None);
        let instances = report.instances.unwrap();
        assert_eq!(instances.truth, 3);
        assert_eq!(instances.found, 2);
        assert!((instances.weighted_recall - (0.8 + 0.3) / 3.0).abs() < 1e-12);
        assert_eq!(instances.unmatched_inferred, 3);
        // a, b from X1; c from X5 (root, right); d, e from X2 (d right, e wrong); f missing.
        let messages = report.messages.unwrap();
        assert_eq!(messages.truth, 6);
        assert_eq!(messages.correct, 4);
        assert_eq!(messages.missing, 1);
    }

    #[test]
    fn delay_errors() {
        let truth = [
            pattern_line("a", 100, 100.0, 2.0),
            pattern_line("b", 50, 50.0, 1.0),
            pattern_line("c", 10, 10.0, 1.0),
        ]
        .join("\n");
        let mut a = serde_json::from_str::<Value>(&pattern_line("a", 90, 88.0, 2.1)).unwrap();
        a["root"]["network_ms"]["mean"] = json!(0.55);
        a["end_to_end_ms"]["mean"] = json!(4.4);
        let ours = [a.to_string(), pattern_line("b", 50, 49.0, 1.0)].join("\n");
        let report = score(
            &parse_str(&truth),
            &parse_str(&ours),
            RankArg::Expected,
            None,
        );
        let d = &report.delay;
        assert_eq!(d.patterns_compared, 2);
        assert!((d.max_rel_error.unwrap() - 0.05).abs() < 1e-9);
        assert!((d.mean_rel_error.unwrap() - 0.05 * 100.0 / 150.0).abs() < 1e-9);
        assert_eq!(d.per_pattern.len(), 3);
        let pa = &d.per_pattern[0];
        assert_eq!((pa.id.as_str(), pa.truth_count, pa.count), ("a", 100, 90));
        assert_eq!(pa.expected, 88.0);
        assert!((pa.max_abs_error_ms.unwrap() - 0.1).abs() < 1e-9);
        assert!((pa.end_to_end_rel_error.unwrap() - 0.1).abs() < 1e-9);
        assert_eq!(pa.canonical, "CLIENT>a:80(a>CLIENT:*())");
        assert_eq!(d.per_pattern[1].max_rel_error, Some(0.0));
        assert_eq!(d.per_pattern[2].count, 0);
        assert_eq!(d.per_pattern[2].max_rel_error, None);
        assert!((report.network.max_abs_error_ms.unwrap() - 0.05).abs() < 1e-9);
        assert!((report.end_to_end.max_rel_error.unwrap() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn json_report_and_table() {
        let truth = pattern_line("a", 10, 10.0, 1.0);
        let ours = pattern_line("a", 10, 10.0, 1.0);
        let report = score(
            &parse_str(&truth),
            &parse_str(&ours),
            RankArg::Expected,
            None,
        );
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(v["rank"], "expected");
        assert_eq!(v["top_n"][0]["fn"], 0);
        assert_eq!(v["fn_2pct_max_ok"], true);
        assert!(v["instances"].is_null() && v["messages"].is_null());
        let mut out = Vec::new();
        write_table(&mut out, &report, "truth", "ours").unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Instances: n/a"), "{text}");
    }

    /// A truth message: (src, dst, send, recv, row, parent, dst_port).
    fn truth_msg(
        (src, dst): (&str, &str),
        (send, recv): (u64, u64),
        row: u64,
        parent: Option<usize>,
        port: Option<u16>,
    ) -> Value {
        json!({"src": src, "dst": dst, "dst_port": port, "send_ns": send, "recv_ns": recv,
               "send_captured": true, "recv_captured": true, "parent": parent, "row": row})
    }

    /// Two interleaved requests CLIENT -> B -> C; latest-in takes C's reply in the first
    /// for a child of the second's call, which arrived later.
    fn two_requests() -> Vec<Value> {
        let i1 = vec![
            truth_msg(("CLIENT", "B"), (100, 110), 0, None, Some(80)),
            truth_msg(("B", "C"), (120, 130), 2, Some(0), Some(90)),
            truth_msg(("C", "B"), (140, 150), 4, Some(1), None),
            truth_msg(("B", "CLIENT"), (160, 170), 6, Some(2), None),
        ];
        let i2 = vec![
            // B receives this at 125 and sends its call at 125, listed later: it counts.
            truth_msg(("CLIENT", "B"), (115, 125), 1, None, Some(80)),
            truth_msg(("B", "C"), (125, 135), 3, Some(0), Some(90)),
            truth_msg(("C", "B"), (145, 155), 5, Some(1), None),
            truth_msg(("B", "CLIENT"), (165, 175), 7, Some(2), None),
        ];
        vec![
            json!({"kind": "instance", "probability": 1.0, "messages": i1}),
            json!({"kind": "instance", "probability": 1.0, "messages": i2}),
        ]
    }

    fn lines(values: &[Value]) -> String {
        values
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn latest_in_takes_the_latest_arrival_and_roots_clients_calls() {
        let text = lines(&two_requests());
        let truth = parse_truth_messages(text.as_bytes(), "t").unwrap();
        assert_eq!(truth.len(), 8);
        let predicted = latest_in(&truth);
        // Indices: first request 0-3, second 4-7. C's reply in the first (2) is sent at 140,
        // after the second's call (5) arrived at 135: latest-in picks 5; and B's reply in the
        // first, sent at 160, follows the second's reply from C (6), which arrived at 155.
        assert_eq!(
            predicted,
            vec![
                None,
                Some(0),
                Some(5),
                Some(6),
                None,
                Some(4),
                Some(5),
                Some(6)
            ]
        );
        let report = baseline_report("latest-in", &truth, &predicted);
        assert_eq!(report.clients_by, "kind");
        assert_eq!((report.messages.correct, report.messages.truth), (6, 8));
        assert!((report.messages.recall - 6.0 / 8.0).abs() < 1e-12);
        let mut out = Vec::new();
        write_baseline(&mut out, &report, "t").unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("Messages:  6 of 8 true messages ascribed to their true parent (75.0%)"),
            "{text}"
        );
    }

    #[test]
    fn latest_in_without_kind_tells_clients_by_who_speaks_first() {
        // Node names and kinds as `--endpoints names --no-kind` writes them: no ports.
        let mut values = two_requests();
        for v in &mut values {
            for m in v["messages"].as_array_mut().unwrap() {
                let call = m["dst_port"].is_number();
                m["kind"] = json!(if call { "call" } else { "return" });
                m["dst_port"] = Value::Null;
                for end in ["src", "dst"] {
                    if m[end] == "CLIENT" {
                        m[end] = json!("client");
                    }
                }
            }
        }
        values.push(
            json!({"schema": 1, "kind": "truth", "messages": 8, "endpoints": "names",
                           "kind_column": false}),
        );
        let truth = parse_truth_messages(lines(&values).as_bytes(), "t").unwrap();
        assert!(!truth.kind_column);
        assert_eq!(truth.malformed, 0);
        let predicted = latest_in(&truth);
        let report = baseline_report("latest-in", &truth, &predicted);
        assert_eq!(report.clients_by, "first-contact");
        assert_eq!(report.messages.correct, 6);
        assert_eq!(predicted[0], None);
        assert_eq!(predicted[4], None);
        // With the kind column but names: the messages' own kinds say which are calls.
        values.pop();
        let truth = parse_truth_messages(lines(&values).as_bytes(), "t").unwrap();
        assert_eq!(latest_in(&truth), predicted);
    }

    #[test]
    fn latest_in_uses_only_what_the_trace_has() {
        let mut values = two_requests();
        // The second reply's send side was lost: nothing to place it by.
        values[1]["messages"][3]["send_captured"] = json!(false);
        // C's reply in the first was lost on both sides: no row, not a candidate.
        values[0]["messages"][2]["row"] = Value::Null;
        values.push(json!("not an object"));
        let truth = parse_truth_messages(lines(&values).as_bytes(), "t").unwrap();
        assert_eq!((truth.malformed, truth.first_malformed), (1, Some(3)));
        let predicted = latest_in(&truth);
        assert_eq!(predicted[2], None);
        // B's reply in the first still follows C's in the second (arrived at 155 < 160).
        assert_eq!(predicted[3], Some(6));
        assert_eq!(predicted[7], None);
        assert!(parse_truth_messages("{}".as_bytes(), "t").is_err());
    }

    #[test]
    fn no_pattern_lines_is_an_error() {
        let err = parse_patterns(r#"{"kind":"stats"}"#.as_bytes(), "p.jsonl").unwrap_err();
        assert!(
            err.to_string().starts_with("p.jsonl: no `pattern` lines"),
            "{err}"
        );
        let err = parse_truth("garbage\n".as_bytes(), "t.jsonl").unwrap_err();
        assert!(
            err.to_string().starts_with("t.jsonl: no `pattern` lines"),
            "{err}"
        );
    }
}
