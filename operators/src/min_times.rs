//! A multiset of event times that tells a lower bound on its smallest, to within a
//! millisecond: what an operator holding records (open messages, sightings waiting for their
//! window, late messages) holds its capability at, so that its output frontier says which
//! event times may still come.

use std::collections::VecDeque;

use causeway_sources::Time;

/// log2 of the width of a bucket in ns (1.05 ms): how much earlier than the smallest time
/// held [`MinTimes::min`] may say.
const SHIFT: u32 = 20;

/// How many buckets a time may come before the oldest held (about 69 s) and still get one of
/// its own; an earlier one is counted in the oldest bucket (its record is that late anyway).
const MAX_BEFORE: u64 = 1 << 16;

/// A multiset of times, counted per millisecond bucket in a ring from the oldest bucket held:
/// O(1) per insertion and removal (a search in a sorted queue cost 1.5% of the pipeline
/// harness's time, a min-heap with lazy deletion 3.7%), memory one counter per millisecond
/// between the oldest and the newest time held.
#[derive(Debug, Default)]
pub struct MinTimes {
    /// The bucket of `counts[0]`.
    base: u64,
    /// How many times each bucket holds, from `base` on; the first, if any, is not 0.
    counts: VecDeque<u32>,
    /// Times in buckets before this one are forgotten: neither held nor removed.
    floor: u64,
}

impl MinTimes {
    /// Adds one occurrence of `t` (none if it is before what was forgotten).
    pub fn insert(&mut self, t: Time) {
        let b = t >> SHIFT;
        if b < self.floor {
            return;
        }
        if self.counts.is_empty() {
            self.base = b;
            self.counts.push_back(1);
        } else if b < self.base {
            let before = (self.base - b).min(MAX_BEFORE);
            for _ in 0..before {
                self.counts.push_front(0);
            }
            self.base -= before;
            self.counts[0] += 1;
        } else {
            let i = (b - self.base) as usize;
            if i >= self.counts.len() {
                self.counts.resize(i + 1, 0);
            }
            self.counts[i] += 1;
        }
    }

    /// Removes one occurrence of `t`, held before (if it has been forgotten since, nothing).
    pub fn remove(&mut self, t: Time) {
        if t >> SHIFT < self.floor {
            return;
        }
        // A time counted in the oldest bucket for coming too early (`MAX_BEFORE`).
        let b = (t >> SHIFT).max(self.base);
        let Some(n) = self.counts.get_mut((b - self.base) as usize) else {
            return;
        };
        *n = n.saturating_sub(1);
        self.trim();
    }

    /// Forgets every time before `t`'s bucket, and any that comes later.
    pub fn forget_before(&mut self, t: Time) {
        let b = t >> SHIFT;
        self.floor = self.floor.max(b);
        while self.base < b && !self.counts.is_empty() {
            self.counts.pop_front();
            self.base += 1;
        }
        self.trim();
    }

    fn trim(&mut self) {
        while self.counts.front() == Some(&0) {
            self.counts.pop_front();
            self.base += 1;
        }
    }

    /// Forgets every time.
    pub fn clear(&mut self) {
        self.counts.clear();
    }

    /// A lower bound on the smallest time held, at most a bucket (1.05 ms) below it; `None`
    /// when none is held.
    pub fn min(&self) -> Option<Time> {
        (!self.counts.is_empty()).then_some(self.base << SHIFT)
    }
}

#[cfg(test)]
mod tests {
    use super::{MinTimes, SHIFT};

    fn bucket(t: Option<u64>) -> Option<u64> {
        t.map(|t| t >> SHIFT << SHIFT)
    }

    #[test]
    fn the_smallest_time_held_survives_removals_in_any_order() {
        let ms = 1 << SHIFT;
        let mut m = MinTimes::default();
        assert_eq!(m.min(), None);
        for t in [5 * ms, 3 * ms, 9 * ms, 3 * ms] {
            m.insert(t);
        }
        assert_eq!(m.min(), Some(3 * ms));
        m.remove(9 * ms);
        assert_eq!(m.min(), Some(3 * ms));
        m.remove(3 * ms);
        assert_eq!(m.min(), Some(3 * ms), "one of the two 3s is still held");
        m.remove(3 * ms);
        assert_eq!(m.min(), Some(5 * ms));
        m.remove(5 * ms);
        assert_eq!(m.min(), None);
    }

    #[test]
    fn times_out_of_order_and_repeated_are_held_as_a_multiset() {
        // Against a vector, on a pseudo-random mix of mostly increasing times.
        let mut m = MinTimes::default();
        let mut truth: Vec<u64> = Vec::new();
        let mut x: u64 = 7;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let mut clock = 1 << 30;
        for _ in 0..20_000 {
            let r = next();
            if r % 3 == 0 && !truth.is_empty() {
                let i = (next() as usize) % truth.len();
                let t = truth.swap_remove(i);
                m.remove(t);
            } else {
                clock += r % 500_000;
                let t = if r % 7 == 0 {
                    clock.saturating_sub(r % 50_000_000)
                } else {
                    clock
                };
                truth.push(t);
                m.insert(t);
            }
            assert_eq!(m.min(), bucket(truth.iter().min().copied()));
        }
    }

    #[test]
    fn forgotten_times_no_longer_hold() {
        let ms = 1 << SHIFT;
        let mut m = MinTimes::default();
        m.insert(2 * ms);
        m.insert(10 * ms);
        m.forget_before(5 * ms);
        assert_eq!(m.min(), Some(10 * ms));
        m.remove(2 * ms);
        assert_eq!(
            m.min(),
            Some(10 * ms),
            "removing a forgotten time changes nothing"
        );
        m.remove(10 * ms);
        assert_eq!(m.min(), None);
    }
}
