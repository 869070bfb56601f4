//! The `stats` operator: per-origin totals from the sources' count deltas.
//!
//! - **Input**: [`SourceEvent`]s (count deltas and warnings) from every source.
//! - **Output**: an [`OriginStats`] per origin: at the end of the input (`last: true`), and,
//!   with `every_ns`, each time the frontier has advanced that much event time since the last
//!   report.
//! - **Exchange**: everything to worker 0, which prints each warning to stderr (one line,
//!   naming the file and offset) as it arrives.
//! - **State**: one [`SourceStats`] per origin: bounded by the number of inputs.
//! - **Cost**: one merge per delta.
//!
//! ```
//! use causeway_operators::CollectStats;
//! use causeway_sources::{OriginId, SourceEvent, SourceStats};
//! use timely::dataflow::operators::capture::Extract;
//! use timely::dataflow::operators::{Capture, ToStream};
//!
//! let delta = |records| SourceEvent::Stats { origin: OriginId(1), stats: Box::new(SourceStats { records, ..Default::default() }) };
//! let captured = timely::example(move |scope| {
//!     vec![delta(2), delta(3)].to_stream(scope).container::<Vec<_>>().collect_stats(None).capture()
//! });
//! let totals: Vec<_> = captured.extract().into_iter().flat_map(|(_, s)| s).collect();
//! assert_eq!((totals[0].stats.records, totals[0].last), (5, true));
//! ```

use std::collections::BTreeMap;

use causeway_sources::{OriginId, SourceEvent, SourceStats, Time};
use serde::{Deserialize, Serialize};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

/// Totals of one origin so far.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OriginStats {
    /// Whose.
    pub origin: OriginId,
    /// The totals.
    pub stats: SourceStats,
    /// Whether this is the final report (the input has ended).
    pub last: bool,
}

/// Extension trait: per-origin totals of a source event stream.
pub trait CollectStats<'scope> {
    /// Totals per origin; see the module documentation.
    fn collect_stats(self, every_ns: Option<Time>) -> Stream<'scope, Time, Vec<OriginStats>>;
}

impl<'scope> CollectStats<'scope> for Stream<'scope, Time, Vec<SourceEvent>> {
    fn collect_stats(self, every_ns: Option<Time>) -> Stream<'scope, Time, Vec<OriginStats>> {
        self.unary_frontier(
            Exchange::new(|_: &SourceEvent| 0),
            "stats",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut totals: BTreeMap<OriginId, SourceStats> = BTreeMap::new();
                let mut last_report: Option<Time> = None;
                move |(input, frontier), output| {
                    input.for_each_stamp(|_cap, data| {
                        for events in data {
                            for event in events.drain(..) {
                                match event {
                                    SourceEvent::Stats { origin, stats } => {
                                        totals.entry(origin).or_default().merge(&stats)
                                    }
                                    SourceEvent::Warning(w) => tracing::warn!("{w}"),
                                }
                            }
                        }
                    });
                    let Some(cap) = held.as_mut() else { return };
                    match frontier.frontier().iter().next().copied() {
                        Some(now) => {
                            if let Some(every) = every_ns {
                                let due =
                                    last_report.is_none_or(|t| now >= t.saturating_add(every));
                                if due && !totals.is_empty() && now > *cap.time() {
                                    cap.downgrade(&now);
                                    let mut session = output.session(&*cap);
                                    for (origin, stats) in &totals {
                                        session.give(OriginStats {
                                            origin: *origin,
                                            stats: stats.clone(),
                                            last: false,
                                        });
                                    }
                                    last_report = Some(now);
                                }
                            }
                            if now > *cap.time() {
                                cap.downgrade(&now);
                            }
                        }
                        None => {
                            let mut session = output.session(&*cap);
                            for (origin, stats) in std::mem::take(&mut totals) {
                                session.give(OriginStats {
                                    origin,
                                    stats,
                                    last: true,
                                });
                            }
                            drop(session);
                            held = None;
                        }
                    }
                }
            },
        )
    }
}
