//! `Model`: construction, what it has learned, and arrivals: requests open tasks, answers
//! join their calls' tasks.
//!
//! No state of its own: it works on the `Model`'s tables (`model/mod.rs`).

use super::*;

impl Model {
    /// A model with nothing learned.
    pub fn new(config: ModelConfig) -> Self {
        Model {
            config,
            nodes: FastMap::default(),
            delays: Delays::remembering(config.memory),
            composition: Composition::remembering(config.memory),
            sizes: Sizes::remembering(config.memory),
            coincidence: Coincidence::remembering(config.memory),
            others: Coincidence::remembering(config.memory),
            call_coincidence: Coincidence::remembering(config.memory),
            repeats: Repeats::remembering(config.memory),
            durations: Durations::remembering(config.memory),
            learning: Learning::Online,
            finals: Vec::new(),
            score: 0.0,
            decided: 0,
            expired: 0,
            assign: Assign::default(),
            tally: Tally::default(),
            reply_order: FastMap::default(),
        }
    }

    /// A fresh model (no tasks) that decides by what this one learned (in its last batch
    /// pass, if it learns in batch), and learns into a fresh set (`batch`: a pass of
    /// expectation-maximisation) or into the same one.
    pub fn relearned(&self, config: ModelConfig, batch: bool) -> Self {
        let (delays, composition, sizes) = match &self.learning {
            Learning::Batch(next) => (next.0.clone(), next.1.clone(), next.2.clone()),
            Learning::Online => (
                self.delays.clone(),
                self.composition.clone(),
                self.sizes.clone(),
            ),
        };
        let mut m = Model::new(config);
        m.delays = delays;
        m.composition = composition;
        m.sizes = sizes;
        m.coincidence = self.coincidence.clone();
        m.others = self.others.clone();
        m.call_coincidence = self.call_coincidence.clone();
        m.repeats = self.repeats.clone();
        m.durations = self.durations.clone();
        m.reply_order = self.reply_order.clone();
        if batch {
            m.learning = Learning::Batch(Box::new((
                Delays::remembering(config.memory),
                Composition::remembering(config.memory),
                Sizes::remembering(config.memory),
            )));
        }
        m
    }

    /// A model with nothing learned that learns in batch (the first pass of a warm-up).
    pub fn batch(config: ModelConfig) -> Self {
        Model::new(config).relearned(config, true)
    }

    /// The log-likelihood of the final decisions so far.
    pub fn score(&self) -> f64 {
        self.score
    }

    /// Departures decided so far.
    pub fn decided(&self) -> u64 {
        self.decided
    }

    /// Open tasks and awaited answers forgotten so far.
    pub fn expired(&self) -> u64 {
        self.expired
    }

    /// The order prior of `node`'s replies: from how often, where the structure alone
    /// decided, the task replied to was the longest waiting of two (`1/(1 + rho)`), with a
    /// uniform prior of one each way; 1 (no preference) while nothing was seen.
    pub(super) fn reply_rho(&self, node: u64) -> f64 {
        let (n, first) = self.reply_order.get(&node).copied().unwrap_or((0.0, 0.0));
        let p = (first + 1.0) / (n + 2.0);
        ((1.0 - p) / p).clamp(0.02, 1.0)
    }

    /// The learned delays, for debugging.
    pub fn delays(&self) -> &Delays {
        &self.delays
    }

    /// The model's parameters.
    pub fn config(&self) -> ModelConfig {
        self.config
    }

    /// How types and classes name `node`: [`CLIENT`] if it serves no requests.
    pub(super) fn kind_of(&self, node: u64) -> u64 {
        if self.nodes.get(&node).is_some_and(|n| n.served) {
            node
        } else {
            CLIENT
        }
    }

    /// Moves the final decisions made since the last call into `out`.
    pub fn take_final(&mut self, out: &mut Vec<(u64, Decision)>) {
        out.append(&mut self.finals);
    }

    /// Takes in an arrival.
    pub fn arrive(&mut self, s: &Seen) {
        let Some(at) = s.recv_local.or(s.send_local) else {
            return;
        };
        let atype = arrival_type(self.kind_of(s.src), s.role);
        let bin = size_bin(s.bytes);
        match &mut self.learning {
            Learning::Online => self.sizes.learn(SizeFact::Arrival { ptype: atype, bin }),
            Learning::Batch(next) => next.2.learn(SizeFact::Arrival { ptype: atype, bin }),
        }
        let reach = self.config.max_delay_ns;
        let node = self.nodes.entry(s.dst).or_default();
        node.newest = node.newest.max(at);
        match s.role {
            Role::Request => {
                node.served = true;
                if let Some(q) = node.queue.as_mut() {
                    q.arrive(at, s.id, conn_key(s.conn, s.src), reach);
                }
                let task = Task {
                    id: s.id,
                    caller: s.src,
                    class: mix(s.dst, atype),
                    opened: at,
                    conn: s.conn,
                    arrivals: smallvec::smallvec![(at, s.id, atype, bin)],
                    outstanding: SmallVec::new(),
                    kids: Kids::default(),
                    signature: 0,
                    foreign: false,
                };
                insert_task(node, task);
                remember(node, (at, s.id, atype, bin, s.id, s.conn));
            }
            Role::Response => {
                let paired = node.paired.remove(&s.id);
                match paired {
                    Some((call, _, foreign)) => {
                        self.answer(s.dst, call, foreign, at, (s.id, s.conn), atype, bin)
                    }
                    None => {
                        node.unpaired.insert(s.id, (at, atype, bin));
                        self.tally.unpaired_answers += 1;
                    }
                }
            }
        }
    }

    /// An answer to `call` arrives: it joins the call's task (if the call is in one), and is
    /// remembered among the node's recent arrivals. One that another task's arrival caused
    /// (`foreign`: the job a queue handed a worker's pop) carries that task's path into its
    /// receiver, whose next call may be its doing, client or not; an answer to a client's
    /// own request does not (a client's next request starts a path, WAP5 §2.5.1).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn answer(
        &mut self,
        node: u64,
        call: u64,
        foreign: bool,
        at: Time,
        (id, conn): (u64, Option<u64>),
        atype: u64,
        bin: u8,
    ) {
        let task = self
            .nodes
            .get(&node)
            .and_then(|n| n.calls.get(&call))
            .map(|c| c.0);
        self.join(node, call, at, id, atype, bin);
        if let Some(n) = self.nodes.get_mut(&node) {
            // A foreign answer is marked so even where its call was made in a task: a
            // worker's pop made after one job brings the next.
            let task = match (task, foreign) {
                (_, true) => FOREIGN,
                (Some(t), false) => t,
                (None, false) => 0,
            };
            remember(n, (at, id, atype, bin, task, conn));
        }
    }

    /// An answer (`id`, type `atype`, received at `at`) to `call` joins the call's task at
    /// `node`; the call is no longer decided again with its class, and is held until its
    /// task goes on from the answer (`model/answered.rs`).
    pub(super) fn join(&mut self, node: u64, call: u64, at: Time, id: u64, atype: u64, bin: u8) {
        let Some(mut n) = self.nodes.remove(&node) else {
            return;
        };
        let mut held = None;
        for set in n.provisional.values_mut() {
            if let Some(i) = set.iter().position(|p| p.id == call) {
                held = Some(set.remove(i));
                break;
            }
        }
        n.provisional.retain(|_, v| !v.is_empty());
        let joined = match n.calls.remove(&call) {
            None => {
                self.tally.answers_without_call += 1;
                false
            }
            Some((task, _)) => {
                reweigh_from(&mut n, at);
                match n.tasks.iter_mut().find(|t| t.id == task) {
                    Some(t) => {
                        add_arrival(t, (at, id, atype, bin));
                        t.outstanding.retain(|c| *c != call);
                        true
                    }
                    None => {
                        self.tally.calls_without_task += 1;
                        false
                    }
                }
            }
        };
        match held {
            Some(p) if joined => self.hold_answered(&mut n, p, (at, id, atype, bin)),
            Some(p) => self.finish(&mut n, p),
            None => {}
        }
        self.nodes.insert(node, n);
    }

    /// Decides the task of a departure, and takes it in.
    pub fn depart(&mut self, s: &Seen) {
        let Some(at) = s.send_local else {
            self.finals.push((s.id, Decision::default()));
            return;
        };
        self.decided += 1;
        let to = self.kind_of(s.dst);
        let class = departure_class(s.src, to, s.role);
        let node = self.nodes.entry(s.src).or_default();
        node.newest = node.newest.max(at);
        if s.role == Role::Request && !node.served {
            match self.client_call(s, at, class) {
                // Linked to an answer another task caused: the call is decided among the
                // tasks such answers opened.
                None => self.call(s, at, class),
                Some(root) => self.finals.push((s.id, root)),
            }
            return;
        }
        self.finalize_older(s.src, at);
        match s.role {
            Role::Response => self.reply(s, at, to, class),
            Role::Request => self.call(s, at, class),
        }
    }
}
