//! `causeway tcp`: SNAP's per-connection TCP diagnosis and correlation, from `ss` logs,
//! captures, or the live poller.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Result, anyhow};
use causeway_operators::Rank;
use causeway_sources::tcpstats::netlink::PollerConfig;

use crate::analyze::{counting_job, inputs, run_job, tcp_job};
use crate::cli::TcpArgs;
use crate::engine::{Emit, LiveJob};

/// Runs `causeway tcp`.
pub fn run(args: &TcpArgs) -> Result<()> {
    let (specs, mut origins) = inputs(&args.inputs);
    let tcp = tcp_job(&args.snap)?;
    let live = if args.live {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
            .map_err(|e| anyhow!("cannot handle Ctrl-C: {e}"))?;
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
            stop,
            until: args.duration.map(|d| Instant::now() + d),
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
    };
    let mut job = counting_job(specs, origins, args.engine.lateness.as_nanos() as u64, emit);
    job.tcp = tcp;
    job.live = live;
    run_job(job, &args.output, &args.engine, args.top, Rank::Expected)
}
