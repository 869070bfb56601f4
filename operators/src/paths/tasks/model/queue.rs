//! [`Queue`]: what a node whose replies carry other tasks' arrivals (a job queue: the job a
//! producer pushed is the reply to a worker's later pop) knows of its producers, its
//! consumers and the jobs not yet handed out.
//!
//! A reply caused by another task's arrival is found by timing where the pop waited: the push
//! comes, the reply follows at once (`Model::reply`'s cross options, [`super::Coincidence`]).
//! With a backlog the pop is answered at once and the push it hands out came earlier: its
//! timing says "own task" though the job is the push's. A queue hands its jobs out in the
//! order they came (FIFO: redis lists popped from the other end, message brokers), each job
//! once. So at a node that has carried jobs, a reply on a connection whose replies carry jobs
//! (learned where no backlog could mislead: no job waited when its pop came) carries the
//! oldest job not yet handed out from a connection whose requests are jobs (learned from the
//! share of its requests some reply carried).
//!
//! Input: the node's requests ([`Queue::arrive`]), its replies' decisions
//! ([`Queue::count_reply`], [`Queue::carry`]). Output: the job a reply would carry
//! ([`Queue::oldest`]) and how likely its connection and the job's are a consumer's and a
//! producer's. State: two faded shares per connection (or caller, where the input names no
//! connection) that sent or received within `task_timeout_ns`, freed after it
//! ([`Queue::expire`]); the jobs of the last `max_delay_ns` (at most [`MAX_JOBS`]), freed once
//! handed out or older. Only nodes that have carried a job have one. Cost: a reply reads the
//! jobs from the oldest until the first one a producer's, in practice a few.

use std::collections::VecDeque;

use super::*;

/// Most jobs remembered per node: beyond, the oldest are forgotten (not handed out by any
/// reply: a backlog that deep is told apart from chance by nothing here).
pub(super) const MAX_JOBS: usize = 1024;
/// Replies (or requests) a connection's share remembers, the newest weighing most.
const SHARE_MEMORY: f32 = 64.0;
/// What marks a caller's key where the input names no connection.
const NO_CONN: u64 = 0x6e6f_636f_6e6e;

/// A faded share: of `n` events, `k` were hits; `seen` is the latest event's time.
#[derive(Clone, Copy, Debug, Default)]
struct Share {
    n: f32,
    k: f32,
    seen: Time,
}

impl Share {
    /// Counts an event at `at`, a hit or not.
    fn count(&mut self, hit: bool, at: Time) {
        self.n += 1.0;
        self.k += f32::from(u8::from(hit));
        if fade(&mut self.n, SHARE_MEMORY) {
            self.k /= 2.0;
        }
        self.touch(at);
    }

    /// Makes one of the events counted a hit, at `at`.
    fn hit(&mut self, at: Time) {
        self.k = (self.k + 1.0).min(self.n);
        self.touch(at);
    }

    /// Notes that the connection was seen at `at`.
    fn touch(&mut self, at: Time) {
        self.seen = self.seen.max(at);
    }

    /// The share, with half a hit and half a miss as its prior (Jeffreys): 1/2 when nothing
    /// was seen.
    fn p(&self) -> f64 {
        f64::from(self.k + 0.5) / f64::from(self.n + 1.0)
    }
}

/// A request the node received: a job, if its connection is a producer's.
#[derive(Clone, Copy, Debug)]
struct Job {
    at: Time,
    id: u64,
    key: u64,
    carried: bool,
}

/// See the module documentation.
#[derive(Clone, Debug, Default)]
pub(super) struct Queue {
    /// Per connection of the node's replies: of its replies decided with no job waiting
    /// from before their own request, how many carried another task's arrival.
    consumers: FastMap<u64, Share>,
    /// Per connection of the node's requests: of them, how many a reply carried.
    producers: FastMap<u64, Share>,
    /// The node's requests, oldest first.
    jobs: VecDeque<Job>,
}

/// The key of a message's connection: its connection id, else its far end's node.
pub(super) fn conn_key(conn: Option<u64>, far: u64) -> u64 {
    conn.unwrap_or_else(|| mix(far, NO_CONN))
}

/// The log-odds of a probability, kept finite.
pub(super) fn logit(p: f64) -> f64 {
    let p = p.clamp(1e-3, 1.0 - 1e-3);
    (p / (1.0 - p)).ln()
}

impl Queue {
    /// A request `id` received at `at` on connection `key`; `reach` is how long a job waits
    /// at most to be handed out.
    pub(super) fn arrive(&mut self, at: Time, id: u64, key: u64, reach: Time) {
        self.producers.entry(key).or_default().count(false, at);
        let i = self.jobs.partition_point(|j| j.at <= at);
        self.jobs.insert(
            i,
            Job {
                at,
                id,
                key,
                carried: false,
            },
        );
        let newest = self.jobs.back().map_or(at, |j| j.at);
        while self.jobs.len() > MAX_JOBS
            || self
                .jobs
                .front()
                .is_some_and(|j| j.carried || j.at.saturating_add(reach) < newest)
        {
            self.jobs.pop_front();
        }
    }

    /// Whether `key` is a producer's: most of its requests were carried by replies.
    fn producer(&self, key: u64) -> f64 {
        self.producers.get(&key).map_or(0.5, Share::p)
    }

    /// The share of replies on `key` that carry a job (1/2 when none was seen).
    pub(super) fn consumer(&self, key: u64) -> f64 {
        self.consumers.get(&key).map_or(0.5, Share::p)
    }

    /// The oldest job not handed out, received at or before `at`, from a producer's
    /// connection, other than request `own`, after the `skip` oldest such: (its id, receive
    /// time, its connection's producer share).
    pub(super) fn oldest(&self, at: Time, own: u64, skip: usize) -> Option<(u64, Time, f64)> {
        self.jobs
            .iter()
            .take_while(|j| j.at <= at)
            .filter(|j| !j.carried && j.id != own)
            .map(|j| (j.id, j.at, self.producer(j.key)))
            .filter(|j| j.2 > 0.5)
            .nth(skip)
    }

    /// Counts a reply on `key` at `at`: whether a job was waiting from before its own
    /// request (`backlog`: then its timing says nothing of what it carries) and whether it
    /// was decided to carry another task's arrival.
    pub(super) fn count_reply(&mut self, key: u64, backlog: bool, carried: bool, at: Time) {
        let share = self.consumers.entry(key).or_default();
        if backlog {
            share.touch(at);
        } else {
            share.count(carried, at);
        }
    }

    /// Request `id` was handed out by a reply (it caused one), while `ahead` pops that came
    /// before the reply's still waited. The jobs before it but the `ahead` newest (those
    /// pops' jobs) were handed out before it, in the queue's order, whether or not a reply
    /// was seen to carry them (a reply lost, or decided otherwise): forgotten, lest each
    /// later reply be given the job before its own.
    pub(super) fn carry(&mut self, id: u64, ahead: usize) {
        let Some(i) = self.jobs.iter().rposition(|j| j.id == id) else {
            return;
        };
        let j = &mut self.jobs[i];
        if !j.carried {
            j.carried = true;
            let (key, at) = (j.key, j.at);
            self.producers.entry(key).or_default().hit(at);
        }
        let mut kept = 0;
        let mut from = i;
        while kept < ahead && from > 0 {
            from -= 1;
            let j = &self.jobs[from];
            kept += usize::from(!j.carried && self.producer(j.key) > 0.5);
        }
        self.jobs.drain(..from);
        while self.jobs.front().is_some_and(|j| j.carried) {
            self.jobs.pop_front();
        }
    }

    /// Forgets the connections idle since before `before`.
    pub(super) fn expire(&mut self, before: Time) {
        self.consumers.retain(|_, s| s.seen >= before);
        self.producers.retain(|_, s| s.seen >= before);
        while self.jobs.front().is_some_and(|j| j.at < before) {
            self.jobs.pop_front();
        }
    }
}
