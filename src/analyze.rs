//! `causeway analyze` and `causeway stats`: build a job from the command line and run it.

use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use anyhow::Result;
use causeway_operators::{FlowConfig, Names};
use causeway_sinks::output::Output;
use causeway_sinks::{SinkConfig, SinkSet};
use causeway_sources::decode::DecodeOptions;
use causeway_sources::{InputSpec, Origins, SourceConfig};

use crate::cli::{AnalyzeArgs, EmitArg, EngineArgs, OutputArgs, ProgressArg, StatsArgs};
use crate::engine::{self, Emit, Job};
use crate::progress::Progress;

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
pub fn run_job(job: Job, output: &OutputArgs, engine_args: &EngineArgs, top: usize) -> Result<()> {
    let config = SinkConfig {
        format: output.format.into(),
        path: output.output.clone(),
        top,
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

/// `causeway analyze`.
pub fn analyze(args: &AnalyzeArgs) -> Result<()> {
    let (inputs, origins) = inputs(&args.inputs);
    let names = match &args.names {
        Some(path) => Names::load(path)?,
        None => Names::new(),
    };
    let job = Job {
        inputs,
        origins,
        names: Arc::new(names),
        source: SourceConfig {
            lateness_ns: args.engine.lateness.as_nanos() as u64,
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
        },
        stats_every: args.emit_every.map(|d| d.as_nanos() as u64),
        decode: DecodeOptions::default(),
    };
    run_job(job, &args.output, &args.engine, args.top)
}

/// `causeway stats`.
pub fn stats(args: &StatsArgs) -> Result<()> {
    let (inputs, origins) = inputs(&args.inputs);
    let job = Job {
        inputs,
        origins,
        names: Arc::new(Names::new()),
        source: SourceConfig {
            lateness_ns: args.engine.lateness.as_nanos() as u64,
            ..SourceConfig::default()
        },
        flows: FlowConfig::default(),
        emit: Emit {
            flows: true,
            messages: false,
            stats: true,
        },
        stats_every: None,
        // Statistics need no payload hashes.
        decode: DecodeOptions {
            hash_payload: false,
        },
    };
    run_job(job, &args.output, &args.engine, args.top)
}
