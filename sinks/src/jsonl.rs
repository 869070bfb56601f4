//! The JSON-lines sink: one object of the output contract per line, written as records arrive
//! and flushed whenever the frontier advances, so another program can follow the file.
//!
//! The JSON sink (`--format json`) is the same records as one JSON array, written at the end.

use causeway_sources::{Origins, Time};

use crate::output::Output;
use crate::{Record, Sink, SinkError};

/// Writes each record as one line of JSON.
pub struct JsonLines {
    out: Output,
    origins: Origins,
    line: Vec<u8>,
}

impl JsonLines {
    /// A JSON-lines sink writing to `out`.
    pub fn new(out: Output, origins: Origins) -> Self {
        JsonLines {
            out,
            origins,
            line: Vec::with_capacity(512),
        }
    }
}

impl Sink for JsonLines {
    fn write(&mut self, record: &Record) -> Result<(), SinkError> {
        self.line.clear();
        record
            .write_json(&self.origins, &mut self.line)
            .map_err(|e| SinkError::Encode(e.to_string()))?;
        self.line.push(b'\n');
        self.out.write_all(&self.line)
    }

    fn progress(&mut self, _frontier: Option<Time>) -> Result<(), SinkError> {
        self.out.flush()
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.out.flush()
    }
}

/// Collects every record and writes one pretty-printed JSON array at the end.
pub struct JsonArray {
    out: Output,
    origins: Origins,
    records: Vec<serde_json::Value>,
}

impl JsonArray {
    /// A JSON-array sink writing to `out`.
    pub fn new(out: Output, origins: Origins) -> Self {
        JsonArray {
            out,
            origins,
            records: Vec::new(),
        }
    }
}

impl Sink for JsonArray {
    fn write(&mut self, record: &Record) -> Result<(), SinkError> {
        self.records.push(record.to_json(&self.origins));
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        let mut text = serde_json::to_vec_pretty(&self.records)
            .map_err(|e| SinkError::Encode(e.to_string()))?;
        text.push(b'\n');
        self.records.clear();
        self.out.write_all(&text)?;
        self.out.flush()
    }
}
