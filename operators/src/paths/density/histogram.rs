//! The faded histogram over the delay bins that every learner here keeps ([`BINS`] floats
//! each, freed with the learner that holds it), and one step of fading: later values count
//! `1/fade` times more, the histograms rescaled before the increment grows too large.

use super::*;

/// One faded histogram over the delay bins.
#[derive(Clone, Debug)]
pub(super) struct Histogram {
    bins: Vec<f32>,
    pub(super) total: f64,
}

impl Histogram {
    pub(super) fn new() -> Histogram {
        Histogram {
            bins: vec![0.0; BINS],
            total: 0.0,
        }
    }

    pub(super) fn add(&mut self, b: usize, w: f64) {
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
    pub(super) fn smoothed(&self, b: usize) -> f64 {
        let mut s = 0.0;
        for (k, w) in KERNEL.iter().enumerate() {
            if let Some(v) = (b + k).checked_sub(2).and_then(|i| self.bins.get(i)) {
                s += f64::from(*v * w);
            }
        }
        s / 9.0
    }

    /// The weight in bins `b − 2` to `b + 2`, unweighted.
    pub(super) fn window(&self, b: usize) -> f64 {
        let lo = b.saturating_sub(2);
        let hi = (b + 3).min(self.bins.len());
        self.bins[lo..hi].iter().map(|v| f64::from(*v)).sum()
    }

    /// The share of the weight in bin `b`, smoothed.
    pub(super) fn share(&self, b: usize) -> f64 {
        if self.total <= 0.0 {
            return 0.0;
        }
        self.smoothed(b) / self.total
    }
}

/// One step of fading: later values count `1/fade` times more (by `increment`); the
/// histograms are rescaled before the increment grows too large. Returns the factor they
/// were scaled by (1 if not), for what is kept in their units.
pub(super) fn fade<const N: usize>(
    increment: &mut f64,
    fade: f64,
    histograms: [&mut Histogram; N],
) -> f64 {
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
