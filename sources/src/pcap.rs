//! Frames from classic pcap and pcapng byte streams, with damage handling.
//!
//! [`FrameReader`] keeps one growable buffer over any [`Read`] (a file, a gzip decoder, stdin)
//! and hands out [`Frame`]s that borrow it: the frame bytes are never copied. Records are parsed
//! with pcap-parser's slice parsers; this module adds what a streaming reader of damaged files
//! needs on top:
//!
//! - classic pcap in both byte orders, microsecond and nanosecond magic;
//! - pcapng with several sections (each resets byte order and interfaces) and several
//!   interfaces, each with its own link type, `if_tsresol` and `if_tsoffset`;
//! - a record whose header contradicts itself is counted as `corrupt_record` and skipped; the
//!   reader resynchronises on the next offset where two consecutive plausible records start
//!   (classic pcap) or where a known block type has matching leading and trailing lengths
//!   (pcapng);
//! - a file that ends inside a record yields every complete record before it, then one
//!   `truncated_record` with the byte offset where the damage starts.
//!
//! Memory: one buffer of [`BUFFER_SIZE`] bytes, grown only to hold a single record larger than
//! that (bounded by [`MAX_RECORD`]); it never grows with the file.

use std::io::{self, Read};

use pcap_parser::pcapng::{Block, parse_block_be, parse_block_le};
use pcap_parser::traits::PcapNGPacketBlock;

use crate::observation::Nanos;
use crate::stats::{SkipReason, SourceStats};

/// Bytes read from the underlying stream at a time.
pub const BUFFER_SIZE: usize = 1 << 18;
/// Largest record (classic pcap frame or pcapng block) the reader accepts, in bytes.
pub const MAX_RECORD: usize = 16 << 20;
/// Largest frame in a classic pcap file whose header declares no usable snap length.
const DEFAULT_MAX_CAPLEN: u32 = 262_144;

const PCAP_MAGIC_US: u32 = 0xa1b2_c3d4;
const PCAP_MAGIC_NS: u32 = 0xa1b2_3c4d;
const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
const PCAPNG_BOM: u32 = 0x1a2b_3c4d;

/// The container format of a capture, detected from its first four bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap.
    Pcap,
    /// pcapng.
    PcapNg,
}

impl CaptureFormat {
    /// Detects the format from the first bytes of a file.
    pub fn detect(head: &[u8]) -> Option<CaptureFormat> {
        let magic: [u8; 4] = head.get(..4)?.try_into().ok()?;
        let le = u32::from_le_bytes(magic);
        let be = u32::from_be_bytes(magic);
        if [le, be]
            .iter()
            .any(|m| *m == PCAP_MAGIC_US || *m == PCAP_MAGIC_NS)
        {
            Some(CaptureFormat::Pcap)
        } else if le == PCAPNG_SHB {
            Some(CaptureFormat::PcapNg)
        } else {
            None
        }
    }
}

/// One captured frame, borrowing the reader's buffer.
#[derive(Debug)]
pub struct Frame<'a> {
    /// Capture time in ns since the epoch, in the sniffer's clock.
    pub ts_ns: Nanos,
    /// pcap LINKTYPE of the frame's interface.
    pub linktype: u16,
    /// Captured bytes (at most the snap length).
    pub data: &'a [u8],
    /// Frame length on the wire.
    pub wire_len: u32,
    /// Byte offset of the record in the (decompressed) stream.
    pub offset: u64,
    /// pcapng interface id (0 for classic pcap).
    pub interface: u32,
}

/// A problem found in the stream, with where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset in the (decompressed) stream where the problem starts.
    pub offset: u64,
    /// How the records concerned were counted.
    pub reason: SkipReason,
    /// What is wrong, in one line.
    pub message: String,
}

/// Why a stream could not be opened as a capture.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Reading failed.
    #[error("read error: {0}")]
    Io(#[from] io::Error),
    /// The first bytes are neither a pcap nor a pcapng header.
    #[error("not a pcap or pcapng file (first bytes {0})")]
    NotACapture(String),
    /// The file ends inside its header.
    #[error("file ends inside the capture header ({0} bytes)")]
    ShortHeader(usize),
}

#[derive(Clone, Copy, Debug)]
struct Interface {
    linktype: u16,
    units_per_sec: u64,
    offset_ns: i128,
}

#[derive(Clone, Debug)]
enum Format {
    Legacy {
        big_endian: bool,
        nanos: bool,
        linktype: u16,
        max_caplen: u32,
    },
    Ng {
        big_endian: bool,
        interfaces: Vec<Interface>,
    },
}

/// Where a parsed record's frame lies in the buffer.
struct Located {
    ts_ns: Nanos,
    linktype: u16,
    data_start: usize,
    data_len: usize,
    wire_len: u32,
    interface: u32,
    offset: u64,
}

/// The outcome of looking at the record at the buffer's start.
enum Step {
    /// A frame; the record has been consumed.
    Frame(Located),
    /// A record that carries no frame was consumed; look again.
    Again,
    /// The stream ended.
    End,
}

/// Streaming reader of frames from a pcap or pcapng byte stream.
pub struct FrameReader<R> {
    src: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Stream offset of `buf[start]`.
    offset: u64,
    format: Format,
    last_ts_ns: Nanos,
    format_name: &'static str,
}

impl<R: Read> FrameReader<R> {
    /// Reads the capture header from `src` and returns a reader positioned at the first record.
    pub fn new(src: R) -> Result<Self, OpenError> {
        let mut reader = FrameReader {
            src,
            buf: vec![0; BUFFER_SIZE],
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
            format: Format::Ng {
                big_endian: false,
                interfaces: Vec::new(),
            },
            last_ts_ns: 0,
            format_name: "pcapng",
        };
        if !reader.fill(4)? {
            return Err(OpenError::ShortHeader(reader.available()));
        }
        match CaptureFormat::detect(&reader.buf[..4]) {
            Some(CaptureFormat::Pcap) => {
                if !reader.fill(24)? {
                    return Err(OpenError::ShortHeader(reader.available()));
                }
                let h = &reader.buf[..24];
                let le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
                let big_endian = !(le == PCAP_MAGIC_US || le == PCAP_MAGIC_NS);
                let magic = if big_endian {
                    u32::from_be_bytes([h[0], h[1], h[2], h[3]])
                } else {
                    le
                };
                let nanos = magic == PCAP_MAGIC_NS;
                let snaplen = read_u32(&h[16..20], big_endian);
                let network = read_u32(&h[20..24], big_endian);
                // The upper bits of the link-type field carry FCS information (pcap spec).
                let linktype = (network & 0x0fff_ffff) as u16;
                let max_caplen = snaplen.clamp(DEFAULT_MAX_CAPLEN, MAX_RECORD as u32);
                reader.format = Format::Legacy {
                    big_endian,
                    nanos,
                    linktype,
                    max_caplen,
                };
                reader.format_name = if nanos { "pcap (ns)" } else { "pcap (µs)" };
                reader.consume(24);
            }
            Some(CaptureFormat::PcapNg) => {}
            None => return Err(OpenError::NotACapture(hex_prefix(&reader.buf[..4]))),
        }
        Ok(reader)
    }

    /// "pcap (µs)", "pcap (ns)" or "pcapng".
    pub fn format_name(&self) -> &'static str {
        self.format_name
    }

    /// Bytes of the stream consumed so far.
    pub fn position(&self) -> u64 {
        self.offset
    }

    /// The next frame, or `None` at the end of the stream. Records that carry no frame are
    /// consumed on the way; damaged ones are counted in `stats` and described in `damage`.
    pub fn next_frame(
        &mut self,
        stats: &mut SourceStats,
        damage: &mut Vec<Damage>,
    ) -> io::Result<Option<Frame<'_>>> {
        loop {
            let step = match self.format {
                Format::Legacy { .. } => self.step_legacy(stats, damage)?,
                Format::Ng { .. } => self.step_ng(stats, damage)?,
            };
            match step {
                Step::Again => continue,
                Step::End => return Ok(None),
                Step::Frame(l) => {
                    self.last_ts_ns = l.ts_ns;
                    return Ok(Some(Frame {
                        ts_ns: l.ts_ns,
                        linktype: l.linktype,
                        data: &self.buf[l.data_start..l.data_start + l.data_len],
                        wire_len: l.wire_len,
                        offset: l.offset,
                        interface: l.interface,
                    }));
                }
            }
        }
    }

    fn available(&self) -> usize {
        self.end - self.start
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        self.offset += n as u64;
    }

    /// Makes at least `n` bytes available from `start`; false if the stream ends first.
    fn fill(&mut self, n: usize) -> io::Result<bool> {
        if self.available() >= n {
            return Ok(true);
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if n > self.buf.len() {
            self.buf.resize(n.next_power_of_two(), 0);
        }
        while self.end < n && !self.eof {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.end >= n)
    }

    /// Reports that the stream ends inside a record and consumes the rest.
    fn truncated(&mut self, stats: &mut SourceStats, damage: &mut Vec<Damage>, what: &str) -> Step {
        let left = self.available();
        damage.push(Damage {
            offset: self.offset,
            reason: SkipReason::TruncatedRecord,
            message: format!("file ends inside {what} ({left} of its bytes present)"),
        });
        stats.skip(SkipReason::TruncatedRecord);
        self.consume(left);
        Step::End
    }

    fn step_legacy(
        &mut self,
        stats: &mut SourceStats,
        damage: &mut Vec<Damage>,
    ) -> io::Result<Step> {
        let Format::Legacy {
            big_endian,
            nanos,
            linktype,
            max_caplen,
        } = self.format
        else {
            return Ok(Step::End);
        };
        if !self.fill(16)? {
            if self.available() == 0 {
                return Ok(Step::End);
            }
            return Ok(self.truncated(stats, damage, "a record header"));
        }
        let hdr = LegacyHeader::read(&self.buf[self.start..self.start + 16], big_endian);
        if let Some(problem) = hdr.problem(max_caplen, nanos) {
            let at = self.offset;
            let skipped = self.resync_legacy(big_endian, nanos, max_caplen)?;
            stats.skip(SkipReason::CorruptRecord);
            damage.push(Damage {
                offset: at,
                reason: SkipReason::CorruptRecord,
                message: format!("corrupt record header ({problem}); skipped {skipped} bytes"),
            });
            return Ok(Step::Again);
        }
        let need = 16 + hdr.caplen as usize;
        if !self.fill(need)? {
            return Ok(self.truncated(stats, damage, "a record"));
        }
        let avail = &self.buf[self.start..self.end];
        let parsed = if big_endian {
            pcap_parser::pcap::parse_pcap_frame_be(avail)
        } else {
            pcap_parser::pcap::parse_pcap_frame(avail)
        };
        let Ok((_, block)) = parsed else {
            // Unreachable given the checks above; treat as corruption rather than trust it.
            self.consume(1);
            stats.skip(SkipReason::CorruptRecord);
            return Ok(Step::Again);
        };
        let frac_ns = if nanos {
            block.ts_usec as u64
        } else {
            block.ts_usec as u64 * 1_000
        };
        let located = Located {
            ts_ns: block.ts_sec as u64 * 1_000_000_000 + frac_ns,
            linktype,
            data_start: self.start + 16,
            data_len: block.data.len(),
            wire_len: block.origlen,
            interface: 0,
            offset: self.offset,
        };
        self.consume(need);
        Ok(Step::Frame(located))
    }

    /// Skips forward from a corrupt header to the next offset where a plausible record starts
    /// and is followed by another plausible record (or by the end of the stream). Returns the
    /// number of bytes skipped.
    fn resync_legacy(&mut self, big_endian: bool, nanos: bool, max_caplen: u32) -> io::Result<u64> {
        let start_offset = self.offset;
        let last_sec = self.last_ts_ns / 1_000_000_000;
        self.consume(1);
        loop {
            if !self.fill(16)? {
                let left = self.available();
                self.consume(left);
                return Ok(self.offset - start_offset);
            }
            let hdr = LegacyHeader::read(&self.buf[self.start..self.start + 16], big_endian);
            let near_in_time = last_sec == 0 || (hdr.ts_sec as u64).abs_diff(last_sec) <= 86_400;
            if hdr.problem(max_caplen, nanos).is_none() && near_in_time {
                let next = 16 + hdr.caplen as usize;
                if !self.fill(next + 16)? {
                    // Accept a last record that ends exactly at the end of the stream.
                    if self.available() == next {
                        return Ok(self.offset - start_offset);
                    }
                } else {
                    let at = self.start + next;
                    let following = LegacyHeader::read(&self.buf[at..at + 16], big_endian);
                    if following.problem(max_caplen, nanos).is_none() {
                        return Ok(self.offset - start_offset);
                    }
                }
            }
            self.consume(1);
        }
    }

    fn step_ng(&mut self, stats: &mut SourceStats, damage: &mut Vec<Damage>) -> io::Result<Step> {
        if !self.fill(12)? {
            if self.available() == 0 {
                return Ok(Step::End);
            }
            return Ok(self.truncated(stats, damage, "a block header"));
        }
        let big_endian = match self.block_header_endianness() {
            Some(be) => be,
            None => {
                let at = self.offset;
                let skipped = self.resync_ng()?;
                stats.skip(SkipReason::CorruptRecord);
                damage.push(Damage {
                    offset: at,
                    reason: SkipReason::CorruptRecord,
                    message: format!(
                        "corrupt section header (bad byte-order magic); skipped {skipped} bytes"
                    ),
                });
                return Ok(Step::Again);
            }
        };
        let len = read_u32(&self.buf[self.start + 4..self.start + 8], big_endian) as usize;
        if !(12..=MAX_RECORD).contains(&len) || len % 4 != 0 {
            let at = self.offset;
            let skipped = self.resync_ng()?;
            stats.skip(SkipReason::CorruptRecord);
            damage.push(Damage {
                offset: at,
                reason: SkipReason::CorruptRecord,
                message: format!("corrupt block (length {len}); skipped {skipped} bytes"),
            });
            return Ok(Step::Again);
        }
        if !self.fill(len)? {
            return Ok(self.truncated(stats, damage, "a block"));
        }
        let offset = self.offset;
        let base = self.start;
        let block_bytes = &self.buf[base..base + len];
        let trailing = read_u32(&block_bytes[len - 4..], big_endian) as usize;
        let parsed = if trailing != len {
            None
        } else if big_endian {
            parse_block_be(block_bytes).ok()
        } else {
            parse_block_le(block_bytes).ok()
        };
        let Some((_, block)) = parsed else {
            let skipped = self.resync_ng()?;
            stats.skip(SkipReason::CorruptRecord);
            damage.push(Damage {
                offset,
                reason: SkipReason::CorruptRecord,
                message: format!("corrupt block (length {len}, trailing length {trailing}); skipped {skipped} bytes"),
            });
            return Ok(Step::Again);
        };
        let mut located = None;
        let mut bad_interface = None;
        let buf_ptr = self.buf.as_ptr() as usize;
        let Format::Ng {
            big_endian: section_be,
            interfaces,
        } = &mut self.format
        else {
            return Ok(Step::End);
        };
        match block {
            Block::SectionHeader(_) => {
                *section_be = big_endian;
                interfaces.clear();
            }
            Block::InterfaceDescription(idb) => {
                interfaces.push(Interface {
                    linktype: (idb.linktype.0 & 0xffff) as u16,
                    units_per_sec: idb.ts_resolution().unwrap_or(1_000_000).max(1),
                    offset_ns: idb.if_tsoffset as i128 * 1_000_000_000,
                });
            }
            Block::EnhancedPacket(epb) => match interfaces.get(epb.if_id as usize) {
                Some(iface) => {
                    let units = ((epb.ts_high as u64) << 32) | epb.ts_low as u64;
                    let data = epb.packet_data();
                    located = Some(Located {
                        ts_ns: units_to_ns(units, iface.units_per_sec, iface.offset_ns),
                        linktype: iface.linktype,
                        data_start: data.as_ptr() as usize - buf_ptr,
                        data_len: data.len(),
                        wire_len: epb.origlen,
                        interface: epb.if_id,
                        offset,
                    });
                }
                None => bad_interface = Some(epb.if_id),
            },
            Block::SimplePacket(spb) => match interfaces.first() {
                Some(iface) => {
                    let data = spb.packet_data();
                    located = Some(Located {
                        // Simple packet blocks carry no timestamp: they inherit the last one.
                        ts_ns: self.last_ts_ns,
                        linktype: iface.linktype,
                        data_start: data.as_ptr() as usize - buf_ptr,
                        data_len: data.len(),
                        wire_len: spb.origlen,
                        interface: 0,
                        offset,
                    });
                }
                None => bad_interface = Some(0),
            },
            Block::Unknown(_) => stats.skip(SkipReason::UnknownBlock),
            _ => {}
        }
        self.consume(len);
        if let Some(id) = bad_interface {
            stats.skip(SkipReason::UnknownInterface);
            damage.push(Damage {
                offset,
                reason: SkipReason::UnknownInterface,
                message: format!("packet for interface {id}, which no interface block described"),
            });
        }
        Ok(match located {
            Some(l) => Step::Frame(l),
            None => Step::Again,
        })
    }

    /// Byte order of the block at the buffer's start: a section header declares its own, any
    /// other block uses its section's. `None` for a section header with a bad byte-order magic.
    fn block_header_endianness(&self) -> Option<bool> {
        let b = &self.buf[self.start..self.start + 12];
        if read_u32(&b[..4], false) == PCAPNG_SHB {
            match read_u32(&b[8..12], false) {
                PCAPNG_BOM => Some(false),
                m if m.swap_bytes() == PCAPNG_BOM => Some(true),
                _ => None,
            }
        } else {
            match self.format {
                Format::Ng { big_endian, .. } => Some(big_endian),
                Format::Legacy { .. } => None,
            }
        }
    }

    /// Skips forward, 4 bytes at a time, to the next block of a known type whose leading and
    /// trailing lengths agree. Returns the number of bytes skipped.
    fn resync_ng(&mut self) -> io::Result<u64> {
        let start_offset = self.offset;
        let big_endian = match self.format {
            Format::Ng { big_endian, .. } => big_endian,
            Format::Legacy { .. } => false,
        };
        self.consume(4.min(self.available()));
        loop {
            if !self.fill(12)? {
                let left = self.available();
                self.consume(left);
                return Ok(self.offset - start_offset);
            }
            let b = &self.buf[self.start..self.start + 12];
            let kind = read_u32(&b[..4], big_endian);
            let be = if read_u32(&b[..4], false) == PCAPNG_SHB {
                read_u32(&b[8..12], false) != PCAPNG_BOM
            } else {
                big_endian
            };
            let len = read_u32(&b[4..8], be) as usize;
            let known = matches!(
                kind,
                0x1 | 0x3 | 0x4 | 0x5 | 0x6 | 0x9 | 0xa | 0xbad | 0x4000_0bad | 0x8000_0001
            ) || read_u32(&b[..4], false) == PCAPNG_SHB;
            if known && (12..=MAX_RECORD).contains(&len) && len % 4 == 0 && self.fill(len)? {
                let trailing = read_u32(&self.buf[self.start + len - 4..self.start + len], be);
                if trailing as usize == len {
                    return Ok(self.offset - start_offset);
                }
            }
            self.consume(4.min(self.available()));
        }
    }
}

/// The fields of a classic pcap record header.
struct LegacyHeader {
    ts_sec: u32,
    ts_frac: u32,
    caplen: u32,
    origlen: u32,
}

impl LegacyHeader {
    fn read(b: &[u8], big_endian: bool) -> Self {
        LegacyHeader {
            ts_sec: read_u32(&b[0..4], big_endian),
            ts_frac: read_u32(&b[4..8], big_endian),
            caplen: read_u32(&b[8..12], big_endian),
            origlen: read_u32(&b[12..16], big_endian),
        }
    }

    /// What makes this header impossible, if anything.
    fn problem(&self, max_caplen: u32, nanos: bool) -> Option<String> {
        let frac_limit = if nanos { 1_000_000_000 } else { 1_000_000 };
        if self.caplen > max_caplen {
            Some(format!(
                "captured length {} exceeds {}",
                self.caplen, max_caplen
            ))
        } else if self.caplen > self.origlen {
            Some(format!(
                "captured length {} exceeds original length {}",
                self.caplen, self.origlen
            ))
        } else if self.origlen > MAX_RECORD as u32 {
            Some(format!("original length {} is impossible", self.origlen))
        } else if self.ts_frac >= frac_limit {
            Some(format!(
                "sub-second timestamp {} out of range",
                self.ts_frac
            ))
        } else {
            None
        }
    }
}

fn read_u32(b: &[u8], big_endian: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if big_endian {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

/// Converts a pcapng timestamp in `units_per_sec` units plus an offset to ns since the epoch.
fn units_to_ns(units: u64, units_per_sec: u64, offset_ns: i128) -> Nanos {
    let ns: i128 = match units_per_sec {
        1_000_000_000 => units as i128,
        1_000_000 => units as i128 * 1_000,
        u => units as i128 * 1_000_000_000 / u as i128,
    };
    (ns + offset_ns).clamp(0, u64::MAX as i128) as u64
}

/// The first bytes of a stream in hex, for error messages.
pub fn hex_prefix(b: &[u8]) -> String {
    b.iter()
        .take(8)
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic pcap header.
    pub(crate) fn pcap_header(big_endian: bool, nanos: bool, linktype: u32) -> Vec<u8> {
        let magic = if nanos { PCAP_MAGIC_NS } else { PCAP_MAGIC_US };
        let mut v = Vec::new();
        let put32 = |v: &mut Vec<u8>, x: u32| {
            v.extend_from_slice(&if big_endian {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            })
        };
        let put16 = |v: &mut Vec<u8>, x: u16| {
            v.extend_from_slice(&if big_endian {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            })
        };
        put32(&mut v, magic);
        put16(&mut v, 2);
        put16(&mut v, 4);
        put32(&mut v, 0);
        put32(&mut v, 0);
        put32(&mut v, 65535);
        put32(&mut v, linktype);
        v
    }

    pub(crate) fn pcap_record(big_endian: bool, sec: u32, frac: u32, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [sec, frac, data.len() as u32, data.len() as u32] {
            v.extend_from_slice(&if big_endian {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            });
        }
        v.extend_from_slice(data);
        v
    }

    type Frames = Vec<(Nanos, Vec<u8>, u64)>;

    fn read_all(bytes: &[u8]) -> (Frames, SourceStats, Vec<Damage>) {
        let mut r = FrameReader::new(bytes).unwrap();
        let mut stats = SourceStats::default();
        let mut damage = Vec::new();
        let mut out = Vec::new();
        while let Some(f) = r.next_frame(&mut stats, &mut damage).unwrap() {
            out.push((f.ts_ns, f.data.to_vec(), f.offset));
        }
        (out, stats, damage)
    }

    #[test]
    fn classic_pcap_all_byte_orders_and_resolutions() {
        for be in [false, true] {
            for nanos in [false, true] {
                let mut f = pcap_header(be, nanos, 1);
                f.extend(pcap_record(be, 100, 5, b"abc"));
                f.extend(pcap_record(be, 101, 7, b"defg"));
                let (frames, _, damage) = read_all(&f);
                let unit = if nanos { 1 } else { 1000 };
                assert_eq!(frames.len(), 2, "be={be} nanos={nanos}");
                assert_eq!(frames[0].0, 100_000_000_000 + 5 * unit);
                assert_eq!(frames[1].1, b"defg");
                assert_eq!(frames[1].2, 24 + 16 + 3);
                assert!(damage.is_empty());
            }
        }
    }

    #[test]
    fn truncated_file_yields_complete_records_then_reports_offset() {
        let mut f = pcap_header(false, false, 1);
        f.extend(pcap_record(false, 1, 0, &[1; 40]));
        f.extend(pcap_record(false, 2, 0, &[2; 40]));
        let cut = f.len() - 10;
        let (frames, stats, damage) = read_all(&f[..cut]);
        assert_eq!(frames.len(), 1);
        assert_eq!(stats.skipped(SkipReason::TruncatedRecord), 1);
        assert_eq!(damage[0].offset, 24 + 56);
    }

    #[test]
    fn corrupt_header_is_skipped_and_reader_resynchronises() {
        let mut f = pcap_header(false, false, 1);
        f.extend(pcap_record(false, 1, 0, &[1; 40]));
        let bad_at = f.len();
        // garbage: an impossible caplen, then some noise
        f.extend([0xff; 23]);
        f.extend(pcap_record(false, 2, 0, &[2; 40]));
        f.extend(pcap_record(false, 3, 0, &[3; 40]));
        let (frames, stats, damage) = read_all(&f);
        assert_eq!(frames.len(), 3, "{damage:?}");
        assert_eq!(frames[1].1, vec![2; 40]);
        assert_eq!(stats.skipped(SkipReason::CorruptRecord), 1);
        assert_eq!(damage[0].offset, bad_at as u64);
    }

    #[test]
    fn not_a_capture_is_refused() {
        let err = FrameReader::new(&b"hello, world, this is text"[..])
            .err()
            .unwrap();
        assert!(err.to_string().contains("68 65 6c 6c"), "{err}");
        assert!(matches!(
            FrameReader::new(&b"\xd4\xc3"[..]),
            Err(OpenError::ShortHeader(2))
        ));
    }

    #[test]
    fn pcapng_timestamps_honour_resolution_and_offset() {
        assert_eq!(units_to_ns(1_500, 1_000, 0), 1_500_000_000);
        assert_eq!(units_to_ns(3, 1 << 1, 1_000_000_000), 2_500_000_000);
        assert_eq!(units_to_ns(7, 1_000_000_000, 0), 7);
    }
}
