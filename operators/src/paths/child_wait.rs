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
//!   answers); the fixed maximum otherwise (too little evidence). Always at most the maximum.
//! - **State**: per receiving node, a histogram of delays in quarter-octave buckets and two
//!   counts; halved every [`ChildWaits::HALF_LIFE`] observations of the node, so the waits
//!   follow a system whose delays change over a long run. Nodes are as many as the system
//!   has: bounded by its size, not by the input.
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
}

impl Default for NodeDelays {
    fn default() -> Self {
        NodeDelays {
            buckets: [0; BUCKETS],
            arrivals: 0,
            children: 0,
            stale: 0,
            wait: None,
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

    /// The longest [`ChildWaits::wait`] of any node seen, at most `max_ns` (`max_ns` while
    /// any node has too little evidence, or none was seen).
    pub fn longest(&self, max_ns: Time) -> Time {
        self.nodes
            .values()
            .map(|d| d.wait.map_or(max_ns, |w| w.min(max_ns)))
            .max()
            .unwrap_or(max_ns)
    }

    /// Whether `node`'s wait is learned (else [`ChildWaits::wait`] is the maximum).
    pub fn knows(&self, node: u64) -> bool {
        self.nodes.get(&node).is_some_and(|d| d.wait.is_some())
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
            .and_then(|d| d.wait)
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
    fn clients_counted_as_one_node_let_messages_go_long_before_the_maximum() {
        // A server whose children come within 1 ms, and 500 client endpoints that each
        // receive 4 answers and send nothing caused.
        let learn = |client: &dyn Fn(u64) -> u64| {
            let mut w = ChildWaits::default();
            for _ in 0..200 {
                w.arrival(1);
                w.child(1, 1_000_000);
            }
            for c in 0..500 {
                for _ in 0..4 {
                    w.arrival(client(c));
                }
            }
            w.keep(MAX)
        };
        // Each endpoint on its own never has the evidence: messages are kept the maximum.
        assert_eq!(learn(&|c| 100 + c), MAX);
        // One key for every client: kept twice the server's wait.
        let kept = learn(&|_| 100);
        assert!(kept <= 8_000_000, "{kept}");
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
