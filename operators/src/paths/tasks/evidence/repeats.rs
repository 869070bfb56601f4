//! Learned repeats ([`Repeats`]): how many calls of each class a task of a class makes before
//! it replies. State: one faded histogram per (task class, call class), bounded by the
//! number of classes.

use super::*;

/// How many calls of each class the tasks of each class make (a task's class: its node and
/// its request's arrival type), from the tasks that closed: the chance that a task that made
/// `k` calls of a class makes another. A task that lost its reply to another task (where no
/// connection or call id says which of a caller's tasks a reply closes) would otherwise
/// stay open and take later tasks' calls, one after another; weighed by this, a task with
/// more calls of a class than its class's tasks make takes no more, however slow it is.
#[derive(Clone, Debug, Default)]
pub struct Repeats {
    /// (task class, call class) -> closed tasks by how many calls of the class they made
    /// (1 to `MAX_REPEATS`, the last for more), and what
    /// [`Repeats::log_another`] reads for each count made, worked out when they change (every
    /// option of every call reads one; summing the histogram there took a tenth of a busy
    /// node-name trace's time).
    hist: FastMap<(u64, u64), Box<RepeatCounts>>,
    /// Task class -> its closed tasks counted.
    tasks: FastMap<u64, f32>,
    /// Tasks a class remembers: past twice this many, its counts are halved.
    pub memory: f32,
}

/// Calls of one class per task told apart (more count as this many).
const MAX_REPEATS: usize = 16;

/// One (task class, call class)'s closed tasks by calls made, and the log
/// chance of another call after each count made (`log[k - 1]` for `k`).
#[derive(Clone, Debug)]
struct RepeatCounts {
    hist: [f32; MAX_REPEATS],
    log: [f64; MAX_REPEATS],
}

impl RepeatCounts {
    fn new() -> Self {
        RepeatCounts {
            hist: [0.0; MAX_REPEATS],
            log: [0.0; MAX_REPEATS],
        }
    }

    /// Works `log` out from `hist`: past the most any task made, as unlikely as one more
    /// than that most.
    fn update(&mut self) {
        let h = &self.hist;
        let most = h.iter().rposition(|x| *x > 0.0).map_or(1, |i| i + 1);
        for made in 1..=most {
            let at_least: f32 = h[made - 1..].iter().sum();
            let more: f32 = h[made..].iter().sum();
            self.log[made - 1] =
                f64::from(((more + REPEATS_PRIOR) / (at_least + REPEATS_PRIOR)).min(1.0)).ln();
        }
        for k in most..MAX_REPEATS {
            self.log[k] = self.log[most - 1];
        }
    }
}

/// Closed tasks of a class counted before its repeats are believed.
const REPEATS_EVIDENCE: f32 = 50.0;
/// Added to the tasks that made more, so that no count is impossible.
const REPEATS_PRIOR: f32 = 1.0;

impl Repeats {
    /// Empty, remembering about `memory` tasks per class.
    pub fn new(memory: f32) -> Self {
        Repeats {
            memory,
            ..Repeats::default()
        }
    }

    /// Counts a closed task of `class` that made `calls` (call class, how many).
    pub fn add(&mut self, class: u64, calls: &[(u64, usize)]) {
        let n = self.tasks.entry(class).or_insert(0.0);
        *n += 1.0;
        if fade(n, self.memory) {
            for ((c, _), counts) in self.hist.iter_mut() {
                if *c == class {
                    counts.hist.iter_mut().for_each(|x| *x /= 2.0);
                    counts.update();
                }
            }
        }
        for &(call, k) in calls {
            if k == 0 {
                continue;
            }
            let counts = self
                .hist
                .entry((class, call))
                .or_insert_with(|| Box::new(RepeatCounts::new()));
            counts.hist[k.min(MAX_REPEATS) - 1] += 1.0;
            counts.update();
        }
    }

    /// The log-probability that a task of `class` that made `made` calls of `call` makes
    /// another (0 for its first, and while its class has closed too few tasks to say).
    pub fn log_another(&self, class: u64, call: u64, made: usize) -> f64 {
        if made == 0 || self.tasks.get(&class).is_none_or(|n| *n < REPEATS_EVIDENCE) {
            return 0.0;
        }
        let Some(counts) = self.hist.get(&(class, call)) else {
            return 0.0;
        };
        counts.log[made.min(MAX_REPEATS) - 1]
    }
}

impl Evidence for Repeats {
    /// (task class, its calls by class): a closed task [`Repeats::add`] counts.
    type Fact<'a> = (u64, &'a [(u64, usize)]);
    /// (task class, call class, calls of it made): [`Repeats::log_another`].
    type Question = (u64, u64, usize);

    fn remembering(memory: f32) -> Self {
        Repeats::new(memory)
    }

    #[inline]
    fn learn(&mut self, fact: Self::Fact<'_>) {
        self.add(fact.0, fact.1);
    }

    #[inline]
    fn read(&self, question: Self::Question) -> f64 {
        self.log_another(question.0, question.1, question.2)
    }
}
