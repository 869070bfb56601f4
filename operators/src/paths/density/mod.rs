//! Learned delays, Project 5's "scoreboard" (§5.1.1.2) made streaming and corrected for what a
//! busy node's candidates look like. [`CausalDensity`] (below) learns how long a link type's
//! parents take against a time-shifted null, and is what `link` weighs delays by;
//! [`DelayDensity`] learns by expectation-maximisation, which is what `link` learns the
//! time from a call's answer to its task's reply with.
//!
//! A link type names both ends of a link: the parent's sender and kind (a request from a
//! client, the answer from C) and the child's receiver and kind (a call to D, a reply).
//! [`DelayDensity`]: whenever `link` weighs a child, every candidate parent adds its delay to
//! two histograms of its type: the *candidates'* (weight one) and the *parents'* (weight: the candidate's
//! probability of being the parent under the model itself; all alike, Project 5's `1/N`,
//! while the type has no evidence). The model is their ratio: how much likelier a delay is
//! among parents than among candidates. The ratio, not the parents' histogram alone, because
//! a busy node's candidates are mostly recent ones (older ones have been answered or have
//! caused their child already): the parents' delays pile up where candidates thin out, and
//! a raw histogram would favour the most recent candidate as WAP5's exponential does.
//! Weighting by the model's own probabilities is the iteration WAP5 §5.1 suggests
//! (expectation-maximisation), done as the data streams.
//!
//! Bins are logarithmic (5% wide from 1 µs to about 10 s; Project 5 binned by `log_1.05`) and
//! read smoothed over ±2 bins (Project 5 smooths by convolution). Old evidence fades: each
//! step counts `1/fade` times the one before, so a type follows about its last `memory`
//! children. State: two arrays of [`BINS`] floats per type, freed by `link` when the type
//! has not been seen for its delay window. Cost: O(1) per value, O(bins) per refresh of the
//! peak (every 64 steps).

mod causal;
mod histogram;
mod sizes;
#[cfg(test)]
mod tests;
mod typical;

use histogram::{Histogram, fade};

use super::log_bins::LogBins;

pub use causal::CausalDensity;
pub use sizes::{ParentSizes, REPLY_BINS, ReplySizes, SizeEvidence};
pub use typical::{MAX_WEIGHT, TypicalDelay};

/// Number of bins: delays from 1 µs to e^(BINS · ln 1.05) µs (about 10 s).
pub const BINS: usize = 330;
/// Log of the bin ratio.
const LN_RATIO: f64 = 0.048_790_164_169_432; // ln(1.05)
/// Smoothing kernel over ±2 bins.
const KERNEL: [f32; 5] = [1.0, 2.0, 3.0, 2.0, 1.0];

/// The bin of a delay in ns: `⌊ln(µs) / ln 1.05⌋`, at least 1 µs, at most the last bin.
/// Every candidate of every send reads several: a delay in whole ns (all of them, but a
/// test's) is looked up in integers ([`LogBins`]), anything else goes the float path.
#[inline]
fn bin(delay_ns: f64) -> usize {
    if (0.0..9.0e15).contains(&delay_ns) && delay_ns.fract() == 0.0 {
        BIN_TABLE.bin(delay_ns as u64)
    } else {
        bin_by_float(delay_ns)
    }
}

/// [`bin`] in floating point: the definition.
fn bin_by_float(delay_ns: f64) -> usize {
    let us = (delay_ns / 1_000.0).max(1.0);
    ((us.ln() / LN_RATIO) as usize).min(BINS - 1)
}

/// What [`bin`] reads for a delay in whole ns.
static BIN_TABLE: std::sync::LazyLock<LogBins> =
    std::sync::LazyLock::new(|| LogBins::new(BINS, |d| bin_by_float(d as f64)));

/// Centre of a bin, ns.
#[cfg(test)]
fn centre(b: usize) -> f64 {
    1_000.0 * ((b as f64 + 0.5) * LN_RATIO).exp()
}

/// The learned delay distribution of one link type, against the delays of all its
/// candidates.
#[derive(Clone, Debug)]
pub struct DelayDensity {
    /// Delays of the parents, each weighted by its probability.
    parents: Histogram,
    /// Delays of every candidate, weight one each: what a candidate's delay looks like
    /// whether it is the parent or not.
    candidates: Histogram,
    /// What the next value's weight is multiplied by (grows by `1/fade` per step; both
    /// histograms are rescaled when it gets large).
    increment: f64,
    fade: f64,
    /// Largest [`DelayDensity::ratio`] over the bins, as of the last refresh.
    peak: f64,
    /// Steps since the last refresh.
    since_refresh: u32,
    /// Event time of the last value, for expiry.
    pub last_ns: u64,
}

impl DelayDensity {
    /// An empty density that remembers about `memory` steps.
    pub fn new(memory: f64) -> DelayDensity {
        DelayDensity {
            parents: Histogram::new(),
            candidates: Histogram::new(),
            increment: 1.0,
            fade: 1.0 - 1.0 / memory.max(2.0),
            peak: 0.0,
            since_refresh: 0,
            last_ns: 0,
        }
    }

    /// The evidence it holds: the probability mass of parents seen (faded).
    pub fn evidence(&self) -> f64 {
        self.parents.total / self.increment
    }

    /// Adds a candidate's delay, with the probability that it is the parent.
    pub fn add(&mut self, delay_ns: f64, probability: f64) {
        let b = bin(delay_ns);
        self.parents.add(b, probability * self.increment);
        self.candidates.add(b, self.increment);
    }

    /// Ends one child's values: the next count a little more than these (fading).
    pub fn step(&mut self, t: u64) {
        self.last_ns = t;
        fade(
            &mut self.increment,
            self.fade,
            [&mut self.parents, &mut self.candidates],
        );
        self.since_refresh += 1;
        if self.since_refresh >= 64 || self.peak == 0.0 {
            self.refresh();
        }
    }

    /// Recomputes the peak. O(bins).
    pub fn refresh(&mut self) {
        self.since_refresh = 0;
        self.peak = (0..BINS).map(|b| self.ratio(b)).fold(0.0, f64::max);
    }

    /// How much likelier a parent's delay falls in bin `b` than any candidate's.
    fn ratio(&self, b: usize) -> f64 {
        self.parents.share(b) / (self.candidates.share(b) + 0.02 / BINS as f64)
    }

    /// How typical `delay_ns` is of a parent rather than of any candidate, relative to the
    /// most typical delay: 1 at the peak, 0 where no parent was seen.
    pub fn relative(&self, delay_ns: f64) -> f64 {
        if self.peak <= 0.0 {
            return 0.0;
        }
        (self.ratio(bin(delay_ns)) / self.peak).min(1.0)
    }
}
