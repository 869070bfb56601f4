//! The file header ([`LogHeader`]): who wrote the log, and the clocks at its start.

use serde::{Deserialize, Serialize};

use crate::error::{EncodeError, WireError, WireErrorKind};

/// The file magic.
pub const MAGIC: [u8; 5] = *b"CWLOG";
/// The format version this crate writes and reads.
pub const VERSION: u16 = 1;
/// Length of the fixed part of the header, before the four strings.
pub const FIXED_LEN: usize = 52;
/// Shortest possible header: the fixed part and four empty strings.
pub const MIN_LEN: usize = FIXED_LEN + 8;
/// Longest header a reader accepts (the four strings hold at most 64 KiB each; the rest is room
/// for later fields).
pub const MAX_LEN: usize = 1 << 20;

/// Byte ranges of the fixed header fields.
pub mod field {
    use std::ops::Range;
    /// `CWLOG`.
    pub const MAGIC: Range<usize> = 0..5;
    /// Format version, u16.
    pub const VERSION: Range<usize> = 5..7;
    /// Total header length, u32: records start at this offset.
    pub const HEADER_LEN: Range<usize> = 7..11;
    /// [`super::Origin`] code, u8.
    pub const ORIGIN: usize = 11;
    /// Process id, u32.
    pub const PID: Range<usize> = 12..16;
    /// Parent process id, u32.
    pub const PPID: Range<usize> = 16..20;
    /// Image number `n` of the file name, u32.
    pub const IMAGE: Range<usize> = 20..24;
    /// Process start time in clock ticks after boot (`/proc/PID/stat` field 22), u64.
    pub const START_TICKS: Range<usize> = 24..32;
    /// `CLOCK_REALTIME` when the log was opened, ns, u64.
    pub const REALTIME: Range<usize> = 32..40;
    /// `CLOCK_MONOTONIC` at the same moment, ns, u64.
    pub const MONOTONIC: Range<usize> = 40..48;
    /// `clock_getres(CLOCK_REALTIME)`, ns, u32.
    pub const CLOCK_RES: Range<usize> = 48..52;
}

/// How the process image that wrote a log began.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Origin {
    /// A process started (by `posix_spawn`, a shell, ...) whose parent's log is not known.
    #[default]
    Start = 0,
    /// A child of `fork`: [`LogHeader::previous`] names the parent's log.
    Fork = 1,
    /// A new image after `exec`: [`LogHeader::previous`] names the log of the image before.
    Exec = 2,
}

impl Origin {
    /// The origin with this code.
    pub fn from_code(code: u8) -> Option<Origin> {
        match code {
            0 => Some(Origin::Start),
            1 => Some(Origin::Fork),
            2 => Some(Origin::Exec),
            _ => None,
        }
    }
}

/// The file header: which process image wrote the log, and its clocks when it started.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LogHeader {
    /// How this process image began.
    pub origin: Origin,
    /// Host name (`uname`).
    pub hostname: String,
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// The `n` of the file name: 0 for a new process, one more after each `exec`.
    pub image: u32,
    /// Process start time in clock ticks after boot (`/proc/PID/stat` field 22); it survives
    /// `exec`, so together with `pid` it names the process. 0 when unknown.
    pub start_ticks: u64,
    /// `CLOCK_REALTIME` when the log was opened, ns since the epoch.
    pub realtime_ns: u64,
    /// `CLOCK_MONOTONIC` at the same moment, ns.
    pub monotonic_ns: u64,
    /// Resolution of `CLOCK_REALTIME`, ns.
    pub clock_res_ns: u32,
    /// Program path (`/proc/self/exe`), lossy UTF-8.
    pub exe: String,
    /// Arguments, lossy UTF-8 (the writer keeps at most 8 KiB of them, whole arguments only).
    pub argv: Vec<String>,
    /// File name of the previous log in the same directory: the parent's for a fork, the
    /// image before for an exec. `None` for [`Origin::Start`].
    pub previous: Option<String>,
}

fn put_str(out: &mut Vec<u8>, what: &'static str, s: &[u8]) -> Result<(), EncodeError> {
    let len = u16::try_from(s.len()).map_err(|_| EncodeError::TooLong {
        what,
        len: s.len(),
        max: usize::from(u16::MAX),
    })?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s);
    Ok(())
}

/// The arguments in a NUL-terminated list (a last argument without its NUL counts too).
fn split_args(b: &[u8]) -> impl Iterator<Item = &[u8]> {
    let none = b.is_empty();
    let b = b.strip_suffix(&[0]).unwrap_or(b);
    b.split(|&c| c == 0).filter(move |_| !none)
}

impl LogHeader {
    /// Appends the encoded header to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // header length, patched below
        out.push(self.origin as u8);
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&self.ppid.to_le_bytes());
        out.extend_from_slice(&self.image.to_le_bytes());
        out.extend_from_slice(&self.start_ticks.to_le_bytes());
        out.extend_from_slice(&self.realtime_ns.to_le_bytes());
        out.extend_from_slice(&self.monotonic_ns.to_le_bytes());
        out.extend_from_slice(&self.clock_res_ns.to_le_bytes());
        put_str(out, "hostname", self.hostname.as_bytes())?;
        put_str(out, "program path", self.exe.as_bytes())?;
        let mut argv = Vec::new();
        for a in &self.argv {
            argv.extend_from_slice(a.as_bytes());
            argv.push(0);
        }
        put_str(out, "argv", &argv)?;
        put_str(
            out,
            "previous log name",
            self.previous.as_deref().unwrap_or("").as_bytes(),
        )?;
        let len = u32::try_from(out.len() - start).unwrap_or(u32::MAX);
        out[start + field::HEADER_LEN.start..start + field::HEADER_LEN.end]
            .copy_from_slice(&len.to_le_bytes());
        Ok(())
    }

    /// The encoded header.
    pub fn to_bytes(&self) -> Result<Vec<u8>, EncodeError> {
        let mut v = Vec::new();
        self.encode(&mut v)?;
        Ok(v)
    }

    /// Checks the first [`field::HEADER_LEN`]`.end` bytes (magic, version, length) and returns
    /// the total header length.
    pub fn check_prefix(bytes: &[u8]) -> Result<usize, WireError> {
        let prefix = bytes
            .get(..field::HEADER_LEN.end)
            .ok_or(WireError::truncated(0, field::HEADER_LEN.end, bytes.len()))?;
        let mut magic = [0u8; 5];
        magic.copy_from_slice(&prefix[field::MAGIC]);
        // Check the magic on whatever is there first, so that a short non-log says so.
        if magic != MAGIC {
            return Err(WireError {
                offset: 0,
                length: 5,
                kind: WireErrorKind::BadMagic(magic),
            });
        }
        let version = u16::from_le_bytes([prefix[5], prefix[6]]);
        if version != VERSION {
            return Err(WireError {
                offset: field::VERSION.start,
                length: 2,
                kind: WireErrorKind::UnsupportedVersion(version),
            });
        }
        let len = u32::from_le_bytes([prefix[7], prefix[8], prefix[9], prefix[10]]);
        let ulen = usize::try_from(len).unwrap_or(usize::MAX);
        if !(MIN_LEN..=MAX_LEN).contains(&ulen) {
            return Err(WireError {
                offset: field::HEADER_LEN.start,
                length: 4,
                kind: WireErrorKind::BadHeaderLength(len),
            });
        }
        Ok(ulen)
    }

    /// Parses a header from the start of `bytes`; returns it and its length (where the records
    /// start). Bytes after the four strings and before the header length are ignored (room for
    /// later fields).
    pub fn parse(bytes: &[u8]) -> Result<(LogHeader, usize), WireError> {
        let len = Self::check_prefix(bytes)?;
        let h = bytes
            .get(..len)
            .ok_or(WireError::truncated(0, len, bytes.len()))?;
        let u32_at = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&h[r]);
            u32::from_le_bytes(b)
        };
        let u64_at = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[r]);
            u64::from_le_bytes(b)
        };
        let origin = Origin::from_code(h[field::ORIGIN]).ok_or(WireError {
            offset: field::ORIGIN,
            length: 1,
            kind: WireErrorKind::UnknownOrigin(h[field::ORIGIN]),
        })?;
        let mut at = FIXED_LEN;
        let mut strings: [&[u8]; 4] = [&[]; 4];
        for (s, name) in
            strings
                .iter_mut()
                .zip(["hostname", "program path", "argv", "previous log name"])
        {
            let overrun = |needed: usize| WireError {
                offset: at,
                length: len.saturating_sub(at),
                kind: WireErrorKind::FieldOverrun {
                    field: name,
                    needed,
                    present: len.saturating_sub(at),
                },
            };
            let l = h.get(at..at + 2).ok_or(overrun(2))?;
            let l = usize::from(u16::from_le_bytes([l[0], l[1]]));
            *s = h.get(at + 2..at + 2 + l).ok_or(overrun(2 + l))?;
            at += 2 + l;
        }
        let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let header = LogHeader {
            origin,
            hostname: lossy(strings[0]),
            pid: u32_at(field::PID),
            ppid: u32_at(field::PPID),
            image: u32_at(field::IMAGE),
            start_ticks: u64_at(field::START_TICKS),
            realtime_ns: u64_at(field::REALTIME),
            monotonic_ns: u64_at(field::MONOTONIC),
            clock_res_ns: u32_at(field::CLOCK_RES),
            exe: lossy(strings[1]),
            argv: split_args(strings[2]).map(lossy).collect(),
            previous: (!strings[3].is_empty()).then(|| lossy(strings[3])),
        };
        Ok((header, len))
    }

    /// The file name of this log: `<hostname>.<pid>.<image>.cwlog`.
    pub fn log_name(&self) -> crate::LogName {
        crate::LogName {
            hostname: self.hostname.clone(),
            pid: self.pid,
            image: self.image,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> LogHeader {
        LogHeader {
            origin: Origin::Fork,
            hostname: "web1".into(),
            pid: 4242,
            ppid: 1,
            image: 0,
            start_ticks: 77,
            realtime_ns: 1_700_000_000_000_000_000,
            monotonic_ns: 5_000,
            clock_res_ns: 1,
            exe: "/bin/x".into(),
            argv: vec!["x".into(), "-v".into()],
            previous: Some("web1.1.0.cwlog".into()),
        }
    }

    #[test]
    fn golden_header() {
        let b = sample().to_bytes().unwrap();
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &b"CWLOG"[..], &[1, 0], &[89, 0, 0, 0], &[1],
            &[0x92, 0x10, 0, 0], &[1, 0, 0, 0], &[0, 0, 0, 0],
            &[77, 0, 0, 0, 0, 0, 0, 0],
            &1_700_000_000_000_000_000u64.to_le_bytes(),
            &[0x88, 0x13, 0, 0, 0, 0, 0, 0], &[1, 0, 0, 0],
            &[4, 0], b"web1", &[6, 0], b"/bin/x", &[5, 0], b"x\0-v\0",
            &[14, 0], b"web1.1.0.cwlog",
        ].concat();
        assert_eq!(b, want);
        let (h, len) = LogHeader::parse(&b).unwrap();
        assert_eq!(len, b.len());
        assert_eq!(h, sample());
    }

    #[test]
    fn rejects() {
        let b = sample().to_bytes().unwrap();
        for cut in 0..b.len() {
            assert!(LogHeader::parse(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = b.clone();
        bad[0] = b'X';
        assert!(matches!(
            LogHeader::parse(&bad).unwrap_err().kind,
            WireErrorKind::BadMagic(_)
        ));
        let mut bad = b.clone();
        bad[5] = 9;
        assert!(matches!(
            LogHeader::parse(&bad).unwrap_err().kind,
            WireErrorKind::UnsupportedVersion(9)
        ));
        let mut bad = b.clone();
        bad[7..11].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            LogHeader::parse(&bad).unwrap_err().kind,
            WireErrorKind::BadHeaderLength(u32::MAX)
        ));
        let mut bad = b;
        bad[field::ORIGIN] = 7;
        assert!(matches!(
            LogHeader::parse(&bad).unwrap_err().kind,
            WireErrorKind::UnknownOrigin(7)
        ));
    }
}
