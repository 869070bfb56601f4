//! Message traces: CSV records of messages with send and receive timestamps (Project 5 §6.5's
//! abstract trace format), for data from other tracers and from `causeway generate`.
//!
//! The header names the columns, in any order: at least `send_ns`, `recv_ns`, `src` and `dst`;
//! optionally `bytes`, `kind` (`call`, `return`, `request`, `response`, `message`) and
//! `call_id`. Columns it does not know are ignored. An empty timestamp means that side was not
//! observed. `src` and `dst` are `ip:port` endpoints or any other name.
//!
//! A row that cannot be parsed is counted (`bad_row`) with its byte offset and skipped; a row
//! with neither timestamp is counted as `no_timestamp`. Memory: one reusable record buffer.

use std::io::{self, Read};

use crate::observation::{Address, MessageKind, TraceRow};
use crate::origin::OriginId;
use crate::pcap::Damage;
use crate::stats::{SkipReason, SourceStats};

/// The columns every message trace must have.
pub const REQUIRED_COLUMNS: [&str; 4] = ["send_ns", "recv_ns", "src", "dst"];

/// Why a stream could not be opened as a message trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceOpenError {
    /// The header row could not be read.
    #[error("cannot read the header row: {0}")]
    Csv(#[from] csv::Error),
    /// A required column is missing.
    #[error("message trace header lacks column `{missing}` (has: {found})")]
    MissingColumn {
        /// The missing column.
        missing: &'static str,
        /// The header as read.
        found: String,
    },
}

/// Whether the first line of a file looks like a message-trace header.
pub fn looks_like_header(first_line: &[u8]) -> bool {
    let Ok(line) = std::str::from_utf8(first_line) else {
        return false;
    };
    let cols: Vec<String> = line
        .trim()
        .split(',')
        .map(|c| c.trim().trim_matches('"').to_ascii_lowercase())
        .collect();
    REQUIRED_COLUMNS.iter().all(|r| cols.iter().any(|c| c == r))
}

struct Columns {
    send: usize,
    recv: usize,
    src: usize,
    dst: usize,
    bytes: Option<usize>,
    kind: Option<usize>,
    call_id: Option<usize>,
}

/// Streaming reader of message-trace rows.
pub struct TraceReader<R: Read> {
    csv: csv::Reader<R>,
    cols: Columns,
    record: csv::ByteRecord,
    row: u64,
    origin: OriginId,
}

impl<R: Read> TraceReader<R> {
    /// Reads the header of the trace in `src`.
    pub fn new(src: R, origin: OriginId) -> Result<Self, TraceOpenError> {
        let mut csv = csv::ReaderBuilder::new()
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(src);
        let header: Vec<String> = csv
            .headers()?
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        let find = |name: &str| header.iter().position(|h| h == name);
        let need = |name: &'static str| {
            find(name).ok_or_else(|| TraceOpenError::MissingColumn {
                missing: name,
                found: header.join(","),
            })
        };
        let cols = Columns {
            send: need("send_ns")?,
            recv: need("recv_ns")?,
            src: need("src")?,
            dst: need("dst")?,
            bytes: find("bytes"),
            kind: find("kind"),
            call_id: find("call_id"),
        };
        Ok(TraceReader {
            csv,
            cols,
            record: csv::ByteRecord::new(),
            row: 0,
            origin,
        })
    }

    /// Byte offset of the next row in the stream.
    pub fn position(&self) -> u64 {
        self.csv.position().byte()
    }

    /// The next row that parses, or `None` at the end. Rows that do not parse are counted in
    /// `stats` and described in `damage`.
    pub fn next_row(
        &mut self,
        stats: &mut SourceStats,
        damage: &mut Vec<Damage>,
    ) -> io::Result<Option<TraceRow>> {
        loop {
            let offset = self.csv.position().byte();
            match self.csv.read_byte_record(&mut self.record) {
                Ok(false) => return Ok(None),
                Ok(true) => {}
                Err(e) => {
                    if let csv::ErrorKind::Io(_) = e.kind() {
                        return Err(io::Error::other(e.to_string()));
                    }
                    stats.record(0, 0);
                    stats.skip(SkipReason::BadRow);
                    damage.push(Damage {
                        offset,
                        reason: SkipReason::BadRow,
                        message: e.to_string(),
                    });
                    self.row += 1;
                    continue;
                }
            }
            let row = self.row;
            self.row += 1;
            let len = self.csv.position().byte().saturating_sub(offset);
            match self.parse(row) {
                Ok(r) => {
                    let Some(ts) = r.send_ns.or(r.recv_ns) else {
                        stats.records += 1;
                        stats.bytes += len;
                        stats.skip(SkipReason::NoTimestamp);
                        continue;
                    };
                    stats.record(ts, len);
                    return Ok(Some(r));
                }
                Err(message) => {
                    stats.records += 1;
                    stats.bytes += len;
                    stats.skip(SkipReason::BadRow);
                    damage.push(Damage {
                        offset,
                        reason: SkipReason::BadRow,
                        message: format!("data row {row}: {message}"),
                    });
                }
            }
        }
    }

    fn parse(&self, row: u64) -> Result<TraceRow, String> {
        let field = |i: usize| -> Result<&str, String> {
            let raw = self.record.get(i).ok_or_else(|| {
                format!("has {} fields, column {} missing", self.record.len(), i + 1)
            })?;
            std::str::from_utf8(raw).map_err(|_| format!("field {} is not UTF-8", i + 1))
        };
        let ts = |i: usize, name: &str| -> Result<Option<u64>, String> {
            let s = field(i)?;
            if s.is_empty() {
                return Ok(None);
            }
            s.parse::<u64>()
                .map(Some)
                .map_err(|_| format!("{name} `{s}` is not a non-negative integer"))
        };
        let name = |i: usize, col: &str| -> Result<Address, String> {
            let s = field(i)?;
            if s.is_empty() {
                return Err(format!("{col} is empty"));
            }
            Ok(Address::parse(s))
        };
        let bytes = match self.cols.bytes {
            Some(i) => match field(i)? {
                "" => None,
                s => Some(
                    s.parse::<u64>()
                        .map_err(|_| format!("bytes `{s}` is not a non-negative integer"))?,
                ),
            },
            None => None,
        };
        let kind = match self.cols.kind {
            Some(i) => match field(i)? {
                "" => None,
                s => Some(MessageKind::parse(s).ok_or_else(|| {
                    format!("kind `{s}` is not call, return, request, response or message")
                })?),
            },
            None => None,
        };
        let call_id = match self.cols.call_id {
            Some(i) => Some(field(i)?).filter(|s| !s.is_empty()).map(str::to_owned),
            None => None,
        };
        Ok(TraceRow {
            origin: self.origin,
            row,
            send_ns: ts(self.cols.send, "send_ns")?,
            recv_ns: ts(self.cols.recv, "recv_ns")?,
            src: name(self.cols.src, "src")?,
            dst: name(self.cols.dst, "dst")?,
            bytes,
            kind,
            call_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (Vec<TraceRow>, SourceStats, Vec<Damage>) {
        let mut r = TraceReader::new(text.as_bytes(), OriginId(1)).unwrap();
        let (mut stats, mut damage, mut rows) = (SourceStats::default(), Vec::new(), Vec::new());
        while let Some(row) = r.next_row(&mut stats, &mut damage).unwrap() {
            rows.push(row);
        }
        (rows, stats, damage)
    }

    #[test]
    fn columns_in_any_order_unknown_ignored_empty_means_unobserved() {
        let (rows, stats, damage) = read(
            "dst,extra,src,recv_ns,send_ns,kind,bytes\n\
             10.0.0.2:80,x,10.0.0.1:4000,150,100,call,300\n\
             web,y,app,,200,,\n",
        );
        assert!(damage.is_empty(), "{damage:?}");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].send_ns, Some(100));
        assert_eq!(rows[0].recv_ns, Some(150));
        assert_eq!(rows[0].kind, Some(MessageKind::Call));
        assert_eq!(rows[0].bytes, Some(300));
        assert_eq!(rows[1].recv_ns, None);
        assert_eq!(rows[1].src, Address::Name("app".into()));
        assert_eq!(rows[1].row, 1);
        assert_eq!(stats.records, 2);
        assert_eq!((stats.first_ns, stats.last_ns), (Some(100), Some(200)));
    }

    #[test]
    fn bad_rows_are_counted_with_offsets() {
        let text = "send_ns,recv_ns,src,dst\n1,2,a,b\nxx,2,a,b\n,,a,b\n3,4,a\n5,6,a,b\n";
        let (rows, stats, damage) = read(text);
        assert_eq!(rows.iter().map(|r| r.row).collect::<Vec<_>>(), vec![0, 4]);
        assert_eq!(stats.skipped(SkipReason::BadRow), 2);
        assert_eq!(stats.skipped(SkipReason::NoTimestamp), 1);
        assert_eq!(damage[0].offset, text.find("xx").unwrap() as u64);
        assert!(
            damage[0].message.contains("send_ns `xx`"),
            "{}",
            damage[0].message
        );
    }

    #[test]
    fn missing_column_is_named() {
        let err = TraceReader::new(&b"send_ns,src,dst\n"[..], OriginId(0))
            .err()
            .unwrap();
        assert!(err.to_string().contains("`recv_ns`"), "{err}");
        assert!(looks_like_header(b"send_ns,recv_ns,src,dst,bytes"));
        assert!(!looks_like_header(b"time,from,to"));
    }
}
