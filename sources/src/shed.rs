//! Shedding under memory pressure: the most event time any stage may hold back, and what
//! each stage decided early because of it.
//!
//! Every stateful stage waits on the frontier: the source's watermark trails its newest
//! record by the lateness, `clock.correct` holds messages until the estimates for their
//! time are in, `link` until its lateness and order slack have passed them and keeps what
//! it received for `2·(x + lateness)`, `paths` until a root's children can no longer come.
//! Their memory is those waits times the input's rate. When the process nears its memory
//! limit the governor (`causeway`'s `--memory-limit`) lowers the [`cap`] on those waits;
//! each stage then waits at most the cap past the frontier ([`capped`]) and so releases
//! its oldest undecided state first, decided with what has arrived. What a stage decides
//! earlier than its own wait would have is counted here ([`note`]) and reported at the end
//! ([`report`]). Without pressure the cap is [`NO_CAP`] and nothing changes: the answers
//! then do not depend on timing; under pressure they do, and the counts say how much.
//!
//! One cap per process: memory is the process's, and every worker shares it.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::Time;

/// The cap when there is no pressure: no stage's wait is shortened.
pub const NO_CAP: Time = Time::MAX;

static CAP_NS: AtomicU64 = AtomicU64::new(NO_CAP);

/// The stages that shed, for the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `clock.correct`: messages corrected before every estimate for their time was in.
    Clock,
    /// `link`: messages linked before their lateness and order slack had passed.
    Link,
    /// `link`'s warm start, ended before its warm-up was over (inputs then held).
    Warmup,
    /// `link` (tasks): messages assigned before their lateness had passed.
    Tasks,
    /// `paths`: path trees finished while a child could still have come.
    Paths,
}

const STAGES: [Stage; 5] = [
    Stage::Clock,
    Stage::Link,
    Stage::Warmup,
    Stage::Tasks,
    Stage::Paths,
];

impl Stage {
    /// What the count of this stage counts, for the report.
    pub fn what(self) -> &'static str {
        match self {
            Stage::Clock => "messages clock-corrected before their estimates were in",
            Stage::Link => "messages linked before their wait was over",
            Stage::Warmup => "inputs of a warm start cut short",
            Stage::Tasks => "messages assigned to tasks before their wait was over",
            Stage::Paths => "path trees finished while a child could still come",
        }
    }
}

static COUNTS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
static LOWEST_NS: AtomicU64 = AtomicU64::new(NO_CAP);

/// The most event time a stage may hold back now ([`NO_CAP`] without pressure).
#[inline]
pub fn cap() -> Time {
    CAP_NS.load(Ordering::Relaxed)
}

/// Whether the cap is on.
#[inline]
pub fn active() -> bool {
    cap() != NO_CAP
}

/// `wait`, or the cap when that is shorter.
#[inline]
pub fn capped(wait: Time) -> Time {
    wait.min(cap())
}

/// Sets the cap (the governor's call).
pub fn set_cap(cap_ns: Time) {
    CAP_NS.store(cap_ns, Ordering::Relaxed);
    LOWEST_NS.fetch_min(cap_ns, Ordering::Relaxed);
}

/// Counts `n` records that `stage` decided early.
#[inline]
pub fn note(stage: Stage, n: u64) {
    if n > 0 {
        COUNTS[stage as usize].fetch_add(n, Ordering::Relaxed);
    }
}

/// What was shed: the lowest cap reached, and per stage what it decided early (only the
/// stages that did).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shed {
    /// The lowest cap set, if any was.
    pub lowest_cap_ns: Option<Time>,
    /// `(stage, count)` for every stage that decided something early.
    pub counts: Vec<(Stage, u64)>,
}

/// What was shed so far.
pub fn report() -> Shed {
    let lowest = LOWEST_NS.load(Ordering::Relaxed);
    Shed {
        lowest_cap_ns: (lowest != NO_CAP).then_some(lowest),
        counts: STAGES
            .iter()
            .map(|s| (*s, COUNTS[*s as usize].load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_cap_leaves_every_wait_alone() {
        // The unit tests of this crate never set the cap.
        assert_eq!(capped(7), 7);
        assert_eq!(capped(Time::MAX - 1), Time::MAX - 1);
        assert!(report().lowest_cap_ns.is_none());
        assert_eq!(STAGES.len(), COUNTS.len());
        for (i, s) in STAGES.iter().enumerate() {
            assert_eq!(*s as usize, i);
        }
    }
}
