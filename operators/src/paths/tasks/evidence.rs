//! The kinds of evidence the task linker weighs, each learned from the data: how long a node
//! takes from an arrival of one type to a departure of a class ([`Delays`]), which calls a
//! task of a type makes before it replies ([`Composition`]), and in which order a node takes
//! up the tasks waiting for the same step ([`order_log_prior`]).
//!
//! Every score is a log-likelihood, so that the linker adds them, and so that the total over
//! a run compares one model of the data (an order prior) with another.
//!
//! State: one histogram per (arrival type, departure class) seen, one counter per
//! (task type, call signature); both bounded by the number of distinct types, not by the
//! input, and faded so that each class remembers about [`Delays::memory`] decisions.

use crate::FastMap;
use causeway_sources::Time;

/// Bins per histogram: log-spaced by [`BIN_RATIO`] from 1 µs, the last bin open-ended
/// (1.4^48 µs is about 10 s).
const BINS: usize = 48;
/// The ratio between consecutive bin edges.
const BIN_RATIO: f64 = 1.4;
/// The smoothing kernel over neighbouring bins: a delay's likelihood is read from its bin and
/// the two on each side, so that a histogram that has seen a few hundred delays reads smooth.
const KERNEL: [f32; 5] = [0.25, 0.5, 1.0, 0.5, 0.25];
/// What a bin no decision fell in reads: a small count, so that an unseen combination is
/// unlikely but not impossible (its log-likelihood is finite).
const PRIOR: f32 = 0.02;

/// A faded memory: past twice `memory`, the total `n` is halved, and the counts that go
/// with it are to be halved too (returns whether they are). Evidence so counted remembers
/// about `memory` events, the newest weighing most.
fn fade(n: &mut f32, memory: f32) -> bool {
    if *n > 2.0 * memory.max(1.0) {
        *n /= 2.0;
        true
    } else {
        false
    }
}

/// The bin of a delay in ns (negative delays, from timestamps a clock error put out of order,
/// fall in the first bin).
fn bin(delay_ns: i64) -> usize {
    let us = (delay_ns as f64 / 1000.0).max(1.0);
    ((us.ln() / BIN_RATIO.ln()) as usize).min(BINS - 1)
}

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
    class: FastMap<u64, (f32, Vec<u64>)>,
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

/// How many calls of each class the tasks of each class make (a task's class: its node and
/// its request's arrival type), from the tasks that closed: the chance that a task that made
/// `k` calls of a class makes another. A task that lost its reply to another task (where no
/// connection or call id says which of a caller's tasks a reply closes) would otherwise
/// stay open and take later tasks' calls, one after another; weighed by this, a task with
/// more calls of a class than its class's tasks make takes no more, however slow it is.
#[derive(Clone, Debug, Default)]
pub struct Repeats {
    /// (task class, call class) -> closed tasks by how many calls of the class they made
    /// (1 to `MAX_REPEATS`, the last for more), and those tasks' total.
    hist: FastMap<(u64, u64), ([f32; MAX_REPEATS], f32)>,
    /// Task class -> its closed tasks counted.
    tasks: FastMap<u64, f32>,
    /// Tasks a class remembers: past twice this many, its counts are halved.
    pub memory: f32,
}

/// Calls of one class per task told apart (more count as this many).
const MAX_REPEATS: usize = 16;
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
            for ((c, _), (h, total)) in self.hist.iter_mut() {
                if *c == class {
                    h.iter_mut().for_each(|x| *x /= 2.0);
                    *total /= 2.0;
                }
            }
        }
        for &(call, k) in calls {
            if k == 0 {
                continue;
            }
            let (h, total) = self
                .hist
                .entry((class, call))
                .or_insert(([0.0; MAX_REPEATS], 0.0));
            h[k.min(MAX_REPEATS) - 1] += 1.0;
            *total += 1.0;
        }
    }

    /// The log-probability that a task of `class` that made `made` calls of `call` makes
    /// another (0 for its first, and while its class has closed too few tasks to say).
    pub fn log_another(&self, class: u64, call: u64, made: usize) -> f64 {
        if made == 0 || self.tasks.get(&class).is_none_or(|n| *n < REPEATS_EVIDENCE) {
            return 0.0;
        }
        let Some((h, _)) = self.hist.get(&(class, call)) else {
            return 0.0;
        };
        // Past the most any task made, as unlikely as one more than that most.
        let most = h.iter().rposition(|x| *x > 0.0).map_or(1, |i| i + 1);
        let made = made.min(most);
        let at_least: f32 = h[made - 1..].iter().sum();
        let more: f32 = h[made..].iter().sum();
        f64::from(((more + REPEATS_PRIOR) / (at_least + REPEATS_PRIOR)).min(1.0)).ln()
    }
}

/// How long tasks last, from their request to their reply, per task class (the node and the
/// request's arrival type). A task that lost its reply to another task (no connection or call
/// id says which of a caller's tasks a reply closes) would otherwise stay open and take later
/// tasks' calls for as long as it is kept. An unreplied task is as likely lost as open once
/// fewer than [`LOST_REPLIES`] of its class's tasks last as long; its age weighs against it
/// only from there (a slow task of a class that is sometimes slow keeps its calls), by how
/// much rarer still such tasks are.
#[derive(Clone, Debug, Default)]
pub struct Durations {
    /// Task class -> tasks closed per duration bin, and their total.
    hist: FastMap<u64, ([f32; BINS], f32)>,
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
        let (h, total) = self.hist.entry(class).or_insert(([0.0; BINS], 0.0));
        h[bin(duration_ns)] += 1.0;
        *total += 1.0;
        if fade(total, self.memory) {
            h.iter_mut().for_each(|c| *c /= 2.0);
        }
    }

    /// The log-probability that a task of `class` is still open at `age_ns` (0 while its
    /// class has closed too few tasks to say).
    pub fn log_survival(&self, class: u64, age_ns: i64) -> f64 {
        let Some((h, total)) = self.hist.get(&class) else {
            return 0.0;
        };
        if *total < DURATION_EVIDENCE {
            return 0.0;
        }
        let longer: f32 = h[bin(age_ns)..].iter().sum();
        let survival = f64::from((longer + DURATION_PRIOR) / (total + DURATION_PRIOR));
        (survival / LOST_REPLIES).min(1.0).ln()
    }
}

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

/// The order prior: the log-probability that a departure is taken up by the task of rank
/// `rank` (0 the longest waiting) among `n` candidate tasks, when a node takes up waiting
/// tasks in order of arrival with odds `rho` against each later one (a truncated geometric
/// distribution). `rho = 1` is no preference (`−ln n`, the cost of naming one of `n`); a
/// first-come-first-served node (a single event loop) is `rho` near 0. Which `rho` fits a
/// system is learned by comparing the likelihood of the whole warm-up under each.
pub fn order_log_prior(rho: f64, rank: usize, n: usize) -> f64 {
    let n = n.max(1);
    if rho >= 0.999 {
        return -(n as f64).ln();
    }
    let norm = 1.0 - rho.powi(n as i32);
    ((1.0 - rho) * rho.powi(rank as i32) / norm).ln()
}

/// A delay in ns between two local timestamps (`to` − `from`), negative when `to` is earlier.
pub fn delay(from: Time, to: Time) -> i64 {
    (i128::from(to) - i128::from(from)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Size classes: 0 for an unknown size, else one per power of two.
pub const SIZE_BINS: usize = 40;

/// The size class of a message of `bytes`.
pub fn size_bin(bytes: Option<u64>) -> u8 {
    match bytes {
        None | Some(0) => 0,
        Some(b) => (1 + (63 - b.leading_zeros()) as usize).min(SIZE_BINS - 1) as u8,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_that_is_the_parent_at_a_delay_reads_likelier_there_than_elsewhere() {
        let mut d = Delays::new(1000.0);
        for i in 0..200 {
            d.add(1, 10, 1_000_000 + i * 1000, 1.0);
        }
        let at = d.log_p(1, 10, 1_100_000);
        let far = d.log_p(1, 10, 100_000_000);
        let other = d.log_p(2, 10, 1_100_000);
        assert!(at > far + 3.0, "{at} {far}");
        assert!(at > other + 3.0, "{at} {other}");
        // The share of the class's decisions: close to ln(1) near the mode's bins.
        assert!(at > (0.3f64).ln(), "{at}");
    }

    #[test]
    fn a_task_with_more_calls_of_a_class_than_its_class_makes_is_unlikely_to_make_another() {
        let mut r = Repeats::new(1000.0);
        // Tasks of class 7 call class 3 once or twice, never more.
        for i in 0..40 {
            r.add(7, &[(3, 1 + i % 2)]);
        }
        // Too few closed tasks to say.
        assert_eq!(r.log_another(7, 3, 5), 0.0);
        for i in 0..160 {
            r.add(7, &[(3, 1 + i % 2)]);
        }
        // The first call is never weighed; a second is made by half the tasks.
        assert_eq!(r.log_another(7, 3, 0), 0.0);
        let second = r.log_another(7, 3, 1);
        assert!((second - 0.5f64.ln()).abs() < 0.01, "{second}");
        let third = r.log_another(7, 3, 2);
        let tenth = r.log_another(7, 3, 9);
        assert!(third < -4.0 && third.is_finite(), "{third}");
        assert!((tenth - third).abs() < 1e-9, "{tenth} {third}");
        // Another call class or task class knows nothing.
        assert_eq!(r.log_another(7, 4, 3), 0.0);
        assert_eq!(r.log_another(8, 3, 3), 0.0);
    }

    #[test]
    fn only_a_task_older_than_all_but_the_lost_share_of_its_class_counts_its_age() {
        let mut d = Durations::new(1000.0);
        for i in 0..40 {
            d.add(7, 5_000_000 + i * 100_000);
        }
        // Too few closed tasks to say.
        assert_eq!(d.log_survival(7, 1_000_000_000), 0.0);
        for i in 0..960 {
            d.add(7, 5_000_000 + i * 100_000);
        }
        // Within the durations its class's tasks have, no weight at all.
        assert_eq!(d.log_survival(7, 1_000_000), 0.0);
        assert_eq!(d.log_survival(7, 50_000_000), 0.0);
        // Far older than any: a task that lost its reply rather than an open one.
        let old = d.log_survival(7, 10_000_000_000);
        assert!(old < -2.0 && old.is_finite(), "{old}");
        // Another class knows nothing yet.
        assert_eq!(d.log_survival(8, 10_000_000_000), 0.0);
    }

    #[test]
    fn delays_fade_but_keep_their_shape() {
        let mut d = Delays::new(10.0);
        for _ in 0..1000 {
            d.add(1, 10, 2_000_000, 1.0);
        }
        let (n, _) = d.class[&10].clone();
        assert!(n <= 20.0, "{n}");
        assert!(d.log_p(1, 10, 2_000_000) > d.log_p(1, 10, 200_000_000) + 3.0);
    }

    #[test]
    fn a_signature_a_type_never_replies_with_is_unlikely() {
        let mut c = Composition::new(1000.0);
        for _ in 0..100 {
            c.add(7, 42, 1.0);
        }
        assert!(c.log_p(7, 42) > -0.1);
        assert!(c.log_p(7, 0) < -5.0);
    }

    #[test]
    fn the_order_prior_is_a_distribution_over_ranks() {
        for rho in [1.0, 0.5, 0.2] {
            for n in 1..6 {
                let total: f64 = (0..n).map(|k| order_log_prior(rho, k, n).exp()).sum();
                assert!((total - 1.0).abs() < 1e-9, "rho {rho} n {n}: {total}");
            }
        }
        assert!(order_log_prior(0.2, 0, 3) > order_log_prior(0.2, 1, 3));
    }

    #[test]
    fn a_size_the_parents_of_a_class_have_reads_likelier_than_others_of_the_type() {
        let mut s = Sizes::new(1000.0);
        for i in 0..200 {
            let big = size_bin(Some(300 + i));
            let small = size_bin(Some(100 + i % 20));
            s.arrival(1, big);
            s.arrival(1, small);
            s.parent(1, 10, big, 1.0);
            s.parent(1, 11, small, 1.0);
        }
        let (big, small) = (size_bin(Some(350)), size_bin(Some(110)));
        assert!(s.log_ratio(1, 10, big) > 0.5);
        assert!(s.log_ratio(1, 10, small) < -2.0);
        assert!(s.log_ratio(1, 11, small) > 0.5);
        assert_eq!(s.log_ratio(1, 10, 0), 0.0);
        assert_eq!(size_bin(None), 0);
        assert_eq!(size_bin(Some(1)), 1);
        assert_eq!(size_bin(Some(1024)), 11);
    }

    #[test]
    fn an_arrival_type_that_precedes_a_class_beyond_chance_is_its_likely_cause() {
        let mut c = Coincidence::new(1000.0);
        for i in 0..200i64 {
            // Type 1 always 50 µs before the departure, at random before the null; type 2
            // at random before both.
            let r = (i * 7919) % 20_000_000;
            c.observe(
                10,
                &[(1, 50_000), (2, 1_000_000 + r)],
                &[(1, 1_000_000 + r), (2, 1_000_000 + (r * 3) % 20_000_000)],
            );
        }
        assert!(c.probability(1, 10, 50_000) > 0.7);
        assert!(c.probability(2, 10, 5_000_000) < 0.3);
        assert_eq!(c.probability(1, 11, 50_000), 0.0);
    }

    #[test]
    fn delays_are_signed() {
        assert_eq!(delay(10, 7), -3);
        assert_eq!(delay(7, 10), 3);
        assert_eq!(bin(-5), 0);
    }
}
