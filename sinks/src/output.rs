//! Where a sink writes: a file or standard output, buffered; a file may rotate by size.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::SinkError;

/// A buffered destination: a file (created or truncated) or stdout.
pub struct Output {
    writer: Box<dyn Write + Send>,
    name: String,
    terminal: bool,
    rotation: Option<Rotation>,
    rotating: Option<Rotating>,
}

/// Size-based rotation of a file output: before a write would take the file past `max_bytes`,
/// `PATH` becomes `PATH.1` (`PATH.1` becomes `PATH.2`, and so on; the oldest beyond `keep`
/// is deleted) and a new `PATH` is started. Writes are never split, so each file holds whole
/// records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// Largest size of one file, bytes (a single larger write still goes whole into a file).
    pub max_bytes: u64,
    /// Rotated files kept besides the current one.
    pub keep: usize,
}

struct Rotating {
    path: PathBuf,
    written: u64,
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
                    rotation: None,
                    rotating: None,
                })
            }
        }
    }

    /// Opens `path` like [`Output::open`]; a file rotates as `rotation` says (stdout does
    /// not rotate).
    pub fn open_rotating(
        path: Option<&Path>,
        rotation: Option<Rotation>,
    ) -> Result<Output, SinkError> {
        let mut out = Output::open(path)?;
        if let (Some(p), Some(r)) = (path, rotation) {
            if p != Path::new("-") {
                out.rotation = Some(r);
                out.rotating = Some(Rotating {
                    path: p.to_owned(),
                    written: 0,
                });
            }
        }
        Ok(out)
    }

    /// Starts a new file if `len` more bytes would pass the size limit.
    fn rotate_for(&mut self, len: usize) -> Result<(), SinkError> {
        let (Some(r), Some(state)) = (&self.rotation, &mut self.rotating) else {
            return Ok(());
        };
        if state.written == 0 || state.written + len as u64 <= r.max_bytes {
            state.written += len as u64;
            return Ok(());
        }
        let path = state.path.clone();
        let keep = r.keep;
        self.flush()?;
        let numbered = |i: usize| {
            let mut p = path.clone().into_os_string();
            p.push(format!(".{i}"));
            PathBuf::from(p)
        };
        let io = |source: io::Error| SinkError::Io {
            target: path.display().to_string(),
            source,
        };
        if keep == 0 {
            std::fs::remove_file(&path).map_err(io)?;
        } else {
            let _ = std::fs::remove_file(numbered(keep));
            for i in (1..keep).rev() {
                if numbered(i).exists() {
                    std::fs::rename(numbered(i), numbered(i + 1)).map_err(io)?;
                }
            }
            std::fs::rename(&path, numbered(1)).map_err(io)?;
        }
        let file = File::create(&path).map_err(io)?;
        self.writer = Box::new(BufWriter::with_capacity(1 << 16, file));
        if let Some(state) = &mut self.rotating {
            state.written = len as u64;
        }
        Ok(())
    }

    /// Writes to an already open file (a duplicate of stdout, say), named `name` in messages.
    pub fn from_file(file: File, name: &str) -> Output {
        Output {
            writer: Box::new(BufWriter::with_capacity(1 << 16, file)),
            name: name.to_owned(),
            terminal: false,
            rotation: None,
            rotating: None,
        }
    }

    fn stdout() -> Output {
        Output {
            writer: Box::new(BufWriter::with_capacity(1 << 16, io::stdout())),
            name: "stdout".into(),
            terminal: io::IsTerminal::is_terminal(&io::stdout()),
            rotation: None,
            rotating: None,
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
        self.rotate_for(bytes.len())?;
        self.writer.write_all(bytes).map_err(|e| self.error(e))
    }

    /// Flushes buffered output.
    pub fn flush(&mut self) -> Result<(), SinkError> {
        self.writer.flush().map_err(|e| self.error(e))
    }
}

/// A path given as `-o`, `None` meaning stdout.
pub type OutputPath = Option<PathBuf>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_keeps_whole_lines_and_the_newest_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let rotation = Rotation {
            max_bytes: 100,
            keep: 2,
        };
        let mut out = Output::open_rotating(Some(&path), Some(rotation)).unwrap();
        for i in 0..40 {
            out.write_all(format!("{{\"n\": {i:04}, \"pad\": \"xxxxxxxxxx\"}}\n").as_bytes())
                .unwrap();
        }
        out.flush().unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        let current = read(&path);
        let one = read(&dir.path().join("out.jsonl.1"));
        let two = read(&dir.path().join("out.jsonl.2"));
        assert!(!dir.path().join("out.jsonl.3").exists());
        for text in [&current, &one, &two] {
            assert!(text.len() <= 100 && text.ends_with('\n'), "{text:?}");
        }
        // Newest last, no line lost between the kept files.
        let lines: Vec<&str> = two
            .lines()
            .chain(one.lines())
            .chain(current.lines())
            .collect();
        assert!(lines.last().unwrap().contains("0039"));
        for w in lines.windows(2) {
            let n = |l: &str| l[6..10].parse::<u32>().unwrap();
            assert_eq!(n(w[0]) + 1, n(w[1]));
        }
    }
}
