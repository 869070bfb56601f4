//! The warm start (a first pass that learns before linking) and the per-worker pipeline that
//! orders, links and releases messages. State: the warm-up buffer, freed when the warm start
//! ends; the reorder buffer, freed as the frontier passes.

use super::*;

/// A warm start (beyond WAP5): the inputs are held until the frontier has passed the first
/// [`LinkConfig::warmup_ns`] of event time; those of the warm-up are then linked once, to
/// learn from (the output dropped), and everything held is linked afresh with what was
/// learned ([`Linker::relearned`]). Decisions early in a run are then made with densities
/// that have seen a warm-up's worth of messages, not none (WAP5's exponential, which
/// prefers the most recent candidate, stands in until a type has seen
/// [`MATCH_SAMPLES`]; a type's learned density settles only after some thousands).
///
/// Which inputs the warm-up holds depends neither on timing nor on the number of workers:
/// it ends once the frontier is past the earliest message's event time (on any worker: each
/// worker tells every other the earliest it has seen, [`LinkInput::Start`]) plus the warm-up,
/// plus `link`'s own lateness and slack, when every input before that is in; only
/// [`LinkConfig::warmup_max`] held inputs end it sooner. Memory: the inputs up to then (as
/// the reorder buffers would hold them), and for the first pass a copy of those of the
/// warm-up, freed with it.
#[derive(Default)]
pub(super) struct WarmStart {
    pub(super) inputs: Vec<LinkInput>,
    /// The earliest event time of any message, as far as it is known.
    pub(super) start: Option<Time>,
}

impl WarmStart {
    pub(super) fn hold(&mut self, i: LinkInput) {
        let t = i.event_ns();
        self.start = Some(self.start.map_or(t, |s| s.min(t)));
        if !matches!(i, LinkInput::Start(..)) {
            self.inputs.push(i);
        }
    }

    /// The frontier past which every input of the warm-up, and every input the first pass
    /// could take in, is in.
    pub(super) fn end(&self, config: LinkConfig) -> Option<Time> {
        self.start.map(|s| {
            s.saturating_add(config.warmup_ns)
                .saturating_add(config.lateness_ns)
                .saturating_add(config.order_slack_ns)
        })
    }

    /// Whether the warm-up is over: the frontier `now` has passed its [`Self::end`], or the
    /// input has ended, or it holds [`LinkConfig::warmup_max`] inputs.
    pub(super) fn over(&self, now: Option<Time>, config: LinkConfig) -> bool {
        let passed = match (now, self.end(config)) {
            (None, _) => true,
            (Some(n), Some(end)) => n >= end,
            (Some(_), None) => false,
        };
        let full = self.inputs.len() >= config.warmup_max;
        // Under memory pressure the inputs held are the first to go.
        let cut = !passed && !full && shed::active();
        if cut {
            shed::note(shed::Stage::Warmup, self.inputs.len() as u64);
        }
        passed || full || cut
    }

    /// Links the warm-up to learn from it, and returns a pipeline that holds every input
    /// again, to be linked with what was learned.
    pub(super) fn finish(self, config: LinkConfig) -> Pipeline {
        let mut first = Pipeline::new(Linker::new(config));
        if let Some(end) = self.end(config) {
            // With the frontier at `end`, the first pass takes in what comes before `end`
            // less `link`'s lateness (arrivals and sends; children up to `slack` before).
            let reach = end.saturating_sub(config.lateness_ns);
            for i in self.inputs.iter().filter(|i| i.event_ns() < reach) {
                first.push(i.clone());
            }
            // It links the warm-up's children alone, however short the slack it learns.
            first.until = Some(reach.saturating_sub(config.order_slack_ns));
            let mut dropped = Vec::new();
            first.run(Some(end), &mut dropped, &mut Vec::clear);
        }
        let mut pipeline = Pipeline::new(first.linker.relearned());
        for i in self.inputs {
            pipeline.push(i);
        }
        pipeline
    }
}

/// Linked messages [`Pipeline::run`] gathers before it hands them on.
const EMIT_BATCH: usize = 4_096;

/// The linker with its inputs waiting in event-time order and its open match windows.
pub(super) struct Pipeline {
    pub(super) linker: Linker,
    pub(super) windows: MatchWindows,
    pub(super) children: Reorder<Box<Message>>,
    pub(super) arrivals: Reorder<Box<Arrival>>,
    /// The sends themselves, known as early as the arrivals: (node, connection, send time,
    /// event time).
    pub(super) departures: Reorder<(u64, u64, Time, Time, Option<u64>)>,
    /// Children from this time on are not linked (a warm start's first pass).
    pub(super) until: Option<Time>,
}

impl Pipeline {
    pub(super) fn new(linker: Linker) -> Self {
        Pipeline {
            linker,
            windows: MatchWindows::default(),
            children: Reorder::default(),
            arrivals: Reorder::default(),
            departures: Reorder::default(),
            until: None,
        }
    }

    pub(super) fn push(&mut self, i: LinkInput) {
        match i {
            LinkInput::Child(from, id, m) => {
                if let Some(s) = m.send_ns {
                    let conn = end_key(&m.src_endpoint, &m.dst_endpoint);
                    self.departures
                        .push(m.event_ns, id, (from, conn, s, m.event_ns, m.bytes));
                }
                self.children.push(m.event_ns, id, m);
            }
            LinkInput::Arrival(a) => self.arrivals.push(a.event_ns, a.id, a),
            LinkInput::Start(..) => {}
        }
    }

    /// The time below which everything is linked, with the frontier at `now`.
    pub(super) fn bound(&self, now: Option<Time>) -> Option<Time> {
        let lag = shed::capped(self.linker.config.lateness_ns);
        let slack = shed::capped(self.linker.lookahead.slack_ns());
        let bound = now
            .map(|n| n.saturating_sub(lag.saturating_add(slack)))
            .map(|b| self.until.map_or(b, |u| b.min(u)));
        // Sends waiting in a match window are linked at or after its start.
        match (bound, self.windows.first_start()) {
            (Some(b), Some(w)) => Some(b.min(w)),
            (b, w) => b.or(w),
        }
    }

    /// Links what the frontier at `now` lets through, into `linked`, handing it to `emit`
    /// whenever it holds [`EMIT_BATCH`] (an activation after a long read-ahead links
    /// hundreds of thousands of messages: at 200 requests in flight one buffer of them grew
    /// to 88 MB); returns [`Self::bound`].
    pub(super) fn run(
        &mut self,
        now: Option<Time>,
        linked: &mut Vec<Linked>,
        emit: &mut dyn FnMut(&mut Vec<Linked>),
    ) -> Option<Time> {
        let linker = &mut self.linker;
        let windows = &mut self.windows;
        // Children wait the order slack longer than arrivals. Both are taken in one order,
        // an arrival at `t` as if at `t - slack`, so that what a child sees (arrivals, port
        // evidence) does not depend on how the frontier moved. Messages may come up to
        // `lateness_ns` after the frontier has passed their event time (upstream windows): a
        // time counts as passed only that much later, so that what is linked does not depend
        // on timing. The slack is learned ([`LookAhead`]) at points of that order, so it is
        // read afresh for each step.
        // Under memory pressure both wait at most the cap (`shed`).
        let lag = shed::capped(linker.config.lateness_ns);
        let arrivals_bound = now.map(|n| n.saturating_sub(lag));
        let until = self.until;
        loop {
            if linked.len() >= EMIT_BATCH {
                emit(linked);
            }
            let learned = linker.lookahead.slack_ns();
            let slack = shed::capped(learned);
            let bound = now
                .map(|n| n.saturating_sub(lag.saturating_add(slack)))
                .map(|b| until.map_or(b, |u| b.min(u)));
            let unshed =
                now.map(|n| n.saturating_sub(linker.config.lateness_ns.saturating_add(learned)));
            // A match window closes like a child at its end: after the arrivals of up to
            // `slack` past it, before the children from its end on.
            let next_child = self.children.first().map(|(t, _)| t);
            let next_close = windows.next_close();
            let next = match (next_child, next_close) {
                (Some(c), Some(w)) => Some(c.min(w)),
                (c, w) => c.or(w),
            };
            let departure = self
                .departures
                .first()
                .filter(|(t, _)| arrivals_bound.is_none_or(|b| *t < b));
            if let Some((td, _)) = departure {
                if next.is_none_or(|tc| td.saturating_sub(slack) <= tc) {
                    if let Some((_, _, (node, conn, send, event, bytes))) =
                        self.departures.pop_before(arrivals_bound)
                    {
                        linker.depart(node, conn, send, event, bytes);
                    }
                    continue;
                }
            }
            let arrival = self
                .arrivals
                .first()
                .filter(|(t, _)| arrivals_bound.is_none_or(|b| *t < b));
            let child = next.filter(|t| bound.is_none_or(|b| *t < b));
            let take_arrival = match (arrival, child) {
                (Some((ta, _)), Some(tc)) => ta.saturating_sub(slack) <= tc,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_arrival {
                if let Some((_, _, a)) = self.arrivals.pop_touching(arrivals_bound) {
                    linker.insert(a);
                }
            } else if next_close.is_some_and(|w| next_child.is_none_or(|c| w <= c)) {
                if let Some(sends) = windows.close() {
                    linker.flush(sends, linked);
                }
            } else if let Some((t, id, m)) = self.children.pop_touching(bound) {
                if unshed.is_some_and(|u| t >= u) {
                    shed::note(shed::Stage::Link, 1);
                }
                let p = linker.prepare(id, &m);
                let width = linker.config.match_window_ns;
                if width > 0 && !p.root && p.only_from.is_none() {
                    windows.push(p, m, width);
                } else {
                    linked.push(linker.link_now(&p, m));
                }
            }
        }
        let bound = self.bound(now);
        if let Some(b) = bound {
            self.linker.expire(b);
        }
        bound
    }
}
