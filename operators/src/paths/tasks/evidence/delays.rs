//! Learned delays ([`Delays`]): per departure class, how long after an arrival of each type
//! its departures leave. State: one faded histogram per (arrival type, departure class)
//! seen, bounded by the number of types.

use super::*;

/// Learned delays: for each departure class (a node, the node it sends to, and whether it
/// sends a request or a response), how often its departures follow an arrival of each type
/// (sender and role) by each delay. What a candidate parent reads ([`Delays::log_hazard`]):
/// the density in time of the class's departures with a parent of its type at its delay,
/// over the share of that type's delays still to come (a task that has waited long is
/// likelier to be the one that ends now than its delay's density alone says). A type that
/// is never the parent of a class reads near zero, whatever its delays.
#[derive(Clone, Debug, Default)]
pub struct Delays {
    /// (arrival type, departure class) -> counts per bin.
    hist: FastMap<(u64, u64), Hist>,
    /// Departure class -> what it learned in all.
    pub(super) class: FastMap<u64, ClassTotals>,
    /// The timestamps' resolution, learned from the delays counted.
    grid: Grid,
    /// Decisions a class remembers: past twice this many, its counts are halved.
    pub memory: f32,
}

impl Delays {
    /// Empty, remembering about `memory` decisions per class.
    pub fn new(memory: f32) -> Self {
        Delays {
            memory,
            ..Delays::default()
        }
    }

    /// Counts a decision, as likely as `w`: a departure of `class` caused by an arrival of
    /// `ptype` `delay_ns` before it. A departure's options are counted with their posterior
    /// probabilities (with nothing learned, `1/n` each: Project 5's scoreboard).
    pub fn add(&mut self, ptype: u64, class: u64, delay_ns: i64, w: f32) {
        let h = self.hist.entry((ptype, class)).or_insert_with(Hist::new);
        let b = bin(delay_ns);
        h.counts[b] += w;
        h.update();
        self.grid.add(delay_ns);
        let entry = self.class.entry(class).or_insert_with(ClassTotals::new);
        if !entry.types.contains(&ptype) {
            entry.types.push(ptype);
        }
        entry.count += w;
        entry.bin_sum += w * b as f32;
        if fade(&mut entry.count, self.memory) {
            entry.bin_sum /= 2.0;
            for t in &entry.types {
                if let Some(h) = self.hist.get_mut(&(*t, class)) {
                    h.counts.iter_mut().for_each(|c| *c /= 2.0);
                    h.update();
                }
            }
        }
        entry.scale_us = if entry.count > 0.0 {
            BIN_RATIO.powf(f64::from(entry.bin_sum / entry.count))
        } else {
            1.0
        };
    }

    /// The log-likelihood that a departure of `class` was caused by an arrival of `ptype`
    /// `delay_ns` before it: a density in time, not in log-delay. The histogram's bins
    /// widen with the delay, so its share at `d` is divided by `d` (no finer than the
    /// timestamps' resolution): without it, of two candidate causes whose delays are as
    /// common per bin, the older would be as likely as the newer, where it is the newer
    /// that leaves less time unexplained. The density is read at the scale of the class's
    /// mean log-delay, where it equals the share of a bin, so that it weighs against the
    /// fixed scores (a spontaneous departure) as the share did.
    pub fn log_p(&self, ptype: u64, class: u64, delay_ns: i64) -> f64 {
        self.log_density(
            self.hist.get(&(ptype, class)).map(|h| &h.counts),
            class,
            delay_ns,
            bin(delay_ns),
        )
    }

    /// [`Delays::log_p`] from the type's histogram, if any.
    fn log_density(&self, hist: Option<&[f32; BINS]>, class: u64, delay_ns: i64, b: usize) -> f64 {
        let (total, reference_us) = self
            .class
            .get(&class)
            .map_or((0.0, 1.0), |c| (c.count, c.scale_us));
        let scale = if total > 0.0 {
            let d_us = (delay_ns as f64 / 1000.0)
                .max(self.grid.resolution_us())
                .max(1.0);
            (reference_us / d_us) as f32
        } else {
            1.0
        };
        let v = hist.map_or(0.0, |h| {
            let b = b as isize;
            KERNEL
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let j = b + i as isize - 2;
                    if (0..BINS as isize).contains(&j) {
                        k * h[j as usize]
                    } else {
                        0.0
                    }
                })
                .sum()
        });
        f64::from((v * scale + PRIOR) / (total + 1.0)).ln()
    }

    /// The log hazard: [`Delays::log_p`] less the log share of the type's delays longer than
    /// `delay_ns`. Of several open tasks, the one a departure ends is as likely as its
    /// delay's density over its survival (competing risks: every other task is still open).
    pub fn log_hazard(&self, ptype: u64, class: u64, delay_ns: i64) -> f64 {
        let hist = self.hist.get(&(ptype, class));
        let b = bin(delay_ns);
        let p = self.log_density(hist.map(|h| &h.counts), class, delay_ns, b);
        match hist {
            Some(h) => p - f64::from(h.survival[b]).ln(),
            None => p,
        }
    }

    /// For debugging: per (arrival type, departure class), its total count and the delay
    /// (µs) of its fullest bin, and the class's total.
    pub fn summary(&self) -> Vec<(u64, u64, f32, f64, f32)> {
        let mut v: Vec<_> = self
            .hist
            .iter()
            .map(|(&(t, c), h)| {
                let h = &h.counts;
                let (b, _) = h
                    .iter()
                    .enumerate()
                    .fold((0, 0.0f32), |a, (i, &x)| if x > a.1 { (i, x) } else { a });
                let total = self.class.get(&c).map_or(0.0, |x| x.count);
                (t, c, h.iter().sum(), BIN_RATIO.powi(b as i32), total)
            })
            .collect();
        v.sort_by_key(|a| (a.1, a.0));
        v
    }

    /// How many (arrival type, departure class) combinations are held.
    pub fn len(&self) -> usize {
        self.hist.len()
    }

    /// Whether nothing was learned.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }
}

/// What a departure class learned in all.
#[derive(Clone, Debug)]
pub(super) struct ClassTotals {
    /// Its decisions counted (weighed).
    pub(super) count: f32,
    /// The arrival types seen with it.
    types: Vec<u64>,
    /// The sum of its decisions' bins, weighed: over the count, the class's mean log-delay,
    /// where its densities are read at the scale of its bins.
    bin_sum: f32,
    /// That scale in µs, worked out as the class learns (not at every read).
    scale_us: f64,
}

impl ClassTotals {
    fn new() -> Self {
        ClassTotals {
            count: 0.0,
            types: Vec::new(),
            bin_sum: 0.0,
            scale_us: 1.0,
        }
    }
}

/// One (arrival type, departure class)'s delays: counts per bin, and the share of them
/// longer than each bin (its middle), which every option of every call reads and only a
/// decision changes (its logarithm is taken where it is read: a decision changes every
/// bin, an option reads one).
#[derive(Clone, Debug)]
struct Hist {
    counts: [f32; BINS],
    /// Per bin, the share of the counts above it and half its own (at least
    /// [`SURVIVAL_FLOOR`]); 1 while there are none.
    survival: [f32; BINS],
}

impl Hist {
    fn new() -> Self {
        Hist {
            counts: [0.0; BINS],
            survival: [1.0; BINS],
        }
    }

    /// Works the survival out again after the counts changed.
    fn update(&mut self) {
        let mass: f32 = self.counts.iter().sum();
        if mass <= 0.0 {
            self.survival = [1.0; BINS];
            return;
        }
        // The counts above each bin, from the top down.
        let mut above = 0.0f32;
        for b in (0..BINS).rev() {
            let longer = above + 0.5 * self.counts[b];
            self.survival[b] = (longer / mass).max(SURVIVAL_FLOOR);
            above += self.counts[b];
        }
    }
}

/// The least survival a hazard is read with: past the longest delays seen, a task is not
/// made ever likelier to end.
pub(super) const SURVIVAL_FLOOR: f32 = 0.01;

/// The timestamps' resolution, learned from delays: the coarsest of 1 ms, 100 µs and
/// 10 µs that almost every non-zero delay is a multiple of (to within 0.1% of it, for clocks
/// corrected by a skew), else 1 µs. A trace written to the millisecond has delays of 0 and
/// 1 ms that both stand for anything below 1 ms; its density is not read finer.
#[derive(Clone, Debug, Default)]
struct Grid {
    /// Non-zero delays seen.
    seen: f32,
    /// Of those, how many are on each grid of [`GRIDS_NS`].
    on: [f32; 3],
}

/// The grids tried, coarsest first.
const GRIDS_NS: [i64; 3] = [1_000_000, 100_000, 10_000];
/// Non-zero delays the resolution remembers (halved past twice this many).
const GRID_MEMORY: f32 = 500_000.0;

impl Grid {
    fn add(&mut self, delay_ns: i64) {
        if delay_ns == 0 {
            return;
        }
        self.seen += 1.0;
        for (on, g) in self.on.iter_mut().zip(GRIDS_NS) {
            let r = delay_ns.rem_euclid(g);
            if r.min(g - r) < g / 1000 {
                *on += 1.0;
            }
        }
        if fade(&mut self.seen, GRID_MEMORY) {
            self.on.iter_mut().for_each(|x| *x /= 2.0);
        }
    }

    fn resolution_us(&self) -> f64 {
        if self.seen < 50.0 {
            return 1.0;
        }
        GRIDS_NS
            .iter()
            .zip(self.on)
            .find(|&(_, on)| on >= 0.99 * self.seen)
            .map_or(1.0, |(g, _)| *g as f64 / 1000.0)
    }
}

impl Evidence for Delays {
    /// (arrival type, departure class, delay in ns, weight): a decision [`Delays::add`] counts.
    type Fact<'a> = (u64, u64, i64, f32);
    /// (arrival type, departure class, delay in ns): [`Delays::log_hazard`].
    type Question = (u64, u64, i64);

    fn remembering(memory: f32) -> Self {
        Delays::new(memory)
    }

    #[inline]
    fn learn(&mut self, fact: Self::Fact<'_>) {
        let (ptype, class, delay_ns, w) = fact;
        self.add(ptype, class, delay_ns, w);
    }

    #[inline]
    fn read(&self, question: Self::Question) -> f64 {
        self.log_hazard(question.0, question.1, question.2)
    }
}
