//! [`Reorder`]: a buffer that releases records in `(event time, id)` order once the frontier
//! has passed them, for operators whose input is mostly, but not exactly, in time order.
//!
//! Records appended in order cost a push and a pop. Out-of-order ones make the next release
//! sort the buffer, a merge of sorted runs (the standard library's stable sort), so a record
//! is moved a small constant number of times, not `log n` times as in a tree or heap: the
//! records here are a few hundred bytes, and moving them dominated when they sat in a
//! `BTreeMap`.
//!
//! State: the records not yet released; the caller frees them by releasing.

use std::collections::VecDeque;

use causeway_sources::Time;

/// Records waiting for the frontier, released in `(time, id)` order.
#[derive(Debug)]
pub struct Reorder<T> {
    items: VecDeque<(Time, u64, T)>,
    sorted: bool,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Reorder {
            items: VecDeque::new(),
            sorted: true,
        }
    }
}

impl<T> Reorder<T> {
    /// Adds a record with its event time and id.
    pub fn push(&mut self, time: Time, id: u64, item: T) {
        if self
            .items
            .back()
            .is_some_and(|(t, i, _)| (*t, *i) > (time, id))
        {
            self.sorted = false;
        }
        self.items.push_back((time, id, item));
    }

    fn sort(&mut self) {
        if !self.sorted {
            self.items
                .make_contiguous()
                .sort_by_key(|(t, i, _)| (*t, *i));
            self.sorted = true;
        }
    }

    /// The smallest `(time, id)` waiting.
    pub fn first(&mut self) -> Option<(Time, u64)> {
        self.sort();
        self.items.front().map(|(t, i, _)| (*t, *i))
    }

    /// Removes and returns the first record if its time is below `bound` (`None`: no bound).
    pub fn pop_before(&mut self, bound: Option<Time>) -> Option<(Time, u64, T)> {
        self.sort();
        if self
            .items
            .front()
            .is_some_and(|(t, _, _)| bound.is_none_or(|b| *t < b))
        {
            self.items.pop_front()
        } else {
            None
        }
    }

    /// Records waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the push order, records come out in (time, id) order, each once, and only
        /// below the bound.
        #[test]
        fn releases_in_order_below_the_bound(
            keys in proptest::collection::vec((0u64..50, 0u64..5), 0..200),
            bound in 0u64..60,
        ) {
            let mut r = Reorder::default();
            for (n, (t, i)) in keys.iter().enumerate() {
                r.push(*t, *i, n);
            }
            let mut out = Vec::new();
            while let Some((t, i, n)) = r.pop_before(Some(bound)) {
                out.push((t, i, n));
            }
            let mut expected: Vec<(u64, u64, usize)> = keys
                .iter()
                .enumerate()
                .map(|(n, (t, i))| (*t, *i, n))
                .filter(|(t, _, _)| *t < bound)
                .collect();
            expected.sort_by_key(|(t, i, _)| (*t, *i));
            prop_assert_eq!(out, expected);
            prop_assert!(r.first().is_none_or(|(t, _)| t >= bound));
        }
    }
}
