//! The estimator behind `clock`: per domain pair, the per-second estimates of the last
//! `window_ns` fitted to a line (offset and drift) with outliers rejected and the error bounded,
//! then made consistent over the graph of domains. State: the window's per-second estimates
//! per pair, forgotten once older than the window.

use super::*;

/// Weighted least-squares line through `(x, y, weight)`: intercept at x = 0 and slope.
fn fit(points: &[(f64, f64, f64)]) -> Option<(f64, f64)> {
    let sw: f64 = points.iter().map(|p| p.2).sum();
    if points.is_empty() || sw <= 0.0 {
        return None;
    }
    let mx = points.iter().map(|p| p.2 * p.0).sum::<f64>() / sw;
    let my = points.iter().map(|p| p.2 * p.1).sum::<f64>() / sw;
    let sxx: f64 = points.iter().map(|p| p.2 * (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = points.iter().map(|p| p.2 * (p.0 - mx) * (p.1 - my)).sum();
    let slope = if points.len() < 3 || sxx <= 1e-9 * sw {
        0.0
    } else {
        sxy / sxx
    };
    Some((my - slope * mx, slope))
}

/// One domain pair's recent per-second estimates.
#[derive(Default)]
struct PairSeries {
    /// (second, Δ ns, bound ns)
    points: VecDeque<(Time, f64, f64)>,
}

impl PairSeries {
    /// Offset at `now` (ns), drift (ns per ns) and error bound (ns).
    fn estimate(&self, now: Time) -> Option<(f64, f64, f64)> {
        if self.points.is_empty() {
            return None;
        }
        let mk = |kept: &[(Time, f64, f64)]| -> Vec<(f64, f64, f64)> {
            kept.iter()
                .map(|(s, d, h)| {
                    let x = ((*s * BUCKET_NS + BUCKET_NS / 2) as i64 - now as i64) as f64 / 1e9;
                    (x, *d, 1.0 / ((h + 1_000.0) * (h + 1_000.0)))
                })
                .collect()
        };
        let all: Vec<(Time, f64, f64)> = self.points.iter().copied().collect();
        let (a, b) = fit(&mk(&all))?;
        // Reject seconds whose estimate strays from the line by more than their own bound and
        // a robust spread (queueing makes one direction's minimum late, not early).
        let residuals: Vec<f64> = all
            .iter()
            .map(|(s, d, _)| {
                let x = ((*s * BUCKET_NS + BUCKET_NS / 2) as i64 - now as i64) as f64 / 1e9;
                (d - (a + b * x)).abs()
            })
            .collect();
        let mut sorted = residuals.clone();
        let mid = sorted.len() / 2;
        let mad = *sorted.select_nth_unstable_by(mid, f64::total_cmp).1;
        let kept: Vec<(Time, f64, f64)> = all
            .iter()
            .zip(&residuals)
            .filter(|(p, r)| **r <= 3.0 * mad + p.2)
            .map(|(p, _)| *p)
            .collect();
        let kept = if kept.is_empty() { all.clone() } else { kept };
        let (a, b) = fit(&mk(&kept))?;
        // The hard limits: every line within every kept second's bound, drift at most
        // MAX_DRIFT. Seconds whose bounds no line meets (timestamps that contradict each
        // other) leave only the statistical error.
        let bounded: Vec<(f64, f64, f64)> = kept
            .iter()
            .map(|(s, d, h)| {
                let x = ((*s * BUCKET_NS + BUCKET_NS / 2) as i64 - now as i64) as f64 / 1e9;
                (x, *d, *h)
            })
            .collect();
        let (a, error) = match feasible_range(&bounded, MAX_DRIFT_PPM * 1e3) {
            Some((lo, hi)) => {
                let a = a.clamp(lo, hi);
                (a, (a - lo).max(hi - a))
            }
            None => {
                let best_bound = kept.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
                let spread = if kept.len() > 2 {
                    let n = kept.len() as f64;
                    let ss: f64 = mk(&kept)
                        .iter()
                        .map(|(x, y, _)| (y - (a + b * x)).powi(2))
                        .sum();
                    (ss / (n - 2.0)).sqrt() / n.sqrt()
                } else {
                    0.0
                };
                (a, best_bound + spread)
            }
        };
        // b is ns of offset per s of time.
        Some((a, b / 1e9, error))
    }
}

/// Each domain's bound on the error of its offset from `reference`: the least sum of the
/// pairs' bounds along a path of pairs to the reference (each pair's offset is within its
/// bound, so their sum along a path is within the sum). A domain's own tightest pair does not
/// bound it: two nodes seen both ways at once (a bound of 0) are no better placed against the
/// reference than the looser pair that joins them to it. Dijkstra over the pairs (bounds are
/// at least 0); the reference's is 0.
fn path_errors(reference: &Domain, pairs: &[(&Domain, &Domain, f64)]) -> BTreeMap<Domain, f64> {
    let mut best: BTreeMap<Domain, f64> = BTreeMap::new();
    // Non-negative floats order as their bits.
    let mut queue: std::collections::BTreeSet<(u64, &Domain)> = std::collections::BTreeSet::new();
    best.insert(reference.clone(), 0.0);
    queue.insert((0.0f64.to_bits(), reference));
    while let Some((bits, d)) = queue.pop_first() {
        let at = f64::from_bits(bits);
        if best.get(d).is_some_and(|b| *b < at) {
            continue;
        }
        for &(a, b, err) in pairs {
            let other = if a == d {
                b
            } else if b == d {
                a
            } else {
                continue;
            };
            let through = at + err.max(0.0);
            if best.get(other).is_none_or(|b| through < *b) {
                best.insert(other.clone(), through);
                queue.insert((through.to_bits(), other));
            }
        }
    }
    best
}

/// The largest drift between two clocks that the error bounds allow for, in ppm (quartz
/// oscillators without NTP stay well within 100).
pub(super) const MAX_DRIFT_PPM: f64 = 200.0;

/// The lower (or upper) convex hull of points sorted by x (Andrew's monotone chain).
fn hull(points: impl Iterator<Item = (f64, f64)>, lower: bool) -> Vec<(f64, f64)> {
    let mut h: Vec<(f64, f64)> = Vec::new();
    for p in points {
        while h.len() >= 2 {
            let (o, a) = (h[h.len() - 2], h[h.len() - 1]);
            let cross = (a.0 - o.0) * (p.1 - o.1) - (a.1 - o.1) * (p.0 - o.0);
            if (lower && cross <= 0.0) || (!lower && cross >= 0.0) {
                h.pop();
            } else {
                break;
            }
        }
        h.push(p);
    }
    h
}

/// The range of values at x = 0 of the lines `a + b·x`, `|b| ≤ max_slope`, that pass within
/// every point's bound (`(x, y, h)`: `|a + b·x − y| ≤ h`); `None` when no line does.
///
/// For a slope `b` the intercepts allowed are `[g(b), f(b)]` with `f(b) = min(y + h − b·x)`
/// (concave) and `g(b) = max(y − h − b·x)` (convex). Only the lower hull of the `y + h` and
/// the upper hull of the `y − h` matter; each pair of hull points bounds the slopes for which
/// `g ≤ f`, which gives the feasible slopes exactly, and the extremes of `f` and `g` on them
/// lie at the interval's ends or at the hulls' breakpoints. Cost: sorting the points, then
/// the square of the hull sizes (a handful of points).
pub(super) fn feasible_range(points: &[(f64, f64, f64)], max_slope: f64) -> Option<(f64, f64)> {
    if points.is_empty() {
        return None;
    }
    let mut sorted: Vec<(f64, f64, f64)> = points.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let tops = hull(sorted.iter().map(|(x, y, h)| (*x, y + h)), true);
    let bottoms = hull(sorted.iter().map(|(x, y, h)| (*x, y - h)), false);
    let (mut left, mut right) = (-max_slope, max_slope);
    for &(xi, c) in &tops {
        for &(xj, d) in &bottoms {
            // c − b·xi ≥ d − b·xj  ⇔  b·(xj − xi) ≥ d − c
            let (dx, dy) = (xj - xi, d - c);
            if dx > 0.0 {
                left = left.max(dy / dx);
            } else if dx < 0.0 {
                right = right.min(dy / dx);
            } else if dy > 0.0 {
                return None;
            }
        }
    }
    if left > right {
        return None;
    }
    let f = |b: f64| {
        tops.iter()
            .map(|(x, c)| c - b * x)
            .fold(f64::INFINITY, f64::min)
    };
    let g = |b: f64| {
        bottoms
            .iter()
            .map(|(x, d)| d - b * x)
            .fold(f64::NEG_INFINITY, f64::max)
    };
    // Where consecutive hull lines cross, inside [left, right].
    let breaks = |h: &[(f64, f64)]| -> Vec<f64> {
        h.windows(2)
            .filter(|w| w[1].0 != w[0].0)
            .map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0))
            .filter(|b| (left..=right).contains(b))
            .chain([left, right])
            .collect()
    };
    let hi = breaks(&tops)
        .into_iter()
        .map(f)
        .fold(f64::NEG_INFINITY, f64::max);
    let lo = breaks(&bottoms)
        .into_iter()
        .map(g)
        .fold(f64::INFINITY, f64::min);
    Some((lo.min(hi), hi.max(lo)))
}

/// The estimator: pair series and the global solve.
pub struct ClockEstimator {
    pub(super) config: ClockConfig,
    pending: BTreeMap<(Time, Domain, Domain, u64), DelayBounds>,
    series: BTreeMap<(Domain, Domain), PairSeries>,
    /// Each domain's latest offset, to anchor a group of domains that the window's pairs no
    /// longer connect to the reference; freed a window after it was made.
    latest: BTreeMap<Domain, ClockOffset>,
}

impl ClockEstimator {
    /// An estimator with no evidence.
    pub fn new(config: ClockConfig) -> Self {
        ClockEstimator {
            config,
            pending: BTreeMap::new(),
            series: BTreeMap::new(),
            latest: BTreeMap::new(),
        }
    }

    /// Adds bounds from a worker.
    pub fn add(&mut self, b: DelayBounds) {
        let key = (b.bucket, b.a.clone(), b.b.clone(), b.pair);
        match self.pending.get_mut(&key) {
            Some(e) => e.absorb(&b),
            None => {
                self.pending.insert(key, b);
            }
        }
    }

    /// Folds every second that ends at or before the boundary `at` into the pair series, and
    /// forgets seconds older than the window before `at`.
    pub fn advance(&mut self, at: Time) {
        let mut per_pair: BTreeMap<(Time, Domain, Domain), (f64, f64)> = BTreeMap::new();
        while let Some(entry) = self.pending.first_entry() {
            if (entry.key().0 + 1) * BUCKET_NS > at {
                break;
            }
            let b = entry.remove();
            if let Some((delta, bound)) = b.estimate() {
                let e = per_pair
                    .entry((b.bucket, b.a, b.b))
                    .or_insert((delta, bound));
                if bound < e.1 {
                    *e = (delta, bound);
                }
            }
        }
        for ((bucket, a, b), (delta, bound)) in per_pair {
            self.series
                .entry((a, b))
                .or_default()
                .points
                .push_back((bucket, delta, bound));
        }
        let horizon = at.saturating_sub(self.config.window_ns) / BUCKET_NS;
        for s in self.series.values_mut() {
            while s.points.front().is_some_and(|p| p.0 < horizon) {
                s.points.pop_front();
            }
        }
        self.series.retain(|_, s| !s.points.is_empty());
    }

    /// The first boundary after which something changes: the end of the earliest pending
    /// second, or (with evidence in the window) the next second. Estimates go on past the
    /// newest evidence (extrapolated by the drift) until the window is empty, so that every
    /// message finds an estimate for its time as soon as the frontier passes it.
    pub(super) fn next_boundary(&self, after: Time) -> Option<Time> {
        let pending = self.pending.keys().next().map(|k| (k.0 + 1) * BUCKET_NS);
        let next = after / BUCKET_NS * BUCKET_NS + BUCKET_NS;
        match (pending, self.series.is_empty()) {
            (Some(p), true) => Some(p.max(next)),
            (_, false) => Some(next),
            (None, true) => None,
        }
    }

    /// Whether the window holds evidence from less than `span` before `at`: reports stop
    /// shortly after the evidence does, rather than extrapolate far past it.
    pub(super) fn fresh(&self, at: Time, span: Time) -> bool {
        self.series
            .values()
            .filter_map(|s| s.points.back())
            .any(|p| (p.0 + 1) * BUCKET_NS + span > at)
    }

    /// Offsets of every domain with evidence, at event time `at`: relative to the reference
    /// for every domain the window's pairs connect to it, even through other domains. A
    /// group of domains that no pair connects to the reference is placed through the one of
    /// its domains whose latest offset (within the window), else start-up alignment
    /// ([`ClockConfig::anchors`]), is known best, relative to what that was relative to: a
    /// pair seen rarely (a client host between its requests) keeps its clock where it was,
    /// and services that never meet the reference's stay on the clock the alignment gave
    /// them. A group with neither gets no estimate.
    pub fn offsets(&mut self, at: Time, last: bool) -> Vec<ClockOffset> {
        let window = self.config.window_ns;
        self.latest.retain(|_, o| o.at.saturating_add(window) >= at);
        if self.series.is_empty() {
            return Vec::new();
        }
        let mut pairs = Vec::new();
        let mut pair_errors: Vec<(&Domain, &Domain, f64)> = Vec::new();
        let mut seconds: BTreeMap<Domain, u64> = BTreeMap::new();
        for ((a, b), s) in &self.series {
            if let Some((off, drift, err)) = s.estimate(at) {
                let w = 1.0 / ((err + 1.0) * (err + 1.0));
                pairs.push((a.clone(), b.clone(), [off, drift], w));
                pair_errors.push((a, b, err));
                for d in [a, b] {
                    let n = seconds.entry(d.clone()).or_default();
                    *n = (*n).max(s.points.len() as u64);
                }
            }
        }
        let Some(smallest) = seconds.keys().next() else {
            return Vec::new();
        };
        let reference = self.config.reference.as_ref().unwrap_or(smallest);
        let mut out = Vec::new();
        let mut placed: std::collections::BTreeSet<Domain> = std::collections::BTreeSet::new();
        // The reference's group, then each group left by its smallest domain.
        let mut roots = std::iter::once(reference).chain(seconds.keys());
        while let Some(root) = roots.find(|d| !placed.contains(*d)) {
            let errors = path_errors(root, &pair_errors);
            let group: Vec<_> = pairs
                .iter()
                .filter(|(a, _, _, _)| errors.contains_key(a))
                .cloned()
                .collect();
            let relative = crate::clock::pairwise::solve(root, &group);
            // Where the group's offsets are measured from: `base` (ns, and drift in ppm)
            // added to each, with `error_ns` more error, relative to `from`.
            let mut base = ([0.0, 0.0], 0.0, root);
            if root != reference {
                let anchor = relative
                    .iter()
                    .filter_map(|(d, r)| {
                        let l = self.latest.get(d).or_else(|| self.config.anchors.get(d))?;
                        let e = l.error_ns + errors.get(d).copied().unwrap_or(f64::INFINITY);
                        Some((l.reference != *reference, e, d, r, l))
                    })
                    .min_by(|a, b| {
                        (a.0, a.1)
                            .partial_cmp(&(b.0, b.1))
                            .unwrap_or(std::cmp::Ordering::Equal)
                    });
                match anchor {
                    Some((_, error_ns, _, r, l)) => {
                        base = (
                            [l.offset_at(at) - r[0], l.drift_ppm - r[1] * 1e6],
                            error_ns,
                            &l.reference,
                        );
                    }
                    None => {
                        placed.extend(relative.into_keys());
                        continue;
                    }
                }
            }
            let ([offset_base, drift_base], error_base, from) = base;
            let from = from.clone();
            for (domain, [offset_ns, drift]) in relative {
                let error_ns = errors.get(&domain).copied().unwrap_or(f64::INFINITY) + error_base;
                placed.insert(domain.clone());
                out.push(ClockOffset {
                    drift_ppm: drift * 1e6 + drift_base,
                    error_ns,
                    seconds: seconds.get(&domain).copied().unwrap_or(0),
                    reference: from.clone(),
                    at,
                    offset_ns: offset_ns + offset_base,
                    domain,
                    last,
                });
            }
        }
        for o in &out {
            self.latest.insert(o.domain.clone(), o.clone());
        }
        out
    }
}
