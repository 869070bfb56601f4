//! CSV records, read as the csv crate reads them (comma-separated, `"` quoting with doubled
//! quotes, `\n`, `\r\n` or `\r` ending a record, empty lines skipped, a UTF-8 byte-order mark
//! at the start ignored), and several times faster on the common case: a line without quotes
//! or a stray `\r` is split at its commas where it lies in the read buffer's copy. Any other
//! record goes through `csv_core`, the csv crate's own parser (a quoted field may then span
//! lines). A record's fields are byte slices valid until the next read.
//!
//! Memory: the line and the parsed fields of one record, reused.

use std::io::{self, BufRead, BufReader, Read};

/// A streaming reader of CSV records; see the module documentation.
pub struct Records<R: Read> {
    src: BufReader<R>,
    /// The raw bytes of the current record (fast path: without its terminator).
    line: Vec<u8>,
    /// The fields of a record `csv_core` parsed, concatenated.
    parsed: Vec<u8>,
    /// Where each field ends, in `line` or in `parsed`.
    ends: Vec<usize>,
    /// Whether the fields are in `parsed` rather than `line`.
    slow: bool,
    core: csv_core::Reader,
    /// Byte offset of the next unread byte.
    position: u64,
    /// Whether the byte-order mark check at the start was made.
    started: bool,
    /// Whether `line` holds the start of the next record (after a lone `\r`).
    carry: bool,
}

impl<R: Read> Records<R> {
    /// Records from `src`.
    pub fn new(src: R) -> Self {
        Records {
            src: BufReader::with_capacity(64 << 10, src),
            line: Vec::with_capacity(256),
            parsed: Vec::with_capacity(256),
            ends: Vec::with_capacity(16),
            slow: false,
            core: csv_core::Reader::new(),
            position: 0,
            started: false,
            carry: false,
        }
    }

    /// Records from `src`, a stream that starts at byte `position` of a file (a record's
    /// start, after the first, so there is no byte-order mark to look for): positions count
    /// from there.
    pub fn resume(src: R, position: u64) -> Self {
        Records {
            position,
            started: true,
            ..Records::new(src)
        }
    }

    /// Byte offset of what has not been read yet (after the last record read).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Number of fields of the current record.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the current record has no fields (none was read).
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Field `i` of the current record.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = match i {
            0 => 0,
            // A field ends before the comma that follows it (fast path) or where the
            // next begins (csv_core).
            _ => self.ends[i - 1] + usize::from(!self.slow),
        };
        let data = if self.slow { &self.parsed } else { &self.line };
        data.get(start..end)
    }

    /// Reads the next record; `false` at the end of the input.
    pub fn read(&mut self) -> io::Result<bool> {
        if !self.started {
            self.started = true;
            if self.src.fill_buf()?.starts_with(b"\xEF\xBB\xBF") {
                self.src.consume(3);
                self.position = 3;
            }
        }
        if self.carry {
            // The rest of a line whose first record ended at a lone `\r`.
            return self.read_slow();
        }
        loop {
            self.line.clear();
            self.ends.clear();
            let n = self.src.read_until(b'\n', &mut self.line)?;
            if n == 0 {
                return Ok(false);
            }
            let mut body = self.line.len();
            if self.line[..body].ends_with(b"\n") {
                body -= 1;
            }
            if self.line[..body].ends_with(b"\r") {
                body -= 1;
            }
            if memchr::memchr2(b'"', b'\r', &self.line[..body]).is_some() {
                return self.read_slow();
            }
            self.position += n as u64;
            if body == 0 {
                // An empty line: no record.
                continue;
            }
            self.line.truncate(body);
            self.slow = false;
            // A plain loop: commas are close together, too close for a vector search to pay.
            self.ends.extend(
                self.line
                    .iter()
                    .enumerate()
                    .filter_map(|(i, b)| (*b == b',').then_some(i)),
            );
            self.ends.push(body);
            return Ok(true);
        }
    }

    /// Reads the record that starts in `line` with `csv_core`, taking more lines while a
    /// quoted field goes on.
    fn read_slow(&mut self) -> io::Result<bool> {
        use csv_core::ReadRecordResult as Result;
        self.slow = true;
        self.carry = false;
        self.parsed.clear();
        let (mut input_at, mut out_len, mut ends_len) = (0, 0, 0);
        loop {
            // Room for what the rest of the line can make: a byte each, a field per byte.
            let room = self.line.len() - input_at + 1;
            if self.parsed.len() < out_len + room {
                self.parsed.resize(out_len + room, 0);
            }
            if self.ends.len() < ends_len + room + 1 {
                self.ends.resize(ends_len + room + 1, 0);
            }
            let (result, read, written, ended) = self.core.read_record(
                &self.line[input_at..],
                &mut self.parsed[out_len..],
                &mut self.ends[ends_len..],
            );
            // (csv_core gives each field's end as if the record's output were contiguous.)
            input_at += read;
            out_len += written;
            ends_len += ended;
            self.position += read as u64;
            match result {
                Result::InputEmpty => {
                    if self.line.is_empty() {
                        // The end of the input was told, and nothing is pending.
                        break;
                    }
                    // The record goes on: the next line, or (empty) the end of the input.
                    self.line.clear();
                    input_at = 0;
                    self.src.read_until(b'\n', &mut self.line)?;
                }
                Result::OutputFull | Result::OutputEndsFull => {}
                Result::Record => {
                    let rest = &self.line[input_at..];
                    if rest.iter().all(|b| *b == b'\n' || *b == b'\r') {
                        // The `\n` of a `\r\n`: a terminator, as csv_core would skip it.
                        self.position += rest.len() as u64;
                    } else {
                        // A lone `\r` ended the record; the line holds the next.
                        self.line.drain(..input_at);
                        self.carry = true;
                    }
                    self.ends.truncate(ends_len);
                    self.parsed.truncate(out_len);
                    self.core.reset();
                    return Ok(true);
                }
                Result::End => break,
            }
        }
        self.ends.clear();
        self.core.reset();
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(text: &[u8]) -> Vec<Vec<Vec<u8>>> {
        let mut r = Records::new(text);
        let mut out = Vec::new();
        while r.read().unwrap() {
            out.push((0..r.len()).map(|i| r.get(i).unwrap().to_vec()).collect());
        }
        out
    }

    fn theirs(text: &[u8]) -> Vec<Vec<Vec<u8>>> {
        let mut r = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(text);
        r.byte_records()
            .map(|rec| rec.unwrap().iter().map(<[u8]>::to_vec).collect())
            .collect()
    }

    #[test]
    fn plain_quoted_and_multiline_records() {
        let text = b"\xEF\xBB\xBFa,b,c\r\n\n1,,3\n\"x,\"\"y\"\"\",\"two\nlines\"\nlast";
        assert_eq!(
            ours(text),
            vec![
                vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()],
                vec![b"1".to_vec(), b"".to_vec(), b"3".to_vec()],
                vec![b"x,\"y\"".to_vec(), b"two\nlines".to_vec()],
                vec![b"last".to_vec()],
            ]
        );
        assert_eq!(ours(text), theirs(text));
    }

    #[test]
    fn the_position_counts_every_byte() {
        let text = b"a,b\r\n\n\"c\",d\r\ne\rf\n";
        let mut r = Records::new(&text[..]);
        let mut at = Vec::new();
        while r.read().unwrap() {
            at.push(r.position());
        }
        assert_eq!(at.len(), 4);
        assert_eq!(*at.last().unwrap(), text.len() as u64);
    }

    proptest::proptest! {
        /// Whatever the bytes, the records are the csv crate's.
        #[test]
        fn records_are_the_csv_crates(s in "[ab ,\"\r\n]{0,40}") {
            proptest::prop_assert_eq!(ours(s.as_bytes()), theirs(s.as_bytes()));
        }
    }
}
