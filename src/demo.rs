//! `causeway demo`: generate a multi-tier trace in a temporary directory (one capture per
//! server, clocks up to 2 s apart) and analyse it as a user would.

use anyhow::{Context, Result};
use clap::Parser;

use crate::cli::{Cli, Command, DemoArgs, SniffersArg, TraceFormatArg};
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
        sniffers: SniffersArg::PerHost,
        loss: 0.0,
        clock_offset_ns: 2e9,
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
    // The main job, as a user would run it on these files.
    let mut argv: Vec<String> = vec!["causeway".into(), "analyze".into(), "--names".into()];
    argv.push(dir.join("names.txt").display().to_string());
    argv.extend([
        "--format".into(),
        format!("{:?}", args.output.format).to_lowercase(),
    ]);
    argv.extend([
        "--progress".into(),
        format!("{:?}", args.output.progress).to_lowercase(),
    ]);
    if let Some(o) = &args.output.output {
        argv.extend(["-o".into(), o.display().to_string()]);
    }
    let mut captures: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .map(|p| p.display().to_string())
        .collect();
    captures.sort();
    argv.extend(captures);
    let cli = Cli::try_parse_from(&argv).context("demo arguments")?;
    match cli.command {
        Command::Analyze(a) => crate::analyze::analyze(&a),
        _ => Ok(()),
    }
}
