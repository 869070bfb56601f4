//! Coarse clock alignment of message traces: one offset per host, from the rows' own two
//! timestamps.
//!
//! A message-trace row has its send time in the sender's clock and its receive time in the
//! receiver's, so each row with both gives `d = recv - send = Δ + latency`, where `Δ` is the
//! receiver's clock minus the sender's. The smallest `d` each way of a pair of hosts bounds
//! `Δ` on both sides (latencies are at least zero): `-min d(b→a) ≤ Δ(b - a) ≤ min d(a→b)`.
//! The pair's offset is the middle of that interval, good to about a network latency; when 0
//! lies inside it (clocks that agree to within the latency) it is 0, so a trace whose clocks
//! agree is read exactly as without alignment. The hosts are then placed relative to the
//! reference host along a spanning tree of those pairs, narrowest interval first (Prim), and
//! the error bound of a host is the sum of the half-widths on its path. A host that only
//! sends to or only receives from placed hosts (one way) gets a bound on one side only; its
//! offset is the bound less the median smallest one-way latency of the pairs seen both ways
//! (0 when there are none), marked as such and without an error bound. Hosts that no
//! timestamped row connects to the reference, even through other hosts, cannot be placed
//! against it: each such group is placed the same way relative to a host of its own (the
//! first the caller prefers), so that its rows still agree with each other. A host in no
//! timestamped row at all gets no offset (its clock is taken as the reference's). The
//! `clock` operator estimates precise offsets and drift continuously later; this only puts the rows of hosts whose clocks differ by hours into the same windows.
//!
//! A host ([`HostKey`]) is a clock: an endpoint's IP, or a named address (a trace that names
//! its nodes). Two processes on one host share its clock; a node the names file gives two
//! addresses gets the same offset twice.
//!
//! - **Input**: rows, as [`Evidence::add`] is given them: both timestamps and both ends.
//! - **State**: per host, its key, an address it was seen at and two counters; per ordered
//!   pair of hosts, the smallest `d` and a count. Bounded: at most [`HostTable::CAPACITY`]
//!   hosts (rows of hosts past that count as of no host) and [`Evidence::MAX_PAIRS`] pairs.
//!   Only each sending host's first [`Evidence::SAMPLE_NS`] of its own clock (or, for a pair
//!   seen rarely, the pair's first [`Evidence::PAIR_SAMPLES`] rows) give `d`: the offset is
//!   that at the start, as the capture bootstrap's is.
//! - **Cost**: per row, two host lookups and a pair lookup; the solve is `O(P log P)` in the
//!   pairs.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::net::IpAddr;

use foldhash::fast::FixedState;

use crate::observation::{Address, Nanos};

/// A host whose clock stamped timestamps: an endpoint's IP, or a named address.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostKey {
    /// The IP of `ip:port` endpoints.
    Ip(IpAddr),
    /// A named address (`web`, `/run/app.sock`), its own host.
    Name(String),
}

impl HostKey {
    /// The host of `address`.
    pub fn of(address: &Address) -> HostKey {
        match address {
            Address::Endpoint(e) => HostKey::Ip(e.ip),
            Address::Name(n) => HostKey::Name(n.clone()),
        }
    }
}

impl fmt::Display for HostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostKey::Ip(ip) => ip.fmt(f),
            HostKey::Name(n) => f.write_str(n),
        }
    }
}

/// Hosts numbered in the order they were first seen.
#[derive(Clone, Debug, Default)]
pub struct HostTable {
    by_ip: HashMap<IpAddr, u32, FixedState>,
    by_name: HashMap<String, u32, FixedState>,
    keys: Vec<HostKey>,
}

impl HostTable {
    /// Most hosts numbered; rows of others count as of no host.
    pub const CAPACITY: usize = 65_536;

    /// The number of `address`'s host, if it has one.
    #[inline]
    pub fn get(&self, address: &Address) -> Option<u32> {
        match address {
            Address::Endpoint(e) => self.by_ip.get(&e.ip).copied(),
            Address::Name(n) => self.by_name.get(n.as_str()).copied(),
        }
    }

    /// The number of `address`'s host, numbering it if it is new and there is room.
    pub fn intern(&mut self, address: &Address) -> Option<u32> {
        if let Some(i) = self.get(address) {
            return Some(i);
        }
        if self.keys.len() >= Self::CAPACITY {
            return None;
        }
        let i = self.keys.len() as u32;
        let key = HostKey::of(address);
        match &key {
            HostKey::Ip(ip) => self.by_ip.insert(*ip, i),
            HostKey::Name(n) => self.by_name.insert(n.clone(), i),
        };
        self.keys.push(key);
        Some(i)
    }

    /// Host `i`'s key.
    pub fn key(&self, i: u32) -> Option<&HostKey> {
        self.keys.get(i as usize)
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no host was seen.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The smallest `d` of the rows from one host to another, and how many gave one.
#[derive(Clone, Copy, Debug)]
struct Delays {
    min_ns: i64,
    samples: u64,
}

/// What rows say about their hosts' clocks; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    hosts: HostTable,
    /// Per host: the rows whose event time its clock stamped.
    stamped: Vec<u64>,
    /// Per host: an address it was seen at (to name it).
    example: Vec<Address>,
    /// Per host: its first send time (its clock).
    first_send: Vec<Option<Nanos>>,
    /// Per (sender, receiver).
    pairs: HashMap<(u32, u32), Delays>,
}

impl Evidence {
    /// How much of its own clock, from its first send, a host's rows give delays.
    pub const SAMPLE_NS: Nanos = 30_000_000_000;
    /// Rows of a pair that give delays whatever their time (a pair seen rarely).
    pub const PAIR_SAMPLES: u64 = 64;
    /// Most pairs of hosts kept.
    pub const MAX_PAIRS: usize = 1 << 20;

    /// Takes in a row; returns the host whose clock stamped its event time (the sender when
    /// there is a send time, else the receiver), if it has one.
    pub fn add(
        &mut self,
        send_ns: Option<Nanos>,
        recv_ns: Option<Nanos>,
        src: &Address,
        dst: &Address,
    ) -> Option<u32> {
        let s = self.host(src);
        let r = self.host(dst);
        let stamp = if send_ns.is_some() {
            s
        } else if recv_ns.is_some() {
            r
        } else {
            None
        };
        if let Some(h) = stamp {
            self.stamped[h as usize] += 1;
        }
        let (Some(send), Some(recv), Some(s), Some(r)) = (send_ns, recv_ns, s, r) else {
            return stamp;
        };
        if s == r {
            return stamp;
        }
        let first = *self.first_send[s as usize].get_or_insert(send);
        let early = send.saturating_sub(first) <= Self::SAMPLE_NS;
        let d = (i128::from(recv) - i128::from(send)).clamp(i64::MIN.into(), i64::MAX.into());
        let d = d as i64;
        let room = self.pairs.len() < Self::MAX_PAIRS;
        match self.pairs.get_mut(&(s, r)) {
            Some(p) if early || p.samples < Self::PAIR_SAMPLES => {
                p.min_ns = p.min_ns.min(d);
                p.samples += 1;
            }
            Some(_) => {}
            None if room => {
                self.pairs.insert(
                    (s, r),
                    Delays {
                        min_ns: d,
                        samples: 1,
                    },
                );
            }
            None => {}
        }
        stamp
    }

    /// The number of `a`'s host, numbering it if it is new (and there is room).
    pub fn host(&mut self, a: &Address) -> Option<u32> {
        let i = self.hosts.intern(a)?;
        if i as usize == self.stamped.len() {
            self.stamped.push(0);
            self.example.push(a.clone());
            self.first_send.push(None);
        }
        Some(i)
    }

    /// The hosts seen, numbered.
    pub fn hosts(&self) -> &HostTable {
        &self.hosts
    }

    /// An address host `i` was seen at.
    pub fn example(&self, i: u32) -> Option<&Address> {
        self.example.get(i as usize)
    }

    /// How many rows' event times host `i`'s clock stamped.
    pub fn stamped(&self, i: u32) -> u64 {
        self.stamped.get(i as usize).copied().unwrap_or(0)
    }

    /// The hosts with rows both ways with some other host: those an offset can be estimated
    /// for on both sides, in the order they were seen.
    pub fn both_ways(&self) -> Vec<u32> {
        let mut seen = vec![false; self.hosts.len()];
        for &(a, b) in self.pairs.keys() {
            if self.pairs.contains_key(&(b, a)) {
                seen[a as usize] = true;
                seen[b as usize] = true;
            }
        }
        (0..self.hosts.len() as u32)
            .filter(|&i| seen[i as usize])
            .collect()
    }

    /// The host whose clock stamped the most rows among those seen both ways (else among
    /// all): a reference present throughout.
    pub fn busiest(&self) -> Option<u32> {
        let both = self.both_ways();
        let pool: Vec<u32> = if both.is_empty() {
            (0..self.hosts.len() as u32).collect()
        } else {
            both
        };
        pool.into_iter()
            .max_by_key(|&i| (self.stamped(i), Reverse(i)))
    }

    /// Each host's offset relative to `reference`; see the module documentation. Hosts no
    /// timestamped row connects to `reference`, even through other hosts, form groups of
    /// their own: each group is placed relative to its first host in `preference` (a host
    /// not listed never starts a group), marked [`How::GroupReference`].
    pub fn solve(&self, reference: u32, preference: &[u32]) -> Solution {
        let n = self.hosts.len();
        let mut estimates: Vec<Option<Estimate>> = vec![None; n];
        if (reference as usize) >= n {
            return Solution {
                estimates,
                reference,
                latency_ns: 0,
            };
        }
        // The pairs seen both ways, each once (a < b): Δ(b - a) within [lo, hi].
        let mut edges: HashMap<u32, Vec<(u32, Interval)>> = HashMap::new();
        let mut latencies = Vec::new();
        for (&(a, b), ab) in &self.pairs {
            let Some(ba) = self.pairs.get(&(b, a)) else {
                continue;
            };
            if a > b {
                continue;
            }
            let iv = Interval {
                lo: -i128::from(ba.min_ns),
                hi: i128::from(ab.min_ns),
                samples: ab.samples + ba.samples,
            };
            latencies.push(((i128::from(ab.min_ns) + i128::from(ba.min_ns)) / 2).max(0));
            edges.entry(a).or_default().push((b, iv));
            edges.entry(b).or_default().push((a, iv.reversed()));
        }
        latencies.sort_unstable();
        let latency = latencies.get(latencies.len() / 2).copied().unwrap_or(0);
        let mut one_way: Vec<(u32, u32, i128, u64)> = self
            .pairs
            .iter()
            .map(|(&(s, r), d)| (s, r, i128::from(d.min_ns), d.samples))
            .collect();
        one_way.sort_unstable_by_key(|&(s, r, _, samples)| (Reverse(samples), s, r));
        let mut in_pair = vec![false; n];
        for &(s, r, _, _) in &one_way {
            in_pair[s as usize] = true;
            in_pair[r as usize] = true;
        }
        let mut group = Some((reference, How::Reference));
        let mut rest = preference.iter();
        while let Some((root, how)) = group {
            estimates[root as usize] = Some(Estimate {
                offset_ns: 0,
                bound_ns: Some(0),
                how,
                relative_to: root,
            });
            place_group(root, &edges, &one_way, latency, &mut estimates);
            group = rest
                .by_ref()
                .copied()
                .find(|&h| {
                    in_pair.get(h as usize).copied().unwrap_or(false)
                        && estimates[h as usize].is_none()
                })
                .map(|h| (h, How::GroupReference));
        }
        Solution {
            estimates,
            reference,
            latency_ns: latency.clamp(0, i64::MAX.into()) as i64,
        }
    }
}

/// Places every host connected to `root` (placed): along the narrowest intervals of the
/// pairs seen both ways first (Prim), then by rows one way, a bound less `latency`.
fn place_group(
    root: u32,
    edges: &HashMap<u32, Vec<(u32, Interval)>>,
    one_way: &[(u32, u32, i128, u64)],
    latency: i128,
    estimates: &mut [Option<Estimate>],
) {
    // Prim: the narrowest interval into the placed set first.
    let mut heap = BinaryHeap::new();
    push_edges(&mut heap, root, edges);
    while let Some(Reverse((_, _, from, to, iv))) = heap.pop() {
        if estimates[to as usize].is_some() {
            continue;
        }
        let Some(base) = estimates[from as usize] else {
            continue;
        };
        let (delta, bound) = iv.estimate();
        estimates[to as usize] = Some(Estimate {
            offset_ns: add(base.offset_ns, delta),
            bound_ns: base.bound_ns.zip(bound).map(|(a, b)| a.saturating_add(b)),
            how: How::BothWays {
                via: from,
                samples: iv.samples,
            },
            relative_to: root,
        });
        push_edges(&mut heap, to, edges);
    }
    // One way: a bound on one side, less the typical latency.
    let mut grew = true;
    while grew {
        grew = false;
        for &(s, r, d, samples) in one_way {
            // clock(r) - clock(s) = d - latency, at most d.
            let (from, to, delta, zero_fits) = match (estimates[s as usize], estimates[r as usize])
            {
                (Some(_), None) => (s, r, d - latency, d >= 0),
                (None, Some(_)) => (r, s, latency - d, d >= 0),
                _ => continue,
            };
            let Some(base) = estimates[from as usize] else {
                continue;
            };
            let delta = if zero_fits && delta.abs() <= latency {
                0
            } else {
                delta
            };
            estimates[to as usize] = Some(Estimate {
                offset_ns: add(base.offset_ns, delta),
                bound_ns: None,
                how: How::OneWay { via: from, samples },
                relative_to: base.relative_to,
            });
            grew = true;
        }
    }
}

/// Candidate edges of Prim's tree, narrowest first (then most samples).
type EdgeHeap = BinaryHeap<Reverse<(i128, Reverse<u64>, u32, u32, Interval)>>;

fn push_edges(heap: &mut EdgeHeap, from: u32, edges: &HashMap<u32, Vec<(u32, Interval)>>) {
    for (to, iv) in edges.get(&from).into_iter().flatten() {
        heap.push(Reverse((iv.width(), Reverse(iv.samples), from, *to, *iv)));
    }
}

fn add(base: i64, delta: i128) -> i64 {
    (i128::from(base) + delta).clamp(i64::MIN.into(), i64::MAX.into()) as i64
}

/// The interval a pair seen both ways gives for `Δ(to - from)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Interval {
    lo: i128,
    hi: i128,
    samples: u64,
}

impl Interval {
    fn reversed(self) -> Interval {
        Interval {
            lo: -self.hi,
            hi: -self.lo,
            samples: self.samples,
        }
    }

    /// The sum of the two smallest latencies (negative when the rows contradict each other:
    /// clocks that drifted, or a trace whose timestamps are not what they say).
    fn width(&self) -> i128 {
        (self.hi - self.lo).abs()
    }

    /// `Δ` and its hard error bound (none when the interval is empty): 0 when 0 lies in it,
    /// else its middle.
    fn estimate(&self) -> (i128, Option<u64>) {
        let consistent = self.lo <= self.hi;
        let delta = if consistent && self.lo <= 0 && 0 <= self.hi {
            0
        } else {
            (self.lo + self.hi) / 2
        };
        let bound = consistent.then(|| {
            let b = (delta - self.lo).max(self.hi - delta);
            u64::try_from(b).unwrap_or(u64::MAX)
        });
        (delta, bound)
    }
}

/// How a host's offset was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// The reference: 0 by definition.
    Reference,
    /// No timestamped row connects the host's group to the reference, even through other
    /// hosts, so no offset between them can be known: the group's clocks are placed
    /// relative to this one (0 by definition).
    GroupReference,
    /// From a pair seen both ways with host `via`, over `samples` rows.
    BothWays {
        /// The placed host of the pair.
        via: u32,
        /// Rows of the pair, both ways.
        samples: u64,
    },
    /// From rows one way only between it and host `via`: a bound less the typical latency.
    OneWay {
        /// The placed host.
        via: u32,
        /// Rows.
        samples: u64,
    },
}

/// One host's coarse offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    /// The host's clock minus the reference clock, ns.
    pub offset_ns: i64,
    /// A hard bound on its error, when every pair on its path was seen both ways and agrees
    /// with itself, for timestamps as exact as they are written (a trace rounded to a
    /// resolution is off by up to that much more).
    pub bound_ns: Option<u64>,
    /// How it was found.
    pub how: How,
    /// The host it is relative to: the reference, or its group's (see
    /// [`How::GroupReference`]).
    pub relative_to: u32,
}

/// The hosts' offsets, by host number.
#[derive(Clone, Debug)]
pub struct Solution {
    /// Per host; `None` for a host no timestamped row connects to the reference.
    pub estimates: Vec<Option<Estimate>>,
    /// The reference host.
    pub reference: u32,
    /// The median smallest one-way latency of the pairs seen both ways, ns.
    pub latency_ns: i64,
}

impl Solution {
    /// Host `i`'s offset, 0 when it has none.
    pub fn offset(&self, i: u32) -> i64 {
        self.estimates
            .get(i as usize)
            .copied()
            .flatten()
            .map_or(0, |e| e.offset_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    fn ep(s: &str) -> Address {
        Address::parse(s)
    }

    /// Rows between hosts whose clocks are `offsets` (ms) off true time, one-way latency
    /// `lat` ms (plus `extra` ms on each later message).
    fn row(e: &mut Evidence, offsets: &[i64], from: usize, to: usize, true_ms: i64, lat: i64) {
        let at = |h: usize, t: i64| Some((100_000_000 * MS + (t + offsets[h]) * MS) as u64);
        e.add(
            at(from, true_ms),
            at(to, true_ms + lat),
            &ep(&format!("10.0.0.{}:{}", from + 1, 1000 + from)),
            &ep(&format!("10.0.0.{}:{}", to + 1, 80)),
        );
    }

    #[test]
    fn pairs_both_ways_give_the_offsets_to_within_the_latency() {
        let offsets = [0, 3_600_000, -1_800_000, 250];
        let mut e = Evidence::default();
        for t in 0..100 {
            row(&mut e, &offsets, 0, 1, t * 10, 2);
            row(&mut e, &offsets, 1, 0, t * 10 + 3, 2);
            row(&mut e, &offsets, 1, 2, t * 10 + 4, 1);
            row(&mut e, &offsets, 2, 1, t * 10 + 5, 1);
            row(&mut e, &offsets, 3, 0, t * 10 + 6, 1);
            row(&mut e, &offsets, 0, 3, t * 10 + 7, 1);
        }
        let s = e.solve(0, &[]);
        for (h, o) in offsets.iter().enumerate() {
            let est = s.estimates[h].unwrap();
            assert!((est.offset_ns - o * MS).abs() <= 2 * MS, "{h}: {est:?}");
            assert!(est.bound_ns.is_some());
        }
        assert_eq!(
            s.estimates[2].unwrap().how,
            How::BothWays {
                via: 1,
                samples: 200
            }
        );
        assert_eq!(s.latency_ns, MS);
    }

    #[test]
    fn clocks_that_agree_within_the_latency_get_zero() {
        let offsets = [0, 1];
        let mut e = Evidence::default();
        for t in 0..10 {
            row(&mut e, &offsets, 0, 1, t * 10, 3);
            row(&mut e, &offsets, 1, 0, t * 10 + 5, 3);
        }
        let s = e.solve(0, &[]);
        assert_eq!(s.offset(1), 0);
        assert_eq!(s.estimates[1].unwrap().bound_ns, Some(4 * MS as u64));
    }

    #[test]
    fn one_way_hosts_get_the_bound_less_the_typical_latency_and_others_none() {
        let offsets = [0, 60_000, -60_000, 0];
        let mut e = Evidence::default();
        for t in 0..10 {
            row(&mut e, &offsets, 0, 1, t * 10, 2);
            row(&mut e, &offsets, 1, 0, t * 10 + 5, 2);
            // Host 2 only sends to host 1.
            row(&mut e, &offsets, 2, 1, t * 10 + 6, 2);
        }
        // Host 3 sends rows with no receive time.
        e.add(Some(5), None, &ep("10.0.0.4:1"), &ep("10.0.0.1:80"));
        let s = e.solve(0, &[]);
        let two = s.estimates[2].unwrap();
        assert!((two.offset_ns + 60_000 * MS).abs() <= MS, "{two:?}");
        assert_eq!(two.bound_ns, None);
        assert!(matches!(two.how, How::OneWay { via: 1, .. }));
        assert_eq!(s.estimates[3], None);
        assert_eq!(s.offset(3), 0);
        assert_eq!(e.stamped(3), 1);
        assert_eq!(e.both_ways(), vec![0, 1]);
    }

    #[test]
    fn a_group_no_row_connects_to_the_reference_is_placed_relative_to_its_first_preferred_host() {
        // Hosts 0-1 talk to each other, hosts 2-4 among themselves: no row joins the groups.
        let offsets = [0, 60_000, -3_600_000, 0, 900_000];
        let mut e = Evidence::default();
        for t in 0..10 {
            row(&mut e, &offsets, 0, 1, t * 10, 2);
            row(&mut e, &offsets, 1, 0, t * 10 + 5, 2);
            row(&mut e, &offsets, 2, 3, t * 10 + 6, 1);
            row(&mut e, &offsets, 3, 2, t * 10 + 7, 1);
            row(&mut e, &offsets, 4, 3, t * 10 + 8, 1);
            row(&mut e, &offsets, 3, 4, t * 10 + 9, 1);
        }
        // Unlisted, the second group gets no offsets, as before.
        let alone = e.solve(0, &[]);
        assert!((2..5).all(|h| alone.estimates[h].is_none()));
        // Listed, the group's first listed host (3: 1 is placed already) is its reference.
        let s = e.solve(0, &[1, 3, 2]);
        assert!((s.offset(1) - 60_000 * MS).abs() <= 2 * MS);
        assert_eq!(s.estimates[3].unwrap().how, How::GroupReference);
        assert_eq!(s.offset(3), 0);
        assert!(
            (s.offset(2) + 3_600_000 * MS).abs() <= 2 * MS,
            "{:?}",
            s.estimates[2]
        );
        assert!(
            (s.offset(4) - 900_000 * MS).abs() <= 2 * MS,
            "{:?}",
            s.estimates[4]
        );
        assert!(matches!(
            s.estimates[4].unwrap().how,
            How::BothWays { via: 3, .. }
        ));
    }

    #[test]
    fn hosts_are_ips_or_names() {
        let mut t = HostTable::default();
        let a = t.intern(&ep("10.0.0.1:80")).unwrap();
        assert_eq!(t.intern(&ep("10.0.0.1:4000")), Some(a));
        let b = t.intern(&ep("web")).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.get(&ep("web")), Some(b));
        assert_eq!(t.key(b), Some(&HostKey::Name("web".into())));
        assert_eq!(t.get(&ep("10.0.0.2:80")), None);
    }
}
