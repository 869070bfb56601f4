//! Random systems for `causeway generate --random`: traces unlike the presets, so that path
//! inference is judged on many systems rather than tuned to a few.
//!
//! [`system`] draws a [`SystemConfig`] from a seed (and nothing else: the same seed gives the
//! same system): 2 to [`MAX_DEPTH`] tiers of roles, one to three nodes per role, client calls
//! into the first tier; 2 to 5 request types (tracelets) with different weights (client loops
//! and think times) that share nodes; each a call tree of depth 2 to its system's tiers
//! (one reaches them all) in which a node handling a call makes 0 to [`MAX_FAN_OUT`] calls to
//! lower tiers, one at a time or several at once (all sent on the same trigger, the caller
//! going on when the last has returned); some calls skipped some of the time (`skip`: a cache
//! hit, which leaves out the subtree), at least one per system; and every step's delay from a
//! family drawn for it: normal, log-normal, gamma, bimodal, or heavy-tailed (Pareto or a wide
//! log-normal). Its TOML ([`SystemConfig::to_toml`], `--print-system`) is a `--config` file.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use super::config::{
    After, DelayConfig, LinkConfig, MessageConfig, NodeConfig, ServiceConfig, SystemConfig,
    TraceletConfig,
};

/// The deepest call tree (calls nested in one another, the client's own counted).
pub const MAX_DEPTH: usize = 6;
/// The shallowest call tree.
pub const MIN_DEPTH: usize = 2;
/// The most calls one node makes while handling one call.
pub const MAX_FAN_OUT: usize = 5;
/// Calls per request type beyond which only the calls that reach its depth are added.
const CALL_BUDGET: usize = 20;

/// Names of roles (none ends in a digit: nodes are the role and a number).
const ROLE_WORDS: [&str; 30] = [
    "gateway", "edge", "api", "portal", "users", "orders", "cart", "search", "index", "cache",
    "store", "auth", "billing", "media", "feed", "rank", "geo", "notify", "stock", "pricing",
    "session", "queue", "audit", "profile", "catalog", "shard", "blob", "mail", "ledger", "tokens",
];

/// Names of request types.
const REQUEST_WORDS: [&str; 12] = [
    "browse", "checkout", "login", "lookup", "upload", "report", "timeline", "settings", "sync",
    "export", "refund", "compose",
];

/// A role of the system being drawn.
struct Role {
    name: String,
    tier: usize,
    nodes: usize,
}

/// Draws the system of `seed`; see the module documentation.
pub fn system(seed: u64) -> SystemConfig {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x7261_6e64_6f6d);
    let tiers = rng.random_range(MIN_DEPTH..=MAX_DEPTH);
    let mut words: Vec<&str> = ROLE_WORDS.to_vec();
    shuffle(&mut words, &mut rng);
    let mut words = words.into_iter();
    let mut roles: Vec<Role> = Vec::new();
    let mut by_tier: Vec<Vec<usize>> = Vec::with_capacity(tiers);
    for tier in 0..tiers {
        let count = if tier == 0 {
            rng.random_range(1..=2)
        } else {
            rng.random_range(1..=3)
        };
        let mut here = Vec::new();
        for _ in 0..count {
            let Some(word) = words.next() else { break };
            let nodes = pick(&mut rng, &[(1, 50.0), (2, 35.0), (3, 15.0)]);
            here.push(roles.len());
            roles.push(Role {
                name: word.to_owned(),
                tier,
                nodes,
            });
        }
        by_tier.push(here);
    }

    let mut requests: Vec<&str> = REQUEST_WORDS.to_vec();
    shuffle(&mut requests, &mut rng);
    let count = rng.random_range(2..=5);
    let mut tracelets = Vec::with_capacity(count);
    let mut calls: Vec<Vec<usize>> = Vec::with_capacity(count);
    let mut first_front = None;
    for (t, name) in requests.into_iter().take(count).enumerate() {
        // The first reaches every tier; the second shares its front role.
        let depth = if t == 0 {
            tiers
        } else {
            rng.random_range(MIN_DEPTH..=tiers)
        };
        let front = match (t, first_front) {
            (1, Some(f)) => f,
            _ => by_tier[0][rng.random_range(0..by_tier[0].len())],
        };
        first_front.get_or_insert(front);
        let mut b = Builder {
            rng: &mut rng,
            roles: &roles,
            by_tier: &by_tier,
            tiers,
            messages: Vec::new(),
            calls: Vec::new(),
        };
        let bytes = b.call_bytes();
        b.messages.push(MessageConfig {
            from: "client".to_owned(),
            to: roles[front].name.clone(),
            after: None,
            delay_ms: None,
            delay: None,
            bytes,
            kind: None,
            skip: 0.0,
        });
        let slot = roles[front].name.clone();
        let inner = b.handle(&slot, 0, 0, depth - 1, true);
        let delay = b.delay();
        let bytes = b.return_bytes();
        b.messages.push(MessageConfig {
            from: slot,
            to: "client".to_owned(),
            after: Some(after(inner)),
            delay_ms: None,
            delay: Some(delay),
            bytes,
            kind: None,
            skip: 0.0,
        });
        let (messages, made) = (b.messages, b.calls);
        calls.push(made);
        let think_low = round(log_uniform(&mut rng, 20.0, 400.0), 1);
        let think_high = round(think_low * rng.random_range(1.5..4.0), 1);
        tracelets.push(TraceletConfig {
            name: (*name).to_owned(),
            parallel: pick(
                &mut rng,
                &[(1, 25.0), (2, 25.0), (3, 20.0), (4, 15.0), (6, 15.0)],
            ) as u32,
            think_ms: [think_low, think_high],
            messages,
        });
    }
    // At least one cache: a call (not the client's) skipped some of the time.
    if !tracelets
        .iter()
        .any(|t| t.messages.iter().any(|m| m.skip > 0.0))
    {
        // Every request type calls below its front (depth 2 at least).
        let t = rng.random_range(0..tracelets.len());
        if !calls[t].is_empty() {
            let c = calls[t][rng.random_range(0..calls[t].len())];
            tracelets[t].messages[c].skip = skip_fraction(&mut rng);
        }
    }

    // Only the roles some request type visits.
    let used = |role: &Role| {
        tracelets.iter().any(|t| {
            t.messages
                .iter()
                .any(|m| m.to.split('#').next() == Some(role.name.as_str()))
        })
    };
    let role_of = |slot: &str| slot.split('#').next().unwrap_or_default().to_owned();
    let callers: Vec<String> = tracelets
        .iter()
        .zip(&calls)
        .flat_map(|(t, made)| made.iter().map(|&c| role_of(&t.messages[c].from)))
        .collect();
    let mut nodes = Vec::new();
    let mut services = Vec::new();
    let mut ports: Vec<u16> = Vec::new();
    for role in roles.iter().filter(|r| used(r)) {
        for k in 1..=role.nodes {
            nodes.push(NodeConfig {
                name: format!("{}{k}", role.name),
                role: role.name.clone(),
                ip: None,
                clock_offset_ms: 0.0,
                drift_ppm: 0.0,
            });
        }
        let port = loop {
            let p = rng.random_range(2000..10_000u16);
            if !ports.contains(&p) {
                break p;
            }
        };
        ports.push(port);
        // A role that calls nobody is sometimes a UDP service (a resolver, a metrics store).
        let leaf = !callers.contains(&role.name);
        let udp = leaf && rng.random::<f64>() < 0.15;
        services.push(ServiceConfig {
            role: role.name.clone(),
            port,
            protocol: if udp { "udp" } else { "tcp" }.to_owned(),
        });
    }
    let mut links = Vec::new();
    for &f in &by_tier[0] {
        if used(&roles[f]) {
            links.push(LinkConfig {
                between: ["client".to_owned(), roles[f].name.clone()],
                network_ms: round(rng.random_range(0.3..2.0), 3),
            });
        }
    }
    // Sometimes one pair of roles far apart (another zone).
    if rng.random::<f64>() < 0.3 {
        let used_roles: Vec<&Role> = roles.iter().filter(|r| used(r)).collect();
        let a = used_roles[rng.random_range(0..used_roles.len())];
        let b = used_roles[rng.random_range(0..used_roles.len())];
        if a.name != b.name {
            links.push(LinkConfig {
                between: [a.name.clone(), b.name.clone()],
                network_ms: round(rng.random_range(0.5..3.0), 3),
            });
        }
    }
    let network_ms = round(rng.random_range(0.05..0.3), 3);
    let network_jitter = round(rng.random_range(0.05..0.2), 3);
    let client_connections = if rng.random::<f64>() < 0.4 {
        "persistent"
    } else {
        "per-request"
    };
    SystemConfig {
        name: format!("random-{seed}"),
        description: format!(
            "random system of seed {seed}: {tiers} tiers, {} nodes, {} request types",
            nodes.len(),
            tracelets.len()
        ),
        network_ms,
        network_jitter,
        mss: 1448,
        ack_delay_ms: 40.0,
        client_connections: client_connections.to_owned(),
        nodes,
        services,
        links,
        tracelets,
    }
}

/// `after` for a list of messages.
fn after(list: Vec<usize>) -> After {
    match list.as_slice() {
        [one] => After::One(*one),
        _ => After::All(list),
    }
}

/// The tracelet being built.
struct Builder<'a> {
    rng: &'a mut Xoshiro256PlusPlus,
    roles: &'a [Role],
    by_tier: &'a [Vec<usize>],
    tiers: usize,
    messages: Vec<MessageConfig>,
    /// Indices of the calls made so far (not the client's).
    calls: Vec<usize>,
}

impl Builder<'_> {
    /// Slot `slot` (of a role at tier `tier`) handles call `call` and makes calls nested
    /// `depth` deep below it (`spine`: exactly that deep, else at most). Returns the
    /// messages whose arrival at `slot` its reply waits for.
    fn handle(
        &mut self,
        slot: &str,
        tier: usize,
        call: usize,
        depth: usize,
        spine: bool,
    ) -> Vec<usize> {
        let mut cursor = vec![call];
        if depth == 0 {
            return cursor;
        }
        let weights = [(1, 35.0), (2, 28.0), (3, 18.0), (4, 12.0), (5, 7.0)];
        let mut fan_out = if spine || self.rng.random::<f64>() < 0.65 {
            pick(self.rng, &weights)
        } else {
            0
        };
        if self.calls.len() >= CALL_BUDGET {
            fan_out = usize::from(spine);
        }
        // (role, depth below it, whether it carries the spine)
        let spine_at = if fan_out > 0 {
            self.rng.random_range(0..fan_out)
        } else {
            0
        };
        let mut children: Vec<(usize, usize, bool)> = Vec::with_capacity(fan_out);
        for k in 0..fan_out {
            let carries = spine && k == spine_at;
            let below = if carries {
                depth - 1
            } else {
                self.rng.random_range(0..depth)
            };
            // A tier below this one with room for `below` more tiers under it.
            let deepest = self.tiers - 1 - below;
            let child_tier = if self.rng.random::<f64>() < 0.65 || deepest <= tier + 1 {
                tier + 1
            } else {
                self.rng.random_range(tier + 1..=deepest)
            };
            let pool = &self.by_tier[child_tier];
            let role = pool[self.rng.random_range(0..pool.len())];
            children.push((role, below, carries));
        }
        let mut k = 0;
        while k < children.len() {
            let left = children.len() - k;
            let group = if left >= 2 && self.rng.random::<f64>() < 0.4 {
                self.rng.random_range(2..=left.min(3))
            } else {
                1
            };
            let trigger = cursor.clone();
            let mut returns = Vec::with_capacity(group);
            let mut slots: Vec<String> = Vec::with_capacity(group);
            for &(role, below, carries) in &children[k..k + group] {
                let role = &self.roles[role];
                // Calls at once to one role go to different nodes when it has them.
                let same = slots
                    .iter()
                    .filter(|s| s.split('#').next() == Some(role.name.as_str()))
                    .count();
                let child = if same > 0 && same < role.nodes {
                    format!("{}#{}", role.name, same + 1)
                } else {
                    role.name.clone()
                };
                slots.push(child.clone());
                let delay = self.delay();
                let bytes = self.call_bytes();
                let skip = if self.rng.random::<f64>() < 0.12 {
                    skip_fraction(self.rng)
                } else {
                    0.0
                };
                let c = self.messages.len();
                self.calls.push(c);
                self.messages.push(MessageConfig {
                    from: slot.to_owned(),
                    to: child.clone(),
                    after: Some(after(trigger.clone())),
                    delay_ms: None,
                    delay: Some(delay),
                    bytes,
                    kind: None,
                    skip,
                });
                let inner = self.handle(&child, role.tier, c, below, carries);
                let delay = self.delay();
                let bytes = self.return_bytes();
                returns.push(self.messages.len());
                self.messages.push(MessageConfig {
                    from: child,
                    to: slot.to_owned(),
                    after: Some(after(inner)),
                    delay_ms: None,
                    delay: Some(delay),
                    bytes,
                    kind: None,
                    skip: 0.0,
                });
            }
            cursor = returns;
            k += group;
        }
        cursor
    }

    /// A step's delay: its family and mean (0.05 to 15 ms, log-uniform) drawn.
    fn delay(&mut self) -> DelayConfig {
        delay(self.rng)
    }

    fn call_bytes(&mut self) -> u32 {
        log_uniform(self.rng, 80.0, 2_500.0).round() as u32
    }

    fn return_bytes(&mut self) -> u32 {
        log_uniform(self.rng, 100.0, 60_000.0).round() as u32
    }
}

/// A step's delay: normal 20%, log-normal 25%, gamma 20%, bimodal 20%, heavy-tailed 15%.
fn delay(rng: &mut Xoshiro256PlusPlus) -> DelayConfig {
    let mean_ms = round(log_uniform(rng, 0.05, 15.0), 3);
    let u = rng.random::<f64>();
    if u < 0.2 {
        DelayConfig::Normal {
            mean_ms,
            sd_ms: round(mean_ms * rng.random_range(0.1..0.4), 4),
        }
    } else if u < 0.45 {
        DelayConfig::LogNormal {
            mean_ms,
            sigma: round(rng.random_range(0.2..0.9), 2),
        }
    } else if u < 0.65 {
        DelayConfig::Gamma {
            mean_ms,
            shape: round(rng.random_range(0.8..6.0), 2),
        }
    } else if u < 0.85 {
        let high_mean = round(mean_ms * rng.random_range(4.0..15.0), 3);
        DelayConfig::Bimodal {
            low_ms: [mean_ms, round(mean_ms * rng.random_range(0.1..0.3), 4)],
            high_ms: [high_mean, round(high_mean * rng.random_range(0.1..0.3), 4)],
            high: round(rng.random_range(0.05..0.3), 2),
        }
    } else if rng.random::<f64>() < 0.5 {
        DelayConfig::Pareto {
            mean_ms,
            alpha: round(rng.random_range(1.5..2.5), 2),
        }
    } else {
        DelayConfig::LogNormal {
            mean_ms,
            sigma: round(rng.random_range(1.2..1.8), 2),
        }
    }
}

/// How often a cache skips a call: 0.2 to 0.8 in steps of 0.05.
fn skip_fraction(rng: &mut Xoshiro256PlusPlus) -> f64 {
    f64::from(rng.random_range(4..=16u32)) * 0.05
}

/// A value whose logarithm is uniform in [ln lo, ln hi).
fn log_uniform(rng: &mut Xoshiro256PlusPlus, lo: f64, hi: f64) -> f64 {
    (lo.ln() + rng.random::<f64>() * (hi.ln() - lo.ln())).exp()
}

/// `x` rounded to `digits` decimals (so that the TOML reads well).
fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    let r = (x * scale).round() / scale;
    if r > 0.0 { r } else { x }
}

/// One of `choices` by weight.
fn pick(rng: &mut Xoshiro256PlusPlus, choices: &[(usize, f64)]) -> usize {
    let total: f64 = choices.iter().map(|c| c.1).sum();
    let mut u = rng.random::<f64>() * total;
    for &(value, weight) in choices {
        if u < weight {
            return value;
        }
        u -= weight;
    }
    choices.last().map_or(0, |c| c.0)
}

/// Fisher-Yates.
fn shuffle<T>(list: &mut [T], rng: &mut Xoshiro256PlusPlus) {
    for i in (1..list.len()).rev() {
        let j = rng.random_range(0..=i);
        list.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::super::config::{System, Tracelet};
    use super::*;

    /// Per call of a compiled tracelet: the call its sender was handling when it made it
    /// (`None` for the client's), found through each message's first trigger.
    fn handling(t: &Tracelet) -> Vec<Option<usize>> {
        let mut handled: Vec<Option<usize>> = vec![None; t.messages.len()];
        for (i, m) in t.messages.iter().enumerate() {
            let Some(&a) = m.after.first() else { continue };
            let trigger = &t.messages[a];
            handled[i] = match trigger.answers {
                // A call that arrived at the sender: it is handling that one.
                None => Some(a),
                // A return to the sender: it goes on with the call it made that for.
                Some(c) => handled[c],
            };
        }
        handled
    }

    /// Depth of each call (the client's is 1) and the calls made per handled call.
    fn shape(t: &Tracelet) -> (usize, usize) {
        let handled = handling(t);
        let mut level = vec![0usize; t.messages.len()];
        let mut fan_out: BTreeMap<usize, usize> = BTreeMap::new();
        for (i, m) in t.messages.iter().enumerate() {
            if m.answers.is_some() {
                continue;
            }
            level[i] = match handled[i] {
                None => 1,
                Some(h) => {
                    *fan_out.entry(h).or_default() += 1;
                    level[h] + 1
                }
            };
        }
        (
            level.iter().copied().max().unwrap_or(0),
            fan_out.values().copied().max().unwrap_or(0),
        )
    }

    #[test]
    fn a_seed_gives_one_system() {
        assert_eq!(system(3).to_toml(), system(3).to_toml());
        assert_ne!(system(3).to_toml(), system(4).to_toml());
        let printed = system(3).to_toml();
        let again = System::from_toml(&printed, "printed").unwrap();
        assert_eq!(again.config.to_toml(), printed);
    }

    #[test]
    fn random_systems_are_valid_and_varied() {
        let mut families = BTreeSet::new();
        let (mut parallel, mut sequential, mut depths, mut fan_outs) =
            (0, 0, BTreeSet::new(), BTreeSet::new());
        for seed in 0..200 {
            let config = system(seed);
            let s = System::from_config(config.clone(), "random")
                .unwrap_or_else(|e| panic!("seed {seed}: {e:#}"));
            assert!((2..=5).contains(&s.tracelets.len()), "seed {seed}");
            let mut skips = 0;
            let mut roles_per_tracelet: Vec<BTreeSet<&str>> = Vec::new();
            for t in &s.tracelets {
                let (depth, fan_out) = shape(t);
                assert!(
                    (MIN_DEPTH..=MAX_DEPTH).contains(&depth),
                    "seed {seed}: {depth}"
                );
                assert!(fan_out <= MAX_FAN_OUT, "seed {seed}: fan-out {fan_out}");
                depths.insert(depth);
                fan_outs.insert(fan_out);
                let calls = t.messages.iter().filter(|m| m.answers.is_none()).count();
                assert_eq!(
                    2 * calls,
                    t.messages.len(),
                    "seed {seed}: a call unanswered"
                );
                for m in &t.messages {
                    skips += usize::from(m.skip > 0.0);
                    match m.after.len() {
                        0 => {}
                        1 => sequential += 1,
                        _ => parallel += 1,
                    }
                }
                roles_per_tracelet.push(t.slots.iter().map(|s| s.role.as_str()).collect());
            }
            assert!(skips > 0, "seed {seed}: no cache");
            // Request types share nodes: the first two share their front role.
            let shared = roles_per_tracelet[0]
                .intersection(&roles_per_tracelet[1])
                .any(|r| *r != "client");
            assert!(shared, "seed {seed}");
            let weights: BTreeSet<(u32, u64)> = config
                .tracelets
                .iter()
                .map(|t| (t.parallel, t.think_ms[0].to_bits()))
                .collect();
            assert!(weights.len() > 1, "seed {seed}: one weight");
            for t in &config.tracelets {
                families.extend(t.messages.iter().filter_map(|m| m.delay.as_ref()).map(
                    |d| match d {
                        DelayConfig::LogNormal { sigma, .. } if *sigma >= 1.2 => "heavy",
                        DelayConfig::Pareto { .. } => "heavy",
                        d => d.family(),
                    },
                ));
            }
        }
        assert_eq!(
            families.into_iter().collect::<Vec<_>>(),
            vec!["bimodal", "gamma", "heavy", "lognormal", "normal"]
        );
        assert!(
            parallel > 100 && sequential > 100,
            "{parallel} {sequential}"
        );
        assert_eq!(depths, (MIN_DEPTH..=MAX_DEPTH).collect());
        assert_eq!(fan_outs, (1..=MAX_FAN_OUT).collect());
    }
}
