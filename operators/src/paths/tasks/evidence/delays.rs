//! Learned delays ([`Delays`]): per departure class, how long after an arrival of each type
//! its departures leave. State: one faded histogram per (arrival type, departure class)
//! seen, bounded by the number of types.

use super::*;

/// Learned delays: for each departure class (a node, the node it sends to, and whether it
/// sends a request or a response), how often its departures follow an arrival of each type
/// (sender and role) by each delay. The likelihood of a candidate parent is the share of the
/// class's departures with a parent of its type at its delay: a type that is never the
/// parent of a class reads near zero, whatever its delays.
#[derive(Clone, Debug, Default)]
pub struct Delays {
    /// (arrival type, departure class) -> counts per bin.
    hist: FastMap<(u64, u64), [f32; BINS]>,
    /// Departure class -> its decisions counted, and the arrival types seen with it.
    pub(super) class: FastMap<u64, (f32, Vec<u64>)>,
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
        let h = self.hist.entry((ptype, class)).or_insert([0.0; BINS]);
        h[bin(delay_ns)] += w;
        let entry = self.class.entry(class).or_insert((0.0, Vec::new()));
        if !entry.1.contains(&ptype) {
            entry.1.push(ptype);
        }
        entry.0 += w;
        if fade(&mut entry.0, self.memory) {
            for t in &entry.1 {
                if let Some(h) = self.hist.get_mut(&(*t, class)) {
                    h.iter_mut().for_each(|c| *c /= 2.0);
                }
            }
        }
    }

    /// The log-likelihood that a departure of `class` was caused by an arrival of `ptype`
    /// `delay_ns` before it.
    pub fn log_p(&self, ptype: u64, class: u64, delay_ns: i64) -> f64 {
        let total = self.class.get(&class).map_or(0.0, |c| c.0);
        let v = self.hist.get(&(ptype, class)).map_or(0.0, |h| {
            let b = bin(delay_ns) as isize;
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
        f64::from((v + PRIOR) / (total + 1.0)).ln()
    }

    /// For debugging: per (arrival type, departure class), its total count and the delay
    /// (µs) of its fullest bin, and the class's total.
    pub fn summary(&self) -> Vec<(u64, u64, f32, f64, f32)> {
        let mut v: Vec<_> = self
            .hist
            .iter()
            .map(|(&(t, c), h)| {
                let (b, _) = h
                    .iter()
                    .enumerate()
                    .fold((0, 0.0f32), |a, (i, &x)| if x > a.1 { (i, x) } else { a });
                let total = self.class.get(&c).map_or(0.0, |x| x.0);
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

impl Evidence for Delays {
    /// (arrival type, departure class, delay in ns, weight): a decision [`Delays::add`] counts.
    type Fact<'a> = (u64, u64, i64, f32);
    /// (arrival type, departure class, delay in ns): [`Delays::log_p`].
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
        self.log_p(question.0, question.1, question.2)
    }
}
