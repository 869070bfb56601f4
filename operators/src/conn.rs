//! Per-connection state, shared by the operators that track connections (`flows`,
//! `reconcile`'s fold): a canonical connection key, a table of states with a small cache in
//! front of its hash map, and bucketed deadlines.
//!
//! Packets of a few busy connections interleave in a capture, so most packets find their
//! state in the direct-mapped cache without hashing into the map; states live in a slab so
//! that the cache and the map hold indices, not copies.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::net::IpAddr;

use causeway_sources::{Endpoint, Packet, Time};
use foldhash::fast::FixedState;

/// A connection, the same for both directions: origin, protocol and the endpoint pair in a
/// canonical order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnKey {
    /// The lower endpoint's address (IPv4 as IPv4-mapped IPv6), then the higher's.
    low_ip: u128,
    high_ip: u128,
    /// The lower endpoint's port << 16 | the higher's.
    ports: u32,
    /// Origin << 8 | protocol.
    scope: u32,
}

/// An address as one integer: cheap to compare and hash.
#[inline]
pub fn ip_bits(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(*v6),
    }
}

impl ConnKey {
    /// The key of the connection `p` belongs to.
    #[inline]
    pub fn of(p: &Packet) -> ConnKey {
        Self::between(p.src, p.dst, (p.origin.0 as u32) << 8 | p.protocol as u32)
    }

    /// The key of the connection between `a` and `b` within `scope`.
    #[inline]
    pub fn between(a: Endpoint, b: Endpoint, scope: u32) -> ConnKey {
        let a = (ip_bits(&a.ip), a.port);
        let b = (ip_bits(&b.ip), b.port);
        let (low, high) = if a <= b { (a, b) } else { (b, a) };
        ConnKey {
            low_ip: low.0,
            high_ip: high.0,
            ports: (low.1 as u32) << 16 | high.1 as u32,
            scope,
        }
    }

    /// Which direction `src` sends in: 0 from the lower endpoint, 1 from the higher.
    #[inline]
    pub fn direction(&self, src: &Endpoint) -> usize {
        usize::from(!(ip_bits(&src.ip) == self.low_ip && src.port == (self.ports >> 16) as u16))
    }

    /// Exchange key: the same on every worker and process.
    pub fn route(&self) -> u64 {
        FixedState::with_seed(0x666c_6f77).hash_one(self)
    }

    #[inline]
    fn way(&self) -> usize {
        let mix = self.ports ^ (self.low_ip as u32) ^ (self.high_ip as u32).rotate_left(16);
        (mix.wrapping_mul(0x9e37_79b9) >> 24) as usize & (RECENT - 1)
    }
}

/// Entries in the recent-connection cache (a power of two).
/// How long a connection that has carried no data is kept without packets, by every operator
/// that tracks connections: a half-open connection of a SYN flood or a port scan costs
/// seconds of its rate, not the idle timeout (a connection opened and left idle longer
/// starts afresh, without its handshake).
pub const HANDSHAKE_IDLE_NS: Time = 5_000_000_000;

const RECENT: usize = 256;

/// States by connection: a slab, a map from key to slot, and a direct-mapped cache of recent
/// keys. Freed slots are reused.
pub struct ConnTable<S> {
    live: HashMap<ConnKey, usize, FixedState>,
    slots: Vec<Option<S>>,
    free: Vec<usize>,
    recent: Box<[Option<(ConnKey, usize)>; RECENT]>,
}

impl<S> Default for ConnTable<S> {
    fn default() -> Self {
        ConnTable {
            live: HashMap::with_hasher(FixedState::with_seed(0x6c69_7665)),
            slots: Vec::new(),
            free: Vec::new(),
            recent: Box::new([None; RECENT]),
        }
    }
}

impl<S> ConnTable<S> {
    /// Number of live connections.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The slot of `key`, if live.
    #[inline]
    pub fn find(&mut self, key: &ConnKey) -> Option<usize> {
        let way = key.way();
        if let Some((k, i)) = self.recent[way] {
            if k == *key {
                return Some(i);
            }
        }
        let i = *self.live.get(key)?;
        self.recent[way] = Some((*key, i));
        Some(i)
    }

    /// Adds a state for `key` (which must not be live) and returns its slot.
    pub fn insert(&mut self, key: ConnKey, state: S) -> usize {
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(state);
                i
            }
            None => {
                self.slots.push(Some(state));
                self.slots.len() - 1
            }
        };
        self.live.insert(key, i);
        self.recent[key.way()] = Some((key, i));
        i
    }

    /// The state in slot `i`.
    #[inline]
    pub fn slot(&mut self, i: usize) -> Option<&mut S> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }

    /// The state of `key`, if live.
    pub fn get(&mut self, key: &ConnKey) -> Option<&mut S> {
        let i = self.find(key)?;
        self.slot(i)
    }

    /// Removes and returns the state of `key`.
    pub fn remove(&mut self, key: &ConnKey) -> Option<S> {
        let i = self.live.remove(key)?;
        let way = key.way();
        if matches!(self.recent[way], Some((_, h)) if h == i) {
            self.recent[way] = None;
        }
        self.free.push(i);
        self.slots[i].take()
    }

    /// Removes every state.
    pub fn drain(&mut self) -> impl Iterator<Item = S> + '_ {
        self.live.clear();
        self.free.clear();
        *self.recent = [None; RECENT];
        self.slots.drain(..).flatten()
    }
}

/// Keys to look at when the frontier passes a deadline, bucketed by 2^27 ns (about 134 ms):
/// the owner checks the exact deadline when a bucket comes due, so bucketing only bounds how
/// much later than its deadline a key is looked at. Scheduling is lazy: a key may be listed
/// under several buckets, and the owner skips the ones not due and lists the key again. An
/// owner keeps this bounded by listing a key only when its deadline falls in an earlier bucket
/// than the one it is already listed under (see [`Deadlines::bucket`]); [`Deadlines::due`]
/// returns each key once.
pub struct Deadlines<K> {
    buckets: BTreeMap<Time, Vec<K>>,
}

impl<K> Default for Deadlines<K> {
    fn default() -> Self {
        Deadlines {
            buckets: BTreeMap::new(),
        }
    }
}

/// log2 of the deadline bucket width in ns. The width bounds how late after its deadline a
/// key is looked at, so it adds to how late a windowed operator emits (a message that
/// `reconcile` holds `window_ns` leaves up to that much later): small enough for live runs,
/// whose results lag by the sum of such delays, large enough that a key is seldom relisted.
/// 16.8 ms: `reconcile` and `reconcile.fold` hold their capabilities at what they hold, so
/// the lag is in every live run's results (it was 134 ms until 2026-12-02: a live run's
/// pattern lag at 10,000 requests/s fell from 1.65 to 1.34 s at the 99th percentile with it).
const BUCKET_SHIFT: u32 = 24;

/// How much later than its deadline a key may be looked at: the bucket width.
pub const DEADLINE_LAG_NS: Time = 1 << BUCKET_SHIFT;

impl<K: Ord> Deadlines<K> {
    /// The bucket a deadline falls in.
    pub fn bucket(due: Time) -> Time {
        due >> BUCKET_SHIFT
    }

    /// Lists `key` to be looked at once the frontier passes `due`; returns its bucket.
    pub fn schedule(&mut self, key: K, due: Time) -> Time {
        let bucket = Self::bucket(due);
        self.buckets.entry(bucket).or_default().push(key);
        bucket
    }

    /// The keys of every bucket the frontier `now` has passed, each once, in order.
    pub fn due(&mut self, now: Time) -> Vec<K> {
        let mut out = Vec::new();
        while let Some(entry) = self.buckets.first_entry() {
            if (*entry.key() + 1) << BUCKET_SHIFT > now {
                break;
            }
            out.extend(entry.remove());
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Keys listed, duplicates included.
    pub fn len(&self) -> usize {
        self.buckets.values().map(Vec::len).sum()
    }

    /// Whether no key is listed.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.buckets.clear();
    }
}
