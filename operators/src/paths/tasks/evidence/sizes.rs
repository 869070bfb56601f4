//! Learned sizes ([`Sizes`]): how much likelier an arrival of its size is to cause a departure
//! of a class than arrivals of its type in general. State: one faded histogram per (arrival
//! type, departure class) and per arrival type, bounded by the number of types.

use super::*;

/// Size classes: 0 for an unknown size, else one per power of two.
pub const SIZE_BINS: usize = 40;

/// The size class of a message of `bytes`.
pub fn size_bin(bytes: Option<u64>) -> u8 {
    match bytes {
        None | Some(0) => 0,
        Some(b) => (1 + (63 - b.leading_zeros()) as usize).min(SIZE_BINS - 1) as u8,
    }
}

/// What [`Sizes`] learns from.
#[derive(Clone, Copy, Debug)]
pub enum SizeFact {
    /// An arrival of type `ptype` in size class `bin` ([`Sizes::arrival`]).
    Arrival {
        /// The arrival's type.
        ptype: u64,
        /// Its size class ([`size_bin`]).
        bin: u8,
    },
    /// An arrival of `ptype` in size class `bin` that caused a departure of `class`, as
    /// likely as `w` ([`Sizes::parent`]).
    Parent {
        /// The arrival's type.
        ptype: u64,
        /// The departure's class.
        class: u64,
        /// The arrival's size class.
        bin: u8,
        /// The decision's weight.
        w: f32,
    },
}

/// Learned sizes: how much likelier an arrival of its size is to be the cause of a departure
/// of a class than arrivals of its type in general. Two requests a node receives from one
/// caller at once (a call for a query and one for a rank) are one type; their sizes tell
/// which causes which call. Learned like [`Delays`], from the decisions by their posteriors,
/// against every arrival of the type.
#[derive(Clone, Debug, Default)]
pub struct Sizes {
    /// (arrival type, departure class) -> parents counted per size class.
    parents: FastMap<(u64, u64), (f32, [f32; SIZE_BINS])>,
    /// Arrival type -> arrivals counted per size class.
    arrivals: FastMap<u64, (f32, [f32; SIZE_BINS])>,
    /// Counts remembered per histogram (halved past twice this).
    pub memory: f32,
}

/// Parents of a class counted before its sizes are weighed at all.
const SIZE_EVIDENCE: f32 = 20.0;
/// What an unseen size class counts.
const SIZE_PRIOR: f32 = 0.5;

impl Sizes {
    /// Empty, remembering about `memory` counts per histogram.
    pub fn new(memory: f32) -> Self {
        Sizes {
            memory,
            ..Sizes::default()
        }
    }

    fn count(h: &mut (f32, [f32; SIZE_BINS]), bin: u8, w: f32, memory: f32) {
        h.0 += w;
        h.1[bin as usize] += w;
        if fade(&mut h.0, memory) {
            h.1.iter_mut().for_each(|c| *c /= 2.0);
        }
    }

    /// Counts an arrival of `ptype` in size class `bin` (0: unknown, not counted).
    pub fn arrival(&mut self, ptype: u64, bin: u8) {
        if bin == 0 {
            return;
        }
        let h = self
            .arrivals
            .entry(ptype)
            .or_insert((0.0, [0.0; SIZE_BINS]));
        Self::count(h, bin, 1.0, self.memory);
    }

    /// Counts, as likely as `w`, an arrival of `ptype` in size class `bin` causing a
    /// departure of `class`.
    pub fn parent(&mut self, ptype: u64, class: u64, bin: u8, w: f32) {
        if bin == 0 {
            return;
        }
        let h = self
            .parents
            .entry((ptype, class))
            .or_insert((0.0, [0.0; SIZE_BINS]));
        Self::count(h, bin, w, self.memory);
    }

    /// The log of how much likelier an arrival of `ptype` in size class `bin` is among the
    /// parents of `class` than among arrivals of its type; 0 while too little is known.
    pub fn log_ratio(&self, ptype: u64, class: u64, bin: u8) -> f64 {
        if bin == 0 {
            return 0.0;
        }
        let (Some(p), Some(a)) = (self.parents.get(&(ptype, class)), self.arrivals.get(&ptype))
        else {
            return 0.0;
        };
        if p.0 < SIZE_EVIDENCE {
            return 0.0;
        }
        let b = bin as usize;
        let bins = SIZE_BINS as f32;
        let in_parents = (p.1[b] + SIZE_PRIOR) / (p.0 + SIZE_PRIOR * bins);
        let in_all = (a.1[b] + SIZE_PRIOR) / (a.0 + SIZE_PRIOR * bins);
        f64::from(in_parents / in_all).ln()
    }
}

impl Evidence for Sizes {
    /// An arrival or a weighed parent: [`SizeFact`].
    type Fact<'a> = SizeFact;
    /// (arrival type, departure class, size class): [`Sizes::log_ratio`].
    type Question = (u64, u64, u8);

    fn remembering(memory: f32) -> Self {
        Sizes::new(memory)
    }

    #[inline]
    fn learn(&mut self, fact: Self::Fact<'_>) {
        match fact {
            SizeFact::Arrival { ptype, bin } => self.arrival(ptype, bin),
            SizeFact::Parent {
                ptype,
                class,
                bin,
                w,
            } => self.parent(ptype, class, bin, w),
        }
    }

    #[inline]
    fn read(&self, question: Self::Question) -> f64 {
        self.log_ratio(question.0, question.1, question.2)
    }
}
