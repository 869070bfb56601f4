//! `Linker`: construction, taking arrivals in, expiry (what frees the state) and the
//! lookups of connections and tasks.

use super::*;

impl Linker {
    pub(super) fn new(config: LinkConfig) -> Self {
        Linker {
            config,
            node_tasks: FastMap::default(),
            taskless: FastMap::default(),
            one_sided: FastMap::default(),
            estimates: FastMap::default(),
            conns: FastMap::default(),
            requests: FastMap::default(),
            densities: FastMap::default(),
            departures: FastMap::default(),
            causal: FastMap::default(),
            spontaneity: FastMap::default(),
            typical: FastMap::default(),
            reply_gaps: FastMap::default(),
            size_evidence: FastMap::default(),
            parent_sizes: FastMap::default(),
            reply_sizes: FastMap::default(),
            sizes: FastMap::default(),
            affinity: FastMap::default(),
            answers: FastMap::default(),
            first_arrival: FastMap::default(),
            tasks: FastMap::default(),
            caused: FastMap::default(),
            ports: Ports::with_idle(config.idle_ns),
            last_expiry: 0,
            last_sweep: 0,
            causes: ChildWaits::default(),
            horizon_ns: config.max_delay_ns,
            horizon_at: 0,
            lookahead: LookAhead::new(config.order_slack_ns),
            scratch: Scratch::default(),
            matching: Matching::default(),
        }
    }

    /// A linker that starts afresh but for what this one learned: the causal delay, gap,
    /// reply-gap and typical-reply densities, the calls' spontaneous shares, the size and
    /// reply-size evidence, and the port evidence.
    /// (The delay estimates, buckets of a sliding window in time order, start afresh too:
    /// they stand in only while a type has not matured.)
    pub(super) fn relearned(self) -> Self {
        Linker {
            densities: self.densities,
            causal: self.causal,
            spontaneity: self.spontaneity,
            typical: self.typical,
            reply_gaps: self.reply_gaps,
            size_evidence: self.size_evidence,
            parent_sizes: self.parent_sizes,
            reply_sizes: self.reply_sizes,
            affinity: self.affinity,
            ports: self.ports,
            lookahead: self.lookahead,
            ..Linker::new(self.config)
        }
    }

    /// How long `link` keeps what it received: `2·(x + keep_margin)`, with `x` as learned
    /// ([`Linker::horizon_ns`]).
    pub(super) fn keep_ns(&self) -> Time {
        self.config.keep_with(self.horizon_ns)
    }

    /// Notes the cause taken for a send of `node` (`delay_ns` before it, at event time
    /// `event_ns`), and works `x` out again once every [`SWEEP_NS`] of event time: twice the
    /// longest of the nodes' waits for a child (each twice the 99.9th percentile of its
    /// causes' delays), at most `max_delay_ns`, and `max_delay_ns` while any sending node
    /// has too little evidence. It grows to at most twice itself plus the keep margin at a time,
    /// less than what a sweep keeps (`2·(x + keep_margin)`), so that what a scan after a sweep
    /// looks for was kept ([`Linker::expire`]); it is
    /// worked out as sends are decided, in event-time order, so it does not depend on how
    /// the input was batched.
    pub(super) fn learn_horizon(&mut self, node: u64, delay_ns: Time, event_ns: Time) {
        self.causes.child(node, delay_ns);
        if event_ns < self.horizon_at.saturating_add(SWEEP_NS) {
            return;
        }
        self.horizon_at = event_ns;
        let max = self.config.max_delay_ns;
        let learned = self.causes.longest(max).saturating_mul(2).min(max);
        let grow = self
            .horizon_ns
            .saturating_mul(2)
            .saturating_add(self.config.keep_margin_ns);
        self.horizon_ns = learned.min(grow);
    }

    // Arrivals come boxed from the reorder buffer; unboxing would copy them.
    #[allow(clippy::boxed_local)]
    pub(super) fn insert(&mut self, mut a: Box<Arrival>) {
        let ends =
            self.ports
                .observe_message(&a.src_endpoint, &a.dst_endpoint, a.from, a.to, a.event_ns);
        a.request = ends.dst_fixed;
        // Clients are many nodes of one kind: their messages share a link type.
        a.kind_from = if ends.src_client { CLIENT_KEY } else { a.from };
        let lull = self.config.keep_ns();
        self.first_arrival
            .entry(a.to)
            .or_insert(FirstArrival {
                first_local: a.local_ns,
                newest_local: a.local_ns,
                newest_event: a.event_ns,
            })
            .note(a.local_ns, a.event_ns, lull);
        self.sizes.insert(a.id, (a.bytes, a.event_ns));
        let arrived = Arrived {
            id: a.id,
            from: a.from,
            local_ns: a.local_ns,
            event_ns: a.event_ns,
            request: a.request,
            kind_from: a.kind_from,
            conn: a.conn,
        };
        if a.one_sided {
            insert_by_local(self.one_sided.entry(a.to).or_default(), arrived);
            return;
        }
        // A connection that brought another request within a quarter of what the state
        // keeps before this one is kept alive between requests ([`Affinity`] learns from
        // those alone). Within that span an earlier request is always still held, so the
        // answer does not depend on when sweeps ran.
        let alive_ns = self.config.keep_ns() / 4;
        let persistent = a.request && {
            // The two latest, older first (`None`: not seen).
            let ([older, newer], newest_event) = self
                .requests
                .entry((a.to, a.conn))
                .or_insert(([None; 2], 0));
            let alive = [*older, *newer]
                .into_iter()
                .flatten()
                .any(|t| t <= a.local_ns && t.saturating_add(alive_ns) >= a.local_ns);
            if newer.is_none_or(|n| a.local_ns > n) {
                *older = *newer;
                *newer = Some(a.local_ns);
            } else if older.is_none_or(|o| a.local_ns > o) {
                *older = Some(a.local_ns);
            }
            *newest_event = (*newest_event).max(a.event_ns);
            alive
        };
        self.lookahead.received(a.to, a.local_ns, a.event_ns);
        let c = self.conns.entry((a.to, a.conn)).or_default();
        c.recvs
            .insert(a.local_ns, a.event_ns, (a.id, a.request, a.kind_from));
        c.carried = c.carried.saturating_add(1);
        if !a.request {
            let list = self.answers.entry(a.to).or_default();
            let i = partition_point_from_back(list, |x| x.0 <= a.local_ns);
            list.insert(i, (a.local_ns, a.event_ns, a.kind_from));
            // The answer to the node's latest send on the connection before it.
            if let Some((s, _)) = c.sends.before(a.local_ns, false) {
                if let Some(list) = self.departures.get_mut(&a.to) {
                    let i = partition_point_from_back(list, |d| d.send < s);
                    for d in list.range_mut(i..).take_while(|d| d.send == s) {
                        if d.conn == a.conn && d.answer.is_none_or(|x| a.local_ns < x.0) {
                            d.answer = Some((a.local_ns, a.kind_from));
                        }
                    }
                }
            }
        }
        let sends = &c.sends;
        let entry = (a.local_ns, a.id, a.kind_from, a.request);
        if a.request {
            // Its reply, if sent already.
            // Its reply, if sent already (a send may be taken in before the arrival it
            // answers, as both are taken in before the children after them).
            let reply = sends.after(a.local_ns);
            let reply_ns = reply.map(|s| s.0);
            if let Some(r) = reply_ns {
                self.lookahead.replied(a.to, a.local_ns, r, a.event_ns);
            }
            self.tasks.insert(
                a.id,
                Box::new(Task {
                    event_ns: a.event_ns,
                    reply_ns,
                    reply_bytes: reply.and_then(|s| s.1.bytes),
                    served: endpoint_key(&a.dst_endpoint),
                    conn: a.conn,
                    persistent,
                    arrivals: smallvec::smallvec![entry],
                    chain: 1.0,
                    calls: 0,
                }),
            );
            self.node_tasks.entry(a.to).or_default().insert(TaskRef {
                request_ns: a.local_ns,
                task: a.id,
                reply_ns,
                event_ns: a.event_ns,
            });
            return;
        }
        // The answer to a call linked already joins the call's task; any other arrival
        // waits for its call to be linked.
        let task = sends
            .before(a.local_ns, false)
            .and_then(|s| s.1.task)
            .and_then(|t| self.tasks.get_mut(&t));
        match task {
            Some(task) => add_arrival(&mut task.arrivals, entry),
            None => insert_by_local(self.taskless.entry(a.to).or_default(), arrived),
        }
    }

    /// Frees what linking has passed. `linked` is the time below which every child has
    /// been linked (all later ones are at or after it). Everything is measured from it,
    /// not from the frontier, which runs ahead of it by the lateness, the order slack and
    /// any open match window, and by more while input comes faster than it is linked:
    /// state kept for `keep_ns` before the messages still to link is there whenever a sweep
    /// runs, and state whose dropping a later message would notice is dropped only when
    /// that message would find it stale anyway (see [`stale`]), so the output does not
    /// depend on when sweeps ran. (Measured from the frontier, a task open for 4.5 s was
    /// there or not by how far the input had run ahead: the linking harness's patterns
    /// changed with the sweep interval and with the machine's speed.)
    pub(super) fn expire(&mut self, linked: Time) {
        // A sweep visits every connection and task held: once per `SWEEP_NS` of event time,
        // not at every activation.
        // Under memory pressure the sweeps come as often as what they keep is short.
        let keep = self.keep_ns();
        if linked < self.last_sweep.saturating_add(SWEEP_NS.min(keep.max(1))) {
            return;
        }
        self.last_sweep = linked;
        let before = linked.saturating_sub(keep);
        for map in [&mut self.taskless, &mut self.one_sided] {
            map.retain(|_, list| {
                while list.front().is_some_and(|a| a.event_ns < before) {
                    list.pop_front();
                }
                !list.is_empty()
            });
        }
        self.answers.retain(|_, list| {
            while list.front().is_some_and(|a| a.1 < before) {
                list.pop_front();
            }
            !list.is_empty()
        });
        self.departures.retain(|_, list| {
            while list.front().is_some_and(|d| d.event_ns < before) {
                list.pop_front();
            }
            // Held in send order (the node's clock): where that clock jumped back, sends
            // after the jump sort before older ones that the front alone would keep.
            if list
                .front()
                .zip(list.back())
                .is_some_and(|(f, b)| f.event_ns > b.event_ns)
            {
                list.retain(|d| d.event_ns >= before);
            }
            !list.is_empty()
        });
        self.node_tasks.retain(|_, tasks| tasks.clean(before));
        // A node's first arrival starts afresh after a lull of `keep` (decided as arrivals
        // come); an entry is dropped once its newest arrival is far older than any lull.
        self.first_arrival
            .retain(|_, f| f.newest_event.saturating_add(FIRST_ARRIVAL_IDLE_NS) >= linked);
        // What tells a persistent connection (a request within a quarter of the configured
        // keep before another) is kept that long at least, and so are the logs of the
        // connections that carried more than one exchange (a connection per request, on a
        // busy system most of them, goes with what is kept).
        let alive = keep.max(self.config.keep_ns() / 4);
        let alive_before = linked.saturating_sub(alive);
        self.conns.retain(|_, c| {
            if c.reused() {
                c.expire(alive, alive_before)
            } else {
                c.expire(keep, before)
            }
        });
        self.requests.retain(|_, r| r.1 >= alive_before);
        self.tasks.retain(|_, t| t.event_ns >= before);
        self.sizes.retain(|_, s| s.1 >= before);
        self.caused.retain(|_, c| c.2 >= before);
        let window = self.config.delay_window_ns;
        // What `Estimate::trim` at any later message would empty.
        let width = self.config.bucket_width_ns();
        let trimmed = linked - linked % width;
        self.estimates.retain(|_, e| {
            e.buckets
                .back()
                .is_some_and(|b| b.0.saturating_add(window) > trimmed)
        });
        self.densities
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.causal.retain(|_, d| !stale(d.last_ns, window, linked));
        self.spontaneity
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.typical
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.reply_gaps
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.size_evidence
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.parent_sizes
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.reply_sizes
            .retain(|_, d| !stale(d.last_ns, window, linked));
        self.affinity
            .retain(|_, d| !stale(d.last_ns, window, linked));
        if linked.saturating_sub(self.last_expiry) >= crate::ports::EXPIRY_EVERY_NS {
            self.ports
                .expire(linked.saturating_sub(self.config.idle_ns));
            self.last_expiry = linked;
        }
    }

    /// Records a send before it is linked: `link` looks ahead at the sends up to
    /// `order_slack_ns` after a child, as at the arrivals.
    pub(super) fn depart(
        &mut self,
        node: u64,
        conn: u64,
        send: Time,
        event_ns: Time,
        bytes: Option<u64>,
    ) {
        let answer = self
            .recv_after(node, conn, send)
            .filter(|r| !r.2)
            .map(|r| (r.0, r.3));
        let list = self.departures.entry(node).or_default();
        let i = partition_point_from_back(list, |d| d.send <= send);
        list.insert(
            i,
            Departure {
                send,
                conn,
                event_ns,
                answer,
            },
        );
        self.lookahead.sent(node, send, event_ns);
        let c = self.conns.entry((node, conn)).or_default();
        let previous = c.sends.before(send, false).map(|s| s.0);
        c.sends.insert(send, event_ns, Sent { task: None, bytes });
        c.carried = c.carried.saturating_add(1);
        // This send replies to the requests on the connection since the previous send.
        let recvs = &c.recvs;
        {
            let end = recvs.entries.partition_point(|e| e.0 < send);
            for &(local, (id, request, _)) in recvs.entries[..end].iter().rev() {
                if previous.is_some_and(|p| local <= p) {
                    break;
                }
                let Some(task) = self.tasks.get_mut(&id).filter(|_| request) else {
                    continue;
                };
                if task.reply_ns.is_some_and(|r| r <= send) {
                    continue;
                }
                let old = task.reply_ns.replace(send);
                task.reply_bytes = bytes;
                if old.is_none() {
                    self.lookahead.replied(node, local, send, event_ns);
                }
                // The copy in the node's list of tasks.
                if let Some(tasks) = self.node_tasks.get_mut(&node) {
                    tasks.answer(local, id, old, send);
                }
            }
        }
    }

    /// How long before `at` `node` sent the call answered at `answered` (both in its clock),
    /// if that call is among the node's recent sends; else [`REPLY_GAP_BACK_NS`].
    pub(super) fn since_call(&self, node: u64, at: Time, answered: Time) -> Time {
        self.departures
            .get(&node)
            .and_then(|list| {
                let i = partition_point_from_back(list, |d| d.send < answered);
                list.range(..i)
                    .rev()
                    .take(MAX_CLEAN_SCAN)
                    .find(|d| d.answer.is_some_and(|a| a.0 == answered))
                    .map(|d| at.saturating_sub(d.send))
            })
            .unwrap_or(REPLY_GAP_BACK_NS)
    }

    /// The first arrival at `node` on `conn` after `t` (the answer to a call sent at `t`).
    pub(super) fn recv_after(
        &self,
        node: u64,
        conn: u64,
        t: Time,
    ) -> Option<(Time, u64, bool, u64)> {
        let (r, (id, request, kind_from)) = self.conns.get(&(node, conn))?.recvs.after(t)?;
        Some((r, id, request, kind_from))
    }

    /// The latest arrival at `node` on `conn` at or before `t`.
    pub(super) fn recv_before(&self, node: u64, conn: u64, t: Time) -> Option<(Time, u64, bool)> {
        let (r, (id, request, _)) = self.conns.get(&(node, conn))?.recvs.before(t, true)?;
        Some((r, id, request))
    }

    /// When task `task` is answered (its node's first send on the request's connection
    /// after the request), if that is known yet.
    pub(super) fn reply_of(&self, task: u64) -> Option<Time> {
        self.tasks.get(&task)?.reply_ns
    }

    /// Whether task `task` was answered before `t` (its node sent on the request's
    /// connection since the request came).
    pub(super) fn answered(&self, task: u64, t: Time) -> bool {
        self.reply_of(task).is_some_and(|r| r < t)
    }
}
