//! Learned durations ([`Durations`]): how long tasks of a class last, request to reply.
//! State: one faded histogram per task class and its log-survival per bin (worked out when a
//! task closes, read by every option of every call), bounded by the number of classes.

use super::*;

/// How long tasks last, from their request to their reply, per task class (the node and the
/// request's arrival type). A task that lost its reply to another task (no connection or call
/// id says which of a caller's tasks a reply closes) would otherwise stay open and take later
/// tasks' calls for as long as it is kept. An unreplied task is as likely lost as open once
/// fewer than `LOST_REPLIES` of its class's tasks last as long; its age weighs against it
/// only from there (a slow task of a class that is sometimes slow keeps its calls), by how
/// much rarer still such tasks are.
#[derive(Clone, Debug, Default)]
pub struct Durations {
    /// Task class -> tasks closed per duration bin, their total, and the log-survival read
    /// at each bin, worked out when a task closes (every option of every call reads it; a
    /// task closes once).
    hist: FastMap<u64, ([f32; BINS], f32, [f64; BINS])>,
    /// Tasks a class remembers: past twice this many, its counts are halved.
    pub memory: f32,
}

/// Closed tasks of a class counted before its survival is believed.
const DURATION_EVIDENCE: f32 = 50.0;
/// The share of tasks believed to lose their reply to another task (a prior, not learned:
/// a lost task is never seen to close).
const LOST_REPLIES: f64 = 0.01;
/// Added to the tasks at least as old, so that no age is impossible.
const DURATION_PRIOR: f32 = 1.0;

impl Durations {
    /// Empty, remembering about `memory` tasks per class.
    pub fn new(memory: f32) -> Self {
        Durations {
            memory,
            ..Durations::default()
        }
    }

    /// Counts a task of `class` closed `duration_ns` after it opened.
    pub fn add(&mut self, class: u64, duration_ns: i64) {
        let (h, total, log_survival) =
            self.hist
                .entry(class)
                .or_insert(([0.0; BINS], 0.0, [0.0; BINS]));
        h[bin(duration_ns)] += 1.0;
        *total += 1.0;
        if fade(total, self.memory) {
            h.iter_mut().for_each(|c| *c /= 2.0);
        }
        for (b, l) in log_survival.iter_mut().enumerate() {
            // Summed from the bin up, as a read once did, so that the values are the same.
            let longer: f32 = h[b..].iter().sum();
            let survival = f64::from((longer + DURATION_PRIOR) / (*total + DURATION_PRIOR));
            *l = (survival / LOST_REPLIES).min(1.0).ln();
        }
    }

    /// The log-probability that a task of `class` is still open at `age_ns` (0 while its
    /// class has closed too few tasks to say).
    pub fn log_survival(&self, class: u64, age_ns: i64) -> f64 {
        let Some((_, total, log_survival)) = self.hist.get(&class) else {
            return 0.0;
        };
        if *total < DURATION_EVIDENCE {
            return 0.0;
        }
        log_survival[bin(age_ns)]
    }
}

impl Evidence for Durations {
    /// (task class, duration in ns): a closed task [`Durations::add`] counts.
    type Fact<'a> = (u64, i64);
    /// (task class, age in ns): [`Durations::log_survival`].
    type Question = (u64, i64);

    fn remembering(memory: f32) -> Self {
        Durations::new(memory)
    }

    #[inline]
    fn learn(&mut self, fact: Self::Fact<'_>) {
        self.add(fact.0, fact.1);
    }

    #[inline]
    fn read(&self, question: Self::Question) -> f64 {
        self.log_survival(question.0, question.1)
    }
}
