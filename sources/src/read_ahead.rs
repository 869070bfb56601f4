//! [`ReadAhead`]: a file's reader on a thread of its own, so that reading and decoding the
//! next records overlaps the worker's work on the last ones (`causeway stats`, where the
//! worker keeps every conversation's counts and the reading is the other half of the time).
//!
//! - **Input**: any [`ObservationReader`] over a file; the thread asks it for batches of the
//!   size the worker takes them in, which then pass without a copy.
//! - **Output**: the same observations, in the same order, with the same counts and
//!   warnings, handed over a whole batch at a time through a channel of [`DEPTH`] batches;
//!   the thread waits while the channel is full (backpressure, nothing dropped).
//! - **State**: at most [`DEPTH`] batches in the channel and one being taken, freed as the
//!   worker takes them; spent batches go back to the thread to be filled again.
//! - **Cost**: one channel send and receive per batch.

use crossbeam_channel::{Receiver, Sender, bounded};

use crate::Warning;
use crate::observation::Batch;
use crate::origin::OriginId;
use crate::reader::ObservationReader;
use crate::stats::SourceStats;

/// Batches read ahead.
pub const DEPTH: usize = 32;

/// What the thread hands over: a batch, the counts and warnings that came with it, and
/// whether more may follow.
struct Filled {
    batch: Batch,
    stats: SourceStats,
    warnings: Vec<Warning>,
    more: bool,
}

/// A reader on a thread of its own (see the module doc).
pub struct ReadAhead {
    origin: OriginId,
    filled: Receiver<Filled>,
    spent: Sender<Batch>,
    /// The rest of the batch being taken.
    current: Batch,
    stats: SourceStats,
    warnings: Vec<Warning>,
    done: bool,
}

impl ReadAhead {
    /// Starts reading `reader` on its own thread, `batch` records at a time.
    pub fn spawn(
        mut reader: Box<dyn ObservationReader>,
        batch: usize,
    ) -> std::io::Result<ReadAhead> {
        let origin = reader.origin();
        let (filled_tx, filled) = bounded::<Filled>(DEPTH);
        let (spent, spent_rx) = bounded::<Batch>(DEPTH + 2);
        std::thread::Builder::new()
            .name("causeway-read".into())
            .spawn(move || {
                loop {
                    let mut b = spent_rx.try_recv().unwrap_or_default();
                    b.clear();
                    reader.reserve(batch, &mut b);
                    let more = reader.read_batch(batch, &mut b);
                    let f = Filled {
                        batch: b,
                        stats: reader.take_stats(),
                        warnings: reader.take_warnings(),
                        more,
                    };
                    // The taking side is gone: stop.
                    if filled_tx.send(f).is_err() || !more {
                        return;
                    }
                }
            })?;
        Ok(ReadAhead {
            origin,
            filled,
            spent,
            current: Batch::default(),
            stats: SourceStats::default(),
            warnings: Vec::new(),
            done: false,
        })
    }
}

impl ObservationReader for ReadAhead {
    fn origin(&self) -> OriginId {
        self.origin
    }

    fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
        let mut left = max;
        while left > 0 {
            if self.current.is_empty() {
                if self.done {
                    return false;
                }
                let Ok(f) = self.filled.recv() else {
                    // The thread ended without saying so (it panicked): nothing more.
                    self.done = true;
                    return false;
                };
                let spent = std::mem::replace(&mut self.current, f.batch);
                let _ = self.spent.try_send(spent);
                self.stats.merge(&f.stats);
                self.warnings.extend(f.warnings);
                self.done = !f.more;
                continue;
            }
            if out.is_empty() && self.current.len() <= left {
                // The common case: the whole batch, without a copy.
                left -= self.current.len();
                std::mem::swap(out, &mut self.current);
                continue;
            }
            left -= crate::piped::append(out, &mut self.current, left);
        }
        !(self.done && self.current.is_empty())
    }

    fn reserve(&self, max: usize, out: &mut Batch) {
        let _ = (max, out);
    }

    fn take_stats(&mut self) -> SourceStats {
        std::mem::take(&mut self.stats)
    }

    fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::Packet;

    /// Hands out `n` packets stamped 0, 1, 2, ..., as many as asked at a time, counting
    /// them in its stats.
    struct Counting {
        next: u64,
        n: u64,
        reported: u64,
    }

    impl ObservationReader for Counting {
        fn origin(&self) -> OriginId {
            OriginId(3)
        }
        fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
            let end = (self.next + max as u64).min(self.n);
            out.packets.extend((self.next..end).map(Packet::test_at));
            self.next = end;
            self.next < self.n
        }
        fn reserve(&self, _: usize, _: &mut Batch) {}
        fn take_stats(&mut self) -> SourceStats {
            let records = self.next - std::mem::replace(&mut self.reported, self.next);
            SourceStats {
                records,
                ..SourceStats::default()
            }
        }
        fn take_warnings(&mut self) -> Vec<Warning> {
            Vec::new()
        }
    }

    #[test]
    fn every_record_comes_once_in_order_whatever_the_sizes_taken() {
        for (batch, take) in [(1024, 1024), (1000, 64), (7, 1024), (1, 1)] {
            let inner = Counting {
                next: 0,
                n: 10_000,
                reported: 0,
            };
            let mut r = ReadAhead::spawn(Box::new(inner), batch).unwrap();
            assert_eq!(r.origin(), OriginId(3));
            let mut got = Vec::new();
            let mut more = true;
            while more {
                let mut b = Batch::default();
                more = r.read_batch(take, &mut b);
                assert!(b.len() <= take);
                got.extend(b.packets.iter().map(|p| p.ts_ns));
            }
            assert_eq!(
                got,
                (0..10_000).collect::<Vec<_>>(),
                "batch {batch}, take {take}"
            );
            assert_eq!(r.take_stats().records, 10_000);
        }
    }
}
