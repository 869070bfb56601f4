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

/// [`CausalDensity`]'s prior: the candidates, none of them parents, that every bin holds
/// besides those seen.
const PRIOR: f64 = 30.0;

/// Number of bins: delays from 1 µs to e^(BINS · ln 1.05) µs (about 10 s).
pub const BINS: usize = 330;
/// Log of the bin ratio.
const LN_RATIO: f64 = 0.048_790_164_169_432; // ln(1.05)
/// Smoothing kernel over ±2 bins.
const KERNEL: [f32; 5] = [1.0, 2.0, 3.0, 2.0, 1.0];

/// The bin of a delay in ns.
fn bin(delay_ns: f64) -> usize {
    let us = (delay_ns / 1_000.0).max(1.0);
    ((us.ln() / LN_RATIO) as usize).min(BINS - 1)
}

/// Centre of a bin, ns.
#[cfg(test)]
fn centre(b: usize) -> f64 {
    1_000.0 * ((b as f64 + 0.5) * LN_RATIO).exp()
}

/// One faded histogram over the delay bins.
#[derive(Clone, Debug)]
struct Histogram {
    bins: Vec<f32>,
    total: f64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            bins: vec![0.0; BINS],
            total: 0.0,
        }
    }

    fn add(&mut self, b: usize, w: f64) {
        self.bins[b] += w as f32;
        self.total += w;
    }

    fn scale(&mut self, s: f64) {
        for b in &mut self.bins {
            *b = (f64::from(*b) * s) as f32;
        }
        self.total *= s;
    }

    /// The weight in bin `b`, smoothed over ±2 bins.
    fn smoothed(&self, b: usize) -> f64 {
        let mut s = 0.0;
        for (k, w) in KERNEL.iter().enumerate() {
            if let Some(v) = (b + k).checked_sub(2).and_then(|i| self.bins.get(i)) {
                s += f64::from(*v * w);
            }
        }
        s / 9.0
    }

    /// The weight in bins `b − 2` to `b + 2`, unweighted.
    fn window(&self, b: usize) -> f64 {
        let lo = b.saturating_sub(2);
        let hi = (b + 3).min(self.bins.len());
        self.bins[lo..hi].iter().map(|v| f64::from(*v)).sum()
    }

    /// The share of the weight in bin `b`, smoothed.
    fn share(&self, b: usize) -> f64 {
        if self.total <= 0.0 {
            return 0.0;
        }
        self.smoothed(b) / self.total
    }
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

/// One step of fading: later values count `1/fade` times more (by `increment`); the
/// histograms are rescaled before the increment grows too large. Returns the factor they
/// were scaled by (1 if not), for what is kept in their units.
fn fade<const N: usize>(increment: &mut f64, fade: f64, histograms: [&mut Histogram; N]) -> f64 {
    *increment /= fade;
    if *increment > 1e12 {
        let s = 1.0 / *increment;
        for h in histograms {
            h.scale(s);
        }
        *increment = 1.0;
        return s;
    }
    1.0
}

/// How typical a delay is of one link type, learned from the gaps known to be complete: the
/// smoothed share of its bin relative to the most common bin's. `link` learns the delay of
/// each kind of reply after the latest message of its task with it: a reply has one possible
/// cause, so nothing is normalised against it, and a delay far from what complete tasks do
/// says that the task as linked is missing a message (a call given to another task), not
/// that another cause is likelier.
///
/// A gap is *clean* when its node made no call in it that was answered in it: a task whose
/// gap is clean cannot be missing a call, and a task that is missing one never has a clean
/// gap (the call it lost lies in it). Only clean gaps are learned, so tasks broken by wrong
/// links teach nothing. But a long gap is less often clean than a short one on a busy node,
/// so each clean gap counts as many gaps as a window that long is rarely clean: how many
/// windows of its length, shifted to a time where no reply is, were tested per clean one
/// (one added to both counts; at most [`MAX_WEIGHT`]). The learned shape is thus that of
/// complete tasks' delays, not biased towards the short ones.
///
/// Bins, smoothing and fading as in [`DelayDensity`]. State: three arrays of [`BINS`] floats
/// (clean gaps, shifted windows, clean shifted windows), freed by `link` when the type is
/// unseen for its delay window. Cost: O(1) per gap, O(bins) per refresh of the peak (every
/// 64 gaps).
#[derive(Clone, Debug)]
pub struct TypicalDelay {
    /// Clean gaps, each weighed as described.
    seen: Histogram,
    /// Shifted windows tested, and those found clean, by length.
    windows: Histogram,
    clean_windows: Histogram,
    /// Clean gaps seen (faded).
    values: f64,
    /// Gaps seen whose shifted window was tested, and how many of those were clean (faded).
    tested: f64,
    tested_clean: f64,
    /// Clean gaps those would have had if they were clean as often as shifted windows of
    /// their lengths were (faded).
    expected_clean: f64,
    increment: f64,
    fade: f64,
    /// The largest smoothed bin, as of the last refresh.
    peak: f64,
    since_refresh: u32,
    /// Event time of the last gap, for expiry.
    pub last_ns: u64,
}

/// The most a clean gap counts for ([`TypicalDelay`]): where windows of a length are
/// clean less often than this, the few clean ones are not blown up further.
pub const MAX_WEIGHT: f64 = 1000.0;

impl TypicalDelay {
    /// An empty one that remembers about `memory` gaps.
    pub fn new(memory: f64) -> TypicalDelay {
        TypicalDelay {
            seen: Histogram::new(),
            windows: Histogram::new(),
            clean_windows: Histogram::new(),
            values: 0.0,
            tested: 0.0,
            tested_clean: 0.0,
            expected_clean: 0.0,
            increment: 1.0,
            fade: 1.0 - 1.0 / memory.max(2.0),
            peak: 0.0,
            since_refresh: 0,
            last_ns: 0,
        }
    }

    /// How many clean gaps it has learned (faded).
    pub fn values(&self) -> f64 {
        self.values
    }

    /// Observes a gap of `delay_ns` at event time `t`: whether it was clean, and whether a
    /// window as long, shifted to where no reply is, was (`None`: not tested, as before the
    /// node's first arrival).
    pub fn observe(&mut self, delay_ns: f64, clean: bool, shifted_clean: Option<bool>, t: u64) {
        self.last_ns = t;
        let b = bin(delay_ns);
        self.tested *= self.fade;
        self.tested_clean *= self.fade;
        self.expected_clean *= self.fade;
        if let Some(shifted_clean) = shifted_clean {
            self.windows.add(b, self.increment);
            if shifted_clean {
                self.clean_windows.add(b, self.increment);
            }
        }
        // Windows this long tested, and those found clean, as counts.
        let n = self.windows.smoothed(b) / self.increment;
        let u = self.clean_windows.smoothed(b) / self.increment;
        if shifted_clean.is_some() {
            // The chance that a window this long is clean (one clean in two added: a length
            // with little evidence yet counts as clean half the time).
            self.tested += 1.0;
            self.tested_clean += f64::from(u8::from(clean));
            self.expected_clean += (u + 1.0) / (n + 2.0);
        }
        if clean {
            // Windows tested per clean one (one added to each: a length with little
            // evidence yet counts about once).
            let weight = ((n + 1.0) / (u + 1.0)).clamp(1.0, MAX_WEIGHT);
            self.values = self.values * self.fade + 1.0;
            self.seen.add(b, self.increment * weight);
        } else {
            self.values *= self.fade;
        }
        // The peak is in the histogram's units: scaled with it.
        self.peak *= fade(
            &mut self.increment,
            self.fade,
            [&mut self.seen, &mut self.windows, &mut self.clean_windows],
        );
        self.since_refresh += 1;
        // While nothing clean was learned the histogram is empty and its peak stays 0: a
        // type that is never clean costs no scan of the bins.
        if self.since_refresh >= 64 || (self.peak <= 0.0 && self.values > 0.0) {
            self.since_refresh = 0;
            self.peak = (0..BINS).map(|b| self.seen.smoothed(b)).fold(0.0, f64::max);
        }
    }

    /// Of this type's gaps that are not clean, the share that are what they seem (a reply
    /// to a task that made no call in it), judged by how often they are clean against how
    /// often windows as long are: gaps of tasks whose reply followed what they were given
    /// are clean as often as any window of their length, while gaps of tasks that lost a
    /// call to another task never are (the lost call lies in them). `None` while fewer than
    /// `min_expected` clean gaps were expected.
    pub fn clean_share(&self, min_expected: f64) -> Option<f64> {
        let (n, e, c) = (self.tested, self.expected_clean, self.tested_clean);
        if e < min_expected || n <= c {
            return None;
        }
        // The whole ones number c·n/e, of which all but the c clean are among the n − c.
        Some((c * (n - e) / (e * (n - c))).clamp(0.0, 1.0))
    }

    /// How typical `delay_ns` is, relative to the most typical delay: 1 at the peak, 0 where
    /// nothing was seen. 1 before anything was seen.
    pub fn relative(&self, delay_ns: f64) -> f64 {
        if self.peak <= 0.0 {
            return 1.0;
        }
        (self.seen.smoothed(bin(delay_ns)) / self.peak).min(1.0)
    }
}

/// How much likelier a send is to have a parent of one link type, by the size of the
/// send's answer, learned against the time-shifted null as [`CausalDensity`] learns delays.
/// Kinds of call that look alike by their ends often differ in what comes back: at an
/// application server a report's second query (answered with 8 kB) follows the first
/// query's answer, while every first query (answered with 4 kB or 30 kB) follows a
/// request, and the two come about as long after their causes. At each call, `link` adds
/// the size of the call's answer with the call's candidates of the type, each weighed by how
/// likely its delay makes it the parent, less those the scan shifted into the past finds
/// (none of them parents): summed over the calls of an answer size, that excess is how many
/// of them have a parent of the type. Its share of the calls of that size, against its
/// share of all calls, multiplies the odds of each candidate of the type
/// ([`SizeEvidence::ratio`]). No type is split by size, so a kind whose sizes vary keeps all
/// its samples (splitting link types by size class was tried and cut kinds in two at the
/// class bounds: docs/performance.md, 2026-11-27).
///
/// Bins: 5% of the size wide, from 1 byte to about 9 MB, read over ±2 bins. Fading as in
/// [`DelayDensity`]. State: three arrays of [`BINS`] floats per type, freed by `link` when
/// the type is unseen for its delay window. Cost: O(1) per value, O(1) per ratio.
#[derive(Clone, Debug)]
pub struct SizeEvidence {
    /// Calls, by their answers' sizes.
    sends: Histogram,
    /// Their candidates of the type, weighed, and the null's.
    candidates: Histogram,
    null: Histogram,
    increment: f64,
    fade: f64,
    /// Event time of the last call, for expiry.
    pub last_ns: u64,
}

/// The bin of a size in bytes.
fn size_bin(bytes: u64) -> usize {
    (((bytes.max(1) as f64).ln() / LN_RATIO) as usize).min(BINS - 1)
}

/// [`SizeEvidence::ratio`]'s prior: the calls, with parents of the type as often as all
/// calls have, that each size's are mixed with (so that a size seen little reads 1).
const SIZE_PRIOR: f64 = 100.0;

/// [`ParentSizes::ratio`]'s prior: the parents, sized as the null's candidates are, that the
/// parents' sizes are mixed with. Smaller than [`SIZE_PRIOR`], which counts calls: these
/// count parents, each weighed by how likely its delay made it one (on the generator's
/// multi-tier preset at parallelism 45 a prior of 100 left an authentication server's
/// session checks, which never query the database, at 0.66 of a login's odds of having
/// caused a query; 10 was tried and kept).
const PARENT_SIZE_PRIOR: f64 = 10.0;

/// The bounds of [`SizeEvidence::ratio`].
const SIZE_RATIO_MIN: f64 = 0.1;
const SIZE_RATIO_MAX: f64 = 10.0;

impl SizeEvidence {
    /// An empty one that remembers about `memory` calls.
    pub fn new(memory: f64) -> SizeEvidence {
        SizeEvidence {
            sends: Histogram::new(),
            candidates: Histogram::new(),
            null: Histogram::new(),
            increment: 1.0,
            fade: 1.0 - 1.0 / memory.max(2.0),
            last_ns: 0,
        }
    }

    /// Adds a call at event time `t` whose answer was `bytes` long: its candidates of the
    /// type weighed `candidates` in all, the null's `null`.
    pub fn add(&mut self, bytes: u64, candidates: f64, null: f64, t: u64) {
        self.last_ns = t;
        let b = size_bin(bytes);
        self.sends.add(b, self.increment);
        self.candidates.add(b, candidates * self.increment);
        self.null.add(b, null * self.increment);
        fade(
            &mut self.increment,
            self.fade,
            [&mut self.sends, &mut self.candidates, &mut self.null],
        );
    }

    /// How much likelier a call answered with `bytes` is than calls in general to have a
    /// parent of this type: the excess of candidates over the null per call at that size
    /// (±2 bins, mixed with [`SIZE_PRIOR`] calls at the overall rate) over the excess per
    /// call overall, within [0.1, 10]. 1 while the overall excess is below `min_parents`.
    pub fn ratio(&self, bytes: u64, min_parents: f64) -> f64 {
        let parents = (self.candidates.total - self.null.total) / self.increment;
        let sends = self.sends.total / self.increment;
        if parents < min_parents || sends <= 0.0 {
            return 1.0;
        }
        let base = parents / sends;
        let b = size_bin(bytes);
        let excess = ((self.candidates.window(b) - self.null.window(b)) / self.increment).max(0.0);
        let here = self.sends.window(b) / self.increment;
        let rate = (excess + SIZE_PRIOR * base) / (here + SIZE_PRIOR);
        (rate / base).clamp(SIZE_RATIO_MIN, SIZE_RATIO_MAX)
    }
}

/// How much likelier a size is for the parents of one link type than for its other
/// candidates, learned against the time-shifted null as [`CausalDensity`] learns delays:
/// at each call `link` adds the sizes of its candidates of the type, each weighed by how
/// likely its delay makes it the parent, and the same for the candidates the scan shifted
/// into the past finds, which are none of them parents. The excess of the first over the
/// second, by size, is the parents' sizes; the null's are the other candidates'. Kinds of
/// request that look alike by their senders and ports often differ in size (at an
/// authentication server a login's request, which goes on to query the database, against a
/// session check's, which does not). Bins and fading as in [`SizeEvidence`]. State: two
/// arrays of [`BINS`] floats per type, freed by `link` when the type is unseen for its delay
/// window. Cost: O(1) per value.
#[derive(Clone, Debug)]
pub struct ParentSizes {
    candidates: Histogram,
    null: Histogram,
    increment: f64,
    fade: f64,
    /// Event time of the last step, for expiry.
    pub last_ns: u64,
}

impl ParentSizes {
    /// An empty one that remembers about `memory` calls.
    pub fn new(memory: f64) -> ParentSizes {
        ParentSizes {
            candidates: Histogram::new(),
            null: Histogram::new(),
            increment: 1.0,
            fade: 1.0 - 1.0 / memory.max(2.0),
            last_ns: 0,
        }
    }

    /// Adds the size of a candidate of a call (`null`: of the shifted scan), weighing `w`.
    pub fn add(&mut self, bytes: u64, w: f64, null: bool) {
        let h = if null {
            &mut self.null
        } else {
            &mut self.candidates
        };
        h.add(size_bin(bytes), w * self.increment);
    }

    /// Ends one call's values.
    pub fn step(&mut self, t: u64) {
        self.last_ns = t;
        fade(
            &mut self.increment,
            self.fade,
            [&mut self.candidates, &mut self.null],
        );
    }

    /// How much likelier `bytes` is for a parent of this type than for a candidate that is
    /// not: the parents' share at that size (the excess there, ±2 bins, mixed with
    /// [`PARENT_SIZE_PRIOR`] parents sized as the null's candidates) over the null's share, within
    /// the bounds of [`SizeEvidence::ratio`]. 1 while the excess is below `min_parents`.
    pub fn ratio(&self, bytes: u64, min_parents: f64) -> f64 {
        let n = self.null.total;
        let parents = (self.candidates.total - n) / self.increment;
        if parents < min_parents || n <= 0.0 {
            return 1.0;
        }
        let b = size_bin(bytes);
        let null_share = (self.null.window(b) / n).max(self.increment / n);
        let excess = ((self.candidates.window(b) - self.null.window(b)) / self.increment).max(0.0);
        let parent_share =
            (excess + PARENT_SIZE_PRIOR * null_share) / (parents + PARENT_SIZE_PRIOR);
        (parent_share / null_share).clamp(SIZE_RATIO_MIN, SIZE_RATIO_MAX)
    }
}

/// How much likelier a candidate of one link type is to be a call's parent, by the size of
/// the reply its task sent and the size of the call's answer, learned against the
/// time-shifted null as [`ParentSizes`] learns the candidates' own sizes. A task's reply is
/// often made of what its calls brought back: at a web server a report's reply (45 kB)
/// follows an application call answered with 40 kB, a dynamic page's (12 kB) one answered
/// with 9 kB, while the two tasks' requests and their earlier messages look alike. At each
/// call whose answer's size is known, `link` adds each candidate whose task has replied, by
/// the pair (answer size, reply size), weighed by how likely its delay makes it the parent,
/// and the same for the candidates the scan shifted into the past finds (none of them
/// parents). Per answer size, the excess of the first over the second is the parents' reply
/// sizes; the null's are the other candidates'.
///
/// Bins: 10% of the size wide, from 1 byte to about 17 MB, read over ±1 bin in each size (25%
/// bins, which blur a login's 140-byte reply into a session check's 120, were tried: the
/// report paths' weight rose less). Fading as in [`SizeEvidence`]. State: two arrays of
/// [`REPLY_BINS`]² floats and two of [`REPLY_BINS`] per type, freed by `link` when the type
/// is unseen for its delay window. Cost: O(1) per value, 12 array reads per ratio.
#[derive(Clone, Debug)]
pub struct ReplySizes {
    /// By (answer bin, reply bin): the candidates, weighed, and the null's.
    candidates: Vec<f32>,
    null: Vec<f32>,
    /// The same by answer bin alone.
    candidates_by_answer: Vec<f32>,
    null_by_answer: Vec<f32>,
    increment: f64,
    fade: f64,
    /// Event time of the last step, for expiry.
    pub last_ns: u64,
}

/// Number of [`ReplySizes`] bins in each size.
pub const REPLY_BINS: usize = 175;

/// The bin of a size in bytes, 10% wide.
fn reply_bin(bytes: u64) -> usize {
    const LN_WIDTH: f64 = 0.095_310_179_804_324_87; // ln(1.1)
    (((bytes.max(1) as f64).ln() / LN_WIDTH) as usize).min(REPLY_BINS - 1)
}

/// [`ReplySizes::ratio`]'s prior: the parents, with reply sizes as the null's candidates
/// have, that each answer size's parents are mixed with.
const REPLY_SIZE_PRIOR: f64 = 10.0;

impl ReplySizes {
    /// An empty one that remembers about `memory` calls.
    pub fn new(memory: f64) -> ReplySizes {
        ReplySizes {
            candidates: vec![0.0; REPLY_BINS * REPLY_BINS],
            null: vec![0.0; REPLY_BINS * REPLY_BINS],
            candidates_by_answer: vec![0.0; REPLY_BINS],
            null_by_answer: vec![0.0; REPLY_BINS],
            increment: 1.0,
            fade: 1.0 - 1.0 / memory.max(2.0),
            last_ns: 0,
        }
    }

    /// Adds a candidate (`null`: of the shifted scan) of a call answered with `answer` bytes,
    /// whose task replied with `reply` bytes, weighing `w`.
    pub fn add(&mut self, answer: u64, reply: u64, w: f64, null: bool) {
        let (a, r) = (reply_bin(answer), reply_bin(reply));
        let w = (w * self.increment) as f32;
        let (pairs, by_answer) = if null {
            (&mut self.null, &mut self.null_by_answer)
        } else {
            (&mut self.candidates, &mut self.candidates_by_answer)
        };
        pairs[a * REPLY_BINS + r] += w;
        by_answer[a] += w;
    }

    /// Ends one call's values.
    pub fn step(&mut self, t: u64) {
        self.last_ns = t;
        self.increment /= self.fade;
        if self.increment > 1e12 {
            let s = (1.0 / self.increment) as f32;
            for v in self
                .candidates
                .iter_mut()
                .chain(self.null.iter_mut())
                .chain(self.candidates_by_answer.iter_mut())
                .chain(self.null_by_answer.iter_mut())
            {
                *v *= s;
            }
            self.increment = 1.0;
        }
    }

    /// How much likelier a task that replied with `reply` bytes is to hold the parent of a
    /// call answered with `answer` bytes than a candidate of this type that is not the parent:
    /// at that answer size (±1 bin), the parents' share at that reply size (the excess there,
    /// ±1 bin, mixed with [`REPLY_SIZE_PRIOR`] parents sized as the null's candidates) over
    /// the null's share, within the bounds of [`SizeEvidence::ratio`]. 1 while the excess at
    /// that answer size is below `min_parents`.
    pub fn ratio(&self, answer: u64, reply: u64, min_parents: f64) -> f64 {
        let (a, r) = (reply_bin(answer), reply_bin(reply));
        let rows = a.saturating_sub(1)..(a + 2).min(REPLY_BINS);
        let cols = r.saturating_sub(1)..(r + 2).min(REPLY_BINS);
        let sum = |v: &[f32]| -> f64 {
            rows.clone()
                .flat_map(|i| cols.clone().map(move |j| i * REPLY_BINS + j))
                .map(|k| f64::from(v[k]))
                .sum()
        };
        let n = self.null_by_answer[rows.clone()]
            .iter()
            .map(|v| f64::from(*v))
            .sum::<f64>();
        let c = self.candidates_by_answer[rows.clone()]
            .iter()
            .map(|v| f64::from(*v))
            .sum::<f64>();
        let parents = (c - n) / self.increment;
        if parents < min_parents || n <= 0.0 {
            return 1.0;
        }
        let (here, null_here) = (sum(&self.candidates), sum(&self.null));
        let null_share = (null_here / n).max(self.increment / n);
        let excess = ((here - null_here) / self.increment).max(0.0);
        let parent_share = (excess + REPLY_SIZE_PRIOR * null_share) / (parents + REPLY_SIZE_PRIOR);
        (parent_share / null_share).clamp(SIZE_RATIO_MIN, SIZE_RATIO_MAX)
    }
}

/// The learned causal delay of one link type, without expectation-maximisation: how many
/// more candidates of the type lie at a delay when a send happens than at a time when none
/// does. At each send, `link` adds the delays of the send's candidates to one histogram and
/// the delays of the candidates the same scan finds at a time shifted into the past (no send
/// there: the *null*) to another. A busy node's other candidates look alike at both times, so
/// the excess of the first over the second is the parents' delays, and the excess's share of
/// the first is the probability that a candidate of this type at this delay is the parent.
/// That excess is read through a fitted model, not bin by bin ([`CausalDensity::probability`]):
/// the parents' delays are a normal over the log bins fitted to the main mode of the excess
/// (each window's excess taken [`PROBABILITY_SIGMAS`] standard deviations low), so that a
/// bump chance makes in the excess of a busy node is not read as parents. Unlike
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

/// The parents of a [`CausalDensity`]: a normal over the bins fitted to the main mode of the
/// excess of candidates over the null, and how many parents the mode holds.
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
/// Project 5's parallelism 45 (docs/performance.md, 2026-11-28), 1.5 gave the
/// smallest per-node delay errors of 1, 1.25, 1.5, 1.75 and 2, and kept false negatives
/// within 1/N.
const PROBABILITY_SIGMAS: f64 = 1.5;

/// `total` times the share of a normal over the bins (`mean` and `sd` in bins) that lies in
/// the window of bin `b` (±2 bins), taken as the density at `b` times the window's width.
fn normal_window(total: f64, b: usize, mean: f64, sd: f64) -> f64 {
    let z = (b as f64 - mean) / sd;
    total * KERNEL.len() as f64 * (-0.5 * z * z).exp() / (sd * (2.0 * std::f64::consts::PI).sqrt())
}

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
    fn evidence(&self) -> f64 {
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
    /// parents there (the fitted normal, as of the last refresh, every 64 steps) over the
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
        let here = normal_window(parents.count, b, parents.mean, parents.sd);
        // A window few candidates fell in says little: as if PRIOR more, none of them
        // parents, were there (without it, one candidate is probability 1, and such a window
        // set the peak that `relative` divides by).
        (here / (c + PRIOR)).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ten chance answers over 0-20 ms before reply `i`, the same at its shifted time,
    /// shifted a little per reply so that every bin gets some.
    fn add_chance(d: &mut CausalDensity, i: u64) {
        for k in 0..10u64 {
            let at = ((k * 2_000_000 + i * 7_919) % 20_000_000) as f64 + 100_000.0;
            d.add_candidate(at, 1.0);
            d.add_null(at, 1.0);
        }
    }

    /// Replies on a busy node: before each, one parent 1 ms back and ten other answers spread
    /// over 0-20 ms, at both the reply and its shifted time. At 1 ms a gap is far likelier
    /// for a parent than by chance; at 5 ms, where only chance puts answers, it is not,
    /// however many were seen.
    #[test]
    fn a_gap_is_likely_for_a_parent_where_parents_are_and_not_where_chance_alone_puts_candidates() {
        let mut d = CausalDensity::new(20_000.0);
        assert_eq!(d.likelihood_ratio(1e6, 0.5), None, "nothing seen");
        for i in 0..5_000u64 {
            d.add_candidate(1e6, 1.0);
            add_chance(&mut d, i);
            d.step(i);
        }
        let at_parents = d.likelihood_ratio(1e6, 0.5).unwrap_or(0.0);
        assert!(at_parents > 10.0, "{at_parents}");
        let at_chance = d.likelihood_ratio(5e6, 0.5).unwrap_or(1.0);
        assert!(at_chance < 1e-6, "{at_chance}");
        let unseen = d.likelihood_ratio(60e6, 0.5).unwrap_or(1.0);
        assert!(unseen < 1e-6, "nothing seen there: {unseen}");
    }

    /// As above, but with fewer chance answers 50 ms before a reply than before the shifted
    /// time (as many fewer as there are parents), and a chance bump at 3 ms a twentieth as
    /// large as the parents'. Counted by the total excess, the parents would be almost none
    /// and the bump would look like a parent's gap; the fit to the main mode counts them
    /// where they are.
    #[test]
    fn a_deficit_far_away_does_not_make_a_chance_bump_look_like_parents() {
        let mut d = CausalDensity::new(20_000.0);
        for i in 0..5_000u64 {
            d.add_candidate(1e6, 1.0);
            if i % 20 == 0 {
                d.add_candidate(3e6, 1.0);
            }
            d.add_null(50e6, 1.0);
            add_chance(&mut d, i);
            d.step(i);
        }
        assert!(d.evidence() < 300.0, "{}", d.evidence());
        let at_parents = d.likelihood_ratio(1e6, 0.5).unwrap_or(0.0);
        assert!(at_parents > 10.0, "{at_parents}");
        let at_bump = d.likelihood_ratio(3e6, 0.5).unwrap_or(1.0);
        assert!(at_bump < 0.01, "{at_bump}");
    }

    #[test]
    fn a_typical_delay_is_one_at_the_peak_and_nothing_where_none_was_seen() {
        let mut d = TypicalDelay::new(1000.0);
        assert_eq!(d.relative(5e6), 1.0, "nothing seen: no judgement");
        for i in 0..500u64 {
            // 1.0 ms, 1.05 ms and 0.95 ms in turn, clean; and as many gaps of 20 ms that
            // are not, as a task that lost a call has.
            let delay = [1.0e6, 1.05e6, 0.95e6][(i % 3) as usize];
            d.observe(delay, true, Some(true), i);
            d.observe(20e6, false, Some(false), i);
        }
        assert!(d.relative(1.0e6) > 0.5, "{}", d.relative(1.0e6));
        assert_eq!(d.relative(20e6), 0.0, "what is not clean is not learned");
        assert!((d.values() - 300.0).abs() < 100.0, "{}", d.values());
    }

    /// Two kinds of complete task, as common as each other: one replies after 1 ms, the
    /// other after 4 ms, on a node where a window of 4 ms is clean a quarter as often as
    /// one of 1 ms. Weighed by how rarely their length is clean, the 4 ms gaps are as
    /// typical as the 1 ms ones, though fewer of them were seen clean.
    #[test]
    fn clean_gaps_count_as_many_as_their_length_is_rarely_clean() {
        let mut d = TypicalDelay::new(10_000.0);
        for i in 0..4000u64 {
            // Clean: every 1 ms gap; one 4 ms gap in four; the shifted windows alike.
            d.observe(1e6, true, Some(true), i);
            d.observe(4e6, i % 4 == 0, Some(i % 4 == 1), i);
        }
        let (short, long) = (d.relative(1e6), d.relative(4e6));
        assert!(short > 0.8 && long > 0.8, "{short} {long}");
        assert_eq!(d.relative(2e6), 0.0);
    }

    /// A reply type whose gaps are never clean, where windows as long are clean half the
    /// time, is made of tasks that lost a call (an application server's reply linked straight
    /// to its request, its query given to another task): none of its unclean gaps is whole.
    /// One whose gaps are clean as often as windows of their length is made of whole tasks.
    /// Before 20 clean gaps were expected, no judgement.
    #[test]
    fn a_reply_type_never_clean_where_windows_as_long_often_are_is_not_whole() {
        let (mut lost, mut whole) = (TypicalDelay::new(1000.0), TypicalDelay::new(1000.0));
        for i in 0..400u64 {
            let shifted_clean = i % 2 == 0;
            lost.observe(15e6, false, Some(shifted_clean), i);
            whole.observe(15e6, i % 2 == 1, Some(shifted_clean), i);
            if i < 30 {
                assert_eq!(lost.clean_share(20.0), None, "after {i}");
            }
        }
        let (l, w) = (lost.clean_share(20.0), whole.clean_share(20.0));
        assert_eq!(l, Some(0.0));
        assert!(w.is_some_and(|w| w > 0.8), "{w:?}");
        // Nothing was learned clean for the lost type: the histogram judges nothing.
        assert_eq!(lost.relative(15e6), 1.0);
    }

    /// The histograms are rescaled now and then (every 40 gaps here, remembering 2); the
    /// most typical delay stays typical across it.
    #[test]
    fn a_typical_delay_stays_typical_when_the_histograms_are_rescaled() {
        let mut d = TypicalDelay::new(2.0);
        for i in 0..200u64 {
            d.observe(1e6, true, Some(true), i);
            assert!(d.relative(1e6) > 0.5, "after {i}: {}", d.relative(1e6));
        }
    }

    #[test]
    fn bins_are_five_percent_wide_from_a_microsecond() {
        assert_eq!(bin(0.0), 0);
        assert_eq!(bin(1_000.0), 0);
        assert_eq!(bin(1_060.0), 1);
        let b = bin(2_000_000.0);
        assert!(centre(b) / 2_000_000.0 > 0.97 && centre(b) / 2_000_000.0 < 1.03);
        assert_eq!(bin(1e15), BINS - 1);
    }

    #[test]
    fn a_peak_over_a_background_scores_the_typical_delay_highest() {
        let mut d = DelayDensity::new(1000.0);
        // True delays near 2 ms; wrong candidates more often recent than not (0-25 ms,
        // denser near 0), as the candidates of a busy node are.
        let mut x = 12345u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as f64 / (1u64 << 31) as f64
        };
        for i in 0..2000u64 {
            d.add(2_000_000.0 + (next() - 0.5) * 400_000.0, 0.6);
            for _ in 0..4 {
                let u = next();
                d.add(u * u * 25_000_000.0, 0.1);
            }
            d.step(i);
        }
        d.refresh();
        let at_peak = d.relative(2_000_000.0);
        assert!(at_peak > 0.8, "{at_peak}");
        assert!(d.relative(9_000_000.0) < 0.3 * at_peak);
        assert!(d.relative(300_000.0) < 0.3 * at_peak);
        // One unit of parent weight per step, faded over 1000 steps, for 2000 steps.
        let expected = 1000.0 * (1.0 - (-2.0f64).exp());
        assert!((d.evidence() - expected).abs() < 10.0, "{}", d.evidence());
    }

    /// A busy node: requests arrive at random, 5 a millisecond, and each causes a call 1.5-2.5 ms
    /// later; answers arrive as often, on their own, and cause nothing. Every candidate within 10 ms counts,
    /// at each call and at a time 50 ms earlier.
    #[test]
    fn the_excess_over_the_null_finds_the_parents_delay_and_the_type_that_is_never_parent() {
        let mut x = 99u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as f64 / (1u64 << 31) as f64
        };
        let (mut requests, mut answers, mut calls) = (Vec::new(), Vec::new(), Vec::new());
        let mut t = 0.0;
        while t < 4e9 {
            t += -(1.0 - next()).ln() * 200_000.0;
            requests.push(t);
            calls.push(t + 1_500_000.0 + next() * 1_000_000.0);
        }
        let mut t = 0.0;
        while t < 4e9 {
            t += -(1.0 - next()).ln() * 200_000.0;
            answers.push(t);
        }
        calls.sort_by(f64::total_cmp);
        let (mut request, mut answer) = (CausalDensity::new(5000.0), CausalDensity::new(5000.0));
        let within = |list: &[f64], at: f64| -> Vec<f64> {
            list.iter()
                .filter(|&&r| r <= at && at - r < 10_000_000.0)
                .map(|r| at - r)
                .collect()
        };
        for (i, &c) in calls.iter().enumerate().filter(|(_, c)| **c > 1e8) {
            for d in within(&requests, c) {
                request.add_candidate(d, 1.0);
            }
            for d in within(&requests, c - 5e7) {
                request.add_null(d, 1.0);
            }
            for d in within(&answers, c) {
                answer.add_candidate(d, 1.0);
            }
            for d in within(&answers, c - 5e7) {
                answer.add_null(d, 1.0);
            }
            request.step(i as u64);
            answer.step(i as u64);
        }
        let at = |d: &CausalDensity, ms: f64| d.probability(ms * 1e6);
        // Where parents are (1.5-2.5 ms), a bin 5% wide holds 0.1 parents and 0.5 other
        // requests: a request there is the parent with probability 1/6. The parents are
        // modelled as a normal, which reads their flat spread somewhat high in its middle
        // and low at its edges.
        for ms in [1.8, 2.0, 2.2] {
            let p = at(&request, ms);
            assert!(p > 0.12 && p < 0.25, "{ms} ms: {p}");
        }
        for ms in [0.3, 0.5, 4.0, 6.0] {
            assert!(at(&request, ms) < 0.03, "{ms} ms: {}", at(&request, ms));
        }
        for ms in [0.5, 2.0, 6.0] {
            assert!(at(&answer, ms) < 0.03, "{ms} ms: {}", at(&answer, ms));
        }
        // Relative to the most typical delay: near 1 inside the parents' range, small
        // outside.
        let relative = request.relative(2.0e6);
        assert!(relative > 0.7 && relative <= 1.0, "{relative}");
        assert!(request.relative(5.0e6) < 0.2 * relative);
        // Both were candidates of every call, faded over 5000.
        let sends = 5000.0 * (1.0 - (-(calls.len() as f64 - 500.0) / 5000.0).exp());
        assert!(
            (request.samples() - sends).abs() < 0.05 * sends,
            "{}",
            request.samples()
        );
    }

    /// A delay at which a type had a handful of candidates, none of them in the null, is not
    /// taken for a sure parent: without the prior it had probability 1 and set the peak
    /// that every other delay is judged against.
    #[test]
    fn a_delay_few_candidates_had_does_not_pass_for_the_most_typical() {
        let mut d = CausalDensity::new(5000.0);
        for i in 0..20_000u64 {
            // Every send: its parent 2 ms back, and twenty other candidates spread over 0-10
            // ms, found alike at the shifted time.
            d.add_candidate(2.0e6, 1.0);
            for k in 0..20 {
                let x = ((i * 7 + k * 13) % 100) as f64 * 1e5 + 5e4;
                d.add_candidate(x, 1.0);
                d.add_null(x, 1.0);
            }
            // Once in 2,000 sends, a candidate 300 ms back that the null never had.
            if i % 2000 == 0 {
                d.add_candidate(3.0e8, 1.0);
            }
            d.step(i);
        }
        assert!(d.probability(3.0e8) < 0.1, "{}", d.probability(3.0e8));
        assert!(d.relative(2.0e6) > 0.95, "{}", d.relative(2.0e6));
        assert!(d.relative(6.0e6) < 0.1, "{}", d.relative(6.0e6));
    }

    /// A bump in the excess a tenth the size of the parents' mode, where no parent is (on a
    /// busy node, chance makes such bumps), is not read as parents: the probability follows
    /// the fitted mode.
    #[test]
    fn a_bump_beside_the_mode_is_not_read_as_parents() {
        let mut d = CausalDensity::new(20_000.0);
        assert_eq!(d.probability(2e6), 0.0, "nothing seen");
        for i in 0..5_000u64 {
            d.add_candidate(2e6, 1.0);
            if i % 10 == 0 {
                d.add_candidate(4e6, 1.0);
            }
            add_chance(&mut d, i);
            d.step(i);
        }
        let at_parents = d.probability(2e6);
        assert!(at_parents > 0.3, "{at_parents}");
        let at_bump = d.probability(4e6);
        assert!(at_bump < 0.01, "{at_bump}");
        assert!(d.relative(2e6) > 0.7, "{}", d.relative(2e6));
    }

    #[test]
    fn old_evidence_fades() {
        let mut d = DelayDensity::new(100.0);
        for i in 0..1000 {
            d.add(1_000_000.0, 1.0);
            d.add(10_000_000.0, 0.0);
            d.step(i);
        }
        for i in 0..1000 {
            d.add(10_000_000.0, 1.0);
            d.add(1_000_000.0, 0.0);
            d.step(1000 + i);
        }
        d.refresh();
        assert!(d.relative(10_000_000.0) > 0.99);
        assert!(d.relative(1_000_000.0) < 0.01);
    }

    /// An application server's queries: nine in ten are first queries (answered with 4 kB),
    /// whose parents are requests, not answers; one in ten is a second query (answered with
    /// 8 kB), whose parent is an answer of the type. Each query has three candidates of the
    /// type at its time and three at its shifted time, weighed alike; a second query has one
    /// more (its parent). A query answered with 8 kB is far likelier than queries in general
    /// to have a parent of the type, one answered with 4 kB less likely, and a size never
    /// seen reads 1.
    #[test]
    fn a_type_is_likelier_the_parent_of_calls_whose_answers_are_sized_as_its_children_are() {
        let mut e = SizeEvidence::new(20_000.0);
        assert_eq!(e.ratio(8_000, 100.0), 1.0, "nothing seen");
        for i in 0..5_000u64 {
            let (bytes, parents) = if i % 10 == 0 {
                (8_000, 1.0)
            } else {
                (4_000, 0.0)
            };
            e.add(bytes, 3.0 * 0.2 + parents * 0.5, 3.0 * 0.2, i);
        }
        let (second, first) = (e.ratio(8_000, 100.0), e.ratio(4_000, 100.0));
        assert!(second > 8.0, "{second}");
        assert!(first < 0.2, "{first}");
        assert!((e.ratio(500, 100.0) - 1.0).abs() < 1e-9);
        assert_eq!(e.ratio(8_000, 1e9), 1.0, "too few parents to judge");
    }

    /// An authentication server's queries: their parents are logins' requests (220 bytes);
    /// the other candidates are as often logins as session checks (180 bytes), at the query
    /// and at the shifted time alike. A check's size makes a candidate far less likely the
    /// parent, a login's likelier.
    #[test]
    fn a_size_the_parents_never_have_makes_a_candidate_unlikely() {
        let mut p = ParentSizes::new(20_000.0);
        assert_eq!(p.ratio(180, 100.0), 1.0, "nothing seen");
        for i in 0..5_000u64 {
            p.add(220, 0.5, false);
            for bytes in [180, 220] {
                p.add(bytes, 0.2, false);
                p.add(bytes, 0.2, true);
            }
            p.step(i);
        }
        let (check, login) = (p.ratio(180, 100.0), p.ratio(220, 100.0));
        assert!(check < 0.11, "{check}");
        assert!(login > 1.9, "{login}");
    }

    /// A web server's application calls: a report's (answered with 40 kB) has its parent in
    /// a task that replies with 45 kB, a dynamic page's (answered with 9 kB) in one that
    /// replies with 12 kB; every call's other candidates, at the call and at the shifted
    /// time alike, are as often in tasks of either kind. Read by the pair, a report task is
    /// likely the parent of a report's call and unlikely that of a page's, and the other way
    /// round; a size pair never seen reads about 1.
    #[test]
    fn a_task_is_likelier_the_parent_of_calls_whose_answers_are_sized_for_its_reply() {
        let mut r = ReplySizes::new(20_000.0);
        assert_eq!(r.ratio(40_000, 45_000, 100.0), 1.0, "nothing seen");
        for i in 0..5_000u64 {
            let (answer, own) = if i % 5 == 0 {
                (40_000, 45_000)
            } else {
                (9_000, 12_000)
            };
            r.add(answer, own, 0.5, false);
            for reply in [45_000, 12_000] {
                r.add(answer, reply, 0.2, false);
                r.add(answer, reply, 0.2, true);
            }
            r.step(i);
        }
        let report_call = (
            r.ratio(40_000, 45_000, 100.0),
            r.ratio(40_000, 12_000, 100.0),
        );
        let page_call = (r.ratio(9_000, 12_000, 100.0), r.ratio(9_000, 45_000, 100.0));
        assert!(
            report_call.0 > 1.9 && report_call.1 < 0.11,
            "{report_call:?}"
        );
        assert!(page_call.0 > 1.9 && page_call.1 < 0.11, "{page_call:?}");
        assert!(
            (r.ratio(500, 700, 100.0) - 1.0).abs() < 1e-9,
            "an answer size never seen"
        );
        assert_eq!(
            r.ratio(40_000, 45_000, 1e9),
            1.0,
            "too few parents to judge"
        );
    }
}
