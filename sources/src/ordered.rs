//! Message traces in event-time order when their hosts' clocks disagree.
//!
//! A trace file is written in the order of its raw timestamps: the generator sorts its rows by
//! send time (else receive time), and so does a trace merged from per-host logs (`sort -n`),
//! each stamp in its own host's clock. With clocks an hour apart, rows that are a millisecond
//! apart in true time lie an hour of trace apart in the file. Read in file order and aligned,
//! the rows of the hosts whose clocks are behind would come an hour late.
//!
//! So a file is read by several cursors, each taking the rows of its own hosts (the host that
//! stamped a row's event time: the sender, else the receiver) in file order and skipping the
//! rest, and the cursors are merged by aligned event time. A cursor reads the rows of hosts
//! whose coarse offsets ([`crate::clocks`]) lie within [`TracePlan::GROUP_NS`] of each other
//! and whose rows overlap in the file: in a file sorted by raw time (or by true time) its rows
//! come in the order of its hosts' clocks, and it holds back only as much as their offsets
//! differ. Hosts whose rows do not overlap (per-host logs one after the other) get cursors of
//! their own. A cursor begins at its hosts' first row and ends after their last, as a pass
//! over the file before the run found them ([`survey`]); the pass also gives the clock
//! evidence, and one of the cursors (the tail) takes every row no other does: rows with no
//! timestamp or no address, rows of hosts past the table's capacity, rows appended after the
//! pass. Every row is thus read, counted and sent by exactly one cursor; rows are never lost.
//!
//! - **Input**: a trace file (plain or gzip) and its [`TracePlan`]; a pipe (`-`, a FIFO) is
//!   read once, so it gets [`TraceOrder::Buffered`] instead: the offsets are estimated from
//!   its first rows ([`BUFFER_ROWS`] or [`BUFFER_SAMPLE_NS`] of raw time), a host first seen
//!   later gets its own from the rows before it (its receive stamps), and the rows pass
//!   through a reorder buffer of at most [`BUFFER_ROWS`]; rows displaced further than it
//!   holds leave out of order, and the source counts those more than its lateness behind as
//!   late. It warns when an offset it estimated is not zero.
//! - **Output**: the rows, each with its raw timestamps and its aligned event time
//!   ([`TraceRow::event_ns`]), in event-time order as far as each cursor's rows come in their
//!   hosts' clock order.
//! - **State**: per cursor, an open file and its read buffer (64 KiB, and a gzip decoder),
//!   and the rows it holds back: those within its hosts' offset spread of the newest
//!   (at most [`TracePlan::GROUP_NS`] of its rows) and never more than [`HELD_ROWS`] over the
//!   cursors (then the earliest leaves early). At most [`TracePlan::MAX_CURSORS`] cursors.
//!   The survey holds per host its first and last row's position: `O(hosts)`.
//! - **Cost**: the survey reads and parses the file once before the run (the timestamps and
//!   ends of each row: about 0.15 s for 775,000 rows). Each cursor then reads its own stretch
//!   of the file; a row of another cursor costs a split and the parse of one address. On the
//!   generator's 775,000-message multi-tier trace (3.3 h) with clocks within ±1 h, 7 cursors
//!   read 5.2 times the file: reading alone (`--emit stats`) takes 0.85-1.05 s of CPU against
//!   0.35 s with synchronised clocks, peak RSS 11.5 MiB against 11.0; the whole analysis
//!   (with `link`) 4.9 s of CPU against 4.6 s, peak RSS 58 MiB against 53. With every clock
//!   within a group (offsets of seconds) there is one cursor and one pass.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use flate2::read::MultiGzDecoder;

use crate::Warning;
use crate::clocks::{Evidence, HostTable, Solution};
use crate::input::{InputError, InputSpec, ProgressCounter};
use crate::observation::{Batch, Nanos, TraceRow};
use crate::origin::OriginId;
use crate::reader::{Ledger, ObservationReader};
use crate::stats::SourceStats;
use crate::trace::{Span, TraceReader, tally};

type Stream = Box<dyn Read + Send>;

/// Rows a reader holds back at most, over its cursors.
pub const HELD_ROWS: usize = 262_144;

/// Rows a pipe's reorder buffer holds at most.
pub const BUFFER_ROWS: usize = 100_000;

/// How much raw time of a pipe's first rows its clock offsets are estimated from.
pub const BUFFER_SAMPLE_NS: Nanos = 10_000_000_000;

/// How a message trace is read.
#[derive(Clone, Debug, Default)]
pub enum TraceOrder {
    /// In file order, each row's event time its raw time: no alignment (`causeway stats`),
    /// or every host's offset 0.
    #[default]
    File,
    /// By the cursors of a plan, merged by event time.
    Planned(Arc<TracePlan>),
    /// Read once (a pipe): through a bounded reorder buffer, with offsets from its first rows.
    Buffered,
}

/// Opens `path` as a byte stream, gunzipped if it is gzip, from byte `skip` of its content.
fn stream_at(path: &str, skip: u64) -> io::Result<Stream> {
    let mut file = File::open(path)?;
    let mut magic = [0u8; 2];
    let mut got = 0;
    while got < magic.len() {
        match file.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if got == 2 && magic == [0x1f, 0x8b] {
        file.seek(SeekFrom::Start(0))?;
        let mut s: Stream = Box::new(MultiGzDecoder::new(BufReader::with_capacity(
            64 << 10,
            file,
        )));
        let skipped = io::copy(&mut (&mut s).take(skip), &mut io::sink())?;
        if skipped < skip {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the file ends at byte {skipped} of its content, before {skip}"),
            ));
        }
        Ok(s)
    } else {
        file.seek(SeekFrom::Start(skip))?;
        Ok(Box::new(file))
    }
}

fn header(path: &str, origin: OriginId) -> Result<TraceReader<Stream>, String> {
    let stream = stream_at(path, 0).map_err(|e| e.to_string())?;
    TraceReader::new(stream, origin).map_err(|e| e.to_string())
}

/// The rows of one host (or of none) in a file: the first one's offset and data row, and
/// where the last one ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RowSpan {
    offset: u64,
    row: u64,
    end: u64,
}

impl RowSpan {
    fn widen(span: &mut Option<RowSpan>, at: Span) {
        let end = at.offset + at.len;
        match span {
            Some(s) => s.end = s.end.max(end),
            None => {
                *span = Some(RowSpan {
                    offset: at.offset,
                    row: at.row,
                    end,
                })
            }
        }
    }
}

/// Where one trace file's rows lie, by the host whose clock stamped their event times, as a
/// pass over the whole file found them.
#[derive(Clone, Debug)]
pub struct Survey {
    path: String,
    origin: OriginId,
    /// Per host number.
    spans: Vec<Option<RowSpan>>,
    /// Rows of no host (no timestamp, no address, a host past the table's capacity).
    orphans: Option<RowSpan>,
    /// Where the data rows start.
    data_start: u64,
    /// Where the pass ended.
    end: u64,
    /// Records read.
    pub rows: u64,
    /// How far a row's raw time lies at most before that of a row ahead of it in the file.
    pub disorder_ns: Nanos,
    /// The earliest and the latest raw time of a row (`None`: no row has a time).
    pub span_ns: Option<(Nanos, Nanos)>,
    /// The file's size (compressed, for gzip), for the progress display.
    file_len: u64,
}

/// Reads the message trace `spec` once, adding what its rows say about clocks to `evidence`
/// and noting where each host's rows lie. Errors name the file and, for a read that failed,
/// the offset.
pub fn survey(spec: &InputSpec, evidence: &mut Evidence) -> Result<Survey, InputError> {
    let fail = |reason: String| InputError {
        path: spec.path.clone(),
        reason,
    };
    let mut rows = header(&spec.path, spec.origin).map_err(fail)?;
    let data_start = rows.position();
    let mut spans: Vec<Option<RowSpan>> = Vec::new();
    let mut orphans = None;
    let mut count = 0u64;
    let (mut newest, mut disorder_ns) = (0, 0);
    let mut earliest: Option<Nanos> = None;
    loop {
        let at = match rows.advance() {
            Ok(Some(at)) => at,
            Ok(None) => break,
            Err(e) => {
                return Err(fail(format!(
                    "offset {}: read error while surveying clocks: {e}",
                    rows.position()
                )));
            }
        };
        count += 1;
        // The owner as the cursors will find it: the host of the clock address.
        let owner = rows.clock_address().and_then(|a| evidence.host(&a));
        if let Ok((send, recv, src, dst)) = rows.times_and_ends() {
            evidence.add(send, recv, &src, &dst);
            if let Some(raw) = send.or(recv) {
                newest = raw.max(newest);
                disorder_ns = disorder_ns.max(newest - raw);
                earliest = Some(earliest.map_or(raw, |e| e.min(raw)));
            }
        }
        match owner {
            Some(h) => {
                let h = h as usize;
                if spans.len() <= h {
                    spans.resize(h + 1, None);
                }
                RowSpan::widen(&mut spans[h], at);
            }
            None => RowSpan::widen(&mut orphans, at),
        }
    }
    let file_len = std::fs::metadata(&spec.path).map_or(0, |m| m.len());
    Ok(Survey {
        path: spec.path.clone(),
        origin: spec.origin,
        spans,
        orphans,
        data_start,
        end: rows.position(),
        rows: count,
        disorder_ns,
        span_ns: earliest.map(|e| (e, newest)),
        file_len,
    })
}

impl Survey {
    /// The bytes of its data rows.
    pub fn bytes(&self) -> u64 {
        self.end.saturating_sub(self.data_start)
    }

    /// The hosts with rows in this file.
    pub fn hosts(&self) -> impl Iterator<Item = u32> + '_ {
        self.spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(i, _)| i as u32)
    }
}

/// One cursor of a [`TracePlan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CursorPlan {
    /// Where it starts: a row's offset, and that row's number.
    pub offset: u64,
    /// The data row at `offset`.
    pub row: u64,
    /// Where it stops (the end of its last row); `None`: the end of the file.
    pub end: Option<u64>,
    /// The smallest and largest offset of its hosts, ns.
    pub offsets_ns: (i64, i64),
    /// How many hosts it reads.
    pub hosts: usize,
}

/// How one trace file is read in event-time order: its cursors, and which reads which host.
#[derive(Clone, Debug)]
pub struct TracePlan {
    path: String,
    origin: OriginId,
    hosts: HostTable,
    /// Per host number.
    offsets: Vec<i64>,
    /// Per host number: its cursor ([`NO_CURSOR`]: the tail's).
    cursor_of: Vec<u16>,
    cursors: Vec<CursorPlan>,
    tail: usize,
    surveyed_end: u64,
    /// Progress bytes per byte of content (compressed over plain, for gzip).
    progress_scale: f64,
}

const NO_CURSOR: u16 = u16::MAX;

impl TracePlan {
    /// Hosts whose offsets lie within this of a group's smallest share a cursor.
    pub const GROUP_NS: i64 = 10_000_000_000;
    /// Most cursors over one file (the group width grows until there are no more).
    pub const MAX_CURSORS: usize = 64;
    /// How far out of time order a file whose clocks agree may be and still be read in file
    /// order (per-host logs one after the other are not, and get a cursor per host).
    pub const DISORDER_NS: Nanos = 1_000_000_000;

    /// Plans the reading of `survey`'s file with the offsets of `solution` (over `evidence`'s
    /// hosts); `None` when every host with rows in it has offset 0 and the file is in time
    /// order to within [`Self::DISORDER_NS`]: it is then read in file order with its raw
    /// times, as without alignment.
    pub fn new(survey: &Survey, evidence: &Evidence, solution: &Solution) -> Option<TracePlan> {
        let hosts = evidence.hosts();
        let offsets: Vec<i64> = (0..hosts.len() as u32)
            .map(|h| solution.offset(h))
            .collect();
        // (offset, span, host)
        let mut present: Vec<(i64, RowSpan, u32)> = survey
            .spans
            .iter()
            .enumerate()
            .filter_map(|(h, s)| s.map(|s| (offsets.get(h).copied().unwrap_or(0), s, h as u32)))
            .collect();
        if present.iter().all(|p| p.0 == 0) && survey.disorder_ns <= Self::DISORDER_NS {
            return None;
        }
        present.sort_by_key(|p| (p.0, p.1.offset, p.2));
        let mut width = Self::GROUP_NS;
        let mut split = true;
        let groups = loop {
            let groups = group(&present, width, split);
            if groups.len() <= Self::MAX_CURSORS {
                break groups;
            }
            if width > i64::MAX / 8 {
                if !split {
                    break groups;
                }
                split = false;
            } else {
                width *= 4;
            }
        };
        let mut cursor_of = vec![NO_CURSOR; hosts.len()];
        let mut cursors: Vec<CursorPlan> = groups
            .iter()
            .enumerate()
            .map(|(i, members)| {
                let mut c = CursorPlan {
                    offset: u64::MAX,
                    row: 0,
                    end: Some(0),
                    offsets_ns: (i64::MAX, i64::MIN),
                    hosts: members.len(),
                };
                for &(offset, span, h) in members {
                    if let Some(slot) = cursor_of.get_mut(h as usize) {
                        *slot = i as u16;
                    }
                    if span.offset < c.offset {
                        (c.offset, c.row) = (span.offset, span.row);
                    }
                    c.end = c.end.max(Some(span.end));
                    c.offsets_ns = (c.offsets_ns.0.min(offset), c.offsets_ns.1.max(offset));
                }
                c
            })
            .collect();
        // The tail: the cursor that ends last reads on to the end of the file and takes the
        // rows of no host (whose times are taken as the reference's).
        let tail = (0..cursors.len())
            .max_by_key(|&i| (cursors[i].end, Reverse(i)))
            .unwrap_or(0);
        if let Some(t) = cursors.get_mut(tail) {
            t.end = None;
            if let Some(o) = survey.orphans {
                if o.offset < t.offset {
                    (t.offset, t.row) = (o.offset, o.row);
                }
                t.offsets_ns = (t.offsets_ns.0.min(0), t.offsets_ns.1.max(0));
            }
        } else {
            cursors.push(CursorPlan {
                offset: survey.data_start,
                row: 0,
                end: None,
                offsets_ns: (0, 0),
                hosts: 0,
            });
        }
        let progress_scale = if survey.end > 0 && survey.file_len > 0 {
            survey.file_len as f64 / survey.end as f64
        } else {
            1.0
        };
        Some(TracePlan {
            path: survey.path.clone(),
            origin: survey.origin,
            hosts: hosts.clone(),
            offsets,
            cursor_of,
            cursors,
            tail,
            surveyed_end: survey.end,
            progress_scale,
        })
    }

    /// The cursors.
    pub fn cursors(&self) -> &[CursorPlan] {
        &self.cursors
    }

    /// How many bytes of the file its cursors read together, against its size: what the
    /// cursors cost over one pass.
    pub fn bytes_read(&self) -> u64 {
        self.cursors
            .iter()
            .map(|c| c.end.unwrap_or(self.surveyed_end).saturating_sub(c.offset))
            .sum()
    }
}

/// Groups `present` (sorted by offset, then first row) into cursors: runs of offsets within
/// `width` of the run's first; within a run, with `split`, hosts whose rows overlap in the
/// file (a host whose rows start after all the others' ended reads on its own).
fn group(
    present: &[(i64, RowSpan, u32)],
    width: i64,
    split: bool,
) -> Vec<Vec<(i64, RowSpan, u32)>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < present.len() {
        let first = present[i].0;
        let mut j = i;
        while j < present.len() && present[j].0.saturating_sub(first) <= width {
            j += 1;
        }
        let mut run: Vec<(i64, RowSpan, u32)> = present[i..j].to_vec();
        if split {
            run.sort_by_key(|p| (p.1.offset, p.2));
            let mut current: Vec<(i64, RowSpan, u32)> = Vec::new();
            let mut end = 0;
            for p in run {
                if !current.is_empty() && p.1.offset >= end {
                    out.push(std::mem::take(&mut current));
                }
                end = if current.is_empty() {
                    p.1.end
                } else {
                    end.max(p.1.end)
                };
                current.push(p);
            }
            if !current.is_empty() {
                out.push(current);
            }
        } else {
            out.push(run);
        }
        i = j;
    }
    out
}

/// A row held back, by event time and then the order it was read in.
#[derive(Debug)]
struct Held {
    event_ns: Nanos,
    seq: u64,
    row: TraceRow,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.event_ns, self.seq) == (o.event_ns, o.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.event_ns, self.seq).cmp(&(o.event_ns, o.seq))
    }
}

/// Rows held back until no row still to come can be earlier.
#[derive(Debug, Default)]
struct Holding {
    held: BinaryHeap<Reverse<Held>>,
    seq: u64,
    /// The newest raw time read.
    newest_raw: Option<Nanos>,
}

impl Holding {
    fn push(&mut self, raw: Nanos, row: TraceRow) {
        self.newest_raw = self.newest_raw.max(Some(raw));
        self.held.push(Reverse(Held {
            event_ns: row.event_ns,
            seq: self.seq,
            row,
        }));
        self.seq += 1;
    }

    /// Whether the earliest held row may leave: rows still to come have raw times from the
    /// newest on, so event times from the newest less the largest offset on; or more than
    /// `cap` are held.
    fn ready(&self, max_offset: i64, cap: usize) -> bool {
        let Some(Reverse(first)) = self.held.peek() else {
            return false;
        };
        self.held.len() > cap
            || self.newest_raw.is_some_and(|n| {
                i128::from(first.event_ns) < i128::from(n) - i128::from(max_offset)
            })
    }

    fn first(&self) -> Option<Nanos> {
        self.held.peek().map(|r| r.0.event_ns)
    }

    fn pop(&mut self) -> Option<TraceRow> {
        self.held.pop().map(|r| r.0.row)
    }
}

struct Cursor {
    rows: TraceReader<Stream>,
    index: usize,
    end: Option<u64>,
    max_offset: i64,
    cap: usize,
    holding: Holding,
    done: bool,
}

/// A message-trace file read by the cursors of its [`TracePlan`], merged by event time; see
/// the module documentation.
pub struct ClockOrdered {
    plan: Arc<TracePlan>,
    cursors: Vec<Cursor>,
    ledger: Ledger,
    progress: Option<ProgressCounter>,
    /// Progress bytes not yet added (fractions of a byte, for gzip).
    progress_owed: f64,
    done: bool,
}

impl ClockOrdered {
    /// Opens the cursors of `plan` over `spec`'s file.
    pub fn open(
        spec: &InputSpec,
        plan: Arc<TracePlan>,
        progress: Option<ProgressCounter>,
    ) -> Result<Self, InputError> {
        let fail = |reason: String| InputError {
            path: spec.path.clone(),
            reason,
        };
        let head = header(&plan.path, plan.origin).map_err(fail)?;
        let cap = (HELD_ROWS / plan.cursors.len().max(1)).max(4096);
        let mut cursors = Vec::with_capacity(plan.cursors.len());
        for (index, c) in plan.cursors.iter().enumerate() {
            let stream = stream_at(&plan.path, c.offset)
                .map_err(|e| fail(format!("offset {}: {e}", c.offset)))?;
            cursors.push(Cursor {
                rows: head.resume(stream, c.offset, c.row),
                index,
                end: c.end,
                max_offset: c.offsets_ns.1,
                cap,
                holding: Holding::default(),
                done: false,
            });
        }
        let ledger = Ledger::new(plan.origin, &spec.path, "message trace (csv)");
        Ok(ClockOrdered {
            plan,
            cursors,
            ledger,
            progress,
            progress_owed: 0.0,
            done: false,
        })
    }

    /// Reads cursor `i` until its earliest held row may leave, or it ends.
    fn fill(&mut self, i: usize) {
        let plan = &*self.plan;
        let Some(c) = self.cursors.get_mut(i) else {
            return;
        };
        while !c.done && !c.holding.ready(c.max_offset, c.cap) {
            if c.end.is_some_and(|end| c.rows.position() >= end) {
                c.done = true;
                break;
            }
            let at = match c.rows.advance() {
                Ok(Some(at)) => at,
                Ok(None) => {
                    c.done = true;
                    break;
                }
                Err(e) => {
                    let at = c.rows.position();
                    self.ledger.io_error(at, e);
                    c.done = true;
                    break;
                }
            };
            let host = c.rows.clock_address().and_then(|a| plan.hosts.get(&a));
            let owner = match host {
                Some(h) if at.offset < plan.surveyed_end => {
                    match plan.cursor_of.get(h as usize).copied() {
                        Some(NO_CURSOR) | None => plan.tail,
                        Some(o) => usize::from(o),
                    }
                }
                _ => plan.tail,
            };
            if owner != c.index {
                continue;
            }
            if let Some(p) = &self.progress {
                self.progress_owed += at.len as f64 * plan.progress_scale;
                let whole = self.progress_owed.floor();
                if whole >= 1.0 {
                    p.fetch_add(whole as u64, Ordering::Relaxed);
                    self.progress_owed -= whole;
                }
            }
            let parsed = c.rows.parse_current(at.row);
            let Some(mut row) = tally(parsed, at, &mut self.ledger.stats, &mut self.ledger.damage)
            else {
                continue;
            };
            let offset = host
                .and_then(|h| plan.offsets.get(h as usize))
                .copied()
                .unwrap_or(0);
            let raw = row.event_ns;
            row.event_ns = raw.saturating_add_signed(-offset);
            c.holding.push(raw, row);
        }
    }
}

impl ObservationReader for ClockOrdered {
    fn origin(&self) -> OriginId {
        self.ledger.origin
    }

    fn reserve(&self, max: usize, out: &mut Batch) {
        out.rows.reserve(max);
    }

    fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
        if self.done {
            return false;
        }
        for i in 0..self.cursors.len() {
            self.fill(i);
        }
        let mut n = 0;
        while n < max {
            // Every cursor has a row that may leave, or has ended.
            let best = self
                .cursors
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.holding.first().map(|t| (t, i)))
                .min();
            let Some((_, i)) = best else {
                self.done = true;
                self.ledger.finish();
                return false;
            };
            if let Some(row) = self.cursors[i].holding.pop() {
                out.rows.push(row);
                n += 1;
            }
            self.fill(i);
        }
        self.ledger.drain_damage();
        true
    }

    fn take_stats(&mut self) -> SourceStats {
        self.ledger.stats.take()
    }

    fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.ledger.warnings)
    }
}

/// A message trace that can be read only once (a pipe), put in event-time order through a
/// bounded buffer; see the module documentation.
pub struct Buffered<R: Read> {
    rows: TraceReader<R>,
    ledger: Ledger,
    /// What the rows so far say about the clocks (each host's first rows).
    evidence: Evidence,
    /// Until the first offsets are known: the first rows, with the host that stamped each.
    sample: Option<Vec<(TraceRow, Option<u32>)>>,
    reference: Option<u32>,
    /// Per host number: its offset, once placed (a host is placed once, and kept).
    offsets: Vec<Option<i64>>,
    /// Rows since the last solve: a host not placed yet is tried again every
    /// [`BUFFER_SOLVE_EVERY`] rows.
    since_solve: u64,
    max_offset: i64,
    /// Whether any offset is not 0: else rows leave as they come.
    reorder: bool,
    holding: Holding,
    ended: bool,
    done: bool,
}

/// How many rows a pipe's reader reads before it tries again to place a host whose rows came
/// before it had an offset (their event times are then their raw times).
pub const BUFFER_SOLVE_EVERY: u64 = 1024;

impl<R: Read + Send> Buffered<R> {
    /// A buffered reader over an opened message trace.
    pub fn new(rows: TraceReader<R>, origin: OriginId, path: &str) -> Self {
        Buffered {
            rows,
            ledger: Ledger::new(origin, path, "message trace (csv)"),
            evidence: Evidence::default(),
            sample: Some(Vec::new()),
            reference: None,
            offsets: Vec::new(),
            since_solve: 0,
            max_offset: 0,
            reorder: false,
            holding: Holding::default(),
            ended: false,
            done: false,
        }
    }

    /// The next row, taken into the evidence, with the host that stamped it.
    fn next(&mut self) -> Option<(TraceRow, Option<u32>)> {
        if self.ended {
            return None;
        }
        match self
            .rows
            .next_row(&mut self.ledger.stats, &mut self.ledger.damage)
        {
            Ok(Some(row)) => {
                let stamp = self
                    .evidence
                    .add(row.send_ns, row.recv_ns, &row.src, &row.dst);
                self.since_solve += 1;
                Some((row, stamp))
            }
            Ok(None) => {
                self.ended = true;
                None
            }
            Err(e) => {
                let at = self.rows.position();
                self.ledger.io_error(at, e);
                self.ended = true;
                None
            }
        }
    }

    fn offset(&self, host: Option<u32>) -> Option<i64> {
        host.and_then(|h| self.offsets.get(h as usize).copied().flatten())
    }

    fn hold(&mut self, mut row: TraceRow, host: Option<u32>) {
        if host.is_some() && self.offset(host).is_none() && self.since_solve >= BUFFER_SOLVE_EVERY {
            self.place();
        }
        let offset = self.offset(host).unwrap_or(0);
        let raw = row.event_ns;
        row.event_ns = raw.saturating_add_signed(-offset);
        self.holding.push(raw, row);
    }

    /// Solves the evidence so far and gives the hosts not placed yet their offsets (the
    /// reference: the busiest host of the first rows). Warns the first time an offset is not
    /// 0.
    fn place(&mut self) {
        self.since_solve = 0;
        let Some(reference) = self.reference.or_else(|| self.evidence.busiest()) else {
            return;
        };
        self.reference = Some(reference);
        // Only the reference's group: a slot once set keeps its offset, and a group placed
        // on its own now could join the reference's later.
        let solution = self.evidence.solve(reference, &[]);
        self.offsets.resize(self.evidence.hosts().len(), None);
        for (slot, e) in self.offsets.iter_mut().zip(&solution.estimates) {
            if let (None, Some(e)) = (&slot, e) {
                *slot = Some(e.offset_ns);
            }
        }
        let placed = || self.offsets.iter().flatten().copied();
        self.max_offset = placed().max().unwrap_or(0).max(0);
        if !self.reorder && placed().any(|o| o != 0) {
            self.reorder = true;
            let shown = self
                .evidence
                .hosts()
                .key(reference)
                .map_or_else(String::new, ToString::to_string);
            let spread = placed().map(i64::unsigned_abs).max().unwrap_or(0);
            self.ledger.warnings.push(Warning {
                origin: self.ledger.origin,
                path: self.ledger.path.clone(),
                offset: None,
                message: format!(
                    "its hosts' clocks differ (by up to {:.3} s from {shown}); read once (a \
                     pipe), its rows are put in event-time order through a buffer of at most \
                     {BUFFER_ROWS} rows, with each host's offset estimated from the rows before \
                     its first, and rows further out of order come late (counted in stats). \
                     Give it as a file to have it read in order whatever its clocks",
                    spread as f64 / 1e9,
                ),
            });
        }
    }

    /// Reads the first rows, estimates the offsets from them and holds them.
    fn sample(&mut self) {
        let Some(mut rows) = self.sample.take() else {
            return;
        };
        let mut first = None;
        while rows.len() < BUFFER_ROWS {
            let Some((row, host)) = self.next() else {
                break;
            };
            let raw = row.ts_ns();
            let f = *first.get_or_insert(raw);
            rows.push((row, host));
            if raw.saturating_sub(f) > BUFFER_SAMPLE_NS {
                break;
            }
        }
        self.place();
        for (row, host) in rows {
            self.hold(row, host);
        }
    }
}

impl<R: Read + Send> ObservationReader for Buffered<R> {
    fn origin(&self) -> OriginId {
        self.ledger.origin
    }

    fn reserve(&self, max: usize, out: &mut Batch) {
        out.rows.reserve(max);
    }

    fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
        if self.done {
            return false;
        }
        self.sample();
        let mut n = 0;
        while n < max {
            let cap = if self.reorder { BUFFER_ROWS } else { 0 };
            while !self.ended && !self.holding.ready(self.max_offset, cap) {
                if let Some((row, host)) = self.next() {
                    self.hold(row, host);
                }
            }
            match self.holding.pop() {
                Some(row) => {
                    out.rows.push(row);
                    n += 1;
                }
                None => {
                    self.done = true;
                    self.ledger.finish();
                    return false;
                }
            }
        }
        self.ledger.drain_damage();
        true
    }

    fn take_stats(&mut self) -> SourceStats {
        self.ledger.stats.take()
    }

    fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.ledger.warnings)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::observation::Address;
    use crate::stats::SkipReason;

    const MS: u64 = 1_000_000;
    const S: i64 = 1_000_000_000;
    const T0: u64 = 1_767_225_600_000_000_000;

    /// One exchange every 10 ms of true time: A calls B, B calls C, C and B answer; one-way
    /// latency 0.2 ms. Rows (raw send, raw receive, src, dst, true send), each stamp in its
    /// host's clock (`offsets`, ns).
    fn exchanges(n: u64, offsets: [i64; 3]) -> Vec<(u64, u64, String, String, u64)> {
        let ip = |h: usize| format!("10.0.0.{}", h + 1);
        let mut rows = Vec::new();
        for k in 0..n {
            let t = T0 + k * 10 * MS;
            for (at, from, to, port) in [
                (0, 0, 1, 80),
                (MS, 1, 2, 5432),
                (3 * MS, 2, 1, 0),
                (5 * MS, 1, 0, 0),
            ] {
                let send = t + at;
                let recv = send + MS / 5;
                let (src, dst) = if port == 0 {
                    (
                        format!("{}:{}", ip(from), if from == 1 { 80 } else { 5432 }),
                        format!("{}:{}", ip(to), 40_000 + k % 1000),
                    )
                } else {
                    (
                        format!("{}:{}", ip(from), 40_000 + k % 1000),
                        format!("{}:{port}", ip(to)),
                    )
                };
                rows.push((
                    send.saturating_add_signed(offsets[from]),
                    recv.saturating_add_signed(offsets[to]),
                    src,
                    dst,
                    send,
                ));
            }
        }
        rows
    }

    /// The rows as CSV, in the order given, with a bad row and one without timestamps after
    /// the `at`-th; returns the text and the bad row's offset.
    fn csv(rows: &[(u64, u64, String, String, u64)], at: usize) -> (String, u64) {
        let mut text = String::from("send_ns,recv_ns,src,dst\n");
        let mut bad = 0;
        for (i, r) in rows.iter().enumerate() {
            text.push_str(&format!("{},{},{},{}\n", r.0, r.1, r.2, r.3));
            if i == at {
                bad = text.len() as u64;
                text.push_str("xx,1,10.0.0.1:1,10.0.0.2:80\n,,10.0.0.1:1,10.0.0.2:80\n");
            }
        }
        (text, bad)
    }

    struct Read {
        rows: Vec<TraceRow>,
        stats: SourceStats,
        warnings: Vec<Warning>,
    }

    fn drain(mut r: Box<dyn ObservationReader>) -> Read {
        let mut out = Batch::default();
        while r.read_batch(100, &mut out) {}
        let (stats, warnings) = (r.take_stats(), r.take_warnings());
        Read {
            rows: out.rows,
            stats,
            warnings,
        }
    }

    fn spec(path: &std::path::Path) -> InputSpec {
        InputSpec {
            origin: OriginId(0),
            path: path.to_string_lossy().into_owned(),
        }
    }

    /// Surveys `path`, aligns its hosts to 10.0.0.1 and plans it.
    fn planned(path: &std::path::Path) -> Option<Arc<TracePlan>> {
        let mut evidence = Evidence::default();
        let survey = survey(&spec(path), &mut evidence).unwrap();
        let reference = evidence.hosts().get(&Address::parse("10.0.0.1:1")).unwrap();
        let solution = evidence.solve(reference, &[]);
        TracePlan::new(&survey, &evidence, &solution).map(Arc::new)
    }

    fn check_in_order(read: &Read, rows: &[(u64, u64, String, String, u64)]) {
        assert_eq!(read.rows.len(), rows.len());
        let mut seen: Vec<u64> = read.rows.iter().map(|r| r.row).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), rows.len(), "every row once");
        assert!(
            read.rows.windows(2).all(|w| w[0].event_ns <= w[1].event_ns),
            "in event-time order"
        );
        for r in &read.rows {
            let truth = rows
                .iter()
                .find(|x| Some(x.0) == r.send_ns && Some(x.1) == r.recv_ns)
                .unwrap();
            assert!(r.event_ns.abs_diff(truth.4) <= MS, "{r:?} vs {}", truth.4);
        }
    }

    #[test]
    fn a_file_in_raw_time_order_comes_out_in_event_time_order_with_every_row_counted() {
        let dir = tempfile::tempdir().unwrap();
        let mut rows = exchanges(300, [0, 3600 * S, -1800 * S]);
        rows.sort_by_key(|r| (r.0, r.1));
        let (text, bad) = csv(&rows, 500);
        let path = dir.path().join("t.csv");
        std::fs::write(&path, &text).unwrap();
        let plan = planned(&path).unwrap();
        assert_eq!(plan.cursors().len(), 3);
        let read = drain(Box::new(
            ClockOrdered::open(&spec(&path), plan, None).unwrap(),
        ));
        check_in_order(&read, &rows);
        assert_eq!(read.stats.records, rows.len() as u64 + 2);
        assert_eq!(read.stats.skipped(SkipReason::BadRow), 1);
        assert_eq!(read.stats.skipped(SkipReason::NoTimestamp), 1);
        assert_eq!(
            read.stats.bytes,
            text.len() as u64 - "send_ns,recv_ns,src,dst\n".len() as u64
        );
        assert_eq!(read.warnings.len(), 1, "{:?}", read.warnings);
        assert_eq!(read.warnings[0].offset, Some(bad));
        // Row numbers are the file's.
        let first = read.rows.iter().find(|r| r.row == 0).unwrap();
        assert_eq!(
            (first.send_ns, first.recv_ns),
            (Some(rows[0].0), Some(rows[0].1))
        );

        // Gzip-compressed, the same.
        let gz = dir.path().join("t.csv.gz");
        let mut w =
            flate2::write::GzEncoder::new(File::create(&gz).unwrap(), flate2::Compression::fast());
        w.write_all(text.as_bytes()).unwrap();
        w.finish().unwrap();
        let plan = planned(&gz).unwrap();
        let zipped = drain(Box::new(
            ClockOrdered::open(&spec(&gz), plan, None).unwrap(),
        ));
        assert_eq!(zipped.rows, read.rows);
        assert_eq!(zipped.stats, read.stats);
    }

    #[test]
    fn clocks_that_agree_in_a_file_in_order_leave_it_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let mut rows = exchanges(100, [0, 0, 0]);
        rows.sort_by_key(|r| (r.0, r.1));
        let path = dir.path().join("t.csv");
        std::fs::write(&path, csv(&rows, 10).0).unwrap();
        assert!(planned(&path).is_none());
    }

    #[test]
    fn per_host_logs_one_after_another_get_cursors_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut rows = exchanges(300, [0, 0, 0]);
        // Each host's sends, in its own order, one host after the other.
        rows.sort_by_key(|r| (r.2.split(':').next().unwrap_or("").to_owned(), r.0));
        let path = dir.path().join("t.csv");
        std::fs::write(&path, csv(&rows, 5).0).unwrap();
        let plan = planned(&path).unwrap();
        assert_eq!(plan.cursors().len(), 3);
        let read = drain(Box::new(
            ClockOrdered::open(&spec(&path), plan, None).unwrap(),
        ));
        check_in_order(&read, &rows);
    }

    #[test]
    fn rows_appended_after_the_survey_are_read_too() {
        let dir = tempfile::tempdir().unwrap();
        let mut rows = exchanges(100, [0, 60 * S, -60 * S]);
        rows.sort_by_key(|r| (r.0, r.1));
        let path = dir.path().join("t.csv");
        std::fs::write(&path, csv(&rows, 3).0).unwrap();
        let plan = planned(&path).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        writeln!(f, "{},,10.0.0.9:1,10.0.0.1:80", T0 + 5 * MS).unwrap();
        writeln!(f, "{},{},10.0.0.2:80,10.0.0.1:4000", rows[0].0, rows[0].1).unwrap();
        drop(f);
        let read = drain(Box::new(
            ClockOrdered::open(&spec(&path), plan, None).unwrap(),
        ));
        assert_eq!(read.rows.len(), rows.len() + 2);
        assert_eq!(read.stats.records, rows.len() as u64 + 4);
    }

    #[test]
    fn a_pipe_is_put_in_order_through_its_buffer_with_a_warning() {
        let mut rows = exchanges(300, [0, 4 * S, -3 * S]);
        rows.sort_by_key(|r| (r.0, r.1));
        let (text, _) = csv(&rows, 7);
        let reader =
            TraceReader::new(std::io::Cursor::new(text.into_bytes()), OriginId(0)).unwrap();
        let read = drain(Box::new(Buffered::new(reader, OriginId(0), "-")));
        // Aligned to the busiest host (B), whose clock is 4 s ahead.
        assert_eq!(read.rows.len(), rows.len());
        assert!(read.rows.windows(2).all(|w| w[0].event_ns <= w[1].event_ns));
        for r in &read.rows {
            let truth = rows
                .iter()
                .find(|x| Some(x.0) == r.send_ns && Some(x.1) == r.recv_ns)
                .unwrap();
            assert!(r.event_ns.abs_diff(truth.4 + 4 * S as u64) <= MS);
        }
        assert!(
            read.warnings
                .iter()
                .any(|w| w.message.contains("event-time order through a buffer")),
            "{:?}",
            read.warnings
        );
        assert_eq!(read.stats.skipped(SkipReason::BadRow), 1);
    }
}
