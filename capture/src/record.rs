//! One socket call: the checked view over its bytes ([`RecordView`]) and the validated owned
//! value ([`Record`]).

use serde::{Deserialize, Serialize};

use crate::endpoint::{Endpoint, SocketKind};
use crate::error::{EncodeError, WireError, WireErrorKind};
use crate::syscall::{Direction, Syscall};

/// Linux `MSG_PEEK`.
const MSG_PEEK: u32 = 0x2;

/// Length of the fixed record header, before the optional fields.
pub const HEADER_LEN: usize = 28;
/// Longest record the format holds (the length field is a u16).
pub const MAX_LEN: usize = u16::MAX as usize;

/// Byte ranges of the fixed record fields.
pub mod field {
    use std::ops::Range;
    /// Total record length including this field, u16.
    pub const LEN: Range<usize> = 0..2;
    /// [`crate::Syscall`] code, u8.
    pub const SYSCALL: usize = 2;
    /// [`super::flags`], u8.
    pub const FLAGS: usize = 3;
    /// `CLOCK_REALTIME` ns, u64.
    pub const TIME: Range<usize> = 4..12;
    /// Thread id (`gettid`), u32.
    pub const TID: Range<usize> = 12..16;
    /// Descriptor, i32.
    pub const FD: Range<usize> = 16..20;
    /// Return value, i64.
    pub const RET: Range<usize> = 20..28;
}

/// The flag bits: which optional fields follow the fixed header, in this order.
pub mod flags {
    /// `errno`, u16.
    pub const ERRNO: u8 = 0x01;
    /// Local endpoint.
    pub const LOCAL: u8 = 0x02;
    /// Peer endpoint.
    pub const PEER: u8 = 0x04;
    /// Socket kind: family u16, type u16, protocol u16.
    pub const SOCKET: u8 = 0x08;
    /// Peer process id (`SO_PEERCRED`), u32.
    pub const PEER_PID: u8 = 0x10;
    /// Payload hash (FNV-1a 64), u64.
    pub const HASH: u8 = 0x20;
    /// Second descriptor, i32.
    pub const FD2: u8 = 0x40;
    /// Extension fields (type u8, length u16, value) fill the rest of the record.
    pub const EXT: u8 = 0x80;
}

/// Extension field types.
pub mod ext {
    /// Program path of an exec call: bytes.
    pub const PATH: u8 = 1;
    /// The call's integer argument (see [`super::Record::arg`]): i64.
    pub const ARG: u8 = 2;
    /// `MSG_*` flags of a send or recv call: u32.
    pub const MSG_FLAGS: u8 = 3;
    /// Place in a `sendmmsg`/`recvmmsg` batch: index u32, count u32.
    pub const BATCH: u8 = 4;
}

/// A record's place in the batch of a `sendmmsg` or `recvmmsg` call.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Batch {
    /// Index of this message in the batch.
    pub index: u32,
    /// Messages the call moved.
    pub count: u32,
}

/// One socket call, validated and owned.
///
/// Which fields are set depends on the call; see the crate documentation.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Record {
    /// The entry point.
    pub syscall: Syscall,
    /// `CLOCK_REALTIME` in ns: when a send-family call or `connect` was entered, when any
    /// other call returned.
    pub time_ns: u64,
    /// Thread id of the caller.
    pub tid: u32,
    /// The descriptor the call was about (the new one for `socket`, the first for
    /// `socketpair`, the old one for dups, the listening one for accepts); -1 when none.
    pub fd: i32,
    /// The return value: bytes moved, the new descriptor, 0, a child pid, or -1.
    pub ret: i64,
    /// `errno` when the call failed.
    pub errno: Option<u16>,
    /// Local name of the socket (`getsockname`).
    pub local: Option<Endpoint>,
    /// Peer name of the socket (`getpeername`, or the address argument of the call).
    pub peer: Option<Endpoint>,
    /// The socket's family, type and protocol.
    pub socket: Option<SocketKind>,
    /// Peer process id of a UNIX-domain connection (`SO_PEERCRED`).
    pub peer_pid: Option<u32>,
    /// FNV-1a 64 of the datagram payload actually sent or received (see [`crate::payload_hash`]).
    pub hash: Option<u64>,
    /// The new descriptor: accept's, dup's, socketpair's second.
    pub fd2: Option<i32>,
    /// Program path of an exec call (at most 1024 bytes from the library).
    pub path: Option<Vec<u8>>,
    /// The call's integer argument where it matters: `shutdown`'s how, `listen`'s backlog,
    /// the flags of `accept4`/`dup3`, the minimum of `fcntl(F_DUPFD*)`, the input descriptor of
    /// `sendfile`, the descriptor of `fexecve`, the exit status on [`Syscall::End`] when the
    /// process left through `_exit`.
    pub arg: Option<i64>,
    /// `MSG_*` flags of a send or recv call, when any other than `MSG_NOSIGNAL`,
    /// `MSG_DONTWAIT`, `MSG_WAITALL` and `MSG_CMSG_CLOEXEC` were given (`MSG_PEEK` matters:
    /// those bytes will be read again).
    pub msg_flags: Option<u32>,
    /// Place in a `sendmmsg`/`recvmmsg` batch.
    pub batch: Option<Batch>,
}

impl Record {
    /// A record with only the fixed fields set.
    pub fn new(syscall: Syscall, time_ns: u64, tid: u32, fd: i32, ret: i64) -> Record {
        Record {
            syscall,
            time_ns,
            tid,
            fd,
            ret,
            errno: None,
            local: None,
            peer: None,
            socket: None,
            peer_pid: None,
            hash: None,
            fd2: None,
            path: None,
            arg: None,
            msg_flags: None,
            batch: None,
        }
    }

    /// The flags byte this record encodes with.
    pub fn flags(&self) -> u8 {
        let mut f = 0;
        let mut set = |bit: u8, present: bool| {
            if present {
                f |= bit
            }
        };
        set(flags::ERRNO, self.errno.is_some());
        set(flags::LOCAL, self.local.is_some());
        set(flags::PEER, self.peer.is_some());
        set(flags::SOCKET, self.socket.is_some());
        set(flags::PEER_PID, self.peer_pid.is_some());
        set(flags::HASH, self.hash.is_some());
        set(flags::FD2, self.fd2.is_some());
        set(
            flags::EXT,
            self.path.is_some()
                || self.arg.is_some()
                || self.msg_flags.is_some()
                || self.batch.is_some(),
        );
        f
    }

    /// Bytes this record takes in the log.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN
            + self.errno.map_or(0, |_| 2)
            + self.local.as_ref().map_or(0, Endpoint::encoded_len)
            + self.peer.as_ref().map_or(0, Endpoint::encoded_len)
            + self.socket.map_or(0, |_| SocketKind::ENCODED_LEN)
            + self.peer_pid.map_or(0, |_| 4)
            + self.hash.map_or(0, |_| 8)
            + self.fd2.map_or(0, |_| 4)
            + self.path.as_ref().map_or(0, |p| 3 + p.len())
            + self.arg.map_or(0, |_| 3 + 8)
            + self.msg_flags.map_or(0, |_| 3 + 4)
            + self.batch.map_or(0, |_| 3 + 8)
    }

    /// Appends the encoded record to `out` (nothing is appended on error).
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let len = self.encoded_len();
        let len16 = u16::try_from(len).map_err(|_| EncodeError::TooLong {
            what: "record",
            len,
            max: MAX_LEN,
        })?;
        let start = out.len();
        out.reserve(len);
        out.extend_from_slice(&len16.to_le_bytes());
        out.push(self.syscall.code());
        out.push(self.flags());
        out.extend_from_slice(&self.time_ns.to_le_bytes());
        out.extend_from_slice(&self.tid.to_le_bytes());
        out.extend_from_slice(&self.fd.to_le_bytes());
        out.extend_from_slice(&self.ret.to_le_bytes());
        let result = (|| {
            if let Some(e) = self.errno {
                out.extend_from_slice(&e.to_le_bytes());
            }
            if let Some(e) = &self.local {
                e.encode(out)?;
            }
            if let Some(e) = &self.peer {
                e.encode(out)?;
            }
            if let Some(s) = self.socket {
                out.extend_from_slice(&s.family.to_le_bytes());
                out.extend_from_slice(&s.sock_type.to_le_bytes());
                out.extend_from_slice(&s.protocol.to_le_bytes());
            }
            if let Some(p) = self.peer_pid {
                out.extend_from_slice(&p.to_le_bytes());
            }
            if let Some(h) = self.hash {
                out.extend_from_slice(&h.to_le_bytes());
            }
            if let Some(fd) = self.fd2 {
                out.extend_from_slice(&fd.to_le_bytes());
            }
            let mut tlv = |t: u8, v: &[u8]| {
                out.push(t);
                // Fits: the whole record's length was checked above.
                out.extend_from_slice(&(v.len() as u16).to_le_bytes());
                out.extend_from_slice(v);
            };
            if let Some(p) = &self.path {
                tlv(ext::PATH, p);
            }
            if let Some(a) = self.arg {
                tlv(ext::ARG, &a.to_le_bytes());
            }
            if let Some(m) = self.msg_flags {
                tlv(ext::MSG_FLAGS, &m.to_le_bytes());
            }
            if let Some(b) = self.batch {
                let mut v = [0u8; 8];
                v[..4].copy_from_slice(&b.index.to_le_bytes());
                v[4..].copy_from_slice(&b.count.to_le_bytes());
                tlv(ext::BATCH, &v);
            }
            Ok(())
        })();
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    /// The encoded record.
    pub fn to_bytes(&self) -> Result<Vec<u8>, EncodeError> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.encode(&mut v)?;
        Ok(v)
    }

    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(view: &RecordView<T>) -> Result<Record, WireError> {
        let b = view.record_bytes()?;
        let syscall = view.syscall()?;
        let mut rec = Record::new(syscall, view.time_ns(), view.tid(), view.fd(), view.ret());
        let f = view.flags();
        let mut at = HEADER_LEN;
        let take = |at: &mut usize, n: usize, field: &'static str| -> Result<&[u8], WireError> {
            let s = b.get(*at..*at + n).ok_or(WireError {
                offset: *at,
                length: b.len().saturating_sub(*at),
                kind: WireErrorKind::FieldOverrun {
                    field,
                    needed: n,
                    present: b.len().saturating_sub(*at),
                },
            })?;
            *at += n;
            Ok(s)
        };
        if f & flags::ERRNO != 0 {
            let v = take(&mut at, 2, "errno")?;
            rec.errno = Some(u16::from_le_bytes([v[0], v[1]]));
        }
        for (bit, slot) in [(flags::LOCAL, &mut rec.local), (flags::PEER, &mut rec.peer)] {
            if f & bit != 0 {
                let rest = b.get(at..).unwrap_or(&[]);
                let (e, n) = Endpoint::decode(rest, at)?;
                *slot = Some(e);
                at += n;
            }
        }
        if f & flags::SOCKET != 0 {
            let v = take(&mut at, SocketKind::ENCODED_LEN, "socket kind")?;
            rec.socket = Some(SocketKind {
                family: u16::from_le_bytes([v[0], v[1]]),
                sock_type: u16::from_le_bytes([v[2], v[3]]),
                protocol: u16::from_le_bytes([v[4], v[5]]),
            });
        }
        if f & flags::PEER_PID != 0 {
            let v = take(&mut at, 4, "peer pid")?;
            rec.peer_pid = Some(u32::from_le_bytes([v[0], v[1], v[2], v[3]]));
        }
        if f & flags::HASH != 0 {
            let v = take(&mut at, 8, "hash")?;
            let mut a = [0u8; 8];
            a.copy_from_slice(v);
            rec.hash = Some(u64::from_le_bytes(a));
        }
        if f & flags::FD2 != 0 {
            let v = take(&mut at, 4, "second fd")?;
            rec.fd2 = Some(i32::from_le_bytes([v[0], v[1], v[2], v[3]]));
        }
        if f & flags::EXT == 0 {
            if at != b.len() {
                return Err(WireError {
                    offset: at,
                    length: b.len() - at,
                    kind: WireErrorKind::TrailingBytes(b.len() - at),
                });
            }
            return Ok(rec);
        }
        while at < b.len() {
            let start = at;
            let h = take(&mut at, 3, "extension header")?;
            let (t, len) = (h[0], u16::from_le_bytes([h[1], h[2]]));
            let v = take(&mut at, usize::from(len), "extension value")?;
            let bad_len = WireError {
                offset: start,
                length: 3 + usize::from(len),
                kind: WireErrorKind::BadExtensionLength { ext: t, len },
            };
            let dup = WireError {
                offset: start,
                length: 3 + usize::from(len),
                kind: WireErrorKind::DuplicateExtension(t),
            };
            let duplicate = match t {
                ext::PATH => rec.path.replace(v.to_vec()).is_some(),
                ext::ARG => {
                    let a: [u8; 8] = v.try_into().map_err(|_| bad_len)?;
                    rec.arg.replace(i64::from_le_bytes(a)).is_some()
                }
                ext::MSG_FLAGS => {
                    let a: [u8; 4] = v.try_into().map_err(|_| bad_len)?;
                    rec.msg_flags.replace(u32::from_le_bytes(a)).is_some()
                }
                ext::BATCH => {
                    let a: [u8; 8] = v.try_into().map_err(|_| bad_len)?;
                    let batch = Batch {
                        index: u32::from_le_bytes([a[0], a[1], a[2], a[3]]),
                        count: u32::from_le_bytes([a[4], a[5], a[6], a[7]]),
                    };
                    rec.batch.replace(batch).is_some()
                }
                // Unknown extensions are skipped: later versions may add some.
                _ => false,
            };
            if duplicate {
                return Err(dup);
            }
        }
        Ok(rec)
    }

    /// The new descriptor this call made, if any: `fd2` when set, else `ret` for `socket`.
    pub fn new_fd(&self) -> Option<i32> {
        self.fd2.or(match self.syscall {
            Syscall::Socket if self.ret >= 0 => i32::try_from(self.ret).ok(),
            _ => None,
        })
    }

    /// Bytes moved by a send- or recv-family call that succeeded; `None` for other calls,
    /// failures, and receives with `MSG_PEEK` (their bytes are read again later).
    pub fn bytes(&self) -> Option<u64> {
        match self.syscall.direction() {
            Some(Direction::Recv) if self.msg_flags.is_some_and(|f| f & MSG_PEEK != 0) => None,
            Some(_) => u64::try_from(self.ret).ok(),
            None => None,
        }
    }
}

/// A view over the bytes of one record (smoltcp style): [`RecordView::new_checked`] validates
/// untrusted bytes so that every accessor after it is meaningful; accessors never panic, even
/// on an unchecked view (they return 0 or `None` for bytes that are missing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<T: AsRef<[u8]>> {
    buffer: T,
}

fn le<const N: usize>(b: &[u8], r: std::ops::Range<usize>) -> [u8; N] {
    let mut a = [0u8; N];
    if let Some(s) = b.get(r) {
        if s.len() == N {
            a.copy_from_slice(s);
        }
    }
    a
}

impl<T: AsRef<[u8]>> RecordView<T> {
    /// Wraps bytes without checking them.
    pub fn new_unchecked(buffer: T) -> RecordView<T> {
        RecordView { buffer }
    }

    /// Wraps bytes and checks that they hold one whole, well-formed record (the buffer may be
    /// longer than the record; [`RecordView::len`] says where it ends).
    pub fn new_checked(buffer: T) -> Result<RecordView<T>, WireError> {
        let v = RecordView { buffer };
        v.check()?;
        Ok(v)
    }

    /// Checks the record: length, syscall code and every optional field.
    pub fn check(&self) -> Result<(), WireError> {
        Record::parse(self).map(|_| ())
    }

    /// Checks only the length field against the buffer: enough to know where the record ends.
    pub fn check_len(&self) -> Result<usize, WireError> {
        let b = self.buffer.as_ref();
        if b.len() < field::LEN.end {
            return Err(WireError::truncated(0, field::LEN.end, b.len()));
        }
        let len = self.len();
        if len < HEADER_LEN {
            return Err(WireError {
                offset: 0,
                length: 2,
                kind: WireErrorKind::BadRecordLength(len as u16),
            });
        }
        if b.len() < len {
            return Err(WireError::truncated(0, len, b.len()));
        }
        Ok(len)
    }

    fn record_bytes(&self) -> Result<&[u8], WireError> {
        let len = self.check_len()?;
        Ok(self.buffer.as_ref().get(..len).unwrap_or(&[]))
    }

    /// The underlying bytes.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The record's length field: its total length in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        usize::from(u16::from_le_bytes(le(self.buffer.as_ref(), field::LEN)))
    }

    /// The raw syscall code.
    pub fn syscall_code(&self) -> u8 {
        self.buffer
            .as_ref()
            .get(field::SYSCALL)
            .copied()
            .unwrap_or(0)
    }

    /// The syscall, or an error naming the unknown code.
    pub fn syscall(&self) -> Result<Syscall, WireError> {
        let c = self.syscall_code();
        Syscall::from_code(c).ok_or(WireError {
            offset: field::SYSCALL,
            length: 1,
            kind: WireErrorKind::UnknownSyscall(c),
        })
    }

    /// The flags byte (see [`flags`]).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref().get(field::FLAGS).copied().unwrap_or(0)
    }

    /// The timestamp, ns.
    pub fn time_ns(&self) -> u64 {
        u64::from_le_bytes(le(self.buffer.as_ref(), field::TIME))
    }

    /// The thread id.
    pub fn tid(&self) -> u32 {
        u32::from_le_bytes(le(self.buffer.as_ref(), field::TID))
    }

    /// The descriptor.
    pub fn fd(&self) -> i32 {
        i32::from_le_bytes(le(self.buffer.as_ref(), field::FD))
    }

    /// The return value.
    pub fn ret(&self) -> i64 {
        i64::from_le_bytes(le(self.buffer.as_ref(), field::RET))
    }

    /// `errno`, when the record carries one.
    pub fn errno(&self) -> Option<u16> {
        if self.flags() & flags::ERRNO == 0 {
            return None;
        }
        Some(u16::from_le_bytes(le(
            self.buffer.as_ref(),
            HEADER_LEN..HEADER_LEN + 2,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn write_rec() -> Record {
        Record::new(Syscall::Write, 0x0102_0304_0506_0708, 77, 5, 512)
    }

    #[test]
    fn golden_plain_write() {
        let b = write_rec().to_bytes().unwrap();
        #[rustfmt::skip]
        assert_eq!(b, [
            28, 0, 20, 0,
            8, 7, 6, 5, 4, 3, 2, 1,
            77, 0, 0, 0,
            5, 0, 0, 0,
            0, 2, 0, 0, 0, 0, 0, 0,
        ]);
        let v = RecordView::new_checked(&b[..]).unwrap();
        assert_eq!(v.len(), 28);
        assert_eq!(v.syscall().unwrap(), Syscall::Write);
        assert_eq!(Record::parse(&v).unwrap(), write_rec());
    }

    #[test]
    fn golden_failed_recv() {
        let mut r = Record::new(Syscall::Recv, 1, 2, 3, -1);
        r.errno = Some(104);
        let b = r.to_bytes().unwrap();
        assert_eq!(&b[..4], &[30, 0, 32, flags::ERRNO]);
        assert_eq!(
            &b[20..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 104, 0]
        );
        let v = RecordView::new_checked(&b).unwrap();
        assert_eq!(v.errno(), Some(104));
    }

    #[test]
    fn golden_udp_sendto() {
        let mut r = Record::new(Syscall::Sendto, 10, 1, 4, 3);
        r.peer = Some(Endpoint::Inet("10.0.0.2:53".parse().unwrap()));
        r.hash = Some(crate::payload_hash(b"abc"));
        let b = r.to_bytes().unwrap();
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &[43, 0, 17, flags::PEER | flags::HASH][..],
            &10u64.to_le_bytes(), &[1, 0, 0, 0], &[4, 0, 0, 0], &3i64.to_le_bytes(),
            &[2, 10, 0, 0, 2, 53, 0],
            &0xe71f_a219_0541_574bu64.to_le_bytes(),
        ].concat();
        assert_eq!(b, want);
        assert_eq!(
            Record::parse(&RecordView::new_checked(&b).unwrap()).unwrap(),
            r
        );
    }

    #[test]
    fn golden_accept_unix_and_exec() {
        let mut r = Record::new(Syscall::Accept4, 10, 1, 3, 7);
        r.local = Some(Endpoint::Unix(b"/s".to_vec()));
        r.peer = Some(Endpoint::Unix(Vec::new()));
        r.socket = Some(SocketKind {
            family: 1,
            sock_type: 1,
            protocol: 0,
        });
        r.peer_pid = Some(99);
        r.fd2 = Some(7);
        let b = r.to_bytes().unwrap();
        #[rustfmt::skip]
        let tail: &[u8] = &[
            1, 2, b'/', b's', 1, 0,
            1, 0, 1, 0, 0, 0,
            99, 0, 0, 0,
            7, 0, 0, 0,
        ];
        assert_eq!(&b[28..], tail);
        assert_eq!(b[3], 0x02 | 0x04 | 0x08 | 0x10 | 0x40);

        let mut e = Record::new(Syscall::Execve, 10, 1, -1, 0);
        e.path = Some(b"/bin/sh".to_vec());
        let b = e.to_bytes().unwrap();
        assert_eq!(b[3], flags::EXT);
        assert_eq!(
            &b[28..],
            &[1, 7, 0, b'/', b'b', b'i', b'n', b'/', b's', b'h']
        );
    }

    #[test]
    fn checked_rejects() {
        let b = write_rec().to_bytes().unwrap();
        for cut in 0..b.len() {
            assert!(RecordView::new_checked(&b[..cut]).is_err());
        }
        let mut bad = b.clone();
        bad[0] = 27;
        assert!(matches!(
            RecordView::new_checked(&bad).unwrap_err().kind,
            WireErrorKind::BadRecordLength(27)
        ));
        let mut bad = b.clone();
        bad[2] = 200;
        assert_eq!(
            RecordView::new_checked(&bad).unwrap_err(),
            WireError {
                offset: 2,
                length: 1,
                kind: WireErrorKind::UnknownSyscall(200)
            }
        );
        let mut bad = b.clone();
        bad[3] = flags::HASH; // a hash flag but no room for it
        assert!(matches!(
            RecordView::new_checked(&bad).unwrap_err().kind,
            WireErrorKind::FieldOverrun { field: "hash", .. }
        ));
        let mut bad = b;
        bad[0] = 30;
        bad.extend_from_slice(&[0, 0]);
        assert!(matches!(
            RecordView::new_checked(&bad).unwrap_err().kind,
            WireErrorKind::TrailingBytes(2)
        ));
    }

    #[test]
    fn bytes() {
        let mut r = Record::new(Syscall::Recv, 1, 1, 3, 10);
        assert_eq!(r.bytes(), Some(10));
        r.msg_flags = Some(0x2);
        assert_eq!(r.bytes(), None);
        assert_eq!(Record::new(Syscall::Send, 1, 1, 3, -1).bytes(), None);
        assert_eq!(Record::new(Syscall::Accept, 1, 1, 3, 5).bytes(), None);
        assert_eq!(Record::new(Syscall::Socket, 1, 1, 3, 3).new_fd(), Some(3));
    }

    #[test]
    fn unknown_extension_is_skipped() {
        let mut b = Record::new(Syscall::Close, 1, 1, 3, 0).to_bytes().unwrap();
        b[3] = flags::EXT;
        b.extend_from_slice(&[99, 2, 0, 0xaa, 0xbb]);
        b[0] = b.len() as u8;
        let r = Record::parse(&RecordView::new_checked(&b).unwrap()).unwrap();
        assert_eq!(r, Record::new(Syscall::Close, 1, 1, 3, 0));
    }

    fn endpoint() -> impl Strategy<Value = Endpoint> {
        prop_oneof![
            Just(Endpoint::Unspecified),
            (any::<[u8; 4]>(), any::<u16>())
                .prop_map(|(a, p)| Endpoint::Inet((std::net::Ipv4Addr::from(a), p).into())),
            (any::<[u8; 16]>(), any::<u16>(), any::<u32>()).prop_map(|(a, p, s)| {
                Endpoint::Inet(std::net::SocketAddr::V6(std::net::SocketAddrV6::new(
                    a.into(),
                    p,
                    0,
                    s,
                )))
            }),
            proptest::collection::vec(any::<u8>(), 0..=108).prop_map(Endpoint::Unix),
            (3u16..).prop_map(|family| Endpoint::Other { family }),
        ]
    }

    pub(crate) fn record() -> impl Strategy<Value = Record> {
        let fixed = (
            proptest::sample::select(Syscall::ALL),
            any::<u64>(),
            any::<u32>(),
            any::<i32>(),
            any::<i64>(),
        );
        let opt1 = (
            proptest::option::of(any::<u16>()),
            proptest::option::of(endpoint()),
            proptest::option::of(endpoint()),
            proptest::option::of(any::<(u16, u16, u16)>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<i32>()),
        );
        let opt2 = (
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
            proptest::option::of(any::<i64>()),
            proptest::option::of(any::<u32>()),
            proptest::option::of(any::<(u32, u32)>()),
        );
        (fixed, opt1, opt2).prop_map(|(f, o1, o2)| Record {
            syscall: f.0,
            time_ns: f.1,
            tid: f.2,
            fd: f.3,
            ret: f.4,
            errno: o1.0,
            local: o1.1,
            peer: o1.2,
            socket: o1.3.map(|(family, sock_type, protocol)| SocketKind {
                family,
                sock_type,
                protocol,
            }),
            peer_pid: o1.4,
            hash: o1.5,
            fd2: o1.6,
            path: o2.0,
            arg: o2.1,
            msg_flags: o2.2,
            batch: o2.3.map(|(index, count)| Batch { index, count }),
        })
    }

    proptest! {
        #[test]
        fn round_trip(r in record()) {
            let b = r.to_bytes().unwrap();
            prop_assert_eq!(b.len(), r.encoded_len());
            let v = RecordView::new_checked(&b[..]).unwrap();
            prop_assert_eq!(v.len(), b.len());
            prop_assert_eq!(v.time_ns(), r.time_ns);
            prop_assert_eq!(v.fd(), r.fd);
            prop_assert_eq!(v.errno(), r.errno);
            prop_assert_eq!(Record::parse(&v).unwrap(), r);
        }

        #[test]
        fn any_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(v) = RecordView::new_checked(&b[..]) {
                let _ = Record::parse(&v);
            }
            let v = RecordView::new_unchecked(&b[..]);
            let _ = (v.len(), v.flags(), v.time_ns(), v.ret(), v.errno(), v.tid(), v.fd());
        }
    }
}
