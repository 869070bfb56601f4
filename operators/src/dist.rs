//! [`Dist`]: a weighted distribution of durations (node delays, network latencies, end-to-end
//! times) with an exact mean and quantiles from an hdrhistogram.
//!
//! Path instances carry probabilities, so every value is recorded with a weight (WAP5 §5.2:
//! the average of a node's delays is weighted by the probability of each instance). The mean
//! is exact; quantiles come from the values themselves while there are few (most patterns are
//! rare) and from an hdrhistogram (µs resolution, 2 significant digits) once there are more,
//! so a rare pattern costs bytes, not the tens of kilobytes of a histogram.
//!
//! State: at most 256 values (`SMALL`), then one histogram whose size is bounded by its range and
//! precision, whatever it has seen; freed with the distribution (its pattern or bucket).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Values kept verbatim before switching to a histogram (recording into one costs ~100 ns, a
/// push a few): at 8 bytes each, at most 2 KiB, so the long tail of rare patterns stays small.
const SMALL: usize = 256;
/// Weights are recorded in thousandths in the histogram.
const SCALE: f64 = 1000.0;

/// Mean and quantiles of a distribution, in ms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Weighted mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// A weighted distribution of durations in ns. It serializes exactly (the histogram as its
/// recorded values and counts), for checkpoints.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(from = "DistState", into = "DistState")]
pub struct Dist {
    weight: f64,
    sum: f64,
    /// (µs, weight), at most [`SMALL`] of them, until `hist` takes over.
    small: Vec<(u32, f32)>,
    hist: Option<Box<Histogram<u32>>>,
}

/// [`Dist`] as it is saved: the histogram as (value, count) pairs.
#[derive(Serialize, Deserialize)]
struct DistState {
    weight: f64,
    sum: f64,
    small: Vec<(u32, f32)>,
    hist: Option<Vec<(u64, u32)>>,
}

impl From<Dist> for DistState {
    fn from(d: Dist) -> Self {
        DistState {
            weight: d.weight,
            sum: d.sum,
            small: d.small,
            hist: d.hist.map(|h| {
                h.iter_recorded()
                    .map(|v| (v.value_iterated_to(), v.count_at_value()))
                    .collect()
            }),
        }
    }
}

impl From<DistState> for Dist {
    fn from(s: DistState) -> Self {
        Dist {
            weight: s.weight,
            sum: s.sum,
            small: s.small,
            hist: s.hist.map(|values| {
                let mut h = new_hist();
                for (v, n) in values {
                    let _ = h.record_n(v, n);
                }
                Box::new(h)
            }),
        }
    }
}

impl Dist {
    /// Adds `ns` with weight `w` (negative durations count as 0; zero weights are ignored).
    /// Returns how many bytes [`Dist::heap_bytes`] grew by (negative if it shrank), so that
    /// a table of distributions can keep its size current in O(1).
    pub fn add(&mut self, ns: i64, w: f64) -> isize {
        if w <= 0.0 {
            return 0;
        }
        let before = self.heap_bytes();
        let ns = ns.max(0) as u64;
        self.weight += w;
        self.sum += w * ns as f64;
        let us = ns / 1_000;
        match &mut self.hist {
            Some(h) => record(h, us, w),
            None => {
                self.small
                    .push((u32::try_from(us).unwrap_or(u32::MAX), w as f32));
                if self.small.len() > SMALL {
                    self.spill();
                }
            }
        }
        self.heap_bytes() as isize - before as isize
    }

    fn spill(&mut self) {
        let mut h = new_hist();
        for (us, w) in self.small.drain(..) {
            record(&mut h, u64::from(us), f64::from(w));
        }
        self.small = Vec::new();
        self.hist = Some(Box::new(h));
    }

    /// Bytes this distribution holds on the heap (its values, or its histogram's counts).
    /// O(1).
    pub fn heap_bytes(&self) -> usize {
        self.small.capacity() * std::mem::size_of::<(u32, f32)>()
            + self.hist.as_ref().map_or(0, |h| {
                std::mem::size_of::<Histogram<u32>>()
                    + h.distinct_values() * std::mem::size_of::<u32>()
            })
    }

    /// Total weight.
    pub fn weight(&self) -> f64 {
        self.weight
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.weight <= 0.0
    }

    /// Weighted mean in ms.
    pub fn mean_ms(&self) -> f64 {
        if self.weight > 0.0 {
            self.sum / self.weight / 1e6
        } else {
            0.0
        }
    }

    /// Mean and quantiles in ms.
    pub fn summary(&self) -> Summary {
        let mean = self.mean_ms();
        match &self.hist {
            Some(h) => {
                let q = |p: f64| h.value_at_quantile(p) as f64 / 1_000.0;
                Summary {
                    mean,
                    p50: q(0.5),
                    p90: q(0.9),
                    p99: q(0.99),
                }
            }
            None => {
                let mut v = self.small.clone();
                v.sort_by_key(|&(us, _)| us);
                let total: f64 = v.iter().map(|&(_, w)| f64::from(w)).sum();
                let q = |p: f64| {
                    let target = p * total;
                    let mut acc = 0.0;
                    for &(us, w) in &v {
                        acc += f64::from(w);
                        if acc >= target {
                            return us as f64 / 1_000.0;
                        }
                    }
                    v.last().map_or(0.0, |&(us, _)| us as f64 / 1_000.0)
                };
                Summary {
                    mean,
                    p50: q(0.5),
                    p90: q(0.9),
                    p99: q(0.99),
                }
            }
        }
    }

    /// Adds everything in `other`.
    pub fn merge(&mut self, other: &Dist) {
        self.weight += other.weight;
        self.sum += other.sum;
        match &other.hist {
            Some(oh) => {
                if self.hist.is_none() {
                    self.spill();
                }
                if let Some(h) = &mut self.hist {
                    let _ = h.add(&**oh);
                }
            }
            None => {
                for &(us, w) in &other.small {
                    match &mut self.hist {
                        Some(h) => record(h, u64::from(us), f64::from(w)),
                        None => self.small.push((us, w)),
                    }
                }
                if self.hist.is_none() && self.small.len() > SMALL {
                    self.spill();
                }
            }
        }
    }
}

#[allow(clippy::expect_used)]
fn new_hist() -> Histogram<u32> {
    // 2 significant digits (valid: at most 5), auto-resizing so no value is ever refused.
    let mut h = Histogram::<u32>::new(2).expect("2 significant digits is a valid precision");
    h.auto(true);
    h
}

fn record(h: &mut Histogram<u32>, us: u64, w: f64) {
    let n = (w * SCALE).round().clamp(1.0, f64::from(u32::MAX)) as u32;
    // The histogram resizes for any value; a count that would overflow is dropped.
    let _ = h.record_n(us, n);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_and_restored_exactly() {
        for n in [3, 1000] {
            let mut d = Dist::default();
            for i in 0..n {
                d.add(i * 37_000 + 5_000, 0.5 + (i % 3) as f64);
            }
            let text = serde_json::to_string(&d).unwrap();
            let back: Dist = serde_json::from_str(&text).unwrap();
            assert_eq!(back.summary(), d.summary());
            assert_eq!(back.weight(), d.weight());
            let mut both = back.clone();
            both.merge(&d);
            assert_eq!(both.summary().p90, d.summary().p90);
        }
    }

    #[test]
    fn weighted_mean_and_quantiles_small_and_large() {
        let mut d = Dist::default();
        d.add(1_000_000, 1.0);
        d.add(3_000_000, 3.0);
        assert!((d.mean_ms() - 2.5).abs() < 1e-9);
        assert_eq!(d.summary().p50, 3.0);
        let mut big = Dist::default();
        for i in 0..10_000 {
            big.add(i * 1_000, 1.0);
        }
        let s = big.summary();
        assert!((s.mean - 4.9995).abs() < 1e-6);
        assert!((s.p50 - 5.0).abs() < 0.1, "{s:?}");
        assert!((s.p99 - 9.9).abs() < 0.1, "{s:?}");
        let mut m = Dist::default();
        m.merge(&d);
        m.merge(&big);
        assert!((m.weight() - 10_004.0).abs() < 1e-9);
    }
}
