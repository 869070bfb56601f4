//! Connection affinity (beyond WAP5 and Project 5): which incoming connections' tasks make
//! the calls on an outgoing connection.
//!
//! A server that serves each connection on a thread of its own, with a backend connection
//! per thread (python's threaded servers, Apache's workers, a JDBC connection per request
//! thread), makes the calls of a request that came in on connection I on the same few
//! backend connections, every time; an event loop that picks any pooled connection (nginx)
//! does not. So, per (node, outgoing connection O), how often a task from each incoming
//! connection is a candidate for O's calls is counted at the calls' send times and at the
//! time-shifted null (the same scans the delays learn from, so nothing learned from the links
//! feeds back): a task from I weighs the ratio of the two shares. Where the server has no
//! affinity the shares agree and the ratio is 1; where it has, the task from the connection
//! that always comes with O is favoured over concurrent ones by about the number of incoming
//! connections over the concurrency.
//!
//! State: per (node, outgoing connection), the counts of up to [`MAX_INCOMING`] incoming
//! connections, halved every [`HALVE_AT`] scans; stale once no call on O was counted for the
//! delay window (read as unknown, counted afresh), and freed at the next sweep, as the other
//! learned densities are, so the output does not depend on when sweeps ran.

use super::*;

/// Incoming connections counted per outgoing connection; beyond, the least counted is
/// replaced.
const MAX_INCOMING: usize = 16;
/// Scans of an outgoing connection after which its counts are halved (so that it follows a
/// connection that moves to another thread).
const HALVE_AT: f32 = 512.0;
/// Scans at the send (and at the null) an outgoing connection needs before its ratios count.
const MIN_SCANS: f32 = 16.0;
/// The most a ratio multiplies or divides the odds.
const MAX_RATIO: f64 = 20.0;

/// The counts of one outgoing connection of one node.
#[derive(Debug, Default)]
pub(super) struct Affinity {
    /// (incoming connection, share at the sends, share at the null).
    incoming: SmallVec<[(u64, f32, f32); 4]>,
    /// Scans counted at the sends and at the null.
    scans: (f32, f32),
    pub(super) last_ns: Time,
}

impl Affinity {
    /// Counts one scan's candidates (`null`: the time-shifted scan's): each incoming
    /// connection among them gets an equal share of one.
    fn count(&mut self, incoming: &[u64], null: bool) {
        if incoming.is_empty() {
            return;
        }
        let share = 1.0 / incoming.len() as f32;
        for &i in incoming {
            let at = match self.incoming.iter().position(|e| e.0 == i) {
                Some(at) => at,
                None if self.incoming.len() < MAX_INCOMING => {
                    self.incoming.push((i, 0.0, 0.0));
                    self.incoming.len() - 1
                }
                None => {
                    let least = self
                        .incoming
                        .iter()
                        .enumerate()
                        .min_by(|a, b| (a.1.1 + a.1.2).total_cmp(&(b.1.1 + b.1.2)))
                        .map_or(0, |(k, _)| k);
                    self.incoming[least] = (i, 0.0, 0.0);
                    least
                }
            };
            if null {
                self.incoming[at].2 += share;
            } else {
                self.incoming[at].1 += share;
            }
        }
        if null {
            self.scans.1 += 1.0;
        } else {
            self.scans.0 += 1.0;
        }
        if self.scans.0 + self.scans.1 >= HALVE_AT {
            self.scans.0 /= 2.0;
            self.scans.1 /= 2.0;
            for e in &mut self.incoming {
                e.1 /= 2.0;
                e.2 /= 2.0;
            }
        }
    }

    /// How much likelier a task from `incoming` is among the candidates at the sends than at
    /// the null (1 until enough scans were counted).
    fn ratio(&self, incoming: u64) -> f64 {
        if self.scans.0 < MIN_SCANS || self.scans.1 < MIN_SCANS {
            return 1.0;
        }
        let (real, null) = self
            .incoming
            .iter()
            .find(|e| e.0 == incoming)
            .map_or((0.0, 0.0), |e| (e.1, e.2));
        // One pseudo-scan of each share spread over the connections counted.
        let prior = 1.0 / (self.incoming.len() as f64 + 1.0);
        let real = (f64::from(real) + prior) / (f64::from(self.scans.0) + 1.0);
        let null = (f64::from(null) + prior) / (f64::from(self.scans.1) + 1.0);
        (real / null).clamp(1.0 / MAX_RATIO, MAX_RATIO)
    }
}

impl Linker {
    /// The kept-alive incoming connections of the tasks among `candidates` within
    /// `seen_back`, deduplicated. A connection that carries one request is not counted: it
    /// is open at the call's time and not at the null's earlier one, whatever the server
    /// does, so its ratio would only say how recent it is.
    fn incoming_of(&self, candidates: &[Candidate], seen_back: Time) -> SmallVec<[u64; 16]> {
        let mut out: SmallVec<[u64; 16]> = SmallVec::new();
        for c in candidates.iter().filter(|c| c.delay <= seen_back) {
            let task = c.task.and_then(|t| self.tasks.get(&t));
            if let Some(conn) = task.filter(|t| t.persistent).map(|t| t.conn) {
                if !out.contains(&conn) {
                    out.push(conn);
                }
            }
        }
        out
    }

    /// Counts a call's candidates at its send and at the null, those both scans could see
    /// ([`Affinity`]).
    pub(super) fn learn_affinity(
        &mut self,
        p: &Prep,
        candidates: &[Candidate],
        null: &[Candidate],
        seen_back: Time,
    ) {
        let real = self.incoming_of(candidates, seen_back);
        let shifted = self.incoming_of(null, seen_back);
        if real.is_empty() && shifted.is_empty() {
            return;
        }
        let window = self.config.delay_window_ns;
        let a = self.affinity.entry((p.from, p.conn)).or_default();
        if stale(a.last_ns, window, p.event_ns) {
            *a = Affinity::default();
        }
        a.count(&real, false);
        a.count(&shifted, true);
        a.last_ns = a.last_ns.max(p.event_ns);
    }

    /// What call `p`'s outgoing connection has learned, unless stale ([`Affinity`]).
    pub(super) fn affinity_at(&self, p: &Prep) -> Option<&Affinity> {
        let window = self.config.delay_window_ns;
        self.affinity
            .get(&(p.from, p.conn))
            .filter(|a| !stale(a.last_ns, window, p.event_ns))
    }

    /// How much connection affinity `a` (of the call's connection) multiplies the odds that
    /// candidate `c` is the parent (1 for a candidate outside any task or on a connection
    /// not kept alive).
    pub(super) fn affinity_odds(&self, a: &Affinity, c: &Candidate) -> f64 {
        let task = c.task.and_then(|t| self.tasks.get(&t));
        task.filter(|t| t.persistent)
            .map_or(1.0, |t| a.ratio(t.conn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_that_always_comes_with_the_calls_is_favoured() {
        let mut a = Affinity::default();
        // Four incoming connections; calls on this one are made for connection 1's tasks,
        // with one other task open at the send; at the null, any two.
        for k in 0..64u64 {
            a.count(&[1, 2 + k % 3], false);
            a.count(&[1 + k % 4, 1 + (k + 1) % 4], true);
        }
        assert!(a.ratio(1) > 1.5, "{}", a.ratio(1));
        assert!(a.ratio(2) < 1.0, "{}", a.ratio(2));
        assert!(a.ratio(1) / a.ratio(2) > 2.5);
    }

    #[test]
    fn without_affinity_the_ratios_agree() {
        let mut a = Affinity::default();
        for k in 0..200u64 {
            a.count(&[1 + k % 4, 1 + (k + 2) % 4], false);
            a.count(&[1 + (k + 1) % 4, 1 + (k + 3) % 4], true);
        }
        for i in 1..=4 {
            assert!((a.ratio(i) - 1.0).abs() < 0.1, "{i}: {}", a.ratio(i));
        }
    }

    #[test]
    fn too_few_scans_say_nothing() {
        let mut a = Affinity::default();
        a.count(&[1], false);
        a.count(&[2], true);
        assert_eq!(a.ratio(1), 1.0);
    }
}
