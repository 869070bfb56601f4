//! How long a message may still get a child: learned per receiving node from the delays of
//! the children it has had, so that `paths` finishes a tree as soon as its causes can no
//! longer change rather than after the fixed maximum (`--max-delay`, WAP5's `x`).
//!
//! - **Input**: every linked message as `paths` takes it in (event-time order): its
//!   receiver, and for each probable parent link, the delay from the parent's event time to
//!   the child's, counted against the parent's receiver.
//! - **Answer**: for a message into node `n`, the wait after its event time beyond which a
//!   child is improbable: twice the 99.9th percentile of `n`'s children's delays once it has
//!   had [`ChildWaits::MIN_CHILDREN`]; a few [`ChildWaits::FLOOR_NS`] when `n` has taken in
//!   [`ChildWaits::MIN_CHILDLESS`] messages and none had a child (a client receiving its
//!   answers), or when `n` never had a child and the nodes that never had one rarely get a
//!   first: fewer than one per [`ChildWaits::MIN_CHILDLESS`] of the messages they took in
//!   (a busy system's many clients, each seen too rarely to be judged on its own, judged
//!   together); the fixed maximum otherwise (too little evidence). Always at most the
//!   maximum.
//! - **State**: per receiving node, a histogram of delays in quarter-octave buckets, two
//!   counts and whether it ever had a child; halved every [`ChildWaits::HALF_LIFE`]
//!   observations of the node, so the waits follow a system whose delays change over a long
//!   run. Nodes are as many as the system has: bounded by its size, not by the input. For
//!   the nodes that never had a child, two counts together (messages taken in, first
//!   children), halved every [`ChildWaits::HALF_LIFE`] messages.
//! - **Cost**: per observation a bucket increment; the quantile is recomputed (128 buckets)
//!   at most once every 64 observations of a node, so a lookup is a map probe.

use crate::FastMap;
use causeway_sources::Time;

/// Buckets per octave of delay.
const PER_OCTAVE: f64 = 4.0;
/// Buckets: from 1 µs up to 2^32 µs (over an hour).
const BUCKETS: usize = 128;
/// The smallest delay a bucket tells apart, ns.
const UNIT_NS: f64 = 1_000.0;

/// One receiving node's children's delays.
#[derive(Debug, Clone)]
struct NodeDelays {
    buckets: [u32; BUCKETS],
    /// Messages the node received (halved with the rest).
    arrivals: u32,
    /// Children counted (the buckets' sum).
    children: u32,
    /// Observations since the wait was last worked out.
    stale: u32,
    /// The wait as last worked out (`None`: too little evidence).
    wait: Option<Time>,
    /// Whether the node ever had a child (not halved).
    parent: bool,
}

impl Default for NodeDelays {
    fn default() -> Self {
        NodeDelays {
            buckets: [0; BUCKETS],
            arrivals: 0,
            children: 0,
            stale: 0,
            wait: None,
            parent: false,
        }
    }
}

fn bucket(delay_ns: Time) -> usize {
    let d = (delay_ns as f64 / UNIT_NS).max(1.0);
    ((d.log2() * PER_OCTAVE) as usize).min(BUCKETS - 1)
}

/// The upper end of bucket `i`, ns.
fn bucket_end(i: usize) -> Time {
    (UNIT_NS * ((i + 1) as f64 / PER_OCTAVE).exp2()) as Time
}

impl NodeDelays {
    fn halve(&mut self) {
        for b in &mut self.buckets {
            *b /= 2;
        }
        self.children = self.buckets.iter().sum();
        self.arrivals /= 2;
    }

    fn refresh(&mut self) {
        self.stale = 0;
        self.wait = if self.children >= ChildWaits::MIN_CHILDREN {
            // Twice the 99.9th percentile: the bucket holding it, by its upper end.
            let rank = (f64::from(self.children) * 0.999).ceil() as u32;
            let mut seen = 0;
            let i = self
                .buckets
                .iter()
                .position(|&b| {
                    seen += b;
                    seen >= rank
                })
                .unwrap_or(BUCKETS - 1);
            Some(bucket_end(i).saturating_mul(2).max(ChildWaits::FLOOR_NS))
        } else if self.children == 0 && self.arrivals >= ChildWaits::MIN_CHILDLESS {
            Some(ChildWaits::FLOOR_NS)
        } else {
            None
        };
    }
}

/// The learned waits of every receiving node (see the module's documentation).
#[derive(Debug, Default)]
pub struct ChildWaits {
    nodes: FastMap<u64, NodeDelays>,
    /// Messages taken in by nodes that had never had a child when they came.
    childless_arrivals: u32,
    /// Nodes' first children (both halved together).
    first_children: u32,
}

impl ChildWaits {
    /// Children a node must have had before its wait is learned from them.
    pub const MIN_CHILDREN: u32 = 64;
    /// Messages a node must have received, none with a child, before it is taken to have
    /// none.
    pub const MIN_CHILDLESS: u32 = 1_024;
    /// The shortest wait learned, ns.
    pub const FLOOR_NS: Time = 1_000_000;
    /// Observations of a node after which its counts are halved.
    pub const HALF_LIFE: u32 = 1 << 16;

    /// A message into `node` was taken in.
    pub fn arrival(&mut self, node: u64) {
        let d = self.nodes.entry(node).or_default();
        if !d.parent {
            self.childless_arrivals += 1;
            if self.childless_arrivals >= Self::HALF_LIFE {
                self.childless_arrivals /= 2;
                self.first_children /= 2;
            }
        }
        d.arrivals = d.arrivals.saturating_add(1);
        d.stale += 1;
        if d.arrivals >= Self::HALF_LIFE {
            d.halve();
        }
        if d.stale >= 64 {
            d.refresh();
        }
    }

    /// A message into `node` had a child `delay_ns` after it.
    pub fn child(&mut self, node: u64, delay_ns: Time) {
        let d = self.nodes.entry(node).or_default();
        if !d.parent {
            d.parent = true;
            self.first_children += 1;
        }
        d.buckets[bucket(delay_ns)] += 1;
        d.children += 1;
        d.stale += 1;
        if d.children >= Self::HALF_LIFE {
            d.halve();
        }
        if d.stale >= 64 || (d.wait.is_some() && d.children == 1) {
            d.refresh();
        }
    }

    /// Whether the nodes that never had a child rarely get a first one: fewer than one per
    /// [`ChildWaits::MIN_CHILDLESS`] messages they took in (one first child counted more
    /// than seen, so that none seen still needs that many messages).
    fn childless_stay_so(&self) -> bool {
        u64::from(self.childless_arrivals)
            >= (u64::from(self.first_children) + 1) * u64::from(Self::MIN_CHILDLESS)
    }

    /// `d`'s wait as learned: its own, or for a node that never had a child, what the nodes
    /// without children say together.
    fn learned(&self, d: &NodeDelays) -> Option<Time> {
        d.wait
            .or_else(|| (!d.parent && self.childless_stay_so()).then_some(Self::FLOOR_NS))
    }

    /// The longest [`ChildWaits::wait`] of any node seen, at most `max_ns` (`max_ns` while
    /// any node has too little evidence, or none was seen).
    pub fn longest(&self, max_ns: Time) -> Time {
        self.nodes
            .values()
            .map(|d| self.learned(d).map_or(max_ns, |w| w.min(max_ns)))
            .max()
            .unwrap_or(max_ns)
    }

    /// Whether `node`'s wait is learned (else [`ChildWaits::wait`] is the maximum).
    pub fn knows(&self, node: u64) -> bool {
        self.nodes
            .get(&node)
            .is_some_and(|d| self.learned(d).is_some())
    }

    /// How long after its event time a message must be kept for a late child to still find
    /// it: twice the longest wait ([`ChildWaits::longest`]), at most `max_ns`. Twice, so that
    /// a child later than any wait learned so far is still seen and counted, and a wait can
    /// grow to twice itself at a time.
    pub fn keep(&self, max_ns: Time) -> Time {
        self.longest(max_ns).saturating_mul(2).min(max_ns)
    }

    /// How long after its event time a message into `node` may still get a child, at most
    /// `max_ns`.
    pub fn wait(&self, node: u64, max_ns: Time) -> Time {
        self.nodes
            .get(&node)
            .and_then(|d| self.learned(d))
            .map_or(max_ns, |w| w.min(max_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Time = 2_000_000_000;

    #[test]
    fn the_longest_wait_is_the_maximum_while_any_node_lacks_evidence() {
        let mut w = ChildWaits::default();
        assert_eq!(w.longest(MAX), MAX);
        for _ in 0..100 {
            w.child(1, 1_000_000);
        }
        let one = w.wait(1, MAX);
        assert!(one < MAX);
        assert_eq!(w.longest(MAX), one);
        w.child(2, 5_000_000);
        assert_eq!(w.longest(MAX), MAX);
        for _ in 0..100 {
            w.child(2, 5_000_000);
        }
        assert_eq!(w.longest(MAX), w.wait(2, MAX));
        assert!(w.longest(MAX) > one);
    }

    #[test]
    fn clients_too_rare_to_judge_alone_are_judged_together() {
        // A server whose children come within 1 ms, and 700 client nodes that each receive
        // 4 answers and send nothing caused: none has the evidence on its own.
        let mut w = ChildWaits::default();
        for _ in 0..200 {
            w.arrival(1);
            w.child(1, 1_000_000);
        }
        for c in 0..700 {
            for _ in 0..4 {
                w.arrival(100 + c);
            }
        }
        assert!(w.knows(100));
        assert_eq!(w.wait(100, MAX), ChildWaits::FLOOR_NS);
        assert!(w.keep(MAX) <= 8_000_000, "{}", w.keep(MAX));
        // A node that had a child keeps waiting the maximum until its own children say
        // otherwise, however childless the others are.
        w.arrival(7);
        w.child(7, 3_000_000);
        assert_eq!(w.wait(7, MAX), MAX);
        assert_eq!(w.keep(MAX), MAX);
    }

    #[test]
    fn nodes_that_get_first_children_often_keep_the_rest_waiting() {
        // 400 messages into a producer that never has a child, and four workers each
        // getting a child from its first message (a job queue): one first child per 80
        // childless messages is no evidence that the childless stay so.
        let mut w = ChildWaits::default();
        for i in 0..400 {
            w.arrival(1);
            if i % 100 == 0 {
                let worker = 10 + i / 100;
                w.arrival(worker);
                w.child(worker, 2_000_000);
            }
        }
        assert!(!w.knows(1));
        assert_eq!(w.wait(1, MAX), MAX);
        // Many more childless messages with no new parent: they are.
        for i in 0..5_000 {
            w.arrival(1_000 + i % 700);
        }
        assert_eq!(w.wait(1, MAX), ChildWaits::FLOOR_NS);
    }

    #[test]
    fn too_little_evidence_waits_the_maximum() {
        let mut w = ChildWaits::default();
        for _ in 0..10 {
            w.arrival(1);
            w.child(1, 100_000);
        }
        assert_eq!(w.wait(1, MAX), MAX);
        assert_eq!(w.wait(2, MAX), MAX);
    }

    #[test]
    fn learned_from_the_children_delays() {
        let mut w = ChildWaits::default();
        // Children 100 µs to 5 ms after their parents.
        for i in 0..10_000u64 {
            w.arrival(1);
            w.child(1, 100_000 + (i % 50) * 100_000);
        }
        let wait = w.wait(1, MAX);
        assert!((10_000_000..=12_000_000).contains(&wait), "{wait}");
        // Bounded by the maximum.
        assert_eq!(w.wait(1, 5_000_000), 5_000_000);
    }

    #[test]
    fn a_node_without_children_waits_little_and_a_child_ends_that() {
        let mut w = ChildWaits::default();
        for _ in 0..ChildWaits::MIN_CHILDLESS {
            w.arrival(3);
        }
        assert_eq!(w.wait(3, MAX), ChildWaits::FLOOR_NS);
        w.child(3, 1_500_000_000);
        assert_eq!(w.wait(3, MAX), MAX);
    }

    #[test]
    fn the_wait_follows_delays_that_grow() {
        let mut w = ChildWaits::default();
        for _ in 0..ChildWaits::HALF_LIFE {
            w.arrival(1);
            w.child(1, 1_000_000);
        }
        let short = w.wait(1, MAX);
        for _ in 0..4 * ChildWaits::HALF_LIFE {
            w.arrival(1);
            w.child(1, 100_000_000);
        }
        let long = w.wait(1, MAX);
        assert!(short < 3_000_000 && long >= 200_000_000, "{short} {long}");
    }
}
