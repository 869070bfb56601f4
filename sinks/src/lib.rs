//! Causeway's sinks: the [`Sink`] trait, the built-in sinks, and the `deliver` operator that
//! feeds them.
//!
//! A sink receives [`Record`]s (one per pattern, message, conversation, statistics report...)
//! and writes them somewhere. Configuration ([`SinkConfig`]) is separate from the running sink:
//! sinks are built from it before the dataflow starts, so a bad output path fails at once.
//!
//! Built-in sinks: [`table`] (a summary for people), [`jsonl`] (the JSON-lines output contract,
//! and the single JSON array of `--format json`).

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod deliver;
pub mod jsonl;
pub mod output;
pub mod record;
pub mod table;

use std::path::PathBuf;

use causeway_sources::{Origins, Time};

pub use deliver::{Deliver, SinkSet};
pub use record::{Record, SCHEMA};

/// Why a sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Writing failed.
    #[error("{target}: {source}")]
    Io {
        /// Where it was writing.
        target: String,
        /// The error.
        source: std::io::Error,
    },
    /// The reader went away (a closed pipe): not an error for the user.
    #[error("output closed")]
    Closed,
    /// A record could not be encoded.
    #[error("cannot encode a record: {0}")]
    Encode(String),
}

/// A destination for records.
pub trait Sink: Send {
    /// Receives one record.
    fn write(&mut self, record: &Record) -> Result<(), SinkError>;
    /// Called when the frontier advances to `frontier`: no record at an earlier event time
    /// will follow. A good moment to flush.
    fn progress(&mut self, _frontier: Option<Time>) -> Result<(), SinkError> {
        Ok(())
    }
    /// Called once after the last record.
    fn finish(&mut self) -> Result<(), SinkError>;
}

/// Output format of the CLI's main sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A summary table.
    Table,
    /// One JSON object per line.
    Jsonl,
    /// One JSON array.
    Json,
}

/// What to build: a format and where it writes.
#[derive(Clone, Debug)]
pub struct SinkConfig {
    /// The format.
    pub format: Format,
    /// The file, or `None` for stdout.
    pub path: Option<PathBuf>,
    /// For tables: how many conversations to list.
    pub top: usize,
}

impl SinkConfig {
    /// Builds the sink (creating its output file).
    pub fn build(&self, origins: &Origins) -> Result<Box<dyn Sink>, SinkError> {
        let out = output::Output::open(self.path.as_deref())?;
        Ok(match self.format {
            Format::Table => Box::new(table::Table::new(out, origins.clone(), self.top)),
            Format::Jsonl => Box::new(jsonl::JsonLines::new(out, origins.clone())),
            Format::Json => Box::new(jsonl::JsonArray::new(out, origins.clone())),
        })
    }
}
