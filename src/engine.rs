//! The engine: builds the timely dataflow from sources, operators and sinks, and runs it.
//!
//! ```text
//!  source (per worker: its inputs merged in event time, clocks coarsely aligned)
//!    ├─ packets ─┬─ flows ─────────────────────────────────────────────────────┐
//!    │           └─ reconcile.fold ── reconcile ─┬─ messages ── nat ─┐         │
//!    │                                           ├─ facts ────── nat ┤         │
//!    │                                           └─ samples ─┐  (mappings)─────┤
//!    ├─ rows ── rows ── messages ───────────────────┬────────┼──────────┐      │
//!    ├─ calls ── reconcile.calls ── messages ───────┤ (and samples, counts) │      │
//!    │                                             samples ──┤          │      │
//!    │                           clock.bounds ── clock ─(estimates)─ clock.correct ─┬─ deliver
//!    │                                             │                  link ── paths ─┤
//!    │                                             └─(offsets)──────────────────────┤
//!    └─ events (+ reconcile's counts) ── stats ──────────────────────────────────────┘
//! ```
//!
//! Input `i` is read by worker `i mod peers`; records are exchanged by key in the operators
//! that need it. Scale-out is timely's own: worker threads, and processes given by index,
//! count and host file.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use causeway_operators::tcp::correlate::{Correlate, CorrelateConfig, Correlated};
use causeway_operators::tcp::hops::{HopsConfig, TcpHops};
use causeway_operators::tcp::on_patterns::OnPatterns;
use causeway_operators::tcp::packets::TcpPackets;
use causeway_operators::tcp::problem::SnapConfig;
use causeway_operators::tcp::resources::Resources;
use causeway_operators::tcp::snap::{SampleDeltas, Snap};
use causeway_operators::{AlertConfig, AlertRules};
use causeway_operators::{
    Bounds, BuildPaths, CallMessages, CallsConfig, Clock, ClockConfig, CollectStats, Correct,
    FlowConfig, Flows, Fold, FoldConfig, Homes, Link, LinkConfig, Merger, MessageBounds, Names,
    Nat, NatConfig, PathRecord, PathsConfig, Reconcile, ReconcileCalls, ReconcileConfig,
    Reconciled, RowsToMessages, TaskLink, TasksConfig,
};
use causeway_sinks::{Deliver, Record, SinkError, SinkSet};
use causeway_sources::decode::DecodeOptions;
use causeway_sources::input::is_pipe;
use causeway_sources::live::{LiveConfig, LiveReader};
use causeway_sources::piped::Piped;
use causeway_sources::read_ahead::ReadAhead;
use causeway_sources::tcpstats::netlink::{LivePoller, PollerConfig};
use causeway_sources::{
    Alignment, InputSpec, ObservationReader, OriginId, Origins, ProgressCounter, RunControl,
    SourceConfig, SourceEvent, SourceStreams, Time, TraceOrder, read_inputs,
};
use timely::dataflow::ProbeHandle;
use timely::dataflow::operators::vec::{Broadcast, Map};
use timely::dataflow::operators::{Concatenate, Probe};
use timely::{CommunicationConfig, Config, WorkerConfig};

use crate::cli::EngineArgs;

/// Which records a run reports.
#[derive(Clone, Copy, Debug)]
pub struct Emit {
    /// Conversation summaries.
    pub flows: bool,
    /// Messages.
    pub messages: bool,
    /// Per-origin statistics.
    pub stats: bool,
    /// Clock offsets.
    pub clock: bool,
    /// Address translations.
    pub nat: bool,
    /// Path patterns.
    pub patterns: bool,
    /// Path instances.
    pub instances: bool,
    /// TCP problems per connection (SNAP), correlations and alerts.
    pub problems: bool,
    /// Alerts from `--alert` rules over the path patterns.
    pub alerts: bool,
}

impl Emit {
    /// Whether anything needs messages built from packets.
    fn reconcile(&self) -> bool {
        self.messages || self.clock || self.nat || self.paths()
    }

    /// Whether messages are linked into paths.
    fn paths(&self) -> bool {
        self.patterns || self.instances || self.alerts
    }
}

/// Everything a run needs besides its sinks.
#[derive(Clone)]
pub struct Job {
    /// The inputs, in command-line order.
    pub inputs: Vec<InputSpec>,
    /// Their origins.
    pub origins: Origins,
    /// Address-to-node names.
    pub names: Arc<Names>,
    /// Source pacing.
    pub source: SourceConfig,
    /// Conversation timeouts.
    pub flows: FlowConfig,
    /// What to report.
    pub emit: Emit,
    /// Periodic statistics, in event time.
    pub stats_every: Option<Time>,
    /// Decoding options.
    pub decode: DecodeOptions,
    /// Coarse clock offsets of the origins and of the message traces' hosts.
    pub alignment: Arc<Alignment>,
    /// How each input (by position) is read if it is a message trace (in file order when
    /// missing).
    pub trace_orders: Vec<TraceOrder>,
    /// Where sniffers sit.
    pub homes: Arc<Homes>,
    /// Message folding.
    pub fold: FoldConfig,
    /// Reconciliation window.
    pub reconcile: ReconcileConfig,
    /// Reconciliation of socket-call logs.
    pub calls: CallsConfig,
    /// Clock estimation.
    pub clock: ClockConfig,
    /// Address translation.
    pub nat: NatConfig,
    /// Message linking.
    pub link: LinkConfig,
    /// The task linker, when it is the one used (else `link`'s).
    pub tasks: Option<TasksConfig>,
    /// Path instances and patterns.
    pub paths: PathsConfig,
    /// TCP diagnosis.
    pub tcp: TcpJob,
    /// The live TCP-statistics poller, when there is one.
    pub live: Option<LiveJob>,
    /// Live packet sniffers (`analyze --live`), read after the inputs.
    pub sniffers: Vec<SnifferJob>,
    /// Replay pacing and early stops.
    pub control: RunControl,
    /// `--alert` rules.
    pub alerts: AlertConfig,
}

/// TCP diagnosis settings (SNAP).
#[derive(Clone, Debug, Default)]
pub struct TcpJob {
    /// Interval over which packets are summarised per connection, ns.
    pub interval_ns: Time,
    /// Classification thresholds.
    pub snap: SnapConfig,
    /// Correlation across connections.
    pub correlate: CorrelateConfig,
    /// Hosts, links and applications.
    pub resources: Arc<Resources>,
}

/// The live TCP-statistics poller of this host.
#[derive(Clone, Debug)]
pub struct LiveJob {
    /// Its origin (the host's name).
    pub origin: OriginId,
    /// Poll schedule and CPU budget.
    pub config: PollerConfig,
    /// Set by Ctrl-C / SIGTERM: stop polling and finish.
    pub stop: Arc<AtomicBool>,
    /// When to stop on its own.
    pub until: Option<Instant>,
}

/// A live packet sniffer on one interface.
#[derive(Clone, Debug)]
pub struct SnifferJob {
    /// Its origin (the interface's name).
    pub origin: OriginId,
    /// What to capture and how.
    pub config: LiveConfig,
}

/// The timely configuration for `args`.
pub fn timely_config(args: &EngineArgs) -> Result<Config> {
    if args.workers == 0 {
        bail!("--workers must be at least 1");
    }
    if args.processes == 0 || args.process >= args.processes {
        bail!(
            "--process {} is not below --processes {}",
            args.process,
            args.processes
        );
    }
    let communication = if args.processes > 1 {
        let addresses = match &args.hostfile {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
                let hosts: Vec<String> = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect();
                if hosts.len() < args.processes {
                    bail!(
                        "{}: {} addresses for {} processes",
                        path.display(),
                        hosts.len(),
                        args.processes
                    );
                }
                hosts.into_iter().take(args.processes).collect()
            }
            None => (0..args.processes)
                .map(|i| format!("localhost:{}", 2101 + i))
                .collect(),
        };
        CommunicationConfig::Cluster {
            threads: args.workers,
            process: args.process,
            addresses,
            report: false,
            zerocopy: false,
        }
    } else if args.workers > 1 {
        CommunicationConfig::Process(args.workers)
    } else {
        CommunicationConfig::Thread
    };
    Ok(Config {
        communication,
        worker: WorkerConfig::default(),
    })
}

/// Readers opened by the main thread (so that a bad input fails before anything starts),
/// waiting for the worker that reads them.
type ReaderSlots = Arc<Mutex<Vec<Option<Box<dyn ObservationReader>>>>>;

/// Opens the inputs this process's workers read. Input `i` goes to worker `i mod peers`;
/// the live poller and the live sniffers come after the files, in that order.
fn open_inputs(
    job: &Job,
    args: &EngineArgs,
    progress: Option<&ProgressCounter>,
) -> Result<ReaderSlots> {
    let peers = args.workers * args.processes;
    let mut slots = Vec::new();
    for (i, spec) in job.inputs.iter().enumerate() {
        let worker = i % peers;
        if worker / args.workers == args.process {
            let order = job.trace_orders.get(i).cloned().unwrap_or_default();
            let (mut reader, _) =
                causeway_sources::open_ordered(spec, job.decode, progress.cloned(), &order)?;
            if let Some(idle) = job.source.pipe_idle.filter(|_| is_pipe(&spec.path)) {
                reader = Box::new(
                    Piped::spawn(reader, idle)
                        .with_context(|| format!("{}: starting its reading thread", spec.path))?,
                );
            } else if job.source.read_ahead_thread && !is_pipe(&spec.path) {
                reader = Box::new(
                    ReadAhead::spawn(reader, job.source.batch)
                        .with_context(|| format!("{}: starting its reading thread", spec.path))?,
                );
            }
            slots.push(Some(reader));
        } else {
            slots.push(None);
        }
    }
    if let Some(live) = &job.live {
        let worker = job.inputs.len() % peers;
        if worker / args.workers == args.process {
            let poller = LivePoller::new(
                live.origin,
                live.config.clone(),
                Arc::clone(&live.stop),
                live.until,
            )?;
            slots.push(Some(Box::new(poller)));
        } else {
            slots.push(None);
        }
    }
    for sniffer in &job.sniffers {
        let worker = slots.len() % peers;
        if worker / args.workers == args.process {
            let reader = LiveReader::open(sniffer.origin, &sniffer.config, job.decode)?;
            slots.push(Some(Box::new(reader)));
        } else {
            slots.push(None);
        }
    }
    Ok(Arc::new(Mutex::new(slots)))
}

/// Runs `job`, delivering its records to `sinks`.
pub fn run(
    job: Job,
    args: &EngineArgs,
    sinks: SinkSet,
    progress: Option<ProgressCounter>,
) -> Result<()> {
    let config = timely_config(args)?;
    let slots = open_inputs(&job, args, progress.as_ref())?;
    let governor = match args.memory_limit.or_else(crate::governor::default_limit) {
        Some(0) | None => None,
        Some(limit) => crate::governor::Governor::start(limit),
    };
    let sink_set = sinks.clone();
    let job = Arc::new(job);
    let guards = timely::execute(config, move |worker| {
        let index = worker.index();
        let peers = worker.peers();
        let readers: Vec<Box<dyn ObservationReader>> = match slots.lock() {
            Ok(mut slots) => slots
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| i % peers == index)
                .filter_map(|(_, s)| s.take())
                .collect(),
            Err(_) => Vec::new(),
        };
        let probe = ProbeHandle::new();
        let job = Arc::clone(&job);
        let sinks = sink_set.clone();
        worker.dataflow::<Time, _, _>(|scope| {
            let SourceStreams {
                packets,
                rows,
                calls,
                tcp,
                events,
            } = read_inputs(
                scope,
                readers,
                job.source,
                job.control.clone(),
                &job.alignment,
                Some(probe.clone()),
            );
            let mut outputs = Vec::new();
            let mut counts = vec![events.clone()];
            let mut tcp_evidence = None;
            let mut correlated = None;
            if job.emit.problems {
                let t = &job.tcp;
                let evidence = scope.concatenate([
                    tcp.snap_deltas(t.snap.idle_ns),
                    packets.clone().tcp_packets(t.interval_ns, t.snap),
                ]);
                tcp_evidence = Some(evidence.clone());
                outputs.push(evidence.clone().snap(t.snap).map(Record::ConnProblem));
                correlated = Some(evidence.correlate(t.correlate, Arc::clone(&t.resources)));
            }
            let (for_flows, for_messages) = match (job.emit.flows, job.emit.reconcile()) {
                (true, true) => (Some(packets.clone()), Some(packets)),
                (true, false) => (Some(packets), None),
                (false, true) => (None, Some(packets)),
                (false, false) => (None, None),
            };
            if let Some(packets) = for_flows {
                // Each origin's latest packet time, to every worker: conversations still open
                // at the end are judged idle or not by event time alone.
                let ends = events
                    .clone()
                    .flat_map(|e| match e {
                        SourceEvent::Stats { origin, stats } => stats.last_ns.map(|t| (origin, t)),
                        SourceEvent::Warning(_) => None,
                    })
                    .broadcast();
                outputs.push(
                    packets
                        .flows(ends, job.flows, Arc::clone(&job.alignment))
                        .map(Record::Flow),
                );
            }
            if let Some(packets) = for_messages {
                let merger = Merger::new(
                    Arc::clone(&job.alignment),
                    Arc::clone(&job.homes),
                    Arc::clone(&job.names),
                );
                let Reconciled {
                    messages,
                    samples,
                    facts,
                    events: reconciled,
                } = packets
                    .fold(job.fold, Arc::clone(&job.alignment))
                    .reconcile(job.reconcile, merger);
                counts.push(reconciled);
                let (from_rows, row_bounds) =
                    rows.messages(Arc::clone(&job.names)).message_bounds();
                let CallMessages {
                    messages: from_calls,
                    samples: call_samples,
                    events: call_counts,
                    facts: call_facts,
                } = calls.reconcile_calls(
                    job.calls,
                    Arc::clone(&job.names),
                    Arc::clone(&job.alignment),
                );
                counts.push(call_counts);
                // Translations learned from packets and from socket-call logs alike.
                let facts = scope.concatenate([facts, call_facts]);
                let (messages, mappings) = messages.nat(facts, Arc::clone(&job.names), job.nat);
                let samples = scope.concatenate([samples, call_samples]);
                let bounds = samples.delay_bounds(job.clock.lateness_ns);
                let (offsets, estimates) = scope
                    .concatenate([bounds, row_bounds])
                    .clock(job.clock.clone());
                let messages = scope
                    .concatenate([messages, from_rows, from_calls])
                    .correct(
                        estimates,
                        job.clock.lateness_ns,
                        Arc::clone(&job.alignment),
                        job.clock.reference.clone(),
                    );
                if job.emit.paths() {
                    // With `--emit problems`, each message carries its connection's TCP
                    // problems onto its pattern hop.
                    let carried = match tcp_evidence.take() {
                        Some(evidence) => {
                            let wait_ns = 2 * job.tcp.interval_ns;
                            messages.clone().tcp_hops(
                                evidence,
                                HopsConfig {
                                    wait_ns,
                                    keep_ns: wait_ns + job.link.lateness_ns,
                                    snap: job.tcp.snap,
                                },
                                Arc::clone(&job.alignment),
                            )
                        }
                        None => messages.clone(),
                    };
                    let linked = match job.tasks.clone() {
                        Some(tasks) => carried.link_tasks(tasks),
                        None => carried.link(job.link),
                    };
                    let paths = linked.paths(job.paths.clone());
                    let patterns = || {
                        paths.clone().flat_map(|r| match r {
                            PathRecord::Pattern(p) => Some(p),
                            PathRecord::Instance(_) => None,
                        })
                    };
                    if job.emit.alerts {
                        outputs.push(
                            patterns()
                                .alert_rules(job.alerts.clone())
                                .map(Record::Alert),
                        );
                    }
                    // A correlated problem's alert names the pattern hops it slows.
                    correlated = correlated.map(|c| c.on_patterns(patterns()));
                    let (patterns, instances) = (job.emit.patterns, job.emit.instances);
                    outputs.push(paths.flat_map(move |r| match r {
                        PathRecord::Pattern(p) if patterns => Some(Record::Pattern(p)),
                        PathRecord::Instance(i) if instances => Some(Record::Instance(i)),
                        _ => None,
                    }));
                }
                if job.emit.messages {
                    outputs.push(messages.map(|m| Record::Message(*m)));
                }
                if job.emit.clock {
                    outputs.push(offsets.map(Record::ClockOffset));
                }
                if job.emit.nat {
                    outputs.push(mappings.map(Record::NatMapping));
                }
            }
            if let Some(correlated) = correlated {
                outputs.push(correlated.map(|c| match c {
                    Correlated::Correlation(c) => Record::Correlation(*c),
                    Correlated::Alert(a) => Record::Alert(*a),
                }));
            }
            let stats = scope.concatenate(counts).collect_stats(job.stats_every);
            if job.emit.stats {
                outputs.push(stats.map(Record::Stats));
            } else {
                // Still computed: it prints the inputs' warnings.
                outputs.push(stats.flat_map(|_| None));
            }
            scope.concatenate(outputs).probe_with(&probe).deliver(sinks);
        });
    })
    .map_err(|e| anyhow!("cannot start workers: {e}"))?;
    for result in guards.join() {
        result.map_err(|e| anyhow!("worker failed: {e}"))?;
    }
    if let Some(g) = governor {
        g.finish();
    }
    match sinks.error() {
        None | Some(SinkError::Closed) => Ok(()),
        Some(e) => Err(e.into()),
    }
}
