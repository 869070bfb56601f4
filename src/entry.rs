//! The program's entry point, for the `causeway` binary and for programs that embed
//! Causeway with sinks of their own ([`main_with`]).

use std::process::ExitCode;
use std::sync::OnceLock;

use causeway_sinks::Sink;
use causeway_sources::Origins;
use clap::Parser;

use crate::cli::{Cli, Command};

/// Builds a program's own sinks for a run, given the run's origins (inputs); an error ends
/// the run before it starts, with the message on stderr.
pub type SinkFactory = Box<dyn Fn(&Origins) -> Result<Vec<Box<dyn Sink>>, String> + Send + Sync>;

static EXTRA_SINKS: OnceLock<SinkFactory> = OnceLock::new();

/// The sinks a program embedding Causeway added with [`main_with`], for this run.
pub(crate) fn extra_sinks(origins: &Origins) -> anyhow::Result<Vec<Box<dyn Sink>>> {
    match EXTRA_SINKS.get() {
        Some(f) => f(origins).map_err(|e| anyhow::anyhow!(e)),
        None => Ok(Vec::new()),
    }
}

/// Runs Causeway's command line (`causeway analyze ...`, `tcp`, `stats`, ...) with
/// `sinks` receiving every record of `analyze`, `tcp` and `stats` besides the sinks the
/// command line names: the extension point for sinks written in Rust. See
/// `examples/alert-log` for a custom alert sink in a few lines.
pub fn main_with(sinks: SinkFactory) -> ExitCode {
    let _ = EXTRA_SINKS.set(sinks);
    main()
}

/// Runs Causeway's command line.
pub fn main() -> ExitCode {
    let args = match crate::settings::expand(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("causeway: error: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(args);
    let level = if cli.quiet {
        "error"
    } else {
        match cli.verbose {
            0 => "warn",
            1 => "info",
            _ => "debug",
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAUSEWAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(Plain)
        .init();
    let result = match &cli.command {
        Command::Analyze(a) => crate::analyze::analyze(a),
        Command::Stats(a) => crate::analyze::stats(a),
        Command::Generate(a) => crate::generate::run(a),
        Command::Demo(a) => crate::demo::run(a),
        Command::Score(a) => crate::score::run(a),
        Command::Tcp(a) => crate::tcp::run(a),
        Command::Capture(a) => match crate::capture::run(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("causeway: error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// Log lines as `causeway: warning: message`, like the error line, without colour codes or
/// timestamps: stderr is often a file or another program.
struct Plain;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Plain
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        write!(writer, "causeway: {level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ").replace('\n', " ")
}
