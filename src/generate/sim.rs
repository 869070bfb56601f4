//! Instances of tracelets in time: client loops with think times, delays drawn from each
//! message's family, skipped calls (cache hits), network latency; and the mean per-node
//! parallelism such a run has.
//!
//! Each tracelet runs in `parallel × multiplier` client loops; each loop is one client host
//! that runs an instance, waits a uniform think time (scaled by `think_scale`), and starts the
//! next. [`Simulator`] yields instances in order of start time; all times are true times in ns
//! relative to the start of the trace.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};

use super::config::{CLIENT, System};

/// A host: a server node (index into `System::nodes`) or a client loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Host {
    /// A server node.
    Server(u32),
    /// A client host (one per client loop).
    Client(u32),
}

/// One generated message, in true time.
#[derive(Clone, Debug)]
pub struct GenMessage {
    /// Global sequence number.
    pub id: u64,
    /// Its tracelet message index.
    pub index: usize,
    /// Causal parent within the instance.
    pub parent: Option<usize>,
    /// Sender.
    pub from: Host,
    /// Receiver.
    pub to: Host,
    /// Send time of its first byte.
    pub send_ns: f64,
    /// Arrival time of its last byte.
    pub recv_ns: f64,
    /// One-way latency.
    pub latency_ns: f64,
    /// Size.
    pub bytes: u32,
    /// For a return: the index of the call it answers.
    pub answers: Option<usize>,
}

/// One instance of a tracelet.
#[derive(Clone, Debug)]
pub struct Instance {
    /// Sequence number.
    pub id: u64,
    /// Tracelet index.
    pub tracelet: usize,
    /// Start time.
    pub start_ns: f64,
    /// Messages in tracelet order.
    pub messages: Vec<GenMessage>,
}

impl Instance {
    /// Time the last message arrives.
    pub fn end_ns(&self) -> f64 {
        self.messages
            .iter()
            .map(|m| m.recv_ns)
            .fold(self.start_ns, f64::max)
    }
}

/// Gap between consecutive segments of one message (about 1 Gbit/s for full segments).
pub const SEGMENT_GAP_NS: f64 = 12_000.0;

struct Loop {
    tracelet: usize,
    client: u32,
}

/// Generates instances in start order.
pub struct Simulator<'a> {
    system: &'a System,
    rng: Xoshiro256PlusPlus,
    loops: Vec<Loop>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    think_scale: f64,
    next_instance: u64,
    next_message: u64,
}

impl<'a> Simulator<'a> {
    /// A simulator with `multiplier` loops per configured loop and think times scaled by
    /// `think_scale`.
    pub fn new(system: &'a System, seed: u64, multiplier: u32, think_scale: f64) -> Self {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut loops = Vec::new();
        let mut heap = BinaryHeap::new();
        for (t, tracelet) in system.tracelets.iter().enumerate() {
            for _ in 0..tracelet.parallel * multiplier.max(1) {
                let client = loops.len() as u32;
                loops.push(Loop {
                    tracelet: t,
                    client,
                });
                // Desynchronise the loops' first starts over one think time.
                let first = rng.random::<f64>() * tracelet.think_ns.1 * think_scale;
                heap.push(Reverse((first as u64, client)));
            }
        }
        Simulator {
            system,
            rng,
            loops,
            heap,
            think_scale,
            next_instance: 0,
            next_message: 0,
        }
    }

    /// Number of client hosts.
    pub fn clients(&self) -> usize {
        self.loops.len()
    }

    fn gauss(&mut self, mean: f64, sd: f64) -> f64 {
        if sd <= 0.0 {
            return mean;
        }
        match Normal::new(mean, sd) {
            Ok(n) => n.sample(&mut self.rng),
            Err(_) => mean,
        }
    }

    /// One-way latency between the roles of two hosts.
    fn latency(&mut self, from_role: &str, to_role: &str) -> f64 {
        let mean = self.system.latency_ns(from_role, to_role);
        let l = self.gauss(mean, mean * self.system.config.network_jitter);
        l.max(mean * 0.5).max(1_000.0)
    }

    fn role_of(&self, h: Host) -> &str {
        match h {
            Host::Server(i) => &self.system.nodes[i as usize].role,
            Host::Client(_) => CLIENT,
        }
    }
}

impl Iterator for Simulator<'_> {
    type Item = Instance;

    fn next(&mut self) -> Option<Instance> {
        let Reverse((start, loop_id)) = self.heap.pop()?;
        let tracelet_index = self.loops[loop_id as usize].tracelet;
        let client = self.loops[loop_id as usize].client;
        let system = self.system;
        let tracelet = &system.tracelets[tracelet_index];
        // Bind slots to hosts: distinct slots of one role get distinct nodes when possible.
        let mut hosts: Vec<Host> = Vec::with_capacity(tracelet.slots.len());
        for slot in &tracelet.slots {
            if slot.role == CLIENT {
                hosts.push(Host::Client(client));
                continue;
            }
            let candidates = &system.roles[&slot.role];
            let free: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|n| !hosts.contains(&Host::Server(*n as u32)))
                .collect();
            let pool = if free.is_empty() {
                candidates.clone()
            } else {
                free
            };
            let pick = pool[self.rng.random_range(0..pool.len())];
            hosts.push(Host::Server(pick as u32));
        }
        let mss = system.config.mss.max(1) as f64;
        let start_ns = start as f64;
        let mut messages: Vec<GenMessage> = Vec::with_capacity(tracelet.messages.len());
        // Per template message: whether it was skipped, and what its arrival means to the
        // messages that wait for it: (time, the template message that is their parent).
        // A skipped subtree stands for the moment its call would have been sent, caused by
        // the call's own parent.
        let mut skipped: Vec<Option<(f64, Option<usize>)>> = vec![None; tracelet.messages.len()];
        let mut effect: Vec<(f64, Option<usize>)> = Vec::with_capacity(tracelet.messages.len());
        for (i, t) in tracelet.messages.iter().enumerate() {
            let from = hosts[t.from];
            let to = hosts[t.to];
            let (parent, send_ns) = if t.after.is_empty() {
                (None, start_ns)
            } else {
                let (p, trigger) = t.after.iter().map(|&a| (effect[a].1, effect[a].0)).fold(
                    (effect[t.after[0]].1, f64::MIN),
                    |best, x| {
                        if x.1 > best.1 { x } else { best }
                    },
                );
                (p, trigger + t.delay.sample(&mut self.rng))
            };
            if t.skip > 0.0 && skipped[i].is_none() && self.rng.random::<f64>() < t.skip {
                // What waits for the subtree's return goes on when the call would have been
                // sent, and its parent is the call's.
                for &j in &t.subtree {
                    skipped[j] = Some((send_ns, parent));
                }
            }
            if let Some(stand_in) = skipped[i] {
                effect.push(stand_in);
                continue;
            }
            effect.push((f64::NAN, Some(i)));
            let bytes = ((t.bytes as f64) * self.rng.random_range(0.9..1.1))
                .round()
                .max(1.0) as u32;
            let latency_ns = {
                let (a, b) = (self.role_of(from).to_owned(), self.role_of(to).to_owned());
                self.latency(&a, &b)
            };
            let segments = (bytes as f64 / mss).ceil().max(1.0);
            let recv_ns = send_ns + (segments - 1.0) * SEGMENT_GAP_NS + latency_ns;
            effect[i].0 = recv_ns;
            messages.push(GenMessage {
                id: 0,
                index: i,
                parent,
                from,
                to,
                send_ns,
                recv_ns,
                latency_ns,
                bytes,
                answers: t.answers,
            });
        }
        // Positions in the instance instead of template indices, once calls were skipped.
        if skipped.iter().any(Option::is_some) {
            let mut position = vec![usize::MAX; skipped.len()];
            for (k, m) in messages.iter().enumerate() {
                position[m.index] = k;
            }
            for m in &mut messages {
                m.index = position[m.index];
                m.parent = m.parent.map(|p| position[p]);
                m.answers = m.answers.map(|a| position[a]);
            }
        }
        for m in &mut messages {
            m.id = self.next_message;
            self.next_message += 1;
        }
        let instance = Instance {
            id: self.next_instance,
            tracelet: tracelet_index,
            start_ns,
            messages,
        };
        self.next_instance += 1;
        let think = self
            .rng
            .random_range(tracelet.think_ns.0..=tracelet.think_ns.1)
            * self.think_scale;
        let next = instance.end_ns() + think;
        self.heap.push(Reverse((next as u64, loop_id)));
        Some(instance)
    }
}

/// Mean per-node parallelism as Project 5 defines it (§5.1.2, Table 1): the average number of
/// candidate parents of each child, where a child is a call pair a server node makes (its
/// call's send to its return's arrival, at that node) and its candidate parents are the call
/// pairs that node serves which enclose it (the call into the node arrived before the child
/// was sent; the node answered it after the child's return arrived), the true parent among
/// them. Per node, the average over that node's children (`None` for a node that makes no
/// calls); overall, the average over all children.
///
/// Streaming: a child is counted once every instance that starts before it has been added
/// (the frontier passed its send), and a served call is kept until its answer is older than
/// every child still to count, so state follows the calls in progress.
#[derive(Default)]
pub struct ParallelismMeter {
    /// Per node, the calls it serves still able to enclose a child: (arrival, answer).
    served: Vec<Vec<(f64, f64)>>,
    /// Children waiting for the frontier: (send, return's arrival, node).
    children: BinaryHeap<Reverse<(u64, u64, u32)>>,
    nodes: Vec<NodeMeter>,
    /// Children sent before this are not counted.
    from_ns: f64,
}

#[derive(Clone, Copy, Default)]
struct NodeMeter {
    children: u64,
    candidates: u64,
}

impl ParallelismMeter {
    /// A meter for `nodes` server nodes.
    pub fn new(nodes: usize) -> Self {
        ParallelismMeter {
            served: vec![Vec::new(); nodes],
            children: BinaryHeap::new(),
            nodes: vec![NodeMeter::default(); nodes],
            from_ns: 0.0,
        }
    }

    /// Counts only the children sent from `from_ns` on (the served calls before still count
    /// as their candidate parents).
    pub fn count_from(&mut self, from_ns: f64) {
        self.from_ns = from_ns;
    }

    /// Records the call pairs of an instance.
    pub fn add(&mut self, instance: &Instance) {
        for m in &instance.messages {
            let Some(call) = m.answers else { continue };
            let c = &instance.messages[call];
            if let (Host::Server(node), true) = (m.from, c.to == m.from) {
                self.served[node as usize].push((c.recv_ns, m.send_ns));
            }
            if let (Host::Server(node), true) = (c.from, m.to == c.from) {
                self.children
                    .push(Reverse((c.send_ns as u64, m.recv_ns as u64, node)));
            }
        }
    }

    /// Counts the children sent before `frontier` (every instance that starts before
    /// `frontier` has been added) and forgets the served calls that no child left can be
    /// nested in.
    pub fn advance(&mut self, frontier: f64) {
        while let Some(&Reverse((send, back, node))) = self.children.peek() {
            if (send as f64) >= frontier {
                break;
            }
            self.children.pop();
            let (send, back) = (send as f64, back as f64);
            if send < self.from_ns {
                continue;
            }
            let enclosing = self.served[node as usize]
                .iter()
                .filter(|&&(arrival, answer)| arrival <= send && answer >= back)
                .count();
            let n = &mut self.nodes[node as usize];
            n.children += 1;
            n.candidates += enclosing as u64;
        }
        let oldest = self
            .children
            .peek()
            .map_or(frontier, |Reverse((send, _, _))| {
                (*send as f64).min(frontier)
            });
        for served in &mut self.served {
            served.retain(|&(_, answer)| answer >= oldest);
        }
    }

    /// Per-node parallelism (`None` for nodes that made no calls) and the mean over all
    /// children (0 when there were none).
    pub fn finish(mut self) -> (f64, Vec<Option<f64>>) {
        self.advance(f64::INFINITY);
        let per: Vec<Option<f64>> = self
            .nodes
            .iter()
            .map(|n| (n.children > 0).then(|| n.candidates as f64 / n.children as f64))
            .collect();
        let (children, candidates) = self
            .nodes
            .iter()
            .fold((0, 0), |(c, k), n| (c + n.children, k + n.candidates));
        let mean = if children == 0 {
            0.0
        } else {
            candidates as f64 / children as f64
        };
        (mean, per)
    }
}

/// Measures the mean per-node parallelism of a run over `messages` messages that follow as
/// many others: the loops start together, so a run begins more parallel than it goes on.
pub fn measure(
    system: &System,
    seed: u64,
    multiplier: u32,
    think_scale: f64,
    messages: u64,
) -> f64 {
    let mut meter = ParallelismMeter::new(system.nodes.len());
    let mut count = 0;
    let mut counting = false;
    for instance in Simulator::new(system, seed, multiplier, think_scale) {
        meter.advance(instance.start_ns);
        if !counting && count >= messages {
            meter.count_from(instance.start_ns);
            counting = true;
        }
        count += instance.messages.len() as u64;
        meter.add(&instance);
        if count >= 2 * messages {
            break;
        }
    }
    meter.finish().0
}

/// Finds loop multiplier and think scale giving a mean per-node parallelism close to `target`.
/// Returns (multiplier, think_scale, measured).
pub fn calibrate(system: &System, seed: u64, target: f64, messages: u64) -> (u32, f64, f64) {
    let sample = messages.clamp(5_000, 40_000);
    let (lo_scale, hi_scale) = (1e-4_f64, 1e4_f64);
    let mut multiplier = 1u32;
    let mut busiest = measure(system, seed, multiplier, lo_scale, sample);
    if busiest == 0.0 {
        // No server makes calls: there is nothing to calibrate.
        return (1, 1.0, 0.0);
    }
    while multiplier < 4096 && busiest < target {
        multiplier *= 2;
        busiest = measure(system, seed, multiplier, lo_scale, sample);
    }
    // Parallelism falls as think times grow: bisect on log(scale).
    let (mut lo, mut hi) = (lo_scale.ln(), hi_scale.ln());
    for _ in 0..40 {
        let mid = (lo + hi) / 2.0;
        if measure(system, seed, multiplier, mid.exp(), sample) > target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let scale = ((lo + hi) / 2.0).exp();
    (
        multiplier,
        scale,
        measure(system, seed, multiplier, scale, sample),
    )
}

#[cfg(test)]
mod tests {
    use super::super::config::{System, preset};
    use super::*;

    #[test]
    fn instances_come_in_start_order_with_causal_timing() {
        let s = System::from_toml(preset("children-parallel").unwrap(), "cp").unwrap();
        let mut last = 0.0;
        for inst in Simulator::new(&s, 7, 1, 1.0).take(200) {
            assert!(inst.start_ns >= last);
            last = inst.start_ns;
            for m in &inst.messages {
                if let Some(p) = m.parent {
                    let parent = &inst.messages[p];
                    assert_eq!(parent.to, m.from);
                    assert!(m.send_ns >= parent.recv_ns);
                }
                assert!(m.recv_ns > m.send_ns);
            }
            // B answers A after the later of the two returns.
            let last_msg = &inst.messages[5];
            let p = last_msg.parent.unwrap();
            assert!(
                inst.messages[p].recv_ns >= inst.messages[3].recv_ns.min(inst.messages[4].recv_ns)
            );
            assert_eq!(
                inst.messages[p].recv_ns,
                inst.messages[3].recv_ns.max(inst.messages[4].recv_ns)
            );
        }
    }

    /// Checks an instance's messages: each parent arrived at the sender before it was sent,
    /// each return answers an earlier call between the same hosts, ids run on.
    fn check_causal(inst: &Instance) {
        for (k, m) in inst.messages.iter().enumerate() {
            assert_eq!(m.index, k);
            assert!(m.recv_ns > m.send_ns);
            if let Some(p) = m.parent {
                let parent = &inst.messages[p];
                assert!(p < k);
                assert_eq!(parent.to, m.from);
                assert!(m.send_ns >= parent.recv_ns);
            } else {
                assert_eq!(k, 0);
            }
            if let Some(c) = m.answers {
                let call = &inst.messages[c];
                assert!(c < k && call.answers.is_none());
                assert_eq!((call.from, call.to), (m.to, m.from));
            }
            if k > 0 {
                assert_eq!(m.id, inst.messages[k - 1].id + 1);
            }
        }
    }

    #[test]
    fn skipped_calls_leave_out_their_subtree() {
        let text = r#"
name = "cache"
[[node]]
name = "a1"
role = "a"
[[node]]
name = "b1"
role = "b"
[[node]]
name = "c1"
role = "c"
[[service]]
role = "a"
port = 1
[[service]]
role = "b"
port = 2
[[service]]
role = "c"
port = 3
[[tracelet]]
name = "t"
think_ms = [1, 2]
messages = [
  { from = "client", to = "a" },
  { from = "a", to = "b", after = 0, skip = 0.3, delay_ms = [2, 0] },
  { from = "b", to = "c", after = 1 },
  { from = "c", to = "b", after = 2 },
  { from = "b", to = "a", after = 3 },
  { from = "a", to = "c", after = 4, delay_ms = [1, 0] },
  { from = "c", to = "a", after = 5 },
  { from = "a", to = "client", after = 6 },
]
"#;
        let s = System::from_toml(text, "cache").unwrap();
        let (mut hits, mut n) = (0, 0);
        for inst in Simulator::new(&s, 5, 1, 1.0).take(2_000) {
            check_causal(&inst);
            n += 1;
            match inst.messages.len() {
                8 => {}
                4 => {
                    hits += 1;
                    // a's call to c follows the client's call, 2 ms (the skipped call's
                    // delay) and 1 ms after it arrived.
                    let (first, call) = (&inst.messages[0], &inst.messages[1]);
                    assert_eq!(call.parent, Some(0));
                    assert!((call.send_ns - first.recv_ns - 3e6).abs() < 1.0);
                    assert_eq!(inst.messages[2].answers, Some(1));
                    assert_eq!(inst.messages[3].parent, Some(2));
                }
                other => panic!("{other} messages"),
            }
        }
        let share = f64::from(hits) / f64::from(n);
        assert!((share - 0.3).abs() < 0.04, "skipped {share}");
    }

    #[test]
    fn random_systems_give_causal_instances() {
        for seed in 0..40 {
            let config = super::super::random::system(seed);
            let s = System::from_config(config, "random").unwrap();
            let mut sizes = std::collections::BTreeSet::new();
            for inst in Simulator::new(&s, seed, 1, 1.0).take(300) {
                check_causal(&inst);
                sizes.insert((inst.tracelet, inst.messages.len()));
            }
            assert!(sizes.len() >= 2, "seed {seed}: {sizes:?}");
        }
    }

    /// Builds an instance from (from, to, send, recv, answers) in true ns.
    fn instance(id: u64, messages: &[(Host, Host, f64, f64, Option<usize>)]) -> Instance {
        Instance {
            id,
            tracelet: 0,
            start_ns: messages[0].2,
            messages: messages
                .iter()
                .enumerate()
                .map(
                    |(index, &(from, to, send_ns, recv_ns, answers))| GenMessage {
                        id: index as u64,
                        index,
                        parent: index.checked_sub(1),
                        from,
                        to,
                        send_ns,
                        recv_ns,
                        latency_ns: recv_ns - send_ns,
                        bytes: 100,
                        answers,
                    },
                )
                .collect(),
        }
    }

    #[test]
    fn parallelism_counts_the_served_calls_that_enclose_each_call() {
        let (a, b, c) = (Host::Client(0), Host::Server(0), Host::Server(1));
        // B serves two requests; the first's call to C is nested in both, the second's in
        // its own only (the first was answered before that call's return).
        let first = instance(
            0,
            &[
                (a, b, 0.0, 10.0, None),
                (b, c, 20.0, 25.0, None),
                (c, b, 30.0, 35.0, Some(1)),
                (b, a, 40.0, 45.0, Some(0)),
            ],
        );
        let second = instance(
            1,
            &[
                (a, b, 5.0, 15.0, None),
                (b, c, 50.0, 55.0, None),
                (c, b, 60.0, 65.0, Some(1)),
                (b, a, 100.0, 105.0, Some(0)),
            ],
        );
        let mut meter = ParallelismMeter::new(2);
        meter.advance(first.start_ns);
        meter.add(&first);
        meter.advance(second.start_ns);
        meter.add(&second);
        let (mean, per_node) = meter.finish();
        assert_eq!(per_node, vec![Some(1.5), None]);
        assert_eq!(mean, 1.5);
    }

    #[test]
    fn calibration_reaches_targets() {
        let s = System::from_toml(preset("multi-tier").unwrap(), "mt").unwrap();
        for target in [1.6, 5.0] {
            let (_, _, got) = calibrate(&s, 3, target, 20_000);
            assert!(
                (got - target).abs() / target < 0.1,
                "target {target} got {got}"
            );
        }
    }
}
