//! Inputs named on the command line: `PATH`, `NAME=PATH` or `-` (stdin), each a pcap, pcapng,
//! message-trace CSV or `ss -tin` log file, optionally gzip-compressed. The format is detected from the
//! content, not the name.

use std::fs::File;
use std::io::{self, Cursor, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::read::MultiGzDecoder;

use crate::decode::DecodeOptions;
use crate::ordered::{Buffered, ClockOrdered, TraceOrder};
use crate::origin::{OriginId, Origins, default_origin_name};
use crate::pcap::{CaptureFormat, FrameReader, OpenError, hex_prefix};
use crate::reader::{ObservationReader, PacketReader, RowReader};
use crate::socketlog::SocketLogReader;
use crate::sorted::Sorted;
use crate::trace::{TraceReader, looks_like_header};

/// One input as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSpec {
    /// The origin it belongs to.
    pub origin: OriginId,
    /// The path, or `-` for stdin.
    pub path: String,
}

impl InputSpec {
    /// Parses `NAME=PATH`, `PATH` or `-`, adding the origin to `origins`. A string with `=`
    /// names an origin only when the part before it has no `/` and the whole string is not an
    /// existing file.
    pub fn parse(arg: &str, origins: &mut Origins) -> InputSpec {
        if let Some((name, path)) = arg.split_once('=') {
            if !name.is_empty()
                && !name.contains('/')
                && !path.is_empty()
                && !Path::new(arg).exists()
            {
                return InputSpec {
                    origin: origins.intern(name),
                    path: path.to_owned(),
                };
            }
        }
        InputSpec {
            origin: origins.intern(&default_origin_name(arg)),
            path: arg.to_owned(),
        }
    }
}

/// Whether `path` (`-` for stdin) is a pipe, a FIFO or a socket: an input that can go quiet
/// without ending, unlike a file.
pub fn is_pipe(path: &str) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let path = if path == "-" { "/dev/stdin" } else { path };
        std::fs::metadata(path).is_ok_and(|m| {
            let t = m.file_type();
            t.is_fifo() || t.is_socket()
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

/// Why an input could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct InputError {
    /// The input's path.
    pub path: String,
    /// What went wrong, in one line.
    pub reason: String,
}

/// What an input holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// Packets (pcap or pcapng).
    Capture,
    /// A message trace.
    MessageTrace,
    /// A directory of socket-call logs.
    SocketLog,
    /// TCP statistics: `ss -tin` output captured repeatedly.
    TcpStats,
}

/// A byte counter shared with a progress display: bytes consumed from the file (compressed
/// bytes for gzip input).
pub type ProgressCounter = Arc<AtomicU64>;

struct Counting<R> {
    inner: R,
    counter: Option<ProgressCounter>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(c) = &self.counter {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(n)
    }
}

type Stream = Box<dyn Read + Send>;

/// Reads up to `n` bytes from the front of `r` and returns them with a stream that yields them
/// again followed by the rest.
fn peek(mut r: Stream, n: usize) -> io::Result<(Vec<u8>, Stream)> {
    let mut head = Vec::with_capacity(n);
    (&mut r).take(n as u64).read_to_end(&mut head)?;
    let replay: Stream = Box::new(Cursor::new(head.clone()).chain(r));
    Ok((head, replay))
}

/// Reads the first line (up to 64 KiB) of `r`, returning it with a stream that yields it again.
fn peek_line(mut r: Stream) -> io::Result<(Vec<u8>, Stream)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while head.len() < 65_536 {
        match r.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => {
                head.push(byte[0]);
                if byte[0] == b'\n' {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let replay: Stream = Box::new(Cursor::new(head.clone()).chain(r));
    Ok((head, replay))
}

/// Opens an input, detects its format and returns a reader of its observations.
///
/// `progress`, when given, counts the bytes consumed from the underlying file.
pub fn open(
    spec: &InputSpec,
    decode: DecodeOptions,
    progress: Option<ProgressCounter>,
) -> Result<(Box<dyn ObservationReader>, InputKind), InputError> {
    open_ordered(spec, decode, progress, &TraceOrder::File)
}

/// [`open`], reading a message trace as `order` says: in the order of its hosts' aligned
/// clocks when the bootstrap planned it so, or through a bounded buffer when it is a pipe
/// ([`crate::ordered`]). `order` is ignored for other formats.
pub fn open_ordered(
    spec: &InputSpec,
    decode: DecodeOptions,
    progress: Option<ProgressCounter>,
    order: &TraceOrder,
) -> Result<(Box<dyn ObservationReader>, InputKind), InputError> {
    if let TraceOrder::Planned(plan) = order {
        let reader = ClockOrdered::open(spec, Arc::clone(plan), progress)?;
        return Ok((Box::new(reader), InputKind::MessageTrace));
    }
    let buffered = matches!(order, TraceOrder::Buffered);
    let fail = |reason: String| InputError {
        path: spec.path.clone(),
        reason,
    };
    let raw: Stream = if spec.path == "-" {
        Box::new(Counting {
            inner: io::stdin(),
            counter: progress,
        })
    } else {
        let path = Path::new(&spec.path);
        if decode.follow_logs && (path.is_dir() || !path.exists()) {
            let reader = SocketLogReader::follow(path, spec.origin, decode.node_granularity)
                .map_err(fail)?;
            return Ok((Box::new(reader), InputKind::SocketLog));
        }
        if path.is_dir() {
            let reader = SocketLogReader::open(path, spec.origin, decode.node_granularity)
                .map_err(|reason| {
                    fail(format!(
                        "{reason}; give a capture directory of `causeway capture`, capture files \
                     (pcap, pcapng) or message traces (csv)"
                    ))
                })?;
            return Ok((Box::new(reader), InputKind::SocketLog));
        }
        let file = File::open(path).map_err(|e| fail(e.to_string()))?;
        Box::new(Counting {
            inner: io::BufReader::with_capacity(64 << 10, file),
            counter: progress,
        })
    };
    open_stream_ordered(raw, spec, decode, buffered)
}

/// Detects the format of an already opened stream (gzip or not) and returns a reader of its
/// observations. `spec` names the input in messages.
pub fn open_stream(
    raw: Box<dyn Read + Send>,
    spec: &InputSpec,
    decode: DecodeOptions,
) -> Result<(Box<dyn ObservationReader>, InputKind), InputError> {
    open_stream_ordered(raw, spec, decode, false)
}

/// [`open_stream`]; a message trace through a bounded reorder buffer when `buffered`.
fn open_stream_ordered(
    raw: Box<dyn Read + Send>,
    spec: &InputSpec,
    decode: DecodeOptions,
    buffered: bool,
) -> Result<(Box<dyn ObservationReader>, InputKind), InputError> {
    let fail = |reason: String| InputError {
        path: spec.path.clone(),
        reason,
    };
    let (head, mut stream) = peek(raw, 4).map_err(|e| fail(e.to_string()))?;
    let mut gzip = false;
    if head.starts_with(&[0x1f, 0x8b]) {
        gzip = true;
        stream = Box::new(MultiGzDecoder::new(stream));
    }
    let (head, stream) =
        peek(stream, 4).map_err(|e| fail(format!("{}{e}", if gzip { "gzip: " } else { "" })))?;
    if head.is_empty() {
        return Err(fail("empty file".into()));
    }
    if CaptureFormat::detect(&head).is_some() {
        let frames = FrameReader::new(stream).map_err(|e| match e {
            OpenError::Io(e) => fail(e.to_string()),
            other => fail(other.to_string()),
        })?;
        let reader = PacketReader::new(frames, spec.origin, &spec.path, decode);
        // A file's packets are put back in timestamp order within a few ms; a pipe's newest
        // must not wait for later ones.
        let file = spec.path != "-" && std::fs::metadata(&spec.path).is_ok_and(|m| m.is_file());
        if file && decode.sort_packets {
            return Ok((Box::new(Sorted::new(Box::new(reader))), InputKind::Capture));
        }
        return Ok((Box::new(reader), InputKind::Capture));
    }
    let (line, stream) = peek_line(stream).map_err(|e| fail(e.to_string()))?;
    if looks_like_header(&line) {
        let rows = TraceReader::new(stream, spec.origin).map_err(|e| fail(e.to_string()))?;
        let reader: Box<dyn ObservationReader> = if buffered {
            Box::new(Buffered::new(rows, spec.origin, &spec.path))
        } else {
            Box::new(RowReader::new(rows, spec.origin, &spec.path))
        };
        return Ok((reader, InputKind::MessageTrace));
    }
    if crate::tcpstats::ss::looks_like_ss_log(&line) {
        let reader = crate::tcpstats::ss::SsReader::new(
            io::BufReader::with_capacity(64 << 10, stream),
            spec.origin,
            &spec.path,
        );
        return Ok((Box::new(reader), InputKind::TcpStats));
    }
    let shown: String = line
        .iter()
        .take(24)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        })
        .collect();
    Err(fail(format!(
        "not a pcap, pcapng, message-trace or `ss -tin` log file{} (starts with {}: \"{}\")",
        if gzip { " inside gzip" } else { "" },
        hex_prefix(&line),
        shown.trim_end()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn name_equals_path() {
        let mut o = Origins::new();
        let a = InputSpec::parse("web1=/tmp/a.pcap", &mut o);
        assert_eq!(o.name(a.origin), "web1");
        assert_eq!(a.path, "/tmp/a.pcap");
        let b = InputSpec::parse("/tmp/x=y/b.pcap", &mut o);
        assert_eq!(b.path, "/tmp/x=y/b.pcap");
        assert_eq!(o.name(b.origin), "b");
        let c = InputSpec::parse("-", &mut o);
        assert_eq!(o.name(c.origin), "stdin");
    }

    #[test]
    fn detects_formats_through_gzip_and_refuses_others() {
        let dir = tempdir();
        let csv = dir.join("t.csv.gz");
        let mut gz =
            flate2::write::GzEncoder::new(File::create(&csv).unwrap(), flate2::Compression::fast());
        gz.write_all(b"send_ns,recv_ns,src,dst\n1,2,a,b\n").unwrap();
        gz.finish().unwrap();
        let mut o = Origins::new();
        let spec = InputSpec::parse(csv.to_str().unwrap(), &mut o);
        let (mut r, kind) = open(&spec, DecodeOptions::default(), None).unwrap();
        assert_eq!(kind, InputKind::MessageTrace);
        let mut out = crate::observation::Batch::default();
        while r.read_batch(10, &mut out) {}
        assert_eq!(out.rows.len(), 1);

        let html = dir.join("page.html");
        std::fs::write(&html, "<html><body>hi</body></html>\n").unwrap();
        let spec = InputSpec::parse(html.to_str().unwrap(), &mut o);
        let err = open(&spec, DecodeOptions::default(), None)
            .err()
            .unwrap()
            .to_string();
        assert!(err.starts_with(html.to_str().unwrap()), "{err}");
        assert!(
            err.contains("not a pcap, pcapng, message-trace or `ss -tin` log file"),
            "{err}"
        );
        assert!(!err.contains('\n'));

        let empty = dir.join("empty.pcap");
        std::fs::write(&empty, "").unwrap();
        let spec = InputSpec::parse(empty.to_str().unwrap(), &mut o);
        assert!(
            open(&spec, DecodeOptions::default(), None)
                .err()
                .unwrap()
                .to_string()
                .contains("empty file")
        );
        std::fs::remove_dir_all(dir).ok();
    }

    fn tempdir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("causeway-input-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
