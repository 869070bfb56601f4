//! A multiset of event times that tells its smallest: what an operator holding records (open
//! messages, sightings waiting for their window) holds its capability at, so that its output
//! frontier says exactly which event times may still come.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use causeway_sources::Time;

/// A multiset of times that tells its smallest: a min-heap with deletions applied lazily
/// (a removed time is remembered until it reaches the top). O(log n) per insertion and
/// removal, in two contiguous heaps.
#[derive(Debug, Default)]
pub struct MinTimes {
    held: BinaryHeap<Reverse<Time>>,
    removed: BinaryHeap<Reverse<Time>>,
}

impl MinTimes {
    /// Adds one occurrence of `t`.
    pub fn insert(&mut self, t: Time) {
        self.held.push(Reverse(t));
    }

    /// Removes one occurrence of `t`, which must be held.
    pub fn remove(&mut self, t: Time) {
        self.removed.push(Reverse(t));
        self.settle();
    }

    fn settle(&mut self) {
        while let (Some(h), Some(r)) = (self.held.peek(), self.removed.peek()) {
            if h != r {
                break;
            }
            self.held.pop();
            self.removed.pop();
        }
    }

    /// Forgets every time.
    pub fn clear(&mut self) {
        self.held.clear();
        self.removed.clear();
    }

    /// The smallest time held, if any.
    pub fn min(&self) -> Option<Time> {
        self.held.peek().map(|r| r.0)
    }
}

#[cfg(test)]
mod tests {
    use super::MinTimes;

    #[test]
    fn the_smallest_time_held_survives_removals_in_any_order() {
        let mut m = MinTimes::default();
        assert_eq!(m.min(), None);
        for t in [5, 3, 9, 3] {
            m.insert(t);
        }
        assert_eq!(m.min(), Some(3));
        m.remove(9);
        assert_eq!(m.min(), Some(3));
        m.remove(3);
        assert_eq!(m.min(), Some(3), "one of the two 3s is still held");
        m.remove(3);
        assert_eq!(m.min(), Some(5));
        m.remove(5);
        assert_eq!(m.min(), None);
    }
}
