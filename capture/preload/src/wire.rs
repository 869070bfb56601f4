//! The log format's writer side, allocation-free: records and the file header encoded into
//! caller-provided byte slices. The layout is documented in `causeway_capture` (the crate
//! docs); the tests check these encoders byte for byte against that crate's.

/// Longest record this library writes: fixed header, errno, two UNIX endpoints, socket kind,
/// peer pid, hash, second fd and every extension with a 1024-byte path.
pub const MAX_RECORD: usize = 28 + 2 + 2 * 110 + 6 + 4 + 8 + 4 + (3 + MAX_PATH) + 11 + 7 + 11;
/// Longest exec path kept in a record.
pub const MAX_PATH: usize = 1024;

/// Syscall codes (`causeway_capture::Syscall`).
#[allow(missing_docs)]
pub mod code {
    pub const SOCKET: u8 = 1;
    pub const SOCKETPAIR: u8 = 2;
    pub const CONNECT: u8 = 3;
    pub const ACCEPT: u8 = 4;
    pub const ACCEPT4: u8 = 5;
    pub const BIND: u8 = 6;
    pub const LISTEN: u8 = 7;
    pub const CLOSE: u8 = 8;
    pub const SHUTDOWN: u8 = 9;
    pub const CLOSE_RANGE: u8 = 10;
    pub const CLOSEFROM: u8 = 11;
    pub const SEND: u8 = 16;
    pub const SENDTO: u8 = 17;
    pub const SENDMSG: u8 = 18;
    pub const SENDMMSG: u8 = 19;
    pub const WRITE: u8 = 20;
    pub const WRITEV: u8 = 21;
    pub const SENDFILE: u8 = 22;
    pub const RECV: u8 = 32;
    pub const RECVFROM: u8 = 33;
    pub const RECVMSG: u8 = 34;
    pub const RECVMMSG: u8 = 35;
    pub const READ: u8 = 36;
    pub const READV: u8 = 37;
    pub const DUP: u8 = 48;
    pub const DUP2: u8 = 49;
    pub const DUP3: u8 = 50;
    pub const FCNTL_DUPFD: u8 = 51;
    pub const FCNTL_DUPFD_CLOEXEC: u8 = 52;
    pub const FORK: u8 = 64;
    pub const VFORK: u8 = 65;
    pub const EXECVE: u8 = 72;
    pub const EXECV: u8 = 73;
    pub const EXECVP: u8 = 74;
    pub const EXECVPE: u8 = 75;
    pub const EXECVEAT: u8 = 76;
    pub const FEXECVE: u8 = 77;
    pub const END: u8 = 255;
}

/// Origin codes of the file header.
#[allow(missing_docs)]
pub mod origin {
    pub const START: u8 = 0;
    pub const FORK: u8 = 1;
    pub const EXEC: u8 = 2;
}

/// A byte cursor over a slice that refuses to overrun.
struct Out<'a> {
    buf: &'a mut [u8],
    at: usize,
    ok: bool,
}

impl<'a> Out<'a> {
    fn new(buf: &'a mut [u8]) -> Self {
        Out {
            buf,
            at: 0,
            ok: true,
        }
    }

    fn put(&mut self, b: &[u8]) {
        match self.buf.get_mut(self.at..self.at + b.len()) {
            Some(d) if self.ok => {
                d.copy_from_slice(b);
                self.at += b.len();
            }
            _ => self.ok = false,
        }
    }

    fn patch(&mut self, at: usize, b: &[u8]) {
        match self.buf.get_mut(at..at + b.len()) {
            Some(d) => d.copy_from_slice(b),
            None => self.ok = false,
        }
    }

    fn decimal(&mut self, n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut v = n;
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.put(&digits[i..]);
    }

    fn done(self) -> usize {
        if self.ok { self.at } else { 0 }
    }
}

/// An endpoint already in its log encoding (tag first).
#[derive(Clone, Copy)]
pub struct Ep {
    len: u8,
    bytes: [u8; 112],
}

impl Ep {
    /// The "no name" endpoint.
    pub const NONE: Ep = Ep {
        len: 1,
        bytes: [0; 112],
    };

    /// Encodes a `struct sockaddr` given as the bytes the kernel filled in (`len` as returned
    /// by the call, clipped to the buffer).
    pub fn from_sockaddr(sa: &[u8]) -> Ep {
        let mut ep = Ep::NONE;
        let Some(fam) = sa.get(..2) else {
            return ep;
        };
        let family = u16::from_ne_bytes([fam[0], fam[1]]);
        let mut o = Out::new(&mut ep.bytes);
        match i32::from(family) {
            libc::AF_UNSPEC => o.put(&[0]),
            libc::AF_INET => match sa.get(..8) {
                Some(s) => {
                    o.put(&[2]);
                    o.put(&s[4..8]);
                    o.put(&u16::from_be_bytes([s[2], s[3]]).to_le_bytes());
                }
                None => o.put(&[0]),
            },
            libc::AF_INET6 => match sa.get(..28) {
                Some(s) => {
                    o.put(&[10]);
                    o.put(&s[8..24]);
                    o.put(&u16::from_be_bytes([s[2], s[3]]).to_le_bytes());
                    o.put(&u32::from_ne_bytes([s[24], s[25], s[26], s[27]]).to_le_bytes());
                }
                None => o.put(&[0]),
            },
            libc::AF_UNIX => {
                let path = sa.get(2..).unwrap_or(&[]);
                let path = match path.first() {
                    // Abstract: every byte counts.
                    Some(0) => path,
                    // Pathname: up to the first NUL.
                    _ => path.split(|&b| b == 0).next().unwrap_or(&[]),
                };
                let path = path.get(..path.len().min(108)).unwrap_or(&[]);
                o.put(&[1, path.len() as u8]);
                o.put(path);
            }
            _ => {
                o.put(&[255]);
                o.put(&family.to_le_bytes());
            }
        }
        let n = o.done();
        ep.len = n as u8;
        if n == 0 {
            return Ep::NONE;
        }
        ep
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[0])
    }
}

/// One record to encode. Optional fields are written when `Some`.
#[derive(Clone, Copy)]
pub struct Rec<'a> {
    /// Syscall code.
    pub code: u8,
    /// `CLOCK_REALTIME` ns.
    pub time: u64,
    /// Thread id.
    pub tid: u32,
    /// Descriptor.
    pub fd: i32,
    /// Return value.
    pub ret: i64,
    /// errno.
    pub errno: Option<u16>,
    /// Local endpoint.
    pub local: Option<&'a Ep>,
    /// Peer endpoint.
    pub peer: Option<&'a Ep>,
    /// Family, type, protocol.
    pub socket: Option<(u16, u16, u16)>,
    /// Peer pid.
    pub peer_pid: Option<u32>,
    /// Payload hash.
    pub hash: Option<u64>,
    /// Second descriptor.
    pub fd2: Option<i32>,
    /// Exec path.
    pub path: Option<&'a [u8]>,
    /// Integer argument.
    pub arg: Option<i64>,
    /// `MSG_*` flags.
    pub msg_flags: Option<u32>,
    /// Batch index and count.
    pub batch: Option<(u32, u32)>,
}

impl<'a> Rec<'a> {
    /// A record with the fixed fields only.
    pub fn new(code: u8, time: u64, tid: u32, fd: i32, ret: i64) -> Rec<'a> {
        Rec {
            code,
            time,
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

    /// Encodes into `out`; returns the length, or 0 when it does not fit.
    pub fn encode(&self, out: &mut [u8]) -> usize {
        let path = self
            .path
            .map(|p| p.get(..p.len().min(MAX_PATH)).unwrap_or(&[]));
        let mut flags = 0u8;
        let bits = [
            self.errno.is_some(),
            self.local.is_some(),
            self.peer.is_some(),
            self.socket.is_some(),
            self.peer_pid.is_some(),
            self.hash.is_some(),
            self.fd2.is_some(),
            path.is_some()
                || self.arg.is_some()
                || self.msg_flags.is_some()
                || self.batch.is_some(),
        ];
        for (i, &b) in bits.iter().enumerate() {
            if b {
                flags |= 1 << i;
            }
        }
        let mut o = Out::new(out);
        o.put(&[0, 0, self.code, flags]);
        o.put(&self.time.to_le_bytes());
        o.put(&self.tid.to_le_bytes());
        o.put(&self.fd.to_le_bytes());
        o.put(&self.ret.to_le_bytes());
        if let Some(e) = self.errno {
            o.put(&e.to_le_bytes());
        }
        if let Some(e) = self.local {
            o.put(e.as_bytes());
        }
        if let Some(e) = self.peer {
            o.put(e.as_bytes());
        }
        if let Some((f, t, p)) = self.socket {
            o.put(&f.to_le_bytes());
            o.put(&t.to_le_bytes());
            o.put(&p.to_le_bytes());
        }
        if let Some(p) = self.peer_pid {
            o.put(&p.to_le_bytes());
        }
        if let Some(h) = self.hash {
            o.put(&h.to_le_bytes());
        }
        if let Some(fd) = self.fd2 {
            o.put(&fd.to_le_bytes());
        }
        if let Some(p) = path {
            o.put(&[1]);
            o.put(&(p.len() as u16).to_le_bytes());
            o.put(p);
        }
        if let Some(a) = self.arg {
            o.put(&[2, 8, 0]);
            o.put(&a.to_le_bytes());
        }
        if let Some(m) = self.msg_flags {
            o.put(&[3, 4, 0]);
            o.put(&m.to_le_bytes());
        }
        if let Some((i, c)) = self.batch {
            o.put(&[4, 8, 0]);
            o.put(&i.to_le_bytes());
            o.put(&c.to_le_bytes());
        }
        let len = o.at as u16;
        o.patch(0, &len.to_le_bytes());
        o.done()
    }
}

/// The file header to encode.
pub struct Header<'a> {
    /// Origin code.
    pub origin: u8,
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Image number.
    pub image: u32,
    /// Process start time, clock ticks after boot.
    pub start_ticks: u64,
    /// `CLOCK_REALTIME` ns.
    pub realtime: u64,
    /// `CLOCK_MONOTONIC` ns.
    pub monotonic: u64,
    /// Clock resolution ns.
    pub clock_res: u32,
    /// Host name.
    pub hostname: &'a [u8],
    /// Program path.
    pub exe: &'a [u8],
    /// Arguments, each followed by a NUL.
    pub argv: &'a [u8],
    /// Previous log's file name.
    pub previous: &'a [u8],
}

impl Header<'_> {
    /// Encodes into `out`; returns the length, or 0 when it does not fit.
    pub fn encode(&self, out: &mut [u8]) -> usize {
        let mut o = Out::new(out);
        o.put(b"CWLOG");
        o.put(&1u16.to_le_bytes());
        o.put(&[0; 4]);
        o.put(&[self.origin]);
        o.put(&self.pid.to_le_bytes());
        o.put(&self.ppid.to_le_bytes());
        o.put(&self.image.to_le_bytes());
        o.put(&self.start_ticks.to_le_bytes());
        o.put(&self.realtime.to_le_bytes());
        o.put(&self.monotonic.to_le_bytes());
        o.put(&self.clock_res.to_le_bytes());
        for s in [self.hostname, self.exe, self.argv, self.previous] {
            let s = s.get(..s.len().min(u16::MAX as usize)).unwrap_or(&[]);
            o.put(&(s.len() as u16).to_le_bytes());
            o.put(s);
        }
        let len = o.at as u32;
        o.patch(7, &len.to_le_bytes());
        o.done()
    }
}

/// Writes `<host>.<pid>.<image>.cwlog` into `out` (with `/` in the host name made `_`);
/// returns the length, 0 when it does not fit.
pub fn log_name(out: &mut [u8], host: &[u8], pid: u32, image: u32) -> usize {
    let mut o = Out::new(out);
    for &b in host {
        o.put(&[if b == b'/' { b'_' } else { b }]);
    }
    o.put(b".");
    o.decimal(u64::from(pid));
    o.put(b".");
    o.decimal(u64::from(image));
    o.put(b".cwlog");
    o.done()
}

/// The process start time (field 22) from the bytes of `/proc/self/stat`.
pub fn stat_start_ticks(stat: &[u8]) -> u64 {
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return 0;
    };
    let rest = stat.get(close + 1..).unwrap_or(&[]);
    let Some(field) = rest.split(|&b| b == b' ').filter(|f| !f.is_empty()).nth(19) else {
        return 0;
    };
    let mut v: u64 = 0;
    for &b in field {
        if !b.is_ascii_digit() {
            break;
        }
        v = v.wrapping_mul(10).wrapping_add(u64::from(b - b'0'));
    }
    v
}

/// Parses a non-negative decimal (a `/proc/self/fd` entry name); `None` otherwise.
pub fn parse_fd(name: &[u8]) -> Option<i32> {
    if name.is_empty() || name.len() > 9 {
        return None;
    }
    let mut v: i32 = 0;
    for &b in name {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i32::from(b - b'0');
    }
    Some(v)
}

/// The names in a buffer of `linux_dirent64` records as `getdents64` fills it.
pub fn dirents(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        // d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name NUL-terminated.
        let head = buf.get(at..at + 19)?;
        let reclen = usize::from(u16::from_ne_bytes([head[16], head[17]]));
        if reclen < 19 {
            return None;
        }
        let rec = buf.get(at..at + reclen)?;
        at += reclen;
        let name = &rec[19..];
        Some(name.split(|&b| b == 0).next().unwrap_or(&[]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_capture::{Endpoint, LogHeader, Origin, Record, RecordView, SocketKind, Syscall};

    fn sockaddr_in(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut v = vec![0u8; 16];
        v[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v[2..4].copy_from_slice(&port.to_be_bytes());
        v[4..8].copy_from_slice(&ip);
        v
    }

    fn parse(b: &[u8]) -> Record {
        Record::parse(&RecordView::new_checked(b).unwrap()).unwrap()
    }

    #[test]
    fn records_match_the_reference_encoder() {
        let mut buf = [0u8; MAX_RECORD];
        let n = Rec::new(code::WRITE, 99, 7, 5, 512).encode(&mut buf);
        let want = Record::new(Syscall::Write, 99, 7, 5, 512);
        assert_eq!(&buf[..n], &want.to_bytes().unwrap()[..]);

        let local = Ep::from_sockaddr(&sockaddr_in([127, 0, 0, 1], 40000));
        let peer = Ep::from_sockaddr(&sockaddr_in([10, 1, 2, 3], 53));
        let mut unix = [0u8; 110];
        unix[..2].copy_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
        unix[2..8].copy_from_slice(b"/tmp/s");
        let unix_ep = Ep::from_sockaddr(&unix[..9]);
        let mut abstract_ = vec![0u8; 6];
        abstract_[..2].copy_from_slice(&(libc::AF_UNIX as u16).to_ne_bytes());
        abstract_[3..6].copy_from_slice(b"abc");
        let abs_ep = Ep::from_sockaddr(&abstract_);
        let mut r = Rec::new(code::SENDMMSG, 1, 2, 3, -1);
        r.errno = Some(11);
        r.local = Some(&local);
        r.peer = Some(&peer);
        r.socket = Some((2, 2, 17));
        r.peer_pid = Some(4);
        r.hash = Some(0xdead_beef);
        r.fd2 = Some(9);
        r.path = Some(b"/bin/true");
        r.arg = Some(-5);
        r.msg_flags = Some(2);
        r.batch = Some((1, 3));
        let n = r.encode(&mut buf);
        let got = parse(&buf[..n]);
        let mut want = Record::new(Syscall::Sendmmsg, 1, 2, 3, -1);
        want.errno = Some(11);
        want.local = Some(Endpoint::Inet("127.0.0.1:40000".parse().unwrap()));
        want.peer = Some(Endpoint::Inet("10.1.2.3:53".parse().unwrap()));
        want.socket = Some(SocketKind {
            family: 2,
            sock_type: 2,
            protocol: 17,
        });
        want.peer_pid = Some(4);
        want.hash = Some(0xdead_beef);
        want.fd2 = Some(9);
        want.path = Some(b"/bin/true".to_vec());
        want.arg = Some(-5);
        want.msg_flags = Some(2);
        want.batch = Some(causeway_capture::Batch { index: 1, count: 3 });
        assert_eq!(got, want);
        assert_eq!(&buf[..n], &want.to_bytes().unwrap()[..]);

        let mut r = Rec::new(code::ACCEPT, 1, 2, 3, 4);
        r.local = Some(&unix_ep);
        r.peer = Some(&abs_ep);
        let n = r.encode(&mut buf);
        let got = parse(&buf[..n]);
        assert_eq!(got.local, Some(Endpoint::Unix(b"/tmp/s".to_vec())));
        assert_eq!(got.peer, Some(Endpoint::Unix(b"\0abc".to_vec())));

        // Too small a buffer: nothing.
        assert_eq!(Rec::new(code::WRITE, 1, 1, 1, 1).encode(&mut buf[..27]), 0);
    }

    #[test]
    fn ipv6_endpoint() {
        let mut sa = vec![0u8; 28];
        sa[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        sa[2..4].copy_from_slice(&8080u16.to_be_bytes());
        sa[23] = 1;
        sa[24..28].copy_from_slice(&3u32.to_ne_bytes());
        let ep = Ep::from_sockaddr(&sa);
        let (e, n) = Endpoint::decode(ep.as_bytes(), 0).unwrap();
        assert_eq!(n, 23);
        assert_eq!(e, Endpoint::Inet("[::1%3]:8080".parse().unwrap()));
        assert_eq!(Ep::from_sockaddr(&sa[..10]).as_bytes(), &[0]);
        assert_eq!(Ep::from_sockaddr(&[]).as_bytes(), &[0]);
    }

    #[test]
    fn header_matches_the_reference_encoder() {
        let mut buf = [0u8; 512];
        let h = Header {
            origin: origin::EXEC,
            pid: 10,
            ppid: 1,
            image: 2,
            start_ticks: 5,
            realtime: 6,
            monotonic: 7,
            clock_res: 1,
            hostname: b"h",
            exe: b"/bin/sh",
            argv: b"sh\0-c\0",
            previous: b"h.10.1.cwlog",
        };
        let n = h.encode(&mut buf);
        let want = LogHeader {
            origin: Origin::Exec,
            hostname: "h".into(),
            pid: 10,
            ppid: 1,
            image: 2,
            start_ticks: 5,
            realtime_ns: 6,
            monotonic_ns: 7,
            clock_res_ns: 1,
            exe: "/bin/sh".into(),
            argv: vec!["sh".into(), "-c".into()],
            previous: Some("h.10.1.cwlog".into()),
        };
        assert_eq!(&buf[..n], &want.to_bytes().unwrap()[..]);
    }

    #[test]
    fn names_and_parsing() {
        let mut b = [0u8; 64];
        let n = log_name(&mut b, b"a/b", 42, 3);
        assert_eq!(&b[..n], b"a_b.42.3.cwlog");
        assert_eq!(log_name(&mut b[..8], b"a/b", 42, 3), 0);
        let stat = b"42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000";
        assert_eq!(stat_start_ticks(stat), 98765);
        assert_eq!(parse_fd(b"17"), Some(17));
        assert_eq!(parse_fd(b"."), None);
        let want = causeway_capture::proc_start_ticks(
            &std::fs::read_to_string("/proc/self/stat").unwrap(),
        );
        assert_eq!(
            Some(stat_start_ticks(&std::fs::read("/proc/self/stat").unwrap())),
            want
        );
    }
}
