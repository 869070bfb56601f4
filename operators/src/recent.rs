//! Searching time-ordered deques near their newest end.
//!
//! `link` and `clock` keep per-node lists in time order (departures, open tasks, clock
//! estimates) and look up or insert at times that are nearly always among the newest
//! entries. A binary search over a list of thousands touches a cold cache line at each of
//! its dozen steps; [`partition_point_from_back`] gallops from the back instead, so a
//! lookup `k` entries from the end costs about `2·log2(k)` comparisons on the last few
//! cache lines, and a lookup far back at most twice a binary search.
//!
//! No state: functions over the callers' deques.

use std::collections::VecDeque;

/// The index of the first element for which `pred` is false, as
/// [`VecDeque::partition_point`] (`pred` must be true on a prefix and false on the rest),
/// found by galloping from the back.
pub fn partition_point_from_back<T>(list: &VecDeque<T>, mut pred: impl FnMut(&T) -> bool) -> usize {
    // Invariant: every element at `hi` or later is false.
    let mut hi = list.len();
    let mut step = 1;
    let mut lo = loop {
        let Some(i) = hi.checked_sub(step) else {
            break 0;
        };
        if pred(&list[i]) {
            break i + 1;
        }
        hi = i;
        step *= 2;
    };
    // The first false element is in `lo..=hi`.
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(&list[mid]) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn same_as_partition_point(mut v in proptest::collection::vec(0u32..50, 0..300), key in 0u32..55, rotate in 0usize..300) {
            v.sort_unstable();
            // A deque whose contents wrap around its buffer.
            let mut d: VecDeque<u32> = VecDeque::with_capacity(v.len());
            let r = if v.is_empty() { 0 } else { rotate % v.len() };
            for &x in &v[r..] { d.push_back(x); }
            for &x in v[..r].iter().rev() { d.push_front(x); }
            prop_assert_eq!(partition_point_from_back(&d, |x| *x <= key), d.partition_point(|x| *x <= key));
            prop_assert_eq!(partition_point_from_back(&d, |x| *x < key), d.partition_point(|x| *x < key));
        }
    }
}
