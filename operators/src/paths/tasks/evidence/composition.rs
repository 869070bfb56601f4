//! Learned compositions ([`Composition`]): which multisets of calls a task type replies
//! after. State: one faded counter per (task type, signature) seen, bounded by the number of
//! types and signatures.

use super::*;

/// Learned compositions: for each task type (the caller and the node that serves it), how
/// often a task replies after making each multiset of calls (its *signature*, a hash of the
/// sorted classes of its calls). A reply that would close a task whose calls so far are no
/// signature its type has is unlikely: at a node that always calls two services before it
/// replies, a task that made none cannot be the one replying.
#[derive(Clone, Debug, Default)]
pub struct Composition {
    /// (task type, signature) -> count.
    counts: FastMap<(u64, u64), f32>,
    /// Task type -> (count, distinct signatures).
    types: FastMap<u64, (f32, f32)>,
    /// Tasks a type remembers (halved past twice this).
    pub memory: f32,
}

/// What an unseen signature counts, as a share of one task.
const SIGNATURE_PRIOR: f32 = 0.1;

impl Composition {
    /// Empty, remembering about `memory` tasks per type.
    pub fn new(memory: f32) -> Self {
        Composition {
            memory,
            ..Composition::default()
        }
    }

    /// Counts a task of `ttype` that replied with calls of signature `sig`, as likely as `w`.
    pub fn add(&mut self, ttype: u64, sig: u64, w: f32) {
        let c = self.counts.entry((ttype, sig)).or_insert(0.0);
        let new = *c == 0.0;
        *c += w;
        let t = self.types.entry(ttype).or_insert((0.0, 0.0));
        t.0 += w;
        if new {
            t.1 += 1.0;
        }
        if fade(&mut t.0, self.memory) {
            self.counts
                .iter_mut()
                .filter(|((tt, _), _)| *tt == ttype)
                .for_each(|(_, c)| *c /= 2.0);
        }
    }

    /// The log-likelihood that a task of `ttype` replies with calls of signature `sig`.
    pub fn log_p(&self, ttype: u64, sig: u64) -> f64 {
        let (n, kinds) = self.types.get(&ttype).copied().unwrap_or((0.0, 0.0));
        let c = self.counts.get(&(ttype, sig)).copied().unwrap_or(0.0);
        f64::from((c + SIGNATURE_PRIOR) / (n + SIGNATURE_PRIOR * (kinds + 1.0) + 1.0)).ln()
    }
}

impl Evidence for Composition {
    /// (task type, call signature, weight): a reply [`Composition::add`] counts.
    type Fact<'a> = (u64, u64, f32);
    /// (task type, call signature): [`Composition::log_p`].
    type Question = (u64, u64);

    fn remembering(memory: f32) -> Self {
        Composition::new(memory)
    }

    #[inline]
    fn learn(&mut self, fact: Self::Fact<'_>) {
        self.add(fact.0, fact.1, fact.2);
    }

    #[inline]
    fn read(&self, question: Self::Question) -> f64 {
        self.log_p(question.0, question.1)
    }
}
