//! The socket-log source: a directory of socket-call logs written by `causeway capture` (the
//! LD_PRELOAD library, one log per process image) turned into [`SocketCall`] observations.
//!
//! - **Input**: a capture directory ([`causeway_capture::read_dir`]). Its logs are opened in
//!   the order their processes started, when the merge reaches that time, and closed when
//!   read, so open files follow the processes alive at a time, not all there were.
//! - **Output**: one [`SocketCall`] per send or receive that moved bytes, its descriptor
//!   resolved to the connection's two endpoints through the `connect`, `accept`, `bind` and
//!   `socket` calls before it, across `dup`s, and across `fork` (a child starts with its
//!   parent's descriptors as they were at the fork) and `exec` (the same process goes on).
//!   Stream offsets count the bytes each process sent or received on a connection, so both
//!   ends number the bytes alike. Nodes are `program[pid]@host` (program: the base name of
//!   `argv[0]`), or the host with [`NodeGranularity::Host`].
//! - **Order**: a log holds whole records of its threads in the order their buffers were
//!   flushed, not in time order. Each log is read through a reorder buffer that releases a
//!   record once the log has shown records [`REORDER_NS`] newer (or has ended); logs are
//!   merged by time. A record later than that is still sent (and counted late downstream).
//! - **Damage**: a log cut short (its process killed mid-write) is read up to the damage; the
//!   damage is reported once, naming the file and offset, and counted. Sends and receives on
//!   descriptors whose connection the log does not name (sockets inherited from before the
//!   capture, socket pairs, UNIX datagrams) are counted as `unnamed_socket` and skipped.
//! - **State**: per live process, its descriptor table; per open log, its reorder buffer
//!   (records of [`REORDER_NS`]). Freed at each process's end-of-log record.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use causeway_capture::{
    Call, Endpoint as LogEndpoint, LogError, LogHeader, Origin, Reader, Record, SocketKind,
};

use crate::decode::NodeGranularity;
use crate::observation::{
    Address, Batch, Direction, Endpoint, Nanos, Opener, SocketCall, Transport,
};
use crate::origin::OriginId;
use crate::stats::{SkipReason, SourceStats};
use crate::{ObservationReader, Warning, warning_limit};

/// How far (ns) records of one log may be out of time order and still be put back in order.
pub const REORDER_NS: Nanos = 1_000_000_000;
/// Following a directory: a record is released once it is this old (ns), and the watermark
/// trails the clock by as much: the library's 100 ms flush age, with room. A thread's records
/// that reach the log later than that (it went quiet with records buffered) are counted late.
pub const FOLLOW_HOLD_NS: Nanos = 500_000_000;
/// Following a directory: how often it is listed for new logs.
const RESCAN: Duration = Duration::from_millis(200);
/// Following a directory: how often a log read to its end is read again.
const REREAD: Duration = Duration::from_millis(50);
/// Following a directory: how often a log's writer is checked for being gone.
const WRITER_CHECK: Duration = Duration::from_secs(1);

/// One connection as a process knows it.
#[derive(Clone, Debug)]
struct Conn {
    transport: Option<Transport>,
    local: Option<Address>,
    peer: Option<Address>,
    /// Which end connected, once a `connect` or `accept` named it.
    opener: Opener,
    /// Bytes sent and received so far (stream sockets).
    sent: u64,
    received: u64,
    /// Descriptors referring to it.
    refs: u32,
}

/// A data call's connection as the log names it ([`Conn::name_call`]).
struct Named {
    transport: Transport,
    local: Address,
    peer: Address,
    /// For stream sockets: the bytes this end had moved that way before the call.
    offset: u64,
    opener: Opener,
}

impl Conn {
    /// The connection a send or receive of `bytes` (record `r`) moved data on, counting the
    /// bytes on a stream; `None` if the log does not name it (no transport, or an endpoint
    /// missing), in which case nothing is counted.
    fn name_call(&mut self, r: &Record, direction: Direction, bytes: u64) -> Option<Named> {
        let transport = self.transport?;
        let (local, peer, offset) = if transport.is_stream() {
            let (local, peer) = (self.local.clone()?, self.peer.clone()?);
            let counter = match direction {
                Direction::Send => &mut self.sent,
                Direction::Recv => &mut self.received,
            };
            let offset = *counter;
            *counter += bytes;
            (local, peer, offset)
        } else {
            if let (None, Some(l)) = (&self.local, r.local.as_ref().and_then(inet)) {
                self.local = Some(l);
            }
            let peer = r.peer.as_ref().and_then(inet).or(self.peer.clone())?;
            (self.local.clone()?, peer, 0)
        };
        Some(Named {
            transport,
            local,
            peer,
            offset,
            opener: self.opener,
        })
    }
}

/// What the source knows of one process: its node name and its descriptors.
#[derive(Clone, Debug, Default)]
struct Process {
    node: String,
    fds: HashMap<i32, u64>,
    conns: HashMap<u64, Conn>,
    next: u64,
}

impl Process {
    fn conn_mut(&mut self, fd: i32) -> Option<&mut Conn> {
        let id = self.fds.get(&fd)?;
        self.conns.get_mut(id)
    }

    /// Points `fd` at a new connection (dropping what it referred to).
    fn fresh(&mut self, fd: i32, transport: Option<Transport>) -> &mut Conn {
        self.close(fd);
        self.next += 1;
        let id = self.next;
        self.fds.insert(fd, id);
        self.conns.entry(id).or_insert(Conn {
            transport,
            local: None,
            peer: None,
            opener: Opener::Unknown,
            sent: 0,
            received: 0,
            refs: 1,
        })
    }

    fn close(&mut self, fd: i32) {
        if let Some(id) = self.fds.remove(&fd) {
            if let Some(c) = self.conns.get_mut(&id) {
                c.refs = c.refs.saturating_sub(1);
                if c.refs == 0 {
                    self.conns.remove(&id);
                }
            }
        }
    }

    fn dup(&mut self, old: i32, new: i32) {
        if old == new {
            return;
        }
        let Some(&id) = self.fds.get(&old) else {
            // Not a socket we know: the new descriptor is not one either.
            self.close(new);
            return;
        };
        self.close(new);
        self.fds.insert(new, id);
        if let Some(c) = self.conns.get_mut(&id) {
            c.refs += 1;
        }
    }
}

/// One log being read, with its reorder buffer.
struct OpenLog {
    reader: Reader<BufReader<File>>,
    path: PathBuf,
    /// Following: read to the end of what is written; read again from `reader.offset()`.
    at_end: bool,
    last_read: Instant,
    last_writer_check: Instant,
    /// Following: the writer is gone and its buffers were recovered; the next end is the end.
    last_pass: bool,
    key: (String, u32),
    /// Records read but not yet released, by time (then read order).
    buffer: BinaryHeap<Reverse<(Nanos, u64, Box<Record>)>>,
    seq: u64,
    newest: Nanos,
    done: bool,
    started: bool,
}

impl OpenLog {
    /// Reads until the oldest buffered record can be released. Errors end the log; when
    /// `following`, the end of what is written, or a record still being written, does not.
    fn fill(&mut self, damage: &mut Vec<LogError>, following: bool) {
        while !self.done && !self.at_end {
            if let Some(Reverse((t, _, _))) = self.buffer.peek() {
                if self.newest >= t.saturating_add(REORDER_NS) {
                    return;
                }
            }
            match self.reader.next() {
                Some(Ok(r)) => {
                    self.newest = self.newest.max(r.time_ns);
                    self.seq += 1;
                    self.buffer
                        .push(Reverse((r.time_ns, self.seq, Box::new(r))));
                }
                Some(Err(LogError::Truncated { offset, .. }))
                    if following && !self.last_pass && !self.reader.closed() =>
                {
                    // A write under way: read again from the record's start.
                    self.at_end = true;
                    self.resume_at(offset);
                }
                Some(Err(e)) => {
                    damage.push(e);
                    self.done = true;
                }
                None if following && !self.last_pass && !self.reader.closed() => {
                    self.at_end = true;
                    let offset = self.reader.offset();
                    self.resume_at(offset);
                }
                None => self.done = true,
            }
        }
    }

    /// A fresh reader of this log from `offset` (a record boundary) on.
    fn resume_at(&mut self, offset: u64) {
        self.last_read = Instant::now();
        let file = File::open(&self.path).and_then(|mut f| {
            f.seek(SeekFrom::Start(offset))?;
            Ok(f)
        });
        match file {
            Ok(f) => {
                self.reader = Reader::resume(
                    BufReader::new(f),
                    self.path.display().to_string(),
                    self.reader.header().clone(),
                    offset,
                );
            }
            Err(_) => self.done = true,
        }
    }

    /// Following: reads again a log read to its end, when due; checks now and then whether
    /// its writer is gone, and if so recovers what it had buffered (its spill file) and reads
    /// the log one last time.
    fn poll(&mut self) {
        if !self.at_end || self.last_read.elapsed() < REREAD {
            return;
        }
        if self.last_writer_check.elapsed() >= WRITER_CHECK {
            self.last_writer_check = Instant::now();
            if !causeway_capture::spill::writer_alive(self.reader.header()) {
                let _ = causeway_capture::spill::drain(&self.path);
                self.last_pass = true;
            }
        }
        self.at_end = false;
        self.last_read = Instant::now();
    }

    fn head(&self) -> Option<Nanos> {
        self.buffer.peek().map(|Reverse((t, _, _))| *t)
    }
}

/// A log not opened yet.
struct Waiting {
    start_ns: Nanos,
    path: std::path::PathBuf,
    header: LogHeader,
}

/// Socket calls from a capture directory; see the module documentation.
pub struct SocketLogReader {
    origin: OriginId,
    granularity: NodeGranularity,
    waiting: VecDeque<Waiting>,
    open: Vec<OpenLog>,
    processes: HashMap<(String, u32), Process>,
    /// Children's descriptor tables, taken at the fork.
    forks: HashMap<(String, u32), Process>,
    stats: SourceStats,
    warnings: Vec<Warning>,
    shown: usize,
    done: bool,
    /// Following the directory while its programs run ([`SocketLogReader::follow`]).
    following: Option<Following>,
}

/// What following a directory keeps: which logs it knows, and when it last listed them.
struct Following {
    dir: PathBuf,
    known: HashSet<PathBuf>,
    last_scan: Instant,
}

/// The wall clock, ns since the epoch.
fn wall_ns() -> Nanos {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as Nanos)
}

/// Whether `dir` looks like a capture directory (it holds at least one log).
pub fn is_capture_dir(dir: &Path) -> bool {
    causeway_capture::read_dir(dir).is_ok_and(|l| !l.is_empty())
}

impl SocketLogReader {
    /// Lists the logs of `dir` and reads their headers. Fails when the directory cannot be
    /// listed or holds no log.
    pub fn open(
        dir: &Path,
        origin: OriginId,
        granularity: NodeGranularity,
    ) -> Result<SocketLogReader, String> {
        let mut warnings = Vec::new();
        // Records killed processes had buffered, recovered into their logs first.
        match causeway_capture::spill::drain_dir(dir) {
            Ok((d, n)) if d.records > 0 || d.cut > 0 => tracing::info!(
                "{}: recovered {} records of {n} processes that ended without writing them \
                 out ({} buffers already written, {} bytes of a cut record removed)",
                dir.display(),
                d.records,
                d.already_written,
                d.cut
            ),
            Ok(_) => {}
            Err(e) => warnings.push(Warning {
                origin,
                path: dir.display().to_string(),
                offset: None,
                message: format!("cannot recover buffered records: {e}"),
            }),
        }
        let logs = causeway_capture::read_dir(dir).map_err(|e| e.to_string())?;
        if logs.is_empty() {
            return Err(
                "is a directory without socket-call logs (*.cwlog, written by `causeway capture`)"
                    .into(),
            );
        }
        let mut stats = SourceStats::default();
        stats
            .formats
            .insert("socket-call log".into(), logs.len() as u64);
        let mut waiting = Vec::new();
        for log in logs {
            match causeway_capture::open(&log.path) {
                Ok(r) => waiting.push(Waiting {
                    start_ns: r.header().realtime_ns,
                    header: r.header().clone(),
                    path: log.path,
                }),
                Err(e) => {
                    stats.skip(SkipReason::TruncatedRecord);
                    warnings.push(Warning {
                        origin,
                        path: log.path.display().to_string(),
                        offset: None,
                        message: e.to_string(),
                    });
                }
            }
        }
        waiting.sort_by_key(|w| (w.start_ns, w.header.pid, w.header.image));
        let mut hosts: Vec<&str> = waiting.iter().map(|w| w.header.hostname.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        if hosts.len() > 1 {
            warnings.push(Warning {
                origin,
                path: dir.display().to_string(),
                offset: None,
                message: format!(
                    "holds the logs of {} hosts ({}); one directory is one clock domain, so \
                     give each host's logs as a directory of its own",
                    hosts.len(),
                    hosts.join(", ")
                ),
            });
        }
        Ok(SocketLogReader {
            waiting: waiting.into(),
            stats,
            warnings,
            ..SocketLogReader::empty(origin, granularity)
        })
    }

    /// A reader of no log yet.
    fn empty(origin: OriginId, granularity: NodeGranularity) -> SocketLogReader {
        SocketLogReader {
            origin,
            granularity,
            waiting: VecDeque::new(),
            open: Vec::new(),
            processes: HashMap::new(),
            forks: HashMap::new(),
            stats: SourceStats::default(),
            warnings: Vec::new(),
            shown: 0,
            done: false,
            following: None,
        }
    }

    /// Like [`SocketLogReader::open`], and then follows the directory while its programs run
    /// (`analyze --follow`): logs that appear are opened, logs are read again as they grow,
    /// records are released once [`FOLLOW_HOLD_NS`] old (the watermark trails the clock by as
    /// much), and a log ends at its end-of-log record, or when its writer is gone (its
    /// buffered records recovered first). The input never ends by itself: the run's stop
    /// (Ctrl-C, `--duration`, `--count`) ends it.
    pub fn follow(
        dir: &Path,
        origin: OriginId,
        granularity: NodeGranularity,
    ) -> Result<SocketLogReader, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let mut r = match SocketLogReader::open(dir, origin, granularity) {
            Ok(r) => r,
            // No log yet: the programs have not started.
            Err(_) if causeway_capture::read_dir(dir).is_ok_and(|l| l.is_empty()) => {
                SocketLogReader::empty(origin, granularity)
            }
            Err(e) => return Err(e),
        };
        let known = r.waiting.iter().map(|w| w.path.clone()).collect();
        r.following = Some(Following {
            dir: dir.to_path_buf(),
            known,
            last_scan: Instant::now(),
        });
        Ok(r)
    }

    /// Following: lists the directory for logs not seen yet (one whose header is not all
    /// written yet is tried again at the next listing).
    fn rescan(&mut self) {
        let Some(f) = &mut self.following else {
            return;
        };
        if f.last_scan.elapsed() < RESCAN {
            return;
        }
        f.last_scan = Instant::now();
        let Ok(logs) = causeway_capture::read_dir(&f.dir) else {
            return;
        };
        let mut fresh = Vec::new();
        for log in logs {
            if f.known.contains(&log.path) {
                continue;
            }
            if let Ok(r) = causeway_capture::open(&log.path) {
                f.known.insert(log.path.clone());
                self.stats
                    .formats
                    .entry("socket-call log".into())
                    .and_modify(|n| *n += 1)
                    .or_insert(1);
                fresh.push(Waiting {
                    start_ns: r.header().realtime_ns,
                    header: r.header().clone(),
                    path: log.path,
                });
            }
        }
        if fresh.is_empty() {
            return;
        }
        let mut all: Vec<Waiting> = self.waiting.drain(..).chain(fresh).collect();
        all.sort_by_key(|w| (w.start_ns, w.header.pid, w.header.image));
        self.waiting = all.into();
    }

    /// Reports a log's damage once (up to the warning limit): the log file and the offset
    /// where it is.
    fn warn(&mut self, e: &LogError) {
        if self.shown >= warning_limit() {
            return;
        }
        self.shown += 1;
        let (file, offset) = (e.file().to_owned(), e.offset());
        let text = e.to_string();
        // The error's text starts with the file (and offset) the warning names already.
        let mut message = text.strip_prefix(file.as_str()).unwrap_or(&text);
        message = message.trim_start_matches(": ");
        let message = match offset {
            Some(o) => {
                let m = message
                    .strip_prefix(&format!("offset {o}: "))
                    .unwrap_or(message);
                m.replace(&format!("truncated at offset {o}: "), "log cut short: ")
            }
            None => message.to_owned(),
        };
        self.warnings.push(Warning {
            origin: self.origin,
            path: file,
            offset,
            message,
        });
    }

    fn open_log(&mut self, w: Waiting) {
        match causeway_capture::open(&w.path) {
            Ok(reader) => self.open.push(OpenLog {
                key: (w.header.hostname.clone(), w.header.pid),
                reader,
                path: w.path,
                at_end: false,
                last_read: Instant::now(),
                last_writer_check: Instant::now(),
                last_pass: false,
                buffer: BinaryHeap::new(),
                seq: 0,
                newest: 0,
                done: false,
                started: false,
            }),
            Err(e) => {
                self.stats.skip(SkipReason::TruncatedRecord);
                self.warn(&e);
            }
        }
    }

    /// The next record in time order across logs, with the index of its log.
    fn next_record(&mut self) -> Option<(usize, Record)> {
        let following = self.following.is_some();
        // Following: nothing younger than the hold is released (a log may yet bring older).
        let release_by = following.then(|| wall_ns().saturating_sub(FOLLOW_HOLD_NS));
        loop {
            let mut damage = Vec::new();
            for log in &mut self.open {
                if following {
                    log.poll();
                }
                log.fill(&mut damage, following);
            }
            for e in &damage {
                match e {
                    LogError::Truncated { .. } => self.stats.skip(SkipReason::TruncatedRecord),
                    _ => self.stats.skip(SkipReason::CorruptRecord),
                }
                self.warn(e);
            }
            // Logs read to the end hold nothing more.
            self.open.retain(|l| !(l.done && l.buffer.is_empty()));
            let best = self
                .open
                .iter()
                .enumerate()
                .filter_map(|(i, l)| l.head().map(|t| (t, i)))
                .min();
            // A log that starts before the best record must be read first.
            if let Some(w) = self.waiting.front() {
                if best.is_none_or(|(t, _)| w.start_ns <= t) {
                    if let Some(w) = self.waiting.pop_front() {
                        self.open_log(w);
                    }
                    continue;
                }
            }
            let (t, i) = best?;
            if release_by.is_some_and(|by| t > by) {
                return None;
            }
            let Reverse((_, _, r)) = self.open[i].buffer.pop()?;
            return Some((i, *r));
        }
    }

    /// The process a log belongs to, set up at its first record.
    fn start(&mut self, i: usize) {
        let log = &mut self.open[i];
        if log.started {
            return;
        }
        log.started = true;
        let header = log.reader.header().clone();
        let key = log.key.clone();
        let program = header
            .argv
            .first()
            .filter(|a| !a.is_empty())
            .unwrap_or(&header.exe);
        let program = program.rsplit('/').next().unwrap_or(program);
        let node = match self.granularity {
            NodeGranularity::Process => format!("{program}[{}]@{}", header.pid, header.hostname),
            NodeGranularity::Host => header.hostname.clone(),
        };
        let mut process = match header.origin {
            Origin::Fork => self.forks.remove(&key).unwrap_or_default(),
            Origin::Exec => self
                .processes
                .remove(&key)
                .or_else(|| self.forks.remove(&key))
                .unwrap_or_default(),
            _ => Process::default(),
        };
        process.node = node;
        self.processes.insert(key, process);
    }

    /// Applies one record; a data-moving call becomes an observation.
    fn apply(&mut self, i: usize, r: &Record) -> Option<SocketCall> {
        self.start(i);
        self.stats.record(r.time_ns, r.encoded_len() as u64);
        // Borrowed, not cloned: this runs for every record.
        let key = &self.open[i].key;
        let pid = key.1;
        let process = self.processes.get_mut(key)?;
        let ok = r.ret >= 0 || r.errno == Some(EINPROGRESS);
        match r.syscall.call() {
            Call::Socket if r.ret >= 0 => {
                let transport = r.socket.as_ref().and_then(transport_of);
                process.fresh(r.ret as i32, transport);
            }
            Call::Socketpair if r.ret >= 0 => {
                // Both ends unnamed: calls on them cannot be paired.
                process.fresh(r.fd, None);
                if let Some(fd2) = r.fd2 {
                    process.fresh(fd2, None);
                }
            }
            Call::Connect if ok => {
                let transport = r
                    .socket
                    .as_ref()
                    .and_then(transport_of)
                    .or_else(|| process.conn_mut(r.fd).and_then(|c| c.transport));
                let conn = match process.conn_mut(r.fd) {
                    Some(c) => c,
                    None => process.fresh(r.fd, transport),
                };
                conn.transport = conn.transport.or(transport);
                match conn.transport {
                    Some(Transport::UnixStream) => {
                        let path = r.peer.as_ref().and_then(unix_path);
                        conn.peer = path.clone().map(Address::Name);
                        conn.local = path.map(|p| Address::Name(format!("{p}#{pid}")));
                    }
                    _ => {
                        conn.peer = r.peer.as_ref().and_then(inet);
                        conn.local = r.local.as_ref().and_then(inet).or(conn.local.take());
                    }
                }
                conn.opener = Opener::Local;
                conn.sent = 0;
                conn.received = 0;
            }
            Call::Accept if r.ret >= 0 => {
                let fd = r.fd2.unwrap_or(r.ret as i32);
                let transport = r
                    .socket
                    .as_ref()
                    .and_then(transport_of)
                    .or_else(|| process.conn_mut(r.fd).and_then(|c| c.transport));
                let conn = process.fresh(fd, transport);
                conn.opener = Opener::Peer;
                match transport {
                    Some(Transport::UnixStream) => {
                        let path = r.local.as_ref().and_then(unix_path);
                        let peer_pid = r.peer_pid.unwrap_or(0);
                        conn.local = path.clone().map(Address::Name);
                        conn.peer = path.map(|p| Address::Name(format!("{p}#{peer_pid}")));
                    }
                    _ => {
                        conn.local = r.local.as_ref().and_then(inet);
                        conn.peer = r.peer.as_ref().and_then(inet);
                    }
                }
            }
            Call::Bind | Call::Listen if r.ret >= 0 => {
                if let Some(conn) = process.conn_mut(r.fd) {
                    if let Some(l) = r.local.as_ref().and_then(inet) {
                        conn.local = Some(l);
                    }
                }
            }
            Call::Close => process.close(r.fd),
            Call::Dup if r.ret >= 0 => {
                let new = r.fd2.unwrap_or(r.ret as i32);
                process.dup(r.fd, new);
            }
            Call::Fork if r.ret > 0 => {
                let child = process.clone();
                self.forks.insert((key.0.clone(), r.ret as u32), child);
            }
            Call::End => {
                self.processes.remove(key);
            }
            Call::Send | Call::Recv if r.ret > 0 => {
                let direction = match r.syscall.call() {
                    Call::Send => Direction::Send,
                    _ => Direction::Recv,
                };
                let bytes = r.ret as u64;
                let named = process
                    .conn_mut(r.fd)
                    .and_then(|conn| conn.name_call(r, direction, bytes));
                let Some(Named {
                    transport,
                    local,
                    peer,
                    offset,
                    opener,
                }) = named
                else {
                    tracing::debug!(
                        "unnamed socket: {} fd {} {:?} at {}",
                        process.node,
                        r.fd,
                        r.syscall,
                        r.time_ns
                    );
                    self.stats.skip(SkipReason::UnnamedSocket);
                    return None;
                };
                let node = process.node.clone();
                let local = concrete(local, &peer);
                match transport {
                    Transport::Tcp => self.stats.tcp += 1,
                    Transport::Udp => self.stats.udp += 1,
                    _ => {}
                }
                return Some(SocketCall {
                    origin: self.origin,
                    ts_ns: r.time_ns,
                    node,
                    transport,
                    local,
                    peer,
                    direction,
                    offset,
                    bytes,
                    payload_hash: r.hash.unwrap_or(0),
                    opener,
                });
            }
            _ => {}
        }
        None
    }
}

/// `EINPROGRESS` on Linux: a non-blocking connect under way.
const EINPROGRESS: u16 = 115;

fn transport_of(k: &SocketKind) -> Option<Transport> {
    match (k.is_inet(), k.is_unix(), k.is_stream(), k.is_dgram()) {
        (true, _, true, _) => Some(Transport::Tcp),
        (true, _, _, true) => Some(Transport::Udp),
        (_, true, true, _) => Some(Transport::UnixStream),
        _ => None,
    }
}

/// An IP endpoint as an address (IPv4-mapped IPv6 as IPv4).
fn inet(e: &LogEndpoint) -> Option<Address> {
    let a: SocketAddr = e.inet()?;
    let ip = match a.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    Some(Address::Endpoint(Endpoint::new(ip, a.port())))
}

/// A UNIX socket's path as text (`unix:PATH`; `unix:@NAME` for the abstract namespace).
fn unix_path(e: &LogEndpoint) -> Option<String> {
    let p = e.unix_path()?;
    if p.is_empty() {
        return None;
    }
    Some(match p.strip_prefix(b"\0") {
        Some(abs) => format!("unix:@{}", String::from_utf8_lossy(abs)),
        None => format!("unix:{}", String::from_utf8_lossy(p)),
    })
}

/// A wildcard local address (an unconnected datagram socket bound to `0.0.0.0`) made
/// concrete: the loopback address when the peer is on loopback (WAP5 §4).
fn concrete(local: Address, peer: &Address) -> Address {
    match (&local, peer) {
        (Address::Endpoint(l), Address::Endpoint(p))
            if l.ip.is_unspecified() && p.ip.is_loopback() =>
        {
            Address::Endpoint(Endpoint::new(p.ip, l.port))
        }
        _ => local,
    }
}

impl ObservationReader for SocketLogReader {
    fn origin(&self) -> OriginId {
        self.origin
    }

    fn reserve(&self, max: usize, out: &mut Batch) {
        out.calls.reserve(max);
    }

    fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
        if self.done {
            return false;
        }
        self.rescan();
        let mut read = 0;
        while read < max {
            let Some((i, r)) = self.next_record() else {
                // Following, the input goes on: nothing more is due now.
                self.done = self.following.is_none();
                break;
            };
            read += 1;
            if let Some(c) = self.apply(i, &r) {
                out.calls.push(c);
            }
        }
        !self.done
    }

    fn take_stats(&mut self) -> SourceStats {
        self.stats.take()
    }

    fn is_live(&self) -> bool {
        self.following.is_some()
    }

    fn clock_now(&self) -> Option<Nanos> {
        self.following
            .as_ref()
            .map(|_| wall_ns().saturating_sub(FOLLOW_HOLD_NS))
    }

    fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_capture::{LogName, Syscall, Writer};

    const HOST: &str = "h";

    fn header(pid: u32, program: &str, origin: Origin, start: u64) -> LogHeader {
        LogHeader {
            origin,
            hostname: HOST.into(),
            pid,
            ppid: 1,
            realtime_ns: start,
            exe: format!("/usr/bin/{program}"),
            argv: vec![program.into()],
            ..LogHeader::default()
        }
    }

    fn write_log(dir: &Path, h: &LogHeader, records: &[Record], end: bool) {
        let name = LogName {
            hostname: h.hostname.clone(),
            pid: h.pid,
            image: h.image,
        };
        let file = File::create(dir.join(name.to_string())).unwrap();
        let mut w = Writer::new(file, h).unwrap();
        for r in records {
            w.write(r).unwrap();
        }
        if end {
            w.finish(
                records.iter().map(|r| r.time_ns).max().unwrap_or(0) + 1,
                h.pid,
            )
            .unwrap();
        }
    }

    fn rec(syscall: Syscall, t: u64, fd: i32, ret: i64) -> Record {
        Record::new(syscall, t, 1, fd, ret)
    }

    fn inet_ep(s: &str) -> LogEndpoint {
        LogEndpoint::Inet(s.parse().unwrap())
    }

    fn tcp_kind() -> SocketKind {
        SocketKind {
            family: 2,
            sock_type: 1,
            protocol: 6,
        }
    }

    fn read_all(dir: &Path) -> (Vec<SocketCall>, SourceStats, Vec<Warning>) {
        let mut r = SocketLogReader::open(dir, OriginId(3), NodeGranularity::Process).unwrap();
        let mut b = Batch::default();
        while r.read_batch(7, &mut b) {}
        (b.calls, r.take_stats(), r.take_warnings())
    }

    /// A client connects to a forking server; the child (which inherited the accepted socket)
    /// answers through a dup of it; the client's log holds its threads' records out of order.
    #[test]
    fn resolves_descriptors_across_fork_and_dup_and_reorders_threads() {
        let d = tempfile::tempdir().unwrap();
        let c = "127.0.0.1:40000";
        let s = "127.0.0.1:8000";
        let mut connect = rec(Syscall::Connect, 1_000, 3, 0);
        connect.local = Some(inet_ep(c));
        connect.peer = Some(inet_ep(s));
        connect.socket = Some(tcp_kind());
        let w1 = rec(Syscall::Write, 1_100, 3, 100);
        let w2 = rec(Syscall::Write, 1_200, 3, 20);
        let r1 = rec(Syscall::Read, 9_000, 3, 500);
        // Flushed by another thread's buffer first: out of time order in the file.
        write_log(
            d.path(),
            &header(10, "curl", Origin::Start, 900),
            &[connect, r1, w1, w2],
            true,
        );
        let mut accept = rec(Syscall::Accept4, 1_050, 5, 7);
        accept.local = Some(inet_ep(s));
        accept.peer = Some(inet_ep(c));
        accept.socket = Some(tcp_kind());
        accept.fd2 = Some(7);
        let fork = rec(Syscall::Fork, 1_060, -1, 21);
        write_log(
            d.path(),
            &header(20, "srv", Origin::Start, 500),
            &[accept, fork],
            true,
        );
        let mut dup = rec(Syscall::Dup2, 1_070, 7, 9);
        dup.fd2 = Some(9);
        let read = rec(Syscall::Recv, 1_300, 9, 120);
        let write = rec(Syscall::Send, 8_000, 7, 500);
        let stray = rec(Syscall::Write, 8_100, 11, 5);
        write_log(
            d.path(),
            &header(21, "srv", Origin::Fork, 1_065),
            &[dup, read, write, stray],
            false,
        );
        let (calls, stats, warnings) = read_all(d.path());
        assert!(warnings.is_empty(), "{warnings:?}");
        let got: Vec<(u64, &str, String, String, Direction, u64, u64)> = calls
            .iter()
            .map(|c| {
                (
                    c.ts_ns,
                    c.node.as_str(),
                    c.local.to_string(),
                    c.peer.to_string(),
                    c.direction,
                    c.offset,
                    c.bytes,
                )
            })
            .collect();
        use Direction::{Recv, Send};
        assert_eq!(
            got,
            vec![
                (1_100, "curl[10]@h", c.into(), s.into(), Send, 0, 100),
                (1_200, "curl[10]@h", c.into(), s.into(), Send, 100, 20),
                (1_300, "srv[21]@h", s.into(), c.into(), Recv, 0, 120),
                (8_000, "srv[21]@h", s.into(), c.into(), Send, 0, 500),
                (9_000, "curl[10]@h", c.into(), s.into(), Recv, 0, 500),
            ]
        );
        assert!(calls.iter().all(|c| c.origin == OriginId(3)));
        assert_eq!(stats.skipped(SkipReason::UnnamedSocket), 1);
        assert_eq!(stats.tcp, 5);
    }

    #[test]
    fn a_log_cut_short_is_read_up_to_the_damage_and_reported() {
        let d = tempfile::tempdir().unwrap();
        let c = "10.0.0.1:40000";
        let s = "10.0.0.2:80";
        let mut connect = rec(Syscall::Connect, 1_000, 3, 0);
        connect.local = Some(inet_ep(c));
        connect.peer = Some(inet_ep(s));
        connect.socket = Some(tcp_kind());
        let h = header(10, "curl", Origin::Start, 900);
        let writes: Vec<Record> = (0..4)
            .map(|i| rec(Syscall::Write, 1_100 + i, 3, 10))
            .collect();
        let mut all = vec![connect];
        all.extend(writes);
        write_log(d.path(), &h, &all, false);
        let path = d.path().join("h.10.0.cwlog");
        let len = std::fs::metadata(&path).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 5).unwrap();
        let (calls, stats, warnings) = read_all(d.path());
        assert_eq!(calls.len(), 3);
        assert_eq!(stats.skipped(SkipReason::TruncatedRecord), 1);
        assert_eq!(warnings.len(), 1);
        let w = warnings[0].to_string();
        assert!(w.contains("h.10.0.cwlog") && w.contains("cut short"), "{w}");
        assert!(warnings[0].offset.is_some(), "{w}");
    }

    #[test]
    fn a_directory_with_several_hosts_is_reported() {
        let d = tempfile::tempdir().unwrap();
        let mut other = header(11, "curl", Origin::Start, 900);
        other.hostname = "g".into();
        write_log(d.path(), &header(10, "curl", Origin::Start, 900), &[], true);
        write_log(d.path(), &other, &[], true);
        let (_, _, warnings) = read_all(d.path());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].message.contains("2 hosts (g, h)"),
            "{warnings:?}"
        );
    }

    #[test]
    fn following_reads_logs_as_they_grow_and_as_they_appear() {
        let d = tempfile::tempdir().unwrap();
        let connect = |t: u64, local: &str| {
            let mut c = rec(Syscall::Connect, t, 3, 0);
            c.local = Some(inet_ep(local));
            c.peer = Some(inet_ep("127.0.0.1:8000"));
            c.socket = Some(tcp_kind());
            c
        };
        let h = header(10, "curl", Origin::Start, 900);
        write_log(
            d.path(),
            &h,
            &[
                connect(1_000, "127.0.0.1:40000"),
                rec(Syscall::Write, 1_100, 3, 100),
            ],
            false,
        );
        let mut r =
            SocketLogReader::follow(d.path(), OriginId(3), NodeGranularity::Process).unwrap();
        assert!(r.is_live());
        let mut b = Batch::default();
        let mut read_until = |r: &mut SocketLogReader, n: usize| {
            let start = Instant::now();
            while b.calls.len() < n {
                assert!(r.read_batch(16, &mut b), "a followed directory never ends");
                assert!(start.elapsed() < Duration::from_secs(5), "{:?}", b.calls);
                std::thread::sleep(Duration::from_millis(20));
            }
            b.calls.len()
        };
        assert_eq!(read_until(&mut r, 1), 1);
        // The log grows: its writer writes another buffer.
        let name = LogName {
            hostname: h.hostname.clone(),
            pid: h.pid,
            image: h.image,
        };
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(d.path().join(name.to_string()))
            .unwrap();
        std::io::Write::write_all(
            &mut f,
            &rec(Syscall::Write, 1_200, 3, 20).to_bytes().unwrap(),
        )
        .unwrap();
        assert_eq!(read_until(&mut r, 2), 2);
        // A program starts: its log appears.
        write_log(
            d.path(),
            &header(11, "curl", Origin::Start, 950),
            &[
                connect(1_300, "127.0.0.1:40001"),
                rec(Syscall::Write, 1_400, 3, 7),
            ],
            false,
        );
        assert_eq!(read_until(&mut r, 3), 3);
        let now = wall_ns();
        let clock = r.clock_now().unwrap();
        assert!(clock <= now && clock + FOLLOW_HOLD_NS + 1_000_000_000 >= now);
    }
}
