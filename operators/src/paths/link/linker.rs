//! The linker's state per worker: arrivals, tasks, connections and their logs, the learned
//! densities and the scratch space of a scan. Freed by `Linker::expire` as the link
//! bound passes (see the module documentation).

use super::*;

/// The linking state of one worker.
pub(super) struct Linker {
    pub(super) config: LinkConfig,
    /// Per node: the tasks it serves that a scan may still find open.
    pub(super) node_tasks: FastMap<u64, NodeTasks>,
    /// Per node: the arrivals that belong to no task, by receive time (an answer leaves
    /// when its call is linked to a task).
    pub(super) taskless: FastMap<u64, VecDeque<Arrived>>,
    /// Arrivals whose sender side alone was observed, by the sender's send time.
    pub(super) one_sided: FastMap<u64, VecDeque<Arrived>>,
    pub(super) estimates: FastMap<(u64, u64), Estimate>,
    /// Learned gaps (a call's answer to its task's reply) per link type ([`gap_type`]).
    pub(super) densities: FastMap<u64, DelayDensity>,
    /// Per node, its sends taken in, by time: the calls a task may have gone on with after
    /// an answer.
    pub(super) departures: FastMap<u64, VecDeque<Departure>>,
    /// Learned causal delays per link type, against the time-shifted null.
    pub(super) causal: FastMap<u64, CausalDensity>,
    /// Per call type (node, callee as link types name it): the learned share of its calls
    /// that are spontaneous ([`Spontaneity`]).
    pub(super) spontaneity: FastMap<(u64, u64), Spontaneity>,
    /// Learned delays of replies after their task's latest message, per link type.
    pub(super) typical: FastMap<u64, TypicalDelay>,
    /// Learned gaps from answers to the replies they are the latest message of, per the
    /// reply's link type, against the time-shifted null ([`Linker::reply_gap`]).
    pub(super) reply_gaps: FastMap<u64, CausalDensity>,
    /// How much likelier a call is to have a parent of each link type, by the size of its
    /// answer, against the time-shifted null ([`SizeEvidence`]).
    pub(super) size_evidence: FastMap<u64, SizeEvidence>,
    /// Learned sizes of the parents of each link type against its other candidates'
    /// ([`ParentSizes`]).
    pub(super) parent_sizes: FastMap<u64, ParentSizes>,
    /// Learned reply sizes of the tasks of each link type's parents, by the size of the
    /// call's answer, against its other candidates' ([`ReplySizes`]).
    pub(super) reply_sizes: FastMap<u64, ReplySizes>,
    /// The size of each arrival held, and its event time.
    pub(super) sizes: FastMap<u64, (u64, Time)>,
    /// Per (node, outgoing connection): which incoming connections' tasks make its calls
    /// ([`Affinity`]).
    pub(super) affinity: FastMap<(u64, u64), Affinity>,
    /// Per node, the answers it received, by receive time (its clock): (receive time, event
    /// time, the sender as link types name it).
    pub(super) answers: FastMap<u64, VecDeque<(Time, Time, u64)>>,
    /// Per node: where its arrivals begin, so that the null scan, which cannot see before
    /// that, is compared with what the scan at the send sees after it.
    pub(super) first_arrival: FastMap<u64, FirstArrival>,
    /// Per (node, connection): what the node sent and received on it (one entry for both,
    /// which are mostly looked up together).
    /// Boxed, as are [`Linker::tasks`]: after a resize a table's buckets are half empty
    /// or more, and a connection's 200 bytes inline made that half the largest thing
    /// `link` held (at 200 requests in flight, 227 MB for one worker's table).
    pub(super) conns: FastMap<(u64, u64), Box<Conn>>,
    /// Per (node, connection): the local times of the two latest requests it brought, older
    /// first, and the newest one's event time. Kept longer than [`Linker::conns`] (a
    /// quarter of the configured keep, however short the learned one), 40 bytes where a
    /// connection's logs take 200: only this tells a connection kept alive between requests.
    pub(super) requests: FastMap<(u64, u64), LatestRequests>,
    /// Tasks: the requests a node serves, by the request's id.
    pub(super) tasks: FastMap<u64, Box<Task>>,
    /// Arrivals that are the most likely cause of a send: how many sends, and the event time
    /// of the newest.
    pub(super) caused: FastMap<u64, (u32, Time, Time)>,
    pub(super) ports: Ports,
    pub(super) last_expiry: Time,
    /// When [`Linker::expire`] last swept the state.
    pub(super) last_sweep: Time,
    /// The delays of the causes taken, per sending node: how far back a send's cause may
    /// lie on this system ([`Linker::horizon_ns`]).
    pub(super) causes: ChildWaits,
    /// `x` as learned: how far back a scan looks and what the sweeps keep for
    /// (`max_delay_ns` until learned); the event time it was last worked out at.
    pub(super) horizon_ns: Time,
    pub(super) horizon_at: Time,
    /// The order slack as learned ([`LookAhead`]).
    pub(super) lookahead: LookAhead,
    /// Buffers [`Linker::weigh`] reuses from message to message (no allocation per message).
    pub(super) scratch: Scratch,
    /// Buffers of the match windows' rounds.
    pub(super) matching: Matching,
}

/// Buffers that [`Linker::weigh`] and [`Linker::commit`] clear and reuse.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) candidates: Vec<Candidate>,
    pub(super) null: Vec<Candidate>,
    pub(super) kinds: Vec<u64>,
    /// The calls a task may have gone on with after a call's answer ([`Linker::follows`]).
    pub(super) follows: Vec<Follow>,
    /// Per link type, its candidates' and the null's weights ([`SizeEvidence`]).
    pub(super) sizes: Vec<(u64, f64, f64)>,
}

/// A send as [`Linker::departures`] holds it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Departure {
    /// Its send time (the node's clock).
    pub(super) send: Time,
    pub(super) conn: u64,
    pub(super) event_ns: Time,
    /// The first arrival on its connection after it, if that is an answer: its receive
    /// time and its sender as link types name it (set when either of the two is taken in
    /// second).
    pub(super) answer: Option<(Time, u64)>,
}

/// A call its node made after another call's answer came back, as a task's next call
/// ([`Linker::follows`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Follow {
    /// Its send time.
    pub(super) send: Time,
    /// When its own answer came back.
    pub(super) answer: Time,
    /// Its link type, as a call following the first call's answer.
    pub(super) kind: u64,
    /// How typical its delay after that answer is ([`CausalDensity::relative`]).
    pub(super) fit: f64,
}

/// How often, in event time, `link` sweeps what the frontier has passed.
pub(super) const SWEEP_NS: Time = 250_000_000;

/// What a node sent or received on one connection, by its local time, with the event time
/// of the newest entry. Local times are in the node's own clock, which may be far from the
/// frontier's: entries are trimmed by the span of local time they cover, the log dropped by
/// event time.
#[derive(Debug)]
pub(super) struct ConnLog<T> {
    pub(super) newest_event_ns: Time,
    /// Inline up to two: most connections carry one request and its answer (a
    /// connection per request), and a heap allocation per connection cost more than the
    /// rest of its bookkeeping.
    pub(super) entries: SmallVec<[(Time, T); 2]>,
}

impl<T> Default for ConnLog<T> {
    fn default() -> Self {
        ConnLog {
            newest_event_ns: 0,
            entries: SmallVec::new(),
        }
    }
}

impl<T: Copy> ConnLog<T> {
    pub(super) fn insert(&mut self, local_ns: Time, event_ns: Time, value: T) {
        let i = self.entries.partition_point(|e| e.0 <= local_ns);
        self.entries.insert(i, (local_ns, value));
        self.newest_event_ns = self.newest_event_ns.max(event_ns);
    }

    /// The latest entry before `t` (`inclusive`: at or before).
    pub(super) fn before(&self, t: Time, inclusive: bool) -> Option<(Time, T)> {
        let i = self
            .entries
            .partition_point(|e| e.0 < t || (inclusive && e.0 == t));
        i.checked_sub(1).map(|i| self.entries[i])
    }

    /// The first entry after `t`.
    pub(super) fn after(&self, t: Time) -> Option<(Time, T)> {
        let i = self.entries.partition_point(|e| e.0 <= t);
        self.entries.get(i).copied()
    }

    /// Drops entries more than `span` of local time older than the newest, keeping one.
    pub(super) fn trim(&mut self, span: Time) {
        let Some(newest) = self.entries.last().map(|e| e.0) else {
            return;
        };
        let old = self
            .entries
            .iter()
            .take(self.entries.len() - 1)
            .take_while(|e| e.0.saturating_add(span) < newest)
            .count();
        if old > 0 {
            self.entries.drain(..old);
        }
    }
}

/// A send in a connection's log: the task it belongs to, once linked, and its size.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sent {
    pub(super) task: Option<u64>,
    pub(super) bytes: Option<u64>,
}

/// The two latest requests' local times on a connection, older first (`None`: not seen),
/// and the newest one's event time ([`Linker::requests`]).
pub(super) type LatestRequests = ([Option<Time>; 2], Time);

/// What a node sent and received on one connection.
#[derive(Debug, Default)]
pub(super) struct Conn {
    /// The node's sends, in its clock, with the task each belongs to and its size.
    pub(super) sends: ConnLog<Sent>,
    /// The arrivals (receive time in the node's clock, id, whether a request, the sender as
    /// link types name it).
    pub(super) recvs: ConnLog<(u64, bool, u64)>,
    /// Messages it has carried, up to 255: a connection that carried one exchange (a
    /// request and its answer, or less) is kept only as long as what it holds can be looked
    /// for, one that carried more as long as a connection kept alive is told.
    pub(super) carried: u8,
}

impl Conn {
    /// Whether it carried more than one exchange.
    pub(super) fn reused(&self) -> bool {
        self.carried > 2
    }

    /// Trims both logs to `keep` of local time, and forgets a log whose newest entry is
    /// older than `before` (as if it had never been); whether anything is left.
    pub(super) fn expire(&mut self, keep: Time, before: Time) -> bool {
        self.sends.trim(keep);
        if self.sends.newest_event_ns < before {
            self.sends = ConnLog::default();
        }
        self.recvs.trim(keep);
        if self.recvs.newest_event_ns < before {
            self.recvs = ConnLog::default();
        }
        self.sends.newest_event_ns != 0 || self.recvs.newest_event_ns != 0
    }
}

/// A request a node serves, and what it has received for it so far.
pub(super) struct Task {
    /// The request's event time.
    pub(super) event_ns: Time,
    /// The reply: the node's first send on the request's connection after the request, once
    /// known (kept current by [`Linker::depart`] and at the request's insertion, whichever
    /// comes first).
    pub(super) reply_ns: Option<Time>,
    /// The reply's size, if known.
    pub(super) reply_bytes: Option<u64>,
    /// The endpoint the request came to ([`endpoint_key`]): where the node serves it.
    pub(super) served: u64,
    /// The connection the request came on, as the node's connection logs key it.
    pub(super) conn: u64,
    /// Whether that connection brought a request before (it is kept alive).
    pub(super) persistent: bool,
    /// The request and the answers to the calls made for it: (receive time, id, the
    /// sender's key in link types, whether a request), by receive time.
    pub(super) arrivals: TaskArrivals,
    /// The probability that every call given to it so far is its: the product of the
    /// probabilities `link` gave their causes.
    pub(super) chain: f32,
    /// How many calls were given to it so far.
    pub(super) calls: u8,
}

/// A task's arrivals: (receive time, id, the sender's key in link types, whether a request),
/// by receive time; inline up to two (the request and one answer: most tasks).
pub(super) type TaskArrivals = SmallVec<[(Time, u64, u64, bool); 2]>;
