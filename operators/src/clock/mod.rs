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
//!   least-squares solve over the graph of domains, relative to the reference domain, each
//!   domain's error bound the least sum of the pairs' bounds along a path to the reference.
//!   A group of domains that the window's pairs do not connect to the reference (a client
//!   host between its requests, or services that never talk to the reference's) is placed
//!   through the domain of it whose latest offset (or, before any, start-up alignment:
//!   [`ClockConfig::anchors`]) is known best, which places a group that never meets the
//!   reference on a clock of its own, as the alignment did; a group with neither gets no
//!   estimate.
//!   Emits a [`ClockOffset`] per domain every `every_ns` and at the end; estimates a second boundary
//!   once its frontier is the samples' lateness past it. State: the window's per-second
//!   estimates per pair, and each domain's latest offset, freed a window after it was made.
//! - `clock.correct` (every worker): messages and the broadcast offsets to messages with
//!   corrected timestamps, each with the estimate for the last second boundary before it (in
//!   a domain's first seconds, the first estimate after it), or for a traced node the
//!   bootstrap's alignment of its host where that is known more tightly than the estimate. Holds each message until the
//!   estimates up to its time have arrived (the estimates' frontier is past its time plus the
//!   samples' lateness); one whose domain has no estimate before it yet waits for the
//!   domain's first estimate, at most two seconds more. Keeps its capability at the smallest
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

pub use correct::LOOK_AHEAD_NS;

use std::collections::{BTreeMap, VecDeque};
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

mod bounds;
mod correct;
mod offsets;
#[cfg(test)]
mod tests;

pub use bounds::{Bounds, MessageBounds, sample_of};
pub use correct::Correct;
pub use offsets::ClockEstimator;
use offsets::MAX_DRIFT_PPM;

/// Width of the estimation buckets: one second.
const BUCKET_NS: Time = 1_000_000_000;

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
    /// Start-up offsets by domain (the bootstrap's alignment of message traces), to place a
    /// group of domains that the pairs do not connect to the reference before any of them
    /// has an estimate: relative to their `reference`, constant, `error_ns` infinite where
    /// unbounded.
    pub anchors: BTreeMap<Domain, ClockOffset>,
}

impl Default for ClockConfig {
    fn default() -> Self {
        ClockConfig {
            window_ns: 60_000_000_000,
            every_ns: 10_000_000_000,
            reference: None,
            lateness_ns: 2_000_000_000,
            anchors: BTreeMap::new(),
        }
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
