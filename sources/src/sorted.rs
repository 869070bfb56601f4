//! [`Sorted`]: a capture file's packets put back in timestamp order within a short window.
//!
//! A capture is written in the order the sniffer got its packets, which is not always their
//! timestamps' order: a multi-queue NIC or `-i any` hands them over per queue, and a mirror
//! port interleaves two copies. Packets of one connection out of order (a response before its
//! request) would end or split messages at the wrong bytes downstream; one sniffer's file
//! reordered by `reordercap` gives the right answer.
//!
//! - **Input**: a packet reader over a file (not a pipe or a live sniffer, whose newest packets
//!   must not wait for later ones).
//! - **Output**: the same packets, each batch sorted by timestamp (stable: packets with equal
//!   timestamps keep their file order), a packet held back until one `WINDOW_NS` newer has
//!   been read or the file ends. A packet more than `WINDOW_NS` older than one already passed
//!   on cannot be put back: it is sorted among the held window only (the source then counts it late if it is later than its lateness). Each
//!   stretch of a capture whose clock jumped back keeps its order.
//! - **State**: the packets of the last `WINDOW_NS` of the file's timestamps.
//! - **Cost**: per packet, two moves (into the held window and out of it); per batch, a check
//!   that it is sorted, and a sort only where it is not.

use std::collections::VecDeque;

use crate::Warning;
use crate::observation::{Batch, Nanos, Packet};
use crate::origin::OriginId;
use crate::reader::ObservationReader;
use crate::stats::SourceStats;

/// How far out of order a packet may come and still be put back in place, ns.
pub const WINDOW_NS: Nanos = 10_000_000;

/// A packet reader whose packets leave sorted within [`WINDOW_NS`]. See the module
/// documentation.
pub struct Sorted {
    inner: Box<dyn ObservationReader>,
    /// Packets read and not yet passed on, sorted: at most the newest [`WINDOW_NS`] and a
    /// batch.
    held: VecDeque<Packet>,
    /// The inner reader's batch.
    scratch: Batch,
    done: bool,
}

impl Sorted {
    /// Wraps a packet reader.
    pub fn new(inner: Box<dyn ObservationReader>) -> Self {
        Sorted {
            inner,
            held: VecDeque::new(),
            scratch: Batch::default(),
            done: false,
        }
    }
}

impl ObservationReader for Sorted {
    fn origin(&self) -> OriginId {
        self.inner.origin()
    }

    fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
        if !self.done {
            self.scratch.clear();
            self.inner.reserve(max, &mut self.scratch);
            self.done = !self.inner.read_batch(max, &mut self.scratch);
            let new = &mut self.scratch.packets;
            if !new.is_sorted_by_key(|p| p.ts_ns) {
                new.sort_by_key(|p| p.ts_ns);
            }
            if let Some(first) = new.first().map(|p| p.ts_ns) {
                // Where the batch's earliest goes among the held: the end, unless packets
                // came out of order across batches; then the merged tail is sorted (stable).
                let at = self.held.partition_point(|p| p.ts_ns <= first);
                let overlap = at < self.held.len();
                self.held.extend(new.drain(..));
                if overlap {
                    self.held.make_contiguous()[at..].sort_by_key(|p| p.ts_ns);
                }
            }
        }
        let ready = match (self.done, self.held.back()) {
            (true, _) => self.held.len(),
            (false, Some(newest)) => {
                let newest = newest.ts_ns;
                self.held
                    .partition_point(|p| p.ts_ns.saturating_add(WINDOW_NS) <= newest)
            }
            (false, None) => 0,
        };
        out.packets.extend(self.held.drain(..ready.min(max.max(1))));
        !(self.done && self.held.is_empty())
    }

    fn reserve(&self, max: usize, out: &mut Batch) {
        self.inner.reserve(max, out);
    }

    fn take_stats(&mut self) -> SourceStats {
        self.inner.take_stats()
    }

    fn take_warnings(&mut self) -> Vec<Warning> {
        self.inner.take_warnings()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader handing out the packets stamped `ts` in batches of `size`.
    struct Fixed {
        ts: Vec<Nanos>,
        next: usize,
        size: usize,
    }

    impl ObservationReader for Fixed {
        fn origin(&self) -> OriginId {
            OriginId(0)
        }
        fn read_batch(&mut self, _max: usize, out: &mut Batch) -> bool {
            for &ts in self.ts.iter().skip(self.next).take(self.size) {
                out.packets.push(Packet::test_at(ts));
            }
            self.next += self.size;
            self.next < self.ts.len()
        }
        fn reserve(&self, _max: usize, _out: &mut Batch) {}
        fn take_stats(&mut self) -> SourceStats {
            SourceStats::default()
        }
        fn take_warnings(&mut self) -> Vec<Warning> {
            Vec::new()
        }
    }

    fn drain(ts: Vec<Nanos>, size: usize) -> Vec<Nanos> {
        let mut r = Sorted::new(Box::new(Fixed { ts, next: 0, size }));
        let mut out = Vec::new();
        loop {
            let mut b = Batch::default();
            let more = r.read_batch(size, &mut b);
            out.extend(b.packets.iter().map(|p| p.ts_ns));
            if !more {
                return out;
            }
        }
    }

    #[test]
    fn neighbours_swapped_across_batches_come_out_sorted_and_none_is_lost() {
        let ms = 1_000_000;
        // Every fourth pair swapped, 0.1 ms apart.
        let mut ts: Vec<Nanos> = (0..1000).map(|i| i * ms / 10).collect();
        for i in (0..1000).step_by(4) {
            ts.swap(i, i + 1);
        }
        for size in [1, 3, 64, 2000] {
            let out = drain(ts.clone(), size);
            assert_eq!(out.len(), ts.len(), "batches of {size}");
            assert!(out.is_sorted(), "batches of {size}");
        }
    }

    #[test]
    fn a_jump_back_beyond_the_window_loses_nothing_and_keeps_each_stretch_in_order() {
        let s = 1_000_000_000;
        let early: Vec<Nanos> = (0..50).map(|i| 10 * s + i * 1_000_000).collect();
        let late: Vec<Nanos> = (0..50).map(|i| s + i * 1_000_000).collect();
        let ts: Vec<Nanos> = early.iter().chain(&late).copied().collect();
        for size in [1, 7, 64] {
            let out = drain(ts.clone(), size);
            assert_eq!(out.len(), ts.len());
            let pick = |lo: Nanos, hi: Nanos| -> Vec<Nanos> {
                out.iter()
                    .copied()
                    .filter(|t| (lo..hi).contains(t))
                    .collect()
            };
            assert_eq!(pick(10 * s, 11 * s), early, "batches of {size}");
            assert_eq!(pick(s, 2 * s), late, "batches of {size}");
        }
    }
}
