//! [`Reorder`]: a buffer that releases records in `(event time, id)` order once the frontier
//! has passed them, for operators whose input is mostly, but not exactly, in time order.
//!
//! Records appended in order cost a push and a pop. Out-of-order ones make the next release
//! sort the keys pushed since the buffer was last in order and merge them into the rest from
//! where the first of them belongs (the standard library's stable sort, on two runs): the
//! cost follows how far back the late records reach, not how many wait. The records
//! here are a few hundred bytes, so only their keys are sorted: each record is moved into a
//! slot when pushed and out of it when released, never by a sort (moving whole records
//! dominated the profile, first in a `BTreeMap`, then when sorting them in place).
//!
//! State: the records not yet released, in slots that are reused; the caller frees them by
//! releasing.

use std::collections::VecDeque;

use causeway_sources::Time;

/// How many places behind the record it releases [`Reorder::pop_touching`] prefetches one:
/// far enough that its memory arrives before it is wanted.
const TOUCH_AHEAD: usize = 6;

/// A record whose memory can be fetched early, while the caller works on something else.
/// Records wait in a [`Reorder`] long enough to leave the cache, and the first reads of a
/// released one were the top stalls of `link` and `paths`.
pub trait Touch {
    /// Asks the CPU to bring the record into the cache ([`prefetch`]).
    fn touch(&self);
}

impl<T> Touch for Box<T> {
    #[inline]
    fn touch(&self) {
        prefetch::<T>(self);
    }
}

/// Asks the CPU to fetch the cache lines that hold `*r` (up to 512 bytes of it), without
/// waiting for them. A hint only: nothing is read, nothing can fault. An unused load in safe
/// code did the same job worse: the CPU waits for it before it retires what follows.
#[inline]
#[allow(unsafe_code)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let start = std::ptr::from_ref(r).cast::<i8>();
        let len = std::mem::size_of::<T>().min(512);
        let mut offset = 0;
        while offset < len {
            // SAFETY: a prefetch never dereferences its address for the program: it cannot
            // fault or change memory, whatever the address; this one lies within `*r`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(offset)) };
            offset += 64;
        }
        if len > 0 {
            // The last line, when `*r` does not start on a line.
            // SAFETY: as above.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(len - 1)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// Records waiting for the frontier, released in `(time, id)` order.
#[derive(Debug)]
pub struct Reorder<T> {
    /// `(time, id, slot)` of every waiting record.
    keys: VecDeque<(Time, u64, u32)>,
    slots: Vec<Option<T>>,
    /// Slots free for reuse.
    free: Vec<u32>,
    sorted: bool,
    /// How many keys at the front are in order (all of them when `sorted`).
    sorted_len: usize,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Reorder {
            keys: VecDeque::new(),
            slots: Vec::new(),
            free: Vec::new(),
            sorted: true,
            sorted_len: 0,
        }
    }
}

impl<T> Reorder<T> {
    /// Adds a record with its event time and id.
    pub fn push(&mut self, time: Time, id: u64, item: T) {
        if self
            .keys
            .back()
            .is_some_and(|(t, i, _)| (*t, *i) > (time, id))
        {
            self.sorted = false;
        }
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(item);
                s
            }
            None => {
                self.slots.push(Some(item));
                (self.slots.len() - 1) as u32
            }
        };
        self.keys.push_back((time, id, slot));
        if self.sorted {
            self.sorted_len = self.keys.len();
        }
    }

    /// Sorts the keys: the ones pushed out of order (a tail behind the sorted front), then
    /// the two runs merged from where the tail's first key belongs, so that the cost follows
    /// how far back the late keys go, not how many wait.
    fn sort(&mut self) {
        if self.sorted {
            return;
        }
        let key = |k: &(Time, u64, u32)| (k.0, k.1);
        let keys = self.keys.make_contiguous();
        let (front, tail) = keys.split_at_mut(self.sorted_len.min(keys.len()));
        tail.sort_by_key(key);
        let start = tail
            .first()
            .map_or(front.len(), |k| front.partition_point(|f| key(f) <= key(k)));
        keys[start..].sort_by_key(key);
        self.sorted = true;
        self.sorted_len = keys.len();
    }

    /// The smallest `(time, id)` waiting.
    pub fn first(&mut self) -> Option<(Time, u64)> {
        self.sort();
        self.keys.front().map(|(t, i, _)| (*t, *i))
    }

    /// Removes and returns the first record if its time is below `bound` (`None`: no bound).
    pub fn pop_before(&mut self, bound: Option<Time>) -> Option<(Time, u64, T)> {
        self.sort();
        let (t, i, slot) = *self.keys.front()?;
        if bound.is_some_and(|b| t >= b) {
            return None;
        }
        self.keys.pop_front();
        self.sorted_len -= 1;
        self.free.push(slot);
        let item = self.slots[slot as usize].take()?;
        if self.free.len() == self.slots.len() {
            // Empty: let the slots' memory go with the records.
            self.free.clear();
            self.slots.clear();
        }
        Some((t, i, item))
    }

    /// [`Reorder::pop_before`], prefetching the record `TOUCH_AHEAD` places behind the one
    /// prefetched ([`Touch`]), so that its memory is fetched while the caller works.
    #[inline]
    pub fn pop_touching(&mut self, bound: Option<Time>) -> Option<(Time, u64, T)>
    where
        T: Touch,
    {
        let first = self.pop_before(bound)?;
        if let Some(next) = self.upcoming(TOUCH_AHEAD) {
            next.touch();
        }
        // The slot that `touch` reads then: slots are reused as records leave, so the
        // next ones are scattered over the slots.
        if let Some(later) = self.upcoming_slot(2 * TOUCH_AHEAD) {
            prefetch(later);
        }
        Some(first)
    }

    /// The record `ahead` places behind the first, when the keys are in order.
    fn upcoming(&self, ahead: usize) -> Option<&T> {
        self.upcoming_slot(ahead)?.as_ref()
    }

    /// The slot of the record `ahead` places behind the first, when the keys are in order
    /// (found without reading it).
    fn upcoming_slot(&self, ahead: usize) -> Option<&Option<T>> {
        if !self.sorted {
            return None;
        }
        let (_, _, slot) = self.keys.get(ahead)?;
        self.slots.get(*slot as usize)
    }

    /// Records waiting.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
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

        /// Pushes and releases interleaved, mostly in order (as the operators see them): what
        /// comes out is what a sorted multiset of the keys pushed so far releases.
        #[test]
        fn interleaved_pushes_and_releases_come_out_in_order(
            ops in proptest::collection::vec((0u64..20, 0u64..3, proptest::option::of(0u64..40)), 0..300),
        ) {
            let mut r = Reorder::default();
            let mut model: Vec<(u64, u64, usize)> = Vec::new();
            let mut clock: u64 = 0;
            for (n, (dt, i, bound)) in ops.into_iter().enumerate() {
                clock += 1;
                // Mostly increasing times, some late by up to 20.
                let t = (clock + 20).saturating_sub(dt);
                r.push(t, i, n);
                // Equal keys leave in the order they came (stable).
                let at = model.partition_point(|(mt, mi, _)| (*mt, *mi) <= (t, i));
                model.insert(at, (t, i, n));
                if let Some(b) = bound {
                    let b = b + clock;
                    while let Some(got) = r.pop_before(Some(b)) {
                        prop_assert_eq!(got, model.remove(0));
                    }
                    prop_assert!(model.first().is_none_or(|(t, _, _)| *t >= b));
                    // What `upcoming` shows is what leaves that many places later.
                    for ahead in 0..3 {
                        if let Some(u) = r.upcoming(ahead) {
                            prop_assert_eq!(Some(*u), model.get(ahead).map(|m| m.2));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn upcoming_shows_the_records_in_release_order_once_sorted() {
        let mut r = Reorder::default();
        r.push(5, 0, "b");
        r.push(3, 0, "a");
        assert_eq!(r.upcoming(0), None, "out of order: nothing until sorted");
        assert_eq!(r.pop_before(None), Some((3, 0, "a")));
        r.push(7, 0, "c");
        assert_eq!(r.upcoming(0), Some(&"b"));
        assert_eq!(r.upcoming(1), Some(&"c"));
        assert_eq!(r.upcoming(2), None);
    }
}
