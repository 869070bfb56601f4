//! Before the dataflow starts: a look at the beginning of each capture to align the sniffers'
//! clocks coarsely and to learn where each sniffer sits.
//!
//! Event time must put the same moment from different sniffers in the same window even when
//! their clocks differ by an hour, so each origin's clock offset is estimated first, from the
//! copies of one packet that two sniffers saw (same payload hash and length, same TCP sequence
//! and acknowledgment numbers, which address translation leaves alone): the median difference
//! per pair of sniffers, chained from the reference sniffer (the first input) along the pairs
//! with the most copies. This is good to about a network latency; the `clock` operator then
//! estimates offsets and drift precisely and continuously. The same sample tells which sniffer
//! is a host's own ([`Homes`]).
//!
//! Inputs read from stdin or another pipe (a FIFO) are not sampled (they cannot be read
//! twice): their offset is 0.
//!
//! Message traces get the same treatment per host, since each timestamp of a row is in the
//! clock of the host that took it (the send in the sender's, the receive in the receiver's):
//! every trace file is read once ([`causeway_sources::ordered::survey`]), its rows' smallest
//! one-way delays each way give each pair of hosts an offset, and the offsets are chained from
//! the reference host ([`causeway_sources::clocks`]): the node `--clock-reference` names, else
//! the one the `clock` operator takes when none is named (the smallest name among the nodes
//! seen both ways). A row's event time is then its send time less its sender's offset (else
//! its receive time less its receiver's), and each file is read by cursors that follow its
//! hosts' clocks ([`TracePlan`]), so that the rows come in event-time order whatever order
//! the file has them in. A trace read from a pipe cannot be read twice: it is put in order
//! through a bounded buffer instead ([`TraceOrder::Buffered`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use anyhow::Result;
use causeway_operators::reconcile::topology::{Homes, Placement};
use causeway_operators::{ClockOffset, Domain, Names};
use causeway_sources::clocks::{Evidence, How, Solution};
use causeway_sources::decode::DecodeOptions;
use causeway_sources::input::is_pipe;
use causeway_sources::ordered::{Survey, TracePlan, survey};
use causeway_sources::{
    Alignment, Batch, InputKind, InputSpec, OriginId, Origins, Packet, TraceOrder,
};

/// How much of each capture the bootstrap reads.
#[derive(Clone, Copy, Debug)]
pub struct SampleSize {
    /// At most this many packets per input.
    pub packets: usize,
    /// At most this much of the input's time, ns.
    pub span_ns: u64,
}

impl Default for SampleSize {
    fn default() -> Self {
        SampleSize {
            packets: 200_000,
            span_ns: 30_000_000_000,
        }
    }
}

/// What the bootstrap learned.
#[derive(Clone, Debug, Default)]
pub struct Bootstrap {
    /// Coarse clock offsets per origin.
    pub alignment: Alignment,
    /// The message traces' hosts' coarse offsets as the `clock` operator's start-up anchors.
    pub clock_anchors: BTreeMap<Domain, ClockOffset>,
    /// Sniffer placements.
    pub homes: Homes,
    /// One line per origin, for `-v`.
    pub notes: Vec<String>,
    /// The first capture's origin: the default reference clock.
    pub reference: Option<OriginId>,
    /// The node whose host the message traces' clocks were aligned to (offset 0 in
    /// `alignment`): the `clock` operator's reference where no capture gives one, so that its
    /// estimates and the alignment that stands in before them share one clock.
    pub trace_reference: Option<String>,
    /// Whether every input is a message-trace file: no packets to fold into messages and no
    /// two sides of a message to pair, so nothing waits out the reconciliation window or the
    /// message gap.
    pub message_traces_only: bool,
    /// Whether the message traces read name their nodes (no `ip:port` endpoint among their
    /// hosts): connections then say nothing of which reply answers which request.
    pub named_traces: bool,
    /// How each input (by position) is read if it is a message trace.
    pub trace_orders: Vec<TraceOrder>,
    /// When every input is a message-trace file read in its own order (no host's clock
    /// offset, [`TraceOrder::File`]): how far any row's event time lies at most behind a row
    /// before it in its file, as the survey of the whole file measured it. The sources need
    /// no more lateness than that.
    pub trace_disorder_ns: Option<u64>,
    /// When every input is a message-trace file: their rows per second of event time, over
    /// the span from the earliest row to the latest (raw times, as the survey read them).
    pub trace_rate: Option<f64>,
}

fn content_key(p: &Packet) -> Option<(u64, u32, u32, u32)> {
    if p.payload_len == 0 || p.payload_hash == 0 {
        return None;
    }
    Some(match p.tcp {
        Some(t) => (p.payload_hash, p.payload_len, t.seq, t.ack),
        None => (p.payload_hash, p.payload_len, 0, 0),
    })
}

fn median(v: &mut [i64]) -> i64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Samples the inputs and estimates alignment and placements. `names` names the hosts of
/// message traces; `clock_reference` is `--clock-reference`.
pub fn bootstrap(
    inputs: &[InputSpec],
    origins: &Origins,
    declared: &BTreeMap<OriginId, BTreeSet<IpAddr>>,
    names: &Names,
    clock_reference: Option<&str>,
    size: SampleSize,
) -> Result<Bootstrap> {
    let mut samples: BTreeMap<OriginId, Vec<Packet>> = BTreeMap::new();
    let mut reference = None;
    let read_once = |s: &InputSpec| s.path == "-" || is_pipe(&s.path);
    let mut message_traces_only = !inputs.is_empty() && !inputs.iter().any(read_once);
    let mut trace_orders = vec![TraceOrder::File; inputs.len()];
    let mut evidence = Evidence::default();
    let mut surveys: Vec<(usize, Survey)> = Vec::new();
    for (i, spec) in inputs.iter().enumerate() {
        if read_once(spec) {
            // Not sampled (what is read here would be lost to the run, and a FIFO's writer
            // gone); a message trace among them is put in order through a buffer.
            trace_orders[i] = TraceOrder::Buffered;
            continue;
        }
        let (mut reader, kind) = causeway_sources::open(spec, DecodeOptions::default(), None)?;
        message_traces_only &= kind == InputKind::MessageTrace;
        if kind == InputKind::MessageTrace {
            surveys.push((i, survey(spec, &mut evidence)?));
            continue;
        }
        if kind != InputKind::Capture {
            continue;
        }
        reference.get_or_insert(spec.origin);
        let mut batch = Batch::default();
        let mut taken: Vec<Packet> = Vec::new();
        let mut first = None;
        loop {
            let more = reader.read_batch(4096, &mut batch);
            let f = *first.get_or_insert_with(|| batch.packets.first().map_or(0, |p| p.ts_ns));
            let within = batch
                .packets
                .iter()
                .take_while(|p| p.ts_ns.saturating_sub(f) <= size.span_ns);
            let n = within.count();
            let stop = n < batch.packets.len();
            taken.extend(batch.packets.drain(..n));
            batch.clear();
            if !more || stop || taken.len() >= size.packets {
                break;
            }
        }
        taken.truncate(size.packets);
        samples.entry(spec.origin).or_default().extend(taken);
    }
    let homes = Homes::infer(&samples, declared);

    // Pairwise differences of the copies of one packet (first copy per origin).
    let mut seen: HashMap<(u64, u32, u32, u32), BTreeMap<OriginId, u64>> = HashMap::new();
    for (origin, packets) in &samples {
        for p in packets {
            if let Some(k) = content_key(p) {
                seen.entry(k).or_default().entry(*origin).or_insert(p.ts_ns);
            }
        }
    }
    let mut diffs: BTreeMap<(OriginId, OriginId), Vec<i64>> = BTreeMap::new();
    for copies in seen.values() {
        if copies.len() < 2 || copies.len() > 8 {
            continue;
        }
        let list: Vec<(&OriginId, &u64)> = copies.iter().collect();
        for i in 0..list.len() {
            for j in i + 1..list.len() {
                diffs
                    .entry((*list[i].0, *list[j].0))
                    .or_default()
                    .push(*list[j].1 as i64 - *list[i].1 as i64);
            }
        }
    }
    let mut pairs: Vec<(usize, OriginId, OriginId, i64)> = diffs
        .into_iter()
        .map(|((a, b), mut d)| (d.len(), a, b, median(&mut d)))
        .collect();
    // Most evidence first: a maximum spanning tree from the reference.
    pairs.sort_by(|x, y| y.0.cmp(&x.0).then((x.1, x.2).cmp(&(y.1, y.2))));
    let reference_origin = reference.unwrap_or_default();
    let reference_name = origins.name(reference_origin);
    let mut known: BTreeMap<OriginId, i64> = BTreeMap::from([(reference_origin, 0)]);
    let mut grew = true;
    while grew {
        grew = false;
        for (n, a, b, d) in &pairs {
            if *n < 3 {
                continue;
            }
            match (known.get(a).copied(), known.get(b).copied()) {
                (Some(x), None) => {
                    known.insert(*b, x + d);
                    grew = true;
                }
                (None, Some(y)) => {
                    known.insert(*a, y - d);
                    grew = true;
                }
                _ => {}
            }
        }
    }
    let mut alignment = Alignment::none();
    let mut notes = Vec::new();
    let mut clock_anchors = BTreeMap::new();
    let mut trace_reference = None;
    if !evidence.hosts().is_empty() {
        let (solution, reference) = align_traces(
            &evidence,
            names,
            clock_reference,
            &mut alignment,
            &mut notes,
        );
        clock_anchors = anchors(&evidence, names, &solution);
        trace_reference = Some(reference);
        for (i, survey) in &surveys {
            let Some(plan) = TracePlan::new(survey, &evidence, &solution) else {
                continue;
            };
            notes.push(format!(
                "{}: {} rows; read by {} cursors in the order of its hosts' clocks ({:.2} times \
                 its size)",
                inputs[*i].path,
                survey.rows,
                plan.cursors().len(),
                plan.bytes_read() as f64 / survey.bytes().max(1) as f64,
            ));
            trace_orders[*i] = TraceOrder::Planned(Arc::new(plan));
        }
    }
    for (id, origin) in origins.iter() {
        let offset = known.get(&id).copied();
        alignment.set(id, offset.unwrap_or(0));
        let placement = match homes.placement(id) {
            Placement::Host(ips) => format!(
                "host sniffer of {}",
                ips.iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Placement::Segment => "segment sniffer".to_owned(),
            Placement::Transit => "transit sniffer (sees forwarded packets twice)".to_owned(),
        };
        let sampled = samples.get(&id).map_or(0, Vec::len);
        notes.push(match offset {
            Some(o) => format!("{}: {placement}; clock {:+.6} s from {reference_name} ({sampled} packets sampled)", origin.name, o as f64 / 1e9),
            None if sampled > 0 => format!("{}: {placement}; no packet in common with the reference's sniffers, clock taken as the reference's", origin.name),
            None => format!("{}: not sampled; clock taken as the reference's", origin.name),
        });
    }
    let hosts = evidence.hosts();
    let named_traces = !hosts.is_empty()
        && (0..hosts.len() as u32).all(|i| {
            matches!(
                hosts.key(i),
                Some(causeway_sources::clocks::HostKey::Name(_))
            )
        });
    let in_file_order =
        message_traces_only && trace_orders.iter().all(|o| matches!(o, TraceOrder::File));
    let trace_disorder_ns = in_file_order.then(|| {
        surveys
            .iter()
            .map(|(_, s)| s.disorder_ns)
            .max()
            .unwrap_or(0)
    });
    let trace_rate = message_traces_only
        .then(|| {
            let rows: u64 = surveys.iter().map(|(_, s)| s.rows).sum();
            let first = surveys
                .iter()
                .filter_map(|(_, s)| s.span_ns)
                .map(|s| s.0)
                .min()?;
            let last = surveys
                .iter()
                .filter_map(|(_, s)| s.span_ns)
                .map(|s| s.1)
                .max()?;
            (last > first).then(|| rows as f64 * 1e9 / (last - first) as f64)
        })
        .flatten();
    Ok(Bootstrap {
        alignment,
        clock_anchors,
        trace_reference,
        homes,
        notes,
        reference,
        message_traces_only,
        named_traces,
        trace_orders,
        trace_disorder_ns,
        trace_rate,
    })
}

/// The message traces' hosts' offsets as the `clock` operator's start-up anchors
/// ([`ClockConfig::anchors`](causeway_operators::ClockConfig::anchors)), by the domain of each
/// host's node.
fn anchors(
    evidence: &Evidence,
    names: &Names,
    solution: &Solution,
) -> BTreeMap<Domain, ClockOffset> {
    let node = |h: u32| -> Option<Domain> {
        let a = evidence.example(h)?;
        Some(Domain::Node(names.node_of(a)))
    };
    (0..evidence.hosts().len() as u32)
        .filter_map(|h| {
            let e = solution.estimates.get(h as usize).copied().flatten()?;
            let domain = node(h)?;
            let reference = node(e.relative_to)?;
            Some((
                domain.clone(),
                ClockOffset {
                    domain,
                    reference,
                    at: 0,
                    offset_ns: e.offset_ns as f64,
                    drift_ppm: 0.0,
                    error_ns: e.bound_ns.map_or(f64::INFINITY, |b| b as f64),
                    seconds: 0,
                    last: false,
                },
            ))
        })
        .collect()
}

/// Most hosts of message traces described one by one in the notes.
const HOST_NOTES: usize = 40;

/// The message traces' hosts' offsets from `evidence`, into `alignment`, with a note per host
/// (the first [`HOST_NOTES`]), and the reference's node. The reference is the host of the node
/// `clock_reference` names, else that of the smallest node name among the hosts seen both
/// ways, else among all; a group of hosts that no row connects to the reference takes its own
/// by the same rule (as `clock` places such a group on the clock of its anchors).
fn align_traces(
    evidence: &Evidence,
    names: &Names,
    clock_reference: Option<&str>,
    alignment: &mut Alignment,
    notes: &mut Vec<String>,
) -> (Solution, String) {
    let hosts = evidence.hosts();
    let node = |h: u32| -> String {
        match evidence.example(h) {
            Some(a) => names.node_of(a).to_string(),
            None => hosts.key(h).map_or_else(String::new, ToString::to_string),
        }
    };
    let named = clock_reference.and_then(|r| (0..hosts.len() as u32).find(|&h| node(h) == r));
    // Hosts seen both ways first, then by node name: the first is the reference, and each
    // group of hosts that no row connects to it takes its first (as `clock` does).
    let mut both_ways = vec![false; hosts.len()];
    for h in evidence.both_ways() {
        both_ways[h as usize] = true;
    }
    let mut preference: Vec<u32> = (0..hosts.len() as u32).collect();
    preference.sort_by_cached_key(|&h| (!both_ways[h as usize], node(h), h));
    let reference = named.or_else(|| preference.first().copied()).unwrap_or(0);
    let solution = evidence.solve(reference, &preference);
    let label = |h: u32| {
        let key = hosts.key(h).map_or_else(String::new, ToString::to_string);
        let n = node(h);
        if n == key { n } else { format!("{n} ({key})") }
    };
    let reference_label = label(reference);
    let mut shown = 0;
    let mut unplaced = 0;
    let mut order: Vec<u32> = (0..hosts.len() as u32).collect();
    order.sort_by_cached_key(|&h| (node(h), h));
    for h in order {
        let estimate = solution.estimates.get(h as usize).copied().flatten();
        if let (Some(key), Some(e)) = (hosts.key(h), estimate) {
            alignment.set_host(key.clone(), e.offset_ns);
            if let Some(bound) = e.bound_ns {
                alignment.set_host_bound(key.clone(), bound);
            }
        }
        if estimate.is_none() {
            unplaced += 1;
        }
        if shown >= HOST_NOTES {
            continue;
        }
        shown += 1;
        let stamped = evidence.stamped(h);
        notes.push(match estimate {
            None => format!(
                "trace host {}: no timestamped row to or from a host aligned with {reference_label}; \
                 clock taken as the reference's ({stamped} rows stamped)",
                label(h)
            ),
            Some(e) => {
                let how = match e.how {
                    How::Reference => "the reference".to_owned(),
                    How::GroupReference => format!(
                        "no timestamped row connects its group of hosts to {reference_label}, so \
                         their clocks are placed relative to this one"
                    ),
                    How::BothWays { via, samples } => format!(
                        "both ways with {} over {samples} rows{}",
                        label(via),
                        e.bound_ns
                            .map(|b| format!(", within ±{:.6} s", b as f64 / 1e9))
                            .unwrap_or_default()
                    ),
                    How::OneWay { via, samples } => format!(
                        "one way with {} over {samples} rows: a bound less the typical latency \
                         ({:.6} s)",
                        label(via),
                        solution.latency_ns as f64 / 1e9
                    ),
                };
                format!(
                    "trace host {}: clock {:+.6} s from {} ({how}; {stamped} rows \
                     stamped)",
                    label(h),
                    e.offset_ns as f64 / 1e9,
                    label(e.relative_to)
                )
            }
        });
    }
    if hosts.len() > shown {
        notes.push(format!(
            "{} more trace hosts ({unplaced} of all without an offset)",
            hosts.len() - shown
        ));
    }
    (solution, node(reference))
}
