//! `causeway generate`: synthetic traces with ground truth, after Project 5's maketrace
//! (§7.1.1).
//!
//! A [`config::System`] (a preset, a TOML file, or one drawn at random by [`random`])
//! describes server nodes, services and tracelets. [`sim::Simulator`] instantiates tracelets in
//! client loops with think times; [`net::Network`] carries each message over TCP connections or
//! UDP; [`write`](mod@write) places sniffers (one mirror port, or one per server host in that
//! host's clock, with loss) and writes pcap/pcapng captures or a message-trace CSV (ends as
//! `ip:port` or node names, with or without `kind` and `call_id`, timestamps at a resolution:
//! [`TraceOptions`]); [`truth`] records the true path instances and patterns. Everything
//! streams: memory holds what is in flight, not the trace.

pub mod config;
pub mod net;
pub mod random;
pub mod sim;
pub mod truth;
pub mod write;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context, Result, bail};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

use crate::cli::{EndpointsArg, GenerateArgs, SniffersArg, TraceFormatArg};
use config::System;
use net::Network;
use sim::{Host, Instance, ParallelismMeter, Simulator};
use truth::{Truth, TruthMessage};
use write::{Captures, Clock, Container, End, Placement, Row, Sides, TraceCsv};

/// What to generate.
#[derive(Clone, Debug)]
pub struct Options {
    /// Stop after this many messages.
    pub messages: u64,
    /// Target mean per-node parallelism.
    pub parallelism: Option<f64>,
    /// Output.
    pub format: TraceFormatArg,
    /// Sniffer placement.
    pub sniffers: SniffersArg,
    /// Loss probability per packet copy (per row side for CSV).
    pub loss: f64,
    /// Largest random clock offset per node, ns.
    pub clock_offset_ns: f64,
    /// Largest random drift per node, ppm.
    pub drift_ppm: f64,
    /// Seed.
    pub seed: u64,
    /// Trace start, ns since the epoch.
    pub start_epoch_ns: u64,
    /// Gzip the outputs.
    pub gzip: bool,
}

/// How a message trace (`--format csv`) is written; the default is what the generator always
/// wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceOptions {
    /// Ends as `ip:port` endpoints, or as node names (clients as [`CLIENT_NAME`]).
    pub endpoints: EndpointsArg,
    /// Whether the `kind` and `call_id` columns are written.
    pub kind: bool,
    /// Timestamps are truncated to a multiple of this many ns (1: exact).
    pub resolution_ns: u64,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            endpoints: EndpointsArg::IpPort,
            kind: true,
            resolution_ns: 1,
        }
    }
}

/// The name of every client in a message trace with `--endpoints names`, and in its truth.
pub const CLIENT_NAME: &str = "client";

/// `ns` truncated to a multiple of `resolution_ns`, as a tracer with that resolution would
/// give it.
pub fn truncate(ns: u64, resolution_ns: u64) -> u64 {
    if resolution_ns <= 1 {
        ns
    } else {
        ns - ns % resolution_ns
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct Summary {
    /// Files written, with record counts.
    pub files: Vec<(PathBuf, u64)>,
    /// Messages generated.
    pub messages: u64,
    /// Instances generated.
    pub instances: u64,
    /// Distinct true patterns.
    pub patterns: usize,
    /// Measured mean per-node parallelism.
    pub parallelism: f64,
    /// True duration in seconds.
    pub duration_s: f64,
    /// Packet copies the sniffers dropped (loss).
    pub dropped: u64,
}

/// `causeway generate` from the command line.
pub fn run(args: &GenerateArgs) -> Result<()> {
    if let Some(name) = &args.print_preset {
        print!("{}", config::preset(name)?);
        return Ok(());
    }
    let mut system = match (&args.preset, &args.config) {
        _ if args.random => {
            let config = random::system(args.seed);
            let origin = format!("the random system of seed {}", args.seed);
            System::from_config(config, &origin)?
        }
        (Some(name), _) => System::from_toml(config::preset(name)?, name)?,
        (None, Some(path)) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
            System::from_toml(&text, &path.display().to_string())?
        }
        (None, None) => bail!("give --preset NAME, --config FILE or --random"),
    };
    if args.print_system {
        print!("{}", system.config.to_toml());
        return Ok(());
    }
    if let Some(role) = &args.dnat {
        system = system.with_dnat(role)?;
    }
    let Some(dir) = &args.output else {
        bail!("give the output directory with -o DIR")
    };
    if !(0.0..1.0).contains(&args.loss) {
        bail!("--loss must be in [0, 1)");
    }
    let options = Options {
        messages: args.messages,
        parallelism: args.parallelism,
        format: args.format,
        sniffers: args.sniffers,
        loss: args.loss,
        clock_offset_ns: args.clock_offset.map_or(0.0, |d| d.as_nanos() as f64),
        drift_ppm: args.drift_ppm,
        seed: args.seed,
        start_epoch_ns: args.start.saturating_mul(1_000_000_000),
        gzip: args.gzip,
    };
    let resolution_ns = match args.resolution {
        None => 1,
        Some(d) => match u64::try_from(d.as_nanos()) {
            Ok(0) => bail!("--resolution must be at least 1ns"),
            Ok(ns) => ns,
            Err(_) => bail!("--resolution is too large"),
        },
    };
    let trace = TraceOptions {
        endpoints: args.endpoints,
        kind: !args.no_kind,
        resolution_ns,
    };
    if options.format != TraceFormatArg::Csv && trace != TraceOptions::default() {
        bail!("--endpoints, --no-kind and --resolution apply to message traces (--format csv)");
    }
    let summary = generate_with(&system, &options, &trace, dir)?;
    eprintln!(
        "generated {} messages in {} instances of {} patterns over {:.1} s, mean per-node parallelism {:.2}",
        summary.messages,
        summary.instances,
        summary.patterns,
        summary.duration_s,
        summary.parallelism
    );
    for (path, n) in &summary.files {
        eprintln!("  {} ({n} records)", path.display());
    }
    if summary.dropped > 0 {
        eprintln!(
            "  sniffers dropped {} packet copies (--loss)",
            summary.dropped
        );
    }
    Ok(())
}

/// A host's name in the truth: its node's name; clients are `CLIENT` (the patterns'
/// aggregate), or [`CLIENT_NAME`] when the trace names them so.
fn node_name(system: &System, h: Host, names: bool) -> String {
    match h {
        Host::Server(i) => system.nodes[i as usize].name.clone(),
        Host::Client(_) if names => CLIENT_NAME.to_owned(),
        Host::Client(_) => "CLIENT".to_owned(),
    }
}

/// An instance whose truth line waits for its CSV rows.
struct Pending {
    pattern: String,
    messages: Vec<TruthMessage>,
    order: Vec<(usize, Option<usize>)>,
    /// Ids of its messages that have a row coming (the others were lost on both sides).
    expected: Vec<u64>,
}

fn instance_line(
    pattern: &str,
    messages: &[TruthMessage],
    order: &[(usize, Option<usize>)],
    rows: &HashMap<u64, u64>,
) -> Value {
    let list: Vec<Value> = order
        .iter()
        .map(|&(i, parent)| {
            let m = &messages[i];
            let mut line = json!({
                "src": m.src,
                "dst": m.dst,
                "dst_port": m.dst_port,
                "src_endpoint": m.src_endpoint,
                "dst_endpoint": m.dst_endpoint,
                "send_ns": m.send_ns,
                "recv_ns": m.recv_ns,
                "true_send_ns": m.true_send_ns,
                "true_recv_ns": m.true_recv_ns,
                "send_captured": m.captured.send,
                "recv_captured": m.captured.recv,
                "parent": parent,
                "row": rows.get(&m.id),
            });
            if let (Some(kind), Value::Object(o)) = (m.kind, &mut line) {
                o.insert("kind".into(), json!(kind));
            }
            line
        })
        .collect();
    json!({"schema": 1, "kind": "instance", "pattern": pattern, "probability": 1.0, "messages": list})
}

/// Generates `options.messages` messages of `system` into `dir`, message traces written as
/// they always were.
pub fn generate(system: &System, options: &Options, dir: &Path) -> Result<Summary> {
    generate_with(system, options, &TraceOptions::default(), dir)
}

/// Generates `options.messages` messages of `system` into `dir`, a message trace written as
/// `trace` says.
pub fn generate_with(
    system: &System,
    options: &Options,
    trace: &TraceOptions,
    dir: &Path,
) -> Result<Summary> {
    let names_out = trace.endpoints == EndpointsArg::Names;
    if names_out && options.format == TraceFormatArg::Csv {
        if let Some(n) = system.nodes.iter().find(|n| n.name == CLIENT_NAME) {
            bail!(
                "--endpoints names: node {} has the name the trace gives clients; rename it",
                n.name
            );
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let (multiplier, think_scale) = match options.parallelism {
        Some(p) if p < 1.0 => {
            bail!(
                "--parallelism is the mean number of candidate parents of a server's call \
                 (its true parent among them): at least 1"
            )
        }
        Some(p) => {
            let (m, s, got) = sim::calibrate(system, options.seed, p, options.messages);
            if got == 0.0 {
                bail!(
                    "--parallelism: system {} has no server that makes calls, so it has no \
                     parallelism to calibrate (Project 5 counts the candidate parents of each \
                     call a server makes)",
                    system.config.name
                );
            }
            (m, s)
        }
        None => (1, 1.0),
    };
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(options.seed ^ 0x0074_7275_7468);
    let clocks: Vec<Clock> = system
        .nodes
        .iter()
        .map(|n| {
            let offset = if options.clock_offset_ns > 0.0 {
                rng.random_range(-options.clock_offset_ns..=options.clock_offset_ns)
            } else {
                0.0
            };
            let drift = if options.drift_ppm > 0.0 {
                rng.random_range(-options.drift_ppm..=options.drift_ppm)
            } else {
                0.0
            };
            Clock {
                offset_ns: n.clock_offset_ns + offset,
                drift_ppm: n.drift_ppm + drift,
            }
        })
        .collect();
    let clock_of = |h: Host| match h {
        Host::Server(i) => clocks[i as usize],
        Host::Client(_) => Clock::default(),
    };
    let names: Vec<String> = system.nodes.iter().map(|n| n.name.clone()).collect();

    // names file
    let mut names_file = BufWriter::new(File::create(dir.join("names.txt")).context("names.txt")?);
    writeln!(
        names_file,
        "# generated by causeway generate: server addresses, node names and roles"
    )?;
    for n in &system.nodes {
        writeln!(names_file, "{} {} {}", n.ip, n.name, n.role)?;
    }
    names_file.flush()?;

    let mut captures = None;
    let mut csv = None;
    match options.format {
        TraceFormatArg::Pcap | TraceFormatArg::Pcapng => {
            let container = if options.format == TraceFormatArg::Pcap {
                Container::Pcap
            } else {
                Container::PcapNg
            };
            let placement = match options.sniffers {
                SniffersArg::Single => Placement::Single,
                SniffersArg::PerHost => Placement::PerHost,
            };
            captures = Some(Captures::open(
                dir,
                placement,
                &names,
                &clocks,
                container,
                options.gzip,
                options.loss,
                options.start_epoch_ns,
                &mut rng,
            )?);
        }
        TraceFormatArg::Csv => csv = Some(TraceCsv::open(dir, options.gzip, trace.kind)?),
    }
    // Names as a names-only trace gives them, shared by the rows.
    let row_names: Vec<Rc<str>> = names.iter().map(|n| Rc::from(n.as_str())).collect();
    let client_name: Rc<str> = Rc::from(CLIENT_NAME);
    let end_of = |h: Host, endpoint: std::net::SocketAddrV4| {
        if !names_out {
            return End::Endpoint(endpoint);
        }
        match h {
            Host::Server(i) => End::Name(Rc::clone(&row_names[i as usize])),
            Host::Client(_) => End::Name(Rc::clone(&client_name)),
        }
    };
    let truth_path = dir.join("truth.jsonl");
    let mut truth_out = BufWriter::new(
        File::create(&truth_path).with_context(|| format!("{}", truth_path.display()))?,
    );

    // Records of an instance lie after its start, except connection set-up before its first
    // message: keep a margin of a few round trips.
    let max_latency = system
        .config
        .links
        .iter()
        .map(|l| l.network_ms)
        .fold(system.config.network_ms, f64::max)
        * 1e6
        * (1.0 + 4.0 * system.config.network_jitter);
    let margin = 3.0 * max_latency + 1e6;
    let min_offset = clocks.iter().map(|c| c.offset_ns).fold(0.0, f64::min);
    let max_drift = clocks.iter().map(|c| c.drift_ppm.abs()).fold(0.0, f64::max);

    let mut network = Network::new(system, options.seed);
    let mut meter = ParallelismMeter::new(system.nodes.len());
    let mut truth = Truth::default();
    let mut rows: HashMap<u64, u64> = HashMap::new();
    let mut pending: Vec<Pending> = Vec::new();
    let mut message_count = 0u64;
    let mut first_ns = f64::MAX;
    let mut last_ns = 0.0f64;
    let mut instance_count = 0u64;
    let mut simulator = Simulator::new(system, options.seed, multiplier, think_scale);

    while message_count < options.messages {
        let Some(instance) = simulator.next() else {
            break;
        };
        let frontier = instance.start_ns - margin;
        if instance_count % 512 == 0 {
            network.close_idle(frontier, 60e9);
        }
        if let Some(c) = captures.as_mut() {
            c.flush(frontier)?;
        }
        if let Some(t) = csv.as_mut() {
            // Truncation keeps the order: a later row's truncated time is not below the
            // truncated limit.
            let limit = truncate(
                write::absolute(
                    options.start_epoch_ns,
                    frontier * (1.0 - max_drift * 1e-6) + min_offset,
                ),
                trace.resolution_ns,
            );
            t.flush(limit, |id, row| {
                rows.insert(id, row);
            })?;
            write_ready(&mut pending, &mut rows, &mut truth_out, false)?;
        }
        meter.advance(instance.start_ns);
        meter.add(&instance);

        let endpoints = network.carry(&instance);
        if let Some(c) = captures.as_mut() {
            c.add(&network.out, &mut rng);
        }
        network.out.clear();

        let mut messages = truth_messages(
            system,
            &instance,
            &endpoints,
            options.start_epoch_ns,
            &clock_of,
            trace,
        );
        if let Some(c) = captures.as_mut() {
            for tm in &mut messages {
                tm.captured = c.sides.remove(&tm.id).unwrap_or_default();
            }
        }
        let mut expected = Vec::new();
        if let Some(t) = csv.as_mut() {
            for (m, tm) in instance.messages.iter().zip(messages.iter_mut()) {
                let send = (options.loss == 0.0 || rng.random::<f64>() >= options.loss)
                    .then_some(tm.send_ns);
                let recv = (options.loss == 0.0 || rng.random::<f64>() >= options.loss)
                    .then_some(tm.recv_ns);
                tm.captured = Sides {
                    send: send.is_some(),
                    recv: recv.is_some(),
                };
                let Some(ts) = send.or(recv) else { continue };
                expected.push(m.id);
                let call = m.answers.unwrap_or(m.index);
                t.add(Row {
                    ts,
                    id: m.id,
                    send_ns: send,
                    recv_ns: recv,
                    src: end_of(m.from, endpoints[m.index].0),
                    dst: end_of(m.to, endpoints[m.index].1),
                    bytes: m.bytes,
                    kind: trace.kind.then(|| {
                        let kind = if m.answers.is_some() {
                            "return"
                        } else {
                            "call"
                        };
                        (kind, format!("{}.{}", instance.id, call))
                    }),
                });
            }
        }
        let (pattern, order) = truth.add(&messages);
        if csv.is_some() {
            pending.push(Pending {
                pattern,
                messages,
                order,
                expected,
            });
        } else {
            let line = instance_line(&pattern, &messages, &order, &rows);
            serde_json::to_writer(&mut truth_out, &line)?;
            truth_out.write_all(b"\n")?;
        }
        first_ns = first_ns.min(instance.start_ns);
        last_ns = last_ns.max(instance.end_ns());
        message_count += instance.messages.len() as u64;
        instance_count += 1;
    }

    network.close_all(last_ns + 1e6);
    let mut files = Vec::new();
    let mut dropped = 0;
    if let Some(mut c) = captures {
        c.add(&network.out, &mut rng);
        let (sniffed, lost) = c.finish()?;
        dropped = lost;
        files.extend(sniffed.into_iter().map(|s| (s.path, s.packets)));
    }
    if let Some(t) = csv {
        let (path, n) = t.finish(|id, row| {
            rows.insert(id, row);
        })?;
        files.push((path, n));
        write_ready(&mut pending, &mut rows, &mut truth_out, true)?;
    }
    let (parallelism, per_node) = meter.finish();
    let start_ns = write::absolute(options.start_epoch_ns, first_ns.min(last_ns));
    let end_ns = write::absolute(options.start_epoch_ns, last_ns);
    for line in truth.pattern_lines((start_ns, end_ns)) {
        serde_json::to_writer(&mut truth_out, &line)?;
        truth_out.write_all(b"\n")?;
    }
    let clocks_json: serde_json::Map<String, Value> = system
        .nodes
        .iter()
        .zip(clocks.iter())
        .map(|(n, c)| {
            (
                n.name.clone(),
                json!({"offset_ms": c.offset_ns / 1e6, "drift_ppm": c.drift_ppm}),
            )
        })
        .collect();
    let per_node_json: serde_json::Map<String, Value> = system
        .nodes
        .iter()
        .zip(per_node.iter())
        .filter_map(|(n, p)| p.map(|p| (n.name.clone(), json!(p))))
        .collect();
    // Translations that carried traffic: as the `nat_mapping` contract states them.
    let nat_json: Vec<Value> = network
        .translations
        .iter()
        .map(|(public, private)| json!({"public": public.to_string(), "private": private.to_string()}))
        .collect();
    let mut summary_line = json!({
        "schema": 1,
        "kind": "truth",
        "system": system.config.name,
        "messages": message_count,
        "instances": instance_count,
        "patterns": truth.pattern_count(),
        "clients": simulator.clients(),
        "mean_parallelism": parallelism,
        "per_node_parallelism": per_node_json,
        "target_parallelism": options.parallelism,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "format": format!("{:?}", options.format).to_lowercase(),
        "sniffers": format!("{:?}", options.sniffers).to_lowercase(),
        "loss": options.loss,
        "clock_epoch_ns": options.start_epoch_ns,
        "clocks": clocks_json,
        "nat": nat_json,
        "seed": options.seed,
    });
    // Only what differs from the default trace, so that default runs write what they did.
    if let Value::Object(o) = &mut summary_line {
        if names_out {
            o.insert("endpoints".into(), json!("names"));
            o.insert("client_name".into(), json!(CLIENT_NAME));
        }
        if !trace.kind {
            o.insert("kind_column".into(), json!(false));
        }
        if trace.resolution_ns > 1 {
            o.insert("resolution_ns".into(), json!(trace.resolution_ns));
        }
    }
    serde_json::to_writer(&mut truth_out, &summary_line)?;
    truth_out.write_all(b"\n")?;
    truth_out.flush()?;
    files.push((
        truth_path,
        truth.instances + truth.pattern_count() as u64 + 1,
    ));
    Ok(Summary {
        files,
        messages: message_count,
        instances: instance_count,
        patterns: truth.pattern_count(),
        parallelism,
        duration_s: (last_ns - first_ns.min(last_ns)) / 1e9,
        dropped,
    })
}

/// Writes the truth lines of pending instances whose rows are all known, in generation order
/// (so the file lists instances by start time), and forgets their rows. `all` writes every
/// pending instance.
fn write_ready(
    pending: &mut Vec<Pending>,
    rows: &mut HashMap<u64, u64>,
    out: &mut impl Write,
    all: bool,
) -> Result<()> {
    let ready = if all {
        pending.len()
    } else {
        pending
            .iter()
            .take_while(|p| p.expected.iter().all(|id| rows.contains_key(id)))
            .count()
    };
    for p in pending.drain(..ready) {
        serde_json::to_writer(
            &mut *out,
            &instance_line(&p.pattern, &p.messages, &p.order, rows),
        )?;
        out.write_all(b"\n")?;
        for id in &p.expected {
            rows.remove(id);
        }
    }
    Ok(())
}

/// The truth of an instance's messages, named and timed as the trace gives them: with
/// `--endpoints names` each end is its node's name (as `analyze` names a node written by
/// name) with no port, and the message says whether it is a call or a return (the ports no
/// longer tell).
fn truth_messages(
    system: &System,
    instance: &Instance,
    endpoints: &[net::Endpoints],
    start_epoch_ns: u64,
    clock_of: &impl Fn(Host) -> Clock,
    trace: &TraceOptions,
) -> Vec<TruthMessage> {
    let abs = |t: f64| write::absolute(start_epoch_ns, t);
    let local = |t: f64| truncate(abs(t), trace.resolution_ns);
    let names = trace.endpoints == EndpointsArg::Names;
    instance
        .messages
        .iter()
        .map(|m| {
            let (src_ep, dst_ep) = endpoints[m.index];
            let (src, dst) = (
                node_name(system, m.from, names),
                node_name(system, m.to, names),
            );
            let (dst_port, src_endpoint, dst_endpoint, kind) = if names {
                let kind = if m.answers.is_some() {
                    "return"
                } else {
                    "call"
                };
                (None, src.clone(), dst.clone(), Some(kind))
            } else {
                let port = m.answers.is_none().then(|| dst_ep.port());
                (port, src_ep.to_string(), dst_ep.to_string(), None)
            };
            TruthMessage {
                src,
                dst,
                dst_port,
                src_endpoint,
                dst_endpoint,
                send_ns: local(clock_of(m.from).local(m.send_ns)),
                recv_ns: local(clock_of(m.to).local(m.recv_ns)),
                true_send_ns: abs(m.send_ns),
                true_recv_ns: abs(m.recv_ns),
                parent: m.parent,
                id: m.id,
                captured: Sides::default(),
                kind,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn options(messages: u64, seed: u64) -> Options {
        Options {
            messages,
            parallelism: None,
            format: TraceFormatArg::Csv,
            sniffers: SniffersArg::Single,
            loss: 0.05,
            clock_offset_ns: 0.0,
            drift_ppm: 0.0,
            seed,
            start_epoch_ns: 1_767_225_600_000_000_000,
            gzip: false,
        }
    }

    fn read_lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The truth's instance messages and its header.
    fn truth_of(dir: &Path) -> (Vec<Value>, Value) {
        let mut messages = Vec::new();
        let mut header = Value::Null;
        for line in read_lines(&dir.join("truth.jsonl")) {
            let v: Value = serde_json::from_str(&line).unwrap();
            match v["kind"].as_str() {
                Some("instance") => messages.extend(v["messages"].as_array().unwrap().clone()),
                Some("truth") => header = v,
                _ => {}
            }
        }
        (messages, header)
    }

    /// Every truth message with a row agrees with that row of the CSV: ends, and the
    /// timestamps the row has.
    fn check_rows(dir: &Path, rows: &[String], messages: &[Value], columns: usize) {
        let mut with_rows = 0;
        for m in messages {
            let Some(row) = m["row"].as_u64() else {
                continue;
            };
            with_rows += 1;
            let fields: Vec<&str> = rows[row as usize + 1].split(',').collect();
            assert_eq!(fields.len(), columns, "{dir:?}");
            assert_eq!(fields[2], m["src_endpoint"].as_str().unwrap());
            assert_eq!(fields[3], m["dst_endpoint"].as_str().unwrap());
            for (field, side, time) in [
                (0, "send_captured", "send_ns"),
                (1, "recv_captured", "recv_ns"),
            ] {
                if m[side] == true {
                    assert_eq!(fields[field], m[time].as_u64().unwrap().to_string());
                } else {
                    assert_eq!(fields[field], "");
                }
            }
        }
        assert_eq!(with_rows, rows.len() - 1);
    }

    #[test]
    fn names_without_kind_at_1ms() {
        let dir = tempfile::tempdir().unwrap();
        let system = System::from_toml(config::preset("multi-tier").unwrap(), "mt").unwrap();
        let trace = TraceOptions {
            endpoints: EndpointsArg::Names,
            kind: false,
            resolution_ns: 1_000_000,
        };
        generate_with(&system, &options(3_000, 4), &trace, dir.path()).unwrap();
        let rows = read_lines(&dir.path().join("messages.csv"));
        assert_eq!(rows[0], "send_ns,recv_ns,src,dst,bytes");
        let nodes: BTreeSet<&str> = system
            .nodes
            .iter()
            .map(|n| n.name.as_str())
            .chain([CLIENT_NAME])
            .collect();
        let mut previous = 0;
        for row in &rows[1..] {
            let f: Vec<&str> = row.split(',').collect();
            assert!(nodes.contains(f[2]) && nodes.contains(f[3]), "{row}");
            for t in f[..2].iter().filter(|t| !t.is_empty()) {
                assert_eq!(t.parse::<u64>().unwrap() % 1_000_000, 0, "{row}");
            }
            // Rows in order of their first timestamp.
            let first: u64 = f[0].parse().or_else(|_| f[1].parse()).unwrap();
            assert!(first >= previous, "{row}");
            previous = first;
        }
        let (messages, header) = truth_of(dir.path());
        check_rows(dir.path(), &rows, &messages, 5);
        assert_eq!(header["endpoints"], "names");
        assert_eq!(header["kind_column"], false);
        assert_eq!(header["resolution_ns"], 1_000_000);
        for m in &messages {
            assert!(m["dst_port"].is_null());
            assert!(m["kind"] == "call" || m["kind"] == "return");
            assert!(nodes.contains(m["src"].as_str().unwrap()));
        }
        // Patterns name clients as the trace does.
        let truth = std::fs::read_to_string(dir.path().join("truth.jsonl")).unwrap();
        assert!(
            truth.contains(r#""canonical":"client>ws"#),
            "no client>ws pattern"
        );
    }

    #[test]
    fn default_rows_keep_endpoints_and_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let system = System::from_config(random::system(3), "random").unwrap();
        let summary = generate(&system, &options(3_000, 3), dir.path()).unwrap();
        assert!(summary.messages >= 3_000);
        let rows = read_lines(&dir.path().join("messages.csv"));
        assert_eq!(rows[0], "send_ns,recv_ns,src,dst,bytes,kind,call_id");
        for row in &rows[1..] {
            let f: Vec<&str> = row.split(',').collect();
            assert!(f[2].parse::<std::net::SocketAddrV4>().is_ok(), "{row}");
            assert!(f[5] == "call" || f[5] == "return", "{row}");
        }
        let (messages, header) = truth_of(dir.path());
        check_rows(dir.path(), &rows, &messages, 7);
        assert!(header.get("endpoints").is_none() && header.get("kind_column").is_none());
        assert!(messages.iter().all(|m| m.get("kind").is_none()));
        assert_eq!(header["system"], "random-3");
    }

    #[test]
    fn a_node_named_like_the_clients_is_refused() {
        let text = config::preset("children-parallel")
            .unwrap()
            .replace("name = \"B\"", "name = \"client\"");
        let system = System::from_toml(&text, "x").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let trace = TraceOptions {
            endpoints: EndpointsArg::Names,
            ..TraceOptions::default()
        };
        let err = generate_with(&system, &options(100, 1), &trace, dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("the name the trace gives clients"),
            "{err}"
        );
    }
}
