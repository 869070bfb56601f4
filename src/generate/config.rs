//! The generator's system description (TOML), and its compiled form.
//!
//! A system has server nodes, each with a role; services (a port and protocol per role);
//! network latencies between roles; and tracelets (Project 5 §7.1.1): templates of message
//! sequences between *slots*. A slot is a role name, optionally with `#k` (`proxy#1`,
//! `proxy#2`) when one instance visits two different nodes of the same role. The role
//! `client` is special: each client loop is its own client host.
//!
//! Each message of a tracelet names the message(s) it waits for (`after`): it is sent
//! `delay_ms` (Gaussian: mean, standard deviation) after the last of them has arrived at its
//! sender, and that last one is its causal parent. A message from X to Y is a *return* when an
//! ancestor is a call from Y to X that is not yet answered; otherwise it is a *call* to Y's
//! service.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

/// A system description as written in TOML.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemConfig {
    /// Short name.
    pub name: String,
    /// What it models.
    #[serde(default)]
    pub description: String,
    /// Default one-way network latency between nodes, in ms.
    #[serde(default = "default_network_ms")]
    pub network_ms: f64,
    /// Standard deviation of network latency as a fraction of its mean.
    #[serde(default = "default_jitter")]
    pub network_jitter: f64,
    /// TCP maximum segment size.
    #[serde(default = "default_mss")]
    pub mss: u32,
    /// Delayed-ACK timeout of the receivers, in ms.
    #[serde(default = "default_ack_delay_ms")]
    pub ack_delay_ms: f64,
    /// `per-request`: clients open a connection per instance and close it after the answer;
    /// `persistent`: one connection per client and service, kept open.
    #[serde(default = "default_client_connections")]
    pub client_connections: String,
    /// Server nodes.
    #[serde(rename = "node")]
    pub nodes: Vec<NodeConfig>,
    /// Services: the port and protocol of each role.
    #[serde(rename = "service")]
    pub services: Vec<ServiceConfig>,
    /// Latencies between roles that differ from `network_ms`.
    #[serde(rename = "link", default)]
    pub links: Vec<LinkConfig>,
    /// The tracelets.
    #[serde(rename = "tracelet")]
    pub tracelets: Vec<TraceletConfig>,
}

fn default_network_ms() -> f64 {
    0.1
}
fn default_jitter() -> f64 {
    0.1
}
fn default_mss() -> u32 {
    1448
}
fn default_ack_delay_ms() -> f64 {
    40.0
}
fn default_client_connections() -> String {
    "per-request".into()
}

/// A server node.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Its name (as the names file will give it).
    pub name: String,
    /// Its role.
    pub role: String,
    /// Its IPv4 address; assigned from 10.0.0.0/16 when absent.
    pub ip: Option<Ipv4Addr>,
    /// Its clock's offset from true time, in ms (added to --clock-offset's random one).
    #[serde(default)]
    pub clock_offset_ms: f64,
    /// Its clock's drift, in ppm.
    #[serde(default)]
    pub drift_ppm: f64,
}

/// A role's service.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// The role.
    pub role: String,
    /// The port it listens on.
    pub port: u16,
    /// `tcp` or `udp`.
    #[serde(default = "default_protocol")]
    pub protocol: String,
}

fn default_protocol() -> String {
    "tcp".into()
}

/// Latency between two roles (both directions).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// The two roles.
    pub between: [String; 2],
    /// One-way latency in ms.
    pub network_ms: f64,
}

/// A tracelet: a template of a causal path.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceletConfig {
    /// Its name.
    pub name: String,
    /// Client loops running it concurrently.
    #[serde(default = "one")]
    pub parallel: u32,
    /// Think time between a loop's instances, uniform in [min, max] ms.
    pub think_ms: [f64; 2],
    /// The messages, in causal order.
    pub messages: Vec<MessageConfig>,
}

fn one() -> u32 {
    1
}

/// `after`: one message index, or several (the message waits for the last of them).
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum After {
    /// One parent.
    One(usize),
    /// Wait for all; the last to arrive is the parent.
    All(Vec<usize>),
}

/// One message of a tracelet.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageConfig {
    /// Sending slot.
    pub from: String,
    /// Receiving slot.
    pub to: String,
    /// The message(s) whose arrival at `from` triggers it; absent for the root.
    pub after: Option<After>,
    /// Delay at the sender after the trigger arrives: [mean, standard deviation] in ms.
    #[serde(default = "default_delay")]
    pub delay_ms: [f64; 2],
    /// Size in bytes (mean; sizes vary by ±10%).
    #[serde(default = "default_bytes")]
    pub bytes: u32,
    /// Force `call` or `return` instead of inferring it.
    pub kind: Option<String>,
}

fn default_delay() -> [f64; 2] {
    [1.0, 0.2]
}
fn default_bytes() -> u32 {
    300
}

/// Transport of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// A compiled message template.
#[derive(Clone, Debug)]
pub struct MessageTemplate {
    /// Sending slot index.
    pub from: usize,
    /// Receiving slot index.
    pub to: usize,
    /// Trigger messages (empty for the root).
    pub after: Vec<usize>,
    /// Delay mean and sd in ns.
    pub delay_ns: (f64, f64),
    /// Mean size.
    pub bytes: u32,
    /// For a return: the call it answers. `None`: it is a call.
    pub answers: Option<usize>,
}

/// A slot of a tracelet: which role it takes a node from.
#[derive(Clone, Debug)]
pub struct Slot {
    /// Slot name as written.
    pub name: String,
    /// Role.
    pub role: String,
}

/// A compiled tracelet.
#[derive(Clone, Debug)]
pub struct Tracelet {
    /// Name.
    pub name: String,
    /// Client loops.
    pub parallel: u32,
    /// Think time range in ns.
    pub think_ns: (f64, f64),
    /// Slots; slot 0 is `client` when the tracelet starts at a client.
    pub slots: Vec<Slot>,
    /// Messages.
    pub messages: Vec<MessageTemplate>,
}

/// A compiled server node.
#[derive(Clone, Debug)]
pub struct Node {
    /// Name.
    pub name: String,
    /// Role.
    pub role: String,
    /// Address.
    pub ip: Ipv4Addr,
    /// Configured clock offset in ns.
    pub clock_offset_ns: f64,
    /// Configured drift in ppm.
    pub drift_ppm: f64,
}

/// A compiled system.
#[derive(Clone, Debug)]
pub struct System {
    /// The description it was compiled from.
    pub config: SystemConfig,
    /// Server nodes.
    pub nodes: Vec<Node>,
    /// Node indices per role.
    pub roles: BTreeMap<String, Vec<usize>>,
    /// Service per role: port and transport.
    pub services: BTreeMap<String, (u16, Transport)>,
    /// Tracelets.
    pub tracelets: Vec<Tracelet>,
    /// Per-client connection reuse.
    pub persistent_clients: bool,
    /// A DNAT load balancer in front of one role's nodes, if any.
    pub dnat: Option<Dnat>,
}

/// A destination-NAT load balancer (iptables DNAT, IPVS in NAT mode): callers of its role
/// address the virtual address; it rewrites the destination to the node chosen for the call
/// and the source of the answers back to the virtual address. It is a node of its own (role
/// [`LB_ROLE`]), with its own clock and, with per-host sniffers, its own capture, which sees
/// every translated packet twice.
#[derive(Clone, Debug)]
pub struct Dnat {
    /// The role behind it.
    pub role: String,
    /// The load balancer's node index.
    pub lb: usize,
    /// The virtual address (the load balancer's own).
    pub vip: Ipv4Addr,
}

/// The role of a load balancer added by `--dnat`.
pub const LB_ROLE: &str = "load-balancer";

/// The role `client`.
pub const CLIENT: &str = "client";

impl System {
    /// Parses and checks a TOML system description.
    pub fn from_toml(text: &str, origin: &str) -> Result<System> {
        let config: SystemConfig = toml::from_str(text)
            .with_context(|| format!("{origin}: invalid system description"))?;
        System::compile(config).with_context(|| origin.to_owned())
    }

    fn compile(config: SystemConfig) -> Result<System> {
        let mut nodes = Vec::new();
        let mut roles: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut seen_names = BTreeSet::new();
        for (i, n) in config.nodes.iter().enumerate() {
            if n.role == CLIENT {
                bail!(
                    "node {}: role `client` is reserved for client loops",
                    n.name
                );
            }
            if !seen_names.insert(n.name.clone()) {
                bail!("node name {} appears twice", n.name);
            }
            let ip =
                n.ip.unwrap_or(Ipv4Addr::new(10, 0, (i / 250) as u8, (i % 250 + 1) as u8));
            roles.entry(n.role.clone()).or_default().push(i);
            nodes.push(Node {
                name: n.name.clone(),
                role: n.role.clone(),
                ip,
                clock_offset_ns: n.clock_offset_ms * 1e6,
                drift_ppm: n.drift_ppm,
            });
        }
        let mut services = BTreeMap::new();
        for s in &config.services {
            let transport = match s.protocol.as_str() {
                "tcp" => Transport::Tcp,
                "udp" => Transport::Udp,
                other => bail!("service {}: protocol `{other}` is not tcp or udp", s.role),
            };
            if !roles.contains_key(&s.role) {
                bail!("service for role {} which no node has", s.role);
            }
            services.insert(s.role.clone(), (s.port, transport));
        }
        let persistent_clients = match config.client_connections.as_str() {
            "per-request" => false,
            "persistent" => true,
            other => bail!("client_connections `{other}` is not per-request or persistent"),
        };
        let mut tracelets = Vec::new();
        for t in &config.tracelets {
            tracelets.push(
                compile_tracelet(t, &roles, &services)
                    .with_context(|| format!("tracelet {}", t.name))?,
            );
        }
        if tracelets.is_empty() {
            bail!("no tracelets");
        }
        Ok(System {
            config,
            nodes,
            roles,
            services,
            tracelets,
            persistent_clients,
            dnat: None,
        })
    }

    /// Puts a DNAT load balancer (node `lb`) in front of the nodes of `role`, whose service
    /// must be TCP.
    pub fn with_dnat(mut self, role: &str) -> Result<System> {
        if self.dnat.is_some() {
            bail!("--dnat: only one load balancer per system");
        }
        match self.services.get(role) {
            None => bail!("--dnat {role}: no role {role} with a [[service]]"),
            Some((_, Transport::Udp)) => {
                bail!("--dnat {role}: the service is UDP; the generator translates TCP only")
            }
            Some(_) => {}
        }
        if self.roles.contains_key(LB_ROLE) {
            bail!("--dnat: the system already has nodes of role {LB_ROLE}");
        }
        let taken: BTreeSet<Ipv4Addr> = self.nodes.iter().map(|n| n.ip).collect();
        let Some(vip) = (1..=254)
            .map(|i| Ipv4Addr::new(10, 0, 255, i))
            .find(|ip| !taken.contains(ip))
        else {
            bail!("--dnat: no free address in 10.0.255.0/24 for the load balancer");
        };
        let name = ["lb".to_owned(), format!("lb-{role}")]
            .into_iter()
            .find(|n| self.nodes.iter().all(|x| &x.name != n))
            .unwrap_or_else(|| format!("lb-{}", self.nodes.len()));
        let lb = self.nodes.len();
        self.nodes.push(Node {
            name,
            role: LB_ROLE.to_owned(),
            ip: vip,
            clock_offset_ns: 0.0,
            drift_ppm: 0.0,
        });
        self.roles.entry(LB_ROLE.to_owned()).or_default().push(lb);
        self.dnat = Some(Dnat {
            role: role.to_owned(),
            lb,
            vip,
        });
        Ok(self)
    }

    /// One-way latency between two roles, in ns.
    pub fn latency_ns(&self, a: &str, b: &str) -> f64 {
        self.config
            .links
            .iter()
            .find(|l| {
                (l.between[0] == a && l.between[1] == b) || (l.between[0] == b && l.between[1] == a)
            })
            .map_or(self.config.network_ms, |l| l.network_ms)
            * 1e6
    }
}

fn compile_tracelet(
    t: &TraceletConfig,
    roles: &BTreeMap<String, Vec<usize>>,
    services: &BTreeMap<String, (u16, Transport)>,
) -> Result<Tracelet> {
    if t.messages.is_empty() {
        bail!("has no messages");
    }
    if t.think_ms[0] < 0.0 || t.think_ms[1] < t.think_ms[0] {
        bail!("think_ms must be [min, max] with 0 <= min <= max");
    }
    let mut slots: Vec<Slot> = Vec::new();
    let slot_of = |slots: &mut Vec<Slot>, name: &str| -> Result<usize> {
        if let Some(i) = slots.iter().position(|s| s.name == name) {
            return Ok(i);
        }
        let role = name.split('#').next().unwrap_or(name).to_owned();
        if role != CLIENT && !roles.contains_key(&role) {
            bail!("slot {name}: no node has role {role}");
        }
        slots.push(Slot {
            name: name.to_owned(),
            role,
        });
        Ok(slots.len() - 1)
    };
    let mut messages: Vec<MessageTemplate> = Vec::new();
    for (i, m) in t.messages.iter().enumerate() {
        let from = slot_of(&mut slots, &m.from)?;
        let to = slot_of(&mut slots, &m.to)?;
        if from == to {
            bail!("message {i}: from and to are the same slot");
        }
        let after = match &m.after {
            None => Vec::new(),
            Some(After::One(a)) => vec![*a],
            Some(After::All(v)) => v.clone(),
        };
        for &a in &after {
            if a >= i {
                bail!("message {i}: after {a} does not come before it");
            }
            if messages[a].to != from {
                bail!(
                    "message {i}: after {a}, which is not received by {}",
                    m.from
                );
            }
        }
        if m.delay_ms[0] < 0.0 || m.delay_ms[1] < 0.0 {
            bail!("message {i}: delay_ms must not be negative");
        }
        // A return answers the nearest unanswered call from `to` to `from` among its ancestors.
        let mut answered: BTreeSet<usize> = messages.iter().filter_map(|m| m.answers).collect();
        let answers = {
            let mut found = None;
            let mut stack: Vec<usize> = after.clone();
            let mut visited = BTreeSet::new();
            // Walk ancestors nearest-first (highest index first).
            while let Some(a) = stack.iter().copied().max() {
                stack.retain(|x| *x != a);
                if !visited.insert(a) {
                    continue;
                }
                let anc = &messages[a];
                if anc.answers.is_none()
                    && anc.from == to
                    && anc.to == from
                    && !answered.contains(&a)
                {
                    found = Some(a);
                    break;
                }
                stack.extend(anc.after.iter().copied());
            }
            found
        };
        let answers = match m.kind.as_deref() {
            None => answers,
            Some("return") => {
                if answers.is_none() {
                    bail!(
                        "message {i}: kind = return, but no unanswered call from {} to {} precedes it",
                        m.to,
                        m.from
                    );
                }
                answers
            }
            Some("call") => None,
            Some(other) => bail!("message {i}: kind `{other}` is not call or return"),
        };
        if let Some(a) = answers {
            answered.insert(a);
        } else {
            let role = &slots[to].role;
            if role == CLIENT {
                bail!("message {i}: a call to a client (clients have no service)");
            }
            if !services.contains_key(role) {
                bail!("message {i}: call to role {role}, which has no [[service]]");
            }
        }
        messages.push(MessageTemplate {
            from,
            to,
            after,
            delay_ns: (m.delay_ms[0] * 1e6, m.delay_ms[1] * 1e6),
            bytes: m.bytes.max(1),
            answers,
        });
    }
    if !messages[0].after.is_empty() {
        bail!("message 0 must be the root (no `after`)");
    }
    for (i, m) in messages.iter().enumerate().skip(1) {
        if m.after.is_empty() {
            bail!("message {i}: only message 0 may be a root; give `after`");
        }
    }
    Ok(Tracelet {
        name: t.name.clone(),
        parallel: t.parallel.max(1),
        think_ns: (t.think_ms[0] * 1e6, t.think_ms[1] * 1e6),
        slots,
        messages,
    })
}

/// The built-in systems: name, TOML.
pub const PRESETS: [(&str, &str); 6] = [
    ("multi-tier", include_str!("presets/multi-tier.toml")),
    (
        "children-parallel",
        include_str!("presets/children-parallel.toml"),
    ),
    ("children-0-2", include_str!("presets/children-0-2.toml")),
    ("children-d-cc", include_str!("presets/children-d-cc.toml")),
    (
        "penalty-breaker",
        include_str!("presets/penalty-breaker.toml"),
    ),
    ("cdn-miss", include_str!("presets/cdn-miss.toml")),
];

/// The TOML of a preset.
pub fn preset(name: &str) -> Result<&'static str> {
    PRESETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            let names: Vec<&str> = PRESETS.iter().map(|(n, _)| *n).collect();
            anyhow::anyhow!("unknown preset `{name}` (presets: {})", names.join(", "))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_compiles() {
        for (name, text) in PRESETS {
            let s = System::from_toml(text, name).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert!(!s.tracelets.is_empty());
        }
    }

    #[test]
    fn calls_and_returns_are_inferred() {
        let s = System::from_toml(preset("multi-tier").unwrap(), "multi-tier").unwrap();
        let t = &s.tracelets[0];
        // client->ws call, ws->auth call, auth->ws return of 1, ws->ap call, ..., ws->client return of 0
        let answers: Vec<Option<usize>> = t.messages.iter().map(|m| m.answers).collect();
        assert_eq!(
            answers,
            vec![None, None, Some(1), None, None, Some(4), Some(3), Some(0)]
        );
    }

    #[test]
    fn bad_descriptions_are_explained() {
        let bad = r#"
name = "x"
[[node]]
name = "a"
role = "a"
[[service]]
role = "a"
port = 1
[[tracelet]]
name = "t"
think_ms = [1, 2]
messages = [ { from = "client", to = "a" }, { from = "a", to = "b", after = 0 } ]
"#;
        let err = format!("{:#}", System::from_toml(bad, "x.toml").unwrap_err());
        assert!(err.contains("no node has role b"), "{err}");
    }
}
