//! [`CausalDensity`]: the causal delay of one link type, the excess of its candidates over the
//! time-shifted null, read through a heavy-tailed curve (Student's t, 3 degrees of freedom) at
//! the place and width of the excess's main mode. State: two arrays
//! of [`BINS`] floats per type, freed by `link` when the type is unseen for its delay window.

use super::*;

/// [`CausalDensity`]'s prior: the candidates, none of them parents, that every bin holds
/// besides those seen.
const PRIOR: f64 = 30.0;

/// The learned causal delay of one link type, without expectation-maximisation: how many
/// more candidates of the type lie at a delay when a send happens than at a time when none
/// does. At each send, `link` adds the delays of the send's candidates to one histogram and
/// the delays of the candidates the same scan finds at a time shifted into the past (no send
/// there: the *null*) to another. A busy node's other candidates look alike at both times, so
/// the excess of the first over the second is the parents' delays, and the excess's share of
/// the first is the probability that a candidate of this type at this delay is the parent.
/// That excess is read through a fitted model, not bin by bin ([`CausalDensity::probability`]):
/// the parents' delays are a Student's t over the log bins at the mean and spread of the
/// main mode of the excess (each window's excess taken `PROBABILITY_SIGMAS` standard
/// deviations low), so that a bump chance makes in the excess of a busy node is not read as
/// parents, while a parent that came late still is one (the t's tails, `PARENTS_NU`). Unlike
/// [`DelayDensity`], nothing learned feeds back into what is learned, so a busy node cannot
/// talk itself into the wrong delay; and a type that is often a candidate but never the
/// parent learns that (no excess at any delay). The excess is a small difference of two
/// large counts on a busy node, so it needs a long memory (`link` gives these densities
/// twenty times its others'), and a window few candidates fell in is shrunk towards 0
/// (`PRIOR`: 30).
///
/// Bins, smoothing and fading as in [`DelayDensity`]. State: two arrays of [`BINS`] floats
/// per type, freed by `link` when the type is unseen for its delay window. Cost: O(1) per
/// value.
#[derive(Clone, Debug)]
pub struct CausalDensity {
    candidates: Histogram,
    null: Histogram,
    /// Sends it was a candidate of (faded).
    sends: f64,
    increment: f64,
    fade: f64,
    /// Largest [`CausalDensity::probability`] over the bins, as of the last refresh.
    peak: f64,
    /// The parents' gaps fitted for [`CausalDensity::likelihood_ratio`], when first asked
    /// for after a refresh.
    fit: Option<Fit>,
    /// Steps since the last refresh.
    since_refresh: u32,
    /// Event time of the last value, for expiry.
    pub last_ns: u64,
    /// The parents as [`CausalDensity::probability`] models them, as of the last refresh.
    parents: Option<Parents>,
}

/// The parents of a [`CausalDensity`]: the mean and spread of the main mode of the excess of
/// candidates over the null (read through a t, [`student_window`]), and how many parents the
/// mode holds.
#[derive(Clone, Copy, Debug)]
struct Parents {
    /// Mean, in bins.
    mean: f64,
    /// Standard deviation, in bins.
    sd: f64,
    /// The excess of candidates over the null within three standard deviations of the mean
    /// (faded, in candidates).
    count: f64,
}

/// How many standard deviations low each window's excess is taken when fitting the parents
/// that [`CausalDensity::probability`] reads. On the generator's multi-tier preset at
/// Project 5's parallelism 45 (docs/notes/performance-notebook.md, 2026-11-28), 1.5 gave the
/// smallest per-node delay errors of 1, 1.25, 1.5, 1.75 and 2, and kept false negatives
/// within 1/N.
const PROBABILITY_SIGMAS: f64 = 1.5;

/// `total` times the share of a normal over the bins (`mean` and `sd` in bins) that lies in
/// the window of bin `b` (±2 bins), taken as the density at `b` times the window's width.
fn normal_window(total: f64, b: usize, mean: f64, sd: f64) -> f64 {
    let z = (b as f64 - mean) / sd;
    total * KERNEL.len() as f64 * (-0.5 * z * z).exp() / (sd * (2.0 * std::f64::consts::PI).sqrt())
}

/// `total` times the share of a Student's t with [`PARENTS_NU`] degrees of freedom over the
/// bins (location `mean`, scale `sd`, in bins) in the window of bin `b` (±2 bins), taken as
/// the density at `b` times the window's width.
fn student_window(total: f64, b: usize, mean: f64, sd: f64) -> f64 {
    // Γ(2) / (√(3π) Γ(3/2)) = 2 / (π √3).
    const NORM: f64 = 2.0 / (std::f64::consts::PI * 1.732_050_807_568_877_2);
    let z = (b as f64 - mean) / sd;
    total * KERNEL.len() as f64 * NORM * (1.0 + z * z / PARENTS_NU).powi(-2) / sd
}

/// The degrees of freedom of the t that [`CausalDensity::probability`] reads the parents'
/// mode through (the exponent in [`student_window`] is `-(ν + 1) / 2 = -2`). A normal's tails
/// are far too light for what servers do: the mode's spread is fitted to the windows where
/// the excess stands out, and a threaded python server's calls (mode 150 µs, one in ten after
/// 400 µs, a few after 1 ms as a thread waits for the interpreter's lock) read 1e-5 to 1e-14
/// at 3 to 8 spreads, below any call's chance of being spontaneous and below a concurrent
/// request's by the exponential alone, so the connection affinity never got to weigh in. A t
/// is the usual robust choice (a normal whose spread itself varies, as a server's does with
/// its load); 3 degrees of freedom is the heaviest with a finite spread. On the multi-tier
/// test's six captures, requests on exactly their path rose from 90.5-94.7% to 95.8-97.2%
/// (socket logs 92.5-94.7% to 98.7-99.5%); the generator's presets at Project 5's
/// parallelism 45 pay for it with the largest per-node delay error 3.2-4.2% to 4.3-4.6%
/// over seeds 1-3 (ν = 8: 3.3%, but captures 93.8-96.4%; docs/notes/2026-11-30-heavy-tails.md).
const PARENTS_NU: f64 = 3.0;

/// A normal over the bins fitted to the excess of candidates over the null.
#[derive(Clone, Copy, Debug)]
struct Fit {
    /// The margin it was fitted with.
    sigmas: f64,
    /// Mean, in bins.
    mean: f64,
    /// Standard deviation, in bins; 0 if no excess stood out.
    sd: f64,
    /// Whether the histograms were refreshed since.
    due: bool,
}

/// The narrowest fit, in bins (±2 bins: the smoothing's width).
const FIT_MIN_SD_BINS: f64 = 2.0;
/// Windows without excess that still join two parts of one mode.
const FIT_GAP_BINS: usize = 3;

impl CausalDensity {
    /// An empty density that remembers about `memory` steps.
    pub fn new(memory: f64) -> CausalDensity {
        CausalDensity {
            candidates: Histogram::new(),
            null: Histogram::new(),
            sends: 0.0,
            increment: 1.0,
            fade: 1.0 - 1.0 / memory.max(2.0),
            peak: 0.0,
            fit: None,
            since_refresh: 0,
            last_ns: 0,
            parents: None,
        }
    }

    /// The (faded) excess of candidates over the null over all delays: what
    /// [`CausalDensity::likelihood_ratio`] once counted the parents by, and what a deficit
    /// away from the mode cancels (tests show it).
    #[cfg(test)]
    pub(super) fn evidence(&self) -> f64 {
        ((self.candidates.total - self.null.total) / self.increment).max(0.0)
    }

    /// How many sends it has been a candidate of (faded): how much its
    /// [`CausalDensity::probability`] may be trusted, whether or not it was their parent.
    pub fn samples(&self) -> f64 {
        self.sends
    }

    /// Adds the delay of a candidate of a send, weighing `w` (its structural weight).
    pub fn add_candidate(&mut self, delay_ns: f64, w: f64) {
        self.candidates.add(bin(delay_ns), w * self.increment);
    }

    /// Adds the delay of a candidate at the shifted time.
    pub fn add_null(&mut self, delay_ns: f64, w: f64) {
        self.null.add(bin(delay_ns), w * self.increment);
    }

    /// Ends one send's values: the next count a little more than these (fading).
    pub fn step(&mut self, t: u64) {
        self.last_ns = t;
        self.sends = self.sends * self.fade + 1.0;
        fade(
            &mut self.increment,
            self.fade,
            [&mut self.candidates, &mut self.null],
        );
        self.since_refresh += 1;
        if self.since_refresh >= 64 {
            self.since_refresh = 0;
            self.parents = self.fit_parents();
            self.peak = (0..BINS).map(|b| self.at_bin(b)).fold(0.0, f64::max);
            if let Some(f) = &mut self.fit {
                f.due = true;
            }
        }
    }

    /// The probability that a candidate of this type with delay `delay_ns` is the parent: the
    /// parents there (the fitted t, as of the last refresh, every 64 steps) over the
    /// candidates there (±2 bins), shrunk towards 0 where few were seen (as if `PRIOR` (30)
    /// more candidates, none a parent, were there). In `[0, 1]`; 0 before the first refresh
    /// and while no excess stands out. Read bin by bin, the excess of a busy node is noise
    /// away from the mode: at Project 5's parallelism 45 an application server's second
    /// queries (2 ms after the first answer) read 0.17 at 1.5 ms and still 0.07 at 3.5 ms and
    /// 0.10 at 4 ms, early in the trace higher at 4 ms than at 2; fitted, 0.34 at 2 ms and 0
    /// from 3 ms.
    pub fn probability(&self, delay_ns: f64) -> f64 {
        self.at_bin(bin(delay_ns))
    }

    /// [`CausalDensity::probability`] relative to the largest over all delays (as of the
    /// last refresh, every 64 steps): 1 at the most typical delay. 0 before the first
    /// refresh.
    pub fn relative(&self, delay_ns: f64) -> f64 {
        if self.peak <= 0.0 {
            return 0.0;
        }
        (self.probability(delay_ns) / self.peak).min(1.0)
    }

    /// How much likelier a gap of `delay_ns` is for a parent than for a candidate that chance
    /// put there: the parents' share of all parents at that gap (over ±2 bins) against the
    /// null's share of all null candidates there. The parents' gaps are a normal over the
    /// log bins (a log-normal) fitted to the main mode of the excess of candidates over the
    /// null, each window's excess taken `sigmas` standard deviations low (two Poisson
    /// counts), so that a bump chance makes on a busy node is not read as parents. The fit
    /// (refreshed every 64 steps) makes the ratio smooth where the excess is noise, and
    /// counts the parents by the mode, not by the total excess, which the null's share
    /// outside the mode may cancel (a node that answers less just before its replies than
    /// elsewhere: on the @45 trace the total excess was 1.5% of the mode's and made every
    /// gap look like a parent's). Near 0 away from the mode; large where parents crowd the
    /// candidates. `None` while no excess or no null was seen.
    pub fn likelihood_ratio(&mut self, delay_ns: f64, sigmas: f64) -> Option<f64> {
        if self.fit.is_none_or(|f| f.sigmas != sigmas || f.due) {
            self.fit = Some(self.fit_mode(sigmas, true));
        }
        let fit = self.fit?;
        let null = self.null.total / self.increment;
        if fit.sd <= 0.0 || null <= 0.0 {
            return None;
        }
        let b = bin(delay_ns);
        let n = self.null.window(b) / self.increment;
        let share = normal_window(1.0, b, fit.mean, fit.sd);
        // One null candidate more in every window: a gap the null never reached is not
        // infinitely likely.
        Some(share / ((n + 1.0) / null))
    }

    /// The normal over bins fitted to the main mode of the excess: the windows around the
    /// largest excess, up to [`FIT_GAP_BINS`] empty windows apart. `sd` 0 if none.
    ///
    /// With `raw_shape`, the mode's mean and spread are those of the excess itself, not of
    /// the excess less its noise: the noise grows with the delay (a log bin holds more of
    /// a uniform null the longer its delays), so the shape less it sits early. The reply
    /// gaps read theirs so ([`CausalDensity::likelihood_ratio`]; on the generator's
    /// multi-tier preset at parallelism 45 the largest per-node delay error over seeds 1-8
    /// fell on six of them and rose on one, by 0.25 points on average, the report paths'
    /// replies being measured short); the causal densities keep the other (read raw, a web
    /// server's calls were measured up to 8.6% long).
    fn fit_mode(&self, sigmas: f64, raw_shape: bool) -> Fit {
        let excess: [f64; BINS] = std::array::from_fn(|b| {
            let (c, n) = self.windows(b);
            (c - n - sigmas * (c + n).sqrt()).max(0.0)
        });
        let none = Fit {
            sigmas,
            mean: 0.0,
            sd: 0.0,
            due: false,
        };
        let Some((top, &peak)) = excess.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)) else {
            return none;
        };
        if peak <= 0.0 {
            return none;
        }
        let near = |range: std::ops::Range<usize>| range.into_iter().any(|i| excess[i] > 0.0);
        let (mut lo, mut hi) = (top, top);
        while lo > FIT_GAP_BINS && near(lo - FIT_GAP_BINS..lo) {
            lo -= 1;
        }
        while hi + FIT_GAP_BINS < BINS && near(hi + 1..hi + 1 + FIT_GAP_BINS) {
            hi += 1;
        }
        let (mut w, mut m1, mut m2) = (0.0, 0.0, 0.0);
        for (i, &x) in excess.iter().enumerate().take(hi + 1).skip(lo) {
            let x = if raw_shape {
                let (c, n) = self.windows(i);
                (c - n).max(0.0)
            } else {
                x
            };
            let i = i as f64;
            w += x;
            m1 += x * i;
            m2 += x * i * i;
        }
        let mean = m1 / w;
        Fit {
            sigmas,
            mean,
            sd: (m2 / w - mean * mean).max(0.0).sqrt().max(FIT_MIN_SD_BINS),
            due: false,
        }
    }

    /// The candidates and the null in the window of bin `b` (±2 bins), in candidates (for the
    /// fits, which need both; a reading that needs one sums only that one).
    fn windows(&self, b: usize) -> (f64, f64) {
        (
            self.candidates.window(b) / self.increment,
            self.null.window(b) / self.increment,
        )
    }

    /// The parents fitted to the main mode of the excess, `None` if none stands out.
    fn fit_parents(&self) -> Option<Parents> {
        let fit = self.fit_mode(PROBABILITY_SIGMAS, false);
        if fit.sd <= 0.0 {
            return None;
        }
        // Windows overlap: each bin's excess counted once.
        let count: f64 = (0..BINS)
            .filter(|&b| ((b as f64 - fit.mean) / fit.sd).abs() <= 3.0)
            .map(|b| {
                let (c, n) = self.windows(b);
                (c - n).max(0.0)
            })
            .sum::<f64>()
            / KERNEL.len() as f64;
        Some(Parents {
            mean: fit.mean,
            sd: fit.sd,
            count,
        })
    }

    fn at_bin(&self, b: usize) -> f64 {
        let Some(parents) = self.parents else {
            return 0.0;
        };
        let c = self.candidates.window(b) / self.increment;
        if c <= 0.0 {
            return 0.0;
        }
        let here = student_window(parents.count, b, parents.mean, parents.sd);
        // A window few candidates fell in says little: as if PRIOR more, none of them
        // parents, were there (without it, one candidate is probability 1, and such a window
        // set the peak that `relative` divides by).
        (here / (c + PRIOR)).clamp(0.0, 1.0)
    }
}
