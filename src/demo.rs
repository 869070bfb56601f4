//! `causeway demo`: generate a multi-tier trace in a temporary directory and analyse it.

use std::sync::Arc;

use anyhow::{Context, Result};
use causeway_operators::{FlowConfig, Names};
use causeway_sources::SourceConfig;
use causeway_sources::decode::DecodeOptions;

use crate::analyze::{inputs, run_job};
use crate::cli::{DemoArgs, EngineArgs, SniffersArg, TraceFormatArg};
use crate::engine::{Emit, Job};
use crate::generate::{self, config};

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<()> {
    let temp;
    let dir = match &args.keep {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("causeway-demo-")
                .tempdir()
                .context("temporary directory")?;
            temp.path().to_path_buf()
        }
    };
    let system = config::System::from_toml(config::preset("multi-tier")?, "multi-tier")?;
    let options = generate::Options {
        messages: args.messages,
        parallelism: None,
        format: TraceFormatArg::Pcap,
        sniffers: SniffersArg::Single,
        loss: 0.0,
        clock_offset_ns: 0.0,
        drift_ppm: 0.0,
        seed: 1,
        start_epoch_ns: 1_767_225_600_000_000_000,
        gzip: false,
    };
    let summary = generate::generate(&system, &options, &dir)?;
    eprintln!(
        "demo: generated the multi-tier system of Project 5 Fig. 10 ({} messages, {} instances, {} true patterns) in {}",
        summary.messages,
        summary.instances,
        summary.patterns,
        dir.display()
    );
    let capture = dir.join("mirror.pcap");
    let (specs, origins) = inputs(&[capture.display().to_string()]);
    let names = Names::load(&dir.join("names.txt"))?;
    let job = Job {
        inputs: specs,
        origins,
        names: Arc::new(names),
        source: SourceConfig::default(),
        flows: FlowConfig::default(),
        emit: Emit {
            flows: true,
            messages: true,
            stats: true,
        },
        stats_every: None,
        decode: DecodeOptions::default(),
    };
    let engine = EngineArgs {
        workers: 1,
        processes: 1,
        process: 0,
        hostfile: None,
        lateness: std::time::Duration::from_secs(2),
    };
    run_job(job, &args.output, &engine, 10)
}
