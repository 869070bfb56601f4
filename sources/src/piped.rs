//! [`Piped`]: the reader of an input that can go quiet without ending, such as a pipe from a
//! live `tcpdump -U -w -` (`causeway analyze -`) or a FIFO. Read on a thread of its own, so
//! that a quiet pipe stalls neither the worker nor the frontier.
//!
//! - **Input**: any [`ObservationReader`] over a pipe. The thread asks it for one record at a
//!   time, so a record is handed on as soon as its bytes are in, not once a batch is full.
//! - **Output**: the same observations, counts and warnings, through a buffer of at most
//!   [`CAP`] records; the thread waits while it is full (backpressure, nothing dropped).
//! - **Watermark**: once the pipe has said nothing for `idle`, the input is taken for a live
//!   capture that went quiet: its clock ([`ObservationReader::clock_now`]) is the newest
//!   record's stamp plus the host time since that record came, less `idle`, so the watermark,
//!   the other inputs and the reports move on. Offsets between the capturing host's clock and
//!   this one do not matter (only elapsed time is added). A record that comes later but is
//!   older than that clock is counted late, never dropped silently; which is why tcpdump
//!   should run with `-U` (without it, it holds packets in its buffer while traffic is low).
//! - **State**: the records not taken yet (at most [`CAP`]), freed as they are taken.
//! - **Cost**: one lock per record on the reading thread, one per batch taken.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::Warning;
use crate::observation::{Batch, Nanos};
use crate::origin::OriginId;
use crate::reader::ObservationReader;
use crate::stats::SourceStats;

/// Most records waiting to be taken.
pub const CAP: usize = 1 << 16;
/// Longest `read_batch` waits for a record before it returns with none.
const WAIT: Duration = Duration::from_millis(20);

/// A reader on a thread of its own (see the module doc).
pub struct Piped {
    origin: OriginId,
    shared: Arc<(Mutex<Shared>, Condvar)>,
    idle: Duration,
}

#[derive(Default)]
struct Shared {
    batch: Batch,
    stats: SourceStats,
    warnings: Vec<Warning>,
    /// The input ended.
    done: bool,
    /// When the newest record came (host clock), and its stamp.
    newest: Option<(Instant, Nanos)>,
    /// The taking side is gone: the thread ends.
    closed: bool,
}

impl Piped {
    /// Starts reading `reader` on its own thread; its watermark follows the host's clock once
    /// it has been quiet for `idle`.
    pub fn spawn(mut reader: Box<dyn ObservationReader>, idle: Duration) -> std::io::Result<Piped> {
        let origin = reader.origin();
        let shared: Arc<(Mutex<Shared>, Condvar)> = Arc::default();
        let theirs = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("causeway-pipe".into())
            .spawn(move || {
                let (lock, cv) = &*theirs;
                let mut local = Batch::default();
                loop {
                    local.clear();
                    let more = reader.read_batch(1, &mut local);
                    let stats = reader.take_stats();
                    let warnings = reader.take_warnings();
                    let Ok(mut s) = lock.lock() else { return };
                    while s.batch.len() >= CAP && !s.closed {
                        s = match cv.wait(s) {
                            Ok(s) => s,
                            Err(_) => return,
                        };
                    }
                    if s.closed {
                        return;
                    }
                    let newest = (0..local.len()).filter_map(|i| local.ts_at(i)).max();
                    if let Some(ts) = newest {
                        let ts = s.newest.map_or(ts, |(_, t)| t.max(ts));
                        s.newest = Some((Instant::now(), ts));
                    }
                    append(&mut s.batch, &mut local, usize::MAX);
                    s.stats.merge(&stats);
                    s.warnings.extend(warnings);
                    s.done = !more;
                    cv.notify_all();
                    if !more {
                        return;
                    }
                }
            })?;
        Ok(Piped {
            origin,
            shared,
            idle,
        })
    }
}

/// Moves up to `max` observations from the front of `from` to the end of `to`; returns how
/// many.
pub(crate) fn append(to: &mut Batch, from: &mut Batch, max: usize) -> usize {
    fn part<T>(to: &mut Vec<T>, from: &mut Vec<T>, left: &mut usize) {
        let n = from.len().min(*left);
        to.extend(from.drain(..n));
        *left -= n;
    }
    let mut left = max;
    part(&mut to.packets, &mut from.packets, &mut left);
    part(&mut to.rows, &mut from.rows, &mut left);
    part(&mut to.calls, &mut from.calls, &mut left);
    part(&mut to.tcp, &mut from.tcp, &mut left);
    max - left
}

impl Drop for Piped {
    fn drop(&mut self) {
        let (lock, cv) = &*self.shared;
        if let Ok(mut s) = lock.lock() {
            s.closed = true;
        }
        cv.notify_all();
    }
}

impl ObservationReader for Piped {
    fn origin(&self) -> OriginId {
        self.origin
    }

    fn read_batch(&mut self, max: usize, out: &mut Batch) -> bool {
        let (lock, cv) = &*self.shared;
        let Ok(mut s) = lock.lock() else {
            return false;
        };
        if s.batch.is_empty() && !s.done {
            s = match cv.wait_timeout(s, WAIT) {
                Ok((s, _)) => s,
                Err(_) => return false,
            };
        }
        append(out, &mut s.batch, max);
        let more = !(s.done && s.batch.is_empty());
        cv.notify_all();
        more
    }

    fn reserve(&self, max: usize, out: &mut Batch) {
        // Whatever its kind, a batch taken is at most `max` long; grow as records come.
        let _ = (max, out);
    }

    fn take_stats(&mut self) -> SourceStats {
        let (lock, _) = &*self.shared;
        lock.lock()
            .map(|mut s| std::mem::take(&mut s.stats))
            .unwrap_or_default()
    }

    fn take_warnings(&mut self) -> Vec<Warning> {
        let (lock, _) = &*self.shared;
        lock.lock()
            .map(|mut s| std::mem::take(&mut s.warnings))
            .unwrap_or_default()
    }

    fn is_live(&self) -> bool {
        true
    }

    fn clock_now(&self) -> Option<Nanos> {
        let (lock, _) = &*self.shared;
        let s = lock.lock().ok()?;
        if s.done || !s.batch.is_empty() {
            return None;
        }
        let (at, ts) = s.newest?;
        let quiet = at.elapsed().checked_sub(self.idle)?;
        Some(ts.saturating_add(u64::try_from(quiet.as_nanos()).unwrap_or(u64::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::Packet;

    /// Hands out a few packets, then says nothing (like a quiet pipe) until `end`.
    struct Quiet {
        left: Vec<Nanos>,
        end: Instant,
    }

    impl ObservationReader for Quiet {
        fn origin(&self) -> OriginId {
            OriginId(0)
        }
        fn read_batch(&mut self, _max: usize, out: &mut Batch) -> bool {
            if let Some(ts) = self.left.pop() {
                out.packets.push(Packet::test_at(ts));
                return true;
            }
            // A blocking read on a quiet pipe.
            std::thread::sleep(self.end.saturating_duration_since(Instant::now()));
            false
        }
        fn reserve(&self, _: usize, _: &mut Batch) {}
        fn take_stats(&mut self) -> SourceStats {
            SourceStats::default()
        }
        fn take_warnings(&mut self) -> Vec<Warning> {
            Vec::new()
        }
    }

    #[test]
    fn records_come_at_once_and_the_clock_moves_on_when_quiet() {
        let idle = Duration::from_millis(200);
        let reader = Quiet {
            left: vec![3_000, 2_000, 1_000],
            end: Instant::now() + Duration::from_millis(800),
        };
        let mut p = Piped::spawn(Box::new(reader), idle).unwrap();
        let mut out = Batch::default();
        let start = Instant::now();
        while out.len() < 3 && start.elapsed() < Duration::from_secs(5) {
            assert!(p.read_batch(1024, &mut out));
        }
        // All three, without waiting for the blocked read behind them.
        assert_eq!(
            out.packets.iter().map(|p| p.ts_ns).collect::<Vec<_>>(),
            [1_000, 2_000, 3_000]
        );
        assert!(start.elapsed() < Duration::from_millis(150));
        // Not quiet long enough yet: no clock.
        assert_eq!(p.clock_now(), None);
        std::thread::sleep(Duration::from_millis(400));
        let clock = p.clock_now().expect("quiet for longer than idle");
        // The newest stamp plus roughly 400 ms less the 200 ms idle.
        assert!(
            (3_000 + 150_000_000..3_000 + 350_000_000).contains(&clock),
            "{clock}"
        );
        // The input ends: no more records, and no clock.
        while p.read_batch(1024, &mut out) {}
        assert_eq!(out.len(), 3);
        assert_eq!(p.clock_now(), None);
    }

    #[test]
    fn the_buffer_is_bounded_and_nothing_is_lost() {
        let n = CAP as u64 * 2 + 7;
        let reader = Quiet {
            left: (1..=n).rev().collect(),
            end: Instant::now(),
        };
        let mut p = Piped::spawn(Box::new(reader), Duration::from_secs(5)).unwrap();
        let mut out = Batch::default();
        let mut most = 0;
        loop {
            let mut b = Batch::default();
            let more = p.read_batch(usize::MAX, &mut b);
            most = most.max(b.len());
            append(&mut out, &mut b, usize::MAX);
            if !more {
                break;
            }
        }
        assert!(most <= CAP, "{most}");
        assert_eq!(out.len() as u64, n);
        assert!(out.packets.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
    }
}
