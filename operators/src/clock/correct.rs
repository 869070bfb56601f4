//! `clock.correct`: messages with timestamps corrected to the reference clock by the broadcast
//! estimates. State: the messages waiting until the estimates up to their time have arrived,
//! freed as they leave, and five minutes of estimates per domain.

use super::*;
use crate::min_times::MinTimes;

/// How far back `clock.correct` keeps estimates: five minutes of event time.
const HISTORY_NS: Time = 300_000_000_000;

/// Extension trait: correct message timestamps to the reference clock.
pub trait Correct<'scope> {
    /// Corrects messages with the broadcast `estimates`; `alignment` stands in for domains
    /// without an estimate yet; messages seen in the `reference` clock only pass at once.
    /// See the module documentation.
    fn correct(
        self,
        estimates: Stream<'scope, Time, Vec<ClockOffset>>,
        lateness_ns: Time,
        alignment: Arc<Alignment>,
        reference: Option<Domain>,
    ) -> MessageStream<'scope>;
}

/// Whether `m`'s correction cannot depend on estimates: each observed side is in the
/// reference clock (offset 0 in every estimate) or in no domain, and the reference's coarse
/// alignment, which stands in before the first estimate, is 0 too.
fn needs_no_estimate(m: &Message, reference: Option<&Domain>, alignment: &Alignment) -> bool {
    let Some(reference) = reference else {
        return false;
    };
    let zero = match reference {
        Domain::Origin(o) => alignment.offset(*o) == 0,
        // A node's coarse offset is its host's (the side's endpoint).
        Domain::Node(_) => [
            (&m.send_domain, &m.src_endpoint),
            (&m.recv_domain, &m.dst_endpoint),
        ]
        .into_iter()
        .filter(|(d, _)| d.as_ref() == Some(reference))
        .all(|(_, e)| alignment.host_offset(e).unwrap_or(0) == 0),
    };
    let side = |raw: Option<Time>, d: &Option<Domain>| {
        raw.is_none() || d.as_ref().is_none_or(|d| d == reference)
    };
    zero && side(m.send_ns, &m.send_domain) && side(m.recv_ns, &m.recv_domain)
}

/// Each domain's estimates by the second they are for, in order of `at` (they come in that
/// order; a repeated `at`, the final report, replaces the one before).
pub(super) type History = crate::FastMap<Domain, VecDeque<ClockOffset>>;

/// Adds an estimate to its domain's history, replacing one for the same second.
fn remember(history: &mut History, o: ClockOffset) {
    let h = history.entry(o.domain.clone()).or_default();
    let i = partition_point_from_back(h, |e| e.at < o.at);
    match h.get_mut(i) {
        Some(e) if e.at == o.at => *e = o,
        _ => h.insert(i, o),
    }
}

/// How far past a message `clock.correct` looks for an estimate when none precedes it (the
/// first seconds of a domain's evidence); messages wait that long for it.
pub const LOOK_AHEAD_NS: Time = 2 * BUCKET_NS;

/// `raw` in the reference clock, for a message of event time `at`: with the estimate for the
/// last second boundary at or before it, else the first one within [`LOOK_AHEAD_NS`] after
/// it, else the coarse alignment (a sniffer's, or for a traced node the host of `end`, the
/// side's endpoint). Every estimate up to `at + LOOK_AHEAD_NS`, or the domain's first
/// estimate (see [`determined`]), has arrived when this is called, so the answer does not
/// depend on timing.
pub(super) fn corrected(
    raw: Option<Time>,
    domain: &Option<Domain>,
    end: &Address,
    at: Time,
    history: &mut Recent<'_>,
    alignment: &Alignment,
) -> Option<Time> {
    let raw = raw?;
    fn estimate(h: &VecDeque<ClockOffset>, at: Time) -> Option<&ClockOffset> {
        match partition_point_from_back(h, |e| e.at <= at) {
            0 => h
                .front()
                .filter(|e| e.at <= at.saturating_add(LOOK_AHEAD_NS)),
            i => h.get(i - 1),
        }
    }
    let offset = match domain {
        Some(d) => match history.get(d).and_then(|h| estimate(h, at).map(|o| (o, h))) {
            // An estimate known better than every host's alignment is taken without looking
            // its host up (a lookup per timestamp, in the steady state of every trace).
            Some((o, _))
                if alignment
                    .least_host_bound()
                    .is_none_or(|b| o.error_ns <= b as f64) =>
            {
                o.offset_at(at)
            }
            Some((o, h)) => match (d, alignment.host_bound(end)) {
                (Domain::Node(_), Some(bound)) => {
                    let first = h.front().map_or(at, |f| f.at);
                    tighter(o, at, alignment.host_offset(end).unwrap_or(0), bound, first)
                }
                _ => o.offset_at(at),
            },
            None => match d {
                Domain::Origin(o) => alignment.offset(*o) as f64,
                Domain::Node(_) => alignment.host_offset(end).unwrap_or(0) as f64,
            },
        },
        None => 0.0,
    };
    // In integers: an f64 holds epoch nanoseconds only to 256 ns.
    Some(raw.saturating_add_signed(-(offset.round() as i64)))
}

/// A traced host's offset at `at`: estimate `o`'s, or the bootstrap's alignment of the host
/// (`aligned`, with a hard bound `bound` on its error, widened by the largest drift from the
/// domain's first estimate kept, `first`, to the estimate's time) where that bound is the
/// tighter. In a domain's
/// first seconds an estimate may rest on one second's few rows (on a Node.js trace whose
/// first requests queued for 20 ms: 9.5 ms off, within 12.5 ms, where the bootstrap had 0
/// within 3 ms); the estimates take over once they know the clock better. Not a mix of the
/// two: nodes whose clocks the estimates tie together exactly would drift apart.
fn tighter(o: &ClockOffset, at: Time, aligned: i64, bound: u64, first: Time) -> f64 {
    // Decided per estimate (at its time), so that a domain's messages between two estimates
    // are corrected alike.
    let drifted = o.at.abs_diff(first) as f64 * MAX_DRIFT_PPM * 1e-6;
    if (bound as f64 + drifted) < o.error_ns {
        aligned as f64
    } else {
        o.offset_at(at)
    }
}

/// Whether every observed side of `m` that has a clock domain has an estimate, once every
/// estimate up to `m`'s event time is in: then its correction is known. An estimate at or
/// before its time is the one it takes; else the domain's first estimate is after it, and,
/// as each domain's estimates come in time order, it is the first after it that the
/// look-ahead would find. So a message waits for a domain's first estimate, not for the whole
/// look-ahead (2 s: at 600,000 messages per second of event time, over a million messages
/// held while a run starts).
fn determined(m: &Message, history: &mut Recent<'_>) -> bool {
    [(m.send_ns, &m.send_domain), (m.recv_ns, &m.recv_domain)]
        .into_iter()
        .all(|(raw, domain)| match (raw, domain) {
            (Some(_), Some(d)) => history.get(d).is_some_and(|h| !h.is_empty()),
            _ => true,
        })
}

/// [`History`] lookups through a few recent ones, by the domain's name's address (a worker's
/// messages share their nodes' names): no string is hashed for most timestamps.
pub(super) struct Recent<'a> {
    history: &'a History,
    recent: [(usize, Option<&'a VecDeque<ClockOffset>>); 4],
    next: usize,
}

impl<'a> Recent<'a> {
    pub(super) fn new(history: &'a History) -> Self {
        Recent {
            history,
            recent: [(0, None); 4],
            next: 0,
        }
    }

    fn get(&mut self, d: &Domain) -> Option<&'a VecDeque<ClockOffset>> {
        let key = match d {
            Domain::Node(n) => Arc::as_ptr(n).cast::<u8>() as usize,
            Domain::Origin(o) => (o.0 as usize) << 1 | 1,
        };
        if let Some((_, h)) = self.recent.iter().find(|r| r.0 == key) {
            return *h;
        }
        let h = self.history.get(d);
        self.recent[self.next] = (key, h);
        self.next = (self.next + 1) % self.recent.len();
        h
    }
}

impl<'scope> Correct<'scope> for MessageStream<'scope> {
    fn correct(
        self,
        estimates: Stream<'scope, Time, Vec<ClockOffset>>,
        lateness_ns: Time,
        alignment: Arc<Alignment>,
        reference: Option<Domain>,
    ) -> MessageStream<'scope> {
        self.binary_frontier(
            estimates,
            Pipeline,
            Pipeline,
            "clock.correct",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut history: History = History::default();
                // Two waits. First until every estimate for a second boundary at or before
                // its time is in (the clock emits the estimate for a boundary before its
                // frontier passes the boundary plus the samples' lateness): by the time each
                // is due, then in arrival order. A message with an estimate on every
                // observed side is corrected then; one without (a domain's first second)
                // waits in `looking` until its domains' first estimates are in, at most
                // until the look-ahead is.
                let mut waiting: Reorder<Box<Message>> = Reorder::default();
                let mut looking: Reorder<Box<Message>> = Reorder::default();
                let mut arrived: u64 = 0;
                // The capability stays at the smallest event time waiting, so that
                // downstream operators, which order by event time, never get a message whose
                // time their frontier has passed. A message is due `delay` after its event
                // time, so the first due tells the smallest event time, except for messages
                // that came later than that (due when they came): their event times are kept
                // here. In `looking`, a message is due exactly `look` after its time.
                let delay = lateness_ns;
                let look = LOOK_AHEAD_NS.saturating_add(lateness_ns);
                let mut late = MinTimes::default();
                let mut ready: Vec<Box<Message>> = Vec::new();
                move |(messages, frontier), (estimates, est_frontier), output| {
                    messages.for_each(|cap, batch| {
                        let t = cap.least().copied().unwrap_or(0);
                        for m in batch.drain(..) {
                            if needs_no_estimate(&m, reference.as_ref(), &alignment) {
                                ready.push(m);
                                continue;
                            }
                            let on_time = m.event_ns.saturating_add(delay);
                            if t > on_time {
                                late.insert(m.event_ns);
                            }
                            waiting.push(t.max(on_time), arrived, m);
                            arrived += 1;
                        }
                    });
                    // Whether a domain had its first estimate: the messages looking ahead
                    // for it are then determined.
                    let mut first_estimate = false;
                    estimates.for_each(|_cap, batch| {
                        for o in batch.drain(..) {
                            first_estimate |= !history.contains_key(&o.domain);
                            remember(&mut history, o);
                        }
                    });
                    let Some(cap) = held.as_mut() else { return };
                    let est_now = est_frontier.frontier().iter().next().copied();
                    let mut session = output.session(&*cap);
                    // At once: the capability is at most the input frontier those messages
                    // came at, which is at most their event times.
                    for mut m in ready.drain(..) {
                        m.send_corrected_ns = m.send_ns;
                        m.recv_corrected_ns = m.recv_ns;
                        session.give(m);
                    }
                    let mut recent = Recent::new(&history);
                    // Under memory pressure a message waits at most the cap past its time
                    // (`shed`): once the messages' frontier is that far past it, it goes
                    // with the estimates that are in.
                    let msgs_now = frontier.frontier().iter().next().copied();
                    let horizon = |wait: Time| {
                        let shift = wait - shed::capped(wait);
                        match (est_now, msgs_now) {
                            (Some(e), Some(m)) if shift > 0 => Some(e.max(m).saturating_add(shift)),
                            (e, _) => e,
                        }
                    };
                    let (first_horizon, look_horizon) = (horizon(delay), horizon(look));
                    let mut correct = |mut m: Box<Message>, recent: &mut Recent<'_>| {
                        let at = m.event_ns;
                        m.send_corrected_ns = corrected(
                            m.send_ns,
                            &m.send_domain,
                            &m.src_endpoint,
                            at,
                            recent,
                            &alignment,
                        );
                        m.recv_corrected_ns = corrected(
                            m.recv_ns,
                            &m.recv_domain,
                            &m.dst_endpoint,
                            at,
                            recent,
                            &alignment,
                        );
                        session.give(m);
                    };
                    while let Some((due, _, m)) = waiting.pop_touching(first_horizon) {
                        if est_now.is_some_and(|e| due >= e) {
                            shed::note(shed::Stage::Clock, 1);
                        }
                        let at = m.event_ns;
                        if due > at.saturating_add(delay) {
                            late.remove(at);
                        }
                        let due_looking = at.saturating_add(look);
                        if determined(&m, &mut recent)
                            || look_horizon.is_none_or(|h| due_looking < h)
                        {
                            correct(m, &mut recent);
                        } else {
                            looking.push(due_looking, arrived, m);
                            arrived += 1;
                        }
                    }
                    if first_estimate && !looking.is_empty() {
                        let mut still = Reorder::default();
                        while let Some((due, id, m)) = looking.pop_before(None) {
                            if determined(&m, &mut recent) {
                                correct(m, &mut recent);
                            } else {
                                still.push(due, id, m);
                            }
                        }
                        looking = still;
                    }
                    while let Some((due, _, m)) = looking.pop_touching(look_horizon) {
                        if est_now.is_some_and(|e| due >= e) {
                            shed::note(shed::Stage::Clock, 1);
                        }
                        correct(m, &mut recent);
                    }
                    drop(session);
                    // Messages reach this operator within the reconcile and nat windows of their
                    // event time: estimates more than `HISTORY_NS` older than the estimate frontier
                    // are no longer needed (the oldest kept one stands in, should one be).
                    if let Some(e) = est_now {
                        let oldest = e.saturating_sub(HISTORY_NS);
                        for h in history.values_mut() {
                            while h.len() > 1 && h.front().is_some_and(|o| o.at < oldest) {
                                h.pop_front();
                            }
                        }
                    }
                    let both = [frontier.frontier().iter().next().copied(), est_now];
                    let first = waiting.first().map(|(due, _)| due.saturating_sub(delay));
                    let first_looking = looking.first().map(|(due, _)| due.saturating_sub(look));
                    let waiting_min = [first, late.min(), first_looking]
                        .into_iter()
                        .flatten()
                        .min();
                    let lowest = match (both[0], waiting_min) {
                        (Some(f), Some(w)) => Some(f.min(w)),
                        (f, w) => f.or(w),
                    };
                    let idle = waiting.is_empty() && looking.is_empty();
                    match lowest.or(if idle { None } else { both[1] }) {
                        Some(t) if t > *cap.time() => cap.downgrade(&t),
                        Some(_) => {}
                        None if idle && both.iter().all(Option::is_none) => held = None,
                        None => {}
                    }
                }
            },
        )
    }
}
