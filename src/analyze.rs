//! `causeway analyze` and `causeway stats`: build a job from the command line and run it.

use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use anyhow::{Result, anyhow, bail};
use causeway_operators::{
    CallsConfig, ClockConfig, DelayEstimate, DelayModel, Domain, FlowConfig, FoldConfig, Homes,
    LinkConfig, Names, NatConfig, PathsConfig, Rank, ReconcileConfig, TasksConfig,
};
use causeway_sinks::metrics::Metrics;
use causeway_sinks::output::{Output, Rotation};
use causeway_sinks::webhook::WebhookOptions;
use causeway_sinks::{Buffered, SinkConfig, SinkSet, SpecOptions};
use causeway_sources::decode::{DecodeOptions, NodeGranularity};
use causeway_sources::live::LiveConfig;
use causeway_sources::live::filter::Filter;
use causeway_sources::{Alignment, InputSpec, OriginId, Origins, RunControl, SourceConfig};

use crate::bootstrap::{SampleSize, bootstrap};
use crate::cli::{
    AggregateArg, AnalyzeArgs, DelayEstimateArg, DelayModelArg, EmitArg, EngineArgs, LinkerArg,
    LiveArgs, NodeGranularityArg, OutputArgs, ProgressArg, RunArgs, SnapArgs, StatsArgs,
};
use crate::engine::{self, Emit, Job, SnifferJob, TcpJob};
use crate::progress::Progress;
use causeway_operators::AlertConfig;
use causeway_operators::paths::build::{CheckpointConfig, PathsCheckpoint};
use causeway_operators::tcp::correlate::CorrelateConfig;
use causeway_operators::tcp::problem::SnapConfig;
use causeway_operators::tcp::resources::Resources;

/// Parses the inputs and names their origins.
pub fn inputs(args: &[String]) -> (Vec<InputSpec>, Origins) {
    let mut origins = Origins::new();
    let specs = args
        .iter()
        .map(|a| InputSpec::parse(a, &mut origins))
        .collect();
    (specs, origins)
}

/// Runs `job` with the main sink of `output`, and a progress bar when asked for.
pub fn run_job(
    job: Job,
    output: &OutputArgs,
    engine_args: &EngineArgs,
    top: usize,
    rank: Rank,
) -> Result<()> {
    let config = SinkConfig {
        format: output.format.into(),
        path: output.output.clone(),
        top,
        rank,
        rotation: rotation(output),
    };
    let mut sinks = Vec::new();
    if engine_args.processes > 1 {
        // timely prints connection progress to stdout while processes connect: keep results
        // on a duplicate of stdout, and send whatever else is written there to stderr.
        let results = std::io::stdout().as_fd().try_clone_to_owned()?;
        rustix::stdio::dup2_stdout(std::io::stderr())?;
        if engine_args.process == 0 && output.output.is_none() {
            let out = Output::from_file(std::fs::File::from(results), "stdout");
            sinks.push(config.build_on(out, &job.origins));
        }
    }
    if engine_args.process == 0 && sinks.is_empty() {
        sinks.push(config.build(&job.origins)?);
    }
    if engine_args.process == 0 {
        sinks.extend(crate::entry::extra_sinks(&job.origins)?);
        let options = SpecOptions {
            webhook: WebhookOptions {
                queue_base: output.webhook_queue.clone(),
                max_entries: output.webhook_queue_max,
                max_bytes: output.webhook_queue_bytes,
                timeout: output.webhook_timeout,
                drain: output.webhook_drain,
                ..WebhookOptions::default()
            },
            rotation: rotation(output),
        };
        for spec in &output.sinks {
            let sink = causeway_sinks::build_spec_with(spec, &job.origins, &options)
                .map_err(|e| anyhow!(e))?;
            sinks.push(Box::new(Buffered::new(
                spec,
                sink,
                output.sink_buffer,
                output.sink_when_full.into(),
            )?));
        }
        if let Some(addr) = &output.metrics {
            let metrics = Metrics::bind(addr, top, rank, job.origins.clone())?;
            eprintln!("causeway: metrics at http://{}/metrics", metrics.addr());
            sinks.push(Box::new(metrics));
        }
    }
    let sinks = SinkSet::new(sinks);
    let show = match output.progress {
        ProgressArg::Always => true,
        ProgressArg::Never => false,
        ProgressArg::Auto => std::io::stderr().is_terminal(),
    };
    let counter = Arc::new(AtomicU64::new(0));
    let _bar = show.then(|| {
        let total = job
            .inputs
            .iter()
            .map(|s| {
                if s.path == "-" {
                    None
                } else {
                    std::fs::metadata(&s.path).ok().map(|m| m.len())
                }
            })
            .sum::<Option<u64>>();
        Progress::start(Arc::clone(&counter), total)
    });
    engine::run(job, engine_args, sinks, show.then_some(counter))
}

/// Rotation of JSON-lines files, when asked for.
fn rotation(output: &OutputArgs) -> Option<Rotation> {
    output.rotate_size.map(|max_bytes| Rotation {
        max_bytes,
        keep: output.rotate_keep,
    })
}

/// Parses `NAME=IP[,IP...]` sniffer declarations.
fn declared_sniffers(
    args: &[String],
    origins: &Origins,
) -> Result<BTreeMap<OriginId, BTreeSet<IpAddr>>> {
    let mut out = BTreeMap::new();
    for arg in args {
        let Some((name, ips)) = arg.split_once('=') else {
            bail!("--sniffer {arg}: expected NAME=IP[,IP...]");
        };
        let Some((id, _)) = origins.iter().find(|(_, o)| o.name == name) else {
            bail!("--sniffer {arg}: no input is named {name} (use NAME=PATH for the input)");
        };
        let mut set = BTreeSet::new();
        for ip in ips.split(',') {
            set.insert(
                ip.trim()
                    .parse::<IpAddr>()
                    .map_err(|e| anyhow!("--sniffer {arg}: `{ip}`: {e}"))?,
            );
        }
        out.insert(id, set);
    }
    Ok(out)
}

/// The live sniffers of `--live`, their origins added to `origins` after the inputs'.
fn sniffers(args: &LiveArgs, origins: &mut Origins) -> Result<Vec<SnifferJob>> {
    let filter = match &args.filter {
        Some(text) => Some(Filter::parse(text)?),
        None => None,
    };
    if args.write.is_some() && args.interfaces.len() > 1 {
        bail!(
            "--write saves the capture of one interface; give one --live (`--live any` captures \
             every interface into one file)"
        );
    }
    let mut out: Vec<SnifferJob> = Vec::new();
    for interface in &args.interfaces {
        if interface.is_empty() {
            bail!("--live needs an interface name, or `any`");
        }
        if origins.iter().any(|(_, o)| &o.name == interface) {
            bail!("--live {interface}: an input or another --live is already named {interface}");
        }
        let origin = origins.intern(interface);
        out.push(SnifferJob {
            origin,
            config: LiveConfig {
                snaplen: args.snaplen.unwrap_or(causeway_sources::live::MAX_SNAPLEN),
                filter: filter.clone(),
                write: args.write.clone(),
                ..LiveConfig::new(interface)
            },
        });
    }
    Ok(out)
}

/// What the task linker waits beyond its lateness: the deadline buckets' lag of before
/// 2026-12-02 (134 ms), kept for message traces, whose rows pass no deadline: without it the
/// task linker's memory on the p20 node-name trace (4.7 M messages) rose through the run,
/// 389 -> 443 MB at the peak, while its own tables stayed flat: what grew is not found
/// (docs/notes/2026-12-01-paths-memory-at-200.md).
const TASKS_EXTRA_LATENESS_NS: u64 = 1 << 27;

/// `causeway analyze`.
pub fn analyze(args: &AnalyzeArgs) -> Result<()> {
    let (inputs, mut origins) = inputs(&args.inputs);
    let sniffers = sniffers(&args.capture, &mut origins)?;
    if !sniffers.is_empty() && args.run.speed.0.is_some() {
        bail!("--speed paces the replay of files; a live capture (--live) runs at its own pace");
    }
    let names = Arc::new(match &args.names {
        Some(path) => Names::load(path)?,
        None => Names::new(),
    });
    // Every input live on this host: one clock, packets (or socket calls) handed over in time
    // order.
    let all_live = (inputs.is_empty() && !sniffers.is_empty()) || args.follow;
    // Followed capture directories alone: the source hands each directory's calls over in
    // time order once they are half a second old, so what waits downstream needs to cover
    // little more than one host's scheduling (`FOLLOW_WINDOW`).
    let follow_only = args.follow && sniffers.is_empty();
    let mut lateness_ns = if follow_only && args.engine.lateness.is_none() {
        crate::cli::FOLLOW_WINDOW
    } else {
        args.engine.lateness(all_live)
    }
    .as_nanos() as u64;
    // A live run reports as soon as it can; a replay links its first seconds twice.
    let mut warmup_ns = args
        .warmup
        .unwrap_or(if all_live {
            std::time::Duration::ZERO
        } else {
            std::time::Duration::from_secs(2)
        })
        .as_nanos() as u64;
    let reconcile_window = args.reconcile_window.unwrap_or(if follow_only {
        crate::cli::FOLLOW_WINDOW
    } else if all_live {
        crate::cli::LIVE_WINDOW
    } else {
        std::time::Duration::from_secs(2)
    });
    let declared = declared_sniffers(&args.sniffer, &origins)?;
    let boot = bootstrap(
        &inputs,
        &origins,
        &declared,
        &names,
        args.clock_reference.as_deref(),
        SampleSize::default(),
    )?;
    for note in &boot.notes {
        tracing::info!("{note}");
    }
    // Message-trace files in time order: the sources wait out their measured disorder, not
    // the default's seconds (at 600,000 messages a second of event time, seconds held back
    // are millions of messages in memory).
    if let Some(disorder) = boot.trace_disorder_ns
        && args.engine.lateness.is_none()
        && sniffers.is_empty()
        && !args.follow
    {
        let learned = disorder.saturating_add(crate::cli::TRACE_MARGIN.as_nanos() as u64);
        if learned < lateness_ns {
            tracing::info!(
                "every input is a message trace in time order (rows at most {:.3} s out of \
                 order): lateness {:.3} s",
                disorder as f64 / 1e9,
                learned as f64 / 1e9
            );
            lateness_ns = learned;
        }
    }
    // A warm start holds its inputs until it ends: on a busy trace, its first seconds are
    // millions of messages. Message traces (whose rate the survey measured) learn from the
    // first `WARMUP_MESSAGES` or so if those come sooner.
    if let Some(rate) = boot
        .trace_rate
        .filter(|_| args.warmup.is_none() && warmup_ns > 0)
    {
        let enough = (crate::cli::WARMUP_MESSAGES as f64 / rate * 1e9) as u64;
        if enough < warmup_ns {
            tracing::info!(
                "message traces at {rate:.0} messages per second of event time: a warm start \
                 of {:.3} s (about {} messages)",
                enough as f64 / 1e9,
                crate::cli::WARMUP_MESSAGES
            );
            warmup_ns = enough.max(1);
        }
    }
    let reference = match &args.clock_reference {
        Some(name) => Some(match origins.iter().find(|(_, o)| &o.name == name) {
            Some((id, _)) => Domain::Origin(id),
            None => Domain::Node(name.as_str().into()),
        }),
        None => boot
            .reference
            .or(sniffers.first().map(|s| s.origin))
            .map(Domain::Origin)
            // Message traces alone: the node their alignment is relative to. Without it the
            // estimator takes the smallest domain with evidence in its window, which floats:
            // a node whose first second only meets larger ones was its own reference, and
            // its timestamps went uncorrected by the alignment's hour.
            .or_else(|| {
                boot.trace_reference
                    .as_deref()
                    .map(|n| Domain::Node(n.into()))
            }),
    };
    let checkpoint = match &args.checkpoint {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow!("--checkpoint {}: {e}", dir.display()))?;
            let path = dir.join("paths.json");
            let restore = PathsCheckpoint::load(&path).map_err(|e| anyhow!(e))?;
            if let Some(c) = &restore {
                eprintln!(
                    "causeway: resuming from {}: {} patterns; input before {} ns is skipped{}",
                    path.display(),
                    c.patterns(),
                    c.resume_ns,
                    if c.complete {
                        ""
                    } else {
                        " (saved during a run: paths in flight then are missed)"
                    }
                );
            }
            Some(CheckpointConfig {
                path,
                every: args.checkpoint_every,
                restore: restore.map(Arc::new),
            })
        }
        None => None,
    };
    let resume_ns = checkpoint
        .as_ref()
        .and_then(|c| c.restore.as_ref())
        .map(|r| r.resume_ns);
    // How far behind its input frontier a message may reach `link`: how far the operators
    // before it emit behind their frontiers (a record the source sends more than the lateness
    // behind its reader's newest is counted late, and comes later still). `reconcile.fold`,
    // `reconcile`, `reconcile.calls` and `nat` hold their capabilities at the oldest message
    // they are building or waiting on, so no message is behind it. (Until 2026-12-02 every
    // message was taken to come the lateness, the reconciliation window, the message gap and
    // the deadlines' granularity late, and `link` and `paths` waited it out again after the
    // frontier had: a live run's results lagged by all of them twice over; socket-call logs
    // kept the window and the granularity until `reconcile.calls` was held, 2026-12-02.)
    // Results do not depend on how fast the frontier moves (live or replayed at any speed).
    let traces_only = boot.message_traces_only && sniffers.is_empty();
    let any_logs = args.follow
        || inputs
            .iter()
            .any(|i| std::path::Path::new(&i.path).is_dir());
    // How long `reconcile` holds a message: none for message-trace rows, which are messages
    // already.
    let reconcile_wait_ns = if traces_only {
        tracing::info!(
            "every input is a message trace: no operator after the sources waits out the \
             reconciliation window"
        );
        0
    } else {
        reconcile_window.as_nanos() as u64
    };
    // What `link` waited for every message before the operators held their capabilities
    // (the lateness, the window, the gap and the deadlines' lag): still how long a message
    // may hold `reconcile.fold` back, and `link`'s keep margin.
    let old_late_ns = lateness_ns
        + reconcile_window.as_nanos() as u64
        + args.message_gap.as_nanos() as u64
        + causeway_operators::conn::DEADLINE_LAG_NS;
    // Message traces keep their sources' lateness (their rows' measured disorder and
    // `TRACE_MARGIN`) here too, as measured with the task linker; not re-measured without.
    let link_late_ns = if traces_only { lateness_ns } else { 0 };
    // `paths` waits for a node's children by their corrected times, which the clock
    // correction moves from the event times the frontier follows by what is left of the
    // hosts' offsets after the coarse alignment: nothing where there is one clock (every
    // input live on this host, or one capture file: one sniffer's; a live run and the
    // replay of what it wrote then give the same paths); else at most the reconciliation
    // window, which must cover it (without it, 8 of the pipeline harness's 150,000 messages
    // were in no instance).
    let one_clock = all_live || (inputs.len() == 1 && sniffers.is_empty() && !any_logs);
    let paths_late_ns = if traces_only {
        lateness_ns
    } else if one_clock {
        0
    } else {
        reconcile_window.as_nanos() as u64
    };
    // A first guess at how far the pipeline holds its results back: the source's lateness
    // and the reconciliation window, each waited out again by `clock`, `link` and `paths`
    // (measured: 11-14 s at the defaults with captures; a message trace waits no
    // reconciliation window). A guess too short costs a stall, after which the source reads
    // further (`SourceConfig::min_ahead_ns`). A warm start holds `link`'s output back by its
    // warm-up too, while it lasts (`SourceConfig::warmup_ns`), and the pipeline holds back
    // more while it starts up: the clock correction's first estimates come up to
    // `LOOK_AHEAD_NS` late, and every learned wait starts at `--max-delay`
    // (`SourceConfig::startup_ns`: a stall then raises the read-ahead only while it lasts).
    let hold_back_ns = 4 * (lateness_ns + reconcile_wait_ns);
    let startup_ns = causeway_operators::clock::LOOK_AHEAD_NS
        .saturating_add(warmup_ns)
        .saturating_add(args.max_delay.as_nanos() as u64)
        .saturating_add(hold_back_ns);
    let read_ahead_ns = args.engine.read_ahead.map_or(
        SourceConfig::default().max_ahead_ns.max(hold_back_ns),
        |d| d.as_nanos() as u64,
    );
    let job = Job {
        inputs,
        origins,
        names: Arc::clone(&names),
        source: SourceConfig {
            resume_ns,
            lateness_ns,
            pipe_idle: (!args.pipe_idle.is_zero()).then_some(args.pipe_idle),
            min_ahead_ns: hold_back_ns,
            warmup_ns,
            startup_ns,
            max_ahead_ns: read_ahead_ns,
            ..SourceConfig::default()
        },
        flows: FlowConfig {
            idle_timeout_ns: args.idle_timeout.as_nanos() as u64,
            ..FlowConfig::default()
        },
        emit: Emit {
            flows: args.emit.contains(&EmitArg::Flows),
            messages: args.emit.contains(&EmitArg::Messages),
            stats: args.emit.contains(&EmitArg::Stats),
            clock: args.emit.contains(&EmitArg::Clock),
            nat: args.emit.contains(&EmitArg::Nat),
            patterns: args.emit.contains(&EmitArg::Patterns),
            instances: args.emit.contains(&EmitArg::Instances),
            problems: args.emit.contains(&EmitArg::Problems),
            alerts: !args.alert.is_empty(),
        },
        stats_every: args.emit_every.map(|d| d.as_nanos() as u64),
        decode: DecodeOptions {
            node_granularity: match args.node_granularity {
                NodeGranularityArg::Process => NodeGranularity::Process,
                NodeGranularityArg::Host => NodeGranularity::Host,
            },
            follow_logs: args.follow,
            ..DecodeOptions::default()
        },
        alignment: Arc::new(boot.alignment),
        trace_orders: boot.trace_orders,
        homes: Arc::new(boot.homes),
        fold: FoldConfig {
            message_gap_ns: args.message_gap.as_nanos() as u64,
            // A message open longer than `link` used to wait for one comes late, as it did
            // then.
            max_hold_ns: old_late_ns,
            ..FoldConfig::default()
        },
        reconcile: ReconcileConfig {
            window_ns: reconcile_window.as_nanos() as u64,
        },
        calls: CallsConfig {
            window_ns: reconcile_window.as_nanos() as u64,
            // Live, a run of sends is ended as soon as a reply could have come.
            idle_ns: if all_live {
                reconcile_window.as_nanos() as u64
            } else {
                CallsConfig::default().idle_ns
            },
            max_hold_ns: old_late_ns,
        },
        clock: ClockConfig {
            window_ns: args.clock_window.as_nanos() as u64,
            every_ns: args.clock_every.as_nanos() as u64,
            reference,
            lateness_ns: link_late_ns,
            anchors: boot.clock_anchors.clone(),
        },
        nat: NatConfig {
            min_evidence_tcp: args.nat_evidence.max(1),
            min_evidence_udp: (args.nat_evidence * 3).max(1),
            window_ns: reconcile_window.as_nanos() as u64,
            ..NatConfig::default()
        },
        link: LinkConfig {
            max_delay_ns: args.max_delay.as_nanos() as u64,
            spontaneous_factor: args.spontaneous,
            estimate: match args.delay_estimate {
                DelayEstimateArg::Smallest => DelayEstimate::Smallest,
                DelayEstimateArg::Weighted => DelayEstimate::Weighted,
            },
            model: match args.delay_model {
                DelayModelArg::Exponential => DelayModel::Exponential,
                DelayModelArg::Learned => DelayModel::Learned,
            },
            lateness_ns: link_late_ns,
            keep_margin_ns: if traces_only {
                lateness_ns
            } else {
                old_late_ns
            },
            match_window_ns: args.match_window.as_nanos() as u64,
            warmup_ns,
            ..LinkConfig::default()
        },
        tasks: match (args.linker, traces_only && boot.named_traces) {
            (LinkerArg::Tasks, _) | (LinkerArg::Auto, true) => Some(TasksConfig {
                model: causeway_operators::paths::tasks::model::ModelConfig {
                    max_delay_ns: args.max_delay.as_nanos() as u64,
                    ..Default::default()
                },
                // See `TASKS_EXTRA_LATENESS_NS`.
                lateness_ns: link_late_ns + TASKS_EXTRA_LATENESS_NS,
                // The task linker learns from its first 20,000 messages, waiting for them
                // up to two minutes of event time (a quiet trace reaches them late).
                warmup_ns: if warmup_ns > 0 {
                    warmup_ns.max(120_000_000_000)
                } else {
                    0
                },
                rhos: args
                    .order_prior
                    .iter()
                    .map(|r| r.clamp(1e-6, 1.0))
                    .collect(),
                ..TasksConfig::default()
            }),
            (LinkerArg::Wap5, _) | (LinkerArg::Auto, false) => None,
        },
        paths: PathsConfig {
            max_delay_ns: args.max_delay.as_nanos() as u64,
            // `link` hands messages on in event-time order, their corrected times at most
            // this much behind.
            lateness_ns: paths_late_ns,
            max_path_ns: args.max_path.as_nanos() as u64,
            try_both: args.try_both,
            window_ns: args.window.as_nanos() as u64,
            every_ns: args
                .emit_every
                .map_or(10_000_000_000, |d| d.as_nanos() as u64)
                .max(1),
            instances: args.emit.contains(&EmitArg::Instances),
            aggregate_roles: args.aggregate == AggregateArg::Roles,
            names: Arc::clone(&names),
            max_patterns: args.max_patterns,
            max_pattern_bytes: usize::try_from(args.pattern_memory).unwrap_or(usize::MAX),
            min_expected: args.min_expected,
            checkpoint: checkpoint.clone(),
        },
        tcp: tcp_job(&args.snap)?,
        live: None,
        sniffers,
        control: run_control(&args.run)?,
        alerts: AlertConfig {
            rules: args.alert.clone(),
            window_ns: args.window.as_nanos() as u64,
        },
    };
    run_job(job, &args.output, &args.engine, args.top, args.rank.into())
}

/// A job that only reads and counts: `stats` and the like.
pub fn counting_job(
    inputs: Vec<InputSpec>,
    origins: Origins,
    engine: &EngineArgs,
    emit: Emit,
) -> Job {
    let defaults = SourceConfig::default();
    Job {
        inputs,
        origins,
        names: Arc::new(Names::new()),
        source: SourceConfig {
            lateness_ns: engine.lateness(false).as_nanos() as u64,
            max_ahead_ns: engine
                .read_ahead
                .map_or(defaults.max_ahead_ns, |d| d.as_nanos() as u64),
            // One worker counts; reading and decoding the files go on beside it where a core
            // is free for them (on one core the thread only adds switching: 0.79 s against
            // 0.63 s).
            read_ahead_thread: std::thread::available_parallelism().is_ok_and(|n| n.get() > 1),
            ..defaults
        },
        flows: FlowConfig::default(),
        emit,
        stats_every: None,
        // Statistics need no payload hashes, nor packets in timestamp order.
        decode: DecodeOptions {
            hash_payload: emit.messages || emit.clock || emit.nat,
            sort_packets: emit.messages || emit.clock || emit.nat,
            ..DecodeOptions::default()
        },
        alignment: Arc::new(Alignment::none()),
        trace_orders: Vec::new(),
        homes: Arc::new(Homes::none()),
        fold: FoldConfig::default(),
        reconcile: ReconcileConfig::default(),
        calls: CallsConfig::default(),
        clock: ClockConfig::default(),
        nat: NatConfig::default(),
        link: LinkConfig::default(),
        tasks: None,
        paths: PathsConfig::default(),
        tcp: TcpJob::default(),
        live: None,
        sniffers: Vec::new(),
        control: RunControl::default(),
        alerts: AlertConfig::default(),
    }
}

/// A flag that Ctrl-C and SIGTERM set: the sources stop reading and the run finishes with
/// what it has. A second signal exits at once (status 130).
pub fn stop_on_signals() -> Result<Arc<std::sync::atomic::AtomicBool>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("causeway: stopping: finishing with what was read (again to quit at once)");
    })
    .map_err(|e| anyhow!("cannot handle Ctrl-C: {e}"))?;
    Ok(stop)
}

/// Replay pacing and early stops from the command line; Ctrl-C and SIGTERM stop reading and
/// let the run finish with what it has.
pub fn run_control(args: &RunArgs) -> Result<RunControl> {
    let stop = stop_on_signals()?;
    Ok(RunControl {
        speed: args.speed.0,
        stop: Some(stop),
        until: args.duration.map(|d| std::time::Instant::now() + d),
        count: args.count,
        ..RunControl::default()
    })
}

/// TCP diagnosis settings from the command line.
pub fn tcp_job(args: &SnapArgs) -> Result<TcpJob> {
    let resources = match &args.topology {
        Some(path) => Resources::load(path)?,
        None => Resources::default(),
    };
    if !(args.alpha > -1.0 && args.alpha < 1.0) {
        bail!("--alpha {} is not between -1 and 1", args.alpha);
    }
    let aggregation_ns = (args.aggregation.as_nanos() as u64).max(1_000_000);
    let correlation_ns = args.correlation_window.as_nanos() as u64;
    if correlation_ns < 2 * aggregation_ns {
        bail!("--correlation-window must be at least two --aggregation intervals");
    }
    let snap = SnapConfig {
        max_queuing_delay_ns: args.max_queuing_delay.as_nanos() as u64,
        delayed_ack_timeout_ns: args.delayed_ack_timeout.as_nanos() as u64 * 9 / 10,
        min_rto_ns: args.min_rto.as_nanos() as u64,
        report_app_limited: !args.no_app_limited,
        ..SnapConfig::default()
    };
    Ok(TcpJob {
        interval_ns: (args.interval.as_nanos() as u64).max(1_000_000),
        snap,
        correlate: CorrelateConfig {
            aggregation_ns,
            correlation_ns,
            alpha: args.alpha,
            top: args.top_sets,
            snap,
            ..CorrelateConfig::default()
        },
        resources: Arc::new(resources),
    })
}

/// `causeway stats`.
pub fn stats(args: &StatsArgs) -> Result<()> {
    let (inputs, origins) = inputs(&args.inputs);
    let emit = Emit {
        flows: true,
        messages: false,
        stats: true,
        clock: false,
        nat: false,
        patterns: false,
        instances: false,
        problems: false,
        alerts: false,
    };
    let mut job = counting_job(inputs, origins, &args.engine, emit);
    job.control = run_control(&args.run)?;
    run_job(job, &args.output, &args.engine, args.top, Rank::Expected)
}
