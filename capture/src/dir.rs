//! Log file names (`<hostname>.<pid>.<n>.cwlog`) and listing a capture directory.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::LogError;

/// The file name extension of socket-call logs.
pub const EXTENSION: &str = "cwlog";

/// The parts of a log file name: `<hostname>.<pid>.<image>.cwlog`.
///
/// `image` is 0 for a new process and one more after each `exec`, so the logs of one process
/// sort in the order its images ran. The library replaces `/` in a host name by `_`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LogName {
    /// Host name.
    pub hostname: String,
    /// Process id.
    pub pid: u32,
    /// Image number.
    pub image: u32,
}

impl LogName {
    /// Parses a file name (not a path); `None` when it is not a log name.
    pub fn parse(name: &str) -> Option<LogName> {
        let stem = name.strip_suffix(EXTENSION)?.strip_suffix('.')?;
        let (rest, image) = stem.rsplit_once('.')?;
        let (hostname, pid) = rest.rsplit_once('.')?;
        if hostname.is_empty() || !is_number(pid) || !is_number(image) {
            return None;
        }
        Some(LogName {
            hostname: hostname.to_string(),
            pid: pid.parse().ok()?,
            image: image.parse().ok()?,
        })
    }

    /// The log of the next image of the same process (after an `exec`).
    pub fn next_image(&self) -> LogName {
        LogName {
            image: self.image.saturating_add(1),
            ..self.clone()
        }
    }
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

impl fmt::Display for LogName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}.{}.{EXTENSION}",
            self.hostname, self.pid, self.image
        )
    }
}

/// A log file found in a capture directory.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogFile {
    /// What its name says.
    pub name: LogName,
    /// Its path.
    pub path: PathBuf,
}

/// Lists the logs in a capture directory (not its subdirectories), sorted by host, pid and
/// image. Files whose names are not log names are left out.
pub fn read_dir(dir: impl AsRef<Path>) -> Result<Vec<LogFile>, LogError> {
    let dir = dir.as_ref();
    let open_err = |source| LogError::Open {
        file: dir.display().to_string(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(open_err)? {
        let entry = entry.map_err(open_err)?;
        let Some(name) = entry.file_name().to_str().and_then(LogName::parse) else {
            continue;
        };
        if entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
            out.push(LogFile {
                name,
                path: entry.path(),
            });
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let n = LogName::parse("web1.example.com.4242.3.cwlog").unwrap();
        assert_eq!(n.hostname, "web1.example.com");
        assert_eq!((n.pid, n.image), (4242, 3));
        assert_eq!(n.to_string(), "web1.example.com.4242.3.cwlog");
        assert_eq!(n.next_image().image, 4);
        for bad in [
            "x.cwlog",
            "h.1.cwlog",
            ".1.2.cwlog",
            "h.a.2.cwlog",
            "h.1.2.log",
            "h.1.-2.cwlog",
            "h.1.2cwlog",
        ] {
            assert_eq!(LogName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn lists_sorted() {
        let d = tempfile::tempdir().unwrap();
        for n in [
            "b.1.0.cwlog",
            "a.10.1.cwlog",
            "a.10.0.cwlog",
            "a.9.0.cwlog",
            "notes.txt",
        ] {
            std::fs::write(d.path().join(n), b"").unwrap();
        }
        std::fs::create_dir(d.path().join("c.1.0.cwlog")).unwrap();
        let names: Vec<String> = read_dir(d.path())
            .unwrap()
            .into_iter()
            .map(|f| f.name.to_string())
            .collect();
        assert_eq!(
            names,
            ["a.9.0.cwlog", "a.10.0.cwlog", "a.10.1.cwlog", "b.1.0.cwlog"]
        );
        assert!(read_dir(d.path().join("missing")).is_err());
    }
}
