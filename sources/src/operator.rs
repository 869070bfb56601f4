//! The `source` operator: a worker's inputs merged in event time, with a watermark.
//!
//! - **Input**: the [`ObservationReader`]s assigned to this worker (each input is read by
//!   exactly one worker).
//! - **Outputs**: [`Packet`]s, [`TraceRow`]s, [`SocketCall`]s, and [`SourceEvent`]s (per-origin count deltas
//!   and warnings, as data). Observations are merged across this worker's readers in
//!   timestamp order and sent at the operator's current capability, which never exceeds their
//!   event time unless they are late (see below). Timely time is event time in ns, quantised
//!   to `tick_ns`. While one reader alone has records, its batches go to timely whole, without
//!   copying records.
//! - **Event time**: a record's raw time minus its origin's coarse clock offset
//!   ([`Alignment`]), so that inputs whose clocks disagree by hours meet in time; a
//!   message-trace row's own event time, which its reader aligned by the clock of the host
//!   that stamped it (a trace's origin has no offset: its hosts have theirs).
//! - **Watermark**: per reader, the newest time it has sent (or, before it has sent anything,
//!   its first record's time; for a live reader holding nothing, its clock) minus the
//!   allowed lateness; the operator's capability follows
//!   the minimum over active readers. A record more than the allowed lateness older than the
//!   newest record its reader sent before it is late: it is still sent (at the capability)
//!   and counted in the origin's `late`. Whether a record is late depends only on its input's
//!   order, never on batching or on how inputs are spread over workers.
//! - **State**: one buffered batch per reader. Nothing grows with the input.
//! - **Run control** ([`RunControl`]): with a replay speed, a record of event time `t` is
//!   sent no earlier than `(t - t0) / speed` after the first record (`t0`) was; a stop flag
//!   (Ctrl-C), a deadline or a record count end the reading early, and the run then finishes
//!   as if the inputs had ended there.
//! - **Back-pressure**: given a probe on the end of the dataflow, the operator stops reading
//!   while its capability is more than `max_ahead_ns` past the probe's frontier, or more
//!   than `min_ahead_ns` past it with more than `max_in_flight` of its records not through
//!   the dataflow yet: a fast worker cannot outrun a slow one by more than that much event
//!   time, and the records in flight stay bounded however fast they come. A warm start's
//!   hold-back (`warmup_ns`) widens `min_ahead_ns` only until the output frontier has passed
//!   it. Both limits are
//!   first guesses at the pipeline's hold-back; where the output frontier stands still while
//!   the source waits and the process is idle, they rise past where the source stands
//!   (`HoldBack`; while the pipeline starts up, `startup_ns`, only until the frontier has
//!   passed there), so a guess too short costs a stall, never a run that waits for good. Under memory
//!   pressure ([`crate::shed`]) the lateness is at most the governor's cap, at most a quarter
//!   of `max_in_flight` may be in flight however near the frontier, and while the frontier
//!   stands still a round is read every 20 ms so that the watermark moves on. Reading ahead
//!   lets the workers of a busy pipeline work without waiting for each other, but what is
//!   read ahead waits in buffers and leaves the cache: the 4.7 million message trace (1,600
//!   messages per second of event time, about 26 s of which the clock correction, `link`
//!   and `paths` hold back) linked in 9.0-9.9 s with at most 60 s ahead, against 10.5-11.0 s
//!   with 120 s (peak RSS 115-131 MiB against 219-231), 9.5-10.2 s with 50 s, 9.7-10.3 s
//!   with 80 s, and 10.2-11.0 s with 30 or 40 s, where the source waits on the hold-back.
//! - **Cost**: per record, one comparison per reader holding records; reading and decoding
//!   are the readers' cost.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::{ProbeHandle, Scope, Stream};

use crate::observation::{Batch, Nanos, Packet, SocketCall, TraceRow};
use crate::origin::Alignment;
use crate::reader::ObservationReader;
use crate::stats::{SkipReason, SourceStats};
use crate::tcpstats::TcpSample;
use crate::{SourceEvent, Time};

/// How the source operator paces itself.
#[derive(Clone, Copy, Debug)]
pub struct SourceConfig {
    /// How far behind the newest record the watermark stays, in ns.
    pub lateness_ns: Nanos,
    /// Granularity of timely time, in ns of event time.
    pub tick_ns: Nanos,
    /// Records read from a reader at a time.
    pub batch: usize,
    /// Records sent per activation before yielding to other operators.
    pub budget: usize,
    /// How far (ns of event time) the source may run ahead of the dataflow's output frontier.
    pub max_ahead_ns: Nanos,
    /// How far it may always run ahead, whatever is in flight (at most `max_ahead_ns`): at
    /// least how far the pipeline holds its output back, or the source waits for a frontier
    /// that cannot move until it notices the stall (the process idle meanwhile) and raises this limit and
    /// `max_ahead_ns`.
    pub min_ahead_ns: Nanos,
    /// While the output frontier is within this much event time of the first record sent,
    /// the source may always run this much further ahead: a warm start holds everything
    /// back until it has seen it, and only then.
    pub warmup_ns: Nanos,
    /// How long after the first record sent (event time) the pipeline may still be starting
    /// up (waiting for its first clock estimates, with its learned waits at their maximum): a
    /// stall before the output frontier has passed that raises the read-ahead only until the
    /// frontier has passed where the source stood.
    pub startup_ns: Nanos,
    /// Beyond `min_ahead_ns`, the most of this worker's records that may be in flight (sent,
    /// and not yet passed by the output frontier).
    pub max_in_flight: u64,
    /// Resuming from a checkpoint: records before this event time were analysed by an
    /// earlier run; they are read and counted (skipped, `resumed`) but not sent.
    pub resume_ns: Option<Nanos>,
    /// Inputs read from a pipe are read on a thread of their own ([`crate::piped::Piped`]),
    /// their watermark moving on once they have been quiet this long. `None`: read as files.
    pub pipe_idle: Option<std::time::Duration>,
    /// Files are read and decoded on a thread of their own, ahead of the worker
    /// ([`crate::read_ahead::ReadAhead`]): for a job whose worker has little else to do
    /// beside reading (`causeway stats`), not where the cores are busy with workers.
    pub read_ahead_thread: bool,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            lateness_ns: 2_000_000_000,
            tick_ns: 1_000_000,
            batch: 1024,
            budget: 8192,
            max_ahead_ns: 60_000_000_000,
            min_ahead_ns: 30_000_000_000,
            warmup_ns: 0,
            startup_ns: 0,
            max_in_flight: 200_000,
            resume_ns: None,
            pipe_idle: None,
            read_ahead_thread: false,
        }
    }
}

/// How a run replays its inputs and when it stops before they end. Shared by the workers of
/// a process.
#[derive(Clone, Debug, Default)]
pub struct RunControl {
    /// Replay speed, event time per wall-clock time (`None`: as fast as possible). The first
    /// record any worker sends anchors event time to the wall clock.
    pub speed: Option<f64>,
    /// Stop reading when set (Ctrl-C, SIGTERM): what was read is analysed and reported.
    pub stop: Option<Arc<AtomicBool>>,
    /// Stop reading at this wall-clock instant.
    pub until: Option<Instant>,
    /// Stop after this many records over the process's workers.
    pub count: Option<u64>,
    /// Records sent so far, over the process's workers.
    pub sent: Arc<AtomicU64>,
    /// The pacing anchor: the first record's event time and when it was sent.
    pub anchor: Arc<OnceLock<(Nanos, Instant)>>,
}

impl RunControl {
    /// Whether reading should stop now.
    pub fn stopped(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
            || self.until.is_some_and(|t| Instant::now() >= t)
            || self
                .count
                .is_some_and(|n| self.sent.load(Ordering::Relaxed) >= n)
    }

    /// Whether records go out one at a time (pacing or a record limit).
    fn one_by_one(&self) -> bool {
        self.speed.is_some() || self.count.is_some()
    }

    /// How long to wait before sending a record of event time `ts`, if at all.
    fn wait(&self, ts: Nanos) -> Option<Duration> {
        let speed = self.speed?;
        let (t0, wall0) = *self.anchor.get_or_init(|| (ts, Instant::now()));
        let ahead = ts.saturating_sub(t0) as f64 / speed;
        let due = wall0 + Duration::from_nanos(ahead as u64);
        let now = Instant::now();
        (due > now).then(|| due - now)
    }
}

/// The streams a source produces.
pub struct SourceStreams<'scope> {
    /// Captured packets.
    pub packets: Stream<'scope, Time, Vec<Packet>>,
    /// Message-trace rows.
    pub rows: Stream<'scope, Time, Vec<TraceRow>>,
    /// Socket calls from socket-call logs.
    pub calls: Stream<'scope, Time, Vec<SocketCall>>,
    /// TCP statistics samples (`ss` logs, the live poller).
    pub tcp: Stream<'scope, Time, Vec<TcpSample>>,
    /// Count deltas and warnings.
    pub events: Stream<'scope, Time, Vec<SourceEvent>>,
}

struct Lane {
    reader: Box<dyn ObservationReader>,
    /// The batch being emitted: observations from `pos` on are still to go.
    batch: Batch,
    pos: usize,
    done: bool,
    late: u64,
    /// Records read but not sent because the run was stopped.
    stopped: u64,
    /// Records before the resume time (event time, aligned) not sent, and that time.
    resumed: u64,
    resume_ns: Option<Nanos>,
    /// Newest time sent so far.
    newest: Option<Nanos>,
    /// The origin's coarse clock offset: event time is raw time minus it.
    offset: i64,
}

impl Lane {
    fn refill(&mut self, size: usize) {
        while self.pos >= self.batch.len() && !self.done {
            self.batch.clear();
            self.pos = 0;
            // A batch handed to timely leaves an empty vector behind: size it once, rather
            // than growing it a packet at a time.
            self.reader.reserve(size, &mut self.batch);
            self.done = !self.reader.read_batch(size, &mut self.batch);
            if let Some(min) = self.resume_ns {
                let raw = min.saturating_add_signed(self.offset);
                self.resumed += self.batch.drop_before(raw) as u64;
            }
            if self.reader.is_live() {
                break;
            }
        }
    }

    /// Event time (aligned) of the next record.
    fn head_ts(&self) -> Option<Nanos> {
        self.batch
            .ts_at(self.pos)
            .map(|t| t.saturating_add_signed(-self.offset))
    }

    fn active(&self) -> bool {
        !self.done || self.pos < self.batch.len()
    }

    /// Notes a record sent at `ts`.
    #[inline]
    fn sent(&mut self, ts: Nanos, lateness: Nanos) {
        note_sent(&mut self.newest, &mut self.late, ts, lateness);
    }

    /// The lane's watermark: no on-time record from it will be older.
    fn watermark(&self, lateness: Nanos) -> Option<Nanos> {
        let seen = self.newest.or_else(|| self.head_ts());
        // A live reader's clock moves on while it has nothing to say.
        let clock = self
            .reader
            .clock_now()
            .filter(|_| self.pos >= self.batch.len())
            .map(|t| t.saturating_add_signed(-self.offset));
        seen.max(clock).map(|t| t.saturating_sub(lateness))
    }
}

/// Notes a record sent at `ts` by a lane whose newest record so far is `newest`: counts it in
/// `late` when it is more than `lateness` older than that.
#[inline]
fn note_sent(newest: &mut Option<Nanos>, late: &mut u64, ts: Nanos, lateness: Nanos) {
    match *newest {
        Some(n) if ts.saturating_add(lateness) < n => *late += 1,
        Some(n) if ts <= n => {}
        _ => *newest = Some(ts),
    }
}

/// Where the merger sends observations.
trait Emit {
    fn packet(&mut self, p: Packet);
    fn row(&mut self, r: TraceRow);
    fn call(&mut self, c: SocketCall);
    fn sample(&mut self, t: TcpSample);
    fn packets(&mut self, batch: &mut Vec<Packet>);
    fn rows(&mut self, batch: &mut Vec<TraceRow>);
    fn calls(&mut self, batch: &mut Vec<SocketCall>);
    fn samples(&mut self, batch: &mut Vec<TcpSample>);
}

/// How far the source may read ahead of the output frontier: the configured limits, raised
/// whenever the pipeline is seen to hold back more than they allow.
///
/// `min_ahead_ns` and `max_ahead_ns` are first guesses at the pipeline's hold-back. An
/// operator that holds its output back further than the source may read ahead would stall
/// the run for good: the frontier waits on input that the source waits to read. So while
/// throttled, the source watches the output frontier; if it has not moved for
/// [`HoldBack::STALL`] of wall time while the process was idle, the dataflow has done what
/// it can with what was read, and the source may read past where it stands (by a quarter
/// more, at least [`HoldBack::RAISE_NS`]).
///
/// - A stall before the output frontier has passed [`SourceConfig::startup_ns`] is the
///   pipeline starting up (the clock correction waits for its first estimates, every learned
///   wait starts at its maximum): that raise lasts only until the frontier has passed where
///   the source stood (a *boost*), as the warm start's extra read-ahead does until the frontier has passed
///   the warm-up. Any later stall raises both limits for good: a steady hold-back follows
///   from the configuration. On a busy trace every second read ahead is the trace's rate in
///   memory for the rest of the run (at parallelism 200, 620,000 messages per second of
///   event time, raises at the start had the source 3.4 s ahead and 2.8 GB resident).
/// - A frontier that stands still while the process is busy (it used at least
///   [`HoldBack::BUSY`] of a core meanwhile: a warm start's first pass, a backlog being
///   linked) is not a stall until it has stood still [`HoldBack::STALL_BUSY`].
#[derive(Debug)]
struct HoldBack {
    min_ahead_ns: Nanos,
    max_ahead_ns: Nanos,
    /// The warm start's extra read-ahead, and until when (event time) it lasts: the first
    /// record sent plus the warm-up (`None`: nothing sent yet).
    warmup_ns: Nanos,
    warm_until: Option<Time>,
    /// The first record sent (`None`: nothing sent yet).
    first: Option<Time>,
    /// [`SourceConfig::startup_ns`].
    startup_ns: Nanos,
    /// The start-up boost: how far the source may read ahead until the output frontier has
    /// passed `.1`.
    boost: Option<(Nanos, Time)>,
    /// While throttled: the output frontier as first seen there, when, and the process's CPU
    /// time then (ns).
    watch: Option<(Option<Time>, Instant, u64)>,
}

impl HoldBack {
    /// How long a frontier that does not move while the source waits and the process is
    /// idle means a stall.
    const STALL: Duration = Duration::from_millis(250);
    /// The least a stall raises the limits by (else by a quarter).
    const RAISE_NS: Nanos = 100_000_000;
    /// The share of one core the process must have used while the frontier stood still for
    /// it to be busy rather than stalled: a stalled dataflow's workers only wake to check.
    const BUSY: f64 = 0.5;
    /// How long a frontier may stand still while the process is busy before that is taken
    /// for a stall all the same (a reader or sniffer thread busy beside stalled workers).
    const STALL_BUSY: Duration = Duration::from_secs(60);
    /// Under memory pressure, how long a frontier that does not move lets the source wait
    /// before it reads another round.
    const TRICKLE: Duration = Duration::from_millis(20);

    fn new(config: &SourceConfig) -> Self {
        HoldBack {
            min_ahead_ns: config.min_ahead_ns.min(config.max_ahead_ns),
            max_ahead_ns: config.max_ahead_ns,
            warmup_ns: config.warmup_ns,
            warm_until: None,
            first: None,
            startup_ns: config.startup_ns,
            boost: None,
            watch: None,
        }
    }

    /// Notes that a record was sent at `time`: the warm-up lasts from the first.
    fn sent(&mut self, time: Time) {
        if self.first.is_none() {
            self.first = Some(time);
            self.warm_until = Some(time.saturating_add(self.warmup_ns));
        }
    }

    /// The start-up boost, while the frontier at `frontier` has not passed it.
    fn boost(&self, frontier: Option<Time>) -> Nanos {
        match (self.boost, frontier) {
            (Some((ns, until)), Some(f)) if f < until => ns,
            _ => 0,
        }
    }

    /// How far the source may always read ahead with the output frontier at `frontier`:
    /// `min_ahead_ns`, and the warm-up's too until the frontier has passed it, or the
    /// start-up boost while it lasts if that is more.
    fn min_ahead(&self, frontier: Option<Time>) -> Nanos {
        let warm = match (self.warm_until, frontier) {
            (Some(until), Some(f)) => f < until,
            (None, _) => true,
            (Some(_), None) => false,
        };
        let min = if warm {
            self.min_ahead_ns.saturating_add(self.warmup_ns)
        } else {
            self.min_ahead_ns
        };
        min.max(self.boost(frontier))
    }

    /// How far the source may read ahead at most with the output frontier at `frontier`.
    fn max_ahead(&self, frontier: Option<Time>) -> Nanos {
        self.max_ahead_ns.max(self.boost(frontier))
    }

    /// The source is throttled at capability `time` with the output frontier at `frontier`,
    /// the process having used `cpu_ns` of CPU time so far ([`process_cpu_ns`]).
    fn throttled(&mut self, time: Time, frontier: Option<Time>, now: Instant, cpu_ns: u64) {
        match self.watch {
            Some((seen, since, cpu_then)) if seen == frontier => {
                let still = now.duration_since(since);
                if still < Self::STALL {
                    return;
                }
                let used = cpu_ns.saturating_sub(cpu_then) as f64;
                if used >= Self::BUSY * still.as_nanos() as f64 && still < Self::STALL_BUSY {
                    return;
                }
                let ahead = frontier.map_or(0, |f| time.saturating_sub(f));
                let raised = ahead.saturating_add((ahead / 4).max(Self::RAISE_NS));
                // The pipeline is starting up.
                let starting = match (frontier, self.first) {
                    (Some(f), Some(first)) => f <= first.saturating_add(self.startup_ns),
                    _ => true,
                };
                tracing::info!(
                    "source: the output frontier stood still at {:.2} s into the input for \
                     {:.1} s (the process used {:.2} s of CPU meanwhile) with the source {:.2} s \
                     ahead of it; reading up to {:.2} s ahead {}",
                    frontier.map_or(0, |f| f.saturating_sub(self.first.unwrap_or(f))) as f64 / 1e9,
                    still.as_secs_f64(),
                    used / 1e9,
                    ahead as f64 / 1e9,
                    raised as f64 / 1e9,
                    if starting {
                        "until the frontier has passed there (starting up)"
                    } else {
                        "from now on"
                    }
                );
                if starting {
                    self.boost = Some((raised, time));
                } else {
                    self.min_ahead_ns = self.min_ahead_ns.max(raised);
                    self.max_ahead_ns = self.max_ahead_ns.max(raised);
                }
                self.watch = None;
            }
            _ => self.watch = Some((frontier, now, cpu_ns)),
        }
    }

    /// Under memory pressure, throttled with the output frontier at `frontier`: whether to
    /// read one round anyway, as the frontier has not moved for [`HoldBack::TRICKLE`].
    /// `cpu_ns` as for [`HoldBack::throttled`], so that a stall watched on from here is
    /// judged by the CPU used since.
    fn trickle(&mut self, frontier: Option<Time>, now: Instant, cpu_ns: u64) -> bool {
        match self.watch {
            Some((seen, since, _)) if seen == frontier => {
                let due = now.duration_since(since) >= Self::TRICKLE;
                if due {
                    self.watch = Some((frontier, now, cpu_ns));
                }
                due
            }
            _ => {
                self.watch = Some((frontier, now, cpu_ns));
                false
            }
        }
    }

    /// The source is reading.
    fn flowing(&mut self) {
        self.watch = None;
    }
}

/// The CPU time this process has used, in ns (all its threads).
fn process_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// Merges readers by timestamp and keeps the watermark.
struct Merger {
    lanes: Vec<Lane>,
    config: SourceConfig,
    control: RunControl,
    activations: u64,
    /// Records sent so far.
    emitted: u64,
}

impl Merger {
    fn refill(&mut self) {
        for lane in &mut self.lanes {
            lane.refill(self.config.batch);
        }
    }

    fn finished(&self) -> bool {
        self.lanes.iter().all(|l| !l.active())
    }

    /// The time below which no further on-time record can arrive, quantised down to a tick.
    fn watermark(&self) -> Option<Time> {
        // Under memory pressure the watermark follows the newest record more closely.
        let lateness = crate::shed::capped(self.config.lateness_ns);
        let w = self
            .lanes
            .iter()
            .filter(|l| l.active())
            .filter_map(|l| l.watermark(lateness))
            .min()?;
        Some(w - w % self.config.tick_ns.max(1))
    }

    /// [`Self::watermark`], but only while every active lane shows where it stands (a record
    /// sent or one waiting, or a clock): between reads a lane may not have refilled yet, and
    /// leaving it out would move the watermark past what it holds.
    fn settled_watermark(&self) -> Option<Time> {
        let unknown = self
            .lanes
            .iter()
            .any(|l| l.active() && l.watermark(0).is_none());
        if unknown { None } else { self.watermark() }
    }

    /// Stops every lane: their readers are not asked again, and what they hold is counted
    /// as skipped (`stopped`).
    fn stop(&mut self) {
        for lane in &mut self.lanes {
            lane.stopped += lane.batch.len().saturating_sub(lane.pos) as u64;
            lane.done = true;
            lane.pos = lane.batch.len();
        }
    }

    /// Sends up to about `budget` observations, in timestamp order across lanes, counting the
    /// late ones. Returns how long to wait when replay pacing holds the next record back.
    fn emit(&mut self, out: &mut impl Emit) -> Option<Duration> {
        let (size, budget, lateness) = (
            self.config.batch,
            self.config.budget,
            crate::shed::capped(self.config.lateness_ns),
        );
        let mut sent = 0;
        while sent < budget {
            let mut best: Option<(usize, Nanos)> = None;
            let mut holding = 0;
            for (i, lane) in self.lanes.iter().enumerate() {
                if let Some(ts) = lane.head_ts() {
                    holding += 1;
                    if best.is_none_or(|(_, b)| ts < b) {
                        best = Some((i, ts));
                    }
                }
            }
            let Some((i, head)) = best else { break };
            if self.control.one_by_one() {
                if self.control.stopped() {
                    self.stop();
                    break;
                }
                if let Some(wait) = self.control.wait(head) {
                    self.emitted += sent as u64;
                    return Some(wait);
                }
                let sent = self.control.sent.fetch_add(1, Ordering::Relaxed) + 1;
                if self.control.count.is_some_and(|n| sent > n) {
                    // Another worker sent the last one.
                    self.stop();
                    break;
                }
            }
            let one_by_one = self.control.one_by_one();
            let lane = &mut self.lanes[i];
            if holding == 1 && lane.pos == 0 && !one_by_one {
                // The only lane with records: pass its whole batch on.
                let Lane {
                    batch,
                    newest,
                    late,
                    offset,
                    ..
                } = lane;
                for ts in batch
                    .packets
                    .iter()
                    .map(|p| p.ts_ns)
                    .chain(batch.rows.iter().map(|r| r.event_ns))
                    .chain(batch.calls.iter().map(|c| c.ts_ns))
                    .chain(batch.tcp.iter().map(|t| t.ts_ns))
                {
                    note_sent(newest, late, ts.saturating_add_signed(-*offset), lateness);
                }
                let b = &mut lane.batch;
                sent += b.len();
                if !b.packets.is_empty() {
                    out.packets(&mut b.packets);
                }
                if !b.rows.is_empty() {
                    out.rows(&mut b.rows);
                }
                if !b.calls.is_empty() {
                    out.calls(&mut b.calls);
                }
                if !b.tcp.is_empty() {
                    out.samples(&mut b.tcp);
                }
                b.clear();
            } else {
                let take = if holding == 1 && !one_by_one {
                    lane.batch.len() - lane.pos
                } else {
                    1
                };
                for _ in 0..take {
                    let pos = lane.pos;
                    lane.pos += 1;
                    if let Some(p) = lane.batch.packets.get(pos).copied() {
                        lane.sent(p.ts_ns.saturating_add_signed(-lane.offset), lateness);
                        out.packet(p);
                    } else if let Some(r) = lane.batch.rows.get_mut(pos) {
                        let r = std::mem::take(r);
                        lane.sent(r.event_ns.saturating_add_signed(-lane.offset), lateness);
                        out.row(r);
                    } else if let Some(c) = lane.batch.calls.get_mut(pos) {
                        let c = std::mem::take(c);
                        lane.sent(c.ts_ns.saturating_add_signed(-lane.offset), lateness);
                        out.call(c);
                    } else if let Some(t) = lane.batch.tcp.get_mut(pos) {
                        let t = std::mem::take(t);
                        lane.sent(t.ts_ns.saturating_add_signed(-lane.offset), lateness);
                        out.sample(t);
                    }
                }
                sent += take;
            }
            // A live reader is asked once per activation (at its start): one that always has
            // a little more would otherwise keep the worker here, with the capability where
            // the activation began, until the budget is spent.
            if !lane.reader.is_live() {
                lane.refill(size);
            }
        }
        self.emitted += sent as u64;
        None
    }

    /// Count deltas and warnings; counts only every 64 activations unless `force`.
    fn events(&mut self, force: bool) -> Vec<SourceEvent> {
        self.activations += 1;
        let mut events = Vec::new();
        let counts_due = force || self.activations % 64 == 0;
        for lane in &mut self.lanes {
            events.extend(
                lane.reader
                    .take_warnings()
                    .into_iter()
                    .map(SourceEvent::Warning),
            );
            if counts_due || !lane.active() {
                let mut stats: SourceStats = lane.reader.take_stats();
                stats.late += std::mem::take(&mut lane.late);
                for _ in 0..std::mem::take(&mut lane.stopped) {
                    stats.skip(SkipReason::Stopped);
                }
                for _ in 0..std::mem::take(&mut lane.resumed) {
                    stats.skip(SkipReason::Resumed);
                }
                if !stats.is_empty() {
                    events.push(SourceEvent::Stats {
                        origin: lane.reader.origin(),
                        stats: Box::new(stats),
                    });
                }
            }
        }
        events
    }
}

/// Builds the source operator over `readers` (this worker's share of the inputs). `probe`,
/// when given, should observe the end of the dataflow; the source then applies back-pressure
/// against it.
pub fn read_inputs<'scope>(
    scope: Scope<'scope, Time>,
    readers: Vec<Box<dyn ObservationReader>>,
    config: SourceConfig,
    control: RunControl,
    alignment: &Alignment,
    probe: Option<ProbeHandle<Time>>,
) -> SourceStreams<'scope> {
    let mut builder = OperatorBuilder::new("source".to_owned(), scope);
    let activator = scope.activator_for(builder.operator_info().address);
    let (packets_out, packets) = builder.new_output::<Vec<Packet>>();
    let (rows_out, rows) = builder.new_output::<Vec<TraceRow>>();
    let (calls_out, calls) = builder.new_output::<Vec<SocketCall>>();
    let (tcp_out, tcp) = builder.new_output::<Vec<TcpSample>>();
    let (events_out, events) = builder.new_output::<Vec<SourceEvent>>();
    let mut packets_out = OutputBuilder::from(packets_out);
    let mut rows_out = OutputBuilder::from(rows_out);
    let mut calls_out = OutputBuilder::from(calls_out);
    let mut tcp_out = OutputBuilder::from(tcp_out);
    let mut events_out = OutputBuilder::from(events_out);
    let lanes = readers
        .into_iter()
        .map(|reader| Lane {
            offset: alignment.offset(reader.origin()),
            reader,
            batch: Batch::default(),
            pos: 0,
            done: false,
            late: 0,
            stopped: 0,
            resumed: 0,
            resume_ns: config.resume_ns,
            newest: None,
        })
        .collect();
    let mut merger = Merger {
        lanes,
        config,
        control,
        activations: 0,
        emitted: 0,
    };
    // (capability time, records sent up to then), for the records in flight.
    let mut sent_log: std::collections::VecDeque<(Time, u64)> = Default::default();
    let mut delivered: u64 = 0;
    let mut hold = HoldBack::new(&config);

    builder.build(move |mut capabilities| {
        let event_cap = capabilities.pop();
        let tcp_cap = capabilities.pop();
        let call_cap = capabilities.pop();
        let row_cap = capabilities.pop();
        let packet_cap = capabilities.pop();
        let mut caps = match (packet_cap, row_cap, call_cap, tcp_cap, event_cap) {
            (Some(p), Some(r), Some(c), Some(t), Some(e)) => Some([p, r, c, t, e]),
            _ => None,
        };
        move |_frontiers| {
            let Some(caps_now) = caps.as_mut() else {
                return;
            };
            // Under memory pressure the watermark moves without a record read (the governor
            // cuts the lateness), and the stages wait on it: throttled or not, the capability
            // follows it, once every lane shows where it stands.
            if let Some(w) = merger.settled_watermark().filter(|_| crate::shed::active()) {
                if w > *caps_now[0].time() {
                    for c in caps_now.iter_mut() {
                        c.downgrade(&w);
                    }
                }
            }
            let time = *caps_now[0].time();
            // Once told to stop, the source finishes at once: waiting on the frontier then
            // could wait on records that will never be read.
            let stopping = merger.control.stopped();
            if let Some(probe) = probe.as_ref().filter(|_| !stopping) {
                // What the output frontier has passed is through the dataflow.
                while let Some(&(t, n)) = sent_log.front() {
                    if probe.less_equal(&t) {
                        break;
                    }
                    delivered = n;
                    sent_log.pop_front();
                }
                let ahead = |limit: Nanos| probe.less_than(&time.saturating_sub(limit));
                let in_flight = merger.emitted.saturating_sub(delivered);
                // Under memory pressure (`shed`) fewer records may be in flight, however
                // close the source is to the frontier; it reads on a round at a time when
                // the frontier stands still, so that the watermark, which the stages now
                // follow closely, keeps moving.
                let pressed = crate::shed::active();
                let frontier = probe.with_frontier(|f| f.first().copied());
                let (most, min_ahead) = if pressed {
                    (config.max_in_flight / 4, 0)
                } else {
                    (config.max_in_flight, hold.min_ahead(frontier))
                };
                if ahead(hold.max_ahead(frontier)) || (in_flight > most && ahead(min_ahead)) {
                    let now = Instant::now();
                    let cpu_ns = process_cpu_ns();
                    if !(pressed && hold.trickle(frontier, now, cpu_ns)) {
                        if !pressed {
                            hold.throttled(time, frontier, now, cpu_ns);
                        }
                        activator.activate_after(Duration::from_millis(1));
                        return;
                    }
                } else {
                    hold.flowing();
                }
            }
            if stopping {
                merger.stop();
            }
            merger.refill();
            if let Some(w) = merger.watermark() {
                if w > time {
                    for c in caps_now.iter_mut() {
                        c.downgrade(&w);
                    }
                }
            }
            let wait = {
                let mut packets = packets_out.activate();
                let mut rows = rows_out.activate();
                let mut calls = calls_out.activate();
                let mut tcp = tcp_out.activate();
                let mut sessions = Sessions {
                    packets: packets.session(&caps_now[0]),
                    rows: rows.session(&caps_now[1]),
                    calls: calls.session(&caps_now[2]),
                    tcp: tcp.session(&caps_now[3]),
                };
                merger.emit(&mut sessions)
            };
            let at = *caps_now[0].time();
            if merger.emitted > 0 {
                hold.sent(at);
            }
            match sent_log.back_mut() {
                Some(last) if last.0 == at => last.1 = merger.emitted,
                _ => sent_log.push_back((at, merger.emitted)),
            }
            let finished = merger.finished();
            let batch = merger.events(finished);
            if !batch.is_empty() {
                let mut handle = events_out.activate();
                handle
                    .session(&caps_now[4])
                    .give_iterator(batch.into_iter());
            }
            if finished {
                caps = None;
            } else if let Some(wait) = wait {
                // Replay pacing; checks for a stop at least every 100 ms meanwhile.
                activator.activate_after(wait.min(Duration::from_millis(100)));
            } else {
                activator.activate();
            }
        }
    });
    SourceStreams {
        packets,
        rows,
        calls,
        tcp,
        events,
    }
}

type Session<'a, 'b, T, D, C> = timely::dataflow::operators::generic::Session<
    'a,
    'b,
    T,
    timely::container::CapacityContainerBuilder<Vec<D>>,
    C,
>;

struct Sessions<P, R, S, U> {
    packets: P,
    rows: R,
    calls: S,
    tcp: U,
}

impl<'a, 'b, T, CP, CR, CS, CU> Emit
    for Sessions<
        Session<'a, 'b, T, Packet, CP>,
        Session<'a, 'b, T, TraceRow, CR>,
        Session<'a, 'b, T, SocketCall, CS>,
        Session<'a, 'b, T, TcpSample, CU>,
    >
where
    T: timely::progress::Timestamp,
    CP: timely::dataflow::operators::CapabilityTrait<T>,
    CR: timely::dataflow::operators::CapabilityTrait<T>,
    CS: timely::dataflow::operators::CapabilityTrait<T>,
    CU: timely::dataflow::operators::CapabilityTrait<T>,
{
    fn packet(&mut self, p: Packet) {
        self.packets.give(p);
    }
    fn row(&mut self, r: TraceRow) {
        self.rows.give(r);
    }
    fn call(&mut self, c: SocketCall) {
        self.calls.give(c);
    }
    fn packets(&mut self, batch: &mut Vec<Packet>) {
        self.packets.give_container(batch);
    }
    fn rows(&mut self, batch: &mut Vec<TraceRow>) {
        self.rows.give_container(batch);
    }
    fn calls(&mut self, batch: &mut Vec<SocketCall>) {
        self.calls.give_container(batch);
    }
    fn sample(&mut self, t: TcpSample) {
        self.tcp.give(t);
    }
    fn samples(&mut self, batch: &mut Vec<TcpSample>) {
        self.tcp.give_container(batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::Packet;
    use crate::origin::OriginId;
    use std::sync::atomic::AtomicUsize;
    use timely::dataflow::operators::Probe;

    const S: Nanos = 1_000_000_000;

    /// A hold-back whose first record was sent at 0 s: the frontier has moved since.
    fn hold_back(min_s: u64, max_s: u64) -> HoldBack {
        let mut h = HoldBack::new(&SourceConfig {
            min_ahead_ns: min_s * S,
            max_ahead_ns: max_s * S,
            ..SourceConfig::default()
        });
        h.sent(0);
        h
    }

    #[test]
    fn a_stall_while_starting_up_raises_the_limits_until_the_frontier_has_passed_it() {
        let mut h = HoldBack::new(&SourceConfig {
            min_ahead_ns: S / 2,
            max_ahead_ns: S,
            startup_ns: 2 * S,
            ..SourceConfig::default()
        });
        h.sent(100 * S);
        let t0 = Instant::now();
        // The frontier within the start-up, the source 2 s ahead.
        h.throttled(102 * S, Some(100 * S), t0, 0);
        h.throttled(102 * S, Some(100 * S), t0 + HoldBack::STALL, 0);
        assert_eq!((h.min_ahead_ns, h.max_ahead_ns), (S / 2, S));
        let boosted = 2 * S + S / 2;
        assert_eq!(h.min_ahead(Some(100 * S)), boosted);
        assert_eq!(h.max_ahead(Some(101 * S)), boosted);
        // Past where the source stood: the configured limits again.
        assert_eq!(h.min_ahead(Some(102 * S)), S / 2);
        assert_eq!(h.max_ahead(Some(102 * S)), S);
        // A stall once the frontier has passed the start-up raises them for good.
        h.throttled(104 * S, Some(103 * S), t0, 0);
        h.throttled(104 * S, Some(103 * S), t0 + HoldBack::STALL, 0);
        let raised = S + S / 4;
        assert_eq!((h.min_ahead_ns, h.max_ahead_ns), (raised, raised));
    }

    /// A frontier watched while under memory pressure, still standing once the pressure is
    /// over, is judged by the CPU used since it was last watched, not since the process began.
    #[test]
    fn a_stall_watched_from_under_pressure_is_judged_by_the_cpu_used_since() {
        let mut h = hold_back(10, 60);
        let t0 = Instant::now();
        let cpu = 3_600 * S;
        assert!(!h.trickle(Some(88 * S), t0, cpu));
        h.throttled(100 * S, Some(88 * S), t0 + HoldBack::STALL, cpu);
        assert_eq!((h.min_ahead_ns, h.max_ahead_ns), (15 * S, 60 * S));
    }

    #[test]
    fn a_frontier_standing_still_while_the_source_waits_raises_both_limits() {
        let mut h = hold_back(10, 60);
        let t0 = Instant::now();
        // The source waits at 100 s with the output frontier 12 s behind it.
        h.throttled(100 * S, Some(88 * S), t0, 0);
        h.throttled(100 * S, Some(88 * S), t0 + HoldBack::STALL / 2, 0);
        assert_eq!((h.min_ahead_ns, h.max_ahead_ns), (10 * S, 60 * S));
        h.throttled(100 * S, Some(88 * S), t0 + HoldBack::STALL, 0);
        // 12 s ahead, and a quarter of that again.
        assert_eq!((h.min_ahead_ns, h.max_ahead_ns), (15 * S, 60 * S));
        // A short hold-back raises by at least `RAISE_NS`.
        let mut h = hold_back(0, 1);
        h.throttled(10 * S, Some(10 * S - S / 10), t0, 0);
        h.throttled(10 * S, Some(10 * S - S / 10), t0 + HoldBack::STALL, 0);
        let raised = S / 10 + HoldBack::RAISE_NS;
        assert_eq!((h.min_ahead_ns, h.max_ahead_ns), (raised, S));
    }

    #[test]
    fn a_frontier_standing_still_while_the_process_is_busy_is_no_stall_for_a_while() {
        let mut h = hold_back(10, 60);
        let t0 = Instant::now();
        let cpu = |d: Duration| d.as_nanos() as u64;
        h.throttled(100 * S, Some(88 * S), t0, cpu(Duration::ZERO));
        // A core busy all along (a warm start's first pass): no raise.
        let busy = HoldBack::STALL * 3;
        h.throttled(100 * S, Some(88 * S), t0 + busy, cpu(busy));
        assert_eq!(h.min_ahead_ns, 10 * S);
        // Still standing after `STALL_BUSY`, busy or not: raised.
        let long = HoldBack::STALL_BUSY;
        h.throttled(100 * S, Some(88 * S), t0 + long, cpu(long));
        assert_eq!(h.min_ahead_ns, 15 * S);
        // Idle beside it (a tenth of a core): a stall after `STALL`.
        let mut h = hold_back(10, 60);
        h.throttled(100 * S, Some(88 * S), t0, cpu(Duration::ZERO));
        h.throttled(
            100 * S,
            Some(88 * S),
            t0 + HoldBack::STALL,
            cpu(HoldBack::STALL / 10),
        );
        assert_eq!(h.min_ahead_ns, 15 * S);
    }

    #[test]
    fn a_moving_frontier_or_reading_in_between_is_no_stall() {
        let mut h = hold_back(10, 60);
        let t0 = Instant::now();
        h.throttled(100 * S, Some(88 * S), t0, 0);
        // The frontier moved: the wait starts again from there.
        h.throttled(100 * S, Some(89 * S), t0 + HoldBack::STALL / 2, 0);
        h.throttled(100 * S, Some(89 * S), t0 + HoldBack::STALL, 0);
        assert_eq!(h.min_ahead_ns, 10 * S);
        h.throttled(100 * S, Some(89 * S), t0 + HoldBack::STALL * 3 / 2, 0);
        assert_eq!(h.min_ahead_ns, 13_750_000_000);
        // The source read in between two waits.
        let mut h = hold_back(10, 60);
        h.throttled(100 * S, Some(88 * S), t0, 0);
        h.flowing();
        h.throttled(100 * S, Some(88 * S), t0 + HoldBack::STALL, 0);
        assert_eq!(h.min_ahead_ns, 10 * S);
    }

    #[test]
    fn the_warm_up_widens_the_read_ahead_until_the_frontier_has_passed_it() {
        let mut h = HoldBack::new(&SourceConfig {
            min_ahead_ns: 3 * S,
            warmup_ns: 2 * S,
            max_ahead_ns: 60 * S,
            ..SourceConfig::default()
        });
        // Before anything is sent, and while the frontier is within the warm-up.
        assert_eq!(h.min_ahead(None), 5 * S);
        h.sent(100 * S);
        h.sent(105 * S);
        assert_eq!(h.min_ahead(Some(100 * S)), 5 * S);
        assert_eq!(h.min_ahead(Some(101 * S)), 5 * S);
        // Past it (the warm-up counts from the first record sent).
        assert_eq!(h.min_ahead(Some(102 * S)), 3 * S);
        assert_eq!(h.min_ahead(None), 3 * S);
    }

    /// A live reader that always has one more packet, a millisecond after the last.
    struct Chatty {
        calls: Arc<AtomicUsize>,
        next_ns: Nanos,
    }

    impl ObservationReader for Chatty {
        fn origin(&self) -> OriginId {
            OriginId(0)
        }
        fn read_batch(&mut self, _max: usize, out: &mut Batch) -> bool {
            self.calls.fetch_add(1, Ordering::Relaxed);
            out.packets.push(Packet::test_at(self.next_ns));
            self.next_ns += 1_000_000;
            true
        }
        fn reserve(&self, _max: usize, _out: &mut Batch) {}
        fn take_stats(&mut self) -> SourceStats {
            SourceStats::default()
        }
        fn take_warnings(&mut self) -> Vec<crate::Warning> {
            Vec::new()
        }
        fn is_live(&self) -> bool {
            true
        }
        fn clock_now(&self) -> Option<Nanos> {
            Some(self.next_ns)
        }
    }

    #[test]
    fn a_live_reader_is_asked_once_per_activation_and_the_frontier_moves() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let stop = Arc::new(AtomicBool::new(false));
        let control = RunControl {
            stop: Some(Arc::clone(&stop)),
            ..RunControl::default()
        };
        timely::execute_directly(move |worker| {
            let probe = ProbeHandle::new();
            worker.dataflow::<Time, _, _>(|scope| {
                let reader: Box<dyn ObservationReader> = Box::new(Chatty {
                    calls: Arc::clone(&counted),
                    next_ns: 1_000_000_000,
                });
                let s = read_inputs(
                    scope,
                    vec![reader],
                    SourceConfig {
                        lateness_ns: 10_000_000,
                        ..SourceConfig::default()
                    },
                    control,
                    &Alignment::none(),
                    None,
                );
                s.packets.probe_with(&probe);
            });
            for _ in 0..10 {
                worker.step();
            }
            // Once per activation (and never more than twice per step), not until the budget
            // of 8192 records is spent; meanwhile the frontier follows the records.
            let n = counted.load(Ordering::Relaxed);
            assert!((1..=20).contains(&n), "{n} reads in 10 steps");
            assert!(!probe.less_than(&(1_000_000_000 + (n as u64 - 1) * 1_000_000 - 20_000_000)));
            // The reader never ends: stop the run (as Ctrl-C does) so the dataflow completes.
            stop.store(true, Ordering::Relaxed);
        });
        assert!(calls.load(Ordering::Relaxed) > 0);
    }
}
