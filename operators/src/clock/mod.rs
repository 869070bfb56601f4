//! Clock offsets between domains (WAP5 §5.2 after Paxson, extended with drift and global
//! consistency), and the correction of message timestamps to the reference clock.
//!
//! Evidence is the time one packet is seen in two clock domains (two sniffers, or the sender's
//! and the receiver's clock in a message trace): `d = t_b - t_a`. For the messages between two
//! hosts X and Y, `d = Δ + latency` in one direction and `d = Δ - latency` in the other, where
//! `Δ` is domain b's clock minus domain a's. Taking, per second, the smallest `d` of the
//! upper direction and the largest of the lower one (the minimum one-way delays), and
//! assuming symmetric minimum delays, gives `Δ` to within half their gap — which is also a
//! hard bound on the error (both latencies are at least zero). The direction that is upper is
//! read off the data, so no knowledge of where the sniffers sit is needed.
//!
//! Four operators:
//! - `clock.bounds` (per worker, pipeline): samples to per-second bounds per domain pair and
//!   host pair; state: the open seconds; freed when the frontier passes a second's end plus
//!   the samples' lateness (`lateness_ns`: samples come up to the reconciliation window after
//!   their time).
//! - `clock.samples` (per worker, pipeline): messages with both timestamps (message traces)
//!   to the same bounds, aggregated within each batch of messages, which it passes on
//!   unchanged; no state between batches; per message a hash and a probe, with no copy of
//!   its domains. A second and pair's bounds may thus come in pieces, from several batches
//!   and workers: `clock` absorbs them into one.
//! - `clock` (worker 0): bounds to offsets. Per domain pair, the per-second estimates of the
//!   last `window_ns` are fitted to a line (offset and drift) by weighted least squares with
//!   outliers (queueing) rejected; the pairs are then made mutually consistent by a weighted
//!   least-squares solve over the graph of domains, relative to the reference domain. Emits a
//!   [`ClockOffset`] per domain every `every_ns` and at the end; estimates a second boundary
//!   once its frontier is the samples' lateness past it. State: the window's per-second
//!   estimates per pair.
//! - `clock.correct` (every worker): messages and the broadcast offsets to messages with
//!   corrected timestamps, each with the estimate for the last second boundary before it (in
//!   a domain's first seconds, the first estimate after it). Holds each message until the
//!   estimates up to its time have arrived (the estimates' frontier is past its time plus the
//!   samples' lateness); one whose domain has no estimate before it yet waits two seconds
//!   more, for the first one after it. Keeps its capability at the smallest
//!   event time it holds, so that no message leaves with a time its successors' frontier has
//!   passed; state: those messages and five minutes of estimates per domain. A message seen
//!   only in the reference clock (whose offset is zero by definition, and zero in the coarse
//!   alignment too) needs no estimate: it leaves at once, corrected as waiting would have
//!   corrected it. A single sniffer, live or replayed, so pays no clock latency. Under
//!   memory pressure ([`causeway_sources::shed`]) a message waits at most the governor's cap
//!   past the messages' frontier, and `clock.bounds` and `clock` wait at most the cap for
//!   late samples.
//!
//! Reports stop within `every_ns` of a domain graph's newest evidence rather than extrapolate
//! past it; the final report repeats the last one. Estimates for correction go on (following
//! the drift) while the window holds evidence. Every output depends only on the data, not on
//! how the work was spread over workers or how the frontier moved.

pub mod pairwise;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::sync::Arc;

use causeway_sources::{Address, Alignment, Time, shed};
use serde::{Deserialize, Serialize};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::{Operator, OutputBuilder};
use timely::dataflow::operators::vec::Broadcast;

use crate::domain::Domain;
use crate::message::{Message, MessageStream};
use crate::recent::partition_point_from_back;
use crate::reorder::Reorder;

/// Width of the estimation buckets: one second.
const BUCKET_NS: Time = 1_000_000_000;

/// How far back `clock.correct` keeps estimates: five minutes of event time.
const HISTORY_NS: Time = 300_000_000_000;

/// One packet seen in two clock domains.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DelaySample {
    /// First domain (the smaller).
    pub a: Domain,
    /// Second domain.
    pub b: Domain,
    /// The two hosts, unordered (a hash).
    pub pair: u64,
    /// Whether the message went from the smaller host to the larger.
    pub forward: bool,
    /// Event time.
    pub at: Time,
    /// Time in `b` minus time in `a`, ns.
    pub delay_ns: i64,
}

/// Per second, per domain pair and host pair: the range of `d` in each direction.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DelayBounds {
    /// First domain.
    pub a: Domain,
    /// Second domain.
    pub b: Domain,
    /// Host pair.
    pub pair: u64,
    /// The second (event time / 1 s).
    pub bucket: Time,
    /// Smallest and largest `d`, messages from the smaller host.
    pub forward: Option<(i64, i64)>,
    /// Smallest and largest `d`, messages from the larger host.
    pub backward: Option<(i64, i64)>,
    /// Samples.
    pub count: u64,
}

fn widen(r: &mut Option<(i64, i64)>, lo: i64, hi: i64) {
    *r = Some(match *r {
        Some((a, b)) => (a.min(lo), b.max(hi)),
        None => (lo, hi),
    });
}

impl DelayBounds {
    /// No samples yet, for second `bucket`.
    fn empty(a: Domain, b: Domain, pair: u64, bucket: Time) -> Self {
        DelayBounds {
            a,
            b,
            pair,
            bucket,
            forward: None,
            backward: None,
            count: 0,
        }
    }

    /// Counts a sample `d` of a message in the direction `forward` says.
    fn record(&mut self, forward: bool, delay_ns: i64) {
        if forward {
            widen(&mut self.forward, delay_ns, delay_ns);
        } else {
            widen(&mut self.backward, delay_ns, delay_ns);
        }
        self.count += 1;
    }

    fn absorb(&mut self, o: &DelayBounds) {
        if let Some((lo, hi)) = o.forward {
            widen(&mut self.forward, lo, hi);
        }
        if let Some((lo, hi)) = o.backward {
            widen(&mut self.backward, lo, hi);
        }
        self.count += o.count;
    }

    /// `Δ` and its error bound from this second, if both directions were seen.
    fn estimate(&self) -> Option<(f64, f64)> {
        let (f, b) = (self.forward?, self.backward?);
        // The upper direction is the one whose delays lie above the other's.
        let (upper, lower) = if f.0 as i128 + f.1 as i128 >= b.0 as i128 + b.1 as i128 {
            (f, b)
        } else {
            (b, f)
        };
        let gap = upper.0 as f64 - lower.1 as f64;
        if gap < 0.0 {
            return None;
        }
        Some(((upper.0 as f64 + lower.1 as f64) / 2.0, gap / 2.0))
    }
}

/// A domain's clock relative to the reference clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// The domain.
    pub domain: Domain,
    /// The reference domain.
    pub reference: Domain,
    /// Event time the estimate is for.
    pub at: Time,
    /// Domain clock minus reference clock at `at`, ns.
    pub offset_ns: f64,
    /// Rate of change of the offset, parts per million.
    pub drift_ppm: f64,
    /// Bound on the error of `offset_ns`, ns.
    pub error_ns: f64,
    /// Seconds with evidence in the window (for the domain pair with the most).
    pub seconds: u64,
    /// Whether this is the final estimate (the input has ended).
    pub last: bool,
}

impl ClockOffset {
    /// The offset at event time `t`.
    pub fn offset_at(&self, t: Time) -> f64 {
        self.offset_ns + self.drift_ppm * 1e-6 * (t as i64 - self.at as i64) as f64
    }
}

/// How the clock operator estimates.
#[derive(Clone, Debug)]
pub struct ClockConfig {
    /// Seconds of evidence each pair's fit uses.
    pub window_ns: Time,
    /// How often offsets are reported, in event time.
    pub every_ns: Time,
    /// The reference domain; `None`: the smallest domain that has evidence.
    pub reference: Option<Domain>,
    /// How long after its time a delay sample may still come (the reconciliation window
    /// plus the sources' lateness): a second is estimated only once that has passed, so that
    /// the estimates do not depend on how fast the input was read.
    pub lateness_ns: Time,
}

impl Default for ClockConfig {
    fn default() -> Self {
        ClockConfig {
            window_ns: 60_000_000_000,
            every_ns: 10_000_000_000,
            reference: None,
            lateness_ns: 2_000_000_000,
        }
    }
}

/// The delay sample a message with both timestamps gives (message traces: the sender's and
/// the receiver's clocks are the domains).
pub fn sample_of(m: &Message) -> Option<DelaySample> {
    let (a, b, pair, forward, delay_ns) = sample_parts(m)?;
    Some(DelaySample {
        a: a.clone(),
        b: b.clone(),
        pair,
        forward,
        at: m.event_ns,
        delay_ns,
    })
}

/// [`sample_of`] without copying the domains: the domains (the smaller first), the host pair,
/// whether it went from the smaller host, and `d`.
fn sample_parts(m: &Message) -> Option<(&Domain, &Domain, u64, bool, i64)> {
    use std::hash::BuildHasher;
    let (send, recv) = (m.send_ns?, m.recv_ns?);
    let (sd, rd) = (m.send_domain.as_ref()?, m.recv_domain.as_ref()?);
    if sd == rd {
        return None;
    }
    let forward = m.src <= m.dst;
    let (lo, hi) = if forward {
        (&m.src, &m.dst)
    } else {
        (&m.dst, &m.src)
    };
    let pair = foldhash::fast::FixedState::with_seed(0x7061_6972).hash_one((lo, hi));
    let (a, b, delay_ns) = if sd < rd {
        (sd, rd, recv as i64 - send as i64)
    } else {
        (rd, sd, send as i64 - recv as i64)
    };
    Some((a, b, pair, forward, delay_ns))
}

/// Extension trait: the delay bounds of messages that carry both timestamps.
pub trait MessageBounds<'scope> {
    /// The messages, passed on unchanged (their batches moved, not copied), and the
    /// per-second [`DelayBounds`] of their delay samples ([`sample_of`]), aggregated within
    /// each batch: the `clock` operator absorbs the bounds of one second and pair that come in
    /// several pieces, so this equals `clock.bounds` over the samples, at one record per
    /// second and pair in a batch instead of one per message.
    fn message_bounds(
        self,
    ) -> (
        MessageStream<'scope>,
        Stream<'scope, Time, Vec<DelayBounds>>,
    );
}

impl<'scope> MessageBounds<'scope> for MessageStream<'scope> {
    fn message_bounds(
        self,
    ) -> (
        MessageStream<'scope>,
        Stream<'scope, Time, Vec<DelayBounds>>,
    ) {
        let mut builder = OperatorBuilder::new("clock.samples".to_owned(), self.scope());
        let mut input = builder.new_input(self, Pipeline);
        let (messages_out, messages) = builder.new_output::<Vec<Box<Message>>>();
        let (bounds_out, bounds) = builder.new_output::<Vec<DelayBounds>>();
        let mut messages_out = OutputBuilder::from(messages_out);
        let mut bounds_out = OutputBuilder::from(bounds_out);
        builder.build(move |_capabilities| {
            let mut batch_bounds = BatchBounds::default();
            move |_frontiers| {
                let mut messages_out = messages_out.activate();
                let mut bounds_out = bounds_out.activate();
                input.for_each(|cap, batch| {
                    for m in batch.iter() {
                        batch_bounds.add(m);
                    }
                    let mut bounds = batch_bounds.take();
                    if !bounds.is_empty() {
                        bounds_out.session(&cap).give_container(&mut bounds);
                    }
                    messages_out.session(&cap).give_container(batch);
                });
            }
        });
        (messages, bounds)
    }
}

/// The delay bounds of one batch of messages, per second, domain pair and host pair, found
/// by the hash of those without cloning the domains of every message (only of a new entry).
#[derive(Default)]
struct BatchBounds {
    bounds: Vec<DelayBounds>,
    /// Hash of (second, domains, host pair) to the index of its entry in `bounds`.
    index: crate::FastMap<u64, usize>,
}

impl BatchBounds {
    /// Adds the sample of `m`, if it gives one (as [`sample_of`]).
    fn add(&mut self, m: &Message) {
        use std::hash::BuildHasher;
        let Some((a, b, pair, forward, delay_ns)) = sample_parts(m) else {
            return;
        };
        let bucket = m.event_ns / BUCKET_NS;
        let is = |e: &DelayBounds| e.bucket == bucket && e.pair == pair && e.a == *a && e.b == *b;
        let hash =
            foldhash::fast::FixedState::with_seed(0x626f_756e).hash_one((bucket, a, b, pair));
        let i = match self.index.get(&hash) {
            Some(&i) if is(&self.bounds[i]) => i,
            other => {
                // A new entry, or (rarely) one whose hash another entry has: found by a scan.
                let held = other.and_then(|_| self.bounds.iter().position(is));
                let i = held.unwrap_or_else(|| {
                    let new = DelayBounds::empty(a.clone(), b.clone(), pair, bucket);
                    self.bounds.push(new);
                    self.bounds.len() - 1
                });
                self.index.entry(hash).or_insert(i);
                i
            }
        };
        self.bounds[i].record(forward, delay_ns);
    }

    /// The bounds gathered since the last call, in (domains, host pair, second) order.
    fn take(&mut self) -> Vec<DelayBounds> {
        self.index.clear();
        let mut bounds = std::mem::take(&mut self.bounds);
        bounds.sort_by(|x, y| (&x.a, &x.b, x.pair, x.bucket).cmp(&(&y.a, &y.b, y.pair, y.bucket)));
        bounds
    }
}

/// Extension trait: per-second delay bounds of a sample stream.
pub trait Bounds<'scope> {
    /// Aggregates samples per second on each worker, closing a second once the frontier is
    /// `lateness_ns` past its end; see the module documentation.
    fn delay_bounds(self, lateness_ns: Time) -> Stream<'scope, Time, Vec<DelayBounds>>;
}

impl<'scope> Bounds<'scope> for Stream<'scope, Time, Vec<DelaySample>> {
    fn delay_bounds(self, lateness_ns: Time) -> Stream<'scope, Time, Vec<DelayBounds>> {
        self.unary_frontier(Pipeline, "clock.bounds", |cap, _info| {
            let mut held = Some(cap);
            // By second, then by domain pair and host pair.
            let mut open: BTreeMap<Time, crate::FastMap<(Domain, Domain, u64), DelayBounds>> =
                BTreeMap::new();
            move |(input, frontier), output| {
                input.for_each(|_cap, batch| {
                    for s in batch.drain(..) {
                        let bucket = s.at / BUCKET_NS;
                        let second = open.entry(bucket).or_default();
                        let key = (s.a, s.b, s.pair);
                        let e = match second.get_mut(&key) {
                            Some(e) => e,
                            None => second
                                .entry(key.clone())
                                .or_insert(DelayBounds::empty(key.0, key.1, key.2, bucket)),
                        };
                        e.record(s.forward, s.delay_ns);
                    }
                });
                let Some(cap) = held.as_mut() else { return };
                let now = frontier.frontier().iter().next().copied();
                // A second is complete once the frontier has passed its end plus the samples'
                // lateness; emit it at the capability held since before then, so `clock` knows
                // when all have come.
                let mut closed = Vec::new();
                while let Some(entry) = open.first_entry() {
                    let end = (entry.key() + 1) * BUCKET_NS;
                    // Under memory pressure, at most the cap (`shed`).
                    if now.is_some_and(|n| end.saturating_add(shed::capped(lateness_ns)) > n) {
                        break;
                    }
                    let mut second: Vec<DelayBounds> = entry.remove().into_values().collect();
                    second.sort_by(|x, y| (&x.a, &x.b, x.pair).cmp(&(&y.a, &y.b, y.pair)));
                    closed.extend(second);
                }
                if !closed.is_empty() {
                    output.session(&*cap).give_iterator(closed.into_iter());
                }
                match now {
                    Some(t) if t > *cap.time() => cap.downgrade(&t),
                    Some(_) => {}
                    None => held = None,
                }
            }
        })
    }
}

/// Weighted least-squares line through `(x, y, weight)`: intercept at x = 0 and slope.
fn fit(points: &[(f64, f64, f64)]) -> Option<(f64, f64)> {
    let sw: f64 = points.iter().map(|p| p.2).sum();
    if points.is_empty() || sw <= 0.0 {
        return None;
    }
    let mx = points.iter().map(|p| p.2 * p.0).sum::<f64>() / sw;
    let my = points.iter().map(|p| p.2 * p.1).sum::<f64>() / sw;
    let sxx: f64 = points.iter().map(|p| p.2 * (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = points.iter().map(|p| p.2 * (p.0 - mx) * (p.1 - my)).sum();
    let slope = if points.len() < 3 || sxx <= 1e-9 * sw {
        0.0
    } else {
        sxy / sxx
    };
    Some((my - slope * mx, slope))
}

/// One domain pair's recent per-second estimates.
#[derive(Default)]
struct PairSeries {
    /// (second, Δ ns, bound ns)
    points: VecDeque<(Time, f64, f64)>,
}

impl PairSeries {
    /// Offset at `now` (ns), drift (ns per ns) and error bound (ns).
    fn estimate(&self, now: Time) -> Option<(f64, f64, f64)> {
        if self.points.is_empty() {
            return None;
        }
        let mk = |kept: &[(Time, f64, f64)]| -> Vec<(f64, f64, f64)> {
            kept.iter()
                .map(|(s, d, h)| {
                    let x = ((*s * BUCKET_NS + BUCKET_NS / 2) as i64 - now as i64) as f64 / 1e9;
                    (x, *d, 1.0 / ((h + 1_000.0) * (h + 1_000.0)))
                })
                .collect()
        };
        let all: Vec<(Time, f64, f64)> = self.points.iter().copied().collect();
        let (a, b) = fit(&mk(&all))?;
        // Reject seconds whose estimate strays from the line by more than their own bound and
        // a robust spread (queueing makes one direction's minimum late, not early).
        let residuals: Vec<f64> = all
            .iter()
            .map(|(s, d, _)| {
                let x = ((*s * BUCKET_NS + BUCKET_NS / 2) as i64 - now as i64) as f64 / 1e9;
                (d - (a + b * x)).abs()
            })
            .collect();
        let mut sorted = residuals.clone();
        let mid = sorted.len() / 2;
        let mad = *sorted.select_nth_unstable_by(mid, f64::total_cmp).1;
        let kept: Vec<(Time, f64, f64)> = all
            .iter()
            .zip(&residuals)
            .filter(|(p, r)| **r <= 3.0 * mad + p.2)
            .map(|(p, _)| *p)
            .collect();
        let kept = if kept.is_empty() { all.clone() } else { kept };
        let (a, b) = fit(&mk(&kept))?;
        // The hard limits: every line within every kept second's bound, drift at most
        // MAX_DRIFT. Seconds whose bounds no line meets (timestamps that contradict each
        // other) leave only the statistical error.
        let bounded: Vec<(f64, f64, f64)> = kept
            .iter()
            .map(|(s, d, h)| {
                let x = ((*s * BUCKET_NS + BUCKET_NS / 2) as i64 - now as i64) as f64 / 1e9;
                (x, *d, *h)
            })
            .collect();
        let (a, error) = match feasible_range(&bounded, MAX_DRIFT_PPM * 1e3) {
            Some((lo, hi)) => {
                let a = a.clamp(lo, hi);
                (a, (a - lo).max(hi - a))
            }
            None => {
                let best_bound = kept.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
                let spread = if kept.len() > 2 {
                    let n = kept.len() as f64;
                    let ss: f64 = mk(&kept)
                        .iter()
                        .map(|(x, y, _)| (y - (a + b * x)).powi(2))
                        .sum();
                    (ss / (n - 2.0)).sqrt() / n.sqrt()
                } else {
                    0.0
                };
                (a, best_bound + spread)
            }
        };
        // b is ns of offset per s of time.
        Some((a, b / 1e9, error))
    }
}

/// The largest drift between two clocks that the error bounds allow for, in ppm (quartz
/// oscillators without NTP stay well within 100).
const MAX_DRIFT_PPM: f64 = 200.0;

/// The lower (or upper) convex hull of points sorted by x (Andrew's monotone chain).
fn hull(points: impl Iterator<Item = (f64, f64)>, lower: bool) -> Vec<(f64, f64)> {
    let mut h: Vec<(f64, f64)> = Vec::new();
    for p in points {
        while h.len() >= 2 {
            let (o, a) = (h[h.len() - 2], h[h.len() - 1]);
            let cross = (a.0 - o.0) * (p.1 - o.1) - (a.1 - o.1) * (p.0 - o.0);
            if (lower && cross <= 0.0) || (!lower && cross >= 0.0) {
                h.pop();
            } else {
                break;
            }
        }
        h.push(p);
    }
    h
}

/// The range of values at x = 0 of the lines `a + b·x`, `|b| ≤ max_slope`, that pass within
/// every point's bound (`(x, y, h)`: `|a + b·x − y| ≤ h`); `None` when no line does.
///
/// For a slope `b` the intercepts allowed are `[g(b), f(b)]` with `f(b) = min(y + h − b·x)`
/// (concave) and `g(b) = max(y − h − b·x)` (convex). Only the lower hull of the `y + h` and
/// the upper hull of the `y − h` matter; each pair of hull points bounds the slopes for which
/// `g ≤ f`, which gives the feasible slopes exactly, and the extremes of `f` and `g` on them
/// lie at the interval's ends or at the hulls' breakpoints. Cost: sorting the points, then
/// the square of the hull sizes (a handful of points).
fn feasible_range(points: &[(f64, f64, f64)], max_slope: f64) -> Option<(f64, f64)> {
    if points.is_empty() {
        return None;
    }
    let mut sorted: Vec<(f64, f64, f64)> = points.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let tops = hull(sorted.iter().map(|(x, y, h)| (*x, y + h)), true);
    let bottoms = hull(sorted.iter().map(|(x, y, h)| (*x, y - h)), false);
    let (mut left, mut right) = (-max_slope, max_slope);
    for &(xi, c) in &tops {
        for &(xj, d) in &bottoms {
            // c − b·xi ≥ d − b·xj  ⇔  b·(xj − xi) ≥ d − c
            let (dx, dy) = (xj - xi, d - c);
            if dx > 0.0 {
                left = left.max(dy / dx);
            } else if dx < 0.0 {
                right = right.min(dy / dx);
            } else if dy > 0.0 {
                return None;
            }
        }
    }
    if left > right {
        return None;
    }
    let f = |b: f64| {
        tops.iter()
            .map(|(x, c)| c - b * x)
            .fold(f64::INFINITY, f64::min)
    };
    let g = |b: f64| {
        bottoms
            .iter()
            .map(|(x, d)| d - b * x)
            .fold(f64::NEG_INFINITY, f64::max)
    };
    // Where consecutive hull lines cross, inside [left, right].
    let breaks = |h: &[(f64, f64)]| -> Vec<f64> {
        h.windows(2)
            .filter(|w| w[1].0 != w[0].0)
            .map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0))
            .filter(|b| (left..=right).contains(b))
            .chain([left, right])
            .collect()
    };
    let hi = breaks(&tops)
        .into_iter()
        .map(f)
        .fold(f64::NEG_INFINITY, f64::max);
    let lo = breaks(&bottoms)
        .into_iter()
        .map(g)
        .fold(f64::INFINITY, f64::min);
    Some((lo.min(hi), hi.max(lo)))
}

/// The estimator: pair series and the global solve.
pub struct ClockEstimator {
    config: ClockConfig,
    pending: BTreeMap<(Time, Domain, Domain, u64), DelayBounds>,
    series: BTreeMap<(Domain, Domain), PairSeries>,
}

impl ClockEstimator {
    /// An estimator with no evidence.
    pub fn new(config: ClockConfig) -> Self {
        ClockEstimator {
            config,
            pending: BTreeMap::new(),
            series: BTreeMap::new(),
        }
    }

    /// Adds bounds from a worker.
    pub fn add(&mut self, b: DelayBounds) {
        let key = (b.bucket, b.a.clone(), b.b.clone(), b.pair);
        match self.pending.get_mut(&key) {
            Some(e) => e.absorb(&b),
            None => {
                self.pending.insert(key, b);
            }
        }
    }

    /// Folds every second that ends at or before the boundary `at` into the pair series, and
    /// forgets seconds older than the window before `at`.
    pub fn advance(&mut self, at: Time) {
        let mut per_pair: BTreeMap<(Time, Domain, Domain), (f64, f64)> = BTreeMap::new();
        while let Some(entry) = self.pending.first_entry() {
            if (entry.key().0 + 1) * BUCKET_NS > at {
                break;
            }
            let b = entry.remove();
            if let Some((delta, bound)) = b.estimate() {
                let e = per_pair
                    .entry((b.bucket, b.a, b.b))
                    .or_insert((delta, bound));
                if bound < e.1 {
                    *e = (delta, bound);
                }
            }
        }
        for ((bucket, a, b), (delta, bound)) in per_pair {
            self.series
                .entry((a, b))
                .or_default()
                .points
                .push_back((bucket, delta, bound));
        }
        let horizon = at.saturating_sub(self.config.window_ns) / BUCKET_NS;
        for s in self.series.values_mut() {
            while s.points.front().is_some_and(|p| p.0 < horizon) {
                s.points.pop_front();
            }
        }
        self.series.retain(|_, s| !s.points.is_empty());
    }

    /// The first boundary after which something changes: the end of the earliest pending
    /// second, or (with evidence in the window) the next second. Estimates go on past the
    /// newest evidence (extrapolated by the drift) until the window is empty, so that every
    /// message finds an estimate for its time as soon as the frontier passes it.
    fn next_boundary(&self, after: Time) -> Option<Time> {
        let pending = self.pending.keys().next().map(|k| (k.0 + 1) * BUCKET_NS);
        let next = after / BUCKET_NS * BUCKET_NS + BUCKET_NS;
        match (pending, self.series.is_empty()) {
            (Some(p), true) => Some(p.max(next)),
            (_, false) => Some(next),
            (None, true) => None,
        }
    }

    /// Whether the window holds evidence from less than `span` before `at`: reports stop
    /// shortly after the evidence does, rather than extrapolate far past it.
    fn fresh(&self, at: Time, span: Time) -> bool {
        self.series
            .values()
            .filter_map(|s| s.points.back())
            .any(|p| (p.0 + 1) * BUCKET_NS + span > at)
    }

    /// Offsets of every domain connected to the reference, at event time `at`.
    pub fn offsets(&self, at: Time, last: bool) -> Vec<ClockOffset> {
        if self.series.is_empty() {
            return Vec::new();
        }
        let mut pairs = Vec::new();
        let mut errors: BTreeMap<Domain, f64> = BTreeMap::new();
        let mut seconds: BTreeMap<Domain, u64> = BTreeMap::new();
        for ((a, b), s) in &self.series {
            if let Some((off, drift, err)) = s.estimate(at) {
                let w = 1.0 / ((err + 1.0) * (err + 1.0));
                pairs.push((a.clone(), b.clone(), [off, drift], w));
                for d in [a, b] {
                    let e = errors.entry(d.clone()).or_insert(f64::INFINITY);
                    *e = e.min(err);
                    let n = seconds.entry(d.clone()).or_default();
                    *n = (*n).max(s.points.len() as u64);
                }
            }
        }
        let reference = match &self.config.reference {
            Some(r) => r.clone(),
            None => match errors.keys().next() {
                Some(d) => d.clone(),
                None => return Vec::new(),
            },
        };
        crate::clock::pairwise::solve(&reference, &pairs)
            .into_iter()
            .map(|(domain, [offset_ns, drift])| ClockOffset {
                drift_ppm: drift * 1e6,
                error_ns: if domain == reference {
                    0.0
                } else {
                    errors.get(&domain).copied().unwrap_or(f64::INFINITY)
                },
                seconds: seconds.get(&domain).copied().unwrap_or(0),
                reference: reference.clone(),
                at,
                offset_ns,
                domain,
                last,
            })
            .collect()
    }
}

/// Extension trait: clock offsets from delay bounds.
pub trait Clock<'scope> {
    /// Estimates offsets; see the module documentation. Returns the reports (every
    /// `every_ns` and at the end) and the per-second estimates for correction.
    fn clock(
        self,
        config: ClockConfig,
    ) -> (
        Stream<'scope, Time, Vec<ClockOffset>>,
        Stream<'scope, Time, Vec<ClockOffset>>,
    );
}

impl<'scope> Clock<'scope> for Stream<'scope, Time, Vec<DelayBounds>> {
    fn clock(
        self,
        config: ClockConfig,
    ) -> (
        Stream<'scope, Time, Vec<ClockOffset>>,
        Stream<'scope, Time, Vec<ClockOffset>>,
    ) {
        let every = config.every_ns.max(BUCKET_NS);
        let mut builder = OperatorBuilder::new("clock".to_owned(), self.scope());
        let mut input = builder.new_input(self, Exchange::new(|_: &DelayBounds| 0));
        let (reports_out, reports) = builder.new_output::<Vec<ClockOffset>>();
        let (estimates_out, estimates) = builder.new_output::<Vec<ClockOffset>>();
        let mut reports_out = OutputBuilder::from(reports_out);
        let mut estimates_out = OutputBuilder::from(estimates_out);
        builder.build(move |capabilities| {
            let mut caps = Some(capabilities);
            let mut estimator = ClockEstimator::new(config);
            let mut last_report: Option<Time> = None;
            // The latest report, repeated as final at the end.
            let mut latest: Vec<ClockOffset> = Vec::new();
            // The last second boundary estimated.
            let mut done: Time = 0;
            move |frontiers| {
                input.for_each(|_cap, batch| {
                    for b in batch.drain(..) {
                        estimator.add(b);
                    }
                });
                let Some(caps_now) = caps.as_mut() else {
                    return;
                };
                let now = frontiers[0].frontier().iter().next().copied();
                // One estimate per second boundary the frontier has passed, each from the
                // seconds before it: the same estimates however the frontier moves.
                let limit = now.unwrap_or(Time::MAX);
                let mut reports = Vec::new();
                let mut estimates = Vec::new();
                // Under memory pressure, at most the cap (`shed`).
                let lateness = shed::capped(estimator.config.lateness_ns);
                while let Some(at) = estimator.next_boundary(done) {
                    // Every second before `at` is in once the frontier is its lateness past.
                    if at.saturating_add(lateness) > limit {
                        break;
                    }
                    estimator.advance(at);
                    done = at;
                    let offsets = estimator.offsets(at, false);
                    if offsets.is_empty() {
                        continue;
                    }
                    if last_report.is_none_or(|r| at >= r + every) && estimator.fresh(at, every) {
                        last_report = Some(at);
                        latest.clone_from(&offsets);
                        reports.extend(offsets.iter().cloned());
                    }
                    estimates.extend(offsets);
                }
                if now.is_none() {
                    reports.extend(latest.drain(..).map(|o| ClockOffset { last: true, ..o }));
                }
                if !reports.is_empty() {
                    reports_out
                        .activate()
                        .session(&caps_now[0])
                        .give_iterator(reports.into_iter());
                }
                if !estimates.is_empty() {
                    estimates_out
                        .activate()
                        .session(&caps_now[1])
                        .give_iterator(estimates.into_iter());
                }
                crate::follow_frontier(&mut caps, now);
            }
        });
        (reports, estimates.broadcast())
    }
}

/// Extension trait: correct message timestamps to the reference clock.
pub trait Correct<'scope> {
    /// Corrects messages with the broadcast `estimates`; `alignment` stands in for domains
    /// without an estimate yet; messages seen in the `reference` clock only pass at once.
    /// See the module documentation.
    fn correct(
        self,
        estimates: Stream<'scope, Time, Vec<ClockOffset>>,
        lateness_ns: Time,
        alignment: Arc<Alignment>,
        reference: Option<Domain>,
    ) -> MessageStream<'scope>;
}

/// Whether `m`'s correction cannot depend on estimates: each observed side is in the
/// reference clock (offset 0 in every estimate) or in no domain, and the reference's coarse
/// alignment, which stands in before the first estimate, is 0 too.
fn needs_no_estimate(m: &Message, reference: Option<&Domain>, alignment: &Alignment) -> bool {
    let Some(reference) = reference else {
        return false;
    };
    let zero = match reference {
        Domain::Origin(o) => alignment.offset(*o) == 0,
        // A node's coarse offset is its host's (the side's endpoint).
        Domain::Node(_) => [
            (&m.send_domain, &m.src_endpoint),
            (&m.recv_domain, &m.dst_endpoint),
        ]
        .into_iter()
        .filter(|(d, _)| d.as_ref() == Some(reference))
        .all(|(_, e)| alignment.host_offset(e).unwrap_or(0) == 0),
    };
    let side = |raw: Option<Time>, d: &Option<Domain>| {
        raw.is_none() || d.as_ref().is_none_or(|d| d == reference)
    };
    zero && side(m.send_ns, &m.send_domain) && side(m.recv_ns, &m.recv_domain)
}

/// Each domain's estimates by the second they are for, in order of `at` (they come in that
/// order; a repeated `at`, the final report, replaces the one before).
type History = crate::FastMap<Domain, VecDeque<ClockOffset>>;

/// Adds an estimate to its domain's history, replacing one for the same second.
fn remember(history: &mut History, o: ClockOffset) {
    let h = history.entry(o.domain.clone()).or_default();
    let i = partition_point_from_back(h, |e| e.at < o.at);
    match h.get_mut(i) {
        Some(e) if e.at == o.at => *e = o,
        _ => h.insert(i, o),
    }
}

/// How far past a message `clock.correct` looks for an estimate when none precedes it (the
/// first seconds of a domain's evidence); messages wait that long for it.
const LOOK_AHEAD_NS: Time = 2 * BUCKET_NS;

/// `raw` in the reference clock, for a message of event time `at`: with the estimate for the
/// last second boundary at or before it, else the first one within [`LOOK_AHEAD_NS`] after
/// it, else the coarse alignment (a sniffer's, or for a traced node the host of `end`, the
/// side's endpoint). Every estimate up to `at + LOOK_AHEAD_NS` has arrived when this is
/// called, so the answer does not depend on timing.
fn corrected(
    raw: Option<Time>,
    domain: &Option<Domain>,
    end: &Address,
    at: Time,
    history: &mut Recent<'_>,
    alignment: &Alignment,
) -> Option<Time> {
    let raw = raw?;
    fn estimate(h: &VecDeque<ClockOffset>, at: Time) -> Option<&ClockOffset> {
        match partition_point_from_back(h, |e| e.at <= at) {
            0 => h
                .front()
                .filter(|e| e.at <= at.saturating_add(LOOK_AHEAD_NS)),
            i => h.get(i - 1),
        }
    }
    let offset = match domain {
        Some(d) => match history.get(d).and_then(|h| estimate(h, at)) {
            Some(o) => o.offset_at(at),
            None => match d {
                Domain::Origin(o) => alignment.offset(*o) as f64,
                Domain::Node(_) => alignment.host_offset(end).unwrap_or(0) as f64,
            },
        },
        None => 0.0,
    };
    // In integers: an f64 holds epoch nanoseconds only to 256 ns.
    Some(raw.saturating_add_signed(-(offset.round() as i64)))
}

/// Whether every observed side of `m` that has a clock domain has an estimate at or before
/// `m`'s event time (then its correction is known once those are in: no look-ahead).
fn has_prior_estimates(m: &Message, history: &mut Recent<'_>) -> bool {
    let at = m.event_ns;
    [(m.send_ns, &m.send_domain), (m.recv_ns, &m.recv_domain)]
        .into_iter()
        .all(|(raw, domain)| match (raw, domain) {
            (Some(_), Some(d)) => history
                .get(d)
                .and_then(VecDeque::front)
                .is_some_and(|e| e.at <= at),
            _ => true,
        })
}

/// [`History`] lookups through a few recent ones, by the domain's name's address (a worker's
/// messages share their nodes' names): no string is hashed for most timestamps.
struct Recent<'a> {
    history: &'a History,
    recent: [(usize, Option<&'a VecDeque<ClockOffset>>); 4],
    next: usize,
}

impl<'a> Recent<'a> {
    fn new(history: &'a History) -> Self {
        Recent {
            history,
            recent: [(0, None); 4],
            next: 0,
        }
    }

    fn get(&mut self, d: &Domain) -> Option<&'a VecDeque<ClockOffset>> {
        let key = match d {
            Domain::Node(n) => Arc::as_ptr(n).cast::<u8>() as usize,
            Domain::Origin(o) => (o.0 as usize) << 1 | 1,
        };
        if let Some((_, h)) = self.recent.iter().find(|r| r.0 == key) {
            return *h;
        }
        let h = self.history.get(d);
        self.recent[self.next] = (key, h);
        self.next = (self.next + 1) % self.recent.len();
        h
    }
}

/// A multiset of times that tells its smallest: a min-heap with deletions applied lazily
/// (a removed time is remembered until it reaches the top). O(log n) per insertion and
/// removal, in two contiguous heaps.
#[derive(Debug, Default)]
struct MinTimes {
    held: BinaryHeap<Reverse<Time>>,
    removed: BinaryHeap<Reverse<Time>>,
}

impl MinTimes {
    fn insert(&mut self, t: Time) {
        self.held.push(Reverse(t));
    }

    /// Removes one occurrence of `t`, which must be held.
    fn remove(&mut self, t: Time) {
        self.removed.push(Reverse(t));
        self.settle();
    }

    fn settle(&mut self) {
        while let (Some(h), Some(r)) = (self.held.peek(), self.removed.peek()) {
            if h != r {
                break;
            }
            self.held.pop();
            self.removed.pop();
        }
    }

    fn min(&self) -> Option<Time> {
        self.held.peek().map(|r| r.0)
    }
}

impl<'scope> Correct<'scope> for MessageStream<'scope> {
    fn correct(
        self,
        estimates: Stream<'scope, Time, Vec<ClockOffset>>,
        lateness_ns: Time,
        alignment: Arc<Alignment>,
        reference: Option<Domain>,
    ) -> MessageStream<'scope> {
        self.binary_frontier(
            estimates,
            Pipeline,
            Pipeline,
            "clock.correct",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut history: History = History::default();
                // Two waits. First until every estimate for a second boundary at or before
                // its time is in (the clock emits the estimate for a boundary before its
                // frontier passes the boundary plus the samples' lateness): by the time each
                // is due, then in arrival order. A message with an estimate before it on
                // every observed side is corrected then; one without (a domain's first
                // seconds) waits in `looking` until the look-ahead is in too.
                let mut waiting: Reorder<Box<Message>> = Reorder::default();
                let mut looking: Reorder<Box<Message>> = Reorder::default();
                let mut arrived: u64 = 0;
                // The capability stays at the smallest event time waiting, so that
                // downstream operators, which order by event time, never get a message whose
                // time their frontier has passed. A message is due `delay` after its event
                // time, so the first due tells the smallest event time, except for messages
                // that came later than that (due when they came): their event times are kept
                // here. In `looking`, a message is due exactly `look` after its time.
                let delay = lateness_ns;
                let look = LOOK_AHEAD_NS.saturating_add(lateness_ns);
                let mut late = MinTimes::default();
                let mut ready: Vec<Box<Message>> = Vec::new();
                move |(messages, frontier), (estimates, est_frontier), output| {
                    messages.for_each(|cap, batch| {
                        let t = cap.least().copied().unwrap_or(0);
                        for m in batch.drain(..) {
                            if needs_no_estimate(&m, reference.as_ref(), &alignment) {
                                ready.push(m);
                                continue;
                            }
                            let on_time = m.event_ns.saturating_add(delay);
                            if t > on_time {
                                late.insert(m.event_ns);
                            }
                            waiting.push(t.max(on_time), arrived, m);
                            arrived += 1;
                        }
                    });
                    estimates.for_each(|_cap, batch| {
                        for o in batch.drain(..) {
                            remember(&mut history, o);
                        }
                    });
                    let Some(cap) = held.as_mut() else { return };
                    let est_now = est_frontier.frontier().iter().next().copied();
                    let mut session = output.session(&*cap);
                    // At once: the capability is at most the input frontier those messages
                    // came at, which is at most their event times.
                    for mut m in ready.drain(..) {
                        m.send_corrected_ns = m.send_ns;
                        m.recv_corrected_ns = m.recv_ns;
                        session.give(m);
                    }
                    let mut recent = Recent::new(&history);
                    // Under memory pressure a message waits at most the cap past its time
                    // (`shed`): once the messages' frontier is that far past it, it goes
                    // with the estimates that are in.
                    let msgs_now = frontier.frontier().iter().next().copied();
                    let horizon = |wait: Time| {
                        let shift = wait - shed::capped(wait);
                        match (est_now, msgs_now) {
                            (Some(e), Some(m)) if shift > 0 => Some(e.max(m).saturating_add(shift)),
                            (e, _) => e,
                        }
                    };
                    let (first_horizon, look_horizon) = (horizon(delay), horizon(look));
                    let mut correct = |mut m: Box<Message>, recent: &mut Recent<'_>| {
                        let at = m.event_ns;
                        m.send_corrected_ns = corrected(
                            m.send_ns,
                            &m.send_domain,
                            &m.src_endpoint,
                            at,
                            recent,
                            &alignment,
                        );
                        m.recv_corrected_ns = corrected(
                            m.recv_ns,
                            &m.recv_domain,
                            &m.dst_endpoint,
                            at,
                            recent,
                            &alignment,
                        );
                        session.give(m);
                    };
                    while let Some((due, _, m)) = waiting.pop_touching(first_horizon) {
                        if est_now.is_some_and(|e| due >= e) {
                            shed::note(shed::Stage::Clock, 1);
                        }
                        let at = m.event_ns;
                        if due > at.saturating_add(delay) {
                            late.remove(at);
                        }
                        let due_looking = at.saturating_add(look);
                        if has_prior_estimates(&m, &mut recent)
                            || look_horizon.is_none_or(|h| due_looking < h)
                        {
                            correct(m, &mut recent);
                        } else {
                            looking.push(due_looking, arrived, m);
                            arrived += 1;
                        }
                    }
                    while let Some((due, _, m)) = looking.pop_touching(look_horizon) {
                        if est_now.is_some_and(|e| due >= e) {
                            shed::note(shed::Stage::Clock, 1);
                        }
                        correct(m, &mut recent);
                    }
                    drop(session);
                    // Messages reach this operator within the reconcile and nat windows of their
                    // event time: estimates more than `HISTORY_NS` older than the estimate frontier
                    // are no longer needed (the oldest kept one stands in, should one be).
                    if let Some(e) = est_now {
                        let oldest = e.saturating_sub(HISTORY_NS);
                        for h in history.values_mut() {
                            while h.len() > 1 && h.front().is_some_and(|o| o.at < oldest) {
                                h.pop_front();
                            }
                        }
                    }
                    let both = [frontier.frontier().iter().next().copied(), est_now];
                    let first = waiting.first().map(|(due, _)| due.saturating_sub(delay));
                    let first_looking = looking.first().map(|(due, _)| due.saturating_sub(look));
                    let waiting_min = [first, late.min(), first_looking]
                        .into_iter()
                        .flatten()
                        .min();
                    let lowest = match (both[0], waiting_min) {
                        (Some(f), Some(w)) => Some(f.min(w)),
                        (f, w) => f.or(w),
                    };
                    let idle = waiting.is_empty() && looking.is_empty();
                    match lowest.or(if idle { None } else { both[1] }) {
                        Some(t) if t > *cap.time() => cap.downgrade(&t),
                        Some(_) => {}
                        None if idle && both.iter().all(Option::is_none) => held = None,
                        None => {}
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_sources::OriginId;
    use std::collections::HashMap;

    fn bounds(a: u16, b: u16, bucket: Time, fwd: (i64, i64), back: (i64, i64)) -> DelayBounds {
        DelayBounds {
            a: Domain::Origin(OriginId(a)),
            b: Domain::Origin(OriginId(b)),
            pair: 1,
            bucket,
            forward: Some(fwd),
            backward: Some(back),
            count: 10,
        }
    }

    #[test]
    fn paxson_midpoint_and_bound_either_orientation() {
        // Δ = 5 ms, latency 100 µs each way.
        let b = bounds(0, 1, 0, (5_100_000, 5_400_000), (4_700_000, 4_900_000));
        let (d, h) = b.estimate().unwrap();
        assert_eq!((d, h), (5_000_000.0, 100_000.0));
        let flipped = bounds(0, 1, 0, (4_700_000, 4_900_000), (5_100_000, 5_400_000));
        assert_eq!(flipped.estimate().unwrap(), (5_000_000.0, 100_000.0));
    }

    #[test]
    fn offsets_with_drift_are_made_consistent_over_the_graph() {
        // Domain 1 runs 3 s ahead and 50 ppm fast, domain 2 is 1 h behind; pairs 0-1 and 1-2.
        let mut est = ClockEstimator::new(ClockConfig::default());
        for s in 0..30u64 {
            let t = s as f64 + 0.5;
            let off1 = 3e9 + 50e-6 * t * 1e9;
            let off2 = -3600e9;
            let lat = 100_000.0;
            for (a, b, delta) in [(0u16, 1u16, off1), (1, 2, off2 - off1)] {
                let up = (delta + lat) as i64;
                let down = (delta - lat) as i64;
                est.add(bounds(a, b, s, (up, up + 50_000), (down - 50_000, down)));
            }
        }
        let at = 30 * BUCKET_NS;
        est.advance(at);
        let offsets = est.offsets(at, false);
        let by: HashMap<Domain, &ClockOffset> =
            offsets.iter().map(|o| (o.domain.clone(), o)).collect();
        let o1 = by[&Domain::Origin(OriginId(1))];
        let want1 = 3e9 + 50e-6 * 30.0 * 1e9;
        assert!(
            (o1.offset_ns - want1).abs() < 1_000.0,
            "{} vs {want1}",
            o1.offset_ns
        );
        assert!((o1.drift_ppm - 50.0).abs() < 0.5, "{}", o1.drift_ppm);
        // The hard bound: each second's ±100 µs, widened a little by the half second from the
        // last second's middle to the boundary.
        assert!(
            o1.error_ns >= (o1.offset_ns - want1).abs() && o1.error_ns <= 110_000.0,
            "{}",
            o1.error_ns
        );
        let o2 = by[&Domain::Origin(OriginId(2))];
        assert!((o2.offset_ns + 3600e9).abs() < 1_000.0, "{}", o2.offset_ns);
        assert_eq!(by[&Domain::Origin(OriginId(0))].offset_ns, 0.0);
    }

    #[test]
    fn reports_stop_shortly_after_the_evidence() {
        let mut est = ClockEstimator::new(ClockConfig::default());
        for s in 0..20u64 {
            est.add(bounds(0, 1, s, (1_100, 1_200), (900, 1_000)));
        }
        let every = 10 * BUCKET_NS;
        let mut done = 0;
        let mut fresh = Vec::new();
        while let Some(at) = est.next_boundary(done) {
            est.advance(at);
            done = at;
            if est.fresh(at, every) {
                fresh.push(at / BUCKET_NS);
            }
        }
        assert!(
            done > 40 * BUCKET_NS,
            "estimates go on while the window holds evidence"
        );
        assert_eq!(fresh.first(), Some(&1));
        assert_eq!(
            fresh.last(),
            Some(&29),
            "reports stop within `every` of the last second"
        );
    }

    #[test]
    fn feasible_range_is_the_hard_limit_of_the_evidence() {
        // Two seconds, 10 s apart, each within ±1 of 0: a line through both boxes is at most
        // 1 away at the later one (x = 0), and, extrapolated 10 s further, at most 3.
        let points = [(-10.0, 0.0, 1.0), (0.0, 0.0, 1.0)];
        let (lo, hi) = feasible_range(&points, 1.0).unwrap();
        assert!(
            (lo + 1.0).abs() < 1e-6 && (hi - 1.0).abs() < 1e-6,
            "{lo} {hi}"
        );
        let later: Vec<(f64, f64, f64)> =
            points.iter().map(|(x, y, h)| (x - 10.0, *y, *h)).collect();
        let (lo, hi) = feasible_range(&later, 1.0).unwrap();
        assert!(
            (lo + 3.0).abs() < 1e-6 && (hi - 3.0).abs() < 1e-6,
            "{lo} {hi}"
        );
        // Evidence on both sides of x = 0 takes the other path.
        let around: Vec<(f64, f64, f64)> =
            points.iter().map(|(x, y, h)| (x + 5.0, *y, *h)).collect();
        let (lo, hi) = feasible_range(&around, 1.0).unwrap();
        assert!(
            (lo + 1.0).abs() < 1e-6 && (hi - 1.0).abs() < 1e-6,
            "{lo} {hi}"
        );
        // A slope limit narrows it; contradicting seconds leave nothing.
        let (lo, hi) = feasible_range(&later, 0.05).unwrap();
        assert!(
            (lo + 1.5).abs() < 1e-6 && (hi - 1.5).abs() < 1e-6,
            "{lo} {hi}"
        );
        assert_eq!(
            feasible_range(&[(0.0, 0.0, 1.0), (0.0, 5.0, 1.0)], 1.0),
            None
        );
    }

    #[test]
    fn a_traced_node_without_an_estimate_is_corrected_by_its_hosts_coarse_offset() {
        let mut alignment = Alignment::none();
        let host = Address::parse("10.0.0.2:80");
        alignment.set_host(causeway_sources::HostKey::of(&host), 3_600_000_000_000);
        let history = History::default();
        let mut recent = Recent::new(&history);
        let node = Some(Domain::Node("ws".into()));
        let raw = Some(7_200_000_000_000);
        let at = 3_600_000_000_000;
        assert_eq!(
            corrected(raw, &node, &host, at, &mut recent, &alignment),
            Some(3_600_000_000_000)
        );
        // A host the bootstrap did not see is taken as the reference.
        let other = Address::parse("10.0.0.3:80");
        assert_eq!(
            corrected(raw, &node, &other, at, &mut recent, &alignment),
            raw
        );
    }

    #[test]
    fn messages_in_the_reference_clock_alone_do_not_wait_for_estimates() {
        use std::sync::Mutex;
        use timely::dataflow::InputHandle;
        use timely::dataflow::operators::{Input, Inspect};

        type Corrected = (u16, Option<Time>, Option<Time>);
        let got: Arc<Mutex<Vec<Corrected>>> = Arc::default();
        let sink = Arc::clone(&got);
        timely::execute_directly(move |worker| {
            let mut messages = InputHandle::new();
            let mut estimates = InputHandle::new();
            worker.dataflow::<Time, _, _>(|scope| {
                let m = scope
                    .input_from(&mut messages)
                    .container::<Vec<Box<Message>>>();
                let e = scope
                    .input_from(&mut estimates)
                    .container::<Vec<ClockOffset>>();
                m.correct(
                    e,
                    1_000_000_000,
                    Arc::new(Alignment::none()),
                    Some(Domain::Origin(OriginId(0))),
                )
                .inspect(move |m| {
                    sink.lock().unwrap().push((
                        m.origin.0,
                        m.send_corrected_ns,
                        m.recv_corrected_ns,
                    ))
                });
            });
            let t = 5_000_000_000;
            let message = |origin: u16, recv: Option<u16>| Message {
                send_ns: Some(t),
                recv_ns: recv.map(|_| t + 1_000),
                send_domain: Some(Domain::Origin(OriginId(origin))),
                recv_domain: recv.map(|r| Domain::Origin(OriginId(r))),
                origin: OriginId(origin),
                event_ns: t,
                ..Message::default()
            };
            messages.send(Box::new(message(0, Some(0))));
            messages.send(Box::new(message(1, None)));
            messages.send(Box::new(message(2, Some(0))));
            messages.advance_to(t + 1);
            for _ in 0..50 {
                worker.step();
            }
            // The estimates' frontier is still at 0: only the message seen in the reference
            // clock alone has left, uncorrected.
            assert_eq!(*got.lock().unwrap(), vec![(0, Some(t), Some(t + 1_000))]);
            estimates.advance_to(t + 10_000_000_000);
            for _ in 0..50 {
                worker.step();
            }
            let mut all = got.lock().unwrap().clone();
            all.sort();
            assert_eq!(
                all,
                vec![
                    (0, Some(t), Some(t + 1_000)),
                    (1, Some(t), None),
                    (2, Some(t), Some(t + 1_000)),
                ]
            );
        });
    }

    proptest::proptest! {
        /// A batch's bounds are those of its messages' samples, aggregated one by one as
        /// `clock.bounds` does (node domains, both orders, several seconds and host pairs).
        #[test]
        fn batch_bounds_are_the_bounds_of_the_samples(
            msgs in proptest::collection::vec(
                (0u8..4, 0u8..4, 0u8..3, 0u8..3, 0u64..3_000, 0u64..5_000_000, proptest::bool::ANY),
                0..120,
            )
        ) {
            let name = |i: u8| -> crate::names::NodeName { Arc::from(format!("n{i}").as_str()) };
            let messages: Vec<Message> = msgs
                .iter()
                .map(|&(src, dst, sd, rd, at_ms, delay, one_sided)| Message {
                    src: name(src),
                    dst: name(dst),
                    send_ns: Some(1_000_000_000 + at_ms * 1_000_000),
                    recv_ns: (!one_sided).then_some(1_000_000_000 + at_ms * 1_000_000 + delay),
                    send_domain: Some(Domain::Node(name(sd))),
                    recv_domain: Some(Domain::Node(name(rd))),
                    event_ns: at_ms * 1_000_000,
                    ..Message::default()
                })
                .collect();
            let mut want: BTreeMap<(Time, Domain, Domain, u64), DelayBounds> = BTreeMap::new();
            for s in messages.iter().filter_map(sample_of) {
                let bucket = s.at / BUCKET_NS;
                want.entry((bucket, s.a.clone(), s.b.clone(), s.pair))
                    .or_insert(DelayBounds::empty(s.a, s.b, s.pair, bucket))
                    .record(s.forward, s.delay_ns);
            }
            let mut batch = BatchBounds::default();
            for m in &messages {
                batch.add(m);
            }
            let mut got = batch.take();
            got.sort_by(|x, y| (x.bucket, &x.a, &x.b, x.pair).cmp(&(y.bucket, &y.a, &y.b, y.pair)));
            let want: Vec<DelayBounds> = want.into_values().collect();
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert!(batch.take().is_empty());
        }
    }
}
