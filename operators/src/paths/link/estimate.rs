//! WAP5's estimate of a link type's mean causal delay (the exponential model that stands in
//! while a type has few samples). State: a sliding window of samples per type, freed as it
//! slides.

use super::*;

/// Per node pair: buckets of delay sums over the sliding window.
#[derive(Debug, Default)]
pub(super) struct Estimate {
    /// (bucket start, sum of smallest delays, their count, weighted delay sum, weight sum).
    pub(super) buckets: VecDeque<(Time, f64, f64, f64, f64)>,
}

impl Estimate {
    pub(super) fn bucket(
        &mut self,
        t: Time,
        width: Time,
        window: Time,
    ) -> &mut (Time, f64, f64, f64, f64) {
        let start = t - t % width.max(1);
        while self
            .buckets
            .front()
            .is_some_and(|b| b.0.saturating_add(window) <= start)
        {
            self.buckets.pop_front();
        }
        if self.buckets.back().is_none_or(|b| b.0 < start) {
            self.buckets.push_back((start, 0.0, 0.0, 0.0, 0.0));
        }
        // Out-of-order times land in the newest bucket.
        let n = self.buckets.len() - 1;
        &mut self.buckets[n]
    }

    /// Drops the buckets that have left the window before `t`.
    pub(super) fn trim(&mut self, t: Time, width: Time, window: Time) {
        let start = t - t % width.max(1);
        while self
            .buckets
            .front()
            .is_some_and(|b| b.0.saturating_add(window) <= start)
        {
            self.buckets.pop_front();
        }
    }

    /// The mean at `t` (over the buckets still in the window then), with `extra` as one
    /// more smallest delay.
    pub(super) fn mean_at(
        &self,
        t: Time,
        width: Time,
        window: Time,
        extra: Option<Time>,
        estimate: DelayEstimate,
    ) -> Option<f64> {
        let start = t - t % width.max(1);
        let (mut s, mut n, mut ws, mut w) = (0.0, 0.0, 0.0, 0.0);
        if let Some(e) = extra {
            s += e as f64;
            n += 1.0;
        }
        for b in self
            .buckets
            .iter()
            .filter(|b| b.0.saturating_add(window) > start)
        {
            s += b.1;
            n += b.2;
            ws += b.3;
            w += b.4;
        }
        match estimate {
            DelayEstimate::Weighted if w >= 8.0 => Some(ws / w),
            _ if n > 0.0 => Some(s / n),
            _ => None,
        }
    }
}
