//! The `correlate` operator (SNAP §2.3): which host, link or application many connections'
//! problems have in common, at the same time.
//!
//! For each connection, a performance vector per problem: the time it spent in the problem in
//! each aggregation interval `t` of the correlation interval `T` (the last `T / t` buckets).
//! For each set `S` of connections that share a resource ([`Resources`]), the average
//! correlation coefficient (ACC) is the mean Pearson correlation over pairs of its active
//! connections, per problem; a set whose ACC exceeds `alpha` (SNAP: 0.4) is reported with the
//! problem, the connections having it and the supporting time series (the set's total time in
//! the problem per bucket).
//!
//! Per problem rather than SNAP's one vector of all five: a lossy link gives its bulk flows
//! fast retransmissions and its sparse flows timeouts at the same moments, and the five-problem
//! vectors of the two kinds are uncorrelated although the link is the common cause; and in
//! one vector a timeout (hundreds of ms) drowns the fast retransmissions (an RTT each) that an
//! incast gives every worker in every round, while which worker also times out is chance.
//! So each problem is judged on its own, and losses of either kind once more together (named
//! after the one that took more time); a set is reported under its best. `acc_all` gives
//! SNAP's five-problem ACC alongside.
//!
//! Pairs: of two connections without the problem, the pair says nothing and is left out; a
//! connection without the problem paired with one that has it counts as 0; a vector that does
//! not vary (the problem all the time) correlates 1 with another that does not vary and 0
//! with anything else. Sets with fewer than `min_connections` connections having the problem
//! are not judged. At most `max_members` connections with the most problem time take part in
//! the pairwise step (those without the problem are counted, not paired).
//!
//! A set is judged once it has `min_buckets` buckets of data, over the buckets from its
//! first data on: zeros from before its connections existed would make any two look alike.
//!
//! - **Input**: [`Evidence`] (kernel or packets), classified here with [`classify`].
//! - **Output**: [`Correlation`] records for the top `top` sets above `alpha`, when a set
//!   first qualifies and then every `report_every_ns` while it does, and at the end of the
//!   input; an [`Alert`] when a set first qualifies.
//! - **Exchange**: everything to worker 0 (one record per connection per interval).
//! - **One connection, one member**: a connection is keyed by its endpoints, whichever
//!   sources saw it (a sniffer at each end, a mirror port, the poller): each of its
//!   directions is judged on its best source (the kernel's counters, else the sniffer that
//!   saw the most of its data segments: the one at the sender sees the segments a lossy link
//!   drops) and the others' evidence is left out, so a set never holds a connection twice
//!   and a connection is never a set by itself.
//! - **Incast**: a loss finding whose connections carry data from servers' ports into one
//!   host's own ephemeral ports ([`incast_into`]) says so (`incast`: that host).
//! - **State**: per connection active in the last `T`, its resources (indices of names held
//!   once), the first and last bucket it was active in, and only its buckets with time in a
//!   problem (a healthy connection holds none); a connection is freed when it has not been
//!   active for `T`, a resource name with its last connection. A connection that closed
//!   (its evidence says so) without a problem is not kept but counted, per set and bucket,
//!   until `T` has passed (its other direction's last evidence is then not counted again).
//!   So state is bounded by the connections open in one correlation interval and by sets ×
//!   `T / t`.
//! - **Cost**: per bucket, one pass over the connections active in `T` (counting each set's
//!   members), then O(m² T/t) per set of m connections having a problem (m ≤ `max_members`);
//!   healthy connections are counted, never paired or given rows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use causeway_sources::{Endpoint, OriginId, Time};
use serde::{Deserialize, Serialize};
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use smallvec::SmallVec;

use crate::FastMap;
use crate::alert::Alert;
use crate::tcp::problem::{ConnId, Evidence, EvidenceSource, Problem, SnapConfig, classify};
use crate::tcp::resources::{Resources, Scope};

/// Parameters of the correlation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CorrelateConfig {
    /// Aggregation interval `t`, ns.
    pub aggregation_ns: Time,
    /// Correlation interval `T`, ns (a multiple of `t`).
    pub correlation_ns: Time,
    /// ACC threshold `alpha`.
    pub alpha: f64,
    /// How many sets to report per bucket.
    pub top: usize,
    /// Fewest connections having the problem for a set to be judged.
    pub min_connections: usize,
    /// Most connections paired per set.
    pub max_members: usize,
    /// A qualifying set is reported again after this long.
    pub report_every_ns: Time,
    /// Fewest buckets with data a set needs to be judged.
    pub min_buckets: u64,
    /// Classification thresholds.
    pub snap: SnapConfig,
}

impl Default for CorrelateConfig {
    fn default() -> Self {
        CorrelateConfig {
            aggregation_ns: 1_000_000_000,
            correlation_ns: 60_000_000_000,
            alpha: 0.4,
            top: 20,
            min_connections: 2,
            max_members: 64,
            report_every_ns: 10_000_000_000,
            min_buckets: 5,
            snap: SnapConfig::default(),
        }
    }
}

/// A set of connections with a common problem: the `correlation` record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Correlation {
    /// What they share.
    pub scope: Scope,
    /// Its name: a host's name or IP, a link or application name.
    pub name: String,
    /// The problem they have in common.
    pub problem: Problem,
    /// Connections having it in the window.
    pub connections: u64,
    /// Active connections of the set in the window.
    pub members: u64,
    /// Average correlation coefficient for the problem.
    pub acc: f64,
    /// SNAP's ACC over the five-problem vectors, when it could be computed.
    pub acc_all: Option<f64>,
    /// Start of the correlation window (event time, ns).
    pub start_ns: Time,
    /// End of the window.
    pub end_ns: Time,
    /// The aggregation interval, ns.
    pub bucket_ns: Time,
    /// Supporting time series: the set's total time in the problem per bucket, ms.
    pub series_ms: Vec<f64>,
    /// The flows with the most time in the problem (up to 10).
    pub flows: Vec<String>,
    /// Other resources shared by exactly the same connections (`host 10.0.0.2`, `app
    /// web`): one finding, reported once, under the link if there is one, else the host.
    pub also: Vec<String>,
    /// The host the connections' data converged on, when the finding has the shape of an
    /// incast ([`incast_into`]).
    #[serde(default)]
    pub incast: Option<String>,
    /// The path-pattern hops that carry its connections (`src -> dst:port of pattern ID`),
    /// set by `tcp.on_patterns` when paths are inferred too (`analyze --emit
    /// patterns,problems`).
    #[serde(default)]
    pub patterns: Vec<String>,
}

/// Connections that lose data together are an *incast* into one host when at least three
/// (`INCAST_MIN`) of them carry data from a server's port to that one host's ephemeral
/// ports (each its own): the answers of many servers to one client's fan-out request
/// meeting in the queue in front of it. `flows` are the connections' data directions
/// (`sender->receiver`) having the problem. Many clients sending to one server (a lossy
/// link into it) are not; nor are answers whose requests lost data too in the same window
/// (the caller's check: a link losing both ways, not a queue the answers converge on).
pub fn incast_into(problem: Problem, flows: &[String]) -> Option<String> {
    if !matches!(problem, Problem::FastRetransmit | Problem::Timeout) || flows.len() < INCAST_MIN {
        return None;
    }
    let ends: Vec<(Endpoint, Endpoint)> = flows
        .iter()
        .filter_map(|f| {
            let (a, b) = f.split_once("->")?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    let receiver = ends.first()?.1.ip;
    let mut ports: Vec<u16> = ends.iter().map(|e| e.1.port).collect();
    ports.sort_unstable();
    ports.dedup();

    let server_to_client = |(s, r): &(Endpoint, Endpoint)| s.port < r.port;
    (ends.len() == flows.len()
        && ends
            .iter()
            .all(|e| e.1.ip == receiver && server_to_client(e))
        && ports.len() == ends.len())
    .then(|| receiver.to_string())
}

/// The fewest data segments, on average, an incast's answers carried in each interval in
/// which they lost: a burst ([`Correlator::losses_converge`]).
const INCAST_BURST: u64 = 8;

/// The fewest connections an incast is said of.
const INCAST_MIN: usize = 3;

/// What `correlate` emits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Correlated {
    /// A set with a common problem.
    Correlation(Box<Correlation>),
    /// A set newly found.
    Alert(Box<Alert>),
}

/// The problems correlated: send buffer, fast retransmissions, timeouts, losses of either
/// kind, delayed ACK, receiver window. Indices into [`Problem::CORRELATED`]. A set is judged
/// by its best group.
const GROUPS: [&[usize]; 6] = [&[0], &[1], &[2], &[1, 2], &[3], &[4]];

/// A connection's time per problem (in [`Problem::CORRELATED`]'s order) per bucket.
type Rows = [Vec<f64>; 5];

struct ConnState {
    /// The resources it belongs to, as indices into [`Correlator::sets`].
    sets: SmallVec<[u32; 4]>,
    /// The direction named in reports: the first with a problem (none until then).
    flow: Option<String>,
    /// First and last bucket it was active in.
    first_active: u64,
    last_active: u64,
    /// Buckets with time in a problem: index -> time per problem. Buckets without any are
    /// not kept (a healthy connection holds none).
    buckets: BTreeMap<u64, [u64; 5]>,
    /// Per direction (lower endpoint sending, higher sending): who reported on it, and
    /// how well ([`Sighting`]). Only the best one's evidence counts.
    sightings: [SmallVec<[Sighting; 2]>; 2],
    /// Per bucket with losses, per direction: the segments retransmitted (fast
    /// retransmissions and timeouts), the data segments sent in the intervals that lost and
    /// how many such intervals; dropped with the buckets.
    losses: BTreeMap<u64, [Lossy; 2]>,
}

/// One direction's lossy intervals in one bucket ([`ConnState::losses`]).
#[derive(Clone, Copy, Debug, Default)]
struct Lossy {
    retransmitted: u64,
    segments: u64,
    intervals: u64,
}

/// One source's evidence on one direction of a connection: a sniffer (the same connection is
/// seen by a sniffer at each end, or on a mirror port) or a host's kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Sighting {
    /// The kernel's counters are the sender's own.
    kernel: bool,
    /// Data segments it saw: a sniffer at the sender sees every segment, one past a lossy
    /// link misses the lost ones.
    segments: u64,
    /// Ties go to the lower origin id, so that the choice does not depend on arrival order.
    origin: std::cmp::Reverse<OriginId>,
}

impl ConnState {
    /// Takes evidence `e` on direction `dir` into account; whether it is the best source's
    /// (a connection seen by several sources is one connection, judged on one source per
    /// direction, not counted once per sniffer).
    fn best_source(&mut self, dir: usize, e: &Evidence) -> bool {
        let kernel = e.source == EvidenceSource::Kernel;
        let origin = std::cmp::Reverse(e.conn.origin);
        let list = &mut self.sightings[dir];
        match list
            .iter_mut()
            .find(|s| s.origin == origin && s.kernel == kernel)
        {
            Some(s) => s.segments += e.segments,
            None => list.push(Sighting {
                kernel,
                segments: e.segments,
                origin,
            }),
        }
        list.iter()
            .max()
            .is_some_and(|best| best.origin == origin && best.kernel == kernel)
    }
}

/// The resources connections belong to, each held once however many connections share it,
/// and freed with its last connection (a SYN flood from random addresses names a host per
/// flood packet).
#[derive(Default)]
struct SetNames {
    names: Vec<(Scope, String)>,
    /// Connections belonging to each; 0: free, its slot in `free`.
    users: Vec<u32>,
    index: HashMap<(Scope, String), u32>,
    free: Vec<u32>,
}

impl SetNames {
    fn acquire(&mut self, name: (Scope, String)) -> u32 {
        if let Some(&i) = self.index.get(&name) {
            self.users[i as usize] += 1;
            return i;
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.names[i as usize] = name.clone();
                self.users[i as usize] = 1;
                i
            }
            None => {
                self.names.push(name.clone());
                self.users.push(1);
                (self.names.len() - 1) as u32
            }
        };
        self.index.insert(name, i);
        i
    }

    fn release(&mut self, i: u32) {
        let users = &mut self.users[i as usize];
        *users -= 1;
        if *users == 0 {
            let name = std::mem::replace(&mut self.names[i as usize], (Scope::Host, String::new()));
            self.index.remove(&name);
            self.free.push(i);
        }
    }
}

fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    let tiny = 1e-12;
    match (sxx > tiny, syy > tiny) {
        (true, true) => sxy / (sxx * syy).sqrt(),
        (false, false) => f64::from(mx > 0.0 && my > 0.0),
        _ => 0.0,
    }
}

/// ACC of `vectors` (those having the problem) with `healthy` more members without it.
fn acc(vectors: &[Vec<f64>], healthy: usize) -> f64 {
    let n = vectors.len();
    let pairs = n * (n - 1) / 2 + n * healthy;
    if pairs == 0 {
        return 0.0;
    }
    let mut sum = 0.0;
    for i in 0..n {
        for j in i + 1..n {
            sum += pearson(&vectors[i], &vectors[j]);
        }
    }
    sum / pairs as f64
}

struct Correlator {
    config: CorrelateConfig,
    resources: Arc<Resources>,
    conns: FastMap<ConnId, ConnState>,
    sets: SetNames,
    /// Closed connections that never had a problem, counted rather than kept: (last bucket
    /// active, set) -> how many. Each entry holds one use of its set's name.
    closed_healthy: BTreeMap<(u64, u32), u32>,
    /// The newest bucket any connection was active in.
    newest: Option<u64>,
    /// Next bucket to judge.
    next: Option<u64>,
    /// Sets qualifying at the last judgement, with when they were last reported.
    reported: HashMap<(Scope, String, Problem), Time>,
    last: Vec<Correlation>,
}

impl Correlator {
    fn new(config: CorrelateConfig, resources: Arc<Resources>) -> Self {
        Correlator {
            config,
            resources,
            conns: FastMap::default(),
            sets: SetNames::default(),
            closed_healthy: BTreeMap::new(),
            newest: None,
            next: None,
            reported: HashMap::new(),
            last: Vec::new(),
        }
    }

    fn k(&self) -> u64 {
        (self.config.correlation_ns / self.config.aggregation_ns.max(1)).max(1)
    }

    fn add(&mut self, e: &Evidence) {
        let t = self.config.aggregation_ns.max(1);
        let times = classify(e, &self.config.snap);
        // A connection is both its directions (SNAP correlates sockets): packets give each
        // direction its own evidence, the kernel only the polled host's. It is one member of
        // a set however many sources saw it (a sniffer at each end, the poller too): keyed
        // by its endpoints alone, each direction judged on its best source.
        let (a, b) = (e.conn.local, e.conn.peer);
        let key = ConnId {
            origin: OriginId::default(),
            local: a.min(b),
            peer: a.max(b),
        };
        let dir = usize::from(a > b);
        if let Some(state) = self.conns.get_mut(&key) {
            if !state.best_source(dir, e) {
                return;
            }
        }
        if e.closed && !times.any() && !self.conns.contains_key(&key) {
            // The other direction's last word on a connection already counted.
            return;
        }
        let (start, end) = (e.start_ns, e.end_ns.max(e.start_ns + 1));
        let (first_bucket, last_bucket) = (start / t, (end - 1) / t);
        let (resources, sets) = (&self.resources, &mut self.sets);
        let state = self.conns.entry(key).or_insert_with(|| ConnState {
            sets: resources
                .of(&e.conn, e.hops)
                .into_iter()
                .map(|r| sets.acquire(r))
                .collect(),
            flow: None,
            first_active: first_bucket,
            last_active: last_bucket,
            buckets: BTreeMap::new(),
            sightings: Default::default(),
            losses: BTreeMap::new(),
        });
        if state.sightings[dir].is_empty() {
            state.best_source(dir, e);
        }
        state.first_active = state.first_active.min(first_bucket);
        state.last_active = state.last_active.max(last_bucket);
        self.newest = Some(self.newest.map_or(last_bucket, |n| n.max(last_bucket)));
        let lost = e.fast_retransmits.unwrap_or(0) + e.timeouts.unwrap_or(0);
        if lost > 0 {
            let l = &mut state.losses.entry(last_bucket).or_default()[dir];
            l.retransmitted += lost;
            l.segments += e.segments;
            l.intervals += 1;
        }
        if times.any() {
            if state.flow.is_none() {
                state.flow = Some(e.conn.flow());
            }
            let span = (end - start) as f64;
            let mut b = first_bucket;
            while b * t < end {
                let (lo, hi) = ((b * t).max(start), ((b + 1) * t).min(end));
                let share = (hi - lo) as f64 / span;
                let slot = state.buckets.entry(b).or_insert([0; 5]);
                for (s, ns) in slot.iter_mut().zip(times.ns) {
                    *s += (ns as f64 * share) as u64;
                }
                b += 1;
            }
        }
        if self.next.is_none() {
            self.next = Some(first_bucket);
        }
        if e.closed && state.buckets.is_empty() {
            // Closed without a problem: counted as a member of its sets until the window
            // passes it, not kept (a million short connections a minute).
            if let Some(state) = self.conns.remove(&key) {
                for s in state.sets {
                    let n = self
                        .closed_healthy
                        .entry((state.last_active, s))
                        .or_insert(0);
                    if *n > 0 {
                        self.sets.release(s);
                    }
                    *n += 1;
                }
            }
        }
    }

    /// Judges every bucket that ended at least `t` before `now` (all of them when `now` is
    /// `None`, the end of the input).
    fn advance(&mut self, now: Option<Time>, out: &mut Vec<Correlated>) {
        let t = self.config.aggregation_ns.max(1);
        let Some(mut next) = self.next else { return };
        loop {
            let due = match now {
                Some(now) => (next + 2) * t <= now,
                None => self.newest.is_some_and(|n| n >= next),
            };
            if !due {
                break;
            }
            self.judge(next + 1, now.is_none(), out);
            next += 1;
        }
        self.next = Some(next);
        if now.is_none() {
            // The end of the input: report what qualifies at the end once more.
            for c in self.last.drain(..) {
                out.push(Correlated::Correlation(Box::new(c)));
            }
        }
    }

    /// Whether the losses of connections `ids` since bucket `first` have an incast's cause,
    /// not only its shape: bursts of answers overflowing the queue they meet in. The
    /// answers' intervals that lost carried bursts (at least [`INCAST_BURST`] data segments
    /// each, on average: single-segment answers cannot overflow a queue together), and lost
    /// at least four times the segments the requests did (whose ACKs wait in the same full
    /// queue: a link that drops both ways hits both alike).
    fn losses_converge(&self, ids: &[ConnId], first: u64) -> bool {
        let (mut answers, mut requests) = (Lossy::default(), 0u64);
        for (id, c) in ids.iter().filter_map(|id| Some((id, self.conns.get(id)?))) {
            // Direction 0 sends from the key's `local` (the lower endpoint); the answers
            // come from the server's port, the lower of the two in an incast's flows.
            let a = usize::from(id.peer.port < id.local.port);
            for (_, l) in c.losses.range(first..) {
                answers.retransmitted += l[a].retransmitted;
                answers.segments += l[a].segments;
                answers.intervals += l[a].intervals;
                requests += l[1 - a].retransmitted;
            }
        }
        answers.segments >= INCAST_BURST * answers.intervals.max(1)
            && answers.retransmitted > requests * 4
    }

    /// Judges the window of `k` buckets ending before bucket `end`.
    fn judge(&mut self, end: u64, at_end: bool, out: &mut Vec<Correlated>) {
        let (t, k) = (self.config.aggregation_ns.max(1), self.k());
        let first = end.saturating_sub(k);
        let sets = &mut self.sets;
        self.conns.retain(|_, c| {
            c.buckets.retain(|&b, _| b >= first);
            c.losses.retain(|&b, _| b >= first);
            let keep = c.last_active >= first;
            if !keep {
                for &s in &c.sets {
                    sets.release(s);
                }
            }
            keep
        });
        // Per set: its active connections in the window and its first bucket with one (a
        // healthy connection is counted here, never paired); and those having a problem.
        while let Some(entry) = self.closed_healthy.first_entry() {
            if entry.key().0 >= first {
                break;
            }
            let (_, s) = *entry.key();
            entry.remove();
            self.sets.release(s);
        }
        let mut members = vec![0usize; self.sets.names.len()];
        let mut set_first = vec![u64::MAX; self.sets.names.len()];
        for (&(b, s), &n) in self.closed_healthy.range((first, 0)..(end, 0)) {
            members[s as usize] += n as usize;
            let f = &mut set_first[s as usize];
            *f = (*f).min(b);
        }
        let mut having_any: BTreeMap<&(Scope, String), (u32, Vec<ConnId>)> = BTreeMap::new();
        for (id, c) in &self.conns {
            if c.first_active >= end {
                continue;
            }
            let problem = c.buckets.range(first..end).next().is_some();
            for &s in &c.sets {
                members[s as usize] += 1;
                let f = &mut set_first[s as usize];
                *f = (*f).min(c.first_active.max(first));
                if problem {
                    let name = &self.sets.names[s as usize];
                    having_any
                        .entry(name)
                        .or_insert((s, Vec::new()))
                        .1
                        .push(*id);
                }
            }
        }
        let mut found = Vec::new();
        for ((scope, name), (s, mut ids)) in having_any {
            if ids.len() < self.config.min_connections.max(2) {
                continue;
            }
            let (scope, name) = (*scope, name.clone());
            ids.sort();
            let members = members[s as usize];
            // The set's vectors start at its first bucket with an active connection: zeros
            // before any of its connections existed would make every pair look alike.
            let first = set_first[s as usize];
            if end - first < self.config.min_buckets.max(2) {
                continue;
            }
            let len = (end - first) as usize;
            // Each connection's time per problem per bucket, built once for every group.
            let rows: Vec<(ConnId, Rows)> = ids
                .iter()
                .map(|id| {
                    let mut r: Rows = std::array::from_fn(|_| vec![0.0; len]);
                    if let Some(c) = self.conns.get(id) {
                        for (&b, times) in c.buckets.range(first..end) {
                            for (p, row) in r.iter_mut().enumerate() {
                                row[(b - first) as usize] += times[p] as f64;
                            }
                        }
                    }
                    (*id, r)
                })
                .collect();
            let mut best: Option<Correlation> = None;
            for group in GROUPS {
                // (total, id, the group's time per bucket, the connection's rows)
                let mut having: Vec<(f64, ConnId, Vec<f64>, &Rows)> = rows
                    .iter()
                    .map(|(id, r)| {
                        let v: Vec<f64> = (0..len)
                            .map(|i| group.iter().map(|&p| r[p][i]).sum())
                            .collect();
                        (v.iter().sum::<f64>(), *id, v, r)
                    })
                    .filter(|(total, ..)| *total > 0.0)
                    .collect();
                if having.len() < self.config.min_connections.max(2) {
                    continue;
                }
                let healthy = members - having.len();
                having.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                having.truncate(self.config.max_members);
                let series: Vec<f64> = (0..len)
                    .map(|i| having.iter().map(|(_, _, v, _)| v[i]).sum::<f64>() / 1e6)
                    .collect();
                let merged: Vec<Vec<f64>> = having.iter().map(|(_, _, v, _)| v.clone()).collect();
                let value = acc(&merged, healthy);
                let problem = *group
                    .iter()
                    .max_by_key(|&&p| {
                        having
                            .iter()
                            .map(|(_, _, _, r)| r[p].iter().sum::<f64>() as u64)
                            .sum::<u64>()
                    })
                    .unwrap_or(&group[0]);
                // The best group; of two that correlate alike, the one that took more
                // time (a slow reader's connections also wait for delayed ACKs, as a
                // consequence).
                let total: f64 = series.iter().sum();
                let better = |b: &Correlation| {
                    let b_total: f64 = b.series_ms.iter().sum();
                    value > b.acc + 0.01 || (value > b.acc - 0.01 && total > b_total)
                };
                if best.as_ref().is_none_or(better) {
                    let all: Vec<Vec<f64>> = having.iter().map(|(_, _, _, r)| r.concat()).collect();
                    best = Some(Correlation {
                        scope,
                        name: name.clone(),
                        problem: Problem::CORRELATED[problem],
                        connections: having.len() as u64,
                        members: members as u64,
                        acc: value,
                        acc_all: Some(acc(&all, healthy)),
                        start_ns: first * t,
                        end_ns: end * t,
                        bucket_ns: t,
                        series_ms: series,
                        flows: having
                            .iter()
                            .take(10)
                            .filter_map(|(_, id, _, _)| self.conns.get(id)?.flow.clone())
                            .collect(),
                        also: Vec::new(),
                        incast: None,
                        patterns: Vec::new(),
                    });
                }
            }
            if let Some(mut c) = best.filter(|c| c.acc > self.config.alpha) {
                let flows: Vec<String> = ids
                    .iter()
                    .filter_map(|id| self.conns.get(id)?.flow.clone())
                    .collect();
                c.incast =
                    incast_into(c.problem, &flows).filter(|_| self.losses_converge(&ids, first));
                found.push((c, ids));
            }
        }
        let rank = |s: Scope| match s {
            Scope::Link => 0,
            Scope::Host => 1,
            Scope::App => 2,
        };
        found.sort_by(|a, b| {
            b.0.acc
                .total_cmp(&a.0.acc)
                .then(rank(a.0.scope).cmp(&rank(b.0.scope)))
                .then(a.0.name.cmp(&b.0.name))
        });
        // One finding per set of connections and problem, however many names it has.
        let mut seen: HashMap<(Vec<ConnId>, u64, Problem), usize> = HashMap::new();
        let mut unique: Vec<Correlation> = Vec::new();
        for (c, ids) in found {
            match seen.get(&(ids.clone(), c.members, c.problem)) {
                Some(&i) => unique[i].also.push(format!("{} {}", c.scope, c.name)),
                None => {
                    seen.insert((ids, c.members, c.problem), unique.len());
                    unique.push(c);
                }
            }
        }
        let mut found = unique;
        found.truncate(self.config.top);
        let now = end * t;
        let mut reported = HashMap::new();
        for c in &found {
            let key = (c.scope, c.name.clone(), c.problem);
            match self.reported.get(&key) {
                None => {
                    out.push(Correlated::Alert(Box::new(Alert {
                        source: "correlate".to_owned(),
                        severity: "warning".to_owned(),
                        message: format!(
                            "{}{} on {} of {} connections of {} {} at once (ACC {:.2})",
                            c.incast
                                .as_ref()
                                .map_or(String::new(), |h| format!("incast into {h}: ")),
                            c.problem,
                            c.connections,
                            c.members,
                            c.scope,
                            c.name,
                            c.acc
                        ),
                        time_ns: now,
                        correlation: Some(c.clone()),
                        rule: None,
                    })));
                    out.push(Correlated::Correlation(Box::new(c.clone())));
                    reported.insert(key, now);
                }
                Some(&at) if now >= at + self.config.report_every_ns && !at_end => {
                    out.push(Correlated::Correlation(Box::new(c.clone())));
                    reported.insert(key, now);
                }
                Some(&at) => {
                    reported.insert(key, at);
                }
            }
        }
        self.reported = reported;
        self.last = found;
    }
}

/// Extension trait: SNAP's correlation across connections.
pub trait Correlate<'scope> {
    /// See the module documentation.
    fn correlate(
        self,
        config: CorrelateConfig,
        resources: Arc<Resources>,
    ) -> Stream<'scope, Time, Vec<Correlated>>;
}

impl<'scope> Correlate<'scope> for Stream<'scope, Time, Vec<Evidence>> {
    fn correlate(
        self,
        config: CorrelateConfig,
        resources: Arc<Resources>,
    ) -> Stream<'scope, Time, Vec<Correlated>> {
        self.unary_frontier(
            Exchange::new(|_: &Evidence| 0),
            "correlate",
            move |cap, _info| {
                let mut held = Some(cap);
                let mut state = Correlator::new(config, resources);
                let mut out = Vec::new();
                move |(input, frontier), output| {
                    input.for_each(|_cap, batch| {
                        for e in batch.drain(..) {
                            state.add(&e);
                        }
                    });
                    let now = frontier.frontier().iter().next().copied();
                    if held.is_some() {
                        state.advance(now, &mut out);
                    }
                    if let Some(cap) = held.as_mut() {
                        if !out.is_empty() {
                            output.session(&*cap).give_iterator(out.drain(..));
                        }
                    }
                    crate::follow_frontier_one(&mut held, now);
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::problem::EvidenceSource;
    use timely::dataflow::operators::capture::Event;
    use timely::dataflow::operators::{Capture, ToStream};

    fn conn(local: &str, peer: &str) -> ConnId {
        ConnId {
            local: local.parse().unwrap(),
            peer: peer.parse().unwrap(),
            ..ConnId::default()
        }
    }

    fn second(c: ConnId, s: u64, timeouts: u64) -> Evidence {
        Evidence {
            conn: c,
            source: EvidenceSource::Kernel,
            start_ns: s * 1_000_000_000,
            end_ns: (s + 1) * 1_000_000_000,
            bytes: 100,
            timeouts: Some(timeouts),
            ..Evidence::default()
        }
    }

    #[test]
    fn pearson_edges() {
        assert!((pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]) - 1.0).abs() < 1e-12);
        assert!((pearson(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
        assert_eq!(pearson(&[1.0, 1.0], &[2.0, 2.0]), 1.0);
        assert_eq!(pearson(&[0.0, 0.0], &[2.0, 2.0]), 0.0);
        assert_eq!(pearson(&[1.0, 0.0], &[2.0, 2.0]), 0.0);
    }

    /// What `correlate` says of `evidence` with `topology`, over a 10 s correlation window.
    fn correlate_all(evidence: Vec<Evidence>, topology: &str) -> Vec<Correlated> {
        let resources = Arc::new(Resources::parse(topology, "t").unwrap());
        let config = CorrelateConfig {
            correlation_ns: 10_000_000_000,
            ..CorrelateConfig::default()
        };
        let captured = timely::example(move |scope| {
            evidence
                .to_stream(scope)
                .container::<Vec<_>>()
                .correlate(config, resources)
                .capture()
        });
        captured
            .try_iter()
            .flat_map(|e| match e {
                Event::Messages(_, r) => r,
                Event::Progress(_) => Vec::new(),
            })
            .collect()
    }

    /// The correlations of `evidence` with no topology file (hosts and applications).
    fn correlations(evidence: Vec<Evidence>) -> Vec<Correlation> {
        correlate_all(evidence, "")
            .into_iter()
            .filter_map(|c| match c {
                Correlated::Correlation(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn answers_converging_on_one_client_are_an_incast_and_requests_into_a_server_are_not() {
        let answers: Vec<String> = (1..=8)
            .map(|k| format!("10.0.0.{k}:5005->10.0.1.1:{}", 40500 + k))
            .collect();
        assert_eq!(
            incast_into(Problem::FastRetransmit, &answers).as_deref(),
            Some("10.0.1.1")
        );
        assert_eq!(incast_into(Problem::RwndLimited, &answers), None);
        assert_eq!(incast_into(Problem::Timeout, &answers[..2]), None);
        let uploads: Vec<String> = (1..=8)
            .map(|k| format!("10.0.0.{k}:{}->10.0.1.1:5001", 40100 + k))
            .collect();
        assert_eq!(incast_into(Problem::Timeout, &uploads), None);
        let mut spread = answers.clone();
        spread.push("10.0.0.9:5005->10.0.1.2:40600".to_owned());
        assert_eq!(incast_into(Problem::FastRetransmit, &spread), None);
    }

    #[test]
    fn answers_that_lose_with_their_requests_or_in_single_segments_are_not_an_incast() {
        // Four connections of a pool into one server; every connection times out in the
        // same seconds: the answers alone, in bursts (an incast), then the requests too, then
        // the answers alone but one segment at a time.
        let run = |both_ways: bool, answer_segments: u64| {
            let mut evidence = Vec::new();
            for k in 1..=4u16 {
                let answers = conn("10.0.0.40:5432", &format!("10.0.0.20:{}", 35600 + k));
                let requests = conn(&format!("10.0.0.20:{}", 35600 + k), "10.0.0.40:5432");
                for s in 0..10 {
                    let lost = u64::from(s % 3 == 0);
                    let mut a = second(answers, s, lost);
                    a.segments = answer_segments;
                    evidence.push(a);
                    evidence.push(second(requests, s, if both_ways { lost } else { 0 }));
                }
            }
            correlations(evidence)
                .into_iter()
                .filter(|c| c.problem == Problem::Timeout)
                .map(|c| c.incast)
                .collect::<Vec<_>>()
        };
        let incast = run(false, 40);
        assert!(!incast.is_empty());
        assert!(incast.contains(&Some("10.0.0.20".to_owned())), "{incast:?}");
        for (both_ways, segments) in [(true, 40), (false, 1)] {
            let found = run(both_ways, segments);
            assert!(!found.is_empty());
            assert!(found.iter().all(Option::is_none), "{found:?}");
        }
    }

    #[test]
    fn a_connection_seen_at_both_ends_is_one_member() {
        // One lossy connection, captured by a sniffer at each end (each sees both
        // directions); the receiving end's sniffer misses the lost segments.
        let c = conn("10.1.0.1:40000", "10.1.0.2:5001");
        let back = conn("10.1.0.2:5001", "10.1.0.1:40000");
        let mut evidence = Vec::new();
        for s in 0..20u64 {
            let on = (s / 2) % 2 == 0;
            for (origin, segments) in [(OriginId(0), 10), (OriginId(1), 8)] {
                for (id, timeouts) in [(c, u64::from(on)), (back, 0)] {
                    evidence.push(Evidence {
                        conn: ConnId { origin, ..id },
                        source: EvidenceSource::Packets,
                        segments,
                        ..second(id, s, timeouts)
                    });
                }
            }
        }
        let found = correlations(evidence.clone());
        assert!(
            found.is_empty(),
            "a connection correlated with itself: {found:?}"
        );
        // A second connection with the same problem at the same moments: a set of two.
        let other = conn("10.1.0.1:40001", "10.1.0.2:5001");
        for s in 0..20u64 {
            let on = (s / 2) % 2 == 0;
            for origin in [OriginId(0), OriginId(1)] {
                evidence.push(Evidence {
                    conn: ConnId { origin, ..other },
                    source: EvidenceSource::Packets,
                    segments: 10,
                    ..second(other, s, u64::from(on))
                });
            }
        }
        let found = correlations(evidence);
        assert!(!found.is_empty());
        for f in &found {
            assert_eq!((f.connections, f.members), (2, 2), "{f:?}");
            let mut flows = f.flows.clone();
            flows.dedup();
            assert_eq!(flows.len(), 2, "{f:?}");
        }
    }

    #[test]
    fn a_lossy_link_is_named_and_a_healthy_one_is_not() {
        let topology = "link lossy 10.1.0.0/24 10.1.0.0/24\nlink clean 10.2.0.0/24 10.2.0.0/24\n";
        let lossy: Vec<_> = (0..4)
            .map(|i| conn(&format!("10.1.0.1:{}", 40000 + i), "10.1.0.2:5001"))
            .collect();
        let clean = [
            conn("10.2.0.1:40000", "10.2.0.2:5002"),
            conn("10.2.0.1:40001", "10.2.0.2:5002"),
        ];
        let mut evidence = Vec::new();
        for s in 0..20u64 {
            let on = (s / 2) % 2 == 0;
            for c in &lossy {
                evidence.push(second(*c, s, u64::from(on)));
            }
            for c in &clean {
                evidence.push(second(*c, s, 0));
            }
        }
        let out = correlate_all(evidence, topology);
        let names: std::collections::BTreeSet<_> = out
            .iter()
            .filter_map(|c| match c {
                Correlated::Correlation(c) => Some((c.scope, c.name.clone(), c.problem)),
                _ => None,
            })
            .collect();
        assert!(
            names.contains(&(Scope::Link, "lossy".to_owned(), Problem::Timeout)),
            "{names:?}"
        );
        let lossy = out
            .iter()
            .find_map(|c| match c {
                Correlated::Correlation(c) if c.name == "lossy" => Some(c.as_ref()),
                _ => None,
            })
            .unwrap();
        // The hosts at both ends carry exactly the link's connections: one finding.
        assert_eq!(
            lossy.also,
            ["host 10.1.0.1", "host 10.1.0.2", "app port 5001"]
        );
        assert_eq!(lossy.connections, 4);
        assert!(
            !names
                .iter()
                .any(|(_, n, _)| n == "clean" || n == "10.2.0.2")
        );
        let alerts: Vec<_> = out
            .iter()
            .filter_map(|c| match c {
                Correlated::Alert(a) => Some(a.message.clone()),
                _ => None,
            })
            .collect();
        // One finding (the link; its hosts and application are the same connections).
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        assert!(
            alerts[0].starts_with("timeout on 4 of 4 connections of link lossy"),
            "{alerts:?}"
        );
    }
}
