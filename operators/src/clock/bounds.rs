//! `clock.bounds` and `clock.samples`: delay samples to per-second [`DelayBounds`] per domain
//! pair and host pair. `clock.bounds` keeps the open seconds, freed when the frontier passes a
//! second's end plus the samples' lateness; `clock.samples` keeps no state between batches.

use super::*;

/// The delay sample a message with both timestamps gives (message traces: the sender's and
/// the receiver's clocks are the domains).
pub fn sample_of(m: &Message) -> Option<DelaySample> {
    let (a, b, pair, forward, delay_ns) = sample_parts(m)?;
    Some(DelaySample {
        a: a.clone(),
        b: b.clone(),
        pair,
        forward,
        at: m.event_ns,
        delay_ns,
    })
}

/// [`sample_of`] without copying the domains: the domains (the smaller first), the host pair,
/// whether it went from the smaller host, and `d`.
fn sample_parts(m: &Message) -> Option<(&Domain, &Domain, u64, bool, i64)> {
    use std::hash::BuildHasher;
    let (send, recv) = (m.send_ns?, m.recv_ns?);
    let (sd, rd) = (m.send_domain.as_ref()?, m.recv_domain.as_ref()?);
    if sd == rd {
        return None;
    }
    let forward = m.src <= m.dst;
    let (lo, hi) = if forward {
        (&m.src, &m.dst)
    } else {
        (&m.dst, &m.src)
    };
    let pair = foldhash::fast::FixedState::with_seed(0x7061_6972).hash_one((lo, hi));
    let (a, b, delay_ns) = if sd < rd {
        (sd, rd, recv as i64 - send as i64)
    } else {
        (rd, sd, send as i64 - recv as i64)
    };
    Some((a, b, pair, forward, delay_ns))
}

/// Extension trait: the delay bounds of messages that carry both timestamps.
pub trait MessageBounds<'scope> {
    /// The messages, passed on unchanged (their batches moved, not copied), and the
    /// per-second [`DelayBounds`] of their delay samples ([`sample_of`]), aggregated within
    /// each batch: the `clock` operator absorbs the bounds of one second and pair that come in
    /// several pieces, so this equals `clock.bounds` over the samples, at one record per
    /// second and pair in a batch instead of one per message.
    fn message_bounds(
        self,
    ) -> (
        MessageStream<'scope>,
        Stream<'scope, Time, Vec<DelayBounds>>,
    );
}

impl<'scope> MessageBounds<'scope> for MessageStream<'scope> {
    fn message_bounds(
        self,
    ) -> (
        MessageStream<'scope>,
        Stream<'scope, Time, Vec<DelayBounds>>,
    ) {
        let mut builder = OperatorBuilder::new("clock.samples".to_owned(), self.scope());
        let mut input = builder.new_input(self, Pipeline);
        let (messages_out, messages) = builder.new_output::<Vec<Box<Message>>>();
        let (bounds_out, bounds) = builder.new_output::<Vec<DelayBounds>>();
        let mut messages_out = OutputBuilder::from(messages_out);
        let mut bounds_out = OutputBuilder::from(bounds_out);
        builder.build(move |_capabilities| {
            let mut batch_bounds = BatchBounds::default();
            move |_frontiers| {
                let mut messages_out = messages_out.activate();
                let mut bounds_out = bounds_out.activate();
                input.for_each(|cap, batch| {
                    for m in batch.iter() {
                        batch_bounds.add(m);
                    }
                    let mut bounds = batch_bounds.take();
                    if !bounds.is_empty() {
                        bounds_out.session(&cap).give_container(&mut bounds);
                    }
                    messages_out.session(&cap).give_container(batch);
                });
            }
        });
        (messages, bounds)
    }
}

/// The delay bounds of one batch of messages, per second, domain pair and host pair, found
/// by the hash of those without cloning the domains of every message (only of a new entry).
#[derive(Default)]
pub(super) struct BatchBounds {
    bounds: Vec<DelayBounds>,
    /// Hash of (second, domains, host pair) to the index of its entry in `bounds`.
    index: crate::FastMap<u64, usize>,
}

impl BatchBounds {
    /// Adds the sample of `m`, if it gives one (as [`sample_of`]).
    pub(super) fn add(&mut self, m: &Message) {
        use std::hash::BuildHasher;
        let Some((a, b, pair, forward, delay_ns)) = sample_parts(m) else {
            return;
        };
        let bucket = m.event_ns / BUCKET_NS;
        let is = |e: &DelayBounds| e.bucket == bucket && e.pair == pair && e.a == *a && e.b == *b;
        let hash =
            foldhash::fast::FixedState::with_seed(0x626f_756e).hash_one((bucket, a, b, pair));
        let i = match self.index.get(&hash) {
            Some(&i) if is(&self.bounds[i]) => i,
            other => {
                // A new entry, or (rarely) one whose hash another entry has: found by a scan.
                let held = other.and_then(|_| self.bounds.iter().position(is));
                let i = held.unwrap_or_else(|| {
                    let new = DelayBounds::empty(a.clone(), b.clone(), pair, bucket);
                    self.bounds.push(new);
                    self.bounds.len() - 1
                });
                self.index.entry(hash).or_insert(i);
                i
            }
        };
        self.bounds[i].record(forward, delay_ns);
    }

    /// The bounds gathered since the last call, in (domains, host pair, second) order.
    pub(super) fn take(&mut self) -> Vec<DelayBounds> {
        self.index.clear();
        let mut bounds = std::mem::take(&mut self.bounds);
        bounds.sort_by(|x, y| (&x.a, &x.b, x.pair, x.bucket).cmp(&(&y.a, &y.b, y.pair, y.bucket)));
        bounds
    }
}

/// Extension trait: per-second delay bounds of a sample stream.
pub trait Bounds<'scope> {
    /// Aggregates samples per second on each worker, closing a second once the frontier is
    /// `lateness_ns` past its end; see the module documentation.
    fn delay_bounds(self, lateness_ns: Time) -> Stream<'scope, Time, Vec<DelayBounds>>;
}

impl<'scope> Bounds<'scope> for Stream<'scope, Time, Vec<DelaySample>> {
    fn delay_bounds(self, lateness_ns: Time) -> Stream<'scope, Time, Vec<DelayBounds>> {
        self.unary_frontier(Pipeline, "clock.bounds", |cap, _info| {
            let mut held = Some(cap);
            // By second, then by domain pair and host pair.
            let mut open: BTreeMap<Time, crate::FastMap<(Domain, Domain, u64), DelayBounds>> =
                BTreeMap::new();
            move |(input, frontier), output| {
                input.for_each(|_cap, batch| {
                    for s in batch.drain(..) {
                        let bucket = s.at / BUCKET_NS;
                        let second = open.entry(bucket).or_default();
                        let key = (s.a, s.b, s.pair);
                        let e = match second.get_mut(&key) {
                            Some(e) => e,
                            None => second
                                .entry(key.clone())
                                .or_insert(DelayBounds::empty(key.0, key.1, key.2, bucket)),
                        };
                        e.record(s.forward, s.delay_ns);
                    }
                });
                let Some(cap) = held.as_mut() else { return };
                let now = frontier.frontier().iter().next().copied();
                // A second is complete once the frontier has passed its end plus the samples'
                // lateness; emit it at the capability held since before then, so `clock` knows
                // when all have come.
                let mut closed = Vec::new();
                while let Some(entry) = open.first_entry() {
                    let end = (entry.key() + 1) * BUCKET_NS;
                    // Under memory pressure, at most the cap (`shed`).
                    if now.is_some_and(|n| end.saturating_add(shed::capped(lateness_ns)) > n) {
                        break;
                    }
                    let mut second: Vec<DelayBounds> = entry.remove().into_values().collect();
                    second.sort_by(|x, y| (&x.a, &x.b, x.pair).cmp(&(&y.a, &y.b, y.pair)));
                    closed.extend(second);
                }
                if !closed.is_empty() {
                    output.session(&*cap).give_iterator(closed.into_iter());
                }
                match now {
                    Some(t) if t > *cap.time() => cap.downgrade(&t),
                    Some(_) => {}
                    None => held = None,
                }
            }
        })
    }
}
