//! Coincidences ([`Coincidence`]): how much more often an arrival of a type lies at a delay
//! before a departure of a class than before a time-shifted null. State: two faded
//! histograms per (arrival type, departure class), bounded by the number of types.

use super::*;

/// Coincidences: how much more often an arrival of a type lies a given delay before a
/// departure of a class than before a time where none is (the departure's time shifted into
/// the past: Project 5's scoreboard against a null). A queue's reply to a waiting pop comes
/// right after a push arrives, far more often than chance puts a push there; a server's reply
/// follows other tasks' arrivals only by chance. The excess over chance, as a share of the
/// arrivals at that delay, is the probability that such an arrival caused the departure.
/// Counted at every departure of the class, whatever was decided: nothing learned feeds back.
#[derive(Clone, Debug, Default)]
pub struct Coincidence {
    /// (arrival type, departure class) -> (arrivals at the departures, at the shifted times)
    /// per delay bin, and how many departures were scanned.
    counts: FastMap<(u64, u64), ([f32; BINS], [f32; BINS])>,
    scanned: FastMap<u64, f32>,
    /// Departures a class remembers (halved past twice this).
    pub memory: f32,
}

/// Departures of a class scanned before its coincidences are believed.
const COINCIDENCE_EVIDENCE: f32 = 50.0;
/// Of the arrivals at a delay, at most this share are believed causes: a cause whose own
/// delay fits its kind better than that keeps it.
const MAX_COINCIDENCE: f64 = 0.8;

impl Coincidence {
    /// Empty, remembering about `memory` departures per class.
    pub fn new(memory: f32) -> Self {
        Coincidence {
            memory,
            ..Coincidence::default()
        }
    }

    /// Counts one departure of `class` scanned: `real` are the (arrival type, delay) of the
    /// arrivals before it, `null` those before its shifted time.
    pub fn observe(&mut self, class: u64, real: &[(u64, i64)], null: &[(u64, i64)]) {
        let n = self.scanned.entry(class).or_insert(0.0);
        *n += 1.0;
        if fade(n, self.memory) {
            for ((_, c), (r, z)) in self.counts.iter_mut() {
                if *c == class {
                    r.iter_mut().for_each(|x| *x /= 2.0);
                    z.iter_mut().for_each(|x| *x /= 2.0);
                }
            }
        }
        for &(t, d) in real {
            self.counts
                .entry((t, class))
                .or_insert(([0.0; BINS], [0.0; BINS]))
                .0[bin(d)] += 1.0;
        }
        for &(t, d) in null {
            self.counts
                .entry((t, class))
                .or_insert(([0.0; BINS], [0.0; BINS]))
                .1[bin(d)] += 1.0;
        }
    }

    /// Whether enough departures of `class` were scanned for its coincidences to be
    /// believed.
    pub fn believed(&self, class: u64) -> bool {
        self.scanned
            .get(&class)
            .is_some_and(|n| *n >= COINCIDENCE_EVIDENCE)
    }

    /// The probability that an arrival of `atype` `delay_ns` before a departure of `class`
    /// caused it: the excess of such arrivals over chance, as a share of them.
    pub fn probability(&self, atype: u64, class: u64, delay_ns: i64) -> f64 {
        if self
            .scanned
            .get(&class)
            .is_none_or(|n| *n < COINCIDENCE_EVIDENCE)
        {
            return 0.0;
        }
        let Some((r, z)) = self.counts.get(&(atype, class)) else {
            return 0.0;
        };
        let b = bin(delay_ns) as isize;
        let read = |h: &[f32; BINS]| -> f64 {
            KERNEL
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let j = b + i as isize - 2;
                    if (0..BINS as isize).contains(&j) {
                        f64::from(k * h[j as usize])
                    } else {
                        0.0
                    }
                })
                .sum()
        };
        let (real, null) = (read(r), read(z));
        if real <= 0.0 {
            return 0.0;
        }
        ((real - null) / (real + 1.0)).clamp(0.0, MAX_COINCIDENCE)
    }
}

impl Evidence for Coincidence {
    /// (departure class, (arrival type, delay) before it, the same before its shifted time):
    /// a scan [`Coincidence::observe`] counts.
    type Fact<'a> = (u64, &'a [(u64, i64)], &'a [(u64, i64)]);
    /// (arrival type, departure class, delay in ns): [`Coincidence::probability`].
    type Question = (u64, u64, i64);

    fn remembering(memory: f32) -> Self {
        Coincidence::new(memory)
    }

    #[inline]
    fn learn(&mut self, fact: Self::Fact<'_>) {
        self.observe(fact.0, fact.1, fact.2);
    }

    #[inline]
    fn read(&self, question: Self::Question) -> f64 {
        self.probability(question.0, question.1, question.2)
    }
}
