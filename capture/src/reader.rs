//! Reading logs: [`Reader`] streams records from any [`Read`], once to the end or following a
//! log while its process still writes it ([`Follow`]).

use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{LogError, WireError, WireErrorKind};
use crate::header::{LogHeader, MAGIC};
use crate::record::{self, Record, RecordView};
use crate::syscall::{Call, Syscall};

/// How a [`Reader`] follows a log that is still being written: at the end of the bytes it
/// sleeps `poll` and reads again, until one of the end conditions holds.
///
/// A following reader always ends after the end-of-log record ([`Syscall::End`]). It also ends
/// when `stop` is set, when nothing was added for `idle_timeout`, and (with `watch_writer`, for
/// readers opened from a path) when the writing process is gone from this host or, after an
/// exec record, when the log of the next image exists. A record cut short when it ends is
/// reported as [`LogError::Truncated`].
#[derive(Clone, Debug)]
pub struct Follow {
    /// Sleep between reads at the end of the bytes.
    pub poll: Duration,
    /// End when the log has not grown for this long.
    pub idle_timeout: Option<Duration>,
    /// End when this is set (checked at the end of the bytes, every `poll`).
    pub stop: Option<Arc<AtomicBool>>,
    /// End when the writer is gone (only for logs written on this host, opened by path).
    pub watch_writer: bool,
}

impl Default for Follow {
    /// Poll every 20 ms, no idle timeout, no stop flag, watch the writer.
    fn default() -> Self {
        Follow {
            poll: Duration::from_millis(20),
            idle_timeout: None,
            stop: None,
            watch_writer: true,
        }
    }
}

struct FollowState {
    opts: Follow,
    path: Option<PathBuf>,
    last_growth: Instant,
    last_check: Instant,
}

/// How often a following reader checks whether the writer is gone.
const WRITER_CHECK: Duration = Duration::from_millis(200);
/// Bytes asked of the underlying reader at a time.
const CHUNK: usize = 64 * 1024;

/// A streaming reader of one log: the header first ([`Reader::header`]), then records as an
/// iterator of `Result<Record, LogError>`.
///
/// A log cut short (its process killed mid-write) yields every complete record, then one
/// [`LogError::Truncated`] naming the offset of the damaged record and the bytes present, then
/// nothing. Any other error also ends the iteration.
pub struct Reader<R> {
    inner: R,
    file: String,
    header: LogHeader,
    buf: Vec<u8>,
    pos: usize,
    /// Absolute offset of `buf[pos]`.
    offset: u64,
    done: bool,
    closed: bool,
    exec_pending: bool,
    follow: Option<FollowState>,
}

impl<R: Read> Reader<R> {
    /// Reads the header from `inner`; `file` names the log in errors.
    pub fn new(inner: R, file: impl Into<String>) -> Result<Reader<R>, LogError> {
        Self::build(inner, file.into(), None)
    }

    /// Like [`Reader::new`], following the log as it grows (the header too may not be there
    /// yet). Without a path, `follow.watch_writer` has no effect.
    pub fn following(
        inner: R,
        file: impl Into<String>,
        follow: Follow,
    ) -> Result<Reader<R>, LogError> {
        Self::build(inner, file.into(), Some((follow, None)))
    }

    /// A reader of a log's records from `offset` on, a record boundary an earlier reader of
    /// the same log reached ([`Reader::offset`]), with the header that reader read; `inner`
    /// is positioned at `offset`. For reading a log again as it grows.
    pub fn resume(inner: R, file: impl Into<String>, header: LogHeader, offset: u64) -> Reader<R> {
        Reader {
            inner,
            file: file.into(),
            header,
            buf: Vec::new(),
            pos: 0,
            offset,
            done: false,
            closed: false,
            exec_pending: false,
            follow: None,
        }
    }

    fn build(
        inner: R,
        file: String,
        follow: Option<(Follow, Option<PathBuf>)>,
    ) -> Result<Reader<R>, LogError> {
        let now = Instant::now();
        let mut r = Reader {
            inner,
            file,
            header: LogHeader::default(),
            buf: Vec::new(),
            pos: 0,
            offset: 0,
            done: false,
            closed: false,
            exec_pending: false,
            follow: follow.map(|(opts, path)| FollowState {
                opts,
                path,
                last_growth: now,
                last_check: now,
            }),
        };
        r.read_header()?;
        Ok(r)
    }

    fn read_header(&mut self) -> Result<(), LogError> {
        let prefix = crate::header::field::HEADER_LEN.end;
        let have_prefix = self.fill(prefix)?;
        let avail = self.avail();
        if !have_prefix {
            let n = avail.len().min(MAGIC.len());
            if avail[..n] != MAGIC[..n] {
                let mut m = [0u8; 5];
                m[..n].copy_from_slice(&avail[..n]);
                return Err(self.malformed(WireError {
                    offset: 0,
                    length: n,
                    kind: WireErrorKind::BadMagic(m),
                }));
            }
            return Err(self.truncated(None, "header"));
        }
        let len = LogHeader::check_prefix(avail).map_err(|e| self.malformed(e))?;
        if !self.fill(len)? {
            return Err(self.truncated(Some(len), "header"));
        }
        let (header, len) = LogHeader::parse(self.avail()).map_err(|e| self.malformed(e))?;
        self.header = header;
        self.consume(len);
        Ok(())
    }

    /// The log's header.
    pub fn header(&self) -> &LogHeader {
        &self.header
    }

    /// The name the reader uses for the log in errors.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Offset of the next record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether the end-of-log record has been read: the process exited cleanly.
    pub fn closed(&self) -> bool {
        self.closed
    }

    /// The next record as a view borrowing the reader's buffer (no copy); `Ok(None)` at the
    /// end. After an error the reader returns `Ok(None)`.
    pub fn next_view(&mut self) -> Result<Option<RecordView<&[u8]>>, LogError> {
        let len = match self.step(|v| v.check()) {
            Ok(Some((len, ()))) => len,
            Ok(None) => return Ok(None),
            Err(e) => return Err(e),
        };
        let start = self.pos - len;
        Ok(Some(RecordView::new_unchecked(&self.buf[start..self.pos])))
    }

    /// Reads the next record's bytes, checks them with `check` (which fully validates the
    /// record) and consumes them; returns the length and what `check` made of them.
    fn step<T>(
        &mut self,
        check: impl FnOnce(&RecordView<&[u8]>) -> Result<T, WireError>,
    ) -> Result<Option<(usize, T)>, LogError> {
        if self.done {
            return Ok(None);
        }
        let result = match self.next_len() {
            Ok(Some(len)) => {
                let view = RecordView::new_unchecked(&self.buf[self.pos..self.pos + len]);
                match check(&view) {
                    Ok(t) => {
                        match view.syscall() {
                            Ok(Syscall::End) => self.closed = true,
                            Ok(s) if s.call() == Call::Exec => self.exec_pending = view.ret() >= 0,
                            _ => self.exec_pending = false,
                        }
                        self.consume(len);
                        Ok(Some((len, t)))
                    }
                    Err(e) => Err(self.malformed(e)),
                }
            }
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    /// Makes the next record's bytes available; returns its length (at least the fixed
    /// header's), `None` at a clean end.
    fn next_len(&mut self) -> Result<Option<usize>, LogError> {
        if self.follow.is_some() && self.closed {
            return Ok(None);
        }
        if !self.fill(record::field::LEN.end)? {
            if self.avail().is_empty() {
                return Ok(None);
            }
            return Err(self.truncated(None, "record"));
        }
        let view = RecordView::new_unchecked(self.avail());
        let len = view.len();
        if len < record::HEADER_LEN {
            return Err(self.malformed(WireError {
                offset: 0,
                length: 2,
                kind: WireErrorKind::BadRecordLength(len as u16),
            }));
        }
        if !self.fill(len)? {
            return Err(self.truncated(Some(len), "record"));
        }
        Ok(Some(len))
    }

    fn avail(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        self.offset += n as u64;
    }

    fn malformed(&self, e: WireError) -> LogError {
        LogError::Malformed {
            file: self.file.clone(),
            offset: self.offset + e.offset as u64,
            length: e.length,
            kind: e.kind,
        }
    }

    fn truncated(&self, needed: Option<usize>, what: &'static str) -> LogError {
        LogError::Truncated {
            file: self.file.clone(),
            offset: self.offset,
            present: self.avail().len() as u64,
            needed: needed.map(|n| n as u64),
            what,
        }
    }

    /// Makes `need` bytes available from `pos`; `Ok(false)` when the log ends first.
    fn fill(&mut self, need: usize) -> Result<bool, LogError> {
        if self.pos > 0 && self.buf.len() - self.pos < need {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        while self.buf.len() - self.pos < need {
            let old = self.buf.len();
            // Grow by a chunk at a time: a length field that promises more than the input
            // holds must not allocate what it promises.
            self.buf.resize(old + CHUNK, 0);
            let res = self.inner.read(&mut self.buf[old..]);
            let n = match res {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => 0,
                Err(source) => {
                    self.buf.truncate(old);
                    return Err(LogError::Io {
                        file: self.file.clone(),
                        offset: self.offset + (old - self.pos) as u64,
                        source,
                    });
                }
            };
            self.buf.truncate(old + n);
            if n > 0 {
                if let Some(f) = &mut self.follow {
                    f.last_growth = Instant::now();
                }
                continue;
            }
            if !self.keep_following() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// At the end of the bytes: whether to wait and read again (sleeping `poll` first).
    fn keep_following(&mut self) -> bool {
        let pending_exec = self.exec_pending;
        let header = &self.header;
        let Some(f) = &mut self.follow else {
            return false;
        };
        if f.opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
        {
            return false;
        }
        if f.opts
            .idle_timeout
            .is_some_and(|t| f.last_growth.elapsed() >= t)
        {
            return false;
        }
        if f.opts.watch_writer && f.last_check.elapsed() >= WRITER_CHECK {
            f.last_check = Instant::now();
            if let Some(path) = &f.path {
                if pending_exec
                    && path
                        .with_file_name(header.log_name().next_image().to_string())
                        .exists()
                {
                    return false;
                }
            }
            if f.path.is_some() && writer_gone(header) {
                // The writer may have written its last bytes just before leaving: one more
                // read happens because the caller loops once more with `watch_writer` off.
                f.opts.watch_writer = false;
                f.opts.idle_timeout = Some(Duration::ZERO);
                return true;
            }
        }
        std::thread::sleep(f.opts.poll);
        true
    }
}

/// Whether the process that wrote a log is known to be gone: it ran on this host and no
/// process with its pid and start time exists any more.
fn writer_gone(header: &LogHeader) -> bool {
    let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") else {
        return false;
    };
    if host.trim_end() != header.hostname {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{}/stat", header.pid)) {
        Err(_) => true,
        Ok(stat) => {
            header.start_ticks != 0
                && crate::proc_start_ticks(&stat).is_some_and(|t| t != header.start_ticks)
        }
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Record, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        // A closure: `Record::parse` itself is not general enough over the view's lifetime.
        #[allow(clippy::redundant_closure)]
        match self.step(|v| Record::parse(v)) {
            Ok(Some((_, rec))) => Some(Ok(rec)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// Opens a log file and reads its header.
pub fn open(path: impl AsRef<Path>) -> Result<Reader<BufReader<File>>, LogError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let f = File::open(path).map_err(|source| LogError::Open {
        file: name.clone(),
        source,
    })?;
    Reader::new(BufReader::new(f), name)
}

/// Opens a log file to follow it while it grows (see [`Follow`]).
pub fn open_following(path: impl AsRef<Path>, follow: Follow) -> Result<Reader<File>, LogError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let f = File::open(path).map_err(|source| LogError::Open {
        file: name.clone(),
        source,
    })?;
    Reader::build(f, name, Some((follow, Some(path.to_path_buf()))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Endpoint, Writer};

    fn sample_log() -> (Vec<u8>, Vec<Record>, Vec<u64>) {
        let header = crate::header::tests::sample();
        let mut recs = vec![
            Record::new(Syscall::Socket, 1, 10, 3, 3),
            Record::new(Syscall::Write, 2, 10, 3, 100),
            Record::new(Syscall::Read, 3, 11, 3, 40),
        ];
        recs[0].socket = Some(crate::SocketKind {
            family: 2,
            sock_type: 1,
            protocol: 0,
        });
        let mut c = Record::new(Syscall::Connect, 4, 10, 3, 0);
        c.peer = Some(Endpoint::Inet("127.0.0.1:80".parse().unwrap()));
        c.local = Some(Endpoint::Inet("127.0.0.1:40000".parse().unwrap()));
        recs.push(c);
        let mut w = Writer::new(Vec::new(), &header).unwrap();
        let mut ends = Vec::new();
        for r in &recs {
            w.write(r).unwrap();
            ends.push(w.get_ref().len() as u64);
        }
        let bytes = w.finish(5, 10).unwrap();
        recs.push(Record::new(Syscall::End, 5, 10, -1, 0));
        ends.push(bytes.len() as u64);
        (bytes, recs, ends)
    }

    #[test]
    fn reads_all() {
        let (bytes, recs, _) = sample_log();
        let r = Reader::new(&bytes[..], "x").unwrap();
        assert_eq!(r.header(), &crate::header::tests::sample());
        let got: Vec<Record> = r.map(Result::unwrap).collect();
        assert_eq!(got, recs);
    }

    #[test]
    fn truncation_at_every_offset() {
        let (bytes, recs, ends) = sample_log();
        let header_len = crate::header::tests::sample().to_bytes().unwrap().len();
        for cut in 0..bytes.len() {
            let data = &bytes[..cut];
            let reader = Reader::new(data, "cut.cwlog");
            if cut < header_len {
                match reader {
                    Err(LogError::Truncated {
                        offset: 0,
                        present,
                        what: "header",
                        ..
                    }) => assert_eq!(present, cut as u64),
                    Err(e) => panic!("cut {cut}: {e}"),
                    Ok(_) => panic!("cut {cut}: header accepted"),
                }
                continue;
            }
            let mut ok = Vec::new();
            let mut errs = Vec::new();
            for item in reader.unwrap() {
                match item {
                    Ok(r) => ok.push(r),
                    Err(e) => errs.push(e),
                }
            }
            // Complete records before the cut, then one error unless the cut is on a boundary.
            let complete = ends.iter().filter(|&&e| e <= cut as u64).count();
            assert_eq!(ok, recs[..complete], "cut {cut}");
            let start = if complete == 0 {
                header_len as u64
            } else {
                ends[complete - 1]
            };
            if start == cut as u64 {
                assert!(errs.is_empty(), "cut {cut}: {errs:?}");
            } else {
                assert_eq!(errs.len(), 1, "cut {cut}");
                match &errs[0] {
                    LogError::Truncated {
                        file,
                        offset,
                        present,
                        ..
                    } => {
                        assert_eq!(file, "cut.cwlog");
                        assert_eq!(*offset, start);
                        assert_eq!(*present, cut as u64 - start);
                    }
                    e => panic!("cut {cut}: {e}"),
                }
                assert!(errs[0].to_string().starts_with(&format!(
                    "cut.cwlog: truncated at offset {start}: {} bytes present",
                    cut as u64 - start
                )));
            }
        }
    }

    #[test]
    fn not_a_log() {
        let e = Reader::new(&b"hello world, this is text"[..], "t.txt")
            .err()
            .unwrap();
        assert!(matches!(
            e,
            LogError::Malformed {
                kind: WireErrorKind::BadMagic(_),
                ..
            }
        ));
        assert!(e.to_string().starts_with("t.txt: offset 0: not a causeway"));
        let e = Reader::new(&b"abc"[..], "t").err().unwrap();
        assert!(matches!(e, LogError::Malformed { .. }));
    }

    #[test]
    fn huge_lengths_do_not_allocate() {
        // Found by the fuzzer: a header length of 4 GiB.
        let data = [
            67, 87, 76, 79, 71, 1, 0, 255, 255, 255, 255, 255, 255, 255, 38, 90, 0, 7, 0, 0, 0, 0,
            0, 0, 0, 250, 0,
        ];
        assert!(matches!(
            Reader::new(&data[..], "f").err().unwrap(),
            LogError::Malformed {
                offset: 7,
                kind: WireErrorKind::BadHeaderLength(u32::MAX),
                ..
            }
        ));
        // A record promising 65535 bytes of which 3 are there.
        let (mut bytes, _, ends) = sample_log();
        bytes.truncate(ends[0] as usize);
        bytes.extend_from_slice(&[0xff, 0xff, 1]);
        let items: Vec<_> = Reader::new(&bytes[..], "f").unwrap().collect();
        assert!(matches!(
            items[1],
            Err(LogError::Truncated {
                present: 3,
                needed: Some(65535),
                ..
            })
        ));
    }

    #[test]
    fn bad_record_reports_offset() {
        let (mut bytes, _, ends) = sample_log();
        let at = ends[1] as usize; // the third record starts here
        bytes[at + 2] = 250; // unknown syscall code
        let items: Vec<_> = Reader::new(&bytes[..], "b").unwrap().collect();
        assert_eq!(items.len(), 3);
        match &items[2] {
            Err(LogError::Malformed { offset, kind, .. }) => {
                assert_eq!(*offset, at as u64 + 2);
                assert_eq!(*kind, WireErrorKind::UnknownSyscall(250));
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn views_borrow() {
        let (bytes, recs, _) = sample_log();
        let mut r = Reader::new(&bytes[..], "x").unwrap();
        let mut n = 0;
        while let Some(v) = r.next_view().unwrap() {
            assert_eq!(v.time_ns(), recs[n].time_ns);
            n += 1;
        }
        assert_eq!(n, recs.len());
        assert!(r.closed());
    }

    /// A reader that hands out a log in pieces, as a growing file does.
    struct Growing {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl Read for Growing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            // Every other call finds nothing new, like a poll at the end of a file.
            self.step += 1;
            if self.step % 2 == 0 {
                return Ok(0);
            }
            let n = buf.len().min(7).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn follow_reads_growing_log_to_end_record() {
        let (bytes, recs, _) = sample_log();
        let g = Growing {
            data: bytes,
            at: 0,
            step: 0,
        };
        let follow = Follow {
            poll: Duration::from_millis(1),
            idle_timeout: Some(Duration::from_secs(5)),
            ..Follow::default()
        };
        let r = Reader::following(g, "g", follow).unwrap();
        let got: Vec<Record> = r.map(Result::unwrap).collect();
        assert_eq!(got, recs);
    }

    #[test]
    fn follow_stops_when_told_and_reports_partial_record() {
        let (bytes, recs, ends) = sample_log();
        let cut = ends[1] as usize + 5;
        let stop = Arc::new(AtomicBool::new(false));
        let follow = Follow {
            poll: Duration::from_millis(1),
            stop: Some(stop.clone()),
            ..Follow::default()
        };
        let data = bytes[..cut].to_vec();
        let t = std::thread::spawn(move || {
            Reader::following(&data[..], "s", follow)
                .unwrap()
                .collect::<Vec<_>>()
        });
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, Ordering::Relaxed);
        let items = t.join().unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].as_ref().unwrap(), &recs[0]);
        assert!(matches!(
            items[2],
            Err(LogError::Truncated { present: 5, .. })
        ));
    }

    #[test]
    fn follow_ends_when_the_writer_is_gone() {
        // A log "written" on this host by a process that has exited: following it ends
        // without waiting for the (long) idle timeout.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let mut header = crate::header::tests::sample();
        header.hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap()
            .trim_end()
            .to_string();
        header.pid = pid;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(header.log_name().to_string());
        let mut w = Writer::new(Vec::new(), &header).unwrap();
        w.write(&Record::new(Syscall::Write, 1, 1, 3, 10)).unwrap();
        std::fs::write(&path, w.into_inner()).unwrap();
        let follow = Follow {
            poll: Duration::from_millis(5),
            idle_timeout: Some(Duration::from_secs(30)),
            ..Follow::default()
        };
        let started = Instant::now();
        let got: Vec<Record> = open_following(&path, follow)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got.len(), 1);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn follow_ends_when_the_next_image_appears_after_exec() {
        let d = tempfile::tempdir().unwrap();
        let mut header = crate::header::tests::sample();
        header.hostname = "elsewhere".into(); // never checked as a live process here
        let path = d.path().join(header.log_name().to_string());
        let mut w = Writer::new(Vec::new(), &header).unwrap();
        let mut exec = Record::new(Syscall::Execve, 2, 1, -1, 0);
        exec.path = Some(b"/bin/true".to_vec());
        w.write(&exec).unwrap();
        std::fs::write(&path, w.into_inner()).unwrap();
        let next = d.path().join(header.log_name().next_image().to_string());
        let follow = Follow {
            poll: Duration::from_millis(5),
            idle_timeout: Some(Duration::from_secs(30)),
            ..Follow::default()
        };
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            std::fs::write(next, b"").unwrap();
        });
        let started = Instant::now();
        let got: Vec<Record> = open_following(&path, follow)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        t.join().unwrap();
        assert_eq!(got, [exec]);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn follow_file_ends_on_idle_timeout() {
        let d = tempfile::tempdir().unwrap();
        let (bytes, recs, ends) = sample_log();
        let path = d.path().join("h.1.0.cwlog");
        std::fs::write(&path, &bytes[..ends[2] as usize]).unwrap();
        let follow = Follow {
            poll: Duration::from_millis(2),
            idle_timeout: Some(Duration::from_millis(100)),
            ..Follow::default()
        };
        let started = Instant::now();
        let got: Vec<Record> = open_following(&path, follow)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got, recs[..3]);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
