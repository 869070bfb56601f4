//! `causeway tcp`: SNAP's per-connection TCP diagnosis and correlation, from `ss` logs,
//! captures, or the live poller.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use causeway_operators::Rank;
use causeway_sources::RunControl;
use causeway_sources::tcpstats::netlink::PollerConfig;

use crate::analyze::{counting_job, inputs, run_job, stop_on_signals, tcp_job};
use crate::cli::TcpArgs;
use crate::engine::{Emit, LiveJob};

/// Runs `causeway tcp`.
pub fn run(args: &TcpArgs) -> Result<()> {
    let (specs, mut origins) = inputs(&args.inputs);
    let tcp = tcp_job(&args.snap)?;
    // Ctrl-C and SIGTERM stop the poller and the reading of files alike; the run then
    // reports what it has.
    let stop = stop_on_signals()?;
    let until = args.duration.map(|d| Instant::now() + d);
    let live = if args.live {
        if !(args.cpu_budget > 0.0 && args.cpu_budget <= 100.0) {
            anyhow::bail!(
                "--cpu-budget {} is not a percentage above 0",
                args.cpu_budget
            );
        }
        let budget = args.cpu_budget / 100.0;
        Some(LiveJob {
            origin: origins.intern(&args.host),
            config: PollerConfig {
                mean_interval: args.snap.interval,
                cpu_high: budget,
                cpu_low: budget / 5.0,
                ..PollerConfig::default()
            },
            stop: Arc::clone(&stop),
            until,
        })
    } else {
        None
    };
    let emit = Emit {
        flows: false,
        messages: false,
        stats: true,
        clock: false,
        nat: false,
        patterns: false,
        instances: false,
        problems: true,
        alerts: false,
    };
    let mut job = counting_job(specs, origins, &args.engine, emit);
    job.tcp = tcp;
    job.live = live;
    job.control = RunControl {
        stop: Some(stop),
        until,
        ..RunControl::default()
    };
    run_job(job, &args.output, &args.engine, args.top, Rank::Expected)
}
