//! [`Spontaneity`]: how often a node's calls of one type are spontaneous (made by no message
//! it received), learned from the calls themselves, in place of WAP5's one constant for
//! every call.
//!
//! - **Input**: each call `link` decides whose candidates are all weighed by matured
//!   learned densities, with its probability of having been spontaneous
//!   ([`Linker::commit`]).
//! - **Output**: the odds that a call of the type is spontaneous
//!   ([`Spontaneity::odds`]), which scale WAP5's weight of the spontaneous option `e^(−y)`
//!   ([`Linker::spontaneous_weight`]).
//! - **State**: two faded sums per call type (node, callee as link types name it); freed by
//!   `Linker::expire` when the type is unseen for the delay window.
//! - **Cost**: O(1) per call.
//!
//! WAP5 weighs being spontaneous as a candidate `y` mean delays back, for every call alike:
//! `e^(−4)` of a candidate at no delay. A proxy forwards every request it is sent, and a
//! server makes every query for a request it serves; such a call whose parent came later
//! than usual (nginx forwarding 30 µs after the request instead of its usual 10 µs, a
//! threaded python server that waited for the interpreter's lock) is then weighed as more
//! likely spontaneous than caused, and its request's path loses it. Other calls are mostly
//! spontaneous (a timer's, a client's on a host that also serves). The share is the mixing
//! weight of a two-part mixture whose parts' likelihoods `link` already has (the
//! candidates' learned densities against `e^(−y)`), and it is learned as mixing weights
//! are, by expectation-maximisation over the stream: the share is the mean of the calls'
//! probabilities of having been spontaneous, each weighed under the share as it stood.
//! `e^(−y)` is taken as the weight at even odds; a type's odds multiply it. The candidates'
//! densities are learned against the time-shifted null, not from these probabilities, so
//! what feeds back is the one mixing weight, which converges to its maximum-likelihood
//! value (a type whose calls' candidates are never likely parents keeps its calls
//! spontaneous). A type starts at even odds, held there by [`PRIOR_CALLS`] calls' worth of
//! prior evidence, so a type with few calls keeps WAP5's weight.

use super::*;

/// Calls' worth of prior evidence at even odds that a type's learned share starts from.
const PRIOR_CALLS: f64 = 50.0;

/// The learned share of one call type's calls that are spontaneous (faded sums).
#[derive(Clone, Debug)]
pub(super) struct Spontaneity {
    /// Calls observed (faded).
    calls: f64,
    /// Their probabilities of having been spontaneous, summed (faded).
    spontaneous: f64,
    fade: f64,
    /// Event time of the last call, for expiry.
    pub(super) last_ns: Time,
}

impl Spontaneity {
    /// An empty share that remembers about `memory` calls.
    pub(super) fn new(memory: f64) -> Spontaneity {
        Spontaneity {
            calls: 0.0,
            spontaneous: 0.0,
            fade: 1.0 - 1.0 / memory.max(2.0),
            last_ns: 0,
        }
    }

    /// Counts a call with probability `p` of having been spontaneous, at event time `t`.
    pub(super) fn observe(&mut self, p: f64, t: Time) {
        self.calls = self.calls * self.fade + 1.0;
        self.spontaneous = self.spontaneous * self.fade + p.clamp(0.0, 1.0);
        self.last_ns = self.last_ns.max(t);
    }

    /// The odds that a call of the type is spontaneous: 1 before any call, towards the
    /// learned share's odds as calls come.
    pub(super) fn odds(&self) -> f64 {
        let half = PRIOR_CALLS / 2.0;
        (self.spontaneous + half) / (self.calls - self.spontaneous + half)
    }
}

impl Linker {
    /// The weight of send `p`'s spontaneous option before normalising: WAP5's `e^(−y)`,
    /// times the odds its call type learned ([`Spontaneity`]) where delays are learned.
    pub(super) fn spontaneous_weight(&self, p: &Prep) -> f64 {
        let base = (-self.config.spontaneous_factor).exp();
        if self.config.model != DelayModel::Learned {
            return base;
        }
        let window = self.config.delay_window_ns;
        self.spontaneity
            .get(&(p.from, p.child_to))
            .filter(|s| !stale(s.last_ns, window, p.event_ns))
            .map_or(base, |s| base * s.odds())
    }

    /// Learns from call `p` decided with probability `p_spont` of having been spontaneous
    /// (its caller checks that every candidate it was weighed against had a matured learned
    /// density, [`Weighed::matured`], which only learned delays have).
    pub(super) fn learn_spontaneity(&mut self, p: &Prep, p_spont: f64) {
        if !p.is_call() {
            return;
        }
        let memory = self.config.type_memory;
        density_at(
            &mut self.spontaneity,
            (p.from, p.child_to),
            (self.config.delay_window_ns, p.event_ns),
            || Spontaneity::new(memory),
            |s| s.last_ns,
        )
        .observe(p_spont, p.event_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odds_start_even_and_follow_the_calls() {
        let mut s = Spontaneity::new(1000.0);
        assert_eq!(s.odds(), 1.0);
        for t in 0..1000 {
            s.observe(0.0, t);
        }
        // 1,000 calls (about 632 remembered), none spontaneous.
        assert!(s.odds() < 0.05, "{}", s.odds());
        for t in 1000..6000 {
            s.observe(1.0, t);
        }
        assert!(s.odds() > 20.0, "{}", s.odds());
    }
}
