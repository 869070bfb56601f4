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

use crate::observation::{Address, Endpoint, MessageKind, TraceRow};
use crate::origin::OriginId;
use crate::pcap::Damage;
use crate::records::Records;
use crate::stats::{SkipReason, SourceStats};

/// The columns every message trace must have.
pub const REQUIRED_COLUMNS: [&str; 4] = ["send_ns", "recv_ns", "src", "dst"];

/// Why a stream could not be opened as a message trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceOpenError {
    /// The header row could not be read.
    #[error("cannot read the header row: {0}")]
    Io(#[from] io::Error),
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

#[derive(Clone, Copy, Debug)]
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
    csv: Records<R>,
    cols: Columns,
    /// The data row the next record is.
    row: u64,
    origin: OriginId,
}

/// Where a record lies in the stream, as [`TraceReader::advance`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    /// Byte offset of its start.
    pub offset: u64,
    /// Its length in bytes, terminator included.
    pub len: u64,
    /// Its 0-based data row.
    pub row: u64,
}

impl<R: Read> TraceReader<R> {
    /// Reads the header of the trace in `src`.
    pub fn new(src: R, origin: OriginId) -> Result<Self, TraceOpenError> {
        // Fields are trimmed as they are read.
        let mut csv = Records::new(src);
        csv.read()?;
        let header: Vec<String> = (0..csv.len())
            .filter_map(|i| csv.get(i))
            .map(|h| String::from_utf8_lossy(h.trim_ascii()).to_ascii_lowercase())
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
            row: 0,
            origin,
        })
    }

    /// A reader of the same trace's rows over `src`, a stream of its bytes from `offset` on,
    /// where data row `row` starts (a position this reader or one like it reported): the
    /// header is not read again.
    pub(crate) fn resume<S: Read>(&self, src: S, offset: u64, row: u64) -> TraceReader<S> {
        TraceReader {
            csv: Records::resume(src, offset),
            cols: self.cols,
            row,
            origin: self.origin,
        }
    }

    /// Byte offset of the next row in the stream.
    pub fn position(&self) -> u64 {
        self.csv.position()
    }

    /// The next row that parses, or `None` at the end. Rows that do not parse are counted in
    /// `stats` and described in `damage`.
    pub fn next_row(
        &mut self,
        stats: &mut SourceStats,
        damage: &mut Vec<Damage>,
    ) -> io::Result<Option<TraceRow>> {
        while let Some(at) = self.advance()? {
            if let Some(row) = tally(self.parse(at.row), at, stats, damage) {
                return Ok(Some(row));
            }
        }
        Ok(None)
    }

    /// Reads the next record without parsing it; `None` at the end. Its fields are then
    /// read by [`Self::clock_address`], [`Self::parse_current`] and [`Self::times_and_ends`].
    pub(crate) fn advance(&mut self) -> io::Result<Option<Span>> {
        let offset = self.csv.position();
        if !self.csv.read()? {
            return Ok(None);
        }
        let row = self.row;
        self.row += 1;
        let len = self.csv.position().saturating_sub(offset);
        Ok(Some(Span { offset, len, row }))
    }

    /// The current record (data row `row`) as a row, or why it is not one.
    pub(crate) fn parse_current(&self, row: u64) -> Result<TraceRow, String> {
        self.parse(row)
    }

    /// The address of the side whose clock stamped the current record's event time: the
    /// sender when the send time is given, else the receiver when the receive time is, judged
    /// by whether the fields are empty (as [`Self::parse_current`] judges them); `None` when
    /// both are empty or the address is missing or empty. Parses nothing else.
    pub(crate) fn clock_address(&self) -> Option<Address> {
        let filled = |i: usize| self.csv.get(i).is_some_and(|b| !b.trim_ascii().is_empty());
        let side = if filled(self.cols.send) {
            self.cols.src
        } else if filled(self.cols.recv) {
            self.cols.dst
        } else {
            return None;
        };
        self.address(side, "").ok()
    }

    /// The current record's two timestamps and two ends, parsed as [`Self::parse_current`]
    /// parses them, without the optional columns.
    pub(crate) fn times_and_ends(
        &self,
    ) -> Result<(Option<u64>, Option<u64>, Address, Address), String> {
        Ok((
            self.timestamp(self.cols.send, "send_ns")?,
            self.timestamp(self.cols.recv, "recv_ns")?,
            self.address(self.cols.src, "src")?,
            self.address(self.cols.dst, "dst")?,
        ))
    }

    fn raw(&self, i: usize) -> Result<&[u8], String> {
        self.csv
            .get(i)
            .map(<[u8]>::trim_ascii)
            .ok_or_else(|| format!("has {} fields, column {} missing", self.csv.len(), i + 1))
    }

    fn timestamp(&self, i: usize, name: &str) -> Result<Option<u64>, String> {
        let b = self.raw(i)?;
        if b.is_empty() {
            return Ok(None);
        }
        if let Some(n) = parse_decimal(b) {
            return Ok(Some(n));
        }
        let s = text(i, b)?;
        s.parse::<u64>()
            .map(Some)
            .map_err(|_| format!("{name} `{s}` is not a non-negative integer"))
    }

    fn address(&self, i: usize, col: &str) -> Result<Address, String> {
        let b = self.raw(i)?;
        if b.is_empty() {
            return Err(format!("{col} is empty"));
        }
        if let Some(e) = parse_ipv4_endpoint(b) {
            return Ok(Address::Endpoint(e));
        }
        Ok(Address::parse(text(i, b)?))
    }

    fn parse(&self, row: u64) -> Result<TraceRow, String> {
        let bytes = match self.cols.bytes {
            Some(i) => self.timestamp(i, "bytes")?,
            None => None,
        };
        let kind = match self.cols.kind {
            Some(i) => match self.raw(i)? {
                b"" => None,
                b => {
                    let s = text(i, b)?;
                    Some(MessageKind::parse(s).ok_or_else(|| {
                        format!("kind `{s}` is not call, return, request, response or message")
                    })?)
                }
            },
            None => None,
        };
        let call_id = match self.cols.call_id {
            Some(i) => match self.raw(i)? {
                b"" => None,
                b => Some(text(i, b)?.to_owned()),
            },
            None => None,
        };
        let send_ns = self.timestamp(self.cols.send, "send_ns")?;
        let recv_ns = self.timestamp(self.cols.recv, "recv_ns")?;
        Ok(TraceRow {
            origin: self.origin,
            row,
            send_ns,
            recv_ns,
            event_ns: send_ns.or(recv_ns).unwrap_or(0),
            src: self.address(self.cols.src, "src")?,
            dst: self.address(self.cols.dst, "dst")?,
            bytes,
            kind,
            call_id,
        })
    }
}

fn text(i: usize, b: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(b).map_err(|_| format!("field {} is not UTF-8", i + 1))
}

/// Counts a record read at `at` into `stats` as its parse came out: a row with a timestamp is
/// recorded and returned; one without is skipped (`no_timestamp`); one that did not parse is
/// skipped (`bad_row`) and described in `damage` with its offset.
pub(crate) fn tally(
    parsed: Result<TraceRow, String>,
    at: Span,
    stats: &mut SourceStats,
    damage: &mut Vec<Damage>,
) -> Option<TraceRow> {
    match parsed {
        Ok(r) => {
            let Some(ts) = r.send_ns.or(r.recv_ns) else {
                stats.records += 1;
                stats.bytes += at.len;
                stats.skip(SkipReason::NoTimestamp);
                return None;
            };
            stats.record(ts, at.len);
            Some(r)
        }
        Err(message) => {
            stats.records += 1;
            stats.bytes += at.len;
            stats.skip(SkipReason::BadRow);
            damage.push(Damage {
                offset: at.offset,
                reason: SkipReason::BadRow,
                message: format!("data row {}: {message}", at.row),
            });
            None
        }
    }
}

/// Digits alone (at most 19, so no overflow), as a number; `None` for anything else, which
/// the standard parser then reads (or refuses), so the result is the same.
fn parse_decimal(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 {
        return None;
    }
    b.iter().try_fold(0u64, |n, &c| {
        c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0'))
    })
}

/// `a.b.c.d:port` (decimal, no leading zeros), the common case of an endpoint, read from
/// bytes; `None` for anything else, which [`Address::parse`] then reads, so the result is the
/// same.
fn parse_ipv4_endpoint(b: &[u8]) -> Option<Endpoint> {
    // A decimal of at most `max` digits without a leading zero, and where it ends.
    let number = |from: usize, max: usize| -> Option<(u32, usize)> {
        let digits = b[from..]
            .iter()
            .take(max + 1)
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 || digits > max || (digits > 1 && b[from] == b'0') {
            return None;
        }
        let n = b[from..from + digits]
            .iter()
            .fold(0u32, |n, &c| n * 10 + u32::from(c - b'0'));
        Some((n, from + digits))
    };
    let mut octets = [0u8; 4];
    let mut at = 0;
    for (k, octet) in octets.iter_mut().enumerate() {
        let (n, end) = number(at, 3)?;
        *octet = u8::try_from(n).ok()?;
        let separator = if k < 3 { b'.' } else { b':' };
        if b.get(end) != Some(&separator) {
            return None;
        }
        at = end + 1;
    }
    let (port, end) = number(at, 5)?;
    if end != b.len() {
        return None;
    }
    Some(Endpoint::new(
        std::net::Ipv4Addr::from(octets),
        u16::try_from(port).ok()?,
    ))
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

    proptest::proptest! {
        /// The fast paths read what the standard parsers read, and nothing else.
        #[test]
        fn fast_parsers_agree_with_the_standard_ones(s in "[0-9.:+ a-f\\[\\]]{0,24}") {
            let b = s.as_bytes();
            if let Some(n) = parse_decimal(b) {
                proptest::prop_assert_eq!(Some(n), s.parse::<u64>().ok());
            }
            if let Some(e) = parse_ipv4_endpoint(b) {
                proptest::prop_assert_eq!(Some(e), s.parse::<Endpoint>().ok());
            }
        }

        #[test]
        fn endpoints_are_read_fast(a: u8, b: u8, c: u8, d: u8, port: u16) {
            let s = format!("{a}.{b}.{c}.{d}:{port}");
            proptest::prop_assert_eq!(parse_ipv4_endpoint(s.as_bytes()), s.parse::<Endpoint>().ok());
            proptest::prop_assert_eq!(parse_decimal(port.to_string().as_bytes()), Some(u64::from(port)));
        }
    }

    #[test]
    fn fields_are_trimmed() {
        let (rows, _, damage) = read(
            " send_ns , recv_ns,src,dst ,kind\n 100 ,150, 10.0.0.1:4000 ,10.0.0.2:80, Call \n",
        );
        assert!(damage.is_empty(), "{damage:?}");
        assert_eq!((rows[0].send_ns, rows[0].recv_ns), (Some(100), Some(150)));
        assert_eq!(rows[0].src, Address::parse("10.0.0.1:4000"));
        assert_eq!(rows[0].kind, Some(MessageKind::Call));
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
