//! The `deliver` operator: hands records to the sinks.
//!
//! - **Input**: [`Record`]s from every stage.
//! - **Exchange**: everything to worker 0, which owns the sinks: output order and files are
//!   then single-writer, and the table sees every record.
//! - **Effect**: [`Sink::write`] per record, [`Sink::progress`] when the frontier advances,
//!   [`Sink::finish`] once when it empties. A sink that fails stops receiving records; its
//!   error is kept in the [`SinkSet`] for the caller to report.
//! - **State**: none besides the sinks' own.

use std::sync::{Arc, Mutex};

use causeway_sources::Time;
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use crate::{Record, Sink, SinkError};

type Sinks = Vec<Box<dyn Sink>>;

/// The sinks of a run, built before the dataflow starts and handed to worker 0; the first
/// error any of them hit is kept for the caller.
#[derive(Clone, Default)]
pub struct SinkSet {
    sinks: Arc<Mutex<Option<Sinks>>>,
    error: Arc<Mutex<Option<SinkError>>>,
}

impl SinkSet {
    /// A set holding `sinks`.
    pub fn new(sinks: Vec<Box<dyn Sink>>) -> Self {
        SinkSet {
            sinks: Arc::new(Mutex::new(Some(sinks))),
            error: Arc::default(),
        }
    }

    fn take(&self) -> Vec<Box<dyn Sink>> {
        self.sinks
            .lock()
            .ok()
            .and_then(|mut s| s.take())
            .unwrap_or_default()
    }

    fn fail(&self, e: SinkError) {
        if let Ok(mut slot) = self.error.lock() {
            slot.get_or_insert(e);
        }
    }

    /// The first error a sink hit, if any.
    pub fn error(&self) -> Option<SinkError> {
        self.error.lock().ok().and_then(|mut e| e.take())
    }
}

/// Extension trait: deliver a record stream to the sinks.
pub trait Deliver {
    /// Delivers every record to every sink of `sinks`; see the module documentation.
    fn deliver(self, sinks: SinkSet);
}

impl Deliver for Stream<'_, Time, Vec<Record>> {
    fn deliver(self, set: SinkSet) {
        let worker = self.scope().index();
        let mut sinks: Option<Vec<(Box<dyn Sink>, bool)>> = None;
        let mut last: Option<Option<Time>> = None;
        self.sink(
            Exchange::new(|_: &Record| 0),
            "deliver",
            move |(input, frontier)| {
                if sinks.is_none() && worker == 0 {
                    sinks = Some(set.take().into_iter().map(|s| (s, true)).collect());
                }
                let Some(sinks) = sinks.as_mut() else {
                    input.for_each(|_, _| {});
                    return;
                };
                // In arrival order (`for_each_stamp` may reorder containers of one time).
                input.for_each(|_cap, records| {
                    for record in records.iter() {
                        for (sink, ok) in sinks.iter_mut().filter(|(_, ok)| *ok) {
                            if let Err(e) = sink.write(record) {
                                *ok = false;
                                set.fail(e);
                            }
                        }
                    }
                    records.clear();
                });
                let now = frontier.frontier().iter().next().copied();
                if last == Some(now) {
                    return;
                }
                last = Some(now);
                for (sink, ok) in sinks.iter_mut().filter(|(_, ok)| *ok) {
                    let result = match now {
                        Some(t) => sink.progress(Some(t)),
                        None => sink.finish(),
                    };
                    let failed = match result {
                        Ok(()) => false,
                        Err(e) => {
                            set.fail(e);
                            true
                        }
                    };
                    if failed || now.is_none() {
                        *ok = false;
                    }
                }
            },
        );
    }
}
