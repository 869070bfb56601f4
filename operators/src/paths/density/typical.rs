//! [`TypicalDelay`]: how typical a delay is of one link type, learned from the gaps known to be
//! complete. State: three arrays of [`BINS`] floats per type, freed by `link` when the type is
//! unseen for its delay window.

use super::*;

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
