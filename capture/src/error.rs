//! Errors, one type per layer: [`WireError`] for bytes in memory (offsets relative to the
//! buffer), [`LogError`] for a log file (file name and absolute offsets), [`EncodeError`] for
//! values that the format cannot hold.

use std::fmt;

use thiserror::Error;

/// What is wrong with some bytes, and where: `offset` and `length` are the byte range of the
/// offending field inside the buffer that was checked.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{kind} (bytes {offset}..{})", offset + length)]
pub struct WireError {
    /// Offset of the offending field in the buffer.
    pub offset: usize,
    /// Length of the offending field (or of what was present, for overruns).
    pub length: usize,
    /// What is wrong.
    pub kind: WireErrorKind,
}

/// The kinds of [`WireError`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireErrorKind {
    /// The buffer ends before the structure does.
    Truncated {
        /// Bytes the structure needs.
        needed: usize,
        /// Bytes present.
        present: usize,
    },
    /// The file does not start with `CWLOG`.
    BadMagic([u8; 5]),
    /// A version this reader does not know.
    UnsupportedVersion(u16),
    /// The header length field is smaller than the fixed header, or over 1 MiB.
    BadHeaderLength(u32),
    /// A record length smaller than the fixed record header.
    BadRecordLength(u16),
    /// A syscall code this reader does not know.
    UnknownSyscall(u8),
    /// An origin code (file header) this reader does not know.
    UnknownOrigin(u8),
    /// An endpoint tag this reader does not know.
    UnknownEndpointTag(u8),
    /// A UNIX path length over 108.
    BadUnixPathLength(u8),
    /// A field runs past the end of its record (or header).
    FieldOverrun {
        /// The field.
        field: &'static str,
        /// Bytes the field needs from its start.
        needed: usize,
        /// Bytes left in the record from its start.
        present: usize,
    },
    /// Bytes left after the last field of a record that has no extension flag.
    TrailingBytes(usize),
    /// A known extension field with the wrong length.
    BadExtensionLength {
        /// Extension type.
        ext: u8,
        /// Its length in the record.
        len: u16,
    },
    /// A known extension field that appears twice.
    DuplicateExtension(u8),
}

impl fmt::Display for WireErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireErrorKind::Truncated { needed, present } => {
                write!(f, "truncated: {present} of {needed} bytes present")
            }
            WireErrorKind::BadMagic(m) => {
                write!(f, "not a causeway socket-call log (magic {m:02x?})")
            }
            WireErrorKind::UnsupportedVersion(v) => write!(
                f,
                "log version {v} is not supported (this reader knows version {})",
                crate::header::VERSION
            ),
            WireErrorKind::BadHeaderLength(l) => write!(
                f,
                "header length {l} is outside {}..={}",
                crate::header::MIN_LEN,
                crate::header::MAX_LEN
            ),
            WireErrorKind::BadRecordLength(l) => write!(
                f,
                "record length {l} is smaller than the {}-byte record header",
                crate::record::HEADER_LEN
            ),
            WireErrorKind::UnknownSyscall(c) => write!(f, "unknown syscall code {c}"),
            WireErrorKind::UnknownOrigin(c) => write!(f, "unknown origin code {c}"),
            WireErrorKind::UnknownEndpointTag(t) => write!(f, "unknown endpoint tag {t}"),
            WireErrorKind::BadUnixPathLength(l) => {
                write!(f, "UNIX path length {l} is over 108")
            }
            WireErrorKind::FieldOverrun {
                field,
                needed,
                present,
            } => write!(
                f,
                "field {field} runs past the end: needs {needed} bytes, {present} left"
            ),
            WireErrorKind::TrailingBytes(n) => {
                write!(f, "{n} bytes after the last field of the record")
            }
            WireErrorKind::BadExtensionLength { ext, len } => {
                write!(f, "extension field {ext} has the wrong length {len}")
            }
            WireErrorKind::DuplicateExtension(e) => {
                write!(f, "extension field {e} appears twice")
            }
        }
    }
}

impl WireError {
    pub(crate) fn truncated(offset: usize, needed: usize, present: usize) -> WireError {
        WireError {
            offset,
            length: present,
            kind: WireErrorKind::Truncated { needed, present },
        }
    }
}

/// A value the format cannot hold.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum EncodeError {
    /// A variable-length field is longer than the format allows.
    #[error("{what} is {len} bytes long, the format holds at most {max}")]
    TooLong {
        /// The field.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The most the format holds.
        max: usize,
    },
}

/// A problem reading a log file: which file, where, and what. Once a [`crate::Reader`] has
/// returned one, it returns no more records.
#[derive(Debug, Error)]
pub enum LogError {
    /// The file or directory could not be opened or listed.
    #[error("{file}: {source}")]
    Open {
        /// The file or directory.
        file: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A read failed.
    #[error("{file}: read error at offset {offset}: {source}")]
    Io {
        /// The file.
        file: String,
        /// Offset of the read.
        offset: u64,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The log ends inside the file header or a record: the writer was killed mid-write, or the
    /// file was cut. Everything before `offset` was read.
    #[error("{file}: truncated at offset {offset}: {present} bytes present{}",
        match needed { Some(n) => format!(", the {what} needs {n}"), None => String::new() })]
    Truncated {
        /// The file.
        file: String,
        /// Offset of the damaged header or record.
        offset: u64,
        /// Bytes present from `offset` to the end of the file.
        present: u64,
        /// Length the header or record should have, when the bytes present say.
        needed: Option<u64>,
        /// `"header"` or `"record"`.
        what: &'static str,
    },
    /// The bytes at `offset` are not a valid header or record.
    #[error("{file}: offset {offset}: {kind}")]
    Malformed {
        /// The file.
        file: String,
        /// Absolute offset of the offending field.
        offset: u64,
        /// Length of the offending field.
        length: usize,
        /// What is wrong.
        kind: WireErrorKind,
    },
}

impl LogError {
    /// The file (or directory) the error concerns.
    pub fn file(&self) -> &str {
        match self {
            LogError::Open { file, .. }
            | LogError::Io { file, .. }
            | LogError::Truncated { file, .. }
            | LogError::Malformed { file, .. } => file,
        }
    }

    /// The byte offset the error concerns, when there is one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            LogError::Open { .. } => None,
            LogError::Io { offset, .. }
            | LogError::Truncated { offset, .. }
            | LogError::Malformed { offset, .. } => Some(*offset),
        }
    }
}
