//! The generator's system description (TOML), and its compiled form.
//!
//! A system has server nodes, each with a role; services (a port and protocol per role);
//! network latencies between roles; and tracelets (Project 5 §7.1.1): templates of message
//! sequences between *slots*. A slot is a role name, optionally with `#k` (`proxy#1`,
//! `proxy#2`) when one instance visits two different nodes of the same role. The role
//! `client` is special: each client loop is its own client host.
//!
//! Each message of a tracelet names the message(s) it waits for (`after`): it is sent a delay
//! after the last of them has arrived at its sender, and that last one is its causal parent.
//! The delay is Gaussian, `delay_ms = [mean, sd]`, or drawn from a named family, `delay = {
//! family = "lognormal", mean_ms = 2, sigma = 0.8 }` ([`DelayConfig`]: normal, lognormal,
//! gamma, pareto, bimodal). A message from X to Y is a *return* when an ancestor is a call from
//! Y to X that is not yet answered; otherwise it is a *call* to Y's service.
//!
//! A call with `skip = p` is left out with probability p, as a cache hit leaves out a lookup:
//! with it go the messages it leads to up to its return (its *subtree*), and what waited for
//! the return waits instead for the moment the call would have been sent (its caller's own
//! trigger is then the parent).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use anyhow::{Context, Result, bail};
use rand::{Rng, RngExt};
use rand_distr::{Distribution, Gamma, LogNormal, Normal, Pareto};
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

impl SystemConfig {
    /// The description as TOML in the presets' style (messages as inline tables), which
    /// [`System::from_toml`] reads back to the same system.
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_toml(&mut out);
        out
    }

    fn write_toml(&self, out: &mut String) -> std::fmt::Result {
        use std::fmt::Write as _;
        for line in self.description.lines() {
            writeln!(out, "# {line}")?;
        }
        writeln!(out, "name = {}", text(&self.name))?;
        writeln!(out, "description = {}", text(&self.description))?;
        writeln!(out, "network_ms = {}", num(self.network_ms))?;
        writeln!(out, "network_jitter = {}", num(self.network_jitter))?;
        writeln!(out, "mss = {}", self.mss)?;
        writeln!(out, "ack_delay_ms = {}", num(self.ack_delay_ms))?;
        writeln!(
            out,
            "client_connections = {}",
            text(&self.client_connections)
        )?;
        for n in &self.nodes {
            writeln!(out, "\n[[node]]")?;
            writeln!(out, "name = {}", text(&n.name))?;
            writeln!(out, "role = {}", text(&n.role))?;
            if let Some(ip) = n.ip {
                writeln!(out, "ip = \"{ip}\"")?;
            }
            if n.clock_offset_ms != 0.0 {
                writeln!(out, "clock_offset_ms = {}", num(n.clock_offset_ms))?;
            }
            if n.drift_ppm != 0.0 {
                writeln!(out, "drift_ppm = {}", num(n.drift_ppm))?;
            }
        }
        for sv in &self.services {
            writeln!(out, "\n[[service]]")?;
            writeln!(out, "role = {}", text(&sv.role))?;
            writeln!(out, "port = {}", sv.port)?;
            writeln!(out, "protocol = {}", text(&sv.protocol))?;
        }
        for l in &self.links {
            writeln!(out, "\n[[link]]")?;
            writeln!(
                out,
                "between = [{}, {}]",
                text(&l.between[0]),
                text(&l.between[1])
            )?;
            writeln!(out, "network_ms = {}", num(l.network_ms))?;
        }
        for t in &self.tracelets {
            writeln!(out, "\n[[tracelet]]")?;
            writeln!(out, "name = {}", text(&t.name))?;
            writeln!(out, "parallel = {}", t.parallel)?;
            writeln!(out, "think_ms = {}", pair(t.think_ms))?;
            writeln!(out, "messages = [")?;
            for m in &t.messages {
                write!(out, "  {{ from = {}, to = {}", text(&m.from), text(&m.to))?;
                match &m.after {
                    None => {}
                    Some(After::One(a)) => write!(out, ", after = {a}")?,
                    Some(After::All(v)) => {
                        let list: Vec<String> = v.iter().map(usize::to_string).collect();
                        write!(out, ", after = [{}]", list.join(", "))?;
                    }
                }
                if let Some(d) = m.delay_ms {
                    write!(out, ", delay_ms = {}", pair(d))?;
                }
                if let Some(d) = &m.delay {
                    write!(out, ", delay = {}", d.to_toml())?;
                }
                write!(out, ", bytes = {}", m.bytes)?;
                if let Some(k) = &m.kind {
                    write!(out, ", kind = {}", text(k))?;
                }
                if m.skip != 0.0 {
                    write!(out, ", skip = {}", num(m.skip))?;
                }
                writeln!(out, " }},")?;
            }
            writeln!(out, "]")?;
        }
        Ok(())
    }
}

/// A TOML basic string.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML float that reads back to the same f64.
fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:?}")
    } else if x.is_nan() {
        "nan".to_owned()
    } else if x > 0.0 {
        "inf".to_owned()
    } else {
        "-inf".to_owned()
    }
}

/// `[a, b]` of floats.
fn pair([a, b]: [f64; 2]) -> String {
    format!("[{}, {}]", num(a), num(b))
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
    /// Gaussian delay at the sender after the trigger arrives: [mean, standard deviation] in
    /// ms (default [1, 0.2]; not together with `delay`).
    pub delay_ms: Option<[f64; 2]>,
    /// The delay drawn from a named family instead.
    pub delay: Option<DelayConfig>,
    /// Size in bytes (mean; sizes vary by ±10%).
    #[serde(default = "default_bytes")]
    pub bytes: u32,
    /// Force `call` or `return` instead of inferring it.
    pub kind: Option<String>,
    /// For a call: the probability that it is left out, with its subtree (a cache hit).
    #[serde(default)]
    pub skip: f64,
}

/// The delay of a message without `delay_ms` or `delay`: [mean, sd] in ms.
const DEFAULT_DELAY_MS: [f64; 2] = [1.0, 0.2];

/// A delay family as written in TOML (`family = "..."`), each given by its mean in ms.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "family", rename_all = "lowercase", deny_unknown_fields)]
pub enum DelayConfig {
    /// Gaussian, truncated at 1 µs (what `delay_ms = [mean, sd]` gives).
    Normal {
        /// Mean, ms.
        mean_ms: f64,
        /// Standard deviation, ms.
        sd_ms: f64,
    },
    /// Log-normal with this mean; `sigma` is the standard deviation of the logarithm (above
    /// about 1.2 the tail is heavy).
    LogNormal {
        /// Mean, ms.
        mean_ms: f64,
        /// Shape: the standard deviation of ln(delay).
        sigma: f64,
    },
    /// Gamma with this mean and shape k (the coefficient of variation is 1/√k).
    Gamma {
        /// Mean, ms.
        mean_ms: f64,
        /// Shape k > 0.
        shape: f64,
    },
    /// Pareto (heavy-tailed) with this mean and tail index `alpha` > 1 (infinite variance
    /// at or below 2).
    Pareto {
        /// Mean, ms.
        mean_ms: f64,
        /// Tail index.
        alpha: f64,
    },
    /// A mixture of two log-normal modes: the low one, and with probability `high` the high
    /// one (a slow path: a disk read, a garbage collection).
    Bimodal {
        /// The low mode: [mean, standard deviation] in ms.
        low_ms: [f64; 2],
        /// The high mode: [mean, standard deviation] in ms.
        high_ms: [f64; 2],
        /// Probability of the high mode.
        high: f64,
    },
}

impl DelayConfig {
    /// The family's name, as `family = "..."` gives it.
    pub fn family(&self) -> &'static str {
        match self {
            DelayConfig::Normal { .. } => "normal",
            DelayConfig::LogNormal { .. } => "lognormal",
            DelayConfig::Gamma { .. } => "gamma",
            DelayConfig::Pareto { .. } => "pareto",
            DelayConfig::Bimodal { .. } => "bimodal",
        }
    }

    /// The mean it is given by, in ms.
    pub fn mean_ms(&self) -> f64 {
        match *self {
            DelayConfig::Normal { mean_ms, .. }
            | DelayConfig::LogNormal { mean_ms, .. }
            | DelayConfig::Gamma { mean_ms, .. }
            | DelayConfig::Pareto { mean_ms, .. } => mean_ms,
            DelayConfig::Bimodal {
                low_ms,
                high_ms,
                high,
            } => (1.0 - high) * low_ms[0] + high * high_ms[0],
        }
    }

    /// The inline TOML table that describes it.
    fn to_toml(&self) -> String {
        let fields = match self {
            DelayConfig::Normal { mean_ms, sd_ms } => {
                format!("mean_ms = {}, sd_ms = {}", num(*mean_ms), num(*sd_ms))
            }
            DelayConfig::LogNormal { mean_ms, sigma } => {
                format!("mean_ms = {}, sigma = {}", num(*mean_ms), num(*sigma))
            }
            DelayConfig::Gamma { mean_ms, shape } => {
                format!("mean_ms = {}, shape = {}", num(*mean_ms), num(*shape))
            }
            DelayConfig::Pareto { mean_ms, alpha } => {
                format!("mean_ms = {}, alpha = {}", num(*mean_ms), num(*alpha))
            }
            DelayConfig::Bimodal {
                low_ms,
                high_ms,
                high,
            } => format!(
                "low_ms = {}, high_ms = {}, high = {}",
                pair(*low_ms),
                pair(*high_ms),
                num(*high)
            ),
        };
        format!("{{ family = \"{}\", {fields} }}", self.family())
    }

    /// The compiled sampler, in ns; errors name what is out of range.
    fn compile(&self) -> Result<Delay> {
        let finite = |what: &str, x: f64| -> Result<f64> {
            if x.is_finite() && x >= 0.0 {
                Ok(x)
            } else {
                bail!(
                    "{} delay: {what} must be a finite number ≥ 0, not {x}",
                    self.family()
                )
            }
        };
        let positive = |what: &str, x: f64| -> Result<f64> {
            if x.is_finite() && x > 0.0 {
                Ok(x)
            } else {
                bail!(
                    "{} delay: {what} must be a finite number > 0, not {x}",
                    self.family()
                )
            }
        };
        Ok(match *self {
            DelayConfig::Normal { mean_ms, sd_ms } => Delay::Normal {
                mean_ns: finite("mean_ms", mean_ms)? * 1e6,
                sd_ns: finite("sd_ms", sd_ms)? * 1e6,
            },
            DelayConfig::LogNormal { mean_ms, sigma } => {
                let mean = positive("mean_ms", mean_ms)? * 1e6;
                let sigma = finite("sigma", sigma)?;
                Delay::LogNormal(log_normal(mean, sigma)?)
            }
            DelayConfig::Gamma { mean_ms, shape } => {
                let mean = positive("mean_ms", mean_ms)? * 1e6;
                let shape = positive("shape", shape)?;
                Delay::Gamma(Gamma::new(shape, mean / shape).context("gamma delay")?)
            }
            DelayConfig::Pareto { mean_ms, alpha } => {
                let mean = positive("mean_ms", mean_ms)? * 1e6;
                if !(alpha.is_finite() && alpha > 1.0) {
                    bail!("pareto delay: alpha must be > 1 (a finite mean), not {alpha}");
                }
                Delay::Pareto(
                    Pareto::new(mean * (alpha - 1.0) / alpha, alpha).context("pareto delay")?,
                )
            }
            DelayConfig::Bimodal {
                low_ms,
                high_ms,
                high,
            } => {
                if !(0.0..=1.0).contains(&high) {
                    bail!("bimodal delay: high must be a probability, not {high}");
                }
                let mode = |what: &str, [mean, sd]: [f64; 2]| -> Result<LogNormal<f64>> {
                    let mean = positive(what, mean)? * 1e6;
                    let sd = finite(what, sd)? * 1e6;
                    log_normal(mean, (1.0 + (sd / mean).powi(2)).ln().sqrt())
                };
                Delay::Bimodal {
                    high,
                    low: mode("low_ms", low_ms)?,
                    high_mode: mode("high_ms", high_ms)?,
                }
            }
        })
    }
}

/// A log-normal with mean `mean` and log-sd `sigma`.
fn log_normal(mean: f64, sigma: f64) -> Result<LogNormal<f64>> {
    LogNormal::new(mean.ln() - sigma * sigma / 2.0, sigma).context("log-normal delay")
}

/// A compiled delay distribution, in ns. Every draw is at least [`MIN_DELAY_NS`].
#[derive(Clone, Debug)]
pub enum Delay {
    /// Gaussian (drawn as the generator always drew `delay_ms`).
    Normal {
        /// Mean, ns.
        mean_ns: f64,
        /// Standard deviation, ns.
        sd_ns: f64,
    },
    /// Log-normal.
    LogNormal(LogNormal<f64>),
    /// Gamma.
    Gamma(Gamma<f64>),
    /// Pareto.
    Pareto(Pareto<f64>),
    /// A mixture of two log-normals.
    Bimodal {
        /// Probability of the high mode.
        high: f64,
        /// The low mode.
        low: LogNormal<f64>,
        /// The high mode.
        high_mode: LogNormal<f64>,
    },
}

/// The shortest delay drawn, ns.
pub const MIN_DELAY_NS: f64 = 1_000.0;

impl Delay {
    /// One draw, in ns, at least [`MIN_DELAY_NS`].
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let x = match self {
            Delay::Normal { mean_ns, sd_ns } => {
                if *sd_ns <= 0.0 {
                    *mean_ns
                } else {
                    match Normal::new(*mean_ns, *sd_ns) {
                        Ok(n) => n.sample(rng),
                        Err(_) => *mean_ns,
                    }
                }
            }
            Delay::LogNormal(d) => d.sample(rng),
            Delay::Gamma(d) => d.sample(rng),
            Delay::Pareto(d) => d.sample(rng),
            Delay::Bimodal {
                high,
                low,
                high_mode,
            } => {
                if rng.random::<f64>() < *high {
                    high_mode.sample(rng)
                } else {
                    low.sample(rng)
                }
            }
        };
        if x.is_finite() {
            x.max(MIN_DELAY_NS)
        } else {
            MIN_DELAY_NS
        }
    }
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
    /// The sender's delay after the trigger.
    pub delay: Delay,
    /// Mean size.
    pub bytes: u32,
    /// For a return: the call it answers. `None`: it is a call.
    pub answers: Option<usize>,
    /// For a call that may be skipped: the probability that it is.
    pub skip: f64,
    /// For a call that may be skipped: the messages that go with it (itself first, its
    /// return last), in order.
    pub subtree: Vec<usize>,
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

    /// Checks and compiles a system description built in memory (`origin` names it in
    /// errors).
    pub fn from_config(config: SystemConfig, origin: &str) -> Result<System> {
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
        let delay = match (&m.delay_ms, &m.delay) {
            (Some(_), Some(_)) => bail!("message {i}: give delay_ms or delay, not both"),
            (None, Some(d)) => d.compile().with_context(|| format!("message {i}"))?,
            (given, None) => {
                let [mean, sd] = given.unwrap_or(DEFAULT_DELAY_MS);
                if mean < 0.0 || sd < 0.0 {
                    bail!("message {i}: delay_ms must not be negative");
                }
                Delay::Normal {
                    mean_ns: mean * 1e6,
                    sd_ns: sd * 1e6,
                }
            }
        };
        if !(0.0..=1.0).contains(&m.skip) {
            bail!("message {i}: skip must be a probability in [0, 1]");
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
        if m.skip > 0.0 && answers.is_some() {
            bail!("message {i}: only a call may be skipped (skip), and this is a return");
        }
        messages.push(MessageTemplate {
            from,
            to,
            after,
            delay,
            bytes: m.bytes.max(1),
            answers,
            skip: m.skip,
            subtree: Vec::new(),
        });
    }
    if !messages[0].after.is_empty() {
        bail!("message 0 must be the root (no `after`)");
    }
    if messages[0].skip > 0.0 {
        bail!("message 0, the root, cannot be skipped");
    }
    for (i, m) in messages.iter().enumerate().skip(1) {
        if m.after.is_empty() {
            bail!("message {i}: only message 0 may be a root; give `after`");
        }
    }
    for c in 0..messages.len() {
        if messages[c].skip > 0.0 {
            messages[c].subtree = subtree(&messages, c).with_context(|| format!("message {c}"))?;
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

/// The subtree of call `c`: itself, the messages that follow from it (through `after`), up to
/// and including its return but not past it.
fn subtree(messages: &[MessageTemplate], c: usize) -> Result<Vec<usize>> {
    let Some(ret) = messages.iter().position(|m| m.answers == Some(c)) else {
        bail!("skip: the call has no return, so its caller would never go on");
    };
    let mut inside = vec![false; messages.len()];
    inside[c] = true;
    let mut list = vec![c];
    for (i, m) in messages.iter().enumerate().skip(c + 1) {
        if m.after.iter().any(|&a| inside[a] && a != ret) {
            inside[i] = true;
            list.push(i);
        }
    }
    if !inside[ret] {
        bail!("skip: its return {ret} does not follow from the call");
    }
    Ok(list)
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
    fn delay_families_have_their_means() {
        use rand::SeedableRng;
        let families = [
            DelayConfig::Normal {
                mean_ms: 2.0,
                sd_ms: 0.4,
            },
            DelayConfig::LogNormal {
                mean_ms: 2.0,
                sigma: 0.8,
            },
            // Heavy-tailed: ln(delay) spread 1.5 (the sd is 2.9 times the mean).
            DelayConfig::LogNormal {
                mean_ms: 0.5,
                sigma: 1.5,
            },
            DelayConfig::Gamma {
                mean_ms: 3.0,
                shape: 2.0,
            },
            DelayConfig::Pareto {
                mean_ms: 2.0,
                alpha: 3.5,
            },
            DelayConfig::Bimodal {
                low_ms: [1.0, 0.2],
                high_ms: [10.0, 2.0],
                high: 0.2,
            },
        ];
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(11);
        for family in families {
            let delay = family.compile().unwrap();
            let n = 400_000;
            let mean_ns = (0..n).map(|_| delay.sample(&mut rng)).sum::<f64>() / n as f64;
            let want = family.mean_ms() * 1e6;
            assert!(
                (mean_ns / want - 1.0).abs() < 0.02,
                "{family:?}: mean {mean_ns} ns, want {want}"
            );
        }
    }

    #[test]
    fn delays_and_skips_are_read_and_checked() {
        let system = |messages: &str| {
            format!(
                r#"
name = "x"
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
messages = [ {messages} ]
"#
            )
        };
        let good = system(
            r#"{ from = "client", to = "a" },
               { from = "a", to = "b", after = 0, skip = 0.3, delay = { family = "gamma", mean_ms = 2, shape = 3 } },
               { from = "b", to = "c", after = 1, delay = { family = "pareto", mean_ms = 1, alpha = 2 } },
               { from = "c", to = "b", after = 2, delay = { family = "bimodal", low_ms = [1, 0.1], high_ms = [9, 1], high = 0.1 } },
               { from = "b", to = "a", after = 3, delay = { family = "lognormal", mean_ms = 1, sigma = 1.5 } },
               { from = "a", to = "client", after = 4, delay_ms = [1, 0.5] }"#,
        );
        let s = System::from_toml(&good, "good").unwrap();
        let t = &s.tracelets[0];
        assert_eq!(t.messages[1].skip, 0.3);
        assert_eq!(t.messages[1].subtree, vec![1, 2, 3, 4]);
        assert!(matches!(t.messages[1].delay, Delay::Gamma(_)));
        assert!(
            matches!(t.messages[5].delay, Delay::Normal { mean_ns, sd_ns } if mean_ns == 1e6 && sd_ns == 5e5)
        );
        // What it prints reads back to the same.
        let again = System::from_toml(&s.config.to_toml(), "printed").unwrap();
        assert_eq!(again.config.to_toml(), s.config.to_toml());
        assert_eq!(again.tracelets[0].messages[1].subtree, vec![1, 2, 3, 4]);

        for (messages, expect) in [
            (
                r#"{ from = "client", to = "a" }, { from = "a", to = "client", after = 0, skip = 0.5 }"#,
                "only a call may be skipped",
            ),
            (
                r#"{ from = "client", to = "a", skip = 0.5 }, { from = "a", to = "client", after = 0 }"#,
                "the root, cannot be skipped",
            ),
            (
                r#"{ from = "client", to = "a" }, { from = "a", to = "client", after = 0, delay_ms = [1, 0], delay = { family = "gamma", mean_ms = 1, shape = 1 } }"#,
                "not both",
            ),
            (
                r#"{ from = "client", to = "a" }, { from = "a", to = "client", after = 0, delay = { family = "pareto", mean_ms = 1, alpha = 1 } }"#,
                "alpha must be > 1",
            ),
            (
                r#"{ from = "client", to = "a" }, { from = "a", to = "client", after = 0, delay = { family = "cauchy", mean_ms = 1 } }"#,
                "invalid system description",
            ),
            (
                r#"{ from = "client", to = "a" }, { from = "a", to = "b", after = 0, skip = 0.5 }, { from = "a", to = "client", after = 0 }"#,
                "has no return",
            ),
        ] {
            let err = format!(
                "{:#}",
                System::from_toml(&system(messages), "x").unwrap_err()
            );
            assert!(err.contains(expect), "{messages}: {err}");
        }
    }

    #[test]
    fn presets_print_and_read_back() {
        for (name, text) in PRESETS {
            let s = System::from_toml(text, name).unwrap();
            let printed = s.config.to_toml();
            let again = System::from_toml(&printed, name).unwrap_or_else(|e| panic!("{e:#}"));
            assert_eq!(again.config.to_toml(), printed, "{name}");
            for (a, b) in s.tracelets.iter().zip(&again.tracelets) {
                let shape = |t: &Tracelet| -> Vec<_> {
                    t.messages
                        .iter()
                        .map(|m| (m.from, m.to, m.after.clone(), m.answers, m.bytes))
                        .collect()
                };
                assert_eq!(shape(a), shape(b), "{name}");
            }
        }
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
