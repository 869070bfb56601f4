//! [`Buffered`]: runs a sink on a thread of its own behind a bounded buffer, so that a slow
//! destination (a pipe to a script, a network endpoint) does not stall the dataflow unless
//! the user wants it to.
//!
//! - **Input**: the records, progress and finish calls of the `deliver` operator.
//! - **Output**: the same calls on the inner sink, in the same order, on the sink's thread.
//! - **State**: up to `capacity` records (cloned) waiting in a bounded channel; freed as the
//!   sink takes them.
//! - **When full**: [`WhenFull::Block`] waits for room (nothing is lost; the dataflow slows
//!   to the sink's pace); [`WhenFull::DropNewest`] drops the record being offered and counts
//!   it. Progress calls are only hints to flush and are skipped when the buffer is full.
//!   The count of dropped records is reported on stderr when the sink finishes, and kept in
//!   [`Buffered::dropped`].
//! - **Errors**: the inner sink's first error ends its thread; it is returned by the next
//!   call (or by `finish`).
//! - **Cost**: a clone and a channel send per record.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use causeway_sources::Time;
use crossbeam_channel::{Sender, TrySendError};

use crate::{Record, Sink, SinkError};

/// What a full buffer does with the next record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WhenFull {
    /// Wait for room: nothing is lost, the run slows to the sink's pace.
    #[default]
    Block,
    /// Drop the record offered, and count it.
    DropNewest,
}

enum Call {
    Record(Box<Record>),
    Progress(Option<Time>),
}

/// A sink behind a bounded buffer, on its own thread; see the module documentation.
pub struct Buffered {
    name: String,
    when_full: WhenFull,
    tx: Option<Sender<Call>>,
    thread: Option<JoinHandle<Result<(), SinkError>>>,
    dropped: Arc<AtomicU64>,
}

impl Buffered {
    /// Runs `sink` (called `name` in messages) behind a buffer of `capacity` records.
    pub fn new(
        name: &str,
        mut sink: Box<dyn Sink>,
        capacity: usize,
        when_full: WhenFull,
    ) -> Result<Self, SinkError> {
        let (tx, rx) = crossbeam_channel::bounded::<Call>(capacity.max(1));
        let thread = std::thread::Builder::new()
            .name(format!("sink {name}"))
            .spawn(move || {
                for call in rx {
                    match call {
                        Call::Record(r) => sink.write(&r)?,
                        Call::Progress(t) => sink.progress(t)?,
                    }
                }
                sink.finish()
            })
            .map_err(|source| SinkError::Io {
                target: name.to_owned(),
                source,
            })?;
        Ok(Buffered {
            name: name.to_owned(),
            when_full,
            tx: Some(tx),
            thread: Some(thread),
            dropped: Arc::default(),
        })
    }

    /// Records dropped so far because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The sink's thread has ended (by an error): its result.
    fn ended(&mut self) -> SinkError {
        self.tx = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => SinkError::Encode(format!("sink {} panicked", self.name)),
            _ => SinkError::Closed,
        }
    }
}

impl Sink for Buffered {
    fn write(&mut self, record: &Record) -> Result<(), SinkError> {
        let Some(tx) = &self.tx else {
            return Err(SinkError::Closed);
        };
        let call = Call::Record(Box::new(record.clone()));
        let sent = match self.when_full {
            WhenFull::Block => tx.send(call).is_ok(),
            WhenFull::DropNewest => match tx.try_send(call) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(TrySendError::Disconnected(_)) => false,
            },
        };
        if sent { Ok(()) } else { Err(self.ended()) }
    }

    fn progress(&mut self, frontier: Option<Time>) -> Result<(), SinkError> {
        let Some(tx) = &self.tx else {
            return Err(SinkError::Closed);
        };
        match tx.try_send(Call::Progress(frontier)) {
            Ok(()) | Err(TrySendError::Full(_)) => Ok(()),
            Err(TrySendError::Disconnected(_)) => Err(self.ended()),
        }
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.tx = None;
        let result = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(SinkError::Encode(format!("sink {} panicked", self.name))),
            None => Ok(()),
        };
        let dropped = self.dropped();
        if dropped > 0 {
            tracing::warn!(
                "sink {}: {dropped} records dropped because its buffer was full \
                 (--sink-when-full drop-newest; raise --sink-buffer or use block)",
                self.name
            );
        }
        result
    }
}

impl Drop for Buffered {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_operators::OriginStats;
    use causeway_sources::OriginId;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Collects records, slowly.
    struct Slow {
        got: Arc<Mutex<Vec<u64>>>,
        pause: Duration,
        finished: Arc<Mutex<bool>>,
        fail_after: Option<usize>,
    }

    impl Sink for Slow {
        fn write(&mut self, record: &Record) -> Result<(), SinkError> {
            std::thread::sleep(self.pause);
            let mut got = self.got.lock().unwrap();
            if self.fail_after == Some(got.len()) {
                return Err(SinkError::Encode("boom".into()));
            }
            if let Record::Stats(s) = record {
                got.push(s.stats.records);
            }
            Ok(())
        }
        fn finish(&mut self) -> Result<(), SinkError> {
            *self.finished.lock().unwrap() = true;
            Ok(())
        }
    }

    fn record(n: u64) -> Record {
        Record::Stats(OriginStats {
            origin: OriginId(0),
            stats: causeway_sources::SourceStats {
                records: n,
                ..Default::default()
            },
            last: false,
        })
    }

    type Shared<T> = Arc<Mutex<T>>;

    fn slow(
        pause_ms: u64,
        fail_after: Option<usize>,
    ) -> (Box<Slow>, Shared<Vec<u64>>, Shared<bool>) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let finished = Arc::new(Mutex::new(false));
        (
            Box::new(Slow {
                got: Arc::clone(&got),
                pause: Duration::from_millis(pause_ms),
                finished: Arc::clone(&finished),
                fail_after,
            }),
            got,
            finished,
        )
    }

    #[test]
    fn block_keeps_everything_in_order() {
        let (sink, got, finished) = slow(1, None);
        let mut b = Buffered::new("slow", sink, 4, WhenFull::Block).unwrap();
        for n in 0..50 {
            b.write(&record(n)).unwrap();
            b.progress(Some(n)).unwrap();
        }
        b.finish().unwrap();
        assert_eq!(*got.lock().unwrap(), (0..50).collect::<Vec<_>>());
        assert!(*finished.lock().unwrap());
        assert_eq!(b.dropped(), 0);
    }

    #[test]
    fn drop_newest_counts_what_it_drops() {
        let (sink, got, _) = slow(20, None);
        let mut b = Buffered::new("slow", sink, 2, WhenFull::DropNewest).unwrap();
        for n in 0..20 {
            b.write(&record(n)).unwrap();
        }
        b.finish().unwrap();
        let got = got.lock().unwrap();
        assert!(got.len() < 20 && !got.is_empty(), "{got:?}");
        assert_eq!(got.len() as u64 + b.dropped(), 20);
        // The oldest are kept, in order.
        assert!(got.windows(2).all(|w| w[0] < w[1]) && got[0] == 0);
    }

    #[test]
    fn the_sinks_error_comes_back() {
        let (sink, _, _) = slow(0, Some(3));
        let mut b = Buffered::new("bad", sink, 1, WhenFull::Block).unwrap();
        let mut result = Ok(());
        for n in 0..100 {
            result = b.write(&record(n));
            if result.is_err() {
                break;
            }
        }
        let e = result.err().or_else(|| b.finish().err()).unwrap();
        assert!(e.to_string().contains("boom"), "{e}");
    }
}
