//! The exec sink (`--sink exec:COMMAND`): the JSON lines of the output contract piped into a
//! user's command (`sh -c COMMAND`), for alert scripts in any language.
//!
//! - **Input**: every record, one JSON object per line on the command's stdin, flushed when
//!   the frontier advances.
//! - **Buffer**: the pipe's (64 KiB on Linux); when it is full the run waits for the command
//!   (policy: block), so a slow script slows the run instead of losing records.
//! - **End**: stdin is closed after the last record and the command is given 10 s to exit. A
//!   command that exits early, or with a failure status, is an error naming it and how many
//!   records it had taken.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use causeway_sources::{Origins, Time};

use crate::jsonl::JsonLines;
use crate::output::Output;
use crate::{Record, Sink, SinkError};

/// Pipes records as JSON lines into a command.
pub struct Exec {
    command: String,
    lines: Option<JsonLines>,
    child: Child,
    written: u64,
}

impl Exec {
    /// Starts `sh -c command`.
    pub fn spawn(command: &str, origins: Origins) -> Result<Exec, SinkError> {
        let target = format!("exec `{command}`");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|source| SinkError::Io {
                target: target.clone(),
                source,
            })?;
        let stdin = child.stdin.take().ok_or_else(|| SinkError::Io {
            target: target.clone(),
            source: std::io::Error::other("no stdin pipe"),
        })?;
        let file = File::from(OwnedFd::from(stdin));
        Ok(Exec {
            command: command.to_owned(),
            lines: Some(JsonLines::new(Output::from_file(file, &target), origins)),
            child,
            written: 0,
        })
    }

    fn exited(&mut self, what: &str) -> SinkError {
        // A command that closed its stdin is usually exiting: give it a moment to say how.
        let deadline = Instant::now() + Duration::from_secs(1);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s.to_string(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => break "still running".to_owned(),
            }
        };
        SinkError::Io {
            target: format!("exec `{}`", self.command),
            source: std::io::Error::other(format!(
                "{what} after {} records ({status})",
                self.written
            )),
        }
    }
}

impl Sink for Exec {
    fn write(&mut self, record: &Record) -> Result<(), SinkError> {
        let Some(lines) = self.lines.as_mut() else {
            return Ok(());
        };
        match lines.write(record) {
            Ok(()) => {
                self.written += 1;
                Ok(())
            }
            Err(SinkError::Closed) => Err(self.exited("the command stopped reading")),
            Err(e) => Err(e),
        }
    }

    fn progress(&mut self, frontier: Option<Time>) -> Result<(), SinkError> {
        match self.lines.as_mut().map(|l| l.progress(frontier)) {
            Some(Err(SinkError::Closed)) => Err(self.exited("the command stopped reading")),
            Some(r) => r,
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if let Some(mut lines) = self.lines.take() {
            match lines.finish() {
                Err(SinkError::Closed) => return Err(self.exited("the command stopped reading")),
                other => other?,
            }
            // Dropping the writer closes the command's stdin.
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(_)) => return Err(self.exited("the command failed")),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Ok(None) => {
                    let _ = self.child.kill();
                    return Err(self.exited("the command did not exit within 10 s of the end"));
                }
                Err(source) => {
                    return Err(SinkError::Io {
                        target: format!("exec `{}`", self.command),
                        source,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_operators::OriginStats;
    use causeway_sources::{OriginId, SourceStats};

    fn stats() -> Record {
        Record::Stats(OriginStats {
            origin: OriginId(0),
            stats: SourceStats::default(),
            last: true,
        })
    }

    #[test]
    fn the_command_receives_every_line() {
        let dir = std::env::temp_dir().join(format!("causeway-exec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("got.jsonl");
        let mut origins = Origins::new();
        origins.intern("s");
        let mut sink = Exec::spawn(&format!("cat > {}", out.display()), origins).unwrap();
        for _ in 0..3 {
            sink.write(&stats()).unwrap();
        }
        sink.progress(Some(1)).unwrap();
        sink.finish().unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(text.lines().all(|l| l.contains("\"kind\":\"stats\"")));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_failing_command_is_an_error_that_names_it() {
        let mut sink = Exec::spawn("exit 3", Origins::new()).unwrap();
        let mut result = Ok(());
        for _ in 0..10_000 {
            result = sink.write(&stats()).and_then(|()| sink.progress(None));
            if result.is_err() {
                break;
            }
        }
        let e = result.and_then(|()| sink.finish()).unwrap_err().to_string();
        assert!(e.starts_with("exec `exit 3`"), "{e}");
        assert!(e.contains("exit status: 3"), "{e}");
    }
}
