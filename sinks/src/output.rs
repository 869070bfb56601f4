//! Where a sink writes: a file or standard output, buffered.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::SinkError;

/// A buffered destination: a file (created or truncated) or stdout.
pub struct Output {
    writer: Box<dyn Write + Send>,
    name: String,
    terminal: bool,
}

impl Output {
    /// Opens `path`, or stdout for `None` or `-`.
    pub fn open(path: Option<&Path>) -> Result<Output, SinkError> {
        match path {
            None => Ok(Output::stdout()),
            Some(p) if p == Path::new("-") => Ok(Output::stdout()),
            Some(p) => {
                let file = File::create(p).map_err(|source| SinkError::Io {
                    target: p.display().to_string(),
                    source,
                })?;
                Ok(Output {
                    writer: Box::new(BufWriter::with_capacity(1 << 16, file)),
                    name: p.display().to_string(),
                    terminal: false,
                })
            }
        }
    }

    /// Writes to an already open file (a duplicate of stdout, say), named `name` in messages.
    pub fn from_file(file: File, name: &str) -> Output {
        Output {
            writer: Box::new(BufWriter::with_capacity(1 << 16, file)),
            name: name.to_owned(),
            terminal: false,
        }
    }

    fn stdout() -> Output {
        Output {
            writer: Box::new(BufWriter::with_capacity(1 << 16, io::stdout())),
            name: "stdout".into(),
            terminal: io::IsTerminal::is_terminal(&io::stdout()),
        }
    }

    /// Whether it is a terminal (a table can then refresh in place).
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// Where it writes, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Maps an I/O error to a sink error naming this output.
    pub fn error(&self, source: io::Error) -> SinkError {
        if source.kind() == io::ErrorKind::BrokenPipe {
            SinkError::Closed
        } else {
            SinkError::Io {
                target: self.name.clone(),
                source,
            }
        }
    }

    /// Writes all of `bytes`.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), SinkError> {
        self.writer.write_all(bytes).map_err(|e| self.error(e))
    }

    /// Flushes buffered output.
    pub fn flush(&mut self) -> Result<(), SinkError> {
        self.writer.flush().map_err(|e| self.error(e))
    }
}

/// A path given as `-o`, `None` meaning stdout.
pub type OutputPath = Option<PathBuf>;
