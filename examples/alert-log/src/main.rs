//! Causeway's command line plus a custom alert sink: every `alert` record is appended to the
//! file named by `ALERT_LOG` (default `alerts.log`) as `time_ns severity message`.
//!
//! Run: `cargo run -p alert-log -- analyze --alert new-pattern --emit stats trace.csv`

use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

use causeway::sinks::{Record, Sink, SinkError};

/// Appends alerts to a file, one line each.
struct AlertLog {
    out: BufWriter<File>,
    path: String,
}

impl Sink for AlertLog {
    fn write(&mut self, record: &Record) -> Result<(), SinkError> {
        if let Record::Alert(a) = record {
            writeln!(self.out, "{} {} {}", a.time_ns, a.severity, a.message)
                .map_err(|e| self.error(e))?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.out.flush().map_err(|e| self.error(e))
    }
}

impl AlertLog {
    fn error(&self, source: std::io::Error) -> SinkError {
        SinkError::Io {
            target: self.path.clone(),
            source,
        }
    }
}

fn main() -> ExitCode {
    causeway::main_with(Box::new(|_origins| {
        let path = std::env::var("ALERT_LOG").unwrap_or_else(|_| "alerts.log".into());
        let file = File::create(&path).map_err(|e| format!("{path}: {e}"))?;
        let out = BufWriter::new(file);
        Ok(vec![Box::new(AlertLog { out, path }) as Box<dyn Sink>])
    }))
}
