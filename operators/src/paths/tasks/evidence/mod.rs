//! The kinds of evidence the task linker weighs, each learned from the data and each in a
//! file of its own behind one interface, [`Evidence`]: how long a node takes from an arrival
//! of one type to a departure of a class ([`Delays`]), how large its causes are ([`Sizes`]),
//! which calls a task of a type makes before it replies ([`Composition`]), how many of a
//! class ([`Repeats`]), how long tasks last ([`Durations`]), which arrivals precede a class
//! beyond chance ([`Coincidence`]); and, not learned per event, in which order a node takes
//! up the tasks waiting for the same step ([`order_log_prior`]).
//!
//! Every score but a coincidence's is a log-likelihood, so that the linker adds them, and so
//! that the total over a run compares one model of the data (an order prior) with another.
//! A new kind of evidence is a new file here that implements [`Evidence`], and a term in the
//! model's score (`model/call.rs` for calls, `model/reply.rs` for replies).
//!
//! State: one histogram per (arrival type, departure class) seen, one counter per
//! (task type, call signature); both bounded by the number of distinct types, not by the
//! input, and faded so that each class remembers about [`Delays::memory`] decisions.

use crate::FastMap;
use crate::paths::log_bins::LogBins;
use causeway_sources::Time;

mod coincidence;
mod composition;
mod delays;
mod durations;
mod order;
mod repeats;
mod sizes;
#[cfg(test)]
mod tests;

pub use coincidence::Coincidence;
pub use composition::Composition;
pub use delays::Delays;
pub use durations::Durations;
pub use order::order_log_prior;
pub use repeats::Repeats;
pub use sizes::{SIZE_BINS, SizeFact, Sizes, size_bin};

/// One kind of evidence: learned from what the linker observed or decided, faded so that it
/// remembers about `memory` events per class, and read for one option of a decision.
pub trait Evidence {
    /// One thing it learns from (a weighed decision, a closed task, a scanned departure).
    type Fact<'a>;
    /// What the linker asks of it about one option.
    type Question;
    /// Empty, remembering about `memory` events per class before its counts are halved.
    fn remembering(memory: f32) -> Self;
    /// Counts one fact.
    fn learn(&mut self, fact: Self::Fact<'_>);
    /// What it says of one option: a log-likelihood (a log-ratio for [`Sizes`]) that the
    /// linker adds to the option's score, 0 where it has seen too little to say; for
    /// [`Coincidence`], the probability that the arrival caused the departure.
    fn read(&self, question: Self::Question) -> f64;
}

/// Bins per histogram: log-spaced by [`BIN_RATIO`] from 1 µs, the last bin open-ended
/// (1.4^48 µs is about 10 s).
const BINS: usize = 48;
/// The ratio between consecutive bin edges.
const BIN_RATIO: f64 = 1.4;
/// The smoothing kernel over neighbouring bins: a delay's likelihood is read from its bin and
/// the two on each side, so that a histogram that has seen a few hundred delays reads smooth.
const KERNEL: [f32; 5] = [0.25, 0.5, 1.0, 0.5, 0.25];
/// What a bin no decision fell in reads: a small count, so that an unseen combination is
/// unlikely but not impossible (its log-likelihood is finite).
const PRIOR: f32 = 0.02;

/// A faded memory: past twice `memory`, the total `n` is halved, and the counts that go
/// with it are to be halved too (returns whether they are). Evidence so counted remembers
/// about `memory` events, the newest weighing most.
pub(in crate::paths::tasks) fn fade(n: &mut f32, memory: f32) -> bool {
    if *n > 2.0 * memory.max(1.0) {
        *n /= 2.0;
        true
    } else {
        false
    }
}

/// The bin of a delay in ns (negative delays, from timestamps a clock error put out of order,
/// fall in the first bin): the last edge `BIN_RATIO^k` µs at or below the delay, floored at
/// 1 µs. Every option of every call reads several: in integers ([`LogBins`]), worked out
/// from the definition in floating point ([`bin_by_float`]).
#[inline]
fn bin(delay_ns: i64) -> usize {
    if delay_ns <= 0 {
        return 0;
    }
    BIN_TABLE.bin(delay_ns as u64)
}

/// What [`bin`] reads.
static BIN_TABLE: std::sync::LazyLock<LogBins> =
    std::sync::LazyLock::new(|| LogBins::new(BINS, |d| bin_by_float(d as i64)));

/// [`bin`] in floating point: the definition its table is worked out from.
fn bin_by_float(delay_ns: i64) -> usize {
    let us = (delay_ns as f64 / 1000.0).max(1.0);
    EDGES.iter().rposition(|e| *e <= us).unwrap_or(0)
}

/// The lower edges of the bins in µs (`BIN_RATIO^k`, `EDGES[0]` = 1).
static EDGES: std::sync::LazyLock<[f64; BINS]> =
    std::sync::LazyLock::new(|| std::array::from_fn(|k| BIN_RATIO.powi(k as i32)));

/// A delay in ns between two local timestamps (`to` − `from`), negative when `to` is earlier.
pub fn delay(from: Time, to: Time) -> i64 {
    (i128::from(to) - i128::from(from)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}
