//! What `link` learns of sizes per link type, against the time-shifted null: [`SizeEvidence`]
//! (by the size of the call's answer), [`ParentSizes`] (by the candidate's own size) and
//! [`ReplySizes`] (by the answer's size and the task's reply's). State: arrays of [`BINS`]
//! floats per type ([`REPLY_BINS`]² for replies), freed by `link` when the type is unseen for
//! its delay window.

use super::*;

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
/// class bounds: docs/notes/performance-notebook.md, 2026-11-27).
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
/// parents' sizes are mixed with. Smaller than `SIZE_PRIOR`, which counts calls: these
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
    /// (±2 bins, mixed with `SIZE_PRIOR` calls at the overall rate) over the excess per
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
    /// `PARENT_SIZE_PRIOR` parents sized as the null's candidates) over the null's share, within
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
    /// ±1 bin, mixed with `REPLY_SIZE_PRIOR` parents sized as the null's candidates) over
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
